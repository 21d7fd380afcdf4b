//! A TCP echo server on the runtime.
//!
//! ```text
//! cargo run -p runtime --example echo -- [ADDRESS] [THREADS] [busy]
//! # e.g. cargo run -p runtime --example echo -- 127.0.0.1:7878 2
//! ```
//! Press Enter (or close stdin) to shut it down: a plain thread calls
//! `ShutdownHandle::shutdown`, the way a signal-handling thread would.
//! `RUST_LOG=runtime=debug` shows the runtime's own log lines.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use runtime::{
    CloseReason, ConnectionHandler, ListenerId, PollMode, Runtime, RuntimeConfig, SendParts, SendSource, Service,
};

/// Echoed chunks, sent with one vectored send.
struct EchoBatch(Vec<Vec<u8>>);

impl SendSource for EchoBatch {
    fn parts<'a>(&'a self, out: &mut SendParts<'a>) {
        for chunk in &self.0 {
            out.bytes(chunk);
        }
    }
    fn total_len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }
}

struct Echo {
    peer: SocketAddr,
    /// Bytes received while a send was in flight, sent together next.
    waiting: Vec<Vec<u8>>,
    /// Buffers handed back by on_sent, reused so steady state allocates nothing.
    spare: Vec<Vec<u8>>,
    /// The batch Vec itself, reused too.
    spare_batch: Vec<Vec<u8>>,
}

impl ConnectionHandler for Echo {
    type Batch = EchoBatch;

    fn on_receive(&mut self, data: &[u8], _now: Instant) {
        let mut chunk = self.spare.pop().unwrap_or_default();
        chunk.clear();
        chunk.extend_from_slice(data);
        self.waiting.push(chunk);
    }

    fn take_send(&mut self) -> Option<EchoBatch> {
        if self.waiting.is_empty() {
            return None;
        }
        let next = std::mem::take(&mut self.spare_batch);
        Some(EchoBatch(std::mem::replace(&mut self.waiting, next)))
    }

    fn on_sent(&mut self, mut batch: EchoBatch, _now: Instant) {
        self.spare.append(&mut batch.0);
        self.spare_batch = batch.0;
    }

    fn on_timer(&mut self, _now: Instant) {}

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn wants_close(&self) -> bool {
        false
    }

    fn on_closed(&mut self, reason: CloseReason) {
        println!("{} closed: {reason:?}", self.peer);
    }
}

struct EchoService;

impl Service for EchoService {
    type Handler = Echo;

    fn accept(
        &self,
        thread: usize,
        _listener: ListenerId,
        _local: SocketAddr,
        peer: SocketAddr,
        _storage_waker: &std::task::Waker,
        _now: Instant,
    ) -> Option<Echo> {
        println!("{peer} connected (thread {thread})");
        Some(Echo { peer, waiting: Vec::new(), spare: Vec::new(), spare_batch: Vec::new() })
    }
}

fn main() {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let mut args = std::env::args().skip(1);
    let address: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:7878").parse().expect("ADDRESS");
    let threads: usize = args.next().as_deref().unwrap_or("1").parse().expect("THREADS");
    let poll_mode = if args.next().as_deref() == Some("busy") { PollMode::BusyPoll } else { PollMode::Sleep };
    let config =
        RuntimeConfig { threads, pin_threads: true, poll_mode, listeners: vec![address], ..RuntimeConfig::default() };
    let runtime = match Runtime::start(config, Arc::new(EchoService)) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("echo: {error}");
            std::process::exit(1);
        }
    };
    println!("echo listening on {} with {threads} thread(s); press Enter to stop", runtime.local_addrs()[0]);
    let shutdown = runtime.shutdown_handle();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        shutdown.shutdown();
    });
    if let Err(error) = runtime.join() {
        eprintln!("echo: {error}");
        std::process::exit(1);
    }
}

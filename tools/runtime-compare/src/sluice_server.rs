//! The Sluice runtime crate itself (crates/runtime), doing exactly the same
//! per-request work as the other flavours, to check it keeps the thin loop's
//! numbers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use runtime::{CloseReason, ConnectionHandler, ListenerId, PollMode, Runtime, RuntimeConfig, SendParts, SendSource, Service};

use crate::common::{RequestParser, RECV_BUFFER_BYTES};

struct Responses(Vec<u8>);

impl SendSource for Responses {
    fn parts<'a>(&'a self, out: &mut SendParts<'a>) {
        out.bytes(&self.0);
    }
    fn total_len(&self) -> usize {
        self.0.len()
    }
}

struct Handler {
    parser: RequestParser,
    pending: Vec<u8>,
    spare: Option<Vec<u8>>,
}

impl ConnectionHandler for Handler {
    type Batch = Responses;
    fn on_receive(&mut self, data: &[u8], _now: Instant) {
        self.parser.consume(data, &mut self.pending);
    }
    fn take_send(&mut self) -> Option<Responses> {
        if self.pending.is_empty() {
            return None;
        }
        let next = self.spare.take().unwrap_or_else(|| Vec::with_capacity(1 << 20));
        Some(Responses(std::mem::replace(&mut self.pending, next)))
    }
    fn on_sent(&mut self, mut batch: Responses, _now: Instant) {
        batch.0.clear();
        self.spare = Some(batch.0);
    }
    fn on_timer(&mut self, _now: Instant) {}
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    fn wants_close(&self) -> bool {
        false
    }
    fn on_closed(&mut self, _reason: CloseReason) {}
}

struct Bench;

impl Service for Bench {
    type Handler = Handler;
    fn accept(&self, _: usize, _: ListenerId, _: SocketAddr, _: SocketAddr, _: &Waker, _: Instant) -> Option<Handler> {
        Some(Handler { parser: RequestParser::default(), pending: Vec::with_capacity(1 << 20), spare: None })
    }
}

pub fn run(address: SocketAddr, threads: usize, busy_poll: bool) {
    let config = RuntimeConfig {
        threads,
        pin_threads: true,
        poll_mode: if busy_poll { PollMode::BusyPoll } else { PollMode::Sleep },
        listeners: vec![address],
        recv_buffer_bytes: RECV_BUFFER_BYTES,
        ring_entries: 1024,
        tcp_nodelay: true,
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::start(config, Arc::new(Bench)).expect("runtime start");
    runtime.join().expect("runtime join");
}

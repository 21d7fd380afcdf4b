//! A configurable test service and client helpers shared by the integration
//! tests. Every wait is bounded so a broken runtime fails a test instead of
//! hanging it.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use runtime::{
    CloseReason, ConnectionHandler, ListenerId, PollMode, Runtime, RuntimeConfig, SendParts, SendSource, Service,
};

/// The longest any single test step may take.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug)]
pub enum Behavior {
    /// Echo every byte back, batching whatever arrived while a send was in flight.
    Echo,
    /// For every byte received, queue one batch of `bytes` patterned bytes
    /// (split into 64 KiB slices) to force partial sends.
    BigResponse { bytes: usize },
    /// Answer the first newline-terminated line with "bye:<line>\n", then ask to close.
    RespondThenClose,
    /// Send "tick\n" every `interval_ms`, `ticks` times, then ask to close.
    Timer { interval_ms: u64, ticks: usize },
    /// Report pending work for `polls` polls after the first byte, then send "polled\n".
    PendingWork { polls: usize },
    /// On the first byte, start a thread that sleeps `delay_ms`, marks the work done
    /// and wakes the storage waker; report no pending work meanwhile. The poll after
    /// the wake sends "woken\n".
    StorageWake { delay_ms: u64 },
    /// Panic in on_receive (a buggy handler).
    PanicOnReceive,
    /// After on_closed, `drain` says "not yet" until a thread started then has slept
    /// `delay_ms` and woken the storage waker (as storage requests of a closed
    /// connection finishing on librbd's threads would).
    DrainAfterClose { delay_ms: u64 },
}

/// What all handlers of one service observed. Shared with the test thread.
#[derive(Default)]
pub struct Events {
    pub accepted: AtomicUsize,
    pub closed: Mutex<Vec<CloseReason>>,
    pub batches_sent: AtomicUsize,
    pub bytes_received: AtomicUsize,
    pub listeners_seen: Mutex<Vec<ListenerId>>,
    /// Anything a handler found wrong (callback after close, wrong thread...).
    pub violations: Mutex<Vec<String>>,
    /// `drain` calls that returned false, and those that returned true.
    pub drains_pending: AtomicUsize,
    pub drains_done: AtomicUsize,
    /// DrainAfterClose handlers dropped before their drain returned true.
    pub dropped_undrained: AtomicUsize,
}

impl Events {
    pub fn closed_count(&self) -> usize {
        self.closed.lock().unwrap().len()
    }

    pub fn wait_for_closed(&self, count: usize) -> Vec<CloseReason> {
        wait_until(|| self.closed_count() >= count, "connections to close");
        self.closed.lock().unwrap().clone()
    }

    pub fn assert_no_violations(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "handler contract violations: {violations:?}");
    }
}

pub struct TestService {
    pub behavior: Behavior,
    pub events: Arc<Events>,
    pub refuse: bool,
}

impl Service for TestService {
    type Handler = TestHandler;

    fn accept(
        &self,
        _thread: usize,
        listener: ListenerId,
        _local: SocketAddr,
        _peer: SocketAddr,
        storage_waker: &std::task::Waker,
        now: Instant,
    ) -> Option<TestHandler> {
        self.events.listeners_seen.lock().unwrap().push(listener);
        if self.refuse {
            return None;
        }
        self.events.accepted.fetch_add(1, Ordering::SeqCst);
        let deadline = match self.behavior {
            Behavior::Timer { interval_ms, .. } => Some(now + Duration::from_millis(interval_ms)),
            _ => None,
        };
        Some(TestHandler {
            behavior: self.behavior,
            events: Arc::clone(&self.events),
            owner: std::thread::current().id(),
            outgoing: Vec::new(),
            spare: Vec::new(),
            line: Vec::new(),
            want_close: false,
            closed: false,
            deadline,
            ticks_sent: 0,
            polls_left: None,
            in_flight: 0,
            storage_waker: storage_waker.clone(),
            woken: None,
            storage_answered: false,
            drained: None,
        })
    }
}

/// A batch of owned chunks, sent with one vectored send.
pub struct Chunks(pub Vec<Vec<u8>>);

impl SendSource for Chunks {
    fn parts<'a>(&'a self, out: &mut SendParts<'a>) {
        for chunk in &self.0 {
            out.bytes(chunk);
        }
    }
    fn total_len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }
}

pub struct TestHandler {
    behavior: Behavior,
    events: Arc<Events>,
    owner: ThreadId,
    outgoing: Vec<Vec<u8>>,
    /// Chunks returned by on_sent, reused for the next batch.
    spare: Vec<Vec<u8>>,
    line: Vec<u8>,
    want_close: bool,
    closed: bool,
    deadline: Option<Instant>,
    ticks_sent: usize,
    polls_left: Option<usize>,
    in_flight: usize,
    storage_waker: std::task::Waker,
    /// Set by the StorageWake behavior's thread; None until it is started.
    woken: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The StorageWake behavior answered its wake: nothing awaits storage any more.
    storage_answered: bool,
    /// Set by the DrainAfterClose behavior's thread; None until on_closed.
    drained: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Byte `index` of a BigResponse batch: a pattern the client can verify.
pub fn pattern_byte(index: usize) -> u8 {
    (index % 251) as u8
}

impl TestHandler {
    fn check(&self, callback: &str) {
        let mut problems = Vec::new();
        if self.closed {
            problems.push(format!("{callback} after on_closed"));
        }
        if std::thread::current().id() != self.owner {
            problems.push(format!("{callback} on a different thread"));
        }
        if !problems.is_empty() {
            self.events.violations.lock().unwrap().extend(problems);
        }
    }

    fn queue(&mut self, bytes: &[u8]) {
        let mut chunk = self.spare.pop().unwrap_or_default();
        chunk.clear();
        chunk.extend_from_slice(bytes);
        self.outgoing.push(chunk);
    }
}

impl ConnectionHandler for TestHandler {
    type Batch = Chunks;

    fn on_receive(&mut self, data: &[u8], _now: Instant) {
        self.check("on_receive");
        assert!(!data.is_empty(), "on_receive with no data");
        if self.want_close {
            self.events.violations.lock().unwrap().push("on_receive after wants_close".into());
        }
        self.events.bytes_received.fetch_add(data.len(), Ordering::SeqCst);
        match self.behavior {
            Behavior::Echo => self.queue(data),
            Behavior::BigResponse { bytes } => {
                for _ in data {
                    let pattern: Vec<u8> = (0..bytes).map(pattern_byte).collect();
                    for slice in pattern.chunks(64 * 1024) {
                        self.queue(slice);
                    }
                }
            }
            Behavior::RespondThenClose => {
                self.line.extend_from_slice(data);
                if let Some(end) = self.line.iter().position(|&byte| byte == b'\n') {
                    let mut reply = b"bye:".to_vec();
                    reply.extend_from_slice(&self.line[..=end]);
                    self.queue(&reply);
                    self.want_close = true;
                }
            }
            Behavior::Timer { .. } => {}
            Behavior::PanicOnReceive => panic!("test handler panics on purpose"),
            Behavior::DrainAfterClose { .. } => {}
            Behavior::StorageWake { delay_ms } => {
                if self.woken.is_none() {
                    let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let (flag, waker) = (Arc::clone(&woken), self.storage_waker.clone());
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(delay_ms));
                        flag.store(true, Ordering::Release);
                        waker.wake();
                    });
                    self.woken = Some(woken);
                }
            }
            Behavior::PendingWork { polls } => {
                if self.polls_left.is_none() {
                    self.polls_left = Some(polls);
                }
            }
        }
    }

    fn take_send(&mut self) -> Option<Chunks> {
        self.check("take_send");
        if self.in_flight != 0 {
            self.events.violations.lock().unwrap().push("take_send while a send is in flight".into());
        }
        if self.outgoing.is_empty() {
            return None;
        }
        self.in_flight += 1;
        Some(Chunks(std::mem::take(&mut self.outgoing)))
    }

    fn on_sent(&mut self, batch: Chunks, _now: Instant) {
        self.check("on_sent");
        self.in_flight -= 1;
        self.events.batches_sent.fetch_add(1, Ordering::SeqCst);
        if self.spare.len() < 64 {
            self.spare.extend(batch.0);
        }
    }

    fn on_timer(&mut self, now: Instant) {
        self.check("on_timer");
        let Behavior::Timer { interval_ms, ticks } = self.behavior else { return };
        let Some(deadline) = self.deadline else { return };
        if now < deadline {
            return; // "any time the runtime wants": re-check
        }
        self.queue(b"tick\n");
        self.ticks_sent += 1;
        if self.ticks_sent == ticks {
            self.deadline = None;
            self.want_close = true;
        } else {
            self.deadline = Some(now + Duration::from_millis(interval_ms));
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn has_pending_work(&self) -> bool {
        self.polls_left.is_some_and(|left| left > 0)
    }

    fn awaits_storage(&self) -> bool {
        self.woken.is_some() && !self.storage_answered
    }

    fn poll(&mut self, _now: Instant) {
        self.check("poll");
        if let Behavior::StorageWake { .. } = self.behavior {
            // Polled after any wake on the thread: only the first poll that sees
            // the flag answers.
            if self.woken.as_ref().is_some_and(|flag| flag.swap(false, Ordering::Acquire)) {
                self.storage_answered = true;
                self.queue(b"woken\n");
            }
            return;
        }
        match self.polls_left {
            Some(left) if left > 0 => {
                self.polls_left = Some(left - 1);
                if left == 1 {
                    self.queue(b"polled\n");
                }
            }
            _ => self.events.violations.lock().unwrap().push("poll without pending work".into()),
        }
    }

    fn wants_close(&self) -> bool {
        self.want_close
    }

    fn on_closed(&mut self, reason: CloseReason) {
        self.check("on_closed");
        self.closed = true;
        self.events.closed.lock().unwrap().push(reason);
        if let Behavior::DrainAfterClose { delay_ms } = self.behavior {
            let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (flag, waker) = (Arc::clone(&drained), self.storage_waker.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay_ms));
                flag.store(true, Ordering::Release);
                waker.wake();
            });
            self.drained = Some(drained);
        }
    }

    fn drain(&mut self, _now: Instant) -> bool {
        if !self.closed {
            self.events.violations.lock().unwrap().push("drain before on_closed".into());
        }
        if std::thread::current().id() != self.owner {
            self.events.violations.lock().unwrap().push("drain on a different thread".into());
        }
        let done = match &self.drained {
            None => true,
            Some(flag) => flag.load(Ordering::Acquire),
        };
        let counter = if done { &self.events.drains_done } else { &self.events.drains_pending };
        counter.fetch_add(1, Ordering::SeqCst);
        done
    }
}

pub fn config(threads: usize, poll_mode: PollMode) -> RuntimeConfig {
    RuntimeConfig {
        threads,
        pin_threads: false,
        poll_mode,
        listeners: vec!["127.0.0.1:0".parse().unwrap()],
        recv_buffer_bytes: 64 * 1024,
        shared_receive_buffers: runtime::DEFAULT_SHARED_RECEIVE_BUFFERS,
        ring_entries: 256,
        tcp_nodelay: true,
    }
}

pub fn start(behavior: Behavior, config: RuntimeConfig) -> (Runtime, Arc<Events>) {
    let events = Arc::new(Events::default());
    let service = Arc::new(TestService { behavior, events: Arc::clone(&events), refuse: false });
    let runtime = Runtime::start(config, service).expect("runtime starts");
    (runtime, events)
}

pub fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(STEP_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(STEP_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

pub fn read_exact_bytes(stream: &mut TcpStream, count: usize) -> Vec<u8> {
    let mut buffer = vec![0u8; count];
    stream.read_exact(&mut buffer).expect("read response");
    buffer
}

pub fn read_to_end(stream: &mut TcpStream) -> Vec<u8> {
    let mut buffer = Vec::new();
    stream.read_to_end(&mut buffer).expect("read until EOF");
    buffer
}

/// Reads until EOF or a reset (which a close with unread input may cause),
/// returning everything that arrived before it.
pub fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return received,
            Ok(count) => received.extend_from_slice(&buffer[..count]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return received,
            Err(error) => panic!("read failed: {error}"),
        }
    }
}

pub fn write_all(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).expect("write request");
}

pub fn wait_until(mut condition: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Shuts the runtime down and joins it, failing if that takes too long.
pub fn shutdown_and_join(runtime: Runtime) -> Duration {
    let started = Instant::now();
    runtime.shutdown_handle().shutdown();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || sender.send(runtime.join()));
    let result = receiver.recv_timeout(STEP_TIMEOUT).expect("runtime joins in time");
    result.expect("runtime threads exit cleanly");
    started.elapsed()
}

/// A small deterministic PRNG (xorshift64*), so tests need no extra crates.
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

impl Drop for TestHandler {
    fn drop(&mut self) {
        let undrained = self.drained.as_ref().is_some_and(|flag| !flag.load(Ordering::Acquire));
        if undrained {
            self.events.dropped_undrained.fetch_add(1, Ordering::SeqCst);
        }
    }
}

//! Test-only backends shared by the composition tests.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use storage::{Backend, BackendQueue, Geometry, IoCompletion, IoError, IoOp, IoRequest};

/// Wraps a backend and holds every completion for `delay_reaps` reap calls, so
/// compositions on top cannot rely on members completing inside `submit`.
pub struct DelayedBackend {
    inner: Arc<dyn Backend>,
    delay_reaps: u32,
}

impl DelayedBackend {
    pub fn new(inner: Arc<dyn Backend>, delay_reaps: u32) -> Arc<Self> {
        Arc::new(Self { inner, delay_reaps })
    }
}

impl Backend for DelayedBackend {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn has_volatile_write_cache(&self) -> bool {
        self.inner.has_volatile_write_cache()
    }
    fn kind(&self) -> &'static str {
        "delayed"
    }
    fn retains_data(&self) -> bool {
        self.inner.retains_data()
    }
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(DelayedQueue {
            inner: self.inner.open_queue(),
            delay_reaps: self.delay_reaps,
            held: VecDeque::new(),
            scratch: Vec::new(),
            submitted: 0,
        })
    }
}

struct DelayedQueue {
    inner: Box<dyn BackendQueue>,
    delay_reaps: u32,
    /// Completions with the number of reap calls they still wait for.
    held: VecDeque<(u32, IoCompletion)>,
    scratch: Vec<IoCompletion>,
    submitted: usize,
}

impl BackendQueue for DelayedQueue {
    fn submit(&mut self, request: IoRequest) {
        self.submitted += 1;
        self.inner.submit(request);
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        self.inner.reap(&mut self.scratch);
        for completion in self.scratch.drain(..) {
            self.held.push_back((self.delay_reaps, completion));
        }
        // Release in a rotated order so completions also come back out of order.
        let mut keep = VecDeque::with_capacity(self.held.len());
        while let Some((remaining, completion)) = self.held.pop_back() {
            if remaining == 0 {
                self.submitted -= 1;
                out.push(completion);
            } else {
                keep.push_front((remaining - 1, completion));
            }
        }
        self.held = keep;
    }

    fn in_flight(&self) -> usize {
        self.submitted
    }
}

/// Decides, per request, whether a `FaultyBackend` fails it and with which error.
pub type FaultRule = Arc<dyn Fn(&IoOp) -> Option<IoError> + Send + Sync>;

/// Wraps a backend and fails the requests `rule` names; the others reach `inner`.
/// Failed requests complete at the next reap, with their buffers, as a device's would.
pub struct FaultyBackend {
    pub inner: Arc<dyn Backend>,
    pub rule: FaultRule,
    /// What the wrapper reports as its write cache (a RAID0 test checks that one
    /// member with a volatile cache makes the set report one).
    pub volatile_write_cache: bool,
}

impl FaultyBackend {
    /// Fails every read with `IoError::ReadError`; reports a volatile write cache.
    pub fn failing_reads(inner: Arc<dyn Backend>) -> Self {
        let rule: FaultRule = Arc::new(|op| matches!(op, IoOp::Read { .. }).then_some(IoError::ReadError));
        FaultyBackend { inner, rule, volatile_write_cache: true }
    }

    /// Fails every write with `IoError::WriteFault` while `failing` is set.
    pub fn failing_writes_while(inner: Arc<dyn Backend>, failing: Arc<AtomicBool>) -> Self {
        let volatile_write_cache = inner.has_volatile_write_cache();
        let rule: FaultRule = Arc::new(move |op| {
            (failing.load(Ordering::SeqCst) && matches!(op, IoOp::Write { .. })).then_some(IoError::WriteFault)
        });
        FaultyBackend { inner, rule, volatile_write_cache }
    }
}

impl Backend for FaultyBackend {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn has_volatile_write_cache(&self) -> bool {
        self.volatile_write_cache
    }
    fn kind(&self) -> &'static str {
        "faulty"
    }
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(FaultyQueue { inner: self.inner.open_queue(), rule: Arc::clone(&self.rule), failed: Vec::new() })
    }
}

struct FaultyQueue {
    inner: Box<dyn BackendQueue>,
    rule: FaultRule,
    failed: Vec<IoCompletion>,
}

impl BackendQueue for FaultyQueue {
    fn submit(&mut self, request: IoRequest) {
        match (self.rule)(&request.op) {
            Some(error) => {
                self.failed.push(IoCompletion { token: request.token, result: Err(error), buffer: request.buffer })
            }
            None => self.inner.submit(request),
        }
    }
    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        out.append(&mut self.failed);
        self.inner.reap(out);
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.failed.len()
    }
}

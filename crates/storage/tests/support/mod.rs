//! Test-only backends shared by the composition tests.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::Arc;

use storage::{Backend, BackendQueue, Geometry, IoCompletion, IoRequest};

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

/// Wraps a backend and fails every read with `IoError::ReadError`.
pub struct FailingReadsBackend {
    pub inner: Arc<dyn Backend>,
}

impl Backend for FailingReadsBackend {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn has_volatile_write_cache(&self) -> bool {
        true
    }
    fn kind(&self) -> &'static str {
        "failing-reads"
    }
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(FailingReadsQueue {
            inner: self.inner.open_queue(),
            failed: Vec::new(),
        })
    }
}

struct FailingReadsQueue {
    inner: Box<dyn BackendQueue>,
    failed: Vec<IoCompletion>,
}

impl BackendQueue for FailingReadsQueue {
    fn submit(&mut self, request: IoRequest) {
        if matches!(request.op, storage::IoOp::Read { .. }) {
            self.failed.push(IoCompletion {
                token: request.token,
                result: Err(storage::IoError::ReadError),
                buffer: request.buffer,
            });
        } else {
            self.inner.submit(request);
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

/// Wraps a backend and fails every write with `IoError::WriteFault` while `failing`
/// is set.
pub struct FailingWritesBackend {
    pub inner: Arc<dyn Backend>,
    pub failing: Arc<std::sync::atomic::AtomicBool>,
}

impl Backend for FailingWritesBackend {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn has_volatile_write_cache(&self) -> bool {
        self.inner.has_volatile_write_cache()
    }
    fn kind(&self) -> &'static str {
        "failing-writes"
    }
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(FailingWritesQueue {
            inner: self.inner.open_queue(),
            failing: Arc::clone(&self.failing),
            failed: Vec::new(),
        })
    }
}

struct FailingWritesQueue {
    inner: Box<dyn BackendQueue>,
    failing: Arc<std::sync::atomic::AtomicBool>,
    failed: Vec<IoCompletion>,
}

impl BackendQueue for FailingWritesQueue {
    fn submit(&mut self, request: IoRequest) {
        let failing = self.failing.load(std::sync::atomic::Ordering::SeqCst);
        if failing && matches!(request.op, storage::IoOp::Write { .. }) {
            self.failed.push(IoCompletion {
                token: request.token,
                result: Err(storage::IoError::WriteFault),
                buffer: request.buffer,
            });
        } else {
            self.inner.submit(request);
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

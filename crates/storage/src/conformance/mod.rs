//! The conformance suite: what every [`Backend`] must do, checked through its public
//! submit/reap interface only.
//!
//! In another crate, with `storage = { path = "../storage", features = ["conformance"] }`
//! in `[dev-dependencies]`, a test runs everything (or one check at a time):
//!
//! ```no_run
//! use std::sync::Arc;
//! use storage::{Backend, Geometry, RamBackend};
//!
//! fn make_backend() -> Arc<dyn Backend> {
//!     RamBackend::new(Geometry { block_size_bytes: 512, block_count: 8192 })
//! }
//! storage::conformance::run_all(&make_backend);
//! storage::conformance::read_after_write(&make_backend);
//! ```
//!
//! # What the factory must return
//! Each call must return a new device that no other check is using at the same time
//! (test harnesses run checks in parallel), with at least [`MIN_BLOCK_COUNT`] blocks.
//! Its initial contents do not matter: checks write before they read, and the
//! random-ops check seeds its model by reading the device first. Small devices (a few
//! MiB) make the random-ops check cover the whole device, including its end.
//!
//! Backends whose [`Backend::retains_data`] is false (null) are checked only for
//! completions, tokens, buffers and range/length errors, never for data.
//!
//! Every check panics with a message naming the backend kind and the failing request.

mod checks;
mod oracle;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Backend, BackendQueue, IoCompletion, IoRequest};

pub use checks::{
    buffer_length_mismatch, concurrent_disjoint_ranges, deallocate_reads_zeroes, describes_itself, fua_write,
    out_of_range, queue_depth_round_trip, read_after_write, write_flush_read, write_zeroes,
};
pub use oracle::random_ops_match_model;

/// Smallest device the suite runs on: room for four threads' disjoint ranges.
pub const MIN_BLOCK_COUNT: u64 = 64;

/// How long [`submit_and_wait`] waits for an asynchronous backend before failing.
pub const COMPLETION_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs every check in turn.
pub fn run_all(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    describes_itself(make_backend);
    queue_depth_round_trip(make_backend);
    read_after_write(make_backend);
    write_flush_read(make_backend);
    fua_write(make_backend);
    write_zeroes(make_backend);
    deallocate_reads_zeroes(make_backend);
    out_of_range(make_backend);
    buffer_length_mismatch(make_backend);
    concurrent_disjoint_ranges(make_backend);
    random_ops_match_model(make_backend);
}

/// Submits one request on a queue with nothing else in flight and reaps until its
/// completion arrives (spinning with `yield_now`, for asynchronous backends). Panics if
/// the queue hands back a different token, loses the request, or takes longer than
/// [`COMPLETION_TIMEOUT`].
pub fn submit_and_wait(queue: &mut dyn BackendQueue, request: IoRequest) -> IoCompletion {
    assert_eq!(queue.in_flight(), 0, "submit_and_wait needs an idle queue");
    let token = request.token;
    queue.submit(request);
    let mut completions = reap_exactly(queue, 1);
    let completion = completions.pop().expect("reap_exactly returns one completion");
    assert_eq!(completion.token, token, "completion carries another request's token");
    completion
}

/// Reaps until `count` completions have arrived and nothing is left in flight.
pub fn reap_exactly(queue: &mut dyn BackendQueue, count: usize) -> Vec<IoCompletion> {
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut completions = Vec::with_capacity(count);
    loop {
        queue.reap(&mut completions);
        assert!(completions.len() <= count, "reaped {} completions for {count} requests", completions.len());
        if completions.len() == count {
            assert_eq!(queue.in_flight(), 0, "in_flight is not zero after reaping everything");
            return completions;
        }
        assert!(
            queue.in_flight() > 0,
            "{} of {count} requests vanished: nothing in flight and no completion",
            count - completions.len()
        );
        assert!(Instant::now() < deadline, "no completion within {COMPLETION_TIMEOUT:?}");
        std::thread::yield_now();
    }
}

/// Deterministic data that differs per seed and per byte position, so a misplaced or
/// stale block never compares equal by accident. SplitMix64, 8 bytes per step.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^= mixed >> 31;
        bytes.extend_from_slice(&mixed.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// Panics with the first differing offset instead of dumping two large buffers.
pub(crate) fn assert_same_bytes(actual: &[u8], expected: &[u8], context: &str) {
    assert_eq!(actual.len(), expected.len(), "{context}: length differs");
    if let Some(offset) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        panic!(
            "{context}: data differs first at byte {offset} (got {:#04x}, expected {:#04x})",
            actual[offset], expected[offset]
        );
    }
}

/// A waker that counts its wakes: for checks that a sleeping queue owner (or a waiter
/// on a ticket or a range) is woken, and how often.
#[derive(Debug, Default)]
pub struct WakeCounter(std::sync::atomic::AtomicUsize);

impl WakeCounter {
    /// A new counter at 0.
    pub fn new() -> Arc<WakeCounter> {
        Arc::new(WakeCounter::default())
    }

    /// A waker that counts into this counter.
    pub fn waker(self: &Arc<Self>) -> std::task::Waker {
        std::task::Waker::from(Arc::clone(self))
    }

    /// Wakes so far.
    pub fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl std::task::Wake for WakeCounter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

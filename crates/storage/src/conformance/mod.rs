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
mod io;
mod oracle;

use crate::Backend;
use std::sync::Arc;

pub use checks::{
    buffer_length_mismatch, concurrent_disjoint_ranges, deallocate_reads_zeroes, describes_itself, fua_write,
    out_of_range, queue_depth_round_trip, read_after_write, write_flush_read, write_zeroes,
};
pub use io::{pattern, reap_exactly, submit_and_wait, COMPLETION_TIMEOUT, MIN_BLOCK_COUNT};
pub use oracle::random_ops_match_model;

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

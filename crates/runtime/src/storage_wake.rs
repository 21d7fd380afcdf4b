//! Wakes a runtime thread when storage completes on another thread.
//!
//! Backends such as RBD complete requests on their library's own threads. Rather than
//! have the loop spin while such requests are in flight, each runtime thread hands each
//! connection a [`Waker`] of its own (through [`crate::Service::accept`]); a backend
//! queue calls it after each completion it makes reapable. The wake sets the
//! connection's bit in the thread's ready bitmap, so the loop polls the connections
//! whose storage completed, not all of them (with 1,000 connections and one completion,
//! one poll instead of 1,000). Wakes coalesce: only the first wake after the loop last
//! looked writes the eventfd, so a burst of completions costs one `write(2)` and one
//! loop iteration.
//!
//! Rings whose completions the kernel posts (the file backend's) cannot say whose they
//! are: they signal a second eventfd, after which the loop polls every connection.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

use crate::sys::EventFd;

thread_local! {
    /// The storage-wake eventfd of the runtime thread running here, if any: backends
    /// of this crate whose completions the kernel posts (file rings) register it with
    /// their ring, so the kernel itself rings the doorbell.
    static CURRENT_WAKE_FD: std::cell::Cell<Option<std::os::fd::RawFd>> = const { std::cell::Cell::new(None) };
}

/// Called by a runtime thread before it runs connections.
pub(crate) fn set_current_wake_fd(fd: Option<std::os::fd::RawFd>) {
    CURRENT_WAKE_FD.with(|current| current.set(fd));
}

/// The storage-wake eventfd of the runtime thread running here.
pub(crate) fn current_wake_fd() -> Option<std::os::fd::RawFd> {
    CURRENT_WAKE_FD.with(std::cell::Cell::get)
}

/// The most connections one runtime thread serves at once: the ready bitmap has a bit
/// per connection slot (8 KiB per thread), and a thread's slots never exceed the
/// connections it holds at once. 65,536 is far above what one core can drive (the
/// target's own goal is 10,000 idle connections per gateway); a connection beyond it
/// is refused with a log line that names this limit.
pub const MAX_CONNECTIONS_PER_THREAD: usize = 65_536;

const READY_WORDS: usize = MAX_CONNECTIONS_PER_THREAD / 64;

/// One thread's storage-completion doorbell: an eventfd the loop keeps a read armed on,
/// a flag that coalesces wakes until the loop has looked, and a bit per connection that
/// says whose storage completed.
pub(crate) struct StorageWake {
    event_fd: EventFd,
    /// The doorbell of rings the kernel completes (file backends): polls everyone.
    kernel_event_fd: EventFd,
    /// Set by the first wake since the loop last took it; later wakes skip the write.
    signalled: AtomicBool,
    /// Bit `i`: the connection in slot `i` was woken since the loop last looked.
    ready: Box<[AtomicU64]>,
}

impl StorageWake {
    pub(crate) fn new() -> std::io::Result<Arc<StorageWake>> {
        Ok(Arc::new(StorageWake {
            event_fd: EventFd::new()?,
            kernel_event_fd: EventFd::new()?,
            signalled: AtomicBool::new(false),
            ready: (0..READY_WORDS).map(|_| AtomicU64::new(0)).collect(),
        }))
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.event_fd.raw()
    }

    /// The eventfd rings completed by the kernel signal.
    pub(crate) fn kernel_raw_fd(&self) -> std::os::fd::RawFd {
        self.kernel_event_fd.raw()
    }

    /// Called by the loop when the eventfd read completed, before it polls the
    /// connections. AcqRel pairs with the waker's swap: every completion published
    /// before a wake that found the flag set is visible to the poll that follows.
    pub(crate) fn take(&self) {
        self.signalled.swap(false, Ordering::AcqRel);
    }

    /// After [`StorageWake::take`]: appends the slots woken since the last call, of
    /// those below `slot_bound`, and clears their bits.
    pub(crate) fn take_ready(&self, slot_bound: u32, out: &mut Vec<u32>) {
        let words = (slot_bound as usize).div_ceil(64).min(READY_WORDS);
        for (word, bits) in self.ready[..words].iter().enumerate() {
            if bits.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = bits.swap(0, Ordering::Acquire);
            while bits != 0 {
                out.push((word * 64) as u32 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
    }

    /// The waker of the connection in slot `slot` (below [`MAX_CONNECTIONS_PER_THREAD`]).
    pub(crate) fn connection_waker(self: &Arc<Self>, slot: u32) -> Waker {
        Waker::from(Arc::new(ConnectionWake { thread: Arc::clone(self), slot }))
    }

    /// No allocation, lock or logging: called on a storage library's completion thread.
    fn wake_slot(&self, slot: u32) {
        if let Some(word) = self.ready.get(slot as usize / 64) {
            // Release: the completion the backend published before waking is visible
            // to the loop's Acquire swap of this word.
            word.fetch_or(1 << (slot % 64), Ordering::Release);
        }
        if !self.signalled.swap(true, Ordering::AcqRel) {
            self.event_fd.signal();
        }
    }
}

/// One connection's storage waker: marks its slot and rings the thread's doorbell.
struct ConnectionWake {
    thread: Arc<StorageWake>,
    slot: u32,
}

impl Wake for ConnectionWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.thread.wake_slot(self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(wake: &StorageWake) -> u64 {
        let mut value = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from an eventfd we own (non-blocking).
        let read = unsafe { libc::read(wake.raw_fd(), (&mut value as *mut u64).cast(), 8) };
        if read == 8 {
            value
        } else {
            0
        }
    }

    #[test]
    fn wakes_coalesce_until_the_loop_takes_them() {
        let wake = StorageWake::new().expect("eventfd");
        let waker = wake.connection_waker(3);
        waker.wake_by_ref();
        waker.wake_by_ref();
        wake.connection_waker(200).wake_by_ref();
        assert_eq!(counter(&wake), 1, "three wakes before the loop looked: one write");
        wake.take();
        let mut ready = Vec::new();
        wake.take_ready(201, &mut ready);
        assert_eq!(ready, [3, 200], "the woken slots, each once");
        waker.wake_by_ref();
        assert_eq!(counter(&wake), 1, "a wake after the loop looked writes again");
        assert_eq!(counter(&wake), 0, "nothing more was written");
        ready.clear();
        wake.take_ready(201, &mut ready);
        assert_eq!(ready, [3]);
        ready.clear();
        wake.take_ready(201, &mut ready);
        assert!(ready.is_empty(), "bits are cleared once taken");
    }
}

//! Wakes a runtime thread when storage completes on another thread.
//!
//! Backends such as RBD complete requests on their library's own threads. Rather than
//! have the loop spin while such requests are in flight, each runtime thread hands its
//! connections a [`Waker`] (through [`crate::Service::accept`]); a backend queue calls
//! it after each completion it makes reapable. Wakes coalesce: only the first wake after
//! the loop last looked writes the eventfd, so a burst of completions costs one
//! `write(2)` and one loop iteration.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// One thread's storage-completion doorbell: an eventfd the loop keeps a read armed on,
/// and a flag that coalesces wakes until the loop has looked.
pub(crate) struct StorageWake {
    event_fd: EventFd,
    /// Set by the first wake since the loop last took it; later wakes skip the write.
    signalled: AtomicBool,
}

impl StorageWake {
    pub(crate) fn new() -> std::io::Result<Arc<StorageWake>> {
        Ok(Arc::new(StorageWake { event_fd: EventFd::new()?, signalled: AtomicBool::new(false) }))
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.event_fd.raw()
    }

    /// Called by the loop when the eventfd read completed, before it polls the
    /// connections. AcqRel pairs with the waker's swap: every completion published
    /// before a wake that found the flag set is visible to the poll that follows.
    pub(crate) fn take(&self) {
        self.signalled.swap(false, Ordering::AcqRel);
    }

    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::clone(self))
    }
}

impl Wake for StorageWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    /// No allocation, lock or logging: called on a storage library's completion thread.
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.signalled.swap(true, Ordering::AcqRel) {
            self.event_fd.signal();
        }
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
        let waker = wake.waker();
        waker.wake_by_ref();
        waker.wake_by_ref();
        waker.wake_by_ref();
        assert_eq!(counter(&wake), 1, "three wakes before the loop looked: one write");
        wake.take();
        waker.wake_by_ref();
        assert_eq!(counter(&wake), 1, "a wake after the loop looked writes again");
        assert_eq!(counter(&wake), 0, "nothing more was written");
    }
}

//! The fence of Preempt and Abort: once the command completes, nothing the preempted
//! hosts sent to the namespace may still land.
//!
//! A write already at storage cannot be recalled (librbd and io_uring have no
//! cancel that guarantees the write did not happen), so the command waits until the
//! preempted hosts' writes in flight on the namespace have completed, as the Linux
//! target waits for its per-controller reference counts. Each backend queue a
//! connection opens on a namespace counts its commands of the write group at storage
//! ([`QueueWrites`], written only by the connection's thread); the namespace keeps a
//! list of its queues ([`NamespaceWrites`], locked only when a queue opens and when a
//! fence is taken), from which a Preempt and Abort takes the queues of the preempted
//! hosts that have writes in flight ([`WriteFence`]).
//!
//! Why no write can slip past the fence: a write counts itself in `in_flight` before
//! it checks the reservation (again) on its way to storage, and the fence is taken
//! after the new state is published. Both sides use sequentially consistent
//! operations, so either the write's count is seen by the fence, or the write's check
//! sees the new state and is refused (a preempted host is no longer registered, so
//! every reservation type refuses its writes while the reservation is held). Writes
//! of a preempted host that the new state still permits (no reservation is held at
//! all) are not ordered by the fence: they would be allowed a moment later anyway.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::reservations::HostId;

/// Commands of the write group one backend queue has at storage, with the host whose
/// connection owns the queue.
#[derive(Debug)]
pub struct QueueWrites {
    host: HostId,
    in_flight: AtomicU32,
}

impl QueueWrites {
    /// A write is on its way to storage: counted before its reservation check (see
    /// the module comment for the ordering).
    pub(crate) fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// A counted write completed (or was refused before reaching storage).
    pub(crate) fn end(&self) {
        let previous = self.in_flight.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(previous > 0, "a write ended that never began");
    }

    /// Ends a write begun by `NamespaceWrites::register_for_test`.
    #[doc(hidden)]
    pub fn end_for_test(&self) {
        self.end();
    }

    /// Writes at storage now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::SeqCst)
    }
}

/// The backend queues connections opened on one namespace, for fences.
#[derive(Debug, Default)]
pub struct NamespaceWrites {
    queues: Mutex<Vec<Weak<QueueWrites>>>,
}

impl NamespaceWrites {
    /// A connection of `host` opened a queue on the namespace: its counter, listed
    /// for as long as the queue holds it (queues that went away are pruned here, so
    /// the list stays as long as the number of live queues).
    pub(crate) fn register(&self, host: HostId) -> Arc<QueueWrites> {
        let counter = Arc::new(QueueWrites { host, in_flight: AtomicU32::new(0) });
        let mut queues = self.queues.lock().unwrap_or_else(|poison| poison.into_inner());
        queues.retain(|queue| queue.strong_count() > 0);
        queues.push(Arc::downgrade(&counter));
        counter
    }

    /// A queue of `host` with one write at storage, for tests of code outside this
    /// crate that waits on fences (the gateway's fence thread).
    #[doc(hidden)]
    pub fn register_for_test(&self, host: HostId) -> Arc<QueueWrites> {
        let queue = self.register(host);
        queue.begin();
        queue
    }

    /// The queues of `hosts` with writes at storage now. Take it only after the state
    /// that refuses those hosts is published.
    pub fn fence(&self, hosts: &[HostId]) -> WriteFence {
        if hosts.is_empty() {
            return WriteFence::default();
        }
        let queues = self.queues.lock().unwrap_or_else(|poison| poison.into_inner());
        WriteFence {
            queues: queues
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|queue| hosts.contains(&queue.host) && queue.in_flight() > 0)
                .collect(),
        }
    }
}

/// Queues whose writes a Preempt and Abort waits for.
#[derive(Debug, Default)]
#[must_use = "a fence protects nothing unless someone waits for it"]
pub struct WriteFence {
    queues: Vec<Arc<QueueWrites>>,
}

impl WriteFence {
    /// Every write the fence waits for has completed (a queue dropped with writes
    /// still in flight, after its drain gave up, never drains: the wait's own timeout
    /// ends it).
    pub fn is_drained(&self) -> bool {
        self.queues.iter().all(|queue| queue.in_flight() == 0)
    }

    /// Writes still at storage.
    pub fn writes_in_flight(&self) -> u64 {
        self.queues.iter().map(|queue| u64::from(queue.in_flight())).sum()
    }

    /// Adds `other`'s queues (a state installed in several subsystems).
    pub fn join(&mut self, other: WriteFence) {
        self.queues.extend(other.queues);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: HostId = [0xA; 16];
    const B: HostId = [0xB; 16];

    #[test]
    fn a_fence_waits_only_for_the_named_hosts_queues_with_writes_in_flight() {
        let writes = NamespaceWrites::default();
        let a_busy = writes.register(A);
        let _a_idle = writes.register(A);
        let b_busy = writes.register(B);
        a_busy.begin();
        a_busy.begin();
        b_busy.begin();

        let fence = writes.fence(&[A]);
        assert_eq!(fence.writes_in_flight(), 2, "only A's busy queue");
        assert!(!fence.is_drained());
        a_busy.end();
        assert!(!fence.is_drained());
        a_busy.end();
        assert!(fence.is_drained(), "B's write does not hold A's fence");
        assert!(writes.fence(&[]).is_drained());
    }

    #[test]
    fn queues_that_went_away_leave_the_list() {
        let writes = NamespaceWrites::default();
        for _ in 0..100 {
            let queue = writes.register(A);
            drop(queue);
        }
        let _live = writes.register(B);
        assert_eq!(writes.queues.lock().unwrap().len(), 1);
    }
}

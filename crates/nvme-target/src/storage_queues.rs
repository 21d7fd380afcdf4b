//! The backend queues of one connection: opened on a namespace's first command,
//! polled for completions, retired (and drained) when their namespace goes away.
//! Commands reach storage only through here, so this is the one place the
//! simulator's disks and the runtime's wakes meet the target core.

use std::sync::Arc;
use std::task::Waker;

use nvme_spec::{NamespaceId, Status};
use storage::{BackendQueue, IoCompletion, IoOp, IoRequest};

use crate::namespaces::{Namespace, NamespaceView};
use crate::reservations::HostId;
use crate::stats::QueueStats;
use crate::write_fence::QueueWrites;

/// Marks the token of a request counted in its queue's [`QueueWrites`], so its
/// completion uncounts it (the connection's tokens use the low 48 bits at most:
/// slot index and Copy's range index).
const COUNTED_WRITE_TOKEN_BIT: u64 = 1 << 63;

/// Requests of the write group: what Preempt and Abort's fence waits for.
fn modifies_blocks(op: &IoOp) -> bool {
    match op {
        IoOp::Write { .. } | IoOp::WriteZeroes { .. } | IoOp::CompareAndWrite { .. } | IoOp::Deallocate { .. } => true,
        IoOp::Read { .. } | IoOp::Flush => false,
    }
}

/// A backend queue this connection opened, with the namespace it serves (held so
/// that a deleted namespace's space is not reused while I/O to it is in flight).
pub(crate) struct OpenQueue {
    pub(crate) namespace: Arc<Namespace>,
    pub(crate) queue: Box<dyn BackendQueue>,
    /// This queue's shard of the namespace's counters.
    pub(crate) stats: Arc<QueueStats>,
    /// This queue's writes at storage, listed in the namespace for fences.
    writes: Arc<QueueWrites>,
    /// Listed in [`StorageQueues::busy`].
    busy: bool,
}

impl OpenQueue {
    /// Opens a queue on `namespace`'s backend; with a waker, a backend whose
    /// completions arrive on its own threads wakes the caller instead of being polled.
    fn new(namespace: Arc<Namespace>, waker: Option<&Waker>, host: HostId) -> Self {
        let queue = match waker {
            Some(waker) => namespace.backend.open_queue_with_waker(waker),
            None => namespace.backend.open_queue(),
        };
        let stats = namespace.stats.register();
        let writes = namespace.writes.register(host);
        OpenQueue { namespace, queue, stats, writes, busy: false }
    }

    /// Reaps the queue's completions into `out`, uncounting the writes among them.
    fn reap_into(&mut self, out: &mut Vec<IoCompletion>) {
        let first = out.len();
        self.queue.reap(out);
        for completion in out.iter_mut().skip(first) {
            if completion.token & COUNTED_WRITE_TOKEN_BIT != 0 {
                completion.token &= !COUNTED_WRITE_TOKEN_BIT;
                self.writes.end();
            }
        }
    }
}

impl Drop for OpenQueue {
    fn drop(&mut self) {
        self.namespace.stats.retire(&self.stats);
    }
}

/// What a connection waits for at storage
/// ([`Connection::storage_activity`](crate::Connection::storage_activity)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageActivity {
    /// [`Connection::has_pending_storage`](crate::Connection::has_pending_storage).
    pub pending_storage: bool,
    /// [`Connection::awaits_storage`](crate::Connection::awaits_storage).
    pub awaits_storage: bool,
}

/// What a connection's backend queues wait for ([`StorageQueues::activity`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueuesActivity {
    /// Requests are in flight on a queue that does not wake the thread: it must poll.
    pub(crate) must_poll: bool,
    /// Requests are in flight on a queue that wakes the thread when they complete (so
    /// the thread may sleep until then).
    pub(crate) awaits_waking_queue: bool,
}

/// A connection's backend queues.
#[derive(Default)]
pub(crate) struct StorageQueues {
    /// Open queues by NSID - 1, boxed: the table is as long as the highest NSID the
    /// connection used, so with thousands of namespaces an empty entry should cost a
    /// pointer (8 bytes), not a whole queue handle (40).
    open: Vec<Option<Box<OpenQueue>>>,
    /// NSIDs with an open queue (to retire those whose namespace went away).
    opened: Vec<u32>,
    /// NSIDs whose queue may have requests in flight: a submit lists its queue, a
    /// reap that empties it unlists it. The per-call passes (`activity`, `reap`,
    /// `in_flight`) go over these only, so their cost follows the requests in flight,
    /// not the namespaces the connection ever used (a host reading over 4,096
    /// namespaces on one connection paid a pass over all 4,096 on every call, half
    /// again the gateway's CPU per read on one namespace).
    busy: Vec<u32>,
    /// Queues of namespaces that went away (detached, deleted) with I/O still in
    /// flight: polled until drained, then dropped.
    retired: Vec<OpenQueue>,
    /// Given by the runtime: backend queues that complete on threads of their own
    /// wake the owning thread through it.
    waker: Option<Waker>,
    /// The list `reap` fills, kept between polls.
    completions: Vec<IoCompletion>,
    /// Host Identifier of the connection's controller (whose writes a Preempt and
    /// Abort of this host fences).
    host: HostId,
}

impl StorageQueues {
    /// Queues opened from now on wake the owning thread through `waker`.
    pub(crate) fn set_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
    }

    /// The connection's queues belong to the controller of this host (set at
    /// Connect, before any queue opens).
    pub(crate) fn set_host(&mut self, host: HostId) {
        self.host = host;
    }

    /// The owning thread's waker, if the runtime gave one.
    pub(crate) fn waker(&self) -> Option<&Waker> {
        self.waker.as_ref()
    }

    /// The queue on `namespace_id`'s backend, opened on first use from `view`.
    pub(crate) fn open(&mut self, namespace_id: NamespaceId, view: &NamespaceView) -> Result<&mut OpenQueue, Status> {
        let invalid = Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry();
        let index = (namespace_id.0 as usize).checked_sub(1).ok_or(invalid)?;
        if !matches!(self.open.get(index), Some(Some(_))) {
            // The NSID comes from the network: only an active namespace may grow the
            // table (an NSID near 2^32 must not allocate billions of entries).
            let namespace = view.get(namespace_id).cloned().ok_or(invalid)?;
            if self.open.len() <= index {
                self.open.resize_with(index + 1, || None);
            }
            let entry = self.open.get_mut(index).ok_or(Status::INTERNAL_ERROR)?;
            *entry = Some(Box::new(OpenQueue::new(namespace, self.waker.as_ref(), self.host)));
            self.opened.push(namespace_id.0);
        }
        self.open.get_mut(index).and_then(Option::as_mut).map(|queue| &mut **queue).ok_or(Status::INTERNAL_ERROR)
    }

    /// Submits `request` to `namespace_id`'s queue, opening it first if need be. A
    /// write is counted for Preempt and Abort's fence, then checked against the
    /// reservation once more (see `write_fence` for why in that order): one atomic
    /// load while no reservation is held.
    pub(crate) fn submit(
        &mut self,
        namespace_id: NamespaceId,
        view: &NamespaceView,
        mut request: IoRequest,
        now: std::time::Instant,
    ) -> Result<(), Status> {
        let host = self.host;
        let open = self.open(namespace_id, view)?;
        if modifies_blocks(&request.op) {
            open.writes.begin();
            if let Err(status) = open.namespace.reservations.check(&host, true, now) {
                open.writes.end();
                return Err(status);
            }
            debug_assert_eq!(request.token & COUNTED_WRITE_TOKEN_BIT, 0);
            request.token |= COUNTED_WRITE_TOKEN_BIT;
        }
        open.queue.submit(request);
        if !open.busy {
            open.busy = true;
            self.busy.push(namespace_id.0);
        }
        Ok(())
    }

    /// The counters of `namespace_id`'s open queue.
    pub(crate) fn stats(&self, namespace_id: NamespaceId) -> Option<&QueueStats> {
        let index = (namespace_id.0 as usize).checked_sub(1)?;
        self.open.get(index)?.as_ref().map(|open| &*open.stats)
    }

    /// What the queues wait for, in one pass over them (the runtime asks after every
    /// call into the connection, and a connection may have many namespaces open).
    pub(crate) fn activity(&self) -> QueuesActivity {
        let mut activity = QueuesActivity::default();
        for open in self.busy_queues().chain(self.retired.iter()) {
            if open.queue.in_flight() == 0 {
                continue;
            }
            if open.queue.wakes_on_completion() {
                activity.awaits_waking_queue = true;
            } else {
                activity.must_poll = true;
            }
            if activity.must_poll && activity.awaits_waking_queue {
                break;
            }
        }
        activity
    }

    /// Requests in flight on every queue, retired ones included.
    pub(crate) fn in_flight(&self) -> usize {
        // The busy queues, not the whole table (as long as the highest NSID used).
        let open = self.busy_queues().map(|open| open.queue.in_flight());
        open.chain(self.retired.iter().map(|open| open.queue.in_flight())).sum()
    }

    /// Every queue's completions, in a list to hand back through `recycle` once
    /// handled (so polling allocates nothing); retired queues that drained are dropped.
    pub(crate) fn reap(&mut self) -> Vec<IoCompletion> {
        let mut completions = std::mem::take(&mut self.completions);
        let open = &mut self.open;
        self.busy.retain(|&nsid| {
            let entry = (nsid as usize).checked_sub(1).and_then(|index| open.get_mut(index));
            let Some(Some(queue)) = entry else { return false };
            if queue.queue.in_flight() > 0 {
                queue.reap_into(&mut completions);
            }
            queue.busy = queue.queue.in_flight() > 0;
            queue.busy
        });
        if !self.retired.is_empty() {
            for open in &mut self.retired {
                open.reap_into(&mut completions);
            }
            self.retired.retain(|open| open.queue.in_flight() > 0);
        }
        completions
    }

    /// Takes back the (emptied) list `reap` returned.
    pub(crate) fn recycle(&mut self, mut completions: Vec<IoCompletion>) {
        completions.clear();
        self.completions = completions;
    }

    /// Retires the queues of namespaces `view` no longer holds (or holds as another
    /// namespace under the same NSID): dropped now when idle, drained first if not.
    pub(crate) fn retire_inactive(&mut self, view: &NamespaceView) {
        let open = &mut self.open;
        let retired = &mut self.retired;
        self.opened.retain(|&nsid| {
            let Some(entry) = (nsid as usize).checked_sub(1).and_then(|index| open.get_mut(index)) else {
                return false;
            };
            let still_active = match (entry.as_ref(), view.get(NamespaceId(nsid))) {
                (Some(queue), Some(namespace)) => Arc::ptr_eq(&queue.namespace, namespace),
                _ => false,
            };
            if !still_active {
                if let Some(queue) = entry.take().filter(|queue| queue.queue.in_flight() > 0) {
                    retired.push(*queue);
                }
            }
            still_active
        });
        // Queues dropped or retired above leave the busy list (retired ones are
        // polled from `retired`).
        self.busy.retain(|&nsid| {
            (nsid as usize).checked_sub(1).and_then(|index| open.get(index)).is_some_and(|entry| entry.is_some())
        });
    }

    /// Drops every queue, in flight or not (a drain that finished or gave up).
    pub(crate) fn clear(&mut self) {
        self.open.clear();
        self.opened.clear();
        self.busy.clear();
        self.retired.clear();
    }

    fn busy_queues(&self) -> impl Iterator<Item = &OpenQueue> {
        self.busy
            .iter()
            .filter_map(|&nsid| (nsid as usize).checked_sub(1).and_then(|index| self.open.get(index)))
            .flatten()
            .map(|queue| &**queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_nsid_from_the_network_allocates_nothing() {
        let mut queues = StorageQueues::default();
        let view = NamespaceView::default();
        let refused = queues.open(NamespaceId(0xFFFF_FFF0), &view).err();
        assert_eq!(refused, Some(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry()));
        assert!(queues.open.is_empty(), "the table grew for a namespace that does not exist");
        assert_eq!(queues.in_flight(), 0);
    }

    #[test]
    fn only_queues_with_requests_in_flight_are_passed_over() {
        let geometry = storage::Geometry { block_size_bytes: 512, block_count: 64 };
        let namespaces: Vec<Arc<Namespace>> = (1..=64)
            .map(|nsid| {
                let backend = storage::RamBackend::new(geometry);
                Arc::new(Namespace::new(NamespaceId(nsid), backend, [0; 16], [0; 16], None))
            })
            .collect();
        let view = NamespaceView::of(namespaces);
        let mut queues = StorageQueues::default();
        let read = |token| IoRequest { token, op: IoOp::Read { lba: 0, blocks: 1 }, buffer: vec![0; 512] };
        let now = std::time::Instant::now();
        for nsid in 1..=64u32 {
            queues.submit(NamespaceId(nsid), &view, read(u64::from(nsid)), now).expect("submit");
            queues.submit(NamespaceId(nsid), &view, read(u64::from(nsid) + 100), now).expect("submit");
        }
        assert_eq!(queues.busy.len(), 64, "each queue listed once");
        let done = queues.reap();
        assert_eq!(done.len(), 128);
        queues.recycle(done);
        assert!(queues.busy.is_empty(), "drained queues stay open but leave the busy list");
        assert_eq!((queues.opened.len(), queues.in_flight()), (64, 0));
        queues.submit(NamespaceId(7), &view, read(7), now).expect("submit");
        assert_eq!(queues.busy, [7]);
        assert_eq!(queues.activity(), QueuesActivity { must_poll: true, awaits_waking_queue: false });
        // The namespace goes away with its read in flight: polled from `retired`.
        queues.retire_inactive(&NamespaceView::of(Vec::new()));
        assert!(queues.busy.is_empty() && queues.retired.len() == 1);
        let done = queues.reap();
        assert_eq!(done.len(), 1);
        assert!(queues.retired.is_empty());
    }
}

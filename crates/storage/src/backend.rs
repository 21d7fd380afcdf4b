//! The backend seam: a [`Backend`] describes a namespace and hands out per-thread
//! [`BackendQueue`]s with submit/reap semantics.
//!
//! Submit/reap (rather than a blocking `read`/`write`) is what lets asynchronous backends
//! such as io_uring files and block devices, RAID0 fan-out, pools and cache tiers sit
//! behind the same trait as the synchronous RAM and null backends: the caller submits,
//! goes on with other work, and reaps whatever has completed.

use std::task::Waker;

use crate::{Geometry, IoCompletion, IoError, IoRequest, LentBytes};

/// A storage device behind one namespace.
pub trait Backend: Send + Sync + 'static {
    /// Block size and block count.
    fn geometry(&self) -> Geometry;

    /// VWC: true when completed writes may sit in a volatile cache until Flush (RAM:
    /// false; it is volatile by nature but there is no separate cache to flush; null:
    /// false).
    fn has_volatile_write_cache(&self) -> bool;

    /// Human-readable kind for logs ("ram", "null").
    fn kind(&self) -> &'static str;

    /// A submission queue for one thread/connection. Queues of one backend may live on
    /// different threads at once and submit concurrently.
    fn open_queue(&self) -> Box<dyn BackendQueue>;

    /// Like [`Backend::open_queue`], for a caller that sleeps between reaps: a backend
    /// whose requests complete on threads of their own (librbd, say) calls
    /// `waker.wake_by_ref()` after each completion it makes reapable, and its queue
    /// answers true to [`BackendQueue::wakes_on_completion`]. The default ignores the
    /// waker: the caller keeps polling while requests are in flight.
    fn open_queue_with_waker(&self, waker: &Waker) -> Box<dyn BackendQueue> {
        let _ = waker;
        self.open_queue()
    }

    /// DLFEAT read behaviour: true when a deallocated block reads back as zeroes. A
    /// backend that discards only what it can free cheaply (RBD: whole objects) says
    /// false, and the target then reports "not reported" instead of "reads zeroes".
    fn deallocate_reads_zeroes(&self) -> bool {
        true
    }

    /// True when data written can be read back (false for the null backend, which the
    /// conformance suite then checks only for completions and range errors).
    fn retains_data(&self) -> bool {
        true
    }

    /// When the backend runs [`crate::IoOp::CompareAndWrite`] atomically against every
    /// other writer of the storage, including other processes (RBD: one OSD
    /// operation): the size of the aligned regions a pair must stay inside (an RBD
    /// object). `None`: the target's own range table makes pairs atomic, which holds
    /// only within this process.
    fn atomic_compare_and_write_boundary_bytes(&self) -> Option<u64> {
        None
    }

    /// A name for storage other processes may serve too ("rbd:pool/image"), so
    /// gateways that share it can check they describe it alike; `None` for storage
    /// only this process uses.
    fn shared_name(&self) -> Option<String> {
        None
    }

    /// Grows the storage to `block_count` blocks while it is served (a live namespace
    /// resize), durably: once this returns, the new size survives a crash. Blocking
    /// (it may write a table or talk to a cluster): the management thread calls it,
    /// never an I/O thread. Queues already open accept the new blocks at once. The
    /// same size again is a success; a smaller one is [`GrowError::WouldShrink`],
    /// since a host may hold data in the blocks it would cut off. The default:
    /// storage that cannot change size.
    fn grow(&self, block_count: u64) -> Result<Geometry, GrowError> {
        let _ = block_count;
        Err(GrowError::NotResizable { kind: self.kind() })
    }

    /// For storage other processes can grow (an RBD image resized through another
    /// gateway or `rbd resize`): reads the size now and returns the geometry, grown if
    /// the storage grew. Blocking, like [`Backend::grow`]. The default: the size only
    /// this process changes.
    fn refresh_geometry(&self) -> Result<Geometry, GrowError> {
        Ok(self.geometry())
    }
}

/// Why [`Backend::grow`] did not grow the storage; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrowError {
    /// This kind of storage has a fixed size while served.
    #[error("{kind} storage cannot change size while it is served")]
    NotResizable {
        /// [`Backend::kind`].
        kind: &'static str,
    },
    /// The requested size is below the current one.
    #[error("{requested_blocks} blocks is less than the {current_blocks} the namespace has; namespaces only grow")]
    WouldShrink {
        /// Blocks now.
        current_blocks: u64,
        /// Blocks asked for.
        requested_blocks: u64,
    },
    /// Not enough free space where the storage must grow (a pool; for a thick carve,
    /// the units right after it).
    #[error("{0}")]
    NoSpace(String),
    /// The size is beyond what this storage can describe.
    #[error("{requested_blocks} blocks is more than this storage can hold ({reason})")]
    TooLarge {
        /// Blocks asked for.
        requested_blocks: u64,
        /// Which limit.
        reason: String,
    },
    /// The storage refused or failed (a table write, a cluster call).
    #[error("{0}")]
    Failed(String),
}

/// A submission queue owned by one thread at a time.
pub trait BackendQueue: Send {
    /// Submits one request. Never blocks. Validation failures (out of range, wrong buffer
    /// length) complete with an error rather than panicking.
    fn submit(&mut self, request: IoRequest);

    /// Appends completed requests to `out` (never allocates if `out` has capacity).
    /// Synchronous backends complete inside `submit` and hand them over here.
    fn reap(&mut self, out: &mut Vec<IoCompletion>);

    /// Requests submitted and not yet reaped.
    fn in_flight(&self) -> usize;

    /// True when this queue was opened with a waker
    /// ([`Backend::open_queue_with_waker`]) and calls it whenever a request in flight
    /// becomes reapable: the caller may then sleep instead of polling.
    fn wakes_on_completion(&self) -> bool {
        false
    }

    /// Lends the backend's own memory holding `blocks` blocks at `lba` instead of
    /// reading them into a buffer, so a response can be sent from it without a copy.
    /// `None` when this backend cannot lend (the default): the caller submits a Read.
    /// `Some(Err)` for a request a Read would fail the same way (out of range). Lending
    /// completes at once; nothing is left to reap.
    fn lend_read(&mut self, lba: u64, blocks: u32) -> Option<Result<LentBytes, IoError>> {
        let _ = (lba, blocks);
        None
    }
}

/// Completions of a synchronous backend waiting to be reaped.
///
/// The list grows to the deepest queue depth the caller ever reaches and then keeps its
/// capacity, so steady-state submit/reap does not allocate.
#[derive(Debug)]
pub(crate) struct ReadyCompletions {
    ready: Vec<IoCompletion>,
}

/// Room for a typical NVMe/TCP queue depth before the list has to grow.
const INITIAL_READY_CAPACITY: usize = 128;

impl ReadyCompletions {
    pub(crate) fn new() -> Self {
        Self { ready: Vec::with_capacity(INITIAL_READY_CAPACITY) }
    }

    pub(crate) fn push(&mut self, completion: IoCompletion) {
        self.ready.push(completion);
    }

    /// Moves everything into `out`. `append` keeps our capacity and allocates in `out`
    /// only when `out` lacks room.
    pub(crate) fn drain_into(&mut self, out: &mut Vec<IoCompletion>) {
        out.append(&mut self.ready);
    }

    pub(crate) fn len(&self) -> usize {
        self.ready.len()
    }
}

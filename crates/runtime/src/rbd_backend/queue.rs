//! One submission queue on an RBD image.
//!
//! Requests go to librbd's asynchronous API from the thread that owns the queue. librbd
//! completes them on its own threads, in a callback that only records the result in a
//! preallocated slot, sets the slot's bit in a bitmap and wakes the owning thread; the
//! owner reaps the bits. So the data path takes no lock, and allocates only while the
//! queue first grows: slots come in chunks of [`SLOTS_PER_CHUNK`], made when the
//! requests in flight first need them (a queue is per connection and namespace, so
//! with thousands of namespaces a queue made whole at open would cost 47 KiB per
//! namespace each connection touched), and a request beyond the slots waits in a list
//! of its own until one frees up.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Waker;

use storage::{
    validate_compare_and_write, validate_request, BackendQueue, IoCompletion, IoError, IoOp, IoRequest, LiveGeometry,
};

use super::cluster::OpenImage;
use super::errors::Health;
use super::library::{self, Completion, Library, OP_FLAG_FADVISE_FUA};

/// Requests one queue has at librbd at once. The target's deepest I/O queue is 1024;
/// librbd itself throttles well below that per image, so more slots would only cost
/// memory per connection and namespace (about 40 bytes each). Requests beyond this
/// wait in the queue, in order.
pub const RBD_QUEUE_SLOTS: usize = 256;
/// Slots made at a time: one completion bitmap word's worth.
const SLOTS_PER_CHUNK: usize = 64;
/// The most chunks a queue makes.
const MAX_CHUNKS: usize = RBD_QUEUE_SLOTS / SLOTS_PER_CHUNK;
/// How long a dropped queue's requests may stay at librbd before their buffers are
/// leaked: well above the op timeout (`op_timeout_ms`, 20 s by default) that ends
/// every request at the cluster.
const DROP_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// What the completion callback reaches: [`SLOTS_PER_CHUNK`] slots, shared by the
/// queue and librbd's threads, at a fixed address for the queue's life.
struct Chunk {
    slots: [SlotShared; SLOTS_PER_CHUNK],
    /// Bit `i` set: slot `i` of this chunk finished and waits to be reaped.
    finished: AtomicU64,
    waker: Option<Waker>,
}

impl Chunk {
    /// A chunk whose slots point back at it.
    fn new(waker: Option<&Waker>) -> Arc<Chunk> {
        let chunk = Arc::new(Chunk {
            slots: std::array::from_fn(|index| SlotShared {
                result: AtomicI64::new(0),
                mismatch_offset: AtomicU64::new(0),
                index: index as u32,
                owner: AtomicPtr::new(std::ptr::null_mut()),
            }),
            finished: AtomicU64::new(0),
            waker: waker.cloned(),
        });
        let owner = Arc::as_ptr(&chunk).cast_mut();
        for slot in &chunk.slots {
            slot.owner.store(owner, Ordering::Release);
        }
        chunk
    }
}

/// The callback's argument: one per slot, at a fixed address for the queue's life.
struct SlotShared {
    /// rbd_aio_get_return_value of the finished request.
    result: AtomicI64,
    /// Where librbd writes the offset of a compare-and-write's first mismatch (only
    /// librbd touches it; the value is not used, the result code says mismatch).
    mismatch_offset: AtomicU64,
    /// The slot's place in its chunk.
    index: u32,
    /// The `Chunk` this slot lives in (set once, right after the Arc is made).
    owner: AtomicPtr<Chunk>,
}

/// A request at librbd: what comes back with its completion.
struct InFlight {
    token: u64,
    buffer: Vec<u8>,
    completion: Completion,
    is_read: bool,
}

pub(crate) struct RbdQueue {
    image: Arc<OpenImage>,
    /// The backend's: it grows live ([`super::RbdBackend`]'s `grow`).
    geometry: Arc<LiveGeometry>,
    library: &'static Library,
    /// Made as needed, at most `MAX_CHUNKS`; slot `n` is slot `n % 64` of chunk `n / 64`.
    chunks: Vec<Arc<Chunk>>,
    /// The waker new chunks get.
    waker: Option<Waker>,
    /// What is at librbd in each slot made so far.
    slots: Vec<Option<InFlight>>,
    free_slots: Vec<u32>,
    /// Requests beyond the slots, in arrival order.
    waiting: VecDeque<IoRequest>,
    /// Completed without reaching librbd (validation or submission errors).
    ready: Vec<IoCompletion>,
    in_flight: usize,
    health: Arc<Health>,
}

// SAFETY: the raw completion handles in `slots` belong to this queue alone; librbd
// allows a completion to be released from any thread.
unsafe impl Send for RbdQueue {}

impl RbdQueue {
    pub(crate) fn new(
        image: Arc<OpenImage>,
        geometry: Arc<LiveGeometry>,
        library: &'static Library,
        waker: Option<&Waker>,
        health: Arc<Health>,
    ) -> RbdQueue {
        RbdQueue {
            image,
            geometry,
            library,
            chunks: Vec::new(),
            waker: waker.cloned(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            ready: Vec::new(),
            in_flight: 0,
            health,
        }
    }

    /// A free slot, making a chunk of them when none is free and fewer than
    /// `MAX_CHUNKS` exist.
    fn take_free_slot(&mut self) -> Option<u32> {
        if self.free_slots.is_empty() && self.chunks.len() < MAX_CHUNKS {
            let first = self.slots.len() as u32;
            self.chunks.push(Chunk::new(self.waker.as_ref()));
            self.slots.extend((0..SLOTS_PER_CHUNK).map(|_| None));
            // Popped from the end: the lowest slot first.
            self.free_slots.extend((first..first + SLOTS_PER_CHUNK as u32).rev());
        }
        self.free_slots.pop()
    }

    /// The shared part of slot `slot`.
    fn slot_shared(&self, slot: u32) -> &SlotShared {
        let slot = slot as usize;
        &self.chunks[slot / SLOTS_PER_CHUNK].slots[slot % SLOTS_PER_CHUNK]
    }

    /// Hands `request` to librbd in a free slot (the caller checked there is one).
    fn start(&mut self, request: IoRequest) {
        let Some(slot) = self.take_free_slot() else {
            self.waiting.push_back(request);
            return;
        };
        let IoRequest { token, op, mut buffer } = request;
        let argument = (self.slot_shared(slot) as *const SlotShared).cast_mut().cast::<c_void>();
        let mut completion: Completion = std::ptr::null_mut();
        // SAFETY: `argument` points into a chunk, which outlives every request of this
        // queue (Drop waits or leaks); `completion` is a valid out pointer.
        let code = unsafe { (self.library.rbd_aio_create_completion)(argument, on_complete, &mut completion) };
        if code < 0 {
            self.free_slots.push(slot);
            self.finish_now(token, buffer, Err(IoError::Internal));
            return;
        }
        let block_size = u64::from(self.geometry.get().block_size_bytes);
        let image = self.image.image;
        let library = self.library;
        // Every call below relies on the same facts: the image is open for the queue's
        // life; the completion was just created; the buffer's heap memory stays where it
        // is (a Vec's data does not move with the Vec) because the buffer is parked in
        // `slots` right after the call and only leaves it once the completion is reaped,
        // which happens on this thread, after `start` returns.
        let code = match op {
            IoOp::Read { lba, .. } => {
                // SAFETY: see above; the buffer is writable for `buffer.len()` bytes.
                unsafe {
                    (library.rbd_aio_read)(
                        image,
                        lba * block_size,
                        buffer.len(),
                        buffer.as_mut_ptr().cast(),
                        completion,
                    )
                }
            }
            IoOp::Write { lba, force_unit_access, .. } => {
                let flags = if force_unit_access { OP_FLAG_FADVISE_FUA } else { 0 };
                // SAFETY: see above; the buffer is readable for `buffer.len()` bytes.
                unsafe {
                    (library.rbd_aio_write2)(
                        image,
                        lba * block_size,
                        buffer.len(),
                        buffer.as_ptr().cast(),
                        completion,
                        flags,
                    )
                }
            }
            // SAFETY: see above; no buffer.
            IoOp::Flush => unsafe { (library.rbd_aio_flush)(image, completion) },
            // Validation bounded lba + blocks by the image size, so these cannot
            // overflow; a deallocating Write Zeroes is still a zeroing one.
            IoOp::WriteZeroes { lba, blocks, .. } => {
                // SAFETY: see above; no buffer.
                unsafe {
                    (library.rbd_aio_write_zeroes)(
                        image,
                        lba * block_size,
                        (blocks * block_size) as usize,
                        completion,
                        0,
                        0,
                    )
                }
            }
            IoOp::Deallocate { lba, blocks } => {
                // SAFETY: see above; no buffer.
                unsafe { (library.rbd_aio_discard)(image, lba * block_size, blocks * block_size, completion) }
            }
            IoOp::CompareAndWrite { lba, force_unit_access, .. } => {
                // The buffer holds the compare data, then the write data (validated).
                let half = buffer.len() / 2;
                let flags = if force_unit_access { OP_FLAG_FADVISE_FUA } else { 0 };
                let mismatch = self.slot_shared(slot).mismatch_offset.as_ptr();
                // SAFETY: see above; both halves are readable for `half` bytes, and
                // `mismatch` points into a chunk, alive until the request is reaped.
                unsafe {
                    (library.rbd_aio_compare_and_write)(
                        image,
                        lba * block_size,
                        half,
                        buffer.as_ptr().cast(),
                        buffer.as_ptr().add(half).cast(),
                        completion,
                        mismatch,
                        flags,
                    ) as std::ffi::c_int
                }
            }
        };
        if code < 0 {
            // SAFETY: librbd refused the request, so it never completes: ours to release.
            unsafe { (library.rbd_aio_release)(completion) };
            self.free_slots.push(slot);
            self.health.record_error(i64::from(code));
            self.finish_now(token, buffer, Err(error_for(&op, i64::from(code))));
            return;
        }
        let is_read = matches!(op, IoOp::Read { .. });
        self.slots[slot as usize] = Some(InFlight { token, buffer, completion, is_read });
    }

    fn finish_now(&mut self, token: u64, buffer: Vec<u8>, result: Result<(), IoError>) {
        self.in_flight -= 1;
        self.ready.push(IoCompletion { token, result, buffer });
    }

    /// Moves every finished slot's completion to `out` and starts waiting requests.
    fn collect_finished(&mut self, out: &mut Vec<IoCompletion>) {
        for chunk in 0..self.chunks.len() {
            // Acquire pairs with the callback's Release: the result is visible.
            let mut bits = self.chunks[chunk].finished.swap(0, Ordering::Acquire);
            while bits != 0 {
                let slot = chunk * SLOTS_PER_CHUNK + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let Some(request) = self.slots[slot].take() else {
                    debug_assert!(false, "slot {slot} finished with nothing in flight");
                    continue;
                };
                let code = self.slot_shared(slot as u32).result.load(Ordering::Relaxed);
                // SAFETY: the request finished (its bit was set after librbd had
                // produced the result), and only this queue releases it, once.
                unsafe { (self.library.rbd_aio_release)(request.completion) };
                let result = if code >= 0 {
                    Ok(())
                } else {
                    // A compare that did not match is an answer, not a fault.
                    if code != -i64::from(libc::EILSEQ) {
                        self.health.record_error(code);
                    }
                    Err(error_for_kind(request.is_read, code))
                };
                self.free_slots.push(slot as u32);
                self.in_flight -= 1;
                out.push(IoCompletion { token: request.token, result, buffer: request.buffer });
            }
        }
        while !self.free_slots.is_empty() || self.chunks.len() < MAX_CHUNKS {
            let Some(request) = self.waiting.pop_front() else { break };
            self.start(request);
        }
    }
}

/// Called by librbd on one of its threads when a request completes. Records the
/// result, publishes the slot's bit, then wakes the owner.
///
/// # Safety
/// `argument` is the `SlotShared` pointer given at submission; its `Chunk` is alive
/// (the queue holds it until the request is reaped, and this callback holds its own
/// reference from before it publishes the bit until it returns).
unsafe extern "C" fn on_complete(completion: Completion, argument: *mut c_void) {
    // SAFETY: per the contract, `argument` is a live SlotShared.
    let slot = unsafe { &*argument.cast::<SlotShared>() };
    let owner = slot.owner.load(Ordering::Acquire);
    // SAFETY: `owner` came from Arc::as_ptr of a Chunk the queue still holds (its
    // request has not been reaped: its bit is not set yet), so taking another strong
    // reference is sound; it keeps the Chunk alive after the bit is published.
    let chunk = unsafe {
        Arc::increment_strong_count(owner);
        Arc::from_raw(owner)
    };
    let code = match library::library() {
        // SAFETY: the completion is the one this callback is for, still unreleased.
        Ok(library) => (unsafe { (library.rbd_aio_get_return_value)(completion) }) as i64,
        Err(_) => -i64::from(libc::EIO), // unreachable: the library made this call
    };
    slot.result.store(code, Ordering::Relaxed);
    let index = slot.index as usize;
    // Release: the result above is visible to the owner's Acquire swap. After this
    // line the slot may be reaped and reused; only `chunk` is touched from here on.
    chunk.finished.fetch_or(1 << index, Ordering::Release);
    if let Some(waker) = &chunk.waker {
        waker.wake_by_ref();
    }
}

/// The IoError for a failed request, by what it was.
fn error_for(op: &IoOp, code: i64) -> IoError {
    error_for_kind(matches!(op, IoOp::Read { .. }), code)
}

fn error_for_kind(is_read: bool, code: i64) -> IoError {
    let errno = i32::try_from(-code).unwrap_or(libc::EIO);
    match errno {
        // The cluster did not answer within the op timeout, the connection to it is
        // gone, or the cluster fenced this client (EBLOCKLISTED is ESHUTDOWN): the host
        // may retry, or use another path.
        libc::ETIMEDOUT | libc::ESHUTDOWN | libc::ENOTCONN | libc::ECONNREFUSED | libc::ECANCELED => {
            IoError::Unavailable
        }
        libc::ENOSPC | libc::EDQUOT => IoError::NoSpace,
        // A compare-and-write whose compare did not match.
        libc::EILSEQ => IoError::CompareMismatch,
        _ if is_read => IoError::ReadError,
        _ => IoError::WriteFault,
    }
}

impl BackendQueue for RbdQueue {
    fn submit(&mut self, request: IoRequest) {
        self.in_flight += 1;
        let checked = match request.op {
            IoOp::CompareAndWrite { lba, blocks, .. } => {
                validate_compare_and_write(&self.geometry.get(), lba, blocks, request.buffer.len())
            }
            _ => validate_request(&self.geometry.get(), &request.op, request.buffer.len()),
        };
        if let Err(error) = checked {
            self.finish_now(request.token, request.buffer, Err(error));
            return;
        }
        if self.waiting.is_empty() {
            self.start(request);
        } else {
            self.waiting.push_back(request); // keep arrival order
        }
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        out.append(&mut self.ready);
        self.collect_finished(out);
        // Starting a waiting request can fail at once: hand that over too.
        out.append(&mut self.ready);
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Completions at librbd wake the owner; ones made here (errors before librbd)
    /// do not, so the caller must poll while any are ready.
    fn wakes_on_completion(&self) -> bool {
        self.waker.is_some() && self.ready.is_empty()
    }
}

impl Drop for RbdQueue {
    /// Requests still at librbd would write into their buffers and call back into
    /// `shared` later: the target drains a closed connection's queues before dropping
    /// them (`nvme_target::Connection::drain`), so this happens only when that drain
    /// gives up (`command_quiesce_timeout_ms`, above the op timeout) or a thread is
    /// torn down abnormally. On an I/O thread the queue goes to a service thread, which
    /// waits for librbd (at most [`DROP_WAIT`]) and frees the buffers; whatever librbd
    /// still holds after that is leaked rather than freed under its feet.
    fn drop(&mut self) {
        // Never handed to librbd: nothing refers to them.
        self.waiting.clear();
        let mut scratch = Vec::new();
        self.collect_finished(&mut scratch);
        let at_librbd = |queue: &RbdQueue| queue.slots.iter().filter(|slot| slot.is_some()).count();
        if at_librbd(self) == 0 {
            return;
        }
        let image = format!("{}/{}", self.image.pool, self.image.name);
        if storage::service::is_io_thread() {
            let requests = at_librbd(self);
            tracing::warn!(%image, requests,
                "RBD queue closed with requests in flight; a service thread waits for librbd to finish them");
            // `in_flight` counts what is still at librbd: reaping there takes them off.
            let leftover = RbdQueue {
                image: Arc::clone(&self.image),
                geometry: Arc::clone(&self.geometry),
                library: self.library,
                chunks: self.chunks.clone(),
                waker: self.waker.clone(),
                slots: std::mem::take(&mut self.slots),
                free_slots: Vec::new(),
                waiting: VecDeque::new(),
                ready: Vec::new(),
                in_flight: requests,
                health: Arc::clone(&self.health),
            };
            storage::service::process_service().execute_long(Box::new(move || drop(leftover)));
            return;
        }
        storage::service::debug_assert_may_block("waiting for a dropped RBD queue's requests");
        let deadline = std::time::Instant::now() + DROP_WAIT;
        while at_librbd(self) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            scratch.clear();
            self.collect_finished(&mut scratch);
        }
        if at_librbd(self) > 0 {
            tracing::warn!(%image, requests = at_librbd(self),
                "RBD requests of a closed queue still at librbd; leaking their buffers until librbd completes them");
            std::mem::forget(std::mem::take(&mut self.slots));
            std::mem::forget(self.chunks.clone());
            std::mem::forget(Arc::clone(&self.image));
        }
    }
}

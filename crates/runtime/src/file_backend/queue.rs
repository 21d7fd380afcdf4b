//! One queue of the file backend: its own io_uring, the requests in flight, and the
//! bounce-buffer pool.
//!
//! Every request occupies a slot whose index is the SQE's user_data. A slot has at most
//! one SQE in the kernel at a time; multi-step requests (a read split by a short
//! transfer, a write-zeroes fallback, a FUA sync after fallocate) push their next SQE
//! when the previous one completes. The slot owns the caller's buffer and any bounce
//! buffer until its last CQE has arrived.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};
use storage::{validate_request, BackendQueue, IoCompletion, IoError, IoOp, IoRequest};

use super::buffers::{AlignedBuf, BouncePool, DIRECT_IO_ALIGNMENT, ZEROES, ZERO_BLOCK_LEN};
use super::Shared;

/// Largest single read/write SQE (the SQE length is a u32); bigger requests are split.
const MAX_TRANSFER_BYTES: u64 = 1 << 30;
/// How long dropping a queue waits for its in-flight I/O before leaking the buffers.
const DROP_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn build_ring(entries: u32, wakes_thread: bool) -> io::Result<IoUring> {
    // No SINGLE_ISSUER/DEFER_TASKRUN: a queue may move between threads. A ring that
    // wakes its thread through an eventfd must not defer completion work until the
    // thread enters it (COOP_TASKRUN): the thread is asleep on its own ring then.
    let mut builder = IoUring::builder();
    builder.setup_cqsize(entries.saturating_mul(2));
    if !wakes_thread {
        builder.setup_coop_taskrun().setup_taskrun_flag();
    }
    match builder.build(entries) {
        Ok(ring) => Ok(ring),
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            IoUring::builder().setup_cqsize(entries.saturating_mul(2)).build(entries)
        }
        Err(error) => Err(error),
    }
}

/// What the slot's SQE in the kernel is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Read,
    Write,
    Flush,
    /// fallocate(PUNCH_HOLE | KEEP_SIZE).
    PunchHole,
    /// fallocate(ZERO_RANGE | KEEP_SIZE).
    ZeroRange,
    /// Writing from the static zero block.
    WriteZeroBlock,
    /// fdatasync after a FUA write-zeroes/deallocate done with fallocate.
    SyncAfter,
}

struct Slot {
    token: u64,
    stage: Stage,
    /// The caller's buffer, handed back in the completion.
    buffer: Vec<u8>,
    /// Aligned staging copy for O_DIRECT when the caller's buffer is not aligned.
    bounce: Option<AlignedBuf>,
    /// Byte offset and length of the whole request in the file.
    offset: u64,
    len: u64,
    /// Bytes already transferred.
    done: u64,
    force_unit_access: bool,
}

pub(crate) struct FileQueue {
    shared: Arc<Shared>,
    /// None when the ring could not be created: every request fails with Internal.
    ring: Option<IoUring>,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<usize>,
    /// SQEs that did not fit the submission ring; pushed in `reap`.
    backlog: VecDeque<squeue::Entry>,
    /// SQEs handed to the ring (pushed, submitted or not) whose CQE has not arrived.
    in_kernel: usize,
    /// The ring posts completions to the runtime thread's storage-wake eventfd: the
    /// thread may sleep while requests are in the kernel.
    wakes_thread: bool,
    /// SQEs pushed since the last successful `io_uring_enter`: the thread must reap
    /// (which submits them) before it may sleep.
    unsubmitted: bool,
    ready: Vec<IoCompletion>,
    pool: BouncePool,
    cqes: Vec<(u64, i32)>,
}

impl FileQueue {
    /// A queue; with `wake_fd` (the owning runtime thread's storage-wake eventfd) its
    /// ring signals that eventfd on every completion, so the thread sleeps while file
    /// I/O is in flight instead of polling the ring.
    pub(super) fn new(shared: Arc<Shared>, wake_fd: Option<std::os::fd::RawFd>) -> FileQueue {
        let ring = match build_ring(shared.queue_entries, wake_fd.is_some()) {
            Ok(ring) => Some(ring),
            Err(error) => {
                tracing::error!(%error, "file backend: cannot create an io_uring for a queue; its requests will fail");
                None
            }
        };
        let wakes_thread = match (&ring, wake_fd) {
            (Some(ring), Some(fd)) => match ring.submitter().register_eventfd(fd) {
                Ok(()) => true,
                Err(error) => {
                    tracing::debug!(%error, "file backend: no completion eventfd; the thread polls while I/O is in flight");
                    false
                }
            },
            _ => false,
        };
        let depth = shared.queue_entries as usize;
        FileQueue {
            shared,
            ring,
            slots: Vec::with_capacity(depth),
            free_slots: Vec::with_capacity(depth),
            backlog: VecDeque::new(),
            in_kernel: 0,
            wakes_thread,
            unsubmitted: false,
            ready: Vec::with_capacity(depth),
            pool: BouncePool::new(depth),
            cqes: Vec::with_capacity(depth * 2),
        }
    }

    fn fd(&self) -> types::Fd {
        types::Fd(self.shared.file.as_raw_fd())
    }

    fn complete(&mut self, token: u64, result: Result<(), IoError>, buffer: Vec<u8>) {
        self.ready.push(IoCompletion { token, result, buffer });
    }

    fn allocate_slot(&mut self, slot: Slot) -> usize {
        match self.free_slots.pop() {
            Some(index) => {
                self.slots[index] = Some(slot);
                index
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Builds and queues the SQE for the slot's current stage.
    fn issue(&mut self, index: usize) {
        let fd = self.fd();
        let slot = self.slots[index].as_mut().expect("issue on a live slot");
        let remaining = slot.len - slot.done;
        let position = slot.offset + slot.done;
        let chunk = remaining.min(MAX_TRANSFER_BYTES) as u32;
        let dsync = if slot.force_unit_access { libc::RWF_DSYNC } else { 0 };
        let entry = match slot.stage {
            Stage::Read => {
                let base = match slot.bounce.as_mut() {
                    Some(bounce) => bounce.as_mut_ptr(),
                    None => slot.buffer.as_mut_ptr(),
                };
                // SAFETY: `done < len <= buffer length`, so the pointer stays inside the
                // (bounce or caller) buffer the slot owns.
                let ptr = unsafe { base.add(slot.done as usize) };
                opcode::Read::new(fd, ptr, chunk).offset(position).build()
            }
            Stage::Write => {
                let base = match slot.bounce.as_ref() {
                    Some(bounce) => bounce.as_ptr(),
                    None => slot.buffer.as_ptr(),
                };
                // SAFETY: as for Read.
                let ptr = unsafe { base.add(slot.done as usize) };
                opcode::Write::new(fd, ptr, chunk).offset(position).rw_flags(dsync).build()
            }
            Stage::WriteZeroBlock => {
                let chunk = remaining.min(ZERO_BLOCK_LEN as u64) as u32;
                opcode::Write::new(fd, ZEROES.0.as_ptr(), chunk).offset(position).rw_flags(dsync).build()
            }
            Stage::Flush | Stage::SyncAfter => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build(),
            Stage::PunchHole => opcode::Fallocate::new(fd, slot.len)
                .offset(slot.offset)
                .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
            Stage::ZeroRange => opcode::Fallocate::new(fd, slot.len)
                .offset(slot.offset)
                .mode(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
        };
        self.push(entry.user_data(index as u64));
    }

    /// Puts an SQE in the submission ring, flushing the ring to the kernel when full;
    /// if it is still full, the entry waits in the backlog.
    fn push(&mut self, entry: squeue::Entry) {
        self.in_kernel += 1;
        if !self.backlog.is_empty() || !self.try_push(&entry) {
            self.backlog.push_back(entry);
        }
    }

    fn try_push(&mut self, entry: &squeue::Entry) -> bool {
        let ring = self.ring.as_mut().expect("requests are only issued with a ring");
        // SAFETY: every pointer in the entry (caller buffer, bounce buffer or the static
        // zero block) is owned by a slot that is not released until the entry's CQE
        // has been reaped (or is leaked if the queue is dropped before that).
        if unsafe { ring.submission().push(entry) }.is_ok() {
            self.unsubmitted = true;
            return true;
        }
        if let Err(error) = ring.submit() {
            tracing::debug!(%error, "file backend: io_uring_enter with a full ring");
        }
        // SAFETY: as above.
        let pushed = unsafe { ring.submission().push(entry) }.is_ok();
        self.unsubmitted |= pushed;
        pushed
    }

    fn flush_backlog(&mut self) {
        while let Some(entry) = self.backlog.pop_front() {
            let ring = self.ring.as_mut().expect("backlog only exists with a ring");
            // SAFETY: as in `try_push`.
            if unsafe { ring.submission().push(&entry) }.is_err() {
                self.backlog.push_front(entry);
                break;
            }
            self.unsubmitted = true;
        }
    }

    /// Submits pushed SQEs (and lets the kernel run completion work).
    fn enter(&mut self) {
        let Some(ring) = self.ring.as_mut() else { return };
        match ring.submit() {
            Ok(_) => self.unsubmitted = !ring.submission().is_empty(),
            Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)) => {}
            Err(error) => tracing::warn!(%error, "file backend: io_uring_enter failed; retrying on the next reap"),
        }
    }

    fn handle_cqe(&mut self, index: usize, result: i32) {
        self.in_kernel -= 1;
        let stage = self.slots[index].as_ref().expect("CQE for a live slot").stage;
        if result < 0 {
            let errno = -result;
            let unsupported = matches!(errno, libc::EOPNOTSUPP | libc::EINVAL | libc::ENOTTY | libc::ENOSYS);
            match stage {
                Stage::PunchHole if unsupported => {
                    self.shared.punch_hole_supported.store(false, Ordering::Relaxed);
                    return self.start_zeroing(index);
                }
                Stage::ZeroRange if unsupported => {
                    self.shared.zero_range_supported.store(false, Ordering::Relaxed);
                    let slot = self.slots[index].as_mut().expect("live slot");
                    slot.stage = Stage::WriteZeroBlock;
                    return self.issue(index);
                }
                _ => return self.finish(index, Err(map_errno(stage, errno))),
            }
        }
        let slot = self.slots[index].as_mut().expect("live slot");
        match slot.stage {
            Stage::Read | Stage::Write | Stage::WriteZeroBlock => {
                if result == 0 {
                    // End of file inside the namespace: someone truncated it.
                    let error = if slot.stage == Stage::Read { IoError::ReadError } else { IoError::WriteFault };
                    return self.finish(index, Err(error));
                }
                slot.done += result as u64;
                if slot.done < slot.len {
                    self.issue(index);
                } else {
                    self.finish(index, Ok(()));
                }
            }
            Stage::PunchHole | Stage::ZeroRange => {
                if slot.force_unit_access {
                    slot.stage = Stage::SyncAfter;
                    self.issue(index);
                } else {
                    self.finish(index, Ok(()));
                }
            }
            Stage::Flush | Stage::SyncAfter => self.finish(index, Ok(())),
        }
    }

    /// Write-zeroes without (or after a refused) punch hole.
    fn start_zeroing(&mut self, index: usize) {
        let zero_range = self.shared.zero_range_supported.load(Ordering::Relaxed);
        let slot = self.slots[index].as_mut().expect("live slot");
        slot.stage = if zero_range { Stage::ZeroRange } else { Stage::WriteZeroBlock };
        self.issue(index);
    }

    fn finish(&mut self, index: usize, result: Result<(), IoError>) {
        let mut slot = self.slots[index].take().expect("finish a live slot");
        self.free_slots.push(index);
        if let Some(bounce) = slot.bounce.take() {
            if result.is_ok() && slot.stage == Stage::Read {
                let len = slot.buffer.len();
                slot.buffer.copy_from_slice(bounce.as_slice(len));
            }
            self.pool.give_back(bounce);
        }
        self.complete(slot.token, result, slot.buffer);
    }
}

fn map_errno(stage: Stage, errno: i32) -> IoError {
    match errno {
        libc::ENOSPC | libc::EDQUOT => IoError::NoSpace,
        libc::EINVAL | libc::EFAULT | libc::EBADF | libc::ECANCELED | libc::ENOMEM | libc::EAGAIN => IoError::Internal,
        _ if stage == Stage::Read => IoError::ReadError,
        _ => IoError::WriteFault,
    }
}

impl BackendQueue for FileQueue {
    fn submit(&mut self, request: IoRequest) {
        let IoRequest { token, op, buffer } = request;
        let geometry = self.shared.geometry.get();
        if let Err(error) = validate_request(&geometry, &op, buffer.len()) {
            return self.complete(token, Err(error), buffer);
        }
        if self.ring.is_none() {
            return self.complete(token, Err(IoError::Internal), buffer);
        }
        let block_size = u64::from(geometry.block_size_bytes);
        let (lba, blocks) = op.range().unwrap_or((0, 0));
        if op != IoOp::Flush && blocks == 0 {
            return self.complete(token, Ok(()), buffer);
        }
        // In range, so these cannot overflow (validate_request checked the capacity).
        let offset = lba * block_size;
        let len = blocks * block_size;
        let (stage, force_unit_access) = match op {
            IoOp::Read { .. } => (Stage::Read, false),
            IoOp::Write { force_unit_access, .. } => (Stage::Write, force_unit_access),
            IoOp::Flush => (Stage::Flush, false),
            IoOp::WriteZeroes { deallocate, force_unit_access, .. } => {
                (self.zeroing_stage(deallocate), force_unit_access)
            }
            IoOp::Deallocate { .. } => (self.zeroing_stage(true), false),
            // Refused by validate_request above.
            IoOp::CompareAndWrite { .. } => return self.complete(token, Err(IoError::Internal), buffer),
        };
        let needs_bounce = self.shared.direct_io
            && matches!(stage, Stage::Read | Stage::Write)
            && (buffer.as_ptr() as usize & (DIRECT_IO_ALIGNMENT - 1)) != 0;
        let bounce = needs_bounce.then(|| {
            let mut bounce = self.pool.take(buffer.len());
            if stage == Stage::Write {
                bounce.as_mut_slice(buffer.len()).copy_from_slice(&buffer);
            }
            bounce
        });
        let index = self.allocate_slot(Slot { token, stage, buffer, bounce, offset, len, done: 0, force_unit_access });
        self.issue(index);
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        if self.ring.is_some() && self.in_kernel > 0 {
            self.flush_backlog();
            let ring = self.ring.as_mut().expect("checked");
            let pending_sqes = !ring.submission().is_empty();
            let cq_empty = ring.completion().is_empty();
            if pending_sqes || cq_empty {
                self.enter();
            }
            let ring = self.ring.as_mut().expect("checked");
            self.cqes.extend(ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
            let mut cqes = std::mem::take(&mut self.cqes);
            for (user_data, result) in cqes.drain(..) {
                self.handle_cqe(user_data as usize, result);
            }
            self.cqes = cqes;
            // Follow-up SQEs (split transfers, fallbacks) go out now rather than next time.
            let ring = self.ring.as_mut().expect("checked");
            if !ring.submission().is_empty() {
                self.enter();
            }
        }
        out.append(&mut self.ready);
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len() + self.ready.len()
    }

    /// Asleep is safe only when everything is in the kernel: nothing to hand back,
    /// nothing pushed and not submitted, nothing waiting for ring space.
    fn wakes_on_completion(&self) -> bool {
        self.wakes_thread && self.ready.is_empty() && !self.unsubmitted && self.backlog.is_empty()
    }
}

impl FileQueue {
    fn zeroing_stage(&self, deallocate: bool) -> Stage {
        if deallocate && self.shared.punch_hole_supported.load(Ordering::Relaxed) {
            Stage::PunchHole
        } else if self.shared.zero_range_supported.load(Ordering::Relaxed) {
            Stage::ZeroRange
        } else {
            Stage::WriteZeroBlock
        }
    }
}

impl Drop for FileQueue {
    /// Waits for every SQE the kernel has seen, so no buffer it may still write is
    /// freed. SQEs still in the user-space backlog were never seen and are dropped.
    /// On an I/O thread (a connection's drain gave up on storage that stopped
    /// answering), a service thread does the waiting, so the thread's other
    /// connections carry on.
    fn drop(&mut self) {
        let Some(ring) = self.ring.take() else { return };
        let in_kernel = self.in_kernel - self.backlog.len();
        self.backlog.clear();
        if in_kernel == 0 {
            return;
        }
        let leftover = Leftover { ring, _slots: std::mem::take(&mut self.slots), in_kernel };
        if storage::service::is_io_thread() {
            storage::service::process_service().execute_long(Box::new(move || leftover.drain()));
        } else {
            leftover.drain();
        }
    }
}

/// A dropped queue's ring and buffers while some of its SQEs are still in the kernel.
struct Leftover {
    ring: IoUring,
    /// Not read, held: the buffers the kernel may still write into, freed with this
    /// value (after the ring) or leaked with it.
    _slots: Vec<Option<Slot>>,
    in_kernel: usize,
}

impl Leftover {
    /// Waits until the kernel has finished every SQE, then frees the buffers; if it
    /// does not finish within [`DROP_DRAIN_TIMEOUT`], leaks the ring and the buffers
    /// instead, as the kernel may still write into them.
    fn drain(mut self) {
        storage::service::debug_assert_may_block("waiting for a dropped file queue's I/O");
        let deadline = Instant::now() + DROP_DRAIN_TIMEOUT;
        while self.in_kernel > 0 && Instant::now() < deadline {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(error) if matches!(error.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => {}
                Err(error) => {
                    tracing::error!(%error, "file backend: cannot drain a dropped queue; leaking its buffers");
                    break;
                }
            }
            // Only the CQE matters: each slot has at most one SQE in the kernel, so
            // after its CQE nothing refers to the slot's memory any more.
            self.in_kernel = self.in_kernel.saturating_sub(self.ring.completion().count());
        }
        if self.in_kernel > 0 {
            tracing::error!(
                in_kernel = self.in_kernel,
                "file backend: dropped queue still has I/O in the kernel; leaking its buffers"
            );
            std::mem::forget(self);
        }
    }
}

#[cfg(test)]
mod wake_tests {
    use super::*;
    use crate::file_backend::{FileBackend, FileOptions};

    /// Waits (at most 5 s) until `fd` is readable.
    fn readable(fd: std::os::fd::RawFd) -> bool {
        let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut poll, 1, 5000) == 1 }
    }

    #[test]
    fn a_ring_with_a_wake_fd_rings_it_and_lets_the_thread_sleep() {
        let path = std::env::temp_dir().join(format!("sluice-file-wake-{}", std::process::id()));
        let options =
            FileOptions { block_size_bytes: Some(4096), direct_io: false, size_bytes: Some(1 << 20), queue_entries: 8 };
        let backend = FileBackend::open(&path, options).expect("open test file");
        let _ = std::fs::remove_file(&path);
        // SAFETY: eventfd has no memory arguments; the descriptor is closed below.
        let event_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(event_fd >= 0);
        let mut queue = FileQueue::new(Arc::clone(&backend.shared), Some(event_fd));
        assert!(queue.wakes_thread, "the kernel accepts the eventfd");
        assert!(queue.wakes_on_completion(), "nothing in flight: nothing to poll");
        queue.submit(IoRequest {
            token: 7,
            op: IoOp::Write { lba: 3, blocks: 1, force_unit_access: true },
            buffer: vec![9; 4096],
        });
        assert!(!queue.wakes_on_completion(), "pushed but not submitted: the thread must reap first");
        let mut out = Vec::new();
        queue.reap(&mut out);
        for _ in 0..100 {
            if !out.is_empty() {
                break;
            }
            assert!(queue.wakes_on_completion(), "in the kernel: the thread may sleep");
            assert!(readable(event_fd), "the ring rang the eventfd");
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a u64 on the stack.
            unsafe { libc::read(event_fd, (&mut count as *mut u64).cast(), 8) };
            queue.reap(&mut out);
        }
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].token, 7);
        assert_eq!(out[0].result, Ok(()));
        drop(queue);
        // SAFETY: the descriptor is ours; the ring that had it registered is gone.
        unsafe { libc::close(event_fd) };
    }

    /// A drain that gave up drops the queue on its I/O thread: waiting there for I/O
    /// stuck in the kernel would stall every connection of the thread for up to
    /// DROP_DRAIN_TIMEOUT (30 s). A service thread waits instead, and still frees the
    /// buffers once the kernel lets go.
    #[test]
    fn dropping_a_queue_with_io_stuck_in_the_kernel_does_not_block_an_io_thread() {
        let path = std::env::temp_dir().join(format!("sluice-file-stuck-{}", std::process::id()));
        let options =
            FileOptions { block_size_bytes: Some(4096), direct_io: false, size_bytes: Some(1 << 20), queue_entries: 8 };
        let backend = FileBackend::open(&path, options).expect("open test file");
        let _ = std::fs::remove_file(&path);
        let mut queue = FileQueue::new(Arc::clone(&backend.shared), None);
        // A read from an empty pipe stands for storage that stopped answering: the
        // kernel holds it until a byte arrives.
        let mut pipe = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let target: &'static mut [u8; 8] = Box::leak(Box::new([0u8; 8]));
        let entry = opcode::Read::new(types::Fd(pipe[0]), target.as_mut_ptr(), 8).build().user_data(0);
        let ring = queue.ring.as_mut().expect("a ring");
        // SAFETY: the read's buffer is leaked, so it outlives the SQE.
        unsafe { ring.submission().push(&entry) }.expect("room in the ring");
        ring.submit().expect("submitted");
        queue.in_kernel = 1;

        storage::service::mark_io_thread();
        let started = Instant::now();
        drop(queue);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(5), "the I/O thread waited {took:?} for a dropped queue's stuck I/O");

        // The service thread's wait ends once the read completes: it consumes the byte.
        // SAFETY: writes one byte from a live buffer to our pipe.
        assert_eq!(unsafe { libc::write(pipe[1], [1u8].as_ptr().cast(), 1) }, 1);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut left = 1;
        while left > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            // SAFETY: FIONREAD writes an int.
            unsafe { libc::ioctl(pipe[0], libc::FIONREAD, &mut left) };
        }
        assert_eq!(left, 0, "the stuck read completed on the service thread's watch");
        // SAFETY: our descriptors; the read that used pipe[0] has completed.
        unsafe {
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
    }

    #[test]
    fn a_stripe_of_files_opened_on_a_runtime_thread_wakes_it_too() {
        use storage::Backend;
        let dir = std::env::temp_dir();
        let options =
            FileOptions { block_size_bytes: Some(4096), direct_io: false, size_bytes: Some(1 << 20), queue_entries: 8 };
        let members: Vec<Arc<dyn Backend>> = (0..2)
            .map(|index| {
                let path = dir.join(format!("sluice-stripe-wake-{}-{index}", std::process::id()));
                let member: Arc<dyn Backend> = FileBackend::open(&path, options.clone()).expect("open member");
                let _ = std::fs::remove_file(&path);
                member
            })
            .collect();
        let stripe = storage::Raid0Backend::new(members, 16 << 10).expect("raid0 of files");
        // SAFETY: eventfd has no memory arguments; the descriptor is closed below.
        let event_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        crate::storage_wake::set_current_wake_fd(Some(event_fd));
        let waker = std::task::Waker::noop().clone();
        let mut queue = stripe.open_queue_with_waker(&waker);
        crate::storage_wake::set_current_wake_fd(None);
        // 32 KiB from block 2 spans both members.
        queue.submit(IoRequest {
            token: 1,
            op: IoOp::Write { lba: 2, blocks: 8, force_unit_access: false },
            buffer: vec![5; 32768],
        });
        assert!(!queue.wakes_on_completion(), "members have SQEs not yet submitted");
        let mut out = Vec::new();
        queue.reap(&mut out);
        for _ in 0..100 {
            if !out.is_empty() {
                break;
            }
            assert!(queue.wakes_on_completion(), "everything is in the kernel: the thread may sleep");
            assert!(readable(event_fd), "a member ring rang the eventfd");
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a u64 on the stack.
            unsafe { libc::read(event_fd, (&mut count as *mut u64).cast(), 8) };
            queue.reap(&mut out);
        }
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].result, Ok(()));
        drop(queue);
        // SAFETY: the descriptor is ours; the rings that had it registered are gone.
        unsafe { libc::close(event_fd) };
    }
}

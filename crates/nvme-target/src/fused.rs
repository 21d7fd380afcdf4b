//! Fused Compare and Write (FUSES bit 0): a Compare (FUSE 01b) immediately followed
//! on the same queue by a Write (FUSE 10b) of the same blocks. The Write happens only
//! when the Compare matched, and nothing else writes those blocks in between: the
//! pair holds its range in the namespace's `RangeLocks` from before the read until
//! the write is done, against other pairs on any queue or thread and against writes
//! that start meanwhile (they wait, see `write_waits_for_range`).
//!
//! Order on the wire decides pairing: the command after a first must be its second.
//! A first followed by anything else, or a second without a first, is aborted with
//! Missing Fused Command; when one command of a pair fails, the other is aborted with
//! Failed Fused Command. Each command still receives all its data first, so the PDU
//! stream stays in step.

use std::sync::Arc;
use std::time::Instant;

use nvme_spec::opcode::IoOpcode;
use nvme_spec::{Status, SubmissionQueueEntry};
use storage::IoOp;

use crate::connection::Connection;
use crate::outcome::Outcome;
use crate::range_locks::HoldOutcome;
use crate::slots::{FusedLink, PendingKind, SlotState};

/// FUSE 00b: a normal command.
const FUSE_NONE: u8 = 0b00;
/// FUSE 01b: the first command of a fused operation.
const FUSE_FIRST: u8 = 0b01;
/// FUSE 10b: the second command of a fused operation.
const FUSE_SECOND: u8 = 0b10;

/// The first command of a pair, before its second arrived.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AwaitingSecond {
    pub slot: u16,
    /// The first already failed (its slot may be reused): the second is aborted.
    pub failed: bool,
}

/// A connection's fused-operation state.
#[derive(Debug, Default)]
pub(crate) struct FusedQueue {
    /// The last command received was a first.
    pub awaiting_second: Option<AwaitingSecond>,
    /// Slots waiting for a range held elsewhere: the first of a pair, or a plain
    /// write. Retried when a range is released (the storage waker) or polled.
    pub parked: Vec<u16>,
}

/// The blocks a read/write-family command covers: (SLBA, NLB as a count).
fn range_of(sqe: &SubmissionQueueEntry) -> (u64, u64) {
    (sqe.starting_lba(), u64::from(sqe.block_count()))
}

impl Connection {
    /// Called for every command capsule, in arrival order: pairs a second with the
    /// first before it and refuses fused bits where they do not belong.
    pub(crate) fn order_fused(&mut self, slot_index: u16) {
        let sqe = self.slots.slot_ref(slot_index).sqe;
        let fuse = sqe.fused();
        if fuse != FUSE_SECOND {
            if let Some(waiting) = self.fused.awaiting_second.take() {
                if !waiting.failed {
                    self.fail_fused_member(waiting.slot, Status::ABORTED_MISSING_FUSED);
                }
            }
        }
        if fuse == FUSE_NONE {
            return;
        }
        let io_queue = self.binding.as_ref().is_some_and(|binding| !binding.queue_id.is_admin());
        let opcode = IoOpcode::from_u8(sqe.opcode());
        match fuse {
            FUSE_FIRST if io_queue && opcode == Some(IoOpcode::Compare) => {
                self.slots.slot(slot_index).fused = FusedLink::First { second: None };
                self.fused.awaiting_second = Some(AwaitingSecond { slot: slot_index, failed: false });
            }
            FUSE_FIRST => {
                // Only Compare and Write may be fused: the pair fails.
                self.defer_status(slot_index, Status::INVALID_FIELD.with_do_not_retry());
                self.fused.awaiting_second = Some(AwaitingSecond { slot: slot_index, failed: true });
            }
            FUSE_SECOND => match self.fused.awaiting_second.take() {
                Some(AwaitingSecond { slot: first, failed: false }) => {
                    if io_queue && opcode == Some(IoOpcode::Write) {
                        self.slots.slot(first).fused = FusedLink::First { second: Some(slot_index) };
                        self.slots.slot(slot_index).fused = FusedLink::Second { first };
                    } else {
                        self.defer_status(slot_index, Status::INVALID_FIELD.with_do_not_retry());
                        self.fail_fused_member(first, Status::ABORTED_FAILED_FUSED);
                    }
                }
                Some(AwaitingSecond { failed: true, .. }) => {
                    self.defer_status(slot_index, Status::ABORTED_FAILED_FUSED);
                }
                None => self.defer_status(slot_index, Status::ABORTED_MISSING_FUSED),
            },
            // 11b is reserved.
            _ => self.defer_status(slot_index, Status::INVALID_FIELD.with_do_not_retry()),
        }
    }

    /// The command fails with `status` once its data is in (the stream stays in step).
    fn defer_status(&mut self, slot_index: u16, status: Status) {
        let slot = self.slots.slot(slot_index);
        if slot.deferred_status.is_success() {
            slot.deferred_status = status;
        }
    }

    /// Fails one command of a pair because of the other: now if it was only waiting,
    /// else once its data is in.
    fn fail_fused_member(&mut self, slot_index: u16, status: Status) {
        let slot = self.slots.slot(slot_index);
        slot.fused = FusedLink::None;
        match slot.state {
            SlotState::WaitingFused => {
                self.fused.parked.retain(|&parked| parked != slot_index);
                self.complete(slot_index, status, 0);
            }
            SlotState::ReceivingInCapsuleData | SlotState::ReceivingHostData => {
                self.defer_status(slot_index, status);
            }
            // At the storage or already answered: nothing left to fail.
            _ => {}
        }
    }

    /// A command is completing: a failed member of a pair takes its partner down.
    pub(crate) fn on_fused_completion(&mut self, slot_index: u16, status: Status) {
        let link = std::mem::replace(&mut self.slots.slot(slot_index).fused, FusedLink::None);
        let partner = match link {
            FusedLink::None => return,
            FusedLink::First { second: None } => {
                if let Some(waiting) = &mut self.fused.awaiting_second {
                    if waiting.slot == slot_index {
                        waiting.failed = true;
                    }
                }
                return;
            }
            FusedLink::First { second: Some(partner) } | FusedLink::Second { first: partner } => partner,
        };
        if !status.is_success() {
            self.fail_fused_member(partner, Status::ABORTED_FAILED_FUSED);
        }
    }

    /// A fused command has all its data: check it, and start the pair once both are
    /// ready.
    pub(crate) fn fused_data_ready(&mut self, slot_index: u16) -> Result<Outcome, Status> {
        let sqe = self.slots.slot_ref(slot_index).sqe;
        let (_, bytes) = self.validate_transfer(&sqe)?;
        if self.slots.slot_ref(slot_index).host_data_bytes != bytes {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        self.slots.slot(slot_index).state = SlotState::WaitingFused;
        let (first, second) = match self.slots.slot_ref(slot_index).fused {
            FusedLink::First { second: Some(second) } => (slot_index, second),
            FusedLink::Second { first } => (first, slot_index),
            // The second has not arrived yet; it starts the pair.
            FusedLink::First { second: None } => return Ok(Outcome::Pending),
            FusedLink::None => return Err(Status::INTERNAL_ERROR),
        };
        let partner = if first == slot_index { second } else { first };
        if self.slots.slot_ref(partner).state != SlotState::WaitingFused {
            return Ok(Outcome::Pending);
        }
        let (first_sqe, second_sqe) = (self.slots.slot_ref(first).sqe, self.slots.slot_ref(second).sqe);
        if first_sqe.namespace_id() != second_sqe.namespace_id() || range_of(&first_sqe) != range_of(&second_sqe) {
            // The pair must name the same blocks.
            self.complete(first, Status::INVALID_FIELD.with_do_not_retry(), 0);
            return Ok(Outcome::Pending);
        }
        self.try_start_pair(first);
        Ok(Outcome::Pending)
    }

    /// Takes the pair's range and reads the blocks, or parks the pair until the range
    /// is free.
    fn try_start_pair(&mut self, first: u16) {
        let sqe = self.slots.slot_ref(first).sqe;
        let Some(namespace) = self.view.get(sqe.namespace_id()).cloned() else {
            self.complete(first, Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry(), 0);
            return;
        };
        let (lba, blocks) = range_of(&sqe);
        // The storage's own compare-and-write (RBD: one OSD operation) is atomic
        // against every process, but only inside one aligned region (Ceph 16.2: a
        // 512-byte sector). A pair inside one runs there. On a gateway group the
        // range table below protects nothing from the other gateways, so any other
        // pair is refused, never run in two steps; a single process runs it with the
        // range table, which is atomic for it.
        let atomic_in_storage =
            namespace.backend.atomic_compare_and_write_boundary_bytes().is_some_and(|boundary_bytes| {
                let block_bytes = u64::from(namespace.geometry().block_size_bytes);
                let first_region = lba.saturating_mul(block_bytes).checked_div(boundary_bytes);
                let last_region = lba
                    .saturating_add(blocks)
                    .saturating_mul(block_bytes)
                    .saturating_sub(1)
                    .checked_div(boundary_bytes);
                first_region.is_some() && first_region == last_region
            });
        let in_group =
            self.group_reservations().is_some() && !self.target.settings.compare_and_write_in_process_only_for_tests;
        if in_group && !atomic_in_storage {
            // The pair can never run atomically here: Invalid Field with DNR (the
            // Identify Namespace atomic boundary fields say which pairs can).
            self.complete(first, Status::INVALID_FIELD.with_do_not_retry(), 0);
            return;
        }
        let atomic_in_storage = atomic_in_storage && !self.target.settings.compare_and_write_in_process_only_for_tests;
        if namespace.range_locks.try_hold(lba, blocks, self.storage.waker()) == HoldOutcome::Busy {
            if !self.fused.parked.contains(&first) {
                self.fused.parked.push(first);
            }
            return;
        }
        let bytes = self.slots.slot_ref(first).host_data_bytes as usize;
        if atomic_in_storage {
            self.start_atomic_pair(first, namespace, bytes);
            return;
        }
        let read_buffer = self.pool.take(bytes);
        let slot = self.slots.slot(first);
        slot.held_range = Some(namespace);
        slot.pending_kind = PendingKind::FusedCompare;
        let op = IoOp::Read { lba, blocks: sqe.block_count() };
        if let Err(status) = self.submit_storage(first, sqe.namespace_id(), op, read_buffer) {
            self.release_held_range(first);
            self.complete(first, status, 0);
        }
    }

    /// Runs the pair as one compare-and-write of the storage (atomic against every
    /// process that writes it, e.g. every gateway of an RBD image): the compare data
    /// then the write data, in one buffer. The range stays held too, so this
    /// process's own writes keep waiting for the pair as on every backend.
    fn start_atomic_pair(&mut self, first: u16, namespace: Arc<crate::Namespace>, bytes: usize) {
        let FusedLink::First { second: Some(second) } = self.slots.slot_ref(first).fused else {
            self.complete(first, Status::INTERNAL_ERROR, 0);
            return;
        };
        let sqe = self.slots.slot_ref(first).sqe;
        let second_sqe = self.slots.slot_ref(second).sqe;
        let mut both = self.pool.take(bytes * 2);
        let (compare_half, write_half) = both.split_at_mut(bytes);
        match (self.slots.slot_ref(first).buffer.get(..bytes), self.slots.slot_ref(second).buffer.get(..bytes)) {
            (Some(compare), Some(write)) => {
                compare_half.copy_from_slice(compare);
                write_half.copy_from_slice(write);
            }
            _ => {
                self.pool.give(both);
                namespace.range_locks.release(sqe.starting_lba(), u64::from(sqe.block_count()));
                self.complete(first, Status::INTERNAL_ERROR, 0);
                return;
            }
        }
        let slot = self.slots.slot(first);
        slot.held_range = Some(namespace);
        slot.pending_kind = PendingKind::FusedAtomic;
        let op = IoOp::CompareAndWrite {
            lba: sqe.starting_lba(),
            blocks: sqe.block_count(),
            force_unit_access: second_sqe.force_unit_access(),
        };
        if let Err(status) = self.submit_storage(first, sqe.namespace_id(), op, both) {
            self.release_held_range(first);
            if status.kind() == Status::RESERVATION_CONFLICT {
                // The reservation changed since the pair was checked and now refuses
                // its write (submission checks writes again, see `write_fence`): the
                // Write fails with it and the Compare is aborted, as when the Write
                // fails on its own.
                self.slots.slot(first).fused = FusedLink::None;
                self.slots.slot(second).fused = FusedLink::None;
                self.complete(first, Status::ABORTED_FAILED_FUSED, 0);
                self.complete(second, status, 0);
                return;
            }
            self.complete(first, status, 0);
        }
    }

    pub(crate) fn release_held_range(&mut self, slot_index: u16) {
        let slot = self.slots.slot(slot_index);
        if let Some(namespace) = slot.held_range.take() {
            let (lba, blocks) = range_of(&slot.sqe);
            namespace.range_locks.release(lba, blocks);
        }
    }

    /// A storage operation of a pair finished (`storage_done` counted it).
    pub(crate) fn fused_storage_done(&mut self, slot_index: u16, status: Status) {
        let slot = self.slots.slot_ref(slot_index);
        match (slot.pending_kind, slot.fused) {
            (PendingKind::FusedCompare, FusedLink::First { second: Some(second) }) => {
                let matched = status.is_success() && slot.buffer == slot.compare_buffer;
                if !matched {
                    self.release_held_range(slot_index);
                    let status = if status.is_success() { Status::COMPARE_FAILURE } else { status };
                    self.complete(slot_index, status, 0);
                    return;
                }
                let sqe = self.slots.slot_ref(second).sqe;
                let op = IoOp::Write {
                    lba: sqe.starting_lba(),
                    blocks: sqe.block_count(),
                    force_unit_access: sqe.force_unit_access(),
                };
                let slot = self.slots.slot(second);
                slot.pending_kind = PendingKind::FusedWrite;
                let buffer = std::mem::take(&mut slot.buffer);
                if let Err(status) = self.submit_storage(second, sqe.namespace_id(), op, buffer) {
                    self.release_held_range(slot_index);
                    self.complete(second, status, 0);
                }
            }
            (PendingKind::FusedAtomic, FusedLink::First { second: Some(second) }) => {
                // One operation decided both: a mismatch fails the Compare (Compare
                // Failure) and aborts the Write; success completes both.
                self.release_held_range(slot_index);
                self.slots.slot(slot_index).fused = FusedLink::None;
                self.slots.slot(second).fused = FusedLink::None;
                let second_status = if status.is_success() { Status::SUCCESS } else { Status::ABORTED_FAILED_FUSED };
                self.complete(slot_index, status, 0);
                self.complete(second, second_status, 0);
            }
            (PendingKind::FusedWrite, FusedLink::Second { first }) => {
                self.release_held_range(first);
                // Unlinked first: each completes with its own status.
                self.slots.slot(first).fused = FusedLink::None;
                self.slots.slot(slot_index).fused = FusedLink::None;
                let first_status = if status.is_success() { Status::SUCCESS } else { Status::ABORTED_FAILED_FUSED };
                self.complete(first, first_status, 0);
                self.complete(slot_index, status, 0);
            }
            _ => {
                // The partner was failed meanwhile (connection closing): just answer.
                self.release_held_range(slot_index);
                self.complete(slot_index, if status.is_success() { Status::ABORTED_FAILED_FUSED } else { status }, 0);
            }
        }
    }

    /// A write-group command on `namespace`'s blocks that a fused pair holds waits
    /// (parked) until the pair is done. One relaxed load when no pair runs.
    pub(crate) fn write_waits_for_range(
        &mut self,
        slot_index: u16,
        namespace: &Arc<crate::Namespace>,
        lba: u64,
        blocks: u64,
    ) -> bool {
        if !namespace.range_locks.write_must_wait(lba, blocks, self.storage.waker()) {
            return false;
        }
        self.slots.slot(slot_index).state = SlotState::WaitingFused;
        if !self.fused.parked.contains(&slot_index) {
            self.fused.parked.push(slot_index);
        }
        true
    }

    /// Retries every parked command (a range may have been released).
    pub(crate) fn retry_parked(&mut self, now: Instant) {
        if self.fused.parked.is_empty() {
            return;
        }
        let parked = std::mem::take(&mut self.fused.parked);
        for slot_index in parked {
            let slot = self.slots.slot_ref(slot_index);
            if slot.state != SlotState::WaitingFused {
                continue;
            }
            if matches!(slot.fused, FusedLink::First { second: Some(_) }) {
                self.try_start_pair(slot_index);
            } else {
                // A plain write: run it again from the top.
                let outcome = self.execute_io(slot_index, now);
                self.finish(slot_index, outcome);
            }
        }
    }

    /// Releases ranges held by pairs whose storage will never be answered (the
    /// connection is going away).
    pub(crate) fn release_all_held_ranges(&mut self) {
        for slot_index in 0..self.slots.made() as u16 {
            self.release_held_range(slot_index);
        }
        self.fused.parked.clear();
    }

    /// Parked commands exist: without a waker, the runtime must keep polling.
    pub(crate) fn has_parked(&self) -> bool {
        !self.fused.parked.is_empty()
    }
}

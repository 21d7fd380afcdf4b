//! NVM I/O command handlers: Read, Write, Flush, Write Zeroes, Dataset Management,
//! Compare, and the Fabrics commands an I/O queue accepts.

use std::time::Instant;

use nvme_spec::opcode::{FabricsCommandType, IoOpcode};
use nvme_spec::{NamespaceId, Status, SubmissionQueueEntry};
use storage::{Geometry, IoOp};

use crate::connection::{Connection, Phase};
use crate::dispatch::status_from_io_error;
use crate::limits::{LEND_READ_MIN_BYTES, MAX_DATASET_RANGES, MAX_DATA_TRANSFER_BYTES};
use crate::outcome::Outcome;
use crate::slots::{FusedLink, PendingKind, SlotState};

/// CDW12 bit 25 of Write Zeroes: DEAC, deallocate the blocks as well.
const WRITE_ZEROES_DEALLOCATE: u32 = 1 << 25;
/// CDW11 bit 2 of Dataset Management: AD, deallocate the ranges.
const DATASET_ATTRIBUTE_DEALLOCATE: u32 = 1 << 2;
/// Bytes of one Dataset Management range (context attributes, length, SLBA).
const DATASET_RANGE_BYTES: usize = 16;

fn invalid_namespace() -> Status {
    Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry()
}

/// Checks an LBA range and returns its size in bytes.
fn checked_range(geometry: Geometry, lba: u64, blocks: u64) -> Result<u64, Status> {
    if !geometry.contains(lba, blocks) {
        return Err(Status::LBA_OUT_OF_RANGE.with_do_not_retry());
    }
    Ok(blocks * u64::from(geometry.block_size_bytes))
}

impl Connection {
    /// The geometry of an active namespace this path serves I/O for: an inactive NSID
    /// is Invalid Namespace, a namespace whose ANA group serves no I/O here gets the
    /// group state's path related status (the host retries on another path), and a
    /// command of the read or write group (`write`) that a reservation held by
    /// another host forbids gets Reservation Conflict.
    pub(crate) fn namespace_geometry(&self, namespace_id: NamespaceId, write: bool) -> Result<Geometry, Status> {
        let namespace = self.view.get(namespace_id).ok_or_else(invalid_namespace)?;
        self.target.ana.check_io(namespace.ana_group)?;
        if let Some(binding) = &self.binding {
            binding.controller.path_watch.note_command(namespace.ana_group);
            namespace.reservations.check(&binding.controller.host_identifier, write, self.now)?;
        }
        Ok(namespace.geometry())
    }

    /// True when the blocks are held by a fused pair: the command is parked and runs
    /// again once the pair is done.
    pub(crate) fn must_wait_for_range(
        &mut self,
        slot_index: u16,
        namespace_id: NamespaceId,
        lba: u64,
        blocks: u64,
    ) -> bool {
        match self.view.get(namespace_id).cloned() {
            Some(namespace) => self.write_waits_for_range(slot_index, &namespace, lba, blocks),
            None => false,
        }
    }

    /// Checks a read/write-family command's namespace, range and transfer length.
    /// Returns (geometry, bytes).
    pub(crate) fn validate_transfer(&self, sqe: &SubmissionQueueEntry) -> Result<(Geometry, u32), Status> {
        let write = IoOpcode::from_u8(sqe.opcode()) == Some(IoOpcode::Write);
        let geometry = self.namespace_geometry(sqe.namespace_id(), write)?;
        let bytes = checked_range(geometry, sqe.starting_lba(), u64::from(sqe.block_count()))?;
        if bytes > u64::from(MAX_DATA_TRANSFER_BYTES) {
            return Err(Status::INVALID_FIELD.with_do_not_retry());
        }
        let bytes = bytes as u32;
        if sqe.sgl().length != bytes {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        Ok((geometry, bytes))
    }

    /// Checks done before R2T so that a command that will fail does not pull its data.
    pub(crate) fn validate_before_host_data(&mut self, sqe: &SubmissionQueueEntry) -> Result<(), Status> {
        let Some(binding) = &self.binding else { return Ok(()) };
        if binding.queue_id.is_admin() {
            return Ok(());
        }
        self.refresh_namespaces();
        match IoOpcode::from_u8(sqe.opcode()) {
            Some(IoOpcode::Write | IoOpcode::Compare) => self.validate_transfer(sqe).map(|_| ()),
            Some(IoOpcode::DatasetManagement | IoOpcode::Copy) => {
                self.namespace_geometry(sqe.namespace_id(), true).map(|_| ())
            }
            Some(IoOpcode::ReservationRegister | IoOpcode::ReservationAcquire | IoOpcode::ReservationRelease) => {
                if !self.target.settings.reservations {
                    return Err(Status::INVALID_OPCODE.with_do_not_retry());
                }
                self.view.get(sqe.namespace_id()).map(|_| ()).ok_or_else(invalid_namespace)
            }
            _ => Err(Status::INVALID_OPCODE.with_do_not_retry()),
        }
    }

    /// Runs an I/O queue command.
    pub(crate) fn execute_io(&mut self, slot_index: u16, now: Instant) -> Outcome {
        if self.controller_gone() {
            self.phase = Phase::Closing;
            return Outcome::status(Status::ABORTED_SQ_DELETION);
        }
        self.refresh_namespaces();
        let sqe = self.slots.slot(slot_index).sqe;
        if self.throttle(slot_index, now) {
            return Outcome::Pending;
        }
        let fused = self.slots.slot_ref(slot_index).fused != FusedLink::None;
        let result = match IoOpcode::from_u8(sqe.opcode()) {
            Some(IoOpcode::Compare | IoOpcode::Write) if fused => self.fused_data_ready(slot_index),
            Some(IoOpcode::Read) => self.io_read(slot_index, &sqe, now),
            Some(IoOpcode::Write) => self.io_write(slot_index, &sqe),
            Some(IoOpcode::Compare) => self.io_compare(slot_index, &sqe),
            Some(IoOpcode::Verify) => self.io_verify(slot_index, &sqe),
            Some(IoOpcode::Flush) => self.io_flush(slot_index, &sqe),
            Some(IoOpcode::WriteZeroes) => self.io_write_zeroes(slot_index, &sqe),
            Some(IoOpcode::DatasetManagement) => self.io_dataset_management(slot_index, &sqe),
            Some(IoOpcode::Copy) => self.io_copy(slot_index, &sqe),
            Some(
                IoOpcode::ReservationRegister
                | IoOpcode::ReservationAcquire
                | IoOpcode::ReservationRelease
                | IoOpcode::ReservationReport,
            ) if !self.target.settings.reservations => Err(Status::INVALID_OPCODE.with_do_not_retry()),
            Some(IoOpcode::ReservationRegister) => self.io_reservation_register(&sqe, slot_index, now),
            Some(IoOpcode::ReservationAcquire) => self.io_reservation_acquire(&sqe, slot_index, now),
            Some(IoOpcode::ReservationRelease) => self.io_reservation_release(&sqe, slot_index, now),
            Some(IoOpcode::ReservationReport) => self.io_reservation_report(&sqe, slot_index),
            Some(IoOpcode::Fabrics) => Ok(self.io_fabrics(&sqe)),
            _ => Err(Status::INVALID_OPCODE.with_do_not_retry()),
        };
        result.unwrap_or_else(Outcome::status)
    }

    fn io_read(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry, now: Instant) -> Result<Outcome, Status> {
        let sgl = sqe.sgl();
        if sgl.length > 0 && !sgl.is_transport() {
            return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_do_not_retry());
        }
        let (_, bytes) = self.validate_transfer(sqe)?;
        // Large reads go out from the backend's own memory when it can lend it. With
        // data digests on the data is read in Rust anyway, so a copy costs nothing more.
        if bytes >= LEND_READ_MIN_BYTES && !self.stream.data_digest() {
            let open = self.backend_queue(sqe.namespace_id())?;
            match open.queue.lend_read(sqe.starting_lba(), sqe.block_count()) {
                None => {}
                Some(Err(error)) => return Err(status_from_io_error(error)),
                Some(Ok(lent)) => {
                    let slot = self.slots.slot(slot_index);
                    slot.lent = Some(lent);
                    slot.pending_kind = PendingKind::Read;
                    slot.state = SlotState::AwaitingStorage;
                    self.storage_done(slot_index, now);
                    return Ok(Outcome::Pending);
                }
            }
        }
        let buffer = self.pool.take(bytes as usize);
        let op = IoOp::Read { lba: sqe.starting_lba(), blocks: sqe.block_count() };
        Ok(self.start_storage(slot_index, sqe.namespace_id(), PendingKind::Read, op, buffer))
    }

    fn io_write(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Result<Outcome, Status> {
        let (_, bytes) = self.validate_transfer(sqe)?;
        if self.slots.slot_ref(slot_index).host_data_bytes != bytes {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        if self.must_wait_for_range(slot_index, sqe.namespace_id(), sqe.starting_lba(), u64::from(sqe.block_count())) {
            return Ok(Outcome::Pending);
        }
        let buffer = std::mem::take(&mut self.slots.slot(slot_index).buffer);
        let op = IoOp::Write {
            lba: sqe.starting_lba(),
            blocks: sqe.block_count(),
            force_unit_access: sqe.force_unit_access(),
        };
        Ok(self.start_storage(slot_index, sqe.namespace_id(), PendingKind::Write, op, buffer))
    }

    fn io_compare(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Result<Outcome, Status> {
        let (_, bytes) = self.validate_transfer(sqe)?;
        if self.slots.slot(slot_index).host_data_bytes != bytes {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        // Compare is rare; its second buffer comes from the pool like any other.
        let read_buffer = self.pool.take(bytes as usize);
        let op = IoOp::Read { lba: sqe.starting_lba(), blocks: sqe.block_count() };
        Ok(self.start_storage(slot_index, sqe.namespace_id(), PendingKind::Compare, op, read_buffer))
    }

    /// Verify: the blocks are read (a failure is the storage's status), nothing is
    /// transferred. At most MDTS per command (VSL says so).
    fn io_verify(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Result<Outcome, Status> {
        if sqe.sgl().length != 0 {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        let geometry = self.namespace_geometry(sqe.namespace_id(), false)?;
        let bytes = checked_range(geometry, sqe.starting_lba(), u64::from(sqe.block_count()))?;
        if bytes > u64::from(MAX_DATA_TRANSFER_BYTES) {
            return Err(Status::INVALID_FIELD.with_do_not_retry());
        }
        let buffer = self.pool.take(bytes as usize);
        let op = IoOp::Read { lba: sqe.starting_lba(), blocks: sqe.block_count() };
        Ok(self.start_storage(slot_index, sqe.namespace_id(), PendingKind::Other, op, buffer))
    }

    fn io_flush(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Result<Outcome, Status> {
        let namespace_id = sqe.namespace_id();
        if namespace_id != NamespaceId::BROADCAST {
            self.namespace_geometry(namespace_id, true)?;
            return Ok(self.start_storage(slot_index, namespace_id, PendingKind::Other, IoOp::Flush, Vec::new()));
        }
        // Broadcast flush: every namespace of the subsystem.
        self.slots.slot(slot_index).pending_kind = PendingKind::Other;
        let mut submitted = 0;
        let mut first_refusal = None;
        for position in 0..self.view.active_ids().len() {
            let Some(&id) = self.view.active_ids().get(position) else { break };
            // Namespaces this path cannot serve are flushed through the path that can.
            if let Err(status) = self.namespace_geometry(id, true) {
                // Not served here (ANA) or reserved by another host: skipped.
                first_refusal.get_or_insert(status);
                continue;
            }
            self.submit_storage(slot_index, id, IoOp::Flush, Vec::new())?;
            submitted += 1;
        }
        match (submitted, first_refusal) {
            // Nothing this path could flush: the host learns why (an ANA state sends
            // it to another path) instead of a success that flushed nothing.
            (0, Some(status)) => Err(status),
            (0, None) => Ok(Outcome::status(Status::SUCCESS)),
            _ => Ok(Outcome::Pending),
        }
    }

    fn io_write_zeroes(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Result<Outcome, Status> {
        let geometry = self.namespace_geometry(sqe.namespace_id(), true)?;
        let blocks = u64::from(sqe.block_count());
        checked_range(geometry, sqe.starting_lba(), blocks)?;
        if self.must_wait_for_range(slot_index, sqe.namespace_id(), sqe.starting_lba(), blocks) {
            return Ok(Outcome::Pending);
        }
        let op = IoOp::WriteZeroes {
            lba: sqe.starting_lba(),
            blocks,
            deallocate: sqe.dwords[12] & WRITE_ZEROES_DEALLOCATE != 0,
            force_unit_access: sqe.force_unit_access(),
        };
        Ok(self.start_storage(slot_index, sqe.namespace_id(), PendingKind::Other, op, Vec::new()))
    }

    fn io_dataset_management(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Result<Outcome, Status> {
        let geometry = self.namespace_geometry(sqe.namespace_id(), true)?;
        let range_count = (sqe.dwords[10] & 0xFF) + 1;
        debug_assert!(range_count <= MAX_DATASET_RANGES);
        let needed = range_count as usize * DATASET_RANGE_BYTES;
        let slot = self.slots.slot(slot_index);
        if (slot.host_data_bytes as usize) < needed {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        if sqe.dwords[11] & DATASET_ATTRIBUTE_DEALLOCATE == 0 {
            // Integral read/write hints only: nothing to do.
            return Ok(Outcome::status(Status::SUCCESS));
        }
        // Check every range before touching any, so a bad range changes nothing.
        let Some(ranges) = slot.buffer.get(..needed) else {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        };
        let mut work = [(0u64, 0u64); MAX_DATASET_RANGES as usize];
        let mut work_count = 0;
        for range in ranges.chunks_exact(DATASET_RANGE_BYTES) {
            // Context attributes (bytes 3:0), length in blocks (7:4), starting LBA (15:8).
            let blocks = u64::from(nvme_spec::bytes::get_u32(range, 4));
            let lba = nvme_spec::bytes::get_u64(range, 8);
            if blocks == 0 {
                continue;
            }
            checked_range(geometry, lba, blocks)?;
            // At most NR + 1 <= 256 ranges, the size of `work`.
            if let Some(place) = work.get_mut(work_count) {
                *place = (lba, blocks);
                work_count += 1;
            }
        }
        if work_count == 0 {
            return Ok(Outcome::status(Status::SUCCESS));
        }
        for &(lba, blocks) in work.iter().take(work_count) {
            if self.must_wait_for_range(slot_index, sqe.namespace_id(), lba, blocks) {
                return Ok(Outcome::Pending);
            }
        }
        self.slots.slot(slot_index).pending_kind = PendingKind::Other;
        for &(lba, blocks) in work.iter().take(work_count) {
            self.submit_storage(slot_index, sqe.namespace_id(), IoOp::Deallocate { lba, blocks }, Vec::new())?;
        }
        Ok(Outcome::Pending)
    }

    /// Fabrics commands on an I/O queue: Disconnect closes the queue; a second Connect
    /// is out of sequence; Property commands belong to the admin queue.
    fn io_fabrics(&mut self, sqe: &SubmissionQueueEntry) -> Outcome {
        match FabricsCommandType::from_u8(sqe.fabrics_command_type()) {
            Some(FabricsCommandType::Disconnect) => {
                self.phase_after_response_closing();
                Outcome::status(Status::SUCCESS)
            }
            Some(FabricsCommandType::Connect) => Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry()),
            _ => Outcome::status(Status::INVALID_OPCODE.with_do_not_retry()),
        }
    }

    /// Closes the connection once the current response is queued.
    pub(crate) fn phase_after_response_closing(&mut self) {
        self.phase = Phase::Closing;
    }
}

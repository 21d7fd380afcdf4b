//! From a received command to its response: fetch host data (in-capsule or by R2T),
//! route the command to its handler, run storage operations and finish.

use std::time::Instant;

use nvme_spec::opcode::AdminOpcode;
use nvme_spec::{NamespaceId, Status, SubmissionQueueEntry};
use storage::{IoCompletion, IoError, IoOp, IoRequest};

use crate::connection::{Connection, Phase};
use crate::limits::MAX_DATA_TRANSFER_BYTES;
use crate::outcome::Outcome;
use crate::slots::{PendingKind, SlotState};
use crate::stats::{PhaseSplit, QueueStats};
use crate::storage_queues::{OpenQueue, StorageActivity};

/// Reaping rounds of one `poll_storage`: enough for the longest chain of storage
/// steps one command runs (fused Compare then Write, Copy's reads then write).
const STORAGE_POLL_ROUNDS: usize = 3;

/// True when the command moves data from host to controller: opcode bits 1:0 are the
/// data transfer direction (01b host to controller, 11b bidirectional). Fabrics
/// commands (7Fh) carry their data in-capsule and are excluded.
fn transfers_host_data(sqe: &SubmissionQueueEntry) -> bool {
    sqe.opcode() != AdminOpcode::Fabrics as u8 && sqe.opcode() & 0b01 != 0
}

/// True when a finished storage command counts into the latency histograms and
/// the phase split (reads, compares and writes that succeeded).
fn counts_latency(kind: PendingKind, status: Status) -> bool {
    status.is_success()
        && matches!(
            kind,
            PendingKind::Read
                | PendingKind::Compare
                | PendingKind::FusedCompare
                | PendingKind::Write
                | PendingKind::FusedWrite
                | PendingKind::FusedAtomic
        )
}

/// Counts one finished storage command into a shard.
fn count_completion(stats: &QueueStats, kind: PendingKind, status: Status, data_bytes: u64, split: PhaseSplit) {
    if !status.is_success() {
        QueueStats::add(&stats.media_errors, 1);
        return;
    }
    // Receipt to storage completion; the Send phase is counted once the response is out.
    let latency_microseconds = split.receive_microseconds + split.qos_microseconds + split.storage_microseconds;
    if counts_latency(kind, status) {
        stats.record_split(split);
    }
    match kind {
        PendingKind::Read | PendingKind::Compare | PendingKind::FusedCompare => {
            QueueStats::add(&stats.read_commands, 1);
            QueueStats::add(&stats.bytes_read, data_bytes);
            stats.read_latency.record(latency_microseconds);
        }
        PendingKind::Write | PendingKind::FusedWrite | PendingKind::FusedAtomic => {
            QueueStats::add(&stats.write_commands, 1);
            QueueStats::add(&stats.bytes_written, data_bytes);
            stats.write_latency.record(latency_microseconds);
        }
        PendingKind::Other | PendingKind::CopyRead | PendingKind::CopyWrite => {
            QueueStats::add(&stats.other_commands, 1)
        }
    }
}

/// Splits receipt-to-completion into its phases: the storage request's own time,
/// the QoS hold, and the rest before the storage request (Receive).
fn phase_split(
    received_at: Option<Instant>,
    storage_submitted_at: Option<Instant>,
    qos_held_microseconds: u64,
    now: Instant,
) -> PhaseSplit {
    let since = |at: Option<Instant>| at.map_or(0, |at| now.saturating_duration_since(at).as_micros() as u64);
    let total_microseconds = since(received_at);
    let storage_microseconds = since(storage_submitted_at).min(total_microseconds);
    let qos_microseconds = qos_held_microseconds.min(total_microseconds - storage_microseconds);
    PhaseSplit {
        receive_microseconds: total_microseconds - storage_microseconds - qos_microseconds,
        qos_microseconds,
        storage_microseconds,
    }
}

/// Maps a backend failure to the NVMe status the host sees for that command.
pub(crate) fn status_from_io_error(error: IoError) -> Status {
    match error {
        IoError::OutOfRange => Status::LBA_OUT_OF_RANGE.with_do_not_retry(),
        IoError::NoSpace => Status::CAPACITY_EXCEEDED.with_do_not_retry(),
        IoError::WriteFault => Status::WRITE_FAULT,
        IoError::ReadError => Status::UNRECOVERED_READ_ERROR,
        IoError::Unavailable => Status::NAMESPACE_NOT_READY,
        IoError::CompareMismatch => Status::COMPARE_FAILURE,
        IoError::BufferLengthMismatch | IoError::Internal => Status::INTERNAL_ERROR,
    }
}

impl Connection {
    /// The capsule and all its in-capsule data are in. Fetch remaining host data
    /// with R2T, or run the command.
    pub(crate) fn command_data_complete(&mut self, slot_index: u16, now: Instant) {
        let slot = self.slots.slot(slot_index);
        if !slot.deferred_status.is_success() {
            let status = slot.deferred_status;
            self.complete(slot_index, status, 0);
            return;
        }
        let sqe = slot.sqe;
        if self.phase == Phase::Live && transfers_host_data(&sqe) && slot.host_data_bytes == 0 {
            let sgl = sqe.sgl();
            if sgl.length > 0 {
                let verdict = if !sgl.is_transport() {
                    Err(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_do_not_retry())
                } else if sgl.length > MAX_DATA_TRANSFER_BYTES {
                    Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry())
                } else {
                    // Fail before asking for data the command cannot use.
                    self.validate_before_host_data(&sqe)
                };
                if let Err(status) = verdict {
                    self.complete(slot_index, status, 0);
                    return;
                }
                let slot = self.slots.slot(slot_index);
                slot.host_data_bytes = sgl.length;
                slot.buffer = self.pool.take(sgl.length as usize);
                self.request_host_data(slot_index);
                return;
            }
        }
        self.execute(slot_index, now);
    }

    /// All host data requested by R2T has arrived.
    pub(crate) fn host_data_complete(&mut self, slot_index: u16, now: Instant) {
        let slot = self.slots.slot(slot_index);
        if !slot.deferred_status.is_success() {
            let status = slot.deferred_status;
            self.complete(slot_index, status, 0);
            return;
        }
        self.execute(slot_index, now);
    }

    fn execute(&mut self, slot_index: u16, now: Instant) {
        let outcome = match self.phase {
            Phase::AwaitingConnect => {
                self.execute_connect(slot_index, now);
                return;
            }
            // Authentication Send/Receive, and the refusal of other commands before
            // the queue authenticated, come first (see `access`).
            Phase::Live => match self.authentication_gate(slot_index) {
                Some(outcome) => outcome,
                None => match &self.binding {
                    Some(binding) if binding.queue_id.is_admin() => self.execute_admin(slot_index, now),
                    Some(_) => self.execute_io(slot_index, now),
                    None => Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry()),
                },
            },
            Phase::AwaitingIcReq | Phase::Closing => {
                self.discard(slot_index);
                return;
            }
        };
        self.finish(slot_index, outcome);
    }

    /// Applies a handler's outcome.
    pub(crate) fn finish(&mut self, slot_index: u16, outcome: Outcome) {
        match outcome {
            Outcome::Done(status, result) => self.complete(slot_index, status, result),
            Outcome::Data(bytes) => {
                self.slots.slot(slot_index).send_data_bytes = bytes;
                self.complete(slot_index, Status::SUCCESS, 0);
            }
            Outcome::Pending => {}
        }
    }

    /// Drops a command without a response (the connection is closing).
    fn discard(&mut self, slot_index: u16) {
        let slot = self.slots.slot(slot_index);
        let buffer = std::mem::take(&mut slot.buffer);
        self.pool.give(buffer);
        self.slots.release(slot_index);
    }

    /// Submits one storage operation for the command in `slot_index`.
    pub(crate) fn submit_storage(
        &mut self,
        slot_index: u16,
        namespace_id: NamespaceId,
        op: IoOp,
        buffer: Vec<u8>,
    ) -> Result<(), Status> {
        self.submit_storage_with_token(slot_index, u64::from(slot_index), namespace_id, op, buffer)
    }

    /// `submit_storage` with a token that carries more than the slot index in its
    /// upper bits (the low 16 bits are the slot).
    pub(crate) fn submit_storage_with_token(
        &mut self,
        slot_index: u16,
        token: u64,
        namespace_id: NamespaceId,
        op: IoOp,
        buffer: Vec<u8>,
    ) -> Result<(), Status> {
        let request = IoRequest { token, op, buffer };
        self.storage.submit(namespace_id, &self.view, request, self.now)?;
        let slot = self.slots.slot(slot_index);
        slot.pending_operations += 1;
        slot.state = SlotState::AwaitingStorage;
        if slot.storage_submitted_at.is_none() {
            slot.storage_submitted_at = Some(self.now);
        }
        Ok(())
    }

    /// This connection's queue on the namespace's backend, opened on first use.
    pub(crate) fn backend_queue(&mut self, namespace_id: NamespaceId) -> Result<&mut OpenQueue, Status> {
        self.storage.open(namespace_id, &self.view)
    }

    /// True when storage operations are in flight that nothing will wake the thread
    /// for (the runtime then calls `poll_storage` without waiting for the socket).
    /// Queues that call the storage waker on completion do not count: the thread
    /// sleeps and polls when woken.
    pub fn has_pending_storage(&self) -> bool {
        self.storage_activity().pending_storage
    }

    /// True when storage requests are in flight whose queues wake the thread on
    /// completion: the runtime's adaptive mode sleeps rather than spins for them.
    pub fn awaits_storage(&self) -> bool {
        self.storage_activity().awaits_storage
    }

    /// `has_pending_storage` and `awaits_storage` together, in one pass over the
    /// connection's queues: the runtime asks both after every call.
    pub fn storage_activity(&self) -> StorageActivity {
        let queues = self.storage.activity();
        StorageActivity {
            pending_storage: queues.must_poll || self.waits_unwoken(),
            awaits_storage: queues.awaits_waking_queue,
        }
    }

    /// Parked commands or held tickets wait for a release that no waker announces.
    fn waits_unwoken(&self) -> bool {
        self.storage.waker().is_none() && (self.has_parked() || !self.held_tickets.is_empty())
    }

    /// Collects storage completions and finishes the commands they belong to.
    pub fn poll_storage(&mut self, now: Instant) {
        self.now = now;
        // Woken maybe because a range a parked command waits for was released, or a
        // reservation state became durable.
        self.retry_parked(now);
        self.complete_persisted(now);
        // Commands that run several storage steps one after the other (a fused pair,
        // Copy) submit the next step while their completion is handled: reap again
        // (a few rounds at most) so backends that complete at once finish them here.
        for _round in 0..STORAGE_POLL_ROUNDS {
            let mut completions = self.storage.reap();
            let reaped = !completions.is_empty();
            for completion in completions.drain(..) {
                self.on_storage_completion(completion, now);
            }
            self.storage.recycle(completions);
            if !reaped {
                break;
            }
        }
    }

    fn on_storage_completion(&mut self, completion: IoCompletion, now: Instant) {
        let slot_index = completion.token as u16;
        if self.cleaned_up {
            // Closed and draining: the command is over for everyone; start nothing
            // more for it (the next step of a fused pair or a Copy).
            self.pool.give(completion.buffer);
            if self.slots.get(slot_index).is_some_and(|slot| slot.state != SlotState::Free) {
                // Its own request landed: a range it held (a Compare and Write) is free.
                self.release_held_range(slot_index);
                self.slots.release(slot_index);
            }
            return;
        }
        let Some(slot) = self.slots.get(slot_index) else {
            self.pool.give(completion.buffer);
            return;
        };
        if slot.state != SlotState::AwaitingStorage {
            // Our bug: a completion for a slot that is not waiting for one.
            debug_assert!(false, "storage completion for slot {slot_index} in {:?}", slot.state);
            self.pool.give(completion.buffer);
            return;
        }
        let compares = matches!(slot.pending_kind, PendingKind::Compare | PendingKind::FusedCompare);
        if slot.pending_kind == PendingKind::CopyRead {
            self.copy_read_arrived(slot_index, completion.token, completion.buffer);
        } else if compares && slot.compare_buffer.is_empty() {
            slot.compare_buffer = completion.buffer;
        } else if slot.buffer.is_empty() {
            slot.buffer = completion.buffer;
        } else {
            self.pool.give(completion.buffer);
        }
        let slot = self.slots.slot(slot_index);
        if let Err(error) = completion.result {
            if slot.storage_status.is_success() {
                slot.storage_status = status_from_io_error(error);
            }
        }
        slot.pending_operations -= 1;
        if slot.pending_operations == 0 {
            self.storage_done(slot_index, now);
        }
    }

    pub(crate) fn storage_done(&mut self, slot_index: u16, now: Instant) {
        let slot = self.slots.slot(slot_index);
        let status = slot.storage_status;
        let split = phase_split(slot.received_at, slot.storage_submitted_at, slot.qos_held_microseconds, now);
        let kind = slot.pending_kind;
        let data_bytes = match kind {
            PendingKind::Read => slot.lent.as_ref().map_or(slot.buffer.len(), storage::LentBytes::len) as u64,
            PendingKind::Compare | PendingKind::FusedCompare => slot.compare_buffer.len() as u64,
            PendingKind::Write | PendingKind::FusedWrite | PendingKind::FusedAtomic => u64::from(slot.host_data_bytes),
            PendingKind::Other | PendingKind::CopyRead | PendingKind::CopyWrite => 0,
        };
        // Counted for the subsystem (SMART) and for the namespace (metrics); a
        // broadcast Flush has no single namespace.
        let namespace_stats = self.storage.stats(slot.sqe.namespace_id());
        for stats in [self.stats.as_deref(), namespace_stats].into_iter().flatten() {
            count_completion(stats, kind, status, data_bytes, split);
        }
        if counts_latency(kind, status) {
            let namespace_id = slot.sqe.namespace_id();
            self.send_timing.completed(namespace_id, now);
        }
        if matches!(kind, PendingKind::FusedCompare | PendingKind::FusedWrite | PendingKind::FusedAtomic) {
            self.fused_storage_done(slot_index, status);
            return;
        }
        if !status.is_success() {
            self.complete(slot_index, status, 0);
            return;
        }
        match kind {
            PendingKind::Read => {
                let bytes = data_bytes as u32;
                self.finish(slot_index, Outcome::Data(bytes));
            }
            PendingKind::Compare => {
                let slot = self.slots.slot(slot_index);
                let equal = slot.buffer == slot.compare_buffer;
                let status = if equal { Status::SUCCESS } else { Status::COMPARE_FAILURE };
                self.complete(slot_index, status, 0);
            }
            PendingKind::Write | PendingKind::Other | PendingKind::CopyWrite => {
                self.complete(slot_index, Status::SUCCESS, 0)
            }
            PendingKind::CopyRead => self.copy_reads_done(slot_index),
            PendingKind::FusedCompare | PendingKind::FusedWrite | PendingKind::FusedAtomic => {}
        }
    }

    /// Queues a storage request the command handler built; on a submit error the
    /// command completes with it.
    pub(crate) fn start_storage(
        &mut self,
        slot_index: u16,
        namespace_id: NamespaceId,
        kind: PendingKind,
        op: IoOp,
        buffer: Vec<u8>,
    ) -> Outcome {
        self.slots.slot(slot_index).pending_kind = kind;
        match self.submit_storage(slot_index, namespace_id, op, buffer) {
            Ok(()) => Outcome::Pending,
            Err(status) => Outcome::status(status),
        }
    }

    /// Used by `transmit`-side tests: number of commands outstanding.
    pub fn outstanding_commands(&self) -> usize {
        self.slots.in_use()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_phases_add_up_to_receipt_to_completion() {
        let received = Instant::now();
        let at = |microseconds| received + Duration::from_micros(microseconds);
        // 10 µs of host data, 25 µs held by QoS, then 65 µs at storage.
        let split = phase_split(Some(received), Some(at(100)), 25, at(165));
        assert_eq!(
            split,
            PhaseSplit { receive_microseconds: 75, qos_microseconds: 25, storage_microseconds: 65 },
            "receive is what is left before the storage request"
        );
        // Never more than the total, whatever the inputs.
        let split = phase_split(Some(at(50)), Some(at(10)), 1_000, at(60));
        assert_eq!(split.receive_microseconds + split.qos_microseconds + split.storage_microseconds, 10);
        assert_eq!(phase_split(None, None, 0, at(5)), PhaseSplit::default());
    }
}

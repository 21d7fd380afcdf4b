//! The host queue: configuration, command slots, submission, timers and `abandon`.
//! Receiving is in `receive.rs`, sending in `transmit.rs`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_spec::opcode::AdminOpcode;
use nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER;
use nvme_spec::{CommandId, CompletionQueueEntry, ControllerId, SglDescriptor, SubmissionQueueEntry};
use nvme_tcp_wire::{PduReader, PduWriter, ReaderLimits, Role, TerminationRequest};

use crate::error::{HostError, SubmitError};
use crate::{
    HostCommand, HostCompletion, QueueConfig, QueueState, SourceBuffer, WriteSource, ADMIN_IN_CAPSULE_DATA_BYTES,
    DEFAULT_IO_IN_CAPSULE_DATA_BYTES, MAX_COMMAND_DATA_BYTES, MIN_MAX_H2C_DATA_BYTES,
};

/// CID of the Fabrics Connect command. It is the only command outstanding while it
/// runs, so it may share CID 0 with slot 0.
pub(crate) const CONNECT_COMMAND_ID: CommandId = CommandId(0);

/// Life cycle, with the data `QueueState` does not expose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Initializing,
    Connecting,
    /// DH-HMAC-CHAP commands run in the slots; the caller cannot submit yet.
    Authenticating,
    Ready,
    Failed,
}

/// One outstanding command. The slot index is the CID.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) in_use: bool,
    /// Bumped every time the slot is freed, so queued transmit work for an earlier
    /// occupant is recognised and skipped.
    pub(crate) generation: u32,
    /// Submission order, to hand commands back in order from `abandon`.
    pub(crate) sequence: u64,
    pub(crate) sqe: SubmissionQueueEntry,
    pub(crate) user_tag: u64,
    /// Host-to-controller data; handed back on completion. The `Arc` is the slot's
    /// for the queue's whole life (the command's buffer moves in and out of it), so
    /// lending the data to a send batch is a reference count, not an allocation. A
    /// batch holding a clone is also what keeps a command from completing while
    /// its data may still be read (see `complete`); commands whose data is in the
    /// caller's memory lend this (then empty) buffer for that purpose alone.
    pub(crate) data_out: Arc<Vec<u8>>,
    /// Bytes of host-to-controller data, wherever they are.
    pub(crate) data_out_bytes: u32,
    /// Where the data is when it is in the caller's memory (see [`crate::WriteSource`]).
    pub(crate) write_source: Option<SourceBuffer>,
    /// The data went in the capsule (no R2T expected).
    pub(crate) in_capsule: bool,
    /// Controller-to-host data (empty when it goes to a read destination).
    pub(crate) data_in: Vec<u8>,
    pub(crate) data_in_bytes: u32,
    /// Bytes of controller-to-host data received so far.
    pub(crate) received_bytes: u32,
    /// Where the read data goes instead of `data_in` (see [`crate::ReadDestination`]).
    pub(crate) destination: Option<u64>,
    /// End of the range the R2Ts so far asked for (R2Ts must come in order).
    pub(crate) requested_bytes: u32,
    /// R2Ts whose H2CData PDUs are not written out yet.
    pub(crate) r2t_pending: u32,
    /// Set when the host found the data unusable (digest); overrides the status.
    pub(crate) transport_error: Option<HostError>,
    /// `None` for commands without a timeout (held Asynchronous Event Requests).
    pub(crate) deadline: Option<Instant>,
    /// The response, held while a send batch still holds the command's data; the
    /// command is finished for the protocol (its CID names nothing any more).
    pub(crate) finished: Option<CompletionQueueEntry>,
}

/// Work queued for `transmit`, in wire order. Data is not copied until then.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pending {
    InitializeConnection,
    Connect,
    Command { slot: u16, generation: u32 },
    HostData { slot: u16, generation: u32, transfer_tag: u16, offset: u32, length: u32 },
}

/// Where the data of the PDU being received goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sink {
    None,
    /// C2HData for `slot`; `success` completes the command at the end of the PDU.
    Read {
        slot: u16,
        success: bool,
    },
}

/// One NVMe/TCP queue seen from the host. See the crate documentation.
#[derive(Debug)]
pub struct HostQueue {
    pub(crate) config: QueueConfig,
    pub(crate) phase: Phase,
    pub(crate) error: Option<HostError>,
    pub(crate) controller_id: Option<ControllerId>,
    pub(crate) reader: PduReader,
    pub(crate) writer: PduWriter,
    pub(crate) slots: Vec<Slot>,
    /// Free slot indexes, oldest freed first, so a CID is reused as late as possible
    /// (a stray late PDU for a finished command then finds no command rather than a
    /// new one).
    pub(crate) free: VecDeque<u16>,
    pub(crate) pending: VecDeque<Pending>,
    /// H2CTermReq to send before anything else; nothing follows it.
    pub(crate) termination: Option<TerminationRequest>,
    pub(crate) completed: VecDeque<HostCompletion>,
    pub(crate) sink: Sink,
    pub(crate) in_capsule_data_limit: u32,
    /// MAXH2CDATA from ICResp.
    pub(crate) max_h2c_data_bytes: u32,
    /// ICResp / Connect response must arrive by then.
    pub(crate) setup_deadline: Option<Instant>,
    /// When to look for expired commands: no later than the earliest deadline of
    /// any outstanding command (command deadlines grow with submission order, so
    /// the scan runs about once per command timeout, not once per completion).
    /// Keeps `next_deadline` O(1) on the I/O path.
    pub(crate) timeout_scan_at: Option<Instant>,
    pub(crate) next_sequence: u64,
    /// The DH-HMAC-CHAP transaction while `Authenticating`.
    pub(crate) authentication: Option<Box<nvme_auth::HostAuthentication>>,
    /// The TLS PSK the admin queue's DH-HMAC-CHAP generated (secure channel
    /// concatenation), until taken.
    pub(crate) generated_psk: Option<nvme_auth::GeneratedPsk>,
    /// Takes the data of reads that name a destination.
    pub(crate) read_destination: Option<std::sync::Arc<dyn crate::ReadDestination>>,
    /// Lends the data of writes that name a source.
    pub(crate) write_source: Option<Arc<dyn WriteSource>>,
    /// Slots whose response came while a send batch held their data, oldest first.
    pub(crate) deferred: VecDeque<u16>,
}

impl HostQueue {
    /// A queue at the start of its connection; the ICReq is queued at once.
    /// A `queue_size` below 2 is raised to 2 (one usable slot).
    pub fn new(mut config: QueueConfig, now: Instant) -> Self {
        config.queue_size = config.queue_size.max(2);
        let usable = usize::from(config.queue_size - 1);
        let in_capsule_data_limit =
            if config.queue_id.is_admin() { ADMIN_IN_CAPSULE_DATA_BYTES } else { DEFAULT_IO_IN_CAPSULE_DATA_BYTES };
        let setup_deadline = deadline_after(now, config.command_timeout_ms);
        let mut pending = VecDeque::with_capacity(usable * 2 + 4);
        pending.push_back(Pending::InitializeConnection);
        HostQueue {
            reader: PduReader::new(Role::Host, ReaderLimits { max_data_bytes: MAX_COMMAND_DATA_BYTES }),
            writer: PduWriter::new(),
            slots: (0..usable).map(|_| Slot::default()).collect(),
            free: (0..usable as u16).collect(),
            pending,
            termination: None,
            completed: VecDeque::with_capacity(usable + 1),
            sink: Sink::None,
            in_capsule_data_limit,
            max_h2c_data_bytes: MIN_MAX_H2C_DATA_BYTES,
            setup_deadline,
            timeout_scan_at: None,
            next_sequence: 0,
            authentication: None,
            generated_psk: None,
            read_destination: None,
            write_source: None,
            deferred: VecDeque::with_capacity(usable),
            phase: Phase::Initializing,
            error: None,
            controller_id: None,
            config,
        }
    }

    /// From now on, reads that name a destination have their data written through
    /// `destination` as it arrives (see [`crate::ReadDestination`]).
    pub fn set_read_destination(&mut self, destination: std::sync::Arc<dyn crate::ReadDestination>) {
        self.read_destination = Some(destination);
    }

    /// From now on, writes that name a source ([`HostCommand::write_source`]) are sent
    /// straight from the memory `source` lends (see [`crate::WriteSource`]).
    pub fn set_write_source(&mut self, source: Arc<dyn WriteSource>) {
        self.write_source = Some(source);
    }

    /// The configuration the queue was built with (queue size possibly raised to 2).
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Where the queue is.
    pub fn state(&self) -> QueueState {
        match self.phase {
            Phase::Initializing => QueueState::Initializing,
            Phase::Connecting => QueueState::Connecting,
            Phase::Authenticating => QueueState::Authenticating,
            Phase::Ready => {
                QueueState::Ready { controller_id: self.controller_id.unwrap_or(self.config.controller_id) }
            }
            Phase::Failed => QueueState::Failed,
        }
    }

    /// Why the queue failed, once it has.
    pub fn error(&self) -> Option<&HostError> {
        self.error.as_ref()
    }

    /// The TLS PSK this queue's DH-HMAC-CHAP generated (secure channel
    /// concatenation, [`crate::DhchapSecrets::secure_channel`]), once.
    pub fn take_generated_psk(&mut self) -> Option<nvme_auth::GeneratedPsk> {
        self.generated_psk.take()
    }

    /// CNTLID once connected.
    pub fn controller_id(&self) -> Option<ControllerId> {
        self.controller_id
    }

    /// The target's in-capsule data limit for this queue (IOCCSZ * 16 - 64 from
    /// Identify Controller for I/O queues). Writes up to this size ride in the
    /// capsule; larger ones wait for R2T. Defaults: 8192 bytes for both kinds of
    /// queue (the admin queue's is fixed at 8192 by the spec).
    pub fn set_in_capsule_data_limit(&mut self, bytes: u32) {
        self.in_capsule_data_limit = bytes;
    }

    /// Commands outstanding (submitted, not yet completed or abandoned).
    pub fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Most commands outstanding at once: `queue_size - 1`.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Queues a command. Fails, handing the command back, when the queue is not
    /// ready, full, or the command's data is unusable.
    #[allow(clippy::result_large_err)] // The error hands the command back by value.
    pub fn submit(&mut self, command: HostCommand, now: Instant) -> Result<(), SubmitError> {
        if self.phase != Phase::Ready {
            return Err(SubmitError::NotReady(command));
        }
        // A held Asynchronous Event Request completes only when an event happens,
        // which may be never: it has no timeout (Linux does not time it out either).
        let is_async_event =
            self.config.queue_id.is_admin() && command.sqe.opcode() == AdminOpcode::AsynchronousEventRequest as u8;
        let deadline = if is_async_event { None } else { deadline_after(now, self.config.command_timeout_ms) };
        self.enqueue(command, deadline)
    }

    /// [`HostQueue::submit`] for a command that must be over by `limit` whatever
    /// the command timeout says (a driver resending a command after reconnects
    /// gives it its own overall deadline): the command times out at the earlier of
    /// the two. With `limit` `None` it is `submit`.
    #[allow(clippy::result_large_err)] // The error hands the command back by value.
    pub fn submit_with_deadline(
        &mut self,
        command: HostCommand,
        now: Instant,
        limit: Option<Instant>,
    ) -> Result<(), SubmitError> {
        let Some(limit) = limit else { return self.submit(command, now) };
        if self.phase != Phase::Ready {
            return Err(SubmitError::NotReady(command));
        }
        let deadline = deadline_after(now, self.config.command_timeout_ms).map_or(limit, |own| own.min(limit));
        self.enqueue(command, Some(deadline))
    }

    /// True while part of a PDU has been received and not the rest: a connection
    /// that ends now ended in the middle of a PDU.
    pub fn is_mid_pdu(&self) -> bool {
        !self.reader.is_at_pdu_boundary()
    }

    /// Takes a command into a slot and queues it for sending; `deadline` is when it
    /// times out. Used by `submit` and by the queue's own authentication commands.
    #[allow(clippy::result_large_err)] // The error hands the command back by value.
    pub(crate) fn enqueue(&mut self, command: HostCommand, deadline: Option<Instant>) -> Result<(), SubmitError> {
        let source_bytes = command.write_source.map_or(0, |buffer| buffer.length);
        if command.data_out.len() > MAX_COMMAND_DATA_BYTES as usize
            || command.data_in_bytes > MAX_COMMAND_DATA_BYTES
            || source_bytes > MAX_COMMAND_DATA_BYTES
        {
            return Err(SubmitError::DataTooLarge(command));
        }
        if (!command.data_out.is_empty() || source_bytes > 0) && command.data_in_bytes > 0 {
            return Err(SubmitError::Bidirectional(command));
        }
        if command.write_source.is_some() && (self.write_source.is_none() || !command.data_out.is_empty()) {
            return Err(SubmitError::InvalidWriteSource(command));
        }
        let Some(index) = self.free.pop_front() else {
            return Err(SubmitError::QueueFull(command));
        };
        let HostCommand { mut sqe, data_out, data_in_bytes, user_tag, read_destination, write_source } = command;
        // A source of no bytes is no data at all.
        let write_source = write_source.filter(|buffer| buffer.length > 0);
        let destination = read_destination.filter(|_| data_in_bytes > 0 && self.read_destination.is_some());
        let (opcode, fuse) = (sqe.opcode(), sqe.fused());
        sqe.set_cdw0(opcode, CommandId(index), PSDT_SGL_METADATA_BUFFER);
        sqe.set_fused(fuse);
        let data_out_bytes = write_source.map_or(data_out.len() as u32, |buffer| buffer.length);
        let in_capsule = data_out_bytes > 0 && data_out_bytes <= self.in_capsule_data_limit;
        let sgl = if in_capsule {
            SglDescriptor::in_capsule(0, data_out_bytes)
        } else if data_out_bytes > 0 {
            SglDescriptor::transport(data_out_bytes)
        } else {
            // Reads, and commands without data: a transport SGL of the read length
            // (0 for none), exactly what Linux sends.
            SglDescriptor::transport(data_in_bytes)
        };
        sqe.set_sgl(&sgl);

        let (data_out, data_in) = if data_in_bytes > 0 {
            // The (empty) data_out buffer becomes the receive buffer: its capacity is
            // reused, so a caller recycling buffers allocates nothing here.
            let mut buffer = data_out;
            buffer.clear();
            if destination.is_none() {
                buffer.reserve_exact(data_in_bytes as usize);
            }
            (Vec::new(), buffer)
        } else {
            (data_out, Vec::new())
        };
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let slot = &mut self.slots[usize::from(index)];
        slot.in_use = true;
        slot.sequence = sequence;
        slot.sqe = sqe;
        slot.user_tag = user_tag;
        match Arc::get_mut(&mut slot.data_out) {
            Some(buffer) => *buffer = data_out,
            // Never expected: completions wait for batches to let go of the data
            // (`complete`), and `abandon` leaves the queue failed. A new Arc keeps
            // the old data for whoever still holds it.
            None => slot.data_out = Arc::new(data_out),
        }
        slot.data_out_bytes = data_out_bytes;
        slot.write_source = write_source;
        slot.in_capsule = in_capsule;
        slot.data_in = data_in;
        slot.data_in_bytes = data_in_bytes;
        slot.received_bytes = 0;
        slot.destination = destination;
        slot.requested_bytes = 0;
        slot.r2t_pending = 0;
        slot.transport_error = None;
        slot.deadline = deadline;
        slot.finished = None;
        if let Some(deadline) = deadline {
            self.timeout_scan_at = Some(self.timeout_scan_at.map_or(deadline, |at| at.min(deadline)));
        }
        let generation = slot.generation;
        self.pending.push_back(Pending::Command { slot: index, generation });
        Ok(())
    }

    /// The next completed command, oldest first. A command whose response came while
    /// a send batch still held its data comes out once that batch is cleared or
    /// dropped.
    pub fn poll_completion(&mut self) -> Option<HostCompletion> {
        if !self.deferred.is_empty() {
            self.finish_deferred();
        }
        self.completed.pop_front()
    }

    /// Completes the deferred commands no batch holds any more.
    fn finish_deferred(&mut self) {
        for _ in 0..self.deferred.len() {
            let Some(index) = self.deferred.pop_front() else { break };
            let slot = &mut self.slots[usize::from(index)];
            if Arc::get_mut(&mut slot.data_out).is_none() {
                self.deferred.push_back(index);
                continue;
            }
            if let Some(cqe) = slot.finished.take() {
                self.complete(index, cqe);
            }
        }
    }

    /// The earliest time [`HostQueue::handle_timeout`] has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.phase == Phase::Failed {
            return None;
        }
        match (self.setup_deadline, self.timeout_scan_at) {
            (Some(setup), Some(command)) => Some(setup.min(command)),
            (setup, command) => setup.or(command),
        }
    }

    /// Time passed: a command (or ICResp / the Connect response) past its deadline
    /// fails the queue. Like Linux, the host does not try to abort one command: the
    /// connection is torn down and the driver reconnects.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Failed {
            return;
        }
        if let Some(deadline) = self.setup_deadline {
            if now >= deadline {
                let waiting_for = match self.phase {
                    Phase::Initializing => "ICResp",
                    Phase::Authenticating => "end of DH-HMAC-CHAP authentication",
                    _ => "Connect response",
                };
                self.fail(HostError::SetupTimeout { waiting_for }, None);
                return;
            }
        }
        match self.timeout_scan_at {
            Some(at) if now >= at => {}
            _ => return,
        }
        let outstanding = self.slots.iter().enumerate().filter(|(_, slot)| slot.in_use);
        let expired = outstanding
            .clone()
            .filter(|(_, slot)| slot.deadline.is_some_and(|deadline| now >= deadline))
            .min_by_key(|(_, slot)| slot.deadline)
            .map(|(index, _)| index as u16);
        self.timeout_scan_at = outstanding.filter_map(|(_, slot)| slot.deadline).min();
        if let Some(command_id) = expired {
            tracing::warn!(queue = self.config.queue_id.0, command_id, "command timed out");
            self.fail(HostError::CommandTimeout { command_id }, None);
        }
    }

    /// Fails the queue (the connection dropped: `reason` is usually
    /// [`HostError::ConnectionLost`]; an earlier error is kept) and hands back every
    /// outstanding command, oldest first, so a driver can resubmit them on a new
    /// connection. Each comes back as submitted, except that its SQE carries the CID
    /// the queue gave it (so a driver can pick out the one named by
    /// [`HostError::CommandTimeout`]) and a read's buffer is empty again. Completions
    /// that finished before stay available from `poll_completion`.
    pub fn abandon(&mut self, reason: HostError) -> Vec<HostCommand> {
        self.fail(reason, None);
        // The connection is gone: an H2CTermReq could not be sent any more.
        self.termination = None;
        self.deferred.clear();
        let mut outstanding: Vec<(u64, u16)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.in_use)
            .map(|(index, slot)| (slot.sequence, index as u16))
            .collect();
        outstanding.sort_unstable();
        let mut abandoned = Vec::with_capacity(outstanding.len());
        for (_, index) in outstanding {
            let slot = &mut self.slots[usize::from(index)];
            if let Some(cqe) = slot.finished.take() {
                // Its response came; only the send was still holding it.
                self.complete_now(index, cqe);
                continue;
            }
            let mut data_in = std::mem::take(&mut slot.data_in);
            data_in.clear();
            let data_out = if slot.data_in_bytes > 0 { data_in } else { take_data_out(&mut slot.data_out) };
            abandoned.push(HostCommand {
                sqe: slot.sqe,
                data_out,
                data_in_bytes: slot.data_in_bytes,
                user_tag: slot.user_tag,
                read_destination: slot.destination,
                write_source: slot.write_source,
            });
            self.release(index);
        }
        abandoned
    }

    /// Enters `Failed` (keeping the first error); `termination`, when given, is the
    /// H2CTermReq to send as the last PDU.
    pub(crate) fn fail(&mut self, error: HostError, termination: Option<TerminationRequest>) {
        if self.phase == Phase::Failed {
            return;
        }
        tracing::warn!(queue = self.config.queue_id.0, %error, "host queue failed");
        self.phase = Phase::Failed;
        self.error = Some(error);
        self.pending.clear();
        self.termination = termination;
        self.sink = Sink::None;
        self.setup_deadline = None;
    }

    /// Frees a slot for reuse.
    pub(crate) fn release(&mut self, index: u16) {
        let slot = &mut self.slots[usize::from(index)];
        slot.in_use = false;
        slot.generation = slot.generation.wrapping_add(1);
        slot.transport_error = None;
        slot.finished = None;
        slot.write_source = None;
        self.free.push_back(index);
    }

    /// The outstanding command with this CID, if any.
    pub(crate) fn outstanding_slot(&self, command_id: CommandId) -> Option<u16> {
        let index = command_id.0;
        self.slots.get(usize::from(index)).filter(|slot| slot.in_use && slot.finished.is_none()).map(|_| index)
    }

    /// Completes the command in `index` with `cqe`, handing its buffer back, or, while
    /// a send batch still holds its data, once it lets go: until then the kernel may
    /// still read that memory, so neither the buffer nor (for a write source) the
    /// caller's memory may be handed back. Rare: the response to a write normally
    /// comes after its data was sent.
    pub(crate) fn complete(&mut self, index: u16, cqe: CompletionQueueEntry) {
        let slot = &mut self.slots[usize::from(index)];
        if Arc::get_mut(&mut slot.data_out).is_none() {
            if slot.finished.is_none() {
                self.deferred.push_back(index);
            }
            slot.finished = Some(cqe);
            return;
        }
        self.complete_now(index, cqe);
    }

    /// Completes the command in `index` with `cqe`, handing its buffer back.
    fn complete_now(&mut self, index: u16, mut cqe: CompletionQueueEntry) {
        if self.phase == Phase::Authenticating {
            // Only the queue's own Authentication Send/Receive run now.
            self.authentication_command_done(index, &cqe);
            return;
        }
        let slot = &mut self.slots[usize::from(index)];
        let mut transport_error = slot.transport_error.take();
        let received = slot.received_bytes;
        if transport_error.is_none() && cqe.status.is_success() && received < slot.data_in_bytes {
            transport_error = Some(HostError::ShortData { command_id: index, received, expected: slot.data_in_bytes });
        }
        if transport_error.is_some() {
            // The target said success, but the host cannot use the data: report a
            // retryable transport-level failure for this command only.
            if cqe.status.is_success() {
                cqe.status = nvme_spec::Status::DATA_TRANSFER_ERROR;
            }
        }
        let data =
            if slot.data_in_bytes > 0 { std::mem::take(&mut slot.data_in) } else { take_data_out(&mut slot.data_out) };
        let user_tag = slot.user_tag;
        self.release(index);
        self.completed.push_back(HostCompletion { user_tag, cqe, data, transport_error });
    }
}

/// The command's buffer out of its slot's `Arc`. A batch may still hold the data
/// only when the connection failed under a send (`abandon`): then the caller gets a
/// copy, and the batch keeps the original until it is dropped.
fn take_data_out(data_out: &mut Arc<Vec<u8>>) -> Vec<u8> {
    match Arc::get_mut(data_out) {
        Some(buffer) => std::mem::take(buffer),
        None => data_out.as_ref().clone(),
    }
}

/// `now + timeout_ms`, or no deadline for 0 (or a timeout past what `Instant` holds).
pub(crate) fn deadline_after(now: Instant, timeout_ms: u64) -> Option<Instant> {
    if timeout_ms == 0 {
        return None;
    }
    now.checked_add(Duration::from_millis(timeout_ms))
}

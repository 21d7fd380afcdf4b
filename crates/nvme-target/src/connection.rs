//! One NVMe/TCP connection (one queue) as a sans-io state machine.
//!
//! ```text
//!  AwaitingIcReq --ICReq--> AwaitingConnect --Connect ok--> Live
//!        |                        |                          |
//!        +------ fatal error, setup timeout, host TermReq ---+--> Closing
//! ```
//! The runtime feeds received bytes (`handle_received`), the passage of time
//! (`handle_timeout`) and storage completions (`poll_storage`); the connection answers
//! with batches of PDUs to send (`take_transmit`) and a wish to close (`wants_close`).
//! Nothing here touches a socket, a thread or a clock.
//!
//! Parts in their own files: `r2t` (R2T flow control, with its state in `R2tFlow`)
//! and `timers` (setup timeout, keep-alive, the controller check, event delivery,
//! and `bind`, which starts them).

use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use nvme_spec::{CompletionQueueEntry, QueueId, Status};
use nvme_tcp_wire::{
    DataHeader, FatalErrorStatus, InitializeConnectionRequest,
    InitializeConnectionResponse, PduHeader, PduReader, PduWriter, ReadEvent, ReaderLimits,
    Role, TerminationRequest,
};

use storage::{BackendQueue, IoCompletion};

mod r2t;
mod timers;

pub(crate) use r2t::R2tFlow;

use crate::controller::{Controller, ControllerKind};
use crate::limits::{
    IN_CAPSULE_DATA_BYTES, MAX_C2H_DATA_PDU_BYTES, MAX_H2C_DATA_BYTES,
};
use crate::namespaces::{Namespace, NamespaceView};
use crate::slots::{SlotState, SlotTable};
use crate::stats::{QueueStats, TargetCounters};
use crate::target::{HostConnectionGuard, Target};
use crate::transmit::{BufferPool, TransmitBatch};

/// Connection life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the host's ICReq.
    AwaitingIcReq,
    /// ICResp sent; the first command must be a Fabrics Connect.
    AwaitingConnect,
    /// Connected to a controller as `QueueBinding` describes.
    Live,
    /// Finishing: pending PDUs are flushed, then the socket closes.
    Closing,
}

/// What the queue is, once connected.
#[derive(Debug)]
pub struct QueueBinding {
    pub controller: Arc<Controller>,
    /// QID: 0 for the admin queue.
    pub queue_id: QueueId,
    /// Queue size (SQSIZE + 1).
    pub depth: u16,
    /// SQHD: the submission queue head reported in each response.
    pub submission_queue_head: u16,
    /// Controller reset generation the queue was connected in.
    pub generation: u32,
}

/// Where the data of the PDU being received goes.
#[derive(Clone, Copy, Debug)]
enum DataSink {
    /// No PDU data expected.
    None,
    /// In-capsule data of the command in `slot`, written at `offset`.
    InCapsule { slot: u16, offset: usize },
    /// H2CData for the command in `slot`, written at `offset`.
    HostData { slot: u16, offset: usize },
}

/// A backend queue this connection opened, with the namespace it serves (held so
/// that a deleted namespace's space is not reused while I/O to it is in flight).
pub(crate) struct OpenQueue {
    pub(crate) namespace: Arc<Namespace>,
    pub(crate) queue: Box<dyn BackendQueue>,
    /// This queue's shard of the namespace's counters.
    pub(crate) stats: Arc<QueueStats>,
}

impl OpenQueue {
    /// Opens a queue on `namespace`'s backend; with a waker, a backend whose
    /// completions arrive on its own threads wakes the caller instead of being polled.
    pub(crate) fn new(namespace: Arc<Namespace>, waker: Option<&Waker>) -> Self {
        let queue = match waker {
            Some(waker) => namespace.backend.open_queue_with_waker(waker),
            None => namespace.backend.open_queue(),
        };
        let stats = namespace.stats.register();
        OpenQueue { namespace, queue, stats }
    }
}

impl Drop for OpenQueue {
    fn drop(&mut self) {
        self.namespace.stats.retire(&self.stats);
    }
}

/// Where a read's data is in the pending batch.
#[derive(Clone, Copy)]
enum DataSource {
    /// An attached buffer the backend filled.
    Buffer(u32),
    /// Attached memory the backend lent.
    Lent(u32),
}

/// One NVMe/TCP connection.
pub struct Connection {
    pub(crate) target: Arc<Target>,
    pub(crate) listener_index: usize,
    /// Peer description for log messages.
    pub(crate) peer: String,
    pub(crate) phase: Phase,
    reader: PduReader,
    pub(crate) writer: PduWriter,
    /// R2T flow control: host data requested and commands waiting for budget.
    pub(crate) r2t: R2tFlow,
    /// DDGST negotiated: C2HData PDUs carry a data digest.
    pub(crate) data_digest: bool,
    pending: TransmitBatch,
    spare: Option<TransmitBatch>,
    pub(crate) pool: BufferPool,
    pub(crate) slots: SlotTable,
    sink: DataSink,
    pub(crate) binding: Option<QueueBinding>,
    /// The namespaces active for this queue's controller, rebuilt when the
    /// subsystem's table changes.
    pub(crate) view: NamespaceView,
    /// Backend queues opened by this connection, by NSID - 1.
    pub(crate) backend_queues: Vec<Option<OpenQueue>>,
    /// NSIDs with an opened backend queue (to poll only those).
    pub(crate) opened_namespaces: Vec<u32>,
    /// Queues of namespaces that went away (detached, deleted) with I/O still in
    /// flight: polled until drained, then dropped.
    pub(crate) retired_queues: Vec<OpenQueue>,
    pub(crate) completions: Vec<IoCompletion>,
    /// Given by the runtime: backend queues that complete on threads of their own
    /// wake the owning thread through it (see [`Connection::set_storage_waker`]).
    pub(crate) storage_waker: Option<Waker>,
    pub(crate) stats: Option<Arc<QueueStats>>,
    /// Connection setup must finish by then.
    pub(crate) setup_deadline: Option<Instant>,
    /// Admin queue: the controller is torn down unless a Keep Alive arrives by then.
    pub(crate) keep_alive_deadline: Option<Instant>,
    /// I/O queue: next check whether the controller still exists.
    controller_check_at: Option<Instant>,
    /// Admin queue: next check for due asynchronous events (while requests are held).
    event_check_at: Option<Instant>,
    /// Slots of held Asynchronous Event Requests, oldest first.
    pub(crate) held_async_events: Vec<u16>,
    /// Aborts waiting for the I/O queue of their command to answer.
    pub(crate) held_aborts: Vec<crate::abort::HeldAbort>,
    /// When to look for answers to `held_aborts`.
    pub(crate) abort_check_at: Option<Instant>,
    /// DH-HMAC-CHAP state when the host must authenticate this queue (`access`).
    pub(crate) authentication: Option<Box<crate::access::QueueAuthentication>>,
    /// This connection's place in its host's `max_connections_per_host`, from a
    /// successful Connect until the connection closes.
    pub(crate) host_connection: Option<HostConnectionGuard>,
    /// Commands waiting for the reservation store or the service executor (slot,
    /// ticket): reservation changes made durable, Namespace Management and Attachment.
    pub(crate) held_tickets: Vec<(u16, crate::outcome::HeldTicket)>,
    /// Fused Compare and Write pairing and commands parked behind held ranges.
    pub(crate) fused: crate::fused::FusedQueue,
    /// The TLS identity this connection's queue must connect as (`secure_channel`).
    pub(crate) secure_channel: Option<crate::secure_channel::SecureChannelBinding>,
    /// Its count in the controller, its drain once closed, a held Connect.
    pub(crate) quiesce: crate::quiesce::QueueQuiesce,
    /// A C2HTermReq was queued: it must be the last PDU on the wire.
    terminated: bool,
    /// The socket is gone (`handle_closed`): nothing is sent any more.
    pub(crate) cleaned_up: bool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("phase", &self.phase)
            .field("binding", &self.binding)
            .finish()
    }
}

/// Slot count before Connect: only the Connect command may be outstanding.
const SETUP_QUEUE_DEPTH: u16 = 1;

impl Connection {
    /// The owning thread's waker: backend queues opened from now on that complete on
    /// threads of their own (RBD) call it, so the thread may sleep while their
    /// requests are in flight and then calls [`Connection::poll_storage`]. Without
    /// one, every queue with requests in flight counts as pending work.
    pub fn set_storage_waker(&mut self, waker: Waker) {
        self.storage_waker = Some(waker);
    }

    /// A new connection accepted on `listener_index` of the target.
    pub fn new(target: Arc<Target>, listener_index: usize, peer: String, now: Instant) -> Self {
        let setup_timeout = Duration::from_millis(target.settings.connection_setup_timeout_ms);
        TargetCounters::count(&target.counters.connections_accepted);
        TargetCounters::count(&target.counters.connections_open);
        Connection {
            target,
            listener_index,
            peer,
            phase: Phase::AwaitingIcReq,
            reader: PduReader::new(
                Role::Controller,
                ReaderLimits { max_data_bytes: IN_CAPSULE_DATA_BYTES.max(MAX_H2C_DATA_BYTES) },
            ),
            writer: PduWriter::new(),
            r2t: R2tFlow::new(),
            data_digest: false,
            pending: TransmitBatch::with_capacity(4096, 64),
            spare: None,
            pool: BufferPool::new(SETUP_QUEUE_DEPTH as usize),
            slots: SlotTable::new(SETUP_QUEUE_DEPTH),
            sink: DataSink::None,
            binding: None,
            view: NamespaceView::default(),
            backend_queues: Vec::new(),
            opened_namespaces: Vec::new(),
            retired_queues: Vec::new(),
            completions: Vec::new(),
            storage_waker: None,
            stats: None,
            setup_deadline: Some(now + setup_timeout),
            keep_alive_deadline: None,
            controller_check_at: None,
            event_check_at: None,
            held_async_events: Vec::new(),
            held_aborts: Vec::new(),
            abort_check_at: None,
            authentication: None,
            host_connection: None,
            held_tickets: Vec::new(),
            fused: crate::fused::FusedQueue::default(),
            secure_channel: None,
            quiesce: crate::quiesce::QueueQuiesce::default(),
            terminated: false,
            cleaned_up: false,
        }
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The queue this connection serves, once connected.
    pub fn binding(&self) -> Option<&QueueBinding> {
        self.binding.as_ref()
    }

    /// Bytes received from the host, in any chunking. Consumes all of them.
    pub fn handle_received(&mut self, mut input: &[u8], now: Instant) {
        while self.phase != Phase::Closing {
            match self.reader.next_event(&mut input) {
                Ok(None) => break,
                Ok(Some(ReadEvent::Header { header, data_length })) => {
                    self.on_header(header, data_length, now)
                }
                Ok(Some(ReadEvent::Data(chunk))) => self.on_data(chunk),
                Ok(Some(ReadEvent::DataEnd { data_digest_ok })) => {
                    self.on_data_end(data_digest_ok, now)
                }
                Err(error) => {
                    tracing::warn!(peer = %self.peer, %error.kind, "broken PDU stream; terminating connection");
                    self.terminate(error.status, error.info, &error.header[..error.header_length]);
                }
            }
        }
        self.poll_storage(now);
        self.serve_abort_requests();
    }

    fn on_header(&mut self, header: PduHeader, data_length: u32, now: Instant) {
        self.sink = DataSink::None;
        match header {
            PduHeader::IcReq(request) => self.on_initialize_connection(request),
            PduHeader::CapsuleCmd(capsule) => self.on_capsule(capsule.sqe, data_length, now),
            PduHeader::H2cData(data) => self.on_host_data_header(data, data_length),
            PduHeader::H2cTermReq(request) => {
                tracing::warn!(peer = %self.peer, status = ?request.status, info = request.info,
                    "host terminated the connection");
                self.phase = Phase::Closing;
            }
            // The reader only yields host-to-controller PDU types in the Controller role.
            other => {
                tracing::error!(peer = %self.peer, ?other, "reader yielded a PDU type it should have refused");
                self.terminate(FatalErrorStatus::InvalidPduHeaderField, 0, &[]);
            }
        }
    }

    fn on_initialize_connection(&mut self, request: InitializeConnectionRequest) {
        // The reader refuses a second ICReq and an unsupported PFV; HPDA is the
        // alignment our C2H PDUs must honour, digests are whatever the host asks.
        let digests = request.digests;
        self.r2t.host_max_outstanding = request.max_r2t_outstanding.saturating_add(1);
        let response = InitializeConnectionResponse {
            protocol_format_version: 0,
            controller_pdu_data_alignment: 0,
            digests,
            max_h2c_data_bytes: MAX_H2C_DATA_BYTES,
        };
        self.pending.push_header_with(|out| {
            PduWriter::new().write_header(&PduHeader::IcResp(response), 0, out);
        });
        self.writer.set_digests(digests);
        self.data_digest = digests.data;
        self.writer.set_data_alignment(request.host_pdu_data_alignment);
        self.reader.set_digests(digests);
        self.phase = Phase::AwaitingConnect;
        tracing::debug!(peer = %self.peer, ?digests, "ICReq accepted");
    }

    fn on_capsule(&mut self, sqe: nvme_spec::SubmissionQueueEntry, data_length: u32, now: Instant) {
        if self.phase != Phase::AwaitingConnect && self.phase != Phase::Live {
            self.terminate(FatalErrorStatus::PduSequenceError, 0, &[]);
            return;
        }
        let Some(slot_index) = self.slots.allocate(sqe) else {
            tracing::warn!(peer = %self.peer, depth = self.slots.depth(),
                "host sent more commands than the queue depth");
            self.terminate(FatalErrorStatus::PduSequenceError, 0, &[]);
            return;
        };
        self.slots.slot(slot_index).received_at = Some(now);
        self.order_fused(slot_index);
        if let Some(binding) = &mut self.binding {
            binding.submission_queue_head = (binding.submission_queue_head + 1) % binding.depth;
        }
        if data_length == 0 {
            self.command_data_complete(slot_index, now);
            return;
        }
        let sgl = sqe.sgl();
        let status = if data_length > IN_CAPSULE_DATA_BYTES {
            Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry()
        } else if !sgl.is_in_capsule() {
            Status::SGL_DESCRIPTOR_TYPE_INVALID.with_do_not_retry()
        } else if sgl.address != 0 {
            Status::INVALID_SGL_OFFSET.with_do_not_retry()
        } else if sgl.length != data_length {
            Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry()
        } else {
            Status::SUCCESS
        };
        let slot = self.slots.slot(slot_index);
        if status.is_success() {
            slot.host_data_bytes = data_length;
            slot.buffer = self.pool.take(data_length as usize);
        } else {
            // The data is consumed and dropped so the stream stays in sync; the
            // command fails once it has all arrived.
            slot.deferred_status = status;
        }
        self.sink = DataSink::InCapsule { slot: slot_index, offset: 0 };
    }

    /// H2CData header: check it against the command it names before taking any data.
    fn on_host_data_header(&mut self, data: DataHeader, data_length: u32) {
        if self.phase != Phase::Live {
            self.terminate(FatalErrorStatus::PduSequenceError, 0, &[]);
            return;
        }
        // FEI values are byte offsets of the offending field in the H2CData header:
        // CCCID at 8, TTAG at 10, DATAO at 12, DATAL at 16.
        let Some(slot) = self.slots.get(data.transfer_tag) else {
            self.terminate(FatalErrorStatus::InvalidPduHeaderField, 10, &[]);
            return;
        };
        if slot.state != SlotState::ReceivingHostData {
            self.terminate(FatalErrorStatus::InvalidPduHeaderField, 10, &[]);
            return;
        }
        if slot.sqe.command_id() != data.command_id {
            self.terminate(FatalErrorStatus::InvalidPduHeaderField, 8, &[]);
            return;
        }
        if data.data_length != data_length {
            self.terminate(FatalErrorStatus::InvalidPduHeaderField, 16, &[]);
            return;
        }
        // Data must arrive in order and only inside what R2Ts asked for.
        let end = u64::from(data.data_offset) + u64::from(data.data_length);
        if data.data_offset != slot.received_bytes || end > u64::from(slot.requested_bytes) {
            self.terminate(FatalErrorStatus::DataTransferOutOfRange, 12, &[]);
            return;
        }
        self.sink = DataSink::HostData { slot: data.transfer_tag, offset: data.data_offset as usize };
    }

    fn on_data(&mut self, chunk: &[u8]) {
        let (slot_index, offset) = match &mut self.sink {
            DataSink::None => return,
            DataSink::InCapsule { slot, offset } | DataSink::HostData { slot, offset } => {
                let position = *offset;
                *offset += chunk.len();
                (*slot, position)
            }
        };
        let slot = self.slots.slot(slot_index);
        if !slot.deferred_status.is_success() {
            return;
        }
        // The header checks bound the data by the buffer; `get_mut` keeps a bug from
        // becoming a panic on network input.
        if let Some(destination) = slot.buffer.get_mut(offset..offset + chunk.len()) {
            destination.copy_from_slice(chunk);
        } else {
            slot.deferred_status = Status::DATA_TRANSFER_ERROR.with_do_not_retry();
        }
    }

    fn on_data_end(&mut self, data_digest_ok: bool, now: Instant) {
        let sink = std::mem::replace(&mut self.sink, DataSink::None);
        match sink {
            DataSink::None => {}
            DataSink::InCapsule { slot, .. } => {
                if !data_digest_ok {
                    self.note_data_digest_error(slot);
                }
                self.command_data_complete(slot, now);
            }
            DataSink::HostData { slot: slot_index, offset } => {
                if !data_digest_ok {
                    self.note_data_digest_error(slot_index);
                }
                let slot = self.slots.slot(slot_index);
                let arrived = (offset as u32).saturating_sub(slot.received_bytes);
                slot.received_bytes = offset as u32;
                self.r2t.received(arrived);
                if slot.received_bytes == slot.host_data_bytes {
                    self.host_data_complete(slot_index, now);
                } else {
                    self.request_host_data(slot_index);
                }
                self.grant_waiting_r2ts();
            }
        }
    }

    /// A data digest mismatch is not a stream error (the lengths were right): the
    /// command fails with Transient Transport Error so the host retries it.
    fn note_data_digest_error(&mut self, slot_index: u16) {
        tracing::warn!(peer = %self.peer, "data digest mismatch");
        let slot = self.slots.slot(slot_index);
        if slot.deferred_status.is_success() {
            slot.deferred_status = Status::TRANSIENT_TRANSPORT_ERROR;
        }
    }

    /// Queues a C2HTermReq and closes: the stream cannot be trusted any more.
    pub(crate) fn terminate(&mut self, status: FatalErrorStatus, info: u32, offending_header: &[u8]) {
        // Also before ICResp: a bad ICReq (e.g. unsupported PFV) is answered with a
        // C2HTermReq too; no digests are negotiated then, so the host can parse it.
        if self.terminated {
            return;
        }
        self.terminated = true;
        TargetCounters::count(&self.target.counters.transport_errors);
        let request = TerminationRequest::new(status, info, offending_header);
        let writer = &self.writer;
        self.pending.push_header_with(|out| {
            writer.write_header(&PduHeader::C2hTermReq(request), 0, out);
        });
        self.phase = Phase::Closing;
    }

    /// Queues the response of the command in `slot_index` (after its data, if any)
    /// and frees the slot.
    pub(crate) fn complete(&mut self, slot_index: u16, status: Status, result: u64) {
        let Some(binding) = &self.binding else {
            // Only Connect runs before a binding exists; it completes through
            // `complete_unbound`.
            self.complete_unbound(slot_index, status, result, QueueId::ADMIN, 0);
            return;
        };
        let queue_id = binding.queue_id;
        let head = binding.submission_queue_head;
        self.complete_unbound(slot_index, status, result, queue_id, head);
    }

    /// Queues C2HData PDUs for the first `send_bytes` of a read's data (at most
    /// MAX_C2H_DATA_PDU_BYTES each, digested when DDGST was negotiated).
    fn queue_read_data(&mut self, command_id: nvme_spec::CommandId, send_bytes: usize, source: DataSource) {
        let writer = &self.writer;
        let mut offset = 0;
        while offset < send_bytes {
            let length = (send_bytes - offset).min(MAX_C2H_DATA_PDU_BYTES as usize);
            let header = DataHeader {
                command_id,
                transfer_tag: 0,
                data_offset: offset as u32,
                data_length: length as u32,
                last: offset + length == send_bytes,
                success: false,
            };
            self.pending.push_header_with(|out| {
                writer.write_header(&PduHeader::C2hData(header), length as u32, out);
            });
            match source {
                DataSource::Buffer(index) => {
                    self.pending.push_data(index, offset, offset + length);
                    if self.data_digest {
                        let digest = nvme_tcp_wire::crc32c(&self.pending.buffer(index)[offset..offset + length]);
                        self.pending.push_header_with(|out| out.extend_from_slice(&digest.to_le_bytes()));
                    }
                }
                DataSource::Lent(index) => {
                    // Reads are lent only without data digests (see `io_read`).
                    debug_assert!(!self.data_digest);
                    self.pending.push_lent(index, offset, offset + length);
                }
            }
            offset += length;
        }
    }

    pub(crate) fn complete_unbound(
        &mut self,
        slot_index: u16,
        status: Status,
        result: u64,
        queue_id: QueueId,
        submission_queue_head: u16,
    ) {
        self.on_fused_completion(slot_index, status);
        if self.terminated || self.cleaned_up {
            // Nothing may follow the C2HTermReq, and no one listens after the close:
            // drop the response.
            let slot = self.slots.slot(slot_index);
            let buffers = (std::mem::take(&mut slot.buffer), std::mem::take(&mut slot.compare_buffer));
            self.pool.give(buffers.0);
            self.pool.give(buffers.1);
            self.slots.release(slot_index);
            return;
        }
        let slot = self.slots.slot(slot_index);
        // A command completes only once all the data its R2Ts asked for arrived (or
        // before any R2T): the connection's R2T budget stays exact.
        debug_assert_eq!(slot.requested_bytes, slot.received_bytes, "slot {slot_index} completes with data outstanding");
        let command_id = slot.sqe.command_id();
        let send_bytes = if status.is_success() { slot.send_data_bytes as usize } else { 0 };
        let buffer = std::mem::take(&mut slot.buffer);
        let compare_buffer = std::mem::take(&mut slot.compare_buffer);
        let lent = slot.lent.take().filter(|lent| send_bytes > 0 && send_bytes <= lent.len());
        self.pool.give(compare_buffer);
        // The data goes out from memory the backend lent, or from the buffer it filled.
        let source = if let Some(lent) = lent {
            self.pool.give(buffer);
            Some(DataSource::Lent(self.pending.attach_lent(lent)))
        } else if send_bytes > 0 && send_bytes <= buffer.len() {
            Some(DataSource::Buffer(self.pending.attach_buffer(buffer)))
        } else {
            self.pool.give(buffer);
            None
        };
        if let Some(source) = source {
            self.queue_read_data(command_id, send_bytes, source);
        }
        if !status.is_success() {
            if let Some(stats) = &self.stats {
                QueueStats::add(&stats.error_completions, 1);
            }
            self.record_error(slot_index, queue_id, status);
        }
        let cqe = CompletionQueueEntry {
            result_dw0: result as u32,
            result_dw1: (result >> 32) as u32,
            submission_queue_head,
            submission_queue_id: queue_id,
            command_id,
            status,
            phase: false,
        };
        let writer = &self.writer;
        self.pending.push_header_with(|out| {
            writer.write_header(&PduHeader::CapsuleResp(nvme_tcp_wire::CapsuleResponse { cqe }), 0, out);
        });
        self.slots.release(slot_index);
    }

    /// Adds a failed command to its controller's Error Information log. Connect
    /// failures (no controller yet) and Asynchronous Event Requests aborted at
    /// teardown are not recorded.
    fn record_error(&self, slot_index: u16, queue_id: QueueId, status: Status) {
        use nvme_spec::log_page::ErrorInformationEntry;
        use nvme_spec::opcode::IoOpcode;
        let Some(binding) = &self.binding else { return };
        let sqe = &self.slots.slot_ref(slot_index).sqe;
        let io = !queue_id.is_admin();
        let lba = match IoOpcode::from_u8(sqe.opcode()) {
            Some(IoOpcode::Read | IoOpcode::Write | IoOpcode::Compare | IoOpcode::WriteZeroes) if io => sqe.starting_lba(),
            _ => 0,
        };
        binding.controller.record_error(ErrorInformationEntry {
            error_count: 0,
            submission_queue_id: queue_id,
            command_id: sqe.command_id(),
            // Bits 15:1 hold the status field, bit 0 the phase tag (0 here).
            status_field: status.field() << 1,
            parameter_error_location: ErrorInformationEntry::NOT_APPLICABLE,
            lba,
            namespace_id: sqe.namespace_id(),
            vendor_specific_information: 0,
            transport_type: 0,
            command_set_identifier: 0,
            opcode: sqe.opcode(),
            command_specific_information: 0,
            transport_type_specific_information: 0,
            log_page_version: 1,
        });
    }

    /// Bytes allocated for data buffers: the slots', the idle ones kept, and those
    /// queued for sending (see `limits::max_connection_buffer_bytes`).
    pub fn buffered_data_bytes(&self) -> u64 {
        self.slots.buffer_bytes()
            + self.pool.kept_bytes()
            + self.pending.buffer_bytes()
            + self.spare.as_ref().map_or(0, TransmitBatch::buffer_bytes)
    }

    /// The next batch of PDUs to send, if any. The runtime hands it back through
    /// `transmit_complete` once every byte is written.
    pub fn take_transmit(&mut self) -> Option<TransmitBatch> {
        if let (Some(stats), Some(binding)) = (&self.stats, &self.binding) {
            // Once per batch, not per command: the gauge the metrics read. I/O queues
            // only: an admin queue always holds its Asynchronous Event Requests.
            if !binding.queue_id.is_admin() {
                stats.outstanding_commands.store(self.slots.in_use() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if self.pending.is_empty() {
            return None;
        }
        let replacement = self.spare.take().unwrap_or_else(|| TransmitBatch::with_capacity(4096, 64));
        Some(std::mem::replace(&mut self.pending, replacement))
    }

    /// A batch from `take_transmit` was sent; its buffers return to the pool.
    pub fn transmit_complete(&mut self, mut batch: TransmitBatch) {
        batch.recycle(&mut self.pool);
        if self.spare.is_none() {
            self.spare = Some(batch);
        }
    }

    /// True when the connection should be closed once pending PDUs are sent.
    pub fn wants_close(&self) -> bool {
        self.phase == Phase::Closing
    }

    /// The socket is gone (peer closed, error, shutdown or after `wants_close`).
    /// Releases the controller or queue; call once, and it is safe to call again.
    /// Storage requests still in flight keep the connection: [`Connection::drain`]
    /// until it returns true, then drop it (see `quiesce`).
    pub fn handle_closed(&mut self) {
        if self.cleaned_up {
            return;
        }
        self.cleaned_up = true;
        // Commands that never reached storage never will; ranges held by those that
        // did stay held until they land (`finish_drain`, or their own completion).
        self.fused.parked.clear();
        self.target.counters.connections_open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.phase = Phase::Closing;
        // Gives the place back to the host's max_connections_per_host.
        self.host_connection = None;
        if let (Some(stats), Some(binding)) = (&self.stats, &self.binding) {
            if let Some(subsystem) = &binding.controller.subsystem {
                subsystem.stats.retire(stats);
            }
            binding.controller.stats.retire(stats);
        }
        if let Some(binding) = &self.binding {
            let controller = &binding.controller;
            if binding.queue_id.is_admin() {
                // Losing the admin queue ends the controller: its I/O queues close
                // at their next check.
                controller.tear_down();
                self.target.remove_controller(controller);
                self.target.retiring.watch(controller);
                tracing::info!(peer = %self.peer, controller = controller.id.0,
                    kind = ?controller.kind, "controller released");
            } else {
                let queue = binding.queue_id.0;
                let mut state = controller.state();
                // A queue of a generation a reset ended no longer owns its bit: a
                // queue of the new generation may hold the same QID.
                if queue < 128 && binding.generation == controller.generation() {
                    state.connected_io_queues &= !(1u128 << queue);
                }
            }
        }
        // Nothing at storage: nothing to wait for (`drain` returns true at once).
        if self.storage_in_flight() == 0 {
            self.finish_drain();
        }
    }

    /// Kind of controller this connection belongs to, once connected.
    pub fn controller_kind(&self) -> Option<ControllerKind> {
        self.binding.as_ref().map(|binding| binding.controller.kind)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.handle_closed();
        self.finish_drain();
    }
}

/// TLS: the identity a secure channel binds this connection to.
impl Connection {
    /// The TLS handshake finished with a PSK identity naming `host_nqn` and
    /// `subsystem_nqn`: from now on Connect must name exactly these. (Empty names
    /// refuse every Connect: for an identity that could not be read.)
    pub fn bind_secure_channel(&mut self, host_nqn: &str, subsystem_nqn: &str) {
        self.secure_channel =
            Some(crate::secure_channel::SecureChannelBinding { host_nqn: host_nqn.to_owned(), subsystem_nqn: subsystem_nqn.to_owned() });
    }

    /// The binding of a TLS connection.
    pub fn secure_channel(&self) -> Option<&crate::secure_channel::SecureChannelBinding> {
        self.secure_channel.as_ref()
    }

    /// Whether a Connect from `host_nqn` to `subsystem_nqn` fits this connection's
    /// TLS identity (always, on a plain connection).
    pub(crate) fn connect_fits_secure_channel(&self, host_nqn: &str, subsystem_nqn: &str) -> bool {
        match &self.secure_channel {
            None => true,
            Some(binding) => binding.host_nqn == host_nqn && binding.subsystem_nqn == subsystem_nqn,
        }
    }
}

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
//! Parts in their own files, each owning its state: `stream` (the PDU reader and
//! writer, where received data goes, the PDUs queued for sending: `PduStream`),
//! `r2t` (R2T flow control: `R2tFlow`), `timers` (setup timeout, keep-alive, the
//! controller check, event delivery: `ConnectionTimers`, and `bind`, which starts
//! them) and `crate::storage_queues` (the backend queues: `StorageQueues`).

use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use nvme_spec::{CompletionQueueEntry, QueueId, Status};
use nvme_tcp_wire::{DataHeader, FatalErrorStatus, InitializeConnectionRequest, PduHeader, ReadEvent};

mod r2t;
mod send_timing;
mod stream;
mod timers;

pub(crate) use r2t::R2tFlow;
pub(crate) use stream::{DataSink, PduStream, ReadData};
pub(crate) use timers::ConnectionTimers;

use crate::controller::{Controller, ControllerKind};
use crate::limits::ADMIN_IN_CAPSULE_DATA_BYTES;
use crate::namespaces::NamespaceView;
use crate::slots::{SlotState, SlotTable};
use crate::stats::{QueueStats, TargetCounters};
use crate::storage_queues::StorageQueues;
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

/// One NVMe/TCP connection.
pub struct Connection {
    pub(crate) target: Arc<Target>,
    pub(crate) listener_index: usize,
    /// Peer description for log messages.
    pub(crate) peer: String,
    pub(crate) phase: Phase,
    /// The time of the event being handled (every entry point with a `now` sets it),
    /// for the few checks deep in a command that need the clock.
    pub(crate) now: Instant,
    /// PDUs in and out, and where received data goes.
    pub(crate) stream: PduStream,
    /// R2T flow control: host data requested and commands waiting for budget.
    pub(crate) r2t: R2tFlow,
    pub(crate) pool: BufferPool,
    pub(crate) slots: SlotTable,
    pub(crate) binding: Option<QueueBinding>,
    /// The namespaces active for this queue's controller, rebuilt when the
    /// subsystem's table changes.
    pub(crate) view: NamespaceView,
    /// Backend queues opened by this connection (see [`Connection::set_storage_waker`]).
    pub(crate) storage: StorageQueues,
    pub(crate) stats: Option<Arc<QueueStats>>,
    /// Setup, keep-alive and the periodic checks.
    pub(crate) timers: ConnectionTimers,
    /// Slots of held Asynchronous Event Requests, oldest first.
    pub(crate) held_async_events: Vec<u16>,
    /// Aborts waiting for the I/O queue of their command to answer.
    pub(crate) held_aborts: Vec<crate::abort::HeldAbort>,
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
    /// Commands waiting for their QoS limits (`throttle`).
    pub(crate) throttled: crate::throttle::ThrottledCommands,
    /// Counted commands whose responses are not yet sent (the Send phase).
    pub(crate) send_timing: send_timing::SendTiming,
    /// The TLS identity this connection's queue must connect as (`secure_channel`).
    pub(crate) secure_channel: Option<crate::secure_channel::SecureChannelBinding>,
    /// Its count in the controller, its drain once closed, a held Connect.
    pub(crate) quiesce: crate::quiesce::QueueQuiesce,
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
        self.storage.set_waker(waker);
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
            now,
            stream: PduStream::new(),
            r2t: R2tFlow::new(),
            pool: BufferPool::new(SETUP_QUEUE_DEPTH as usize),
            slots: SlotTable::new(SETUP_QUEUE_DEPTH),
            binding: None,
            view: NamespaceView::default(),
            storage: StorageQueues::default(),
            stats: None,
            timers: ConnectionTimers { setup_deadline: Some(now + setup_timeout), ..ConnectionTimers::default() },
            held_async_events: Vec::new(),
            held_aborts: Vec::new(),
            authentication: None,
            host_connection: None,
            held_tickets: Vec::new(),
            fused: crate::fused::FusedQueue::default(),
            throttled: crate::throttle::ThrottledCommands::default(),
            send_timing: send_timing::SendTiming::default(),
            secure_channel: None,
            quiesce: crate::quiesce::QueueQuiesce::default(),
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
        self.now = now;
        while self.phase != Phase::Closing {
            match self.stream.next_event(&mut input) {
                Ok(None) => break,
                Ok(Some(ReadEvent::Header { header, data_length })) => self.on_header(header, data_length, now),
                Ok(Some(ReadEvent::Data(chunk))) => self.on_data(chunk),
                Ok(Some(ReadEvent::DataEnd { data_digest_ok })) => self.on_data_end(data_digest_ok, now),
                Err(error) => {
                    tracing::warn!(peer = %self.peer, %error.kind, "broken PDU stream; terminating connection");
                    self.terminate(error.status, error.info, error.offending_header());
                }
            }
        }
        self.poll_storage(now);
        self.serve_abort_requests();
    }

    fn on_header(&mut self, header: PduHeader, data_length: u32, now: Instant) {
        self.stream.set_sink(DataSink::None);
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
        self.r2t.host_max_outstanding = request.max_r2t_outstanding.saturating_add(1);
        self.stream.accept_initialize(&request);
        self.phase = Phase::AwaitingConnect;
        tracing::debug!(peer = %self.peer, digests = ?request.digests, "ICReq accepted");
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
        // ICD: I/O queues take what IOCCSZ announces; admin queues, and the Connect
        // that binds a queue, the 8 KiB NVMe/TCP fixes for them.
        let in_capsule_limit = match &self.binding {
            Some(binding) if !binding.queue_id.is_admin() => self.target.settings.in_capsule_data_bytes,
            _ => ADMIN_IN_CAPSULE_DATA_BYTES,
        };
        let status = if data_length > in_capsule_limit {
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
        self.stream.set_sink(DataSink::InCapsule { slot: slot_index, offset: 0 });
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
        self.stream.set_sink(DataSink::HostData { slot: data.transfer_tag, offset: data.data_offset as usize });
    }

    fn on_data(&mut self, chunk: &[u8]) {
        let Some((slot_index, offset)) = self.stream.advance_sink(chunk.len()) else { return };
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
        match self.stream.take_sink() {
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
        if !self.stream.terminate(status, info, offending_header) {
            return;
        }
        TargetCounters::count(&self.target.counters.transport_errors);
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

    pub(crate) fn complete_unbound(
        &mut self,
        slot_index: u16,
        status: Status,
        result: u64,
        queue_id: QueueId,
        submission_queue_head: u16,
    ) {
        self.on_fused_completion(slot_index, status);
        if self.stream.is_terminated() || self.cleaned_up {
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
        debug_assert_eq!(
            slot.requested_bytes, slot.received_bytes,
            "slot {slot_index} completes with data outstanding"
        );
        let command_id = slot.sqe.command_id();
        let send_bytes = if status.is_success() { slot.send_data_bytes as usize } else { 0 };
        let buffer = std::mem::take(&mut slot.buffer);
        let compare_buffer = std::mem::take(&mut slot.compare_buffer);
        let lent = slot.lent.take().filter(|lent| send_bytes > 0 && send_bytes <= lent.len());
        self.pool.give(compare_buffer);
        // The data goes out from memory the backend lent, or from the buffer it filled.
        let data = if let Some(lent) = lent {
            self.pool.give(buffer);
            Some(ReadData::Lent(lent))
        } else if send_bytes > 0 && send_bytes <= buffer.len() {
            Some(ReadData::Buffer(buffer))
        } else {
            self.pool.give(buffer);
            None
        };
        if let Some(data) = data {
            self.stream.push_read_data(command_id, send_bytes, data);
        }
        if let Some(stats) = &self.stats {
            if !status.is_success() {
                stats.count_error(status);
            } else if !queue_id.is_admin() {
                if let Some(change) = reservation_change(slot.sqe.opcode()) {
                    stats.count_reservation_change(change);
                }
            }
        }
        if !status.is_success() {
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
        self.stream.push_response(cqe);
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
            Some(IoOpcode::Read | IoOpcode::Write | IoOpcode::Compare | IoOpcode::WriteZeroes) if io => {
                sqe.starting_lba()
            }
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
        self.slots.buffer_bytes() + self.pool.kept_bytes() + self.stream.buffer_bytes()
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
        let batch = self.stream.take_transmit();
        if batch.is_some() {
            self.send_timing.batch_taken();
        }
        batch
    }

    /// A batch from `take_transmit` was sent (every byte written to the socket) at
    /// `now`; its buffers return to the pool and its responses' Send phase is counted.
    pub fn transmit_complete(&mut self, batch: TransmitBatch, now: Instant) {
        self.stream.transmit_complete(batch, &mut self.pool);
        let (subsystem, storage) = (self.stats.as_deref(), &self.storage);
        self.send_timing.batch_sent(now, |namespace_id, microseconds| {
            for stats in [subsystem, storage.stats(namespace_id)].into_iter().flatten() {
                stats.record_phase(crate::stats::IoPhase::Send, microseconds);
            }
        });
    }

    /// True while the host is in the middle of a PDU (its header or data partly
    /// received): the connection can answer nothing until the rest arrives, so the
    /// runtime acknowledges what came at once rather than on the delayed-ACK timer.
    pub fn awaits_rest_of_pdu(&self) -> bool {
        self.phase != Phase::Closing && self.stream.is_mid_pdu()
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
        self.throttled.clear();
        self.send_timing.clear();
        self.timers.throttle_check_at = None;
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
        self.secure_channel = Some(crate::secure_channel::SecureChannelBinding {
            host_nqn: host_nqn.to_owned(),
            subsystem_nqn: subsystem_nqn.to_owned(),
            generated: false,
        });
    }

    /// The TLS handshake used a PSK generated by secure channel concatenation (call
    /// after [`Self::bind_secure_channel`]): its queues need no DH-HMAC-CHAP.
    pub fn mark_generated_psk(&mut self) {
        if let Some(binding) = self.secure_channel.as_mut() {
            binding.generated = true;
        }
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

/// The reservation change a successful I/O command made, by its opcode.
fn reservation_change(opcode: u8) -> Option<crate::stats::ReservationChange> {
    use crate::stats::ReservationChange;
    use nvme_spec::opcode::IoOpcode;
    match IoOpcode::from_u8(opcode)? {
        IoOpcode::ReservationRegister => Some(ReservationChange::Register),
        IoOpcode::ReservationAcquire => Some(ReservationChange::Acquire),
        IoOpcode::ReservationRelease => Some(ReservationChange::Release),
        _ => None,
    }
}

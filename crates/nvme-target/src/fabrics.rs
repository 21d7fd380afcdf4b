//! Fabrics commands: Connect (admin and I/O queues, with the subsystem's host
//! allow-list), Property Get/Set and Disconnect. Authentication Send/Receive are in
//! `access`.

use std::time::Instant;

use nvme_spec::discovery::DISCOVERY_NQN;
use nvme_spec::fabrics::{
    connect_authentication_required, connect_invalid_parameter_in_command, connect_invalid_parameter_in_data,
    property_offset, ConnectCommand, ConnectData, PropertyGetCommand, PropertySetCommand, CONNECT_DATA_BYTES,
};
use nvme_spec::opcode::FabricsCommandType;
use nvme_spec::registers::{ControllerCapabilities, ControllerConfiguration, ControllerStatus, Version};
use nvme_spec::{ControllerId, QueueId, Status, SubmissionQueueEntry};

use crate::access::{HostVerdict, QueueAuthentication};
use crate::connection::{Connection, QueueBinding};
use crate::controller::{Controller, ControllerKind};
use crate::limits::{MAX_ADMIN_QUEUE_DEPTH, MEMORY_PAGE_BYTES, READY_TIMEOUT_500MS};
use crate::outcome::Outcome;
use crate::stats::ConnectRefusalReason;
use crate::target::{HostConnectionGuard, KeepAliveRefusal};
use nvme_auth::SecureChannelContext;

/// VS: the NVMe version the controllers report (1.4: the descriptor list, command
/// set CNS values and everything a current Linux host checks for).
pub const REPORTED_VERSION: u32 = 0x0001_0400;

/// Byte offsets of Connect fields, reported in IPO when a value is refused.
mod connect_offset {
    pub const QUEUE_ID: u16 = 42;
    pub const SUBMISSION_QUEUE_SIZE: u16 = 44;
    pub const KEEP_ALIVE_TIMEOUT: u16 = 48;
    pub const DATA_CONTROLLER_ID: u16 = 16;
    pub const DATA_SUBSYSTEM_NQN: u16 = 256;
    pub const DATA_HOST_NQN: u16 = 512;
}

/// CC.IOSQES / CC.IOCQES the NVM command set requires (64-byte SQE, 16-byte CQE).
const IO_SUBMISSION_QUEUE_ENTRY_SIZE_LOG2: u8 = 6;
const IO_COMPLETION_QUEUE_ENTRY_SIZE_LOG2: u8 = 4;

/// A refused Connect: status, DW0 (IATTR/IPO) and whether the reason was logged
/// already (with the host and the setting involved) where it was found.
struct Refusal(Status, u32, bool);

impl Refusal {
    fn new(status: Status, dw0: u32) -> Self {
        Refusal(status, dw0, false)
    }

    /// Marks the refusal as logged where it was found.
    fn logged(self) -> Self {
        Refusal(self.0, self.1, true)
    }
}

fn in_command(offset: u16) -> Refusal {
    Refusal::new(Status::CONNECT_INVALID_PARAMETERS.with_do_not_retry(), connect_invalid_parameter_in_command(offset))
}

fn in_data(offset: u16) -> Refusal {
    Refusal::new(Status::CONNECT_INVALID_PARAMETERS.with_do_not_retry(), connect_invalid_parameter_in_data(offset))
}

/// What an accepted Connect binds the queue to.
struct Accepted {
    controller: std::sync::Arc<Controller>,
    queue_id: QueueId,
    depth: u16,
    /// The connection's place in its host's `max_connections_per_host`.
    host_connection: HostConnectionGuard,
    /// The host rules the Connect was admitted under: authentication is decided by
    /// the same snapshot, so a rule change in between cannot skip it.
    host_rules: Option<std::sync::Arc<crate::access::HostAccess>>,
}

impl Connection {
    /// The first command of a connection: it must be Connect.
    pub(crate) fn execute_connect(&mut self, slot_index: u16, now: Instant) {
        let sqe = self.slots.slot(slot_index).sqe;
        if !sqe.is_connect() {
            tracing::debug!(peer = %self.peer, opcode = sqe.opcode(), "command before Connect");
            let status = Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry();
            self.complete_unbound(slot_index, status, 0, QueueId::ADMIN, 0);
            return;
        }
        if self.connect_must_wait(slot_index, now) {
            return;
        }
        match self.accept_connect(slot_index, &sqe, now) {
            Ok(Accepted { controller, queue_id, depth, host_connection, host_rules }) => {
                // A host with a DH-HMAC-CHAP secret authenticates every queue before
                // using it: AUTHREQ.ATR tells it so (Linux sets it on I/O queues too).
                // Not over a TLS PSK its own DH-HMAC-CHAP generated (secure channel
                // concatenation): the handshake proved the same secret, and Linux's
                // host does not authenticate such queues again.
                let generated_psk = self.secure_channel.as_ref().is_some_and(|binding| binding.generated);
                let secure_channel = |entry: &crate::access::HostEntry| SecureChannelContext {
                    allowed: entry.concat,
                    admin_queue: queue_id.is_admin(),
                    on_tls: self.secure_channel.is_some(),
                };
                let authentication =
                    controller.subsystem.as_ref().zip(host_rules.as_ref()).and_then(|(subsystem, rules)| {
                        match rules.verdict(&controller.host_nqn) {
                            HostVerdict::AuthenticationRequired(_) if generated_psk => None,
                            HostVerdict::AuthenticationRequired(entry) => {
                                let context = secure_channel(&entry);
                                QueueAuthentication::new(entry, &subsystem.nqn, now, context)
                            }
                            HostVerdict::Allowed | HostVerdict::Refused => None,
                        }
                    });
                let cntlid = if queue_id.is_admin() { u64::from(controller.id.0) } else { 0 };
                let authentication_required =
                    if authentication.is_some() { u64::from(connect_authentication_required::TRANSACTION) } else { 0 };
                tracing::info!(peer = %self.peer, controller = controller.id.0, queue = queue_id.0,
                    depth, host = %controller.host_nqn, kind = ?controller.kind,
                    authentication = authentication.is_some(), generated_psk, "queue connected");
                // SQHD after taking the Connect command off the queue.
                let head = 1 % depth;
                self.complete_unbound(slot_index, Status::SUCCESS, cntlid | authentication_required, queue_id, head);
                let generation = controller.generation();
                self.bind(QueueBinding { controller, queue_id, depth, submission_queue_head: head, generation }, now);
                self.authentication = authentication.map(Box::new);
                self.host_connection = Some(host_connection);
            }
            Err(Refusal(status, dw0, logged)) => {
                self.target.counters.count_refusal(ConnectRefusalReason::of(status));
                if !logged {
                    tracing::info!(peer = %self.peer, ?status, ipo = dw0 & 0xFFFF, "Connect refused");
                }
                let queue_id = ConnectCommand::decode(&sqe).queue_id;
                self.complete_unbound(slot_index, status, u64::from(dw0), queue_id, 0);
            }
        }
    }

    fn accept_connect(
        &mut self,
        slot_index: u16,
        sqe: &SubmissionQueueEntry,
        now: Instant,
    ) -> Result<Accepted, Refusal> {
        let command = ConnectCommand::decode(sqe);
        if command.record_format != 0 {
            return Err(Refusal::new(Status::CONNECT_INCOMPATIBLE_FORMAT.with_do_not_retry(), 0));
        }
        let slot = self.slots.slot(slot_index);
        let Some(raw) = slot.buffer.get(..CONNECT_DATA_BYTES).and_then(|bytes| bytes.try_into().ok()) else {
            return Err(Refusal::new(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry(), 0));
        };
        let data = ConnectData::decode(raw);
        let subsystem_nqn = data.subsystem_nqn_str().filter(|nqn| !nqn.is_empty());
        let Some(subsystem_nqn) = subsystem_nqn else {
            return Err(in_data(connect_offset::DATA_SUBSYSTEM_NQN));
        };
        // An empty Host NQN is what SPDK's host sends unless told otherwise; SPDK's and
        // Linux's targets accept it where any host may connect, and so does Sluice. An
        // allow-list has no entry for it, so the check below refuses it there. (All
        // hosts without an NQN share one per-host connection budget.)
        let Some(host_nqn) = data.host_nqn_str() else {
            return Err(in_data(connect_offset::DATA_HOST_NQN));
        };
        if command.submission_queue_size == 0 {
            return Err(in_command(connect_offset::SUBMISSION_QUEUE_SIZE));
        }
        let depth = u32::from(command.submission_queue_size) + 1;
        let listener_discovery_only =
            self.target.listener(self.listener_index).is_some_and(|listener| listener.discovery_only);
        let is_discovery = subsystem_nqn == DISCOVERY_NQN;
        let subsystem = if is_discovery {
            None
        } else {
            match self.target.subsystem_by_nqn(subsystem_nqn) {
                Some(subsystem) if !listener_discovery_only => Some(subsystem.clone()),
                _ => return Err(in_data(connect_offset::DATA_SUBSYSTEM_NQN)),
            }
        };
        // On a TLS connection the queue connects as the host and to the subsystem its
        // PSK identity names, nothing else: the key was chosen for that pair.
        if !self.connect_fits_secure_channel(host_nqn, subsystem_nqn) {
            tracing::warn!(peer = %self.peer, host = %host_nqn, subsystem = %subsystem_nqn, queue = command.queue_id.0,
                identity = ?self.secure_channel, "Connect refused: host or subsystem NQN differs from the TLS PSK identity");
            return Err(Refusal::new(
                Status::CONNECT_INVALID_HOST.with_do_not_retry(),
                connect_invalid_parameter_in_data(connect_offset::DATA_HOST_NQN),
            )
            .logged());
        }
        // The allow-list, before anything is created for the host. Discovery is open
        // to every host; the log it reads is filtered instead.
        let host_rules = subsystem.as_ref().map(|subsystem| subsystem.hosts.current());
        if let (Some(subsystem), Some(rules)) = (&subsystem, &host_rules) {
            if !rules.allows(host_nqn) {
                if host_nqn.is_empty() {
                    tracing::warn!(peer = %self.peer, subsystem = %subsystem.nqn, queue = command.queue_id.0,
                        "Connect refused: the host sent no Host NQN and the subsystem admits listed hosts only; \
                         give the host an NQN (SPDK: hostnqn: in the transport ID) and list it, or allow any host");
                } else {
                    tracing::warn!(peer = %self.peer, host = %host_nqn, subsystem = %subsystem.nqn,
                        queue = command.queue_id.0, "Connect refused: host not allowed");
                }
                return Err(Refusal::new(
                    Status::CONNECT_INVALID_HOST.with_do_not_retry(),
                    connect_invalid_parameter_in_data(connect_offset::DATA_HOST_NQN),
                )
                .logged());
            }
            // A host with a TLS key authenticates through TLS: a plain connection
            // naming it could be anyone (and could join its TLS controller's queues).
            if self.secure_channel.is_none() && crate::secure_channel::host_has_tls_key(rules, host_nqn) {
                tracing::warn!(peer = %self.peer, host = %host_nqn, subsystem = %subsystem.nqn, queue = command.queue_id.0,
                    "Connect refused: this host has a TLS key and came without TLS; connect through a listener with \
                     tls and the host's key");
                return Err(Refusal::new(
                    Status::CONNECT_INVALID_HOST.with_do_not_retry(),
                    connect_invalid_parameter_in_data(connect_offset::DATA_HOST_NQN),
                )
                .logged());
            }
        }

        if command.queue_id.is_admin() {
            if depth > u32::from(MAX_ADMIN_QUEUE_DEPTH) {
                return Err(in_command(connect_offset::SUBMISSION_QUEUE_SIZE));
            }
            // Only the dynamic controller model: the host must ask for "any" (FFFFh).
            if data.controller_id != ControllerId::DYNAMIC {
                return Err(in_data(connect_offset::DATA_CONTROLLER_ID));
            }
            let kind = if is_discovery { ControllerKind::Discovery } else { ControllerKind::Io };
            let keep_alive_timeout_ms =
                self.connect_keep_alive_timeout(kind, command.keep_alive_timeout_ms, host_nqn)?;
            let host_connection = self.admit_host_connection(host_nqn, now)?;
            let controller = self
                .target
                .create_controller(kind, subsystem, host_nqn.to_string(), data.host_identifier, keep_alive_timeout_ms)
                .ok_or(Refusal::new(Status::CONNECT_CONTROLLER_BUSY, 0))?;
            return Ok(Accepted {
                controller,
                queue_id: QueueId::ADMIN,
                depth: depth as u16,
                host_connection,
                host_rules,
            });
        }

        // An I/O queue joins an existing, enabled controller of the same host.
        let Some(subsystem) = subsystem else {
            return Err(in_data(connect_offset::DATA_SUBSYSTEM_NQN));
        };
        let Some(controller) = self.target.controller(subsystem.index, data.controller_id) else {
            return Err(in_data(connect_offset::DATA_CONTROLLER_ID));
        };
        if controller.host_nqn != host_nqn {
            return Err(in_data(connect_offset::DATA_HOST_NQN));
        }
        if depth > u32::from(self.target.settings.max_io_queue_depth) {
            return Err(in_command(connect_offset::SUBMISSION_QUEUE_SIZE));
        }
        // Counted before the queue is marked connected; a refusal below drops it.
        let host_connection = self.admit_host_connection(host_nqn, now)?;
        let queue = command.queue_id.0;
        {
            let mut state = controller.state();
            if !state.status.ready() {
                return Err(Refusal::new(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry(), 0));
            }
            if queue > state.io_queues_allocated || queue >= 128 {
                return Err(in_command(connect_offset::QUEUE_ID));
            }
            if state.connected_io_queues & (1u128 << queue) != 0 {
                return Err(in_command(connect_offset::QUEUE_ID));
            }
            state.connected_io_queues |= 1u128 << queue;
        }
        Ok(Accepted { controller, queue_id: command.queue_id, depth: depth as u16, host_connection, host_rules })
    }

    /// The keep-alive timeout an admin Connect's KATO gets (`TargetSettings::
    /// keep_alive_timeout`), or its refusal pointing at KATO, logged with the setting.
    fn connect_keep_alive_timeout(
        &self,
        kind: ControllerKind,
        requested_ms: u32,
        host_nqn: &str,
    ) -> Result<u32, Refusal> {
        let settings = &self.target.settings;
        match settings.keep_alive_timeout(kind, requested_ms) {
            Ok(granted_ms) => {
                if requested_ms != 0 && granted_ms != requested_ms {
                    tracing::info!(peer = %self.peer, host = %host_nqn, requested_ms, granted_ms,
                        "raising the keep-alive timeout the host asked for to min_keep_alive_timeout_ms");
                }
                Ok(granted_ms)
            }
            Err(KeepAliveRefusal::Disabled) => {
                tracing::warn!(peer = %self.peer, host = %host_nqn,
                    "refusing Connect from host {host_nqn}: KATO 0 would disable keep-alive \
                     (allow_keep_alive_disabled is false)");
                Err(in_command(connect_offset::KEEP_ALIVE_TIMEOUT).logged())
            }
            Err(KeepAliveRefusal::AboveMaximum) => {
                tracing::warn!(peer = %self.peer, host = %host_nqn, requested_ms,
                    "refusing Connect from host {host_nqn}: KATO {requested_ms} ms is above {} ms \
                     (max_keep_alive_timeout_ms)", settings.max_keep_alive_timeout_ms);
                Err(in_command(connect_offset::KEEP_ALIVE_TIMEOUT).logged())
            }
        }
    }

    /// Counts the connection against `max_connections_per_host`. A host at the limit
    /// gets Connect Controller Busy without DNR (the Linux host keeps reconnecting),
    /// logged once per burst of refusals.
    fn admit_host_connection(&self, host_nqn: &str, now: Instant) -> Result<HostConnectionGuard, Refusal> {
        self.target.admit_host_connection(host_nqn, now).map_err(|exhausted| {
            if let Some(unlogged) = exhausted.log {
                tracing::warn!(peer = %self.peer, host = %host_nqn, refused_unlogged = unlogged,
                    "refusing Connect from host {host_nqn}: {} connections already (max_connections_per_host)",
                    exhausted.live);
            }
            Refusal::new(Status::CONNECT_CONTROLLER_BUSY, 0).logged()
        })
    }

    /// Fabrics commands on the admin queue.
    pub(crate) fn execute_admin_fabrics(&mut self, sqe: &SubmissionQueueEntry) -> Outcome {
        match FabricsCommandType::from_u8(sqe.fabrics_command_type()) {
            Some(FabricsCommandType::PropertyGet) => self.property_get(sqe),
            Some(FabricsCommandType::PropertySet) => self.property_set(sqe),
            Some(FabricsCommandType::Disconnect) => {
                self.phase_after_response_closing();
                Outcome::status(Status::SUCCESS)
            }
            Some(FabricsCommandType::Connect) => Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry()),
            _ => Outcome::status(Status::INVALID_OPCODE.with_do_not_retry()),
        }
    }

    fn capabilities(&self) -> ControllerCapabilities {
        let depth = self.target.settings.max_io_queue_depth;
        ControllerCapabilities::default()
            .with_maximum_queue_entries_zero_based(depth - 1)
            .with_contiguous_queues_required(true)
            .with_timeout_500ms_units(READY_TIMEOUT_500MS)
            .with_command_sets_supported(ControllerCapabilities::COMMAND_SET_NVM)
            .with_memory_page_size_minimum(MEMORY_PAGE_BYTES.trailing_zeros() as u8 - 12)
            .with_memory_page_size_maximum(MEMORY_PAGE_BYTES.trailing_zeros() as u8 - 12)
    }

    fn property_get(&mut self, sqe: &SubmissionQueueEntry) -> Outcome {
        let property = PropertyGetCommand::decode(sqe);
        let Some(size_bytes) = property.size_bytes() else {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        };
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        // The width asked for must be the property's own (NVMe over Fabrics, Property
        // Get: a 4-byte property read as 8 bytes, or CAP read as 4, is Invalid Field).
        if property_offset::size_bytes(property.offset) != Some(size_bytes) {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        }
        let state = binding.controller.state();
        let value = match property.offset {
            property_offset::CAP => self.capabilities().raw(),
            property_offset::VS => u64::from(Version(REPORTED_VERSION).raw()),
            property_offset::CC => u64::from(state.configuration.raw()),
            property_offset::CSTS => u64::from(state.status.raw()),
            _ => return Outcome::status(Status::INVALID_FIELD.with_do_not_retry()),
        };
        Outcome::Done(Status::SUCCESS, value)
    }

    fn property_set(&mut self, sqe: &SubmissionQueueEntry) -> Outcome {
        let property = PropertySetCommand::decode(sqe);
        if property.offset != property_offset::CC || property.size_bytes() != Some(4) {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        }
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let controller = binding.controller.clone();
        write_controller_configuration(&controller, ControllerConfiguration(property.value as u32));
        Outcome::status(Status::SUCCESS)
    }
}

/// CC written by the host: enable (CSTS.RDY, or CSTS.CFS when the configuration is
/// unusable), disable (reset) and shutdown (CSTS.SHST).
fn write_controller_configuration(controller: &Controller, new: ControllerConfiguration) {
    let mut state = controller.state();
    let old = state.configuration;
    state.configuration = new;
    if new.enable() && !old.enable() {
        let usable = new.io_submission_queue_entry_size() == IO_SUBMISSION_QUEUE_ENTRY_SIZE_LOG2
            && new.io_completion_queue_entry_size() == IO_COMPLETION_QUEUE_ENTRY_SIZE_LOG2
            && new.memory_page_size() == 0
            && new.command_set_selected() == ControllerConfiguration::COMMAND_SET_NVM;
        if usable {
            state.status = state.status.with_ready(true);
        } else {
            tracing::warn!(controller = controller.id.0, cc = new.raw(), "CC.EN with an unusable configuration");
            state.status = state.status.with_controller_fatal_status(true);
        }
    } else if !new.enable() && old.enable() {
        // Controller reset: the I/O queues go away (they notice the new generation);
        // the admin queue stays.
        state.status = state.status.with_ready(false).with_controller_fatal_status(false);
        state.connected_io_queues = 0;
        state.number_of_queues_set = false;
        controller.begin_new_generation();
    }
    if new.shutdown_notification() != 0 && old.shutdown_notification() == 0 {
        // Every write is already durable in the backends served so far (RAM keeps
        // nothing across a restart anyway), so shutdown processing completes at once.
        state.status = state.status.with_shutdown_status(ControllerStatus::SHUTDOWN_COMPLETE);
    } else if new.shutdown_notification() == 0 {
        state.status = state.status.with_shutdown_status(ControllerStatus::SHUTDOWN_NORMAL_OPERATION);
    }
}

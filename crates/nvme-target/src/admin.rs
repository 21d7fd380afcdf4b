//! Admin command handlers: one function per opcode, chosen by one match. The data
//! structures Identify and Get Log Page return are built in `admin_data`.

use std::time::Instant;

use nvme_spec::features::{
    feature_capabilities, feature_id, feature_select, number_of_queues_requested, number_of_queues_result,
    FeatureCommand,
};
use nvme_spec::opcode::AdminOpcode;
use nvme_spec::{NamespaceId, Status, SubmissionQueueEntry};

use crate::connection::Connection;
use crate::controller::{
    ControllerKind, DEFAULT_OVER_TEMPERATURE_THRESHOLD_KELVIN, DISCOVERY_LOG_CHANGE_NOTICES_ENABLED,
};
use crate::discovery::discovery_log_fingerprint;
use crate::limits::MAX_OUTSTANDING_ASYNC_EVENTS;
use crate::outcome::Outcome;
use crate::slots::SlotState;

/// Power states the controller reports (NPSS + 1): one, state 0.
const POWER_STATES: u32 = 1;
/// Asynchronous event configuration bits an I/O controller keeps: SMART/health
/// warnings (7:0), namespace attribute notices (bit 8) and ANA change notices (bit
/// 11), the events it can report.
const ASYNC_EVENT_MASK_SUPPORTED: u32 = 0x0000_09FF;
/// The bit a discovery controller keeps: Discovery Log Page Change notices (31).
const ASYNC_EVENT_MASK_DISCOVERY: u32 = DISCOVERY_LOG_CHANGE_NOTICES_ENABLED;

impl Connection {
    /// Runs an admin queue command.
    pub(crate) fn execute_admin(&mut self, slot_index: u16, now: Instant) -> Outcome {
        let sqe = self.slots.slot(slot_index).sqe;
        if sqe.opcode() == AdminOpcode::Fabrics as u8 {
            return self.execute_admin_fabrics(&sqe);
        }
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let controller = binding.controller.clone();
        if !controller.is_ready() {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        }
        let discovery = controller.kind == ControllerKind::Discovery;
        self.refresh_namespaces();
        if discovery {
            // A discovery controller's admin queue has no periodic event check: a
            // due Discovery Log Page Change notice leaves with the next command
            // (Keep Alive at the latest) or Asynchronous Event Request.
            self.deliver_due_events();
        }
        match AdminOpcode::from_u8(sqe.opcode()) {
            Some(AdminOpcode::Identify) => self.admin_identify(slot_index, &sqe),
            Some(AdminOpcode::GetLogPage) => self.admin_get_log_page(slot_index, &sqe),
            Some(AdminOpcode::SetFeatures) => self.admin_set_features(slot_index, &sqe, now),
            Some(AdminOpcode::GetFeatures) => self.admin_get_features(slot_index, &sqe),
            Some(AdminOpcode::AsynchronousEventRequest) => self.admin_async_event_request(slot_index),
            Some(AdminOpcode::KeepAlive) => {
                self.restart_keep_alive(&controller, now);
                Outcome::status(Status::SUCCESS)
            }
            Some(AdminOpcode::NamespaceManagement) if !discovery => self.admin_namespace_management(slot_index, &sqe),
            Some(AdminOpcode::NamespaceAttachment) if !discovery => self.admin_namespace_attachment(slot_index, &sqe),
            Some(AdminOpcode::Abort) if !discovery => self.admin_abort(slot_index, &sqe, now),
            _ => Outcome::status(Status::INVALID_OPCODE.with_do_not_retry()),
        }
    }

    /// Asynchronous Event Request: held until an event happens (namespace changes
    /// made through any controller for an I/O controller, discovery log changes its
    /// host can see for a discovery controller), up to AERL + 1 at once.
    fn admin_async_event_request(&mut self, slot_index: u16) -> Outcome {
        if self.held_async_events.len() >= usize::from(MAX_OUTSTANDING_ASYNC_EVENTS) {
            return Outcome::status(Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED);
        }
        self.slots.slot(slot_index).state = SlotState::HeldAsyncEvent;
        self.held_async_events.push(slot_index);
        // An event that waited for a request goes out at once.
        self.deliver_due_events();
        Outcome::Pending
    }

    /// Completes the oldest held Asynchronous Event Request with `result` (DW0).
    /// Returns false when none is held (the event is then lost, as the spec allows
    /// when the host keeps no request outstanding).
    pub fn raise_async_event(&mut self, result: u32) -> bool {
        if self.held_async_events.is_empty() {
            return false;
        }
        let slot_index = self.held_async_events.remove(0);
        self.complete(slot_index, Status::SUCCESS, u64::from(result));
        true
    }

    fn admin_set_features(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry, now: Instant) -> Outcome {
        let command = FeatureCommand::decode(sqe);
        if command.save {
            return Outcome::status(Status::FEATURE_IDENTIFIER_NOT_SAVEABLE.with_do_not_retry());
        }
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let controller = binding.controller.clone();
        let discovery = controller.kind == ControllerKind::Discovery;
        if command.feature_id == feature_id::RESERVATION_PERSISTENCE && !discovery {
            // PTPL may wait for the reservation store (reservation_commands.rs).
            return self.set_reservation_persistence(slot_index, sqe, command.dword11 & 1 != 0, now);
        }
        let has_volatile_cache =
            controller.subsystem.as_ref().is_some_and(|subsystem| subsystem.has_volatile_write_cache());
        let max_queues = self.target.settings.max_io_queues_per_controller;
        let value = command.dword11;
        let mut state = controller.state();
        let outcome = match command.feature_id {
            // The same bounds as at Connect (keep-alive limits): a host may not
            // switch keep-alive off or stretch it past the maximum afterwards.
            feature_id::KEEP_ALIVE_TIMER => match self.target.settings.keep_alive_timeout(controller.kind, value) {
                Ok(granted) => {
                    state.features.keep_alive_timeout_ms = granted;
                    Outcome::status(Status::SUCCESS)
                }
                Err(refusal) => {
                    tracing::info!(peer = %self.peer, requested_ms = value, ?refusal, "Set Features KATO refused");
                    Outcome::status(Status::INVALID_FIELD.with_do_not_retry())
                }
            },
            feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION => {
                let supported = if discovery { ASYNC_EVENT_MASK_DISCOVERY } else { ASYNC_EVENT_MASK_SUPPORTED };
                state.features.async_event_configuration = value & supported;
                Outcome::status(Status::SUCCESS)
            }
            _ if discovery => Outcome::status(Status::INVALID_FIELD.with_do_not_retry()),
            feature_id::NUMBER_OF_QUEUES => {
                let (submission, completion) = number_of_queues_requested(value);
                // 0xFFFF (65536 queues) is reserved in either half.
                if submission > 65535 || completion > 65535 {
                    Outcome::status(Status::INVALID_FIELD.with_do_not_retry())
                } else if state.number_of_queues_set {
                    // Allowed once per controller reset; repeat the granted value.
                    let granted = u32::from(state.io_queues_allocated);
                    Outcome::Done(
                        Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry(),
                        u64::from(number_of_queues_result(granted, granted)),
                    )
                } else {
                    let granted = submission.min(completion).min(u32::from(max_queues)).max(1);
                    state.io_queues_allocated = granted as u16;
                    state.number_of_queues_set = true;
                    Outcome::Done(Status::SUCCESS, u64::from(number_of_queues_result(granted, granted)))
                }
            }
            feature_id::ARBITRATION => {
                state.features.arbitration = value;
                Outcome::status(Status::SUCCESS)
            }
            feature_id::POWER_MANAGEMENT => {
                if value & 0x1F >= POWER_STATES {
                    Outcome::status(Status::INVALID_FIELD.with_do_not_retry())
                } else {
                    state.features.power_management = value;
                    Outcome::status(Status::SUCCESS)
                }
            }
            feature_id::VOLATILE_WRITE_CACHE if has_volatile_cache => {
                state.features.volatile_write_cache_enabled = value & 1 != 0;
                Outcome::status(Status::SUCCESS)
            }
            feature_id::TEMPERATURE_THRESHOLD => match TemperatureThreshold::decode(value) {
                Some(TemperatureThreshold { over: true, kelvin }) => {
                    state.features.over_temperature_threshold_kelvin = kelvin;
                    Outcome::status(Status::SUCCESS)
                }
                Some(TemperatureThreshold { over: false, kelvin }) => {
                    state.features.under_temperature_threshold_kelvin = kelvin;
                    Outcome::status(Status::SUCCESS)
                }
                None => Outcome::status(Status::INVALID_FIELD.with_do_not_retry()),
            },
            // A fabrics host gives its Host Identifier in Connect, never here.
            feature_id::HOST_IDENTIFIER => Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry()),
            feature_id::RESERVATION_NOTIFICATION_MASK => match self.reservation_feature_namespace(sqe, true) {
                Ok(nsid) => {
                    controller.set_reservation_mask(nsid, value & RESERVATION_MASK_BITS);
                    Outcome::status(Status::SUCCESS)
                }
                Err(status) => Outcome::status(status),
            },
            // DULBE (bit 16) needs deallocated-block errors, which no namespace offers.
            feature_id::ERROR_RECOVERY if value & ERROR_RECOVERY_DULBE == 0 => {
                state.features.error_recovery_time_limit_100ms = value as u16;
                Outcome::status(Status::SUCCESS)
            }
            _ => Outcome::status(Status::INVALID_FIELD.with_do_not_retry()),
        };
        let restart_keep_alive = command.feature_id == feature_id::KEEP_ALIVE_TIMER;
        let watch_discovery_log = command.feature_id == feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION
            && state.features.async_event_configuration & DISCOVERY_LOG_CHANGE_NOTICES_ENABLED != 0;
        drop(state);
        if restart_keep_alive && matches!(outcome, Outcome::Done(status, _) if status.is_success()) {
            self.restart_keep_alive(&controller, now);
        }
        if watch_discovery_log {
            // Later discovery log changes are compared with what the host sees now.
            controller.watch_discovery_log(|| discovery_log_fingerprint(&self.target, &controller.host_nqn));
        }
        outcome
    }

    /// The NSID a reservation feature (82h, 83h) names: an active namespace, or with
    /// `broadcast_ok` FFFFFFFFh for all of them.
    pub(crate) fn reservation_feature_namespace(
        &mut self,
        sqe: &SubmissionQueueEntry,
        broadcast_ok: bool,
    ) -> Result<NamespaceId, Status> {
        let nsid = sqe.namespace_id();
        if nsid == NamespaceId::BROADCAST && broadcast_ok {
            return Ok(nsid);
        }
        self.refresh_namespaces();
        self.view.get(nsid).map(|_| nsid).ok_or(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry())
    }

    fn admin_get_features(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        let command = FeatureCommand::decode(sqe);
        let is_io = self.binding.as_ref().is_some_and(|binding| binding.controller.kind == ControllerKind::Io);
        if is_io {
            match command.feature_id {
                feature_id::HOST_IDENTIFIER => return self.get_host_identifier(slot_index, sqe),
                feature_id::RESERVATION_NOTIFICATION_MASK | feature_id::RESERVATION_PERSISTENCE => {
                    return self.get_reservation_feature(sqe, command.feature_id, command.select)
                }
                _ => {}
            }
        }
        self.get_basic_feature(sqe)
    }

    /// Feature 81h: the 128-bit Host Identifier from Connect (EXHID must be set: a
    /// fabrics host has no 64-bit one).
    fn get_host_identifier(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        if sqe.dwords[11] & 1 == 0 {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        }
        let identifier = binding.controller.host_identifier;
        let sgl = sqe.sgl();
        if sgl.length < identifier.len() as u32 || !sgl.is_transport() {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        let mut buffer = self.pool.take(identifier.len());
        buffer.copy_from_slice(&identifier);
        self.slots.slot(slot_index).buffer = buffer;
        Outcome::Data(identifier.len() as u32)
    }

    /// Features 82h (Reservation Notification Mask) and 83h (Reservation Persistence).
    fn get_reservation_feature(&mut self, sqe: &SubmissionQueueEntry, feature: u8, select: u8) -> Outcome {
        if select == feature_select::SUPPORTED_CAPABILITIES {
            return Outcome::Done(
                Status::SUCCESS,
                u64::from(feature_capabilities::NAMESPACE_SPECIFIC | feature_capabilities::CHANGEABLE),
            );
        }
        let nsid = match self.reservation_feature_namespace(sqe, false) {
            Ok(nsid) => nsid,
            Err(status) => return Outcome::status(status),
        };
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let defaults = select == feature_select::DEFAULT || select == feature_select::SAVED;
        let value = match (feature, defaults) {
            (_, true) => 0,
            (feature_id::RESERVATION_NOTIFICATION_MASK, false) => binding.controller.reservation_mask(nsid),
            _ => self
                .view
                .get(nsid)
                .map_or(0, |namespace| u32::from(namespace.reservations.lock().persist_through_power_loss)),
        };
        Outcome::Done(Status::SUCCESS, u64::from(value))
    }

    fn get_basic_feature(&mut self, sqe: &SubmissionQueueEntry) -> Outcome {
        let command = FeatureCommand::decode(sqe);
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let controller = &binding.controller;
        let discovery = controller.kind == ControllerKind::Discovery;
        let has_volatile_cache =
            controller.subsystem.as_ref().is_some_and(|subsystem| subsystem.has_volatile_write_cache());
        let known = match command.feature_id {
            feature_id::KEEP_ALIVE_TIMER | feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION => true,
            feature_id::NUMBER_OF_QUEUES | feature_id::ARBITRATION | feature_id::POWER_MANAGEMENT => !discovery,
            feature_id::VOLATILE_WRITE_CACHE => !discovery,
            feature_id::TEMPERATURE_THRESHOLD | feature_id::ERROR_RECOVERY => !discovery,
            _ => false,
        };
        // Get Features 04h names the threshold it asks for in CDW11, like Set.
        let threshold = if command.feature_id == feature_id::TEMPERATURE_THRESHOLD {
            match TemperatureThreshold::decode(command.dword11) {
                Some(threshold) => Some(threshold),
                None => return Outcome::status(Status::INVALID_FIELD.with_do_not_retry()),
            }
        } else {
            None
        };
        if !known {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        }
        if command.select == feature_select::SUPPORTED_CAPABILITIES {
            let changeable = command.feature_id != feature_id::VOLATILE_WRITE_CACHE || has_volatile_cache;
            let capabilities = if changeable { feature_capabilities::CHANGEABLE } else { 0 };
            return Outcome::Done(Status::SUCCESS, u64::from(capabilities));
        }
        // Nothing is saveable, so "saved" reads as the default.
        let defaults = command.select == feature_select::DEFAULT || command.select == feature_select::SAVED;
        let state = controller.state();
        let max_queues = u32::from(self.target.settings.max_io_queues_per_controller);
        let value = match command.feature_id {
            feature_id::KEEP_ALIVE_TIMER => {
                if defaults {
                    0
                } else {
                    state.features.keep_alive_timeout_ms
                }
            }
            feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION => {
                if defaults {
                    0
                } else {
                    state.features.async_event_configuration
                }
            }
            feature_id::NUMBER_OF_QUEUES => {
                let granted = if defaults { max_queues } else { u32::from(state.io_queues_allocated) };
                number_of_queues_result(granted, granted)
            }
            feature_id::ARBITRATION => {
                if defaults {
                    0
                } else {
                    state.features.arbitration
                }
            }
            feature_id::POWER_MANAGEMENT => {
                if defaults {
                    0
                } else {
                    state.features.power_management
                }
            }
            feature_id::VOLATILE_WRITE_CACHE => {
                u32::from(!defaults && has_volatile_cache && state.features.volatile_write_cache_enabled)
            }
            feature_id::TEMPERATURE_THRESHOLD => {
                let over = threshold.is_some_and(|threshold| threshold.over);
                let kelvin = match (over, defaults) {
                    (true, true) => DEFAULT_OVER_TEMPERATURE_THRESHOLD_KELVIN,
                    (true, false) => state.features.over_temperature_threshold_kelvin,
                    (false, true) => 0,
                    (false, false) => state.features.under_temperature_threshold_kelvin,
                };
                TemperatureThreshold { over, kelvin }.encode()
            }
            feature_id::ERROR_RECOVERY => {
                if defaults {
                    0
                } else {
                    u32::from(state.features.error_recovery_time_limit_100ms)
                }
            }
            _ => 0,
        };
        Outcome::Done(Status::SUCCESS, u64::from(value))
    }
}

/// Feature 82h bits: mask Registration Preempted (1), Reservation Released (2) and
/// Reservation Preempted (3) notifications.
const RESERVATION_MASK_BITS: u32 = 0b1110;

/// DULBE: deallocated or unwritten logical block error enable, Error Recovery bit 16.
const ERROR_RECOVERY_DULBE: u32 = 1 << 16;

/// Feature 04h's CDW11 (Set) and parameter (Get), for the one sensor Sluice has: the
/// composite temperature (TMPSEL 0, or Fh for "every sensor", which is the same one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TemperatureThreshold {
    /// THSEL: over-temperature (0) rather than under-temperature (1).
    over: bool,
    /// TMPTH: the threshold in kelvin.
    kelvin: u16,
}

impl TemperatureThreshold {
    /// `None` for a sensor other than the composite one or a reserved THSEL.
    fn decode(dword11: u32) -> Option<TemperatureThreshold> {
        // TMPSEL: threshold temperature select, bits 19:16.
        let sensor = (dword11 >> 16) & 0xF;
        // THSEL: threshold type select, bits 21:20.
        let kind = (dword11 >> 20) & 0x3;
        if !(sensor == 0 || sensor == 0xF) || kind > 1 {
            return None;
        }
        Some(TemperatureThreshold { over: kind == 0, kelvin: dword11 as u16 })
    }

    /// Get Features' DW0: the threshold with THSEL, for the composite sensor.
    fn encode(self) -> u32 {
        u32::from(self.kelvin) | (u32::from(!self.over) << 20)
    }
}

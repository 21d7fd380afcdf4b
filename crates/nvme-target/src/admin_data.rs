//! Identify and Get Log Page: the data structures the controller returns.

use nvme_spec::admin::IdentifyCommand;
use nvme_spec::ana::{
    anacap, encode_ana_log_header, AnaGroupDescriptor, AnaGroupId, ANA_LOG_HEADER_BYTES,
    LOG_SPECIFIC_RETURN_GROUPS_ONLY,
};
use nvme_spec::identify::{
    cmic, cns, command_set_vector, controller_type, csi, ctratt, dlfeat, encode_controller_list,
    encode_io_command_set_vector, encode_namespace_descriptors, encode_namespace_list, frmw, lpa, nmic, nsfeat, oacs,
    oaes, ofcs, oncs, sgls, vwc, LbaFormat, IDENTIFY_DATA_BYTES,
};
use nvme_spec::log_page::{
    command_effects, copy_log_page_range, data_units_from_bytes, log_id, CommandsSupportedAndEffects, FirmwareSlotLog,
    GetLogPageCommand, SmartHealthLog, COMMANDS_SUPPORTED_AND_EFFECTS_BYTES, FIRMWARE_SLOT_LOG_BYTES,
    SMART_HEALTH_LOG_BYTES,
};
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::registers::Version;
use nvme_spec::{
    IdentifyController, IdentifyNamespace, NamespaceDescriptor, NamespaceId, Status, SubmissionQueueEntry,
};

use crate::connection::Connection;
use crate::controller::{Controller, ControllerKind};
use crate::fabrics::REPORTED_VERSION;
use crate::limits::{
    ANA_TRANSITION_TIME_SECONDS, ATOMIC_COMPARE_AND_WRITE_UNIT_ZERO_BASED, ERROR_LOG_ENTRIES,
    KEEP_ALIVE_GRANULARITY_100MS, MAX_ADMIN_QUEUE_DEPTH, MAX_ANA_GROUP_ID, MAX_DATA_TRANSFER_BYTES,
    MAX_DATA_TRANSFER_SIZE_LOG2_PAGES, MAX_NAMESPACE_ID, MAX_OUTSTANDING_ABORTS, MAX_OUTSTANDING_ASYNC_EVENTS,
};
use crate::namespaces::Namespace;
use crate::outcome::Outcome;
use crate::subsystem::Subsystem;

/// RESCAP bits 7:1: the six reservation types, and bit 7, IEKEY with its NVMe 1.3
/// meaning (Register may ignore the current key; Acquire and Release with IEKEY set are
/// refused, see `reservation_commands.rs`).
const RESERVATION_CAPABILITIES: u8 = 0b1111_1110;
/// RESCAP bit 0, PTPOS: Persist Through Power Loss supported.
const RESERVATION_PERSIST_THROUGH_POWER_LOSS: u8 = 1 << 0;
/// FR: firmware revision, the crate version.
/// OCFS bit 0: Copy source range entries in format 0.
const COPY_FORMAT_0: u16 = 1 << 0;
/// FUSES bit 0: the controller supports the Compare and Write fused operation.
const FUSED_COMPARE_AND_WRITE: u16 = 1 << 0;

const FIRMWARE_REVISION: &str = env!("CARGO_PKG_VERSION");
/// RAB: recommended arbitration burst (2^6 commands), as the Linux target reports.
const RECOMMENDED_ARBITRATION_BURST: u8 = 6;
/// SQES/CQES: required and maximum entry sizes, log2 (64-byte SQE, 16-byte CQE).
const SUBMISSION_QUEUE_ENTRY_SIZES: u8 = 0x66;
const COMPLETION_QUEUE_ENTRY_SIZES: u8 = 0x44;
/// Byte offsets in the I/O Command Set Independent Identify Namespace structure.
const INDEPENDENT_NMIC_OFFSET: usize = 1;
const INDEPENDENT_NSTAT_OFFSET: usize = 13;
/// NSTAT bit 0: the namespace is ready.
const NAMESPACE_READY: u8 = 1;

impl Connection {
    /// The length of a controller-to-host transfer, from the command's SGL.
    fn controller_to_host_length(sqe: &SubmissionQueueEntry) -> Result<u32, Status> {
        let sgl = sqe.sgl();
        if sgl.length == 0 {
            return Ok(0);
        }
        if !sgl.is_transport() {
            return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_do_not_retry());
        }
        if sgl.length > MAX_DATA_TRANSFER_BYTES {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        Ok(sgl.length)
    }

    /// Puts the first `length` bytes of `data` into the slot's buffer to send.
    fn respond_with(&mut self, slot_index: u16, data: &[u8], length: u32) -> Outcome {
        // The first `length` bytes, or all of `data` when it is shorter.
        let data = data.get(..length as usize).unwrap_or(data);
        let mut buffer = self.pool.take(data.len());
        buffer.copy_from_slice(data);
        self.slots.slot(slot_index).buffer = buffer;
        Outcome::Data(data.len() as u32)
    }

    pub(crate) fn admin_identify(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        let length = match Self::controller_to_host_length(sqe) {
            Ok(length) => length,
            Err(status) => return Outcome::status(status),
        };
        // Every Identify structure is 4096 bytes: a data buffer shorter than that
        // cannot hold it (Data SGL Length Invalid, as the Linux target answers), and a
        // host that sends one has a bug better reported than half-filled.
        if (length as usize) < IDENTIFY_DATA_BYTES {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let controller = binding.controller.clone();
        let command = IdentifyCommand::decode(sqe);
        let mut data = [0u8; IDENTIFY_DATA_BYTES];
        let result = match controller.kind {
            ControllerKind::Discovery => match command.cns {
                cns::CONTROLLER => {
                    self.identify_controller(&controller).encode(&mut data);
                    Ok(())
                }
                _ => Err(Status::INVALID_FIELD.with_do_not_retry()),
            },
            ControllerKind::Io => self.identify_io(&controller, &command, &mut data),
        };
        match result {
            Ok(()) => self.respond_with(slot_index, &data, length),
            Err(status) => Outcome::status(status),
        }
    }

    fn identify_io(
        &self,
        controller: &Controller,
        command: &IdentifyCommand,
        data: &mut [u8; IDENTIFY_DATA_BYTES],
    ) -> Result<(), Status> {
        let Some(subsystem) = &controller.subsystem else {
            return Err(Status::INTERNAL_ERROR);
        };
        let nsid = command.namespace_id;
        let invalid_namespace = || Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry();
        let active = || self.view.get(nsid).ok_or_else(invalid_namespace);
        let nvm_only =
            |csi_value: u8| if csi_value == csi::NVM { Ok(()) } else { Err(Status::INVALID_FIELD.with_do_not_retry()) };
        let managed = subsystem.supports_namespace_management();
        let managed_only = || if managed { Ok(()) } else { Err(Status::INVALID_FIELD.with_do_not_retry()) };
        match command.cns {
            cns::CONTROLLER => self.identify_controller(controller).encode(data),
            cns::NAMESPACE => {
                if nsid == NamespaceId::BROADCAST && managed {
                    // Capabilities common to all namespaces: what create may ask for.
                    common_namespace_capabilities(subsystem).encode(data);
                } else if nsid.0 == 0 || nsid.0 > MAX_NAMESPACE_ID {
                    return Err(invalid_namespace());
                } else if let Some(namespace) = self.view.get(nsid) {
                    // An inactive but valid NSID reads as all zeroes.
                    let mut identify = identify_namespace(namespace, subsystem.group_reservations().is_some());
                    if !self.target.settings.reservations {
                        identify.reservation_capabilities = 0;
                    } else if subsystem.reservation_store().is_some() || subsystem.group_reservations().is_some() {
                        // PTPOS: Persist Through Power Loss, with a reservation store or
                        // in a gateway group's cluster.
                        identify.reservation_capabilities |= RESERVATION_PERSIST_THROUGH_POWER_LOSS;
                    }
                    identify.encode(data);
                }
            }
            cns::ACTIVE_NAMESPACE_LIST | cns::IO_COMMAND_SET_ACTIVE_NAMESPACE_LIST => {
                if command.cns == cns::IO_COMMAND_SET_ACTIVE_NAMESPACE_LIST {
                    nvm_only(command.command_set_identifier)?;
                }
                if nsid.0 >= 0xFFFF_FFFE {
                    return Err(invalid_namespace());
                }
                let above = self.view.active_ids().iter().copied().filter(|id| id.0 > nsid.0);
                encode_namespace_list(above, data);
            }
            cns::NAMESPACE_DESCRIPTOR_LIST => {
                let namespace = active()?;
                encode_namespace_descriptors(
                    &[
                        NamespaceDescriptor::Nguid(namespace.nguid),
                        NamespaceDescriptor::Uuid(namespace.uuid),
                        NamespaceDescriptor::CommandSetIdentifier(csi::NVM),
                    ],
                    data,
                );
            }
            cns::IO_COMMAND_SET_NAMESPACE => {
                nvm_only(command.command_set_identifier)?;
                // NVM command set specific namespace data: no extended LBA formats,
                // no protection information; all zero.
                active()?;
            }
            cns::IO_COMMAND_SET_CONTROLLER => {
                // NVM command set specific controller data. VSL (byte 0): Verify
                // reads through a pooled buffer, so it is bounded like a transfer
                // (MDTS units); zero WZSL and DMRSL mean "no limit".
                nvm_only(command.command_set_identifier)?;
                data[0] = MAX_DATA_TRANSFER_SIZE_LOG2_PAGES;
            }
            cns::IO_COMMAND_SET_INDEPENDENT_NAMESPACE => {
                active()?;
                data[INDEPENDENT_NMIC_OFFSET] = nmic::SHARED;
                data[INDEPENDENT_NSTAT_OFFSET] = NAMESPACE_READY;
            }
            cns::IO_COMMAND_SET => encode_io_command_set_vector(&[command_set_vector::NVM], data),
            cns::ALLOCATED_NAMESPACE_LIST => {
                managed_only()?;
                if nsid.0 >= 0xFFFF_FFFE {
                    return Err(invalid_namespace());
                }
                let table = subsystem.table();
                encode_namespace_list(table.allocated_ids().filter(|id| id.0 > nsid.0), data);
            }
            cns::ALLOCATED_NAMESPACE => {
                managed_only()?;
                if nsid.0 == 0 || nsid.0 > MAX_NAMESPACE_ID {
                    return Err(invalid_namespace());
                }
                if let Some(entry) = subsystem.table().get(nsid) {
                    identify_namespace(&entry.namespace, subsystem.group_reservations().is_some()).encode(data);
                }
            }
            cns::NAMESPACE_ATTACHED_CONTROLLER_LIST => {
                managed_only()?;
                let table = subsystem.table();
                let entry = table.get(nsid).ok_or_else(invalid_namespace)?;
                let attached = self
                    .target
                    .controllers_of(subsystem.index)
                    .into_iter()
                    .filter(|other| entry.attachment.includes(&other.host_nqn))
                    .map(|other| other.id)
                    .filter(|id| id.0 >= command.controller_id.0);
                encode_controller_list(attached, data);
            }
            cns::CONTROLLER_LIST => {
                managed_only()?;
                let all = self
                    .target
                    .controllers_of(subsystem.index)
                    .into_iter()
                    .map(|other| other.id)
                    .filter(|id| id.0 >= command.controller_id.0);
                encode_controller_list(all, data);
            }
            _ => return Err(Status::INVALID_FIELD.with_do_not_retry()),
        }
        Ok(())
    }

    fn identify_controller(&self, controller: &Controller) -> IdentifyController {
        let mut id = IdentifyController::default();
        id.set_firmware_revision(FIRMWARE_REVISION);
        id.recommended_arbitration_burst = RECOMMENDED_ARBITRATION_BURST;
        id.maximum_data_transfer_size = MAX_DATA_TRANSFER_SIZE_LOG2_PAGES;
        id.controller_id = controller.id;
        id.version = Version(REPORTED_VERSION);
        id.controller_attributes = ctratt::HOST_ID_128_BIT;
        id.async_event_request_limit = (MAX_OUTSTANDING_ASYNC_EVENTS - 1) as u8;
        id.log_page_attributes = lpa::EXTENDED_DATA;
        id.error_log_page_entries = (ERROR_LOG_ENTRIES - 1) as u8;
        id.keep_alive_support = KEEP_ALIVE_GRANULARITY_100MS;
        id.submission_queue_entry_size = SUBMISSION_QUEUE_ENTRY_SIZES;
        id.completion_queue_entry_size = COMPLETION_QUEUE_ENTRY_SIZES;
        // SGLs without alignment rules, and data block descriptors with an offset
        // into in-capsule data.
        id.sgl_support = sgls::SUPPORTED_NO_ALIGNMENT | sgls::SGL_OFFSET;
        // IOCCSZ: in 16-byte units, the 64-byte command included.
        id.io_command_capsule_size = (64 + self.target.settings.in_capsule_data_bytes) / 16;
        id.io_response_capsule_size = 1;
        id.in_capsule_data_offset = 0;
        id.maximum_sgl_data_block_descriptors = 1;
        id.optional_fabrics_commands_support = ofcs::DISCONNECT;
        match (&controller.subsystem, controller.kind) {
            (Some(subsystem), ControllerKind::Io) => {
                id.set_serial_number(&subsystem.serial_number);
                id.set_model_number(&subsystem.model_number);
                id.set_subsystem_nqn(&subsystem.nqn);
                id.controller_type = controller_type::IO;
                // Several hosts may each have a controller on one subsystem.
                id.multipath_capabilities = cmic::MULTIPLE_CONTROLLERS;
                id.optional_async_events_supported = oaes::NAMESPACE_ATTRIBUTE_NOTICES;
                if self.target.settings.ana_reporting {
                    // Several gateways (ports) serve the subsystem, each reporting ANA
                    // states.
                    id.multipath_capabilities |= cmic::MULTIPLE_PORTS | cmic::ANA_REPORTING;
                    id.optional_async_events_supported |= oaes::ANA_CHANGE_NOTICES;
                    id.ana_transition_time = ANA_TRANSITION_TIME_SECONDS;
                    id.ana_capabilities = anacap::REPORTS_OPTIMIZED
                        | anacap::REPORTS_NON_OPTIMIZED
                        | anacap::REPORTS_INACCESSIBLE
                        | anacap::REPORTS_CHANGE
                        | anacap::GROUP_ID_STATIC;
                    id.ana_group_identifier_maximum = MAX_ANA_GROUP_ID;
                    id.number_of_ana_group_identifiers = MAX_ANA_GROUP_ID;
                    // MNAN: the Linux host sizes its ANA log buffer from it (and
                    // refuses ANA when it is 0 or above NN).
                    id.maximum_number_of_allowed_namespaces = MAX_NAMESPACE_ID;
                }
                // A lost host's commands stay at storage at most this long before
                // the target gives up waiting for them (see quiesce.rs); the Linux
                // host's failover can wait for it instead of guessing.
                id.command_quiesce_time_ms =
                    u16::try_from(self.target.settings.command_quiesce_timeout_ms).unwrap_or(u16::MAX);
                id.abort_command_limit = (MAX_OUTSTANDING_ABORTS - 1) as u8;
                id.firmware_updates = frmw::SLOT_1_READ_ONLY | (1 << frmw::SLOT_COUNT_SHIFT);
                id.log_page_attributes |= lpa::COMMANDS_EFFECTS;
                id.maximum_outstanding_commands = self.target.settings.max_io_queue_depth;
                id.number_of_namespaces = MAX_NAMESPACE_ID;
                id.optional_nvm_command_support =
                    oncs::COMPARE | oncs::DATASET_MANAGEMENT | oncs::WRITE_ZEROES | oncs::VERIFY | oncs::COPY;
                // OCFS bit 0: Copy with source range entries in format 0.
                id.optional_copy_formats_supported = COPY_FORMAT_0;
                if self.target.settings.reservations {
                    id.optional_nvm_command_support |= oncs::RESERVATIONS;
                }
                // Compare and Write, atomic for any pair up to MDTS (see `fused`); on a
                // gateway group only what the storage compares and writes at once, at
                // least one block (NACWU may say more per namespace).
                id.fused_operation_support = FUSED_COMPARE_AND_WRITE;
                id.atomic_compare_and_write_unit =
                    if subsystem.group_reservations().is_some() { 0 } else { ATOMIC_COMPARE_AND_WRITE_UNIT_ZERO_BASED };
                if let Some(pool) = &subsystem.pool {
                    id.optional_admin_command_support |= oacs::NAMESPACE_MANAGEMENT;
                    id.total_nvm_capacity = u128::from(pool.capacity_bytes());
                    id.unallocated_nvm_capacity = u128::from(pool.free_bytes());
                }
                id.volatile_write_cache = if subsystem.has_volatile_write_cache() {
                    vwc::PRESENT | vwc::FLUSH_BROADCAST_SUPPORTED
                } else {
                    0
                };
            }
            _ => {
                id.set_serial_number("SLUICE-DISCOVERY");
                id.set_model_number("Sluice discovery controller");
                id.set_subsystem_nqn(nvme_spec::discovery::DISCOVERY_NQN);
                id.controller_type = controller_type::DISCOVERY;
                id.maximum_outstanding_commands = MAX_ADMIN_QUEUE_DEPTH;
                // Linux enables the notice (Set Features 0Bh bit 31) only when
                // advertised here, then holds an Asynchronous Event Request.
                id.optional_async_events_supported = oaes::DISCOVERY_LOG_PAGE_CHANGE;
            }
        }
        id
    }

    pub(crate) fn admin_get_log_page(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        let command = GetLogPageCommand::decode(sqe);
        let sgl_length = match Self::controller_to_host_length(sqe) {
            Ok(length) => length,
            Err(status) => return Outcome::status(status),
        };
        let length = command.length_bytes();
        if !command.offset.is_multiple_of(4) || length > u64::from(MAX_DATA_TRANSFER_BYTES) {
            return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
        }
        if u64::from(sgl_length) < length {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let controller = binding.controller.clone();
        let mut buffer = self.pool.take_zeroed(length as usize);
        let result = match (controller.kind, command.log_page_id) {
            (ControllerKind::Discovery, log_id::DISCOVERY) => {
                Ok(self.copy_discovery_log(command.offset, &mut buffer, command.retain_asynchronous_event))
            }
            (ControllerKind::Io, log_id::ERROR_INFORMATION) => {
                let page = controller.error_log();
                Ok(copy_log_page_range(&page, command.offset, &mut buffer))
            }
            (ControllerKind::Io, log_id::SMART_HEALTH) => {
                let mut page = [0u8; SMART_HEALTH_LOG_BYTES];
                smart_health(&controller).encode(&mut page);
                Ok(copy_log_page_range(&page, command.offset, &mut buffer))
            }
            (ControllerKind::Io, log_id::FIRMWARE_SLOT) => {
                let mut log = FirmwareSlotLog { active_firmware_info: 1, ..FirmwareSlotLog::default() };
                log.set_revision(0, FIRMWARE_REVISION);
                let mut page = [0u8; FIRMWARE_SLOT_LOG_BYTES];
                log.encode(&mut page);
                Ok(copy_log_page_range(&page, command.offset, &mut buffer))
            }
            (ControllerKind::Io, log_id::CHANGED_NAMESPACE_LIST) => {
                let page = controller.changed_namespace_log(command.retain_asynchronous_event);
                Ok(copy_log_page_range(&page, command.offset, &mut buffer))
            }
            (ControllerKind::Io, log_id::ASYMMETRIC_NAMESPACE_ACCESS) if self.target.settings.ana_reporting => {
                controller.ana_log_read(command.retain_asynchronous_event);
                let groups_only = command.log_specific_field & LOG_SPECIFIC_RETURN_GROUPS_ONLY != 0;
                let page = self.ana_log(groups_only);
                Ok(copy_log_page_range(&page, command.offset, &mut buffer))
            }
            (ControllerKind::Io, log_id::RESERVATION_NOTIFICATION) => {
                let page = controller.reservation_log(command.retain_asynchronous_event);
                Ok(copy_log_page_range(&page, command.offset, &mut buffer))
            }
            (ControllerKind::Io, log_id::COMMANDS_SUPPORTED_AND_EFFECTS) => {
                let mut page = [0u8; COMMANDS_SUPPORTED_AND_EFFECTS_BYTES];
                let managed =
                    controller.subsystem.as_ref().is_some_and(|subsystem| subsystem.supports_namespace_management());
                commands_supported_and_effects(managed, self.target.settings.reservations).encode(&mut page);
                Ok(copy_log_page_range(&page, command.offset, &mut buffer))
            }
            _ => Err(Status::INVALID_LOG_PAGE.with_do_not_retry()),
        };
        match result {
            Ok(copied) if copied == 0 && length > 0 => {
                self.pool.give(buffer);
                Outcome::status(Status::INVALID_FIELD.with_do_not_retry())
            }
            Ok(_) => {
                self.slots.slot(slot_index).buffer = buffer;
                Outcome::Data(length as u32)
            }
            Err(status) => {
                self.pool.give(buffer);
                Outcome::status(status)
            }
        }
    }
}

impl Connection {
    /// The ANA log (0Ch) as this controller sees it: one descriptor per ANA group of
    /// the subsystem, in group order, each with the NSIDs active for this host unless
    /// `groups_only` (RGO). The admin path may allocate: hosts read it after a notice.
    fn ana_log(&self, groups_only: bool) -> Vec<u8> {
        // Every group of the subsystem is listed, and the default group always, even
        // without a namespace for this host (as the Linux target does): a host that
        // attaches a namespace later finds its group in the log it already read
        // instead of waiting for a re-read with the path disabled.
        let mut groups: Vec<(AnaGroupId, Vec<NamespaceId>)> = vec![(crate::ana::DEFAULT_ANA_GROUP, Vec::new())];
        if let Some(subsystem) = self.binding.as_ref().and_then(|binding| binding.controller.subsystem.as_ref()) {
            for entry in subsystem.table().entries() {
                if !groups.iter().any(|(group, _)| *group == entry.namespace.ana_group) {
                    groups.push((entry.namespace.ana_group, Vec::new()));
                }
            }
        }
        for &nsid in self.view.active_ids() {
            let Some(namespace) = self.view.get(nsid) else { continue };
            match groups.iter_mut().find(|(group, _)| *group == namespace.ana_group) {
                Some((_, members)) => members.push(nsid),
                None => groups.push((namespace.ana_group, vec![nsid])),
            }
        }
        groups.sort_by_key(|(group, _)| *group);
        let ana = &self.target.ana;
        let listed: usize = if groups_only { 0 } else { groups.iter().map(|(_, members)| members.len() * 4).sum() };
        let mut page = vec![0u8; ANA_LOG_HEADER_BYTES + groups.len() * 32 + listed];
        encode_ana_log_header(ana.change_count(), groups.len() as u16, &mut page);
        let mut offset = ANA_LOG_HEADER_BYTES;
        for (group, members) in &groups {
            let descriptor = AnaGroupDescriptor {
                group_id: *group,
                namespace_count: if groups_only { 0 } else { members.len() as u32 },
                change_count: ana.group_change_count(*group),
                state: ana.state(*group),
            };
            // The page was sized for exactly these descriptors.
            let rest = page.get_mut(offset..).unwrap_or_default();
            offset += descriptor.encode(members.iter().copied(), rest).unwrap_or(0);
        }
        page
    }
}

/// `in_gateway_group`: the subsystem is exported by a gateway group (atomicity of
/// Compare and Write is then the storage's, see `fused`).
fn identify_namespace(namespace: &Namespace, in_gateway_group: bool) -> IdentifyNamespace {
    let blocks = namespace.geometry().block_count;
    let thin = namespace.carve.as_ref().is_some_and(|carve| carve.thin);
    let mut id = IdentifyNamespace {
        namespace_size: blocks,
        namespace_capacity: blocks,
        namespace_utilization: namespace.utilization_blocks(),
        namespace_features: if thin { nsfeat::THIN_PROVISIONING } else { 0 },
        nvm_capacity: u128::from(namespace.geometry().capacity_bytes()),
        number_of_lba_formats: 0,
        formatted_lba_size: 0,
        multipath_capabilities: nmic::SHARED,
        // Write Zeroes may deallocate; deallocated blocks read as zeroes where the
        // backend promises it (RBD does not: its discards skip partial objects).
        deallocate_features: if namespace.backend.deallocate_reads_zeroes() {
            dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEALLOCATE
        } else {
            dlfeat::WRITE_ZEROES_DEALLOCATE
        },
        namespace_globally_unique_identifier: namespace.nguid,
        ana_group_identifier: namespace.ana_group.0,
        // Copy: one MDTS in all, any one range as long (MSSRL, MCL), MSRC 0's based.
        maximum_single_source_range_length: crate::copy::maximum_copy_blocks(namespace.geometry().block_size_bytes)
            .min(u32::from(u16::MAX)) as u16,
        maximum_copy_length: crate::copy::maximum_copy_blocks(namespace.geometry().block_size_bytes),
        maximum_source_range_count: (crate::limits::MAX_COPY_SOURCE_RANGES - 1) as u8,
        // RESCAP: all six types and Ignore Existing Key; PTPOS where a store exists.
        reservation_capabilities: RESERVATION_CAPABILITIES,
        ..IdentifyNamespace::default()
    };
    id.lba_formats[0] =
        LbaFormat { metadata_size: 0, lba_data_size_log2: namespace.block_size_log2(), relative_performance: 0 };
    let block_bytes = u64::from(namespace.geometry().block_size_bytes).max(1);
    match namespace.backend.atomic_compare_and_write_boundary_bytes() {
        // On a gateway group Compare and Write is the storage's own atomic operation,
        // inside aligned regions (see `fused`): NACWU says how many blocks a pair may
        // have, NABSN/NABSPF (0's based; 0 means no boundary, right for a one-block
        // region since no pair larger than NACWU is atomic anyway) how large the
        // regions are, NABO 0 that they start at LBA 0. Other pairs get Invalid Field.
        Some(boundary_bytes) if in_gateway_group && boundary_bytes >= block_bytes => {
            let region_blocks_zero_based = (boundary_bytes / block_bytes - 1).min(u64::from(u16::MAX)) as u16;
            id.namespace_features |= nsfeat::NAMESPACE_ATOMICS;
            id.atomic_compare_and_write_unit = ATOMIC_COMPARE_AND_WRITE_UNIT_ZERO_BASED.min(region_blocks_zero_based);
            id.atomic_boundary_size_normal = region_blocks_zero_based;
            id.atomic_boundary_size_power_fail = region_blocks_zero_based;
            id.atomic_boundary_offset = 0;
        }
        _ => {}
    }
    id
}

/// Identify Namespace for NSID FFFFFFFFh with Namespace Management: the one LBA
/// format (the pool's block size) namespaces can be created with.
fn common_namespace_capabilities(subsystem: &Subsystem) -> IdentifyNamespace {
    let block_size_bytes = subsystem.pool.as_ref().map_or(512, |pool| pool.block_size_bytes());
    let mut id = IdentifyNamespace {
        number_of_lba_formats: 0,
        multipath_capabilities: nmic::SHARED,
        deallocate_features: dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEALLOCATE,
        ..IdentifyNamespace::default()
    };
    id.lba_formats[0] = LbaFormat {
        metadata_size: 0,
        lba_data_size_log2: block_size_bytes.trailing_zeros() as u8,
        relative_performance: 0,
    };
    id
}

fn smart_health(controller: &Controller) -> SmartHealthLog {
    let totals = controller.subsystem.as_ref().map(|subsystem| subsystem.stats.snapshot()).unwrap_or_default();
    SmartHealthLog {
        available_spare: 100,
        available_spare_threshold: 10,
        data_units_read: data_units_from_bytes(u128::from(totals.bytes_read)),
        data_units_written: data_units_from_bytes(u128::from(totals.bytes_written)),
        host_read_commands: u128::from(totals.read_commands),
        host_write_commands: u128::from(totals.write_commands),
        media_errors: u128::from(totals.media_errors),
        error_log_entries: u128::from(controller.error_count()),
        ..SmartHealthLog::default()
    }
}

/// Sets the entry of `opcode` in a table of the Commands Supported and Effects log
/// (256 entries, one per value of the u8 opcode: always there).
fn set_effects(entries: &mut [u32; 256], opcode: u8, effects: u32) {
    if let Some(entry) = entries.get_mut(usize::from(opcode)) {
        *entry = effects;
    }
}

fn commands_supported_and_effects(namespace_management: bool, reservations: bool) -> CommandsSupportedAndEffects {
    let mut log = CommandsSupportedAndEffects { admin: [0; 256], io: [0; 256] };
    let supported = command_effects::COMMAND_SUPPORTED;
    for opcode in [
        AdminOpcode::GetLogPage,
        AdminOpcode::Identify,
        AdminOpcode::Abort,
        AdminOpcode::SetFeatures,
        AdminOpcode::GetFeatures,
        AdminOpcode::AsynchronousEventRequest,
        AdminOpcode::KeepAlive,
    ] {
        set_effects(&mut log.admin, opcode as u8, supported);
    }
    if namespace_management {
        // Hosts rescan namespaces after commands marked so (Linux does, for
        // passthrough), besides the namespace attribute notice.
        let inventory =
            supported | command_effects::NAMESPACE_CAPABILITY_CHANGE | command_effects::NAMESPACE_INVENTORY_CHANGE;
        set_effects(&mut log.admin, AdminOpcode::NamespaceManagement as u8, inventory);
        set_effects(&mut log.admin, AdminOpcode::NamespaceAttachment as u8, inventory);
    }
    set_effects(&mut log.io, IoOpcode::Flush as u8, supported);
    set_effects(&mut log.io, IoOpcode::Read as u8, supported);
    set_effects(&mut log.io, IoOpcode::Compare as u8, supported);
    set_effects(&mut log.io, IoOpcode::Verify as u8, supported);
    let reservation_opcodes = [
        IoOpcode::ReservationRegister,
        IoOpcode::ReservationReport,
        IoOpcode::ReservationAcquire,
        IoOpcode::ReservationRelease,
    ];
    for opcode in reservation_opcodes.into_iter().filter(|_| reservations) {
        set_effects(&mut log.io, opcode as u8, supported);
    }
    let changes_content = supported | command_effects::LOGICAL_BLOCK_CONTENT_CHANGE;
    set_effects(&mut log.io, IoOpcode::Write as u8, changes_content);
    set_effects(&mut log.io, IoOpcode::WriteZeroes as u8, changes_content);
    set_effects(&mut log.io, IoOpcode::Copy as u8, changes_content);
    set_effects(&mut log.io, IoOpcode::DatasetManagement as u8, changes_content);
    log
}

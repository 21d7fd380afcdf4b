//! Get Log Page (admin opcode 02h): the command view and the log pages a target
//! serves (NVMe Base 2.0, "Get Log Page command" and "Log Page Identifiers").
//!
//! A host may read any log at any offset and length (LPO, NUMD), so the pages are
//! encoded whole into a fixed buffer and [`copy_log_page_range`] cuts out the slice
//! the command asked for.

use crate::bits::{get_bits, get_flag, set_bits, set_flag};
use crate::bytes::{copy_prefix, get_array, get_u128, get_u16, get_u32, get_u64, put_u128, put_u16, put_u32, put_u64};
use crate::identify::NAMESPACE_LIST_CAPACITY;
use crate::ids::{CommandId, NamespaceId, QueueId};
use crate::sorted_ids::SortedIds;
use crate::sqe::SubmissionQueueEntry;
use crate::status::Status;

/// Size of an Error Information log entry.
pub const ERROR_INFORMATION_ENTRY_BYTES: usize = 64;
/// Size of the SMART / Health Information log.
pub const SMART_HEALTH_LOG_BYTES: usize = 512;
/// Size of the Firmware Slot Information log.
pub const FIRMWARE_SLOT_LOG_BYTES: usize = 512;
/// Size of the Commands Supported and Effects log.
pub const COMMANDS_SUPPORTED_AND_EFFECTS_BYTES: usize = 4096;
/// Size of the Changed Namespace List log.
pub const CHANGED_NAMESPACE_LIST_BYTES: usize = 4096;

/// LID: log page identifiers.
pub mod log_id {
    /// Supported Log Pages.
    pub const SUPPORTED_LOG_PAGES: u8 = 0x00;
    /// Error Information: an array of 64-byte entries, newest first.
    pub const ERROR_INFORMATION: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART_HEALTH: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FIRMWARE_SLOT: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NAMESPACE_LIST: u8 = 0x04;
    /// Commands Supported and Effects.
    pub const COMMANDS_SUPPORTED_AND_EFFECTS: u8 = 0x05;
    /// Device Self-test.
    pub const DEVICE_SELF_TEST: u8 = 0x06;
    /// Asymmetric Namespace Access.
    pub const ASYMMETRIC_NAMESPACE_ACCESS: u8 = 0x0C;
    /// Discovery log (discovery controllers only).
    pub const DISCOVERY: u8 = 0x70;
    /// Reservation Notification.
    pub const RESERVATION_NOTIFICATION: u8 = 0x80;
}

/// Copies bytes `[offset, offset + out.len())` of a whole log page into `out`,
/// zero-filling whatever lies past the end of the page. Returns how many bytes came
/// from the page. Reading past the end is the host's business (a short page is not
/// an error for a log like Error Information); an offset beyond the page entirely is
/// worth rejecting with Invalid Field, which the caller can detect as a 0 return for
/// a non-empty `out`.
pub fn copy_log_page_range(page: &[u8], offset: u64, out: &mut [u8]) -> usize {
    let available = usize::try_from(offset).ok().and_then(|offset| page.get(offset..)).unwrap_or_default();
    let copied = copy_prefix(out, available);
    if let Some(rest) = out.get_mut(copied..) {
        rest.fill(0);
    }
    copied
}

/// Get Log Page command fields (CDW10..CDW14 and NSID).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetLogPageCommand {
    /// NSID: the namespace the log is about, or FFFFFFFFh for the controller.
    pub namespace_id: NamespaceId,
    /// LID: log page identifier, CDW10 bits 7:0 ([`log_id`]).
    pub log_page_id: u8,
    /// LSP: log specific field, CDW10 bits 14:8.
    pub log_specific_field: u8,
    /// RAE: retain asynchronous event, CDW10 bit 15. When clear, reading the log
    /// clears the asynchronous event that pointed at it.
    pub retain_asynchronous_event: bool,
    /// NUMD + 1: dwords to return, from NUMDL (CDW10 bits 31:16) and NUMDU (CDW11
    /// bits 15:0). NUMD is 0's based and 32 bits wide, so the count is 1..=2^32 and
    /// needs a u64.
    pub dword_count: u64,
    /// LSI: log specific identifier, CDW11 bits 31:16.
    pub log_specific_identifier: u16,
    /// LPO: log page offset, CDW12 (low) and CDW13 (high): bytes when OT is clear,
    /// an entry index when it is set.
    pub offset: u64,
    /// UUID index, CDW14 bits 6:0.
    pub uuid_index: u8,
    /// OT: offset type, CDW14 bit 23 (set: LPO is an index, not a byte offset).
    pub offset_type: bool,
    /// CSI: command set identifier, CDW14 bits 31:24.
    pub command_set_identifier: u8,
}

impl GetLogPageCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        let cdw10 = sqe.dwords[10];
        let cdw11 = sqe.dwords[11];
        let cdw14 = sqe.dwords[14];
        let numd = (get_bits(cdw11, 0, 16) << 16) | get_bits(cdw10, 16, 16);
        Self {
            namespace_id: sqe.namespace_id(),
            log_page_id: get_bits(cdw10, 0, 8) as u8,
            log_specific_field: get_bits(cdw10, 8, 7) as u8,
            retain_asynchronous_event: get_flag(cdw10, 15),
            dword_count: u64::from(numd) + 1,
            log_specific_identifier: get_bits(cdw11, 16, 16) as u16,
            offset: u64::from(sqe.dwords[12]) | (u64::from(sqe.dwords[13]) << 32),
            uuid_index: get_bits(cdw14, 0, 7) as u8,
            offset_type: get_flag(cdw14, 23),
            command_set_identifier: get_bits(cdw14, 24, 8) as u8,
        }
    }

    /// Writes the fields into a submission queue entry (host side); CDW0 is left
    /// alone. A `dword_count` of 0 or above 2^32 is clamped into 1..=2^32.
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        let numd = (self.dword_count.clamp(1, 1 << 32) - 1) as u32;
        sqe.dwords[1] = self.namespace_id.0;
        let cdw10 = &mut sqe.dwords[10];
        set_bits(cdw10, 0, 8, u32::from(self.log_page_id));
        set_bits(cdw10, 8, 7, u32::from(self.log_specific_field));
        set_flag(cdw10, 15, self.retain_asynchronous_event);
        set_bits(cdw10, 16, 16, numd & 0xFFFF);
        let cdw11 = &mut sqe.dwords[11];
        set_bits(cdw11, 0, 16, numd >> 16);
        set_bits(cdw11, 16, 16, u32::from(self.log_specific_identifier));
        sqe.dwords[12] = self.offset as u32;
        sqe.dwords[13] = (self.offset >> 32) as u32;
        let cdw14 = &mut sqe.dwords[14];
        set_bits(cdw14, 0, 7, u32::from(self.uuid_index));
        set_flag(cdw14, 23, self.offset_type);
        set_bits(cdw14, 24, 8, u32::from(self.command_set_identifier));
    }

    /// Number of bytes the host asked for (NUMD + 1 dwords).
    pub fn length_bytes(&self) -> u64 {
        self.dword_count * 4
    }
}

/// One Error Information log entry (log 01h), 64 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorInformationEntry {
    /// Error count, bytes 7:0: unique, incrementing from 1; 0 marks an empty entry.
    pub error_count: u64,
    /// SQID, bytes 9:8; FFFFh when the error is not tied to a command.
    pub submission_queue_id: QueueId,
    /// CID, bytes 11:10; FFFFh when the error is not tied to a command.
    pub command_id: CommandId,
    /// Status field, bytes 13:12: the CQE status in bits 15:1, phase tag in bit 0.
    pub status_field: u16,
    /// Parameter error location, bytes 15:14: byte in the command (bits 7:0) and bit
    /// (bits 10:8); FFFFh when not applicable.
    pub parameter_error_location: u16,
    /// LBA, bytes 23:16: first LBA that saw the error.
    pub lba: u64,
    /// Namespace, bytes 27:24.
    pub namespace_id: NamespaceId,
    /// Vendor specific information available, byte 28: a log page ID or 0.
    pub vendor_specific_information: u8,
    /// TRTYPE, byte 29: transport type for transport errors, else 0.
    pub transport_type: u8,
    /// CSI, byte 30: command set of the failed command.
    pub command_set_identifier: u8,
    /// OPC, byte 31: opcode of the failed command.
    pub opcode: u8,
    /// Command specific information, bytes 39:32.
    pub command_specific_information: u64,
    /// Transport type specific information, bytes 41:40.
    pub transport_type_specific_information: u16,
    /// Log page version, byte 63: 1 when CSI and OPC are valid.
    pub log_page_version: u8,
}

impl ErrorInformationEntry {
    /// SQID, CID and parameter error location value meaning "not applicable".
    pub const NOT_APPLICABLE: u16 = 0xFFFF;

    /// Decodes 64 bytes.
    pub fn decode(raw: &[u8; ERROR_INFORMATION_ENTRY_BYTES]) -> Self {
        Self {
            error_count: get_u64(raw, 0),
            submission_queue_id: QueueId(get_u16(raw, 8)),
            command_id: CommandId(get_u16(raw, 10)),
            status_field: get_u16(raw, 12),
            parameter_error_location: get_u16(raw, 14),
            lba: get_u64(raw, 16),
            namespace_id: NamespaceId(get_u32(raw, 24)),
            vendor_specific_information: raw[28],
            transport_type: raw[29],
            command_set_identifier: raw[30],
            opcode: raw[31],
            command_specific_information: get_u64(raw, 32),
            transport_type_specific_information: get_u16(raw, 40),
            log_page_version: raw[63],
        }
    }

    /// Encodes into 64 bytes, reserved bytes zero.
    pub fn encode(&self, out: &mut [u8; ERROR_INFORMATION_ENTRY_BYTES]) {
        out.fill(0);
        put_u64(out, 0, self.error_count);
        put_u16(out, 8, self.submission_queue_id.0);
        put_u16(out, 10, self.command_id.0);
        put_u16(out, 12, self.status_field);
        put_u16(out, 14, self.parameter_error_location);
        put_u64(out, 16, self.lba);
        put_u32(out, 24, self.namespace_id.0);
        out[28] = self.vendor_specific_information;
        out[29] = self.transport_type;
        out[30] = self.command_set_identifier;
        out[31] = self.opcode;
        put_u64(out, 32, self.command_specific_information);
        put_u16(out, 40, self.transport_type_specific_information);
        out[63] = self.log_page_version;
    }

    /// The status in the status field (bits 15:1).
    pub fn status(&self) -> Status {
        Status::from_field(self.status_field >> 1)
    }

    /// Stores `status` in bits 15:1 of the status field, keeping the phase bit.
    pub fn set_status(&mut self, status: Status) {
        self.status_field = (status.field() << 1) | (self.status_field & 1);
    }

    /// A parameter error location for `byte` (0..=63) and `bit` (0..=7) of the SQE.
    pub fn parameter_location(byte: u8, bit: u8) -> u16 {
        u16::from(byte) | (u16::from(bit & 0b111) << 8)
    }
}

/// Critical warning bits of the SMART / Health log (byte 0).
pub mod critical_warning {
    /// Available spare below threshold.
    pub const AVAILABLE_SPARE: u8 = 1 << 0;
    /// Temperature beyond a threshold.
    pub const TEMPERATURE: u8 = 1 << 1;
    /// Reliability degraded by media or internal errors.
    pub const RELIABILITY_DEGRADED: u8 = 1 << 2;
    /// Media placed in read-only mode.
    pub const READ_ONLY: u8 = 1 << 3;
    /// Volatile memory backup device failed.
    pub const VOLATILE_MEMORY_BACKUP_FAILED: u8 = 1 << 4;
    /// Persistent memory region read-only or unreliable.
    pub const PERSISTENT_MEMORY_READ_ONLY: u8 = 1 << 5;
}

/// Bytes in one "data unit" of Data Units Read/Written: 1000 units of 512 bytes.
const DATA_UNIT_BYTES: u128 = 1000 * 512;

/// Converts a byte count to the Data Units Read/Written value: thousands of 512-byte
/// units, rounded up (1 means 1..=1000 units, i.e. 1..=512000 bytes; 0 means none).
pub fn data_units_from_bytes(bytes: u128) -> u128 {
    bytes.div_ceil(DATA_UNIT_BYTES)
}

/// SMART / Health Information log (log 02h), 512 bytes. Counters are 128-bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmartHealthLog {
    /// Critical warning, byte 0 ([`critical_warning`]).
    pub critical_warning: u8,
    /// Composite temperature in kelvin, bytes 2:1.
    pub composite_temperature_kelvin: u16,
    /// Available spare, byte 3, percent.
    pub available_spare: u8,
    /// Available spare threshold, byte 4, percent.
    pub available_spare_threshold: u8,
    /// Percentage used, byte 5 (may exceed 100; 255 means 255 or more).
    pub percentage_used: u8,
    /// Endurance group critical warning summary, byte 6.
    pub endurance_group_critical_warning: u8,
    /// Data units read, bytes 47:32 (see [`data_units_from_bytes`]).
    pub data_units_read: u128,
    /// Data units written, bytes 63:48.
    pub data_units_written: u128,
    /// Host read commands completed, bytes 79:64.
    pub host_read_commands: u128,
    /// Host write commands completed, bytes 95:80.
    pub host_write_commands: u128,
    /// Controller busy time in minutes, bytes 111:96.
    pub controller_busy_time_minutes: u128,
    /// Power cycles, bytes 127:112.
    pub power_cycles: u128,
    /// Power-on hours, bytes 143:128.
    pub power_on_hours: u128,
    /// Unsafe shutdowns, bytes 159:144.
    pub unsafe_shutdowns: u128,
    /// Media and data integrity errors, bytes 175:160.
    pub media_errors: u128,
    /// Number of error information log entries over the controller's life, bytes
    /// 191:176.
    pub error_log_entries: u128,
    /// Warning composite temperature time in minutes, bytes 195:192.
    pub warning_temperature_time_minutes: u32,
    /// Critical composite temperature time in minutes, bytes 199:196.
    pub critical_temperature_time_minutes: u32,
    /// Temperature sensors 1..8 in kelvin, bytes 215:200; 0 means not implemented.
    pub temperature_sensors: [u16; 8],
    /// Thermal management temperature 1 and 2 transition counts, bytes 223:216.
    pub thermal_transition_counts: [u32; 2],
    /// Total time in seconds at thermal management temperature 1 and 2, bytes
    /// 231:224.
    pub thermal_total_time_seconds: [u32; 2],
}

impl SmartHealthLog {
    /// Decodes 512 bytes.
    pub fn decode(raw: &[u8; SMART_HEALTH_LOG_BYTES]) -> Self {
        let mut temperature_sensors = [0u16; 8];
        for (index, sensor) in temperature_sensors.iter_mut().enumerate() {
            *sensor = get_u16(raw, 200 + index * 2);
        }
        Self {
            critical_warning: raw[0],
            composite_temperature_kelvin: get_u16(raw, 1),
            available_spare: raw[3],
            available_spare_threshold: raw[4],
            percentage_used: raw[5],
            endurance_group_critical_warning: raw[6],
            data_units_read: get_u128(raw, 32),
            data_units_written: get_u128(raw, 48),
            host_read_commands: get_u128(raw, 64),
            host_write_commands: get_u128(raw, 80),
            controller_busy_time_minutes: get_u128(raw, 96),
            power_cycles: get_u128(raw, 112),
            power_on_hours: get_u128(raw, 128),
            unsafe_shutdowns: get_u128(raw, 144),
            media_errors: get_u128(raw, 160),
            error_log_entries: get_u128(raw, 176),
            warning_temperature_time_minutes: get_u32(raw, 192),
            critical_temperature_time_minutes: get_u32(raw, 196),
            temperature_sensors,
            thermal_transition_counts: [get_u32(raw, 216), get_u32(raw, 220)],
            thermal_total_time_seconds: [get_u32(raw, 224), get_u32(raw, 228)],
        }
    }

    /// Encodes into 512 bytes, reserved bytes zero.
    pub fn encode(&self, out: &mut [u8; SMART_HEALTH_LOG_BYTES]) {
        out.fill(0);
        out[0] = self.critical_warning;
        put_u16(out, 1, self.composite_temperature_kelvin);
        out[3] = self.available_spare;
        out[4] = self.available_spare_threshold;
        out[5] = self.percentage_used;
        out[6] = self.endurance_group_critical_warning;
        put_u128(out, 32, self.data_units_read);
        put_u128(out, 48, self.data_units_written);
        put_u128(out, 64, self.host_read_commands);
        put_u128(out, 80, self.host_write_commands);
        put_u128(out, 96, self.controller_busy_time_minutes);
        put_u128(out, 112, self.power_cycles);
        put_u128(out, 128, self.power_on_hours);
        put_u128(out, 144, self.unsafe_shutdowns);
        put_u128(out, 160, self.media_errors);
        put_u128(out, 176, self.error_log_entries);
        put_u32(out, 192, self.warning_temperature_time_minutes);
        put_u32(out, 196, self.critical_temperature_time_minutes);
        for (index, sensor) in self.temperature_sensors.iter().enumerate() {
            put_u16(out, 200 + index * 2, *sensor);
        }
        put_u32(out, 216, self.thermal_transition_counts[0]);
        put_u32(out, 220, self.thermal_transition_counts[1]);
        put_u32(out, 224, self.thermal_total_time_seconds[0]);
        put_u32(out, 228, self.thermal_total_time_seconds[1]);
    }
}

/// Firmware Slot Information log (log 03h), 512 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FirmwareSlotLog {
    /// AFI: active firmware info, byte 0: bits 2:0 the active slot, bits 6:4 the
    /// slot activated at the next reset (0 = none).
    pub active_firmware_info: u8,
    /// FRS1..FRS7: firmware revision per slot, bytes 63:8, 8 ASCII bytes each; all
    /// zero for an empty slot.
    pub revisions: [[u8; 8]; 7],
}

impl FirmwareSlotLog {
    /// Decodes 512 bytes.
    pub fn decode(raw: &[u8; FIRMWARE_SLOT_LOG_BYTES]) -> Self {
        let mut revisions = [[0u8; 8]; 7];
        for (index, revision) in revisions.iter_mut().enumerate() {
            *revision = get_array(raw, 8 + index * 8);
        }
        Self { active_firmware_info: raw[0] & 0b0111_0111, revisions }
    }

    /// Encodes into 512 bytes, reserved bytes zero.
    pub fn encode(&self, out: &mut [u8; FIRMWARE_SLOT_LOG_BYTES]) {
        out.fill(0);
        out[0] = self.active_firmware_info & 0b0111_0111;
        // FRS1 starts at byte 8: the second 8-byte chunk.
        for (revision, slot) in self.revisions.iter().zip(out.chunks_exact_mut(8).skip(1)) {
            slot.copy_from_slice(revision);
        }
    }

    /// Sets the revision of `slot` (1..=7), space padded like Identify FR; slots out
    /// of range are ignored.
    pub fn set_revision(&mut self, slot: usize, text: &str) {
        if let Some(revision) = slot.checked_sub(1).and_then(|index| self.revisions.get_mut(index)) {
            crate::bytes::put_ascii_padded(revision, text);
        }
    }
}

/// Bits of a Commands Supported and Effects entry.
pub mod command_effects {
    /// CSUPP: the command is supported.
    pub const COMMAND_SUPPORTED: u32 = 1 << 0;
    /// LBCC: the command may change logical block content.
    pub const LOGICAL_BLOCK_CONTENT_CHANGE: u32 = 1 << 1;
    /// NCC: the command may change namespace capabilities.
    pub const NAMESPACE_CAPABILITY_CHANGE: u32 = 1 << 2;
    /// NIC: the command may change the namespace inventory.
    pub const NAMESPACE_INVENTORY_CHANGE: u32 = 1 << 3;
    /// CCC: the command may change controller capabilities.
    pub const CONTROLLER_CAPABILITY_CHANGE: u32 = 1 << 4;
    /// CSE: command submission and execution, bits 18:16.
    pub const SUBMISSION_AND_EXECUTION_SHIFT: u32 = 16;
    /// Mask of CSE after shifting.
    pub const SUBMISSION_AND_EXECUTION_MASK: u32 = 0b111;
    /// CSE 000b: no restriction.
    pub const CSE_NO_RESTRICTION: u32 = 0b000 << 16;
    /// CSE 001b: submit only when no other command to the same namespace is
    /// outstanding, and hold others until it completes.
    pub const CSE_SINGLE_NAMESPACE: u32 = 0b001 << 16;
    /// CSE 010b: the same, for any namespace.
    pub const CSE_SINGLE_COMMAND: u32 = 0b010 << 16;
    /// UUID selection supported, bit 19.
    pub const UUID_SELECTION_SUPPORTED: u32 = 1 << 19;
}

/// Commands Supported and Effects log (log 05h), 4096 bytes: one dword per admin
/// opcode, then one per I/O opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandsSupportedAndEffects {
    /// ACS0..ACS255: admin command entries, bytes 1023:0, indexed by opcode.
    pub admin: [u32; 256],
    /// IOCS0..IOCS255: I/O command entries, bytes 2047:1024, indexed by opcode.
    pub io: [u32; 256],
}

impl Default for CommandsSupportedAndEffects {
    fn default() -> Self {
        Self { admin: [0; 256], io: [0; 256] }
    }
}

impl CommandsSupportedAndEffects {
    /// Decodes 4096 bytes.
    pub fn decode(raw: &[u8; COMMANDS_SUPPORTED_AND_EFFECTS_BYTES]) -> Self {
        let mut log = Self::default();
        // ACS0..ACS255 then IOCS0..IOCS255 are the first 512 dwords.
        let entries = log.admin.iter_mut().chain(log.io.iter_mut());
        for (entry, bytes) in entries.zip(raw.chunks_exact(4)) {
            *entry = get_u32(bytes, 0);
        }
        log
    }

    /// Encodes into 4096 bytes, bytes 4095:2048 reserved (zero).
    pub fn encode(&self, out: &mut [u8; COMMANDS_SUPPORTED_AND_EFFECTS_BYTES]) {
        out.fill(0);
        // ACS0..ACS255 then IOCS0..IOCS255 are the first 512 dwords.
        let entries = self.admin.iter().chain(&self.io);
        for (entry, bytes) in entries.zip(out.chunks_exact_mut(4)) {
            put_u32(bytes, 0, *entry);
        }
    }
}

/// Encodes the Changed Namespace List (log 04h): up to 1024 NSIDs ascending, the rest
/// zero. If more than 1024 namespaces changed, the list is a single FFFFFFFFh entry
/// (the host must then rescan everything). Returns the number of entries written.
pub fn encode_changed_namespace_list(
    ids: impl IntoIterator<Item = NamespaceId>,
    out: &mut [u8; CHANGED_NAMESPACE_LIST_BYTES],
) -> usize {
    let mut sorted = SortedIds::<NAMESPACE_LIST_CAPACITY>::new();
    for id in ids {
        if id != NamespaceId::NONE && id != NamespaceId::BROADCAST {
            sorted.insert(id.0);
        }
    }
    out.fill(0);
    if sorted.overflowed {
        put_u32(out, 0, NamespaceId::BROADCAST.0);
        return 1;
    }
    for (index, id) in sorted.as_slice().iter().enumerate() {
        put_u32(out, index * 4, *id);
    }
    sorted.as_slice().len()
}

const _: () = assert!(CHANGED_NAMESPACE_LIST_BYTES == NAMESPACE_LIST_CAPACITY * 4);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::decode_namespace_list;
    use crate::test_support::{assert_layout_round_trip, to_array};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn error_entry_round_trips(raw in proptest::collection::vec(any::<u8>(), ERROR_INFORMATION_ENTRY_BYTES)) {
            assert_layout_round_trip(&to_array::<ERROR_INFORMATION_ENTRY_BYTES>(&raw), ErrorInformationEntry::decode, ErrorInformationEntry::encode);
        }

        #[test]
        fn smart_log_round_trips(raw in proptest::collection::vec(any::<u8>(), SMART_HEALTH_LOG_BYTES)) {
            assert_layout_round_trip(&to_array::<SMART_HEALTH_LOG_BYTES>(&raw), SmartHealthLog::decode, SmartHealthLog::encode);
        }

        #[test]
        fn firmware_log_round_trips(raw in proptest::collection::vec(any::<u8>(), FIRMWARE_SLOT_LOG_BYTES)) {
            assert_layout_round_trip(&to_array::<FIRMWARE_SLOT_LOG_BYTES>(&raw), FirmwareSlotLog::decode, FirmwareSlotLog::encode);
        }

        #[test]
        fn effects_log_round_trips(raw in proptest::collection::vec(any::<u8>(), COMMANDS_SUPPORTED_AND_EFFECTS_BYTES)) {
            assert_layout_round_trip(&to_array::<COMMANDS_SUPPORTED_AND_EFFECTS_BYTES>(&raw), CommandsSupportedAndEffects::decode, CommandsSupportedAndEffects::encode);
        }

        #[test]
        fn get_log_page_round_trips(
            namespace in any::<u32>(), lid in any::<u8>(), lsp in 0u8..0x80, rae in any::<bool>(),
            numd in any::<u32>(), lsi in any::<u16>(), offset in any::<u64>(), uuid in 0u8..0x80,
            ot in any::<bool>(), csi in any::<u8>(),
        ) {
            let command = GetLogPageCommand {
                namespace_id: NamespaceId(namespace), log_page_id: lid, log_specific_field: lsp,
                retain_asynchronous_event: rae, dword_count: u64::from(numd) + 1,
                log_specific_identifier: lsi, offset, uuid_index: uuid, offset_type: ot,
                command_set_identifier: csi,
            };
            let mut sqe = SubmissionQueueEntry::default();
            command.encode_into(&mut sqe);
            prop_assert_eq!(GetLogPageCommand::decode(&sqe), command);
        }

        #[test]
        fn copy_range_matches_slicing(page in proptest::collection::vec(any::<u8>(), 0..300), offset in 0u64..400, len in 0usize..400) {
            let mut out = vec![0xAAu8; len];
            let copied = copy_log_page_range(&page, offset, &mut out);
            let start = (offset as usize).min(page.len());
            let expected: Vec<u8> = page[start..].iter().copied().chain(core::iter::repeat(0)).take(len).collect();
            prop_assert_eq!(copied, (page.len() - start).min(len));
            prop_assert_eq!(out, expected);
        }
    }

    #[test]
    fn data_units_round_up_to_thousands_of_sectors() {
        assert_eq!(data_units_from_bytes(0), 0);
        assert_eq!(data_units_from_bytes(1), 1);
        assert_eq!(data_units_from_bytes(512), 1);
        assert_eq!(data_units_from_bytes(512_000), 1);
        assert_eq!(data_units_from_bytes(512_001), 2);
        // The spec's example: 2001..=3000 units of 512 bytes report as 3.
        assert_eq!(data_units_from_bytes(2001 * 512), 3);
        assert_eq!(data_units_from_bytes(3000 * 512), 3);
        assert_eq!(data_units_from_bytes(u128::MAX), u128::MAX / 512_000 + 1);
    }

    #[test]
    fn get_log_page_fields_sit_in_the_spec_bits() {
        let mut sqe = SubmissionQueueEntry::default();
        sqe.dwords[1] = 0xFFFF_FFFF;
        sqe.dwords[10] = 0x0003_8170; // NUMDL 3, RAE, LSP 1, LID 70h
        sqe.dwords[11] = 0xABCD_0001; // LSI ABCDh, NUMDU 1
        sqe.dwords[12] = 0x400;
        sqe.dwords[13] = 1;
        sqe.dwords[14] = 0x0280_0005; // CSI 2, OT, UUID 5
        let command = GetLogPageCommand::decode(&sqe);
        assert_eq!(command.namespace_id, NamespaceId::BROADCAST);
        assert_eq!(command.log_page_id, log_id::DISCOVERY);
        assert_eq!(command.log_specific_field, 1);
        assert!(command.retain_asynchronous_event);
        assert_eq!(command.dword_count, 0x1_0003 + 1);
        assert_eq!(command.length_bytes(), (0x1_0003 + 1) * 4);
        assert_eq!(command.log_specific_identifier, 0xABCD);
        assert_eq!(command.offset, 0x1_0000_0400);
        assert_eq!(command.uuid_index, 5);
        assert!(command.offset_type);
        assert_eq!(command.command_set_identifier, 2);
        let largest = GetLogPageCommand { dword_count: 1 << 32, ..Default::default() };
        let mut sqe = SubmissionQueueEntry::default();
        largest.encode_into(&mut sqe);
        assert_eq!((sqe.dwords[10] >> 16, sqe.dwords[11] & 0xFFFF), (0xFFFF, 0xFFFF));
    }

    #[test]
    fn log_fields_sit_at_the_spec_offsets() {
        let mut entry = ErrorInformationEntry {
            error_count: 2,
            submission_queue_id: QueueId(1),
            command_id: CommandId(0x0A0B),
            parameter_error_location: ErrorInformationEntry::parameter_location(44, 3),
            lba: 9,
            namespace_id: NamespaceId(4),
            transport_type: 3,
            command_specific_information: 0x77,
            transport_type_specific_information: 0x55,
            log_page_version: 1,
            ..Default::default()
        };
        entry.set_status(Status::INVALID_FIELD.with_do_not_retry());
        let mut raw = [0u8; ERROR_INFORMATION_ENTRY_BYTES];
        entry.encode(&mut raw);
        assert_eq!(raw[0], 2);
        assert_eq!(&raw[8..12], &[1, 0, 0x0B, 0x0A]);
        assert_eq!(u16::from_le_bytes([raw[12], raw[13]]), (0x4002) << 1);
        assert_eq!(&raw[14..16], &[44, 3]);
        assert_eq!((raw[16], raw[24], raw[29], raw[32], raw[40], raw[63]), (9, 4, 3, 0x77, 0x55, 1));
        assert_eq!(ErrorInformationEntry::decode(&raw).status(), Status::INVALID_FIELD.with_do_not_retry());

        let smart = SmartHealthLog {
            critical_warning: critical_warning::READ_ONLY,
            composite_temperature_kelvin: 0x0131,
            available_spare: 100,
            data_units_read: 0x11,
            data_units_written: 0x22,
            host_read_commands: 0x33,
            host_write_commands: 0x44,
            power_on_hours: 0x55,
            error_log_entries: 0x66,
            warning_temperature_time_minutes: 0x77,
            critical_temperature_time_minutes: 0x88,
            temperature_sensors: [0x99, 0, 0, 0, 0, 0, 0, 0xAA],
            ..Default::default()
        };
        let mut raw = [0u8; SMART_HEALTH_LOG_BYTES];
        smart.encode(&mut raw);
        assert_eq!(&raw[0..4], &[8, 0x31, 0x01, 100]);
        assert_eq!((raw[32], raw[48], raw[64], raw[80], raw[128], raw[176]), (0x11, 0x22, 0x33, 0x44, 0x55, 0x66));
        assert_eq!((raw[192], raw[196], raw[200], raw[214]), (0x77, 0x88, 0x99, 0xAA));

        let mut firmware = FirmwareSlotLog { active_firmware_info: 1, ..Default::default() };
        firmware.set_revision(1, "1.0");
        firmware.set_revision(7, "7.0");
        firmware.set_revision(8, "ignored");
        let mut raw = [0u8; FIRMWARE_SLOT_LOG_BYTES];
        firmware.encode(&mut raw);
        assert_eq!(raw[0], 1);
        assert_eq!(&raw[8..16], b"1.0     ");
        assert_eq!(&raw[56..64], b"7.0     ");
        assert_eq!(raw[64], 0);

        let mut effects = CommandsSupportedAndEffects::default();
        effects.admin[0x06] = command_effects::COMMAND_SUPPORTED;
        effects.io[0x01] = command_effects::COMMAND_SUPPORTED | command_effects::LOGICAL_BLOCK_CONTENT_CHANGE;
        effects.admin[0x80] = command_effects::COMMAND_SUPPORTED | command_effects::CSE_SINGLE_COMMAND;
        let mut raw = [0u8; COMMANDS_SUPPORTED_AND_EFFECTS_BYTES];
        effects.encode(&mut raw);
        assert_eq!(raw[0x06 * 4], 1);
        assert_eq!(raw[1024 + 4], 3);
        assert_eq!(&raw[0x80 * 4..0x80 * 4 + 4], &[1, 0, 2, 0]);
    }

    #[test]
    fn changed_namespace_list_overflows_to_all_ones() {
        let mut raw = [0u8; CHANGED_NAMESPACE_LIST_BYTES];
        assert_eq!(encode_changed_namespace_list([NamespaceId(3), NamespaceId(2)], &mut raw), 2);
        assert_eq!(decode_namespace_list(&raw).collect::<Vec<_>>(), vec![NamespaceId(2), NamespaceId(3)]);
        assert_eq!(encode_changed_namespace_list((1..=1024).map(NamespaceId), &mut raw), 1024);
        assert_eq!(encode_changed_namespace_list((1..=1025).map(NamespaceId), &mut raw), 1);
        assert_eq!(&raw[0..8], &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
        assert!(raw[4..].iter().all(|&b| b == 0));
    }
}

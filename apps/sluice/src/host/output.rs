//! Text and JSON renderings in nvme-cli's style: field names, number formats, the hex
//! dump, human units and NVMe status names. Pure functions from data to strings, so
//! they are unit tested without a target.

use std::fmt::Write as _;

use nvme_spec::discovery::{
    address_family, entry_flags, subsystem_type, tcp_security_type, transport_requirements,
    DiscoveryLogEntry, TRTYPE_FC, TRTYPE_RDMA, TRTYPE_TCP,
};
use nvme_spec::identify::{IdentifyController, IdentifyNamespace, LbaFormat, PowerStateDescriptor};
use nvme_spec::log_page::SmartHealthLog;
use nvme_spec::Status;
use serde_json::{json, Map, Value};

// ---------------------------------------------------------------------------------
// Status names

/// Which command produced a status: Command Specific codes 80h..BFh mean different
/// things for Fabrics commands (Connect) and for NVM I/O commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusContext {
    /// Connect, Property Get/Set, and discovery.
    Fabrics,
    /// Admin commands.
    Admin,
    /// NVM command set I/O (Read, Write, Flush).
    Io,
}

/// The name nvme-cli (libnvme) gives a status, without its long description.
pub fn status_name(status: Status, context: StatusContext) -> &'static str {
    let code = status.code();
    match status.code_type() {
        0x0 => match code {
            0x00 => "Successful Completion",
            0x01 => "Invalid Command Opcode",
            0x02 => "Invalid Field in Command",
            0x03 => "Command ID Conflict",
            0x04 => "Data Transfer Error",
            0x05 => "Commands Aborted due to Power Loss Notification",
            0x06 => "Internal Error",
            0x07 => "Command Abort Requested",
            0x08 => "Command Aborted due to SQ Deletion",
            0x09 => "Command Aborted due to Failed Fused Command",
            0x0A => "Command Aborted due to Missing Fused Command",
            0x0B => "Invalid Namespace or Format",
            0x0C => "Command Sequence Error",
            0x0D => "Invalid SGL Segment Descriptor",
            0x0E => "Invalid Number of SGL Descriptors",
            0x0F => "Data SGL Length Invalid",
            0x10 => "Metadata SGL Length Invalid",
            0x11 => "SGL Descriptor Type Invalid",
            0x12 => "Invalid Use of Controller Memory Buffer",
            0x13 => "PRP Offset Invalid",
            0x14 => "Atomic Write Unit Exceeded",
            0x15 => "Operation Denied",
            0x16 => "SGL Offset Invalid",
            0x18 => "Host Identifier Inconsistent Format",
            0x19 => "Keep Alive Timer Expired",
            0x1A => "Keep Alive Timeout Invalid",
            0x1B => "Command Aborted due to Preempt and Abort",
            0x1C => "Sanitize Failed",
            0x1D => "Sanitize In Progress",
            0x1E => "SGL Data Block Granularity Invalid",
            0x1F => "Command Not Supported for Queue in CMB",
            0x20 => "Namespace is Write Protected",
            0x21 => "Command Interrupted",
            0x22 => "Transient Transport Error",
            0x23 => "Prohibited by Command and Feature Lockdown",
            0x24 => "Admin Command Media Not Ready",
            0x80 => "LBA Out of Range",
            0x81 => "Capacity Exceeded",
            0x82 => "Namespace Not Ready",
            0x83 => "Reservation Conflict",
            0x84 => "Format In Progress",
            _ => "Unknown Generic Status",
        },
        0x1 => match (context, code) {
            (StatusContext::Fabrics, 0x80) => "Incompatible Format",
            (StatusContext::Fabrics, 0x81) => "Controller Busy",
            (StatusContext::Fabrics, 0x82) => "Connect Invalid Parameters",
            (StatusContext::Fabrics, 0x83) => "Connect Restart Discovery",
            (StatusContext::Fabrics, 0x84) => "Connect Invalid Host",
            (StatusContext::Fabrics, 0x85) => "Invalid Queue Type",
            (StatusContext::Fabrics, 0x90) => "Discover Restart",
            (StatusContext::Fabrics, 0x91) => "Authentication Required",
            (StatusContext::Io, 0x80) => "Conflicting Attributes",
            (StatusContext::Io, 0x81) => "Invalid Protection Information",
            (StatusContext::Io, 0x82) => "Attempted Write to Read Only Range",
            (StatusContext::Io, 0x83) => "Command Size Limit Exceeded",
            (_, 0x00) => "Completion Queue Invalid",
            (_, 0x01) => "Invalid Queue Identifier",
            (_, 0x02) => "Invalid Queue Size",
            (_, 0x03) => "Abort Command Limit Exceeded",
            (_, 0x05) => "Asynchronous Event Request Limit Exceeded",
            (_, 0x06) => "Invalid Firmware Slot",
            (_, 0x07) => "Invalid Firmware Image",
            (_, 0x08) => "Invalid Interrupt Vector",
            (_, 0x09) => "Invalid Log Page",
            (_, 0x0A) => "Invalid Format",
            (_, 0x0B) => "Firmware Activation Requires Conventional Reset",
            (_, 0x0C) => "Invalid Queue Deletion",
            (_, 0x0D) => "Feature Identifier Not Saveable",
            (_, 0x0E) => "Feature Not Changeable",
            (_, 0x0F) => "Feature Not Namespace Specific",
            (_, 0x10) => "Firmware Activation Requires NVM Subsystem Reset",
            (_, 0x11) => "Firmware Activation Requires Controller Level Reset",
            (_, 0x12) => "Firmware Activation Requires Maximum Time Violation",
            (_, 0x13) => "Firmware Activation Prohibited",
            (_, 0x14) => "Overlapping Range",
            (_, 0x15) => "Namespace Insufficient Capacity",
            (_, 0x16) => "Namespace Identifier Unavailable",
            (_, 0x18) => "Namespace Already Attached",
            (_, 0x19) => "Namespace Is Private",
            (_, 0x1A) => "Namespace Not Attached",
            (_, 0x1B) => "Thin Provisioning Not Supported",
            (_, 0x1C) => "Controller List Invalid",
            _ => "Unknown Command Specific Status",
        },
        0x2 => match code {
            0x80 => "Write Fault",
            0x81 => "Unrecovered Read Error",
            0x82 => "End-to-end Guard Check Error",
            0x83 => "End-to-end Application Tag Check Error",
            0x84 => "End-to-end Reference Tag Check Error",
            0x85 => "Compare Failure",
            0x86 => "Access Denied",
            0x87 => "Deallocated or Unwritten Logical Block",
            _ => "Unknown Media Error",
        },
        0x3 => match code {
            0x00 => "Internal Path Error",
            0x01 => "Asymmetric Access Persistent Loss",
            0x02 => "Asymmetric Access Inaccessible",
            0x03 => "Asymmetric Access Transition",
            0x60 => "Controller Pathing Error",
            0x70 => "Host Pathing Error",
            0x71 => "Command Aborted By Host",
            _ => "Unknown Path Related Status",
        },
        0x7 => "Vendor Specific Status",
        _ => "Unknown Status",
    }
}

/// "LBA Out of Range (SCT 0x0 SC 0x80, DNR)".
pub fn describe_status(status: Status, context: StatusContext) -> String {
    let mut text = format!(
        "{} (SCT {:#x} SC {:#04x}",
        status_name(status, context),
        status.code_type(),
        status.code()
    );
    if status.do_not_retry() {
        text.push_str(", DNR");
    }
    if status.field() & (1 << 13) != 0 {
        text.push_str(", MORE");
    }
    text.push(')');
    text
}

// ---------------------------------------------------------------------------------
// Numbers and units

/// C's `%#0*x` as nvme-cli prints feature values: `0x` and `width - 2` digits, except
/// that zero has no prefix (`%#08x` of 0 is "00000000").
pub fn c_alt_hex(value: u64, width_nonzero: usize, width_zero: usize) -> String {
    if value == 0 {
        "0".repeat(width_zero)
    } else {
        format!("{value:#0width_nonzero$x}")
    }
}

/// A value in SI units like nvme-cli's usage column: (value, "k"/"M"/"G"/"T"/"P"/"").
pub fn si_units(value: f64) -> (f64, &'static str) {
    let mut value = value;
    for suffix in ["", "k", "M", "G", "T", "P"] {
        if value < 1000.0 || suffix == "P" {
            return (value, suffix);
        }
        value /= 1000.0;
    }
    (value, "E")
}

/// A value in binary units: (value, "Ki"/"Mi"/"Gi"/"Ti"/"").
pub fn binary_units(value: f64) -> (f64, &'static str) {
    let mut value = value;
    for suffix in ["", "Ki", "Mi", "Gi", "Ti"] {
        if value < 1024.0 || suffix == "Ti" {
            return (value, suffix);
        }
        value /= 1024.0;
    }
    (value, "Pi")
}

/// "1.14 GB" for a byte count.
pub fn si_bytes(bytes: u128) -> String {
    let (value, suffix) = si_units(bytes as f64);
    format!("{value:.2} {suffix}B")
}

/// A u128 as a JSON number when it fits in u64, else as a decimal string.
pub fn json_u128(value: u128) -> Value {
    match u64::try_from(value) {
        Ok(small) => Value::from(small),
        Err(_) => Value::from(value.to_string()),
    }
}

/// ASCII field text with trailing spaces and NULs removed; other bytes as '.'.
pub fn ascii_field(bytes: &[u8]) -> String {
    let text: String = bytes
        .iter()
        .map(|&byte| if (0x20..0x7F).contains(&byte) { byte as char } else if byte == 0 { ' ' } else { '.' })
        .collect();
    text.trim_end().to_string()
}

/// Lowercase hex of the bytes, no separators.
pub fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

fn uuid_string(bytes: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*bytes).hyphenated().to_string()
}

// ---------------------------------------------------------------------------------
// Hex dump

/// nvme-cli's hex dump (`d()`): a header of column numbers, then 16 bytes a line with
/// the offset and the printable characters.
pub fn hex_dump(bytes: &[u8]) -> String {
    const WIDTH: usize = 16;
    let mut out = String::from("     ");
    for column in 0..WIDTH {
        let _ = write!(out, "{column:3x}");
    }
    for (line, chunk) in bytes.chunks(WIDTH).enumerate() {
        let _ = write!(out, "\n{:04x}:", line * WIDTH);
        for byte in chunk {
            let _ = write!(out, " {byte:02x}");
        }
        let ascii: String =
            chunk.iter().map(|&byte| if (b'!'..=b'~').contains(&byte) { byte as char } else { '.' }).collect();
        let pad = (WIDTH - chunk.len()) * 3;
        let _ = write!(out, "{:pad$} \"{ascii}\"", "");
    }
    out.push('\n');
    out
}

// ---------------------------------------------------------------------------------
// Field tables shared by the text and JSON renderings

/// One printed field: nvme-cli prints hex values with `%#x`, counts in decimal.
enum FieldValue {
    Hex(u64),
    Dec(u128),
    Text(String),
}

struct Field {
    name: &'static str,
    value: FieldValue,
    /// Bit-field decode lines for -H.
    decode: Vec<String>,
}

fn hex(name: &'static str, value: impl Into<u64>) -> Field {
    Field { name, value: FieldValue::Hex(value.into()), decode: Vec::new() }
}

fn dec(name: &'static str, value: impl Into<u128>) -> Field {
    Field { name, value: FieldValue::Dec(value.into()), decode: Vec::new() }
}

fn text(name: &'static str, value: impl Into<String>) -> Field {
    Field { name, value: FieldValue::Text(value.into()), decode: Vec::new() }
}

impl Field {
    fn with(mut self, decode: Vec<String>) -> Self {
        self.decode = decode;
        self
    }

    fn render(&self) -> String {
        match &self.value {
            FieldValue::Hex(value) => format!("{value:#x}"),
            FieldValue::Dec(value) => value.to_string(),
            FieldValue::Text(value) => value.clone(),
        }
    }

    fn json(&self) -> Value {
        match &self.value {
            FieldValue::Hex(value) => Value::from(*value),
            FieldValue::Dec(value) => json_u128(*value),
            FieldValue::Text(value) => Value::from(value.as_str()),
        }
    }
}

fn render_fields(out: &mut String, fields: &[Field], width: usize, human: bool) {
    for field in fields {
        let _ = writeln!(out, "{:<width$}: {}", field.name, field.render());
        if human && !field.decode.is_empty() {
            for line in &field.decode {
                let _ = writeln!(out, "{line}");
            }
            out.push('\n');
        }
    }
}

fn fields_json(fields: &[Field]) -> Map<String, Value> {
    fields.iter().map(|field| (field.name.to_string(), field.json())).collect()
}

/// One bit field to decode: high bit, low bit, text for the field's value.
type BitField<'a> = (u32, u32, &'a dyn Fn(u64) -> String);

/// `  [hi:lo] : value\ttext` decode lines.
fn decode_bits(value: u64, bits: &[BitField<'_>]) -> Vec<String> {
    bits.iter()
        .map(|(high, low, describe)| {
            let width = high - low + 1;
            let field = (value >> low) & ((1u64 << width) - 1);
            format!("  [{high}:{low}] : {field:#x}\t{}", describe(field))
        })
        .collect()
}

fn supported(bit: u64) -> String {
    if bit != 0 { "Supported" } else { "Not Supported" }.to_string()
}

// ---------------------------------------------------------------------------------
// Identify Controller

fn id_ctrl_fields(id: &IdentifyController) -> Vec<Field> {
    let ieee = u64::from(id.ieee_oui_identifier[2]) << 16
        | u64::from(id.ieee_oui_identifier[1]) << 8
        | u64::from(id.ieee_oui_identifier[0]);
    vec![
        hex("vid", id.pci_vendor_id),
        hex("ssvid", id.pci_subsystem_vendor_id),
        text("sn", ascii_field(&id.serial_number)),
        text("mn", ascii_field(&id.model_number)),
        text("fr", ascii_field(&id.firmware_revision)),
        dec("rab", id.recommended_arbitration_burst),
        Field { name: "ieee", value: FieldValue::Text(format!("{ieee:06x}")), decode: Vec::new() },
        hex("cmic", id.multipath_capabilities).with(decode_bits(
            id.multipath_capabilities.into(),
            &[
                (3, 3, &|v| if v != 0 { "ANA supported" } else { "ANA not supported" }.into()),
                (2, 2, &|v| if v != 0 { "SR-IOV" } else { "PCI" }.into()),
                (1, 1, &|v| if v != 0 { "Multi Controller" } else { "Single Controller" }.into()),
                (0, 0, &|v| if v != 0 { "Multi Port" } else { "Single Port" }.into()),
            ],
        )),
        dec("mdts", id.maximum_data_transfer_size),
        hex("cntlid", id.controller_id.0),
        hex("ver", id.version.raw()).with(vec![format!(
            "  NVMe version {}.{}.{}",
            id.version.major(),
            id.version.minor(),
            id.version.tertiary()
        )]),
        hex("rtd3r", id.rtd3_resume_latency_us),
        hex("rtd3e", id.rtd3_entry_latency_us),
        hex("oaes", id.optional_async_events_supported).with(decode_bits(
            id.optional_async_events_supported.into(),
            &[
                (31, 31, &|v| format!("Discovery Log Change Notice {}", supported(v))),
                (11, 11, &|v| format!("ANA Change Notices {}", supported(v))),
                (9, 9, &|v| format!("Firmware Activation Notices {}", supported(v))),
                (8, 8, &|v| format!("Namespace Attribute Changed Event {}", supported(v))),
            ],
        )),
        hex("ctratt", id.controller_attributes).with(decode_bits(
            id.controller_attributes.into(),
            &[
                (6, 6, &|v| format!("Traffic Based Keep Alive {}", supported(v))),
                (0, 0, &|v| format!("128-bit Host Identifier {}", supported(v))),
            ],
        )),
        hex("rrls", id.read_recovery_levels_supported),
        dec("cntrltype", id.controller_type).with(vec![format!(
            "  {}",
            match id.controller_type {
                1 => "I/O Controller",
                2 => "Discovery Controller",
                3 => "Administrative Controller",
                _ => "Controller type not reported",
            }
        )]),
        text("fguid", uuid_string(&id.fru_globally_unique_identifier)),
        dec("crdt1", id.command_retry_delay_times[0]),
        dec("crdt2", id.command_retry_delay_times[1]),
        dec("crdt3", id.command_retry_delay_times[2]),
        hex("oacs", id.optional_admin_command_support).with(decode_bits(
            id.optional_admin_command_support.into(),
            &[
                (10, 10, &|v| format!("Lockdown Command and Feature {}", supported(v))),
                (9, 9, &|v| format!("Get LBA Status Capability {}", supported(v))),
                (8, 8, &|v| format!("Doorbell Buffer Config {}", supported(v))),
                (7, 7, &|v| format!("Virtualization Management {}", supported(v))),
                (6, 6, &|v| format!("NVMe-MI Send and Receive {}", supported(v))),
                (5, 5, &|v| format!("Directives {}", supported(v))),
                (4, 4, &|v| format!("Device Self-test {}", supported(v))),
                (3, 3, &|v| format!("NS Management and Attachment {}", supported(v))),
                (2, 2, &|v| format!("FW Commit and Download {}", supported(v))),
                (1, 1, &|v| format!("Format NVM {}", supported(v))),
                (0, 0, &|v| format!("Security Send and Receive {}", supported(v))),
            ],
        )),
        dec("acl", id.abort_command_limit),
        dec("aerl", id.async_event_request_limit),
        hex("frmw", id.firmware_updates).with(decode_bits(
            id.firmware_updates.into(),
            &[
                (4, 4, &|v| format!("Firmware Activate Without Reset {}", supported(v))),
                (3, 1, &|v| format!("Number of Firmware Slots: {v}")),
                (0, 0, &|v| if v != 0 { "Firmware Slot 1 Read-Only" } else { "Firmware Slot 1 Read/Write" }.into()),
            ],
        )),
        hex("lpa", id.log_page_attributes).with(decode_bits(
            id.log_page_attributes.into(),
            &[
                (6, 6, &|v| format!("Telemetry Log Data Area 4 {}", supported(v))),
                (5, 5, &|v| format!("LID 0x0, Scope of each command in LID 0x5, 0x12, 0x13 {}", supported(v))),
                (4, 4, &|v| format!("Persistent Event log {}", supported(v))),
                (3, 3, &|v| format!("Telemetry host/controller initiated log page {}", supported(v))),
                (2, 2, &|v| format!("Extended data for Get Log Page {}", supported(v))),
                (1, 1, &|v| format!("Command Effects Log Page {}", supported(v))),
                (0, 0, &|v| format!("SMART/Health Log Page per NS {}", supported(v))),
            ],
        )),
        dec("elpe", id.error_log_page_entries),
        dec("npss", id.number_of_power_states),
        hex("avscc", id.admin_vendor_specific_command_configuration),
        hex("apsta", id.autonomous_power_state_transition_attributes),
        dec("wctemp", id.warning_composite_temperature_threshold)
            .with(vec![format!("  {}", kelvin_text(id.warning_composite_temperature_threshold))]),
        dec("cctemp", id.critical_composite_temperature_threshold)
            .with(vec![format!("  {}", kelvin_text(id.critical_composite_temperature_threshold))]),
        dec("tnvmcap", id.total_nvm_capacity),
        dec("unvmcap", id.unallocated_nvm_capacity),
        dec("kas", id.keep_alive_support)
            .with(vec![format!("  Keep Alive granularity: {} ms", u32::from(id.keep_alive_support) * 100)]),
        dec("anatt", id.ana_transition_time),
        dec("anacap", id.ana_capabilities),
        dec("anagrpmax", id.ana_group_identifier_maximum),
        dec("nanagrpid", id.number_of_ana_group_identifiers),
        hex("sqes", id.submission_queue_entry_size).with(decode_bits(
            id.submission_queue_entry_size.into(),
            &[
                (7, 4, &|v| format!("Max SQ Entry Size ({})", 1u64 << v)),
                (3, 0, &|v| format!("Min SQ Entry Size ({})", 1u64 << v)),
            ],
        )),
        hex("cqes", id.completion_queue_entry_size).with(decode_bits(
            id.completion_queue_entry_size.into(),
            &[
                (7, 4, &|v| format!("Max CQ Entry Size ({})", 1u64 << v)),
                (3, 0, &|v| format!("Min CQ Entry Size ({})", 1u64 << v)),
            ],
        )),
        dec("maxcmd", id.maximum_outstanding_commands),
        dec("nn", id.number_of_namespaces),
        hex("oncs", id.optional_nvm_command_support).with(decode_bits(
            id.optional_nvm_command_support.into(),
            &[
                (8, 8, &|v| format!("Copy {}", supported(v))),
                (7, 7, &|v| format!("Verify {}", supported(v))),
                (6, 6, &|v| format!("Timestamp {}", supported(v))),
                (5, 5, &|v| format!("Reservations {}", supported(v))),
                (4, 4, &|v| format!("Save and Select {}", supported(v))),
                (3, 3, &|v| format!("Write Zeroes {}", supported(v))),
                (2, 2, &|v| format!("Data Set Management {}", supported(v))),
                (1, 1, &|v| format!("Write Uncorrectable {}", supported(v))),
                (0, 0, &|v| format!("Compare {}", supported(v))),
            ],
        )),
        hex("fuses", id.fused_operation_support),
        hex("fna", id.format_nvm_attributes),
        hex("vwc", id.volatile_write_cache).with(decode_bits(
            id.volatile_write_cache.into(),
            &[
                (2, 1, &|v| {
                    match v {
                        0b10 => "Flush command does not support NSID set to FFFFFFFFh",
                        0b11 => "Flush command supports NSID set to FFFFFFFFh",
                        _ => "Support for the NSID field set to FFFFFFFFh is not indicated",
                    }
                    .into()
                }),
                (0, 0, &|v| if v != 0 { "Volatile Write Cache Present" } else { "Volatile Write Cache Not Present" }.into()),
            ],
        )),
        dec("awun", id.atomic_write_unit_normal),
        dec("awupf", id.atomic_write_unit_power_fail),
        dec("icsvscc", id.io_vendor_specific_command_configuration),
        dec("nwpc", id.namespace_write_protection_capabilities),
        dec("acwu", id.atomic_compare_and_write_unit),
        hex("ocfs", id.optional_copy_formats_supported),
        hex("sgls", id.sgl_support).with(decode_bits(
            id.sgl_support.into(),
            &[
                (21, 21, &|v| format!("Transport SGL Data Block Descriptor {}", supported(v))),
                (20, 20, &|v| format!("Address Offsets {}", supported(v))),
                (19, 19, &|v| format!("Metadata Pointer Containing SGL Descriptor {}", supported(v))),
                (18, 18, &|v| format!("SGL Length Larger than Buffer {}", supported(v))),
                (17, 17, &|v| format!("Byte-Aligned Contig. MD Buffer {}", supported(v))),
                (16, 16, &|v| format!("SGL Bit-Bucket {}", supported(v))),
                (2, 2, &|v| format!("Keyed SGL Data Block descriptor {}", supported(v))),
                (1, 0, &|v| {
                    match v {
                        0b01 => "Scatter-Gather Lists Supported",
                        0b10 => "Scatter-Gather Lists Supported. Dword alignment required.",
                        0b00 => "Scatter-Gather Lists Not Supported",
                        _ => "Reserved",
                    }
                    .into()
                }),
            ],
        )),
        dec("mnan", id.maximum_number_of_allowed_namespaces),
        text("subnqn", id.subsystem_nqn_str().unwrap_or("").to_string()),
        dec("ioccsz", id.io_command_capsule_size),
        dec("iorcsz", id.io_response_capsule_size),
        dec("icdoff", id.in_capsule_data_offset),
        hex("fcatt", id.fabrics_controller_attributes).with(decode_bits(
            id.fabrics_controller_attributes.into(),
            &[(0, 0, &|v| if v != 0 { "Static Controller Model" } else { "Dynamic Controller Model" }.into())],
        )),
        dec("msdbd", id.maximum_sgl_data_block_descriptors),
        dec("ofcs", id.optional_fabrics_commands_support).with(decode_bits(
            id.optional_fabrics_commands_support.into(),
            &[(0, 0, &|v| format!("Disconnect command {}", supported(v)))],
        )),
    ]
}

/// "24 °C (297 K)", or "0 K (not reported)".
fn kelvin_text(kelvin: u16) -> String {
    if kelvin == 0 {
        "0 K (not reported)".into()
    } else {
        format!("{} °C ({kelvin} K)", i32::from(kelvin) - 273)
    }
}

/// Power in watts from a value and a two-bit scale (1: 0.0001 W, 2: 0.01 W).
fn scaled_power(value: u16, scale: u8) -> String {
    match scale {
        1 => format!("{:.4}W", f64::from(value) / 10_000.0),
        2 => format!("{:.2}W", f64::from(value) / 100.0),
        _ => "-".into(),
    }
}

fn power_state_lines(index: u8, ps: &PowerStateDescriptor) -> String {
    let max_power = if ps.flags & 1 != 0 {
        format!("{:.4}W", f64::from(ps.maximum_power) / 10_000.0)
    } else {
        format!("{:.2}W", f64::from(ps.maximum_power) / 100.0)
    };
    let operational = if ps.flags & 2 != 0 { "non-operational" } else { "operational" };
    let active_scale = ps.active_power_workload_and_scale >> 6;
    let workload = match ps.active_power_workload_and_scale & 0b111 {
        0 => "-",
        1 => "Extreme Idle",
        2 => "Heavy Sequential Writes",
        _ => "Reserved",
    };
    format!(
        "ps {index:>6} : mp:{max_power} {operational} enlat:{} exlat:{} rrt:{} rrl:{}\n            rwt:{} rwl:{} idle_power:{} active_power:{}\n            active_power_workload:{workload}\n",
        ps.entry_latency_us,
        ps.exit_latency_us,
        ps.relative_read_throughput,
        ps.relative_read_latency,
        ps.relative_write_throughput,
        ps.relative_write_latency,
        scaled_power(ps.idle_power, ps.idle_power_scale),
        scaled_power(ps.active_power, active_scale),
    )
}

/// `nvme id-ctrl` text.
pub fn id_ctrl_text(id: &IdentifyController, human: bool) -> String {
    let mut out = String::from("NVME Identify Controller:\n");
    render_fields(&mut out, &id_ctrl_fields(id), 10, human);
    out.push_str(&power_state_lines(0, &id.power_state_0));
    out
}

/// `nvme id-ctrl -o json`.
pub fn id_ctrl_json(id: &IdentifyController) -> Value {
    let mut map = fields_json(&id_ctrl_fields(id));
    // nvme-cli prints ieee as a number in JSON.
    let ieee = u64::from(id.ieee_oui_identifier[2]) << 16
        | u64::from(id.ieee_oui_identifier[1]) << 8
        | u64::from(id.ieee_oui_identifier[0]);
    map.insert("ieee".into(), Value::from(ieee));
    let ps = &id.power_state_0;
    map.insert(
        "psds".into(),
        json!([{
            "max_power": ps.maximum_power,
            "max_power_scale": ps.flags & 1,
            "non-operational_state": (ps.flags >> 1) & 1,
            "entry_lat": ps.entry_latency_us,
            "exit_lat": ps.exit_latency_us,
            "read_tput": ps.relative_read_throughput,
            "read_lat": ps.relative_read_latency,
            "write_tput": ps.relative_write_throughput,
            "write_lat": ps.relative_write_latency,
            "idle_power": ps.idle_power,
            "idle_scale": ps.idle_power_scale,
            "active_power": ps.active_power,
            "active_power_work": ps.active_power_workload_and_scale & 0b111,
            "active_scale": ps.active_power_workload_and_scale >> 6,
        }]),
    );
    Value::Object(map)
}

// ---------------------------------------------------------------------------------
// Identify Namespace

fn id_ns_fields(ns: &IdentifyNamespace) -> Vec<Field> {
    vec![
        hex("nsze", ns.namespace_size),
        hex("ncap", ns.namespace_capacity),
        hex("nuse", ns.namespace_utilization),
        hex("nsfeat", ns.namespace_features).with(decode_bits(
            ns.namespace_features.into(),
            &[
                (4, 4, &|v| format!("NPWG, NPWA, NPDG, NPDA, and NOWS are {}", supported(v))),
                (3, 3, &|v| if v != 0 { "NGUID and EUI64 fields if non-zero, Never Reused" } else { "NGUID and EUI64 fields if non-zero, Reused" }.into()),
                (2, 2, &|v| format!("Deallocated or Unwritten Logical Block error {}", supported(v))),
                (1, 1, &|v| format!("Namespace uses {}", if v != 0 { "NAWUN, NAWUPF, and NACWU" } else { "AWUN, AWUPF, and ACWU" })),
                (0, 0, &|v| format!("Thin Provisioning {}", supported(v))),
            ],
        )),
        dec("nlbaf", ns.number_of_lba_formats),
        hex("flbas", ns.formatted_lba_size).with(decode_bits(
            ns.formatted_lba_size.into(),
            &[
                (6, 5, &|v| format!("Most significant 2 bits of Current LBA Format Selected: {v}")),
                (4, 4, &|v| if v != 0 { "Metadata Transferred at End of Data LBA" } else { "Metadata Transferred in Separate Contiguous Buffer" }.into()),
                (3, 0, &|v| format!("Least significant 4 bits of Current LBA Format Selected: {v}")),
            ],
        )),
        hex("mc", ns.metadata_capabilities),
        hex("dpc", ns.protection_capabilities),
        hex("dps", ns.protection_settings),
        hex("nmic", ns.multipath_capabilities).with(decode_bits(
            ns.multipath_capabilities.into(),
            &[(0, 0, &|v| if v != 0 { "Namespace Multipath Capable" } else { "Namespace Multipath Not Capable" }.into())],
        )),
        hex("rescap", ns.reservation_capabilities),
        hex("fpi", ns.format_progress_indicator),
        dec("dlfeat", ns.deallocate_features).with(decode_bits(
            ns.deallocate_features.into(),
            &[
                (4, 4, &|v| format!("Guard Field of Deallocated Logical Blocks is set to {}", if v != 0 { "CRC of The Value Read" } else { "0xFFFF" })),
                (3, 3, &|v| format!("Deallocate Bit in the Write Zeroes Command is {}", supported(v))),
                (2, 0, &|v| {
                    match v {
                        1 => "Bytes Read From a Deallocated Logical Block and its Metadata are 0x00",
                        2 => "Bytes Read From a Deallocated Logical Block and its Metadata are 0xFF",
                        _ => "Bytes Read From a Deallocated Logical Block and its Metadata are Not Reported",
                    }
                    .into()
                }),
            ],
        )),
        dec("nawun", ns.atomic_write_unit_normal),
        dec("nawupf", ns.atomic_write_unit_power_fail),
        dec("nacwu", ns.atomic_compare_and_write_unit),
        dec("nabsn", ns.atomic_boundary_size_normal),
        dec("nabo", ns.atomic_boundary_offset),
        dec("nabspf", ns.atomic_boundary_size_power_fail),
        dec("noiob", ns.optimal_io_boundary),
        dec("nvmcap", ns.nvm_capacity),
        dec("npwg", ns.preferred_write_granularity),
        dec("npwa", ns.preferred_write_alignment),
        dec("npdg", ns.preferred_deallocate_granularity),
        dec("npda", ns.preferred_deallocate_alignment),
        dec("nows", ns.optimal_write_size),
        dec("mssrl", ns.maximum_single_source_range_length),
        dec("mcl", ns.maximum_copy_length),
        dec("msrc", ns.maximum_source_range_count),
        dec("anagrpid", ns.ana_group_identifier),
        dec("nsattr", ns.namespace_attributes),
        dec("nvmsetid", ns.nvm_set_identifier),
        dec("endgid", ns.endurance_group_identifier),
        text("nguid", hex_string(&ns.namespace_globally_unique_identifier)),
        text("eui64", hex_string(&ns.ieee_extended_unique_identifier)),
    ]
}

fn relative_performance(rp: u8) -> &'static str {
    match rp {
        0 => "Best",
        1 => "Better",
        2 => "Good",
        _ => "Degraded",
    }
}

/// The LBA formats the namespace reports (NLBAF is 0's based), at most the modelled 16.
fn lba_formats(ns: &IdentifyNamespace) -> &[LbaFormat] {
    let count = (usize::from(ns.number_of_lba_formats) + 1).min(ns.lba_formats.len());
    &ns.lba_formats[..count]
}

/// `nvme id-ns` text.
pub fn id_ns_text(nsid: u32, ns: &IdentifyNamespace, human: bool) -> String {
    let mut out = format!("NVME Identify Namespace {nsid}:\n");
    render_fields(&mut out, &id_ns_fields(ns), 8, human);
    let in_use = ns.formatted_lba_index();
    for (index, format) in lba_formats(ns).iter().enumerate() {
        let marker = if index == in_use { " (in use)" } else { "" };
        if human {
            let size = format.block_size_bytes().unwrap_or(0);
            let _ = writeln!(
                out,
                "LBA Format {index:2} : Metadata Size: {:<3} bytes - Data Size: {size} bytes - Relative Performance: {:#x} {}{marker}",
                format.metadata_size,
                format.relative_performance,
                relative_performance(format.relative_performance),
            );
        } else {
            let _ = writeln!(
                out,
                "lbaf {index:2} : ms:{:<3} lbads:{:<2} rp:{}{marker}",
                format.metadata_size, format.lba_data_size_log2, format.relative_performance,
            );
        }
    }
    out
}

/// `nvme id-ns -o json`.
pub fn id_ns_json(ns: &IdentifyNamespace) -> Value {
    let mut map = fields_json(&id_ns_fields(ns));
    let formats: Vec<Value> = lba_formats(ns)
        .iter()
        .map(|format| json!({"ms": format.metadata_size, "ds": format.lba_data_size_log2, "rp": format.relative_performance}))
        .collect();
    map.insert("lbafs".into(), Value::from(formats));
    Value::Object(map)
}

// ---------------------------------------------------------------------------------
// SMART / Health

/// Bytes per SMART data unit: 1000 units of 512 bytes.
const DATA_UNIT_BYTES: u128 = 512 * 1000;

/// `nvme smart-log` text.
pub fn smart_text(device: &str, nsid: u32, log: &SmartHealthLog, human: bool) -> String {
    let mut out = format!("Smart Log for NVME device:{device} namespace-id:{nsid:x}\n");
    let _ = writeln!(out, "critical_warning\t\t\t: {:#x}", log.critical_warning);
    if human {
        let warning = log.critical_warning;
        for (bit, name) in [
            (0, "Available Spare[0]             "),
            (1, "Temp. Threshold[1]             "),
            (2, "NVM subsystem Reliability[2]   "),
            (3, "Read-only[3]                   "),
            (4, "Volatile mem. backup failed[4] "),
            (5, "Persistent Mem. RO[5]          "),
        ] {
            let _ = writeln!(out, "      {name}: {}", (warning >> bit) & 1);
        }
    }
    let _ = writeln!(out, "temperature\t\t\t\t: {}", kelvin_text(log.composite_temperature_kelvin));
    let _ = writeln!(out, "available_spare\t\t\t\t: {}%", log.available_spare);
    let _ = writeln!(out, "available_spare_threshold\t\t: {}%", log.available_spare_threshold);
    let _ = writeln!(out, "percentage_used\t\t\t\t: {}%", log.percentage_used);
    let _ = writeln!(out, "endurance group critical warning summary: {:#x}", log.endurance_group_critical_warning);
    let _ = writeln!(
        out,
        "Data Units Read\t\t\t\t: {} ({})",
        log.data_units_read,
        si_bytes(log.data_units_read.saturating_mul(DATA_UNIT_BYTES))
    );
    let _ = writeln!(
        out,
        "Data Units Written\t\t\t: {} ({})",
        log.data_units_written,
        si_bytes(log.data_units_written.saturating_mul(DATA_UNIT_BYTES))
    );
    let _ = writeln!(out, "host_read_commands\t\t\t: {}", log.host_read_commands);
    let _ = writeln!(out, "host_write_commands\t\t\t: {}", log.host_write_commands);
    let _ = writeln!(out, "controller_busy_time\t\t\t: {}", log.controller_busy_time_minutes);
    let _ = writeln!(out, "power_cycles\t\t\t\t: {}", log.power_cycles);
    let _ = writeln!(out, "power_on_hours\t\t\t\t: {}", log.power_on_hours);
    let _ = writeln!(out, "unsafe_shutdowns\t\t\t: {}", log.unsafe_shutdowns);
    let _ = writeln!(out, "media_errors\t\t\t\t: {}", log.media_errors);
    let _ = writeln!(out, "num_err_log_entries\t\t\t: {}", log.error_log_entries);
    let _ = writeln!(out, "Warning Temperature Time\t\t: {}", log.warning_temperature_time_minutes);
    let _ = writeln!(out, "Critical Composite Temperature Time\t: {}", log.critical_temperature_time_minutes);
    for (index, &sensor) in log.temperature_sensors.iter().enumerate() {
        if sensor != 0 {
            let _ = writeln!(out, "Temperature Sensor {}\t\t\t: {}", index + 1, kelvin_text(sensor));
        }
    }
    let _ = writeln!(out, "Thermal Management T1 Trans Count\t: {}", log.thermal_transition_counts[0]);
    let _ = writeln!(out, "Thermal Management T2 Trans Count\t: {}", log.thermal_transition_counts[1]);
    let _ = writeln!(out, "Thermal Management T1 Total Time\t: {}", log.thermal_total_time_seconds[0]);
    let _ = writeln!(out, "Thermal Management T2 Total Time\t: {}", log.thermal_total_time_seconds[1]);
    out
}

/// `nvme smart-log -o json`.
pub fn smart_json(log: &SmartHealthLog) -> Value {
    let mut map = Map::new();
    let mut put = |key: &str, value: Value| {
        map.insert(key.to_string(), value);
    };
    put("critical_warning", log.critical_warning.into());
    put("temperature", log.composite_temperature_kelvin.into());
    put("avail_spare", log.available_spare.into());
    put("spare_thresh", log.available_spare_threshold.into());
    put("percent_used", log.percentage_used.into());
    put("endurance_grp_critical_warning_summary", log.endurance_group_critical_warning.into());
    put("data_units_read", json_u128(log.data_units_read));
    put("data_units_written", json_u128(log.data_units_written));
    put("host_read_commands", json_u128(log.host_read_commands));
    put("host_write_commands", json_u128(log.host_write_commands));
    put("controller_busy_time", json_u128(log.controller_busy_time_minutes));
    put("power_cycles", json_u128(log.power_cycles));
    put("power_on_hours", json_u128(log.power_on_hours));
    put("unsafe_shutdowns", json_u128(log.unsafe_shutdowns));
    put("media_errors", json_u128(log.media_errors));
    put("num_err_log_entries", json_u128(log.error_log_entries));
    put("warning_temp_time", log.warning_temperature_time_minutes.into());
    put("critical_comp_time", log.critical_temperature_time_minutes.into());
    for (index, &sensor) in log.temperature_sensors.iter().enumerate() {
        if sensor != 0 {
            put(&format!("temperature_sensor_{}", index + 1), sensor.into());
        }
    }
    put("thm_temp1_trans_count", log.thermal_transition_counts[0].into());
    put("thm_temp2_trans_count", log.thermal_transition_counts[1].into());
    put("thm_temp1_total_time", log.thermal_total_time_seconds[0].into());
    put("thm_temp2_total_time", log.thermal_total_time_seconds[1].into());
    Value::Object(map)
}

// ---------------------------------------------------------------------------------
// Discovery log

fn trtype_str(value: u8) -> &'static str {
    match value {
        TRTYPE_RDMA => "rdma",
        TRTYPE_FC => "fc",
        TRTYPE_TCP => "tcp",
        0xFE => "loop",
        _ => "unrecognized",
    }
}

fn adrfam_str(value: u8) -> &'static str {
    match value {
        address_family::IPV4 => "ipv4",
        address_family::IPV6 => "ipv6",
        address_family::INFINIBAND => "infiniband",
        address_family::FIBRE_CHANNEL => "fibre-channel",
        0xFE => "intra-host",
        _ => "unrecognized",
    }
}

fn subtype_str(value: u8) -> &'static str {
    match value {
        subsystem_type::DISCOVERY_REFERRAL => "discovery subsystem referral",
        subsystem_type::NVME_SUBSYSTEM => "nvme subsystem",
        subsystem_type::CURRENT_DISCOVERY => "current discovery subsystem",
        _ => "unrecognized",
    }
}

fn treq_str(value: u8) -> String {
    let secure = match value & 0b11 {
        transport_requirements::SECURE_CHANNEL_NOT_SPECIFIED => "not specified",
        transport_requirements::SECURE_CHANNEL_REQUIRED => "required",
        transport_requirements::SECURE_CHANNEL_NOT_REQUIRED => "not required",
        _ => "reserved",
    };
    if value & transport_requirements::SQ_FLOW_CONTROL_DISABLE_SUPPORTED != 0 {
        format!("{secure}, sq flow control disable supported")
    } else {
        secure.to_string()
    }
}

fn eflags_str(value: u16) -> String {
    let mut names = Vec::new();
    if value & entry_flags::EXPLICIT_PERSISTENT_CONNECTION != 0 {
        names.push("explicit discovery connections");
    }
    if value & entry_flags::DUPLICATE_RETURNED_INFORMATION != 0 {
        names.push("duplicate discovery information");
    }
    if value & entry_flags::NO_CDC_CONNECTIVITY != 0 {
        names.push("no cdc connectivity");
    }
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

fn sectype_str(value: u8) -> &'static str {
    match value {
        tcp_security_type::NONE => "none",
        tcp_security_type::TLS_1_2 => "tls1.2",
        tcp_security_type::TLS_1_3 => "tls1.3",
        _ => "unrecognized",
    }
}

/// `nvme discover` text. `generation` is GENCTR when it could be read.
pub fn discovery_text(generation: Option<u64>, entries: &[DiscoveryLogEntry]) -> String {
    let mut out = String::new();
    match generation {
        Some(generation) => {
            let _ = writeln!(out, "\nDiscovery Log Number of Records {}, Generation counter {generation}", entries.len());
        }
        None => {
            let _ = writeln!(out, "\nDiscovery Log Number of Records {}", entries.len());
        }
    }
    for (index, entry) in entries.iter().enumerate() {
        let traddr = entry.transport_address_str().unwrap_or("");
        let _ = writeln!(out, "=====Discovery Log Entry {index}======");
        let _ = writeln!(out, "trtype:  {}", trtype_str(entry.transport_type));
        let _ = writeln!(out, "adrfam:  {}", if traddr.is_empty() { "" } else { adrfam_str(entry.address_family) });
        let _ = writeln!(out, "subtype: {}", subtype_str(entry.subsystem_type));
        let _ = writeln!(out, "treq:    {}", treq_str(entry.transport_requirements));
        let _ = writeln!(out, "portid:  {}", entry.port_id);
        let _ = writeln!(out, "trsvcid: {}", entry.transport_service_id_str().unwrap_or(""));
        let _ = writeln!(out, "subnqn:  {}", entry.subsystem_nqn_str().unwrap_or(""));
        let _ = writeln!(out, "traddr:  {traddr}");
        let _ = writeln!(out, "eflags:  {}", eflags_str(entry.entry_flags));
        if entry.transport_type == TRTYPE_TCP {
            let _ = writeln!(out, "sectype: {}", sectype_str(entry.tcp_security_type()));
        }
    }
    out
}

/// `nvme discover -o json`.
pub fn discovery_json(generation: Option<u64>, entries: &[DiscoveryLogEntry]) -> Value {
    let records: Vec<Value> = entries
        .iter()
        .map(|entry| {
            let mut record = json!({
                "trtype": trtype_str(entry.transport_type),
                "adrfam": adrfam_str(entry.address_family),
                "subtype": subtype_str(entry.subsystem_type),
                "treq": treq_str(entry.transport_requirements),
                "portid": entry.port_id,
                "trsvcid": entry.transport_service_id_str().unwrap_or(""),
                "subnqn": entry.subsystem_nqn_str().unwrap_or(""),
                "traddr": entry.transport_address_str().unwrap_or(""),
                "eflags": eflags_str(entry.entry_flags),
            });
            if entry.transport_type == TRTYPE_TCP {
                record["sectype"] = Value::from(sectype_str(entry.tcp_security_type()));
            }
            record
        })
        .collect();
    let mut map = Map::new();
    if let Some(generation) = generation {
        map.insert("genctr".into(), generation.into());
    }
    map.insert("records".into(), records.into());
    Value::Object(map)
}

// ---------------------------------------------------------------------------------
// Features

/// libnvme's feature names.
pub fn feature_name(feature_id: u8) -> &'static str {
    match feature_id {
        0x01 => "Arbitration",
        0x02 => "Power Management",
        0x03 => "LBA Range Type",
        0x04 => "Temperature Threshold",
        0x05 => "Error Recovery",
        0x06 => "Volatile Write Cache",
        0x07 => "Number of Queues",
        0x08 => "Interrupt Coalescing",
        0x09 => "Interrupt Vector Configuration",
        0x0A => "Write Atomicity Normal",
        0x0B => "Async Event Configuration",
        0x0C => "Autonomous Power State Transition",
        0x0D => "Host Memory Buffer",
        0x0E => "Timestamp",
        0x0F => "Keep Alive Timer",
        0x10 => "Host Controlled Thermal Management",
        0x11 => "Non-Operational Power State Config",
        0x12 => "Read Recovery Level",
        0x13 => "Predictable Latency Mode Config",
        0x14 => "Predictable Latency Mode Window",
        0x16 => "Host Behavior Support",
        0x17 => "Sanitize Config",
        0x18 => "Endurance Group Event Configuration",
        0x19 => "I/O Command Set Profile",
        0x1A => "Spinup Control",
        0x7D => "Enhanced Controller Metadata",
        0x7E => "Controller Metadata",
        0x7F => "Namespace Metadata",
        0x80 => "Software Progress",
        0x81 => "Host Identifier",
        0x82 => "Reservation Notification Mask",
        0x83 => "Reservation Persistence",
        0x84 => "Namespace Write Protection Config",
        _ => "Unknown",
    }
}

/// Names of the Get Features SEL values.
pub fn select_name(select: u8) -> &'static str {
    match select {
        0 => "Current",
        1 => "Default",
        2 => "Saved",
        3 => "Supported capabilities",
        _ => "Reserved",
    }
}

fn feature_id_text(feature_id: u8) -> String {
    c_alt_hex(feature_id.into(), 4, 2)
}

/// `get-feature:0x07 (Number of Queues), Current value:0x00010001`, plus the decoded
/// fields with -H.
pub fn get_feature_text(feature_id: u8, select: u8, value: u32, human: bool) -> String {
    let mut out = format!(
        "get-feature:{} ({}), {} value:{}\n",
        feature_id_text(feature_id),
        feature_name(feature_id),
        select_name(select),
        c_alt_hex(value.into(), 10, 8)
    );
    if human {
        let lines = if select == 3 { capability_lines(value) } else { feature_fields(feature_id, value) };
        for line in lines {
            let _ = writeln!(out, "\t{line}");
        }
    }
    out
}

/// JSON for get-feature, shaped like nvme-cli's: feature, name, sel, value.
pub fn get_feature_json(feature_id: u8, select: u8, value: u32) -> Value {
    json!({
        "feature": feature_id_text(feature_id),
        "name": feature_name(feature_id),
        "sel": select_name(select),
        "value": c_alt_hex(value.into(), 10, 8),
        "result": value,
    })
}

/// `set-feature:0x07 (Number of Queues), value:0x00010001, cdw12:00000000, save:0`.
pub fn set_feature_text(feature_id: u8, value: u32, save: bool, result: u32) -> String {
    let mut out = format!(
        "set-feature:{} ({}), value:{}, cdw12:{}, save:{:#x}\n",
        feature_id_text(feature_id),
        feature_name(feature_id),
        c_alt_hex(value.into(), 10, 8),
        c_alt_hex(0, 10, 8),
        u8::from(save)
    );
    if result != 0 {
        let _ = writeln!(out, "\tresult (dword 0):{}", c_alt_hex(result.into(), 10, 8));
        for line in feature_fields(feature_id, result) {
            let _ = writeln!(out, "\t{line}");
        }
    }
    out
}

pub fn set_feature_json(feature_id: u8, value: u32, save: bool, result: u32) -> Value {
    json!({
        "feature": feature_id_text(feature_id),
        "name": feature_name(feature_id),
        "value": c_alt_hex(value.into(), 10, 8),
        "save": save,
        "result": result,
    })
}

fn capability_lines(value: u32) -> Vec<String> {
    let yes_no = |bit: u32| if value & bit != 0 { "yes" } else { "no" };
    vec![
        format!("Feature is saveable: {}", yes_no(1)),
        format!("Feature is per-namespace: {}", yes_no(2)),
        format!("Feature is changeable: {}", yes_no(4)),
    ]
}

/// nvme-cli's decode of a feature value (`nvme_feature_show_fields`), for the
/// features a fabrics controller has.
pub fn feature_fields(feature_id: u8, value: u32) -> Vec<String> {
    match feature_id {
        0x01 => {
            let burst = value & 0b111;
            vec![
                format!("High Priority Weight   (HPW): {}", ((value >> 24) & 0xFF) + 1),
                format!("Medium Priority Weight (MPW): {}", ((value >> 16) & 0xFF) + 1),
                format!("Low Priority Weight    (LPW): {}", ((value >> 8) & 0xFF) + 1),
                if burst == 0b111 {
                    "Arbitration Burst       (AB): No limit".into()
                } else {
                    format!("Arbitration Burst       (AB): {}", 1u32 << burst)
                },
            ]
        }
        0x02 => vec![
            format!("Workload Hint (WH): {}", (value >> 5) & 0b111),
            format!("Power State   (PS): {}", value & 0x1F),
        ],
        0x06 => vec![format!(
            "Volatile Write Cache Enable (WCE): {}",
            if value & 1 != 0 { "Enabled" } else { "Disabled" }
        )],
        0x07 => vec![
            format!("Number of IO Completion Queues Allocated (NCQA): {}", (value >> 16) + 1),
            format!("Number of IO Submission Queues Allocated (NSQA): {}", (value & 0xFFFF) + 1),
        ],
        0x0B => {
            let flag = |bit: u32| if value & (1 << bit) != 0 { "Send async event" } else { "Do not send async event" };
            vec![
                format!("Discovery Log Page Change Notices: {}", flag(31)),
                format!("ANA Change Notices               : {}", flag(11)),
                format!("Telemetry Log Notices            : {}", flag(10)),
                format!("Firmware Activation Notices      : {}", flag(9)),
                format!("Namespace Attribute Notices      : {}", flag(8)),
                format!("SMART / Health Critical Warnings : {:#x}", value & 0xFF),
            ]
        }
        0x0F => vec![format!("Keep Alive Timeout (KATO) in milliseconds: {value}")],
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------
// list

/// One row of `sluice list`: one namespace of the target.
#[derive(Debug, Clone)]
pub struct ListRow {
    /// tcp://ADDR:PORT/NQN.
    pub node: String,
    pub nsid: u32,
    pub serial: String,
    pub model: String,
    pub firmware: String,
    /// NUSE in bytes.
    pub used_bytes: u64,
    /// NSZE in blocks (MaximumLBA in nvme-cli's JSON).
    pub size_blocks: u64,
    pub block_bytes: u64,
    pub metadata_bytes: u16,
}

impl ListRow {
    fn total_bytes(&self) -> u64 {
        self.size_blocks.saturating_mul(self.block_bytes)
    }
}

/// `nvme list` text: a header, a dashed rule, one row per namespace.
pub fn list_text(rows: &[ListRow]) -> String {
    let node_width = rows.iter().map(|row| row.node.len()).max().unwrap_or(0).max(21);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<node_width$} {:<20} {:<40} {:<10} {:<26} {:<16} {:<8}",
        "Node", "SN", "Model", "Namespace", "Usage", "Format", "FW Rev"
    );
    let _ = writeln!(
        out,
        "{} {} {} {} {} {} {}",
        "-".repeat(node_width),
        "-".repeat(20),
        "-".repeat(40),
        "-".repeat(10),
        "-".repeat(26),
        "-".repeat(16),
        "-".repeat(8)
    );
    for row in rows {
        let (used, used_suffix) = si_units(row.used_bytes as f64);
        let (total, total_suffix) = si_units(row.total_bytes() as f64);
        let usage = format!("{used:6.2} {used_suffix:>2}B / {total:6.2} {total_suffix:>2}B");
        let (block, block_suffix) = binary_units(row.block_bytes as f64);
        let format = format!("{block:3.0} {block_suffix:>3}B + {:2} B", row.metadata_bytes);
        let nsid = format!("{:#x}", row.nsid);
        let _ = writeln!(
            out,
            "{:<node_width$} {:<20} {:<40} {:<10} {:<26} {:<16} {:<8}",
            row.node, row.serial, row.model, nsid, usage, format, row.firmware
        );
    }
    out
}

/// `nvme list -o json`: `{"Devices":[...]}` with nvme-cli's keys.
pub fn list_json(rows: &[ListRow]) -> Value {
    let devices: Vec<Value> = rows
        .iter()
        .map(|row| {
            json!({
                "NameSpace": row.nsid,
                "DevicePath": row.node,
                "Firmware": row.firmware,
                "ModelNumber": row.model,
                "SerialNumber": row.serial,
                "UsedBytes": row.used_bytes,
                "MaximumLBA": row.size_blocks,
                "PhysicalSize": row.total_bytes(),
                "SectorSize": row.block_bytes,
            })
        })
        .collect();
    json!({ "Devices": devices })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_descriptions() {
        let status = Status::LBA_OUT_OF_RANGE.with_do_not_retry();
        assert_eq!(describe_status(status, StatusContext::Io), "LBA Out of Range (SCT 0x0 SC 0x80, DNR)");
        let status = Status::CONNECT_INVALID_PARAMETERS;
        assert_eq!(describe_status(status, StatusContext::Fabrics), "Connect Invalid Parameters (SCT 0x1 SC 0x82)");
        assert_eq!(status_name(Status::CONFLICTING_ATTRIBUTES, StatusContext::Io), "Conflicting Attributes");
        assert_eq!(status_name(Status::INVALID_LOG_PAGE, StatusContext::Admin), "Invalid Log Page");
    }

    #[test]
    fn hex_dump_matches_nvme_cli() {
        let dump = hex_dump(b"0123456789abcdefXY");
        let lines: Vec<&str> = dump.lines().collect();
        assert_eq!(lines[0], "       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f");
        assert_eq!(lines[1], "0000: 30 31 32 33 34 35 36 37 38 39 61 62 63 64 65 66 \"0123456789abcdef\"");
        assert_eq!(lines[2], format!("0010: 58 59{} \"XY\"", " ".repeat(42)));
    }

    #[test]
    fn c_style_hex() {
        assert_eq!(c_alt_hex(0x10001, 10, 8), "0x00010001");
        assert_eq!(c_alt_hex(0, 10, 8), "00000000");
        assert_eq!(c_alt_hex(7, 4, 2), "0x07");
    }

    #[test]
    fn feature_lines() {
        let text = get_feature_text(7, 0, 0x0001_0001, true);
        assert!(text.starts_with("get-feature:0x07 (Number of Queues), Current value:0x00010001\n"));
        assert!(text.contains("(NCQA): 2"));
    }

    #[test]
    fn units() {
        assert_eq!(si_bytes(1_140_000_000), "1.14 GB");
        assert_eq!(si_bytes(0), "0.00 B");
        let row = ListRow {
            node: "tcp://127.0.0.1:4420/nqn.x".into(),
            nsid: 1,
            serial: "S".into(),
            model: "M".into(),
            firmware: "F".into(),
            used_bytes: 1 << 30,
            size_blocks: 1 << 21,
            block_bytes: 512,
            metadata_bytes: 0,
        };
        let text = list_text(&[row]);
        assert!(text.contains("  1.07  GB /   1.07  GB"), "{text}");
        assert!(text.contains("512    B +  0 B"), "{text}");
    }

    #[test]
    fn identify_renderings() {
        let mut id = IdentifyController { pci_vendor_id: 0, maximum_data_transfer_size: 5, ..Default::default() };
        id.set_serial_number("SER");
        id.set_subsystem_nqn("nqn.test");
        let text = id_ctrl_text(&id, false);
        assert!(text.contains("vid       : 0x0\n"));
        assert!(text.contains("sn        : SER\n"));
        assert!(text.contains("mdts      : 5\n"));
        assert!(text.contains("subnqn    : nqn.test\n"));
        assert!(text.contains("ps      0 : mp:0.00W operational"));
        let json = id_ctrl_json(&id);
        assert_eq!(json["sn"], "SER");
        assert_eq!(json["mdts"], 5);

        let mut ns = IdentifyNamespace { namespace_size: 0x200000, ..Default::default() };
        ns.lba_formats[0].lba_data_size_log2 = 9;
        let text = id_ns_text(1, &ns, false);
        assert!(text.contains("nsze    : 0x200000\n"));
        assert!(text.contains("lbaf  0 : ms:0   lbads:9  rp:0 (in use)\n"), "{text}");
        assert_eq!(id_ns_json(&ns)["lbafs"][0]["ds"], 9);
    }
}

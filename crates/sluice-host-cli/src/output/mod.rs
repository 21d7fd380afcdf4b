//! Text and JSON renderings in nvme-cli's style: field names, number formats, the hex
//! dump, human units and NVMe status names. Pure functions from data to strings, so
//! they are unit tested without a target.

use std::fmt::Write as _;

use nvme_spec::discovery::{
    address_family, entry_flags, subsystem_type, tcp_security_type, transport_requirements, DiscoveryLogEntry,
    TRTYPE_FC, TRTYPE_RDMA, TRTYPE_TCP,
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
    let mut text = format!("{} (SCT {:#x} SC {:#04x}", status_name(status, context), status.code_type(), status.code());
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

/// "1.14 GB" for a byte count, as nvme-cli's smart-log writes data units.
pub fn si_bytes(bytes: u128) -> String {
    let (value, suffix) = units::format::scale(bytes as f64, units::format::Base::Decimal);
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
        .map(|&byte| {
            if (0x20..0x7F).contains(&byte) {
                byte as char
            } else if byte == 0 {
                ' '
            } else {
                '.'
            }
        })
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

mod features;
mod identify;
mod list;
mod logs;

pub use features::*;
pub use identify::*;
pub use list::*;
pub use logs::*;

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

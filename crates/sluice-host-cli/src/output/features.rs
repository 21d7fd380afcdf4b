//! Get/Set Features output and feature names.

use super::*;

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
        0x06 => {
            vec![format!("Volatile Write Cache Enable (WCE): {}", if value & 1 != 0 { "Enabled" } else { "Disabled" })]
        }
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

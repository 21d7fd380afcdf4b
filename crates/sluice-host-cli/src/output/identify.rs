//! Identify Controller and Identify Namespace in nvme-cli's layout.

use super::*;

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
        dec("cqt", id.command_quiesce_time_ms),
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
                (0, 0, &|v| {
                    if v != 0 { "Volatile Write Cache Present" } else { "Volatile Write Cache Not Present" }.into()
                }),
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
pub(super) fn kelvin_text(kelvin: u16) -> String {
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
                (3, 3, &|v| {
                    if v != 0 {
                        "NGUID and EUI64 fields if non-zero, Never Reused"
                    } else {
                        "NGUID and EUI64 fields if non-zero, Reused"
                    }
                    .into()
                }),
                (2, 2, &|v| format!("Deallocated or Unwritten Logical Block error {}", supported(v))),
                (1, 1, &|v| {
                    format!(
                        "Namespace uses {}",
                        if v != 0 { "NAWUN, NAWUPF, and NACWU" } else { "AWUN, AWUPF, and ACWU" }
                    )
                }),
                (0, 0, &|v| format!("Thin Provisioning {}", supported(v))),
            ],
        )),
        dec("nlbaf", ns.number_of_lba_formats),
        hex("flbas", ns.formatted_lba_size).with(decode_bits(
            ns.formatted_lba_size.into(),
            &[
                (6, 5, &|v| format!("Most significant 2 bits of Current LBA Format Selected: {v}")),
                (4, 4, &|v| {
                    if v != 0 {
                        "Metadata Transferred at End of Data LBA"
                    } else {
                        "Metadata Transferred in Separate Contiguous Buffer"
                    }
                    .into()
                }),
                (3, 0, &|v| format!("Least significant 4 bits of Current LBA Format Selected: {v}")),
            ],
        )),
        hex("mc", ns.metadata_capabilities),
        hex("dpc", ns.protection_capabilities),
        hex("dps", ns.protection_settings),
        hex("nmic", ns.multipath_capabilities).with(decode_bits(
            ns.multipath_capabilities.into(),
            &[(0, 0, &|v| {
                if v != 0 { "Namespace Multipath Capable" } else { "Namespace Multipath Not Capable" }.into()
            })],
        )),
        hex("rescap", ns.reservation_capabilities),
        hex("fpi", ns.format_progress_indicator),
        dec("dlfeat", ns.deallocate_features).with(decode_bits(
            ns.deallocate_features.into(),
            &[
                (4, 4, &|v| {
                    format!(
                        "Guard Field of Deallocated Logical Blocks is set to {}",
                        if v != 0 { "CRC of The Value Read" } else { "0xFFFF" }
                    )
                }),
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

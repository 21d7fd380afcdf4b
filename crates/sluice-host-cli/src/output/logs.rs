//! SMART / health and discovery log output.

use super::*;

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
            let _ =
                writeln!(out, "\nDiscovery Log Number of Records {}, Generation counter {generation}", entries.len());
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

//! `sluice gateway status`: the group as the local gateway sees it (management API),
//! and each ANA group's state as every member reports it to hosts (its ANA log, read
//! over NVMe/TCP like a host would).

use std::net::SocketAddr;
use std::time::Duration;

use nvme_host_client::{ConnectOptions, Controller};
use serde_json::{json, Value};

/// Short timeouts: a dead member must not hold the command for the client's defaults.
const PEER_TIMEOUT: Duration = Duration::from_secs(3);

/// ANA group -> state, as the member at `address` reports it for `subsystem`.
fn reported_states(address: SocketAddr, subsystem: &str) -> Result<Vec<(u32, String)>, String> {
    let mut options = ConnectOptions::new(address, subsystem);
    options.io_queues = 0;
    options.connect_timeout = PEER_TIMEOUT;
    options.command_timeout = PEER_TIMEOUT;
    options.controller_loss_timeout = Duration::ZERO;
    let controller = Controller::connect(options).map_err(|error| error.to_string())?;
    let log = controller.ana_log().map_err(|error| error.to_string())?;
    Ok(log
        .groups
        .iter()
        .map(|group| (group.descriptor.group_id.0, group.descriptor.state.name().to_string()))
        .collect())
}

/// Adds `reported` (group -> state, or an error) to each member of a `gateway_status`
/// result, read from that member's listener.
pub fn add_reported_states(result: &mut Value) {
    let Some(subsystem) = result["subsystems"].get(0).and_then(Value::as_str).map(str::to_string) else { return };
    let Some(members) = result["members"].as_array_mut() else { return };
    for member in members {
        let Some(address) = member["address"].as_str().and_then(|text| text.parse::<SocketAddr>().ok()) else {
            continue;
        };
        member["reported"] = match reported_states(address, &subsystem) {
            Ok(states) => {
                Value::Object(states.into_iter().map(|(group, state)| (group.to_string(), json!(state))).collect())
            }
            Err(error) => json!({ "error": error }),
        };
    }
}

/// The text view.
pub fn render(result: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let mut out = format!(
        "gateway group {}: this gateway {} ({}), {}; lease {} ms, failback {}\nstate object {}, cluster client {}\n",
        text(&result["group"]),
        text(&result["name"]),
        result["subsystems"]
            .as_array()
            .map(|list| list.iter().map(text).collect::<Vec<_>>().join(", "))
            .unwrap_or_default(),
        text(&result["phase"]),
        result["lease_ms"],
        if result["failback"].as_bool() == Some(true) { "on" } else { "off" },
        text(&result["object"]),
        text(&result["client_address"]),
    );
    let empty = Vec::new();
    let members = result["members"].as_array().unwrap_or(&empty);
    let groups = result["ana_groups"].as_array().unwrap_or(&empty);
    out.push_str("\nMEMBER      ADDRESS                 LEASE\n");
    for member in members {
        let this = if member["this_gateway"].as_bool() == Some(true) { " (this gateway)" } else { "" };
        let alive = if member["alive"].as_bool() == Some(true) { "held" } else { "expired" };
        out.push_str(&format!("{:<11} {:<23} {alive}{this}\n", text(&member["name"]), text(&member["address"])));
    }
    out.push_str("\nANA GROUP  PREFERRED   OWNER");
    for member in members {
        out.push_str(&format!("  {:<15}", format!("AT {}", text(&member["name"]))));
    }
    out.push('\n');
    for group in groups {
        let id = group["ana_group"].as_u64().unwrap_or(0);
        let owner = if text(&group["owner"]).is_empty() { "(none)".to_string() } else { text(&group["owner"]) };
        out.push_str(&format!("{:<10} {:<11} {:<5}", id, text(&group["preferred"]), owner));
        for member in members {
            let reported = &member["reported"];
            let state = if let Some(error) = reported["error"].as_str() {
                format!("unreachable ({})", error.chars().take(40).collect::<String>())
            } else if let Some(state) = reported[id.to_string()].as_str() {
                state.to_string()
            } else if member["this_gateway"].as_bool() == Some(true) {
                text(&group["state"])
            } else {
                "-".to_string()
            };
            out.push_str(&format!("  {state:<15}"));
        }
        out.push('\n');
    }
    match result["config"]["source"].as_str() {
        Some("cluster") => out.push_str(&format!(
            "\ngroup configuration: cluster, version {}{}",
            result["config"]["version"],
            result["config"]["pending"]
                .as_u64()
                .map(|pending| format!(" (version {pending} not applied yet: see the log)"))
                .unwrap_or_default()
        )),
        _ => out.push_str("\ngroup configuration: this gateway's file"),
    }
    out.push_str(&format!(
        "\ntakeovers {}, releases {}, fenced peers {}, rejoins after being fenced {}",
        result["takeovers"], result["releases"], result["fenced_peers"], result["rejoins"]
    ));
    if let Some(ms) = result["last_takeover_ms"].as_u64() {
        out.push_str(&format!(", last takeover after {:.1} s without an owner", ms as f64 / 1000.0));
    }
    out.push('\n');
    out
}

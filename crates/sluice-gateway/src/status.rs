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
        let drained = if member["drained"].as_bool() == Some(true) { ", drained" } else { "" };
        out.push_str(&format!(
            "{:<11} {:<23} {alive}{drained}{this}\n",
            text(&member["name"]),
            text(&member["address"])
        ));
    }
    out.push_str("\nANA GROUP  PREFERRED   OWNER  SHOULD BE  LOAD/s  ");
    for member in members {
        out.push_str(&format!("  {:<15}", format!("AT {}", text(&member["name"]))));
    }
    out.push('\n');
    for group in groups {
        let id = group["ana_group"].as_u64().unwrap_or(0);
        let owner = if text(&group["owner"]).is_empty() { "(none)".to_string() } else { text(&group["owner"]) };
        let load = group["load"].as_f64().map_or("-".to_string(), |load| format!("{load:.0}"));
        out.push_str(&format!(
            "{:<10} {:<11} {:<6} {:<10} {:<7} ",
            id,
            text(&group["preferred"]),
            owner,
            text(&group["desired"]),
            load
        ));
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
    out.push_str(&format!(", handovers {}\n", result["handovers"]));
    out.push_str(&render_rebalance(&result["rebalance"]));
    out.push_str(&render_path_changes(result["path_changes"].as_array().unwrap_or(&empty)));
    out
}

fn render_rebalance(rebalance: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let mut out = format!(
        "\nbalancing: {}, every {} ms, threshold {}%, at most {} moves a pass{}\n",
        text(&rebalance["mode"]),
        rebalance["interval_ms"],
        rebalance["threshold_percent"],
        rebalance["max_moves"],
        if rebalance["leader"].as_bool() == Some(true) { "; this gateway runs the passes" } else { "" }
    );
    if let Some(totals) = rebalance["totals"].as_array().filter(|totals| !totals.is_empty()) {
        let sum: f64 = totals.iter().filter_map(|total| total["load"].as_f64()).sum();
        let shares: Vec<String> = totals
            .iter()
            .map(|total| {
                let load = total["load"].as_f64().unwrap_or(0.0);
                let share = if sum > 0.0 { load / sum * 100.0 } else { 0.0 };
                format!("{} {load:.0} ({share:.0}%)", text(&total["name"]))
            })
            .collect();
        out.push_str(&format!("  last pass: {}\n", shares.join(", ")));
    }
    if !text(&rebalance["idle_reason"]).is_empty() {
        out.push_str(&format!("  last pass moved nothing: {}\n", text(&rebalance["idle_reason"])));
    }
    for found in rebalance["recent_moves"].as_array().into_iter().flatten().rev().take(8) {
        out.push_str(&format!(
            "  pass {}: ANA group {} {} -> {} ({})\n",
            found["pass"],
            found["ana_group"],
            text(&found["from"]),
            text(&found["to"]),
            text(&found["reason"])
        ));
    }
    out
}

fn render_path_changes(changes: &[Value]) -> String {
    if changes.is_empty() {
        return String::new();
    }
    let ms = |value: &Value| value.as_u64().map_or("-".to_string(), |ms| ms.to_string());
    let mut out = String::from(
        "\nPATH CHANGES (as the new owner; ms from the start)\nGROUP KIND       FROM        RELEASED FENCED OPTIMIZED NO-PATH HOSTS LAST-HOST\n",
    );
    for change in changes.iter().rev().take(10) {
        let hosts = change["controllers"].as_array().map_or(0, Vec::len);
        out.push_str(&format!(
            "{:<5} {:<10} {:<11} {:>8} {:>6} {:>9} {:>7} {:>5} {:>9}\n",
            change["ana_group"],
            change["kind"].as_str().unwrap_or_default(),
            change["from"].as_str().unwrap_or_default(),
            ms(&change["released_ms"]),
            ms(&change["fenced_ms"]),
            ms(&change["optimized_ms"]),
            ms(&change["without_optimized_ms"]),
            hosts,
            if change["open"].as_bool() == Some(true) {
                "waiting".to_string()
            } else {
                ms(&change["last_first_command_ms"])
            }
        ));
    }
    out
}

/// The text view of `gateway_drain` and `gateway_undrain`.
pub fn render_placement(result: &Value) -> String {
    let name = result["gateway"].as_str().unwrap_or_default();
    let note = result["note"].as_str().filter(|note| !note.is_empty());
    if result["drained"].as_bool() != Some(true) {
        return format!("undrained {name}{}\n", note.map(|note| format!(" ({note})")).unwrap_or_default());
    }
    let moves: Vec<String> = result["moves"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|found| format!("ANA group {} -> {}", found["ana_group"], found["to"].as_str().unwrap_or_default()))
        .collect();
    let still: Vec<String> =
        result["still_owned"].as_array().into_iter().flatten().map(|group| group.to_string()).collect();
    let mut out = format!("drained {name}{}\n", note.map(|note| format!(" ({note})")).unwrap_or_default());
    if !moves.is_empty() {
        out.push_str(&format!("  moves: {}\n", moves.join(", ")));
    }
    if still.is_empty() {
        out.push_str(&format!("  {name} owns no ANA group (waited {} ms)\n", result["waited_ms"]));
    } else {
        out.push_str(&format!(
            "  {name} still owns ANA group(s) {} (moving; see `sluice gateway status`)\n",
            still.join(", ")
        ));
    }
    out
}

/// The text view of `gateway_move`.
pub fn render_move(result: &Value) -> String {
    let text = |key: &str| result[key].as_str().unwrap_or_default().to_string();
    let (to, owner) = (text("to"), text("owner"));
    let from = if text("from").is_empty() { "none".to_string() } else { text("from") };
    let mut out = format!("ANA group {}: {from} -> {to}", result["ana_group"]);
    if let Some(note) = result["note"].as_str().filter(|note| !note.is_empty()) {
        out.push_str(&format!(" ({note})"));
    }
    out.push('\n');
    if owner == to {
        out.push_str(&format!("  {to} owns it (waited {} ms)\n", result["waited_ms"]));
    } else {
        out.push_str(&format!(
            "  owned by {} when the wait ended (moving; see `sluice gateway status`)\n",
            if owner.is_empty() { "none" } else { &owner }
        ));
    }
    out
}

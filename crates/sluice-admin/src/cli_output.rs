//! The normal (human) output of the management commands: one `View` per kind of
//! answer, rendered as tables and summaries (`-o json` prints the answer itself).

use serde_json::Value;
// Sizes: approximate in tables ("1.5 GiB"), exact in the resize line, which a reader
// may copy back into a config ("1536 MiB").
use units::format::{approximate, exact};

/// How a result is printed in normal output.
#[derive(Debug, Clone, Copy)]
pub(super) enum View {
    SubsystemAdded,
    SubsystemRemoved,
    Subsystems,
    Subsystem,
    NamespaceAdded,
    NamespaceRemoved,
    Namespaces,
    QosChanged,
    AttachmentChanged,
    Resized,
    HostChanged,
    Hosts,
    ListenerChanged,
    Listeners,
    Backends,
    Pools,
    Limits,
    Gateway,
    GatewayPlacement,
    GatewayMoved,
    Raw,
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

fn number(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn flag(value: &Value, key: &str) -> bool {
    value.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn items<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Rows as aligned columns under a header.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|title| title.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if index + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

fn namespace_rows(namespaces: &[Value]) -> String {
    let rows: Vec<Vec<String>> = namespaces
        .iter()
        .map(|namespace| {
            vec![
                number(namespace, "nsid").to_string(),
                approximate(number(namespace, "size_bytes")),
                number(namespace, "block_size").to_string(),
                text(namespace, "backend").to_string(),
                text(namespace, "source").to_string(),
                text(namespace, "nguid").to_string(),
                super::cli_qos::summary(namespace.get("qos")),
                super::cli_attach::hosts_summary(namespace),
            ]
        })
        .collect();
    table(&["NSID", "SIZE", "BLOCK", "BACKEND", "SOURCE", "NGUID", "QOS", "HOSTS"], &rows)
}

fn host_rows(hosts: &[Value]) -> String {
    let rows: Vec<Vec<String>> = hosts
        .iter()
        .map(|host| {
            let authentication = match (flag(host, "dhchap"), flag(host, "bidirectional")) {
                (true, true) => "DH-HMAC-CHAP, bidirectional",
                (true, false) => "DH-HMAC-CHAP",
                _ => "none",
            };
            let tls = if flag(host, "tls") { "PSK" } else { "-" };
            vec![text(host, "host").to_string(), authentication.to_string(), tls.to_string()]
        })
        .collect();
    table(&["HOST", "AUTHENTICATION", "TLS"], &rows)
}

pub(super) fn render(view: View, result: &Value) -> String {
    match view {
        View::SubsystemAdded => {
            format!("added subsystem {} (serial {})\n", text(result, "nqn"), text(result, "serial"))
        }
        View::SubsystemRemoved => format!(
            "removed subsystem {}; {} controller(s) disconnected\n",
            text(result, "nqn"),
            number(result, "controllers_disconnected")
        ),
        View::Subsystems => {
            let rows: Vec<Vec<String>> = items(result, "subsystems")
                .iter()
                .map(|subsystem| {
                    vec![
                        text(subsystem, "nqn").to_string(),
                        number(subsystem, "namespaces").to_string(),
                        approximate(number(subsystem, "capacity_bytes")),
                        number(subsystem, "controllers").to_string(),
                        if flag(subsystem, "allow_any_host") {
                            "any".to_string()
                        } else {
                            number(subsystem, "hosts").to_string()
                        },
                    ]
                })
                .collect();
            table(&["NQN", "NAMESPACES", "CAPACITY", "CONTROLLERS", "HOSTS"], &rows)
        }
        View::Subsystem => {
            let mut out = format!(
                "nqn:          {}\nserial:       {}\nmodel:        {}\ncapacity:     {}\nnamespace management: {}\n\
                 allow any host: {}\n",
                text(result, "nqn"),
                text(result, "serial"),
                text(result, "model"),
                approximate(number(result, "capacity_bytes")),
                if flag(result, "namespace_management") { "yes" } else { "no" },
                if flag(result, "allow_any_host") { "yes" } else { "no" },
            );
            out.push_str("\nnamespaces:\n");
            out.push_str(&namespace_rows(items(result, "namespace_list")));
            out.push_str("\nallowed hosts:\n");
            out.push_str(&host_rows(items(result, "host_list")));
            out.push_str("\ncontrollers:\n");
            let rows: Vec<Vec<String>> = items(result, "controller_list")
                .iter()
                .map(|controller| vec![number(controller, "cntlid").to_string(), text(controller, "host").to_string()])
                .collect();
            out.push_str(&table(&["CNTLID", "HOST"], &rows));
            out
        }
        View::NamespaceAdded => format!(
            "added namespace {} ({}, {}-byte blocks, {}), NGUID {}\n",
            number(result, "nsid"),
            approximate(number(result, "size_bytes")),
            number(result, "block_size"),
            text(result, "backend"),
            text(result, "nguid"),
        ),
        View::NamespaceRemoved => format!(
            "removed namespace {} from {}{}\n",
            number(result, "nsid"),
            text(result, "nqn"),
            if flag(result, "removed_from_config_file") { "" } else { " (it was not in the config file)" }
        ),
        View::Namespaces => namespace_rows(items(result, "namespaces")),
        View::QosChanged => super::cli_qos::render_changed(result),
        View::AttachmentChanged => super::cli_attach::render_changed(result),
        View::Resized => render_resized(result),
        View::HostChanged => {
            let what = match text(result, "change") {
                "added" => "allowed",
                "updated" => "updated the secrets of",
                _ => "denied",
            };
            let mut out = format!("{what} host {} on {}\n", text(result, "host"), text(result, "nqn"));
            if !flag(result, "allow_any_host") {
                out.push_str(&format!("only the {} listed host(s) may connect\n", number(result, "allowed_hosts")));
            }
            let disconnected = number(result, "controllers_disconnected");
            if disconnected > 0 {
                out.push_str(&format!("{disconnected} controller(s) of hosts no longer allowed, or whose TLS key changed, were disconnected\n"));
            }
            out
        }
        View::Hosts => {
            let mut out = format!(
                "{}: {}\n",
                text(result, "nqn"),
                if flag(result, "allow_any_host") { "any host may connect" } else { "only these hosts may connect" }
            );
            out.push_str(&host_rows(items(result, "hosts")));
            out
        }
        View::ListenerChanged if flag(result, "removed") => {
            let mut out = format!(
                "removed listener {}: no longer accepting; {} connection(s) through it were closed\n",
                text(result, "address"),
                number(result, "connections_closed")
            );
            if number(result, "io_listeners_left") == 0 {
                out.push_str(
                    "warning: no listener serves I/O any more: hosts can discover subsystems but not connect\n",
                );
            }
            out
        }
        View::ListenerChanged => format!(
            "added listener {} ({}{}): accepting connections now\n",
            text(result, "address"),
            if flag(result, "discovery_only") { "discovery" } else { "I/O and discovery" },
            tls_note(text(result, "tls"))
        ),
        View::Listeners => {
            let rows: Vec<Vec<String>> = items(result, "listeners")
                .iter()
                .map(|listener| {
                    let state = match (flag(listener, "configured"), flag(listener, "active")) {
                        (true, true) => "active",
                        (true, false) => "not listening",
                        (false, true) => "active, not in the config file",
                        (false, false) => "",
                    };
                    let role = if flag(listener, "discovery_only") { "discovery" } else { "I/O and discovery" };
                    let tls = match text(listener, "tls") {
                        "" => "none",
                        tls => tls,
                    };
                    vec![text(listener, "address").to_string(), role.to_string(), tls.to_string(), state.to_string()]
                })
                .collect();
            table(&["ADDRESS", "ROLE", "TLS", "STATE"], &rows)
        }
        View::Backends => {
            let rows: Vec<Vec<String>> = items(result, "backends")
                .iter()
                .map(|backend| {
                    let open = flag(backend, "open");
                    let used_by = match backend.get("namespace").filter(|namespace| !namespace.is_null()) {
                        Some(namespace) => {
                            format!("namespace {} of {}", number(namespace, "nsid"), text(namespace, "nqn"))
                        }
                        None => {
                            items(backend, "used_by").iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; ")
                        }
                    };
                    vec![
                        text(backend, "name").to_string(),
                        text(backend, "kind").to_string(),
                        if open { approximate(number(backend, "size_bytes")) } else { "-".to_string() },
                        if open { number(backend, "block_size").to_string() } else { "-".to_string() },
                        backend_state(backend, open),
                        backend_source(backend),
                        if used_by.is_empty() { "-".to_string() } else { used_by },
                    ]
                })
                .collect();
            table(&["NAME", "KIND", "SIZE", "BLOCK", "STATE", "SOURCE", "USED BY"], &rows)
        }
        View::Pools => {
            let rows: Vec<Vec<String>> = items(result, "pools")
                .iter()
                .map(|pool| {
                    let open = flag(pool, "open");
                    let carves = items(pool, "carves");
                    let served = carves.iter().filter(|carve| flag(carve, "served")).count();
                    let management = items(pool, "management_subsystems")
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ");
                    vec![
                        text(pool, "name").to_string(),
                        text(pool, "device").to_string(),
                        if open { approximate(number(pool, "capacity_bytes")) } else { "-".to_string() },
                        if open { approximate(number(pool, "free_bytes")) } else { "-".to_string() },
                        if open { format!("{} ({served} served)", carves.len()) } else { "-".to_string() },
                        if management.is_empty() { "-".to_string() } else { management },
                    ]
                })
                .collect();
            table(&["NAME", "DEVICE", "CAPACITY", "FREE", "CARVES", "NAMESPACE MANAGEMENT"], &rows)
        }
        View::Limits => {
            let mut out = String::new();
            for section in ["target", "protocol"] {
                let Some(values) = result.get(section).and_then(Value::as_object) else { continue };
                out.push_str(&format!("{section}:\n"));
                let width = values.keys().map(String::len).max().unwrap_or(0);
                for (key, value) in values {
                    out.push_str(&format!("  {key:<width$}  {value}\n"));
                }
            }
            if !text(result, "takes_effect").is_empty() {
                out.push_str(&format!("{}\n", text(result, "takes_effect")));
            }
            out
        }
        View::Gateway => sluice_gateway::status::render(result),
        View::GatewayPlacement => sluice_gateway::status::render_placement(result),
        View::GatewayMoved => sluice_gateway::status::render_move(result),
        View::Raw => format!("{}\n", serde_json::to_string_pretty(result).unwrap_or_default()),
    }
}

/// STATE of a `sluice backend list` row: open or not, and for RBD the cluster state
/// ("open, errors: 3, last: Connection timed out").
fn backend_state(backend: &Value, open: bool) -> String {
    let mut state = match (open, flag(backend, "configured")) {
        (true, true) => "open".to_string(),
        (false, _) => "not open".to_string(),
        (true, false) => "open, not in the config file".to_string(),
    };
    if let Some(rbd) = backend.get("rbd").filter(|_| open) {
        let errors = number(rbd, "errors");
        if text(rbd, "state") != "connected" || errors > 0 {
            state.push_str(&format!(", {}", text(rbd, "state")));
            if let Some(last) = rbd.get("last_error").and_then(Value::as_str) {
                state.push_str(&format!(" ({errors} failed, last: {last})"));
            }
        }
    }
    state
}

/// SOURCE of a `sluice backend list` row: the file, or the RBD image and its cluster.
fn backend_source(backend: &Value) -> String {
    if let Some(rbd) = backend.get("rbd") {
        return format!("rbd:{}/{} @ {}", text(rbd, "pool"), text(rbd, "image"), text(rbd, "cluster"));
    }
    match backend.get("path").and_then(Value::as_str) {
        Some(path) => path.to_string(),
        None => "-".to_string(),
    }
}
/// ", TLS required" and the like for a listener's one-line summary; nothing for plain.
fn tls_note(tls: &str) -> String {
    match tls {
        "" | "none" => String::new(),
        tls => format!(", TLS {tls}"),
    }
}

/// One line for an `ns_resize` answer.
fn render_resized(result: &Value) -> String {
    let number = |key: &str| result.get(key).and_then(Value::as_u64).unwrap_or(0);
    let nqn = result.get("nqn").and_then(Value::as_str).unwrap_or("?");
    let now = exact(number("size_bytes"));
    if result.get("changed").and_then(Value::as_bool) == Some(true) {
        format!(
            "grew namespace {} of {nqn} from {} to {now} ({} blocks); its hosts were told\n",
            number("nsid"),
            exact(number("previous_size_bytes")),
            number("blocks")
        )
    } else {
        format!("namespace {} of {nqn} already holds {now}; nothing changed\n", number("nsid"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_and_tables_read_well() {
        assert_eq!(approximate(64 << 20), "64 MiB");
        assert_eq!(approximate(3 << 29), "1.5 GiB");
        assert_eq!(approximate(100), "100 B");
        let text = table(&["A", "LONGER"], &[vec!["wide cell".into(), "x".into()]]);
        assert_eq!(text, "A          LONGER\nwide cell  x\n");
    }

    #[test]
    fn backends_and_pools_render_as_tables() {
        let result = json!({"backends": [
            {"name": "disk0", "kind": "file", "open": true, "configured": true, "size_bytes": 1 << 30, "block_size": 4096,
             "used_by": ["subsystem[0] (nqn.a) namespace[0] as its device"], "namespace": {"nqn": "nqn.a", "nsid": 1}},
            {"name": "spare", "kind": "ram", "open": false, "configured": true, "size_bytes": null, "block_size": null,
             "used_by": [], "namespace": null}]});
        let text = render(View::Backends, &result);
        assert!(text.starts_with("NAME   KIND  SIZE   BLOCK  STATE     SOURCE  USED BY\n"), "{text}");
        assert!(text.contains("disk0  file  1 GiB  4096   open      -       namespace 1 of nqn.a"), "{text}");
        assert!(text.contains("spare  ram   -      -      not open  -       -"), "{text}");
        let result = json!({"backends": [
            {"name": "vol", "kind": "rbd", "open": true, "configured": true, "size_bytes": 1 << 30, "block_size": 512,
             "used_by": [], "namespace": {"nqn": "nqn.a", "nsid": 2},
             "rbd": {"cluster": "client.admin, /etc/ceph/ceph.conf", "pool": "rbd", "image": "vol1",
                     "state": "errors", "errors": 3, "last_error": "Connection timed out"}}]});
        let text = render(View::Backends, &result);
        assert!(text.contains("open, errors (3 failed, last: Connection timed out)"), "{text}");
        assert!(text.contains("rbd:rbd/vol1 @ client.admin, /etc/ceph/ceph.conf"), "{text}");
        let result = json!({"pools": [{"name": "p", "device": "d", "open": true, "capacity_bytes": 64 << 20,
            "free_bytes": 32 << 20, "carves": [{"served": true}, {"served": false}], "management_subsystems": []}]});
        let text = render(View::Pools, &result);
        assert!(text.contains("p     d       64 MiB    32 MiB  2 (1 served)  -"), "{text}");
    }

    #[test]
    fn namespaces_render_as_a_table() {
        let result = json!({"namespaces": [{"nsid": 1, "size_bytes": 1 << 30, "block_size": 512, "backend": "ram",
            "source": "config", "nguid": "00112233445566778899aabbccddeeff", "hosts": []}]});
        let text = render(View::Namespaces, &result);
        assert!(
            text.starts_with("NSID  SIZE   BLOCK  BACKEND  SOURCE  NGUID                             QOS  HOSTS\n"),
            "{text}"
        );
        assert!(text.contains("-    no host\n"), "{text}");
        assert!(text.contains("1     1 GiB  512    ram      config  00112233"), "{text}");
    }
}

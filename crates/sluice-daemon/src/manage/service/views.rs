//! How namespaces and hosts read in the management API's answers.

use serde_json::{json, Value};

use super::attachment;
use nvme_target::{HostAccess, Namespace};

pub(super) fn namespace_json(
    namespace: &Namespace,
    in_config_file: bool,
    attachment: &nvme_target::Attachment,
) -> Value {
    let geometry = namespace.geometry();
    let (throttled_commands, throttled_seconds) = namespace.qos.namespace.throttled();
    let host_qos: Vec<Value> = namespace
        .qos
        .host_limits()
        .iter()
        .map(|(host, limits)| json!({ "host": host, "limits": sluice_config::qos::describe(limits) }))
        .collect();
    json!({
        "nsid": namespace.id.0,
        "backend": namespace.backend.kind(),
        "size_bytes": geometry.capacity_bytes(),
        "block_size": geometry.block_size_bytes,
        "blocks": geometry.block_count,
        "nguid": namespace.nguid.iter().map(|byte| format!("{byte:02x}")).collect::<String>(),
        "uuid": uuid::Uuid::from_bytes(namespace.uuid).hyphenated().to_string(),
        "source": if in_config_file { "config" } else if namespace.carve.is_some() { "pool" } else { "runtime" },
        "qos": sluice_config::qos::describe(&namespace.qos.namespace.limits()),
        "host_qos": host_qos,
        "qos_throttled_commands": throttled_commands,
        "qos_throttled_seconds": throttled_seconds,
        "all_hosts": *attachment == nvme_target::Attachment::AllHosts,
        "hosts": attachment::hosts_field(attachment),
    })
}

/// Allowed hosts without their secrets: only whether each has one.
pub(super) fn hosts_json(nqn: &str, hosts: &HostAccess) -> Value {
    let entries: Vec<Value> = hosts
        .hosts
        .iter()
        .map(|host| {
            json!({
                "host": host.nqn,
                "dhchap": host.dhchap_secret.is_some(),
                "bidirectional": host.dhchap_controller_secret.is_some(),
                "tls": host.tls_key.is_some(),
            })
        })
        .collect();
    json!({ "nqn": nqn, "allow_any_host": hosts.allow_any_host, "hosts": entries })
}

//! How namespaces and hosts read in the management API's answers.

use serde_json::{json, Value};

use crate::manage::protocol::{RpcError, METHOD_NOT_FOUND};
use management_client::methods::method_names;
use nvme_target::{Attachment, HostAccess, Namespace};

/// A running namespace, as (subsystem NQN, NSID).
pub(super) type NamespaceKey = (String, u32);

/// The refusal of a method that is not in the table, listing the ones that are.
pub(super) fn method_not_found(method: &str) -> RpcError {
    RpcError {
        code: METHOD_NOT_FOUND,
        message: format!("no method {method:?}; `rpc_methods` lists them"),
        data: Some(json!({ "method": method, "methods": method_names() })),
    }
}

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
        "hosts": hosts_field(attachment),
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

/// `api_version`: this API's version, and the daemon's release beside it.
pub(super) fn api_version() -> Value {
    json!({
        "api_version": management_client::methods::API_VERSION,
        "sluice_version": env!("CARGO_PKG_VERSION"),
    })
}

/// The `hosts` field of a namespace in `ns_list` and `subsystem_show`: `null` when
/// every admitted host sees it, else the list (empty: no host).
pub(super) fn hosts_field(attachment: &Attachment) -> Value {
    match attachment {
        Attachment::AllHosts => Value::Null,
        Attachment::Hosts(hosts) => json!(hosts),
    }
}

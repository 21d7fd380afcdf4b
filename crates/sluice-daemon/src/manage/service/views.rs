//! How namespaces and hosts read in the management API's answers.

use serde_json::{json, Value};

use super::attachment;
use crate::manage::document;
use nvme_target::{HostAccess, Namespace, Subsystem};
use toml_edit::DocumentMut;

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

/// The views that read the running target beside the config file.
impl super::Management {
    /// NSIDs the config file describes for `nqn` (the rest come from a pool).
    pub(super) fn configured_ids(&self, nqn: &str) -> Vec<u32> {
        let Some(file) = &self.config_file else { return Vec::new() };
        file.text
            .parse::<DocumentMut>()
            .ok()
            .and_then(|document| document::subsystem(&document, nqn).and_then(document::namespace_ids).ok())
            .unwrap_or_default()
    }

    pub(super) fn namespaces_json(&self, subsystem: &Subsystem) -> Vec<Value> {
        let configured = self.configured_ids(&subsystem.nqn);
        let table = subsystem.table();
        table
            .entries()
            .map(|entry| {
                namespace_json(&entry.namespace, configured.contains(&entry.namespace.id.0), &entry.attachment)
            })
            .collect()
    }

    pub(super) fn subsystem_json(&self, subsystem: &Subsystem, detailed: bool) -> Value {
        let controllers = self.target.controllers_of(subsystem.index);
        let hosts = subsystem.hosts.current();
        let mut summary = json!({
            "nqn": subsystem.nqn,
            "serial": subsystem.serial_number,
            "model": subsystem.model_number,
            "namespaces": subsystem.namespace_ids().len(),
            "capacity_bytes": subsystem.capacity_bytes(),
            "namespace_management": subsystem.supports_namespace_management(),
            "allow_any_host": hosts.allow_any_host,
            "hosts": hosts.hosts.len(),
            "controllers": controllers.len(),
        });
        if detailed {
            summary["namespace_list"] = Value::Array(self.namespaces_json(subsystem));
            summary["host_list"] = hosts_json(&subsystem.nqn, &hosts)["hosts"].clone();
            summary["controller_list"] = controllers
                .iter()
                .map(|controller| json!({ "cntlid": controller.id.0, "host": controller.host_nqn }))
                .collect();
        }
        summary
    }
}

/// `api_version`: this API's version, and the daemon's release beside it.
pub(super) fn api_version() -> Value {
    json!({
        "api_version": management_client::methods::API_VERSION,
        "sluice_version": env!("CARGO_PKG_VERSION"),
    })
}

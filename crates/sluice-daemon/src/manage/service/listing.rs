//! The subsystem and namespace views that read the running target beside the config
//! file (which NSIDs the file describes).

use serde_json::{json, Value};
use toml_edit::DocumentMut;

use super::views::{hosts_json, namespace_json};
use super::Management;
use crate::manage::document;
use nvme_target::Subsystem;

/// The views that read the running target beside the config file.
impl Management {
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

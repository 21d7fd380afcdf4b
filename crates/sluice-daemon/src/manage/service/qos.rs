//! `ns_qos`: a namespace's QoS limits, or one host's on it, changed live (Ceph's
//! gateway `namespace set_qos`). The limits go into the config file's
//! `[subsystem.namespace.qos]` table or the host's `[[subsystem.host.qos]]` entry,
//! are checked with the whole file (so a zero, negative or absurd value is refused
//! naming the key), written, and then set on the running namespace: connected hosts
//! keep their connections, and commands already waiting book again under the new
//! limits (a removed limit releases them).

use serde_json::{json, Value};
use toml_edit::{value, DocumentMut, Table};

use super::Management;
use crate::manage::assemble::edit_error;
use crate::manage::document;
use crate::manage::protocol::{Params, RpcError, APPLY_FAILED};
use sluice_config::qos::{self as config_qos, RATE_KEYS};
use sluice_config::Config;

/// Every key `ns_qos` sets: the rates and the burst.
const KEYS: [&str; 5] = [RATE_KEYS[0], RATE_KEYS[1], RATE_KEYS[2], RATE_KEYS[3], "burst_ms"];

impl Management {
    pub(super) fn ns_qos(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        let nsid = params.required_u32("nsid")?;
        let host = params.optional_string("host")?;
        let mut given = Vec::new();
        for key in KEYS {
            if let Some(number) = integer(&mut params, key)? {
                given.push((key, number));
            }
        }
        let remove = params.optional_string_list("remove")?.unwrap_or_default();
        params.finish("ns_qos")?;
        for key in &remove {
            if key != "all" && !KEYS.contains(&key.as_str()) {
                return Err(RpcError::invalid_params(
                    "remove",
                    format!("{key:?} is not a QoS key; give \"all\" or some of {}", KEYS.join(", ")),
                ));
            }
        }
        if given.is_empty() && remove.is_empty() {
            return Err(RpcError::invalid_params(
                "rw_ios_per_second",
                format!("nothing to change: give some of {} or remove = [\"all\"]", KEYS.join(", ")),
            ));
        }
        let subsystem = self.live_subsystem(&nqn)?;
        if subsystem.namespace(nvme_spec::NamespaceId(nsid)).is_none() && host.is_none() {
            return Err(RpcError::refused("nsid", format!("subsystem {nqn} has no namespace {nsid}"))
                .with_cause(management_client::codes::causes::NOT_FOUND));
        }
        let mut draft = self.draft()?;
        edit(&mut draft.document, &nqn, nsid, host.as_deref(), &given, &remove)?;
        let text = self.check(&draft)?;
        let config = Config::parse(&text).map_err(|error| RpcError::new(APPLY_FAILED, error))?;
        self.write(&text)?;
        if let Err(error) = config_qos::apply(&self.target, &config) {
            return Err(self.restore(draft.previous, error.to_string()));
        }
        tracing::info!(subsystem = %nqn, nsid, host = host.as_deref().unwrap_or("(all hosts)"), "management: QoS limits changed");
        let namespace = subsystem.namespace(nvme_spec::NamespaceId(nsid));
        let limits = match (&namespace, &host) {
            (Some(namespace), None) => config_qos::describe(&namespace.qos.namespace.limits()),
            (Some(namespace), Some(host)) => config_qos::describe(&namespace.qos.for_host(host).limits()),
            (None, _) => json!({}),
        };
        Ok(json!({ "nqn": nqn, "nsid": nsid, "host": host, "qos": limits }))
    }

    /// Sets every running namespace's limits to what the config file says (after a
    /// change that adds namespaces or removes hosts). Logged, never refused: the
    /// file was checked before it was written.
    pub(super) fn apply_qos_of_file(&self) {
        let Some(file) = &self.config_file else { return };
        let applied = Config::parse(&file.text)
            .map_err(|error| error.to_string())
            .and_then(|config| config_qos::apply(&self.target, &config).map_err(|error| error.to_string()));
        if let Err(error) = applied {
            tracing::error!(%error, "the QoS limits of the config file could not be applied");
        }
    }
}

/// An integer parameter passed on as written: the config check decides whether it
/// is a valid limit, so the message is the one a config file gets.
fn integer(params: &mut Params, key: &str) -> Result<Option<i64>, RpcError> {
    params.optional_integer(key)
}

/// Writes the limits into the namespace's `qos` table, or the host's `qos` entry for
/// `nsid`; `remove` names keys to drop first ("all": the whole table or entry).
fn edit(
    document: &mut DocumentMut,
    nqn: &str,
    nsid: u32,
    host: Option<&str>,
    given: &[(&str, i64)],
    remove: &[String],
) -> Result<(), RpcError> {
    let apply = |table: &mut Table| {
        for key in remove {
            if key == "all" {
                for key in KEYS {
                    table.remove(key);
                }
            } else {
                table.remove(key);
            }
        }
        for (key, number) in given {
            table.insert(key, value(*number));
        }
    };
    match host {
        None => {
            let namespace = document::namespace_mut(document, nqn, nsid).map_err(edit_error)?.ok_or_else(|| {
                RpcError::refused(
                    "nsid",
                    format!(
                        "namespace {nsid} of {nqn} is not in the config file (a host created it through Namespace \
                         Management): limit it per host (give `host`), or describe it in the file"
                    ),
                )
            })?;
            let location = format!("subsystem {nqn} namespace {nsid}");
            let qos = document::sub_table_mut(namespace, "qos", &location).map_err(edit_error)?;
            apply(qos);
            if qos.is_empty() {
                namespace.remove("qos");
            }
        }
        Some(host) => {
            let entry = document::host_mut(document, nqn, host).map_err(edit_error)?.ok_or_else(|| {
                RpcError::refused(
                    "host",
                    format!(
                        "host {host} has no [[subsystem.host]] entry in {nqn}; allow it first (`sluice host allow \
                         {nqn} {host}`), then set its limits"
                    ),
                )
            })?;
            let location = format!("subsystem {nqn} host {host}");
            let entries = document::sub_array_of_tables_mut(entry, "qos", &location).map_err(edit_error)?;
            let position = entries
                .iter()
                .position(|table| table.get("nsid").and_then(toml_edit::Item::as_integer) == Some(i64::from(nsid)));
            let position = match position {
                Some(position) => position,
                None => {
                    let mut table = Table::new();
                    table.insert("nsid", value(i64::from(nsid)));
                    entries.push(table);
                    entries.len() - 1
                }
            };
            if let Some(table) = entries.get_mut(position) {
                apply(table);
                if KEYS.iter().all(|key| !table.contains_key(key)) {
                    entries.remove(position);
                }
            }
            if entries.is_empty() {
                entry.remove("qos");
            }
        }
    }
    Ok(())
}

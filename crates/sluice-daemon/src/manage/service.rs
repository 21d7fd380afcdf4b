//! The management methods over the running target and its config file.
//!
//! Every change runs the same steps, and stops at the first that fails:
//! 1. edit the config file's TOML document (comments and layout kept);
//! 2. parse and check the whole edited configuration, without side effects;
//! 3. build the new piece (a backend, a subsystem) through the config module;
//! 4. write the file atomically (temporary file, fsync, rename, fsync directory);
//! 5. apply the change to the running target;
//! 6. if the target refuses it, put the previous file back.
//!
//! So a refused change leaves the file byte for byte as it was and the running
//! target untouched, and an accepted one is on disk before any host sees it: a
//! restart from the file brings back exactly what was running.
//!
//! Allowed hosts apply at once: the subsystem's rules are replaced whole, the
//! discovery log generation moves, and controllers of hosts the new rules refuse are
//! torn down (connections of hosts still allowed keep running; a rotated secret is
//! used from the next Connect or re-authentication on).
//!
//! Namespaces over a named `[[backend]]` (`device`) or carved from a `[[pool]]`
//! (`pool`) use the storage the target holds open (`storage`, by name; entries
//! nothing used yet are opened at their first use), never a second opening of it;
//! `backends.rs` has the checks. A reload (SIGHUP) applies an edited file through
//! the same steps, without the edit and the write (`reload.rs`).
//!
//! Listeners apply at once too: an added address is bound on every runtime thread
//! before the file is written (so "in use" refuses it with nothing changed), a
//! removed one stops accepting and closes only its own connections
//! (`listeners.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use toml_edit::{value, DocumentMut, Table};

use management_client::codes::causes;
use nvme_spec::NamespaceId;
use nvme_target::limits::MAX_NAMESPACE_ID;
use nvme_target::subsystem::validate_nqn;
use nvme_target::{HostAccess, Subsystem, Target};

use super::assemble::{self, edit_error};
use super::document::{self, Namespaces};
use super::protocol::{
    Params, RpcError, SizeParam, APPLY_FAILED, CONFIG_CHANGED_ON_DISK, CONFIG_INVALID, GROUP_CONFIG_CONFLICT,
    NO_CONFIG_FILE, PERSIST_FAILED,
};
use sluice_config::OpenStorage;
use views::{hosts_json, method_not_found, namespace_json};

// The method table lives with the API's types, which every side shares.
pub use management_client::methods::{method_effect, method_names, read_only_method_names, Effect};

/// A listener the runtime accepts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveListener {
    pub address: SocketAddr,
    pub discovery_only: bool,
    /// TLS on this listener (TP 8011).
    pub secure_channel: nvme_target::SecureChannel,
}

/// The config file the running target was built from, as last read or written.
struct ConfigFile {
    path: PathBuf,
    text: String,
}

/// A change being prepared: the edited document and the text it replaces.
struct Draft {
    previous: String,
    document: DocumentMut,
}

/// The management API's view of the running target.
pub struct Management {
    target: Arc<Target>,
    config_file: Option<ConfigFile>,
    /// The listeners when no runtime is attached (`live_listeners` is None).
    active_listeners: Vec<ActiveListener>,
    /// The runtime's listeners, changed live (`with_live_listeners`).
    live_listeners: Option<target_server::LiveListeners>,
    /// The named backends and pools the target holds open (see the module comment).
    storage: OpenStorage,
    /// The gateway coordinator's published state, when this target is a gateway.
    gateway: Option<sluice_gateway::service::GatewayHandle>,
    /// A gateway whose group's configuration is kept in the cluster: changes write
    /// the group's part there and the gateway's own part to the file.
    group_config: Option<GroupConfigState>,
    /// The thread copying RBD clones (`flatten`), started at the first copy asked for.
    flattener: Option<super::flatten::Flattener>,
}

use sluice_gateway::group_config::GroupConfigState;

impl Management {
    /// Manages `target`, built from the file at `config_path` (None: the embedded
    /// default, and no change can be made persistent). A symbolic link is resolved
    /// so that writes replace the file it points at, not the link.
    pub fn new(
        target: Arc<Target>,
        config_path: Option<&Path>,
        active_listeners: Vec<ActiveListener>,
    ) -> std::io::Result<Management> {
        let config_file = match config_path {
            None => None,
            Some(path) => {
                let path = std::fs::canonicalize(path)?;
                let text = std::fs::read_to_string(&path)?;
                Some(ConfigFile { path, text })
            }
        };
        Ok(Management {
            target,
            config_file,
            active_listeners,
            live_listeners: None,
            storage: OpenStorage::default(),
            gateway: None,
            group_config: None,
            flattener: None,
        })
    }

    /// Keeps the group's part of the configuration in the cluster (the gateway runs
    /// `running_text`: the file's own part with the group's version).
    pub fn with_group_config(mut self, state: Option<GroupConfigState>, running_text: Option<String>) -> Management {
        if let (Some(file), Some(text)) = (self.config_file.as_mut(), running_text) {
            file.text = text;
        }
        self.group_config = state;
        self
    }

    /// `file_text` with the group's part replaced by the version this gateway runs
    /// (unchanged when the group's configuration is the file's).
    pub(crate) fn with_group_part(&self, file_text: &str) -> Result<String, String> {
        match &self.group_config {
            Some(state) => sluice_gateway::group_config::merge_text(file_text, &state.current.text),
            None => Ok(file_text.to_string()),
        }
    }

    /// A member changed the group's configuration (a notice, or a newer version
    /// found by the periodic check): apply the cluster's version if it is newer.
    pub fn apply_group_config(&mut self) {
        let Some(state) = &self.group_config else { return };
        let latest = match state.store.load() {
            Ok(Some(latest)) if latest.version > state.current.version => latest,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(%error, "cannot read the group's configuration; retrying at the next check");
                return;
            }
        };
        let text = match sluice_gateway::group_config::merge_text(&state.file_text, &latest.text) {
            Ok(text) => text,
            Err(error) => {
                tracing::error!(version = latest.version, %error, "the group's configuration cannot be applied here");
                if let Some(state) = self.group_config.as_mut() {
                    state.pending = Some(latest.version);
                }
                return;
            }
        };
        let shown = format!("{} version {}", state.store.describe(), latest.version);
        let outcome = self.reload_text(text, &shown);
        if let Some(state) = self.group_config.as_mut() {
            if outcome.refused.is_none() && outcome.failed == 0 {
                tracing::info!(
                    version = latest.version,
                    applied = outcome.applied,
                    "applied the group's configuration"
                );
                state.current = latest;
                state.pending = None;
            } else {
                tracing::error!(
                    version = latest.version,
                    "{}; the group's version stays pending here",
                    outcome.summary()
                );
                state.pending = Some(latest.version);
            }
        }
        self.publish_group_config_versions();
    }

    /// The group's version this gateway runs, and one it could not apply yet.
    pub fn group_config_versions(&self) -> Option<(u64, Option<u64>)> {
        self.group_config.as_ref().map(|state| (state.current.version, state.pending))
    }

    /// Puts the group configuration versions into the gateway status the metrics
    /// read.
    fn publish_group_config_versions(&self) {
        if let Some(gateway) = &self.gateway {
            gateway.status.lock().unwrap_or_else(|poison| poison.into_inner()).config_versions =
                self.group_config_versions();
        }
    }

    /// The named storage the target was built with (`Config::open`). Without it,
    /// namespaces over named backends and pools would open them a second time.
    pub fn with_storage(mut self, storage: OpenStorage) -> Management {
        self.storage = storage;
        self
    }

    /// Answers `gateway_status` from the gateway coordinator's published state.
    pub fn with_gateway(mut self, gateway: Option<sluice_gateway::service::GatewayHandle>) -> Management {
        self.gateway = gateway;
        self.publish_group_config_versions();
        self
    }

    /// Runs one method.
    pub fn call(&mut self, method: &str, params: Params) -> Result<Value, RpcError> {
        if method_effect(method).is_none() {
            return Err(method_not_found(method));
        }
        match method {
            "subsystem_add" => self.subsystem_add(params),
            "subsystem_remove" => self.subsystem_remove(params),
            "subsystem_list" => self.subsystem_list(params),
            "subsystem_show" => self.subsystem_show(params),
            "ns_add" => self.ns_add(params),
            "ns_remove" => self.ns_remove(params),
            "ns_list" => self.ns_list(params),
            "ns_qos" => self.ns_qos(params),
            "ns_resize" => self.ns_resize(params),
            "ns_attach" => self.ns_attach(params),
            "ns_detach" => self.ns_detach(params),
            "host_allow" => self.host_allow(params),
            "host_deny" => self.host_deny(params),
            "host_list" => self.host_list(params),
            "listener_add" => self.listener_add(params),
            "listener_remove" => self.listener_remove(params),
            "listener_list" => self.listener_list(params),
            "config_show" => self.config_show(params),
            "target_show" => self.target_show(params),
            "backend_list" => self.backend_list(params),
            "backend_remove" => self.backend_remove(params),
            "pool_list" => self.pool_list(params),
            "limits_show" => self.limits_show(params),
            "gateway_status" => self.gateway_status(params),
            "gateway_drain" => self.gateway_drain(params),
            "gateway_undrain" => self.gateway_undrain(params),
            "gateway_move" => self.gateway_move(params),
            "rbd_snapshot_create" => self.rbd_snapshot_create(params),
            "rbd_snapshot_remove" => self.rbd_snapshot_remove(params),
            "rbd_snapshot_list" => self.rbd_snapshot_list(params),
            "rpc_methods" => {
                params.finish(method)?;
                Ok(json!(method_names()))
            }
            "api_version" => {
                params.finish(method)?;
                Ok(views::api_version())
            }
            _ => Err(method_not_found(method)),
        }
    }

    // ---- subsystems ----

    fn subsystem_add(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        let serial = params.optional_string("serial")?;
        let model = params.optional_string("model")?;
        let allow_any_host = params.optional_bool("allow_any_host")?;
        params.finish("subsystem_add")?;
        validate_nqn(&nqn).map_err(|reason| RpcError::invalid_params("nqn", reason))?;
        if self.target.subsystem_by_nqn(&nqn).is_some() {
            return Err(
                RpcError::refused("nqn", format!("subsystem {nqn} already exists")).with_cause(causes::ALREADY_EXISTS)
            );
        }
        let mut draft = self.draft()?;
        let mut table = Table::new();
        table.insert("nqn", value(nqn.as_str()));
        if let Some(serial) = &serial {
            table.insert("serial", value(serial.as_str()));
        }
        if let Some(model) = &model {
            table.insert("model", value(model.as_str()));
        }
        if let Some(allow_any_host) = allow_any_host {
            table.insert("allow_any_host", value(allow_any_host));
        }
        document::add_subsystem(&mut draft.document, table).map_err(edit_error)?;
        let text = self.check(&draft)?;
        let built = assemble::build_subsystem(&draft.document, &nqn, Namespaces::All, &self.storage)?;
        self.write(&text)?;
        match self.apply_subsystem(built) {
            Ok(subsystem) => {
                tracing::info!(subsystem = %nqn, "management: subsystem added");
                self.apply_qos_of_file();
                Ok(self.subsystem_json(&subsystem, false))
            }
            Err(refusal) => Err(self.restore(draft.previous, refusal)),
        }
    }

    fn subsystem_remove(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        params.finish("subsystem_remove")?;
        let subsystem = self.live_subsystem(&nqn)?;
        let controllers = self.target.controllers_of(subsystem.index).len();
        let mut draft = self.draft()?;
        document::remove_subsystem(&mut draft.document, &nqn).map_err(edit_error)?;
        let text = self.check(&draft)?;
        self.write(&text)?;
        match self.target.remove_subsystem(&nqn) {
            Ok(_) => {
                tracing::info!(subsystem = %nqn, controllers, "management: subsystem removed");
                Ok(json!({ "nqn": nqn, "removed": true, "controllers_disconnected": controllers }))
            }
            Err(error) => Err(self.restore(draft.previous, error.to_string())),
        }
    }

    fn subsystem_list(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("subsystem_list")?;
        let subsystems: Vec<Value> =
            self.target.subsystems().iter().map(|subsystem| self.subsystem_json(subsystem, false)).collect();
        Ok(json!({ "subsystems": subsystems }))
    }

    fn subsystem_show(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        params.finish("subsystem_show")?;
        let subsystem = self.live_subsystem(&nqn)?;
        Ok(self.subsystem_json(&subsystem, true))
    }

    // ---- namespaces ----

    fn ns_add(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        let requested_id = params.optional_u32("nsid")?;
        // The namespace's keys, in the order a person would write them.
        let mut table = Table::new();
        for key in ["backend", "device", "pool"] {
            if let Some(text) = params.optional_string(key)? {
                table.insert(key, value(text));
            }
        }
        match params.optional_size("size")? {
            Some(SizeParam::Bytes(bytes)) => {
                let bytes = i64::try_from(bytes).map_err(|_| RpcError::invalid_params("size", "is too large"))?;
                table.insert("size", value(bytes));
            }
            Some(SizeParam::Text(text)) => {
                table.insert("size", value(text));
            }
            None => {}
        }
        if let Some(thin) = params.optional_bool("thin")? {
            table.insert("thin", value(thin));
        }
        if let Some(block_size) = params.optional_u32("block_size")? {
            table.insert("block_size", value(i64::from(block_size)));
        }
        if let Some(path) = params.optional_string("path")? {
            table.insert("path", value(path));
        }
        if let Some(direct_io) = params.optional_bool("direct_io")? {
            table.insert("direct_io", value(direct_io));
        }
        for key in ["nguid", "uuid"] {
            if let Some(text) = params.optional_string(key)? {
                if uuid::Uuid::try_parse(&text).is_err() {
                    return Err(RpcError::invalid_params(
                        key,
                        format!("{text:?} is not 32 hex digits (dashes allowed)"),
                    ));
                }
                table.insert(key, value(text));
            }
        }
        // Which hosts see it (absent: every admitted host; empty: none yet).
        if let Some(hosts) = params.optional_string_list("hosts")? {
            table.insert("hosts", value(hosts.iter().map(String::as_str).collect::<toml_edit::Array>()));
        }
        let rbd = params.optional_string("rbd")?;
        // A new image that is a copy of an RBD snapshot (rbd_images.rs).
        let clone_from = params.optional_string("clone_from")?;
        params.finish("ns_add")?;
        if clone_from.is_some() && rbd.is_none() {
            return Err(RpcError::invalid_params("clone_from", "goes with rbd = \"POOL/IMAGE\", the image to create"));
        }
        if rbd.is_none() && ["backend", "device", "pool"].iter().all(|key| !table.contains_key(key)) {
            return Err(RpcError::invalid_params(
                "backend",
                "missing: give backend = \"ram\", \"null\" or \"file\", a device, a pool, or an rbd image",
            ));
        }
        let subsystem = self.live_subsystem(&nqn)?;
        self.refuse_identifier_in_use(&table)?;
        let live_table = subsystem.table();
        let mut draft = self.draft()?;
        // A backend added for the image is new: nothing uses it yet.
        let new_backend = match &rbd {
            Some(image) => backends::inline_rbd(&mut draft.document, image, &mut table)?,
            None => false,
        };
        let id = match requested_id {
            Some(id) if id == 0 || id > MAX_NAMESPACE_ID => {
                return Err(RpcError::invalid_params("nsid", format!("{id} is outside 1..={MAX_NAMESPACE_ID}")))
            }
            Some(id) if live_table.contains(NamespaceId(id)) => {
                return Err(RpcError::refused("nsid", format!("subsystem {nqn} already has namespace {id}"))
                    .with_cause(causes::ALREADY_EXISTS))
            }
            Some(id) => id,
            None => {
                // The lowest NSID neither the running target nor the file uses.
                let in_file =
                    document::subsystem(&draft.document, &nqn).and_then(document::namespace_ids).map_err(edit_error)?;
                (1..=MAX_NAMESPACE_ID)
                    .find(|&id| !live_table.contains(NamespaceId(id)) && !in_file.contains(&id))
                    .ok_or_else(|| RpcError::refused("nsid", format!("subsystem {nqn} has no free NSID left")))?
            }
        };
        if let (Ok(running), false) = (sluice_config::Config::parse(&draft.previous), new_backend) {
            self.refuse_unusable_storage(&running, &nqn, id, &table)?;
        }
        let pool = table.get("pool").and_then(toml_edit::Item::as_str).map(str::to_string);
        document::add_namespace(&mut draft.document, &nqn, id, table).map_err(edit_error)?;
        let text = self.check(&draft).map_err(|error| backends::name_the_size(error, pool.as_deref()))?;
        // Asked for as soon as the clone exists: a namespace refused after this point
        // must not leave a clone that keeps its parent snapshot for good.
        let copying = match (&clone_from, &rbd) {
            (Some(source), Some(target)) => {
                let cluster = self.clone_for_namespace(&draft.document, source, target)?;
                let (pool, image) = rbd_images::image_spec("rbd", target)?;
                Some(self.request_copy(cluster, pool, image))
            }
            _ => None,
        };
        let built = assemble::build_namespace(&draft.document, &nqn, id, &self.storage)?;
        self.refuse_served(&built.reused_backends, &[])?;
        self.write(&text)?;
        match self.apply_namespace(&subsystem, built) {
            Ok(mut added) => {
                tracing::info!(subsystem = %nqn, nsid = id, "management: namespace added");
                if let Some(copying) = copying {
                    // Served already; the copy that frees it from its parent runs apart.
                    added["copying"] = json!(copying);
                }
                // Hosts' limits on every namespace of the subsystem hold on it too.
                self.apply_qos_of_file();
                Ok(added)
            }
            Err(refusal) => Err(self.restore(draft.previous, refusal)),
        }
    }

    /// An NGUID or UUID names one namespace (NVMe Base 2.0, 4.5.1): a host finds
    /// its device by it, and a CSI driver finds the namespace it made by it, so a
    /// second namespace with the same one anywhere on this target is refused.
    fn refuse_identifier_in_use(&self, table: &Table) -> Result<(), RpcError> {
        for key in ["nguid", "uuid"] {
            let Some(wanted) =
                table.get(key).and_then(toml_edit::Item::as_str).and_then(|text| uuid::Uuid::try_parse(text).ok())
            else {
                continue;
            };
            for subsystem in self.target.subsystems() {
                for entry in subsystem.table().entries() {
                    let namespace = &entry.namespace;
                    let used = if key == "nguid" { namespace.nguid } else { namespace.uuid };
                    if used == *wanted.as_bytes() {
                        return Err(RpcError::refused(
                            key,
                            format!(
                                "{key} {wanted} is already used by namespace {} of {}",
                                namespace.id.0, subsystem.nqn
                            ),
                        )
                        .with_cause(causes::ALREADY_EXISTS));
                    }
                }
            }
        }
        Ok(())
    }

    fn ns_remove(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        let id = params.required_u32("nsid")?;
        // Also delete the RBD image it is served from (rbd_images.rs).
        let delete_image = params.optional_bool("delete_image")?.unwrap_or(false);
        params.finish("ns_remove")?;
        let subsystem = self.live_subsystem(&nqn)?;
        if subsystem.namespace(NamespaceId(id)).is_none() {
            return Err(RpcError::refused("nsid", format!("subsystem {nqn} has no namespace {id}"))
                .with_cause(causes::NOT_FOUND));
        }
        if delete_image {
            return self.ns_remove_with_image(&nqn, id, &subsystem);
        }
        let mut draft = self.draft()?;
        // Not in the file: a namespace a host created through Namespace Management,
        // persisted in its pool's table, which `remove_namespace` updates.
        let in_file = document::remove_namespace(&mut draft.document, &nqn, id).map_err(edit_error)?;
        if in_file {
            let text = self.check(&draft)?;
            self.write(&text)?;
        }
        match subsystem.remove_namespace(NamespaceId(id)) {
            Ok(change) => {
                self.target.notify_namespace_change(&subsystem, &change);
                tracing::info!(subsystem = %nqn, nsid = id, in_file, "management: namespace removed");
                Ok(json!({ "nqn": nqn, "nsid": id, "removed": true, "removed_from_config_file": in_file }))
            }
            Err(error) if in_file => Err(self.restore(draft.previous, error.to_string())),
            Err(error) => Err(RpcError::new(APPLY_FAILED, format!("the running target refused: {error}"))),
        }
    }

    fn ns_list(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        params.finish("ns_list")?;
        let subsystem = self.live_subsystem(&nqn)?;
        Ok(json!({ "nqn": nqn, "namespaces": self.namespaces_json(&subsystem) }))
    }

    // ---- hosts ----

    fn host_allow(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        let host = params.required_string("host")?;
        let secret = params.optional_string("dhchap_secret")?;
        let controller_secret = params.optional_string("dhchap_ctrl_secret")?;
        let hashes = params.optional_string_list("dhchap_hashes")?;
        let groups = params.optional_string_list("dhchap_groups")?;
        let tls_key = params.optional_string("tls_key")?;
        let tls_key_derivation = params.optional_string("tls_key_derivation")?;
        params.finish("host_allow")?;
        validate_nqn(&host).map_err(|reason| RpcError::invalid_params("host", reason))?;
        if controller_secret.is_some() && secret.is_none() {
            return Err(RpcError::invalid_params(
                "dhchap_ctrl_secret",
                "bidirectional authentication needs the host's secret too: give dhchap_secret",
            ));
        }
        let subsystem = self.live_subsystem(&nqn)?;
        let mut draft = self.draft()?;
        let mut table = Table::new();
        if let Some(secret) = &secret {
            table.insert("dhchap_secret", value(secret.as_str()));
        }
        if let Some(controller_secret) = &controller_secret {
            table.insert("dhchap_ctrl_secret", value(controller_secret.as_str()));
        }
        for (key, names) in [("dhchap_hashes", &hashes), ("dhchap_groups", &groups)] {
            if let Some(names) = names {
                table.insert(key, value(names.iter().map(String::as_str).collect::<toml_edit::Array>()));
            }
        }
        // Checked with the rest of the entry when the draft is checked (the key's
        // error never quotes it).
        for (key, text) in [("tls_key", &tls_key), ("tls_key_derivation", &tls_key_derivation)] {
            if let Some(text) = text {
                table.insert(key, value(text.as_str()));
            }
        }
        let change = document::allow_host(&mut draft.document, &nqn, &host, table).map_err(edit_error)?;
        let text = self.check(&draft)?;
        // The rules exactly as the next start will read them (secrets parsed).
        let rules = assemble::build_subsystem(&draft.document, &nqn, Namespaces::None, &self.storage)?.spec.hosts;
        self.write(&text)?;
        let disconnected = self.apply_host_rules(&subsystem, rules.clone());
        tracing::info!(subsystem = %nqn, %host, ?change, authenticated = secret.is_some(), tls = tls_key.is_some(),
            disconnected, "management: host allowed");
        Ok(json!({
            "nqn": nqn,
            "host": host,
            "change": match change { document::HostChange::Added => "added", document::HostChange::Updated => "updated" },
            "dhchap": secret.is_some(),
            "bidirectional": controller_secret.is_some(),
            "tls": tls_key.is_some(),
            "allow_any_host": rules.allow_any_host,
            "allowed_hosts": rules.hosts.len(),
            "controllers_disconnected": disconnected,
        }))
    }

    fn host_deny(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        let host = params.required_string("host")?;
        params.finish("host_deny")?;
        let subsystem = self.live_subsystem(&nqn)?;
        self.refuse_deny_of_attached_host(&nqn, &host)?;
        let mut draft = self.draft()?;
        document::deny_host(&mut draft.document, &nqn, &host).map_err(edit_error)?;
        let text = self.check(&draft)?;
        let rules = assemble::build_subsystem(&draft.document, &nqn, Namespaces::None, &self.storage)?.spec.hosts;
        self.write(&text)?;
        let disconnected = self.apply_host_rules(&subsystem, rules.clone());
        // Its limits went with its entry.
        self.apply_qos_of_file();
        tracing::info!(subsystem = %nqn, %host, disconnected, "management: host denied");
        Ok(json!({
            "nqn": nqn,
            "host": host,
            "change": "removed",
            "allow_any_host": rules.allow_any_host,
            "allowed_hosts": rules.hosts.len(),
            "controllers_disconnected": disconnected,
        }))
    }

    /// Puts `rules` in force on `subsystem`: later Connects and discovery log reads
    /// see them, and controllers of hosts they refuse, or whose TLS key they add,
    /// replace or remove, are torn down (their queues close at their next check):
    /// a session made with a revoked key must not outlive it, and a host that gets a
    /// key may connect over TLS only. Returns how many were torn down.
    fn apply_host_rules(&self, subsystem: &Subsystem, rules: HostAccess) -> usize {
        let before = subsystem.hosts.current();
        subsystem.hosts.replace(rules);
        // The discovery log lists the subsystem only to allowed hosts.
        self.target.bump_discovery_generation();
        let rules = subsystem.hosts.current();
        let tls_key_of = |access: &HostAccess, host: &str| {
            access
                .hosts
                .iter()
                .find(|entry| entry.nqn == host)
                .and_then(|entry| entry.tls_key.clone().map(|key| (key, entry.tls_key_derivation)))
        };
        // A generated PSK (secure channel concatenation) stands for the secret it came
        // from: a host whose secret or concat setting changed loses its PSKs, and its
        // controllers go like those of a changed TLS key.
        let concat_secret_of = |access: &HostAccess, host: &str| {
            access.entry(host).filter(|entry| entry.concat).map(|entry| entry.dhchap_secret.clone())
        };
        for entry in &before.hosts {
            if concat_secret_of(&before, &entry.nqn) != concat_secret_of(&rules, &entry.nqn) {
                self.target.generated_psks.forget(&entry.nqn, Some(&subsystem.nqn));
            }
        }
        let mut disconnected = 0;
        for controller in self.target.controllers_of(subsystem.index) {
            let host = controller.host_nqn.as_str();
            let refused = !rules.allows(host);
            let key_changed = tls_key_of(&before, host) != tls_key_of(&rules, host)
                || concat_secret_of(&before, host) != concat_secret_of(&rules, host);
            if refused || key_changed {
                if key_changed && !refused {
                    tracing::info!(subsystem = %subsystem.nqn, host, controller = controller.id.0,
                        "the host's TLS key (or concat secret) changed: disconnecting its controller (it reconnects with the new key)");
                }
                controller.tear_down();
                disconnected += 1;
            }
        }
        disconnected
    }

    fn host_list(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        params.finish("host_list")?;
        let subsystem = self.live_subsystem(&nqn)?;
        Ok(hosts_json(&nqn, &subsystem.hosts.current()))
    }

    // ---- listeners: listeners.rs ----

    // ---- whole target ----

    fn config_show(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("config_show")?;
        Ok(match &self.config_file {
            Some(file) => json!({ "path": file.path.display().to_string(), "persistent": true, "text": file.text }),
            None => json!({ "path": null, "persistent": false, "text": null }),
        })
    }

    fn target_show(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("target_show")?;
        let settings = self.target.settings;
        Ok(json!({
            "subsystems": self.target.subsystems().len(),
            "listeners": self.accepting_listeners().iter().map(|active| active.address.to_string()).collect::<Vec<_>>(),
            "max_io_queues_per_controller": settings.max_io_queues_per_controller,
            "max_io_queue_depth": settings.max_io_queue_depth,
            "discovery_generation": self.target.discovery_generation(),
            "config_file": self.config_file.as_ref().map(|file| file.path.display().to_string()),
        }))
    }

    // ---- the steps every change shares ----

    /// Step 1: the file's document, refused when the file on disk is not what the
    /// running target was built from (someone edited it by hand): writing our edit
    /// over theirs would lose it, and applying theirs is a reload.
    fn draft(&self) -> Result<Draft, RpcError> {
        let file = self.config_file.as_ref().ok_or_else(|| {
            RpcError::new(
                NO_CONFIG_FILE,
                "sluice serve runs without a config file, so changes cannot be made persistent; \
                 start it with --config FILE (`sluice config default > FILE` writes a starting point)",
            )
        })?;
        let on_disk = std::fs::read_to_string(&file.path).map_err(|error| {
            RpcError::new(PERSIST_FAILED, format!("cannot read the config file {}: {error}", file.path.display()))
        })?;
        let expected_on_disk = self.group_config.as_ref().map_or(&file.text, |state| &state.file_text);
        if on_disk != *expected_on_disk {
            return Err(RpcError {
                code: CONFIG_CHANGED_ON_DISK,
                message: format!(
                    "the config file {} was changed outside the management API since sluice serve loaded it; \
                     put the old content back, or reload sluice serve (SIGHUP, `systemctl reload sluice`) to run what \
                     the file says",
                    file.path.display()
                ),
                data: Some(json!({ "path": file.path.display().to_string() })),
            });
        }
        // With the group's configuration in the cluster, the change edits what this
        // gateway runs: its file's own part and the group's version.
        let running = self.with_group_part(&on_disk).map_err(|error| RpcError::new(CONFIG_INVALID, error))?;
        let document = running.parse::<DocumentMut>().map_err(|error| {
            RpcError::new(CONFIG_INVALID, format!("the config file {} does not parse: {error}", file.path.display()))
        })?;
        Ok(Draft { previous: running, document })
    }

    /// Step 2: the edited text, parsed and checked.
    fn check(&self, draft: &Draft) -> Result<String, RpcError> {
        let text = draft.document.to_string();
        assemble::parse_and_check(&text)?;
        Ok(text)
    }

    /// Step 4: the new file, on disk durably; with the group's configuration in the
    /// cluster, its group part written there first (against the version this gateway
    /// runs) and the file's own part to the file.
    fn write(&mut self, text: &str) -> Result<(), RpcError> {
        if self.group_config.is_some() {
            return self.write_to_group(text);
        }
        let Some(file) = self.config_file.as_mut() else {
            return Err(RpcError::new(NO_CONFIG_FILE, "no config file"));
        };
        storage::durable_file::write_atomically(&file.path, text.as_bytes()).map_err(|error| {
            RpcError::new(
                PERSIST_FAILED,
                format!("cannot write the config file {}: {error}; nothing was changed", file.path.display()),
            )
        })?;
        file.text = text.to_string();
        Ok(())
    }

    fn write_to_group(&mut self, text: &str) -> Result<(), RpcError> {
        use sluice_gateway::group_config::{group_text, local_text, GroupConfig, WriteError};
        let (Some(file), Some(state)) = (self.config_file.as_mut(), self.group_config.as_mut()) else {
            return Err(RpcError::new(NO_CONFIG_FILE, "no config file"));
        };
        let invalid = |error: String| RpcError::new(CONFIG_INVALID, error);
        let group = group_text(text).map_err(invalid)?;
        if group != state.current.text {
            match state.store.replace(state.current.version, &group) {
                Ok(version) => {
                    tracing::info!(version, "management: the group's configuration changed");
                    state.current = GroupConfig { version, text: group };
                }
                Err(WriteError::Conflict { current }) => {
                    return Err(RpcError {
                        code: GROUP_CONFIG_CONFLICT,
                        message: format!(
                            "the gateway group's configuration was changed through another gateway (the cluster holds version {current}, this gateway runs version {}); nothing was changed: retry once this gateway has applied it (`sluice gateway status` shows the version it runs)",
                            state.current.version
                        ),
                        data: Some(json!({ "cluster_version": current, "running_version": state.current.version })),
                    });
                }
                Err(WriteError::Cluster(error)) => {
                    return Err(RpcError::new(PERSIST_FAILED, format!("{error}; nothing was changed")));
                }
            }
        }
        // The file keeps its own part as it was written (a seed of the group's part
        // it holds is not touched: it is used only by an empty group).
        let own = local_text(text).map_err(invalid)?;
        if local_text(&state.file_text).map_err(invalid)? != own {
            let file_document = state.file_text.parse::<DocumentMut>().map_err(|error| invalid(error.to_string()))?;
            let seed = sluice_gateway::group_config::group_part(&file_document);
            let new_file = sluice_gateway::group_config::merge(
                &own.parse::<DocumentMut>().map_err(|error| invalid(error.to_string()))?,
                &seed,
            )
            .to_string();
            storage::durable_file::write_atomically(&file.path, new_file.as_bytes()).map_err(|error| {
                RpcError::new(PERSIST_FAILED, format!("cannot write the config file {}: {error}", file.path.display()))
            })?;
            state.file_text = new_file;
        }
        file.text = text.to_string();
        self.publish_group_config_versions();
        Ok(())
    }

    /// Step 6: the running target refused; put the previous file back.
    fn restore(&mut self, previous: String, refusal: String) -> RpcError {
        if self.group_config.is_some() {
            return match self.write_to_group(&previous) {
                Ok(()) => RpcError {
                    code: APPLY_FAILED,
                    message: format!("the running target refused the change ({refusal}); the group's previous configuration was written back"),
                    data: Some(json!({ "file_restored": true, "reason": refusal })),
                },
                Err(error) => RpcError {
                    code: APPLY_FAILED,
                    message: format!(
                        "the running target refused the change ({refusal}) and the group's previous configuration could not be written back ({}): the other gateways may apply a change this one refused",
                        error.message
                    ),
                    data: Some(json!({ "file_restored": false, "reason": refusal })),
                },
            };
        }
        let Some(file) = self.config_file.as_mut() else {
            return RpcError::new(APPLY_FAILED, format!("the running target refused the change: {refusal}"));
        };
        match storage::durable_file::write_atomically(&file.path, previous.as_bytes()) {
            Ok(()) => {
                file.text = previous;
                RpcError {
                    code: APPLY_FAILED,
                    message: format!("the running target refused the change ({refusal}); the config file was restored"),
                    data: Some(json!({ "file_restored": true, "reason": refusal })),
                }
            }
            Err(error) => {
                tracing::error!(path = %file.path.display(), %error, %refusal,
                    "the running target refused a change and the previous config file could not be restored");
                RpcError {
                    code: APPLY_FAILED,
                    message: format!(
                        "the running target refused the change ({refusal}) and the previous config file could not be \
                         restored ({error}): {} describes a change the running target does not have; \
                         restore it from your backup",
                        file.path.display()
                    ),
                    data: Some(json!({ "file_restored": false, "reason": refusal })),
                }
            }
        }
    }

    // ---- views ----

    fn live_subsystem(&self, nqn: &str) -> Result<Arc<Subsystem>, RpcError> {
        self.target.subsystem_by_nqn(nqn).ok_or_else(|| {
            RpcError::refused("nqn", format!("no subsystem {nqn} in the running target (`sluice subsystem list`)"))
                .with_cause(causes::NOT_FOUND)
        })
    }
}

mod attachment;
mod backends;
mod gateway;
mod listeners;
mod listing;
mod qos;
mod rbd_images;
mod reload;
mod resize;
mod views;
pub use resize::refresh_namespace_sizes;

#[cfg(test)]
mod tests;

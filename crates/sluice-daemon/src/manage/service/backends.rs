//! Named storage through the management API: the checks that let a namespace use a
//! `[[backend]]` (`device`) or carve a `[[pool]]` while the target runs, applying a
//! built namespace, and the read-only `backend_list`, `pool_list` and `limits_show`.
//!
//! A backend serves one user, the way SPDK lets one module claim a bdev: a namespace
//! asking for a backend that another namespace, RAID0 set, cache or pool uses is
//! refused, naming the user. Removing the namespace lets go of the backend (it stays
//! open), so it can be given to a new namespace at once. Pools serve any number of
//! namespaces; a thick carve must fit the space the pool has free now.

use std::sync::Arc;

use serde_json::{json, Value};
use toml_edit::{Item, Table};

use nvme_target::limits;
use nvme_target::Subsystem;
use storage::Backend;

use super::{namespace_json, Management};
use crate::manage::assemble::{BuiltNamespace, NamespacePiece};
use crate::manage::protocol::{Params, RpcError};
use sluice_config::{describe_bytes, Config};

/// Whether two backend handles are one backend (the data pointers; the vtables of
/// one type may differ between codegen units).
fn same_backend(left: &Arc<dyn Backend>, right: &Arc<dyn Backend>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(left), Arc::as_ptr(right))
}

/// A check that failed because the thick carves of pool `pool` would not fit it names
/// the request's `size` (the pool is not open yet, so the file's demand is all that
/// can be compared with its capacity).
pub(super) fn name_the_size(mut error: RpcError, pool: Option<&str>) -> RpcError {
    let Some(pool) = pool else { return error };
    if let Some(data) = error.data.as_mut() {
        if data.get("location").and_then(Value::as_str) == Some(format!("pool {pool:?}").as_str()) {
            data["field"] = json!("size");
        }
    }
    error
}

pub(super) use super::views::NamespaceKey;

impl Management {
    /// The running namespaces that serve the open backend `name`, leaving out `except`
    /// (namespaces a reload removes before it adds).
    pub(super) fn serving_namespaces(&self, name: &str, except: &[NamespaceKey]) -> Vec<NamespaceKey> {
        let Some(open) = self.storage.backend(name) else { return Vec::new() };
        let mut serving = Vec::new();
        for subsystem in self.target.subsystems() {
            for entry in subsystem.table().entries() {
                let key = (subsystem.nqn.clone(), entry.namespace.id.0);
                if same_backend(&entry.namespace.backend, &open.backend) && !except.contains(&key) {
                    serving.push(key);
                }
            }
        }
        serving
    }

    /// Refuses a build that reuses an open backend a running namespace still serves.
    pub(super) fn refuse_served(&self, reused: &[String], except: &[NamespaceKey]) -> Result<(), RpcError> {
        for name in reused {
            if let Some((nqn, nsid)) = self.serving_namespaces(name, except).into_iter().next() {
                return Err(RpcError::refused(
                    "device",
                    format!(
                        "backend {name:?} is in use: namespace {nsid} of {nqn} serves it; a backend serves one \
                         namespace, so remove that one first (`sluice ns remove {nqn} {nsid}`) or declare another \
                         [[backend]]"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refusals that name the request field, before anything is edited: `device` or
    /// `pool` names no entry of the right kind; the backend is used by another entry
    /// of the file or served by a running namespace; a thick carve does not fit the
    /// pool's free space now. `running` is the config the target runs.
    pub(super) fn refuse_unusable_storage(
        &self,
        running: &Config,
        nqn: &str,
        id: u32,
        table: &Table,
    ) -> Result<(), RpcError> {
        let backends = || running.backends.iter().map(|backend| backend.name.as_str()).collect::<Vec<_>>().join(", ");
        let pools = || running.pools.iter().map(|pool| pool.name.as_str()).collect::<Vec<_>>().join(", ");
        let known =
            |names: String| if names.is_empty() { "there are none".to_string() } else { format!("known: {names}") };
        if let Some(name) = table.get("device").and_then(Item::as_str) {
            if !running.backends.iter().any(|backend| backend.name == name) {
                let reason = if running.pools.iter().any(|pool| pool.name == name) {
                    format!(
                        "{name:?} is a [[pool]], not a [[backend]]: carve a namespace from it with pool = {name:?} and a size"
                    )
                } else {
                    format!(
                        "the config file has no [[backend]] named {name:?} ({}); add the entry to the file and \
                         reload sluice serve (SIGHUP, `systemctl reload sluice`) first",
                        known(backends())
                    )
                };
                return Err(RpcError::refused("device", reason));
            }
            // The running namespace first: "namespace 1 of nqn..." says more than the
            // file's "subsystem[0] (nqn...) namespace[0]".
            self.refuse_served(&[name.to_string()], &[])?;
            if let Some(user) = running.users_of(name).first() {
                return Err(RpcError::refused(
                    "device",
                    format!(
                        "backend {name:?} is already used by {user}; a backend serves one user, so remove that use \
                         first or declare another [[backend]]"
                    ),
                ));
            }
        }
        if let Some(name) = table.get("pool").and_then(Item::as_str) {
            let Some(pool_config) = running.pools.iter().find(|pool| pool.name == name) else {
                let reason = if running.backends.iter().any(|backend| backend.name == name) {
                    format!("{name:?} is a [[backend]], not a [[pool]]: serve it whole with device = {name:?}")
                } else {
                    format!(
                        "the config file has no [[pool]] named {name:?} ({}); add the entry to the file and reload \
                         sluice serve (SIGHUP) first",
                        known(pools())
                    )
                };
                return Err(RpcError::refused("pool", reason));
            };
            let thin = table.get("thin").and_then(Item::as_bool).unwrap_or(false);
            let size = match table.get("size") {
                Some(item) => item
                    .as_integer()
                    .and_then(|bytes| u64::try_from(bytes).ok())
                    .or_else(|| item.as_str().and_then(|text| units::parse_byte_size(text).ok())),
                None => None,
            };
            if let (Some(open), Some(size_bytes), false) = (self.storage.pool(name), size, thin) {
                let pool = &open.pool;
                let already = pool.records().into_iter().any(|record| {
                    record.binding.is_some_and(|binding| binding.subsystem_nqn == nqn && binding.namespace_id == id)
                });
                let unit = pool.unit_size_bytes().max(1);
                let needed = size_bytes.div_ceil(unit).saturating_mul(unit);
                if !already && needed > pool.free_bytes() {
                    return Err(RpcError::refused(
                        "size",
                        format!(
                            "pool {:?} has {} free, less than a thick carve of {} needs ({} in whole {} units); \
                             make it smaller, thin, or free space in the pool",
                            pool_config.name,
                            describe_bytes(pool.free_bytes()),
                            describe_bytes(size_bytes),
                            describe_bytes(needed),
                            describe_bytes(unit)
                        ),
                    )
                    .with_cause(management_client::codes::causes::NO_SPACE));
                }
            }
        }
        Ok(())
    }

    /// Puts a built namespace in force on `subsystem`, tells its hosts, and keeps the
    /// storage the build opened. On refusal the build is dropped (a carve it created
    /// is deleted again) and the reason returned.
    pub(super) fn apply_namespace(&mut self, subsystem: &Subsystem, built: BuiltNamespace) -> Result<Value, String> {
        let BuiltNamespace { piece, storage, attachment, .. } = built;
        let (id, outcome) = match piece {
            NamespacePiece::Spec(spec) => (spec.id, subsystem.add_namespace_attached(spec, attachment)),
            NamespacePiece::SubsystemPoolCarve(id) => (id, subsystem.add_bound_carve(id, Some(attachment))),
        };
        let change = outcome.map_err(|error| error.to_string())?;
        // Connected hosts get a namespace attribute notice and rescan.
        self.target.notify_namespace_change(subsystem, &change);
        let opened = storage.opened_names();
        storage.keep(&mut self.storage);
        if !opened.is_empty() {
            tracing::info!(subsystem = %subsystem.nqn, nsid = id.0, ?opened, "management: storage opened at its first use");
        }
        Ok(subsystem
            .table()
            .get(id)
            .map(|entry| namespace_json(&entry.namespace, true, &entry.attachment))
            .unwrap_or_else(|| json!({ "nsid": id.0 })))
    }

    /// The config the target runs, as last read or written (`None`: the embedded
    /// default, which names no storage).
    pub(super) fn running_config(&self) -> Option<Config> {
        self.config_file.as_ref().and_then(|file| Config::parse(&file.text).ok())
    }

    // ---- read-only views ----

    pub(super) fn backend_list(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("backend_list")?;
        let running = self.running_config();
        let mut backends = Vec::new();
        let mut listed = Vec::new();
        for backend in running.iter().flat_map(|config| &config.backends) {
            let open = self.storage.backend(&backend.name);
            let users = running.as_ref().map(|config| config.users_of(&backend.name)).unwrap_or_default();
            let path = backend.path.as_ref().map(|path| path.display().to_string());
            let mut entry = self.backend_json(
                &backend.name,
                backend.kind.as_str(),
                open.map(|open| &open.backend),
                path,
                users,
                true,
            );
            if let Some(options) = backend.rbd_options() {
                // Not open: the cluster was not reachable at start (or the entry is new).
                entry["rbd"] = match open.and_then(|open| open.rbd.as_ref()) {
                    Some(rbd) => rbd_json(&rbd.status()),
                    None => json!({ "cluster": options.cluster.describe(), "pool": options.pool,
                                    "image": options.image, "state": "not open" }),
                };
                // A clone still being copied from its parent (`manage::flatten`).
                if let Some(copy) = self.copy_view(&options.cluster, &options.pool, &options.image) {
                    entry["rbd"]["copy"] = copy;
                }
            }
            backends.push(entry);
            listed.push(backend.name.clone());
        }
        // Open, but no longer in the file (a reload removed the entry while it was in use).
        for (name, open) in self.storage.backends().filter(|(name, _)| !listed.iter().any(|listed| listed == name)) {
            let path = open.file.as_ref().map(|path| path.display().to_string());
            let mut entry =
                self.backend_json(name, open.definition.kind.as_str(), Some(&open.backend), path, Vec::new(), false);
            if let Some(rbd) = &open.rbd {
                entry["rbd"] = rbd_json(&rbd.status());
            }
            backends.push(entry);
        }
        Ok(json!({ "backends": backends }))
    }

    fn backend_json(
        &self,
        name: &str,
        kind: &str,
        open: Option<&Arc<dyn Backend>>,
        path: Option<String>,
        users: Vec<String>,
        configured: bool,
    ) -> Value {
        let geometry = open.map(|backend| backend.geometry());
        let namespace = self.serving_namespaces(name, &[]).into_iter().next();
        json!({
            "name": name,
            "kind": kind,
            "path": path,
            "configured": configured,
            "open": open.is_some(),
            "size_bytes": geometry.map(|geometry| geometry.capacity_bytes()),
            "block_size": geometry.map(|geometry| geometry.block_size_bytes),
            "used_by": users,
            "namespace": namespace.map(|(nqn, nsid)| json!({ "nqn": nqn, "nsid": nsid })),
        })
    }
}

/// An RBD backend's cluster, image and connection state.
fn rbd_json(status: &runtime::rbd_backend::RbdStatus) -> Value {
    json!({
        "cluster": status.cluster,
        "monitors": status.monitors,
        "pool": status.pool,
        "image": status.image,
        "size_bytes": status.size_bytes,
        "state": status.state,
        "errors": status.errors,
        "last_error": status.last_error,
    })
}

impl Management {
    pub(super) fn pool_list(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("pool_list")?;
        let running = self.running_config();
        let served: Vec<NamespaceKey> = self
            .target
            .subsystems()
            .iter()
            .flat_map(|subsystem| subsystem.namespace_ids().into_iter().map(|id| (subsystem.nqn.clone(), id.0)))
            .collect();
        let mut pools = Vec::new();
        for pool in running.iter().flat_map(|config| &config.pools) {
            let management: Vec<&str> = running
                .iter()
                .flat_map(|config| &config.subsystems)
                .filter(|subsystem| subsystem.pool.as_deref() == Some(pool.name.as_str()))
                .map(|subsystem| subsystem.nqn.as_str())
                .collect();
            let mut entry = json!({
                "name": pool.name,
                "device": pool.device,
                "table": pool.table.as_ref().map(|table| table.display().to_string()),
                "open": false,
                "management_subsystems": management,
            });
            if let Some(open) = self.storage.pool(&pool.name) {
                pool_details(&mut entry, &open.pool, &served);
            }
            pools.push(entry);
        }
        Ok(json!({ "pools": pools }))
    }

    pub(super) fn limits_show(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("limits_show")?;
        let settings = self.target.settings;
        Ok(json!({
            "target": {
                "max_io_queues_per_controller": settings.max_io_queues_per_controller,
                "max_io_queue_depth": settings.max_io_queue_depth,
                "max_connections_per_host": settings.max_connections_per_host,
                "max_outstanding_r2t_bytes_per_connection": settings.max_outstanding_r2t_bytes_per_connection,
                "in_capsule_data_bytes": settings.in_capsule_data_bytes,
                "connection_setup_timeout_ms": settings.connection_setup_timeout_ms,
                "command_quiesce_timeout_ms": settings.command_quiesce_timeout_ms,
                "min_keep_alive_timeout_ms": settings.min_keep_alive_timeout_ms,
                "max_keep_alive_timeout_ms": settings.max_keep_alive_timeout_ms,
                "allow_keep_alive_disabled": settings.allow_keep_alive_disabled,
            },
            "protocol": {
                "max_data_transfer_bytes": limits::MAX_DATA_TRANSFER_BYTES,
                "max_h2c_data_bytes": limits::MAX_H2C_DATA_BYTES,
                "max_admin_queue_depth": limits::MAX_ADMIN_QUEUE_DEPTH,
                "max_namespace_id": limits::MAX_NAMESPACE_ID,
                "max_outstanding_async_events": limits::MAX_OUTSTANDING_ASYNC_EVENTS,
            },
            "takes_effect": "limits are read at start: change [target] in the config file and restart sluice serve",
        }))
    }
}

/// Sizes, free space and carves of an open pool.
fn pool_details(entry: &mut Value, pool: &storage::Pool, served: &[NamespaceKey]) {
    let block_size = u64::from(pool.block_size_bytes());
    let carves: Vec<Value> = pool
        .records()
        .into_iter()
        .map(|record| {
            let allocated_blocks = pool.allocated_blocks(record.id).unwrap_or(record.size_blocks);
            let binding = record.binding.as_ref();
            let key = binding.map(|binding| (binding.subsystem_nqn.clone(), binding.namespace_id));
            json!({
                "id": record.id.0,
                "size_bytes": record.size_blocks * block_size,
                "thin": record.thin,
                "allocated_bytes": allocated_blocks * block_size,
                "nqn": binding.map(|binding| binding.subsystem_nqn.clone()),
                "nsid": binding.map(|binding| binding.namespace_id),
                "served": key.is_some_and(|key| served.contains(&key)),
            })
        })
        .collect();
    entry["open"] = json!(true);
    entry["block_size"] = json!(pool.block_size_bytes());
    entry["unit_size_bytes"] = json!(pool.unit_size_bytes());
    entry["capacity_bytes"] = json!(pool.capacity_bytes());
    entry["free_bytes"] = json!(pool.free_bytes());
    entry["carves"] = Value::Array(carves);
}

/// `ns_add --rbd POOL/IMAGE`: the namespace is served from a `[[backend]] kind =
/// "rbd"` named after the image, added to `document` unless one describes that image
/// already (then it is reused). `--size` and `--block-size` go to the backend (the
/// image is created with that size when missing); on a gateway the backend takes the
/// gateway's cluster settings, which a gateway's namespaces must share.
/// Returns whether the backend was added (false: an existing one is reused).
pub(crate) fn inline_rbd(
    document: &mut toml_edit::DocumentMut,
    image_spec: &str,
    namespace: &mut toml_edit::Table,
) -> Result<bool, RpcError> {
    use toml_edit::{value, Item, Table};
    let invalid = |message: String| RpcError::invalid_params("rbd", message);
    let (pool, image) = match image_spec.split_once('/') {
        Some((pool, image)) if !pool.is_empty() && !image.is_empty() && !image.contains('/') => (pool, image),
        _ => return Err(invalid(format!("{image_spec:?} is not POOL/IMAGE (e.g. rbd/vol1)"))),
    };
    for key in ["backend", "device", "pool", "path", "direct_io", "thin"] {
        if namespace.contains_key(key) {
            return Err(invalid(format!("--rbd and {key} do not go together")));
        }
    }
    let name = image.to_string();
    let same_image = |table: &Table| {
        table.get("kind").and_then(Item::as_str) == Some("rbd")
            && table.get("pool").and_then(Item::as_str).unwrap_or("rbd") == pool
            && table.get("image").and_then(Item::as_str) == Some(image)
    };
    let added = match super::super::document::backend(document, &name) {
        Some(existing) if same_image(existing) => false,
        Some(_) => {
            return Err(invalid(format!(
                "a [[backend]] named {name} describes something else: name the image's backend with --device"
            )))
        }
        None => {
            let mut backend = Table::new();
            backend.insert("name", value(name.as_str()));
            backend.insert("kind", value("rbd"));
            backend.insert("pool", value(pool));
            backend.insert("image", value(image));
            for key in ["size", "block_size"] {
                if let Some(item) = namespace.remove(key) {
                    backend.insert(key, item);
                }
            }
            if let Some(gateway) = document.get("gateway").and_then(Item::as_table) {
                for key in ["ceph_conf", "client", "op_timeout_ms"] {
                    if let Some(item) = gateway.get(key) {
                        backend.insert(key, item.clone());
                    }
                }
            }
            super::super::document::add_backend(document, backend).map_err(super::super::assemble::edit_error)?;
            true
        }
    };
    namespace.insert("device", value(name.as_str()));
    Ok(added)
}

//! RBD images beyond serving them: snapshots, clones and deleting an image with its
//! namespace (what a CSI driver needs for snapshots, clones and DeleteVolume).
//!
//! - `rbd_snapshot_create {rbd: "POOL/IMAGE", snapshot}`: takes a snapshot; one of
//!   that name already there is kept and reported (`created: false`), so a retry
//!   succeeds.
//! - `rbd_snapshot_remove {rbd, snapshot}`: removes it; a missing snapshot or image is
//!   success (`removed: false`).
//! - `rbd_snapshot_list {rbd}`: the image's snapshots, oldest first.
//! - `ns_add {rbd: "POOL/NEW", clone_from: "POOL/IMAGE@SNAPSHOT", ...}`: the new image
//!   is a clone of the snapshot, served at once and then copied (flattened: see
//!   `runtime::rbd_backend`) by the copying thread (`manage::flatten`), so the call
//!   does not wait for the copy; an existing image of that name is served as it is
//!   (and copied if it still has a parent).
//! - `ns_remove {..., delete_image: true}`: removes the namespace, the `[[backend]]`
//!   entry it was served from, and then the RBD image. Refused before anything
//!   changes when the namespace is not served from an RBD `[[backend]]`, when the
//!   backend has another user, or when the image has snapshots (naming them: deleting
//!   the image would delete them).
//!
//! The cluster is the one the image's `[[backend]]` entry names, else the `[gateway]`
//! section's (`ceph_conf`, `client`, `op_timeout_ms`), else librados' defaults
//! (`$CEPH_CONF`). librbd calls block (up to the op timeout), and they run here, on
//! the management thread, never on an I/O thread; a clone's copy, which takes as long
//! as copying the image, runs on the copying thread instead.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toml_edit::{DocumentMut, Item};

use runtime::rbd_backend::{self, ClusterSpec, RbdError};

use nvme_target::Subsystem;

use super::Management;
use crate::manage::assemble::edit_error;
use crate::manage::document;
use crate::manage::protocol::{Params, RpcError, APPLY_FAILED, CHANGE_REFUSED};
use sluice_config::{cluster_spec, Config};

/// How long deleting an image waits for the namespace's last I/O queue to let go of
/// it (librbd refuses to remove an image that is still open: EBUSY).
const IMAGE_RELEASE_WAIT: Duration = Duration::from_secs(10);
/// How long deleting an image waits for this gateway's copies of clones to finish
/// (a clone not yet copied keeps its parent snapshot in the image's trash, and
/// librbd refuses to delete an image with snapshots: ENOTEMPTY). Longer copies fail
/// the call; the namespace is gone, and a later `backend_remove` (or the CSI
/// driver's retried DeleteVolume) deletes the image.
const CLONE_COPY_WAIT: Duration = Duration::from_secs(30);

/// `delete_image` of an image with snapshots is refused, naming them: they would go
/// with it, so the caller removes them first, knowingly.
fn refuse_image_with_snapshots(options: &runtime::RbdOptions) -> Result<(), RpcError> {
    match rbd_backend::list_snapshots(&options.cluster, &options.pool, &options.image) {
        Ok(snapshots) if !snapshots.is_empty() => {
            let names: Vec<&str> = snapshots.iter().map(|snapshot| snapshot.name.as_str()).collect();
            Err(RpcError::refused(
                "delete_image",
                format!(
                    "image {}/{} has snapshots ({}); remove them first (rbd_snapshot_remove), nothing was changed",
                    options.pool,
                    options.image,
                    names.join(", ")
                ),
            )
            .with_cause(management_client::codes::causes::HAS_SNAPSHOTS))
        }
        Ok(_) | Err(RbdError::ImageMissing { .. }) | Err(RbdError::PoolMissing { .. }) => Ok(()),
        Err(error) => Err(rbd_error("delete_image", error)),
    }
}

/// "POOL/IMAGE" split, refused (naming `field`) when it is not that.
pub(crate) fn image_spec<'a>(field: &str, text: &'a str) -> Result<(&'a str, &'a str), RpcError> {
    match text.split_once('/') {
        Some((pool, image)) if !pool.is_empty() && !image.is_empty() && !image.contains(['/', '@']) => {
            Ok((pool, image))
        }
        _ => Err(RpcError::invalid_params(field, format!("{text:?} is not POOL/IMAGE (e.g. rbd/vol1)"))),
    }
}

/// "POOL/IMAGE@SNAPSHOT" split.
pub(crate) fn snapshot_spec(field: &str, text: &str) -> Result<(String, String, String), RpcError> {
    let Some((image, snapshot)) = text.rsplit_once('@') else {
        return Err(RpcError::invalid_params(
            field,
            format!("{text:?} is not POOL/IMAGE@SNAPSHOT (e.g. rbd/vol1@monday)"),
        ));
    };
    let (pool, image) = image_spec(field, image)?;
    check_snapshot_name(field, snapshot)?;
    Ok((pool.to_string(), image.to_string(), snapshot.to_string()))
}

fn check_snapshot_name(field: &str, name: &str) -> Result<(), RpcError> {
    if name.is_empty() || name.contains(['/', '@', '\0']) || name.len() > 255 {
        return Err(RpcError::invalid_params(
            field,
            format!("{name:?} is not a snapshot name (1-255 bytes, no '/' or '@')"),
        ));
    }
    Ok(())
}

/// The cluster of the `[gateway]` section of `document`, else librados' defaults.
pub(crate) fn gateway_cluster(document: &DocumentMut) -> ClusterSpec {
    let gateway = document.get("gateway").and_then(Item::as_table);
    let text = |key: &str| gateway.and_then(|table| table.get(key)).and_then(Item::as_str).map(str::to_string);
    let timeout = gateway.and_then(|table| table.get("op_timeout_ms")).and_then(Item::as_integer);
    cluster_spec(
        &text("ceph_conf").map(std::path::PathBuf::from),
        text("client").as_deref(),
        timeout.and_then(|timeout| u64::try_from(timeout).ok()),
    )
}

/// A librbd failure as the API's error: a missing pool or image is a refusal naming
/// `field` (the caller asked for something that is not there), others failed to apply.
fn rbd_error(field: &str, error: RbdError) -> RpcError {
    match error {
        RbdError::PoolMissing { .. } | RbdError::ImageMissing { .. } => {
            RpcError::refused(field, error.to_string()).with_cause(management_client::codes::causes::NOT_FOUND)
        }
        RbdError::Invalid(_) => RpcError::refused(field, error.to_string()),
        other => RpcError::new(APPLY_FAILED, other.to_string()),
    }
}

fn snapshot_json(snapshot: &rbd_backend::Snapshot) -> Value {
    json!({
        "name": snapshot.name,
        "id": snapshot.id,
        "size_bytes": snapshot.size_bytes,
        "created_unix_seconds": snapshot.created_unix_seconds,
    })
}

impl Management {
    /// The cluster `pool/image` lives in: its `[[backend]]` entry's, else the gateway's.
    fn cluster_of(&self, pool: &str, image: &str) -> ClusterSpec {
        let running = self.running_config();
        let entry = running
            .iter()
            .flat_map(|config| &config.backends)
            .find_map(|backend| backend.rbd_options().filter(|options| options.pool == pool && options.image == image));
        match entry {
            Some(options) => options.cluster,
            None => {
                let text = self.config_file.as_ref().map(|file| file.text.clone()).unwrap_or_default();
                gateway_cluster(&text.parse::<DocumentMut>().unwrap_or_default())
            }
        }
    }

    pub(super) fn rbd_snapshot_create(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let spec = params.required_string("rbd")?;
        let snapshot = params.required_string("snapshot")?;
        params.finish("rbd_snapshot_create")?;
        let (pool, image) = image_spec("rbd", &spec)?;
        check_snapshot_name("snapshot", &snapshot)?;
        let cluster = self.cluster_of(pool, image);
        let (taken, created) =
            rbd_backend::create_snapshot(&cluster, pool, image, &snapshot).map_err(|error| rbd_error("rbd", error))?;
        tracing::info!(image = %spec, %snapshot, created, "management: RBD snapshot taken");
        Ok(json!({ "rbd": spec, "created": created, "snapshot": snapshot_json(&taken) }))
    }

    pub(super) fn rbd_snapshot_remove(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let spec = params.required_string("rbd")?;
        let snapshot = params.required_string("snapshot")?;
        params.finish("rbd_snapshot_remove")?;
        let (pool, image) = image_spec("rbd", &spec)?;
        check_snapshot_name("snapshot", &snapshot)?;
        let cluster = self.cluster_of(pool, image);
        let removed = match rbd_backend::remove_snapshot(&cluster, pool, image, &snapshot) {
            Ok(removed) => removed,
            // No pool: no image, no snapshot.
            Err(RbdError::PoolMissing { .. }) => false,
            Err(error) => return Err(rbd_error("snapshot", error)),
        };
        tracing::info!(image = %spec, %snapshot, removed, "management: RBD snapshot removed");
        Ok(json!({ "rbd": spec, "snapshot": snapshot, "removed": removed }))
    }

    pub(super) fn rbd_snapshot_list(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let spec = params.required_string("rbd")?;
        params.finish("rbd_snapshot_list")?;
        let (pool, image) = image_spec("rbd", &spec)?;
        let cluster = self.cluster_of(pool, image);
        let snapshots = rbd_backend::list_snapshots(&cluster, pool, image).map_err(|error| rbd_error("rbd", error))?;
        Ok(json!({ "rbd": spec, "snapshots": snapshots.iter().map(snapshot_json).collect::<Vec<_>>() }))
    }

    /// `ns_add`'s `clone_from`: makes `target` ("POOL/IMAGE") a clone of `source`
    /// ("POOL/IMAGE@SNAPSHOT") in the cluster of `document`'s gateway, before the
    /// namespace is built (which opens the image). Returns the cluster, for the copy
    /// asked for once the namespace is served ([`Management::request_copy`]).
    pub(super) fn clone_for_namespace(
        &self,
        document: &DocumentMut,
        source: &str,
        target: &str,
    ) -> Result<ClusterSpec, RpcError> {
        let (parent_pool, parent_image, snapshot) = snapshot_spec("clone_from", source)?;
        let (pool, image) = image_spec("rbd", target)?;
        let cluster = self.cluster_of(&parent_pool, &parent_image);
        // The new image's backend takes the gateway's cluster (`inline_rbd`); the op
        // timeout may differ, the cluster and the user may not.
        let target_cluster = gateway_cluster(document);
        if (&cluster.ceph_conf, &cluster.client) != (&target_cluster.ceph_conf, &target_cluster.client) {
            return Err(RpcError::refused(
                "clone_from",
                format!(
                    "{source} is reached through {}, but {target} would be opened through {}; a clone lives in \
                     its parent's cluster, so serve both through the same ceph_conf and client",
                    cluster.describe(),
                    target_cluster.describe()
                ),
            ));
        }
        let made = rbd_backend::clone_image(&cluster, &parent_pool, &parent_image, &snapshot, pool, image)
            .map_err(|error| rbd_error("clone_from", error))?;
        tracing::info!(%source, %target, made, "management: RBD image cloned from a snapshot");
        Ok(cluster)
    }

    /// Asks the copying thread to make `target` ("POOL/IMAGE") independent of its
    /// parent; false when the thread could not be started (the copy is then left to
    /// the next start, and the clone is served reading from its parent meanwhile).
    pub(super) fn request_copy(&mut self, cluster: ClusterSpec, pool: &str, image: &str) -> bool {
        let target = format!("{pool}/{image}");
        if self.flattener.is_none() {
            match super::super::flatten::Flattener::start() {
                Ok(flattener) => self.flattener = Some(flattener),
                Err(error) => {
                    tracing::warn!(%error, image = %target, "cannot start the thread that copies clones; the copy waits for the next start");
                    return false;
                }
            }
        }
        if let Some(flattener) = &self.flattener {
            flattener.request(cluster, pool, image);
        }
        true
    }

    /// At start: a copy of every RBD image the configuration serves, so that a clone
    /// whose copy a stop cut off is finished (one without a parent is told apart through
    /// its open handle, at no cost to the cluster).
    pub fn copy_unfinished_clones(&mut self) {
        let images: Vec<runtime::RbdOptions> = self
            .running_config()
            .iter()
            .flat_map(|config| &config.backends)
            .filter_map(|backend| backend.rbd_options())
            .collect();
        for options in images {
            self.request_copy(options.cluster, &options.pool, &options.image);
        }
    }

    /// Where the copy of `pool/image` stands, for `backend_list`; None when none
    /// waits or runs.
    pub(super) fn copy_view(&self, cluster: &ClusterSpec, pool: &str, image: &str) -> Option<Value> {
        let state = self.flattener.as_ref()?.state_of(cluster, pool, image)?;
        Some(state.view(Instant::now()))
    }

    /// `ns_remove` with `delete_image: true` (see the module comment).
    pub(super) fn ns_remove_with_image(
        &mut self,
        nqn: &str,
        id: u32,
        subsystem: &Subsystem,
    ) -> Result<Value, RpcError> {
        let mut draft = self.draft()?;
        let device = document::namespace_mut(&mut draft.document, nqn, id)
            .map_err(edit_error)?
            .and_then(|table| table.get("device").and_then(Item::as_str).map(str::to_string));
        let refuse = |reason: String| RpcError::refused("delete_image", reason);
        let Some(name) = device else {
            return Err(refuse(format!(
                "namespace {id} of {nqn} is not served from a [[backend]] of the config file; only an RBD backend's \
                 image can be deleted with its namespace (remove it without delete_image)"
            )));
        };
        let running =
            Config::parse(&draft.previous).map_err(|error| RpcError::new(CHANGE_REFUSED, error.to_string()))?;
        let Some(options) =
            running.backends.iter().find(|backend| backend.name == name).and_then(|backend| backend.rbd_options())
        else {
            return Err(refuse(format!(
                "backend {name:?} of namespace {id} of {nqn} is not kind = \"rbd\"; only an RBD image can be deleted \
                 with its namespace (remove it without delete_image)"
            )));
        };
        let image_name = format!("{}/{}", options.pool, options.image);
        document::remove_namespace(&mut draft.document, nqn, id).map_err(edit_error)?;
        let edited = Config::parse(&draft.document.to_string())
            .map_err(|error| RpcError::new(CHANGE_REFUSED, error.to_string()))?;
        if let Some(user) = edited.users_of(&name).first() {
            return Err(refuse(format!(
                "backend {name:?} (image {image_name}) is also used by {user}; remove that use first or remove the \
                 namespace without delete_image"
            )));
        }
        refuse_image_with_snapshots(&options)?;
        // The [[backend]] entry stays until the image is gone: if deleting it fails,
        // the entry still names it, and `backend_remove` finishes the job later.
        let text = self.check(&draft)?;
        self.write(&text)?;
        let change = match subsystem.remove_namespace(nvme_spec::NamespaceId(id)) {
            Ok(change) => change,
            Err(error) => return Err(self.restore(draft.previous, error.to_string())),
        };
        self.target.notify_namespace_change(subsystem, &change);
        tracing::info!(subsystem = %nqn, nsid = id, backend = %name, "management: namespace removed");
        match self.delete_backend_image(&name, &options) {
            Ok(existed) => Ok(json!({ "nqn": nqn, "nsid": id, "removed": true, "removed_from_config_file": true,
                                      "backend_removed": name, "image": image_name, "image_deleted": existed })),
            Err(error) => Err(RpcError::new(
                APPLY_FAILED,
                format!(
                    "namespace {id} of {nqn} was removed, but deleting image {image_name} failed: {error}; its \
                     backend {name:?} stays in the configuration: `sluice backend remove {name} --delete-image` (or \
                     the CSI driver's next DeleteVolume) deletes it once the cause is fixed"
                ),
            )),
        }
    }

    /// Closes the unused backend `name`, deletes its RBD image (waiting a while for
    /// clients to let go), then drops its entry from the configuration. On a failed
    /// deletion the entry stays, naming the image. Returns whether the image existed.
    fn delete_backend_image(&mut self, name: &str, options: &runtime::RbdOptions) -> Result<bool, String> {
        let image_name = format!("{}/{}", options.pool, options.image);
        // Closes the image once the last queue lets go of it.
        self.storage.remove_backend(name);
        // Its own copy (a clone being flattened) is of no use now, and holds it open.
        if let Some(flattener) = &self.flattener {
            if !flattener.cancel(&options.cluster, &options.pool, &options.image, IMAGE_RELEASE_WAIT) {
                tracing::warn!(image = %image_name, "the copy of the clone did not stop in time; deleting it may fail (busy)");
            }
        }
        let started = Instant::now();
        let removed = loop {
            match rbd_backend::remove_image(&options.cluster, &options.pool, &options.image) {
                Err(error) if error.is_busy() && started.elapsed() < IMAGE_RELEASE_WAIT => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                // A clone of it still being copied holds a snapshot in its trash.
                Err(error)
                    if error.has_snapshots()
                        && started.elapsed() < CLONE_COPY_WAIT
                        && self.flattener.as_ref().is_some_and(|flattener| flattener.is_copying()) =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                outcome => break outcome,
            }
        };
        let existed = removed.map_err(|error| error.to_string())?;
        tracing::info!(image = %image_name, existed, "management: RBD image deleted");
        let mut draft = self.draft().map_err(|error| error.message)?;
        remove_backend_entry(&mut draft.document, name);
        let text = self.check(&draft).map_err(|error| error.message)?;
        self.write(&text).map_err(|error| error.message)?;
        Ok(existed)
    }

    /// `backend_remove {name, delete_image?}`: drops a `[[backend]]` entry nothing
    /// uses; with `delete_image`, its RBD image too (refused while it has snapshots).
    pub(super) fn backend_remove(&mut self, mut params: Params) -> Result<Value, RpcError> {
        use management_client::codes::causes;
        let name = params.required_string("name")?;
        let delete_image = params.optional_bool("delete_image")?.unwrap_or(false);
        params.finish("backend_remove")?;
        let running = Config::parse(&self.draft()?.previous).map_err(|error| RpcError::new(CHANGE_REFUSED, error))?;
        let Some(backend) = running.backends.iter().find(|backend| backend.name == name) else {
            return Err(RpcError::refused("name", format!("the configuration has no [[backend]] named {name:?}"))
                .with_cause(causes::NOT_FOUND));
        };
        if let Some(user) = running.users_of(&name).first() {
            return Err(RpcError::refused(
                "name",
                format!("backend {name:?} is used by {user}; remove that use first"),
            )
            .with_cause(causes::IN_USE));
        }
        let served = self.serving_namespaces(&name, &[]);
        if let Some((nqn, nsid)) = served.first() {
            return Err(RpcError::refused("name", format!("backend {name:?} still serves namespace {nsid} of {nqn}"))
                .with_cause(causes::IN_USE));
        }
        if !delete_image {
            let mut draft = self.draft()?;
            remove_backend_entry(&mut draft.document, &name);
            let text = self.check(&draft)?;
            self.write(&text)?;
            self.storage.remove_backend(&name);
            return Ok(json!({ "name": name, "removed": true, "image_deleted": false }));
        }
        let Some(options) = backend.rbd_options() else {
            return Err(RpcError::refused(
                "delete_image",
                format!("backend {name:?} is not kind = \"rbd\": it has no image"),
            ));
        };
        let image_name = format!("{}/{}", options.pool, options.image);
        refuse_image_with_snapshots(&options)?;
        match self.delete_backend_image(&name, &options) {
            Ok(existed) => Ok(json!({ "name": name, "removed": true, "image": image_name, "image_deleted": existed })),
            Err(error) => Err(RpcError::new(
                APPLY_FAILED,
                format!("deleting image {image_name} failed: {error}; backend {name:?} stays in the configuration"),
            )),
        }
    }
}

/// Drops the `[[backend]]` entry named `name` from `document`.
fn remove_backend_entry(document: &mut DocumentMut, name: &str) {
    if let Some(backends) = document.get_mut("backend").and_then(Item::as_array_of_tables_mut) {
        backends.retain(|table| table.get("name").and_then(Item::as_str) != Some(name));
        if backends.is_empty() {
            document.remove("backend");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_and_snapshot_specs_split_or_name_the_field() {
        assert_eq!(image_spec("rbd", "rbd/vol1").unwrap(), ("rbd", "vol1"));
        for bad in ["vol1", "/vol1", "rbd/", "rbd/a/b", "rbd/a@s"] {
            let error = image_spec("rbd", bad).unwrap_err();
            assert!(error.message.starts_with("rbd:"), "{bad:?}: {}", error.message);
        }
        assert_eq!(
            snapshot_spec("clone_from", "rbd/vol1@monday").unwrap(),
            ("rbd".to_string(), "vol1".to_string(), "monday".to_string())
        );
        for bad in ["rbd/vol1", "rbd/vol1@", "vol1@s", "rbd/vol1@a/b"] {
            assert!(snapshot_spec("clone_from", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_gateway_section_names_the_cluster() {
        let document: DocumentMut =
            "[gateway]\nceph_conf = \"/etc/ceph/x.conf\"\nclient = \"client.gw\"\nop_timeout_ms = 5000\n"
                .parse()
                .unwrap();
        let cluster = gateway_cluster(&document);
        assert_eq!(cluster.ceph_conf.as_deref(), Some(std::path::Path::new("/etc/ceph/x.conf")));
        assert_eq!(cluster.client, "gw");
        assert_eq!(cluster.op_timeout_ms, 5000);
        assert_eq!(gateway_cluster(&DocumentMut::new()).client, "admin");
    }

    #[test]
    fn removing_a_backend_entry_keeps_the_others() {
        let mut document: DocumentMut =
            "[[backend]]\nname = \"a\"\nkind = \"ram\"\n\n[[backend]]\nname = \"b\"\nkind = \"ram\"\n".parse().unwrap();
        remove_backend_entry(&mut document, "a");
        assert!(document::backend(&document, "a").is_none());
        assert!(document::backend(&document, "b").is_some());
        remove_backend_entry(&mut document, "b");
        assert!(document.get("backend").is_none());
    }
}

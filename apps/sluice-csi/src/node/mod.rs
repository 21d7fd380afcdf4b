//! The CSI Node service: attaches a volume's namespace with the kernel's NVMe/TCP
//! host and mounts it.
//!
//! - NodeStageVolume: `nvme discover` at each address the controller put in the
//!   publish context, `nvme connect` (with the DH-HMAC-CHAP keys of the call's
//!   secrets, `secrets`) to every path of the volume's subsystem the
//!   discovery log announces and that is not connected yet (native multipath joins
//!   them into one head device), waits for the device whose UUID is the volume's
//!   (`system::find_device`; a subsystem already connected is asked to rescan, for a
//!   namespace added since), and for a filesystem volume makes one if the device has
//!   none, then mounts it on the staging path. Block volumes are only attached here.
//! - NodePublishVolume: a bind mount of the staging path (filesystem) or of the
//!   device (block) on the target path; read-only is a remount, since a bind mount
//!   ignores `ro` on the first call.
//! - NodeUnstageVolume: unmounts, and disconnects the subsystem's controllers only
//!   when no other volume staged here is on that subsystem (`records`).
//! - NodeExpandVolume: waits for the device to show the size the controller gave
//!   the namespace and grows the filesystem online (`expand`).
//!
//! Every step checks first whether it was done, so each call can be repeated.

mod expand;
pub mod records;
pub mod system;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use crate::controller::DISCOVERY_ADDRESSES_KEY;
use crate::csi::node_server::Node;
use crate::csi::node_service_capability::{rpc::Type as RpcType, Rpc, Type as CapabilityType};
use crate::csi::volume_capability::AccessType;
use crate::csi::*;
use crate::locks::VolumeLocks;
use crate::secrets::{self, DhchapKeys};
use crate::volume_id::VolumeId;
use records::StagedRecords;
use system::{CommandError, Commands};

/// How long a connected namespace may take to show up as a block device.
const DEVICE_WAIT: Duration = Duration::from_secs(30);

/// blkid's exit status when the device holds no filesystem it knows.
const BLKID_NOTHING_FOUND: i32 = 2;

pub struct NodeService {
    /// The node's host NQN: its node id, and what it connects as.
    pub host_nqn: String,
    pub commands: Arc<dyn Commands>,
    /// Where sysfs is mounted (`/sys`): block devices and NVMe controllers are
    /// looked up there, never guessed from names.
    pub sysfs: PathBuf,
    /// The volumes staged on this node (`records`).
    pub staged: StagedRecords,
    pub locks: Arc<VolumeLocks>,
}

fn decode(text: &str) -> Result<VolumeId, Status> {
    if text.is_empty() {
        return Err(Status::invalid_argument("volume_id: missing"));
    }
    VolumeId::decode(text).ok_or_else(|| Status::not_found(format!("volume {text:?} was not made by sluice-csi")))
}

fn required_id(text: &str) -> Result<(), Status> {
    if text.is_empty() {
        return Err(Status::invalid_argument("volume_id: missing"));
    }
    Ok(())
}

fn required_path(text: &str, field: &str) -> Result<PathBuf, Status> {
    if text.is_empty() {
        return Err(Status::invalid_argument(format!("{field}: missing")));
    }
    Ok(PathBuf::from(text))
}

fn internal(error: impl ToString) -> Status {
    Status::internal(error.to_string())
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| arg.to_string()).collect()
}

/// The `nvme connect` arguments for one path of `subsystem_nqn`, as `host_nqn`, with
/// the DH-HMAC-CHAP keys when the call's secrets hold them (nvme-cli 2.3 spells them
/// `--dhchap-secret` and `--dhchap-ctrl-secret`). The `--option=value` form keeps a
/// key in one argument, which is what `system::SystemCommands` redacts.
fn connect_args(address: &str, port: &str, subsystem_nqn: &str, host_nqn: &str, keys: &DhchapKeys) -> Vec<String> {
    let mut args = strings(&[
        "connect",
        "--transport=tcp",
        &format!("--traddr={address}"),
        &format!("--trsvcid={port}"),
        &format!("--nqn={subsystem_nqn}"),
        &format!("--hostnqn={host_nqn}"),
    ]);
    if let Some(key) = &keys.host {
        args.push(format!("--dhchap-secret={key}"));
    }
    if let Some(key) = &keys.controller {
        args.push(format!("--dhchap-ctrl-secret={key}"));
    }
    args
}

impl NodeService {
    /// Runs a command on a blocking thread.
    async fn run(&self, program: &'static str, args: Vec<String>) -> Result<String, CommandError> {
        let commands = Arc::clone(&self.commands);
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            commands.run(program, &args)
        })
        .await
        .map_err(|error| CommandError { status: None, message: format!("{program}: {error}") })?
    }

    fn device_of(&self, id: &VolumeId) -> Option<PathBuf> {
        system::find_device(&self.sysfs.join("block"), &id.namespace_uuid)
    }

    fn controllers_of(&self, subsystem_nqn: &str) -> Vec<(String, (String, String))> {
        system::subsystem_controllers(&self.sysfs.join("class/nvme"), subsystem_nqn)
    }

    /// Connects every path of the volume's subsystem and returns its device.
    async fn attach(&self, id: &VolumeId, discovery_addresses: &str, keys: &DhchapKeys) -> Result<PathBuf, Status> {
        if let Some(device) = self.device_of(id) {
            return Ok(device);
        }
        let mut paths = Vec::new();
        for address in discovery_addresses.split(',').map(str::trim).filter(|address| !address.is_empty()) {
            let (host, port) = system::split_address(address);
            let args = [
                "discover",
                "--transport=tcp",
                &format!("--traddr={host}"),
                &format!("--trsvcid={port}"),
                &format!("--hostnqn={}", self.host_nqn),
                "--output-format=json",
            ];
            match self.run("nvme", strings(&args)).await {
                Ok(log) => paths.extend(system::discovered_paths(&log, &id.subsystem_nqn)),
                Err(error) => {
                    tracing::warn!(%address, %error, "discovery failed at this address; trying the others")
                }
            }
        }
        paths.sort();
        paths.dedup();
        if paths.is_empty() {
            return Err(Status::unavailable(format!(
                "no discovery address ({discovery_addresses:?}) announces subsystem {} to host {}; is the host allowed \
                 (ControllerPublishVolume) and the gateway reachable from this node at those addresses \
                 (`[[listener]] advertise` on the gateway)?",
                id.subsystem_nqn, self.host_nqn
            )));
        }
        let connected: Vec<(String, String)> =
            self.controllers_of(&id.subsystem_nqn).into_iter().map(|(_, path)| path).collect();
        // The namespace may have been added after the subsystem was connected (another
        // volume of it staged here first): the kernel learns of it from a Namespace
        // Attribute Changed event, or from a rescan, asked for here.
        for (controller, _) in self.controllers_of(&id.subsystem_nqn) {
            if let Err(error) = self.run("nvme", strings(&["ns-rescan", &format!("/dev/{controller}")])).await {
                tracing::warn!(%controller, %error, "nvme ns-rescan failed");
            }
        }
        let mut connect_errors = Vec::new();
        for (address, port) in paths.iter().filter(|path| !connected.contains(path)) {
            let args = connect_args(address, port, &id.subsystem_nqn, &self.host_nqn, keys);
            // One path failing leaves the others; the device check decides. The
            // error is scrubbed again: a Commands other than SystemCommands may not.
            if let Err(error) = self.run("nvme", args).await {
                let error = keys.scrub(&error.message);
                tracing::warn!(%address, %port, %error, authenticated = keys.host.is_some(), "nvme connect failed on this path");
                connect_errors.push(format!("{address}:{port}: {error}"));
            }
        }
        // Every path refused (a wrong or missing DH-HMAC-CHAP key is the usual
        // reason): say so now, not after waiting for a device that cannot appear.
        if !connect_errors.is_empty() && self.controllers_of(&id.subsystem_nqn).is_empty() {
            let hint = if keys.host.is_some() {
                "check that the StorageClass's node-stage Secret holds the key the gateway has for this host \
                 (the controller-publish Secret's) and that the node's kernel has NVMe in-band authentication"
            } else {
                "if the gateway asks this host for DH-HMAC-CHAP, the StorageClass must name a node-stage Secret"
            };
            return Err(Status::unavailable(format!(
                "nvme connect to subsystem {} failed on every path ({}); {hint}",
                id.subsystem_nqn,
                connect_errors.join("; ")
            )));
        }
        let deadline = tokio::time::Instant::now() + DEVICE_WAIT;
        loop {
            if let Some(device) = self.device_of(id) {
                return Ok(device);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Status::deadline_exceeded(format!(
                    "connected to {} ({} controller(s)) but no block device with UUID {} appeared in {}s; \
                     see `nvme list-subsys` and the kernel log",
                    id.subsystem_nqn,
                    self.controllers_of(&id.subsystem_nqn).len(),
                    id.namespace_uuid,
                    DEVICE_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn stage(&self, request: NodeStageVolumeRequest) -> Result<(), Status> {
        // Every missing field is InvalidArgument, before an unknown volume is NotFound.
        required_id(&request.volume_id)?;
        let staging = required_path(&request.staging_target_path, "staging_target_path")?;
        let capability =
            request.volume_capability.ok_or_else(|| Status::invalid_argument("volume_capability: missing"))?;
        let keys = secrets::dhchap_keys(&request.secrets)?;
        let id = decode(&request.volume_id)?;
        let _held = self.locks.lock(&id.namespace_uuid.to_string()).await;
        let addresses = request.publish_context.get(DISCOVERY_ADDRESSES_KEY).cloned().unwrap_or_default();
        let device = {
            // Attach and record under the subsystem's lock: an unstage of another of
            // its volumes must not disconnect it in between.
            let _subsystem = self.locks.lock(&format!("subsystem {}", id.subsystem_nqn)).await;
            self.staged.add(&id.namespace_uuid, &id.subsystem_nqn).map_err(Status::internal)?;
            match self.attach(&id, &addresses, &keys).await {
                Ok(device) => device,
                Err(status) => {
                    // A failed stage the CO never unstages must not keep the
                    // subsystem's connections needed for ever.
                    let _ = self.staged.remove(&id.namespace_uuid);
                    return Err(status);
                }
            }
        };
        let Some(AccessType::Mount(mount)) = capability.access_type else {
            return Ok(());
        };
        if system::is_mount_point(&staging) {
            // A repeated stage finds its own filesystem there; anything else mounted
            // at the staging path must not be handed to the pod as this volume.
            return self.check_mounted_device(&staging, "staging path", &device);
        }
        tokio::fs::create_dir_all(&staging)
            .await
            .map_err(|error| internal(format!("{}: {error}", staging.display())))?;
        let device_text = device.display().to_string();
        let fs_type = if mount.fs_type.is_empty() { "ext4".to_string() } else { mount.fs_type.clone() };
        let mkfs = match fs_type.as_str() {
            "ext4" => "mkfs.ext4",
            "xfs" => "mkfs.xfs",
            other => return Err(Status::invalid_argument(format!("fs_type {other:?}: ext4 and xfs are supported"))),
        };
        // Low-level probing (-p): the blkid cache may still describe what the device
        // held before. Only "nothing found" leads to mkfs; anything blkid recognises
        // (a filesystem of another type, a partition table, RAID or LVM signatures)
        // and any other failure (blkid missing, an I/O error) must not format a
        // device that may hold data.
        let probe = self.run("blkid", strings(&["-p", "-o", "export", &device_text])).await;
        match probe {
            Ok(found) => match probed_signature(&found) {
                Signature::Filesystem(found) if found == fs_type => {}
                Signature::Filesystem(found) => {
                    return Err(Status::failed_precondition(format!(
                        "{device_text} holds {found}, not the {fs_type} asked for"
                    )))
                }
                Signature::Other(what) => {
                    return Err(Status::failed_precondition(format!(
                        "{device_text} holds {what}, not a filesystem: it is not formatted; clear it (wipefs) if \
                         its contents are not needed"
                    )))
                }
            },
            Err(error) if error.status == Some(BLKID_NOTHING_FOUND) => self.make_filesystem(mkfs, &device_text).await?,
            Err(error) => {
                return Err(internal(format!(
                    "cannot tell whether {device_text} holds a filesystem, so it is not formatted: {error}"
                )))
            }
        }
        let mut args = vec!["-t".to_string(), fs_type];
        if !mount.mount_flags.is_empty() {
            args.extend(["-o".to_string(), mount.mount_flags.join(",")]);
        }
        args.extend([device_text, staging.display().to_string()]);
        self.run("mount", args).await.map_err(internal)?;
        Ok(())
    }

    async fn make_filesystem(&self, program: &'static str, device: &str) -> Result<(), Status> {
        tracing::info!(%device, program, "no filesystem on the device: making one");
        // Quiet: the progress output is of no use in a log.
        self.run(program, strings(&["-q", device])).await.map(|_| ()).map_err(internal)
    }

    async fn unstage(&self, request: NodeUnstageVolumeRequest) -> Result<(), Status> {
        required_id(&request.volume_id)?;
        let staging = required_path(&request.staging_target_path, "staging_target_path")?;
        let id = decode(&request.volume_id)?;
        let _held = self.locks.lock(&id.namespace_uuid.to_string()).await;
        if system::is_mount_point(&staging) {
            self.run("umount", vec![staging.display().to_string()]).await.map_err(internal)?;
        }
        let _ = tokio::fs::remove_dir(&staging).await;
        let _subsystem = self.locks.lock(&format!("subsystem {}", id.subsystem_nqn)).await;
        let still_needed = self.staged.others_on(&id.namespace_uuid, &id.subsystem_nqn).unwrap_or_else(|error| {
            tracing::warn!(volume = %request.volume_id, %error, "cannot tell whether other volumes use the subsystem: keeping its connections");
            true
        });
        if !still_needed {
            // Only this subsystem's controllers (every path of it), named one by one.
            for (controller, _) in self.controllers_of(&id.subsystem_nqn) {
                self.run("nvme", strings(&["disconnect", &format!("--device={controller}")]))
                    .await
                    .map_err(internal)?;
            }
        }
        self.staged.remove(&id.namespace_uuid).map_err(Status::internal)?;
        Ok(())
    }

    /// Ok when the filesystem mounted at `path` is on `device` (same device number);
    /// otherwise a refusal naming both, so nothing else is handed over as the volume.
    fn check_mounted_device(&self, path: &Path, what: &str, device: &Path) -> Result<(), Status> {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mounted = system::mounted_device(&table, path);
        let wanted = system::device_number(&self.sysfs.join("block"), device);
        if mounted.is_some() && mounted == wanted {
            return Ok(());
        }
        Err(Status::failed_precondition(format!(
            "{what} {} already has device {} mounted, not this volume's {} ({}): unmount it first",
            path.display(),
            mounted.as_deref().unwrap_or("?"),
            device.display(),
            wanted.as_deref().unwrap_or("device number unknown")
        )))
    }

    async fn publish(&self, request: NodePublishVolumeRequest) -> Result<(), Status> {
        required_id(&request.volume_id)?;
        let target = required_path(&request.target_path, "target_path")?;
        let capability =
            request.volume_capability.ok_or_else(|| Status::invalid_argument("volume_capability: missing"))?;
        let id = decode(&request.volume_id)?;
        if system::is_mount_point(&target) {
            // A filesystem there must be this volume's (a raw block bind mount shows
            // devtmpfs's number, so only filesystems can be told apart this way).
            if let (Some(AccessType::Mount(_)), Some(device)) = (&capability.access_type, self.device_of(&id)) {
                return self.check_mounted_device(&target, "target path", &device);
            }
            return Ok(());
        }
        let source = match capability.access_type {
            Some(AccessType::Block(_)) => {
                let device = self.device_of(&id).ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "volume {} is not attached: NodeStageVolume first",
                        request.volume_id
                    ))
                })?;
                if let Some(parent) = target.parent() {
                    tokio::fs::create_dir_all(parent)
                        .await
                        .map_err(|error| internal(format!("{}: {error}", parent.display())))?;
                }
                tokio::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&target)
                    .await
                    .map_err(|error| internal(format!("{}: {error}", target.display())))?;
                device
            }
            _ => {
                let staging = required_path(&request.staging_target_path, "staging_target_path")?;
                if !system::is_mount_point(&staging) {
                    return Err(Status::failed_precondition(format!(
                        "volume {} is not staged at {}: NodeStageVolume first",
                        request.volume_id,
                        staging.display()
                    )));
                }
                tokio::fs::create_dir_all(&target)
                    .await
                    .map_err(|error| internal(format!("{}: {error}", target.display())))?;
                staging
            }
        };
        let (source, target_text) = (source.display().to_string(), target.display().to_string());
        self.run("mount", strings(&["-o", "bind", &source, &target_text])).await.map_err(internal)?;
        if request.readonly {
            // The kernel ignores MS_RDONLY on the call that makes a bind mount.
            if let Err(error) = self.run("mount", strings(&["-o", "remount,bind,ro", &target_text])).await {
                let _ = self.run("umount", vec![target_text.clone()]).await;
                return Err(internal(format!("cannot make {target_text} read-only: {error}")));
            }
        }
        Ok(())
    }

    async fn unpublish(&self, request: NodeUnpublishVolumeRequest) -> Result<(), Status> {
        required_id(&request.volume_id)?;
        let target = required_path(&request.target_path, "target_path")?;
        decode(&request.volume_id)?;
        if system::is_mount_point(&target) {
            self.run("umount", vec![target.display().to_string()]).await.map_err(internal)?;
        }
        // A directory (filesystem) or a file (block) made by publish.
        if tokio::fs::remove_dir(&target).await.is_err() {
            let _ = tokio::fs::remove_file(&target).await;
        }
        Ok(())
    }

    async fn stats(&self, request: NodeGetVolumeStatsRequest) -> Result<NodeGetVolumeStatsResponse, Status> {
        required_id(&request.volume_id)?;
        let path = required_path(&request.volume_path, "volume_path")?;
        let id = decode(&request.volume_id)?;
        if !path.exists() {
            return Err(Status::not_found(format!("volume_path {} does not exist", path.display())));
        }
        // A namespace deleted out of band leaves the mount but not the device: said
        // in the log (health reporting, NodeGetVolumeHealth, is not offered yet).
        if self.device_of(&id).is_none() {
            tracing::warn!(volume = %request.volume_id, "no NVMe namespace with the volume's UUID is attached: deleted or disconnected");
        }
        let mut usage = Vec::new();
        if path.is_dir() {
            let stats =
                rustix::fs::statvfs(&path).map_err(|error| internal(format!("statvfs {}: {error}", path.display())))?;
            let as_i64 = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
            let block = stats.f_frsize;
            usage.push(VolumeUsage {
                available: as_i64(stats.f_bavail.saturating_mul(block)),
                total: as_i64(stats.f_blocks.saturating_mul(block)),
                used: as_i64(stats.f_blocks.saturating_sub(stats.f_bfree).saturating_mul(block)),
                unit: volume_usage::Unit::Bytes as i32,
            });
            usage.push(VolumeUsage {
                available: as_i64(stats.f_favail),
                total: as_i64(stats.f_files),
                used: as_i64(stats.f_files.saturating_sub(stats.f_ffree)),
                unit: volume_usage::Unit::Inodes as i32,
            });
        }
        Ok(NodeGetVolumeStatsResponse { usage })
    }
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        self.stage(request.into_inner()).await?;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        self.unstage(request.into_inner()).await?;
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        self.publish(request.into_inner()).await?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        self.unpublish(request.into_inner()).await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        Ok(Response::new(self.stats(request.into_inner()).await?))
    }

    async fn node_expand_volume(
        &self,
        request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        Ok(Response::new(self.expand(request.into_inner()).await?))
    }

    async fn node_get_volume_health(
        &self,
        _: Request<NodeGetVolumeHealthRequest>,
    ) -> Result<Response<NodeGetVolumeHealthResponse>, Status> {
        Err(Status::unimplemented("GET_VOLUME_HEALTH is not offered yet"))
    }

    async fn node_get_storage_health(
        &self,
        _: Request<NodeGetStorageHealthRequest>,
    ) -> Result<Response<NodeGetStorageHealthResponse>, Status> {
        Err(Status::unimplemented("storage health is not offered yet"))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let capabilities = [RpcType::StageUnstageVolume, RpcType::GetVolumeStats, RpcType::ExpandVolume]
            .into_iter()
            .map(|rpc| NodeServiceCapability { r#type: Some(CapabilityType::Rpc(Rpc { r#type: rpc as i32 })) })
            .collect();
        Ok(Response::new(NodeGetCapabilitiesResponse { capabilities }))
    }

    async fn node_get_info(&self, _: Request<NodeGetInfoRequest>) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.host_nqn.clone(),
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}

/// What `blkid -p -o export` found on a device.
#[derive(Debug, PartialEq, Eq)]
enum Signature {
    /// A filesystem of this TYPE.
    Filesystem(String),
    /// Something that is not a filesystem (a partition table, RAID, LVM), named.
    Other(String),
}

/// Reads `blkid -p -o export` output (KEY=value lines). A TYPE that is a filesystem
/// blkid knows by USAGE=filesystem (or with no USAGE) is a filesystem; a partition
/// table (PTTYPE) or any other signature is not.
fn probed_signature(output: &str) -> Signature {
    let value = |key: &str| {
        output
            .lines()
            .find_map(|line| line.trim().strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
            .map(str::to_string)
    };
    if let Some(table) = value("PTTYPE") {
        return Signature::Other(format!("a {table} partition table"));
    }
    match (value("TYPE"), value("USAGE")) {
        (Some(kind), None) => Signature::Filesystem(kind),
        (Some(kind), Some(usage)) if usage == "filesystem" => Signature::Filesystem(kind),
        (Some(kind), Some(_)) => Signature::Other(format!("a {kind} signature")),
        (None, _) => Signature::Other("a signature blkid does not name".to_string()),
    }
}

#[cfg(test)]
mod signature_tests {
    use super::*;

    #[test]
    fn only_a_filesystem_counts_as_one_and_nothing_else_is_formatted_over() {
        assert_eq!(
            probed_signature("DEVNAME=/dev/nvme0n1\nUUID=x\nBLOCK_SIZE=4096\nTYPE=ext4\nUSAGE=filesystem\n"),
            Signature::Filesystem("ext4".into())
        );
        assert_eq!(probed_signature("DEVNAME=/dev/nvme0n1\nTYPE=xfs\n"), Signature::Filesystem("xfs".into()));
        assert!(
            matches!(probed_signature("DEVNAME=/dev/nvme0n1\nPTUUID=1\nPTTYPE=gpt\n"), Signature::Other(what) if what.contains("gpt"))
        );
        assert!(
            matches!(probed_signature("DEVNAME=/dev/x\nTYPE=LVM2_member\nUSAGE=raid\n"), Signature::Other(what) if what.contains("LVM2_member"))
        );
        assert!(matches!(probed_signature("DEVNAME=/dev/x\n"), Signature::Other(_)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::volume_capability::{AccessMode, BlockVolume};
    use std::collections::HashMap;
    use std::sync::Mutex;

    const HOST_KEY: &str = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:";
    const CONTROLLER_KEY: &str = "DHHC-1:01:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB:";

    /// Records the commands a stage runs; a connect makes the namespace's block
    /// device appear in the fake sysfs, as the kernel would.
    struct Recorder {
        calls: Mutex<Vec<Vec<String>>>,
        discover_log: String,
        device_uuid_file: PathBuf,
        uuid: String,
        /// Every connect fails (as a wrong key would), quoting its command line.
        refuse_connect: bool,
    }

    impl Commands for Recorder {
        fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandError> {
            let mut call = vec![program.to_string()];
            call.extend(args.iter().map(|arg| arg.to_string()));
            self.calls.lock().unwrap().push(call);
            match args.first().copied() {
                Some("discover") => Ok(self.discover_log.clone()),
                Some("connect") if self.refuse_connect => Err(CommandError {
                    status: Some(1),
                    message: format!(
                        "`nvme {}` failed: could not add new controller: {}",
                        args.join(" "),
                        args.join(" ")
                    ),
                }),
                Some("connect") => {
                    std::fs::create_dir_all(self.device_uuid_file.parent().unwrap()).unwrap();
                    std::fs::write(&self.device_uuid_file, format!("{}\n", self.uuid)).unwrap();
                    Ok(String::new())
                }
                _ => Ok(String::new()),
            }
        }
    }

    fn block_stage(id: &VolumeId, secrets: &[(&str, &str)], root: &std::path::Path) -> NodeStageVolumeRequest {
        NodeStageVolumeRequest {
            volume_id: id.encode(),
            staging_target_path: root.join("staging").display().to_string(),
            volume_capability: Some(VolumeCapability {
                access_type: Some(AccessType::Block(BlockVolume {})),
                access_mode: Some(AccessMode { mode: volume_capability::access_mode::Mode::SingleNodeWriter as i32 }),
            }),
            publish_context: HashMap::from([(DISCOVERY_ADDRESSES_KEY.to_string(), "10.0.0.1:8009".to_string())]),
            secrets: secrets.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect(),
            ..Default::default()
        }
    }

    /// Stages a block volume with `secrets` on a fresh fake node; the nvme
    /// commands it ran, or its refusal.
    async fn stage_with(name: &str, secrets: &[(&str, &str)]) -> Result<Vec<Vec<String>>, Status> {
        stage_on_node(name, secrets, false).await
    }

    async fn stage_on_node(
        name: &str,
        secrets: &[(&str, &str)],
        refuse_connect: bool,
    ) -> Result<Vec<Vec<String>>, Status> {
        let root = std::env::temp_dir().join(format!("sluice-csi-stage-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let id = VolumeId::for_name("nqn.2026-11.io.sluice:gold", name);
        let log = r#"{"records":[{"traddr":"10.0.0.1","trsvcid":"4420","subnqn":"nqn.2026-11.io.sluice:gold"}]}"#;
        let recorder = Arc::new(Recorder {
            calls: Mutex::new(Vec::new()),
            discover_log: log.to_string(),
            device_uuid_file: root.join("sys/block/nvme0n1/uuid"),
            uuid: id.namespace_uuid.hyphenated().to_string(),
            refuse_connect,
        });
        let service = NodeService {
            host_nqn: "nqn.2014-08.org.nvmexpress:uuid:node-a".to_string(),
            commands: recorder.clone(),
            sysfs: root.join("sys"),
            staged: StagedRecords::new(&root.join("state")),
            locks: Arc::new(VolumeLocks::default()),
        };
        let outcome = service.stage(block_stage(&id, secrets, &root)).await;
        let _ = std::fs::remove_dir_all(&root);
        outcome?;
        let calls = recorder.calls.lock().unwrap().clone();
        Ok(calls.into_iter().filter(|call| call[0] == "nvme").collect())
    }

    fn connects(calls: &[Vec<String>]) -> Vec<Vec<String>> {
        calls.iter().filter(|call| call[1] == "connect").cloned().collect()
    }

    #[tokio::test]
    async fn a_stage_connects_with_the_keys_of_its_secrets() {
        let plain = stage_with("pvc-plain", &[]).await.unwrap();
        let expected: Vec<String> = strings(&[
            "nvme",
            "connect",
            "--transport=tcp",
            "--traddr=10.0.0.1",
            "--trsvcid=4420",
            "--nqn=nqn.2026-11.io.sluice:gold",
            "--hostnqn=nqn.2014-08.org.nvmexpress:uuid:node-a",
        ]);
        assert_eq!(connects(&plain), vec![expected.clone()]);

        let one_way = stage_with("pvc-one-way", &[(secrets::HOST_SECRET_KEY, HOST_KEY)]).await.unwrap();
        let mut with_host_key = expected.clone();
        with_host_key.push(format!("--dhchap-secret={HOST_KEY}"));
        assert_eq!(connects(&one_way), vec![with_host_key.clone()]);

        let both = stage_with(
            "pvc-both",
            &[(secrets::HOST_SECRET_KEY, HOST_KEY), (secrets::CONTROLLER_SECRET_KEY, CONTROLLER_KEY)],
        )
        .await
        .unwrap();
        let mut with_both = with_host_key;
        with_both.push(format!("--dhchap-ctrl-secret={CONTROLLER_KEY}"));
        assert_eq!(connects(&both), vec![with_both]);
        // Discovery runs without the keys: the gateway asks for them at the subsystem's Connect.
        assert!(both.iter().filter(|call| call[1] == "discover").all(|call| !call.join(" ").contains("DHHC")));
    }

    #[tokio::test]
    async fn a_stage_refuses_unknown_or_malformed_secrets_before_running_anything() {
        let error = stage_with("pvc-unknown", &[("tlsKey", "x")]).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(error.message().contains("\"tlsKey\""), "{}", error.message());
        let error = stage_with("pvc-malformed", &[(secrets::HOST_SECRET_KEY, "DHHC-1:00:oops:")]).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(!error.message().contains("oops"), "{}", error.message());
    }

    #[tokio::test]
    async fn a_stage_whose_connects_all_fail_says_so_at_once_without_the_key() {
        let started = std::time::Instant::now();
        let error = stage_on_node("pvc-refused", &[(secrets::HOST_SECRET_KEY, HOST_KEY)], true).await.unwrap_err();
        assert!(started.elapsed() < DEVICE_WAIT / 2, "waited for a device that cannot appear");
        assert_eq!(error.code(), tonic::Code::Unavailable);
        assert!(error.message().contains("failed on every path"), "{}", error.message());
        assert!(error.message().contains("node-stage Secret"), "{}", error.message());
        assert!(!error.message().contains("AAAA"), "the key is shown: {}", error.message());
    }
}

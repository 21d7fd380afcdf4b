//! NodeExpandVolume: after ControllerExpandVolume grew the namespace (`ns_resize`),
//! the block device on this node grows by itself (the gateway's Namespace
//! Attribute Changed notice makes the kernel re-read its size); this call waits for
//! that and grows the filesystem online.
//!
//! - Only a volume staged here (`records`) is expanded; its device is the one with
//!   the volume's UUID (`system::find_device`), never guessed by name.
//! - With `capacity_range.required_bytes`, the device's size (sysfs `size`) is
//!   awaited for up to `SIZE_WAIT`; the first time it is short, the subsystem's
//!   controllers are asked to rescan (`nvme ns-rescan`), in case the notice was
//!   missed. Still short at the end: UNAVAILABLE naming the device and both sizes
//!   (the CO retries).
//! - A filesystem volume: ext4 grows with `resize2fs DEVICE`, xfs with `xfs_growfs
//!   MOUNTPOINT` (the staging path, or the volume path), both online and both a
//!   no-op when there is nothing to grow, so a retry is harmless. A raw block
//!   volume (block access, or a volume path that is a device node) has nothing more
//!   to do.

use std::path::Path;
use std::time::Duration;

use tonic::Status;

use super::system;
use super::{
    decode, internal, probed_signature, required_id, required_path, strings, NodeService, Signature,
    BLKID_NOTHING_FOUND,
};
use crate::csi::volume_capability::AccessType;
use crate::csi::{NodeExpandVolumeRequest, NodeExpandVolumeResponse};
use crate::volume_id::VolumeId;

/// How long the device may take to show the size the controller made.
pub const SIZE_WAIT: Duration = Duration::from_secs(30);
/// How often its size is read meanwhile.
const SIZE_POLL: Duration = Duration::from_millis(200);
/// How long the gateway's Namespace Attribute Changed notice gets to reach the
/// kernel (it re-reads the namespace and resizes the disk) before the node asks for
/// a rescan itself.
const NOTICE_GRACE: Duration = Duration::from_secs(3);

impl NodeService {
    pub(super) async fn expand(&self, request: NodeExpandVolumeRequest) -> Result<NodeExpandVolumeResponse, Status> {
        self.expand_within(request, SIZE_WAIT).await
    }

    async fn expand_within(
        &self,
        request: NodeExpandVolumeRequest,
        size_wait: Duration,
    ) -> Result<NodeExpandVolumeResponse, Status> {
        // Every missing field is InvalidArgument, before an unknown volume is NotFound.
        required_id(&request.volume_id)?;
        let volume_path = required_path(&request.volume_path, "volume_path")?;
        let wanted_bytes = match &request.capacity_range {
            None => 0,
            Some(range) => {
                u64::try_from(range.required_bytes).ok().filter(|_| range.limit_bytes >= 0).ok_or_else(|| {
                    Status::invalid_argument("capacity_range: required_bytes and limit_bytes must not be negative")
                })?
            }
        };
        let id = decode(&request.volume_id)?;
        let _held = self.locks.lock(&id.namespace_uuid.to_string()).await;
        match self.staged.subsystem_of(&id.namespace_uuid).map_err(Status::internal)? {
            Some(subsystem_nqn) if subsystem_nqn == id.subsystem_nqn => {}
            _ => return Err(Status::not_found(format!("volume {} is not staged on this node", request.volume_id))),
        }
        if !volume_path.exists() {
            return Err(Status::not_found(format!("volume_path {} does not exist", volume_path.display())));
        }
        let device = self.device_of(&id).ok_or_else(|| {
            Status::not_found(format!(
                "volume {} is staged but no block device with UUID {} is attached: disconnected, or the namespace \
                 was deleted",
                request.volume_id, id.namespace_uuid
            ))
        })?;
        let size_bytes = self.wait_for_size(&id, &device, wanted_bytes, size_wait).await?;
        let block = matches!(
            request.volume_capability.as_ref().and_then(|capability| capability.access_type.as_ref()),
            Some(AccessType::Block(_))
        ) || system::is_block_device(&volume_path);
        if !block {
            self.grow_filesystem(&device, &request.staging_target_path, &volume_path).await?;
        }
        tracing::info!(volume = %request.volume_id, device = %device.display(), size_bytes, block, "volume expanded on the node");
        Ok(NodeExpandVolumeResponse { capacity_bytes: i64::try_from(size_bytes).unwrap_or(i64::MAX) })
    }

    /// The device's size once it is at least `wanted_bytes`.
    async fn wait_for_size(
        &self,
        id: &VolumeId,
        device: &Path,
        wanted_bytes: u64,
        size_wait: Duration,
    ) -> Result<u64, Status> {
        let sys_block = self.sysfs.join("block");
        let started = tokio::time::Instant::now();
        let deadline = started + size_wait;
        let mut nudged = false;
        loop {
            let seen_bytes = system::device_size_bytes(&sys_block, device).ok_or_else(|| {
                internal(format!("cannot read the size of {} in {}", device.display(), sys_block.display()))
            })?;
            if seen_bytes >= wanted_bytes {
                let how = if nudged { "after a rescan" } else { "on the gateway's notice" };
                tracing::info!(device = %device.display(), seen_bytes, waited_ms = started.elapsed().as_millis() as u64,
                    "the kernel sees the new size {how}");
                return Ok(seen_bytes);
            }
            if !nudged && started.elapsed() >= NOTICE_GRACE.min(size_wait) {
                // The notice should have done it; a rescan of each path's controller
                // makes the kernel read the namespace's size again if it was missed.
                nudged = true;
                for (controller, _) in self.controllers_of(&id.subsystem_nqn) {
                    if let Err(error) = self.run("nvme", strings(&["ns-rescan", &format!("/dev/{controller}")])).await {
                        tracing::warn!(%controller, %error, "nvme ns-rescan failed");
                    }
                }
                continue;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Status::unavailable(format!(
                    "{} is {seen_bytes} bytes, less than the {wanted_bytes} bytes asked for, after {} ms and a rescan: \
                     has the gateway grown the namespace (ControllerExpandVolume, `sluice ns list`)? See the kernel log",
                    device.display(),
                    size_wait.as_millis()
                )));
            }
            tokio::time::sleep(SIZE_POLL).await;
        }
    }

    /// Grows the filesystem on `device` to the device's size, online.
    async fn grow_filesystem(&self, device: &Path, staging: &str, volume_path: &Path) -> Result<(), Status> {
        let device_text = device.display().to_string();
        let fs_type = match self.run("blkid", strings(&["-p", "-o", "export", &device_text])).await {
            Ok(found) => match probed_signature(&found) {
                Signature::Filesystem(fs_type) => fs_type,
                Signature::Other(what) => {
                    return Err(Status::failed_precondition(format!(
                        "{device_text} holds {what}, not a filesystem: nothing to grow"
                    )))
                }
            },
            Err(error) if error.status == Some(BLKID_NOTHING_FOUND) => {
                return Err(Status::failed_precondition(format!(
                    "{device_text} holds no filesystem to grow (is it a block volume? then say so in volume_capability)"
                )))
            }
            Err(error) => return Err(internal(format!("cannot tell which filesystem {device_text} holds: {error}"))),
        };
        let (program, target) = match fs_type.as_str() {
            "ext4" => ("resize2fs", device_text.clone()),
            // xfs grows through a mounted path: the staging mount, where the
            // volume is mounted once, else the pod's bind mount of it.
            "xfs" => {
                let mount_point = if !staging.is_empty() && system::is_mount_point(Path::new(staging)) {
                    staging.to_string()
                } else {
                    volume_path.display().to_string()
                };
                ("xfs_growfs", mount_point)
            }
            other => {
                return Err(Status::failed_precondition(format!(
                    "{device_text} holds {other}, which sluice-csi cannot grow (ext4 and xfs)"
                )))
            }
        };
        self.run(program, vec![target]).await.map(|_| ()).map_err(internal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use tonic::Code;

    use crate::csi::volume_capability::{access_mode::Mode, AccessMode, BlockVolume, MountVolume};
    use crate::csi::{CapacityRange, VolumeCapability};
    use crate::locks::VolumeLocks;
    use crate::node::records::StagedRecords;
    use crate::node::system::CommandError;

    const NQN: &str = "nqn.2026-11.io.sluice:gold";
    const MIB: u64 = 1 << 20;

    /// A node with the volume's namespace attached as nvme0n1 through controller
    /// nvme0; `blkid` answers `blkid_output` (None: nothing found), and a rescan
    /// makes the device `rescan_grows_to` bytes, as the kernel would.
    struct FakeNode {
        calls: Mutex<Vec<Vec<String>>>,
        blkid_output: Option<String>,
        size_file: PathBuf,
        rescan_grows_to: Option<u64>,
    }

    impl system::Commands for FakeNode {
        fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandError> {
            let mut call = vec![program.to_string()];
            call.extend(args.iter().map(|arg| arg.to_string()));
            self.calls.lock().unwrap().push(call);
            match (program, args.first().copied()) {
                ("blkid", _) => self
                    .blkid_output
                    .clone()
                    .ok_or(CommandError { status: Some(BLKID_NOTHING_FOUND), message: "nothing".to_string() }),
                ("nvme", Some("ns-rescan")) => {
                    if let Some(bytes) = self.rescan_grows_to {
                        std::fs::write(&self.size_file, format!("{}\n", bytes / 512)).unwrap();
                    }
                    Ok(String::new())
                }
                _ => Ok(String::new()),
            }
        }
    }

    struct Node {
        root: PathBuf,
        fake: Arc<FakeNode>,
        service: NodeService,
        id: VolumeId,
    }

    impl Drop for Node {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn node(
        name: &str,
        device_bytes: u64,
        blkid_output: Option<&str>,
        rescan_grows_to: Option<u64>,
        staged: bool,
    ) -> Node {
        let root = std::env::temp_dir().join(format!("sluice-csi-node-expand-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let id = VolumeId::for_name(NQN, name);
        let device = root.join("sys/block/nvme0n1");
        std::fs::create_dir_all(&device).unwrap();
        std::fs::write(device.join("uuid"), format!("{}\n", id.namespace_uuid.hyphenated())).unwrap();
        std::fs::write(device.join("size"), format!("{}\n", device_bytes / 512)).unwrap();
        let controller = root.join("sys/class/nvme/nvme0");
        std::fs::create_dir_all(&controller).unwrap();
        std::fs::write(controller.join("subsysnqn"), format!("{NQN}\n")).unwrap();
        std::fs::create_dir_all(root.join("volume")).unwrap();
        let records = StagedRecords::new(&root.join("state"));
        if staged {
            records.add(&id.namespace_uuid, NQN).unwrap();
        }
        let fake = Arc::new(FakeNode {
            calls: Mutex::new(Vec::new()),
            blkid_output: blkid_output.map(str::to_string),
            size_file: device.join("size"),
            rescan_grows_to,
        });
        let service = NodeService {
            host_nqn: "nqn.2014-08.org.nvmexpress:uuid:node-a".to_string(),
            commands: fake.clone(),
            sysfs: root.join("sys"),
            staged: records,
            locks: Arc::new(VolumeLocks::default()),
        };
        Node { root, fake, service, id }
    }

    impl Node {
        fn request(&self, required_bytes: Option<u64>, access_type: Option<AccessType>) -> NodeExpandVolumeRequest {
            NodeExpandVolumeRequest {
                volume_id: self.id.encode(),
                volume_path: self.root.join("volume").display().to_string(),
                staging_target_path: self.root.join("staging").display().to_string(),
                capacity_range: required_bytes
                    .map(|bytes| CapacityRange { required_bytes: bytes as i64, limit_bytes: 0 }),
                volume_capability: access_type.map(|access_type| VolumeCapability {
                    access_type: Some(access_type),
                    access_mode: Some(AccessMode { mode: Mode::SingleNodeWriter as i32 }),
                }),
                ..Default::default()
            }
        }

        fn calls(&self) -> Vec<Vec<String>> {
            self.fake.calls.lock().unwrap().clone()
        }
    }

    const EXT4: &str = "DEVNAME=/dev/nvme0n1\nTYPE=ext4\nUSAGE=filesystem\n";
    const XFS: &str = "DEVNAME=/dev/nvme0n1\nTYPE=xfs\nUSAGE=filesystem\n";

    fn mount() -> Option<AccessType> {
        Some(AccessType::Mount(MountVolume::default()))
    }

    #[tokio::test]
    async fn an_ext4_volume_that_grew_is_resized_online_on_its_device() {
        let node = node("ext4", 16 * MIB, Some(EXT4), None, true);
        let answer = node.service.expand(node.request(Some(16 * MIB), mount())).await.unwrap();
        assert_eq!(answer.capacity_bytes, (16 * MIB) as i64);
        assert_eq!(
            node.calls(),
            [strings(&["blkid", "-p", "-o", "export", "/dev/nvme0n1"]), strings(&["resize2fs", "/dev/nvme0n1"])]
        );
    }

    #[tokio::test]
    async fn xfs_grows_through_its_mount_point() {
        let node = node("xfs", 16 * MIB, Some(XFS), None, true);
        node.service.expand(node.request(Some(16 * MIB), None)).await.unwrap();
        // The staging path is not mounted here: the volume path is the mount.
        let volume_path = node.root.join("volume").display().to_string();
        assert_eq!(node.calls().last().unwrap(), &strings(&["xfs_growfs", &volume_path]));
    }

    #[tokio::test]
    async fn a_device_not_grown_yet_is_rescanned_once_and_awaited() {
        let node = node("rescan", 8 * MIB, Some(EXT4), Some(16 * MIB), true);
        let answer =
            node.service.expand_within(node.request(Some(16 * MIB), mount()), Duration::from_secs(5)).await.unwrap();
        assert_eq!(answer.capacity_bytes, (16 * MIB) as i64);
        let calls = node.calls();
        assert_eq!(calls[0], strings(&["nvme", "ns-rescan", "/dev/nvme0"]));
        assert_eq!(calls.last().unwrap(), &strings(&["resize2fs", "/dev/nvme0n1"]));
    }

    #[tokio::test]
    async fn a_device_that_never_grows_is_unavailable_naming_both_sizes() {
        let node = node("stuck", 8 * MIB, Some(EXT4), None, true);
        let error = node
            .service
            .expand_within(node.request(Some(16 * MIB), mount()), Duration::from_millis(500))
            .await
            .unwrap_err();
        assert_eq!(error.code(), Code::Unavailable);
        for words in ["/dev/nvme0n1", &(8 * MIB).to_string(), &(16 * MIB).to_string()] {
            assert!(error.message().contains(words), "{words}: {}", error.message());
        }
        let rescans = node.calls().iter().filter(|call| call[1] == "ns-rescan").count();
        assert_eq!(rescans, 1, "one nudge, not one per poll");
        assert!(!node.calls().iter().any(|call| call[0] == "resize2fs"));
    }

    #[tokio::test]
    async fn a_block_volume_only_waits_for_its_size() {
        let node = node("block", 16 * MIB, None, None, true);
        let answer =
            node.service.expand(node.request(Some(16 * MIB), Some(AccessType::Block(BlockVolume {})))).await.unwrap();
        assert_eq!(answer.capacity_bytes, (16 * MIB) as i64);
        assert!(node.calls().is_empty(), "{:?}", node.calls());
        // Without a size asked for, what the device has is the answer.
        let answer = node.service.expand(node.request(None, Some(AccessType::Block(BlockVolume {})))).await.unwrap();
        assert_eq!(answer.capacity_bytes, (16 * MIB) as i64);
    }

    #[tokio::test]
    async fn a_filesystem_volume_without_a_filesystem_or_with_another_is_refused() {
        let node = node("empty", 16 * MIB, None, None, true);
        let error = node.service.expand(node.request(None, mount())).await.unwrap_err();
        assert_eq!(error.code(), Code::FailedPrecondition);
        let node = node_with("btrfs", "DEVNAME=/dev/nvme0n1\nTYPE=btrfs\nUSAGE=filesystem\n");
        let error = node.service.expand(node.request(None, mount())).await.unwrap_err();
        assert_eq!(error.code(), Code::FailedPrecondition);
        assert!(error.message().contains("btrfs"), "{}", error.message());
    }

    fn node_with(name: &str, blkid_output: &str) -> Node {
        node(name, 16 * MIB, Some(blkid_output), None, true)
    }

    #[tokio::test]
    async fn missing_fields_are_invalid_and_volumes_not_staged_here_not_found() {
        let node = node("unstaged", 16 * MIB, Some(EXT4), None, false);
        let code = |result: Result<NodeExpandVolumeResponse, Status>| result.unwrap_err().code();
        let mut no_id = node.request(None, mount());
        no_id.volume_id.clear();
        assert_eq!(code(node.service.expand(no_id).await), Code::InvalidArgument);
        let mut no_path = node.request(None, mount());
        no_path.volume_path.clear();
        assert_eq!(code(node.service.expand(no_path).await), Code::InvalidArgument);
        let mut foreign = node.request(None, mount());
        foreign.volume_id = "fake-vol-id".to_string();
        assert_eq!(code(node.service.expand(foreign).await), Code::NotFound);
        assert_eq!(code(node.service.expand(node.request(Some(16 * MIB), mount())).await), Code::NotFound);
        assert!(node.calls().is_empty());
    }
}

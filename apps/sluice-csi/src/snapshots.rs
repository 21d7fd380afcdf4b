//! CSI snapshots and clones of RBD volumes.
//!
//! - A snapshot is an RBD snapshot of the volume's image named `csi-snap-<UUID>`,
//!   the UUID a v5 UUID of the CSI snapshot name (as volume UUIDs are of volume
//!   names), so a retried CreateSnapshot finds the snapshot the first attempt took.
//!   Its id is `<volume id>@<snapshot UUID>`: it names the source volume, survives
//!   restarts and decodes without state.
//! - A volume made from a snapshot is a clone of it, flattened by the gateway
//!   (`ns_add clone_from`), so it depends on neither the snapshot nor its source. A
//!   volume made from a volume is the same through an internal snapshot of the
//!   source (`csi-clone-<new volume UUID>`), removed once the copy exists.
//! - Pool volumes are carves, which have no snapshots: asking for one, or for a pool
//!   volume with a content source, is INVALID_ARGUMENT naming the StorageClass.
//! - DeleteVolume of a volume with snapshots is FAILED_PRECONDITION naming them (the
//!   CSI spec's answer for snapshots that are not independent of their volume):
//!   deleting the image would delete them.

use management_client::api::{self, replies, Method};
use tonic::Status;
use uuid::Uuid;

use crate::api::{status_of, Api};
use crate::controller::ControllerService;
use crate::csi::Snapshot;
use crate::csi::{
    volume_content_source, CreateSnapshotRequest, DeleteSnapshotRequest, ListSnapshotsRequest, ListSnapshotsResponse,
    VolumeContentSource,
};
use crate::gateway;
use crate::volume_id::{VolumeId, SLUICE_CSI_NAMESPACE};

/// Prefix of the RBD snapshots that are CSI snapshots.
pub const SNAPSHOT_PREFIX: &str = "csi-snap-";
/// Prefix of the RBD snapshots taken to clone a volume (never listed).
pub const CLONE_SNAPSHOT_PREFIX: &str = "csi-clone-";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotId {
    pub volume: VolumeId,
    pub snapshot_uuid: Uuid,
}

impl SnapshotId {
    /// The id of the snapshot named `name` of `volume`.
    pub fn for_name(volume: VolumeId, name: &str) -> SnapshotId {
        SnapshotId { volume, snapshot_uuid: snapshot_uuid_for_name(name) }
    }

    /// Decodes an id made by `encode`; None for anything else.
    pub fn decode(text: &str) -> Option<SnapshotId> {
        let (volume, uuid_text) = text.rsplit_once('@')?;
        if uuid_text.len() != 36 {
            return None;
        }
        Some(SnapshotId { volume: VolumeId::decode(volume)?, snapshot_uuid: Uuid::try_parse(uuid_text).ok()? })
    }

    pub fn encode(&self) -> String {
        format!("{}@{}", self.volume.encode(), self.snapshot_uuid.hyphenated())
    }

    /// The RBD snapshot's name.
    pub fn rbd_name(&self) -> String {
        rbd_snapshot_name(&self.snapshot_uuid)
    }
}

/// The snapshot UUID of the CSI snapshot named `name` (distinct from the volume
/// UUID of a volume of the same name).
pub fn snapshot_uuid_for_name(name: &str) -> Uuid {
    Uuid::new_v5(&SLUICE_CSI_NAMESPACE, format!("snapshot:{name}").as_bytes())
}

pub fn rbd_snapshot_name(snapshot_uuid: &Uuid) -> String {
    format!("{SNAPSHOT_PREFIX}{}", snapshot_uuid.simple())
}

/// The snapshot UUID an RBD snapshot name holds, if it is a CSI snapshot's.
pub fn snapshot_uuid_of_rbd_name(name: &str) -> Option<Uuid> {
    let simple = name.strip_prefix(SNAPSHOT_PREFIX)?;
    (simple.len() == 32).then(|| Uuid::try_parse(simple).ok()).flatten()
}

/// The RBD image name the gateway's backend for a volume has (`csi-<UUID>`).
pub fn rbd_image_name(volume: &VolumeId) -> String {
    format!("csi-{}", volume.namespace_uuid.simple())
}

/// One RBD snapshot as the gateway lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbdSnapshot {
    pub name: String,
    pub size_bytes: u64,
    pub created_unix_seconds: i64,
}

fn parse_snapshot(listed: replies::Snapshot) -> RbdSnapshot {
    RbdSnapshot { name: listed.name, size_bytes: listed.size_bytes, created_unix_seconds: listed.created_unix_seconds }
}

/// The CSI message for snapshot `id` as the gateway lists it.
pub fn snapshot_message(id: &SnapshotId, listed: &RbdSnapshot) -> Snapshot {
    Snapshot {
        size_bytes: i64::try_from(listed.size_bytes).unwrap_or(i64::MAX),
        snapshot_id: id.encode(),
        source_volume_id: id.volume.encode(),
        creation_time: Some(prost_types::Timestamp { seconds: listed.created_unix_seconds, nanos: 0 }),
        // RBD snapshots are consistent the moment they exist: nothing to upload.
        ready_to_use: true,
        group_snapshot_id: String::new(),
        accessible_topology: Vec::new(),
    }
}

/// The RBD images ("POOL/IMAGE") of the gateway's RBD backends, by backend name.
pub async fn rbd_images(api: &Api) -> Result<Vec<(String, String)>, Status> {
    let listed = api.send(api::BackendList {}).await?;
    Ok(listed
        .backends
        .into_iter()
        .filter_map(|backend| {
            let rbd = backend.rbd?;
            Some((backend.name, format!("{}/{}", rbd.pool, rbd.image)))
        })
        .collect())
}

/// The image ("POOL/IMAGE") a volume is served from; None for a pool volume (or one
/// whose backend is gone).
pub async fn image_of(api: &Api, volume: &VolumeId) -> Result<Option<String>, Status> {
    let name = rbd_image_name(volume);
    Ok(rbd_images(api).await?.into_iter().find(|(backend, _)| *backend == name).map(|(_, spec)| spec))
}

/// The RBD snapshots of `image` ("POOL/IMAGE"); empty when the image is gone.
pub async fn list(api: &Api, image: &str) -> Result<Vec<RbdSnapshot>, Status> {
    match api.send_raw(api::SnapshotListRequest { rbd: image.to_string() }).await {
        Ok(listed) => Ok(listed.snapshots.into_iter().map(parse_snapshot).collect()),
        Err(error) if crate::api::is_not_found(&error) => Ok(Vec::new()),
        Err(error) => Err(status_of(api::SnapshotListRequest::NAME, &error)),
    }
}

/// Every CSI snapshot of every RBD volume of this driver, in volume then snapshot
/// order (stable between calls, for ListSnapshots' paging).
pub async fn all_snapshots(api: &Api) -> Result<Vec<Snapshot>, Status> {
    let images = rbd_images(api).await?;
    let mut snapshots = Vec::new();
    for (volume, _) in gateway::all_volumes(api).await? {
        let name = rbd_image_name(&volume);
        let Some((_, image)) = images.iter().find(|(backend, _)| *backend == name) else {
            continue;
        };
        for listed in list(api, image).await? {
            if let Some(snapshot_uuid) = snapshot_uuid_of_rbd_name(&listed.name) {
                let id = SnapshotId { volume: volume.clone(), snapshot_uuid };
                snapshots.push(snapshot_message(&id, &listed));
            }
        }
    }
    snapshots.sort_by(|left, right| left.snapshot_id.cmp(&right.snapshot_id));
    Ok(snapshots)
}

/// INVALID_ARGUMENT for snapshots or clones of a pool volume.
pub fn carves_have_no_snapshots(what: &str) -> Status {
    Status::invalid_argument(format!(
        "{what}: pool volumes are carves of a [[pool]], which have no snapshots; use a StorageClass with rbdPool \
         for volumes that need snapshots or clones"
    ))
}

/// Where a new volume's data comes from: `ns_add`'s `clone_from`, the size the
/// source had, and an internal snapshot to remove once the copy exists.
pub struct CloneSource {
    pub clone_from: String,
    pub size_bytes: u64,
    pub internal_snapshot: Option<(String, String)>,
}

impl ControllerService {
    pub(crate) async fn snapshot_create(&self, request: CreateSnapshotRequest) -> Result<Snapshot, Status> {
        if request.name.is_empty() {
            return Err(Status::invalid_argument("name: missing"));
        }
        if request.source_volume_id.is_empty() {
            return Err(Status::invalid_argument("source_volume_id: missing"));
        }
        let Some(volume) = VolumeId::decode(&request.source_volume_id) else {
            return Err(Status::not_found(format!("source volume {:?} does not exist", request.source_volume_id)));
        };
        let id = SnapshotId::for_name(volume.clone(), &request.name);
        let _held = self.locks.lock(&id.snapshot_uuid.to_string()).await;
        if gateway::find(&self.api, &volume).await?.is_none() {
            return Err(Status::not_found(format!("source volume {:?} does not exist", request.source_volume_id)));
        }
        let Some(image) = image_of(&self.api, &volume).await? else {
            return Err(carves_have_no_snapshots("source_volume_id"));
        };
        // The name is the snapshot's identity: on another volume it is another snapshot.
        if let Some(other) = all_snapshots(&self.api).await?.into_iter().find(|snapshot| {
            SnapshotId::decode(&snapshot.snapshot_id)
                .is_some_and(|other| other.snapshot_uuid == id.snapshot_uuid && other.volume != volume)
        }) {
            return Err(Status::already_exists(format!(
                "snapshot name {:?} is taken by snapshot {} of volume {}",
                request.name, other.snapshot_id, other.source_volume_id
            )));
        }
        let created = self.api.send(api::SnapshotCreate { rbd: image.clone(), snapshot: id.rbd_name() }).await?;
        let listed = parse_snapshot(created.snapshot);
        tracing::info!(snapshot = %id.encode(), name = %request.name, %image, "snapshot taken");
        Ok(snapshot_message(&id, &listed))
    }

    pub(crate) async fn snapshot_delete(&self, request: DeleteSnapshotRequest) -> Result<(), Status> {
        if request.snapshot_id.is_empty() {
            return Err(Status::invalid_argument("snapshot_id: missing"));
        }
        // An id this driver never made names no snapshot: deleting it succeeds.
        let Some(id) = SnapshotId::decode(&request.snapshot_id) else {
            return Ok(());
        };
        let _held = self.locks.lock(&id.snapshot_uuid.to_string()).await;
        let Some(image) = image_of(&self.api, &id.volume).await? else {
            return Ok(());
        };
        self.api.send(api::SnapshotRemove { rbd: image, snapshot: id.rbd_name() }).await?;
        tracing::info!(snapshot = %request.snapshot_id, "snapshot deleted");
        Ok(())
    }

    pub(crate) async fn snapshot_list(&self, request: ListSnapshotsRequest) -> Result<ListSnapshotsResponse, Status> {
        let mut snapshots = all_snapshots(&self.api).await?;
        if !request.snapshot_id.is_empty() {
            snapshots.retain(|snapshot| snapshot.snapshot_id == request.snapshot_id);
        }
        if !request.source_volume_id.is_empty() {
            snapshots.retain(|snapshot| snapshot.source_volume_id == request.source_volume_id);
        }
        let page = crate::paging::page(
            &request.starting_token,
            request.max_entries,
            snapshots.len(),
            "ListSnapshots",
            "snapshots",
        )?;
        let next_token = page.next_token;
        let entries = snapshots
            .drain(page.entries)
            .map(|snapshot| crate::csi::list_snapshots_response::Entry { snapshot: Some(snapshot) })
            .collect();
        Ok(ListSnapshotsResponse { entries, next_token })
    }

    /// What CreateVolume's `volume_content_source` asks for, for the RBD volume
    /// `target` ("POOL/IMAGE"): NOT_FOUND when the source is not there.
    pub(crate) async fn clone_source(
        &self,
        source: &VolumeContentSource,
        target: &VolumeId,
    ) -> Result<CloneSource, Status> {
        match &source.r#type {
            Some(volume_content_source::Type::Snapshot(snapshot)) => {
                let missing =
                    || Status::not_found(format!("source snapshot {:?} does not exist", snapshot.snapshot_id));
                let id = SnapshotId::decode(&snapshot.snapshot_id).ok_or_else(missing)?;
                let image = image_of(&self.api, &id.volume).await?.ok_or_else(missing)?;
                let listed = list(&self.api, &image).await?;
                let found = listed.iter().find(|listed| listed.name == id.rbd_name()).ok_or_else(missing)?;
                Ok(CloneSource {
                    clone_from: format!("{image}@{}", id.rbd_name()),
                    size_bytes: found.size_bytes,
                    internal_snapshot: None,
                })
            }
            Some(volume_content_source::Type::Volume(volume)) => {
                let missing = || Status::not_found(format!("source volume {:?} does not exist", volume.volume_id));
                let id = VolumeId::decode(&volume.volume_id).ok_or_else(missing)?;
                let namespace = gateway::find(&self.api, &id).await?.ok_or_else(missing)?;
                let Some(image) = image_of(&self.api, &id).await? else {
                    return Err(carves_have_no_snapshots("volume_content_source"));
                };
                let snapshot = format!("{CLONE_SNAPSHOT_PREFIX}{}", target.namespace_uuid.simple());
                self.api.send(api::SnapshotCreate { rbd: image.clone(), snapshot: snapshot.clone() }).await?;
                Ok(CloneSource {
                    clone_from: format!("{image}@{snapshot}"),
                    size_bytes: namespace.size_bytes,
                    internal_snapshot: Some((image, snapshot)),
                })
            }
            None => Err(Status::invalid_argument("volume_content_source: neither a snapshot nor a volume")),
        }
    }

    /// Removes the internal snapshot a clone of a volume into `target` was made
    /// through, for a retried CreateVolume that finds the clone made: the first
    /// attempt may have stopped (a crash, a timeout) before removing it, and a
    /// leftover would block deleting the source with no snapshot the CO knows of.
    pub(crate) async fn drop_clone_snapshot_for(&self, source: &VolumeContentSource, target: &VolumeId) {
        let Some(volume_content_source::Type::Volume(volume)) = &source.r#type else { return };
        let Some(id) = VolumeId::decode(&volume.volume_id) else { return };
        if let Ok(Some(image)) = image_of(&self.api, &id).await {
            let snapshot = format!("{CLONE_SNAPSHOT_PREFIX}{}", target.namespace_uuid.simple());
            self.drop_internal_snapshot(&Some((image, snapshot))).await;
        }
    }

    /// Removes every internal clone snapshot left on `image` (their clones are
    /// flattened, so nothing depends on them), before the image itself is deleted.
    pub(crate) async fn drop_clone_leftovers(&self, image: &str) -> Result<(), Status> {
        for snapshot in list(&self.api, image).await? {
            if snapshot.name.starts_with(CLONE_SNAPSHOT_PREFIX) {
                self.drop_internal_snapshot(&Some((image.to_string(), snapshot.name))).await;
            }
        }
        Ok(())
    }

    /// Removes the internal snapshot a volume clone was made through (the clone is
    /// flattened, so nothing depends on it); a failure is logged, not returned: the
    /// volume exists, and a leftover snapshot only blocks deleting the source.
    pub(crate) async fn drop_internal_snapshot(&self, internal: &Option<(String, String)>) {
        if let Some((image, snapshot)) = internal {
            if let Err(error) =
                self.api.send(api::SnapshotRemove { rbd: image.clone(), snapshot: snapshot.clone() }).await
            {
                tracing::warn!(%image, %snapshot, %error, "cannot remove the snapshot a clone was made through; remove it with rbd snap rm");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_id_names_its_volume_and_round_trips() {
        let volume = VolumeId::for_name("nqn.2026-11.io.sluice:csi:gold", "pvc-1");
        let id = SnapshotId::for_name(volume.clone(), "snap-1");
        let text = id.encode();
        assert!(text.starts_with(&volume.encode()), "{text}");
        assert_eq!(SnapshotId::decode(&text), Some(id.clone()));
        assert_eq!(snapshot_uuid_of_rbd_name(&id.rbd_name()), Some(id.snapshot_uuid));
        assert!(text.len() <= crate::volume_id::MAX_VOLUME_ID_BYTES, "{}", text.len());
    }

    #[test]
    fn snapshot_uuids_depend_on_the_name_only_and_differ_from_volume_uuids() {
        assert_eq!(snapshot_uuid_for_name("a"), snapshot_uuid_for_name("a"));
        assert_ne!(snapshot_uuid_for_name("a"), snapshot_uuid_for_name("b"));
        assert_ne!(snapshot_uuid_for_name("a"), crate::volume_id::namespace_uuid_for_name("a"));
    }

    #[test]
    fn snapshots_of_carves_are_invalid_arguments_naming_rbd_pool() {
        let status = carves_have_no_snapshots("source_volume_id");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("rbdPool"), "{}", status.message());
    }

    #[test]
    fn ids_and_names_this_driver_never_made_do_not_decode() {
        for text in [
            "",
            "snap",
            "nqn.x:8c3e0a52-0000-5000-8000-000000000000",
            "@8c3e0a52-0000-5000-8000-000000000000",
            "nqn.x:bad@8c3e0a52-0000-5000-8000-000000000000",
        ] {
            assert_eq!(SnapshotId::decode(text), None, "{text:?}");
        }
        for name in ["monday", "csi-snap-", "csi-snap-xyz", "csi-clone-8c3e0a5200005000800000000000000a"] {
            assert_eq!(snapshot_uuid_of_rbd_name(name), None, "{name:?}");
        }
    }
}

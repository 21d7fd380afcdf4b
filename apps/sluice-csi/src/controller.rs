//! The CSI Controller service: volumes are namespaces of one gateway.
//!
//! - CreateVolume derives the namespace UUID from the volume name (`volume_id`),
//!   looks for it first (a retry finds what the first attempt made), and adds the
//!   namespace with that UUID as both UUID and NGUID. Calls for one volume run one
//!   at a time (`locks`); the gateway refusing a UUID already in use is the
//!   backstop across processes.
//! - Pool volumes go into a subsystem whose Namespace Management pool is the
//!   StorageClass's pool (`pool = "..."` in its `[[subsystem]]` entry): only there
//!   does removing a namespace delete its carve and free the space (elsewhere the
//!   gateway keeps a removed carve for its NSID, which would hand a later volume
//!   the old volume's blocks). The subsystem must exist: the operator sets it up.
//! - CreateVolume makes the namespace attached to no host; ControllerPublishVolume
//!   allows the node's host NQN on the subsystem and attaches the namespace to it
//!   alone (`ns_attach`); unpublish detaches it (`ns_detach`) and denies the host
//!   only when no namespace of the subsystem, the driver's or anyone's, is still
//!   attached to it (see `unpublish`).
//!   With DH-HMAC-CHAP keys in the call's secrets (`secrets`) the host is allowed
//!   with them; see `host_step` for a host that is allowed already.
//! - ControllerExpandVolume grows the namespace with `ns_resize` (`expand`).

use std::collections::HashMap;
use std::sync::Arc;

use management_client::api::{self, Method, Names, Quantity};
use tonic::{Request, Response, Status};

use crate::api::{is_not_found, status_of, Api};
use crate::csi::controller_server::Controller;
use crate::csi::controller_service_capability::{rpc::Type as RpcType, Rpc, Type as CapabilityType};
use crate::csi::validate_volume_capabilities_response::Confirmed;
use crate::csi::volume_capability::access_mode::Mode;
use crate::csi::volume_capability::AccessType;
use crate::csi::*;
use crate::gateway::{self, NamespaceInfo};
use crate::locks::VolumeLocks;
use crate::parameters::{
    capacity_pool, size_fits, volume_size_bytes, Backing, StorageClass, DEFAULT_VOLUME_SIZE_BYTES,
};
use crate::volume_id::{VolumeId, MAX_VOLUME_ID_BYTES};

mod publish;
// The publish rules, for the tests beside this file.
#[cfg(test)]
use publish::{host_allow_params, host_step, HostStep};

/// Publish context key: the gateway's NVMe/TCP addresses (`HOST:PORT,...`) a
/// node discovers the subsystem's paths through.
pub const DISCOVERY_ADDRESSES_KEY: &str = "discoveryAddresses";

pub struct ControllerService {
    pub api: Api,
    pub locks: Arc<VolumeLocks>,
    /// `--discovery-address`: what nodes connect to; empty: the gateway's listeners.
    pub discovery_addresses: Vec<String>,
}

/// Why a set of capabilities cannot be served; None when it can.
pub fn unsupported_capability(capabilities: &[VolumeCapability]) -> Option<String> {
    if capabilities.is_empty() {
        return Some("volume_capabilities: missing".to_string());
    }
    for capability in capabilities {
        let mode = capability.access_mode.and_then(|mode| Mode::try_from(mode.mode).ok()).unwrap_or(Mode::Unknown);
        match (&capability.access_type, mode) {
            (None, _) => return Some("a volume capability without access_type (block or mount)".to_string()),
            (_, Mode::Unknown) => return Some("a volume capability without a known access_mode".to_string()),
            // A local filesystem written from several nodes at once is corrupted.
            (Some(AccessType::Mount(_)), Mode::MultiNodeSingleWriter | Mode::MultiNodeMultiWriter) => {
                return Some(format!("{} needs access_type block: a filesystem cannot be shared", mode.as_str_name()))
            }
            _ => {}
        }
    }
    None
}

fn volume_of(id: &VolumeId, namespace: &NamespaceInfo) -> Volume {
    Volume {
        capacity_bytes: i64::try_from(namespace.size_bytes).unwrap_or(i64::MAX),
        volume_id: id.encode(),
        volume_context: HashMap::from([("nsid".to_string(), namespace.nsid.to_string())]),
        ..Default::default()
    }
}

pub(crate) fn required_volume_id(text: &str) -> Result<Option<VolumeId>, Status> {
    if text.is_empty() {
        return Err(Status::invalid_argument("volume_id: missing"));
    }
    Ok(VolumeId::decode(text))
}

pub(crate) fn not_found(text: &str) -> Status {
    Status::not_found(format!("volume {text:?} does not exist (no such namespace on the gateway)"))
}

impl ControllerService {
    /// The volume's namespace, or NOT_FOUND.
    async fn existing(&self, text: &str) -> Result<(VolumeId, NamespaceInfo), Status> {
        let id = required_volume_id(text)?.ok_or_else(|| not_found(text))?;
        match gateway::find(&self.api, &id).await? {
            Some(namespace) => Ok((id, namespace)),
            None => Err(not_found(text)),
        }
    }

    async fn create(&self, request: CreateVolumeRequest) -> Result<Volume, Status> {
        if request.name.is_empty() {
            return Err(Status::invalid_argument("name: missing"));
        }
        if let Some(reason) = unsupported_capability(&request.volume_capabilities) {
            return Err(Status::invalid_argument(reason));
        }
        if !request.mutable_parameters.is_empty() {
            return Err(Status::invalid_argument("mutable_parameters: not supported"));
        }
        let class =
            StorageClass::parse(&request.parameters).map_err(|error| Status::invalid_argument(error.to_string()))?;
        if request.volume_content_source.is_some() && matches!(class.backing, Backing::Pool { .. }) {
            return Err(crate::snapshots::carves_have_no_snapshots("volume_content_source"));
        }
        let (required_bytes, limit_bytes) =
            request.capacity_range.map_or((0, 0), |range| (range.required_bytes, range.limit_bytes));
        let id = VolumeId::for_name(&class.subsystem_nqn, &request.name);
        if id.encode().len() > MAX_VOLUME_ID_BYTES {
            return Err(Status::invalid_argument(format!(
                "StorageClass parameter \"subsystem\": the NQN is too long for volume ids of at most {MAX_VOLUME_ID_BYTES} bytes"
            )));
        }
        let _held = self.locks.lock(&id.namespace_uuid.to_string()).await;
        let Some(listed) = gateway::namespaces(&self.api, &class.subsystem_nqn).await? else {
            return Err(Status::invalid_argument(format!(
                "StorageClass parameter \"subsystem\": the gateway has no subsystem {}; create it first \
                 (`sluice subsystem add`, with pool = \"<pool>\" in its [[subsystem]] entry for pool volumes)",
                class.subsystem_nqn
            )));
        };
        if let Some(namespace) = listed.iter().find(|namespace| {
            namespace.uuid == id.namespace_uuid && crate::volume_id::made_by_driver(&namespace.uuid, &namespace.nguid)
        }) {
            if let Some(source) = &request.volume_content_source {
                self.drop_clone_snapshot_for(source, &id).await;
            }
            return self.already_made(&id, namespace, required_bytes, limit_bytes, &class);
        }
        let source = match &request.volume_content_source {
            Some(source) => Some(self.clone_source(source, &id).await?),
            None => None,
        };
        // Attached to no host: ControllerPublishVolume attaches it to the node that
        // mounts it, so that no other node of the subsystem sees it.
        let mut params = api::NamespaceAdd {
            nqn: class.subsystem_nqn.clone(),
            uuid: Some(id.namespace_uuid.hyphenated().to_string()),
            nguid: Some(id.namespace_uuid.simple().to_string()),
            hosts: Some(Names::List(Vec::new())),
            ..Default::default()
        };
        match &class.backing {
            Backing::Pool { name, thin } => {
                let block_size_bytes = self.check_pool(&class, name).await?;
                let size_bytes = volume_size_bytes(required_bytes, limit_bytes, block_size_bytes)
                    .map_err(|error| Status::out_of_range(error.to_string()))?;
                self.check_room(name, size_bytes, *thin).await?;
                params.pool = Some(name.clone());
                params.size = Some(Quantity::Number(size_bytes));
                params.thin = Some(*thin);
            }
            Backing::Rbd { ceph_pool } => {
                let block_size_bytes = class.block_size_bytes.unwrap_or(512);
                let mut size_bytes = volume_size_bytes(required_bytes, limit_bytes, u64::from(block_size_bytes))
                    .map_err(|error| Status::out_of_range(error.to_string()))?;
                if let Some(source) = &source {
                    // A copy holds all of its source: never smaller than that.
                    if limit_bytes > 0 && source.size_bytes > limit_bytes.unsigned_abs() {
                        self.drop_internal_snapshot(&source.internal_snapshot).await;
                        return Err(Status::out_of_range(format!(
                            "capacity_range: the source holds {} bytes, more than limit_bytes {limit_bytes}",
                            source.size_bytes
                        )));
                    }
                    size_bytes = size_bytes.max(source.size_bytes);
                    params.clone_from = Some(source.clone_from.clone());
                }
                params.rbd = Some(format!("{ceph_pool}/csi-{}", id.namespace_uuid.simple()));
                params.size = Some(Quantity::Number(size_bytes));
                params.block_size = Some(block_size_bytes);
            }
        }
        let added = self.api.send_raw(params).await;
        if let Some(source) = &source {
            self.drop_internal_snapshot(&source.internal_snapshot).await;
        }
        if let Err(error) = added {
            // Another process may have made it since we looked (the gateway refuses
            // the second UUID): what is there now decides.
            if let Some(namespace) = gateway::find(&self.api, &id).await? {
                return self.already_made(&id, &namespace, required_bytes, limit_bytes, &class);
            }
            return Err(status_of(api::NamespaceAdd::NAME, &error));
        }
        let namespace = gateway::find(&self.api, &id)
            .await?
            .ok_or_else(|| Status::internal("ns_add succeeded but the namespace is not listed"))?;
        tracing::info!(volume = %id.encode(), name = %request.name, nsid = namespace.nsid, size_bytes = namespace.size_bytes, "volume created");
        let mut volume = volume_of(&id, &namespace);
        volume.content_source = request.volume_content_source;
        Ok(volume)
    }

    /// A retried CreateVolume: the same volume if it fits what is asked now.
    fn already_made(
        &self,
        id: &VolumeId,
        namespace: &NamespaceInfo,
        required_bytes: i64,
        limit_bytes: i64,
        class: &StorageClass,
    ) -> Result<Volume, Status> {
        let block_size_fits = class.block_size_bytes.is_none_or(|bytes| u64::from(bytes) == namespace.block_size_bytes);
        if !size_fits(namespace.size_bytes, required_bytes, limit_bytes) || !block_size_fits {
            return Err(Status::already_exists(format!(
                "a volume of this name exists with {} bytes in {}-byte blocks, which does not meet this request",
                namespace.size_bytes, namespace.block_size_bytes
            )));
        }
        Ok(volume_of(id, namespace))
    }

    /// The pool's block size, after checking the subsystem takes carves from it.
    async fn check_pool(&self, class: &StorageClass, pool_name: &str) -> Result<u64, Status> {
        let pools = gateway::pools(&self.api).await?;
        let Some(pool) = pools.iter().find(|pool| pool.name == pool_name) else {
            return Err(Status::invalid_argument(format!(
                "StorageClass parameter \"pool\": the gateway has no [[pool]] {pool_name:?} (`sluice pool list`)"
            )));
        };
        if !pool.management_subsystems.contains(&class.subsystem_nqn) {
            return Err(Status::invalid_argument(format!(
                "StorageClass parameter \"subsystem\": {} does not take its namespaces from pool {pool_name:?}; \
                 add pool = \"{pool_name}\" to its [[subsystem]] entry, so that deleting a volume frees its carve",
                class.subsystem_nqn
            )));
        }
        // A pool not opened yet has not said its block size; 4096 is a multiple of
        // every block size a pool device has.
        let pool_block_size = pool.block_size_bytes.unwrap_or(4096);
        if let Some(wanted) = class.block_size_bytes {
            if pool.block_size_bytes.is_some_and(|bytes| bytes != u64::from(wanted)) {
                return Err(Status::invalid_argument(format!(
                    "StorageClass parameter \"blockSize\": pool {pool_name:?} has {pool_block_size}-byte blocks, not {wanted}"
                )));
            }
        }
        Ok(pool_block_size)
    }

    /// RESOURCE_EXHAUSTED when the pool cannot hold the carve: a thick one must fit
    /// the free space, a thin one the pool (it could never be filled otherwise).
    async fn check_room(&self, pool_name: &str, size_bytes: u64, thin: bool) -> Result<(), Status> {
        let pools = gateway::pools(&self.api).await?;
        let Some(pool) = pools.iter().find(|pool| pool.name == pool_name) else {
            return Ok(());
        };
        let (room, what) = if thin { (pool.capacity_bytes, "capacity") } else { (pool.free_bytes, "free space") };
        match room {
            Some(room) if size_bytes > room => Err(Status::resource_exhausted(format!(
                "pool {pool_name:?} has {room} bytes of {what}, less than the {size_bytes} bytes asked for"
            ))),
            _ => Ok(()),
        }
    }

    async fn delete(&self, request: DeleteVolumeRequest) -> Result<(), Status> {
        // An id this driver never made names no volume: deleting it succeeds.
        let Some(id) = required_volume_id(&request.volume_id)? else {
            return Ok(());
        };
        let _held = self.locks.lock(&id.namespace_uuid.to_string()).await;
        let Some(namespace) = gateway::find(&self.api, &id).await? else {
            // A deletion whose image could not be deleted after the namespace went
            // left the image's [[backend]] entry: finish it now.
            return self.delete_leftover_image(&id).await;
        };
        // An RBD volume's image goes with it (refused while it has snapshots the CO
        // made; internal clone snapshots left by an interrupted clone go first).
        let image = crate::snapshots::image_of(&self.api, &id).await?;
        if let Some(image) = &image {
            self.drop_clone_leftovers(image).await?;
        }
        let delete_image = image.is_some();
        let remove = api::NamespaceRemove {
            nqn: id.subsystem_nqn.clone(),
            nsid: namespace.nsid,
            delete_image: Some(delete_image),
        };
        match self.api.send_raw(remove).await {
            Ok(_) => {
                tracing::info!(volume = %request.volume_id, nsid = namespace.nsid, "volume deleted");
                Ok(())
            }
            Err(error) if is_not_found(&error) => Ok(()),
            Err(error) if crate::api::has_cause(&error, management_client::codes::causes::HAS_SNAPSHOTS) => {
                // The gateway names RBD snapshots; the CO knows them by their ids.
                let snapshots: Vec<String> = crate::snapshots::all_snapshots(&self.api)
                    .await?
                    .into_iter()
                    .filter(|snapshot| snapshot.source_volume_id == request.volume_id)
                    .map(|snapshot| snapshot.snapshot_id)
                    .collect();
                Err(Status::failed_precondition(format!(
                    "volume {} has snapshots ({}): deleting its image would delete them; delete the snapshots \
                     (VolumeSnapshots) first ({error})",
                    request.volume_id,
                    snapshots.join(", ")
                )))
            }
            Err(error) => Err(status_of(api::NamespaceRemove::NAME, &error)),
        }
    }

    /// Deletes the RBD image of a volume whose namespace is gone but whose image a
    /// failed deletion left (still named by an unused `[[backend]]` entry).
    async fn delete_leftover_image(&self, id: &VolumeId) -> Result<(), Status> {
        let image = format!("csi-{}", id.namespace_uuid.simple());
        let listed = self.api.send(api::BackendList {}).await?;
        let leftovers = listed.backends.into_iter().filter(|backend| {
            let unused = backend.used_by.is_empty() && backend.namespace.is_none();
            unused && backend.rbd.as_ref().is_some_and(|rbd| rbd.image == image)
        });
        for backend in leftovers {
            let name = backend.name;
            match self.api.send_raw(api::BackendRemove { name: name.clone(), delete_image: Some(true) }).await {
                Ok(_) => tracing::info!(backend = %name, %image, "deleted the image a failed deletion left"),
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Err(status_of(api::BackendRemove::NAME, &error)),
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let volume = self.create(request.into_inner()).await?;
        Ok(Response::new(CreateVolumeResponse { volume: Some(volume) }))
    }

    async fn delete_volume(
        &self,
        request: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        self.delete(request.into_inner()).await?;
        Ok(Response::new(DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        request: Request<ControllerPublishVolumeRequest>,
    ) -> Result<Response<ControllerPublishVolumeResponse>, Status> {
        let publish_context = self.publish(request.into_inner()).await?;
        Ok(Response::new(ControllerPublishVolumeResponse { publish_context }))
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<ControllerUnpublishVolumeResponse>, Status> {
        self.unpublish(request.into_inner()).await?;
        Ok(Response::new(ControllerUnpublishVolumeResponse {}))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<ValidateVolumeCapabilitiesResponse>, Status> {
        let request = request.into_inner();
        required_volume_id(&request.volume_id)?;
        if request.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities: missing"));
        }
        self.existing(&request.volume_id).await?;
        let response = match unsupported_capability(&request.volume_capabilities) {
            Some(reason) => ValidateVolumeCapabilitiesResponse { confirmed: None, message: reason },
            None => ValidateVolumeCapabilitiesResponse {
                confirmed: Some(Confirmed {
                    volume_context: request.volume_context,
                    volume_capabilities: request.volume_capabilities,
                    parameters: request.parameters,
                    mutable_parameters: request.mutable_parameters,
                }),
                message: String::new(),
            },
        };
        Ok(Response::new(response))
    }

    async fn list_volumes(
        &self,
        request: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        let request = request.into_inner();
        let volumes = gateway::all_volumes(&self.api).await?;
        let page =
            crate::paging::page(&request.starting_token, request.max_entries, volumes.len(), "ListVolumes", "volumes")?;
        let entries = volumes[page.entries]
            .iter()
            .map(|(id, namespace)| list_volumes_response::Entry {
                volume: Some(volume_of(id, namespace)),
                status: None,
            })
            .collect();
        let next_token = page.next_token;
        Ok(Response::new(ListVolumesResponse { entries, next_token }))
    }

    async fn get_capacity(
        &self,
        request: Request<GetCapacityRequest>,
    ) -> Result<Response<GetCapacityResponse>, Status> {
        let request = request.into_inner();
        let wanted = capacity_pool(&request.parameters).map_err(|error| Status::invalid_argument(error.to_string()))?;
        let pools = gateway::pools(&self.api).await?;
        let chosen: Vec<_> =
            pools.iter().filter(|pool| wanted.as_ref().is_none_or(|name| &pool.name == name)).collect();
        if let (Some(name), true) = (&wanted, chosen.is_empty()) {
            return Err(Status::invalid_argument(format!(
                "StorageClass parameter \"pool\": the gateway has no [[pool]] {name:?}"
            )));
        }
        let free_bytes: u64 = chosen.iter().filter_map(|pool| pool.free_bytes).sum();
        let largest_bytes =
            chosen.iter().filter_map(|pool| pool.capacity_bytes).max().unwrap_or(DEFAULT_VOLUME_SIZE_BYTES);
        Ok(Response::new(GetCapacityResponse {
            available_capacity: i64::try_from(free_bytes).unwrap_or(i64::MAX),
            maximum_volume_size: Some(i64::try_from(largest_bytes).unwrap_or(i64::MAX)),
            minimum_volume_size: None,
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _request: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        let capabilities = [
            RpcType::CreateDeleteVolume,
            RpcType::PublishUnpublishVolume,
            RpcType::ListVolumes,
            RpcType::GetCapacity,
            // RBD volumes only; pool volumes refuse them (see `snapshots`).
            RpcType::CreateDeleteSnapshot,
            RpcType::ListSnapshots,
            RpcType::CloneVolume,
            // Online: a published volume grows in place (`expand`).
            RpcType::ExpandVolume,
        ]
        .into_iter()
        .map(|rpc| ControllerServiceCapability { r#type: Some(CapabilityType::Rpc(Rpc { r#type: rpc as i32 })) })
        .collect();
        Ok(Response::new(ControllerGetCapabilitiesResponse { capabilities }))
    }

    async fn create_snapshot(
        &self,
        request: Request<CreateSnapshotRequest>,
    ) -> Result<Response<CreateSnapshotResponse>, Status> {
        let snapshot = self.snapshot_create(request.into_inner()).await?;
        Ok(Response::new(CreateSnapshotResponse { snapshot: Some(snapshot) }))
    }

    async fn delete_snapshot(
        &self,
        request: Request<DeleteSnapshotRequest>,
    ) -> Result<Response<DeleteSnapshotResponse>, Status> {
        self.snapshot_delete(request.into_inner()).await?;
        Ok(Response::new(DeleteSnapshotResponse {}))
    }

    async fn list_snapshots(
        &self,
        request: Request<ListSnapshotsRequest>,
    ) -> Result<Response<ListSnapshotsResponse>, Status> {
        Ok(Response::new(self.snapshot_list(request.into_inner()).await?))
    }

    async fn get_snapshot(&self, _: Request<GetSnapshotRequest>) -> Result<Response<GetSnapshotResponse>, Status> {
        Err(Status::unimplemented("GetSnapshot is not offered (no GET_SNAPSHOT capability): use ListSnapshots"))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<ControllerExpandVolumeRequest>,
    ) -> Result<Response<ControllerExpandVolumeResponse>, Status> {
        Ok(Response::new(self.expand(request.into_inner()).await?))
    }

    async fn controller_get_volume(
        &self,
        _: Request<ControllerGetVolumeRequest>,
    ) -> Result<Response<ControllerGetVolumeResponse>, Status> {
        Err(Status::unimplemented("GET_VOLUME is not offered"))
    }

    async fn controller_list_volume_health(
        &self,
        _: Request<ControllerListVolumeHealthRequest>,
    ) -> Result<Response<ControllerListVolumeHealthResponse>, Status> {
        Err(Status::unimplemented("volume health is not offered yet"))
    }

    async fn controller_get_volume_health(
        &self,
        _: Request<ControllerGetVolumeHealthRequest>,
    ) -> Result<Response<ControllerGetVolumeHealthResponse>, Status> {
        Err(Status::unimplemented("volume health is not offered yet"))
    }

    async fn controller_modify_volume(
        &self,
        _: Request<ControllerModifyVolumeRequest>,
    ) -> Result<Response<ControllerModifyVolumeResponse>, Status> {
        Err(Status::unimplemented("MODIFY_VOLUME is not offered"))
    }
}

#[cfg(test)]
mod tests;

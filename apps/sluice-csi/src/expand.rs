//! ControllerExpandVolume: a volume grows with the gateway's `ns_resize`.
//!
//! - The new size is what CreateVolume would make of the capacity range:
//!   `required_bytes` rounded up to the namespace's block size, within `limit_bytes`
//!   (OUT_OF_RANGE when no whole size is).
//! - A namespace that is that large already (a retry, or a request to shrink or to
//!   stay the same) is a success reporting its size, without a call: the gateway
//!   never shrinks a namespace, and the CSI spec counts such a request as done.
//! - Otherwise `ns_resize` grows it in place, online. The gateway raises the NVMe
//!   Namespace Attribute Changed notice, so the hosts that have it re-read its size
//!   and the block device grows by itself; NodeExpandVolume (node/expand.rs) then
//!   grows the filesystem. A block volume needs no node step.
//! - Refusals map by their machine-readable cause (`api::code_of_cause`): no room
//!   is RESOURCE_EXHAUSTED, a backing that cannot change size FAILED_PRECONDITION.
//!   `would_shrink` can only come from a race (another process grew it past the
//!   size asked for since it was listed): the size is read again and is a success.
//!
//! Calls for one volume run one at a time (the per-volume lock of `controller`).

use management_client::api::{self, Method, Quantity};
use management_client::codes::causes;
use tonic::Status;

use crate::api::{has_cause, is_not_found, status_of};
use crate::controller::{not_found, required_volume_id, unsupported_capability, ControllerService};
use crate::csi::volume_capability::AccessType;
use crate::csi::{CapacityRange, ControllerExpandVolumeRequest, ControllerExpandVolumeResponse, VolumeCapability};
use crate::gateway;
use crate::parameters::{volume_size_bytes, SizeError};

/// The size in bytes a volume with `block_size_bytes` blocks must reach for
/// `range`; 0 when the range asks for no minimum (only a limit): any size serves.
pub fn expansion_target(range: &CapacityRange, block_size_bytes: u64) -> Result<u64, Status> {
    match (range.required_bytes, range.limit_bytes) {
        (required, limit) if required < 0 || limit < 0 => {
            Err(Status::invalid_argument(SizeError::Negative.to_string()))
        }
        (0, 0) => Err(Status::invalid_argument("capacity_range: neither required_bytes nor limit_bytes is given")),
        (0, _) => Ok(0),
        (required, limit) => volume_size_bytes(required, limit, block_size_bytes).map_err(|error| match error {
            SizeError::Negative => Status::invalid_argument(error.to_string()),
            SizeError::OutOfRange { .. } => Status::out_of_range(error.to_string()),
        }),
    }
}

/// Whether the CO must call NodeExpandVolume after the controller grew the volume:
/// not for a block volume (the device grows by itself), else yes (a filesystem to
/// grow, or the CO did not say how the volume is used).
pub fn node_expansion_required(capability: Option<&VolumeCapability>) -> bool {
    !matches!(capability.and_then(|capability| capability.access_type.as_ref()), Some(AccessType::Block(_)))
}

fn response(size_bytes: u64, capability: Option<&VolumeCapability>) -> ControllerExpandVolumeResponse {
    ControllerExpandVolumeResponse {
        capacity_bytes: i64::try_from(size_bytes).unwrap_or(i64::MAX),
        node_expansion_required: node_expansion_required(capability),
    }
}

impl ControllerService {
    pub(crate) async fn expand(
        &self,
        request: ControllerExpandVolumeRequest,
    ) -> Result<ControllerExpandVolumeResponse, Status> {
        // Every missing field is InvalidArgument, before an unknown volume is NotFound.
        let id = required_volume_id(&request.volume_id)?;
        let range = request.capacity_range.ok_or_else(|| Status::invalid_argument("capacity_range: missing"))?;
        if let Some(capability) = &request.volume_capability {
            if let Some(reason) = unsupported_capability(std::slice::from_ref(capability)) {
                return Err(Status::invalid_argument(reason));
            }
        }
        let capability = request.volume_capability.as_ref();
        let id = id.ok_or_else(|| not_found(&request.volume_id))?;
        let _held = self.locks.lock(&id.namespace_uuid.to_string()).await;
        let namespace = gateway::find(&self.api, &id).await?.ok_or_else(|| not_found(&request.volume_id))?;
        let target = expansion_target(&range, namespace.block_size_bytes)?;
        if namespace.size_bytes >= target {
            tracing::info!(volume = %request.volume_id, size_bytes = namespace.size_bytes, asked_bytes = target,
                "volume expansion: the namespace is that large already");
            return Ok(response(namespace.size_bytes, capability));
        }
        let resize = api::NamespaceResize {
            nqn: id.subsystem_nqn.clone(),
            nsid: namespace.nsid,
            size: Quantity::Number(target),
        };
        match self.api.send_raw(resize).await {
            Ok(resized) => {
                let size_bytes = resized.size_bytes;
                tracing::info!(volume = %request.volume_id, nsid = namespace.nsid, previous_bytes = namespace.size_bytes,
                    size_bytes, "volume expanded");
                Ok(response(size_bytes, capability))
            }
            Err(error) if is_not_found(&error) => Err(not_found(&request.volume_id)),
            Err(error) if has_cause(&error, causes::WOULD_SHRINK) => {
                // Grown past `target` by someone else since it was listed: done.
                match gateway::find(&self.api, &id).await? {
                    Some(now) if now.size_bytes >= target => Ok(response(now.size_bytes, capability)),
                    Some(_) => Err(status_of(api::NamespaceResize::NAME, &error)),
                    None => Err(not_found(&request.volume_id)),
                }
            }
            Err(error) => Err(status_of(api::NamespaceResize::NAME, &error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use management_client::api::replies;
    use management_client::{codes, Endpoint};
    use serde_json::Value;
    use tonic::Code;

    use crate::api::Api;
    use crate::csi::volume_capability::{access_mode::Mode, AccessMode, BlockVolume, MountVolume};
    use crate::fake_gateway::{self, Answer};
    use crate::locks::VolumeLocks;
    use crate::volume_id::VolumeId;

    const NQN: &str = "nqn.2026-11.io.sluice:gold";
    const MIB: u64 = 1 << 20;

    fn range(required_bytes: i64, limit_bytes: i64) -> CapacityRange {
        CapacityRange { required_bytes, limit_bytes }
    }

    #[test]
    fn the_target_rounds_up_to_blocks_within_the_limit() {
        assert_eq!(expansion_target(&range(1, 0), 4096).unwrap(), 4096);
        assert_eq!(expansion_target(&range(3 * MIB as i64 + 1, 0), 512).unwrap(), 3 * MIB + 512);
        // Rounding up would pass the limit: the whole blocks below it still hold it.
        assert_eq!(expansion_target(&range(4000, 4100), 4096).unwrap(), 4096);
        assert_eq!(expansion_target(&range(0, 8192), 4096).unwrap(), 0);
        assert_eq!(expansion_target(&range(5000, 6000), 4096).unwrap_err().code(), Code::OutOfRange);
        assert_eq!(expansion_target(&range(10, 5), 512).unwrap_err().code(), Code::OutOfRange);
        assert_eq!(expansion_target(&range(0, 0), 512).unwrap_err().code(), Code::InvalidArgument);
        assert_eq!(expansion_target(&range(-1, 0), 512).unwrap_err().code(), Code::InvalidArgument);
    }

    fn capability(access_type: AccessType) -> VolumeCapability {
        VolumeCapability {
            access_type: Some(access_type),
            access_mode: Some(AccessMode { mode: Mode::SingleNodeWriter as i32 }),
        }
    }

    #[test]
    fn only_a_block_volume_skips_the_node_step() {
        assert!(!node_expansion_required(Some(&capability(AccessType::Block(BlockVolume {})))));
        assert!(node_expansion_required(Some(&capability(AccessType::Mount(MountVolume::default())))));
        assert!(node_expansion_required(None));
        assert!(node_expansion_required(Some(&VolumeCapability::default())));
    }

    /// A gateway with one driver-made namespace that answers `ns_list` and
    /// `ns_resize` as the management API does (the contract of `ns_resize`),
    /// recording the methods called.
    struct FakeGateway {
        size_bytes: Mutex<u64>,
        block_size: u64,
        /// `data.cause` of a refused `ns_resize`; None: it grows.
        refuse_with: Option<&'static str>,
        /// What a refused `ns_resize` leaves the size at (another writer's work).
        size_after_refusal: Option<u64>,
        calls: Mutex<Vec<(String, Value)>>,
        uuid: uuid::Uuid,
    }

    impl FakeGateway {
        fn answer(&self, method: &str, params: &Value) -> Answer {
            self.calls.lock().unwrap().push((method.to_string(), params.clone()));
            let mut size = self.size_bytes.lock().unwrap();
            match method {
                api::NamespaceListRequest::NAME => {
                    let asked: api::NamespaceListRequest = serde_json::from_value(params.clone()).unwrap();
                    fake_gateway::reply::<api::NamespaceListRequest>(replies::NamespaceList {
                        nqn: asked.nqn,
                        namespaces: vec![fake_gateway::namespace(1, self.uuid, *size, self.block_size)],
                    })
                }
                api::NamespaceResize::NAME => {
                    let asked: api::NamespaceResize = serde_json::from_value(params.clone()).unwrap();
                    let Quantity::Number(asked) = asked.size else { panic!("the driver sends sizes in bytes") };
                    if let Some(cause) = self.refuse_with {
                        if let Some(after) = self.size_after_refusal {
                            *size = after;
                        }
                        // `data` has no type: the refusal's fields as the daemon writes them.
                        let data = serde_json::json!({ "field": "size", "cause": cause });
                        return fake_gateway::refusal(
                            codes::CHANGE_REFUSED,
                            format!("size: refused ({cause})"),
                            Some(data),
                        );
                    }
                    if !asked.is_multiple_of(self.block_size) {
                        return fake_gateway::refusal(codes::INVALID_PARAMS, "size: not a multiple", None);
                    }
                    let previous = *size;
                    *size = asked;
                    fake_gateway::reply::<api::NamespaceResize>(replies::NamespaceResized {
                        nqn: NQN.to_string(),
                        nsid: 1,
                        size_bytes: asked,
                        block_size: self.block_size,
                        blocks: asked / self.block_size,
                        previous_size_bytes: previous,
                        changed: asked != previous,
                    })
                }
                other => fake_gateway::refusal(codes::METHOD_NOT_FOUND, format!("no method {other}"), None),
            }
        }

        fn methods(&self) -> Vec<String> {
            self.calls.lock().unwrap().iter().map(|(method, _)| method.clone()).collect()
        }
    }

    struct Setup {
        gateway: Arc<FakeGateway>,
        service: ControllerService,
        id: VolumeId,
    }

    fn setup(name: &str, size_bytes: u64, refuse_with: Option<&'static str>, size_after_refusal: Option<u64>) -> Setup {
        let id = VolumeId::for_name(NQN, name);
        let gateway = Arc::new(FakeGateway {
            size_bytes: Mutex::new(size_bytes),
            block_size: 4096,
            refuse_with,
            size_after_refusal,
            calls: Mutex::new(Vec::new()),
            uuid: id.namespace_uuid,
        });
        let answering = Arc::clone(&gateway);
        let socket =
            fake_gateway::serve(&format!("expand-{name}"), move |method, params| answering.answer(method, params));
        let service = ControllerService {
            api: Api::new(vec![Endpoint::Unix(socket)]),
            locks: Arc::new(VolumeLocks::default()),
            discovery_addresses: Vec::new(),
        };
        Setup { gateway, service, id }
    }

    fn request(id: &str, required_bytes: i64, access_type: Option<AccessType>) -> ControllerExpandVolumeRequest {
        ControllerExpandVolumeRequest {
            volume_id: id.to_string(),
            capacity_range: Some(range(required_bytes, 0)),
            volume_capability: access_type.map(capability),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_volume_grows_to_whole_blocks_and_a_filesystem_asks_for_the_node_step() {
        let Setup { gateway, service, id } = setup("grow", 8 * MIB, None, None);
        let mount = Some(AccessType::Mount(MountVolume::default()));
        let grown = service.expand(request(&id.encode(), 16 * MIB as i64 + 1, mount)).await.unwrap();
        assert_eq!(grown.capacity_bytes, (16 * MIB + 4096) as i64);
        assert!(grown.node_expansion_required);
        let calls = gateway.calls.lock().unwrap().clone();
        let (method, params) = calls.last().unwrap();
        assert_eq!(method, api::NamespaceResize::NAME);
        assert_eq!(
            serde_json::from_value::<api::NamespaceResize>(params.clone()).unwrap(),
            api::NamespaceResize { nqn: NQN.to_string(), nsid: 1, size: Quantity::Number(16 * MIB + 4096) }
        );
        // A retry finds it done and calls nothing more than the listing.
        let again = service.expand(request(&id.encode(), 16 * MIB as i64 + 1, None)).await.unwrap();
        assert_eq!(again.capacity_bytes, (16 * MIB + 4096) as i64);
        assert_eq!(gateway.methods(), ["ns_list", "ns_resize", "ns_list"]);
    }

    #[tokio::test]
    async fn a_request_to_shrink_or_stay_is_a_success_without_a_resize() {
        let Setup { gateway, service, id } = setup("shrink", 8 * MIB, None, None);
        let block = Some(AccessType::Block(BlockVolume {}));
        for asked in [4 * MIB, 8 * MIB] {
            let answer = service.expand(request(&id.encode(), asked as i64, block.clone())).await.unwrap();
            assert_eq!(answer.capacity_bytes, (8 * MIB) as i64);
            assert!(!answer.node_expansion_required);
        }
        assert!(!gateway.methods().contains(&"ns_resize".to_string()));
    }

    #[tokio::test]
    async fn missing_fields_are_invalid_and_unknown_volumes_not_found() {
        let Setup { gateway, service, id } = setup("fields", 8 * MIB, None, None);
        let code = |result: Result<ControllerExpandVolumeResponse, Status>| result.unwrap_err().code();
        assert_eq!(code(service.expand(request("", MIB as i64, None)).await), Code::InvalidArgument);
        let no_range = ControllerExpandVolumeRequest { volume_id: id.encode(), ..Default::default() };
        assert_eq!(code(service.expand(no_range).await), Code::InvalidArgument);
        assert_eq!(code(service.expand(request("fake-vol-id", MIB as i64, None)).await), Code::NotFound);
        let other = VolumeId::for_name(NQN, "never-made").encode();
        assert_eq!(code(service.expand(request(&other, 16 * MIB as i64, None)).await), Code::NotFound);
        assert!(!gateway.methods().contains(&"ns_resize".to_string()));
    }

    #[tokio::test]
    async fn refusals_map_by_cause() {
        for (cause, code) in
            [(causes::NO_SPACE, Code::ResourceExhausted), (causes::NOT_RESIZABLE, Code::FailedPrecondition)]
        {
            let Setup { service, id, .. } = setup(&format!("refused-{cause}"), 8 * MIB, Some(cause), None);
            let error = service.expand(request(&id.encode(), 16 * MIB as i64, None)).await.unwrap_err();
            assert_eq!(error.code(), code, "{cause}: {}", error.message());
            assert!(error.message().contains("ns_resize"), "{}", error.message());
        }
        // would_shrink: grown past the size asked for meanwhile, which is done.
        let Setup { service, id, .. } = setup("raced", 8 * MIB, Some(causes::WOULD_SHRINK), Some(32 * MIB));
        let answer = service.expand(request(&id.encode(), 16 * MIB as i64, None)).await.unwrap();
        assert_eq!(answer.capacity_bytes, (32 * MIB) as i64);
        // ... and a would_shrink that the size does not explain stays a refusal.
        let Setup { service, id, .. } = setup("odd", 8 * MIB, Some(causes::WOULD_SHRINK), None);
        let error = service.expand(request(&id.encode(), 16 * MIB as i64, None)).await.unwrap_err();
        assert_eq!(error.code(), Code::OutOfRange);
    }
}

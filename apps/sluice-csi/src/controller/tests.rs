//! The Controller service against a fake gateway, and its pure rules.

use super::*;
use crate::csi::volume_capability::{AccessMode, BlockVolume, MountVolume};
use crate::fake_gateway;
use crate::secrets::{self, DhchapKeys};
use management_client::api::replies;
use management_client::codes;

fn capability(access_type: AccessType, mode: Mode) -> VolumeCapability {
    VolumeCapability { access_type: Some(access_type), access_mode: Some(AccessMode { mode: mode as i32 }) }
}

#[test]
fn shared_writers_need_block_access() {
    let mount = || AccessType::Mount(MountVolume::default());
    assert_eq!(unsupported_capability(&[capability(mount(), Mode::SingleNodeWriter)]), None);
    assert_eq!(
        unsupported_capability(&[capability(AccessType::Block(BlockVolume {}), Mode::MultiNodeMultiWriter)]),
        None
    );
    assert!(unsupported_capability(&[capability(mount(), Mode::MultiNodeMultiWriter)]).is_some());
    assert!(unsupported_capability(&[capability(mount(), Mode::Unknown)]).is_some());
    assert!(unsupported_capability(&[]).is_some());
    assert!(unsupported_capability(&[VolumeCapability { access_type: None, access_mode: None }]).is_some());
}

#[test]
fn host_allow_gets_the_keys_of_the_secrets() {
    let host_key = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:";
    let controller_key = "DHHC-1:00:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB:";
    let secrets = HashMap::from([
        (secrets::HOST_SECRET_KEY.to_string(), host_key.to_string()),
        (secrets::CONTROLLER_SECRET_KEY.to_string(), controller_key.to_string()),
    ]);
    let keys = secrets::dhchap_keys(&secrets).unwrap();
    let plain = api::HostAllow { nqn: "nqn.a:gold".to_string(), host: "nqn.b:node".to_string(), ..Default::default() };
    assert_eq!(
        host_allow_params("nqn.a:gold", "nqn.b:node", &keys),
        api::HostAllow {
            dhchap_secret: Some(host_key.to_string()),
            dhchap_ctrl_secret: Some(controller_key.to_string()),
            ..plain.clone()
        }
    );
    let one_way = DhchapKeys { controller: None, ..keys };
    assert_eq!(
        host_allow_params("nqn.a:gold", "nqn.b:node", &one_way),
        api::HostAllow { dhchap_secret: Some(host_key.to_string()), ..plain.clone() }
    );
    assert_eq!(host_allow_params("nqn.a:gold", "nqn.b:node", &DhchapKeys::default()), plain);
}

#[test]
fn an_allowed_host_keeps_its_entry_unless_the_call_brings_keys_and_it_has_no_tls_key() {
    let keys = DhchapKeys { host: Some("DHHC-1:00:x:".to_string()), controller: None };
    let none = DhchapKeys::default();
    let entry = |dhchap: bool, tls: bool| replies::HostEntry {
        host: "nqn.b:node".to_string(),
        dhchap,
        bidirectional: false,
        tls,
    };
    let (plain, authenticated, tls) = (entry(false, false), entry(true, false), entry(true, true));
    assert_eq!(host_step(None, &none), HostStep::Allow);
    assert_eq!(host_step(None, &keys), HostStep::Allow);
    // Never turns authentication off, nor touches an entry without reason.
    assert_eq!(host_step(Some(&authenticated), &none), HostStep::Keep);
    assert_eq!(host_step(Some(&plain), &none), HostStep::Keep);
    // A rotated Secret reaches a host that is allowed already.
    assert_eq!(host_step(Some(&plain), &keys), HostStep::UpdateKeys);
    assert_eq!(host_step(Some(&authenticated), &keys), HostStep::UpdateKeys);
    assert_eq!(host_step(Some(&tls), &keys), HostStep::KeepOperatorsEntry);
}

#[test]
fn an_id_that_is_missing_is_invalid_and_one_never_made_is_none() {
    assert_eq!(required_volume_id("").unwrap_err().code(), tonic::Code::InvalidArgument);
    assert_eq!(required_volume_id("fake-vol-id").unwrap(), None);
}

/// A gateway for CreateVolume: a pool `fast` whose subsystem is `nqn.a:gold`, and
/// the namespaces `ns_add` made; records the `ns_add` requests.
fn creating_gateway(name: &str) -> (ControllerService, Arc<std::sync::Mutex<Vec<api::NamespaceAdd>>>) {
    const NQN: &str = "nqn.a:gold";
    let added = Arc::new(std::sync::Mutex::new(Vec::<api::NamespaceAdd>::new()));
    let recorded = Arc::clone(&added);
    let socket = fake_gateway::serve(name, move |method, params| {
        let mut added = recorded.lock().unwrap();
        let listed = |added: &[api::NamespaceAdd]| -> Vec<replies::Namespace> {
            (1..)
                .zip(added)
                .map(|(nsid, request)| {
                    let uuid = uuid::Uuid::try_parse(request.uuid.as_deref().unwrap()).unwrap();
                    let Some(Quantity::Number(size_bytes)) = request.size else { panic!("a size in bytes") };
                    let block_size = request.block_size.map_or(4096, u64::from);
                    fake_gateway::namespace(nsid, uuid, size_bytes, block_size)
                })
                .collect()
        };
        match method {
            api::NamespaceListRequest::NAME => {
                let asked: api::NamespaceListRequest = serde_json::from_value(params.clone()).unwrap();
                if asked.nqn != NQN {
                    // `data` has no type: the refusal's cause as the daemon writes it.
                    let data = serde_json::json!({ "cause": codes::causes::NOT_FOUND });
                    return fake_gateway::refusal(codes::CHANGE_REFUSED, "no such subsystem", Some(data));
                }
                fake_gateway::reply::<api::NamespaceListRequest>(replies::NamespaceList {
                    nqn: asked.nqn,
                    namespaces: listed(&added),
                })
            }
            api::PoolList::NAME => fake_gateway::reply::<api::PoolList>(replies::Pools {
                pools: vec![replies::Pool {
                    name: "fast".to_string(),
                    device: "/dev/nvme0n1".to_string(),
                    table: None,
                    open: true,
                    management_subsystems: vec![NQN.to_string()],
                    block_size: Some(4096),
                    unit_size_bytes: Some(1 << 20),
                    capacity_bytes: Some(1 << 30),
                    free_bytes: Some(1 << 29),
                    carves: Some(Vec::new()),
                }],
            }),
            api::NamespaceAdd::NAME => {
                added.push(serde_json::from_value(params.clone()).unwrap());
                let namespace = listed(&added).pop().unwrap();
                fake_gateway::reply::<api::NamespaceAdd>(replies::NamespaceAdded { namespace, copying: None })
            }
            other => fake_gateway::refusal(codes::METHOD_NOT_FOUND, format!("no method {other}"), None),
        }
    });
    let service = ControllerService {
        api: Api::new(vec![management_client::Endpoint::Unix(socket)]),
        locks: Arc::new(VolumeLocks::default()),
        discovery_addresses: Vec::new(),
    };
    (service, added)
}

/// CreateVolume's `ns_add`: the namespace UUID as UUID and NGUID, attached to no
/// host, a size in bytes, and the pool's carve (thin by default) or the RBD image
/// in 512-byte blocks.
#[tokio::test]
async fn a_volume_is_added_with_its_uuid_attached_to_no_host() {
    let (service, added) = creating_gateway("create");
    let create = |name: &str, backing: (&str, &str)| CreateVolumeRequest {
        name: name.to_string(),
        parameters: HashMap::from([
            ("subsystem".to_string(), "nqn.a:gold".to_string()),
            (backing.0.to_string(), backing.1.to_string()),
        ]),
        capacity_range: Some(CapacityRange { required_bytes: 10 << 20, limit_bytes: 0 }),
        volume_capabilities: vec![capability(AccessType::Block(BlockVolume {}), Mode::SingleNodeWriter)],
        ..Default::default()
    };
    let carve = service.create(create("pvc-carve", ("pool", "fast"))).await.unwrap();
    let image = service.create(create("pvc-image", ("rbdPool", "replicapool"))).await.unwrap();
    assert_eq!((carve.capacity_bytes, image.capacity_bytes), (10 << 20, 10 << 20));
    let id = |name: &str| crate::volume_id::VolumeId::for_name("nqn.a:gold", name).namespace_uuid;
    let common = |name: &str| api::NamespaceAdd {
        nqn: "nqn.a:gold".to_string(),
        size: Some(Quantity::Number(10 << 20)),
        nguid: Some(id(name).simple().to_string()),
        uuid: Some(id(name).hyphenated().to_string()),
        hosts: Some(Names::List(Vec::new())),
        ..Default::default()
    };
    let expected = [
        api::NamespaceAdd { pool: Some("fast".to_string()), thin: Some(true), ..common("pvc-carve") },
        api::NamespaceAdd {
            rbd: Some(format!("replicapool/csi-{}", id("pvc-image").simple())),
            block_size: Some(512),
            ..common("pvc-image")
        },
    ];
    assert_eq!(*added.lock().unwrap(), expected);
    // A retry finds the volume made: no second ns_add.
    service.create(create("pvc-carve", ("pool", "fast"))).await.unwrap();
    assert_eq!(added.lock().unwrap().len(), 2);
}

/// DeleteVolume of a volume whose namespace is gone but whose image a failed
/// deletion left: the unused backend naming `csi-<uuid>` is removed with its image;
/// other backends are left alone.
#[tokio::test]
async fn a_deletion_that_left_its_image_is_finished_by_the_next() {
    let id = crate::volume_id::VolumeId::for_name("nqn.2026-11.io.sluice:gold", "leftover");
    let image = format!("csi-{}", id.namespace_uuid.simple());
    let calls = Arc::new(std::sync::Mutex::new(Vec::<(String, serde_json::Value)>::new()));
    let recorded = Arc::clone(&calls);
    let backend = |name: &str, image: &str, namespace: Option<replies::ServedBy>| replies::Backend {
        name: name.to_string(),
        kind: "rbd".to_string(),
        path: None,
        configured: false,
        open: namespace.is_some(),
        size_bytes: None,
        block_size: None,
        used_by: namespace.iter().map(|served| format!("namespace {}", served.nsid)).collect(),
        namespace,
        rbd: Some(replies::RbdImage {
            pool: "rbd".to_string(),
            image: image.to_string(),
            state: serde_json::Map::new(),
        }),
    };
    let backends = replies::Backends {
        backends: vec![
            backend("left", &image, None),
            backend("other", "csi-0000", None),
            backend("busy", &image, Some(replies::ServedBy { nqn: "n".to_string(), nsid: 3 })),
        ],
    };
    let socket = fake_gateway::serve("leftover", move |method, params| {
        recorded.lock().unwrap().push((method.to_string(), params.clone()));
        match method {
            api::NamespaceListRequest::NAME => {
                let asked: api::NamespaceListRequest = serde_json::from_value(params.clone()).unwrap();
                fake_gateway::reply::<api::NamespaceListRequest>(replies::NamespaceList {
                    nqn: asked.nqn,
                    namespaces: Vec::new(),
                })
            }
            api::BackendList::NAME => fake_gateway::reply::<api::BackendList>(backends.clone()),
            // backend_remove's reply has no type (`Value`): what the daemon answers.
            api::BackendRemove::NAME => {
                fake_gateway::reply::<api::BackendRemove>(serde_json::json!({ "removed": true, "image_deleted": true }))
            }
            other => fake_gateway::refusal(codes::METHOD_NOT_FOUND, format!("no method {other}"), None),
        }
    });
    let service = ControllerService {
        api: Api::new(vec![management_client::Endpoint::Unix(socket)]),
        locks: Arc::new(VolumeLocks::default()),
        discovery_addresses: Vec::new(),
    };
    service.delete(DeleteVolumeRequest { volume_id: id.encode(), ..Default::default() }).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let removed: Vec<api::BackendRemove> = calls
        .iter()
        .filter(|(method, _)| method == api::BackendRemove::NAME)
        .map(|(_, params)| serde_json::from_value(params.clone()).unwrap())
        .collect();
    assert_eq!(removed, [api::BackendRemove { name: "left".to_string(), delete_image: Some(true) }], "{calls:?}");
}

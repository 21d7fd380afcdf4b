//! What the controller reads from the gateway: namespaces by UUID, pools,
//! listeners. Each function is one or two management calls, parsed.

use management_client::api::{self, replies, Method};
use tonic::Status;
use uuid::Uuid;

use crate::api::{is_not_found, status_of, Api};
use crate::volume_id::{made_by_driver, VolumeId};

/// A namespace of the gateway, as `ns_list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    pub size_bytes: u64,
    pub block_size_bytes: u64,
    pub uuid: Uuid,
    pub nguid: [u8; 16],
    /// The hosts that see it: `None` every host the subsystem allows, else these
    /// (none when empty).
    pub hosts: Option<Vec<String>>,
}

impl NamespaceInfo {
    /// True when controllers of `host` see the namespace.
    pub fn attached_to(&self, host: &str) -> bool {
        self.hosts.as_ref().is_none_or(|hosts| hosts.iter().any(|entry| entry == host))
    }
}

/// The driver's view of a listed namespace; None when its UUID or NGUID does not
/// parse (not one this driver could have made: it is skipped).
fn parse_namespace(listed: &replies::Namespace) -> Option<NamespaceInfo> {
    Some(NamespaceInfo {
        nsid: listed.nsid,
        size_bytes: listed.size_bytes,
        block_size_bytes: listed.block_size,
        uuid: Uuid::try_parse(&listed.uuid).ok()?,
        nguid: *Uuid::try_parse(&listed.nguid).ok()?.as_bytes(),
        hosts: listed.hosts.clone(),
    })
}

/// The namespaces of `subsystem_nqn`; None when the gateway has no such subsystem.
pub async fn namespaces(api: &Api, subsystem_nqn: &str) -> Result<Option<Vec<NamespaceInfo>>, Status> {
    match api.send_raw(api::NamespaceListRequest { nqn: subsystem_nqn.to_string() }).await {
        Ok(listed) => Ok(Some(listed.namespaces.iter().filter_map(parse_namespace).collect())),
        Err(error) if is_not_found(&error) => Ok(None),
        Err(error) => Err(status_of(api::NamespaceListRequest::NAME, &error)),
    }
}

/// The namespace of a volume; None when it (or its subsystem) is gone. Only a
/// namespace this driver made counts: a volume id that names an operator's own
/// namespace (a hand-written PersistentVolume, say) must never lead the driver to
/// publish or delete it.
pub async fn find(api: &Api, volume: &VolumeId) -> Result<Option<NamespaceInfo>, Status> {
    let listed = namespaces(api, &volume.subsystem_nqn).await?.unwrap_or_default();
    Ok(listed
        .into_iter()
        .find(|namespace| namespace.uuid == volume.namespace_uuid && made_by_driver(&namespace.uuid, &namespace.nguid)))
}

/// Every volume this driver made, on every subsystem of the gateway, by id.
pub async fn all_volumes(api: &Api) -> Result<Vec<(VolumeId, NamespaceInfo)>, Status> {
    let listed = api.send(api::SubsystemList {}).await?;
    let mut volumes = Vec::new();
    for subsystem in listed.subsystems {
        for namespace in namespaces(api, &subsystem.nqn).await?.unwrap_or_default() {
            if made_by_driver(&namespace.uuid, &namespace.nguid) {
                let id = VolumeId { subsystem_nqn: subsystem.nqn.clone(), namespace_uuid: namespace.uuid };
                volumes.push((id, namespace));
            }
        }
    }
    volumes.sort_by_key(|(id, _)| id.encode());
    Ok(volumes)
}

/// A `[[pool]]` of the gateway, as `pool_list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    pub name: String,
    /// Subsystems whose Namespace Management takes carves from this pool.
    pub management_subsystems: Vec<String>,
    /// None until the pool is open (first used).
    pub block_size_bytes: Option<u64>,
    pub capacity_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
}

pub async fn pools(api: &Api) -> Result<Vec<PoolInfo>, Status> {
    let listed = api.send(api::PoolList {}).await?;
    Ok(listed
        .pools
        .into_iter()
        .map(|pool| PoolInfo {
            name: pool.name,
            management_subsystems: pool.management_subsystems,
            block_size_bytes: pool.block_size,
            capacity_bytes: pool.capacity_bytes,
            free_bytes: pool.free_bytes,
        })
        .collect())
}

/// Addresses (`HOST:PORT`) of the gateway's listeners a host can reach: a listener's
/// `advertise` address when it has one (the bound address may be a wildcard, or only
/// reachable behind NAT), else its bound address; wildcard binds without one name no
/// address and are left out.
pub async fn reachable_listeners(api: &Api) -> Result<Vec<String>, Status> {
    let mut addresses = reachable_addresses(&api.send(api::ListenerList {}).await?);
    // A gateway group: every member's address too, so a node that stages while the
    // gateway that answered here is down still finds the others (each member's
    // discovery log also names its peers, but only while that member is up).
    match api.send_raw(api::GatewayStatus {}).await {
        Ok(status) => {
            for address in member_addresses(&status) {
                if !addresses.contains(&address) {
                    addresses.push(address);
                }
            }
        }
        // Not a gateway, or one too old to know the method: its own listeners are
        // all there is. Any other failure (access denied, internal) is reported.
        Err(error) if is_not_a_gateway(&error) => {}
        Err(error) => return Err(status_of(api::GatewayStatus::NAME, &error)),
    }
    Ok(addresses)
}

/// True when `gateway_status` was refused because this target is no gateway (or
/// does not have the method).
fn is_not_a_gateway(error: &management_client::CallError) -> bool {
    use management_client::codes::{CHANGE_REFUSED, METHOD_NOT_FOUND};
    matches!(error, management_client::CallError::Remote(remote) if remote.code == CHANGE_REFUSED || remote.code == METHOD_NOT_FOUND)
}

/// The members' NVMe/TCP addresses from a `gateway_status` answer.
fn member_addresses(status: &replies::GatewayStatus) -> Vec<String> {
    status.members.iter().map(|member| member.address.clone()).collect()
}

/// [`reachable_listeners`] from a `listener_list` answer.
fn reachable_addresses(listed: &replies::Listeners) -> Vec<String> {
    let mut addresses = Vec::new();
    for listener in &listed.listeners {
        let address = listener.advertise.as_deref().unwrap_or(&listener.address);
        match address.parse::<std::net::SocketAddr>() {
            Ok(socket) if socket.ip().is_unspecified() => {}
            _ => addresses.push(address.to_string()),
        }
    }
    addresses
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_gateway;

    fn member(name: &str, address: &str, alive: bool) -> replies::GatewayMember {
        replies::GatewayMember { name: name.to_string(), address: address.to_string(), alive, this_gateway: alive }
    }

    #[test]
    fn every_member_of_a_group_is_a_discovery_address() {
        let mut status = replies::GatewayStatus {
            group: "g".to_string(),
            name: "b".to_string(),
            members: vec![member("a", "10.0.0.5:4420", false), member("b", "10.0.0.6:4420", true)],
            rest: serde_json::Map::new(),
        };
        assert_eq!(member_addresses(&status), ["10.0.0.5:4420", "10.0.0.6:4420"]);
        status.members.clear();
        assert!(member_addresses(&status).is_empty());
    }

    #[test]
    fn a_listed_namespace_parses_and_one_with_a_foreign_uuid_or_nguid_does_not() {
        let uuid = crate::volume_id::namespace_uuid_for_name("pvc-a");
        let listed = fake_gateway::namespace(3, uuid, 1048576, 4096);
        let namespace = parse_namespace(&listed).unwrap();
        assert_eq!((namespace.nsid, namespace.size_bytes, namespace.block_size_bytes), (3, 1048576, 4096));
        assert_eq!(namespace.hosts, Some(Vec::new()));
        assert!(made_by_driver(&namespace.uuid, &namespace.nguid));
        assert_eq!(parse_namespace(&replies::Namespace { uuid: "not-a-uuid".to_string(), ..listed.clone() }), None);
        assert_eq!(parse_namespace(&replies::Namespace { nguid: String::new(), ..listed }), None);
    }

    /// A namespace whose UUID does not parse (not one the driver could have made)
    /// is left out; the others are listed, and a missing subsystem is None.
    #[tokio::test]
    async fn namespaces_with_a_foreign_uuid_are_skipped() {
        let uuid = crate::volume_id::namespace_uuid_for_name("pvc-a");
        let socket = fake_gateway::serve("namespaces", move |method, params| {
            use management_client::codes;
            if method != api::NamespaceListRequest::NAME {
                return fake_gateway::refusal(codes::METHOD_NOT_FOUND, format!("no method {method}"), None);
            }
            let asked: api::NamespaceListRequest = serde_json::from_value(params.clone()).unwrap();
            if asked.nqn != "nqn.a:gold" {
                // `data` has no type: the refusal's cause as the daemon writes it.
                let data = serde_json::json!({ "cause": codes::causes::NOT_FOUND });
                return fake_gateway::refusal(codes::CHANGE_REFUSED, "no such subsystem", Some(data));
            }
            let foreign =
                replies::Namespace { uuid: "operator".to_string(), ..fake_gateway::namespace(1, uuid, 4096, 512) };
            fake_gateway::reply::<api::NamespaceListRequest>(replies::NamespaceList {
                nqn: asked.nqn,
                namespaces: vec![foreign, fake_gateway::namespace(2, uuid, 8192, 512)],
            })
        });
        let api = Api::new(vec![management_client::Endpoint::Unix(socket)]);
        let listed = namespaces(&api, "nqn.a:gold").await.unwrap().unwrap();
        assert_eq!(listed.iter().map(|namespace| namespace.nsid).collect::<Vec<_>>(), [2]);
        assert_eq!(namespaces(&api, "nqn.a:other").await.unwrap(), None);
    }

    #[test]
    fn nodes_are_given_the_advertised_address_and_never_a_wildcard() {
        let listener = |address: &str, advertise: Option<&str>| replies::Listener {
            address: address.to_string(),
            discovery_only: false,
            tls: "none".to_string(),
            configured: true,
            active: true,
            advertise: advertise.map(str::to_string),
        };
        let listed = replies::Listeners {
            listeners: vec![
                listener("127.0.0.1:4420", Some("10.0.2.2:4420")),
                listener("0.0.0.0:8009", None),
                listener("0.0.0.0:4421", Some("192.0.2.7:4421")),
                listener("192.0.2.8:4420", None),
            ],
        };
        assert_eq!(reachable_addresses(&listed), ["10.0.2.2:4420", "192.0.2.7:4421", "192.0.2.8:4420"]);
    }
}

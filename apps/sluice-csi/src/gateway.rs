//! What the controller reads from the gateway: namespaces by UUID, pools,
//! listeners. Each function is one or two management calls, parsed.

use serde_json::{json, Value};
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
    /// The hosts that see it: `None` every host the subsystem allows (a gateway
    /// older than per-host attachment shows no list either), else these (none when
    /// empty).
    pub hosts: Option<Vec<String>>,
}

impl NamespaceInfo {
    /// True when controllers of `host` see the namespace.
    pub fn attached_to(&self, host: &str) -> bool {
        self.hosts.as_ref().is_none_or(|hosts| hosts.iter().any(|entry| entry == host))
    }
}

fn parse_namespace(value: &Value) -> Option<NamespaceInfo> {
    let nguid_text = value.get("nguid")?.as_str()?;
    Some(NamespaceInfo {
        nsid: u32::try_from(value.get("nsid")?.as_u64()?).ok()?,
        size_bytes: value.get("size_bytes")?.as_u64()?,
        block_size_bytes: value.get("block_size")?.as_u64()?,
        uuid: Uuid::try_parse(value.get("uuid")?.as_str()?).ok()?,
        nguid: *Uuid::try_parse(nguid_text).ok()?.as_bytes(),
        hosts: value
            .get("hosts")
            .and_then(Value::as_array)
            .map(|hosts| hosts.iter().filter_map(|host| host.as_str().map(str::to_string)).collect()),
    })
}

/// The namespaces of `subsystem_nqn`; None when the gateway has no such subsystem.
pub async fn namespaces(api: &Api, subsystem_nqn: &str) -> Result<Option<Vec<NamespaceInfo>>, Status> {
    match api.call_raw("ns_list", json!({ "nqn": subsystem_nqn })).await {
        Ok(result) => {
            let listed = result.get("namespaces").and_then(Value::as_array).cloned().unwrap_or_default();
            Ok(Some(listed.iter().filter_map(parse_namespace).collect()))
        }
        Err(error) if is_not_found(&error) => Ok(None),
        Err(error) => Err(status_of("ns_list", &error)),
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
    let subsystems = api.call("subsystem_list", json!({})).await?;
    let mut volumes = Vec::new();
    for subsystem in subsystems.get("subsystems").and_then(Value::as_array).cloned().unwrap_or_default() {
        let Some(nqn) = subsystem.get("nqn").and_then(Value::as_str) else {
            continue;
        };
        for namespace in namespaces(api, nqn).await?.unwrap_or_default() {
            if made_by_driver(&namespace.uuid, &namespace.nguid) {
                let id = VolumeId { subsystem_nqn: nqn.to_string(), namespace_uuid: namespace.uuid };
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
    let result = api.call("pool_list", json!({})).await?;
    let strings = |value: Option<&Value>| -> Vec<String> {
        value
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |items| items.iter().filter_map(Value::as_str).map(str::to_string).collect())
    };
    Ok(result
        .get("pools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|pool| {
            Some(PoolInfo {
                name: pool.get("name")?.as_str()?.to_string(),
                management_subsystems: strings(pool.get("management_subsystems")),
                block_size_bytes: pool.get("block_size").and_then(Value::as_u64),
                capacity_bytes: pool.get("capacity_bytes").and_then(Value::as_u64),
                free_bytes: pool.get("free_bytes").and_then(Value::as_u64),
            })
        })
        .collect())
}

/// Addresses (`HOST:PORT`) of the gateway's listeners a host can reach: a listener's
/// `advertise` address when it has one (the bound address may be a wildcard, or only
/// reachable behind NAT), else its bound address; wildcard binds without one name no
/// address and are left out.
pub async fn reachable_listeners(api: &Api) -> Result<Vec<String>, Status> {
    let mut addresses = reachable_addresses(&api.call("listener_list", json!({})).await?);
    // A gateway group: every member's address too, so a node that stages while the
    // gateway that answered here is down still finds the others (each member's
    // discovery log also names its peers, but only while that member is up).
    match api.call_raw("gateway_status", json!({})).await {
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
        Err(error) => return Err(status_of("gateway_status", &error)),
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
fn member_addresses(status: &Value) -> Vec<String> {
    status
        .get("members")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|member| member.get("address").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// [`reachable_listeners`] from a `listener_list` answer.
fn reachable_addresses(listed: &Value) -> Vec<String> {
    let mut addresses = Vec::new();
    for listener in listed.get("listeners").and_then(Value::as_array).into_iter().flatten() {
        let Some(address) = listener.get("advertise").or_else(|| listener.get("address")).and_then(Value::as_str)
        else {
            continue;
        };
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

    #[test]
    fn every_member_of_a_group_is_a_discovery_address() {
        let status = json!({ "members": [
            { "name": "a", "address": "10.0.0.5:4420", "alive": false, "this_gateway": false },
            { "name": "b", "address": "10.0.0.6:4420", "alive": true, "this_gateway": true },
        ]});
        assert_eq!(member_addresses(&status), ["10.0.0.5:4420", "10.0.0.6:4420"]);
        assert!(member_addresses(&json!({})).is_empty());
    }

    #[test]
    fn a_listed_namespace_parses_and_a_partial_one_does_not() {
        let uuid = crate::volume_id::namespace_uuid_for_name("pvc-a");
        let listed = json!({
            "nsid": 3, "size_bytes": 1048576, "block_size": 4096,
            "nguid": uuid.simple().to_string(), "uuid": uuid.hyphenated().to_string(),
        });
        let namespace = parse_namespace(&listed).unwrap();
        assert_eq!(namespace.nsid, 3);
        assert!(made_by_driver(&namespace.uuid, &namespace.nguid));
        assert_eq!(parse_namespace(&json!({ "nsid": 3 })), None);
    }

    #[test]
    fn nodes_are_given_the_advertised_address_and_never_a_wildcard() {
        let listed = json!({ "listeners": [
            { "address": "127.0.0.1:4420", "advertise": "10.0.2.2:4420" },
            { "address": "0.0.0.0:8009" },
            { "address": "0.0.0.0:4421", "advertise": "192.0.2.7:4421" },
            { "address": "192.0.2.8:4420" },
        ]});
        assert_eq!(reachable_addresses(&listed), ["10.0.2.2:4420", "192.0.2.7:4421", "192.0.2.8:4420"]);
    }
}

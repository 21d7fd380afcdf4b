//! ControllerPublishVolume and ControllerUnpublishVolume: the node's host NQN allowed
//! on the subsystem (with the call's DH-HMAC-CHAP keys) and the namespace attached to
//! it alone; unpublish detaches it and denies the host once nothing of the subsystem
//! is attached to it any more.

use std::collections::HashMap;

use management_client::api::{self, replies, Method};
use tonic::Status;

use super::{required_volume_id, unsupported_capability, ControllerService, DISCOVERY_ADDRESSES_KEY};
use crate::api::{is_not_found, status_of};
use crate::csi::*;
use crate::gateway;
use crate::secrets::{self, DhchapKeys};

/// What publish does about the node's entry in the subsystem's allowed hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HostStep {
    /// Not allowed yet: `host_allow`, with the keys if any.
    Allow,
    /// Allowed, and the call has keys: `host_allow` again, which replaces the
    /// entry's keys in place (the gateway's secret rotation; the host stays allowed
    /// and its sessions keep running, so its other volumes are untouched).
    UpdateKeys,
    /// Allowed and left as it is.
    Keep,
    /// Allowed with a TLS key, which only an operator sets: replacing the entry
    /// would drop that key and tear down the host's TLS sessions, so it is kept
    /// (the operator manages that host's keys).
    KeepOperatorsEntry,
}

/// The step for a node whose entry in `host_list` is `entry` (None: not allowed).
/// A call without keys never touches an existing entry: another StorageClass of
/// the subsystem, or the operator, may have given it a key, and dropping it would
/// turn authentication off for the host.
pub(super) fn host_step(entry: Option<&replies::HostEntry>, keys: &DhchapKeys) -> HostStep {
    let Some(entry) = entry else { return HostStep::Allow };
    if keys.host.is_none() {
        return HostStep::Keep;
    }
    if entry.tls {
        return HostStep::KeepOperatorsEntry;
    }
    HostStep::UpdateKeys
}

/// The `host_allow` request for `host` on `subsystem_nqn`, with its keys.
pub(super) fn host_allow_params(subsystem_nqn: &str, host: &str, keys: &DhchapKeys) -> api::HostAllow {
    api::HostAllow {
        nqn: subsystem_nqn.to_string(),
        host: host.to_string(),
        dhchap_secret: keys.host.clone(),
        dhchap_ctrl_secret: keys.controller.clone(),
        ..Default::default()
    }
}

impl ControllerService {
    pub(super) async fn publish(
        &self,
        request: ControllerPublishVolumeRequest,
    ) -> Result<HashMap<String, String>, Status> {
        required_volume_id(&request.volume_id)?;
        if request.node_id.is_empty() {
            return Err(Status::invalid_argument("node_id: missing"));
        }
        let capability =
            request.volume_capability.ok_or_else(|| Status::invalid_argument("volume_capability: missing"))?;
        if let Some(reason) = unsupported_capability(&[capability]) {
            return Err(Status::invalid_argument(reason));
        }
        let keys = secrets::dhchap_keys(&request.secrets)?;
        let (id, namespace) = self.existing(&request.volume_id).await?;
        // Node ids are host NQNs (NodeGetInfo); anything else names no node.
        if !request.node_id.starts_with("nqn.") || request.node_id.len() > 223 {
            return Err(Status::not_found(format!("node {:?} is not an NVMe host NQN: no such node", request.node_id)));
        }
        let entry = self.host_entry(&id.subsystem_nqn, &request.node_id).await?;
        match host_step(entry.as_ref(), &keys) {
            step @ (HostStep::Allow | HostStep::UpdateKeys) => {
                // A refused host_allow may quote what it was given (the gateway's
                // own log leaves its message out for that reason): scrubbed before it
                // reaches the CO's events.
                self.api
                    .send(host_allow_params(&id.subsystem_nqn, &request.node_id, &keys))
                    .await
                    .map_err(|status| Status::new(status.code(), keys.scrub(status.message())))?;
                tracing::info!(volume = %request.volume_id, node = %request.node_id, ?step,
                    dhchap = keys.host.is_some(), bidirectional = keys.controller.is_some(), "host allowed on the subsystem");
            }
            HostStep::KeepOperatorsEntry => {
                tracing::warn!(volume = %request.volume_id, node = %request.node_id,
                    "the node's entry on the subsystem has a TLS key, so it was set up by an operator: the \
                     DH-HMAC-CHAP keys of the StorageClass's Secret are not applied to it");
            }
            HostStep::Keep => {}
        }
        // Idempotent on the gateway: a retried publish finds it attached already.
        self.api
            .send(api::NamespaceAttach {
                nqn: id.subsystem_nqn.clone(),
                nsid: namespace.nsid,
                host: request.node_id.clone(),
            })
            .await?;
        tracing::info!(volume = %request.volume_id, node = %request.node_id, nsid = namespace.nsid, "namespace attached to the node");
        let addresses = if self.discovery_addresses.is_empty() {
            gateway::reachable_listeners(&self.api).await?
        } else {
            self.discovery_addresses.clone()
        };
        Ok(HashMap::from([
            (DISCOVERY_ADDRESSES_KEY.to_string(), addresses.join(",")),
            ("subsystemNqn".to_string(), id.subsystem_nqn.clone()),
            ("nsid".to_string(), namespace.nsid.to_string()),
        ]))
    }

    async fn host_allowed(&self, subsystem_nqn: &str, host: &str) -> Result<bool, Status> {
        Ok(self.host_entry(subsystem_nqn, host).await?.is_some())
    }

    /// `host`'s entry in the subsystem's `host_list` (whether it has keys, never the
    /// keys); None when it is not allowed.
    async fn host_entry(&self, subsystem_nqn: &str, host: &str) -> Result<Option<replies::HostEntry>, Status> {
        let listed = self.api.send(api::HostListRequest { nqn: subsystem_nqn.to_string() }).await?;
        Ok(listed.hosts.into_iter().find(|entry| entry.host == host))
    }

    /// Unpublish: the namespace is detached from the node (idempotent on the
    /// gateway), and the host is denied on the subsystem only when no other
    /// namespace of it is attached to the node (its other volumes may be mounted).
    pub(super) async fn unpublish(&self, request: ControllerUnpublishVolumeRequest) -> Result<(), Status> {
        let Some(id) = required_volume_id(&request.volume_id)? else {
            return Ok(());
        };
        if request.node_id.is_empty() || !request.node_id.starts_with("nqn.") {
            return Ok(());
        }
        let Some(listed) = gateway::namespaces(&self.api, &id.subsystem_nqn).await? else {
            return Ok(());
        };
        if let Some(namespace) = listed.iter().find(|namespace| {
            namespace.uuid == id.namespace_uuid && crate::volume_id::made_by_driver(&namespace.uuid, &namespace.nguid)
        }) {
            let detach = api::NamespaceDetach {
                nqn: id.subsystem_nqn.clone(),
                nsid: namespace.nsid,
                host: request.node_id.clone(),
            };
            match self.api.send_raw(detach).await {
                Ok(_) => {
                    tracing::info!(volume = %request.volume_id, node = %request.node_id, "namespace detached from the node")
                }
                // Deleted meanwhile: nothing left to detach.
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Err(status_of(api::NamespaceDetach::NAME, &error)),
            }
        }
        // Any other namespace the node still sees keeps it allowed: the driver's
        // volumes, and an operator's namespaces too (one with no host list is seen
        // by every allowed host, and denying the node would take it away).
        let others = listed
            .iter()
            .filter(|namespace| namespace.uuid != id.namespace_uuid)
            .filter(|namespace| namespace.attached_to(&request.node_id))
            .count();
        if others > 0 || !self.host_allowed(&id.subsystem_nqn, &request.node_id).await? {
            return Ok(());
        }
        match self.api.send_raw(api::HostDeny { nqn: id.subsystem_nqn.clone(), host: request.node_id.clone() }).await {
            Ok(_) => {
                tracing::info!(volume = %request.volume_id, node = %request.node_id, "host denied on the subsystem");
                Ok(())
            }
            Err(error) if is_not_found(&error) => Ok(()),
            // A namespace that is not this driver's still lists the node: the node
            // keeps its access for that one; this volume is detached all the same.
            Err(error) if crate::api::is_still_attached(&error) => Ok(()),
            Err(error) => Err(status_of(api::HostDeny::NAME, &error)),
        }
    }
}

//! The management API's methods as types: one request type per method of
//! [`crate::methods::METHODS`], with the parameters the daemon takes, and the reply it
//! answers with ([`replies`]). Every side builds its calls from these: the `sluice`
//! commands (sluice-admin) and `sluice-csi` send them through [`crate::Client::send`],
//! the CSI driver reads the typed replies, and the daemon's tests check that it takes
//! every parameter named here and that its answers read back as these replies.
//!
//! Parameters are in the order the `sluice` commands have always sent them (the audit
//! log shows them in that order). An optional parameter left `None` is not sent, so
//! the daemon applies its default.

pub mod replies;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use replies::{
    ApiVersion, Backends, HostChange, HostList, Listeners, NamespaceAdded, NamespaceAttachment, NamespaceList,
    NamespaceRemoved, NamespaceResized, Pools, SnapshotCreated, SnapshotList, SnapshotRemoved, Subsystems,
};

/// One method of the management API: its name on the wire and what it answers.
pub trait Method: Serialize {
    /// The method's name (its row in [`crate::methods::METHODS`]).
    const NAME: &'static str;
    /// What a successful call answers (written by a fake daemon in tests, read by
    /// clients).
    type Reply: Serialize + DeserializeOwned;
}

/// A number the daemon takes either as a whole number or as text it parses: a size
/// in bytes or with a unit (`"64MiB"`, `"1GB"`), or a QoS limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    Number(u64),
    Text(String),
}

impl Default for Quantity {
    /// Zero (a request type's default, before its fields are set).
    fn default() -> Quantity {
        Quantity::Number(0)
    }
}

impl Quantity {
    /// "4096" becomes a number, anything else the text as written.
    pub fn from_text(text: &str) -> Quantity {
        text.trim().parse::<u64>().map_or_else(|_| Quantity::Text(text.to_string()), Quantity::Number)
    }
}

/// Names the daemon takes as a list or as one comma-separated string: the hosts that
/// see a namespace (empty: no host), DH-HMAC-CHAP hash and group names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Names {
    List(Vec<String>),
    CommaSeparated(String),
}

/// Declares a request type: its doc, name, method, reply and parameters.
macro_rules! method {
    (
        $(#[$meta:meta])*
        $name:ident = $method:literal -> $reply:ty {
            $( $(#[$field_meta:meta])* $field:ident : $type:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $type,
            )*
        }

        impl Method for $name {
            const NAME: &'static str = $method;
            type Reply = $reply;
        }
    };
}

method! {
    /// `subsystem_add`: a new subsystem, empty until namespaces are added.
    SubsystemAdd = "subsystem_add" -> Value {
        nqn: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        serial: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        allow_any_host: Option<bool>,
    }
}

method! {
    /// `subsystem_remove`: the subsystem and its namespaces; its controllers are
    /// disconnected.
    SubsystemRemove = "subsystem_remove" -> Value {
        nqn: String,
    }
}

method! {
    /// `subsystem_list`: every subsystem, summarised.
    SubsystemList = "subsystem_list" -> Subsystems {}
}

method! {
    /// `subsystem_show`: one subsystem with its namespaces, hosts and controllers.
    SubsystemShow = "subsystem_show" -> Value {
        nqn: String,
    }
}

method! {
    /// `ns_add`: a namespace over new or named storage (one of `backend`, `device`,
    /// `pool`, `rbd`).
    NamespaceAdd = "ns_add" -> NamespaceAdded {
        nqn: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nsid: Option<u32>,
        /// `ram`, `null` or `file`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backend: Option<String>,
        /// `"POOL/IMAGE"`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rbd: Option<String>,
        /// A `[[backend]]` name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        device: Option<String>,
        /// A `[[pool]]` name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thin: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<Quantity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block_size: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        direct_io: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nguid: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uuid: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hosts: Option<Names>,
        /// With `rbd`: `"POOL/IMAGE@SNAPSHOT"`, the new image a clone of it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        clone_from: Option<String>,
    }
}

method! {
    /// `ns_remove`: the namespace; with `delete_image`, its RBD image too.
    NamespaceRemove = "ns_remove" -> NamespaceRemoved {
        nqn: String,
        nsid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delete_image: Option<bool>,
    }
}

method! {
    /// `ns_list`: the namespaces of a subsystem.
    NamespaceListRequest = "ns_list" -> NamespaceList {
        nqn: String,
    }
}

method! {
    /// `ns_qos`: a namespace's QoS limits, or one host's on it.
    NamespaceQos = "ns_qos" -> Value {
        nqn: String,
        nsid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rw_ios_per_second: Option<Quantity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rw_mbytes_per_second: Option<Quantity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        r_mbytes_per_second: Option<Quantity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        w_mbytes_per_second: Option<Quantity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst_ms: Option<Quantity>,
        /// Keys to drop first (comma-separated), or `"all"`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remove: Option<String>,
    }
}

method! {
    /// `ns_resize`: a namespace grown live.
    NamespaceResize = "ns_resize" -> NamespaceResized {
        nqn: String,
        nsid: u32,
        size: Quantity,
    }
}

method! {
    /// `ns_attach`: a namespace shown to one more host.
    NamespaceAttach = "ns_attach" -> NamespaceAttachment {
        nqn: String,
        nsid: u32,
        host: String,
    }
}

method! {
    /// `ns_detach`: a namespace hidden from a host.
    NamespaceDetach = "ns_detach" -> NamespaceAttachment {
        nqn: String,
        nsid: u32,
        host: String,
    }
}

method! {
    /// `host_allow`: a host allowed on a subsystem, with its keys.
    HostAllow = "host_allow" -> HostChange {
        nqn: String,
        host: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dhchap_secret: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dhchap_ctrl_secret: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dhchap_hashes: Option<Names>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dhchap_groups: Option<Names>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tls_key: Option<String>,
        /// `rfc8446` or `compat`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tls_key_derivation: Option<String>,
    }
}

method! {
    /// `host_deny`: a host's entry removed; its controllers are disconnected.
    HostDeny = "host_deny" -> HostChange {
        nqn: String,
        host: String,
    }
}

method! {
    /// `host_list`: the hosts a subsystem allows.
    HostListRequest = "host_list" -> HostList {
        nqn: String,
    }
}

method! {
    /// `listener_add`: a new address, bound on every runtime thread.
    ListenerAdd = "listener_add" -> Value {
        address: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        discovery_only: Option<bool>,
        /// `none`, `optional` or `required`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tls: Option<String>,
    }
}

method! {
    /// `listener_remove`: an address stops accepting; its connections close.
    ListenerRemove = "listener_remove" -> Value {
        address: String,
    }
}

method! {
    /// `listener_list`: the configured and active listeners.
    ListenerList = "listener_list" -> Listeners {}
}

method! {
    /// `config_show`: the config file as written (secrets masked for read-only
    /// clients).
    ConfigShow = "config_show" -> Value {}
}

method! {
    /// `rpc_methods`: the method names.
    RpcMethods = "rpc_methods" -> Vec<String> {}
}

method! {
    /// `api_version`: this API's version and the daemon's release.
    ApiVersionRequest = "api_version" -> ApiVersion {}
}

method! {
    /// `target_show`: listeners, limits, the discovery generation, the config path.
    TargetShow = "target_show" -> Value {}
}

method! {
    /// `backend_list`: the `[[backend]]` entries and what uses them.
    BackendList = "backend_list" -> Backends {}
}

method! {
    /// `backend_remove`: an unused `[[backend]]` entry; with `delete_image`, its
    /// RBD image too.
    BackendRemove = "backend_remove" -> Value {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delete_image: Option<bool>,
    }
}

method! {
    /// `pool_list`: the `[[pool]]` entries and their carves.
    PoolList = "pool_list" -> Pools {}
}

method! {
    /// `limits_show`: the limits in force.
    LimitsShow = "limits_show" -> Value {}
}

method! {
    /// `gateway_status`: the gateway group as this member sees it (a gateway only).
    GatewayStatus = "gateway_status" -> replies::GatewayStatus {}
}

method! {
    /// `gateway_drain`: takes member `gateway` out of service (any member answers):
    /// its ANA groups move to the other live members, it keeps its listeners and
    /// serves non-optimized until undrained; refused when no other member could
    /// take its groups. With `wait` (default true), answers once the groups moved
    /// or `timeout_ms` passed.
    GatewayDrain = "gateway_drain" -> replies::GatewayPlacement {
        gateway: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    }
}

method! {
    /// `gateway_undrain`: puts member `gateway` back in service; its groups come
    /// back by the usual rules (failback to their preferred member).
    GatewayUndrain = "gateway_undrain" -> replies::GatewayPlacement {
        gateway: String,
    }
}

method! {
    /// `gateway_move`: moves ANA group `ana_group` to member `to` (any member
    /// answers) through the ANA change state, like a balancing move; the assignment
    /// holds until `to` is drained or down (balancing passes move other groups).
    /// With `wait` (default true), answers once `to` owns it or `timeout_ms` passed.
    GatewayMoveAnaGroup = "gateway_move" -> replies::GatewayMoved {
        ana_group: u32,
        to: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    }
}

method! {
    /// `rbd_snapshot_create`: a snapshot of an RBD image.
    SnapshotCreate = "rbd_snapshot_create" -> SnapshotCreated {
        rbd: String,
        snapshot: String,
    }
}

method! {
    /// `rbd_snapshot_remove`: a snapshot of an RBD image removed (success when
    /// there is none).
    SnapshotRemove = "rbd_snapshot_remove" -> SnapshotRemoved {
        rbd: String,
        snapshot: String,
    }
}

method! {
    /// `rbd_snapshot_list`: an RBD image's snapshots, oldest first.
    SnapshotListRequest = "rbd_snapshot_list" -> SnapshotList {
        rbd: String,
    }
}

/// Every method's name as its request type gives it, in the table's order (a test
/// checks it is the table).
pub const REQUEST_NAMES: [&str; 32] = [
    SubsystemAdd::NAME,
    SubsystemRemove::NAME,
    SubsystemList::NAME,
    SubsystemShow::NAME,
    NamespaceAdd::NAME,
    NamespaceRemove::NAME,
    NamespaceListRequest::NAME,
    NamespaceQos::NAME,
    NamespaceResize::NAME,
    NamespaceAttach::NAME,
    NamespaceDetach::NAME,
    HostAllow::NAME,
    HostDeny::NAME,
    HostListRequest::NAME,
    ListenerAdd::NAME,
    ListenerRemove::NAME,
    ListenerList::NAME,
    ConfigShow::NAME,
    RpcMethods::NAME,
    ApiVersionRequest::NAME,
    TargetShow::NAME,
    BackendList::NAME,
    BackendRemove::NAME,
    PoolList::NAME,
    LimitsShow::NAME,
    GatewayStatus::NAME,
    GatewayDrain::NAME,
    GatewayUndrain::NAME,
    GatewayMoveAnaGroup::NAME,
    SnapshotCreate::NAME,
    SnapshotRemove::NAME,
    SnapshotListRequest::NAME,
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_method_of_the_table_has_a_request_type() {
        assert_eq!(REQUEST_NAMES.to_vec(), crate::methods::method_names());
    }

    #[test]
    fn optional_parameters_left_out_are_not_sent_and_empty_requests_are_objects() {
        let request =
            NamespaceAdd { nqn: "nqn.a".into(), size: Some(Quantity::from_text("64MiB")), ..Default::default() };
        assert_eq!(serde_json::to_value(&request).ok(), Some(json!({ "nqn": "nqn.a", "size": "64MiB" })));
        assert_eq!(Quantity::from_text("4096"), Quantity::Number(4096));
        assert_eq!(serde_json::to_value(SubsystemList {}).ok(), Some(json!({})));
        let hosts = NamespaceAdd { hosts: Some(Names::List(vec!["h".into()])), ..Default::default() };
        assert_eq!(serde_json::to_value(&hosts).ok().map(|value| value["hosts"].clone()), Some(json!(["h"])));
        // Parameters keep the order the commands send them in.
        let text = serde_json::to_string(&HostAllow {
            nqn: "n".into(),
            host: "h".into(),
            tls_key: Some("k".into()),
            ..Default::default()
        })
        .unwrap_or_default();
        assert_eq!(text, r#"{"nqn":"n","host":"h","tls_key":"k"}"#);
    }
}

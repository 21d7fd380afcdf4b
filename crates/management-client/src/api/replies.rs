//! What the management methods answer, as types. A reply type names every field the
//! daemon sends today (docs/operations.md has their meaning); fields a newer daemon
//! adds are ignored when read, which is what lets [`crate::methods::API_VERSION`]
//! stay put when a field is added. The daemon's tests read its real answers back as
//! these types, so a renamed or retyped field fails there, not in a client.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `api_version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiVersion {
    pub api_version: u32,
    pub sluice_version: String,
}

/// `subsystem_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subsystems {
    pub subsystems: Vec<SubsystemSummary>,
}

/// One subsystem in `subsystem_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubsystemSummary {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    /// How many namespaces it has.
    pub namespaces: u64,
    pub capacity_bytes: u64,
    pub namespace_management: bool,
    pub allow_any_host: bool,
    /// How many hosts it allows.
    pub hosts: u64,
    /// How many controllers are connected.
    pub controllers: u64,
}

/// One namespace, as `ns_list` and `ns_add` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Namespace {
    pub nsid: u32,
    /// The backend's kind (`ram`, `file`, `rbd`, ...).
    pub backend: String,
    pub size_bytes: u64,
    pub block_size: u64,
    pub blocks: u64,
    /// 32 hex digits.
    pub nguid: String,
    /// Hyphenated.
    pub uuid: String,
    /// `config` (the file describes it), `pool` (a carve) or `runtime`.
    pub source: String,
    /// The namespace's QoS limits (`ns_qos`'s keys).
    pub qos: Map<String, Value>,
    /// Per-host limits: `host` and `limits`.
    pub host_qos: Vec<Value>,
    pub qos_throttled_commands: u64,
    pub qos_throttled_seconds: f64,
    /// Every host the subsystem admits sees it.
    pub all_hosts: bool,
    /// `None`: every admitted host; else the hosts that see it (empty: none).
    pub hosts: Option<Vec<String>>,
}

/// `ns_add`: the new namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespaceAdded {
    #[serde(flatten)]
    pub namespace: Namespace,
    /// With `clone_from`: the copy that frees the clone from its parent runs apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copying: Option<bool>,
}

/// `ns_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespaceList {
    pub nqn: String,
    pub namespaces: Vec<Namespace>,
}

/// `ns_remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceRemoved {
    pub nqn: String,
    pub nsid: u32,
    pub removed: bool,
    pub removed_from_config_file: bool,
    /// With `delete_image`: the `[[backend]]` entry removed with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_removed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// False: the image did not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_deleted: Option<bool>,
}

/// `ns_resize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceResized {
    pub nqn: String,
    pub nsid: u32,
    pub size_bytes: u64,
    pub block_size: u64,
    pub blocks: u64,
    pub previous_size_bytes: u64,
    /// False: it had that size already.
    pub changed: bool,
}

/// `ns_attach` and `ns_detach`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceAttachment {
    pub nqn: String,
    pub nsid: u32,
    pub host: String,
    /// `attached`, `detached` or `unchanged`.
    pub change: String,
    pub all_hosts: bool,
    /// The hosts that see it now (`None`: every admitted host).
    pub hosts: Option<Vec<String>>,
    pub in_config_file: bool,
}

/// `host_allow` and `host_deny`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostChange {
    pub nqn: String,
    pub host: String,
    /// `added`, `updated` or `removed`.
    pub change: String,
    /// Whether keys are set (`host_allow` only; keys are never returned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidirectional: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
    pub allow_any_host: bool,
    pub allowed_hosts: u64,
    pub controllers_disconnected: u64,
}

/// `host_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostList {
    pub nqn: String,
    pub allow_any_host: bool,
    pub hosts: Vec<HostEntry>,
}

/// One allowed host: whether it has keys, never the keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEntry {
    pub host: String,
    pub dhchap: bool,
    pub bidirectional: bool,
    pub tls: bool,
}

/// `listener_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listeners {
    pub listeners: Vec<Listener>,
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    /// `HOST:PORT` as bound (may be a wildcard).
    pub address: String,
    pub discovery_only: bool,
    /// `none`, `optional` or `required`.
    pub tls: String,
    /// In the config file.
    pub configured: bool,
    /// Bound on the runtime's threads.
    pub active: bool,
    /// The address the discovery log announces instead, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise: Option<String>,
}

/// `backend_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Backends {
    pub backends: Vec<Backend>,
}

/// One `[[backend]]` entry (or a backend a namespace opened itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Backend {
    pub name: String,
    pub kind: String,
    pub path: Option<String>,
    pub configured: bool,
    pub open: bool,
    /// `None` until open.
    pub size_bytes: Option<u64>,
    pub block_size: Option<u64>,
    /// The file's users of the entry.
    pub used_by: Vec<String>,
    /// The running namespace serving it.
    pub namespace: Option<ServedBy>,
    /// An RBD entry's image and its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd: Option<RbdImage>,
}

/// The namespace a backend serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedBy {
    pub nqn: String,
    pub nsid: u32,
}

/// An RBD backend's image (the rest of its state, `cluster`, `state`, `copy`, ...,
/// is shown as the daemon gives it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RbdImage {
    pub pool: String,
    pub image: String,
    #[serde(flatten)]
    pub state: Map<String, Value>,
}

/// `pool_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pools {
    pub pools: Vec<Pool>,
}

/// One `[[pool]]`; its sizes and carves once it is open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub name: String,
    pub device: String,
    pub table: Option<String>,
    pub open: bool,
    /// Subsystems whose Namespace Management takes carves from it.
    pub management_subsystems: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carves: Option<Vec<Carve>>,
}

/// One carve of an open pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carve {
    pub id: u64,
    pub size_bytes: u64,
    pub thin: bool,
    pub allocated_bytes: u64,
    pub nqn: Option<String>,
    pub nsid: Option<u32>,
    /// A running namespace serves it.
    pub served: bool,
}

/// `gateway_status`: the members (the rest as the daemon gives it; `sluice gateway
/// status` renders it whole).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayStatus {
    pub group: String,
    pub name: String,
    pub members: Vec<GatewayMember>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One member of a gateway group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayMember {
    pub name: String,
    /// Its NVMe/TCP address, `HOST:PORT`.
    pub address: String,
    /// Its membership lease is held.
    pub alive: bool,
    pub this_gateway: bool,
}

/// `gateway_drain` and `gateway_undrain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayPlacement {
    /// The member drained or undrained.
    pub gateway: String,
    /// It is drained now.
    pub drained: bool,
    /// The ANA groups the drain moves, and where.
    pub moves: Vec<GatewayMove>,
    /// ANA groups it still owned when the wait ended (empty once drained).
    pub still_owned: Vec<u32>,
    /// How long the wait took (0 without one), ms.
    pub waited_ms: u64,
    /// "already drained", "was not drained", or empty.
    pub note: String,
}

/// `gateway_move`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayMoved {
    pub ana_group: u32,
    /// Its owner when the move was asked ("" when none).
    pub from: String,
    pub to: String,
    /// Its owner when the wait ended, as the answering member's last round saw it.
    pub owner: String,
    /// How long the wait took (0 without one), ms.
    pub waited_ms: u64,
    /// "ANA group N is already on NAME", or empty.
    pub note: String,
}

/// One ANA group a drain moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayMove {
    pub ana_group: u32,
    pub to: String,
}

/// One RBD snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub name: String,
    pub id: u64,
    pub size_bytes: u64,
    pub created_unix_seconds: i64,
}

/// `rbd_snapshot_create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotCreated {
    pub rbd: String,
    /// False: a snapshot of that name existed and is kept.
    pub created: bool,
    pub snapshot: Snapshot,
}

/// `rbd_snapshot_remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRemoved {
    pub rbd: String,
    pub snapshot: String,
    /// False: no such snapshot or image (success all the same).
    pub removed: bool,
}

/// `rbd_snapshot_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotList {
    pub rbd: String,
    pub snapshots: Vec<Snapshot>,
}

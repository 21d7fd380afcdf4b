//! The target: listeners, subsystems and the controller table, shared by every
//! connection on every thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use nvme_spec::ControllerId;

use nvme_spec::ana::{AnaGroupId, AnaState};

use crate::ana::AnaStates;
use crate::controller::{Controller, ControllerKind};
use crate::limits::{
    RefusalLog, DISCOVERY_KEEP_ALIVE_TIMEOUT_MS, MAX_COMMAND_QUIESCE_TIMEOUT_MS, MAX_CONNECTION_SETUP_TIMEOUT_MS,
    MAX_DATA_TRANSFER_BYTES, MAX_IN_CAPSULE_DATA_BYTES, MAX_IO_QUEUES_PER_CONTROLLER, MAX_IO_QUEUE_DEPTH,
    MAX_OUTSTANDING_R2T_BYTES_LIMIT, MIN_IN_CAPSULE_DATA_BYTES,
};
use crate::namespaces::NamespaceChange;
use crate::stats::TargetCounters;
use crate::subsystem::{Subsystem, SubsystemError, SubsystemSpec};

/// Address family of a listener (ADRFAM in the discovery log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressFamily {
    Ipv4,
    Ipv6,
}

/// A TCP listener as the discovery log describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSpec {
    /// TRADDR: the address hosts connect to, e.g. "127.0.0.1".
    pub address: String,
    /// TRSVCID: the TCP port.
    pub port: u16,
    /// ADRFAM.
    pub family: AddressFamily,
    /// Serves only the discovery subsystem (like port 8009); not listed as a path to
    /// NVM subsystems.
    pub discovery_only: bool,
    /// Whether hosts use TLS here (TREQ and TSAS of its discovery log entries).
    pub secure_channel: crate::secure_channel::SecureChannel,
}

impl ListenerSpec {
    /// A plain TCP listener (no TLS) at `address:port` serving every subsystem and
    /// discovery; ADRFAM follows the address (IPv6 when it holds a colon).
    pub fn tcp(address: &str, port: u16) -> ListenerSpec {
        let family = if address.contains(':') { AddressFamily::Ipv6 } else { AddressFamily::Ipv4 };
        ListenerSpec {
            address: address.into(),
            port,
            family,
            discovery_only: false,
            secure_channel: Default::default(),
        }
    }

    /// The same listener serving only the discovery subsystem.
    pub fn for_discovery_only(mut self) -> ListenerSpec {
        self.discovery_only = true;
        self
    }
}

/// Tunables of the whole target. Most of them bound what one host can make the target
/// hold (connections, queues, buffers, time); the defaults are in `Default` and the
/// accepted ranges in `Target::new`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetSettings {
    /// I/O queues a controller may have (granted through Number of Queues).
    pub max_io_queues_per_controller: u16,
    /// Deepest I/O queue a host may connect (reported as CAP.MQES + 1).
    pub max_io_queue_depth: u16,
    /// Live connections one host NQN may hold: admin and I/O queues of all its
    /// controllers, discovery included. A Connect beyond is refused with Connect
    /// Controller Busy without DNR, which hosts retry later. At least
    /// `max_io_queues_per_controller` + 1 (one whole controller).
    pub max_connections_per_host: u32,
    /// Host data the target asks for with R2T and has not received yet, summed over
    /// all commands of one connection. A write over the budget waits for its R2T
    /// (first come, first served) until earlier data arrives; this is flow control,
    /// not an error. At least the maximum data transfer size (128 KiB), so every
    /// command fits.
    pub max_outstanding_r2t_bytes_per_connection: u32,
    /// ICD: in-capsule data an I/O command may carry (reported as IOCCSZ, the I/O
    /// command capsule size: 64 bytes of command plus this, in 16-byte units). Hosts
    /// send writes up to this size inside the command capsule, and larger ones after
    /// an R2T. The default, 128 KiB (the maximum data transfer size), sends every write
    /// in one PDU: a round trip (R2T, then H2CData) and two wake-ups fewer per large
    /// write. It costs no memory: in-capsule data lands in the command's data buffer as
    /// R2T data does, so a connection holds at most one buffer per queue entry either
    /// way (`limits::max_connection_buffer_bytes`); only the R2T budget above no longer
    /// paces such writes, the TCP window does. The Linux kernel target's default is
    /// 16 KiB. A multiple of 16 in 8 KiB..=128 KiB. Admin queues (and every queue's
    /// Connect) take the 8 KiB NVMe/TCP fixes for them, whatever this says.
    pub in_capsule_data_bytes: u32,
    /// A connection that has not sent ICReq and a successful Connect this long after
    /// it was accepted is closed: it holds a socket and memory without being a host.
    pub connection_setup_timeout_ms: u64,
    /// Shortest keep-alive timeout: an admin Connect asking for less (but not 0) gets
    /// this one (a host sending Keep Alive more often than needed is fine).
    pub min_keep_alive_timeout_ms: u32,
    /// Longest keep-alive timeout: an admin Connect asking for more is refused with
    /// Connect Invalid Parameters pointing at KATO. Bounds how long a host that
    /// vanished holds its controller.
    pub max_keep_alive_timeout_ms: u32,
    /// Report Asymmetric Namespace Access (CMIC bit 3, ANACAP, log 0Ch, ANA change
    /// notices). On for a gateway of a gateway group. Off for a single target, which
    /// has one path per host: the Linux 6.1 host was seen to hang removing a namespace
    /// of an ANA-reporting controller whose namespaces come and go (Namespace
    /// Management), so a target that gains nothing from ANA does not report it.
    pub ana_reporting: bool,
    /// Offer persistent reservations (ONCS bit 5). A gateway of a gateway group
    /// offers them through the group's authority (`Target::set_group_reservations`).
    pub reservations: bool,
    /// Test only: on a gateway group, run fused Compare and Write with this process's
    /// range table instead of refusing pairs the storage cannot run atomically, so a
    /// test can show that the group then breaks ATS. Never set in production.
    pub compare_and_write_in_process_only_for_tests: bool,
    /// CNTLIDs this target hands out: the lowest ...
    pub controller_id_min: u16,
    /// ... and the highest. Gateways exporting one subsystem get disjoint ranges, so
    /// a host with a controller on each never sees the same CNTLID twice (the Linux
    /// host refuses a second controller with a duplicate CNTLID).
    pub controller_id_max: u16,
    /// An I/O controller's admin Connect may ask for KATO 0 (no keep-alive; the
    /// controller then lives until its admin connection closes). Refused when false.
    /// Discovery controllers asking for 0 always get `DISCOVERY_KEEP_ALIVE_TIMEOUT_MS`.
    pub allow_keep_alive_disabled: bool,
    /// How long a closed connection waits for its storage requests still in flight
    /// before it lets them go, and so how long a host's new admin Connect to the same
    /// subsystem is held while its previous controller's requests may still land (a
    /// write of the dead association must not overwrite what the new one wrote).
    /// Above the backends' own I/O timeouts (RBD: 20 s by default), so a request
    /// normally ends before the wait does. I/O controllers report it as CQT (Command
    /// Quiesce Time) in Identify Controller: how long a multipath host should wait
    /// before it retries a lost connection's commands on another path.
    pub command_quiesce_timeout_ms: u32,
}

impl Default for TargetSettings {
    fn default() -> Self {
        TargetSettings {
            max_io_queues_per_controller: 64,
            max_io_queue_depth: MAX_IO_QUEUE_DEPTH,
            max_connections_per_host: 1024,
            max_outstanding_r2t_bytes_per_connection: 16 * 1024 * 1024,
            in_capsule_data_bytes: MAX_IN_CAPSULE_DATA_BYTES,
            connection_setup_timeout_ms: 10_000,
            min_keep_alive_timeout_ms: 1_000,
            max_keep_alive_timeout_ms: 300_000,
            allow_keep_alive_disabled: false,
            command_quiesce_timeout_ms: 30_000,
            controller_id_min: 1,
            controller_id_max: ControllerId::MAX_VALID,
            reservations: true,
            compare_and_write_in_process_only_for_tests: false,
            ana_reporting: false,
        }
    }
}

/// Why a KATO a host asked for is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAliveRefusal {
    /// KATO 0 on an I/O controller while `allow_keep_alive_disabled` is false.
    Disabled,
    /// More than `max_keep_alive_timeout_ms`.
    AboveMaximum,
}

impl TargetSettings {
    /// The keep-alive timeout (milliseconds, 0: none) a controller of `kind` runs
    /// when its host asks for `requested_ms`, or why the request is refused.
    pub fn keep_alive_timeout(&self, kind: ControllerKind, requested_ms: u32) -> Result<u32, KeepAliveRefusal> {
        match (requested_ms, kind) {
            (0, ControllerKind::Discovery) => {
                Ok(DISCOVERY_KEEP_ALIVE_TIMEOUT_MS
                    .clamp(self.min_keep_alive_timeout_ms, self.max_keep_alive_timeout_ms))
            }
            (0, ControllerKind::Io) if self.allow_keep_alive_disabled => Ok(0),
            (0, ControllerKind::Io) => Err(KeepAliveRefusal::Disabled),
            (requested, _) if requested > self.max_keep_alive_timeout_ms => Err(KeepAliveRefusal::AboveMaximum),
            (requested, _) => Ok(requested.max(self.min_keep_alive_timeout_ms)),
        }
    }

    /// The timer actually run for a stored KATO: what `keep_alive_timeout` grants,
    /// and the nearest allowed value for one it would refuse (a value set through Set
    /// Features, which does not pass the Connect checks).
    pub fn effective_keep_alive_timeout(&self, kind: ControllerKind, stored_ms: u32) -> u32 {
        self.keep_alive_timeout(kind, stored_ms).unwrap_or(self.max_keep_alive_timeout_ms)
    }
}

/// What the target is built from.
pub struct TargetSpec {
    pub listeners: Vec<ListenerSpec>,
    pub subsystems: Vec<SubsystemSpec>,
    pub settings: TargetSettings,
}

/// Why a target description cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error(transparent)]
    Subsystem(#[from] SubsystemError),
    #[error("subsystem NQN {0} is listed twice")]
    DuplicateSubsystem(String),
    #[error("subsystem NQN {0} is the discovery subsystem's NQN; choose another")]
    ReservedNqn(String),
    #[error("max_io_queues_per_controller must be 1..={max}, not {value}")]
    IoQueueCount { value: u16, max: u16 },
    #[error("max_io_queue_depth must be 2..={max}, not {value}")]
    IoQueueDepth { value: u16, max: u16 },
    #[error("no subsystem with NQN {0}")]
    UnknownSubsystem(String),
    #[error("listener id {0} is already in use")]
    DuplicateListener(usize),
    #[error("no listener with id {0}")]
    UnknownListener(usize),
    #[error(
        "max_connections_per_host must be at least {min} (an admin queue and max_io_queues_per_controller \
         I/O queues), not {value}"
    )]
    ConnectionsPerHost { value: u32, min: u32 },
    #[error("max_outstanding_r2t_bytes_per_connection must be {min}..={max} (at least the maximum data transfer size), not {value}")]
    OutstandingR2tBytes { value: u32, min: u32, max: u32 },
    #[error(
        "in_capsule_data_bytes must be a multiple of 16 in {min}..={max} (the maximum data transfer size), not {value}"
    )]
    InCapsuleDataBytes { value: u32, min: u32, max: u32 },
    #[error("connection_setup_timeout_ms must be 1..={max}, not {value}")]
    ConnectionSetupTimeout { value: u64, max: u64 },
    #[error("command_quiesce_timeout_ms must be 1..={max}, not {value}")]
    CommandQuiesceTimeout { value: u32, max: u32 },
    #[error("the controller id range {min}..={max} must lie within 1..={limit} and not be empty")]
    ControllerIdRange { min: u16, max: u16, limit: u16 },
    #[error("min_keep_alive_timeout_ms ({min}) must be at least 1 and at most max_keep_alive_timeout_ms ({max})")]
    KeepAliveRange { min: u32, max: u32 },
}

/// Live connections of one host NQN, and the log state of Connects refused for it.
#[derive(Default)]
struct HostConnections {
    live: u32,
    refusals: RefusalLog,
}

/// One live connection counted against its host's `max_connections_per_host`;
/// dropping it (when the connection closes) gives the place back.
pub struct HostConnectionGuard {
    target: Arc<Target>,
    host_nqn: String,
}

impl std::fmt::Debug for HostConnectionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConnectionGuard").field("host_nqn", &self.host_nqn).finish()
    }
}

impl Drop for HostConnectionGuard {
    fn drop(&mut self) {
        let mut hosts = self.target.host_connections.lock().unwrap_or_else(|poison| poison.into_inner());
        if let Some(entry) = hosts.get_mut(&self.host_nqn) {
            entry.live = entry.live.saturating_sub(1);
            if entry.live == 0 {
                hosts.remove(&self.host_nqn);
            }
        }
    }
}

/// A Connect refused because the host holds `max_connections_per_host` connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostConnectionsExhausted {
    /// Connections the host holds.
    pub live: u32,
    /// `Some(n)` when this refusal should be logged (`n`: refusals of the burst not
    /// logged since the previous line); `None` when it is only counted.
    pub log: Option<u64>,
}

/// Key of the controller table: subsystem index (or `None` for discovery) and CNTLID.
type ControllerKey = (Option<usize>, u16);

#[derive(Default)]
struct ControllerTable {
    controllers: HashMap<ControllerKey, Weak<Controller>>,
    /// Next CNTLID to try, per subsystem index (`None`: the discovery subsystem).
    next_id: HashMap<Option<usize>, u16>,
}

/// The subsystems, changed by the management API while connections read them.
#[derive(Default)]
struct SubsystemRegistry {
    /// By subsystem index; a removed subsystem leaves `None` so indexes are never
    /// reused (controllers and connections of the removed one may still name it).
    by_index: Vec<Option<Arc<Subsystem>>>,
    by_nqn: HashMap<String, usize>,
}

/// Shared state of a running target.
pub struct Target {
    /// (listener id, listener) in id order. The ids are the runtime's: a
    /// connection names the listener it came through by id, and a removed
    /// listener's id is never given to another, so connections never mistake
    /// one listener for another.
    listeners: RwLock<Vec<(usize, ListenerSpec)>>,
    subsystems: RwLock<SubsystemRegistry>,
    controllers: Mutex<ControllerTable>,
    /// Tunables.
    pub settings: TargetSettings,
    /// GENCTR of the discovery log: changes whenever the log's content changes.
    discovery_generation: AtomicU64,
    /// Live connections per host NQN (only hosts with at least one).
    host_connections: Mutex<HashMap<String, HostConnections>>,
    /// Connections closed because they did not finish setup in time (logged once per
    /// burst: a flood of idle connections must not flood the log).
    pub(crate) setup_timeouts: Mutex<RefusalLog>,
    /// Connections, refusals and why connections ended, for the metrics.
    pub counters: TargetCounters,
    /// ANA group states on this target's paths.
    pub ana: AnaStates,
    /// Listeners of other gateways that serve the same subsystems: the discovery log
    /// lists them too, so a host that knows one gateway finds every path.
    peer_paths: RwLock<Vec<PeerPath>>,
    /// Persist Through Power Loss: where reservations are kept (none: not offered).
    reservation_store: std::sync::OnceLock<crate::reservation_store::SharedReservationStore>,
    group_reservations: std::sync::OnceLock<crate::group_reservations::SharedGroupReservations>,
    /// Torn-down controllers whose queues may still have requests at storage.
    pub(crate) retiring: crate::retiring::RetiringControllers,
    /// TLS PSKs generated by secure channel concatenation.
    pub generated_psks: crate::secure_channel::GeneratedPsks,
}

/// A path to a subsystem through another gateway, as the discovery log lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerPath {
    /// SUBNQN the peer serves.
    pub subsystem_nqn: String,
    /// Its listener.
    pub listener: ListenerSpec,
    /// PORTID to report: unique among this target's and the other peers' ports.
    pub port_id: u16,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("listeners", &self.listeners).field("subsystems", &self.subsystems()).finish()
    }
}

impl Target {
    /// Builds a target from its description.
    pub fn new(spec: TargetSpec) -> Result<Arc<Target>, TargetError> {
        let settings = spec.settings;
        if settings.max_io_queues_per_controller == 0
            || settings.max_io_queues_per_controller > MAX_IO_QUEUES_PER_CONTROLLER
        {
            return Err(TargetError::IoQueueCount {
                value: settings.max_io_queues_per_controller,
                max: MAX_IO_QUEUES_PER_CONTROLLER,
            });
        }
        if settings.max_io_queue_depth < 2 || settings.max_io_queue_depth > MAX_IO_QUEUE_DEPTH {
            return Err(TargetError::IoQueueDepth { value: settings.max_io_queue_depth, max: MAX_IO_QUEUE_DEPTH });
        }
        settings.validate_limits()?;
        let target = Arc::new(Target {
            listeners: RwLock::new(spec.listeners.into_iter().enumerate().collect()),
            subsystems: RwLock::new(SubsystemRegistry::default()),
            controllers: Mutex::new(ControllerTable::default()),
            settings,
            discovery_generation: AtomicU64::new(1),
            host_connections: Mutex::new(HashMap::new()),
            setup_timeouts: Mutex::new(RefusalLog::default()),
            counters: TargetCounters::default(),
            ana: AnaStates::default(),
            peer_paths: RwLock::new(Vec::new()),
            reservation_store: std::sync::OnceLock::new(),
            group_reservations: std::sync::OnceLock::new(),
            retiring: crate::retiring::RetiringControllers::default(),
            generated_psks: crate::secure_channel::GeneratedPsks::default(),
        });
        for subsystem_spec in spec.subsystems {
            target.add_subsystem(subsystem_spec)?;
        }
        target.discovery_generation.store(1, Ordering::Release);
        Ok(target)
    }

    /// Adds a subsystem while the target runs (its NQN must be new).
    pub fn add_subsystem(&self, spec: SubsystemSpec) -> Result<Arc<Subsystem>, TargetError> {
        if spec.nqn == nvme_spec::discovery::DISCOVERY_NQN {
            return Err(TargetError::ReservedNqn(spec.nqn));
        }
        let mut registry = self.subsystems.write().unwrap_or_else(|poison| poison.into_inner());
        if registry.by_nqn.contains_key(&spec.nqn) {
            return Err(TargetError::DuplicateSubsystem(spec.nqn));
        }
        let index = registry.by_index.len();
        let subsystem = Arc::new(Subsystem::new(spec, index)?);
        registry.by_nqn.insert(subsystem.nqn.clone(), index);
        registry.by_index.push(Some(Arc::clone(&subsystem)));
        drop(registry);
        if let Some(store) = self.reservation_store.get() {
            subsystem.attach_reservation_store(Arc::clone(store));
        }
        if let Some(group) = self.group_reservations.get() {
            subsystem.attach_group_reservations(Arc::clone(group));
        }
        self.bump_discovery_generation();
        Ok(subsystem)
    }

    /// Offers Persist Through Power Loss with `store`: every namespace's saved
    /// reservations are restored now (before hosts connect, call it right after
    /// `new`), and namespaces added later as they arrive. Set once.
    pub fn set_reservation_store(&self, store: crate::reservation_store::SharedReservationStore) {
        let store = Arc::clone(self.reservation_store.get_or_init(|| store));
        for subsystem in self.subsystems() {
            subsystem.attach_reservation_store(Arc::clone(&store));
        }
    }

    /// Removes a subsystem while the target runs: new Connects to it fail, and its
    /// controllers are torn down (their queues close at their next check).
    pub fn remove_subsystem(&self, nqn: &str) -> Result<Arc<Subsystem>, TargetError> {
        let mut registry = self.subsystems.write().unwrap_or_else(|poison| poison.into_inner());
        let index = registry.by_nqn.remove(nqn).ok_or_else(|| TargetError::UnknownSubsystem(nqn.to_string()))?;
        let removed = registry.by_index.get_mut(index).and_then(Option::take);
        drop(registry);
        let removed = removed.ok_or_else(|| TargetError::UnknownSubsystem(nqn.to_string()))?;
        for controller in self.controllers_of(index) {
            controller.tear_down();
        }
        self.bump_discovery_generation();
        Ok(removed)
    }

    /// Sets the state of ANA group `group` on this target's paths; when it changed,
    /// every I/O controller gets an ANA change notice (hosts then read log 0Ch).
    /// Returns true when the state changed.
    pub fn set_ana_state(&self, group: AnaGroupId, state: AnaState) -> bool {
        if !self.ana.set(group, state) {
            return false;
        }
        let controllers: Vec<Arc<Controller>> = {
            let table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
            table
                .controllers
                .iter()
                .filter(|((index, _), _)| index.is_some())
                .filter_map(|(_, c)| c.upgrade())
                .collect()
        };
        let now = std::time::Instant::now();
        for controller in controllers {
            controller.note_ana_changed(group, state, now);
        }
        true
    }

    /// Replaces the paths other gateways offer (the discovery log lists them).
    pub fn set_peer_paths(&self, paths: Vec<PeerPath>) {
        let mut current = self.peer_paths.write().unwrap_or_else(|poison| poison.into_inner());
        if *current == paths {
            return;
        }
        *current = paths;
        drop(current);
        self.bump_discovery_generation();
    }

    /// The paths other gateways offer.
    pub fn peer_paths(&self) -> Vec<PeerPath> {
        self.peer_paths.read().unwrap_or_else(|poison| poison.into_inner()).clone()
    }

    /// GENCTR of the discovery log.
    pub fn discovery_generation(&self) -> u64 {
        self.discovery_generation.load(Ordering::Acquire)
    }

    /// Records that the discovery log's content changed (subsystems, listeners or
    /// allowed hosts), so hosts that compare GENCTR read it again, and discovery
    /// controllers whose host sees different records get a notice (`discovery`).
    pub fn bump_discovery_generation(&self) {
        self.discovery_generation.fetch_add(1, Ordering::AcqRel);
        self.notify_discovery_log_change();
    }

    /// The listeners as (id, listener), in id order. Those of the `TargetSpec`
    /// have ids 0, 1, ... in its order; the runtime numbers its listeners the
    /// same way.
    pub fn listeners(&self) -> Vec<(usize, ListenerSpec)> {
        self.listeners.read().unwrap_or_else(|poison| poison.into_inner()).clone()
    }

    /// The listener with this id (None once removed).
    pub fn listener(&self, id: usize) -> Option<ListenerSpec> {
        let listeners = self.listeners.read().unwrap_or_else(|poison| poison.into_inner());
        listeners.iter().find(|(listener_id, _)| *listener_id == id).map(|(_, listener)| listener.clone())
    }

    /// Adds a listener while the target runs, under the id its runtime gave it
    /// (an id never used before). Register it before the runtime accepts on it,
    /// so a Connect through it finds it. The discovery log lists it from now on.
    pub fn add_listener(&self, id: usize, spec: ListenerSpec) -> Result<(), TargetError> {
        let mut listeners = self.listeners.write().unwrap_or_else(|poison| poison.into_inner());
        let position = listeners.partition_point(|(listener_id, _)| *listener_id < id);
        if listeners.get(position).is_some_and(|(listener_id, _)| *listener_id == id) {
            return Err(TargetError::DuplicateListener(id));
        }
        listeners.insert(position, (id, spec));
        drop(listeners);
        self.bump_discovery_generation();
        Ok(())
    }

    /// Removes a listener while the target runs (after the runtime has closed
    /// it and its connections): the discovery log stops listing it.
    pub fn remove_listener(&self, id: usize) -> Result<ListenerSpec, TargetError> {
        let mut listeners = self.listeners.write().unwrap_or_else(|poison| poison.into_inner());
        let position =
            listeners.iter().position(|(listener_id, _)| *listener_id == id).ok_or(TargetError::UnknownListener(id))?;
        let (_, removed) = listeners.remove(position);
        drop(listeners);
        self.bump_discovery_generation();
        Ok(removed)
    }

    /// The subsystems, in the order they were added.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        let registry = self.subsystems.read().unwrap_or_else(|poison| poison.into_inner());
        registry.by_index.iter().flatten().cloned().collect()
    }

    /// The subsystem with this NQN.
    pub fn subsystem_by_nqn(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let registry = self.subsystems.read().unwrap_or_else(|poison| poison.into_inner());
        registry.by_nqn.get(nqn).and_then(|&index| registry.by_index.get(index)?.clone())
    }

    /// Creates a controller with a CNTLID unique within its subsystem.
    /// `None` when all 65519 ids are in use.
    pub fn create_controller(
        &self,
        kind: ControllerKind,
        subsystem: Option<Arc<Subsystem>>,
        host_nqn: String,
        host_identifier: [u8; 16],
        keep_alive_timeout_ms: u32,
    ) -> Option<Arc<Controller>> {
        let subsystem_index = subsystem.as_ref().map(|subsystem| subsystem.index);
        let mut table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        // Drop entries of controllers that no longer exist so their ids are reusable.
        table.controllers.retain(|_, controller| controller.strong_count() > 0);
        let (lowest, highest) = (self.settings.controller_id_min, self.settings.controller_id_max);
        for _ in lowest..=highest {
            let next = table.next_id.entry(subsystem_index).or_insert(lowest);
            let candidate = (*next).clamp(lowest, highest);
            *next = if candidate >= highest { lowest } else { candidate + 1 };
            let key = (subsystem_index, candidate);
            if table.controllers.contains_key(&key) {
                continue;
            }
            let io_queues = match kind {
                ControllerKind::Io => self.settings.max_io_queues_per_controller,
                ControllerKind::Discovery => 0,
            };
            let controller = Arc::new(Controller::new(
                ControllerId(candidate),
                kind,
                subsystem,
                host_nqn,
                host_identifier,
                io_queues,
                keep_alive_timeout_ms,
            ));
            table.controllers.insert(key, Arc::downgrade(&controller));
            return Some(controller);
        }
        None
    }

    /// The live controller `id` of a subsystem.
    pub fn controller(&self, subsystem_index: usize, id: ControllerId) -> Option<Arc<Controller>> {
        let table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        table
            .controllers
            .get(&(Some(subsystem_index), id.0))
            .and_then(Weak::upgrade)
            .filter(|controller| !controller.is_torn_down())
    }

    /// The live controllers of a subsystem, in no particular order.
    pub fn controllers_of(&self, subsystem_index: usize) -> Vec<Arc<Controller>> {
        let table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        table
            .controllers
            .iter()
            .filter(|((index, _), _)| *index == Some(subsystem_index))
            .filter_map(|(_, controller)| controller.upgrade())
            .filter(|controller| !controller.is_torn_down())
            .collect()
    }

    /// The live discovery controllers, in no particular order.
    pub(crate) fn discovery_controllers(&self) -> Vec<Arc<Controller>> {
        let table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        table
            .controllers
            .iter()
            .filter(|((index, _), _)| index.is_none())
            .filter_map(|(_, controller)| controller.upgrade())
            .filter(|controller| !controller.is_torn_down())
            .collect()
    }

    /// Tells every controller of the change's hosts that the namespace changed (its
    /// admin queue reports a namespace attribute notice).
    pub fn notify_namespace_change(&self, subsystem: &Subsystem, change: &NamespaceChange) {
        for controller in self.controllers_of(subsystem.index) {
            if change.hosts.includes(&controller.host_nqn) {
                controller.note_namespaces_changed(&[change.namespace_id]);
            }
        }
    }

    /// Grows namespace `id` of `subsystem` to `block_count` blocks ([`Namespace::grow`])
    /// and raises a Namespace Attribute Changed notice on every controller it is
    /// attached to, so hosts re-read NSZE (Linux: "detected capacity change").
    /// Returns the geometry before and after. Blocking: the management thread.
    pub fn grow_namespace(
        &self,
        subsystem: &Subsystem,
        id: nvme_spec::NamespaceId,
        block_count: u64,
    ) -> Result<(storage::Geometry, storage::Geometry), GrowNamespaceError> {
        let table = subsystem.table();
        let entry = table.get(id).ok_or(GrowNamespaceError::NoSuchNamespace)?;
        let before = entry.namespace.geometry();
        let after = entry.namespace.grow(block_count).map_err(GrowNamespaceError::Storage)?;
        if after != before {
            self.notify_namespace_change(
                subsystem,
                &NamespaceChange { namespace_id: id, hosts: entry.attachment.clone() },
            );
        }
        Ok((before, after))
    }

    /// Reads the size of every namespace whose storage others can grow (an RBD image
    /// resized through another gateway of a group, or with `rbd resize`) and grows
    /// those that grew, with the notice [`Target::grow_namespace`] raises. Returns what
    /// grew (subsystem NQN, NSID, before, after) and what could not be read. Blocking:
    /// the management thread runs it now and then.
    pub fn refresh_namespace_sizes(&self) -> NamespaceSizeRefresh {
        let mut refresh = NamespaceSizeRefresh::default();
        for subsystem in self.subsystems() {
            for entry in subsystem.table().entries() {
                let namespace = &entry.namespace;
                let before = namespace.geometry();
                match namespace.refresh_geometry() {
                    Ok(None) => {}
                    Ok(Some(after)) => {
                        let change = NamespaceChange { namespace_id: namespace.id, hosts: entry.attachment.clone() };
                        self.notify_namespace_change(&subsystem, &change);
                        refresh.grown.push((subsystem.nqn.clone(), namespace.id, before, after));
                    }
                    Err(error) => refresh.failed.push((subsystem.nqn.clone(), namespace.id, error)),
                }
            }
        }
        refresh
    }

    /// Counts a new connection of `host_nqn` against `max_connections_per_host`; the
    /// guard gives the place back when dropped. Refused when the host is at the limit.
    pub fn admit_host_connection(
        self: &Arc<Self>,
        host_nqn: &str,
        now: Instant,
    ) -> Result<HostConnectionGuard, HostConnectionsExhausted> {
        let mut hosts = self.host_connections.lock().unwrap_or_else(|poison| poison.into_inner());
        let entry = hosts.entry(host_nqn.to_string()).or_default();
        if entry.live >= self.settings.max_connections_per_host {
            return Err(HostConnectionsExhausted { live: entry.live, log: entry.refusals.refused(now) });
        }
        entry.live += 1;
        if let Some(unlogged) = entry.refusals.cleared() {
            tracing::info!(host = %host_nqn, live = entry.live, refused_unlogged = unlogged,
                "accepting Connects from host again (max_connections_per_host)");
        }
        drop(hosts);
        Ok(HostConnectionGuard { target: Arc::clone(self), host_nqn: host_nqn.to_string() })
    }

    /// Live connections of `host_nqn` counted against `max_connections_per_host`.
    pub fn host_connection_count(&self, host_nqn: &str) -> u32 {
        let hosts = self.host_connections.lock().unwrap_or_else(|poison| poison.into_inner());
        hosts.get(host_nqn).map_or(0, |entry| entry.live)
    }

    /// Removes a controller from the table (its id becomes reusable).
    pub fn remove_controller(&self, controller: &Controller) {
        let subsystem_index = controller.subsystem.as_ref().map(|subsystem| subsystem.index);
        let mut table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        table.controllers.remove(&(subsystem_index, controller.id.0));
    }
}

impl TargetSettings {
    /// Range checks of the resource limits (the queue limits are checked in
    /// `Target::new` itself).
    fn validate_limits(&self) -> Result<(), TargetError> {
        if self.controller_id_min == 0
            || self.controller_id_min > self.controller_id_max
            || self.controller_id_max > ControllerId::MAX_VALID
        {
            return Err(TargetError::ControllerIdRange {
                min: self.controller_id_min,
                max: self.controller_id_max,
                limit: ControllerId::MAX_VALID,
            });
        }
        let min_connections = u32::from(self.max_io_queues_per_controller) + 1;
        if self.max_connections_per_host < min_connections {
            return Err(TargetError::ConnectionsPerHost { value: self.max_connections_per_host, min: min_connections });
        }
        let r2t_bytes = self.max_outstanding_r2t_bytes_per_connection;
        if !(MAX_DATA_TRANSFER_BYTES..=MAX_OUTSTANDING_R2T_BYTES_LIMIT).contains(&r2t_bytes) {
            return Err(TargetError::OutstandingR2tBytes {
                value: r2t_bytes,
                min: MAX_DATA_TRANSFER_BYTES,
                max: MAX_OUTSTANDING_R2T_BYTES_LIMIT,
            });
        }
        let in_capsule = self.in_capsule_data_bytes;
        if !(MIN_IN_CAPSULE_DATA_BYTES..=MAX_IN_CAPSULE_DATA_BYTES).contains(&in_capsule)
            || !in_capsule.is_multiple_of(16)
        {
            return Err(TargetError::InCapsuleDataBytes {
                value: in_capsule,
                min: MIN_IN_CAPSULE_DATA_BYTES,
                max: MAX_IN_CAPSULE_DATA_BYTES,
            });
        }
        if !(1..=MAX_CONNECTION_SETUP_TIMEOUT_MS).contains(&self.connection_setup_timeout_ms) {
            return Err(TargetError::ConnectionSetupTimeout {
                value: self.connection_setup_timeout_ms,
                max: MAX_CONNECTION_SETUP_TIMEOUT_MS,
            });
        }
        if !(1..=MAX_COMMAND_QUIESCE_TIMEOUT_MS).contains(&self.command_quiesce_timeout_ms) {
            return Err(TargetError::CommandQuiesceTimeout {
                value: self.command_quiesce_timeout_ms,
                max: MAX_COMMAND_QUIESCE_TIMEOUT_MS,
            });
        }
        if self.min_keep_alive_timeout_ms == 0 || self.min_keep_alive_timeout_ms > self.max_keep_alive_timeout_ms {
            return Err(TargetError::KeepAliveRange {
                min: self.min_keep_alive_timeout_ms,
                max: self.max_keep_alive_timeout_ms,
            });
        }
        Ok(())
    }
}

mod group;
#[cfg(test)]
mod tests;

/// Why [`Target::grow_namespace`] did not grow a namespace; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum GrowNamespaceError {
    /// No namespace with that NSID in the subsystem.
    #[error("no such namespace")]
    NoSuchNamespace,
    /// The storage refused (cannot grow, no room, would shrink).
    #[error(transparent)]
    Storage(storage::GrowError),
}

/// What [`Target::refresh_namespace_sizes`] found.
#[derive(Debug, Default)]
pub struct NamespaceSizeRefresh {
    /// Namespaces that grew: subsystem NQN, NSID, geometry before and after.
    pub grown: Vec<(String, nvme_spec::NamespaceId, storage::Geometry, storage::Geometry)>,
    /// Namespaces whose storage could not be read.
    pub failed: Vec<(String, nvme_spec::NamespaceId, storage::GrowError)>,
}

//! The gateway's coordinator thread: joins the gateway group in the cluster, checks
//! that this gateway's namespaces have the identities the other gateways recorded,
//! lists the other gateways' listeners in discovery, then runs the coordinator every
//! quarter lease until `sluice serve` stops. Its state is published for
//! `sluice gateway status`, the management API and the metrics.
//!
//! A gateway another one fenced (blocklisted its cluster client) comes back without a
//! restart ([`rejoin`]): it closes every host connection (so no command it accepted
//! before the fence reaches storage afterwards), waits until those queues noticed,
//! starts a new cluster client (a blocklist entry names one client instance),
//! reopens its images through it and joins the group again as a new member, with its
//! groups non-optimized until the coordinator hands them back. A failed attempt is
//! retried with a backoff of one lease, doubling up to [`MAX_REJOIN_BACKOFF`].

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nvme_spec::ana::AnaGroupId;
use nvme_target::{AddressFamily, ListenerSpec, PeerPath, Target};
use runtime::{Locker, RadosErrno, RadosObject};
use serde::Serialize;

use super::coordinator::{member_lock, AnaSink, Coordinator, CoordinatorSettings, GatewayCounters, LeaseStore, Phase};
use sluice_config::gateway::GatewayPlan;

impl LeaseStore for RadosObject {
    fn lock(&self, name: &str, cookie: &str, description: &str, duration: Duration) -> Result<(), RadosErrno> {
        RadosObject::lock(self, name, cookie, description, duration)
    }
    fn unlock(&self, name: &str, cookie: &str) -> Result<(), RadosErrno> {
        RadosObject::unlock(self, name, cookie)
    }
    fn lockers(&self, name: &str) -> Result<Vec<Locker>, RadosErrno> {
        RadosObject::lockers(self, name)
    }
    fn attribute(&self, name: &str) -> Result<Option<Vec<u8>>, RadosErrno> {
        RadosObject::attribute(self, name)
    }
    fn set_attribute(&self, name: &str, value: &[u8]) -> Result<(), RadosErrno> {
        RadosObject::set_attribute(self, name, value)
    }
    fn blocklist(&self, address: &str, expire: Duration) -> Result<(), RadosErrno> {
        RadosObject::blocklist(self, address, expire)
    }
    fn break_image_locks_of(&self, address: &str, images: &[String]) -> Result<usize, String> {
        let images: std::collections::HashSet<&str> = images.iter().map(String::as_str).collect();
        runtime::rbd_backend::break_locks_of_fenced_client(&self.cluster_spec(), address, |shared_name| {
            images.contains(shared_name)
        })
        .map_err(|error| error.to_string())
    }
}

/// One gateway of the group as this gateway sees it.
#[derive(Clone, Debug, Serialize)]
pub struct MemberStatus {
    pub name: String,
    pub address: String,
    /// Its membership lease is held (it renews within its lease).
    pub alive: bool,
    pub this_gateway: bool,
}

/// One ANA group as this gateway sees it.
#[derive(Clone, Debug, Serialize)]
pub struct GroupStatus {
    pub ana_group: u32,
    pub preferred: String,
    /// The owner holding the group's lease ("" when none).
    pub owner: String,
    /// The state this gateway reports for it.
    pub state: &'static str,
}

/// What `gateway_status` returns.
#[derive(Clone, Debug, Serialize)]
pub struct GatewayStatus {
    pub group: String,
    /// The subsystems the group exports.
    pub subsystems: Vec<String>,
    pub name: String,
    pub object: String,
    pub client_address: String,
    /// "serving", "cluster-lost" or "fenced".
    pub phase: &'static str,
    pub lease_ms: u64,
    pub failback: bool,
    pub members: Vec<MemberStatus>,
    pub ana_groups: Vec<GroupStatus>,
    pub takeovers: u64,
    pub releases: u64,
    pub fenced_peers: u64,
    pub last_takeover_ms: Option<u64>,
    /// Times it came back after being fenced, without a restart.
    pub rejoins: u64,
    /// With the group's configuration in the cluster: the version this gateway runs
    /// and one it could not apply yet (kept up to date by the management thread).
    #[serde(skip)]
    pub config_versions: Option<(u64, Option<u64>)>,
}

/// Publishes the coordinator's view, keeping what the management thread set.
fn publish(status: &StatusHandle, mut next: GatewayStatus) {
    let mut current = status.lock().unwrap_or_else(|poison| poison.into_inner());
    next.config_versions = current.config_versions;
    *current = next;
}

/// The published status, shared with the management API and the metrics.
pub type StatusHandle = Arc<Mutex<GatewayStatus>>;

/// The running coordinator thread; dropping it leaves the group cleanly (owned groups
/// handed over, membership released) so peers take over at once.
pub struct GatewayService {
    pub status: StatusHandle,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for GatewayService {
    fn drop(&mut self) {
        let (lock, signal) = &*self.stop;
        *lock.lock().unwrap_or_else(|poison| poison.into_inner()) = true;
        signal.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// RADOS object name of a gateway group.
pub fn group_object(group: &str) -> String {
    format!("sluice.gateway.{group}")
}

/// Longest wait between two attempts to rejoin after being fenced.
pub const MAX_REJOIN_BACKOFF: Duration = Duration::from_secs(60);

/// Joins the group and starts the coordinator. Blocks up to about one lease (a
/// previous life's membership lease must expire first). Before it returns, every ANA
/// group this gateway serves has its first real state.
pub fn start(plan: &GatewayPlan, target: &Arc<Target>) -> Result<GatewayService, String> {
    let object = RadosObject::open(&plan.cluster, &plan.pool, &group_object(&plan.group))
        .map_err(|error| format!("gateway {}: {error}", plan.name))?;
    check_namespace_identities(plan, target, &object)?;
    target.set_peer_paths(peer_paths(plan, target));
    let coordinator = join_group(plan, target, object)?;
    let subsystems: Vec<String> = target.subsystems().iter().map(|subsystem| subsystem.nqn.clone()).collect();
    let status = Arc::new(Mutex::new(snapshot(plan, &subsystems, &coordinator)));
    tracing::info!(gateway = %plan.name, group = %plan.group, client = %coordinator.settings().address,
        groups = ?status.lock().map(|status| status.ana_groups.iter().map(|group| (group.ana_group, group.state)).collect::<Vec<_>>()).unwrap_or_default(),
        "joined the gateway group");
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let thread = {
        let (status, stop, target, plan) = (Arc::clone(&status), Arc::clone(&stop), Arc::clone(target), plan.clone());
        std::thread::Builder::new()
            .name("sluice-gateway".into())
            .spawn(move || run(coordinator, &plan, &subsystems, &target, &status, &stop))
            .map_err(|error| format!("cannot start the gateway thread: {error}"))?
    };
    Ok(GatewayService { status, stop, thread: Some(thread) })
}

/// A coordinator over the group's `object` (opened through this process's current
/// cluster client), joined and through its first round.
fn join_group(
    plan: &GatewayPlan,
    target: &Arc<Target>,
    object: RadosObject,
) -> Result<Coordinator<RadosObject>, String> {
    let address = object.my_address().map_err(|errno| format!("cannot read this cluster client's address: {errno}"))?;
    let groups =
        served_groups(target).into_iter().map(|group| (group, plan.preferred_owner(group).to_string())).collect();
    let settings = CoordinatorSettings {
        name: plan.name.clone(),
        cookie: format!("{}@{}", plan.name, object.instance_id()),
        address: address.clone(),
        members: plan.members.iter().map(|(name, _)| name.clone()).collect(),
        groups,
        lease: Duration::from_millis(plan.lease_ms),
        failback: plan.failback,
    };
    let sink: &dyn AnaSink = target.as_ref();
    let mut coordinator = Coordinator::new(object, settings, sink);
    coordinator.join(Instant::now, std::thread::sleep)?;
    coordinator.step(Instant::now(), sink);
    Ok(coordinator)
}

/// Waits `duration` unless the service is told to stop first (then true).
fn stopped_within(stop: &(Mutex<bool>, Condvar), duration: Duration) -> bool {
    let (lock, signal) = stop;
    let deadline = Instant::now() + duration;
    let mut stopping = lock.lock().unwrap_or_else(|poison| poison.into_inner());
    while !*stopping {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        stopping = signal.wait_timeout(stopping, deadline - now).unwrap_or_else(|poison| poison.into_inner()).0;
    }
    true
}

/// Brings a fenced gateway back (see the module comment): closes every host
/// connection, starts a new cluster client, reopens the images through it and joins
/// the group again. `None` when the service stopped meanwhile.
fn rejoin(
    plan: &GatewayPlan,
    target: &Arc<Target>,
    stop: &(Mutex<bool>, Condvar),
) -> Option<Result<Coordinator<RadosObject>, String>> {
    let mut closed = 0;
    for subsystem in target.subsystems() {
        // The group's reservations are no longer vouched for here: Report and the
        // reservation checks answer path errors from now on.
        for entry in subsystem.table().entries() {
            target.mark_group_reservations_unknown(&entry.namespace.nguid);
        }
        for controller in target.controllers_of(subsystem.index) {
            controller.tear_down();
            closed += 1;
        }
    }
    tracing::warn!(gateway = %plan.name, controllers = closed,
        "fenced: closed every host controller (commands accepted before the fence fail; hosts reconnect); \
         rejoining the group with a new cluster client");
    // Every I/O queue checks its controller once a controller check interval; after
    // two, none of the closed controllers' queues submits anything more.
    if stopped_within(stop, Duration::from_millis(2 * nvme_target::limits::CONTROLLER_CHECK_INTERVAL_MS)) {
        return None;
    }
    Some((|| {
        let images = runtime::reopen_images(&plan.cluster).map_err(|error| format!("reopening the images: {error}"))?;
        // As at startup: the group's reservations are in force before any group is
        // served here (their thread reopens its objects on the new client within
        // its one-second check).
        let deadline = Instant::now() + Duration::from_millis(plan.lease_ms);
        while target.group_reservations_unknown() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let object = RadosObject::open(&plan.cluster, &plan.pool, &group_object(&plan.group))
            .map_err(|error| format!("opening the group's object: {error}"))?;
        let coordinator = join_group(plan, target, object)?;
        tracing::warn!(gateway = %plan.name, images, client = %coordinator.settings().address,
            "rejoined the gateway group after being fenced");
        Ok(coordinator)
    })())
}

fn run(
    mut coordinator: Coordinator<RadosObject>,
    plan: &GatewayPlan,
    subsystems: &[String],
    target: &Arc<Target>,
    status: &StatusHandle,
    stop: &(Mutex<bool>, Condvar),
) {
    let sink: &dyn AnaSink = target.as_ref();
    let interval = coordinator.interval();
    let mut next = Instant::now() + interval;
    let mut rejoin_backoff = Duration::from_millis(plan.lease_ms);
    loop {
        {
            let (lock, signal) = stop;
            let mut stopping = lock.lock().unwrap_or_else(|poison| poison.into_inner());
            while !*stopping {
                let now = Instant::now();
                if now >= next {
                    break;
                }
                stopping = signal.wait_timeout(stopping, next - now).unwrap_or_else(|poison| poison.into_inner()).0;
            }
            if *stopping {
                break;
            }
        }
        next += interval;
        // A reload may have served a namespace in an ANA group none had before.
        for group in served_groups(target) {
            coordinator.add_group(group, plan.preferred_owner(group), sink);
        }
        coordinator.step(Instant::now(), sink);
        publish(status, snapshot(plan, subsystems, &coordinator));
        if coordinator.phase == Phase::Fenced {
            match rejoin(plan, target, stop) {
                None => break,
                Some(Ok(mut rejoined)) => {
                    rejoined.counters =
                        GatewayCounters { rejoins: coordinator.counters.rejoins + 1, ..coordinator.counters.clone() };
                    coordinator = rejoined;
                    rejoin_backoff = Duration::from_millis(plan.lease_ms);
                }
                Some(Err(error)) => {
                    tracing::error!(gateway = %plan.name, %error, retry_in_ms = rejoin_backoff.as_millis() as u64,
                        "could not rejoin the gateway group after being fenced; retrying");
                    if stopped_within(stop, rejoin_backoff) {
                        break;
                    }
                    rejoin_backoff = (rejoin_backoff * 2).min(MAX_REJOIN_BACKOFF);
                }
            }
            publish(status, snapshot(plan, subsystems, &coordinator));
            next = Instant::now() + interval;
        }
        // A late round (a stalled machine) must not be followed by a burst.
        next = next.max(Instant::now());
    }
    coordinator.leave(sink);
    tracing::info!(gateway = %plan.name, "left the gateway group");
}

fn snapshot(plan: &GatewayPlan, subsystems: &[String], coordinator: &Coordinator<RadosObject>) -> GatewayStatus {
    let GatewayCounters { takeovers, releases, fenced_peers, last_takeover_ms, rejoins } = coordinator.counters.clone();
    GatewayStatus {
        group: plan.group.clone(),
        subsystems: subsystems.to_vec(),
        name: plan.name.clone(),
        object: coordinator.store().describe(),
        client_address: coordinator.settings().address.clone(),
        phase: match coordinator.phase {
            Phase::Serving => "serving",
            Phase::ClusterLost => "cluster-lost",
            Phase::Fenced => "fenced",
        },
        lease_ms: plan.lease_ms,
        failback: plan.failback,
        members: plan
            .members
            .iter()
            .map(|(name, address)| MemberStatus {
                name: name.clone(),
                address: address.to_string(),
                alive: coordinator.alive.contains(name),
                this_gateway: *name == plan.name,
            })
            .collect(),
        ana_groups: coordinator
            .groups
            .iter()
            .map(|group| GroupStatus {
                ana_group: group.id.0,
                preferred: group.preferred.clone(),
                owner: group.owner.clone(),
                state: group.state.name(),
            })
            .collect(),
        takeovers,
        releases,
        fenced_peers,
        last_takeover_ms,
        rejoins,
        config_versions: None,
    }
}

/// The ANA groups of every namespace served (group 1 when there are none yet).
fn served_groups(target: &Target) -> Vec<AnaGroupId> {
    let mut groups = BTreeSet::new();
    for subsystem in target.subsystems() {
        for entry in subsystem.table().entries() {
            groups.insert(entry.namespace.ana_group);
        }
    }
    if groups.is_empty() {
        groups.insert(nvme_target::ana::DEFAULT_ANA_GROUP);
    }
    groups.into_iter().collect()
}

/// The other members' listeners, for every subsystem this gateway serves.
fn peer_paths(plan: &GatewayPlan, target: &Target) -> Vec<PeerPath> {
    let mut paths = Vec::new();
    for subsystem in target.subsystems() {
        for (index, (name, address)) in plan.members.iter().enumerate() {
            if *name == plan.name {
                continue;
            }
            paths.push(PeerPath {
                subsystem_nqn: subsystem.nqn.clone(),
                listener: ListenerSpec {
                    address: address.ip().to_string(),
                    port: address.port(),
                    family: if address.is_ipv4() { AddressFamily::Ipv4 } else { AddressFamily::Ipv6 },
                    discovery_only: false,
                    secure_channel: Default::default(),
                },
                // Distinct from this gateway's own PORTIDs (listener id + 1).
                port_id: 0x1000 + index as u16,
            });
        }
    }
    paths
}

/// What a namespace on a shared image looks like to hosts; every gateway must agree.
fn identity_record(plan: &GatewayPlan, nqn: &str, namespace: &nvme_target::Namespace) -> String {
    format!(
        "gateway={} nqn={} nsid={} nguid={} uuid={} blocks={} block_size={} ana_group={}",
        plan.name,
        nqn,
        namespace.id.0,
        uuid::Uuid::from_bytes(namespace.nguid).simple(),
        uuid::Uuid::from_bytes(namespace.uuid).hyphenated(),
        namespace.geometry().block_count,
        namespace.geometry().block_size_bytes,
        namespace.ana_group.0,
    )
}

/// True when no other member of the group holds its membership lease: the whole
/// group has been down (every gateway gone for at least a lease), which is what
/// "power loss" means for reservations with PTPL off on a group. Unreadable leases
/// count as alive (nothing is cleared on a doubt).
pub fn whole_group_was_down(plan: &GatewayPlan) -> bool {
    let Ok(object) = RadosObject::open(&plan.cluster, &plan.pool, &group_object(&plan.group)) else { return false };
    plan.members
        .iter()
        .filter(|(name, _)| *name != plan.name)
        .all(|(name, _)| object.lockers(&member_lock(name)).map(|lockers| lockers.is_empty()).unwrap_or(false))
}

/// Records each namespace's identity on the group object under its image, or refuses
/// to start when another gateway recorded a different one for the same image. The
/// records are read all at once ([`runtime::rbd_backend::in_parallel`]) and written
/// only where they differ: a restart of a gateway with 4,096 namespaces read and
/// rewrote them one after another, 8,192 round trips on the group object.
fn check_namespace_identities(plan: &GatewayPlan, target: &Target, object: &RadosObject) -> Result<(), String> {
    let mut identities = Vec::new();
    for subsystem in target.subsystems() {
        for entry in subsystem.table().entries() {
            let namespace = &entry.namespace;
            let Some(image) = namespace.backend.shared_name() else { continue };
            let key = format!("namespace.{image}");
            identities.push((image, key, identity_record(plan, &subsystem.nqn, namespace)));
        }
    }
    let recorded = runtime::rbd_backend::in_parallel(&identities, |(_, key, _)| object.attribute(key));
    let strip = |record: &str| record.split_once(' ').map(|(_, rest)| rest.to_string()).unwrap_or_default();
    for ((image, key, mine), recorded) in identities.iter().zip(recorded) {
        let recorded = recorded.map_err(|errno| format!("cannot read {key} on {}: {errno}", object.describe()))?;
        if let Some(recorded) = recorded.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()) {
            if strip(&recorded) == strip(mine) {
                continue;
            }
            let other =
                recorded.split_whitespace().next().and_then(|field| field.strip_prefix("gateway=")).unwrap_or("?");
            if other != plan.name {
                let alive = object.lockers(&member_lock(other)).map(|lockers| !lockers.is_empty()).unwrap_or(true);
                if alive {
                    return Err(format!(
                        "image {image} is served with conflicting identities: gateway {other} serves it as [{}], \
                         gateway {} (this one) as [{}]; make the namespace entries (subsystem NQN, nsid, nguid, uuid, \
                         size, block_size, ana_group) equal in both configs",
                        strip(&recorded),
                        plan.name,
                        strip(mine)
                    ));
                }
                tracing::warn!(%image, other_gateway = other,
                    "replacing the identity another (stopped) gateway recorded for this image");
            }
        }
        object
            .set_attribute(key, mine.as_bytes())
            .map_err(|errno| format!("cannot record {key} on {}: {errno}", object.describe()))?;
    }
    Ok(())
}

/// Prometheus lines of the gateway state (appended to /metrics).
pub fn render_metrics(status: &GatewayStatus) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let labels = format!("group=\"{}\",gateway=\"{}\"", status.group, status.name);
    let _ = writeln!(out, "# HELP sluice_gateway_fenced 1 when another gateway fenced (blocklisted) this one.");
    let _ = writeln!(out, "# TYPE sluice_gateway_fenced gauge");
    let _ = writeln!(out, "sluice_gateway_fenced{{{labels}}} {}", u8::from(status.phase == "fenced"));
    let _ = writeln!(out, "# HELP sluice_gateway_cluster_lost 1 while leases cannot be renewed (groups inaccessible).");
    let _ = writeln!(out, "# TYPE sluice_gateway_cluster_lost gauge");
    let _ = writeln!(out, "sluice_gateway_cluster_lost{{{labels}}} {}", u8::from(status.phase == "cluster-lost"));
    let _ = writeln!(out, "# HELP sluice_gateway_member_alive 1 when the member renews its membership lease.");
    let _ = writeln!(out, "# TYPE sluice_gateway_member_alive gauge");
    for member in &status.members {
        let _ = writeln!(
            out,
            "sluice_gateway_member_alive{{{labels},member=\"{}\"}} {}",
            member.name,
            u8::from(member.alive)
        );
    }
    let _ = writeln!(
        out,
        "# HELP sluice_gateway_ana_group_optimized 1 when this gateway reports the ANA group optimized (owns it)."
    );
    let _ = writeln!(out, "# TYPE sluice_gateway_ana_group_optimized gauge");
    for group in &status.ana_groups {
        let _ = writeln!(
            out,
            "sluice_gateway_ana_group_optimized{{{labels},ana_group=\"{}\",state=\"{}\"}} {}",
            group.ana_group,
            group.state,
            u8::from(group.state == "optimized")
        );
    }
    for (name, help, value) in [
        ("sluice_gateway_takeovers_total", "ANA groups this gateway took ownership of.", status.takeovers),
        ("sluice_gateway_releases_total", "ANA groups this gateway gave back or lost.", status.releases),
        (
            "sluice_gateway_fenced_peers_total",
            "Previous owners this gateway fenced before a takeover.",
            status.fenced_peers,
        ),
        (
            "sluice_gateway_rejoins_total",
            "Times this gateway rejoined its group with a new cluster client after being fenced.",
            status.rejoins,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {value}");
    }
    if let Some((version, pending)) = status.config_versions {
        let _ = writeln!(
            out,
            "# HELP sluice_gateway_config_version The group configuration version (in the cluster) this gateway runs."
        );
        let _ = writeln!(
            out,
            "# TYPE sluice_gateway_config_version gauge\nsluice_gateway_config_version{{{labels}}} {version}"
        );
        let _ = writeln!(out, "# HELP sluice_gateway_config_pending 1 while a newer group configuration version could not be applied here (see the log).");
        let _ = writeln!(
            out,
            "# TYPE sluice_gateway_config_pending gauge\nsluice_gateway_config_pending{{{labels}}} {}",
            u8::from(pending.is_some())
        );
    }
    if let Some(ms) = status.last_takeover_ms {
        let _ = writeln!(out, "# HELP sluice_gateway_last_takeover_seconds Time an ANA group was ownerless before this gateway's last takeover.");
        let _ = writeln!(out, "# TYPE sluice_gateway_last_takeover_seconds gauge");
        let _ = writeln!(out, "sluice_gateway_last_takeover_seconds{{{labels}}} {:.3}", ms as f64 / 1000.0);
    }
    out
}

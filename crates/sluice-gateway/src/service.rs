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

use super::coordinator::{member_lock, AnaSink, Coordinator, CoordinatorSettings, GatewayCounters, LeaseStore, Phase};
use crate::balance::{self, Balancer};
use crate::control::{self, SignalHandle, Signals};
use crate::load::{load_attribute, LoadMeter, LoadRecord};
use crate::published::publish;
use sluice_config::gateway::rebalance::RebalanceMode;
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

pub use crate::control::{GatewayHandle, PlacementRequest};
pub use crate::published::{GatewayStatus, GroupStatus, MemberStatus, StatusHandle};

/// The running coordinator thread; dropping it leaves the group cleanly (owned groups
/// handed over, membership released) so peers take over at once.
pub struct GatewayService {
    pub status: StatusHandle,
    signals: SignalHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GatewayService {
    /// What the management API needs: the status and the way to drain and undrain.
    pub fn handle(&self) -> GatewayHandle {
        GatewayHandle { status: Arc::clone(&self.status), signals: Arc::clone(&self.signals) }
    }
}

impl Drop for GatewayService {
    fn drop(&mut self) {
        control::lock(&self.signals).stopping = true;
        self.signals.1.notify_all();
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
    let status = Arc::new(Mutex::new(snapshot(plan, &subsystems, &coordinator, &Balancer::default(), None)));
    tracing::info!(gateway = %plan.name, group = %plan.group, client = %coordinator.settings().address,
        groups = ?status.lock().map(|status| status.ana_groups.iter().map(|group| (group.ana_group, group.state)).collect::<Vec<_>>()).unwrap_or_default(),
        "joined the gateway group");
    let signals: SignalHandle = Arc::new((Mutex::new(Signals::default()), Condvar::new()));
    let thread = {
        let (status, signals, target, plan) =
            (Arc::clone(&status), Arc::clone(&signals), Arc::clone(target), plan.clone());
        std::thread::Builder::new()
            .name("sluice-gateway".into())
            .spawn(move || run(coordinator, &plan, &subsystems, &target, &status, &signals))
            .map_err(|error| format!("cannot start the gateway thread: {error}"))?
    };
    Ok(GatewayService { status, signals, thread: Some(thread) })
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
fn stopped_within(signals: &SignalHandle, duration: Duration) -> bool {
    let deadline = Instant::now() + duration;
    let mut guard = control::lock(signals);
    while !guard.stopping {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        guard = signals.1.wait_timeout(guard, deadline - now).unwrap_or_else(|poison| poison.into_inner()).0;
    }
    true
}

/// Waits until `deadline`, a request or the stop. Returns the requests (empty at the
/// deadline) and whether to stop.
fn wait_for_work(signals: &SignalHandle, deadline: Instant) -> (Vec<(PlacementRequest, Reply)>, bool) {
    let mut guard = control::lock(signals);
    while !guard.stopping && guard.requests.is_empty() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        guard = signals.1.wait_timeout(guard, deadline - now).unwrap_or_else(|poison| poison.into_inner()).0;
    }
    (std::mem::take(&mut guard.requests), guard.stopping)
}

type Reply = std::sync::mpsc::Sender<Result<crate::balance::PlacementChange, String>>;

/// Brings a fenced gateway back (see the module comment): closes every host
/// connection, starts a new cluster client, reopens the images through it and joins
/// the group again. `None` when the service stopped meanwhile.
fn rejoin(
    plan: &GatewayPlan,
    target: &Arc<Target>,
    stop: &SignalHandle,
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
    signals: &SignalHandle,
) {
    let sink: &dyn AnaSink = target.as_ref();
    let interval = coordinator.interval();
    let mut next = Instant::now() + interval;
    let mut rejoin_backoff = Duration::from_millis(plan.lease_ms);
    let rebalance = plan.rebalance;
    let load_window = Duration::from_millis(rebalance.load_window_ms);
    let mut meter = LoadMeter::default();
    let mut next_load = Instant::now();
    let mut load: Option<LoadRecord> = None;
    let mut balancer = Balancer::default();
    let mut next_pass = Instant::now() + Duration::from_millis(rebalance.interval_ms);
    loop {
        let (requests, stopping) = wait_for_work(signals, next.min(next_load).min(next_pass));
        for (request, reply) in requests {
            let answer = match &request {
                PlacementRequest::Drain(member) => balance::drain(&coordinator, member),
                PlacementRequest::Undrain(member) => balance::undrain(&coordinator, member),
                PlacementRequest::Move { ana_group, to } => balance::move_group(&coordinator, *ana_group, to),
            };
            let _ = reply.send(answer);
            // Apply it here at once rather than a round later.
            next = Instant::now();
        }
        if stopping {
            break;
        }
        let now = Instant::now();
        if now >= next_load {
            next_load = now + load_window;
            load = sample_load(&mut meter, &coordinator, plan, target).or(load);
        }
        if now >= next_pass {
            next_pass = now + Duration::from_millis(rebalance.interval_ms);
            balancer.pass(&coordinator, &rebalance);
        }
        if now < next {
            publish(status, snapshot(plan, subsystems, &coordinator, &balancer, load.as_ref()));
            continue;
        }
        next += interval;
        // A reload may have served a namespace in an ANA group none had before.
        for group in served_groups(target) {
            coordinator.add_group(group, plan.preferred_owner(group), sink);
        }
        coordinator.step(Instant::now(), sink);
        publish(status, snapshot(plan, subsystems, &coordinator, &balancer, load.as_ref()));
        if coordinator.phase == Phase::Fenced {
            match rejoin(plan, target, signals) {
                None => break,
                Some(Ok(mut rejoined)) => {
                    rejoined.counters =
                        GatewayCounters { rejoins: coordinator.counters.rejoins + 1, ..coordinator.counters.clone() };
                    rejoined.timelines = std::mem::take(&mut coordinator.timelines);
                    coordinator = rejoined;
                    rejoin_backoff = Duration::from_millis(plan.lease_ms);
                }
                Some(Err(error)) => {
                    tracing::error!(gateway = %plan.name, %error, retry_in_ms = rejoin_backoff.as_millis() as u64,
                        "could not rejoin the gateway group after being fenced; retrying");
                    if stopped_within(signals, rejoin_backoff) {
                        break;
                    }
                    rejoin_backoff = (rejoin_backoff * 2).min(MAX_REJOIN_BACKOFF);
                }
            }
            publish(status, snapshot(plan, subsystems, &coordinator, &balancer, load.as_ref()));
            next = Instant::now() + interval;
        }
        // A late round (a stalled machine) must not be followed by a burst.
        next = next.max(Instant::now());
    }
    coordinator.leave(sink);
    tracing::info!(gateway = %plan.name, "left the gateway group");
}

/// Measures the window that just ended; publishes it for the balancing member when
/// balancing is on. Returns the window's record (`None` at the first sample).
fn sample_load(
    meter: &mut LoadMeter,
    coordinator: &Coordinator<RadosObject>,
    plan: &GatewayPlan,
    target: &Target,
) -> Option<LoadRecord> {
    let sink: &dyn AnaSink = target;
    let totals = coordinator.groups.iter().map(|group| (group.id, sink.group_totals(group.id))).collect();
    let owned: Vec<AnaGroupId> = coordinator.groups.iter().filter(|group| group.owned).map(|group| group.id).collect();
    // Owned through the whole window: owned at both ends (a group that left and came
    // back within one window is rare and only blurs one sample).
    let owned_through = meter.owned_through(&owned);
    let record = meter.sample(
        Instant::now(),
        crate::timeline::unix_ms(std::time::SystemTime::now()),
        &plan.name,
        crate::load::io_threads_busy(),
        totals,
        &owned_through,
    )?;
    if plan.rebalance.mode != RebalanceMode::Off {
        if let Err(errno) = coordinator.store().set_attribute(&load_attribute(&plan.name), &record.encode()) {
            tracing::warn!(%errno, "cannot publish this gateway's load; the balancing member waits for it");
        }
    }
    Some(record)
}

fn snapshot(
    plan: &GatewayPlan,
    subsystems: &[String],
    coordinator: &Coordinator<RadosObject>,
    balancer: &Balancer,
    load: Option<&LoadRecord>,
) -> GatewayStatus {
    crate::published::snapshot(plan, subsystems, coordinator, coordinator.store().describe(), balancer, load)
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

pub use crate::metrics::render_metrics;

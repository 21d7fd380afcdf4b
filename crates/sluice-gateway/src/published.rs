//! What the coordinator thread publishes after each round: `gateway_status` for the
//! management API and `sluice gateway status`, and the metrics' source.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::balance::{Balancer, MoveRecord};
use crate::coordinator::{Coordinator, GatewayCounters, LeaseStore, Phase};
use crate::load::LoadRecord;
use crate::placement::MemberLoad;
use crate::timeline::{ChangeKind, Histogram, PathChange};
use sluice_config::gateway::GatewayPlan;

/// One gateway of the group as this gateway sees it.
#[derive(Clone, Debug, Serialize)]
pub struct MemberStatus {
    pub name: String,
    pub address: String,
    /// Its membership lease is held (it renews within its lease).
    pub alive: bool,
    /// Drained: out of service (listeners kept, every group non-optimized).
    pub drained: bool,
    pub this_gateway: bool,
}

/// One ANA group as this gateway sees it.
#[derive(Clone, Debug, Serialize)]
pub struct GroupStatus {
    pub ana_group: u32,
    pub preferred: String,
    /// The owner holding the group's lease ("" when none).
    pub owner: String,
    /// The member that should own it (placement record, drains, liveness).
    pub desired: String,
    /// The state this gateway reports for it.
    pub state: &'static str,
    /// Measured here over the last load window, for a group owned through it: the
    /// load measure (load units per second), commands and bytes per second.
    pub load: Option<f64>,
    pub commands_per_second: Option<f64>,
    pub bytes_per_second: Option<f64>,
}

/// Balancing as this gateway sees it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RebalanceStatus {
    /// "off", "count" or "load".
    pub mode: &'static str,
    pub interval_ms: u64,
    pub threshold_percent: u32,
    pub max_moves: u32,
    /// This gateway holds the rebalance lease (runs the passes).
    pub leader: bool,
    /// Members' totals at the leader's last pass.
    pub totals: Vec<MemberLoad>,
    /// Why the leader's last pass moved nothing ("" when it moved).
    pub idle_reason: String,
    pub moves_total: u64,
    pub recent_moves: Vec<MoveRecord>,
}

/// Histograms of this gateway's path changes (as the new owner), by kind.
#[derive(Clone, Debug, Default)]
pub struct PathChangeHistograms {
    pub without_optimized: Vec<(ChangeKind, Histogram)>,
    pub to_last_first_command: Vec<(ChangeKind, Histogram)>,
    pub counts: Vec<(ChangeKind, u64)>,
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
    /// This gateway is drained.
    pub drained: bool,
    pub lease_ms: u64,
    pub failback: bool,
    pub members: Vec<MemberStatus>,
    pub ana_groups: Vec<GroupStatus>,
    pub takeovers: u64,
    pub releases: u64,
    /// Groups handed over to another member (drain, balancing, failback, stop).
    pub handovers: u64,
    pub fenced_peers: u64,
    pub last_takeover_ms: Option<u64>,
    /// Times it came back after being fenced, without a restart.
    pub rejoins: u64,
    /// Busy time of this gateway's I/O threads over the last load window, in percent
    /// of one thread.
    pub io_threads_busy_percent: Option<f64>,
    pub rebalance: RebalanceStatus,
    /// The last path changes this gateway made as the new owner, oldest first.
    pub path_changes: Vec<PathChange>,
    #[serde(skip)]
    pub histograms: PathChangeHistograms,
    /// With the group's configuration in the cluster: the version this gateway runs
    /// and one it could not apply yet (kept up to date by the management thread).
    #[serde(skip)]
    pub config_versions: Option<(u64, Option<u64>)>,
}

/// The published status, shared with the management API and the metrics.
pub type StatusHandle = Arc<Mutex<GatewayStatus>>;

/// Publishes the coordinator's view, keeping what the management thread set.
pub fn publish(status: &StatusHandle, mut next: GatewayStatus) {
    let mut current = status.lock().unwrap_or_else(|poison| poison.into_inner());
    next.config_versions = current.config_versions;
    *current = next;
}

/// The status of `coordinator` now.
pub fn snapshot<S: LeaseStore>(
    plan: &GatewayPlan,
    subsystems: &[String],
    coordinator: &Coordinator<S>,
    object: String,
    balancer: &Balancer,
    load: Option<&LoadRecord>,
) -> GatewayStatus {
    let GatewayCounters { takeovers, releases, fenced_peers, last_takeover_ms, rejoins, handovers } =
        coordinator.counters.clone();
    let rebalance = &plan.rebalance;
    let timelines = &coordinator.timelines;
    GatewayStatus {
        group: plan.group.clone(),
        subsystems: subsystems.to_vec(),
        name: plan.name.clone(),
        object,
        client_address: coordinator.settings().address.clone(),
        phase: match coordinator.phase {
            Phase::Serving => "serving",
            Phase::ClusterLost => "cluster-lost",
            Phase::Fenced => "fenced",
        },
        drained: coordinator.drained(),
        lease_ms: plan.lease_ms,
        failback: plan.failback,
        members: plan
            .members
            .iter()
            .map(|(name, address)| MemberStatus {
                name: name.clone(),
                address: address.to_string(),
                alive: coordinator.alive.contains(name),
                drained: coordinator.placement.is_drained(name),
                this_gateway: *name == plan.name,
            })
            .collect(),
        ana_groups: coordinator
            .groups
            .iter()
            .map(|group| {
                let rate = load.and_then(|record| record.groups.iter().find(|rate| rate.ana_group == group.id.0));
                GroupStatus {
                    ana_group: group.id.0,
                    preferred: group.preferred.clone(),
                    owner: group.owner.clone(),
                    desired: group.desired.clone(),
                    state: group.state.name(),
                    load: rate.map(|rate| rate.load),
                    commands_per_second: rate.map(|rate| rate.commands_per_second),
                    bytes_per_second: rate.map(|rate| rate.bytes_per_second),
                }
            })
            .collect(),
        takeovers,
        releases,
        handovers,
        fenced_peers,
        last_takeover_ms,
        rejoins,
        io_threads_busy_percent: load.map(|record| record.io_threads_busy_percent),
        rebalance: RebalanceStatus {
            mode: rebalance.mode.name(),
            interval_ms: rebalance.interval_ms,
            threshold_percent: rebalance.threshold_percent,
            max_moves: rebalance.max_moves,
            leader: balancer.leader,
            totals: balancer.last_totals.clone(),
            idle_reason: balancer.last_idle_reason.clone(),
            moves_total: balancer.moves_total,
            recent_moves: balancer.moves.iter().cloned().collect(),
        },
        path_changes: timelines.changes.iter().cloned().collect(),
        histograms: PathChangeHistograms {
            without_optimized: timelines.without_optimized.clone(),
            to_last_first_command: timelines.to_last_first_command.clone(),
            counts: timelines.counts.clone(),
        },
        config_versions: None,
    }
}

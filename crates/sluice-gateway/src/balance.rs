//! The changes to the placement record: drain and undrain (asked through any member's
//! management API) and the balancing pass of the member holding the rebalance lease.
//! Each runs on the coordinator's thread, with its cluster client, between two rounds.

use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use nvme_spec::ana::AnaGroupId;
use sluice_config::gateway::rebalance::{RebalanceMode, RebalancePlan};

use crate::coordinator::{Coordinator, LeaseStore, Phase};
use crate::load::{load_attribute, LoadRecord};
use crate::placement::{
    plan_drain, plan_rebalance, GroupLoad, MemberLoad, Members, Move, MoveKind, PlacementRecord,
    MIN_PASSES_BETWEEN_MOVES_OF_A_GROUP, PLACEMENT_ATTRIBUTE, PLACEMENT_LOCK, REBALANCE_LOCK,
};
use crate::timeline::unix_ms;

/// How long the placement lock is held at most (a member that dies holding it
/// blocks changes no longer than this).
const PLACEMENT_LOCK_DURATION: Duration = Duration::from_secs(10);
/// How long a change waits for the placement lock before giving up. Short: the
/// change runs on the coordinator's thread, whose renewals (every quarter lease, at
/// least 500 ms) must not wait behind it; the caller retries (the API answers that
/// another change is in progress, a balancing pass tries again at the next one).
const PLACEMENT_LOCK_WAIT: Duration = Duration::from_millis(200);
/// Moves of the last passes kept for `gateway status`.
pub const MOVES_KEPT: usize = 32;

/// Reads, changes and writes the placement record under its lock; `change` returns
/// whether it changed anything (no write otherwise).
pub fn update_placement<S: LeaseStore, T>(
    store: &S,
    cookie: &str,
    change: impl FnOnce(&mut PlacementRecord) -> Result<(T, bool), String>,
) -> Result<T, String> {
    let started = Instant::now();
    loop {
        match store.lock(PLACEMENT_LOCK, cookie, "placement change", PLACEMENT_LOCK_DURATION) {
            Ok(()) => break,
            Err(errno) if errno.is_busy() && started.elapsed() < PLACEMENT_LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(errno) if errno.is_busy() => {
                return Err("another drain, undrain or balancing pass is changing the group's placement now; \
                            retry in a few seconds"
                    .into())
            }
            Err(errno) => return Err(format!("cannot take the group's placement lock: {errno}")),
        }
    }
    let result = (|| {
        let bytes =
            store.attribute(PLACEMENT_ATTRIBUTE).map_err(|errno| format!("reading the placement record: {errno}"))?;
        let mut record = PlacementRecord::parse(bytes.as_deref())?;
        let (value, changed) = change(&mut record)?;
        if changed {
            record.generation += 1;
            store
                .set_attribute(PLACEMENT_ATTRIBUTE, &record.encode())
                .map_err(|errno| format!("writing the placement record: {errno}"))?;
        }
        Ok(value)
    })();
    let _ = store.unlock(PLACEMENT_LOCK, cookie);
    result
}

/// What a drain or undrain did.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PlacementChange {
    pub gateway: String,
    pub drained: bool,
    /// ANA group -> the member it goes to.
    pub moves: Vec<(u32, String)>,
    pub note: String,
}

/// The owners and desired owners of the coordinator's groups, with their last known
/// loads (load units; 0 when unknown).
fn group_loads<S: LeaseStore>(coordinator: &Coordinator<S>, loads: &[LoadRecord]) -> Vec<GroupLoad> {
    coordinator
        .groups
        .iter()
        .map(|group| GroupLoad {
            group: group.id,
            owner: group.owner.clone(),
            load: loads
                .iter()
                .flat_map(|record| record.groups.iter())
                .find(|rate| rate.ana_group == group.id.0)
                .map_or(0.0, |rate| rate.load),
        })
        .collect()
}

/// Drains `member`: refuses when no other live member could take its groups;
/// otherwise marks it drained and assigns each of its groups to the least loaded
/// live undrained member. Ownership then moves at the next rounds.
pub fn drain<S: LeaseStore>(coordinator: &Coordinator<S>, member: &str) -> Result<PlacementChange, String> {
    if coordinator.phase != Phase::Serving {
        return Err("this gateway cannot reach the cluster or was fenced; ask another member".into());
    }
    let settings = coordinator.settings();
    let loads = read_loads(coordinator.store(), &settings.members);
    let groups = group_loads(coordinator, &loads);
    let alive = coordinator.alive.clone();
    update_placement(coordinator.store(), &settings.cookie, |record| {
        if record.is_drained(member) {
            return Ok((
                PlacementChange {
                    gateway: member.into(),
                    drained: true,
                    moves: Vec::new(),
                    note: "already drained".into(),
                },
                false,
            ));
        }
        let members = Members { all: &settings.members, alive: &alive };
        let with_desired: Vec<(GroupLoad, Option<&str>)> = groups
            .iter()
            .zip(&coordinator.groups)
            .map(|(load, view)| {
                let desired = crate::placement::desired_owner(
                    view.id,
                    &view.preferred,
                    &view.owner,
                    settings.failback,
                    record,
                    &members,
                );
                (load.clone(), desired)
            })
            .collect();
        let moves = plan_drain(member, &with_desired, record, &members)?;
        let now_ms = unix_ms(SystemTime::now());
        record.drained.push(member.to_string());
        record.assign_moves(&moves, MoveKind::Drain, now_ms, 0);
        tracing::warn!(gateway = member, moves = ?moves.iter().map(|found| (found.group.0, found.to.as_str())).collect::<Vec<_>>(),
            "drained: its ANA groups move to the other members; it keeps its listeners and serves non-optimized");
        let moves = moves.into_iter().map(|found| (found.group.0, found.to)).collect();
        Ok((PlacementChange { gateway: member.into(), drained: true, moves, note: String::new() }, true))
    })
}

/// Undrains `member`: it may own groups again; the drain's assignments go, so its
/// groups come back by the usual rules (failback to the preferred member).
pub fn undrain<S: LeaseStore>(coordinator: &Coordinator<S>, member: &str) -> Result<PlacementChange, String> {
    let settings = coordinator.settings();
    if !settings.members.iter().any(|name| name == member) {
        return Err(format!(
            "{member:?} is not a member of this gateway group (members: {})",
            settings.members.join(", ")
        ));
    }
    update_placement(coordinator.store(), &settings.cookie, |record| {
        let was = record.is_drained(member);
        record.drained.retain(|name| name != member);
        let before = record.assignments.len();
        record.assignments.retain(|assignment| !(assignment.kind == MoveKind::Drain && assignment.from == member));
        let changed = was || record.assignments.len() != before;
        if changed {
            tracing::warn!(gateway = member, "undrained: it may own ANA groups again");
        }
        let note = if was { String::new() } else { "was not drained".to_string() };
        Ok((PlacementChange { gateway: member.into(), drained: false, moves: Vec::new(), note }, changed))
    })
}

/// Moves ANA group `ana_group` to member `to` (an operator's move): refused when the
/// group is not coordinated here, or `to` is not a live undrained member. The
/// assignment holds until `to` is drained or down; balancing passes leave the group
/// where it is and move others around it.
pub fn move_group<S: LeaseStore>(
    coordinator: &Coordinator<S>,
    ana_group: u32,
    to: &str,
) -> Result<PlacementChange, String> {
    if coordinator.phase != Phase::Serving {
        return Err("this gateway cannot reach the cluster or was fenced; ask another member".into());
    }
    let settings = coordinator.settings();
    let Some(index) = coordinator.groups.iter().position(|group| group.id.0 == ana_group) else {
        let known: Vec<String> = coordinator.groups.iter().map(|group| group.id.0.to_string()).collect();
        return Err(format!("ANA group {ana_group} is not one of the group's ANA groups ({})", known.join(", ")));
    };
    let members = Members { all: &settings.members, alive: &coordinator.alive };
    if !settings.members.iter().any(|name| name == to) {
        return Err(format!("{to:?} is not a member of this gateway group (members: {})", settings.members.join(", ")));
    }
    if !coordinator.alive.iter().any(|name| name == to) {
        return Err(format!("{to} is down (its membership lease is not held): start it first"));
    }
    if coordinator.placement.is_drained(to) {
        return Err(format!("{to} is drained: undrain it first"));
    }
    let from = coordinator.groups[index].owner.clone();
    let note = if from == to { format!("ANA group {ana_group} is already on {to}") } else { String::new() };
    update_placement(coordinator.store(), &settings.cookie, |record| {
        if !members.candidates(record).contains(&to) {
            return Err(format!("{to} was drained meanwhile: undrain it first"));
        }
        let found = Move {
            group: coordinator.groups[index].id,
            from: from.clone(),
            to: to.to_string(),
            reason: format!("moved by an operator from {} to {to}", if from.is_empty() { "none" } else { &from }),
        };
        let pass = record.passes;
        record.assign_moves(std::slice::from_ref(&found), MoveKind::Operator, unix_ms(SystemTime::now()), pass);
        tracing::warn!(ana_group, from = %from, to, "moving the ANA group (an operator's move)");
        Ok((PlacementChange { gateway: to.into(), drained: false, moves: vec![(ana_group, to.into())], note }, true))
    })
}

/// Every member's latest load record (unreadable or absent ones left out).
pub fn read_loads<S: LeaseStore>(store: &S, members: &[String]) -> Vec<LoadRecord> {
    members
        .iter()
        .filter_map(|member| store.attribute(&load_attribute(member)).ok().flatten())
        .filter_map(|bytes| LoadRecord::parse(&bytes))
        .collect()
}

/// One move a pass made, for `gateway status`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MoveRecord {
    pub pass: u64,
    pub ana_group: u32,
    pub from: String,
    pub to: String,
    pub reason: String,
    pub decided_unix_ms: u64,
}

/// The balancing state this member keeps.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Balancer {
    /// This member holds the rebalance lease.
    pub leader: bool,
    /// Members' totals as of the last pass (the load measure, or group counts).
    pub last_totals: Vec<MemberLoad>,
    /// Why the last pass moved nothing ("" when it moved).
    pub last_idle_reason: String,
    pub moves: std::collections::VecDeque<MoveRecord>,
    pub moves_total: u64,
    /// When the last pass that moved something decided (Unix ms).
    pub last_move_unix_ms: u64,
    /// The ANA groups moved by each of the last passes, newest last.
    #[serde(skip)]
    recent: std::collections::VecDeque<Vec<AnaGroupId>>,
}

impl Balancer {
    /// One pass (the caller runs it every `plan.interval_ms`): takes or renews the
    /// rebalance lease, and when this member holds it and the group is settled, moves
    /// what the plan says.
    pub fn pass<S: LeaseStore>(&mut self, coordinator: &Coordinator<S>, plan: &RebalancePlan) {
        if plan.mode == RebalanceMode::Off || coordinator.phase != Phase::Serving {
            self.leader = false;
            return;
        }
        let settings = coordinator.settings();
        let lease = Duration::from_millis(plan.interval_ms * 3);
        self.leader = coordinator.store().lock(REBALANCE_LOCK, &settings.cookie, "balancing passes", lease).is_ok();
        if !self.leader {
            return;
        }
        match self.plan_pass(coordinator, plan) {
            Err(reason) => self.last_idle_reason = reason,
            Ok(moves) if moves.is_empty() => self.last_idle_reason = "balanced within the threshold".into(),
            Ok(moves) => self.commit(coordinator, moves),
        }
    }

    /// The moves of a pass, or why it moves nothing.
    fn plan_pass<S: LeaseStore>(
        &mut self,
        coordinator: &Coordinator<S>,
        plan: &RebalancePlan,
    ) -> Result<Vec<Move>, String> {
        // Settled: every group owned by the member it should be, nothing in flight.
        for group in &coordinator.groups {
            if group.owner.is_empty() || group.owner != group.desired {
                return Err(format!(
                    "ANA group {} is moving ({} -> {}): waiting for it to settle",
                    group.id.0,
                    if group.owner.is_empty() { "none" } else { &group.owner },
                    group.desired
                ));
            }
        }
        let settings = coordinator.settings();
        let members = Members { all: &settings.members, alive: &coordinator.alive };
        let candidates: Vec<&str> = members.candidates(&coordinator.placement);
        let loads = read_loads(coordinator.store(), &settings.members);
        if plan.mode == RebalanceMode::Load {
            // Every candidate's load measured over a whole window after the last moves.
            for member in &candidates {
                let Some(record) = loads.iter().find(|record| record.gateway == *member) else {
                    return Err(format!("no load record of {member} yet"));
                };
                let window_start = record.measured_unix_ms.saturating_sub(record.window_ms);
                if window_start < self.last_move_unix_ms {
                    return Err(format!("waiting for a load window of {member} measured after the last moves"));
                }
                if record.measured_unix_ms + 3 * plan.load_window_ms < unix_ms(SystemTime::now()) {
                    return Err(format!("the load record of {member} is stale"));
                }
            }
            // A group that moved counts only once its new owner measured it for a
            // whole window (a group missing would look like no load at all).
            for group in &coordinator.groups {
                if !loads.iter().any(|record| record.groups.iter().any(|rate| rate.ana_group == group.id.0)) {
                    return Err(format!("waiting for a whole load window of ANA group {} at its owner", group.id.0));
                }
            }
        }
        // Groups an operator placed stay where they are: balancing works around them.
        let operator_placed = coordinator
            .placement
            .assignments
            .iter()
            .filter(|assignment| assignment.kind == MoveKind::Operator)
            .map(|assignment| AnaGroupId(assignment.ana_group));
        let recent: Vec<AnaGroupId> = self.recent.iter().flatten().copied().chain(operator_placed).collect();
        let (moves, totals) = plan_rebalance(
            plan.mode,
            &group_loads(coordinator, &loads),
            &candidates,
            plan.threshold_percent,
            plan.max_moves,
            &recent,
        );
        self.last_totals = totals;
        self.recent.push_back(moves.iter().map(|found| found.group).collect());
        while self.recent.len() as u64 > MIN_PASSES_BETWEEN_MOVES_OF_A_GROUP {
            self.recent.pop_front();
        }
        Ok(moves)
    }

    fn commit<S: LeaseStore>(&mut self, coordinator: &Coordinator<S>, moves: Vec<Move>) {
        let settings = coordinator.settings();
        let now_ms = unix_ms(SystemTime::now());
        let outcome = update_placement(coordinator.store(), &settings.cookie, |record| {
            record.passes += 1;
            let pass = record.passes;
            record.assign_moves(&moves, MoveKind::Rebalance, now_ms, pass);
            Ok((pass, true))
        });
        match outcome {
            Ok(pass) => {
                for found in moves {
                    tracing::info!(ana_group = found.group.0, from = %found.from, to = %found.to, reason = %found.reason, pass,
                        "balancing: moving the ANA group");
                    self.moves.push_back(MoveRecord {
                        pass,
                        ana_group: found.group.0,
                        from: found.from,
                        to: found.to,
                        reason: found.reason,
                        decided_unix_ms: now_ms,
                    });
                    self.moves_total += 1;
                }
                while self.moves.len() > MOVES_KEPT {
                    self.moves.pop_front();
                }
                self.last_move_unix_ms = now_ms;
                self.last_idle_reason.clear();
            }
            Err(error) => {
                tracing::warn!(%error, "balancing: cannot record the moves; retrying at the next pass");
                self.last_idle_reason = error;
            }
        }
    }
}

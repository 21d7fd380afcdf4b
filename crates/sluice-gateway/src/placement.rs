//! Where each ANA group should be served: the group's placement record (drained
//! members and explicit assignments), the rule every member applies to it, and the
//! plans of a drain and of a balancing pass.
//!
//! The record is one attribute of the group's object (`placement`), read by every
//! member each round and changed under the `placement` lock (a drain or undrain
//! through any member, a balancing pass by the member holding the rebalance lease).
//! Ownership itself still moves only through the coordinator's locks: the owner sees
//! that the group should be elsewhere and hands it over (ANA change, record cleared,
//! lock released, non-optimized); the member it should go to takes it at once.
//!
//! Balancing moves whole ANA groups, never a namespace between groups: a namespace's
//! ANA group is part of its identity (ANAGRPID in Identify Namespace, the record every
//! gateway checks at start), and changing it would need a namespace change notice to
//! every host and every gateway's configuration changed at once. So a group that
//! wants balancing gives its namespaces several ANA groups per member (up to
//! `MAX_ANA_GROUP_ID`, 64): with `k` groups per member, one move shifts about `1/k`
//! of a member's load. Ceph's gateway gives each gateway one group and moves
//! namespaces between groups instead; here one move is one ANA change per host
//! controller, whatever the namespace count.

use serde::{Deserialize, Serialize};

use nvme_spec::ana::AnaGroupId;
use sluice_config::gateway::rebalance::RebalanceMode;

/// The record's attribute on the group's object.
pub const PLACEMENT_ATTRIBUTE: &str = "placement";
/// Held while the record is read, changed and written (drains, undrains and passes
/// from different members must not lose each other's changes).
pub const PLACEMENT_LOCK: &str = "placement";
/// Held by the one member that runs balancing passes.
pub const REBALANCE_LOCK: &str = "rebalance";
/// The record's format version: a member refuses a record of a later version rather
/// than misread it. Version 2 added operator moves: a record holding one is written
/// as version 2, so that a member not yet upgraded says to upgrade it rather than
/// fail on the unknown kind; any other record stays version 1.
pub const PLACEMENT_RECORD_VERSION: u32 = 2;
/// The version of a record without operator moves.
const PLACEMENT_RECORD_VERSION_WITHOUT_OPERATOR_MOVES: u32 = 1;
/// A move is kept no longer than this before a pass may move the same ANA group
/// again: a group moved back and forth would pause its hosts' I/O at each change.
pub const MIN_PASSES_BETWEEN_MOVES_OF_A_GROUP: u64 = 3;
/// A move must shrink the spread between the two members it concerns by at least
/// this share (in percent), so that loads that wobble around the threshold do not
/// trade the same group back and forth (hysteresis).
pub const MIN_MOVE_GAIN_PERCENT: u64 = 20;

/// Why an assignment was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MoveKind {
    /// The member it left was drained.
    Drain,
    /// A balancing pass moved it.
    Rebalance,
    /// An operator moved it (`gateway_move`).
    Operator,
}

/// Where one ANA group should be served, until the member is drained or down.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub ana_group: u32,
    /// The member that should own it.
    pub gateway: String,
    /// The member that owned it when the move was decided.
    pub from: String,
    pub kind: MoveKind,
    /// What decided it, for `gateway status` and the log.
    pub reason: String,
    /// When it was decided (Unix time, ms): the start of the move's timeline.
    pub decided_unix_ms: u64,
    /// The balancing pass that made it (0 for drains).
    pub pass: u64,
}

/// The placement record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRecord {
    pub version: u32,
    /// Bumped by every change.
    pub generation: u64,
    /// Members out of service: they keep their listeners and serve non-optimized.
    pub drained: Vec<String>,
    /// Explicit owners, by ANA group.
    pub assignments: Vec<Assignment>,
    /// Balancing passes that moved something.
    pub passes: u64,
}

impl PlacementRecord {
    /// Reads the attribute's value (none: an empty record).
    pub fn parse(bytes: Option<&[u8]>) -> Result<PlacementRecord, String> {
        let Some(bytes) = bytes.filter(|bytes| !bytes.is_empty()) else { return Ok(PlacementRecord::default()) };
        let record: PlacementRecord = serde_json::from_slice(bytes)
            .map_err(|error| format!("the group's placement record is not readable: {error}"))?;
        if record.version > PLACEMENT_RECORD_VERSION {
            return Err(format!(
                "the group's placement record has version {}, this gateway reads up to {PLACEMENT_RECORD_VERSION}: \
                 upgrade this gateway",
                record.version
            ));
        }
        Ok(record)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut record = self.clone();
        record.version = if record.assignments.iter().any(|assignment| assignment.kind == MoveKind::Operator) {
            PLACEMENT_RECORD_VERSION
        } else {
            PLACEMENT_RECORD_VERSION_WITHOUT_OPERATOR_MOVES
        };
        serde_json::to_vec(&record).unwrap_or_default()
    }

    pub fn is_drained(&self, member: &str) -> bool {
        self.drained.iter().any(|name| name == member)
    }

    pub fn assignment(&self, group: AnaGroupId) -> Option<&Assignment> {
        self.assignments.iter().find(|assignment| assignment.ana_group == group.0)
    }

    /// Assigns each of `moves` (decided at `decided_unix_ms`, by balancing pass
    /// `pass`, 0 for a drain).
    pub fn assign_moves(&mut self, moves: &[Move], kind: MoveKind, decided_unix_ms: u64, pass: u64) {
        for found in moves {
            self.assign(Assignment {
                ana_group: found.group.0,
                gateway: found.to.clone(),
                from: found.from.clone(),
                kind,
                reason: found.reason.clone(),
                decided_unix_ms,
                pass,
            });
        }
    }

    /// Sets `assignment`, replacing the group's previous one.
    pub fn assign(&mut self, assignment: Assignment) {
        self.assignments.retain(|old| old.ana_group != assignment.ana_group);
        self.assignments.push(assignment);
        self.assignments.sort_by_key(|assignment| assignment.ana_group);
    }
}

/// What the placement rule needs to know about the group right now.
pub struct Members<'a> {
    /// Every member, in configured order.
    pub all: &'a [String],
    /// Members whose membership lease is held.
    pub alive: &'a [String],
}

impl Members<'_> {
    /// Alive and not drained, in configured order.
    pub fn candidates(&self, record: &PlacementRecord) -> Vec<&str> {
        self.all
            .iter()
            .filter(|name| self.alive.contains(name) && !record.is_drained(name))
            .map(String::as_str)
            .collect()
    }
}

/// The member that should own `group`, whose owner now is `owner` ("" when none):
/// 1. its assignment, when that member is alive and not drained;
/// 2. its preferred member on the same terms, when `failback` is on or nobody owns it;
/// 3. its owner on the same terms (a group does not move without a reason);
/// 4. its preferred member on the same terms;
/// 5. a live undrained member picked by the group's id (every member computes the
///    same);
/// 6. when every live member is drained, a live one all the same, by the same order
///    (a drained member serves rather than leave the group without a path).
///
/// `None` when no member is alive.
pub fn desired_owner<'a>(
    group: AnaGroupId,
    preferred: &'a str,
    owner: &'a str,
    failback: bool,
    record: &'a PlacementRecord,
    members: &Members<'a>,
) -> Option<&'a str> {
    let all: &'a [String] = members.all;
    let alive_names: &'a [String] = members.alive;
    let candidates: Vec<&'a str> =
        all.iter().filter(|name| alive_names.contains(name) && !record.is_drained(name)).map(String::as_str).collect();
    if let Some(assignment) = record.assignment(group) {
        if candidates.contains(&assignment.gateway.as_str()) {
            return Some(assignment.gateway.as_str());
        }
    }
    let pick = |list: &[&'a str]| -> Option<&'a str> {
        if (failback || owner.is_empty()) && list.contains(&preferred) {
            return Some(preferred);
        }
        if !owner.is_empty() && list.contains(&owner) {
            return Some(owner);
        }
        if list.contains(&preferred) {
            return Some(preferred);
        }
        (!list.is_empty()).then(|| list[(group.0.saturating_sub(1) as usize) % list.len()])
    };
    pick(&candidates).or_else(|| {
        let alive: Vec<&'a str> = all.iter().filter(|name| alive_names.contains(name)).map(String::as_str).collect();
        pick(&alive)
    })
}

/// One ANA group as a plan sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupLoad {
    pub group: AnaGroupId,
    /// Its owner now ("" when none).
    pub owner: String,
    /// Its measured load (load units per second; see `load::LoadRecord`).
    pub load: f64,
}

/// One move a plan makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub group: AnaGroupId,
    pub from: String,
    pub to: String,
    pub reason: String,
}

/// The moves of a drain of `member`: each group it owns (or should own) to the live
/// undrained member with the least load, counting the moves already planned.
/// Refused, with the reason, when no other member could take them.
pub fn plan_drain(
    member: &str,
    groups: &[(GroupLoad, Option<&str>)],
    record: &PlacementRecord,
    members: &Members<'_>,
) -> Result<Vec<Move>, String> {
    if !members.all.iter().any(|name| name == member) {
        return Err(format!("{member:?} is not a member of this gateway group (members: {})", members.all.join(", ")));
    }
    let mut after = record.clone();
    after.drained.push(member.to_string());
    let candidates = members.candidates(&after);
    let leaving: Vec<&(GroupLoad, Option<&str>)> =
        groups.iter().filter(|(load, desired)| load.owner == member || *desired == Some(member)).collect();
    if candidates.is_empty() {
        let states: Vec<String> = members
            .all
            .iter()
            .filter(|name| *name != member)
            .map(|name| {
                let state = if !members.alive.contains(name) {
                    "down"
                } else if record.is_drained(name) {
                    "drained"
                } else {
                    "serving"
                };
                format!("{name} {state}")
            })
            .collect();
        let groups: Vec<String> = leaving.iter().map(|(load, _)| load.group.0.to_string()).collect();
        return Err(format!(
            "draining {member} would leave ANA group(s) [{}] with no optimized path: no other member is alive and \
             undrained ({}); start or undrain another member first",
            groups.join(", "),
            if states.is_empty() { "it is the only member".to_string() } else { states.join(", ") }
        ));
    }
    let mut totals: Vec<(&str, f64)> = candidates.iter().map(|name| (*name, 0.0)).collect();
    for (load, _) in groups {
        if let Some(total) = totals.iter_mut().find(|(name, _)| *name == load.owner) {
            total.1 += load.load.max(1.0);
        }
    }
    let mut moves = Vec::new();
    let mut leaving = leaving;
    // Heaviest first: the greedy fill then ends closest to even.
    leaving.sort_by(|a, b| b.0.load.total_cmp(&a.0.load));
    for (load, _) in leaving {
        let Some(least) = totals.iter_mut().min_by(|a, b| a.1.total_cmp(&b.1)) else { break };
        least.1 += load.load.max(1.0);
        moves.push(Move {
            group: load.group,
            from: member.to_string(),
            to: least.0.to_string(),
            reason: format!("drain of {member}"),
        });
    }
    Ok(moves)
}

/// One member's total, as a balancing pass sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemberLoad {
    pub name: String,
    pub load: f64,
}

/// The moves of one balancing pass: while the busiest and the idlest member differ
/// by more than `threshold_percent` of the mean, move from the busiest to the idlest
/// the group that brings the two closest, if it shrinks their spread by at least
/// [`MIN_MOVE_GAIN_PERCENT`], or else lighter groups together on the same rule (see
/// [`pick_groups_to_move`]); at most `max_moves`. Groups in `recently_moved` stay.
/// With `mode` count, every group weighs 1.
pub fn plan_rebalance(
    mode: RebalanceMode,
    groups: &[GroupLoad],
    candidates: &[&str],
    threshold_percent: u32,
    max_moves: u32,
    recently_moved: &[AnaGroupId],
) -> (Vec<Move>, Vec<MemberLoad>) {
    let weight = |load: &GroupLoad| if mode == RebalanceMode::Count { 1.0 } else { load.load.max(0.0) };
    let mut owners: Vec<(AnaGroupId, String, f64)> = groups
        .iter()
        .filter(|load| candidates.contains(&load.owner.as_str()))
        .map(|load| (load.group, load.owner.clone(), weight(load)))
        .collect();
    let totals = |owners: &[(AnaGroupId, String, f64)]| -> Vec<MemberLoad> {
        candidates
            .iter()
            .map(|name| MemberLoad {
                name: name.to_string(),
                load: owners.iter().filter(|(_, owner, _)| owner == name).map(|(_, _, load)| load).sum(),
            })
            .collect()
    };
    let before = totals(&owners);
    let mut moves = Vec::new();
    if mode == RebalanceMode::Off || candidates.len() < 2 {
        return (moves, before);
    }
    while (moves.len() as u32) < max_moves {
        let current = totals(&owners);
        let total: f64 = current.iter().map(|member| member.load).sum();
        let mean = total / current.len() as f64;
        let (Some(busiest), Some(idlest)) = (
            current.iter().max_by(|a, b| a.load.total_cmp(&b.load)),
            current.iter().min_by(|a, b| a.load.total_cmp(&b.load)),
        ) else {
            break;
        };
        let spread = busiest.load - idlest.load;
        if total <= 0.0 || spread <= mean * f64::from(threshold_percent) / 100.0 {
            break;
        }
        let movable: Vec<(usize, f64)> = owners
            .iter()
            .enumerate()
            .filter(|(_, (group, owner, load))| {
                *owner == busiest.name && *load > 0.0 && !recently_moved.contains(group)
            })
            .map(|(index, (_, _, load))| (index, *load))
            .collect();
        let room = max_moves as usize - moves.len();
        let Some(chosen) = pick_groups_to_move(spread, &movable, room) else { break };
        let moved: f64 = chosen.iter().map(|&index| owners[index].2).sum();
        let together = if chosen.len() > 1 {
            format!(", {} groups of load {moved:.0} together", chosen.len())
        } else {
            String::new()
        };
        for index in chosen {
            let (group, _, load) = owners[index].clone();
            moves.push(Move {
                group,
                from: busiest.name.clone(),
                to: idlest.name.clone(),
                reason: format!(
                    "{} spread {:.0} > {}% of mean {:.0}: {} {:.0} -> {} {:.0}, group load {:.0}{together}",
                    mode.name(),
                    spread,
                    threshold_percent,
                    mean,
                    busiest.name,
                    busiest.load,
                    idlest.name,
                    idlest.load,
                    load
                ),
            });
            owners[index].1 = idlest.name.clone();
        }
    }
    (moves, before)
}

/// Which of the busiest member's `movable` groups (index, load) to move to the
/// idlest, whose loads differ by `spread`: the one group that brings the two closest,
/// when it shrinks their spread by [`MIN_MOVE_GAIN_PERCENT`]; otherwise (every group
/// too heavy or too light alone) lighter groups together, heaviest first while each
/// brings the two closer, at most `room` of them, on the same gain rule. Without the
/// second way, a member left with one heavy group too many and many light ones stays
/// out of balance: no single group is worth a move.
fn pick_groups_to_move(spread: f64, movable: &[(usize, f64)], room: usize) -> Option<Vec<usize>> {
    let worth_it = |moved: f64| (spread - 2.0 * moved).abs() <= spread * (100 - MIN_MOVE_GAIN_PERCENT) as f64 / 100.0;
    if room == 0 {
        return None;
    }
    let single = movable.iter().min_by(|a, b| (spread - 2.0 * a.1).abs().total_cmp(&(spread - 2.0 * b.1).abs()))?;
    if worth_it(single.1) {
        return Some(vec![single.0]);
    }
    let mut heaviest_first = movable.to_vec();
    heaviest_first.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (mut chosen, mut moved) = (Vec::new(), 0.0);
    for (index, load) in heaviest_first {
        if chosen.len() == room {
            break;
        }
        if (spread - 2.0 * (moved + load)).abs() < (spread - 2.0 * moved).abs() {
            chosen.push(index);
            moved += load;
        }
    }
    (chosen.len() > 1 && worth_it(moved)).then_some(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| name.to_string()).collect()
    }

    fn load(group: u32, owner: &str, load: f64) -> GroupLoad {
        GroupLoad { group: AnaGroupId(group), owner: owner.into(), load }
    }

    #[test]
    fn the_owner_rule_prefers_assignment_then_preferred_then_any_live_member() {
        let all = names(&["a", "b", "c"]);
        let alive = names(&["a", "b", "c"]);
        let members = Members { all: &all, alive: &alive };
        let mut record = PlacementRecord::default();
        assert_eq!(desired_owner(AnaGroupId(1), "a", "", true, &record, &members), Some("a"));
        assert_eq!(desired_owner(AnaGroupId(1), "a", "b", true, &record, &members), Some("a"), "failback");
        assert_eq!(desired_owner(AnaGroupId(1), "a", "b", false, &record, &members), Some("b"), "no failback");
        record.assign(Assignment {
            ana_group: 1,
            gateway: "c".into(),
            from: "a".into(),
            kind: MoveKind::Rebalance,
            reason: String::new(),
            decided_unix_ms: 0,
            pass: 1,
        });
        assert_eq!(desired_owner(AnaGroupId(1), "a", "a", true, &record, &members), Some("c"));
        record.drained.push("c".into());
        assert_eq!(
            desired_owner(AnaGroupId(1), "a", "c", true, &record, &members),
            Some("a"),
            "drained: the preferred"
        );
        record.drained.push("a".into());
        assert_eq!(desired_owner(AnaGroupId(1), "a", "a", true, &record, &members), Some("b"));
        record.drained.push("b".into());
        assert_eq!(desired_owner(AnaGroupId(1), "a", "b", true, &record, &members), Some("a"), "all drained: anyway");
        // The preferred member down: the owner keeps it (no move without a reason).
        let record = PlacementRecord::default();
        let alive = names(&["b", "c"]);
        let members = Members { all: &all, alive: &alive };
        assert_eq!(desired_owner(AnaGroupId(1), "a", "c", true, &record, &members), Some("c"));
        assert_eq!(desired_owner(AnaGroupId(1), "a", "", true, &record, &members), Some("b"), "by the group's id");
        let alive = names(&[]);
        let members = Members { all: &all, alive: &alive };
        assert_eq!(desired_owner(AnaGroupId(1), "a", "", true, &record, &members), None);
    }

    #[test]
    fn a_drain_spreads_the_groups_and_is_refused_when_nobody_could_take_them() {
        let all = names(&["a", "b", "c"]);
        let alive = names(&["a", "b", "c"]);
        let members = Members { all: &all, alive: &alive };
        let record = PlacementRecord::default();
        let groups: Vec<(GroupLoad, Option<&str>)> =
            (1..=6).map(|id| (load(id, ["a", "b", "c"][(id as usize - 1) % 3], 10.0), None)).collect();
        let moves = plan_drain("a", &groups, &record, &members).unwrap();
        assert_eq!(moves.len(), 2, "{moves:?}");
        assert!(moves.iter().all(|found| found.from == "a" && found.to != "a"));
        assert_ne!(moves[0].to, moves[1].to, "spread over b and c: {moves:?}");
        let alive = names(&["a"]);
        let members = Members { all: &all, alive: &alive };
        let error = plan_drain("a", &groups, &record, &members).unwrap_err();
        assert!(error.contains("no optimized path") && error.contains("b down"), "{error}");
        assert!(plan_drain("z", &groups, &record, &members).unwrap_err().contains("not a member"));
    }

    #[test]
    fn a_skewed_load_is_evened_within_the_threshold_and_an_even_one_stays() {
        // 90/5/5 over 12 groups: a owns 8 busy groups, b and c two light ones each.
        let mut groups: Vec<GroupLoad> = (1..=8).map(|id| load(id, "a", 1125.0)).collect();
        groups.extend((9..=10).map(|id| load(id, "b", 250.0)));
        groups.extend((11..=12).map(|id| load(id, "c", 250.0)));
        let candidates = ["a", "b", "c"];
        let (moves, before) = plan_rebalance(RebalanceMode::Load, &groups, &candidates, 25, 8, &[]);
        assert_eq!(before[0].load, 9000.0);
        for found in &moves {
            let group = groups.iter_mut().find(|load| load.group == found.group).unwrap();
            group.owner = found.to.clone();
        }
        let (again, after) = plan_rebalance(RebalanceMode::Load, &groups, &candidates, 25, 8, &[]);
        let total: f64 = after.iter().map(|member| member.load).sum();
        for member in &after {
            assert!(member.load / total <= 0.40, "{after:?} after {moves:?}");
        }
        assert!(again.is_empty(), "balanced: no more moves, got {again:?}");
    }

    /// Runs passes as the balancer does (moved groups stay out of the next passes)
    /// until one moves nothing; returns the shares (percent) and the moves made.
    fn passes_until_still(groups: &mut [GroupLoad], threshold_percent: u32) -> (Vec<f64>, usize) {
        let candidates = ["a", "b", "c"];
        let mut recent: Vec<Vec<AnaGroupId>> = Vec::new();
        let mut moved = 0;
        for _ in 0..20 {
            let excluded: Vec<AnaGroupId> = recent.iter().rev().take(3).flatten().copied().collect();
            let (moves, _) = plan_rebalance(RebalanceMode::Load, groups, &candidates, threshold_percent, 8, &excluded);
            if moves.is_empty() {
                break;
            }
            moved += moves.len();
            for found in &moves {
                groups.iter_mut().find(|load| load.group == found.group).unwrap().owner = found.to.clone();
            }
            recent.push(moves.iter().map(|found| found.group).collect());
        }
        let (_, totals) = plan_rebalance(RebalanceMode::Off, groups, &candidates, threshold_percent, 8, &[]);
        let total: f64 = totals.iter().map(|member| member.load).sum();
        (totals.iter().map(|member| 100.0 * member.load / total).collect(), moved)
    }

    #[test]
    fn light_groups_move_together_when_no_single_one_is_worth_a_move() {
        // The measured shape: 24 groups, 8 per member, loads 90/5/5.
        let skewed = || -> Vec<GroupLoad> {
            (1..=24)
                .map(|id| {
                    let owner = ["a", "b", "c"][(id as usize - 1) / 8];
                    load(id, owner, if owner == "a" { 1125.0 } else { 62.5 })
                })
                .collect()
        };
        let mut groups = skewed();
        let (shares, moved) = passes_until_still(&mut groups, 10);
        assert!(shares.iter().all(|share| (30.0..=40.0).contains(share)), "{shares:?} after {moved} moves");
        // Single moves alone stop at 33.8/27.5/38.8: one heavy group too many on c.
        let (moves, _) = plan_rebalance(RebalanceMode::Load, &groups, &["a", "b", "c"], 10, 8, &[]);
        assert!(moves.is_empty(), "settled: {moves:?}");
        // A batch never takes more than the pass has room for.
        let mut groups = skewed();
        for (index, group) in groups.iter_mut().enumerate().take(5) {
            group.owner = ["b", "c"][index % 2].into();
        }
        let (moves, _) = plan_rebalance(RebalanceMode::Load, &groups, &["a", "b", "c"], 10, 2, &[]);
        assert!(moves.len() <= 2, "{moves:?}");
        // Light groups alone never add up to a worthwhile move: nothing moves.
        let groups = vec![load(1, "a", 20.0), load(2, "a", 1.0), load(3, "b", 10.0)];
        let (moves, _) = plan_rebalance(RebalanceMode::Load, &groups, &["a", "b"], 10, 8, &[]);
        assert!(moves.is_empty(), "{moves:?}");
    }

    #[test]
    fn count_mode_ignores_load_and_recent_moves_stay() {
        let groups = vec![load(1, "a", 1.0), load(2, "a", 1.0), load(3, "a", 1000.0), load(4, "b", 0.0)];
        let (moves, _) = plan_rebalance(RebalanceMode::Count, &groups, &["a", "b"], 25, 8, &[]);
        assert_eq!(moves.len(), 1, "3 against 1 evens to 2 against 2: {moves:?}");
        let (moves, _) = plan_rebalance(
            RebalanceMode::Count,
            &groups,
            &["a", "b"],
            25,
            8,
            &[AnaGroupId(1), AnaGroupId(2), AnaGroupId(3)],
        );
        assert!(moves.is_empty());
        let (moves, _) = plan_rebalance(RebalanceMode::Off, &groups, &["a", "b"], 25, 8, &[]);
        assert!(moves.is_empty());
    }

    #[test]
    fn a_move_never_widens_the_spread_and_one_heavy_group_does_not_ping_pong() {
        // One group carrying everything cannot be split: moving it only swaps roles.
        let groups = vec![load(1, "a", 1000.0), load(2, "b", 1.0)];
        let (moves, _) = plan_rebalance(RebalanceMode::Load, &groups, &["a", "b"], 25, 8, &[]);
        assert!(moves.is_empty(), "{moves:?}");
        // Property over many shapes: every planned move shrinks the pair's spread.
        let mut seed = 7u64;
        for _ in 0..2000 {
            let mut groups = Vec::new();
            for id in 1..=12 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let owner = ["a", "b", "c"][(seed >> 33) as usize % 3];
                groups.push(load(id, owner, ((seed >> 40) % 1000) as f64));
            }
            let (moves, before) = plan_rebalance(RebalanceMode::Load, &groups, &["a", "b", "c"], 25, 8, &[]);
            let spread = |members: &[MemberLoad]| {
                let loads: Vec<f64> = members.iter().map(|member| member.load).collect();
                loads.iter().cloned().fold(f64::MIN, f64::max) - loads.iter().cloned().fold(f64::MAX, f64::min)
            };
            for found in &moves {
                groups.iter_mut().find(|load| load.group == found.group).unwrap().owner = found.to.clone();
            }
            let (_, after) = plan_rebalance(RebalanceMode::Load, &groups, &["a", "b", "c"], 25, 8, &[]);
            assert!(spread(&after) <= spread(&before) + 1e-9, "{before:?} -> {after:?}");
        }
    }

    #[test]
    fn records_round_trip_and_a_later_version_is_refused() {
        let mut record = PlacementRecord { drained: names(&["b"]), generation: 4, ..Default::default() };
        record.assign(Assignment {
            ana_group: 3,
            gateway: "a".into(),
            from: "b".into(),
            kind: MoveKind::Drain,
            reason: "drain of b".into(),
            decided_unix_ms: 1,
            pass: 0,
        });
        let parsed = PlacementRecord::parse(Some(&record.encode())).unwrap();
        assert_eq!(parsed.drained, record.drained);
        assert_eq!(parsed.assignment(AnaGroupId(3)).unwrap().kind, MoveKind::Drain);
        assert_eq!(PlacementRecord::parse(None).unwrap(), PlacementRecord::default());
        let later = String::from_utf8(record.encode()).unwrap().replace("\"version\":1", "\"version\":9");
        assert!(PlacementRecord::parse(Some(later.as_bytes())).unwrap_err().contains("upgrade this gateway"));
    }
}

//! ANA ownership in a group seed (issue 47): the namespace's ANA group is optimized on
//! one gateway, its owner, and non-optimized on the others, as a gateway group's
//! coordinators keep it. Moves (a drain, a balancing move and an operator's move are
//! all the same hand-over) come at drawn times: the owner reports the group in the ANA
//! *change* state, releases it after a drawn delay (*non-optimized*), and only then
//! does the member it goes to report it *optimized*. An owner that crashes is replaced
//! by a live gateway a lease later (the takeover).
//!
//! Oracles: at no instant do two live gateways report the group optimized; a host's
//! command refused with ANA Transition came from a gateway whose group was changing
//! then; and beside them, every oracle of the group world (no acknowledged write lost,
//! reservations and Compare and Write) holds across the moves. The
//! `skip-ana-change` canary hands over without the change state: the taker reports
//! the group optimized at once while the old owner still does.
//!
//! This models the order of the coordinator's hand-over; the coordinators themselves
//! are run through drains, moves, crashes and partitions by the ownership simulation
//! (`sluice-gateway`'s `tests/ownership_sim.rs`), which the simulator cannot link (the
//! gateway crate uses the runtime).

use nvme_spec::ana::{AnaGroupId, AnaState};

use super::world::{GroupWorld, MS};
use crate::Canary;

/// The one ANA group of the group's namespace (its spec names none: group 1).
const ANA_GROUP: AnaGroupId = AnaGroupId(1);

/// Who serves the ANA group, and the move in progress.
#[derive(Debug, Default)]
pub(super) struct AnaOwnership {
    /// The gateway reporting it optimized (`None` while it is ownerless).
    owner: Option<usize>,
    /// A hand-over in progress: from, to, and when the old owner releases it.
    handing: Option<(usize, usize, u64)>,
    /// Ownerless: when a live gateway takes it.
    take_at_ns: Option<u64>,
    /// When the next move starts (`u64::MAX`: none drawn).
    pub(super) next_move_ns: u64,
    pub(super) moves: u64,
    pub(super) takeovers: u64,
}

impl GroupWorld {
    /// Gateway 0 owns the group at the start; every other reports it non-optimized.
    pub(super) fn start_ana(&mut self) {
        self.ana.owner = Some(0);
        for index in 0..self.gateways.len() {
            self.report_ana(index, if index == 0 { AnaState::Optimized } else { AnaState::NonOptimized });
        }
        self.schedule_move();
    }

    /// A gateway (re)started: it owns nothing yet.
    pub(super) fn ana_gateway_started(&mut self, index: usize) {
        if self.ana.owner != Some(index) {
            self.report_ana(index, AnaState::NonOptimized);
        }
    }

    /// A gateway crashed: when it owned the group, a live gateway takes it a lease
    /// later (its lock's lease runs out first).
    pub(super) fn ana_gateway_crashed(&mut self, index: usize) {
        if self.ana.owner == Some(index) {
            self.ana.owner = None;
            self.ana.take_at_ns = Some(self.context.clock.elapsed_ns() + self.plan.cluster.lease_ns);
        }
    }

    fn schedule_move(&mut self) {
        let mean = self.plan.mean_ana_move_interval_ns;
        self.ana.next_move_ns = if mean == 0 {
            u64::MAX
        } else {
            self.context.clock.elapsed_ns() + self.context.rng.between(mean / 4, mean * 2)
        };
    }

    fn alive(&self, index: usize) -> bool {
        self.gateways[index].target.is_some()
    }

    fn report_ana(&mut self, index: usize, state: AnaState) {
        if let Some(target) = &self.gateways[index].target {
            target.set_ana_state(ANA_GROUP, state);
        }
    }

    /// Moves, releases and takeovers that are due; then the oracle. True when
    /// something changed.
    pub(super) fn step_ana(&mut self, working: bool) -> bool {
        let now_ns = self.context.clock.elapsed_ns();
        let mut moved = false;
        if let Some((from, to, release_at_ns)) = self.ana.handing.filter(|handing| now_ns >= handing.2) {
            let _ = release_at_ns;
            self.ana.handing = None;
            self.report_ana(from, AnaState::NonOptimized);
            self.ana.moves += 1;
            if self.alive(to) {
                self.report_ana(to, AnaState::Optimized);
                self.ana.owner = Some(to);
                self.context.note(|| format!("ANA group 1 moved from gateway {from} to {to}"));
            } else {
                // The member it went to died meanwhile: ownerless, taken at once.
                self.ana.owner = None;
                self.ana.take_at_ns = Some(now_ns);
            }
            moved = true;
        }
        if self.ana.owner.is_none() && self.ana.handing.is_none() && self.ana.take_at_ns.is_some_and(|at| now_ns >= at)
        {
            let count = self.gateways.len();
            let first = self.context.rng.below(count as u64) as usize;
            if let Some(taker) = (0..count).map(|offset| (first + offset) % count).find(|&index| self.alive(index)) {
                self.report_ana(taker, AnaState::Optimized);
                self.ana.owner = Some(taker);
                self.ana.take_at_ns = None;
                self.ana.takeovers += 1;
                self.context.note(|| format!("ANA group 1 taken over by gateway {taker}"));
                moved = true;
            }
        }
        if working && now_ns >= self.ana.next_move_ns {
            moved |= self.begin_move(now_ns);
            self.schedule_move();
        }
        self.check_ana();
        moved
    }

    /// The owner hands the group to another live gateway: ANA change now, released
    /// after a drawn delay (the taker's next round).
    fn begin_move(&mut self, now_ns: u64) -> bool {
        let (Some(from), None) = (self.ana.owner, self.ana.handing) else {
            return false;
        };
        let others: Vec<usize> = (0..self.gateways.len()).filter(|&index| index != from && self.alive(index)).collect();
        if others.is_empty() {
            return false;
        }
        let to = others[self.context.rng.below(others.len() as u64) as usize];
        let release_at_ns = now_ns + self.context.rng.between(MS / 2, (self.plan.cluster.lease_ns / 4).max(MS));
        if self.canary == Some(Canary::SkipAnaChange) {
            // The planted bug: the taker reports it optimized before the old owner
            // left the optimized state.
            self.report_ana(to, AnaState::Optimized);
        } else {
            self.report_ana(from, AnaState::Change);
            let instance = self.gateways[from].instance;
            self.context.ana_changing.entry(instance).or_default().push((now_ns, release_at_ns));
        }
        self.ana.owner = None;
        self.ana.handing = Some((from, to, release_at_ns));
        self.context.note(|| format!("ANA group 1 handed over from gateway {from} to {to}: change state"));
        true
    }

    /// Never two live gateways reporting the group optimized.
    fn check_ana(&mut self) {
        let optimized: Vec<usize> = (0..self.gateways.len())
            .filter(|&index| {
                self.gateways[index]
                    .target
                    .as_ref()
                    .is_some_and(|target| target.ana.state(ANA_GROUP) == AnaState::Optimized)
            })
            .collect();
        if optimized.len() > 1 {
            self.context.violation(format!(
                "ANA group 1 optimized on gateways {optimized:?} at once: a hand-over must pass through the change \
                 state and the old owner's release before the taker reports it optimized"
            ));
        }
    }

    /// When the ANA model wants the next step.
    pub(super) fn ana_events_ns(&self, working: bool) -> impl Iterator<Item = u64> + '_ {
        let release = self.ana.handing.map(|handing| handing.2);
        let take = self
            .ana
            .take_at_ns
            .filter(|_| self.ana.owner.is_none() && self.gateways.iter().any(|g| g.target.is_some()));
        let next_move = working.then_some(self.ana.next_move_ns);
        release.into_iter().chain(take).chain(next_move)
    }
}

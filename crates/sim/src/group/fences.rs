//! Preempt and Abort's fence on a gateway group, as `sluice serve` keeps it
//! (`crates/sluice-gateway/src/fence_waits.rs`): a gateway installs a notice at once
//! (from then on the preempted hosts' new writes are refused) and acknowledges it only
//! once the fence `Target::install_group_reservations` returned has drained (the
//! preempted hosts' writes already at storage there completed), or withholds it when
//! the fence's bound (half the notify timeout: the lease) passes first, and is then
//! fenced by the gateway that made the change.
//!
//! The gateway's finisher: librados hands a client's watch notices and its storage
//! completions to one thread. The notice handler never blocks it; the
//! `fence-wait-on-finisher` canary plants the cause of issue 49: a notice waits for
//! its fence on the finisher, so that gateway's storage completions (and later
//! notices) are held until the wait ends, the fence cannot drain, and the gateway
//! is fenced for nothing.
//!
//! The gateway that made a change preempting a host and did not acknowledge its own
//! notice installs the change itself and waits for its own fence the same way (on its
//! reservation thread, never the finisher), fencing itself past the bound.
//!
//! The oracles:
//! - safety: no write or Compare and Write of a host lands in the store after a
//!   Preempt and Abort that unregistered the host was answered to its sender, unless
//!   a later state lets the host write again (`GroupOracle::write_landed`);
//! - liveness: a gateway whose storage answers (no stall), with nothing lost on the
//!   way (its notice and acknowledgement arrived, the cluster did not restart, its
//!   watch was in place), is never fenced by a reservation change.

use std::collections::{BTreeSet, VecDeque};

use nvme_target::group_reservations::GroupUpdate;
use nvme_target::write_fence::WriteFence;

use super::authority::FenceCause;
use super::world::{GroupWorld, NGUID};
use crate::Canary;

/// A notice installed whose fence had not drained yet.
struct FenceWait {
    gateway: usize,
    instance: u64,
    publication: u64,
    sequence: u64,
    acknowledgement_lost: bool,
    fence: WriteFence,
    deadline_ns: u64,
    /// `fence-wait-on-finisher`: the wait holds its gateway's finisher.
    blocking: bool,
    /// The notifier's wait for its own fence ([`GroupWorld::own_fence`]): it tells
    /// the cluster either way, instead of acknowledging a notice.
    own: bool,
}

/// A notice that waits behind a blocked finisher (the canary only).
struct QueuedNotice {
    instance: u64,
    update: GroupUpdate,
    publication: Option<u64>,
    acknowledgement_lost: bool,
}

/// The fences gateways wait for, and what the liveness oracle needs to know.
pub struct Fences {
    waits: Vec<FenceWait>,
    /// Per gateway: notices queued behind its blocked finisher.
    backlog: Vec<VecDeque<QueuedNotice>>,
    /// (process, publication) whose acknowledgement was withheld at the bound.
    withheld: BTreeSet<(u64, u64)>,
    /// Per gateway: when its storage stalled, (from, to).
    stalls: Vec<Vec<(u64, u64)>>,
    /// Notices whose acknowledgement waited for a fence, and those withheld.
    pub waited: u64,
    pub withheld_count: u64,
}

impl Fences {
    pub fn new(gateways: usize) -> Fences {
        Fences {
            waits: Vec::new(),
            backlog: (0..gateways).map(|_| VecDeque::new()).collect(),
            withheld: BTreeSet::new(),
            stalls: vec![Vec::new(); gateways],
            waited: 0,
            withheld_count: 0,
        }
    }

    fn finisher_blocked(&self, gateway: usize) -> bool {
        self.waits.iter().any(|wait| wait.blocking && wait.gateway == gateway)
    }

    /// The gateway's process died: its waits and queued notices go with it.
    pub fn gateway_crashed(&mut self, gateway: usize) {
        self.waits.retain(|wait| wait.gateway != gateway);
        self.backlog[gateway].clear();
    }

    /// The gateway's storage answers nothing between `from_ns` and `to_ns`.
    pub fn stalled(&mut self, gateway: usize, from_ns: u64, to_ns: u64) {
        self.stalls[gateway].push((from_ns, to_ns));
    }

    fn stalled_during(&self, gateway: usize, from_ns: u64, to_ns: u64) -> bool {
        self.stalls[gateway].iter().any(|&(from, to)| from <= to_ns && to >= from_ns)
    }

    /// When the next wait's bound passes.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.waits.iter().map(|wait| wait.deadline_ns).min()
    }
}

impl GroupWorld {
    /// A notice (`publication`) or the record read after a watch was registered
    /// reached gateway `index`'s process `instance`.
    pub(super) fn notice_arrived(
        &mut self,
        index: usize,
        instance: u64,
        update: GroupUpdate,
        publication: Option<u64>,
        acknowledgement_lost: bool,
    ) {
        if publication.is_some()
            && self.canary == Some(Canary::FenceWaitOnFinisher)
            && self.fences.finisher_blocked(index)
        {
            self.context.note(|| {
                format!("gateway {index}: the notice of sequence {} waits behind the blocked finisher", update.sequence)
            });
            self.fences.backlog[index].push_back(QueuedNotice { instance, update, publication, acknowledgement_lost });
            return;
        }
        self.install(index, instance, &update, publication, acknowledgement_lost);
    }

    fn install(
        &mut self,
        index: usize,
        instance: u64,
        update: &GroupUpdate,
        publication: Option<u64>,
        acknowledgement_lost: bool,
    ) {
        let gateway = &mut self.gateways[index];
        let Some(target) = gateway.target.clone().filter(|_| gateway.instance == instance) else {
            return;
        };
        let fence = target.install_group_reservations(&NGUID, update);
        gateway.loaded = true;
        self.context.mix(update.sequence << 8 | index as u64);
        self.context.note(|| {
            format!(
                "gateway {index} installed sequence {} ({}, fence of {} writes)",
                update.sequence,
                publication.map_or("loaded".into(), |id| format!("notice {id}")),
                fence.writes_in_flight()
            )
        });
        // The record read when the watch was registered: nobody waits for it (the
        // copy was unknown meanwhile, and a change made then fenced this gateway).
        let Some(publication) = publication else {
            if self.context.cluster.take_forgot(instance) {
                if let Err(problem) = self.context.group.loaded_after_power_loss(update.sequence) {
                    self.context.violation(problem);
                }
            }
            return;
        };
        if fence.is_drained() {
            if !acknowledgement_lost {
                self.context.cluster.acknowledge(publication, index, instance);
            }
            return;
        }
        let blocking = self.canary == Some(Canary::FenceWaitOnFinisher);
        if blocking {
            self.context.store.hold_completions(index, true);
        }
        let writes = fence.writes_in_flight();
        self.context.note(|| {
            format!(
                "gateway {index} waits for {writes} preempted writes at storage before it acknowledges sequence {}{}",
                update.sequence,
                if blocking { " (on its finisher)" } else { "" }
            )
        });
        self.fences.waited += 1;
        self.fences.waits.push(FenceWait {
            gateway: index,
            instance,
            publication,
            sequence: update.sequence,
            acknowledgement_lost,
            fence,
            deadline_ns: self.context.clock.elapsed_ns() + self.plan.cluster.lease_ns / 2,
            blocking,
            own: false,
        });
    }

    /// Gateway `index`'s process `instance` made the change of `publication`, which
    /// preempted a host, and did not acknowledge its own notice: it installs the
    /// change itself and waits for its writes of the preempted hosts before the
    /// change is answered (`sluice serve`'s `wait_for_own_fence`).
    pub(super) fn own_fence(&mut self, index: usize, instance: u64, publication: u64, update: &GroupUpdate) {
        let gateway = &self.gateways[index];
        let Some(target) = gateway.target.clone().filter(|_| gateway.instance == instance) else {
            self.context.cluster.own_fence_settled(publication, index, instance, false);
            return;
        };
        let fence = target.install_own_change(&NGUID, update);
        let writes = fence.writes_in_flight();
        self.context.note(|| {
            format!(
                "gateway {index}: its own notice of sequence {} went unacknowledged; it waits for its own {writes} preempted writes at storage",
                update.sequence
            )
        });
        if fence.is_drained() {
            self.context.cluster.own_fence_settled(publication, index, instance, true);
            return;
        }
        self.fences.waited += 1;
        self.fences.waits.push(FenceWait {
            gateway: index,
            instance,
            publication,
            sequence: update.sequence,
            acknowledgement_lost: false,
            fence,
            deadline_ns: self.context.clock.elapsed_ns() + self.plan.cluster.lease_ns / 2,
            blocking: false,
            own: true,
        });
    }

    /// Acknowledges the notices whose fence drained, withholds those past the bound.
    pub(super) fn settle_fences(&mut self) -> bool {
        let now_ns = self.context.clock.elapsed_ns();
        let mut moved = false;
        let mut unblocked = Vec::new();
        let mut position = 0;
        while position < self.fences.waits.len() {
            let wait = &self.fences.waits[position];
            let drained = wait.fence.is_drained();
            if !drained && now_ns < wait.deadline_ns {
                position += 1;
                continue;
            }
            let wait = self.fences.waits.remove(position);
            moved = true;
            let (index, sequence) = (wait.gateway, wait.sequence);
            if wait.blocking {
                self.context.store.hold_completions(index, false);
                unblocked.push(index);
            }
            if wait.own {
                self.context.cluster.own_fence_settled(wait.publication, index, wait.instance, drained);
                self.context.note(|| {
                    format!(
                        "gateway {index}: its own fence for sequence {sequence} {}",
                        if drained { "drained" } else { "did not drain within its bound: it fences itself" }
                    )
                });
            } else if drained {
                if !wait.acknowledgement_lost {
                    self.context.cluster.acknowledge(wait.publication, index, wait.instance);
                }
                self.context.note(|| format!("gateway {index}: the fence drained, sequence {sequence} acknowledged"));
            } else {
                self.fences.withheld_count += 1;
                self.fences.withheld.insert((wait.instance, wait.publication));
                self.context.note(|| {
                    format!("gateway {index}: the fence did not drain within its bound, sequence {sequence} not acknowledged")
                });
            }
        }
        for index in unblocked {
            while !self.fences.finisher_blocked(index) {
                let Some(queued) = self.fences.backlog[index].pop_front() else {
                    break;
                };
                self.install(index, queued.instance, &queued.update, queued.publication, queued.acknowledgement_lost);
            }
        }
        moved
    }

    /// Liveness: every gateway the cluster fenced had lost a notice or an
    /// acknowledgement, met a cluster restart, had no watch, or had its storage stall.
    pub(super) fn check_fences(&mut self) {
        let now_ns = self.context.clock.elapsed_ns();
        for record in self.context.cluster.take_fences() {
            let cause = record.cause;
            self.context
                .note(|| format!("gateway {} fenced for sequence {}: {cause:?}", record.gateway, record.sequence));
            if !matches!(cause, FenceCause::Silent | FenceCause::OwnFenceUndrained)
                || self.fences.stalled_during(record.gateway, record.committed_ns, now_ns)
            {
                continue;
            }
            let why = if cause == FenceCause::OwnFenceUndrained {
                "it made the change and its own fence did not drain within the bound"
            } else if self.fences.withheld.contains(&(record.instance, record.publication)) {
                "it withheld its acknowledgement: its fence did not drain within the bound"
            } else {
                "it never acknowledged"
            };
            self.context.violation(format!(
                "gateway {} (process {}) was fenced for the reservation change of sequence {} though its storage answered and no notice or acknowledgement was lost: {why}",
                record.gateway, record.instance, record.sequence
            ));
        }
    }

    /// Safety: no write of a host lands after a Preempt and Abort that unregistered
    /// it was answered.
    pub(super) fn check_landings(&mut self) {
        for landing in self.context.store.take_landings() {
            let Some(&host) = self.context.tag_owner.get(&landing.tag) else {
                continue;
            };
            if let Err(problem) = self.context.group.write_landed(host, landing.at_ns) {
                self.context.violation(format!(
                    "{problem} (write tag {} at block {}, through gateway {})",
                    landing.tag, landing.lba, landing.gateway
                ));
            }
        }
    }
}

//! The cluster's reservation authority of a gateway group, as `sluice serve` keeps it
//! in RADOS (`crates/sluice-gateway/src/reservations.rs`): one record per namespace
//! with a sequence; each gateway's [`GatewayAuthority`] hands changes to it; changes
//! are applied one at a time with the target's own rules (`ReservationChange::apply`)
//! after a simulated round trip; an accepted change is notified to every gateway
//! whose watch is registered, each after its own delay, and the command is answered
//! once every one of them acknowledged it, or after a lease, when the silent ones that
//! are still alive are fenced (blocklisted). A gateway acknowledges a notice once it
//! installed it and the writes at storage of the hosts it preempted drained (the world
//! does that: [`Cluster::acknowledge`]); each fence is recorded with its cause
//! ([`FenceRecord`]), so the oracle can tell a gateway rightly fenced from one fenced
//! though it did nothing wrong.
//!
//! A change that preempts a registration also fences every live gateway that neither
//! acknowledged its notice nor was silent (its watch was lost, or registered only
//! after the notify went out): writes it had already sent for the preempted host were
//! not waited for. A gateway whose watch is lost refuses to make changes (the host
//! gets a path error). Both as `sluice serve` does since the simulation found the gap.
//! The gateway that made such a change and whose own notice went unacknowledged (its
//! watch was lost while the change was out, or its own fence did not drain) installs
//! the change itself and waits for its own writes of the preempted hosts before the
//! change is answered ([`GatewayAction::OwnFence`]), fencing itself when they do not
//! drain within the bound: nobody else waits for them.
//!
//! Membership leases: a live gateway process holds one; a dead one's runs out a lease
//! after it died. A gateway that starts while no other holds one finds the whole group
//! was down (the group's power loss): before it loads the record it clears the
//! registrations and reservation if PTPL is off, as `sluice serve` does
//! (`forget_without_persistence`).
//!
//! What can go wrong: a notice may be lost (the gateway does not install it, does not
//! acknowledge, and is fenced), or its acknowledgement (installed, and fenced all the
//! same); notices reach a gateway out of order (its copy keeps the newest sequence);
//! a watch may break (the gateway's copy is marked unknown until the watch is
//! registered again and the record read); the cluster may restart (all watches
//! break, nothing completes meanwhile); a gateway may die with changes in flight
//! (each either reaches the cluster or not).
//!
//! The targets belong to the world, so what the cluster does to them comes back as
//! [`GatewayAction`]s for the world to carry out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use nvme_spec::Status;
use nvme_target::group_reservations::{
    AppliedChange, ChangeTicket, CopyVouch, GroupReservations, GroupUpdate, ReservationChange,
};
use nvme_target::reservation_store::NamespaceKey;
use nvme_target::reservations::HostId;

mod round_trip;

use crate::rng::{Rng, SimClock};
use crate::Canary;

/// How the cluster behaves; drawn from the seed.
#[derive(Clone, Debug)]
pub struct ClusterFaults {
    /// Longest round trip of a change (read, compare, write).
    pub change_latency_max_ns: u64,
    /// Longest delay of a notice to one gateway.
    pub notice_delay_max_ns: u64,
    /// A notice to one gateway, or its acknowledgement (as often), is lost.
    pub lost_notice_per_million: u32,
    /// How long a writer waits for acknowledgements before fencing the silent.
    pub lease_ns: u64,
}

/// What the world must do to a gateway's target.
#[derive(Clone, Debug)]
pub enum GatewayAction {
    /// `install_group_reservations` (the watch vouches for it).
    Install {
        gateway: usize,
        instance: u64,
        update: GroupUpdate,
        /// A notice of this publication (`None`: the record read when the watch was
        /// registered, which nobody waits for): acknowledge it once its fence drained.
        publication: Option<u64>,
        /// The acknowledgement will be lost on its way.
        acknowledgement_lost: bool,
    },
    /// `mark_group_reservations_unknown`: the watch broke.
    MarkUnknown { gateway: usize, instance: u64 },
    /// The gateway was blocklisted: cut it off from the store, mark its copy unknown,
    /// and restart it later (a fenced gateway needs a restart to rejoin).
    Fence { gateway: usize, instance: u64 },
    /// The gateway made the change of `publication`, which preempted a host, and did
    /// not acknowledge its own notice: `Target::install_own_change`, then wait for
    /// the fence it returns (bounded as a notice's) and tell the cluster
    /// ([`Cluster::own_fence_settled`]) before the change is answered.
    OwnFence { gateway: usize, instance: u64, publication: u64, update: GroupUpdate },
}

/// Why the cluster fenced a gateway that did not acknowledge a notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceCause {
    /// The notice never reached it.
    NoticeLost,
    /// Its acknowledgement never reached the writer.
    AcknowledgementLost,
    /// The cluster restarted while the notice was out.
    ClusterRestarted,
    /// The change preempted a registration, and the gateway had no watch to answer
    /// its notice (lost, or registered again only after the notify went out).
    NoWatch,
    /// Nothing was lost: the gateway did not acknowledge in time.
    Silent,
    /// The gateway made the change, did not acknowledge its own notice, and its own
    /// writes of the preempted hosts did not drain within the bound: it fenced itself.
    OwnFenceUndrained,
}

/// One gateway fenced for a publication it did not acknowledge.
#[derive(Clone, Copy, Debug)]
pub struct FenceRecord {
    pub gateway: usize,
    pub instance: u64,
    pub publication: u64,
    /// The record's sequence the publication announced.
    pub sequence: u64,
    pub committed_ns: u64,
    pub cause: FenceCause,
}

/// One change the cluster decided, in commit order.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The gateway process (instance) that handed it over.
    pub instance: u64,
    /// Which of that instance's calls for this host it was (0-based).
    pub call: u64,
    pub host: Option<HostId>,
    /// `None`: the group's power loss cleared a state without PTPL.
    pub change: Option<ReservationChange>,
    pub status: Status,
    /// The record's sequence after it (unchanged when refused).
    pub sequence: u64,
    /// The record's state after it.
    pub update: GroupUpdate,
}

struct Request {
    gateway: usize,
    instance: u64,
    call: u64,
    change: ReservationChange,
    done: ChangeTicket,
    ready_at_ns: u64,
}

struct Publication {
    /// The command waiting for it (none for a power loss's clearing).
    done: Option<ChangeTicket>,
    answer: AppliedChange,
    /// Gateways (with their instance) that have not acknowledged.
    waiting: BTreeSet<(usize, u64)>,
    committed_ns: u64,
    deadline_ns: u64,
    /// Gateways whose notice or acknowledgement was lost.
    lost: BTreeMap<(usize, u64), FenceCause>,
    /// The cluster restarted while it was out.
    restarted: bool,
    /// Watchers that acknowledged.
    acknowledged: BTreeSet<(usize, u64)>,
    /// The gateway (and its process) that made the change (none for a power loss's
    /// clearing).
    notifier: Option<(usize, u64)>,
    /// The change preempted a registration: gateways without a watch are fenced.
    preempts: bool,
    /// The notify is over (the silent and those without a watch were fenced) and the
    /// notifier waits for its own fence ([`GatewayAction::OwnFence`]).
    awaiting_own_fence: bool,
    /// When the notify ended having fenced other gateways, or with live gateways that
    /// did not answer it at all (fenced before, or their watch lost): their copies
    /// may answer from themselves until their vouch runs out, so the change is
    /// answered only [`fenced_answer_delay_ns`] after it.
    vouch_wait_from_ns: Option<u64>,
    /// Everything is settled: the change is answered at this time.
    answer_at_ns: Option<u64>,
}

/// How long one successful round trip to the cluster vouches for a gateway's copy
/// (`sluice serve`'s `copy_vouch_bound`: a quarter of the notify timeout, the lease).
pub fn copy_vouch_bound_ns(lease_ns: u64) -> u64 {
    lease_ns / 4
}

/// How long after fencing another gateway a change is answered (`sluice serve`'s
/// `fenced_answer_delay`): the vouch's bound, plus the time for the store to learn of
/// the blocklist (the simulated store learns at once; 1 ms stands for it).
pub fn fenced_answer_delay_ns(lease_ns: u64) -> u64 {
    copy_vouch_bound_ns(lease_ns) + 1_000_000
}

struct Delivery {
    gateway: usize,
    instance: u64,
    update: GroupUpdate,
    at_ns: u64,
    /// The registration of the watch it was sent to.
    epoch: u64,
    loss: Loss,
    /// The publication it acknowledges (none for a load after a watch is registered).
    publication: Option<u64>,
}

/// What of a notice's round trip is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    Nothing,
    /// The gateway never sees it.
    Notice,
    /// The gateway installs it, but the writer never hears back.
    Acknowledgement,
}

#[derive(Clone, Copy, Default)]
struct Watch {
    /// The live process of this gateway.
    instance: Option<u64>,
    registered: bool,
    /// When a broken watch is registered again (and the record read).
    register_at_ns: Option<u64>,
    /// Counts the watch's registrations: a notice sent to one never reaches the next.
    epoch: u64,
    /// Started after the whole group was down: clear a state without PTPL first, if
    /// the watch is registered before this time (`sluice serve` clears only while it
    /// starts: within a lease).
    forget_until_ns: Option<u64>,
}

struct ClusterState {
    record: GroupUpdate,
    requests: Vec<Request>,
    publications: BTreeMap<u64, Publication>,
    next_publication: u64,
    deliveries: Vec<Delivery>,
    watches: Vec<Watch>,
    fenced: Vec<bool>,
    paused_until_ns: u64,
    rng: Rng,
    faults: ClusterFaults,
    /// `missed-notice`: a gateway that misses a notice (lost, or its watch broke)
    /// acknowledges as if installed and keeps serving from its old copy.
    canary_missed_notice: bool,
    /// `no-copy-vouch`: a change is answered right after it fenced a gateway (no
    /// wait for the fenced gateway's vouch to run out, there being none).
    canary_no_copy_vouch: bool,
    commits: Vec<Commit>,
    /// Changes each (instance, host) handed over so far.
    calls: BTreeMap<(u64, HostId), u64>,
    actions: Vec<GatewayAction>,
    fences: u64,
    lost_notices: u64,
    /// Fences since the world last took them.
    fence_records: Vec<FenceRecord>,
    /// When each gateway's membership lease runs out (u64::MAX while its process
    /// lives, 0 before it ever started).
    leases: Vec<u64>,
    /// States without PTPL cleared after the group's power loss.
    power_loss_clears: u64,
    /// Gateway processes that cleared what PTPL does not keep before they loaded.
    forgot: BTreeSet<u64>,
}

/// The cluster's reservation record of the group's one namespace.
pub struct Cluster {
    clock: SimClock,
    state: Mutex<ClusterState>,
}

/// The host a change is made for (`None` for Set Features' PTPL).
pub fn host_of(change: &ReservationChange) -> Option<HostId> {
    match *change {
        ReservationChange::Register { host, .. }
        | ReservationChange::Acquire { host, .. }
        | ReservationChange::Release { host, .. } => Some(host),
        ReservationChange::SetPersistence { .. } => None,
    }
}

impl Cluster {
    pub fn new(
        gateways: usize,
        clock: SimClock,
        rng: Rng,
        faults: ClusterFaults,
        canary: Option<Canary>,
    ) -> Arc<Cluster> {
        Arc::new(Cluster {
            clock,
            state: Mutex::new(ClusterState {
                record: GroupUpdate::default(),
                requests: Vec::new(),
                publications: BTreeMap::new(),
                next_publication: 0,
                deliveries: Vec::new(),
                watches: vec![Watch::default(); gateways],
                fenced: vec![false; gateways],
                paused_until_ns: 0,
                rng,
                faults,
                canary_missed_notice: canary == Some(Canary::SkipCheckAfterMissedNotice),
                canary_no_copy_vouch: canary == Some(Canary::NoCopyVouch),
                commits: Vec::new(),
                calls: BTreeMap::new(),
                actions: Vec::new(),
                fences: 0,
                lost_notices: 0,
                fence_records: Vec::new(),
                leases: vec![0; gateways],
                power_loss_clears: 0,
                forgot: BTreeSet::new(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The authority gateway `gateway`'s process `instance` gives its target.
    /// `vouch` bounds its copies in time (renewed by the world while its round trips
    /// succeed); `None` for the `no-copy-vouch` canary.
    pub fn authority_for(
        self: &Arc<Self>,
        gateway: usize,
        instance: u64,
        vouch: Option<Arc<CopyVouch>>,
    ) -> GatewayAuthority {
        GatewayAuthority { cluster: Arc::clone(self), gateway, instance, vouch }
    }

    /// A gateway process starts: a new cluster client (not blocklisted) taking its
    /// membership lease, its watch registered, then the record read and installed
    /// after a delay. True when no other gateway held its lease: the whole group was
    /// down, so a state without PTPL is cleared first.
    pub fn gateway_started(&self, gateway: usize, instance: u64) -> bool {
        let now_ns = self.clock.elapsed_ns();
        let mut state = self.state();
        let whole_group_was_down =
            state.leases.iter().enumerate().all(|(other, &until)| other == gateway || until <= now_ns);
        state.leases[gateway] = u64::MAX;
        state.fenced[gateway] = false;
        let epoch = state.watches[gateway].epoch;
        state.watches[gateway] = Watch {
            instance: Some(instance),
            registered: false,
            register_at_ns: Some(now_ns),
            epoch,
            forget_until_ns: whole_group_was_down.then_some(now_ns + state.faults.lease_ns),
        };
        whole_group_was_down
    }

    /// A gateway process died: its changes in flight each reached the cluster or not.
    /// Writers already waiting for its acknowledgement wait out their lease (its watch
    /// lingers on the OSD) without fencing it; later changes do not wait for it.
    pub fn gateway_crashed(&self, gateway: usize) {
        let now_ns = self.clock.elapsed_ns();
        let mut state = self.state();
        let state = &mut *state;
        state.watches[gateway] = Watch { epoch: state.watches[gateway].epoch, ..Watch::default() };
        // A change whose notifier died waiting for its own fence is never answered
        // (the host's command goes with the process).
        state.publications.retain(|_, publication| {
            !((publication.awaiting_own_fence || publication.answer_at_ns.is_some())
                && publication.notifier.is_some_and(|(notifier, _)| notifier == gateway))
        });
        state.leases[gateway] = now_ns + state.faults.lease_ns;
        let requests = std::mem::take(&mut state.requests);
        for request in requests {
            if request.gateway != gateway || state.rng.chance(500_000) {
                state.requests.push(request);
            }
        }
    }

    /// The gateway's watch breaks (timed out, connection dropped): its copy is unknown
    /// until the watch is registered again, after `again_ns`.
    pub fn break_watch(&self, gateway: usize, again_ns: u64) {
        let now_ns = self.clock.elapsed_ns();
        let mut state = self.state();
        let state = &mut *state;
        let Some(instance) = state.watches[gateway].instance else {
            return;
        };
        if state.fenced[gateway] {
            return;
        }
        state.watches[gateway].registered = false;
        state.watches[gateway].register_at_ns = Some(now_ns + again_ns);
        // Notifies no longer wait for a watch that is gone.
        for publication in state.publications.values_mut() {
            publication.waiting.remove(&(gateway, instance));
        }
        if !state.canary_missed_notice {
            state.actions.push(GatewayAction::MarkUnknown { gateway, instance });
        }
    }

    /// The cluster restarts: nothing is answered until `until_ns`, and every watch
    /// breaks, to be registered again after it.
    pub fn restart(&self, until_ns: u64) {
        let now_ns = self.clock.elapsed_ns();
        let gateways = {
            let mut state = self.state();
            state.paused_until_ns = state.paused_until_ns.max(until_ns);
            for publication in state.publications.values_mut() {
                publication.restarted = true;
            }
            state.watches.len()
        };
        for gateway in 0..gateways {
            self.break_watch(gateway, until_ns.saturating_sub(now_ns) + 1);
        }
    }

    /// Changes decided since the last call, in commit order.
    pub fn take_commits(&self) -> Vec<Commit> {
        std::mem::take(&mut self.state().commits)
    }

    /// How many changes `instance` handed over for `host` so far.
    pub fn calls(&self, instance: u64, host: HostId) -> u64 {
        self.state().calls.get(&(instance, host)).copied().unwrap_or(0)
    }

    /// The record's current sequence.
    pub fn sequence(&self) -> u64 {
        self.state().record.sequence
    }

    /// Fences and lost notices so far, for the summary.
    pub fn counters(&self) -> (u64, u64) {
        let state = self.state();
        (state.fences, state.lost_notices)
    }

    /// True (once) when process `instance` found the group down as a whole and cleared
    /// what PTPL does not keep right before it loaded the record.
    pub fn take_forgot(&self, instance: u64) -> bool {
        self.state().forgot.remove(&instance)
    }

    /// States cleared after the group's power loss, for the summary.
    pub fn power_loss_clears(&self) -> u64 {
        self.state().power_loss_clears
    }

    /// Fences since the last call, with their causes.
    pub fn take_fences(&self) -> Vec<FenceRecord> {
        std::mem::take(&mut self.state().fence_records)
    }

    /// Gateway `gateway`'s process `instance` acknowledges `publication` (it
    /// installed the notice and the writes it fences drained). Nothing if the
    /// publication was answered meanwhile or no longer waits for it.
    pub fn acknowledge(&self, publication: u64, gateway: usize, instance: u64) {
        let mut state = self.state();
        if state.fenced[gateway] {
            return;
        }
        if let Some(publication) = state.publications.get_mut(&publication) {
            if publication.waiting.remove(&(gateway, instance)) {
                publication.acknowledged.insert((gateway, instance));
            }
        }
    }

    /// Gateway `gateway`'s process `instance`, which made the change of `publication`,
    /// waited for its own fence ([`GatewayAction::OwnFence`]): when the writes did not
    /// drain within the bound it is fenced (it blocklists itself); then the change is
    /// answered.
    pub fn own_fence_settled(&self, publication: u64, gateway: usize, instance: u64, drained: bool) {
        let mut state = self.state();
        let state = &mut *state;
        let Some(waiting) = state.publications.get(&publication) else {
            return;
        };
        if !waiting.awaiting_own_fence || waiting.notifier != Some((gateway, instance)) {
            return;
        }
        let Some(mut settled) = state.publications.remove(&publication) else {
            return;
        };
        if !drained && !state.fenced[gateway] && state.watches[gateway].instance == Some(instance) {
            state.fence_records.push(FenceRecord {
                gateway,
                instance,
                publication,
                sequence: settled.answer.update.sequence,
                committed_ns: settled.committed_ns,
                cause: FenceCause::OwnFenceUndrained,
            });
            state.fence(gateway, instance);
        }
        settled.awaiting_own_fence = false;
        let now_ns = self.clock.elapsed_ns();
        state.answer_or_delay(now_ns, publication, settled);
    }

    /// True when gateway `gateway`'s process `instance` completes a round trip to the
    /// cluster now (not fenced, the cluster not restarting): what renews the vouch
    /// for its copy (`sluice serve`'s `copy_vouch` thread).
    pub fn round_trip_succeeds(&self, gateway: usize, instance: u64) -> bool {
        let now_ns = self.clock.elapsed_ns();
        let state = self.state();
        now_ns >= state.paused_until_ns && !state.fenced[gateway] && state.watches[gateway].instance == Some(instance)
    }

    /// The earliest time the cluster has something to do.
    pub fn next_event_ns(&self) -> Option<u64> {
        let state = self.state();
        let paused = state.paused_until_ns;
        state
            .requests
            .iter()
            .map(|request| request.ready_at_ns)
            .chain(state.deliveries.iter().map(|delivery| delivery.at_ns))
            .chain(state.publications.values().filter_map(|publication| {
                if let Some(at_ns) = publication.answer_at_ns {
                    Some(at_ns)
                } else if publication.awaiting_own_fence {
                    None
                } else if publication.waiting.is_empty() {
                    Some(0)
                } else {
                    Some(publication.deadline_ns)
                }
            }))
            .chain(state.watches.iter().filter_map(|watch| watch.register_at_ns))
            .map(|at| at.max(paused))
            .min()
    }

    /// Everything due now; returns what the world must do to the targets.
    pub fn step(&self) -> Vec<GatewayAction> {
        let now_ns = self.clock.elapsed_ns();
        let mut state = self.state();
        let state = &mut *state;
        if now_ns >= state.paused_until_ns {
            state.register_watches(now_ns);
            state.apply_requests(now_ns);
            state.deliver(now_ns);
            state.answer(now_ns);
        }
        std::mem::take(&mut state.actions)
    }
}

/// What one gateway process's target holds: hands its changes to the cluster.
pub struct GatewayAuthority {
    cluster: Arc<Cluster>,
    gateway: usize,
    instance: u64,
    vouch: Option<Arc<CopyVouch>>,
}

impl GroupReservations for GatewayAuthority {
    fn copy_vouch(&self) -> Option<Arc<CopyVouch>> {
        self.vouch.clone()
    }

    fn track(&self, _key: NamespaceKey) {
        // The group has one namespace, loaded when the gateway starts
        // (`Cluster::gateway_started`).
    }

    fn apply(&self, _key: NamespaceKey, change: ReservationChange, done: ChangeTicket) {
        let now_ns = self.cluster.clock.elapsed_ns();
        let mut state = self.cluster.state();
        let watch = state.watches[self.gateway];
        if !watch.registered || watch.instance != Some(self.instance) {
            // Its own notice is what fences this gateway's writes of a host the
            // change preempts: without a watch it would answer without that wait.
            drop(state);
            done.finish(Err("this gateway's watch on the record is lost".into()));
            return;
        }
        let host = host_of(&change).unwrap_or_default();
        let calls = state.calls.entry((self.instance, host)).or_insert(0);
        let call = *calls;
        *calls += 1;
        let longest = state.faults.change_latency_max_ns;
        let latency = state.rng.between(50_000, longest);
        state.requests.push(Request {
            gateway: self.gateway,
            instance: self.instance,
            call,
            change,
            done,
            ready_at_ns: now_ns + latency,
        });
    }
}

//! Who owns which ANA group, decided through the cluster.
//!
//! On the group's RADOS object (`sluice.gateway.<group>`):
//! - lock `member.<name>`: held, with a duration, by each live gateway; its expiry is
//!   how the others learn that a gateway died or was cut off;
//! - lock `ana-group.<id>`: held by the group's owner, which reports it optimized;
//! - attribute `owner.ana-group.<id>`: "<gateway> <client address>" of the owner that
//!   took the group, kept after its lock expires so the next owner knows whom to fence.
//!
//! Every quarter lease, [`Coordinator::step`] renews what this gateway holds and takes
//! groups nobody holds: the preferred gateway at once, another only when the preferred
//! one is not alive or the group stayed ownerless for a whole lease. A takeover fences
//! the previous owner first (Ceph blocklist: nothing it still sends lands), then
//! records itself and turns the group optimized. A voluntary handover (failback) clears
//! the owner record first, so the preferred gateway takes over without fencing anyone.
//! A gateway that cannot renew for a whole lease reports every group inaccessible; a
//! gateway that finds itself blocklisted reports them inaccessible too, and the
//! service rejoins it with a new cluster client (`service::rejoin`).
//!
//! Where a group should be served comes from the placement record (`placement`):
//! drains and balancing moves assign groups to members; each round the owner of a
//! group that should be elsewhere hands it over the same way (ANA change, the hand-over
//! noted in `released.ana-group.<id>` for the timeline, record cleared, lock released,
//! non-optimized), and the member it should go to takes it at its next round. The
//! taker records the change's timeline ([`crate::timeline`]).

use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use nvme_spec::ana::{AnaGroupId, AnaState};
use runtime::{Locker, RadosErrno};

use crate::load::GroupTotals;
use crate::placement::{desired_owner, Members, MoveKind, PlacementRecord, PLACEMENT_ATTRIBUTE};
use crate::timeline::{unix_ms, ChangeKind, ChangeStart, ControllerPath, Timelines};

/// How long a fenced gateway's client stays blocklisted: longer than any request of
/// it could still be in flight, short enough not to pile up entries.
pub const FENCE_DURATION: Duration = Duration::from_secs(3600);

/// The cluster operations the coordinator needs (a RADOS object, or a fake in tests).
pub trait LeaseStore {
    fn lock(&self, name: &str, cookie: &str, description: &str, duration: Duration) -> Result<(), RadosErrno>;
    fn unlock(&self, name: &str, cookie: &str) -> Result<(), RadosErrno>;
    fn lockers(&self, name: &str) -> Result<Vec<Locker>, RadosErrno>;
    fn attribute(&self, name: &str) -> Result<Option<Vec<u8>>, RadosErrno>;
    fn set_attribute(&self, name: &str, value: &[u8]) -> Result<(), RadosErrno>;
    fn blocklist(&self, address: &str, expire: Duration) -> Result<(), RadosErrno>;
    /// After `address` was blocklisted: frees the RBD exclusive locks its client still
    /// holds on `images` (shared names, "rbd:POOL/IMAGE": those of the group taken
    /// over), so the first write of each after the takeover needs no lock break of
    /// librbd's (a monitor round per image); returns how many were freed.
    fn break_image_locks_of(&self, address: &str, images: &[String]) -> Result<usize, String>;
}

/// Where ANA states go (the target), so tests can watch them.
pub trait AnaSink {
    fn set_ana_state(&self, group: AnaGroupId, state: AnaState) -> bool;
    /// The shared names of the images behind ANA group `group`'s namespaces.
    fn images_in(&self, group: AnaGroupId) -> Vec<String>;
    /// Commands and bytes the namespaces of `group` served so far.
    fn group_totals(&self, group: AnaGroupId) -> GroupTotals {
        let _ = group;
        GroupTotals::default()
    }
    /// What each host controller saw of the ANA changes (path timelines).
    fn path_events(&self) -> Vec<ControllerPath> {
        Vec::new()
    }
}

impl AnaSink for nvme_target::Target {
    fn set_ana_state(&self, group: AnaGroupId, state: AnaState) -> bool {
        nvme_target::Target::set_ana_state(self, group, state)
    }
    fn images_in(&self, group: AnaGroupId) -> Vec<String> {
        let mut images = Vec::new();
        for subsystem in self.subsystems() {
            let table = subsystem.table();
            let in_group = table.entries().filter(|entry| entry.namespace.ana_group == group);
            images.extend(in_group.filter_map(|entry| entry.namespace.backend.shared_name()));
        }
        images
    }
    fn group_totals(&self, group: AnaGroupId) -> GroupTotals {
        let mut totals = GroupTotals::default();
        for subsystem in self.subsystems() {
            let table = subsystem.table();
            for entry in table.entries().filter(|entry| entry.namespace.ana_group == group) {
                let stats = entry.namespace.stats.snapshot();
                totals.commands += stats.read_commands + stats.write_commands + stats.other_commands;
                totals.bytes += stats.bytes_read + stats.bytes_written;
            }
        }
        totals
    }
    fn path_events(&self) -> Vec<ControllerPath> {
        let mut paths = Vec::new();
        for subsystem in self.subsystems() {
            for controller in self.controllers_of(subsystem.index) {
                paths.push(ControllerPath {
                    controller_id: controller.id.0,
                    host_nqn: controller.host_nqn.clone(),
                    events: controller.path_watch.snapshot(),
                });
            }
        }
        paths
    }
}

/// The attribute an owner writes when it hands a group over: what the taker needs for
/// the change's timeline.
pub fn released_attribute(group: AnaGroupId) -> String {
    format!("released.ana-group.{}", group.0)
}

/// The hand-over note (`released.ana-group.<id>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandOver {
    pub from: String,
    pub to: String,
    pub kind: ChangeKind,
    pub reason: String,
    /// When the move was decided (Unix ms).
    pub decided_unix_ms: u64,
    /// When the group was released (Unix ms).
    pub released_unix_ms: u64,
}

/// The life of this gateway in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Renewing its leases; groups are optimized or non-optimized.
    Serving,
    /// No renewal for a whole lease: every group inaccessible until the cluster answers.
    ClusterLost,
    /// Blocklisted by another gateway: every group inaccessible until the service has
    /// rejoined with a new cluster client.
    Fenced,
}

/// What this gateway knows about one ANA group.
#[derive(Clone, Debug)]
pub struct GroupView {
    pub id: AnaGroupId,
    pub preferred: String,
    /// The state this gateway reports.
    pub state: AnaState,
    /// This gateway holds the group's lock.
    pub owned: bool,
    /// The owner as the cluster shows it ("" when none).
    pub owner: String,
    /// The member that should own it by the placement record ("" when none is alive).
    pub desired: String,
    /// Since when no gateway holds the group.
    ownerless_since: Option<Instant>,
}

impl GroupView {
    /// A group just coordinated: inaccessible here until its lease is decided.
    fn new(id: AnaGroupId, preferred: &str, sink: &dyn AnaSink) -> GroupView {
        sink.set_ana_state(id, AnaState::Inaccessible);
        GroupView {
            id,
            preferred: preferred.to_string(),
            state: AnaState::Inaccessible,
            owned: false,
            owner: String::new(),
            desired: String::new(),
            ownerless_since: None,
        }
    }
}

/// Counters for the metrics endpoint and status.
#[derive(Clone, Debug, Default)]
pub struct GatewayCounters {
    /// Groups this gateway took.
    pub takeovers: u64,
    /// Groups it gave up or lost.
    pub releases: u64,
    /// Gateways it fenced.
    pub fenced_peers: u64,
    /// Time from noticing a group ownerless to serving it optimized, last takeover.
    pub last_takeover_ms: Option<u64>,
    /// Times this gateway came back after being fenced, without a restart.
    pub rejoins: u64,
    /// Groups it handed over to another member (drain, balancing, failback, stop).
    pub handovers: u64,
}

/// The settings the coordinator runs with.
#[derive(Clone, Debug)]
pub struct CoordinatorSettings {
    pub name: String,
    /// Unique per process: "<name>@<client id>". A restarted gateway never renews its
    /// previous life's locks.
    pub cookie: String,
    /// This process's cluster client address (what a peer blocklists).
    pub address: String,
    /// The gateway names of the group, this one included.
    pub members: Vec<String>,
    /// ANA groups served, with their preferred owners.
    pub groups: Vec<(AnaGroupId, String)>,
    pub lease: Duration,
    pub failback: bool,
}

pub struct Coordinator<S> {
    store: S,
    settings: CoordinatorSettings,
    pub phase: Phase,
    pub groups: Vec<GroupView>,
    /// Gateways whose membership lock is held, as of the last step.
    pub alive: Vec<String>,
    last_renewal: Option<Instant>,
    pub counters: GatewayCounters,
    /// The placement record as of the last round.
    pub placement: PlacementRecord,
    /// The path changes this gateway made as the new owner.
    pub timelines: Timelines,
    /// The ownership simulation's canary: a hand-over that releases the group without
    /// leaving the optimized state first (the bug its oracle must catch).
    #[cfg(test)]
    pub canary_skip_change: bool,
}

pub fn member_lock(name: &str) -> String {
    format!("member.{name}")
}
pub fn group_lock(group: AnaGroupId) -> String {
    format!("ana-group.{}", group.0)
}
pub fn owner_attribute(group: AnaGroupId) -> String {
    format!("owner.ana-group.{}", group.0)
}

impl<S: LeaseStore> Coordinator<S> {
    /// A coordinator whose groups start inaccessible (nothing is known yet). Every
    /// other ANA group is reported inaccessible too: a namespace a reload later puts
    /// in a group nobody coordinates must not be optimized on every gateway at once
    /// (the target's own default, right for a lone target); [`Coordinator::add_group`]
    /// brings such a group under the leases.
    pub fn new(store: S, settings: CoordinatorSettings, sink: &dyn AnaSink) -> Coordinator<S> {
        for id in 1..=nvme_target::limits::MAX_ANA_GROUP_ID {
            if !settings.groups.iter().any(|(group, _)| group.0 == id) {
                sink.set_ana_state(AnaGroupId(id), AnaState::Inaccessible);
            }
        }
        let groups = settings.groups.iter().map(|(id, preferred)| GroupView::new(*id, preferred, sink)).collect();
        Coordinator {
            store,
            settings,
            phase: Phase::Serving,
            groups,
            alive: Vec::new(),
            last_renewal: None,
            counters: GatewayCounters::default(),
            placement: PlacementRecord::default(),
            timelines: Timelines::default(),
            #[cfg(test)]
            canary_skip_change: false,
        }
    }

    /// Coordinates `group` from the next round (a reload served a namespace in a group
    /// none had at the start): inaccessible until its lease is decided, as at start.
    /// Returns false when it is coordinated already.
    pub fn add_group(&mut self, group: AnaGroupId, preferred: &str, sink: &dyn AnaSink) -> bool {
        if self.groups.iter().any(|view| view.id == group) {
            return false;
        }
        self.groups.push(GroupView::new(group, preferred, sink));
        self.settings.groups.push((group, preferred.to_string()));
        tracing::info!(ana_group = group.0, preferred, "a namespace was added in a new ANA group; coordinating it");
        true
    }

    pub fn settings(&self) -> &CoordinatorSettings {
        &self.settings
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// How often `step` should run.
    pub fn interval(&self) -> Duration {
        self.settings.lease / 4
    }

    /// Takes this gateway's membership lock, waiting up to one lease for a previous
    /// life's lock to expire. Refuses when another live process uses the same name.
    pub fn join(&mut self, now: impl Fn() -> Instant, sleep: impl Fn(Duration)) -> Result<(), String> {
        let start = now();
        loop {
            match self.renew_membership() {
                Ok(()) => {
                    self.last_renewal = Some(now());
                    return Ok(());
                }
                Err(errno)
                    if errno.is_busy() && now().duration_since(start) < self.settings.lease + self.interval() =>
                {
                    sleep(self.interval() / 2);
                }
                Err(errno) if errno.is_busy() => {
                    let holder = self.store.lockers(&member_lock(&self.settings.name)).ok().and_then(|mut l| l.pop());
                    return Err(format!(
                        "another live process holds gateway name {:?} in this group ({}); give each gateway its own [gateway] name",
                        self.settings.name,
                        holder.map_or_else(|| "unknown client".to_string(), |locker| format!("{} at {}", locker.client, locker.address))
                    ));
                }
                Err(errno) => return Err(format!("cannot take the gateway's membership lease: {errno}")),
            }
        }
    }

    fn renew_membership(&self) -> Result<(), RadosErrno> {
        let description = format!("sluice gateway {} {}", self.settings.name, self.settings.address);
        self.store.lock(&member_lock(&self.settings.name), &self.settings.cookie, &description, self.settings.lease)
    }

    fn report(&mut self, index: usize, state: AnaState, sink: &dyn AnaSink) {
        let group = &mut self.groups[index];
        if group.state != state {
            tracing::info!(ana_group = group.id.0, from = group.state.name(), to = state.name(), "ANA state changed");
        }
        group.state = state;
        sink.set_ana_state(group.id, state);
    }

    fn all_inaccessible(&mut self, sink: &dyn AnaSink) {
        for index in 0..self.groups.len() {
            if self.groups[index].owned {
                self.counters.releases += 1;
            }
            self.groups[index].owned = false;
            self.report(index, AnaState::Inaccessible, sink);
        }
    }

    /// One round: renew, watch peers, take or give back groups.
    pub fn step(&mut self, now: Instant, sink: &dyn AnaSink) {
        if self.phase == Phase::Fenced {
            return;
        }
        match self.renew_membership() {
            Ok(()) => {
                if self.phase == Phase::ClusterLost {
                    tracing::warn!("the cluster answers again: serving the gateway group");
                }
                self.phase = Phase::Serving;
                self.last_renewal = Some(now);
            }
            Err(errno) if errno.is_blocklisted() => return self.fenced(sink),
            Err(errno) => {
                let lost = self.last_renewal.is_none_or(|last| now.duration_since(last) >= self.settings.lease);
                if lost && self.phase != Phase::ClusterLost {
                    tracing::error!(%errno, "no lease renewal for a whole lease: reporting every ANA group inaccessible");
                    self.phase = Phase::ClusterLost;
                    self.all_inaccessible(sink);
                }
                return;
            }
        }
        let mut alive = Vec::with_capacity(self.settings.members.len());
        for member in &self.settings.members {
            match self.store.lockers(&member_lock(member)) {
                Ok(lockers) if !lockers.is_empty() => alive.push(member.clone()),
                Ok(_) => {}
                // Unknown is not dead: decide nothing this round.
                Err(errno) if errno.is_blocklisted() => return self.fenced(sink),
                Err(_) => return,
            }
        }
        self.alive = alive;
        match self
            .store
            .attribute(PLACEMENT_ATTRIBUTE)
            .map_err(|errno| errno.to_string())
            .and_then(|bytes| PlacementRecord::parse(bytes.as_deref()))
        {
            Ok(record) => self.placement = record,
            // Keep the last record read: a move waits a round rather than misfire.
            Err(error) => tracing::warn!(%error, "cannot read the group's placement record; keeping the last one read"),
        }
        for index in 0..self.groups.len() {
            let desired = self.desired_owner(index).unwrap_or_default().to_string();
            self.groups[index].desired = desired;
        }
        for index in 0..self.groups.len() {
            if let Err(errno) = self.step_group(index, now, sink) {
                if errno.is_blocklisted() {
                    return self.fenced(sink);
                }
                tracing::warn!(ana_group = self.groups[index].id.0, %errno, "cluster request failed; retrying next round");
            }
        }
        let open = self.timelines.open_groups();
        if !open.is_empty() {
            let paths = sink.path_events();
            for group in open {
                self.timelines.update(group, &paths, Instant::now());
            }
        }
    }

    /// The member that should own group `index` now (see `placement::desired_owner`).
    pub fn desired_owner(&self, index: usize) -> Option<&str> {
        let group = &self.groups[index];
        let members = Members { all: &self.settings.members, alive: &self.alive };
        desired_owner(group.id, &group.preferred, &group.owner, self.settings.failback, &self.placement, &members)
    }

    /// True when the placement record drains this gateway.
    pub fn drained(&self) -> bool {
        self.placement.is_drained(&self.settings.name)
    }

    /// Why group `index`, owned here, goes to `desired` (another member) now.
    fn hand_over_reason(&self, index: usize, desired: &str) -> (ChangeKind, String, u64) {
        let group = &self.groups[index];
        let now_ms = unix_ms(SystemTime::now());
        if let Some(assignment) = self.placement.assignment(group.id).filter(|assignment| assignment.gateway == desired)
        {
            let kind = match assignment.kind {
                MoveKind::Drain => ChangeKind::Drain,
                MoveKind::Rebalance => ChangeKind::Rebalance,
                MoveKind::Operator => ChangeKind::Move,
            };
            return (kind, assignment.reason.clone(), assignment.decided_unix_ms);
        }
        if self.drained() {
            return (ChangeKind::Drain, format!("{} is drained", self.settings.name), now_ms);
        }
        if desired == group.preferred {
            return (ChangeKind::Failback, format!("{desired} is its preferred member and up again"), now_ms);
        }
        (ChangeKind::Rebalance, format!("the placement rule names {desired}"), now_ms)
    }

    fn fenced(&mut self, sink: &dyn AnaSink) {
        if self.phase != Phase::Fenced {
            tracing::error!(
                "this gateway was fenced (its cluster client is blocklisted): another gateway took its ANA groups; \
                 every group is inaccessible here until it has rejoined with a new cluster client"
            );
        }
        self.phase = Phase::Fenced;
        self.all_inaccessible(sink);
    }

    fn step_group(&mut self, index: usize, now: Instant, sink: &dyn AnaSink) -> Result<(), RadosErrno> {
        let id = self.groups[index].id;
        let lock = group_lock(id);
        if self.groups[index].owned {
            return match self.store.lock(&lock, &self.settings.cookie, "owner", self.settings.lease) {
                Ok(()) => {
                    let desired = self.groups[index].desired.clone();
                    let reason = (!desired.is_empty() && desired != self.settings.name)
                        .then(|| self.hand_over_reason(index, &desired));
                    if let Some((kind, reason, decided_unix_ms)) = reason {
                        self.hand_over(index, &desired, kind, &reason, decided_unix_ms, sink)
                    } else {
                        self.groups[index].owner = self.settings.name.clone();
                        self.report(index, AnaState::Optimized, sink);
                        Ok(())
                    }
                }
                Err(errno) if errno.is_busy() => {
                    tracing::warn!(
                        ana_group = id.0,
                        "another gateway holds this ANA group now; serving it non-optimized"
                    );
                    self.groups[index].owned = false;
                    self.counters.releases += 1;
                    self.report(index, AnaState::NonOptimized, sink);
                    Ok(())
                }
                Err(errno) => Err(errno),
            };
        }
        let holders = self.store.lockers(&lock)?;
        if holders.first().is_some_and(|holder| holder.cookie == self.settings.cookie) {
            // Ours, though not counted as owned: a takeover that failed half-way (its
            // fence or owner record) and could not unlock then. Let it go, so the
            // group is taken again the whole way, fence and record included.
            tracing::warn!(ana_group = id.0, "releasing a lock of this gateway on an ANA group it does not serve");
            self.store.unlock(&lock, &self.settings.cookie)?;
            self.report(index, AnaState::NonOptimized, sink);
            return Ok(());
        }
        if let Some(holder) = holders.first() {
            self.groups[index].owner = holder.cookie.split('@').next().unwrap_or_default().to_string();
            self.groups[index].ownerless_since = None;
            self.report(index, AnaState::NonOptimized, sink);
            return Ok(());
        }
        let since = *self.groups[index].ownerless_since.get_or_insert(now);
        self.groups[index].owner.clear();
        let desired = &self.groups[index].desired;
        // The lease rule (a desired owner that does not take the group) never makes a
        // drained gateway serve while another could.
        let take = *desired == self.settings.name
            || desired.is_empty()
            || (now.duration_since(since) >= self.settings.lease && !self.drained());
        if take {
            self.take_over(index, since, now, sink)
        } else {
            self.report(index, AnaState::NonOptimized, sink);
            Ok(())
        }
    }

    /// Takes an ownerless group: lock, Change, fence the previous owner, record, optimized.
    fn take_over(&mut self, index: usize, since: Instant, now: Instant, sink: &dyn AnaSink) -> Result<(), RadosErrno> {
        let id = self.groups[index].id;
        let lock = group_lock(id);
        match self.store.lock(&lock, &self.settings.cookie, "owner", self.settings.lease) {
            Ok(()) => {}
            Err(errno) if errno.is_busy() => {
                self.report(index, AnaState::NonOptimized, sink);
                return Ok(());
            }
            Err(errno) => return Err(errno),
        }
        self.report(index, AnaState::Change, sink);
        let hand_over = self.take_hand_over_note(id);
        let previous_owner = self.previous_owner_name(id);
        let fenced = match self.fence_previous_owner(id, sink) {
            Ok(fenced) => fenced,
            Err(errno) => {
                // Never serve without fencing: give the group back and retry.
                tracing::warn!(ana_group = id.0, %errno, "cannot fence the previous owner; not taking the group yet");
                let _ = self.store.unlock(&lock, &self.settings.cookie);
                self.report(index, AnaState::NonOptimized, sink);
                return Err(errno);
            }
        };
        let record = format!("{} {}", self.settings.name, self.settings.address);
        if let Err(errno) = self.store.set_attribute(&owner_attribute(id), record.as_bytes()) {
            let _ = self.store.unlock(&lock, &self.settings.cookie);
            self.report(index, AnaState::NonOptimized, sink);
            return Err(errno);
        }
        let group = &mut self.groups[index];
        group.owned = true;
        group.owner = self.settings.name.clone();
        group.ownerless_since = None;
        self.counters.takeovers += 1;
        let waited_ms = now.duration_since(since).as_millis() as u64;
        self.counters.last_takeover_ms = Some(waited_ms);
        tracing::info!(
            ana_group = id.0,
            fenced = fenced.as_deref().unwrap_or("nobody"),
            ownerless_ms = waited_ms,
            "took ANA group ownership"
        );
        // Before the state change: the controllers' first commands count from it.
        let optimized_at = Instant::now();
        self.report(index, AnaState::Optimized, sink);
        let now_unix_ms = unix_ms(SystemTime::now());
        let start = match hand_over {
            Some(note) => ChangeStart {
                ana_group: id,
                kind: note.kind,
                from: note.from,
                to: self.settings.name.clone(),
                reason: note.reason,
                started_unix_ms: note.decided_unix_ms.min(note.released_unix_ms),
                released_unix_ms: Some(note.released_unix_ms),
                fenced_unix_ms: None,
            },
            None => ChangeStart {
                ana_group: id,
                kind: ChangeKind::Takeover,
                from: previous_owner,
                to: self.settings.name.clone(),
                reason: match &fenced {
                    Some(fenced) => format!("seen without an owner for {waited_ms} ms; fenced {fenced}"),
                    None => format!("seen without an owner for {waited_ms} ms"),
                },
                // The owner was lost at its last renewal: its lock expired a lease
                // later, by the time this gateway saw the group without an owner (a
                // quarter lease later at most). So the start is a lease before that.
                started_unix_ms: now_unix_ms.saturating_sub(
                    now.elapsed().as_millis() as u64 + waited_ms + self.settings.lease.as_millis() as u64,
                ),
                released_unix_ms: None,
                fenced_unix_ms: fenced.as_ref().map(|_| now_unix_ms),
            },
        };
        self.timelines.record(start, optimized_at, now_unix_ms);
        Ok(())
    }

    /// The hand-over note of `group`, cleared once read (a takeover after a crash must
    /// not find an old one). `None` when the group was not handed over.
    fn take_hand_over_note(&self, group: AnaGroupId) -> Option<HandOver> {
        let bytes = self.store.attribute(&released_attribute(group)).ok().flatten()?;
        if bytes.is_empty() {
            return None;
        }
        let _ = self.store.set_attribute(&released_attribute(group), b"");
        serde_json::from_slice(&bytes).ok()
    }

    /// The name in `group`'s owner record ("" when none).
    fn previous_owner_name(&self, group: AnaGroupId) -> String {
        let record = self.store.attribute(&owner_attribute(group)).ok().flatten().unwrap_or_default();
        String::from_utf8_lossy(&record).split_whitespace().next().unwrap_or_default().to_string()
    }

    /// Blocklists the owner recorded for `group` unless it is this process or none.
    /// Returns whom it fenced.
    fn fence_previous_owner(&mut self, group: AnaGroupId, sink: &dyn AnaSink) -> Result<Option<String>, RadosErrno> {
        let Some(record) = self.store.attribute(&owner_attribute(group))? else { return Ok(None) };
        let record = String::from_utf8_lossy(&record).into_owned();
        let mut fields = record.split_whitespace();
        let (Some(name), Some(address)) = (fields.next(), fields.next()) else { return Ok(None) };
        if address == self.settings.address {
            return Ok(None);
        }
        self.store.blocklist(address, FENCE_DURATION)?;
        self.counters.fenced_peers += 1;
        // Only now, with its client refused: a lock that stays is broken by librbd
        // itself at the image's first write (slowly, but safely).
        let started = std::time::Instant::now();
        match self.store.break_image_locks_of(address, &sink.images_in(group)) {
            Ok(broken) => tracing::info!(
                ana_group = group.0,
                gateway = name,
                images = broken,
                took_ms = started.elapsed().as_millis() as u64,
                "freed the fenced owner's image locks"
            ),
            Err(error) => tracing::warn!(ana_group = group.0, gateway = name, %error,
                "cannot free the fenced owner's image locks; each image's first write breaks its lock instead (slower)"),
        }
        tracing::warn!(
            ana_group = group.0,
            gateway = name,
            client = address,
            "fenced the previous owner (blocklisted)"
        );
        Ok(Some(format!("{name} ({address})")))
    }

    /// Hands group `index` over to `to` (a drain, a balancing move, failback or a
    /// stop): ANA change, the hand-over note, the owner record cleared (so the next
    /// owner does not fence this live gateway), the lock released, non-optimized.
    fn hand_over(
        &mut self,
        index: usize,
        to: &str,
        kind: ChangeKind,
        reason: &str,
        decided_unix_ms: u64,
        sink: &dyn AnaSink,
    ) -> Result<(), RadosErrno> {
        let id = self.groups[index].id;
        #[cfg(test)]
        let skip_change = self.canary_skip_change;
        #[cfg(not(test))]
        let skip_change = false;
        if !skip_change {
            self.report(index, AnaState::Change, sink);
        }
        let note = HandOver {
            from: self.settings.name.clone(),
            to: to.to_string(),
            kind,
            reason: reason.to_string(),
            decided_unix_ms,
            released_unix_ms: unix_ms(SystemTime::now()),
        };
        self.store.set_attribute(&released_attribute(id), &serde_json::to_vec(&note).unwrap_or_default())?;
        self.store.set_attribute(&owner_attribute(id), b"")?;
        self.store.unlock(&group_lock(id), &self.settings.cookie)?;
        self.groups[index].owned = false;
        self.counters.releases += 1;
        self.counters.handovers += 1;
        tracing::info!(ana_group = id.0, to, kind = kind.name(), reason, "handed the ANA group over");
        if !skip_change {
            self.report(index, AnaState::NonOptimized, sink);
        }
        Ok(())
    }

    /// Gives up every owned group and the membership on a clean stop, so peers take
    /// over at once instead of after a lease.
    pub fn leave(&mut self, sink: &dyn AnaSink) {
        if self.phase == Phase::Fenced {
            return;
        }
        let now_ms = unix_ms(SystemTime::now());
        for index in 0..self.groups.len() {
            if self.groups[index].owned {
                let reason = format!("{} stopped", self.settings.name);
                let _ = self.hand_over(index, "", ChangeKind::Stop, &reason, now_ms, sink);
            }
        }
        let _ = self.store.unlock(&member_lock(&self.settings.name), &self.settings.cookie);
    }
}

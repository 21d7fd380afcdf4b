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

use std::time::{Duration, Instant};

use nvme_spec::ana::{AnaGroupId, AnaState};
use runtime::{Locker, RadosErrno};

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
        for index in 0..self.groups.len() {
            if let Err(errno) = self.step_group(index, now, sink) {
                if errno.is_blocklisted() {
                    return self.fenced(sink);
                }
                tracing::warn!(ana_group = self.groups[index].id.0, %errno, "cluster request failed; retrying next round");
            }
        }
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
                    let preferred = self.groups[index].preferred.clone();
                    if self.settings.failback && preferred != self.settings.name && self.alive.contains(&preferred) {
                        self.hand_back(index, sink)
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
        if let Some(holder) = holders.first() {
            self.groups[index].owner = holder.cookie.split('@').next().unwrap_or_default().to_string();
            self.groups[index].ownerless_since = None;
            self.report(index, AnaState::NonOptimized, sink);
            return Ok(());
        }
        let since = *self.groups[index].ownerless_since.get_or_insert(now);
        self.groups[index].owner.clear();
        let preferred = &self.groups[index].preferred;
        let take = *preferred == self.settings.name
            || !self.alive.contains(preferred)
            || now.duration_since(since) >= self.settings.lease;
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
        self.report(index, AnaState::Optimized, sink);
        Ok(())
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

    /// Failback: the preferred owner is alive again. Clear the record (so it does not
    /// fence this live gateway), release, report non-optimized.
    fn hand_back(&mut self, index: usize, sink: &dyn AnaSink) -> Result<(), RadosErrno> {
        let id = self.groups[index].id;
        self.report(index, AnaState::Change, sink);
        self.store.set_attribute(&owner_attribute(id), b"")?;
        self.store.unlock(&group_lock(id), &self.settings.cookie)?;
        self.groups[index].owned = false;
        self.counters.releases += 1;
        tracing::info!(ana_group = id.0, to = %self.groups[index].preferred, "gave the ANA group back to its preferred gateway");
        self.report(index, AnaState::NonOptimized, sink);
        Ok(())
    }

    /// Gives up every owned group and the membership on a clean stop, so peers take
    /// over at once instead of after a lease.
    pub fn leave(&mut self, sink: &dyn AnaSink) {
        if self.phase == Phase::Fenced {
            return;
        }
        for index in 0..self.groups.len() {
            if self.groups[index].owned {
                let _ = self.hand_back(index, sink);
            }
        }
        let _ = self.store.unlock(&member_lock(&self.settings.name), &self.settings.cookie);
    }
}

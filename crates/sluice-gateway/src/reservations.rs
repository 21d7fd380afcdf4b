//! A gateway group's reservations, kept in the cluster: one RADOS object per
//! namespace (`sluice.reservations.<group>.<NGUID>` in the group's pool) holding the
//! registrations, the reservation, the group sequence and the recent notices.
//!
//! - **Atomic changes.** A change is read, applied by the target core's rules
//!   (`ReservationChange::apply`) and written back in one compound operation that
//!   runs only if the object's sequence attribute is still the one read (an
//!   exclusive create for the first change). Two gateways changing one namespace at
//!   once: one write fails the compare, and that gateway reads again and retries, so
//!   no change is lost or applied to an old state.
//! - **Learning of changes.** Every gateway watches each namespace's object. After a
//!   write the writer notifies the object with the whole new record and waits until
//!   every watcher installed it and acknowledged (or the notify timeout passed); the
//!   command completes after that, so a host that got its answer through one gateway
//!   finds the change in force on every gateway that acknowledged.
//! - **Missed notices.** Records carry the sequence; a gateway installs only newer
//!   ones, and the notices of changes it skipped come with the record. A lost watch
//!   (an OSD timed it out, the connection broke, the gateway was blocklisted) marks
//!   the copy unknown: I/O to that namespace gets a path error until the watch is back
//!   and the record read again. Watches are checked every second.
//!
//! All cluster calls run on one thread of this module, never on a runtime thread.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use nvme_target::group_reservations::{
    AppliedChange, ChangeTicket, CopyVouch, GroupReservations, GroupUpdate, ReservationChange, MAX_KEPT_NOTICES,
};
use nvme_target::reservation_store::NamespaceKey;
use nvme_target::reservations::ReservationState;
use nvme_target::Target;
use runtime::{ClusterSpec, RadosObject, ReplaceError, Watch, WatchEvent};

use crate::fence_waits::FenceWaits;
pub use crate::reservation_record::reservation_object;
use crate::reservation_record::{decode, encode, read};

/// The extended attribute compared on every change: the record's sequence.
const SEQUENCE_ATTRIBUTE: &str = "sluice.sequence";
/// How often the watches are checked.
const WATCH_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long an OSD keeps the watch of a gateway it does not hear from (the runtime
/// pings watches often enough for it).
const WATCH_TIMEOUT: Duration = Duration::from_secs(runtime::rbd_backend::SLUICE_WATCH_TIMEOUT_SECONDS);
/// Changes retried after losing the compare to another gateway, before giving up
/// (the host gets a path error and retries).
const MAX_CHANGE_ATTEMPTS: usize = 32;

/// Work for the cluster thread.
enum Job {
    Track(NamespaceKey),
    Apply(NamespaceKey, ReservationChange, ChangeTicket),
    /// A watch reported a loss or an unreadable notice: re-watch and reload.
    Reload([u8; 16]),
    /// The gateway opened its listeners: a namespace followed from now on was not
    /// there when the group was found down, so it is never cleared for it.
    EndStartup,
    /// `sluice serve` stops: unwatch everything and end.
    Stop(std::sync::mpsc::Sender<()>),
}

/// Where and how a group keeps its reservations.
pub struct GroupSettings {
    pub cluster: ClusterSpec,
    /// The group's pool.
    pub pool: String,
    /// The group's name (part of each object's name).
    pub group: String,
    /// This gateway's member name.
    pub member: String,
    /// The members' names (their membership leases, and the client each records,
    /// say who their cluster clients are).
    pub members: Vec<String>,
    /// How long a change waits for every gateway to acknowledge it; a gateway that
    /// does not is fenced (blocklisted) before the change is answered.
    pub notify_timeout: Duration,
    /// Every gateway of the group was down when this one started: with PTPL off a
    /// namespace's registrations and reservation do not survive that (the group's
    /// power loss), so they are cleared when first loaded during startup.
    pub whole_group_was_down: bool,
}

/// The gateway group's reservation authority (`GroupReservations`).
pub struct ClusterReservations {
    jobs: Mutex<Sender<Job>>,
    /// How long this gateway's copies may answer from themselves (renewed by
    /// `copy_vouch`'s thread).
    vouch: Arc<CopyVouch>,
}

impl ClusterReservations {
    /// Starts the cluster thread. `target` receives every state the group publishes.
    pub fn start(settings: GroupSettings, target: &Arc<Target>) -> Result<ClusterReservations, String> {
        let (sender, receiver) = channel::<Job>();
        let startup = settings.whole_group_was_down;
        // Half the notify timeout: an acknowledgement sent when the fence drained
        // late still reaches the notifier in time.
        let fence_waits = FenceWaits::start(settings.notify_timeout / 2)?;
        let vouch = Arc::new(CopyVouch::default());
        let source = crate::copy_vouch::VouchSource {
            cluster: settings.cluster.clone(),
            pool: settings.pool.clone(),
            object: crate::service::group_object(&settings.group),
            member: settings.member.clone(),
        };
        crate::copy_vouch::start(source, settings.notify_timeout, Arc::clone(&vouch))?;
        let worker = Worker {
            fence_waits,
            settings,
            target: Arc::downgrade(target),
            jobs: sender.clone(),
            followed: HashMap::new(),
            pending: Vec::new(),
            clear_without_persistence: startup,
            group_object: None,
        };
        std::thread::Builder::new()
            .name("sluice-resv".into())
            .spawn(move || worker.run(receiver))
            .map_err(|error| format!("cannot start the group reservation thread: {error}"))?;
        Ok(ClusterReservations { jobs: Mutex::new(sender), vouch })
    }

    /// Startup is over (the listeners open): a namespace followed from now on is
    /// never cleared as after the group's power loss.
    pub fn end_startup(&self) {
        let _ = self.send(Job::EndStartup);
    }

    /// Unwatches every object and ends the thread (waits up to a few seconds): a
    /// stopped gateway then delays no other gateway's changes.
    pub fn stop(&self) {
        let (done, finished) = channel();
        if self.send(Job::Stop(done)).is_ok() {
            let _ = finished.recv_timeout(Duration::from_secs(5));
        }
    }

    fn send(&self, job: Job) -> Result<(), Job> {
        self.jobs.lock().unwrap_or_else(|poison| poison.into_inner()).send(job).map_err(|error| error.0)
    }
}

impl GroupReservations for ClusterReservations {
    fn copy_vouch(&self) -> Option<Arc<CopyVouch>> {
        Some(Arc::clone(&self.vouch))
    }

    fn track(&self, key: NamespaceKey) {
        let _ = self.send(Job::Track(key));
    }

    fn apply(&self, key: NamespaceKey, change: ReservationChange, done: ChangeTicket) {
        if let Err(Job::Apply(_, _, done)) = self.send(Job::Apply(key, change, done)) {
            done.finish(Err("the group reservation thread is gone".into()));
        }
    }
}

/// A watch registered and the record read, by [`Worker::establish`]; with the object
/// opened again through a new client when the old one was fenced.
struct Established {
    watch: Watch,
    update: GroupUpdate,
    reopened: Option<Arc<RadosObject>>,
}

/// One namespace followed in the cluster.
struct Followed {
    key: NamespaceKey,
    object: Arc<RadosObject>,
    /// `None` while it must be registered again (and the copy is unknown).
    watch: Option<Watch>,
}

struct Worker {
    settings: GroupSettings,
    /// Where notices that preempted a host with writes here wait for their fence.
    fence_waits: FenceWaits,
    target: Weak<Target>,
    jobs: Sender<Job>,
    followed: HashMap<[u8; 16], Followed>,
    /// Namespaces whose object could not be opened yet: retried every second.
    pending: Vec<NamespaceKey>,
    /// Still starting after the whole group was down (see `GroupSettings`).
    clear_without_persistence: bool,
    /// The group's coordination object (membership leases), opened when first needed.
    group_object: Option<RadosObject>,
}

impl Worker {
    fn run(mut self, jobs: Receiver<Job>) {
        loop {
            match jobs.recv_timeout(WATCH_CHECK_INTERVAL) {
                Ok(Job::Track(key)) => {
                    // A start (or a reload) tracks every namespace at once: follow
                    // those queued together in one parallel batch. A job of another
                    // kind ends the batch and runs after it, in order.
                    let mut keys = vec![key];
                    let mut next = None;
                    while let Ok(job) = jobs.try_recv() {
                        match job {
                            Job::Track(key) => keys.push(key),
                            other => {
                                next = Some(other);
                                break;
                            }
                        }
                    }
                    self.follow_or_retry(keys);
                    if let Some(job) = next {
                        if !self.run_one(job) {
                            return;
                        }
                    }
                }
                Ok(job) => {
                    if !self.run_one(job) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.target.strong_count() == 0 {
                break;
            }
            let pending = std::mem::take(&mut self.pending);
            if !pending.is_empty() {
                self.follow_or_retry(pending);
            }
            self.check_watches();
        }
        // No watch is left: no copy can be vouched for any more.
        if let Some(target) = self.target.upgrade() {
            for nguid in self.followed.keys() {
                target.mark_group_reservations_unknown(nguid);
            }
        }
    }

    /// Runs one job other than a batch of tracks; false once the thread must end.
    fn run_one(&mut self, job: Job) -> bool {
        match job {
            Job::Track(key) => self.follow_or_retry(vec![key]),
            Job::Apply(key, change, done) => {
                let result = self.apply(&key, change);
                done.finish(result);
            }
            Job::Reload(nguid) => {
                if let Some(followed) = self.followed.get_mut(&nguid) {
                    followed.watch = None;
                }
            }
            Job::EndStartup => self.clear_without_persistence = false,
            Job::Stop(done) => {
                // Dropping the watches unregisters them: all at once (a round trip each).
                runtime::rbd_backend::drop_in_parallel(self.followed.drain().map(|(_, followed)| followed).collect());
                let _ = done.send(());
                return false;
            }
        }
        true
    }

    /// Follows `keys`; those that fail are retried every second.
    fn follow_or_retry(&mut self, keys: Vec<NamespaceKey>) {
        let mut watch = Vec::with_capacity(keys.len());
        let mut failed = Vec::new();
        for key in keys {
            match self.open(&key) {
                Ok(()) => watch.push(key),
                Err(error) => failed.push((key, error)),
            }
        }
        let nguids: Vec<[u8; 16]> = watch.iter().map(|key| key.nguid).collect();
        for (key, result) in watch.into_iter().zip(self.rewatch(&nguids)) {
            if let Err(error) = result {
                failed.push((key, error));
            }
        }
        for (key, error) in failed {
            tracing::error!(subsystem = %key.subsystem_nqn, nsid = key.namespace_id.0, %error,
                "cannot follow the group's reservations yet: I/O to the namespace gets path errors until it can (retrying every second)");
            if !self.followed.contains_key(&key.nguid) && !self.pending.iter().any(|pending| pending.nguid == key.nguid)
            {
                self.pending.push(key);
            }
        }
    }

    /// Opens the namespace's object (local: no round trip), once; clears its state
    /// after the group's power loss.
    fn open(&mut self, key: &NamespaceKey) -> Result<(), String> {
        if !self.followed.contains_key(&key.nguid) {
            let name = reservation_object(&self.settings.group, &key.nguid);
            let object = RadosObject::open(&self.settings.cluster, &self.settings.pool, &name)
                .map_err(|error| error.to_string())?;
            self.followed.insert(key.nguid, Followed { key: key.clone(), object: Arc::new(object), watch: None });
            if self.clear_without_persistence {
                self.forget_without_persistence(&key.nguid)?;
            }
        }
        Ok(())
    }

    /// Watches each namespace's object (first, so no change between the read and the
    /// watch is missed), then installs what it holds; the round trips of all of them
    /// at once ([`runtime::rbd_backend::in_parallel`]: a gateway of 4,096 namespaces
    /// loaded them one after another for seconds after it started, each one's I/O
    /// getting path errors meanwhile). One result per NGUID, in order.
    fn rewatch(&mut self, nguids: &[[u8; 16]]) -> Vec<Result<(), String>> {
        let mut objects = Vec::with_capacity(nguids.len());
        for nguid in nguids {
            let Some(followed) = self.followed.get_mut(nguid) else {
                objects.push(None);
                continue;
            };
            // Drop the old watch first (its flush waits out any callback still
            // running), then mark the copy unknown: no late notice can vouch for it
            // after that.
            followed.watch = None;
            if let Some(target) = self.target.upgrade() {
                target.mark_group_reservations_unknown(nguid);
            }
            objects.push(Some((*nguid, followed.key.clone(), Arc::clone(&followed.object))));
        }
        let established = {
            let this = &*self;
            runtime::rbd_backend::in_parallel(&objects, |object| {
                object.as_ref().map(|(nguid, key, object)| this.establish(*nguid, key, object))
            })
        };
        let mut results = Vec::with_capacity(nguids.len());
        for (nguid, outcome) in nguids.iter().zip(established) {
            let Some(outcome) = outcome else {
                results.push(Ok(()));
                continue;
            };
            let Some(followed) = self.followed.get_mut(nguid) else {
                results.push(Ok(()));
                continue;
            };
            match outcome {
                Ok(Established { watch, update, reopened }) => {
                    if let Some(object) = reopened {
                        followed.object = object;
                    }
                    followed.watch = Some(watch);
                    if let Some(target) = self.target.upgrade() {
                        // No one waits for this load: while the watch was lost the copy
                        // was unknown (writes refused), and a change made meanwhile
                        // fenced this gateway as silent.
                        let _ = target.install_group_reservations(nguid, &update);
                    }
                    tracing::debug!(object = %followed.object.describe(), sequence = update.sequence, "group reservations loaded");
                    results.push(Ok(()));
                }
                Err((reopened, error)) => {
                    if let Some(object) = reopened {
                        followed.object = object;
                    }
                    results.push(Err(error));
                }
            }
        }
        results
    }

    /// The round trips of one rewatch: the watch (creating the object when it is
    /// missing), then the record. The watch counts only once the record is read and
    /// installed: a failed read leaves it unset, so the next check retries both.
    fn establish(
        &self,
        nguid: [u8; 16],
        key: &NamespaceKey,
        object: &Arc<RadosObject>,
    ) -> Result<Established, (Option<Arc<RadosObject>>, String)> {
        let object_name = object.describe();
        let handler = || {
            watch_handler(self.target.clone(), nguid, self.jobs.clone(), self.fence_waits.clone(), object_name.clone())
        };
        let mut reopened = None;
        let watch = match object.watch(handler(), WATCH_TIMEOUT) {
            // Only an existing object can be watched: the first gateway creates it
            // with the empty state (or finds that another one just did).
            Err(errno) if errno.is_missing() => {
                let empty = encode(key, &GroupUpdate::default());
                match object.replace_record(SEQUENCE_ATTRIBUTE, None, b"0", &empty) {
                    Ok(()) | Err(ReplaceError::Changed) => {}
                    Err(ReplaceError::Cluster(errno)) => {
                        return Err((None, format!("creating {}: {errno}", object.describe())))
                    }
                }
                object.watch(handler(), WATCH_TIMEOUT)
            }
            // This gateway was fenced: its client stays refused. Open the object
            // again, through the new client the gateway service starts when it
            // rejoins (until then the same one, and the next check tries again).
            Err(errno) if errno.is_blocklisted() => {
                match RadosObject::open(&self.settings.cluster, &self.settings.pool, &object.name()) {
                    Ok(fresh) => {
                        let fresh = Arc::new(fresh);
                        let watched = fresh.watch(handler(), WATCH_TIMEOUT);
                        reopened = Some(fresh);
                        watched
                    }
                    Err(_) => Err(errno),
                }
            }
            other => other,
        };
        let object = reopened.as_ref().unwrap_or(object);
        let watch = match watch {
            Ok(watch) => watch,
            Err(errno) => return Err((reopened.clone(), format!("watching {}: {errno}", object.describe()))),
        };
        match read(object) {
            Ok(update) => Ok(Established { watch, update: update.unwrap_or_default(), reopened }),
            Err(error) => Err((reopened, error)),
        }
    }

    /// The group's power loss for a namespace with PTPL off: its registrations and
    /// reservation go (PRGEN counts on), written and announced like any change.
    fn forget_without_persistence(&mut self, nguid: &[u8; 16]) -> Result<(), String> {
        let Some(followed) = self.followed.get(nguid) else { return Ok(()) };
        let Some(current) = read(&followed.object)? else { return Ok(()) };
        if current.state.persist_through_power_loss
            || (current.state.registrants.is_empty() && current.state.holder.is_none())
        {
            return Ok(());
        }
        let state =
            ReservationState { generation: current.state.generation.wrapping_add(1), ..ReservationState::default() };
        let update = GroupUpdate { sequence: current.sequence + 1, state, notices: current.notices.clone() };
        let record = encode(&followed.key, &update);
        let written = followed.object.replace_record(
            SEQUENCE_ATTRIBUTE,
            Some(current.sequence.to_string().as_bytes()),
            update.sequence.to_string().as_bytes(),
            &record,
        );
        match written {
            Ok(()) => {
                tracing::info!(object = %followed.object.describe(),
                    "every gateway of the group was down: registrations and reservation without PTPL cleared");
                let object = Arc::clone(&followed.object);
                self.announce(&object, nguid, &update, &record, false);
                Ok(())
            }
            // Another gateway changed it first: that gateway is up, so the group was
            // not down as a whole by the time it changed it; keep its state.
            Err(ReplaceError::Changed) => Ok(()),
            Err(ReplaceError::Cluster(errno)) => Err(format!("clearing {}: {errno}", followed.object.describe())),
        }
    }

    /// Re-registers lost or broken watches (their namespaces stay unknown until then).
    fn check_watches(&mut self) {
        let broken: Vec<[u8; 16]> = self
            .followed
            .iter()
            .filter(|(_, followed)| match &followed.watch {
                None => true,
                Some(watch) => watch.check().map_or(true, |since| since > WATCH_TIMEOUT),
            })
            .map(|(nguid, _)| *nguid)
            .collect();
        for error in self.rewatch(&broken).into_iter().filter_map(Result::err) {
            tracing::warn!(%error, "group reservations still unknown: retrying in a second");
        }
    }

    /// One change: read, apply, write under the sequence compare (retried when
    /// another gateway wrote first), then notify every gateway.
    fn apply(&mut self, key: &NamespaceKey, change: ReservationChange) -> Result<AppliedChange, String> {
        if !self.followed.contains_key(&key.nguid) {
            self.open(key)?;
            self.rewatch(&[key.nguid]).pop().unwrap_or(Ok(()))?;
        }
        let Some(followed) = self.followed.get(&key.nguid) else { return Err("namespace not followed".into()) };
        if followed.watch.is_none() {
            // Its own notice is what fences this gateway's writes of a host the
            // change preempts: without a watch it would answer without that wait.
            return Err(format!(
                "{}: this gateway's watch on the record is lost (being registered again); the change is refused here, retry through another gateway",
                followed.object.describe()
            ));
        }
        let object = Arc::clone(&followed.object);
        let namespace_key = followed.key.clone();
        for _ in 0..MAX_CHANGE_ATTEMPTS {
            let current = read(&object)?;
            let exists = current.is_some();
            let current = current.unwrap_or_default();
            let mut state = current.state.clone();
            let effects = match change.apply(&mut state) {
                Ok(effects) => effects,
                Err(status) => return Ok(AppliedChange { status, update: current }),
            };
            if state == current.state {
                return Ok(AppliedChange { status: nvme_spec::Status::SUCCESS, update: current });
            }
            let sequence = current.sequence + 1;
            let mut notices = current.notices.clone();
            notices.extend(effects.notices.iter().map(|(host, notice)| (sequence, *host, *notice)));
            let excess = notices.len().saturating_sub(MAX_KEPT_NOTICES);
            notices.drain(..excess);
            let update = GroupUpdate { sequence, state, notices };
            let record = encode(&namespace_key, &update);
            let expected = current.sequence.to_string();
            let written = object.replace_record(
                SEQUENCE_ATTRIBUTE,
                exists.then_some(expected.as_bytes()),
                sequence.to_string().as_bytes(),
                &record,
            );
            match written {
                Ok(()) => {}
                Err(ReplaceError::Changed) => continue,
                Err(ReplaceError::Cluster(errno)) => {
                    // The write may have landed although the answer was lost: what
                    // the object holds now is announced either way, so no gateway
                    // keeps an older copy it believes current.
                    if let Ok(Some(now)) = read(&object) {
                        if now.sequence > current.sequence {
                            let landed = now == update;
                            let preempts = preempts_registrations(&now, current.sequence);
                            self.announce(&object, &key.nguid, &now, &encode(&namespace_key, &now), preempts);
                            if landed {
                                return Ok(AppliedChange { status: nvme_spec::Status::SUCCESS, update });
                            }
                        }
                    }
                    return Err(format!("writing {}: {errno}", object.describe()));
                }
            }
            self.announce(&object, &key.nguid, &update, &record, preempts_registrations(&update, current.sequence));
            return Ok(AppliedChange { status: nvme_spec::Status::SUCCESS, update });
        }
        Err(format!("{}: changed by other gateways {MAX_CHANGE_ATTEMPTS} times in a row", object.describe()))
    }

    /// Notifies every gateway of `record` and waits for their acknowledgements; a
    /// gateway that does not acknowledge within the notify timeout may go on
    /// enforcing the old state, so it is fenced (blocklisted, as the ANA coordinator
    /// fences a dead owner) before the change is answered: nothing it still serves
    /// reaches the cluster, and its watch breaks.
    ///
    /// A member holding its membership lease whose client neither acknowledged nor
    /// was silent has no watch: fenced already (a blocklisted client's watch is
    /// dropped), or its watch was lost. Until it learns so, or its vouch runs out,
    /// its copy may answer Reservation Report and Conflict from an older state, so
    /// the change is answered only after that bound, as after a fence. A change that
    /// `preempts` registrations also fences each such member: writes it had already
    /// sent to storage for a preempted host were not waited for, and must not land
    /// after the change is answered. The same holds for this gateway itself when its
    /// own notice went unacknowledged (`wait_for_own_fence`).
    fn announce(
        &mut self,
        object: &RadosObject,
        nguid: &[u8; 16],
        update: &GroupUpdate,
        record: &[u8],
        preempts: bool,
    ) {
        let replies = match object.notify_watchers(record, self.settings.notify_timeout) {
            Ok(replies) => replies,
            Err(errno) => {
                tracing::warn!(object = %object.describe(), %errno, "a reservation change could not be announced to the other gateways");
                return;
            }
        };
        let this_client = object.instance_id();
        let mut wait_for_vouches = false;
        for client in replies.silent.iter().copied().filter(|client| *client != this_client) {
            wait_for_vouches |= self.fence_silent_gateway(client);
        }
        let without_a_reply = self.members_without_a_reply(&replies, this_client);
        wait_for_vouches |= !without_a_reply.is_empty();
        if preempts {
            self.fence_members_without_a_watch(&without_a_reply);
            if !replies.acknowledged.contains(&this_client) {
                self.wait_for_own_fence(nguid, update, this_client);
            }
        }
        if wait_for_vouches {
            // A fenced gateway's copies, or those of one whose watch was lost, answer
            // from themselves until their vouch runs out (`copy_vouch`) or it learns
            // so: the change is answered only after that.
            std::thread::sleep(crate::copy_vouch::fenced_answer_delay(self.settings.notify_timeout));
        }
    }

    /// This gateway made a change that preempts a host, and its own notice went
    /// unacknowledged: its watch was lost during the notify (a broken watch, a cluster
    /// restart), or its fence did not drain within the bound. Nobody waited for its
    /// own writes of the preempted hosts then, and nobody fences it (the notify
    /// excludes its sender), so it installs the change itself (from then on those
    /// hosts' new commands are refused here, as the notice would have done) and waits
    /// for those writes as its notice would have; if they do not drain within the
    /// bound it fences (blocklists) itself, as it would any other gateway, before the
    /// change is answered.
    fn wait_for_own_fence(&mut self, nguid: &[u8; 16], update: &GroupUpdate, this_client: u64) {
        let Some(target) = self.target.upgrade() else { return };
        let fence = target.install_own_change(nguid, update);
        let bound = self.settings.notify_timeout / 2;
        let started = Instant::now();
        while !fence.is_drained() && started.elapsed() < bound {
            std::thread::sleep(crate::fence_waits::FENCE_POLL);
        }
        if fence.is_drained() {
            tracing::info!(sequence = update.sequence, wait_us = started.elapsed().as_micros() as u64,
                "this gateway's own notice of a reservation change that preempted a host went unacknowledged: its writes of that host here drained before the change is answered");
            return;
        }
        let writes = fence.writes_in_flight();
        match self.member_of_client(this_client) {
            Some((name, address)) => match self.group_object().map(|group| group.blocklist(&address, crate::coordinator::FENCE_DURATION)) {
                Some(Ok(())) => tracing::warn!(gateway = %name, %address, writes,
                    "a preempted host's writes here did not drain within the bound after this gateway's own reservation change (its own notice went unacknowledged): this gateway fenced (blocklisted) itself, so none of them lands after the change is answered; it rejoins the group on its own"),
                Some(Err(errno)) => tracing::error!(gateway = %name, %address, %errno, writes,
                    "a preempted host's writes here did not drain and this gateway could not fence itself: they may land after the change is answered"),
                None => tracing::error!(writes, "a preempted host's writes here did not drain and the group's object cannot be opened to fence this gateway: they may land after the change is answered"),
            },
            None => tracing::error!(writes, client = this_client,
                "a preempted host's writes here did not drain and this gateway holds no membership lease to be fenced by: they may land after the change is answered"),
        }
    }

    /// The group's object, opened when first needed.
    fn group_object(&mut self) -> Option<&RadosObject> {
        if self.group_object.is_none() {
            let name = crate::service::group_object(&self.settings.group);
            self.group_object = RadosObject::open(&self.settings.cluster, &self.settings.pool, &name).ok();
        }
        self.group_object.as_ref()
    }

    /// The members (name, address) holding their membership lease whose client did
    /// not answer `replies` at all, this gateway aside (see `announce`).
    fn members_without_a_reply(&mut self, replies: &runtime::NotifyReplies, this_client: u64) -> Vec<(String, String)> {
        let members = self.settings.members.clone();
        let Some(group_object) = self.group_object() else { return Vec::new() };
        let answered = |client: u64| {
            client == this_client || replies.acknowledged.contains(&client) || replies.silent.contains(&client)
        };
        let mut without = Vec::new();
        for name in members {
            let Ok(lockers) = group_object.lockers(&crate::coordinator::member_lock(&name)) else { continue };
            for locker in lockers {
                let client = locker.client.strip_prefix("client.").and_then(|id| id.parse::<u64>().ok());
                if !client.is_none_or(answered) {
                    without.push((name.clone(), locker.address));
                }
            }
        }
        without
    }

    /// Fences the members `without_a_reply` found, after a change that preempted a
    /// host (see `announce`).
    fn fence_members_without_a_watch(&mut self, without_a_reply: &[(String, String)]) {
        let Some(group_object) = self.group_object() else { return };
        for (name, address) in without_a_reply {
            match group_object.blocklist(address, crate::coordinator::FENCE_DURATION) {
                Ok(()) => tracing::warn!(gateway = %name, %address,
                    "a gateway holding its membership lease had no watch on a namespace whose reservation change preempted a host \
                     (its watch was lost, or it was fenced already): fenced (blocklisted), so none of its writes in flight lands after the change is answered"),
                Err(errno) => tracing::error!(gateway = %name, %address, %errno,
                    "a gateway without a watch could not be fenced: a preempted host's write in flight there may land after the change is answered"),
            }
        }
    }

    /// The member (name, address) whose cluster client is `client`: by its membership
    /// lease, else (a member whose lease lapsed, stopped longer than a lease, is alive
    /// when it resumes) by the client it recorded.
    fn member_of_client(&mut self, client: u64) -> Option<(String, String)> {
        let members = self.settings.members.clone();
        let group_object = self.group_object()?;
        let entity = format!("client.{client}");
        let by_lease = members.iter().find_map(|name| {
            let lockers = group_object.lockers(&crate::coordinator::member_lock(name)).ok()?;
            lockers.into_iter().find(|locker| locker.client == entity).map(|locker| (name.clone(), locker.address))
        });
        by_lease.or_else(|| {
            members.iter().find_map(|name| {
                let record = group_object.attribute(&crate::copy_vouch::client_attribute(name)).ok()??;
                let record = String::from_utf8(record).ok()?;
                let (id, address) = record.split_once(' ')?;
                (id.parse::<u64>().ok()? == client).then(|| (name.clone(), address.to_string()))
            })
        })
    }

    /// Fences the member whose cluster client is `client`; true when one was fenced.
    fn fence_silent_gateway(&mut self, client: u64) -> bool {
        let entity = format!("client.{client}");
        let member = self.member_of_client(client);
        let Some(group_object) = self.group_object() else { return false };
        match member {
            Some((name, address)) => match group_object.blocklist(&address, crate::coordinator::FENCE_DURATION) {
                Ok(()) => {
                    tracing::warn!(gateway = %name, %address,
                        "a gateway did not acknowledge a reservation change within the notify timeout: fenced (blocklisted)");
                    true
                }
                Err(errno) => {
                    tracing::error!(gateway = %name, %address, %errno,
                        "a gateway did not acknowledge a reservation change and could not be fenced: it may enforce the old state until its watch breaks");
                    false
                }
            },
            // No member's client: a watch of a process that was replaced (its member
            // recorded a newer client), which the OSD has not dropped yet.
            None => {
                tracing::info!(%entity, "a watcher that is no member's current client did not acknowledge a reservation change");
                false
            }
        }
    }
}

/// True when `update` preempted a registration since `sequence` (its notices say so).
fn preempts_registrations(update: &GroupUpdate, sequence: u64) -> bool {
    update
        .notices
        .iter()
        .any(|(at, _, notice)| *at > sequence && *notice == nvme_target::reservations::Notice::RegistrationPreempted)
}

/// Installs every record another gateway (or this one) notifies, and acknowledges it
/// once the writes at storage of the hosts it preempted have completed here
/// ([`FenceWaits`]: never by waiting on this librados thread, which also completes
/// those writes). A lost watch or an unreadable notice marks the copy unknown and
/// asks the thread to reload.
fn watch_handler(
    target: Weak<Target>,
    nguid: [u8; 16],
    jobs: Sender<Job>,
    fence_waits: FenceWaits,
    object: String,
) -> runtime::WatchHandler {
    Box::new(move |event| {
        let Some(target) = target.upgrade() else {
            if let WatchEvent::Notice(_, acknowledgement) = event {
                acknowledgement.acknowledge();
            }
            return;
        };
        match event {
            WatchEvent::Notice(payload, acknowledgement) => match decode(payload) {
                Ok(update) => {
                    // From here on the preempted hosts' new commands are refused; the
                    // fence holds only what this gateway had already sent to storage.
                    let fence = target.install_group_reservations(&nguid, &update);
                    fence_waits.acknowledge_when_drained(
                        fence,
                        Box::new(move || acknowledgement.acknowledge()),
                        &object,
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, "unreadable reservation notice: reloading the record");
                    target.mark_group_reservations_unknown(&nguid);
                    let _ = jobs.send(Job::Reload(nguid));
                    // Unknown now: this gateway refuses the namespace's I/O until it
                    // reloaded, which is as safe as having the change.
                    acknowledgement.acknowledge();
                }
            },
            // Not a notice: nothing to acknowledge.
            WatchEvent::Lost(errno) => {
                tracing::warn!(%errno, "reservation watch lost: I/O gets path errors until it is back");
                target.mark_group_reservations_unknown(&nguid);
                let _ = jobs.send(Job::Reload(nguid));
            }
        }
    })
}

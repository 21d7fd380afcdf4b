//! Controllers: created by an admin queue Connect (dynamic controller model), joined
//! by I/O queue Connects naming their CNTLID, torn down when the admin queue goes
//! away, the keep-alive timer expires or the host resets or shuts them down.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nvme_spec::admin::{async_event_notice, async_event_result, async_event_type};
use nvme_spec::ana::{AnaGroupId, AnaState};
use nvme_spec::log_page::{
    encode_changed_namespace_list, log_id, ErrorInformationEntry, CHANGED_NAMESPACE_LIST_BYTES,
    ERROR_INFORMATION_ENTRY_BYTES,
};
use nvme_spec::registers::{ControllerConfiguration, ControllerStatus};
use nvme_spec::{CommandId, ControllerId, NamespaceId, QueueId};

use crate::limits::{ERROR_LOG_ENTRIES, MAX_OUTSTANDING_ABORTS};
use crate::reservations::Notice;
use crate::stats::StatsRegistry;
use crate::subsystem::Subsystem;

/// What a controller serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerKind {
    /// An I/O controller of an NVM subsystem.
    Io,
    /// A discovery controller of the well-known discovery subsystem.
    Discovery,
}

/// Feature values a host can set (Set Features) and read back (Get Features).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureValues {
    /// Feature 01h, raw CDW11.
    pub arbitration: u32,
    /// Feature 02h, raw CDW11 (PS in bits 4:0, WH in 7:5).
    pub power_management: u32,
    /// Feature 06h: WCE.
    pub volatile_write_cache_enabled: bool,
    /// Feature 0Bh, raw CDW11 (which events the host wants reported).
    pub async_event_configuration: u32,
    /// Feature 0Fh / Connect KATO, in milliseconds; 0 disables keep-alive.
    pub keep_alive_timeout_ms: u32,
    /// Feature 04h, TMPTH with THSEL 0: over-temperature threshold of the composite
    /// temperature, in kelvin.
    pub over_temperature_threshold_kelvin: u16,
    /// Feature 04h, TMPTH with THSEL 1: under-temperature threshold, in kelvin.
    pub under_temperature_threshold_kelvin: u16,
    /// Feature 05h, TLER: time limited error recovery, in units of 100 ms (0: none).
    pub error_recovery_time_limit_100ms: u16,
}

/// Feature 04h's default over-temperature threshold: 343 K (70 °C), a common
/// WCTEMP. Sluice reports no temperature (0 in the SMART log), so neither threshold
/// ever trips; hosts still read and set them.
pub const DEFAULT_OVER_TEMPERATURE_THRESHOLD_KELVIN: u16 = 343;

/// Register and queue state of a controller, changed only by its admin queue and by
/// Connect commands. Never touched on the I/O path.
#[derive(Debug)]
pub struct ControllerState {
    /// CC: controller configuration.
    pub configuration: ControllerConfiguration,
    /// CSTS: controller status.
    pub status: ControllerStatus,
    /// I/O queues granted by Set Features Number of Queues (or the default).
    pub io_queues_allocated: u16,
    /// True once Number of Queues was set (it may be set only once per reset).
    pub number_of_queues_set: bool,
    /// Which I/O queue ids are connected (bit n = QID n).
    pub connected_io_queues: u128,
    /// Current feature values.
    pub features: FeatureValues,
}

/// Asynchronous Event Configuration bit 8: report namespace attribute notices.
const NAMESPACE_ATTRIBUTE_NOTICES_ENABLED: u32 = 1 << 8;
/// Asynchronous Event Configuration bit 11: report ANA change notices.
pub(crate) const ANA_CHANGE_NOTICES_ENABLED: u32 = 1 << 11;
/// Asynchronous Event Configuration bit 31: report Discovery Log Page Change notices
/// (discovery controllers).
pub(crate) const DISCOVERY_LOG_CHANGE_NOTICES_ENABLED: u32 = 1 << 31;
/// NSIDs the Changed Namespace List holds before it overflows into "everything".
const CHANGED_NAMESPACE_LIST_CAPACITY: usize = CHANGED_NAMESPACE_LIST_BYTES / 4;

/// The life of one kind of notice event:
///
/// ```text
///  idle --change, enabled--> due --reported to a held AER--> masked --log read, RAE 0--> idle
///                                                              (changes only recorded)
/// ```
#[derive(Debug, Default)]
struct NoticeEvent {
    /// An event should complete the next (or a held) Asynchronous Event Request.
    due: bool,
    /// An event was reported and its log not yet read: the spec masks further events
    /// of the type until then, so changes are only recorded.
    masked: bool,
}

impl NoticeEvent {
    /// Something changed: the event becomes due unless disabled or masked. Returns
    /// true when it is due now.
    fn raise(&mut self, enabled: bool) -> bool {
        if enabled && !self.masked {
            self.due = true;
        }
        self.due
    }

    /// Reports the event if due (and masks it). Returns true when it was due.
    fn take(&mut self) -> bool {
        let was_due = self.due;
        if was_due {
            self.due = false;
            self.masked = true;
        }
        was_due
    }

    /// Undoes `take`.
    fn restore(&mut self) {
        self.due = true;
        self.masked = false;
    }
}

/// Namespace attribute notices of one I/O controller: the Changed Namespace List
/// (log 04h) and the state of the event that points at it.
#[derive(Debug, Default)]
struct NamespaceNotices {
    /// NSIDs changed since the host last read the log (bounded by the log's size).
    changed: Vec<NamespaceId>,
    /// More changed than the log holds: it reads as FFFFFFFFh, "rescan everything".
    overflowed: bool,
    event: NoticeEvent,
}

/// Discovery Log Page Change notices of one discovery controller.
#[derive(Debug, Default)]
struct DiscoveryNotices {
    /// Fingerprint of the discovery log records as this controller's host saw them
    /// at the last change (GENCTR aside); `None` until the host enabled the notices.
    /// A change that leaves the host's records as they were raises no event.
    view: Option<u64>,
    event: NoticeEvent,
}

/// The notices of a controller; which ones are used depends on its kind.
#[derive(Debug, Default)]
struct Notices {
    namespaces: NamespaceNotices,
    discovery: DiscoveryNotices,
    /// Asymmetric Namespace Access Change notices (I/O controllers): the state of an
    /// ANA group changed; the host reads the ANA log (0Ch).
    ana: NoticeEvent,
    /// Reservation notifications waiting in the Reservation Notification log (80h).
    reservations: ReservationNotices,
}

/// Reservation Notification log entries not read yet, oldest first.
#[derive(Debug, Default)]
struct ReservationNotices {
    /// (log page count, type, NSID).
    entries: VecDeque<(u64, Notice, NamespaceId)>,
    /// Log page count of the newest entry: entries lost to the bound show as gaps.
    count: u64,
    /// Feature 82h for every namespace (bit n masks notice type n) ...
    mask_all: u32,
    /// ... and the namespaces set one by one.
    masks: Vec<(NamespaceId, u32)>,
    event: NoticeEvent,
}

/// Entries the Reservation Notification log keeps per controller.
const RESERVATION_LOG_ENTRIES: usize = 64;
/// Size of one Reservation Notification log page.
pub const RESERVATION_NOTIFICATION_LOG_BYTES: usize = 64;

/// Which notice an event DW0 belongs to (`take_due_event` / `restore_due_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NoticeKind {
    Namespaces,
    Ana,
    Reservations,
    Discovery,
}

/// A controller shared by its admin queue and its I/O queues (which may run on other
/// threads). The mutex guards `ControllerState`; it is taken on admin commands and
/// Connect only.
#[derive(Debug)]
pub struct Controller {
    /// CNTLID.
    pub id: ControllerId,
    /// Kind of controller.
    pub kind: ControllerKind,
    /// The subsystem it belongs to (the discovery controller has none).
    pub subsystem: Option<Arc<Subsystem>>,
    /// HOSTNQN from Connect.
    pub host_nqn: String,
    /// HOSTID from Connect.
    pub host_identifier: [u8; 16],
    state: Mutex<ControllerState>,
    torn_down: AtomicBool,
    /// Bumped by a controller reset (CC.EN 1 -> 0): I/O queues connected in an older
    /// generation are gone.
    generation: AtomicU32,
    /// Namespace change notices (I/O controllers) or discovery log change notices
    /// (discovery controllers), changed by other controllers' commands and the
    /// management API on any thread; read by this controller's admin queue.
    notices: Mutex<Notices>,
    /// True while an event of `notices` is due: lets the admin queue check without
    /// the lock.
    notice_due: AtomicBool,
    /// Counters of this controller's queues (the same shards as the subsystem's).
    pub stats: StatsRegistry,
    /// The Error Information log (01h): the newest failed commands of every queue of
    /// this controller. Written only when a command fails, never on success.
    errors: Mutex<ErrorLog>,
    /// Abort commands waiting for the I/O queue that holds their command to answer.
    aborts: Mutex<Vec<AbortRequest>>,
    /// True while `aborts` holds a request no queue answered: lets I/O queues check
    /// without the lock.
    abort_requested: AtomicBool,
    /// Queues of this controller that are connected, or closed with storage requests
    /// still in flight (see `quiesce`).
    unquiet_queues: AtomicU32,
    /// Queues of this controller closed with storage requests still in flight.
    draining_queues: AtomicU32,
    /// The namespace view its queues share (built by the first to see a generation).
    pub(crate) view: crate::namespaces::SharedView,
    /// When its host learned of ANA changes and used the new path (path timelines).
    pub path_watch: crate::path_watch::PathWatch,
}

/// One Abort the admin queue received for a command of an I/O queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortRequest {
    /// SQID of the command to abort.
    pub queue: QueueId,
    /// CID of the command to abort.
    pub command: CommandId,
    /// `Some(true)`: the queue aborted it; `Some(false)`: it could not (the command is
    /// at the storage, or unknown). `None`: not answered yet.
    pub outcome: Option<bool>,
}

/// The newest `ERROR_LOG_ENTRIES` error entries and the lifetime count (which numbers
/// them and is reported in SMART).
#[derive(Debug, Default)]
struct ErrorLog {
    /// Newest first.
    entries: VecDeque<ErrorInformationEntry>,
    count: u64,
}

impl Controller {
    /// A new, disabled controller.
    pub fn new(
        id: ControllerId,
        kind: ControllerKind,
        subsystem: Option<Arc<Subsystem>>,
        host_nqn: String,
        host_identifier: [u8; 16],
        io_queues_default: u16,
        keep_alive_timeout_ms: u32,
    ) -> Self {
        Controller {
            id,
            kind,
            subsystem,
            host_nqn,
            host_identifier,
            state: Mutex::new(ControllerState {
                configuration: ControllerConfiguration::default(),
                status: ControllerStatus::default(),
                io_queues_allocated: io_queues_default,
                number_of_queues_set: false,
                connected_io_queues: 0,
                features: FeatureValues {
                    arbitration: 0,
                    power_management: 0,
                    volatile_write_cache_enabled: false,
                    async_event_configuration: 0,
                    keep_alive_timeout_ms,
                    over_temperature_threshold_kelvin: DEFAULT_OVER_TEMPERATURE_THRESHOLD_KELVIN,
                    under_temperature_threshold_kelvin: 0,
                    error_recovery_time_limit_100ms: 0,
                },
            }),
            torn_down: AtomicBool::new(false),
            generation: AtomicU32::new(0),
            notices: Mutex::new(Notices::default()),
            notice_due: AtomicBool::new(false),
            stats: StatsRegistry::default(),
            errors: Mutex::new(ErrorLog::default()),
            aborts: Mutex::new(Vec::new()),
            abort_requested: AtomicBool::new(false),
            unquiet_queues: AtomicU32::new(0),
            draining_queues: AtomicU32::new(0),
            view: crate::namespaces::SharedView::default(),
            path_watch: Default::default(),
        }
    }

    /// Records that namespaces changed for this controller (attached, detached,
    /// deleted, resized) and makes a namespace attribute notice due if the host
    /// enabled them and none is outstanding.
    pub fn note_namespaces_changed(&self, ids: &[NamespaceId]) {
        let enabled = self.async_event_enabled(NAMESPACE_ATTRIBUTE_NOTICES_ENABLED);
        let mut notices = self.notices();
        let namespaces = &mut notices.namespaces;
        for &id in ids {
            if namespaces.overflowed || namespaces.changed.contains(&id) {
                continue;
            }
            if namespaces.changed.len() == CHANGED_NAMESPACE_LIST_CAPACITY {
                namespaces.overflowed = true;
                namespaces.changed.clear();
            } else {
                namespaces.changed.push(id);
            }
        }
        if namespaces.event.raise(enabled) {
            self.notice_due.store(true, Ordering::Release);
        }
    }

    /// The host enabled Discovery Log Page Change notices: `fingerprint` (of the
    /// discovery log records as this host sees them) is what later changes are
    /// compared with. Called again while enabled, it keeps the first.
    pub(crate) fn watch_discovery_log(&self, fingerprint: impl FnOnce() -> u64) {
        let mut notices = self.notices();
        if notices.discovery.view.is_none() {
            notices.discovery.view = Some(fingerprint());
        }
    }

    /// The discovery log changed somewhere: if the records this host sees differ
    /// from the last time (`fingerprint` computes them now), a Discovery Log Page
    /// Change notice becomes due (when enabled and not masked). Nothing happens for
    /// a host that never enabled the notices. `fingerprint` runs under this
    /// controller's notice lock, so concurrent changes leave the newest view.
    pub(crate) fn check_discovery_log(&self, fingerprint: impl FnOnce() -> u64) {
        let enabled = self.async_event_enabled(DISCOVERY_LOG_CHANGE_NOTICES_ENABLED);
        let mut notices = self.notices();
        let Some(seen) = notices.discovery.view else { return };
        let current = fingerprint();
        if current == seen {
            return;
        }
        notices.discovery.view = Some(current);
        if notices.discovery.event.raise(enabled) {
            self.notice_due.store(true, Ordering::Release);
        }
    }

    /// The host reads the discovery log: with RAE clear, a reported Discovery Log
    /// Page Change notice is unmasked. Call before building the log, so a change
    /// that lands after the log was built raises a new event.
    pub(crate) fn discovery_log_read(&self, retain_event: bool) {
        if !retain_event {
            self.notices().discovery.event.masked = false;
        }
    }

    /// ANA group `group` changed to `state` on this target at `at`: an ANA change
    /// notice becomes due if the host enabled them and none is outstanding, and a
    /// group turned optimized waits for the host's first command (path timelines).
    pub fn note_ana_changed(&self, group: AnaGroupId, state: AnaState, at: std::time::Instant) {
        if state == AnaState::Optimized {
            self.path_watch.group_optimized(group, at);
        }
        let enabled = self.async_event_enabled(ANA_CHANGE_NOTICES_ENABLED);
        if self.notices().ana.raise(enabled) {
            self.notice_due.store(true, Ordering::Release);
        }
    }

    /// A reservation change concerns this controller's host on namespace `nsid`: an
    /// entry for the Reservation Notification log, and its event, unless masked
    /// (feature 82h).
    pub fn note_reservation(&self, nsid: NamespaceId, notice: Notice) {
        let mut notices = self.notices();
        let log = &mut notices.reservations;
        let mask = log.masks.iter().find(|(id, _)| *id == nsid).map_or(log.mask_all, |(_, mask)| *mask);
        if mask & (1 << notice as u32) != 0 {
            return;
        }
        log.count += 1;
        let count = log.count;
        log.entries.push_back((count, notice, nsid));
        if log.entries.len() > RESERVATION_LOG_ENTRIES {
            log.entries.pop_front();
        }
        if log.event.raise(true) {
            self.notice_due.store(true, Ordering::Release);
        }
    }

    /// Log 80h: the oldest unread entry (then removed), or all zero when none. With
    /// RAE clear the event is unmasked; while entries remain it is due again.
    pub fn reservation_log(&self, retain_event: bool) -> [u8; RESERVATION_NOTIFICATION_LOG_BYTES] {
        let mut page = [0u8; RESERVATION_NOTIFICATION_LOG_BYTES];
        let mut notices = self.notices();
        let log = &mut notices.reservations;
        if let Some((count, notice, nsid)) = log.entries.pop_front() {
            page[0..8].copy_from_slice(&count.to_le_bytes());
            page[8] = notice as u8;
            page[9] = log.entries.len().min(255) as u8;
            page[12..16].copy_from_slice(&nsid.0.to_le_bytes());
        }
        if !retain_event {
            log.event.masked = false;
            if !log.entries.is_empty() && log.event.raise(true) {
                self.notice_due.store(true, Ordering::Release);
            }
        }
        page
    }

    /// Feature 82h: sets the mask of `nsid` (FFFFFFFFh: every namespace).
    pub fn set_reservation_mask(&self, nsid: NamespaceId, mask: u32) {
        let mut notices = self.notices();
        let log = &mut notices.reservations;
        if nsid == NamespaceId::BROADCAST {
            log.mask_all = mask;
            log.masks.clear();
        } else if let Some(entry) = log.masks.iter_mut().find(|(id, _)| *id == nsid) {
            entry.1 = mask;
        } else {
            log.masks.push((nsid, mask));
        }
    }

    /// Feature 82h of `nsid`.
    pub fn reservation_mask(&self, nsid: NamespaceId) -> u32 {
        let notices = self.notices();
        let log = &notices.reservations;
        log.masks.iter().find(|(id, _)| *id == nsid).map_or(log.mask_all, |(_, mask)| *mask)
    }

    /// The host reads the ANA log: with RAE clear, a reported ANA change notice is
    /// unmasked. Call before building the log.
    pub(crate) fn ana_log_read(&self, retain_event: bool) {
        if !retain_event {
            self.notices().ana.masked = false;
        }
        self.path_watch.log_read();
    }

    /// The DW0 of a due asynchronous event, which is then reported (and masked until
    /// its log is read). `None` when nothing is due; cheap then.
    pub fn take_due_event(&self) -> Option<u32> {
        if !self.notice_due.load(Ordering::Acquire) {
            return None;
        }
        let mut notices = self.notices();
        let mut taken = None;
        let mut still_due = false;
        for kind in self.notice_kinds() {
            let event = Self::notice_event(&mut notices, *kind);
            if taken.is_none() && event.take() {
                taken = Some(Self::notice_result(*kind));
                if *kind == NoticeKind::Ana {
                    self.path_watch.notice_sent();
                }
            } else {
                still_due |= event.due;
            }
        }
        self.notice_due.store(still_due, Ordering::Release);
        taken
    }

    /// Puts back an event taken with `take_due_event` (its DW0 `result`) that could not
    /// be reported (no request was held after all).
    pub fn restore_due_event(&self, result: u32) {
        let mut notices = self.notices();
        if let Some(kind) = self.notice_kinds().iter().find(|kind| Self::notice_result(**kind) == result) {
            Self::notice_event(&mut notices, *kind).restore();
            self.notice_due.store(true, Ordering::Release);
        }
    }

    /// The notices this kind of controller reports, most important first.
    fn notice_kinds(&self) -> &'static [NoticeKind] {
        match self.kind {
            ControllerKind::Io => &[NoticeKind::Ana, NoticeKind::Reservations, NoticeKind::Namespaces],
            ControllerKind::Discovery => &[NoticeKind::Discovery],
        }
    }

    fn notice_event(notices: &mut Notices, kind: NoticeKind) -> &mut NoticeEvent {
        match kind {
            NoticeKind::Namespaces => &mut notices.namespaces.event,
            NoticeKind::Ana => &mut notices.ana,
            NoticeKind::Reservations => &mut notices.reservations.event,
            NoticeKind::Discovery => &mut notices.discovery.event,
        }
    }

    /// The Asynchronous Event Request DW0 reporting a notice of `kind`.
    fn notice_result(kind: NoticeKind) -> u32 {
        let (notice, log) = match kind {
            NoticeKind::Namespaces => (async_event_notice::NAMESPACE_ATTRIBUTE_CHANGED, log_id::CHANGED_NAMESPACE_LIST),
            NoticeKind::Ana => (async_event_notice::ANA_CHANGE, log_id::ASYMMETRIC_NAMESPACE_ACCESS),
            NoticeKind::Reservations => {
                // I/O command set specific status, "reservation log page available".
                return async_event_result(
                    async_event_type::IO_COMMAND_SET_SPECIFIC,
                    0,
                    log_id::RESERVATION_NOTIFICATION,
                );
            }
            NoticeKind::Discovery => (async_event_notice::DISCOVERY_LOG_PAGE_CHANGE, log_id::DISCOVERY),
        };
        async_event_result(async_event_type::NOTICE, notice, log)
    }

    /// The Changed Namespace List log page. Reading it with RAE clear empties it and
    /// unmasks the event.
    pub fn changed_namespace_log(&self, retain_event: bool) -> [u8; CHANGED_NAMESPACE_LIST_BYTES] {
        let mut page = [0u8; CHANGED_NAMESPACE_LIST_BYTES];
        let mut notices = self.notices();
        let namespaces = &mut notices.namespaces;
        if namespaces.overflowed {
            // "More than the list holds": one FFFFFFFFh entry, the rest zero.
            page[..4].copy_from_slice(&NamespaceId::BROADCAST.0.to_le_bytes());
        } else {
            encode_changed_namespace_list(namespaces.changed.iter().copied(), &mut page);
        }
        if !retain_event {
            namespaces.changed.clear();
            namespaces.overflowed = false;
            namespaces.event.masked = false;
        }
        page
    }

    /// Records a failed command in the Error Information log (its error count is
    /// assigned here), dropping the oldest entry beyond `ERROR_LOG_ENTRIES`.
    pub fn record_error(&self, mut entry: ErrorInformationEntry) {
        let mut log = self.errors.lock().unwrap_or_else(|poison| poison.into_inner());
        log.count += 1;
        entry.error_count = log.count;
        log.entries.push_front(entry);
        log.entries.truncate(ERROR_LOG_ENTRIES as usize);
    }

    /// Files an Abort for command `command` of queue `queue`; false when ACL + 1
    /// Aborts are already waiting.
    pub(crate) fn request_abort(&self, queue: QueueId, command: CommandId) -> bool {
        let mut aborts = self.aborts.lock().unwrap_or_else(|poison| poison.into_inner());
        if aborts.len() >= usize::from(MAX_OUTSTANDING_ABORTS) {
            return false;
        }
        aborts.push(AbortRequest { queue, command, outcome: None });
        self.abort_requested.store(true, Ordering::Release);
        true
    }

    /// The commands of `queue` an Abort waits for (cheap when none is waiting).
    pub(crate) fn abort_requests_for(&self, queue: QueueId) -> Vec<CommandId> {
        if !self.abort_requested.load(Ordering::Acquire) {
            return Vec::new();
        }
        let aborts = self.aborts.lock().unwrap_or_else(|poison| poison.into_inner());
        aborts
            .iter()
            .filter(|request| request.queue == queue && request.outcome.is_none())
            .map(|request| request.command)
            .collect()
    }

    /// The queue's answer: whether it aborted the command. Ignored when the Abort gave
    /// up waiting meanwhile, in which case the queue must not abort: returns false then.
    pub(crate) fn answer_abort(&self, queue: QueueId, command: CommandId, aborted: bool) -> bool {
        let mut aborts = self.aborts.lock().unwrap_or_else(|poison| poison.into_inner());
        let Some(request) = aborts
            .iter_mut()
            .find(|request| request.queue == queue && request.command == command && request.outcome.is_none())
        else {
            return false;
        };
        request.outcome = Some(aborted);
        if aborts.iter().all(|request| request.outcome.is_some()) {
            self.abort_requested.store(false, Ordering::Release);
        }
        true
    }

    /// Whether the Abort for (`queue`, `command`) is answered: `Some(aborted)`, and the
    /// request is gone. With `give_up`, an unanswered request is withdrawn and reads
    /// as not aborted.
    pub(crate) fn take_abort_outcome(&self, queue: QueueId, command: CommandId, give_up: bool) -> Option<bool> {
        let mut aborts = self.aborts.lock().unwrap_or_else(|poison| poison.into_inner());
        let position = aborts.iter().position(|request| request.queue == queue && request.command == command)?;
        let outcome = match aborts.get(position)?.outcome {
            Some(aborted) => aborted,
            None if give_up => false,
            None => return None,
        };
        aborts.remove(position);
        if aborts.iter().all(|request| request.outcome.is_some()) {
            self.abort_requested.store(false, Ordering::Release);
        }
        Some(outcome)
    }

    /// Errors recorded since the controller was created (SMART "Number of Error
    /// Information Log Entries").
    pub fn error_count(&self) -> u64 {
        self.errors.lock().unwrap_or_else(|poison| poison.into_inner()).count
    }

    /// The Error Information log page: `ERROR_LOG_ENTRIES` entries, newest first,
    /// unused ones zero (error count 0).
    pub fn error_log(&self) -> Vec<u8> {
        let log = self.errors.lock().unwrap_or_else(|poison| poison.into_inner());
        let mut page = vec![0u8; ERROR_INFORMATION_ENTRY_BYTES * ERROR_LOG_ENTRIES as usize];
        for (entry, slot) in log.entries.iter().zip(page.chunks_exact_mut(ERROR_INFORMATION_ENTRY_BYTES)) {
            let mut out = [0u8; ERROR_INFORMATION_ENTRY_BYTES];
            entry.encode(&mut out);
            slot.copy_from_slice(&out);
        }
        page
    }

    /// True when the host enabled the events of `bit` (Set Features 0Bh).
    fn async_event_enabled(&self, bit: u32) -> bool {
        self.state().features.async_event_configuration & bit != 0
    }

    /// Locks the notices (poisoning as for `state`).
    fn notices(&self) -> MutexGuard<'_, Notices> {
        self.notices.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Locks the register state. A poisoned lock means a panic elsewhere (our bug);
    /// the state itself is still consistent field by field, so carry on.
    pub fn state(&self) -> MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Marks the controller dead: its queues close at their next check.
    pub fn tear_down(&self) {
        self.torn_down.store(true, Ordering::Release);
    }

    /// True once torn down.
    pub fn is_torn_down(&self) -> bool {
        self.torn_down.load(Ordering::Acquire)
    }

    /// A queue connected to this controller (see `unquiet_queues`).
    pub(crate) fn queue_connected(&self) {
        self.unquiet_queues.fetch_add(1, Ordering::AcqRel);
    }

    /// A queue of this controller closed and nothing it started is in flight any more.
    pub(crate) fn queue_quiet(&self) {
        self.unquiet_queues.fetch_sub(1, Ordering::AcqRel);
    }

    /// A queue of this controller closed with storage requests in flight.
    pub(crate) fn queue_draining(&self) {
        self.draining_queues.fetch_add(1, Ordering::AcqRel);
    }

    /// ... and those requests are done (or let go).
    pub(crate) fn queue_drained(&self) {
        self.draining_queues.fetch_sub(1, Ordering::AcqRel);
    }

    /// No request of a dead queue of this controller can still reach storage: none of
    /// its queues is draining, and once torn down, all of them are closed and drained.
    /// A Connect of the same host waits for this (see `quiesce`).
    pub fn is_settled(&self) -> bool {
        self.draining_queues.load(Ordering::Acquire) == 0
            && (!self.is_torn_down() || self.unquiet_queues.load(Ordering::Acquire) == 0)
    }

    /// Queues still counted that are neither the admin queue nor a connected I/O
    /// queue of the current generation: closed ones not drained yet, and those of a
    /// generation a reset ended, which close at their next check. Their requests may
    /// still reach storage, so a new I/O queue of this controller waits for them.
    pub(crate) fn has_stale_queues(&self) -> bool {
        let connected_io_queues = self.state().connected_io_queues.count_ones();
        self.unquiet_queues.load(Ordering::Acquire) > 1 + connected_io_queues
    }

    /// Current reset generation.
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// A controller reset: every I/O queue of the previous generation must close.
    pub fn begin_new_generation(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// CSTS.RDY: the controller processes commands other than Fabrics commands.
    pub fn is_ready(&self) -> bool {
        self.state().status.ready()
    }
}

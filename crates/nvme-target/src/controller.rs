//! Controllers: created by an admin queue Connect (dynamic controller model), joined
//! by I/O queue Connects naming their CNTLID, torn down when the admin queue goes
//! away, the keep-alive timer expires or the host resets or shuts them down.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nvme_spec::admin::{async_event_notice, async_event_result, async_event_type};
use nvme_spec::log_page::{encode_changed_namespace_list, log_id, CHANGED_NAMESPACE_LIST_BYTES};
use nvme_spec::registers::{ControllerConfiguration, ControllerStatus};
use nvme_spec::{ControllerId, NamespaceId};

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
}

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
/// NSIDs the Changed Namespace List holds before it overflows into "everything".
const CHANGED_NAMESPACE_LIST_CAPACITY: usize = CHANGED_NAMESPACE_LIST_BYTES / 4;

/// Namespace attribute notices of one controller: the Changed Namespace List (log
/// 04h) and the state of the event that points at it.
#[derive(Debug, Default)]
struct NamespaceNotices {
    /// NSIDs changed since the host last read the log (bounded by the log's size).
    changed: Vec<NamespaceId>,
    /// More changed than the log holds: it reads as FFFFFFFFh, "rescan everything".
    overflowed: bool,
    /// An event should complete the next (or a held) Asynchronous Event Request.
    event_due: bool,
    /// An event was reported and the log not yet read: the spec masks further events
    /// of the type until then, so changes are only recorded.
    event_masked: bool,
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
    /// Namespace change notices (changed by other controllers' commands, on any
    /// thread; read by this controller's admin queue).
    notices: Mutex<NamespaceNotices>,
    /// True while `notices.event_due`: lets the admin queue check without the lock.
    notice_due: AtomicBool,
    /// Counters of this controller's queues (the same shards as the subsystem's).
    pub stats: StatsRegistry,
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
                },
            }),
            torn_down: AtomicBool::new(false),
            generation: AtomicU32::new(0),
            notices: Mutex::new(NamespaceNotices::default()),
            notice_due: AtomicBool::new(false),
            stats: StatsRegistry::default(),
        }
    }

    /// Records that namespaces changed for this controller (attached, detached,
    /// deleted, resized) and makes a namespace attribute notice due if the host
    /// enabled them and none is outstanding.
    pub fn note_namespaces_changed(&self, ids: &[NamespaceId]) {
        let enabled =
            self.state().features.async_event_configuration & NAMESPACE_ATTRIBUTE_NOTICES_ENABLED != 0;
        let mut notices = self.notices.lock().unwrap_or_else(|poison| poison.into_inner());
        for &id in ids {
            if notices.overflowed || notices.changed.contains(&id) {
                continue;
            }
            if notices.changed.len() == CHANGED_NAMESPACE_LIST_CAPACITY {
                notices.overflowed = true;
                notices.changed.clear();
            } else {
                notices.changed.push(id);
            }
        }
        if enabled && !notices.event_masked {
            notices.event_due = true;
            self.notice_due.store(true, Ordering::Release);
        }
    }

    /// The DW0 of a due asynchronous event, which is then reported (and masked until
    /// its log is read). `None` when nothing is due; cheap then.
    pub fn take_due_event(&self) -> Option<u32> {
        if !self.notice_due.load(Ordering::Acquire) {
            return None;
        }
        let mut notices = self.notices.lock().unwrap_or_else(|poison| poison.into_inner());
        self.notice_due.store(false, Ordering::Release);
        if !notices.event_due {
            return None;
        }
        notices.event_due = false;
        notices.event_masked = true;
        Some(async_event_result(
            async_event_type::NOTICE,
            async_event_notice::NAMESPACE_ATTRIBUTE_CHANGED,
            log_id::CHANGED_NAMESPACE_LIST,
        ))
    }

    /// Puts back an event taken with `take_due_event` that could not be reported
    /// (no request was held after all).
    pub fn restore_due_event(&self) {
        let mut notices = self.notices.lock().unwrap_or_else(|poison| poison.into_inner());
        notices.event_due = true;
        notices.event_masked = false;
        self.notice_due.store(true, Ordering::Release);
    }

    /// The Changed Namespace List log page. Reading it with RAE clear empties it and
    /// unmasks the event.
    pub fn changed_namespace_log(&self, retain_event: bool) -> [u8; CHANGED_NAMESPACE_LIST_BYTES] {
        let mut page = [0u8; CHANGED_NAMESPACE_LIST_BYTES];
        let mut notices = self.notices.lock().unwrap_or_else(|poison| poison.into_inner());
        if notices.overflowed {
            // "More than the list holds": one FFFFFFFFh entry, the rest zero.
            page[..4].copy_from_slice(&NamespaceId::BROADCAST.0.to_le_bytes());
        } else {
            encode_changed_namespace_list(notices.changed.iter().copied(), &mut page);
        }
        if !retain_event {
            notices.changed.clear();
            notices.overflowed = false;
            notices.event_masked = false;
        }
        page
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

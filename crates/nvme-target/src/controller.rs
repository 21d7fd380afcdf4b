//! Controllers: created by an admin queue Connect (dynamic controller model), joined
//! by I/O queue Connects naming their CNTLID, torn down when the admin queue goes
//! away, the keep-alive timer expires or the host resets or shuts them down.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nvme_spec::registers::{ControllerConfiguration, ControllerStatus};
use nvme_spec::ControllerId;

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
        }
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

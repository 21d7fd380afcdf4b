//! The target: listeners, subsystems and the controller table, shared by every
//! connection on every thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use nvme_spec::ControllerId;

use crate::controller::{Controller, ControllerKind};
use crate::management::NamespaceChange;
use crate::limits::{MAX_IO_QUEUES_PER_CONTROLLER, MAX_IO_QUEUE_DEPTH};
use crate::subsystem::{Subsystem, SubsystemError, SubsystemSpec};

/// Address family of a listener (ADRFAM in the discovery log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressFamily {
    Ipv4,
    Ipv6,
}

/// A TCP listener as the discovery log describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSpec {
    /// TRADDR: the address hosts connect to, e.g. "127.0.0.1".
    pub address: String,
    /// TRSVCID: the TCP port.
    pub port: u16,
    /// ADRFAM.
    pub family: AddressFamily,
    /// Serves only the discovery subsystem (like port 8009); not listed as a path to
    /// NVM subsystems.
    pub discovery_only: bool,
}

/// Tunables of the whole target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetSettings {
    /// I/O queues a controller may have (granted through Number of Queues).
    pub max_io_queues_per_controller: u16,
    /// Deepest I/O queue a host may connect (reported as CAP.MQES + 1).
    pub max_io_queue_depth: u16,
}

impl Default for TargetSettings {
    fn default() -> Self {
        TargetSettings { max_io_queues_per_controller: 64, max_io_queue_depth: MAX_IO_QUEUE_DEPTH }
    }
}

/// What the target is built from.
pub struct TargetSpec {
    pub listeners: Vec<ListenerSpec>,
    pub subsystems: Vec<SubsystemSpec>,
    pub settings: TargetSettings,
}

/// Why a target description cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error(transparent)]
    Subsystem(#[from] SubsystemError),
    #[error("subsystem NQN {0} is listed twice")]
    DuplicateSubsystem(String),
    #[error("subsystem NQN {0} is the discovery subsystem's NQN; choose another")]
    ReservedNqn(String),
    #[error("max_io_queues_per_controller must be 1..={max}, not {value}")]
    IoQueueCount { value: u16, max: u16 },
    #[error("max_io_queue_depth must be 2..={max}, not {value}")]
    IoQueueDepth { value: u16, max: u16 },
    #[error("no subsystem with NQN {0}")]
    UnknownSubsystem(String),
}

/// Key of the controller table: subsystem index (or `None` for discovery) and CNTLID.
type ControllerKey = (Option<usize>, u16);

#[derive(Default)]
struct ControllerTable {
    controllers: HashMap<ControllerKey, Weak<Controller>>,
    /// Next CNTLID to try, per subsystem index (`None`: the discovery subsystem).
    next_id: HashMap<Option<usize>, u16>,
}

/// The subsystems, changed by the management API while connections read them.
#[derive(Default)]
struct SubsystemRegistry {
    /// By subsystem index; a removed subsystem leaves `None` so indexes are never
    /// reused (controllers and connections of the removed one may still name it).
    by_index: Vec<Option<Arc<Subsystem>>>,
    by_nqn: HashMap<String, usize>,
}

/// Shared state of a running target.
pub struct Target {
    listeners: Vec<ListenerSpec>,
    subsystems: RwLock<SubsystemRegistry>,
    controllers: Mutex<ControllerTable>,
    /// Tunables.
    pub settings: TargetSettings,
    /// GENCTR of the discovery log: changes whenever the log's content changes.
    discovery_generation: AtomicU64,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("listeners", &self.listeners)
            .field("subsystems", &self.subsystems())
            .finish()
    }
}

impl Target {
    /// Builds a target from its description.
    pub fn new(spec: TargetSpec) -> Result<Arc<Target>, TargetError> {
        let settings = spec.settings;
        if settings.max_io_queues_per_controller == 0
            || settings.max_io_queues_per_controller > MAX_IO_QUEUES_PER_CONTROLLER
        {
            return Err(TargetError::IoQueueCount {
                value: settings.max_io_queues_per_controller,
                max: MAX_IO_QUEUES_PER_CONTROLLER,
            });
        }
        if settings.max_io_queue_depth < 2 || settings.max_io_queue_depth > MAX_IO_QUEUE_DEPTH {
            return Err(TargetError::IoQueueDepth {
                value: settings.max_io_queue_depth,
                max: MAX_IO_QUEUE_DEPTH,
            });
        }
        let target = Arc::new(Target {
            listeners: spec.listeners,
            subsystems: RwLock::new(SubsystemRegistry::default()),
            controllers: Mutex::new(ControllerTable::default()),
            settings,
            discovery_generation: AtomicU64::new(1),
        });
        for subsystem_spec in spec.subsystems {
            target.add_subsystem(subsystem_spec)?;
        }
        target.discovery_generation.store(1, Ordering::Release);
        Ok(target)
    }

    /// Adds a subsystem while the target runs (its NQN must be new).
    pub fn add_subsystem(&self, spec: SubsystemSpec) -> Result<Arc<Subsystem>, TargetError> {
        if spec.nqn == nvme_spec::discovery::DISCOVERY_NQN {
            return Err(TargetError::ReservedNqn(spec.nqn));
        }
        let mut registry = self.subsystems.write().unwrap_or_else(|poison| poison.into_inner());
        if registry.by_nqn.contains_key(&spec.nqn) {
            return Err(TargetError::DuplicateSubsystem(spec.nqn));
        }
        let index = registry.by_index.len();
        let subsystem = Arc::new(Subsystem::new(spec, index)?);
        registry.by_nqn.insert(subsystem.nqn.clone(), index);
        registry.by_index.push(Some(Arc::clone(&subsystem)));
        drop(registry);
        self.bump_discovery_generation();
        Ok(subsystem)
    }

    /// Removes a subsystem while the target runs: new Connects to it fail, and its
    /// controllers are torn down (their queues close at their next check).
    pub fn remove_subsystem(&self, nqn: &str) -> Result<Arc<Subsystem>, TargetError> {
        let mut registry = self.subsystems.write().unwrap_or_else(|poison| poison.into_inner());
        let index = registry.by_nqn.remove(nqn).ok_or_else(|| TargetError::UnknownSubsystem(nqn.to_string()))?;
        let removed = registry.by_index.get_mut(index).and_then(Option::take);
        drop(registry);
        let removed = removed.ok_or_else(|| TargetError::UnknownSubsystem(nqn.to_string()))?;
        for controller in self.controllers_of(index) {
            controller.tear_down();
        }
        self.bump_discovery_generation();
        Ok(removed)
    }

    /// GENCTR of the discovery log.
    pub fn discovery_generation(&self) -> u64 {
        self.discovery_generation.load(Ordering::Acquire)
    }

    /// Records that the discovery log's content changed (subsystems, listeners or
    /// allowed hosts), so hosts that compare GENCTR read it again.
    pub fn bump_discovery_generation(&self) {
        self.discovery_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The listeners, in configuration order (a connection names its listener by index).
    pub fn listeners(&self) -> &[ListenerSpec] {
        &self.listeners
    }

    /// The subsystems, in the order they were added.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        let registry = self.subsystems.read().unwrap_or_else(|poison| poison.into_inner());
        registry.by_index.iter().flatten().cloned().collect()
    }

    /// The subsystem with this NQN.
    pub fn subsystem_by_nqn(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let registry = self.subsystems.read().unwrap_or_else(|poison| poison.into_inner());
        registry.by_nqn.get(nqn).and_then(|&index| registry.by_index[index].clone())
    }

    /// Creates a controller with a CNTLID unique within its subsystem.
    /// `None` when all 65519 ids are in use.
    pub fn create_controller(
        &self,
        kind: ControllerKind,
        subsystem: Option<Arc<Subsystem>>,
        host_nqn: String,
        host_identifier: [u8; 16],
        keep_alive_timeout_ms: u32,
    ) -> Option<Arc<Controller>> {
        let subsystem_index = subsystem.as_ref().map(|subsystem| subsystem.index);
        let mut table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        // Drop entries of controllers that no longer exist so their ids are reusable.
        table.controllers.retain(|_, controller| controller.strong_count() > 0);
        for _ in 0..ControllerId::MAX_VALID {
            let next = table.next_id.entry(subsystem_index).or_insert(1);
            let candidate = *next;
            *next = if candidate >= ControllerId::MAX_VALID { 1 } else { candidate + 1 };
            let key = (subsystem_index, candidate);
            if table.controllers.contains_key(&key) {
                continue;
            }
            let io_queues = match kind {
                ControllerKind::Io => self.settings.max_io_queues_per_controller,
                ControllerKind::Discovery => 0,
            };
            let controller = Arc::new(Controller::new(
                ControllerId(candidate),
                kind,
                subsystem,
                host_nqn,
                host_identifier,
                io_queues,
                keep_alive_timeout_ms,
            ));
            table.controllers.insert(key, Arc::downgrade(&controller));
            return Some(controller);
        }
        None
    }

    /// The live controller `id` of a subsystem.
    pub fn controller(&self, subsystem_index: usize, id: ControllerId) -> Option<Arc<Controller>> {
        let table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        table
            .controllers
            .get(&(Some(subsystem_index), id.0))
            .and_then(Weak::upgrade)
            .filter(|controller| !controller.is_torn_down())
    }

    /// The live controllers of a subsystem, in no particular order.
    pub fn controllers_of(&self, subsystem_index: usize) -> Vec<Arc<Controller>> {
        let table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        table
            .controllers
            .iter()
            .filter(|((index, _), _)| *index == Some(subsystem_index))
            .filter_map(|(_, controller)| controller.upgrade())
            .filter(|controller| !controller.is_torn_down())
            .collect()
    }

    /// Tells every controller of the change's hosts that the namespace changed (its
    /// admin queue reports a namespace attribute notice).
    pub fn notify_namespace_change(&self, subsystem: &Subsystem, change: &NamespaceChange) {
        for controller in self.controllers_of(subsystem.index) {
            if change.hosts.includes(&controller.host_nqn) {
                controller.note_namespaces_changed(&[change.namespace_id]);
            }
        }
    }

    /// Removes a controller from the table (its id becomes reusable).
    pub fn remove_controller(&self, controller: &Controller) {
        let subsystem_index = controller.subsystem.as_ref().map(|subsystem| subsystem.index);
        let mut table = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        table.controllers.remove(&(subsystem_index, controller.id.0));
    }
}

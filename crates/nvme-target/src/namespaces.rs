//! The namespace table of a subsystem and each connection's view of it.
//!
//! The table is immutable: a change (Namespace Management, Namespace Attachment, the
//! management API) builds a new table and swaps it in, then bumps the subsystem's
//! generation counter. A connection keeps its own view (the namespaces active for its
//! controller's host, indexed by NSID) and rebuilds it only when the generation moved,
//! so the I/O path costs one atomic load and one index, with no lock.
//!
//! A namespace removed from the table stays alive while a view or an open backend
//! queue still holds it; a deleted pool namespace gives its space back only when the
//! last holder lets go (see [`Namespace::mark_deleted`]), so no I/O still in flight
//! can write into space that a new namespace is about to receive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nvme_spec::ana::AnaGroupId;
use nvme_spec::NamespaceId;
use storage::{Backend, CarvedId, Geometry, GrowError, LiveGeometry, Pool};

use crate::stats::StatsRegistry;

/// A namespace: an NSID bound to a storage backend, with stable identifiers.
pub struct Namespace {
    /// NSID.
    pub id: NamespaceId,
    /// Where the blocks live.
    pub backend: Arc<dyn Backend>,
    /// Block size and block count: the backend's, cached so the I/O path's range
    /// check is one atomic load; it only grows (a live resize, [`Namespace::grow`]).
    geometry: LiveGeometry,
    /// NGUID: namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// UUID: namespace UUID.
    pub uuid: [u8; 16],
    /// The pool carve behind it, when Namespace Management created it or the config
    /// carved it from a pool.
    pub carve: Option<PoolCarve>,
    /// ANAGRPID: the ANA group whose state decides whether this target's paths serve
    /// the namespace.
    pub ana_group: AnaGroupId,
    /// I/O counters and latency of this namespace, over every queue that used it.
    pub stats: StatsRegistry,
    /// Registrations and reservation, shared by every controller of the subsystem.
    pub reservations: crate::reservations::Reservations,
    /// LBA ranges held by fused Compare and Write pairs, shared like `reservations`.
    pub range_locks: crate::range_locks::RangeLocks,
    /// Writes each connection's queue has at storage, for Preempt and Abort's fence.
    pub writes: crate::write_fence::NamespaceWrites,
    /// Rate limits on the namespace and on each host's I/O to it (`qos`); changed
    /// live, shared by every connection.
    pub qos: crate::qos::NamespaceQos,
    /// The reservation store was asked for this namespace's saved state (once).
    pub(crate) reservations_restored: AtomicBool,
    /// Set by Namespace Management delete: the carve is deleted (its space zeroed and
    /// freed) when the last holder drops this namespace.
    deleted: AtomicBool,
}

/// A namespace's place in a pool.
#[derive(Clone)]
pub struct PoolCarve {
    /// The pool it was carved from.
    pub pool: Arc<Pool>,
    /// Its id in the pool.
    pub id: CarvedId,
    /// Thin provisioned (NSFEAT bit 0): space is allocated on first write.
    pub thin: bool,
}

impl Namespace {
    /// A namespace over `backend`.
    pub fn new(
        id: NamespaceId,
        backend: Arc<dyn Backend>,
        nguid: [u8; 16],
        uuid: [u8; 16],
        carve: Option<PoolCarve>,
    ) -> Namespace {
        Namespace {
            id,
            geometry: LiveGeometry::new(backend.geometry()),
            backend,
            nguid,
            uuid,
            carve,
            ana_group: crate::ana::DEFAULT_ANA_GROUP,
            stats: StatsRegistry::default(),
            reservations: crate::reservations::Reservations::default(),
            range_locks: crate::range_locks::RangeLocks::default(),
            writes: crate::write_fence::NamespaceWrites::default(),
            qos: crate::qos::NamespaceQos::default(),
            reservations_restored: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
        }
    }

    /// The same namespace in ANA group `group` (1..=ANAGRPMAX, checked by the caller).
    pub fn in_ana_group(mut self, group: AnaGroupId) -> Namespace {
        self.ana_group = group;
        self
    }

    /// Block size and block count (NSZE) now.
    pub fn geometry(&self) -> Geometry {
        self.geometry.get()
    }

    /// Grows the namespace to `block_count` blocks, durably ([`Backend::grow`]): the
    /// backend first, so any command admitted against the new size finds the backend
    /// ready for it. Blocking: the management thread calls it. The caller tells the
    /// controllers ([`crate::Target::notify_namespace_change`]).
    pub fn grow(&self, block_count: u64) -> Result<Geometry, GrowError> {
        let grown = self.backend.grow(block_count)?;
        Ok(self.geometry.grow_to(grown.block_count))
    }

    /// For storage others can grow (an RBD image resized elsewhere): `Some` with the
    /// new geometry when the backend is larger than the namespace was. A backend that
    /// reads smaller (shrunk under us) changes nothing here: its own range checks
    /// refuse the lost blocks, and shrinking NSZE under a host is never done.
    pub fn refresh_geometry(&self) -> Result<Option<Geometry>, GrowError> {
        let backend = self.backend.refresh_geometry()?;
        let current = self.geometry.get();
        if backend.block_size_bytes != current.block_size_bytes || backend.block_count <= current.block_count {
            return Ok(None);
        }
        Ok(Some(self.geometry.grow_to(backend.block_count)))
    }

    /// log2 of the block size, as LBADS in the LBA format.
    pub fn block_size_log2(&self) -> u8 {
        self.geometry.get().block_size_bytes.trailing_zeros() as u8
    }

    /// NUSE: blocks that hold space (all of them unless thin).
    pub fn utilization_blocks(&self) -> u64 {
        match &self.carve {
            Some(carve) if carve.thin => {
                carve.pool.allocated_blocks(carve.id).unwrap_or(self.geometry.get().block_count)
            }
            _ => self.geometry.get().block_count,
        }
    }

    /// Marks the namespace deleted: its carve goes back to the pool once nothing holds
    /// the namespace any more.
    pub(crate) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if !self.deleted.load(Ordering::Acquire) {
            return;
        }
        let Some(carve) = self.carve.take() else { return };
        // Zeroing the carve is device I/O of up to its whole size: the pool's service
        // executor does it, not the runtime thread that happened to drop the last
        // reference.
        let service = carve.pool.service();
        service.execute_long(Box::new(move || match carve.pool.delete(carve.id) {
            Ok(()) => tracing::info!(carve = carve.id.0, "deleted namespace's space returned to the pool"),
            Err(error) => tracing::error!(carve = carve.id.0, %error,
                "could not free a deleted namespace's space; it stays allocated until the next start"),
        }));
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("id", &self.id.0)
            .field("backend", &self.backend.kind())
            .field("geometry", &self.geometry.get())
            .field("carve", &self.carve.as_ref().map(|carve| carve.id.0))
            .finish()
    }
}

/// Which hosts' controllers a namespace is attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attachment {
    /// Every controller (namespaces from the config).
    AllHosts,
    /// Controllers of these host NQNs (Namespace Attachment). Attachment is kept per
    /// host rather than per CNTLID because fabrics controllers are created per
    /// association: a host that reconnects gets a new CNTLID and must find its
    /// namespaces again.
    Hosts(Vec<String>),
}

impl Attachment {
    /// True when controllers of `host_nqn` see the namespace.
    pub fn includes(&self, host_nqn: &str) -> bool {
        match self {
            Attachment::AllHosts => true,
            Attachment::Hosts(hosts) => hosts.iter().any(|host| host == host_nqn),
        }
    }
}

/// One allocated namespace and where it is attached.
#[derive(Clone, Debug)]
pub struct TableEntry {
    pub namespace: Arc<Namespace>,
    pub attachment: Attachment,
    /// Created by a host's Namespace Management command (its attachment follows
    /// Namespace Attachment and is kept in the pool table), rather than declared in
    /// the configuration (its attachment follows the configuration). Kept apart from
    /// `attachment` because a configured namespace may be limited to some hosts too,
    /// and must not become deletable by hosts for that.
    pub managed: bool,
}

/// The allocated namespaces of a subsystem at one moment, by NSID.
#[derive(Clone, Debug, Default)]
pub struct NamespaceTable {
    /// By NSID - 1.
    entries: Vec<Option<TableEntry>>,
}

impl NamespaceTable {
    /// The entry of an allocated NSID.
    pub fn get(&self, id: NamespaceId) -> Option<&TableEntry> {
        let slot = (id.0 as usize).checked_sub(1)?;
        self.entries.get(slot)?.as_ref()
    }

    /// Allocated entries in NSID order.
    pub fn entries(&self) -> impl Iterator<Item = &TableEntry> {
        self.entries.iter().flatten()
    }

    /// Allocated NSIDs in ascending order.
    pub fn allocated_ids(&self) -> impl Iterator<Item = NamespaceId> + '_ {
        self.entries().map(|entry| entry.namespace.id)
    }

    /// True when the NSID is allocated.
    pub fn contains(&self, id: NamespaceId) -> bool {
        self.get(id).is_some()
    }

    /// Lowest NSID in 1..=max that is not allocated.
    pub fn lowest_free_id(&self, max: u32) -> Option<NamespaceId> {
        (1..=max).map(NamespaceId).find(|&id| !self.contains(id))
    }

    /// Adds or replaces the entry for its NSID (NSID already checked in range).
    pub(crate) fn insert(&mut self, entry: TableEntry) {
        let slot = entry.namespace.id.0 as usize - 1;
        match self.entries.get_mut(slot) {
            Some(place) => *place = Some(entry),
            None => {
                self.entries.resize(slot, None);
                self.entries.push(Some(entry));
            }
        }
    }

    /// Removes and returns the entry of an NSID.
    pub(crate) fn remove(&mut self, id: NamespaceId) -> Option<TableEntry> {
        let slot = (id.0 as usize).checked_sub(1)?;
        let removed = self.entries.get_mut(slot)?.take();
        while matches!(self.entries.last(), Some(None)) {
            self.entries.pop();
        }
        removed
    }
}

/// A connection's view: the namespaces active for its controller's host. The data
/// is shared by every queue of the controller ([`SharedView`]): with 4,096
/// namespaces it is about 80 KiB, which a host opening 32 I/O queues would otherwise
/// hold 33 times.
#[derive(Debug, Default)]
pub(crate) struct NamespaceView {
    data: Arc<ViewData>,
}

/// What a view holds, built once per subsystem generation and controller.
#[derive(Debug, Default)]
pub(crate) struct ViewData {
    /// Subsystem generation the view was built from; `None` before the first build.
    generation: Option<u64>,
    /// Active namespaces by NSID - 1.
    active: Vec<Option<Arc<Namespace>>>,
    /// Active NSIDs in ascending order.
    active_ids: Vec<NamespaceId>,
    /// This host's QoS limits on each active namespace, by NSID - 1 (looked up here,
    /// at a rebuild, never on the I/O path).
    host_qos: Vec<Option<Arc<crate::qos::QosBuckets>>>,
}

/// The newest view a controller's queues built, for its other queues to take instead
/// of building their own. Locked only when the subsystem's generation changed. Weak:
/// the view holds its namespaces (and so their backends, an RBD image open), and a
/// controller may outlive its queues; a removed namespace's image must close once
/// the last queue that saw it moved on.
#[derive(Debug, Default)]
pub(crate) struct SharedView(std::sync::Mutex<std::sync::Weak<ViewData>>);

impl NamespaceView {
    /// A view of exactly `namespaces` (each at its own NSID), for unit tests.
    #[cfg(test)]
    pub(crate) fn of(namespaces: Vec<Arc<Namespace>>) -> NamespaceView {
        let mut data = ViewData { generation: Some(1), ..ViewData::default() };
        for namespace in namespaces {
            let index = namespace.id.0 as usize - 1;
            if data.active.len() <= index {
                data.active.resize(index + 1, None);
                data.host_qos.resize(index + 1, None);
            }
            data.active_ids.push(namespace.id);
            data.active[index] = Some(namespace);
        }
        NamespaceView { data: Arc::new(data) }
    }

    /// Subsystem generation the view was built from; `None` before the first build.
    pub(crate) fn generation(&self) -> Option<u64> {
        self.data.generation
    }

    /// Takes `shared`'s view of `generation`, or builds it from a table for one host
    /// and leaves it there for the controller's other queues.
    pub(crate) fn rebuild(
        &mut self,
        table: &NamespaceTable,
        host_nqn: &str,
        generation: u64,
        qos_defaults: &crate::qos::HostDefaults,
        shared: &SharedView,
    ) {
        let mut newest = shared.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(data) = newest.upgrade().filter(|data| data.generation == Some(generation)) {
            self.data = data;
            return;
        }
        let data = Arc::new(ViewData::build(table, host_nqn, generation, qos_defaults));
        *newest = Arc::downgrade(&data);
        self.data = data;
    }

    /// The active namespace with this NSID.
    pub(crate) fn get(&self, id: NamespaceId) -> Option<&Arc<Namespace>> {
        let slot = (id.0 as usize).checked_sub(1)?;
        self.data.active.get(slot)?.as_ref()
    }

    /// This host's QoS limits on the active namespace with this NSID.
    pub(crate) fn host_qos(&self, id: NamespaceId) -> Option<&Arc<crate::qos::QosBuckets>> {
        let slot = (id.0 as usize).checked_sub(1)?;
        self.data.host_qos.get(slot)?.as_ref()
    }

    /// Active NSIDs in ascending order.
    pub(crate) fn active_ids(&self) -> &[NamespaceId] {
        &self.data.active_ids
    }
}

impl ViewData {
    /// The view of a table for one host.
    fn build(table: &NamespaceTable, host_nqn: &str, generation: u64, qos_defaults: &crate::qos::HostDefaults) -> Self {
        let mut view = ViewData::default();
        for entry in table.entries() {
            if !entry.attachment.includes(host_nqn) {
                continue;
            }
            let slot = entry.namespace.id.0 as usize - 1;
            let namespace = Some(Arc::clone(&entry.namespace));
            match view.active.get_mut(slot) {
                Some(place) => *place = namespace,
                None => {
                    view.active.resize(slot, None);
                    view.active.push(namespace);
                }
            }
            let host_qos = Some(entry.namespace.qos.for_host_or(host_nqn, || qos_defaults.of(host_nqn)));
            match view.host_qos.get_mut(slot) {
                Some(place) => *place = host_qos,
                None => {
                    view.host_qos.resize(slot, None);
                    view.host_qos.push(host_qos);
                }
            }
            view.active_ids.push(entry.namespace.id);
        }
        view.generation = Some(generation);
        view
    }
}

/// Which controllers must hear about a change: those of these hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceChange {
    pub namespace_id: NamespaceId,
    pub hosts: Attachment,
}

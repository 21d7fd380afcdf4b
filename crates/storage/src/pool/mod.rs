//! A storage pool: many namespaces ("carves") cut out of one backend.
//!
//! # Space
//! The backend is divided into fixed allocation units (1 MiB by default). A thick carve
//! reserves one contiguous run of units at create (first fit over the free units); a thin
//! carve reserves nothing and maps a unit on the first write into it, through a per-carve
//! unit map of atomics (reads and already-mapped writes take no lock; only the
//! allocation of a new unit takes the pool lock). A write that cannot get its units fails
//! with [`IoError::NoSpace`] on that command only. Every unit belongs to at most one
//! carve by construction, and a loaded table that breaks this is rejected.
//!
//! # Free space reads as zeroes
//! A fresh pool zeroes its backend once, and a deleted carve's units are zeroed (and
//! flushed) before they are freed, so a new thick carve or a newly mapped thin unit never
//! exposes another namespace's data and a thin unit's unwritten part reads as zeroes
//! without zeroing it on the write path (which would race with writes from other queues
//! into the same unit).
//!
//! # Persistence
//! The table ([`CarveRecord`]s: id, NGUID, UUID, size, thin, extents or unit map) is
//! saved on every create and delete, and thin mappings made by writes are saved before a
//! Flush or FUA write to that carve completes (so the mapping of any data a host was told
//! is durable is itself durable). Saving is a blocking file write, so the I/O path never
//! does it: a Flush or FUA write that finds mappings unsaved asks the pool's
//! [`ServiceExecutor`] for a save and completes when both its data and that save are
//! done. Saves run one at a time (snapshot, then write, under the save lock), never
//! under the state lock that allocation takes, so an I/O thread mapping a unit waits
//! only for memory updates. Create, delete and binding changes save on their caller's
//! thread: the management thread or a service job, never an I/O thread.
//!
//! # Deleting
//! The caller detaches a carve from every controller (no queue submitting) before
//! deleting it; I/O submitted to a deleted carve's old handle fails with `Internal`.

mod carve;
mod table;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::service::{debug_assert_may_block, process_service, ServiceExecutor, Ticket};
use crate::{Backend, Geometry, GrowError, IoError, IoOp, IoRequest, LiveGeometry};
use carve::{CarveBackend, CarveLayout, Placement, ThinMap};
use table::{units_for_blocks, TableFile, TABLE_VERSION};

pub use table::{CarveRecord, MemoryTable, NamespaceBinding, TableStore, UnitExtent, UnitMapping};

/// Default allocation unit of a new pool.
pub const DEFAULT_UNIT_SIZE_BYTES: u64 = 1 << 20;
/// Largest thin carve, in units: the unit map costs 8 bytes per unit, so this caps a
/// hostile create at 128 MiB of map (16 TiB with 1 MiB units).
pub const MAX_THIN_UNITS: u64 = 1 << 24;
/// How long pool management I/O (zeroing on create/delete) waits for the backend.
const MANAGEMENT_IO_TIMEOUT: Duration = Duration::from_secs(60);

/// A carve's pool-unique id (1-based; never reused within a pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CarvedId(pub u32);

/// Why a pool operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Not enough free space for a thick carve (the target maps this to the NVMe
    /// capacity status).
    #[error("not enough free space in the pool")]
    NoSpace,
    /// No carve with this id.
    #[error("no carve with id {}", .0.0)]
    NotFound(CarvedId),
    /// The requested size is zero, overflows, or exceeds the thin limit.
    #[error("invalid carve size of {0} blocks")]
    InvalidSize(u64),
    /// The allocation unit is not a power of two multiple of the block size, or the
    /// backend holds less than one unit.
    #[error("allocation unit of {unit_size_bytes} bytes does not fit a backend with {block_size_bytes}-byte blocks and {capacity_bytes} bytes")]
    InvalidUnitSize {
        /// The rejected unit size.
        unit_size_bytes: u64,
        /// The backend's block size.
        block_size_bytes: u32,
        /// The backend's capacity.
        capacity_bytes: u64,
    },
    /// The persisted table is unreadable or inconsistent (overlaps, out of range).
    #[error("corrupt pool table: {0}")]
    CorruptTable(String),
    /// Reading or writing the table failed.
    #[error("pool table I/O: {0}")]
    TableIo(String),
    /// Zeroing units on the backend failed.
    #[error("pool backend I/O failed: {0}")]
    Device(IoError),
}

/// Shared by the pool handle and every carve view.
struct PoolShared {
    backend: Arc<dyn Backend>,
    store: TableStore,
    block_size_bytes: u32,
    unit_size_bytes: u64,
    unit_blocks: u64,
    unit_count: u64,
    state: Mutex<PoolState>,
    /// Thin mappings made so far (raised under the state lock with each one).
    mapped_generation: AtomicU64,
    /// The mapping generation of the last save that reached the store: mappings up to
    /// it are durable. Set only after the write succeeded.
    saved_generation: AtomicU64,
    /// Held from a save's snapshot to the end of its write, and by a table change
    /// from its update through its save (or undo), so saves reach the store in order
    /// and no other save writes a change that is about to be undone.
    save_order: Mutex<()>,
    /// Where blocking work (table saves asked for by the I/O path, zeroing) runs.
    service: Arc<dyn ServiceExecutor>,
    /// Flushes and FUA writes waiting for a save of the thin mappings.
    durability: Mutex<DurabilityWaiters>,
}

/// Waiters for the next save of thin mappings, and whether a save job is queued.
#[derive(Default)]
struct DurabilityWaiters {
    waiters: Vec<Ticket<Result<(), IoError>>>,
    job_queued: bool,
}

/// A poisoned pool lock carries no information: every update completes before it can
/// panic-free return, and a panic elsewhere leaves the value consistent.
fn lock_ignoring_poison<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct PoolState {
    next_id: u32,
    carves: BTreeMap<CarvedId, CarveEntry>,
    used_units: Vec<bool>,
    free_units: u64,
    /// Where the next thin allocation starts looking, so allocation is not quadratic.
    allocation_hint: u64,
}

struct CarveEntry {
    record: CarveRecord,
    layout: Arc<CarveLayout>,
}

impl PoolShared {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        lock_ignoring_poison(&self.state)
    }

    /// Maps `logical_unit` of a thin carve to a free unit (lowest free from the hint).
    /// `shared_map` is loaded under the lock: a carve growing at the same time swaps
    /// in a larger copy under it, and the mapping must land in the map that stays.
    fn allocate_unit(&self, shared_map: &ArcSwap<ThinMap>, logical_unit: u64) -> Result<(), IoError> {
        let mut state = self.lock();
        let map = shared_map.load();
        if map.physical_unit(logical_unit).is_some() {
            return Ok(()); // Another queue mapped it while we waited for the lock.
        }
        if state.free_units == 0 {
            return Err(IoError::NoSpace);
        }
        let count = self.unit_count as usize;
        let hint = state.allocation_hint as usize;
        let found = (hint..count).chain(0..hint).find(|&unit| !state.used_units[unit]).ok_or(IoError::NoSpace)?;
        state.used_units[found] = true;
        state.free_units -= 1;
        state.allocation_hint = (found as u64 + 1) % self.unit_count;
        map.units[logical_unit as usize].store(found as u64 + 1, Ordering::Release);
        self.mapped_generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// True when every thin mapping made so far is in a save that reached the store.
    fn mappings_saved(&self) -> bool {
        self.saved_generation.load(Ordering::Acquire) >= self.mapped_generation.load(Ordering::Acquire)
    }

    /// Saves the table if thin mappings were made since the last save. Blocking.
    fn persist_if_dirty(&self) -> Result<(), PoolError> {
        let _order = lock_ignoring_poison(&self.save_order);
        // Under the save lock, a save in flight has finished: "saved" means durable.
        if self.mappings_saved() {
            return Ok(());
        }
        self.save_ordered(false)
    }

    /// Saves the table. Blocking: never call it from an I/O thread.
    fn save(&self) -> Result<(), PoolError> {
        let _order = lock_ignoring_poison(&self.save_order);
        self.save_ordered(false)
    }

    /// Saves the table (the caller holds `save_order`); `clean_shutdown` only from the
    /// closing pool. The carve list and the mapping generation are read under the
    /// state lock, the thin maps (atomics) after it, so allocation on I/O threads
    /// waits only for the list to be copied; a map may show mappings newer than the
    /// generation, which only saves more than the generation promises.
    fn save_ordered(&self, clean_shutdown: bool) -> Result<(), PoolError> {
        let (generation, next_id, entries) = {
            let state = self.lock();
            let entries: Vec<(CarveRecord, Arc<CarveLayout>)> =
                state.carves.values().map(|entry| (entry.record.clone(), Arc::clone(&entry.layout))).collect();
            (self.mapped_generation.load(Ordering::Acquire), state.next_id, entries)
        };
        let table = TableFile {
            version: TABLE_VERSION,
            block_size_bytes: self.block_size_bytes,
            unit_size_bytes: self.unit_size_bytes,
            next_id,
            carves: entries.into_iter().map(|(record, layout)| with_unit_map(record, &layout)).collect(),
            clean_shutdown,
        };
        self.store.save(&table)?;
        self.saved_generation.fetch_max(generation, Ordering::AcqRel);
        Ok(())
    }

    /// For a Flush or FUA write of a thin carve: `None` when every mapping made so far
    /// is saved, else a ticket finished (and `waker` woken) once a save that covers
    /// them is durable. The save runs on the service executor; waiters that arrive
    /// while one is queued share it.
    fn request_durable(self: &Arc<Self>, waker: Option<&Waker>) -> Option<Ticket<Result<(), IoError>>> {
        if self.mappings_saved() {
            return None;
        }
        let ticket = Ticket::new(waker.cloned());
        let queue_job = {
            let mut durability = lock_ignoring_poison(&self.durability);
            durability.waiters.push(ticket.clone());
            !std::mem::replace(&mut durability.job_queued, true)
        };
        if queue_job {
            let shared = Arc::clone(self);
            self.service.execute(Box::new(move || shared.serve_durability_waiters()));
        }
        Some(ticket)
    }

    /// The service job behind [`PoolShared::request_durable`]: saves until no waiter
    /// is left. Waiters are taken before the snapshot, so each one's mappings (made
    /// before it asked) are in the save that finishes it.
    fn serve_durability_waiters(&self) {
        loop {
            let waiters = {
                let mut durability = lock_ignoring_poison(&self.durability);
                if durability.waiters.is_empty() {
                    durability.job_queued = false;
                    return;
                }
                std::mem::take(&mut durability.waiters)
            };
            // A panic in the save must not leave waiters (and every later Flush of the
            // pool, behind `job_queued`) waiting forever.
            let saved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.persist_if_dirty()));
            let result = match saved {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) | Err(_) => Err(IoError::Internal),
            };
            for waiter in waiters {
                waiter.finish(result);
            }
        }
    }
}

impl PoolShared {
    /// [`Backend::grow`] of the carve behind `layout`: a thin carve gets a larger unit
    /// map (new units read as zeroes, unmapped); a thick carve takes the free units
    /// right after its run, since it stays one contiguous run. Saved before the new
    /// blocks are served; on a failed save nothing changes.
    fn grow(&self, layout: &Arc<CarveLayout>, block_count: u64) -> Result<Geometry, GrowError> {
        let current = layout.geometry.get();
        let wanted = current.grown_to(block_count)?;
        if wanted == current {
            return Ok(current);
        }
        let too_large =
            |reason: &str| GrowError::TooLarge { requested_blocks: block_count, reason: reason.to_string() };
        let units = units_for_blocks(block_count, self.unit_blocks)
            .ok_or_else(|| too_large("the capacity overflows 64 bits"))?;
        // A thin carve's larger map is made before the pool lock, which I/O threads
        // mapping units wait for: up to 128 MiB to allocate.
        let larger_map = match &layout.placement {
            Placement::Thin { .. } if units > MAX_THIN_UNITS => {
                return Err(too_large(&format!("a thin carve maps at most {MAX_THIN_UNITS} units")));
            }
            Placement::Thin { map } if units > map.load().units.len() as u64 => Some(ThinMap::new(units)),
            _ => None,
        };
        // Held through the save and any undo (see `Pool::create_bound`).
        let _order = lock_ignoring_poison(&self.save_order);
        let mut guard = self.lock();
        let state = &mut *guard;
        // Under the lock, so a delete cannot take the carve's units in between.
        let found = state.carves.values_mut().find(|entry| Arc::ptr_eq(&entry.layout, layout));
        let Some(entry) = found.filter(|_| !layout.deleted.load(Ordering::Acquire)) else {
            return Err(GrowError::Failed("the carve was deleted".to_string()));
        };
        let previous_record = entry.record.clone();
        let mut added: Option<UnitExtent> = None;
        match &layout.placement {
            Placement::Thin { map } => {
                if let Some(larger) = larger_map {
                    // Mappings only appear under this lock, so the copy misses none.
                    let old = map.load();
                    for (entry, old_entry) in larger.units.iter().zip(old.units.iter()) {
                        entry.store(old_entry.load(Ordering::Acquire), Ordering::Relaxed);
                    }
                    map.store(Arc::new(larger));
                }
            }
            Placement::Thick { .. } => {
                let extent = entry.record.extents[0];
                if units > extent.unit_count {
                    let from = extent.start_unit + extent.unit_count;
                    let to = extent.start_unit + units;
                    if to > self.unit_count {
                        return Err(GrowError::NoSpace(format!(
                            "a thick carve stays one contiguous run of units, and {} more would run past the end of the pool",
                            units - extent.unit_count
                        )));
                    }
                    if state.used_units[from as usize..to as usize].iter().any(|&used| used) {
                        return Err(GrowError::NoSpace(format!(
                            "a thick carve stays one contiguous run of units, and units {from}..{to} after it are in use \
                             by other carves; make the volume thin, or move it to a pool with room"
                        )));
                    }
                    state.used_units[from as usize..to as usize].fill(true);
                    state.free_units -= to - from;
                    entry.record.extents[0].unit_count = units;
                    added = Some(UnitExtent { start_unit: from, unit_count: to - from });
                }
            }
        }
        entry.record.size_blocks = block_count;
        drop(guard);
        if let Err(error) = self.save_ordered(false) {
            // Not persisted, so not grown: undo (a larger thin map is harmless, since
            // the geometry never rose).
            let mut state = self.lock();
            if let Some(extent) = added {
                let (from, to) = (extent.start_unit as usize, (extent.start_unit + extent.unit_count) as usize);
                state.used_units[from..to].fill(false);
                state.free_units += extent.unit_count;
            }
            if let Some(entry) = state.carves.values_mut().find(|entry| Arc::ptr_eq(&entry.layout, layout)) {
                entry.record = previous_record;
            }
            return Err(GrowError::Failed(format!("the pool table could not be saved: {error}")));
        }
        Ok(layout.geometry.grow_to(block_count))
    }
}

impl CarveEntry {
    /// The record with the thin unit map read from the live atomics.
    fn snapshot(&self) -> CarveRecord {
        with_unit_map(self.record.clone(), &self.layout)
    }
}

/// `record` with its thin unit map read from the live atomics of `layout`.
fn with_unit_map(mut record: CarveRecord, layout: &CarveLayout) -> CarveRecord {
    if let Placement::Thin { map } = &layout.placement {
        let map = map.load();
        record.unit_map = (0..map.units.len() as u64)
            .filter_map(|logical_unit| {
                map.physical_unit(logical_unit).map(|physical_unit| UnitMapping { logical_unit, physical_unit })
            })
            .collect();
    }
    record
}

/// A pool of carved namespaces over one backend; see the module docs.
pub struct Pool {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("unit_size_bytes", &self.shared.unit_size_bytes)
            .field("unit_count", &self.shared.unit_count)
            .finish()
    }
}

impl Pool {
    /// Opens the pool stored in `table`, or creates a new one (1 MiB units) when the
    /// table is empty.
    pub fn open(backend: Arc<dyn Backend>, table: TableStore) -> Result<Pool, PoolError> {
        Self::open_with_unit_size(backend, table, DEFAULT_UNIT_SIZE_BYTES)
    }

    /// Like [`Pool::open`] with a chosen allocation unit for a new pool; an existing table
    /// keeps the unit it was created with.
    pub fn open_with_unit_size(
        backend: Arc<dyn Backend>,
        table: TableStore,
        unit_size_bytes: u64,
    ) -> Result<Pool, PoolError> {
        Self::open_with_service(backend, table, unit_size_bytes, process_service())
    }

    /// Like [`Pool::open_with_unit_size`], with blocking work (table saves the I/O path
    /// asks for, zeroing of deleted namespaces) run by `service` instead of the
    /// process's service thread. Opening itself blocks (it may zero free space).
    pub fn open_with_service(
        backend: Arc<dyn Backend>,
        table: TableStore,
        unit_size_bytes: u64,
        service: Arc<dyn ServiceExecutor>,
    ) -> Result<Pool, PoolError> {
        let geometry = backend.geometry();
        let block_size_bytes = geometry.block_size_bytes;
        let loaded = table.load()?;
        let unit_size_bytes = loaded.as_ref().map_or(unit_size_bytes, |loaded| loaded.unit_size_bytes);
        let unit_count = geometry.capacity_bytes() / unit_size_bytes.max(1);
        if !unit_size_bytes.is_power_of_two()
            || unit_size_bytes < u64::from(block_size_bytes)
            || unit_count == 0
            || usize::try_from(unit_count).is_err()
        {
            let error = PoolError::InvalidUnitSize {
                unit_size_bytes,
                block_size_bytes,
                capacity_bytes: geometry.capacity_bytes(),
            };
            return Err(match loaded {
                Some(_) => PoolError::CorruptTable(error.to_string()),
                None => error,
            });
        }
        let unit_blocks = unit_size_bytes / u64::from(block_size_bytes);
        let fresh = loaded.is_none();
        let left_by_crash = loaded.as_ref().is_some_and(|table| !table.clean_shutdown);
        let loaded = loaded.unwrap_or(TableFile {
            version: TABLE_VERSION,
            block_size_bytes,
            unit_size_bytes,
            next_id: 1,
            carves: Vec::new(),
            clean_shutdown: false,
        });
        let used_units = loaded.validate(block_size_bytes, unit_count)?;
        let free_units = used_units.iter().filter(|&&used| !used).count() as u64;
        let shared = Arc::new(PoolShared {
            backend,
            store: table,
            block_size_bytes,
            unit_size_bytes,
            unit_blocks,
            unit_count,
            state: Mutex::new(PoolState {
                next_id: loaded.next_id,
                carves: BTreeMap::new(),
                used_units,
                free_units,
                allocation_hint: 0,
            }),
            mapped_generation: AtomicU64::new(0),
            saved_generation: AtomicU64::new(0),
            save_order: Mutex::new(()),
            service,
            durability: Mutex::new(DurabilityWaiters::default()),
        });
        let pool = Pool { shared };
        {
            let mut state = pool.shared.lock();
            for record in loaded.carves {
                let entry = pool.entry_for(record);
                state.carves.insert(entry.record.id, entry);
            }
        }
        if fresh {
            // Establish "free space reads as zeroes" before the first carve exists.
            pool.zero_units(&[UnitExtent { start_unit: 0, unit_count }])?;
            pool.shared.save()?;
        } else if left_by_crash {
            // A thin unit mapped after the last save was free again in the table the
            // crash left, with the data written into it: zero every free unit before
            // one is handed out, or a carve could read another carve's blocks. The
            // table keeps saying "not clean" until then, so a crash here repeats this.
            let free = pool.free_extents();
            pool.zero_units(&free)?;
        }
        // Until a clean close says otherwise, this table is one a crash left.
        pool.shared.save()?;
        Ok(pool)
    }

    /// Runs of free units.
    fn free_extents(&self) -> Vec<UnitExtent> {
        let state = self.shared.lock();
        let mut extents: Vec<UnitExtent> = Vec::new();
        for (unit, &used) in state.used_units.iter().enumerate() {
            if used {
                continue;
            }
            match extents.last_mut() {
                Some(last) if last.start_unit + last.unit_count == unit as u64 => last.unit_count += 1,
                _ => extents.push(UnitExtent { start_unit: unit as u64, unit_count: 1 }),
            }
        }
        extents
    }

    fn entry_for(&self, mut record: CarveRecord) -> CarveEntry {
        let shared = &self.shared;
        let placement = if record.thin {
            let units = units_for_blocks(record.size_blocks, shared.unit_blocks).unwrap_or(0);
            let map = ThinMap::new(units);
            for mapping in record.unit_map.drain(..) {
                map.units[mapping.logical_unit as usize].store(mapping.physical_unit + 1, Ordering::Relaxed);
            }
            Placement::Thin { map: ArcSwap::from_pointee(map) }
        } else {
            Placement::Thick { start_lba: record.extents[0].start_unit * shared.unit_blocks }
        };
        let layout = Arc::new(CarveLayout {
            geometry: LiveGeometry::new(Geometry {
                block_size_bytes: shared.block_size_bytes,
                block_count: record.size_blocks,
            }),
            unit_blocks: shared.unit_blocks,
            placement,
            pool: Arc::clone(shared),
            deleted: Arc::new(AtomicBool::new(false)),
        });
        CarveEntry { record, layout }
    }

    /// Carves a namespace of `size_blocks` blocks (of the backend's block size).
    pub fn create(&self, size_blocks: u64, thin: bool) -> Result<CarvedId, PoolError> {
        self.create_bound(size_blocks, thin, None)
    }

    /// Like [`Pool::create`], recording how the carve is exported in the same table
    /// save (so a crash cannot leave a carve without its NSID).
    pub fn create_bound(
        &self,
        size_blocks: u64,
        thin: bool,
        binding: Option<NamespaceBinding>,
    ) -> Result<CarvedId, PoolError> {
        self.create_with_identity(size_blocks, thin, binding, CarveIdentity::default())
    }

    /// Like [`Pool::create_bound`], with the NGUID and UUID the caller chose (each
    /// one not given is generated): an orchestrator that names its volumes derives
    /// the UUID from the name, so a retried creation finds what the first one made.
    pub fn create_with_identity(
        &self,
        size_blocks: u64,
        thin: bool,
        binding: Option<NamespaceBinding>,
        identity: CarveIdentity,
    ) -> Result<CarvedId, PoolError> {
        let shared = &self.shared;
        let geometry = Geometry { block_size_bytes: shared.block_size_bytes, block_count: size_blocks };
        let units = units_for_blocks(size_blocks, shared.unit_blocks)
            .filter(|_| geometry.validate().is_ok())
            .ok_or(PoolError::InvalidSize(size_blocks))?;
        if thin && units > MAX_THIN_UNITS {
            return Err(PoolError::InvalidSize(size_blocks));
        }
        // Held through the save and any undo: no other save may record a carve whose
        // creation is about to fail.
        let _order = lock_ignoring_poison(&shared.save_order);
        let mut state = shared.lock();
        let extents = if thin {
            Vec::new()
        } else {
            let start_unit = first_fit(&state.used_units, units).ok_or(PoolError::NoSpace)?;
            vec![UnitExtent { start_unit, unit_count: units }]
        };
        let id = CarvedId(state.next_id);
        let next_id = state.next_id.checked_add(1).ok_or(PoolError::NoSpace)?;
        let (generated_nguid, generated_uuid) = new_identity(id);
        let nguid = identity.nguid.unwrap_or(generated_nguid);
        let uuid = identity.uuid.unwrap_or(generated_uuid);
        let record =
            CarveRecord { id, nguid, uuid, size_blocks, thin, extents: extents.clone(), unit_map: Vec::new(), binding };
        for extent in &extents {
            for unit in extent.start_unit..extent.start_unit + extent.unit_count {
                state.used_units[unit as usize] = true;
            }
            state.free_units -= extent.unit_count;
        }
        state.next_id = next_id;
        let entry = self.entry_for(record);
        state.carves.insert(id, entry);
        drop(state);
        if let Err(error) = shared.save_ordered(false) {
            // Not persisted, so not created: undo.
            let mut state = shared.lock();
            state.carves.remove(&id);
            for extent in &extents {
                for unit in extent.start_unit..extent.start_unit + extent.unit_count {
                    state.used_units[unit as usize] = false;
                }
                state.free_units += extent.unit_count;
            }
            return Err(error);
        }
        Ok(id)
    }

    /// Deletes a carve: its I/O starts failing, its units are zeroed and freed.
    pub fn delete(&self, id: CarvedId) -> Result<(), PoolError> {
        let units = {
            let state = self.shared.lock();
            let entry = state.carves.get(&id).ok_or(PoolError::NotFound(id))?;
            entry.layout.deleted.store(true, Ordering::Release);
            let record = entry.snapshot();
            let mut units = record.extents;
            units.extend(
                record.unit_map.iter().map(|mapping| UnitExtent { start_unit: mapping.physical_unit, unit_count: 1 }),
            );
            units
        };
        // Zeroed outside the lock (it is device I/O); the carve stays in the table until
        // its units read as zeroes, so a crash here leaves it intact, not leaked.
        self.zero_units(&units)?;
        let mut state = self.shared.lock();
        state.carves.remove(&id);
        for extent in &units {
            for unit in extent.start_unit..extent.start_unit + extent.unit_count {
                state.used_units[unit as usize] = false;
            }
            state.free_units += extent.unit_count;
        }
        drop(state);
        self.shared.save()
    }

    /// Changes how a carve is exported; persisted before it returns. On a failed save
    /// the old binding stays in force.
    pub fn set_binding(&self, id: CarvedId, binding: Option<NamespaceBinding>) -> Result<(), PoolError> {
        // Held through the save and any undo (see `create_bound`).
        let _order = lock_ignoring_poison(&self.shared.save_order);
        let mut state = self.shared.lock();
        let entry = state.carves.get_mut(&id).ok_or(PoolError::NotFound(id))?;
        let previous = std::mem::replace(&mut entry.record.binding, binding);
        drop(state);
        if let Err(error) = self.shared.save_ordered(false) {
            let mut state = self.shared.lock();
            if let Some(entry) = state.carves.get_mut(&id) {
                entry.record.binding = previous;
            }
            return Err(error);
        }
        Ok(())
    }

    /// Blocks of the carve backed by pool space: its size when thick, the mapped units
    /// (capped at its size) when thin. NUSE of the namespace.
    pub fn allocated_blocks(&self, id: CarvedId) -> Result<u64, PoolError> {
        let state = self.shared.lock();
        let entry = state.carves.get(&id).ok_or(PoolError::NotFound(id))?;
        Ok(match &entry.layout.placement {
            Placement::Thick { .. } => entry.record.size_blocks,
            Placement::Thin { map } => {
                let map = map.load();
                let mapped =
                    (0..map.units.len() as u64).filter(|&unit| map.physical_unit(unit).is_some()).count() as u64;
                (mapped * self.shared.unit_blocks).min(entry.record.size_blocks)
            }
        })
    }

    /// VWC of the pool's backend, which every carve inherits.
    pub fn has_volatile_write_cache(&self) -> bool {
        self.shared.backend.has_volatile_write_cache()
    }

    /// Block size of every carve (the backend's).
    pub fn block_size_bytes(&self) -> u32 {
        self.shared.block_size_bytes
    }

    /// Bytes the pool can hand out (whole units).
    pub fn capacity_bytes(&self) -> u64 {
        self.shared.unit_count * self.shared.unit_size_bytes
    }

    /// Bytes in free units.
    pub fn free_bytes(&self) -> u64 {
        self.free_units() * self.shared.unit_size_bytes
    }

    /// A backend view of the carve.
    pub fn get(&self, id: CarvedId) -> Result<Arc<dyn Backend>, PoolError> {
        let state = self.shared.lock();
        let entry = state.carves.get(&id).ok_or(PoolError::NotFound(id))?;
        Ok(Arc::new(CarveBackend { layout: Arc::clone(&entry.layout) }))
    }

    /// The identity and placement of one carve (thin map as of now).
    pub fn record(&self, id: CarvedId) -> Result<CarveRecord, PoolError> {
        let state = self.shared.lock();
        let entry = state.carves.get(&id).ok_or(PoolError::NotFound(id))?;
        Ok(entry.snapshot())
    }

    /// Every carve, in id order.
    pub fn records(&self) -> Vec<CarveRecord> {
        let state = self.shared.lock();
        state.carves.values().map(CarveEntry::snapshot).collect()
    }

    /// Saves thin mappings made since the last save (Flush asks for this per carve,
    /// through the service executor). Blocking.
    pub fn sync(&self) -> Result<(), PoolError> {
        self.shared.persist_if_dirty()
    }

    /// Where this pool runs blocking work; callers with pool work of their own that
    /// must not run on an I/O thread (deleting a namespace's carve) use it too.
    pub fn service(&self) -> Arc<dyn ServiceExecutor> {
        Arc::clone(&self.shared.service)
    }

    /// The allocation unit.
    pub fn unit_size_bytes(&self) -> u64 {
        self.shared.unit_size_bytes
    }

    /// Units in the pool.
    pub fn unit_count(&self) -> u64 {
        self.shared.unit_count
    }

    /// Units not used by any carve.
    pub fn free_units(&self) -> u64 {
        self.shared.lock().free_units
    }

    /// Writes zeroes over the extents (merged where adjacent) and flushes, one request at
    /// a time on a private queue.
    fn zero_units(&self, extents: &[UnitExtent]) -> Result<(), PoolError> {
        debug_assert_may_block("zeroing pool units");
        let unit_blocks = self.shared.unit_blocks;
        let mut sorted = extents.to_vec();
        sorted.sort_by_key(|extent| extent.start_unit);
        let mut merged: Vec<UnitExtent> = Vec::with_capacity(sorted.len());
        for extent in sorted {
            match merged.last_mut() {
                Some(last) if last.start_unit + last.unit_count == extent.start_unit => {
                    last.unit_count += extent.unit_count;
                }
                _ => merged.push(extent),
            }
        }
        let ops = merged
            .iter()
            .map(|extent| IoOp::WriteZeroes {
                lba: extent.start_unit * unit_blocks,
                blocks: extent.unit_count * unit_blocks,
                deallocate: true,
                force_unit_access: false,
            })
            .chain(std::iter::once(IoOp::Flush));
        let mut queue = self.shared.backend.open_queue();
        let mut completions = Vec::with_capacity(1);
        for (token, op) in ops.enumerate() {
            queue.submit(IoRequest { token: token as u64, op, buffer: Vec::new() });
            let deadline = Instant::now() + MANAGEMENT_IO_TIMEOUT;
            while completions.is_empty() {
                queue.reap(&mut completions);
                if completions.is_empty() {
                    if Instant::now() > deadline {
                        return Err(PoolError::Device(IoError::Internal));
                    }
                    std::thread::yield_now();
                }
            }
            if let Some(completion) = completions.pop() {
                completion.result.map_err(PoolError::Device)?;
            }
        }
        Ok(())
    }
}

impl Drop for Pool {
    /// A clean close: the mappings made since the last Flush are saved, and the table
    /// says it was closed cleanly (so the next open need not zero the free space).
    /// Dropped on an I/O thread (the last holder was a connection's namespace), there
    /// is no clean-close save: it would block that thread, and deferred it could land
    /// after a reload reopened the same table. The table then reads as one a crash
    /// left, which costs the next open a zeroing of the free units, nothing more.
    fn drop(&mut self) {
        if crate::service::is_io_thread() {
            return;
        }
        let _order = lock_ignoring_poison(&self.shared.save_order);
        let _ = self.shared.save_ordered(true);
    }
}

/// Lowest start of `count` consecutive free units.
fn first_fit(used_units: &[bool], count: u64) -> Option<u64> {
    let mut run_start = 0usize;
    let mut run_length = 0u64;
    for (unit, &used) in used_units.iter().enumerate() {
        if used {
            run_length = 0;
            run_start = unit + 1;
        } else {
            run_length += 1;
            if run_length == count {
                return Some(run_start as u64);
            }
        }
    }
    None
}

/// Random NGUID and UUID (version 4, RFC 4122 variant). The standard library's hasher
/// keys are random per process; mixing in the time, the id and a counter makes every
/// identity distinct without a `rand` dependency.
/// The identifiers a new carve is given (None: generated).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CarveIdentity {
    /// NVMe NGUID.
    pub nguid: Option<[u8; 16]>,
    /// NVMe namespace UUID.
    pub uuid: Option<[u8; 16]>,
}

fn new_identity(id: CarvedId) -> ([u8; 16], [u8; 16]) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut random_words = [0u64; 4];
    for (index, word) in random_words.iter_mut().enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(id.0);
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_usize(index);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
        hasher.write_u128(nanos);
        *word = hasher.finish();
    }
    let mut nguid = [0u8; 16];
    nguid[..8].copy_from_slice(&random_words[0].to_le_bytes());
    nguid[8..].copy_from_slice(&random_words[1].to_le_bytes());
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&random_words[2].to_le_bytes());
    uuid[8..].copy_from_slice(&random_words[3].to_le_bytes());
    uuid[6] = (uuid[6] & 0x0F) | 0x40;
    uuid[8] = (uuid[8] & 0x3F) | 0x80;
    (nguid, uuid)
}

//! NVM subsystems and their namespaces as the target serves them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use nvme_spec::ana::AnaGroupId;
use nvme_spec::NamespaceId;
use storage::{Backend, Pool};

use crate::host_access::{HostAccess, SharedHostAccess};
use crate::limits::MAX_NAMESPACE_ID;
use crate::namespaces::{Attachment, Namespace, NamespaceTable, PoolCarve, TableEntry};
use crate::stats::SubsystemStats;

/// Longest NQN the spec allows (NVMe Base 2.0, "NVMe Qualified Names": 223 bytes).
pub const MAX_NQN_BYTES: usize = 223;

/// Namespace for deriving stable identifiers: NGUID and UUID are UUIDv5 values of the
/// subsystem NQN and NSID, so they survive a restart without being stored anywhere.
const IDENTITY_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x5b1c_e000_4e56_4d65_9f2a_1d0c_7a11_0001);

/// What a namespace is made from (the app builds backends from its config).
pub struct NamespaceSpec {
    /// NSID; 1..=MAX_NAMESPACE_ID.
    pub id: NamespaceId,
    /// The backend serving the blocks.
    pub backend: Arc<dyn Backend>,
    /// NGUID override; derived from the subsystem NQN and NSID when `None`.
    pub nguid: Option<[u8; 16]>,
    /// UUID override; derived from the subsystem NQN and NSID when `None`.
    pub uuid: Option<[u8; 16]>,
    /// ANAGRPID; group 1 when `None`.
    pub ana_group: Option<AnaGroupId>,
}

/// What a subsystem is made from.
pub struct SubsystemSpec {
    /// SUBNQN.
    pub nqn: String,
    /// SN reported in Identify Controller; derived from the NQN when `None`.
    pub serial_number: Option<String>,
    /// MN reported in Identify Controller.
    pub model_number: Option<String>,
    /// Its namespaces.
    pub namespaces: Vec<NamespaceSpec>,
    /// The pool Namespace Management creates namespaces in; `None` turns Namespace
    /// Management off. The pool's carves bound to this subsystem's NQN become
    /// namespaces at start (with their NSIDs, identities and attachments).
    pub pool: Option<Arc<storage::Pool>>,
    /// Which hosts may connect, and their DH-HMAC-CHAP secrets.
    pub hosts: HostAccess,
}

/// An NVM subsystem: an NQN, identity strings and a table of namespaces. The table
/// is replaced as a whole when namespaces change (see `namespaces`); connections
/// notice through `generation`.
pub struct Subsystem {
    /// SUBNQN.
    pub nqn: String,
    /// SN, space padded to 20 bytes when encoded.
    pub serial_number: String,
    /// MN, space padded to 40 bytes when encoded.
    pub model_number: String,
    /// The current namespace table.
    table: RwLock<Arc<NamespaceTable>>,
    /// Bumped after every table swap.
    generation: AtomicU64,
    /// Serialises changes (Namespace Management, Attachment, management API) so each
    /// one reads and replaces the table without another change in between.
    changes: Mutex<()>,
    /// Namespace Management's pool; `None` when the subsystem does not offer it.
    pub pool: Option<Arc<Pool>>,
    /// Index of this subsystem in the target (stable for the target's lifetime).
    pub index: usize,
    /// SMART counters shared by every controller of the subsystem.
    pub stats: SubsystemStats,
    /// Which hosts may connect, and their DH-HMAC-CHAP secrets; replaced while the
    /// subsystem runs by the management API.
    pub hosts: SharedHostAccess,
    /// Each host's QoS limits on every namespace (set by the configuration): a
    /// namespace created later (Namespace Management) holds the host to them too.
    pub qos_host_defaults: crate::qos::HostDefaults,
    /// Where namespaces with PTPL keep their reservations (set by the target).
    reservation_store: std::sync::OnceLock<crate::reservation_store::SharedReservationStore>,
    /// The gateway group's reservation authority, when the subsystem is exported by a
    /// gateway group (then `reservation_store` is unused).
    group_reservations: std::sync::OnceLock<crate::group_reservations::SharedGroupReservations>,
}

impl std::fmt::Debug for Subsystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subsystem")
            .field("nqn", &self.nqn)
            .field("namespaces", &self.table().allocated_ids().count())
            .field("pool", &self.pool.is_some())
            .finish()
    }
}

/// Why a subsystem description cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubsystemError {
    #[error("subsystem NQN {nqn:?} is not valid: {reason}")]
    InvalidNqn { nqn: String, reason: &'static str },
    #[error("subsystem {nqn}: namespace id {nsid} is outside 1..={max}")]
    NamespaceIdOutOfRange { nqn: String, nsid: u32, max: u32 },
    #[error("subsystem {nqn}: namespace id {nsid} is used twice")]
    DuplicateNamespaceId { nqn: String, nsid: u32 },
    #[error("subsystem {nqn}: namespace {nsid} is in ANA group {group}, outside 1..={max}")]
    AnaGroupOutOfRange { nqn: String, nsid: u32, group: u32, max: u32 },
    #[error("subsystem {nqn}: pool carve {carve} cannot be opened: {reason}")]
    PoolCarve { nqn: String, carve: u32, reason: String },
}

/// Checks an NQN: non-empty, at most 223 bytes, printable ASCII, "nqn." prefix.
pub fn validate_nqn(nqn: &str) -> Result<(), &'static str> {
    if nqn.is_empty() {
        return Err("it is empty");
    }
    if nqn.len() > MAX_NQN_BYTES {
        return Err("it is longer than 223 bytes");
    }
    if !nqn.starts_with("nqn.") {
        return Err("it does not start with \"nqn.\"");
    }
    if !nqn.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("it contains spaces or non-printable characters");
    }
    Ok(())
}

impl Subsystem {
    /// Builds a subsystem, deriving missing identifiers. With a pool, the pool's
    /// carves bound to this NQN become namespaces too.
    pub fn new(spec: SubsystemSpec, index: usize) -> Result<Subsystem, SubsystemError> {
        validate_nqn(&spec.nqn).map_err(|reason| SubsystemError::InvalidNqn { nqn: spec.nqn.clone(), reason })?;
        let mut table = NamespaceTable::default();
        let add = |table: &mut NamespaceTable, entry: TableEntry| {
            let nsid = entry.namespace.id.0;
            if nsid == 0 || nsid > MAX_NAMESPACE_ID {
                return Err(SubsystemError::NamespaceIdOutOfRange {
                    nqn: spec.nqn.clone(),
                    nsid,
                    max: MAX_NAMESPACE_ID,
                });
            }
            if table.contains(entry.namespace.id) {
                return Err(SubsystemError::DuplicateNamespaceId { nqn: spec.nqn.clone(), nsid });
            }
            table.insert(entry);
            Ok(())
        };
        for namespace in spec.namespaces {
            let nsid = namespace.id.0;
            if let Some(group) = namespace.ana_group.filter(|group| !crate::ana::valid_group(*group)) {
                return Err(SubsystemError::AnaGroupOutOfRange {
                    nqn: spec.nqn.clone(),
                    nsid,
                    group: group.0,
                    max: crate::limits::MAX_ANA_GROUP_ID,
                });
            }
            let entry = TableEntry {
                namespace: Arc::new(
                    Namespace::new(
                        namespace.id,
                        namespace.backend,
                        namespace.nguid.unwrap_or_else(|| derive_identifier(&spec.nqn, nsid, b"nguid")),
                        namespace.uuid.unwrap_or_else(|| derive_identifier(&spec.nqn, nsid, b"uuid")),
                        None,
                    )
                    .in_ana_group(namespace.ana_group.unwrap_or(crate::ana::DEFAULT_ANA_GROUP)),
                ),
                attachment: Attachment::AllHosts,
                managed: false,
            };
            add(&mut table, entry)?;
        }
        if let Some(pool) = &spec.pool {
            free_orphan_carves(&spec.nqn, pool);
            for record in pool.records() {
                let Some(binding) = record.binding.filter(|binding| binding.subsystem_nqn == spec.nqn) else {
                    continue;
                };
                let backend = pool.get(record.id).map_err(|error| SubsystemError::PoolCarve {
                    nqn: spec.nqn.clone(),
                    carve: record.id.0,
                    reason: error.to_string(),
                })?;
                // A carve the configuration declared is bound to all hosts in the pool
                // table; its configured host list, if any, is applied over it.
                let managed = !binding.all_hosts;
                let attachment =
                    if binding.all_hosts { Attachment::AllHosts } else { Attachment::Hosts(binding.hosts) };
                let carve = PoolCarve { pool: Arc::clone(pool), id: record.id, thin: record.thin };
                let namespace =
                    Namespace::new(NamespaceId(binding.namespace_id), backend, record.nguid, record.uuid, Some(carve));
                add(&mut table, TableEntry { namespace: Arc::new(namespace), attachment, managed })?;
            }
        }
        let serial_number = spec.serial_number.unwrap_or_else(|| derive_serial_number(&spec.nqn));
        Ok(Subsystem {
            model_number: spec.model_number.unwrap_or_else(|| "Sluice NVMe/TCP target".to_string()),
            nqn: spec.nqn,
            serial_number,
            table: RwLock::new(Arc::new(table)),
            generation: AtomicU64::new(0),
            changes: Mutex::new(()),
            pool: spec.pool,
            hosts: SharedHostAccess::new(spec.hosts),
            qos_host_defaults: crate::qos::HostDefaults::default(),
            index,
            stats: SubsystemStats::default(),
            reservation_store: std::sync::OnceLock::new(),
            group_reservations: std::sync::OnceLock::new(),
        })
    }

    /// The current namespace table.
    pub fn table(&self) -> Arc<NamespaceTable> {
        let table = self.table.read().unwrap_or_else(|poison| poison.into_inner());
        Arc::clone(&table)
    }

    /// Changes with every table swap; connections compare it to their view's.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Where this subsystem's blocking work runs (pool table saves of Namespace
    /// Management): the pool's service executor, or the process's.
    pub fn service_executor(&self) -> Arc<dyn storage::service::ServiceExecutor> {
        match &self.pool {
            Some(pool) => pool.service(),
            None => storage::service::process_service(),
        }
    }

    /// Takes the change lock: hold it from reading the table to replacing it.
    pub(crate) fn lock_changes(&self) -> MutexGuard<'_, ()> {
        self.changes.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Swaps in a new table (caller holds the change lock), then bumps the generation
    /// so that a view built from the old table is rebuilt.
    pub(crate) fn replace_table(&self, table: NamespaceTable) {
        if let Some(store) = self.reservation_store.get() {
            for entry in table.entries() {
                crate::ptpl::restore(&entry.namespace, store, &self.nqn);
            }
        }
        // A namespace new to the group is marked unknown before anyone can reach it,
        // and followed only once the table holding it is in place: the authority
        // may install its state at once (on its own thread), and an install that ran
        // before the swap would find no such namespace and leave it unknown for good
        // (every command a path error on this gateway).
        let newly_followed: Vec<Arc<crate::Namespace>> = match self.group_reservations.get() {
            Some(_) => table
                .entries()
                .filter(|entry| mark_for_group(&entry.namespace))
                .map(|entry| Arc::clone(&entry.namespace))
                .collect(),
            None => Vec::new(),
        };
        *self.table.write().unwrap_or_else(|poison| poison.into_inner()) = Arc::new(table);
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(group) = self.group_reservations.get() {
            for namespace in &newly_followed {
                follow_in_group(namespace, group, &self.nqn);
            }
            // The group may have been attached between the look above and the swap
            // (at start): `attach_group_reservations` then walked the old table, so
            // the new one's namespaces are marked and followed here.
            for entry in self.table().entries() {
                if mark_for_group(&entry.namespace) {
                    follow_in_group(&entry.namespace, group, &self.nqn);
                }
            }
        }
    }

    /// Gives the subsystem its reservation store and restores the saved state of its
    /// namespaces (namespaces added later are restored as they arrive).
    pub(crate) fn attach_reservation_store(&self, store: crate::reservation_store::SharedReservationStore) {
        let store = self.reservation_store.get_or_init(|| store);
        for entry in self.table().entries() {
            crate::ptpl::restore(&entry.namespace, store, &self.nqn);
        }
    }

    /// Hands the subsystem's reservations to a gateway group's authority: every
    /// namespace is followed from now (marked unknown until its state arrives), and
    /// namespaces added later as they arrive.
    pub(crate) fn attach_group_reservations(&self, group: crate::group_reservations::SharedGroupReservations) {
        let group = self.group_reservations.get_or_init(|| group);
        // These entries are in the table already: marked, then followed.
        for entry in self.table().entries() {
            if mark_for_group(&entry.namespace) {
                follow_in_group(&entry.namespace, group, &self.nqn);
            }
        }
    }

    /// The gateway group's reservation authority, when there is one.
    pub fn group_reservations(&self) -> Option<&crate::group_reservations::SharedGroupReservations> {
        self.group_reservations.get()
    }

    /// The reservation store, when the target offers Persist Through Power Loss.
    pub fn reservation_store(&self) -> Option<&crate::reservation_store::SharedReservationStore> {
        self.reservation_store.get()
    }

    /// The allocated namespace with this NSID (attached or not).
    pub fn namespace(&self, id: NamespaceId) -> Option<Arc<Namespace>> {
        self.table().get(id).map(|entry| Arc::clone(&entry.namespace))
    }

    /// Allocated NSIDs in ascending order.
    pub fn namespace_ids(&self) -> Vec<NamespaceId> {
        self.table().allocated_ids().collect()
    }

    /// Total capacity of the allocated namespaces, in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.table().entries().map(|entry| entry.namespace.geometry().capacity_bytes()).sum()
    }

    /// True when Namespace Management and Attachment are offered (OACS bit 3).
    pub fn supports_namespace_management(&self) -> bool {
        self.pool.is_some()
    }

    /// True when any namespace's backend has a volatile write cache (VWC). With a
    /// pool, the pool's backend counts too, since namespaces may be created on it.
    pub fn has_volatile_write_cache(&self) -> bool {
        self.table().entries().any(|entry| entry.namespace.backend.has_volatile_write_cache())
            || self.pool.as_ref().is_some_and(|pool| pool.has_volatile_write_cache())
    }
}

/// Frees carves no namespace is bound to: a namespace deleted shortly before a stop
/// or crash is unbound at once (persisted) but its space is released in the
/// background, which a stop cuts short. Every carve the target or the config creates
/// is bound, so an unbound one is such a leftover.
fn free_orphan_carves(nqn: &str, pool: &Pool) {
    for record in pool.records().into_iter().filter(|record| record.binding.is_none()) {
        match pool.delete(record.id) {
            Ok(()) => tracing::info!(subsystem = %nqn, carve = record.id.0, blocks = record.size_blocks,
                "freed the space of a namespace deleted before the last stop"),
            Err(error) => tracing::warn!(subsystem = %nqn, carve = record.id.0, %error,
                "could not free the space of a namespace deleted before the last stop"),
        }
    }
}

/// A stable 16-byte identifier for (subsystem NQN, NSID, purpose).
pub fn derive_identifier(nqn: &str, nsid: u32, purpose: &[u8]) -> [u8; 16] {
    let mut name = Vec::with_capacity(nqn.len() + 16);
    name.extend_from_slice(nqn.as_bytes());
    name.push(0);
    name.extend_from_slice(&nsid.to_le_bytes());
    name.extend_from_slice(purpose);
    *uuid::Uuid::new_v5(&IDENTITY_NAMESPACE, &name).as_bytes()
}

/// A 20-character serial number derived from the NQN (stable across restarts).
fn derive_serial_number(nqn: &str) -> String {
    let id = uuid::Uuid::new_v5(&IDENTITY_NAMESPACE, nqn.as_bytes());
    let hex = id.simple().to_string();
    format!("SLC{}", &hex[..17])
}

/// Marks `namespace` unknown until the group installs its state, the first time it
/// is seen; true when it was new (and must be followed once it is in the table).
fn mark_for_group(namespace: &crate::Namespace) -> bool {
    if namespace.reservations_restored.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return false;
    }
    namespace.reservations.mark_unknown();
    true
}

/// Asks the group's authority to follow `namespace` (already in the subsystem's table).
fn follow_in_group(
    namespace: &crate::Namespace,
    group: &crate::group_reservations::SharedGroupReservations,
    subsystem_nqn: &str,
) {
    if let Some(vouch) = group.copy_vouch() {
        namespace.reservations.bound_by(vouch);
    }
    group.track(crate::reservation_store::NamespaceKey {
        subsystem_nqn: subsystem_nqn.to_string(),
        namespace_id: namespace.id,
        nguid: namespace.nguid,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::{Geometry, RamBackend};

    fn ram(blocks: u64) -> Arc<dyn Backend> {
        RamBackend::new(Geometry { block_size_bytes: 512, block_count: blocks })
    }

    fn spec(ids: &[u32]) -> SubsystemSpec {
        SubsystemSpec {
            hosts: HostAccess::allow_any(),
            pool: None,
            nqn: "nqn.2026-11.io.sluice:test".into(),
            serial_number: None,
            model_number: None,
            namespaces: ids
                .iter()
                .map(|&id| NamespaceSpec {
                    id: NamespaceId(id),
                    backend: ram(8),
                    nguid: None,
                    uuid: None,
                    ana_group: None,
                })
                .collect(),
        }
    }

    #[test]
    fn namespaces_are_found_by_id_and_listed_in_order() {
        let subsystem = Subsystem::new(spec(&[7, 1, 4096]), 0).unwrap();
        assert_eq!(subsystem.namespace_ids(), [NamespaceId(1), NamespaceId(7), NamespaceId(4096)]);
        assert!(subsystem.namespace(NamespaceId(7)).is_some());
        assert!(subsystem.namespace(NamespaceId(2)).is_none());
        assert!(subsystem.namespace(NamespaceId(0)).is_none());
        assert!(subsystem.namespace(NamespaceId::BROADCAST).is_none());
    }

    #[test]
    fn bad_descriptions_are_refused_with_the_reason() {
        assert!(matches!(Subsystem::new(spec(&[1, 1]), 0), Err(SubsystemError::DuplicateNamespaceId { nsid: 1, .. })));
        assert!(matches!(Subsystem::new(spec(&[0]), 0), Err(SubsystemError::NamespaceIdOutOfRange { nsid: 0, .. })));
        assert!(matches!(
            Subsystem::new(spec(&[MAX_NAMESPACE_ID + 1]), 0),
            Err(SubsystemError::NamespaceIdOutOfRange { .. })
        ));
        let mut bad = spec(&[1]);
        bad.nqn = "not an nqn".into();
        assert!(matches!(Subsystem::new(bad, 0), Err(SubsystemError::InvalidNqn { .. })));
    }

    #[test]
    fn identifiers_are_stable_and_distinct() {
        let a = Subsystem::new(spec(&[1, 2]), 0).unwrap();
        let b = Subsystem::new(spec(&[1, 2]), 0).unwrap();
        let a1 = a.namespace(NamespaceId(1)).unwrap();
        let a2 = a.namespace(NamespaceId(2)).unwrap();
        assert_eq!(a1.nguid, b.namespace(NamespaceId(1)).unwrap().nguid);
        assert_ne!(a1.nguid, a2.nguid);
        assert_ne!(a1.nguid, a1.uuid);
        assert_eq!(a.serial_number, b.serial_number);
        assert_eq!(a.serial_number.len(), 20);
    }
}

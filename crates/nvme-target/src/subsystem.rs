//! NVM subsystems and their namespaces as the target serves them.

use std::sync::Arc;

use nvme_spec::NamespaceId;
use storage::{Backend, Geometry};

use crate::limits::MAX_NAMESPACE_ID;
use crate::stats::SubsystemStats;

/// Longest NQN the spec allows (NVMe Base 2.0, "NVMe Qualified Names": 223 bytes).
pub const MAX_NQN_BYTES: usize = 223;

/// Namespace for deriving stable identifiers: NGUID and UUID are UUIDv5 values of the
/// subsystem NQN and NSID, so they survive a restart without being stored anywhere.
const IDENTITY_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x5b1c_e000_4e56_4d65_9f2a_1d0c_7a11_0001);

/// A namespace: an NSID bound to a storage backend, with stable identifiers.
pub struct Namespace {
    /// NSID.
    pub id: NamespaceId,
    /// Where the blocks live.
    pub backend: Arc<dyn Backend>,
    /// Cached backend geometry (block size, block count).
    pub geometry: Geometry,
    /// NGUID: namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// UUID: namespace UUID.
    pub uuid: [u8; 16],
}

impl Namespace {
    /// log2 of the block size, as LBADS in the LBA format.
    pub fn block_size_log2(&self) -> u8 {
        self.geometry.block_size_bytes.trailing_zeros() as u8
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("id", &self.id.0)
            .field("backend", &self.backend.kind())
            .field("geometry", &self.geometry)
            .finish()
    }
}

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
}

/// An NVM subsystem: an NQN, identity strings and a table of namespaces indexed by
/// NSID. Immutable once built; the table is a `Vec` so an I/O finds its namespace
/// with one index, not a search.
pub struct Subsystem {
    /// SUBNQN.
    pub nqn: String,
    /// SN, space padded to 20 bytes when encoded.
    pub serial_number: String,
    /// MN, space padded to 40 bytes when encoded.
    pub model_number: String,
    /// Namespaces by NSID - 1.
    namespaces: Vec<Option<Arc<Namespace>>>,
    /// Active NSIDs in ascending order.
    active_ids: Vec<NamespaceId>,
    /// Index of this subsystem in the target (stable for the target's lifetime).
    pub index: usize,
    /// SMART counters shared by every controller of the subsystem.
    pub stats: SubsystemStats,
}

impl std::fmt::Debug for Subsystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subsystem")
            .field("nqn", &self.nqn)
            .field("namespaces", &self.active_ids.len())
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
    /// Builds a subsystem, deriving missing identifiers.
    pub fn new(spec: SubsystemSpec, index: usize) -> Result<Subsystem, SubsystemError> {
        validate_nqn(&spec.nqn)
            .map_err(|reason| SubsystemError::InvalidNqn { nqn: spec.nqn.clone(), reason })?;
        let mut namespaces: Vec<Option<Arc<Namespace>>> = Vec::new();
        let mut active_ids = Vec::with_capacity(spec.namespaces.len());
        for namespace in spec.namespaces {
            let nsid = namespace.id.0;
            if nsid == 0 || nsid > MAX_NAMESPACE_ID {
                return Err(SubsystemError::NamespaceIdOutOfRange {
                    nqn: spec.nqn.clone(),
                    nsid,
                    max: MAX_NAMESPACE_ID,
                });
            }
            let slot = nsid as usize - 1;
            if namespaces.len() <= slot {
                namespaces.resize(slot + 1, None);
            }
            if namespaces[slot].is_some() {
                return Err(SubsystemError::DuplicateNamespaceId { nqn: spec.nqn.clone(), nsid });
            }
            let geometry = namespace.backend.geometry();
            namespaces[slot] = Some(Arc::new(Namespace {
                id: namespace.id,
                geometry,
                nguid: namespace.nguid.unwrap_or_else(|| derive_identifier(&spec.nqn, nsid, b"nguid")),
                uuid: namespace.uuid.unwrap_or_else(|| derive_identifier(&spec.nqn, nsid, b"uuid")),
                backend: namespace.backend,
            }));
            active_ids.push(namespace.id);
        }
        active_ids.sort();
        let serial_number = spec.serial_number.unwrap_or_else(|| derive_serial_number(&spec.nqn));
        Ok(Subsystem {
            model_number: spec.model_number.unwrap_or_else(|| "Sluice NVMe/TCP target".to_string()),
            nqn: spec.nqn,
            serial_number,
            namespaces,
            active_ids,
            index,
            stats: SubsystemStats::default(),
        })
    }

    /// The active namespace with this NSID.
    pub fn namespace(&self, id: NamespaceId) -> Option<&Arc<Namespace>> {
        let slot = (id.0 as usize).checked_sub(1)?;
        self.namespaces.get(slot)?.as_ref()
    }

    /// Active NSIDs in ascending order.
    pub fn active_namespace_ids(&self) -> &[NamespaceId] {
        &self.active_ids
    }

    /// Iterates the active namespaces in NSID order.
    pub fn namespaces(&self) -> impl Iterator<Item = &Arc<Namespace>> {
        self.namespaces.iter().flatten()
    }

    /// True when any namespace's backend has a volatile write cache (VWC).
    pub fn has_volatile_write_cache(&self) -> bool {
        self.namespaces().any(|namespace| namespace.backend.has_volatile_write_cache())
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

#[cfg(test)]
mod tests {
    use super::*;
    use storage::RamBackend;

    fn ram(blocks: u64) -> Arc<dyn Backend> {
        RamBackend::new(Geometry { block_size_bytes: 512, block_count: blocks })
    }

    fn spec(ids: &[u32]) -> SubsystemSpec {
        SubsystemSpec {
            pool: None,
            nqn: "nqn.2026-11.io.sluice:test".into(),
            serial_number: None,
            model_number: None,
            namespaces: ids
                .iter()
                .map(|&id| NamespaceSpec { id: NamespaceId(id), backend: ram(8), nguid: None, uuid: None })
                .collect(),
        }
    }

    #[test]
    fn namespaces_are_found_by_id_and_listed_in_order() {
        let subsystem = Subsystem::new(spec(&[7, 1, 4096]), 0).unwrap();
        assert_eq!(
            subsystem.active_namespace_ids(),
            &[NamespaceId(1), NamespaceId(7), NamespaceId(4096)]
        );
        assert!(subsystem.namespace(NamespaceId(7)).is_some());
        assert!(subsystem.namespace(NamespaceId(2)).is_none());
        assert!(subsystem.namespace(NamespaceId(0)).is_none());
        assert!(subsystem.namespace(NamespaceId::BROADCAST).is_none());
    }

    #[test]
    fn bad_descriptions_are_refused_with_the_reason() {
        assert!(matches!(
            Subsystem::new(spec(&[1, 1]), 0),
            Err(SubsystemError::DuplicateNamespaceId { nsid: 1, .. })
        ));
        assert!(matches!(
            Subsystem::new(spec(&[0]), 0),
            Err(SubsystemError::NamespaceIdOutOfRange { nsid: 0, .. })
        ));
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

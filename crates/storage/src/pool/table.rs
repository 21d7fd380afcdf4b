//! The pool's persisted namespace table: its on-disk shape, where it is stored, and the
//! checks run on it at open (the table file is as untrusted as any other input).

use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::{CarvedId, PoolError};

/// Where the pool keeps its namespace table.
#[derive(Clone, Debug)]
pub enum TableStore {
    /// A JSON sidecar file, replaced atomically (temp file, fsync, rename, fsync of the
    /// directory) on every change.
    File(PathBuf),
    /// In memory, for tests: clones share the same table, so a test can "restart" by
    /// opening a new pool with a clone.
    Memory(MemoryTable),
}

/// The shared contents of a [`TableStore::Memory`].
#[derive(Clone, Debug, Default)]
pub struct MemoryTable(Arc<Mutex<Option<String>>>);

impl TableStore {
    /// A new, empty in-memory table.
    pub fn memory() -> Self {
        Self::Memory(MemoryTable::default())
    }

    /// Replaces the in-memory table text (tests use it to simulate a damaged table).
    pub fn set_memory_text(&self, text: &str) {
        if let Self::Memory(table) = self {
            *lock(&table.0) = Some(text.to_owned());
        }
    }

    /// The stored table text, if any (for tests and diagnostics).
    pub fn text(&self) -> Result<Option<String>, PoolError> {
        match self {
            Self::Memory(table) => Ok(lock(&table.0).clone()),
            Self::File(path) => match fs::read_to_string(path) {
                Ok(text) => Ok(Some(text)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(error) => Err(PoolError::TableIo(format!("{}: {error}", path.display()))),
            },
        }
    }

    pub(super) fn load(&self) -> Result<Option<TableFile>, PoolError> {
        let Some(text) = self.text()? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| PoolError::CorruptTable(format!("unreadable table: {error}")))
    }

    pub(super) fn save(&self, table: &TableFile) -> Result<(), PoolError> {
        // Also for the memory store, so tests with it catch a save on an I/O thread.
        crate::service::debug_assert_may_block("saving a pool table");
        let text = serde_json::to_string_pretty(table).map_err(|error| PoolError::TableIo(error.to_string()))?;
        match self {
            Self::Memory(memory) => {
                *lock(&memory.0) = Some(text);
                Ok(())
            }
            Self::File(path) => crate::durable_file::write_atomically(path, text.as_bytes())
                .map_err(|error| PoolError::TableIo(format!("{}: {error}", path.display()))),
        }
    }
}

/// A poisoned table lock only means another thread panicked mid-update of a String that
/// is replaced wholesale, so the value is still usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A run of pool allocation units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitExtent {
    /// First unit.
    pub start_unit: u64,
    /// Number of units.
    pub unit_count: u64,
}

/// One thin mapping: logical unit of the carve -> physical unit of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitMapping {
    /// Unit index inside the carve.
    pub logical_unit: u64,
    /// Unit index inside the pool's backend.
    pub physical_unit: u64,
}

/// The stable identity and placement of one carved namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarveRecord {
    /// Pool-unique id (the target derives the NSID from it).
    pub id: CarvedId,
    /// NVMe NGUID.
    pub nguid: [u8; 16],
    /// NVMe namespace UUID.
    pub uuid: [u8; 16],
    /// Size in blocks of the pool backend's block size.
    pub size_blocks: u64,
    /// Thin (allocate on write) or thick (reserved at create).
    pub thin: bool,
    /// Thick: the one contiguous extent reserved at create. Thin: empty.
    pub extents: Vec<UnitExtent>,
    /// Thin: the units allocated so far. Thick: empty.
    pub unit_map: Vec<UnitMapping>,
    /// Which subsystem serves the carve as which namespace, and to which hosts; `None`
    /// for a carve no subsystem exports. Stored with the carve so that a restart
    /// restores the same NSID and attachments as well as the same identity.
    #[serde(default)]
    pub binding: Option<NamespaceBinding>,
}

/// How a carve is exported: the NVMe view of it, kept in the pool table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceBinding {
    /// SUBNQN of the subsystem that serves it.
    pub subsystem_nqn: String,
    /// NSID in that subsystem.
    pub namespace_id: u32,
    /// Attached to the controllers of every host (namespaces declared in a config).
    #[serde(default)]
    pub all_hosts: bool,
    /// Host NQNs whose controllers it is attached to (Namespace Attachment). Hosts, not
    /// CNTLIDs: fabrics controllers are created per connection, and a host that
    /// reconnects must find its namespaces again.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// The whole table as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct TableFile {
    pub(super) version: u32,
    pub(super) block_size_bytes: u32,
    pub(super) unit_size_bytes: u64,
    pub(super) next_id: u32,
    pub(super) carves: Vec<CarveRecord>,
    /// Written true only when the pool closes cleanly. Found false at open, the table
    /// was left by a crash: thin units handed out since its last save may hold data
    /// while the table calls them free, so the free space is zeroed again before use.
    /// (Missing in tables from before this field: treated as a crash, once.)
    #[serde(default)]
    pub(super) clean_shutdown: bool,
}

pub(super) const TABLE_VERSION: u32 = 1;

impl TableFile {
    /// Checks a loaded table against the backend: every extent and mapping inside the
    /// pool, no unit used twice, sizes consistent. Returns the used-unit bitmap.
    pub(super) fn validate(&self, block_size_bytes: u32, unit_count: u64) -> Result<Vec<bool>, PoolError> {
        let corrupt = |message: String| Err(PoolError::CorruptTable(message));
        if self.version != TABLE_VERSION {
            return corrupt(format!("unknown table version {}", self.version));
        }
        if self.block_size_bytes != block_size_bytes {
            return corrupt(format!(
                "table is for {}-byte blocks but the backend has {block_size_bytes}-byte blocks",
                self.block_size_bytes
            ));
        }
        let unit_blocks = self.unit_size_bytes / u64::from(block_size_bytes);
        let mut used = vec![false; unit_count as usize];
        let mut claim = |carve: CarvedId, unit: u64| -> Result<(), PoolError> {
            match used.get_mut(unit as usize) {
                None => Err(PoolError::CorruptTable(format!(
                    "carve {} uses unit {unit} beyond the pool's {unit_count} units",
                    carve.0
                ))),
                Some(true) => {
                    Err(PoolError::CorruptTable(format!("carve {} overlaps another carve at unit {unit}", carve.0)))
                }
                Some(slot) => {
                    *slot = true;
                    Ok(())
                }
            }
        };
        let mut seen_ids = std::collections::BTreeSet::new();
        for carve in &self.carves {
            let id = carve.id;
            if !seen_ids.insert(id.0) || id.0 >= self.next_id || id.0 == 0 {
                return corrupt(format!("carve id {} is duplicated or invalid", id.0));
            }
            let Some(carve_units) = units_for_blocks(carve.size_blocks, unit_blocks) else {
                return corrupt(format!("carve {} has invalid size {}", id.0, carve.size_blocks));
            };
            if carve.thin {
                if !carve.extents.is_empty() {
                    return corrupt(format!("thin carve {} has extents", id.0));
                }
                let mut logical_seen = std::collections::BTreeSet::new();
                for mapping in &carve.unit_map {
                    if mapping.logical_unit >= carve_units || !logical_seen.insert(mapping.logical_unit) {
                        return corrupt(format!(
                            "thin carve {} maps logical unit {} twice or beyond its size",
                            id.0, mapping.logical_unit
                        ));
                    }
                    claim(id, mapping.physical_unit)?;
                }
            } else {
                let [extent] = carve.extents.as_slice() else {
                    return corrupt(format!("thick carve {} needs exactly one extent", id.0));
                };
                if extent.unit_count != carve_units || !carve.unit_map.is_empty() {
                    return corrupt(format!("thick carve {} extent does not match its size", id.0));
                }
                let end = extent.start_unit.checked_add(extent.unit_count);
                if !matches!(end, Some(end) if end <= unit_count) {
                    return corrupt(format!("thick carve {} extends beyond the pool", id.0));
                }
                for unit in extent.start_unit..extent.start_unit + extent.unit_count {
                    claim(id, unit)?;
                }
            }
        }
        Ok(used)
    }
}

/// Units needed for `size_blocks`; `None` for a zero size or one whose unit count
/// overflows.
pub(super) fn units_for_blocks(size_blocks: u64, unit_blocks: u64) -> Option<u64> {
    if size_blocks == 0 {
        return None;
    }
    Some(size_blocks.div_ceil(unit_blocks))
}

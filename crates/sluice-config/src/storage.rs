//! The named storage a running target holds open: every `[[backend]]` and `[[pool]]`
//! entry built so far, by name, with the definition it was built from.
//!
//! Why it is kept: the management API and a reload build namespaces while the target
//! runs. A namespace over `device = "x"`, or carved from `pool = "p"`, must use the
//! backend or pool that is already open. Opening a file a second time would give one
//! device two owners, and opening a pool table twice two allocators that each believe
//! they own the space. Entries nothing used at start are opened at their first use,
//! through the same build code (`build.rs`), and kept here from then on.
//!
//! Who uses an entry is not recorded here, on purpose: the config file says which
//! entry uses which (one user per backend, checked by `Config::check`), and the running
//! target says which namespace serves which backend. Bookkeeping of its own could only
//! drift from those two.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use storage::{Backend, CarvedId, Pool};

use super::schema::{BackendConfig, PoolConfig};
use super::Config;

/// One open `[[backend]]`.
pub struct OpenBackend {
    /// The entry as it was when the backend was built.
    pub definition: BackendConfig,
    pub backend: Arc<dyn Backend>,
    /// The file a `kind = "file"` backend opened, symbolic links resolved.
    pub file: Option<PathBuf>,
    /// The image of a `kind = "rbd"` backend, for `sluice backend list`.
    pub rbd: Option<Arc<runtime::RbdBackend>>,
}

/// One open `[[pool]]`.
pub struct OpenPool {
    /// The entry as it was when the pool was opened.
    pub definition: PoolConfig,
    pub pool: Arc<Pool>,
    /// Its table file, symbolic links resolved (`None`: the table lives in memory).
    pub table: Option<PathBuf>,
}

/// The open `[[backend]]` and `[[pool]]` entries, by name.
#[derive(Default)]
pub struct OpenStorage {
    backends: BTreeMap<String, OpenBackend>,
    pools: BTreeMap<String, OpenPool>,
}

impl OpenStorage {
    pub fn backend(&self, name: &str) -> Option<&OpenBackend> {
        self.backends.get(name)
    }

    pub fn pool(&self, name: &str) -> Option<&OpenPool> {
        self.pools.get(name)
    }

    /// The open backends in name order.
    pub fn backends(&self) -> impl Iterator<Item = (&str, &OpenBackend)> {
        self.backends.iter().map(|(name, open)| (name.as_str(), open))
    }

    /// The open pools in name order.
    pub fn pools(&self) -> impl Iterator<Item = (&str, &OpenPool)> {
        self.pools.iter().map(|(name, open)| (name.as_str(), open))
    }

    pub(crate) fn insert_backend(&mut self, name: String, open: OpenBackend) {
        self.backends.insert(name, open);
    }

    /// Lets go of the open backend `name` (it closes once the last queue using it is
    /// gone): its entry was removed from the file and its storage is to be deleted.
    pub fn remove_backend(&mut self, name: &str) -> Option<OpenBackend> {
        self.backends.remove(name)
    }

    /// The open backend `name` grew live to `size_bytes`: its definition says so, so
    /// the size is not reported as a change that waits for a restart.
    pub fn note_backend_size(&mut self, name: &str, size_bytes: u64) {
        if let Some(open) = self.backends.get_mut(name) {
            open.definition.size = Some(super::ByteSize(size_bytes));
        }
    }

    pub(crate) fn insert_pool(&mut self, name: String, open: OpenPool) {
        self.pools.insert(name, open);
    }

    /// The entry (other than `name`) that has `file` open, as a file backend or a
    /// pool table: opening it again under another name would give it two owners.
    pub(crate) fn holder_of_file(&self, file: &Path, name: &str) -> Option<String> {
        let backends = self
            .backends
            .iter()
            .filter(|(other, open)| other.as_str() != name && open.file.as_deref() == Some(file))
            .map(|(other, _)| format!("backend {other:?}"));
        let pools = self
            .pools
            .iter()
            .filter(|(other, open)| other.as_str() != name && open.table.as_deref() == Some(file))
            .map(|(other, _)| format!("the table of pool {other:?}"));
        backends.chain(pools).next()
    }

    /// Keeps what a build opened (see [`StorageChanges::keep`]).
    fn absorb(&mut self, other: OpenStorage) {
        self.backends.extend(other.backends);
        self.pools.extend(other.pools);
    }

    /// Entries whose definition in `config` differs from the one they were opened
    /// with, as (`backend "x"` or `pool "p"`, the first key that differs). Open storage
    /// is not rebuilt while it runs: such a change takes effect at the next start.
    pub fn changed_definitions(&self, config: &Config) -> Vec<(String, &'static str)> {
        let mut changed = Vec::new();
        for backend in &config.backends {
            if let Some(open) = self.backends.get(&backend.name) {
                if let Some(key) = open.definition.first_difference(backend) {
                    changed.push((format!("backend {:?}", backend.name), key));
                }
            }
        }
        for pool in &config.pools {
            if let Some(open) = self.pools.get(&pool.name) {
                if let Some(key) = open.definition.first_difference(pool) {
                    changed.push((format!("pool {:?}", pool.name), key));
                }
            }
        }
        changed
    }

    /// Closes the backends `config` no longer defines and nothing holds any more (no
    /// namespace, RAID0 set, cache or pool; not even an I/O queue still finishing).
    /// Returns their names. Pools are never closed while the target runs: a pool's
    /// carves refer back to it, so whether one is still in use cannot be told, and
    /// a pool opened again while the old one lives would be two allocators of one
    /// device.
    pub fn close_unused(&mut self, config: &Config) -> Vec<String> {
        let mut closed = Vec::new();
        // Closing a RAID0 set or cache lets go of its parts: repeat until nothing moves.
        loop {
            let unused: Vec<String> = self
                .backends
                .iter()
                .filter(|(name, open)| {
                    !config.backends.iter().any(|backend| &backend.name == *name)
                        && Arc::strong_count(&open.backend) == 1
                })
                .map(|(name, _)| name.clone())
                .collect();
            if unused.is_empty() {
                return closed;
            }
            for name in unused {
                self.backends.remove(&name);
                closed.push(name);
            }
        }
    }
}

/// A carve a build created, deleted again if the change it was built for is dropped.
pub struct CreatedCarve {
    pub pool: Arc<Pool>,
    pub id: CarvedId,
    /// The config entry it was created for, for the log.
    pub location: String,
}

/// What a build opened and created beyond what was open already. [`keep`] adds it to
/// the target's [`OpenStorage`] once the change is in force; dropped without that (the
/// change was refused after the build), the carves it created are deleted again and
/// what it opened is closed, so a refused change leaves the target as it was.
///
/// [`keep`]: StorageChanges::keep
#[derive(Default)]
pub struct StorageChanges {
    pub opened: OpenStorage,
    pub(crate) created_carves: Vec<CreatedCarve>,
}

impl StorageChanges {
    /// Adds what was opened to `storage`; the carves created stay.
    pub fn keep(mut self, storage: &mut OpenStorage) {
        storage.absorb(std::mem::take(&mut self.opened));
        self.created_carves.clear();
    }

    /// Moves what was opened into `storage` at once, so that the next build of the
    /// same reload uses it rather than opening it again. The carves created stay
    /// noted: they are still deleted if this change is dropped.
    pub fn share_opened(&mut self, storage: &mut OpenStorage) {
        storage.absorb(std::mem::take(&mut self.opened));
    }

    /// Names of the entries this build opened (for the log).
    pub fn opened_names(&self) -> Vec<String> {
        self.opened.backends.keys().chain(self.opened.pools.keys()).cloned().collect()
    }
}

impl Drop for StorageChanges {
    fn drop(&mut self) {
        for carve in self.created_carves.drain(..) {
            match carve.pool.delete(carve.id) {
                Ok(()) => tracing::info!(location = %carve.location, carve = carve.id.0,
                    "the change was not made: deleted the carve created for it"),
                Err(error) => tracing::warn!(location = %carve.location, carve = carve.id.0, %error,
                    "the change was not made, and the carve created for it could not be deleted; it stays in the pool table"),
            }
        }
    }
}

/// `path` with symbolic links and `..` resolved; for a file that does not exist yet,
/// its directory resolved. Used to tell whether two entries name one file.
pub(crate) fn canonical_file(path: &Path) -> PathBuf {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        return canonical;
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(parent), path.file_name()) {
        (Ok(parent), Some(name)) => parent.join(name),
        _ => path.to_path_buf(),
    }
}

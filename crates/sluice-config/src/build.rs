//! The half of the config with side effects: builds a validated [`Plan`] into backends,
//! pools and subsystem specs. Files are created or extended, cache tiers formatted or
//! recovered, new pools zeroed, missing carves created and recorded in their tables.
//!
//! A build starts from the storage that is open already ([`OpenStorage`]: nothing at
//! start; everything built so far while the target runs) and opens only what is not:
//! an entry is never opened twice. What it opens and creates comes back as
//! [`StorageChanges`], for the caller to keep once the change is in force.

use std::sync::Arc;

use nvme_spec::NamespaceId;
use nvme_target::{NamespaceSpec, SubsystemSpec};
use runtime::rbd_backend::ImageChange;
use runtime::{FileBackend, FileOptions, RbdBackend};
use storage::{
    Backend, CacheBackend, CacheMode, CarveIdentity, CarveRecord, CompositionError, Geometry, NamespaceBinding,
    NullBackend, Pool, PoolError, Raid0Backend, RamBackend, TableStore,
};

use super::graph::Node;
use super::namespaces::{Source, CARVE_BACKEND_NQN_PREFIX};
use super::plan::Plan;
use super::schema::{BackendConfig, CacheModeConfig, StorageKind, DEFAULT_STRIP_SIZE_BYTES, DEFAULT_UNIT_SIZE_BYTES};
use super::storage::{canonical_file, CreatedCarve, OpenBackend, OpenPool, OpenStorage, StorageChanges};
use super::{describe_bytes, invalid, BackendKind, Config, ConfigError, NamespaceConfig, DEFAULT_BLOCK_SIZE_BYTES};

/// What a build made.
pub struct BuildOutput {
    pub subsystems: Vec<SubsystemSpec>,
    /// (subsystem index, NSID) of the pool namespaces carved from their subsystem's own
    /// Namespace Management pool. The subsystem serves those from the pool's table
    /// (`Subsystem::new` at start, `Subsystem::add_bound_carve` while running), so they
    /// are not in its spec.
    pub pool_namespaces: Vec<(usize, u32)>,
    /// Backends that were open before this build and that it used, as a namespace's
    /// device or as a part: the caller checks that no running namespace still serves
    /// them.
    pub reused_backends: Vec<String>,
    /// What the build opened and created.
    pub storage: StorageChanges,
    /// Entries left out under [`OnUnavailable::Skip`], with why: an `rbd` entry whose
    /// cluster or image could not be reached, and everything built on it.
    pub unavailable: Vec<Unavailable>,
}

/// What a build does when an entry's external storage (an RBD cluster) cannot be
/// reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnUnavailable {
    /// The build fails (config check, the management API: the caller sees the error).
    Fail,
    /// The entry, whatever is built on it and the namespaces on those are left out;
    /// everything else is served (`sluice serve` at start).
    Skip,
}

/// An entry a build left out.
#[derive(Clone, Debug)]
pub struct Unavailable {
    /// Where it is in the config (`backend[0] ("vol")`, `subsystem[1] (...) namespace[0]`).
    pub location: String,
    /// Why: the cluster's error, or the part it depends on.
    pub reason: String,
}

/// The storage at hand during a build: what was open before and what it opened.
struct Builder<'a> {
    config: &'a Config,
    open: &'a OpenStorage,
    changes: StorageChanges,
    reused_backends: Vec<String>,
    /// Names of the backends and pools left out (under `OnUnavailable::Skip`).
    down: std::collections::BTreeSet<String>,
    unavailable: Vec<Unavailable>,
    /// RBD images opened ahead of the walk, all at once (`open_rbd_images`), by
    /// backend index; taken when the walk reaches them.
    opened_images: std::collections::HashMap<usize, Result<Arc<RbdBackend>, ConfigError>>,
}

/// Opens the images of `indices` (RBD backends) all at once
/// (`runtime::rbd_backend::PARALLEL_RBD_OPENS` at a time), so that a gateway's start
/// does not wait for the cluster's round trips image after image. Each result is
/// reported when the walk reaches its backend, as if it had been opened there.
fn open_rbd_images(
    config: &Config,
    indices: &[usize],
) -> std::collections::HashMap<usize, Result<Arc<RbdBackend>, ConfigError>> {
    let opened = runtime::rbd_backend::in_parallel(indices, |&index| {
        let backend = &config.backends[index];
        open_rbd(backend, &backend.location())
    });
    indices.iter().copied().zip(opened).collect()
}

impl Builder<'_> {
    /// Leaves out `name` (an entry at `location`) for `reason`.
    fn mark_down(&mut self, name: &str, location: String, reason: String) {
        self.down.insert(name.to_owned());
        self.unavailable.push(Unavailable { location, reason });
    }

    /// The first of `parts` that is left out, if any.
    fn down_part<'n>(&self, mut parts: impl Iterator<Item = &'n str>) -> Option<&'n str> {
        parts.find(|part| self.down.contains(*part))
    }

    fn is_open(&self, node: Node) -> bool {
        match node {
            Node::Backend(index) => {
                let name = &self.config.backends[index].name;
                self.open.backend(name).is_some() || self.changes.opened.backend(name).is_some()
            }
            Node::Pool(index) => {
                let name = &self.config.pools[index].name;
                self.open.pool(name).is_some() || self.changes.opened.pool(name).is_some()
            }
        }
    }

    /// Backend `index` for its one user. Validation guarantees one user per backend
    /// and that parts are built first, so a miss is a bug here, reported rather than a
    /// panic. A backend that was open before must not be a part of another open entry:
    /// open storage is not regrouped while it runs.
    fn backend(&mut self, index: usize) -> Result<Arc<dyn Backend>, ConfigError> {
        let name = &self.config.backends[index].name;
        if let Some(opened) = self.changes.opened.backend(name) {
            return Ok(Arc::clone(&opened.backend));
        }
        let Some(open) = self.open.backend(name) else {
            return Err(invalid(self.config.backends[index].location(), "internal error: built out of order"));
        };
        if let Some(owner) = open_owner(self.open, name) {
            return Err(invalid(
                self.config.backends[index].location(),
                format!(
                    "it is open as a part of {owner}, which the running target still holds; a new use of it takes \
                     effect at the next start of sluice serve"
                ),
            ));
        }
        self.reused_backends.push(name.clone());
        Ok(Arc::clone(&open.backend))
    }

    fn pool(&self, index: usize) -> Result<Arc<Pool>, ConfigError> {
        let name = &self.config.pools[index].name;
        self.changes.opened.pool(name).or_else(|| self.open.pool(name)).map(|open| Arc::clone(&open.pool)).ok_or_else(
            || invalid(self.config.pools[index].location(), "internal error: pool used before it was opened"),
        )
    }

    /// Refuses to open `file` for entry `name` when another open entry has it open.
    fn refuse_second_open(&self, file: &std::path::Path, name: &str, location: &str) -> Result<(), ConfigError> {
        let holder = self.open.holder_of_file(file, name).or_else(|| self.changes.opened.holder_of_file(file, name));
        match holder {
            Some(holder) => Err(invalid(
                location,
                format!(
                    "{} is open already as {holder} (an entry the config no longer names, or names differently); \
                     one file has one owner, so this takes effect at the next start of sluice serve",
                    file.display()
                ),
            )),
            None => Ok(()),
        }
    }
}

/// The open entry that `name` is a part of (a RAID0 member, a cache tier, a pool's
/// device), by the definitions the open entries were built from.
fn open_owner(open: &OpenStorage, name: &str) -> Option<String> {
    let composite = open.backends().find(|(_, entry)| {
        let definition = &entry.definition;
        definition.members.iter().flatten().any(|member| member == name)
            || definition.fast.as_deref() == Some(name)
            || definition.slow.as_deref() == Some(name)
    });
    if let Some((_, entry)) = composite {
        return Some(entry.definition.location());
    }
    open.pools().find(|(_, entry)| entry.definition.device == name).map(|(_, entry)| entry.definition.location())
}

/// Builds the storage the plan needs that `open` does not hold yet, and the subsystem
/// specs.
pub fn build(
    config: &Config,
    plan: &Plan,
    open: &OpenStorage,
    on_unavailable: OnUnavailable,
) -> Result<BuildOutput, ConfigError> {
    let mut builder = Builder {
        config,
        open,
        changes: StorageChanges::default(),
        reused_backends: Vec::new(),
        down: Default::default(),
        unavailable: Vec::new(),
        opened_images: Default::default(),
    };
    let images: Vec<usize> = plan
        .order
        .iter()
        .filter_map(|&node| match node {
            Node::Backend(index) if config.backends[index].kind == StorageKind::Rbd && !builder.is_open(node) => {
                Some(index)
            }
            _ => None,
        })
        .collect();
    if images.len() > 1 {
        builder.opened_images = open_rbd_images(config, &images);
    }
    for &node in &plan.order {
        if builder.is_open(node) {
            continue;
        }
        match node {
            Node::Backend(index) => {
                let entry = &config.backends[index];
                let parts = entry.references();
                if let Some(part) = builder.down_part(parts.iter().map(|(_, name)| *name)) {
                    let reason = format!("it is built on {part:?}, which is not available");
                    builder.mark_down(&entry.name, entry.location(), reason);
                    continue;
                }
                let built = build_backend(config, index, &mut builder);
                let built = match built {
                    Err(error) if entry.kind == StorageKind::Rbd && on_unavailable == OnUnavailable::Skip => {
                        builder.mark_down(&entry.name, entry.location(), error.to_string());
                        continue;
                    }
                    built => built?,
                };
                let definition = config.backends[index].clone();
                let open = OpenBackend { definition, backend: built.backend, file: built.file, rbd: built.rbd };
                builder.changes.opened.insert_backend(config.backends[index].name.clone(), open);
            }
            Node::Pool(index) => {
                let pool_config = &config.pools[index];
                if builder.down.contains(&pool_config.device) {
                    let reason = format!("its device {:?} is not available", pool_config.device);
                    builder.mark_down(&pool_config.name, pool_config.location(), reason);
                    continue;
                }
                let device = match config.backends.iter().position(|backend| backend.name == pool_config.device) {
                    Some(device) => builder.backend(device)?,
                    None => return Err(invalid(pool_config.location(), "internal error: device not built")),
                };
                let table = pool_config.table.as_deref().map(canonical_file);
                if let Some(table) = &table {
                    builder.refuse_second_open(table, &pool_config.name, &pool_config.location())?;
                }
                let store = pool_config.table.clone().map_or_else(TableStore::memory, TableStore::File);
                let unit = pool_config.unit_size.map_or(DEFAULT_UNIT_SIZE_BYTES, |size| size.0);
                let pool = Pool::open_with_unit_size(device, store, unit)
                    .map_err(|error| invalid(pool_config.location(), format!("cannot open the pool: {error}")))?;
                let open = OpenPool { definition: pool_config.clone(), pool: Arc::new(pool), table };
                builder.changes.opened.insert_pool(pool_config.name.clone(), open);
            }
        }
    }
    let mut specs = Vec::with_capacity(plan.subsystems.len());
    let mut pool_namespaces = Vec::new();
    for (subsystem_index, (subsystem_plan, subsystem)) in plan.subsystems.iter().zip(&config.subsystems).enumerate() {
        let mut namespaces = Vec::with_capacity(subsystem_plan.namespaces.len());
        for namespace_plan in &subsystem_plan.namespaces {
            let location = namespace_plan.location.as_str();
            let id = NamespaceId(namespace_plan.nsid);
            let part = match &namespace_plan.source {
                Source::Inline(_) => None,
                Source::Device(index) => Some(config.backends[*index].name.as_str()),
                Source::Pool { pool, .. } => Some(config.pools[*pool].name.as_str()),
            };
            if let Some(part) = builder.down_part(part.into_iter()) {
                let reason = format!("NSID {} is on {part:?}, which is not available", namespace_plan.nsid);
                builder.unavailable.push(Unavailable { location: location.to_owned(), reason });
                continue;
            }
            let (backend, nguid, uuid) = match &namespace_plan.source {
                Source::Inline(kind) => {
                    let namespace = &subsystem.namespaces[namespace_plan.index];
                    (build_inline(*kind, namespace, location)?, namespace_plan.nguid, namespace_plan.uuid)
                }
                Source::Device(index) => (builder.backend(*index)?, namespace_plan.nguid, namespace_plan.uuid),
                Source::Pool { pool: pool_index, size_bytes, thin } => {
                    let pool = builder.pool(*pool_index)?;
                    let binding = NamespaceBinding {
                        subsystem_nqn: subsystem.nqn.clone(),
                        namespace_id: namespace_plan.nsid,
                        all_hosts: true,
                        hosts: Vec::new(),
                    };
                    let what = format!("pool {:?}", config.pools[*pool_index].name);
                    let identity = CarveIdentity { nguid: namespace_plan.nguid, uuid: namespace_plan.uuid };
                    let record = ensure_carve(
                        &pool,
                        binding,
                        CarveShape { size_bytes: *size_bytes, thin: *thin, identity },
                        location,
                        &what,
                        &mut builder.changes,
                    )?;
                    if subsystem_plan.management_pool == Some(*pool_index) {
                        // The subsystem loads the carves bound to it from its own pool.
                        pool_namespaces.push((subsystem_index, namespace_plan.nsid));
                        continue;
                    }
                    let backend = pool.get(record.id).map_err(|error| invalid(location, error.to_string()))?;
                    (backend, Some(record.nguid), Some(record.uuid))
                }
            };
            namespaces.push(NamespaceSpec { id, backend, nguid, uuid, ana_group: namespace_plan.ana_group });
        }
        let pool = match subsystem_plan.management_pool {
            None => None,
            Some(pool_index) if builder.down.contains(&config.pools[pool_index].name) => {
                let reason = format!(
                    "its Namespace Management pool {:?} is not available: served without namespace management",
                    config.pools[pool_index].name
                );
                builder.unavailable.push(Unavailable { location: subsystem_plan.location.clone(), reason });
                None
            }
            Some(pool_index) => {
                let pool = builder.pool(pool_index)?;
                check_management_nsids(
                    &pool,
                    &subsystem.nqn,
                    &namespaces,
                    subsystem_plan,
                    &config.pools[pool_index].name,
                )?;
                Some(pool)
            }
        };
        specs.push(SubsystemSpec {
            hosts: subsystem.host_access(&subsystem_plan.location)?,
            nqn: subsystem.nqn.clone(),
            serial_number: subsystem.serial.clone(),
            model_number: subsystem.model.clone(),
            namespaces,
            pool,
        });
    }
    Ok(BuildOutput {
        subsystems: specs,
        pool_namespaces,
        reused_backends: builder.reused_backends,
        storage: builder.changes,
        unavailable: builder.unavailable,
    })
}

/// A namespace with its own `backend = "ram" | "null" | "file"`.
fn build_inline(
    kind: BackendKind,
    namespace: &NamespaceConfig,
    location: &str,
) -> Result<Arc<dyn Backend>, ConfigError> {
    match kind {
        BackendKind::File => open_file(
            namespace.path.as_deref().unwrap_or(std::path::Path::new("")),
            namespace.size.map(|size| size.0),
            namespace.block_size,
            namespace.direct_io,
            location,
        ),
        BackendKind::Ram | BackendKind::Null => {
            memory_backend(kind == BackendKind::Ram, namespace.size.map(|size| size.0), namespace.block_size, location)
        }
    }
}

fn open_file(
    path: &std::path::Path,
    size: Option<u64>,
    block_size: Option<u32>,
    direct_io: Option<bool>,
    location: &str,
) -> Result<Arc<dyn Backend>, ConfigError> {
    let options = FileOptions {
        block_size_bytes: block_size,
        direct_io: direct_io.unwrap_or(true),
        size_bytes: size,
        ..FileOptions::default()
    };
    FileBackend::open(path, options)
        .map(|backend| backend as Arc<dyn Backend>)
        .map_err(|error| invalid(location, error.to_string()))
}

fn memory_backend(
    ram: bool,
    size: Option<u64>,
    block_size: Option<u32>,
    location: &str,
) -> Result<Arc<dyn Backend>, ConfigError> {
    let block_size = block_size.unwrap_or(DEFAULT_BLOCK_SIZE_BYTES);
    let bytes = size.unwrap_or(0);
    let geometry = Geometry { block_size_bytes: block_size, block_count: bytes / u64::from(block_size) };
    let built = if ram {
        // Chunks on transparent huge pages: random I/O over a large namespace would
        // otherwise miss the TLB on nearly every request (runtime::huge_pages).
        RamBackend::with_chunk_memory(geometry, Arc::new(runtime::HugePageChunkMemory))
            .map(|backend| backend as Arc<dyn Backend>)
    } else {
        NullBackend::try_new(geometry).map(|backend| backend as Arc<dyn Backend>)
    };
    built.map_err(|error| invalid(format!("{location}.size"), error.to_string()))
}

/// A backend just built, with what the running target keeps to describe it.
struct BuiltBackend {
    backend: Arc<dyn Backend>,
    /// The file a `kind = "file"` backend opened.
    file: Option<std::path::PathBuf>,
    /// The image handle of a `kind = "rbd"` backend, for its status.
    rbd: Option<Arc<RbdBackend>>,
}

/// Builds backend `index` from its parts.
fn build_backend(config: &Config, index: usize, builder: &mut Builder<'_>) -> Result<BuiltBackend, ConfigError> {
    let backend = &config.backends[index];
    let location = backend.location();
    let size = backend.size.map(|size| size.0);
    let part = |name: &str| config.backends.iter().position(|other| other.name == name);
    let built = match backend.kind {
        StorageKind::Ram | StorageKind::Null => {
            memory_backend(backend.kind == StorageKind::Ram, size, backend.block_size, &location)?
        }
        StorageKind::File => {
            let path = backend.path.as_deref().unwrap_or(std::path::Path::new(""));
            let file = canonical_file(path);
            builder.refuse_second_open(&file, &backend.name, &location)?;
            let opened = open_file(path, size, backend.block_size, backend.direct_io, &location)?;
            return Ok(BuiltBackend { backend: opened, file: Some(file), rbd: None });
        }
        StorageKind::Raid0 => {
            let names = backend.members.clone().unwrap_or_default();
            let mut members = Vec::with_capacity(names.len());
            for name in &names {
                let member =
                    part(name).ok_or_else(|| invalid(&location, format!("internal error: member {name:?} unknown")))?;
                members.push(builder.backend(member)?);
            }
            let strip = backend.strip_size.map_or(DEFAULT_STRIP_SIZE_BYTES, |size| size.0);
            let strip = u32::try_from(strip).map_err(|_| invalid(&location, "strip_size is too large"))?;
            Raid0Backend::new(members, strip)
                .map(|raid| raid as Arc<dyn Backend>)
                .map_err(|error| invalid(&location, composition_message(&error, backend)))?
        }
        StorageKind::Cache => {
            let tier = |name: &Option<String>| name.as_deref().and_then(part);
            let (Some(fast), Some(slow)) = (tier(&backend.fast), tier(&backend.slow)) else {
                return Err(invalid(&location, "internal error: tier unknown"));
            };
            let (fast, slow) = (builder.backend(fast)?, builder.backend(slow)?);
            let mode = match backend.mode {
                Some(CacheModeConfig::WriteBack) => CacheMode::WriteBack,
                _ => CacheMode::WriteThrough,
            };
            let line = backend.line_size.map_or(u64::from(storage::DEFAULT_LINE_SIZE_BYTES), |size| size.0);
            let line = u32::try_from(line).map_err(|_| invalid(&location, "line_size is too large"))?;
            CacheBackend::with_line_size(fast, slow, mode, line)
                .map(|cache| cache as Arc<dyn Backend>)
                .map_err(|error| invalid(&location, composition_message(&error, backend)))?
        }
        StorageKind::Rbd => {
            let rbd = match builder.opened_images.remove(&index) {
                Some(opened) => opened?,
                None => open_rbd(backend, &location)?,
            };
            return Ok(BuiltBackend { backend: Arc::clone(&rbd) as Arc<dyn Backend>, file: None, rbd: Some(rbd) });
        }
        StorageKind::Carve => {
            let pool_name = backend.pool.as_deref().unwrap_or_default();
            let Some(pool_index) = config.pools.iter().position(|pool| pool.name == pool_name) else {
                return Err(invalid(&location, format!("internal error: pool {pool_name:?} unknown")));
            };
            let pool = builder.pool(pool_index)?;
            let binding = NamespaceBinding {
                subsystem_nqn: format!("{CARVE_BACKEND_NQN_PREFIX}{}", backend.name),
                namespace_id: 1,
                all_hosts: false,
                hosts: Vec::new(),
            };
            let what = format!("pool {pool_name:?}");
            let thin = backend.thin.unwrap_or(false);
            let shape = CarveShape { size_bytes: size.unwrap_or(0), thin, identity: CarveIdentity::default() };
            let record = ensure_carve(&pool, binding, shape, &location, &what, &mut builder.changes)?;
            pool.get(record.id).map_err(|error| invalid(&location, error.to_string()))?
        }
    };
    Ok(BuiltBackend { backend: built, file: None, rbd: None })
}

/// Connects to the cluster (or reuses the process's connection) and opens the image,
/// creating or growing it to `size`. Blocks up to the connect timeout: builds run on
/// the main or management thread, never on an I/O thread.
fn open_rbd(backend: &BackendConfig, location: &str) -> Result<Arc<RbdBackend>, ConfigError> {
    let Some(options) = backend.rbd_options() else {
        return Err(invalid(location, "internal error: not an rbd entry"));
    };
    let (rbd, change) = RbdBackend::open(&options).map_err(|error| invalid(location, error.to_string()))?;
    let image = format!("{}/{}", options.pool, options.image);
    let size = describe_bytes(rbd.geometry().capacity_bytes());
    match change {
        ImageChange::Created => tracing::info!("config: {location}: created image {image} of {size}"),
        ImageChange::Grown { from_bytes } => {
            tracing::info!("config: {location}: grew image {image} from {} to {size}", describe_bytes(from_bytes))
        }
        ImageChange::None => tracing::info!("config: {location}: opened image {image} ({size})"),
    }
    Ok(rbd)
}

/// A composition error with member indexes replaced by the names from the config.
fn composition_message(error: &CompositionError, backend: &BackendConfig) -> String {
    let members = backend.members.as_deref().unwrap_or_default();
    let name = |index: usize| members.get(index).map_or(format!("#{index}"), |name| format!("{name:?}"));
    match error {
        CompositionError::BlockSizeMismatch { member, member_block_size_bytes, expected_block_size_bytes } => format!(
            "member {} has {member_block_size_bytes}-byte blocks but {} has {expected_block_size_bytes}-byte blocks; \
             give every member the same block_size",
            name(*member),
            name(0)
        ),
        CompositionError::MemberTooSmall { member, member_bytes, strip_size_bytes } => format!(
            "member {} holds {}, less than one {} strip; use a smaller strip_size or a larger member",
            name(*member),
            describe_bytes(*member_bytes),
            describe_bytes(u64::from(*strip_size_bytes))
        ),
        other => other.to_string(),
    }
}

/// The carve recorded under `binding`, created on first start (and noted in `changes`,
/// so that a change refused after the build deletes it again). A stored carve whose
/// configured size is larger grows to it; a smaller size or another provisioning is an
/// error, never a silent shrink.
/// Errors about the size or provisioning name the key (`location.size`), so the
/// management API can name the request field.
/// What a carve entry asks for: its size, provisioning and (when given) identifiers.
struct CarveShape {
    size_bytes: u64,
    thin: bool,
    identity: CarveIdentity,
}

fn ensure_carve(
    pool: &Arc<Pool>,
    binding: NamespaceBinding,
    shape: CarveShape,
    location: &str,
    what: &str,
    changes: &mut StorageChanges,
) -> Result<CarveRecord, ConfigError> {
    let CarveShape { size_bytes, thin, identity } = shape;
    let size_location = format!("{location}.size");
    let block_size = u64::from(pool.block_size_bytes());
    if size_bytes == 0 || !size_bytes.is_multiple_of(block_size) {
        return Err(invalid(
            &size_location,
            format!("size {size_bytes} bytes is not a positive multiple of {what}'s {block_size}-byte blocks"),
        ));
    }
    let size_blocks = size_bytes / block_size;
    let bound: Vec<CarveRecord> = pool
        .records()
        .into_iter()
        .filter(|record| {
            record.binding.as_ref().is_some_and(|stored| {
                stored.subsystem_nqn == binding.subsystem_nqn && stored.namespace_id == binding.namespace_id
            })
        })
        .collect();
    let provisioning = |thin: bool| if thin { "thin" } else { "thick" };
    match bound.as_slice() {
        [] => {
            let id = pool.create_with_identity(size_blocks, thin, Some(binding), identity).map_err(|error| match error {
                PoolError::NoSpace => ConfigError::NoSpace {
                    location: size_location.clone(),
                    message: format!(
                        "{what} has no room for a thick carve of {} ({} free); make it smaller, thin = true, or the pool larger",
                        describe_bytes(size_bytes),
                        describe_bytes(pool.free_bytes())
                    ),
                },
                other => invalid(location, format!("cannot create the carve in {what}: {other}")),
            })?;
            tracing::info!("config: {location}: created a {} carve of {} in {what}", provisioning(thin), describe_bytes(size_bytes));
            changes.created_carves.push(CreatedCarve { pool: Arc::clone(pool), id, location: location.to_string() });
            pool.record(id).map_err(|error| invalid(location, error.to_string()))
        }
        // A larger size is a resize (`ns_resize` writes the size first, so a crash
        // before the carve grew is finished here, or the file was edited).
        // One that cannot grow (its neighbours took the room) is served at the size
        // it has, with a warning: refusing the start would take every subsystem down.
        [record] if record.size_blocks < size_blocks && record.thin == thin => {
            let (from, to) = (describe_bytes(record.size_blocks * block_size), describe_bytes(size_bytes));
            match pool.get(record.id).map_err(|error| invalid(location, error.to_string()))?.grow(size_blocks) {
                Ok(_) => tracing::info!("config: {location}: grew the carve in {what} from {from} to {to}"),
                Err(error) => tracing::warn!(
                    "config: {location}: the carve (id {}) in {what} cannot grow from {from} to {to} ({error}); it is \
                     served at {from}: free room in the pool and reload, or set size = \"{}\"",
                    record.id.0,
                    from.replace(' ', "")
                ),
            }
            pool.record(record.id).map_err(|error| invalid(location, error.to_string()))
        }
        [record] if record.size_blocks != size_blocks => Err(invalid(
            &size_location,
            format!(
                "{what} already holds this carve (id {}) with {}, but size = {}: carves never shrink; set size = \"{}\"",
                record.id.0,
                describe_bytes(record.size_blocks * block_size),
                describe_bytes(size_bytes),
                describe_bytes(record.size_blocks * block_size).replace(' ', "")
            ),
        )),
        [record] if record.thin != thin => Err(invalid(
            format!("{location}.thin"),
            format!(
                "{what} already holds this carve (id {}) as {}, but the config says {}; set thin = {}",
                record.id.0,
                provisioning(record.thin),
                provisioning(thin),
                record.thin
            ),
        )),
        [record] if identity.uuid.is_some_and(|uuid| uuid != record.uuid) => Err(invalid(
            format!("{location}.uuid"),
            format!(
                "{what} already holds this carve (id {}) with UUID {}; the UUID of a carve is kept from its creation",
                record.id.0,
                uuid::Uuid::from_bytes(record.uuid).hyphenated()
            ),
        )),
        [record] if identity.nguid.is_some_and(|nguid| nguid != record.nguid) => Err(invalid(
            format!("{location}.nguid"),
            format!(
                "{what} already holds this carve (id {}) with NGUID {}; the NGUID of a carve is kept from its creation",
                record.id.0,
                uuid::Uuid::from_bytes(record.nguid).simple()
            ),
        )),
        [record] => Ok(record.clone()),
        records => Err(invalid(
            location,
            format!(
                "the table of {what} binds {} carves (ids {}) to this entry; it is inconsistent, repair or restore it",
                records.len(),
                records.iter().map(|record| record.id.0.to_string()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// A subsystem with Namespace Management serves its pool's bound carves as well as the
/// config's other namespaces: an NSID taken by both is named here, with the entry.
fn check_management_nsids(
    pool: &Pool,
    nqn: &str,
    listed: &[NamespaceSpec],
    plan: &super::namespaces::SubsystemPlan,
    pool_name: &str,
) -> Result<(), ConfigError> {
    for record in pool.records() {
        let Some(binding) = record.binding.filter(|binding| binding.subsystem_nqn == nqn) else { continue };
        if let Some(spec) = listed.iter().find(|spec| spec.id.0 == binding.namespace_id) {
            let location = plan
                .namespaces
                .iter()
                .find(|namespace| namespace.nsid == spec.id.0)
                .map_or_else(|| plan.location.clone(), |namespace| namespace.location.clone());
            return Err(invalid(
                location,
                format!(
                    "nsid {} is already taken by carve {} of pool {pool_name:?} (created through Namespace Management); \
                     choose another nsid",
                    binding.namespace_id, record.id.0
                ),
            ));
        }
    }
    Ok(())
}

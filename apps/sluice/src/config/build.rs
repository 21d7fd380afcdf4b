//! The half of the config with side effects: builds a validated [`Plan`] into backends,
//! pools and subsystem specs. Files are created or extended, cache tiers formatted or
//! recovered, new pools zeroed, missing carves created and recorded in their tables.

use std::collections::HashMap;
use std::sync::Arc;

use nvme_spec::NamespaceId;
use nvme_target::{NamespaceSpec, SubsystemSpec};
use runtime::{FileBackend, FileOptions};
use storage::{
    Backend, CacheBackend, CacheMode, CarveRecord, CompositionError, Geometry, NamespaceBinding, NullBackend, Pool,
    PoolError, Raid0Backend, RamBackend, TableStore,
};

use super::graph::Node;
use super::namespaces::{Source, CARVE_BACKEND_NQN_PREFIX};
use super::plan::Plan;
use super::schema::{BackendConfig, CacheModeConfig, StorageKind, DEFAULT_STRIP_SIZE_BYTES, DEFAULT_UNIT_SIZE_BYTES};
use super::{describe_bytes, invalid, BackendKind, Config, ConfigError, NamespaceConfig, DEFAULT_BLOCK_SIZE_BYTES};

/// Built storage entries: backends until their one user takes them, pools for good.
#[derive(Default)]
struct Built {
    backends: HashMap<usize, Arc<dyn Backend>>,
    pools: HashMap<usize, Arc<Pool>>,
}

impl Built {
    /// Hands a backend to its user. Validation guarantees one user per backend and
    /// that parts are built first, so a miss is a bug here, reported rather than a panic.
    fn take(&mut self, config: &Config, index: usize) -> Result<Arc<dyn Backend>, ConfigError> {
        self.backends.remove(&index).ok_or_else(|| {
            invalid(config.backends[index].location(), "internal error: built out of order or used twice")
        })
    }

    fn pool(&self, config: &Config, index: usize) -> Result<Arc<Pool>, ConfigError> {
        self.pools
            .get(&index)
            .cloned()
            .ok_or_else(|| invalid(config.pools[index].location(), "internal error: pool used before it was opened"))
    }
}

/// Builds the storage and returns the subsystem specs.
pub fn build(config: &Config, plan: &Plan) -> Result<Vec<SubsystemSpec>, ConfigError> {
    let mut built = Built::default();
    for &node in &plan.order {
        match node {
            Node::Backend(index) => {
                let backend = build_backend(config, index, &mut built)?;
                built.backends.insert(index, backend);
            }
            Node::Pool(index) => {
                let pool_config = &config.pools[index];
                let device = match config.backends.iter().position(|backend| backend.name == pool_config.device) {
                    Some(device) => built.take(config, device)?,
                    None => return Err(invalid(pool_config.location(), "internal error: device not built")),
                };
                let store = pool_config.table.clone().map_or_else(TableStore::memory, TableStore::File);
                let unit = pool_config.unit_size.map_or(DEFAULT_UNIT_SIZE_BYTES, |size| size.0);
                let pool = Pool::open_with_unit_size(device, store, unit).map_err(|error| {
                    invalid(pool_config.location(), format!("cannot open the pool: {error}"))
                })?;
                built.pools.insert(index, Arc::new(pool));
            }
        }
    }
    let mut specs = Vec::with_capacity(plan.subsystems.len());
    for (subsystem_plan, subsystem) in plan.subsystems.iter().zip(&config.subsystems) {
        let mut namespaces = Vec::with_capacity(subsystem_plan.namespaces.len());
        for namespace_plan in &subsystem_plan.namespaces {
            let location = namespace_plan.location.as_str();
            let id = NamespaceId(namespace_plan.nsid);
            let (backend, nguid, uuid) = match &namespace_plan.source {
                Source::Inline(kind) => {
                    let namespace = &subsystem.namespaces[namespace_plan.index];
                    (build_inline(*kind, namespace, location)?, namespace_plan.nguid, namespace_plan.uuid)
                }
                Source::Device(index) => (built.take(config, *index)?, namespace_plan.nguid, namespace_plan.uuid),
                Source::Pool { pool: pool_index, size_bytes, thin } => {
                    let pool = built.pool(config, *pool_index)?;
                    let binding = NamespaceBinding {
                        subsystem_nqn: subsystem.nqn.clone(),
                        namespace_id: namespace_plan.nsid,
                        all_hosts: true,
                        hosts: Vec::new(),
                    };
                    let what = format!("pool {:?}", config.pools[*pool_index].name);
                    let record = ensure_carve(&pool, binding, *size_bytes, *thin, location, &what)?;
                    if subsystem_plan.management_pool == Some(*pool_index) {
                        // The subsystem loads the carves bound to it from its own pool.
                        continue;
                    }
                    let backend = pool.get(record.id).map_err(|error| invalid(location, error.to_string()))?;
                    (backend, Some(record.nguid), Some(record.uuid))
                }
            };
            namespaces.push(NamespaceSpec { id, backend, nguid, uuid });
        }
        let pool = match subsystem_plan.management_pool {
            None => None,
            Some(pool_index) => {
                let pool = built.pool(config, pool_index)?;
                check_management_nsids(&pool, &subsystem.nqn, &namespaces, subsystem_plan, &config.pools[pool_index].name)?;
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
    Ok(specs)
}

/// A namespace with its own `backend = "ram" | "null" | "file"`.
fn build_inline(kind: BackendKind, namespace: &NamespaceConfig, location: &str) -> Result<Arc<dyn Backend>, ConfigError> {
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
    FileBackend::open(path, options).map(|backend| backend as Arc<dyn Backend>).map_err(|error| invalid(location, error.to_string()))
}

fn memory_backend(ram: bool, size: Option<u64>, block_size: Option<u32>, location: &str) -> Result<Arc<dyn Backend>, ConfigError> {
    let block_size = block_size.unwrap_or(DEFAULT_BLOCK_SIZE_BYTES);
    let bytes = size.unwrap_or(0);
    let geometry = Geometry { block_size_bytes: block_size, block_count: bytes / u64::from(block_size) };
    let built = if ram {
        RamBackend::try_new(geometry).map(|backend| backend as Arc<dyn Backend>)
    } else {
        NullBackend::try_new(geometry).map(|backend| backend as Arc<dyn Backend>)
    };
    built.map_err(|error| invalid(format!("{location}.size"), error.to_string()))
}

fn build_backend(config: &Config, index: usize, built: &mut Built) -> Result<Arc<dyn Backend>, ConfigError> {
    let backend = &config.backends[index];
    let location = backend.location();
    let size = backend.size.map(|size| size.0);
    let part = |name: &str| config.backends.iter().position(|other| other.name == name);
    match backend.kind {
        StorageKind::Ram | StorageKind::Null => {
            memory_backend(backend.kind == StorageKind::Ram, size, backend.block_size, &location)
        }
        StorageKind::File => {
            let path = backend.path.as_deref().unwrap_or(std::path::Path::new(""));
            open_file(path, size, backend.block_size, backend.direct_io, &location)
        }
        StorageKind::Raid0 => {
            let names = backend.members.clone().unwrap_or_default();
            let mut members = Vec::with_capacity(names.len());
            for name in &names {
                let member = part(name).ok_or_else(|| invalid(&location, format!("internal error: member {name:?} unknown")))?;
                members.push(built.take(config, member)?);
            }
            let strip = backend.strip_size.map_or(DEFAULT_STRIP_SIZE_BYTES, |size| size.0);
            let strip = u32::try_from(strip).map_err(|_| invalid(&location, "strip_size is too large"))?;
            Raid0Backend::new(members, strip)
                .map(|raid| raid as Arc<dyn Backend>)
                .map_err(|error| invalid(&location, composition_message(&error, backend)))
        }
        StorageKind::Cache => {
            let tier = |name: &Option<String>| name.as_deref().and_then(part);
            let (Some(fast), Some(slow)) = (tier(&backend.fast), tier(&backend.slow)) else {
                return Err(invalid(&location, "internal error: tier unknown"));
            };
            let (fast, slow) = (built.take(config, fast)?, built.take(config, slow)?);
            let mode = match backend.mode {
                Some(CacheModeConfig::WriteBack) => CacheMode::WriteBack,
                _ => CacheMode::WriteThrough,
            };
            let line = backend.line_size.map_or(u64::from(storage::DEFAULT_LINE_SIZE_BYTES), |size| size.0);
            let line = u32::try_from(line).map_err(|_| invalid(&location, "line_size is too large"))?;
            CacheBackend::with_line_size(fast, slow, mode, line)
                .map(|cache| cache as Arc<dyn Backend>)
                .map_err(|error| invalid(&location, composition_message(&error, backend)))
        }
        StorageKind::Carve => {
            let pool_name = backend.pool.as_deref().unwrap_or_default();
            let Some(pool_index) = config.pools.iter().position(|pool| pool.name == pool_name) else {
                return Err(invalid(&location, format!("internal error: pool {pool_name:?} unknown")));
            };
            let pool = built.pool(config, pool_index)?;
            let binding = NamespaceBinding {
                subsystem_nqn: format!("{CARVE_BACKEND_NQN_PREFIX}{}", backend.name),
                namespace_id: 1,
                all_hosts: false,
                hosts: Vec::new(),
            };
            let what = format!("pool {pool_name:?}");
            let record = ensure_carve(&pool, binding, size.unwrap_or(0), backend.thin.unwrap_or(false), &location, &what)?;
            pool.get(record.id).map_err(|error| invalid(&location, error.to_string()))
        }
    }
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

/// The carve recorded under `binding`, created on first start. A stored carve whose
/// size or provisioning differs from the config is an error, never silently resized.
fn ensure_carve(
    pool: &Pool,
    binding: NamespaceBinding,
    size_bytes: u64,
    thin: bool,
    location: &str,
    what: &str,
) -> Result<CarveRecord, ConfigError> {
    let block_size = u64::from(pool.block_size_bytes());
    if size_bytes == 0 || !size_bytes.is_multiple_of(block_size) {
        return Err(invalid(
            location,
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
            let id = pool.create_bound(size_blocks, thin, Some(binding)).map_err(|error| match error {
                PoolError::NoSpace => invalid(
                    location,
                    format!(
                        "{what} has no room for a thick carve of {} ({} free); make it smaller, thin = true, or the pool larger",
                        describe_bytes(size_bytes),
                        describe_bytes(pool.free_bytes())
                    ),
                ),
                other => invalid(location, format!("cannot create the carve in {what}: {other}")),
            })?;
            tracing::info!("config: {location}: created a {} carve of {} in {what}", provisioning(thin), describe_bytes(size_bytes));
            pool.record(id).map_err(|error| invalid(location, error.to_string()))
        }
        [record] if record.size_blocks != size_blocks => Err(invalid(
            location,
            format!(
                "{what} already holds this carve (id {}) with {}, but size = {}: carves are not resized; set size = \"{}\"",
                record.id.0,
                describe_bytes(record.size_blocks * block_size),
                describe_bytes(size_bytes),
                describe_bytes(record.size_blocks * block_size).replace(' ', "")
            ),
        )),
        [record] if record.thin != thin => Err(invalid(
            location,
            format!(
                "{what} already holds this carve (id {}) as {}, but the config says {}; set thin = {}",
                record.id.0,
                provisioning(record.thin),
                provisioning(thin),
                record.thin
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

//! Subsystems and their namespaces: which storage each namespace uses, NSIDs, and the
//! checks on namespace keys, pool namespaces and Namespace Management pools.

use std::collections::HashMap;
use std::path::PathBuf;

use super::graph::{Graph, Node};
use super::schema::StorageKind;
use super::shapes::{self, Retention, Shape, Shapes};
use super::{describe_bytes, invalid, parse_identifier, BackendKind, Config, ConfigError, NamespaceConfig};

/// Subsystem NQNs under this prefix are reserved: the pool table records carves used as
/// `kind = "carve"` backends under `<prefix><backend name>`, and no subsystem may load
/// them as namespaces.
pub const CARVE_BACKEND_NQN_PREFIX: &str = "nqn.2026-11.io.sluice:backend:";

/// Checks a namespace's `ana_group` (1..=ANAGRPMAX).
fn ana_group(group: Option<u32>, location: &str) -> Result<Option<nvme_spec::ana::AnaGroupId>, ConfigError> {
    let Some(group) = group else { return Ok(None) };
    let max = nvme_target::limits::MAX_ANA_GROUP_ID;
    if group == 0 || group > max {
        return Err(invalid(format!("{location}.ana_group"), format!("ana_group = {group} is outside 1..={max}")));
    }
    Ok(Some(nvme_spec::ana::AnaGroupId(group)))
}

/// Where a namespace's blocks come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// `backend = "ram" | "null" | "file"` in the namespace itself.
    Inline(BackendKind),
    /// `device = "<backend>"`: a `[[backend]]` index.
    Device(usize),
    /// `pool = "<pool>"`: a carve of a `[[pool]]` index.
    Pool { pool: usize, size_bytes: u64, thin: bool },
}

/// One namespace after validation.
#[derive(Clone, Debug)]
pub struct NamespacePlan {
    /// Index in the subsystem's `namespace` list.
    pub index: usize,
    pub nsid: u32,
    /// `subsystem[i] (nqn) namespace[j]`, the prefix of every message about it.
    pub location: String,
    pub source: Source,
    pub nguid: Option<[u8; 16]>,
    pub uuid: Option<[u8; 16]>,
    /// ANAGRPID (`None`: group 1).
    pub ana_group: Option<nvme_spec::ana::AnaGroupId>,
    /// Filled in once the storage shapes are known.
    pub shape: Option<Shape>,
}

/// One subsystem after validation.
#[derive(Clone, Debug)]
pub struct SubsystemPlan {
    pub location: String,
    /// The `[[pool]]` index Namespace Management carves from.
    pub management_pool: Option<usize>,
    pub namespaces: Vec<NamespacePlan>,
}

/// Resolves every subsystem's pool and namespaces (recording their use of backends and
/// pools in `graph`), assigns NSIDs and checks the keys of each namespace.
pub fn resolve(config: &Config, graph: &mut Graph) -> Result<Vec<SubsystemPlan>, ConfigError> {
    let mut plans = Vec::with_capacity(config.subsystems.len());
    let mut nqns: HashMap<&str, String> = HashMap::new();
    for (subsystem_index, subsystem) in config.subsystems.iter().enumerate() {
        let location = format!("subsystem[{subsystem_index}] ({})", subsystem.nqn);
        if subsystem.nqn.starts_with(CARVE_BACKEND_NQN_PREFIX) {
            return Err(invalid(
                format!("{location}.nqn"),
                format!(
                    "NQNs starting with {CARVE_BACKEND_NQN_PREFIX:?} are reserved for carve backends; choose another"
                ),
            ));
        }
        if let Some(first) = nqns.insert(subsystem.nqn.as_str(), location.clone()) {
            return Err(invalid(
                format!("{location}.nqn"),
                format!("{:?} is also the NQN of {first}; NQNs must be unique", subsystem.nqn),
            ));
        }
        let management_pool = match &subsystem.pool {
            None => None,
            Some(name) => {
                let node = graph.resolve(config, name, true, &location, "Namespace Management pool")?;
                graph.add_use(node, location.clone(), "Namespace Management pool", None);
                match node {
                    Node::Pool(index) => Some(index),
                    Node::Backend(_) => None,
                }
            }
        };
        let mut namespaces = Vec::with_capacity(subsystem.namespaces.len());
        let mut by_nsid: HashMap<u32, String> = HashMap::new();
        let mut next_nsid = 1u32;
        for (namespace_index, namespace) in subsystem.namespaces.iter().enumerate() {
            let location = format!("{location} namespace[{namespace_index}]");
            let source = resolve_source(config, graph, namespace, &location)?;
            if matches!(source, Source::Pool { .. }) && namespace.nsid.is_none() {
                return Err(invalid(
                    &location,
                    "a pool namespace needs an explicit `nsid`: its carve is found again after a restart by subsystem \
                     NQN and NSID, so the NSID must not depend on the order of entries",
                ));
            }
            let nsid = namespace.nsid.unwrap_or(next_nsid);
            next_nsid = nsid.saturating_add(1);
            if let Some(first) = by_nsid.insert(nsid, location.clone()) {
                return Err(invalid(
                    format!("{location}.nsid"),
                    format!("nsid {nsid} is also used by {first}; every namespace of a subsystem needs its own nsid"),
                ));
            }
            namespaces.push(NamespacePlan {
                index: namespace_index,
                nsid,
                nguid: parse_identifier(namespace.nguid.as_deref(), &format!("{location}.nguid"))?,
                uuid: parse_identifier(namespace.uuid.as_deref(), &format!("{location}.uuid"))?,
                ana_group: ana_group(namespace.ana_group, &location)?,
                location,
                source,
                shape: None,
            });
        }
        plans.push(SubsystemPlan { location, management_pool, namespaces });
    }
    Ok(plans)
}

fn resolve_source(
    config: &Config,
    graph: &mut Graph,
    namespace: &NamespaceConfig,
    location: &str,
) -> Result<Source, ConfigError> {
    let refuse = |keys: &[(&str, bool)], what: &str| -> Result<(), ConfigError> {
        match keys.iter().find(|(_, given)| *given) {
            Some((key, _)) => Err(invalid(location, format!("`{key}` does not apply to {what}; remove it"))),
            None => Ok(()),
        }
    };
    match (namespace.backend, &namespace.device, &namespace.pool) {
        (Some(kind), None, None) => {
            refuse(&[("thin", namespace.thin.is_some())], "an inline backend (only to pool namespaces)")?;
            if kind != BackendKind::File && (namespace.path.is_some() || namespace.direct_io.is_some()) {
                return Err(invalid(location, "`path` and `direct_io` only apply to backend = \"file\""));
            }
            if kind == BackendKind::File && namespace.path.is_none() {
                return Err(invalid(
                    format!("{location}.path"),
                    "backend = \"file\" needs path = \"/path/to/file-or-block-device\"",
                ));
            }
            Ok(Source::Inline(kind))
        }
        (None, Some(device), None) => {
            let what = "a namespace with `device` (the [[backend]] entry sets it)";
            refuse(
                &[
                    ("size", namespace.size.is_some()),
                    ("block_size", namespace.block_size.is_some()),
                    ("path", namespace.path.is_some()),
                    ("direct_io", namespace.direct_io.is_some()),
                    ("thin", namespace.thin.is_some()),
                ],
                what,
            )?;
            let node = graph.resolve(config, device, false, location, "device")?;
            graph.add_use(node, location.to_string(), "device", None);
            match node {
                Node::Backend(index) => Ok(Source::Device(index)),
                Node::Pool(_) => Err(invalid(location, "`device` must name a [[backend]]")),
            }
        }
        (None, None, Some(pool)) => {
            refuse(
                &[
                    ("block_size", namespace.block_size.is_some()),
                    ("path", namespace.path.is_some()),
                    ("direct_io", namespace.direct_io.is_some()),
                ],
                "a pool namespace (the pool's device sets it)",
            )?;
            // `nguid` and `uuid` are allowed: given, they become the carve's identity at
            // its creation (a CSI driver derives the UUID from the volume name, so a
            // retried CreateVolume finds its namespace); not given, they are generated.
            // Either way the pool table keeps them.
            let Some(size) = namespace.size else {
                return Err(invalid(
                    location,
                    "`size` is missing: a pool namespace needs its capacity, e.g. size = \"100GiB\"",
                ));
            };
            let node = graph.resolve(config, pool, true, location, "pool")?;
            graph.add_use(node, location.to_string(), "pool", None);
            match node {
                Node::Pool(index) => {
                    Ok(Source::Pool { pool: index, size_bytes: size.0, thin: namespace.thin.unwrap_or(false) })
                }
                Node::Backend(_) => Err(invalid(location, "`pool` must name a [[pool]]")),
            }
        }
        (None, None, None) => Err(invalid(
            location,
            "no storage: give backend = \"ram\" | \"null\" | \"file\", device = \"<[[backend]] name>\" or \
             pool = \"<[[pool]] name>\"",
        )),
        _ => Err(invalid(location, "give only one of `backend`, `device` and `pool`")),
    }
}

/// Once the storage shapes are known: the shape of every namespace, checks of inline
/// storage and pool namespace sizes, and whether each pool can hold its thick carves.
/// Returns the files inline namespaces use.
pub fn finish(
    config: &Config,
    plans: &mut [SubsystemPlan],
    shapes: &Shapes,
) -> Result<Vec<(PathBuf, String)>, ConfigError> {
    let mut paths = Vec::new();
    // Thick bytes asked of each pool, in whole allocation units, with who asks.
    let mut thick_demand: HashMap<usize, (u64, Vec<String>)> = HashMap::new();
    let mut add_thick_demand = |pool: usize, bytes: u64, user: String| {
        let unit = config.pools[pool].unit_size.map_or(super::schema::DEFAULT_UNIT_SIZE_BYTES, |size| size.0);
        let demand = thick_demand.entry(pool).or_default();
        demand.0 = demand.0.saturating_add(bytes.div_ceil(unit).saturating_mul(unit));
        demand.1.push(user);
    };
    for (subsystem_index, plan) in plans.iter_mut().enumerate() {
        for namespace_plan in &mut plan.namespaces {
            let namespace = &config.subsystems[subsystem_index].namespaces[namespace_plan.index];
            let location = namespace_plan.location.as_str();
            let shape = match &namespace_plan.source {
                Source::Inline(BackendKind::Ram) => shapes::memory_shape(
                    namespace.size.map(|size| size.0),
                    namespace.block_size,
                    Retention::Volatile,
                    location,
                )?,
                Source::Inline(BackendKind::Null) => shapes::memory_shape(
                    namespace.size.map(|size| size.0),
                    namespace.block_size,
                    Retention::Discards,
                    location,
                )?,
                Source::Inline(BackendKind::File) => {
                    let path = namespace.path.as_deref().unwrap_or(std::path::Path::new(""));
                    let facts =
                        shapes::inspect_file(path, namespace.size.map(|size| size.0), namespace.block_size, location)?;
                    paths.push((facts.canonical_path, location.to_string()));
                    facts.shape
                }
                Source::Device(index) => shapes.of[&Node::Backend(*index)],
                Source::Pool { pool, size_bytes, thin } => {
                    let pool_shape = shapes.of[&Node::Pool(*pool)];
                    if let Some(block_size) = pool_shape.block_size {
                        if *size_bytes == 0 || !size_bytes.is_multiple_of(u64::from(block_size)) {
                            return Err(invalid(
                                location,
                                format!(
                                    "size {size_bytes} bytes is not a positive multiple of pool {:?}'s {block_size}-byte blocks",
                                    config.pools[*pool].name
                                ),
                            ));
                        }
                    }
                    if !thin {
                        add_thick_demand(*pool, *size_bytes, location.to_string());
                    }
                    Shape {
                        block_size: pool_shape.block_size,
                        capacity_bytes: Some(*size_bytes),
                        retention: pool_shape.retention,
                    }
                }
            };
            namespace_plan.shape = Some(shape);
        }
    }
    let thick_carves =
        config.backends.iter().filter(|backend| backend.kind == StorageKind::Carve && backend.thin != Some(true));
    for backend in thick_carves {
        let pool = backend.pool.as_deref().and_then(|name| config.pools.iter().position(|pool| pool.name == name));
        if let (Some(pool), Some(size)) = (pool, backend.size) {
            add_thick_demand(pool, size.0, backend.location());
        }
    }
    let mut demands: Vec<_> = thick_demand.into_iter().collect();
    demands.sort_by_key(|(pool, _)| *pool);
    for (pool, (bytes, users)) in demands {
        if let Some(capacity) = shapes.of[&Node::Pool(pool)].capacity_bytes {
            if bytes > capacity {
                return Err(invalid(
                    config.pools[pool].location(),
                    format!(
                        "the thick namespaces and carves in it ({}) need {} in whole allocation units, but the pool \
                         holds {}; make them smaller, make some thin = true, or give the pool a larger device",
                        users.join(", "),
                        describe_bytes(bytes),
                        describe_bytes(capacity)
                    ),
                ));
            }
        }
    }
    Ok(paths)
}

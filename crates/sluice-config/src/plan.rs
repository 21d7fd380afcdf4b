//! The side-effect-free half of the config: validation into a [`Plan`] (what to build,
//! in which order), the stand-in target `sluice config check` validates, and its report.

use std::collections::HashMap;
use std::sync::Arc;

use nvme_spec::NamespaceId;
use nvme_target::{NamespaceSpec, SubsystemSpec};
use storage::{Backend, Geometry, NullBackend};

use super::graph::{Graph, Node};
use super::namespaces::{self, Source, SubsystemPlan};
use super::schema::{StorageKind, DEFAULT_STRIP_SIZE_BYTES, DEFAULT_UNIT_SIZE_BYTES};
use super::shapes::{self, Shape};
use super::{describe_bytes, invalid, Config, ConfigError, DEFAULT_BLOCK_SIZE_BYTES};

/// A validated config: everything the build needs to know, nothing built yet.
pub struct Plan {
    /// The storage entries in use, each after its parts.
    pub order: Vec<Node>,
    /// Expected shape of every storage entry.
    pub shapes: HashMap<Node, Shape>,
    pub subsystems: Vec<SubsystemPlan>,
    /// Things that work but are probably not meant (unused entries).
    pub warnings: Vec<String>,
}

/// Validates `config` without side effects (reads only file metadata).
pub fn validate(config: &Config) -> Result<Plan, ConfigError> {
    config.listen_addresses()?;
    config.advertised_addresses()?;
    let mut graph = Graph::new(config)?;
    let all_nodes = graph.build_order(config)?;
    let mut subsystems = namespaces::resolve(config, &mut graph)?;
    let unused = graph.check_single_use(config)?;
    let shapes = shapes::compute(config, &graph, &all_nodes)?;
    super::qos::plan(config)?;
    super::attachment::check(config)?;
    let mut paths = shapes.paths.clone();
    paths.extend(namespaces::finish(config, &mut subsystems, &shapes)?);
    shapes::check_distinct_paths(&paths)?;
    let mut warnings: Vec<String> = unused
        .iter()
        .map(|&node| {
            format!(
                "{} is not used by any namespace, subsystem or other entry; it is not opened until a namespace \
                 uses it (through the management API or a reload)",
                Graph::location(config, node)
            )
        })
        .collect();
    warnings.extend(super::qos::unknown_namespace_warnings(config));
    Ok(Plan { order: graph.needed(&all_nodes), shapes: shapes.of, subsystems, warnings })
}

/// "4096-byte blocks, 1 GiB", with what only the device can tell left vague.
fn describe_shape(shape: &Shape) -> String {
    let blocks = shape.block_size.map_or("the device's block size".to_string(), |size| format!("{size}-byte blocks"));
    let capacity = shape.capacity_bytes.map_or("the device's size".to_string(), describe_bytes);
    format!("{blocks}, {capacity}")
}

/// What `sluice config check` prints about a valid config.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// One line per listener count, storage entry, subsystem and namespace.
    pub lines: Vec<String>,
    pub warnings: Vec<String>,
}

impl Plan {
    /// The subsystems with a null backend of the expected geometry standing in for
    /// every namespace, so the target's own checks run without touching storage.
    pub fn stand_in_subsystems(&self, config: &Config) -> Result<Vec<SubsystemSpec>, ConfigError> {
        let mut specs = Vec::with_capacity(self.subsystems.len());
        for (plan, subsystem) in self.subsystems.iter().zip(&config.subsystems) {
            let mut namespaces = Vec::with_capacity(plan.namespaces.len());
            for namespace in &plan.namespaces {
                let shape = namespace.shape.ok_or_else(|| invalid(&namespace.location, "internal error: no shape"))?;
                let block_size = shape.block_size.unwrap_or(DEFAULT_BLOCK_SIZE_BYTES);
                let block_count = shape.capacity_bytes.map_or(1, |bytes| (bytes / u64::from(block_size)).max(1));
                let stand_in = NullBackend::try_new(Geometry { block_size_bytes: block_size, block_count })
                    .map_err(|error| invalid(&namespace.location, error.to_string()))?;
                namespaces.push(NamespaceSpec {
                    id: NamespaceId(namespace.nsid),
                    backend: stand_in as Arc<dyn Backend>,
                    nguid: namespace.nguid,
                    uuid: namespace.uuid,
                    ana_group: namespace.ana_group,
                });
            }
            specs.push(SubsystemSpec {
                hosts: subsystem.host_access(&plan.location)?,
                nqn: subsystem.nqn.clone(),
                serial_number: subsystem.serial.clone(),
                model_number: subsystem.model.clone(),
                namespaces,
                pool: None,
            });
        }
        Ok(specs)
    }

    /// A summary of what the config describes, for `sluice config check`.
    pub fn report(&self, config: &Config) -> CheckReport {
        let mut lines = vec![format!("listeners: {}", config.listeners.len())];
        for listener in config.listeners.iter().filter(|listener| listener.tls != super::TlsSetting::None) {
            lines.push(format!("  {}: TLS {}", listener.address, listener.tls.secure_channel().name()));
        }
        for &node in &self.order {
            let shape = describe_shape(&self.shapes[&node]);
            let line = match node {
                Node::Backend(index) => {
                    let backend = &config.backends[index];
                    let quoted =
                        |names: &[&String]| names.iter().map(|name| format!("{name:?}")).collect::<Vec<_>>().join(", ");
                    let detail = match backend.kind {
                        StorageKind::Ram | StorageKind::Null => String::new(),
                        StorageKind::File => format!(
                            " {}{}",
                            backend.path.as_deref().unwrap_or(std::path::Path::new("")).display(),
                            if backend.direct_io == Some(false) { " (buffered)" } else { " (O_DIRECT)" }
                        ),
                        StorageKind::Raid0 => format!(
                            " of {} with {} strips",
                            quoted(&backend.members.iter().flatten().collect::<Vec<_>>()),
                            describe_bytes(backend.strip_size.map_or(DEFAULT_STRIP_SIZE_BYTES, |size| size.0))
                        ),
                        StorageKind::Cache => format!(
                            " ({}), fast tier {:?} over slow tier {:?}, {} lines",
                            match backend.mode {
                                Some(super::CacheModeConfig::WriteBack) => "write-back",
                                _ => "write-through",
                            },
                            backend.fast.as_deref().unwrap_or_default(),
                            backend.slow.as_deref().unwrap_or_default(),
                            describe_bytes(
                                backend.line_size.map_or(u64::from(storage::DEFAULT_LINE_SIZE_BYTES), |size| size.0)
                            )
                        ),
                        StorageKind::Carve => format!(
                            " of pool {:?}{}",
                            backend.pool.as_deref().unwrap_or_default(),
                            if backend.thin == Some(true) { ", thin" } else { ", thick" }
                        ),
                        StorageKind::Rbd => backend
                            .rbd_options()
                            .map(|options| {
                                format!(" image {}/{} ({})", options.pool, options.image, options.cluster.describe())
                            })
                            .unwrap_or_default(),
                    };
                    format!("backend {:?}: {}{detail}, {shape}", backend.name, backend.kind.as_str())
                }
                Node::Pool(index) => {
                    let pool = &config.pools[index];
                    let table = pool
                        .table
                        .as_ref()
                        .map_or("in-memory table".to_string(), |table| format!("table {}", table.display()));
                    let unit = describe_bytes(pool.unit_size.map_or(DEFAULT_UNIT_SIZE_BYTES, |size| size.0));
                    format!("pool {:?}: on {:?}, {table}, {unit} units, {shape}", pool.name, pool.device)
                }
            };
            lines.push(line);
        }
        for (plan, subsystem) in self.subsystems.iter().zip(&config.subsystems) {
            let management = plan.management_pool.map_or(String::new(), |pool| {
                format!("; Namespace Management with pool {:?}", config.pools[pool].name)
            });
            lines.push(format!("{}: {} namespace(s){management}", subsystem.nqn, plan.namespaces.len()));
            for namespace in &plan.namespaces {
                let source = match &namespace.source {
                    Source::Inline(super::BackendKind::File) => {
                        let path =
                            subsystem.namespaces[namespace.index].path.as_deref().unwrap_or(std::path::Path::new(""));
                        format!("file {}", path.display())
                    }
                    Source::Inline(kind) => format!("{kind:?}").to_lowercase(),
                    Source::Device(index) => format!("device {:?}", config.backends[*index].name),
                    Source::Pool { pool, thin, .. } => {
                        format!("pool {:?} ({})", config.pools[*pool].name, if *thin { "thin" } else { "thick" })
                    }
                };
                let shape =
                    namespace.shape.as_ref().map_or(String::new(), |shape| format!(", {}", describe_shape(shape)));
                let qos = subsystem.namespaces[namespace.index]
                    .qos
                    .as_ref()
                    .and_then(|qos| qos.limits("").ok())
                    .map_or(String::new(), |limits| format!(", QoS {}", super::qos::summary(&limits)));
                lines.push(format!("  nsid {}: {source}{shape}{qos}", namespace.nsid));
            }
            for host in subsystem.hosts.iter().filter(|host| !host.qos.is_empty()) {
                for entry in &host.qos {
                    let Ok(limits) = entry.limits("") else { continue };
                    let on = entry.nsid.map_or("each namespace".to_string(), |nsid| format!("nsid {nsid}"));
                    lines.push(format!("  host {} on {on}: QoS {}", host.nqn, super::qos::summary(&limits)));
                }
            }
        }
        let mut warnings = self.warnings.clone();
        let tls_listener = config.listeners.iter().any(|listener| listener.tls != super::TlsSetting::None);
        let hosts = || config.subsystems.iter().flat_map(|subsystem| &subsystem.hosts);
        let any_tls_key = hosts().any(|host| host.tls_key.is_some());
        let any_concat = hosts().any(|host| host.concat);
        if tls_listener && !any_tls_key && !any_concat {
            warnings.push(
                "a listener has tls set but no [[subsystem.host]] has a tls_key or concat: no host can complete a TLS \
                 handshake (make a key with `sluice gen-tls-key`)"
                    .to_owned(),
            );
        }
        let optional_listener = config.listeners.iter().any(|listener| listener.tls == super::TlsSetting::Optional);
        if any_concat && !optional_listener {
            warnings.push(
                "a [[subsystem.host]] has concat = true but no listener has tls = \"optional\": secure channel \
                 concatenation starts on a plain admin queue and continues over TLS on the same listener"
                    .to_owned(),
            );
        }
        CheckReport { lines, warnings }
    }
}

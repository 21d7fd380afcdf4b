//! What each storage entry will look like once built (block size, capacity, whether
//! it keeps data across restarts), worked out without opening anything, and the checks
//! that need it: matching block sizes, strips and lines that fit, durable cache tiers,
//! pool tables, files that exist or can be created.

use std::collections::HashMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use storage::{Geometry, MAX_BLOCK_SIZE_BYTES, MIN_BLOCK_SIZE_BYTES};

use super::graph::{Graph, Node};
use super::schema::{
    BackendConfig, CacheModeConfig, PoolConfig, StorageKind, DEFAULT_STRIP_SIZE_BYTES, DEFAULT_UNIT_SIZE_BYTES,
};
use super::{describe_bytes, invalid, Config, ConfigError, DEFAULT_BLOCK_SIZE_BYTES};

/// Default block size of a regular file (the file backend's).
const DEFAULT_FILE_BLOCK_SIZE_BYTES: u32 = runtime::file_backend::DEFAULT_FILE_BLOCK_SIZE_BYTES;

/// What survives a restart of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Files and block devices.
    Persistent,
    /// RAM.
    Volatile,
    /// Null: nothing is ever kept.
    Discards,
}

impl Retention {
    pub fn describe(self) -> &'static str {
        match self {
            Retention::Persistent => "keeps its data across restarts",
            Retention::Volatile => "loses its data at every restart",
            Retention::Discards => "discards every write",
        }
    }
}

/// An entry's expected geometry. `None` where only opening the device can tell (the
/// block size or size of a block device); the build step checks those.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub block_size: Option<u32>,
    pub capacity_bytes: Option<u64>,
    pub retention: Retention,
}

/// Facts about a file entry, from its metadata only.
#[derive(Clone, Debug)]
pub struct FileFacts {
    /// The path with symlinks and `..` resolved (the parent's, for a file to create), so
    /// two spellings of one file are recognised as one.
    pub canonical_path: PathBuf,
    pub shape: Shape,
}

/// Checks a block size from the config.
pub fn check_block_size(block_size: u32, location: &str) -> Result<(), ConfigError> {
    if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE_BYTES..=MAX_BLOCK_SIZE_BYTES).contains(&block_size) {
        return Err(invalid(
            location,
            format!("block_size {block_size} is not a power of two between {MIN_BLOCK_SIZE_BYTES} and {MAX_BLOCK_SIZE_BYTES}"),
        ));
    }
    Ok(())
}

/// Checks that `bytes` is a positive whole number of blocks that a device may have.
fn check_capacity(bytes: u64, block_size: u32, location: &str) -> Result<(), ConfigError> {
    if bytes == 0 || !bytes.is_multiple_of(u64::from(block_size)) {
        return Err(invalid(
            location,
            format!("size {bytes} bytes is not a positive multiple of the block size {block_size}"),
        ));
    }
    let geometry = Geometry { block_size_bytes: block_size, block_count: bytes / u64::from(block_size) };
    geometry.validate().map_err(|error| invalid(location, format!("size {bytes} bytes: {error}")))
}

/// RAM and null storage: the size is required and the block size defaults to 512.
pub fn memory_shape(
    size: Option<u64>,
    block_size: Option<u32>,
    retention: Retention,
    location: &str,
) -> Result<Shape, ConfigError> {
    let block_size = block_size.unwrap_or(DEFAULT_BLOCK_SIZE_BYTES);
    check_block_size(block_size, location)?;
    let size_location = format!("{location}.size");
    let Some(bytes) = size else {
        return Err(invalid(size_location, "missing: give the capacity, e.g. size = \"1GiB\""));
    };
    check_capacity(bytes, block_size, &size_location)?;
    Ok(Shape { block_size: Some(block_size), capacity_bytes: Some(bytes), retention })
}

/// A file or block device: exists, or can be created (size given, directory exists).
/// Only reads metadata.
pub fn inspect_file(
    path: &Path,
    size: Option<u64>,
    block_size: Option<u32>,
    location: &str,
) -> Result<FileFacts, ConfigError> {
    if let Some(block_size) = block_size {
        check_block_size(block_size, location)?;
    }
    let shown = path.display();
    let (canonical_path, block_size, capacity_bytes) = match std::fs::metadata(path) {
        Ok(metadata) if metadata.file_type().is_block_device() => {
            // The device's logical block size and size need an open descriptor; the
            // file backend checks them when it opens the device.
            (canonicalize(path, location)?, block_size, size)
        }
        Ok(metadata) if metadata.is_file() => {
            let block_size = block_size.unwrap_or(DEFAULT_FILE_BLOCK_SIZE_BYTES);
            let length = metadata.len();
            let capacity = match size {
                Some(requested) if requested < length => {
                    return Err(invalid(
                        location,
                        format!(
                            "{shown} is {} but size = {}: files are never shrunk; remove `size` to use the whole \
                             file, or give size >= {}",
                            describe_bytes(length),
                            describe_bytes(requested),
                            describe_bytes(length)
                        ),
                    ))
                }
                Some(requested) => requested,
                None if length == 0 => {
                    return Err(invalid(
                        location,
                        format!("{shown} is empty and no `size` is given; give size = \"...\" to extend it"),
                    ))
                }
                None => length,
            };
            (canonicalize(path, location)?, Some(block_size), Some(capacity))
        }
        Ok(_) => return Err(invalid(location, format!("{shown} is not a regular file or a block device"))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let Some(size) = size else {
                return Err(invalid(
                    location,
                    format!("{shown} does not exist and no `size` is given: fix the path, or give size = \"...\" to create it"),
                ));
            };
            let parent = parent_directory(path);
            if !parent.is_dir() {
                return Err(invalid(
                    location,
                    format!("cannot create {shown}: directory {} does not exist; create it first", parent.display()),
                ));
            }
            let name = path.file_name().ok_or_else(|| invalid(location, format!("{shown} does not name a file")))?;
            let canonical = canonicalize(&parent, location)?.join(name);
            (canonical, Some(block_size.unwrap_or(DEFAULT_FILE_BLOCK_SIZE_BYTES)), Some(size))
        }
        Err(error) => return Err(invalid(location, format!("cannot inspect {shown}: {error}"))),
    };
    if let (Some(block_size), Some(capacity)) = (block_size, capacity_bytes) {
        check_capacity(capacity, block_size, location)?;
    }
    let shape = Shape { block_size, capacity_bytes, retention: Retention::Persistent };
    Ok(FileFacts { canonical_path, shape })
}

fn parent_directory(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn canonicalize(path: &Path, location: &str) -> Result<PathBuf, ConfigError> {
    std::fs::canonicalize(path)
        .map_err(|error| invalid(location, format!("cannot resolve {}: {error}", path.display())))
}

/// Every entry's shape, plus the files entries use (for the one-user-per-file check).
pub struct Shapes {
    pub of: HashMap<Node, Shape>,
    /// (canonical path, entry location), for file backends and pool tables.
    pub paths: Vec<(PathBuf, String)>,
}

/// Works out every entry's shape in build order (parts first), checking each entry
/// against its parts.
pub fn compute(config: &Config, graph: &Graph, order: &[Node]) -> Result<Shapes, ConfigError> {
    let mut shapes = Shapes { of: HashMap::new(), paths: Vec::new() };
    for &node in order {
        let parts: Vec<(&str, Node, Shape)> =
            graph.parts.get(&node).into_iter().flatten().map(|&(role, part)| (role, part, shapes.of[&part])).collect();
        let shape = match node {
            Node::Backend(index) => backend_shape(config, &config.backends[index], &parts, &mut shapes.paths)?,
            Node::Pool(index) => pool_shape(&config.pools[index], parts[0].2, &mut shapes.paths)?,
        };
        shapes.of.insert(node, shape);
    }
    Ok(shapes)
}

fn kind_of(config: &Config, node: Node) -> &'static str {
    match node {
        Node::Backend(index) => config.backends[index].kind.as_str(),
        Node::Pool(_) => "pool",
    }
}

/// A size key that must be a power of two multiple of the block size and fit in u32.
fn power_of_two_size(key: &str, bytes: u64, block_size: Option<u32>, location: &str) -> Result<u32, ConfigError> {
    let fits = u32::try_from(bytes).ok().filter(|bytes| bytes.is_power_of_two());
    let Some(bytes_u32) = fits.filter(|&bytes| block_size.is_none_or(|block_size| bytes >= block_size)) else {
        let block =
            block_size.map_or(String::new(), |block_size| format!(" multiple of the {block_size}-byte block size,"));
        return Err(invalid(
            location,
            format!("{key} {} is not a power of two{block} up to 2 GiB", describe_bytes(bytes)),
        ));
    };
    Ok(bytes_u32)
}

fn backend_shape(
    config: &Config,
    backend: &BackendConfig,
    parts: &[(&str, Node, Shape)],
    paths: &mut Vec<(PathBuf, String)>,
) -> Result<Shape, ConfigError> {
    let location = backend.location();
    let size = backend.size.map(|size| size.0);
    match backend.kind {
        StorageKind::Ram => memory_shape(size, backend.block_size, Retention::Volatile, &location),
        StorageKind::Null => memory_shape(size, backend.block_size, Retention::Discards, &location),
        StorageKind::File => {
            let path = backend.path.as_deref().unwrap_or(Path::new(""));
            let facts = inspect_file(path, size, backend.block_size, &location)?;
            paths.push((facts.canonical_path, location));
            Ok(facts.shape)
        }
        StorageKind::Raid0 => {
            let block_size = common_block_size(config, parts, &location)?;
            let (first_role, first, first_shape) = parts[0];
            for &(_, part, shape) in &parts[1..] {
                if shape.retention != first_shape.retention {
                    return Err(invalid(
                        &location,
                        format!(
                            "{first_role} {:?} {} but {:?} {}: after a restart the set would be part old data, part \
                             zeroes; use members of one kind",
                            Graph::name(config, first),
                            first_shape.retention.describe(),
                            Graph::name(config, part),
                            shape.retention.describe()
                        ),
                    ));
                }
            }
            let strip = backend.strip_size.map_or(DEFAULT_STRIP_SIZE_BYTES, |size| size.0);
            let strip = u64::from(power_of_two_size("strip_size", strip, block_size, &location)?);
            let mut smallest: Option<u64> = None;
            for &(_, part, shape) in parts {
                let Some(capacity) = shape.capacity_bytes else {
                    smallest = None;
                    break;
                };
                if capacity < strip {
                    return Err(invalid(
                        &location,
                        format!(
                            "member {:?} holds {}, less than one {} strip; use a smaller strip_size or a larger member",
                            Graph::name(config, part),
                            describe_bytes(capacity),
                            describe_bytes(strip)
                        ),
                    ));
                }
                smallest = Some(smallest.map_or(capacity, |smallest: u64| smallest.min(capacity)));
            }
            let capacity_bytes = smallest.map(|smallest| smallest / strip * strip * parts.len() as u64);
            Ok(Shape { block_size, capacity_bytes, retention: first_shape.retention })
        }
        StorageKind::Cache => {
            let block_size = common_block_size(config, parts, &location)?;
            let (fast, fast_shape) = (Graph::name(config, parts[0].1), parts[0].2);
            let (slow, slow_shape) = (Graph::name(config, parts[1].1), parts[1].2);
            let (fast_kind, slow_kind) = (kind_of(config, parts[0].1), kind_of(config, parts[1].1));
            for (tier, name, shape) in [("fast", fast, fast_shape), ("slow", slow, slow_shape)] {
                if shape.retention == Retention::Discards {
                    return Err(invalid(
                        &location,
                        format!("{tier} tier {name:?} discards every write; a cache tier must keep data"),
                    ));
                }
            }
            let write_back = backend.mode == Some(CacheModeConfig::WriteBack);
            if write_back
                && fast_shape.retention == Retention::Volatile
                && slow_shape.retention == Retention::Persistent
            {
                return Err(invalid(
                    &location,
                    format!(
                        "mode = \"write-back\" with fast tier {fast:?} ({fast_kind}) that loses its data at every restart \
                         over slow tier {slow:?} ({slow_kind}) that keeps it: a write-back cache acknowledges FUA writes \
                         once they are on the fast tier, so acknowledged writes would be lost on a crash; use a persistent \
                         fast tier (e.g. kind = \"file\") or mode = \"write-through\""
                    ),
                ));
            }
            if write_back
                && fast_shape.retention == Retention::Persistent
                && slow_shape.retention != Retention::Persistent
            {
                return Err(invalid(
                    &location,
                    format!(
                        "mode = \"write-back\" with fast tier {fast:?} ({fast_kind}) that keeps its data over slow tier \
                         {slow:?} ({slow_kind}) that does not: after a restart the cache would replay old dirty lines \
                         over an empty slow tier; use a slow tier that keeps its data, or mode = \"write-through\""
                    ),
                ));
            }
            let line = backend.line_size.map_or(u64::from(storage::DEFAULT_LINE_SIZE_BYTES), |size| size.0);
            let line = u64::from(power_of_two_size("line_size", line, block_size, &location)?);
            if let (Some(block_size), Some(fast_bytes)) = (block_size, fast_shape.capacity_bytes) {
                // The fast tier holds a header block, one metadata block per slot
                // (rounded up to a line) and the slots: at least one slot must fit.
                let line_blocks = line / u64::from(block_size);
                let needed_blocks = 2u64.div_ceil(line_blocks) * line_blocks + line_blocks;
                if fast_bytes / u64::from(block_size) < needed_blocks {
                    return Err(invalid(
                        &location,
                        format!(
                            "fast tier {fast:?} holds {}, too little for the cache's metadata and one {} line (needs {}); \
                             use a larger fast tier or a smaller line_size",
                            describe_bytes(fast_bytes),
                            describe_bytes(line),
                            describe_bytes(needed_blocks * u64::from(block_size))
                        ),
                    ));
                }
            }
            Ok(Shape { block_size, capacity_bytes: slow_shape.capacity_bytes, retention: slow_shape.retention })
        }
        StorageKind::Rbd => {
            // The image's size is known only once it is opened (an existing image may
            // be larger than `size`); the build checks it then.
            let block_size = backend.block_size.unwrap_or(runtime::rbd_backend::DEFAULT_RBD_BLOCK_SIZE_BYTES);
            check_block_size(block_size, &location)?;
            if let Some(bytes) = size {
                check_capacity(bytes, block_size, &location)?;
            }
            Ok(Shape { block_size: Some(block_size), capacity_bytes: None, retention: Retention::Persistent })
        }
        StorageKind::Carve => {
            let pool_shape = parts[0].2;
            let bytes = size.unwrap_or(0);
            if let Some(block_size) = pool_shape.block_size {
                check_capacity(bytes, block_size, &location)?;
            }
            Ok(Shape {
                block_size: pool_shape.block_size,
                capacity_bytes: Some(bytes),
                retention: pool_shape.retention,
            })
        }
    }
}

/// The block size every part shares (where known); a mismatch names both parts.
fn common_block_size(
    config: &Config,
    parts: &[(&str, Node, Shape)],
    location: &str,
) -> Result<Option<u32>, ConfigError> {
    let mut first: Option<(&str, Node, u32)> = None;
    for &(role, part, shape) in parts {
        let Some(block_size) = shape.block_size else { continue };
        match first {
            None => first = Some((role, part, block_size)),
            Some((first_role, first_part, first_size)) if first_size != block_size => {
                return Err(invalid(
                    location,
                    format!(
                        "{role} {:?} has {block_size}-byte blocks but {first_role} {:?} has {first_size}-byte blocks; \
                         give every part the same block_size",
                        Graph::name(config, part),
                        Graph::name(config, first_part)
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(first.map(|(_, _, block_size)| block_size))
}

fn pool_shape(pool: &PoolConfig, device: Shape, paths: &mut Vec<(PathBuf, String)>) -> Result<Shape, ConfigError> {
    let location = pool.location();
    let unit = pool.unit_size.map_or(DEFAULT_UNIT_SIZE_BYTES, |size| size.0);
    let unit = u64::from(power_of_two_size("unit_size", unit, device.block_size, &location)?);
    let capacity_bytes = match device.capacity_bytes {
        Some(capacity) if capacity < unit => {
            return Err(invalid(
                &location,
                format!(
                "device {:?} holds {}, less than one {} allocation unit; use a smaller unit_size or a larger device",
                pool.device,
                describe_bytes(capacity),
                describe_bytes(unit)
            ),
            ))
        }
        capacity => capacity.map(|capacity| capacity / unit * unit),
    };
    match &pool.table {
        None if device.retention == Retention::Persistent => {
            return Err(invalid(
                &location,
                format!(
                    "`table` is missing: device {:?} keeps its data across restarts, so the pool's namespace table \
                     must too; add e.g. table = \"/var/lib/sluice/{}.table.json\" (created on first start)",
                    pool.device, pool.name
                ),
            ))
        }
        None => {}
        Some(table) => {
            let shown = table.display();
            match std::fs::metadata(table) {
                Ok(metadata) if metadata.is_file() => paths.push((canonicalize(table, &location)?, location.clone())),
                Ok(_) => return Err(invalid(&location, format!("table {shown} exists but is not a regular file"))),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    let parent = parent_directory(table);
                    if !parent.is_dir() {
                        return Err(invalid(
                            &location,
                            format!("table {shown}: directory {} does not exist; create it first", parent.display()),
                        ));
                    }
                    let name = table
                        .file_name()
                        .ok_or_else(|| invalid(&location, format!("table {shown} does not name a file")))?;
                    paths.push((canonicalize(&parent, &location)?.join(name), location.clone()));
                }
                Err(error) => return Err(invalid(&location, format!("cannot inspect table {shown}: {error}"))),
            }
        }
    }
    Ok(Shape { block_size: device.block_size, capacity_bytes, retention: device.retention })
}

/// No two entries may use one file (as data or as a pool table).
pub fn check_distinct_paths(paths: &[(PathBuf, String)]) -> Result<(), ConfigError> {
    let mut seen: HashMap<&Path, &str> = HashMap::new();
    for (path, location) in paths {
        if let Some(first) = seen.insert(path.as_path(), location.as_str()) {
            return Err(invalid(
                location,
                format!(
                    "{} is also used by {first}; two entries on one file would overwrite each other's blocks, so give \
                     each its own file",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

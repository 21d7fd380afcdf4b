//! The `[[backend]]` and `[[pool]]` entries as written, and the checks that need only
//! the entry itself: its name, which keys its kind takes, which it requires.

use std::path::PathBuf;

use serde::Deserialize;

use super::{invalid, ByteSize, ConfigError};

/// One `[[backend]]`: named storage that one namespace, RAID0 set, cache or pool uses.
///
/// Flat rather than one struct per kind, so that a key given to the wrong kind gets a
/// message naming the entry and the kind that takes it (serde's tagged enums would only
/// say "unknown field").
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Unique among backends and pools; other entries refer to it by this name.
    pub name: String,
    pub kind: StorageKind,
    /// ram, null, carve: capacity (required). file: create or extend to this size.
    /// rbd: create the image with this size when missing, grow it when smaller.
    #[serde(default)]
    pub size: Option<ByteSize>,
    /// ram, null, file, rbd: logical block size.
    #[serde(default)]
    pub block_size: Option<u32>,
    /// file: regular file or block device.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// file: O_DIRECT (default true).
    #[serde(default)]
    pub direct_io: Option<bool>,
    /// raid0: member backends, striped in this order.
    #[serde(default)]
    pub members: Option<Vec<String>>,
    /// raid0: strip size (default 128 KiB).
    #[serde(default)]
    pub strip_size: Option<ByteSize>,
    /// cache: the fast tier (holds the cache lines and their metadata).
    #[serde(default)]
    pub fast: Option<String>,
    /// cache: the slow tier (holds the data; the cache's capacity is its capacity).
    #[serde(default)]
    pub slow: Option<String>,
    /// cache: write-back or write-through.
    #[serde(default)]
    pub mode: Option<CacheModeConfig>,
    /// cache: cache line size (default 64 KiB).
    #[serde(default)]
    pub line_size: Option<ByteSize>,
    /// carve: the pool to carve from. rbd: the RADOS pool holding the image.
    #[serde(default)]
    pub pool: Option<String>,
    /// rbd: the image name in `pool`.
    #[serde(default)]
    pub image: Option<String>,
    /// rbd: the ceph.conf to read (default: librados' own lookup, $CEPH_CONF first).
    #[serde(default)]
    pub ceph_conf: Option<PathBuf>,
    /// rbd: the cephx user, without `client.` (default "admin").
    #[serde(default)]
    pub client: Option<String>,
    /// rbd: how long the cluster may take to answer one request before it fails with
    /// Namespace Not Ready (rados_osd_op_timeout; default 20000).
    #[serde(default)]
    pub op_timeout_ms: Option<u64>,
    /// carve: allocate on write instead of reserving the space at creation.
    #[serde(default)]
    pub thin: Option<bool>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum StorageKind {
    Ram,
    Null,
    File,
    Raid0,
    Cache,
    Carve,
    Rbd,
}

impl StorageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageKind::Ram => "ram",
            StorageKind::Null => "null",
            StorageKind::File => "file",
            StorageKind::Raid0 => "raid0",
            StorageKind::Cache => "cache",
            StorageKind::Carve => "carve",
            StorageKind::Rbd => "rbd",
        }
    }
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CacheModeConfig {
    WriteBack,
    WriteThrough,
}

/// One `[[pool]]`: thick and thin namespaces carved out of one backend.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Unique among backends and pools.
    pub name: String,
    /// The backend the pool carves (used by the pool alone).
    pub device: String,
    /// The JSON namespace table; required when the device keeps data across restarts.
    #[serde(default)]
    pub table: Option<PathBuf>,
    /// Allocation unit of a new pool (default 1 MiB); an existing table keeps its own.
    #[serde(default)]
    pub unit_size: Option<ByteSize>,
}

/// Default RAID0 strip.
pub const DEFAULT_STRIP_SIZE_BYTES: u64 = 128 << 10;
/// Default pool allocation unit (the storage crate's).
pub const DEFAULT_UNIT_SIZE_BYTES: u64 = storage::pool::DEFAULT_UNIT_SIZE_BYTES;

impl BackendConfig {
    /// `backend "name" (kind)`, the prefix of every message about this entry.
    pub fn location(&self) -> String {
        format!("backend {:?} ({})", self.name, self.kind.as_str())
    }

    /// The first key whose value differs from `other`'s (a reload reports it).
    pub fn first_difference(&self, other: &BackendConfig) -> Option<&'static str> {
        [
            ("name", self.name == other.name),
            ("kind", self.kind == other.kind),
            ("size", self.size == other.size),
            ("block_size", self.block_size == other.block_size),
            ("path", self.path == other.path),
            ("direct_io", self.direct_io == other.direct_io),
            ("members", self.members == other.members),
            ("strip_size", self.strip_size == other.strip_size),
            ("fast", self.fast == other.fast),
            ("slow", self.slow == other.slow),
            ("mode", self.mode == other.mode),
            ("line_size", self.line_size == other.line_size),
            ("pool", self.pool == other.pool),
            ("thin", self.thin == other.thin),
            ("image", self.image == other.image),
            ("ceph_conf", self.ceph_conf == other.ceph_conf),
            ("client", self.client == other.client),
            ("op_timeout_ms", self.op_timeout_ms == other.op_timeout_ms),
        ]
        .into_iter()
        .find_map(|(key, same)| (!same).then_some(key))
    }

    /// The names this entry refers to, with the role each plays (in a fixed order).
    pub fn references(&self) -> Vec<(&'static str, &str)> {
        let mut references = Vec::new();
        for member in self.members.iter().flatten() {
            references.push(("member", member.as_str()));
        }
        if let Some(fast) = &self.fast {
            references.push(("fast tier", fast.as_str()));
        }
        if let Some(slow) = &self.slow {
            references.push(("slow tier", slow.as_str()));
        }
        // An rbd entry's `pool` is a RADOS pool, not one of the config's.
        if let (Some(pool), StorageKind::Carve) = (&self.pool, self.kind) {
            references.push(("pool", pool.as_str()));
        }
        references
    }

    /// Keys that do not apply to the kind, and required keys that are missing.
    pub fn check_keys(&self) -> Result<(), ConfigError> {
        use StorageKind::*;
        let location = self.location();
        // (key, given, the kinds that take it)
        let keys: [(&str, bool, &[StorageKind]); 16] = [
            ("size", self.size.is_some(), &[Ram, Null, File, Carve, Rbd]),
            ("block_size", self.block_size.is_some(), &[Ram, Null, File, Rbd]),
            ("path", self.path.is_some(), &[File]),
            ("direct_io", self.direct_io.is_some(), &[File]),
            ("members", self.members.is_some(), &[Raid0]),
            ("strip_size", self.strip_size.is_some(), &[Raid0]),
            ("fast", self.fast.is_some(), &[Cache]),
            ("slow", self.slow.is_some(), &[Cache]),
            ("mode", self.mode.is_some(), &[Cache]),
            ("line_size", self.line_size.is_some(), &[Cache]),
            ("pool", self.pool.is_some(), &[Carve, Rbd]),
            ("thin", self.thin.is_some(), &[Carve]),
            ("image", self.image.is_some(), &[Rbd]),
            ("ceph_conf", self.ceph_conf.is_some(), &[Rbd]),
            ("client", self.client.is_some(), &[Rbd]),
            ("op_timeout_ms", self.op_timeout_ms.is_some(), &[Rbd]),
        ];
        for (key, given, kinds) in keys {
            if given && !kinds.contains(&self.kind) {
                let takers: Vec<String> = kinds.iter().map(|kind| format!("\"{}\"", kind.as_str())).collect();
                return Err(invalid(
                    &location,
                    format!(
                        "`{key}` does not apply to kind = \"{}\" (only to kind = {}); remove it",
                        self.kind.as_str(),
                        takers.join(" or ")
                    ),
                ));
            }
        }
        let required: &[(&str, bool, &str)] = match self.kind {
            Ram | Null => &[("size", self.size.is_some(), "size = \"1GiB\"")],
            File => &[("path", self.path.is_some(), "path = \"/var/lib/sluice/disk0.img\"")],
            Raid0 => &[("members", self.members.is_some(), "members = [\"disk0\", \"disk1\"]")],
            Cache => &[
                ("fast", self.fast.is_some(), "fast = \"<backend name>\""),
                ("slow", self.slow.is_some(), "slow = \"<backend name>\""),
                ("mode", self.mode.is_some(), "mode = \"write-back\" or mode = \"write-through\""),
            ],
            Carve => &[
                ("pool", self.pool.is_some(), "pool = \"<pool name>\""),
                ("size", self.size.is_some(), "size = \"100GiB\""),
            ],
            Rbd => &[
                ("pool", self.pool.is_some(), "pool = \"rbd\" (the RADOS pool)"),
                ("image", self.image.is_some(), "image = \"vol1\""),
            ],
        };
        for (key, given, example) in required {
            if !given {
                return Err(invalid(
                    &location,
                    format!("`{key}` is missing: kind = \"{}\" needs it, e.g. {example}", self.kind.as_str()),
                ));
            }
        }
        let members = self.members.as_deref().unwrap_or_default();
        if self.kind == Raid0 && members.is_empty() {
            return Err(invalid(&location, "`members` is empty: list at least one backend"));
        }
        for (index, member) in members.iter().enumerate() {
            if let Some(first) = members[..index].iter().position(|earlier| earlier == member) {
                return Err(invalid(
                    &location,
                    format!("member {member:?} is listed twice (positions {first} and {index}); each member holds its own strips"),
                ));
            }
        }
        if self.op_timeout_ms == Some(0) {
            return Err(invalid(
                &location,
                "`op_timeout_ms` is 0, which librados takes as \"wait forever\": a stopped OSD would hang I/O; \
                 give a timeout (default 20000)",
            ));
        }
        if self.kind == Cache && self.fast.is_some() && self.fast == self.slow {
            return Err(invalid(
                &location,
                "`fast` and `slow` name the same backend; the tiers must be two different backends",
            ));
        }
        Ok(())
    }
}

impl BackendConfig {
    /// How to open an `rbd` entry (`None` for other kinds).
    pub fn rbd_options(&self) -> Option<runtime::RbdOptions> {
        if self.kind != StorageKind::Rbd {
            return None;
        }
        let mut options =
            runtime::RbdOptions::new(self.pool.clone().unwrap_or_default(), self.image.clone().unwrap_or_default());
        options.size_bytes = self.size.map(|size| size.0);
        if let Some(block_size) = self.block_size {
            options.block_size_bytes = block_size;
        }
        options.cluster = cluster_spec(&self.ceph_conf, self.client.as_deref(), self.op_timeout_ms);
        Some(options)
    }
}

/// The cluster connection an `rbd` backend or a `[gateway]` names: `ceph_conf`,
/// `client` (with or without `client.`) and `op_timeout_ms`, librados' defaults for
/// what is not given.
pub fn cluster_spec(
    ceph_conf: &Option<PathBuf>,
    client: Option<&str>,
    op_timeout_ms: Option<u64>,
) -> runtime::ClusterSpec {
    let mut cluster = runtime::RbdOptions::new("", "").cluster;
    cluster.ceph_conf = ceph_conf.clone();
    if let Some(client) = client {
        cluster.client = client.strip_prefix("client.").unwrap_or(client).to_string();
    }
    if let Some(timeout) = op_timeout_ms {
        cluster.op_timeout_ms = timeout;
    }
    cluster
}

impl PoolConfig {
    /// `pool "name"`, the prefix of every message about this entry.
    pub fn location(&self) -> String {
        format!("pool {:?}", self.name)
    }

    /// The first key whose value differs from `other`'s (a reload reports it).
    pub fn first_difference(&self, other: &PoolConfig) -> Option<&'static str> {
        [
            ("name", self.name == other.name),
            ("device", self.device == other.device),
            ("table", self.table == other.table),
            ("unit_size", self.unit_size == other.unit_size),
        ]
        .into_iter()
        .find_map(|(key, same)| (!same).then_some(key))
    }
}

/// Names are referred to from other entries and appear in messages and in the pool
/// table, so they stay plain: letters, digits, '.', '_' and '-'.
pub fn check_name(name: &str, location: &str) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(invalid(location, "`name` is empty: give the entry a name other entries can refer to"));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(invalid(
            location,
            format!("name {name:?} contains {bad:?}: use only letters, digits, '.', '_' and '-'"),
        ));
    }
    Ok(())
}

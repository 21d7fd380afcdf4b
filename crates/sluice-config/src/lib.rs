//! The TOML configuration of `sluice serve`: listeners, subsystems, namespaces, the
//! storage they are built from (`[[backend]]` and `[[pool]]` entries) and runtime
//! settings. Errors name the file, the entry and what to change.
//!
//! Two steps, so that checking a file never touches storage:
//! - [`Config::check`] (`sluice config check`) validates everything that can be known
//!   without opening a device: references, cycles, single use of every backend, block
//!   sizes, capacities, durability of cache tiers, paths. It only reads file metadata.
//! - [`Config::target_spec`] (`sluice serve`) runs the same validation, then builds:
//!   opens and creates files, formats cache tiers, opens (and on first start zeroes)
//!   pools and creates the carves namespaces ask for.
//!
//! The reference of every key is docs/config.md.

pub mod attachment;
mod build;
mod diff;
pub mod gateway;
mod graph;
pub mod management;
mod namespaces;
mod plan;
pub mod qos;
mod schema;
mod shapes;
mod storage;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod validation_tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use nvme_auth::{KeyDerivation, TlsKey};
use nvme_host::Secret;
use nvme_target::{
    AddressFamily, ControllerPolicy, DhGroup, HashFunction, HostAccess, HostEntry, ListenerSpec, SecureChannel,
    TargetSettings, TargetSpec,
};
use serde::Deserialize;

pub use build::BuildOutput;
pub use diff::{diff, Change};
pub use plan::CheckReport;
pub use schema::{cluster_spec, BackendConfig, CacheModeConfig, PoolConfig};
pub use storage::{OpenStorage, StorageChanges};
// Sizes are read and written by the units crate, by the same rules as on every other
// surface (the command line, the bench's job files): KB is 1000, KiB and K are 1024.
// `describe_bytes` writes "64 MiB", or "N bytes" when no binary unit holds it whole:
// the name the config's many messages use for `units::format::exact`.
pub use units::format::exact as describe_bytes;
use units::parse_byte_size;

/// NQN of the subsystem `sluice serve` exports without a config file.
pub const DEFAULT_SUBSYSTEM_NQN: &str = "nqn.2026-11.io.sluice:default";
/// Size of the default RAM namespace.
pub const DEFAULT_NAMESPACE_BYTES: u64 = 1 << 30;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default, rename = "listener")]
    pub listeners: Vec<ListenerConfig>,
    /// Named storage: files, RAM, RAID0 sets, cache tiers, pool carves.
    #[serde(default, rename = "backend")]
    pub backends: Vec<BackendConfig>,
    /// Pools that carve namespaces out of one backend.
    #[serde(default, rename = "pool")]
    pub pools: Vec<PoolConfig>,
    #[serde(default, rename = "subsystem")]
    pub subsystems: Vec<SubsystemConfig>,
    #[serde(default)]
    pub runtime: RuntimeSection,
    #[serde(default)]
    pub target: TargetSection,
    /// This process is one gateway of a gateway group (see docs/config.md).
    #[serde(default)]
    pub gateway: Option<gateway::GatewaySection>,
    /// `[management]`: the management API over the network (see management.rs).
    #[serde(default)]
    pub management: management::ManagementSection,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// "IP:port" to listen on.
    pub address: String,
    /// Serve only the discovery subsystem on this listener (like port 8009).
    #[serde(default)]
    pub discovery_only: bool,
    /// "IP:port" the discovery log announces for this listener instead of `address`
    /// (TRADDR/TRSVCID, like a Linux nvmet port's `addr_traddr`): the address hosts
    /// can dial when `address` is a wildcard, or behind NAT or port forwarding.
    #[serde(default)]
    pub advertise: Option<String>,
    /// NVMe/TCP over TLS 1.3 with pre-shared keys: "none" (default), "optional"
    /// (each host chooses) or "required" (plain connections are closed). Hosts need a
    /// `tls_key` in their `[[subsystem.host]]` entry.
    #[serde(default)]
    pub tls: TlsSetting,
}

/// `[[listener]] tls` (and `sluice listener add --tls`).
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TlsSetting {
    /// Plain NVMe/TCP only.
    #[default]
    None,
    /// TLS or plain, as each host chooses.
    Optional,
    /// TLS only: a plain connection is closed.
    Required,
}

impl TlsSetting {
    pub fn secure_channel(self) -> SecureChannel {
        match self {
            TlsSetting::None => SecureChannel::None,
            TlsSetting::Optional => SecureChannel::Optional,
            TlsSetting::Required => SecureChannel::Required,
        }
    }
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    pub nqn: String,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// A `[[pool]]` name: turns on NVMe Namespace Management, with new namespaces
    /// carved from this pool; the pool's namespaces bound to this subsystem are served.
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default, rename = "namespace")]
    pub namespaces: Vec<NamespaceConfig>,
    /// Any host may connect (listed hosts still need their secrets). Only when set
    /// explicitly: unset, only the `[[subsystem.host]]` entries may connect, and a
    /// subsystem with none admits nobody (the start warns about it).
    #[serde(default)]
    pub allow_any_host: Option<bool>,
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostConfig>,
}

/// `[[subsystem.host]]`: a host allowed to connect, with its DH-HMAC-CHAP secrets
/// in the `DHHC-1:...` form `nvme gen-dhchap-key` prints. Parsed on load, so a bad
/// secret is refused with the entry's line, never echoed.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub nqn: String,
    #[serde(default, deserialize_with = "secret")]
    pub dhchap_secret: Option<Secret>,
    #[serde(default, deserialize_with = "secret")]
    pub dhchap_ctrl_secret: Option<Secret>,
    /// Hash functions this host may negotiate, most preferred first ("sha256",
    /// "sha384", "sha512"); default all three, SHA-256 first.
    #[serde(default)]
    pub dhchap_hashes: Option<Vec<String>>,
    /// DH groups this host may negotiate, most preferred first ("ffdhe2048" ...
    /// "ffdhe8192", "null"); default every ffdhe group, then null.
    #[serde(default)]
    pub dhchap_groups: Option<Vec<String>>,
    /// The host's TLS pre-shared key in the interchange format (`NVMeTLSkey-1:...`,
    /// as `nvme gen-tls-key` or `sluice gen-tls-key` prints it), for listeners with
    /// `tls`. Parsed on load; never echoed.
    #[serde(default, deserialize_with = "tls_key")]
    pub tls_key: Option<TlsKey>,
    /// How this host derives TLS keys: "rfc8446" (default; the specification,
    /// libnvme 1.16 and later) or "compat" (libnvme before 1.16: Debian 13, Ubuntu
    /// 24.04, RHEL 9). Only matters for format 0 identities (`nvme gen-tls-key -i`);
    /// format 1 identities (`nvme connect --tls-key`) show which one by their digest.
    #[serde(default)]
    pub tls_key_derivation: TlsKeyDerivationSetting,
    /// Secure channel concatenation (`nvme connect --concat`): while this host
    /// authenticates with `dhchap_secret` on a plain admin queue, DH-HMAC-CHAP also
    /// generates a TLS PSK, and the host reconnects every queue over TLS with it.
    /// Needs `dhchap_secret` and a listener with `tls = "optional"` (the first admin
    /// queue comes without TLS); no `tls_key`.
    #[serde(default)]
    pub concat: bool,
    /// `[[subsystem.host.qos]]`: this host's rate limits on one namespace (`nsid`)
    /// or on each namespace of the subsystem (see `qos`).
    #[serde(default)]
    pub qos: Vec<qos::HostQosConfig>,
}

/// `[[subsystem.host]] tls_key_derivation`.
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TlsKeyDerivationSetting {
    #[default]
    Rfc8446,
    Compat,
}

impl TlsKeyDerivationSetting {
    fn derivation(self) -> KeyDerivation {
        match self {
            TlsKeyDerivationSetting::Rfc8446 => KeyDerivation::Rfc8446,
            TlsKeyDerivationSetting::Compat => KeyDerivation::Compat,
        }
    }
}

fn tls_key<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<TlsKey>, D::Error> {
    let text = String::deserialize(deserializer)?;
    let text = referenced_secret(&text, "tls_key").map_err(serde::de::Error::custom)?;
    TlsKey::parse(&text).map(Some).map_err(serde::de::Error::custom)
}

fn secret<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Secret>, D::Error> {
    let text = String::deserialize(deserializer)?;
    let text = referenced_secret(&text, "dhchap secret").map_err(serde::de::Error::custom)?;
    Secret::parse(&text).map(Some).map_err(serde::de::Error::custom)
}

/// Marks a secret given by reference: `"file:/etc/sluice/keys/host1"`.
const SECRET_FILE_PREFIX: &str = "file:";

/// A host secret as written, or, for `file:PATH`, the first line of that file: the
/// configuration (a gateway group's in the cluster too) then holds only the
/// reference, and each machine keeps the key in a file only its owner reads. The
/// file's content never appears in a message.
fn referenced_secret<'a>(text: &'a str, what: &str) -> Result<std::borrow::Cow<'a, str>, String> {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = text.strip_prefix(SECRET_FILE_PREFIX) else {
        return Ok(std::borrow::Cow::Borrowed(text));
    };
    let metadata = std::fs::metadata(path).map_err(|error| format!("the {what} file {path}: {error}"))?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "the {what} file {path} can be read by others than its owner (mode {mode:o}): `chmod 600 {path}`"
        ));
    }
    let content = std::fs::read_to_string(path).map_err(|error| format!("the {what} file {path}: {error}"))?;
    let first_line = content.lines().next().unwrap_or_default().trim();
    if first_line.is_empty() {
        return Err(format!("the {what} file {path} is empty"));
    }
    Ok(std::borrow::Cow::Owned(first_line.to_string()))
}

impl HostConfig {
    /// The DH-HMAC-CHAP choices of this host: the defaults unless listed.
    fn dhchap_policy(&self, location: &str) -> Result<ControllerPolicy, ConfigError> {
        let defaults = ControllerPolicy::default();
        let where_ = || format!("{location} [[subsystem.host]] {}", self.nqn);
        let hashes = match &self.dhchap_hashes {
            None => defaults.hashes,
            Some(names) => parse_names(names, HashFunction::from_name, "dhchap_hashes", "sha256, sha384, sha512")
                .map_err(|message| invalid(where_(), message))?,
        };
        let groups = match &self.dhchap_groups {
            None => defaults.groups,
            Some(names) => parse_names(
                names,
                DhGroup::from_name,
                "dhchap_groups",
                "null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192",
            )
            .map_err(|message| invalid(where_(), message))?,
        };
        if self.dhchap_secret.is_none() && (self.dhchap_hashes.is_some() || self.dhchap_groups.is_some()) {
            return Err(invalid(
                where_(),
                "dhchap_hashes/dhchap_groups need a dhchap_secret (they choose how it is used)",
            ));
        }
        ControllerPolicy::new(hashes, groups)
            .ok_or_else(|| invalid(where_(), "dhchap_hashes and dhchap_groups must each name at least one choice"))
    }
}

/// Parses a list of DH-HMAC-CHAP names, refusing unknown and repeated ones.
fn parse_names<T: PartialEq>(
    names: &[String],
    parse: impl Fn(&str) -> Option<T>,
    key: &str,
    known: &str,
) -> Result<Vec<T>, String> {
    let mut parsed = Vec::with_capacity(names.len());
    for name in names {
        let value = parse(name).ok_or_else(|| format!("{key}: unknown name {name:?} (known: {known})"))?;
        if parsed.contains(&value) {
            return Err(format!("{key}: {name:?} is listed twice"));
        }
        parsed.push(value);
    }
    Ok(parsed)
}

impl SubsystemConfig {
    /// The hosts allowed to connect, checked; `location` names the subsystem.
    pub(crate) fn host_access(&self, location: &str) -> Result<HostAccess, ConfigError> {
        let hosts = HostAccess {
            allow_any_host: self.allow_any_host.unwrap_or(false),
            hosts: self
                .hosts
                .iter()
                .map(|host| {
                    Ok(HostEntry {
                        nqn: host.nqn.clone(),
                        dhchap_secret: host.dhchap_secret.clone(),
                        dhchap_controller_secret: host.dhchap_ctrl_secret.clone(),
                        dhchap_policy: host.dhchap_policy(location)?,
                        tls_key: host.tls_key.clone(),
                        tls_key_derivation: host.tls_key_derivation.derivation(),
                        concat: host.concat,
                    })
                })
                .collect::<Result<_, ConfigError>>()?,
        };
        hosts.validate().map_err(|error| invalid(format!("{location} [[subsystem.host]]"), error.to_string()))?;
        Ok(hosts)
    }
}

/// One namespace: exactly one of `backend` (inline), `device` (a `[[backend]]`) or
/// `pool` (a carve of a `[[pool]]`).
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    #[serde(default)]
    pub nsid: Option<u32>,
    /// Inline storage of this namespace alone.
    #[serde(default)]
    pub backend: Option<BackendKind>,
    /// The name of a `[[backend]]` that serves this namespace (and nothing else).
    #[serde(default)]
    pub device: Option<String>,
    /// The name of a `[[pool]]` to carve this namespace from (created on first start,
    /// found again by subsystem NQN and NSID afterwards).
    #[serde(default)]
    pub pool: Option<String>,
    /// Capacity; required for "ram", "null" and pool namespaces, and for "file" when
    /// the file does not exist yet (it is created or extended to this size, never
    /// shrunk).
    #[serde(default)]
    pub size: Option<ByteSize>,
    /// Pool namespaces: allocate on write instead of reserving the space at creation.
    #[serde(default)]
    pub thin: Option<bool>,
    /// Block size in bytes; default 512 for "ram"/"null", for "file" 4096 (regular
    /// file) or the device's logical block size (block device).
    #[serde(default)]
    pub block_size: Option<u32>,
    /// "file": the regular file or block device holding the blocks.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// "file": O_DIRECT (default true). Buffered I/O when false, e.g. on tmpfs.
    #[serde(default)]
    pub direct_io: Option<bool>,
    #[serde(default)]
    pub nguid: Option<String>,
    #[serde(default)]
    pub uuid: Option<String>,
    /// ANAGRPID: the ANA group of the namespace (1..=64, default 1). In a gateway
    /// group, the gateway owning the group reports it optimized.
    #[serde(default)]
    pub ana_group: Option<u32>,
    /// The hosts (NQNs) whose controllers see the namespace (NVMe Namespace
    /// Attachment). Absent: every host the subsystem admits; `[]`: no host at all
    /// (a namespace made ready before any host may use it). Changed live.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// `[subsystem.namespace.qos]`: rate limits on the namespace, all hosts together
    /// (see `qos`); changed live.
    #[serde(default)]
    pub qos: Option<qos::QosConfig>,
}

/// Block size of RAM and null storage when the config does not say.
pub(crate) const DEFAULT_BLOCK_SIZE_BYTES: u32 = 512;

/// The inline storage kinds of a namespace's `backend` key.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    Ram,
    Null,
    File,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PollModeConfig {
    /// Spin while busy, sleep when idle (see `adaptive_spin_us`).
    #[default]
    Adaptive,
    Sleep,
    BusyPoll,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSection {
    /// Threads (one per core); default: the number of CPUs.
    #[serde(default)]
    pub threads: Option<usize>,
    #[serde(default)]
    pub poll_mode: PollModeConfig,
    /// Adaptive polling: microseconds a thread keeps spinning after its last
    /// completion before it sleeps.
    #[serde(default)]
    pub adaptive_spin_us: Option<u32>,
    #[serde(default)]
    pub pin_threads: bool,
}

impl Default for RuntimeSection {
    fn default() -> Self {
        RuntimeSection {
            threads: None,
            poll_mode: PollModeConfig::Adaptive,
            adaptive_spin_us: None,
            pin_threads: false,
        }
    }
}

#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TargetSection {
    #[serde(default)]
    pub max_io_queues_per_controller: Option<u16>,
    #[serde(default)]
    pub max_io_queue_depth: Option<u16>,
    #[serde(default)]
    pub max_connections_per_host: Option<u32>,
    /// Bytes, or a string like "16MiB".
    #[serde(default)]
    pub max_outstanding_r2t_bytes_per_connection: Option<ByteSize>,
    /// Bytes, or a string like "16KiB".
    #[serde(default)]
    pub in_capsule_data_bytes: Option<ByteSize>,
    #[serde(default)]
    pub connection_setup_timeout_ms: Option<u64>,
    #[serde(default)]
    pub command_quiesce_timeout_ms: Option<u32>,
    #[serde(default)]
    pub min_keep_alive_timeout_ms: Option<u32>,
    #[serde(default)]
    pub max_keep_alive_timeout_ms: Option<u32>,
    #[serde(default)]
    pub allow_keep_alive_disabled: Option<bool>,
    /// Where state that must survive a restart lives (reservations with Persist
    /// Through Power Loss); none: PTPL is not offered.
    #[serde(default)]
    pub state_dir: Option<std::path::PathBuf>,
}

/// A size given as a number of bytes or a string like "1GiB", "512MiB", "4096".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(bytes) => Ok(ByteSize(bytes)),
            Raw::Text(text) => parse_byte_size(&text).map(ByteSize).map_err(serde::de::Error::custom),
        }
    }
}

/// Masks the key of every `DHHC-1:<hash>:<key>:` (DH-HMAC-CHAP secret) and
/// `NVMeTLSkey-1:<hash>:<key>:` (TLS PSK) in `text`, and whatever a `dhchap_secret`,
/// `dhchap_ctrl_secret` or `tls_key` line assigns (a mistyped key need not start with
/// its marker): a parse error quotes the offending source line, and keys are never
/// printed.
pub fn redact_secrets(text: &str) -> String {
    let masked = text.lines().map(redact_secret_assignment).collect::<Vec<_>>().join("\n");
    ["DHHC-1:", "NVMeTLSkey-1:"].iter().fold(masked, |text, marker| redact_marked(&text, marker))
}

/// `key = "<redacted>"` for a line that assigns a secret key.
fn redact_secret_assignment(line: &str) -> String {
    // Every occurrence counts: in `tls_key_derivation = 1, tls_key = "..."` the
    // first "tls_key" is another key's prefix.
    let assigns_secret = ["dhchap_secret", "dhchap_ctrl_secret", "tls_key"].iter().any(|key| {
        line.match_indices(key).any(|(at, _)| {
            let starts_name = !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
            starts_name && line[at + key.len()..].trim_start().starts_with('=')
        })
    });
    match (assigns_secret, line.find('=')) {
        (true, Some(equals)) => format!("{}= \"<redacted>\"", &line[..equals]),
        _ => line.to_owned(),
    }
}

fn redact_marked(text: &str, marker: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(marker) {
        out.push_str(&rest[..start + marker.len()]);
        rest = &rest[start + marker.len()..];
        if rest.starts_with('<') {
            // A placeholder in a message ("DHHC-1:<00|01|02|03>:..."), not a key.
            continue;
        }
        // Keep the two-digit hash indicator, drop the key up to the closing colon
        // (or to the end of the token when it is malformed).
        let hash_end = rest.find(':').map_or(0, |end| end + 1).min(3);
        out.push_str(&rest[..hash_end]);
        rest = &rest[hash_end..];
        let key_end = rest.find(|c: char| c == ':' || c == '"' || c == '\'' || c.is_whitespace()).unwrap_or(rest.len());
        out.push_str("<redacted>");
        rest = &rest[key_end..];
    }
    out.push_str(rest);
    out
}

/// A configuration problem, located and explained.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config {location}: {message}")]
    Invalid { location: String, message: String },
    /// Like `Invalid`, for storage without room for what the entry asks (a thick
    /// carve), so the management API can say so by cause.
    #[error("config {location}: {message}")]
    NoSpace { location: String, message: String },
    /// The target refused the subsystems or settings (NQN syntax, NSID range, limits).
    #[error("config: {0}")]
    Target(#[from] nvme_target::TargetError),
}

pub(crate) fn invalid(location: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { location: location.into(), message: message.into() }
}

impl Config {
    /// The embedded default: one 1 GiB RAM namespace on 127.0.0.1:4420, discovery on
    /// 4420 and 8009.
    pub fn embedded_default() -> Config {
        Config {
            listeners: vec![
                ListenerConfig {
                    address: "127.0.0.1:4420".into(),
                    discovery_only: false,
                    advertise: None,
                    tls: TlsSetting::None,
                },
                ListenerConfig {
                    address: "127.0.0.1:8009".into(),
                    discovery_only: true,
                    advertise: None,
                    tls: TlsSetting::None,
                },
            ],
            backends: Vec::new(),
            pools: Vec::new(),
            subsystems: vec![SubsystemConfig {
                nqn: DEFAULT_SUBSYSTEM_NQN.into(),
                serial: None,
                model: None,
                pool: None,
                namespaces: vec![NamespaceConfig {
                    nsid: Some(1),
                    backend: Some(BackendKind::Ram),
                    size: Some(ByteSize(DEFAULT_NAMESPACE_BYTES)),
                    block_size: Some(DEFAULT_BLOCK_SIZE_BYTES),
                    ..NamespaceConfig::default()
                }],
                // The demo serves any host.
                allow_any_host: Some(true),
                hosts: Vec::new(),
            }],
            runtime: RuntimeSection::default(),
            target: TargetSection::default(),
            gateway: None,
            management: management::ManagementSection::default(),
        }
    }

    /// The checked `[gateway]` section, `None` without one. A gateway serves only
    /// namespaces on `rbd` backends of the gateway's own cluster connection: the
    /// images are what the other gateways serve too, and fencing this gateway must
    /// stop its writes to them.
    pub fn gateway_plan(&self) -> Result<Option<gateway::GatewayPlan>, ConfigError> {
        let Some(section) = &self.gateway else { return Ok(None) };
        // A file with only the gateway's own part: the group's part, members
        // included, is in the cluster (`sluice serve` merges it in first).
        if section.holds_only_own_part() {
            return Ok(None);
        }
        let plan = section.plan()?;
        for (subsystem_index, subsystem) in self.subsystems.iter().enumerate() {
            if subsystem.pool.is_some() {
                return Err(invalid(
                    format!("subsystem[{subsystem_index}] ({})", subsystem.nqn),
                    "a gateway cannot offer Namespace Management (`pool`): the other gateways would not see the namespaces it creates",
                ));
            }
            for (index, namespace) in subsystem.namespaces.iter().enumerate() {
                let location = format!("subsystem[{subsystem_index}] ({}) namespace[{index}]", subsystem.nqn);
                let backend = namespace
                    .device
                    .as_ref()
                    .and_then(|name| self.backends.iter().find(|backend| backend.name == *name));
                let Some(options) = backend.and_then(BackendConfig::rbd_options) else {
                    return Err(invalid(
                        location,
                        "a gateway serves only namespaces on rbd images (device = \"<rbd backend>\"): every gateway of the group must serve the same blocks",
                    ));
                };
                gateway::check_shared_image_name_length(&options.pool, &options.image, &location)?;
                if options.cluster != plan.cluster {
                    return Err(invalid(
                        location,
                        format!(
                            "its rbd backend uses {} but [gateway] uses {}; give both the same ceph_conf, client and op_timeout_ms so fencing this gateway also stops its writes",
                            options.cluster.describe(),
                            plan.cluster.describe()
                        ),
                    ));
                }
            }
        }
        Ok(Some(plan))
    }

    /// Reads and parses a file (syntax and types; `check` checks meaning).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text).map_err(|message| ConfigError::Parse { path: path.to_path_buf(), message })
    }

    /// Parses TOML text; the error message carries the line and column.
    pub fn parse(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|error| redact_secrets(error.to_string().trim_end()))
    }

    /// Socket addresses to listen on, checked.
    pub fn listen_addresses(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        if self.listeners.is_empty() {
            return Err(invalid("[[listener]]", "no listener: add e.g. [[listener]] address = \"127.0.0.1:4420\""));
        }
        let mut addresses = Vec::new();
        for (index, listener) in self.listeners.iter().enumerate() {
            let address: SocketAddr = listener.address.parse().map_err(|_| {
                invalid(
                    format!("listener[{index}].address"),
                    format!("{:?} is not IP:port (e.g. \"127.0.0.1:4420\" or \"[::1]:4420\")", listener.address),
                )
            })?;
            if addresses.contains(&address) {
                return Err(invalid(format!("listener[{index}].address"), format!("{address} is listed twice")));
            }
            addresses.push(address);
        }
        Ok(addresses)
    }

    /// Each listener's `advertise` address (None: the discovery log announces the
    /// bound address), checked: an IP and a port, not a wildcard, which no host can dial.
    pub fn advertised_addresses(&self) -> Result<Vec<Option<SocketAddr>>, ConfigError> {
        let mut advertised = Vec::new();
        for (index, listener) in self.listeners.iter().enumerate() {
            let Some(text) = &listener.advertise else {
                advertised.push(None);
                continue;
            };
            let key = format!("listener[{index}].advertise");
            let address: SocketAddr = text.parse().map_err(|_| {
                invalid(
                    key.clone(),
                    format!(
                        "{text:?} is not IP:port: give the address hosts dial to reach this listener (e.g. \"192.0.2.10:4420\" or \"[2001:db8::10]:4420\"); host names are not allowed"
                    ),
                )
            })?;
            if address.ip().is_unspecified() || address.port() == 0 {
                return Err(invalid(
                    key,
                    format!("{address} cannot be dialled: give the host-reachable IP and port of this listener"),
                ));
            }
            advertised.push(Some(address));
        }
        Ok(advertised)
    }

    /// Validates the whole file without side effects: no file is created or opened for
    /// writing, no pool table is read or written, no device is formatted. Also runs the
    /// target's own checks (NQNs, NSID range, limits) on stand-in namespaces.
    pub fn check(&self) -> Result<CheckReport, ConfigError> {
        let plan = plan::validate(self)?;
        let spec = self.spec_with(plan.stand_in_subsystems(self)?)?;
        nvme_target::Target::new(spec)?;
        let mut report = plan.report(self);
        if let Some(network) = &self.management.network {
            network.check()?;
            report.lines.push(network.describe());
        }
        if let Some(section) = self.gateway.as_ref().filter(|section| section.holds_only_own_part()) {
            let location = section.location()?;
            report.lines.push(format!(
                "gateway {}: the group's configuration is in the cluster ({}/sluice.config.{}), checked when sluice serve loads it",
                section.name, location.pool, location.group
            ));
        }
        Ok(report)
    }

    /// The checked `[management.network]` with its certificates and key read (`None`
    /// without the table). Not part of `check`: the management API checks every
    /// edited config with that, and a certificate renewed on disk must not refuse
    /// unrelated changes.
    pub fn network_management(&self) -> Result<Option<management::NetworkSettings>, ConfigError> {
        self.management.network.as_ref().map(management::NetworkSection::load).transpose()
    }

    /// Connects to the cluster of every `rbd` entry and looks up its pool and image,
    /// changing nothing (a missing image with a `size` is fine: serve creates it).
    /// Blocks up to the connect timeout per cluster. The first failure names the entry.
    pub fn check_clusters(&self) -> Result<(), ConfigError> {
        for backend in &self.backends {
            let Some(options) = backend.rbd_options() else { continue };
            runtime::RbdBackend::inspect(&options).map_err(|error| invalid(backend.location(), error.to_string()))?;
        }
        Ok(())
    }

    /// Validates, then builds the target description: opens (and creates) files,
    /// formats or recovers cache tiers, opens pools and creates missing carves. (Tests
    /// build targets this way; `sluice serve` keeps the storage too: [`Config::open`].)
    pub fn target_spec(&self) -> Result<TargetSpec, ConfigError> {
        self.open().map(|(spec, _)| spec)
    }

    /// [`Config::target_spec`], also returning the named storage it opened, which the
    /// running target keeps so that namespaces added while it runs use the same open
    /// backends and pools (see `storage.rs`).
    pub fn open(&self) -> Result<(TargetSpec, OpenStorage), ConfigError> {
        let plan = plan::validate(self)?;
        for warning in &plan.warnings {
            tracing::warn!("config: {warning}");
        }
        let mut open = OpenStorage::default();
        let output = build::build(self, &plan, &open, build::OnUnavailable::Skip)?;
        for left_out in &output.unavailable {
            tracing::error!(
                "config: {}: not served: {}. Everything else is served; fix the cause, then restart sluice serve \
                 to bring it in",
                left_out.location,
                left_out.reason
            );
        }
        let spec = self.spec_with(output.subsystems)?;
        output.storage.keep(&mut open);
        Ok((spec, open))
    }

    /// Validates, then builds this config's subsystems on top of storage that is open
    /// already: only the entries its namespaces need that `open` does not hold are
    /// opened (the management API passes a document with the one subsystem it
    /// changes). Nothing is logged and nothing is kept: the caller keeps
    /// [`BuildOutput::storage`] once the change is in force.
    pub fn build_with(&self, open: &OpenStorage) -> Result<BuildOutput, ConfigError> {
        let plan = plan::validate(self)?;
        build::build(self, &plan, open, build::OnUnavailable::Fail)
    }

    /// Who uses the `[[backend]]` or `[[pool]]` named `name`, the way messages say it
    /// ("subsystem[0] (nqn...) namespace[1] as its device"). Empty when nothing does,
    /// or the name is unknown, or the config does not resolve.
    pub fn users_of(&self, name: &str) -> Vec<String> {
        let Ok(mut graph) = graph::Graph::new(self) else { return Vec::new() };
        if namespaces::resolve(self, &mut graph).is_err() {
            return Vec::new();
        }
        graph.uses_of(name).iter().map(ToString::to_string).collect()
    }

    fn spec_with(&self, subsystems: Vec<nvme_target::SubsystemSpec>) -> Result<TargetSpec, ConfigError> {
        let addresses = self.listen_addresses()?;
        let listeners = addresses
            .iter()
            .zip(&self.listeners)
            .zip(self.advertised_addresses()?)
            .map(|((bound, listener), advertised)| {
                // Hosts follow the discovery log: it names where they can reach this
                // listener, which is not always where it is bound.
                let announced = advertised.unwrap_or(*bound);
                ListenerSpec {
                    address: announced.ip().to_string(),
                    port: announced.port(),
                    family: if announced.is_ipv4() { AddressFamily::Ipv4 } else { AddressFamily::Ipv6 },
                    discovery_only: listener.discovery_only,
                    secure_channel: listener.tls.secure_channel(),
                }
            })
            .collect();
        let defaults = TargetSettings::default();
        let gateway = self.gateway_plan()?;
        let (controller_id_min, controller_id_max) = match &gateway {
            Some(plan) => plan.controller_id_range(),
            None => (defaults.controller_id_min, defaults.controller_id_max),
        };
        Ok(TargetSpec {
            listeners,
            subsystems,
            settings: TargetSettings {
                controller_id_min,
                controller_id_max,
                // On a gateway group the cluster keeps them (`gateway::reservations`).
                reservations: true,
                compare_and_write_in_process_only_for_tests: compare_and_write_in_process_only_for_tests(),
                // ANA paths matter when several gateways serve the same namespaces.
                ana_reporting: gateway.is_some(),
                max_io_queues_per_controller: self
                    .target
                    .max_io_queues_per_controller
                    .unwrap_or(defaults.max_io_queues_per_controller),
                max_io_queue_depth: self.target.max_io_queue_depth.unwrap_or(defaults.max_io_queue_depth),
                max_connections_per_host: self
                    .target
                    .max_connections_per_host
                    .unwrap_or(defaults.max_connections_per_host),
                // Too large for u32 is out of range too: Target::new reports it.
                max_outstanding_r2t_bytes_per_connection: self
                    .target
                    .max_outstanding_r2t_bytes_per_connection
                    .map_or(defaults.max_outstanding_r2t_bytes_per_connection, |size| {
                        u32::try_from(size.0).unwrap_or(u32::MAX)
                    }),
                in_capsule_data_bytes: self
                    .target
                    .in_capsule_data_bytes
                    .map_or(defaults.in_capsule_data_bytes, |size| u32::try_from(size.0).unwrap_or(u32::MAX)),
                connection_setup_timeout_ms: self
                    .target
                    .connection_setup_timeout_ms
                    .unwrap_or(defaults.connection_setup_timeout_ms),
                command_quiesce_timeout_ms: self
                    .target
                    .command_quiesce_timeout_ms
                    .unwrap_or(defaults.command_quiesce_timeout_ms),
                min_keep_alive_timeout_ms: self
                    .target
                    .min_keep_alive_timeout_ms
                    .unwrap_or(defaults.min_keep_alive_timeout_ms),
                max_keep_alive_timeout_ms: self
                    .target
                    .max_keep_alive_timeout_ms
                    .unwrap_or(defaults.max_keep_alive_timeout_ms),
                allow_keep_alive_disabled: self
                    .target
                    .allow_keep_alive_disabled
                    .unwrap_or(defaults.allow_keep_alive_disabled),
            },
        })
    }
}

/// Parses a 16-byte identifier written as 32 hex digits, with or without dashes.
pub(crate) fn parse_identifier(text: Option<&str>, location: &str) -> Result<Option<[u8; 16]>, ConfigError> {
    let Some(text) = text else { return Ok(None) };
    uuid::Uuid::try_parse(text)
        .map(|id| Some(*id.as_bytes()))
        .map_err(|_| invalid(location, format!("{text:?} is not 32 hex digits (dashes allowed)")))
}

/// Test-only switch (`SLUICE_TEST_LOCAL_COMPARE_AND_WRITE` in `sluice serve`'s
/// environment), honoured only by builds with debug assertions (the checked build
/// the tests run): a gateway group's fused Compare and Write then runs with each
/// process's range table, so a test can show that two gateways break ATS that way.
pub const LOCAL_COMPARE_AND_WRITE_FOR_TESTS: &str = "SLUICE_TEST_LOCAL_COMPARE_AND_WRITE";

fn compare_and_write_in_process_only_for_tests() -> bool {
    let set = cfg!(debug_assertions) && std::env::var_os(LOCAL_COMPARE_AND_WRITE_FOR_TESTS).is_some();
    if set {
        tracing::warn!("{LOCAL_COMPARE_AND_WRITE_FOR_TESTS} is set (test builds only): a gateway group's Compare and Write is atomic within each process only");
    }
    set
}

//! The TOML configuration of `sluice serve`: listeners, subsystems, namespaces and
//! runtime settings. Errors name the file, the entry and what to change.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use nvme_spec::NamespaceId;
use nvme_target::{
    AddressFamily, ListenerSpec, NamespaceSpec, SubsystemSpec, TargetSettings, TargetSpec,
};
use runtime::{FileBackend, FileOptions};
use storage::{Backend, Geometry, NullBackend, RamBackend};

/// NQN of the subsystem `sluice serve` exports without a config file.
pub const DEFAULT_SUBSYSTEM_NQN: &str = "nqn.2026-11.io.sluice:default";
/// Size of the default RAM namespace.
pub const DEFAULT_NAMESPACE_BYTES: u64 = 1 << 30;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default, rename = "listener")]
    pub listeners: Vec<ListenerConfig>,
    #[serde(default, rename = "subsystem")]
    pub subsystems: Vec<SubsystemConfig>,
    #[serde(default)]
    pub runtime: RuntimeSection,
    #[serde(default)]
    pub target: TargetSection,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// "IP:port" to listen on.
    pub address: String,
    /// Serve only the discovery subsystem on this listener (like port 8009).
    #[serde(default)]
    pub discovery_only: bool,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    pub nqn: String,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, rename = "namespace")]
    pub namespaces: Vec<NamespaceConfig>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    #[serde(default)]
    pub nsid: Option<u32>,
    pub backend: BackendKind,
    /// Capacity; required for "ram" and "null", and for "file" when the file does
    /// not exist yet (it is created or extended to this size, never shrunk).
    #[serde(default)]
    pub size: Option<ByteSize>,
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
}

/// Block size of RAM and null namespaces when the config does not say.
const DEFAULT_BLOCK_SIZE_BYTES: u32 = 512;

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
    #[default]
    Sleep,
    BusyPoll,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSection {
    /// Threads (one per core); default: the number of CPUs.
    #[serde(default)]
    pub threads: Option<usize>,
    #[serde(default)]
    pub poll_mode: PollModeConfig,
    #[serde(default)]
    pub pin_threads: bool,
}

impl Default for RuntimeSection {
    fn default() -> Self {
        RuntimeSection { threads: None, poll_mode: PollModeConfig::Sleep, pin_threads: false }
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct TargetSection {
    #[serde(default)]
    pub max_io_queues_per_controller: Option<u16>,
    #[serde(default)]
    pub max_io_queue_depth: Option<u16>,
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

/// Parses "123", "4KiB", "512MiB", "1GiB", "2TiB" (also KB/MB/GB/TB as powers of ten).
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("size {text:?} must start with a number, e.g. \"1GiB\" or 4096"))?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "TiB" | "T" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            return Err(format!("size {text:?} has unknown unit {other:?}; use B, KiB, MiB, GiB or TiB"))
        }
    };
    number.checked_mul(multiplier).ok_or_else(|| format!("size {text:?} is too large"))
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
}

fn invalid(location: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { location: location.into(), message: message.into() }
}

impl Config {
    /// The embedded default: one 1 GiB RAM namespace on 127.0.0.1:4420, discovery on
    /// 4420 and 8009.
    pub fn embedded_default() -> Config {
        Config {
            listeners: vec![
                ListenerConfig { address: "127.0.0.1:4420".into(), discovery_only: false },
                ListenerConfig { address: "127.0.0.1:8009".into(), discovery_only: true },
            ],
            subsystems: vec![SubsystemConfig {
                nqn: DEFAULT_SUBSYSTEM_NQN.into(),
                serial: None,
                model: None,
                namespaces: vec![NamespaceConfig {
                    nsid: Some(1),
                    backend: BackendKind::Ram,
                    size: Some(ByteSize(DEFAULT_NAMESPACE_BYTES)),
                    block_size: Some(DEFAULT_BLOCK_SIZE_BYTES),
                    path: None,
                    direct_io: None,
                    nguid: None,
                    uuid: None,
                }],
            }],
            runtime: RuntimeSection::default(),
            target: TargetSection::default(),
        }
    }

    /// Reads and parses a file (syntax and types; `validate` checks meaning).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text).map_err(|message| ConfigError::Parse { path: path.to_path_buf(), message })
    }

    /// Parses TOML text; the error message carries the line and column.
    pub fn parse(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|error| error.to_string().trim_end().to_string())
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

    /// Builds the target description, creating the backends.
    pub fn target_spec(&self) -> Result<TargetSpec, ConfigError> {
        let addresses = self.listen_addresses()?;
        let listeners = addresses
            .iter()
            .zip(&self.listeners)
            .map(|(address, listener)| ListenerSpec {
                address: address.ip().to_string(),
                port: address.port(),
                family: if address.is_ipv4() { AddressFamily::Ipv4 } else { AddressFamily::Ipv6 },
                discovery_only: listener.discovery_only,
            })
            .collect();
        let mut subsystems = Vec::new();
        for (subsystem_index, subsystem) in self.subsystems.iter().enumerate() {
            let location = format!("subsystem[{subsystem_index}] ({})", subsystem.nqn);
            let mut namespaces = Vec::new();
            let mut next_nsid = 1u32;
            for (namespace_index, namespace) in subsystem.namespaces.iter().enumerate() {
                let location = format!("{location} namespace[{namespace_index}]");
                let nsid = namespace.nsid.unwrap_or(next_nsid);
                next_nsid = nsid.saturating_add(1);
                namespaces.push(NamespaceSpec {
                    id: NamespaceId(nsid),
                    backend: build_backend(namespace, &location)?,
                    nguid: parse_identifier(namespace.nguid.as_deref(), &format!("{location}.nguid"))?,
                    uuid: parse_identifier(namespace.uuid.as_deref(), &format!("{location}.uuid"))?,
                });
            }
            subsystems.push(SubsystemSpec {
                hosts: nvme_target::HostAccess::allow_any(),
                pool: None,
                nqn: subsystem.nqn.clone(),
                serial_number: subsystem.serial.clone(),
                model_number: subsystem.model.clone(),
                namespaces,
            });
        }
        let defaults = TargetSettings::default();
        Ok(TargetSpec {
            listeners,
            subsystems,
            settings: TargetSettings {
                max_io_queues_per_controller: self
                    .target
                    .max_io_queues_per_controller
                    .unwrap_or(defaults.max_io_queues_per_controller),
                max_io_queue_depth: self.target.max_io_queue_depth.unwrap_or(defaults.max_io_queue_depth),
            },
        })
    }
}

fn build_backend(namespace: &NamespaceConfig, location: &str) -> Result<Arc<dyn Backend>, ConfigError> {
    if let Some(block_size) = namespace.block_size {
        if !block_size.is_power_of_two() || !(512..=65536).contains(&block_size) {
            return Err(invalid(
                format!("{location}.block_size"),
                format!("{block_size} is not a power of two between 512 and 65536"),
            ));
        }
    }
    if namespace.backend != BackendKind::File && (namespace.path.is_some() || namespace.direct_io.is_some()) {
        return Err(invalid(location, "`path` and `direct_io` only apply to backend = \"file\""));
    }
    if namespace.backend == BackendKind::File {
        let Some(path) = &namespace.path else {
            return Err(invalid(
                format!("{location}.path"),
                "backend = \"file\" needs path = \"/path/to/file-or-block-device\"",
            ));
        };
        let options = FileOptions {
            block_size_bytes: namespace.block_size,
            direct_io: namespace.direct_io.unwrap_or(true),
            size_bytes: namespace.size.map(|size| size.0),
            ..FileOptions::default()
        };
        return FileBackend::open(path, options)
            .map(|backend| backend as Arc<dyn Backend>)
            .map_err(|error| invalid(location, error.to_string()));
    }
    let block_size = namespace.block_size.unwrap_or(DEFAULT_BLOCK_SIZE_BYTES);
    let Some(ByteSize(bytes)) = namespace.size else {
        return Err(invalid(format!("{location}.size"), "missing: give the capacity, e.g. size = \"1GiB\""));
    };
    if bytes == 0 || !bytes.is_multiple_of(u64::from(block_size)) {
        return Err(invalid(
            format!("{location}.size"),
            format!("{bytes} bytes is not a positive multiple of the block size {block_size}"),
        ));
    }
    let geometry = Geometry { block_size_bytes: block_size, block_count: bytes / u64::from(block_size) };
    let built: Result<Arc<dyn Backend>, storage::GeometryError> = match namespace.backend {
        BackendKind::Ram => RamBackend::try_new(geometry).map(|backend| backend as Arc<dyn Backend>),
        BackendKind::Null => NullBackend::try_new(geometry).map(|backend| backend as Arc<dyn Backend>),
        BackendKind::File => unreachable!("file namespaces are built above"),
    };
    built.map_err(|error| invalid(format!("{location}.size"), error.to_string()))
}

/// Parses a 16-byte identifier written as 32 hex digits, with or without dashes.
fn parse_identifier(text: Option<&str>, location: &str) -> Result<Option<[u8; 16]>, ConfigError> {
    let Some(text) = text else { return Ok(None) };
    uuid::Uuid::try_parse(text)
        .map(|id| Some(*id.as_bytes()))
        .map_err(|_| invalid(location, format!("{text:?} is not 32 hex digits (dashes allowed)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_byte_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_byte_size("2TB"), Ok(2_000_000_000_000));
        assert!(parse_byte_size("1 parsec").unwrap_err().contains("unknown unit"));
        assert!(parse_byte_size("GiB").unwrap_err().contains("must start with a number"));
        assert!(parse_byte_size("99999999999TiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn a_full_config_parses_and_builds() {
        let config = Config::parse(
            r#"
            [[listener]]
            address = "127.0.0.1:4420"
            [[listener]]
            address = "127.0.0.1:8009"
            discovery_only = true
            [[subsystem]]
            nqn = "nqn.2026-11.io.sluice:a"
            [[subsystem.namespace]]
            backend = "ram"
            size = "64MiB"
            [[subsystem.namespace]]
            backend = "null"
            size = 1048576
            block_size = 4096
            [runtime]
            threads = 1
            poll_mode = "busy-poll"
            "#,
        )
        .unwrap();
        assert_eq!(config.runtime.poll_mode, PollModeConfig::BusyPoll);
        let spec = config.target_spec().unwrap();
        assert_eq!(spec.listeners.len(), 2);
        assert!(spec.listeners[1].discovery_only);
        let namespaces = &spec.subsystems[0].namespaces;
        assert_eq!(namespaces[0].id, NamespaceId(1));
        assert_eq!(namespaces[1].id, NamespaceId(2));
        assert_eq!(namespaces[1].backend.geometry().block_count, 256);
    }

    #[test]
    fn file_namespaces_need_a_path_and_create_the_file() {
        let directory = std::env::temp_dir().join(format!("sluice-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let file = directory.join("ns1.img");
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:f\"\n\
             [[subsystem.namespace]]\nbackend = \"file\"\npath = {:?}\nsize = \"8MiB\"\ndirect_io = false\n",
            file
        );
        let spec = Config::parse(&text).unwrap().target_spec().unwrap();
        let backend = &spec.subsystems[0].namespaces[0].backend;
        assert_eq!(backend.kind(), "file");
        assert_eq!(backend.geometry().capacity_bytes(), 8 << 20);
        assert!(backend.has_volatile_write_cache());
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 8 << 20);

        let missing_path = text.replace(&format!("path = {:?}\n", file), "");
        let error = Config::parse(&missing_path).unwrap().target_spec().err().unwrap().to_string();
        assert!(error.contains("namespace[0].path"), "{error}");
        let ram_with_path = text.replace("backend = \"file\"", "backend = \"ram\"");
        let error = Config::parse(&ram_with_path).unwrap().target_spec().err().unwrap().to_string();
        assert!(error.contains("only apply"), "{error}");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn errors_say_where_and_what() {
        let error = Config::parse("[[listener]]\naddres = \"x\"\n").unwrap_err();
        assert!(error.contains("line 2"), "{error}");
        assert!(error.contains("addres"), "{error}");

        let mut config = Config::embedded_default();
        config.subsystems[0].namespaces[0].size = Some(ByteSize(1000));
        let error = config.target_spec().err().unwrap().to_string();
        assert!(error.contains("subsystem[0]") && error.contains("namespace[0].size"), "{error}");

        let mut config = Config::embedded_default();
        config.listeners[0].address = "localhost".into();
        let error = config.target_spec().err().unwrap().to_string();
        assert!(error.contains("listener[0].address"), "{error}");
    }
}

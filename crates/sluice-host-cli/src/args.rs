//! Command-line arguments of the host subcommands: target selection in `nvme connect`'s
//! vocabulary, the output format, and the number parsers (decimal or 0x hex, like
//! nvme-cli).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use clap::{Args, ValueEnum};
use nvme_host::Secret;
use nvme_host_client::{ConnectOptions, PathPolicy};
use nvme_spec::discovery::DISCOVERY_NQN;

use super::HostError;

/// Default NVMe/TCP I/O port (IANA).
pub const DEFAULT_IO_PORT: u16 = 4420;
/// Default NVMe/TCP discovery port (IANA).
pub const DEFAULT_DISCOVERY_PORT: u16 = 8009;

/// Which target to talk to and how to connect, spelled like `nvme connect`.
///
/// The letters are the same in every subcommand, with three exceptions where
/// nvme-cli's own flag for that subcommand wins and the target option is long-only:
/// `-s` (--sel) in get-feature, `-i`/`-l` (--log-id/--log-len) in get-log, and `-c`
/// (--block-count) in read/write. The start block of read/write, nvme-cli's `-s`, is
/// `-b` here, so a port can never be taken for an LBA.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Target (like `nvme connect`)")]
pub struct TargetArgs {
    /// The target as one string: tcp://ADDR[:PORT][/NQN] (IPv6 as [ADDR]); instead of
    /// -a/-s/-n. Several paths to one subsystem: tcp://ADDR:PORT,ADDR:PORT/NQN.
    #[arg(value_name = "tcp://ADDR:PORT/NQN", value_parser = parse_target_url,
          conflicts_with_all = ["traddr", "trsvcid", "nqn"])]
    pub target: Option<TargetUrl>,
    /// Transport type; only tcp.
    #[arg(short = 't', long, value_enum, default_value_t = Transport::Tcp)]
    pub transport: Transport,
    /// Target address (IP address or host name); several paths to one subsystem as a
    /// comma-separated list (each ADDR or ADDR:PORT, IPv6 with a port as [ADDR]:PORT).
    #[arg(short = 'a', long, value_name = "ADDR")]
    pub traddr: Option<String>,
    /// Target port [default: 4420; 8009 for discover].
    #[arg(short = 's', long, value_name = "PORT")]
    pub trsvcid: Option<u16>,
    /// Subsystem NQN (see `sluice discover`).
    #[arg(short = 'n', long, value_name = "NQN")]
    pub nqn: Option<String>,
    /// Host NQN [default: /etc/nvme/hostnqn, else one derived from /etc/machine-id].
    #[arg(short = 'q', long, value_name = "NQN")]
    pub hostnqn: Option<String>,
    /// Host identifier, a UUID [default: /etc/nvme/hostid, else the host NQN's UUID].
    #[arg(short = 'I', long, value_name = "UUID", value_parser = parse_host_id)]
    pub hostid: Option<[u8; 16]>,
    /// Enable the TCP header digest (CRC32C).
    #[arg(short = 'g', long)]
    pub hdr_digest: bool,
    /// Enable the TCP data digest (CRC32C).
    #[arg(short = 'G', long)]
    pub data_digest: bool,
    /// Number of I/O queues to ask for.
    #[arg(short = 'i', long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub nr_io_queues: u16,
    /// Entries per I/O queue [default: 128].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(2..))]
    pub queue_size: Option<u16>,
    /// Keep-alive timeout in seconds [default: 5].
    #[arg(short = 'k', long, value_name = "SECONDS")]
    pub keep_alive_tmo: Option<u32>,
    /// Seconds between reconnect attempts [default: 2].
    #[arg(short = 'c', long, value_name = "SECONDS")]
    pub reconnect_delay: Option<u32>,
    /// Seconds to keep trying to reconnect before giving up; -1 for ever [default: 60].
    #[arg(short = 'l', long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub ctrl_loss_tmo: Option<i64>,
    /// Per-command timeout in milliseconds, also capping connection setup (and the
    /// CSTS.RDY wait CAP.TO allows) [default: 30000; 10000 to connect]. A command
    /// whose connection keeps failing is sent again at most 5 times and is over
    /// within --timeout + --ctrl-loss-tmo.
    #[arg(long, value_name = "MS")]
    pub timeout: Option<u64>,
    /// DH-HMAC-CHAP host secret, as `nvme gen-dhchap-key` prints it
    /// (DHHC-1:<hash>:<base64>:), for a target that asks for authentication.
    // Parsed after clap (`secrets`): clap quotes a value its parser refuses, and a
    // mistyped secret is still nearly the secret.
    #[arg(short = 'S', long, value_name = "DHHC-1:..")]
    pub dhchap_secret: Option<String>,
    /// DH-HMAC-CHAP controller secret: the target must prove it knows it
    /// (bidirectional authentication). Needs --dhchap-secret.
    #[arg(short = 'C', long = "dhchap-ctrl-secret", value_name = "DHHC-1:..", requires = "dhchap_secret")]
    pub dhchap_ctrl_secret: Option<String>,
    /// NVMe/TCP over TLS 1.3 (needs --tls-key: this host reads no kernel keyring).
    #[arg(long, requires = "tls_key")]
    pub tls: bool,
    /// Secure channel concatenation: authenticate the admin queue without TLS
    /// (needs --dhchap-secret), which generates a TLS PSK, then connect every queue
    /// over TLS with it (as `nvme connect --concat`).
    #[arg(long, requires = "dhchap_secret", conflicts_with_all = ["tls", "tls_key"])]
    pub concat: bool,
    /// TLS pre-shared key in the interchange format (NVMeTLSkey-1:..., as `nvme
    /// gen-tls-key` prints it); turns TLS on. Also read from SLUICE_TLS_KEY, which
    /// keeps it out of the process list.
    #[arg(long, value_name = "NVMeTLSkey-1:..", env = "SLUICE_TLS_KEY", hide_env_values = true)]
    pub tls_key: Option<String>,
    /// PSK identity format offered: 1 (with the PSK digest, what `nvme connect
    /// --tls-key` offers), 0 (NQNs only, TP 8011: all SPDK's target knows), or auto
    /// (1, then 0 on a new connection if the target refuses it).
    #[arg(long, value_enum, value_name = "auto|0|1", default_value_t = TlsIdentity::Auto)]
    pub tls_identity: TlsIdentity,
    /// Derive keys as libnvme before 1.16 does (a target keyed with such an
    /// nvme-cli, e.g. Linux nvmet set up on Debian 13).
    #[arg(long)]
    pub tls_compat: bool,
    /// How I/O is spread over several paths of the best ANA state (Linux's
    /// iopolicy); only with several addresses.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = IoPolicy::QueueDepth)]
    pub iopolicy: IoPolicy,
}

/// `--iopolicy`: Linux's names for the path policies.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoPolicy {
    /// Each command to the next path in turn.
    RoundRobin,
    /// Each command to the path with the fewest commands in flight.
    QueueDepth,
}

impl IoPolicy {
    pub fn path_policy(self) -> PathPolicy {
        match self {
            IoPolicy::RoundRobin => PathPolicy::RoundRobin,
            IoPolicy::QueueDepth => PathPolicy::QueueDepth,
        }
    }
}

/// Transport types; nvme-cli also knows rdma, fc and loop, which are not served here.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
}

/// `-o/--output-format`.
#[derive(Args, Debug, Clone, Copy)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Normal)]
    pub output_format: OutputFormat,
}

impl OutputArgs {
    pub fn json(&self) -> bool {
        self.output_format == OutputFormat::Json
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// Text like nvme-cli's.
    Normal,
    /// JSON with nvme-cli's field names.
    Json,
}

/// Most paths one command line may name: more than any real fabric has to one
/// subsystem, few enough that connecting to all of them stays quick.
pub const MAX_PATHS: usize = 16;

/// One address of a target, with its port when given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: String,
    pub port: Option<u16>,
}

/// A parsed `tcp://ADDR[:PORT][,ADDR[:PORT]...][/NQN]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// One per path, in the order given.
    pub paths: Vec<Authority>,
    pub nqn: Option<String>,
}

/// Parses `tcp://ADDR[:PORT][/NQN]`, with several comma-separated `ADDR[:PORT]` for
/// several paths; IPv6 addresses go in brackets.
pub fn parse_target_url(text: &str) -> Result<TargetUrl, String> {
    let rest = text
        .strip_prefix("tcp://")
        .ok_or_else(|| "expected tcp://ADDR[:PORT][/NQN] (only the tcp transport is supported)".to_string())?;
    let (authorities, nqn) = match rest.split_once('/') {
        Some((authorities, nqn)) => (authorities, (!nqn.is_empty()).then(|| nqn.to_string())),
        None => (rest, None),
    };
    let paths = parse_path_list(authorities, parse_authority)?;
    Ok(TargetUrl { paths, nqn })
}

/// Splits a comma-separated list of paths, each parsed by `parse`, at most
/// [`MAX_PATHS`].
fn parse_path_list(list: &str, parse: fn(&str) -> Result<Authority, String>) -> Result<Vec<Authority>, String> {
    let paths = list.split(',').map(parse).collect::<Result<Vec<_>, _>>()?;
    if paths.len() > MAX_PATHS {
        return Err(format!("{} paths given; at most {MAX_PATHS}", paths.len()));
    }
    Ok(paths)
}

/// `-a` entries: a bare IP address (IPv6 without brackets too) or host name, or
/// ADDR:PORT like the URL form.
fn parse_traddr_entry(text: &str) -> Result<Authority, String> {
    let text = text.trim();
    if text.parse::<IpAddr>().is_ok() {
        return Ok(Authority { host: text.to_string(), port: None });
    }
    parse_authority(text)
}

/// `ADDR[:PORT]`, IPv6 as `[ADDR][:PORT]`.
fn parse_authority(authority: &str) -> Result<Authority, String> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or("missing ']' after the IPv6 address")?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or("expected :PORT after ']'")?),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            Some(_) => return Err("put an IPv6 address in brackets: tcp://[ADDR]:PORT/NQN".into()),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("the address is missing: tcp://ADDR[:PORT][/NQN]".into());
    }
    let port =
        port.map(|port| port.parse::<u16>().map_err(|_| format!("{port:?} is not a port number"))).transpose()?;
    Ok(Authority { host: host.to_string(), port })
}

/// Parses a DH-HMAC-CHAP secret; the error never repeats the text (it is a secret).
pub fn parse_secret(text: &str) -> Result<Secret, String> {
    Secret::parse(text).map_err(|error| error.to_string())
}

/// Parses a TLS PSK in the interchange format (the error never echoes it).
pub fn parse_tls_key(text: &str) -> Result<nvme_auth::TlsKey, String> {
    nvme_auth::TlsKey::parse(text).map_err(|error| error.to_string())
}

/// Parses a UUID host identifier into its 16 bytes.
pub fn parse_host_id(text: &str) -> Result<[u8; 16], String> {
    uuid::Uuid::parse_str(text.trim())
        .map(|uuid| *uuid.as_bytes())
        .map_err(|error| format!("not a UUID ({error}); e.g. 4b5e8f3e-0d5a-4c1f-9a7e-2f1b3c4d5e6f"))
}

/// Parses a number in decimal or with a 0x prefix in hex, like nvme-cli, at most `max`.
pub fn parse_number(text: &str, max: u64) -> Result<u64, String> {
    let text = text.trim();
    let value = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse::<u64>(),
    }
    .map_err(|_| format!("{text:?} is not a number (decimal, or hex with 0x)"))?;
    if value > max {
        return Err(format!("{text} is too large (at most {max})"));
    }
    Ok(value)
}

pub fn parse_u8(text: &str) -> Result<u8, String> {
    parse_number(text, u8::MAX.into()).map(|value| value as u8)
}

pub fn parse_u32(text: &str) -> Result<u32, String> {
    parse_number(text, u32::MAX.into()).map(|value| value as u32)
}

pub fn parse_u64(text: &str) -> Result<u64, String> {
    parse_number(text, u64::MAX)
}

/// `-z`: a byte count, and the warning when its spelling meant another count before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSize {
    pub bytes: u64,
    /// Set for KB, MB and GB (any case): `-z` read them as powers of two, as nvme-cli
    /// does, until every surface of Sluice took one set of rules (KB = 1000).
    pub meaning_changed: Option<units::MeaningChanged>,
}

impl DataSize {
    /// The warning for stderr, when the size means something it did not before.
    pub fn warning(&self) -> Option<String> {
        self.meaning_changed.as_ref().map(|change| format!("sluice: warning: {change}"))
    }
}

/// The units `-z` read as powers of two before: KB, MB and GB (it refused TB, so a TB
/// size cannot have changed meaning).
const UNITS_ONCE_BINARY: [units::Unit; 3] = [units::Unit::Kilobyte, units::Unit::Megabyte, units::Unit::Gigabyte];

/// Parses `-z`: a byte count by the rules of every Sluice size (4096, 0x1000, 4k,
/// 4KiB, 4KB; the units crate has them), with the warning for a spelling whose count
/// changed.
pub fn parse_data_size(text: &str) -> Result<DataSize, String> {
    let size = units::parse_written_size(text).map_err(|error| error.to_string())?;
    let meaning_changed = UNITS_ONCE_BINARY
        .contains(&size.unit)
        .then(|| units::MeaningChanged::decimal_unit_was_binary("-z", text, &size))
        .flatten();
    Ok(DataSize { bytes: size.bytes, meaning_changed })
}

/// What a subcommand needs the target for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Purpose {
    /// Discovery controller on port 8009 by default, NQN the well-known one.
    Discovery,
    /// An I/O controller of a subsystem: -n is required.
    Subsystem,
}

/// The resolved target: where to connect and with which options.
pub struct Target {
    /// tcp://ADDR:PORT/NQN, for messages and the Node column.
    pub url: String,
    pub address: SocketAddr,
    pub nqn: String,
    pub host_nqn: String,
    pub purpose: Purpose,
    options: Option<ConnectOptions>,
}

impl Target {
    /// The connect options, once.
    pub fn take_options(&mut self) -> ConnectOptions {
        self.options.take().expect("connect options are taken once")
    }
}

impl TargetArgs {
    /// Resolves the one address of a subcommand that talks to one controller and
    /// builds the connect options. Errors are usage errors.
    pub fn resolve(&self, purpose: Purpose) -> Result<Target, HostError> {
        let mut targets = self.resolve_paths(purpose)?;
        if targets.len() > 1 {
            return Err(HostError::usage(format!(
                "{} addresses given, but this subcommand talks to one controller: give one (several paths to one \
                 subsystem are for read, write, compare, flush, verify and list-subsys)",
                targets.len()
            )));
        }
        Ok(targets.remove(0))
    }

    /// Resolves every address given (several paths to one subsystem) and builds each
    /// one's connect options. Errors are usage errors.
    pub fn resolve_paths(&self, purpose: Purpose) -> Result<Vec<Target>, HostError> {
        let (paths, default_port, nqn) = match &self.target {
            Some(url) => (url.paths.clone(), None, url.nqn.clone()),
            None => {
                let traddr = self.traddr.as_deref().ok_or_else(|| {
                    HostError::usage("no target address: give -a/--traddr ADDR or tcp://ADDR:PORT/NQN")
                })?;
                let paths = parse_path_list(traddr, parse_traddr_entry)
                    .map_err(|error| HostError::usage(format!("-a/--traddr {traddr:?}: {error}")))?;
                (paths, self.trsvcid, self.nqn.clone())
            }
        };
        let first_host = paths[0].host.clone();
        let nqn = match (purpose, nqn) {
            (Purpose::Discovery, Some(nqn)) if nqn != DISCOVERY_NQN => {
                return Err(HostError::usage(format!(
                    "discover always reads the discovery controller ({DISCOVERY_NQN}); drop the NQN {nqn:?}"
                )))
            }
            (_, Some(nqn)) => nqn,
            (Purpose::Discovery, None) => DISCOVERY_NQN.to_string(),
            (Purpose::Subsystem, None) => {
                let port = paths[0].port.or(default_port).unwrap_or(DEFAULT_IO_PORT);
                return Err(HostError::usage(format!(
                    "no subsystem NQN: give -n/--nqn NQN or tcp://{}/NQN; `sluice discover -a {first_host}` lists them",
                    display_authority(&first_host, port)
                )));
            }
        };
        let fallback_port = default_port.unwrap_or(match purpose {
            Purpose::Discovery => DEFAULT_DISCOVERY_PORT,
            Purpose::Subsystem => DEFAULT_IO_PORT,
        });
        paths
            .iter()
            .map(|path| self.target_for(&path.host, path.port.unwrap_or(fallback_port), &nqn, purpose))
            .collect()
    }

    /// One path's target: the address resolved and the connect options built.
    fn target_for(&self, host: &str, port: u16, nqn: &str, purpose: Purpose) -> Result<Target, HostError> {
        let nqn = nqn.to_string();
        let address = resolve_address(host, port)?;
        // The library's defaults are nvme-cli's: /etc/nvme/hostnqn and /etc/nvme/hostid.
        let mut options = ConnectOptions::new(address, nqn.clone());
        if let Some(host_nqn) = &self.hostnqn {
            options.host_nqn = host_nqn.clone();
            if let Some(host_id) = host_id_from_nqn(host_nqn) {
                options.host_identifier = host_id;
            }
        }
        if let Some(host_id) = self.hostid {
            options.host_identifier = host_id;
        }
        options.header_digest = self.hdr_digest;
        options.data_digest = self.data_digest;
        options.io_queues = self.nr_io_queues;
        if let Some(size) = self.queue_size {
            options.queue_size = size;
        }
        if let Some(seconds) = self.keep_alive_tmo {
            options.keep_alive_timeout_ms = seconds.saturating_mul(1000);
        }
        if let Some(seconds) = self.reconnect_delay {
            options.reconnect_delay = Duration::from_secs(u64::from(seconds));
        }
        if let Some(seconds) = self.ctrl_loss_tmo {
            // nvme-cli: -1 means "never give up".
            options.controller_loss_timeout = match u64::try_from(seconds) {
                Ok(seconds) => Duration::from_secs(seconds),
                Err(_) => Duration::from_secs(100 * 365 * 24 * 3600),
            };
        }
        if let Some(ms) = self.timeout {
            let timeout = Duration::from_millis(ms.max(1));
            options.command_timeout = timeout;
            options.connect_timeout = options.connect_timeout.min(timeout);
        }
        let parsed = |text: &Option<String>, option: &str| {
            text.as_deref()
                .map(parse_secret)
                .transpose()
                .map_err(|reason| HostError::usage(format!("{option}: {reason}")))
        };
        options.dhchap_secret = parsed(&self.dhchap_secret, "--dhchap-secret")?;
        options.dhchap_controller_secret = parsed(&self.dhchap_ctrl_secret, "--dhchap-ctrl-secret")?;
        let tls_key = self
            .tls_key
            .as_deref()
            .map(parse_tls_key)
            .transpose()
            .map_err(|reason| HostError::usage(format!("--tls-key (or SLUICE_TLS_KEY): {reason}")))?;
        options.tls =
            tls_key.map(|key| nvme_host_client::TlsOptions::new(key, self.tls_identity.only(), self.tls_compat));
        options.concat = self.concat;
        let url = format!("tcp://{}/{}", display_authority(host, port), nqn);
        let host_nqn = options.host_nqn.clone();
        Ok(Target { url, address, nqn, host_nqn, purpose, options: Some(options) })
    }
}

fn display_authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn resolve_address(host: &str, port: u16) -> Result<SocketAddr, HostError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    match (host, port).to_socket_addrs() {
        Ok(mut addresses) => addresses.next().ok_or_else(|| HostError::usage(format!("{host:?} has no address"))),
        Err(error) => Err(HostError::usage(format!(
            "cannot resolve the target address {host:?}: {error}: give an IP address with -a"
        ))),
    }
}

/// nvme-cli derives the host identifier from a `nqn.2014-08.org.nvmexpress:uuid:<UUID>`
/// host NQN.
fn host_id_from_nqn(host_nqn: &str) -> Option<[u8; 16]> {
    let (_, uuid) = host_nqn.rsplit_once(":uuid:")?;
    parse_host_id(uuid).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_urls() {
        let one = |host: &str, port| vec![Authority { host: host.into(), port }];
        let url = parse_target_url("tcp://127.0.0.1:4420/nqn.2026-11.io.sluice:default").unwrap();
        assert_eq!(url.paths, one("127.0.0.1", Some(4420)));
        assert_eq!(url.nqn.as_deref(), Some("nqn.2026-11.io.sluice:default"));
        let url = parse_target_url("tcp://[::1]:8009").unwrap();
        assert_eq!((url.paths, url.nqn), (one("::1", Some(8009)), None));
        let url = parse_target_url("tcp://host/").unwrap();
        assert_eq!((url.paths, url.nqn), (one("host", None), None));
        let url = parse_target_url("tcp://127.0.0.1:4420,[::1]:4421,gw/n").unwrap();
        let hosts: Vec<_> = url.paths.iter().map(|path| (path.host.as_str(), path.port)).collect();
        assert_eq!(hosts, [("127.0.0.1", Some(4420)), ("::1", Some(4421)), ("gw", None)]);
        assert!(parse_target_url("tcp://a:1,,b:2/n").is_err());
        let many = vec!["10.0.0.1:4420"; MAX_PATHS + 1].join(",");
        assert!(parse_target_url(&format!("tcp://{many}/n")).unwrap_err().contains("at most"));
        assert!(parse_target_url("rdma://1.2.3.4").is_err());
        assert!(parse_target_url("tcp://::1:4420").is_err());
        assert!(parse_target_url("tcp://1.2.3.4:x/n").is_err());
        assert!(parse_target_url("tcp://:4420/n").is_err());
    }

    #[test]
    fn traddr_lists() {
        let entries = parse_path_list("127.0.0.1, ::1,10.0.0.2:4421,[fe80::1]:4422", parse_traddr_entry).unwrap();
        let hosts: Vec<_> = entries.iter().map(|path| (path.host.as_str(), path.port)).collect();
        assert_eq!(hosts, [("127.0.0.1", None), ("::1", None), ("10.0.0.2", Some(4421)), ("fe80::1", Some(4422))]);
        assert!(parse_path_list("127.0.0.1:x", parse_traddr_entry).is_err());
    }

    fn args(list: &[&str]) -> TargetArgs {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            target: TargetArgs,
        }
        <Wrapper as clap::Parser>::try_parse_from(std::iter::once("test").chain(list.iter().copied())).unwrap().target
    }

    #[test]
    fn several_paths_resolve_each_with_its_port() {
        let targets = args(&["-a", "127.0.0.1,127.0.0.2:4421", "-s", "4430", "-n", "nqn.x"])
            .resolve_paths(Purpose::Subsystem)
            .unwrap();
        let addresses: Vec<String> = targets.iter().map(|target| target.address.to_string()).collect();
        assert_eq!(addresses, ["127.0.0.1:4430", "127.0.0.2:4421"]);
        let Err(error) = args(&["tcp://127.0.0.1:1,127.0.0.1:2/nqn.x"]).resolve(Purpose::Subsystem) else {
            panic!("two addresses for a one-controller subcommand were accepted");
        };
        assert!(error.message.contains("2 addresses given"), "{}", error.message);
        let targets = args(&["tcp://127.0.0.1/nqn.x"]).resolve_paths(Purpose::Subsystem).unwrap();
        assert_eq!(targets[0].address.port(), DEFAULT_IO_PORT);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u32("0x10"), Ok(16));
        assert_eq!(parse_u32("17"), Ok(17));
        assert!(parse_u8("256").is_err());
        assert!(parse_u8("x").is_err());
        let bytes = |text: &str| parse_data_size(text).map(|size| size.bytes);
        assert_eq!(bytes("4k"), Ok(4096));
        assert_eq!(bytes("1MiB"), Ok(1 << 20));
        assert_eq!(bytes("0x200"), Ok(512));
        assert_eq!(bytes("512"), Ok(512));
        assert_eq!(bytes("1MB"), Ok(1_000_000));
        assert!(bytes("5q").unwrap_err().contains("unknown unit \"q\""));
    }

    #[test]
    fn a_data_size_whose_meaning_changed_warns_with_both_counts() {
        let size = parse_data_size("1mb").unwrap();
        assert_eq!(size.bytes, 1_000_000);
        assert_eq!(
            size.warning().unwrap(),
            "sluice: warning: -z 1mb now means 1,000,000 bytes (MB is a power of 1000); write -z 1MiB for 1,048,576 bytes as before"
        );
        for (text, before, now) in [
            ("4KB", 4 << 10, 4_000),
            ("4 kb", 4 << 10, 4_000),
            ("2Gb", 2 << 30, 2_000_000_000),
            ("3mB", 3 << 20, 3_000_000),
        ] {
            let change = parse_data_size(text).unwrap().meaning_changed.expect(text);
            assert_eq!((change.before_bytes, change.now_bytes), (before, now), "{text}");
        }
        // Spellings that kept their meaning, and TB, which -z refused before.
        for text in
            ["4k", "4K", "4KiB", "4kib", "1m", "1M", "1MiB", "1G", "1GiB", "4096", "0x1000", "1TB", "1tb", "1TiB"]
        {
            assert_eq!(parse_data_size(text).unwrap().warning(), None, "{text}");
        }
    }

    #[test]
    fn secrets() {
        let secret = parse_secret("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:").unwrap();
        assert_eq!(secret.key_length(), 32);
        let error = parse_secret("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaS:").unwrap_err();
        assert!(!error.contains("AAEC"), "{error}");
    }

    #[test]
    fn host_ids() {
        let id = host_id_from_nqn("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001").unwrap();
        assert_eq!(id[15], 1);
        assert!(parse_host_id("nope").is_err());
    }
}

/// `--tls-identity`: which PSK identity formats the host offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsIdentity {
    /// Format 1, then 0 on a new connection if the target refuses it.
    Auto,
    /// Only format 0 (NQNs only, TP 8011).
    #[value(name = "0")]
    Format0,
    /// Only format 1 (with the PSK digest, TP 8018).
    #[value(name = "1")]
    Format1,
}

impl TlsIdentity {
    /// The one format to offer, or `None` for auto.
    fn only(self) -> Option<nvme_auth::IdentityVersion> {
        match self {
            TlsIdentity::Auto => None,
            TlsIdentity::Format0 => Some(nvme_auth::IdentityVersion::V0),
            TlsIdentity::Format1 => Some(nvme_auth::IdentityVersion::V1),
        }
    }
}

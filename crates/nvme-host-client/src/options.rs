//! Connection options and the host's identity (HOSTNQN, HOSTID).

use std::net::SocketAddr;
use std::time::Duration;

/// How to connect to a controller. [`ConnectOptions::new`] fills in the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The target's NVMe/TCP address (for discovery, the address passed to
    /// [`crate::discover`] is used instead).
    pub address: SocketAddr,
    /// SUBNQN of the NVM subsystem.
    pub subsystem_nqn: String,
    /// HOSTNQN. Default: the NQN in `/etc/nvme/hostnqn` when present (what nvme-cli
    /// uses), else `nqn.2014-08.org.nvmexpress:uuid:<uuid>` with a UUID derived from
    /// `/etc/machine-id` (stable across runs), else a random one.
    pub host_nqn: String,
    /// HOSTID. Default: `/etc/nvme/hostid` when present, else the UUID of the default
    /// host NQN (what Linux does).
    pub host_identifier: [u8; 16],
    /// I/O queues requested with Set Features Number of Queues; the controller may
    /// grant fewer. Default: the number of CPUs, at most 8.
    pub io_queues: u16,
    /// Entries per I/O queue (clamped to CAP.MQES + 1 and MAXCMD). Default 128, as
    /// Linux.
    pub queue_size: u16,
    /// KATO in milliseconds. Default 5000 (Linux's NVME_DEFAULT_KATO is 5 s);
    /// discovery always uses 0.
    pub keep_alive_timeout_ms: u32,
    /// Ask for header digests (HDGST).
    pub header_digest: bool,
    /// Ask for data digests (DDGST).
    pub data_digest: bool,
    /// Longest a command may stay outstanding. Default 30 s (Linux io_timeout).
    pub command_timeout: Duration,
    /// Longest a connection setup (TCP, ICReq, Connect) may take. Default 10 s.
    pub connect_timeout: Duration,
    /// Pause before each reconnect attempt. Default 2 s (Linux reconnect_delay is 10 s;
    /// a shorter pause suits a userspace client that owns its controller).
    pub reconnect_delay: Duration,
    /// Give up reconnecting (commands then fail with
    /// [`crate::ClientError::ControllerLost`]) after this long. Default 60 s; Linux's
    /// ctrl_loss_tmo is 600 s, too long for a benchmark or CLI to sit blocked.
    pub controller_loss_timeout: Duration,
    /// DH-HMAC-CHAP host secret (nvme-cli's `--dhchap-secret`): used on every queue
    /// whose Connect response asks for authentication. Default: none.
    pub dhchap_secret: Option<nvme_host::Secret>,
    /// DH-HMAC-CHAP controller secret (`--dhchap-ctrl-secret`): the controller must
    /// prove it knows it (bidirectional authentication). Needs `dhchap_secret`.
    pub dhchap_controller_secret: Option<nvme_host::Secret>,
    /// NVMe/TCP over TLS 1.3 with this pre-shared key (nvme-cli's `--tls-key`): every
    /// queue shakes hands before its ICReq. `None`: plain NVMe/TCP.
    pub tls: Option<TlsOptions>,
    /// Secure channel concatenation (nvme-cli's `--concat`): the admin queue connects
    /// without TLS and authenticates with `dhchap_secret`, generating a TLS PSK;
    /// then the admin queue reconnects and every I/O queue connects over TLS with it.
    /// Needs `dhchap_secret`; not with `tls`. Default: off.
    pub concat: bool,
    /// How a taken I/O queue ([`crate::IoQueue`]) moves its data. Default: the
    /// io_uring ring of the thread that drives it, polling adaptively.
    pub io_path: IoPath,
    /// When an I/O queue's connection drops, complete its commands at once with
    /// Host Pathing Error (SCT 3h, SC 70h, DNR clear) instead of holding them for
    /// the reconnect, and fail commands submitted while it reconnects the same way
    /// (Linux's `fast_io_fail_tmo=0`). For multipath, where another path takes
    /// them ([`crate::Multipath`] sets it). Default: false.
    pub fail_fast_on_path_loss: bool,
}

/// The data path of taken I/O queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPath {
    /// An io_uring ring created on the thread that first drives the queue: sends
    /// and receives batched into one system call, waiting by `PollMode` (adaptive:
    /// spin while completions keep coming, then sleep). Falls back to
    /// [`IoPath::Blocking`] where io_uring is not available.
    Ring(runtime::PollMode),
    /// Blocking sockets with read timeouts: no spinning, one system call per
    /// send and per receive.
    Blocking,
}

impl Default for IoPath {
    fn default() -> Self {
        IoPath::Ring(runtime::PollMode::ADAPTIVE)
    }
}

impl ConnectOptions {
    /// Options with every default filled in.
    pub fn new(address: SocketAddr, subsystem_nqn: impl Into<String>) -> Self {
        let (host_nqn, host_identifier) = default_host_identity();
        ConnectOptions {
            address,
            subsystem_nqn: subsystem_nqn.into(),
            host_nqn,
            host_identifier,
            io_queues: std::thread::available_parallelism().map_or(1, |count| count.get()).min(8) as u16,
            queue_size: 128,
            keep_alive_timeout_ms: 5000,
            header_digest: false,
            data_digest: false,
            command_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            reconnect_delay: Duration::from_secs(2),
            controller_loss_timeout: Duration::from_secs(60),
            dhchap_secret: None,
            dhchap_controller_secret: None,
            tls: None,
            concat: false,
            io_path: IoPath::default(),
            fail_fast_on_path_loss: false,
        }
    }
}

/// A host's TLS: its configured PSK and the PSK identity format it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// The configured PSK (`NVMeTLSkey-1:...`); its retained PSK is derived with the
    /// host NQN.
    pub key: nvme_auth::TlsKey,
    /// Identity format 0 (`NVMe0R0x host subsystem`, TP 8011) or 1 (with the PSK
    /// digest, TP 8018: what `nvme connect --tls-key` offers), or 1 and then 0.
    pub identity: IdentityChoice,
    /// Key derivation: RFC 8446's layout, or libnvme's before 1.16 (a target set up
    /// with such an nvme-cli expects it).
    pub derivation: nvme_auth::KeyDerivation,
}

/// Which PSK identity formats a host offers, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdentityChoice {
    /// Format 1, and format 0 on a new connection when the target refuses it: a
    /// target that implements only TP 8011 (SPDK's) knows format 0 alone, Linux
    /// nvmet finds whichever its keyring holds.
    #[default]
    Auto,
    /// Only this format.
    Only(nvme_auth::IdentityVersion),
}

impl TlsOptions {
    /// The options nvme-cli's flags name: identity format 0 (`--identity 0`) or 1,
    /// or `None` for [`IdentityChoice::Auto`], and libnvme's pre-1.16 key derivation
    /// (`compat`) or RFC 8446's.
    pub fn new(
        key: nvme_auth::TlsKey,
        identity_version: Option<nvme_auth::IdentityVersion>,
        compat: bool,
    ) -> TlsOptions {
        TlsOptions {
            key,
            identity: identity_version.map_or(IdentityChoice::Auto, IdentityChoice::Only),
            derivation: if compat { nvme_auth::KeyDerivation::Compat } else { nvme_auth::KeyDerivation::Rfc8446 },
        }
    }

    /// The identity formats to offer, one connection attempt each, in order.
    pub fn identity_versions(&self) -> &'static [nvme_auth::IdentityVersion] {
        use nvme_auth::IdentityVersion::{V0, V1};
        match self.identity {
            IdentityChoice::Auto => &[V1, V0],
            IdentityChoice::Only(V0) => &[V0],
            IdentityChoice::Only(V1) => &[V1],
        }
    }
}

/// The NQN prefix for UUID-based host NQNs (NVMe Base 2.0, "NVMe Qualified Names").
const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";

/// HOSTNQN and HOSTID as described on [`ConnectOptions::host_nqn`].
pub fn default_host_identity() -> (String, [u8; 16]) {
    let configured_nqn = std::fs::read_to_string("/etc/nvme/hostnqn")
        .ok()
        .map(|text| text.trim().to_string())
        .filter(|nqn| nqn.starts_with("nqn.") && nqn.len() <= 223);
    let configured_id = std::fs::read_to_string("/etc/nvme/hostid").ok().and_then(|text| parse_uuid(text.trim()));
    let derived = std::fs::read_to_string("/etc/machine-id")
        .ok()
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
        .map(|machine_id| uuid_from_seed(machine_id.as_bytes()))
        .unwrap_or_else(random_uuid);
    let nqn = configured_nqn.unwrap_or_else(|| format!("{UUID_NQN_PREFIX}{}", format_uuid(&derived)));
    let id = configured_id.or_else(|| nqn.strip_prefix(UUID_NQN_PREFIX).and_then(parse_uuid)).unwrap_or(derived);
    (nqn, id)
}

/// A version 8 (custom) UUID from CRC32C hashes of `seed`: stable for one seed, and
/// the spec only needs HOSTID unique per host.
fn uuid_from_seed(seed: &[u8]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (index, word) in bytes.chunks_exact_mut(4).enumerate() {
        let salt = nvme_tcp_wire::crc32c(format!("sluice-host-id-{index}").as_bytes());
        word.copy_from_slice(&nvme_tcp_wire::crc32c_append(salt, seed).to_be_bytes());
    }
    bytes[6] = (bytes[6] & 0x0F) | 0x80;
    bytes[8] = (bytes[8] & 0x3F) | 0x80;
    bytes
}

fn random_uuid() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut seed = Vec::new();
    for _ in 0..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher
            .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        hasher.write_u32(std::process::id());
        seed.extend_from_slice(&hasher.finish().to_le_bytes());
    }
    uuid_from_seed(&seed)
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lower case.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// Parses a UUID in the hyphenated form.
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|character| *character != '-').collect();
    if hex.len() != 32 || text.len() != 36 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_round_trip_and_derivation_is_stable() {
        let id = uuid_from_seed(b"0123456789abcdef");
        assert_eq!(id, uuid_from_seed(b"0123456789abcdef"));
        assert_ne!(id, uuid_from_seed(b"0123456789abcdeg"));
        assert_eq!(parse_uuid(&format_uuid(&id)), Some(id));
        assert_eq!(parse_uuid("not-a-uuid"), None);
        let (nqn, _) = default_host_identity();
        assert!(nqn.starts_with("nqn."));
    }
}

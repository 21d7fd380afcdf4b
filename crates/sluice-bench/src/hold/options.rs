//! What `sluice bench hold` holds: the options and their defaults.

use std::net::SocketAddr;
use std::time::Duration;

use nvme_spec::NamespaceId;

/// Admin queue entries: Linux's NVME_AQ_DEPTH.
pub const ADMIN_QUEUE_ENTRIES: u16 = 32;
/// I/O queue entries: Linux's default queue size (nvme connect without -Q).
pub const IO_QUEUE_ENTRIES: u16 = 128;
/// Bytes of the one read on each I/O queue (whole blocks, at least one).
pub const READ_BYTES: u32 = 4096;
/// Controllers coming up at once by default.
pub const DEFAULT_IN_FLIGHT: usize = 256;
/// KATO by default, in milliseconds.
pub const DEFAULT_KEEP_ALIVE_TIMEOUT_MS: u32 = 10_000;

/// What to hold.
#[derive(Clone, Debug)]
pub struct HoldOptions {
    /// The target's NVMe/TCP listener.
    pub address: SocketAddr,
    /// The subsystem every controller connects to.
    pub subsystem_nqn: String,
    /// Controllers to bring up (two connections each).
    pub controllers: usize,
    /// How long to hold them once all are up.
    pub hold: Duration,
    /// KATO sent in each admin Connect, milliseconds; a Keep Alive goes out every
    /// KATO / 2. 0: no keep-alive (the target must allow it).
    pub keep_alive_timeout_ms: u32,
    /// Controllers coming up at once.
    pub in_flight: usize,
    /// The namespace read on each I/O queue.
    pub namespace: NamespaceId,
    /// Longest one controller may take to come up, and any one command.
    pub setup_timeout: Duration,
    /// The target's process: its RSS, open files and CPU time are sampled.
    pub target_pid: Option<u32>,
    /// What every read must return (compared with the start of its data).
    pub expected_data: Option<Vec<u8>>,
    /// Progress lines on stderr.
    pub progress: bool,
}

impl HoldOptions {
    /// `controllers` controllers on `subsystem_nqn` at `address`, held for `hold`,
    /// with the defaults of `sluice bench hold`.
    pub fn new(address: SocketAddr, subsystem_nqn: &str, controllers: usize, hold: Duration) -> HoldOptions {
        HoldOptions {
            address,
            subsystem_nqn: subsystem_nqn.to_string(),
            controllers,
            hold,
            keep_alive_timeout_ms: DEFAULT_KEEP_ALIVE_TIMEOUT_MS,
            in_flight: DEFAULT_IN_FLIGHT,
            namespace: NamespaceId(1),
            setup_timeout: Duration::from_secs(30),
            target_pid: None,
            expected_data: None,
            progress: false,
        }
    }
}

//! A gateway group of two `sluice serve` processes exporting one RBD image on the
//! cluster at `CEPH_CONF`, and hosts that reach it as the tests need them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::ana::{AnaLog, AnaState};
use nvme_spec::log_page::log_id;
use nvme_spec::NamespaceId;

use super::{free_port, scratch_dir, wait_bounded, ServeProcess};

pub const NQN: &str = "nqn.2026-11.io.sluice:ha-test";
pub const NAMESPACE: NamespaceId = NamespaceId(1);
pub const BLOCK_BYTES: usize = 4096;
/// Short leases keep the tests quick; the default (6 s) is measured in docs/results.
pub const LEASE_MS: u64 = 3000;

/// A name unique to this test process.
pub fn unique(what: &str) -> String {
    format!("sluice-gw-{what}-{}", std::process::id())
}

/// Two members, "a" and "b", of one group exporting one image.
pub struct Group {
    pub dir: PathBuf,
    pub image: String,
    pub group: String,
    pub ports: [u16; 2],
    pub block_bytes: usize,
}

impl Group {
    pub fn new(test: &str) -> Group {
        let dir = scratch_dir(&format!("gateway-{test}"));
        Group {
            dir,
            image: unique(test),
            group: unique(test),
            ports: [free_port(), free_port()],
            block_bytes: BLOCK_BYTES,
        }
    }

    pub fn address(&self, member: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[member]))
    }

    /// The config of member `member` ("a" or "b"), its namespace with `nsid`.
    pub fn config(&self, member: usize, nsid: u32) -> PathBuf {
        let name = ["a", "b"][member];
        let path = self.dir.join(format!("gateway-{name}.toml"));
        let text = format!(
            r#"[[listener]]
address = "127.0.0.1:{port}"

[gateway]
name = "{name}"
group = "{group}"
lease_ms = {LEASE_MS}
op_timeout_ms = 5000

[[gateway.member]]
name = "a"
address = "127.0.0.1:{port_a}"

[[gateway.member]]
name = "b"
address = "127.0.0.1:{port_b}"

[[backend]]
name = "shared"
kind = "rbd"
pool = "rbd"
image = "{image}"
size = "64MiB"
block_size = {block_bytes}
op_timeout_ms = 5000

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = {nsid}
device = "shared"
ana_group = 1

[runtime]
threads = 1
"#,
            port = self.ports[member],
            group = self.group,
            port_a = self.ports[0],
            port_b = self.ports[1],
            image = self.image,
            block_bytes = self.block_bytes,
        );
        std::fs::write(&path, text).expect("write gateway config");
        path
    }

    /// The config of member `member` with the group's configuration kept in the
    /// cluster: the whole file (its group part seeds an empty group) or, with
    /// `own_part_only`, just the gateway's own part.
    pub fn cluster_config(&self, member: usize, own_part_only: bool) -> PathBuf {
        let path = self.config(member, NAMESPACE.0);
        let full = std::fs::read_to_string(&path).unwrap().replacen(
            "op_timeout_ms = 5000\n",
            "op_timeout_ms = 5000\nconfig = \"cluster\"\n",
            1,
        );
        let text = if own_part_only {
            let gateway_end = full.find("[[gateway.member]]").unwrap();
            format!("{}[runtime]\nthreads = 1\n", &full[..gateway_end])
        } else {
            full
        };
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn start(&self, member: usize) -> ServeProcess {
        self.start_with_env(member, &[])
    }

    pub fn start_with_env(&self, member: usize, env: &[(&str, &str)]) -> ServeProcess {
        let config = self.config(member, NAMESPACE.0);
        let socket = self.socket(member);
        ServeProcess::start_with_env(&config, &["--rpc-socket", socket.to_str().unwrap()], env)
            .unwrap_or_else(|| panic!("gateway {member} did not start (ports {:?})", self.ports))
    }

    /// Member `member`'s management socket.
    pub fn socket(&self, member: usize) -> PathBuf {
        self.dir.join(format!("{member}.sock"))
    }

    /// `sluice ARGS --socket <member's socket>`, which must succeed; its stdout.
    pub fn manage(&self, member: usize, args: &[&str]) -> String {
        let socket = self.socket(member);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--socket", socket.to_str().unwrap()]);
        let output = super::sluice(&all);
        assert!(output.status.success(), "sluice {args:?} on {member}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        remove_image(&format!("rbd/{}", self.image));
        remove_image(&format!("rbd/{}-2", self.image));
        let _ = Command::new("rados")
            .args(["-p", "rbd", "rm", &format!("sluice.config.{}", self.group)])
            .stderr(Stdio::null())
            .status();
    }
}

/// Removes an image (retrying while a gateway that just stopped still holds it).
pub fn remove_image(spec: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let child = Command::new("rbd")
            .args(["rm", "--no-progress", spec])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run rbd");
        match wait_bounded(child, Duration::from_secs(60)) {
            Some(output) if output.status.success() || String::from_utf8_lossy(&output.stderr).contains("No such") => {
                return
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

pub fn connect(address: SocketAddr) -> Controller {
    connect_as(address, None)
}

/// Connects as the host with this identifier (its NQN derived from it), or as the
/// default host.
pub fn connect_as(address: SocketAddr, host: Option<[u8; 16]>) -> Controller {
    let mut options = ConnectOptions::new(address, NQN);
    if let Some(host) = host {
        options.host_identifier = host;
        options.host_nqn = format!("nqn.2014-08.org.nvmexpress:uuid:{}", nvme_host_client::format_uuid(&host));
    }
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(20);
    options.controller_loss_timeout = Duration::ZERO;
    Controller::connect(options).unwrap_or_else(|error| panic!("connect to {address}: {error}"))
}

/// The state of ANA group 1 at `address`, as a host reads it; `None` when the gateway
/// does not answer.
pub fn group_state(address: SocketAddr) -> Option<AnaState> {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 0;
    options.connect_timeout = Duration::from_secs(2);
    options.command_timeout = Duration::from_secs(2);
    options.controller_loss_timeout = Duration::ZERO;
    let controller = Controller::connect(options).ok()?;
    let data = controller.get_log_page(log_id::ASYMMETRIC_NAMESPACE_ACCESS, NamespaceId::BROADCAST, 0, 4096).ok()?;
    let log = AnaLog::decode(&data).expect("a well-formed ANA log");
    assert_eq!(log.groups.len(), 1, "one ANA group: {log:?}");
    assert_eq!(log.groups[0].namespaces, [NAMESPACE]);
    Some(log.groups[0].descriptor.state)
}

/// Polls until `address` reports `state` for group 1; returns how long it took.
pub fn await_state(address: SocketAddr, state: AnaState, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let seen = group_state(address);
        if seen == Some(state) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{address} reports {seen:?}, not {state:?}, after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The status a command completed with (panics on a transport failure).
pub fn status_of<T>(result: Result<T, nvme_host_client::ClientError>) -> nvme_spec::Status {
    match result {
        Ok(_) => nvme_spec::Status::SUCCESS,
        Err(nvme_host_client::ClientError::Command { status, .. }) => status.kind(),
        Err(other) => panic!("expected a command status, got {other}"),
    }
}

/// Reservation Register (RREGA `action`).
pub fn register_action(host: &Controller, action: u8, current: u64, key: u64) -> nvme_spec::Status {
    status_of(host.io_command(nvme_host::commands::reservation_register(NAMESPACE, action, false, 0, current, key)))
}

/// Reservation Register of `key`.
pub fn register(host: &Controller, key: u64) -> nvme_spec::Status {
    register_action(host, 0, 0, key)
}

/// Reservation Acquire (RACQA `action`) of Write Exclusive.
pub fn acquire_write_exclusive(host: &Controller, action: u8, key: u64, preempt: u64) -> nvme_spec::Status {
    status_of(host.io_command(nvme_host::commands::reservation_acquire(NAMESPACE, action, false, 1, key, preempt)))
}

/// The holder's Host Identifier in a Reservation Report, or `None`.
pub fn holder(host: &Controller) -> Option<[u8; 16]> {
    let completion = host.io_command(nvme_host::commands::reservation_report(NAMESPACE, 4096, true)).expect("report");
    let data = completion.data;
    let count = u16::from_le_bytes([data[5], data[6]]) as usize;
    (0..count)
        .map(|index| &data[64 + index * 64..128 + index * 64])
        .find(|entry| entry[2] == 1)
        .map(|entry| entry[16..32].try_into().unwrap())
}

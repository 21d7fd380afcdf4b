//! Two `sluice serve` gateways of one gateway group, exporting one RBD image, against
//! the cluster at `CEPH_CONF` (scripts/test.sh starts one and sets
//! `SLUICE_REQUIRE_CEPH`, which turns "skipped" into a failure):
//! - the preferred gateway reports the ANA group optimized, the other non-optimized
//!   (read as a host reads them: log 0Ch over NVMe/TCP), their CNTLIDs differ, and
//!   discovery on either lists both paths;
//! - fencing: the owner is SIGSTOPped with writes queued on its connection; the other
//!   takes the group (measured), and data written through it survives the stopped
//!   gateway's resumption: none of the queued writes lands, and the resumed gateway
//!   reports the group inaccessible (it was blocklisted);
//! - failback: the first gateway restarted gets its group back;
//! - a gateway whose namespace identity for the image differs from a live peer's is
//!   refused, naming both.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::ana::{AnaLog, AnaState};
use nvme_spec::log_page::log_id;
use nvme_spec::NamespaceId;
use support::{ceph_cluster_given, free_port, scratch_dir, wait_bounded, ServeProcess};

const NQN: &str = "nqn.2026-11.io.sluice:ha-test";
const NAMESPACE: NamespaceId = NamespaceId(1);
const BLOCK_BYTES: usize = 4096;
/// Short leases keep the test quick; the default (6 s) is measured in docs/results.
const LEASE_MS: u64 = 3000;
/// Blocks written in each pattern.
const BLOCKS: u32 = 64;

/// One test at a time on the cluster.
static CLUSTER: Mutex<()> = Mutex::new(());

fn unique(what: &str) -> String {
    format!("sluice-gw-{what}-{}", std::process::id())
}

struct Group {
    dir: PathBuf,
    image: String,
    group: String,
    ports: [u16; 2],
}

impl Group {
    fn new(test: &str) -> Group {
        let dir = scratch_dir(&format!("gateway-{test}"));
        Group { dir, image: unique(test), group: unique(test), ports: [free_port(), free_port()] }
    }

    fn address(&self, member: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[member]))
    }

    /// The config of member `member` ("a" or "b"), its namespace with `nsid`.
    fn config(&self, member: usize, nsid: u32) -> PathBuf {
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
block_size = {BLOCK_BYTES}
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
        );
        std::fs::write(&path, text).expect("write gateway config");
        path
    }

    fn start(&self, member: usize) -> ServeProcess {
        let config = self.config(member, NAMESPACE.0);
        let socket = self.dir.join(format!("{member}.sock"));
        ServeProcess::start(&config, &["--rpc-socket", socket.to_str().unwrap()])
            .unwrap_or_else(|| panic!("gateway {member} did not start (ports {:?})", self.ports))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let spec = format!("rbd/{}", self.image);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let child = Command::new("rbd")
                .args(["rm", "--no-progress", &spec])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run rbd");
            match wait_bounded(child, Duration::from_secs(60)) {
                Some(output) if output.status.success() || String::from_utf8_lossy(&output.stderr).contains("No such") => return,
                _ => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }
}

fn connect(address: SocketAddr) -> Controller {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(20);
    options.controller_loss_timeout = Duration::ZERO;
    Controller::connect(options).unwrap_or_else(|error| panic!("connect to {address}: {error}"))
}

/// The state of ANA group 1 at `address`, as a host reads it; `None` when the gateway
/// does not answer.
fn group_state(address: SocketAddr) -> Option<AnaState> {
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
fn await_state(address: SocketAddr, state: AnaState, limit: Duration) -> Duration {
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

fn pattern(tag: u8) -> Vec<u8> {
    (0..BLOCKS as usize * BLOCK_BYTES).map(|index| tag ^ (index % 251) as u8).collect()
}

#[test]
fn owner_fenced_on_takeover_and_failback_when_it_returns() {
    if !ceph_cluster_given("gateway failover") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let group = Group::new("failover");
    let a = group.start(0);
    let _b = group.start(1);
    let (at_a, at_b) = (group.address(0), group.address(1));
    await_state(at_a, AnaState::Optimized, Duration::from_secs(15));
    await_state(at_b, AnaState::NonOptimized, Duration::from_secs(15));

    // One subsystem, two controllers with different CNTLIDs; discovery lists both paths.
    let through_a = connect(at_a);
    let through_b = connect(at_b);
    assert_ne!(through_a.controller_id(), through_b.controller_id());
    let identify = through_a.identify();
    assert_ne!(identify.multipath_capabilities & nvme_spec::identify::cmic::ANA_REPORTING, 0);
    let nguid = |controller: &Controller| controller.identify_namespace(NAMESPACE).unwrap().namespace_globally_unique_identifier;
    assert_eq!(nguid(&through_a), nguid(&through_b), "the same namespace on both paths");
    assert_eq!(through_b.identify_namespace(NAMESPACE).unwrap().ana_group_identifier, 1);
    let discovery = support::sluice(&["discover", "-t", "tcp", "-a", "127.0.0.1", "-s", &group.ports[1].to_string(), "-o", "json"]);
    let listed = String::from_utf8_lossy(&discovery.stdout);
    for port in group.ports {
        assert!(listed.contains(&format!("\"{port}\"")) || listed.contains(&format!(": {port}")), "port {port} in {listed}");
    }

    let first = pattern(0x11);
    through_a.write(NAMESPACE, 0, &first, true).expect("write through the owner");

    // The owner stops answering; writes wait on its connection.
    let pid = a.child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let stopped_at = Instant::now();
    let stale = pattern(0xEE);
    let queued = std::thread::spawn(move || {
        // Fails (timeout, or an error once the fenced gateway resumes): never succeeds.
        through_a.write(NAMESPACE, 0, &stale, true)
    });
    await_state(at_b, AnaState::Optimized, Duration::from_secs(20));
    eprintln!("takeover {:.1} s after SIGSTOP (lease {LEASE_MS} ms)", stopped_at.elapsed().as_secs_f64());
    let second = pattern(0x22);
    through_b.write(NAMESPACE, 0, &second, true).expect("write through the new owner");

    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    let outcome = queued.join().expect("writer thread");
    assert!(outcome.is_err(), "a write queued on the fenced gateway must not succeed");
    await_state(at_a, AnaState::Inaccessible, Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(1));
    let read = through_b.read(NAMESPACE, 0, BLOCKS).expect("read through the new owner");
    assert!(read == second, "a write queued on the fenced gateway landed after the takeover");

    // The fenced gateway is restarted: it rejoins and gets its group back.
    drop(a);
    let a = group.start(0);
    await_state(at_a, AnaState::Optimized, Duration::from_secs(20));
    await_state(at_b, AnaState::NonOptimized, Duration::from_secs(5));
    let again = connect(at_a);
    assert!(again.read(NAMESPACE, 0, BLOCKS).unwrap() == second, "the data survives the failback");
    let status = support::sluice(&["gateway", "status", "--socket", group.dir.join("0.sock").to_str().unwrap()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "gateway status: {}", String::from_utf8_lossy(&status.stderr));
    assert!(text.contains("optimized") && text.contains("non-optimized") && text.contains("held"), "{text}");
    drop(a);
}

#[test]
fn a_conflicting_namespace_identity_is_refused_naming_both_gateways() {
    if !ceph_cluster_given("gateway identity conflict") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let group = Group::new("conflict");
    let _a = group.start(0);
    // b describes the same image as namespace 2.
    let config = group.config(1, 2);
    let child = Command::new(support::SLUICE)
        .args(["serve", "--no-rpc-socket", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gateway b");
    let output = wait_bounded(child, Duration::from_secs(60)).expect("gateway b exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "b must refuse to start: {stderr}");
    assert!(stderr.contains("gateway a serves it as") && stderr.contains("gateway b (this one)") && stderr.contains("nsid=2"), "{stderr}");
}

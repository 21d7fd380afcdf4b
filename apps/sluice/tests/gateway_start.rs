//! Gateways of one group started at the same moment, as systemd starts them at boot,
//! with the group's configuration kept in the cluster (`config = "cluster"`) and none
//! there yet. Gateway a's file holds the group's part and seeds the group; gateway
//! b's holds only its own part, so b must wait for a's seed rather than exit. Both
//! come up as one group: one configuration version, a's ANA group optimized on a and
//! non-optimized on b, the namespace served through both.
//!
//! Started at the very same moment, b may or may not find the group empty; so the
//! test then also starts b alone on an emptied group and a only once b says it waits,
//! which always takes the waiting path. Needs the Ceph cluster at `CEPH_CONF`.

mod support;

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::ana::{AnaLog, AnaState};
use nvme_spec::log_page::log_id;
use nvme_spec::NamespaceId;
use support::{ceph_cluster_given, free_port, scratch_dir, wait_bounded, wait_until_ready, ServeProcess, SLUICE};

const NQN: &str = "nqn.2026-11.io.sluice:start-test";
const NAMESPACE: NamespaceId = NamespaceId(1);
/// Short leases keep the test quick.
const LEASE_MS: u64 = 3000;
/// What b logs while it waits for the group's configuration to be seeded.
const WAITING: &str = "waiting for the member that seeds it";
/// What b logs once the configuration it waited for is there.
const FOUND: &str = "found the group's configuration";

/// Two members, "a" (whose file seeds the group) and "b" (its own part only).
struct Group {
    dir: PathBuf,
    group: String,
    image: String,
    ports: [u16; 2],
}

impl Group {
    fn new() -> Group {
        let name = format!("sluice-gw-start-{}", std::process::id());
        Group { dir: scratch_dir("gateway-start"), group: name.clone(), image: name, ports: [free_port(), free_port()] }
    }

    fn address(&self, member: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[member]))
    }

    fn socket(&self, member: usize) -> PathBuf {
        self.dir.join(format!("{member}.sock"))
    }

    fn log(&self, member: usize) -> PathBuf {
        self.dir.join(format!("{member}.log"))
    }

    /// Member `member`'s config file: a's whole (its group part seeds an empty
    /// group), b's own part only.
    fn config(&self, member: usize) -> PathBuf {
        let name = ["a", "b"][member];
        let own = format!(
            r#"[[listener]]
address = "127.0.0.1:{port}"

[gateway]
name = "{name}"
group = "{group}"
op_timeout_ms = 5000
config = "cluster"
"#,
            port = self.ports[member],
            group = self.group,
        );
        let group_part = format!(
            r#"lease_ms = {LEASE_MS}

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
block_size = 4096
op_timeout_ms = 5000

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
device = "shared"
ana_group = 1
"#,
            port_a = self.ports[0],
            port_b = self.ports[1],
            image = self.image,
        );
        let group_part = if member == 0 { group_part.as_str() } else { "" };
        let path = self.dir.join(format!("gateway-{name}.toml"));
        std::fs::write(&path, format!("{own}{group_part}\n[runtime]\nthreads = 1\n")).expect("write gateway config");
        path
    }

    /// Starts `sluice serve` for member `member` without waiting for it; its log
    /// (info level) goes to [`Group::log`].
    fn spawn(&self, member: usize) -> Child {
        let config = self.config(member);
        Command::new(SLUICE)
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--rpc-socket")
            .arg(self.socket(member))
            .env("SLUICE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(self.log(member)).expect("create log"))
            .spawn()
            .expect("spawn sluice serve")
    }

    /// Waits until `child` (member `member`) is ready.
    fn ready(&self, member: usize, child: Child) -> ServeProcess {
        match wait_until_ready(child) {
            Some((child, stdout_lines)) => ServeProcess { child, stdout_lines },
            None => panic!("gateway {member} did not start; its log:\n{}", self.log_text(member)),
        }
    }

    fn log_text(&self, member: usize) -> String {
        std::fs::read_to_string(self.log(member)).unwrap_or_default()
    }

    /// Removes the group's configuration from the cluster (the group is empty again).
    fn forget_configuration(&self) {
        let object = format!("sluice.config.{}", self.group);
        let status = Command::new("rados").args(["-p", "rbd", "rm", &object]).status().expect("run rados");
        assert!(status.success(), "rados rm {object}");
    }

    /// `sluice gateway status` of member `member`.
    fn status(&self, member: usize) -> String {
        let output = support::sluice(&["gateway", "status", "--socket", self.socket(member).to_str().unwrap()]);
        assert!(output.status.success(), "gateway status of {member}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Both members serve one group: one configuration version, the ANA group
    /// optimized on a (its preferred member) and non-optimized on b, the namespace
    /// reachable through both.
    fn assert_one_group(&self) {
        await_state(self.address(0), AnaState::Optimized);
        await_state(self.address(1), AnaState::NonOptimized);
        for member in 0..2 {
            let status = self.status(member);
            assert!(status.contains("group configuration: cluster, version 1"), "member {member}: {status}");
            let controller = connect(self.address(member));
            assert!(controller.identify_namespace(NAMESPACE).is_ok(), "member {member} serves the namespace");
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("rados")
            .args(["-p", "rbd", "rm", &format!("sluice.config.{}", self.group)])
            .stderr(Stdio::null())
            .status();
        // Retried while a gateway that just stopped still holds the image.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let child = Command::new("rbd")
                .args(["rm", "--no-progress", &format!("rbd/{}", self.image)])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run rbd");
            match wait_bounded(child, Duration::from_secs(60)) {
                Some(output)
                    if output.status.success() || String::from_utf8_lossy(&output.stderr).contains("No such") =>
                {
                    return
                }
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

/// The state of ANA group 1 at `address`, as a host reads it; `None` when the
/// gateway does not answer.
fn group_state(address: SocketAddr) -> Option<AnaState> {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 0;
    options.connect_timeout = Duration::from_secs(2);
    options.command_timeout = Duration::from_secs(2);
    options.controller_loss_timeout = Duration::ZERO;
    let controller = Controller::connect(options).ok()?;
    let data = controller.get_log_page(log_id::ASYMMETRIC_NAMESPACE_ACCESS, NamespaceId::BROADCAST, 0, 4096).ok()?;
    let log = AnaLog::decode(&data).expect("a well-formed ANA log");
    log.groups.first().map(|group| group.descriptor.state)
}

/// Polls until `address` reports `state` for ANA group 1 (within 15 s).
fn await_state(address: SocketAddr, state: AnaState) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = group_state(address);
        if now == Some(state) {
            return;
        }
        assert!(Instant::now() < deadline, "{address} reports {now:?}, not {state:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `path` contains `text` (within `limit`).
fn await_log(path: &Path, text: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(text) {
            return;
        }
        assert!(Instant::now() < deadline, "{} does not say {text:?} after {limit:?}:\n{log}", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn gateways_started_at_the_same_moment_come_up_as_one_group() {
    if !ceph_cluster_given("gateways started at the same moment") {
        return;
    }
    let group = Group::new();

    // The same moment: b (own part only) and a (which seeds) spawned together.
    let (b, a) = (group.spawn(1), group.spawn(0));
    let (b, a) = (group.ready(1, b), group.ready(0, a));
    group.assert_one_group();
    eprintln!(
        "started together: b {}",
        if group.log_text(1).contains(WAITING) { "waited for a's seed" } else { "found a's seed at once" }
    );
    drop((a, b));

    // b first on an emptied group: it waits (and says so) until a, started once b
    // waits, seeds the group.
    group.forget_configuration();
    let b = group.spawn(1);
    await_log(&group.log(1), WAITING, Duration::from_secs(20));
    let a = group.spawn(0);
    let (a, b) = (group.ready(0, a), group.ready(1, b));
    await_log(&group.log(1), FOUND, Duration::from_secs(1));
    group.assert_one_group();
    drop((a, b));
}

//! `sluice serve` with namespaces on Ceph RBD images, end to end over NVMe/TCP, against
//! the cluster at `CEPH_CONF` (scripts/test.sh starts one and sets
//! `SLUICE_REQUIRE_CEPH`, which turns "skipped" into a failure):
//! - 64 MiB written through Sluice read back identical, equal `rbd export` of the
//!   image, and read back identical again after SIGKILL of the target and a restart;
//! - with the OSD stalled (SIGSTOP: it neither answers nor closes its connections),
//!   reads and writes of the RBD namespace fail with Namespace Not Ready within the
//!   configured op timeout, a RAM namespace of the same controller keeps working,
//!   `sluice backend list` shows the errors, and after SIGCONT the same namespace
//!   serves again without restarting Sluice.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use support::{on_a_free_port, scratch_dir, ServeProcess, SLUICE};

const NQN: &str = "nqn.2026-11.io.sluice:rbd-test";
const BLOCK_BYTES: usize = 4096;
/// Bytes per write or read command.
const CHUNK_BYTES: usize = 256 * 1024;
const RBD_NAMESPACE: NamespaceId = NamespaceId(1);
const RAM_NAMESPACE: NamespaceId = NamespaceId(2);

/// Whether a cluster is given; panics when the test command promised one.
fn cluster_given(test: &str) -> bool {
    if std::env::var_os("CEPH_CONF").is_some() {
        return true;
    }
    assert!(
        std::env::var_os("SLUICE_REQUIRE_CEPH").is_none(),
        "{test}: SLUICE_REQUIRE_CEPH is set but CEPH_CONF is not: the test command must start a Ceph cluster \
         (scripts/test.sh does, with ../shared/ceph-single-node.sh)"
    );
    eprintln!("{test}: skipped: no Ceph cluster (set CEPH_CONF; ../shared/ceph-single-node.sh up DIR starts one)");
    false
}

/// An image name no other run uses.
fn image_name(test: &str) -> String {
    format!("sluice-test-{test}-{}", std::process::id())
}

/// `rbd ARGS` against $CEPH_CONF; its status and stderr.
fn rbd(args: &[&str]) -> (bool, String) {
    let output = Command::new("rbd").args(args).stdin(Stdio::null()).output().expect("run the rbd tool");
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Removes the image when dropped (best effort: a killed opener's watch lingers).
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = rbd(&["rm", "--no-progress", &format!("rbd/{}", self.0)]);
    }
}

/// A config with the RBD namespace 1 (and a 16 MiB RAM namespace 2) on `port`.
fn write_config(dir: &Path, port: u16, image: &str, size_mib: u64, op_timeout_ms: u64) -> PathBuf {
    let path = dir.join("sluice.toml");
    let text = format!(
        r#"[[listener]]
address = "127.0.0.1:{port}"

[[backend]]
name = "image"
kind = "rbd"
pool = "rbd"
image = "{image}"
size = "{size_mib}MiB"
block_size = {BLOCK_BYTES}
op_timeout_ms = {op_timeout_ms}

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
device = "image"

[[subsystem.namespace]]
nsid = 2
backend = "ram"
size = "16MiB"
block_size = {BLOCK_BYTES}

[runtime]
threads = 1
"#
    );
    std::fs::write(&path, text).expect("write config");
    path
}

/// Starts the target on a free port; returns it and its port.
fn start(dir: &Path, image: &str, size_mib: u64, op_timeout_ms: u64) -> (ServeProcess, u16) {
    let socket = dir.join("sluice.sock");
    on_a_free_port(|port| {
        let config = write_config(dir, port, image, size_mib, op_timeout_ms);
        let socket = socket.to_str().expect("a UTF-8 path");
        ServeProcess::start(&config, &["--rpc-socket", socket]).map(|serve| (serve, port))
    })
}

fn connect(port: u16, command_timeout: Duration) -> Controller {
    let mut options = ConnectOptions::new(format!("127.0.0.1:{port}").parse().unwrap(), NQN);
    options.io_queues = 1;
    options.command_timeout = command_timeout;
    Controller::connect(options).expect("connect to sluice serve")
}

/// Deterministic bytes (splitmix64 of the offset): any misplaced chunk shows.
fn pattern(bytes: usize) -> Vec<u8> {
    (0..bytes / 8)
        .flat_map(|word| {
            let mut z = (word as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)).to_le_bytes()
        })
        .collect()
}

fn read_all(controller: &Controller, bytes: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(bytes);
    for offset in (0..bytes).step_by(CHUNK_BYTES) {
        let chunk = controller
            .read(RBD_NAMESPACE, (offset / BLOCK_BYTES) as u64, (CHUNK_BYTES / BLOCK_BYTES) as u32)
            .expect("read a chunk");
        data.extend_from_slice(&chunk);
    }
    data
}

/// The first differing byte offset, for a readable failure.
fn first_difference(left: &[u8], right: &[u8]) -> Option<usize> {
    left.iter().zip(right).position(|(a, b)| a != b).or((left.len() != right.len()).then_some(left.len().min(right.len())))
}

#[test]
fn sixty_four_mib_round_trip_equals_rbd_export_and_survives_sigkill() {
    if !cluster_given("sixty_four_mib_round_trip_equals_rbd_export_and_survives_sigkill") {
        return;
    }
    const MIB: u64 = 64;
    let bytes = (MIB << 20) as usize;
    let dir = scratch_dir("rbd-round-trip");
    let image = image_name("round-trip");
    let _guard = ImageGuard(image.clone());
    let (mut serve, port) = start(&dir, &image, MIB, 20_000);

    let data = pattern(bytes);
    let controller = connect(port, Duration::from_secs(30));
    for (index, chunk) in data.chunks(CHUNK_BYTES).enumerate() {
        let lba = (index * CHUNK_BYTES / BLOCK_BYTES) as u64;
        controller.write(RBD_NAMESPACE, lba, chunk, false).expect("write a chunk");
    }
    controller.flush(RBD_NAMESPACE).expect("flush");
    let back = read_all(&controller, bytes);
    assert_eq!(first_difference(&back, &data), None, "read back differs from what was written");

    let exported = dir.join("export.img");
    let (ok, stderr) = rbd(&["export", "--no-progress", &format!("rbd/{image}"), exported.to_str().unwrap()]);
    assert!(ok, "rbd export failed: {stderr}");
    let exported = std::fs::read(&exported).expect("read the export");
    assert_eq!(first_difference(&exported, &data), None, "rbd export differs from what was written");

    // SIGKILL: no flush, no close; the image's lock owner is gone without a word.
    drop(controller);
    let _ = serve.child.kill();
    let _ = serve.child.wait();
    std::mem::forget(serve); // its Drop would signal a pid that no longer exists
    let (_serve, port) = start(&dir, &image, MIB, 20_000);
    let controller = connect(port, Duration::from_secs(30));
    let back = read_all(&controller, bytes);
    assert_eq!(first_difference(&back, &data), None, "data differs after SIGKILL and restart");
}

/// The OSD of the one-node cluster, stopped with SIGSTOP for the guard's life and
/// continued (SIGCONT) when it drops, also when the test panics: SIGKILL would lose
/// the memstore's data, SIGSTOP only makes it silent.
struct StalledOsd(u32);

impl StalledOsd {
    fn stop() -> StalledOsd {
        let dir = PathBuf::from(std::env::var_os("CEPH_DIR").expect("CEPH_DIR (set with CEPH_CONF by ceph-single-node.sh)"));
        let pid_file = dir.join("pids/osd.0");
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|error| panic!("read {}: {error}", pid_file.display()))
            .trim()
            .parse()
            .expect("a pid");
        signal(pid, "STOP");
        StalledOsd(pid)
    }
}

impl Drop for StalledOsd {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status().expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
}

#[test]
fn a_stalled_osd_fails_io_within_the_op_timeout_and_io_resumes_after() {
    if !cluster_given("a_stalled_osd_fails_io_within_the_op_timeout_and_io_resumes_after") {
        return;
    }
    if std::env::var_os("CEPH_DIR").is_none() {
        assert!(std::env::var_os("SLUICE_REQUIRE_CEPH").is_none(), "CEPH_DIR is needed to stall the OSD");
        eprintln!("skipped: CEPH_DIR is not set (the OSD to stall is unknown)");
        return;
    }
    const OP_TIMEOUT: Duration = Duration::from_secs(3);
    // The host waits longer than the target's op timeout, so the status it sees is
    // the target's answer, not its own timeout.
    const HOST_TIMEOUT: Duration = Duration::from_secs(30);
    let dir = scratch_dir("rbd-stalled-osd");
    let image = image_name("stalled-osd");
    let _guard = ImageGuard(image.clone());
    let (_serve, port) = start(&dir, &image, 8, OP_TIMEOUT.as_millis() as u64);
    let controller = connect(port, HOST_TIMEOUT);
    let before = pattern(CHUNK_BYTES);
    controller.write(RBD_NAMESPACE, 0, &before, true).expect("write before the stall");

    {
        let _stalled = StalledOsd::stop();
        for (what, result) in [
            ("read", controller.read(RBD_NAMESPACE, 0, 1).map(|_| ())),
            ("write", controller.write(RBD_NAMESPACE, 256, &before[..BLOCK_BYTES], false)),
        ] {
            let started = Instant::now();
            let error = result.expect_err(&format!("a {what} with the OSD stalled must fail"));
            let took = started.elapsed();
            eprintln!("{what} with the OSD stalled failed after {:.1} s: {error}", took.as_secs_f64());
            assert!(
                error.to_string().to_lowercase().contains("namespace not ready"),
                "{what}: expected Namespace Not Ready, got: {error}"
            );
            // Generous slack: the cluster op timeout is checked on librados' timer.
            assert!(took < OP_TIMEOUT + Duration::from_secs(10), "{what} failed only after {took:?}");
        }
        // The other namespace of the same controller does not wait for the cluster.
        controller.write(RAM_NAMESPACE, 0, &before, false).expect("RAM namespace write during the stall");
        let ram = controller.read(RAM_NAMESPACE, 0, (CHUNK_BYTES / BLOCK_BYTES) as u32).expect("RAM read");
        assert_eq!(first_difference(&ram, &before), None, "RAM namespace data during the stall");

        let socket = dir.join("sluice.sock");
        let output = Command::new(SLUICE)
            .args(["backend", "list", "--socket"])
            .arg(&socket)
            .output()
            .expect("run sluice backend list");
        let listing = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "backend list: {}", String::from_utf8_lossy(&output.stderr));
        assert!(listing.contains(&format!("rbd:rbd/{image}")), "backend list names the image: {listing}");
        assert!(listing.contains("errors"), "backend list shows the failures: {listing}");
    }

    // The OSD is back: the same namespace serves again, without a restart of Sluice.
    let deadline = Instant::now() + Duration::from_secs(60);
    let back = loop {
        match controller.read(RBD_NAMESPACE, 0, (CHUNK_BYTES / BLOCK_BYTES) as u32) {
            Ok(data) => break data,
            Err(error) => {
                assert!(Instant::now() < deadline, "reads still fail 60 s after the OSD resumed: {error}");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    };
    assert_eq!(first_difference(&back, &before), None, "the data written before the stall");
    controller.write(RBD_NAMESPACE, 256, &before[..BLOCK_BYTES], false).expect("a write after the OSD resumed");
}

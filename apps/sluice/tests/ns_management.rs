//! The namespace subcommands end to end: the built `sluice` binary (create-ns,
//! attach-ns, list-ctrl, detach-ns, delete-ns) against the real target on the
//! io_uring runtime, in-process, with a subsystem backed by a 64 MiB RAM pool. A
//! second host, connected through the host library, stands in for a kernel host: it
//! must hear about namespaces attached to it (asynchronous event) without
//! reconnecting. Every wait is bounded.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use nvme_target::{HostAccess, ListenerSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use serde_json::Value;
use storage::{Backend, Geometry, Pool, RamBackend, TableStore};
use target_server::LoopbackTarget;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const POOL_NQN: &str = "nqn.2026-11.io.sluice:ns-pool";
const PLAIN_NQN: &str = "nqn.2026-11.io.sluice:ns-plain";
/// The host the CLI connects as.
const CLI_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000c11a";
/// A host that stays connected, like a kernel host would.
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000b0b0";
const BLOCK_BYTES: u32 = 512;
const POOL_BYTES: u64 = 64 << 20;
/// Longest any one `sluice` invocation may take.
const COMMAND_DEADLINE: Duration = Duration::from_secs(60);

/// The target: a pool subsystem (no configured namespaces) and one without a pool.
struct TestTarget {
    target: LoopbackTarget,
    pool: Arc<Pool>,
}

impl TestTarget {
    fn start() -> TestTarget {
        let pool_backend: Arc<dyn Backend> = RamBackend::new(Geometry {
            block_size_bytes: BLOCK_BYTES,
            block_count: POOL_BYTES / u64::from(BLOCK_BYTES),
        });
        let pool = Arc::new(Pool::open(pool_backend, TableStore::memory()).expect("pool"));
        let plain: Arc<dyn Backend> = RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: 2048 });
        // Port 0: the runtime binds a free port and reports it (the discovery log,
        // which would show 0, is not used here).
        let target = Target::new(TargetSpec {
            listeners: vec![ListenerSpec::tcp("127.0.0.1", 0)],
            subsystems: vec![
                SubsystemSpec {
                    nqn: POOL_NQN.into(),
                    serial_number: None,
                    model_number: None,
                    namespaces: Vec::new(),
                    pool: Some(Arc::clone(&pool)),
                    hosts: HostAccess::only(&[CLI_HOST, OTHER_HOST]),
                },
                SubsystemSpec {
                    nqn: PLAIN_NQN.into(),
                    serial_number: None,
                    model_number: None,
                    namespaces: vec![nvme_target::NamespaceSpec {
                        id: NamespaceId(1),
                        backend: Arc::clone(&plain),
                        nguid: None,
                        uuid: None,
                        ana_group: None,
                    }],
                    pool: None,
                    hosts: HostAccess::only(&[CLI_HOST]),
                },
            ],
            settings: TargetSettings::default(),
        })
        .expect("target");
        let target = LoopbackTarget::start(target, 0, 1).expect("the target starts");
        TestTarget { target, pool }
    }

    /// `-a 127.0.0.1 -s PORT -n NQN -q CLI_HOST`.
    fn args(&self, nqn: &str) -> Vec<String> {
        [
            "-a",
            "127.0.0.1",
            "-s",
            &self.target.address().port().to_string(),
            "-n",
            nqn,
            "-q",
            CLI_HOST,
            "--timeout",
            "20000",
        ]
        .map(String::from)
        .to_vec()
    }

    /// A host that stays connected with a short keep-alive (so an asynchronous event
    /// is read within half a second).
    fn connect_other_host(&self) -> Controller {
        let mut options = ConnectOptions::new(self.target.address(), POOL_NQN);
        options.host_nqn = OTHER_HOST.into();
        options.io_queues = 1;
        options.keep_alive_timeout_ms = 1000;
        options.command_timeout = Duration::from_secs(10);
        options.connect_timeout = Duration::from_secs(5);
        Controller::connect(options).expect("the other host connects")
    }
}

/// Runs `sluice SUBCOMMAND TARGET-ARGS EXTRA` with a deadline.
fn sluice(subcommand: &str, target_args: &[String], extra: &[&str]) -> Output {
    let mut child = Command::new(SLUICE)
        .arg(subcommand)
        .args(target_args)
        .args(extra)
        .env_remove("SLUICE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let deadline = Instant::now() + COMMAND_DEADLINE;
    while child.try_wait().expect("wait for sluice").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sluice {subcommand} {extra:?} took more than {COMMAND_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("sluice output")
}

/// Stdout of a successful run.
fn ok(subcommand: &str, target_args: &[String], extra: &[&str]) -> String {
    let output = sluice(subcommand, target_args, extra);
    assert!(
        output.status.success(),
        "sluice {subcommand} {extra:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

fn ok_json(subcommand: &str, target_args: &[String], extra: &[&str]) -> Value {
    let mut extra = extra.to_vec();
    extra.extend(["-o", "json"]);
    let text = ok(subcommand, target_args, &extra);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("not JSON ({error}): {text}"))
}

/// Asserts a failure with exit `code` whose stderr has every one of `needles`.
fn assert_fails(output: &Output, code: i32, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "stderr lacks {needle:?}: {stderr}");
    }
}

fn active(target_args: &[String]) -> Vec<u64> {
    let json = ok_json("list-ns", target_args, &[]);
    json["nsid_list"].as_array().expect("nsid_list").iter().map(|entry| entry["nsid"].as_u64().unwrap()).collect()
}

fn unallocated_bytes(target_args: &[String]) -> u64 {
    ok_json("id-ctrl", target_args, &[])["unvmcap"].as_u64().expect("unvmcap")
}

/// Waits (at most 10 s) until `host` has been told about `nsid` and lists it as
/// active (or, with `attached` false, no longer lists it).
fn await_notice(host: &Controller, nsid: u32, attached: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut told = false;
    loop {
        told |= host.take_namespace_changes().contains(&NamespaceId(nsid));
        let listed = host.active_namespaces().expect("active namespaces").contains(&NamespaceId(nsid));
        if told && listed == attached {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after 10 s: notice for namespace {nsid} received: {told}, listed: {listed}, expected listed: {attached}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn create_attach_list_detach_delete() {
    let target = TestTarget::start();
    let cli = target.args(POOL_NQN);
    let other = target.connect_other_host();
    let other_id = other.controller_id().0;
    assert_eq!(unallocated_bytes(&cli), POOL_BYTES);

    // Three namespaces: 8 MiB thick by --flbas, 4 MiB thick by --block-size, and a
    // 16 MiB thin one (NCAP below NSZE) in JSON.
    assert_eq!(ok("create-ns", &cli, &["--nsze", "16384", "-f", "0"]), "create-ns: Success, created nsid:1\n");
    assert_eq!(
        ok("create-ns", &cli, &["--nsze", "8192", "--ncap", "8192", "-b", "512"]),
        "create-ns: Success, created nsid:2\n"
    );
    let json = ok_json("create-ns", &cli, &["--nsze", "0x8000", "-c", "2048"]);
    assert_eq!(
        (json["nsid"].as_u64(), json["nsze"].as_u64(), json["ncap"].as_u64()),
        (Some(3), Some(32768), Some(2048))
    );
    assert_eq!(json["result"], "success");
    assert_eq!(unallocated_bytes(&cli), POOL_BYTES - (12 << 20), "the thick ones take their space at create");
    assert!(active(&cli).is_empty(), "a new namespace is attached to nobody");

    // No -c: attached to the CLI's own host NQN, which then sees it on every connect.
    let output = sluice("attach-ns", &cli, &["-N", "1"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "attach-ns: Success, nsid:1\n");
    assert!(String::from_utf8_lossy(&output.stderr).contains(CLI_HOST), "names the host NQN it attached to");
    assert_eq!(active(&cli), [1]);

    // Attach 2 and 3 to the other host's controller: it is told, the CLI's host is not
    // given them.
    assert_eq!(ok("attach-ns", &cli, &["-N", "2", "-c", &other_id.to_string()]), "attach-ns: Success, nsid:2\n");
    await_notice(&other, 2, true);
    let json = ok_json("attach-ns", &cli, &["-N", "3", "--controllers", &format!("{other_id:#x}")]);
    assert_eq!(json["controllers"], serde_json::json!([other_id]));
    await_notice(&other, 3, true);
    assert_eq!(active(&cli), [1]);
    // The other host reads and writes its new namespace at once.
    let data: Vec<u8> = (0..4096u32).map(|index| (index * 7 % 251) as u8).collect();
    other.write(NamespaceId(2), 100, &data, false).expect("write to the attached namespace");
    assert_eq!(other.read(NamespaceId(2), 100, 8).expect("read it back"), data);

    // list-ctrl: the subsystem's controllers (the other host's and the CLI's own), and
    // those of one namespace.
    let json = ok_json("list-ctrl", &cli, &[]);
    let all: Vec<u64> =
        json["ctrl_list"].as_array().unwrap().iter().map(|entry| entry["ctrl_id"].as_u64().unwrap()).collect();
    assert_eq!(json["num_ctrl"].as_u64(), Some(all.len() as u64));
    assert!(all.contains(&u64::from(other_id)), "{json}");
    assert!(all.contains(&json["this_ctrl_id"].as_u64().unwrap()), "{json}");
    let text = ok("list-ctrl", &cli, &["-N", "2"]);
    assert_eq!(text, format!("num of ctrls present: 1\n[   0]:{other_id:#x}\n"));

    // Detach 2 from the other host: told, gone.
    assert_eq!(ok("detach-ns", &cli, &["-N", "2", "-c", &other_id.to_string()]), "detach-ns: Success, nsid:2\n");
    await_notice(&other, 2, false);
    assert_eq!(ok("list-ctrl", &cli, &["-N", "2"]), "num of ctrls present: 0\n");

    // Delete all three (3 while still attached: its host is told and loses it); the
    // space returns to the pool once nothing holds the namespaces.
    assert_eq!(ok("delete-ns", &cli, &["-N", "1"]), "delete-ns: Success, deleted nsid:1\n");
    assert_eq!(ok("delete-ns", &cli, &["-N", "2"]), "delete-ns: Success, deleted nsid:2\n");
    assert_eq!(ok_json("delete-ns", &cli, &["-N", "3"])["nsid"].as_u64(), Some(3));
    await_notice(&other, 3, false);
    assert!(active(&cli).is_empty());
    let deadline = Instant::now() + Duration::from_secs(10);
    while target.pool.free_bytes() != POOL_BYTES {
        assert!(Instant::now() < deadline, "the deleted namespaces' space never returned to the pool");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(unallocated_bytes(&cli), POOL_BYTES);
    other.disconnect().expect("the other host disconnects");
}

#[test]
fn refusals_name_the_status_and_what_it_means() {
    let target = TestTarget::start();
    let cli = target.args(POOL_NQN);

    // Too big for the pool: exit 1, the status, its meaning, and the numbers.
    let output = sluice("create-ns", &cli, &["--nsze", &(POOL_BYTES / 512 + 2048).to_string()]);
    assert_fails(
        &output,
        1,
        &[
            "create-ns failed: Namespace Insufficient Capacity (SCT 0x1 SC 0x15, DNR)",
            "the pool has not enough free space",
            "64.00 MiB unallocated, the namespace needs 65.00 MiB",
        ],
    );
    assert!(output.stdout.is_empty());

    // Usage errors cost no connection: exit 2.
    assert_fails(
        &sluice("create-ns", &cli, &["--nsze", "100", "--ncap", "200"]),
        2,
        &["--ncap must be between 1 and --nsze"],
    );
    assert_fails(&sluice("create-ns", &cli, &["--nsze", "100", "-b", "1000"]), 2, &["not a power of two"]);
    assert_fails(&sluice("create-ns", &cli, &["--nsze", "100", "-f", "0", "-b", "512"]), 2, &["cannot be used with"]);
    assert_fails(&sluice("create-ns", &cli, &["-c", "100"]), 2, &["--nsze"]);
    assert_fails(&sluice("attach-ns", &cli, &["-N", "0xffffffff"]), 2, &["must name one namespace"]);
    // No such format: the target offers 512-byte blocks only.
    assert_fails(
        &sluice("create-ns", &cli, &["--nsze", "100", "-b", "4096"]),
        2,
        &["no LBA format with 4096-byte blocks", "512 bytes"],
    );
    assert_fails(&sluice("create-ns", &cli, &["--nsze", "100", "-f", "1"]), 1, &["Invalid Format", "format 0"]);

    assert_eq!(ok("create-ns", &cli, &["--nsze", "2048"]), "create-ns: Success, created nsid:1\n");
    assert_fails(
        &sluice("detach-ns", &cli, &["-N", "1"]),
        1,
        &["detach-ns failed: Namespace Not Attached", "list-ctrl -N 1"],
    );
    assert_fails(
        &sluice("attach-ns", &cli, &["-N", "1", "-c", "0x7fff"]),
        1,
        &["attach-ns failed: Controller List Invalid", "not a controller of this subsystem"],
    );
    assert!(ok("attach-ns", &cli, &["-N", "1"]).starts_with("attach-ns: Success"));
    assert_fails(&sluice("attach-ns", &cli, &["-N", "1"]), 1, &["Namespace Already Attached", "per host NQN"]);
    assert_fails(
        &sluice("delete-ns", &cli, &["-N", "9"]),
        1,
        &["delete-ns failed: Invalid Namespace or Format", "namespace 9 does not exist"],
    );
    assert_fails(&sluice("attach-ns", &cli, &["-N", "9"]), 1, &["Invalid Namespace or Format"]);
    assert!(ok("delete-ns", &cli, &["-N", "1"]).contains("deleted nsid:1"));

    // A subsystem without a pool has no Namespace Management.
    let plain = target.args(PLAIN_NQN);
    assert_fails(&sluice("create-ns", &plain, &["--nsze", "8"]), 1, &["Invalid Command Opcode", "no storage pool"]);
    assert_fails(&sluice("delete-ns", &plain, &["-N", "1"]), 1, &["Invalid Command Opcode"]);
    // Controller lists come with Namespace Management.
    assert_fails(
        &sluice("list-ctrl", &plain, &[]),
        1,
        &["Invalid Field in Command", "does not report controller lists"],
    );
}

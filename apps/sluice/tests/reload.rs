//! SIGHUP end to end: `sluice serve` with a config file and a management socket, a
//! host connected over loopback; the file is edited by hand and SIGHUP applies it
//! without the host reconnecting. A broken edit keeps the old state and logs why.
//! The service manager's notifications (READY, RELOADING, STOPPING) reach a
//! datagram socket the test binds. Every wait is bounded.

mod support;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use serde_json::Value;

use support::{await_namespace_notice, scratch_dir, ManagedServer, ServeSetup, BASE, SLUICE};

const ADDED: &str = "nqn.2026-11.io.sluice:added";
/// Longest a reload may take to show (it builds RAM backends; seconds is generous).
const RELOAD_DEADLINE: Duration = Duration::from_secs(20);

/// `sluice serve` on a [`support::managed_config`] file with its stderr in a file the
/// test reads (the reload log), and `notify` as its NOTIFY_SOCKET (never the runner's).
fn start(dir: &Path, notify: Option<&Path>) -> ManagedServer {
    let env = [("NOTIFY_SOCKET", notify.map(Path::as_os_str))];
    ManagedServer::start(dir, &ServeSetup { log_level: "info", stderr_to_file: true, env: &env })
}

impl ManagedServer {
    /// Waits until the log contains `needle` `count` times.
    fn wait_for_log(&self, needle: &str, count: usize) -> String {
        let deadline = Instant::now() + RELOAD_DEADLINE;
        loop {
            let log = self.log();
            if log.matches(needle).count() >= count {
                return log;
            }
            assert!(Instant::now() < deadline, "no {needle:?} (x{count}) in the log:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `sluice ARGS -o json --socket SOCKET`, which must succeed.
    fn json(&self, args: &[&str]) -> Value {
        let output = Command::new(SLUICE)
            .args(args)
            .args(["-o", "json", "--socket"])
            .arg(self.socket())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(output.status.success(), "sluice {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).expect("JSON output")
    }

    fn connect(&self, nqn: &str) -> Controller {
        let mut options = ConnectOptions::new(([127, 0, 0, 1], self.port).into(), nqn);
        options.io_queues = 1;
        options.command_timeout = Duration::from_secs(5);
        // The client reads its admin queue (and so hears of notices) at every
        // keep-alive, KATO/2.
        options.keep_alive_timeout_ms = 2_000;
        Controller::connect(options).unwrap_or_else(|error| panic!("connect to {nqn}: {error}"))
    }
}

fn namespace_ids(list: &Value) -> Vec<u64> {
    list["namespaces"].as_array().unwrap().iter().map(|namespace| namespace["nsid"].as_u64().unwrap()).collect()
}

#[test]
fn sighup_applies_an_edited_file_and_refuses_a_broken_one() {
    let dir = scratch_dir("reload");
    let server = start(&dir, None);
    let host = server.connect(BASE);
    assert_eq!(host.active_namespaces().unwrap(), [NamespaceId(1)]);

    // By hand: namespace 2 over the named backend nothing used at start, and a new
    // subsystem with a namespace.
    let original = std::fs::read_to_string(server.config()).unwrap();
    let edited = original.replace(
        "[runtime]",
        &format!(
            "[[subsystem.namespace]]\nnsid = 2\ndevice = \"spare\"\n\n\
             [[subsystem]]\nnqn = \"{ADDED}\"\nallow_any_host = true\n\n\
             [[subsystem.namespace]]\nbackend = \"null\"\nsize = \"4MiB\"\n\n[runtime]"
        ),
    );
    std::fs::write(server.config(), &edited).unwrap();
    server.signal("HUP");
    server.wait_for_log("reloaded: 2 change(s) applied, 0 need a restart, 0 failed", 1);

    // The connected host hears of namespace 2 and sees it, without reconnecting.
    await_namespace_notice(&host, NamespaceId(2));
    assert_eq!(host.active_namespaces().unwrap(), [NamespaceId(1), NamespaceId(2)]);
    let added = server.connect(ADDED);
    assert_eq!(added.active_namespaces().unwrap(), [NamespaceId(1)]);
    drop(added);
    let backends = server.json(&["backend", "list"]);
    let spare = &backends["backends"][0];
    assert_eq!((spare["name"].as_str(), spare["open"].as_bool()), (Some("spare"), Some(true)), "{backends}");
    assert_eq!(spare["namespace"]["nsid"], 2, "{backends}");

    // A broken edit: the reason is logged with the file and line; nothing changes.
    std::fs::write(server.config(), format!("{edited}\n[[subsystem.namespace]\n")).unwrap();
    server.signal("HUP");
    let log = server.wait_for_log("reload refused", 1);
    let line = log.lines().find(|line| line.contains("reload refused")).unwrap();
    assert!(line.contains("sluice.toml") && line.contains("line"), "{line}");
    assert_eq!(namespace_ids(&server.json(&["ns", "list", BASE])), [1, 2]);
    assert_eq!(host.active_namespaces().unwrap(), [NamespaceId(1), NamespaceId(2)]);

    // Put right again, the file reloads, and the management API edits it from there.
    std::fs::write(server.config(), &edited).unwrap();
    server.signal("HUP");
    server.wait_for_log("reload: the config file is unchanged", 1);
    let added = server.json(&["ns", "add", BASE, "--backend", "ram", "--size", "1MiB"]);
    assert_eq!(added["nsid"], 3, "{added}");
}

/// Receives one datagram, bounded.
fn receive(socket: &UnixDatagram) -> String {
    let mut buffer = [0u8; 4096];
    let length = socket.recv(&mut buffer).expect("a notification within the timeout");
    String::from_utf8_lossy(&buffer[..length]).into_owned()
}

#[test]
fn the_service_manager_hears_ready_reloading_and_stopping() {
    let dir = scratch_dir("notify");
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(RELOAD_DEADLINE)).unwrap();
    let mut server = start(&dir, Some(&socket_path));

    let ready = receive(&socket);
    assert!(ready.starts_with("READY=1\n") && ready.contains("STATUS=serving 1 subsystem(s)"), "{ready}");

    let edited = std::fs::read_to_string(server.config())
        .unwrap()
        .replace("[runtime]", "[[subsystem.namespace]]\nnsid = 2\nbackend = \"ram\"\nsize = \"1MiB\"\n\n[runtime]");
    std::fs::write(server.config(), edited).unwrap();
    server.signal("HUP");
    let reloading = receive(&socket);
    assert!(reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{reloading}");
    let microseconds: u64 =
        reloading.lines().find_map(|line| line.strip_prefix("MONOTONIC_USEC=")).unwrap().parse().unwrap();
    assert!(microseconds > 0);
    let ready = receive(&socket);
    assert!(ready.starts_with("READY=1\n") && ready.contains("1 change(s) applied"), "{ready}");

    server.signal("TERM");
    let stopping = receive(&socket);
    assert!(stopping.starts_with("STOPPING=1"), "{stopping}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "sluice serve did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.child.wait().unwrap().success());
}

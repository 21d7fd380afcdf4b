//! The management API end to end: `sluice serve` with a config file in a temporary
//! directory and a management socket, changed through the `sluice` CLI and raw
//! JSON-RPC; the file is checked after every change, refused changes must leave it
//! byte-identical, and a target killed with SIGKILL must come back from the file with
//! the same subsystems, namespaces and NGUIDs. Every wait is bounded.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use serde_json::{json, Value};

use support::{
    await_namespace_notice, free_port, managed_config, scratch_dir, ManagedServer, ServeSetup, BASE, NOTICE_DEADLINE,
    SLUICE,
};

const LIVE: &str = "nqn.2026-11.io.sluice:live";

/// A running `sluice serve` on a fresh [`managed_config`] file in `dir` (killed on drop).
fn start(dir: &Path) -> ManagedServer {
    ManagedServer::start(dir, &ServeSetup::QUIET)
}

/// Starts again from the file in `dir` as it is now.
fn restart(dir: &Path, port: u16) -> ManagedServer {
    ManagedServer::restart(dir, &ServeSetup::QUIET, port)
}

impl ManagedServer {
    fn file(&self) -> Vec<u8> {
        std::fs::read(self.config()).expect("read config")
    }

    /// `sluice ARGS --socket SOCKET`.
    fn sluice(&self, args: &[&str]) -> Output {
        let mut command = Command::new(SLUICE);
        command.args(args).arg("--socket").arg(self.socket());
        command.stdin(Stdio::null()).output().expect("run sluice")
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.sluice(args);
        assert!(
            output.status.success(),
            "sluice {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8 output")
    }

    fn ok_json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&args)).expect("JSON output")
    }

    /// One raw request line, one response.
    fn raw(&self, line: &[u8]) -> Value {
        let stream = UnixStream::connect(self.socket()).expect("connect to the management socket");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        (&stream).write_all(line).unwrap();
        (&stream).write_all(b"\n").unwrap();
        let mut response = String::new();
        BufReader::new(&stream).read_line(&mut response).expect("a response line");
        serde_json::from_str(&response).expect("the response is JSON")
    }

    fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The NGUID a host reads with `sluice id-ns`.
    fn nguid(&self, nqn: &str, nsid: u32) -> String {
        let output = Command::new(SLUICE)
            .args(["id-ns", "-a", "127.0.0.1", "-s", &self.port.to_string(), "-n", nqn, "-N", &nsid.to_string()])
            .args(["-o", "json"])
            .output()
            .expect("run sluice id-ns");
        assert!(output.status.success(), "id-ns: {}", String::from_utf8_lossy(&output.stderr));
        let json: Value = serde_json::from_slice(&output.stdout).expect("id-ns JSON");
        let nguid = json["nguid"].as_str().expect("nguid in id-ns output").to_string();
        assert_ne!(nguid.trim_start_matches("0x").trim_matches('0'), "", "namespace {nsid} has an NGUID");
        nguid
    }
}

fn namespace_ids(list: &Value) -> Vec<u64> {
    list["namespaces"]
        .as_array()
        .expect("namespaces")
        .iter()
        .map(|namespace| namespace["nsid"].as_u64().unwrap())
        .collect()
}

#[test]
fn changes_apply_live_persist_and_survive_a_kill() {
    let dir = scratch_dir("live");
    let server = start(&dir);
    let mode = std::fs::metadata(server.socket()).expect("the socket exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "only the owner may use the management socket");

    let text = server.ok(&["subsystem", "add", LIVE, "--model", "Managed", "--allow-any-host"]);
    assert!(text.contains(&format!("added subsystem {LIVE}")), "{text}");
    let text = server.ok(&["ns", "add", LIVE, "--backend", "ram", "--size", "32MiB"]);
    assert!(text.contains("added namespace 1 (32 MiB"), "{text}");

    // A host connected to the subsystem hears of the next namespace.
    let mut options = ConnectOptions::new(server.address(), LIVE);
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(5);
    let controller = Controller::connect(options).expect("connect to the new subsystem");
    let added = server.ok_json(&["ns", "add", LIVE, "-b", "null", "-s", "8MiB", "--block-size", "4096", "-N", "5"]);
    assert_eq!(added["nsid"], 5, "{added}");
    await_namespace_notice(&controller, NamespaceId(5));
    let active = controller.active_namespaces().expect("active namespace list");
    assert_eq!(active, [NamespaceId(1), NamespaceId(5)]);
    drop(controller);

    let listed = server.ok_json(&["ns", "list", LIVE]);
    assert_eq!(namespace_ids(&listed), [1, 5], "{listed}");
    let table = server.ok(&["ns", "list", LIVE]);
    assert!(table.starts_with("NSID") && table.contains("null"), "{table}");

    // The file was rewritten, keeps the operator's comment and still checks.
    let file = String::from_utf8(server.file()).unwrap();
    assert!(file.starts_with("# Written by the test"), "{file}");
    let parsed: toml::Value = toml::from_str(&file).expect("the rewritten config parses");
    let subsystems = parsed["subsystem"].as_array().unwrap();
    assert_eq!(subsystems[1]["nqn"].as_str(), Some(LIVE));
    let nsids: Vec<i64> =
        subsystems[1]["namespace"].as_array().unwrap().iter().map(|ns| ns["nsid"].as_integer().unwrap()).collect();
    assert_eq!(nsids, [1, 5]);
    let check = Command::new(SLUICE).args(["config", "check"]).arg(server.config()).output().unwrap();
    assert!(check.status.success(), "config check: {}", String::from_utf8_lossy(&check.stderr));

    let nguid_of_5 = server.nguid(LIVE, 5);
    let nguid_of_base = server.nguid(BASE, 1);
    let text = server.ok(&["ns", "remove", LIVE, "1"]);
    assert!(text.contains("removed namespace 1"), "{text}");
    let listed = server.ok_json(&["subsystem", "list"]);
    assert_eq!(listed["subsystems"].as_array().unwrap().len(), 2, "{listed}");

    // SIGKILL, then a restart from the file (the stale socket is replaced).
    let port = server.port;
    server.kill();
    assert!(dir.join("sluice.sock").exists(), "a killed server leaves its socket file");
    let server = restart(&dir, port);
    let listed = server.ok_json(&["ns", "list", LIVE]);
    assert_eq!(namespace_ids(&listed), [5], "{listed}");
    assert_eq!(server.nguid(LIVE, 5), nguid_of_5, "NSID 5 keeps its NGUID across the restart");
    assert_eq!(server.nguid(BASE, 1), nguid_of_base);
    let shown = server.ok_json(&["subsystem", "show", LIVE]);
    assert_eq!(shown["model"], "Managed", "{shown}");

    // Removing the subsystem survives a restart too.
    server.ok(&["subsystem", "remove", LIVE]);
    server.kill();
    let server = restart(&dir, port);
    let listed = server.ok_json(&["subsystem", "list"]);
    let nqns: Vec<&str> = listed["subsystems"].as_array().unwrap().iter().map(|s| s["nqn"].as_str().unwrap()).collect();
    assert_eq!(nqns, [BASE]);
}

/// Connects to `nqn` as `host` (with `secret` if given); the error text on refusal.
fn connect_as(server: &ManagedServer, nqn: &str, host: &str, secret: Option<&str>) -> Result<Controller, String> {
    let mut options = ConnectOptions::new(server.address(), nqn);
    options.host_nqn = host.to_string();
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(10);
    options.connect_timeout = Duration::from_secs(10);
    options.dhchap_secret = secret.map(|text| text.parse().expect("a DHHC-1 secret"));
    Controller::connect(options).map_err(|error| error.to_string())
}

fn dhchap_secret(byte: u8) -> String {
    nvme_host::Secret::from_key(&[byte; 32], None).expect("secret").to_representation().to_string()
}

#[test]
fn allowed_hosts_and_secrets_change_live() {
    const HOST_A: &str = "nqn.2014-08.io.sluice:host-a";
    const HOST_B: &str = "nqn.2014-08.io.sluice:host-b";
    let dir = scratch_dir("hosts");
    let server = start(&dir);
    server.ok(&["subsystem", "add", LIVE]);
    server.ok(&["ns", "add", LIVE, "-b", "ram", "-s", "8MiB"]);
    // Neither hosts listed nor allow_any_host: nobody may connect.
    assert!(connect_as(&server, LIVE, HOST_A, None).is_err(), "closed until hosts are allowed");
    server.ok(&["host", "allow", LIVE, HOST_A]);
    let host_a = connect_as(&server, LIVE, HOST_A, None).expect("an allowed host connects");

    let (old_secret, new_secret) = (dhchap_secret(1), dhchap_secret(2));
    let text = server.ok(&["host", "allow", LIVE, HOST_B, "--dhchap-secret", &old_secret]);
    assert!(text.contains("only the 2 listed host(s) may connect"), "{text}");
    let text = server.ok(&["host", "deny", LIVE, HOST_A]);
    assert!(
        text.contains("1 controller(s) of hosts no longer allowed, or whose TLS key changed, were disconnected"),
        "{text}"
    );
    drop(host_a);
    assert!(connect_as(&server, LIVE, HOST_A, None).is_err(), "host A is no longer allowed");
    assert!(connect_as(&server, LIVE, HOST_B, None).is_err(), "host B must authenticate");
    drop(connect_as(&server, LIVE, HOST_B, Some(&old_secret)).expect("host B with its secret"));

    // Rotation: the new secret works at once, the old one no longer does.
    // From a file this time, as an operator would keep it off the command line.
    let secret_file = dir.join("host-b.key");
    std::fs::write(&secret_file, format!("{new_secret}\n")).unwrap();
    let from_file = format!("@{}", secret_file.display());
    let text = server.ok(&["host", "allow", LIVE, HOST_B, "--dhchap-secret", &from_file]);
    assert!(text.contains("updated the secrets of host"), "{text}");
    assert!(connect_as(&server, LIVE, HOST_B, Some(&old_secret)).is_err(), "the old secret is refused");
    drop(connect_as(&server, LIVE, HOST_B, Some(&new_secret)).expect("the new secret works"));
    let file = String::from_utf8(server.file()).unwrap();
    assert!(file.contains(&new_secret) && !file.contains(&old_secret), "{file}");
    let listed = server.sluice(&["host", "list", LIVE, "-o", "json"]);
    let listed_text = String::from_utf8_lossy(&listed.stdout);
    assert!(!listed_text.contains("DHHC-1"), "secrets are never shown: {listed_text}");
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["hosts"][0]["host"], HOST_B, "{listed}");
    assert_eq!(listed["hosts"][0]["dhchap"], true, "{listed}");

    // A restart reads the same rules from the file.
    let port = server.port;
    server.kill();
    let server = restart(&dir, port);
    assert!(connect_as(&server, LIVE, HOST_A, None).is_err(), "still only host B after a restart");
    drop(connect_as(&server, LIVE, HOST_B, Some(&new_secret)).expect("host B after a restart"));

    // Denying the last listed host closes the subsystem: any-host access is only
    // ever set explicitly.
    server.ok(&["host", "deny", LIVE, HOST_B]);
    assert!(connect_as(&server, LIVE, HOST_A, None).is_err(), "nobody after the last host is denied");
    assert!(!String::from_utf8(server.file()).unwrap().contains("subsystem.host"));
}

#[test]
fn refused_requests_leave_the_file_byte_identical() {
    let dir = scratch_dir("refused");
    let server = start(&dir);
    let before = server.file();

    let refused = |line: &str, code: i64, field: Option<&str>| {
        let response = server.raw(line.as_bytes());
        assert_eq!(response["error"]["code"], code, "{line} -> {response}");
        if let Some(field) = field {
            assert_eq!(response["error"]["data"]["field"], field, "{line} -> {response}");
        }
        assert_eq!(server.file(), before, "{line}: the config file must be untouched");
        response
    };
    refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":", -32700, None);
    refused(r#"{"jsonrpc":"2.0","id":2,"method":"ns_explode","params":{}}"#, -32601, None);
    refused(
        r#"{"jsonrpc":"2.0","id":3,"method":"ns_add","params":{"backend":"ram","size":"1MiB"}}"#,
        -32602,
        Some("nqn"),
    );
    refused(
        &json!({"jsonrpc":"2.0","id":4,"method":"ns_add","params":{"nqn":BASE,"nsid":1,"backend":"ram","size":"1MiB"}})
            .to_string(),
        -32000,
        Some("nsid"),
    );
    let response = refused(
        &json!({"jsonrpc":"2.0","id":5,"method":"ns_add","params":{"nqn":BASE,"backend":"tape","size":"1MiB"}})
            .to_string(),
        -32001,
        None,
    );
    assert!(response["error"]["message"].as_str().unwrap().contains("tape"), "{response}");
    let response = refused(r#"{"jsonrpc":"2.0","method":"subsystem_list"}"#, -32600, Some("id"));
    assert_eq!(response["id"], Value::Null);
    let mut huge = br#"{"jsonrpc":"2.0","id":6,"method":"subsystem_list","params":{"pad":""#.to_vec();
    huge.resize(huge.len() + (1 << 20), b'x');
    let response = server.raw(&huge);
    assert_eq!(response["error"]["code"], -32600, "an oversized request is refused");

    // The CLI: a refusal exits 2 and says what is wrong; nothing changed.
    let output = server.sluice(&["ns", "add", BASE, "-b", "ram", "-s", "1MiB", "-N", "1"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nsid") && stderr.contains("already has namespace 1"), "{stderr}");
    assert_eq!(server.file(), before);
    let listed = server.ok_json(&["ns", "list", BASE]);
    assert_eq!(namespace_ids(&listed), [1]);

    // No server on the socket: exit 1 with what to check.
    let output =
        Command::new(SLUICE).args(["subsystem", "list", "--socket"]).arg(dir.join("nobody.sock")).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot reach the management socket") && stderr.contains("sluice serve"), "{stderr}");
}

#[test]
fn a_live_socket_is_never_taken_over() {
    let dir = scratch_dir("taken");
    let server = start(&dir);
    // A second target (its own config and port) asking for the same socket path.
    let other = scratch_dir("taken-other");
    std::fs::write(other.join("sluice.toml"), managed_config(free_port())).unwrap();
    let output = Command::new(SLUICE)
        .arg("serve")
        .arg("--config")
        .arg(other.join("sluice.toml"))
        .arg("--rpc-socket")
        .arg(server.socket())
        .env("SLUICE_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run a second sluice serve");
    assert!(!output.status.success(), "the second server must refuse to start");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("another sluice serve"), "{stderr}");
    // The first still answers.
    server.ok(&["subsystem", "list"]);

    // Something that is not a socket is not removed either.
    let plain = other.join("not-a-socket");
    std::fs::write(&plain, "keep me").unwrap();
    let output = Command::new(SLUICE)
        .arg("serve")
        .arg("--config")
        .arg(other.join("sluice.toml"))
        .arg("--rpc-socket")
        .arg(&plain)
        .env("SLUICE_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a socket"));
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "keep me");
}

/// The TCP ports the discovery log read through `port` lists for `nqn`.
fn discovered_ports(port: u16, nqn: &str) -> Vec<String> {
    let output = Command::new(SLUICE)
        .args(["discover", "-a", "127.0.0.1", "-s", &port.to_string(), "-o", "json"])
        .output()
        .expect("run sluice discover");
    assert!(output.status.success(), "discover: {}", String::from_utf8_lossy(&output.stderr));
    let log: Value = serde_json::from_slice(&output.stdout).expect("discover JSON");
    log["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|record| record["subnqn"] == nqn)
        .map(|record| record["trsvcid"].as_str().unwrap().to_string())
        .collect()
}

/// A controller of `BASE` through `port` that gives up quickly once its target is gone.
fn connect_through(port: u16) -> Controller {
    let mut options = ConnectOptions::new(SocketAddr::from(([127, 0, 0, 1], port)), BASE);
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(5);
    options.connect_timeout = Duration::from_secs(5);
    options.reconnect_delay = Duration::from_millis(200);
    options.controller_loss_timeout = Duration::from_secs(2);
    Controller::connect(options).expect("connect through the listener")
}

#[test]
fn listeners_change_live_and_removal_closes_only_their_connections() {
    let dir = scratch_dir("listeners");
    let server = start(&dir);
    let port = server.port;

    // Added: discovery and Connect work through it at once.
    let added = free_port();
    let text = server.ok(&["listener", "add", &format!("127.0.0.1:{added}")]);
    assert!(text.contains(&format!("added listener 127.0.0.1:{added}")) && text.contains("accepting"), "{text}");
    assert_eq!(discovered_ports(added, BASE), [port.to_string(), added.to_string()]);
    let output = Command::new(SLUICE)
        .args(["connect", "-a", "127.0.0.1", "-s", &added.to_string(), "-n", BASE, "-o", "json"])
        .output()
        .expect("run sluice connect");
    assert!(output.status.success(), "connect: {}", String::from_utf8_lossy(&output.stderr));
    let listed = server.ok_json(&["listener", "list"]);
    let active: Vec<&str> = listed["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|listener| listener["active"] == true && listener["configured"] == true)
        .map(|listener| listener["address"].as_str().unwrap())
        .collect();
    assert_eq!(active, [format!("127.0.0.1:{port}"), format!("127.0.0.1:{added}")], "{listed}");
    assert!(String::from_utf8(server.file()).unwrap().contains(&format!("127.0.0.1:{added}")));

    // Removed: the controller through it loses its queues (admin and one I/O
    // queue), the one through the other listener keeps answering.
    let leaving = connect_through(added);
    let staying = connect_through(port);
    let removed = server.ok_json(&["listener", "remove", &format!("127.0.0.1:{added}")]);
    assert_eq!(removed["connections_closed"], 2, "{removed}");
    let deadline = Instant::now() + NOTICE_DEADLINE;
    while leaving.active_namespaces().is_ok() {
        assert!(Instant::now() < deadline, "the controller through the removed listener still answers");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(staying.active_namespaces().expect("the other listener's controller"), [NamespaceId(1)]);
    assert!(std::net::TcpStream::connect(("127.0.0.1", added)).is_err(), "nothing listens on the removed port");
    assert_eq!(discovered_ports(port, BASE), [port.to_string()]);
    drop(leaving);

    // An address in use: refused, exit 2, the file byte-identical.
    let before = server.file();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_address = busy.local_addr().unwrap().to_string();
    let output = server.sluice(&["listener", "add", &busy_address]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("address") && stderr.contains("in use"), "{stderr}");
    assert_eq!(server.file(), before, "the config file must be untouched");
    let response = server.raw(
        json!({"jsonrpc": "2.0", "id": 1, "method": "listener_add", "params": {"address": busy_address}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(response["error"]["data"]["field"], "address", "{response}");
    assert_eq!(server.file(), before);
    // The only listener stays.
    let output = server.sluice(&["listener", "remove", &format!("127.0.0.1:{port}")]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(server.file(), before);
    assert_eq!(staying.active_namespaces().expect("still served"), [NamespaceId(1)]);
    drop(staying);

    // A listener added live is back after a restart: it is in the file.
    let again = free_port();
    server.ok(&["listener", "add", &format!("127.0.0.1:{again}")]);
    server.kill();
    let server = restart(&dir, port);
    assert_eq!(discovered_ports(again, BASE), [port.to_string(), again.to_string()]);
    drop(server);
}

#[test]
fn a_host_whose_tls_key_changes_is_disconnected() {
    const HOST: &str = "nqn.2014-08.io.sluice:host-key";
    let dir = scratch_dir("tls-key-change");
    let server = start(&dir);
    server.ok(&["subsystem", "add", LIVE]);
    server.ok(&["ns", "add", LIVE, "-b", "ram", "-s", "8MiB"]);
    server.ok(&["host", "allow", LIVE, HOST]);
    // A host that gives up reconnecting soon, so that the lost controller shows.
    let mut options = ConnectOptions::new(server.address(), LIVE);
    options.host_nqn = HOST.to_string();
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(10);
    options.reconnect_delay = Duration::from_millis(200);
    options.controller_loss_timeout = Duration::from_secs(1);
    let host = Controller::connect(options).expect("the host connects over plain TCP");
    // A host given a key may connect over TLS only: its plain controller goes, as a
    // TLS session made with a key that is replaced or removed would.
    let key = nvme_auth::TlsKey::generate(nvme_auth::HashFunction::Sha256, &mut nvme_auth::SeededRandom::new(3))
        .expect("key")
        .to_interchange();
    let text = server.ok(&["host", "allow", LIVE, HOST, "--tls-key", &key]);
    assert!(
        text.contains("1 controller(s) of hosts no longer allowed, or whose TLS key changed, were disconnected"),
        "{text}"
    );
    // Its queues close at their next check (1 s), the admin queue too, and the host
    // cannot reconnect.
    let deadline = Instant::now() + Duration::from_secs(10);
    while host.identify_controller().is_ok() {
        assert!(Instant::now() < deadline, "the admin queue of the disconnected controller stayed open");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(connect_as(&server, LIVE, HOST, None).is_err(), "no plain connection once the host has a TLS key");
}

//! Per-host namespace attachment end to end: `sluice serve` with a management
//! socket, two hosts connected with their own host NQNs through Sluice's host, and
//! `sluice ns attach` / `sluice ns detach`. The attached host hears of the change
//! and finds the namespace in its Identify active namespace list; the other host
//! never does; the attachment survives a restart from the file; detaching takes
//! it away again. Every wait is bounded.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use serde_json::{json, Value};

use support::{await_namespace_notice, scratch_dir, ManagedServer, ServeSetup, SLUICE};

const TENANTS: &str = "nqn.2026-11.io.sluice:tenants";
const HOST_A: &str = "nqn.2014-08.io.sluice:node-a";
const HOST_B: &str = "nqn.2014-08.io.sluice:node-b";

fn sluice(server: &ManagedServer, args: &[&str]) -> Output {
    let mut command = Command::new(SLUICE);
    command.args(args).arg("--socket").arg(server.socket());
    command.stdin(Stdio::null()).output().expect("run sluice")
}

fn ok(server: &ManagedServer, args: &[&str]) -> String {
    let output = sluice(server, args);
    assert!(
        output.status.success(),
        "sluice {args:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

fn ok_json(server: &ManagedServer, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&ok(server, &args)).expect("JSON output")
}

fn connect_as(server: &ManagedServer, host: &str) -> Controller {
    let mut options = ConnectOptions::new(SocketAddr::from(([127, 0, 0, 1], server.port)), TENANTS);
    options.host_nqn = host.to_string();
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(10);
    options.connect_timeout = Duration::from_secs(10);
    Controller::connect(options).unwrap_or_else(|error| panic!("connect as {host}: {error}"))
}

fn active(controller: &Controller) -> Vec<NamespaceId> {
    controller.active_namespaces().expect("Identify active namespace list")
}

fn restart(dir: &Path, port: u16) -> ManagedServer {
    ManagedServer::restart(dir, &ServeSetup::QUIET, port)
}

#[test]
fn only_the_attached_host_sees_the_namespace_until_it_is_detached() {
    let dir = scratch_dir("attachment");
    let server = ManagedServer::start(&dir, &ServeSetup::QUIET);
    ok(&server, &["subsystem", "add", TENANTS]);
    ok(&server, &["host", "allow", TENANTS, HOST_A]);
    ok(&server, &["host", "allow", TENANTS, HOST_B]);
    // A namespace every allowed host sees, and one made ready for no host.
    ok(&server, &["ns", "add", TENANTS, "-b", "ram", "-s", "8MiB", "-N", "1"]);
    let added = ok_json(&server, &["ns", "add", TENANTS, "-b", "ram", "-s", "8MiB", "-N", "2", "--hosts", ""]);
    assert_eq!(added["hosts"], json!([]), "{added}");

    let host_a = connect_as(&server, HOST_A);
    let host_b = connect_as(&server, HOST_B);
    assert_eq!(active(&host_a), [NamespaceId(1)]);
    assert_eq!(active(&host_b), [NamespaceId(1)]);

    let text = ok(&server, &["ns", "attach", "--nqn", TENANTS, "--nsid", "2", "--host", HOST_A]);
    assert!(text.contains("attached namespace 2"), "{text}");
    await_namespace_notice(&host_a, NamespaceId(2));
    assert_eq!(active(&host_a), [NamespaceId(1), NamespaceId(2)]);
    assert_eq!(active(&host_b), [NamespaceId(1)], "host B must not see a namespace attached to A only");
    // Again: unchanged, and B still sees nothing new.
    let again = ok_json(&server, &["ns", "attach", "--nqn", TENANTS, "--nsid", "2", "--host", HOST_A]);
    assert_eq!(again["change"], "unchanged", "{again}");
    let listed = ok_json(&server, &["ns", "list", TENANTS]);
    assert_eq!(listed["namespaces"][1]["hosts"], json!([HOST_A]), "{listed}");
    let table = ok(&server, &["ns", "list", TENANTS]);
    assert!(table.contains("HOSTS") && table.contains(HOST_A), "{table}");
    drop((host_a, host_b));

    // The attachment is in the file: a restart brings back the same views.
    let port = server.port;
    server.kill();
    let server = restart(&dir, port);
    let host_a = connect_as(&server, HOST_A);
    let host_b = connect_as(&server, HOST_B);
    assert_eq!(active(&host_a), [NamespaceId(1), NamespaceId(2)]);
    assert_eq!(active(&host_b), [NamespaceId(1)]);

    // A host still attached is not denied; detach it first.
    let refused = sluice(&server, &["host", "deny", TENANTS, HOST_A]);
    assert!(!refused.status.success(), "host deny of an attached host must be refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("ns detach"), "{refused:?}");

    let text = ok(&server, &["ns", "detach", TENANTS, "2", "--host", HOST_A]);
    assert!(text.contains("detached namespace 2") && text.contains("no host"), "{text}");
    await_namespace_notice(&host_a, NamespaceId(2));
    assert_eq!(active(&host_a), [NamespaceId(1)], "detached: A loses it");
    assert_eq!(active(&host_b), [NamespaceId(1)]);
    let file = std::fs::read_to_string(server.config()).expect("read config");
    assert!(file.contains("hosts = []"), "the last detach leaves an explicit empty list:\n{file}");
    ok(&server, &["host", "deny", TENANTS, HOST_A]);
}

//! QoS limits end to end: `sluice serve` with a management socket; a limit set with
//! `sluice ns qos` holds a connected host at once (no reconnect), `sluice ns list`
//! counts what it delayed, `sluice bench` against it says the run was throttled, and
//! clearing the limit lets the same connection run free. Only lower bounds on time
//! are asserted (a loaded machine can only make things slower).

mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use serde_json::Value;

use support::{scratch_dir, sluice, ManagedServer, ServeSetup, BASE};

fn success(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn throttled_commands(socket: &str) -> u64 {
    let listed: Value =
        serde_json::from_str(&success(&sluice(&["ns", "list", "--socket", socket, BASE, "-o", "json"])))
            .expect("ns list -o json");
    listed["namespaces"][0]["qos_throttled_commands"].as_u64().expect("qos_throttled_commands")
}

#[test]
fn a_live_limit_holds_a_connected_host_and_the_bench_says_so() {
    let dir = scratch_dir("qos");
    let server = ManagedServer::start(&dir, &ServeSetup::QUIET);
    let socket = server.socket().to_str().unwrap().to_string();
    let mut options = ConnectOptions::new(format!("127.0.0.1:{}", server.port).parse().unwrap(), BASE);
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(10);
    let controller = Controller::connect(options).expect("connect");
    controller.read(NamespaceId(1), 0, 1).expect("a read before any limit");

    // 20 commands per second without a burst: one every 50 ms.
    let set = success(&sluice(&[
        "ns",
        "qos",
        "--socket",
        &socket,
        BASE,
        "1",
        "--rw-ios-per-second",
        "20",
        "--burst-ms",
        "0",
    ]));
    assert!(set.contains("rw_ios_per_second=20 burst_ms=0"), "{set}");
    let listed = success(&sluice(&["ns", "list", "--socket", &socket, BASE]));
    assert!(listed.contains("rw_ios_per_second=20 burst_ms=0"), "{listed}");
    let started = Instant::now();
    for block in 0..6 {
        controller.read(NamespaceId(1), block, 1).expect("a throttled read completes");
    }
    assert!(started.elapsed() >= Duration::from_millis(240), "6 reads at 20 IOPS took {:?}", started.elapsed());
    let throttled = throttled_commands(&socket);
    assert!(throttled >= 5, "{throttled} commands counted as throttled");

    let json = dir.join("bench.json");
    let job = dir.join("job.toml");
    std::fs::write(&job, "[[job]]\nname = \"limited\"\nqueue_depth = 2\nduration = \"300ms\"\nramp = \"50ms\"\n")
        .unwrap();
    let bench = sluice(&[
        "bench",
        "--target",
        &format!("tcp://127.0.0.1:{}/{BASE}", server.port),
        "--suite-file",
        job.to_str().unwrap(),
        "--target-rpc-socket",
        &socket,
        "--json",
        json.to_str().unwrap(),
    ]);
    success(&bench);
    let stderr = String::from_utf8_lossy(&bench.stderr);
    assert!(
        stderr.contains("WARNING: the namespace under test has QoS limits (rw_ios_per_second=20, burst_ms=0)"),
        "{stderr}"
    );
    assert!(stderr.contains("THROTTLED:"), "{stderr}");
    let result: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(result["qos"]["throttled_commands"].as_u64().unwrap() > 0, "{}", result["qos"]);
    assert_eq!(result["qos"]["limits"][0], "rw_ios_per_second=20");
    assert!(result["notes"].as_array().unwrap().iter().any(|note| note.as_str().unwrap().starts_with("THROTTLED:")));

    // Cleared: the same connection's reads no longer wait.
    let cleared = success(&sluice(&["ns", "qos", "--socket", &socket, BASE, "1", "--clear"]));
    assert!(cleared.contains("no limits"), "{cleared}");
    let before = throttled_commands(&socket);
    for block in 0..10 {
        controller.read(NamespaceId(1), block, 1).expect("a read after the limit went");
    }
    assert_eq!(throttled_commands(&socket), before, "nothing waited once the limit was cleared");
    assert!(!std::fs::read_to_string(server.config()).unwrap().contains("qos"));
}

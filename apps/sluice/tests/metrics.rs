//! The metrics endpoint and `sluice stat` against a running `sluice serve`: counters
//! match the I/O done through the host CLI, the exposition parses, stat shows rates.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use support::{free_port, scratch_dir, sluice, ServeProcess};

const NQN: &str = "nqn.2026-11.io.sluice:metrics-test";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0e0a0d-0000-4000-8000-00000000000c";

fn scrape(address: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("connect to the metrics endpoint");
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    response.split_once("\r\n\r\n").unwrap().1.to_string()
}

fn value(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{exposition}"))
}

#[test]
fn counters_match_the_io_done_and_stat_shows_it() {
    let dir = scratch_dir("metrics");
    let (server, io_port, metrics) = (0..5)
        .find_map(|_| {
            let (io_port, metrics_port) = (free_port(), free_port());
            let config = dir.join("sluice.toml");
            std::fs::write(
                &config,
                format!(
                    "[[listener]]\naddress = \"127.0.0.1:{io_port}\"\n[[subsystem]]\nnqn = \"{NQN}\"\nallow_any_host = true\n\
                     [[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"16MiB\"\n\
                     [[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"8MiB\"\n[runtime]\nthreads = 1\n"
                ),
            )
            .unwrap();
            let metrics = format!("127.0.0.1:{metrics_port}");
            ServeProcess::start(&config, &["--metrics-address", &metrics]).map(|server| (server, io_port, metrics))
        })
        .expect("sluice serve with metrics did not start");
    assert_eq!(server.printed("sluice: metrics at ").as_deref(), Some(format!("http://{metrics}/metrics").as_str()));

    // 64 KiB written to namespace 2 in one command, read back twice.
    let data = dir.join("data.bin");
    std::fs::write(&data, vec![0x5a; 64 * 1024]).unwrap();
    let url = format!("tcp://127.0.0.1:{io_port}/{NQN}");
    let data_path = data.to_str().unwrap();
    assert!(sluice(&["write", &url, "-N", "2", "-b", "0", "-d", data_path]).status.success());
    for _ in 0..2 {
        assert!(sluice(&["read", &url, "-N", "2", "-b", "0", "-c", "127", "-d", data_path]).status.success());
    }

    let text = scrape(&metrics);
    let ns2 = format!("{{subsystem=\"{NQN}\",nsid=\"2\"}}");
    let ns1 = format!("{{subsystem=\"{NQN}\",nsid=\"1\"}}");
    assert_eq!(value(&text, &format!("sluice_namespace_write_commands_total{ns2}")), 1.0);
    assert_eq!(value(&text, &format!("sluice_namespace_written_bytes_total{ns2}")), 65536.0);
    assert_eq!(value(&text, &format!("sluice_namespace_read_commands_total{ns2}")), 2.0);
    assert_eq!(value(&text, &format!("sluice_namespace_read_bytes_total{ns2}")), 131072.0);
    assert_eq!(value(&text, &format!("sluice_namespace_read_latency_seconds_count{ns2}")), 2.0);
    assert_eq!(value(&text, &format!("sluice_namespace_read_commands_total{ns1}")), 0.0);
    assert_eq!(value(&text, &format!("sluice_namespace_capacity_bytes{ns1}")), 16.0 * 1024.0 * 1024.0);
    let subsystem = format!("{{subsystem=\"{NQN}\"}}");
    assert_eq!(value(&text, &format!("sluice_subsystem_written_bytes_total{subsystem}")), 65536.0);
    assert_eq!(value(&text, &format!("sluice_subsystem_namespaces{subsystem}")), 2.0);
    assert!(text.contains(&format!(
        "sluice_namespace_read_latency_seconds_bucket{{subsystem=\"{NQN}\",nsid=\"2\",le=\"+Inf\"}} 2"
    )));
    // The latency split: receive, QoS and storage add up to receipt-to-completion;
    // the Send phase is counted once each response is out (3 commands, none held).
    let phase = |scope: &str, labels: &str, phase: &str| {
        let labels = labels.trim_end_matches('}');
        value(&text, &format!("sluice_{scope}_io_phase_seconds_total{labels},phase=\"{phase}\"}}"))
    };
    let latency_sum = value(&text, &format!("sluice_namespace_read_latency_seconds_sum{ns2}"))
        + value(&text, &format!("sluice_namespace_write_latency_seconds_sum{ns2}"));
    let split_sum =
        phase("namespace", &ns2, "receive") + phase("namespace", &ns2, "qos") + phase("namespace", &ns2, "storage");
    assert!((split_sum - latency_sum).abs() < 1e-9, "phases {split_sum} s against latency {latency_sum} s");
    assert_eq!(phase("namespace", &ns2, "qos"), 0.0, "no QoS limit");
    // (RAM completes within the call that submitted it, so its Storage time is 0
    // at the runtime's clock, read once per call.)
    let subsystem_labels = format!("subsystem=\"{NQN}\"");
    for name in ["receive", "qos", "storage", "send"] {
        let count = value(
            &text,
            &format!("sluice_subsystem_io_phase_latency_seconds_count{{{subsystem_labels},phase=\"{name}\"}}"),
        );
        assert_eq!(count, 3.0, "phase {name}: one write and two reads");
    }
    assert_eq!(phase("namespace", &ns1, "send"), 0.0);

    // A live controller: its own counters (from its queues' shards), and errors of
    // any kind (here LBA Out of Range) counted at the subsystem and controller.
    let mut options = ConnectOptions::new(format!("127.0.0.1:{io_port}").parse().unwrap(), NQN);
    options.host_nqn = HOST.into();
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(10);
    let controller = Controller::connect(options).expect("connect");
    controller.write(NamespaceId(1), 0, &[0xa5; 8192], false).expect("write");
    assert!(controller.read(NamespaceId(1), 1 << 30, 1).is_err(), "beyond the 16 MiB namespace");
    let text = scrape(&metrics);
    let cntlid = controller.controller_id().0;
    let labels = format!("{{subsystem=\"{NQN}\",cntlid=\"{cntlid}\",host=\"{HOST}\"}}");
    assert_eq!(value(&text, &format!("sluice_controller_write_commands_total{labels}")), 1.0);
    assert_eq!(value(&text, &format!("sluice_controller_written_bytes_total{labels}")), 8192.0);
    assert_eq!(value(&text, &format!("sluice_controller_error_completions_total{labels}")), 1.0);
    let by_class = |class: &str| {
        let labels = labels.trim_end_matches('}');
        value(&text, &format!("sluice_controller_error_completions_by_class_total{labels},class=\"{class}\"}}"))
    };
    assert_eq!(by_class("out_of_range"), 1.0, "the read past the end");
    assert_eq!(by_class("invalid_command") + by_class("media") + by_class("path"), 0.0);
    assert!(value(&text, "process_cpu_seconds_total") >= 0.0, "present (a young process may not have 10 ms yet)");
    assert!(value(&text, "process_resident_memory_bytes") > 0.0);
    assert_eq!(value(&text, &format!("sluice_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))), 1.0);
    assert_eq!(
        value(
            &text,
            &format!("sluice_listener_accepting{{address=\"127.0.0.1\",port=\"{io_port}\",role=\"io\",tls=\"none\"}}")
        ),
        1.0
    );
    assert_eq!(value(&text, &format!("sluice_controller_outstanding_commands{labels}")), 0.0, "nothing in flight");
    assert_eq!(value(&text, &format!("sluice_controller_queues{labels}")), 2.0, "admin and one I/O queue");
    assert_eq!(value(&text, &format!("sluice_subsystem_written_bytes_total{subsystem}")), 65536.0 + 8192.0);
    assert!(value(&text, &format!("sluice_subsystem_error_completions_total{subsystem}")) >= 1.0);
    assert!(!text.contains("sluice_namespace_error_completions_total"), "queue-only metrics are not per namespace");
    assert!(value(&text, "sluice_connections_open") >= 2.0, "the admin and I/O queue connections");
    let accepted_before = value(&text, "sluice_connections_accepted_total");
    let refused_before = value(&text, "sluice_connect_refusals_total{reason=\"invalid_parameters\"}");
    drop(controller);

    // A Connect to a subsystem that does not exist is refused and counted.
    let mut options =
        ConnectOptions::new(format!("127.0.0.1:{io_port}").parse().unwrap(), "nqn.2026-11.io.sluice:nowhere");
    options.host_nqn = HOST.into();
    options.command_timeout = Duration::from_secs(10);
    assert!(Controller::connect(options).is_err(), "no such subsystem");
    let text = scrape(&metrics);
    assert_eq!(value(&text, "sluice_connect_refusals_total{reason=\"invalid_parameters\"}"), refused_before + 1.0);
    assert_eq!(value(&text, "sluice_connect_refusals_total{reason=\"host_not_allowed\"}"), 0.0);
    assert!(value(&text, "sluice_connections_accepted_total") > accepted_before);
    assert_eq!(value(&text, "sluice_transport_errors_total"), 0.0);

    // Anything else is refused politely.
    let mut stream = TcpStream::connect(&metrics).unwrap();
    write!(stream, "POST /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 405"), "{response}");

    // Clients that connect and send nothing hold a request thread each (for up to
    // 5 s), not the endpoint: with two stalled, a scrape is answered at once (the
    // thread of the previous request may still be finishing); with the limit of four
    // reached, the next connection gets 503 instead of waiting.
    let mut stalled: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(&metrics).unwrap()).collect();
    let started = std::time::Instant::now();
    assert!(scrape(&metrics).contains("sluice_subsystem_namespaces"));
    assert!(started.elapsed() < Duration::from_secs(4), "a scrape waited behind stalled clients");
    std::thread::sleep(Duration::from_millis(100));
    stalled.extend((0..2).map(|_| TcpStream::connect(&metrics).unwrap()));
    std::thread::sleep(Duration::from_millis(200));
    let mut busy = TcpStream::connect(&metrics).unwrap();
    write!(busy, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    busy.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    let mut response = String::new();
    busy.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    drop(stalled);

    // sluice stat: one JSON sample with a row per namespace.
    let output = sluice(&["stat", "--metrics-address", &metrics, "--interval", "0.2", "--count", "1", "-o", "json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(2), "{rows}");
    assert_eq!(rows[1]["nsid"], "2");

    let output = sluice(&["stat", "--metrics-address", &format!("127.0.0.1:{}", free_port()), "--count", "1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is `sluice serve --metrics-address"));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

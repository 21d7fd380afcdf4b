//! The host subcommands end to end: the built `sluice` binary against `sluice serve`
//! on free local ports. Every wait is bounded; servers are stopped with SIGTERM (and
//! killed if they do not stop).

mod support;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;
use support::{free_port, scratch_dir, sluice, ServeProcess};

const NQN: &str = "nqn.2026-11.io.sluice:cli-test";
const SERIAL: &str = "SLUICECLI0001";
const MODEL: &str = "Sluice CLI test";
/// Namespace 1: 16 MiB of 512-byte blocks.
const NS1_BLOCKS: u64 = 16 * 1024 * 1024 / 512;
/// Namespace 2: 8 MiB of 4096-byte blocks.
const NS2_BLOCKS: u64 = 8 * 1024 * 1024 / 4096;

/// `sluice serve` with an I/O listener, a discovery listener and two RAM namespaces.
struct Server {
    _process: ServeProcess,
    io_port: u16,
    /// A second I/O listener: a second path to the same subsystem.
    second_io_port: u16,
    discovery_port: u16,
    dir: PathBuf,
}

impl Server {
    fn start(name: &str) -> Server {
        let dir = scratch_dir(name);
        // Ports picked by binding port 0 may be taken again before the server binds
        // them; try a few times.
        for _ in 0..5 {
            let (io_port, second_io_port, discovery_port) = (free_port(), free_port(), free_port());
            if io_port == discovery_port || second_io_port == io_port || second_io_port == discovery_port {
                continue;
            }
            let config = dir.join("sluice.toml");
            std::fs::write(
                &config,
                format!(
                    r#"
[[listener]]
address = "127.0.0.1:{io_port}"

[[listener]]
address = "127.0.0.1:{second_io_port}"

[[listener]]
address = "127.0.0.1:{discovery_port}"
discovery_only = true

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true
serial = "{SERIAL}"
model = "{MODEL}"

[[subsystem.namespace]]
nsid = 1
backend = "ram"
size = "16MiB"
block_size = 512

[[subsystem.namespace]]
nsid = 2
backend = "ram"
size = "8MiB"
block_size = 4096

[runtime]
threads = 1
"#
                ),
            )
            .expect("write config");
            if let Some(process) = ServeProcess::start(&config, &[]) {
                return Server { _process: process, io_port, second_io_port, discovery_port, dir };
            }
        }
        panic!("sluice serve did not become ready");
    }

    /// `-a 127.0.0.1 --trsvcid PORT -n NQN` (the long form: get-feature's -s is --sel).
    fn target(&self) -> Vec<String> {
        vec!["-a".into(), "127.0.0.1".into(), "--trsvcid".into(), self.io_port.to_string(), "-n".into(), NQN.into()]
    }

    /// tcp://127.0.0.1:PORT/NQN.
    fn url(&self) -> String {
        format!("tcp://127.0.0.1:{}/{NQN}", self.io_port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `sluice SUBCOMMAND TARGET... EXTRA...`, which must succeed; returns stdout.
fn ok(server: &Server, subcommand: &str, extra: &[&str]) -> String {
    let mut args = vec![subcommand.to_string()];
    args.extend(server.target());
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let output = sluice(&args);
    assert!(
        output.status.success(),
        "sluice {} failed ({:?}):\nstdout: {}\nstderr: {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("stdout is UTF-8")
}

fn ok_json(server: &Server, subcommand: &str, extra: &[&str]) -> Value {
    let mut extra = extra.to_vec();
    extra.extend(["-o", "json"]);
    let text = ok(server, subcommand, &extra);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{subcommand} -o json: {error}:\n{text}"))
}

/// Asserts a failure with `code` whose stderr has every one of `needles`.
fn assert_fails(output: &Output, code: i32, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "stderr lacks {needle:?}: {stderr}");
    }
}

/// A pattern no two nearby blocks share.
fn pattern(bytes: usize, seed: u8) -> Vec<u8> {
    (0..bytes).map(|index| ((index * 7 + index / 512) as u8).wrapping_add(seed) ^ (index >> 9) as u8).collect()
}

#[test]
fn discover_prints_the_discovery_log() {
    let server = Server::start("discover");
    let port = server.discovery_port.to_string();
    let output = sluice(&["discover", "-a", "127.0.0.1", "-s", &port]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("Discovery Log Number of Records"), "{text}");
    assert!(text.contains("=====Discovery Log Entry 0======"), "{text}");
    assert!(text.contains(&format!("subnqn:  {NQN}")), "{text}");
    assert!(text.contains(&format!("trsvcid: {}", server.io_port)), "{text}");
    assert!(text.contains("trtype:  tcp"), "{text}");
    assert!(text.contains("adrfam:  ipv4"), "{text}");
    assert!(text.contains("subtype: nvme subsystem"), "{text}");
    assert!(text.contains("traddr:  127.0.0.1"), "{text}");
    assert!(text.contains("sectype: none"), "{text}");

    // The URL form, JSON output.
    let url = format!("tcp://127.0.0.1:{port}");
    let output = sluice(&["discover", &url, "-o", "json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let records = json["records"].as_array().expect("records");
    let record = records.iter().find(|record| record["subnqn"] == NQN).expect("our subsystem is listed");
    assert_eq!(record["trtype"], "tcp");
    assert_eq!(record["trsvcid"], server.io_port.to_string());
    assert_eq!(record["traddr"], "127.0.0.1");
    assert_eq!(record["subtype"], "nvme subsystem");
}

#[test]
fn connect_summarises_the_controller() {
    let server = Server::start("connect");
    let text = ok(&server, "connect", &[]);
    assert!(text.contains(&format!("connected to {}", server.url())), "{text}");
    assert!(text.contains(&format!("subnqn     : {NQN}")), "{text}");
    assert!(text.contains("namespaces : 2 (1, 2)"), "{text}");
    assert!(text.contains("io queues  : 1 granted (1 requested)"), "{text}");
    assert!(text.contains("cntlid     : 0x"), "{text}");

    let json = ok_json(&server, "connect", &["-i", "2"]);
    assert_eq!(json["subnqn"], NQN);
    assert_eq!(json["namespaces"], serde_json::json!([1, 2]));
    assert_eq!(json["io_queues_requested"], 2);
    assert!(json["io_queues"].as_u64().unwrap() >= 1);
    assert_eq!(json["sn"], SERIAL);
}

#[test]
fn list_shows_one_row_per_namespace() {
    let server = Server::start("list");
    let text = ok(&server, "list", &[]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Node"), "{text}");
    for column in ["SN", "Model", "Namespace", "Usage", "Format", "FW Rev"] {
        assert!(lines[0].contains(column), "{text}");
    }
    assert!(lines[1].starts_with("----"), "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[2].starts_with(&server.url()), "{text}");
    assert!(lines[2].contains(SERIAL) && lines[2].contains(MODEL), "{text}");
    assert!(lines[2].contains(" 0x1 "), "{text}");
    assert!(lines[2].contains("/  16.78  MB"), "{text}");
    assert!(lines[2].contains("512    B +  0 B"), "{text}");
    assert!(lines[3].contains(" 0x2 ") && lines[3].contains("  4  KiB +  0 B"), "{text}");

    let json = ok_json(&server, "list", &[]);
    let devices = json["Devices"].as_array().expect("Devices");
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0]["NameSpace"], 1);
    assert_eq!(devices[0]["DevicePath"], server.url());
    assert_eq!(devices[0]["SerialNumber"], SERIAL);
    assert_eq!(devices[0]["ModelNumber"], MODEL);
    assert_eq!(devices[0]["MaximumLBA"], NS1_BLOCKS);
    assert_eq!(devices[0]["SectorSize"], 512);
    assert_eq!(devices[0]["PhysicalSize"], 16 * 1024 * 1024);
    assert_eq!(devices[1]["NameSpace"], 2);
    assert_eq!(devices[1]["SectorSize"], 4096);

    let text = ok(&server, "list-ns", &[]);
    assert_eq!(text, "[   0]:0x1\n[   1]:0x2\n");
}

#[test]
fn id_ctrl_prints_fields_like_nvme_cli() {
    let server = Server::start("id-ctrl");
    let text = ok(&server, "id-ctrl", &[]);
    assert!(text.starts_with("NVME Identify Controller:\n"), "{text}");
    for line in [
        format!("sn        : {SERIAL}\n"),
        format!("mn        : {MODEL}\n"),
        format!("subnqn    : {NQN}\n"),
        "cntrltype : 1\n".to_string(),
    ] {
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    for field in [
        "vid       : 0x",
        "ssvid     : 0x",
        "fr        : ",
        "mdts      : ",
        "ver       : 0x",
        "oacs      : 0x",
        "sgls      : 0x",
        "ioccsz    : ",
        "ps      0 : mp:",
    ] {
        assert!(text.contains(field), "missing {field:?} in\n{text}");
    }
    let human = ok(&server, "id-ctrl", &["-H"]);
    assert!(
        human.contains("[0:0] : 0x1\t128-bit Host Identifier Supported") || human.contains("128-bit Host Identifier"),
        "{human}"
    );
    assert!(human.contains("Dynamic Controller Model"), "{human}");
    assert!(human.contains("Max SQ Entry Size (64)"), "{human}");

    let json = ok_json(&server, "id-ctrl", &[]);
    for key in [
        "vid", "ssvid", "sn", "mn", "fr", "rab", "ieee", "cmic", "mdts", "cntlid", "ver", "oacs", "lpa", "sqes",
        "cqes", "nn", "oncs", "sgls", "subnqn", "psds",
    ] {
        assert!(json.get(key).is_some(), "id-ctrl JSON lacks {key}: {json}");
    }
    assert_eq!(json["sn"], SERIAL);
    assert_eq!(json["mn"], MODEL);
    assert_eq!(json["subnqn"], NQN);
    assert_eq!(json["sqes"], 0x66);
    assert!(json["ver"].as_u64().unwrap() >= 0x10300);
}

#[test]
fn id_ns_prints_sizes_and_formats() {
    let server = Server::start("id-ns");
    let text = ok(&server, "id-ns", &[]);
    assert!(text.starts_with("NVME Identify Namespace 1:\n"), "{text}");
    assert!(text.contains(&format!("nsze    : {NS1_BLOCKS:#x}\n")), "{text}");
    assert!(text.contains(&format!("ncap    : {NS1_BLOCKS:#x}\n")), "{text}");
    assert!(text.contains("nlbaf   : "), "{text}");
    assert!(text.contains("flbas   : 0x"), "{text}");
    assert!(text.contains("nguid   : "), "{text}");
    assert!(text.contains("eui64   : "), "{text}");
    assert!(text.contains("ms:0   lbads:9  rp:0 (in use)"), "{text}");

    let text = ok(&server, "id-ns", &["-N", "2", "-H"]);
    assert!(text.starts_with("NVME Identify Namespace 2:\n"), "{text}");
    assert!(text.contains("Data Size: 4096 bytes") && text.contains("(in use)"), "{text}");

    let json = ok_json(&server, "id-ns", &["--namespace-id", "0x2"]);
    assert_eq!(json["nsze"], NS2_BLOCKS);
    let flbas = json["flbas"].as_u64().unwrap() as usize & 0xF;
    assert_eq!(json["lbafs"][flbas]["ds"], 12);
}

#[test]
fn smart_log_counts_io() {
    let server = Server::start("smart-log");
    let dir = scratch_dir("smart-data");
    let data = dir.join("data");
    std::fs::write(&data, pattern(4096, 1)).unwrap();
    ok(&server, "write", &["-d", data.to_str().unwrap()]);

    let text = ok(&server, "smart-log", &[]);
    assert!(text.starts_with(&format!("Smart Log for NVME device:{} namespace-id:ffffffff\n", server.url())), "{text}");
    for field in [
        "critical_warning",
        "temperature",
        "available_spare",
        "available_spare_threshold",
        "percentage_used",
        "Data Units Read",
        "Data Units Written",
        "host_read_commands",
        "host_write_commands",
        "power_on_hours",
        "unsafe_shutdowns",
        "media_errors",
        "num_err_log_entries",
    ] {
        assert!(text.contains(field), "smart-log lacks {field}:\n{text}");
    }
    let written = text.lines().find(|line| line.starts_with("Data Units Written")).unwrap();
    assert!(written.contains('(') && written.ends_with("B)"), "{written}");

    let json = ok_json(&server, "smart-log", &[]);
    for key in [
        "critical_warning",
        "temperature",
        "avail_spare",
        "spare_thresh",
        "percent_used",
        "data_units_read",
        "data_units_written",
        "host_read_commands",
        "host_write_commands",
        "controller_busy_time",
        "power_cycles",
        "power_on_hours",
        "unsafe_shutdowns",
        "media_errors",
        "num_err_log_entries",
    ] {
        assert!(json.get(key).is_some(), "smart-log JSON lacks {key}: {json}");
    }
    assert!(json["host_write_commands"].as_u64().unwrap() >= 1, "{json}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn get_log_dumps_hex_or_raw_binary() {
    let server = Server::start("get-log");
    let text = ok(&server, "get-log", &["-i", "2", "-l", "512"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("Device:{} log-id:2 namespace-id:0xffffffff", server.url()));
    assert_eq!(lines[1], "       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f");
    assert!(lines[2].starts_with("0000: "), "{text}");
    assert!(lines.last().unwrap().starts_with("01f0: "), "{text}");
    assert_eq!(lines.len(), 2 + 32);

    let mut args = vec!["get-log".to_string()];
    args.extend(server.target());
    args.extend(["--log-id", "0x02", "--log-len", "512", "-b"].map(String::from));
    let output = sluice(&args);
    assert!(output.status.success());
    assert_eq!(output.stdout.len(), 512);

    let json = ok_json(&server, "get-log", &["-i", "2", "-l", "16", "--lpo", "0"]);
    assert_eq!(json["log_id"], 2);
    assert_eq!(json["length"], 16);
    assert_eq!(json["data"].as_str().unwrap().len(), 32);
}

#[test]
fn features_are_read_and_set() {
    let server = Server::start("features");
    let text = ok(&server, "get-feature", &["-f", "7"]);
    assert!(text.starts_with("get-feature:0x07 (Number of Queues), Current value:"), "{text}");
    let text = ok(&server, "get-feature", &["-f", "0x07", "-H"]);
    assert!(text.contains("Number of IO Submission Queues Allocated (NSQA):"), "{text}");
    let text = ok(&server, "get-feature", &["-f", "0xf", "--sel", "0"]);
    assert!(text.starts_with("get-feature:0x0f (Keep Alive Timer), Current value:"), "{text}");

    let json = ok_json(&server, "get-feature", &["-f", "7"]);
    assert_eq!(json["feature"], "0x07");
    assert_eq!(json["name"], "Number of Queues");
    assert_eq!(json["sel"], "Current");
    assert!(json["value"].as_str().unwrap().len() == 8 || json["value"].as_str().unwrap().starts_with("0x"));

    let text = ok(&server, "set-feature", &["-f", "0x0b", "-V", "0x100"]);
    assert!(
        text.starts_with("set-feature:0x0b (Async Event Configuration), value:0x00000100, cdw12:00000000, save:0"),
        "{text}"
    );
    let json = ok_json(&server, "set-feature", &["-f", "1", "-V", "3"]);
    assert_eq!(json["name"], "Arbitration");
    assert_eq!(json["value"], "0x00000003");
}

#[test]
fn write_then_read_back_the_same_data() {
    let server = Server::start("read-write");
    let dir = scratch_dir("read-write-data");
    let input = dir.join("in.bin");
    let output = dir.join("out.bin");

    // 16 blocks at LBA 16 of namespace 1.
    let data = pattern(16 * 512, 3);
    std::fs::write(&input, &data).unwrap();
    let mut args = vec!["write".to_string()];
    // -s is the port, as in every subcommand; -b the start block.
    args.extend(server.target().into_iter().map(|arg| if arg == "--trsvcid" { "-s".into() } else { arg }));
    args.extend(["-N", "1", "-b", "16", "-c", "15", "-d", input.to_str().unwrap()].map(String::from));
    let result = sluice(&args);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_eq!(String::from_utf8_lossy(&result.stderr), "write: Success\n");

    // Read it back through the URL form into a file.
    let result = sluice(&[
        "read",
        &server.url(),
        "--start-block",
        "16",
        "--block-count",
        "15",
        "--data-size",
        "8192",
        "--data",
        output.to_str().unwrap(),
    ]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_eq!(std::fs::read(&output).unwrap(), data);

    // To stdout, cut to -z bytes.
    let result = sluice(&["read", &server.url(), "-b", "16", "-z", "1000"]);
    assert!(result.status.success());
    assert_eq!(result.stdout, &data[..1000]);

    // -z reads sizes like every Sluice size: 1k is 1024 bytes, 1kb 1000, and a unit
    // that meant 1024 to the old -z (and to nvme-cli) says so on stderr.
    let result = sluice(&["read", &server.url(), "-b", "16", "-z", "1k"]);
    assert!(result.status.success());
    assert_eq!((result.stdout.as_slice(), result.stderr.as_slice()), (&data[..1024], &b"read: Success\n"[..]));
    let result = sluice(&["read", &server.url(), "-b", "16", "-z", "1kb"]);
    assert!(result.status.success());
    assert_eq!(result.stdout, &data[..1000]);
    assert_eq!(
        String::from_utf8_lossy(&result.stderr),
        "sluice: warning: -z 1kb now means 1,000 bytes (KB is a power of 1000); write -z 1KiB for 1,024 bytes as before\n\
         read: Success\n"
    );

    // Bigger than one command (split by MDTS), with FUA, on the 4 KiB namespace.
    let big = pattern(300 * 1024, 9);
    std::fs::write(&input, &big).unwrap();
    let url = server.url();
    let result = sluice(&["write", &url, "-N", "2", "-b", "100", "-f", "-d", input.to_str().unwrap(), "-o", "json"]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let json: Value = serde_json::from_slice(&result.stdout).unwrap();
    assert_eq!(json["blocks"], 75);
    assert_eq!(json["bytes"], 300 * 1024);
    let result = sluice(&["read", &url, "-N", "2", "-b", "100", "-c", "74", "-d", output.to_str().unwrap()]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_eq!(std::fs::read(&output).unwrap(), big);

    // A partial block is padded with zeros.
    std::fs::write(&input, b"hello").unwrap();
    ok(&server, "write", &["--start-block", "0", "-d", input.to_str().unwrap()]);
    let result = sluice(&["read", &url, "-b", "0"]);
    let mut expected = b"hello".to_vec();
    expected.resize(512, 0);
    assert_eq!(result.stdout, expected);

    ok(&server, "flush", &[]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unreachable_target_fails_with_exit_1_and_a_hint() {
    let port = free_port().to_string();
    let output = sluice(&["id-ctrl", "-a", "127.0.0.1", "-s", &port, "-n", NQN]);
    assert_fails(
        &output,
        1,
        &[&format!("sluice: cannot connect to 127.0.0.1:{port}"), "connection refused", "is `sluice serve` running"],
    );
    let output = sluice(&["discover", "-a", "127.0.0.1", "-s", &port]);
    assert_fails(&output, 1, &["cannot connect to", "connection refused"]);
}

#[test]
fn a_wrong_nqn_is_refused_with_the_connect_status_decoded() {
    let server = Server::start("bad-nqn");
    let port = server.io_port.to_string();
    let output = sluice(&["id-ctrl", "-a", "127.0.0.1", "-s", &port, "-n", "nqn.2026-11.io.sluice:nope"]);
    assert_fails(
        &output,
        1,
        &[
            "cannot connect to",
            "Connect Invalid Parameters (SCT 0x1 SC 0x82",
            "nqn.2026-11.io.sluice:nope",
            "sluice discover",
        ],
    );
    // One line: the library's own log stays quiet by default.
    assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1);

    // An inactive namespace is named as such.
    let output = sluice(&["read", &server.url(), "-N", "7"]);
    assert_fails(&output, 1, &["namespace 7 is not active", "sluice list-ns"]);
}

#[test]
fn a_read_past_the_end_reports_lba_out_of_range() {
    let server = Server::start("out-of-range");
    let url = server.url();
    let lba = NS1_BLOCKS.to_string();
    let output = sluice(&["read", &url, "-b", &lba, "-c", "0"]);
    assert_fails(
        &output,
        1,
        &["sluice: read failed: LBA Out of Range (SCT 0x0 SC 0x80", &format!("the namespace has {NS1_BLOCKS} blocks")],
    );
}

#[test]
fn bad_usage_exits_2() {
    // Unknown flag, unknown transport, missing value: clap's usage errors.
    assert_fails(&sluice(&["id-ctrl", "--bogus"]), 2, &["--bogus"]);
    assert_fails(&sluice(&["id-ctrl", "-t", "rdma", "-a", "127.0.0.1", "-n", NQN]), 2, &["rdma"]);
    assert_fails(&sluice(&["get-log", "-a", "127.0.0.1", "-n", NQN]), 2, &["--log-id"]);
    assert_fails(&sluice(&["id-ns", "-a", "127.0.0.1", "-n", NQN, "-N", "x"]), 2, &["not a number"]);
    assert_fails(&sluice(&["list", "rdma://1.2.3.4/nqn"]), 2, &["tcp://"]);
    // Both forms of the target at once.
    assert_fails(&sluice(&["list", "tcp://127.0.0.1/x", "-a", "127.0.0.1"]), 2, &["cannot be used with"]);
    // Checked before connecting: no address, no NQN, unreadable input.
    assert_fails(&sluice(&["id-ctrl", "-n", NQN]), 2, &["no target address", "-a/--traddr"]);
    assert_fails(&sluice(&["id-ctrl", "-a", "127.0.0.1"]), 2, &["no subsystem NQN", "sluice discover"]);
    assert_fails(&sluice(&["discover", "tcp://127.0.0.1:8009/nqn.x"]), 2, &["discovery controller", "drop the NQN"]);
    assert_fails(
        &sluice(&["write", "tcp://127.0.0.1:9/x", "-d", "/nonexistent/sluice-input"]),
        2,
        &["cannot open /nonexistent/sluice-input"],
    );
    assert_fails(&sluice(&["get-feature", "-f", "7", "-s", "4", "-a", "127.0.0.1", "-n", NQN]), 2, &["4"]);
    // Sizes are exact: a fraction is refused with the whole spelling to use.
    assert_fails(&sluice(&["read", "tcp://127.0.0.1:9/x", "-z", "1.5k"]), 2, &["\"1.5k\"", "write 1536B"]);
}

#[test]
fn reservations_between_two_hosts_with_nvme_cli_verbs() {
    let server = Server::start("cli-reservations");
    let host_a = [
        "-q",
        "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001",
        "-I",
        "aaaaaaaa-0000-4000-8000-000000000001",
    ];
    let host_b = [
        "-q",
        "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002",
        "-I",
        "bbbbbbbb-0000-4000-8000-000000000002",
    ];
    let with = |host: &[&str], extra: &[&str]| -> Vec<String> {
        host.iter().chain(extra).map(|arg| arg.to_string()).collect()
    };
    let run = |subcommand: &str, args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&server, subcommand, &refs)
    };
    assert!(run("resv-register", with(&host_a, &["--nrkey", "0xa1"])).contains("register success"));
    run("resv-register", with(&host_b, &["-k", "0xb2"]));
    run("resv-acquire", with(&host_a, &["-c", "0xa1", "--rtype", "1"]));

    // B may read but not write while A holds Write Exclusive.
    let block = server.dir.join("block");
    std::fs::write(&block, vec![0u8; 512]).unwrap();
    let mut write: Vec<String> = vec!["write".into()];
    write.extend(server.target());
    write.extend(with(&host_b, &["-b", "0", "-c", "0", "-z", "512", "-d", block.to_str().unwrap()]));
    assert_fails(&sluice(&write), 1, &["Reservation Conflict"]);
    let report = ok_json(&server, "resv-report", &host_b);
    assert_eq!(report["gen"], 2);
    assert_eq!(report["rtype"], 1);
    assert_eq!(report["regctl"], 2);
    let holder = report["regctlext"].as_array().unwrap().iter().find(|entry| entry["rcsts"] == 1).unwrap().clone();
    assert_eq!(holder["rkey"], 0xa1);
    assert_eq!(holder["hostid"], "aaaaaaaa000040008000000000000001");

    // B preempts A into Exclusive Access; A's key is gone, then B releases.
    run("resv-acquire", with(&host_b, &["-c", "0xb2", "-p", "0xa1", "--rtype", "2", "--racqa", "1"]));
    let mut acquire: Vec<String> = vec!["resv-acquire".into()];
    acquire.extend(server.target());
    acquire.extend(with(&host_a, &["-c", "0xa1", "--rtype", "1"]));
    assert_fails(&sluice(&acquire), 1, &["reservation conflict"]);
    // B holds Exclusive Access: B may verify, A may not.
    assert!(ok(
        &server,
        "verify",
        &with(&host_b, &["-b", "0", "-c", "7"]).iter().map(String::as_str).collect::<Vec<_>>()
    )
    .contains("success"));
    let mut verify: Vec<String> = vec!["verify".into()];
    verify.extend(server.target());
    verify.extend(with(&host_a, &["-b", "0", "-c", "7"]));
    assert_fails(&sluice(&verify), 1, &["Reservation Conflict"]);
    run("resv-release", with(&host_b, &["-c", "0xb2", "--rtype", "2"]));
    let report = ok_json(&server, "resv-report", &host_a);
    assert_eq!(report["rtype"], 0);
    assert_eq!(report["regctl"], 1);
}

#[test]
fn io_through_several_paths_and_list_subsys() {
    let server = Server::start("cli-paths");
    let dead = free_port();
    let (one, two) = (server.io_port, server.second_io_port);
    let paths = format!("tcp://127.0.0.1:{one},127.0.0.1:{two}/{NQN}");
    let data = server.dir.join("data");
    let back = server.dir.join("back");
    // 640 KiB: more than one command, so the commands spread over both paths.
    let content = pattern(640 * 1024, 5);
    std::fs::write(&data, &content).unwrap();
    let (data_path, back_path) = (data.to_str().unwrap(), back.to_str().unwrap());
    for policy in ["round-robin", "queue-depth"] {
        let written = sluice(&["write", &paths, "--iopolicy", policy, "-b", "64", "-d", data_path]);
        assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    }
    // Read back through both paths (-a list, -s for the entry without a port), then
    // through one: the same bytes.
    let list = format!("127.0.0.1,127.0.0.1:{two}");
    let read =
        sluice(&["read", "-a", &list, "-s", &one.to_string(), "-n", NQN, "-b", "64", "-z", "655360", "-d", back_path]);
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    assert_eq!(std::fs::read(&back).unwrap(), content);
    let read = sluice(&["read", &server.url(), "-b", "64", "-z", "655360", "-d", back_path]);
    assert!(read.status.success());
    assert_eq!(std::fs::read(&back).unwrap(), content);
    // Compare, flush and verify through the paths, one of them dead: the live one
    // serves and the dead one is named.
    let with_dead = format!("tcp://127.0.0.1:{dead},127.0.0.1:{two}/{NQN}");
    let compared = sluice(&["compare", &with_dead, "-b", "64", "-z", "655360", "-d", data_path]);
    assert!(compared.status.success(), "{}", String::from_utf8_lossy(&compared.stderr));
    assert!(String::from_utf8_lossy(&compared.stderr).contains(&format!("path 127.0.0.1:{dead} is unreachable")));
    let mut changed = content.clone();
    changed[300_000] ^= 1;
    std::fs::write(&data, &changed).unwrap();
    assert_fails(&sluice(&["compare", &paths, "-b", "64", "-z", "655360", "-d", data_path]), 1, &["Compare Failure"]);
    for subcommand in [vec!["flush"], vec!["verify", "-b", "64", "-c", "15"]] {
        let mut args = subcommand.clone();
        args.push(&paths);
        let result = sluice(&args);
        assert!(result.status.success(), "{subcommand:?}: {}", String::from_utf8_lossy(&result.stderr));
    }

    // list-subsys: each path live or unreachable, in the order given.
    let three = format!("tcp://127.0.0.1:{one},127.0.0.1:{two},127.0.0.1:{dead}/{NQN}");
    let listed = sluice(&["list-subsys", &three, "-o", "json"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let json: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let subsystem = &json[0]["Subsystems"][0];
    assert_eq!(subsystem["NQN"], NQN);
    let states: Vec<&str> =
        subsystem["Paths"].as_array().unwrap().iter().map(|path| path["State"].as_str().unwrap()).collect();
    assert_eq!(states, ["live", "live", "unreachable"]);
    assert_eq!(subsystem["Paths"][1]["Address"], format!("traddr=127.0.0.1,trsvcid={two}"));
    let text = sluice(&["list-subsys", &three]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with(NQN) && text.contains(&format!(" +- tcp traddr=127.0.0.1,trsvcid={one} cntlid=")),
        "{text}"
    );
    assert_fails(&sluice(&["list-subsys", &format!("tcp://127.0.0.1:{dead}/{NQN}")]), 1, &["no path to"]);

    // A subcommand that talks to one controller refuses several addresses.
    assert_fails(&sluice(&["id-ctrl", &paths]), 2, &["2 addresses given", "list-subsys"]);
}

#[test]
fn compare_matches_written_data_and_reports_a_difference() {
    let server = Server::start("cli-compare");
    let data = server.dir.join("data");
    let content: Vec<u8> = (0..2048u32).map(|index| (index * 7 % 251) as u8).collect();
    std::fs::write(&data, &content).unwrap();
    let path = data.to_str().unwrap();
    ok(&server, "write", &["-b", "8", "-c", "3", "-z", "2048", "-d", path]);
    let equal = ok_json(&server, "compare", &["-b", "8", "-c", "3", "-z", "2048", "-d", path]);
    assert_eq!(equal["result"], "success");
    let mut changed = content.clone();
    changed[1500] ^= 0xFF;
    std::fs::write(&data, &changed).unwrap();
    let mut compare: Vec<String> = vec!["compare".into()];
    compare.extend(server.target());
    compare.extend(["-b", "8", "-c", "3", "-z", "2048", "-d", path].map(String::from));
    assert_fails(&sluice(&compare), 1, &["Compare Failure", "blocks 8..=11"]);
}

#[test]
fn reservations_with_ptpl_survive_a_killed_target() {
    let dir = scratch_dir("cli-ptpl");
    let state = dir.join("state");
    let host_a = [
        "-q",
        "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-00000000000a",
        "-I",
        "aaaaaaaa-0000-4000-8000-00000000000a",
    ];
    let host_b = [
        "-q",
        "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-00000000000b",
        "-I",
        "bbbbbbbb-0000-4000-8000-00000000000b",
    ];
    let start = |port: u16| -> Option<ServeProcess> {
        let config = dir.join("sluice.toml");
        std::fs::write(
            &config,
            format!(
                "[[listener]]\naddress = \"127.0.0.1:{port}\"\n\n[[subsystem]]\nnqn = \"{NQN}\"\nallow_any_host = true\n\n\
                 [[subsystem.namespace]]\nnsid = 1\nbackend = \"ram\"\nsize = \"1MiB\"\n\n[runtime]\nthreads = 1\n\n\
                 [target]\nstate_dir = \"{}\"\n",
                state.display()
            ),
        )
        .unwrap();
        ServeProcess::start(&config, &[])
    };
    let (port, mut first) = (0..5)
        .find_map(|_| {
            let port = free_port();
            start(port).map(|process| (port, process))
        })
        .expect("serve");
    let run = |port: u16, subcommand: &str, host: &[&str], extra: &[&str]| -> Output {
        let mut args: Vec<String> = vec![
            subcommand.into(),
            "-a".into(),
            "127.0.0.1".into(),
            "--trsvcid".into(),
            port.to_string(),
            "-n".into(),
            NQN.into(),
        ];
        args.extend(host.iter().chain(extra).map(|arg| arg.to_string()));
        sluice(&args)
    };
    let ok_run = |port: u16, subcommand: &str, host: &[&str], extra: &[&str]| -> String {
        let output = run(port, subcommand, host, extra);
        assert!(output.status.success(), "{subcommand}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    ok_run(port, "resv-register", &host_a, &["--nrkey", "0xa1", "--cptpl", "3"]);
    ok_run(port, "resv-register", &host_b, &["--nrkey", "0xb2"]);
    ok_run(port, "resv-acquire", &host_a, &["-c", "0xa1", "--rtype", "1"]);
    assert!(std::fs::read_dir(state.join("reservations")).unwrap().count() == 1, "one record file");

    // SIGKILL: nothing is flushed on the way out.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    let _second = (0..50)
        .find_map(|_| {
            start(port).or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                None
            })
        })
        .expect("restart on the same port");
    let report: Value = serde_json::from_str(&ok_run(port, "resv-report", &host_b, &["-o", "json"])).unwrap();
    assert_eq!(report["rtype"], 1, "{report}");
    assert_eq!(report["regctl"], 2, "{report}");
    assert_eq!(report["ptpls"], 1, "{report}");
    let block = dir.join("block");
    std::fs::write(&block, vec![0u8; 512]).unwrap();
    assert_fails(
        &run(port, "write", &host_b, &["-b", "0", "-c", "0", "-z", "512", "-d", block.to_str().unwrap()]),
        1,
        &["Reservation Conflict"],
    );
    ok_run(port, "resv-release", &host_a, &["-c", "0xa1", "--rtype", "1"]);
    ok_run(port, "write", &host_b, &["-b", "0", "-c", "0", "-z", "512", "-d", block.to_str().unwrap()]);
}

#[test]
fn copy_moves_ranges_on_the_target_in_order() {
    let server = Server::start("cli-copy");
    let data = server.dir.join("data");
    let content: Vec<u8> = (0..2048u32).map(|index| (index * 13 % 253) as u8).collect();
    std::fs::write(&data, &content).unwrap();
    let path = data.to_str().unwrap();
    ok(&server, "write", &["-b", "16", "-c", "3", "-z", "2048", "-d", path]);
    // Blocks 18..=19 then 16..=17 (0's based lengths), to block 100.
    let answer = ok_json(&server, "copy", &["--sdlba", "100", "--slbs", "18,16", "--blocks", "1,1"]);
    assert_eq!(answer["result"], "success");
    let swapped = [&content[1024..2048], &content[..1024]].concat();
    std::fs::write(&data, &swapped).unwrap();
    ok(&server, "compare", &["-b", "100", "-c", "3", "-z", "2048", "-d", path]);
    let mut copy: Vec<String> = vec!["copy".into()];
    copy.extend(server.target());
    copy.extend(["--sdlba", "0", "--slbs", "1,2", "--blocks", "0"].map(String::from));
    assert_fails(&sluice(&copy), 2, &["one length per source range"]);
}

#[test]
fn ptpl_on_a_target_without_state_dir_is_refused_saying_what_it_needs() {
    let server = Server::start("cli-ptpl-no-state");
    let mut register: Vec<String> = vec!["resv-register".into()];
    register.extend(server.target());
    register.extend(["--nrkey", "0xa1", "--cptpl", "3"].map(String::from));
    assert_fails(&sluice(&register), 1, &["Invalid Field", "persist reservations through power loss", "state_dir"]);
    // Without CPTPL the same registration succeeds.
    let answer = ok_json(&server, "resv-register", &["--nrkey", "0xa1"]);
    assert_eq!(answer["result"], "success");
}

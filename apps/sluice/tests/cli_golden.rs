//! Golden files of the `sluice` CLI: what every subcommand prints, byte for byte, in
//! text and (where it has one) JSON, on stdout and stderr, with its exit status.
//!
//! Why: issue 45 splits `apps/sluice` into library crates, and its acceptance rule is
//! that the CLI's output does not change. These files are that rule, checked:
//! `tests/golden/<group>/<case>.golden`, one per command line (a subcommand in one
//! output format, or one error). The framing is described in `golden/mod.rs`.
//!
//! - `help_texts_are_unchanged`: `--help` of every subcommand, found by walking the
//!   "Commands:" lists (a subcommand added or lost in the split shows as a missing or
//!   stale golden file), plus `-h` and `--version`.
//! - `commands_without_a_target_are_unchanged`: `config check` / `config default`,
//!   the TLS key tools, and the usage errors of commands whose real output is not
//!   deterministic (bench, stat, report) or that fail before connecting.
//! - `commands_against_a_target_are_unchanged`: one `sluice serve` (RAM namespaces,
//!   a RAM pool, loopback listeners, a private management socket) for every host and
//!   management command, in one fixed order, since each command's output depends on
//!   what ran before it (controller IDs, counters, reservation generations).
//!
//! Only the scratch directory and the TCP ports are normalised (`Placeholders` in
//! `golden/mod.rs`: `<DIR>`, `<io1>` ...); every other input is fixed here (host NQNs
//! and IDs, serial and model numbers, NGUIDs, key material).
//!
//! When a change of output is intended, rewrite the files and review the diff:
//!
//! ```sh
//! SLUICE_UPDATE_GOLDEN=1 cargo test --release -p sluice --test cli_golden
//! git diff apps/sluice/tests/golden
//! ```
//!
//! Not covered, and why: `bench` and `stat` print measurements (their argument errors
//! are covered); `report` writes an HTML file (its error is covered); `ana-log` and
//! `gateway status|import` need a gateway on a Ceph cluster (the refusals of a plain
//! target and import's missing file are covered); `config check` of an rbd backend
//! asks the Ceph cluster, whose answer differs between machines; `gen-tls-key`
//! without `--secret` is random.

mod golden;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use golden::{frame, run_sluice, shell_line, GoldenSet, Placeholders};
use serde_json::{json, Value};
use support::{free_port, scratch_dir, ServeProcess};

/// The subsystem the host commands use: two RAM namespaces of different block sizes.
const GOLDEN: &str = "nqn.2026-11.io.sluice:golden";
/// A subsystem with Namespace Management on a RAM pool (create-ns and friends).
const POOL: &str = "nqn.2026-11.io.sluice:golden-pool";
/// Subsystems the management commands add.
const MANAGED: &str = "nqn.2026-11.io.sluice:golden-managed";
const MANAGED_TWO: &str = "nqn.2026-11.io.sluice:golden-managed-2";
/// Two hosts; their host IDs follow from the UUID in the NQN (as in nvme-cli), so
/// nothing is read from /etc/nvme or /etc/machine-id.
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002";
/// A host the management commands allow and deny (attached to nothing).
const HOST_C: &str = "nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-4000-8000-000000000003";
/// A DH-HMAC-CHAP secret and the TLS key of `TLS_KEY_HEX` (test vectors, not secrets).
const DHCHAP_SECRET: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const TLS_KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const TLS_KEY: &str = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";

/// Runs command lines and checks their golden files.
struct Recorder {
    golden: GoldenSet,
    placeholders: Placeholders,
    /// The scratch directory: the commands' working directory and `<DIR>`.
    directory: PathBuf,
    /// The management socket of the target, once there is one: before each command
    /// the recorder waits until no controller of an earlier command is left (see
    /// `settle`).
    socket: Option<PathBuf>,
}

impl Recorder {
    fn new(name: &str, owned: &[&'static str]) -> Recorder {
        let directory = scratch_dir(name);
        Recorder { golden: GoldenSet::new(owned), placeholders: Placeholders::new(&directory), directory, socket: None }
    }

    /// Runs `sluice TEMPLATE` (placeholders expanded) and checks `tests/golden/NAME.golden`.
    fn record_args(&mut self, name: &str, template: &[&str]) -> Output {
        if let Some(socket) = &self.socket {
            settle(socket);
        }
        let arguments: Vec<String> = template.iter().map(|argument| self.placeholders.expand(argument)).collect();
        let output = run_sluice(&arguments, &self.directory);
        let text = self.placeholders.normalise(&frame(template, &output));
        self.check(name, &text);
        output
    }

    /// Checks a normalised text against its golden file, refusing in update mode to
    /// write one that still holds a port of this run.
    fn check(&mut self, name: &str, text: &str) {
        if self.golden.updating() {
            if let Some((placeholder, port)) = self.placeholders.port_left_in(text) {
                panic!("{name}: port {port} ({placeholder}) is still in the output after normalisation:\n{text}");
            }
        }
        self.golden.check(name, text);
    }

    /// `record_args` with the template split at spaces (no argument here has one).
    fn record(&mut self, name: &str, template: &str) -> Output {
        self.record_args(name, &template.split_whitespace().collect::<Vec<_>>())
    }

    /// `NAME.text` as given and `NAME.json` with `-o json`: for commands that can run
    /// twice with the same outcome.
    fn text_and_json(&mut self, name: &str, template: &str) {
        self.record(&format!("{name}.text"), template);
        self.record(&format!("{name}.json"), &format!("{template} -o json"));
    }

    /// The help of `sluice PATH... --help` as `help/PATH-...`, returning its text.
    fn help(&mut self, path: &[String]) -> String {
        let name = if path.is_empty() { "sluice".to_string() } else { path.join("-") };
        let mut template: Vec<&str> = path.iter().map(String::as_str).collect();
        template.push("--help");
        let output = self.record_args(&format!("help/{name}"), &template);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn finish(self) {
        self.golden.finish();
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

#[test]
fn help_texts_are_unchanged() {
    let mut recorder = Recorder::new("golden-help", &["help"]);
    recorder.record("help/sluice-short", "-h");
    recorder.record("help/version", "--version");
    // Breadth first through the subcommand tree, as each help lists its children.
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let text = recorder.help(&path);
        for child in subcommands(&text) {
            let mut child_path = path.clone();
            child_path.push(child);
            pending.insert(0, child_path);
        }
    }
    recorder.finish();
}

/// The subcommands a help text lists under "Commands:" (clap's own `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn commands_without_a_target_are_unchanged() {
    let mut recorder = Recorder::new("golden-standalone", &["config", "keys", "usage"]);
    recorder.record("config/default.text", "config default");
    // The config inputs are copies in tests/golden/inputs with <DIR> for their paths.
    for input in ["tiered", "pool", "access"] {
        let text = std::fs::read_to_string(golden::golden_root().join(format!("inputs/{input}.toml"))).expect("input");
        std::fs::write(recorder.directory.join(format!("{input}.toml")), recorder.placeholders.expand(&text))
            .expect("write input");
        recorder.record(&format!("config/check-{input}.text"), &format!("config check <DIR>/{input}.toml"));
    }
    std::fs::write(
        recorder.directory.join("cycle.toml"),
        "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[backend]]\nname = \"a\"\nkind = \"raid0\"\nmembers = [\"b\"]\n\
         [[backend]]\nname = \"b\"\nkind = \"raid0\"\nmembers = [\"a\"]\n",
    )
    .expect("write cycle.toml");
    recorder.record("config/check-cycle.text", "config check <DIR>/cycle.toml");
    recorder.record("config/check-missing-file.text", "config check <DIR>/absent.toml");
    recorder.record("config/serve-missing-file.text", "serve --config <DIR>/absent.toml --no-rpc-socket");

    recorder.record("keys/gen-tls-key.text", &format!("gen-tls-key --secret {TLS_KEY_HEX}"));
    recorder.record(
        "keys/gen-tls-key-identity.text",
        &format!("gen-tls-key -s {TLS_KEY_HEX} --hostnqn {HOST_A} --subsysnqn {GOLDEN}"),
    );
    let sha384_secret = format!("{TLS_KEY_HEX}{}", &TLS_KEY_HEX[..32]);
    recorder.record("keys/gen-tls-key-sha384.text", &format!("gen-tls-key -m 2 -s {sha384_secret}"));
    recorder.record("keys/gen-tls-key-bad-secret.text", "gen-tls-key -s 00zz");
    let check = format!("check-tls-key -k {TLS_KEY} -n {HOST_A} -c {GOLDEN}");
    recorder.text_and_json("keys/check-tls-key", &check);
    recorder.record("keys/check-tls-key-format-0.text", &format!("{check} -I 0"));
    recorder.record("keys/check-tls-key-compat.text", &format!("{check} --compat"));
    recorder.record("keys/check-tls-key-bad-key.text", "check-tls-key -k NVMeTLSkey-1:01:AAAA:");

    // Usage errors: clap's and the subcommands' own, all before any connection.
    let usage = [
        ("unknown-flag", "id-ctrl --bogus"),
        ("unknown-transport", "id-ctrl -t rdma -a 127.0.0.1 -n nqn.x"),
        ("get-log-without-log-id", "get-log -a 127.0.0.1 -n nqn.x"),
        ("not-a-number", "id-ns -a 127.0.0.1 -n nqn.x -N x"),
        ("not-a-tcp-url", "list rdma://1.2.3.4/nqn"),
        ("url-and-traddr", "list tcp://127.0.0.1/x -a 127.0.0.1"),
        ("no-target-address", "id-ctrl -n nqn.x"),
        ("no-subsystem-nqn", "id-ctrl -a 127.0.0.1"),
        ("discover-with-nqn", "discover tcp://127.0.0.1:8009/nqn.x"),
        ("write-unreadable-input", "write tcp://127.0.0.1:9/nqn.x -d <DIR>/absent-input"),
        ("get-feature-bad-sel", "get-feature -f 7 -s 4 -a 127.0.0.1 -n nqn.x"),
        ("several-addresses-for-one-controller", "id-ctrl tcp://127.0.0.1:1,127.0.0.1:2/nqn.x"),
        ("bad-host-id", "id-ctrl -a 127.0.0.1 -n nqn.x -I nope"),
        ("bad-dhchap-secret", "id-ctrl -a 127.0.0.1 -n nqn.x -S DHHC-1:00:AAAA:"),
        ("read-json-to-stdout", "read tcp://127.0.0.1:9/nqn.x -o json"),
        ("copy-ranges-mismatch", "copy tcp://127.0.0.1:9/nqn.x --sdlba 0 --slbs 1,2 --blocks 0"),
        ("verify-too-many-blocks", "verify tcp://127.0.0.1:9/nqn.x -b 0 -c 65536"),
        ("create-ns-ncap-above-nsze", "create-ns tcp://127.0.0.1:9/nqn.x --nsze 100 --ncap 200"),
        ("create-ns-block-size-not-power-of-two", "create-ns tcp://127.0.0.1:9/nqn.x --nsze 100 -b 1000"),
        ("attach-ns-every-namespace", "attach-ns tcp://127.0.0.1:9/nqn.x -N 0xffffffff"),
        ("bench-unknown-suite", "bench --suite nope"),
        ("bench-bad-duration", "bench --duration soon"),
        ("stat-bad-interval", "stat --interval 0"),
        ("report-missing-result", "report <DIR>/absent.json -o <DIR>/report.html"),
        ("rpc-params-not-json", "rpc ns_list not-json --socket <DIR>/absent.sock"),
        ("manage-socket-absent", "subsystem list --socket <DIR>/absent.sock"),
        ("manage-api-without-files", "subsystem list --api https://127.0.0.1:9"),
        ("manage-missing-nqn", "ns add"),
        ("gateway-import-missing-file", "gateway import <DIR>/absent.toml"),
        ("unknown-subcommand", "frobnicate"),
    ];
    for (name, template) in usage {
        recorder.record(&format!("usage/{name}.text"), template);
    }
    recorder.finish();
}

/// The target's config: two I/O listeners (two paths), a discovery listener, a RAM
/// backend nothing uses ("spare", for `ns add --device` and `backend remove`), a RAM
/// pool, the host commands' subsystem and the Namespace Management one.
const TARGET_CONFIG: &str = r#"# Written by cli_golden.rs: the management API keeps this comment.
[[listener]]
address = "127.0.0.1:<io1>"

[[listener]]
address = "127.0.0.1:<io2>"

[[listener]]
address = "127.0.0.1:<dsc>"
discovery_only = true

[[backend]]
name = "spare"
kind = "ram"
size = "8MiB"

[[backend]]
name = "scratch-device"
kind = "ram"
size = "64MiB"

[[pool]]
name = "scratch"
device = "scratch-device"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:golden"
allow_any_host = true
serial = "SLUICEGOLDEN0001"
model = "Sluice golden test"

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

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:golden-pool"
allow_any_host = true
serial = "SLUICEGOLDEN0002"
pool = "scratch"

[runtime]
threads = 1
"#;

/// A port that is free now and five digits wide, so that its placeholder (also five
/// characters) keeps table columns where they are. Linux hands out 32768-60999 by
/// default; other ranges are retried.
fn five_digit_free_port(taken: &[u16]) -> u16 {
    (0..1000)
        .map(|_| free_port())
        .find(|port| *port >= 10_000 && !taken.contains(port))
        .expect("a free port of five digits")
}

/// Starts `sluice serve` on fresh ports (retrying if one was taken meanwhile) and
/// records its startup lines. The ports are registered as `<io1>`, `<io2>`, `<dsc>`,
/// and `<off>`: one nothing listens on.
fn start_target(recorder: &mut Recorder) -> ServeProcess {
    let config = recorder.directory.join("sluice.toml");
    let socket = recorder.directory.join("sluice.sock");
    let template = ["serve", "--config", "<DIR>/sluice.toml", "--rpc-socket", "<DIR>/sluice.sock"];
    for _ in 0..5 {
        let mut ports = Vec::new();
        for _ in 0..4 {
            ports.push(five_digit_free_port(&ports));
        }
        let mut placeholders = Placeholders::new(&recorder.directory);
        for (placeholder, port) in ["<io1>", "<io2>", "<dsc>", "<off>"].into_iter().zip(&ports) {
            placeholders.add_port(placeholder, *port);
        }
        std::fs::write(&config, placeholders.expand(TARGET_CONFIG)).expect("write the target config");
        let Some(process) = ServeProcess::start(&config, &["--rpc-socket", &socket.display().to_string()]) else {
            continue;
        };
        recorder.placeholders = placeholders;
        recorder.socket = Some(socket);
        // serve runs on: its stdout up to the ready line is what a person starting it
        // reads (log lines go to stderr, and are not compared).
        let lines = process.stdout_lines.lock().expect("stdout lines").join("\n");
        let text = format!("{}\n(running)\n--- stdout up to the ready line\n{lines}\n", shell_line(&template));
        let text = recorder.placeholders.normalise(&text);
        recorder.check("serve/startup.text", &text);
        return process;
    }
    panic!("sluice serve did not become ready on five sets of ports");
}

/// One JSON-RPC call on the management socket.
fn rpc(socket: &Path, method: &str, params: Value) -> Value {
    let stream = UnixStream::connect(socket).expect("connect to the management socket");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let request = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    writeln!(&stream, "{request}").expect("send the request");
    let mut response = String::new();
    BufReader::new(&stream).read_line(&mut response).expect("a response line");
    serde_json::from_str(&response).expect("the response is JSON")
}

/// Waits until no subsystem has a controller. A host command's controller goes away
/// when its connection closes, which the target sees a moment after the command
/// exits; outputs that list live controllers (`list-ctrl`, `subsystem show`, the
/// counts of disconnected controllers) would otherwise depend on that moment.
fn settle(socket: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = rpc(socket, "subsystem_list", json!({}));
        let subsystems = reply["result"]["subsystems"].as_array().cloned().unwrap_or_default();
        if subsystems.iter().all(|subsystem| subsystem["controllers"] == 0) {
            return;
        }
        assert!(Instant::now() < deadline, "controllers of earlier commands still connected after 10 s: {reply}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The target options of a host command: subsystem `nqn` as `host`, port by its long
/// name (get-feature's -s is --sel).
fn on(nqn: &str, host: &str) -> String {
    format!("-a 127.0.0.1 --trsvcid <io1> -n {nqn} -q {host}")
}

#[test]
fn commands_against_a_target_are_unchanged() {
    let mut recorder = Recorder::new("golden-target", &["serve", "host", "manage"]);
    // Text data, so that `read` to stdout is readable in its golden file.
    let data: Vec<u8> = (0..2048).map(|index| b"abcdefghijklmnopqrstuvwxyz0123456789\n"[index % 37]).collect();
    std::fs::write(recorder.directory.join("blocks.txt"), &data).expect("write blocks.txt");
    let mut changed = data.clone();
    changed[1500] = b'#';
    std::fs::write(recorder.directory.join("changed.txt"), &changed).expect("write changed.txt");
    let _target = start_target(&mut recorder);
    host_commands(&mut recorder);
    reservation_commands(&mut recorder);
    namespace_commands(&mut recorder);
    management_commands(&mut recorder);
    recorder.finish();
}

/// Identify, logs, features and I/O on subsystem GOLDEN as host A.
fn host_commands(recorder: &mut Recorder) {
    let a = on(GOLDEN, HOST_A);
    recorder.text_and_json("host/discover", &format!("discover -a 127.0.0.1 -s <dsc> -q {HOST_A}"));
    recorder.text_and_json("host/connect", &format!("connect tcp://127.0.0.1:<io1>/{GOLDEN} -q {HOST_A}"));
    recorder.record("host/connect-two-queues.json", &format!("connect {a} -i 2 -o json"));
    recorder.text_and_json("host/list", &format!("list {a}"));
    recorder.text_and_json("host/list-ns", &format!("list-ns {a}"));
    recorder.text_and_json("host/id-ctrl", &format!("id-ctrl {a}"));
    recorder.record("host/id-ctrl-human.text", &format!("id-ctrl {a} -H"));
    recorder.text_and_json("host/id-ns", &format!("id-ns {a}"));
    recorder.text_and_json("host/id-ns-4k", &format!("id-ns {a} --namespace-id 0x2"));
    recorder.record("host/id-ns-human.text", &format!("id-ns {a} -N 2 -H"));
    recorder.text_and_json("host/get-feature", &format!("get-feature {a} -f 7"));
    recorder.record("host/get-feature-human.text", &format!("get-feature {a} -f 0x07 -H"));
    recorder.record("host/get-feature-keep-alive.text", &format!("get-feature {a} -f 0xf --sel 0"));
    recorder.record("host/get-feature-unsupported.text", &format!("get-feature {a} -f 0x7e"));
    recorder.record("host/set-feature.text", &format!("set-feature {a} -f 0x0b -V 0x100"));
    recorder.record("host/set-feature.json", &format!("set-feature {a} -f 1 -V 3 -o json"));
    recorder.record("host/set-feature-queues-refused.text", &format!("set-feature {a} -f 7 -V 0x10001"));

    recorder.text_and_json("host/write", &format!("write {a} -b 8 -c 3 -d <DIR>/blocks.txt"));
    recorder.record("host/read-to-stdout.text", &format!("read {a} -b 8 -c 3"));
    recorder.record("host/read-cut.text", &format!("read {a} -b 8 -z 100"));
    recorder.text_and_json("host/read-to-file", &format!("read {a} -b 8 -c 3 -d <DIR>/read.txt"));
    recorder.text_and_json("host/compare", &format!("compare {a} -b 8 -c 3 -d <DIR>/blocks.txt"));
    recorder.text_and_json("host/compare-failure", &format!("compare {a} -b 8 -c 3 -d <DIR>/changed.txt"));
    recorder.text_and_json("host/copy", &format!("copy {a} --sdlba 100 --slbs 8,10 --blocks 1,1"));
    recorder.text_and_json("host/flush", &format!("flush {a}"));
    recorder.text_and_json("host/verify", &format!("verify {a} -b 0 -c 7"));
    recorder.record("host/write-4k-fua.json", &format!("write {a} -N 2 -b 10 -f -d <DIR>/blocks.txt -o json"));
    // Two paths, then one of them dead: the I/O goes through the live one.
    let paths = format!("tcp://127.0.0.1:<io1>,127.0.0.1:<io2>/{GOLDEN} -q {HOST_A}");
    recorder.record(
        "host/write-two-paths.text",
        &format!("write {paths} --iopolicy round-robin -b 200 -d <DIR>/blocks.txt"),
    );
    let dead_path = format!("tcp://127.0.0.1:<off>,127.0.0.1:<io2>/{GOLDEN} -q {HOST_A}");
    recorder.record("host/compare-one-path-dead.text", &format!("compare {dead_path} -b 200 -d <DIR>/blocks.txt"));
    let three = format!("tcp://127.0.0.1:<io1>,127.0.0.1:<io2>,127.0.0.1:<off>/{GOLDEN} -q {HOST_A}");
    recorder.text_and_json("host/list-subsys", &format!("list-subsys {three}"));
    let dead_only = format!("tcp://127.0.0.1:<off>/{GOLDEN} -q {HOST_A}");
    recorder.record("host/list-subsys-none-live.text", &format!("list-subsys {dead_only}"));

    recorder.record("host/get-log-smart.text", &format!("get-log {a} -i 2 -l 512"));
    recorder.record("host/get-log-smart.json", &format!("get-log {a} --log-id 0x02 --log-len 16 --lpo 0 -o json"));
    recorder.record("host/get-log-raw.binary", &format!("get-log {a} -i 2 -l 64 -b"));
    recorder.record("host/get-log-error.text", &format!("get-log {a} -i 1 -l 128"));
    recorder.text_and_json("host/smart-log", &format!("smart-log {a}"));
    recorder.record("host/smart-log-human.text", &format!("smart-log {a} -H -N 1"));
    recorder.text_and_json("host/ana-log-not-reported", &format!("ana-log {a}"));

    // Failures that need a target to answer.
    recorder.record("host/unreachable.text", &format!("id-ctrl -a 127.0.0.1 -s <off> -n {GOLDEN} -q {HOST_A}"));
    recorder.record("host/discover-unreachable.text", &format!("discover -a 127.0.0.1 -s <off> -q {HOST_A}"));
    recorder.record("host/wrong-nqn.text", &format!("id-ctrl {}", on("nqn.2026-11.io.sluice:nope", HOST_A)));
    recorder.record("host/read-inactive-namespace.text", &format!("read {a} -N 7"));
    recorder.record("host/id-ns-inactive.text", &format!("id-ns {a} -N 7"));
    recorder.record("host/read-past-the-end.text", &format!("read {a} -b 32768 -c 0"));
}

/// Reservations on namespace 1 of GOLDEN between hosts A and B.
fn reservation_commands(recorder: &mut Recorder) {
    let (a, b) = (on(GOLDEN, HOST_A), on(GOLDEN, HOST_B));
    recorder.record("host/resv-register.text", &format!("resv-register {a} --nrkey 0xa1"));
    recorder.record("host/resv-register.json", &format!("resv-register {b} -k 0xb2 -o json"));
    recorder.record("host/resv-register-ptpl-refused.text", &format!("resv-register {b} -c 0xb2 -k 0xb2 -r 2 -p 3"));
    recorder.record("host/resv-acquire.text", &format!("resv-acquire {a} -c 0xa1 --rtype 1"));
    recorder.text_and_json("host/resv-report", &format!("resv-report {b}"));
    recorder.record("host/resv-acquire-conflict.text", &format!("resv-acquire {b} -c 0xb2 --rtype 1"));
    recorder.record("host/write-reservation-conflict.text", &format!("write {b} -b 0 -c 0 -z 512 -d <DIR>/blocks.txt"));
    let preempt = format!("resv-acquire {b} -c 0xb2 -p 0xa1 --rtype 2 --racqa 1 -o json");
    recorder.record("host/resv-acquire-preempt.json", &preempt);
    recorder.record("host/verify-reservation-conflict.text", &format!("verify {a} -b 0 -c 7"));
    recorder.record("host/resv-release.text", &format!("resv-release {b} -c 0xb2 --rtype 2"));
    recorder.record("host/resv-register-again.text", &format!("resv-register {a} --nrkey 0xa2"));
    recorder.record("host/resv-release-clear.json", &format!("resv-release {b} -c 0xb2 --rrela 1 -o json"));
    recorder.record("host/resv-report-empty.text", &format!("resv-report {a}"));
}

/// Namespace Management and Attachment on the pool subsystem as host A.
fn namespace_commands(recorder: &mut Recorder) {
    let a = on(POOL, HOST_A);
    recorder.record("host/create-ns.text", &format!("create-ns {a} --nsze 2048"));
    recorder.record("host/create-ns.json", &format!("create-ns {a} --nsze 4096 -c 1024 -o json"));
    recorder.record("host/create-ns-too-big.text", &format!("create-ns {a} --nsze 0x100000"));
    recorder.record("host/create-ns-no-such-format.text", &format!("create-ns {a} --nsze 100 -b 4096"));
    recorder.record("host/attach-ns.text", &format!("attach-ns {a} -N 1"));
    recorder.record("host/attach-ns.json", &format!("attach-ns {a} -N 2 -o json"));
    recorder.record("host/attach-ns-again.text", &format!("attach-ns {a} -N 1"));
    recorder.record("host/attach-ns-bad-controller.text", &format!("attach-ns {a} -N 1 -c 0x7fff"));
    recorder.text_and_json("host/list-ctrl", &format!("list-ctrl {a}"));
    recorder.record("host/list-ctrl-namespace.text", &format!("list-ctrl {a} -N 1"));
    recorder.record("host/list-ctrl-no-pool.text", &format!("list-ctrl {}", on(GOLDEN, HOST_A)));
    recorder.record("host/detach-ns.text", &format!("detach-ns {a} -N 1"));
    recorder.record("host/detach-ns.json", &format!("detach-ns {a} -N 2 -o json"));
    recorder.record("host/detach-ns-not-attached.text", &format!("detach-ns {a} -N 1"));
    recorder.record("host/delete-ns.text", &format!("delete-ns {a} -N 1"));
    recorder.record("host/delete-ns.json", &format!("delete-ns {a} -N 2 -o json"));
    recorder.record("host/delete-ns-absent.text", &format!("delete-ns {a} -N 9"));
    recorder.record("host/create-ns-no-pool.text", &format!("create-ns {} --nsze 8", on(GOLDEN, HOST_A)));
}

/// The management commands through the socket, in an order where each one's answer
/// follows from the ones before.
fn management_commands(recorder: &mut Recorder) {
    let socket = "--socket <DIR>/sluice.sock";
    let mut manage = |name: &str, command: &str| {
        recorder.record(&format!("manage/{name}"), &format!("{command} {socket}"));
    };
    manage("subsystem-list.text", "subsystem list");
    manage("subsystem-list.json", "subsystem list -o json");
    manage("subsystem-show.text", &format!("subsystem show {GOLDEN}"));
    manage("subsystem-show.json", &format!("subsystem show {GOLDEN} -o json"));
    manage("subsystem-add.text", &format!("subsystem add {MANAGED} --serial SLUICEGOLDEN0003 --model Managed"));
    manage(
        "subsystem-add.json",
        &format!("subsystem add {MANAGED_TWO} --serial SLUICEGOLDEN0004 --allow-any-host -o json"),
    );
    manage("subsystem-add-duplicate.text", &format!("subsystem add {MANAGED}"));
    manage("subsystem-add-duplicate.json", &format!("subsystem add {MANAGED} -o json"));
    manage("subsystem-show-absent.text", "subsystem show nqn.2026-11.io.sluice:absent");

    manage("ns-add.text", &format!("ns add {MANAGED} --backend ram --size 32MiB"));
    manage("ns-add.json", &format!("ns add {MANAGED} -b null -s 8MiB --block-size 4096 -N 5 -o json"));
    manage(
        "ns-add-pool.text",
        &format!(
            "ns add {MANAGED} --pool scratch --size 8MiB -N 2 --nguid 00112233445566778899aabbccddeeff \
             --uuid 00112233-4455-6677-8899-aabbccddeeff"
        ),
    );
    manage("ns-add-device.json", &format!("ns add {MANAGED} --device spare -N 3 --hosts= -o json"));
    manage("ns-add-without-size.text", &format!("ns add {MANAGED} --backend ram"));
    manage("ns-add-nsid-taken.json", &format!("ns add {MANAGED} --backend ram --size 1MiB -N 1 -o json"));
    manage("ns-list.text", &format!("ns list {MANAGED}"));
    manage("ns-list.json", &format!("ns list {MANAGED} -o json"));
    manage("ns-qos.text", &format!("ns qos {MANAGED} 1 --rw-ios-per-second 5000"));
    manage("ns-qos-host-not-allowed.text", &format!("ns qos {MANAGED} 1 --host {HOST_B} --rw-mbytes-per-second 10"));
    manage("host-allow.text", &format!("host allow {MANAGED} {HOST_A} --dhchap-secret {DHCHAP_SECRET}"));
    manage("host-allow.json", &format!("host allow {MANAGED} {HOST_B} --tls-key {TLS_KEY} -o json"));
    manage("ns-qos-host.json", &format!("ns qos {MANAGED} 1 --host {HOST_B} --rw-mbytes-per-second 10 -o json"));
    manage("host-list.text", &format!("host list {MANAGED}"));
    manage("host-list.json", &format!("host list {MANAGED} -o json"));
    manage("ns-attach.text", &format!("ns attach {MANAGED} 3 --host {HOST_A}"));
    manage("ns-attach.json", &format!("ns attach {MANAGED} 3 --host {HOST_B} -o json"));
    manage("ns-detach.text", &format!("ns detach {MANAGED} 3 --host {HOST_B}"));
    manage("ns-detach.json", &format!("ns detach --nqn {MANAGED} --nsid 3 --host {HOST_A} -o json"));
    // From a namespace every allowed host sees: the list becomes the other hosts.
    manage("ns-detach-from-every-host.text", &format!("ns detach {MANAGED} 1 --host {HOST_A}"));
    manage("ns-resize.text", &format!("ns resize {MANAGED} 2 --size 16MiB"));
    manage("ns-resize-unchanged.json", &format!("ns resize {MANAGED} 2 --size 16MiB -o json"));
    manage("ns-resize-ram.text", &format!("ns resize {MANAGED} 1 --size 64MiB"));
    manage("ns-list-after.text", &format!("ns list {MANAGED}"));
    manage("ns-qos-clear.json", &format!("ns qos {MANAGED} 1 --clear -o json"));
    manage("host-deny-attached.text", &format!("host deny {MANAGED} {HOST_B}"));
    manage("host-deny-attached.json", &format!("host deny {MANAGED} {HOST_B} -o json"));
    manage("host-allow-update.text", &format!("host allow {MANAGED} {HOST_B}"));
    manage("host-allow-third.text", &format!("host allow {MANAGED} {HOST_C}"));
    manage("host-deny.text", &format!("host deny {MANAGED} {HOST_C}"));
    manage("host-allow-third-again.json", &format!("host allow {MANAGED} {HOST_C} -o json"));
    manage("host-deny.json", &format!("host deny {MANAGED} {HOST_C} -o json"));
    manage("host-deny-absent.text", &format!("host deny {MANAGED} {HOST_C}"));

    manage("listener-list.text", "listener list");
    manage("listener-list.json", "listener list -o json");
    manage("listener-add-in-use.text", "listener add 127.0.0.1:<io1>");
    let taken: Vec<u16> = ["<io1>", "<io2>", "<dsc>", "<off>"].map(|name| recorder.placeholders.port(name)).to_vec();
    recorder.placeholders.add_port("<new>", five_digit_free_port(&taken));
    let mut manage = |name: &str, command: &str| {
        recorder.record(&format!("manage/{name}"), &format!("{command} {socket}"));
    };
    manage("listener-add.text", "listener add 127.0.0.1:<new>");
    manage("listener-list-added.text", "listener list");
    manage("listener-remove.text", "listener remove 127.0.0.1:<new>");
    manage("listener-add.json", "listener add 127.0.0.1:<new> --discovery-only -o json");
    manage("listener-remove.json", "listener remove 127.0.0.1:<new> -o json");
    manage("listener-add-tls.text", "listener add 127.0.0.1:<new> --tls required");
    manage("listener-list-tls.text", "listener list");
    manage("listener-remove-tls.text", "listener remove 127.0.0.1:<new>");
    manage("listener-remove-absent.text", "listener remove 127.0.0.1:<new>");

    manage("backend-list.text", "backend list");
    manage("backend-list.json", "backend list -o json");
    manage("pool-list.text", "pool list");
    manage("pool-list.json", "pool list -o json");
    manage("backend-remove-in-use.text", "backend remove spare");
    manage("ns-remove.text", &format!("ns remove {MANAGED} 3"));
    manage("backend-remove.text", "backend remove spare");
    manage("backend-remove-absent.json", "backend remove spare -o json");
    manage("ns-remove.json", &format!("ns remove {MANAGED} 5 -o json"));
    manage("ns-remove-absent.text", &format!("ns remove {MANAGED} 9"));
    manage("limits-show.text", "limits show");
    manage("limits-show.json", "limits show -o json");
    manage("gateway-status-not-a-gateway.text", "gateway status");
    manage("gateway-status-not-a-gateway.json", "gateway status -o json");
    manage("subsystem-show-managed.text", &format!("subsystem show {MANAGED}"));
    manage("subsystem-show-managed.json", &format!("subsystem show {MANAGED} -o json"));
    manage("subsystem-list-after.text", "subsystem list");

    manage("rpc-methods.text", "rpc rpc_methods");
    manage("rpc-config-show.text", "rpc config_show");
    manage("rpc-target-show.text", "rpc target_show");
    manage("rpc-unknown-method.text", "rpc no_such_method");
    manage("rpc-missing-param.text", "rpc ns_list");
    recorder.record_args(
        "manage/rpc-ns-list.text",
        &["rpc", "ns_list", &format!("{{\"nqn\": \"{MANAGED_TWO}\"}}"), "--socket", "<DIR>/sluice.sock"],
    );
    let mut manage = |name: &str, command: &str| {
        recorder.record(&format!("manage/{name}"), &format!("{command} {socket}"));
    };
    manage("subsystem-remove.text", &format!("subsystem remove {MANAGED_TWO}"));
    manage("subsystem-remove.json", &format!("subsystem remove {MANAGED} -o json"));
    manage("subsystem-remove-absent.text", &format!("subsystem remove {MANAGED}"));
    // What the changes left in the config file, as `config check` reads it.
    recorder.record("manage/config-check-after.text", "config check <DIR>/sluice.toml");
}

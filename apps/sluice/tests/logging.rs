//! `--log-format`: `sluice --log-format json serve` writes one JSON object per line
//! on stderr (tracing-subscriber's JSON formatter: timestamp, level, fields.message,
//! target), with no DH-HMAC-CHAP secret in it even at the debug level while hosts
//! authenticate; a value other than text or json is a usage error naming both.
//! Every wait is bounded.

mod support;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use serde_json::Value;

use support::{on_a_free_port, scratch_dir, sluice, wait_until_ready, READY_LINE, SLUICE};

const NQN: &str = "nqn.2026-11.io.sluice:logging";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:6c0f5b1e-8a7d-4a38-9d51-0c2a3f4e5d61";
/// Longest `sluice serve` may take to exit after SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(20);

fn dhchap_secret(byte: u8) -> String {
    nvme_host::Secret::from_key(&[byte; 32], None).expect("secret").to_representation().to_string()
}

fn config_text(port: u16, secret: &str) -> String {
    format!(
        r#"[[listener]]
address = "127.0.0.1:{port}"

[[subsystem]]
nqn = "{NQN}"

[[subsystem.host]]
nqn = "{HOST}"
dhchap_secret = "{secret}"

[[subsystem.namespace]]
nsid = 1
backend = "ram"
size = "16MiB"

[runtime]
threads = 1
poll_mode = "sleep"
"#
    )
}

/// `sluice --log-format json --log-level debug serve`, stdout collected by a thread,
/// stderr in a file; killed when dropped.
struct JsonServer {
    child: Child,
    port: u16,
    log: PathBuf,
    stdout: Arc<Mutex<Vec<String>>>,
}

impl JsonServer {
    fn start(dir: &Path, secret: &str) -> JsonServer {
        on_a_free_port(|port| {
            let config = dir.join("sluice.toml");
            std::fs::write(&config, config_text(port, secret)).unwrap();
            let log = dir.join("serve.log");
            let child = Command::new(SLUICE)
                .args(["--log-format", "json", "--log-level", "debug", "serve", "--no-rpc-socket", "--config"])
                .arg(&config)
                .env_remove("SLUICE_LOG")
                .env_remove("SLUICE_LOG_FORMAT")
                .env_remove("NOTIFY_SOCKET")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(File::create(&log).unwrap())
                .spawn()
                .expect("spawn sluice serve");
            let (child, stdout) = wait_until_ready(child)?;
            Some(JsonServer { child, port, log, stdout })
        })
    }

    fn connect(&self, secret: &str) -> Result<Controller, String> {
        let mut options = ConnectOptions::new(([127, 0, 0, 1], self.port).into(), NQN);
        options.host_nqn = HOST.to_string();
        options.io_queues = 1;
        options.command_timeout = Duration::from_secs(10);
        options.connect_timeout = Duration::from_secs(10);
        options.dhchap_secret = Some(secret.parse().expect("a DHHC-1 secret"));
        Controller::connect(options).map_err(|error| error.to_string())
    }

    /// SIGTERM, then waits (bounded) for a clean exit; returns (stdout, stderr).
    fn stop(mut self) -> (String, String) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -TERM");
        let deadline = Instant::now() + STOP_DEADLINE;
        let exit = loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                break exit;
            }
            assert!(Instant::now() < deadline, "sluice serve did not exit within {STOP_DEADLINE:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(exit.success(), "sluice serve exited with {exit:?}");
        // What it printed after "sluice: ready".
        let stdout: Vec<String> = {
            let lines = self.stdout.lock().unwrap();
            lines.iter().skip_while(|line| line.trim() != READY_LINE).skip(1).cloned().collect()
        };
        let mut stderr = String::new();
        File::open(&self.log).unwrap().read_to_string(&mut stderr).unwrap();
        (stdout.join("\n"), stderr)
    }
}

impl Drop for JsonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn json_log_format_writes_one_object_per_line_without_secrets() {
    let dir = scratch_dir("logging-json");
    let secret = dhchap_secret(7);
    let wrong = dhchap_secret(8);
    let server = JsonServer::start(&dir, &secret);

    // Authentication, accepted and refused: the paths that handle the secrets.
    let controller = server.connect(&secret).expect("the host authenticates with its secret");
    drop(controller);
    assert!(server.connect(&wrong).is_err(), "a wrong secret is refused");
    let (stdout, stderr) = server.stop();

    let mut messages = Vec::new();
    let mut host_events = 0;
    for (index, line) in stderr.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("stderr line {} is not JSON ({error}): {line}", index + 1));
        let level = event["level"].as_str().unwrap_or_else(|| panic!("no \"level\" in {line}"));
        assert!(["ERROR", "WARN", "INFO", "DEBUG"].contains(&level), "level {level:?} in {line}");
        assert!(event["timestamp"].is_string(), "no \"timestamp\" in {line}");
        assert!(event["target"].is_string(), "no \"target\" in {line}");
        let message =
            event["fields"]["message"].as_str().unwrap_or_else(|| panic!("no \"fields\".\"message\" in {line}"));
        messages.push(message.to_string());
        // Fields stay structured: the host NQN is a field of its own, not text.
        if event["fields"]["host"] == HOST {
            host_events += 1;
        }
    }
    // SIGTERM is logged at info, the authentication results with the host's NQN.
    assert!(messages.iter().any(|message| message == "stopping"), "no \"stopping\" event in:\n{stderr}");
    assert!(host_events >= 2, "expected the accepted and the refused host in \"fields\".\"host\":\n{stderr}");

    // The secrets, whole or just their key material, appear nowhere.
    for text in [&secret, &wrong] {
        let key = text.trim_start_matches("DHHC-1:").split(':').nth(1).expect("DHHC-1:xx:KEY:");
        for (name, output) in [("stderr", &stderr), ("stdout", &stdout)] {
            assert!(!output.contains(key), "a secret's key appears on {name}:\n{output}");
        }
    }
    assert!(!stderr.contains("DHHC-1"), "a secret appears in the log:\n{stderr}");
}

#[test]
fn an_unknown_log_format_is_a_usage_error_naming_the_accepted_values() {
    let output = sluice(&["--log-format", "xml", "config", "default"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid value 'xml' for '--log-format"), "{stderr}");
    assert!(stderr.contains("[possible values: text, json]"), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing runs: {}", String::from_utf8_lossy(&output.stdout));
}

#[test]
fn text_stays_the_default_and_the_flag_is_global() {
    // After the subcommand too (a global flag); text is the same as no flag.
    for args in [&["config", "default", "--log-format", "text"][..], &["config", "default"][..]] {
        let output = sluice(args);
        assert!(output.status.success(), "sluice {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(String::from_utf8_lossy(&output.stdout).contains("[[listener]]"), "sluice {args:?}");
    }
}

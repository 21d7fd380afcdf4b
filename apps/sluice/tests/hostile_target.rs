//! The `sluice` host subcommands against a broken or hostile target: the fake
//! NVMe/TCP target of the host library's tests (`crates/nvme-host-client/tests/
//! hostile`), which answers as the spec says until a chosen command and then
//! misbehaves every time that command comes. Each case runs the real binary and
//! checks that it exits within its documented bound (`--timeout` +
//! `--ctrl-loss-tmo` per command, connection setup within `--timeout`) with exit
//! status 1 and a message naming what the target did, and that its peak memory
//! (the resident set's high-water mark) stays under [`PEAK_MEMORY_LIMIT_BYTES`].

#[path = "../../../crates/nvme-host-client/tests/hostile/mod.rs"]
mod hostile;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hostile::{Fault, HostileTarget, Misdeed, Trigger};
use nvme_tcp_wire::FatalErrorStatus;

/// The most memory (peak resident set) a `sluice` host subcommand may use against
/// any target here. It needs about 10-20 MiB; before the bounds of issue 50, a
/// namespace list flood took it past 512 MiB.
const PEAK_MEMORY_LIMIT_BYTES: u64 = 64 << 20;

/// `--timeout` in milliseconds: one command's time, and connection setup's.
const TIMEOUT_MS: u64 = 2000;
/// `--ctrl-loss-tmo` in seconds.
const CONTROLLER_LOSS_SECONDS: u64 = 3;

/// What one run of `sluice` did.
struct Run {
    code: Option<i32>,
    elapsed: Duration,
    peak_memory_bytes: u64,
    stderr: String,
}

impl Run {
    /// The `sluice: ...` line (the error), or all of stderr.
    fn message(&self) -> String {
        self.stderr.lines().rev().find(|line| line.starts_with("sluice:")).unwrap_or(&self.stderr).to_string()
    }
}

/// Reaps the child `pid` if it has exited: its exit code (`None` when a signal
/// ended it) and its peak resident memory (ru_maxrss), exact however short it ran.
fn try_reap(pid: u32) -> Option<(Option<i32>, u64)> {
    let mut status = 0;
    // SAFETY: rusage is plain data, all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals of the right types; WNOHANG makes
    // it return at once.
    let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut usage) };
    if reaped != pid as libc::pid_t {
        return None;
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Some((code, u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024))
}

/// Runs `sluice SUBCOMMAND ARGS --timeout .. -l .. --reconnect-delay 0` against
/// `target`; kills it after `limit`.
fn run(subcommand: &str, target: &HostileTarget, args: &[&str], limit: Duration) -> Run {
    let timeout = TIMEOUT_MS.to_string();
    let loss = CONTROLLER_LOSS_SECONDS.to_string();
    let timeouts = ["--timeout", &timeout, "--ctrl-loss-tmo", &loss, "--reconnect-delay", "0"];
    run_with(subcommand, target, &[args, &timeouts].concat(), limit)
}

/// Runs `sluice SUBCOMMAND URL ARGS`; kills it after `limit`.
// The child is reaped by `try_reap` (wait4, for its peak memory), not by std.
#[allow(clippy::zombie_processes)]
fn run_with(subcommand: &str, target: &HostileTarget, args: &[&str], limit: Duration) -> Run {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg(subcommand)
        .arg(target.url())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let (code, peak) = loop {
        if let Some(reaped) = try_reap(child.id()) {
            break reaped;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            std::thread::sleep(Duration::from_millis(100));
            break try_reap(child.id()).unwrap_or((None, 0));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let run =
        Run { code, elapsed: started.elapsed(), peak_memory_bytes: peak, stderr: reader.join().unwrap_or_default() };
    eprintln!(
        "sluice {subcommand} ({:?}): exit {:?} after {:?}, peak {:.1} MiB: {}",
        target_fault(target),
        run.code,
        run.elapsed,
        run.peak_memory_bytes as f64 / f64::from(1 << 20),
        run.message()
    );
    run
}

fn target_fault(target: &HostileTarget) -> String {
    format!("{} connections", target.connections())
}

/// One command's documented bound (`--timeout` + `--ctrl-loss-tmo`), plus
/// connection setup (`--timeout`) and room for a loaded machine.
fn bound() -> Duration {
    Duration::from_millis(TIMEOUT_MS) * 2 + Duration::from_secs(CONTROLLER_LOSS_SECONDS) + Duration::from_secs(3)
}

/// Runs `subcommand` against a target with `fault` and checks exit 1 within the
/// bound, bounded memory, and a message containing every one of `expected`.
fn fails_naming(fault: Fault, subcommand: &str, args: &[&str], expected: &[&str]) {
    let target = HostileTarget::start(fault);
    let run = run(subcommand, &target, args, bound() * 3);
    assert!(run.elapsed < bound(), "{subcommand}: took {:?}, bound {:?}", run.elapsed, bound());
    assert_eq!(run.code, Some(1), "{subcommand}: {}", run.stderr);
    assert!(run.peak_memory_bytes < PEAK_MEMORY_LIMIT_BYTES, "{subcommand}: peak {} bytes", run.peak_memory_bytes);
    let message = run.message();
    for text in expected {
        assert!(message.contains(text), "{subcommand}: {message:?} lacks {text:?}");
    }
    assert!(!message.contains("no answer in time"), "{subcommand}: blamed on a timeout: {message}");
}

const READ: &[&str] = &["-N", "1", "-c", "7", "-d", "/dev/null"];

#[test]
fn list_ns_against_a_namespace_list_flood_stops_at_nn() {
    fails_naming(
        Fault::NamespaceListFlood,
        "list-ns",
        &[],
        &["Active Namespace ID list", "above the highest NSID", "(NN 1)"],
    );
}

#[test]
fn read_against_a_namespace_list_flood_reads_with_bounded_memory() {
    let target = HostileTarget::start(Fault::NamespaceListFlood);
    let run = run("read", &target, READ, bound() * 3);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.elapsed < bound(), "took {:?}", run.elapsed);
    assert!(run.peak_memory_bytes < PEAK_MEMORY_LIMIT_BYTES, "peak {} bytes", run.peak_memory_bytes);
}

#[test]
fn list_ns_against_a_target_that_resets_for_it_gives_up_naming_the_reset() {
    fails_naming(
        Fault::On(Trigger::NamespaceList, Misdeed::Reset),
        "list-ns",
        &[],
        &["active namespace list failed", "the target reset the connection on every retry (5 reconnects)"],
    );
}

#[test]
fn smart_log_against_a_termination_request_names_fes_and_offset() {
    let misdeed = Misdeed::TermReq { status: FatalErrorStatus::InvalidPduHeaderField, info: 16 };
    fails_naming(
        Fault::On(Trigger::SmartLog, misdeed),
        "smart-log",
        &[],
        &[
            "smart-log failed",
            "C2HTermReq FES 0x01 (invalid PDU header field) at offset 16 on every retry (5 reconnects)",
        ],
    );
}

#[test]
fn list_ns_against_events_completed_twice_names_the_stray_completion() {
    fails_naming(Fault::AsyncEventCompletedTimes(2), "list-ns", &[], &["CapsuleResp for command", "not outstanding"]);
}

#[test]
fn read_against_events_completed_50_times_names_the_stray_completion() {
    fails_naming(Fault::AsyncEventCompletedTimes(50), "read", READ, &["CapsuleResp for command", "not outstanding"]);
}

#[test]
fn read_against_termination_requests() {
    let misdeed = Misdeed::TermReq { status: FatalErrorStatus::InvalidPduHeaderField, info: 16 };
    fails_naming(
        Fault::On(Trigger::Read, misdeed),
        "read",
        READ,
        &["read failed: the target ended the connection with C2HTermReq FES 0x01 (invalid PDU header field) at offset 16 on every retry (5 reconnects)"],
    );
}

#[test]
fn read_against_resets() {
    fails_naming(
        Fault::On(Trigger::Read, Misdeed::Reset),
        "read",
        READ,
        &["read failed: the target reset the connection"],
    );
}

#[test]
fn read_against_a_close_in_the_middle_of_a_pdu() {
    fails_naming(
        Fault::On(Trigger::Read, Misdeed::CloseMidPdu),
        "read",
        READ,
        &["closed the connection in the middle of a PDU"],
    );
}

#[test]
fn read_against_an_r2t() {
    fails_naming(Fault::On(Trigger::Read, Misdeed::R2t), "read", READ, &["R2T for a command without R2T data"]);
}

#[test]
fn read_against_a_huge_pdu_length() {
    fails_naming(
        Fault::On(Trigger::Read, Misdeed::HugePduLength),
        "read",
        READ,
        &["PDU announces 4294967271 data bytes"],
    );
}

#[test]
fn read_against_a_bad_header_digest() {
    let args = [READ, &["-g"]].concat();
    fails_naming(Fault::On(Trigger::Read, Misdeed::BadHeaderDigest), "read", &args, &["PDU header with a bad digest"]);
}

#[test]
fn read_against_a_missing_data_digest() {
    let args = [READ, &["-G"]].concat();
    fails_naming(Fault::On(Trigger::Read, Misdeed::MissingDataDigest), "read", &args, &["digest flags"]);
}

#[test]
fn read_against_an_r2t_for_an_unknown_command() {
    fails_naming(
        Fault::On(Trigger::Read, Misdeed::R2tForUnknownCommand),
        "read",
        READ,
        &["R2t for command", "not outstanding"],
    );
}

#[test]
fn write_against_read_data() {
    let args = ["-N", "1", "-c", "7", "-z", "4096", "-d", "/dev/zero"];
    fails_naming(
        Fault::On(Trigger::Write, Misdeed::C2hData),
        "write",
        &args,
        &["write failed: target sent C2hData out of place: C2HData for a command that reads no data"],
    );
}

#[test]
fn id_ctrl_against_a_controller_that_never_gets_ready_stops_at_the_timeout() {
    let target = HostileTarget::start(Fault::NeverReady);
    let run = run("id-ctrl", &target, &[], Duration::from_secs(30));
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let limit = Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(2);
    assert!(run.elapsed < limit, "took {:?} (CAP.TO says 127.5 s, --timeout {TIMEOUT_MS} ms)", run.elapsed);
    assert!(run.message().contains("did not set CSTS.RDY"), "{}", run.message());
}

#[test]
fn read_against_a_silent_target_is_a_timeout_within_the_bound() {
    let target = HostileTarget::start(Fault::SilentAfterIo(0));
    let run = run("read", &target, READ, bound() * 3);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.elapsed < bound(), "took {:?}", run.elapsed);
    assert!(run.message().contains("no answer in time"), "{}", run.message());
}

/// The options of the report (`--timeout 5000 -l 3 --reconnect-delay 1`), where a
/// target resetting the admin connection for every namespace list kept `list-ns`
/// reconnecting for ever (61 reconnects in 120 s): now 5 resends, about 1 s each.
#[test]
fn list_ns_with_the_reported_options_ends_after_five_resends() {
    let target = HostileTarget::start(Fault::On(Trigger::NamespaceList, Misdeed::Reset));
    let options = ["--timeout", "5000", "-l", "3", "--reconnect-delay", "1"];
    let run = run_with("list-ns", &target, &options, Duration::from_secs(60));
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    // Documented: a command is over within --timeout + --ctrl-loss-tmo (8 s).
    assert!(run.elapsed < Duration::from_secs(8 + 2), "took {:?}", run.elapsed);
    assert!(
        run.message().contains("the target reset the connection on every retry (5 reconnects)"),
        "{}",
        run.message()
    );
}

/// A suite of three short runs: a maximum-rate run, a load level of its group
/// (which needs that run's rate) and another run after them.
const BENCH_SUITE: &str = "\
[[job]]\nname = \"max\"\ngroup = \"g\"\nthreads = 1\nqueue_depth = 4\nduration = \"300ms\"\nramp = \"50ms\"\n
[[job]]\nname = \"half\"\ngroup = \"g\"\nload_percent = 50\nduration = \"300ms\"\nramp = \"0ms\"\n
[[job]]\nname = \"writes\"\nread_percent = 0\nthreads = 1\nqueue_depth = 4\nduration = \"300ms\"\nramp = \"50ms\"\n";

/// `sluice bench --target` against `fault` with [`BENCH_SUITE`] and `--timeout
/// 1000`. Returns the run (stdout and stderr together) and the JSON result.
fn bench(fault: Fault) -> (Run, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let target = HostileTarget::start(fault);
    let index = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("sluice-hostile-bench-{}-{index}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let suite = dir.join("suite.toml");
    std::fs::write(&suite, BENCH_SUITE).expect("suite file");
    let json = dir.join("result.json");
    let args = [
        "--target",
        &target.url(),
        "--suite-file",
        suite.to_str().expect("UTF-8 path"),
        "--timeout",
        "1000",
        "--json",
        json.to_str().expect("UTF-8 path"),
    ];
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice bench");
    let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    let run = Run { code: output.status.code(), elapsed: started.elapsed(), peak_memory_bytes: 0, stderr: text };
    eprintln!("sluice bench ({fault:?}): exit {:?} after {:?}\n{}", run.code, run.elapsed, run.stderr);
    let result = std::fs::read_to_string(&json).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (run, result)
}

/// The bench against a failing target: the suite runs to its end (each run a
/// bounded time past its window), exits 1 saying the target failed (never 2, the
/// usage status), flags the runs in the table and names the failure in the JSON.
fn bench_reports_a_failed_target(fault: Fault, bound: Duration) {
    let (run, result) = bench(fault);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.elapsed < bound, "took {:?}", run.elapsed);
    assert!(run.stderr.contains("sluice: error: the target failed"), "{}", run.stderr);
    assert!(run.stderr.contains("  ! target failed: "), "no flagged row: {}", run.stderr);
    assert!(!run.stderr.contains("impossible rate"), "{}", run.stderr);
    assert!(!run.stderr.contains("other than its owner"), "a ring driven from the wrong thread: {}", run.stderr);
    let result: serde_json::Value = serde_json::from_str(&result).expect("the JSON result is written");
    let notes = result["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|note| note.as_str().is_some_and(|note| note.contains("target failed: "))), "{notes:?}");
    let runs: Vec<&str> =
        result["runs"].as_array().expect("runs").iter().filter_map(|run| run["name"].as_str()).collect();
    assert!(runs.contains(&"writes"), "the suite went on past the failed runs: {runs:?}");
}

#[test]
fn bench_against_duplicate_completions_says_the_target_failed() {
    bench_reports_a_failed_target(Fault::DuplicateIoCompletions, Duration::from_secs(20));
}

#[test]
fn bench_against_a_reset_mid_run_says_the_target_failed() {
    bench_reports_a_failed_target(Fault::ResetAfterIo(200), Duration::from_secs(20));
}

#[test]
fn bench_against_a_target_that_goes_silent_says_so_within_a_bounded_wait() {
    bench_reports_a_failed_target(Fault::SilentAfterIo(200), Duration::from_secs(30));
}

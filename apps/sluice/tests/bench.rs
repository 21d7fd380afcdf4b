//! `sluice bench` and `sluice report` end to end: every suite in miniature against
//! the embedded target, the JSON validated against the result schema, the report,
//! and the one-line errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bench_results::{validate, BenchResult};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).output().expect("run sluice")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-bench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `suite` in miniature and checks the JSON and HTML it writes.
fn mini_suite(suite: &str, duration: &str, extra: &[&str]) -> BenchResult {
    let dir = scratch(suite);
    let json = dir.join(format!("{suite}.json"));
    let mut args = vec![
        "bench",
        "--suite",
        suite,
        "--scale",
        "mini",
        "--duration",
        duration,
        "--threads",
        "2",
        "--queue-depth",
        "4",
        "--namespace-size",
        "64MiB",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = sluice(&args);
    assert!(output.status.success(), "{suite}: {}\n{}", stderr(&output), String::from_utf8_lossy(&output.stdout));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("IOPS") && stdout.contains(&json.display().to_string()), "{stdout}");
    let result = BenchResult::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(validate(&result), Ok(()), "{suite}");
    assert_eq!(result.suite, suite);
    assert!(!result.partial);
    assert!(!result.runs.is_empty());
    for run in &result.runs {
        assert!(run.ios > 0, "{suite}: {} did no I/O", run.name);
        assert_eq!(run.errors, 0, "{suite}: {}", run.name);
        assert!(run.cpu.initiator_seconds > 0.0 && run.cpu.target_seconds.unwrap() > 0.0, "{}", run.name);
        assert!(run.percent_of_ceiling.is_some(), "{}", run.name);
        // The embedded target's split of the run's time, over at least the run's I/Os.
        let phases = run.target_phases_us.as_ref().unwrap_or_else(|| panic!("{suite}: {} has no split", run.name));
        assert!(phases.commands >= run.ios, "{suite}: {}: {phases:?}", run.name);
    }
    let html = std::fs::read_to_string(json.with_extension("html")).unwrap();
    assert!(html.contains("<html") || html.contains("<!DOCTYPE") || html.contains("<!doctype"));
    result
}

#[test]
fn quick_suite_in_miniature_and_report_of_two_results() {
    let dir = scratch("report");
    let a = mini_suite("quick", "300ms", &[]);
    assert!(a.runs.iter().any(|run| run.load_percent.is_some() && run.rate_limit_iops.is_some()));
    // Rate-limited runs say how they kept to their schedule; maximum-rate runs have none.
    for run in &a.runs {
        match (&run.schedule, run.rate_limit_iops) {
            (Some(schedule), Some(_)) => {
                assert!(schedule.issued >= run.ios, "{}: {schedule:?}", run.name);
                assert_eq!(schedule.late_threshold_us, 1000.0);
                assert_eq!(schedule.fell_behind, schedule.behind_by_rule(), "{}", run.name);
            }
            (None, None) => {}
            (schedule, rate) => panic!("{}: schedule {schedule:?} with rate {rate:?}", run.name),
        }
        if std::fs::metadata("/proc/thread-self/schedstat").is_ok() {
            assert!(
                run.cpu.initiator_runqueue_seconds.is_some() && run.cpu.target_runqueue_seconds.is_some(),
                "{}",
                run.name
            );
        }
    }
    let b = mini_suite("hci", "300ms", &["--backend", "null"]);
    assert_eq!(b.target.backend, "null");
    // Write both next to each other under distinct names and render them together.
    let (pa, pb) = (dir.join("first-run.json"), dir.join("second-run.json"));
    std::fs::write(&pa, a.to_json_pretty()).unwrap();
    std::fs::write(&pb, b.to_json_pretty()).unwrap();
    let html_path = dir.join("both.html");
    let output = sluice(&["report", pa.to_str().unwrap(), pb.to_str().unwrap(), "-o", html_path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.contains("first-run") && html.contains("second-run"), "labels missing");
    assert!(html.contains(&a.runs[0].name) && html.contains(&b.runs[0].name));

    // A broken result names the file and the field.
    let broken = dir.join("broken.json");
    std::fs::write(&broken, a.to_json_pretty().replacen("\"iops\":", "\"iops\": \"many\", \"x\":", 1)).unwrap();
    let output = sluice(&["report", broken.to_str().unwrap(), "-o", dir.join("x.html").to_str().unwrap()]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("broken.json") && message.contains("iops"), "{message}");
    assert_eq!(message.trim().lines().count(), 1, "{message}");
}

#[test]
fn four_corners_in_miniature() {
    let result = mini_suite("four-corners", "300ms", &[]);
    assert_eq!(result.runs.len(), 6);
    assert!(result.runs.iter().any(|run| run.block_size == 1 << 20 && run.pattern == "sequential"));
}

#[test]
fn eswa_in_miniature_with_preconditioning() {
    let result = mini_suite("eswa", "150ms", &["--precondition"]);
    let preconditioning = result.preconditioning.expect("preconditioning recorded");
    assert!(preconditioning.bytes_written >= 2 * (64 << 20), "{}", preconditioning.bytes_written);
    assert!(!preconditioning.rounds.is_empty());
}

#[test]
fn curves_in_miniature() {
    let result = mini_suite("curves", "200ms", &[]);
    let levels: Vec<u32> = result.runs.iter().filter_map(|run| run.load_percent).collect();
    assert_eq!(levels.len(), 4 * 6);
    assert!(result.runs.iter().any(|run| run.name.contains("Oracle 90/10")));
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn suite_files_run_and_nonsense_names_the_field() {
    let dir = scratch("suite-file");
    let good = write(
        &dir,
        "mine.toml",
        "[[job]]\nname = \"seq\"\npattern = \"sequential\"\nread_percent = 0\nblock_size = \"64KiB\"\nthreads = 2\nqueue_depth = 2\nduration = \"200ms\"\nramp = \"50ms\"\n\n[[job]]\nname = \"fixed\"\nrate_iops = 2000.0\nduration = \"200ms\"\nramp = \"0ms\"\n",
    );
    let json = dir.join("mine.json");
    let output = sluice(&[
        "bench",
        "--suite-file",
        good.to_str().unwrap(),
        "--namespace-size",
        "32MiB",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let result = BenchResult::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(validate(&result), Ok(()));
    assert_eq!(result.suite, "mine");
    let fixed = &result.runs[1];
    assert!((1000.0..3000.0).contains(&fixed.iops), "{}", fixed.iops);

    for (text, field) in [
        ("[[job]]\nname = \"x\"\nqueue_depth = \"deep\"\n", "queue_depth"),
        ("[[job]]\nname = \"x\"\nblock_size = \"4 parsecs\"\n", "block_size"),
        ("[[job]]\nname = \"x\"\nthreds = 4\n", "threds"),
        ("[[job]]\nname = \"x\"\nread_percent = 101\n", "read_percent"),
        ("[[job]]\nname = \"x\"\nrate_iops = 1e12\n", "rate_iops"),
    ] {
        let bad = write(&dir, "bad.toml", text);
        let output = sluice(&["bench", "--suite-file", bad.to_str().unwrap(), "--namespace-size", "16MiB"]);
        assert_eq!(output.status.code(), Some(2), "{text}: {}", stderr(&output));
        let message = stderr(&output);
        assert!(message.contains(field), "{text}: {message}");
        assert_eq!(message.trim().lines().count(), 1, "{message}");
    }
}

#[test]
fn bad_targets_sizes_and_options_are_one_line_errors() {
    // Nothing listens on port 1.
    let output = sluice(&["bench", "--target", "tcp://127.0.0.1:1/nqn.2026-11.io.sluice:none", "--scale", "mini"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert_eq!(message.trim().lines().count(), 1, "{message}");

    let output = sluice(&["bench", "--target", "127.0.0.1:4420"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("tcp://ADDR:PORT[,ADDR:PORT...]/NQN"), "{}", stderr(&output));

    // 1 MiB sequential jobs need a block per thread: a 1 MiB namespace cannot hold 2.
    let output = sluice(&["bench", "--suite", "four-corners", "--scale", "mini", "--namespace-size", "1MiB"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("namespace too small"), "{}", stderr(&output));

    // Driver and comparison mistakes are one line each, before anything starts.
    for (args, code, needle) in [
        (&["--driver", "vdbench"][..], 2, "use sluice"),
        (&["--compare", "fc"][..], 2, "use iscsi"),
        (&["--compare", "iscsi", "--driver", "sluice"][..], 2, "driven by fio"),
        (&["--compare", "iscsi", "--target", "tcp://127.0.0.1:1/nqn.x"][..], 2, "drop --target"),
        (&["--backend", "file"][..], 2, "--backing-file"),
        (&["--backend", "tape"][..], 2, "use ram, null, file or rbd"),
        (&["--backend", "rbd"][..], 2, "need --rbd-image POOL/IMAGE"),
        (&["--backend", "rbd", "--rbd-image", "noslash"][..], 2, "give POOL/IMAGE"),
        (&["--rbd-image", "rbd/x"][..], 2, "--rbd-image is for --backend rbd"),
        (&["--compare", "fio-rbd", "--target", "tcp://127.0.0.1:1/nqn.x"][..], 2, "drop --target"),
        (&["--driver", "fio", "--fio-engine-dir", "/nonexistent/sluice-fio"][..], 1, "scripts/build-fio-engine.sh"),
    ] {
        let mut all = vec!["bench", "--scale", "mini"];
        all.extend_from_slice(args);
        let output = sluice(&all);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {message}");
        // Without fio installed the fio error names the package instead.
        assert!(message.contains(needle) || message.contains("fio is not installed"), "{args:?}: {message}");
        assert_eq!(message.trim().lines().count(), 1, "{message}");
    }
}

/// Where scripts/build-fio-engine.sh put the engines, if it ran (the interop stage of
/// scripts/test.sh runs it; tests/interop/bench-fio.sh covers the fio driver and the
/// iSCSI comparison end to end).
fn fio_engine_dir() -> Option<PathBuf> {
    let dirs = [
        std::env::var_os("SLUICE_FIO_OUT").map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fio")),
    ];
    let found = dirs.into_iter().flatten().find(|dir| dir.join("libsluice_fio.so").is_file());
    let fio = Command::new("fio").arg("--version").output();
    found.filter(|_| fio.is_ok_and(|o| o.status.success()))
}

/// `--driver fio` in miniature, when fio and the engine are there (scripts/test.sh
/// builds the engine first and sets `SLUICE_REQUIRE_FIO`, which turns "skipped" into
/// a failure).
#[test]
fn fio_driver_in_miniature() {
    let Some(engines) = fio_engine_dir() else {
        let missing = "fio or target/fio/libsluice_fio.so missing: build the engine with scripts/build-fio-engine.sh";
        assert!(std::env::var_os("SLUICE_REQUIRE_FIO").is_none(), "SLUICE_REQUIRE_FIO is set but {missing}");
        eprintln!("skipped: {missing}");
        return;
    };
    let result = mini_suite("hci", "300ms", &["--driver", "fio", "--fio-engine-dir", engines.to_str().unwrap()]);
    assert_eq!(result.driver, "fio");
    assert!(result.notes.iter().any(|note| note.contains("fio-")), "{:?}", result.notes);
    // A mixed run has reads and writes in one latency distribution.
    let mixed = result.runs.iter().find(|run| run.read_percent == 70).unwrap();
    assert!(mixed.latency_us.percentiles.len() >= 5 && mixed.latency_us.mean > 0.0);
    assert!(result.runs.iter().all(|run| !run.time_series.is_empty()));
    // fio reports neither how far its rate fell behind nor run-queue time.
    assert!(result.runs.iter().all(|run| run.schedule.is_none() && run.cpu.initiator_runqueue_seconds.is_none()));
}

/// `--target` against a separate `sluice serve` process: no target CPU, no ceilings.
#[test]
fn remote_target_over_tcp() {
    use std::io::{BufRead, BufReader};
    let dir = scratch("remote");
    let config = write(
        &dir,
        "serve.toml",
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:remote\"\nallow_any_host = true\n[[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"32MiB\"\n",
    );
    let mut serve = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--threads", "1", "--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut address = None;
    for line in BufReader::new(serve.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("sluice: listening on ") {
            address = rest.split_whitespace().next().map(str::to_string);
        }
        if line.contains("ready") {
            break;
        }
    }
    let address = address.expect("serve printed its address");
    let json = dir.join("remote.json");
    let target = format!("tcp://{address}/nqn.2026-11.io.sluice:remote");
    let output =
        sluice(&["bench", "--suite", "hci", "--scale", "mini", "--target", &target, "--json", json.to_str().unwrap()]);
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(output.status.success(), "{}", stderr(&output));
    let result = BenchResult::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(validate(&result), Ok(()));
    assert_eq!(result.target.kind, "remote");
    assert_eq!(result.target.capacity_bytes, 32 << 20);
    for run in &result.runs {
        assert!(run.ios > 0 && run.cpu.target_seconds.is_none() && run.percent_of_ceiling.is_none());
    }
}

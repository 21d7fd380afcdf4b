//! `sluice bench` and `sluice report`: the field reports' benchmark methodology
//! (four corners, the enterprise synthetic workload sweep, load-level curves, the
//! HCI profile) against the embedded target or any NVMe/TCP target, with live
//! progress, CPU per I/O, ceilings measured in the same run, a versioned JSON result
//! and an HTML report.
//!
//! Drivers: Sluice's own host (default), or fio through the Sluice ioengine
//! (`--driver fio`, see `fio.rs`). `--compare iscsi` runs the suite through fio twice:
//! over NVMe/TCP to the embedded target on a file, and over iSCSI to Debian's `tgt` on
//! the same kind of file (`iscsi.rs`), and puts the two side by side.
//!
//! Threads and queues: every run connects one controller asking for `threads` I/O
//! queues and gives each worker thread its own queue (its own TCP connection). If
//! the target grants fewer queues, further controllers are connected until every
//! thread has a queue of its own: threads never share a queue, so a thread's queue
//! depth is exactly what the job says. (fio: every job clone connects its own
//! controller with one queue, or its own iSCSI session: the same shape.)

mod args;
mod compare;
mod compare_rbd;
mod engine;
mod exec;
mod fio;
pub mod hold;
mod iscsi;
mod output;
mod phases;
mod qos;
mod suites;
mod system;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bench_results::{BenchResult, Ceilings, Preconditioning, TargetInfo, SCHEMA_ID};
use nvme_spec::NamespaceId;
use workload::{JobSpec, Pattern};

use exec::{EmbeddedBackend, Endpoint, Protocol};

pub use args::{BenchArgs, BenchCommand, ReportArgs};
pub use suites::Scale;

/// Exit status of an interrupted run (128 + SIGINT).
const EXIT_INTERRUPTED: u8 = 130;

/// What went wrong, and the exit status it maps to.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A usage or input problem (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A run-time failure (exit 1).
    #[error("{0}")]
    Runtime(String),
}

fn fail(error: &BenchError) -> ExitCode {
    eprintln!("sluice: error: {error}");
    ExitCode::from(match error {
        BenchError::Usage(_) => 2,
        BenchError::Runtime(_) => 1,
    })
}

/// Runs `sluice report`.
pub fn report(args: ReportArgs) -> ExitCode {
    let mut results = Vec::new();
    for path in &args.results {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => return fail(&BenchError::Runtime(format!("cannot read {}: {error}", path.display()))),
        };
        let result = match BenchResult::from_json(&text) {
            Ok(result) => result,
            Err(error) => return fail(&BenchError::Usage(format!("{}: {error}", path.display()))),
        };
        if let Err(problems) = bench_results::validate(&result) {
            return fail(&BenchError::Usage(format!("{}: {}", path.display(), problems.join("; "))));
        }
        let mut label =
            path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
        if results.iter().any(|(existing, _)| *existing == label) {
            label = path.display().to_string();
        }
        results.push((label, result));
    }
    let html = bench_results::render_html(&results);
    if let Err(error) = write_file(&args.output, &html) {
        return fail(&error);
    }
    println!("report: {}", args.output.display());
    ExitCode::SUCCESS
}

fn write_file(path: &Path, text: &str) -> Result<(), BenchError> {
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| BenchError::Runtime(format!("cannot create {}: {e}", parent.display())))?;
    }
    std::fs::write(path, text).map_err(|e| BenchError::Runtime(format!("cannot write {}: {e}", path.display())))
}

/// Runs `sluice bench`.
pub fn bench(args: BenchArgs) -> ExitCode {
    match hold::or_suite(args, bench_inner) {
        Ok(code) => code,
        Err(error) => fail(&error),
    }
}

/// Which host drives the I/O.
enum Driver {
    /// Sluice's own host (`nvme-host-client`), in this process.
    SluiceHost,
    /// fio through an external ioengine, one fio process per job.
    Fio(fio::FioRunner),
}

impl Driver {
    /// `BenchResult::driver`.
    fn name(&self) -> &'static str {
        match self {
            Driver::SluiceHost => "sluice-host",
            Driver::Fio(_) => "fio",
        }
    }
}

/// A finished (or interrupted) suite.
struct Outcome {
    result: BenchResult,
    any_errors: bool,
    /// Runs the target failed (see [`output::TARGET_FAILED`]).
    target_failures: usize,
}

/// Ctrl-C and SIGTERM: the first stops the current run (the partial result is
/// written, tgtd is stopped in order); a second one stops tgtd the quick way and exits
/// at once.
fn install_interrupts() -> workload::RunControl {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(mut signals) => {
            let spawned = std::thread::Builder::new().name("bench-signals".into()).spawn(move || {
                for _ in signals.forever() {
                    if flag.swap(true, Ordering::SeqCst) {
                        fio::emergency_stop();
                        iscsi::emergency_stop();
                        compare::ScratchDir::emergency_remove();
                        std::process::exit(i32::from(EXIT_INTERRUPTED));
                    }
                }
            });
            if let Err(error) = spawned {
                eprintln!("sluice: warning: Ctrl-C will not stop the bench cleanly: {error}");
            }
        }
        Err(error) => {
            eprintln!("sluice: warning: Ctrl-C will not stop the bench cleanly: {error}")
        }
    }
    stop
}

/// What the parts of one `sluice bench` invocation share.
#[derive(Clone, Copy)]
struct Invocation<'a> {
    args: &'a BenchArgs,
    suite_name: &'a str,
    stop: &'a workload::RunControl,
    paths: &'a OutputPaths,
}

/// Where the results go.
struct OutputPaths {
    /// Without --compare: the JSON file; with it: the stem (no extension).
    base: PathBuf,
}

impl OutputPaths {
    fn new(json: Option<&Path>, suite: &str, started: SystemTime, compare: bool) -> OutputPaths {
        let stamp = system::compact_timestamp(started);
        let base = match (json, compare) {
            (Some(path), false) => path.to_path_buf(),
            (Some(path), true) => path.with_extension(""),
            (None, false) => PathBuf::from("target/bench").join(format!("{suite}-{stamp}.json")),
            (None, true) => PathBuf::from("target/bench").join(format!("{suite}-vs-iscsi-{stamp}")),
        };
        OutputPaths { base }
    }

    /// `<base>` with `suffix` appended to the file name (before any extension).
    fn with_suffix(&self, suffix: &str, extension: &str) -> PathBuf {
        let stem = self.base.with_extension("");
        let name = stem.file_name().map_or_else(|| "bench".into(), |n| n.to_string_lossy().into_owned());
        stem.with_file_name(format!("{name}{suffix}")).with_extension(extension)
    }

    /// fio's job files, outputs and logs (and tgtd's log): `<base>-fio/[side/]`.
    fn fio_dir(&self, side: Option<&str>) -> PathBuf {
        let dir = self.with_suffix("-fio", "");
        side.map_or_else(|| dir.clone(), |side| dir.join(side))
    }
}

fn bench_inner(args: BenchArgs) -> Result<ExitCode, BenchError> {
    let driver_name = args.driver.as_deref().unwrap_or("sluice");
    if !matches!(driver_name, "sluice" | "fio") {
        return Err(BenchError::Usage(format!(
            "--driver {driver_name:?}: use sluice (Sluice's own host) or fio (fio through the Sluice ioengine)"
        )));
    }
    let (compare_iscsi, compare_rbd) = match args.compare.as_deref() {
        None => (false, false),
        Some("iscsi") => (true, false),
        Some("fio-rbd") => (false, true),
        Some(other) => {
            return Err(BenchError::Usage(format!(
                "--compare {other:?}: use iscsi (the suite over NVMe/TCP and over iSCSI to tgt) or fio-rbd \
                 (through Sluice to an RBD image and through fio's rbd engine to the same image)"
            )))
        }
    };
    let compare = compare_iscsi || compare_rbd;
    let backend = args.backend.as_deref().unwrap_or(if compare_rbd { "rbd" } else { "ram" });
    if !matches!(backend, "ram" | "null" | "file" | "rbd") {
        return Err(BenchError::Usage(format!("--backend {backend:?}: use ram, null, file or rbd")));
    }
    if compare_iscsi {
        let conflict = if args.driver.as_deref() == Some("sluice") {
            Some(
                "--driver sluice: both transports are driven by fio (the iSCSI side has no Sluice host); drop --driver",
            )
        } else if args.target.is_some() {
            Some("--target: --compare iscsi starts both targets itself, on loopback; drop --target")
        } else if args.backend.as_deref().is_some_and(|b| b != "file") {
            Some("--backend: --compare iscsi puts both targets on sparse files; drop --backend")
        } else if args.backing_file.is_some() {
            Some("--backing-file: --compare iscsi makes its own temporary sparse files; drop --backing-file")
        } else if args.precondition {
            Some("--precondition: preconditioning runs Sluice's host, which has no iSCSI side; drop --precondition")
        } else {
            None
        };
        if let Some(conflict) = conflict {
            return Err(BenchError::Usage(format!("--compare iscsi with {conflict}")));
        }
    } else if compare_rbd && (args.target.is_some() || backend != "rbd") {
        return Err(BenchError::Usage(
            "--compare fio-rbd serves --rbd-image from the embedded target itself: drop --target and --backend".into(),
        ));
    } else if backend == "file" && args.backing_file.is_none() {
        return Err(BenchError::Usage(
            "--backend file needs --backing-file PATH (created sparse at --namespace-size when missing)".into(),
        ));
    } else if backend != "file" && args.backing_file.is_some() {
        return Err(BenchError::Usage("--backing-file is for --backend file".into()));
    }
    let rbd_image = match (backend, &args.rbd_image) {
        ("rbd", Some(image)) if image.split_once('/').is_some_and(|(pool, name)| !pool.is_empty() && !name.is_empty()) => {
            Some(image.clone())
        }
        ("rbd", Some(image)) => {
            return Err(BenchError::Usage(format!(
                "--rbd-image {image:?}: give POOL/IMAGE, e.g. rbd/sluice-bench"
            )))
        }
        ("rbd", None) => {
            return Err(BenchError::Usage(
                "--backend rbd and --compare fio-rbd need --rbd-image POOL/IMAGE (created at --namespace-size when missing; \
                 its data is overwritten)"
                    .into(),
            ))
        }
        (_, Some(_)) => return Err(BenchError::Usage("--rbd-image is for --backend rbd and --compare fio-rbd".into())),
        (_, None) => None,
    };
    if let Some(conf) = &args.ceph_conf {
        if rbd_image.is_none() {
            return Err(BenchError::Usage("--ceph-conf is for --backend rbd and --compare fio-rbd".into()));
        }
        if !conf.is_file() {
            return Err(BenchError::Usage(format!("--ceph-conf {}: no such file", conf.display())));
        }
        // Both the embedded target's librados and fio's rbd engine (a child process)
        // read it from there; nothing else runs yet, so the environment is not shared.
        std::env::set_var("CEPH_CONF", conf);
    }

    // Everything a driver needs is checked before anything starts.
    let fio_tools = if driver_name == "fio" || compare {
        let what = if compare_iscsi {
            "--compare iscsi"
        } else if compare_rbd {
            "--compare fio-rbd"
        } else {
            "--driver fio"
        };
        Some(fio::find_tools(args.fio_engine_dir.as_deref(), compare_iscsi, what)?)
    } else {
        None
    };
    if compare_iscsi {
        iscsi::check_installed()?;
    }

    // Jobs from a file are checked before anything starts.
    let (suite_name, file_jobs) = match &args.suite_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| BenchError::Usage(format!("cannot read suite file {}: {e}", path.display())))?;
            let jobs = JobSpec::parse_suite(&text)
                .map_err(|e| BenchError::Usage(format!("suite file {}: {e}", path.display())))?;
            let name = path.file_stem().map_or("suite-file".into(), |s| s.to_string_lossy().into_owned());
            (name, Some(jobs))
        }
        None => (args.suite.clone(), None),
    };

    let stop = install_interrupts();
    let started = SystemTime::now();
    let paths = OutputPaths::new(args.json.as_deref(), &suite_name, started, compare);
    let target_threads =
        args.target_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).max(1);

    let invocation = Invocation { args: &args, suite_name: &suite_name, stop: &stop, paths: &paths };
    match (compare_iscsi, compare_rbd, fio_tools.clone(), rbd_image.as_deref()) {
        (true, _, Some(tools), _) => {
            return compare::compare_iscsi(&invocation, file_jobs, tools, target_threads, started);
        }
        (_, true, Some(tools), Some(image)) => {
            return compare_rbd::compare_fio_rbd(&invocation, file_jobs, tools, image, target_threads, started);
        }
        _ => {}
    }

    if let Some(ms) = args.timeout {
        exec::set_command_timeout(Duration::from_millis(ms));
    }
    let mut endpoint = match &args.target {
        Some(text) => {
            let (addresses, nqn) = exec::parse_target(text)?;
            exec::connect_remote(&addresses, &nqn)?
        }
        None => {
            let storage = match backend {
                "null" => EmbeddedBackend::Null,
                "file" => EmbeddedBackend::File {
                    path: args.backing_file.as_deref().expect("checked above"),
                    direct_io: args.direct_io,
                },
                "rbd" => EmbeddedBackend::Rbd(rbd_image.clone().expect("checked above")),
                _ => EmbeddedBackend::Ram,
            };
            let poll_mode = args.target_poll_mode.poll_mode();
            exec::start_embedded(storage, args.namespace_size, target_threads, poll_mode)?
        }
    };
    endpoint.host_io = args.host_io.io_path(endpoint.embedded.is_some());
    let jobs = plan_jobs(&args, &suite_name, file_jobs, &endpoint)?;
    let mut driver = match fio_tools {
        Some(tools) => Driver::Fio(fio::FioRunner::new(tools, paths.fio_dir(None))?),
        None => Driver::SluiceHost,
    };
    let outcome = run_suite(&invocation, &jobs, &endpoint, &mut driver, started, Vec::new())?;
    drop(endpoint);

    let result = outcome.result;
    output::print_table(&result);
    let json_path = paths.base.clone();
    let html_path = json_path.with_extension("html");
    write_file(&json_path, &(result.to_json_pretty() + "\n"))?;
    let label = json_path.file_stem().map_or_else(|| suite_name.clone(), |s| s.to_string_lossy().into_owned());
    write_file(&html_path, &bench_results::render_html(&[(label, result.clone())]))?;
    println!();
    println!("result: {}", json_path.display());
    println!("report: {}", html_path.display());
    if let Driver::Fio(runner) = &driver {
        println!("fio job files and output: {}", runner.dir().display());
    }
    println!("took {:.1} s", started.elapsed().map_or(0.0, |d| d.as_secs_f64()));
    finish(&[&result], outcome.any_errors || outcome.target_failures > 0)
}

/// Warns about a result that does not validate; maps the outcome to the exit status:
/// 130 interrupted, 1 when a run had I/O errors or the target failed it.
fn finish(results: &[&BenchResult], any_errors: bool) -> Result<ExitCode, BenchError> {
    for result in results {
        if let Err(problems) = bench_results::validate(result) {
            eprintln!("sluice: warning: the result does not validate: {}", problems.join("; "));
        }
    }
    if results.iter().any(|result| result.partial) {
        eprintln!("sluice: interrupted; partial result written");
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    let failed: usize = results.iter().map(|result| output::target_failures(result).count()).sum();
    if failed > 0 {
        eprintln!(
            "sluice: error: the target failed {failed} run(s) (flagged with ! in the table, why in the result's notes)"
        );
        return Ok(ExitCode::from(1));
    }
    if any_errors {
        eprintln!("sluice: error: some runs had I/O errors (flagged with ! in the table)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The suite's jobs for `endpoint`'s namespace, with the scale and overrides applied,
/// checked against the namespace, with unique names.
fn plan_jobs(
    args: &BenchArgs,
    suite_name: &str,
    file_jobs: Option<Vec<JobSpec>>,
    endpoint: &Endpoint,
) -> Result<Vec<JobSpec>, BenchError> {
    let mut jobs = match file_jobs {
        Some(jobs) => jobs,
        None => suites::suite(suite_name, endpoint.capacity)
            .ok_or_else(|| BenchError::Usage(format!("--suite {suite_name:?}: use one of {:?}", suites::SUITES)))?,
    };
    let overrides = suites::Overrides {
        duration: args.duration,
        ramp: args.ramp,
        threads: args.threads,
        queue_depth: args.queue_depth,
        block_size: args.block_size,
        region: args.size,
    };
    suites::apply(&mut jobs, args.scale, &overrides);
    for job in &jobs {
        exec::check_fits(job, endpoint)?;
    }
    suites::dedupe_names(&mut jobs);
    Ok(jobs)
}

/// Runs `jobs` against `endpoint` with `driver`: ceilings, preconditioning, the runs
/// and their baselines. An interrupt ends it early with a partial result.
fn run_suite(
    invocation: &Invocation<'_>,
    jobs: &[JobSpec],
    endpoint: &Endpoint,
    driver: &mut Driver,
    started: SystemTime,
    mut notes: Vec<String>,
) -> Result<Outcome, BenchError> {
    let Invocation { args, suite_name, stop, .. } = *invocation;
    let mini = args.scale == Scale::Mini;
    let estimate: Duration = jobs.iter().map(|job| job.duration + job.ramp).sum();
    eprintln!(
        "sluice bench: suite {suite_name}, {} run(s), ~{:.0} s of I/O, driver {}, target {} {} ({} {} MiB)",
        jobs.len(),
        estimate.as_secs_f64(),
        driver.name(),
        endpoint.kind(),
        endpoint.address,
        endpoint.backend_kind(),
        endpoint.capacity >> 20
    );

    if mini {
        notes.push("scale mini: 300 ms runs at <= 2 threads x QD 4 (a smoke test, not a measurement)".into());
    }
    for (flag, set) in [
        ("--duration", args.duration.is_some()),
        ("--threads", args.threads.is_some()),
        ("--queue-depth", args.queue_depth.is_some()),
        ("--block-size", args.block_size.is_some()),
        ("--size", args.size.is_some()),
    ] {
        if set {
            notes.push(format!("override {flag}"));
        }
    }
    if let Driver::Fio(runner) = driver {
        notes.push(format!(
            "driver {}: every job as an fio job (numjobs = threads, each with its own connection), engine {}; latency and initiator CPU are fio's (lat histogram; usr + sys of the job processes)",
            runner.tools.version,
            match endpoint.protocol {
                Protocol::NvmeTcp => runner.tools.nvme_engine.display().to_string(),
                Protocol::Rbd => "rbd (fio's own librbd engine)".to_string(),
                Protocol::Iscsi { .. } => runner
                    .tools
                    .iscsi_engine
                    .as_ref()
                    .map_or("?".into(), |p| p.display().to_string()),
            }
        ));
        if jobs.iter().any(|job| job.rate_limit_iops.is_some() || job.load_percent.is_some()) {
            notes.push("driver fio: rate-limited runs measure latency from the actual issue time, not the intended one (fio's rate_process=poisson), so queueing behind a slow I/O is not counted as Sluice's host counts it, and they record no schedule (how far the rate fell behind)".into());
        }
        if args.precondition {
            notes.push("preconditioning ran with Sluice's host".into());
        }
    }

    // QoS on the namespace: read now and at the end (see `qos`).
    let qos_source = qos::QosSource::of(endpoint, args.target_rpc_socket.as_deref());
    let qos_before = qos_source.as_ref().and_then(|source| match source.read(&endpoint.nqn, endpoint.nsid.0) {
        Ok(reading) => Some(reading),
        Err(error) => {
            if args.target_rpc_socket.is_some() {
                notes.push(format!("QoS of the target not read: {error}"));
            }
            None
        }
    });
    if let Some(reading) = qos_before.as_ref().filter(|reading| !reading.limits.is_empty()) {
        eprintln!(
            "sluice bench: WARNING: the namespace under test has QoS limits ({}): the results may measure the limit",
            reading.limits.join(", ")
        );
    }

    // Ceilings measured on this machine, now.
    let short = mini || args.duration.is_some_and(|d| d < Duration::from_secs(2));
    let loopback = loopback_ceiling(endpoint, short, &mut notes);

    let preconditioning = if args.precondition && !stop.load(Ordering::Relaxed) {
        Some(precondition(&jobs[0], endpoint, stop, mini)?)
    } else {
        None
    };

    let mut runs = Vec::new();
    let mut baselines: Vec<bench_results::BaselineResult> = Vec::new();
    let mut baseline_cache: Vec<(String, f64, f64)> = Vec::new();
    let mut max_rates: Vec<(String, f64)> = Vec::new();
    let mut any_errors = false;
    let mut target_failures = 0;
    // Groups whose maximum-rate run the target failed: their load levels have no rate to run at.
    let mut failed_groups: Vec<String> = Vec::new();
    for job in jobs {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut job = job.clone();
        if let (Some(load), None) = (job.load_percent, job.rate_limit_iops) {
            let max = max_rates.iter().rev().find(|(group, _)| *group == job.group).map(|(_, iops)| *iops);
            let Some(max) = max.filter(|iops| *iops > 0.0) else {
                if failed_groups.contains(&job.group) {
                    let note = format!(
                        "run {:?}: not run: the maximum-rate run of group {:?} failed (the target failed), so load \
                         level {load}% has no rate",
                        job.name, job.group
                    );
                    eprintln!("  {note}");
                    notes.push(note);
                    continue;
                }
                return Err(BenchError::Usage(format!(
                    "job {:?}: impossible rate: load_percent {load} needs an earlier maximum-rate run (no rate_iops, no load_percent) in group {:?} that completed I/O",
                    job.name, job.group
                )));
            };
            job.rate_limit_iops = Some(max * load / 100.0);
        }
        let mut target_failure = None;
        let phases_before = phases::PhaseReading::take(endpoint);
        let (mut run, first_error) = match driver {
            Driver::SluiceHost => {
                let measured = exec::run_network(&job, endpoint, stop, true)?;
                target_failure = measured.target_failure.clone();
                (output::run_result(&job, &measured, endpoint.embedded.is_some()), measured.result.first_error.clone())
            }
            Driver::Fio(runner) => {
                let Some(measured) = runner.run(&job, endpoint, stop, true)? else {
                    break; // interrupted before fio measured anything
                };
                (
                    output::run_result_fio(&job, &measured.measurement, measured.target_seconds),
                    measured.measurement.first_error.clone(),
                )
            }
        };
        run.target_phases_us = phases::since(endpoint, phases_before);
        let interrupted = stop.load(Ordering::Relaxed);
        if interrupted && run.ios == 0 {
            break;
        }
        if job.rate_limit_iops.is_none() && job.load_percent.is_none() {
            max_rates.push((job.group.clone(), run.iops));
        }
        if let Some(reason) = target_failure {
            target_failures += 1;
            if run.ios == 0 {
                failed_groups.push(job.group.clone());
            }
            let note = output::target_failure_note(&run.name, &reason);
            eprintln!("  ! {note}");
            notes.push(note);
        }
        if run.errors > 0 {
            any_errors = true;
            notes.push(format!(
                "run {:?}: {} I/O error(s), first: {}",
                run.name,
                run.errors,
                first_error.as_deref().unwrap_or("?")
            ));
        }
        // Local baseline: the same workload at full rate on the backend, no network.
        if !args.no_baseline && !interrupted && endpoint.embedded.is_some() {
            let key = format!(
                "{:?}/{}/{}/{}/{}/{:?}",
                job.pattern, job.read_percent, job.block_size, job.threads, job.queue_depth, job.region_bytes
            );
            let cached = baseline_cache.iter().find(|(k, _, _)| *k == key).map(|(_, iops, bw)| (*iops, *bw));
            let (iops, bandwidth) = match cached {
                Some(found) => found,
                None => {
                    let mut local = job.clone();
                    local.rate_limit_iops = None;
                    local.load_percent = None;
                    local.duration = if mini {
                        Duration::from_millis(150)
                    } else {
                        (job.duration / 4).clamp(Duration::from_millis(200), Duration::from_secs(2))
                    };
                    local.ramp = Duration::from_millis(if mini { 20 } else { 100 });
                    match exec::run_local(&local, endpoint, stop)? {
                        Some(m) => {
                            let seconds = m.result.measured.as_secs_f64().max(1e-9);
                            let found = (m.result.ios() as f64 / seconds, m.result.bytes as f64 / seconds);
                            baseline_cache.push((key, found.0, found.1));
                            found
                        }
                        None => (0.0, 0.0),
                    }
                }
            };
            if iops > 0.0 {
                baselines.push(bench_results::BaselineResult {
                    run: run.name.clone(),
                    iops,
                    bytes_per_second: bandwidth,
                });
            }
        }
        let baseline = baselines.iter().find(|b| b.run == run.name).cloned();
        output::apply_ceilings(&mut run, baseline.as_ref(), loopback);
        output::print_progress_summary(&run);
        runs.push(run);
        if interrupted {
            break;
        }
    }
    let partial = stop.load(Ordering::Relaxed);
    if partial {
        notes.push("interrupted (Ctrl-C): partial result".into());
    }
    let qos = match (&qos_source, &qos_before) {
        (Some(source), Some(before)) => match source.read(&endpoint.nqn, endpoint.nsid.0) {
            Ok(after) => {
                let (observation, qos_notes) = qos::observe(source, before, &after);
                for note in &qos_notes {
                    eprintln!("sluice bench: {note}");
                }
                notes.extend(qos_notes);
                Some(observation)
            }
            Err(error) => {
                notes.push(format!("QoS of the target not read after the suite: {error}"));
                None
            }
        },
        _ => None,
    };

    let result = BenchResult {
        schema: SCHEMA_ID.into(),
        partial,
        started_at: system::rfc3339(started),
        finished_at: system::rfc3339(SystemTime::now()),
        suite: suite_name.to_string(),
        driver: driver.name().into(),
        machine: system::machine(),
        target: TargetInfo {
            kind: endpoint.kind().into(),
            address: endpoint.address.to_string(),
            subsystem_nqn: endpoint.nqn.clone(),
            namespace_id: endpoint.nsid.0,
            backend: endpoint.backend_kind().into(),
            block_size: endpoint.lba_bytes,
            capacity_bytes: endpoint.capacity,
        },
        ceilings: Ceilings { loopback_tcp_bytes_per_second: loopback, local_baseline: baselines },
        preconditioning,
        runs,
        notes,
        qos,
    };
    Ok(Outcome { result, any_errors, target_failures })
}

/// The loopback TCP ceiling, measured now (over 200 ms for `short` runs, else 1 s) when
/// the target runs on this machine; `None`, and why in `notes`, otherwise.
fn loopback_ceiling(endpoint: &Endpoint, short: bool, notes: &mut Vec<String>) -> Option<f64> {
    if !endpoint.is_local() {
        let note =
            "remote target: no ceilings (the loopback TCP and local-baseline ceilings describe this machine only)";
        notes.push(note.into());
        return None;
    }
    let window = if short { Duration::from_millis(200) } else { Duration::from_secs(1) };
    match system::loopback_tcp_bandwidth(window) {
        Ok(bandwidth) => {
            eprintln!("  ceiling: loopback TCP stream {:.0} MB/s", bandwidth / 1e6);
            Some(bandwidth)
        }
        Err(error) => {
            notes.push(format!("loopback TCP ceiling not measured: {error}"));
            None
        }
    }
}

/// Workload-independent preconditioning (128 KiB sequential writes over twice the
/// capacity), then rounds of `job` until the SNIA PTS steady state or 25 rounds.
fn precondition(
    job: &JobSpec,
    endpoint: &exec::Endpoint,
    stop: &workload::RunControl,
    mini: bool,
) -> Result<Preconditioning, BenchError> {
    let threads = 2u32;
    let mut fill = JobSpec::new("precondition: 128K sequential write", Pattern::Sequential, 0, 128 * 1024, threads, 8);
    fill.ramp = Duration::ZERO;
    fill.region_bytes = None;
    // Each sequential thread walks its half and wraps: one run long enough for 2x
    // capacity at the rate a short first piece measured covers every block twice.
    let target_bytes = endpoint.capacity.saturating_mul(2);
    eprintln!("  preconditioning: writing {} MiB sequentially (128 KiB)", target_bytes >> 20);
    fill.duration = Duration::from_millis(300);
    let probe = exec::run_network(&fill, endpoint, stop, false)?;
    if probe.result.bytes == 0 {
        return Err(BenchError::Runtime("preconditioning wrote nothing".into()));
    }
    let rate = probe.result.bytes as f64 / probe.result.measured.as_secs_f64().max(1e-3);
    fill.duration = Duration::from_secs_f64((target_bytes as f64 / rate * 1.1).max(0.1));
    let measured = exec::run_network(&fill, endpoint, stop, false)?;
    let written = probe.result.bytes + measured.result.bytes;
    let mut round = job.clone();
    round.rate_limit_iops = None;
    round.load_percent = None;
    round.ramp = Duration::from_millis(if mini { 20 } else { 500 });
    round.duration = if mini {
        Duration::from_millis(200)
    } else {
        job.duration.clamp(Duration::from_secs(1), Duration::from_secs(60))
    };
    let mut rounds = Vec::new();
    let mut verdict = workload::steady_state::detect(&rounds);
    while rounds.len() < 25 && !stop.load(Ordering::Relaxed) {
        let measured = exec::run_network(&round, endpoint, stop, false)?;
        rounds.push(measured.result.ios() as f64 / measured.result.measured.as_secs_f64().max(1e-9));
        verdict = workload::steady_state::detect(&rounds);
        eprintln!(
            "  steady-state round {}: {:.0} IOPS{}",
            rounds.len(),
            rounds[rounds.len() - 1],
            if verdict.reached { " (steady)" } else { "" }
        );
        if verdict.reached {
            break;
        }
    }
    let finite = |x: f64| if x.is_finite() { x * 100.0 } else { 0.0 };
    Ok(Preconditioning {
        method: "128KiB sequential write, 2x capacity".into(),
        bytes_written: written,
        round_seconds: round.duration.as_secs_f64(),
        rounds: rounds.clone(),
        steady_state: bench_results::SteadyState {
            reached: verdict.reached,
            window_rounds: workload::steady_state::WINDOW.min(rounds.len()) as u32,
            average: verdict.window_average,
            data_excursion_percent: finite(verdict.data_excursion),
            slope_excursion_percent: finite(verdict.slope_excursion),
        },
    })
}

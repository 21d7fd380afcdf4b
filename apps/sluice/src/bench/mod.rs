//! `sluice bench` and `sluice report`: the field reports' benchmark methodology
//! (four corners, the enterprise synthetic workload sweep, load-level curves, the
//! HCI profile) against the embedded target or any NVMe/TCP target, with live
//! progress, CPU per I/O, ceilings measured in the same run, a versioned JSON result
//! and an HTML report.
//!
//! Threads and queues: every run connects one controller asking for `threads` I/O
//! queues and gives each worker thread its own queue (its own TCP connection). If
//! the target grants fewer queues, further controllers are connected until every
//! thread has a queue of its own: threads never share a queue, so a thread's queue
//! depth is exactly what the job says.

mod engine;
mod exec;
mod output;
mod suites;
mod system;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bench_results::{BenchResult, Ceilings, Preconditioning, TargetInfo, SCHEMA_ID};
use workload::{parse_duration, JobSpec, Pattern};

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

fn parse_size_arg(text: &str) -> Result<u64, String> {
    workload::parse_byte_size(text)
}

fn parse_u32_size_arg(text: &str) -> Result<u32, String> {
    let bytes = workload::parse_byte_size(text)?;
    u32::try_from(bytes).map_err(|_| format!("{text} is too large"))
}

/// `sluice bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Suites: quick (default, about a minute), four-corners, eswa, curves, hci.
Without --target an embedded Sluice target is started on 127.0.0.1 (a free port)
with one RAM namespace. Results: a table on stdout, JSON and HTML under
target/bench/ (or --json PATH). Ctrl-C stops the current run and writes the
partial result (exit 130).")]
pub struct BenchArgs {
    /// Named suite.
    #[arg(long, default_value = "quick", value_parser = clap::builder::PossibleValuesParser::new(suites::SUITES))]
    suite: String,
    /// TOML file with [[job]] tables (name, group, pattern, read_percent, block_size,
    /// threads, queue_depth, duration, ramp, region, rate_iops, load_percent, seed).
    #[arg(long, conflicts_with = "suite")]
    suite_file: Option<PathBuf>,
    /// full: the suite's durations; mini: 300 ms runs at <= 2 threads x QD 4.
    #[arg(long, value_enum, default_value = "full")]
    scale: Scale,
    /// Measured time per run, e.g. 10s or 300ms.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Unmeasured warm-up per run.
    #[arg(long, value_parser = parse_duration)]
    ramp: Option<Duration>,
    /// Worker threads per run (each with its own I/O queue).
    #[arg(long)]
    threads: Option<u32>,
    /// Outstanding I/Os per thread.
    #[arg(long)]
    queue_depth: Option<u32>,
    /// I/O size, e.g. 4KiB.
    #[arg(long, value_parser = parse_u32_size_arg)]
    block_size: Option<u32>,
    /// Bytes of the namespace each job touches (from offset 0).
    #[arg(long, value_parser = parse_size_arg)]
    size: Option<u64>,
    /// An NVMe/TCP target instead of the embedded one: tcp://ADDR:PORT/NQN.
    #[arg(long)]
    target: Option<String>,
    /// Backend of the embedded namespace.
    #[arg(long, default_value = "ram", value_parser = ["ram", "null"])]
    backend: String,
    /// Size of the embedded namespace.
    #[arg(long, default_value = "1GiB", value_parser = parse_size_arg)]
    namespace_size: u64,
    /// Threads of the embedded target's runtime [default: half the CPUs, at least 1].
    #[arg(long)]
    target_threads: Option<usize>,
    /// Precondition first: 128 KiB sequential writes over twice the capacity, then
    /// rounds of the first job until steady state (SNIA PTS) or 25 rounds.
    #[arg(long)]
    precondition: bool,
    /// Skip the local-baseline ceiling runs.
    #[arg(long)]
    no_baseline: bool,
    /// Where to write the JSON result [default: target/bench/<suite>-<time>.json];
    /// the HTML report goes next to it.
    #[arg(long)]
    json: Option<PathBuf>,
    /// I/O driver: sluice (the built-in host). fio is not available yet.
    #[arg(long, default_value = "sluice")]
    driver: String,
    /// Also run the suite over another transport (iscsi: not available yet).
    #[arg(long)]
    compare: Option<String>,
}

/// `sluice report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Result files written by `sluice bench --json`.
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, default_value = "report.html")]
    output: PathBuf,
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
            Err(error) => {
                return fail(&BenchError::Runtime(format!(
                    "cannot read {}: {error}",
                    path.display()
                )))
            }
        };
        let result = match BenchResult::from_json(&text) {
            Ok(result) => result,
            Err(error) => return fail(&BenchError::Usage(format!("{}: {error}", path.display()))),
        };
        if let Err(problems) = bench_results::validate(&result) {
            return fail(&BenchError::Usage(format!(
                "{}: {}",
                path.display(),
                problems.join("; ")
            )));
        }
        let mut label = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
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

fn write_file(path: &std::path::Path, text: &str) -> Result<(), BenchError> {
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .map_err(|e| BenchError::Runtime(format!("cannot create {}: {e}", parent.display())))?;
    }
    std::fs::write(path, text)
        .map_err(|e| BenchError::Runtime(format!("cannot write {}: {e}", path.display())))
}

/// Runs `sluice bench`.
pub fn bench(args: BenchArgs) -> ExitCode {
    match bench_inner(args) {
        Ok(code) => code,
        Err(error) => fail(&error),
    }
}

fn bench_inner(args: BenchArgs) -> Result<ExitCode, BenchError> {
    if args.driver == "fio" {
        return Err(BenchError::Runtime(
            "--driver fio: not yet (the fio ioengine is a later issue); use --driver sluice".into(),
        ));
    }
    if args.driver != "sluice" {
        return Err(BenchError::Usage(format!(
            "--driver {:?}: use sluice",
            args.driver
        )));
    }
    if let Some(other) = &args.compare {
        return Err(BenchError::Runtime(format!(
            "--compare {other}: not yet (the NVMe/TCP versus iSCSI comparison is a later issue)"
        )));
    }
    let started = SystemTime::now();
    let mini = args.scale == Scale::Mini;

    // Jobs from a file are checked before anything starts.
    let (suite_name, file_jobs) = match &args.suite_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                BenchError::Usage(format!("cannot read suite file {}: {e}", path.display()))
            })?;
            let jobs = JobSpec::parse_suite(&text)
                .map_err(|e| BenchError::Usage(format!("suite file {}: {e}", path.display())))?;
            let name = path
                .file_stem()
                .map_or("suite-file".into(), |s| s.to_string_lossy().into_owned());
            (name, Some(jobs))
        }
        None => (args.suite.clone(), None),
    };

    // Ctrl-C: the first stops the current run (the partial result is written), a
    // second one exits at once.
    let stop = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        EXIT_INTERRUPTED as i32,
        stop.clone(),
    );
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone());

    let target_threads = args
        .target_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()) / 2)
        .max(1);
    let endpoint = match &args.target {
        Some(text) => {
            let (address, nqn) = exec::parse_target(text)?;
            exec::connect_remote(address, &nqn)?
        }
        None => exec::start_embedded(&args.backend, args.namespace_size, target_threads)?,
    };

    let mut jobs = match file_jobs {
        Some(jobs) => jobs,
        None => suites::suite(&suite_name, endpoint.capacity).ok_or_else(|| {
            BenchError::Usage(format!(
                "--suite {suite_name:?}: use one of {:?}",
                suites::SUITES
            ))
        })?,
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
        exec::check_fits(job, &endpoint)?;
    }
    dedupe_names(&mut jobs);

    let estimate: Duration = jobs.iter().map(|job| job.duration + job.ramp).sum();
    eprintln!(
        "sluice bench: suite {suite_name}, {} run(s), ~{:.0} s of I/O, target {} {} ({} {} MiB)",
        jobs.len(),
        estimate.as_secs_f64(),
        if endpoint.embedded.is_some() {
            "embedded"
        } else {
            "remote"
        },
        endpoint.address,
        endpoint
            .embedded
            .as_ref()
            .map_or("remote", |e| e.backend_kind),
        endpoint.capacity >> 20
    );

    let mut notes = Vec::new();
    if mini {
        notes.push(
            "scale mini: 300 ms runs at <= 2 threads x QD 4 (a smoke test, not a measurement)"
                .into(),
        );
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

    // Ceilings measured on this machine, now.
    let loopback = if endpoint.embedded.is_some() {
        let window = if mini || args.duration.is_some_and(|d| d < Duration::from_secs(2)) {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        };
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
    } else {
        notes.push("remote target: no ceilings (the loopback TCP and local-baseline ceilings describe this machine only)".into());
        None
    };

    let preconditioning = if args.precondition && !stop.load(Ordering::Relaxed) {
        Some(precondition(&jobs[0], &endpoint, &stop, mini)?)
    } else {
        None
    };

    let mut runs = Vec::new();
    let mut baselines: Vec<bench_results::BaselineResult> = Vec::new();
    let mut baseline_cache: Vec<(String, f64, f64)> = Vec::new();
    let mut max_rates: Vec<(String, f64)> = Vec::new();
    let mut any_errors = false;
    for job in &jobs {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut job = job.clone();
        if let (Some(load), None) = (job.load_percent, job.rate_limit_iops) {
            let max = max_rates
                .iter()
                .rev()
                .find(|(group, _)| *group == job.group)
                .map(|(_, iops)| *iops);
            let Some(max) = max.filter(|iops| *iops > 0.0) else {
                return Err(BenchError::Usage(format!(
                    "job {:?}: impossible rate: load_percent {load} needs an earlier maximum-rate run (no rate_iops, no load_percent) in group {:?} that completed I/O",
                    job.name, job.group
                )));
            };
            job.rate_limit_iops = Some(max * load / 100.0);
        }
        let measured = exec::run_network(&job, &endpoint, &stop, true)?;
        let interrupted = stop.load(Ordering::Relaxed);
        if interrupted && measured.result.ios() == 0 {
            break;
        }
        let mut run = output::run_result(&job, &measured, endpoint.embedded.is_some());
        if job.rate_limit_iops.is_none() && job.load_percent.is_none() {
            max_rates.push((job.group.clone(), run.iops));
        }
        if run.errors > 0 {
            any_errors = true;
            notes.push(format!(
                "run {:?}: {} I/O error(s), first: {}",
                run.name,
                run.errors,
                measured.result.first_error.as_deref().unwrap_or("?")
            ));
        }
        // Local baseline: the same workload at full rate on the backend, no network.
        if !args.no_baseline && !interrupted && endpoint.embedded.is_some() {
            let key = format!(
                "{:?}/{}/{}/{}/{}/{:?}",
                job.pattern,
                job.read_percent,
                job.block_size,
                job.threads,
                job.queue_depth,
                job.region_bytes
            );
            let cached = baseline_cache
                .iter()
                .find(|(k, _, _)| *k == key)
                .map(|(_, iops, bw)| (*iops, *bw));
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
                    match exec::run_local(&local, &endpoint, &stop)? {
                        Some(m) => {
                            let seconds = m.result.measured.as_secs_f64().max(1e-9);
                            let found = (
                                m.result.ios() as f64 / seconds,
                                m.result.bytes as f64 / seconds,
                            );
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

    let result = BenchResult {
        schema: SCHEMA_ID.into(),
        partial,
        started_at: system::rfc3339(started),
        finished_at: system::rfc3339(SystemTime::now()),
        suite: suite_name.clone(),
        driver: "sluice-host".into(),
        machine: system::machine(),
        target: TargetInfo {
            kind: if endpoint.embedded.is_some() {
                "embedded"
            } else {
                "remote"
            }
            .into(),
            address: endpoint.address.to_string(),
            subsystem_nqn: endpoint.nqn.clone(),
            namespace_id: endpoint.nsid.0,
            backend: endpoint
                .embedded
                .as_ref()
                .map_or("remote", |e| e.backend_kind)
                .into(),
            block_size: endpoint.lba_bytes,
            capacity_bytes: endpoint.capacity,
        },
        ceilings: Ceilings {
            loopback_tcp_bytes_per_second: loopback,
            local_baseline: baselines,
        },
        preconditioning,
        runs,
        notes,
    };
    drop(endpoint);

    output::print_table(&result);
    let json_path = args.json.clone().unwrap_or_else(|| {
        PathBuf::from("target/bench").join(format!(
            "{suite_name}-{}.json",
            system::compact_timestamp(started)
        ))
    });
    let html_path = json_path.with_extension("html");
    write_file(&json_path, &(result.to_json_pretty() + "\n"))?;
    let label = json_path
        .file_stem()
        .map_or_else(|| suite_name.clone(), |s| s.to_string_lossy().into_owned());
    write_file(
        &html_path,
        &bench_results::render_html(&[(label, result.clone())]),
    )?;
    println!();
    println!("result: {}", json_path.display());
    println!("report: {}", html_path.display());
    println!(
        "took {:.1} s",
        started.elapsed().map_or(0.0, |d| d.as_secs_f64())
    );
    if let Err(problems) = bench_results::validate(&result) {
        eprintln!(
            "sluice: warning: the result does not validate: {}",
            problems.join("; ")
        );
    }
    if partial {
        eprintln!("sluice: interrupted; partial result written");
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    if any_errors {
        eprintln!("sluice: error: some runs had I/O errors (flagged with ! in the table)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Makes run names unique ("name", "name #2", ...).
fn dedupe_names(jobs: &mut [JobSpec]) {
    let mut seen: Vec<String> = Vec::new();
    for job in jobs.iter_mut() {
        let mut name = job.name.clone();
        let mut n = 2;
        while seen.contains(&name) {
            name = format!("{} #{n}", job.name);
            n += 1;
        }
        job.name = name.clone();
        seen.push(name);
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
    let mut fill = JobSpec::new(
        "precondition: 128K sequential write",
        Pattern::Sequential,
        0,
        128 * 1024,
        threads,
        8,
    );
    fill.ramp = Duration::ZERO;
    fill.region_bytes = None;
    // Each sequential thread walks its half and wraps: one run long enough for 2x
    // capacity at the rate a short first piece measured covers every block twice.
    let target_bytes = endpoint.capacity.saturating_mul(2);
    eprintln!(
        "  preconditioning: writing {} MiB sequentially (128 KiB)",
        target_bytes >> 20
    );
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
        job.duration
            .clamp(Duration::from_secs(1), Duration::from_secs(60))
    };
    let mut rounds = Vec::new();
    let mut verdict = workload::steady_state::detect(&rounds);
    while rounds.len() < 25 && !stop.load(Ordering::Relaxed) {
        let measured = exec::run_network(&round, endpoint, stop, false)?;
        rounds
            .push(measured.result.ios() as f64 / measured.result.measured.as_secs_f64().max(1e-9));
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

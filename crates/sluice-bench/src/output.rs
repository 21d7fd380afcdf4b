//! From measurements to `RunResult`s, and the final table.

use bench_results::{BaselineResult, BenchResult, CpuUse, Latency, Percentile, RunResult, Sample, Schedule};
use workload::{JobSpec, LagStats, LATE_THRESHOLD, PERCENTILES};

use super::exec::Measured;

fn us(nanoseconds: f64) -> f64 {
    nanoseconds / 1e3
}

/// What any driver measured for one run: the rest of a `RunResult` derives from it
/// and the job.
struct Totals {
    seconds: f64,
    ios: u64,
    bytes: u64,
    errors: u64,
    initiator_seconds: f64,
    target_seconds: Option<f64>,
    /// Seconds the threads waited for a CPU (`None`: not measured).
    initiator_runqueue_seconds: Option<f64>,
    target_runqueue_seconds: Option<f64>,
    latency_us: Latency,
    time_series: Vec<Sample>,
    /// Open loop: how far behind its arrival schedule the generator got.
    lag: Option<LagStats>,
}

/// The result of one run.
pub fn run_result(job: &JobSpec, measured: &Measured, embedded: bool) -> RunResult {
    let result = &measured.result;
    let summary = result.latency.summary();
    let mut percentiles: Vec<Percentile> = PERCENTILES
        .iter()
        .zip(&summary.percentiles)
        .map(|(&percentile, &(_, value))| Percentile { percentile, value: us(value as f64) })
        .collect();
    // Values never descend (HDR values do not; this guards the empty histogram).
    for index in 1..percentiles.len() {
        if percentiles[index].value < percentiles[index - 1].value {
            percentiles[index].value = percentiles[index - 1].value;
        }
    }
    let totals = Totals {
        seconds: result.measured.as_secs_f64(),
        ios: result.ios(),
        bytes: result.bytes,
        errors: result.errors,
        initiator_seconds: measured.initiator_seconds,
        target_seconds: embedded.then_some(measured.target_seconds),
        initiator_runqueue_seconds: measured.initiator_runqueue_seconds,
        target_runqueue_seconds: measured.target_runqueue_seconds.filter(|_| embedded),
        latency_us: Latency {
            mean: us(summary.mean_ns),
            min: us(summary.min_ns as f64),
            max: us(summary.max_ns as f64),
            stddev: us(summary.stddev_ns),
            percentiles,
        },
        time_series: measured
            .samples
            .iter()
            .map(|sample| Sample {
                t_seconds: f64::from(sample.second),
                iops: sample.ios as f64,
                bytes_per_second: sample.bytes as f64,
                p99_us: us(sample.p99_ns as f64),
            })
            .collect(),
        lag: result.schedule,
    };
    assemble(job, totals)
}

/// The result of one run driven by fio. `target_seconds`: the target's CPU over fio's
/// measured window, when readable.
pub fn run_result_fio(
    job: &JobSpec,
    measured: &bench_results::fio::FioMeasurement,
    target_seconds: Option<f64>,
) -> RunResult {
    let totals = Totals {
        seconds: measured.duration_seconds,
        ios: measured.ios,
        bytes: measured.bytes,
        errors: measured.errors,
        initiator_seconds: measured.initiator_seconds,
        target_seconds,
        initiator_runqueue_seconds: None,
        target_runqueue_seconds: None,
        latency_us: measured.latency_us.clone(),
        time_series: measured.time_series.clone(),
        lag: None,
    };
    assemble(job, totals)
}

/// The job's parameters, the totals and the rates and CPU costs derived from them.
fn assemble(job: &JobSpec, totals: Totals) -> RunResult {
    let Totals {
        seconds,
        ios,
        bytes,
        errors,
        initiator_seconds,
        target_seconds,
        initiator_runqueue_seconds,
        target_runqueue_seconds,
        latency_us,
        time_series,
        lag,
    } = totals;
    let per_second = |count: f64| if seconds > 0.0 { count / seconds } else { 0.0 };
    let iops = per_second(ios as f64);
    let schedule = match (lag, job.rate_limit_iops) {
        (Some(lag), Some(rate)) if rate > 0.0 => Some(schedule(&lag, iops, rate)),
        _ => None,
    };
    let per_io = |cpu: f64| if ios > 0 { cpu * 1e6 / ios as f64 } else { 0.0 };
    RunResult {
        name: job.name.clone(),
        group: job.group.clone(),
        pattern: job.pattern.as_str().into(),
        read_percent: u32::from(job.read_percent),
        block_size: job.block_size,
        threads: job.threads,
        queue_depth: job.queue_depth,
        rate_limit_iops: job.rate_limit_iops,
        load_percent: job.load_percent.map(|load| (load.round() as u32).clamp(1, 100)),
        duration_seconds: seconds,
        ios,
        bytes,
        errors,
        iops,
        bytes_per_second: per_second(bytes as f64),
        latency_us,
        cpu: CpuUse {
            initiator_seconds,
            target_seconds,
            initiator_us_per_io: per_io(initiator_seconds),
            target_us_per_io: target_seconds.map(per_io),
            iops_per_initiator_core: if initiator_seconds > 0.0 { ios as f64 / initiator_seconds } else { 0.0 },
            initiator_runqueue_seconds,
            target_runqueue_seconds,
        },
        percent_of_ceiling: None,
        bound_by: None,
        time_series,
        schedule,
        target_phases_us: None,
    }
}

/// The result's view of the generator's lag: offered `rate`, achieved `iops`.
fn schedule(lag: &LagStats, iops: f64, rate: f64) -> Schedule {
    let mut schedule = Schedule {
        achieved_percent: iops / rate * 100.0,
        issued: lag.issued,
        lag_mean_us: us(lag.lag_mean_ns()),
        lag_max_us: us(lag.lag_max_ns as f64),
        lag_final_us: us(lag.lag_final_ns as f64),
        backlog_final_ios: lag.backlog_final,
        late_threshold_us: LATE_THRESHOLD.as_secs_f64() * 1e6,
        late_ios: lag.late,
        late_ios_queue_full: lag.late_queue_full,
        fell_behind: false,
    };
    schedule.fell_behind = schedule.behind_by_rule();
    schedule
}

/// Sets `percent_of_ceiling` and `bound_by` from the tighter ceiling (in I/Os per
/// second: the local baseline's IOPS, or loopback bandwidth / block size).
pub fn apply_ceilings(run: &mut RunResult, baseline: Option<&BaselineResult>, loopback: Option<f64>) {
    let mut best: Option<(f64, &str)> = None;
    if let Some(baseline) = baseline.filter(|b| b.iops > 0.0) {
        best = Some((baseline.iops, "local-baseline"));
    }
    if let Some(bandwidth) = loopback.filter(|b| *b > 0.0) {
        let iops = bandwidth / f64::from(run.block_size);
        if best.is_none_or(|(current, _)| iops < current) {
            best = Some((iops, "loopback-tcp"));
        }
    }
    if let Some((ceiling, bound)) = best {
        run.percent_of_ceiling = Some(run.iops / ceiling * 100.0);
        run.bound_by = Some(bound.into());
    }
}

/// One line after each run (stderr).
pub fn print_progress_summary(run: &RunResult) {
    eprintln!(
        "  {:<40} {:>10.0} IOPS {:>9.1} MB/s  avg {:>7.1} us  p99 {:>7.1} us{}",
        run.name,
        run.iops,
        run.bytes_per_second / 1e6,
        run.latency_us.mean,
        percentile(run, 99.0),
        if run.errors > 0 { format!("  {} ERRORS", run.errors) } else { String::new() }
    );
    if run.schedule.as_ref().is_some_and(|s| s.fell_behind) {
        if let Some(summary) = bench_results::schedule::run_summary(run) {
            eprintln!("  {:<40} ! {summary}", "");
        }
    }
}

fn percentile(run: &RunResult, which: f64) -> f64 {
    run.latency_us.percentiles.iter().find(|p| p.percentile == which).map_or(0.0, |p| p.value)
}

/// What a note about a run the target failed says after the run's name.
pub const TARGET_FAILED: &str = "target failed: ";

/// The result's note for run `name`, which the target failed for `reason`.
pub fn target_failure_note(name: &str, reason: &str) -> String {
    format!("run {name:?}: {TARGET_FAILED}{reason}")
}

/// The runs of `result` the target failed, with why (from its notes).
pub fn target_failures(result: &BenchResult) -> impl Iterator<Item = (&str, &str)> {
    result.runs.iter().filter_map(|run| target_failure(result, &run.name).map(|reason| (run.name.as_str(), reason)))
}

/// Why the target failed run `name`, if it did.
fn target_failure<'a>(result: &'a BenchResult, name: &str) -> Option<&'a str> {
    let prefix = format!("run {name:?}: {TARGET_FAILED}");
    result.notes.iter().find_map(|note| note.strip_prefix(&prefix))
}

/// The final table (stdout). A run with I/O errors or that the target failed is
/// flagged with `!`, the failure on a line under it.
pub fn print_table(result: &BenchResult) {
    println!();
    println!(
        "{:<44} {:>8} {:>10} {:>9} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7} {:>7}",
        "run", "TxQD", "IOPS", "MB/s", "avg us", "p99 us", "p99.99 us", "max us", "CPU us", "tgt us", "% ceil"
    );
    for run in &result.runs {
        let shape = format!("{}x{}", run.threads, run.queue_depth);
        let mut name = run.name.clone();
        let failure = target_failure(result, &run.name);
        if run.errors > 0 || failure.is_some() {
            name = format!("! {name}");
        }
        if name.chars().count() > 44 {
            name = name.chars().take(43).collect::<String>() + "~";
        }
        println!(
            "{:<44} {:>8} {:>10.0} {:>9.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>7.2} {:>7} {:>7}",
            name,
            shape,
            run.iops,
            run.bytes_per_second / 1e6,
            run.latency_us.mean,
            percentile(run, 99.0),
            percentile(run, 99.99),
            run.latency_us.max,
            run.cpu.initiator_us_per_io,
            run.cpu.target_us_per_io.map_or("-".into(), |v| format!("{v:.2}")),
            match (&run.percent_of_ceiling, &run.bound_by) {
                (Some(p), Some(b)) => format!("{p:.0}%{}", if b == "loopback-tcp" { "n" } else { "b" }),
                _ => "-".into(),
            }
        );
        if let Some(line) = schedule_line(run) {
            println!("{line}");
        }
        if let Some(line) = phases_line(run) {
            println!("{line}");
        }
        if let Some(reason) = failure {
            println!("  ! {TARGET_FAILED}{reason} ({} I/O errors)", run.errors);
        }
    }
    if result.runs.iter().any(|run| run.schedule.is_some()) {
        println!(
            "schedule: rate-limited runs without a line under them kept to their arrival schedule (no I/O submitted > {} late)",
            bench_results::schedule::human_us(LATE_THRESHOLD.as_secs_f64() * 1e6)
        );
    }
    if result.runs.iter().any(|run| run.target_phases_us.is_some()) {
        println!("target: where the embedded target's time went (mean per command, receipt to response sent)");
    }
    if let Some(bandwidth) = result.ceilings.loopback_tcp_bytes_per_second {
        println!("ceilings: loopback TCP {:.0} MB/s (n); local baseline per run (b)", bandwidth / 1e6);
    }
    if result.partial {
        println!("PARTIAL: interrupted");
    }
}

/// The line under a rate-limited run's row in the table: "! fell behind: ..." when it
/// did, "  kept up: ..." when some I/Os were late all the same, else none.
fn schedule_line(run: &RunResult) -> Option<String> {
    let schedule = run.schedule.as_ref()?;
    let mark = match (schedule.fell_behind, schedule.late_ios > 0) {
        (true, _) => "!",
        (false, true) => " ",
        (false, false) => return None,
    };
    Some(format!("  {mark} {}", bench_results::schedule::run_summary(run)?))
}

/// The line under a run's row with the embedded target's split of its time, if any:
/// "    target: receive 12.0 / QoS 0.0 / storage 0.1 / send 7.5 us per command (19.6 of avg 45.2)".
fn phases_line(run: &RunResult) -> Option<String> {
    let phases = run.target_phases_us.as_ref()?;
    Some(format!(
        "    target: {} ({} of avg {:.1})",
        phases.summary(),
        bench_results::phases::short(phases.total()),
        run.latency_us.mean
    ))
}

/// `new` against `old` in percent, e.g. "+14.6%"; "-" when `old` is zero.
fn change(new: f64, old: f64) -> String {
    if old > 0.0 && new.is_finite() {
        format!("{:+.1}%", (new - old) / old * 100.0)
    } else {
        "-".into()
    }
}

fn or_dash(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The side-by-side table of `--compare iscsi` (markdown, also printed as is): per run
/// IOPS, MB/s, average and p99 latency, and CPU per I/O on the initiator and the target,
/// NVMe/TCP next to iSCSI, with NVMe/TCP's change against iSCSI (the field report's
/// direction: "NVMe-oF vs iSCSI: +14.6 % throughput, -21.4 % latency").
pub fn comparison_markdown(nvme: &BenchResult, iscsi: &BenchResult) -> String {
    let sides = Sides {
        title: "NVMe/TCP (Sluice target, Sluice fio engine) vs iSCSI (tgt, fio libiscsi engine)",
        a: "NVMe/TCP",
        b: "iSCSI",
    };
    labelled_comparison_markdown(nvme, iscsi, &sides)
}

/// The two sides of a comparison table: a title and a short label for each.
pub struct Sides<'a> {
    pub title: &'a str,
    pub a: &'a str,
    pub b: &'a str,
}

/// Side `a` against side `b`, run by run (matched by name): IOPS, MB/s, mean and p99
/// latency, host and target CPU per I/O; "change" is a against b.
pub fn labelled_comparison_markdown(nvme: &BenchResult, iscsi: &BenchResult, sides: &Sides<'_>) -> String {
    let Sides { title, a: la, b: lb } = *sides;
    let mut out = String::new();
    out.push_str(&format!("{title}, suite {}; change = {la} against {lb}\n\n", nvme.suite));
    out.push_str(&format!(
        "| run | TxQD | IOPS {la} | IOPS {lb} | change | MB/s {la} | MB/s {lb} | avg us {la} | avg us {lb} | change | \
         p99 us {la} | p99 us {lb} | host CPU us/IO {la} | host CPU us/IO {lb} | target CPU us/IO {la} | \
         target CPU us/IO {lb} |\n"
    ));
    out.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for a in &nvme.runs {
        let b = iscsi.runs.iter().find(|run| run.name == a.name);
        let get = |f: &dyn Fn(&RunResult) -> f64| b.map(f);
        let b_iops = get(&|r| r.iops);
        let b_mean = get(&|r| r.latency_us.mean);
        let flag = |run: &RunResult| if run.errors > 0 { " !" } else { "" };
        out.push_str(&format!(
            "| {}{} | {}x{} | {:.0} | {} | {} | {:.1} | {} | {:.1} | {} | {} | {:.1} | {} | {:.2} | {} | {} | {} |\n",
            a.name,
            if a.errors > 0 || b.is_some_and(|b| b.errors > 0) {
                format!("{}{}", flag(a), b.map_or("", flag))
            } else {
                String::new()
            },
            a.threads,
            a.queue_depth,
            a.iops,
            or_dash(b_iops, 0),
            b_iops.map_or("-".into(), |b| change(a.iops, b)),
            a.bytes_per_second / 1e6,
            or_dash(get(&|r| r.bytes_per_second / 1e6), 1),
            a.latency_us.mean,
            or_dash(b_mean, 1),
            b_mean.map_or("-".into(), |b| change(a.latency_us.mean, b)),
            percentile(a, 99.0),
            or_dash(get(&|r| percentile(r, 99.0)), 1),
            a.cpu.initiator_us_per_io,
            or_dash(get(&|r| r.cpu.initiator_us_per_io), 2),
            or_dash(a.cpu.target_us_per_io, 2),
            or_dash(b.and_then(|r| r.cpu.target_us_per_io), 2),
        ));
    }
    if nvme.partial || iscsi.partial {
        out.push_str("\nPARTIAL: interrupted\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(runs: &[(&str, f64, f64)]) -> BenchResult {
        let runs = runs
            .iter()
            .map(|&(name, iops, mean)| {
                let job = JobSpec::new(name, workload::Pattern::Random, 100, 4096, 1, 1);
                let measured = bench_results::fio::FioMeasurement {
                    fio_version: "fio-3.33".into(),
                    duration_seconds: 10.0,
                    ios: (iops * 10.0) as u64,
                    bytes: (iops * 10.0) as u64 * 4096,
                    errors: 0,
                    first_error: None,
                    latency_us: Latency {
                        mean,
                        min: mean / 2.0,
                        max: mean * 10.0,
                        stddev: 1.0,
                        percentiles: vec![Percentile { percentile: 99.0, value: mean * 3.0 }],
                    },
                    initiator_seconds: 5.0,
                    time_series: Vec::new(),
                    window_ms: (0.0, 10_000.0),
                };
                run_result_fio(&job, &measured, Some(2.0))
            })
            .collect();
        BenchResult {
            schema: bench_results::SCHEMA_ID.into(),
            partial: false,
            started_at: "2026-11-21T18:42:17Z".into(),
            finished_at: "2026-11-21T18:43:17Z".into(),
            suite: "four-corners".into(),
            driver: "fio".into(),
            machine: crate::system::machine(),
            target: bench_results::TargetInfo {
                kind: "embedded".into(),
                address: "127.0.0.1:4420".into(),
                subsystem_nqn: "nqn.2026-11.io.sluice:bench".into(),
                namespace_id: 1,
                backend: "file".into(),
                block_size: 512,
                capacity_bytes: 1 << 30,
            },
            ceilings: bench_results::Ceilings { loopback_tcp_bytes_per_second: None, local_baseline: Vec::new() },
            preconditioning: None,
            runs,
            notes: Vec::new(),
            qos: None,
        }
    }

    #[test]
    fn schedules_come_from_the_generator_lag_and_flag_rows_that_fell_behind() {
        let mut job = JobSpec::new("4K random read @50%", workload::Pattern::Random, 100, 4096, 4, 8);
        job.rate_limit_iops = Some(100_000.0);
        job.load_percent = Some(50.0);
        let lag = LagStats {
            issued: 610_000,
            lag_sum_ns: 610_000 * 12_000_000,
            lag_max_ns: 80_000_000,
            late: 300_000,
            late_queue_full: 30_000,
            backlog_final: 4_000,
            lag_final_ns: 40_000_000,
        };
        // 61,000 IOPS of 100,000 offered.
        let schedule = schedule(&lag, 61_000.0, 100_000.0);
        assert_eq!(schedule.achieved_percent, 61.0);
        assert_eq!((schedule.lag_mean_us, schedule.lag_max_us, schedule.lag_final_us), (12_000.0, 80_000.0, 40_000.0));
        assert_eq!(
            (schedule.late_ios, schedule.late_ios_queue_full, schedule.backlog_final_ios),
            (300_000, 30_000, 4_000)
        );
        assert_eq!(schedule.late_threshold_us, 1_000.0);
        assert!(schedule.fell_behind);

        let mut r = result(&[("4K random read @50%", 61_000.0, 12_100.0)]);
        r.runs[0].rate_limit_iops = job.rate_limit_iops;
        r.runs[0].schedule = Some(schedule.clone());
        assert_eq!(bench_results::validate(&r), Ok(()));
        let line = schedule_line(&r.runs[0]).unwrap();
        assert!(
            line.starts_with("  ! fell behind: achieved 61 % of offered, lag mean 12 ms max 80 ms, still 40 ms (4000 I/Os) behind at the end"),
            "{line}"
        );
        // Kept up, nothing late: no line; kept up with a few late: a plain line.
        let kept = Schedule {
            achieved_percent: 99.9,
            late_ios: 0,
            late_ios_queue_full: 0,
            lag_final_us: 0.0,
            backlog_final_ios: 0,
            fell_behind: false,
            ..schedule
        };
        r.runs[0].schedule = Some(kept.clone());
        assert_eq!(schedule_line(&r.runs[0]), None);
        r.runs[0].schedule = Some(Schedule { late_ios: 12, ..kept });
        assert!(schedule_line(&r.runs[0]).unwrap().starts_with("    kept up: "));
        // A maximum-rate run has no schedule even with lag data, and no line.
        let mut closed = job.clone();
        closed.rate_limit_iops = None;
        let run = assemble(&closed, Totals { lag: Some(lag), ..totals() });
        assert_eq!(run.schedule, None);
        let run = assemble(&job, Totals { lag: Some(lag), ..totals() });
        assert!(run.schedule.is_some_and(|s| s.achieved_percent == 50.0));
    }

    #[test]
    fn the_split_gets_a_line_under_its_run() {
        let mut r = result(&[("4K random read", 20_000.0, 45.2)]);
        assert_eq!(phases_line(&r.runs[0]), None, "fio against no embedded target: no split");
        r.runs[0].target_phases_us = bench_results::TargetPhases::from_sums(400, [4_800, 0, 40, 3_000]);
        assert_eq!(bench_results::validate(&r), Ok(()));
        assert_eq!(
            phases_line(&r.runs[0]).unwrap(),
            "    target: receive 12.0 / QoS 0.0 / storage 0.10 / send 7.5 us per command (19.6 of avg 45.2)"
        );
    }

    fn totals() -> Totals {
        Totals {
            seconds: 10.0,
            ios: 500_000,
            bytes: 500_000 * 4096,
            errors: 0,
            initiator_seconds: 1.0,
            target_seconds: None,
            initiator_runqueue_seconds: None,
            target_runqueue_seconds: None,
            latency_us: Latency { mean: 1.0, min: 1.0, max: 1.0, stddev: 0.0, percentiles: Vec::new() },
            time_series: Vec::new(),
            lag: None,
        }
    }

    #[test]
    fn comparison_lines_up_runs_by_name() {
        let nvme = result(&[("4K random read", 20_000.0, 100.0), ("64K random write", 5_000.0, 400.0)]);
        // iSCSI made only the first run, at half the IOPS and twice the latency.
        let iscsi = result(&[("4K random read", 10_000.0, 200.0)]);
        assert_eq!(bench_results::validate(&nvme), Ok(()));
        let table = comparison_markdown(&nvme, &iscsi);
        let first = table.lines().find(|line| line.starts_with("| 4K random read |")).unwrap();
        assert!(first.contains("| 20000 | 10000 | +100.0% |"), "{first}");
        assert!(first.contains("| 100.0 | 200.0 | -50.0% |"), "{first}");
        // CPU per I/O: 5 s / 200000 I/Os = 25 us on the host, 2 s -> 10 us on the target.
        assert!(first.contains("| 25.00 | 50.00 | 10.00 | 20.00 |"), "{first}");
        let second = table.lines().find(|line| line.starts_with("| 64K random write |")).unwrap();
        assert!(second.contains("| 5000 | - | - |"), "{second}");
        assert_eq!(table.lines().filter(|line| line.starts_with("| ")).count(), 3);
    }
}

//! From measurements to `RunResult`s, and the final table.

use bench_results::{BaselineResult, BenchResult, CpuUse, Latency, Percentile, RunResult, Sample};
use workload::{JobSpec, PERCENTILES};

use super::exec::Measured;

fn us(nanoseconds: f64) -> f64 {
    nanoseconds / 1e3
}

/// The result of one run.
pub fn run_result(job: &JobSpec, measured: &Measured, embedded: bool) -> RunResult {
    let result = &measured.result;
    let seconds = result.measured.as_secs_f64();
    let ios = result.ios();
    let per_second = |count: f64| if seconds > 0.0 { count / seconds } else { 0.0 };
    let summary = result.latency.summary();
    let mut percentiles: Vec<Percentile> = PERCENTILES
        .iter()
        .zip(&summary.percentiles)
        .map(|(&percentile, &(_, value))| Percentile {
            percentile,
            value: us(value as f64),
        })
        .collect();
    // Values never descend (HDR values do not; this guards the empty histogram).
    for index in 1..percentiles.len() {
        if percentiles[index].value < percentiles[index - 1].value {
            percentiles[index].value = percentiles[index - 1].value;
        }
    }
    let per_io = |cpu: f64| if ios > 0 { cpu * 1e6 / ios as f64 } else { 0.0 };
    let initiator = measured.initiator_seconds;
    let target = embedded.then_some(measured.target_seconds);
    RunResult {
        name: job.name.clone(),
        group: job.group.clone(),
        pattern: job.pattern.as_str().into(),
        read_percent: u32::from(job.read_percent),
        block_size: job.block_size,
        threads: job.threads,
        queue_depth: job.queue_depth,
        rate_limit_iops: job.rate_limit_iops,
        load_percent: job
            .load_percent
            .map(|load| (load.round() as u32).clamp(1, 100)),
        duration_seconds: seconds,
        ios,
        bytes: result.bytes,
        errors: result.errors,
        iops: per_second(ios as f64),
        bytes_per_second: per_second(result.bytes as f64),
        latency_us: Latency {
            mean: us(summary.mean_ns),
            min: us(summary.min_ns as f64),
            max: us(summary.max_ns as f64),
            stddev: us(summary.stddev_ns),
            percentiles,
        },
        cpu: CpuUse {
            initiator_seconds: initiator,
            target_seconds: target,
            initiator_us_per_io: per_io(initiator),
            target_us_per_io: target.map(per_io),
            iops_per_initiator_core: if initiator > 0.0 {
                ios as f64 / initiator
            } else {
                0.0
            },
        },
        percent_of_ceiling: None,
        bound_by: None,
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
    }
}

/// Sets `percent_of_ceiling` and `bound_by` from the tighter ceiling (in I/Os per
/// second: the local baseline's IOPS, or loopback bandwidth / block size).
pub fn apply_ceilings(
    run: &mut RunResult,
    baseline: Option<&BaselineResult>,
    loopback: Option<f64>,
) {
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
        if run.errors > 0 {
            format!("  {} ERRORS", run.errors)
        } else {
            String::new()
        }
    );
}

fn percentile(run: &RunResult, which: f64) -> f64 {
    run.latency_us
        .percentiles
        .iter()
        .find(|p| p.percentile == which)
        .map_or(0.0, |p| p.value)
}

/// The final table (stdout).
pub fn print_table(result: &BenchResult) {
    println!();
    println!(
        "{:<44} {:>8} {:>10} {:>9} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7} {:>7}",
        "run",
        "TxQD",
        "IOPS",
        "MB/s",
        "avg us",
        "p99 us",
        "p99.99 us",
        "max us",
        "CPU us",
        "tgt us",
        "% ceil"
    );
    for run in &result.runs {
        let shape = format!("{}x{}", run.threads, run.queue_depth);
        let mut name = run.name.clone();
        if run.errors > 0 {
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
            run.cpu
                .target_us_per_io
                .map_or("-".into(), |v| format!("{v:.2}")),
            match (&run.percent_of_ceiling, &run.bound_by) {
                (Some(p), Some(b)) =>
                    format!("{p:.0}%{}", if b == "loopback-tcp" { "n" } else { "b" }),
                _ => "-".into(),
            }
        );
    }
    if let Some(bandwidth) = result.ceilings.loopback_tcp_bytes_per_second {
        println!(
            "ceilings: loopback TCP {:.0} MB/s (n); local baseline per run (b)",
            bandwidth / 1e6
        );
    }
    if result.partial {
        println!("PARTIAL: interrupted");
    }
}

//! A hand-built, internally consistent result (feature `sample`): four-corners runs, a
//! thread x queue-depth sweep, a latency-versus-load curve and preconditioning that did not
//! reach steady state, and the embedded target's split of every run's time. Deterministic,
//! so tests and screenshots are stable.

use crate::result::*;

/// Deterministic pseudo-noise in [-1, 1).
fn noise(seed: u64) -> f64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    (x % 2_000_000) as f64 / 1_000_000.0 - 1.0
}

/// Builder for one consistent [`RunResult`].
#[derive(Clone, Debug)]
pub struct RunSpec<'a> {
    pub name: &'a str,
    pub group: &'a str,
    pub pattern: &'a str,
    pub read_percent: u32,
    pub block_size: u32,
    pub threads: u32,
    pub queue_depth: u32,
    pub iops: f64,
    pub mean_us: f64,
    pub load_percent: Option<u32>,
    pub duration_seconds: f64,
}

impl RunSpec<'_> {
    /// A run whose counts, rates, percentiles, CPU and time series agree with each other.
    pub fn build(&self) -> RunResult {
        let seed = self.name.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
        let ios = (self.iops * self.duration_seconds).round() as u64;
        let bytes = ios * self.block_size as u64;
        let mean = self.mean_us;
        let tail = 1.0 + self.load_percent.map_or(1.0, |l| (l as f64 / 100.0).powi(4) * 6.0);
        let pct = [(50.0, 0.9), (90.0, 1.5), (99.0, 2.4 * tail), (99.9, 4.0 * tail), (99.99, 7.0 * tail)];
        let percentiles: Vec<Percentile> =
            pct.iter().map(|&(p, k)| Percentile { percentile: p, value: (mean * k * 10.0).round() / 10.0 }).collect();
        let max = percentiles.last().map_or(mean, |p| p.value) * 1.6;
        let cpu_us_per_io = 2.5 + self.block_size as f64 / 16384.0;
        let initiator_seconds = cpu_us_per_io * ios as f64 / 1e6;
        let target_seconds = initiator_seconds * 0.8;
        let steps = self.duration_seconds.floor().max(1.0) as u32;
        let time_series = (1..=steps)
            .map(|t| {
                let k = 1.0 + 0.04 * noise(seed + t as u64);
                Sample {
                    t_seconds: t as f64,
                    iops: self.iops * k,
                    bytes_per_second: self.iops * k * self.block_size as f64,
                    p99_us: percentiles[2].value * (1.0 + 0.08 * noise(seed + 1000 + t as u64)),
                }
            })
            .collect();
        // The embedded target's split: the ramp's commands too; a RAM backend's storage
        // close to 0, receive and send a share of the host's latency.
        let round = |us: f64| (us * 10.0).round() / 10.0;
        let target_phases_us = Some(TargetPhases {
            commands: ios + ios / 40,
            receive: round(mean * 0.16),
            qos: 0.0,
            storage: round(0.1 + self.block_size as f64 / 65536.0),
            send: round(mean * 0.09 + self.block_size as f64 / 16384.0),
        });
        RunResult {
            name: self.name.to_string(),
            group: self.group.to_string(),
            pattern: self.pattern.to_string(),
            read_percent: self.read_percent,
            block_size: self.block_size,
            threads: self.threads,
            queue_depth: self.queue_depth,
            rate_limit_iops: None,
            load_percent: self.load_percent,
            duration_seconds: self.duration_seconds,
            ios,
            bytes,
            errors: 0,
            iops: ios as f64 / self.duration_seconds,
            bytes_per_second: bytes as f64 / self.duration_seconds,
            latency_us: Latency { mean, min: (mean * 0.3 * 10.0).round() / 10.0, max, stddev: mean * 0.6, percentiles },
            cpu: CpuUse {
                initiator_seconds,
                target_seconds: Some(target_seconds),
                initiator_us_per_io: initiator_seconds * 1e6 / ios.max(1) as f64,
                target_us_per_io: Some(target_seconds * 1e6 / ios.max(1) as f64),
                iops_per_initiator_core: ios as f64 / initiator_seconds.max(1e-9),
                initiator_runqueue_seconds: Some(self.duration_seconds * 0.05),
                target_runqueue_seconds: Some(self.duration_seconds * 0.02),
            },
            percent_of_ceiling: None,
            bound_by: None,
            time_series,
            schedule: None,
            target_phases_us,
        }
    }
}

/// A realistic `sluice-bench/3` result that passes [`validate`].
pub fn sample_result() -> BenchResult {
    let four = |name, pattern, read, bs, t, qd, iops, mean| RunSpec {
        name,
        group: "four-corners",
        pattern,
        read_percent: read,
        block_size: bs,
        threads: t,
        queue_depth: qd,
        iops,
        mean_us: mean,
        load_percent: None,
        duration_seconds: 10.0,
    };
    let mut runs = vec![
        four("4k-randread", "random", 100, 4096, 16, 32, 412_000.0, 1240.0).build(),
        four("4k-randwrite", "random", 0, 4096, 8, 4, 268_000.0, 119.0).build(),
        four("64k-randread", "random", 100, 65536, 4, 32, 61_500.0, 2080.0).build(),
        four("64k-randwrite", "random", 0, 65536, 4, 1, 35_200.0, 113.0).build(),
        four("1m-seqread", "sequential", 100, 1 << 20, 2, 8, 3_950.0, 4050.0).build(),
        four("1m-seqwrite", "sequential", 0, 1 << 20, 1, 8, 2_410.0, 3320.0).build(),
    ];
    for (i, &(t, qd)) in [(2, 2), (4, 4), (8, 8), (16, 16), (2, 16), (16, 2)].iter().enumerate() {
        let outstanding = (t * qd) as f64;
        let iops = 330_000.0 * outstanding / (outstanding + 24.0) * (1.0 + 0.02 * noise(i as u64));
        let name = format!("8k-70-30-{t}t{qd}q");
        runs.push(
            RunSpec {
                name: &name,
                group: "eswa-8k-70-30-sweep",
                pattern: "random",
                read_percent: 70,
                block_size: 8192,
                threads: t,
                queue_depth: qd,
                iops,
                mean_us: outstanding / iops * 1e6,
                load_percent: None,
                duration_seconds: 5.0,
            }
            .build(),
        );
    }
    let max_iops = 398_000.0;
    for load in [10u32, 50, 70, 80, 90, 100] {
        // The 100 % level falls behind: it achieves 93 % of the offered rate.
        let achieved = if load == 100 { 0.93 } else { 1.0 };
        let rho = load as f64 / 100.0 * 0.97;
        let name = format!("curve-4k-randread-{load}pct");
        let mut run = RunSpec {
            name: &name,
            group: "curve-4k-randread",
            pattern: "random",
            read_percent: 100,
            block_size: 4096,
            threads: 4,
            queue_depth: 32,
            iops: max_iops * load as f64 / 100.0 * achieved,
            mean_us: 38.0 / (1.0 - rho),
            load_percent: Some(load),
            duration_seconds: 5.0,
        }
        .build();
        let rate = max_iops * load as f64 / 100.0;
        run.rate_limit_iops = Some(rate);
        let issued = (rate * run.duration_seconds).round() as u64;
        // 90 %: rate kept, but 5 % of the I/Os late; 100 %: behind and not caught up.
        let (late_ios, behind) = match load {
            90 => (issued / 20, false),
            100 => (issued / 10, true),
            _ => (0, false),
        };
        let backlog = if behind { issued - run.ios } else { 0 };
        let mean = run.latency_us.mean;
        let mut schedule = Schedule {
            achieved_percent: run.iops / rate * 100.0,
            issued: issued - backlog,
            lag_mean_us: if late_ios > 0 { mean * 0.3 } else { 2.0 + load as f64 / 20.0 },
            lag_max_us: if late_ios > 0 { run.latency_us.max * 0.9 } else { 40.0 + load as f64 },
            lag_final_us: if behind { run.latency_us.max * 0.9 } else { 0.0 },
            backlog_final_ios: backlog,
            late_threshold_us: 1000.0,
            late_ios,
            late_ios_queue_full: late_ios * 3 / 4,
            fell_behind: false,
        };
        schedule.fell_behind = schedule.behind_by_rule();
        run.schedule = Some(schedule);
        runs.push(run);
    }

    let loopback = 6.2e9;
    let local: Vec<BaselineResult> = runs
        .iter()
        .filter(|r| r.group == "four-corners")
        .map(|r| {
            let k = if r.block_size >= 65536 { 2.6 } else { 1.35 };
            BaselineResult { run: r.name.clone(), iops: r.iops * k, bytes_per_second: r.bytes_per_second * k }
        })
        .collect();
    for run in &mut runs {
        let tcp = run.bytes_per_second / loopback * 100.0;
        let base = local.iter().find(|b| b.run == run.name).map(|b| run.iops / b.iops * 100.0);
        let (pct, bound) = match base {
            Some(b) if b > tcp => (b, "local-baseline"),
            _ => (tcp, "loopback-tcp"),
        };
        run.percent_of_ceiling = Some(pct);
        run.bound_by = Some(bound.to_string());
    }

    let rounds: Vec<f64> =
        (0..8).map(|i| 250_000.0 * (1.0 - 0.35 * (-(i as f64) / 2.0).exp()) * (1.0 + 0.03 * noise(900 + i))).collect();
    BenchResult {
        schema: SCHEMA_ID.to_string(),
        partial: false,
        started_at: "2026-11-21T18:00:00Z".into(),
        finished_at: "2026-11-21T18:09:12Z".into(),
        suite: "quick".into(),
        driver: "sluice-host".into(),
        machine: Machine {
            hostname: "bench-01".into(),
            cpus: 2,
            cpu_model: "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz".into(),
            kernel: "6.1.0-27-amd64".into(),
            memory_bytes: 8 << 30,
        },
        target: TargetInfo {
            kind: "embedded".into(),
            address: "127.0.0.1:4420".into(),
            subsystem_nqn: "nqn.2026-01.dev.sluice:bench".into(),
            namespace_id: 1,
            backend: "ram".into(),
            block_size: 4096,
            capacity_bytes: 1 << 30,
        },
        ceilings: Ceilings { loopback_tcp_bytes_per_second: Some(loopback), local_baseline: local },
        preconditioning: Some(Preconditioning {
            method: "128KiB sequential write, 2x capacity".into(),
            bytes_written: 2 << 30,
            round_seconds: 1.0,
            steady_state: SteadyState {
                reached: false,
                window_rounds: 5,
                average: rounds[3..].iter().sum::<f64>() / 5.0,
                data_excursion_percent: 23.4,
                slope_excursion_percent: 12.1,
            },
            rounds,
        }),
        runs,
        notes: vec!["sample data: hand-built, not a measurement".into()],
        qos: Some(crate::QosObservation {
            source: "embedded".into(),
            limits: Vec::new(),
            throttled_commands: 0,
            throttled_seconds: 0.0,
        }),
    }
}

// The schedule's one-line summary of a run, on the sample's run (here rather than in
// schedule.rs, so the schedule does not depend on the sample built from it).
#[cfg(test)]
mod tests {
    use super::*;

    /// A run that fell behind its offered rate.
    fn schedule() -> crate::schedule::Schedule {
        crate::schedule::Schedule {
            achieved_percent: 61.2,
            issued: 100_000,
            lag_mean_us: 12_100.0,
            lag_max_us: 80_400.0,
            lag_final_us: 40_000.0,
            backlog_final_ios: 3_200,
            late_threshold_us: 1_000.0,
            late_ios: 12_000,
            late_ios_queue_full: 9_000,
            fell_behind: true,
        }
    }

    #[test]
    fn run_summaries_add_the_cpu_wait() {
        let mut run = sample_result().runs.pop().unwrap();
        run.duration_seconds = 4.0;
        run.schedule = Some(schedule());
        run.cpu.initiator_runqueue_seconds = Some(4.8);
        run.cpu.target_runqueue_seconds = Some(1.76);
        let text = crate::schedule::run_summary(&run).unwrap();
        assert!(text.starts_with(&schedule().summary()), "{text}");
        assert!(text.ends_with("; on average 1.20 host and 0.44 target threads waited for a CPU"), "{text}");
        run.cpu.target_runqueue_seconds = None;
        assert!(crate::schedule::run_summary(&run)
            .unwrap()
            .ends_with("; on average 1.20 host threads waited for a CPU"));
        run.cpu.initiator_runqueue_seconds = None;
        assert_eq!(crate::schedule::run_summary(&run), Some(schedule().summary()));
        run.schedule = None;
        assert_eq!(crate::schedule::run_summary(&run), None);
    }
}

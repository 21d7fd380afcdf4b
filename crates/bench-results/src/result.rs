//! The versioned JSON result of `sluice bench`.
//!
//! Every field is always written (`Option`s as `null`), field names are `snake_case`, and
//! unknown fields are rejected: a change of shape means a new [`SCHEMA_ID`]. Units are in
//! the field names (`_seconds`, `_bytes`, `_us`, `_percent`); rates are per second and
//! latencies are microseconds from submission (or, for rate-limited runs, from the
//! intended issue time) to completion. `docs/bench-result.schema.json` describes the same
//! shape as JSON Schema (draft 2020-12); [`validate`] adds the checks a schema cannot make.
//! Results of the previous shapes ([`SCHEMA_ID_2`], [`SCHEMA_ID_1`]) are still read: see
//! [`BenchResult::from_json`].

use serde::{Deserialize, Serialize};
use std::collections::HashSet;

pub use crate::phases::TargetPhases;
pub use crate::schedule::{Schedule, BEHIND_ACHIEVED_PERCENT, BEHIND_LATE_PERCENT};

/// The schema id written in [`BenchResult::schema`]; [`BenchResult::from_json`] also
/// reads [`SCHEMA_ID_2`] and [`SCHEMA_ID_1`] and refuses any other.
pub const SCHEMA_ID: &str = "sluice-bench/3";
/// The previous shape: the same without [`RunResult::target_phases_us`].
pub const SCHEMA_ID_2: &str = "sluice-bench/2";
/// The first shape: [`SCHEMA_ID_2`] without [`RunResult::schedule`] and the run-queue times.
pub const SCHEMA_ID_1: &str = "sluice-bench/1";
/// The note an upgraded [`SCHEMA_ID_1`] result gets.
pub const UPGRADED_NOTE: &str = "read from a sluice-bench/1 result: no schedule (how far rate-limited runs fell \
     behind), no run-queue time and no split of the target's time";
/// The note an upgraded [`SCHEMA_ID_2`] result gets.
pub const UPGRADED_NOTE_2: &str = "read from a sluice-bench/2 result: no split of the target's time (target_phases_us)";

/// Drivers a run can be made with.
pub const DRIVERS: &[&str] = &["sluice-host", "fio", "local"];
/// Kinds of target: Sluice's embedded target, any NVMe/TCP target (`--target`),
/// Debian's `tgt` iSCSI target started by `--compare iscsi`, or none: fio's rbd engine
/// straight to the image (`--compare fio-rbd`).
pub const TARGET_KINDS: &[&str] = &["embedded", "remote", "iscsi-tgt", "fio-rbd"];
/// Namespace backends (`file`: a regular file, for the embedded target and `tgt`;
/// `rbd`: a Ceph RBD image).
pub const BACKENDS: &[&str] = &["ram", "null", "file", "rbd", "remote"];
/// Access patterns.
pub const PATTERNS: &[&str] = &["random", "sequential"];
/// Ceilings a run can be bound by.
pub const BOUNDS: &[&str] = &["local-baseline", "loopback-tcp"];

/// One `sluice bench` invocation: one suite against one target with one driver.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BenchResult {
    /// Always [`SCHEMA_ID`].
    pub schema: String,
    /// The run was interrupted (Ctrl-C): `runs` holds what finished, the last may be cut short.
    pub partial: bool,
    /// RFC 3339 UTC, e.g. `2026-11-21T18:42:17Z`.
    pub started_at: String,
    /// RFC 3339 UTC.
    pub finished_at: String,
    /// Suite name: `four-corners`, `eswa`, `curves`, `hci`, `quick` or a suite file's name.
    pub suite: String,
    /// `"sluice-host" | "fio" | "local"`.
    pub driver: String,
    pub machine: Machine,
    pub target: TargetInfo,
    pub ceilings: Ceilings,
    /// `None` when the suite ran without preconditioning.
    pub preconditioning: Option<Preconditioning>,
    pub runs: Vec<RunResult>,
    /// Free-form remarks (overrides, warnings) shown in the report header.
    pub notes: Vec<String>,
    /// QoS on the namespace under test, when the bench could read the target's
    /// limits and throttle counters (the embedded target, or `sluice serve` through
    /// its management socket); `None` when it could not. Written always; results
    /// from before it have none.
    #[serde(default)]
    pub qos: Option<QosObservation>,
}

/// The target's QoS limits on the namespace under test and what they held back
/// during the suite, so that nobody benchmarks a limit by mistake.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QosObservation {
    /// Where it was read: `"embedded"` or `"management socket PATH"`.
    pub source: String,
    /// The limits in force at the end, as `key=value` (`host NQN: key=value` for a
    /// host's own limits); empty when none.
    pub limits: Vec<String>,
    /// Commands the limits delayed during the suite.
    pub throttled_commands: u64,
    /// Time those commands waited, summed, in seconds.
    pub throttled_seconds: f64,
}

/// The machine the initiator ran on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    pub hostname: String,
    /// Online logical CPUs.
    pub cpus: u32,
    pub cpu_model: String,
    /// `uname -r`.
    pub kernel: String,
    pub memory_bytes: u64,
}

/// The NVMe/TCP target and namespace the suite ran against.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TargetInfo {
    /// `"embedded" | "remote" | "iscsi-tgt" | "fio-rbd"`.
    pub kind: String,
    /// `host:port`.
    pub address: String,
    /// The subsystem NQN; for `iscsi-tgt` the iSCSI target's IQN.
    pub subsystem_nqn: String,
    /// The namespace ID; for `iscsi-tgt` the LUN.
    pub namespace_id: u32,
    /// `"ram" | "null" | "file" | "rbd" | "remote"`.
    pub backend: String,
    /// Logical block size in bytes.
    pub block_size: u32,
    pub capacity_bytes: u64,
}

/// Ceilings measured on the same machine in the same invocation.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ceilings {
    /// Single-stream loopback TCP bandwidth, `None` when not measured.
    pub loopback_tcp_bytes_per_second: Option<f64>,
    /// The same workloads run directly on the backend, without the network.
    pub local_baseline: Vec<BaselineResult>,
}

/// The local (no network) result of one run's workload.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BaselineResult {
    /// [`RunResult::name`] of the run this baseline bounds.
    pub run: String,
    pub iops: f64,
    pub bytes_per_second: f64,
}

/// Workload-independent preconditioning and the SNIA PTS steady-state verdict.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Preconditioning {
    /// E.g. `"128KiB sequential write, 2x capacity"`.
    pub method: String,
    pub bytes_written: u64,
    /// Length of one measurement round.
    pub round_seconds: f64,
    /// IOPS of each round, in order.
    pub rounds: Vec<f64>,
    pub steady_state: SteadyState,
}

/// Steady state over the last `window_rounds` rounds (SNIA PTS: data excursion within
/// 20 % of the window average, fitted-slope excursion within 10 %).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SteadyState {
    pub reached: bool,
    /// Window length (5 by the PTS rule); the window is the last rounds in `rounds`.
    pub window_rounds: u32,
    /// Average IOPS over the window.
    pub average: f64,
    /// (max - min) over the window, as % of `average`.
    pub data_excursion_percent: f64,
    /// Excursion of the least-squares line across the window, as % of `average`.
    pub slope_excursion_percent: f64,
}

/// One measured workload.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    /// Unique within the result, e.g. `4k-randread-16t-qd32`; used to align comparisons.
    pub name: String,
    /// Runs of one group are plotted together, e.g. `8k-70-30-sweep` or `curve-4k-randread`.
    pub group: String,
    /// `"random" | "sequential"`.
    pub pattern: String,
    /// 0..=100.
    pub read_percent: u32,
    /// I/O size in bytes.
    pub block_size: u32,
    pub threads: u32,
    /// Outstanding I/Os per thread.
    pub queue_depth: u32,
    /// Fixed arrival rate (exponential inter-arrival) or `None` for a maximum-rate run.
    pub rate_limit_iops: Option<f64>,
    /// The rate as % of the group's maximum-rate run (latency-versus-load curves).
    pub load_percent: Option<u32>,
    /// Measured time (excluding ramp).
    pub duration_seconds: f64,
    /// Completed I/Os.
    pub ios: u64,
    /// Bytes transferred by completed I/Os.
    pub bytes: u64,
    /// I/Os completed with an error status.
    pub errors: u64,
    pub iops: f64,
    pub bytes_per_second: f64,
    pub latency_us: Latency,
    pub cpu: CpuUse,
    /// Result as % of the tightest ceiling, `None` when no ceiling applies.
    pub percent_of_ceiling: Option<f64>,
    /// `"local-baseline" | "loopback-tcp"`, set with `percent_of_ceiling`.
    pub bound_by: Option<String>,
    /// Per-interval samples (typically 1 s).
    pub time_series: Vec<Sample>,
    /// Rate-limited runs of Sluice's host: how well the open-loop generator kept to
    /// its arrival schedule. `None` for maximum-rate runs and for drivers that do not
    /// report it (fio).
    pub schedule: Option<Schedule>,
    /// Runs against the embedded target: the mean microseconds per command it spent
    /// in each phase. `None` for other targets and when no command completed.
    pub target_phases_us: Option<TargetPhases>,
}

/// Total latency in microseconds.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub stddev: f64,
    /// Ascending in both `percentile` and `value`, e.g. 50, 90, 99, 99.9, 99.99.
    pub percentiles: Vec<Percentile>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Percentile {
    /// In (0, 100], e.g. `99.99`.
    pub percentile: f64,
    /// Microseconds.
    pub value: f64,
}

/// CPU time (user + system, all threads, from /proc) spent during the measured interval.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CpuUse {
    pub initiator_seconds: f64,
    /// `None` for a remote target whose CPU use cannot be read.
    pub target_seconds: Option<f64>,
    /// `initiator_seconds * 1e6 / ios`.
    pub initiator_us_per_io: f64,
    pub target_us_per_io: Option<f64>,
    /// IOPS per fully busy initiator core: `ios / initiator_seconds`.
    pub iops_per_initiator_core: f64,
    /// Seconds the initiator's threads were runnable but waiting for a CPU (summed
    /// over threads, from /proc schedstat): divided by `duration_seconds`, how many of
    /// them waited on average. `None` when not measured (fio, no schedstat).
    pub initiator_runqueue_seconds: Option<f64>,
    /// The same for the embedded target's threads; `None` for other targets.
    pub target_runqueue_seconds: Option<f64>,
}

/// One interval of a run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// End of the interval, seconds from the start of the measured period.
    pub t_seconds: f64,
    pub iops: f64,
    pub bytes_per_second: f64,
    pub p99_us: f64,
}

/// Why a JSON text is not a [`BenchResult`].
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("not JSON: {0}")]
    Syntax(#[source] serde_json::Error),
    #[error("not a sluice bench result: the top level must be an object with a \"schema\" field")]
    NotAResult,
    #[error("unsupported schema {found:?}: this build reads {expected:?}")]
    Schema { found: String, expected: &'static str },
    #[error("field `{path}`: {message}")]
    Field { path: String, message: String },
}

impl BenchResult {
    /// Pretty-printed JSON (two-space indent, trailing newline not included).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a BenchResult always serializes")
    }

    /// Parses a result, checking the schema id first and naming the offending field
    /// (e.g. `runs[2].latency_us.mean`) on a shape error. Semantic checks are in [`validate`].
    ///
    /// A [`SCHEMA_ID_2`] or [`SCHEMA_ID_1`] result is read in its shape and upgraded:
    /// the fields it lacks become `None`, its schema [`SCHEMA_ID`], and its notes get
    /// [`UPGRADED_NOTE_2`] or [`UPGRADED_NOTE`] (see `upgrade.rs`).
    pub fn from_json(text: &str) -> Result<Self, ResultError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(ResultError::Syntax)?;
        let schema = match value.get("schema") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => return Err(ResultError::NotAResult),
        };
        if schema == SCHEMA_ID {
            return deserialize(value);
        }
        crate::upgrade::upgrade(&schema, value)
            .unwrap_or(Err(ResultError::Schema { found: schema, expected: SCHEMA_ID }))
    }
}

pub(crate) fn deserialize(value: serde_json::Value) -> Result<BenchResult, ResultError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ResultError::Field { path, message: e.into_inner().to_string() }
    })
}

/// Semantic checks on a result: known enum strings, finite numbers, ascending
/// percentiles, counts consistent with rates and duration (within 5 %), CPU per I/O
/// consistent with CPU seconds, unique run names, ceilings that refer to existing runs.
/// Returns every problem found, each prefixed with the path of the field.
pub fn validate(result: &BenchResult) -> Result<(), Vec<String>> {
    let mut v = Checker { problems: Vec::new() };
    v.check(result);
    if v.problems.is_empty() {
        Ok(())
    } else {
        Err(v.problems)
    }
}

/// Relative tolerance for derived quantities (rates from counts, CPU per I/O).
const TOLERANCE: f64 = 0.05;

struct Checker {
    problems: Vec<String>,
}

impl Checker {
    fn fail(&mut self, path: &str, msg: impl std::fmt::Display) {
        self.problems.push(format!("{path}: {msg}"));
    }

    fn one_of(&mut self, path: &str, value: &str, allowed: &[&str]) {
        if !allowed.contains(&value) {
            self.fail(path, format_args!("{value:?} is not one of {allowed:?}"));
        }
    }

    /// Finite and >= 0.
    fn num(&mut self, path: &str, x: f64) -> bool {
        if !x.is_finite() {
            self.fail(path, format_args!("{x} is not a finite number"));
            false
        } else if x < 0.0 {
            self.fail(path, format_args!("{x} is negative"));
            false
        } else {
            true
        }
    }

    fn positive<T: PartialOrd + Default + std::fmt::Display>(&mut self, path: &str, x: T) {
        if x <= T::default() {
            self.fail(path, format_args!("must be positive, is {x}"));
        }
    }

    /// `actual` within TOLERANCE of `expected` (absolute slack for tiny values).
    fn close(&mut self, path: &str, actual: f64, expected: f64, what: &str) {
        if !actual.is_finite() || !expected.is_finite() {
            return;
        }
        let slack = (expected.abs() * TOLERANCE).max(1.0);
        if (actual - expected).abs() > slack {
            self.fail(path, format_args!("{actual} is not within 5 % of {what} = {expected:.3}"));
        }
    }

    fn timestamp(&mut self, path: &str, s: &str) {
        if !is_rfc3339(s) {
            self.fail(path, format_args!("{s:?} is not an RFC 3339 time like 2026-11-21T18:42:17Z"));
        }
    }

    fn check(&mut self, r: &BenchResult) {
        if r.schema != SCHEMA_ID {
            self.fail("schema", format_args!("{:?} is not {SCHEMA_ID:?}", r.schema));
        }
        self.timestamp("started_at", &r.started_at);
        self.timestamp("finished_at", &r.finished_at);
        if is_rfc3339(&r.started_at)
            && is_rfc3339(&r.finished_at)
            && r.started_at.ends_with('Z')
            && r.finished_at.ends_with('Z')
            && r.finished_at[..19] < r.started_at[..19]
        {
            self.fail("finished_at", "is before started_at");
        }
        if r.suite.trim().is_empty() {
            self.fail("suite", "is empty");
        }
        self.one_of("driver", &r.driver, DRIVERS);
        self.positive("machine.cpus", r.machine.cpus);
        self.one_of("target.kind", &r.target.kind, TARGET_KINDS);
        self.one_of("target.backend", &r.target.backend, BACKENDS);
        self.positive("target.block_size", r.target.block_size);
        if !r.target.block_size.is_power_of_two() {
            self.fail("target.block_size", "is not a power of two");
        }

        let names: Vec<&str> = r.runs.iter().map(|run| run.name.as_str()).collect();
        if let Some(x) = r.ceilings.loopback_tcp_bytes_per_second {
            if self.num("ceilings.loopback_tcp_bytes_per_second", x) {
                self.positive("ceilings.loopback_tcp_bytes_per_second", x);
            }
        }
        for (i, b) in r.ceilings.local_baseline.iter().enumerate() {
            let p = format!("ceilings.local_baseline[{i}]");
            if !names.contains(&b.run.as_str()) {
                self.fail(&format!("{p}.run"), format_args!("{:?} names no run", b.run));
            }
            self.num(&format!("{p}.iops"), b.iops);
            self.num(&format!("{p}.bytes_per_second"), b.bytes_per_second);
        }

        if let Some(pc) = &r.preconditioning {
            self.num("preconditioning.round_seconds", pc.round_seconds);
            for (i, x) in pc.rounds.iter().enumerate() {
                self.num(&format!("preconditioning.rounds[{i}]"), *x);
            }
            let ss = &pc.steady_state;
            self.num("preconditioning.steady_state.average", ss.average);
            self.num("preconditioning.steady_state.data_excursion_percent", ss.data_excursion_percent);
            self.num("preconditioning.steady_state.slope_excursion_percent", ss.slope_excursion_percent);
            if ss.reached && (ss.window_rounds == 0 || ss.window_rounds as usize > pc.rounds.len()) {
                self.fail(
                    "preconditioning.steady_state.window_rounds",
                    format_args!(
                        "steady state reached over {} rounds but only {} rounds recorded",
                        ss.window_rounds,
                        pc.rounds.len()
                    ),
                );
            }
        }

        let mut seen = HashSet::new();
        for (i, run) in r.runs.iter().enumerate() {
            let p = format!("runs[{i}]");
            if run.name.trim().is_empty() {
                self.fail(&format!("{p}.name"), "is empty");
            } else if !seen.insert(run.name.as_str()) {
                self.fail(&format!("{p}.name"), format_args!("{:?} is used by an earlier run", run.name));
            }
            self.run(&p, run, r);
        }
    }

    fn run(&mut self, p: &str, run: &RunResult, r: &BenchResult) {
        let f = |name: &str| format!("{p}.{name}");
        self.one_of(&f("pattern"), &run.pattern, PATTERNS);
        if run.read_percent > 100 {
            self.fail(&f("read_percent"), format_args!("{} is over 100", run.read_percent));
        }
        self.positive(&f("block_size"), run.block_size);
        self.positive(&f("threads"), run.threads);
        self.positive(&f("queue_depth"), run.queue_depth);
        if let Some(rate) = run.rate_limit_iops {
            if self.num(&f("rate_limit_iops"), rate) {
                self.positive(&f("rate_limit_iops"), rate);
            }
        }
        if let Some(load) = run.load_percent {
            if load == 0 || load > 100 {
                self.fail(&f("load_percent"), format_args!("{load} is not in 1..=100"));
            }
        }
        let ok_dur = self.num(&f("duration_seconds"), run.duration_seconds);
        let ok_iops = self.num(&f("iops"), run.iops);
        let ok_bw = self.num(&f("bytes_per_second"), run.bytes_per_second);
        if ok_dur && run.duration_seconds > 0.0 {
            if ok_iops {
                self.close(&f("ios"), run.ios as f64, run.iops * run.duration_seconds, "iops * duration_seconds");
            }
            if ok_bw {
                self.close(
                    &f("bytes"),
                    run.bytes as f64,
                    run.bytes_per_second * run.duration_seconds,
                    "bytes_per_second * duration_seconds",
                );
            }
        }
        self.close(&f("bytes"), run.bytes as f64, run.ios as f64 * run.block_size as f64, "ios * block_size");

        // Latency.
        let l = &run.latency_us;
        let lp = f("latency_us");
        let all_finite = [l.mean, l.min, l.max, l.stddev]
            .iter()
            .zip(["mean", "min", "max", "stddev"])
            .fold(true, |ok, (x, n)| self.num(&format!("{lp}.{n}"), *x) && ok);
        if all_finite && run.ios > 0 && !(l.min <= l.mean && l.mean <= l.max) {
            self.fail(&lp, format_args!("needs min <= mean <= max, has {} / {} / {}", l.min, l.mean, l.max));
        }
        let mut prev: Option<&Percentile> = None;
        for (j, pc) in l.percentiles.iter().enumerate() {
            let pp = format!("{lp}.percentiles[{j}]");
            if !pc.percentile.is_finite() || pc.percentile <= 0.0 || pc.percentile > 100.0 {
                self.fail(&format!("{pp}.percentile"), format_args!("{} is not in (0, 100]", pc.percentile));
            }
            if !self.num(&format!("{pp}.value"), pc.value) {
                continue;
            }
            if let Some(q) = prev {
                if pc.percentile <= q.percentile {
                    self.fail(
                        &format!("{pp}.percentile"),
                        format_args!("{} does not ascend (previous {})", pc.percentile, q.percentile),
                    );
                }
                if pc.value < q.value {
                    self.fail(
                        &format!("{pp}.value"),
                        format_args!("{} is below the previous percentile's {}", pc.value, q.value),
                    );
                }
            }
            // Histogram buckets may round a percentile up past the exact maximum a little.
            if all_finite && run.ios > 0 && pc.value > l.max * (1.0 + 0.01) + 1.0 {
                self.fail(&format!("{pp}.value"), format_args!("{} is above max {}", pc.value, l.max));
            }
            prev = Some(pc);
        }

        // CPU.
        let c = &run.cpu;
        let cp = f("cpu");
        let ok_init = self.num(&format!("{cp}.initiator_seconds"), c.initiator_seconds);
        let ok_upi = self.num(&format!("{cp}.initiator_us_per_io"), c.initiator_us_per_io);
        self.num(&format!("{cp}.iops_per_initiator_core"), c.iops_per_initiator_core);
        for (name, value) in [
            ("initiator_runqueue_seconds", c.initiator_runqueue_seconds),
            ("target_runqueue_seconds", c.target_runqueue_seconds),
        ] {
            if let Some(value) = value {
                self.num(&format!("{cp}.{name}"), value);
            }
        }
        if ok_init && ok_upi && run.ios > 0 {
            self.close(
                &format!("{cp}.initiator_us_per_io"),
                c.initiator_us_per_io,
                c.initiator_seconds * 1e6 / run.ios as f64,
                "initiator_seconds * 1e6 / ios",
            );
        }
        match (c.target_seconds, c.target_us_per_io) {
            (Some(s), Some(u)) => {
                let a = self.num(&format!("{cp}.target_seconds"), s);
                let b = self.num(&format!("{cp}.target_us_per_io"), u);
                if a && b && run.ios > 0 {
                    self.close(
                        &format!("{cp}.target_us_per_io"),
                        u,
                        s * 1e6 / run.ios as f64,
                        "target_seconds * 1e6 / ios",
                    );
                }
            }
            (None, None) => {}
            _ => self.fail(&cp, "target_seconds and target_us_per_io must both be set or both null"),
        }

        // Ceiling.
        match (run.percent_of_ceiling, &run.bound_by) {
            (Some(pct), Some(bound)) => {
                self.num(&f("percent_of_ceiling"), pct);
                self.one_of(&f("bound_by"), bound, BOUNDS);
                if bound == "local-baseline" && !r.ceilings.local_baseline.iter().any(|b| b.run == run.name) {
                    self.fail(&f("bound_by"), "local-baseline but ceilings.local_baseline has no entry for this run");
                }
                if bound == "loopback-tcp" && r.ceilings.loopback_tcp_bytes_per_second.is_none() {
                    self.fail(&f("bound_by"), "loopback-tcp but ceilings.loopback_tcp_bytes_per_second is null");
                }
            }
            (None, None) => {}
            _ => self.fail(p, "percent_of_ceiling and bound_by must both be set or both null"),
        }

        if let Some(schedule) = &run.schedule {
            self.schedule(&f("schedule"), schedule, run);
        }
        if let Some(phases) = &run.target_phases_us {
            self.problems.extend(phases.problems(&f("target_phases_us")));
        }

        // Time series.
        let mut last_t = -1.0;
        for (j, s) in run.time_series.iter().enumerate() {
            let sp = format!("{p}.time_series[{j}]");
            if self.num(&format!("{sp}.t_seconds"), s.t_seconds) {
                if s.t_seconds <= last_t {
                    self.fail(&format!("{sp}.t_seconds"), format_args!("{} does not ascend", s.t_seconds));
                }
                last_t = s.t_seconds;
            }
            self.num(&format!("{sp}.iops"), s.iops);
            self.num(&format!("{sp}.bytes_per_second"), s.bytes_per_second);
            self.num(&format!("{sp}.p99_us"), s.p99_us);
        }
    }
}

impl Checker {
    fn schedule(&mut self, p: &str, s: &Schedule, run: &RunResult) {
        let f = |name: &str| format!("{p}.{name}");
        let ok = [
            ("achieved_percent", s.achieved_percent),
            ("lag_mean_us", s.lag_mean_us),
            ("lag_max_us", s.lag_max_us),
            ("lag_final_us", s.lag_final_us),
            ("late_threshold_us", s.late_threshold_us),
        ]
        .iter()
        .fold(true, |ok, (name, x)| self.num(&f(name), *x) && ok);
        match run.rate_limit_iops {
            None => self.fail(p, "is set but rate_limit_iops is null (only rate-limited runs have a schedule)"),
            Some(rate) if rate.is_finite() && rate > 0.0 && ok => self.close(
                &f("achieved_percent"),
                s.achieved_percent,
                run.iops / rate * 100.0,
                "iops / rate_limit_iops * 100",
            ),
            Some(_) => {}
        }
        if s.late_ios > s.issued {
            self.fail(&f("late_ios"), format_args!("{} is more than issued {}", s.late_ios, s.issued));
        }
        if s.late_ios_queue_full > s.late_ios {
            self.fail(
                &f("late_ios_queue_full"),
                format_args!("{} is more than late_ios {}", s.late_ios_queue_full, s.late_ios),
            );
        }
        // Exact nanoseconds written as microseconds: allow 1 us for rounding.
        if ok && (s.lag_mean_us > s.lag_max_us + 1.0 || s.lag_final_us > s.lag_max_us + 1.0) {
            self.fail(
                &f("lag_max_us"),
                format_args!(
                    "{} is below lag_mean_us {} or lag_final_us {}",
                    s.lag_max_us, s.lag_mean_us, s.lag_final_us
                ),
            );
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)`.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 20 {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let head = digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (b[10] == b'T' || b[10] == b't')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !head {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &b[i..] {
        [b'Z'] | [b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::sample_result;

    #[test]
    fn sample_round_trips_and_validates() {
        let r = sample_result();
        assert_eq!(validate(&r), Ok(()));
        let text = r.to_json_pretty();
        let back = BenchResult::from_json(&text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn from_json_names_schema_and_field() {
        let r = sample_result();
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        v["schema"] = "sluice-bench/4".into();
        let e = BenchResult::from_json(&v.to_string()).unwrap_err();
        assert!(matches!(e, ResultError::Schema { .. }), "{e}");

        let mut v: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        v["runs"][1]["latency_us"]["mean"] = "fast".into();
        let e = BenchResult::from_json(&v.to_string()).unwrap_err().to_string();
        assert!(e.contains("runs[1].latency_us.mean"), "{e}");

        let mut v: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        v["runs"][0].as_object_mut().unwrap().remove("iops");
        let e = BenchResult::from_json(&v.to_string()).unwrap_err().to_string();
        assert!(e.contains("runs[0]") && e.contains("iops"), "{e}");

        let mut v: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        v["machine"]["gpu"] = "none".into();
        let e = BenchResult::from_json(&v.to_string()).unwrap_err().to_string();
        assert!(e.contains("machine") && e.contains("gpu"), "{e}");

        assert!(matches!(BenchResult::from_json("[1]"), Err(ResultError::NotAResult)));
        assert!(matches!(BenchResult::from_json("{"), Err(ResultError::Syntax(_))));
    }

    #[test]
    fn validate_catches_semantic_errors() {
        let base = sample_result();
        let expect = |r: BenchResult, needle: &str| {
            let errs = validate(&r).expect_err(needle);
            assert!(errs.iter().any(|e| e.contains(needle)), "{needle} not in {errs:#?}");
        };
        let mut r = base.clone();
        r.runs[0].latency_us.percentiles.swap(1, 2);
        expect(r, "runs[0].latency_us.percentiles[2]");
        let mut r = base.clone();
        let n = r.runs[0].latency_us.percentiles.len();
        r.runs[0].latency_us.percentiles[n - 1].value = 0.5;
        expect(r, "below the previous");
        let mut r = base.clone();
        r.runs[1].ios *= 2;
        expect(r, "runs[1].ios");
        let mut r = base.clone();
        r.runs[0].latency_us.mean = f64::NAN;
        expect(r, "runs[0].latency_us.mean");
        let mut r = base.clone();
        r.runs[2].name = r.runs[0].name.clone();
        expect(r, "runs[2].name");
        let mut r = base.clone();
        r.driver = "vdbench".into();
        expect(r, "driver");
        let mut r = base.clone();
        r.started_at = "yesterday".into();
        expect(r, "started_at");
        let mut r = base.clone();
        r.runs[0].bound_by = None;
        expect(r, "percent_of_ceiling and bound_by");
        let mut r = base.clone();
        r.ceilings.local_baseline[0].run = "nope".into();
        expect(r, "names no run");
        let mut r = base.clone();
        r.runs[1].target_phases_us.as_mut().unwrap().storage = -1.0;
        expect(r, "runs[1].target_phases_us.storage");
        let mut r = base.clone();
        r.runs[0].time_series[2].t_seconds = 0.0;
        expect(r, "time_series[2].t_seconds");
        // Schedules: only on rate-limited runs, consistent with the rates and counts.
        let last = base.runs.len() - 1;
        let curve = base.runs[last].schedule.clone().unwrap();
        let mut r = base.clone();
        r.runs[0].schedule = Some(curve.clone());
        expect(r, "runs[0].schedule: is set but rate_limit_iops is null");
        let mut r = base.clone();
        r.runs[last].schedule.as_mut().unwrap().achieved_percent = 100.0;
        expect(r, &format!("runs[{last}].schedule.achieved_percent"));
        let mut r = base.clone();
        let s = r.runs[last].schedule.as_mut().unwrap();
        s.late_ios = s.issued + 1;
        expect(r, &format!("runs[{last}].schedule.late_ios"));
        let mut r = base.clone();
        let s = r.runs[last].schedule.as_mut().unwrap();
        s.late_ios_queue_full = s.late_ios + 1;
        expect(r, &format!("runs[{last}].schedule.late_ios_queue_full"));
        let mut r = base.clone();
        r.runs[last].schedule.as_mut().unwrap().lag_final_us = curve.lag_max_us * 2.0;
        expect(r, &format!("runs[{last}].schedule.lag_max_us"));
        let mut r = base;
        r.runs[last].schedule.as_mut().unwrap().lag_mean_us = f64::INFINITY;
        expect(r, &format!("runs[{last}].schedule.lag_mean_us"));
    }

    #[test]
    fn rfc3339() {
        assert!(is_rfc3339("2026-11-21T18:42:17Z"));
        assert!(is_rfc3339("2026-11-21T18:42:17.123456Z"));
        assert!(is_rfc3339("2026-11-21T18:42:17+01:00"));
        assert!(!is_rfc3339("2026-11-21 18:42"));
        assert!(!is_rfc3339("2026-11-21T18:42:17."));
    }
}

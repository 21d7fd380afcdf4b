//! What a hold found, and what it reads from /proc: the target's footprint and this
//! process's open-file limit.

use std::io;

use serde_json::{json, Value};

/// /proc/PID/stat counts CPU time in USER_HZ ticks, 100 a second on Linux.
const USER_HZ: f64 = 100.0;

/// A process's footprint at one moment (from /proc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessSample {
    /// VmRSS, KiB.
    pub rss_kib: u64,
    /// Entries of /proc/PID/fd.
    pub open_files: u64,
    /// utime + stime, USER_HZ ticks.
    pub cpu_ticks: u64,
}

impl ProcessSample {
    /// Reads /proc/`pid`.
    pub fn read(pid: u32) -> io::Result<ProcessSample> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let rss_kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| io::Error::other(format!("no VmRSS in /proc/{pid}/status")))?;
        let open_files = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // The fields after the command name (which may hold spaces) start at field 3.
        let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        let tick = |field: usize| fields.get(field - 3).and_then(|value| value.parse::<u64>().ok());
        let cpu_ticks = match (tick(14), tick(15)) {
            (Some(user), Some(system)) => user + system,
            _ => return Err(io::Error::other(format!("unreadable /proc/{pid}/stat"))),
        };
        Ok(ProcessSample { rss_kib, open_files, cpu_ticks })
    }

    fn to_json(self) -> Value {
        json!({ "rss_kib": self.rss_kib, "open_files": self.open_files, "cpu_seconds": self.cpu_ticks as f64 / USER_HZ })
    }
}

/// The target's footprint: before the first connection, with every controller up,
/// at the end of the hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetSamples {
    /// The target's PID.
    pub pid: u32,
    pub before: ProcessSample,
    pub after_open: ProcessSample,
    pub end: ProcessSample,
}

/// What a hold found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HoldReport {
    /// Controllers asked for.
    pub controllers_requested: usize,
    /// Controllers that came up (connected, enabled, read once).
    pub controllers_up: usize,
    /// TCP connections open once all were up (two per controller still up then).
    pub connections: usize,
    /// From the first connect until every controller was up or had failed.
    pub open_seconds: f64,
    /// Reads that returned what they should.
    pub reads_ok: usize,
    /// Controllers that failed, coming up or during the hold.
    pub failures: usize,
    /// The first failure, naming the controller.
    pub first_error: Option<String>,
    /// Controllers lost during the hold (counted in `failures` too).
    pub lost_during_hold: usize,
    /// Controllers still up at the end.
    pub controllers_at_end: usize,
    /// The hold, once every controller was up.
    pub hold_seconds: f64,
    /// KATO, milliseconds.
    pub keep_alive_timeout_ms: u32,
    pub keep_alives_sent: u64,
    pub keep_alives_answered: u64,
    /// The target's footprint (with `target_pid`).
    pub target: Option<TargetSamples>,
}

impl HoldReport {
    /// (RSS with every controller up - RSS before) / connections, KiB.
    pub fn kib_per_connection(&self) -> Option<f64> {
        let target = self.target?;
        (self.connections > 0)
            .then(|| (target.after_open.rss_kib as f64 - target.before.rss_kib as f64) / self.connections as f64)
    }

    /// The same at the end of the hold.
    pub fn kib_per_connection_at_end(&self) -> Option<f64> {
        let target = self.target?;
        (self.connections > 0)
            .then(|| (target.end.rss_kib as f64 - target.before.rss_kib as f64) / self.connections as f64)
    }

    /// The target's CPU time during the hold, seconds.
    pub fn hold_cpu_seconds(&self) -> Option<f64> {
        let target = self.target?;
        Some(target.end.cpu_ticks.saturating_sub(target.after_open.cpu_ticks) as f64 / USER_HZ)
    }

    /// The report as JSON (`--json`).
    pub fn to_json(&self) -> Value {
        let target = self.target.map(|target| {
            json!({
                "pid": target.pid,
                "before": target.before.to_json(),
                "after_open": target.after_open.to_json(),
                "end": target.end.to_json(),
                "kib_per_connection": self.kib_per_connection(),
                "kib_per_connection_at_end": self.kib_per_connection_at_end(),
                "hold_cpu_seconds": self.hold_cpu_seconds(),
            })
        });
        json!({
            "controllers_requested": self.controllers_requested,
            "controllers_up": self.controllers_up,
            "connections": self.connections,
            "open_seconds": self.open_seconds,
            "reads_ok": self.reads_ok,
            "failures": self.failures,
            "first_error": self.first_error,
            "lost_during_hold": self.lost_during_hold,
            "controllers_at_end": self.controllers_at_end,
            "hold_seconds": self.hold_seconds,
            "keep_alive_timeout_ms": self.keep_alive_timeout_ms,
            "keep_alives_sent": self.keep_alives_sent,
            "keep_alives_answered": self.keep_alives_answered,
            "target": target,
        })
    }

    /// Human-readable lines (stdout of `sluice bench hold`).
    pub fn text(&self) -> String {
        let mut lines = vec![
            format!(
                "controllers: {} of {} up ({} connections) in {:.2} s; {} reads ok",
                self.controllers_up, self.controllers_requested, self.connections, self.open_seconds, self.reads_ok
            ),
            format!(
                "hold: {:.1} s, {} controllers at the end; keep-alives (KATO {} ms): {} sent, {} answered",
                self.hold_seconds,
                self.controllers_at_end,
                self.keep_alive_timeout_ms,
                self.keep_alives_sent,
                self.keep_alives_answered
            ),
            format!("failures: {} ({} during the hold)", self.failures, self.lost_during_hold),
        ];
        if let Some(error) = &self.first_error {
            lines.push(format!("first failure: {error}"));
        }
        if let Some(target) = self.target {
            let sample = |name: &str, sample: ProcessSample| {
                format!(
                    "target {name}: RSS {} KiB, {} open files, {:.2} s CPU",
                    sample.rss_kib,
                    sample.open_files,
                    sample.cpu_ticks as f64 / USER_HZ
                )
            };
            lines.push(sample("before", target.before));
            lines.push(sample("with all up", target.after_open));
            lines.push(sample("at the end", target.end));
            lines.push(format!(
                "target per connection: {:.1} KiB with all up, {:.1} KiB at the end; CPU during the hold: {:.2} s",
                self.kib_per_connection().unwrap_or(0.0),
                self.kib_per_connection_at_end().unwrap_or(0.0),
                self.hold_cpu_seconds().unwrap_or(0.0)
            ));
        }
        lines.join("\n") + "\n"
    }
}

/// This process's open-file limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFilesLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Reads this process's RLIMIT_NOFILE from /proc/self/limits (`u64::MAX` for
/// unlimited).
pub fn open_files_limit() -> io::Result<OpenFilesLimit> {
    let limits = std::fs::read_to_string("/proc/self/limits")?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .ok_or_else(|| io::Error::other("no \"Max open files\" in /proc/self/limits"))?;
    let value = |text: &str| if text == "unlimited" { Some(u64::MAX) } else { text.parse().ok() };
    let mut numbers = line["Max open files".len()..].split_whitespace();
    match (numbers.next().and_then(value), numbers.next().and_then(value)) {
        (Some(soft), Some(hard)) => Ok(OpenFilesLimit { soft, hard }),
        _ => Err(io::Error::other(format!("unreadable /proc/self/limits line {line:?}"))),
    }
}

/// Raises this process's soft open-file limit to the hard one, and returns the
/// limit as it is then. std has no setrlimit and the workspace allows `unsafe` only
/// in the runtime, so this runs util-linux's `prlimit` on this process; without it
/// the limit stays as it was (the caller's shell can `ulimit -n`). Processes
/// started afterwards (a target under test) inherit the raised limit.
pub fn raise_open_files_limit() -> io::Result<OpenFilesLimit> {
    let limit = open_files_limit()?;
    if limit.soft < limit.hard {
        let hard = if limit.hard == u64::MAX { "unlimited".to_string() } else { limit.hard.to_string() };
        let _ = std::process::Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={hard}:{hard}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    open_files_limit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_sampled_and_its_limit_read() {
        let sample = ProcessSample::read(std::process::id()).unwrap();
        assert!(sample.rss_kib > 0 && sample.open_files >= 3, "{sample:?}");
        let limit = open_files_limit().unwrap();
        assert!(limit.soft >= 1 && limit.soft <= limit.hard, "{limit:?}");
    }

    #[test]
    fn the_report_says_what_a_connection_cost() {
        let sample = |rss_kib, cpu_ticks| ProcessSample { rss_kib, open_files: 10, cpu_ticks };
        let report = HoldReport {
            controllers_requested: 100,
            controllers_up: 100,
            connections: 200,
            target: Some(TargetSamples {
                pid: 1,
                before: sample(1000, 5),
                after_open: sample(5000, 50),
                end: sample(5200, 60),
            }),
            ..HoldReport::default()
        };
        assert_eq!(report.kib_per_connection(), Some(20.0));
        assert_eq!(report.kib_per_connection_at_end(), Some(21.0));
        assert_eq!(report.hold_cpu_seconds(), Some(0.1));
        assert_eq!(report.to_json()["target"]["kib_per_connection"], 20.0);
        assert!(report.text().contains("20.0 KiB with all up"), "{}", report.text());
    }
}

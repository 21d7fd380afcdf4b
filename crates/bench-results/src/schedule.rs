//! How far a rate-limited run fell behind its arrival schedule ([`Schedule`], the
//! `schedule` of a [`crate::RunResult`]), and the one-line summary the table and the
//! report show.

use serde::{Deserialize, Serialize};

/// How far a rate-limited (open-loop) run fell behind its arrival schedule. The
/// offered rate is [`crate::RunResult::rate_limit_iops`], the achieved one
/// [`crate::RunResult::iops`].
/// An I/O's *lag* is its submission time minus its scheduled time; its latency, measured
/// from the scheduled time, includes the lag. Counts cover the I/Os scheduled inside the
/// measured window.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// `iops` as % of `rate_limit_iops`.
    pub achieved_percent: f64,
    /// I/Os submitted (of those scheduled in the window).
    pub issued: u64,
    /// Mean lag of the submitted I/Os, microseconds.
    pub lag_mean_us: f64,
    /// Largest lag: of a submitted I/O or of the oldest one still waiting at the end.
    pub lag_max_us: f64,
    /// At the end of the window: how long the oldest I/O not yet submitted had been due
    /// (0: the generator had caught up); the largest over the worker threads.
    pub lag_final_us: f64,
    /// At the end of the window: I/Os due but not submitted, over all worker threads.
    pub backlog_final_ios: u64,
    /// An I/O submitted more than this after its scheduled time is late.
    pub late_threshold_us: f64,
    /// Late I/Os.
    pub late_ios: u64,
    /// Late I/Os that found the queue full (all `queue_depth` I/Os of the thread
    /// outstanding) after they were due: the target did not complete I/O fast enough.
    /// The other late ones waited on the host's worker thread (descheduled, woken late).
    pub late_ios_queue_full: u64,
    /// The verdict shown in the table and the report: `achieved_percent` under
    /// [`BEHIND_ACHIEVED_PERCENT`], more than [`BEHIND_LATE_PERCENT`] % of `issued`
    /// late, or still more than `late_threshold_us` behind at the end.
    pub fell_behind: bool,
}

/// A rate-limited run that achieved less than this % of its offered rate fell behind.
pub const BEHIND_ACHIEVED_PERCENT: f64 = 95.0;
/// A rate-limited run with more than this % of its I/Os late fell behind.
pub const BEHIND_LATE_PERCENT: f64 = 1.0;

impl Schedule {
    /// The [`Schedule::fell_behind`] rule.
    pub fn behind_by_rule(&self) -> bool {
        self.achieved_percent < BEHIND_ACHIEVED_PERCENT
            || self.late_ios as f64 > self.issued as f64 * BEHIND_LATE_PERCENT / 100.0
            || self.lag_final_us > self.late_threshold_us
    }

    /// One line for the table and the report: `fell behind: achieved 61 % of offered,
    /// lag mean 12 ms max 80 ms, still 40 ms (3200 I/Os) behind at the end, 12000 I/Os
    /// (12.00 %) > 1.0 ms late (75 % of those behind a full queue)`, or `kept up: ...`.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{}: achieved {:.0} % of offered, lag mean {} max {}",
            if self.fell_behind { "fell behind" } else { "kept up" },
            self.achieved_percent,
            human_us(self.lag_mean_us),
            human_us(self.lag_max_us),
        );
        if self.lag_final_us > 0.0 || self.backlog_final_ios > 0 {
            out.push_str(&format!(
                ", still {} ({} I/Os) behind at the end",
                human_us(self.lag_final_us),
                self.backlog_final_ios
            ));
        }
        let share = |n: u64| n as f64 * 100.0 / self.issued.max(1) as f64;
        if self.late_ios > 0 {
            out.push_str(&format!(
                ", {} I/Os ({:.2} %) > {} late ({:.0} % of those behind a full queue)",
                self.late_ios,
                share(self.late_ios),
                human_us(self.late_threshold_us),
                self.late_ios_queue_full as f64 * 100.0 / self.late_ios as f64,
            ));
        } else {
            out.push_str(&format!(", none > {} late", human_us(self.late_threshold_us)));
        }
        out
    }
}

/// A run's schedule summary ([`Schedule::summary`]) with, when measured, how many of
/// the host's and the target's threads waited for a CPU on average (run-queue seconds
/// per second of the run): a busy machine shows here. `None` without a schedule.
pub fn run_summary(run: &crate::RunResult) -> Option<String> {
    let mut out = run.schedule.as_ref()?.summary();
    let per_second = |seconds: f64| seconds / run.duration_seconds.max(1e-9);
    match (run.cpu.initiator_runqueue_seconds, run.cpu.target_runqueue_seconds) {
        (Some(host), Some(target)) => out.push_str(&format!(
            "; on average {:.2} host and {:.2} target threads waited for a CPU",
            per_second(host),
            per_second(target)
        )),
        (Some(host), None) => {
            out.push_str(&format!("; on average {:.2} host threads waited for a CPU", per_second(host)))
        }
        _ => {}
    }
    Some(out)
}

/// Microseconds as a short human duration: `850 us`, `12.3 ms`, `1.25 s`.
pub fn human_us(us: f64) -> String {
    if !us.is_finite() {
        "?".into()
    } else if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e4 {
        format!("{:.0} ms", us / 1e3)
    } else if us >= 1e3 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{us:.0} us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> Schedule {
        Schedule {
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
    fn the_rule_and_the_summary() {
        let behind = schedule();
        assert!(behind.behind_by_rule());
        assert_eq!(
            behind.summary(),
            "fell behind: achieved 61 % of offered, lag mean 12 ms max 80 ms, still 40 ms (3200 I/Os) behind at the end, 12000 I/Os (12.00 %) > 1.0 ms late (75 % of those behind a full queue)"
        );
        // Each leg of the rule on its own.
        let kept = Schedule {
            achieved_percent: 99.7,
            lag_mean_us: 3.0,
            lag_max_us: 450.0,
            lag_final_us: 0.0,
            backlog_final_ios: 0,
            late_ios: 0,
            late_ios_queue_full: 0,
            fell_behind: false,
            ..behind
        };
        assert!(!kept.behind_by_rule());
        assert_eq!(kept.summary(), "kept up: achieved 100 % of offered, lag mean 3 us max 450 us, none > 1.0 ms late");
        assert!(Schedule { achieved_percent: 94.9, ..kept.clone() }.behind_by_rule());
        assert!(!Schedule { late_ios: 1_000, ..kept.clone() }.behind_by_rule());
        assert!(Schedule { late_ios: 1_001, ..kept.clone() }.behind_by_rule());
        assert!(Schedule { lag_final_us: 1_001.0, ..kept.clone() }.behind_by_rule());
        assert!(!Schedule { lag_final_us: 900.0, backlog_final_ios: 2, ..kept }.behind_by_rule());
        assert_eq!(human_us(1_250_000.0), "1.25 s");
    }
}

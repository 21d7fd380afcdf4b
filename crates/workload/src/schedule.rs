//! The open-loop arrival schedule of one worker and how far behind it the worker got.
//!
//! Arrivals are a Poisson process (exponential gaps from a seeded RNG). The run loop
//! asks which arrival is due ([`Schedule::due`]), submits it and reports the
//! submission ([`Schedule::issued`]); the schedule records the *lag* of every arrival
//! scheduled inside the measured window: submission time minus scheduled time. A
//! worker that keeps up has lags of microseconds; one that was descheduled, slept too
//! long or waited behind a full queue has lags as long as that. Latency of
//! rate-limited runs is measured from the scheduled time, so every lag is also in the
//! latency; these numbers say how much of it was the schedule falling behind.
//!
//! Nothing here reads the clock: every call takes the time, so the accounting can be
//! tested against a fake clock, and nothing allocates or locks (it is on the data
//! path).

use std::time::{Duration, Instant};

use crate::Rng;

/// An arrival submitted more than this after its scheduled time counts as late.
pub const LATE_THRESHOLD: Duration = Duration::from_millis(1);

/// How well one worker (or, merged, one run) kept to its arrival schedule inside the
/// measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LagStats {
    /// Arrivals scheduled inside the window that were submitted.
    pub issued: u64,
    /// Sum of their lags (submission - scheduled time), nanoseconds.
    pub lag_sum_ns: u64,
    /// The largest lag, nanoseconds: of a submitted arrival, or of the oldest arrival
    /// still waiting when the window ended ([`LagStats::lag_final_ns`]).
    pub lag_max_ns: u64,
    /// Submitted arrivals whose lag exceeded [`LATE_THRESHOLD`].
    pub late: u64,
    /// Of [`LagStats::late`], those that found the queue full (every slot of the
    /// queue depth outstanding) at some point after they were due: the target (or
    /// the path to it) did not complete I/O fast enough. The others were late
    /// because the worker itself was: descheduled, or woken late.
    pub late_queue_full: u64,
    /// When the window ended: arrivals due (scheduled inside the window) but not
    /// yet submitted.
    pub backlog_final: u64,
    /// When the window ended: how long the oldest arrival not yet submitted had been
    /// due, nanoseconds (0: the worker had caught up).
    pub lag_final_ns: u64,
}

impl LagStats {
    /// Mean lag of the submitted arrivals, nanoseconds (0 when none).
    pub fn lag_mean_ns(&self) -> f64 {
        if self.issued == 0 {
            0.0
        } else {
            self.lag_sum_ns as f64 / self.issued as f64
        }
    }

    /// Adds another worker's statistics (the run's: sums, and the worst lag).
    pub fn merge(&mut self, other: &LagStats) {
        self.issued += other.issued;
        self.lag_sum_ns = self.lag_sum_ns.saturating_add(other.lag_sum_ns);
        self.lag_max_ns = self.lag_max_ns.max(other.lag_max_ns);
        self.late += other.late;
        self.late_queue_full += other.late_queue_full;
        self.backlog_final += other.backlog_final;
        self.lag_final_ns = self.lag_final_ns.max(other.lag_final_ns);
    }
}

/// The Poisson arrival schedule of one worker with its lag accounting.
#[derive(Clone, Debug)]
pub struct Schedule {
    rng: Rng,
    mean_gap: f64,
    next: Instant,
    window_start: Instant,
    window_end: Instant,
    /// The end of the latest interval in which every queue slot was outstanding.
    queue_full_until: Option<Instant>,
    stats: LagStats,
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Schedule {
    /// Arrivals at `rate` per second from `start` (the first one an exponential gap
    /// after it), lags recorded for arrivals scheduled in
    /// `[window_start, window_end)`.
    pub fn new(rate: f64, seed: u64, start: Instant, window_start: Instant, window_end: Instant) -> Schedule {
        let mut rng = Rng::new(seed);
        let mean_gap = 1.0 / rate;
        let next = start + Duration::from_secs_f64(rng.exponential(mean_gap));
        Schedule { rng, mean_gap, next, window_start, window_end, queue_full_until: None, stats: LagStats::default() }
    }

    /// The scheduled time of the next arrival.
    pub fn next_arrival(&self) -> Instant {
        self.next
    }

    /// The scheduled time of the next arrival if it is due at `now`.
    pub fn due(&self, now: Instant) -> Option<Instant> {
        (self.next <= now).then_some(self.next)
    }

    /// The arrival [`Schedule::next_arrival`] was submitted at `now`: records its lag
    /// and moves to the next arrival.
    pub fn issued(&mut self, now: Instant) {
        let scheduled = self.next;
        if scheduled >= self.window_start && scheduled < self.window_end {
            let lag = nanos(now.saturating_duration_since(scheduled));
            let stats = &mut self.stats;
            stats.issued += 1;
            stats.lag_sum_ns = stats.lag_sum_ns.saturating_add(lag);
            stats.lag_max_ns = stats.lag_max_ns.max(lag);
            if lag > nanos(LATE_THRESHOLD) {
                stats.late += 1;
                if self.queue_full_until.is_some_and(|until| until >= scheduled) {
                    stats.late_queue_full += 1;
                }
            }
        }
        self.advance();
    }

    /// Every queue slot was outstanding from before until `until` (the worker waited
    /// for a completion with no slot free).
    pub fn queue_full_until(&mut self, until: Instant) {
        self.queue_full_until = Some(until);
    }

    /// Ends the accounting at `end` (the end of the window, or earlier when the run
    /// stopped): counts the arrivals due by then but not submitted and how long the
    /// oldest had waited, and returns the statistics.
    pub fn finish(mut self, end: Instant) -> LagStats {
        let end = end.min(self.window_end);
        if end >= self.window_start && self.next <= end {
            let lag = nanos(end.saturating_duration_since(self.next));
            self.stats.lag_final_ns = lag;
            self.stats.lag_max_ns = self.stats.lag_max_ns.max(lag);
            while self.next <= end {
                if self.next >= self.window_start {
                    self.stats.backlog_final += 1;
                }
                self.advance();
            }
        }
        self.stats
    }

    fn advance(&mut self) {
        self.next += Duration::from_secs_f64(self.rng.exponential(self.mean_gap));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// The arrival times (offsets from `t0`) the schedule will produce: the oracle.
    fn arrivals(rate: f64, seed: u64, until: Duration) -> Vec<Duration> {
        let mut rng = Rng::new(seed);
        let mut at = Duration::ZERO;
        let mut out = Vec::new();
        loop {
            at += Duration::from_secs_f64(rng.exponential(1.0 / rate));
            if at > until {
                return out;
            }
            out.push(at);
        }
    }

    /// Drives a schedule on a fake clock advancing in `step`s: at every step the
    /// worker submits whatever is due, except while `asleep` (descheduled).
    fn drive(
        schedule: &mut Schedule,
        t0: Instant,
        until: Duration,
        step: Duration,
        asleep: Option<(Duration, Duration)>,
    ) {
        let mut now = Duration::ZERO;
        while now <= until {
            let sleeping = asleep.is_some_and(|(from, to)| now >= from && now < to);
            if !sleeping {
                while schedule.due(t0 + now).is_some() {
                    schedule.issued(t0 + now);
                }
            }
            now += step;
        }
    }

    #[test]
    fn a_worker_that_keeps_up_has_no_lag() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(2000.0, 42, t0, t0 + 100 * MS, t0 + 1100 * MS);
        let step = Duration::from_micros(10);
        drive(&mut schedule, t0, 1100 * MS, step, None);
        let stats = schedule.finish(t0 + 1100 * MS);
        let expected = arrivals(2000.0, 42, 1100 * MS).iter().filter(|at| **at >= 100 * MS).count() as u64;
        assert_eq!(stats.issued, expected);
        assert!(stats.lag_max_ns <= nanos(step), "{stats:?}");
        assert!(stats.lag_mean_ns() <= nanos(step) as f64, "{stats:?}");
        assert_eq!((stats.late, stats.late_queue_full), (0, 0));
        assert_eq!((stats.backlog_final, stats.lag_final_ns), (0, 0));
    }

    #[test]
    fn a_worker_descheduled_for_50_ms_reports_that_lag_and_the_late_ios() {
        let t0 = Instant::now();
        let (rate, seed) = (2000.0, 7);
        let mut schedule = Schedule::new(rate, seed, t0, t0, t0 + 1000 * MS);
        // Asleep from 300 ms to 350 ms, then everything due is submitted at 350 ms.
        drive(&mut schedule, t0, 1000 * MS, MS / 10, Some((300 * MS, 350 * MS)));
        let stats = schedule.finish(t0 + 1000 * MS);

        let all = arrivals(rate, seed, 1000 * MS);
        // The last step before the sleep was at 299.9 ms: what came due after it
        // waits until 350 ms.
        let missed = |at: &&Duration| **at > 300 * MS - MS / 10 && **at <= 350 * MS;
        let first_missed = *all.iter().find(|at| missed(at)).unwrap();
        // Late: due more than 1 ms before the worker woke at 350 ms.
        let late = all.iter().filter(|at| missed(at) && **at < 349 * MS).count() as u64;
        assert_eq!(stats.issued, all.len() as u64);
        assert_eq!(stats.late, late);
        assert!((80..=120).contains(&late), "{late}"); // ~2 per ms over 49 ms
        assert_eq!(stats.late_queue_full, 0, "the queue was never full");
        assert_eq!(stats.lag_max_ns, nanos(350 * MS - first_missed));
        assert!(stats.lag_max_ns > nanos(49 * MS), "{stats:?}");
        // The mean: the sleep's lags over every arrival, plus < one step for the rest.
        let sleep_lag: u64 = all.iter().filter(|at| missed(at)).map(|at| nanos(350 * MS - *at)).sum();
        let mean = stats.lag_mean_ns();
        let oracle = sleep_lag as f64 / all.len() as f64;
        assert!(mean >= oracle && mean <= oracle + nanos(MS / 10) as f64, "{mean} vs {oracle}");
        // It caught up afterwards.
        assert_eq!((stats.backlog_final, stats.lag_final_ns), (0, 0));
    }

    #[test]
    fn lag_behind_a_full_queue_is_told_apart_and_a_growing_backlog_is_counted() {
        let t0 = Instant::now();
        let (rate, seed) = (1000.0, 3);
        let end = 1000 * MS;
        let mut schedule = Schedule::new(rate, seed, t0, t0, t0 + end);
        // A server that completes one I/O every 1.25 ms (800/s) with a queue of
        // one: the worker submits when the slot frees, which is always behind.
        let service = Duration::from_micros(1250);
        let mut now = Duration::ZERO;
        let mut submitted = 0u64;
        let mut max_lag = Duration::ZERO;
        while now + service <= end {
            match schedule.due(t0 + now) {
                Some(scheduled) => {
                    max_lag = max_lag.max(t0 + now - scheduled);
                    schedule.issued(t0 + now);
                    submitted += 1;
                    now += service; // waits for the completion: the queue is full
                    schedule.queue_full_until(t0 + now);
                }
                None => now = schedule.next_arrival().saturating_duration_since(t0),
            }
        }
        let stats = schedule.finish(t0 + end);
        let all = arrivals(rate, seed, end);
        assert_eq!(stats.issued, submitted);
        assert!(stats.late > submitted / 2, "{stats:?}");
        assert_eq!(stats.late_queue_full, stats.late, "every late I/O waited on the queue");
        // The backlog: everything due by the end that was not submitted.
        assert_eq!(stats.backlog_final, all.len() as u64 - submitted);
        let oldest = all[submitted as usize];
        assert_eq!(stats.lag_final_ns, nanos(end - oldest));
        // ~200 I/Os behind at 1000/s: about 200 ms.
        assert!(stats.lag_final_ns > nanos(100 * MS), "{stats:?}");
        assert_eq!(stats.lag_max_ns, nanos(max_lag).max(stats.lag_final_ns));
    }

    #[test]
    fn arrivals_before_the_window_are_not_counted_and_merge_adds_up() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(1000.0, 9, t0, t0 + 500 * MS, t0 + 1000 * MS);
        // Asleep through the whole ramp: the ramp's arrivals are late but not counted.
        let step = MS / 10;
        drive(&mut schedule, t0, 1000 * MS, step, Some((Duration::ZERO, 500 * MS)));
        let stats = schedule.finish(t0 + 1000 * MS);
        let in_window = arrivals(1000.0, 9, 1000 * MS).iter().filter(|at| **at >= 500 * MS).count() as u64;
        assert_eq!(stats.issued, in_window);
        assert_eq!(stats.late, 0, "{stats:?}");
        assert!(stats.lag_max_ns <= nanos(step), "{stats:?}");

        let mut total = stats;
        let other = LagStats {
            issued: 10,
            lag_sum_ns: 1_000,
            lag_max_ns: 900_000_000,
            late: 3,
            late_queue_full: 1,
            backlog_final: 5,
            lag_final_ns: 800_000_000,
        };
        total.merge(&other);
        assert_eq!(total.issued, in_window + 10);
        assert_eq!(total.lag_sum_ns, stats.lag_sum_ns + 1_000);
        assert_eq!(total.lag_max_ns, 900_000_000);
        assert_eq!((total.late, total.late_queue_full, total.backlog_final), (stats.late + 3, 1, 5));
        assert_eq!(total.lag_final_ns, 800_000_000);
    }
}

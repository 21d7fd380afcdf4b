//! How long an adaptive client ring keeps spinning after its last completion.
//!
//! A fixed window fails a host whose target answers in bursts: at QD32 a target that
//! takes the 32 commands together answers them together, so the host sees a burst of
//! completions, then nothing for most of a round trip (70 us measured against SPDK's
//! target at 4 KiB random write). With a 50 us window the host slept through every
//! such gap and paid a wake-up per burst (4,600 context switches a second, 0.72x of
//! the IOPS of busy polling). So the window stretches to half again the longest gap
//! between completions seen in the last one or two milliseconds, up to
//! [`MAX_SPIN_WINDOW`]: gaps that short mean the next completion is due soon, and
//! spinning through them is cheaper than sleeping. Longer gaps (a disk or a Ceph
//! cluster behind the target, or an idle queue) are not counted, so the ring sleeps
//! through those as before.

use std::time::{Duration, Instant};

/// Longest spin after the last completion, however the gaps look.
pub(crate) const MAX_SPIN_WINDOW: Duration = Duration::from_micros(200);
/// Gaps are remembered in buckets this long; the window looks at the current and the
/// previous one, so a change of rhythm is forgotten within two buckets.
const BUCKET: Duration = Duration::from_millis(1);

#[derive(Debug)]
pub(crate) struct SpinWindow {
    current_max: Duration,
    previous_max: Duration,
    bucket_started: Instant,
}

impl SpinWindow {
    pub(crate) fn new(now: Instant) -> SpinWindow {
        SpinWindow { current_max: Duration::ZERO, previous_max: Duration::ZERO, bucket_started: now }
    }

    /// A completion came `gap` after the previous one.
    pub(crate) fn record(&mut self, gap: Duration, now: Instant) {
        let since = now.saturating_duration_since(self.bucket_started);
        if since >= BUCKET {
            // A whole bucket without completions forgets both.
            self.previous_max = if since >= 2 * BUCKET { Duration::ZERO } else { self.current_max };
            self.current_max = Duration::ZERO;
            self.bucket_started = now;
        }
        if gap <= MAX_SPIN_WINDOW {
            self.current_max = self.current_max.max(gap);
        }
    }

    /// The spin window: `base` (the configured one) or longer, never above
    /// [`MAX_SPIN_WINDOW`] unless `base` is.
    pub(crate) fn window(&self, base: Duration) -> Duration {
        let longest = self.current_max.max(self.previous_max);
        base.max((longest * 3 / 2).min(MAX_SPIN_WINDOW))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_micros(50);

    fn us(value: u64) -> Duration {
        Duration::from_micros(value)
    }

    #[test]
    fn bursts_with_short_gaps_stretch_the_window() {
        let start = Instant::now();
        let mut window = SpinWindow::new(start);
        assert_eq!(window.window(BASE), BASE);
        // Bursts of 30 completions 2 us apart, 70 us between bursts.
        let mut now = start;
        for _ in 0..20 {
            now += us(70);
            window.record(us(70), now);
            for _ in 0..30 {
                now += us(2);
                window.record(us(2), now);
            }
        }
        assert_eq!(window.window(BASE), us(105));
    }

    #[test]
    fn long_gaps_and_idle_time_do_not_count() {
        let start = Instant::now();
        let mut window = SpinWindow::new(start);
        window.record(us(900), start + us(900));
        assert_eq!(window.window(BASE), BASE, "a gap longer than the cap is not a rhythm");
        window.record(us(180), start + us(1000));
        assert_eq!(window.window(BASE), MAX_SPIN_WINDOW, "never above the cap");
        // Completions resume after 5 ms of nothing: the old rhythm is forgotten.
        let later = start + Duration::from_millis(6);
        window.record(Duration::from_millis(5), later);
        assert_eq!(window.window(BASE), BASE);
    }

    #[test]
    fn a_larger_base_wins() {
        let window = SpinWindow::new(Instant::now());
        assert_eq!(window.window(us(500)), us(500));
    }
}

//! Latency recording over an HDR histogram (nanoseconds, 3 significant digits).

use hdrhistogram::Histogram;

/// The percentiles reported for every run.
pub const PERCENTILES: [f64; 6] = [50.0, 90.0, 95.0, 99.0, 99.9, 99.99];

/// Latencies of one run (or one thread of it), in nanoseconds.
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

/// Summary statistics in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySummary {
    /// Recorded values.
    pub count: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Smallest (at histogram precision).
    pub min_ns: u64,
    /// Largest (at histogram precision).
    pub max_ns: u64,
    /// Standard deviation.
    pub stddev_ns: f64,
    /// `(percentile, value)` for each of [`PERCENTILES`].
    pub percentiles: Vec<(f64, u64)>,
}

impl LatencyRecorder {
    /// An empty recorder (auto-resizing, 3 significant digits).
    pub fn new() -> Self {
        Self::with_precision(3)
    }

    /// An empty recorder with `significant_digits` (1..=5) of precision.
    pub fn with_precision(significant_digits: u8) -> Self {
        let mut histogram = Histogram::new(significant_digits).expect("valid precision");
        histogram.auto(true);
        LatencyRecorder { histogram }
    }

    /// Records one latency.
    pub fn record(&mut self, nanoseconds: u64) {
        // `record` grows the auto-resizing histogram; `saturating_record` would clamp.
        if self.histogram.record(nanoseconds.max(1)).is_err() {
            self.histogram.saturating_record(nanoseconds.max(1));
        }
    }

    /// Adds everything `other` recorded.
    pub fn merge(&mut self, other: &LatencyRecorder) {
        self.histogram.add(&other.histogram).expect("auto-resizing histograms merge");
    }

    /// Forgets everything (keeps the allocation).
    pub fn reset(&mut self) {
        self.histogram.reset();
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The value at `percentile` (0..=100), in nanoseconds.
    pub fn percentile(&self, percentile: f64) -> u64 {
        self.histogram.value_at_percentile(percentile)
    }

    /// Mean, min, max, standard deviation and the standard percentiles.
    pub fn summary(&self) -> LatencySummary {
        let empty = self.histogram.is_empty();
        LatencySummary {
            count: self.histogram.len(),
            mean_ns: if empty { 0.0 } else { self.histogram.mean() },
            min_ns: if empty { 0 } else { self.histogram.min() },
            max_ns: if empty { 0 } else { self.histogram.max() },
            stddev_ns: if empty { 0.0 } else { self.histogram.stdev() },
            percentiles: PERCENTILES.iter().map(|&p| (p, if empty { 0 } else { self.percentile(p) })).collect(),
        }
    }

    /// The percentile distribution for plots: `(percentile, value_ns)` at points
    /// 0, 50, 75, 87.5 ... (halving the remaining tail) up to 99.999 and 100.
    pub fn percentile_curve(&self) -> Vec<(f64, u64)> {
        if self.histogram.is_empty() {
            return Vec::new();
        }
        let mut points = Vec::new();
        let mut tail = 100.0;
        while tail > 0.001 {
            let percentile = 100.0 - tail;
            points.push((percentile, self.percentile(percentile)));
            tail /= 2.0;
        }
        points.push((100.0, self.histogram.max()));
        points
    }
}

/// One second of a run, across all threads.
#[derive(Clone, Debug, PartialEq)]
pub struct SecondSample {
    /// Seconds since measurement began (the end of this sample).
    pub second: u32,
    /// I/Os completed.
    pub ios: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Errors.
    pub errors: u64,
    /// Mean latency.
    pub mean_ns: f64,
    /// 99th percentile latency.
    pub p99_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;

    /// Percentiles agree with a brute-force nearest-rank computation on sorted data
    /// within the histogram's precision (3 significant digits: relative error < 0.1 %).
    #[test]
    fn percentiles_match_brute_force_within_hdr_precision() {
        let mut rng = Rng::new(42);
        for &scale in &[1_000.0, 50_000.0, 2_000_000.0] {
            let mut recorder = LatencyRecorder::new();
            let mut values: Vec<u64> = (0..200_000)
                // Log-normal-ish: exponential of a uniform gives a long tail.
                .map(|_| (scale * (rng.unit() * 4.0).exp() + rng.exponential(scale)) as u64 + 1)
                .collect();
            for &value in &values {
                recorder.record(value);
            }
            values.sort_unstable();
            for &percentile in PERCENTILES.iter().chain(&[0.0, 100.0]) {
                let rank = ((percentile / 100.0) * values.len() as f64).ceil().max(1.0) as usize;
                let exact = values[rank - 1] as f64;
                let measured = recorder.percentile(percentile) as f64;
                let error = (measured - exact).abs() / exact;
                assert!(error < 0.001, "p{percentile}: exact {exact} measured {measured} error {error}");
            }
            let summary = recorder.summary();
            let mean = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
            assert!((summary.mean_ns - mean).abs() / mean < 0.001);
            let variance = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / values.len() as f64;
            assert!((summary.stddev_ns - variance.sqrt()).abs() / variance.sqrt() < 0.01);
            assert!(
                (summary.max_ns as f64 - values[values.len() - 1] as f64).abs() / (values[values.len() - 1] as f64)
                    < 0.001
            );
            assert!((summary.min_ns as f64 - values[0] as f64).abs() / (values[0] as f64) < 0.001);
        }
    }

    #[test]
    fn merge_and_curve() {
        let mut a = LatencyRecorder::new();
        let mut b = LatencyRecorder::new();
        (1..=1000).for_each(|v| a.record(v * 1000));
        (1001..=2000).for_each(|v| b.record(v * 1000));
        a.merge(&b);
        assert_eq!(a.count(), 2000);
        let curve = a.percentile_curve();
        assert!(curve.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(LatencyRecorder::new().summary().count, 0);
    }
}

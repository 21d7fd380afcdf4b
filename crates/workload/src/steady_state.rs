//! Steady-state detection by the SNIA Solid State Storage Performance Test
//! Specification (PTS): over a measurement window of the last 5 rounds,
//!
//! - the data excursion (max - min of the tracked variable) is within 20 % of the
//!   window's average, and
//! - the excursion of the least-squares linear fit across the window (slope times
//!   the window width, i.e. fitted last minus fitted first) is within 10 % of the
//!   average.
//!
//! The tracked variable is e.g. IOPS per round.

/// Rounds in the measurement window.
pub const WINDOW: usize = 5;
/// Largest allowed data excursion, as a fraction of the window average.
pub const MAX_DATA_EXCURSION: f64 = 0.20;
/// Largest allowed fitted-slope excursion, as a fraction of the window average.
pub const MAX_SLOPE_EXCURSION: f64 = 0.10;

/// The verdict on a series of rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct SteadyState {
    /// Both criteria hold over the last [`WINDOW`] rounds.
    pub reached: bool,
    /// Rounds examined.
    pub rounds: usize,
    /// First round (0-based) of the window judged (the last window).
    pub window_start: usize,
    /// Average of the window.
    pub window_average: f64,
    /// max - min over the window, as a fraction of the average.
    pub data_excursion: f64,
    /// |slope| x (WINDOW - 1), as a fraction of the average.
    pub slope_excursion: f64,
    /// Least-squares slope per round.
    pub slope: f64,
}

/// Judges the last [`WINDOW`] rounds of `rounds`. Fewer rounds than the window (or a
/// window averaging 0) is "not reached".
pub fn detect(rounds: &[f64]) -> SteadyState {
    let n = rounds.len();
    if n < WINDOW {
        return SteadyState {
            reached: false,
            rounds: n,
            window_start: 0,
            window_average: if n == 0 { 0.0 } else { rounds.iter().sum::<f64>() / n as f64 },
            data_excursion: f64::INFINITY,
            slope_excursion: f64::INFINITY,
            slope: 0.0,
        };
    }
    let start = n - WINDOW;
    let window = &rounds[start..];
    let average = window.iter().sum::<f64>() / WINDOW as f64;
    let max = window.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let min = window.iter().cloned().fold(f64::INFINITY, f64::min);
    // Least squares y = a + b x over x = 0..WINDOW.
    let mean_x = (WINDOW - 1) as f64 / 2.0;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (index, &y) in window.iter().enumerate() {
        let dx = index as f64 - mean_x;
        sxy += dx * (y - average);
        sxx += dx * dx;
    }
    let slope = sxy / sxx;
    let (data_excursion, slope_excursion) = if average.abs() > 0.0 && average.is_finite() {
        ((max - min) / average.abs(), (slope * (WINDOW - 1) as f64).abs() / average.abs())
    } else {
        (f64::INFINITY, f64::INFINITY)
    };
    SteadyState {
        reached: data_excursion <= MAX_DATA_EXCURSION && slope_excursion <= MAX_SLOPE_EXCURSION,
        rounds: n,
        window_start: start,
        window_average: average,
        data_excursion,
        slope_excursion,
        slope,
    }
}

/// The first round count at which the series reached steady state, if ever.
pub fn first_steady(rounds: &[f64]) -> Option<usize> {
    (WINDOW..=rounds.len()).find(|&end| detect(&rounds[..end]).reached)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;

    #[test]
    fn steady_series_is_steady() {
        let rounds = [100_000.0, 101_000.0, 99_500.0, 100_400.0, 100_100.0];
        let verdict = detect(&rounds);
        assert!(verdict.reached, "{verdict:?}");
        assert_eq!(verdict.window_start, 0);
        assert!(verdict.data_excursion < 0.02);
    }

    #[test]
    fn a_decaying_series_becomes_steady_after_the_drop() {
        // Fresh-out-of-box SSD: IOPS fall and then flatten.
        let rounds = [400.0, 250.0, 160.0, 120.0, 105.0, 101.0, 100.0, 99.0, 100.5, 100.0, 99.8];
        assert!(!detect(&rounds[..5]).reached);
        let first = first_steady(&rounds).unwrap();
        assert!((6..=9).contains(&first), "{first}");
        assert!(detect(&rounds).reached);
    }

    #[test]
    fn a_drifting_series_fails_the_slope_rule_only() {
        // +4 % per round: excursion 16 % (< 20 %) but fitted slope excursion 16 % (> 10 %).
        let rounds: Vec<f64> = (0..5).map(|i| 1000.0 * (1.0 + 0.04 * i as f64)).collect();
        let verdict = detect(&rounds);
        assert!(verdict.data_excursion < MAX_DATA_EXCURSION, "{verdict:?}");
        assert!(verdict.slope_excursion > MAX_SLOPE_EXCURSION, "{verdict:?}");
        assert!(!verdict.reached);
    }

    #[test]
    fn a_noisy_series_fails_the_excursion_rule_only() {
        // Flat on average (no slope) but swinging +-15 %.
        let rounds = [1000.0, 1150.0, 850.0, 1150.0, 1000.0];
        let verdict = detect(&rounds);
        assert!(verdict.data_excursion > MAX_DATA_EXCURSION, "{verdict:?}");
        assert!(verdict.slope_excursion < MAX_SLOPE_EXCURSION, "{verdict:?}");
        assert!(!verdict.reached);
        // Small noise around a level passes.
        let mut rng = Rng::new(3);
        let quiet: Vec<f64> = (0..20).map(|_| 5000.0 * (1.0 + 0.05 * (rng.unit() - 0.5))).collect();
        assert!(detect(&quiet).reached);
    }

    #[test]
    fn short_or_zero_series_are_not_steady() {
        assert!(!detect(&[]).reached);
        assert!(!detect(&[1.0, 1.0, 1.0, 1.0]).reached);
        assert!(!detect(&[0.0; 5]).reached);
    }
}

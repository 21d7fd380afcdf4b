//! The simulator itself: seeds replay exactly, a short run is clean, and each planted
//! bug is caught.

use sim::{run_seed, Canary, RunOptions};

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 17, 4242] {
        let first = run_seed(seed, RunOptions::default());
        let second = run_seed(seed, RunOptions::default());
        assert_eq!(first.fingerprint, second.fingerprint, "seed {seed}");
        assert_eq!(first.summary, second.summary, "seed {seed}");
        assert_ne!(first.fingerprint, run_seed(seed + 1, RunOptions::default()).fingerprint);
    }
}

#[test]
fn a_short_run_is_clean() {
    for seed in 0..40 {
        let report = run_seed(seed, RunOptions::default());
        assert!(report.violations.is_empty(), "seed {seed}: {:?}\nworld: {}", report.violations, report.plan);
    }
}

#[test]
fn every_canary_is_caught_within_200_seeds() {
    for (name, canary) in Canary::ALL {
        let caught = (0..200).find(|&seed| !run_seed(seed, RunOptions { canary: Some(canary), trace: false }).violations.is_empty());
        assert!(caught.is_some(), "canary {name} not caught in 200 seeds");
    }
}

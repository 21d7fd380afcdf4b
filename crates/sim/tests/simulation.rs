//! The simulator itself: seeds replay exactly, a short run is clean, and each planted
//! bug is caught.

use sim::group::is_group_seed;
use sim::{run_seed, Canary, RunOptions};

#[test]
fn a_seed_replays_exactly() {
    // 1 and 5 are gateway-group seeds.
    for seed in [3, 17, 4242, 1, 5] {
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

/// Seeds that once broke an invariant (docs/testing.md tells each story): they must
/// stay clean whatever changes in the code or in what a seed draws. 249, 266, 357 and
/// 399 are gateway-group seeds in which a preempted host's write landed after the
/// Preempt and Abort was answered (a notice whose change the copy already had
/// acknowledged at once), and the six from 3,000,000,000 and 5,000,000,000 the same
/// through a gateway whose watch was lost (not waited for, nor fenced), and the five
/// after them through the gateway that made the change losing its own watch (its own
/// notify never fences it); 791, 886 and 893 a fenced gateway's old copy answering
/// after a change made just after the fence (no wait for its vouch).
const SEEDS_THAT_FOUND_BUGS: [u64; 26] = [
    9,
    36,
    102,
    905,
    249,
    266,
    357,
    399,
    7_341_203,
    746_410_014,
    1_200_007_218,
    1_400_107_323,
    3_000_009_354,
    3_000_016_759,
    5_000_001_325,
    5_000_012_328,
    5_000_015_371,
    5_000_017_498,
    3_000_002_697,
    3_000_004_726,
    5_000_006_190,
    5_000_007_009,
    5_000_009_445,
    791,
    886,
    893,
];

#[test]
fn seeds_that_found_bugs_stay_clean() {
    for seed in SEEDS_THAT_FOUND_BUGS {
        let report = run_seed(seed, RunOptions::default());
        assert!(report.violations.is_empty(), "seed {seed}: {:?}\nworld: {}", report.violations, report.plan);
    }
}

#[test]
fn a_flipped_nsid_in_an_unguarded_answer_is_excused_not_missed() {
    // Seed 746410014: a bit flipped in host 0's Namespace Create answer (no header
    // digest) turned NSID 4 into 8196; the ledger's check after the next crash is
    // excused, and counted, like a data mismatch.
    let report = run_seed(746_410_014, RunOptions::default());
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let excused: u64 = report
        .summary
        .rsplit(", ")
        .find_map(|part| part.strip_suffix(" excused"))
        .and_then(|count| count.parse().ok())
        .expect("the summary counts excused checks");
    assert!(excused >= 1, "{}", report.summary);
}

/// The counter named `name` in a seed's summary ("..., 12 lock swaps, ...").
fn summary_count(summary: &str, name: &str) -> u64 {
    summary
        .split(", ")
        .find_map(|part| part.strip_suffix(name))
        .and_then(|count| count.trim().split(' ').next_back()?.parse().ok())
        .unwrap_or_else(|| panic!("no '{name}' in the summary: {summary}"))
}

#[test]
fn a_quarter_of_seeds_run_a_gateway_group_that_does_its_work() {
    let group_seeds: Vec<u64> = (0..400).filter(|&seed| is_group_seed(seed)).collect();
    assert!((80..=120).contains(&group_seeds.len()), "{} group seeds in 400", group_seeds.len());
    let (mut versions, mut swaps, mut conflicts) = (0, 0, 0);
    let (mut fence_waits, mut preempts, mut notices_read) = (0, 0, 0);
    for &seed in group_seeds.iter().take(10) {
        let report = run_seed(seed, RunOptions::default());
        assert!(report.plan.starts_with("gateway group"), "{}", report.plan);
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
        versions += summary_count(&report.summary, " versions");
        swaps += summary_count(&report.summary, " lock swaps");
        conflicts += summary_count(&report.summary, " conflicts");
        fence_waits += summary_count(&report.summary, " fence waits");
        preempts += summary_count(&report.summary, " preempt and abort answers");
        notices_read += summary_count(&report.summary, " notices read");
    }
    // The checks mean something only if reservations change, are enforced, and
    // Compare and Write wins sometimes; Preempt and Abort meets writes at storage
    // (acknowledgements wait for fences) and hosts read the notices they are owed.
    assert!(versions > 0 && swaps > 0 && conflicts > 0, "{versions} {swaps} {conflicts}");
    assert!(fence_waits > 0 && preempts > 0 && notices_read > 0, "{fence_waits} {preempts} {notices_read}");
}

/// Gateway-group seeds that go through the group's faults (cluster restarts, broken
/// watches, fences, gateway restarts, the group's power loss, a state without PTPL
/// cleared by it, an acknowledgement withheld at the fence's bound, ANA moves and a
/// takeover with hosts refused by a changing gateway), each with the
/// summary counters it must show: they must stay clean, and keep doing so (if what a
/// seed draws changes, pick new ones: `sluice-sim replay S --quiet`).
const GROUP_SEEDS_THROUGH_EVERY_FAULT: [(u64, &[&str]); 5] = [
    (124, &[" fences", " gateway restarts", " watch breaks", " cluster restarts", " power losses"]),
    (194, &[" fences", " gateway restarts", " watch breaks", " cluster restarts", " fence waits", " notices read"]),
    (1001, &[" fences", " whole-group restarts", " cleared without PTPL", " fence waits"]),
    (1651, &[" acknowledgements withheld", " fences"]),
    (5, &[" ANA moves", " ANA takeovers", " commands refused with ANA Transition", " fences", " gateway restarts"]),
];

#[test]
fn group_seeds_through_every_fault_stay_clean() {
    for (seed, faults) in GROUP_SEEDS_THROUGH_EVERY_FAULT {
        let report = run_seed(seed, RunOptions::default());
        assert!(report.violations.is_empty(), "seed {seed}: {:?}\nworld: {}", report.violations, report.plan);
        for &fault in faults {
            assert!(summary_count(&report.summary, fault) > 0, "seed {seed} no longer has{fault}: {}", report.summary);
        }
    }
}

#[test]
fn every_canary_is_caught_within_200_seeds() {
    for (name, canary) in Canary::ALL {
        let caught = (0..200)
            .find(|&seed| !run_seed(seed, RunOptions { canary: Some(canary), trace: false }).violations.is_empty());
        assert!(caught.is_some(), "canary {name} not caught in 200 seeds");
    }
}

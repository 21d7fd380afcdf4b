//! The QoS rate limiter (a GCRA over one atomic) against an oracle written the other
//! way round: a leaky bucket whose water level drains one nanosecond per nanosecond,
//! into which each command pours its cost and which it may leave once the level
//! before it is at most the burst. Property tests: the same schedule as the oracle
//! (so no command the oracle lets through at once is delayed), releases in arrival
//! order, and over any window the released work stays within the rate times the
//! window plus the burst plus one command.

use std::sync::Arc;

use proptest::prelude::*;

use nvme_target::qos::RateLimiter;

const NANOSECONDS_PER_SECOND: u128 = 1_000_000_000;

fn cost_nanoseconds(units: u64, rate: u64) -> u64 {
    (u128::from(units) * NANOSECONDS_PER_SECOND / u128::from(rate)) as u64
}

/// The leaky bucket: release times of commands (arrival, units), arrivals in order.
fn oracle(rate: u64, burst: u64, commands: &[(u64, u64)]) -> Vec<u64> {
    let mut level: u64 = 0;
    let mut last = 0;
    commands
        .iter()
        .map(|&(arrival, units)| {
            level = level.saturating_sub(arrival - last);
            last = arrival;
            let wait = level.saturating_sub(burst);
            level += cost_nanoseconds(units, rate);
            arrival + wait
        })
        .collect()
}

/// Arrivals as non-decreasing times from gaps, with each command's units.
fn schedule() -> impl Strategy<Value = (u64, u64, Vec<(u64, u64)>)> {
    (1u64..=100_000, 0u64..=50_000_000, prop::collection::vec((0u64..=2_000_000, 1u64..=64), 1..150)).prop_map(
        |(rate, burst, steps)| {
            let mut now = 0;
            let commands = steps
                .into_iter()
                .map(|(gap, units)| {
                    now += gap;
                    (now, units)
                })
                .collect();
            (rate, burst, commands)
        },
    )
}

proptest! {
    #[test]
    fn the_limiter_releases_exactly_when_the_oracle_does((rate, burst, commands) in schedule()) {
        let limiter = RateLimiter::default();
        limiter.set(rate, std::time::Duration::from_nanos(burst));
        let released: Vec<u64> = commands.iter().map(|&(arrival, units)| limiter.reserve(arrival, units)).collect();
        prop_assert_eq!(&released, &oracle(rate, burst, &commands));
        for (release, &(arrival, _)) in released.iter().zip(&commands) {
            prop_assert!(*release >= arrival, "never before its arrival");
        }
        for pair in released.windows(2) {
            prop_assert!(pair[0] <= pair[1], "first come, first served");
        }
        // Any window [released[i], released[j]]: the work released in it is at most
        // the window, the burst and the last command (all in nanoseconds at the rate).
        for i in 0..released.len() {
            let mut work: u64 = 0;
            for j in i..released.len() {
                let cost = cost_nanoseconds(commands[j].1, rate);
                work += cost;
                prop_assert!(
                    work <= released[j] - released[i] + burst + cost,
                    "commands {}..={} released {} ns of work in {} ns with a {} ns burst",
                    i, j, work, released[j] - released[i], burst
                );
            }
        }
    }

    #[test]
    fn a_limiter_without_a_rate_never_delays(commands in prop::collection::vec((0u64..1 << 40, 0u64..1 << 20), 1..50)) {
        let limiter = RateLimiter::default();
        for (now, units) in commands {
            prop_assert_eq!(limiter.reserve(now, units), now);
        }
    }
}

#[test]
fn threads_booking_at_once_lose_no_booking() {
    // 1,000 units per second: each booking takes 1 ms of virtual time.
    let limiter = Arc::new(RateLimiter::default());
    limiter.set(1_000, std::time::Duration::ZERO);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || (0..2_500).map(|_| limiter.reserve(0, 1)).collect::<Vec<u64>>())
        })
        .collect();
    let mut releases: Vec<u64> = threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect();
    releases.sort_unstable();
    let expected: Vec<u64> = (0..10_000).map(|index| index * 1_000_000).collect();
    assert_eq!(releases, expected, "every booking got its own millisecond");
}

#[test]
fn a_change_forgets_the_debt() {
    let limiter = RateLimiter::default();
    limiter.set(1, std::time::Duration::ZERO);
    assert_eq!(limiter.reserve(0, 1), 0);
    assert_eq!(limiter.reserve(0, 1), 1_000_000_000);
    limiter.set(1, std::time::Duration::ZERO);
    assert_eq!(limiter.reserve(5, 1), 5, "a fresh bucket");
}

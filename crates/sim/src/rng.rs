//! The simulation's only source of randomness, and its clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The workload crate's generator (xoshiro256** seeded by SplitMix64: the same stream
/// on every platform and toolchain, so a seed replays exactly) with the draws the
/// simulation needs.
#[derive(Clone, Debug)]
pub struct Rng(workload::Rng);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(workload::Rng::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..bound`; 0 when `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0.below(bound)
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low).saturating_add(1))
    }

    /// True with probability `per_million` / 1,000,000.
    pub fn chance(&mut self, per_million: u32) -> bool {
        self.below(1_000_000) < u64::from(per_million)
    }

    /// Puts `items` in a random order (Fisher-Yates, last to first).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for index in (1..items.len()).rev() {
            let other = self.below(index as u64 + 1) as usize;
            items.swap(index, other);
        }
    }

    /// A generator for a part of the world (the disk, the network), so that how often
    /// one part draws does not shift every other part's stream.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

/// Simulated time: nanoseconds since the run started, shared by the world and the
/// simulated disk. `Instant`s handed to the real state machines are `base + elapsed`,
/// so they never see the machine's clock.
#[derive(Clone, Debug)]
pub struct SimClock {
    base: Instant,
    elapsed_ns: Arc<AtomicU64>,
}

impl SimClock {
    /// A clock at zero.
    pub fn new() -> Self {
        SimClock { base: Instant::now(), elapsed_ns: Arc::new(AtomicU64::new(0)) }
    }

    /// Nanoseconds since the start of the run.
    pub fn elapsed_ns(&self) -> u64 {
        self.elapsed_ns.load(Ordering::Relaxed)
    }

    /// The current simulated instant.
    pub fn now(&self) -> Instant {
        self.instant_at(self.elapsed_ns())
    }

    /// The instant `elapsed_ns` after the start.
    pub fn instant_at(&self, elapsed_ns: u64) -> Instant {
        self.base + Duration::from_nanos(elapsed_ns)
    }

    /// `instant` as nanoseconds since the start (0 for anything earlier).
    pub fn ns_of(&self, instant: Instant) -> u64 {
        u64::try_from(instant.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Moves time forward to `elapsed_ns` (never backwards).
    pub fn advance_to(&self, elapsed_ns: u64) {
        self.elapsed_ns.fetch_max(elapsed_ns, Ordering::Relaxed);
    }
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_one_stream() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let first: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        assert_eq!(first, (0..8).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(Rng::new(43).next_u64(), first[0]);
    }

    #[test]
    fn bounds_hold() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            assert!(rng.below(5) < 5);
            let value = rng.between(3, 4);
            assert!((3..=4).contains(&value));
        }
        assert_eq!(rng.below(0), 0);
        assert!(!rng.chance(0));
        assert!(rng.chance(1_000_000));
    }

    #[test]
    fn clock_moves_forward_only() {
        let clock = SimClock::new();
        clock.advance_to(500);
        clock.advance_to(100);
        assert_eq!(clock.elapsed_ns(), 500);
        assert_eq!(clock.ns_of(clock.now()), 500);
    }
}

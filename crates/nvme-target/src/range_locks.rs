//! LBA ranges held by fused Compare and Write commands, per namespace and shared by
//! every queue of every controller that serves it.
//!
//! A fused pair holds its range from before the Compare's read until the Write is
//! done, so no other pair and no Write, Write Zeroes or Deallocate that starts in the
//! meantime touches those blocks. The table costs a plain write nothing but one
//! relaxed load of a counter that changes only when a pair starts or ends; the mutex
//! is taken only while some range is held.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::Waker;

use crate::limits::MAX_HELD_COMPARE_AND_WRITE_RANGES;

/// One held range of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeldRange {
    first_lba: u64,
    /// One past the last block.
    end_lba: u64,
}

impl HeldRange {
    fn overlaps(&self, first_lba: u64, end_lba: u64) -> bool {
        first_lba < self.end_lba && self.first_lba < end_lba
    }
}

#[derive(Debug, Default)]
struct Held {
    ranges: Vec<HeldRange>,
    /// Threads with a command waiting for a range: woken when any range is released.
    waiters: Vec<Waker>,
}

/// The ranges held on one namespace.
#[derive(Debug, Default)]
pub struct RangeLocks {
    /// Number of held ranges; writes look here first.
    held_count: AtomicUsize,
    held: Mutex<Held>,
}

/// What `try_hold` decided.
#[derive(Debug, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The range is now held by the caller, who must `release` it.
    Held,
    /// Another command holds an overlapping range (or the table is full): try again
    /// when woken (the waker, if given, is called on the next release).
    Busy,
}

impl RangeLocks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Takes `blocks` blocks from `first_lba` unless an overlapping range is held.
    pub fn try_hold(&self, first_lba: u64, blocks: u64, waker: Option<&Waker>) -> HoldOutcome {
        let end_lba = first_lba.saturating_add(blocks);
        let mut held = self.lock();
        let full = held.ranges.len() >= MAX_HELD_COMPARE_AND_WRITE_RANGES;
        if full || held.ranges.iter().any(|range| range.overlaps(first_lba, end_lba)) {
            if let Some(waker) = waker {
                if !held.waiters.iter().any(|known| known.will_wake(waker)) {
                    held.waiters.push(waker.clone());
                }
            }
            return HoldOutcome::Busy;
        }
        held.ranges.push(HeldRange { first_lba, end_lba });
        self.held_count.store(held.ranges.len(), Ordering::Release);
        HoldOutcome::Held
    }

    /// Releases a range taken with `try_hold` and wakes every waiting thread.
    pub fn release(&self, first_lba: u64, blocks: u64) {
        let end_lba = first_lba.saturating_add(blocks);
        let waiters = {
            let mut held = self.lock();
            if let Some(position) = held.ranges.iter().position(|range| *range == HeldRange { first_lba, end_lba }) {
                held.ranges.swap_remove(position);
            }
            self.held_count.store(held.ranges.len(), Ordering::Release);
            std::mem::take(&mut held.waiters)
        };
        for waker in waiters {
            waker.wake();
        }
    }

    /// True when a write of `blocks` blocks from `first_lba` must wait for a held
    /// range (registering `waker` to be woken on release). One relaxed load when no
    /// range is held.
    pub fn write_must_wait(&self, first_lba: u64, blocks: u64, waker: Option<&Waker>) -> bool {
        if self.held_count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let end_lba = first_lba.saturating_add(blocks);
        let mut held = self.lock();
        if !held.ranges.iter().any(|range| range.overlaps(first_lba, end_lba)) {
            return false;
        }
        if let Some(waker) = waker {
            if !held.waiters.iter().any(|known| known.will_wake(waker)) {
                held.waiters.push(waker.clone());
            }
        }
        true
    }

    /// Number of ranges held now.
    pub fn held_ranges(&self) -> usize {
        self.held_count.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_ranges_exclude_each_other() {
        let locks = RangeLocks::default();
        assert_eq!(locks.try_hold(10, 5, None), HoldOutcome::Held);
        assert_eq!(locks.try_hold(14, 1, None), HoldOutcome::Busy);
        assert_eq!(locks.try_hold(5, 6, None), HoldOutcome::Busy);
        // Adjacent ranges do not overlap.
        assert_eq!(locks.try_hold(15, 3, None), HoldOutcome::Held);
        assert_eq!(locks.try_hold(0, 10, None), HoldOutcome::Held);
        assert!(locks.write_must_wait(12, 1, None));
        assert!(!locks.write_must_wait(18, 100, None));
        locks.release(10, 5);
        assert!(!locks.write_must_wait(12, 1, None));
        assert_eq!(locks.try_hold(14, 1, None), HoldOutcome::Held);
        assert_eq!(locks.held_ranges(), 3);
    }

    #[test]
    fn release_wakes_waiters_once() {
        let count = storage::conformance::WakeCounter::new();
        let waker = count.waker();
        let locks = RangeLocks::default();
        assert_eq!(locks.try_hold(0, 8, None), HoldOutcome::Held);
        assert_eq!(locks.try_hold(4, 1, Some(&waker)), HoldOutcome::Busy);
        assert!(locks.write_must_wait(4, 1, Some(&waker)));
        locks.release(0, 8);
        assert_eq!(count.count(), 1, "one waker registered once, woken once");
        locks.release(0, 8);
        assert_eq!(count.count(), 1);
    }

    #[test]
    fn a_full_table_is_busy_not_unbounded() {
        let locks = RangeLocks::default();
        for index in 0..MAX_HELD_COMPARE_AND_WRITE_RANGES as u64 {
            assert_eq!(locks.try_hold(index * 2, 1, None), HoldOutcome::Held);
        }
        assert_eq!(locks.try_hold(u64::MAX - 1, 1, None), HoldOutcome::Busy);
    }
}

//! The ring's connection timers: a min-heap of (deadline, connection), so that firing
//! what is due costs the timers that are due, not a scan of every connection.
//!
//! Deadlines mostly move later (a keep-alive deadline moves with every command), and a
//! heap cannot move an entry cheaply, so an entry is only a promise to look at the
//! connection then: a connection is pushed again only when its deadline moves
//! *earlier* than the entry it already has; when an entry comes due the loop re-reads
//! the connection's deadline and fires, or pushes the later deadline. A busy connection
//! therefore costs one comparison per command, and one heap push per keep-alive period.
//! Entries of closed connections, or superseded by an earlier one, are skipped when
//! they come due; the heap is rebuilt when such entries outnumber live connections.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// One entry: when, and the connection's slot index and generation.
pub(crate) type TimerEntry = (Instant, u32, u32);

#[derive(Default)]
pub(crate) struct TimerQueue {
    heap: BinaryHeap<Reverse<TimerEntry>>,
}

impl TimerQueue {
    pub(crate) fn schedule(&mut self, at: Instant, index: u32, generation: u32) {
        self.heap.push(Reverse((at, index, generation)));
    }

    /// The earliest entry's time: the loop wakes up by then.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Moves every entry due at `now` into `due` (which the caller keeps for its
    /// capacity), earliest first. Entries pushed while the caller handles these wait
    /// for the next call, so a handler whose deadline stays in the past cannot keep
    /// one loop turn going.
    pub(crate) fn take_due(&mut self, now: Instant, due: &mut Vec<TimerEntry>) {
        while let Some(&Reverse(entry)) = self.heap.peek() {
            if entry.0 > now {
                break;
            }
            self.heap.pop();
            due.push(entry);
        }
    }

    /// Entries held, live or stale.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Empties the queue before a rebuild from the connections' own deadlines.
    pub(crate) fn clear(&mut self) {
        self.heap.clear();
    }
}

/// Rebuild the heap once it holds more than this many entries per live connection
/// (plus a constant, so a handful of connections never trigger it): stale entries
/// cost memory and a pop each, and a rebuild costs one pass over the connections.
pub(crate) const TIMER_ENTRIES_PER_CONNECTION_BEFORE_REBUILD: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn hands_out_due_entries_earliest_first_and_keeps_the_rest() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut queue = TimerQueue::default();
        for (ms, index) in [(30, 3), (10, 1), (20, 2), (40, 4)] {
            queue.schedule(at(ms), index, 0);
        }
        assert_eq!(queue.earliest(), Some(at(10)));
        let mut due = Vec::new();
        queue.take_due(at(25), &mut due);
        assert_eq!(due.iter().map(|entry| entry.1).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(queue.earliest(), Some(at(30)));
        assert_eq!(queue.len(), 2);
        due.clear();
        queue.take_due(at(5), &mut due);
        assert!(due.is_empty(), "nothing due before the earliest");
    }
}

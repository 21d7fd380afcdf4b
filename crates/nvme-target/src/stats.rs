//! SMART counters. Each queue counts into its own shard (written by one thread only,
//! so the atomics are never contended); readers add the shards up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters of one queue. Only the owning connection writes them.
#[derive(Default, Debug)]
pub struct QueueStats {
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub read_commands: AtomicU64,
    pub write_commands: AtomicU64,
    pub media_errors: AtomicU64,
}

impl QueueStats {
    /// Adds to a counter. Relaxed: each shard has a single writer and readers only
    /// need an eventually consistent sum.
    pub fn add(counter: &AtomicU64, amount: u64) {
        counter.store(counter.load(Ordering::Relaxed) + amount, Ordering::Relaxed);
    }
}

/// A snapshot of summed counters.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub read_commands: u64,
    pub write_commands: u64,
    pub media_errors: u64,
}

impl StatsSnapshot {
    fn add(&mut self, stats: &QueueStats) {
        self.bytes_read += stats.bytes_read.load(Ordering::Relaxed);
        self.bytes_written += stats.bytes_written.load(Ordering::Relaxed);
        self.read_commands += stats.read_commands.load(Ordering::Relaxed);
        self.write_commands += stats.write_commands.load(Ordering::Relaxed);
        self.media_errors += stats.media_errors.load(Ordering::Relaxed);
    }
}

/// Counters of a subsystem: the shards of live queues plus the totals of queues that
/// have closed. The mutex is taken when a queue connects or closes and when a host
/// reads the SMART log, never per I/O.
#[derive(Default, Debug)]
pub struct SubsystemStats {
    inner: Mutex<SubsystemStatsInner>,
}

#[derive(Default, Debug)]
struct SubsystemStatsInner {
    live: Vec<Arc<QueueStats>>,
    retired: StatsSnapshot,
}

impl SubsystemStats {
    /// Registers a new queue's shard.
    pub fn register(&self) -> Arc<QueueStats> {
        let shard = Arc::new(QueueStats::default());
        let mut inner = self.inner.lock().unwrap_or_else(|poison| poison.into_inner());
        inner.live.push(shard.clone());
        shard
    }

    /// Folds a closed queue's shard into the retired totals.
    pub fn retire(&self, shard: &Arc<QueueStats>) {
        let mut inner = self.inner.lock().unwrap_or_else(|poison| poison.into_inner());
        if let Some(position) = inner.live.iter().position(|live| Arc::ptr_eq(live, shard)) {
            inner.live.swap_remove(position);
            inner.retired.add(shard);
        }
    }

    /// Current totals.
    pub fn snapshot(&self) -> StatsSnapshot {
        let inner = self.inner.lock().unwrap_or_else(|poison| poison.into_inner());
        let mut total = inner.retired;
        for shard in &inner.live {
            total.add(shard);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_survive_queues_closing() {
        let stats = SubsystemStats::default();
        let a = stats.register();
        let b = stats.register();
        QueueStats::add(&a.bytes_read, 4096);
        QueueStats::add(&b.bytes_read, 512);
        QueueStats::add(&b.write_commands, 3);
        stats.retire(&a);
        stats.retire(&a); // twice is harmless
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.bytes_read, 4608);
        assert_eq!(snapshot.write_commands, 3);
    }
}

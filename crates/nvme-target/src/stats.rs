//! I/O counters and latency histograms for SMART and metrics. Each queue counts into
//! its own shard (written by one thread only, so the atomics are never contended);
//! readers add the shards up. A subsystem and each namespace have a registry of
//! shards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Buckets of a latency histogram: bucket `b` counts completions faster than 2^b
/// microseconds (bucket 0: under 1 µs); the last one also takes everything slower.
/// 2^25 µs is about 33 s.
pub const LATENCY_BUCKETS: usize = 26;

/// Where an I/O command's time goes, from the capsule's receipt to the response's
/// last byte handed to the socket (reads, compares and writes that succeeded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPhase {
    /// Receipt to the storage request: host data in (R2T round trips for writes),
    /// parked behind other commands' ranges or a reservation change. QoS holds are
    /// not in it.
    Receive,
    /// Held by a QoS limit.
    Qos,
    /// The storage request (every step of a fused pair or a Copy) to its completion.
    Storage,
    /// Storage completion to the response's last byte sent: the wait for the
    /// connection's previous batch and the socket (a slow host's receive window
    /// shows here).
    Send,
}

impl IoPhase {
    /// Every phase, in the order of a command's life (the index of its counters).
    pub const ALL: [IoPhase; 4] = [IoPhase::Receive, IoPhase::Qos, IoPhase::Storage, IoPhase::Send];

    /// The metric label.
    pub const fn label(self) -> &'static str {
        match self {
            IoPhase::Receive => "receive",
            IoPhase::Qos => "qos",
            IoPhase::Storage => "storage",
            IoPhase::Send => "send",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// The phases of one command, in microseconds (Send is recorded separately, once
/// the response is out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseSplit {
    pub receive_microseconds: u64,
    pub qos_microseconds: u64,
    pub storage_microseconds: u64,
}

/// Reservation commands that changed the reservation state, by command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReservationChange {
    Register,
    Acquire,
    Release,
}

impl ReservationChange {
    /// Every kind, in counter order.
    pub const ALL: [ReservationChange; 3] =
        [ReservationChange::Register, ReservationChange::Acquire, ReservationChange::Release];

    /// The metric label.
    pub const fn label(self) -> &'static str {
        match self {
            ReservationChange::Register => "register",
            ReservationChange::Acquire => "acquire",
            ReservationChange::Release => "release",
        }
    }
}

/// Counters kept on a queue's subsystem shard only (which its controller adopts): a
/// subsystem has one shard per queue, a namespace one per queue that used it, and at
/// thousands of namespaces these would cost 960 bytes per shard and, for the
/// histograms, 108 series per namespace. Namespaces get the per-phase sums.
#[derive(Default, Debug)]
pub struct QueueOnlyCounters {
    /// Per-phase histograms (index: `IoPhase::ALL`).
    phase_latency: [LatencyHistogram; 4],
    /// Error completions by class (index: `ErrorClass::ALL`).
    errors_by_class: [AtomicU64; 10],
    /// Reservation changes by command (index: `ReservationChange::ALL`).
    reservation_changes: [AtomicU64; 3],
}

/// A latency histogram with power-of-two microsecond buckets: coarse, but one add per
/// I/O and no allocation, and enough for percentiles to within a factor of two.
#[derive(Default, Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum_microseconds: AtomicU64,
}

impl LatencyHistogram {
    /// Counts one completion (single writer per shard, as for the counters).
    pub fn record(&self, latency_microseconds: u64) {
        let bucket = (u64::BITS - latency_microseconds.leading_zeros()) as usize;
        if let Some(counter) = self.buckets.get(bucket.min(LATENCY_BUCKETS - 1)) {
            QueueStats::add(counter, 1);
        }
        QueueStats::add(&self.sum_microseconds, latency_microseconds);
    }

    fn add_to(&self, snapshot: &mut HistogramSnapshot) {
        for (total, bucket) in snapshot.buckets.iter_mut().zip(&self.buckets) {
            *total += bucket.load(Ordering::Relaxed);
        }
        snapshot.sum_microseconds += self.sum_microseconds.load(Ordering::Relaxed);
    }
}

/// Summed histogram buckets (not cumulative).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub buckets: [u64; LATENCY_BUCKETS],
    pub sum_microseconds: u64,
}

impl HistogramSnapshot {
    /// Completions counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Upper bound of bucket `index` in microseconds.
    pub fn bucket_upper_bound_microseconds(index: usize) -> u64 {
        1u64 << index
    }

    fn merge(&mut self, other: &HistogramSnapshot) {
        for (total, bucket) in self.buckets.iter_mut().zip(&other.buckets) {
            *total += bucket;
        }
        self.sum_microseconds += other.sum_microseconds;
    }
}

/// Counters of one queue (or of one queue's use of one namespace). Only the owning
/// connection writes them.
#[derive(Default, Debug)]
pub struct QueueStats {
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub read_commands: AtomicU64,
    pub write_commands: AtomicU64,
    /// Flush, Write Zeroes, Dataset Management.
    pub other_commands: AtomicU64,
    /// Commands failed by the storage (SMART media and data integrity errors).
    pub media_errors: AtomicU64,
    /// Commands completed with any error status (invalid fields and opcodes,
    /// refusals and storage failures alike). Counted on queue shards only.
    pub error_completions: AtomicU64,
    /// I/O commands received and not yet completed, as of the queue's last transmit
    /// (a gauge: it is not kept for closed queues; admin queues leave it at 0).
    pub outstanding_commands: AtomicU64,
    /// Receipt to completion, reads and compares.
    pub read_latency: LatencyHistogram,
    /// Receipt to completion, writes.
    pub write_latency: LatencyHistogram,
    /// Time spent in each `IoPhase`, summed over the commands in the latency
    /// histograms (index: `IoPhase::ALL`).
    phase_microseconds: [AtomicU64; 4],
    /// Present on subsystem shards (see `QueueOnlyCounters`).
    queue_only: Option<Box<QueueOnlyCounters>>,
}

impl QueueStats {
    /// Adds to a counter. Relaxed: each shard has a single writer and readers only
    /// need an eventually consistent sum.
    pub fn add(counter: &AtomicU64, amount: u64) {
        counter.store(counter.load(Ordering::Relaxed).saturating_add(amount), Ordering::Relaxed);
    }

    /// Counts time spent in one phase by one command.
    pub fn record_phase(&self, phase: IoPhase, microseconds: u64) {
        if let Some(sum) = self.phase_microseconds.get(phase.index()) {
            Self::add(sum, microseconds);
        }
        if let Some(histogram) = self.queue_only.as_ref().and_then(|counters| counters.phase_latency.get(phase.index()))
        {
            histogram.record(microseconds);
        }
    }

    /// Counts an error completion by its class (subsystem shards).
    pub fn count_error(&self, status: nvme_spec::Status) {
        QueueStats::add(&self.error_completions, 1);
        let class = crate::error_class::ErrorClass::of(status);
        if let Some(counter) = self.queue_only.as_ref().and_then(|counters| counters.errors_by_class.get(class.index()))
        {
            QueueStats::add(counter, 1);
        }
    }

    /// Counts a reservation command that succeeded (subsystem shards).
    pub fn count_reservation_change(&self, change: ReservationChange) {
        if let Some(counter) =
            self.queue_only.as_ref().and_then(|counters| counters.reservation_changes.get(change as usize))
        {
            QueueStats::add(counter, 1);
        }
    }

    /// Counts the phases a command went through before its response was queued.
    pub fn record_split(&self, split: PhaseSplit) {
        self.record_phase(IoPhase::Receive, split.receive_microseconds);
        self.record_phase(IoPhase::Qos, split.qos_microseconds);
        self.record_phase(IoPhase::Storage, split.storage_microseconds);
    }
}

/// A snapshot of summed counters.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub read_commands: u64,
    pub write_commands: u64,
    pub other_commands: u64,
    pub media_errors: u64,
    pub error_completions: u64,
    /// Commands in flight on the live queues.
    pub outstanding_commands: u64,
    pub read_latency: HistogramSnapshot,
    pub write_latency: HistogramSnapshot,
    /// Microseconds spent in each `IoPhase` (index: `IoPhase::ALL`).
    pub phase_microseconds: [u64; 4],
    /// Per-phase histograms (subsystems only; empty elsewhere).
    pub phase_latency: [HistogramSnapshot; 4],
    /// Error completions by `ErrorClass` (subsystems and controllers only).
    pub errors_by_class: [u64; 10],
    /// Reservation changes by `ReservationChange` (subsystems and controllers only).
    pub reservation_changes: [u64; 3],
    /// Queues counting now (connected I/O and admin queues, or for a namespace, the
    /// queues that have used it).
    pub live_queues: u64,
}

impl StatsSnapshot {
    fn add(&mut self, stats: &QueueStats) {
        self.bytes_read += stats.bytes_read.load(Ordering::Relaxed);
        self.bytes_written += stats.bytes_written.load(Ordering::Relaxed);
        self.read_commands += stats.read_commands.load(Ordering::Relaxed);
        self.write_commands += stats.write_commands.load(Ordering::Relaxed);
        self.other_commands += stats.other_commands.load(Ordering::Relaxed);
        self.media_errors += stats.media_errors.load(Ordering::Relaxed);
        self.error_completions += stats.error_completions.load(Ordering::Relaxed);
        stats.read_latency.add_to(&mut self.read_latency);
        stats.write_latency.add_to(&mut self.write_latency);
        for (total, sum) in self.phase_microseconds.iter_mut().zip(&stats.phase_microseconds) {
            *total += sum.load(Ordering::Relaxed);
        }
        if let Some(counters) = &stats.queue_only {
            for (total, histogram) in self.phase_latency.iter_mut().zip(&counters.phase_latency) {
                histogram.add_to(total);
            }
            for (total, counter) in self.errors_by_class.iter_mut().zip(&counters.errors_by_class) {
                *total += counter.load(Ordering::Relaxed);
            }
            for (total, counter) in self.reservation_changes.iter_mut().zip(&counters.reservation_changes) {
                *total += counter.load(Ordering::Relaxed);
            }
        }
    }

    /// Microseconds spent in `phase`.
    pub fn phase(&self, phase: IoPhase) -> u64 {
        self.phase_microseconds.get(phase.index()).copied().unwrap_or(0)
    }

    /// The histogram of `phase` (subsystems only).
    pub fn phase_histogram(&self, phase: IoPhase) -> HistogramSnapshot {
        self.phase_latency.get(phase.index()).copied().unwrap_or_default()
    }

    /// Adds another snapshot (e.g. to total several namespaces).
    pub fn merge(&mut self, other: &StatsSnapshot) {
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.read_commands += other.read_commands;
        self.write_commands += other.write_commands;
        self.other_commands += other.other_commands;
        self.media_errors += other.media_errors;
        self.error_completions += other.error_completions;
        self.outstanding_commands += other.outstanding_commands;
        self.read_latency.merge(&other.read_latency);
        self.write_latency.merge(&other.write_latency);
        for (total, sum) in self.phase_microseconds.iter_mut().zip(&other.phase_microseconds) {
            *total += sum;
        }
        for (total, histogram) in self.phase_latency.iter_mut().zip(&other.phase_latency) {
            total.merge(histogram);
        }
        for (total, count) in self.errors_by_class.iter_mut().zip(&other.errors_by_class) {
            *total += count;
        }
        for (total, count) in self.reservation_changes.iter_mut().zip(&other.reservation_changes) {
            *total += count;
        }
        self.live_queues += other.live_queues;
    }
}

/// Counters of a subsystem.
pub type SubsystemStats = StatsRegistry;

/// Why a Connect was refused: the `reason` of the refusal counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectRefusalReason {
    /// Connect Invalid Host: not on the subsystem's allow-list.
    HostNotAllowed,
    /// Connect Controller Busy: a limit (max_connections_per_host, queues) reached.
    ControllerBusy,
    /// Connect Invalid Parameters: unknown subsystem or controller, a bad queue id,
    /// size or keep-alive timeout.
    InvalidParameters,
    /// Any other status.
    Other,
}

impl ConnectRefusalReason {
    /// Every reason, in label order.
    pub const ALL: [ConnectRefusalReason; 4] = [
        ConnectRefusalReason::HostNotAllowed,
        ConnectRefusalReason::ControllerBusy,
        ConnectRefusalReason::InvalidParameters,
        ConnectRefusalReason::Other,
    ];

    /// The reason a Connect status stands for.
    pub fn of(status: nvme_spec::Status) -> Self {
        let same = |other: nvme_spec::Status| status.code_type() == other.code_type() && status.code() == other.code();
        if same(nvme_spec::Status::CONNECT_INVALID_HOST) {
            ConnectRefusalReason::HostNotAllowed
        } else if same(nvme_spec::Status::CONNECT_CONTROLLER_BUSY) {
            ConnectRefusalReason::ControllerBusy
        } else if same(nvme_spec::Status::CONNECT_INVALID_PARAMETERS) {
            ConnectRefusalReason::InvalidParameters
        } else {
            ConnectRefusalReason::Other
        }
    }

    /// The metric label.
    pub const fn label(self) -> &'static str {
        match self {
            ConnectRefusalReason::HostNotAllowed => "host_not_allowed",
            ConnectRefusalReason::ControllerBusy => "controller_busy",
            ConnectRefusalReason::InvalidParameters => "invalid_parameters",
            ConnectRefusalReason::Other => "other",
        }
    }
}

/// Counters of the whole target: connections, refusals and the reasons connections
/// end. Written by every runtime thread (so `fetch_add`), once per connection or
/// refusal, never per I/O.
#[derive(Default, Debug)]
pub struct TargetCounters {
    /// TCP connections handed to the target.
    pub connections_accepted: AtomicU64,
    /// TCP connections open now (a gauge).
    pub connections_open: AtomicU64,
    /// Connect commands refused, by `ConnectRefusalReason` (index in `ALL`).
    connect_refusals: [AtomicU64; 4],
    /// DH-HMAC-CHAP transactions that succeeded (one per queue, and re-authentications).
    pub authentication_successes: AtomicU64,
    /// DH-HMAC-CHAP transactions that failed or timed out (the connection closes).
    pub authentication_failures: AtomicU64,
    /// Connections closed for not sending ICReq and Connect in time.
    pub setup_timeouts: AtomicU64,
    /// Controllers torn down because the host's keep-alive stopped.
    pub keep_alive_timeouts: AtomicU64,
    /// Connections ended with a C2HTermReq (a broken PDU stream).
    pub transport_errors: AtomicU64,
    /// Waits for a dead connection's storage requests that ran out of
    /// `command_quiesce_timeout_ms` (its drain, or a Connect held for it).
    pub quiesce_timeouts: AtomicU64,
    /// Preempt and Abort commands answered while the preempted hosts' writes were
    /// still at storage after `command_quiesce_timeout_ms` (their fence gave up).
    pub fence_timeouts: AtomicU64,
}

impl TargetCounters {
    /// Counts one event.
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a refused Connect.
    pub fn count_refusal(&self, reason: ConnectRefusalReason) {
        if let Some(counter) = self.refusal_counter(reason) {
            Self::count(counter);
        }
    }

    /// Refused Connects for `reason` so far.
    pub fn refusals(&self, reason: ConnectRefusalReason) -> u64 {
        self.refusal_counter(reason).map_or(0, |counter| counter.load(Ordering::Relaxed))
    }

    /// The counter of `reason` (`ALL` lists every reason, one per counter).
    fn refusal_counter(&self, reason: ConnectRefusalReason) -> Option<&AtomicU64> {
        let index = ConnectRefusalReason::ALL.iter().position(|known| *known == reason).unwrap_or(3);
        self.connect_refusals.get(index)
    }
}

/// Counters of a subsystem or a namespace: the shards of live queues plus the totals
/// of queues that have closed. The mutex is taken when a queue connects or closes and
/// when someone reads the totals (SMART log, metrics), never per I/O.
#[derive(Default, Debug)]
pub struct StatsRegistry {
    inner: Mutex<StatsRegistryInner>,
}

#[derive(Default, Debug)]
struct StatsRegistryInner {
    live: Vec<Arc<QueueStats>>,
    retired: StatsSnapshot,
}

impl StatsRegistry {
    /// Registers a new queue's shard.
    pub fn register(&self) -> Arc<QueueStats> {
        self.register_shard(QueueStats::default())
    }

    /// Registers a new queue's subsystem shard, which also keeps the counters of
    /// `QueueOnlyCounters`.
    pub fn register_queue_shard(&self) -> Arc<QueueStats> {
        self.register_shard(QueueStats { queue_only: Some(Box::default()), ..QueueStats::default() })
    }

    fn register_shard(&self, shard: QueueStats) -> Arc<QueueStats> {
        let shard = Arc::new(shard);
        let mut inner = self.inner.lock().unwrap_or_else(|poison| poison.into_inner());
        inner.live.push(shard.clone());
        shard
    }

    /// Registers a shard that another registry created: the queue counts into both
    /// (a controller's totals come from its queues' subsystem shards, at no cost per
    /// I/O).
    pub fn adopt(&self, shard: Arc<QueueStats>) {
        let mut inner = self.inner.lock().unwrap_or_else(|poison| poison.into_inner());
        inner.live.push(shard);
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
        total.live_queues = inner.live.len() as u64;
        for shard in &inner.live {
            total.add(shard);
            total.outstanding_commands += shard.outstanding_commands.load(Ordering::Relaxed);
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
        assert_eq!(snapshot.live_queues, 1);
    }

    #[test]
    fn an_adopted_shard_counts_in_both_registries_and_outstanding_is_live_only() {
        let subsystem = StatsRegistry::default();
        let controller = StatsRegistry::default();
        let shard = subsystem.register();
        controller.adopt(shard.clone());
        QueueStats::add(&shard.write_commands, 2);
        QueueStats::add(&shard.error_completions, 1);
        shard.outstanding_commands.store(5, Ordering::Relaxed);
        for registry in [&subsystem, &controller] {
            let snapshot = registry.snapshot();
            assert_eq!((snapshot.write_commands, snapshot.error_completions), (2, 1));
            assert_eq!(snapshot.outstanding_commands, 5);
        }
        controller.retire(&shard);
        let retired = controller.snapshot();
        assert_eq!((retired.write_commands, retired.outstanding_commands, retired.live_queues), (2, 0, 0));
    }

    #[test]
    fn connect_refusals_are_counted_by_the_status_reason() {
        use nvme_spec::Status;
        let counters = TargetCounters::default();
        for status in [
            Status::CONNECT_INVALID_HOST.with_do_not_retry(),
            Status::CONNECT_INVALID_HOST,
            Status::CONNECT_CONTROLLER_BUSY,
            Status::CONNECT_INVALID_PARAMETERS.with_do_not_retry(),
            Status::INVALID_FIELD,
        ] {
            counters.count_refusal(ConnectRefusalReason::of(status));
        }
        let counts: Vec<u64> = ConnectRefusalReason::ALL.iter().map(|reason| counters.refusals(*reason)).collect();
        assert_eq!(counts, vec![2, 1, 1, 1]);
    }

    #[test]
    fn phases_are_summed_everywhere_and_histogrammed_where_asked() {
        let subsystem = StatsRegistry::default();
        let namespace = StatsRegistry::default();
        let queue = subsystem.register_queue_shard();
        let used = namespace.register();
        for shard in [&queue, &used] {
            shard.record_split(PhaseSplit { receive_microseconds: 3, qos_microseconds: 0, storage_microseconds: 40 });
            shard.record_split(PhaseSplit { receive_microseconds: 5, qos_microseconds: 100, storage_microseconds: 60 });
            shard.record_phase(IoPhase::Send, 7);
        }
        subsystem.retire(&queue);
        let (subsystem, namespace) = (subsystem.snapshot(), namespace.snapshot());
        for snapshot in [&subsystem, &namespace] {
            let sums: Vec<u64> = IoPhase::ALL.iter().map(|phase| snapshot.phase(*phase)).collect();
            assert_eq!(sums, vec![8, 100, 100, 7]);
        }
        assert_eq!(subsystem.phase_histogram(IoPhase::Storage).count(), 2, "kept after the queue closed");
        assert_eq!(subsystem.phase_histogram(IoPhase::Storage).buckets[6], 2, "40 and 60 µs are under 64");
        assert_eq!(subsystem.phase_histogram(IoPhase::Send).count(), 1);
        assert_eq!(namespace.phase_histogram(IoPhase::Storage).count(), 0, "namespaces keep sums only");
    }

    #[test]
    fn errors_and_reservation_changes_are_counted_by_kind_on_queue_shards() {
        use crate::error_class::ErrorClass;
        use nvme_spec::Status;
        let subsystem = StatsRegistry::default();
        let namespace = StatsRegistry::default();
        let queue = subsystem.register_queue_shard();
        let used = namespace.register();
        for shard in [&queue, &used] {
            shard.count_error(Status::RESERVATION_CONFLICT);
            shard.count_error(Status::LBA_OUT_OF_RANGE.with_do_not_retry());
            shard.count_error(Status::RESERVATION_CONFLICT);
            shard.count_reservation_change(ReservationChange::Acquire);
        }
        let snapshot = subsystem.snapshot();
        assert_eq!(snapshot.error_completions, 3);
        let conflicts = ErrorClass::ALL.iter().position(|class| *class == ErrorClass::ReservationConflict).unwrap();
        assert_eq!(snapshot.errors_by_class[conflicts], 2);
        assert_eq!(snapshot.errors_by_class.iter().sum::<u64>(), 3, "every error in one class");
        assert_eq!(snapshot.reservation_changes, [0, 1, 0]);
        let namespace = namespace.snapshot();
        assert_eq!(namespace.errors_by_class.iter().sum::<u64>(), 0, "queue shards only");
        assert_eq!(namespace.reservation_changes, [0, 0, 0]);
    }

    #[test]
    fn latency_lands_in_power_of_two_buckets() {
        let stats = StatsRegistry::default();
        let shard = stats.register();
        for latency in [0, 1, 2, 3, 100, 1_000_000, u64::MAX / 2] {
            shard.read_latency.record(latency);
        }
        let histogram = stats.snapshot().read_latency;
        assert_eq!(histogram.count(), 7);
        assert_eq!(histogram.buckets[0], 1, "0 µs");
        assert_eq!(histogram.buckets[1], 1, "1 µs is under 2");
        assert_eq!(histogram.buckets[2], 2, "2 and 3 µs are under 4");
        assert_eq!(histogram.buckets[7], 1, "100 µs is under 128");
        assert_eq!(histogram.buckets[20], 1, "1 s is under 2^20 µs");
        assert_eq!(histogram.buckets[LATENCY_BUCKETS - 1], 1, "huge values land in the last bucket");
    }
}

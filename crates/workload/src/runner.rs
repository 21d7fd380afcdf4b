//! The run loop of one worker thread, independent of the I/O engine: closed loop
//! (keep `queue_depth` outstanding) or open loop (exponential arrivals from a seeded
//! RNG, latency measured from the *intended* issue time so that queueing behind a
//! saturated queue is not hidden: no coordinated omission; how far the worker fell
//! behind that schedule is recorded too, see [`crate::schedule`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{IoKind, IoPlan, JobSpec, LagStats, LatencyRecorder, OffsetGenerator, Schedule, SecondSample};

/// What a worker drives: a queue that takes tagged I/Os and hands completions back.
pub trait Engine {
    /// Most I/Os the engine can have outstanding.
    fn capacity(&self) -> usize;
    /// Issues `io` under `tag`; must not block for long.
    fn submit(&mut self, tag: u64, io: &IoPlan) -> Result<(), String>;
    /// Waits up to `timeout` until at least `min` completions are available and
    /// appends what is there to `out`.
    fn reap(&mut self, min: usize, timeout: Duration, out: &mut Vec<Completion>) -> Result<(), String>;
}

/// A finished I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The submission's tag.
    pub tag: u64,
    /// `None` on success, else what went wrong.
    pub error: Option<String>,
}

/// How I/Os are issued.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrivals {
    /// Keep the queue depth full.
    Closed,
    /// Poisson arrivals at this many I/Os per second (this thread's share).
    Open {
        /// I/Os per second.
        rate: f64,
    },
}

/// One worker's part of a run.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The job.
    pub job: JobSpec,
    /// This worker's index (0..threads).
    pub thread: u32,
    /// Bytes of the namespace the job may touch.
    pub region: u64,
    /// Closed or open loop.
    pub arrivals: Arrivals,
    /// When every worker starts (ramp begins).
    pub start: Instant,
}

impl WorkerConfig {
    /// Measurement starts here (after the ramp).
    pub fn measure_start(&self) -> Instant {
        self.start + self.job.ramp
    }

    /// Measurement ends here.
    pub fn measure_end(&self) -> Instant {
        self.measure_start() + self.job.duration
    }
}

/// State the workers of one run share: the stop flag and per-second buckets.
#[derive(Debug, Default)]
pub struct Shared {
    stop: Arc<AtomicBool>,
    seconds: Mutex<Vec<Bucket>>,
}

#[derive(Debug, Clone)]
struct Bucket {
    ios: u64,
    bytes: u64,
    errors: u64,
    latency: LatencyRecorder,
}

impl Bucket {
    fn new() -> Bucket {
        Bucket { ios: 0, bytes: 0, errors: 0, latency: LatencyRecorder::with_precision(2) }
    }
}

/// A handle that stops runs (Ctrl-C).
pub type RunControl = Arc<AtomicBool>;

impl Shared {
    /// Shared state whose runs stop when `stop` is set.
    pub fn new(stop: RunControl) -> Shared {
        Shared { stop, seconds: Mutex::new(Vec::new()) }
    }

    /// True once stopped.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn add(&self, second: usize, bucket: &Bucket) {
        let mut seconds = self.seconds.lock().unwrap_or_else(|poison| poison.into_inner());
        while seconds.len() <= second {
            seconds.push(Bucket::new());
        }
        let target = &mut seconds[second];
        target.ios += bucket.ios;
        target.bytes += bucket.bytes;
        target.errors += bucket.errors;
        target.latency.merge(&bucket.latency);
    }

    /// Second `second` (0-based) as seen so far.
    pub fn sample(&self, second: usize) -> Option<SecondSample> {
        let seconds = self.seconds.lock().unwrap_or_else(|poison| poison.into_inner());
        seconds.get(second).map(|bucket| to_sample(second, bucket))
    }

    /// Every second recorded, up to `limit` seconds (partial last seconds dropped).
    pub fn samples(&self, limit: usize) -> Vec<SecondSample> {
        let seconds = self.seconds.lock().unwrap_or_else(|poison| poison.into_inner());
        seconds.iter().take(limit).enumerate().map(|(index, bucket)| to_sample(index, bucket)).collect()
    }
}

fn to_sample(index: usize, bucket: &Bucket) -> SecondSample {
    let summary = bucket.latency.summary();
    SecondSample {
        second: index as u32 + 1,
        ios: bucket.ios,
        bytes: bucket.bytes,
        errors: bucket.errors,
        mean_ns: summary.mean_ns,
        p99_ns: if bucket.latency.count() == 0 { 0 } else { bucket.latency.percentile(99.0) },
    }
}

/// What one worker measured.
#[derive(Clone, Debug, Default)]
pub struct WorkerResult {
    /// Latencies of I/Os issued and completed inside the measurement window.
    pub latency: LatencyRecorder,
    /// Reads counted.
    pub reads: u64,
    /// Writes counted.
    pub writes: u64,
    /// Bytes counted.
    pub bytes: u64,
    /// Failed I/Os over the whole run (ramp included).
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
    /// Measured time actually covered (shorter when stopped early).
    pub measured: Duration,
    /// Stopped before the end (stop flag or an engine failure).
    pub interrupted: bool,
    /// Open loop: how far behind its arrival schedule the worker got (`None` for a
    /// closed loop).
    pub schedule: Option<LagStats>,
}

const REAP_SLICE: Duration = Duration::from_millis(50);
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Runs one worker until the measurement window ends or the run is stopped.
pub fn run_worker<E: Engine>(config: &WorkerConfig, engine: &mut E, shared: &Shared) -> WorkerResult {
    let job = &config.job;
    let depth = (job.queue_depth as usize).min(engine.capacity()).max(1);
    let mut generator = OffsetGenerator::new(job, config.thread, config.region);
    let measure_start = config.measure_start();
    let measure_end = config.measure_end();
    let mut slots: Vec<Option<(Instant, IoPlan)>> = vec![None; depth];
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut completions = Vec::with_capacity(depth);
    let mut result = WorkerResult::default();
    let mut bucket = Bucket::new();
    let mut bucket_second = 0usize;
    let mut schedule = match config.arrivals {
        Arrivals::Closed => None,
        Arrivals::Open { rate } => Some(Schedule::new(
            rate,
            job.seed.wrapping_mul(31).wrapping_add(u64::from(config.thread) + 7),
            config.start,
            measure_start,
            measure_end,
        )),
    };
    let mut failed = false;

    loop {
        let now = Instant::now();
        if now >= measure_end || shared.stopped() || failed {
            break;
        }
        // Issue.
        while let Some(&slot) = free.last() {
            let intended = match &schedule {
                None => now,
                Some(schedule) => match schedule.due(now) {
                    Some(due) => due,
                    None => break,
                },
            };
            let io = generator.next_io();
            match engine.submit(slot as u64, &io) {
                Ok(()) => {
                    free.pop();
                    slots[slot] = Some((intended, io));
                    if let Some(schedule) = schedule.as_mut() {
                        schedule.issued(now);
                    }
                }
                Err(error) => {
                    result.errors += 1;
                    result.first_error.get_or_insert(error);
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            break;
        }
        // Wait.
        let in_flight = depth - free.len();
        let queue_full = free.is_empty();
        let wait_until = match &schedule {
            Some(schedule) if !queue_full => schedule.next_arrival().min(measure_end),
            _ => (now + REAP_SLICE).min(measure_end),
        };
        let timeout = wait_until.saturating_duration_since(Instant::now());
        if in_flight == 0 {
            std::thread::sleep(timeout);
            continue;
        }
        completions.clear();
        if let Err(error) = engine.reap(1, timeout, &mut completions) {
            result.errors += 1;
            result.first_error.get_or_insert(error);
            break;
        }
        let done = Instant::now();
        if let (true, Some(schedule)) = (queue_full, schedule.as_mut()) {
            schedule.queue_full_until(done);
        }
        for completion in completions.drain(..) {
            let slot = completion.tag as usize;
            let Some((intended, io)) = slots.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            free.push(slot);
            if let Some(error) = completion.error {
                result.errors += 1;
                result.first_error.get_or_insert(error);
                if done >= measure_start {
                    bucket.errors += 1;
                }
                continue;
            }
            if intended < measure_start || done > measure_end {
                continue;
            }
            let latency = done.duration_since(intended).as_nanos() as u64;
            result.latency.record(latency);
            result.bytes += u64::from(io.length);
            match io.kind {
                IoKind::Read => result.reads += 1,
                IoKind::Write => result.writes += 1,
            }
            let second = done.duration_since(measure_start).as_secs() as usize;
            if second != bucket_second && (bucket.ios > 0 || bucket.errors > 0) {
                shared.add(bucket_second, &bucket);
                bucket.ios = 0;
                bucket.bytes = 0;
                bucket.errors = 0;
                bucket.latency.reset();
            }
            bucket_second = second;
            bucket.ios += 1;
            bucket.bytes += u64::from(io.length);
            bucket.latency.record(latency);
        }
    }
    if bucket.ios > 0 || bucket.errors > 0 {
        shared.add(bucket_second, &bucket);
    }
    let stopped_at = Instant::now().min(measure_end);
    result.measured = stopped_at.saturating_duration_since(measure_start);
    result.schedule = schedule.map(|schedule| schedule.finish(stopped_at));
    result.interrupted = shared.stopped() || failed || result.first_error.is_some() && result.measured < job.duration;
    // Drain what is still outstanding so the queue can be reused or dropped cleanly.
    let drain_deadline = Instant::now() + DRAIN_LIMIT;
    while free.len() < depth && Instant::now() < drain_deadline && !failed {
        completions.clear();
        if engine.reap(1, REAP_SLICE, &mut completions).is_err() {
            break;
        }
        for completion in completions.drain(..) {
            if let Some(slot) = slots.get_mut(completion.tag as usize).and_then(Option::take) {
                let _ = slot;
                free.push(completion.tag as usize);
                // A failure after the window still failed: counted, not measured.
                if let Some(error) = completion.error {
                    result.errors += 1;
                    result.first_error.get_or_insert(error);
                }
            }
        }
    }
    result
}

impl WorkerResult {
    /// Adds another worker's result.
    pub fn merge(&mut self, other: &WorkerResult) {
        self.latency.merge(&other.latency);
        self.reads += other.reads;
        self.writes += other.writes;
        self.bytes += other.bytes;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.measured = self.measured.max(other.measured);
        self.interrupted |= other.interrupted;
        self.schedule = match (self.schedule, other.schedule) {
            (Some(mut mine), Some(theirs)) => {
                mine.merge(&theirs);
                Some(mine)
            }
            (mine, theirs) => mine.or(theirs),
        };
    }

    /// I/Os counted.
    pub fn ios(&self) -> u64 {
        self.reads + self.writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pattern;
    use std::collections::VecDeque;

    /// Completes every I/O after a fixed service time, one at a time (a single
    /// server), so the queueing behaviour is predictable.
    struct FakeEngine {
        service: Duration,
        queue: VecDeque<u64>,
        busy_until: Option<Instant>,
        fail_after: Option<u64>,
        submitted: u64,
    }

    impl FakeEngine {
        fn new(service: Duration) -> Self {
            FakeEngine { service, queue: VecDeque::new(), busy_until: None, fail_after: None, submitted: 0 }
        }
    }

    impl Engine for FakeEngine {
        fn capacity(&self) -> usize {
            64
        }
        fn submit(&mut self, tag: u64, _io: &IoPlan) -> Result<(), String> {
            self.submitted += 1;
            if self.queue.is_empty() {
                self.busy_until = Some(Instant::now() + self.service);
            }
            self.queue.push_back(tag);
            Ok(())
        }
        fn reap(&mut self, min: usize, timeout: Duration, out: &mut Vec<Completion>) -> Result<(), String> {
            let deadline = Instant::now() + timeout;
            let mut got = 0;
            loop {
                while let (Some(&tag), Some(until)) = (self.queue.front(), self.busy_until) {
                    if Instant::now() < until {
                        break;
                    }
                    self.queue.pop_front();
                    self.busy_until = if self.queue.is_empty() { None } else { Some(until + self.service) };
                    let error = match self.fail_after {
                        Some(limit) if self.submitted > limit => Some("medium error".to_string()),
                        _ => None,
                    };
                    out.push(Completion { tag, error });
                    got += 1;
                }
                if got >= min || Instant::now() >= deadline {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn job(queue_depth: u32) -> JobSpec {
        let mut job = JobSpec::new("fake", Pattern::Random, 50, 4096, 1, queue_depth);
        job.duration = Duration::from_millis(400);
        job.ramp = Duration::from_millis(50);
        job
    }

    #[test]
    fn closed_loop_counts_ios_and_samples() {
        let shared = Shared::new(Arc::default());
        let config =
            WorkerConfig { job: job(4), thread: 0, region: 1 << 20, arrivals: Arrivals::Closed, start: Instant::now() };
        let mut engine = FakeEngine::new(Duration::from_micros(200));
        let result = run_worker(&config, &mut engine, &shared);
        assert!(result.ios() > 500, "{result:?}");
        assert!(result.reads > 0 && result.writes > 0);
        assert_eq!(result.errors, 0);
        assert!(!result.interrupted);
        // Queue depth 4 behind one server of 200 us: about 800 us each.
        let p50 = result.latency.percentile(50.0);
        assert!((600_000..3_000_000).contains(&p50), "{p50}");
        let samples = shared.samples(10);
        assert_eq!(samples.iter().map(|s| s.ios).sum::<u64>(), result.ios());
        assert_eq!(result.schedule, None, "a closed loop has no schedule");
    }

    #[test]
    fn open_loop_keeps_the_rate_and_counts_queueing_from_the_intended_time() {
        let shared = Shared::new(Arc::default());
        let config = WorkerConfig {
            job: job(64),
            thread: 0,
            region: 1 << 20,
            arrivals: Arrivals::Open { rate: 1000.0 },
            start: Instant::now(),
        };
        let mut engine = FakeEngine::new(Duration::from_micros(100));
        let light = run_worker(&config, &mut engine, &shared);
        let rate = light.ios() as f64 / 0.4;
        assert!((700.0..1300.0).contains(&rate), "{rate}");
        let schedule = light.schedule.expect("open loop records its schedule");
        assert!(schedule.issued >= light.ios(), "{schedule:?}");

        // Overload: 4x what the server can do; latency must grow (queueing shows).
        let config = WorkerConfig { arrivals: Arrivals::Open { rate: 20_000.0 }, start: Instant::now(), ..config };
        let mut engine = FakeEngine::new(Duration::from_micros(200));
        let heavy = run_worker(&config, &mut engine, &Shared::new(Arc::default()));
        assert!(heavy.latency.percentile(99.0) > 20 * light.latency.percentile(50.0), "{heavy:?}");
        // ... and the schedule says why: it fell behind a full queue, and the backlog
        // (15,000 arrivals a second more than the server completes) was still there.
        let schedule = heavy.schedule.expect("open loop records its schedule");
        assert!(schedule.late > 0 && schedule.late_queue_full > 0, "{schedule:?}");
        assert!(schedule.backlog_final > 0 && schedule.lag_final_ns > 0, "{schedule:?}");
    }

    #[test]
    fn errors_are_counted_and_stop_flag_interrupts() {
        let stop: RunControl = Arc::default();
        let shared = Shared::new(stop.clone());
        let mut long = job(2);
        long.duration = Duration::from_secs(30);
        let config =
            WorkerConfig { job: long, thread: 0, region: 1 << 20, arrivals: Arrivals::Closed, start: Instant::now() };
        let mut engine = FakeEngine::new(Duration::from_micros(100));
        engine.fail_after = Some(100);
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::Relaxed);
        });
        let started = Instant::now();
        let result = run_worker(&config, &mut engine, &shared);
        stopper.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(result.interrupted);
        assert!(result.errors > 0);
        assert_eq!(result.first_error.as_deref(), Some("medium error"));
    }
}

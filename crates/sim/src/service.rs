//! The simulated service executor: blocking work the target hands off its I/O path
//! (pool table saves for Flush and FUA) runs at a later simulated step, in hand-over
//! order, or never when the process crashes first.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use storage::service::{ServiceExecutor, ServiceJob};

use crate::rng::{Rng, SimClock};

/// Shortest and longest time a job waits before it runs (a table save on a disk).
const MIN_JOB_DELAY_NS: u64 = 20_000;
const MAX_JOB_DELAY_NS: u64 = 5_000_000;

struct Queue {
    jobs: VecDeque<(u64, ServiceJob)>,
    rng: Rng,
    /// Due time of the last job queued: jobs run in order, like one service thread.
    last_due_ns: u64,
}

/// Runs jobs when the world steps past their due time.
pub struct SimService {
    clock: SimClock,
    queue: Mutex<Queue>,
}

impl SimService {
    /// An idle executor drawing its delays from `rng`.
    pub fn new(clock: SimClock, rng: Rng) -> Self {
        SimService { clock, queue: Mutex::new(Queue { jobs: VecDeque::new(), rng, last_due_ns: 0 }) }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // One thread: poisoning only follows a panic the run already reports.
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When the oldest job is due.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.lock().jobs.front().map(|(due_ns, _)| *due_ns)
    }

    /// Runs every job due by now (jobs may queue more). True when any ran.
    pub fn run_due(&self) -> bool {
        let mut ran = false;
        loop {
            let now_ns = self.clock.elapsed_ns();
            let job = {
                let mut queue = self.lock();
                match queue.jobs.front() {
                    Some((due_ns, _)) if *due_ns <= now_ns => queue.jobs.pop_front().map(|(_, job)| job),
                    _ => None,
                }
            };
            let Some(job) = job else { return ran };
            job();
            ran = true;
        }
    }

    /// The process died: jobs not run yet never run. They are forgotten, not dropped:
    /// dropping one could run what it owns (a pool's clean-close save) as if the
    /// process had shut down cleanly.
    pub fn crash(&self) {
        let jobs = {
            let mut queue = self.lock();
            queue.last_due_ns = 0;
            std::mem::take(&mut queue.jobs)
        };
        std::mem::forget(jobs);
    }
}

impl ServiceExecutor for SimService {
    fn execute(&self, job: ServiceJob) {
        let now_ns = self.clock.elapsed_ns();
        let mut queue = self.lock();
        let due_ns = (now_ns + queue.rng.between(MIN_JOB_DELAY_NS, MAX_JOB_DELAY_NS)).max(queue.last_due_ns);
        queue.last_due_ns = due_ns;
        queue.jobs.push_back((due_ns, job));
    }
}

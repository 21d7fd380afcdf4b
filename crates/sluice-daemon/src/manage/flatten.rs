//! Copies of RBD clones, made off the management thread.
//!
//! `ns_add` with `clone_from` makes a format 2 clone and serves it at once: librbd
//! reads what the clone has not copied yet from the parent snapshot. The copy that
//! makes the clone independent (`rbd_flatten`) takes as long as copying the image, so
//! it runs here, on a thread of its own, one image after another, while management
//! calls go on. A copy that fails is tried again, later and later (every image of a
//! cluster that cannot be reached waits together: one failed connect, not one each).
//! One cut off by a stop is finished after the next start, which asks for a copy of
//! every RBD image the configuration serves (an image served here is asked through
//! its open handle, which costs no round trip; only a clone is opened again).
//!
//! Until its copy is done a clone keeps its parent snapshot: removing that snapshot
//! moves it to the source image's trash (clone format 2), and the source image cannot
//! be deleted yet. Deleting the clone itself cancels its copy. `backend_list` shows
//! each image's copy while it waits, runs or waits to be tried again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runtime::rbd_backend::{self, ClusterSpec, Flattened, RbdError};

/// The first wait before a failed copy is tried again; each further failure doubles
/// it, up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_secs(5);
/// The longest wait between tries of a failing copy.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);
/// How long a stop waits for the copy in progress to stop (it finishes the objects
/// in flight, then lets go of the image and its lock).
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Where one image's copy stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyState {
    /// Asked for; another image's copy runs first.
    Waiting,
    /// Running since then.
    Copying { since: Instant },
    /// The last try failed; the next is due at `next_try`.
    Retrying { error: String, attempts: u32, next_try: Instant },
}

impl CopyState {
    /// For `backend_list`: the state's name, and what else there is to say.
    pub fn view(&self, now: Instant) -> serde_json::Value {
        match self {
            CopyState::Waiting => serde_json::json!({ "state": "waiting" }),
            CopyState::Copying { since } => {
                serde_json::json!({ "state": "copying", "running_ms": now.saturating_duration_since(*since).as_millis() as u64 })
            }
            CopyState::Retrying { error, attempts, next_try } => serde_json::json!({
                "state": "retrying",
                "error": error,
                "attempts": attempts,
                "next_try_in_ms": next_try.saturating_duration_since(now).as_millis() as u64,
            }),
        }
    }

    /// Waiting or running (not a failed copy waiting for its next try).
    fn is_active(&self) -> bool {
        !matches!(self, CopyState::Retrying { .. })
    }
}

/// One image: its cluster and "POOL/IMAGE".
type ImageKey = (ClusterSpec, String);

/// One copy to make.
#[derive(Debug, Clone)]
struct Job {
    key: ImageKey,
    pool: String,
    image: String,
    /// The request it answers ([`Entry::generation`]): a job whose image was
    /// cancelled or asked for again since is dropped, never run twice.
    generation: u64,
    /// Tries that failed so far.
    attempts: u32,
}

/// One image's copy: its state, and which request it belongs to.
#[derive(Debug, Clone)]
struct Entry {
    generation: u64,
    state: CopyState,
}

/// What the handle and the thread share.
#[derive(Debug, Default)]
struct Shared {
    /// Copies by image, while they wait, run or wait to be tried again.
    states: Mutex<HashMap<ImageKey, Entry>>,
    /// The last request's generation.
    requests: std::sync::atomic::AtomicU64,
    /// The image being copied, and the flag that stops its copy.
    running: Mutex<Option<(ImageKey, Arc<AtomicBool>)>>,
    /// Set by the handle's drop: the thread stops.
    stopping: AtomicBool,
}

impl Shared {
    fn states(&self) -> std::sync::MutexGuard<'_, HashMap<ImageKey, Entry>> {
        self.states.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Option<(ImageKey, Arc<AtomicBool>)>> {
        self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The copying thread's handle. Dropping it stops the copy in progress (the next
/// start finishes it) and waits a little for the thread to let go of the image.
#[derive(Debug)]
pub struct Flattener {
    sender: Option<mpsc::Sender<Job>>,
    shared: Arc<Shared>,
    /// Disconnected when the thread ends.
    ended: mpsc::Receiver<()>,
}

impl Flattener {
    /// Starts the copying thread.
    pub fn start() -> std::io::Result<Flattener> {
        let (sender, receiver) = mpsc::channel();
        let (ended_sender, ended) = mpsc::channel::<()>();
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new().name("sluice-flatten".into()).spawn(move || {
            let _ended = ended_sender;
            run(&receiver, &thread_shared);
        })?;
        Ok(Flattener { sender: Some(sender), shared, ended })
    }

    /// Asks for `pool/image` to be made independent of its parent. A copy already
    /// waiting or running is not asked for twice; one waiting to be tried again is
    /// tried now.
    pub fn request(&self, cluster: ClusterSpec, pool: &str, image: &str) {
        let key = (cluster, format!("{pool}/{image}"));
        let generation = self.shared.requests.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut states = self.shared.states();
            if states.get(&key).is_some_and(|entry| entry.state.is_active()) {
                return;
            }
            states.insert(key.clone(), Entry { generation, state: CopyState::Waiting });
        }
        let job = Job { key, pool: pool.to_string(), image: image.to_string(), generation, attempts: 0 };
        if let Some(sender) = &self.sender {
            // The thread ends only when this handle is dropped.
            let _ = sender.send(job);
        }
    }

    /// Drops the copy of `pool/image` (its image is being deleted): one waiting is
    /// forgotten, one running is stopped, and this waits up to `timeout` for it to
    /// let go of the image. True when no copy of it runs any more.
    pub fn cancel(&self, cluster: &ClusterSpec, pool: &str, image: &str, timeout: Duration) -> bool {
        let key = (cluster.clone(), format!("{pool}/{image}"));
        self.shared.states().remove(&key);
        let deadline = Instant::now() + timeout;
        loop {
            match &*self.shared.running() {
                Some((running, cancel)) if *running == key => cancel.store(true, Ordering::Release),
                _ => return true,
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True when a copy waits or runs (a failed one waiting for its next try does
    /// not count).
    pub fn is_copying(&self) -> bool {
        self.shared.states().values().any(|entry| entry.state.is_active())
    }

    /// Where the copy of `pool/image` stands; None when none waits or runs.
    pub fn state_of(&self, cluster: &ClusterSpec, pool: &str, image: &str) -> Option<CopyState> {
        self.shared.states().get(&(cluster.clone(), format!("{pool}/{image}"))).map(|entry| entry.state.clone())
    }
}

impl Drop for Flattener {
    fn drop(&mut self) {
        {
            // Under the lock the thread takes to start a copy: either it sees
            // `stopping`, or its copy is listed here and stopped.
            let running = self.shared.running();
            self.shared.stopping.store(true, Ordering::Release);
            if let Some((_, cancel)) = &*running {
                cancel.store(true, Ordering::Release);
            }
        }
        self.sender = None;
        // Disconnected once the thread has let go of the image.
        let _ = self.ended.recv_timeout(STOP_WAIT);
    }
}

/// How long a copy that failed `attempts` times waits before its next try.
fn retry_wait(attempts: u32) -> Duration {
    FIRST_RETRY_WAIT.saturating_mul(1 << attempts.saturating_sub(1).min(10)).min(MAX_RETRY_WAIT)
}

/// The copying thread: new jobs in order, failed ones again when their wait is over.
fn run(receiver: &mpsc::Receiver<Job>, shared: &Shared) {
    let mut ready: VecDeque<Job> = VecDeque::new();
    let mut retries: Vec<(Instant, Job)> = Vec::new();
    loop {
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = retries.drain(..).partition(|(at, _)| *at <= now);
        retries = later;
        // A failed copy whose wait is over runs, unless it was cancelled or asked for
        // again meanwhile (that request's job is queued already).
        ready.extend(due.into_iter().map(|(_, job)| job).filter(|job| is_current(shared, job)));
        let Some(job) = ready.pop_front() else {
            let wait = retries.iter().map(|(at, _)| at.saturating_duration_since(now)).min();
            let received = match wait {
                Some(wait) => receiver.recv_timeout(wait),
                None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match received {
                Ok(job) => ready.push_back(job),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            continue;
        };
        if let Some((failed, error)) = copy(job, shared) {
            // Cluster errors hold for every image of the cluster: they all wait.
            let cluster_down = matches!(error, RbdError::Cluster { .. } | RbdError::LibraryMissing(_));
            let mut waiting = vec![failed];
            if cluster_down {
                let cluster = waiting[0].key.0.clone();
                let (same, others): (VecDeque<Job>, VecDeque<Job>) =
                    ready.drain(..).partition(|job| job.key.0 == cluster);
                ready = others;
                waiting.extend(same);
            }
            let error = error.to_string();
            for mut job in waiting {
                job.attempts += 1;
                let wait = retry_wait(job.attempts);
                let next_try = Instant::now() + wait;
                let retrying = CopyState::Retrying { error: error.clone(), attempts: job.attempts, next_try };
                // Only a job still current waits for a retry; a cancelled one is dropped.
                let mut states = shared.states();
                match states.get_mut(&job.key) {
                    Some(entry) if entry.generation == job.generation => entry.state = retrying,
                    _ => continue,
                }
                drop(states);
                tracing::warn!(image = %job.key.1, %error, attempts = job.attempts, retry_in_s = wait.as_secs(), "copying a clone failed; it is served meanwhile (reading from its parent) and tried again");
                retries.push((next_try, job));
            }
        }
        // Jobs asked for meanwhile.
        while let Ok(job) = receiver.try_recv() {
            ready.push_back(job);
        }
    }
}

/// True when `job` still answers its image's latest request (not cancelled, not
/// asked for again since).
fn is_current(shared: &Shared, job: &Job) -> bool {
    shared.states().get(&job.key).is_some_and(|entry| entry.generation == job.generation)
}

/// Runs one copy, unless it was cancelled while it waited or a stop began; returns
/// it with its error when it failed and is still wanted.
fn copy(job: Job, shared: &Shared) -> Option<(Job, RbdError)> {
    let started = Instant::now();
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let mut states = shared.states();
        // Cancelled while it waited, or asked for again (that request's job runs).
        let entry = states.get_mut(&job.key).filter(|entry| entry.generation == job.generation)?;
        // `stopping` is read under this lock: see `Flattener::drop`.
        let mut running = shared.running();
        if shared.stopping.load(Ordering::Acquire) {
            return None;
        }
        entry.state = CopyState::Copying { since: started };
        *running = Some((job.key.clone(), Arc::clone(&cancel)));
    }
    let outcome = rbd_backend::flatten_image(&job.key.0, &job.pool, &job.image, &cancel);
    *shared.running() = None;
    let image = &job.key.1;
    match outcome {
        Ok(done) => {
            match done {
                Flattened::Copied => {
                    tracing::info!(%image, seconds = started.elapsed().as_secs_f64(), "clone copied: it no longer depends on its parent snapshot")
                }
                Flattened::Cancelled => {
                    tracing::info!(%image, "copy of a clone stopped (its image is being deleted, or sluice is stopping)")
                }
                Flattened::Independent => {}
            }
            let mut states = shared.states();
            // Cancelled or asked for again while it ran: that is not this job's entry.
            if states.get(&job.key).is_some_and(|entry| entry.generation == job.generation) {
                states.remove(&job.key);
            }
            None
        }
        // The failure path checks again, under the lock, that it is still wanted.
        Err(error) => Some((job, error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> (Flattener, mpsc::Receiver<Job>) {
        let (sender, receiver) = mpsc::channel();
        let (_, ended) = mpsc::channel();
        (Flattener { sender: Some(sender), shared: Arc::default(), ended }, receiver)
    }

    #[test]
    fn a_copy_asked_for_twice_is_one_copy_and_its_state_is_shown() {
        let (flattener, receiver) = handle();
        let cluster = runtime::RbdOptions::new("", "").cluster;
        flattener.request(cluster.clone(), "rbd", "a");
        flattener.request(cluster.clone(), "rbd", "a");
        assert_eq!(receiver.try_iter().count(), 1, "one job for one image");
        assert_eq!(flattener.state_of(&cluster, "rbd", "a"), Some(CopyState::Waiting));
        assert_eq!(flattener.state_of(&cluster, "rbd", "b"), None);
        assert!(flattener.is_copying());
        assert_eq!(CopyState::Waiting.view(Instant::now())["state"], "waiting");
    }

    #[test]
    fn a_failed_copy_asked_for_again_is_tried_at_once_and_a_cancelled_one_is_forgotten() {
        let (flattener, receiver) = handle();
        let cluster = runtime::RbdOptions::new("", "").cluster;
        let key = (cluster.clone(), "rbd/a".to_string());
        let retrying = CopyState::Retrying { error: "down".into(), attempts: 1, next_try: Instant::now() };
        flattener.shared.states().insert(key.clone(), Entry { generation: 1, state: retrying });
        assert!(!flattener.is_copying(), "a copy waiting for its next try is not running");
        flattener.request(cluster.clone(), "rbd", "a");
        assert_eq!(receiver.try_iter().count(), 1);
        assert_eq!(flattener.state_of(&cluster, "rbd", "a"), Some(CopyState::Waiting));
        assert!(flattener.cancel(&cluster, "rbd", "a", Duration::ZERO));
        assert_eq!(flattener.state_of(&cluster, "rbd", "a"), None);
    }

    #[test]
    fn a_job_of_a_cancelled_or_repeated_request_never_runs() {
        let (flattener, receiver) = handle();
        let cluster = runtime::RbdOptions::new("", "").cluster;
        flattener.request(cluster.clone(), "rbd", "a");
        let first = receiver.try_recv().unwrap();
        assert!(flattener.cancel(&cluster, "rbd", "a", Duration::ZERO));
        assert!(!is_current(&flattener.shared, &first), "cancelled");
        assert!(copy(first.clone(), &flattener.shared).is_none(), "a cancelled job is not run");
        flattener.request(cluster.clone(), "rbd", "a");
        let second = receiver.try_recv().unwrap();
        assert!(!is_current(&flattener.shared, &first), "asked for again: only the new job is current");
        assert!(is_current(&flattener.shared, &second));
        // A stop begun: the current job does not start either.
        flattener.shared.stopping.store(true, Ordering::Release);
        assert!(copy(second, &flattener.shared).is_none());
        assert!(flattener.shared.running().is_none());
        assert_eq!(flattener.state_of(&cluster, "rbd", "a"), Some(CopyState::Waiting), "left as it was");
    }

    #[test]
    fn cancelling_the_running_copy_sets_its_flag() {
        let (flattener, _receiver) = handle();
        let cluster = runtime::RbdOptions::new("", "").cluster;
        let flag = Arc::new(AtomicBool::new(false));
        *flattener.shared.running() = Some(((cluster.clone(), "rbd/a".into()), Arc::clone(&flag)));
        assert!(!flattener.cancel(&cluster, "rbd", "a", Duration::from_millis(30)), "still running after the wait");
        assert!(flag.load(Ordering::Acquire));
        assert!(flattener.cancel(&cluster, "rbd", "b", Duration::ZERO), "another image's copy is left alone");
    }

    #[test]
    fn failed_copies_wait_longer_each_time_up_to_the_cap() {
        assert_eq!(retry_wait(1), Duration::from_secs(5));
        assert_eq!(retry_wait(2), Duration::from_secs(10));
        assert_eq!(retry_wait(6), Duration::from_secs(160));
        assert_eq!(retry_wait(7), Duration::from_secs(300));
        assert_eq!(retry_wait(u32::MAX), Duration::from_secs(300));
    }
}

//! Copies of RBD clones, made off the management thread.
//!
//! `ns_add` with `clone_from` makes a format 2 clone and serves it at once: librbd
//! reads what the clone has not copied yet from the parent snapshot. The copy that
//! makes the clone independent (`rbd_flatten`) takes as long as copying the image, so
//! it runs here, on a thread of its own, one image after another, while management
//! calls go on. A copy that fails is tried again, later and later; one cut off by a
//! stop is finished after the next start, which asks for a copy of every RBD image
//! the configuration serves (one that has no parent costs an open).
//!
//! Until its copy is done a clone keeps its parent snapshot: removing that snapshot
//! moves it to the source image's trash (clone format 2), and the source image cannot
//! be deleted yet. `backend_list` shows each image's copy while it waits or runs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runtime::rbd_backend::{self, ClusterSpec};

/// The first wait before a failed copy is tried again; each further failure doubles
/// it, up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_secs(5);
/// The longest wait between tries of a failing copy.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);

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
}

/// One copy to make: the image "POOL/IMAGE" in its cluster.
#[derive(Debug, Clone)]
struct Job {
    cluster: ClusterSpec,
    pool: String,
    image: String,
    /// Tries that failed so far.
    attempts: u32,
}

impl Job {
    fn key(&self) -> String {
        format!("{}/{}", self.pool, self.image)
    }
}

/// Copies by "POOL/IMAGE", while they wait or run.
pub type CopyStates = Arc<Mutex<BTreeMap<String, CopyState>>>;

/// The copying thread's handle. Dropping it lets the thread end after its current
/// copy, without waiting for it (the next start finishes an interrupted copy).
#[derive(Debug)]
pub struct Flattener {
    sender: mpsc::Sender<Job>,
    states: CopyStates,
}

impl Flattener {
    /// Starts the copying thread.
    pub fn start() -> std::io::Result<Flattener> {
        let (sender, receiver) = mpsc::channel();
        let states = CopyStates::default();
        let shared = Arc::clone(&states);
        std::thread::Builder::new().name("sluice-flatten".into()).spawn(move || run(&receiver, &shared))?;
        Ok(Flattener { sender, states })
    }

    /// Asks for `pool/image` to be made independent of its parent; a copy already
    /// asked for is not asked for twice.
    pub fn request(&self, cluster: ClusterSpec, pool: &str, image: &str) {
        let job = Job { cluster, pool: pool.to_string(), image: image.to_string(), attempts: 0 };
        {
            let mut states = lock(&self.states);
            if states.contains_key(&job.key()) {
                return;
            }
            states.insert(job.key(), CopyState::Waiting);
        }
        // The thread ends only when this handle is dropped.
        let _ = self.sender.send(job);
    }

    /// True when no copy waits or runs.
    pub fn is_idle(&self) -> bool {
        lock(&self.states).is_empty()
    }

    /// Where the copy of `pool/image` stands; None when none waits or runs.
    pub fn state_of(&self, pool: &str, image: &str) -> Option<CopyState> {
        lock(&self.states).get(&format!("{pool}/{image}")).cloned()
    }
}

fn lock(states: &CopyStates) -> std::sync::MutexGuard<'_, BTreeMap<String, CopyState>> {
    states.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How long a copy that failed `attempts` times waits before its next try.
fn retry_wait(attempts: u32) -> Duration {
    FIRST_RETRY_WAIT.saturating_mul(1 << attempts.saturating_sub(1).min(10)).min(MAX_RETRY_WAIT)
}

/// The copying thread: new jobs in order, failed ones again when their wait is over.
fn run(receiver: &mpsc::Receiver<Job>, states: &CopyStates) {
    let mut ready: VecDeque<Job> = VecDeque::new();
    let mut retries: Vec<(Instant, Job)> = Vec::new();
    loop {
        let now = Instant::now();
        // Failed copies whose wait is over go after the new ones already queued.
        let (due, later): (Vec<_>, Vec<_>) = retries.drain(..).partition(|(at, _)| *at <= now);
        retries = later;
        ready.extend(due.into_iter().map(|(_, job)| job));
        let Some(mut job) = ready.pop_front() else {
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
        let key = job.key();
        let started = Instant::now();
        lock(states).insert(key.clone(), CopyState::Copying { since: started });
        match rbd_backend::flatten_image(&job.cluster, &job.pool, &job.image) {
            Ok(copied) => {
                if copied {
                    tracing::info!(image = %key, seconds = started.elapsed().as_secs_f64(), "clone copied: it no longer depends on its parent snapshot");
                }
                lock(states).remove(&key);
            }
            Err(error) => {
                job.attempts += 1;
                let wait = retry_wait(job.attempts);
                let next_try = Instant::now() + wait;
                tracing::warn!(image = %key, %error, attempts = job.attempts, retry_in_s = wait.as_secs(), "copying a clone failed; it is served meanwhile (reading from its parent) and tried again");
                lock(states).insert(key, CopyState::Retrying { error: error.to_string(), attempts: job.attempts, next_try });
                retries.push((next_try, job));
            }
        }
        // Jobs asked for meanwhile.
        while let Ok(job) = receiver.try_recv() {
            ready.push_back(job);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_asked_for_twice_is_one_copy_and_its_state_is_shown() {
        let (sender, receiver) = mpsc::channel();
        let flattener = Flattener { sender, states: CopyStates::default() };
        let cluster = runtime::RbdOptions::new("", "").cluster;
        flattener.request(cluster.clone(), "rbd", "a");
        flattener.request(cluster, "rbd", "a");
        assert_eq!(receiver.try_iter().count(), 1, "one job for one image");
        assert_eq!(flattener.state_of("rbd", "a"), Some(CopyState::Waiting));
        assert_eq!(flattener.state_of("rbd", "b"), None);
        assert!(!flattener.is_idle());
        assert_eq!(CopyState::Waiting.view(Instant::now())["state"], "waiting");
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

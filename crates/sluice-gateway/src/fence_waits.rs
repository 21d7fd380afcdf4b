//! Acknowledging a reservation notice only once Preempt and Abort's fence drained,
//! without waiting on librados' thread.
//!
//! A gateway that installs a change preempting a host must not count as having the
//! change before that host's writes already at storage here have completed
//! (`nvme_target::write_fence`). librados delivers watch notices on the same
//! finisher thread that completes this client's I/O, RBD writes included: a notice
//! callback that waited there for the writes would wait for completions queued
//! behind itself, until its bound ran out; the gateway would then stay silent and be
//! fenced (blocklisted) by the one that made the change, every time a host that is
//! still writing is preempted (issue 49: the Acquire took a whole lease, and the
//! fenced gateway dropped every host). So the callback installs the state (from then
//! on the preempted hosts' new commands are refused) and hands the fence with the
//! notice's acknowledgement to this module's thread, which sends the acknowledgement
//! as soon as the fence drained, or withholds it when the bound passes first (a
//! gateway whose storage does not answer is rightly fenced).

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use nvme_target::write_fence::WriteFence;

/// Sends one notice's acknowledgement (`runtime::Acknowledgement::acknowledge`).
pub type Acknowledge = Box<dyn FnOnce() + Send>;

/// How often the thread looks whether the fences it holds drained: a write at
/// storage takes from tens of microseconds (RAM) to milliseconds (RBD), and the
/// notifier waits for the acknowledgement, so the poll adds at most this to a
/// Preempt and Abort's completion, and costs nothing while no fence is pending.
pub(crate) const FENCE_POLL: Duration = Duration::from_micros(200);

/// Most fences waited for at once: one per notice that preempted a host with writes
/// in flight here; notices of one namespace come one at a time (the notifier waits
/// for each), so this bounds the namespaces changed at the same moment. Past it a
/// notice is withheld at once (the notifier fences this gateway, which is safe).
pub const MAX_PENDING_FENCES: usize = 4096;

/// Test-only switch (`SLUICE_TEST_FENCE_WAIT_ON_WATCH_THREAD` in `sluice serve`'s
/// environment), honoured only by builds with debug assertions (the checked build the
/// tests run): the fence is waited for on the caller's thread, librados' watch
/// thread, as before issue 49's fix, so a test can show the whole gateway fenced
/// that way.
pub const FENCE_WAIT_ON_WATCH_THREAD_FOR_TESTS: &str = "SLUICE_TEST_FENCE_WAIT_ON_WATCH_THREAD";

fn fence_wait_on_watch_thread_for_tests() -> bool {
    let set = cfg!(debug_assertions) && std::env::var_os(FENCE_WAIT_ON_WATCH_THREAD_FOR_TESTS).is_some();
    if set {
        tracing::warn!("{FENCE_WAIT_ON_WATCH_THREAD_FOR_TESTS} is set (test builds only): reservation fences are waited for on librados' thread");
    }
    set
}

/// One notice waiting for its fence.
struct Pending {
    fence: WriteFence,
    acknowledge: Acknowledge,
    deadline: Instant,
    /// For the log line when the bound passes.
    object: String,
}

/// The sending side, cloned into every watch handler.
#[derive(Clone)]
pub struct FenceWaits {
    pending: Sender<Pending>,
    /// How long a fence may take before the notice is withheld.
    limit: Duration,
    /// [`FENCE_WAIT_ON_WATCH_THREAD_FOR_TESTS`].
    on_caller_thread_for_tests: bool,
}

impl FenceWaits {
    /// Starts the thread; it ends when every `FenceWaits` is gone and the fences it
    /// holds are settled.
    pub fn start(limit: Duration) -> Result<FenceWaits, String> {
        let (sender, receiver) = channel::<Pending>();
        std::thread::Builder::new()
            .name("sluice-fence".into())
            .spawn(move || run(&receiver))
            .map_err(|error| format!("cannot start the reservation fence thread: {error}"))?;
        Ok(FenceWaits { pending: sender, limit, on_caller_thread_for_tests: fence_wait_on_watch_thread_for_tests() })
    }

    /// Sends `acknowledgement` once `fence` drained: at once when it already has
    /// (no preempted host had writes here, the common case), otherwise from the
    /// thread, or never if `limit` passes first.
    pub fn acknowledge_when_drained(&self, fence: WriteFence, acknowledge: Acknowledge, object: &str) {
        if fence.is_drained() {
            acknowledge();
            return;
        }
        let mut pending =
            vec![Pending { fence, acknowledge, deadline: Instant::now() + self.limit, object: object.to_string() }];
        if self.on_caller_thread_for_tests {
            while !pending.is_empty() {
                std::thread::sleep(FENCE_POLL);
                settle(&mut pending, Instant::now());
            }
            return;
        }
        let Some(pending) = pending.pop() else { return };
        if self.pending.send(pending).is_err() {
            // The thread is gone (only when the process stops): withheld.
            tracing::warn!(object, "the reservation fence thread is gone: a notice is withheld");
        }
    }
}

fn run(receiver: &Receiver<Pending>) {
    let mut pending: Vec<Pending> = Vec::new();
    let mut open = true;
    while open || !pending.is_empty() {
        // Block while nothing is pending; poll while fences drain.
        let wait = if pending.is_empty() { Duration::from_secs(3600) } else { FENCE_POLL };
        match receiver.recv_timeout(wait) {
            Ok(first) => {
                admit(&mut pending, first);
                while let Ok(next) = receiver.try_recv() {
                    admit(&mut pending, next);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
        }
        settle(&mut pending, Instant::now());
    }
}

fn admit(pending: &mut Vec<Pending>, next: Pending) {
    if pending.len() >= MAX_PENDING_FENCES {
        tracing::warn!(object = %next.object, limit = MAX_PENDING_FENCES,
            "too many reservation fences pending: this notice is withheld, so the gateway that made the change fences this one");
        return;
    }
    pending.push(next);
}

/// Acknowledges every drained fence, withholds every one past its deadline.
fn settle(pending: &mut Vec<Pending>, now: Instant) {
    let mut index = 0;
    while index < pending.len() {
        let drained = pending[index].fence.is_drained();
        if !drained && now < pending[index].deadline {
            index += 1;
            continue;
        }
        let done = pending.swap_remove(index);
        if drained {
            (done.acknowledge)();
        } else {
            tracing::warn!(object = %done.object, writes = done.fence.writes_in_flight(),
                "a preempted host's writes are still at storage here after the fence bound: the reservation change \
                 is not acknowledged, so the gateway that made it fences this one (check this gateway's storage latency)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_target::write_fence::NamespaceWrites;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    const HOST: [u8; 16] = [0xA; 16];

    fn counter() -> (Arc<AtomicU32>, Acknowledge) {
        let count = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&count);
        (
            count,
            Box::new(move || {
                seen.fetch_add(1, Ordering::SeqCst);
            }),
        )
    }

    fn wait_for(count: &AtomicU32, expected: u32, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if count.load(Ordering::SeqCst) == expected {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        count.load(Ordering::SeqCst) == expected
    }

    #[test]
    fn a_drained_fence_is_acknowledged_at_once_and_a_busy_one_when_it_drains_not_before() {
        let waits = FenceWaits::start(Duration::from_secs(30)).unwrap();
        let writes = NamespaceWrites::default();
        let (count, acknowledge) = counter();
        waits.acknowledge_when_drained(writes.fence(&[HOST]), acknowledge, "idle");
        assert_eq!(count.load(Ordering::SeqCst), 1, "nothing in flight: acknowledged on the caller's thread");

        let queue = writes.register_for_test(HOST);
        let (count, acknowledge) = counter();
        waits.acknowledge_when_drained(writes.fence(&[HOST]), acknowledge, "busy");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(count.load(Ordering::SeqCst), 0, "a write is still at storage");
        queue.end_for_test();
        assert!(wait_for(&count, 1, Duration::from_secs(5)), "acknowledged once drained");
    }

    #[test]
    fn a_fence_past_its_bound_is_withheld() {
        let waits = FenceWaits::start(Duration::from_millis(30)).unwrap();
        let writes = NamespaceWrites::default();
        let _queue = writes.register_for_test(HOST);
        let (count, acknowledge) = counter();
        waits.acknowledge_when_drained(writes.fence(&[HOST]), acknowledge, "stuck");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(count.load(Ordering::SeqCst), 0, "never acknowledged: the notifier fences this gateway");
    }
}

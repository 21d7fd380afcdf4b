//! Work that may block, kept off the I/O threads.
//!
//! The [`crate::Backend`] contract says submitting never blocks, and the runtime runs
//! every connection of a thread on one loop: a `fsync` of a pool table, the zeroing of
//! a deleted namespace or a cluster open on that thread stalls all of them. Such work
//! is handed to a [`ServiceExecutor`] as a [`ServiceJob`]; its result comes back
//! through a [`Ticket`] that wakes the thread waiting for it.
//!
//! `sluice serve` uses [`process_service`]: one thread per process ("sluice-service")
//! that runs jobs in the order they were handed over. The simulator supplies an
//! executor of its own that runs jobs at simulated steps, so a crash can fall between
//! a job being asked for and being done.
//!
//! Threads that must never block say so with [`mark_io_thread`]; the places that do
//! block call [`debug_assert_may_block`], so a test run with debug assertions catches
//! any path that reaches blocking work from an I/O thread.

use std::cell::Cell;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;

/// One piece of blocking work.
pub type ServiceJob = Box<dyn FnOnce() + Send + 'static>;

/// Runs [`ServiceJob`]s somewhere other than the caller's I/O thread.
pub trait ServiceExecutor: Send + Sync + 'static {
    /// Hands over `job`, which is short (a table save, a namespace change); it runs
    /// later, in hand-over order. Never blocks.
    fn execute(&self, job: ServiceJob);

    /// Hands over a long job (zeroing a deleted namespace: device I/O over its whole
    /// size), which must not hold up the short ones that I/O waits for. The default
    /// queues it with them.
    fn execute_long(&self, job: ServiceJob) {
        self.execute(job);
    }
}

/// One service thread: a queue of jobs run one at a time.
struct Lane {
    sender: mpsc::Sender<ServiceJob>,
}

impl Lane {
    fn start(name: &str) -> Lane {
        let (sender, receiver) = mpsc::channel::<ServiceJob>();
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
            while let Ok(job) = receiver.recv() {
                // The pool's and the target's jobs finish their tickets even when they
                // panic; this keeps the thread alive for the next job.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
        });
        if let Err(error) = spawned {
            // The receiver went with the closure: every job now runs inline on the
            // thread that hands it over (see `run`), slower but never lost.
            eprintln!(
                "sluice: cannot start the {name} thread ({error}); blocking work runs on the threads that ask for it"
            );
        }
        Lane { sender }
    }

    fn run(&self, job: ServiceJob) {
        // An unbounded channel: sending never waits for the service thread.
        if let Err(mpsc::SendError(job)) = self.sender.send(job) {
            job();
        }
    }
}

/// The process's service threads, started on first use.
struct ServiceThreads {
    short: Lane,
    long: OnceLock<Lane>,
}

impl ServiceExecutor for ServiceThreads {
    fn execute(&self, job: ServiceJob) {
        self.short.run(job);
    }

    fn execute_long(&self, job: ServiceJob) {
        self.long.get_or_init(|| Lane::start("sluice-service-long")).run(job);
    }
}

/// The process-wide service: one thread ("sluice-service") for short jobs, run one at
/// a time, so two saves of one table never overlap, and one ("sluice-service-long")
/// for long ones. A job that panics is reported by the panic hook and the thread
/// carries on with the next.
pub fn process_service() -> Arc<dyn ServiceExecutor> {
    static SERVICE: OnceLock<Arc<ServiceThreads>> = OnceLock::new();
    let service = SERVICE
        .get_or_init(|| Arc::new(ServiceThreads { short: Lane::start("sluice-service"), long: OnceLock::new() }));
    Arc::clone(service) as Arc<dyn ServiceExecutor>
}

/// Runs each job at once on the caller: for tools and tests that have no I/O thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct InlineExecutor;

impl ServiceExecutor for InlineExecutor {
    fn execute(&self, job: ServiceJob) {
        job();
    }
}

thread_local! {
    static IS_IO_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as an I/O thread: from now on it must not block.
pub fn mark_io_thread() {
    IS_IO_THREAD.with(|flag| flag.set(true));
}

/// True on a thread marked with [`mark_io_thread`].
pub fn is_io_thread() -> bool {
    IS_IO_THREAD.with(Cell::get)
}

/// Called where work blocks (a file write and fsync, device I/O waited for, a cluster
/// open, a thread spawn): with debug assertions on, panics when the caller is an I/O
/// thread, naming `what`.
#[track_caller]
pub fn debug_assert_may_block(what: &str) {
    debug_assert!(!is_io_thread(), "{what} on an I/O thread: hand it to the service executor");
}

struct TicketState<T> {
    result: Option<T>,
    waker: Option<Waker>,
}

/// The result of one job, finished by the executor's thread and collected by the
/// thread that waits for it (which `finish` wakes).
pub struct Ticket<T> {
    state: Arc<Mutex<TicketState<T>>>,
}

impl<T> Clone for Ticket<T> {
    fn clone(&self) -> Self {
        Ticket { state: Arc::clone(&self.state) }
    }
}

impl<T> std::fmt::Debug for Ticket<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").field("finished", &self.lock().result.is_some()).finish()
    }
}

impl<T> Ticket<T> {
    /// A ticket that wakes `waker` (the waiting thread) when finished; with `None` the
    /// waiter polls.
    pub fn new(waker: Option<Waker>) -> Self {
        Ticket { state: Arc::new(Mutex::new(TicketState { result: None, waker })) }
    }

    fn lock(&self) -> MutexGuard<'_, TicketState<T>> {
        // Held only to move a value in or out: a poisoned lock still holds a whole one.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The job is done; wakes the waiter.
    pub fn finish(&self, result: T) {
        let waker = {
            let mut state = self.lock();
            state.result = Some(result);
            state.waker.clone()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The result once finished (taken: a second call returns `None`).
    pub fn take(&self) -> Option<T> {
        self.lock().result.take()
    }

    /// True once finished and not yet taken.
    pub fn is_finished(&self) -> bool {
        self.lock().result.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn the_process_service_runs_jobs_in_order_off_the_caller_thread() {
        let service = process_service();
        let caller = std::thread::current().id();
        let order = Arc::new(Mutex::new(Vec::new()));
        let tickets: Vec<Ticket<bool>> = (0..20)
            .map(|index| {
                let ticket = Ticket::new(None);
                let (done, order) = (ticket.clone(), Arc::clone(&order));
                service.execute(Box::new(move || {
                    order.lock().unwrap().push(index);
                    done.finish(std::thread::current().id() != caller);
                }));
                ticket
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        for ticket in &tickets {
            let off_caller = loop {
                if let Some(result) = ticket.take() {
                    break result;
                }
                assert!(Instant::now() < deadline, "service job not run within 10 s");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert!(off_caller);
        }
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn a_panicking_job_does_not_stop_the_service() {
        let service = process_service();
        service.execute(Box::new(|| panic!("planted")));
        let ran = Arc::new(AtomicUsize::new(0));
        let ticket = Ticket::new(None);
        let (done, counter) = (ticket.clone(), Arc::clone(&ran));
        service.execute(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            done.finish(());
        }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ticket.is_finished() {
            assert!(Instant::now() < deadline, "the job after a panic did not run");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_ticket_wakes_its_waiter_once_finished() {
        let counter = crate::conformance::WakeCounter::new();
        let ticket: Ticket<u32> = Ticket::new(Some(counter.waker()));
        assert_eq!(ticket.take(), None);
        ticket.finish(7);
        assert_eq!(counter.count(), 1);
        assert_eq!(ticket.take(), Some(7));
        assert_eq!(ticket.take(), None);
    }

    #[test]
    #[cfg(debug_assertions)]
    fn blocking_work_on_a_marked_io_thread_is_caught() {
        let outcome = std::thread::spawn(|| {
            debug_assert_may_block("before marking");
            mark_io_thread();
            debug_assert_may_block("a table save");
        })
        .join();
        let message = outcome.expect_err("must panic on the marked thread");
        let text = message.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("a table save on an I/O thread"), "{text}");
    }
}

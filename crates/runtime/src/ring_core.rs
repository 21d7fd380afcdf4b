//! What every ring of the runtime shares, whoever drives it: the io_uring, its
//! connections, the count of operations the kernel still holds, the wait that
//! spins or sleeps by [`PollMode`], and the dispatch of receive and send
//! completions. The target's threads (`event_loop.rs`, connections accepted from
//! listeners) and the host's caller-driven rings (`client_ring.rs`, connections
//! opened by the caller) are both a `RingCore` plus what only they need.
//! Per-connection work is in `connection.rs`.

use std::io;
use std::time::{Duration, Instant};

use io_uring::{squeue, types, IoUring};

use crate::connection::Connection;
use crate::receive_pool::ReceivePool;
use crate::slab::Slab;
use crate::spin_window::SpinWindow;
use crate::timers::{TimerEntry, TimerQueue, TIMER_ENTRIES_PER_CONNECTION_BEFORE_REBUILD};
use crate::user_data::{OpKind, UserData};
use crate::{CloseReason, ConnectionHandler, PollMode};

/// A connection that left the ring, kept for an owner that wants its handler
/// back (the host takes its commands back from it).
pub(crate) struct Released<H> {
    pub index: u32,
    pub generation: u32,
    pub handler: H,
    pub outcome: Outcome,
}

/// How a connection left the ring.
pub(crate) enum Outcome {
    /// Closed; `on_closed` has run with this reason.
    Closed(CloseReason),
    /// Detached on the owner's request: the socket is open and idle (no
    /// operation of the ring points at it any more).
    Detached(std::net::TcpStream),
}

pub(crate) struct RingCore<H: ConnectionHandler> {
    /// For log lines: the runtime thread, or `usize::MAX` for a client ring.
    pub(crate) thread: usize,
    /// Where received bytes land: a pool shared by the ring's connections, or a
    /// buffer per connection.
    pub(crate) receive: ReceiveBuffers,
    pub(crate) ring: IoUring,
    pub(crate) connections: Slab<Connection<H>>,
    /// Operations submitted whose final completion has not been seen. Nothing
    /// an operation points at is freed while this is non-zero for it.
    pub(crate) outstanding_ops: usize,
    /// Completions copied out of the ring, then dispatched. Reused.
    pub(crate) completions: Vec<(u64, i32, u32)>,
    /// Every live connection's deadline (see `timers.rs`).
    pub(crate) timers: TimerQueue,
    /// Timer entries taken from `timers` and being fired. Reused.
    pub(crate) due_timers: Vec<TimerEntry>,
    /// The earliest deadline of the handlers in `draining`.
    pub(crate) draining_deadline: Option<Instant>,
    /// How many connections reported `has_pending_work`.
    pub(crate) pending_work_connections: usize,
    /// How many connections reported `awaits_storage`: adaptive polling does not
    /// spin while this is non-zero.
    pub(crate) storage_waiting_connections: usize,
    /// Indices of connections that reported pending work (each at most once; a
    /// closed connection's index may linger until the next poll drops it).
    pub(crate) pending_list: Vec<u32>,
    /// The list `poll_pending_connections` walks while new entries go to
    /// `pending_list`; empty between polls, kept for its capacity.
    pub(crate) pending_scratch: Vec<u32>,
    /// When the last completion was dispatched (adaptive polling spins after it).
    pub(crate) last_completion_at: Instant,
    /// `Some` (client rings): the adaptive window follows the gaps between
    /// completions (see `spin_window.rs`); `None`: the configured window as is.
    pub(crate) spin_window: Option<SpinWindow>,
    /// A submission that could not be queued; the owner stops with it.
    pub(crate) fatal: Option<io::Error>,
    /// `Some` when handlers of closed (and detached) connections go back to the
    /// owner instead of being dropped.
    pub(crate) released: Option<Vec<Released<H>>>,
    /// Handlers of closed connections whose `drain` has not returned true yet.
    pub(crate) draining: Vec<H>,
    /// One of `draining` reported pending work: the loop must not block.
    pub(crate) draining_pending_work: bool,
}

/// Spare buffers kept per ring; beyond this, closed connections' buffers are freed.
pub(crate) const MAX_SPARE_BUFFERS: usize = 64;

/// How a ring's connections receive ([`RingCore::new`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReceiveSettings {
    /// The most one receive completion carries (the size of each buffer).
    pub buffer_bytes: usize,
    /// Buffers in the ring's shared pool; 0 for a buffer per connection.
    pub shared_buffers: u16,
}

/// Where a ring's received bytes land.
pub(crate) enum ReceiveBuffers {
    /// One buffer of `bytes` per connection and a single-shot receive into it: the
    /// fallback for kernels without provided-buffer rings, and a configured mode.
    PerConnection {
        bytes: usize,
        /// Buffers of closed connections, their pages released, for reuse (at most
        /// `MAX_SPARE_BUFFERS`).
        spares: Vec<crate::mapped_buffer::MappedBuffer>,
    },
    /// A multishot receive per connection drawing from the ring's shared pool.
    Shared(ReceivePool),
}

impl<H: ConnectionHandler> RingCore<H> {
    pub(crate) fn new(thread: usize, receive: ReceiveSettings, ring: IoUring) -> Self {
        let per_connection = || ReceiveBuffers::PerConnection { bytes: receive.buffer_bytes, spares: Vec::new() };
        let receive = if receive.shared_buffers == 0 {
            per_connection()
        } else {
            match ReceivePool::register(&ring, receive.shared_buffers, receive.buffer_bytes) {
                Ok(pool) => ReceiveBuffers::Shared(pool),
                Err(error) => {
                    tracing::info!(
                        thread,
                        %error,
                        "io_uring provided-buffer rings unavailable (Linux 5.19 or later has them); \
                         receiving into a buffer per connection"
                    );
                    per_connection()
                }
            }
        };
        RingCore {
            thread,
            receive,
            ring,
            connections: Slab::new(),
            outstanding_ops: 0,
            completions: Vec::with_capacity(1024),
            timers: TimerQueue::default(),
            due_timers: Vec::new(),
            draining_deadline: None,
            pending_work_connections: 0,
            storage_waiting_connections: 0,
            pending_list: Vec::new(),
            pending_scratch: Vec::new(),
            last_completion_at: Instant::now(),
            spin_window: None,
            fatal: None,
            released: None,
            draining: Vec::new(),
            draining_pending_work: false,
        }
    }

    /// Submits queued entries and, unless spinning, blocks until a completion
    /// or `wakeup`. [`PollMode::BusyPoll`] never blocks; neither does any mode
    /// while a connection reports pending work. `now` is the caller's clock
    /// reading (one per loop turn: reading the clock is not free). Returns true
    /// when it may have blocked, so `now` is stale.
    pub(crate) fn wait(&mut self, poll_mode: PollMode, wakeup: Option<Instant>, now: Instant) -> io::Result<bool> {
        let spinning = match poll_mode {
            PollMode::BusyPoll => true,
            PollMode::Sleep => false,
            PollMode::Adaptive { spin_us } => {
                let base = Duration::from_micros(u64::from(spin_us));
                let window = self.spin_window.as_ref().map_or(base, |window| window.window(base));
                self.storage_waiting_connections == 0 && now.saturating_duration_since(self.last_completion_at) < window
            }
        };
        let may_block = !spinning && self.pending_work_connections == 0 && !self.draining_pending_work;
        if !may_block {
            let must_enter = {
                let mut submission = self.ring.submission();
                submission.sync();
                !submission.is_empty() || submission.taskrun() || submission.cq_overflow()
            };
            if must_enter {
                // submit_and_wait adds GETEVENTS when the TASKRUN flag is up,
                // which is what runs deferred completions.
                check_enter(self.ring.submit_and_wait(0))?;
            }
            return Ok(false);
        }
        if !self.ring.completion().is_empty() {
            check_enter(self.ring.submit())?;
            return Ok(false);
        }
        match wakeup {
            None => check_enter(self.ring.submit_and_wait(1))?,
            Some(at) => {
                if at <= now {
                    check_enter(self.ring.submit_and_wait(0))?;
                    return Ok(false);
                }
                let delay = at - now;
                let timeout = types::Timespec::new().sec(delay.as_secs()).nsec(delay.subsec_nanos());
                let arguments = types::SubmitArgs::new().timespec(&timeout);
                check_enter(self.ring.submitter().submit_with_args(1, &arguments))?;
            }
        }
        Ok(true)
    }

    /// Queues an entry, submitting to make room if the submission queue is full.
    ///
    /// # Safety
    /// Every buffer `entry` points at must stay valid and unmoved until its
    /// final completion has been dispatched.
    pub(crate) unsafe fn push(&mut self, entry: &squeue::Entry) {
        loop {
            // SAFETY: forwarded from this function's contract.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                self.outstanding_ops += 1;
                return;
            }
            if let Err(error) = self.ring.submit() {
                match error.raw_os_error() {
                    // The completion queue is full: copy completions out (they
                    // are dispatched by the running dispatch loop) and retry.
                    Some(libc::EBUSY | libc::EAGAIN | libc::EINTR) => self.reap_completions(),
                    _ => {
                        // Cannot queue: remember the failure; the owner stops
                        // with it. The entry is dropped, so no buffer is touched.
                        self.fatal.get_or_insert(error);
                        return;
                    }
                }
            }
        }
    }

    /// Copies every completion out of the ring onto `completions`.
    pub(crate) fn reap_completions(&mut self) {
        let completions = &mut self.completions;
        completions.extend(self.ring.completion().map(|entry| (entry.user_data(), entry.result(), entry.flags())));
    }

    /// Submits an AsyncCancel for the operation(s) with this user_data.
    pub(crate) fn cancel(&mut self, target: UserData) {
        let entry = io_uring::opcode::AsyncCancel::new(target.encode())
            .build()
            .user_data(UserData::new(OpKind::Cancel, 0, 0).encode());
        // SAFETY: a cancel request points at no memory.
        unsafe { self.push(&entry) };
    }

    /// Dispatches a completion of a connection's operation (receive, send or
    /// cancel). Returns false for other kinds, which the owner handles.
    pub(crate) fn dispatch_connection_op(&mut self, data: UserData, result: i32, flags: u32, now: Instant) -> bool {
        match data.kind {
            OpKind::Recv => self.on_recv_completion(data.index, data.generation, result, flags, now),
            OpKind::Send => self.on_send_completion(data.index, data.generation, result, now),
            OpKind::Cancel => self.outstanding_ops -= 1,
            OpKind::Accept | OpKind::Wake | OpKind::StorageWake => return false,
        }
        true
    }

    /// Polls the connections whose storage woke the thread (`woken`, or all of them
    /// when `poll_everyone`: a ring the kernel completes does not say whose), those
    /// with pending work, and fires due timers.
    pub(crate) fn run_polls_and_timers(&mut self, poll_everyone: bool, woken: &[u32], now: Instant) {
        if poll_everyone {
            for index in 0..self.connections.index_bound() {
                self.poll_connection(index, true, now);
            }
        } else {
            for &index in woken {
                self.poll_connection(index, true, now);
            }
        }
        if self.pending_work_connections > 0 {
            self.poll_pending_connections(now);
        }
        if self.timers.earliest().is_some_and(|deadline| deadline <= now) {
            let mut due = std::mem::take(&mut self.due_timers);
            self.timers.take_due(now, &mut due);
            for &(at, index, generation) in &due {
                self.fire_timer_if_due(at, index, generation, now);
            }
            due.clear();
            self.due_timers = due;
        }
        if self.timers.len() > TIMER_ENTRIES_PER_CONNECTION_BEFORE_REBUILD * self.connections.len() + 64 {
            self.rebuild_timers();
        }
        if !self.draining.is_empty() {
            self.drive_draining(now);
        }
    }

    /// Every loop turn while closed connections drain (rare, and short: a drain
    /// waits for storage requests already in flight): asks each again, drops those
    /// done, and folds the others' pending work and deadlines into the loop's.
    pub(crate) fn drive_draining(&mut self, now: Instant) {
        self.draining.retain_mut(|handler| !handler.drain(now));
        self.draining_pending_work = self.draining.iter().any(ConnectionHandler::has_pending_work);
        self.draining_deadline = self.draining.iter().filter_map(ConnectionHandler::next_deadline).min();
    }

    /// The earliest time the owner's loop must wake up for a timer.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.earliest().into_iter().chain(self.draining_deadline).min()
    }

    /// The abnormal exit path: operations may still be in flight, so the
    /// buffers they point at are leaked rather than freed.
    pub(crate) fn abandon_connections(&mut self) {
        let connections = std::mem::replace(&mut self.connections, Slab::new());
        for connection in connections.into_values() {
            connection.abandon();
        }
    }
}

impl<H: ConnectionHandler> Drop for RingCore<H> {
    /// The shared receive pool is unregistered and freed while the ring is still
    /// open, and only when no operation may still draw from it; otherwise leaked.
    fn drop(&mut self) {
        let receive =
            std::mem::replace(&mut self.receive, ReceiveBuffers::PerConnection { bytes: 0, spares: Vec::new() });
        if let ReceiveBuffers::Shared(pool) = receive {
            if self.outstanding_ops == 0 {
                pool.release(&self.ring);
            } else {
                std::mem::forget(pool);
            }
        }
    }
}

/// Errors of io_uring_enter that only mean "look again".
pub(crate) fn check_enter(result: io::Result<usize>) -> io::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(error) => match error.raw_os_error() {
            // Timed out, interrupted, or completions must be reaped first.
            Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN) => Ok(()),
            _ => Err(error),
        },
    }
}

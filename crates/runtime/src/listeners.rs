//! Listeners added and removed while the runtime runs.
//!
//! The management thread never touches a runtime thread's ring: it binds sockets
//! itself (so "address in use" is its answer, synchronously), then leaves a
//! [`ListenerCommand`] in each thread's mailbox and writes the thread's wake
//! eventfd, the same one shutdown uses. A thread looks at its mailbox only when
//! that eventfd fires, so the I/O path takes no lock and allocates nothing for it.
//!
//! ```text
//!  management thread                      each runtime thread, at its next wake
//!  prepare_listener: probe, bind x N  ->  (nothing yet: the kernel queues SYNs)
//!  start_listener:   Start -> mailbox ->  arm a multishot accept
//!  remove_listener:  Stop  -> mailbox ->  cancel the accept, begin closing the
//!                    wait for N acks  <-  listener's connections; ack once the
//!                                         listening socket is closed
//! ```

use std::net::{SocketAddr, TcpListener};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::{sys, RuntimeError, Shared};

/// How long `remove_listener` waits for every thread to confirm. A thread
/// confirms at its next wake, normally within microseconds; only a thread stuck
/// in a handler for this long misses it.
const LISTENER_CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which listener a connection came through. Assigned when the listener is
/// bound and never reused while the runtime runs, so it stays valid across
/// other listeners coming and going. The listeners of
/// [`RuntimeConfig::listeners`](crate::RuntimeConfig::listeners) get 0, 1, ...
/// in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerId(u32);

impl ListenerId {
    /// The id as an index-like number (0 for the first configured listener).
    pub fn index(self) -> usize {
        self.0 as usize
    }

    pub(crate) fn new(value: u32) -> ListenerId {
        ListenerId(value)
    }

    /// The value packed into io_uring user_data for this listener's accept.
    pub(crate) fn user_data_index(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for ListenerId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "listener {}", self.0)
    }
}

/// What a runtime thread is asked to do at its next wake.
pub(crate) enum ListenerCommand {
    /// Accept on this thread's socket of a new listener.
    Start { id: ListenerId, local: SocketAddr, socket: TcpListener },
    /// Stop accepting on `id`, close its listening socket and begin closing the
    /// connections accepted through it; then send how many were closed.
    Stop { id: ListenerId, done: mpsc::Sender<usize> },
}

/// One thread's pending listener commands.
#[derive(Default)]
pub(crate) struct Mailbox {
    commands: Vec<ListenerCommand>,
    /// The thread has exited: commands are dropped instead of queued (their
    /// sockets close, their acknowledgement senders disconnect).
    closed: bool,
}

impl Mailbox {
    /// Takes every queued command, leaving the (capacity-keeping) Vec empty.
    pub(crate) fn take_into(&mut self, out: &mut Vec<ListenerCommand>) {
        out.append(&mut self.commands);
    }
}

/// Closes a thread's mailbox when the thread ends, however it ends (a
/// panicking handler included), so no caller waits for a thread that is gone.
pub(crate) struct CloseMailboxOnExit {
    pub(crate) shared: Arc<Shared>,
    pub(crate) thread: usize,
}

impl Drop for CloseMailboxOnExit {
    fn drop(&mut self) {
        let mut mailbox = lock(&self.shared.mailboxes[self.thread]);
        mailbox.closed = true;
        let dropped = std::mem::take(&mut mailbox.commands);
        drop(mailbox);
        drop(dropped);
    }
}

/// The listeners open now, in id order, and the next id to hand out.
pub(crate) struct Registry {
    pub(crate) open: Vec<(ListenerId, SocketAddr)>,
    pub(crate) next_id: u32,
}

/// A listening address bound on every runtime thread but not yet accepting
/// (the kernel already queues connections to it). Hand it to
/// [`ListenerControl::start_listener`]; dropping it closes the sockets instead.
pub struct PreparedListener {
    id: ListenerId,
    local: SocketAddr,
    /// One per runtime thread, in thread order.
    sockets: Vec<TcpListener>,
}

impl PreparedListener {
    /// The id connections through this listener will carry.
    pub fn id(&self) -> ListenerId {
        self.id
    }

    /// The address actually bound (port 0 resolved to the real port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl std::fmt::Debug for PreparedListener {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PreparedListener").field("id", &self.id).field("local", &self.local).finish()
    }
}

/// Adds and removes listening addresses while the runtime runs, from any
/// thread. `Clone + Send + Sync`; get one from
/// [`Runtime::listener_control`](crate::Runtime::listener_control).
#[derive(Clone)]
pub struct ListenerControl {
    pub(crate) shared: Arc<Shared>,
}

impl ListenerControl {
    /// The listeners open now (started and not removed), in id order, with the
    /// addresses actually bound.
    pub fn listeners(&self) -> Vec<(ListenerId, SocketAddr)> {
        lock(&self.shared.registry).open.clone()
    }

    /// Binds `address` on every runtime thread, exactly as
    /// [`Runtime::start`](crate::Runtime::start) does: a non-zero port that
    /// anything already listens on (another program, or one of this runtime's
    /// own listeners) is refused. Nothing accepts on it until
    /// [`ListenerControl::start_listener`]; the split lets a caller record the
    /// listener (in a config file, a discovery log) before the first connection
    /// can arrive, and give up cleanly by dropping it.
    pub fn prepare_listener(&self, address: SocketAddr) -> Result<PreparedListener, RuntimeError> {
        if self.shared.is_shutdown() {
            return Err(RuntimeError::NotRunning);
        }
        let bind_error = |address: SocketAddr| move |source| RuntimeError::Bind { address, source };
        // No retry: unlike a restart after a crash, nothing of ours can be
        // releasing this address right now, and the caller is waiting.
        sys::check_address_free(address, Duration::ZERO).map_err(bind_error(address))?;
        let first = sys::bind_listener(address).map_err(bind_error(address))?;
        let local = first.local_addr().map_err(bind_error(address))?;
        let mut sockets = Vec::with_capacity(self.shared.wake_fds.len());
        sockets.push(first);
        for _ in 1..self.shared.wake_fds.len() {
            sockets.push(sys::bind_listener(local).map_err(bind_error(local))?);
        }
        let mut registry = lock(&self.shared.registry);
        let id = ListenerId(registry.next_id);
        registry.next_id = registry.next_id.checked_add(1).ok_or(RuntimeError::ListenerIdsExhausted)?;
        Ok(PreparedListener { id, local, sockets })
    }

    /// Hands each runtime thread its socket of `prepared`; each starts accepting
    /// at its next wake (within microseconds; connections arriving before that
    /// wait in the kernel's queue). Returns the listener's id. If the runtime is
    /// shutting down the sockets are simply closed.
    pub fn start_listener(&self, prepared: PreparedListener) -> ListenerId {
        let PreparedListener { id, local, sockets } = prepared;
        // Queued before the listener becomes removable, so each thread's Start
        // comes before any Stop of it in that thread's mailbox.
        for (thread, socket) in sockets.into_iter().enumerate() {
            self.send(thread, ListenerCommand::Start { id, local, socket });
        }
        let mut registry = lock(&self.shared.registry);
        let position = registry.open.partition_point(|&(open, _)| open < id);
        registry.open.insert(position, (id, local));
        drop(registry);
        tracing::info!(%local, %id, "listener started");
        id
    }

    /// Binds and starts `address` in one step; returns the id and the address
    /// actually bound.
    pub fn add_listener(&self, address: SocketAddr) -> Result<(ListenerId, SocketAddr), RuntimeError> {
        let prepared = self.prepare_listener(address)?;
        let local = prepared.local_addr();
        Ok((self.start_listener(prepared), local))
    }

    /// Stops listener `id` on every thread: no new connection is accepted through
    /// it, its listening sockets are closed, and the connections accepted
    /// through it are closed through the normal close path
    /// ([`CloseReason::ListenerRemoved`](crate::CloseReason::ListenerRemoved)).
    /// Connections of other listeners carry on untouched.
    ///
    /// Returns once every thread has closed its socket (a new connection to the
    /// address is refused by then) and begun closing those connections (their
    /// sockets are shut down at once; `on_closed` follows as soon as their
    /// outstanding operations finish). Returns how many connections were closed.
    pub fn remove_listener(&self, id: ListenerId) -> Result<usize, RuntimeError> {
        if self.shared.is_shutdown() {
            return Err(RuntimeError::NotRunning);
        }
        let local = {
            let mut registry = lock(&self.shared.registry);
            let position =
                registry.open.iter().position(|&(open, _)| open == id).ok_or(RuntimeError::UnknownListener(id))?;
            registry.open.remove(position).1
        };
        let threads = self.shared.wake_fds.len();
        let (done, confirmations) = mpsc::channel();
        for thread in 0..threads {
            self.send(thread, ListenerCommand::Stop { id, done: done.clone() });
        }
        drop(done);
        let deadline = Instant::now() + LISTENER_CHANGE_TIMEOUT;
        let mut connections_closed = 0;
        for confirmed in 0..threads {
            let wait = deadline.saturating_duration_since(Instant::now());
            match confirmations.recv_timeout(wait) {
                Ok(closed) => connections_closed += closed,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    tracing::warn!(%local, %id, pending_threads = threads - confirmed,
                        "runtime threads did not confirm a listener removal in time");
                    return Err(RuntimeError::ListenerChangeTimedOut {
                        pending_threads: threads - confirmed,
                        waited_ms: LISTENER_CHANGE_TIMEOUT.as_millis() as u64,
                    });
                }
                // A thread exited (shutdown, or a failure that takes all down).
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(RuntimeError::NotRunning),
            }
        }
        tracing::info!(%local, %id, connections_closed, "listener removed");
        Ok(connections_closed)
    }

    fn send(&self, thread: usize, command: ListenerCommand) {
        let mut mailbox = lock(&self.shared.mailboxes[thread]);
        if mailbox.closed {
            return; // dropping the command closes its socket or disconnects its ack
        }
        mailbox.commands.push(command);
        drop(mailbox);
        self.shared.wake_fds[thread].signal();
    }
}

impl std::fmt::Debug for ListenerControl {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ListenerControl").field("listeners", &self.listeners()).finish()
    }
}

/// Locks, ignoring poisoning: every critical section here leaves the data
/// consistent at each step (a push, a remove, a take).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

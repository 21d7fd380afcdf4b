//! One runtime thread: its ring, listeners, wake eventfd, and the loop that
//! waits for completions, dispatches them, runs timers and polls, applies
//! listener changes from its mailbox, and drains everything on shutdown.
//! Per-connection work lives in `connection.rs`.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types, IoUring};

use crate::listeners::{self, CloseMailboxOnExit, ListenerCommand};
use crate::ring_core::{ReceiveSettings, RingCore};
use crate::storage_wake::{StorageWake, MAX_CONNECTIONS_PER_THREAD};
use crate::user_data::{OpKind, UserData};
use crate::{sys, CloseReason, ListenerId, PollMode, RuntimeError, Service, ShutdownHandle};

/// How long accept stays paused after EMFILE/ENFILE/ENOBUFS/ENOMEM, so a full
/// descriptor table does not turn the loop into a spin on failing accepts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long shutdown waits for cancelled operations before giving up and
/// leaking their buffers (cancellation normally takes microseconds).
const SHUTDOWN_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a shutting-down thread looks at closed connections still draining.
const SHUTDOWN_DRAINING_POLL: Duration = Duration::from_millis(5);

/// The storage eventfd that connections' wakers ring (`OpKind::StorageWake` index).
const STORAGE_WAKE_WAKERS: usize = 0;
/// The storage eventfd that rings the kernel completes ring.
const STORAGE_WAKE_KERNEL: usize = 1;

/// What a thread needs from `RuntimeConfig`.
pub struct ThreadSettings {
    pub thread: usize,
    pub pin_core: Option<usize>,
    pub poll_mode: PollMode,
    pub recv_buffer_bytes: usize,
    pub shared_receive_buffers: u16,
    pub ring_entries: u32,
    pub tcp_nodelay: bool,
}

/// One listening socket owned by one thread.
pub struct Listener {
    /// Also the index in its accept's user_data.
    id: ListenerId,
    local: SocketAddr,
    /// None once closed during shutdown.
    socket: Option<TcpListener>,
    accept_armed: bool,
    /// Set after a resource-exhaustion error: re-arm accept at this time.
    rearm_at: Option<Instant>,
    /// Set while the listener is being removed: the accept is cancelled, and
    /// when its final completion arrives the socket is closed, the listener
    /// dropped and the remover told how many connections were closed.
    removal: Option<(Sender<usize>, usize)>,
}

impl Listener {
    pub fn new(id: ListenerId, local: SocketAddr, socket: TcpListener) -> Listener {
        Listener { id, local, socket: Some(socket), accept_armed: false, rearm_at: None, removal: None }
    }
}

/// The per-thread state. Connection handling is in `connection.rs`.
pub struct EventLoop<S: Service> {
    pub(crate) settings: ThreadSettings,
    /// The ring and the connections; per-connection work is in `connection.rs`.
    pub(crate) core: RingCore<S::Handler>,
    service: Arc<S>,
    shutdown: ShutdownHandle,
    listeners: Vec<Listener>,
    /// The eventfd read lands here; boxed so its address is stable.
    wake_buffer: Box<u64>,
    wake_armed: bool,
    /// The wake eventfd fired: look at the mailbox after this round of
    /// completions.
    mailbox_due: bool,
    /// Storage completing on other threads (RBD) rings this through each connection's
    /// own waker; rings the kernel completes (files) ring its second eventfd.
    storage_wake: Arc<StorageWake>,
    /// The storage eventfd reads land here (wakers', the kernel's); boxed so their
    /// addresses are stable.
    storage_wake_buffers: Box<[u64; 2]>,
    storage_wake_armed: [bool; 2],
    /// Slots whose waker fired, to poll this iteration. Reused.
    storage_woken: Vec<u32>,
    /// The kernel's storage eventfd fired: poll every connection this iteration.
    storage_due_everyone: bool,
    /// Commands taken from the mailbox, applied, then cleared. Reused.
    listener_commands: Vec<ListenerCommand>,
    shutting_down_since: Option<Instant>,
}

pub fn run_thread<S: Service>(
    settings: ThreadSettings,
    listeners: Vec<Listener>,
    service: Arc<S>,
    shutdown: ShutdownHandle,
    ready: Sender<Result<(), RuntimeError>>,
) -> Result<(), RuntimeError> {
    // From here this thread serves connections: blocking work reached from it is a bug
    // that debug builds catch (storage::service).
    storage::service::mark_io_thread();
    if let Some(core) = settings.pin_core {
        if let Err(error) = sys::pin_current_thread(core) {
            tracing::warn!(thread = settings.thread, core, %error, "could not pin runtime thread; continuing unpinned");
        }
    }
    let ring_and_wake = build_ring(settings.ring_entries).and_then(|ring| Ok((ring, StorageWake::new()?)));
    let (ring, storage_wake) = match ring_and_wake {
        Ok(built) => built,
        Err(error) => {
            // start() returns this error; nothing more to report from here.
            let _ = ready.send(Err(RuntimeError::RingSetup(error)));
            return Ok(());
        }
    };
    let receive =
        ReceiveSettings { buffer_bytes: settings.recv_buffer_bytes, shared_buffers: settings.shared_receive_buffers };
    let core = RingCore::new(settings.thread, receive, ring);
    let mut event_loop = EventLoop {
        settings,
        core,
        service,
        shutdown,
        listeners,
        wake_buffer: Box::new(0),
        wake_armed: false,
        mailbox_due: false,
        storage_wake,
        storage_wake_buffers: Box::new([0; 2]),
        storage_wake_armed: [false; 2],
        storage_woken: Vec::new(),
        storage_due_everyone: false,
        listener_commands: Vec::new(),
        shutting_down_since: None,
    };
    let _ = ready.send(Ok(()));
    tracing::debug!(thread = event_loop.settings.thread, "runtime thread started");
    // A thread that dies (fatal ring error or a panicking handler) takes the
    // whole runtime down, so `join` reports it instead of the target running
    // on with a share of its connections silently gone.
    let stop_all_on_failure = StopAllOnFailure(event_loop.shutdown.clone());
    // However the loop ends, later listener commands are dropped rather than
    // left for a thread that is gone.
    let _close_mailbox =
        CloseMailboxOnExit { shared: Arc::clone(&event_loop.shutdown.shared), thread: event_loop.settings.thread };
    let result = event_loop.run();
    if let Err(error) = &result {
        tracing::error!(thread = event_loop.settings.thread, %error, "runtime thread failed; shutting the runtime down");
        event_loop.shutdown.shutdown();
    }
    drop(stop_all_on_failure);
    result
}

/// Requests shutdown of every thread if dropped during a panic.
struct StopAllOnFailure(ShutdownHandle);

impl Drop for StopAllOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.shutdown();
        }
    }
}

/// SINGLE_ISSUER + DEFER_TASKRUN: completions are processed only when this
/// thread enters the kernel, instead of interrupting it (measured in
/// docs/runtime.md). TASKRUN_FLAG lets the busy-poll loop see when deferred
/// completions wait without a syscall. Older kernels reject these flags; fall
/// back to a plain ring then.
pub(crate) fn build_ring(entries: u32) -> io::Result<IoUring> {
    let mut builder = IoUring::builder();
    builder
        .setup_cqsize(entries.saturating_mul(2))
        .setup_submit_all()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag();
    match builder.build(entries) {
        Ok(ring) => Ok(ring),
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            tracing::info!("io_uring DEFER_TASKRUN unsupported; using a plain ring");
            IoUring::builder().setup_cqsize(entries.saturating_mul(2)).build(entries)
        }
        Err(error) => Err(error),
    }
}

impl<S: Service> EventLoop<S> {
    fn run(&mut self) -> Result<(), RuntimeError> {
        crate::storage_wake::set_current_wake_fd(Some(self.storage_wake.kernel_raw_fd()));
        self.arm_wake();
        self.arm_storage_wake(STORAGE_WAKE_WAKERS);
        self.arm_storage_wake(STORAGE_WAKE_KERNEL);
        for position in 0..self.listeners.len() {
            self.arm_accept(position);
        }
        loop {
            if let Some(error) = self.core.fatal.take() {
                return Err(RuntimeError::Submit(error));
            }
            if let Some(since) = self.shutting_down_since {
                // Closed connections still draining get the same grace as the rest.
                if self.core.connections.is_empty() && self.core.outstanding_ops == 0 && self.core.draining.is_empty() {
                    tracing::debug!(thread = self.settings.thread, "runtime thread stopped");
                    return Ok(());
                }
                if since.elapsed() > SHUTDOWN_DRAIN_TIMEOUT {
                    tracing::error!(
                        thread = self.settings.thread,
                        outstanding = self.core.outstanding_ops,
                        "operations still outstanding after shutdown; leaking their buffers"
                    );
                    return Ok(()); // Drop leaks what the kernel may still touch.
                }
            }
            self.wait()?;
            let now = Instant::now();
            self.dispatch_completions(now);
            if self.shutting_down_since.is_none() && self.shutdown.is_shutdown() {
                self.begin_shutdown(now);
            }
            if std::mem::take(&mut self.mailbox_due) && self.shutting_down_since.is_none() {
                self.apply_listener_commands();
            }
            self.run_polls_and_timers(now);
        }
    }

    fn wait(&mut self) -> Result<(), RuntimeError> {
        let wakeup = self.next_wakeup();
        self.core.wait(self.settings.poll_mode, wakeup, Instant::now()).map(|_| ()).map_err(RuntimeError::Submit)
    }

    /// The earliest instant the loop must wake up by itself.
    fn next_wakeup(&self) -> Option<Instant> {
        let listeners = self.listeners.iter().filter_map(|listener| listener.rearm_at);
        let drain = self.shutting_down_since.map(|since| since + SHUTDOWN_DRAIN_TIMEOUT);
        // Shutting down, the storage wake is no longer armed: connections still
        // draining are looked at every few milliseconds instead.
        let draining = (self.shutting_down_since.is_some() && !self.core.draining.is_empty())
            .then(|| Instant::now() + SHUTDOWN_DRAINING_POLL);
        listeners.chain(drain).chain(draining).chain(self.core.next_deadline()).min()
    }

    fn dispatch_completions(&mut self, now: Instant) {
        self.core.reap_completions();
        if !self.core.completions.is_empty() {
            self.core.last_completion_at = now;
        }
        // Indexing rather than iterating: handlers may submit, and a full
        // submission queue reaps more completions onto the end of this Vec.
        let mut next = 0;
        while next < self.core.completions.len() {
            let (user_data, result, flags) = self.core.completions[next];
            next += 1;
            let Some(data) = UserData::decode(user_data) else {
                tracing::error!(user_data, "completion with unknown user_data");
                continue;
            };
            match data.kind {
                OpKind::Recv | OpKind::Send | OpKind::Cancel => {
                    self.core.dispatch_connection_op(data, result, flags, now);
                }
                OpKind::Accept => self.on_accept_completion(ListenerId::new(data.index), result, flags, now),
                OpKind::Wake => {
                    self.core.outstanding_ops -= 1;
                    self.wake_armed = false;
                    if self.shutting_down_since.is_none() {
                        self.mailbox_due = true;
                        self.arm_wake();
                    }
                }
                OpKind::StorageWake => {
                    self.core.outstanding_ops -= 1;
                    let which = data.index as usize;
                    if which == STORAGE_WAKE_WAKERS {
                        // Taken before the connections are polled (run_polls_and_timers),
                        // so a completion after that poll wakes the thread again.
                        self.storage_wake.take();
                        let bound = self.core.connections.index_bound();
                        self.storage_wake.take_ready(bound, &mut self.storage_woken);
                    } else {
                        self.storage_due_everyone = true;
                    }
                    if let Some(armed) = self.storage_wake_armed.get_mut(which) {
                        *armed = false;
                    }
                    if self.shutting_down_since.is_none() {
                        self.arm_storage_wake(which);
                    }
                }
            }
        }
        self.core.completions.clear();
    }

    fn arm_wake(&mut self) {
        let fd = self.shutdown.shared.wake_fds[self.settings.thread].raw();
        let buffer: *mut u64 = &mut *self.wake_buffer;
        let entry = opcode::Read::new(types::Fd(fd), buffer.cast(), 8)
            .build()
            .user_data(UserData::new(OpKind::Wake, 0, 0).encode());
        // SAFETY: `wake_buffer` is boxed and lives as long as the loop; Drop
        // leaks it if the read is still outstanding.
        unsafe { self.core.push(&entry) };
        self.wake_armed = true;
    }

    /// Arms the read of storage eventfd `which` (`STORAGE_WAKE_WAKERS` or `_KERNEL`).
    fn arm_storage_wake(&mut self, which: usize) {
        let fd =
            if which == STORAGE_WAKE_WAKERS { self.storage_wake.raw_fd() } else { self.storage_wake.kernel_raw_fd() };
        let buffer: *mut u64 = &mut self.storage_wake_buffers[which.min(1)];
        let entry = opcode::Read::new(types::Fd(fd), buffer.cast(), 8)
            .build()
            .user_data(UserData::new(OpKind::StorageWake, 0, which as u32).encode());
        // SAFETY: `storage_wake_buffers` is boxed and lives as long as the loop; Drop
        // leaks it if a read is still outstanding. The eventfds live in
        // `storage_wake`, which the loop holds as long as it runs.
        unsafe { self.core.push(&entry) };
        self.storage_wake_armed[which.min(1)] = true;
    }

    /// Arms the multishot accept of the listener at `position` in `listeners`.
    fn arm_accept(&mut self, position: usize) {
        let listener = &mut self.listeners[position];
        let Some(socket) = listener.socket.as_ref() else { return };
        listener.accept_armed = true;
        listener.rearm_at = None;
        let entry = opcode::AcceptMulti::new(types::Fd(socket.as_raw_fd()))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(UserData::new(OpKind::Accept, 0, listener.id.user_data_index()).encode());
        // SAFETY: multishot accept points at no memory (no peer-address buffer).
        unsafe { self.core.push(&entry) };
    }

    fn on_accept_completion(&mut self, id: ListenerId, result: i32, flags: u32, now: Instant) {
        let more = cqueue::more(flags);
        if !more {
            self.core.outstanding_ops -= 1;
        }
        let Some(position) = self.listener_position(id) else {
            // Unreachable: a listener is dropped only after its final
            // completion. Still, never leak a descriptor.
            tracing::error!(thread = self.settings.thread, %id, "accept completion for an unknown listener");
            if result >= 0 {
                // SAFETY: a non-negative accept result is a new descriptor that
                // nothing else owns; dropping the TcpStream closes it.
                drop(unsafe { TcpStream::from_raw_fd(result) });
            }
            return;
        };
        if !more {
            self.listeners[position].accept_armed = false;
        }
        if result >= 0 {
            // SAFETY: a non-negative accept result is a new descriptor that
            // nothing else owns; the TcpStream closes it.
            let stream = unsafe { TcpStream::from_raw_fd(result) };
            self.on_new_connection(position, stream, now);
        } else {
            let errno = -result;
            match errno {
                libc::ECANCELED => {}
                libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => {
                    tracing::warn!(
                        thread = self.settings.thread,
                        address = %self.listeners[position].local,
                        error = %io::Error::from_raw_os_error(errno),
                        "accept failed for lack of resources; pausing accepts"
                    );
                    // Stop the multishot if it is still running, then re-arm later.
                    if more {
                        self.core.cancel(UserData::new(OpKind::Accept, 0, id.user_data_index()));
                    }
                    if self.listeners[position].removal.is_none() {
                        self.listeners[position].rearm_at = Some(now + ACCEPT_BACKOFF);
                    }
                }
                _ => tracing::debug!(
                    thread = self.settings.thread,
                    error = %io::Error::from_raw_os_error(errno),
                    "accept failed"
                ),
            }
        }
        if more {
            return;
        }
        let listener = &self.listeners[position];
        if self.shutting_down_since.is_some() || listener.removal.is_some() {
            self.release_listener(position);
        } else if listener.rearm_at.is_none() {
            self.arm_accept(position);
        }
    }

    fn listener_position(&self, id: ListenerId) -> Option<usize> {
        self.listeners.iter().position(|listener| listener.id == id)
    }

    /// The listener at `position` has no accept outstanding any more: close its
    /// socket, and if it is being removed, drop it and confirm the removal.
    fn release_listener(&mut self, position: usize) {
        if self.listeners[position].removal.is_none() {
            self.listeners[position].socket = None; // closes the listening socket
            return;
        }
        let listener = self.listeners.remove(position);
        let Listener { socket, removal, .. } = listener;
        drop(socket); // closed before the remover hears of it
        if let Some((done, connections_closed)) = removal {
            // The remover may have given up waiting; nothing else to do then.
            let _ = done.send(connections_closed);
        }
    }

    fn on_new_connection(&mut self, position: usize, stream: TcpStream, now: Instant) {
        if self.shutting_down_since.is_some() || self.listeners[position].removal.is_some() {
            return; // dropping the stream closes it
        }
        if self.settings.tcp_nodelay {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "TCP_NODELAY failed");
            }
        }
        let (local, peer) = match (stream.local_addr(), stream.peer_addr()) {
            (Ok(local), Ok(peer)) => (local, peer),
            (Err(error), _) | (_, Err(error)) => {
                // The peer is already gone (ENOTCONN): nothing to serve.
                tracing::debug!(%error, "accepted connection vanished before setup");
                return;
            }
        };
        if self.core.connections.len() >= MAX_CONNECTIONS_PER_THREAD {
            tracing::warn!(thread = self.settings.thread, %peer,
                "refusing a connection: this runtime thread already serves {MAX_CONNECTIONS_PER_THREAD} \
                 (MAX_CONNECTIONS_PER_THREAD); spread hosts over more gateways or runtime threads");
            return;
        }
        let listener = self.listeners[position].id;
        let waker = self.storage_wake.connection_waker(self.core.connections.next_index());
        let accepted = self.service.accept(self.settings.thread, listener, local, peer, &waker, now);
        let Some(handler) = accepted else {
            tracing::debug!(%peer, "service refused connection");
            return;
        };
        tracing::debug!(thread = self.settings.thread, %local, %peer, "connection accepted");
        if let Err(error) = self.core.add_connection(stream, handler, Some(listener), now) {
            tracing::warn!(thread = self.settings.thread, %peer, %error,
                "cannot map a receive buffer for a new connection (address space or vm.max_map_count); closed it");
        }
    }

    /// Applies the listener changes waiting in this thread's mailbox. Runs only
    /// after the wake eventfd fired, never on the I/O path.
    fn apply_listener_commands(&mut self) {
        let mut commands = std::mem::take(&mut self.listener_commands);
        listeners::lock(&self.shutdown.shared.mailboxes[self.settings.thread]).take_into(&mut commands);
        for command in commands.drain(..) {
            match command {
                ListenerCommand::Start { id, local, socket } => {
                    tracing::debug!(thread = self.settings.thread, %id, %local, "accepting on a new listener");
                    self.listeners.push(Listener::new(id, local, socket));
                    self.arm_accept(self.listeners.len() - 1);
                }
                ListenerCommand::Stop { id, done } => self.stop_listener(id, done),
            }
        }
        self.listener_commands = commands;
    }

    /// Stops accepting on `id`, begins closing the connections accepted through
    /// it, and confirms through `done` once its socket is closed.
    fn stop_listener(&mut self, id: ListenerId, done: mpsc::Sender<usize>) {
        let mut connections_closed = 0;
        for index in 0..self.core.connections.index_bound() {
            if self.core.connection_listener(index) == Some(id) {
                self.core.close_connection_at(index, CloseReason::ListenerRemoved);
                connections_closed += 1;
            }
        }
        tracing::debug!(thread = self.settings.thread, %id, connections_closed, "stopping a listener");
        let Some(position) = self.listener_position(id) else {
            // Never started here (its socket was dropped with a closed mailbox).
            let _ = done.send(connections_closed);
            return;
        };
        let listener = &mut self.listeners[position];
        listener.rearm_at = None;
        listener.removal = Some((done, connections_closed));
        if listener.accept_armed {
            // The socket closes when the accept's final completion arrives.
            self.core.cancel(UserData::new(OpKind::Accept, 0, id.user_data_index()));
        } else {
            self.release_listener(position);
        }
    }

    fn begin_shutdown(&mut self, now: Instant) {
        tracing::debug!(thread = self.settings.thread, connections = self.core.connections.len(), "shutting down");
        self.shutting_down_since = Some(now);
        // Backwards: releasing a listener that is being removed drops it.
        for position in (0..self.listeners.len()).rev() {
            let listener = &mut self.listeners[position];
            listener.rearm_at = None;
            if listener.accept_armed {
                let id = listener.id;
                self.core.cancel(UserData::new(OpKind::Accept, 0, id.user_data_index()));
            } else {
                self.release_listener(position);
            }
        }
        if self.wake_armed {
            self.core.cancel(UserData::new(OpKind::Wake, 0, 0));
        }
        for which in [STORAGE_WAKE_WAKERS, STORAGE_WAKE_KERNEL] {
            if self.storage_wake_armed[which] {
                self.core.cancel(UserData::new(OpKind::StorageWake, 0, which as u32));
            }
        }
        for index in 0..self.core.connections.index_bound() {
            self.core.close_connection_at(index, crate::CloseReason::Shutdown);
        }
    }

    fn run_polls_and_timers(&mut self, now: Instant) {
        if self.shutting_down_since.is_none() {
            for position in 0..self.listeners.len() {
                let listener = &self.listeners[position];
                if listener.rearm_at.is_some_and(|at| at <= now) && !listener.accept_armed {
                    self.arm_accept(position);
                }
            }
        }
        // Storage woke the thread: the woken connections (or, after a kernel-completed
        // ring's wake, every connection) may have completions to reap.
        let everyone = std::mem::take(&mut self.storage_due_everyone);
        let woken = std::mem::take(&mut self.storage_woken);
        self.core.run_polls_and_timers(everyone, &woken, now);
        self.storage_woken = woken;
        self.storage_woken.clear();
    }
}

impl<S: Service> Drop for EventLoop<S> {
    /// Normally every operation has completed by now. If not (a panicking
    /// handler, a stuck drain), the kernel may still write into receive buffers
    /// or read send batches, so those are leaked instead of freed; sockets are
    /// still shut down and closed so peers are not left hanging.
    fn drop(&mut self) {
        if self.core.outstanding_ops > 0 {
            self.core.abandon_connections();
            std::mem::forget(std::mem::replace(&mut self.wake_buffer, Box::new(0)));
            std::mem::forget(std::mem::replace(&mut self.storage_wake_buffers, Box::new([0; 2])));
            // The eventfd too: an outstanding read may still name it.
            std::mem::forget(Arc::clone(&self.storage_wake));
        }
    }
}

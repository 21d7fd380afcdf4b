//! The thin thread-per-core I/O runtime Sluice runs on.
//!
//! One OS thread per configured core, each with its own io_uring, its own
//! SO_REUSEPORT listening socket for every listening address, and its own
//! connections. The kernel spreads incoming connections across the threads and
//! a connection never moves, so protocol handlers are single-threaded and need
//! not be `Send`. The runtime knows nothing about NVMe: it accepts TCP
//! connections, receives bytes into a per-connection buffer (or a pool the
//! connections share), sends batches with one vectored `sendmsg` at a time per
//! connection, runs per-connection timers, and calls a [`ConnectionHandler`]. Listening addresses can be added and
//! removed while it runs ([`ListenerControl`]).
//!
//! Why a hand-written loop on `io-uring` rather than an existing runtime, and
//! the measurements behind that choice: see `docs/runtime.md`.
//!
//! This is one of the two crates in the project allowed `unsafe` (the other is
//! `nvme-host-ffi`, the C host library's boundary): every unsafe block carries a
//! `// SAFETY:` comment and every unsafe fn a `# Safety` section.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

mod client_ring;
mod connection;
mod error;
mod event_loop;
pub mod file_backend;
pub mod huge_pages;
mod listeners;
mod mapped_buffer;
pub mod rbd_backend;
mod receive_pool;
mod ring_core;
mod send;
mod slab;
mod spin_window;
mod storage_wake;
mod sys;
mod timers;
pub mod tls;
mod user_data;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

pub use client_ring::{ClientRing, ClientRingConfig, ConnectionToken};
pub use error::RuntimeError;
pub use file_backend::{FileBackend, FileError, FileOptions};
pub use huge_pages::HugePageChunkMemory;
pub use listeners::{ListenerControl, ListenerId, PreparedListener};
pub use rbd_backend::{
    reopen_images, Acknowledgement, ClusterSpec, Locker, NotifyReplies, RadosErrno, RadosObject, RbdBackend, RbdError,
    RbdOptions, RbdStatus, ReplaceError, Watch, WatchEvent, WatchHandler,
};
pub use receive_pool::MAX_SHARED_RECEIVE_BUFFERS;
pub use send::SendParts;
pub use tls::{TlsBatch, TlsConnection, TlsListener, TlsPolicy};

/// Something whose bytes can be sent with one vectored send.
///
/// The runtime owns the value while the send is in flight, so the memory stays
/// valid; it is handed back through [`ConnectionHandler::on_sent`]. The runtime
/// moves the batch into its final, heap-allocated place *before* calling
/// [`SendSource::parts`] and does not move it again until the send has
/// completed, so parts may point into the batch itself (an inline header
/// array, say) as well as into buffers it owns or backend memory it holds lent.
pub trait SendSource {
    /// Appends the batch's memory, in order, to `out` (which arrives empty).
    /// Empty slices are allowed and skipped.
    fn parts<'a>(&'a self, out: &mut SendParts<'a>);
    /// The number of bytes [`SendSource::parts`] appends.
    fn total_len(&self) -> usize;
}

/// One TCP connection's protocol logic, owned by one thread (need not be Send).
///
/// After every `on_receive`, `on_timer`, `on_sent` and `poll` the runtime asks
/// for the next batch with `take_send` (when no send is in flight) and then
/// checks `wants_close`, `next_deadline` and `has_pending_work`.
pub trait ConnectionHandler {
    type Batch: SendSource;
    /// Bytes arrived (any chunking). Called with the runtime's receive buffer.
    /// Not called any more once [`ConnectionHandler::wants_close`] has returned
    /// true: bytes arriving after that are discarded.
    fn on_receive(&mut self, data: &[u8], now: Instant);
    /// The runtime asks for the next batch to send when no send is in flight on
    /// this connection. Called after every on_receive/on_timer/on_sent/poll.
    /// A batch with `total_len() == 0` is handed straight back through `on_sent`.
    fn take_send(&mut self) -> Option<Self::Batch>;
    /// Every byte of `batch` was written to the socket (the runtime resubmits
    /// partial sends itself), or, behind [`TlsConnection`], encrypted into the
    /// session (the ciphertext goes out after); buffers come back for reuse either
    /// way. A batch that could not be sent completely because the connection closed
    /// is dropped instead.
    fn on_sent(&mut self, batch: Self::Batch, now: Instant);
    /// The deadline passed (or any time the runtime wants; handlers re-check).
    fn on_timer(&mut self, now: Instant);
    /// The earliest time `on_timer` should run. Re-read after every call into
    /// the handler.
    fn next_deadline(&self) -> Option<Instant>;
    /// Work that is not driven by the socket (e.g. asynchronous storage
    /// completions): when true the runtime calls poll() every loop iteration,
    /// and in [`PollMode::Sleep`] it does not block while any handler on the
    /// thread has pending work.
    fn has_pending_work(&self) -> bool {
        false
    }
    /// Requests are in flight at storage that wakes the thread itself (through the
    /// storage waker handed to [`Service::accept`]). While any connection of a thread
    /// says so, [`PollMode::Adaptive`] sleeps instead of spinning: what comes next is
    /// most likely that storage completion, milliseconds away on a disk or a cluster,
    /// and a spinning core there takes CPU from the storage's own threads.
    fn awaits_storage(&self) -> bool {
        false
    }
    /// `has_pending_work` and `awaits_storage` together: the runtime asks both after
    /// every call into the handler. A handler that answers both from one pass over
    /// its state overrides this.
    fn activity(&self) -> HandlerActivity {
        HandlerActivity { pending_work: self.has_pending_work(), awaits_storage: self.awaits_storage() }
    }
    /// Progress work not driven by the socket. Called every iteration while
    /// `has_pending_work` is true, and once after each wake of the storage waker
    /// handed to [`Service::accept`] (whatever `has_pending_work` says), so work
    /// that wakes the thread itself need not report pending work meanwhile.
    fn poll(&mut self, _now: Instant) {}
    /// True while the peer is in the middle of a message the handler needs whole
    /// before it can answer (a PDU, a TLS record). The runtime then asks the kernel to
    /// acknowledge received data at once (TCP_QUICKACK) instead of on the delayed-ACK
    /// timer: a peer that sends without TCP_NODELAY (SPDK's initiator over TLS) holds
    /// its next segment smaller than the MSS under Nagle's algorithm until that ACK,
    /// which on loopback (64 KiB MSS, so every 16 KiB TLS record is such a segment)
    /// stalled each large write by 40 ms.
    fn awaits_rest_of_message(&self) -> bool {
        false
    }
    /// True when the handler wants the connection closed: the runtime sends
    /// what take_send still returns, then shuts down and closes the socket,
    /// then calls on_closed.
    fn wants_close(&self) -> bool;
    /// The connection is gone (peer closed, error, or after wants_close).
    /// Called exactly once; the handler is dropped after it. By then the socket
    /// is closed and the runtime holds no batch of this connection.
    fn on_closed(&mut self, reason: CloseReason);
    /// After `on_closed`: true when nothing the connection started is still going
    /// (e.g. storage requests in flight, which must end before the handler's memory
    /// and queues go). Until then the runtime keeps the handler, calls this again on
    /// every loop turn (after storage wakes, at `next_deadline`, and without blocking
    /// while `has_pending_work`), and drops it once it returns true. Must not block.
    fn drain(&mut self, _now: Instant) -> bool {
        true
    }
    /// The connection's TLS handshake finished with this PSK identity (the
    /// [`tls::TlsConnection`] wrapper calls it before the first plaintext byte).
    fn on_secure_channel(&mut self, _psk_identity: &[u8]) {}
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed its side (a zero-length receive).
    PeerClosed,
    /// The handler returned true from `wants_close`.
    Requested,
    /// A socket error. `ConnectionReset` and `BrokenPipe` are the normal ways
    /// a peer vanishes and are only logged at debug level.
    Error(std::io::ErrorKind),
    /// The runtime is shutting down.
    Shutdown,
    /// The listener it was accepted through was removed
    /// ([`ListenerControl::remove_listener`]).
    ListenerRemoved,
}

/// Creates handlers. Shared by all threads.
pub trait Service: Send + Sync + 'static {
    type Handler: ConnectionHandler;
    /// Called on the thread that will own the connection. `listener` is the
    /// listener it came through (the configured ones are 0, 1, ... in
    /// [`RuntimeConfig::listeners`] order; added ones get new ids); `local` is
    /// the connection's own local address (the concrete address even when
    /// listening on 0.0.0.0). `storage_waker` is this connection's own: storage
    /// that completes on threads of its own calls it, and the runtime then polls
    /// this connection (and only the connections woken), so a handler need not
    /// report such work in [`ConnectionHandler::has_pending_work`]. It must not be
    /// handed to another connection's storage. Return None to refuse (the
    /// socket is closed).
    fn accept(
        &self,
        thread: usize,
        listener: ListenerId,
        local: SocketAddr,
        peer: SocketAddr,
        storage_waker: &std::task::Waker,
        now: Instant,
    ) -> Option<Self::Handler>;
}

/// What a connection handler waits for ([`ConnectionHandler::activity`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandlerActivity {
    /// [`ConnectionHandler::has_pending_work`].
    pub pending_work: bool,
    /// [`ConnectionHandler::awaits_storage`].
    pub awaits_storage: bool,
}

/// How a thread waits for completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Spin on the completion queue: lowest latency, a full core per thread.
    BusyPoll,
    /// Block in io_uring_enter until a completion or the next deadline: idle
    /// CPU near zero.
    Sleep,
    /// Spin while completions keep coming, sleep once none came for `spin_us`
    /// microseconds: busy-poll latency under load (the next request of a QD1
    /// stream arrives within the window, so the thread never pays a wake-up), and
    /// an idle thread near 0 % CPU. Spinning after the last completion costs at most
    /// `spin_us` per burst. It spins for the network only: while a connection
    /// awaits storage that wakes the thread ([`ConnectionHandler::awaits_storage`]),
    /// it sleeps.
    Adaptive { spin_us: u32 },
}

impl PollMode {
    /// The adaptive mode with the default window.
    pub const ADAPTIVE: PollMode = PollMode::Adaptive { spin_us: DEFAULT_ADAPTIVE_SPIN_US };
}

/// Default spin window of [`PollMode::Adaptive`]: longer than a loopback or
/// same-rack round trip plus the host's turnaround (20-40 us measured with SPDK's
/// initiator here), so a host with one command in flight finds the thread awake.
pub const DEFAULT_ADAPTIVE_SPIN_US: u32 = 50;

/// The most buffers a shared receive pool grows to, when a ring uses one
/// ([`RuntimeConfig::shared_receive_buffers`]): enough for 1,024 connections of a
/// thread to receive in the same loop turn before any waits for a buffer.
pub const DEFAULT_SHARED_RECEIVE_BUFFERS: u16 = 1024;

/// The receive buffer size a target uses: a whole 128 KiB data PDU and its header fit
/// in one receive, with room for the next PDU's start.
pub const TARGET_RECEIVE_BUFFER_BYTES: usize = 256 * 1024;

/// How a target receives: into a buffer per connection (0), not a shared pool.
/// Measured (docs/results/scale.md, issue 46): the shared pool made 128 KiB writes on
/// one connection 15-18 % slower (a multishot receive completes as each segment
/// arrives, so a large PDU comes in more, smaller pieces), while a buffer per
/// connection costs an idle connection only the pages its receives touched (about 5
/// KiB more per connection than the pool: 14.9 against 10.0 KiB at 10,000 idle
/// connections, both within the 16 KiB goal).
pub const TARGET_SHARED_RECEIVE_BUFFERS: u16 = 0;

/// Everything [`Runtime::start`] needs.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// One per configured core.
    pub threads: usize,
    /// sched_setaffinity to cores 0..threads (best effort: failures are logged).
    pub pin_threads: bool,
    pub poll_mode: PollMode,
    /// Every thread listens on every address with SO_REUSEPORT, so the kernel
    /// spreads connections and a connection never moves between threads.
    /// These get [`ListenerId`]s 0, 1, ... in order; more can be added later
    /// through [`Runtime::listener_control`].
    pub listeners: Vec<SocketAddr>,
    /// The most `on_receive` gets in one call, e.g. 64 KiB: the size of each
    /// receive buffer (of the shared pool, or of each connection's own).
    pub recv_buffer_bytes: usize,
    /// Receive buffers each thread's connections share: a multishot receive per
    /// connection draws from a provided-buffer ring of this many buffers (rounded up
    /// to a power of two, at most [`MAX_SHARED_RECEIVE_BUFFERS`]), so an idle
    /// connection holds no receive memory and the pool needs about as many buffers
    /// as connections receive in one loop turn (more only cost a re-armed receive).
    /// 0 (the default): a buffer of `recv_buffer_bytes` per connection and a
    /// single-shot receive (also the fallback on kernels before 5.19); its memory is
    /// resident only as far as receives have touched it.
    pub shared_receive_buffers: u16,
    /// Submission queue entries per thread (the completion queue is twice that).
    pub ring_entries: u32,
    pub tcp_nodelay: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            threads: 1,
            pin_threads: false,
            poll_mode: PollMode::Sleep,
            listeners: Vec::new(),
            recv_buffer_bytes: 64 * 1024,
            shared_receive_buffers: 0,
            ring_entries: 1024,
            tcp_nodelay: true,
        }
    }
}

/// State shared by the runtime's threads, every [`ShutdownHandle`] and every
/// [`ListenerControl`].
struct Shared {
    requested: AtomicBool,
    /// One eventfd per thread; each thread keeps a read armed on its own. It
    /// wakes the thread for shutdown and for its mailbox.
    wake_fds: Vec<sys::EventFd>,
    /// One per thread: listener changes for it to apply at its next wake. Only
    /// locked on a wake and by `ListenerControl`, never on the I/O path.
    mailboxes: Vec<Mutex<listeners::Mailbox>>,
    /// The listeners open now and the next id to hand out.
    registry: Mutex<listeners::Registry>,
}

impl Shared {
    fn is_shutdown(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }
}

/// Stops the runtime from any thread.
///
/// `Clone + Send + Sync`. [`ShutdownHandle::shutdown`] is idempotent, never
/// blocks, allocates nothing and logs nothing (an atomic store and one
/// `write(2)` per thread), so it can be called from a signal-handling thread.
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// Asks every thread to close its connections (`on_closed(Shutdown)`) and
    /// listeners and exit. Wakes sleeping threads at once through their
    /// eventfds. Returns immediately; use [`Runtime::join`] to wait.
    pub fn shutdown(&self) {
        self.shared.requested.store(true, Ordering::Release);
        for wake_fd in &self.shared.wake_fds {
            wake_fd.signal();
        }
    }

    /// True once [`ShutdownHandle::shutdown`] has been called.
    pub fn is_shutdown(&self) -> bool {
        self.shared.is_shutdown()
    }
}

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ShutdownHandle").field("requested", &self.is_shutdown()).finish()
    }
}

/// The running threads.
pub struct Runtime {
    local_addrs: Vec<SocketAddr>,
    shutdown: ShutdownHandle,
    threads: Vec<JoinHandle<Result<(), RuntimeError>>>,
}

impl Runtime {
    /// Binds every listener on every thread (so "address in use" errors surface
    /// here, synchronously, with the address in the error), creates every
    /// thread's ring (errors surface here too) and starts the threads.
    ///
    /// A non-zero port that anything already listens on is refused, even when
    /// the other listener also uses SO_REUSEPORT (a second target would
    /// otherwise silently share the port and take half the connections).
    pub fn start<S: Service>(config: RuntimeConfig, service: Arc<S>) -> Result<Runtime, RuntimeError> {
        config.validate()?;
        // Bind thread 0's sockets first so port 0 resolves to one real port
        // that every other thread then joins through SO_REUSEPORT.
        let mut local_addrs = Vec::with_capacity(config.listeners.len());
        let mut listeners_per_thread: Vec<Vec<event_loop::Listener>> =
            (0..config.threads).map(|_| Vec::new()).collect();
        for (index, &requested) in config.listeners.iter().enumerate() {
            let id = ListenerId::new(
                u32::try_from(index).map_err(|_| RuntimeError::InvalidConfig("too many listeners".into()))?,
            );
            sys::check_address_free(requested, sys::BIND_RETRY)
                .map_err(|source| RuntimeError::Bind { address: requested, source })?;
            let first =
                sys::bind_listener(requested).map_err(|source| RuntimeError::Bind { address: requested, source })?;
            let bound = first.local_addr().map_err(|source| RuntimeError::Bind { address: requested, source })?;
            local_addrs.push(bound);
            listeners_per_thread[0].push(event_loop::Listener::new(id, bound, first));
            for thread_listeners in listeners_per_thread.iter_mut().skip(1) {
                let socket =
                    sys::bind_listener(bound).map_err(|source| RuntimeError::Bind { address: bound, source })?;
                thread_listeners.push(event_loop::Listener::new(id, bound, socket));
            }
        }

        let wake_fds = (0..config.threads)
            .map(|_| sys::EventFd::new().map_err(RuntimeError::RingSetup))
            .collect::<Result<Vec<_>, _>>()?;
        let open = local_addrs.iter().enumerate().map(|(index, &address)| (ListenerId::new(index as u32), address));
        let registry = listeners::Registry { open: open.collect(), next_id: local_addrs.len() as u32 };
        let shared = Arc::new(Shared {
            requested: AtomicBool::new(false),
            wake_fds,
            mailboxes: (0..config.threads).map(|_| Mutex::default()).collect(),
            registry: Mutex::new(registry),
        });
        let shutdown = ShutdownHandle { shared };

        let mut runtime = Runtime { local_addrs, shutdown: shutdown.clone(), threads: Vec::new() };
        // Each ring is created on its own thread (IORING_SETUP_SINGLE_ISSUER ties
        // it to its creator); the thread reports setup success or failure here
        // before entering its loop so start() stays synchronous.
        let (ready_sender, ready_receiver) = mpsc::channel::<Result<(), RuntimeError>>();
        for (thread, listeners) in listeners_per_thread.into_iter().enumerate() {
            let settings = event_loop::ThreadSettings {
                thread,
                pin_core: config.pin_threads.then_some(thread),
                poll_mode: config.poll_mode,
                recv_buffer_bytes: config.recv_buffer_bytes,
                shared_receive_buffers: config.shared_receive_buffers,
                ring_entries: config.ring_entries,
                tcp_nodelay: config.tcp_nodelay,
            };
            let service = Arc::clone(&service);
            let shutdown = shutdown.clone();
            let ready = ready_sender.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("sluice-io-{thread}"))
                .spawn(move || event_loop::run_thread(settings, listeners, service, shutdown, ready));
            match spawned {
                Ok(handle) => runtime.threads.push(handle),
                Err(error) => {
                    // Dropping `runtime` shuts down and joins the threads already started.
                    return Err(RuntimeError::Thread(format!("spawning thread {thread}: {error}")));
                }
            }
        }
        drop(ready_sender);
        for _ in 0..config.threads {
            match ready_receiver.recv() {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(error),
                Err(_) => return Err(RuntimeError::Thread("a runtime thread exited during setup".into())),
            }
        }
        Ok(runtime)
    }

    /// Local addresses actually bound at start (port 0 resolves to the real
    /// port), in [`RuntimeConfig::listeners`] order. Listeners added or removed
    /// later are in [`ListenerControl::listeners`].
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// A handle that adds and removes listening addresses while the runtime
    /// runs, from any thread.
    pub fn listener_control(&self) -> ListenerControl {
        ListenerControl { shared: Arc::clone(&self.shutdown.shared) }
    }

    /// A handle that can stop the runtime from another thread or a
    /// signal-handling thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Waits for all threads; each thread closes its connections
    /// (`on_closed(Shutdown)`) and listeners. Does not itself request shutdown:
    /// call [`ShutdownHandle::shutdown`] first (or from elsewhere). Returns the
    /// first thread error; a panicking handler surfaces as
    /// [`RuntimeError::Thread`].
    pub fn join(mut self) -> Result<(), RuntimeError> {
        self.join_threads()
    }

    fn join_threads(&mut self) -> Result<(), RuntimeError> {
        let mut first_error = None;
        for (thread, handle) in self.threads.drain(..).enumerate() {
            let outcome = match handle.join() {
                Ok(result) => result,
                Err(panic) => Err(RuntimeError::Thread(format!("thread {thread} panicked: {}", panic_message(&panic)))),
            };
            if let Err(error) = outcome {
                // One failed thread takes the others down rather than leaving a
                // half-running target behind.
                self.shutdown.shutdown();
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Runtime {
    /// A runtime dropped without `join` (an error path, say) shuts its threads
    /// down and waits for them, so no thread outlives it unnoticed.
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shutdown.shutdown();
            if let Err(error) = self.join_threads() {
                tracing::warn!(%error, "runtime thread failed during drop");
            }
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl RuntimeConfig {
    fn validate(&self) -> Result<(), RuntimeError> {
        let invalid = |reason: &str| Err(RuntimeError::InvalidConfig(reason.to_string()));
        if self.threads == 0 {
            return invalid("threads must be at least 1");
        }
        if self.recv_buffer_bytes == 0 || self.recv_buffer_bytes > u32::MAX as usize {
            return invalid("recv_buffer_bytes must be between 1 and u32::MAX");
        }
        if self.ring_entries < 8 {
            return invalid("ring_entries must be at least 8");
        }
        Ok(())
    }
}

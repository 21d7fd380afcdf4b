//! A ring the calling thread drives, for connections it opened itself: the
//! NVMe/TCP host's I/O path. The same receive, send, timer and close machinery
//! as the target's threads (`connection.rs`), but no listener, no thread of its
//! own: the owner adds connected sockets with handlers, asks for their sends
//! ([`ClientRing::flush`]) and turns the ring ([`ClientRing::turn`]) when it
//! wants completions, spinning or sleeping by [`PollMode`].
//!
//! The ring is created with SINGLE_ISSUER and DEFER_TASKRUN like the target's, so
//! only its creating thread may submit: every method checks the caller's thread
//! and refuses others with [`RuntimeError::ForeignThread`]. The owner may still
//! move the ring (inside its own state) to another thread; it must
//! [`ClientRing::detach`] its sockets on the owning thread first, or drop the ring
//! (which then leaks the buffers the kernel may still write).

use std::net::TcpStream;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crate::event_loop::build_ring;
use crate::ring_core::{Outcome, ReceiveSettings, Released, RingCore};
use crate::spin_window::SpinWindow;
use crate::user_data::UserData;
use crate::{CloseReason, ConnectionHandler, PollMode, RuntimeError};

/// How long [`ClientRing::detach`] and drop wait for a connection's operations
/// (a send in flight to a peer that stopped reading is bounded by this).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a [`ClientRing`] needs.
#[derive(Debug, Clone, Copy)]
pub struct ClientRingConfig {
    pub poll_mode: PollMode,
    /// The most `on_receive` gets in one call: the size of each receive buffer.
    pub recv_buffer_bytes: usize,
    /// Receive buffers the ring's connections share (multishot receive from a
    /// provided-buffer ring, rounded up to a power of two); 0 (the default: a host's
    /// ring usually drives one connection) gives every connection a buffer of its
    /// own. See [`crate::RuntimeConfig::shared_receive_buffers`].
    pub shared_receive_buffers: u16,
    /// Submission queue entries (the completion queue is twice that).
    pub ring_entries: u32,
}

impl Default for ClientRingConfig {
    fn default() -> Self {
        ClientRingConfig {
            poll_mode: PollMode::ADAPTIVE,
            recv_buffer_bytes: 128 * 1024,
            shared_receive_buffers: 0,
            ring_entries: 256,
        }
    }
}

/// Names one connection of a [`ClientRing`]; stale once it closed or was detached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionToken {
    index: u32,
    generation: u32,
}

/// See the module documentation.
pub struct ClientRing<H: ConnectionHandler> {
    core: RingCore<H>,
    poll_mode: PollMode,
    owner: ThreadId,
    /// Connections whose handler has more to send, driven at the next turn so
    /// that everything queued between two turns leaves in one send.
    to_flush: Vec<ConnectionToken>,
}

// SAFETY: the only non-Send parts are the raw pointers of each connection's
// SendState (msghdr and iovecs), which point into heap memory owned by the same
// ring, so moving the ring between threads does not invalidate them. The kernel
// side is only ever driven from the owning thread: every method checks it, and a
// drop elsewhere leaks whatever the kernel may still touch instead of freeing it.
unsafe impl<H> Send for ClientRing<H>
where
    H: ConnectionHandler + Send,
    H::Batch: Send,
{
}

impl<H: ConnectionHandler> ClientRing<H> {
    /// Creates the ring; the calling thread becomes its owner.
    pub fn new(config: ClientRingConfig) -> Result<Self, RuntimeError> {
        if config.recv_buffer_bytes == 0 || config.recv_buffer_bytes > u32::MAX as usize {
            return Err(RuntimeError::InvalidConfig("recv_buffer_bytes must be between 1 and u32::MAX".into()));
        }
        if config.ring_entries < 8 {
            return Err(RuntimeError::InvalidConfig("ring_entries must be at least 8".into()));
        }
        let ring = build_ring(config.ring_entries).map_err(RuntimeError::RingSetup)?;
        let mut core = RingCore::new(
            usize::MAX,
            ReceiveSettings { buffer_bytes: config.recv_buffer_bytes, shared_buffers: config.shared_receive_buffers },
            ring,
        );
        core.released = Some(Vec::new());
        core.spin_window = Some(SpinWindow::new(Instant::now()));
        Ok(ClientRing { core, poll_mode: config.poll_mode, owner: current_thread_id(), to_flush: Vec::new() })
    }

    /// Called on every ring operation (several per I/O), so it reads a cached id.
    fn check_thread(&self) -> Result<(), RuntimeError> {
        if current_thread_id() == self.owner {
            Ok(())
        } else {
            Err(RuntimeError::ForeignThread)
        }
    }

    /// True when called on the thread that owns the ring.
    pub fn is_owner_thread(&self) -> bool {
        self.check_thread().is_ok()
    }

    /// Connections on the ring (closing ones included until they are gone).
    pub fn connection_count(&self) -> usize {
        self.core.connections.len()
    }

    /// Takes a connected socket and its handler: the receive is armed at once and
    /// whatever the handler has to send goes out at the next turn.
    pub fn add(&mut self, stream: TcpStream, handler: H) -> Result<ConnectionToken, RuntimeError> {
        self.check_thread()?;
        let (index, generation) =
            self.core.add_connection(stream, handler, None, Instant::now()).map_err(RuntimeError::Submit)?;
        Ok(ConnectionToken { index, generation })
    }

    /// The connection's handler until the ring hands it back
    /// ([`ClientRing::take_closed`], [`ClientRing::detach`]), also while the
    /// connection is closing. After changing what it wants to send, call
    /// [`ClientRing::flush`].
    pub fn handler_mut(&mut self, token: ConnectionToken) -> Option<&mut H> {
        self.core.handler_mut(token.index, token.generation)
    }

    /// Notes that the connection's handler has something to send: at the next
    /// turn its batch (everything it queued until then) goes to the kernel if no
    /// send is in flight, submitted with the ring's other work in one system call.
    pub fn flush(&mut self, token: ConnectionToken) -> Result<(), RuntimeError> {
        self.check_thread()?;
        if !self.to_flush.contains(&token) {
            self.to_flush.push(token);
        }
        Ok(())
    }

    fn drive_flushes(&mut self, now: Instant) {
        for position in 0..self.to_flush.len() {
            let token = self.to_flush[position];
            self.core.drive(token.index, token.generation, now);
        }
        self.to_flush.clear();
    }

    /// Waits for completions (spinning or sleeping by the poll mode, never past
    /// `until` or the earliest handler deadline), dispatches them to the
    /// handlers, and runs due timers and polls. Returns how many completions
    /// were dispatched; 0 is normal when spinning or when `until` passed.
    pub fn turn(&mut self, until: Option<Instant>) -> Result<usize, RuntimeError> {
        self.check_thread()?;
        if let Some(error) = self.core.fatal.take() {
            return Err(RuntimeError::Submit(error));
        }
        let wakeup = match (until, self.core.next_deadline()) {
            (Some(until), Some(deadline)) => Some(until.min(deadline)),
            (until, deadline) => until.or(deadline),
        };
        let before = Instant::now();
        self.drive_flushes(before);
        let blocked = self.core.wait(self.poll_mode, wakeup, before).map_err(RuntimeError::Submit)?;
        let now = if blocked { Instant::now() } else { before };
        let dispatched = self.dispatch(now);
        self.core.run_polls_and_timers(false, &[], now);
        Ok(dispatched)
    }

    fn dispatch(&mut self, now: Instant) -> usize {
        self.core.reap_completions();
        let count = self.core.completions.len();
        if count > 0 {
            if let Some(window) = &mut self.core.spin_window {
                window.record(now.saturating_duration_since(self.core.last_completion_at), now);
            }
            self.core.last_completion_at = now;
        }
        // Indexing: handlers may submit, and a full submission queue reaps more
        // completions onto the end of this Vec.
        let mut next = 0;
        while next < self.core.completions.len() {
            let (user_data, result, flags) = self.core.completions[next];
            next += 1;
            match UserData::decode(user_data) {
                Some(data) if self.core.dispatch_connection_op(data, result, flags, now) => {}
                _ => tracing::error!(user_data, "client ring: completion of an unknown operation"),
            }
        }
        self.core.completions.clear();
        count
    }

    /// Starts closing the connection: its operations are cancelled, the socket
    /// closed, and the handler comes back through [`ClientRing::take_closed`].
    pub fn close(&mut self, token: ConnectionToken) -> Result<(), RuntimeError> {
        self.check_thread()?;
        self.core.close_connection_at_generation(token.index, token.generation, CloseReason::Requested);
        Ok(())
    }

    /// A connection that closed (peer, error, or [`ClientRing::close`]) with its
    /// handler, once no operation points into it. `on_closed` has run.
    pub fn take_closed(&mut self) -> Option<(ConnectionToken, H, CloseReason)> {
        let released = self.core.released.as_mut().filter(|released| !released.is_empty())?;
        let position = released.iter().position(|entry| matches!(entry.outcome, Outcome::Closed(_)))?;
        let Released { index, generation, handler, outcome } = released.swap_remove(position);
        let Outcome::Closed(reason) = outcome else { return None };
        Some((ConnectionToken { index, generation }, handler, reason))
    }

    /// Takes the connection off the ring and gives back its socket (open, idle,
    /// blocking mode unchanged) and handler: the receive is cancelled (bytes that
    /// raced it still reach the handler), a send in flight runs to its end, and
    /// nothing of the handler's is sent after. Waits (turning the ring) at most a
    /// few seconds; a connection that closes meanwhile comes back through
    /// [`ClientRing::take_closed`] and this returns `UnknownConnection`.
    pub fn detach(&mut self, token: ConnectionToken) -> Result<(TcpStream, H), RuntimeError> {
        self.check_thread()?;
        // What the handler queued before goes out first (a send in flight is
        // awaited; one not started yet is left to the blocking socket).
        self.to_flush.retain(|queued| *queued != token);
        if !self.core.begin_detach(token.index, token.generation) {
            return Err(RuntimeError::UnknownConnection);
        }
        let deadline = Instant::now() + RELEASE_TIMEOUT;
        loop {
            if let Some(found) = self.take_detached(token) {
                return Ok(found);
            }
            if self.core.connections.get_mut(token.index, token.generation).is_none() {
                return Err(RuntimeError::UnknownConnection);
            }
            if Instant::now() >= deadline {
                self.core.close_connection_at_generation(token.index, token.generation, CloseReason::Requested);
                return Err(RuntimeError::DetachTimedOut { waited_ms: RELEASE_TIMEOUT.as_millis() as u64 });
            }
            // Sleep, not spin: only this connection's own operations are awaited.
            self.core.wait(PollMode::Sleep, Some(deadline), Instant::now()).map_err(RuntimeError::Submit)?;
            self.dispatch(Instant::now());
        }
    }

    fn take_detached(&mut self, token: ConnectionToken) -> Option<(TcpStream, H)> {
        let released = self.core.released.as_mut()?;
        let position = released.iter().position(|entry| {
            entry.index == token.index
                && entry.generation == token.generation
                && matches!(entry.outcome, Outcome::Detached(_))
        })?;
        let Released { handler, outcome, .. } = released.swap_remove(position);
        match outcome {
            Outcome::Detached(stream) => Some((stream, handler)),
            Outcome::Closed(_) => None,
        }
    }
}

impl<H: ConnectionHandler> Drop for ClientRing<H> {
    /// On the owning thread: closes every connection and waits (bounded) for the
    /// kernel to let go of their buffers. Elsewhere, or if that wait runs out,
    /// sockets are shut down and closed and the buffers leaked.
    fn drop(&mut self) {
        if self.check_thread().is_ok() {
            for index in 0..self.core.connections.index_bound() {
                self.core.close_connection_at(index, CloseReason::Shutdown);
            }
            let deadline = Instant::now() + RELEASE_TIMEOUT;
            while self.core.outstanding_ops > 0 && Instant::now() < deadline && self.core.fatal.is_none() {
                if self.core.wait(PollMode::Sleep, Some(deadline), Instant::now()).is_err() {
                    break;
                }
                self.dispatch(Instant::now());
            }
        }
        if self.core.outstanding_ops > 0 {
            self.core.abandon_connections();
        }
    }
}

thread_local! {
    /// This thread's id, cached: `thread::current()` clones the thread handle (an
    /// atomic increment and decrement) each call. Ids are never reused in a process,
    /// so a ring outliving its owner is never taken for another thread's.
    static CURRENT_THREAD_ID: std::thread::ThreadId = std::thread::current().id();
}

fn current_thread_id() -> std::thread::ThreadId {
    CURRENT_THREAD_ID.with(|id| *id)
}

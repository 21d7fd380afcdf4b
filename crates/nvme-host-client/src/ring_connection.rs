//! An I/O queue's connection on an io_uring ring driven by the thread that uses
//! the queue (the runtime's [`ClientRing`]): sends and receives are batched into
//! one `io_uring_enter`, and waiting spins or sleeps by the configured poll mode
//! instead of blocking in `read`. A queue comes up on a blocking socket
//! (`connection.rs`: ICReq, Connect, authentication) and moves onto a ring here
//! when a caller thread first drives it; it moves back ([`RingConnection::detach`])
//! when the queue is handed back to the controller, so any thread can use it then.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvme_host::{HostError, HostQueue, QueueState, TransmitBatch};
use runtime::{
    ClientRing, ClientRingConfig, CloseReason, ConnectionHandler, ConnectionToken, PollMode, SendSource, TlsConnection,
};

use crate::connection::{LinkFailure, QueueConnection};
use crate::ClientError;

/// Receive buffer per ring connection: a 128 KiB read's C2HData arrives in one
/// receive. The ring's receive buffer is the only one (the blocking one is not kept).
const RING_RECEIVE_BUFFER_BYTES: usize = 128 * 1024 + 64;
/// Submission queue entries: one receive and one send per connection, plus room
/// for cancellations.
const RING_ENTRIES: u32 = 16;
/// How long a failing connection may take to get its H2CTermReq out.
const TERMINATION_FLUSH_WAIT: Duration = Duration::from_millis(50);

/// One send batch: the PDUs `HostQueue::transmit_batch` encoded, write data by
/// reference, so the ring's one SendMsg reads each write's data where the command
/// (or the caller) keeps it. The ring holds the batch until the send is over, which
/// is what keeps those commands from completing before it.
#[derive(Debug)]
pub(crate) struct SendBuffer(TransmitBatch);

impl SendSource for SendBuffer {
    fn parts<'a>(&'a self, out: &mut runtime::SendParts<'a>) {
        for slice in self.0.slices() {
            out.bytes(slice);
        }
    }
    fn total_len(&self) -> usize {
        self.0.len()
    }
}

/// The ring's handler: the host queue and the one batch it sends (a connection has
/// at most one send in flight, so one batch, reused, suffices).
#[derive(Debug)]
pub(crate) struct RingLink {
    queue: HostQueue,
    spare: TransmitBatch,
    closed: Option<CloseReason>,
}

impl ConnectionHandler for RingLink {
    type Batch = SendBuffer;

    fn on_receive(&mut self, data: &[u8], now: Instant) {
        self.queue.handle_received(data, now);
    }

    fn take_send(&mut self) -> Option<SendBuffer> {
        let mut batch = std::mem::take(&mut self.spare);
        if self.queue.transmit_batch(&mut batch) == 0 {
            self.spare = batch;
            return None;
        }
        Some(SendBuffer(batch))
    }

    fn on_sent(&mut self, batch: SendBuffer, _now: Instant) {
        // Lets go of the commands' data at once: responses that came during the
        // send complete at the next poll of the queue.
        let mut batch = batch.0;
        batch.clear();
        self.spare = batch;
    }

    fn on_timer(&mut self, now: Instant) {
        self.queue.handle_timeout(now);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.queue.next_deadline()
    }

    fn wants_close(&self) -> bool {
        false
    }

    fn on_closed(&mut self, reason: CloseReason) {
        self.closed = Some(reason);
    }
}

/// A connected queue on its own ring. See the module documentation.
pub(crate) struct RingConnection {
    /// A TLS queue's link sits behind the runtime's TLS layer; a plain one passes
    /// through it.
    ring: ClientRing<TlsConnection<RingLink>>,
    token: ConnectionToken,
    address: SocketAddr,
    /// The handler, once the ring handed it back after the connection closed.
    closed: Option<TlsConnection<RingLink>>,
}

impl std::fmt::Debug for RingConnection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RingConnection").field("address", &self.address).finish_non_exhaustive()
    }
}

impl RingConnection {
    /// Moves a connected queue onto a new ring owned by the calling thread. On
    /// failure (no io_uring here) the connection comes back unchanged.
    pub(crate) fn attach(
        connection: QueueConnection,
        poll_mode: PollMode,
    ) -> Result<RingConnection, Box<(QueueConnection, runtime::RuntimeError)>> {
        let config = ClientRingConfig {
            poll_mode,
            recv_buffer_bytes: RING_RECEIVE_BUFFER_BYTES,
            ring_entries: RING_ENTRIES,
            ..ClientRingConfig::default()
        };
        let mut ring = match ClientRing::new(config) {
            Ok(ring) => ring,
            Err(error) => return Err(Box::new((connection, error))),
        };
        let (stream, queue, address, tls) = connection.into_parts();
        let link = RingLink { queue, spare: TransmitBatch::new(), closed: None };
        let now = Instant::now();
        let handler = match tls {
            None => TlsConnection::plain(link, now),
            Some(session) => TlsConnection::established(link, session, address.to_string(), now),
        };
        match ring.add(stream, handler) {
            Ok(token) => Ok(RingConnection { ring, token, address, closed: None }),
            // Unreachable: the ring was created on this thread a moment ago.
            Err(error) => unreachable!("a new ring refused its own thread: {error}"),
        }
    }

    /// True when the calling thread may drive this ring.
    pub(crate) fn is_usable_here(&self) -> bool {
        self.ring.is_owner_thread()
    }

    /// The host queue, wherever the handler is now (on the ring, or handed back
    /// after the connection closed).
    pub(crate) fn queue(&mut self) -> &mut HostQueue {
        self.collect_closed();
        if let Some(link) = self.closed.as_mut() {
            return &mut link.inner_mut().queue;
        }
        // The ring keeps a handler until it hands it back through take_closed or
        // detach, and only this type calls those (detach consumes it).
        &mut self.ring.handler_mut(self.token).expect("a ring connection keeps its handler").inner_mut().queue
    }

    /// Picks up the handler if the ring closed the connection.
    fn collect_closed(&mut self) {
        if self.closed.is_none() {
            if let Some((_, link, _)) = self.ring.take_closed() {
                self.closed = Some(link);
            }
        }
    }

    fn io_error(&self, source: std::io::Error) -> ClientError {
        ClientError::Io { address: self.address, source }
    }

    /// The socket's end, as the blocking path reports it.
    fn closed_error(&mut self) -> Option<ClientError> {
        self.collect_closed();
        let closed = self.closed.as_ref()?;
        if let Some(message) = closed.failure() {
            return Some(ClientError::Tls { address: self.address, message: message.to_owned() });
        }
        let reason = closed.inner().closed?;
        let kind = match reason {
            CloseReason::Error(kind) => kind,
            _ => std::io::ErrorKind::UnexpectedEof,
        };
        Some(self.io_error(kind.into()))
    }

    fn ring_error(&self, error: runtime::RuntimeError) -> ClientError {
        self.io_error(std::io::Error::other(error))
    }

    /// Asks for whatever the host queue wants to send to go out at the next turn
    /// of the ring, batched with everything queued until then.
    pub(crate) fn flush(&mut self) -> Result<(), ClientError> {
        if let Some(error) = self.closed_error() {
            return Err(error);
        }
        self.ring.flush(self.token).map_err(|error| self.ring_error(error))
    }

    /// Turns the ring once: waits (spinning or sleeping) at most until `until`,
    /// feeds what arrived to the queue and runs its timers. Returns whether
    /// anything completed. A closed socket is an error.
    pub(crate) fn receive(&mut self, until: Instant) -> Result<bool, ClientError> {
        let dispatched = self.ring.turn(Some(until)).map_err(|error| self.ring_error(error))?;
        if let Some(error) = self.closed_error() {
            return Err(error);
        }
        Ok(dispatched > 0)
    }

    /// Takes what has already arrived, without waiting.
    pub(crate) fn receive_available(&mut self) -> Result<(), ClientError> {
        self.receive(Instant::now()).map(|_| ())
    }

    /// The error to report when the queue failed by itself.
    pub(crate) fn queue_failure(&mut self) -> Option<ClientError> {
        let queue = self.queue();
        (queue.state() == QueueState::Failed)
            .then(|| ClientError::Protocol(queue.error().cloned().unwrap_or(HostError::ConnectionLost)))
    }

    /// Turns the connection's end into a `LinkFailure`: takes back every command.
    pub(crate) fn into_failure(mut self, error: ClientError) -> LinkFailure {
        let queue_error = self.queue().error().cloned();
        if queue_error.is_some() && self.closed.is_none() && self.ring.is_owner_thread() {
            // A pending H2CTermReq goes out if the socket still takes it.
            let deadline = Instant::now() + TERMINATION_FLUSH_WAIT;
            if self.flush().is_ok() {
                while Instant::now() < deadline && self.receive(deadline).is_ok() {}
            }
        }
        let queue = self.queue();
        let cause = crate::connection::link_cause(&error, queue);
        let completed = std::iter::from_fn(|| queue.poll_completion()).collect();
        let abandoned = queue.abandon(HostError::ConnectionLost);
        LinkFailure { error, queue_error, cause, abandoned, completed }
    }

    /// Moves the queue back onto a blocking socket (on the owning thread): the
    /// receive is cancelled, a send in flight finishes, nothing is lost.
    pub(crate) fn detach(mut self) -> Result<QueueConnection, Box<LinkFailure>> {
        if let Some(error) = self.closed_error() {
            return Err(Box::new(self.into_failure(error)));
        }
        match self.ring.detach(self.token) {
            Ok((stream, handler)) => {
                let (link, tls) = handler.into_parts();
                Ok(QueueConnection::from_parts(stream, link.queue, self.address, tls))
            }
            Err(error) => {
                let error = self.ring_error(error);
                Err(Box::new(self.into_failure(error)))
            }
        }
    }
}

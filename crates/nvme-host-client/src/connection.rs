//! One TCP connection driving one `HostQueue`: the only place that touches sockets.
//!
//! The socket stays blocking. Reads wait with `SO_RCVTIMEO` set to the time the
//! caller may wait (so `reap` honours its timeout without a poll loop), writes block
//! with `SO_SNDTIMEO` set to the command timeout (a target that stops reading for
//! that long is treated as gone). Blocking writes cannot deadlock against a
//! well-behaved target: NVMe/TCP targets (this one, Linux nvmet, SPDK) keep reading
//! while their own sends wait.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nvme_host::{HostCommand, HostCompletion, HostError, HostQueue, QueueConfig, QueueState, TransmitBatch};
use runtime::tls::{PskChoice, Progress, TlsClient, TlsSession};

use crate::{ClientError, TlsOptions};

/// Receive buffer per connection: the most one `read` takes.
const RECEIVE_BUFFER_BYTES: usize = 64 * 1024;
/// Shortest read timeout we set: the kernel counts in jiffies anyway, and 0 would
/// mean "forever".
const MIN_READ_WAIT: Duration = Duration::from_millis(1);
/// Pieces handed to one `writev`: the header and data of 32 commands.
const SLICES_PER_WRITE: usize = 64;
/// Longest single wait while a command has no deadline (a held AER): wake up now and
/// then to notice the caller's own limits.
const MAX_READ_WAIT: Duration = Duration::from_secs(1);

/// Why a connection stopped being usable, with the commands it had outstanding.
#[derive(Debug)]
pub(crate) struct LinkFailure {
    /// What happened.
    pub error: ClientError,
    /// The queue's own error, if it failed itself (target misbehaviour, timeout).
    pub queue_error: Option<HostError>,
    /// Outstanding commands handed back by `HostQueue::abandon`, oldest first.
    pub abandoned: Vec<HostCommand>,
    /// Completions that had finished before the failure.
    pub completed: Vec<HostCompletion>,
}

/// A connected queue.
pub(crate) struct QueueConnection {
    stream: TcpStream,
    pub(crate) queue: HostQueue,
    pub(crate) address: SocketAddr,
    receive_buffer: Box<[u8]>,
    /// What the queue sends: written with vectored writes, write data straight
    /// from the commands' buffers.
    batch: TransmitBatch,
    /// TLS only: the batch's plaintext, then its ciphertext.
    send_buffer: Vec<u8>,
    read_timeout: Option<Duration>,
    /// The TLS session, when the queue runs over TLS: what the socket carries is
    /// ciphertext, `receive_buffer` holds plaintext PDUs.
    tls: Option<Box<TlsSession>>,
    /// Ciphertext read from the socket (TLS only).
    cipher_buffer: Vec<u8>,
}

impl std::fmt::Debug for QueueConnection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("QueueConnection")
            .field("address", &self.address)
            .field("queue", &self.queue)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl QueueConnection {
    /// Opens the TCP connection and runs ICReq/ICResp and Connect, all within
    /// `connect_timeout`.
    pub(crate) fn connect(
        address: SocketAddr,
        config: QueueConfig,
        connect_timeout: Duration,
        tls: Option<&TlsOptions>,
    ) -> Result<Self, ClientError> {
        let started = Instant::now();
        let deadline = started + connect_timeout;
        let connection = match tls {
            None => QueueConnection::open(address, config, connect_timeout, started, None)?,
            Some(tls) => QueueConnection::open_tls(address, config, deadline, started, tls)?,
        };
        connection.bring_up(deadline)
    }

    /// A TCP connection with `session` (not yet handshaken) and a fresh queue.
    fn open(
        address: SocketAddr,
        config: QueueConfig,
        connect_timeout: Duration,
        started: Instant,
        session: Option<Box<TlsSession>>,
    ) -> Result<Self, ClientError> {
        let stream = TcpStream::connect_timeout(&address, connect_timeout)
            .map_err(|source| ClientError::Connect { address, source })?;
        let setup = |result: std::io::Result<()>| result.map_err(|source| ClientError::Connect { address, source });
        setup(stream.set_nodelay(true))?;
        let write_timeout = Duration::from_millis(config.command_timeout_ms.max(1000));
        setup(stream.set_write_timeout(Some(write_timeout)))?;
        Ok(QueueConnection::from_parts(stream, HostQueue::new(config, started), address, session))
    }

    /// Opens the connection and runs the TLS handshake with each PSK identity format
    /// `tls` allows in turn: a target that knows only format 0 (SPDK's, which
    /// implements TP 8011 alone) refuses a format 1 identity with an alert, and a new
    /// connection then offers format 0 (OpenSSL offers one identity per ClientHello).
    fn open_tls(
        address: SocketAddr,
        config: QueueConfig,
        deadline: Instant,
        started: Instant,
        tls: &TlsOptions,
    ) -> Result<Self, ClientError> {
        let versions = tls.identity_versions();
        let mut last_error = None;
        for (attempt, &version) in versions.iter().enumerate() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(last_error.unwrap_or(ClientError::Timeout));
            }
            let session = tls_session(tls, version, &config, address)?;
            let mut connection = QueueConnection::open(address, config.clone(), remaining, started, Some(session))?;
            match connection.handshake(deadline) {
                Ok(()) => return Ok(connection),
                // Refused (an alert, or the connection closed during the handshake):
                // the next format may be the one the target knows.
                Err(error @ (ClientError::Tls { .. } | ClientError::Io { .. })) if attempt + 1 < versions.len() => {
                    tracing::info!(
                        %address,
                        refused = version.number(),
                        next = versions[attempt + 1].number(),
                        %error,
                        "the target refused the TLS PSK identity format; trying the next one"
                    );
                    last_error = Some(error);
                }
                Err(ClientError::Tls { address, message }) => {
                    let tried: Vec<String> = versions[..=attempt].iter().map(|v| v.number().to_string()).collect();
                    let format_0_hint = if versions.contains(&nvme_auth::IdentityVersion::V0) {
                        ""
                    } else {
                        "; a target that knows only format 0 identities (SPDK's) needs format 0"
                    };
                    let message = format!(
                        "{message} (PSK identity format {} offered: the target derives the key from the \
                         configured PSK, this host's NQN and the subsystem NQN, so check all three{format_0_hint})",
                        tried.join(" then ")
                    );
                    return Err(ClientError::Tls { address, message });
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or(ClientError::Timeout))
    }

    /// ICReq/ICResp and Connect (and authentication) on an open connection.
    fn bring_up(mut self, deadline: Instant) -> Result<Self, ClientError> {
        loop {
            self.flush()?;
            match self.queue.state() {
                QueueState::Ready { .. } => return Ok(self),
                QueueState::Failed => {
                    let error = self.queue.error().cloned().unwrap_or(HostError::ConnectionLost);
                    // Best effort: an H2CTermReq may be pending.
                    let _ = self.flush();
                    return Err(ClientError::Protocol(error));
                }
                QueueState::Initializing | QueueState::Connecting | QueueState::Authenticating => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout);
            }
            self.receive(deadline - now)?;
        }
    }

    /// The socket, the queue, the peer and the TLS session, for a move onto a ring.
    pub(crate) fn into_parts(self) -> (TcpStream, HostQueue, SocketAddr, Option<Box<TlsSession>>) {
        (self.stream, self.queue, self.address, self.tls)
    }

    /// A connection back from a ring: the socket is still blocking, but its read
    /// timeout is not known any more.
    pub(crate) fn from_parts(
        stream: TcpStream,
        queue: HostQueue,
        address: SocketAddr,
        tls: Option<Box<TlsSession>>,
    ) -> Self {
        QueueConnection {
            stream,
            queue,
            address,
            receive_buffer: vec![0u8; RECEIVE_BUFFER_BYTES].into_boxed_slice(),
            batch: TransmitBatch::new(),
            send_buffer: if tls.is_some() { Vec::with_capacity(RECEIVE_BUFFER_BYTES) } else { Vec::new() },
            read_timeout: None,
            cipher_buffer: if tls.is_some() { vec![0u8; RECEIVE_BUFFER_BYTES] } else { Vec::new() },
            tls,
        }
    }

    fn io_error(&self, source: std::io::Error) -> ClientError {
        ClientError::Io { address: self.address, source }
    }

    fn tls_error(&self, error: impl std::fmt::Display) -> ClientError {
        ClientError::Tls { address: self.address, message: error.to_string() }
    }

    /// Runs the TLS handshake to its end, or fails by `deadline`.
    fn handshake(&mut self, deadline: Instant) -> Result<(), ClientError> {
        loop {
            let Some(session) = self.tls.as_mut() else { return Ok(()) };
            let progress = session.advance();
            let mut out = Vec::new();
            session.take_ciphertext(&mut out);
            if !out.is_empty() {
                self.stream.write_all(&out).map_err(|source| self.io_error(source))?;
            }
            match progress {
                Ok(Progress::Established) => return Ok(()),
                Ok(Progress::Handshaking) => {}
                Err(error) => return Err(self.tls_error(error)),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout);
            }
            self.set_read_timeout(deadline - now)?;
            let received = match self.stream.read(&mut self.cipher_buffer) {
                Ok(0) => {
                    return Err(self.tls_error("the target closed the connection during the handshake (no TLS here, or the key was refused)"))
                }
                Ok(count) => count,
                Err(error) if matches!(error.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock | ErrorKind::TimedOut) => 0,
                Err(error) => return Err(self.io_error(error)),
            };
            if received > 0 {
                let Some(session) = self.tls.as_mut() else { return Ok(()) };
                if let Err(error) = session.receive_ciphertext(&self.cipher_buffer[..received]) {
                    return Err(self.tls_error(error));
                }
            }
        }
    }

    fn set_read_timeout(&mut self, wait: Duration) -> Result<(), ClientError> {
        let wait = Duration::from_millis(wait.as_millis() as u64).clamp(MIN_READ_WAIT, MAX_READ_WAIT);
        if self.read_timeout != Some(wait) {
            self.stream.set_read_timeout(Some(wait)).map_err(|source| self.io_error(source))?;
            self.read_timeout = Some(wait);
        }
        Ok(())
    }

    /// Writes everything the queue wants to send: with vectored writes straight from
    /// the commands' buffers, or, on a TLS connection, copied into one plaintext
    /// buffer (the record layer copies anyway) and encrypted.
    pub(crate) fn flush(&mut self) -> Result<(), ClientError> {
        if self.queue.transmit_batch(&mut self.batch) == 0 {
            return Ok(());
        }
        let result = match self.tls.as_mut() {
            None => write_slices(&mut self.stream, self.batch.slices()),
            Some(session) => {
                self.send_buffer.clear();
                self.batch.copy_to(&mut self.send_buffer);
                match session.write_plaintext(&self.send_buffer) {
                    Ok(()) => {
                        self.send_buffer.clear();
                        session.take_ciphertext(&mut self.send_buffer);
                        self.stream.write_all(&self.send_buffer)
                    }
                    Err(error) => {
                        self.batch.clear();
                        return Err(self.tls_error(error));
                    }
                }
            }
        };
        // Written or failed, the batch lets go of the commands' data, so their
        // completions are not held back.
        self.batch.clear();
        result.map_err(|source| self.io_error(source))
    }

    /// Hands bytes read from the socket to the queue (decrypting them first on a TLS
    /// connection).
    fn deliver(&mut self, count: usize, now: Instant) -> Result<(), ClientError> {
        let Some(session) = self.tls.as_mut() else {
            self.queue.handle_received(&self.receive_buffer[..count], now);
            return Ok(());
        };
        if let Err(error) = session.receive_ciphertext(&self.cipher_buffer[..count]) {
            return Err(self.tls_error(error));
        }
        let queue = &mut self.queue;
        session
            .deliver_plaintext(&mut self.receive_buffer, |plain| {
                queue.handle_received(plain, now);
                true
            })
            .map_err(|error| ClientError::Tls { address: self.address, message: error.to_string() })
    }

    /// Waits up to `wait` for bytes, feeds what arrives (all of it that is already
    /// there, up to one buffer) and runs the queue's timers. Returns whether bytes
    /// came. A closed or broken socket is an error.
    pub(crate) fn receive(&mut self, wait: Duration) -> Result<bool, ClientError> {
        // Whole milliseconds: the timeout is only re-set (one setsockopt) when it
        // changes, and finer values buy nothing from a jiffy-based kernel timer.
        self.set_read_timeout(wait)?;
        let received = loop {
            let target = if self.tls.is_some() { &mut self.cipher_buffer[..] } else { &mut self.receive_buffer[..] };
            match self.stream.read(target) {
                Ok(0) => return Err(self.io_error(ErrorKind::UnexpectedEof.into())),
                Ok(count) => break count,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break 0,
                Err(error) => return Err(self.io_error(error)),
            }
        };
        let now = Instant::now();
        if received > 0 {
            self.deliver(received, now)?;
        }
        self.queue.handle_timeout(now);
        Ok(received > 0)
    }

    /// Reads whatever has already arrived, without waiting.
    pub(crate) fn receive_available(&mut self) -> Result<(), ClientError> {
        self.stream.set_nonblocking(true).map_err(|source| self.io_error(source))?;
        let mut result = Ok(());
        loop {
            let target = if self.tls.is_some() { &mut self.cipher_buffer[..] } else { &mut self.receive_buffer[..] };
            let capacity = target.len();
            match self.stream.read(target) {
                Ok(0) => {
                    result = Err(self.io_error(ErrorKind::UnexpectedEof.into()));
                    break;
                }
                Ok(count) => {
                    if let Err(error) = self.deliver(count, Instant::now()) {
                        result = Err(error);
                        break;
                    }
                    if count < capacity {
                        break;
                    }
                }
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                Err(error) => {
                    result = Err(self.io_error(error));
                    break;
                }
            }
        }
        let restored = self.stream.set_nonblocking(false).map_err(|source| self.io_error(source));
        self.queue.handle_timeout(Instant::now());
        result.and(restored)
    }

    /// How long the next wait may last, given the caller's `deadline` and the
    /// queue's own timers.
    pub(crate) fn wait_until(&self, deadline: Instant) -> Duration {
        let until = self.queue.next_deadline().map_or(deadline, |queue_deadline| queue_deadline.min(deadline));
        until.saturating_duration_since(Instant::now())
    }

    /// Turns the connection's end into a `LinkFailure`: takes back every command.
    pub(crate) fn into_failure(mut self, error: ClientError) -> LinkFailure {
        let queue_error = self.queue.error().cloned();
        // A pending H2CTermReq goes out if the socket still takes it.
        if queue_error.is_some() {
            let _ = self.flush();
        }
        let completed = std::iter::from_fn(|| self.queue.poll_completion()).collect();
        let abandoned = self.queue.abandon(HostError::ConnectionLost);
        LinkFailure { error, queue_error, abandoned, completed }
    }

    /// The error to report when the queue failed by itself.
    pub(crate) fn queue_failure(&self) -> Option<ClientError> {
        (self.queue.state() == QueueState::Failed)
            .then(|| ClientError::Protocol(self.queue.error().cloned().unwrap_or(HostError::ConnectionLost)))
    }

    /// Submits `command` and waits for its completion (bounded by the queue's
    /// command timeout). Completions of other commands go to `other`, which may
    /// return a command to submit in turn (a re-armed AER).
    pub(crate) fn execute(
        &mut self,
        mut command: HostCommand,
        tag: u64,
        other: &mut dyn FnMut(HostCompletion) -> Option<HostCommand>,
    ) -> Result<HostCompletion, ClientError> {
        command.user_tag = tag;
        self.queue.submit(command, Instant::now()).map_err(|error| match error {
            nvme_host::SubmitError::NotReady(_) => self.queue_failure().unwrap_or(ClientError::Closed),
            other => ClientError::InvalidArgument(other.to_string()),
        })?;
        loop {
            self.flush()?;
            while let Some(completion) = self.queue.poll_completion() {
                if completion.user_tag == tag {
                    return Ok(completion);
                }
                if let Some(next) = other(completion) {
                    if let Err(error) = self.queue.submit(next, Instant::now()) {
                        tracing::warn!(%error, "could not resubmit a command");
                    }
                }
            }
            if let Some(error) = self.queue_failure() {
                return Err(error);
            }
            let wait = self.wait_until(Instant::now() + MAX_READ_WAIT);
            self.receive(wait)?;
        }
    }
}

/// Writes every piece to `writer` with vectored writes of up to
/// [`SLICES_PER_WRITE`] pieces, resuming a partial write at the byte it stopped at
/// (inside a piece too). Allocates nothing.
fn write_slices<'a>(writer: &mut impl Write, slices: impl Iterator<Item = &'a [u8]>) -> std::io::Result<()> {
    let mut slices = slices.filter(|slice| !slice.is_empty());
    let mut window = [IoSlice::new(&[]); SLICES_PER_WRITE];
    loop {
        let mut count = 0;
        for slice in slices.by_ref().take(SLICES_PER_WRITE) {
            window[count] = IoSlice::new(slice);
            count += 1;
        }
        if count == 0 {
            return Ok(());
        }
        let mut unwritten = &mut window[..count];
        while !unwritten.is_empty() {
            match writer.write_vectored(unwritten) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(written) => IoSlice::advance_slices(&mut unwritten, written),
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
}

/// A client TLS session offering `tls`'s key for the queue's host and subsystem, with
/// a PSK identity in format `version`.
fn tls_session(
    tls: &TlsOptions,
    version: nvme_auth::IdentityVersion,
    config: &QueueConfig,
    address: SocketAddr,
) -> Result<Box<TlsSession>, ClientError> {
    let failed = |message: String| ClientError::Tls { address, message };
    let identity = tls
        .key
        .identity_with(&config.host_nqn, &config.subsystem_nqn, version, tls.derivation)
        .map_err(|error| failed(error.to_string()))?;
    let key = tls.key.tls_psk_with(&identity, tls.derivation).map_err(|error| failed(error.to_string()))?;
    let client = TlsClient::shared().map_err(|error| failed(error.to_string()))?;
    let session = client
        .session(identity.to_string().as_bytes(), PskChoice::for_key(key))
        .map_err(|error| failed(error.to_string()))?;
    Ok(Box::new(session))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes a pseudo-random number of bytes per call (1 up to a
    /// limit), cutting pieces anywhere, and sometimes says Interrupted.
    struct Trickle {
        written: Vec<u8>,
        state: u64,
        limit: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.write_vectored(&[IoSlice::new(data)])
        }

        fn write_vectored(&mut self, pieces: &[IoSlice<'_>]) -> std::io::Result<usize> {
            self.state = self.state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            if self.state >> 60 == 0 {
                return Err(ErrorKind::Interrupted.into());
            }
            let mut budget = 1 + (self.state >> 33) as usize % self.limit;
            let mut taken = 0;
            for piece in pieces {
                let take = piece.len().min(budget);
                self.written.extend_from_slice(&piece[..take]);
                budget -= take;
                taken += take;
                if budget == 0 {
                    break;
                }
            }
            Ok(taken)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_vectored_writes_resume_at_the_right_byte() {
        for seed in 0..200u64 {
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = |bound: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % bound
            };
            // Up to three windows of pieces, empty ones among them.
            let pieces: Vec<Vec<u8>> =
                (0..next(200)).map(|index| (0..next(300)).map(|byte| (index * 7 + byte) as u8).collect()).collect();
            let expected: Vec<u8> = pieces.concat();
            let limit = [1, 7, 100, 5000][seed as usize % 4];
            let mut writer = Trickle { written: Vec::new(), state: seed, limit };
            write_slices(&mut writer, pieces.iter().map(Vec::as_slice)).unwrap();
            assert!(writer.written == expected, "seed {seed}: {} bytes written, {} expected", writer.written.len(), expected.len());
        }
    }
}

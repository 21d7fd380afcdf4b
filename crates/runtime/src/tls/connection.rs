//! A [`ConnectionHandler`] wrapped in TLS: the socket carries TLS records, the inner
//! handler sees plaintext as if there were none. A listener with TLS optional tells
//! a TLS client from a plain one by the first byte (22, a TLS handshake record, cannot
//! start an NVMe/TCP ICReq, whose PDU type is 0).

use std::sync::Arc;
use std::time::Instant;

use super::{Progress, PskLookup, TlsError, TlsServer, TlsSession, MAX_TLS_PENDING_CIPHERTEXT_BYTES};
use crate::send::{for_each_slice, IovecScratch};
use crate::{CloseReason, ConnectionHandler, SendParts, SendSource};

/// TLS record content type "handshake": the first byte of every ClientHello.
const TLS_HANDSHAKE_RECORD: u8 = 22;
/// Plaintext handed to the inner handler per call: one TLS record at most.
const PLAINTEXT_CHUNK_BYTES: usize = 16 * 1024;
/// Ciphertext fed to the session per step, so its buffer stays far below its limit
/// however much one receive brought.
const CIPHERTEXT_STEP_BYTES: usize = 16 * 1024;
/// Plaintext encrypted into one send batch before it goes out (further inner
/// batches wait for the next one): bounds the batch buffer.
const MAX_ENCRYPTED_BATCH_BYTES: usize = 512 * 1024;
/// Largest plaintext of one TLS record (RFC 8446, section 5.1: 2^14 bytes).
const TLS_RECORD_PLAINTEXT_BYTES: usize = 16 * 1024;

/// Encrypts what `staging` gathered as one record and empties it.
fn flush_staging(session: &mut TlsSession, staging: &mut Vec<u8>) -> Result<(), TlsError> {
    if staging.is_empty() {
        return Ok(());
    }
    let written = session.write_plaintext(staging);
    staging.clear();
    written
}

/// What a listener does about TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsPolicy {
    /// TLS or plain, per connection.
    Optional,
    /// TLS only.
    Required,
}

/// The TLS side of one listener: shared by its connections.
#[derive(Clone)]
pub struct TlsListener {
    server: Arc<TlsServer>,
    policy: TlsPolicy,
    lookup: PskLookup,
}

impl TlsListener {
    /// A listener's TLS: `lookup` finds the PSK for an identity.
    pub fn new(policy: TlsPolicy, lookup: PskLookup) -> Result<TlsListener, TlsError> {
        Ok(TlsListener { server: Arc::new(TlsServer::new()?), policy, lookup })
    }
}

enum Stage {
    /// Plain NVMe/TCP: bytes pass through.
    Plain,
    /// Waiting for the first byte to tell TLS from plain.
    Undecided(TlsListener),
    /// TLS: handshaking or established.
    Tls { session: Box<TlsSession>, established: bool },
    /// Refused or failed: waiting to close, after sending any alert the session has.
    Closing(Option<Box<TlsSession>>),
}

/// A send batch of a [`TlsConnection`]: the inner handler's own (plain) or ciphertext.
pub enum TlsBatch<B> {
    /// A plain connection's batch, untouched.
    Plain(B),
    /// Encrypted records.
    Cipher(Vec<u8>),
}

impl<B: SendSource> SendSource for TlsBatch<B> {
    fn parts<'a>(&'a self, out: &mut SendParts<'a>) {
        match self {
            TlsBatch::Plain(batch) => batch.parts(out),
            TlsBatch::Cipher(bytes) => out.bytes(bytes),
        }
    }

    fn total_len(&self) -> usize {
        match self {
            TlsBatch::Plain(batch) => batch.total_len(),
            TlsBatch::Cipher(bytes) => bytes.len(),
        }
    }
}

/// An inner handler behind an optional TLS layer.
pub struct TlsConnection<H: ConnectionHandler> {
    inner: H,
    stage: Stage,
    peer: String,
    plaintext: Vec<u8>,
    /// Small send parts gathered into one record (at most one record's plaintext).
    staging: Vec<u8>,
    /// A spare ciphertext buffer (the one the last send returned).
    spare: Vec<u8>,
    iovecs: IovecScratch,
    /// The latest time the runtime gave; the inner handler's `on_sent` needs one.
    now: Instant,
    /// Why TLS failed, for a caller that reports the closed connection (the host).
    failure: Option<String>,
    /// A close_notify was queued (the inner handler wants to close and sent all it
    /// had): nothing more goes through the session.
    close_notify_sent: bool,
}

impl<H: ConnectionHandler> TlsConnection<H> {
    /// `inner` without TLS: every call passes straight through.
    pub fn plain(inner: H, now: Instant) -> Self {
        Self::with_stage(inner, Stage::Plain, String::new(), now)
    }

    /// `inner` on a listener with TLS; `peer` names the connection in log lines.
    pub fn new(inner: H, listener: &TlsListener, peer: String, now: Instant) -> Self {
        Self::with_stage(inner, Stage::Undecided(listener.clone()), peer, now)
    }

    /// `inner` over a client session whose handshake already finished (the host
    /// shakes hands on its blocking socket, then moves the connection onto a ring);
    /// `peer` names the connection in log lines.
    pub fn established(inner: H, session: Box<TlsSession>, peer: String, now: Instant) -> Self {
        Self::with_stage(inner, Stage::Tls { session, established: true }, peer, now)
    }

    /// Why the session failed, once it has: the connection then closes, and a caller
    /// that reports the close (the host) says this rather than "end of file".
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The wrapped handler, mutably.
    pub fn inner_mut(&mut self) -> &mut H {
        &mut self.inner
    }

    /// The handler and, on a TLS connection, its session (to move the connection
    /// back off the ring).
    pub fn into_parts(self) -> (H, Option<Box<TlsSession>>) {
        let session = match self.stage {
            Stage::Tls { session, .. } | Stage::Closing(Some(session)) => Some(session),
            _ => None,
        };
        (self.inner, session)
    }

    fn with_stage(inner: H, stage: Stage, peer: String, now: Instant) -> Self {
        TlsConnection {
            inner,
            stage,
            peer,
            plaintext: Vec::new(),
            staging: Vec::new(),
            spare: Vec::new(),
            iovecs: IovecScratch::default(),
            now,
            failure: None,
            close_notify_sent: false,
        }
    }

    /// The wrapped handler.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// Whether this connection runs TLS (false while undecided).
    pub fn is_tls(&self) -> bool {
        matches!(self.stage, Stage::Tls { .. })
    }

    fn fail(&mut self, error: &TlsError) {
        // A close_notify is the orderly end of a session (SPDK's host sends one at
        // every disconnect), not a failure worth a warning.
        if matches!(error, TlsError::Closed) {
            tracing::debug!(peer = %self.peer, "TLS: the peer closed the session (close_notify); closing the connection");
        } else {
            tracing::warn!(peer = %self.peer, %error, "TLS: closing the connection");
        }
        self.failure = Some(error.to_string());
        let session = match std::mem::replace(&mut self.stage, Stage::Closing(None)) {
            Stage::Tls { session, .. } => Some(session),
            _ => None,
        };
        self.stage = Stage::Closing(session);
    }

    /// Feeds ciphertext to the session step by step, finishing the handshake and
    /// handing plaintext to the inner handler as it appears.
    fn receive_tls(&mut self, mut data: &[u8], now: Instant) {
        while !data.is_empty() {
            // Bytes after the inner handler asked to close are discarded (its last
            // PDUs, such as a C2HTermReq, still go out through take_send).
            if self.inner.wants_close() {
                return;
            }
            let step = data.len().min(CIPHERTEXT_STEP_BYTES);
            let (chunk, rest) = data.split_at(step);
            data = rest;
            let Stage::Tls { session, established } = &mut self.stage else { return };
            let outcome = session.receive_ciphertext(chunk).and_then(|()| session.advance());
            let progress = match outcome {
                Ok(progress) => progress,
                Err(error) => return self.fail(&error),
            };
            if progress == Progress::Established && !*established {
                *established = true;
                tracing::debug!(peer = %self.peer, cipher = ?session.cipher_name(), "TLS established");
                let identity = session.psk_identity().unwrap_or_default();
                self.inner.on_secure_channel(&identity);
            }
            if let Err(error) = self.deliver_plaintext(now) {
                return self.fail(&error);
            }
            if let Stage::Tls { session, .. } = &self.stage {
                if session.pending_ciphertext_bytes() > MAX_TLS_PENDING_CIPHERTEXT_BYTES {
                    return self.fail(&TlsError::Backlog);
                }
            }
        }
    }

    fn deliver_plaintext(&mut self, now: Instant) -> Result<(), TlsError> {
        if self.plaintext.len() < PLAINTEXT_CHUNK_BYTES {
            self.plaintext.resize(PLAINTEXT_CHUNK_BYTES, 0);
        }
        let Stage::Tls { session, established: true } = &mut self.stage else { return Ok(()) };
        if self.inner.wants_close() {
            return Ok(());
        }
        let inner = &mut self.inner;
        session.deliver_plaintext(&mut self.plaintext, |plain| {
            inner.on_receive(plain, now);
            !inner.wants_close()
        })
    }

    /// Encrypts what the inner handler has to send (several of its batches, up to a
    /// bound) and returns the ciphertext, with any handshake records before it.
    fn take_tls_send(&mut self) -> Option<TlsBatch<H::Batch>> {
        if let Stage::Tls { session, established: true } = &mut self.stage {
            // Small parts (PDU headers, a 4 KiB read's data, a response capsule) are
            // gathered into whole records first: each SSL_write makes at least one
            // record, with its own header, tag and call overhead. Parts of a record's
            // size or more go straight to the session.
            let staging = &mut self.staging;
            let mut encrypted = 0;
            let mut failure = None;
            let mut inner_done = false;
            while encrypted < MAX_ENCRYPTED_BATCH_BYTES && failure.is_none() && !self.close_notify_sent {
                let Some(batch) = self.inner.take_send() else {
                    inner_done = true;
                    break;
                };
                for_each_slice(&batch, &mut self.iovecs, |slice| {
                    if failure.is_some() {
                        return;
                    }
                    if slice.len() >= TLS_RECORD_PLAINTEXT_BYTES {
                        failure = flush_staging(session, staging).and_then(|()| session.write_plaintext(slice)).err();
                        return;
                    }
                    if staging.len() + slice.len() > TLS_RECORD_PLAINTEXT_BYTES {
                        failure = flush_staging(session, staging).err();
                    }
                    staging.extend_from_slice(slice);
                });
                encrypted += batch.total_len();
                self.inner.on_sent(batch, self.now);
            }
            if failure.is_none() {
                failure = flush_staging(session, staging).err();
            }
            // An orderly close (a Disconnect, a C2HTermReq, a timeout) ends the
            // session with close_notify after the last data, so the peer knows the
            // stream ended here and was not cut.
            if failure.is_none() && inner_done && !self.close_notify_sent && self.inner.wants_close() {
                self.close_notify_sent = true;
                failure = session.close_notify().err();
            }
            if let Some(error) = failure {
                self.fail(&error);
                return None;
            }
        }
        let session = match &mut self.stage {
            Stage::Tls { session, .. } | Stage::Closing(Some(session)) => session,
            _ => return None,
        };
        if !session.has_ciphertext() {
            return None;
        }
        let mut bytes = std::mem::take(&mut self.spare);
        session.take_ciphertext(&mut bytes);
        Some(TlsBatch::Cipher(bytes))
    }
}

impl<H: ConnectionHandler> ConnectionHandler for TlsConnection<H> {
    type Batch = TlsBatch<H::Batch>;

    fn on_receive(&mut self, data: &[u8], now: Instant) {
        self.now = now;
        if let Stage::Undecided(listener) = &self.stage {
            let Some(&first) = data.first() else { return };
            if first == TLS_HANDSHAKE_RECORD {
                match listener.server.session(Arc::clone(&listener.lookup)) {
                    Ok(session) => self.stage = Stage::Tls { session: Box::new(session), established: false },
                    Err(error) => return self.fail(&error),
                }
            } else if listener.policy == TlsPolicy::Optional {
                self.stage = Stage::Plain;
            } else {
                tracing::warn!(peer = %self.peer,
                    "TLS is required on this listener and the host started without a TLS handshake \
                     (plain NVMe/TCP ICReq?); closing. Connect with TLS (nvme connect --tls) or use a listener without tls = \"required\"");
                self.stage = Stage::Closing(None);
                return;
            }
        }
        match self.stage {
            Stage::Plain => self.inner.on_receive(data, now),
            Stage::Tls { .. } => self.receive_tls(data, now),
            Stage::Undecided(_) | Stage::Closing(_) => {}
        }
    }

    fn take_send(&mut self) -> Option<Self::Batch> {
        match self.stage {
            Stage::Plain => self.inner.take_send().map(TlsBatch::Plain),
            Stage::Tls { .. } | Stage::Closing(_) => self.take_tls_send(),
            Stage::Undecided(_) => None,
        }
    }

    fn on_sent(&mut self, batch: Self::Batch, now: Instant) {
        self.now = now;
        match batch {
            TlsBatch::Plain(batch) => self.inner.on_sent(batch, now),
            TlsBatch::Cipher(mut bytes) => {
                bytes.clear();
                self.spare = bytes;
            }
        }
    }

    fn on_timer(&mut self, now: Instant) {
        self.now = now;
        self.inner.on_timer(now);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.inner.next_deadline()
    }

    fn has_pending_work(&self) -> bool {
        self.inner.has_pending_work()
    }

    fn awaits_storage(&self) -> bool {
        self.inner.awaits_storage()
    }

    fn activity(&self) -> crate::HandlerActivity {
        self.inner.activity()
    }

    fn poll(&mut self, now: Instant) {
        self.now = now;
        self.inner.poll(now);
    }

    fn wants_close(&self) -> bool {
        matches!(self.stage, Stage::Closing(_)) || self.inner.wants_close()
    }

    fn awaits_rest_of_message(&self) -> bool {
        match &self.stage {
            Stage::Plain => self.inner.awaits_rest_of_message(),
            // A record partly received, or a PDU partly decrypted.
            Stage::Tls { session, .. } => session.has_partial_record() || self.inner.awaits_rest_of_message(),
            Stage::Undecided(_) | Stage::Closing(_) => false,
        }
    }

    fn on_closed(&mut self, reason: CloseReason) {
        self.inner.on_closed(reason);
    }

    fn drain(&mut self, now: Instant) -> bool {
        self.inner.drain(now)
    }

    fn on_secure_channel(&mut self, psk_identity: &[u8]) {
        self.inner.on_secure_channel(psk_identity);
    }
}

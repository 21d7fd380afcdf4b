//! TLS 1.3 with external pre-shared keys for NVMe/TCP (TP 8011), sans-io: ciphertext
//! in, plaintext out, and the other way. The record layer runs here, in user space,
//! over memory buffers; the caller moves the bytes between these buffers and its
//! socket. (Where the kernel offers kTLS the record layer could move there instead;
//! this machine's kernel has no `tls` module, so user space is the path measured.)
//!
//! OpenSSL 3 (the system's libssl) does the protocol: TLS 1.3 only, the two suites the
//! NVMe/TCP transport allows (TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384), PSK
//! authentication only (no certificates), no session tickets. Which PSK belongs to
//! which identity is the caller's business: a server session asks a [`PskLookup`].

mod connection;
mod framing;
mod psk;

pub use connection::{TlsBatch, TlsConnection, TlsListener, TlsPolicy};

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use openssl::ex_data::Index;
use openssl::ssl::{
    ClientHelloResponse, ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslStream,
    SslVerifyMode, SslVersion,
};
use zeroize::Zeroizing;

/// Ciphertext a session buffers before the caller must let it process some: a TLS
/// record is at most 16 KiB of plaintext plus 256 bytes of overhead; four records
/// is ample for a receive that outran the reader. The caller stops receiving above it.
pub const MAX_TLS_BUFFERED_CIPHERTEXT_BYTES: usize = 4 * (16 * 1024 + 256);

/// Most of a refused PSK identity shown in the log line (NVMe identities are at most
/// 521 bytes; a peer may send 64 KiB).
const MAX_LOGGED_IDENTITY_BYTES: usize = 600;

/// Ciphertext the session may hold for the peer before the connection is failed: a
/// peer that keeps sending KeyUpdate requests (each answered) without reading would
/// otherwise grow it without bound. Well above the largest send batch.
pub const MAX_TLS_PENDING_CIPHERTEXT_BYTES: usize = 2 * 1024 * 1024;

/// The TLS 1.3 cipher suites the NVMe/TCP transport allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CipherSuite {
    /// TLS_AES_128_GCM_SHA256 (for PSKs with hash 01).
    Aes128GcmSha256,
    /// TLS_AES_256_GCM_SHA384 (for PSKs with hash 02).
    Aes256GcmSha384,
}

impl CipherSuite {
    /// The suite's name, as OpenSSL and the RFC spell it.
    pub fn name(self) -> &'static str {
        match self {
            CipherSuite::Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            CipherSuite::Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
        }
    }

    /// The suite's code point (RFC 8446, appendix B.4).
    fn id_bytes(self) -> [u8; 2] {
        match self {
            CipherSuite::Aes128GcmSha256 => [0x13, 0x01],
            CipherSuite::Aes256GcmSha384 => [0x13, 0x02],
        }
    }
}

/// A PSK for one identity, and the suite it is for. Zeroed on drop.
pub struct PskChoice {
    /// The TLS PSK (32 bytes for SHA-256, 48 for SHA-384).
    pub key: Zeroizing<Vec<u8>>,
    /// The suite the key is for.
    pub suite: CipherSuite,
}

impl PskChoice {
    /// `key` with the suite of its hash. A retained PSK is as long as its hash (RFC
    /// 8446's HKDF-Expand-Label output): 48 bytes is SHA-384 and
    /// TLS_AES_256_GCM_SHA384, anything else SHA-256 and TLS_AES_128_GCM_SHA256.
    pub fn for_key(key: Zeroizing<Vec<u8>>) -> PskChoice {
        let suite = if key.len() == SHA384_BYTES { CipherSuite::Aes256GcmSha384 } else { CipherSuite::Aes128GcmSha256 };
        PskChoice { key, suite }
    }
}

/// Bytes of a SHA-384 digest, and so of a PSK for TLS_AES_256_GCM_SHA384.
const SHA384_BYTES: usize = 48;

/// Finds the PSK of an identity a client offered; `None` refuses it. Runs inside the
/// handshake, on the thread driving the session: it must not block.
pub type PskLookup = Arc<dyn Fn(&[u8]) -> Option<PskChoice> + Send + Sync>;

/// Why TLS failed. The messages hold OpenSSL's reason, never key material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// OpenSSL could not be set up (library or configuration problem).
    #[error("TLS setup failed: {0}")]
    Setup(String),
    /// The handshake failed: unknown identity, wrong key, a protocol the transport
    /// does not allow (TLS 1.2, a certificate handshake), or garbage.
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    /// The peer sent more ciphertext than [`MAX_TLS_BUFFERED_CIPHERTEXT_BYTES`]
    /// before the session could use it.
    #[error("TLS: more than {MAX_TLS_BUFFERED_CIPHERTEXT_BYTES} bytes of unprocessed ciphertext")]
    Overrun,
    /// More than [`MAX_TLS_PENDING_CIPHERTEXT_BYTES`] wait to be sent: the peer makes
    /// the session answer (KeyUpdate) faster than it reads.
    #[error("TLS: more than {MAX_TLS_PENDING_CIPHERTEXT_BYTES} bytes wait for a peer that does not read them")]
    Backlog,
    /// A record failed to decrypt or the peer broke the protocol after the handshake.
    #[error("TLS record layer: {0}")]
    Record(String),
    /// The peer closed the TLS session (close_notify).
    #[error("the peer closed the TLS session")]
    Closed,
}

/// What a server session knows while and after it shakes hands.
struct ServerState {
    lookup: PskLookup,
    /// The identity whose PSK was chosen. (A mutex because ex_data must be Sync; it
    /// is touched once per handshake, never on the data path.)
    chosen: Mutex<Option<Vec<u8>>>,
    /// The last identity the lookup refused, for the log line.
    refused: Mutex<Option<Vec<u8>>>,
    /// Identities looked up in this handshake (bounded by
    /// `psk::MAX_IDENTITIES_LOOKED_UP`).
    lookups: std::sync::atomic::AtomicUsize,
    /// What the ClientHello callback found (identity and its PSK), so the
    /// find-session callback that follows does not derive the key again.
    found: Mutex<Option<(Vec<u8>, PskChoice)>>,
}

impl ServerState {
    /// The PSK the ClientHello callback found for `identity`, taken (once).
    fn take_found(&self, identity: &[u8]) -> Option<PskChoice> {
        let mut found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        match found.take() {
            Some((known, choice)) if known == identity => Some(choice),
            other => {
                *found = other;
                None
            }
        }
    }

    fn record_identity(&self, identity: &[u8]) {
        *self.chosen.lock().unwrap_or_else(PoisonError::into_inner) = Some(identity.to_vec());
    }

    fn record_refusal(&self, identity: &[u8]) {
        // Kept short: it goes into a log line, and a peer chooses its length.
        let shown = &identity[..identity.len().min(MAX_LOGGED_IDENTITY_BYTES)];
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(shown.to_vec());
    }
}

/// What a client session offers.
struct ClientState {
    identity: Vec<u8>,
    key: Zeroizing<Vec<u8>>,
    suite: CipherSuite,
}

fn server_state_index() -> Option<Index<Ssl, ServerState>> {
    static INDEX: OnceLock<Option<Index<Ssl, ServerState>>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().ok())
}

fn client_state_index() -> Option<Index<Ssl, ClientState>> {
    static INDEX: OnceLock<Option<Index<Ssl, ClientState>>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().ok())
}

fn setup_error(error: impl std::fmt::Display) -> TlsError {
    TlsError::Setup(error.to_string())
}

/// TLS 1.3 only, the transport's two suites, no certificates, no tickets.
fn context_builder() -> Result<SslContextBuilder, TlsError> {
    let mut builder = SslContextBuilder::new(SslMethod::tls()).map_err(setup_error)?;
    builder.set_min_proto_version(Some(SslVersion::TLS1_3)).map_err(setup_error)?;
    builder.set_max_proto_version(Some(SslVersion::TLS1_3)).map_err(setup_error)?;
    builder.set_ciphersuites("TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384").map_err(setup_error)?;
    builder.set_options(SslOptions::NO_TICKET);
    builder.set_num_tickets(0).map_err(setup_error)?;
    builder.set_verify(SslVerifyMode::NONE);
    Ok(builder)
}

/// The server side's shared configuration: make one per listener, a session per
/// connection.
pub struct TlsServer {
    context: SslContext,
}

impl TlsServer {
    /// A server configuration.
    pub fn new() -> Result<TlsServer, TlsError> {
        let mut builder = context_builder()?;
        psk::install_server_callback(&mut builder);
        // OpenSSL picks the cipher suite before it looks at PSKs, by the client's
        // preference; a PSK only works with a suite of its own hash, and there is no
        // certificate to fall back on. So look the offered identities up first and
        // allow only the suite of the first key found (GnuTLS, which Linux's tlshd
        // uses, prefers TLS_AES_256_GCM_SHA384 even for a SHA-256 key).
        builder.set_client_hello_callback(|ssl, _alert| {
            let suite = server_state_index().and_then(|index| {
                let state = ssl.ex_data(index)?;
                let identities = psk::offered_identities(ssl);
                // A panic must not unwind into C (the crate does not catch it here).
                let lookup = || {
                    identities
                        .into_iter()
                        .find_map(|identity| (state.lookup)(identity).map(|choice| (identity.to_vec(), choice)))
                };
                let (identity, choice) =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(lookup)).ok().flatten()?;
                let suite = choice.suite;
                *state.found.lock().unwrap_or_else(PoisonError::into_inner) = Some((identity, choice));
                Some(suite)
            });
            if let Some(suite) = suite {
                ssl.set_ciphersuites(suite.name())?;
            }
            Ok(ClientHelloResponse::SUCCESS)
        });
        Ok(TlsServer { context: builder.build() })
    }

    /// A session for one accepted connection; `lookup` finds PSKs by identity.
    pub fn session(&self, lookup: PskLookup) -> Result<TlsSession, TlsError> {
        let index = server_state_index().ok_or_else(|| setup_error("no ex_data index"))?;
        let mut ssl = Ssl::new(&self.context).map_err(setup_error)?;
        ssl.set_ex_data(
            index,
            ServerState {
                lookup,
                chosen: Default::default(),
                refused: Default::default(),
                lookups: Default::default(),
                found: Default::default(),
            },
        );
        ssl.set_accept_state();
        TlsSession::new(ssl, Role::Server)
    }
}

/// The client side's shared configuration.
pub struct TlsClient {
    context: SslContext,
}

impl TlsClient {
    /// A client configuration.
    pub fn new() -> Result<TlsClient, TlsError> {
        let mut builder = context_builder()?;
        psk::install_client_callback(&mut builder);
        Ok(TlsClient { context: builder.build() })
    }

    /// The process's client configuration, made once (an OpenSSL context per queue
    /// would cost a context build per connection for nothing: it holds no key).
    pub fn shared() -> Result<&'static TlsClient, TlsError> {
        static SHARED: OnceLock<TlsClient> = OnceLock::new();
        if let Some(client) = SHARED.get() {
            return Ok(client);
        }
        let client = TlsClient::new()?;
        Ok(SHARED.get_or_init(|| client))
    }

    /// A session that offers `identity` with `psk`.
    pub fn session(&self, identity: &[u8], psk: PskChoice) -> Result<TlsSession, TlsError> {
        let index = client_state_index().ok_or_else(|| setup_error("no ex_data index"))?;
        let mut ssl = Ssl::new(&self.context).map_err(setup_error)?;
        // Offer only the key's suite: a server that picked the other one could not use
        // the PSK (its hash must be the suite's), and there is no certificate to fall
        // back on.
        ssl.set_ciphersuites(psk.suite.name()).map_err(setup_error)?;
        ssl.set_ex_data(index, ClientState { identity: identity.to_vec(), key: psk.key, suite: psk.suite });
        ssl.set_connect_state();
        TlsSession::new(ssl, Role::Client)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Server,
    Client,
}

/// Ciphertext buffers between the socket and OpenSSL: reads drain `incoming` (and
/// say "would block" when it is empty), writes append to `outgoing`.
#[derive(Default)]
struct MemoryPipe {
    incoming: VecDeque<u8>,
    outgoing: Vec<u8>,
}

impl Read for MemoryPipe {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.incoming.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.incoming.read(out)
    }
}

impl Write for MemoryPipe {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.outgoing.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where a session stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The handshake needs more bytes from the peer.
    Handshaking,
    /// Application data may flow.
    Established,
}

/// One connection's TLS session.
pub struct TlsSession {
    stream: SslStream<MemoryPipe>,
    role: Role,
    established: bool,
    /// Record boundaries of the ciphertext received.
    framing: framing::RecordFraming,
}

impl TlsSession {
    fn new(ssl: Ssl, role: Role) -> Result<TlsSession, TlsError> {
        let stream = SslStream::new(ssl, MemoryPipe::default()).map_err(setup_error)?;
        Ok(TlsSession { stream, role, established: false, framing: framing::RecordFraming::default() })
    }

    /// Takes ciphertext received from the peer.
    pub fn receive_ciphertext(&mut self, bytes: &[u8]) -> Result<(), TlsError> {
        let pipe = self.stream.get_mut();
        if pipe.incoming.len() + bytes.len() > MAX_TLS_BUFFERED_CIPHERTEXT_BYTES {
            return Err(TlsError::Overrun);
        }
        pipe.incoming.extend(bytes);
        self.framing.advance(bytes);
        Ok(())
    }

    /// Runs the handshake as far as the bytes received allow. Ciphertext to send may
    /// be waiting afterwards either way.
    pub fn advance(&mut self) -> Result<Progress, TlsError> {
        if self.established {
            return Ok(Progress::Established);
        }
        match self.stream.do_handshake() {
            Ok(()) => {
                self.established = true;
                Ok(Progress::Established)
            }
            Err(error) if error.code() == ErrorCode::WANT_READ => Ok(Progress::Handshaking),
            Err(error) => Err(TlsError::Handshake(self.describe_failure(&error))),
        }
    }

    fn describe_failure(&self, error: &openssl::ssl::Error) -> String {
        if self.role == Role::Server {
            if let Some(index) = server_state_index() {
                let state = self.stream.ssl().ex_data(index);
                let refused =
                    state.and_then(|state| state.refused.lock().unwrap_or_else(PoisonError::into_inner).clone());
                if let Some(identity) = refused {
                    return format!("no key for PSK identity {:?}", String::from_utf8_lossy(&identity));
                }
            }
        }
        error.to_string()
    }

    /// Plaintext from the peer into `out`: `Ok(0)` when no whole record is there yet.
    pub fn read_plaintext(&mut self, out: &mut [u8]) -> Result<usize, TlsError> {
        if out.is_empty() {
            return Ok(0);
        }
        match self.stream.ssl_read(out) {
            Ok(count) => Ok(count),
            Err(error) if error.code() == ErrorCode::WANT_READ => Ok(0),
            Err(error) if error.code() == ErrorCode::ZERO_RETURN => Err(TlsError::Closed),
            Err(error) => Err(TlsError::Record(error.to_string())),
        }
    }

    /// Reads every whole record there is, through `buffer`, handing each piece of
    /// plaintext to `deliver`, which answers whether to go on (a handler that wants
    /// to close stops it). The one decrypt-and-deliver loop of the target's TLS
    /// wrapper and the host's blocking path.
    pub fn deliver_plaintext(
        &mut self,
        buffer: &mut [u8],
        mut deliver: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), TlsError> {
        loop {
            let count = self.read_plaintext(buffer)?;
            if count == 0 || !deliver(&buffer[..count]) {
                return Ok(());
            }
        }
    }

    /// Encrypts `data` for the peer (the ciphertext waits in [`Self::take_ciphertext`]).
    pub fn write_plaintext(&mut self, data: &[u8]) -> Result<(), TlsError> {
        let mut written = 0;
        while written < data.len() {
            match self.stream.ssl_write(&data[written..]) {
                Ok(count) => written += count,
                Err(error) => return Err(TlsError::Record(error.to_string())),
            }
        }
        Ok(())
    }

    /// Ends the session in order: queues a close_notify alert, so the peer can tell
    /// the end of the data from a cut connection (RFC 8446 6.1). Its record joins the
    /// ciphertext to send; nothing may be written after it.
    pub fn close_notify(&mut self) -> Result<(), TlsError> {
        match self.stream.shutdown() {
            Ok(_) => Ok(()),
            // The alert is written; the peer's own close_notify is not awaited.
            Err(error) if matches!(error.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE) => Ok(()),
            Err(error) => Err(TlsError::Record(error.to_string())),
        }
    }

    /// Ciphertext to send to the peer, moved into `out` (appended). An empty `out`
    /// trades buffers with the session instead of copying: the caller's spare buffer
    /// becomes the session's next output buffer, so nothing is allocated or copied.
    pub fn take_ciphertext(&mut self, out: &mut Vec<u8>) {
        let outgoing = &mut self.stream.get_mut().outgoing;
        if out.is_empty() {
            std::mem::swap(out, outgoing);
        } else {
            out.append(outgoing);
        }
    }

    /// Whether ciphertext waits to be sent.
    pub fn has_ciphertext(&self) -> bool {
        !self.stream.get_ref().outgoing.is_empty()
    }

    /// True when the ciphertext received so far ends inside a TLS record: the peer
    /// has sent part of a record and the rest is still to come.
    pub fn has_partial_record(&self) -> bool {
        self.framing.is_mid_record()
    }

    /// Bytes of ciphertext waiting to be sent.
    pub fn pending_ciphertext_bytes(&self) -> usize {
        self.stream.get_ref().outgoing.len()
    }

    /// The PSK identity the handshake used (server side, once established; a key that
    /// was looked up but failed the binder check names nothing).
    pub fn psk_identity(&self) -> Option<Vec<u8>> {
        if !self.established {
            return None;
        }
        let index = server_state_index()?;
        self.stream
            .ssl()
            .ex_data(index)
            .and_then(|state| state.chosen.lock().unwrap_or_else(PoisonError::into_inner).clone())
    }

    /// The suite the handshake agreed on.
    pub fn cipher_name(&self) -> Option<&'static str> {
        self.stream.ssl().current_cipher().map(|cipher| cipher.name())
    }
}

#[cfg(test)]
mod tests;

//! The management API over TCP with mutual TLS (`[management.network]`): the same
//! methods, errors and framing as the local socket (`server::serve_client`), for
//! callers named by their certificate.
//!
//! Why mutual TLS: no secret crosses the wire (a bearer token would, on every
//! connection, and would have to be stored and rotated by hand), the certificate's
//! subject CN names the caller for the audit log and its access level, and it is
//! what Kubernetes, etcd and Ceph's NVMe-oF gateway use, so cert-manager or an
//! existing CA can issue the certificates.
//!
//! Unlike the local socket, anyone on the network can connect, so one client must not
//! starve the others: each connection gets a thread of its own, at most
//! `MAX_NETWORK_CLIENTS` at a time (more are closed at once), the handshake must finish
//! within `HANDSHAKE_TIMEOUT`, and then the local socket's idle and write timeouts and
//! request size limit apply. The management thread still runs one call at a time.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use openssl::error::ErrorStack;
use openssl::nid::Nid;
use openssl::ssl::{HandshakeError, SslAcceptor, SslMethod, SslRef, SslVerifyMode, SslVersion};
use openssl::stack::Stack;
use openssl::x509::{X509Name, X509VerifyResult};

use super::caller::Caller;
use super::server::{serve_client, ACCEPT_RETRY_DELAY, IDLE_TIMEOUT, WRITE_TIMEOUT};
use super::worker::ManagementHandle;
use sluice_config::management::{Access, NetworkSettings};

/// Most network clients served at once; a connection beyond them is closed at once.
/// Management calls are short and rare, so 16 leaves room for several operators and
/// scripts while bounding the threads (and memory) a flood of connections can take.
pub const MAX_NETWORK_CLIENTS: usize = 16;
/// How long a client may take over the TLS handshake: a peer that connects and sends
/// nothing must not hold one of the `MAX_NETWORK_CLIENTS` places for long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one "too many clients" warning per interval, so a flood of connections
/// does not flood the log too.
const FULL_WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// How long stopping waits to wake the accepting thread with a connection of its own.
const WAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// Names this server's TLS sessions; OpenSSL refuses to resume a session with a
/// verified client certificate without one.
const SESSION_ID_CONTEXT: &[u8] = b"sluice-management-api";

/// Why the network endpoint cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error(
        "cannot listen for the management API on {address} ([management.network] listen): {source}; free the port \
         or choose another"
    )]
    Bind { address: SocketAddr, source: std::io::Error },
    #[error(
        "cannot set up TLS for the management API from [management.network] certificate, private_key and client_ca: \
         {0}"
    )]
    Tls(#[from] ErrorStack),
    #[error("cannot start the management API's network thread: {0}")]
    Thread(std::io::Error),
}

/// Who may connect: the listed clients by CN.
struct Clients(Vec<(String, Access)>);

impl Clients {
    fn access_of(&self, common_name: &str) -> Option<Access> {
        self.0.iter().find(|(name, _)| name == common_name).map(|&(_, access)| access)
    }
}

/// The running network endpoint; stopped on drop.
pub struct NetworkServer {
    address: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NetworkServer {
    /// Listens on the settings' address and serves each client on a thread of its own.
    pub fn start(settings: NetworkSettings, management: ManagementHandle) -> Result<NetworkServer, NetworkError> {
        let acceptor = Arc::new(acceptor(&settings)?);
        let listener = TcpListener::bind(settings.address)
            .map_err(|source| NetworkError::Bind { address: settings.address, source })?;
        let address =
            listener.local_addr().map_err(|source| NetworkError::Bind { address: settings.address, source })?;
        let clients = Arc::new(Clients(settings.clients));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let stopping = Arc::clone(&stopping);
            std::thread::Builder::new()
                .name("sluice-api-net".into())
                .spawn(move || accept_loop(&listener, &acceptor, &clients, &management, &stopping))
                .map_err(NetworkError::Thread)?
        };
        Ok(NetworkServer { address, stopping, thread: Some(thread) })
    }

    /// The address it listens on (with the port chosen when `listen` gave port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for NetworkServer {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.stopping.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own. If that fails the
        // thread stays parked in accept; it holds nothing that needs a clean exit.
        // Clients being served finish on their own timeouts.
        let ip = match self.address.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        if TcpStream::connect_timeout(&SocketAddr::new(ip, self.address.port()), WAKE_TIMEOUT).is_ok() {
            let _ = thread.join();
        }
    }
}

/// TLS 1.2 or 1.3 (Mozilla's intermediate profile), our certificate, and a client
/// certificate required and checked against the client CAs.
fn acceptor(settings: &NetworkSettings) -> Result<SslAcceptor, ErrorStack> {
    let mut builder = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())?;
    builder.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    let (certificate, intermediates) = settings.certificate_chain.split_first().ok_or_else(ErrorStack::get)?;
    builder.set_certificate(certificate)?;
    for intermediate in intermediates {
        builder.add_extra_chain_cert(intermediate.clone())?;
    }
    builder.set_private_key(&settings.private_key)?;
    builder.check_private_key()?;
    // Told to clients in the handshake, so one holding several certificates picks
    // one these CAs signed.
    let mut names = Stack::<X509Name>::new()?;
    for ca in &settings.client_cas {
        builder.cert_store_mut().add_cert(ca.clone())?;
        names.push(ca.subject_name().to_owned()?)?;
    }
    builder.set_client_ca_list(names);
    builder.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
    builder.set_session_id_context(SESSION_ID_CONTEXT)?;
    Ok(builder.build())
}

/// Takes one of the `MAX_NETWORK_CLIENTS` places; given back on drop.
struct Place(Arc<AtomicUsize>);

impl Place {
    fn take(active: &Arc<AtomicUsize>) -> Option<Place> {
        active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                (count < MAX_NETWORK_CLIENTS).then_some(count + 1)
            })
            .ok()
            .map(|_| Place(Arc::clone(active)))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept_loop(
    listener: &TcpListener,
    acceptor: &Arc<SslAcceptor>,
    clients: &Arc<Clients>,
    management: &ManagementHandle,
    stopping: &AtomicBool,
) {
    let active = Arc::new(AtomicUsize::new(0));
    let mut last_full_warning: Option<Instant> = None;
    for incoming in listener.incoming() {
        if stopping.load(Ordering::Acquire) {
            break;
        }
        let stream = match incoming {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "management API: accept failed");
                std::thread::sleep(ACCEPT_RETRY_DELAY);
                continue;
            }
        };
        let Some(place) = Place::take(&active) else {
            if !matches!(last_full_warning, Some(warned) if warned.elapsed() < FULL_WARNING_INTERVAL) {
                last_full_warning = Some(Instant::now());
                let peer =
                    stream.peer_addr().map_or_else(|_| "an unknown address".to_string(), |peer| peer.to_string());
                tracing::warn!(
                    "management API: {MAX_NETWORK_CLIENTS} clients are connected already; closed the connection from \
                     {peer} (and any more in the next {} s)",
                    FULL_WARNING_INTERVAL.as_secs()
                );
            }
            continue;
        };
        let (acceptor, clients, management) = (Arc::clone(acceptor), Arc::clone(clients), management.clone());
        let spawned = std::thread::Builder::new().name("sluice-api-client".into()).spawn(move || {
            let _place = place;
            serve_connection(stream, &acceptor, &clients, &management);
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "management API: cannot start a thread for a client; closed its connection");
        }
    }
}

/// Shakes hands, names the client by its certificate, and serves it.
fn serve_connection(stream: TcpStream, acceptor: &SslAcceptor, clients: &Clients, management: &ManagementHandle) {
    let Ok(peer) = stream.peer_addr() else { return };
    // Small writes that wait for an answer: without this each one waits for the
    // client's delayed ACK (40 ms a call on Linux).
    let _ = stream.set_nodelay(true);
    let stream = DeadlineStream { stream, deadline: Some(Instant::now() + HANDSHAKE_TIMEOUT) };
    let mut tls = match acceptor.accept(stream) {
        Ok(tls) => tls,
        Err(error) => {
            tracing::info!("management API: refused the connection from {peer}: {}", handshake_failure(&error));
            return;
        }
    };
    let caller = match peer_common_name(tls.ssl()) {
        Some(common_name) => {
            let access = clients.access_of(&common_name);
            let caller = Caller::network(&common_name, peer, access);
            match access {
                Some(access) => {
                    tracing::info!(caller = %caller, access = access.as_str(), "management API client connected")
                }
                None => tracing::warn!(
                    "management API: refused {caller}: its certificate is signed by the client CA but its CN is not \
                     listed in [[management.network.client]]"
                ),
            }
            caller
        }
        None => {
            tracing::warn!("management API: refused the client at {peer}: its certificate has no single subject CN");
            Caller::network("(no single subject CN)", peer, None)
        }
    };
    tls.get_mut().deadline = None;
    let socket = &tls.get_ref().stream;
    let timeouts = socket.set_read_timeout(Some(IDLE_TIMEOUT)).and(socket.set_write_timeout(Some(WRITE_TIMEOUT)));
    if timeouts.is_err() {
        return;
    }
    serve_client(&mut tls, management, &caller);
    // close_notify, so the client tells a finished answer from a cut connection.
    let _ = tls.shutdown();
}

/// A TCP stream whose reads and writes share one deadline while it is set (the TLS
/// handshake): a timeout per read alone would let a peer that sends a byte every few
/// seconds hold one of the `MAX_NETWORK_CLIENTS` places for as long as it likes.
/// Without a deadline it is the plain stream.
struct DeadlineStream {
    stream: TcpStream,
    deadline: Option<Instant>,
}

impl DeadlineStream {
    /// Gives the next read or write the time left, or fails once none is.
    fn arm(&self) -> std::io::Result<()> {
        let Some(deadline) = self.deadline else { return Ok(()) };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the TLS handshake took longer than {} s", HANDSHAKE_TIMEOUT.as_secs()),
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.set_write_timeout(Some(left))
    }
}

impl std::io::Read for DeadlineStream {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.stream.read(buffer)
    }
}

impl std::io::Write for DeadlineStream {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.stream.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// The subject CN of the verified client certificate; `None` without exactly one.
fn peer_common_name(ssl: &SslRef) -> Option<String> {
    let certificate = ssl.peer_certificate()?;
    let mut names = certificate.subject_name().entries_by_nid(Nid::COMMONNAME);
    let name = names.next()?;
    if names.next().is_some() {
        return None;
    }
    // Interior NUL bytes are kept, so "admin\0x" never matches "admin".
    name.data().to_string().ok()
}

/// Why a handshake failed, for the log: a certificate the client CA did not sign, no
/// certificate, or a TLS error.
fn handshake_failure(error: &HandshakeError<DeadlineStream>) -> String {
    match error {
        HandshakeError::SetupFailure(error) => format!("TLS setup failed: {error}"),
        HandshakeError::Failure(stream) | HandshakeError::WouldBlock(stream) => {
            let verify = stream.ssl().verify_result();
            if verify != X509VerifyResult::OK {
                format!("its certificate is not signed by [management.network] client_ca ({})", verify.error_string())
            } else if stream.ssl().peer_certificate().is_none() && stream.ssl().is_server() {
                format!("TLS handshake failed (no client certificate?): {}", stream.error())
            } else {
                format!("TLS handshake failed: {}", stream.error())
            }
        }
    }
}

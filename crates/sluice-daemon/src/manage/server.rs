//! The management socket: a Unix stream socket, mode 0600, served by one thread.
//!
//! Management is rare and never on the I/O path, so one thread answers every client
//! in turn, one newline-terminated request at a time; the runtime's threads never
//! wait for it. A client that stalls is dropped after `IDLE_TIMEOUT`.
//!
//! `serve_client` and `answer` serve any stream: the network endpoint (network.rs)
//! runs them over TLS, with its caller's rights.
//!
//! The socket is created where nobody else can reach it (a private 0700 directory
//! next to the final path), chmod-ed to 0600, then hard-linked into place: the link
//! fails if the path exists, so two servers cannot both take one path, and no other
//! user can connect in the moment before the chmod.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use super::caller::{self, Caller};
use super::protocol::{self, RpcError, INTERNAL_ERROR, INVALID_REQUEST, MAX_REQUEST_BYTES};
use super::worker::ManagementHandle;

/// The socket's mode: only the owner (the user running `sluice serve`) may connect.
const SOCKET_MODE: u32 = 0o600;
/// Mode of a directory created for the socket (e.g. /run/sluice).
const DIRECTORY_MODE: u32 = 0o700;
/// How long a connected client may stay silent before it is dropped, so one stuck
/// client cannot hold the only management thread for ever.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long writing a response may block on a client that does not read.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
pub(super) const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Why the management socket cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "another sluice serve is answering on the management socket {0}; stop it, or give this one \
         its own --rpc-socket PATH"
    )]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; remove it or choose another --rpc-socket PATH")]
    NotASocket(PathBuf),
    #[error("cannot create the management socket {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot read the config file {path} for the management API: {source}")]
    ConfigFile { path: PathBuf, source: std::io::Error },
    /// The network endpoint (`[management.network]`) could not start.
    #[error(transparent)]
    Network(#[from] super::network::NetworkError),
}

/// The running management socket; stopped (and its file removed) on `stop` or drop.
pub struct ManagementServer {
    path: PathBuf,
    /// Device and inode of the socket file we created: removed only if still ours.
    identity: (u64, u64),
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ManagementServer {
    /// Creates the socket at `path` and serves it on a thread of its own, handing each
    /// request to the management thread behind `management`.
    pub fn start(path: &Path, management: ManagementHandle) -> Result<ManagementServer, SocketError> {
        let io_error = |source| SocketError::Io { path: path.to_path_buf(), source };
        let listener = bind(path)?;
        let metadata = std::fs::metadata(path).map_err(io_error)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let stopping = Arc::clone(&stopping);
            std::thread::Builder::new()
                .name("sluice-rpc".into())
                .spawn(move || accept_loop(listener, management, &stopping))
                .map_err(io_error)?
        };
        Ok(ManagementServer {
            path: path.to_path_buf(),
            identity: (metadata.dev(), metadata.ino()),
            stopping,
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops answering and removes the socket file (run on drop).
    fn stop_now(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.stopping.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own. If that fails the
        // thread stays parked in accept; it holds nothing that needs a clean exit.
        if UnixStream::connect(&self.path).is_ok() {
            let _ = thread.join();
        }
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|metadata| (metadata.dev(), metadata.ino()) == self.identity);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for ManagementServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Creates the listening socket at `path` (see the module comment).
fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let io_error = |source| SocketError::Io { path: path.to_path_buf(), source };
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(DIRECTORY_MODE).create(&parent).map_err(io_error)?;
    }
    remove_if_stale(path)?;
    let file_name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let staging = parent.join(format!(".{file_name}.{}.d", std::process::id()));
    let staged = staging.join("s");
    // Left over by a crash of a process with our id: remove our socket and the then
    // empty directory, never anything else.
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    std::fs::DirBuilder::new().mode(DIRECTORY_MODE).create(&staging).map_err(io_error)?;
    let result = (|| {
        let listener = UnixListener::bind(&staged).map_err(io_error)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(SOCKET_MODE)).map_err(io_error)?;
        match std::fs::hard_link(&staged, path) {
            Ok(()) => Ok(listener),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(SocketError::InUse(path.to_path_buf()))
            }
            Err(error) => Err(io_error(error)),
        }
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    result
}

/// Removes a socket file nobody answers on (left by a server that was killed);
/// refuses a live one and anything that is not a socket.
fn remove_if_stale(path: &Path) -> Result<(), SocketError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(SocketError::Io { path: path.to_path_buf(), source }),
    };
    if !metadata.file_type().is_socket() {
        return Err(SocketError::NotASocket(path.to_path_buf()));
    }
    // Another process starting at the same moment may find the same stale file and
    // remove it first: a file gone meanwhile is what this wanted.
    match UnixStream::connect(path) {
        Ok(_) => Err(SocketError::InUse(path.to_path_buf())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing the stale management socket of a stopped sluice serve");
            match std::fs::remove_file(path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other.map_err(|source| SocketError::Io { path: path.to_path_buf(), source }),
            }
        }
        Err(source) => Err(SocketError::Io { path: path.to_path_buf(), source }),
    }
}

fn accept_loop(listener: UnixListener, management: ManagementHandle, stopping: &AtomicBool) {
    for incoming in listener.incoming() {
        if stopping.load(Ordering::Acquire) {
            break;
        }
        match incoming {
            Ok(stream) => {
                if stream.set_read_timeout(Some(IDLE_TIMEOUT)).is_ok()
                    && stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_ok()
                {
                    serve_client(&stream, &management, &Caller::local_socket());
                }
            }
            Err(error) => {
                tracing::warn!(%error, "management socket: accept failed");
                std::thread::sleep(ACCEPT_RETRY_DELAY);
            }
        }
    }
}

/// Answers one client's requests until it closes, stalls (the stream's timeouts,
/// set by the caller) or sends an oversized line; a refused caller gets one answer.
pub(super) fn serve_client<S: Read + Write>(stream: S, management: &ManagementHandle, caller: &Caller) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        // One byte over the limit tells an oversized request from one that fits.
        let limit = MAX_REQUEST_BYTES as u64 + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, caller = %caller, "management client dropped");
                return;
            }
        }
        let complete = line.last() == Some(&b'\n');
        if !complete && line.len() > MAX_REQUEST_BYTES {
            // The rest of the line cannot be told from a next request: answer, close.
            let error = RpcError::new(
                INVALID_REQUEST,
                format!("request longer than {MAX_REQUEST_BYTES} bytes; send one request per line"),
            );
            let _ = send(reader.get_mut(), &protocol::failure(Value::Null, &error));
            return;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            if complete {
                continue;
            }
            return;
        }
        let response = answer(&line, management, caller);
        if send(reader.get_mut(), &response).is_err() || caller.is_refused() {
            return;
        }
    }
}

/// The response to one request line from `caller`.
fn answer(line: &[u8], management: &ManagementHandle, caller: &Caller) -> Value {
    let request = match protocol::parse_request(line) {
        Ok(request) => request,
        Err(refused) => return protocol::failure(refused.id, &refused.error),
    };
    let id = request.id;
    let method = request.method;
    tracing::debug!(%method, caller = %caller, "management request");
    // Taken before the call consumes the parameters.
    let audited_params = caller::is_audited(&method).then(|| request.params.redacted());
    let audit = |outcome: Result<(), i64>| {
        if let Some(params) = &audited_params {
            caller::audit(caller, &method, params, outcome);
        }
    };
    if let Err(error) = caller.authorise(&method) {
        tracing::warn!(%method, caller = %caller, "management request refused: access denied");
        audit(Err(error.code));
        return protocol::failure(id, &error);
    }
    // A bug in one method must not take the management socket down with it.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| management.call(&method, request.params)));
    match outcome {
        Ok(Ok(result)) => {
            audit(Ok(()));
            protocol::success(id, caller.shown_result(&method, result))
        }
        Ok(Err(error)) => {
            audit(Err(error.code));
            // A refused host_allow may quote the secret it was given (a config parse
            // error shows the line): never log its message.
            if method == "host_allow" {
                tracing::info!(%method, code = error.code, "management request refused");
            } else {
                tracing::info!(%method, code = error.code, message = %error.message, "management request refused");
            }
            protocol::failure(id, &error)
        }
        Err(_) => {
            audit(Err(INTERNAL_ERROR));
            tracing::error!(%method, "management method panicked");
            protocol::failure(id, &RpcError::new(INTERNAL_ERROR, format!("internal error in {method}; see the log")))
        }
    }
}

fn send<W: Write>(writer: &mut W, response: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(response).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    writer.write_all(&bytes)?;
    writer.flush()
}

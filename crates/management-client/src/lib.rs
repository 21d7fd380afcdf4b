//! The client side of the management API of `sluice serve`: one JSON-RPC 2.0 request
//! per line, one response per line (crates/sluice-daemon/src/manage/protocol.rs is
//! the server side). The `sluice` management commands and `sluice-csi` both call through it, so
//! they reach a gateway the same way and see the same errors.
//!
//! - `api`: one request type per method and the reply it answers with.
//! - `codes`: the error codes the server answers with, for callers that branch on them.
//! - `methods`: the method table (every method and whether it changes anything).
//! - `Endpoint`: where the API is offered.
//! - `Client::send`: one typed request, its typed reply or the server's error
//!   (`Client::call` for a method named at run time, as `sluice rpc` does).
//! - `tls`: the network endpoint (mutual TLS).

pub mod api;
pub mod codes;
pub mod methods;
mod tls;

pub use tls::{TlsEndpoint, CONNECT_TIMEOUT};

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

/// How long to wait for an answer. Changes build backends (a file namespace may be
/// created and sized, an RBD image opened) but nothing takes minutes.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest response read: a `subsystem_show` of 4096 namespaces is about 1 MiB.
pub const MAX_RESPONSE_BYTES: u64 = 16 << 20;

/// Socket path when running as root.
pub const ROOT_SOCKET_PATH: &str = "/run/sluice/sluice.sock";
/// Socket file name under $XDG_RUNTIME_DIR.
pub const USER_SOCKET_NAME: &str = "sluice.sock";

/// The default socket path, the one `sluice serve` offers and every client tries
/// first: /run/sluice/sluice.sock for root, else $XDG_RUNTIME_DIR/sluice.sock; `None`
/// when neither applies.
pub fn default_socket_path() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0);
    if root {
        return Some(PathBuf::from(ROOT_SOCKET_PATH));
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|directory| !directory.is_empty())
        .map(|directory| PathBuf::from(directory).join(USER_SOCKET_NAME))
}

/// Where a `sluice serve` offers its management API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The local Unix socket (`--rpc-socket`); the file's mode is the access control.
    Unix(PathBuf),
    /// The network endpoint of `[management.network]`: mutual TLS, our certificate's
    /// subject CN names us (and sets what we may do).
    Tls(TlsEndpoint),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(formatter, "the management socket {}", path.display()),
            Endpoint::Tls(endpoint) => write!(formatter, "the management API at https://{}", endpoint.address),
        }
    }
}

/// An error object the server answered with (JSON-RPC 2.0, section 5.1).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteError {
    /// One of `codes`, or another the server defines.
    pub code: i64,
    pub message: String,
    /// `{"field": ..., "reason": ...}` or `{"location": ..., "reason": ...}` when the
    /// server names what to change.
    pub data: Option<Value>,
}

impl RemoteError {
    /// The error object as the server sent it, for callers that print JSON.
    pub fn to_json(&self) -> Value {
        let mut object = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            object["data"] = data.clone();
        }
        object
    }
}

/// Why a call has no result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing answered at the endpoint (not running, wrong path or address).
    #[error("cannot reach {endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    /// The connection broke, timed out, or the answer was not a JSON-RPC response.
    #[error("{endpoint}: {reason}")]
    Broken { endpoint: String, reason: String },
    /// Our side cannot make the call (a certificate, key or CA file that cannot be
    /// read or does not fit); the reason names the file and the option.
    #[error("cannot call {endpoint}: {reason}")]
    Local { endpoint: String, reason: String },
    /// The server ran the request and refused it.
    #[error("{} (JSON-RPC error {})", .0.message, .0.code)]
    Remote(RemoteError),
}

/// A client of one endpoint. Each call opens its own connection: management calls are
/// rare, and a connection that broke mid-call cannot confuse the next one.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
}

impl Client {
    pub fn new(endpoint: Endpoint) -> Self {
        Client { endpoint }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends one typed request ([`api`]) and reads its answer as the method's reply
    /// type; an answer that does not read as it is a broken call, naming the method.
    pub fn send<M: api::Method>(&self, request: &M) -> Result<M::Reply, CallError> {
        let params = serde_json::to_value(request).map_err(|error| self.broken(error))?;
        let answer = self.call(M::NAME, params)?;
        serde_json::from_value(answer).map_err(|error| CallError::Broken {
            endpoint: self.endpoint.to_string(),
            reason: format!("the answer to {} does not read as its reply: {error}", M::NAME),
        })
    }

    /// Sends one request and waits for its answer (at most `RESPONSE_TIMEOUT`).
    pub fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let mut line = serde_json::to_vec(&request(1, method, params)).map_err(|error| self.broken(error))?;
        line.push(b'\n');
        let response = match &self.endpoint {
            Endpoint::Unix(path) => {
                let stream = UnixStream::connect(path).map_err(|error| CallError::Unreachable {
                    endpoint: self.endpoint.to_string(),
                    reason: format!(
                        "{error}: is `sluice serve` running (with --rpc-socket {} if it uses another path)?",
                        path.display()
                    ),
                })?;
                stream.set_read_timeout(Some(RESPONSE_TIMEOUT)).map_err(|error| self.broken(error))?;
                stream.set_write_timeout(Some(RESPONSE_TIMEOUT)).map_err(|error| self.broken(error))?;
                self.exchange(&stream, &line)?
            }
            Endpoint::Tls(endpoint) => {
                let stream = endpoint.connect(&self.endpoint.to_string())?;
                self.exchange(stream, &line).map_err(|error| match error {
                    // TLS 1.3: a certificate the server refuses shows as an alert on
                    // our first read, after our side of the handshake completed.
                    CallError::Broken { endpoint, reason } if reason.contains("alert") => CallError::Unreachable {
                        endpoint,
                        reason: format!("{reason}: {}", tls::REFUSED_CERTIFICATE_HINT),
                    },
                    // The same refusal when the server's close overtook its alert: the
                    // kernel answers our request, which it no longer reads, with a reset.
                    CallError::Broken { endpoint, reason } if reason.contains("Connection reset") => {
                        CallError::Unreachable {
                            endpoint,
                            reason: format!(
                                "{reason}: the server closed the connection right after the handshake; most likely {}",
                                tls::REFUSED_CERTIFICATE_HINT
                            ),
                        }
                    }
                    other => other,
                })?
            }
        };
        self.result_of(&response)
    }

    /// Writes the request line and reads one response line.
    fn exchange<S>(&self, stream: S, line: &[u8]) -> Result<Vec<u8>, CallError>
    where
        S: Read + Write,
    {
        let mut reader = BufReader::new(stream);
        reader.get_mut().write_all(line).map_err(|error| self.broken(error))?;
        reader.get_mut().flush().map_err(|error| self.broken(error))?;
        let mut response = Vec::new();
        (&mut reader).take(MAX_RESPONSE_BYTES).read_until(b'\n', &mut response).map_err(|error| self.broken(error))?;
        if response.is_empty() {
            return Err(self.broken("closed without an answer"));
        }
        Ok(response)
    }

    fn result_of(&self, response: &[u8]) -> Result<Value, CallError> {
        let response: Value = serde_json::from_slice(response)
            .map_err(|error| self.broken(format!("the answer is not JSON: {error}")))?;
        if let Some(result) = response.get("result") {
            return Ok(result.clone());
        }
        let object = response.get("error").cloned().unwrap_or(Value::Null);
        Err(CallError::Remote(RemoteError {
            code: object.get("code").and_then(Value::as_i64).unwrap_or(codes::INTERNAL_ERROR),
            message: object.get("message").and_then(Value::as_str).unwrap_or("malformed error answer").to_string(),
            data: object.get("data").cloned(),
        }))
    }

    fn broken(&self, reason: impl std::fmt::Display) -> CallError {
        CallError::Broken { endpoint: self.endpoint.to_string(), reason: reason.to_string() }
    }
}

/// The request object for `method` (JSON-RPC 2.0, named parameters).
pub fn request(id: u64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A server that answers one request with `answer` and returns what it read.
    fn serve_once(answer: &'static str) -> (tempdir::Path, std::thread::JoinHandle<String>) {
        let directory = tempdir::new();
        let listener = UnixListener::bind(directory.join("api.sock")).unwrap();
        let thread = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(&stream);
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            (&stream).write_all(answer.as_bytes()).unwrap();
            request
        });
        (directory, thread)
    }

    mod tempdir {
        pub type Path = std::path::PathBuf;
        pub fn new() -> Path {
            let path = std::env::temp_dir().join(format!(
                "management-client-{}-{}",
                std::process::id(),
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            ));
            std::fs::create_dir_all(&path).unwrap();
            path
        }
    }

    #[test]
    fn a_result_comes_back_and_the_request_is_one_line() {
        let (directory, server) = serve_once("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n");
        let client = Client::new(Endpoint::Unix(directory.join("api.sock")));
        let result = client.call("ns_list", json!({ "nqn": "nqn.x" })).unwrap();
        assert_eq!(result, json!({ "ok": true }));
        let request: Value = serde_json::from_str(&server.join().unwrap()).unwrap();
        assert_eq!(request["method"], "ns_list");
        assert_eq!(request["params"]["nqn"], "nqn.x");
        let _ = std::fs::remove_dir_all(directory);
    }

    #[test]
    fn a_refusal_keeps_its_code_and_data() {
        let (directory, server) = serve_once(
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000,\"message\":\"nsid: taken\",\"data\":{\"field\":\"nsid\"}}}\n",
        );
        let client = Client::new(Endpoint::Unix(directory.join("api.sock")));
        let Err(CallError::Remote(error)) = client.call("ns_add", json!({})) else { panic!("expected a refusal") };
        assert_eq!(error.code, codes::CHANGE_REFUSED);
        assert_eq!(error.message, "nsid: taken");
        assert_eq!(error.data, Some(json!({ "field": "nsid" })));
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(directory);
    }

    #[test]
    fn nothing_listening_is_unreachable_and_says_where() {
        let client = Client::new(Endpoint::Unix(PathBuf::from("/nonexistent/sluice.sock")));
        let error = client.call("ns_list", json!({})).unwrap_err();
        assert!(matches!(error, CallError::Unreachable { .. }), "{error:?}");
        assert!(error.to_string().contains("/nonexistent/sluice.sock"), "{error}");
    }

    #[test]
    fn an_answer_that_is_not_json_is_broken() {
        let (directory, server) = serve_once("hello\n");
        let client = Client::new(Endpoint::Unix(directory.join("api.sock")));
        let error = client.call("ns_list", json!({})).unwrap_err();
        assert!(matches!(error, CallError::Broken { .. }), "{error:?}");
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(directory);
    }
}

//! The gateway's management API, as the CSI services call it: the one place an
//! `--api` URL becomes an endpoint, blocking calls moved off the async runtime, and
//! the management API's refusals mapped to the gRPC codes the CSI spec asks for.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use management_client::api::Method;
use management_client::codes::{self, causes};
use management_client::{CallError, Client, Endpoint, RemoteError, TlsEndpoint};
use tonic::{Code, Status};

/// Files for a TLS management endpoint (`--api-ca`, `--api-cert`, `--api-key`).
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    pub certificate: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// The management endpoint `url` names: `https://HOST:PORT` (the gateway's network
/// API, mutual TLS with the three files), `unix:///path/to/socket` or a plain path.
pub fn endpoint_of(url: &str, tls: &TlsFiles) -> Result<Endpoint, String> {
    if let Some(path) = url.strip_prefix("unix://") {
        if path.is_empty() {
            return Err(format!("--api {url:?}: no socket path after unix://"));
        }
        return Ok(Endpoint::Unix(PathBuf::from(path)));
    }
    if url.starts_with("https://") {
        let file = |given: &Option<PathBuf>, flag: &str, what: &str| {
            given.clone().ok_or_else(|| format!("--api {url:?} needs {flag} FILE: {what}"))
        };
        let ca = file(&tls.ca, "--api-ca", "the PEM certificate of the CA that signed the gateway's certificate")?;
        let certificate = file(&tls.certificate, "--api-cert", "this driver's PEM client certificate")?;
        let key = file(&tls.key, "--api-key", "the PEM private key of --api-cert")?;
        return TlsEndpoint::parse(url, ca, certificate, key)
            .map(Endpoint::Tls)
            .map_err(|reason| format!("--api: {reason}"));
    }
    if url.contains("://") {
        return Err(format!("--api {url:?}: give unix:///path/to/socket, a socket path, or https://HOST:PORT"));
    }
    if url.is_empty() {
        return Err("--api: empty".to_string());
    }
    Ok(Endpoint::Unix(PathBuf::from(url)))
}

/// Management clients the async services share: one per gateway of a gateway group
/// (`--api` repeated), any of which can make every change, since the group's
/// configuration is one document in the cluster.
#[derive(Debug, Clone)]
pub struct Api {
    clients: Arc<Vec<Client>>,
    /// The client that answered last: tried first, so that a dead gateway costs one
    /// failed connect, not one per call.
    current: Arc<AtomicUsize>,
}

impl Api {
    /// `endpoints` must not be empty (`main` refuses an empty `--api`).
    pub fn new(endpoints: Vec<Endpoint>) -> Api {
        Api {
            clients: Arc::new(endpoints.into_iter().map(Client::new).collect()),
            current: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// One request, on a blocking thread (the client waits on its socket), its
    /// answer read as the method's reply. A gateway that cannot be reached (nothing
    /// was sent) passes the call to the next endpoint; any answer, a refusal
    /// included, is the group's answer. A call cut off mid-way is not repeated
    /// elsewhere: it may have taken effect.
    pub async fn send_raw<M>(&self, request: M) -> Result<M::Reply, CallError>
    where
        M: Method + Clone + Send + 'static,
        M::Reply: Send + 'static,
    {
        let start = self.current.load(Ordering::Relaxed);
        let mut last_error = None;
        for index in try_order(start, self.clients.len()) {
            let client = self.clients[index].clone();
            let request = request.clone();
            let outcome = match tokio::task::spawn_blocking(move || client.send(&request)).await {
                Ok(outcome) => outcome,
                Err(join_error) => Err(CallError::Broken {
                    endpoint: self.clients[index].endpoint().to_string(),
                    reason: format!("the call's thread failed: {join_error}"),
                }),
            };
            match outcome {
                Err(error @ CallError::Unreachable { .. }) => {
                    if self.clients.len() > 1 {
                        tracing::warn!(endpoint = %self.clients[index].endpoint(), %error, method = M::NAME, "gateway unreachable; trying the next --api endpoint");
                    }
                    last_error = Some(error);
                }
                outcome => {
                    self.current.store(index, Ordering::Relaxed);
                    return outcome;
                }
            }
        }
        Err(last_error.unwrap_or_else(|| CallError::Unreachable {
            endpoint: String::new(),
            reason: "no --api endpoint given".to_string(),
        }))
    }

    /// One request, its refusal mapped to a gRPC status.
    pub async fn send<M>(&self, request: M) -> Result<M::Reply, Status>
    where
        M: Method + Clone + Send + 'static,
        M::Reply: Send + 'static,
    {
        self.send_raw(request).await.map_err(|error| status_of(M::NAME, &error))
    }
}

/// Indexes of `count` endpoints, from `start` round to the one before it.
fn try_order(start: usize, count: usize) -> impl Iterator<Item = usize> {
    (0..count).map(move |offset| (start + offset) % count)
}

/// The gRPC status for a failed management call, with the gateway's own words.
pub fn status_of(method: &str, error: &CallError) -> Status {
    let code = match error {
        // Nothing answered or the answer broke: the CO retries.
        CallError::Unreachable { .. } | CallError::Broken { .. } => Code::Unavailable,
        // Our own certificate or key files cannot be used: the operator must fix them.
        CallError::Local { .. } => Code::FailedPrecondition,
        CallError::Remote(remote) => code_of_refusal(remote),
    };
    Status::new(code, format!("gateway {method}: {error}"))
}

fn code_of_refusal(remote: &RemoteError) -> Code {
    // The machine-readable cause (`data.cause`) decides, then the code: the message
    // is for people and may be reworded, so nothing here reads it.
    if let Some(code) = cause_of(remote).and_then(code_of_cause) {
        return code;
    }
    match remote.code {
        codes::INVALID_PARAMS => Code::InvalidArgument,
        codes::CHANGE_REFUSED => Code::FailedPrecondition,
        codes::CONFIG_INVALID => Code::InvalidArgument,
        // The operator has to act (start with --config, reconcile the file).
        codes::NO_CONFIG_FILE | codes::CONFIG_CHANGED_ON_DISK => Code::FailedPrecondition,
        // Another gateway changed the group first: retrying is right.
        codes::GROUP_CONFIG_CONFLICT => Code::Aborted,
        codes::PERSIST_FAILED => Code::Unavailable,
        codes::METHOD_NOT_FOUND => Code::Unimplemented,
        _ => Code::Internal,
    }
}

/// The refusal's `data.cause`, if it has one.
pub fn cause_of(remote: &RemoteError) -> Option<&str> {
    remote.data.as_ref()?.get("cause")?.as_str()
}

/// The gRPC code of a refusal cause this driver knows; None for others (the code
/// and message decide then).
fn code_of_cause(cause: &str) -> Option<Code> {
    match cause {
        // The pool (or image store) cannot hold what was asked.
        causes::NO_SPACE => Some(Code::ResourceExhausted),
        // A size below the namespace's: the capacity asked for is not one this
        // plugin serves (ControllerExpandVolume treats it as done, see `expand`).
        causes::WOULD_SHRINK => Some(Code::OutOfRange),
        // The namespace's storage cannot change size while served: no retry helps
        // until an operator moves it.
        causes::NOT_RESIZABLE => Some(Code::FailedPrecondition),
        causes::NOT_FOUND => Some(Code::NotFound),
        causes::ALREADY_EXISTS => Some(Code::AlreadyExists),
        // A host still attached, snapshots still there: the caller must act first.
        causes::IN_USE | causes::HAS_SNAPSHOTS => Some(Code::FailedPrecondition),
        _ => None,
    }
}

/// Whether `error` is a refusal with `data.cause` equal to `cause`.
pub fn has_cause(error: &CallError, cause: &str) -> bool {
    matches!(error, CallError::Remote(remote) if cause_of(remote) == Some(cause))
}

/// Whether `error` is the gateway saying the subsystem or namespace is not there.
pub fn is_not_found(error: &CallError) -> bool {
    matches!(error, CallError::Remote(remote) if code_of_refusal(remote) == Code::NotFound)
}

/// `host_deny` refused because a namespace's hosts list still names the host.
pub fn is_still_attached(error: &CallError) -> bool {
    has_cause(error, causes::IN_USE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(code: i64, message: &str) -> CallError {
        CallError::Remote(RemoteError { code, message: message.to_string(), data: None })
    }

    #[test]
    fn endpoints_are_tried_from_the_one_that_answered_last() {
        assert_eq!(try_order(0, 3).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(try_order(2, 3).collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(try_order(0, 1).collect::<Vec<_>>(), [0]);
    }

    #[tokio::test]
    async fn an_unreachable_gateway_passes_the_call_to_the_next() {
        let missing = |name: &str| {
            Endpoint::Unix(std::env::temp_dir().join(format!("sluice-csi-no-such-{name}-{}.sock", std::process::id())))
        };
        let api = Api::new(vec![missing("a"), missing("b")]);
        let request = management_client::api::NamespaceListRequest { nqn: "nqn.2026-11.io.sluice:gold".to_string() };
        let error = api.send_raw(request).await.unwrap_err();
        // Both were tried: the error is the last one's.
        assert!(matches!(&error, CallError::Unreachable { endpoint, .. } if endpoint.contains("no-such-b")), "{error}");
    }

    #[test]
    fn urls_become_endpoints_and_https_needs_its_files() {
        let tls = TlsFiles::default();
        assert_eq!(endpoint_of("unix:///run/sluice/api.sock", &tls), Ok(Endpoint::Unix("/run/sluice/api.sock".into())));
        assert_eq!(endpoint_of("/tmp/a.sock", &tls), Ok(Endpoint::Unix("/tmp/a.sock".into())));
        assert!(endpoint_of("https://gw:9443", &tls).unwrap_err().contains("--api-ca"));
        let files = TlsFiles {
            ca: Some("/etc/sluice-api/ca.crt".into()),
            certificate: Some("/etc/sluice-api/tls.crt".into()),
            key: Some("/etc/sluice-api/tls.key".into()),
        };
        let Ok(Endpoint::Tls(endpoint)) = endpoint_of("https://gw:4430", &files) else { panic!("an https endpoint") };
        assert_eq!(endpoint.server_name, "gw");
        assert!(endpoint_of("https://gw", &files).unwrap_err().contains("port"));
        assert!(endpoint_of("http://gw:80", &tls).is_err());
        assert!(endpoint_of("unix://", &tls).is_err());
    }

    fn refusal_with_cause(code: i64, message: &str, cause: &str) -> CallError {
        CallError::Remote(RemoteError {
            code,
            message: message.to_string(),
            data: Some(serde_json::json!({ "cause": cause, "field": "size" })),
        })
    }

    #[test]
    fn refusals_map_to_the_codes_the_spec_asks_for() {
        let cases = [
            (refusal(codes::INVALID_PARAMS, "size: is too large"), Code::InvalidArgument),
            (refusal_with_cause(codes::CHANGE_REFUSED, "no subsystem nqn.x", causes::NOT_FOUND), Code::NotFound),
            (
                refusal_with_cause(codes::CHANGE_REFUSED, "uuid 1 is already used", causes::ALREADY_EXISTS),
                Code::AlreadyExists,
            ),
            (refusal(codes::CHANGE_REFUSED, "subsystem nqn.x has no free NSID left"), Code::FailedPrecondition),
            (
                refusal_with_cause(codes::CONFIG_INVALID, "pool \"p\" has no room", causes::NO_SPACE),
                Code::ResourceExhausted,
            ),
            (refusal(codes::CONFIG_INVALID, "bad"), Code::InvalidArgument),
            (refusal(codes::GROUP_CONFIG_CONFLICT, "changed"), Code::Aborted),
            (refusal(codes::INTERNAL_ERROR, "bug"), Code::Internal),
            (CallError::Unreachable { endpoint: "e".into(), reason: "r".into() }, Code::Unavailable),
        ];
        for (error, code) in cases {
            assert_eq!(status_of("ns_add", &error).code(), code, "{error}");
        }
        assert!(status_of("ns_add", &refusal(codes::INVALID_PARAMS, "size: x")).message().contains("size: x"));
    }

    #[test]
    fn refusals_map_by_their_cause_never_by_their_words() {
        let cases = [
            (causes::NO_SPACE, Code::ResourceExhausted),
            (causes::WOULD_SHRINK, Code::OutOfRange),
            (causes::NOT_RESIZABLE, Code::FailedPrecondition),
            (causes::NOT_FOUND, Code::NotFound),
            (causes::ALREADY_EXISTS, Code::AlreadyExists),
            (causes::IN_USE, Code::FailedPrecondition),
            (causes::HAS_SNAPSHOTS, Code::FailedPrecondition),
        ];
        for (cause, code) in cases {
            for message in ["size: namespace 3 has no namespace room", "already 1 GiB; is still attached", "x"] {
                let error = refusal_with_cause(codes::CHANGE_REFUSED, message, cause);
                assert_eq!(status_of("ns_resize", &error).code(), code, "{cause}: {message}");
                assert!(has_cause(&error, cause));
            }
        }
        // Without a cause, words decide nothing: a refusal is a failed precondition.
        for message in
            ["nsid: subsystem nqn.a has no namespace 3", "uuid 1 is already used", "pool has 1 GiB free, less than"]
        {
            let error = refusal(codes::CHANGE_REFUSED, message);
            assert_eq!(status_of("ns_resize", &error).code(), Code::FailedPrecondition, "{message}");
            assert!(!is_not_found(&error) && !is_still_attached(&error));
        }
        // A cause this driver does not know, or not a string, leaves it to the code.
        let unknown = refusal_with_cause(codes::CHANGE_REFUSED, "refused", "something_new");
        assert_eq!(status_of("ns_resize", &unknown).code(), Code::FailedPrecondition);
        let no_cause_string = CallError::Remote(RemoteError {
            code: codes::CHANGE_REFUSED,
            message: "refused".to_string(),
            data: Some(serde_json::json!({ "cause": 7 })),
        });
        assert_eq!(status_of("ns_resize", &no_cause_string).code(), Code::FailedPrecondition);
        let attached = refusal_with_cause(codes::CHANGE_REFUSED, "host nqn.h is still attached", causes::IN_USE);
        assert!(is_still_attached(&attached) && !is_not_found(&attached));
        assert!(is_not_found(&refusal_with_cause(codes::CHANGE_REFUSED, "gone", causes::NOT_FOUND)));
    }
}

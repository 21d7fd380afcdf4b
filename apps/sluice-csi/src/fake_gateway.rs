//! A stand-in gateway for the driver's tests: a Unix socket that answers each
//! JSON-RPC request (one per connection, as the client sends) with what `answer`
//! returns for its method and parameters: a result or a refusal.
//!
//! Fakes read the parameters as the method's typed request
//! (`serde_json::from_value::<api::NamespaceAdd>(params)`, which refuses a parameter
//! the method does not take) and answer with its typed reply ([`reply`]), so the
//! fake and the daemon share the one contract of `management_client::api`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use management_client::api::{replies, Method};
use management_client::RemoteError;
use serde_json::{Map, Value};
use uuid::Uuid;

/// What the fake answers a request with: the result, or the refusal.
pub type Answer = Result<Value, RemoteError>;

/// Serves `answer` for the rest of the test process; returns the socket's path.
pub fn serve(name: &str, answer: impl Fn(&str, &Value) -> Answer + Send + 'static) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("sluice-csi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    let socket = directory.join("api.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut line = String::new();
            if BufReader::new(&stream).read_line(&mut line).is_err() {
                continue;
            }
            let request: Value = serde_json::from_str(&line).unwrap();
            let mut response = Map::new();
            response.insert("jsonrpc".to_string(), Value::from("2.0"));
            response.insert("id".to_string(), request["id"].clone());
            match answer(request["method"].as_str().unwrap(), &request["params"]) {
                Ok(result) => response.insert("result".to_string(), result),
                Err(refusal) => response.insert("error".to_string(), refusal.to_json()),
            };
            let _ = (&stream).write_all(format!("{}\n", Value::Object(response)).as_bytes());
        }
    });
    socket
}

/// The result `reply` of method `M`, as the daemon writes it.
pub fn reply<M: Method>(reply: M::Reply) -> Answer {
    Ok(serde_json::to_value(reply).unwrap())
}

/// A refusal with `code` (one of `management_client::codes`) and `data`.
pub fn refusal(code: i64, message: impl Into<String>, data: Option<Value>) -> Answer {
    Err(RemoteError { code, message: message.into(), data })
}

/// A namespace as `ns_list` shows one the driver made with `uuid` (its UUID and
/// NGUID), attached to no host.
pub fn namespace(nsid: u32, uuid: Uuid, size_bytes: u64, block_size: u64) -> replies::Namespace {
    replies::Namespace {
        nsid,
        backend: "rbd".to_string(),
        size_bytes,
        block_size,
        blocks: size_bytes / block_size,
        nguid: uuid.simple().to_string(),
        uuid: uuid.hyphenated().to_string(),
        source: "runtime".to_string(),
        qos: Map::new(),
        host_qos: Vec::new(),
        qos_throttled_commands: 0,
        qos_throttled_seconds: 0.0,
        all_hosts: false,
        hosts: Some(Vec::new()),
    }
}

//! A stand-in gateway for the driver's tests: a Unix socket that answers each
//! JSON-RPC request (one per connection, as the client sends) with what `answer`
//! returns for its method and parameters (`{"result": ...}` or `{"error": ...}`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use serde_json::{json, Value};

/// Serves `answer` for the rest of the test process; returns the socket's path.
pub fn serve(name: &str, answer: impl Fn(&str, &Value) -> Value + Send + 'static) -> PathBuf {
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
            let mut reply = answer(request["method"].as_str().unwrap(), &request["params"]);
            reply["jsonrpc"] = json!("2.0");
            reply["id"] = request["id"].clone();
            let _ = (&stream).write_all(format!("{reply}\n").as_bytes());
        }
    });
    socket
}

//! A minimal HTTP/1.1 endpoint serving `GET /metrics`, on its own thread so that a
//! scrape never touches an I/O thread. One request per connection; requests are
//! bounded in size and time because the port may be reachable by anyone.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use nvme_target::Target;

/// Longest request head read before answering 431.
const MAX_REQUEST_HEAD_BYTES: u64 = 8 * 1024;
/// A client must send its request within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds the endpoint and serves it on a background thread; returns the bound
/// address (the port may have been 0).
pub fn start(address: SocketAddr, target: Arc<Target>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("sluice-metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            match stream {
                Ok(stream) => {
                    if let Err(error) = answer(stream, &target) {
                        tracing::debug!(%error, "metrics request failed");
                    }
                }
                Err(error) => tracing::warn!(%error, "metrics endpoint: accept failed"),
            }
        }
    })?;
    Ok(bound)
}

fn answer(stream: TcpStream, target: &Target) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut reader = BufReader::new((&stream).take(MAX_REQUEST_HEAD_BYTES));
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Read the rest of the head so the client is not reset before it reads the answer.
    let mut complete = false;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        if line == "\r\n" || line == "\n" {
            complete = true;
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = if !complete {
        ("431 Request Header Fields Too Large", "text/plain", "request head too large or incomplete\n".to_string())
    } else if method != "GET" {
        ("405 Method Not Allowed", "text/plain", "only GET\n".to_string())
    } else if path == "/metrics" {
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", super::render::render(target))
    } else {
        ("404 Not Found", "text/plain", "metrics are at /metrics\n".to_string())
    };
    let mut writer = &stream;
    write!(
        writer,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    writer.flush()
}

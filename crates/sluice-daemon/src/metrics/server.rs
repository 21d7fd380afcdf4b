//! A minimal HTTP/1.1 endpoint serving `GET /metrics`, on its own threads so that a
//! scrape never touches an I/O thread. One request per connection; requests are
//! bounded in size and time because the port may be reachable by anyone, and a few
//! are answered at once so that one slow client cannot hold up the scrapes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nvme_target::Target;

use sluice_gateway::service::StatusHandle;

/// Longest request head read before answering 431.
const MAX_REQUEST_HEAD_BYTES: u64 = 8 * 1024;
/// A client must send its request within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests answered at once; a connection beyond gets 503 at once. Prometheus
/// scrapes one target with one connection, so this leaves room for a few
/// dashboards and `sluice stat`s next to a stalled client.
const MAX_CONCURRENT_REQUESTS: usize = 4;

/// Binds the endpoint and serves it on a background thread; returns the bound
/// address (the port may have been 0).
pub fn start(address: SocketAddr, target: Arc<Target>, gateway: Option<StatusHandle>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("sluice-metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::warn!(%error, "metrics endpoint: accept failed");
                    continue;
                }
            };
            if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONCURRENT_REQUESTS {
                busy.fetch_sub(1, Ordering::AcqRel);
                refuse_busy(&stream);
                continue;
            }
            let (target, request_busy, gateway) = (target.clone(), busy.clone(), gateway.clone());
            let spawned = std::thread::Builder::new().name("sluice-metrics-request".into()).spawn(move || {
                if let Err(error) = answer(stream, &target, gateway.as_ref()) {
                    tracing::debug!(%error, "metrics request failed");
                }
                request_busy.fetch_sub(1, Ordering::AcqRel);
            });
            if let Err(error) = spawned {
                // The closure never ran: give its place back.
                busy.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!(%error, "metrics endpoint: cannot start a request thread");
            }
        }
    })?;
    Ok(bound)
}

/// Answers 503 without waiting for the request (this runs on the accepting thread):
/// what already arrived is read without blocking, because closing a socket with
/// unread input resets it and the client would lose the answer.
fn refuse_busy(stream: &TcpStream) {
    let mut discard = [0u8; 4096];
    if stream.set_nonblocking(true).is_ok() {
        let mut reader = stream;
        let _ = reader.read(&mut discard);
        let _ = stream.set_nonblocking(false);
    }
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let body = "too many metrics requests at once; retry\n";
    let mut writer = stream;
    let _ = write!(
        writer,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn answer(stream: TcpStream, target: &Target, gateway: Option<&StatusHandle>) -> std::io::Result<()> {
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
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", {
            let mut body = super::render::render(target);
            if let Some(gateway) = gateway {
                let status = gateway.lock().unwrap_or_else(|poison| poison.into_inner()).clone();
                body.push_str(&sluice_gateway::service::render_metrics(&status));
                // With the group's labels, so a member with fewer I/O listeners than
                // the others (hosts lose a path there) can be told apart by rule.
                let io_listeners = target.listeners().iter().filter(|(_, listener)| !listener.discovery_only).count();
                body.push_str(&format!(
                    "# HELP sluice_gateway_io_listeners I/O listeners this gateway accepts on now.\n\
                     # TYPE sluice_gateway_io_listeners gauge\n\
                     sluice_gateway_io_listeners{{group=\"{}\",gateway=\"{}\"}} {io_listeners}\n",
                    status.group, status.name
                ));
            }
            body
        })
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

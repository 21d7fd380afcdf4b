//! The service manager's readiness protocol (systemd's sd_notify): when
//! `NOTIFY_SOCKET` is set, state lines go to that datagram socket. `READY=1` once
//! every listener is bound and the management socket answers, `RELOADING=1` with
//! `MONOTONIC_USEC` when a reload starts and `READY=1` when it is done (what
//! `Type=notify-reload` waits for), `STOPPING=1` at shutdown, and `STATUS=` lines
//! `systemctl status` shows.
//!
//! A few lines over `UnixDatagram` rather than a crate. An address starting with '@'
//! is in the abstract namespace. Failures are logged at debug level and otherwise
//! ignored: a service manager that stopped listening must not stop the target.

use std::os::unix::net::UnixDatagram;

/// The environment variable naming the service manager's socket.
const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` (newline-separated `KEY=VALUE` lines) when `NOTIFY_SOCKET` is set.
/// Returns whether it was sent.
pub fn send(state: &str) -> bool {
    let Some(address) = std::env::var_os(NOTIFY_SOCKET) else { return false };
    let address = address.to_string_lossy().into_owned();
    match send_to(&address, state) {
        Ok(()) => true,
        Err(error) => {
            tracing::debug!(%address, %error, "cannot notify the service manager");
            false
        }
    }
}

fn send_to(address: &str, state: &str) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    match address.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            socket.send_to_addr(state.as_bytes(), &address)?;
        }
        None => {
            socket.send_to(state.as_bytes(), address)?;
        }
    }
    Ok(())
}

/// Status lines are one line: newlines would start a new `KEY=VALUE`.
fn status_line(status: &str) -> String {
    status.replace('\n', " ")
}

/// Serving (at start, and after a reload).
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={}", status_line(status)));
}

/// A reload starts; `MONOTONIC_USEC` lets systemd match it to its own reload request.
pub fn reloading() {
    let state = match monotonic_microseconds() {
        Some(now) => format!("RELOADING=1\nMONOTONIC_USEC={now}\nSTATUS=reloading the config file"),
        None => "RELOADING=1\nSTATUS=reloading the config file".to_string(),
    };
    send(&state);
}

/// Shutting down.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=stopping");
}

/// CLOCK_MONOTONIC in microseconds, the clock systemd compares `MONOTONIC_USEC` with.
fn monotonic_microseconds() -> Option<u64> {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let seconds = u64::try_from(now.tv_sec).ok()?;
    let nanoseconds = u64::try_from(now.tv_nsec).ok()?;
    seconds.checked_mul(1_000_000)?.checked_add(nanoseconds / 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_reach_a_path_and_an_abstract_socket() {
        let directory = std::env::temp_dir().join(format!("sluice-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join("notify.sock");
        let receiver = UnixDatagram::bind(&path).unwrap();
        receiver.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        send_to(path.to_str().unwrap(), "READY=1\nSTATUS=x").unwrap();
        let mut buffer = [0u8; 256];
        let length = receiver.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..length], b"READY=1\nSTATUS=x");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("sluice-notify-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_receiver = UnixDatagram::bind_addr(&address).unwrap();
        abstract_receiver.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        send_to(&format!("@{name}"), "STOPPING=1").unwrap();
        let length = abstract_receiver.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..length], b"STOPPING=1");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let first = monotonic_microseconds().unwrap();
        let second = monotonic_microseconds().unwrap();
        assert!(first > 0 && second >= first);
        assert_eq!(status_line("a\nb"), "a b");
    }
}

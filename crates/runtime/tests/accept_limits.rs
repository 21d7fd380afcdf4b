//! Accept failing with EMFILE must pause accepting, not kill the loop. This
//! lowers the process's descriptor limit, so it lives in its own test binary
//! (its own process) and holds a single test.

mod common;

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::FromRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use runtime::PollMode;

fn set_descriptor_limit(soft: libc::rlim_t) -> libc::rlim_t {
    // SAFETY: getrlimit/setrlimit write to and read from a live rlimit struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        let previous = limit.rlim_cur;
        limit.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        previous
    }
}

/// An unconnected IPv4 TCP socket, made while descriptors are still available.
fn unconnected_socket() -> libc::c_int {
    // SAFETY: socket(2) has no memory preconditions.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    fd
}

/// Connects an existing socket (no new descriptor needed) and wraps it.
fn connect_existing(fd: libc::c_int, address: SocketAddr) -> std::net::TcpStream {
    let SocketAddr::V4(v4) = address else { panic!("IPv4 expected") };
    // SAFETY: sockaddr_in is plain data; all-zero is valid before we fill it.
    let mut raw: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    raw.sin_family = libc::AF_INET as libc::sa_family_t;
    raw.sin_port = v4.port().to_be();
    raw.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
    // SAFETY: `raw` is a valid sockaddr_in of the length given; `fd` is ours.
    let result = unsafe {
        libc::connect(
            fd,
            (&raw as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(result, 0, "connect: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a connected socket owned by nobody else.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    stream.set_read_timeout(Some(STEP_TIMEOUT)).unwrap();
    stream
}

#[test]
fn accept_survives_descriptor_exhaustion() {
    let sockets: Vec<_> = (0..3).map(|_| unconnected_socket()).collect();
    // io_uring captures RLIMIT_NOFILE when an accept is prepared, so the limit
    // is lowered before the runtime arms its multishot accept.
    let original = set_descriptor_limit(128);
    let (runtime, events) = start(Behavior::Echo, config(1, PollMode::Sleep));
    let address = runtime.local_addrs()[0];

    // Use up every remaining descriptor under the lowered limit.
    let mut fillers = Vec::new();
    while let Ok(file) = File::open("/dev/null") {
        fillers.push(file);
    }

    let mut streams: Vec<_> = sockets.into_iter().map(|fd| connect_existing(fd, address)).collect();
    for stream in &mut streams {
        write_all(stream, b"x");
    }
    // Long enough for several failed accepts and back-offs.
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(events.accepted.load(Ordering::SeqCst), 0, "no descriptor should have been available");

    // Free the descriptors: the paused accept resumes and serves everyone.
    drop(fillers);
    set_descriptor_limit(original);
    for stream in &mut streams {
        assert_eq!(read_exact_bytes(stream, 1), b"x");
    }
    assert_eq!(events.accepted.load(Ordering::SeqCst), 3);
    drop(streams);
    events.wait_for_closed(3);
    shutdown_and_join(runtime);
    events.assert_no_violations();
}

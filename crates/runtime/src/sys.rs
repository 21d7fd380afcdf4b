//! The few system calls std does not offer: SO_REUSEPORT listeners, eventfd,
//! and thread affinity. Everything else uses std's socket types.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Connections the kernel queues per listening socket before accept.
const LISTEN_BACKLOG: libc::c_int = 1024;

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

fn set_int_option(fd: RawFd, level: libc::c_int, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` lives across the call and the length passed is its size.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Asks the kernel to acknowledge what `fd` received at once, and the next few
/// segments too, instead of on the delayed-ACK timer (TCP_QUICKACK; Linux leaves
/// quick-ACK mode by itself, so callers set it each time they need it).
pub(crate) fn set_quick_ack(fd: RawFd) -> io::Result<()> {
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)
}

/// A listening TCP socket with SO_REUSEADDR and SO_REUSEPORT set before bind,
/// so every runtime thread can own a socket on the same address and the kernel
/// spreads new connections across them. IPv6 sockets are IPv6-only so that
/// `[::]` and `0.0.0.0` listeners can coexist.
pub fn bind_listener(address: SocketAddr) -> io::Result<TcpListener> {
    let family = match address {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) has no memory preconditions.
    let fd = check(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    if family == libc::AF_INET6 {
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
    }
    let (storage, length) = socket_addr_to_raw(address);
    // SAFETY: `storage` holds a valid sockaddr of `length` bytes for the family.
    check(unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), length) })?;
    // SAFETY: listen(2) on a socket we own.
    check(unsafe { libc::listen(fd, LISTEN_BACKLOG) })?;
    Ok(TcpListener::from(socket))
}

/// Fails with `AddrInUse` if anything listens on `address`, including another
/// process's SO_REUSEPORT group (which a SO_REUSEPORT bind would silently join,
/// splitting connections between two targets). Binds a probe socket without
/// SO_REUSEPORT and closes it again. Port 0 needs no probe: the kernel never
/// picks a shared port for it. "In use" is retried for `retry_for` (zero: once).
pub fn check_address_free(address: SocketAddr, retry_for: std::time::Duration) -> io::Result<()> {
    if address.port() == 0 {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + retry_for;
    loop {
        match probe_bind(address) {
            Err(error) if error.kind() == io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline => {
                std::thread::sleep(BIND_RETRY_INTERVAL);
            }
            result => return result,
        }
    }
}

/// How long a busy address is retried at start. A process killed with SIGKILL
/// leaves its listening sockets behind for a moment: io_uring tears its rings
/// down asynchronously and a pending multishot accept still holds the listener.
/// A restart right after a crash (what a supervisor does) must not fail on
/// that; the teardown takes milliseconds, a real listener stays busy.
pub const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(3);
const BIND_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

fn probe_bind(address: SocketAddr) -> io::Result<()> {
    let family = match address {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) has no memory preconditions.
    let fd = check(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    let _probe = unsafe { OwnedFd::from_raw_fd(fd) };
    // SO_REUSEADDR only, so sockets in TIME_WAIT from a previous run do not count.
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if family == libc::AF_INET6 {
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
    }
    let (storage, length) = socket_addr_to_raw(address);
    // SAFETY: `storage` holds a valid sockaddr of `length` bytes for the family.
    check(unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), length) })?;
    Ok(())
}

fn socket_addr_to_raw(address: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all-zero bytes are valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let length = match address {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for every
            // sockaddr type; this is its documented purpose.
            let raw = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            raw.sin_family = libc::AF_INET as libc::sa_family_t;
            raw.sin_port = v4.port().to_be();
            raw.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let raw = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            raw.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            raw.sin6_port = v6.port().to_be();
            raw.sin6_flowinfo = v6.flowinfo();
            raw.sin6_addr.s6_addr = v6.ip().octets();
            raw.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, length as libc::socklen_t)
}

/// A non-blocking eventfd used to wake a thread blocked in io_uring_enter.
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd(2) has no memory preconditions.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` was just returned by eventfd(2) and nothing else owns it.
        Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Adds one to the counter, completing the thread's pending read. Only an
    /// async-signal-safe write(2): no allocation, no locks, no logging. A full
    /// counter (EAGAIN) already means "wake up", so errors are ignored.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// Pins the calling thread to one core.
pub fn pin_current_thread(core: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data for which all-zero bytes are valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if core >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "core index beyond CPU_SETSIZE"));
    }
    // SAFETY: `core < CPU_SETSIZE` was checked, so the bit lies inside `set`.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: pid 0 means the calling thread; `set` is a live cpu_set_t of the size given.
    check(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })?;
    Ok(())
}

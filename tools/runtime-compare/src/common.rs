//! Pieces shared by every server flavour and the client: the wire shape,
//! the request parser, and socket helpers.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};

/// NVMe/TCP CapsuleCmd PDU: 8-byte common header + 64-byte SQE.
pub const REQUEST_BYTES: usize = 72;
/// NVMe/TCP C2HData PDU header.
pub const RESPONSE_HEADER_BYTES: usize = 24;
/// One 4 KiB logical block read.
pub const RESPONSE_PAYLOAD_BYTES: usize = 4096;
pub const RESPONSE_BYTES: usize = RESPONSE_HEADER_BYTES + RESPONSE_PAYLOAD_BYTES;

/// Per-connection receive buffer size used by every server flavour.
pub const RECV_BUFFER_BYTES: usize = 64 * 1024;

/// The "block" every read returns; a static so servers only copy it.
pub static PAYLOAD: [u8; RESPONSE_PAYLOAD_BYTES] = [0xA5; RESPONSE_PAYLOAD_BYTES];

/// Reassembles 72-byte requests from an arbitrarily chunked byte stream and
/// appends one 4120-byte response per complete request. Every server flavour
/// does exactly this work so only the I/O loop differs.
pub struct RequestParser {
    partial: [u8; REQUEST_BYTES],
    partial_len: usize,
}

impl Default for RequestParser {
    fn default() -> Self {
        Self { partial: [0; REQUEST_BYTES], partial_len: 0 }
    }
}

impl RequestParser {
    pub fn consume(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> usize {
        let mut responses = 0;
        while !data.is_empty() {
            let take = (REQUEST_BYTES - self.partial_len).min(data.len());
            self.partial[self.partial_len..self.partial_len + take].copy_from_slice(&data[..take]);
            self.partial_len += take;
            data = &data[take..];
            if self.partial_len == REQUEST_BYTES {
                self.partial_len = 0;
                // Echo the command id (SQE bytes 2..4 after the 8-byte PDU header)
                // so the response depends on the request, as in NVMe/TCP.
                let mut header = [0u8; RESPONSE_HEADER_BYTES];
                header[0] = 0x07; // C2HData PDU type
                header[8..10].copy_from_slice(&self.partial[10..12]);
                out.extend_from_slice(&header);
                out.extend_from_slice(&PAYLOAD);
                responses += 1;
            }
        }
        responses
    }
}

fn cvt(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// A listening socket with SO_REUSEPORT so every server thread can own one.
pub fn bind_reuseport(address: SocketAddr) -> io::Result<OwnedFd> {
    let SocketAddr::V4(v4) = address else {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "IPv4 only"));
    };
    // SAFETY: plain socket syscalls on a descriptor we own; sockaddr_in is fully initialised.
    unsafe {
        let fd = cvt(libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let owned = OwnedFd::from_raw_fd(fd);
        let one: libc::c_int = 1;
        for option in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
            cvt(libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                &one as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            ))?;
        }
        let mut sockaddr: libc::sockaddr_in = std::mem::zeroed();
        sockaddr.sin_family = libc::AF_INET as u16;
        sockaddr.sin_port = v4.port().to_be();
        sockaddr.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
        cvt(libc::bind(
            fd,
            &sockaddr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        ))?;
        cvt(libc::listen(fd, 1024))?;
        Ok(owned)
    }
}

pub fn set_nodelay(fd: libc::c_int) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid pointer/length pair; failure is harmless here.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        );
    }
}

/// Pins the calling thread to one core (best effort).
pub fn pin_to_core(core: usize) {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity(0) targets the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

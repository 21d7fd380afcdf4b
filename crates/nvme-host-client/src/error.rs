//! The client's error type.

use std::net::SocketAddr;

use nvme_host::{HostError, StatusDisplay};
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::Status;

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connection could not be opened.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// Where we tried to connect.
        address: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// The TCP connection failed after it was open (reset, closed, write stalled).
    #[error("connection to {address} failed: {source}")]
    Io {
        /// The peer.
        address: SocketAddr,
        /// The socket error (`UnexpectedEof` when the target closed).
        source: std::io::Error,
    },
    /// The target broke the NVMe/TCP protocol, or the queue timed out.
    #[error(transparent)]
    Protocol(#[from] HostError),
    /// An NVMe command completed with an error status.
    #[error("{} failed: {}", command_name(*admin, *opcode), StatusDisplay(*status))]
    Command {
        /// True for an admin command, false for an I/O command.
        admin: bool,
        /// The command's opcode.
        opcode: u8,
        /// The completion status.
        status: Status,
    },
    /// The TLS handshake or a TLS record failed (wrong key, a target without TLS).
    #[error("TLS with {address} failed: {message}")]
    Tls {
        /// The target's address.
        address: std::net::SocketAddr,
        /// OpenSSL's reason, or what the target did.
        message: String,
    },
    /// No answer in time (command timeout, connect timeout, CSTS.RDY wait).
    #[error("timed out")]
    Timeout,
    /// The controller was unreachable for longer than the controller loss timeout:
    /// no reconnect succeeded. Commands outstanding then failed.
    #[error("controller lost: no reconnect succeeded within the controller loss timeout")]
    ControllerLost,
    /// A caller-supplied value cannot be used.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The controller answered, but with something this host cannot work with
    /// (CNTLID mismatch, no keep-alive support, CSTS.CFS, no SGL support...).
    #[error("unusable controller: {0}")]
    InvalidController(String),
    /// Every slot of the I/O queue is in use.
    #[error("I/O queue full")]
    QueueFull,
    /// The controller was disconnected or dropped.
    #[error("controller closed")]
    Closed,
}

impl ClientError {
    /// The NVMe status, for [`ClientError::Command`].
    pub fn status(&self) -> Option<Status> {
        match self {
            Self::Command { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A readable name for an opcode, e.g. `Identify (admin 06h)`.
pub fn command_name(admin: bool, opcode: u8) -> String {
    let name = if admin {
        AdminOpcode::from_u8(opcode).map(|opcode| format!("{opcode:?}"))
    } else {
        IoOpcode::from_u8(opcode).map(|opcode| format!("{opcode:?}"))
    };
    let kind = if admin { "admin" } else { "I/O" };
    match name {
        Some(name) => format!("{name} ({kind} {opcode:02X}h)"),
        None => format!("command ({kind} {opcode:02X}h)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_errors_name_the_status() {
        let error =
            ClientError::Command { admin: false, opcode: 0x02, status: Status::LBA_OUT_OF_RANGE.with_do_not_retry() };
        assert_eq!(error.to_string(), "Read (I/O 02h) failed: LBA out of range (SCT 0h SC 80h, DNR)");
    }
}

//! The Sluice NVMe/TCP host core, as a sans-io state machine.
//!
//! A [`HostQueue`] is one TCP connection (one NVMe queue) seen from the host: the
//! driver feeds it the bytes it receives ([`HostQueue::handle_received`]) and the
//! passage of time ([`HostQueue::handle_timeout`]); it answers with bytes to send
//! ([`HostQueue::transmit`]) and completed commands ([`HostQueue::poll_completion`]).
//! Nothing here touches a socket, a thread or a clock, so everything runs in plain
//! unit tests, wired straight to the target's own sans-io `Connection`.
//!
//! ```text
//!  Initializing --ICResp ok--> Connecting --Connect ok--> Ready { controller_id }
//!                                   |                       ^
//!                                   +- AUTHREQ.ATR --> Authenticating (DH-HMAC-CHAP)
//!        \__ bad ICResp, Connect rejected, authentication failed, TermReq, bad PDU,
//!            timeout __/--> Failed
//! ```
//!
//! - `queue`: configuration, command slots, submission, timers, `abandon`.
//! - `authentication`: DH-HMAC-CHAP after Connect when the controller asks for it
//!   (or the host wants the controller to prove itself), run with nvme-auth's host
//!   state machine over Authentication Send/Receive commands.
//! - `receive`: the PDU stream from the target (ICResp, CapsuleResp, C2HData, R2T,
//!   C2HTermReq), every field checked before any data is taken.
//! - `transmit`: ICReq, Connect, command capsules (with in-capsule data) and H2CData
//!   answering R2Ts, encoded into a [`TransmitBatch`]: PDU headers in the batch's
//!   own bytes, write data by reference to the command's buffer or the caller's
//!   memory ([`WriteSource`]), so the driver sends it with one vectored send and
//!   the payload is never copied in user space.
//! - `transmit_batch`: the batch, and how it keeps write data alive while a send
//!   reads it.
//! - [`commands`]: builders for the admin and NVM commands a host sends.
//! - [`status`]: human-readable NVMe status names.
//!
//! The target is not trusted: nothing it sends can make this crate panic, every
//! length is checked against the command it names (or a named limit) before data is
//! buffered, and every misbehaviour ends in a [`HostError`] naming who caused it.
//! Steady state allocates nothing: command buffers move in with [`HostCommand`] and
//! come back in [`HostCompletion`], slots and queues are sized at construction.
//!
//! A write's data goes out by reference: each slot keeps its buffer in an `Arc`
//! allocated with the queue, and a batch holds a clone of it (a reference count,
//! no allocation, no lock) until the driver is done sending it. A command whose
//! response arrives while a batch still holds its data completes only once that
//! batch is cleared or dropped, so neither the command's buffer nor the caller's
//! memory is handed back while the kernel may still read it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod authentication;
pub mod commands;
mod error;
mod queue;
mod receive;
pub mod status;
mod transmit;
mod transmit_batch;
#[cfg(test)]
mod transmit_tests;

pub use error::{FaultOrigin, HostError, IcRespProblem, SubmitError};
pub use nvme_auth::{HostAuthError, Secret, SecretError};
pub use queue::HostQueue;
pub use status::StatusDisplay;
pub use transmit_batch::{TransmitBatch, TransmitSlices};

use nvme_spec::{CompletionQueueEntry, ControllerId, QueueId, SubmissionQueueEntry};
use nvme_tcp_wire::DigestSettings;

/// Largest data transfer of one command in either direction, in bytes. It bounds the
/// buffer a command may ask the target to fill (and so the reader's per-PDU limit);
/// real controllers advertise far less (MDTS, typically 128 KiB to 1 MiB), so callers
/// split bigger transfers anyway.
pub const MAX_COMMAND_DATA_BYTES: u32 = 16 * 1024 * 1024;

/// In-capsule data the admin queue always accepts: NVMe over Fabrics fixes the admin
/// command capsule at 64 + 8192 bytes, so the 1024-byte Connect data always fits.
pub const ADMIN_IN_CAPSULE_DATA_BYTES: u32 = 8192;

/// In-capsule data assumed for an I/O queue until the caller sets the real limit
/// from Identify Controller (IOCCSZ * 16 - 64).
pub const DEFAULT_IO_IN_CAPSULE_DATA_BYTES: u32 = 8192;

/// The smallest MAXH2CDATA a target may announce in ICResp (NVMe/TCP 1.0 requires at
/// least 4 KiB).
pub const MIN_MAX_H2C_DATA_BYTES: u32 = 4096;

/// Everything one queue needs to come up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// QID: 0 is the admin queue.
    pub queue_id: QueueId,
    /// Entries (SQSIZE + 1, so at least 2); the host keeps at most `queue_size - 1`
    /// commands outstanding, one slot short of full as the spec requires.
    pub queue_size: u16,
    /// CNTLID sent in the Connect data: [`ControllerId::DYNAMIC`] for the admin queue,
    /// the admin queue's CNTLID for I/O queues.
    pub controller_id: ControllerId,
    /// SUBNQN: the subsystem to connect to.
    pub subsystem_nqn: String,
    /// HOSTNQN: who we are.
    pub host_nqn: String,
    /// HOSTID: 128-bit host identifier, the same on every queue of an association.
    pub host_identifier: [u8; 16],
    /// KATO sent in the admin Connect, milliseconds; 0 for I/O queues.
    pub keep_alive_timeout_ms: u32,
    /// HDGST / DDGST requested in ICReq; the ICResp must echo exactly these.
    pub digests: DigestSettings,
    /// A command outstanding longer than this fails the queue with
    /// [`HostError::CommandTimeout`] (ICResp and the Connect response are bounded by
    /// it too). 0 disables the timer.
    pub command_timeout_ms: u64,
    /// MAXR2T offered in ICReq (0's based): R2Ts the target may have outstanding per
    /// command minus one. 0 is what Linux sends.
    pub max_r2t_outstanding: u32,
    /// DH-HMAC-CHAP secrets, for a controller that asks for authentication.
    pub dhchap: Option<DhchapSecrets>,
}

/// The host's DH-HMAC-CHAP secrets (nvme-cli's `--dhchap-secret` and
/// `--dhchap-ctrl-secret`). `Debug` never shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhchapSecrets {
    /// The host secret: proves who we are when the Connect response sets
    /// AUTHREQ.ATR.
    pub secret: Secret,
    /// The controller secret: when set, the controller must prove it knows it
    /// (bidirectional authentication), and a controller that does not ask for
    /// authentication is made to run it anyway, so a missing proof fails the queue
    /// instead of passing silently.
    pub controller_secret: Option<Secret>,
    /// Secure channel concatenation (SC_C, admin queue only): the transaction also
    /// generates a TLS PSK ([`HostQueue::take_generated_psk`]).
    pub secure_channel: nvme_auth::SecureChannelRequest,
}

/// Where a queue is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// ICReq queued or sent; waiting for ICResp.
    Initializing,
    /// Fabrics Connect queued or sent; waiting for its response.
    Connecting,
    /// Connected; running DH-HMAC-CHAP before the queue may be used.
    Authenticating,
    /// Connected; commands may be submitted.
    Ready {
        /// CNTLID: from the Connect response on the admin queue, from the
        /// configuration on an I/O queue.
        controller_id: ControllerId,
    },
    /// Unusable; see [`HostQueue::error`]. Outstanding commands wait for
    /// [`HostQueue::abandon`].
    Failed,
}

/// A command to submit.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostCommand {
    /// The command. CID (CDW0 bits 31:16), PSDT and SGL1 are filled in by the queue.
    pub sqe: SubmissionQueueEntry,
    /// Host-to-controller data (write data, Dataset Management ranges), may be empty.
    /// For a read (`data_in_bytes > 0`) it must be empty; its *capacity* is then used
    /// to receive the data, so passing back a previous completion's buffer keeps
    /// steady-state reads allocation-free. The queue sends a write's data straight
    /// from this buffer (it is not copied) and hands it back in the completion.
    pub data_out: Vec<u8>,
    /// Controller-to-host transfer length in bytes (SGL length of a read); 0 for none.
    pub data_in_bytes: u32,
    /// Returned unchanged in the completion.
    pub user_tag: u64,
    /// For a read on a queue given a [`ReadDestination`]: where its data goes, as a
    /// value that destination understands (the fio engine: the address of the
    /// caller's buffer). The data is then written there as it arrives, not collected
    /// into the completion's `data`, which comes back empty. `None`, or a queue
    /// without a destination: collected as usual.
    pub read_destination: Option<u64>,
    /// For a write on a queue given a [`WriteSource`]: where its data is, instead of
    /// `data_out` (which must then be empty). The data is sent straight from there
    /// and the completion's `data` comes back empty. On a queue without a write
    /// source the command is refused ([`crate::SubmitError::NoWriteSource`]).
    pub write_source: Option<SourceBuffer>,
}

/// A write's data that stays in memory the caller owns, named for the queue's
/// [`WriteSource`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceBuffer {
    /// The buffer, as a value the write source understands (the fio engine: the
    /// address of the caller's buffer).
    pub source: u64,
    /// Bytes of data from the start of that buffer.
    pub length: u32,
}

/// Takes read data straight from the receive buffer for commands that name a
/// destination ([`HostCommand::read_destination`]), saving the copy through the
/// command's own buffer: the caller's memory is filled as the data arrives.
pub trait ReadDestination: Send + Sync + std::fmt::Debug {
    /// Writes `data` at byte `offset` of the read buffer `destination` names. The
    /// queue checked `offset + data.len()` against the command's `data_in_bytes`, and
    /// calls this only while the command is outstanding.
    fn write(&self, destination: u64, offset: usize, data: &[u8]);
}

/// Lends write data straight from the caller's memory for commands that name a
/// source ([`HostCommand::write_source`]): the counterpart of [`ReadDestination`]
/// for writes, saving the copy into the command's own buffer. The queue asks for
/// the data when it encodes a command's PDUs (to check it is there and to compute
/// data digests) and again when the driver sends the batch, which may be after the
/// call that encoded it but always before the command completes.
pub trait WriteSource: Send + Sync + std::fmt::Debug {
    /// The `length` bytes at byte `offset` of the write buffer `source` names, or
    /// `None` when that memory may no longer be read (the caller let the queue go).
    /// Once it has returned the data for a command, it must keep returning the same
    /// bytes until that command's completion is handed out: retries and failover
    /// resend from the same memory. The queue checked `offset + length` against the
    /// command's `length`.
    fn data(&self, source: u64, offset: usize, length: usize) -> Option<&[u8]>;
}

/// A finished command.
#[derive(Clone, PartialEq, Eq)]
pub struct HostCompletion {
    /// The command's `user_tag`.
    pub user_tag: u64,
    /// The completion queue entry. For a command that completed through C2HData with
    /// the SUCCESS flag the queue builds it (success status, DW0/DW1 zero). When the
    /// host itself found the data unusable (see `transport_error`) the status is
    /// replaced by Data Transfer Error (SCT 0h, SC 04h).
    pub cqe: CompletionQueueEntry,
    /// Read data (length = bytes received) for a command with `data_in_bytes > 0`,
    /// otherwise the command's `data_out` buffer handed back (empty for reads and
    /// writes that went through a read destination or write source).
    pub data: Vec<u8>,
    /// Why the host overrode the status: a data digest mismatch
    /// ([`HostError::DataDigestMismatch`]) or a read that received fewer bytes than
    /// asked for ([`HostError::ShortData`]). `None` when the CQE is the target's.
    pub transport_error: Option<HostError>,
}

// Debug output names buffer lengths rather than dumping the data (a 128 KiB write
// in a log line helps nobody).
impl std::fmt::Debug for HostCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCommand")
            .field("sqe", &self.sqe)
            .field("data_out_bytes", &self.data_out.len())
            .field("data_in_bytes", &self.data_in_bytes)
            .field("user_tag", &self.user_tag)
            .field("read_destination", &self.read_destination)
            .field("write_source", &self.write_source)
            .finish()
    }
}

impl std::fmt::Debug for HostCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCompletion")
            .field("user_tag", &self.user_tag)
            .field("cqe", &self.cqe)
            .field("data_bytes", &self.data.len())
            .field("transport_error", &self.transport_error)
            .finish()
    }
}

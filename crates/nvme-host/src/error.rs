//! What can go wrong on a host queue, and who caused it.

use nvme_spec::Status;
use nvme_tcp_wire::{DigestSettings, FatalErrorStatus, PduType, ReadErrorKind};

use crate::status::StatusDisplay;
use crate::HostCommand;

/// Who is to blame for an error: decides whether retrying elsewhere makes sense and
/// what a log line should say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOrigin {
    /// The target sent something the protocol does not allow.
    Target,
    /// The network or the passage of time: connection lost, nothing answered.
    Transport,
}

/// Why an ICResp was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IcRespProblem {
    /// DGST differs from what the ICReq asked for (NVMe/TCP lets a controller only
    /// grant exactly what was requested).
    #[error("digests {granted:?} granted, {requested:?} requested")]
    DigestsNotEchoed {
        /// What ICReq asked for.
        requested: DigestSettings,
        /// What ICResp announced.
        granted: DigestSettings,
    },
    /// MAXH2CDATA below the 4096 bytes the spec requires (or not a dword multiple).
    #[error("MAXH2CDATA {0} bytes (at least 4096 and a multiple of 4 required)")]
    MaxH2cData(u32),
    /// The PDU itself was malformed (PFV, CPDA, length...), as the reader found.
    #[error("{0}")]
    Malformed(ReadErrorKind),
}

/// An error on a host queue. Errors caused by the target name it; see
/// [`HostError::origin`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The target's ICResp was unacceptable.
    #[error("target sent a bad ICResp: {reason}")]
    BadIcResp {
        /// What was wrong.
        reason: IcRespProblem,
    },
    /// A PDU header failed its header digest: the stream cannot be trusted. Fatal.
    #[error("target sent a PDU header with a bad digest (received {received:#010x}, computed {computed:#010x})")]
    HeaderDigestMismatch {
        /// HDGST as received.
        received: u32,
        /// CRC32C of the received header.
        computed: u32,
    },
    /// A read's data failed its data digest. Per command: the command completes with
    /// Data Transfer Error and the queue stays up, as Linux does.
    #[error("target sent data with a bad data digest for command {command_id}")]
    DataDigestMismatch {
        /// CID of the command.
        command_id: u16,
    },
    /// The PDU stream broke a rule of the transport (bad header field, length,
    /// sequence); an H2CTermReq was sent.
    #[error("target sent an invalid PDU: {kind}")]
    InvalidPdu {
        /// What the PDU reader found.
        kind: ReadErrorKind,
    },
    /// The target ended the connection with a C2HTermReq.
    #[error("the target ended the connection with C2HTermReq {}", termination_detail(*status, *info))]
    TerminatedByTarget {
        /// FES.
        status: FatalErrorStatus,
        /// FEI.
        info: u32,
    },
    /// The Fabrics Connect command failed.
    #[error("target rejected Connect: {} (DW0 {dw0:#010x})", StatusDisplay(*status))]
    ConnectRejected {
        /// The Connect completion status.
        status: Status,
        /// DW0: IATTR / IPO for Connect Invalid Parameters.
        dw0: u32,
    },
    /// The Connect response was successful but unusable: a reserved CNTLID, or a
    /// demand for authentication this host does not implement.
    #[error("target sent an unusable Connect response (DW0 {dw0:#010x}): {reason}")]
    BadConnectResponse {
        /// DW0 of the response.
        dw0: u32,
        /// What was wrong.
        reason: &'static str,
    },
    /// A valid PDU that is not allowed here (e.g. data before Connect completed, or
    /// an R2T for a command whose data went in-capsule).
    #[error("target sent {pdu_type:?} out of place: {reason}")]
    UnexpectedPdu {
        /// The PDU type.
        pdu_type: PduType,
        /// Why it was not allowed.
        reason: &'static str,
    },
    /// A PDU named a command that is not outstanding.
    #[error("target sent {pdu_type:?} for command {command_id}, which is not outstanding")]
    UnknownCommandId {
        /// The PDU type.
        pdu_type: PduType,
        /// CID or CCCID as received.
        command_id: u16,
    },
    /// Data placed outside the command's buffer, or out of order.
    #[error("target sent {pdu_type:?} for command {command_id} at offset {offset} length {length}; expected offset {expected_offset} within {limit} bytes")]
    DataOutOfRange {
        /// The PDU type (C2HData or R2T).
        pdu_type: PduType,
        /// CID.
        command_id: u16,
        /// DATAO / R2TO.
        offset: u32,
        /// DATAL / R2TL.
        length: u32,
        /// Where the next piece had to start.
        expected_offset: u32,
        /// The command's data length.
        limit: u32,
    },
    /// An R2T with more R2Ts outstanding for the command than MAXR2T allows.
    #[error("target sent more R2Ts for command {command_id} than the {limit} allowed at once")]
    R2tLimitExceeded {
        /// CID.
        command_id: u16,
        /// MAXR2T + 1.
        limit: u32,
    },
    /// A read completed successfully with fewer bytes than it asked for. Per command:
    /// it completes with Data Transfer Error.
    #[error("target completed read command {command_id} with {received} of {expected} bytes")]
    ShortData {
        /// CID.
        command_id: u16,
        /// Bytes received.
        received: u32,
        /// `data_in_bytes` of the command.
        expected: u32,
    },
    /// The connection dropped (reported by the driver through
    /// [`crate::HostQueue::abandon`]).
    #[error("connection lost")]
    ConnectionLost,
    /// The target closed the TCP connection (the driver read end of stream).
    #[error("the target closed the connection{}", if *mid_pdu { " in the middle of a PDU" } else { "" })]
    ConnectionClosed {
        /// Part of a PDU had arrived ([`crate::HostQueue::is_mid_pdu`]).
        mid_pdu: bool,
    },
    /// The TCP connection failed under the driver (reset, broken pipe, ...).
    #[error("{}", if *kind == std::io::ErrorKind::ConnectionReset {
        "the target reset the connection".to_string()
    } else {
        format!("the connection failed ({kind})")
    })]
    ConnectionFailed {
        /// What the socket reported, e.g. `ConnectionReset`.
        kind: std::io::ErrorKind,
    },
    /// The driver gave up on a command whose connection kept failing: it was sent
    /// again on `resends` new connections (the association reconnected each time)
    /// and the last one ended with `cause`. Reported by drivers that resend
    /// commands after a reconnect, never by the queue itself.
    #[error("{cause} {}", gave_up_detail(*resends, *every_time, *out_of_time))]
    GaveUp {
        /// How the last connection the command was on ended.
        cause: Box<HostError>,
        /// Times the command was sent again on a new connection.
        resends: u8,
        /// Every connection the command was sent on ended the same way.
        every_time: bool,
        /// The command's own time limit ran out (rather than its resends).
        out_of_time: bool,
    },
    /// A command got no response within the command timeout.
    #[error("command {command_id} timed out")]
    CommandTimeout {
        /// CID of the oldest command past its deadline.
        command_id: u16,
    },
    /// DH-HMAC-CHAP failed: a wrong secret, a controller that cannot prove the
    /// controller secret, no common hash or group.
    #[error("DH-HMAC-CHAP authentication failed: {error}")]
    Authentication {
        /// What went wrong.
        error: nvme_auth::HostAuthError,
    },
    /// ICResp or the Connect response did not arrive within the command timeout.
    #[error("no {waiting_for} from the target in time")]
    SetupTimeout {
        /// "ICResp" or "Connect response".
        waiting_for: &'static str,
    },
    /// The queue's [`crate::WriteSource`] no longer had a write's data when it was
    /// to be sent (the caller let go of its memory): the command is not sent, or,
    /// for data the target already asked for, the queue fails.
    #[error("the data of command {command_id} was withdrawn by its write source before it was sent")]
    WriteSourceWithdrawn {
        /// CID of the command.
        command_id: u16,
    },
}

/// "FES 0x01 (invalid PDU header field) at offset 16": FEI read as FES defines it.
fn termination_detail(status: FatalErrorStatus, info: u32) -> String {
    let code = status as u16;
    match status {
        FatalErrorStatus::InvalidPduHeaderField => {
            format!("FES {code:#04x} (invalid PDU header field) at offset {info}")
        }
        FatalErrorStatus::UnsupportedParameter => format!("FES {code:#04x} (unsupported parameter) at offset {info}"),
        FatalErrorStatus::HeaderDigestError => {
            format!("FES {code:#04x} (header digest error, the target received HDGST {info:#010x})")
        }
        FatalErrorStatus::PduSequenceError => format!("FES {code:#04x} (PDU sequence error, FEI {info:#x})"),
        FatalErrorStatus::DataTransferOutOfRange => {
            format!("FES {code:#04x} (data transfer out of range, FEI {info:#x})")
        }
        FatalErrorStatus::DataTransferLimitExceeded => {
            format!("FES {code:#04x} (data transfer limit exceeded, FEI {info:#x})")
        }
    }
}

/// What follows the cause in [`HostError::GaveUp`]'s message.
fn gave_up_detail(resends: u8, every_time: bool, out_of_time: bool) -> String {
    let reconnects = if resends == 1 { "1 reconnect".to_string() } else { format!("{resends} reconnects") };
    match (out_of_time, every_time, resends) {
        (true, _, 0) => "and the command's time limit ran out".to_string(),
        (true, true, _) => format!("every time, until the command's time limit ran out ({reconnects})"),
        (true, false, _) => format!("(the last of {reconnects}), and the command's time limit ran out"),
        (false, true, _) => format!("on every retry ({reconnects})"),
        (false, false, _) => format!("(the last of {reconnects}, each ended by a failure)"),
    }
}

impl HostError {
    /// True for errors that say the connection (not one command) is gone:
    /// [`HostError::ConnectionLost`], [`HostError::ConnectionClosed`],
    /// [`HostError::ConnectionFailed`].
    pub fn is_connection_end(&self) -> bool {
        matches!(self, Self::ConnectionLost | Self::ConnectionClosed { .. } | Self::ConnectionFailed { .. })
    }

    /// Who caused the error.
    pub fn origin(&self) -> FaultOrigin {
        match self {
            Self::GaveUp { cause, .. } => cause.origin(),
            Self::ConnectionLost
            | Self::ConnectionClosed { .. }
            | Self::ConnectionFailed { .. }
            | Self::CommandTimeout { .. }
            | Self::SetupTimeout { .. }
            | Self::WriteSourceWithdrawn { .. } => FaultOrigin::Transport,
            _ => FaultOrigin::Target,
        }
    }
}

/// Why [`crate::HostQueue::submit`] refused a command; each variant hands the command
/// back unchanged.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The queue is not `Ready` (still connecting, or failed).
    #[error("queue not ready")]
    NotReady(HostCommand),
    /// `queue_size - 1` commands are outstanding already.
    #[error("queue full")]
    QueueFull(HostCommand),
    /// `data_out` or `data_in_bytes` exceeds [`crate::MAX_COMMAND_DATA_BYTES`].
    #[error("command data exceeds {} bytes", crate::MAX_COMMAND_DATA_BYTES)]
    DataTooLarge(HostCommand),
    /// Both `data_out` and `data_in_bytes` are set: NVMe/TCP commands move data in one
    /// direction only.
    #[error("command moves data in both directions")]
    Bidirectional(HostCommand),
    /// `write_source` is set on a queue without a [`crate::WriteSource`], or
    /// together with `data_out`.
    #[error("write source named without a write source on the queue, or together with data_out")]
    InvalidWriteSource(HostCommand),
}

impl SubmitError {
    /// The refused command.
    pub fn into_command(self) -> HostCommand {
        match self {
            Self::NotReady(command)
            | Self::QueueFull(command)
            | Self::DataTooLarge(command)
            | Self::Bidirectional(command)
            | Self::InvalidWriteSource(command) => command,
        }
    }

    /// The refused command, borrowed.
    pub fn command(&self) -> &HostCommand {
        match self {
            Self::NotReady(command)
            | Self::QueueFull(command)
            | Self::DataTooLarge(command)
            | Self::Bidirectional(command)
            | Self::InvalidWriteSource(command) => command,
        }
    }
}

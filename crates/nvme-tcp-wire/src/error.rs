//! Fatal stream errors (NVMe/TCP 1.0, "Transport Errors" and the H2CTermReq /
//! C2HTermReq "Fatal Error Status" and "Fatal Error Information" fields).
//!
//! Every error the reader reports is fatal for the connection: the receiver sends a
//! TermReq carrying FES, FEI and (up to 128 bytes of) the offending PDU header, then
//! closes. The one exception is an error found in a *received* TermReq: a TermReq
//! is never answered with another, the connection is simply closed
//! ([`ReadError::should_send_termination`]).

use thiserror::Error;

use crate::pdu::{copy_prefix, offsets, prefix, PduType, TerminationRequest, MAX_TERMINATION_DATA_BYTES};

/// FES: fatal error status of a TermReq.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum FatalErrorStatus {
    /// Invalid PDU Header Field; FEI holds the byte offset of the field.
    InvalidPduHeaderField = 0x01,
    /// PDU Sequence Error: a valid PDU arrived when it was not allowed.
    PduSequenceError = 0x02,
    /// Header Digest Error; FEI holds the received HDGST.
    HeaderDigestError = 0x03,
    /// Data Transfer Out of Range: data outside the command's transfer.
    DataTransferOutOfRange = 0x04,
    /// Data Transfer Limit Exceeded (also named R2T Limit Exceeded; Linux has both
    /// names for 05h): more data in one PDU than allowed, or too many R2Ts.
    DataTransferLimitExceeded = 0x05,
    /// Unsupported Parameter; FEI holds the byte offset of the field.
    UnsupportedParameter = 0x06,
}

impl FatalErrorStatus {
    /// Decodes a FES value; `None` for reserved values.
    pub const fn from_u16(value: u16) -> Option<Self> {
        Some(match value {
            0x01 => Self::InvalidPduHeaderField,
            0x02 => Self::PduSequenceError,
            0x03 => Self::HeaderDigestError,
            0x04 => Self::DataTransferOutOfRange,
            0x05 => Self::DataTransferLimitExceeded,
            0x06 => Self::UnsupportedParameter,
            _ => return None,
        })
    }
}

/// What exactly was wrong with the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum ReadErrorKind {
    /// PDU-Type is a reserved value. FES 01h, FEI 0.
    #[error("unknown PDU type {0:#04x}")]
    UnknownPduType(u8),
    /// A PDU type that travels the other way (e.g. C2HData sent to a controller).
    /// FES 01h, FEI 0.
    #[error("PDU type {0:?} is not valid in this direction")]
    UnexpectedPduType(PduType),
    /// The first PDU of the connection was not ICReq (controller) / ICResp (host).
    /// FES 02h.
    #[error("{received:?} received before the connection was initialized")]
    NotInitialized {
        /// The PDU type that arrived first.
        received: PduType,
    },
    /// A second ICReq / ICResp. FES 02h.
    #[error("{0:?} received after the connection was initialized")]
    RepeatedInitialization(PduType),
    /// A PDU after the peer's TermReq; the peer must close instead. FES 02h.
    #[error("{0:?} received after a termination request")]
    PduAfterTermination(PduType),
    /// HLEN differs from the fixed header length of the type. FES 01h, FEI 2.
    #[error("{pdu_type:?} with HLEN {received}, expected {expected}")]
    BadHeaderLength {
        /// The PDU type.
        pdu_type: PduType,
        /// The fixed header length of that type in bytes.
        expected: u8,
        /// HLEN as received.
        received: u8,
    },
    /// HDGSTF or DDGSTF disagrees with the negotiated digests (or is set on a PDU
    /// that never carries digests). FES 01h, FEI 1.
    #[error("digest flags {flags:#04x} disagree with the negotiated digests")]
    DigestFlagMismatch {
        /// FLAGS as received.
        flags: u8,
    },
    /// SUCCESS set without LAST_PDU in a C2HData PDU. FES 01h, FEI 1.
    #[error("C2HData with SUCCESS but without LAST_PDU")]
    SuccessWithoutLast,
    /// The header digest does not match the header. FES 03h, FEI = received digest.
    #[error("header digest {received:#010x} does not match the computed {computed:#010x}")]
    HeaderDigestMismatch {
        /// HDGST as received.
        received: u32,
        /// CRC32C of the received header.
        computed: u32,
    },
    /// PDO is not the aligned end of the header, or lies past PLEN. FES 01h, FEI 3.
    #[error("PDO {received}, expected {expected}")]
    BadDataOffset {
        /// PDO as received.
        received: u8,
        /// The offset the alignment rules give (header + digest rounded up).
        expected: u32,
    },
    /// PLEN is impossible for the type and flags. FES 01h, FEI 4.
    #[error("PLEN {received} outside {minimum}..={maximum}")]
    BadPacketLength {
        /// PLEN as received.
        received: u32,
        /// Smallest PLEN that would have been valid here.
        minimum: u32,
        /// Largest PLEN that would have been valid here.
        maximum: u32,
    },
    /// The PDU announces more data than the reader's limit (in-capsule data size or
    /// MAXH2CDATA); rejected before any data is read. FES 05h.
    #[error("PDU announces {announced} data bytes, limit is {limit}")]
    DataTooLong {
        /// Data bytes implied by PLEN, PDO and DDGSTF.
        announced: u32,
        /// The reader's `max_data_bytes`.
        limit: u32,
    },
    /// DATAL of an H2CData / C2HData PDU differs from the data the PDU carries
    /// (PLEN - PDO - DDGST). FES 01h, FEI 16.
    #[error("DATAL {datal} differs from the PDU's {actual} data bytes")]
    DataLengthMismatch {
        /// DATAL as received.
        datal: u32,
        /// Data bytes implied by PLEN, PDO and DDGSTF.
        actual: u32,
    },
    /// PFV is not 0 (NVMe/TCP 1.0). FES 06h, FEI 8.
    #[error("unsupported protocol format version {0}")]
    UnsupportedVersion(u16),
    /// HPDA / CPDA above 31. FES 01h, FEI 10.
    #[error("PDU data alignment {0} above 31")]
    BadDataAlignment(u8),
    /// MAXH2CDATA is zero or not a dword multiple. FES 01h, FEI 12.
    #[error("MAXH2CDATA {0} is zero or not a multiple of 4")]
    BadMaxH2cData(u32),
    /// A received TermReq carries a reserved FES value. FES 01h, FEI 8 (but see
    /// [`ReadError::should_send_termination`]).
    #[error("termination request with reserved FES {0:#06x}")]
    UnknownFatalErrorStatus(u16),
}

impl ReadErrorKind {
    /// FES to report for this error.
    pub const fn status(&self) -> FatalErrorStatus {
        use FatalErrorStatus::*;
        match self {
            Self::NotInitialized { .. } | Self::RepeatedInitialization(_) | Self::PduAfterTermination(_) => {
                PduSequenceError
            }
            Self::HeaderDigestMismatch { .. } => HeaderDigestError,
            Self::DataTooLong { .. } => DataTransferLimitExceeded,
            Self::UnsupportedVersion(_) => UnsupportedParameter,
            Self::UnknownPduType(_)
            | Self::UnexpectedPduType(_)
            | Self::BadHeaderLength { .. }
            | Self::DigestFlagMismatch { .. }
            | Self::SuccessWithoutLast
            | Self::BadDataOffset { .. }
            | Self::BadPacketLength { .. }
            | Self::DataLengthMismatch { .. }
            | Self::BadDataAlignment(_)
            | Self::BadMaxH2cData(_)
            | Self::UnknownFatalErrorStatus(_) => InvalidPduHeaderField,
        }
    }

    /// FEI to report: the byte offset of the offending field for FES 01h and 06h,
    /// the received header digest for FES 03h, and 0 (reserved) otherwise.
    pub const fn info(&self) -> u32 {
        match self {
            Self::UnknownPduType(_) | Self::UnexpectedPduType(_) => offsets::PDU_TYPE,
            Self::DigestFlagMismatch { .. } | Self::SuccessWithoutLast => offsets::FLAGS,
            Self::BadHeaderLength { .. } => offsets::HLEN,
            Self::BadDataOffset { .. } => offsets::PDO,
            Self::BadPacketLength { .. } => offsets::PLEN,
            Self::DataLengthMismatch { .. } => offsets::DATA_LENGTH,
            Self::UnsupportedVersion(_) => offsets::PFV,
            Self::BadDataAlignment(_) => offsets::DATA_ALIGNMENT,
            Self::BadMaxH2cData(_) => offsets::IC_LIMIT,
            Self::UnknownFatalErrorStatus(_) => offsets::FES,
            Self::HeaderDigestMismatch { received, .. } => *received,
            Self::NotInitialized { .. }
            | Self::RepeatedInitialization(_)
            | Self::PduAfterTermination(_)
            | Self::DataTooLong { .. } => 0,
        }
    }
}

/// A fatal stream error: the caller sends a TermReq carrying `status`, `info` and
/// the offending header bytes, then closes (see [`ReadError::termination_request`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("{kind} (FES {status:?}, FEI {info:#x})")]
pub struct ReadError {
    /// FES to send.
    pub status: FatalErrorStatus,
    /// FEI to send.
    pub info: u32,
    /// The offending PDU header as far as it was received (at least the common
    /// header, at most [`MAX_TERMINATION_DATA_BYTES`]).
    pub header: [u8; MAX_TERMINATION_DATA_BYTES],
    /// Number of valid bytes in `header`.
    pub header_length: usize,
    /// The precise reason.
    pub kind: ReadErrorKind,
    /// The PDU type of the offending PDU when it was a known type.
    pub pdu_type: Option<PduType>,
}

impl ReadError {
    /// Builds the error for `kind`, copying up to 128 bytes of `header`.
    pub fn new(kind: ReadErrorKind, pdu_type: Option<PduType>, header: &[u8]) -> Self {
        let mut copy = [0u8; MAX_TERMINATION_DATA_BYTES];
        let length = copy_prefix(&mut copy, header);
        Self { status: kind.status(), info: kind.info(), header: copy, header_length: length, kind, pdu_type }
    }

    /// The valid part of the offending header.
    pub fn offending_header(&self) -> &[u8] {
        prefix(&self.header, self.header_length)
    }

    /// The TermReq to send for this error.
    pub fn termination_request(&self) -> TerminationRequest {
        TerminationRequest::new(self.status, self.info, self.offending_header())
    }

    /// False when the peer has already terminated: the offending PDU was itself a
    /// TermReq, or followed one. A TermReq is never answered with another; the
    /// connection is just closed.
    pub fn should_send_termination(&self) -> bool {
        !matches!(self.pdu_type, Some(PduType::H2cTermReq | PduType::C2hTermReq))
            && !matches!(self.kind, ReadErrorKind::PduAfterTermination(_))
    }
}

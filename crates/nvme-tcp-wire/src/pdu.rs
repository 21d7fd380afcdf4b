//! PDU types, header layouts and the decoded header structures
//! (NVMe/TCP Transport Specification 1.0, "PDU Definitions").
//!
//! Every PDU starts with the 8-byte common header (CH):
//!
//! | byte | field | meaning |
//! | --- | --- | --- |
//! | 0 | PDU-Type | [`PduType`] |
//! | 1 | FLAGS | [`flags`] |
//! | 2 | HLEN | header length: CH + PDU specific header (PSH), without HDGST |
//! | 3 | PDO | PDU data offset: where the data starts, counted from byte 0 |
//! | 4..8 | PLEN | total PDU length: header, HDGST, padding, data, DDGST |
//!
//! followed by the PSH, the optional header digest (HDGST), padding up to PDO, the
//! data and the optional data digest (DDGST). All multi-byte fields are little-endian.
//! The layouts below match Linux's `include/linux/nvme-tcp.h` structures and are
//! pinned byte by byte in this module's tests.

use nvme_spec::bytes::{get_u16, get_u32, put_u16, put_u32};
use nvme_spec::cqe::COMPLETION_QUEUE_ENTRY_BYTES;
use nvme_spec::sqe::SUBMISSION_QUEUE_ENTRY_BYTES;
use nvme_spec::{CommandId, CompletionQueueEntry, SubmissionQueueEntry};

use crate::error::FatalErrorStatus;

/// CH: common header size in bytes.
pub const COMMON_HEADER_BYTES: usize = 8;
/// HLEN == PLEN of ICReq and ICResp in bytes (they never carry digests or data).
pub const IC_PDU_BYTES: usize = 128;
/// HLEN of CapsuleCmd in bytes: CH + the 64-byte SQE.
pub const CAPSULE_COMMAND_HEADER_BYTES: usize = COMMON_HEADER_BYTES + SUBMISSION_QUEUE_ENTRY_BYTES;
/// HLEN of CapsuleResp in bytes: CH + the 16-byte CQE.
pub const CAPSULE_RESPONSE_HEADER_BYTES: usize = COMMON_HEADER_BYTES + COMPLETION_QUEUE_ENTRY_BYTES;
/// HLEN of H2CData and C2HData in bytes.
pub const DATA_HEADER_BYTES: usize = 24;
/// HLEN of R2T in bytes.
pub const R2T_HEADER_BYTES: usize = 24;
/// HLEN of H2CTermReq and C2HTermReq in bytes.
pub const TERMINATION_HEADER_BYTES: usize = 24;
/// Largest PLEN of an H2CTermReq or C2HTermReq in bytes: "the total length of the PDU
/// shall not exceed 152 bytes" (Linux `NVME_TCP_MAX_C2HTERM_PLEN`, SPDK
/// `SPDK_NVME_TCP_TERM_REQ_PDU_MAX_SIZE`).
pub const MAX_TERMINATION_PDU_BYTES: usize = 152;
/// Largest data section of a TermReq in bytes, i.e. how much of the offending PDU
/// header a TermReq can carry: 152 - 24 = 128 bytes, for both directions.
pub const MAX_TERMINATION_DATA_BYTES: usize = MAX_TERMINATION_PDU_BYTES - TERMINATION_HEADER_BYTES;
/// Largest HPDA / CPDA value (0's based dwords): 31 means 128-byte alignment.
pub const MAX_DATA_ALIGNMENT_DWORDS: u8 = 31;
/// PFV: the only protocol format version defined, NVMe/TCP 1.0.
pub const PROTOCOL_FORMAT_VERSION_1_0: u16 = 0;
/// Largest number of header bytes the reader stages for one PDU: a whole TermReq
/// (its header plus the copied offending header) is the biggest fixed-size unit.
pub const MAX_STAGED_HEADER_BYTES: usize = MAX_TERMINATION_PDU_BYTES;

/// Byte offsets of header fields from the start of the PDU. These are the values a
/// TermReq reports in FEI for an invalid or unsupported field.
pub mod offsets {
    /// PDU-Type.
    pub const PDU_TYPE: u32 = 0;
    /// FLAGS.
    pub const FLAGS: u32 = 1;
    /// HLEN.
    pub const HLEN: u32 = 2;
    /// PDO.
    pub const PDO: u32 = 3;
    /// PLEN.
    pub const PLEN: u32 = 4;
    /// PFV in ICReq / ICResp.
    pub const PFV: u32 = 8;
    /// HPDA in ICReq, CPDA in ICResp.
    pub const DATA_ALIGNMENT: u32 = 10;
    /// DGST in ICReq / ICResp.
    pub const DGST: u32 = 11;
    /// MAXR2T in ICReq, MAXH2CDATA in ICResp.
    pub const IC_LIMIT: u32 = 12;
    /// FES in a TermReq.
    pub const FES: u32 = 8;
    /// FEI in a TermReq.
    pub const FEI: u32 = 10;
    /// CCCID in H2CData, C2HData and R2T.
    pub const CCCID: u32 = 8;
    /// TTAG in H2CData, C2HData and R2T.
    pub const TTAG: u32 = 10;
    /// DATAO in H2CData / C2HData, R2TO in R2T.
    pub const DATA_OFFSET: u32 = 12;
    /// DATAL in H2CData / C2HData, R2TL in R2T.
    pub const DATA_LENGTH: u32 = 16;
}

/// The single-byte [`offsets`] as `usize` indexes into a staged header array: a
/// constant index into an array is bounds-checked at compile time.
pub(crate) mod at {
    use super::offsets;

    /// PDU-Type.
    pub(crate) const PDU_TYPE: usize = offsets::PDU_TYPE as usize;
    /// FLAGS.
    pub(crate) const FLAGS: usize = offsets::FLAGS as usize;
    /// HLEN.
    pub(crate) const HLEN: usize = offsets::HLEN as usize;
    /// PDO.
    pub(crate) const PDO: usize = offsets::PDO as usize;
    /// HPDA in ICReq, CPDA in ICResp.
    pub(crate) const DATA_ALIGNMENT: usize = offsets::DATA_ALIGNMENT as usize;
    /// DGST in ICReq / ICResp.
    pub(crate) const DGST: usize = offsets::DGST as usize;
}

/// FLAGS bits of the common header.
pub mod flags {
    /// HDGSTF: a header digest follows the PDU header.
    pub const HDGSTF: u8 = 0x01;
    /// DDGSTF: a data digest follows the PDU data.
    pub const DDGSTF: u8 = 0x02;
    /// LAST_PDU: the last H2CData / C2HData PDU of a transfer (Linux `DATA_LAST`).
    pub const LAST_PDU: u8 = 0x04;
    /// SUCCESS: in C2HData only; the command completed successfully and no
    /// CapsuleResp follows (requires LAST_PDU).
    pub const SUCCESS: u8 = 0x08;
}

/// DGST bits of ICReq / ICResp: which digests are requested / granted.
pub mod dgst {
    /// HDGST_ENABLE: header digests.
    pub const HEADER_DIGEST_ENABLE: u8 = 0x01;
    /// DDGST_ENABLE: data digests.
    pub const DATA_DIGEST_ENABLE: u8 = 0x02;
}

/// PDU-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PduType {
    /// ICReq: initialize connection request (host to controller).
    IcReq = 0x00,
    /// ICResp: initialize connection response (controller to host).
    IcResp = 0x01,
    /// H2CTermReq: host to controller termination request.
    H2cTermReq = 0x02,
    /// C2HTermReq: controller to host termination request.
    C2hTermReq = 0x03,
    /// CapsuleCmd: command capsule (host to controller).
    CapsuleCmd = 0x04,
    /// CapsuleResp: response capsule (controller to host).
    CapsuleResp = 0x05,
    /// H2CData: host to controller data.
    H2cData = 0x06,
    /// C2HData: controller to host data.
    C2hData = 0x07,
    /// R2T: ready to transfer (controller to host).
    R2t = 0x09,
}

impl PduType {
    /// Decodes a PDU-Type byte; `None` for reserved values (08h, 0Ah and up).
    pub const fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            0x00 => Self::IcReq,
            0x01 => Self::IcResp,
            0x02 => Self::H2cTermReq,
            0x03 => Self::C2hTermReq,
            0x04 => Self::CapsuleCmd,
            0x05 => Self::CapsuleResp,
            0x06 => Self::H2cData,
            0x07 => Self::C2hData,
            0x09 => Self::R2t,
            _ => return None,
        })
    }

    /// HLEN: the fixed header length of this PDU type in bytes.
    pub const fn header_length(self) -> usize {
        match self {
            Self::IcReq | Self::IcResp => IC_PDU_BYTES,
            Self::H2cTermReq | Self::C2hTermReq => TERMINATION_HEADER_BYTES,
            Self::CapsuleCmd => CAPSULE_COMMAND_HEADER_BYTES,
            Self::CapsuleResp => CAPSULE_RESPONSE_HEADER_BYTES,
            Self::H2cData | Self::C2hData => DATA_HEADER_BYTES,
            Self::R2t => R2T_HEADER_BYTES,
        }
    }

    /// True for PDUs the host sends (ICReq, H2CTermReq, CapsuleCmd, H2CData).
    pub const fn is_host_to_controller(self) -> bool {
        matches!(self, Self::IcReq | Self::H2cTermReq | Self::CapsuleCmd | Self::H2cData)
    }

    /// True for the types that may carry digests (everything but IC PDUs and
    /// TermReqs, which never do).
    pub const fn carries_digests(self) -> bool {
        !matches!(self, Self::IcReq | Self::IcResp | Self::H2cTermReq | Self::C2hTermReq)
    }

    /// True for the types with a PDU data section moved by the data path
    /// (CapsuleCmd in-capsule data, H2CData, C2HData). TermReqs carry the offending
    /// header as data too, but that is part of the decoded [`TerminationRequest`].
    pub const fn may_carry_data(self) -> bool {
        matches!(self, Self::CapsuleCmd | Self::H2cData | Self::C2hData)
    }
}

/// Which digests are in use on a connection (negotiated through DGST in
/// ICReq / ICResp).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DigestSettings {
    /// HDGST: a CRC32C follows every PDU header (except IC PDUs and TermReqs).
    pub header: bool,
    /// DDGST: a CRC32C follows the data of every PDU with data (except TermReqs).
    pub data: bool,
}

impl DigestSettings {
    /// No digests.
    pub const NONE: Self = Self { header: false, data: false };

    /// Decodes the DGST byte of ICReq / ICResp (reserved bits are ignored).
    pub const fn from_dgst(dgst_byte: u8) -> Self {
        Self { header: dgst_byte & dgst::HEADER_DIGEST_ENABLE != 0, data: dgst_byte & dgst::DATA_DIGEST_ENABLE != 0 }
    }

    /// Encodes as the DGST byte of ICReq / ICResp.
    pub const fn to_dgst(self) -> u8 {
        (if self.header { dgst::HEADER_DIGEST_ENABLE } else { 0 })
            | (if self.data { dgst::DATA_DIGEST_ENABLE } else { 0 })
    }
}

/// Alignment in bytes for a 0's based dword count (HPDA / CPDA), clamped to the
/// largest defined value (31, 128 bytes).
pub const fn alignment_bytes(alignment_dwords_zero_based: u8) -> u32 {
    let dwords = if alignment_dwords_zero_based > MAX_DATA_ALIGNMENT_DWORDS {
        MAX_DATA_ALIGNMENT_DWORDS
    } else {
        alignment_dwords_zero_based
    };
    (dwords as u32 + 1) * 4
}

/// PDO of a PDU with data: header plus header digest, rounded up to the alignment.
pub const fn data_offset(header_and_digest_bytes: u32, alignment_dwords_zero_based: u8) -> u32 {
    let alignment = alignment_bytes(alignment_dwords_zero_based);
    header_and_digest_bytes.div_ceil(alignment) * alignment
}

/// The first `length` bytes of `bytes`, or all of them when it is shorter.
pub(crate) fn prefix(bytes: &[u8], length: usize) -> &[u8] {
    bytes.get(..length).unwrap_or(bytes)
}

/// Copies as much of `source` as fits to the start of `target`; returns how many
/// bytes that was (the shorter of the two lengths).
pub(crate) fn copy_prefix(target: &mut [u8], source: &[u8]) -> usize {
    let length = target.len().min(source.len());
    if let (Some(target), Some(source)) = (target.get_mut(..length), source.get(..length)) {
        target.copy_from_slice(source);
    }
    length
}

/// ICReq PSH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitializeConnectionRequest {
    /// PFV: protocol format version (0 = NVMe/TCP 1.0).
    pub protocol_format_version: u16,
    /// HPDA: host PDU data alignment the controller must use for C2H data, 0's based
    /// dwords (0..=31).
    pub host_pdu_data_alignment: u8,
    /// DGST: digests the host asks for.
    pub digests: DigestSettings,
    /// MAXR2T: maximum outstanding R2Ts per command, 0's based.
    pub max_r2t_outstanding: u32,
}

/// ICResp PSH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitializeConnectionResponse {
    /// PFV: protocol format version (0 = NVMe/TCP 1.0).
    pub protocol_format_version: u16,
    /// CPDA: controller PDU data alignment the host must use for H2C data, 0's based
    /// dwords (0..=31).
    pub controller_pdu_data_alignment: u8,
    /// DGST: digests the controller enables.
    pub digests: DigestSettings,
    /// MAXH2CDATA: maximum H2CData PDU data length in bytes (a dword multiple,
    /// at least 4096 by convention).
    pub max_h2c_data_bytes: u32,
}

/// CapsuleCmd PSH: the submission queue entry (CCSQE). In-capsule data, if any, is
/// the PDU data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapsuleCommand {
    /// CCSQE: the command.
    pub sqe: SubmissionQueueEntry,
}

/// CapsuleResp PSH: the completion queue entry (RCCQE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapsuleResponse {
    /// RCCQE: the completion.
    pub cqe: CompletionQueueEntry,
}

/// H2CData and C2HData PSH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataHeader {
    /// CCCID: command capsule CID of the command the data belongs to.
    pub command_id: CommandId,
    /// TTAG: transfer tag from the R2T (H2CData); reserved in C2HData.
    pub transfer_tag: u16,
    /// DATAO: offset of this PDU's data within the command's data, in bytes.
    pub data_offset: u32,
    /// DATAL: length of this PDU's data in bytes (must equal PLEN - PDO - DDGST).
    pub data_length: u32,
    /// LAST_PDU flag: last data PDU of the transfer (C2H) or of the R2T (H2C).
    pub last: bool,
    /// SUCCESS flag, C2HData only: no CapsuleResp follows. Always false in H2CData.
    pub success: bool,
}

/// R2T PSH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadyToTransfer {
    /// CCCID: command capsule CID of the command asking for data.
    pub command_id: CommandId,
    /// TTAG: transfer tag the host echoes in its H2CData PDUs.
    pub transfer_tag: u16,
    /// R2TO: offset of the requested data within the command's data, in bytes.
    pub offset: u32,
    /// R2TL: length of the requested data in bytes.
    pub length: u32,
}

/// H2CTermReq / C2HTermReq: PSH plus the data section (the offending PDU header).
#[derive(Clone, Copy, Debug)]
pub struct TerminationRequest {
    /// FES: fatal error status.
    pub status: FatalErrorStatus,
    /// FEI: fatal error information; the byte offset of the offending field for
    /// Invalid PDU Header Field and Unsupported Parameter, the received header digest
    /// for Header Digest Error, otherwise reserved (0).
    pub info: u32,
    /// The header of the PDU that caused the error; only the first
    /// `offending_header_length` bytes are meaningful.
    pub offending_header: [u8; MAX_TERMINATION_DATA_BYTES],
    /// Number of valid bytes in `offending_header` (at most
    /// [`MAX_TERMINATION_DATA_BYTES`]).
    pub offending_header_length: usize,
}

impl TerminationRequest {
    /// Builds a TermReq carrying up to [`MAX_TERMINATION_DATA_BYTES`] of `header`.
    pub fn new(status: FatalErrorStatus, info: u32, header: &[u8]) -> Self {
        let mut offending_header = [0u8; MAX_TERMINATION_DATA_BYTES];
        let length = copy_prefix(&mut offending_header, header);
        Self { status, info, offending_header, offending_header_length: length }
    }

    /// The valid part of the offending header.
    pub fn offending_header(&self) -> &[u8] {
        prefix(&self.offending_header, self.offending_header_length)
    }
}

impl PartialEq for TerminationRequest {
    /// Compares the meaningful bytes only (bytes past the length are ignored).
    fn eq(&self, other: &Self) -> bool {
        self.status == other.status && self.info == other.info && self.offending_header() == other.offending_header()
    }
}

impl Eq for TerminationRequest {}

/// A decoded PDU header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PduHeader {
    /// ICReq.
    IcReq(InitializeConnectionRequest),
    /// ICResp.
    IcResp(InitializeConnectionResponse),
    /// H2CTermReq.
    H2cTermReq(TerminationRequest),
    /// C2HTermReq.
    C2hTermReq(TerminationRequest),
    /// CapsuleCmd.
    CapsuleCmd(CapsuleCommand),
    /// CapsuleResp.
    CapsuleResp(CapsuleResponse),
    /// H2CData.
    H2cData(DataHeader),
    /// C2HData.
    C2hData(DataHeader),
    /// R2T.
    R2t(ReadyToTransfer),
}

impl PduHeader {
    /// The PDU-Type of this header.
    pub const fn pdu_type(&self) -> PduType {
        match self {
            Self::IcReq(_) => PduType::IcReq,
            Self::IcResp(_) => PduType::IcResp,
            Self::H2cTermReq(_) => PduType::H2cTermReq,
            Self::C2hTermReq(_) => PduType::C2hTermReq,
            Self::CapsuleCmd(_) => PduType::CapsuleCmd,
            Self::CapsuleResp(_) => PduType::CapsuleResp,
            Self::H2cData(_) => PduType::H2cData,
            Self::C2hData(_) => PduType::C2hData,
            Self::R2t(_) => PduType::R2t,
        }
    }

    /// Type-specific FLAGS bits (LAST_PDU, SUCCESS); the digest flags are the
    /// writer's business.
    pub(crate) fn specific_flags(&self) -> u8 {
        match self {
            Self::H2cData(data) if data.last => flags::LAST_PDU,
            Self::C2hData(data) => {
                (if data.last { flags::LAST_PDU } else { 0 }) | (if data.success { flags::SUCCESS } else { 0 })
            }
            _ => 0,
        }
    }

    /// Writes the PSH (bytes 8..HLEN) into `header`, which holds at least HLEN bytes
    /// (the writer passes its staging array). Reserved bytes are zeroed.
    pub(crate) fn encode_specific(&self, header: &mut [u8; MAX_STAGED_HEADER_BYTES]) {
        let hlen = self.pdu_type().header_length();
        if let Some(specific) = header.get_mut(COMMON_HEADER_BYTES..hlen) {
            specific.fill(0);
        }
        match self {
            Self::IcReq(ic) => {
                put_u16(header, offsets::PFV as usize, ic.protocol_format_version);
                header[at::DATA_ALIGNMENT] = ic.host_pdu_data_alignment;
                header[at::DGST] = ic.digests.to_dgst();
                put_u32(header, offsets::IC_LIMIT as usize, ic.max_r2t_outstanding);
            }
            Self::IcResp(ic) => {
                put_u16(header, offsets::PFV as usize, ic.protocol_format_version);
                header[at::DATA_ALIGNMENT] = ic.controller_pdu_data_alignment;
                header[at::DGST] = ic.digests.to_dgst();
                put_u32(header, offsets::IC_LIMIT as usize, ic.max_h2c_data_bytes);
            }
            Self::H2cTermReq(term) | Self::C2hTermReq(term) => {
                put_u16(header, offsets::FES as usize, term.status as u16);
                put_u32(header, offsets::FEI as usize, term.info);
            }
            Self::CapsuleCmd(cmd) => {
                let mut sqe = [0u8; SUBMISSION_QUEUE_ENTRY_BYTES];
                cmd.sqe.encode(&mut sqe);
                header[COMMON_HEADER_BYTES..CAPSULE_COMMAND_HEADER_BYTES].copy_from_slice(&sqe);
            }
            Self::CapsuleResp(resp) => {
                let mut cqe = [0u8; COMPLETION_QUEUE_ENTRY_BYTES];
                resp.cqe.encode(&mut cqe);
                header[COMMON_HEADER_BYTES..CAPSULE_RESPONSE_HEADER_BYTES].copy_from_slice(&cqe);
            }
            Self::H2cData(data) | Self::C2hData(data) => {
                put_u16(header, offsets::CCCID as usize, data.command_id.0);
                put_u16(header, offsets::TTAG as usize, data.transfer_tag);
                put_u32(header, offsets::DATA_OFFSET as usize, data.data_offset);
                put_u32(header, offsets::DATA_LENGTH as usize, data.data_length);
            }
            Self::R2t(r2t) => {
                put_u16(header, offsets::CCCID as usize, r2t.command_id.0);
                put_u16(header, offsets::TTAG as usize, r2t.transfer_tag);
                put_u32(header, offsets::DATA_OFFSET as usize, r2t.offset);
                put_u32(header, offsets::DATA_LENGTH as usize, r2t.length);
            }
        }
    }
}

/// Reads the raw PSH fields of a staged header. Validation of the values is the
/// reader's job; this only picks bytes at their offsets. `header` holds the whole
/// staged PDU header (and, for a TermReq, its data right after byte 24).
pub(crate) fn decode_specific(
    pdu_type: PduType,
    header: &[u8; MAX_STAGED_HEADER_BYTES],
    termination_data_length: usize,
) -> Result<PduHeader, u16> {
    let flags_byte = header[at::FLAGS];
    Ok(match pdu_type {
        PduType::IcReq => PduHeader::IcReq(InitializeConnectionRequest {
            protocol_format_version: get_u16(header, offsets::PFV as usize),
            host_pdu_data_alignment: header[at::DATA_ALIGNMENT],
            digests: DigestSettings::from_dgst(header[at::DGST]),
            max_r2t_outstanding: get_u32(header, offsets::IC_LIMIT as usize),
        }),
        PduType::IcResp => PduHeader::IcResp(InitializeConnectionResponse {
            protocol_format_version: get_u16(header, offsets::PFV as usize),
            controller_pdu_data_alignment: header[at::DATA_ALIGNMENT],
            digests: DigestSettings::from_dgst(header[at::DGST]),
            max_h2c_data_bytes: get_u32(header, offsets::IC_LIMIT as usize),
        }),
        PduType::H2cTermReq | PduType::C2hTermReq => {
            let raw_status = get_u16(header, offsets::FES as usize);
            let status = FatalErrorStatus::from_u16(raw_status).ok_or(raw_status)?;
            let length = termination_data_length.min(MAX_TERMINATION_DATA_BYTES);
            let term = TerminationRequest::new(
                status,
                get_u32(header, offsets::FEI as usize),
                prefix(&header[TERMINATION_HEADER_BYTES..], length),
            );
            if pdu_type == PduType::H2cTermReq {
                PduHeader::H2cTermReq(term)
            } else {
                PduHeader::C2hTermReq(term)
            }
        }
        PduType::CapsuleCmd => {
            let mut sqe = [0u8; SUBMISSION_QUEUE_ENTRY_BYTES];
            sqe.copy_from_slice(&header[COMMON_HEADER_BYTES..CAPSULE_COMMAND_HEADER_BYTES]);
            PduHeader::CapsuleCmd(CapsuleCommand { sqe: SubmissionQueueEntry::decode(&sqe) })
        }
        PduType::CapsuleResp => {
            let mut cqe = [0u8; COMPLETION_QUEUE_ENTRY_BYTES];
            cqe.copy_from_slice(&header[COMMON_HEADER_BYTES..CAPSULE_RESPONSE_HEADER_BYTES]);
            PduHeader::CapsuleResp(CapsuleResponse { cqe: CompletionQueueEntry::decode(&cqe) })
        }
        PduType::H2cData | PduType::C2hData => {
            let data = DataHeader {
                command_id: CommandId(get_u16(header, offsets::CCCID as usize)),
                transfer_tag: get_u16(header, offsets::TTAG as usize),
                data_offset: get_u32(header, offsets::DATA_OFFSET as usize),
                data_length: get_u32(header, offsets::DATA_LENGTH as usize),
                last: flags_byte & flags::LAST_PDU != 0,
                success: pdu_type == PduType::C2hData && flags_byte & flags::SUCCESS != 0,
            };
            if pdu_type == PduType::H2cData {
                PduHeader::H2cData(data)
            } else {
                PduHeader::C2hData(data)
            }
        }
        PduType::R2t => PduHeader::R2t(ReadyToTransfer {
            command_id: CommandId(get_u16(header, offsets::CCCID as usize)),
            transfer_tag: get_u16(header, offsets::TTAG as usize),
            offset: get_u32(header, offsets::DATA_OFFSET as usize),
            length: get_u32(header, offsets::DATA_LENGTH as usize),
        }),
    })
}

// The staging buffer must hold every fixed-size unit the reader buffers.
const _: () = assert!(MAX_STAGED_HEADER_BYTES >= IC_PDU_BYTES);
const _: () = assert!(MAX_STAGED_HEADER_BYTES >= CAPSULE_COMMAND_HEADER_BYTES + 4);
const _: () = assert!(CAPSULE_COMMAND_HEADER_BYTES == 72);
const _: () = assert!(CAPSULE_RESPONSE_HEADER_BYTES == 24);
const _: () = assert!(MAX_TERMINATION_DATA_BYTES == 128);

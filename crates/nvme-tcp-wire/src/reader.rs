//! Incremental PDU reader: bytes in, validated headers and borrowed data slices out.
//!
//! The reader stages at most one PDU header (plus its digest, or a whole TermReq:
//! [`MAX_STAGED_HEADER_BYTES`]) in a fixed array and hands PDU data back as slices of
//! the caller's input, so it never allocates. Every length field is checked against a
//! named limit before anything past the fixed-size header is consumed. Any chunking
//! of the same byte stream gives the same events (data slices may be cut
//! differently) and the same error at the same point.
//!
//! Rules enforced (NVMe/TCP Transport Specification 1.0; offsets are FEI values):
//! - "PDU Definitions", common header: the PDU-Type must be defined (FEI 0) and
//!   travel in the direction of the [`Role`] (FEI 0); HLEN must be the fixed header
//!   length of the type (FEI 2).
//! - "Connection Establishment": the first PDU is ICReq (controller) / ICResp (host),
//!   exactly once; anything else is a PDU Sequence Error. A TermReq is allowed at any
//!   time and must be the last PDU.
//! - "PDU Header and Data Digests": HDGSTF is set iff header digests were negotiated
//!   and DDGSTF iff data digests were negotiated and the PDU has data; IC PDUs and
//!   TermReqs never carry either (FEI 1). A wrong HDGST is a Header Digest Error
//!   (checked before any other header field, so a corrupted header is reported as
//!   such). A wrong DDGST is reported per PDU in [`ReadEvent::DataEnd`], not as a
//!   stream error: the stream stays in sync and the caller completes the command
//!   with a transient transport error (or terminates).
//! - "PDU Data Alignment": PDO of a PDU with data equals HLEN + HDGST rounded up to
//!   the peer's alignment (CPDA / HPDA) (FEI 3). Without data, PDO is reserved:
//!   0 (what Linux and SPDK send) or that same aligned offset is accepted.
//! - PLEN (FEI 4): exactly HLEN (+ HDGST) for PDUs without data (128 for IC PDUs),
//!   24..=152 for TermReqs, and for PDUs with data PDO + at least one data byte +
//!   DDGST. The data length PLEN - PDO - DDGST must not exceed
//!   [`ReaderLimits::max_data_bytes`] (Data Transfer Limit Exceeded).
//! - H2CData / C2HData: DATAL equals the PDU's data length (FEI 16); SUCCESS requires
//!   LAST_PDU (FEI 1).
//! - ICReq / ICResp: PFV 0 (else Unsupported Parameter, FEI 8); HPDA / CPDA at most
//!   31 (FEI 10); MAXH2CDATA a non-zero dword multiple (FEI 12).

use nvme_spec::bytes::get_u32;

use crate::digest::{crc32c, DataDigest, DIGEST_BYTES};
use crate::error::{ReadError, ReadErrorKind};
use crate::pdu::{
    at, copy_prefix, data_offset, decode_specific, flags, offsets, prefix, PduHeader, PduType, COMMON_HEADER_BYTES,
    MAX_DATA_ALIGNMENT_DWORDS, MAX_STAGED_HEADER_BYTES, MAX_TERMINATION_PDU_BYTES, PROTOCOL_FORMAT_VERSION_1_0,
    TERMINATION_HEADER_BYTES,
};

/// Which end of the connection the reader serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Reads host-to-controller PDUs (ICReq, H2CTermReq, CapsuleCmd, H2CData).
    Controller,
    /// Reads controller-to-host PDUs (ICResp, C2HTermReq, CapsuleResp, C2HData, R2T).
    Host,
}

/// Limits applied to each PDU before its data is consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaderLimits {
    /// The largest data portion (bytes) accepted in any one PDU (e.g. in-capsule
    /// size for CapsuleCmd, MAXH2CDATA for H2CData); a bigger announced length is a
    /// fatal error before any data is buffered.
    pub max_data_bytes: u32,
}

/// One step of the decoded stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadEvent<'a> {
    /// A complete, validated header (header digest verified). `data_length` bytes of
    /// data follow as `Data` events (0 = none); padding between header and data
    /// (PDO) and the data digest are consumed by the reader, never surfaced.
    /// A TermReq's data (the offending header) is part of the decoded header, so its
    /// `data_length` is 0.
    Header {
        /// The decoded header.
        header: PduHeader,
        /// Number of data bytes that follow.
        data_length: u32,
    },
    /// A non-empty slice of the PDU's data, borrowed from the input.
    Data(&'a [u8]),
    /// The PDU's data is complete; emitted only for PDUs with `data_length > 0`.
    /// `data_digest_ok` is false when data digests are on and DDGST did not match.
    DataEnd {
        /// False on a data digest mismatch.
        data_digest_ok: bool,
    },
}

/// Where the reader is within the current PDU.
#[derive(Clone, Copy, Debug)]
enum State {
    /// Staging the 8-byte common header.
    CommonHeader,
    /// Staging the rest of the header up to `total` bytes (HLEN + HDGST, or a
    /// whole TermReq).
    Header { total: usize },
    /// Skipping `remaining` padding bytes before the data.
    Padding { remaining: u32 },
    /// Passing `remaining` data bytes through.
    Data { remaining: u32 },
    /// Staging the 4-byte DDGST.
    DataDigest,
    /// Data complete; the DataEnd event is due.
    DataEnd { data_digest_ok: bool },
    /// A fatal error was reported; it is repeated forever.
    Failed(ReadError),
}

/// Per-PDU facts decided when its header was validated.
#[derive(Clone, Copy, Debug)]
struct Current {
    data_digest: bool,
    padding: u32,
    data_length: u32,
}

/// The NVMe/TCP PDU reader. See the module documentation.
#[derive(Clone, Debug)]
pub struct PduReader {
    role: Role,
    limits: ReaderLimits,
    digests: DigestState,
    data_alignment: u8,
    initialized: bool,
    terminated: bool,
    state: State,
    staged: usize,
    staging: [u8; MAX_STAGED_HEADER_BYTES],
    current: Current,
    /// Settings captured when the current PDU's common header was accepted, so that
    /// a settings change in mid-PDU applies to the next PDU only.
    frozen: FrozenSettings,
    data_digest: DataDigest,
    received_data_digest: [u8; DIGEST_BYTES],
}

/// The settings one PDU is read under.
#[derive(Clone, Copy, Debug)]
struct FrozenSettings {
    data_digest: bool,
    data_alignment: u8,
    max_data_bytes: u32,
}

/// Digest settings as the reader applies them.
#[derive(Clone, Copy, Debug)]
struct DigestState {
    header: bool,
    data: bool,
}

impl PduReader {
    /// A reader at the start of a connection (expecting ICReq / ICResp), no digests,
    /// alignment 0 (dword).
    pub fn new(role: Role, limits: ReaderLimits) -> Self {
        Self {
            role,
            limits,
            digests: DigestState { header: false, data: false },
            data_alignment: 0,
            initialized: false,
            terminated: false,
            state: State::CommonHeader,
            staged: 0,
            staging: [0; MAX_STAGED_HEADER_BYTES],
            current: Current { data_digest: false, padding: 0, data_length: 0 },
            frozen: FrozenSettings { data_digest: false, data_alignment: 0, max_data_bytes: 0 },
            data_digest: DataDigest::new(),
            received_data_digest: [0; DIGEST_BYTES],
        }
    }

    /// Digests negotiated by ICReq/ICResp; applies to PDUs after the IC exchange
    /// (call it right after the IC header event). Like the other setters it takes
    /// effect from the next PDU whose common header is not complete yet.
    pub fn set_digests(&mut self, digests: crate::pdu::DigestSettings) {
        self.digests = DigestState { header: digests.header, data: digests.data };
    }

    /// PDU data alignment the peer must use (CPDA for the Host role reading C2H PDUs,
    /// HPDA for the Controller role), 0's based dwords, clamped to 31; PDO must equal
    /// the header+hdgst length rounded up to this alignment.
    pub fn set_data_alignment(&mut self, alignment_dwords_zero_based: u8) {
        self.data_alignment = alignment_dwords_zero_based.min(MAX_DATA_ALIGNMENT_DWORDS);
    }

    /// Replaces the limits; applies from the next PDU header on.
    pub fn set_limits(&mut self, limits: ReaderLimits) {
        self.limits = limits;
    }

    /// The role given at construction.
    pub fn role(&self) -> Role {
        self.role
    }

    /// True between PDUs (nothing of a next PDU consumed yet, no event pending).
    pub fn is_at_pdu_boundary(&self) -> bool {
        matches!(self.state, State::CommonHeader) && self.staged == 0
    }

    /// The fatal error, once one was reported.
    pub fn error(&self) -> Option<&ReadError> {
        match &self.state {
            State::Failed(error) => Some(error),
            _ => None,
        }
    }

    /// Consumes bytes from the front of `input` (advancing the slice) and returns the
    /// next event, or Ok(None) when all of `input` was consumed and more is needed.
    /// Any chunking of the same stream yields the same sequence of events (Data
    /// chunks may be split differently). After an error the reader stays failed and
    /// returns the same error again, consuming nothing.
    // The error carries the offending header by value so that reporting it never
    // allocates; errors end the stream, so their size costs nothing per PDU.
    #[allow(clippy::result_large_err)]
    pub fn next_event<'a>(&mut self, input: &mut &'a [u8]) -> Result<Option<ReadEvent<'a>>, ReadError> {
        loop {
            match self.state {
                State::Failed(error) => return Err(error),
                State::CommonHeader => {
                    if !self.stage(input, COMMON_HEADER_BYTES) {
                        return Ok(None);
                    }
                    match self.check_common_header() {
                        Ok(total) => {
                            self.frozen = FrozenSettings {
                                data_digest: self.digests.data,
                                data_alignment: self.data_alignment,
                                max_data_bytes: self.limits.max_data_bytes,
                            };
                            self.state = State::Header { total };
                        }
                        Err(kind) => return Err(self.fail(kind)),
                    }
                }
                State::Header { total } => {
                    if !self.stage(input, total) {
                        return Ok(None);
                    }
                    return match self.finish_header() {
                        Ok(event) => Ok(Some(event)),
                        Err(kind) => Err(self.fail(kind)),
                    };
                }
                State::Padding { remaining } => {
                    let skipped = take(input, remaining).len() as u32;
                    let remaining = remaining - skipped;
                    if remaining > 0 {
                        self.state = State::Padding { remaining };
                        return Ok(None);
                    }
                    self.state = State::Data { remaining: self.current.data_length };
                }
                State::Data { remaining } => {
                    let data = take(input, remaining);
                    if data.is_empty() {
                        return Ok(None);
                    }
                    let remaining = remaining - data.len() as u32;
                    if self.current.data_digest {
                        self.data_digest.update(data);
                    }
                    self.state = if remaining > 0 {
                        State::Data { remaining }
                    } else if self.current.data_digest {
                        self.staged = 0;
                        State::DataDigest
                    } else {
                        State::DataEnd { data_digest_ok: true }
                    };
                    return Ok(Some(ReadEvent::Data(data)));
                }
                State::DataDigest => {
                    if let Some(missing) = self.received_data_digest.get_mut(self.staged..) {
                        self.staged += copy_prefix(missing, take(input, missing.len() as u32));
                    }
                    if self.staged < DIGEST_BYTES {
                        return Ok(None);
                    }
                    let received = u32::from_le_bytes(self.received_data_digest);
                    self.state = State::DataEnd { data_digest_ok: received == self.data_digest.value() };
                }
                State::DataEnd { data_digest_ok } => {
                    self.state = State::CommonHeader;
                    self.staged = 0;
                    return Ok(Some(ReadEvent::DataEnd { data_digest_ok }));
                }
            }
        }
    }

    /// Moves bytes into the staging array until `upto` bytes are staged; true when
    /// they are.
    fn stage(&mut self, input: &mut &[u8], upto: usize) -> bool {
        let upto = upto.min(MAX_STAGED_HEADER_BYTES);
        // `None` when `upto` bytes are staged already.
        if let Some(missing) = self.staging.get_mut(self.staged..upto) {
            self.staged += copy_prefix(missing, take(input, missing.len() as u32));
        }
        self.staged >= upto
    }

    /// Builds the error for `kind`, copying the staged header (at most HLEN bytes of
    /// it), and enters the failed state.
    fn fail(&mut self, kind: ReadErrorKind) -> ReadError {
        let pdu_type = PduType::from_u8(self.staging[at::PDU_TYPE]);
        let length = match pdu_type {
            Some(pdu_type) => self.staged.min(pdu_type.header_length()),
            None => self.staged.min(COMMON_HEADER_BYTES),
        };
        let error = ReadError::new(kind, pdu_type, prefix(&self.staging, length));
        self.state = State::Failed(error);
        error
    }

    /// Validates the common header alone; returns how many header bytes to stage.
    /// Only checks that bound the staging size (and so must precede it) live here.
    fn check_common_header(&self) -> Result<usize, ReadErrorKind> {
        let raw_type = self.staging[at::PDU_TYPE];
        let Some(pdu_type) = PduType::from_u8(raw_type) else {
            return Err(ReadErrorKind::UnknownPduType(raw_type));
        };

        if pdu_type.is_host_to_controller() != (self.role == Role::Controller) {
            return Err(ReadErrorKind::UnexpectedPduType(pdu_type));
        }
        let is_initialization = matches!(pdu_type, PduType::IcReq | PduType::IcResp);
        let is_termination = matches!(pdu_type, PduType::H2cTermReq | PduType::C2hTermReq);
        if self.terminated {
            return Err(ReadErrorKind::PduAfterTermination(pdu_type));
        }
        if is_initialization && self.initialized {
            return Err(ReadErrorKind::RepeatedInitialization(pdu_type));
        }
        if !is_initialization && !is_termination && !self.initialized {
            return Err(ReadErrorKind::NotInitialized { received: pdu_type });
        }

        let hlen = self.staging[at::HLEN];
        let expected_hlen = pdu_type.header_length();
        if usize::from(hlen) != expected_hlen {
            return Err(ReadErrorKind::BadHeaderLength { pdu_type, expected: expected_hlen as u8, received: hlen });
        }

        let flags_byte = self.staging[at::FLAGS];
        let header_digest = self.digests.header && pdu_type.carries_digests();
        let data_digest_possible = self.digests.data && pdu_type.may_carry_data();
        if (flags_byte & flags::HDGSTF != 0) != header_digest
            || (flags_byte & flags::DDGSTF != 0 && !data_digest_possible)
        {
            return Err(ReadErrorKind::DigestFlagMismatch { flags: flags_byte });
        }

        if is_termination {
            // The TermReq's data (the offending header) is staged with its header, so
            // PLEN is bounded here, before anything past the common header is read.
            let plen = self.plen();
            let minimum = TERMINATION_HEADER_BYTES as u32;
            let maximum = MAX_TERMINATION_PDU_BYTES as u32;
            if !(minimum..=maximum).contains(&plen) {
                return Err(ReadErrorKind::BadPacketLength { received: plen, minimum, maximum });
            }
            return Ok(plen as usize);
        }
        Ok(expected_hlen + if header_digest { DIGEST_BYTES } else { 0 })
    }

    /// PLEN of the staged common header.
    fn plen(&self) -> u32 {
        get_u32(&self.staging, offsets::PLEN as usize)
    }

    /// Validates the fully staged header, decodes it and sets up the data phase.
    fn finish_header(&mut self) -> Result<ReadEvent<'static>, ReadErrorKind> {
        let raw_type = self.staging[at::PDU_TYPE];
        let Some(pdu_type) = PduType::from_u8(raw_type) else {
            // Unreachable: check_common_header accepted the type.
            return Err(ReadErrorKind::UnknownPduType(raw_type));
        };
        let hlen = pdu_type.header_length();
        let flags_byte = self.staging[at::FLAGS];
        let header_digest = flags_byte & flags::HDGSTF != 0;

        if header_digest {
            // HDGST follows the HLEN header bytes; both were staged (PDUs with a
            // header digest have HLEN <= 72, and the staging array holds 72 + 4).
            let received = get_u32(&self.staging, hlen);
            let computed = crc32c(prefix(&self.staging, hlen));
            if received != computed {
                return Err(ReadErrorKind::HeaderDigestMismatch { received, computed });
            }
        }

        let plen = self.plen();
        let pdo = self.staging[at::PDO];
        let header_end = (hlen + if header_digest { DIGEST_BYTES } else { 0 }) as u32;
        let aligned_offset = data_offset(header_end, self.frozen.data_alignment);
        let mut current = Current { data_digest: false, padding: 0, data_length: 0 };

        let termination_data_length = if matches!(pdu_type, PduType::H2cTermReq | PduType::C2hTermReq) {
            // PDO is reserved in a TermReq; senders put 0 there, the data offset
            // (24) is accepted as well.
            if pdo != 0 && u32::from(pdo) != TERMINATION_HEADER_BYTES as u32 {
                return Err(ReadErrorKind::BadDataOffset { received: pdo, expected: 0 });
            }
            plen as usize - TERMINATION_HEADER_BYTES
        } else if plen == header_end {
            // No data: PDO is reserved; accept 0 or the aligned offset.
            if pdo != 0 && u32::from(pdo) != aligned_offset {
                return Err(ReadErrorKind::BadDataOffset { received: pdo, expected: 0 });
            }
            if flags_byte & flags::DDGSTF != 0 {
                return Err(ReadErrorKind::DigestFlagMismatch { flags: flags_byte });
            }
            0
        } else if !pdu_type.may_carry_data() {
            return Err(ReadErrorKind::BadPacketLength { received: plen, minimum: header_end, maximum: header_end });
        } else {
            let data_digest = flags_byte & flags::DDGSTF != 0;
            if data_digest != self.frozen.data_digest {
                return Err(ReadErrorKind::DigestFlagMismatch { flags: flags_byte });
            }
            if u32::from(pdo) != aligned_offset {
                return Err(ReadErrorKind::BadDataOffset { received: pdo, expected: aligned_offset });
            }
            let digest_bytes = if data_digest { DIGEST_BYTES as u32 } else { 0 };
            let minimum = aligned_offset + digest_bytes + 1;
            if plen < minimum {
                return Err(ReadErrorKind::BadPacketLength {
                    received: plen,
                    minimum,
                    maximum: (minimum - 1).saturating_add(self.frozen.max_data_bytes),
                });
            }
            let data_length = plen - aligned_offset - digest_bytes;
            if data_length > self.frozen.max_data_bytes {
                return Err(ReadErrorKind::DataTooLong { announced: data_length, limit: self.frozen.max_data_bytes });
            }
            current.data_digest = data_digest;
            current.padding = aligned_offset - header_end;
            current.data_length = data_length;
            0
        };

        let header = match decode_specific(pdu_type, &self.staging, termination_data_length) {
            Ok(header) => header,
            Err(raw_status) => {
                return Err(ReadErrorKind::UnknownFatalErrorStatus(raw_status));
            }
        };
        match &header {
            PduHeader::IcReq(ic) => {
                Self::check_initialization(ic.protocol_format_version, ic.host_pdu_data_alignment)?;
            }
            PduHeader::IcResp(ic) => {
                Self::check_initialization(ic.protocol_format_version, ic.controller_pdu_data_alignment)?;
                let max = ic.max_h2c_data_bytes;
                if max == 0 || max % 4 != 0 {
                    return Err(ReadErrorKind::BadMaxH2cData(max));
                }
            }
            PduHeader::H2cData(data) | PduHeader::C2hData(data) => {
                if data.data_length != current.data_length {
                    return Err(ReadErrorKind::DataLengthMismatch {
                        datal: data.data_length,
                        actual: current.data_length,
                    });
                }
                if flags_byte & flags::SUCCESS != 0 && flags_byte & flags::LAST_PDU == 0 && pdu_type == PduType::C2hData
                {
                    return Err(ReadErrorKind::SuccessWithoutLast);
                }
            }
            _ => {}
        }

        match pdu_type {
            PduType::IcReq | PduType::IcResp => self.initialized = true,
            PduType::H2cTermReq | PduType::C2hTermReq => self.terminated = true,
            _ => {}
        }
        self.current = current;
        self.staged = 0;
        self.data_digest = DataDigest::new();
        self.state = if current.data_length == 0 {
            State::CommonHeader
        } else if current.padding > 0 {
            State::Padding { remaining: current.padding }
        } else {
            State::Data { remaining: current.data_length }
        };
        Ok(ReadEvent::Header { header, data_length: current.data_length })
    }

    /// PFV and HPDA / CPDA checks shared by ICReq and ICResp.
    fn check_initialization(version: u16, alignment: u8) -> Result<(), ReadErrorKind> {
        if version != PROTOCOL_FORMAT_VERSION_1_0 {
            return Err(ReadErrorKind::UnsupportedVersion(version));
        }
        if alignment > MAX_DATA_ALIGNMENT_DWORDS {
            return Err(ReadErrorKind::BadDataAlignment(alignment));
        }
        Ok(())
    }
}

/// Splits up to `max` bytes off the front of `input`.
fn take<'a>(input: &mut &'a [u8], max: u32) -> &'a [u8] {
    let whole: &'a [u8] = input;
    let count = whole.len().min(usize::try_from(max).unwrap_or(usize::MAX));
    let (head, tail) = whole.split_at(count);
    *input = tail;
    head
}

//! PDU writer: encodes headers (and digests) into a caller-owned `Vec<u8>`.
//!
//! The writer only appends: with enough capacity reserved by the caller (see
//! [`PduWriter::header_bytes`]) it never allocates. Data itself is never copied by
//! the writer; the caller sends it from its own buffers after the header and then
//! appends the data digest with [`PduWriter::append_data_digest`].

use nvme_spec::bytes::put_u32;

use crate::digest::{crc32c, DataDigest, DIGEST_BYTES};
use crate::pdu::{
    at, data_offset, flags, offsets, prefix, DigestSettings, PduHeader, MAX_DATA_ALIGNMENT_DWORDS,
    MAX_STAGED_HEADER_BYTES, TERMINATION_HEADER_BYTES,
};

/// Zero bytes for PDO padding (the largest alignment is 128 bytes, so padding is
/// always shorter).
const ZERO_PADDING: [u8; 128] = [0; 128];

/// Sizes and flags of one PDU as the writer lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    hlen: usize,
    header_digest: bool,
    data_digest: bool,
    pdo: u32,
    padding: usize,
    /// Bytes after the header that `write_header` emits itself (TermReq data).
    inline_data: usize,
    plen: u32,
}

/// The NVMe/TCP PDU writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PduWriter {
    digests: DigestSettings,
    /// CPDA we announced (controller) / HPDA (host), 0's based dwords, usually 0.
    data_alignment: u8,
}

impl PduWriter {
    /// A writer with no digests and dword alignment (as before the IC exchange).
    pub fn new() -> Self {
        Self::default()
    }

    /// Digests negotiated by ICReq/ICResp (IC PDUs and TermReqs never carry them).
    pub fn set_digests(&mut self, digests: DigestSettings) {
        self.digests = digests;
    }

    /// Alignment of PDU data we must honour (the peer's HPDA when writing C2H PDUs as
    /// a controller, its CPDA when writing H2C PDUs as a host), 0's based dwords,
    /// clamped to 31.
    pub fn set_data_alignment(&mut self, alignment_dwords_zero_based: u8) {
        self.data_alignment = alignment_dwords_zero_based.min(MAX_DATA_ALIGNMENT_DWORDS);
    }

    /// The digests in use.
    pub fn digests(&self) -> DigestSettings {
        self.digests
    }

    fn layout(&self, header: &PduHeader, data_length: u32) -> Layout {
        let pdu_type = header.pdu_type();
        let hlen = pdu_type.header_length();
        if let PduHeader::H2cTermReq(term) | PduHeader::C2hTermReq(term) = header {
            let inline_data = term.offending_header().len();
            return Layout {
                hlen,
                header_digest: false,
                data_digest: false,
                pdo: 0,
                padding: 0,
                inline_data,
                plen: (TERMINATION_HEADER_BYTES + inline_data) as u32,
            };
        }
        let header_digest = self.digests.header && pdu_type.carries_digests();
        let header_end = (hlen + if header_digest { DIGEST_BYTES } else { 0 }) as u32;
        let data_length = if pdu_type.may_carry_data() { data_length } else { 0 };
        if data_length == 0 {
            return Layout {
                hlen,
                header_digest,
                data_digest: false,
                pdo: 0,
                padding: 0,
                inline_data: 0,
                plen: header_end,
            };
        }
        let data_digest = self.digests.data;
        let pdo = data_offset(header_end, self.data_alignment);
        let digest_bytes = if data_digest { DIGEST_BYTES as u32 } else { 0 };
        Layout {
            hlen,
            header_digest,
            data_digest,
            pdo,
            padding: (pdo - header_end) as usize,
            inline_data: 0,
            plen: pdo.saturating_add(data_length).saturating_add(digest_bytes),
        }
    }

    /// Number of bytes [`write_header`](Self::write_header) appends for this header
    /// and data length (reserve this much capacity to keep it allocation-free).
    pub fn header_bytes(&self, header: &PduHeader, data_length: u32) -> usize {
        let layout = self.layout(header, data_length);
        layout.hlen + if layout.header_digest { DIGEST_BYTES } else { 0 } + layout.padding + layout.inline_data
    }

    /// PLEN of the PDU: everything on the wire including data and data digest.
    pub fn pdu_bytes(&self, header: &PduHeader, data_length: u32) -> u32 {
        self.layout(header, data_length).plen
    }

    /// Appends the full encoding of a header-only PDU or the header part of a PDU
    /// with data: common header, PSH, header digest (if enabled and the PDU type
    /// carries one: not IC PDUs or TermReqs), and PDO padding. `data_length` is the
    /// number of data bytes that will follow (sets PLEN, DDGSTF, PDO; the data
    /// digest, if enabled and `data_length > 0`, is counted in PLEN and the caller
    /// appends it after the data with `append_data_digest`). `data_length` is
    /// ignored for types without a data section (IC PDUs, CapsuleResp, R2T); for a
    /// TermReq the offending header is its data and is written here too. For
    /// H2CData / C2HData, DATAL is taken from the header and should equal
    /// `data_length`. Returns the number of bytes appended.
    pub fn write_header(&self, header: &PduHeader, data_length: u32, out: &mut Vec<u8>) -> usize {
        let layout = self.layout(header, data_length);
        let mut staging = [0u8; MAX_STAGED_HEADER_BYTES];
        let pdu_type = header.pdu_type();
        staging[at::PDU_TYPE] = pdu_type as u8;
        staging[at::FLAGS] = header.specific_flags()
            | if layout.header_digest { flags::HDGSTF } else { 0 }
            | if layout.data_digest { flags::DDGSTF } else { 0 };
        staging[at::HLEN] = layout.hlen as u8;
        // PDO is at most 128 (alignment is clamped), so it always fits.
        staging[at::PDO] = layout.pdo.min(u32::from(u8::MAX)) as u8;
        put_u32(&mut staging, offsets::PLEN as usize, layout.plen);
        header.encode_specific(&mut staging);

        let start = out.len();
        let header_bytes = prefix(&staging, layout.hlen);
        out.extend_from_slice(header_bytes);
        if layout.header_digest {
            out.extend_from_slice(&crc32c(header_bytes).to_le_bytes());
        }
        out.extend_from_slice(prefix(&ZERO_PADDING, layout.padding));
        if let PduHeader::H2cTermReq(term) | PduHeader::C2hTermReq(term) = header {
            out.extend_from_slice(term.offending_header());
        }
        out.len() - start
    }

    /// Appends CRC32C over the given data pieces (the data may be split across
    /// buffers), little-endian. Appends nothing when data digests are off or the data
    /// is empty (a PDU without data has no DDGST), matching what
    /// [`write_header`](Self::write_header) counted in PLEN, so it can be called
    /// unconditionally after a PDU's data.
    pub fn append_data_digest(&self, data: &[&[u8]], out: &mut Vec<u8>) {
        if !self.digests.data || data.iter().all(|piece| piece.is_empty()) {
            return;
        }
        let mut digest = DataDigest::new();
        for piece in data {
            digest.update(piece);
        }
        out.extend_from_slice(&digest.to_wire());
    }
}

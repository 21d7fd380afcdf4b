//! The NVMe/TCP wire (transport spec 1.0): the common header every PDU starts
//! with, reassembly of PDUs from a TCP byte stream, and encoders for the three
//! PDUs the responder sends (ICResp, C2HData header, CapsuleResp). Plain byte
//! layouts, little-endian, offsets as the spec's figures give them.

/// Every PDU starts with an 8-byte common header: type, flags, HLEN, PDO, PLEN.
pub const COMMON_HEADER_BYTES: usize = 8;

/// PDU types (transport spec, figure "PDU Type values").
pub mod pdu_type {
    pub const INITIALIZE_CONNECTION_REQUEST: u8 = 0x00;
    pub const INITIALIZE_CONNECTION_RESPONSE: u8 = 0x01;
    pub const HOST_TO_CONTROLLER_TERMINATION: u8 = 0x02;
    pub const COMMAND_CAPSULE: u8 = 0x04;
    pub const RESPONSE_CAPSULE: u8 = 0x05;
    pub const HOST_TO_CONTROLLER_DATA: u8 = 0x06;
    pub const CONTROLLER_TO_HOST_DATA: u8 = 0x07;
}

/// ICReq and ICResp are both 128 bytes, header only.
pub const INITIALIZE_CONNECTION_BYTES: usize = 128;
/// A command capsule's header: common header + 64-byte submission queue entry.
pub const COMMAND_CAPSULE_HEADER_BYTES: usize = 72;
/// CapsuleResp: common header + 16-byte completion queue entry.
pub const RESPONSE_CAPSULE_BYTES: usize = 24;
/// C2HData header: common header, CCCID, DATAO, DATAL.
pub const CONTROLLER_TO_HOST_DATA_HEADER_BYTES: usize = 24;
/// H2CData and H2CTermReq headers.
const HOST_TO_CONTROLLER_DATA_HEADER_BYTES: usize = 24;
const TERMINATION_HEADER_BYTES: usize = 24;
/// C2HData flag: the last data PDU of the command.
pub const LAST_PDU_FLAG: u8 = 0x04;
/// What ICResp offers as the largest H2CData payload.
pub const MAX_HOST_TO_CONTROLLER_DATA_BYTES: u32 = 128 * 1024;

/// The longest PDU accepted at all: a header and in-capsule or H2C data up to
/// 1 MiB. A longer PLEN is a broken or hostile peer.
pub const MAX_PDU_BYTES: u32 = 1024 * 1024 + 256;
/// How much of a PDU the responder keeps to look at: the capsule header and the
/// 1,024-byte Connect data right after it (PDO 72 when CPDA is 0), with room for
/// padding. Anything beyond (in-capsule write data) is skipped unread.
pub const KEPT_PDU_BYTES: usize = 2048;

/// Why a connection is closed: the responder does not answer bad PDUs with a
/// termination request, it just drops the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum ProtocolError {
    UnknownPduType(u8),
    BadHeaderLength { pdu_type: u8, header_length: u8 },
    BadPduLength(u32),
    BadDataOffset(u8),
    HostTerminated,
    UnexpectedPdu(u8),
    UnsupportedVersion(u16),
}

pub fn read_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

pub fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes([bytes[offset], bytes[offset + 1], bytes[offset + 2], bytes[offset + 3]])
}

pub fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from(read_u32(bytes, offset)) | (u64::from(read_u32(bytes, offset + 4)) << 32)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonHeader {
    pub pdu_type: u8,
    pub flags: u8,
    pub header_length: u8,
    pub data_offset: u8,
    pub pdu_length: u32,
}

/// Parses and checks the common header (`bytes` holds at least 8 bytes). The
/// checks are the ones that keep reassembly safe: a known type with its fixed
/// header length, PLEN covering the header and bounded, PDO inside the PDU.
pub fn parse_common_header(bytes: &[u8]) -> Result<CommonHeader, ProtocolError> {
    let header = CommonHeader {
        pdu_type: bytes[0],
        flags: bytes[1],
        header_length: bytes[2],
        data_offset: bytes[3],
        pdu_length: read_u32(bytes, 4),
    };
    let expected_header_length = match header.pdu_type {
        pdu_type::INITIALIZE_CONNECTION_REQUEST => INITIALIZE_CONNECTION_BYTES,
        pdu_type::COMMAND_CAPSULE => COMMAND_CAPSULE_HEADER_BYTES,
        pdu_type::HOST_TO_CONTROLLER_DATA => HOST_TO_CONTROLLER_DATA_HEADER_BYTES,
        pdu_type::HOST_TO_CONTROLLER_TERMINATION => TERMINATION_HEADER_BYTES,
        other => return Err(ProtocolError::UnknownPduType(other)),
    };
    if usize::from(header.header_length) != expected_header_length {
        return Err(ProtocolError::BadHeaderLength { pdu_type: header.pdu_type, header_length: header.header_length });
    }
    if header.pdu_length < u32::from(header.header_length) || header.pdu_length > MAX_PDU_BYTES {
        return Err(ProtocolError::BadPduLength(header.pdu_length));
    }
    if header.pdu_type == pdu_type::INITIALIZE_CONNECTION_REQUEST
        && header.pdu_length as usize != INITIALIZE_CONNECTION_BYTES
    {
        return Err(ProtocolError::BadPduLength(header.pdu_length));
    }
    let carries_data = header.pdu_length > u32::from(header.header_length);
    if carries_data && (header.data_offset < header.header_length || u32::from(header.data_offset) > header.pdu_length)
    {
        return Err(ProtocolError::BadDataOffset(header.data_offset));
    }
    Ok(header)
}

/// How many leading bytes of a PDU of this length are kept (the rest is skipped).
fn kept_length(pdu_length: u32) -> usize {
    (pdu_length as usize).min(KEPT_PDU_BYTES)
}

/// Cuts a TCP byte stream into PDUs. Whole PDUs found inside one received
/// buffer are handed over in place (no copy, the common case); only a PDU that
/// straddles buffers is gathered in `held`.
#[derive(Default)]
pub struct PduReassembler {
    held: Vec<u8>,
    /// Bytes of the current PDU still to be dropped (beyond KEPT_PDU_BYTES).
    skip: usize,
}

impl PduReassembler {
    /// Feeds received bytes; `handle` gets each PDU's kept bytes and its header.
    /// Stops at the first error (the caller closes the connection).
    pub fn consume<F>(&mut self, mut data: &[u8], mut handle: F) -> Result<(), ProtocolError>
    where
        F: FnMut(CommonHeader, &[u8]) -> Result<(), ProtocolError>,
    {
        while !data.is_empty() {
            if self.skip > 0 {
                let dropped = self.skip.min(data.len());
                self.skip -= dropped;
                data = &data[dropped..];
                continue;
            }
            if self.held.is_empty() && data.len() >= COMMON_HEADER_BYTES {
                let header = parse_common_header(data)?;
                let kept = kept_length(header.pdu_length);
                if data.len() >= kept {
                    handle(header, &data[..kept])?;
                    let consumed = (header.pdu_length as usize).min(data.len());
                    self.skip = header.pdu_length as usize - consumed;
                    data = &data[consumed..];
                    continue;
                }
            }
            // Slow path: gather the header first, then the kept part of the PDU.
            let target = if self.held.len() < COMMON_HEADER_BYTES {
                COMMON_HEADER_BYTES
            } else {
                kept_length(parse_common_header(&self.held)?.pdu_length)
            };
            let take = (target - self.held.len()).min(data.len());
            self.held.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.held.len() >= COMMON_HEADER_BYTES {
                let header = parse_common_header(&self.held)?;
                let kept = kept_length(header.pdu_length);
                if self.held.len() == kept {
                    let held = std::mem::take(&mut self.held);
                    let result = handle(header, &held);
                    self.held = held;
                    self.held.clear();
                    result?;
                    self.skip = header.pdu_length as usize - kept;
                }
            }
        }
        Ok(())
    }
}

/// Writes a common header into the first 8 bytes of `out`.
fn write_common_header(
    out: &mut [u8],
    pdu_type: u8,
    flags: u8,
    header_length: usize,
    data_offset: usize,
    pdu_length: usize,
) {
    out[0] = pdu_type;
    out[1] = flags;
    out[2] = header_length as u8;
    out[3] = data_offset as u8;
    out[4..8].copy_from_slice(&(pdu_length as u32).to_le_bytes());
}

/// ICResp: PFV 0, CPDA 0, no digests, MAXH2CDATA 128 KiB.
pub fn initialize_connection_response() -> [u8; INITIALIZE_CONNECTION_BYTES] {
    let mut pdu = [0u8; INITIALIZE_CONNECTION_BYTES];
    let length = INITIALIZE_CONNECTION_BYTES;
    write_common_header(&mut pdu, pdu_type::INITIALIZE_CONNECTION_RESPONSE, 0, length, 0, length);
    // bytes 8..10 PFV = 0, byte 10 CPDA = 0, byte 11 DGST = 0 (neither digest)
    pdu[12..16].copy_from_slice(&MAX_HOST_TO_CONTROLLER_DATA_BYTES.to_le_bytes());
    pdu
}

/// C2HData header for `data_length` bytes at offset 0, the only data PDU of its
/// command (LAST_PDU, not SUCCESS: a CapsuleResp follows). `padding` zero bytes
/// go between header and data when the host asked for data alignment (HPDA);
/// the caller writes them.
pub fn controller_to_host_data_header(
    command_id: u16,
    data_length: usize,
    padding: usize,
) -> [u8; CONTROLLER_TO_HOST_DATA_HEADER_BYTES] {
    let mut header = [0u8; CONTROLLER_TO_HOST_DATA_HEADER_BYTES];
    let data_offset = CONTROLLER_TO_HOST_DATA_HEADER_BYTES + padding;
    write_common_header(
        &mut header,
        pdu_type::CONTROLLER_TO_HOST_DATA,
        LAST_PDU_FLAG,
        CONTROLLER_TO_HOST_DATA_HEADER_BYTES,
        data_offset,
        data_offset + data_length,
    );
    header[8..10].copy_from_slice(&command_id.to_le_bytes());
    // bytes 12..16 DATAO = 0
    header[16..20].copy_from_slice(&(data_length as u32).to_le_bytes());
    header
}

/// What a completion queue entry says beyond the command id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub command_id: u16,
    pub submission_queue_head: u16,
    pub submission_queue_id: u16,
    /// Command-specific dwords 0 and 1 (a property value, a feature value, ...).
    pub result: u64,
    /// Status field without the phase bit: SC in bits 0..7, SCT in 8..10.
    pub status: u16,
}

/// CapsuleResp carrying one completion queue entry.
pub fn response_capsule(completion: Completion) -> [u8; RESPONSE_CAPSULE_BYTES] {
    let mut pdu = [0u8; RESPONSE_CAPSULE_BYTES];
    let length = RESPONSE_CAPSULE_BYTES;
    write_common_header(&mut pdu, pdu_type::RESPONSE_CAPSULE, 0, length, 0, length);
    pdu[8..16].copy_from_slice(&completion.result.to_le_bytes());
    pdu[16..18].copy_from_slice(&completion.submission_queue_head.to_le_bytes());
    pdu[18..20].copy_from_slice(&completion.submission_queue_id.to_le_bytes());
    pdu[20..22].copy_from_slice(&completion.command_id.to_le_bytes());
    // The phase tag (bit 0) means nothing on a fabric; the status sits above it.
    pdu[22..24].copy_from_slice(&(completion.status << 1).to_le_bytes());
    pdu
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capsule(command_id: u16, extra: usize) -> Vec<u8> {
        let length = COMMAND_CAPSULE_HEADER_BYTES + extra;
        let mut pdu = vec![0u8; length];
        let data_offset = if extra > 0 { COMMAND_CAPSULE_HEADER_BYTES } else { 0 };
        write_common_header(&mut pdu, pdu_type::COMMAND_CAPSULE, 0, 72, data_offset, length);
        pdu[10..12].copy_from_slice(&command_id.to_le_bytes());
        pdu
    }

    fn collect(reassembler: &mut PduReassembler, chunks: &[&[u8]]) -> Result<Vec<(u16, usize)>, ProtocolError> {
        let mut seen = Vec::new();
        for chunk in chunks {
            reassembler.consume(chunk, |header, bytes| {
                assert_eq!(header.pdu_type, pdu_type::COMMAND_CAPSULE);
                seen.push((read_u16(bytes, 10), bytes.len()));
                Ok(())
            })?;
        }
        Ok(seen)
    }

    #[test]
    fn whole_and_split_capsules_come_out_in_order() {
        let mut stream = capsule(1, 0);
        stream.extend(capsule(2, 0));
        stream.extend(capsule(3, 0));
        for split in [1, 5, 8, 9, 71, 72, 73, 100, 143, 144, 200] {
            let mut reassembler = PduReassembler::default();
            let seen = collect(&mut reassembler, &[&stream[..split], &stream[split..]]).unwrap();
            assert_eq!(seen, vec![(1, 72), (2, 72), (3, 72)], "split at {split}");
        }
        let mut reassembler = PduReassembler::default();
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(collect(&mut reassembler, &bytes).unwrap().len(), 3);
    }

    #[test]
    fn in_capsule_data_beyond_the_kept_part_is_skipped() {
        let mut stream = capsule(7, 8192);
        stream.extend(capsule(8, 1024));
        stream.extend(capsule(9, 0));
        for split in [3, 72, 2047, 2048, 5000, 8264, 8265, 9000] {
            let mut reassembler = PduReassembler::default();
            let seen = collect(&mut reassembler, &[&stream[..split], &stream[split..]]).unwrap();
            assert_eq!(seen, vec![(7, KEPT_PDU_BYTES), (8, 72 + 1024), (9, 72)], "split at {split}");
        }
    }

    #[test]
    fn bad_headers_are_errors_not_panics() {
        let mut unknown = capsule(1, 0);
        unknown[0] = 0x0b;
        assert_eq!(parse_common_header(&unknown), Err(ProtocolError::UnknownPduType(0x0b)));
        let mut short = capsule(1, 0);
        short[4..8].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(parse_common_header(&short), Err(ProtocolError::BadPduLength(10)));
        let mut huge = capsule(1, 0);
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_common_header(&huge).is_err());
        let mut bad_offset = capsule(1, 16);
        bad_offset[3] = 8;
        assert_eq!(parse_common_header(&bad_offset), Err(ProtocolError::BadDataOffset(8)));
        let mut reassembler = PduReassembler::default();
        assert!(collect(&mut reassembler, &[&[0xff; 64]]).is_err());
    }

    #[test]
    fn encoders_match_the_spec_layouts() {
        let response = initialize_connection_response();
        assert_eq!(&response[..8], &[0x01, 0, 128, 0, 128, 0, 0, 0]);
        assert_eq!(read_u32(&response, 12), 131072);

        let data = controller_to_host_data_header(0x1234, 4096, 0);
        assert_eq!(&data[..4], &[0x07, LAST_PDU_FLAG, 24, 24]);
        assert_eq!(read_u32(&data, 4), 24 + 4096);
        assert_eq!(read_u16(&data, 8), 0x1234);
        assert_eq!(read_u32(&data, 12), 0);
        assert_eq!(read_u32(&data, 16), 4096);
        let padded = controller_to_host_data_header(1, 512, 8);
        assert_eq!(padded[3], 32);
        assert_eq!(read_u32(&padded, 4), 32 + 512);

        let completion = Completion {
            command_id: 0xbeef,
            submission_queue_head: 5,
            submission_queue_id: 2,
            result: 0x1_0000_0002,
            status: 0,
        };
        let capsule = response_capsule(completion);
        assert_eq!(&capsule[..8], &[0x05, 0, 24, 0, 24, 0, 0, 0]);
        assert_eq!(read_u64(&capsule, 8), 0x1_0000_0002);
        assert_eq!(read_u16(&capsule, 16), 5);
        assert_eq!(read_u16(&capsule, 18), 2);
        assert_eq!(read_u16(&capsule, 20), 0xbeef);
        assert_eq!(read_u16(&capsule, 22), 0);
    }
}

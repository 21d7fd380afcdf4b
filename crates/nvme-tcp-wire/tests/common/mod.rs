//! Shared helpers for the integration tests: drive a reader over a byte stream in
//! given chunk sizes and collect what it reports.
#![allow(dead_code)]

use nvme_tcp_wire::*;

/// One reported item, with consecutive Data events merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Header(PduHeader, u32),
    Data(Vec<u8>),
    DataEnd(bool),
    Error(ReadError),
}

/// Feeds `stream` to `reader` in pieces of the given sizes (cycled; 0 is read as 1),
/// applying `digests` right after the IC header, and collects the items. Stops at
/// the first error.
pub fn drive(reader: &mut PduReader, stream: &[u8], chunks: &[usize], digests: DigestSettings) -> Vec<Item> {
    let mut items = Vec::new();
    let mut offset = 0;
    let mut chunk_index = 0;
    loop {
        let size = if chunks.is_empty() { stream.len() } else { chunks[chunk_index % chunks.len()].max(1) };
        chunk_index += 1;
        let end = (offset + size).min(stream.len());
        let mut input = &stream[offset..end];
        loop {
            match reader.next_event(&mut input) {
                Ok(Some(event)) => push(&mut items, event, reader, digests),
                Ok(None) => {
                    assert!(input.is_empty(), "Ok(None) with {} bytes left", input.len());
                    break;
                }
                Err(error) => {
                    items.push(Item::Error(error));
                    return items;
                }
            }
        }
        offset = end;
        if offset >= stream.len() {
            // Drain zero-byte events (e.g. DataEnd after the last data byte).
            let mut empty: &[u8] = &[];
            loop {
                match reader.next_event(&mut empty) {
                    Ok(Some(event)) => push(&mut items, event, reader, digests),
                    Ok(None) => return items,
                    Err(error) => {
                        items.push(Item::Error(error));
                        return items;
                    }
                }
            }
        }
    }
}

fn push(items: &mut Vec<Item>, event: ReadEvent<'_>, reader: &mut PduReader, digests: DigestSettings) {
    match event {
        ReadEvent::Header { header, data_length } => {
            if matches!(header, PduHeader::IcReq(_) | PduHeader::IcResp(_)) {
                reader.set_digests(digests);
            }
            items.push(Item::Header(header, data_length));
        }
        ReadEvent::Data(data) => {
            assert!(!data.is_empty(), "empty Data event");
            if let Some(Item::Data(buffer)) = items.last_mut() {
                buffer.extend_from_slice(data);
            } else {
                items.push(Item::Data(data.to_vec()));
            }
        }
        ReadEvent::DataEnd { data_digest_ok } => items.push(Item::DataEnd(data_digest_ok)),
    }
}

/// Encodes one PDU (header, data, data digest) with `writer` onto `out`.
pub fn encode(writer: &PduWriter, header: &PduHeader, data: &[u8], out: &mut Vec<u8>) {
    writer.write_header(header, data.len() as u32, out);
    out.extend_from_slice(data);
    writer.append_data_digest(&[data], out);
}

pub fn icreq(digests: DigestSettings) -> PduHeader {
    PduHeader::IcReq(InitializeConnectionRequest {
        protocol_format_version: 0,
        host_pdu_data_alignment: 0,
        digests,
        max_r2t_outstanding: 3,
    })
}

pub fn icresp(digests: DigestSettings) -> PduHeader {
    PduHeader::IcResp(InitializeConnectionResponse {
        protocol_format_version: 0,
        controller_pdu_data_alignment: 0,
        digests,
        max_h2c_data_bytes: 0x40_0000,
    })
}

pub const BOTH: DigestSettings = DigestSettings { header: true, data: true };
pub const NONE: DigestSettings = DigestSettings { header: false, data: false };

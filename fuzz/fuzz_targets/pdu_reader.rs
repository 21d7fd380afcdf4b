//! Fuzzes `PduReader` with arbitrary streams.
//!
//! The first bytes pick the configuration: role, digests, alignment, data limit and a
//! chunking pattern. The rest is the stream, fed once in those chunks and once in one
//! piece. Both runs must report the same headers, the same concatenated data, the
//! same DataEnd flags and the same final error; nothing may panic. Along the way the
//! reader's contract is checked: Ok(None) only with the input used up, no empty Data
//! events, exactly `data_length` data bytes per PDU, and a sticky error that consumes
//! nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvme_tcp_wire::{
    DigestSettings, InitializeConnectionRequest, InitializeConnectionResponse, PduHeader,
    PduReader, PduWriter, ReadError, ReadEvent, ReaderLimits, Role,
};

#[derive(Debug, PartialEq, Eq)]
enum Record {
    Header(PduHeader, u32),
    Data(Vec<u8>),
    DataEnd(bool),
    Error(ReadError),
}

struct Config {
    role: Role,
    digests: DigestSettings,
    /// Take digests / alignment from the IC PDU instead of the configuration.
    follow_ic: bool,
    /// Start the stream with a valid IC PDU, so that the fuzzer spends its time on
    /// the PDUs after it.
    prepend_ic: bool,
    alignment: u8,
    limit: u32,
    chunks: Vec<usize>,
}

/// Splits the configuration off the front of the input.
fn config(data: &[u8]) -> Option<(Config, &[u8])> {
    let (&[mode, alignment, limit_low, limit_high, chunk_count], rest) =
        data.split_first_chunk::<5>()?;
    let chunk_count = usize::from(chunk_count % 8) + 1;
    if rest.len() < chunk_count {
        return None;
    }
    let (chunk_bytes, stream) = rest.split_at(chunk_count);
    let config = Config {
        role: if mode & 1 == 0 {
            Role::Controller
        } else {
            Role::Host
        },
        digests: DigestSettings {
            header: mode & 2 != 0,
            data: mode & 4 != 0,
        },
        follow_ic: mode & 8 != 0,
        prepend_ic: mode & 16 != 0,
        alignment,
        limit: u32::from(u16::from_le_bytes([limit_low, limit_high])),
        chunks: chunk_bytes.iter().map(|&b| usize::from(b) + 1).collect(),
    };
    Some((config, stream))
}

fn apply_ic(config: &Config, reader: &mut PduReader, header: &PduHeader) {
    match (config.follow_ic, header) {
        (true, PduHeader::IcReq(ic)) => {
            reader.set_digests(ic.digests);
            reader.set_data_alignment(ic.host_pdu_data_alignment);
        }
        (true, PduHeader::IcResp(ic)) => {
            reader.set_digests(ic.digests);
            reader.set_data_alignment(ic.controller_pdu_data_alignment);
        }
        (false, PduHeader::IcReq(_) | PduHeader::IcResp(_)) => reader.set_digests(config.digests),
        _ => {}
    }
}

/// Runs the reader over `stream` in pieces of the given sizes (cycled); an empty
/// size list means one piece.
fn run(config: &Config, stream: &[u8], chunks: &[usize]) -> Vec<Record> {
    let mut reader = PduReader::new(
        config.role,
        ReaderLimits {
            max_data_bytes: config.limit,
        },
    );
    if !config.follow_ic {
        reader.set_data_alignment(config.alignment);
    }
    let mut records = Vec::new();
    let mut data_left: u64 = 0;
    let mut offset = 0;
    let mut chunk_index = 0;
    let mut finished_input = false;
    loop {
        let mut input: &[u8] = if finished_input {
            &[]
        } else {
            let size = if chunks.is_empty() {
                stream.len()
            } else {
                chunks[chunk_index % chunks.len()]
            };
            chunk_index += 1;
            let end = (offset + size).min(stream.len());
            let piece = &stream[offset..end];
            offset = end;
            finished_input = offset == stream.len();
            piece
        };
        loop {
            match reader.next_event(&mut input) {
                Ok(Some(ReadEvent::Header {
                    header,
                    data_length,
                })) => {
                    assert_eq!(data_left, 0, "header inside a PDU's data");
                    assert!(data_length <= config.limit, "data beyond the limit");
                    data_left = u64::from(data_length);
                    apply_ic(config, &mut reader, &header);
                    records.push(Record::Header(header, data_length));
                }
                Ok(Some(ReadEvent::Data(data))) => {
                    assert!(!data.is_empty(), "empty Data event");
                    assert!(data.len() as u64 <= data_left, "more data than announced");
                    data_left -= data.len() as u64;
                    match records.last_mut() {
                        Some(Record::Data(buffer)) => buffer.extend_from_slice(data),
                        _ => records.push(Record::Data(data.to_vec())),
                    }
                }
                Ok(Some(ReadEvent::DataEnd { data_digest_ok })) => {
                    assert_eq!(data_left, 0, "DataEnd before the data");
                    assert!(
                        matches!(records.last(), Some(Record::Data(_))),
                        "DataEnd without data"
                    );
                    records.push(Record::DataEnd(data_digest_ok));
                }
                Ok(None) => {
                    assert!(input.is_empty(), "Ok(None) with input left");
                    break;
                }
                Err(error) => {
                    let mut again: &[u8] = &[0; 8];
                    assert_eq!(
                        reader.next_event(&mut again),
                        Err(error),
                        "error not sticky"
                    );
                    assert_eq!(again.len(), 8, "failed reader consumed input");
                    assert!(error.header_length <= error.header.len());
                    records.push(Record::Error(error));
                    return records;
                }
            }
        }
        if finished_input && input.is_empty() {
            // One more call with no input flushes zero-byte events (DataEnd).
            let mut empty: &[u8] = &[];
            loop {
                match reader.next_event(&mut empty) {
                    Ok(Some(ReadEvent::DataEnd { data_digest_ok })) => {
                        assert_eq!(data_left, 0);
                        records.push(Record::DataEnd(data_digest_ok));
                    }
                    Ok(Some(other)) => panic!("{other:?} from empty input"),
                    Ok(None) => return records,
                    Err(error) => panic!("{error} from empty input"),
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((config, stream)) = config(data) else {
        return;
    };
    let mut owned = Vec::new();
    let stream = if config.prepend_ic {
        let alignment = config.alignment % 32;
        let ic = match config.role {
            Role::Controller => PduHeader::IcReq(InitializeConnectionRequest {
                protocol_format_version: 0,
                host_pdu_data_alignment: alignment,
                digests: config.digests,
                max_r2t_outstanding: 0,
            }),
            Role::Host => PduHeader::IcResp(InitializeConnectionResponse {
                protocol_format_version: 0,
                controller_pdu_data_alignment: alignment,
                digests: config.digests,
                max_h2c_data_bytes: 4096,
            }),
        };
        PduWriter::new().write_header(&ic, 0, &mut owned);
        owned.extend_from_slice(stream);
        &owned[..]
    } else {
        stream
    };
    let chunked = run(&config, stream, &config.chunks);
    let whole = run(&config, stream, &[]);
    assert_eq!(chunked, whole, "chunking changed the result");
});

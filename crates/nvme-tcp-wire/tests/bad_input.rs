//! Hostile input: every `ReadErrorKind` with its FES and FEI, the copied header, the
//! sticky failed state, and "no data consumed" for over-long PDUs.

mod common;

use common::*;
use nvme_spec::{CommandId, SubmissionQueueEntry};
use nvme_tcp_wire::*;

const LIMIT: u32 = 4096;

fn limits() -> ReaderLimits {
    ReaderLimits { max_data_bytes: LIMIT }
}

/// ICReq bytes (no digests requested).
fn icreq_bytes() -> Vec<u8> {
    let mut wire = Vec::new();
    PduWriter::new().write_header(&icreq(NONE), 0, &mut wire);
    wire
}

fn icresp_bytes() -> Vec<u8> {
    let mut wire = Vec::new();
    PduWriter::new().write_header(&icresp(NONE), 0, &mut wire);
    wire
}

fn command(data_length: u32, digests: DigestSettings) -> Vec<u8> {
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(0x01, CommandId(9), 1);
    let mut writer = PduWriter::new();
    writer.set_digests(digests);
    let mut wire = Vec::new();
    let data = vec![0xABu8; data_length as usize];
    encode(&writer, &PduHeader::CapsuleCmd(CapsuleCommand { sqe }), &data, &mut wire);
    wire
}

fn h2c_data(data_length: u32) -> Vec<u8> {
    let header = PduHeader::H2cData(DataHeader {
        command_id: CommandId(1),
        transfer_tag: 2,
        data_offset: 0,
        data_length,
        last: true,
        success: false,
    });
    let mut wire = Vec::new();
    encode(&PduWriter::new(), &header, &vec![1u8; data_length as usize], &mut wire);
    wire
}

fn c2h_data(flags_last: bool, success: bool) -> Vec<u8> {
    let header = PduHeader::C2hData(DataHeader {
        command_id: CommandId(1),
        transfer_tag: 0,
        data_offset: 0,
        data_length: 4,
        last: flags_last,
        success,
    });
    let mut wire = Vec::new();
    encode(&PduWriter::new(), &header, &[1, 2, 3, 4], &mut wire);
    wire
}

fn r2t() -> Vec<u8> {
    let header = PduHeader::R2t(ReadyToTransfer { command_id: CommandId(1), transfer_tag: 1, offset: 0, length: 4096 });
    let mut wire = Vec::new();
    PduWriter::new().write_header(&header, 0, &mut wire);
    wire
}

/// Feeds `prefix ++ pdu` in 5-byte chunks to a fresh reader (digests applied after
/// the IC PDU) and returns the error, checking the items before it.
fn error_after(role: Role, digests: DigestSettings, prefix: &[u8], pdu: &[u8]) -> ReadError {
    let mut stream = prefix.to_vec();
    stream.extend_from_slice(pdu);
    for chunks in [&[5usize][..], &[1], &[]] {
        let mut reader = PduReader::new(role, limits());
        let items = drive(&mut reader, &stream, chunks, digests);
        let Some(Item::Error(error)) = items.last().cloned() else {
            panic!("no error: {items:?}");
        };
        // Sticky: the same error again, consuming nothing.
        let mut more: &[u8] = &[0u8; 16];
        assert_eq!(reader.next_event(&mut more), Err(error));
        assert_eq!(more.len(), 16);
        assert_eq!(reader.error(), Some(&error));
        if chunks == [5] {
            continue;
        }
        return error;
    }
    unreachable!()
}

fn assert_error(error: &ReadError, kind: ReadErrorKind, status: FatalErrorStatus, info: u32, header: &[u8]) {
    assert_eq!(error.kind, kind);
    assert_eq!(error.status, status);
    assert_eq!(error.info, info);
    assert_eq!(error.offending_header(), header);
    let term = error.termination_request();
    assert_eq!((term.status, term.info), (status, info));
    assert_eq!(term.offending_header(), header);
}

#[test]
fn unknown_pdu_type() {
    for raw in [0x08u8, 0x0A, 0x7F, 0xFF] {
        let mut pdu = r2t();
        pdu[0] = raw;
        let error = error_after(Role::Host, NONE, &icresp_bytes(), &pdu);
        assert_error(&error, ReadErrorKind::UnknownPduType(raw), FatalErrorStatus::InvalidPduHeaderField, 0, &pdu[..8]);
        assert_eq!(error.pdu_type, None);
    }
}

#[test]
fn pdu_type_in_the_wrong_direction() {
    let pdu = c2h_data(true, false);
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::UnexpectedPduType(PduType::C2hData),
        FatalErrorStatus::InvalidPduHeaderField,
        0,
        &pdu[..8],
    );
    let error = error_after(Role::Host, NONE, &[], &icreq_bytes());
    assert_eq!(error.kind, ReadErrorKind::UnexpectedPduType(PduType::IcReq));
}

#[test]
fn first_pdu_must_initialize() {
    let pdu = command(0, NONE);
    let error = error_after(Role::Controller, NONE, &[], &pdu);
    assert_error(
        &error,
        ReadErrorKind::NotInitialized { received: PduType::CapsuleCmd },
        FatalErrorStatus::PduSequenceError,
        0,
        &pdu[..8],
    );
    let error = error_after(Role::Host, NONE, &[], &r2t());
    assert_eq!(error.kind, ReadErrorKind::NotInitialized { received: PduType::R2t });
}

#[test]
fn second_initialization_is_a_sequence_error() {
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &icreq_bytes());
    assert_error(
        &error,
        ReadErrorKind::RepeatedInitialization(PduType::IcReq),
        FatalErrorStatus::PduSequenceError,
        0,
        &icreq_bytes()[..8],
    );
    let error = error_after(Role::Host, NONE, &icresp_bytes(), &icresp_bytes());
    assert_eq!(error.kind, ReadErrorKind::RepeatedInitialization(PduType::IcResp));
}

#[test]
fn nothing_may_follow_a_termination_request() {
    let mut prefix = icreq_bytes();
    let term = PduHeader::H2cTermReq(TerminationRequest::new(FatalErrorStatus::PduSequenceError, 0, &[1, 2, 3]));
    PduWriter::new().write_header(&term, 0, &mut prefix);
    let error = error_after(Role::Controller, NONE, &prefix, &command(0, NONE));
    assert_eq!(error.kind, ReadErrorKind::PduAfterTermination(PduType::CapsuleCmd));
    assert_eq!(error.status, FatalErrorStatus::PduSequenceError);
    assert!(!error.should_send_termination());
}

#[test]
fn header_length_must_be_the_fixed_length() {
    let mut pdu = command(0, NONE);
    pdu[2] = 71;
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::BadHeaderLength { pdu_type: PduType::CapsuleCmd, expected: 72, received: 71 },
        FatalErrorStatus::InvalidPduHeaderField,
        2,
        &pdu[..8],
    );
    let mut pdu = icreq_bytes();
    pdu[2] = 255;
    let error = error_after(Role::Controller, NONE, &[], &pdu);
    assert_eq!(error.info, 2);
}

#[test]
fn digest_flags_must_match_the_negotiation() {
    let header_only = DigestSettings { header: true, data: false };
    // Header digests on, HDGSTF clear.
    let pdu = command(0, NONE);
    let error = error_after(Role::Controller, header_only, &icreq_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::DigestFlagMismatch { flags: 0 },
        FatalErrorStatus::InvalidPduHeaderField,
        1,
        &pdu[..8],
    );
    // Header digests off, HDGSTF set.
    let pdu = command(16, header_only);
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_eq!((error.kind, error.info), (ReadErrorKind::DigestFlagMismatch { flags: 1 }, 1));
    // Data digests on, DDGSTF clear on a PDU with data.
    let pdu = h2c_data(16);
    let data_only = DigestSettings { header: false, data: true };
    let error = error_after(Role::Controller, data_only, &icreq_bytes(), &pdu);
    assert_eq!(error.kind, ReadErrorKind::DigestFlagMismatch { flags: 0x04 });
    assert_eq!(error.offending_header(), &pdu[..24]);
    // DDGSTF on a PDU without data, even with data digests on.
    let mut pdu = command(0, NONE);
    pdu[1] |= flags::DDGSTF;
    let error = error_after(Role::Controller, data_only, &icreq_bytes(), &pdu);
    assert_eq!((error.kind, error.info), (ReadErrorKind::DigestFlagMismatch { flags: 2 }, 1));
    // DDGSTF on a type that never has data.
    let mut pdu = r2t();
    pdu[1] |= flags::DDGSTF;
    let error = error_after(Role::Host, data_only, &icresp_bytes(), &pdu);
    assert_eq!(error.kind, ReadErrorKind::DigestFlagMismatch { flags: 2 });
    // IC PDUs never carry digests.
    let mut pdu = icreq_bytes();
    pdu[1] = flags::HDGSTF;
    let error = error_after(Role::Controller, NONE, &[], &pdu);
    assert_eq!(error.kind, ReadErrorKind::DigestFlagMismatch { flags: 1 });
}

#[test]
fn success_requires_last_pdu() {
    let pdu = c2h_data(false, true);
    let error = error_after(Role::Host, NONE, &icresp_bytes(), &pdu);
    assert_error(&error, ReadErrorKind::SuccessWithoutLast, FatalErrorStatus::InvalidPduHeaderField, 1, &pdu[..24]);
}

#[test]
fn header_digest_mismatch() {
    let mut pdu = command(8, BOTH);
    pdu[20] ^= 0x40; // inside the SQE
    let received = u32::from_le_bytes(pdu[72..76].try_into().unwrap());
    let computed = crc32c(&pdu[..72]);
    let error = error_after(Role::Controller, BOTH, &icreq_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::HeaderDigestMismatch { received, computed },
        FatalErrorStatus::HeaderDigestError,
        received,
        &pdu[..72],
    );
    // A corrupted PLEN is caught by the digest before it is believed.
    let mut pdu = command(8, BOTH);
    pdu[6] = 0xFF;
    let error = error_after(Role::Controller, BOTH, &icreq_bytes(), &pdu);
    assert_eq!(error.status, FatalErrorStatus::HeaderDigestError);
}

#[test]
fn data_offset_must_be_the_aligned_header_end() {
    let mut pdu = command(8, NONE);
    pdu[3] = 76;
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::BadDataOffset { received: 76, expected: 72 },
        FatalErrorStatus::InvalidPduHeaderField,
        3,
        &pdu[..72],
    );
    // With HPDA 7 (32 bytes) the data of a 24-byte header starts at 32.
    let pdu = h2c_data(8); // written unaligned: PDO 24
    let mut reader = PduReader::new(Role::Controller, limits());
    reader.set_data_alignment(7);
    let mut stream = icreq_bytes();
    stream.extend_from_slice(&pdu);
    let items = drive(&mut reader, &stream, &[9], NONE);
    let Some(Item::Error(error)) = items.last() else { panic!("{items:?}") };
    assert_eq!(error.kind, ReadErrorKind::BadDataOffset { received: 24, expected: 32 });
    // Garbage PDO on a PDU without data.
    let mut pdu = r2t();
    pdu[3] = 5;
    let error = error_after(Role::Host, NONE, &icresp_bytes(), &pdu);
    assert_eq!((error.kind, error.info), (ReadErrorKind::BadDataOffset { received: 5, expected: 0 }, 3));
}

#[test]
fn packet_length_checks() {
    // R2T has no data: PLEN must be exactly HLEN.
    let mut pdu = r2t();
    pdu[4] = 28;
    pdu.extend_from_slice(&[0; 4]);
    let error = error_after(Role::Host, NONE, &icresp_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::BadPacketLength { received: 28, minimum: 24, maximum: 24 },
        FatalErrorStatus::InvalidPduHeaderField,
        4,
        &pdu[..24],
    );
    // ICReq: PLEN 128 only.
    let mut pdu = icreq_bytes();
    pdu[4] = 129;
    let error = error_after(Role::Controller, NONE, &[], &pdu);
    assert_eq!(error.kind, ReadErrorKind::BadPacketLength { received: 129, minimum: 128, maximum: 128 });
    // PLEN below the header: not a PDU without data, and too short for one with.
    let mut pdu = command(0, NONE);
    pdu[4] = 60;
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_eq!((error.kind, error.info), (ReadErrorKind::BadDataOffset { received: 0, expected: 72 }, 3));
    // Data digests on: PLEN must leave room for at least one data byte and DDGST.
    let data_only = DigestSettings { header: false, data: true };
    let mut pdu = command(8, data_only);
    pdu[4..8].copy_from_slice(&76u32.to_le_bytes());
    let error = error_after(Role::Controller, data_only, &icreq_bytes(), &pdu);
    assert_eq!(
        (error.kind, error.info),
        (ReadErrorKind::BadPacketLength { received: 76, minimum: 77, maximum: 76 + LIMIT }, 4)
    );
    // TermReq: 24..=152 bytes, checked before its data is staged.
    for plen in [23u32, 153, 0xFFFF_FFFF] {
        let mut pdu = icreq_bytes();
        let term = PduHeader::H2cTermReq(TerminationRequest::new(FatalErrorStatus::PduSequenceError, 0, &[]));
        let start = pdu.len();
        PduWriter::new().write_header(&term, 0, &mut pdu);
        pdu[start + 4..start + 8].copy_from_slice(&plen.to_le_bytes());
        let error = error_after(Role::Controller, NONE, &[], &pdu);
        assert_eq!(error.kind, ReadErrorKind::BadPacketLength { received: plen, minimum: 24, maximum: 152 });
        assert_eq!(error.offending_header().len(), 8);
        assert!(!error.should_send_termination());
    }
}

#[test]
fn data_longer_than_the_limit_is_rejected_before_any_data() {
    let pdu = command(LIMIT + 1, NONE);
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::DataTooLong { announced: LIMIT + 1, limit: LIMIT },
        FatalErrorStatus::DataTransferLimitExceeded,
        0,
        &pdu[..72],
    );
    assert!(error.should_send_termination());
    // Only the header was consumed: the data is still in the input.
    let mut stream = icreq_bytes();
    stream.extend_from_slice(&pdu);
    let mut reader = PduReader::new(Role::Controller, limits());
    let mut input = &stream[..];
    assert!(matches!(reader.next_event(&mut input), Ok(Some(ReadEvent::Header { .. }))));
    assert!(reader.next_event(&mut input).is_err());
    assert_eq!(input.len(), (LIMIT + 1) as usize);
    // A PLEN of 4 GiB is rejected the same way.
    let mut pdu = h2c_data(8);
    pdu[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_eq!(error.kind, ReadErrorKind::DataTooLong { announced: u32::MAX - 24, limit: LIMIT });
    // Exactly at the limit is fine; set_limits applies to the next PDU.
    let mut reader = PduReader::new(Role::Controller, ReaderLimits { max_data_bytes: 0 });
    reader.set_limits(limits());
    let mut stream = icreq_bytes();
    stream.extend_from_slice(&command(LIMIT, NONE));
    let items = drive(&mut reader, &stream, &[1000], NONE);
    assert_eq!(items.len(), 4, "{:?}", items.last());
    assert_eq!(items[3], Item::DataEnd(true));
}

#[test]
fn datal_must_match_the_data() {
    let mut pdu = h2c_data(8);
    pdu[16] = 9;
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &pdu);
    assert_error(
        &error,
        ReadErrorKind::DataLengthMismatch { datal: 9, actual: 8 },
        FatalErrorStatus::InvalidPduHeaderField,
        16,
        &pdu[..24],
    );
}

#[test]
fn initialization_parameters() {
    let mut pdu = icreq_bytes();
    pdu[8] = 1; // PFV 1
    let error = error_after(Role::Controller, NONE, &[], &pdu);
    assert_error(&error, ReadErrorKind::UnsupportedVersion(1), FatalErrorStatus::UnsupportedParameter, 8, &pdu);
    let mut pdu = icreq_bytes();
    pdu[10] = 32; // HPDA
    let error = error_after(Role::Controller, NONE, &[], &pdu);
    assert_error(&error, ReadErrorKind::BadDataAlignment(32), FatalErrorStatus::InvalidPduHeaderField, 10, &pdu);
    let mut pdu = icresp_bytes();
    pdu[10] = 200; // CPDA
    let error = error_after(Role::Host, NONE, &[], &pdu);
    assert_eq!((error.kind, error.info), (ReadErrorKind::BadDataAlignment(200), 10));
    for max in [0u32, 4095] {
        let mut pdu = icresp_bytes();
        pdu[12..16].copy_from_slice(&max.to_le_bytes());
        let error = error_after(Role::Host, NONE, &[], &pdu);
        assert_error(&error, ReadErrorKind::BadMaxH2cData(max), FatalErrorStatus::InvalidPduHeaderField, 12, &pdu);
    }
}

#[test]
fn termination_request_with_reserved_status() {
    let mut pdu = icresp_bytes();
    let start = pdu.len();
    let term = PduHeader::C2hTermReq(TerminationRequest::new(FatalErrorStatus::PduSequenceError, 0, &[7; 10]));
    PduWriter::new().write_header(&term, 0, &mut pdu);
    pdu[start + 8] = 0x07;
    let error = error_after(Role::Host, NONE, &[], &pdu);
    assert_error(
        &error,
        ReadErrorKind::UnknownFatalErrorStatus(7),
        FatalErrorStatus::InvalidPduHeaderField,
        8,
        &pdu[start..start + 24],
    );
    assert!(!error.should_send_termination());
}

#[test]
fn truncated_input_is_never_an_error() {
    let mut stream = icreq_bytes();
    stream.extend_from_slice(&command(100, BOTH));
    for cut in 0..stream.len() {
        let mut reader = PduReader::new(Role::Controller, limits());
        let items = drive(&mut reader, &stream[..cut], &[3], BOTH);
        assert!(!items.iter().any(|item| matches!(item, Item::Error(_))), "cut {cut}: {items:?}");
        assert!(!items.contains(&Item::DataEnd(true)));
    }
}

#[test]
fn error_display_names_the_problem() {
    let error = error_after(Role::Controller, NONE, &icreq_bytes(), &command(LIMIT + 1, NONE));
    let text = error.to_string();
    assert!(text.contains("4097") && text.contains("4096"), "{text}");
    assert!(text.contains("DataTransferLimitExceeded"), "{text}");
}

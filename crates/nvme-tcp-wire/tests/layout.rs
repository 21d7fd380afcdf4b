//! Byte layouts of every PDU type, pinned at the offsets of the NVMe/TCP 1.0 PDU
//! definitions (the same as Linux's `include/linux/nvme-tcp.h` structures:
//! `nvme_tcp_hdr`, `nvme_tcp_icreq_pdu`, `nvme_tcp_icresp_pdu`, `nvme_tcp_term_pdu`,
//! `nvme_tcp_cmd_pdu`, `nvme_tcp_rsp_pdu`, `nvme_tcp_data_pdu`, `nvme_tcp_r2t_pdu`).

mod common;

use common::*;
use nvme_spec::status::Status;
use nvme_spec::{CommandId, CompletionQueueEntry, QueueId, SglDescriptor, SubmissionQueueEntry};
use nvme_tcp_wire::*;

fn le16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

fn le32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

/// Reads one PDU back with a reader in `role` that has already seen its IC PDU.
fn read_back(role: Role, digests: DigestSettings, alignment: u8, wire: &[u8]) -> Vec<Item> {
    let mut reader = PduReader::new(role, ReaderLimits { max_data_bytes: 1 << 20 });
    reader.set_data_alignment(alignment);
    let mut stream = Vec::new();
    let ic = if role == Role::Controller { icreq(digests) } else { icresp(digests) };
    PduWriter::new().write_header(&ic, 0, &mut stream);
    stream.extend_from_slice(wire);
    let items = drive(&mut reader, &stream, &[7], digests);
    assert_eq!(items[0], Item::Header(ic, 0));
    items[1..].to_vec()
}

fn sample_sqe() -> SubmissionQueueEntry {
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(0x01, CommandId(0xBEEF), 0b01);
    sqe.dwords[1] = 1;
    sqe.set_sgl(&SglDescriptor::in_capsule(0, 4096));
    sqe.dwords[10] = 0x1122_3344;
    sqe.dwords[15] = 0xA5A5_5A5A;
    sqe
}

#[test]
fn icreq_layout() {
    let header = PduHeader::IcReq(InitializeConnectionRequest {
        protocol_format_version: 0,
        host_pdu_data_alignment: 5,
        digests: DigestSettings { header: true, data: false },
        max_r2t_outstanding: 0x0102_0304,
    });
    let mut wire = Vec::new();
    // Digests never apply to IC PDUs, even when the writer has them on.
    let mut writer = PduWriter::new();
    writer.set_digests(BOTH);
    assert_eq!(writer.write_header(&header, 0, &mut wire), 128);
    assert_eq!(wire.len(), IC_PDU_BYTES);
    assert_eq!(&wire[..8], &[0x00, 0x00, 128, 0, 128, 0, 0, 0]);
    assert_eq!(le16(&wire, 8), 0); // PFV
    assert_eq!(wire[10], 5); // HPDA
    assert_eq!(wire[11], 0x01); // DGST: HDGST_ENABLE
    assert_eq!(le32(&wire, 12), 0x0102_0304); // MAXR2T
    assert!(wire[16..].iter().all(|&b| b == 0)); // reserved
    assert_eq!(read_back_first(Role::Controller, &wire), Item::Header(header, 0));
}

fn read_back_first(role: Role, wire: &[u8]) -> Item {
    let mut reader = PduReader::new(role, ReaderLimits { max_data_bytes: 0 });
    drive(&mut reader, wire, &[3], NONE).remove(0)
}

#[test]
fn icresp_layout() {
    let header = PduHeader::IcResp(InitializeConnectionResponse {
        protocol_format_version: 0,
        controller_pdu_data_alignment: 31,
        digests: DigestSettings { header: true, data: true },
        max_h2c_data_bytes: 0x2_0000,
    });
    let mut wire = Vec::new();
    PduWriter::new().write_header(&header, 0, &mut wire);
    assert_eq!(wire.len(), 128);
    assert_eq!(&wire[..8], &[0x01, 0x00, 128, 0, 128, 0, 0, 0]);
    assert_eq!(wire[10], 31); // CPDA
    assert_eq!(wire[11], 0x03); // DGST
    assert_eq!(le32(&wire, 12), 0x2_0000); // MAXH2CDATA
    assert!(wire[16..].iter().all(|&b| b == 0));
    assert_eq!(read_back_first(Role::Host, &wire), Item::Header(header, 0));
}

#[test]
fn capsule_command_layout_without_digests() {
    let sqe = sample_sqe();
    let header = PduHeader::CapsuleCmd(CapsuleCommand { sqe });
    let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    let mut wire = Vec::new();
    let writer = PduWriter::new();
    assert_eq!(writer.write_header(&header, 4096, &mut wire), 72);
    assert_eq!(&wire[..4], &[0x04, 0x00, 72, 72]); // type, flags, HLEN, PDO
    assert_eq!(le32(&wire, 4), 72 + 4096); // PLEN
    let mut raw_sqe = [0u8; 64];
    sqe.encode(&mut raw_sqe);
    assert_eq!(&wire[8..72], &raw_sqe); // CCSQE
    assert_eq!(le16(&wire, 10), 0xBEEF); // CID inside the SQE
    wire.extend_from_slice(&data);
    let items = read_back(Role::Controller, NONE, 0, &wire);
    assert_eq!(items, vec![Item::Header(header, 4096), Item::Data(data), Item::DataEnd(true)]);
}

#[test]
fn capsule_command_layout_with_digests() {
    let header = PduHeader::CapsuleCmd(CapsuleCommand { sqe: sample_sqe() });
    let data = vec![0x5Au8; 100];
    let mut writer = PduWriter::new();
    writer.set_digests(BOTH);
    let mut wire = Vec::new();
    assert_eq!(writer.write_header(&header, 100, &mut wire), 76);
    assert_eq!(&wire[..4], &[0x04, 0x03, 72, 76]); // HDGSTF | DDGSTF, PDO after HDGST
    assert_eq!(le32(&wire, 4), 76 + 100 + 4);
    assert_eq!(le32(&wire, 72), crc32c(&wire[..72])); // HDGST over CH + PSH
    wire.extend_from_slice(&data);
    writer.append_data_digest(&[&data[..40], &data[40..]], &mut wire);
    assert_eq!(le32(&wire, 176), crc32c(&data)); // DDGST over the data only
    assert_eq!(wire.len(), 180);
    let items = read_back(Role::Controller, BOTH, 0, &wire);
    assert_eq!(items, vec![Item::Header(header, 100), Item::Data(data), Item::DataEnd(true)]);
}

#[test]
fn capsule_command_without_data_has_pdo_zero_and_no_ddgst() {
    let header = PduHeader::CapsuleCmd(CapsuleCommand { sqe: sample_sqe() });
    let mut writer = PduWriter::new();
    writer.set_digests(BOTH);
    let mut wire = Vec::new();
    writer.write_header(&header, 0, &mut wire);
    writer.append_data_digest(&[&[]], &mut wire); // nothing for no data
    assert_eq!(wire.len(), 76);
    assert_eq!(&wire[..4], &[0x04, 0x01, 72, 0]);
    assert_eq!(le32(&wire, 4), 76);
    assert_eq!(read_back(Role::Controller, BOTH, 0, &wire), vec![Item::Header(header, 0)]);
}

#[test]
fn capsule_response_layout() {
    let cqe = CompletionQueueEntry {
        result_dw0: 0xDDCC_BBAA,
        result_dw1: 0x1122_3344,
        submission_queue_head: 7,
        submission_queue_id: QueueId(2),
        command_id: CommandId(0x4321),
        status: Status::INVALID_FIELD.with_do_not_retry(),
        phase: false,
    };
    let header = PduHeader::CapsuleResp(CapsuleResponse { cqe });
    for (digests, flags_byte, plen) in [(NONE, 0x00, 24u32), (BOTH, 0x01, 28)] {
        let mut writer = PduWriter::new();
        writer.set_digests(digests);
        let mut wire = Vec::new();
        // data_length is ignored for a type without a data section.
        writer.write_header(&header, 999, &mut wire);
        assert_eq!(wire.len(), plen as usize);
        assert_eq!(&wire[..4], &[0x05, flags_byte, 24, 0]);
        assert_eq!(le32(&wire, 4), plen);
        assert_eq!(le32(&wire, 8), 0xDDCC_BBAA); // DW0
        assert_eq!(le32(&wire, 12), 0x1122_3344); // DW1
        assert_eq!(le16(&wire, 16), 7); // SQHD
        assert_eq!(le16(&wire, 18), 2); // SQID
        assert_eq!(le16(&wire, 20), 0x4321); // CID
        assert_eq!(le16(&wire, 22), (0x02 << 1) | 0x8000); // status, phase 0
        assert_eq!(read_back(Role::Host, digests, 0, &wire), vec![Item::Header(header, 0)]);
    }
}

#[test]
fn h2c_data_layout() {
    let header = PduHeader::H2cData(DataHeader {
        command_id: CommandId(0x0A0B),
        transfer_tag: 0x0C0D,
        data_offset: 8192,
        data_length: 512,
        last: true,
        success: false,
    });
    let data = vec![0xC3u8; 512];
    let mut wire = Vec::new();
    PduWriter::new().write_header(&header, 512, &mut wire);
    assert_eq!(&wire[..4], &[0x06, 0x04, 24, 24]); // LAST_PDU
    assert_eq!(le32(&wire, 4), 24 + 512);
    assert_eq!(le16(&wire, 8), 0x0A0B); // CCCID
    assert_eq!(le16(&wire, 10), 0x0C0D); // TTAG
    assert_eq!(le32(&wire, 12), 8192); // DATAO
    assert_eq!(le32(&wire, 16), 512); // DATAL
    assert_eq!(&wire[20..24], &[0; 4]); // reserved
    wire.extend_from_slice(&data);
    let items = read_back(Role::Controller, NONE, 0, &wire);
    assert_eq!(items, vec![Item::Header(header, 512), Item::Data(data), Item::DataEnd(true)]);
}

#[test]
fn c2h_data_layout_with_success_and_alignment() {
    let header = PduHeader::C2hData(DataHeader {
        command_id: CommandId(3),
        transfer_tag: 0,
        data_offset: 0,
        data_length: 10,
        last: true,
        success: true,
    });
    // HPDA 3: 16-byte alignment; with HDGST the header ends at 28, data starts at 32.
    let mut writer = PduWriter::new();
    writer.set_digests(DigestSettings { header: true, data: false });
    writer.set_data_alignment(3);
    let mut wire = Vec::new();
    assert_eq!(writer.write_header(&header, 10, &mut wire), 32);
    assert_eq!(&wire[..4], &[0x07, 0x0D, 24, 32]); // HDGSTF | LAST_PDU | SUCCESS
    assert_eq!(le32(&wire, 4), 42);
    assert_eq!(le32(&wire, 24), crc32c(&wire[..24]));
    assert_eq!(&wire[28..32], &[0; 4]); // padding
    wire.extend_from_slice(b"0123456789");
    let digests = DigestSettings { header: true, data: false };
    let items = read_back(Role::Host, digests, 3, &wire);
    assert_eq!(items, vec![Item::Header(header, 10), Item::Data(b"0123456789".to_vec()), Item::DataEnd(true)]);
}

#[test]
fn r2t_layout() {
    let header = PduHeader::R2t(ReadyToTransfer {
        command_id: CommandId(0x1111),
        transfer_tag: 0x2222,
        offset: 0x3333_3333,
        length: 0x4444_4444,
    });
    let mut wire = Vec::new();
    PduWriter::new().write_header(&header, 0, &mut wire);
    assert_eq!(wire.len(), 24);
    assert_eq!(&wire[..8], &[0x09, 0, 24, 0, 24, 0, 0, 0]);
    assert_eq!(le16(&wire, 8), 0x1111); // CCCID
    assert_eq!(le16(&wire, 10), 0x2222); // TTAG
    assert_eq!(le32(&wire, 12), 0x3333_3333); // R2TO
    assert_eq!(le32(&wire, 16), 0x4444_4444); // R2TL
    assert_eq!(&wire[20..24], &[0; 4]);
    assert_eq!(read_back(Role::Host, NONE, 0, &wire), vec![Item::Header(header, 0)]);
}

#[test]
fn termination_request_layout() {
    let offending: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
    let term = TerminationRequest::new(FatalErrorStatus::InvalidPduHeaderField, 2, &offending);
    assert_eq!(term.offending_header_length, MAX_TERMINATION_DATA_BYTES);
    let header = PduHeader::C2hTermReq(term);
    let mut writer = PduWriter::new();
    writer.set_digests(BOTH); // never applies to TermReqs
    let mut wire = Vec::new();
    assert_eq!(writer.write_header(&header, 0, &mut wire), 152);
    assert_eq!(&wire[..8], &[0x03, 0, 24, 0, 152, 0, 0, 0]);
    assert_eq!(le16(&wire, 8), 0x01); // FES
    assert_eq!(le32(&wire, 10), 2); // FEI
    assert_eq!(&wire[14..24], &[0; 10]); // reserved
    assert_eq!(&wire[24..], &offending[..128]);
    assert_eq!(read_back(Role::Host, BOTH, 0, &wire), vec![Item::Header(header, 0)]);

    let short = PduHeader::H2cTermReq(TerminationRequest::new(
        FatalErrorStatus::HeaderDigestError,
        0xDEAD_BEEF,
        &offending[..8],
    ));
    let mut wire = Vec::new();
    PduWriter::new().write_header(&short, 0, &mut wire);
    assert_eq!(&wire[..8], &[0x02, 0, 24, 0, 32, 0, 0, 0]);
    assert_eq!(le16(&wire, 8), 0x03);
    assert_eq!(read_back(Role::Controller, NONE, 0, &wire), vec![Item::Header(short, 0)]);
}

#[test]
fn termination_request_can_be_the_first_pdu() {
    let header = PduHeader::C2hTermReq(TerminationRequest::new(FatalErrorStatus::UnsupportedParameter, 8, &[0u8; 128]));
    let mut wire = Vec::new();
    PduWriter::new().write_header(&header, 0, &mut wire);
    assert_eq!(read_back_first(Role::Host, &wire), Item::Header(header, 0));
}

/// A hand-assembled R2T with header digest, as Linux's target builds it
/// (`nvmet_setup_r2t_pdu`), decoded without the writer's help.
#[test]
fn decodes_hand_built_r2t_with_header_digest() {
    let mut wire = vec![0x09, 0x01, 24, 0, 28, 0, 0, 0];
    wire.extend_from_slice(&5u16.to_le_bytes());
    wire.extend_from_slice(&77u16.to_le_bytes());
    wire.extend_from_slice(&4096u32.to_le_bytes());
    wire.extend_from_slice(&65536u32.to_le_bytes());
    wire.extend_from_slice(&[0; 4]);
    let digest = crc32c(&wire);
    wire.extend_from_slice(&digest.to_le_bytes());
    let items = read_back(Role::Host, DigestSettings { header: true, data: false }, 0, &wire);
    assert_eq!(
        items,
        vec![Item::Header(
            PduHeader::R2t(ReadyToTransfer { command_id: CommandId(5), transfer_tag: 77, offset: 4096, length: 65536 }),
            0
        )]
    );
}

#[test]
fn header_sizes_match_the_spec() {
    assert_eq!(COMMON_HEADER_BYTES, 8);
    assert_eq!(IC_PDU_BYTES, 128);
    assert_eq!(CAPSULE_COMMAND_HEADER_BYTES, 72);
    assert_eq!(CAPSULE_RESPONSE_HEADER_BYTES, 24);
    assert_eq!(DATA_HEADER_BYTES, 24);
    assert_eq!(R2T_HEADER_BYTES, 24);
    assert_eq!(TERMINATION_HEADER_BYTES, 24);
    assert_eq!(MAX_TERMINATION_PDU_BYTES, 152);
    assert_eq!(MAX_TERMINATION_DATA_BYTES, 128);
    assert_eq!(DIGEST_BYTES, 4);
    for raw in 0..=255u8 {
        match PduType::from_u8(raw) {
            Some(pdu_type) => assert_eq!(pdu_type as u8, raw),
            None => assert!(raw == 8 || raw > 9),
        }
    }
}

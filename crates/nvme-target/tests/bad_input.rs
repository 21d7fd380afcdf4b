//! Every way a host can break the protocol gets a defined answer: an NVMe status for
//! the command, or a C2HTermReq with the right FES and a closed connection.

mod support;

use std::time::Duration;

use nvme_spec::fabrics::property_offset;
use nvme_spec::identify::cns;
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{ControllerId, QueueId, Status};
use nvme_target::Phase;
use nvme_tcp_wire::{CapsuleCommand, DataHeader, DigestSettings, FatalErrorStatus, PduHeader, PduWriter};
use support::*;

fn expect_termination(host: &mut FakeHost, status: FatalErrorStatus) {
    let last = host.received.pop_back().expect("a C2HTermReq");
    match last.header {
        PduHeader::C2hTermReq(request) => assert_eq!(request.status, status, "{request:?}"),
        other => panic!("expected C2HTermReq, got {other:?}"),
    }
    assert!(host.connection.wants_close());
}

fn connected_io_queue(target: &std::sync::Arc<nvme_target::Target>, digests: DigestSettings) -> (FakeHost, FakeHost) {
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(digests);
    assert_status(&io.connect(QueueId(1), cntlid, NQN, 4), Status::SUCCESS);
    (admin, io)
}

#[test]
fn unknown_pdu_type_terminates() {
    let mut host = FakeHost::new(test_target(), 0);
    let mut bytes = [0u8; 128];
    bytes[0] = 0x0F;
    bytes[2] = 128;
    bytes[4] = 128;
    host.send_bytes(&bytes);
    expect_termination(&mut host, FatalErrorStatus::InvalidPduHeaderField);
}

#[test]
fn wrong_header_length_and_packet_length_terminate() {
    let mut host = FakeHost::new(test_target(), 0);
    host.initialize(DigestSettings { header: false, data: false });
    // A CapsuleCmd with HLEN 24 instead of 72.
    let mut bytes = vec![0x04, 0, 24, 0, 72, 0, 0, 0];
    bytes.resize(72, 0);
    host.send_bytes(&bytes);
    expect_termination(&mut host, FatalErrorStatus::InvalidPduHeaderField);

    let mut host = FakeHost::new(test_target(), 0);
    host.initialize(DigestSettings { header: false, data: false });
    // PLEN smaller than the header.
    let mut bytes = vec![0x04, 0, 72, 0, 16, 0, 0, 0];
    bytes.resize(72, 0);
    host.send_bytes(&bytes);
    expect_termination(&mut host, FatalErrorStatus::InvalidPduHeaderField);
}

#[test]
fn data_longer_than_the_limit_is_refused_before_buffering() {
    let target = test_target();
    let (_admin, mut io) = connected_io_queue(&target, DigestSettings { header: false, data: false });
    // Announce 1 MiB of in-capsule data: more than MAXH2CDATA and the in-capsule size.
    let mut bytes = Vec::new();
    let command = read_write(IoOpcode::Write, 1, 0, 8);
    io.writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe: command }), 1 << 20, &mut bytes);
    io.send_bytes(&bytes);
    expect_termination(&mut io, FatalErrorStatus::DataTransferLimitExceeded);
}

#[test]
fn in_capsule_data_above_the_advertised_size_fails_the_command_only() {
    let settings = nvme_target::TargetSettings { in_capsule_data_bytes: 16 * 1024, ..Default::default() };
    let target = test_target_with(settings);
    let (mut admin, mut io) = connected_io_queue(&target, DigestSettings { header: false, data: false });
    let id = identify_controller(&mut admin);
    assert_eq!(id.io_command_capsule_size * 16, 64 + 16 * 1024, "IOCCSZ follows the setting");
    let data = pattern(32 * 1024, 1);
    let answer = io.command(read_write(IoOpcode::Write, 1, 0, 64), &data, &[]);
    assert_status(&answer, Status::DATA_SGL_LENGTH_INVALID);
    assert!(answer.cqe.status.do_not_retry());
    // Admin queues take 8 KiB, whatever IOCCSZ says for I/O queues.
    let keep_alive = sqe(nvme_spec::opcode::AdminOpcode::KeepAlive as u8, 0, 0);
    let answer = admin.command(keep_alive, &pattern(12 * 1024, 3), &[]);
    assert_status(&answer, Status::DATA_SGL_LENGTH_INVALID);
    assert_status(&admin.command(keep_alive, &[], &[]), Status::SUCCESS);
    // Exactly the advertised size still fits.
    let data = pattern(16 * 1024, 2);
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 0, 32), &data, &[]), Status::SUCCESS);
    assert_status(&io.command(read_write(IoOpcode::Read, 1, 0, 1), &[], &[]), Status::SUCCESS);
}

#[test]
fn header_digest_mismatch_terminates() {
    let target = test_target();
    let (_admin, mut io) = connected_io_queue(&target, DigestSettings { header: true, data: true });
    let mut bytes = Vec::new();
    let command = read_write(IoOpcode::Read, 1, 0, 8);
    io.writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe: command }), 0, &mut bytes);
    bytes[20] ^= 0xFF;
    io.send_bytes(&bytes);
    expect_termination(&mut io, FatalErrorStatus::HeaderDigestError);
}

#[test]
fn data_digest_mismatch_fails_the_command_and_the_queue_carries_on() {
    let target = test_target();
    let (_admin, mut io) = connected_io_queue(&target, DigestSettings { header: true, data: true });
    let data = pattern(4096, 5);
    let id = io.next_id();
    let mut command = read_write(IoOpcode::Write, 1, 0, 8);
    command.set_cdw0(IoOpcode::Write as u8, id, 1);
    command.set_sgl(&nvme_spec::SglDescriptor::in_capsule(0, 4096));
    let mut bytes = Vec::new();
    io.writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe: command }), 4096, &mut bytes);
    bytes.extend_from_slice(&data);
    bytes.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
    io.send_bytes(&bytes);
    let answer = io.await_answer(id, &[]);
    assert_status(&answer, Status::TRANSIENT_TRANSPORT_ERROR);
    // Nothing was written, and the next command works.
    let answer = io.command(read_write(IoOpcode::Read, 1, 0, 8), &[], &[]);
    assert_eq!(answer.data, vec![0; 4096]);
}

#[test]
fn commands_before_connect_and_connects_that_name_nothing() {
    let target = test_target();
    let mut host = FakeHost::new(target.clone(), 0);
    host.initialize(DigestSettings { header: false, data: false });
    let answer = host.command(identify(cns::CONTROLLER, 0), &[], &[]);
    assert_status(&answer, Status::COMMAND_SEQUENCE_ERROR);

    let answer = host.connect(QueueId::ADMIN, ControllerId::DYNAMIC, "nqn.2026-11.io.sluice:nothing", 32);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(answer.cqe.result_dw0 & 0xFFFF, 256, "IPO points at SUBNQN");
    assert_eq!(answer.cqe.result_dw0 >> 16 & 1, 1, "IATTR: offset is in Connect data");

    // The subsystem is not exported on the discovery-only listener.
    let mut discovery_port = FakeHost::new(target.clone(), 1);
    discovery_port.initialize(DigestSettings { header: false, data: false });
    let answer = discovery_port.connect(QueueId::ADMIN, ControllerId::DYNAMIC, NQN, 32);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);

    // An I/O queue for a controller that does not exist.
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    let answer = io.connect(QueueId(1), ControllerId(77), NQN, 32);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(answer.cqe.result_dw0 & 0xFFFF, 16, "IPO points at CNTLID");

    // A real controller, but a queue id beyond what it granted, and a queue too deep.
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    let answer = io.connect(QueueId(1000), cntlid, NQN, 32);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(answer.cqe.result_dw0 & 0xFFFF, 42, "IPO points at QID");
    let answer = io.connect(QueueId(1), cntlid, NQN, 4096);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(answer.cqe.result_dw0 & 0xFFFF, 44, "IPO points at SQSIZE");
    // The same queue id twice.
    assert_status(&io.connect(QueueId(1), cntlid, NQN, 32), Status::SUCCESS);
    let mut twice = FakeHost::new(target, 0);
    twice.initialize(DigestSettings { header: false, data: false });
    assert_status(&twice.connect(QueueId(1), cntlid, NQN, 32), Status::CONNECT_INVALID_PARAMETERS);
}

#[test]
fn more_commands_than_the_queue_depth_terminates() {
    let target = test_target();
    let (_admin, mut io) = connected_io_queue(&target, DigestSettings { header: false, data: false });
    // Queue depth 4: four writes waiting for R2T data hold every slot; a fifth is too many.
    let mut bytes = Vec::new();
    for _ in 0..5 {
        let mut command = read_write(IoOpcode::Write, 1, 0, 64);
        let id = io.next_id();
        command.set_cdw0(IoOpcode::Write as u8, id, 1);
        io.writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe: command }), 0, &mut bytes);
    }
    io.send_bytes(&bytes);
    expect_termination(&mut io, FatalErrorStatus::PduSequenceError);
}

#[test]
fn host_data_for_unknown_transfers_or_outside_the_r2t_terminates() {
    for (transfer_tag, offset, status) in
        [(3u16, 0u32, FatalErrorStatus::InvalidPduHeaderField), (0, 4096, FatalErrorStatus::DataTransferOutOfRange)]
    {
        let target = test_target();
        let (_admin, mut io) = connected_io_queue(&target, DigestSettings { header: false, data: false });
        let id = io.send_command(read_write(IoOpcode::Write, 1, 0, 64), &[]);
        let r2t = io.received.pop_front().expect("R2T");
        let PduHeader::R2t(r2t) = r2t.header else { panic!("expected R2T") };
        assert_eq!(r2t.length, 64 * 512);
        let data = vec![0u8; 32 * 1024];
        io.send_pdu(
            PduHeader::H2cData(DataHeader {
                command_id: id,
                transfer_tag: transfer_tag.max(r2t.transfer_tag),
                data_offset: offset,
                data_length: data.len() as u32,
                last: true,
                success: false,
            }),
            &data,
        );
        expect_termination(&mut io, status);
    }
}

#[test]
fn a_connection_dropped_mid_transfer_leaves_others_working() {
    let target = test_target();
    let (mut admin, mut io) = connected_io_queue(&target, DigestSettings { header: false, data: false });
    io.send_command(read_write(IoOpcode::Write, 1, 0, 64), &[]);
    io.send_bytes(&[0x06, 0, 24, 24]); // half an H2CData header, then the socket dies
    io.connection.handle_closed();
    // The controller survives the loss of an I/O queue: a new one connects.
    let cntlid = admin.connection.binding().unwrap().controller.id;
    let mut again = FakeHost::new(target.clone(), 0);
    again.initialize(DigestSettings { header: false, data: false });
    assert_status(&again.connect(QueueId(1), cntlid, NQN, 4), Status::SUCCESS);
    assert_status(&again.command(read_write(IoOpcode::Read, 1, 0, 1), &[], &[]), Status::SUCCESS);
    // Losing the admin queue ends the controller and its I/O queues.
    admin.connection.handle_closed();
    again.advance(Duration::from_secs(2));
    assert!(again.connection.wants_close());
    let mut late = FakeHost::new(target, 0);
    late.initialize(DigestSettings { header: false, data: false });
    assert_status(&late.connect(QueueId(2), cntlid, NQN, 4), Status::CONNECT_INVALID_PARAMETERS);
}

#[test]
fn keep_alive_expiry_tears_the_controller_down() {
    let target = test_target();
    let (mut admin, mut io) = connected_io_queue(&target, DigestSettings { header: false, data: false });
    // KATO is 5 s: a Keep Alive at 4 s keeps it alive past 5 s.
    admin.advance(Duration::from_secs(4));
    let keep_alive = sqe(nvme_spec::opcode::AdminOpcode::KeepAlive as u8, 0, 0);
    assert_status(&admin.command(keep_alive, &[], &[]), Status::SUCCESS);
    admin.advance(Duration::from_secs(4));
    assert_eq!(admin.connection.phase(), Phase::Live);
    admin.advance(Duration::from_secs(2));
    assert!(admin.connection.wants_close(), "no Keep Alive for 6 s with KATO 5 s");
    io.advance(Duration::from_secs(10));
    assert!(io.connection.wants_close(), "I/O queue follows its controller");
}

#[test]
fn a_silent_connection_is_closed_after_the_setup_timeout() {
    let mut host = FakeHost::new(test_target(), 0);
    host.advance(Duration::from_secs(5));
    assert!(!host.connection.wants_close());
    host.advance(Duration::from_secs(6));
    assert!(host.connection.wants_close());
}

#[test]
fn host_termination_closes_quietly() {
    let mut host = FakeHost::new(test_target(), 0);
    host.initialize(DigestSettings { header: false, data: false });
    let request = nvme_tcp_wire::TerminationRequest::new(FatalErrorStatus::PduSequenceError, 0, &[]);
    let mut bytes = Vec::new();
    PduWriter::new().write_header(&PduHeader::H2cTermReq(request), 0, &mut bytes);
    host.send_bytes(&bytes);
    assert!(host.connection.wants_close());
    assert!(host.received.is_empty());
}

/// Found by fuzzing: a command whose storage completes after a fatal error in the
/// same receive must not put a response behind the C2HTermReq.
#[test]
fn nothing_follows_the_termination_request() {
    let target = test_target();
    let (_admin, mut io) = connected_io_queue(&target, DigestSettings { header: false, data: false });
    let mut bytes = Vec::new();
    let mut command = read_write(IoOpcode::Read, 1, 0, 8);
    let id = io.next_id();
    command.set_cdw0(IoOpcode::Read as u8, id, 1);
    io.writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe: command }), 0, &mut bytes);
    bytes.extend_from_slice(&[0x0F, 0, 24, 0, 24, 0, 0, 0]);
    bytes.resize(bytes.len() + 16, 0);
    // The host-side reader refuses any PDU after a TermReq, so a response queued
    // behind it would fail here.
    io.send_bytes(&bytes);
    expect_termination(&mut io, FatalErrorStatus::InvalidPduHeaderField);
}

#[test]
fn property_get_with_the_wrong_width_is_invalid_field() {
    let target = test_target();
    let mut host = FakeHost::new(target, 0);
    host.bring_up_admin(NQN);
    // CC, VS and CSTS are 4-byte properties, CAP an 8-byte one (NVMe over Fabrics,
    // Property Get): the Linux target answers Invalid Field to any other width.
    for offset in [property_offset::CC, property_offset::VS, property_offset::CSTS] {
        let answer = host.property_get(offset, 8);
        assert_status(&answer, Status::INVALID_FIELD);
        assert!(answer.cqe.status.do_not_retry());
        assert_status(&host.property_get(offset, 4), Status::SUCCESS);
    }
    assert_status(&host.property_get(property_offset::CAP, 4), Status::INVALID_FIELD);
    assert_status(&host.property_get(property_offset::CAP, 8), Status::SUCCESS);
}

#[test]
fn identify_into_a_buffer_shorter_than_its_structure_is_refused() {
    let target = test_target();
    let mut host = FakeHost::new(target, 0);
    host.bring_up_admin(NQN);
    for length in [0u32, 512, 4095] {
        let mut command = sqe(AdminOpcode::Identify as u8, 0, length);
        command.dwords[10] = u32::from(cns::CONTROLLER);
        let answer = host.command(command, &[], &[]);
        assert_status(&answer, Status::DATA_SGL_LENGTH_INVALID);
        assert!(answer.cqe.status.do_not_retry(), "length {length}");
        assert!(answer.data.is_empty(), "length {length}: no data sent");
    }
    // A longer buffer gets the 4096-byte structure.
    let mut command = sqe(AdminOpcode::Identify as u8, 0, 8192);
    command.dwords[10] = u32::from(cns::CONTROLLER);
    let answer = host.command(command, &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.data.len(), 4096);
}

//! A scripted host brings a controller up the way the Linux host does and runs I/O.

mod support;

use std::time::Duration;

use nvme_spec::fabrics::property_offset;
use nvme_spec::identify::{cns, decode_namespace_list, IDENTIFY_DATA_BYTES};
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::registers::{ControllerCapabilities, ControllerStatus};
use nvme_spec::{ControllerId, IdentifyNamespace, NamespaceId, QueueId, Status};
use nvme_tcp_wire::DigestSettings;
use support::*;

#[test]
fn admin_queue_comes_up_and_identifies_like_linux_expects() {
    let target = test_target();
    let mut host = FakeHost::new(target, 0);
    host.initialize(DigestSettings { header: false, data: false });
    let answer = host.connect(QueueId::ADMIN, ControllerId::DYNAMIC, NQN, 32);
    assert_status(&answer, Status::SUCCESS);
    let cntlid = ControllerId(answer.cqe.result_dw0 as u16);
    assert_ne!(cntlid.0, 0);

    let cap = ControllerCapabilities(host.property_get(property_offset::CAP, 8).cqe.result_u64());
    assert_eq!(cap.maximum_queue_entries(), 1024);
    assert_eq!(cap.command_sets_supported() & ControllerCapabilities::COMMAND_SET_NVM, 1);
    assert_eq!(host.property_get(property_offset::VS, 4).cqe.result_dw0, 0x0001_0400);

    // Admin commands before CC.EN are out of sequence.
    let early = host.command(identify(cns::CONTROLLER, 0), &[], &[]);
    assert_status(&early, Status::COMMAND_SEQUENCE_ERROR);
    assert!(early.cqe.status.do_not_retry());

    host.connection.handle_timeout(host.now);
    let cntlid_again = {
        let cc = nvme_spec::registers::ControllerConfiguration(0)
            .with_io_submission_queue_entry_size(6)
            .with_io_completion_queue_entry_size(4)
            .with_enable(true);
        host.property_set(property_offset::CC, u64::from(cc.raw()));
        cntlid
    };
    let csts = ControllerStatus(host.property_get(property_offset::CSTS, 4).cqe.result_dw0);
    assert!(csts.ready());

    let id = identify_controller(&mut host);
    assert_eq!(id.controller_id, cntlid_again);
    assert_ne!(id.keep_alive_support, 0, "KAS is mandatory for fabrics");
    assert_eq!(id.sgl_support & 0b11, 1);
    assert_eq!(id.in_capsule_data_offset, 0);
    // IOCCSZ: the command and the default 128 KiB of in-capsule data.
    assert_eq!(id.io_command_capsule_size * 16, 64 + 128 * 1024);
    assert_eq!(id.subsystem_nqn_str(), Some(NQN));
    assert!(id.maximum_outstanding_commands >= 128);

    let answer = host.command(identify(cns::ACTIVE_NAMESPACE_LIST, 0), &[], &[]);
    let raw: [u8; IDENTIFY_DATA_BYTES] = answer.data.try_into().unwrap();
    let ids: Vec<NamespaceId> = decode_namespace_list(&raw).collect();
    assert_eq!(ids, vec![NamespaceId(1), NamespaceId(2)]);

    let answer = host.command(identify(cns::NAMESPACE, 1), &[], &[]);
    let raw: [u8; IDENTIFY_DATA_BYTES] = answer.data.try_into().unwrap();
    let namespace = IdentifyNamespace::decode(&raw);
    assert_eq!(namespace.namespace_size, NAMESPACE_BLOCKS);
    assert_eq!(namespace.lba_formats[0].lba_data_size_log2, 9);

    // The descriptor list must be stable across targets built from the same config.
    let answer = host.command(identify(cns::NAMESPACE_DESCRIPTOR_LIST, 1), &[], &[]);
    let mut second = FakeHost::new(test_target(), 0);
    second.bring_up_admin(NQN);
    let again = second.command(identify(cns::NAMESPACE_DESCRIPTOR_LIST, 1), &[], &[]);
    assert_eq!(answer.data, again.data);
    assert!(answer.data[..4] != [0, 0, 0, 0]);

    let missing = host.command(identify(cns::NAMESPACE_DESCRIPTOR_LIST, 3), &[], &[]);
    assert_status(&missing, Status::INVALID_NAMESPACE_OR_FORMAT);
    let unknown_cns = host.command(identify(0x55, 0), &[], &[]);
    assert_status(&unknown_cns, Status::INVALID_FIELD);
}

/// Brings up an admin queue and one I/O queue on the same target.
fn io_queue(digests: DigestSettings) -> (FakeHost, FakeHost) {
    let target = test_target();
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let mut io = FakeHost::new(target, 0);
    io.initialize(digests);
    let answer = io.connect(QueueId(1), cntlid, NQN, 128);
    assert_status(&answer, Status::SUCCESS);
    (admin, io)
}

#[test]
fn writes_read_back_in_capsule_and_through_r2t_with_and_without_digests() {
    for digests in [DigestSettings { header: false, data: false }, DigestSettings { header: true, data: true }] {
        let (_admin, mut io) = io_queue(digests);
        // 4 KiB and 128 KiB in the capsule (the default in-capsule size is 128 KiB),
        // and 128 KiB after an R2T, as a host with a smaller in-capsule limit sends it.
        for (lba, blocks, seed, in_capsule) in
            [(0u64, 8u32, 1u8, true), (100, 256, 2, false), (NAMESPACE_BLOCKS - 256, 256, 3, true)]
        {
            let data = pattern((blocks * BLOCK_BYTES) as usize, seed);
            let write = read_write(IoOpcode::Write, 1, lba, blocks);
            let answer = if in_capsule { io.command(write, &data, &[]) } else { io.command(write, &[], &data) };
            assert_status(&answer, Status::SUCCESS);
            let answer = io.command(read_write(IoOpcode::Read, 1, lba, blocks), &[], &[]);
            assert_status(&answer, Status::SUCCESS);
            assert_eq!(answer.data, data, "lba {lba} digests {digests:?}");
        }
        // Namespace 2 is independent of namespace 1.
        let answer = io.command(read_write(IoOpcode::Read, 2, 0, 8), &[], &[]);
        assert_eq!(answer.data, vec![0; 4096]);
        // A large read of blocks never written (without digests, sent from the RAM
        // namespace's lent zero region).
        let answer = io.command(read_write(IoOpcode::Read, 2, 8, 128), &[], &[]);
        assert_status(&answer, Status::SUCCESS);
        assert_eq!(answer.data, vec![0; 128 * BLOCK_BYTES as usize]);
    }
}

#[test]
fn io_errors_get_the_status_the_spec_names() {
    let (_admin, mut io) = io_queue(DigestSettings { header: false, data: false });
    let beyond = io.command(read_write(IoOpcode::Read, 1, NAMESPACE_BLOCKS - 1, 2), &[], &[]);
    assert_status(&beyond, Status::LBA_OUT_OF_RANGE);
    assert!(beyond.cqe.status.do_not_retry());
    let overflow = io.command(read_write(IoOpcode::Read, 1, u64::MAX - 1, 8), &[], &[]);
    assert_status(&overflow, Status::LBA_OUT_OF_RANGE);
    let missing = io.command(read_write(IoOpcode::Read, 9, 0, 8), &[], &[]);
    assert_status(&missing, Status::INVALID_NAMESPACE_OR_FORMAT);
    let broadcast = io.command(read_write(IoOpcode::Read, 0xFFFF_FFFF, 0, 8), &[], &[]);
    assert_status(&broadcast, Status::INVALID_NAMESPACE_OR_FORMAT);
    let mut short_sgl = read_write(IoOpcode::Read, 1, 0, 8);
    short_sgl.set_sgl(&nvme_spec::SglDescriptor::transport(512));
    assert_status(&io.command(short_sgl, &[], &[]), Status::DATA_SGL_LENGTH_INVALID);
    let too_big = io.command(read_write(IoOpcode::Read, 1, 0, 512), &[], &[]);
    assert_status(&too_big, Status::INVALID_FIELD);
    let unknown = io.command(sqe(0x7E, 1, 0), &[], &[]);
    assert_status(&unknown, Status::INVALID_OPCODE);
    // Writes beyond the end fail before any data is requested.
    let id = io.send_command(read_write(IoOpcode::Write, 1, NAMESPACE_BLOCKS, 64), &[]);
    let answer = io.await_answer(id, &[]);
    assert_status(&answer, Status::LBA_OUT_OF_RANGE);
    // The queue still works.
    let answer = io.command(read_write(IoOpcode::Read, 1, 0, 1), &[], &[]);
    assert_status(&answer, Status::SUCCESS);
}

#[test]
fn flush_write_zeroes_deallocate_and_compare() {
    let (_admin, mut io) = io_queue(DigestSettings { header: false, data: false });
    let data = pattern(8192, 9);
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 10, 16), &data, &[]), Status::SUCCESS);
    assert_status(&io.command(sqe(IoOpcode::Flush as u8, 1, 0), &[], &[]), Status::SUCCESS);
    assert_status(&io.command(sqe(IoOpcode::Flush as u8, 0xFFFF_FFFF, 0), &[], &[]), Status::SUCCESS);

    let compare = io.command(read_write(IoOpcode::Compare, 1, 10, 16), &data, &[]);
    assert_status(&compare, Status::SUCCESS);
    let mut different = data.clone();
    different[100] ^= 1;
    let compare = io.command(read_write(IoOpcode::Compare, 1, 10, 16), &different, &[]);
    assert_status(&compare, Status::COMPARE_FAILURE);

    // Write Zeroes over blocks 10..12.
    let mut zeroes = sqe(IoOpcode::WriteZeroes as u8, 1, 0);
    zeroes.dwords[10] = 10;
    zeroes.dwords[12] = 1;
    assert_status(&io.command(zeroes, &[], &[]), Status::SUCCESS);
    // Deallocate blocks 14..16 with one DSM range.
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&2u32.to_le_bytes());
    range[8..16].copy_from_slice(&14u64.to_le_bytes());
    let mut dsm = sqe(IoOpcode::DatasetManagement as u8, 1, 0);
    dsm.dwords[11] = 1 << 2;
    assert_status(&io.command(dsm, &range, &[]), Status::SUCCESS);

    let answer = io.command(read_write(IoOpcode::Read, 1, 10, 16), &[], &[]);
    let mut expected = data.clone();
    expected[..1024].fill(0);
    expected[2048..3072].fill(0);
    assert_eq!(answer.data, expected);

    // A DSM range beyond the end changes nothing and fails.
    range[8..16].copy_from_slice(&(NAMESPACE_BLOCKS - 1).to_le_bytes());
    assert_status(&io.command(dsm, &range, &[]), Status::LBA_OUT_OF_RANGE);
}

#[test]
fn many_commands_in_flight_up_to_the_queue_depth() {
    let (_admin, mut io) = io_queue(DigestSettings { header: false, data: false });
    let mut bytes = Vec::new();
    let mut ids = Vec::new();
    for index in 0..128u32 {
        let id = io.next_id();
        let mut command = read_write(IoOpcode::Read, 1, u64::from(index), 1);
        command.set_cdw0(IoOpcode::Read as u8, id, 1);
        io.writer.write_header(
            &nvme_tcp_wire::PduHeader::CapsuleCmd(nvme_tcp_wire::CapsuleCommand { sqe: command }),
            0,
            &mut bytes,
        );
        ids.push(id);
    }
    io.send_bytes(&bytes);
    for id in ids {
        let answer = io.await_answer(id, &[]);
        assert_status(&answer, Status::SUCCESS);
        assert_eq!(answer.data.len(), 512);
    }
}

#[test]
fn smart_log_counts_what_was_done() {
    let (mut admin, mut io) = io_queue(DigestSettings { header: false, data: false });
    for lba in 0..10 {
        io.command(read_write(IoOpcode::Write, 1, lba * 8, 8), &pattern(4096, 1), &[]);
    }
    io.command(read_write(IoOpcode::Read, 1, 0, 8), &[], &[]);
    let mut get_log = sqe(AdminOpcode::GetLogPage as u8, 0xFFFF_FFFF, 512);
    get_log.dwords[10] = 0x02 | ((512 / 4 - 1) << 16);
    let answer = admin.command(get_log, &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    let raw: [u8; 512] = answer.data.try_into().unwrap();
    let log = nvme_spec::log_page::SmartHealthLog::decode(&raw);
    assert_eq!(log.host_write_commands, 10);
    assert_eq!(log.host_read_commands, 1);
    assert_eq!(log.data_units_written, 1); // 40 KiB rounds up to one unit of 512,000 bytes
}

fn get_feature(host: &mut FakeHost, feature: u8, select: u8, dword11: u32) -> Answer {
    let mut get = sqe(AdminOpcode::GetFeatures as u8, 0, 0);
    get.dwords[10] = u32::from(feature) | (u32::from(select) << 8);
    get.dwords[11] = dword11;
    host.command(get, &[], &[])
}

fn set_feature(host: &mut FakeHost, feature: u8, dword11: u32) -> Answer {
    let mut set = sqe(AdminOpcode::SetFeatures as u8, 0, 0);
    set.dwords[10] = u32::from(feature);
    set.dwords[11] = dword11;
    host.command(set, &[], &[])
}

#[test]
fn temperature_threshold_and_error_recovery_features_read_and_set_as_the_spec_says() {
    // spdk_nvme_identify reads both; they used to fail with Invalid Field.
    use nvme_spec::features::{feature_id, feature_select};
    let mut host = FakeHost::new(test_target(), 0);
    host.bring_up_admin(NQN);
    const UNDER: u32 = 1 << 20; // THSEL 1
    let threshold = |host: &mut FakeHost, select: u8, dword11: u32| {
        let answer = get_feature(host, feature_id::TEMPERATURE_THRESHOLD, select, dword11);
        assert_status(&answer, Status::SUCCESS);
        answer.cqe.result_dw0
    };
    assert_eq!(threshold(&mut host, feature_select::CURRENT, 0), 343, "over-temperature default: 343 K");
    assert_eq!(threshold(&mut host, feature_select::CURRENT, UNDER), UNDER, "under-temperature default: 0 K");
    assert_status(&set_feature(&mut host, feature_id::TEMPERATURE_THRESHOLD, 350), Status::SUCCESS);
    assert_status(&set_feature(&mut host, feature_id::TEMPERATURE_THRESHOLD, UNDER | 260), Status::SUCCESS);
    assert_eq!(threshold(&mut host, feature_select::CURRENT, 0), 350);
    assert_eq!(threshold(&mut host, feature_select::CURRENT, UNDER), UNDER | 260);
    assert_eq!(threshold(&mut host, feature_select::DEFAULT, 0), 343);
    // "All sensors" is the composite one; another sensor or a reserved THSEL is refused.
    assert_status(&set_feature(&mut host, feature_id::TEMPERATURE_THRESHOLD, (0xF << 16) | 345), Status::SUCCESS);
    assert_eq!(threshold(&mut host, feature_select::CURRENT, 0), 345);
    for bad in [(1 << 16) | 300, (2 << 20) | 300] {
        let answer = set_feature(&mut host, feature_id::TEMPERATURE_THRESHOLD, bad);
        assert_eq!(answer.cqe.status, Status::INVALID_FIELD.with_do_not_retry(), "CDW11 {bad:#x}");
        let answer = get_feature(&mut host, feature_id::TEMPERATURE_THRESHOLD, feature_select::CURRENT, bad);
        assert_eq!(answer.cqe.status, Status::INVALID_FIELD.with_do_not_retry(), "CDW11 {bad:#x}");
    }

    let recovery = |host: &mut FakeHost| {
        let answer = get_feature(host, feature_id::ERROR_RECOVERY, feature_select::CURRENT, 0);
        assert_status(&answer, Status::SUCCESS);
        answer.cqe.result_dw0
    };
    assert_eq!(recovery(&mut host), 0);
    assert_status(&set_feature(&mut host, feature_id::ERROR_RECOVERY, 50), Status::SUCCESS);
    assert_eq!(recovery(&mut host), 50, "TLER: 5 s");
    // DULBE needs deallocated-block errors, which no namespace supports.
    let answer = set_feature(&mut host, feature_id::ERROR_RECOVERY, (1 << 16) | 50);
    assert_eq!(answer.cqe.status, Status::INVALID_FIELD.with_do_not_retry());
    assert_eq!(recovery(&mut host), 50);
}

#[test]
fn a_controller_torn_down_elsewhere_closes_its_admin_queue_and_io_queues() {
    // What `host deny`, a changed TLS key and removing a subsystem do: every queue of
    // the controller closes at its next check, the admin queue too (it used to stay
    // open, keep-alives and all, on a controller that no longer existed).
    let target = test_target();
    let (mut admin, mut io) = admin_and_io(&target, 8);
    let controllers = target.controllers_of(0);
    assert_eq!(controllers.len(), 1);
    admin.advance(Duration::from_millis(1_100));
    io.advance(Duration::from_millis(1_100));
    assert!(
        !admin.connection.wants_close() && !io.connection.wants_close(),
        "nothing closes while the controller lives"
    );
    controllers[0].tear_down();
    admin.advance(Duration::from_millis(1_100));
    io.advance(Duration::from_millis(1_100));
    assert!(admin.connection.wants_close(), "the admin queue of a torn-down controller closes");
    assert!(io.connection.wants_close(), "its I/O queue closes");
}

#[test]
fn a_partly_received_pdu_is_reported_so_the_runtime_acknowledges_at_once() {
    let target = test_target();
    let (_admin, mut io) = admin_and_io(&target, 32);
    assert!(!io.connection.awaits_rest_of_pdu(), "between PDUs");
    // A 4 KiB write with its data in the capsule, sent in three pieces: inside the
    // header, inside the data, then the rest.
    let mut sqe = read_write(IoOpcode::Write, 1, 0, 8);
    sqe.set_cdw0(IoOpcode::Write as u8, nvme_spec::CommandId(77), 1);
    sqe.set_sgl(&nvme_spec::SglDescriptor::in_capsule(0, 4096));
    let mut bytes = Vec::new();
    let writer = nvme_tcp_wire::PduWriter::new();
    writer.write_header(&nvme_tcp_wire::PduHeader::CapsuleCmd(nvme_tcp_wire::CapsuleCommand { sqe }), 4096, &mut bytes);
    bytes.extend_from_slice(&pattern(4096, 3));
    io.send_bytes(&bytes[..40]);
    assert!(io.connection.awaits_rest_of_pdu(), "inside the capsule header");
    io.send_bytes(&bytes[40..2000]);
    assert!(io.connection.awaits_rest_of_pdu(), "inside the in-capsule data");
    io.send_bytes(&bytes[2000..]);
    assert!(!io.connection.awaits_rest_of_pdu(), "the capsule is whole");
}

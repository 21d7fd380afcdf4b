//! Resource limits against misbehaving or hostile hosts: connections per host, the R2T
//! budget of a connection, the connection setup timeout and the keep-alive range.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nvme_spec::discovery::DISCOVERY_NQN;
use nvme_spec::fabrics::{
    connect_command_offset, connect_invalid_parameter_in_command, ConnectCommand, ConnectData, CONNECT_DATA_BYTES,
};
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType, IoOpcode};
use nvme_spec::{CommandId, ControllerId, QueueId, Status, SubmissionQueueEntry};
use nvme_target::{Phase, Target, TargetSettings};
use nvme_tcp_wire::{DataHeader, DigestSettings, FatalErrorStatus, PduHeader};
use support::*;

const OTHER_HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000002";
const NO_DIGESTS: DigestSettings = DigestSettings { header: false, data: false };
const KIB: u32 = 1024;

/// An admin queue Connect with a chosen KATO, after ICReq.
fn connect_admin_with_kato(host: &mut FakeHost, nqn: &str, host_nqn: &str, keep_alive_timeout_ms: u32) -> Answer {
    host.initialize(NO_DIGESTS);
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(AdminOpcode::Fabrics as u8, CommandId(0), 1);
    sqe.dwords[1] = FabricsCommandType::Connect as u32;
    ConnectCommand {
        record_format: 0,
        queue_id: QueueId::ADMIN,
        submission_queue_size: 31,
        connect_attributes: 0,
        keep_alive_timeout_ms,
    }
    .encode_into(&mut sqe);
    let mut data = [0u8; CONNECT_DATA_BYTES];
    ConnectData::new([7; 16], ControllerId::DYNAMIC, nqn, host_nqn).encode(&mut data);
    host.command(sqe, &data, &[])
}

fn io_queue_as(
    target: &Arc<Target>,
    controller: ControllerId,
    queue: u16,
    depth: u16,
    host_nqn: &str,
) -> (FakeHost, Answer) {
    let mut host = FakeHost::new(target.clone(), 0);
    host.initialize(NO_DIGESTS);
    let answer = host.connect_as(QueueId(queue), controller, NQN, depth, host_nqn);
    (host, answer)
}

fn assert_busy_and_retryable(answer: &Answer) {
    assert_status(answer, Status::CONNECT_CONTROLLER_BUSY);
    assert!(!answer.cqe.status.do_not_retry(), "a host must retry a busy Connect: {:?}", answer.cqe.status);
}

#[test]
fn connects_beyond_the_per_host_limit_are_busy_until_a_connection_closes() {
    let settings =
        TargetSettings { max_io_queues_per_controller: 2, max_connections_per_host: 3, ..TargetSettings::default() };
    let target = test_target_with(settings);
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let (_first_io, answer) = io_queue_as(&target, cntlid, 1, 32, HOST_NQN);
    assert_status(&answer, Status::SUCCESS);
    let mut second_admin = FakeHost::new(target.clone(), 0);
    let second_cntlid = second_admin.bring_up_admin(NQN);
    assert_eq!(target.host_connection_count(HOST_NQN), 3);

    // At the limit: I/O queues, admin queues and discovery are all busy for this host.
    let (_refused_io, answer) = io_queue_as(&target, cntlid, 2, 32, HOST_NQN);
    assert_busy_and_retryable(&answer);
    let mut refused_admin = FakeHost::new(target.clone(), 0);
    assert_busy_and_retryable(&connect_admin_with_kato(&mut refused_admin, NQN, HOST_NQN, 5000));
    let mut refused_discovery = FakeHost::new(target.clone(), 0);
    assert_busy_and_retryable(&connect_admin_with_kato(&mut refused_discovery, DISCOVERY_NQN, HOST_NQN, 0));
    assert_eq!(target.host_connection_count(HOST_NQN), 3);
    // No controller was created for the refused admin Connects.
    assert_eq!(target.controllers_of(0).len(), 2);

    // Another host is not affected.
    let mut other = FakeHost::new(target.clone(), 0);
    other.bring_up_admin_as(NQN, OTHER_HOST_NQN);
    assert_eq!(target.host_connection_count(OTHER_HOST_NQN), 1);

    // Closing a connection gives its place back; the refused I/O queue 2 was not left
    // marked as connected.
    second_admin.connection.handle_closed();
    assert_eq!(target.host_connection_count(HOST_NQN), 2);
    assert!(target.controller(0, second_cntlid).is_none());
    let (_second_io, answer) = io_queue_as(&target, cntlid, 2, 32, HOST_NQN);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(target.host_connection_count(HOST_NQN), 3);

    // Dropping connections (the runtime's last word) releases them too.
    drop(admin);
    drop(_first_io);
    drop(_second_io);
    assert_eq!(target.host_connection_count(HOST_NQN), 0);
}

#[test]
fn refused_connects_are_not_counted() {
    let target = test_target_with(TargetSettings::default());
    let mut host = FakeHost::new(target.clone(), 0);
    let answer = connect_admin_with_kato(&mut host, "nqn.2026-11.io.sluice:missing", HOST_NQN, 5000);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);
    let mut host = FakeHost::new(target.clone(), 0);
    assert_status(&connect_admin_with_kato(&mut host, NQN, HOST_NQN, 0), Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(target.host_connection_count(HOST_NQN), 0);
}

#[test]
fn keep_alive_disabled_is_refused_at_kato_unless_allowed() {
    let target = test_target_with(TargetSettings::default());
    let mut host = FakeHost::new(target.clone(), 0);
    let answer = connect_admin_with_kato(&mut host, NQN, HOST_NQN, 0);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);
    assert!(answer.cqe.status.do_not_retry());
    assert_eq!(answer.cqe.result_dw0, connect_invalid_parameter_in_command(connect_command_offset::KEEP_ALIVE_TIMEOUT));
    assert!(target.controllers_of(0).is_empty());

    let target = test_target_with(TargetSettings { allow_keep_alive_disabled: true, ..TargetSettings::default() });
    let mut host = FakeHost::new(target.clone(), 0);
    assert_status(&connect_admin_with_kato(&mut host, NQN, HOST_NQN, 0), Status::SUCCESS);
    host.advance(Duration::from_secs(3600));
    assert_eq!(host.connection.phase(), Phase::Live);
}

#[test]
fn discovery_with_keep_alive_zero_works_and_ends_after_two_minutes() {
    let target = test_target_with(TargetSettings::default());
    let mut host = FakeHost::new(target.clone(), 0);
    let answer = connect_admin_with_kato(&mut host, DISCOVERY_NQN, HOST_NQN, 0);
    assert_status(&answer, Status::SUCCESS);
    let answer = host.property_get(nvme_spec::fabrics::property_offset::CAP, 8);
    assert_status(&answer, Status::SUCCESS);
    host.advance(Duration::from_secs(119));
    assert_eq!(host.connection.phase(), Phase::Live);
    host.advance(Duration::from_secs(2));
    assert!(host.connection.wants_close(), "a silent discovery session must end");
}

#[test]
fn keep_alive_above_the_maximum_is_refused_and_below_the_minimum_raised() {
    let settings = TargetSettings {
        min_keep_alive_timeout_ms: 5_000,
        max_keep_alive_timeout_ms: 60_000,
        ..TargetSettings::default()
    };
    let target = test_target_with(settings);
    let mut host = FakeHost::new(target.clone(), 0);
    let answer = connect_admin_with_kato(&mut host, NQN, HOST_NQN, 60_001);
    assert_status(&answer, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(answer.cqe.result_dw0, connect_invalid_parameter_in_command(connect_command_offset::KEEP_ALIVE_TIMEOUT));
    let mut host = FakeHost::new(target.clone(), 0);
    assert_status(&connect_admin_with_kato(&mut host, NQN, HOST_NQN, 60_000), Status::SUCCESS);

    // KATO 1 s runs as 5 s: the host keeps alive more often than needed.
    let mut host = FakeHost::new(target.clone(), 0);
    assert_status(&connect_admin_with_kato(&mut host, NQN, HOST_NQN, 1_000), Status::SUCCESS);
    host.advance(Duration::from_millis(4_900));
    assert_eq!(host.connection.phase(), Phase::Live);
    host.advance(Duration::from_millis(200));
    assert!(host.connection.wants_close());
}

#[test]
fn connection_setup_timeout_is_a_setting() {
    let target = test_target_with(TargetSettings { connection_setup_timeout_ms: 500, ..TargetSettings::default() });
    let mut idle = FakeHost::new(target.clone(), 0);
    idle.advance(Duration::from_millis(499));
    assert!(!idle.connection.wants_close());
    idle.advance(Duration::from_millis(1));
    assert!(idle.connection.wants_close(), "no ICReq within the setup timeout");

    let mut slow = FakeHost::new(target.clone(), 0);
    slow.initialize(NO_DIGESTS);
    slow.advance(Duration::from_millis(500));
    assert!(slow.connection.wants_close(), "no Connect within the setup timeout");

    let mut quick = FakeHost::new(target.clone(), 0);
    quick.bring_up_admin(NQN);
    quick.advance(Duration::from_millis(600));
    assert_eq!(quick.connection.phase(), Phase::Live);
}

/// An I/O queue of `depth` on a target whose connections may have `budget` bytes of
/// R2T data outstanding.
fn io_queue_with_budget(budget: u32, depth: u16) -> (Arc<Target>, FakeHost, FakeHost) {
    let target = test_target_with(TargetSettings {
        max_outstanding_r2t_bytes_per_connection: budget,
        ..TargetSettings::default()
    });
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let (io, answer) = io_queue_as(&target, cntlid, 1, depth, HOST_NQN);
    assert_status(&answer, Status::SUCCESS);
    (target, admin, io)
}

/// A write of `bytes` (whole blocks) whose data the target must fetch with R2T.
fn send_write(io: &mut FakeHost, nsid: u32, lba: u64, bytes: u32) -> CommandId {
    io.send_command(read_write(IoOpcode::Write, nsid, lba, bytes / BLOCK_BYTES), &[])
}

/// What a scripted host sees of its writes: R2Ts not answered yet (in arrival order)
/// and the commands completed.
#[derive(Default)]
struct Transfers {
    /// (command, transfer tag, offset, length) of R2Ts not answered yet.
    unanswered: Vec<(CommandId, u16, u32, u32)>,
    completed: HashMap<u16, Status>,
    r2t_order: Vec<CommandId>,
}

impl Transfers {
    fn collect(&mut self, io: &mut FakeHost) {
        while let Some(pdu) = io.received.pop_front() {
            match pdu.header {
                PduHeader::R2t(r2t) => {
                    self.r2t_order.push(r2t.command_id);
                    self.unanswered.push((r2t.command_id, r2t.transfer_tag, r2t.offset, r2t.length));
                }
                PduHeader::CapsuleResp(response) => {
                    self.completed.insert(response.cqe.command_id.0, response.cqe.status);
                }
                other => panic!("unexpected PDU {other:?}"),
            }
        }
    }

    fn outstanding_bytes(&self) -> u64 {
        self.unanswered.iter().map(|&(_, _, _, length)| u64::from(length)).sum()
    }

    /// Sends the data of the unanswered R2T at `index`.
    fn answer(&mut self, io: &mut FakeHost, index: usize, data: &HashMap<u16, Vec<u8>>) {
        let (command_id, transfer_tag, offset, length) = self.unanswered.remove(index);
        let bytes = &data[&command_id.0][offset as usize..(offset + length) as usize];
        io.send_pdu(
            PduHeader::H2cData(DataHeader {
                command_id,
                transfer_tag,
                data_offset: offset,
                data_length: length,
                last: true,
                success: false,
            }),
            bytes,
        );
    }
}

#[test]
fn many_large_writes_never_exceed_the_r2t_budget_and_all_complete() {
    let budget = 512 * KIB;
    let (_target, _admin, mut io) = io_queue_with_budget(budget, 128);
    // 32 writes of 128 KiB fill namespace 1; 32 smaller ones go to namespace 2.
    let mut data = HashMap::new();
    let mut expected = Vec::new();
    for index in 0..32u32 {
        let bytes = 128 * KIB;
        let lba = u64::from(index * bytes / BLOCK_BYTES);
        let id = send_write(&mut io, 1, lba, bytes);
        data.insert(id.0, pattern(bytes as usize, index as u8));
        expected.push((1, lba, id));
    }
    for index in 0..32u32 {
        let bytes = (4 + (index % 8) * 8) * KIB;
        let lba = u64::from(index * 64 * KIB / BLOCK_BYTES);
        let id = send_write(&mut io, 2, lba, bytes);
        data.insert(id.0, pattern(bytes as usize, 100 + index as u8));
        expected.push((2, lba, id));
    }
    let mut transfers = Transfers::default();
    transfers.collect(&mut io);
    // The budget holds exactly four 128 KiB transfers; the rest wait.
    assert_eq!(transfers.unanswered.len(), 4);
    assert_eq!(transfers.outstanding_bytes(), u64::from(budget));
    assert_eq!(io.connection.r2t_waiting_commands(), 60);

    // Answer in a scrambled order; after every step the target never asked for more
    // than the budget.
    let mut step = 0usize;
    while !transfers.unanswered.is_empty() {
        let index = (step * 7) % transfers.unanswered.len();
        transfers.answer(&mut io, index, &data);
        transfers.collect(&mut io);
        assert!(
            transfers.outstanding_bytes() <= u64::from(budget),
            "step {step}: {} bytes outstanding",
            transfers.outstanding_bytes()
        );
        step += 1;
    }
    assert_eq!(transfers.completed.len(), 64, "every write completes");
    assert!(transfers.completed.values().all(|status| status.is_success()));
    assert_eq!(io.connection.r2t_waiting_commands(), 0);
    assert!(io.connection.r2t_outstanding_high_water_bytes() <= u64::from(budget));
    assert_eq!(io.connection.outstanding_commands(), 0);

    // The data landed where each write put it.
    for (nsid, lba, id) in expected {
        let written = &data[&id.0];
        let answer = io.command(read_write(IoOpcode::Read, nsid, lba, written.len() as u32 / BLOCK_BYTES), &[], &[]);
        assert_status(&answer, Status::SUCCESS);
        assert_eq!(&answer.data, written, "namespace {nsid} lba {lba}");
    }
}

#[test]
fn waiting_writes_get_their_r2t_first_come_first_served() {
    let (_target, _admin, mut io) = io_queue_with_budget(256 * KIB, 32);
    let mut data = HashMap::new();
    let mut send = |io: &mut FakeHost, lba: u64, bytes: u32| {
        let id = send_write(io, 1, lba, bytes);
        data.insert(id.0, pattern(bytes as usize, lba as u8));
        id
    };
    let first = send(&mut io, 0, 128 * KIB);
    let second = send(&mut io, 1024, 64 * KIB);
    let third = send(&mut io, 2048, 128 * KIB);
    // 32 KiB would fit next to the 192 KiB outstanding, but must not overtake the third.
    let fourth = send(&mut io, 4096, 32 * KIB);
    let mut transfers = Transfers::default();
    transfers.collect(&mut io);
    assert_eq!(transfers.r2t_order, vec![first, second]);

    // The second's 64 KiB arrive: 128 KiB (the first's) stay outstanding, so the
    // third fits and the fourth still waits behind it.
    let position = transfers.unanswered.iter().position(|entry| entry.0 == second).unwrap();
    transfers.answer(&mut io, position, &data);
    transfers.collect(&mut io);
    assert_eq!(transfers.r2t_order, vec![first, second, third]);
    assert_eq!(transfers.completed.get(&second.0), Some(&Status::SUCCESS));

    let position = transfers.unanswered.iter().position(|entry| entry.0 == first).unwrap();
    transfers.answer(&mut io, position, &data);
    transfers.collect(&mut io);
    assert_eq!(transfers.r2t_order, vec![first, second, third, fourth]);
    while !transfers.unanswered.is_empty() {
        transfers.answer(&mut io, 0, &data);
        transfers.collect(&mut io);
    }
    assert_eq!(transfers.completed.len(), 4);
}

#[test]
fn a_budget_of_one_transfer_still_completes_everything() {
    let budget = 128 * KIB;
    let (_target, _admin, mut io) = io_queue_with_budget(budget, 16);
    let mut data = HashMap::new();
    for index in 0..16u32 {
        let id = send_write(&mut io, 1, u64::from(index) * 256, 128 * KIB);
        data.insert(id.0, pattern(128 * KIB as usize, index as u8));
    }
    let mut transfers = Transfers::default();
    transfers.collect(&mut io);
    for _ in 0..16 {
        assert_eq!(transfers.unanswered.len(), 1, "one transfer at a time");
        transfers.answer(&mut io, 0, &data);
        transfers.collect(&mut io);
    }
    assert!(transfers.unanswered.is_empty());
    assert_eq!(transfers.completed.len(), 16);
    // With the budget taken, in-capsule writes and reads are not held up by it.
    let big = send_write(&mut io, 1, 0, 128 * KIB);
    data.insert(big.0, pattern(128 * KIB as usize, 99));
    transfers.collect(&mut io);
    assert_eq!(transfers.unanswered.len(), 1);
    let small = io.send_command(read_write(IoOpcode::Write, 2, 0, 8), &pattern(4096, 1));
    let read = io.send_command(read_write(IoOpcode::Read, 2, 0, 8), &[]);
    let mut read_data = Vec::new();
    while let Some(pdu) = io.received.pop_front() {
        match pdu.header {
            PduHeader::C2hData(_) => read_data.extend_from_slice(&pdu.data),
            PduHeader::CapsuleResp(response) => {
                transfers.completed.insert(response.cqe.command_id.0, response.cqe.status);
            }
            other => panic!("unexpected PDU {other:?}"),
        }
    }
    assert_eq!(transfers.completed.get(&small.0), Some(&Status::SUCCESS));
    assert_eq!(transfers.completed.get(&read.0), Some(&Status::SUCCESS));
    assert_eq!(read_data, pattern(4096, 1));
    transfers.answer(&mut io, 0, &data);
    transfers.collect(&mut io);
    assert_eq!(transfers.completed.get(&big.0), Some(&Status::SUCCESS));
}

#[test]
fn data_for_a_write_still_waiting_for_its_r2t_is_refused() {
    let (_target, _admin, mut io) = io_queue_with_budget(128 * KIB, 16);
    let first = send_write(&mut io, 1, 0, 128 * KIB);
    let waiting = send_write(&mut io, 1, 256, 64 * KIB);
    let mut transfers = Transfers::default();
    transfers.collect(&mut io);
    assert_eq!(transfers.r2t_order, vec![first]);
    // The host sends the waiting write's data unasked, with a guessed transfer tag.
    let tag = transfers.unanswered[0].1 + 1;
    let mut bytes = Vec::new();
    let header = PduHeader::H2cData(DataHeader {
        command_id: waiting,
        transfer_tag: tag,
        data_offset: 0,
        data_length: 4096,
        last: true,
        success: false,
    });
    io.writer.write_header(&header, 4096, &mut bytes);
    bytes.extend_from_slice(&[0; 4096]);
    io.send_bytes(&bytes);
    let last = io.received.pop_back().expect("a C2HTermReq");
    match last.header {
        PduHeader::C2hTermReq(request) => assert_eq!(request.status, FatalErrorStatus::DataTransferOutOfRange),
        other => panic!("expected C2HTermReq, got {other:?}"),
    }
    assert!(io.connection.wants_close());
}

//! QoS limits on the wire: a command over its namespace's or host's limit waits on
//! the connection's timer (never fails), in the order it arrived; removing a limit
//! releases commands already waiting; Abort completes a throttled command; admin
//! commands are never throttled; a closed connection lets its throttled commands go.

mod support;

use std::sync::Arc;
use std::time::Duration;

use nvme_spec::admin::AbortCommand;
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{CommandId, NamespaceId, Status};
use nvme_target::qos::{QosLimits, QOS_RECHECK_INTERVAL_MS};
use nvme_target::{Namespace, Target};
use nvme_tcp_wire::PduHeader;
use support::*;

fn namespace(target: &Arc<Target>, id: u32) -> Arc<Namespace> {
    target.subsystem_by_nqn(NQN).unwrap().namespace(NamespaceId(id)).unwrap()
}

/// `rw_ios_per_second` with no burst: one command every 1/`iops` s.
fn iops(iops: u64) -> QosLimits {
    QosLimits { rw_ios_per_second: Some(iops), burst_ms: Some(0), ..QosLimits::default() }
}

/// The command ids of the responses received so far (taken out of `received`).
fn answered(host: &mut FakeHost) -> Vec<(CommandId, Status)> {
    host.collect();
    let mut answers = Vec::new();
    host.received.retain(|pdu| match &pdu.header {
        PduHeader::CapsuleResp(response) => {
            answers.push((response.cqe.command_id, response.cqe.status.kind()));
            false
        }
        _ => true,
    });
    answers
}

/// Runs the storage the way the runtime does after a timer.
fn settle(host: &mut FakeHost) {
    for _ in 0..10 {
        host.connection.poll_storage(host.now);
        host.collect();
    }
}

#[test]
fn commands_over_the_limit_wait_for_their_turn_in_arrival_order() {
    let target = test_target();
    let (_admin, mut io) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.namespace.set(iops(10));
    let start = io.now;
    let ids: Vec<CommandId> =
        (0..3).map(|index| io.send_command(read_write(IoOpcode::Read, 1, index * 8, 8), &[])).collect();
    settle(&mut io);
    assert_eq!(answered(&mut io), [(ids[0], Status::SUCCESS)], "the first fits, the others wait");
    assert_eq!(io.connection.throttled_commands(), 2);
    assert_eq!(io.connection.outstanding_commands(), 2, "a throttled command keeps its slot (queue depth)");
    assert_eq!(io.connection.next_deadline(), Some(start + Duration::from_millis(100)), "the thread sleeps until then");
    // Namespace 2 has no limit: its reads pass the waiting ones.
    let other = io.send_command(read_write(IoOpcode::Read, 2, 0, 8), &[]);
    settle(&mut io);
    assert_eq!(answered(&mut io), [(other, Status::SUCCESS)]);

    io.advance(Duration::from_millis(99));
    settle(&mut io);
    assert!(answered(&mut io).is_empty(), "not before its time");
    io.advance(Duration::from_millis(1));
    settle(&mut io);
    assert_eq!(answered(&mut io), [(ids[1], Status::SUCCESS)]);
    io.advance(Duration::from_millis(100));
    settle(&mut io);
    assert_eq!(answered(&mut io), [(ids[2], Status::SUCCESS)]);
    let (commands, seconds) = namespace(&target, 1).qos.namespace.throttled();
    assert_eq!(commands, 2);
    assert!((seconds - 0.3).abs() < 1e-6, "waited 0.1 s and 0.2 s: {seconds}");
}

#[test]
fn removing_a_limit_releases_the_commands_already_waiting() {
    let target = test_target();
    let (_admin, mut io) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.namespace.set(iops(1));
    let ids: Vec<CommandId> =
        (0..5).map(|index| io.send_command(read_write(IoOpcode::Read, 1, index * 8, 8), &[])).collect();
    settle(&mut io);
    assert_eq!(answered(&mut io).len(), 1);
    assert_eq!(io.connection.throttled_commands(), 4, "the last would wait 4 s");

    namespace(&target, 1).qos.namespace.set(QosLimits::default());
    io.advance(Duration::from_millis(QOS_RECHECK_INTERVAL_MS));
    settle(&mut io);
    let released: Vec<CommandId> = answered(&mut io)
        .into_iter()
        .map(|(id, status)| {
            assert_eq!(status, Status::SUCCESS);
            id
        })
        .collect();
    assert_eq!(released.len(), 4, "released within one recheck interval, not after 4 s");
    for id in &ids[1..] {
        assert!(released.contains(id));
    }
    assert_eq!(io.connection.next_deadline().map(|deadline| deadline > io.now), Some(true));
}

#[test]
fn raising_a_limit_books_the_waiting_commands_again() {
    let target = test_target();
    let (_admin, mut io) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.namespace.set(iops(1));
    for index in 0..3 {
        io.send_command(read_write(IoOpcode::Read, 1, index * 8, 8), &[]);
    }
    settle(&mut io);
    assert_eq!(answered(&mut io).len(), 1);
    namespace(&target, 1).qos.namespace.set(iops(1_000));
    io.advance(Duration::from_millis(QOS_RECHECK_INTERVAL_MS));
    settle(&mut io);
    // Booked again at 1,000 IOPS: the first at once, the second 1 ms later.
    assert_eq!(answered(&mut io).len(), 1);
    io.advance(Duration::from_millis(1));
    settle(&mut io);
    assert_eq!(answered(&mut io).len(), 1);
}

#[test]
fn abort_completes_a_throttled_command() {
    let target = test_target();
    let (mut admin, mut io) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.namespace.set(iops(1));
    let first = io.send_command(read_write(IoOpcode::Read, 1, 0, 8), &[]);
    let data = pattern(4096, 3);
    let throttled = io.send_command(read_write(IoOpcode::Write, 1, 64, 8), &[]);
    assert_status(&io.await_answer(first, &[]), Status::SUCCESS);
    // The write's data arrives, then it waits for its turn (1 s away).
    io.collect();
    let r2t = io.received.pop_front().expect("an R2T");
    let PduHeader::R2t(r2t) = r2t.header else { panic!("expected an R2T, got {r2t:?}") };
    io.send_pdu(
        PduHeader::H2cData(nvme_tcp_wire::DataHeader {
            command_id: throttled,
            transfer_tag: r2t.transfer_tag,
            data_offset: 0,
            data_length: 4096,
            last: true,
            success: false,
        }),
        &data,
    );
    settle(&mut io);
    assert_eq!(io.connection.throttled_commands(), 1);

    let mut abort = sqe(AdminOpcode::Abort as u8, 0, 0);
    abort.dwords[10] = 1 | (u32::from(throttled.0) << 16);
    let request = admin.send_command(abort, &[]);
    // The I/O queue holding throttled commands looks at Aborts at its next check.
    io.advance(Duration::from_millis(QOS_RECHECK_INTERVAL_MS));
    assert_eq!(answered(&mut io), [(throttled, Status::ABORTED_BY_REQUEST)]);
    assert_eq!(io.connection.throttled_commands(), 0);
    assert_eq!(io.connection.outstanding_commands(), 0);
    admin.advance(Duration::from_millis(60));
    let answer = admin.await_answer(request, &[]);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.cqe.result_dw0, AbortCommand::RESULT_ABORTED);
    // Nothing of the aborted write landed.
    io.advance(Duration::from_secs(2));
    let read = io.command(read_write(IoOpcode::Read, 1, 64, 8), &[], &[]);
    assert_eq!(read.data, vec![0; 4096]);
}

#[test]
fn admin_commands_are_never_throttled() {
    let target = test_target();
    let (mut admin, mut io) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.namespace.set(iops(1));
    namespace(&target, 1).qos.for_host(HOST_NQN).set(iops(1));
    io.send_command(read_write(IoOpcode::Read, 1, 0, 8), &[]);
    io.send_command(read_write(IoOpcode::Read, 1, 8, 8), &[]);
    settle(&mut io);
    assert_eq!(io.connection.throttled_commands(), 1);
    for _ in 0..20 {
        assert_status(&admin.command(identify(nvme_spec::identify::cns::NAMESPACE, 1), &[], &[]), Status::SUCCESS);
        assert_status(&admin.command(sqe(AdminOpcode::KeepAlive as u8, 0, 0), &[], &[]), Status::SUCCESS);
    }
    assert_eq!(admin.connection.throttled_commands(), 0);
}

#[test]
fn a_host_limit_holds_that_host_only() {
    let target = test_target();
    let (_admin, mut limited) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.set_hosts(&[(HOST_NQN.to_string(), iops(1))]);
    let other_host = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000002";
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin_as(NQN, other_host);
    let mut free = FakeHost::new(target.clone(), 0);
    free.initialize(nvme_tcp_wire::DigestSettings { header: false, data: false });
    assert_status(&free.connect_as(nvme_spec::QueueId(1), cntlid, NQN, 32, other_host), Status::SUCCESS);

    for index in 0..3 {
        limited.send_command(read_write(IoOpcode::Read, 1, index * 8, 8), &[]);
        free.send_command(read_write(IoOpcode::Read, 1, index * 8, 8), &[]);
    }
    settle(&mut limited);
    settle(&mut free);
    assert_eq!(answered(&mut limited).len(), 1);
    assert_eq!(answered(&mut free).len(), 3);
    assert_eq!(namespace(&target, 1).qos.host_limits(), [(HOST_NQN.to_string(), iops(1))]);
}

#[test]
fn bytes_limits_count_blocks_by_direction() {
    let target = test_target();
    let (_admin, mut io) = admin_and_io(&target, 32);
    // 2 MiB/s of writes: a 128 KiB write takes 62.5 ms of it; reads are free.
    let limits = QosLimits { w_mbytes_per_second: Some(2), burst_ms: Some(0), ..QosLimits::default() };
    namespace(&target, 1).qos.namespace.set(limits);
    let start = io.now;
    let data = pattern(128 * 1024, 5);
    let write = io.command(read_write(IoOpcode::Write, 1, 0, 256), &[], &data);
    assert_status(&write, Status::SUCCESS);
    let second = io.send_command(read_write(IoOpcode::Write, 1, 1024, 256), &[]);
    let mut requests = 0;
    io.collect();
    while let Some(pdu) = io.received.pop_front() {
        let PduHeader::R2t(r2t) = pdu.header else { panic!("expected R2Ts, got {pdu:?}") };
        let chunk = &data[r2t.offset as usize..(r2t.offset + r2t.length) as usize];
        io.send_pdu(
            PduHeader::H2cData(nvme_tcp_wire::DataHeader {
                command_id: second,
                transfer_tag: r2t.transfer_tag,
                data_offset: r2t.offset,
                data_length: r2t.length,
                last: true,
                success: false,
            }),
            chunk,
        );
        requests += 1;
    }
    assert!(requests > 0);
    for index in 0..4 {
        assert_status(&io.command(read_write(IoOpcode::Read, 1, index * 8, 8), &[], &[]), Status::SUCCESS);
    }
    // Flush moves no data: no bytes limit holds it.
    assert_status(&io.command(sqe(IoOpcode::Flush as u8, 1, 0), &[], &[]), Status::SUCCESS);
    assert_eq!(io.connection.throttled_commands(), 1, "the second write waits; reads and Flush pass");
    assert_eq!(io.connection.next_deadline(), Some(start + Duration::from_micros(62_500)));
}

#[test]
fn a_closed_connection_lets_its_throttled_commands_go() {
    let target = test_target();
    let (_admin, mut io) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.namespace.set(iops(1));
    for index in 0..4 {
        io.send_command(read_write(IoOpcode::Read, 1, index * 8, 8), &[]);
    }
    settle(&mut io);
    assert_eq!(io.connection.throttled_commands(), 3);
    io.connection.handle_closed();
    assert_eq!(io.connection.throttled_commands(), 0);
    assert!(io.connection.drain(io.now), "nothing of a throttled command is at storage");
}

#[test]
fn a_namespace_created_later_holds_a_host_to_its_limits_on_every_namespace() {
    let target = test_target();
    let subsystem = target.subsystem_by_nqn(NQN).unwrap();
    subsystem.qos_host_defaults.set(&[(HOST_NQN.to_string(), iops(1))]);
    // Namespace 2 never had limits set for this host: the view's rebuild gives it
    // the host's defaults.
    let (_admin, mut io) = admin_and_io(&target, 32);
    for index in 0..3 {
        io.send_command(read_write(IoOpcode::Read, 2, index * 8, 8), &[]);
    }
    settle(&mut io);
    assert_eq!(answered(&mut io).len(), 1);
    assert_eq!(io.connection.throttled_commands(), 2);
    assert_eq!(namespace(&target, 2).qos.host_limits(), [(HOST_NQN.to_string(), iops(1))]);
}

#[test]
fn a_controller_reset_lets_throttled_commands_go_without_running_them() {
    let target = test_target();
    let (mut admin, mut io) = admin_and_io(&target, 32);
    namespace(&target, 1).qos.namespace.set(iops(1));
    let data = pattern(512, 9);
    io.command(read_write(IoOpcode::Write, 1, 0, 1), &data, &[]);
    let throttled = io.send_command(read_write(IoOpcode::Write, 1, 8, 1), &data);
    settle(&mut io);
    assert_eq!(io.connection.throttled_commands(), 1);
    let cc = nvme_spec::fabrics::property_offset::CC;
    let enabled = nvme_spec::registers::ControllerConfiguration(0)
        .with_io_submission_queue_entry_size(6)
        .with_io_completion_queue_entry_size(4)
        .with_enable(true);
    assert_status(&admin.property_set(cc, u64::from(enabled.with_enable(false).raw())), Status::SUCCESS);
    io.advance(Duration::from_secs(2));
    assert!(io.connection.wants_close(), "the reset's old queue closes");
    for (id, status) in answered(&mut io) {
        assert_eq!(id, throttled);
        assert_ne!(status, Status::SUCCESS, "a throttled command of an ended generation never runs");
    }
    io.connection.handle_closed();
    assert_eq!(io.connection.throttled_commands(), 0);
    assert!(io.connection.drain(io.now));
}

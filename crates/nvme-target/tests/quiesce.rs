//! Command quiesce: a dead connection's write still at storage must land before the
//! same host's new controller may exist, so it can never overwrite what the new
//! one writes (the ghost write the simulator found).

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nvme_spec::opcode::IoOpcode;
use nvme_spec::{ControllerId, QueueId, Status};
use nvme_target::{StorageActivity, Target, TargetSettings};
use nvme_tcp_wire::DigestSettings;
use support::gated::*;
use support::*;

/// A host whose admin and I/O connections died with a write at storage, and the same
/// host's new admin queue with its Connect sent (not answered yet).
fn dead_association_with_a_write_in_flight(target: &Arc<Target>) -> (FakeHost, FakeHost, FakeHost, Vec<u8>) {
    let (mut admin, mut io) = admin_and_io(target, 8);
    let old_data = pattern(BLOCK_BYTES as usize, 1);
    io.send_command(read_write(IoOpcode::Write, 1, 0, 1), &old_data);
    io.connection.poll_storage(io.now);
    io.collect();
    assert!(io.received.is_empty(), "the write must still be at storage");
    admin.connection.handle_closed();
    io.connection.handle_closed();
    assert!(admin.connection.drain(admin.now), "nothing of the admin queue is at storage");
    assert!(!io.connection.drain(io.now), "the I/O queue's write is still at storage");
    // Closed, only the drain's deadline is left (the queue's periodic checks stopped
    // with it: a past one would make the runtime spin).
    let quiesce = Duration::from_millis(u64::from(target.settings.command_quiesce_timeout_ms));
    assert_eq!(io.connection.next_deadline(), Some(io.now + quiesce));

    let mut again = FakeHost::new(target.clone(), 0);
    again.initialize(DigestSettings { header: false, data: false });
    again.send_connect(QueueId::ADMIN, ControllerId::DYNAMIC, NQN, 32, HOST_NQN);
    (admin, io, again, old_data)
}

#[test]
fn a_reconnecting_host_waits_until_its_dead_connections_write_has_landed() {
    let (target, gate, ram) = gated_target(TargetSettings::default());
    let (_admin, mut io, mut again, old_data) = dead_association_with_a_write_in_flight(&target);
    again.advance(Duration::from_millis(500));
    assert!(
        again.received.is_empty(),
        "Connect answered while the old write is still at storage: {:?}",
        again.received
    );
    assert_ne!(block_zero(&ram), old_data);

    gate.lock().unwrap().open = true;
    assert!(io.connection.drain(io.now), "the write landed: the dead connection is drained");
    assert_eq!(block_zero(&ram), old_data, "the old write landed");
    io.collect();
    assert!(io.received.is_empty(), "a closed connection answers nothing: {:?}", io.received);
    drop(io);

    again.advance(Duration::from_millis(20));
    let answer = again.received.pop_front().expect("the held Connect is answered once the old controller is quiet");
    let nvme_tcp_wire::PduHeader::CapsuleResp(response) = answer.header else { panic!("{answer:?}") };
    assert!(response.cqe.status.is_success(), "{:?}", response.cqe.status);
    assert_eq!(target.counters.quiesce_timeouts.load(Ordering::Relaxed), 0);
}

#[test]
fn storage_that_never_answers_holds_the_host_no_longer_than_the_quiesce_timeout() {
    let settings = TargetSettings { command_quiesce_timeout_ms: 1_000, ..TargetSettings::default() };
    let (target, _gate, _ram) = gated_target(settings);
    let (_admin, mut io, mut again, _old_data) = dead_association_with_a_write_in_flight(&target);
    again.advance(Duration::from_millis(900));
    assert!(again.received.is_empty(), "Connect answered before the quiesce timeout");
    again.advance(Duration::from_millis(200));
    let answer = again.received.pop_front().expect("Connect answered after the quiesce timeout");
    let nvme_tcp_wire::PduHeader::CapsuleResp(response) = answer.header else { panic!("{answer:?}") };
    assert!(response.cqe.status.is_success(), "{:?}", response.cqe.status);

    assert!(!io.connection.drain(io.now + Duration::from_millis(900)), "still within the quiesce timeout");
    assert!(io.connection.drain(io.now + Duration::from_millis(1_100)), "the drain gives up at the quiesce timeout");
    assert_eq!(target.counters.quiesce_timeouts.load(Ordering::Relaxed), 2, "the held Connect and the drain");
}

#[test]
fn another_host_is_not_held() {
    let (target, _gate, _ram) = gated_target(TargetSettings::default());
    let (_admin, _io, _again, _old_data) = dead_association_with_a_write_in_flight(&target);
    let mut other = FakeHost::new(target.clone(), 0);
    other.bring_up_admin_as(NQN, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000002");
}

#[test]
fn a_dead_io_queue_holds_the_hosts_connects_while_its_controller_lives_on() {
    // The target has not seen the admin connection go (or the host kept it): the
    // controller is live, only its I/O queue died with a write at storage.
    let (target, gate, ram) = gated_target(TargetSettings::default());
    let (mut admin, mut io) = admin_and_io(&target, 8);
    let old_data = pattern(BLOCK_BYTES as usize, 3);
    io.send_command(read_write(IoOpcode::Write, 1, 0, 1), &old_data);
    io.connection.poll_storage(io.now);
    io.connection.handle_closed();
    assert!(!io.connection.drain(io.now), "the write is still at storage");

    // The same queue again, on the live controller: held.
    let cntlid = ControllerId(1);
    let mut again = FakeHost::new(target.clone(), 0);
    again.initialize(DigestSettings { header: false, data: false });
    again.send_connect(QueueId(1), cntlid, NQN, 8, HOST_NQN);
    again.advance(Duration::from_millis(300));
    admin.advance(Duration::from_millis(300));
    assert!(again.received.is_empty(), "I/O Connect answered while the dead queue's write is at storage");

    gate.lock().unwrap().open = true;
    assert!(io.connection.drain(io.now));
    assert_eq!(block_zero(&ram), old_data);
    again.advance(Duration::from_millis(20));
    let answer = again.received.pop_front().expect("the held I/O Connect is answered once the write landed");
    let nvme_tcp_wire::PduHeader::CapsuleResp(response) = answer.header else { panic!("{answer:?}") };
    assert!(response.cqe.status.is_success(), "{:?}", response.cqe.status);
}

#[test]
fn a_controller_reset_holds_the_new_io_queue_until_the_old_ones_write_landed() {
    let (target, gate, ram) = gated_target(TargetSettings::default());
    let (mut admin, mut io) = admin_and_io(&target, 8);
    let old_data = pattern(BLOCK_BYTES as usize, 5);
    io.send_command(read_write(IoOpcode::Write, 1, 0, 1), &old_data);
    io.connection.poll_storage(io.now);
    // CC.EN 1 -> 0 -> 1: the old I/O queue belongs to a generation that ended, and
    // still has its write at storage (its connection has not even noticed yet).
    let cc = nvme_spec::fabrics::property_offset::CC;
    let enabled = nvme_spec::registers::ControllerConfiguration(0)
        .with_io_submission_queue_entry_size(6)
        .with_io_completion_queue_entry_size(4)
        .with_enable(true);
    assert_status(&admin.property_set(cc, u64::from(enabled.with_enable(false).raw())), Status::SUCCESS);
    assert_status(&admin.property_set(cc, u64::from(enabled.raw())), Status::SUCCESS);

    let mut again = FakeHost::new(target.clone(), 0);
    again.initialize(DigestSettings { header: false, data: false });
    let cntlid = admin.connection.binding().expect("admin bound").controller.id;
    again.send_connect(QueueId(1), cntlid, NQN, 8, HOST_NQN);
    again.advance(Duration::from_millis(200));
    assert!(again.received.is_empty(), "I/O Connect answered while the old generation's write is at storage");

    // The old queue notices the reset at its check, closes, and drains once the write lands.
    io.advance(Duration::from_secs(2));
    assert!(io.connection.wants_close(), "the old generation's queue closes");
    io.connection.handle_closed();
    assert!(!io.connection.drain(io.now));
    gate.lock().unwrap().open = true;
    assert!(io.connection.drain(io.now));
    assert_eq!(block_zero(&ram), old_data);
    drop(io);
    again.advance(Duration::from_millis(20));
    let answer = again.received.pop_front().expect("the held I/O Connect is answered");
    let nvme_tcp_wire::PduHeader::CapsuleResp(response) = answer.header else { panic!("{answer:?}") };
    assert!(response.cqe.status.is_success(), "{:?}", response.cqe.status);
}

/// The runtime's adaptive mode sleeps instead of spinning while a connection awaits
/// storage that wakes the thread: the connection says so exactly while a request is
/// held at such a queue, and has nothing to poll for meanwhile.
#[test]
fn a_connection_awaits_storage_while_a_waking_queue_holds_its_request() {
    let (target, gate, ram) = gated_target(TargetSettings::default());
    let (_admin, mut io) = admin_and_io(&target, 8);
    io.connection.set_storage_waker(std::task::Waker::noop().clone());
    assert!(!io.connection.awaits_storage(), "nothing submitted yet");
    let data = pattern(BLOCK_BYTES as usize, 7);
    io.send_command(read_write(IoOpcode::Write, 1, 0, 1), &data);
    io.connection.poll_storage(io.now);
    assert!(io.connection.awaits_storage(), "a write is held at a queue that wakes the thread");
    assert!(!io.connection.has_pending_storage(), "that queue wakes the thread: nothing to poll for");
    assert_eq!(
        io.connection.storage_activity(),
        StorageActivity { pending_storage: false, awaits_storage: true },
        "the one-pass answer agrees"
    );

    gate.lock().unwrap().open = true;
    io.connection.poll_storage(io.now);
    io.collect();
    assert!(!io.connection.awaits_storage(), "the write completed");
    assert_eq!(io.connection.storage_activity(), StorageActivity::default());
    let answer = io.received.pop_front().expect("the write is answered");
    let nvme_tcp_wire::PduHeader::CapsuleResp(response) = answer.header else { panic!("{answer:?}") };
    assert!(response.cqe.status.is_success(), "{:?}", response.cqe.status);
    assert_eq!(block_zero(&ram), data);
}

#[test]
fn identify_controller_reports_the_quiesce_timeout_as_cqt() {
    // CQT tells a multipath host how long a lost connection's commands may stay in
    // flight here: exactly what the drain waits for at most.
    let settings = TargetSettings { command_quiesce_timeout_ms: 1_234, ..TargetSettings::default() };
    let (target, _gate, _ram) = gated_target(settings);
    let mut host = FakeHost::new(target, 0);
    host.bring_up_admin(NQN);
    let answer = host.command(identify(nvme_spec::identify::cns::CONTROLLER, 0), &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    let raw: [u8; nvme_spec::identify::IDENTIFY_DATA_BYTES] = answer.data.try_into().expect("4096 bytes");
    assert_eq!(nvme_spec::IdentifyController::decode(&raw).command_quiesce_time_ms, 1_234);
    assert_eq!(u16::from_le_bytes([raw[386], raw[387]]), 1_234, "CQT sits at bytes 387:386");
}

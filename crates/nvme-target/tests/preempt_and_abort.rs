//! Preempt and Abort fences the preempted hosts: the command is answered only once
//! their writes already at storage have landed, so nothing they sent can land after
//! the host that preempted them was told it won (a cluster's fencing decision).

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use nvme_spec::opcode::IoOpcode;
use nvme_spec::{CommandId, QueueId, Status};
use nvme_target::TargetSettings;
use nvme_tcp_wire::DigestSettings;
use support::gated::*;
use support::*;

const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";

fn io_queue(target: &std::sync::Arc<nvme_target::Target>, host_nqn: &str) -> (FakeHost, FakeHost) {
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin_as(NQN, host_nqn);
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    assert_status(&io.connect_as(QueueId(1), cntlid, NQN, 32, host_nqn), Status::SUCCESS);
    (admin, io)
}

fn keys(first: u64, second: u64) -> Vec<u8> {
    [first.to_le_bytes(), second.to_le_bytes()].concat()
}

fn register(io: &mut FakeHost, key: u64) {
    let mut command = sqe(IoOpcode::ReservationRegister as u8, 1, 0);
    command.dwords[10] = 0;
    assert_status(&io.command(command, &keys(0, key), &[]), Status::SUCCESS);
}

/// Sends Reservation Acquire (RACQA `action`, Write Exclusive) without waiting.
fn send_acquire(io: &mut FakeHost, action: u32, current: u64, preempt: u64) -> CommandId {
    let mut command = sqe(IoOpcode::ReservationAcquire as u8, 1, 0);
    command.dwords[10] = action | (1 << 8);
    io.send_command(command, &keys(current, preempt))
}

/// Host A (key 0xA1) holds Write Exclusive and has a write of `data` at storage, held
/// at the gate; host B (key 0xB2) is registered.
struct Scene {
    gate: std::sync::Arc<std::sync::Mutex<Gate>>,
    ram: std::sync::Arc<dyn storage::Backend>,
    target: std::sync::Arc<nvme_target::Target>,
    a_io: FakeHost,
    a_write: CommandId,
    b_io: FakeHost,
    data: Vec<u8>,
    _admins: (FakeHost, FakeHost),
}

fn scene(settings: TargetSettings) -> Scene {
    let (target, gate, ram) = gated_target(settings);
    gate.lock().unwrap().open = true;
    let (a_admin, mut a_io) = io_queue(&target, HOST_NQN);
    let (b_admin, mut b_io) = io_queue(&target, OTHER_HOST);
    register(&mut a_io, 0xA1);
    register(&mut b_io, 0xB2);
    let id = send_acquire(&mut a_io, 0, 0xA1, 0);
    assert_status(&a_io.await_answer(id, &[]), Status::SUCCESS);

    gate.lock().unwrap().open = false;
    let data = pattern(BLOCK_BYTES as usize, 9);
    let a_write = a_io.send_command(read_write(IoOpcode::Write, 1, 0, 1), &data);
    a_io.connection.poll_storage(a_io.now);
    a_io.collect();
    assert!(a_io.received.is_empty(), "A's write must wait at storage");
    Scene { gate, ram, target, a_io, a_write, b_io, data, _admins: (a_admin, b_admin) }
}

/// Polls B's queue as the runtime would (storage and timers) for `rounds` rounds of
/// 1 ms simulated time; true once a response arrived.
fn answered_within(io: &mut FakeHost, rounds: u32) -> bool {
    for _ in 0..rounds {
        io.connection.poll_storage(io.now);
        io.advance(Duration::from_millis(1));
        if !io.received.is_empty() {
            return true;
        }
    }
    false
}

#[test]
fn preempt_and_abort_is_answered_only_after_the_preempted_hosts_writes_landed() {
    let mut scene = scene(TargetSettings::default());
    let preempt = send_acquire(&mut scene.b_io, 2, 0xB2, 0xA1);
    assert!(
        !answered_within(&mut scene.b_io, 50),
        "Preempt and Abort answered while the preempted host's write can still land"
    );
    assert_ne!(block_zero(&scene.ram), scene.data);

    // The write lands (and A is answered: it was admitted before the preemption).
    scene.gate.lock().unwrap().open = true;
    let written = scene.a_io.await_answer(scene.a_write, &[]);
    assert_status(&written, Status::SUCCESS);
    assert_eq!(block_zero(&scene.ram), scene.data);

    assert!(answered_within(&mut scene.b_io, 5), "the fence drained");
    assert_status(&scene.b_io.await_answer(preempt, &[]), Status::SUCCESS);
    // From now on A's writes conflict and B's go through.
    let again = scene.a_io.command(read_write(IoOpcode::Write, 1, 0, 1), &pattern(BLOCK_BYTES as usize, 1), &[]);
    assert_eq!(again.cqe.status.kind(), Status::RESERVATION_CONFLICT);
    let own = scene.b_io.command(read_write(IoOpcode::Write, 1, 0, 1), &pattern(BLOCK_BYTES as usize, 2), &[]);
    assert_status(&own, Status::SUCCESS);
    assert_eq!(scene.target.counters.fence_timeouts.load(Ordering::Relaxed), 0);
}

#[test]
fn a_plain_preempt_does_not_wait_for_the_preempted_hosts_writes() {
    let mut scene = scene(TargetSettings::default());
    let preempt = send_acquire(&mut scene.b_io, 1, 0xB2, 0xA1);
    assert!(answered_within(&mut scene.b_io, 2));
    assert_status(&scene.b_io.await_answer(preempt, &[]), Status::SUCCESS);
    scene.gate.lock().unwrap().open = true;
    assert_status(&scene.a_io.await_answer(scene.a_write, &[]), Status::SUCCESS);
}

#[test]
fn a_fence_on_storage_that_never_answers_ends_at_the_quiesce_timeout() {
    let mut scene = scene(TargetSettings { command_quiesce_timeout_ms: 1_000, ..TargetSettings::default() });
    let preempt = send_acquire(&mut scene.b_io, 2, 0xB2, 0xA1);
    assert!(!answered_within(&mut scene.b_io, 990));
    assert!(answered_within(&mut scene.b_io, 20), "answered at the quiesce timeout");
    assert_status(&scene.b_io.await_answer(preempt, &[]), Status::SUCCESS);
    assert_eq!(scene.target.counters.fence_timeouts.load(Ordering::Relaxed), 1);
}

//! Abort: a command held waiting for R2T budget is aborted (the Abort completes with
//! DW0 bit 0 clear, the command with Command Abort Requested); a command whose data
//! is already requested, an unknown command and a queue that is not connected are
//! not aborted (bit 0 set); at most ACL + 1 Aborts wait at once.

mod support;

use std::time::Duration;

use nvme_spec::admin::AbortCommand;
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{CommandId, ControllerId, QueueId, Status};
use nvme_target::TargetSettings;
use nvme_tcp_wire::{DigestSettings, PduHeader};
use support::*;

/// 128 KiB: one maximal write's worth of R2T budget per connection.
const BUDGET_BYTES: u32 = 128 * 1024;
const BLOCKS: u32 = BUDGET_BYTES / BLOCK_BYTES;

fn abort(admin: &mut FakeHost, queue: u16, command: CommandId) -> CommandId {
    let mut command_sqe = sqe(AdminOpcode::Abort as u8, 0, 0);
    command_sqe.dwords[10] = u32::from(queue) | (u32::from(command.0) << 16);
    admin.send_command(command_sqe, &[])
}

fn setup() -> (FakeHost, FakeHost, ControllerId) {
    let settings =
        TargetSettings { max_outstanding_r2t_bytes_per_connection: BUDGET_BYTES, ..TargetSettings::default() };
    let target = test_target_with(settings);
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let mut io = FakeHost::new(target, 0);
    io.initialize(DigestSettings { header: false, data: false });
    assert_status(&io.connect(QueueId(1), cntlid, NQN, 32), Status::SUCCESS);
    (admin, io, cntlid)
}

#[test]
fn a_command_waiting_for_r2t_budget_is_aborted() {
    let (mut admin, mut io, _) = setup();
    let first_data = pattern(BUDGET_BYTES as usize, 1);
    let first = io.send_command(read_write(IoOpcode::Write, 1, 0, BLOCKS), &[]);
    let second = io.send_command(read_write(IoOpcode::Write, 1, 1024, BLOCKS), &[]);
    io.collect();
    // The first write holds the whole budget: only its R2T went out.
    let r2ts: Vec<_> = io
        .received
        .iter()
        .filter_map(|pdu| match pdu.header {
            PduHeader::R2t(r2t) => Some(r2t.command_id),
            _ => None,
        })
        .collect();
    assert_eq!(r2ts, [first]);

    let request = abort(&mut admin, 1, second);
    admin.collect();
    assert!(admin.received.is_empty(), "the Abort waits for the I/O queue's answer");
    // The I/O queue looks at Abort requests at its next controller check.
    io.advance(Duration::from_millis(1_100));
    admin.advance(Duration::from_millis(60));
    let answer = admin.await_answer(request, &[]);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.cqe.result_dw0, AbortCommand::RESULT_ABORTED);

    // The I/O queue completed the aborted write, then serves the first normally.
    let aborted = io.received.iter().find_map(|pdu| match &pdu.header {
        PduHeader::CapsuleResp(response) if response.cqe.command_id == second => Some(response.cqe.status),
        _ => None,
    });
    assert_eq!(aborted.map(|status| status.kind()), Some(Status::ABORTED_BY_REQUEST));
    io.received
        .retain(|pdu| !matches!(&pdu.header, PduHeader::CapsuleResp(response) if response.cqe.command_id == second));
    assert_status(&io.await_answer(first, &first_data), Status::SUCCESS);
    let read = io.command(read_write(IoOpcode::Read, 1, 1024, 8), &[], &[]);
    assert_eq!(read.data, vec![0; 4096], "the aborted write wrote nothing");
}

#[test]
fn commands_past_the_point_of_no_return_and_unknown_ones_are_not_aborted() {
    let (mut admin, mut io, _) = setup();
    let first_data = pattern(BUDGET_BYTES as usize, 2);
    let first = io.send_command(read_write(IoOpcode::Write, 1, 0, BLOCKS), &[]);
    io.collect();
    // Its R2T is out: data may already be on the way, so it cannot be aborted.
    let requested = abort(&mut admin, 1, first);
    let unknown = abort(&mut admin, 1, CommandId(999));
    io.advance(Duration::from_millis(1_100));
    admin.advance(Duration::from_millis(60));
    for request in [requested, unknown] {
        let answer = admin.await_answer(request, &[]);
        assert_eq!(answer.cqe.result_dw0, AbortCommand::RESULT_NOT_ABORTED);
    }
    assert_status(&io.await_answer(first, &first_data), Status::SUCCESS);

    // Queue 2 is not connected: answered at once.
    let idle = abort(&mut admin, 2, CommandId(1));
    assert_eq!(admin.await_answer(idle, &[]).cqe.result_dw0, AbortCommand::RESULT_NOT_ABORTED);
}

#[test]
fn aborts_beyond_the_limit_are_refused_and_unanswered_ones_give_up() {
    let (mut admin, _io, _) = setup();
    // The I/O queue never runs its check here: the Aborts wait, then give up.
    let held: Vec<_> = (0..4).map(|index| abort(&mut admin, 1, CommandId(100 + index))).collect();
    let over = abort(&mut admin, 1, CommandId(200));
    assert_status(&admin.await_answer(over, &[]), Status::ABORT_COMMAND_LIMIT_EXCEEDED);
    admin.advance(Duration::from_millis(3_100));
    for request in held {
        assert_eq!(admin.await_answer(request, &[]).cqe.result_dw0, AbortCommand::RESULT_NOT_ABORTED);
    }
}

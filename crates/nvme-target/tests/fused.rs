//! Fused Compare and Write: pairing on the wire, the statuses of every broken pair,
//! and commands waiting for a range a pair holds.

mod support;

use nvme_spec::opcode::IoOpcode;
use nvme_spec::{CommandId, IdentifyController, NamespaceId, SglDescriptor, Status, SubmissionQueueEntry};
use nvme_tcp_wire::{CapsuleCommand, PduHeader};
use support::*;

const FUSE_FIRST: u8 = 0b01;
const FUSE_SECOND: u8 = 0b10;

fn io_queue() -> (std::sync::Arc<nvme_target::Target>, FakeHost, FakeHost) {
    let target = test_target();
    let (admin, io) = admin_and_io(&target, 128);
    (target, admin, io)
}

/// Sends a read/write-family capsule with FUSE bits; data rides in-capsule.
fn send_fused(host: &mut FakeHost, opcode: IoOpcode, lba: u64, blocks: u32, fuse: u8, data: &[u8]) -> CommandId {
    let id = host.next_id();
    let mut sqe: SubmissionQueueEntry = read_write(opcode, 1, lba, blocks);
    sqe.set_cdw0(opcode as u8, id, nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER);
    sqe.set_fused(fuse);
    if !data.is_empty() {
        sqe.set_sgl(&SglDescriptor::in_capsule(0, data.len() as u32));
    }
    host.send_pdu(PduHeader::CapsuleCmd(CapsuleCommand { sqe }), data);
    id
}

/// Pops responses until both ids answered; returns their statuses in id order.
fn statuses(host: &mut FakeHost, ids: &[CommandId]) -> Vec<Status> {
    let mut found = vec![None; ids.len()];
    let mut polls = 0;
    while found.iter().any(Option::is_none) {
        if host.received.is_empty() && polls < 10 {
            // A pair runs two storage operations one after the other: poll like the
            // runtime does while storage is pending.
            polls += 1;
            host.connection.poll_storage(host.now);
            host.collect();
            continue;
        }
        let pdu = host.received.pop_front().unwrap_or_else(|| panic!("missing responses, have {found:?}"));
        let PduHeader::CapsuleResp(response) = pdu.header else { panic!("unexpected {pdu:?}") };
        let position = ids.iter().position(|id| *id == response.cqe.command_id).expect("known id");
        found[position] = Some(response.cqe.status);
    }
    found.into_iter().flatten().collect()
}

fn read_blocks(host: &mut FakeHost, lba: u64, blocks: u32) -> Vec<u8> {
    let answer = host.command(read_write(IoOpcode::Read, 1, lba, blocks), &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    answer.data
}

fn same(actual: Status, expected: Status) -> bool {
    actual.code_type() == expected.code_type() && actual.code() == expected.code()
}

#[test]
fn identify_advertises_compare_and_write() {
    let (_target, mut admin, _io) = io_queue();
    let answer = admin.command(identify(1, 0), &[], &[]);
    let raw: [u8; 4096] = answer.data.try_into().expect("4096 bytes");
    let id = IdentifyController::decode(&raw);
    assert_eq!(id.fused_operation_support & 1, 1, "FUSES bit 0");
    assert!(id.atomic_compare_and_write_unit >= 7, "ACWU covers at least 8 blocks");
}

#[test]
fn a_matching_pair_writes_and_a_mismatch_changes_nothing() {
    let (_target, _admin, mut io) = io_queue();
    let old = pattern(1024, 1);
    let new = pattern(1024, 2);
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 40, 2), &old, &[]), Status::SUCCESS);

    let compare = send_fused(&mut io, IoOpcode::Compare, 40, 2, FUSE_FIRST, &old);
    let write = send_fused(&mut io, IoOpcode::Write, 40, 2, FUSE_SECOND, &new);
    let got = statuses(&mut io, &[compare, write]);
    assert!(got.iter().all(|status| status.is_success()), "{got:?}");
    assert_eq!(read_blocks(&mut io, 40, 2), new);

    // Comparing against the old data now fails; the write is aborted, nothing changes.
    let third = pattern(1024, 3);
    let compare = send_fused(&mut io, IoOpcode::Compare, 40, 2, FUSE_FIRST, &old);
    let write = send_fused(&mut io, IoOpcode::Write, 40, 2, FUSE_SECOND, &third);
    let got = statuses(&mut io, &[compare, write]);
    assert!(same(got[0], Status::COMPARE_FAILURE), "{got:?}");
    assert!(same(got[1], Status::ABORTED_FAILED_FUSED), "{got:?}");
    assert_eq!(read_blocks(&mut io, 40, 2), new);
}

#[test]
fn broken_pairs_get_the_spec_statuses() {
    let (_target, _admin, mut io) = io_queue();
    let data = pattern(512, 4);
    // A first followed by a plain command: the first is missing its partner; the
    // plain command runs.
    let compare = send_fused(&mut io, IoOpcode::Compare, 0, 1, FUSE_FIRST, &data);
    let read = io.send_command(read_write(IoOpcode::Read, 1, 0, 1), &[]);
    let got = statuses_skipping_data(&mut io, &[compare, read]);
    assert!(same(got[0], Status::ABORTED_MISSING_FUSED), "{got:?}");
    assert!(got[1].is_success());

    // A second without a first.
    let write = send_fused(&mut io, IoOpcode::Write, 0, 1, FUSE_SECOND, &data);
    assert!(same(statuses(&mut io, &[write])[0], Status::ABORTED_MISSING_FUSED));

    // Mismatched ranges: the first is an invalid field, the second aborted.
    let compare = send_fused(&mut io, IoOpcode::Compare, 0, 1, FUSE_FIRST, &data);
    let write = send_fused(&mut io, IoOpcode::Write, 1, 1, FUSE_SECOND, &data);
    let got = statuses(&mut io, &[compare, write]);
    assert!(same(got[0], Status::INVALID_FIELD) && got[0].do_not_retry(), "{got:?}");
    assert!(same(got[1], Status::ABORTED_FAILED_FUSED), "{got:?}");

    // Only Compare then Write may be fused.
    let read = send_fused(&mut io, IoOpcode::Read, 0, 1, FUSE_FIRST, &[]);
    let write = send_fused(&mut io, IoOpcode::Write, 0, 1, FUSE_SECOND, &data);
    let got = statuses(&mut io, &[read, write]);
    assert!(same(got[0], Status::INVALID_FIELD), "{got:?}");
    assert!(same(got[1], Status::ABORTED_FAILED_FUSED), "{got:?}");

    // A first whose range is out of bounds fails; its second is aborted.
    let compare = send_fused(&mut io, IoOpcode::Compare, NAMESPACE_BLOCKS, 1, FUSE_FIRST, &data);
    let write = send_fused(&mut io, IoOpcode::Write, NAMESPACE_BLOCKS, 1, FUSE_SECOND, &data);
    let got = statuses(&mut io, &[compare, write]);
    assert!(same(got[0], Status::LBA_OUT_OF_RANGE), "{got:?}");
    assert!(same(got[1], Status::ABORTED_FAILED_FUSED), "{got:?}");

    // The queue still works.
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 0, 1), &data, &[]), Status::SUCCESS);
}

/// Like `statuses` but tolerates C2HData before the responses.
fn statuses_skipping_data(host: &mut FakeHost, ids: &[CommandId]) -> Vec<Status> {
    host.received.retain(|pdu| !matches!(pdu.header, PduHeader::C2hData(_)));
    statuses(host, ids)
}

#[test]
fn both_commands_of_a_pair_may_take_their_data_by_r2t() {
    let (_target, _admin, mut io) = io_queue();
    // 64 blocks of 512 bytes = 32 KiB, sent on R2T (as a host with a smaller
    // in-capsule limit than the target's does).
    let old = pattern(32 * 1024, 5);
    let new = pattern(32 * 1024, 6);
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 100, 64), &[], &old), Status::SUCCESS);
    let compare = send_fused(&mut io, IoOpcode::Compare, 100, 64, FUSE_FIRST, &[]);
    send_fused(&mut io, IoOpcode::Write, 100, 64, FUSE_SECOND, &[]);
    let mut answered = Vec::new();
    for _ in 0..100 {
        if io.received.is_empty() {
            io.connection.poll_storage(io.now);
            io.collect();
        }
        let Some(pdu) = io.received.pop_front() else { break };
        match pdu.header {
            PduHeader::R2t(r2t) => {
                let source = if r2t.command_id == compare { &old } else { &new };
                let chunk = source[r2t.offset as usize..(r2t.offset + r2t.length) as usize].to_vec();
                io.send_pdu(
                    PduHeader::H2cData(nvme_tcp_wire::DataHeader {
                        command_id: r2t.command_id,
                        transfer_tag: r2t.transfer_tag,
                        data_offset: r2t.offset,
                        data_length: r2t.length,
                        last: true,
                        success: false,
                    }),
                    &chunk,
                );
            }
            PduHeader::CapsuleResp(response) => answered.push((response.cqe.command_id, response.cqe.status)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(answered.len(), 2, "{answered:?}");
    assert!(answered.iter().all(|(_, status)| status.is_success()), "{answered:?}");
    assert_eq!(read_blocks(&mut io, 100, 64), new);
}

#[test]
fn writes_wait_for_a_range_a_pair_holds() {
    let (target, _admin, mut io) = io_queue();
    let namespace = target.subsystems()[0].namespace(NamespaceId(1)).expect("namespace 1");
    // Another queue's pair holds blocks 8..16.
    assert_eq!(namespace.range_locks.try_hold(8, 8, None), nvme_target::range_locks::HoldOutcome::Held);
    let data = pattern(512, 7);
    // Outside the range: runs at once.
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 16, 1), &data, &[]), Status::SUCCESS);
    // Inside: waits.
    let waiting = io.send_command(read_write(IoOpcode::Write, 1, 12, 1), &data);
    let compare = send_fused(&mut io, IoOpcode::Compare, 9, 1, FUSE_FIRST, &[0u8; 512]);
    let write = send_fused(&mut io, IoOpcode::Write, 9, 1, FUSE_SECOND, &data);
    io.connection.poll_storage(io.now);
    io.collect();
    assert!(io.received.is_empty(), "nothing may complete while the range is held: {:?}", io.received);
    assert!(io.connection.has_pending_storage(), "without a waker the runtime must keep polling");
    assert!(io.connection.storage_activity().pending_storage, "the one-pass answer agrees");
    namespace.range_locks.release(8, 8);
    io.connection.poll_storage(io.now);
    io.collect();
    let got = statuses(&mut io, &[waiting, compare, write]);
    assert!(got.iter().all(|status| status.is_success()), "{got:?}");
    assert_eq!(read_blocks(&mut io, 12, 1), data);
    assert_eq!(read_blocks(&mut io, 9, 1), data);
    assert_eq!(namespace.range_locks.held_ranges(), 0, "the pair released its range");
}

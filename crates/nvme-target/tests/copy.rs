//! Copy (NVM 19h) with format 0 source ranges: the data lands at SDLBA in range
//! order; limits and bad fields get the statuses the spec names.

mod support;

use nvme_spec::identify::{cns, oncs, IDENTIFY_DATA_BYTES};
use nvme_spec::opcode::IoOpcode;
use nvme_spec::{IdentifyController, IdentifyNamespace, Status};
use support::*;

fn io_queue() -> (FakeHost, FakeHost) {
    admin_and_io(&test_target(), 32)
}

/// Format 0 entries for (SLBA, blocks).
fn entries(ranges: &[(u64, u32)]) -> Vec<u8> {
    let mut data = vec![0u8; ranges.len() * 32];
    for (entry, (lba, blocks)) in data.chunks_exact_mut(32).zip(ranges) {
        entry[8..16].copy_from_slice(&lba.to_le_bytes());
        entry[16..18].copy_from_slice(&((blocks - 1) as u16).to_le_bytes());
    }
    data
}

fn copy(io: &mut FakeHost, destination: u64, ranges: &[(u64, u32)], format: u32) -> Status {
    let mut command = sqe(IoOpcode::Copy as u8, 1, 0);
    command.dwords[10] = destination as u32;
    command.dwords[11] = (destination >> 32) as u32;
    command.dwords[12] = (ranges.len() as u32).wrapping_sub(1) & 0xFF | (format << 8);
    io.command(command, &entries(ranges), &[]).cqe.status
}

#[test]
fn ranges_are_copied_in_order_to_the_destination() {
    let (_admin, mut io) = io_queue();
    let first = pattern(4 * BLOCK_BYTES as usize, 11);
    let second = pattern(2 * BLOCK_BYTES as usize, 12);
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 10, 4), &first, &[]), Status::SUCCESS);
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 100, 2), &second, &[]), Status::SUCCESS);
    assert_eq!(copy(&mut io, 200, &[(10, 4), (100, 2)], 0), Status::SUCCESS);
    let answer = io.command(read_write(IoOpcode::Read, 1, 200, 6), &[], &[]);
    assert_eq!(answer.data, [first.clone(), second.clone()].concat());
    // The sources are unchanged; an overlapping copy reads before it writes.
    assert_eq!(copy(&mut io, 11, &[(10, 4)], 0), Status::SUCCESS);
    let answer = io.command(read_write(IoOpcode::Read, 1, 11, 4), &[], &[]);
    assert_eq!(answer.data, first);
}

#[test]
fn bad_copies_get_the_spec_statuses_and_change_nothing() {
    let (_admin, mut io) = io_queue();
    let before = io.command(read_write(IoOpcode::Read, 1, 300, 8), &[], &[]).data;
    let limit = (128 * 1024 / BLOCK_BYTES) as u64;
    assert_eq!(copy(&mut io, 300, &[(0, 1)], 1), Status::INVALID_FIELD.with_do_not_retry(), "format 1");
    assert_eq!(copy(&mut io, 300, &[(NAMESPACE_BLOCKS - 1, 2)], 0), Status::LBA_OUT_OF_RANGE.with_do_not_retry());
    assert_eq!(
        copy(&mut io, NAMESPACE_BLOCKS - 1, &[(0, 2)], 0),
        Status::LBA_OUT_OF_RANGE.with_do_not_retry(),
        "destination past the end"
    );
    let size_limit = Status::COMMAND_SIZE_LIMIT_EXCEEDED.with_do_not_retry();
    assert_eq!(copy(&mut io, 300, &[(0, limit as u32 + 1)], 0), size_limit, "one range above MSSRL");
    assert_eq!(copy(&mut io, 300, &[(0, limit as u32), (0, 1)], 0), size_limit, "total above MCL");
    let many: Vec<(u64, u32)> = (0..129).map(|index| (index, 1)).collect();
    assert_eq!(copy(&mut io, 300, &many, 0), size_limit, "more ranges than MSRC + 1");
    // Fewer entry bytes than NR says.
    let mut short = sqe(IoOpcode::Copy as u8, 1, 0);
    short.dwords[10] = 300;
    short.dwords[12] = 1;
    assert_eq!(io.command(short, &entries(&[(0, 1)]), &[]).cqe.status.kind(), Status::DATA_SGL_LENGTH_INVALID);
    assert_eq!(io.command(read_write(IoOpcode::Read, 1, 300, 8), &[], &[]).data, before);
}

#[test]
fn identify_advertises_copy_and_its_limits() {
    let (mut admin, _io) = io_queue();
    let raw: [u8; IDENTIFY_DATA_BYTES] = admin.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    let controller = IdentifyController::decode(&raw);
    assert_ne!(controller.optional_nvm_command_support & oncs::COPY, 0);
    assert_eq!(controller.optional_copy_formats_supported & 1, 1);
    let raw: [u8; IDENTIFY_DATA_BYTES] = admin.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
    let namespace = IdentifyNamespace::decode(&raw);
    assert_eq!(namespace.maximum_copy_length, 128 * 1024 / BLOCK_BYTES);
    assert_eq!(u32::from(namespace.maximum_single_source_range_length), 128 * 1024 / BLOCK_BYTES);
    assert_eq!(namespace.maximum_source_range_count, 127);
}

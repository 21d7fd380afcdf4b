//! Verify (NVM 0Ch): reads the blocks without transferring them; range, size (VSL)
//! and data-pointer checks; refused under a reservation like a read.

mod support;

use nvme_spec::identify::{cns, IDENTIFY_DATA_BYTES};
use nvme_spec::opcode::IoOpcode;
use nvme_spec::Status;
use support::*;

fn verify(io: &mut FakeHost, lba: u64, blocks: u32) -> Answer {
    let mut command = sqe(IoOpcode::Verify as u8, 1, 0);
    command.dwords[10] = lba as u32;
    command.dwords[11] = (lba >> 32) as u32;
    command.dwords[12] = blocks - 1;
    io.command(command, &[], &[])
}

#[test]
fn verify_reads_without_transfer_and_checks_its_range() {
    let target = test_target();
    let (mut admin, mut io) = admin_and_io(&target, 32);

    let answer = verify(&mut io, 0, 8);
    assert_status(&answer, Status::SUCCESS);
    assert!(answer.data.is_empty(), "Verify transfers nothing");
    assert_eq!(verify(&mut io, NAMESPACE_BLOCKS - 1, 2).cqe.status.kind(), Status::LBA_OUT_OF_RANGE);
    // VSL: at most MDTS (128 KiB) per Verify.
    let raw: [u8; IDENTIFY_DATA_BYTES] =
        admin.command(identify(cns::IO_COMMAND_SET_CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    let limit_blocks = (4096u32 << raw[0]) / BLOCK_BYTES;
    assert_status(&verify(&mut io, 0, limit_blocks), Status::SUCCESS);
    assert_eq!(verify(&mut io, 0, limit_blocks + 1).cqe.status.kind(), Status::INVALID_FIELD);
    // A data pointer with a length is refused.
    let with_data = io.command(read_write(IoOpcode::Verify, 1, 0, 8), &[], &[]);
    assert_eq!(with_data.cqe.status.kind(), Status::DATA_SGL_LENGTH_INVALID);
}

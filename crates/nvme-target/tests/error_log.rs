//! The Error Information log (01h): failed commands of every queue of a controller,
//! newest first, numbered by a lifetime count that SMART reports too; at most the
//! advertised number of entries (ELPE + 1) are kept.

mod support;

use nvme_spec::identify::{cns, IDENTIFY_DATA_BYTES};
use nvme_spec::log_page::{
    ErrorInformationEntry, SmartHealthLog, ERROR_INFORMATION_ENTRY_BYTES, SMART_HEALTH_LOG_BYTES,
};
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{IdentifyController, QueueId, Status};
use support::*;

fn get_log(host: &mut FakeHost, log: u8, length: u32) -> Vec<u8> {
    let mut command = sqe(AdminOpcode::GetLogPage as u8, 0xFFFF_FFFF, length);
    command.dwords[10] = u32::from(log) | ((length / 4 - 1) << 16);
    let answer = host.command(command, &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    answer.data
}

fn entries(host: &mut FakeHost, count: usize) -> Vec<ErrorInformationEntry> {
    let data = get_log(host, 0x01, (count * ERROR_INFORMATION_ENTRY_BYTES) as u32);
    data.chunks_exact(ERROR_INFORMATION_ENTRY_BYTES)
        .map(|chunk| ErrorInformationEntry::decode(chunk.try_into().unwrap()))
        .collect()
}

#[test]
fn failed_commands_of_every_queue_are_logged_newest_first_and_counted_in_smart() {
    let target = test_target();
    let (mut admin, mut io) = admin_and_io(&target, 32);
    assert!(entries(&mut admin, 4).iter().all(|entry| entry.error_count == 0), "nothing failed yet");

    let beyond = read_write(IoOpcode::Read, 1, NAMESPACE_BLOCKS, 1);
    let failed_read = io.command(beyond, &[], &[]);
    assert_status(&failed_read, Status::LBA_OUT_OF_RANGE);
    let unknown_cns = admin.command(identify(0x55, 0), &[], &[]);
    assert_status(&unknown_cns, Status::INVALID_FIELD);
    // Successful commands are not logged.
    assert_status(&io.command(read_write(IoOpcode::Read, 1, 0, 1), &[], &[]), Status::SUCCESS);

    let log = entries(&mut admin, 3);
    assert_eq!((log[0].error_count, log[1].error_count, log[2].error_count), (2, 1, 0));
    assert_eq!(log[0].submission_queue_id, QueueId::ADMIN);
    assert_eq!(log[0].command_id, unknown_cns.cqe.command_id);
    assert_eq!(log[0].opcode, AdminOpcode::Identify as u8);
    assert_eq!(log[0].status_field >> 1, unknown_cns.cqe.status.field());
    assert_eq!(log[1].submission_queue_id, QueueId(1));
    assert_eq!(log[1].command_id, failed_read.cqe.command_id);
    assert_eq!(log[1].lba, NAMESPACE_BLOCKS);
    assert_eq!(log[1].namespace_id.0, 1);
    assert_eq!(log[1].status_field >> 1, failed_read.cqe.status.field());

    let smart = get_log(&mut admin, 0x02, SMART_HEALTH_LOG_BYTES as u32);
    let smart = SmartHealthLog::decode(&smart.try_into().unwrap());
    assert_eq!(smart.error_log_entries, 2);
}

#[test]
fn the_log_keeps_the_advertised_number_of_entries() {
    let mut admin = FakeHost::new(test_target(), 0);
    admin.bring_up_admin(NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] = admin.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    let capacity = usize::from(IdentifyController::decode(&raw).error_log_page_entries) + 1;
    for _ in 0..capacity + 5 {
        admin.command(identify(0x55, 0), &[], &[]);
    }
    let log = entries(&mut admin, capacity);
    assert_eq!(log[0].error_count, (capacity + 5) as u64);
    assert_eq!(log[capacity - 1].error_count, 6, "the oldest five were dropped");
}

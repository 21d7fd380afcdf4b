//! Persistent reservations through the wire, between hosts with different Host
//! Identifiers: registration, acquire and the access rules on the I/O path,
//! preemption with its notification (AEN and log 80h), release, the report (one
//! entry per registrant, CNTLID FFFFh), the Host Identifier and mask features, and
//! the statuses bad requests get (IEKEY in Acquire and Release, a NUMD larger than
//! the data buffer).

mod support;

use std::time::Duration;

use nvme_spec::features::feature_id;
use nvme_spec::identify::{cns, oncs, IDENTIFY_DATA_BYTES};
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{ControllerId, IdentifyController, IdentifyNamespace, QueueId, Status};
use nvme_tcp_wire::DigestSettings;
use support::*;

const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";
const THIRD_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000c3";

struct Host {
    admin: FakeHost,
    io: FakeHost,
    cntlid: ControllerId,
}

fn host(target: &std::sync::Arc<nvme_target::Target>, host_nqn: &str) -> Host {
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin_as(NQN, host_nqn);
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    assert_status(&io.connect_as(QueueId(1), cntlid, NQN, 32, host_nqn), Status::SUCCESS);
    Host { admin, io, cntlid }
}

fn keys(first: u64, second: u64) -> Vec<u8> {
    [first.to_le_bytes(), second.to_le_bytes()].concat()
}

fn register(io: &mut FakeHost, action: u32, current: u64, new: u64) -> Status {
    let mut command = sqe(IoOpcode::ReservationRegister as u8, 1, 0);
    command.dwords[10] = action;
    io.command(command, &keys(current, new), &[]).cqe.status
}

fn acquire(io: &mut FakeHost, action: u32, kind: u32, current: u64, preempt: u64) -> Status {
    let mut command = sqe(IoOpcode::ReservationAcquire as u8, 1, 0);
    command.dwords[10] = action | (kind << 8);
    io.command(command, &keys(current, preempt), &[]).cqe.status
}

fn release(io: &mut FakeHost, action: u32, kind: u32, current: u64) -> Status {
    let mut command = sqe(IoOpcode::ReservationRelease as u8, 1, 0);
    command.dwords[10] = action | (kind << 8);
    io.command(command, &current.to_le_bytes(), &[]).cqe.status
}

fn report(io: &mut FakeHost, extended: bool) -> Answer {
    report_sized(io, extended, 4096 / 4 - 1, 4096)
}

/// A Reservation Report with NUMD `numd` (0's based dwords) into a data buffer of
/// `buffer` bytes.
fn report_sized(io: &mut FakeHost, extended: bool, numd: u32, buffer: u32) -> Answer {
    let mut command = sqe(IoOpcode::ReservationReport as u8, 1, buffer);
    command.dwords[10] = numd;
    command.dwords[11] = u32::from(extended);
    io.command(command, &[], &[])
}

/// The Registered Controller entries of an extended report: (CNTLID, holds, key, host).
fn entries(data: &[u8]) -> Vec<(u16, u8, u64, [u8; 16])> {
    let count = usize::from(u16::from_le_bytes([data[5], data[6]]));
    (0..count)
        .map(|index| {
            let entry = &data[64 + index * 64..128 + index * 64];
            (
                u16::from_le_bytes([entry[0], entry[1]]),
                entry[2],
                u64::from_le_bytes(entry[8..16].try_into().unwrap()),
                entry[16..32].try_into().unwrap(),
            )
        })
        .collect()
}

fn status_of(io: &mut FakeHost, opcode: IoOpcode) -> Status {
    let data = pattern(512, 3);
    let in_capsule: &[u8] = if opcode == IoOpcode::Write { &data } else { &[] };
    io.command(read_write(opcode, 1, 0, 1), in_capsule, &[]).cqe.status.kind()
}

#[test]
fn registration_reservation_and_preemption_between_hosts() {
    let target = test_target();
    let mut a = host(&target, HOST_NQN);
    let mut b = host(&target, OTHER_HOST);
    let mut c = host(&target, THIRD_HOST);
    assert_eq!(register(&mut a.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(register(&mut b.io, 0, 0, 0xB2), Status::SUCCESS);

    // A holds Write Exclusive: others read, only A writes.
    assert_eq!(acquire(&mut a.io, 0, 1, 0xA1, 0), Status::SUCCESS);
    assert_eq!(status_of(&mut a.io, IoOpcode::Write), Status::SUCCESS);
    assert_eq!(status_of(&mut b.io, IoOpcode::Read), Status::SUCCESS);
    let conflict = b.io.command(read_write(IoOpcode::Write, 1, 0, 1), &pattern(512, 1), &[]);
    assert_eq!(conflict.cqe.status.kind(), Status::RESERVATION_CONFLICT);
    assert!(!conflict.cqe.status.do_not_retry());
    assert_eq!(status_of(&mut c.io, IoOpcode::Write), Status::RESERVATION_CONFLICT);
    // Namespace 2 has no reservation.
    let other_namespace = c.io.command(read_write(IoOpcode::Write, 2, 0, 1), &pattern(512, 1), &[]);
    assert_status(&other_namespace, Status::SUCCESS);

    // The report: generation 2, type 1, both registrants, each once with CNTLID
    // FFFFh (the dynamic controller model's value), A holding.
    let answer = report(&mut b.io, true);
    assert_status(&answer, Status::SUCCESS);
    let data = answer.data;
    assert_eq!(u32::from_le_bytes(data[0..4].try_into().unwrap()), 2);
    assert_eq!(data[4], 1);
    assert_eq!(entries(&data), [(0xFFFF, 1, 0xA1, host_id_of(HOST_NQN)), (0xFFFF, 0, 0xB2, host_id_of(OTHER_HOST))]);
    assert_eq!(report(&mut b.io, false).cqe.status.kind(), Status::HOST_IDENTIFIER_INCONSISTENT);

    // A waits for notifications; B preempts A into Exclusive Access (and aborts).
    let event = a.admin.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    assert_eq!(acquire(&mut b.io, 2, 2, 0xB2, 0xA1), Status::SUCCESS);
    assert_eq!(status_of(&mut a.io, IoOpcode::Read), Status::RESERVATION_CONFLICT, "EA: A may not even read");
    assert_eq!(status_of(&mut b.io, IoOpcode::Write), Status::SUCCESS);
    a.admin.advance(Duration::from_millis(300));
    let notice = a.admin.await_answer(event, &[]);
    // I/O command set specific (6), reservation log page available (0), log 80h.
    assert_eq!(notice.cqe.result_dw0, 0x0080_0006);
    let mut log = sqe(AdminOpcode::GetLogPage as u8, 0xFFFF_FFFF, 64);
    log.dwords[10] = 0x80 | ((64 / 4 - 1) << 16);
    let page = a.admin.command(log, &[], &[]).data;
    assert_eq!(u64::from_le_bytes(page[0..8].try_into().unwrap()), 1, "log page count");
    assert_eq!(page[8], 1, "registration preempted");
    assert_eq!(u32::from_le_bytes(page[12..16].try_into().unwrap()), 1, "namespace 1");
    let empty = a.admin.command(log, &[], &[]).data;
    assert!(empty.iter().all(|&byte| byte == 0), "each entry is read once");
    // A is no longer registered: its key does not work any more.
    assert_eq!(acquire(&mut a.io, 0, 1, 0xA1, 0), Status::RESERVATION_CONFLICT);

    // B releases: everyone may write again.
    assert_eq!(release(&mut b.io, 0, 1, 0xB2), Status::INVALID_FIELD.with_do_not_retry(), "wrong type");
    assert_eq!(release(&mut b.io, 0, 2, 0xB2), Status::SUCCESS);
    assert_eq!(status_of(&mut c.io, IoOpcode::Write), Status::SUCCESS);
    let _ = (b.cntlid, c.cntlid);
}

#[test]
fn bad_reservation_commands_get_the_statuses_the_spec_names() {
    let target = test_target();
    let mut a = host(&target, HOST_NQN);
    assert_eq!(register(&mut a.io, 7, 0, 1), Status::INVALID_FIELD.with_do_not_retry(), "unknown RREGA");
    assert_eq!(
        register(&mut a.io, 3 << 30, 0, 1),
        Status::INVALID_FIELD.with_do_not_retry(),
        "PTPL needs a reservation store"
    );
    assert_eq!(register(&mut a.io, 0, 0, 1), Status::SUCCESS);
    assert_eq!(register(&mut a.io, 1, 99, 0), Status::RESERVATION_CONFLICT, "wrong key");
    assert_eq!(acquire(&mut a.io, 0, 9, 1, 0), Status::INVALID_FIELD.with_do_not_retry(), "unknown RTYPE");
    assert_eq!(acquire(&mut a.io, 5, 1, 1, 0), Status::INVALID_FIELD.with_do_not_retry(), "unknown RACQA");
    assert_eq!(release(&mut a.io, 4, 1, 1), Status::INVALID_FIELD.with_do_not_retry(), "unknown RRELA");
    let mut short = sqe(IoOpcode::ReservationRegister as u8, 1, 0);
    short.dwords[10] = 0;
    assert_eq!(a.io.command(short, &[0u8; 8], &[]).cqe.status.kind(), Status::DATA_SGL_LENGTH_INVALID);
    let mut missing = sqe(IoOpcode::ReservationAcquire as u8, 9, 0);
    missing.dwords[10] = 1 << 8;
    assert_eq!(a.io.command(missing, &keys(1, 0), &[]).cqe.status.kind(), Status::INVALID_NAMESPACE_OR_FORMAT);
    assert_eq!(register(&mut a.io, 1, 0, 0), Status::RESERVATION_CONFLICT);
    assert_eq!(register(&mut a.io, 1 | (1 << 3), 0, 0), Status::SUCCESS, "IEKEY ignores the key");
}

/// RESCAP bit 7 says IEKEY has its NVMe 1.3 meaning: Register may ignore the current
/// key, Acquire and Release must not be sent with it (Invalid Field in Command, DNR),
/// even with the right key, and such a command changes nothing.
#[test]
fn ignore_existing_key_is_refused_in_acquire_and_release() {
    let target = test_target();
    let mut a = host(&target, HOST_NQN);
    let mut b = host(&target, OTHER_HOST);
    const IEKEY: u32 = 1 << 3;
    assert_eq!(register(&mut a.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(register(&mut b.io, 0, 0, 0xB2), Status::SUCCESS);
    let refused = Status::INVALID_FIELD.with_do_not_retry();
    for action in [0, 1, 2] {
        assert_eq!(acquire(&mut a.io, action | IEKEY, 1, 0xA1, 0xB2), refused, "Acquire RACQA {action} with IEKEY");
    }
    assert_eq!(report(&mut b.io, true).data[4], 0, "no reservation was taken");
    assert_eq!(status_of(&mut b.io, IoOpcode::Write), Status::SUCCESS);
    assert_eq!(entries(&report(&mut b.io, true).data).len(), 2, "nobody was preempted");

    assert_eq!(acquire(&mut a.io, 0, 1, 0xA1, 0), Status::SUCCESS);
    assert_eq!(release(&mut a.io, IEKEY, 1, 0xA1), refused, "Release with IEKEY and the right key");
    assert_eq!(release(&mut a.io, 1 | IEKEY, 0, 0), refused, "Clear with IEKEY");
    assert_eq!(release(&mut b.io, 1 | IEKEY, 0, 0xB2), refused, "Clear with IEKEY by another registrant");
    let answer = report(&mut b.io, true);
    assert_eq!((answer.data[4], entries(&answer.data).len()), (1, 2), "still held, nobody cleared");
    assert_eq!(status_of(&mut b.io, IoOpcode::Write), Status::RESERVATION_CONFLICT);
    // Without IEKEY both work, and Register keeps honouring it.
    assert_eq!(release(&mut a.io, 0, 1, 0xA1), Status::SUCCESS);
    assert_eq!(register(&mut b.io, 2 | IEKEY, 0, 0xB3), Status::SUCCESS, "Replace with IEKEY");
    assert_eq!(release(&mut b.io, 1, 0, 0xB3), Status::SUCCESS);
}

/// NUMD (0's based dwords) asking for more than the data buffer holds is Data SGL
/// Length Invalid, never a report cut to the buffer; NUMD is bounded by one transfer
/// before anything is allocated; a buffer larger than NUMD gets NUMD's bytes.
#[test]
fn a_report_larger_than_its_data_buffer_is_refused() {
    let target = test_target();
    let mut a = host(&target, HOST_NQN);
    assert_eq!(register(&mut a.io, 0, 0, 0xA1), Status::SUCCESS);
    let too_short = Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry();
    for (numd, buffer) in [(0x3FF, 64), (0xFFFF_FFFF, 4096), (4096 / 4, 4096), (0, 0), (0xFFFF_FFFF, 0xFFFF_FFFC)] {
        let answer = report_sized(&mut a.io, true, numd, buffer);
        assert_eq!(answer.cqe.status, too_short, "NUMD {numd:#x} into {buffer} bytes");
        assert!(answer.data.is_empty(), "no data for a refused report");
    }
    // More than one transfer, even into a buffer that large.
    let limit = nvme_target::limits::MAX_RESERVATION_REPORT_BYTES;
    let answer = report_sized(&mut a.io, true, (2 * limit) / 4 - 1, 2 * limit);
    assert_eq!(answer.cqe.status, too_short, "NUMD past one transfer");
    // Exactly the buffer, and less than it: NUMD's bytes.
    for (numd, buffer, sent) in [(0x3F, 256, 256), (15, 4096, 64), (0, 4, 4)] {
        let answer = report_sized(&mut a.io, true, numd, buffer);
        assert_status(&answer, Status::SUCCESS);
        assert_eq!(answer.data.len(), sent, "NUMD {numd:#x} into {buffer} bytes");
    }
    let answer = report_sized(&mut a.io, true, limit / 4 - 1, limit);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.data.len(), limit as usize, "the largest report, zeroes past the registrants");
    assert_eq!(entries(&answer.data), [(0xFFFF, 0, 0xA1, host_id_of(HOST_NQN))]);
    assert!(answer.data[128..].iter().all(|&byte| byte == 0));
}

/// A host with two controllers (two admin queues, the same Host Identifier) is one
/// registrant, reported once with CNTLID FFFFh, whichever controller asks.
#[test]
fn a_host_with_two_controllers_is_reported_once() {
    let target = test_target();
    let mut first = host(&target, HOST_NQN);
    let mut second = host(&target, HOST_NQN);
    assert_ne!(first.cntlid, second.cntlid);
    assert_eq!(register(&mut first.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(acquire(&mut second.io, 0, 5, 0xA1, 0), Status::SUCCESS, "the registration is the host's");
    let through_first = report(&mut first.io, true);
    let through_second = report(&mut second.io, true);
    assert_eq!(entries(&through_first.data), [(0xFFFF, 1, 0xA1, host_id_of(HOST_NQN))]);
    assert_eq!(through_first.data, through_second.data);
}

#[test]
fn identify_and_features_describe_the_reservation_support() {
    let target = test_target();
    let mut a = host(&target, HOST_NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] =
        a.admin.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    assert_ne!(IdentifyController::decode(&raw).optional_nvm_command_support & oncs::RESERVATIONS, 0);
    let raw: [u8; IDENTIFY_DATA_BYTES] =
        a.admin.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
    assert_eq!(IdentifyNamespace::decode(&raw).reservation_capabilities, 0b1111_1110);

    let mut get = sqe(AdminOpcode::GetFeatures as u8, 0, 16);
    get.dwords[10] = u32::from(feature_id::HOST_IDENTIFIER);
    get.dwords[11] = 1;
    let answer = a.admin.command(get, &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.data, host_id_of(HOST_NQN));
    get.dwords[11] = 0;
    assert_eq!(a.admin.command(get, &[], &[]).cqe.status.kind(), Status::INVALID_FIELD);
    let mut set = sqe(AdminOpcode::SetFeatures as u8, 0, 0);
    set.dwords[10] = u32::from(feature_id::HOST_IDENTIFIER);
    assert_eq!(a.admin.command(set, &[], &[]).cqe.status.kind(), Status::COMMAND_SEQUENCE_ERROR);

    // Masking "registration preempted" on namespace 1 suppresses that notice.
    let mut mask = sqe(AdminOpcode::SetFeatures as u8, 1, 0);
    mask.dwords[10] = u32::from(feature_id::RESERVATION_NOTIFICATION_MASK);
    mask.dwords[11] = 1 << 1;
    assert_status(&a.admin.command(mask, &[], &[]), Status::SUCCESS);
    let mut read_mask = sqe(AdminOpcode::GetFeatures as u8, 1, 0);
    read_mask.dwords[10] = u32::from(feature_id::RESERVATION_NOTIFICATION_MASK);
    assert_eq!(a.admin.command(read_mask, &[], &[]).cqe.result_dw0, 1 << 1);
    let mut b = host(&target, OTHER_HOST);
    register(&mut a.io, 0, 0, 1);
    register(&mut b.io, 0, 0, 2);
    acquire(&mut a.io, 0, 1, 1, 0);
    let event = a.admin.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    assert_eq!(acquire(&mut b.io, 1, 1, 2, 1), Status::SUCCESS);
    a.admin.advance(Duration::from_millis(300));
    a.admin.collect();
    assert!(a.admin.received.is_empty(), "masked: no event for {event:?}");
    let mut persistence = sqe(AdminOpcode::SetFeatures as u8, 1, 0);
    persistence.dwords[10] = u32::from(feature_id::RESERVATION_PERSISTENCE);
    persistence.dwords[11] = 1;
    assert_eq!(a.admin.command(persistence, &[], &[]).cqe.status.kind(), Status::INVALID_FIELD);
}

#[test]
fn a_target_without_reservations_says_so_and_refuses_the_commands() {
    let target =
        test_target_with(nvme_target::TargetSettings { reservations: false, ..nvme_target::TargetSettings::default() });
    let mut a = host(&target, HOST_NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] =
        a.admin.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    assert_eq!(IdentifyController::decode(&raw).optional_nvm_command_support & oncs::RESERVATIONS, 0);
    let raw: [u8; IDENTIFY_DATA_BYTES] =
        a.admin.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
    assert_eq!(IdentifyNamespace::decode(&raw).reservation_capabilities, 0);
    assert_eq!(register(&mut a.io, 0, 0, 1), Status::INVALID_OPCODE.with_do_not_retry());
    assert_eq!(report(&mut a.io, true).cqe.status.kind(), Status::INVALID_OPCODE);
}

/// Sends Set Features 83h (Reservation Persistence) for namespace 1.
fn set_persistence(admin: &mut FakeHost, on: bool) -> Status {
    let mut command = sqe(AdminOpcode::SetFeatures as u8, 1, 0);
    command.dwords[10] = u32::from(feature_id::RESERVATION_PERSISTENCE);
    command.dwords[11] = u32::from(on);
    admin.command(command, &[], &[]).cqe.status.kind()
}

#[test]
fn persist_through_power_loss_survives_a_new_target_with_the_same_store() {
    use nvme_target::reservation_store::MemoryReservationStore;
    let store = std::sync::Arc::new(MemoryReservationStore::default());
    let target = test_target();
    target.set_reservation_store(store.clone());
    let mut a = host(&target, HOST_NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] =
        a.admin.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
    assert_eq!(IdentifyNamespace::decode(&raw).reservation_capabilities, 0xFF, "PTPOS with a store");
    // Register with CPTPL 11b: PTPL on, saved.
    assert_eq!(register(&mut a.io, 3 << 30, 0, 0xA1), Status::SUCCESS);
    assert_eq!(store.len(), 1);
    let mut b = host(&target, OTHER_HOST);
    assert_eq!(register(&mut b.io, 0, 0, 0xB2), Status::SUCCESS);
    assert_eq!(acquire(&mut a.io, 0, 1, 0xA1, 0), Status::SUCCESS);
    assert_eq!(report(&mut a.io, true).data[9], 1, "PTPLS in the report");
    drop((a, b));

    // "Power loss": a new target over the same store.
    let target = test_target();
    target.set_reservation_store(store.clone());
    let mut b = host(&target, OTHER_HOST);
    assert_eq!(status_of(&mut b.io, IoOpcode::Write), Status::RESERVATION_CONFLICT, "A still holds Write Exclusive");
    assert_eq!(status_of(&mut b.io, IoOpcode::Read), Status::SUCCESS);
    let answer = report(&mut b.io, true);
    assert_eq!(u16::from_le_bytes([answer.data[5], answer.data[6]]), 2, "both registrants");
    assert_eq!(answer.data[4], 1, "Write Exclusive");
    let mut get = sqe(AdminOpcode::GetFeatures as u8, 1, 0);
    get.dwords[10] = u32::from(feature_id::RESERVATION_PERSISTENCE);
    assert_eq!(b.admin.command(get, &[], &[]).cqe.result_dw0, 1);
    // PTPL off forgets the record: the next target starts clean.
    assert_eq!(set_persistence(&mut b.admin, false), Status::SUCCESS);
    assert!(store.is_empty());
    let target = test_target();
    target.set_reservation_store(store.clone());
    let mut b = host(&target, OTHER_HOST);
    assert_eq!(status_of(&mut b.io, IoOpcode::Write), Status::SUCCESS);
    // CPTPL 01b is reserved.
    assert_eq!(register(&mut b.io, 1 << 30, 0, 1), Status::INVALID_FIELD.with_do_not_retry());
}

/// A store that finishes saves only when told, like a slow disk.
#[derive(Default)]
struct ManualStore {
    pending: std::sync::Mutex<Vec<nvme_target::reservation_store::PersistTicket>>,
}

impl nvme_target::reservation_store::ReservationStore for ManualStore {
    fn load(&self, _nguid: &[u8; 16]) -> Result<Option<nvme_target::reservations::ReservationState>, String> {
        Ok(None)
    }
    fn save(
        &self,
        _key: nvme_target::reservation_store::NamespaceKey,
        _state: Option<nvme_target::reservations::ReservationState>,
        done: nvme_target::reservation_store::PersistTicket,
    ) {
        self.pending.lock().unwrap().push(done);
    }
}

#[test]
fn a_reservation_command_completes_only_once_its_state_is_durable() {
    let store = std::sync::Arc::new(ManualStore::default());
    let target = test_target();
    target.set_reservation_store(store.clone());
    let mut a = host(&target, HOST_NQN);
    let mut command = sqe(IoOpcode::ReservationRegister as u8, 1, 0);
    command.dwords[10] = 3 << 30;
    let id = a.io.send_command(command, &keys(0, 0xA1));
    a.io.connection.poll_storage(a.io.now);
    a.io.collect();
    assert!(a.io.received.is_empty(), "answered before the store finished");
    assert!(a.io.connection.has_pending_storage(), "without a waker the runtime keeps polling");
    // A failed save: the host hears Internal Error.
    let ticket = store.pending.lock().unwrap().pop().expect("one save");
    ticket.finish(Err("disk full".into()));
    a.io.connection.poll_storage(a.io.now);
    a.io.collect();
    assert_eq!(a.io.await_answer(id, &[]).cqe.status.kind(), Status::INTERNAL_ERROR);
}

//! Persistent reservations through the wire, between hosts with different Host
//! Identifiers: registration, acquire and the access rules on the I/O path,
//! preemption with its notification (AEN and log 80h), release, the report, the
//! Host Identifier and mask features, and the statuses bad requests get.

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
    let length = 4096u32;
    let mut command = sqe(IoOpcode::ReservationReport as u8, 1, length);
    command.dwords[10] = length / 4 - 1;
    command.dwords[11] = u32::from(extended);
    io.command(command, &[], &[])
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

    // The report: generation 2, type 1, both registrants with their controllers.
    let answer = report(&mut b.io, true);
    assert_status(&answer, Status::SUCCESS);
    let data = answer.data;
    assert_eq!(u32::from_le_bytes(data[0..4].try_into().unwrap()), 2);
    assert_eq!(data[4], 1);
    assert_eq!(u16::from_le_bytes([data[5], data[6]]), 2);
    let entry = |index: usize| &data[64 + index * 64..128 + index * 64];
    let holder = (0..2).find(|&index| entry(index)[2] == 1).expect("a holder entry");
    assert_eq!(u16::from_le_bytes([entry(holder)[0], entry(holder)[1]]), a.cntlid.0);
    assert_eq!(u64::from_le_bytes(entry(holder)[8..16].try_into().unwrap()), 0xA1);
    assert_eq!(entry(holder)[16..32], host_id_of(HOST_NQN));
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
    assert_eq!(register(&mut a.io, 3 << 30, 0, 1), Status::INVALID_FIELD.with_do_not_retry(), "PTPL needs a reservation store");
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

#[test]
fn identify_and_features_describe_the_reservation_support() {
    let target = test_target();
    let mut a = host(&target, HOST_NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] = a.admin.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    assert_ne!(IdentifyController::decode(&raw).optional_nvm_command_support & oncs::RESERVATIONS, 0);
    let raw: [u8; IDENTIFY_DATA_BYTES] = a.admin.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
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
    let target = test_target_with(nvme_target::TargetSettings { reservations: false, ..nvme_target::TargetSettings::default() });
    let mut a = host(&target, HOST_NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] = a.admin.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    assert_eq!(IdentifyController::decode(&raw).optional_nvm_command_support & oncs::RESERVATIONS, 0);
    let raw: [u8; IDENTIFY_DATA_BYTES] = a.admin.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
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
    let raw: [u8; IDENTIFY_DATA_BYTES] = a.admin.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
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

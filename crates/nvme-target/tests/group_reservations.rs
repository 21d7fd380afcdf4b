//! Reservations of a gateway group: two targets (two gateways) export the same
//! namespaces and keep their reservations in one authority (here an in-memory one
//! that plays the cluster: it applies each change atomically, then publishes the
//! new state to every gateway it can reach). A host's reservation taken through one
//! gateway is enforced on the other, preemption through the other reaches the first
//! host's controller as a notice, a gateway that missed updates delivers the skipped
//! notices when it catches up, and a gateway whose copy is unknown answers with a
//! path error rather than from stale state, as does one whose copy is no longer
//! vouched for (for Conflict and Report). A Preempt and Abort through one gateway
//! is answered only once the preempted host's writes at the other have landed.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use nvme_spec::identify::cns;
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{IdentifyNamespace, QueueId, Status};
use nvme_target::group_reservations::{
    AppliedChange, ChangeTicket, CopyVouch, GroupReservations, GroupUpdate, ReservationChange, MAX_KEPT_NOTICES,
};
use nvme_target::reservation_store::NamespaceKey;
use nvme_target::write_fence::WriteFence;
use nvme_target::{Target, TargetSettings};
use nvme_tcp_wire::DigestSettings;
use support::*;

const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";

/// The cluster: one record per NGUID, the gateways it publishes to, and the
/// gateways cut off from its notices.
#[derive(Default)]
struct MemoryGroup {
    records: Mutex<HashMap<[u8; 16], GroupUpdate>>,
    gateways: Mutex<Vec<Weak<Target>>>,
    cut_off: Mutex<Vec<usize>>,
    /// Finish tickets from another thread, as a real cluster does.
    answer_later: bool,
    /// The bound of the gateways' copies, when the test sets one.
    vouch: Option<Arc<CopyVouch>>,
}

impl MemoryGroup {
    /// Installs `update` on every gateway it reaches; returns their fences (a
    /// gateway "acknowledges" once its fence drained, as the watch does).
    fn publish(&self, nguid: &[u8; 16], update: &GroupUpdate) -> Vec<WriteFence> {
        let cut_off = self.cut_off.lock().unwrap().clone();
        let mut fences = Vec::new();
        for (index, gateway) in self.gateways.lock().unwrap().iter().enumerate() {
            if let (false, Some(target)) = (cut_off.contains(&index), gateway.upgrade()) {
                fences.push(target.install_group_reservations(nguid, update));
            }
        }
        fences
    }

    fn latest(&self, nguid: &[u8; 16]) -> GroupUpdate {
        self.records.lock().unwrap().get(nguid).cloned().unwrap_or_default()
    }
}

impl GroupReservations for MemoryGroup {
    fn copy_vouch(&self) -> Option<Arc<CopyVouch>> {
        self.vouch.clone()
    }

    fn track(&self, key: NamespaceKey) {
        let update = self.latest(&key.nguid);
        for gateway in self.gateways.lock().unwrap().iter().filter_map(Weak::upgrade) {
            let _ = gateway.install_group_reservations(&key.nguid, &update);
        }
    }

    fn apply(&self, key: NamespaceKey, change: ReservationChange, done: ChangeTicket) {
        let mut records = self.records.lock().unwrap();
        let record = records.entry(key.nguid).or_default();
        let mut state = record.state.clone();
        let status = match change.apply(&mut state) {
            Ok(effects) => {
                if state != record.state {
                    record.sequence += 1;
                    record.state = state;
                    let sequence = record.sequence;
                    record.notices.extend(effects.notices.iter().map(|(host, notice)| (sequence, *host, *notice)));
                    let excess = record.notices.len().saturating_sub(MAX_KEPT_NOTICES);
                    record.notices.drain(..excess);
                }
                Status::SUCCESS
            }
            Err(status) => status,
        };
        let update = record.clone();
        drop(records);
        let fences = self.publish(&key.nguid, &update);
        let answer = AppliedChange { status, update };
        if !fences.iter().all(WriteFence::is_drained) {
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !fences.iter().all(WriteFence::is_drained) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_micros(200));
                }
                done.finish(Ok(answer));
            });
        } else if self.answer_later {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                done.finish(Ok(answer));
            });
        } else {
            done.finish(Ok(answer));
        }
    }
}

/// Two gateways sharing `group`.
fn gateways(group: &Arc<MemoryGroup>) -> [Arc<Target>; 2] {
    join(group, [test_target(), test_target()])
}

/// `gateways` joined to `group`.
fn join(group: &Arc<MemoryGroup>, gateways: [Arc<Target>; 2]) -> [Arc<Target>; 2] {
    group.gateways.lock().unwrap().extend(gateways.iter().map(Arc::downgrade));
    for gateway in &gateways {
        gateway.set_group_reservations(Arc::clone(group) as Arc<dyn GroupReservations>);
    }
    gateways
}

struct Host {
    admin: FakeHost,
    io: FakeHost,
}

fn host(target: &Arc<Target>, host_nqn: &str) -> Host {
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin_as(NQN, host_nqn);
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    assert_status(&io.connect_as(QueueId(1), cntlid, NQN, 32, host_nqn), Status::SUCCESS);
    Host { admin, io }
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

fn report(io: &mut FakeHost) -> Answer {
    let mut command = sqe(IoOpcode::ReservationReport as u8, 1, 4096);
    command.dwords[10] = 4096 / 4 - 1;
    command.dwords[11] = 1;
    io.command(command, &[], &[])
}

fn write_status(io: &mut FakeHost) -> Status {
    io.command(read_write(IoOpcode::Write, 1, 0, 1), &pattern(512, 7), &[]).cqe.status.kind()
}

/// The first unread entry of log 80h on `admin`: (count, notice type).
fn reservation_log(admin: &mut FakeHost) -> (u64, u8) {
    let mut log = sqe(AdminOpcode::GetLogPage as u8, 0xFFFF_FFFF, 64);
    log.dwords[10] = 0x80 | ((64 / 4 - 1) << 16);
    let page = admin.command(log, &[], &[]).data;
    (u64::from_le_bytes(page[0..8].try_into().unwrap()), page[8])
}

fn one_system(answer_later: bool) {
    let group = Arc::new(MemoryGroup { answer_later, ..MemoryGroup::default() });
    let [a, b] = gateways(&group);
    let mut first = host(&a, HOST_NQN);
    let mut second = host(&b, OTHER_HOST);

    // Registered and holding Write Exclusive through gateway a...
    assert_eq!(register(&mut first.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(acquire(&mut first.io, 0, 1, 0xA1, 0), Status::SUCCESS);
    assert_eq!(write_status(&mut first.io), Status::SUCCESS);
    // ...is what gateway b enforces and reports.
    assert_eq!(write_status(&mut second.io), Status::RESERVATION_CONFLICT);
    let answer = report(&mut second.io);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.data[4], 1, "Write Exclusive held, seen through the other gateway");
    assert_eq!(answer.data[64 + 2], 1, "the registrant holds it");
    assert_eq!(answer.data[64 + 16..64 + 32], host_id_of(HOST_NQN));
    // The same refusals through either gateway.
    assert_eq!(acquire(&mut second.io, 0, 1, 0xB2, 0), Status::RESERVATION_CONFLICT, "unregistered");

    // Preempted through gateway b: the first host's controller on gateway a hears it.
    assert_eq!(register(&mut second.io, 0, 0, 0xB2), Status::SUCCESS);
    assert_eq!(acquire(&mut second.io, 1, 1, 0xB2, 0xA1), Status::SUCCESS);
    assert_eq!(write_status(&mut first.io), Status::RESERVATION_CONFLICT);
    assert_eq!(write_status(&mut second.io), Status::SUCCESS);
    assert_eq!(reservation_log(&mut first.admin), (1, 1), "registration preempted, on the other gateway");
}

#[test]
fn a_reservation_taken_through_one_gateway_holds_on_the_other() {
    one_system(false);
}

#[test]
fn commands_wait_for_a_group_that_answers_later() {
    one_system(true);
}

#[test]
fn a_gateway_that_missed_updates_answers_path_errors_then_catches_up_with_their_notices() {
    let group = Arc::new(MemoryGroup::default());
    let [a, b] = gateways(&group);
    let mut first = host(&a, HOST_NQN);
    let mut second = host(&b, OTHER_HOST);
    assert_eq!(register(&mut first.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(register(&mut second.io, 0, 0, 0xB2), Status::SUCCESS);
    assert_eq!(acquire(&mut first.io, 0, 1, 0xA1, 0), Status::SUCCESS);

    // Gateway a stops hearing the group; b preempts a's host twice over.
    group.cut_off.lock().unwrap().push(0);
    assert_eq!(acquire(&mut second.io, 1, 2, 0xB2, 0xA1), Status::SUCCESS);
    let nguid = a.subsystems()[0].namespace(nvme_spec::NamespaceId(1)).unwrap().nguid;
    // The authority notices (a lost watch): a's copy is unknown, so a does not
    // serve from it; the host's write gets a path error, not stale success.
    a.mark_group_reservations_unknown(&nguid);
    let answer = first.io.command(read_write(IoOpcode::Write, 1, 0, 1), &pattern(512, 7), &[]);
    assert_eq!(answer.cqe.status.kind(), Status::INTERNAL_PATH_ERROR);
    assert!(!answer.cqe.status.do_not_retry(), "path errors are retried on another path");
    assert_eq!(report(&mut first.io).cqe.status.kind(), Status::INTERNAL_PATH_ERROR);
    // Namespace 2's copy is still vouched for: it is served.
    let other = first.io.command(read_write(IoOpcode::Read, 2, 0, 1), &[], &[]);
    assert_status(&other, Status::SUCCESS);

    // Its own commands still go through the group, but their answers do not vouch
    // for the copy: it stays unknown until the group installs a state again.
    assert_eq!(register(&mut first.io, 2, 0xA1, 0xA1), Status::RESERVATION_CONFLICT, "A was preempted");
    assert_eq!(
        first.io.command(read_write(IoOpcode::Read, 1, 0, 1), &[], &[]).cqe.status.kind(),
        Status::INTERNAL_PATH_ERROR
    );

    // Caught up: the state and the skipped notice arrive together.
    group.cut_off.lock().unwrap().clear();
    let _ = a.install_group_reservations(&nguid, &group.latest(&nguid));
    assert_eq!(write_status(&mut first.io), Status::RESERVATION_CONFLICT);
    assert_eq!(reservation_log(&mut first.admin), (1, 1), "the notice of the missed preemption");
    // An older update arriving late changes nothing.
    let mut stale = group.latest(&nguid);
    stale.sequence -= 1;
    stale.state.holder = None;
    let _ = a.install_group_reservations(&nguid, &stale);
    assert_eq!(write_status(&mut first.io), Status::RESERVATION_CONFLICT);
}

/// Reservation Report is the group's record, nothing of the gateway that answers:
/// each registrant once with CNTLID FFFFh, whether its controllers are on this
/// gateway, on the other or on both, so the report is byte for byte the same through
/// every gateway. IEKEY in Acquire and Release is refused on a group as on a single
/// target, before the group is asked.
#[test]
fn the_report_is_the_same_through_every_gateway_and_iekey_is_refused() {
    let group = Arc::new(MemoryGroup::default());
    let [a, b] = gateways(&group);
    let mut first = host(&a, HOST_NQN);
    let mut second = host(&b, OTHER_HOST);
    let mut first_on_b = host(&b, HOST_NQN);
    assert_eq!(register(&mut first.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(register(&mut second.io, 0, 0, 0xB2), Status::SUCCESS);
    assert_eq!(acquire(&mut first.io, 0, 1, 0xA1, 0), Status::SUCCESS);

    let reports = [report(&mut first.io), report(&mut second.io), report(&mut first_on_b.io)];
    for answer in &reports {
        assert_status(answer, Status::SUCCESS);
    }
    let data = &reports[0].data;
    assert_eq!(u16::from_le_bytes([data[5], data[6]]), 2, "two registrants, each once");
    for (index, (host, holds)) in [(HOST_NQN, 1), (OTHER_HOST, 0)].into_iter().enumerate() {
        let entry = &data[64 + index * 64..128 + index * 64];
        assert_eq!(entry[0..2], [0xFF, 0xFF], "CNTLID FFFFh");
        assert_eq!(entry[2], holds);
        assert_eq!(entry[16..32], host_id_of(host));
    }
    assert_eq!(reports[1].data, *data, "the same report through the other gateway");
    assert_eq!(reports[2].data, *data, "the same report to the holder's controller on the other gateway");

    let nguid = a.subsystems()[0].namespace(nvme_spec::NamespaceId(1)).unwrap().nguid;
    let sequence = group.latest(&nguid).sequence;
    let refused = Status::INVALID_FIELD.with_do_not_retry();
    assert_eq!(acquire(&mut second.io, 2 | (1 << 3), 1, 0xB2, 0xA1), refused, "Preempt and Abort with IEKEY");
    let mut release = sqe(IoOpcode::ReservationRelease as u8, 1, 0);
    release.dwords[10] = 1 | (1 << 3);
    assert_eq!(first.io.command(release, &0xA1u64.to_le_bytes(), &[]).cqe.status, refused, "Clear with IEKEY");
    assert_eq!(group.latest(&nguid).sequence, sequence, "the group was not asked");
    assert_eq!(write_status(&mut second.io), Status::RESERVATION_CONFLICT, "the first host still holds it");
}

#[test]
fn gateway_groups_offer_persist_through_power_loss() {
    let group = Arc::new(MemoryGroup::default());
    let [a, _b] = gateways(&group);
    let mut first = host(&a, HOST_NQN);
    let answer = first.admin.command(identify(cns::NAMESPACE, 1), &[], &[]);
    let namespace = IdentifyNamespace::decode(answer.data[..4096].try_into().unwrap());
    assert_eq!(namespace.reservation_capabilities & 1, 1, "RESCAP bit 0: PTPL");
    // CPTPL 11b is accepted and reported.
    assert_eq!(register(&mut first.io, 3 << 30, 0, 0xA1), Status::SUCCESS);
    let answer = report(&mut first.io);
    assert_eq!(answer.data[9], 1, "PTPLS");
}

#[test]
fn preempt_and_abort_through_one_gateway_waits_for_the_preempted_hosts_writes_on_the_other() {
    let group = Arc::new(MemoryGroup::default());
    let (gated, gate, ram) = support::gated::gated_target(TargetSettings::default());
    gate.lock().unwrap().open = true;
    let [a, b] = join(&group, [gated, test_target()]);
    let mut first = host(&a, HOST_NQN);
    let mut second = host(&b, OTHER_HOST);
    assert_eq!(register(&mut first.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(register(&mut second.io, 0, 0, 0xB2), Status::SUCCESS);
    assert_eq!(acquire(&mut first.io, 0, 1, 0xA1, 0), Status::SUCCESS);

    // The first host's write waits at gateway a's storage...
    gate.lock().unwrap().open = false;
    let data = pattern(512, 11);
    let write = first.io.send_command(read_write(IoOpcode::Write, 1, 0, 1), &data);
    first.io.connection.poll_storage(first.io.now);
    first.io.collect();
    assert!(first.io.received.is_empty());
    // ...so the second host's Preempt and Abort through gateway b is not answered.
    let mut command = sqe(IoOpcode::ReservationAcquire as u8, 1, 0);
    command.dwords[10] = 2 | (1 << 8);
    let preempt = second.io.send_command(command, &keys(0xB2, 0xA1));
    for _ in 0..50 {
        second.io.connection.poll_storage(second.io.now);
        second.io.collect();
        assert!(
            second.io.received.is_empty(),
            "answered while the preempted host's write can still land through the other gateway"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Gateway a already enforces the new state for anything new.
    assert_eq!(
        first.io.command(read_write(IoOpcode::Write, 1, 1, 1), &pattern(512, 3), &[]).cqe.status.kind(),
        Status::RESERVATION_CONFLICT
    );

    gate.lock().unwrap().open = true;
    assert_status(&first.io.await_answer(write, &[]), Status::SUCCESS);
    assert_eq!(support::gated::block_zero(&ram), data, "the write landed first");
    assert_status(&second.io.await_answer(preempt, &[]), Status::SUCCESS);
}

/// A namespace added while the gateways run (the group's configuration reaching
/// them, or `ns_add`) is followed once it is in the table: an authority that installs
/// the state at once, on any thread (this one installs it inside `track`), must find
/// it there. Before, it was followed before the table swap, so the install found no
/// such namespace and every command to it got a path error on that gateway for good
/// (a Linux host with only that path hung in blkid).
#[test]
fn a_namespace_added_while_running_is_served_once_its_state_arrives() {
    let group = Arc::new(MemoryGroup::default());
    let [a, b] = gateways(&group);
    let mut first = host(&a, HOST_NQN);
    let mut second = host(&b, OTHER_HOST);
    for gateway in [&a, &b] {
        gateway.subsystems()[0].add_namespace(ram_namespace(9, 64)).unwrap();
    }
    for io in [&mut first.io, &mut second.io] {
        let read = io.command(read_write(IoOpcode::Read, 9, 0, 1), &[], &[]);
        assert_status(&read, Status::SUCCESS);
        assert_eq!(write_status_of(io, 9), Status::SUCCESS);
    }
}

fn write_status_of(io: &mut FakeHost, nsid: u32) -> Status {
    io.command(read_write(IoOpcode::Write, nsid, 0, 1), &pattern(512, 9), &[]).cqe.status.kind()
}

/// A copy no longer vouched for does not answer from itself: a refusal it would give
/// and a report are path errors (the host asks another gateway); what it allows
/// still runs (storage refuses a fenced gateway). Vouched for again, it answers.
#[test]
fn a_copy_past_its_vouch_answers_path_errors_instead_of_conflict_or_report() {
    let vouch = Arc::new(CopyVouch::default());
    let group = Arc::new(MemoryGroup { vouch: Some(Arc::clone(&vouch)), ..MemoryGroup::default() });
    let [a, b] = gateways(&group);
    let mut first = host(&a, HOST_NQN);
    let mut second = host(&b, OTHER_HOST);
    let start = second.io.now;
    assert_eq!(write_status(&mut second.io), Status::SUCCESS, "no reservation held: the copy refuses nothing");
    assert_eq!(report(&mut second.io).cqe.status.kind(), Status::INTERNAL_PATH_ERROR, "never vouched for yet");
    vouch.extend_to(start + Duration::from_secs(10));
    first.io.now = start;
    assert_eq!(register(&mut first.io, 0, 0, 0xA1), Status::SUCCESS);
    assert_eq!(acquire(&mut first.io, 0, 1, 0xA1, 0), Status::SUCCESS);
    assert_eq!(write_status(&mut second.io), Status::RESERVATION_CONFLICT, "vouched for: the copy refuses");
    assert_status(&report(&mut second.io), Status::SUCCESS);

    second.io.now = start + Duration::from_secs(11);
    first.io.now = start + Duration::from_secs(11);
    assert_eq!(write_status(&mut second.io), Status::INTERNAL_PATH_ERROR, "past the vouch: no Conflict from the copy");
    assert_eq!(report(&mut second.io).cqe.status.kind(), Status::INTERNAL_PATH_ERROR, "past the vouch: no report");
    assert_eq!(write_status(&mut first.io), Status::SUCCESS, "what the copy allows still runs");

    vouch.extend_to(start + Duration::from_secs(20));
    vouch.extend_to(start + Duration::from_secs(12));
    assert_eq!(write_status(&mut second.io), Status::RESERVATION_CONFLICT, "vouched for again (never moved back)");
    assert_status(&report(&mut second.io), Status::SUCCESS);
}

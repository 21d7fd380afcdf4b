//! Namespace Management and Attachment on a pool-backed subsystem, driven by a
//! scripted host: create, attach, the namespace attribute notice and the Changed
//! Namespace List, I/O, detach, delete, restart, refusals, and hosts kept apart.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_spec::admin::{namespace_attachment_select, namespace_management_select};
use nvme_spec::features::feature_id;
use nvme_spec::identify::{cns, decode_controller_list, decode_namespace_list, oacs, IDENTIFY_DATA_BYTES};
use nvme_spec::log_page::log_id;
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{ControllerId, IdentifyController, IdentifyNamespace, NamespaceId, QueueId, Status};
use nvme_target::{ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use storage::{Backend, Geometry, Pool, RamBackend, TableStore};
use support::*;

const POOL_NQN: &str = "nqn.2026-11.io.sluice:pool";
const OTHER_HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000bb";
/// Pool of 64 MiB in 1 MiB units.
const POOL_BYTES: u64 = 64 << 20;
/// Namespace Attribute Changed notice for log 04h.
const NAMESPACE_NOTICE_DW0: u32 = 0x0004_0002;

struct PoolSetup {
    backend: Arc<dyn Backend>,
    table: TableStore,
}

impl PoolSetup {
    fn new() -> Self {
        PoolSetup {
            backend: RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: POOL_BYTES / 512 }),
            table: TableStore::memory(),
        }
    }

    /// A target whose pool subsystem also has one config namespace (NSID 1) and whose
    /// second subsystem has no pool.
    fn target(&self) -> (Arc<Target>, Arc<Pool>) {
        let pool = Arc::new(Pool::open(Arc::clone(&self.backend), self.table.clone()).unwrap());
        let ram = || RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: 2048 });
        let target = Target::new(TargetSpec {
            listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
            subsystems: vec![
                SubsystemSpec {
                    hosts: nvme_target::HostAccess::allow_any(),
                    pool: Some(Arc::clone(&pool)),
                    nqn: POOL_NQN.into(),
                    serial_number: None,
                    model_number: None,
                    namespaces: vec![NamespaceSpec {
                        id: NamespaceId(1),
                        backend: ram(),
                        nguid: None,
                        uuid: None,
                        ana_group: None,
                    }],
                },
                SubsystemSpec {
                    hosts: nvme_target::HostAccess::allow_any(),
                    pool: None,
                    nqn: NQN.into(),
                    serial_number: None,
                    model_number: None,
                    namespaces: vec![NamespaceSpec {
                        id: NamespaceId(1),
                        backend: ram(),
                        nguid: None,
                        uuid: None,
                        ana_group: None,
                    }],
                },
            ],
            settings: TargetSettings::default(),
        })
        .unwrap();
        (target, pool)
    }
}

/// An admin queue of `host_nqn` on the pool subsystem with namespace notices enabled
/// and one Asynchronous Event Request held.
fn admin(target: &Arc<Target>, host_nqn: &str) -> (FakeHost, ControllerId, nvme_spec::CommandId) {
    let mut host = FakeHost::new(Arc::clone(target), 0);
    let controller = host.bring_up_admin_as(POOL_NQN, host_nqn);
    let mut set = sqe(AdminOpcode::SetFeatures as u8, 0, 0);
    set.dwords[10] = u32::from(feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION);
    set.dwords[11] = 1 << 8;
    assert_status(&host.command(set, &[], &[]), Status::SUCCESS);
    let event = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    assert!(host.received.is_empty(), "the request is held");
    (host, controller, event)
}

fn create(host: &mut FakeHost, size_blocks: u64, capacity_blocks: u64, flbas: u8) -> Answer {
    let mut data = [0u8; IDENTIFY_DATA_BYTES];
    data[0..8].copy_from_slice(&size_blocks.to_le_bytes());
    data[8..16].copy_from_slice(&capacity_blocks.to_le_bytes());
    data[26] = flbas;
    let mut command = sqe(AdminOpcode::NamespaceManagement as u8, 0, 0);
    command.dwords[10] = u32::from(namespace_management_select::CREATE);
    host.command(command, &data, &[])
}

fn delete(host: &mut FakeHost, nsid: u32) -> Answer {
    let mut command = sqe(AdminOpcode::NamespaceManagement as u8, nsid, 0);
    command.dwords[10] = u32::from(namespace_management_select::DELETE);
    host.command(command, &[], &[])
}

fn attachment(host: &mut FakeHost, nsid: u32, controllers: &[u16], attach: bool) -> Answer {
    let mut data = vec![0u8; 4096];
    data[0..2].copy_from_slice(&(controllers.len() as u16).to_le_bytes());
    for (index, id) in controllers.iter().enumerate() {
        data[2 + index * 2..4 + index * 2].copy_from_slice(&id.to_le_bytes());
    }
    let select = if attach { namespace_attachment_select::ATTACH } else { namespace_attachment_select::DETACH };
    let mut command = sqe(AdminOpcode::NamespaceAttachment as u8, nsid, 0);
    command.dwords[10] = u32::from(select);
    host.command(command, &data, &[])
}

fn identify_data(host: &mut FakeHost, cns_value: u8, nsid: u32) -> [u8; IDENTIFY_DATA_BYTES] {
    let answer = host.command(identify(cns_value, nsid), &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    answer.data.try_into().expect("4 KiB identify data")
}

fn namespace_list(host: &mut FakeHost, cns_value: u8) -> Vec<u32> {
    decode_namespace_list(&identify_data(host, cns_value, 0)).map(|id| id.0).collect()
}

fn changed_namespace_log(host: &mut FakeHost) -> Vec<u32> {
    let mut command = sqe(AdminOpcode::GetLogPage as u8, 0xFFFF_FFFF, 4096);
    command.dwords[10] = u32::from(log_id::CHANGED_NAMESPACE_LIST) | (1023 << 16);
    let answer = host.command(command, &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    answer
        .data
        .chunks_exact(4)
        .map(|raw| u32::from_le_bytes(raw.try_into().unwrap()))
        .take_while(|&id| id != 0)
        .collect()
}

/// Lets time pass until the held event request completes; returns its DW0.
fn await_event(host: &mut FakeHost, event: nvme_spec::CommandId) -> u32 {
    for _ in 0..10 {
        host.advance(Duration::from_millis(250));
        if !host.received.is_empty() {
            let answer = host.await_answer(event, &[]);
            assert_status(&answer, Status::SUCCESS);
            return answer.cqe.result_dw0;
        }
    }
    panic!("no asynchronous event within 2.5 s");
}

fn io_queue(target: &Arc<Target>, controller: ControllerId, host_nqn: &str) -> FakeHost {
    let mut host = FakeHost::new(Arc::clone(target), 0);
    host.initialize(nvme_tcp_wire::DigestSettings { header: false, data: false });
    let answer = host.connect_as(QueueId(1), controller, POOL_NQN, 32, host_nqn);
    assert_status(&answer, Status::SUCCESS);
    host
}

#[test]
fn create_attach_notice_io_detach_delete() {
    let setup = PoolSetup::new();
    let (target, pool) = setup.target();
    let (mut host, controller, event) = admin(&target, HOST_NQN);

    let id = IdentifyController::decode(&identify_data(&mut host, cns::CONTROLLER, 0));
    assert_ne!(id.optional_admin_command_support & oacs::NAMESPACE_MANAGEMENT, 0, "OACS bit 3");
    assert_eq!(id.total_nvm_capacity, u128::from(POOL_BYTES));
    assert_eq!(id.unallocated_nvm_capacity, u128::from(POOL_BYTES));

    // 8 MiB thick namespace: created, allocated, not active until attached.
    let answer = create(&mut host, 16384, 16384, 0);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.cqe.result_dw0, 2, "lowest free NSID after the config's 1");
    assert_eq!(namespace_list(&mut host, cns::ACTIVE_NAMESPACE_LIST), [1]);
    assert_eq!(namespace_list(&mut host, cns::ALLOCATED_NAMESPACE_LIST), [1, 2]);
    assert!(identify_data(&mut host, cns::NAMESPACE, 2).iter().all(|&byte| byte == 0), "inactive reads as zeroes");
    let allocated = IdentifyNamespace::decode(&identify_data(&mut host, cns::ALLOCATED_NAMESPACE, 2));
    assert_eq!(allocated.namespace_size, 16384);
    let id = IdentifyController::decode(&identify_data(&mut host, cns::CONTROLLER, 0));
    assert_eq!(id.unallocated_nvm_capacity, u128::from(POOL_BYTES - (8 << 20)));
    assert!(host.received.is_empty(), "creating an unattached namespace raises no notice");

    assert_status(&attachment(&mut host, 2, &[controller.0], true), Status::SUCCESS);
    assert_eq!(await_event(&mut host, event), NAMESPACE_NOTICE_DW0);
    assert_eq!(changed_namespace_log(&mut host), [2]);
    assert!(changed_namespace_log(&mut host).is_empty(), "reading with RAE clear empties the log");
    assert_eq!(namespace_list(&mut host, cns::ACTIVE_NAMESPACE_LIST), [1, 2]);
    let attached = identify_data(&mut host, cns::NAMESPACE_ATTACHED_CONTROLLER_LIST, 2);
    assert_eq!(decode_controller_list(&attached).collect::<Vec<_>>(), [controller]);

    // I/O to the new namespace, then detach: the same queue is refused.
    let mut io = io_queue(&target, controller, HOST_NQN);
    let data = pattern(4096, 9);
    assert_status(&io.command(read_write(IoOpcode::Write, 2, 100, 8), &data, &[]), Status::SUCCESS);
    let answer = io.command(read_write(IoOpcode::Read, 2, 100, 8), &[], &[]);
    assert_eq!(answer.data, data);

    let event = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    assert_status(&attachment(&mut host, 2, &[controller.0], false), Status::SUCCESS);
    assert_eq!(await_event(&mut host, event), NAMESPACE_NOTICE_DW0);
    assert_eq!(changed_namespace_log(&mut host), [2]);
    let answer = io.command(read_write(IoOpcode::Read, 2, 100, 8), &[], &[]);
    assert_status(&answer, Status::INVALID_NAMESPACE_OR_FORMAT);

    // Delete: the space comes back once no queue holds the namespace.
    assert_status(&delete(&mut host, 2), Status::SUCCESS);
    assert_eq!(namespace_list(&mut host, cns::ALLOCATED_NAMESPACE_LIST), [1]);
    drop(io);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.free_bytes() != POOL_BYTES {
        assert!(Instant::now() < deadline, "deleted namespace's space never returned");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn refusals_carry_the_spec_status() {
    let setup = PoolSetup::new();
    let (target, _pool) = setup.target();
    let (mut host, controller, _event) = admin(&target, HOST_NQN);

    assert_status(
        &create(&mut host, POOL_BYTES / 512 + 1, POOL_BYTES / 512 + 1, 0),
        Status::NAMESPACE_INSUFFICIENT_CAPACITY,
    );
    assert_status(&create(&mut host, 2048, 2048, 1), Status::INVALID_FORMAT);
    assert_status(&create(&mut host, 2048, 4096, 0), Status::INVALID_FIELD);
    assert_status(&create(&mut host, 0, 0, 0), Status::INVALID_FIELD);
    let answer = create(&mut host, 2048, 2048, 0);
    assert_status(&answer, Status::SUCCESS);
    let nsid = answer.cqe.result_dw0;

    assert_status(&attachment(&mut host, nsid, &[controller.0 + 100], true), Status::CONTROLLER_LIST_INVALID);
    assert_status(&attachment(&mut host, nsid, &[], true), Status::CONTROLLER_LIST_INVALID);
    assert_status(&attachment(&mut host, nsid, &[controller.0], false), Status::NAMESPACE_NOT_ATTACHED);
    assert_status(&attachment(&mut host, nsid, &[controller.0], true), Status::SUCCESS);
    assert_status(&attachment(&mut host, nsid, &[controller.0], true), Status::NAMESPACE_ALREADY_ATTACHED);
    assert_status(&attachment(&mut host, 77, &[controller.0], true), Status::INVALID_NAMESPACE_OR_FORMAT);
    assert_status(&attachment(&mut host, 1, &[controller.0], true), Status::NAMESPACE_ALREADY_ATTACHED);
    assert_status(&delete(&mut host, 1), Status::INVALID_FIELD);
    assert_status(&delete(&mut host, 77), Status::INVALID_NAMESPACE_OR_FORMAT);

    // A subsystem without a pool offers neither command.
    let mut plain = FakeHost::new(Arc::clone(&target), 0);
    let plain_controller = plain.bring_up_admin(NQN);
    assert_status(&create(&mut plain, 2048, 2048, 0), Status::INVALID_OPCODE);
    assert_status(&attachment(&mut plain, 1, &[plain_controller.0], true), Status::INVALID_OPCODE);
    let id = IdentifyController::decode(&identify_data(&mut plain, cns::CONTROLLER, 0));
    assert_eq!(id.optional_admin_command_support & oacs::NAMESPACE_MANAGEMENT, 0);
}

#[test]
fn hosts_see_only_what_is_attached_to_them() {
    let setup = PoolSetup::new();
    let (target, _pool) = setup.target();
    let (mut host_a, controller_a, event_a) = admin(&target, HOST_NQN);
    let (mut host_b, controller_b, _event_b) = admin(&target, OTHER_HOST_NQN);

    let nsid = create(&mut host_a, 2048, 2048, 0).cqe.result_dw0;
    // Host A attaches the namespace to host B's controller: B is told, A is not.
    assert_status(&attachment(&mut host_a, nsid, &[controller_b.0], true), Status::SUCCESS);
    host_a.advance(Duration::from_secs(1));
    assert!(host_a.received.is_empty(), "host A's request stays held");
    assert_eq!(namespace_list(&mut host_b, cns::ACTIVE_NAMESPACE_LIST), [1, nsid]);
    assert_eq!(namespace_list(&mut host_a, cns::ACTIVE_NAMESPACE_LIST), [1]);
    let mut io_a = io_queue(&target, controller_a, HOST_NQN);
    assert_status(&io_a.command(read_write(IoOpcode::Read, nsid, 0, 1), &[], &[]), Status::INVALID_NAMESPACE_OR_FORMAT);
    let mut io_b = io_queue(&target, controller_b, OTHER_HOST_NQN);
    assert_status(&io_b.command(read_write(IoOpcode::Read, nsid, 0, 1), &[], &[]), Status::SUCCESS);
    let all = identify_data(&mut host_a, cns::CONTROLLER_LIST, 0);
    assert_eq!(decode_controller_list(&all).count(), 2);
    let _ = event_a;
}

#[test]
fn namespaces_and_attachments_survive_a_restart() {
    let setup = PoolSetup::new();
    let (nguid, nsids) = {
        let (target, _pool) = setup.target();
        let (mut host, controller, _event) = admin(&target, HOST_NQN);
        // The field report's layout scaled down: 3 cache-sized and 21 capacity-sized.
        let mut nsids = Vec::new();
        for index in 0..24u64 {
            let blocks = if index < 3 { 4096 } else { 2048 };
            let answer = create(&mut host, blocks, blocks, 0);
            assert_status(&answer, Status::SUCCESS);
            nsids.push(answer.cqe.result_dw0);
            assert_status(&attachment(&mut host, answer.cqe.result_dw0, &[controller.0], true), Status::SUCCESS);
        }
        assert_eq!(nsids, (2..=25).collect::<Vec<u32>>());
        let nguid = IdentifyNamespace::decode(&identify_data(&mut host, cns::NAMESPACE, 5))
            .namespace_globally_unique_identifier;
        (nguid, nsids)
    };
    let (target, _pool) = setup.target();
    let (mut host, _controller, _event) = admin(&target, HOST_NQN);
    let mut expected = vec![1];
    expected.extend(&nsids);
    assert_eq!(namespace_list(&mut host, cns::ACTIVE_NAMESPACE_LIST), expected);
    let restored = IdentifyNamespace::decode(&identify_data(&mut host, cns::NAMESPACE, 5));
    assert_eq!(restored.namespace_globally_unique_identifier, nguid);
    assert_eq!(restored.namespace_size, 2048);
    let (mut other, _, _) = admin(&target, OTHER_HOST_NQN);
    assert_eq!(namespace_list(&mut other, cns::ACTIVE_NAMESPACE_LIST), [1], "attachments are per host");
}

#[test]
fn space_of_a_namespace_deleted_just_before_a_stop_is_freed_at_the_next_start() {
    let setup = PoolSetup::new();
    {
        let (target, pool) = setup.target();
        let subsystem = target.subsystem_by_nqn(POOL_NQN).unwrap();
        let id = subsystem.create_namespace(16384, false, None).unwrap();
        // A view holds the namespace, so the background release cannot run before
        // the "stop" below: the carve stays allocated but unbound in the table.
        let held = subsystem.namespace(id).unwrap();
        subsystem.delete_namespace(id).unwrap();
        assert_eq!(pool.free_bytes(), POOL_BYTES - (8 << 20));
        std::mem::forget(held);
    }
    let (_target, pool) = setup.target();
    assert_eq!(pool.free_bytes(), POOL_BYTES, "the orphan carve is freed at start");
}

#[test]
fn thin_namespaces_report_what_they_use() {
    let setup = PoolSetup::new();
    let (target, _pool) = setup.target();
    let (mut host, controller, _event) = admin(&target, HOST_NQN);
    // NCAP below NSZE asks for thin provisioning.
    let nsid = create(&mut host, 32768, 2048, 0).cqe.result_dw0;
    assert_status(&attachment(&mut host, nsid, &[controller.0], true), Status::SUCCESS);
    let before = IdentifyNamespace::decode(&identify_data(&mut host, cns::NAMESPACE, nsid));
    assert_eq!(before.namespace_utilization, 0);
    assert_eq!(before.namespace_features & 1, 1, "NSFEAT thin provisioning");
    let mut io = io_queue(&target, controller, HOST_NQN);
    assert_status(&io.command(read_write(IoOpcode::Write, nsid, 0, 8), &pattern(4096, 1), &[]), Status::SUCCESS);
    let after = IdentifyNamespace::decode(&identify_data(&mut host, cns::NAMESPACE, nsid));
    assert_eq!(after.namespace_utilization, 2048, "one 1 MiB unit");

    // The namespace's own counters (what the metrics endpoint exports).
    assert_status(&io.command(read_write(IoOpcode::Read, nsid, 0, 8), &[], &[]), Status::SUCCESS);
    let namespace = target.subsystem_by_nqn(POOL_NQN).unwrap().namespace(NamespaceId(nsid)).unwrap();
    let counted = namespace.stats.snapshot();
    assert_eq!((counted.write_commands, counted.bytes_written), (1, 4096));
    assert_eq!((counted.read_commands, counted.bytes_read), (1, 4096));
    assert_eq!((counted.write_latency.count(), counted.read_latency.count()), (1, 1));
    assert_eq!(counted.live_queues, 1);
    let config_namespace = target.subsystem_by_nqn(POOL_NQN).unwrap().namespace(NamespaceId(1)).unwrap();
    assert_eq!(config_namespace.stats.snapshot().write_commands, 0, "counted per namespace");
}

#[test]
fn live_changes_through_the_management_interface() {
    let setup = PoolSetup::new();
    let (target, pool) = setup.target();
    let (mut host, _controller, event) = admin(&target, HOST_NQN);
    let subsystem = target.subsystem_by_nqn(POOL_NQN).unwrap();

    // A namespace over any backend, added live: every host hears of it.
    let backend = RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: 4096 });
    let change = subsystem
        .add_namespace(NamespaceSpec { id: NamespaceId(9), backend, nguid: None, uuid: None, ana_group: None })
        .unwrap();
    target.notify_namespace_change(&subsystem, &change);
    assert_eq!(await_event(&mut host, event), NAMESPACE_NOTICE_DW0);
    assert_eq!(changed_namespace_log(&mut host), [9]);
    assert_eq!(namespace_list(&mut host, cns::ACTIVE_NAMESPACE_LIST), [1, 9]);
    let duplicate = RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: 8 });
    let refused = subsystem.add_namespace(NamespaceSpec {
        id: NamespaceId(9),
        backend: duplicate,
        nguid: None,
        uuid: None,
        ana_group: None,
    });
    assert_eq!(refused.unwrap_err().status(), Status::NAMESPACE_IDENTIFIER_UNAVAILABLE.with_do_not_retry());
    // An ANA group out of range is refused, not quietly replaced by group 1.
    let grouped = RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: 8 });
    let refused = subsystem.add_namespace(NamespaceSpec {
        id: NamespaceId(10),
        backend: grouped,
        nguid: None,
        uuid: None,
        ana_group: Some(nvme_spec::ana::AnaGroupId(65)),
    });
    let error = refused.unwrap_err();
    assert_eq!(error.status(), Status::INVALID_FIELD.with_do_not_retry());
    assert!(error.to_string().contains("ANA group 65"), "{error}");

    // Removing a pool namespace deletes it and returns its space.
    let created = subsystem.create_namespace(2048, false, None).unwrap();
    assert!(pool.free_bytes() < POOL_BYTES);
    subsystem.remove_namespace(created).unwrap();
    subsystem.remove_namespace(NamespaceId(9)).unwrap();
    assert_eq!(namespace_list(&mut host, cns::ACTIVE_NAMESPACE_LIST), [1]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.free_bytes() != POOL_BYTES {
        assert!(Instant::now() < deadline, "removed namespace's space never returned");
        std::thread::sleep(Duration::from_millis(10));
    }

    // Subsystems come and go; a removed one's controllers are torn down.
    let generation = target.discovery_generation();
    let controller = target.controllers_of(subsystem.index);
    assert_eq!(controller.len(), 1);
    target.remove_subsystem(POOL_NQN).unwrap();
    assert!(controller[0].is_torn_down());
    assert!(target.subsystem_by_nqn(POOL_NQN).is_none());
    assert!(target.discovery_generation() > generation);
    assert!(target.remove_subsystem(POOL_NQN).is_err());
}

#[test]
fn a_namespace_grows_live_the_host_hears_of_it_and_uses_the_new_blocks() {
    let setup = PoolSetup::new();
    let (target, _pool) = setup.target();
    let (mut host, controller, event) = admin(&target, HOST_NQN);
    let subsystem = target.subsystem_by_nqn(POOL_NQN).unwrap();
    // A thin pool namespace (as `ns_add pool=...` makes), every host sees it.
    let created = subsystem.create_namespace(2048, true, None).unwrap();
    assert_status(&attachment(&mut host, created.0, &[controller.0], true), Status::SUCCESS);
    assert_eq!(await_event(&mut host, event), NAMESPACE_NOTICE_DW0);
    assert_eq!(changed_namespace_log(&mut host), [created.0]);
    let mut io = io_queue(&target, controller, HOST_NQN);
    let beyond = read_write(IoOpcode::Write, created.0, 2048, 8);
    assert_status(&io.command(beyond, &pattern(4096, 3), &[]), Status::LBA_OUT_OF_RANGE.with_do_not_retry());

    let event = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    let (before, after) = target.grow_namespace(&subsystem, created, 4096).unwrap();
    assert_eq!((before.block_count, after.block_count), (2048, 4096));
    assert_eq!(await_event(&mut host, event), NAMESPACE_NOTICE_DW0, "Namespace Attribute Changed");
    assert_eq!(changed_namespace_log(&mut host), [created.0]);
    let identified = IdentifyNamespace::decode(&identify_data(&mut host, cns::NAMESPACE, created.0));
    assert_eq!((identified.namespace_size, identified.namespace_capacity), (4096, 4096), "NSZE and NCAP");
    // The queue connected before the resize writes and reads the new blocks.
    assert_status(&io.command(beyond, &pattern(4096, 3), &[]), Status::SUCCESS);
    assert_eq!(io.command(read_write(IoOpcode::Read, created.0, 2048, 8), &[], &[]).data, pattern(4096, 3));
    assert_status(
        &io.command(read_write(IoOpcode::Read, created.0, 4095, 2), &[], &[]),
        Status::LBA_OUT_OF_RANGE.with_do_not_retry(),
    );

    // Shrinking and fixed-size storage are refused; nothing changes, no notice.
    let _held = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    let error = target.grow_namespace(&subsystem, created, 4000).unwrap_err();
    assert!(
        matches!(error, nvme_target::GrowNamespaceError::Storage(storage::GrowError::WouldShrink { .. })),
        "{error}"
    );
    let error = target.grow_namespace(&subsystem, NamespaceId(1), 4096).unwrap_err();
    assert!(
        matches!(error, nvme_target::GrowNamespaceError::Storage(storage::GrowError::NotResizable { kind: "ram" })),
        "{error}"
    );
    assert!(matches!(
        target.grow_namespace(&subsystem, NamespaceId(77), 1),
        Err(nvme_target::GrowNamespaceError::NoSuchNamespace)
    ));
    assert_eq!(
        target.grow_namespace(&subsystem, created, 4096).unwrap().1.block_count,
        4096,
        "the same size: a success"
    );
    host.advance(Duration::from_secs(1));
    assert!(host.received.is_empty(), "no notice for what did not change");
}

//! Many namespaces per subsystem and many controllers per subsystem.

mod support;

use std::collections::HashSet;

use nvme_spec::identify::{cns, decode_namespace_list, IDENTIFY_DATA_BYTES};
use nvme_spec::opcode::IoOpcode;
use nvme_spec::{ControllerId, NamespaceId, QueueId, Status};
use nvme_target::{ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use nvme_tcp_wire::DigestSettings;
use storage::{Geometry, RamBackend};
use support::*;

#[test]
fn a_subsystem_serves_1024_namespaces_each_with_its_own_data() {
    let count = 1024u32;
    let target = Target::new(TargetSpec {
        listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
        subsystems: vec![SubsystemSpec {
            hosts: nvme_target::HostAccess::allow_any(),
            pool: None,
            nqn: NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces: (1..=count)
                .map(|id| NamespaceSpec {
                    id: NamespaceId(id),
                    backend: RamBackend::new(Geometry { block_size_bytes: 512, block_count: 64 }),
                    nguid: None,
                    uuid: None,
                    ana_group: None,
                })
                .collect(),
        }],
        settings: TargetSettings::default(),
    })
    .unwrap();
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    // The host pages through the active list 1024 ids at a time.
    let first = admin.command(identify(cns::ACTIVE_NAMESPACE_LIST, 0), &[], &[]);
    let raw: [u8; IDENTIFY_DATA_BYTES] = first.data.try_into().unwrap();
    let ids: Vec<NamespaceId> = decode_namespace_list(&raw).collect();
    assert_eq!(ids.len(), 1024);
    assert_eq!(ids[1023], NamespaceId(1024));
    let next = admin.command(identify(cns::ACTIVE_NAMESPACE_LIST, 1024), &[], &[]);
    let raw: [u8; IDENTIFY_DATA_BYTES] = next.data.try_into().unwrap();
    assert_eq!(decode_namespace_list(&raw).count(), 0);

    let mut io = FakeHost::new(target, 0);
    io.initialize(DigestSettings { header: false, data: false });
    assert_status(&io.connect(QueueId(1), cntlid, NQN, 128), Status::SUCCESS);
    for nsid in [1, 512, 1024] {
        let data = pattern(4096, nsid as u8);
        assert_status(&io.command(read_write(IoOpcode::Write, nsid, 0, 8), &data, &[]), Status::SUCCESS);
    }
    for nsid in [1, 512, 1024] {
        let answer = io.command(read_write(IoOpcode::Read, nsid, 0, 8), &[], &[]);
        assert_eq!(answer.data, pattern(4096, nsid as u8), "namespace {nsid}");
    }
}

#[test]
fn several_hosts_get_distinct_controllers_and_ids_are_reused_after_release() {
    let target = test_target();
    let mut hosts: Vec<FakeHost> = (0..8).map(|_| FakeHost::new(target.clone(), 0)).collect();
    let ids: HashSet<ControllerId> = hosts.iter_mut().map(|host| host.bring_up_admin(NQN)).collect();
    assert_eq!(ids.len(), 8);
    // Each controller's I/O queue 1 is its own.
    for host in &hosts {
        let cntlid = host.connection.binding().unwrap().controller.id;
        let mut io = FakeHost::new(target.clone(), 0);
        io.initialize(DigestSettings { header: false, data: false });
        assert_status(&io.connect(QueueId(1), cntlid, NQN, 32), Status::SUCCESS);
    }
    for host in &mut hosts {
        host.connection.handle_closed();
    }
    drop(hosts);
    let mut again = FakeHost::new(target, 0);
    assert_ne!(again.bring_up_admin(NQN).0, 0);
}

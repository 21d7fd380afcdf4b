//! Asymmetric Namespace Access through the wire: Identify fields a Linux host checks
//! before it turns multipath on, the ANA log (0Ch) with and without RGO, the ANA
//! change notice, the path related status of I/O on an inaccessible or transitioning
//! group, controller id ranges and other gateways' paths in discovery.

mod support;

use nvme_spec::ana::{anacap, AnaGroupId, AnaLog, AnaState, LOG_SPECIFIC_RETURN_GROUPS_ONLY};
use nvme_spec::discovery::{DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_NQN};
use nvme_spec::features::feature_id;
use nvme_spec::identify::{cmic, cns, oaes, IDENTIFY_DATA_BYTES};
use nvme_spec::opcode::{AdminOpcode, IoOpcode};
use nvme_spec::{IdentifyController, IdentifyNamespace, NamespaceId, QueueId, Status};
use nvme_target::{ListenerSpec, PeerPath, TargetSettings};
use nvme_tcp_wire::DigestSettings;
use support::*;

/// A target reporting ANA, as a gateway does.
fn ana_target() -> std::sync::Arc<nvme_target::Target> {
    test_target_with(TargetSettings { ana_reporting: true, ..TargetSettings::default() })
}

fn ana_log(host: &mut FakeHost, groups_only: bool, retain: bool) -> Answer {
    let length = 4096u32;
    let mut command = sqe(AdminOpcode::GetLogPage as u8, 0xFFFF_FFFF, length);
    command.dwords[10] = 0x0C | ((length / 4 - 1) << 16);
    if groups_only {
        command.dwords[10] |= u32::from(LOG_SPECIFIC_RETURN_GROUPS_ONLY) << 8;
    }
    if retain {
        command.dwords[10] |= 1 << 15;
    }
    host.command(command, &[], &[])
}

#[test]
fn identify_advertises_ana_as_the_linux_host_requires() {
    let target = ana_target();
    let mut host = FakeHost::new(target, 0);
    host.bring_up_admin(NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] = host.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    let id = IdentifyController::decode(&raw);
    assert_eq!(id.multipath_capabilities, cmic::MULTIPLE_PORTS | cmic::MULTIPLE_CONTROLLERS | cmic::ANA_REPORTING);
    assert_ne!(id.optional_async_events_supported & oaes::ANA_CHANGE_NOTICES, 0);
    assert!(id.ana_transition_time > 0);
    for bit in
        [anacap::REPORTS_OPTIMIZED, anacap::REPORTS_NON_OPTIMIZED, anacap::REPORTS_INACCESSIBLE, anacap::REPORTS_CHANGE]
    {
        assert_ne!(id.ana_capabilities & bit, 0);
    }
    assert!(id.number_of_ana_group_identifiers >= 1);
    assert!(id.ana_group_identifier_maximum >= id.number_of_ana_group_identifiers);
    // Linux: MNAN must be non-zero and at most NN, and the whole log must fit MDTS.
    assert!(id.maximum_number_of_allowed_namespaces > 0);
    assert!(id.maximum_number_of_allowed_namespaces <= id.number_of_namespaces);
    let log_bytes =
        16 + id.number_of_ana_group_identifiers as usize * 32 + id.maximum_number_of_allowed_namespaces as usize * 4;
    assert!(log_bytes <= (4096 << id.maximum_data_transfer_size), "ANA log of {log_bytes} bytes exceeds MDTS");
    let raw: [u8; IDENTIFY_DATA_BYTES] = host.command(identify(cns::NAMESPACE, 1), &[], &[]).data.try_into().unwrap();
    assert_eq!(IdentifyNamespace::decode(&raw).ana_group_identifier, 1);
}

#[test]
fn the_log_lists_each_group_with_its_namespaces_and_follows_state_changes() {
    let target = ana_target();
    let mut host = FakeHost::new(target.clone(), 0);
    host.bring_up_admin(NQN);
    let answer = ana_log(&mut host, false, false);
    assert_status(&answer, Status::SUCCESS);
    let log = AnaLog::decode(&answer.data).unwrap();
    assert_eq!(log.groups.len(), 1);
    assert_eq!(log.groups[0].descriptor.group_id, AnaGroupId(1));
    assert_eq!(log.groups[0].descriptor.state, AnaState::Optimized, "no gateway: optimized");
    assert_eq!(log.groups[0].namespaces, [NamespaceId(1), NamespaceId(2)]);

    assert!(target.set_ana_state(AnaGroupId(1), AnaState::NonOptimized));
    let log = AnaLog::decode(&ana_log(&mut host, false, false).data).unwrap();
    assert_eq!(log.groups[0].descriptor.state, AnaState::NonOptimized);
    assert_eq!(log.change_count, 1);
    assert_eq!(log.groups[0].descriptor.change_count, 1);
    let groups_only = AnaLog::decode(&ana_log(&mut host, true, false).data).unwrap();
    assert_eq!(groups_only.groups[0].descriptor.namespace_count, 0);
    assert!(groups_only.groups[0].namespaces.is_empty());
}

#[test]
fn a_state_change_completes_a_held_event_request_with_the_ana_notice() {
    let target = ana_target();
    let mut host = FakeHost::new(target.clone(), 0);
    host.bring_up_admin(NQN);
    let mut set = sqe(AdminOpcode::SetFeatures as u8, 0, 0);
    set.dwords[10] = u32::from(feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION);
    set.dwords[11] = 1 << 11;
    assert_status(&host.command(set, &[], &[]), Status::SUCCESS);
    let event = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    host.collect();
    assert!(host.received.is_empty(), "held until something changes");
    target.set_ana_state(AnaGroupId(1), AnaState::Inaccessible);
    // The admin queue checks for due notices periodically.
    host.advance(std::time::Duration::from_millis(500));
    let answer = host.await_answer(event, &[]);
    assert_status(&answer, Status::SUCCESS);
    // Notice type 2, information 03h (ANA change), log page 0Ch.
    assert_eq!(answer.cqe.result_dw0, 0x000C_0302);
    // Masked until the log is read without RAE: a second change raises nothing yet.
    let second = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    target.set_ana_state(AnaGroupId(1), AnaState::NonOptimized);
    host.advance(std::time::Duration::from_millis(500));
    host.collect();
    assert!(host.received.is_empty(), "masked until log 0Ch is read");
    ana_log(&mut host, false, false);
    target.set_ana_state(AnaGroupId(1), AnaState::Optimized);
    host.advance(std::time::Duration::from_millis(500));
    assert_eq!(host.await_answer(second, &[]).cqe.result_dw0, 0x000C_0302);
}

#[test]
fn io_on_a_group_this_path_cannot_serve_gets_a_path_status_without_dnr() {
    let target = test_target();
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    assert_status(&io.connect(QueueId(1), cntlid, NQN, 32), Status::SUCCESS);
    let data = pattern(4096, 7);
    assert_status(&io.command(read_write(IoOpcode::Write, 1, 0, 8), &data, &[]), Status::SUCCESS);
    for (state, status) in [
        (AnaState::Inaccessible, Status::ASYMMETRIC_ACCESS_INACCESSIBLE),
        (AnaState::Change, Status::ASYMMETRIC_ACCESS_TRANSITION),
        (AnaState::PersistentLoss, Status::ASYMMETRIC_ACCESS_PERSISTENT_LOSS),
    ] {
        target.set_ana_state(AnaGroupId(1), state);
        // A broadcast Flush that can flush nothing here says why, too.
        let flush_all = sqe(IoOpcode::Flush as u8, 0xFFFF_FFFF, 0);
        for (command, payload) in [
            (read_write(IoOpcode::Read, 1, 0, 8), &[][..]),
            (read_write(IoOpcode::Write, 2, 0, 8), &data[..]),
            (flush_all, &[][..]),
        ] {
            let answer = io.command(command, payload, &[]);
            assert_status(&answer, status);
            assert!(!answer.cqe.status.do_not_retry(), "{state:?}: the host must retry on another path");
        }
        // Admin commands still work on this path.
        assert_status(&admin.command(identify(cns::NAMESPACE, 1), &[], &[]), Status::SUCCESS);
    }
    target.set_ana_state(AnaGroupId(1), AnaState::NonOptimized);
    let answer = io.command(read_write(IoOpcode::Read, 1, 0, 8), &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.data, data, "non-optimized paths serve I/O");
}

#[test]
fn controller_ids_stay_in_the_configured_range_and_peers_appear_in_discovery() {
    let settings = TargetSettings { controller_id_min: 4095, controller_id_max: 4096, ..TargetSettings::default() };
    let target = test_target_with(settings);
    let mut hosts = Vec::new();
    for expected in [4095, 4096] {
        let mut host = FakeHost::new(target.clone(), 0);
        assert_eq!(host.bring_up_admin(NQN).0, expected);
        hosts.push(host);
    }
    // The range is used up: Controller Busy (retried by hosts), never an id outside it.
    let mut third = FakeHost::new(target.clone(), 0);
    third.initialize(DigestSettings { header: false, data: false });
    assert_status(
        &third.connect(QueueId(0), nvme_spec::ControllerId::DYNAMIC, NQN, 32),
        Status::CONNECT_CONTROLLER_BUSY,
    );

    target.set_peer_paths(vec![PeerPath {
        subsystem_nqn: NQN.into(),
        listener: ListenerSpec::tcp("192.0.2.7", 4421),
        port_id: 0x1001,
    }]);
    let mut discovery = FakeHost::new(target, 1);
    discovery.bring_up_admin(DISCOVERY_NQN);
    let mut command = sqe(AdminOpcode::GetLogPage as u8, 0, 3072);
    command.dwords[10] = 0x70 | ((3072 / 4 - 1) << 16);
    let answer = discovery.command(command, &[], &[]);
    let header = DiscoveryLogHeader::decode(&answer.data[..1024].try_into().unwrap());
    assert_eq!(header.number_of_records, 2);
    let peer = DiscoveryLogEntry::decode(&answer.data[2048..3072].try_into().unwrap());
    assert_eq!(peer.transport_address_str(), Some("192.0.2.7"));
    assert_eq!(peer.transport_service_id_str(), Some("4421"));
    assert_eq!(peer.subsystem_nqn_str(), Some(NQN));
}

#[test]
fn a_single_target_does_not_report_ana() {
    let mut host = FakeHost::new(test_target(), 0);
    host.bring_up_admin(NQN);
    let raw: [u8; IDENTIFY_DATA_BYTES] = host.command(identify(cns::CONTROLLER, 0), &[], &[]).data.try_into().unwrap();
    let id = IdentifyController::decode(&raw);
    assert_eq!(id.multipath_capabilities, cmic::MULTIPLE_CONTROLLERS);
    assert_eq!(id.ana_capabilities, 0);
    assert_eq!(ana_log(&mut host, false, false).cqe.status.kind(), Status::INVALID_LOG_PAGE);
}

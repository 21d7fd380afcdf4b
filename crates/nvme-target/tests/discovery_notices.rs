//! Discovery Log Page Change notices, driven by a scripted host: a discovery
//! controller that enabled them (Set Features 0Bh bit 31) and holds an Asynchronous
//! Event Request hears about subsystems and listeners coming and going and about
//! host rules changing, once per read of log 70h, and only when its host's records
//! changed. I/O controllers never get the notice.

mod support;

use std::sync::Arc;
use std::time::Duration;

use nvme_spec::discovery::{DiscoveryLogHeader, DISCOVERY_NQN};
use nvme_spec::features::feature_id;
use nvme_spec::identify::{cns, oaes, IDENTIFY_DATA_BYTES};
use nvme_spec::log_page::log_id;
use nvme_spec::opcode::AdminOpcode;
use nvme_spec::{CommandId, IdentifyController, Status};
use nvme_target::{AddressFamily, HostAccess, ListenerSpec, SubsystemSpec, Target};
use nvme_tcp_wire::PduHeader;
use support::*;

/// Notice (2h), Discovery Log Page Change (F0h), log page 70h.
const DISCOVERY_NOTICE_DW0: u32 = 0x0070_F002;
/// Set Features 0Bh bit 31.
const DISCOVERY_CHANGE_ENABLED: u32 = 1 << 31;
const OTHER_HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000cc";

fn subsystem(nqn: &str, hosts: HostAccess) -> SubsystemSpec {
    SubsystemSpec {
        nqn: nqn.into(),
        serial_number: None,
        model_number: None,
        namespaces: Vec::new(),
        pool: None,
        hosts,
    }
}

fn listener(port: u16, discovery_only: bool) -> ListenerSpec {
    ListenerSpec {
        address: "127.0.0.1".into(),
        port,
        family: AddressFamily::Ipv4,
        discovery_only,
        secure_channel: Default::default(),
    }
}

fn set_async_event_configuration(host: &mut FakeHost, value: u32) {
    let mut set = sqe(AdminOpcode::SetFeatures as u8, 0, 0);
    set.dwords[10] = u32::from(feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION);
    set.dwords[11] = value;
    assert_status(&host.command(set, &[], &[]), Status::SUCCESS);
}

fn async_event_configuration(host: &mut FakeHost) -> u32 {
    let mut get = sqe(AdminOpcode::GetFeatures as u8, 0, 0);
    get.dwords[10] = u32::from(feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION);
    let answer = host.command(get, &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    answer.cqe.result_dw0
}

/// A discovery controller of `host_nqn` with Set Features 0Bh = `configuration`.
fn discovery_admin(target: &Arc<Target>, host_nqn: &str, configuration: u32) -> FakeHost {
    let mut host = FakeHost::new(Arc::clone(target), 1);
    host.bring_up_admin_as(DISCOVERY_NQN, host_nqn);
    set_async_event_configuration(&mut host, configuration);
    host
}

/// Sends an Asynchronous Event Request; it must be held.
fn hold_event_request(host: &mut FakeHost) -> CommandId {
    let event = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    assert!(host.received.is_empty(), "the request is held");
    event
}

/// Every response received so far: (command, status, DW0).
fn responses(host: &mut FakeHost) -> Vec<(CommandId, Status, u32)> {
    host.received
        .drain(..)
        .map(|pdu| match pdu.header {
            PduHeader::CapsuleResp(response) => (response.cqe.command_id, response.cqe.status, response.cqe.result_dw0),
            other => panic!("unexpected PDU {other:?}"),
        })
        .collect()
}

/// Sends a Keep Alive (as a host does every KATO/2 or so) and returns the other
/// responses it brought along: the completed event requests.
fn keep_alive(host: &mut FakeHost) -> Vec<(CommandId, Status, u32)> {
    let keep_alive = host.send_command(sqe(AdminOpcode::KeepAlive as u8, 0, 0), &[]);
    let mut answers = responses(host);
    let position = answers.iter().position(|(id, _, _)| *id == keep_alive).expect("Keep Alive answered");
    assert!(answers.remove(position).1.is_success());
    answers
}

/// Reads the discovery log header (RAE as given); returns its GENCTR and NUMREC.
fn read_discovery_log(host: &mut FakeHost, retain_event: bool) -> (u64, u64) {
    let mut command = sqe(AdminOpcode::GetLogPage as u8, 0, 1024);
    command.dwords[10] = u32::from(log_id::DISCOVERY) | (u32::from(retain_event) << 15) | (255 << 16);
    let answer = host.command(command, &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    let header = DiscoveryLogHeader::decode(&answer.data[..1024].try_into().unwrap());
    (header.generation_counter, header.number_of_records)
}

#[test]
fn discovery_controller_advertises_and_keeps_only_the_discovery_change_bit() {
    let target = test_target();
    let mut host = discovery_admin(&target, HOST_NQN, u32::MAX);
    let answer = host.command(identify(cns::CONTROLLER, 0), &[], &[]);
    let raw: [u8; IDENTIFY_DATA_BYTES] = answer.data.try_into().unwrap();
    let id = IdentifyController::decode(&raw);
    assert_eq!(id.optional_async_events_supported, oaes::DISCOVERY_LOG_PAGE_CHANGE, "OAES bit 31 only");
    assert_eq!(async_event_configuration(&mut host), DISCOVERY_CHANGE_ENABLED);

    // An I/O controller neither advertises nor keeps it.
    let mut io = FakeHost::new(Arc::clone(&target), 0);
    io.bring_up_admin(NQN);
    let answer = io.command(identify(cns::CONTROLLER, 0), &[], &[]);
    let raw: [u8; IDENTIFY_DATA_BYTES] = answer.data.try_into().unwrap();
    assert_eq!(IdentifyController::decode(&raw).optional_async_events_supported & oaes::DISCOVERY_LOG_PAGE_CHANGE, 0);
    set_async_event_configuration(&mut io, u32::MAX);
    assert_eq!(async_event_configuration(&mut io) & DISCOVERY_CHANGE_ENABLED, 0);
}

#[test]
fn subsystem_and_listener_changes_raise_one_notice_per_log_read() {
    let target = test_target();
    let mut host = discovery_admin(&target, HOST_NQN, DISCOVERY_CHANGE_ENABLED);
    let (generation, records) = read_discovery_log(&mut host, false);
    assert_eq!(records, 1);
    let event = hold_event_request(&mut host);
    assert!(keep_alive(&mut host).is_empty(), "nothing changed yet");

    // A subsystem added while the target runs.
    target.add_subsystem(subsystem("nqn.2026-11.io.sluice:added", HostAccess::allow_any())).unwrap();
    assert_eq!(keep_alive(&mut host), [(event, Status::SUCCESS, DISCOVERY_NOTICE_DW0)]);

    // Masked until the log is read: a listener added now only moves GENCTR.
    let event = hold_event_request(&mut host);
    target.add_listener(7, listener(4421, false)).unwrap();
    assert!(keep_alive(&mut host).is_empty(), "masked until log 70h is read");
    // Reading with RAE set keeps it masked.
    let (later, records) = read_discovery_log(&mut host, true);
    assert!(later > generation);
    assert_eq!(records, 4, "two subsystems on two I/O listeners");
    target.remove_listener(7).unwrap();
    assert!(keep_alive(&mut host).is_empty(), "RAE kept the notice masked");

    // Reading with RAE clear unmasks it: the next change is reported.
    assert_eq!(read_discovery_log(&mut host, false).1, 2);
    assert!(host.received.is_empty());
    target.add_listener(8, listener(4422, false)).unwrap();
    assert_eq!(keep_alive(&mut host), [(event, Status::SUCCESS, DISCOVERY_NOTICE_DW0)]);

    // A listener removed, with the request sent after the change: it completes at once.
    assert_eq!(read_discovery_log(&mut host, false).1, 4);
    target.remove_listener(8).unwrap();
    let event = host.send_command(sqe(AdminOpcode::AsynchronousEventRequest as u8, 0, 0), &[]);
    assert_eq!(responses(&mut host), [(event, Status::SUCCESS, DISCOVERY_NOTICE_DW0)]);

    // A removed subsystem is a change too.
    assert_eq!(read_discovery_log(&mut host, false).1, 2);
    let event = hold_event_request(&mut host);
    target.remove_subsystem("nqn.2026-11.io.sluice:added").unwrap();
    assert_eq!(keep_alive(&mut host), [(event, Status::SUCCESS, DISCOVERY_NOTICE_DW0)]);
    assert_eq!(read_discovery_log(&mut host, false).1, 1);
}

#[test]
fn no_notice_without_the_configuration_bit() {
    let target = test_target();
    let mut host = discovery_admin(&target, HOST_NQN, 0);
    hold_event_request(&mut host);
    target.add_subsystem(subsystem("nqn.2026-11.io.sluice:added", HostAccess::allow_any())).unwrap();
    target.add_listener(7, listener(4421, false)).unwrap();
    assert!(keep_alive(&mut host).is_empty());
    host.advance(Duration::from_secs(1));
    assert!(host.received.is_empty());
}

#[test]
fn only_hosts_whose_records_changed_are_told() {
    let target = test_target();
    let mut allowed = discovery_admin(&target, HOST_NQN, DISCOVERY_CHANGE_ENABLED);
    let mut other = discovery_admin(&target, OTHER_HOST_NQN, DISCOVERY_CHANGE_ENABLED);
    let allowed_event = hold_event_request(&mut allowed);
    let other_event = hold_event_request(&mut other);

    // A subsystem only HOST_NQN may see.
    let restricted =
        target.add_subsystem(subsystem("nqn.2026-11.io.sluice:restricted", HostAccess::only(&[HOST_NQN]))).unwrap();
    assert_eq!(keep_alive(&mut allowed), [(allowed_event, Status::SUCCESS, DISCOVERY_NOTICE_DW0)]);
    assert!(keep_alive(&mut other).is_empty(), "the other host's records did not change");

    // A discovery-only listener lists nothing new for anyone.
    assert_eq!(read_discovery_log(&mut allowed, false).1, 2);
    let allowed_event = hold_event_request(&mut allowed);
    target.add_listener(7, listener(8010, true)).unwrap();
    assert!(keep_alive(&mut allowed).is_empty());
    assert!(keep_alive(&mut other).is_empty());

    // New host rules (as the management API applies them): the other host may now
    // see the subsystem, the first one no longer.
    restricted.hosts.replace(HostAccess::only(&[OTHER_HOST_NQN]));
    target.bump_discovery_generation();
    assert_eq!(keep_alive(&mut other), [(other_event, Status::SUCCESS, DISCOVERY_NOTICE_DW0)]);
    assert_eq!(keep_alive(&mut allowed), [(allowed_event, Status::SUCCESS, DISCOVERY_NOTICE_DW0)]);
    assert_eq!(read_discovery_log(&mut allowed, false).1, 1);
    assert_eq!(read_discovery_log(&mut other, false).1, 2);
}

#[test]
fn io_controllers_never_get_the_discovery_notice() {
    let target = test_target();
    let mut io = FakeHost::new(Arc::clone(&target), 0);
    io.bring_up_admin(NQN);
    set_async_event_configuration(&mut io, u32::MAX);
    hold_event_request(&mut io);
    target.add_subsystem(subsystem("nqn.2026-11.io.sluice:added", HostAccess::allow_any())).unwrap();
    target.add_listener(7, listener(4421, false)).unwrap();
    target.remove_listener(7).unwrap();
    // The admin queue checks for due events every 200 ms.
    for _ in 0..5 {
        io.advance(Duration::from_millis(250));
    }
    assert!(keep_alive(&mut io).is_empty(), "no event for an I/O controller");
}

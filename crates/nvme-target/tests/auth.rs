//! Host access control and DH-HMAC-CHAP on the target, driven by a scripted host:
//! the allow-list at Connect, the filtered discovery log, the AUTHREQ bit, the gate
//! before authentication, a full exchange (nvme-auth's host state machine on the
//! other side), wrong secrets, malformed commands and the authentication timeout.

mod support;

use std::sync::Arc;
use std::time::Duration;

use nvme_auth::{
    DhGroup, HashFunction, HostAuthError, HostAuthentication, HostCredentials, HostPolicy, HostStep, Secret,
    SeededRandom,
};
use nvme_spec::discovery::{DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_LOG_RECORD_BYTES, DISCOVERY_NQN};
use nvme_spec::fabrics::{
    connect_authentication_required, connect_invalid_parameter_in_data, AuthenticationCommand, ConnectCommand,
    ConnectData, AUTHENTICATION_REQUIRED, CONNECT_DATA_BYTES,
};
use nvme_spec::identify::cns;
use nvme_spec::log_page::log_id;
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType, IoOpcode};
use nvme_spec::{CommandId, ControllerId, QueueId, Status, SubmissionQueueEntry};
use nvme_target::access::AUTHENTICATION_TIMEOUT_MS;
use nvme_target::{HostAccess, HostEntry, ListenerSpec, Target, TargetSettings, TargetSpec};
use nvme_tcp_wire::DigestSettings;
use support::{
    assert_status, authentication_receive, authentication_send, authentication_sqe, identify, read_write,
    run_authentication, Answer, FakeHost,
};

const OPEN_NQN: &str = "nqn.2026-11.io.sluice:open";
const LISTED_NQN: &str = "nqn.2026-11.io.sluice:listed";
const SECURED_NQN: &str = "nqn.2026-11.io.sluice:secured";
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-000000000001";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-0000-0000-000000000002";

fn host_secret() -> Secret {
    Secret::from_key(&[0x11; 32], Some(HashFunction::Sha256)).unwrap()
}

fn controller_secret() -> Secret {
    Secret::from_key(&[0x22; 48], None).unwrap()
}

/// Three subsystems: `open` (any host), `listed` (host A only), `secured` (host A
/// with a host secret and a controller secret, host B with a host secret only).
fn access_target() -> Arc<Target> {
    let subsystem = |nqn, hosts| support::subsystem(nqn, hosts, vec![support::ram_namespace(1, 64)]);
    let secured = HostAccess {
        allow_any_host: false,
        hosts: vec![
            HostEntry {
                dhchap_secret: Some(host_secret()),
                dhchap_controller_secret: Some(controller_secret()),
                ..HostEntry::new(HOST_A)
            },
            HostEntry { dhchap_secret: Some(host_secret()), ..HostEntry::new(HOST_B) },
        ],
    };
    Target::new(TargetSpec {
        listeners: vec![
            ListenerSpec::tcp("127.0.0.1", 4420),
            ListenerSpec::tcp("127.0.0.1", 8009).for_discovery_only(),
        ],
        subsystems: vec![
            subsystem(OPEN_NQN, HostAccess::allow_any()),
            subsystem(LISTED_NQN, HostAccess::only(&[HOST_A])),
            subsystem(SECURED_NQN, secured),
        ],
        settings: TargetSettings::default(),
    })
    .expect("valid target")
}

fn connect_as(host: &mut FakeHost, queue: QueueId, controller: ControllerId, nqn: &str, host_nqn: &str) -> Answer {
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(AdminOpcode::Fabrics as u8, CommandId(0), 1);
    sqe.set_fabrics_command_type(FabricsCommandType::Connect as u8);
    ConnectCommand {
        record_format: 0,
        queue_id: queue,
        submission_queue_size: 31,
        connect_attributes: 0,
        // Longer than the authentication timeout, so that one is what fires first.
        keep_alive_timeout_ms: if queue.is_admin() { 120_000 } else { 0 },
    }
    .encode_into(&mut sqe);
    let mut data = [0u8; CONNECT_DATA_BYTES];
    ConnectData::new([9; 16], controller, nqn, host_nqn).encode(&mut data);
    host.command(sqe, &data, &[])
}

fn new_host(target: &Arc<Target>, listener: usize) -> FakeHost {
    let mut host = FakeHost::new(target.clone(), listener);
    host.initialize(DigestSettings { header: false, data: false });
    host
}

/// Runs the host side of DH-HMAC-CHAP over the scripted connection.
fn authenticate(
    host: &mut FakeHost,
    host_nqn: &str,
    subsystem_nqn: &str,
    secret: Secret,
    controller_secret: Option<Secret>,
    policy: HostPolicy,
) -> Result<(), HostAuthError> {
    let mut authentication = HostAuthentication::new(
        HostCredentials { host_nqn: host_nqn.into(), subsystem_nqn: subsystem_nqn.into(), secret, controller_secret },
        policy,
        Box::new(SeededRandom::new(42)),
        7,
    );
    run_authentication(host, &mut authentication)
}

fn discovery_log(host: &mut FakeHost) -> Vec<String> {
    let answer = host.command(
        {
            let mut sqe = support::sqe(AdminOpcode::GetLogPage as u8, 0, 4096);
            nvme_spec::log_page::GetLogPageCommand {
                log_page_id: log_id::DISCOVERY,
                dword_count: 1024,
                ..Default::default()
            }
            .encode_into(&mut sqe);
            sqe
        },
        &[],
        &[],
    );
    assert_status(&answer, Status::SUCCESS);
    let header = DiscoveryLogHeader::decode(answer.data[..DISCOVERY_LOG_RECORD_BYTES].try_into().unwrap());
    (0..header.number_of_records as usize)
        .map(|index| {
            let start = (index + 1) * DISCOVERY_LOG_RECORD_BYTES;
            let entry =
                DiscoveryLogEntry::decode(answer.data[start..start + DISCOVERY_LOG_RECORD_BYTES].try_into().unwrap());
            entry.subsystem_nqn_str().unwrap_or("").to_string()
        })
        .collect()
}

#[test]
fn an_unlisted_host_is_refused_at_connect_and_a_listed_one_accepted() {
    let target = access_target();
    let mut refused = new_host(&target, 0);
    let answer = connect_as(&mut refused, QueueId::ADMIN, ControllerId::DYNAMIC, LISTED_NQN, HOST_B);
    assert_eq!(answer.cqe.status, Status::CONNECT_INVALID_HOST.with_do_not_retry());
    assert_eq!(answer.cqe.result_dw0, connect_invalid_parameter_in_data(512), "IATTR/IPO name HOSTNQN");
    // The secured subsystem refuses an unlisted host just the same.
    let mut stranger = new_host(&target, 0);
    let answer = connect_as(
        &mut stranger,
        QueueId::ADMIN,
        ControllerId::DYNAMIC,
        SECURED_NQN,
        "nqn.2014-08.org.example:stranger",
    );
    assert_eq!(answer.cqe.status.kind(), Status::CONNECT_INVALID_HOST);

    let mut listed = new_host(&target, 0);
    let answer = connect_as(&mut listed, QueueId::ADMIN, ControllerId::DYNAMIC, LISTED_NQN, HOST_A);
    assert_status(&answer, Status::SUCCESS);
    assert_eq!(answer.cqe.result_dw0 & connect_authentication_required::TRANSACTION, 0, "no secret: no AUTHREQ");
    let mut anyone = new_host(&target, 0);
    assert_status(&connect_as(&mut anyone, QueueId::ADMIN, ControllerId::DYNAMIC, OPEN_NQN, HOST_B), Status::SUCCESS);
}

#[test]
fn an_empty_host_nqn_is_accepted_where_any_host_may_connect_and_refused_by_an_allow_list() {
    // SPDK's host sends an empty Host NQN unless its transport ID names one.
    let target = access_target();
    let mut spdk = new_host(&target, 0);
    let answer = connect_as(&mut spdk, QueueId::ADMIN, ControllerId::DYNAMIC, OPEN_NQN, "");
    assert_status(&answer, Status::SUCCESS);
    let controller = ControllerId(answer.cqe.result_dw0 as u16);
    assert_status(&spdk.enable(), Status::SUCCESS);
    // Its I/O queue joins the controller with the same (empty) NQN, and only so.
    let mut io = new_host(&target, 0);
    assert_status(&connect_as(&mut io, QueueId(1), controller, OPEN_NQN, ""), Status::SUCCESS);
    let mut other = new_host(&target, 0);
    let answer = connect_as(&mut other, QueueId(2), controller, OPEN_NQN, HOST_A);
    assert_eq!(answer.cqe.status.kind(), Status::CONNECT_INVALID_PARAMETERS);
    // Discovery is open to it too.
    let mut discovery = new_host(&target, 1);
    let answer = connect_as(&mut discovery, QueueId::ADMIN, ControllerId::DYNAMIC, DISCOVERY_NQN, "");
    assert_status(&answer, Status::SUCCESS);

    // An allow-list has no entry for "no NQN".
    let mut refused = new_host(&target, 0);
    let answer = connect_as(&mut refused, QueueId::ADMIN, ControllerId::DYNAMIC, LISTED_NQN, "");
    assert_eq!(answer.cqe.status, Status::CONNECT_INVALID_HOST.with_do_not_retry());
    assert_eq!(answer.cqe.result_dw0, connect_invalid_parameter_in_data(512), "IATTR/IPO name HOSTNQN");
}

#[test]
fn the_discovery_log_lists_only_what_the_host_may_connect_to() {
    let target = access_target();
    let mut as_a = new_host(&target, 1);
    assert_status(
        &connect_as(&mut as_a, QueueId::ADMIN, ControllerId::DYNAMIC, DISCOVERY_NQN, HOST_A),
        Status::SUCCESS,
    );
    assert_status(&as_a.enable(), Status::SUCCESS);
    assert_eq!(discovery_log(&mut as_a), vec![OPEN_NQN, LISTED_NQN, SECURED_NQN]);

    let mut as_b = new_host(&target, 1);
    assert_status(
        &connect_as(&mut as_b, QueueId::ADMIN, ControllerId::DYNAMIC, DISCOVERY_NQN, HOST_B),
        Status::SUCCESS,
    );
    assert_status(&as_b.enable(), Status::SUCCESS);
    assert_eq!(discovery_log(&mut as_b), vec![OPEN_NQN, SECURED_NQN]);

    let mut stranger = new_host(&target, 1);
    let nqn = "nqn.2014-08.org.example:stranger";
    assert_status(
        &connect_as(&mut stranger, QueueId::ADMIN, ControllerId::DYNAMIC, DISCOVERY_NQN, nqn),
        Status::SUCCESS,
    );
    assert_status(&stranger.enable(), Status::SUCCESS);
    assert_eq!(discovery_log(&mut stranger), vec![OPEN_NQN]);
}

#[test]
fn a_host_with_a_secret_authenticates_before_anything_else() {
    let target = access_target();
    let mut host = new_host(&target, 0);
    let answer = connect_as(&mut host, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_B);
    assert_status(&answer, Status::SUCCESS);
    assert_ne!(answer.cqe.result_dw0 & connect_authentication_required::TRANSACTION, 0, "AUTHREQ.ATR");
    let controller = ControllerId(answer.cqe.result_dw0 as u16);
    // Fabrics commands are allowed, everything else waits for authentication.
    assert_status(&host.enable(), Status::SUCCESS);
    let refused = host.command(identify(cns::CONTROLLER, 0), &[], &[]);
    assert_eq!(refused.cqe.status, AUTHENTICATION_REQUIRED.with_do_not_retry());

    authenticate(&mut host, HOST_B, SECURED_NQN, host_secret(), None, HostPolicy::default()).unwrap();
    assert_status(&host.command(identify(cns::CONTROLLER, 0), &[], &[]), Status::SUCCESS);

    // An I/O queue authenticates on its own.
    let mut io = new_host(&target, 0);
    let answer = connect_as(&mut io, QueueId(1), controller, SECURED_NQN, HOST_B);
    assert_status(&answer, Status::SUCCESS);
    assert_ne!(answer.cqe.result_dw0 & connect_authentication_required::TRANSACTION, 0);
    let read = io.command(read_write(IoOpcode::Read, 1, 0, 1), &[], &[]);
    assert_eq!(read.cqe.status, AUTHENTICATION_REQUIRED.with_do_not_retry());
    let null_group = HostPolicy { hashes: vec![HashFunction::Sha512], groups: vec![DhGroup::Null] };
    authenticate(&mut io, HOST_B, SECURED_NQN, host_secret(), None, null_group).unwrap();
    assert_status(&io.command(read_write(IoOpcode::Read, 1, 0, 1), &[], &[]), Status::SUCCESS);
}

#[test]
fn bidirectional_authentication_checks_the_controller_secret() {
    let target = access_target();
    let mut host = new_host(&target, 0);
    assert_status(&connect_as(&mut host, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_A), Status::SUCCESS);
    authenticate(&mut host, HOST_A, SECURED_NQN, host_secret(), Some(controller_secret()), HostPolicy::default())
        .unwrap();
    assert_status(&host.enable(), Status::SUCCESS);
    assert_status(&host.command(identify(cns::CONTROLLER, 0), &[], &[]), Status::SUCCESS);

    // The host expects another controller secret: the target cannot prove it.
    let mut doubtful = new_host(&target, 0);
    assert_status(
        &connect_as(&mut doubtful, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_A),
        Status::SUCCESS,
    );
    let other = Secret::from_key(&[0x33; 48], None).unwrap();
    let result = authenticate(&mut doubtful, HOST_A, SECURED_NQN, host_secret(), Some(other), HostPolicy::default());
    assert_eq!(result, Err(HostAuthError::ControllerNotAuthenticated));
    assert!(doubtful.connection.wants_close(), "AUTH_Failure2 ends the connection");
}

#[test]
fn a_wrong_secret_fails_and_closes_the_connection() {
    let target = access_target();
    let mut host = new_host(&target, 0);
    assert_status(&connect_as(&mut host, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_B), Status::SUCCESS);
    let wrong = Secret::from_key(&[0x12; 32], Some(HashFunction::Sha256)).unwrap();
    let result = authenticate(&mut host, HOST_B, SECURED_NQN, wrong, None, HostPolicy::default());
    assert_eq!(result, Err(HostAuthError::Refused { explanation: nvme_auth::FailureReason::Failed.code() }));
    assert!(host.connection.wants_close());
}

#[test]
fn authentication_must_finish_in_time() {
    let target = access_target();
    let mut host = new_host(&target, 0);
    assert_status(&connect_as(&mut host, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_B), Status::SUCCESS);
    let deadline = host.connection.next_deadline().expect("a deadline");
    assert!(deadline <= host.now + Duration::from_millis(AUTHENTICATION_TIMEOUT_MS));
    host.advance(Duration::from_millis(AUTHENTICATION_TIMEOUT_MS - 1000));
    assert!(!host.connection.wants_close());
    host.advance(Duration::from_millis(1000));
    assert!(host.connection.wants_close(), "an unauthenticated queue is closed at the deadline");

    // Once authenticated, the deadline is gone.
    let mut host = new_host(&target, 0);
    assert_status(&connect_as(&mut host, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_B), Status::SUCCESS);
    authenticate(&mut host, HOST_B, SECURED_NQN, host_secret(), None, HostPolicy::default()).unwrap();
    assert_status(&host.enable(), Status::SUCCESS);
    host.advance(Duration::from_millis(AUTHENTICATION_TIMEOUT_MS + 1));
    assert_status(&host.command(support::sqe(AdminOpcode::KeepAlive as u8, 0, 0), &[], &[]), Status::SUCCESS);
    assert!(!host.connection.wants_close());
}

#[test]
fn malformed_authentication_commands_fail_with_a_status() {
    let target = access_target();
    let mut host = new_host(&target, 0);
    assert_status(&connect_as(&mut host, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_B), Status::SUCCESS);
    let payload = [0u8; 72];
    // Wrong SECP, SPSP0, TL of 0, TL above the message limit.
    for mutate in [
        (|command: &mut AuthenticationCommand| command.security_protocol = 0xEA) as fn(&mut AuthenticationCommand),
        |command| command.security_protocol_specific_0 = 0,
        |command| command.length = 0,
    ] {
        let mut command =
            AuthenticationCommand::decode(&authentication_sqe(FabricsCommandType::AuthenticationSend, 72));
        mutate(&mut command);
        let mut sqe = authentication_sqe(FabricsCommandType::AuthenticationSend, 72);
        command.encode_into(&mut sqe);
        assert_status(&host.command(sqe, &payload, &[]), Status::INVALID_FIELD);
    }
    // TL disagreeing with the in-capsule data.
    let sqe = authentication_sqe(FabricsCommandType::AuthenticationSend, 100);
    assert_status(&host.command(sqe, &payload, &[]), Status::DATA_SGL_LENGTH_INVALID);
    // A Receive whose AL is too small for the message, and one whose SGL length
    // disagrees with AL.
    let negotiate = HostAuthentication::new(
        HostCredentials {
            host_nqn: HOST_B.into(),
            subsystem_nqn: SECURED_NQN.into(),
            secret: host_secret(),
            controller_secret: None,
        },
        HostPolicy::default(),
        Box::new(SeededRandom::new(1)),
        3,
    )
    .start();
    let HostStep::Send(negotiate) = negotiate else { panic!("negotiate first") };
    assert_status(&authentication_send(&mut host, &negotiate), Status::SUCCESS);
    assert_status(&authentication_receive(&mut host, 16), Status::INVALID_FIELD);
    let mut sqe = authentication_sqe(FabricsCommandType::AuthenticationReceive, 4096);
    sqe.set_sgl(&nvme_spec::SglDescriptor::transport(512));
    assert_status(&host.command(sqe, &[], &[]), Status::DATA_SGL_LENGTH_INVALID);
    // The transaction is still usable after refused commands.
    assert_status(&authentication_receive(&mut host, 4096), Status::SUCCESS);

    // Authentication commands on a queue that needs none.
    let mut open = new_host(&target, 0);
    assert_status(&connect_as(&mut open, QueueId::ADMIN, ControllerId::DYNAMIC, OPEN_NQN, HOST_B), Status::SUCCESS);
    assert_status(&authentication_send(&mut open, &negotiate), Status::COMMAND_SEQUENCE_ERROR);
}

#[test]
fn garbage_messages_get_failure1_not_a_panic() {
    let target = access_target();
    let mut host = new_host(&target, 0);
    assert_status(&connect_as(&mut host, QueueId::ADMIN, ControllerId::DYNAMIC, SECURED_NQN, HOST_B), Status::SUCCESS);
    assert_status(&authentication_send(&mut host, &[0xFF; 40]), Status::SUCCESS);
    let answer = authentication_receive(&mut host, 4096);
    assert_status(&answer, Status::SUCCESS);
    assert!(matches!(nvme_auth::Message::decode(&answer.data), Ok(nvme_auth::Message::Failure1(_))));
    assert!(host.connection.wants_close());
}

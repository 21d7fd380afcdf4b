//! Secure channel concatenation on the target, driven by a scripted host: a host
//! allowed to concatenate generates a TLS PSK on its plain admin queue (SC_C
//! NEWTLSPSK), the target files it where the TLS handshake's lookup finds it, and
//! queues over it connect without authenticating again; every request the target
//! must refuse ends in AUTH_Failure1 "concatenation mismatch".

mod support;

use std::sync::Arc;

use nvme_auth::{
    FailureReason, HashFunction, HostAuthError, HostAuthentication, HostCredentials, HostPolicy, HostStep, PskIdentity,
    Secret, SecureChannelRequest, SeededRandom,
};
use nvme_spec::fabrics::connect_authentication_required;
use nvme_spec::{ControllerId, QueueId, Status};
use nvme_target::{HostAccess, HostEntry, ListenerSpec, Target, TargetSettings, TargetSpec};
use nvme_tcp_wire::DigestSettings;
use support::{assert_status, authentication_receive, authentication_send, run_authentication, FakeHost};

const NQN: &str = "nqn.2026-11.io.sluice:concat";
const CONCAT_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-0000-0000-000000000001";
const PLAIN_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-0000-0000-000000000002";
const OPEN_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-0000-0000-000000000003";

fn secret() -> Secret {
    Secret::from_key(&[0x33; 32], Some(HashFunction::Sha256)).unwrap()
}

/// One subsystem: CONCAT_HOST with a secret and concat, PLAIN_HOST with a secret
/// only, OPEN_HOST listed without a secret.
fn concat_target() -> Arc<Target> {
    let hosts = HostAccess {
        allow_any_host: false,
        hosts: vec![
            HostEntry { dhchap_secret: Some(secret()), concat: true, ..HostEntry::new(CONCAT_HOST) },
            HostEntry { dhchap_secret: Some(secret()), ..HostEntry::new(PLAIN_HOST) },
            HostEntry::new(OPEN_HOST),
        ],
    };
    Target::new(TargetSpec {
        listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
        subsystems: vec![support::subsystem(NQN, hosts, vec![support::ram_namespace(1, 64)])],
        settings: TargetSettings::default(),
    })
    .expect("valid target")
}

/// The host side of DH-HMAC-CHAP with SC_C = `request`; the finished transaction.
fn authenticate(
    host: &mut FakeHost,
    host_nqn: &str,
    secret: Secret,
    request: SecureChannelRequest,
) -> (Result<(), HostAuthError>, HostAuthentication) {
    let mut authentication = HostAuthentication::new(
        HostCredentials { host_nqn: host_nqn.into(), subsystem_nqn: NQN.into(), secret, controller_secret: None },
        HostPolicy::default(),
        Box::new(SeededRandom::new(11)),
        3,
    )
    .with_secure_channel(request);
    (run_authentication(host, &mut authentication), authentication)
}

/// ICReq and an admin Connect as `host_nqn`: the CNTLID and whether ATR is set.
fn connect_admin(host: &mut FakeHost, host_nqn: &str) -> (ControllerId, bool) {
    host.initialize(DigestSettings { header: false, data: false });
    let answer = host.connect_as(QueueId::ADMIN, ControllerId::DYNAMIC, NQN, 32, host_nqn);
    assert!(answer.cqe.status.is_success(), "admin connect: {:?}", answer.cqe.status);
    let atr = answer.cqe.result_dw0 & connect_authentication_required::TRANSACTION != 0;
    (ControllerId(answer.cqe.result_dw0 as u16), atr)
}

#[test]
fn a_concat_host_generates_a_psk_the_tls_lookup_finds() {
    let target = concat_target();
    let mut admin = FakeHost::new(target.clone(), 0);
    let (_, atr) = connect_admin(&mut admin, CONCAT_HOST);
    assert!(atr, "the plain admin queue must authenticate");
    let (result, mut transaction) = authenticate(&mut admin, CONCAT_HOST, secret(), SecureChannelRequest::NewTlsPsk);
    result.expect("authenticated");
    let generated = transaction.take_generated_psk().expect("the host generated a PSK");
    assert_eq!(target.generated_psks.len(), 1, "the target filed it");
    // What the host's TLS handshake offers; the target's lookup answers with the same
    // TLS PSK.
    let (identity, psk) = generated.tls_key(CONCAT_HOST, NQN).expect("tls key");
    assert!(identity.to_string().starts_with(&format!("NVMe1G01 {CONCAT_HOST} {NQN} ")));
    let (found, found_identity) = target.tls_psk(identity.to_string().as_bytes()).expect("lookup finds it");
    assert_eq!(&*found, &*psk);
    assert_eq!(found_identity, identity);
    // Another digest (another transaction) is unknown; so is a retained-style lookup.
    let forged = PskIdentity::v1(
        nvme_auth::PskKind::Generated,
        HashFunction::Sha256,
        CONCAT_HOST,
        NQN,
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    )
    .expect("identity");
    assert!(target.tls_psk(forged.to_string().as_bytes()).is_none());
    // The admin queue stays usable after the transaction.
    let answer = admin.property_get(nvme_spec::fabrics::property_offset::CSTS, 4);
    assert!(answer.cqe.status.is_success());

    // The host reconnects over TLS with the generated PSK: no DH-HMAC-CHAP again.
    let mut over_tls = FakeHost::new(target.clone(), 0);
    over_tls.connection.bind_secure_channel(CONCAT_HOST, NQN);
    over_tls.connection.mark_generated_psk();
    let (_, atr) = connect_admin(&mut over_tls, CONCAT_HOST);
    assert!(!atr, "a queue over the generated PSK needs no authentication");
    let answer = over_tls.property_get(nvme_spec::fabrics::property_offset::CAP, 8);
    assert!(answer.cqe.status.is_success());
    // It may replace its PSK there (REPLACETLSPSK).
    let (result, mut replaced) =
        authenticate(&mut over_tls, CONCAT_HOST, secret(), SecureChannelRequest::ReplaceTlsPsk);
    result.expect("re-authenticated");
    assert!(replaced.take_generated_psk().is_some());
    assert_eq!(target.generated_psks.len(), 2);

    // Rules change: a host no longer allowed to concatenate finds no generated PSK.
    let subsystem = target.subsystem_by_nqn(NQN).expect("subsystem");
    let mut rules = (*subsystem.hosts.current()).clone();
    rules.hosts[0].concat = false;
    subsystem.hosts.replace(rules);
    assert!(target.tls_psk(identity.to_string().as_bytes()).is_none());
}

#[test]
fn concatenation_requests_the_target_must_refuse() {
    let target = concat_target();
    let mismatch = Err(HostAuthError::Refused { explanation: FailureReason::ConcatenationMismatch.code() });

    // A host with a secret but without concat.
    let mut host = FakeHost::new(target.clone(), 0);
    connect_admin(&mut host, PLAIN_HOST);
    let (result, _) = authenticate(&mut host, PLAIN_HOST, secret(), SecureChannelRequest::NewTlsPsk);
    assert_eq!(result, mismatch);

    // REPLACETLSPSK on a plain admin queue.
    let mut host = FakeHost::new(target.clone(), 0);
    connect_admin(&mut host, CONCAT_HOST);
    let (result, _) = authenticate(&mut host, CONCAT_HOST, secret(), SecureChannelRequest::ReplaceTlsPsk);
    assert_eq!(result, mismatch);

    // NEWTLSPSK on an I/O queue.
    let mut admin = FakeHost::new(target.clone(), 0);
    let (controller, _) = connect_admin(&mut admin, CONCAT_HOST);
    authenticate(&mut admin, CONCAT_HOST, secret(), SecureChannelRequest::None).0.expect("admin authenticated");
    assert!(admin.enable().cqe.status.is_success());
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    let answer = io.connect_as(QueueId(1), controller, NQN, 32, CONCAT_HOST);
    assert!(answer.cqe.status.is_success(), "{:?}", answer.cqe.status);
    let (result, _) = authenticate(&mut io, CONCAT_HOST, secret(), SecureChannelRequest::NewTlsPsk);
    assert_eq!(result, mismatch);

    // A wrong secret generates nothing.
    let mut host = FakeHost::new(target.clone(), 0);
    connect_admin(&mut host, CONCAT_HOST);
    let wrong = Secret::from_key(&[0x44; 32], Some(HashFunction::Sha256)).unwrap();
    let (result, _) = authenticate(&mut host, CONCAT_HOST, wrong, SecureChannelRequest::NewTlsPsk);
    assert_eq!(result, Err(HostAuthError::Refused { explanation: FailureReason::Failed.code() }));
    assert!(target.generated_psks.is_empty(), "nothing filed on refusals");

    // Concatenation asked where no authentication is configured: the Connect did not
    // ask for it, so Authentication Send is out of sequence (do not retry).
    let mut host = FakeHost::new(target.clone(), 0);
    let (_, atr) = connect_admin(&mut host, OPEN_HOST);
    assert!(!atr);
    let negotiate = HostAuthentication::new(
        HostCredentials {
            host_nqn: OPEN_HOST.into(),
            subsystem_nqn: NQN.into(),
            secret: secret(),
            controller_secret: None,
        },
        HostPolicy::default(),
        Box::new(SeededRandom::new(1)),
        1,
    )
    .with_secure_channel(SecureChannelRequest::NewTlsPsk)
    .start();
    let HostStep::Send(payload) = negotiate else { panic!("negotiate first") };
    assert_status(&authentication_send(&mut host, &payload), Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
    // Hostile SC_C bytes in a raw Negotiate: AUTH_Failure1, never a panic.
    let mut host = FakeHost::new(target.clone(), 0);
    connect_admin(&mut host, CONCAT_HOST);
    for sc_c in [0x01u8, 0x04, 0x7F, 0xFF] {
        let mut raw = payload.clone();
        raw[6] = sc_c;
        assert!(authentication_send(&mut host, &raw).cqe.status.is_success(), "a bad message does not fail the Send");
        let answer = authentication_receive(&mut host, 4096);
        assert!(answer.cqe.status.is_success());
        match nvme_auth::Message::decode(&answer.data) {
            Ok(nvme_auth::Message::Failure1(failure)) => {
                assert_eq!(failure.explanation, FailureReason::ConcatenationMismatch.code(), "SC_C {sc_c:#04x}")
            }
            other => panic!("SC_C {sc_c:#04x}: expected AUTH_Failure1, got {other:?}"),
        }
        // Failure1 ends the connection; a fresh one for the next value.
        host = FakeHost::new(target.clone(), 0);
        connect_admin(&mut host, CONCAT_HOST);
    }
}

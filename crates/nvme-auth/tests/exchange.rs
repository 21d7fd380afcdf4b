//! The host state machine against the controller state machine: every hash and DH
//! group, unidirectional and bidirectional, and every way a secret can be wrong.

use nvme_auth::message::{Message, Negotiate, ProtocolDescriptor, DHCHAP_AUTH_ID};
use nvme_auth::{
    CommandResult, ControllerAuthentication, ControllerCredentials, ControllerPolicy, DhGroup, FailureReason,
    HashFunction, HostAuthError, HostAuthentication, HostCredentials, HostPolicy, HostStep, Negotiated, Progress,
    Secret, SecureChannelContext, SecureChannelRequest, SeededRandom,
};

const HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const SUBSYSTEM_NQN: &str = "nqn.2026-11.io.sluice:auth-test";

/// How an exchange ended, seen from both sides.
#[derive(Debug)]
struct Outcome {
    host: Result<(), HostAuthError>,
    controller: Progress,
    /// Messages exchanged (Sends and Receives).
    steps: usize,
}

/// Runs one transaction: the host's commands go to the controller until the host
/// finishes.
fn exchange(host: &mut HostAuthentication, controller: &mut ControllerAuthentication) -> Outcome {
    let mut step = host.start();
    let mut controller_progress = Progress::InProgress;
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 20, "the exchange does not end");
        step = match step {
            HostStep::Send(payload) => {
                controller_progress = controller.on_send(&payload);
                host.on_result(CommandResult::Sent)
            }
            HostStep::Receive(allocation_length) => {
                let (mut message, progress) = controller.on_receive(allocation_length as usize).expect("AL is enough");
                controller_progress = progress;
                // The target pads the message to AL, as Linux does.
                message.resize(allocation_length as usize, 0);
                host.on_result(CommandResult::Received(&message))
            }
            HostStep::Authenticated => return Outcome { host: Ok(()), controller: controller_progress, steps },
            HostStep::Failed(error) => return Outcome { host: Err(error), controller: controller_progress, steps },
        };
    }
}

fn secret(seed: u8, transform: Option<HashFunction>, length: usize) -> Secret {
    let key: Vec<u8> = (0..length as u8).map(|byte| byte.wrapping_mul(seed).wrapping_add(seed)).collect();
    Secret::from_key(&key, transform).unwrap()
}

fn pair(
    host_secret: &Secret,
    host_controller_secret: Option<&Secret>,
    target_secret: &Secret,
    target_controller_secret: Option<&Secret>,
    hash: HashFunction,
    group: DhGroup,
    seed: u64,
) -> (HostAuthentication, ControllerAuthentication) {
    let host = HostAuthentication::new(
        HostCredentials {
            host_nqn: HOST_NQN.into(),
            subsystem_nqn: SUBSYSTEM_NQN.into(),
            secret: host_secret.clone(),
            controller_secret: host_controller_secret.cloned(),
        },
        HostPolicy::default(),
        Box::new(SeededRandom::new(seed)),
        0x1234,
    );
    let controller = ControllerAuthentication::new(
        ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, target_secret, target_controller_secret),
        ControllerPolicy { hashes: vec![hash], groups: vec![group] },
        Box::new(SeededRandom::new(seed + 1000)),
    );
    (host, controller)
}

#[test]
fn every_hash_and_group_authenticates_both_ways() {
    for (index, hash) in HashFunction::ALL.into_iter().enumerate() {
        for group in DhGroup::ALL {
            let seed = (index * 10) as u64 + u64::from(group.id());
            let host_secret = secret(3, Some(hash), hash.length());
            let controller_secret = secret(5, None, 48);
            // Unidirectional: Negotiate, Challenge, Reply, Success1.
            let (mut host, mut controller) = pair(&host_secret, None, &host_secret, None, hash, group, seed);
            let outcome = exchange(&mut host, &mut controller);
            assert_eq!(outcome.host, Ok(()), "{} {}", hash.name(), group.name());
            assert_eq!(outcome.controller, Progress::Authenticated);
            assert!(controller.is_authenticated());
            assert_eq!(outcome.steps, 5);
            assert_eq!(
                controller.negotiated(),
                Some(Negotiated { hash, group, bidirectional: false, secure_channel: SecureChannelRequest::None })
            );
            // Bidirectional: and Success2.
            let (mut host, mut controller) =
                pair(&host_secret, Some(&controller_secret), &host_secret, Some(&controller_secret), hash, group, seed);
            let outcome = exchange(&mut host, &mut controller);
            assert_eq!(outcome.host, Ok(()), "bidirectional {} {}", hash.name(), group.name());
            assert_eq!(outcome.controller, Progress::Authenticated);
            assert_eq!(outcome.steps, 6);
            assert_eq!(
                controller.negotiated(),
                Some(Negotiated { hash, group, bidirectional: true, secure_channel: SecureChannelRequest::None })
            );
        }
    }
}

#[test]
fn a_wrong_host_secret_is_refused_with_failure1() {
    for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
        let right = secret(3, Some(HashFunction::Sha256), 32);
        let wrong = secret(4, Some(HashFunction::Sha256), 32);
        let (mut host, mut controller) = pair(&wrong, None, &right, None, HashFunction::Sha256, group, 1);
        let outcome = exchange(&mut host, &mut controller);
        assert_eq!(outcome.host, Err(HostAuthError::Refused { explanation: FailureReason::Failed.code() }));
        assert_eq!(outcome.controller, Progress::Failed(FailureReason::Failed));
        assert!(!controller.is_authenticated());
    }
    // The same key with another transform is another secret.
    let sha256 = secret(3, Some(HashFunction::Sha256), 32);
    let untransformed = secret(3, None, 32);
    let (mut host, mut controller) = pair(&untransformed, None, &sha256, None, HashFunction::Sha256, DhGroup::Null, 2);
    assert!(exchange(&mut host, &mut controller).host.is_err());
}

#[test]
fn a_wrong_controller_secret_fails_the_host_with_failure2() {
    let host_secret = secret(3, Some(HashFunction::Sha384), 48);
    let expected = secret(6, None, 32);
    let impostor = secret(7, None, 32);
    for group in [DhGroup::Null, DhGroup::Ffdhe3072] {
        let (mut host, mut controller) =
            pair(&host_secret, Some(&expected), &host_secret, Some(&impostor), HashFunction::Sha384, group, 3);
        let outcome = exchange(&mut host, &mut controller);
        assert_eq!(outcome.host, Err(HostAuthError::ControllerNotAuthenticated));
        // The controller heard the host's AUTH_Failure2.
        assert_eq!(outcome.controller, Progress::Failed(FailureReason::Failed));
        assert!(!controller.is_authenticated());
    }
}

#[test]
fn a_controller_without_a_controller_secret_cannot_answer_a_bidirectional_host() {
    let host_secret = secret(3, None, 32);
    let controller_secret = secret(6, None, 32);
    let (mut host, mut controller) =
        pair(&host_secret, Some(&controller_secret), &host_secret, None, HashFunction::Sha256, DhGroup::Null, 4);
    let outcome = exchange(&mut host, &mut controller);
    assert_eq!(outcome.host, Err(HostAuthError::Refused { explanation: FailureReason::Failed.code() }));
}

#[test]
fn no_common_hash_or_group_is_refused_with_the_reason() {
    let host_secret = secret(3, None, 32);
    let (mut host, _) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Null, 5);
    let mut controller = ControllerAuthentication::new(
        ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, &host_secret, None),
        ControllerPolicy { hashes: vec![], groups: vec![DhGroup::Null] },
        Box::new(SeededRandom::new(5)),
    );
    let outcome = exchange(&mut host, &mut controller);
    assert_eq!(outcome.host, Err(HostAuthError::Refused { explanation: FailureReason::HashUnusable.code() }));
    let mut host = HostAuthentication::new(
        HostCredentials {
            host_nqn: HOST_NQN.into(),
            subsystem_nqn: SUBSYSTEM_NQN.into(),
            secret: host_secret.clone(),
            controller_secret: None,
        },
        HostPolicy { hashes: HashFunction::ALL.to_vec(), groups: vec![DhGroup::Null] },
        Box::new(SeededRandom::new(6)),
        9,
    );
    let mut controller = ControllerAuthentication::new(
        ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, &host_secret, None),
        ControllerPolicy { hashes: vec![HashFunction::Sha512], groups: vec![DhGroup::Ffdhe2048] },
        Box::new(SeededRandom::new(6)),
    );
    let outcome = exchange(&mut host, &mut controller);
    assert_eq!(outcome.host, Err(HostAuthError::Refused { explanation: FailureReason::DhGroupUnusable.code() }));
}

#[test]
fn the_nqns_are_part_of_the_proof() {
    // Same secret, but the controller believes it talks to another host: R1 differs.
    let host_secret = secret(3, Some(HashFunction::Sha256), 32);
    let (mut host, _) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Null, 7);
    let mut controller = ControllerAuthentication::new(
        ControllerCredentials::new("nqn.2014-08.org.nvmexpress:uuid:someone-else", SUBSYSTEM_NQN, &host_secret, None),
        ControllerPolicy::default(),
        Box::new(SeededRandom::new(7)),
    );
    assert!(exchange(&mut host, &mut controller).host.is_err());
}

#[test]
fn out_of_sequence_messages_are_answered_with_failure1() {
    let host_secret = secret(3, None, 32);
    let mut controller = ControllerAuthentication::new(
        ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, &host_secret, None),
        ControllerPolicy::default(),
        Box::new(SeededRandom::new(8)),
    );
    // A Receive before any Negotiate.
    let (message, progress) = controller.on_receive(4096).unwrap();
    assert_eq!(progress, Progress::Failed(FailureReason::IncorrectMessage));
    assert!(matches!(nvme_auth::Message::decode(&message), Ok(nvme_auth::Message::Failure1(_))));

    // A Success2 where the Reply belongs.
    let (mut host, mut controller) =
        pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Null, 9);
    let HostStep::Send(negotiate) = host.start() else { panic!("negotiate first") };
    assert_eq!(controller.on_send(&negotiate), Progress::InProgress);
    assert!(controller.on_receive(8).is_err(), "AL below the challenge is refused without a state change");
    let _challenge = controller.on_receive(4096).unwrap();
    let success2 = nvme_auth::Message::Success2 { transaction_id: 0x1234 }.to_bytes();
    assert_eq!(controller.on_send(&success2), Progress::InProgress);
    let (message, progress) = controller.on_receive(4096).unwrap();
    assert_eq!(progress, Progress::Failed(FailureReason::IncorrectMessage));
    assert!(matches!(nvme_auth::Message::decode(&message), Ok(nvme_auth::Message::Failure1(_))));
    // Failed is terminal.
    assert_eq!(controller.on_send(&negotiate), Progress::Failed(FailureReason::IncorrectMessage));

    // Garbage is an incorrect payload.
    let mut controller = ControllerAuthentication::new(
        ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, &host_secret, None),
        ControllerPolicy::default(),
        Box::new(SeededRandom::new(10)),
    );
    assert_eq!(controller.on_send(&[0xFF; 3]), Progress::InProgress);
    assert_eq!(controller.on_receive(4096).unwrap().1, Progress::Failed(FailureReason::IncorrectPayload));
}

#[test]
fn a_command_failure_ends_the_host_transaction() {
    let host_secret = secret(3, None, 32);
    let (mut host, _) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Null, 11);
    let _ = host.start();
    assert_eq!(
        host.on_result(CommandResult::Status(0x4002)),
        HostStep::Failed(HostAuthError::CommandFailed { status: 0x4002 })
    );
}

#[test]
fn re_authentication_restarts_with_a_new_negotiate() {
    let host_secret = secret(3, None, 32);
    let (mut host, mut controller) =
        pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Ffdhe2048, 12);
    assert_eq!(exchange(&mut host, &mut controller).host, Ok(()));
    let (mut again, _) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Ffdhe2048, 13);
    assert_eq!(exchange(&mut again, &mut controller).host, Ok(()));
    assert!(controller.is_authenticated());
}

#[test]
fn the_controller_picks_its_most_preferred_choice_the_host_offers() {
    let host_secret = secret(3, None, 32);
    let (mut host, _) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Null, 7);
    let policy = ControllerPolicy::new(
        vec![HashFunction::Sha512, HashFunction::Sha256],
        vec![DhGroup::Ffdhe3072, DhGroup::Null],
    )
    .expect("both lists are non-empty");
    let mut controller = ControllerAuthentication::new(
        ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, &host_secret, None),
        policy,
        Box::new(SeededRandom::new(7)),
    );
    assert_eq!(controller.negotiated(), None);
    let outcome = exchange(&mut host, &mut controller);
    assert_eq!(outcome.host, Ok(()));
    let negotiated = controller.negotiated().expect("negotiated");
    assert_eq!((negotiated.hash, negotiated.group), (HashFunction::Sha512, DhGroup::Ffdhe3072));
    assert_eq!(ControllerPolicy::new(vec![], vec![DhGroup::Null]), None);
    assert_eq!(ControllerPolicy::new(vec![HashFunction::Sha256], vec![]), None);
}

#[test]
fn names_parse_as_nvme_cli_and_nvmet_spell_them() {
    assert_eq!(HashFunction::from_name("sha384"), Some(HashFunction::Sha384));
    assert_eq!(HashFunction::from_name("hmac(sha512)"), Some(HashFunction::Sha512));
    assert_eq!(HashFunction::from_name("SHA256"), Some(HashFunction::Sha256));
    assert_eq!(HashFunction::from_name("md5"), None);
    assert_eq!(HashFunction::from_name("hmac(sha256"), None);
    for group in DhGroup::ALL {
        assert_eq!(DhGroup::from_name(group.name()), Some(group));
    }
    assert_eq!(DhGroup::from_name("ffdhe1024"), None);
}

/// The admin queue of a host allowed to concatenate, without TLS yet.
const PLAIN_ADMIN: SecureChannelContext = SecureChannelContext { allowed: true, admin_queue: true, on_tls: false };

#[test]
fn concatenation_generates_the_same_tls_psk_on_both_sides() {
    for hash in [HashFunction::Sha256, HashFunction::Sha384] {
        for group in [DhGroup::Ffdhe2048, DhGroup::Ffdhe4096] {
            let host_secret = secret(3, Some(hash), hash.length());
            let (host, controller) = pair(&host_secret, None, &host_secret, None, hash, group, 7);
            let mut host = host.with_secure_channel(SecureChannelRequest::NewTlsPsk);
            let mut controller = controller.with_secure_channel(PLAIN_ADMIN);
            let outcome = exchange(&mut host, &mut controller);
            assert_eq!(outcome.host, Ok(()), "{hash:?} {group:?}");
            assert_eq!(outcome.controller, Progress::Authenticated);
            // Negotiate, Challenge, Reply (C2, SEQNUM 0), Success1 without R2.
            assert_eq!(outcome.steps, 5);
            let negotiated = controller.negotiated().expect("negotiated");
            assert_eq!(negotiated.secure_channel, SecureChannelRequest::NewTlsPsk);
            assert!(!negotiated.bidirectional);
            let on_host = host.take_generated_psk().expect("host generated a PSK");
            let on_controller = controller.take_generated_psk().expect("controller generated a PSK");
            assert_eq!(on_host.as_bytes(), on_controller.as_bytes());
            assert!(controller.take_generated_psk().is_none(), "handed out once");
            let (identity, psk) = on_host.tls_key(HOST_NQN, SUBSYSTEM_NQN).expect("tls key");
            let (same_identity, same_psk) = on_controller.tls_key(HOST_NQN, SUBSYSTEM_NQN).expect("tls key");
            assert_eq!(identity, same_identity);
            assert_eq!(&*psk, &*same_psk);
            assert!(identity.to_string().starts_with(&format!("NVMe1G{:02} ", hash.id())));
        }
    }
}

#[test]
fn concatenation_with_a_controller_secret_still_generates_the_psk() {
    // Linux's host does not ask for R2 when concatenating, even with a controller secret.
    let host_secret = secret(3, Some(HashFunction::Sha256), 32);
    let controller_secret = secret(5, None, 32);
    let (host, controller) = pair(
        &host_secret,
        Some(&controller_secret),
        &host_secret,
        Some(&controller_secret),
        HashFunction::Sha256,
        DhGroup::Ffdhe2048,
        3,
    );
    let mut host = host.with_secure_channel(SecureChannelRequest::NewTlsPsk);
    let mut controller = controller.with_secure_channel(PLAIN_ADMIN);
    let outcome = exchange(&mut host, &mut controller);
    assert_eq!(outcome.host, Ok(()));
    assert_eq!(outcome.controller, Progress::Authenticated);
    assert!(controller.take_generated_psk().is_some());
}

#[test]
fn a_wrong_secret_generates_nothing() {
    let right = secret(3, Some(HashFunction::Sha256), 32);
    let wrong = secret(4, Some(HashFunction::Sha256), 32);
    let (host, controller) = pair(&wrong, None, &right, None, HashFunction::Sha256, DhGroup::Ffdhe2048, 1);
    let mut host = host.with_secure_channel(SecureChannelRequest::NewTlsPsk);
    let mut controller = controller.with_secure_channel(PLAIN_ADMIN);
    let outcome = exchange(&mut host, &mut controller);
    assert_eq!(outcome.host, Err(HostAuthError::Refused { explanation: FailureReason::Failed.code() }));
    assert!(controller.take_generated_psk().is_none());
    assert!(host.take_generated_psk().is_none());
}

/// Every SC_C request the queue's context does not take ends in AUTH_Failure1
/// "secure channel concatenation mismatch".
#[test]
fn unacceptable_concatenation_requests_are_a_mismatch() {
    let host_secret = secret(3, Some(HashFunction::Sha256), 32);
    let refused = [
        // not allowed for this host
        (SecureChannelRequest::NewTlsPsk, SecureChannelContext { allowed: false, ..PLAIN_ADMIN }),
        // an I/O queue
        (SecureChannelRequest::NewTlsPsk, SecureChannelContext { admin_queue: false, ..PLAIN_ADMIN }),
        // NEWTLSPSK over TLS, REPLACETLSPSK without
        (SecureChannelRequest::NewTlsPsk, SecureChannelContext { on_tls: true, ..PLAIN_ADMIN }),
        (SecureChannelRequest::ReplaceTlsPsk, PLAIN_ADMIN),
        // the default context: no concatenation at all
        (SecureChannelRequest::NewTlsPsk, SecureChannelContext::default()),
    ];
    for (request, context) in refused {
        let (host, controller) =
            pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Ffdhe2048, 2);
        let mut host = host.with_secure_channel(request);
        let mut controller = controller.with_secure_channel(context);
        let outcome = exchange(&mut host, &mut controller);
        assert_eq!(
            outcome.host,
            Err(HostAuthError::Refused { explanation: FailureReason::ConcatenationMismatch.code() }),
            "{request:?} {context:?}"
        );
        assert_eq!(outcome.controller, Progress::Failed(FailureReason::ConcatenationMismatch));
    }
    // REPLACETLSPSK on a TLS admin queue is fine.
    let (host, controller) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Ffdhe2048, 2);
    let mut host = host.with_secure_channel(SecureChannelRequest::ReplaceTlsPsk);
    let mut controller = controller.with_secure_channel(SecureChannelContext { on_tls: true, ..PLAIN_ADMIN });
    assert_eq!(exchange(&mut host, &mut controller).host, Ok(()));
    assert!(controller.take_generated_psk().is_some());
}

/// Raw AUTH_Negotiate messages with SC_C values nobody defined, and concatenation
/// with only the null group or only SHA-512 on offer.
#[test]
fn hostile_sc_c_values_and_unusable_offers() {
    let host_secret = secret(3, Some(HashFunction::Sha256), 32);
    let negotiate = |secure_channel: u8, hash_ids: Vec<u8>, dh_group_ids: Vec<u8>| {
        Message::Negotiate(Negotiate {
            transaction_id: 9,
            secure_channel,
            protocols: vec![ProtocolDescriptor { auth_id: DHCHAP_AUTH_ID, hash_ids, dh_group_ids }],
        })
        .to_bytes()
    };
    let all_hashes = vec![1, 2, 3];
    let all_groups = vec![0, 1, 2, 3, 4, 5];
    let cases = [
        (negotiate(0x01, all_hashes.clone(), all_groups.clone()), FailureReason::ConcatenationMismatch),
        (negotiate(0x04, all_hashes.clone(), all_groups.clone()), FailureReason::ConcatenationMismatch),
        (negotiate(0xFF, all_hashes.clone(), all_groups.clone()), FailureReason::ConcatenationMismatch),
        (negotiate(0x02, all_hashes.clone(), vec![0]), FailureReason::ConcatenationMismatch),
        (negotiate(0x02, vec![3], all_groups.clone()), FailureReason::HashUnusable),
    ];
    for (payload, reason) in cases {
        let mut controller = ControllerAuthentication::new(
            ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, &host_secret, None),
            ControllerPolicy::default(),
            Box::new(SeededRandom::new(5)),
        )
        .with_secure_channel(PLAIN_ADMIN);
        assert_eq!(controller.on_send(&payload), Progress::InProgress);
        let (message, progress) = controller.on_receive(4096).expect("answer");
        assert_eq!(progress, Progress::Failed(reason));
        match Message::decode(&message) {
            Ok(Message::Failure1(failure)) => assert_eq!(failure.explanation, reason.code()),
            other => panic!("expected AUTH_Failure1, got {other:?}"),
        }
        assert!(controller.take_generated_psk().is_none());
    }
    // With concatenation the controller passes over its preferred null group and
    // SHA-512 to what can generate a PSK.
    let mut controller = ControllerAuthentication::new(
        ControllerCredentials::new(HOST_NQN, SUBSYSTEM_NQN, &host_secret, None),
        ControllerPolicy {
            hashes: vec![HashFunction::Sha512, HashFunction::Sha384],
            groups: vec![DhGroup::Null, DhGroup::Ffdhe3072],
        },
        Box::new(SeededRandom::new(5)),
    )
    .with_secure_channel(PLAIN_ADMIN);
    controller.on_send(&negotiate(0x02, all_hashes, all_groups));
    let (_, progress) = controller.on_receive(4096).expect("challenge");
    assert_eq!(progress, Progress::InProgress);
    let negotiated = controller.negotiated().expect("negotiated");
    assert_eq!((negotiated.hash, negotiated.group), (HashFunction::Sha384, DhGroup::Ffdhe3072));
}

/// A concatenating host offers neither SHA-512 nor the null group (neither can make
/// a TLS PSK), so a controller preferring them (nvmet's default group is null) falls
/// back to one that works.
#[test]
fn a_concatenating_host_offers_only_what_makes_a_psk() {
    let host_secret = secret(3, Some(HashFunction::Sha256), 32);
    let (host, _) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Ffdhe2048, 1);
    let mut host = host.with_secure_channel(SecureChannelRequest::NewTlsPsk);
    let HostStep::Send(payload) = host.start() else { panic!("negotiate first") };
    let Ok(Message::Negotiate(negotiate)) = Message::decode(&payload) else { panic!("a negotiate") };
    assert_eq!(negotiate.secure_channel, SecureChannelRequest::NewTlsPsk.code());
    let protocol = &negotiate.protocols[0];
    assert_eq!(protocol.hash_ids, vec![HashFunction::Sha256.id(), HashFunction::Sha384.id()]);
    assert!(!protocol.dh_group_ids.contains(&DhGroup::Null.id()) && protocol.dh_group_ids.len() == 5);
}

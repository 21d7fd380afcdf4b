//! The host state machine against the controller state machine: every hash and DH
//! group, unidirectional and bidirectional, and every way a secret can be wrong.

use nvme_auth::{
    CommandResult, ControllerAuthentication, ControllerCredentials, ControllerPolicy, DhGroup, FailureReason,
    HashFunction, HostAuthError, HostAuthentication, HostCredentials, HostPolicy, HostStep, Negotiated, Progress,
    Secret, SeededRandom,
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
            assert_eq!(controller.negotiated(), Some(Negotiated { hash, group, bidirectional: false }));
            // Bidirectional: and Success2.
            let (mut host, mut controller) = pair(
                &host_secret,
                Some(&controller_secret),
                &host_secret,
                Some(&controller_secret),
                hash,
                group,
                seed,
            );
            let outcome = exchange(&mut host, &mut controller);
            assert_eq!(outcome.host, Ok(()), "bidirectional {} {}", hash.name(), group.name());
            assert_eq!(outcome.controller, Progress::Authenticated);
            assert_eq!(outcome.steps, 6);
            assert_eq!(controller.negotiated(), Some(Negotiated { hash, group, bidirectional: true }));
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
    let (mut host, mut controller) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Null, 9);
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
    assert_eq!(host.on_result(CommandResult::Status(0x4002)), HostStep::Failed(HostAuthError::CommandFailed { status: 0x4002 }));
}

#[test]
fn re_authentication_restarts_with_a_new_negotiate() {
    let host_secret = secret(3, None, 32);
    let (mut host, mut controller) = pair(&host_secret, None, &host_secret, None, HashFunction::Sha256, DhGroup::Ffdhe2048, 12);
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

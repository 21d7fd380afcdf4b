//! Sluice's host and target over TLS 1.3 with a configured PSK: the controller comes
//! up, I/O runs on the blocking path and on the ring, data round-trips; a wrong key
//! and a plain host on a TLS-only listener fail with errors that say so.

mod support;

use std::time::Duration;

use nvme_auth::{HashFunction, IdentityVersion, SeededRandom, TlsKey};
use nvme_host_client::{
    commands, ClientError, Controller, HostCompletion, IdentityChoice, IoPath, PollMode, TlsOptions,
};
use nvme_target::{HostAccess, HostEntry, SecureChannel};
use support::{options, pattern, TestTarget, BLOCK_BYTES, NAMESPACE};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0b5e7a1c-1d2e-4f3a-9b8c-7d6e5f4a3b2c";

fn target_with_key(key: &TlsKey, secure_channel: SecureChannel) -> TestTarget {
    let mut host = HostEntry::new(HOST);
    host.tls_key = Some(key.clone());
    TestTarget::start_secure(secure_channel, HostAccess { allow_any_host: false, hosts: vec![host] })
}

fn tls_options(target: &TestTarget, key: &TlsKey, version: IdentityVersion) -> nvme_host_client::ConnectOptions {
    let mut options = options(target.address);
    options.host_nqn = HOST.into();
    options.tls =
        Some(TlsOptions { key: key.clone(), identity: IdentityChoice::Only(version), derivation: Default::default() });
    options
}

#[test]
fn io_over_tls_on_both_data_paths() {
    for (hash, version, io_path) in [
        (HashFunction::Sha256, IdentityVersion::V0, IoPath::Ring(PollMode::ADAPTIVE)),
        (HashFunction::Sha384, IdentityVersion::V1, IoPath::Blocking),
    ] {
        let key = TlsKey::generate(hash, &mut SeededRandom::new(3)).expect("key");
        let target = target_with_key(&key, SecureChannel::Required);
        let mut options = tls_options(&target, &key, version);
        options.io_path = io_path;
        let controller = Controller::connect(options).expect("connect over TLS");
        // 1 MiB through the controller's queues (several TLS records per command).
        let data = pattern(1024 * 1024, 5);
        controller.write(NAMESPACE, 64, &data, false).expect("write");
        assert!(controller.read(NAMESPACE, 64, (data.len() / BLOCK_BYTES as usize) as u32).expect("read") == data);

        // A taken queue (the ring, or the blocking socket) with 16 reads in flight.
        let mut queue = controller.take_io_queue(1).expect("queue");
        for index in 0..16u64 {
            let mut command = commands::read(NAMESPACE, 64 + index * 8, 8, BLOCK_BYTES);
            command.user_tag = index;
            queue.submit(command).expect("submit");
        }
        let mut completions: Vec<HostCompletion> = Vec::new();
        while completions.len() < 16 {
            queue.reap(1, Duration::from_secs(5), &mut completions).expect("reap");
        }
        for completion in &completions {
            assert!(completion.cqe.status.is_success());
            let at = completion.user_tag as usize * 4096;
            assert!(completion.data == data[at..at + 4096], "read {} differs", completion.user_tag);
        }
        drop(queue);
        controller.disconnect().expect("disconnect");
    }
}

#[test]
fn a_wrong_key_and_a_plain_host_are_refused_with_reasons() {
    let key = TlsKey::generate(HashFunction::Sha256, &mut SeededRandom::new(4)).expect("key");
    let target = target_with_key(&key, SecureChannel::Required);
    let wrong = TlsKey::generate(HashFunction::Sha256, &mut SeededRandom::new(5)).expect("key");
    match Controller::connect(tls_options(&target, &wrong, IdentityVersion::V0)) {
        Err(ClientError::Tls { message, .. }) => assert!(!message.is_empty()),
        other => panic!("a wrong key: {other:?}"),
    }
    let mut plain = options(target.address);
    plain.host_nqn = HOST.into();
    let outcome = Controller::connect(plain);
    assert!(outcome.is_err(), "a plain host connected to a TLS-only listener");
}

#[test]
fn an_optional_listener_takes_tls_and_plain_hosts_but_a_keyed_host_only_over_tls() {
    const PLAIN_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0b5e7a1c-1d2e-4f3a-9b8c-000000000001";
    let key = TlsKey::generate(HashFunction::Sha256, &mut SeededRandom::new(6)).expect("key");
    let mut keyed = HostEntry::new(HOST);
    keyed.tls_key = Some(key.clone());
    let hosts = HostAccess { allow_any_host: false, hosts: vec![keyed, HostEntry::new(PLAIN_HOST)] };
    let target = TestTarget::start_secure(SecureChannel::Optional, hosts);
    let secure = Controller::connect(tls_options(&target, &key, IdentityVersion::V1)).expect("TLS host");
    let mut plain_options = options(target.address);
    plain_options.host_nqn = PLAIN_HOST.into();
    let plain = Controller::connect(plain_options).expect("plain host");
    let data = pattern(8192, 1);
    secure.write(NAMESPACE, 0, &data, false).expect("write over TLS");
    assert!(plain.read(NAMESPACE, 0, 16).expect("read in clear") == data);
    // The keyed host's NQN without TLS: anyone could claim it.
    let mut impostor = options(target.address);
    impostor.host_nqn = HOST.into();
    match Controller::connect(impostor) {
        Err(ClientError::Command { .. } | ClientError::Protocol(_)) => {}
        other => panic!("a plain connection as the keyed host: {other:?}"),
    }
    secure.disconnect().expect("disconnect");
    plain.disconnect().expect("disconnect");
}

#[test]
fn hosts_with_libnvme_before_1_16_connect_too() {
    use nvme_auth::KeyDerivation;
    let key = TlsKey::generate(HashFunction::Sha256, &mut SeededRandom::new(8)).expect("key");
    let compat = |target: &TestTarget, version| {
        let mut options = tls_options(target, &key, version);
        if let Some(tls) = options.tls.as_mut() {
            tls.derivation = KeyDerivation::Compat;
        }
        options
    };
    // The target's entry says nothing: a format 1 identity shows the old derivation
    // by its digest; a format 0 one cannot, and is refused.
    let target = target_with_key(&key, SecureChannel::Required);
    Controller::connect(compat(&target, IdentityVersion::V1))
        .expect("format 1, compat")
        .disconnect()
        .expect("disconnect");
    assert!(Controller::connect(compat(&target, IdentityVersion::V0)).is_err(), "format 0 compat without the setting");
    // With tls_key_derivation = compat on the host's entry, format 0 works.
    let mut host = HostEntry::new(HOST);
    host.tls_key = Some(key.clone());
    host.tls_key_derivation = KeyDerivation::Compat;
    let target =
        TestTarget::start_secure(SecureChannel::Required, HostAccess { allow_any_host: false, hosts: vec![host] });
    Controller::connect(compat(&target, IdentityVersion::V0))
        .expect("format 0, compat")
        .disconnect()
        .expect("disconnect");
}

/// Secure channel concatenation (`sluice connect --concat`): the admin queue
/// authenticates without TLS and generates a TLS PSK, every queue of the association
/// then runs over TLS with it; a wrong secret, or a host the target does not let
/// concatenate, fails with the reason.
#[test]
fn concatenation_generates_the_psk_every_queue_uses() {
    let secret = nvme_host::Secret::from_key(&[0x5A; 32], Some(HashFunction::Sha256)).expect("secret");
    let mut host = HostEntry::new(HOST);
    host.dhchap_secret = Some(secret.clone());
    host.concat = true;
    let target =
        TestTarget::start_secure(SecureChannel::Optional, HostAccess { allow_any_host: false, hosts: vec![host] });
    let concat_options = |secret: &nvme_host::Secret| {
        let mut options = options(target.address);
        options.host_nqn = HOST.into();
        options.dhchap_secret = Some(secret.clone());
        options.concat = true;
        options.io_path = IoPath::Blocking;
        options
    };
    let controller = Controller::connect(concat_options(&secret)).expect("connect with --concat");
    assert_eq!(target.target.generated_psks.len(), 1, "the target filed the generated PSK");
    let data = pattern(256 * 1024, 9);
    controller.write(NAMESPACE, 8, &data, false).expect("write");
    assert!(controller.read(NAMESPACE, 8, (data.len() / BLOCK_BYTES as usize) as u32).expect("read") == data);
    drop(controller);

    let wrong = nvme_host::Secret::from_key(&[0x5B; 32], Some(HashFunction::Sha256)).expect("secret");
    let error = Controller::connect(concat_options(&wrong)).expect_err("a wrong secret");
    assert!(error.to_string().contains("authentication"), "{error}");

    // A host with a secret but without concat on the target: a concatenation mismatch.
    let mut plain = HostEntry::new(HOST);
    plain.dhchap_secret = Some(secret.clone());
    let no_concat =
        TestTarget::start_secure(SecureChannel::Optional, HostAccess { allow_any_host: false, hosts: vec![plain] });
    let mut refused = concat_options(&secret);
    refused.address = no_concat.address;
    let error = Controller::connect(refused).expect_err("not allowed to concatenate");
    assert!(error.to_string().contains("concatenation mismatch"), "{error}");

    // --concat needs a secret, and takes no configured key.
    let mut no_secret = concat_options(&secret);
    no_secret.dhchap_secret = None;
    assert!(matches!(Controller::connect(no_secret), Err(ClientError::InvalidArgument(_))));
}

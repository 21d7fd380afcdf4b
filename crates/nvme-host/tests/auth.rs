//! DH-HMAC-CHAP from the host queue against the real target connection, through a
//! wire that cuts the bytes at random: a queue whose Connect asks for
//! authentication becomes Ready only after the exchange, and every way it can go
//! wrong ends in a failed queue naming the reason.

mod support;

use std::sync::Arc;

use nvme_host::{commands, DhchapSecrets, HostAuthError, HostError, QueueState, Secret};
use nvme_spec::identify::{cns, csi};
use nvme_spec::{ControllerId, NamespaceId};
use nvme_target::{
    HostAccess, HostEntry, ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec,
};
use nvme_tcp_wire::DigestSettings;
use storage::{Geometry, RamBackend};
use support::{admin_config, io_config, Link, HOST_NQN, NQN};

fn host_secret() -> Secret {
    Secret::parse("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:").unwrap()
}

fn controller_secret() -> Secret {
    Secret::from_key(&[0x5C; 64], Some(nvme_auth_hash())).unwrap()
}

fn nvme_auth_hash() -> nvme_auth::HashFunction {
    nvme_auth::HashFunction::Sha512
}

/// The test subsystem, but only `HOST_NQN` may connect, with these secrets.
fn secured_target(secret: Option<Secret>, controller: Option<Secret>) -> Arc<Target> {
    Target::new(TargetSpec {
        listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
        subsystems: vec![SubsystemSpec {
            hosts: HostAccess {
                allow_any_host: false,
                hosts: vec![HostEntry {
                    dhchap_secret: secret,
                    dhchap_controller_secret: controller,
                    ..HostEntry::new(HOST_NQN)
                }],
            },
            pool: None,
            nqn: NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces: vec![NamespaceSpec {
                id: NamespaceId(1),
                backend: RamBackend::new(Geometry { block_size_bytes: 512, block_count: 64 }),
                nguid: None,
                uuid: None,
                ana_group: None,
            }],
        }],
        settings: TargetSettings::default(),
    })
    .expect("valid target")
}

fn link(target: &Arc<Target>, dhchap: Option<DhchapSecrets>, seed: u64) -> Link {
    let mut config = admin_config(DigestSettings { header: seed.is_multiple_of(2), data: seed.is_multiple_of(3) });
    config.dhchap = dhchap;
    Link::new(target.clone(), config, 97, seed)
}

fn failure(link: &mut Link) -> HostError {
    link.pump();
    assert_eq!(link.host.state(), QueueState::Failed, "error {:?}", link.host.error());
    link.host.error().cloned().expect("an error")
}

#[test]
fn the_queue_is_ready_only_after_authenticating() {
    for (seed, controller) in [(1, None), (2, Some(controller_secret()))] {
        let target = secured_target(Some(host_secret()), controller.clone());
        let mut admin = link(
            &target,
            Some(DhchapSecrets {
                secret: host_secret(),
                controller_secret: controller.clone(),
                secure_channel: Default::default(),
            }),
            seed,
        );
        let controller_id = admin.connect();
        // Bring the controller up so an I/O queue can join it; it authenticates too.
        let configuration = nvme_spec::registers::ControllerConfiguration(0)
            .with_io_submission_queue_entry_size(6)
            .with_io_completion_queue_entry_size(4)
            .with_enable(true);
        admin.run_ok(commands::property_set(nvme_spec::fabrics::property_offset::CC, u64::from(configuration.raw())));
        admin.run_ok(commands::identify(cns::CONTROLLER, NamespaceId::NONE, csi::NVM));
        let mut config = io_config(controller_id, 1, 8, DigestSettings { header: false, data: false });
        config.dhchap = Some(DhchapSecrets {
            secret: host_secret(),
            controller_secret: controller,
            secure_channel: Default::default(),
        });
        let mut io = Link::new(target.clone(), config, 0, seed + 10);
        assert_eq!(io.connect(), controller_id);
        io.run_ok(commands::read(NamespaceId(1), 0, 1, 512));
    }
}

#[test]
fn a_wrong_secret_fails_the_queue() {
    let target = secured_target(Some(host_secret()), None);
    let wrong = Secret::from_key(&[0xEE; 32], None).unwrap();
    let mut admin = link(
        &target,
        Some(DhchapSecrets { secret: wrong, controller_secret: None, secure_channel: Default::default() }),
        3,
    );
    let error = failure(&mut admin);
    assert_eq!(
        error,
        HostError::Authentication {
            error: HostAuthError::Refused { explanation: nvme_auth::FailureReason::Failed.code() }
        }
    );
}

#[test]
fn a_controller_that_cannot_prove_the_controller_secret_is_refused() {
    let target = secured_target(Some(host_secret()), Some(Secret::from_key(&[0x01; 32], None).unwrap()));
    let mut admin = link(
        &target,
        Some(DhchapSecrets {
            secret: host_secret(),
            controller_secret: Some(controller_secret()),
            secure_channel: Default::default(),
        }),
        4,
    );
    assert_eq!(failure(&mut admin), HostError::Authentication { error: HostAuthError::ControllerNotAuthenticated });
}

#[test]
fn a_controller_secret_forces_authentication_even_when_not_asked() {
    // The target needs no authentication from this host; with a controller secret
    // the host insists, and the target cannot take part: the queue fails rather
    // than run with an unproven controller.
    let target = secured_target(None, None);
    let mut admin = link(
        &target,
        Some(DhchapSecrets {
            secret: host_secret(),
            controller_secret: Some(controller_secret()),
            secure_channel: Default::default(),
        }),
        5,
    );
    assert!(matches!(failure(&mut admin), HostError::Authentication { error: HostAuthError::CommandFailed { .. } }));
    // Without a controller secret, a host secret the target does not ask for is
    // simply unused (as Linux).
    let mut admin = link(
        &target,
        Some(DhchapSecrets { secret: host_secret(), controller_secret: None, secure_channel: Default::default() }),
        6,
    );
    admin.connect();
}

#[test]
fn a_target_asking_for_authentication_needs_a_secret() {
    let target = secured_target(Some(host_secret()), None);
    let mut admin = link(&target, None, 7);
    assert!(matches!(failure(&mut admin), HostError::BadConnectResponse { .. }));
    assert_eq!(admin.host.controller_id(), None::<ControllerId>);
}

//! Tests of the target's settings checks and controller table.

use super::*;

fn spec(settings: TargetSettings) -> TargetSpec {
    TargetSpec { listeners: Vec::new(), subsystems: Vec::new(), settings }
}

#[test]
fn default_settings_are_valid() {
    assert!(Target::new(spec(TargetSettings::default())).is_ok());
}

#[test]
fn out_of_range_limits_are_refused() {
    let defaults = TargetSettings::default();
    let cases = [
        TargetSettings { max_connections_per_host: 64, ..defaults },
        TargetSettings { max_outstanding_r2t_bytes_per_connection: MAX_DATA_TRANSFER_BYTES - 1, ..defaults },
        TargetSettings { max_outstanding_r2t_bytes_per_connection: MAX_OUTSTANDING_R2T_BYTES_LIMIT + 1, ..defaults },
        TargetSettings { in_capsule_data_bytes: MIN_IN_CAPSULE_DATA_BYTES - 16, ..defaults },
        TargetSettings { in_capsule_data_bytes: MAX_IN_CAPSULE_DATA_BYTES + 16, ..defaults },
        TargetSettings { in_capsule_data_bytes: 16 * 1024 + 8, ..defaults },
        TargetSettings { connection_setup_timeout_ms: 0, ..defaults },
        TargetSettings { command_quiesce_timeout_ms: 0, ..defaults },
        TargetSettings { command_quiesce_timeout_ms: MAX_COMMAND_QUIESCE_TIMEOUT_MS + 1, ..defaults },
        TargetSettings { min_keep_alive_timeout_ms: 0, ..defaults },
        TargetSettings { min_keep_alive_timeout_ms: 10_000, max_keep_alive_timeout_ms: 5_000, ..defaults },
    ];
    for settings in cases {
        assert!(Target::new(spec(settings)).is_err(), "{settings:?} was accepted");
    }
    let smallest = TargetSettings {
        max_connections_per_host: 65,
        max_outstanding_r2t_bytes_per_connection: MAX_DATA_TRANSFER_BYTES,
        in_capsule_data_bytes: MIN_IN_CAPSULE_DATA_BYTES,
        connection_setup_timeout_ms: 1,
        min_keep_alive_timeout_ms: 1,
        max_keep_alive_timeout_ms: 1,
        ..defaults
    };
    assert!(Target::new(spec(smallest)).is_ok());
}

#[test]
fn keep_alive_requests_are_granted_clamped_or_refused() {
    let settings = TargetSettings::default();
    assert_eq!(settings.keep_alive_timeout(ControllerKind::Io, 5_000), Ok(5_000));
    assert_eq!(settings.keep_alive_timeout(ControllerKind::Io, 10), Ok(1_000));
    assert_eq!(settings.keep_alive_timeout(ControllerKind::Io, 0), Err(KeepAliveRefusal::Disabled));
    assert_eq!(settings.keep_alive_timeout(ControllerKind::Io, 300_001), Err(KeepAliveRefusal::AboveMaximum));
    assert_eq!(settings.keep_alive_timeout(ControllerKind::Discovery, 0), Ok(DISCOVERY_KEEP_ALIVE_TIMEOUT_MS));
    assert_eq!(settings.keep_alive_timeout(ControllerKind::Discovery, 30_000), Ok(30_000));
    let permissive = TargetSettings { allow_keep_alive_disabled: true, ..settings };
    assert_eq!(permissive.keep_alive_timeout(ControllerKind::Io, 0), Ok(0));
    // Set Features values outside the range run the nearest allowed timer.
    assert_eq!(settings.effective_keep_alive_timeout(ControllerKind::Io, 0), 300_000);
    assert_eq!(settings.effective_keep_alive_timeout(ControllerKind::Io, u32::MAX), 300_000);
    let short = TargetSettings { max_keep_alive_timeout_ms: 60_000, ..settings };
    assert_eq!(short.keep_alive_timeout(ControllerKind::Discovery, 0), Ok(60_000));
}

fn listener(address: &str, port: u16, discovery_only: bool) -> ListenerSpec {
    ListenerSpec {
        address: address.into(),
        port,
        family: AddressFamily::Ipv4,
        discovery_only,
        secure_channel: Default::default(),
    }
}

/// (PORTID, TRADDR, TRSVCID) of every discovery log record.
fn discovery_records(target: &Target) -> Vec<(u16, String, String)> {
    target
        .discovery_entries_for("nqn.2014-08.io.sluice:any-host")
        .iter()
        .map(|entry| {
            let address = entry.transport_address_str().unwrap_or_default().to_string();
            (entry.port_id, address, entry.transport_service_id_str().unwrap_or_default().to_string())
        })
        .collect()
}

#[test]
fn listeners_added_and_removed_live_change_the_discovery_log() {
    let spec = TargetSpec {
        listeners: vec![listener("127.0.0.1", 4420, false), listener("127.0.0.1", 8009, true)],
        subsystems: vec![SubsystemSpec {
            nqn: "nqn.2026-11.io.sluice:a".into(),
            serial_number: None,
            model_number: None,
            namespaces: Vec::new(),
            pool: None,
            hosts: crate::HostAccess::allow_any(),
        }],
        settings: TargetSettings::default(),
    };
    let target = Target::new(spec).unwrap();
    // Discovery-only listeners are not paths to NVM subsystems.
    assert_eq!(discovery_records(&target), [(1, "127.0.0.1".into(), "4420".into())]);
    let generation = target.discovery_generation();

    target.add_listener(2, listener("10.0.0.1", 4421, false)).unwrap();
    assert!(target.discovery_generation() > generation, "hosts comparing GENCTR read the log again");
    assert_eq!(
        discovery_records(&target),
        [(1, "127.0.0.1".into(), "4420".into()), (3, "10.0.0.1".into(), "4421".into())]
    );
    assert_eq!(target.add_listener(2, listener("10.0.0.2", 4420, false)), Err(TargetError::DuplicateListener(2)));

    // Removing the first listener does not renumber the others: PORTID and
    // the id connections carry stay the same.
    let generation = target.discovery_generation();
    assert_eq!(target.remove_listener(0).unwrap(), listener("127.0.0.1", 4420, false));
    assert!(target.discovery_generation() > generation);
    assert_eq!(discovery_records(&target), [(3, "10.0.0.1".into(), "4421".into())]);
    assert_eq!(target.listener(0), None);
    assert_eq!(target.listener(1), Some(listener("127.0.0.1", 8009, true)));
    assert_eq!(target.listener(2).map(|spec| spec.port), Some(4421));
    assert_eq!(target.remove_listener(0), Err(TargetError::UnknownListener(0)));
    let ids: Vec<usize> = target.listeners().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [1, 2]);
}

#[test]
fn host_connections_are_counted_until_their_guards_drop() {
    let settings =
        TargetSettings { max_io_queues_per_controller: 1, max_connections_per_host: 2, ..Default::default() };
    let target = Target::new(spec(settings)).unwrap();
    let now = Instant::now();
    let first = target.admit_host_connection("host-a", now).unwrap();
    let _second = target.admit_host_connection("host-a", now).unwrap();
    let refused = target.admit_host_connection("host-a", now).unwrap_err();
    assert_eq!(refused, HostConnectionsExhausted { live: 2, log: Some(0) });
    assert_eq!(target.admit_host_connection("host-a", now).unwrap_err().log, None);
    let _other = target.admit_host_connection("host-b", now).unwrap();
    drop(first);
    assert_eq!(target.host_connection_count("host-a"), 1);
    let _again = target.admit_host_connection("host-a", now).unwrap();
    assert_eq!(target.host_connection_count("host-a"), 2);
}

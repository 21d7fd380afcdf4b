//! The discovery controller: Connect to the well-known NQN, Identify, log page 70h.

mod support;

use nvme_spec::discovery::{DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_NQN};
use nvme_spec::identify::{cns, controller_type, IDENTIFY_DATA_BYTES};
use nvme_spec::opcode::AdminOpcode;
use nvme_spec::{IdentifyController, Status};
use support::*;

fn get_log(host: &mut FakeHost, log: u8, offset: u64, length: u32) -> Answer {
    let mut command = sqe(AdminOpcode::GetLogPage as u8, 0, length);
    command.dwords[10] = u32::from(log) | ((length / 4 - 1) << 16);
    command.dwords[12] = offset as u32;
    command.dwords[13] = (offset >> 32) as u32;
    host.command(command, &[], &[])
}

#[test]
fn discovery_log_lists_the_subsystem_on_its_io_listener() {
    for listener in [0, 1] {
        let mut host = FakeHost::new(test_target(), listener);
        host.bring_up_admin(DISCOVERY_NQN);
        let answer = host.command(identify(cns::CONTROLLER, 0), &[], &[]);
        let raw: [u8; IDENTIFY_DATA_BYTES] = answer.data.try_into().unwrap();
        let id = IdentifyController::decode(&raw);
        assert_eq!(id.controller_type, controller_type::DISCOVERY);
        assert_eq!(id.subsystem_nqn_str(), Some(DISCOVERY_NQN));

        // nvme-cli reads the header first, then the whole log.
        let header = get_log(&mut host, 0x70, 0, 1024);
        assert_status(&header, Status::SUCCESS);
        let header = DiscoveryLogHeader::decode(&header.data.try_into().unwrap());
        assert_eq!(header.number_of_records, 1);
        let whole = get_log(&mut host, 0x70, 0, 2048);
        let entry = DiscoveryLogEntry::decode(&whole.data[1024..].try_into().unwrap());
        assert_eq!(entry.subsystem_nqn_str(), Some(NQN));
        assert_eq!(entry.transport_service_id_str(), Some("4420"));
        assert_eq!(entry.transport_address_str(), Some("127.0.0.1"));
        // A window in the middle of the entry.
        let window = get_log(&mut host, 0x70, 1024 + 256, 256);
        assert_eq!(window.data, whole.data[1280..1536]);
        // Beyond the end of the log.
        assert_status(&get_log(&mut host, 0x70, 8192, 1024), Status::INVALID_FIELD);
        // A discovery controller has no SMART log and no I/O commands.
        assert_status(&get_log(&mut host, 0x02, 0, 512), Status::INVALID_LOG_PAGE);
        assert_status(&host.command(identify(cns::NAMESPACE, 1), &[], &[]), Status::INVALID_FIELD);
    }
}

#[test]
fn discovery_log_announces_each_listeners_tls() {
    use nvme_spec::discovery::{tcp_security_type, transport_requirements};
    use nvme_target::{
        AddressFamily, HostAccess, ListenerSpec, SecureChannel, SubsystemSpec, Target, TargetSettings, TargetSpec,
    };
    let listener = |port, secure_channel| ListenerSpec {
        address: "127.0.0.1".into(),
        port,
        family: AddressFamily::Ipv4,
        discovery_only: false,
        secure_channel,
    };
    let target = Target::new(TargetSpec {
        listeners: vec![
            listener(4420, SecureChannel::None),
            listener(4421, SecureChannel::Optional),
            listener(4422, SecureChannel::Required),
        ],
        subsystems: vec![SubsystemSpec {
            hosts: HostAccess::allow_any(),
            pool: None,
            nqn: NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces: Vec::new(),
        }],
        settings: TargetSettings::default(),
    })
    .expect("target");
    let mut host = FakeHost::new(target, 0);
    host.bring_up_admin(DISCOVERY_NQN);
    let whole = get_log(&mut host, 0x70, 0, 4 * 1024);
    assert_status(&whole, Status::SUCCESS);
    let announced: Vec<(String, u8, u8)> = (1..4)
        .map(|index| {
            let entry = DiscoveryLogEntry::decode(&whole.data[index * 1024..(index + 1) * 1024].try_into().unwrap());
            let port = entry.transport_service_id_str().unwrap_or_default().to_string();
            (port, entry.transport_requirements & 0b11, entry.transport_specific_address_subtype[0])
        })
        .collect();
    assert_eq!(
        announced,
        vec![
            ("4420".to_string(), transport_requirements::SECURE_CHANNEL_NOT_SPECIFIED, tcp_security_type::NONE),
            ("4421".to_string(), transport_requirements::SECURE_CHANNEL_NOT_REQUIRED, tcp_security_type::TLS_1_3),
            ("4422".to_string(), transport_requirements::SECURE_CHANNEL_REQUIRED, tcp_security_type::TLS_1_3),
        ]
    );
}

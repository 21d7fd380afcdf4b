//! A scripted NVMe/TCP host for driving a target `Connection` without sockets.
#![allow(dead_code)]

pub mod gated;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_auth::{CommandResult, HostAuthError, HostAuthentication, HostStep};
use nvme_spec::fabrics::{
    AuthenticationCommand, ConnectCommand, ConnectData, PropertyGetCommand, PropertySetCommand, CONNECT_DATA_BYTES,
};
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType, IoOpcode};
use nvme_spec::registers::ControllerConfiguration;
use nvme_spec::{
    CommandId, CompletionQueueEntry, ControllerId, NamespaceId, QueueId, SglDescriptor, Status, SubmissionQueueEntry,
};
use nvme_target::{
    Connection, HostAccess, ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec,
};
use nvme_tcp_wire::{
    CapsuleCommand, DataHeader, DigestSettings, InitializeConnectionRequest, PduHeader, PduReader, PduWriter,
    ReadEvent, ReaderLimits, Role,
};
use storage::{Geometry, RamBackend};

pub const NQN: &str = "nqn.2026-11.io.sluice:test";
pub const HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
pub const BLOCK_BYTES: u32 = 512;
pub const NAMESPACE_BLOCKS: u64 = 8192; // 4 MiB

/// A target with one subsystem holding RAM namespaces 1 and 2, a listener serving I/O
/// and discovery (index 0) and a discovery-only listener (index 1).
pub fn test_target() -> Arc<Target> {
    test_target_with(TargetSettings::default())
}

/// `test_target` with other settings (limits, keep-alive bounds).
pub fn test_target_with(settings: TargetSettings) -> Arc<Target> {
    Target::new(TargetSpec {
        listeners: vec![
            ListenerSpec::tcp("127.0.0.1", 4420),
            ListenerSpec::tcp("127.0.0.1", 8009).for_discovery_only(),
        ],
        subsystems: vec![subsystem(
            NQN,
            HostAccess::allow_any(),
            vec![ram_namespace(1, NAMESPACE_BLOCKS), ram_namespace(2, NAMESPACE_BLOCKS)],
        )],
        settings,
    })
    .expect("valid test target")
}

/// Namespace `id`: `block_count` RAM blocks of `BLOCK_BYTES`, identities derived.
pub fn ram_namespace(id: u32, block_count: u64) -> NamespaceSpec {
    NamespaceSpec {
        id: NamespaceId(id),
        backend: RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count }),
        nguid: None,
        uuid: None,
        ana_group: None,
    }
}

/// Subsystem `nqn` with these hosts and namespaces; no pool, serial or model number.
pub fn subsystem(nqn: &str, hosts: HostAccess, namespaces: Vec<NamespaceSpec>) -> SubsystemSpec {
    SubsystemSpec { hosts, pool: None, nqn: nqn.into(), serial_number: None, model_number: None, namespaces }
}

/// A PDU the host received: header and data.
#[derive(Debug, Clone)]
pub struct Received {
    pub header: PduHeader,
    pub data: Vec<u8>,
    pub data_digest_ok: bool,
}

/// The answer to one command.
#[derive(Debug)]
pub struct Answer {
    pub cqe: CompletionQueueEntry,
    pub data: Vec<u8>,
}

pub struct FakeHost {
    pub connection: Connection,
    pub now: Instant,
    reader: PduReader,
    pub writer: PduWriter,
    pub received: VecDeque<Received>,
    current: Option<Received>,
    next_command_id: u16,
    pub wire_bytes_out: Vec<u8>,
}

impl FakeHost {
    pub fn new(target: Arc<Target>, listener: usize) -> Self {
        let now = Instant::now();
        FakeHost {
            connection: Connection::new(target, listener, "test-host".into(), now),
            now,
            reader: PduReader::new(Role::Host, ReaderLimits { max_data_bytes: 1 << 20 }),
            writer: PduWriter::new(),
            received: VecDeque::new(),
            current: None,
            next_command_id: 1,
            wire_bytes_out: Vec::new(),
        }
    }

    /// Sends raw bytes to the target and collects everything it answers.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.connection.handle_received(bytes, self.now);
        self.collect();
    }

    /// Drains the connection's transmit batches through the host PDU reader.
    pub fn collect(&mut self) {
        while let Some(batch) = self.connection.take_transmit() {
            let bytes = batch.to_bytes();
            self.connection.transmit_complete(batch, self.now);
            self.wire_bytes_out.extend_from_slice(&bytes);
            let mut input = &bytes[..];
            loop {
                match self.reader.next_event(&mut input) {
                    Ok(None) => break,
                    Ok(Some(ReadEvent::Header { header, data_length })) => {
                        let pdu = Received { header, data: Vec::new(), data_digest_ok: true };
                        if data_length == 0 {
                            if let PduHeader::IcResp(response) = header {
                                self.reader.set_digests(response.digests);
                            }
                            self.received.push_back(pdu);
                        } else {
                            self.current = Some(pdu);
                        }
                    }
                    Ok(Some(ReadEvent::Data(chunk))) => {
                        self.current.as_mut().expect("data inside a PDU").data.extend_from_slice(chunk)
                    }
                    Ok(Some(ReadEvent::DataEnd { data_digest_ok })) => {
                        let mut pdu = self.current.take().expect("data end inside a PDU");
                        pdu.data_digest_ok = data_digest_ok;
                        self.received.push_back(pdu);
                    }
                    Err(error) => panic!("target sent a broken PDU stream: {error}"),
                }
            }
        }
    }

    /// Encodes and sends one PDU.
    pub fn send_pdu(&mut self, header: PduHeader, data: &[u8]) {
        let mut bytes = Vec::new();
        self.writer.write_header(&header, data.len() as u32, &mut bytes);
        if !matches!(header, PduHeader::H2cTermReq(_)) {
            bytes.extend_from_slice(data);
            self.writer.append_data_digest(&[data], &mut bytes);
        }
        self.send_bytes(&bytes);
    }

    pub fn initialize(&mut self, digests: DigestSettings) {
        self.send_pdu(
            PduHeader::IcReq(InitializeConnectionRequest {
                protocol_format_version: 0,
                host_pdu_data_alignment: 0,
                digests,
                max_r2t_outstanding: 0,
            }),
            &[],
        );
        let response = self.received.pop_front().expect("ICResp");
        let PduHeader::IcResp(response) = response.header else { panic!("expected ICResp, got {response:?}") };
        assert_eq!(response.digests, digests);
        self.writer.set_digests(digests);
    }

    pub fn next_id(&mut self) -> CommandId {
        let id = CommandId(self.next_command_id);
        self.next_command_id = self.next_command_id.wrapping_add(1);
        id
    }

    /// Sends a command capsule; `in_capsule` data rides in the capsule.
    pub fn send_command(&mut self, mut sqe: SubmissionQueueEntry, in_capsule: &[u8]) -> CommandId {
        let id = self.next_id();
        let opcode = sqe.opcode();
        sqe.set_cdw0(opcode, id, nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER);
        if !in_capsule.is_empty() {
            sqe.set_sgl(&SglDescriptor::in_capsule(0, in_capsule.len() as u32));
        }
        self.send_pdu(PduHeader::CapsuleCmd(CapsuleCommand { sqe }), in_capsule);
        id
    }

    /// Runs a command to completion: answers R2Ts from `host_data`, gathers C2HData.
    pub fn command(&mut self, sqe: SubmissionQueueEntry, in_capsule: &[u8], host_data: &[u8]) -> Answer {
        let id = self.send_command(sqe, in_capsule);
        self.await_answer(id, host_data)
    }

    /// The next PDU from the target; while none is there and work the connection
    /// waits for is in flight (a service job, storage), polls it as the runtime
    /// would, for up to 10 s.
    fn next_received(&mut self) -> Option<Received> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(pdu) = self.received.pop_front() {
                return Some(pdu);
            }
            if !self.connection.has_pending_storage() || std::time::Instant::now() > deadline {
                return None;
            }
            self.connection.poll_storage(self.now);
            self.collect();
            if self.received.is_empty() {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    pub fn await_answer(&mut self, id: CommandId, host_data: &[u8]) -> Answer {
        let mut data = Vec::new();
        for _ in 0..10_000 {
            let Some(pdu) = self.next_received() else {
                panic!("no answer for command {id:?}; target phase {:?}", self.connection.phase());
            };
            match pdu.header {
                PduHeader::C2hData(header) => {
                    assert_eq!(header.command_id, id);
                    assert!(pdu.data_digest_ok, "C2HData digest");
                    assert_eq!(header.data_offset as usize, data.len(), "C2HData in order");
                    data.extend_from_slice(&pdu.data);
                }
                PduHeader::R2t(r2t) => {
                    assert_eq!(r2t.command_id, id);
                    let start = r2t.offset as usize;
                    let end = start + r2t.length as usize;
                    let chunk = host_data[start..end].to_vec();
                    self.send_pdu(
                        PduHeader::H2cData(DataHeader {
                            command_id: id,
                            transfer_tag: r2t.transfer_tag,
                            data_offset: r2t.offset,
                            data_length: r2t.length,
                            last: true,
                            success: false,
                        }),
                        &chunk,
                    );
                }
                PduHeader::CapsuleResp(response) => {
                    if response.cqe.command_id == id {
                        return Answer { cqe: response.cqe, data };
                    }
                    panic!("response for another command: {response:?}");
                }
                other => panic!("unexpected PDU {other:?}"),
            }
        }
        panic!("command {id:?} never completed");
    }

    pub fn connect(&mut self, queue: QueueId, controller: ControllerId, nqn: &str, queue_size: u16) -> Answer {
        self.connect_as(queue, controller, nqn, queue_size, HOST_NQN)
    }

    /// Connect with a chosen host NQN.
    pub fn connect_as(
        &mut self,
        queue: QueueId,
        controller: ControllerId,
        nqn: &str,
        queue_size: u16,
        host_nqn: &str,
    ) -> Answer {
        let id = self.send_connect(queue, controller, nqn, queue_size, host_nqn);
        self.await_answer(id, &[])
    }

    /// Sends a Connect without waiting for its answer (which the target may hold).
    pub fn send_connect(
        &mut self,
        queue: QueueId,
        controller: ControllerId,
        nqn: &str,
        queue_size: u16,
        host_nqn: &str,
    ) -> CommandId {
        let mut sqe = SubmissionQueueEntry::default();
        sqe.set_cdw0(AdminOpcode::Fabrics as u8, CommandId(0), 1);
        sqe.dwords[1] = FabricsCommandType::Connect as u32;
        ConnectCommand {
            record_format: 0,
            queue_id: queue,
            submission_queue_size: queue_size - 1,
            connect_attributes: 0,
            keep_alive_timeout_ms: if queue.is_admin() { 5000 } else { 0 },
        }
        .encode_into(&mut sqe);
        let mut data = [0u8; CONNECT_DATA_BYTES];
        ConnectData::new(host_id_of(host_nqn), controller, nqn, host_nqn).encode(&mut data);
        self.send_command(sqe, &data)
    }

    pub fn property_get(&mut self, offset: u32, size_bytes: u8) -> Answer {
        let mut sqe = SubmissionQueueEntry::default();
        sqe.set_cdw0(AdminOpcode::Fabrics as u8, CommandId(0), 1);
        sqe.dwords[1] = FabricsCommandType::PropertyGet as u32;
        PropertyGetCommand { attributes: if size_bytes == 8 { 1 } else { 0 }, offset }.encode_into(&mut sqe);
        self.command(sqe, &[], &[])
    }

    pub fn property_set(&mut self, offset: u32, value: u64) -> Answer {
        let mut sqe = SubmissionQueueEntry::default();
        sqe.set_cdw0(AdminOpcode::Fabrics as u8, CommandId(0), 1);
        sqe.dwords[1] = FabricsCommandType::PropertySet as u32;
        PropertySetCommand { attributes: 0, offset, value }.encode_into(&mut sqe);
        self.command(sqe, &[], &[])
    }

    /// ICReq, admin Connect and CC.EN=1 as the Linux host does; returns the CNTLID.
    pub fn bring_up_admin(&mut self, nqn: &str) -> ControllerId {
        self.bring_up_admin_as(nqn, HOST_NQN)
    }

    /// `bring_up_admin` with a chosen host NQN.
    pub fn bring_up_admin_as(&mut self, nqn: &str, host_nqn: &str) -> ControllerId {
        self.initialize(DigestSettings { header: false, data: false });
        let answer = self.connect_as(QueueId::ADMIN, ControllerId::DYNAMIC, nqn, 32, host_nqn);
        assert!(answer.cqe.status.is_success(), "admin connect: {:?}", answer.cqe.status);
        let controller = ControllerId(answer.cqe.result_dw0 as u16);
        assert!(self.enable().cqe.status.is_success());
        controller
    }

    /// Property Set CC: EN=1 with the NVM command set's queue entry sizes.
    pub fn enable(&mut self) -> Answer {
        let cc = ControllerConfiguration(0)
            .with_io_submission_queue_entry_size(6)
            .with_io_completion_queue_entry_size(4)
            .with_enable(true);
        self.property_set(nvme_spec::fabrics::property_offset::CC, u64::from(cc.raw()))
    }

    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        self.connection.handle_timeout(self.now);
        self.collect();
    }
}

/// An SQE for an admin or I/O command with a transport SGL of `length` bytes.
/// The HOSTID a fake host sends: one per host NQN, the same on each Connect.
pub fn host_id_of(host_nqn: &str) -> [u8; 16] {
    let mut id = [7u8; 16];
    for (index, byte) in host_nqn.bytes().enumerate() {
        id[index % 16] ^= byte.rotate_left((index / 16) as u32);
    }
    id
}

pub fn sqe(opcode: u8, nsid: u32, length: u32) -> SubmissionQueueEntry {
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(opcode, CommandId(0), 1);
    sqe.dwords[1] = nsid;
    if length > 0 {
        sqe.set_sgl(&SglDescriptor::transport(length));
    }
    sqe
}

pub fn identify(cns: u8, nsid: u32) -> SubmissionQueueEntry {
    let mut sqe = sqe(AdminOpcode::Identify as u8, nsid, 4096);
    sqe.dwords[10] = u32::from(cns);
    sqe
}

/// Identify Controller over `host`'s (admin) queue, decoded.
pub fn identify_controller(host: &mut FakeHost) -> nvme_spec::IdentifyController {
    let answer = host.command(identify(nvme_spec::identify::cns::CONTROLLER, 0), &[], &[]);
    assert_status(&answer, Status::SUCCESS);
    let raw: [u8; nvme_spec::identify::IDENTIFY_DATA_BYTES] = answer.data.try_into().expect("4096 bytes");
    nvme_spec::IdentifyController::decode(&raw)
}

pub fn read_write(opcode: IoOpcode, nsid: u32, lba: u64, blocks: u32) -> SubmissionQueueEntry {
    let mut sqe = sqe(opcode as u8, nsid, blocks * BLOCK_BYTES);
    sqe.dwords[10] = lba as u32;
    sqe.dwords[11] = (lba >> 32) as u32;
    sqe.dwords[12] = blocks - 1;
    sqe
}

pub fn assert_status(answer: &Answer, expected: Status) {
    assert_eq!(answer.cqe.status.kind(), expected.kind(), "status {:?}", answer.cqe.status);
}

pub fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length).map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// An admin queue brought up on `target` (host HOST_NQN) and one I/O queue of depth
/// `depth` connected to its controller, without digests.
pub fn admin_and_io(target: &Arc<Target>, depth: u16) -> (FakeHost, FakeHost) {
    let mut admin = FakeHost::new(target.clone(), 0);
    let cntlid = admin.bring_up_admin(NQN);
    let mut io = FakeHost::new(target.clone(), 0);
    io.initialize(DigestSettings { header: false, data: false });
    assert_status(&io.connect(QueueId(1), cntlid, NQN, depth), Status::SUCCESS);
    (admin, io)
}

/// An Authentication Send or Receive (security protocol 0xE9, SPSP 1/1) of `length`
/// bytes; without a data pointer.
pub fn authentication_sqe(fabrics_type: FabricsCommandType, length: u32) -> SubmissionQueueEntry {
    let mut sqe = sqe(AdminOpcode::Fabrics as u8, fabrics_type as u32, 0);
    AuthenticationCommand {
        security_protocol_specific_0: 1,
        security_protocol_specific_1: 1,
        security_protocol: 0xE9,
        length,
    }
    .encode_into(&mut sqe);
    sqe
}

/// Authentication Send of `payload` (in capsule).
pub fn authentication_send(host: &mut FakeHost, payload: &[u8]) -> Answer {
    host.command(authentication_sqe(FabricsCommandType::AuthenticationSend, payload.len() as u32), payload, &[])
}

/// Authentication Receive of at most `allocation_length` bytes.
pub fn authentication_receive(host: &mut FakeHost, allocation_length: u32) -> Answer {
    let mut sqe = authentication_sqe(FabricsCommandType::AuthenticationReceive, allocation_length);
    sqe.set_sgl(&SglDescriptor::transport(allocation_length));
    host.command(sqe, &[], &[])
}

/// Runs the host side of DH-HMAC-CHAP (nvme-auth's state machine, started here) over
/// the scripted connection until it ends; every message received must be padded to
/// the allocation length.
pub fn run_authentication(host: &mut FakeHost, authentication: &mut HostAuthentication) -> Result<(), HostAuthError> {
    let mut step = authentication.start();
    for _ in 0..10 {
        step = match step {
            HostStep::Send(payload) => {
                let answer = authentication_send(host, &payload);
                if answer.cqe.status.is_success() {
                    authentication.on_result(CommandResult::Sent)
                } else {
                    authentication.on_result(CommandResult::Status(answer.cqe.status.field()))
                }
            }
            HostStep::Receive(allocation_length) => {
                let answer = authentication_receive(host, allocation_length);
                if answer.cqe.status.is_success() {
                    assert_eq!(answer.data.len(), allocation_length as usize, "the message is padded to AL");
                    authentication.on_result(CommandResult::Received(&answer.data))
                } else {
                    authentication.on_result(CommandResult::Status(answer.cqe.status.field()))
                }
            }
            HostStep::Authenticated => return Ok(()),
            HostStep::Failed(error) => return Err(error),
        };
    }
    panic!("the exchange did not end");
}

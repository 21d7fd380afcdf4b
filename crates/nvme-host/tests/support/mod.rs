//! Test support: a `HostQueue` wired to the real target `Connection` in-process, and a
//! scripted fake target for misbehaviour tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_host::{commands, HostCommand, HostCompletion, HostQueue, QueueConfig, QueueState};
use nvme_spec::fabrics::property_offset;
use nvme_spec::features::{feature_id, number_of_queues_request};
use nvme_spec::registers::ControllerConfiguration;
use nvme_spec::{CompletionQueueEntry, ControllerId, NamespaceId, QueueId, Status};
use nvme_target::{Connection, ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use nvme_tcp_wire::{
    CapsuleResponse, DigestSettings, InitializeConnectionResponse, PduHeader, PduReader, PduWriter, ReadEvent,
    ReaderLimits, Role,
};
use storage::{Geometry, RamBackend};

pub const NQN: &str = "nqn.2026-11.io.sluice:host-test";
pub const HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000beef";
pub const BLOCK_BYTES: u32 = 512;
pub const NAMESPACE_BLOCKS: u64 = 8192; // 4 MiB
pub const NAMESPACE: NamespaceId = NamespaceId(1);

/// A target with one subsystem holding RAM namespace 1.
pub fn test_target() -> Arc<Target> {
    Target::new(TargetSpec {
        listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
        subsystems: vec![SubsystemSpec {
            hosts: nvme_target::HostAccess::allow_any(),
            pool: None,
            nqn: NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces: vec![NamespaceSpec {
                id: NAMESPACE,
                backend: RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: NAMESPACE_BLOCKS }),
                nguid: None,
                uuid: None,
                ana_group: None,
            }],
        }],
        settings: TargetSettings::default(),
    })
    .expect("valid test target")
}

/// Small deterministic RNG (xorshift64*), so tests need no extra crates.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..bound` (bound > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

pub fn admin_config(digests: DigestSettings) -> QueueConfig {
    QueueConfig {
        queue_id: QueueId::ADMIN,
        queue_size: 32,
        controller_id: ControllerId::DYNAMIC,
        subsystem_nqn: NQN.into(),
        host_nqn: HOST_NQN.into(),
        host_identifier: [7; 16],
        keep_alive_timeout_ms: 5000,
        digests,
        command_timeout_ms: 30_000,
        max_r2t_outstanding: 0,
        dhchap: None,
    }
}

pub fn io_config(controller_id: ControllerId, queue_id: u16, queue_size: u16, digests: DigestSettings) -> QueueConfig {
    QueueConfig {
        queue_id: QueueId(queue_id),
        queue_size,
        controller_id,
        keep_alive_timeout_ms: 0,
        ..admin_config(digests)
    }
}

/// A host queue and a target connection joined by an in-memory wire that cuts the
/// byte stream into random pieces (or not at all when `max_chunk_bytes` is 0).
pub struct Link {
    pub connection: Connection,
    pub host: HostQueue,
    pub now: Instant,
    rng: Rng,
    max_chunk_bytes: usize,
    host_bytes: Vec<u8>,
    /// What the host sends, as the runtime gets it: write data by reference.
    batch: nvme_host::TransmitBatch,
    pub bytes_to_target: usize,
    pub bytes_to_host: usize,
}

impl Link {
    pub fn new(target: Arc<Target>, config: QueueConfig, max_chunk_bytes: usize, seed: u64) -> Self {
        let now = Instant::now();
        Link {
            connection: Connection::new(target, 0, "host-under-test".into(), now),
            host: HostQueue::new(config, now),
            now,
            rng: Rng::new(seed),
            max_chunk_bytes,
            host_bytes: Vec::new(),
            batch: nvme_host::TransmitBatch::new(),
            bytes_to_target: 0,
            bytes_to_host: 0,
        }
    }

    fn chunks<'a>(rng: &mut Rng, max: usize, bytes: &'a [u8]) -> Vec<&'a [u8]> {
        if max == 0 {
            return vec![bytes];
        }
        let mut pieces = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let length = (1 + rng.below(max as u64) as usize).min(rest.len());
            let (head, tail) = rest.split_at(length);
            pieces.push(head);
            rest = tail;
        }
        pieces
    }

    /// Moves bytes both ways until neither side has anything to send.
    pub fn pump(&mut self) {
        for _ in 0..100_000 {
            let mut moved = false;
            self.host_bytes.clear();
            // Sent as a driver does: the batch's pieces, then the batch let go of.
            self.batch.clear();
            if self.host.transmit_batch(&mut self.batch) > 0 {
                self.batch.copy_to(&mut self.host_bytes);
                self.batch.clear();
                moved = true;
                self.bytes_to_target += self.host_bytes.len();
                let bytes = std::mem::take(&mut self.host_bytes);
                for piece in Self::chunks(&mut self.rng, self.max_chunk_bytes, &bytes) {
                    self.connection.handle_received(piece, self.now);
                }
                self.host_bytes = bytes;
            }
            while let Some(batch) = self.connection.take_transmit() {
                moved = true;
                let bytes = batch.to_bytes();
                self.connection.transmit_complete(batch, self.now);
                self.bytes_to_host += bytes.len();
                for piece in Self::chunks(&mut self.rng, self.max_chunk_bytes, &bytes) {
                    self.host.handle_received(piece, self.now);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the link never went quiet");
    }

    pub fn connect(&mut self) -> ControllerId {
        self.pump();
        match self.host.state() {
            QueueState::Ready { controller_id } => controller_id,
            other => panic!("queue not ready: {other:?}, error {:?}", self.host.error()),
        }
    }

    /// Submits and pumps until this command completes.
    pub fn run(&mut self, mut command: HostCommand) -> HostCompletion {
        command.user_tag = 0xC0FFEE;
        self.host.submit(command, self.now).expect("submit");
        self.pump();
        let completion = self.host.poll_completion().expect("a completion");
        assert_eq!(completion.user_tag, 0xC0FFEE);
        completion
    }

    pub fn run_ok(&mut self, command: HostCommand) -> HostCompletion {
        let completion = self.run(command);
        assert!(completion.cqe.status.is_success(), "status {:?}", completion.cqe.status);
        completion
    }
}

/// Admin queue connected and enabled (CC.EN, CSTS.RDY), Number of Queues set; and
/// one I/O queue of `io_queue_size` connected to it.
pub fn bring_up(digests: DigestSettings, max_chunk_bytes: usize, seed: u64, io_queue_size: u16) -> (Link, Link) {
    let target = test_target();
    let mut admin = Link::new(target.clone(), admin_config(digests), max_chunk_bytes, seed);
    let controller_id = admin.connect();
    let cc = ControllerConfiguration(0)
        .with_io_submission_queue_entry_size(6)
        .with_io_completion_queue_entry_size(4)
        .with_enable(true);
    admin.run_ok(commands::property_set(property_offset::CC, u64::from(cc.raw())));
    let csts = admin.run_ok(commands::property_get(property_offset::CSTS, 4));
    assert_eq!(csts.cqe.result_dw0 & 1, 1, "CSTS.RDY");
    admin.run_ok(commands::set_features(
        feature_id::NUMBER_OF_QUEUES,
        NamespaceId::NONE,
        number_of_queues_request(4, 4),
        false,
    ));
    let mut io = Link::new(target, io_config(controller_id, 1, io_queue_size, digests), max_chunk_bytes, seed ^ 0x55);
    assert_eq!(io.connect(), controller_id);
    (admin, io)
}

pub fn pattern(length: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..length).map(|_| rng.next() as u8).collect()
}

/// A scripted target: decodes what the host sends and encodes hand-made answers.
pub struct FakeTarget {
    pub reader: PduReader,
    pub writer: PduWriter,
    pub received: Vec<(PduHeader, Vec<u8>)>,
    current: Option<(PduHeader, Vec<u8>)>,
}

impl Default for FakeTarget {
    fn default() -> Self {
        FakeTarget {
            reader: PduReader::new(Role::Controller, ReaderLimits { max_data_bytes: 1 << 20 }),
            writer: PduWriter::new(),
            received: Vec::new(),
            current: None,
        }
    }
}

impl FakeTarget {
    /// Takes everything the host wants to send and decodes it.
    pub fn take_from(&mut self, host: &mut HostQueue) {
        let mut bytes = Vec::new();
        host.transmit(&mut bytes);
        let mut input = &bytes[..];
        loop {
            match self.reader.next_event(&mut input) {
                Ok(None) => break,
                Ok(Some(ReadEvent::Header { header, data_length })) => {
                    if let PduHeader::IcReq(request) = header {
                        self.reader.set_digests(request.digests);
                    }
                    if data_length == 0 {
                        self.received.push((header, Vec::new()));
                    } else {
                        self.current = Some((header, Vec::new()));
                    }
                }
                Ok(Some(ReadEvent::Data(chunk))) => {
                    self.current.as_mut().expect("data in a PDU").1.extend_from_slice(chunk)
                }
                Ok(Some(ReadEvent::DataEnd { data_digest_ok })) => {
                    assert!(data_digest_ok, "host data digest");
                    let pdu = self.current.take().expect("data end in a PDU");
                    self.received.push(pdu);
                }
                Err(error) => panic!("host sent a broken stream: {error}"),
            }
        }
    }

    /// Encodes one PDU (header, data, data digest).
    pub fn pdu(&self, header: PduHeader, data: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.writer.write_header(&header, data.len() as u32, &mut bytes);
        bytes.extend_from_slice(data);
        self.writer.append_data_digest(&[data], &mut bytes);
        bytes
    }

    pub fn ic_response(digests: DigestSettings) -> InitializeConnectionResponse {
        InitializeConnectionResponse {
            protocol_format_version: 0,
            controller_pdu_data_alignment: 0,
            digests,
            max_h2c_data_bytes: 128 * 1024,
        }
    }

    pub fn response(command_id: u16, status: Status, dw0: u32) -> PduHeader {
        PduHeader::CapsuleResp(CapsuleResponse {
            cqe: CompletionQueueEntry {
                result_dw0: dw0,
                command_id: nvme_spec::CommandId(command_id),
                status,
                ..CompletionQueueEntry::default()
            },
        })
    }

    /// Brings `host` to Ready as a well-behaved target would (ICResp, Connect ok).
    pub fn accept(&mut self, host: &mut HostQueue, now: Instant, digests: DigestSettings) {
        self.take_from(host);
        let ic = PduWriter::new();
        let mut bytes = Vec::new();
        ic.write_header(&PduHeader::IcResp(Self::ic_response(digests)), 0, &mut bytes);
        host.handle_received(&bytes, now);
        self.writer.set_digests(digests);
        self.take_from(host);
        let connect = self.pdu(Self::response(0, Status::SUCCESS, 0x0042), &[]);
        host.handle_received(&connect, now);
        assert!(matches!(host.state(), QueueState::Ready { .. }), "{:?} {:?}", host.state(), host.error());
        self.received.clear();
    }

    /// The last command capsule the host sent.
    pub fn last_command(&self) -> nvme_spec::SubmissionQueueEntry {
        self.received
            .iter()
            .rev()
            .find_map(|(header, _)| match header {
                PduHeader::CapsuleCmd(capsule) => Some(capsule.sqe),
                _ => None,
            })
            .expect("a command capsule")
    }
}

pub fn later(now: Instant, milliseconds: u64) -> Instant {
    now + Duration::from_millis(milliseconds)
}

//! Any sequence of PDUs (well-formed or not, in any chunking, with time passing)
//! against a target connection: never a panic, never an unbounded buffer, and
//! whatever the target sends is a well-formed PDU stream a host can parse.
#![no_main]

use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use nvme_spec::fabrics::{ConnectCommand, ConnectData, PropertySetCommand, CONNECT_DATA_BYTES};
use nvme_spec::registers::ControllerConfiguration;
use nvme_spec::{CommandId, ControllerId, NamespaceId, QueueId, SglDescriptor, SubmissionQueueEntry};
use nvme_target::{Connection, ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use nvme_tcp_wire::{
    CapsuleCommand, DataHeader, DigestSettings, InitializeConnectionRequest, PduHeader, PduReader,
    PduWriter, ReadEvent, ReaderLimits, Role,
};
use storage::{Geometry, Pool, RamBackend, TableStore};

const NQN: &str = "nqn.2026-11.io.sluice:fuzz";

fn target() -> Arc<Target> {
    Target::new(TargetSpec {
        listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
        subsystems: vec![SubsystemSpec {
            hosts: nvme_target::HostAccess::allow_any(),
            // A pool, so Namespace Management and Attachment are reachable too.
            pool: Some(Arc::new(
                Pool::open_with_unit_size(
                    RamBackend::new(Geometry { block_size_bytes: 512, block_count: 8192 }),
                    TableStore::memory(),
                    64 * 1024,
                )
                .expect("valid pool"),
            )),
            nqn: NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces: vec![NamespaceSpec {
                id: NamespaceId(1),
                backend: RamBackend::new(Geometry { block_size_bytes: 512, block_count: 2048 }),
                nguid: None,
                uuid: None,
                ana_group: None,
            }],
        }],
        settings: TargetSettings::default(),
    })
    .expect("valid target")
}

/// Reads what the target sent and checks it parses as a host would.
struct Observer {
    reader: PduReader,
}

impl Observer {
    fn drain(&mut self, connection: &mut Connection, now: Instant) {
        while let Some(batch) = connection.take_transmit() {
            let bytes = batch.to_bytes();
            connection.transmit_complete(batch, now);
            let mut input = &bytes[..];
            loop {
                match self.reader.next_event(&mut input) {
                    Ok(None) => break,
                    Ok(Some(ReadEvent::Header { header: PduHeader::IcResp(response), .. })) => {
                        self.reader.set_digests(response.digests)
                    }
                    Ok(Some(_)) => {}
                    Err(error) => panic!("target sent a malformed stream: {error}"),
                }
            }
        }
    }
}

fn capsule(writer: &PduWriter, sqe: SubmissionQueueEntry, data: &[u8], out: &mut Vec<u8>) {
    writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe }), data.len() as u32, out);
    out.extend_from_slice(data);
    writer.append_data_digest(&[data], out);
}

/// ICReq, admin or I/O Connect and CC.EN as a well-behaved host would send them.
fn prologue(writer: &mut PduWriter, digests: DigestSettings, queue: QueueId, controller: ControllerId, out: &mut Vec<u8>) {
    let request = InitializeConnectionRequest { protocol_format_version: 0, host_pdu_data_alignment: 0, digests, max_r2t_outstanding: 3 };
    writer.write_header(&PduHeader::IcReq(request), 0, out);
    writer.set_digests(digests);
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(0x7F, CommandId(1), 1);
    sqe.dwords[1] = 0x01;
    ConnectCommand { record_format: 0, queue_id: queue, submission_queue_size: 7, connect_attributes: 0, keep_alive_timeout_ms: 5000 }
        .encode_into(&mut sqe);
    sqe.set_sgl(&SglDescriptor::in_capsule(0, CONNECT_DATA_BYTES as u32));
    let mut data = [0u8; CONNECT_DATA_BYTES];
    ConnectData::new([1; 16], controller, NQN, "nqn.2014-08.org.nvmexpress:uuid:fuzz").encode(&mut data);
    capsule(writer, sqe, &data, out);
    if queue.is_admin() {
        let mut sqe = SubmissionQueueEntry::default();
        sqe.set_cdw0(0x7F, CommandId(2), 1);
        sqe.dwords[1] = 0x00;
        let cc = ControllerConfiguration(0).with_io_submission_queue_entry_size(6).with_io_completion_queue_entry_size(4).with_enable(true);
        PropertySetCommand { attributes: 0, offset: 0x14, value: u64::from(cc.raw()) }.encode_into(&mut sqe);
        capsule(writer, sqe, &[], out);
    }
}

/// Turns fuzz bytes into a stream: structured PDUs (so the fuzzer reaches deep
/// states) mixed with raw bytes (so it can break anything).
fn script(writer: &PduWriter, mut input: &[u8], out: &mut Vec<u8>) {
    let mut take = |count: usize| -> Option<Vec<u8>> {
        if input.len() < count {
            return None;
        }
        let (head, rest) = input.split_at(count);
        input = rest;
        Some(head.to_vec())
    };
    while let Some(op) = take(1) {
        match op[0] % 4 {
            0 => {
                let Some(raw) = take(64) else { return };
                let mut sqe = SubmissionQueueEntry::decode(&raw.try_into().unwrap());
                let Some(length) = take(1) else { return };
                // Quadratic, so small lengths stay fine-grained and the largest
                // (138 178 bytes) pass the 128 KiB in-capsule and PDU limits.
                let length = usize::from(length[0]).pow(2) * 17 / 8;
                if length > 0 {
                    sqe.set_sgl(&SglDescriptor::in_capsule(0, length as u32));
                }
                let data = vec![0xA5; length];
                capsule(writer, sqe, &data, out);
            }
            1 => {
                let Some(fields) = take(8) else { return };
                let length = u32::from(u16::from_le_bytes([fields[6], fields[7]]));
                let header = DataHeader {
                    command_id: CommandId(u16::from_le_bytes([fields[0], fields[1]])),
                    transfer_tag: u16::from(fields[2] % 16),
                    data_offset: u32::from(fields[3]) * 512,
                    data_length: length,
                    last: fields[4] & 1 != 0,
                    success: false,
                };
                let data = vec![0x5A; length as usize];
                writer.write_header(&PduHeader::H2cData(header), length, out);
                out.extend_from_slice(&data);
                writer.append_data_digest(&[&data], out);
            }
            _ => {
                let Some(length) = take(1) else { return };
                let Some(raw) = take(usize::from(length[0])) else { return };
                out.extend_from_slice(&raw);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let digests = DigestSettings { header: data[0] & 1 != 0, data: data[0] & 2 != 0 };
    let io_queue = data[0] & 4 != 0;
    let chunk = usize::from(data[1]).max(1);
    let tick_ms = u64::from(data[2]) * 50;
    let body = &data[3..];

    let target = target();
    let start = Instant::now();
    let mut admin = Connection::new(target.clone(), 0, "fuzz-admin".into(), start);
    let mut observer = Observer { reader: PduReader::new(Role::Host, ReaderLimits { max_data_bytes: 1 << 20 }) };
    let mut writer = PduWriter::new();
    let mut stream = Vec::new();
    prologue(&mut writer, digests, QueueId::ADMIN, ControllerId::DYNAMIC, &mut stream);

    let (connection, mut stream, mut observer) = if io_queue {
        admin.handle_received(&stream, start);
        observer.drain(&mut admin, start);
        let controller = admin.binding().map(|binding| binding.controller.id).expect("admin connected");
        let io = Connection::new(target, 0, "fuzz-io".into(), start);
        let mut io_writer = PduWriter::new();
        let mut io_stream = Vec::new();
        prologue(&mut io_writer, digests, QueueId(1), controller, &mut io_stream);
        script(&io_writer, body, &mut io_stream);
        (io, io_stream, Observer { reader: PduReader::new(Role::Host, ReaderLimits { max_data_bytes: 1 << 20 }) })
    } else {
        script(&writer, body, &mut stream);
        (admin, stream, observer)
    };
    let mut connection = connection;
    let mut now = start;
    for piece in stream.chunks(chunk) {
        connection.handle_received(piece, now);
        observer.drain(&mut connection, now);
        now += Duration::from_millis(tick_ms);
        connection.handle_timeout(now);
        observer.drain(&mut connection, now);
        if connection.wants_close() {
            break;
        }
    }
    stream.clear();
    connection.handle_closed();
});

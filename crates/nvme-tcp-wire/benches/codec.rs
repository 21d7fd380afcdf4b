//! Reader throughput over a stream of 4 KiB CapsuleCmd / H2CData PDUs, with and
//! without digests, plus the writer's cost per PDU header.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nvme_spec::{CommandId, SglDescriptor, SubmissionQueueEntry};
use nvme_tcp_wire::*;

const DATA_BYTES: usize = 4096;
const PDUS: usize = 256;
/// Bytes handed to the reader per call, like one socket read.
const READ_BYTES: usize = 64 * 1024;

fn headers() -> (PduHeader, PduHeader) {
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(0x01, CommandId(7), 1);
    sqe.set_sgl(&SglDescriptor::in_capsule(0, DATA_BYTES as u32));
    let command = PduHeader::CapsuleCmd(CapsuleCommand { sqe });
    let data = PduHeader::H2cData(DataHeader {
        command_id: CommandId(8),
        transfer_tag: 1,
        data_offset: 0,
        data_length: DATA_BYTES as u32,
        last: true,
        success: false,
    });
    (command, data)
}

fn stream(digests: DigestSettings) -> Vec<u8> {
    let mut writer = PduWriter::new();
    let mut out = Vec::new();
    writer.write_header(
        &PduHeader::IcReq(InitializeConnectionRequest {
            protocol_format_version: 0,
            host_pdu_data_alignment: 0,
            digests,
            max_r2t_outstanding: 0,
        }),
        0,
        &mut out,
    );
    writer.set_digests(digests);
    let payload: Vec<u8> = (0..DATA_BYTES).map(|i| (i * 31) as u8).collect();
    let (command, data) = headers();
    for index in 0..PDUS {
        let header = if index % 2 == 0 { &command } else { &data };
        writer.write_header(header, DATA_BYTES as u32, &mut out);
        out.extend_from_slice(&payload);
        writer.append_data_digest(&[&payload], &mut out);
    }
    out
}

fn read_stream(stream: &[u8], digests: DigestSettings) -> usize {
    let mut reader = PduReader::new(Role::Controller, ReaderLimits { max_data_bytes: 1 << 20 });
    let mut data_bytes = 0;
    let mut headers = 0;
    for piece in stream.chunks(READ_BYTES) {
        let mut input = piece;
        while let Some(event) = reader.next_event(&mut input).expect("valid stream") {
            match event {
                ReadEvent::Header { header, .. } => {
                    if matches!(header, PduHeader::IcReq(_)) {
                        reader.set_digests(digests);
                    }
                    headers += 1;
                    black_box(&header);
                }
                ReadEvent::Data(data) => data_bytes += black_box(data).len(),
                ReadEvent::DataEnd { data_digest_ok } => assert!(data_digest_ok),
            }
        }
    }
    assert_eq!(headers, PDUS + 1);
    data_bytes
}

fn reader(c: &mut Criterion) {
    let mut group = c.benchmark_group("reader");
    for (name, digests) in [
        ("no_digests", DigestSettings { header: false, data: false }),
        ("header_and_data_digests", DigestSettings { header: true, data: true }),
    ] {
        let bytes = stream(digests);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("4KiB_cmd_h2c", name), &bytes, |b, bytes| {
            b.iter(|| read_stream(bytes, digests))
        });
    }
    group.finish();
}

fn writer(c: &mut Criterion) {
    let mut group = c.benchmark_group("writer");
    let (command, _) = headers();
    for (name, digests) in [
        ("no_digests", DigestSettings { header: false, data: false }),
        ("header_digest", DigestSettings { header: true, data: false }),
    ] {
        let mut writer = PduWriter::new();
        writer.set_digests(digests);
        let mut out = Vec::with_capacity(128);
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("capsule_cmd_header", name), |b| {
            b.iter(|| {
                out.clear();
                writer.write_header(black_box(&command), DATA_BYTES as u32, &mut out)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, reader, writer);
criterion_main!(benches);

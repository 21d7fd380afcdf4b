//! The target core's own cost per I/O command, without sockets or a kernel: batches
//! of 4 KiB reads (and writes, in-capsule) on a RAM namespace through one I/O queue
//! of a `Connection`, from the received capsules to the transmit batch handed back as
//! sent, as the runtime drives it. What a change to the command path costs shows here
//! as time per command, far below the noise of a loopback benchmark (the latency split
//! of issue 48 was measured this way against the build before it).
//!
//! `cargo bench -p nvme-target --bench command_path`

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nvme_spec::opcode::IoOpcode;
use nvme_spec::{CommandId, SglDescriptor};
use nvme_tcp_wire::{CapsuleCommand, PduHeader, PduWriter};

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

/// Commands per batch: one receive holding this many capsules, like a busy host's
/// socket read at queue depth 32.
const BATCH_COMMANDS: u16 = 32;
/// Blocks per command: 4 KiB of 512-byte blocks.
const BLOCKS_PER_COMMAND: u32 = 8;

/// The capsules of one batch, encoded once.
fn batch(opcode: IoOpcode) -> Vec<u8> {
    let writer = PduWriter::new();
    let mut bytes = Vec::new();
    let data = vec![0x5a; (BLOCKS_PER_COMMAND * support::BLOCK_BYTES) as usize];
    for index in 0..BATCH_COMMANDS {
        let lba = u64::from(index) * u64::from(BLOCKS_PER_COMMAND);
        let mut sqe = support::read_write(opcode, 1, lba, BLOCKS_PER_COMMAND);
        sqe.set_cdw0(opcode as u8, CommandId(index), nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER);
        let in_capsule: &[u8] = if opcode == IoOpcode::Write { &data } else { &[] };
        if !in_capsule.is_empty() {
            sqe.set_sgl(&SglDescriptor::in_capsule(0, in_capsule.len() as u32));
        }
        writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe }), in_capsule.len() as u32, &mut bytes);
        bytes.extend_from_slice(in_capsule);
    }
    bytes
}

fn command_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("command_path");
    group.throughput(Throughput::Elements(u64::from(BATCH_COMMANDS)));
    for opcode in [IoOpcode::Read, IoOpcode::Write] {
        let target = support::test_target();
        let (_admin, mut io) = support::admin_and_io(&target, 128);
        let bytes = batch(opcode);
        let name = if opcode == IoOpcode::Read { "read-4k" } else { "write-4k-in-capsule" };
        group.bench_with_input(BenchmarkId::new(name, BATCH_COMMANDS), &bytes, |b, bytes| {
            b.iter(|| {
                let connection = &mut io.connection;
                let now = Instant::now();
                connection.handle_received(bytes, now);
                connection.poll_storage(now);
                let mut sent = 0;
                while let Some(batch) = connection.take_transmit() {
                    sent += 1;
                    connection.transmit_complete(batch, Instant::now());
                }
                black_box(sent)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, command_path);
criterion_main!(benches);

//! RAM backend throughput for 4 KiB and 128 KiB reads and writes through the public
//! submit/reap path, cold (strided through DRAM) and hot (in cache), each with a plain
//! `copy_from_slice` of the same size as the ceiling.
//!
//! Run with `cargo bench -p storage --bench ram`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use storage::{Backend, BackendQueue, Geometry, IoCompletion, IoOp, IoRequest, RamBackend};

const BLOCK_SIZE_BYTES: u32 = 4096;
/// 64 MiB: larger than the caches, so the I/Os below walk through memory like a real
/// namespace would rather than hitting one hot cache line set.
const NAMESPACE_BLOCKS: u64 = 16384;
const IO_SIZES_BYTES: [usize; 2] = [4096, 128 * 1024];

/// Runs one request and recycles its buffer, as the target does.
fn run(queue: &mut dyn BackendQueue, out: &mut Vec<IoCompletion>, op: IoOp, buffer: Vec<u8>) -> Vec<u8> {
    queue.submit(IoRequest { token: 0, op, buffer });
    queue.reap(out);
    let completion = out.pop().expect("synchronous completion");
    debug_assert_eq!(completion.result, Ok(()));
    completion.buffer
}

fn bench_ram(criterion: &mut Criterion) {
    let geometry = Geometry { block_size_bytes: BLOCK_SIZE_BYTES, block_count: NAMESPACE_BLOCKS };
    let backend = RamBackend::new(geometry);
    let mut queue = backend.open_queue();
    let mut out = Vec::with_capacity(1);
    // Populate every chunk first so the measurement is the steady state, not allocation.
    let fill = vec![0x5Au8; 1 << 20];
    let chunk_blocks = (fill.len() / BLOCK_SIZE_BYTES as usize) as u64;
    for lba in (0..NAMESPACE_BLOCKS).step_by(chunk_blocks as usize) {
        let op = IoOp::Write { lba, blocks: chunk_blocks as u32, force_unit_access: false };
        run(&mut *queue, &mut out, op, fill.clone());
    }

    // The ceiling for every copy below: a plain memcpy over the same namespace size.
    let source = vec![0x5Au8; NAMESPACE_BLOCKS as usize * BLOCK_SIZE_BYTES as usize];

    // "cold": consecutive I/Os stride through the 64 MiB namespace, so data comes from
    // DRAM as it would for a real working set. "hot": every I/O hits the same range,
    // which stays in cache and shows the copy loop and per-request overhead alone.
    for (name, stride_factor) in [("ram_cold", 7u64), ("ram_hot", 0)] {
        let mut group = criterion.benchmark_group(name);
        group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
        for size in IO_SIZES_BYTES {
            group.throughput(Throughput::Bytes(size as u64));
            let blocks = (size / BLOCK_SIZE_BYTES as usize) as u32;
            let stride = u64::from(blocks) * stride_factor;
            let mut buffer = vec![0xA5u8; size];
            let mut lba = 0;
            let mut next_lba = move || {
                lba = (lba + stride) % (NAMESPACE_BLOCKS - u64::from(blocks));
                lba
            };

            group.bench_with_input(BenchmarkId::new("write", size), &size, |bencher, _| {
                bencher.iter(|| {
                    let op = IoOp::Write { lba: next_lba(), blocks, force_unit_access: false };
                    buffer = run(&mut *queue, &mut out, op, std::mem::take(&mut buffer));
                });
            });
            group.bench_with_input(BenchmarkId::new("read", size), &size, |bencher, _| {
                bencher.iter(|| {
                    let op = IoOp::Read { lba: next_lba(), blocks };
                    buffer = run(&mut *queue, &mut out, op, std::mem::take(&mut buffer));
                });
            });
            group.bench_with_input(BenchmarkId::new("memcpy", size), &size, |bencher, _| {
                bencher.iter(|| {
                    let offset = next_lba() as usize * BLOCK_SIZE_BYTES as usize;
                    buffer.copy_from_slice(&source[offset..offset + size]);
                    std::hint::black_box(&buffer);
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_ram);
criterion_main!(benches);

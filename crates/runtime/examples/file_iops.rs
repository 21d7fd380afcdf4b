//! Rough 4 KiB random write/read IOPS of the io_uring file backend at queue depth 32
//! on one queue: `cargo run --release -p runtime --example file_iops -- [path] [direct 1|0]`.
//! A timing, not a benchmark harness.

use std::time::{Duration, Instant};

use runtime::{FileBackend, FileOptions};
use storage::{Backend, IoOp, IoRequest};

const DEPTH: usize = 32;
const FILE_BYTES: u64 = 256 << 20;
const RUN_TIME: Duration = Duration::from_secs(3);

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "file_iops.img".to_string());
    let direct = args.next().as_deref() != Some("0");
    let options =
        FileOptions { size_bytes: Some(FILE_BYTES), direct_io: direct, queue_entries: 64, ..FileOptions::default() };
    let backend = FileBackend::open(&path, options).unwrap_or_else(|error| panic!("{error}"));
    let blocks = backend.geometry().block_count;
    let mut queue = backend.open_queue();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut random_lba = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % blocks
    };
    for write in [true, false] {
        let mut buffers: Vec<Vec<u8>> = (0..DEPTH).map(|i| vec![i as u8; 4096]).collect();
        let mut completions = Vec::with_capacity(DEPTH);
        let start = Instant::now();
        let mut done = 0u64;
        loop {
            while let Some(buffer) = buffers.pop() {
                let lba = random_lba();
                let op = if write {
                    IoOp::Write { lba, blocks: 1, force_unit_access: false }
                } else {
                    IoOp::Read { lba, blocks: 1 }
                };
                queue.submit(IoRequest { token: 0, op, buffer });
            }
            queue.reap(&mut completions);
            for completion in completions.drain(..) {
                completion.result.expect("I/O failed");
                buffers.push(completion.buffer);
                done += 1;
            }
            if start.elapsed() >= RUN_TIME {
                break;
            }
        }
        while queue.in_flight() > 0 {
            queue.reap(&mut completions);
            completions.clear();
        }
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "4 KiB random {} QD{DEPTH} direct={direct}: {:.0} IOPS ({done} in {seconds:.2} s)",
            if write { "write" } else { "read" },
            done as f64 / seconds
        );
    }
    drop(queue);
    drop(backend);
    let _ = std::fs::remove_file(&path);
}

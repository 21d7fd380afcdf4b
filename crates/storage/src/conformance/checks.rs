//! The deterministic checks. Each takes the backend factory and panics on a violation.

use std::collections::HashMap;
use std::sync::Arc;

use super::io::{assert_same_bytes, pattern, reap_exactly, submit_and_wait, COMPLETION_TIMEOUT, MIN_BLOCK_COUNT};
use crate::{Backend, BackendQueue, Geometry, IoCompletion, IoError, IoOp, IoRequest};

/// Garbage that read buffers start with, so a backend that leaves the buffer untouched
/// cannot pass a "reads zeroes" check.
const STALE_BYTE: u8 = 0xA5;

/// A fresh device and one queue on it, with helpers that check every completion.
pub(super) struct Device {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) queue: Box<dyn BackendQueue>,
    pub(super) geometry: Geometry,
    pub(super) block_size: usize,
    pub(super) kind: &'static str,
    pub(super) retains_data: bool,
    /// DLFEAT "read zeroes": deallocated blocks must read back as zeroes.
    pub(super) deallocate_reads_zeroes: bool,
    next_token: u64,
}

impl Device {
    pub(super) fn new(make_backend: &dyn Fn() -> Arc<dyn Backend>) -> Self {
        let backend = make_backend();
        let geometry = backend.geometry();
        let kind = backend.kind();
        assert_eq!(geometry.validate(), Ok(()), "{kind}: invalid geometry {geometry:?}");
        assert!(
            geometry.block_count >= MIN_BLOCK_COUNT,
            "{kind}: the suite needs at least {MIN_BLOCK_COUNT} blocks, got {geometry:?}"
        );
        let queue = backend.open_queue();
        Self {
            retains_data: backend.retains_data(),
            deallocate_reads_zeroes: backend.deallocate_reads_zeroes(),
            block_size: geometry.block_size_bytes as usize,
            backend,
            queue,
            geometry,
            kind,
            next_token: 1,
        }
    }

    pub(super) fn last_lba(&self) -> u64 {
        self.geometry.block_count - 1
    }

    /// Runs one request and checks that the token and the very same buffer come back.
    pub(super) fn run(&mut self, op: IoOp, buffer: Vec<u8>) -> IoCompletion {
        let token = self.next_token;
        self.next_token += 1;
        let (buffer_len, buffer_address) = (buffer.len(), buffer.as_ptr());
        let completion = submit_and_wait(&mut *self.queue, IoRequest { token, op, buffer });
        let kind = self.kind;
        assert_eq!(completion.buffer.len(), buffer_len, "{kind}: {op:?} changed the buffer length");
        if completion.buffer.capacity() > 0 {
            assert_eq!(
                completion.buffer.as_ptr(),
                buffer_address,
                "{kind}: {op:?} did not hand back the request's own buffer"
            );
        }
        completion
    }

    pub(super) fn expect(&mut self, op: IoOp, buffer: Vec<u8>, expected: Result<(), IoError>) -> Vec<u8> {
        let completion = self.run(op, buffer);
        assert_eq!(completion.result, expected, "{}: unexpected result for {op:?}", self.kind);
        completion.buffer
    }

    pub(super) fn write(&mut self, lba: u64, data: Vec<u8>, force_unit_access: bool) {
        let blocks = u32::try_from(data.len() / self.block_size).expect("test writes are small");
        self.expect(IoOp::Write { lba, blocks, force_unit_access }, data, Ok(()));
    }

    /// Writes fresh pattern data and returns it.
    pub(super) fn write_pattern(&mut self, lba: u64, blocks: u32, seed: u64) -> Vec<u8> {
        let data = pattern(seed, blocks as usize * self.block_size);
        self.write(lba, data.clone(), false);
        data
    }

    pub(super) fn read(&mut self, lba: u64, blocks: u32) -> Vec<u8> {
        let buffer = vec![STALE_BYTE; blocks as usize * self.block_size];
        self.expect(IoOp::Read { lba, blocks }, buffer, Ok(()))
    }

    /// Reads and compares, for backends that retain data; otherwise only checks that the
    /// read completes.
    pub(super) fn expect_contents(&mut self, lba: u64, expected: &[u8], context: &str) {
        let blocks = u32::try_from(expected.len() / self.block_size).expect("test reads are small");
        let actual = self.read(lba, blocks);
        if self.retains_data {
            let context = format!("{}: {context} (read {blocks} blocks at lba {lba})", self.kind);
            assert_same_bytes(&actual, expected, &context);
        }
    }

    pub(super) fn expect_zeroes(&mut self, lba: u64, blocks: u32, context: &str) {
        self.expect_contents(lba, &vec![0; blocks as usize * self.block_size], context);
    }

    fn flush(&mut self) {
        self.expect(IoOp::Flush, Vec::new(), Ok(()));
    }
}

/// Geometry is valid, the kind is named, and a new queue is idle and reaps nothing.
pub fn describes_itself(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    assert!(!device.kind.is_empty(), "kind() is empty");
    assert_eq!(device.backend.geometry(), device.geometry, "{}: geometry is not stable", device.kind);
    let _ = device.backend.has_volatile_write_cache();
    let mut out = Vec::new();
    device.queue.reap(&mut out);
    assert!(out.is_empty(), "{}: a new queue reaped completions", device.kind);
    assert_eq!(device.queue.in_flight(), 0);
    let second_queue = device.backend.open_queue();
    assert_eq!(second_queue.in_flight(), 0);
}

/// Many requests in flight at once: in_flight counts them, each token completes exactly
/// once with its own buffer, and reaping into a vector with room does not reallocate it.
pub fn queue_depth_round_trip(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    const DEPTH: u64 = 32;
    let mut device = Device::new(make_backend);
    let kind = device.kind;
    let block_size = device.block_size;
    let mut submitted = HashMap::new();
    let mut written = Vec::new();
    for token in 0..DEPTH {
        // Writes go to even blocks, reads to odd ones, so no two in-flight requests
        // overlap and the result does not depend on completion order.
        let (op, buffer) = match token % 4 {
            0 | 1 => {
                let data = pattern(token, block_size);
                written.push((token * 2, data.clone()));
                (IoOp::Write { lba: token * 2, blocks: 1, force_unit_access: token % 4 == 1 }, data)
            }
            2 => (IoOp::Read { lba: token * 2 + 1, blocks: 1 }, vec![STALE_BYTE; block_size]),
            _ => (IoOp::Flush, Vec::new()),
        };
        submitted.insert(token, (buffer.len(), buffer.as_ptr()));
        device.queue.submit(IoRequest { token, op, buffer });
        assert!(device.queue.in_flight() as u64 <= token + 1, "{kind}: in_flight over-counts");
    }
    assert_eq!(device.queue.in_flight() as u64, DEPTH, "{kind}: in_flight before any reap");

    let mut out = Vec::with_capacity(DEPTH as usize);
    let capacity = out.capacity();
    let deadline = std::time::Instant::now() + COMPLETION_TIMEOUT;
    while out.len() < DEPTH as usize {
        device.queue.reap(&mut out);
        assert_eq!(out.capacity(), capacity, "{kind}: reap reallocated a vector that had room");
        assert_eq!(out.len() + device.queue.in_flight(), DEPTH as usize, "{kind}: in_flight after reap");
        assert!(std::time::Instant::now() < deadline, "{kind}: requests did not complete");
        std::thread::yield_now();
    }
    for completion in out {
        let (len, address) = submitted
            .remove(&completion.token)
            .unwrap_or_else(|| panic!("{kind}: unknown or repeated token {}", completion.token));
        assert_eq!(completion.result, Ok(()), "{kind}: token {} failed", completion.token);
        assert_eq!(completion.buffer.len(), len, "{kind}: token {} buffer length", completion.token);
        if completion.buffer.capacity() > 0 {
            assert_eq!(completion.buffer.as_ptr(), address, "{kind}: token {} buffer", completion.token);
        }
    }
    for (lba, data) in written {
        device.expect_contents(lba, &data, "write submitted at queue depth");
    }
}

/// Data written is read back, whole and in parts, at the start, the end and across
/// likely allocation boundaries, without touching neighbouring blocks.
pub fn read_after_write(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    let last = device.last_lba();
    let block_size = device.block_size as u64;

    let first = device.write_pattern(0, 1, 1);
    device.expect_contents(0, &first, "first block");
    let end = device.write_pattern(last, 1, 2);
    device.expect_contents(last, &end, "last block");

    // A multi-block write with known neighbours on both sides.
    let before = device.write_pattern(9, 1, 3);
    let after = device.write_pattern(18, 1, 4);
    let middle = device.write_pattern(10, 8, 5);
    device.expect_contents(10, &middle, "eight blocks");
    device.expect_contents(9, &before, "block before a write");
    device.expect_contents(18, &after, "block after a write");
    device.expect_contents(12, &middle[2 * block_size as usize..5 * block_size as usize], "part of a write");

    // Across 1 MiB and 64 KiB boundaries, where chunked or striped backends split I/O.
    for boundary_bytes in [1u64 << 20, 1 << 16] {
        let boundary_lba = boundary_bytes / block_size;
        let span = (256 * 1024 / block_size).max(2);
        if boundary_lba >= span / 2 && device.geometry.contains(boundary_lba - span / 2, span) {
            let lba = boundary_lba - span / 2;
            let data = device.write_pattern(lba, span as u32, boundary_bytes);
            device.expect_contents(lba, &data, "write across an allocation boundary");
        }
    }

    // Overwrite part of a range; the rest keeps the old data.
    let old = device.write_pattern(30, 4, 6);
    let new = device.write_pattern(31, 2, 7);
    let mut expected = old;
    expected[block_size as usize..3 * block_size as usize].copy_from_slice(&new);
    device.expect_contents(30, &expected, "partial overwrite");
    // Another queue on the same backend sees the data.
    let mut other = Device { queue: device.backend.open_queue(), ..device };
    other.expect_contents(30, &expected, "read from a second queue");
}

/// Writes, Flush, then the data reads back; Flush hands back whatever buffer it got.
pub fn write_flush_read(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    let first = device.write_pattern(4, 4, 11);
    let second = device.write_pattern(40, 3, 12);
    device.flush();
    device.expect(IoOp::Flush, vec![1, 2, 3], Ok(()));
    device.expect_contents(4, &first, "after flush");
    device.expect_contents(40, &second, "after flush");
    device.flush();
}

/// Force Unit Access writes complete and read back, mixed with ordinary ones.
pub fn fua_write(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    let last = device.last_lba();
    let fua = pattern(21, 4 * device.block_size);
    device.write(8, fua.clone(), true);
    device.expect_contents(8, &fua, "FUA write");
    let overwrite = pattern(22, 2 * device.block_size);
    device.write(9, overwrite.clone(), true);
    let plain = device.write_pattern(12, 1, 23);
    device.expect_contents(9, &overwrite, "FUA overwrite");
    device.expect_contents(12, &plain, "plain write after FUA");
    let end = pattern(24, device.block_size);
    device.write(last, end.clone(), true);
    device.expect_contents(last, &end, "FUA write of the last block");
}

/// Write Zeroes, with and without deallocate and FUA, zeroes exactly its range.
pub fn write_zeroes(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    let block_size = device.block_size;
    for (round, (deallocate, force_unit_access)) in
        [(false, false), (true, false), (false, true), (true, true)].into_iter().enumerate()
    {
        let base = 16 * round as u64;
        let data = device.write_pattern(base, 16, 30 + round as u64);
        let op = IoOp::WriteZeroes { lba: base + 3, blocks: 9, deallocate, force_unit_access };
        // The buffer is unused; a non-empty one must still come back.
        device.expect(op, vec![7; 3], Ok(()));
        let mut expected = data;
        expected[3 * block_size..12 * block_size].fill(0);
        let context = format!("write zeroes (deallocate {deallocate}, FUA {force_unit_access})");
        device.expect_contents(base, &expected, &context);
    }
    // The whole device at once (sparse and thin backends must not materialise it).
    let last = device.last_lba();
    device.write_pattern(last, 1, 39);
    let whole = IoOp::WriteZeroes { lba: 0, blocks: last + 1, deallocate: false, force_unit_access: false };
    device.expect(whole, Vec::new(), Ok(()));
    device.expect_zeroes(0, 64, "after zeroing the whole device");
    device.expect_zeroes(last, 1, "last block after zeroing the whole device");
}

/// Deallocated blocks read as zeroes (DLFEAT "read zeroes"); neighbours keep their data.
/// A backend that does not promise zeroes ([`Backend::deallocate_reads_zeroes`] false)
/// is held only to the neighbours, and to reading back what is written afterwards.
pub fn deallocate_reads_zeroes(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    let block_size = device.block_size;
    let data = device.write_pattern(0, 32, 41);
    device.expect(IoOp::Deallocate { lba: 3, blocks: 13 }, Vec::new(), Ok(()));
    if !device.retains_data {
        return;
    }
    if !device.deallocate_reads_zeroes {
        device.expect_contents(0, &data[..3 * block_size], "blocks before the deallocated range");
        device.expect_contents(16, &data[16 * block_size..], "blocks after the deallocated range");
        let last = device.last_lba();
        device.expect(IoOp::Deallocate { lba: last, blocks: 1 }, Vec::new(), Ok(()));
        let again = device.write_pattern(5, 2, 43);
        device.expect_contents(5, &again, "write after deallocate");
        return;
    }
    let mut expected = data;
    expected[3 * block_size..16 * block_size].fill(0);
    device.expect_contents(0, &expected, "after deallocate");
    // Deallocating twice, or a range never written, is fine too.
    device.expect(IoOp::Deallocate { lba: 3, blocks: 13 }, Vec::new(), Ok(()));
    device.expect(IoOp::Deallocate { lba: 40, blocks: 8 }, Vec::new(), Ok(()));
    device.expect_zeroes(40, 8, "deallocated range never written");
    // The last block, and writing again after deallocate.
    let last = device.last_lba();
    device.write_pattern(last, 1, 42);
    device.expect(IoOp::Deallocate { lba: last, blocks: 1 }, Vec::new(), Ok(()));
    device.expect_zeroes(last, 1, "deallocated last block");
    let again = device.write_pattern(5, 2, 43);
    device.expect_contents(5, &again, "write after deallocate");
}

/// Every ranged op beyond the end, or whose lba + blocks overflows u64, fails with
/// OutOfRange and changes nothing; the same ops on the last block succeed.
pub fn out_of_range(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    let count = device.geometry.block_count;
    let last = device.last_lba();
    let tail = device.write_pattern(last - 3, 4, 51);

    let small_ranges: [(u64, u32); 6] =
        [(count, 1), (last, 2), (last - 3, 5), (u64::MAX, 1), (u64::MAX - 1, 3), (u64::MAX - 2, 4)];
    for (lba, blocks) in small_ranges {
        let len = blocks as usize * device.block_size;
        device.expect(IoOp::Read { lba, blocks }, vec![0; len], Err(IoError::OutOfRange));
        let write = IoOp::Write { lba, blocks, force_unit_access: false };
        device.expect(write, pattern(52, len), Err(IoError::OutOfRange));
    }
    let large_ranges: [(u64, u64); 8] = [
        (count, 1),
        (last, 2),
        (0, count + 1),
        (1, u64::MAX),
        (u64::MAX, 1),
        (u64::MAX, u64::MAX),
        (u64::MAX - 1, 3),
        (count - 1, u64::MAX - count + 3),
    ];
    for (lba, blocks) in large_ranges {
        for deallocate in [false, true] {
            let op = IoOp::WriteZeroes { lba, blocks, deallocate, force_unit_access: false };
            device.expect(op, Vec::new(), Err(IoError::OutOfRange));
        }
        device.expect(IoOp::Deallocate { lba, blocks }, Vec::new(), Err(IoError::OutOfRange));
    }
    device.expect_contents(last - 3, &tail, "data at the end after rejected requests");

    // The last block itself is in range for every op.
    device.expect(IoOp::Read { lba: last, blocks: 1 }, vec![0; device.block_size], Ok(()));
    let write = IoOp::Write { lba: last, blocks: 1, force_unit_access: false };
    device.expect(write, vec![0; device.block_size], Ok(()));
    let zeroes = IoOp::WriteZeroes { lba: last, blocks: 1, deallocate: false, force_unit_access: false };
    device.expect(zeroes, Vec::new(), Ok(()));
    device.expect(IoOp::Deallocate { lba: last, blocks: 1 }, Vec::new(), Ok(()));
}

/// Read and Write buffers that are not blocks * block_size long fail with
/// BufferLengthMismatch, come back unchanged in length, and write nothing.
pub fn buffer_length_mismatch(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let mut device = Device::new(make_backend);
    let block_size = device.block_size;
    let kept = device.write_pattern(6, 2, 61);
    let cases: [(u32, usize); 6] = [
        (1, 0),
        (1, block_size - 1),
        (1, block_size + 1),
        (1, 2 * block_size),
        (2, block_size),
        (2, 2 * block_size - 8),
    ];
    for (blocks, len) in cases {
        let read = IoOp::Read { lba: 6, blocks };
        device.expect(read, vec![STALE_BYTE; len], Err(IoError::BufferLengthMismatch));
        let write = IoOp::Write { lba: 6, blocks, force_unit_access: false };
        device.expect(write, pattern(62, len), Err(IoError::BufferLengthMismatch));
    }
    device.expect_contents(6, &kept, "data after rejected writes");
}

/// Four threads, each with its own queue, write and read disjoint ranges with several
/// requests in flight; afterwards every range holds its thread's last data.
pub fn concurrent_disjoint_ranges(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 6;
    let mut device = Device::new(make_backend);
    let kind = device.kind;
    let block_size = device.block_size;
    let retains_data = device.retains_data;
    let region_blocks = (device.geometry.block_count / THREADS).min(256);

    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let backend = Arc::clone(&device.backend);
            std::thread::spawn(move || {
                let mut queue = backend.open_queue();
                let region_start = thread * region_blocks;
                let mut last_data = Vec::new();
                for round in 0..ROUNDS {
                    // Different piece sizes per round so rounds overlap each other's
                    // piece boundaries; all pieces of a round are in flight together.
                    let piece_blocks = (round + 1).min(region_blocks);
                    let seed = (thread << 32) | round;
                    let data = pattern(seed, (region_blocks as usize) * block_size);
                    let mut token = 0;
                    let mut offset = 0;
                    while offset < region_blocks {
                        let blocks = piece_blocks.min(region_blocks - offset);
                        let bytes = offset as usize * block_size..(offset + blocks) as usize * block_size;
                        let op = IoOp::Write {
                            lba: region_start + offset,
                            blocks: blocks as u32,
                            force_unit_access: round % 2 == 1,
                        };
                        queue.submit(IoRequest { token, op, buffer: data[bytes].to_vec() });
                        token += 1;
                        offset += blocks;
                    }
                    for completion in reap_exactly(&mut *queue, token as usize) {
                        assert_eq!(completion.result, Ok(()), "{kind}: thread {thread} write failed");
                    }
                    let op = IoOp::Read { lba: region_start, blocks: region_blocks as u32 };
                    let buffer = vec![STALE_BYTE; data.len()];
                    let completion = submit_and_wait(&mut *queue, IoRequest { token, op, buffer });
                    assert_eq!(completion.result, Ok(()), "{kind}: thread {thread} read failed");
                    if retains_data {
                        let context = format!("{kind}: thread {thread} round {round} read-back");
                        assert_same_bytes(&completion.buffer, &data, &context);
                    }
                    last_data = data;
                }
                last_data
            })
        })
        .collect();

    let results: Vec<Vec<u8>> = workers
        .into_iter()
        .map(|worker| worker.join().unwrap_or_else(|_| panic!("{kind}: a worker thread panicked")))
        .collect();
    for (thread, data) in results.iter().enumerate() {
        let lba = thread as u64 * region_blocks;
        device.expect_contents(lba, data, &format!("region of thread {thread} after all threads"));
    }
}

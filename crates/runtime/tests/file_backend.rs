//! The io_uring file backend: the storage conformance suite with and without O_DIRECT,
//! persistence across reopen, actionable open errors, concurrency, and a crash test
//! that SIGKILLs a writer and checks every acknowledged write.

mod files;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use files::TempPath;
use runtime::{FileBackend, FileError, FileOptions};
use storage::conformance::{pattern, reap_exactly, submit_and_wait};
use storage::{Backend, BackendQueue, IoError, IoOp, IoRequest};

fn options(direct_io: bool, block_size: u32, size_bytes: u64) -> FileOptions {
    FileOptions { block_size_bytes: Some(block_size), direct_io, size_bytes: Some(size_bytes), queue_entries: 32 }
}

/// A new file for each conformance check, unlinked right away (the open fd keeps it).
fn conformance_factory(direct_io: bool, block_size: u32) -> impl Fn() -> Arc<dyn Backend> {
    move || {
        let path = TempPath::new("conformance");
        let backend = FileBackend::open(&path.0, options(direct_io, block_size, 4 << 20)).expect("open test file");
        drop(path); // unlinks the file; the backend's descriptor keeps it alive
        backend
    }
}

#[test]
fn conformance_direct_io() {
    storage::conformance::run_all(&conformance_factory(true, 4096));
}

#[test]
fn conformance_direct_io_512_byte_blocks() {
    // 512-byte blocks need a device whose direct-I/O alignment allows it; skip otherwise.
    let path = TempPath::new("probe512");
    if FileBackend::open(&path.0, options(true, 512, 1 << 20)).is_err() {
        eprintln!("skipped: the filesystem's direct-I/O alignment is above 512 bytes");
        return;
    }
    storage::conformance::run_all(&conformance_factory(true, 512));
}

#[test]
fn conformance_buffered() {
    storage::conformance::run_all(&conformance_factory(false, 512));
    storage::conformance::run_all(&conformance_factory(false, 4096));
}

fn run(queue: &mut dyn BackendQueue, token: u64, op: IoOp, buffer: Vec<u8>) -> (Result<(), IoError>, Vec<u8>) {
    let completion = submit_and_wait(queue, IoRequest { token, op, buffer });
    (completion.result, completion.buffer)
}

fn write_op(lba: u64, blocks: u32, force_unit_access: bool) -> IoOp {
    IoOp::Write { lba, blocks, force_unit_access }
}

#[test]
fn fua_write_survives_reopen() {
    for direct in [true, false] {
        let path = TempPath::new("fua");
        let data = pattern(7, 8 * 4096);
        {
            let backend = FileBackend::open(&path.0, options(direct, 4096, 1 << 20)).unwrap();
            assert!(backend.has_volatile_write_cache());
            assert_eq!(backend.kind(), "file");
            let mut queue = backend.open_queue();
            let (result, _) = run(&mut *queue, 1, write_op(100, 8, true), data.clone());
            assert_eq!(result, Ok(()));
        }
        let reopened = FileBackend::open(&path.0, FileOptions { direct_io: direct, ..FileOptions::default() }).unwrap();
        assert_eq!(reopened.geometry().block_count, 256, "size and default block size kept");
        let mut queue = reopened.open_queue();
        let (result, read) = run(&mut *queue, 2, IoOp::Read { lba: 100, blocks: 8 }, vec![0; 8 * 4096]);
        assert_eq!(result, Ok(()));
        assert_eq!(read, data, "direct {direct}");
    }
}

#[test]
fn flushed_writes_survive_reopen_through_plain_file_reads() {
    let path = TempPath::new("flush");
    let backend = FileBackend::open(&path.0, options(true, 4096, 1 << 20)).unwrap();
    let mut queue = backend.open_queue();
    let data = pattern(9, 3 * 4096);
    assert_eq!(run(&mut *queue, 1, write_op(5, 3, false), data.clone()).0, Ok(()));
    assert_eq!(run(&mut *queue, 2, IoOp::Flush, Vec::new()).0, Ok(()));
    drop(queue);
    drop(backend);
    let contents = std::fs::read(&path.0).unwrap();
    assert_eq!(contents.len(), 1 << 20);
    assert_eq!(&contents[5 * 4096..8 * 4096], &data[..]);
    assert!(contents[..5 * 4096].iter().all(|&b| b == 0));
}

#[test]
fn out_of_range_and_bad_lengths_fail_only_that_request() {
    let path = TempPath::new("range");
    let backend = FileBackend::open(&path.0, options(true, 4096, 64 * 4096)).unwrap();
    let mut queue = backend.open_queue();
    let cases = [
        (IoOp::Read { lba: 64, blocks: 1 }, 4096, Err(IoError::OutOfRange)),
        (write_op(63, 2, false), 8192, Err(IoError::OutOfRange)),
        (IoOp::Deallocate { lba: u64::MAX, blocks: 2 }, 0, Err(IoError::OutOfRange)),
        (IoOp::Read { lba: 0, blocks: 1 }, 4095, Err(IoError::BufferLengthMismatch)),
        (IoOp::Read { lba: 64, blocks: 0 }, 0, Ok(())),
        (IoOp::Read { lba: 63, blocks: 1 }, 4096, Ok(())),
    ];
    for (token, (op, len, expected)) in cases.into_iter().enumerate() {
        assert_eq!(run(&mut *queue, token as u64, op, vec![0; len]).0, expected, "{op:?}");
    }
}

#[test]
fn aligned_caller_buffers_skip_the_bounce_copy_and_still_work() {
    // A page-aligned Vec: allocate extra and... Vec<u8> cannot be re-aligned safely, so
    // use a large allocation, which glibc serves from mmap at a page offset of 16; try
    // a few sizes and accept whatever alignment we get: both paths must be correct.
    let path = TempPath::new("aligned");
    let backend = FileBackend::open(&path.0, options(true, 4096, 64 << 20)).unwrap();
    let mut queue = backend.open_queue();
    for (i, blocks) in [1u32, 16, 256, 2048].into_iter().enumerate() {
        let data = pattern(i as u64, blocks as usize * 4096);
        assert_eq!(run(&mut *queue, 1, write_op(0, blocks, false), data.clone()).0, Ok(()));
        let (result, read) = run(&mut *queue, 2, IoOp::Read { lba: 0, blocks }, vec![1; blocks as usize * 4096]);
        assert_eq!(result, Ok(()));
        assert!(read == data, "{blocks} blocks");
    }
}

#[test]
fn four_threads_with_their_own_queues_at_depth_32() {
    let path = TempPath::new("concurrent");
    let backend = FileBackend::open(&path.0, options(true, 4096, 16 << 20)).unwrap();
    let region = backend.geometry().block_count / 4;
    let workers: Vec<_> = (0..4u64)
        .map(|thread| {
            let backend = Arc::clone(&backend);
            std::thread::spawn(move || {
                let mut queue = backend.open_queue();
                for round in 0..4u64 {
                    for i in 0..64u64 {
                        let lba = thread * region + i * 4;
                        let seed = thread * 1_000_000 + round * 1000 + i;
                        queue.submit(IoRequest {
                            token: i,
                            op: write_op(lba, 4, i % 8 == 0),
                            buffer: pattern(seed, 4 * 4096),
                        });
                    }
                    for c in reap_exactly(&mut *queue, 64) {
                        assert_eq!(c.result, Ok(()));
                    }
                    for i in 0..64u64 {
                        let lba = thread * region + i * 4;
                        queue.submit(IoRequest {
                            token: i,
                            op: IoOp::Read { lba, blocks: 4 },
                            buffer: vec![0; 4 * 4096],
                        });
                    }
                    for c in reap_exactly(&mut *queue, 64) {
                        assert_eq!(c.result, Ok(()));
                        let seed = thread * 1_000_000 + round * 1000 + c.token;
                        assert!(c.buffer == pattern(seed, 4 * 4096), "thread {thread} token {}", c.token);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
}

#[test]
fn depth_beyond_the_ring_is_queued_and_completes() {
    let path = TempPath::new("deep");
    let mut opts = options(true, 4096, 4 << 20);
    opts.queue_entries = 4;
    let backend = FileBackend::open(&path.0, opts).unwrap();
    let mut queue = backend.open_queue();
    for i in 0..200u64 {
        queue.submit(IoRequest { token: i, op: write_op(i % 1024, 1, false), buffer: pattern(i, 4096) });
    }
    assert_eq!(queue.in_flight(), 200);
    let completions = reap_exactly(&mut *queue, 200);
    assert!(completions.iter().all(|c| c.result.is_ok()));
}

/// The queue owns the buffers of its requests: dropping it with requests in the
/// kernel must wait for them (freeing the buffers under the kernel would write freed
/// memory). Checked from outside: once `drop` returned, every write it had in flight
/// is in the file (round r writes byte r+1 over the even extents), with nothing in
/// flight left behind.
#[test]
fn dropping_a_queue_with_io_in_flight_waits_for_the_kernel() {
    const EXTENT_BLOCKS: u32 = 16;
    const EXTENT_BYTES: usize = EXTENT_BLOCKS as usize * 4096;
    let path = TempPath::new("drop");
    let backend = FileBackend::open(&path.0, options(true, 4096, 16 << 20)).unwrap();
    for round in 0..5u8 {
        let fill = round + 1;
        let mut queue = backend.open_queue();
        for i in 0..64u64 {
            let lba = i * u64::from(EXTENT_BLOCKS);
            let op = if i % 2 == 0 {
                write_op(lba, EXTENT_BLOCKS, false)
            } else {
                IoOp::Read { lba, blocks: EXTENT_BLOCKS }
            };
            queue.submit(IoRequest { token: i, op, buffer: vec![fill; EXTENT_BYTES] });
        }
        let mut some = Vec::new();
        queue.reap(&mut some); // submits; most are still in flight
        drop(queue);
        let file = std::fs::read(&path.0).unwrap();
        for i in (0..64usize).step_by(2) {
            let extent = &file[i * EXTENT_BYTES..(i + 1) * EXTENT_BYTES];
            assert!(
                extent.iter().all(|&byte| byte == fill),
                "round {round}: extent {i} does not hold the write that was in flight when the queue was dropped"
            );
        }
    }
}

#[test]
fn missing_file_without_size_is_an_actionable_error() {
    let path = TempPath::new("missing");
    let error = FileBackend::open(&path.0, FileOptions::default()).unwrap_err();
    assert!(matches!(error, FileError::NotFound { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(&path.0.display().to_string()), "{message}");
    assert!(message.contains("size_bytes"), "{message}");
    assert!(!path.0.exists(), "nothing created");
}

#[test]
fn bad_sizes_and_block_sizes_are_actionable_errors() {
    let path = TempPath::new("badsize");
    let error = FileBackend::open(&path.0, options(true, 4096, 4096 * 3 + 512)).unwrap_err();
    assert!(matches!(error, FileError::SizeNotMultiple { .. }), "{error:?}");
    assert!(error.to_string().contains("multiple of 4096"), "{error}");
    let error = FileBackend::open(&path.0, options(false, 1000, 1 << 20)).unwrap_err();
    assert!(matches!(error, FileError::InvalidBlockSize { .. }), "{error:?}");
    // An existing file larger than size_bytes is not shrunk.
    FileBackend::open(&path.0, options(false, 4096, 1 << 20)).unwrap();
    let error = FileBackend::open(&path.0, options(false, 4096, 1 << 19)).unwrap_err();
    assert!(matches!(error, FileError::SizeMismatch { .. }), "{error}");
    // Growing is fine and keeps the data.
    let grown = FileBackend::open(&path.0, options(false, 4096, 2 << 20)).unwrap();
    assert_eq!(grown.geometry().block_count, 512);
}

#[test]
fn unwritable_file_reports_permission_denied() {
    // Root ignores file modes, so this is only meaningful as non-root.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipped: running as root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let path = TempPath::new("readonly");
    std::fs::write(&path.0, vec![0; 8192]).unwrap();
    std::fs::set_permissions(&path.0, std::fs::Permissions::from_mode(0o444)).unwrap();
    let error = FileBackend::open(&path.0, FileOptions::default()).unwrap_err();
    assert!(matches!(error, FileError::PermissionDenied { .. }), "{error:?}");
}

// ---------------------------------------------------------------------------------
// Crash test. The parent re-runs this test binary filtered to `crash_writer_child`
// with SLUICE_FILE_CRASH_PATH set; the child writes and prints one line per
// acknowledged durable write; the parent SIGKILLs it at a random moment and checks
// every acknowledged write. A process kill keeps the page cache, so this checks the
// acknowledgement logic (no completion before the kernel finished the write, FUA and
// Flush ordering in the queue) rather than power-loss durability.
// ---------------------------------------------------------------------------------

const CRASH_ENV: &str = "SLUICE_FILE_CRASH_PATH";
const CRASH_DIRECT_ENV: &str = "SLUICE_FILE_CRASH_DIRECT";
const CRASH_BLOCKS: u64 = 4096;
const CRASH_BLOCK: usize = 4096;

fn crash_seed(lba: u64) -> u64 {
    0xC0FFEE ^ (lba << 20)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn crash_writer_child() {
    let Ok(path) = std::env::var(CRASH_ENV) else { return };
    let direct = std::env::var(CRASH_DIRECT_ENV).as_deref() == Ok("1");
    let seed: u64 = std::env::var("SLUICE_FILE_CRASH_SEED").unwrap().parse().unwrap();
    let backend = FileBackend::open(&path, FileOptions { direct_io: direct, ..FileOptions::default() }).unwrap();
    let mut queue = backend.open_queue();
    let mut rng = Rng(seed | 1);
    // Each LBA is written once, in a random order, so an acknowledged block has exactly
    // one valid content. Non-FUA writes count as durable only after a later Flush
    // completes; FUA writes as soon as they complete.
    let mut order: Vec<u64> = (0..CRASH_BLOCKS).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    let mut unflushed: Vec<u64> = Vec::new();
    let mut next = 0usize;
    let mut out = Vec::new();
    let mut flush_in_flight: Option<Vec<u64>> = None;
    let stdout = std::io::stdout();
    use std::io::Write;
    while next < order.len() || queue.in_flight() > 0 {
        while queue.in_flight() < 16 && next < order.len() {
            if flush_in_flight.is_none() && rng.next() & 15 == 0 {
                // The flush covers every write completed before it was submitted.
                flush_in_flight = Some(std::mem::take(&mut unflushed));
                queue.submit(IoRequest { token: u64::MAX, op: IoOp::Flush, buffer: Vec::new() });
                continue;
            }
            let lba = order[next];
            next += 1;
            let fua = rng.next() & 3 == 0;
            let token = lba | if fua { 1 << 63 } else { 0 };
            queue.submit(IoRequest { token, op: write_op(lba, 1, fua), buffer: pattern(crash_seed(lba), CRASH_BLOCK) });
        }
        queue.reap(&mut out);
        let mut lock = stdout.lock();
        for completion in out.drain(..) {
            assert_eq!(completion.result, Ok(()));
            if completion.token == u64::MAX {
                for lba in flush_in_flight.take().expect("a flush was in flight") {
                    writeln!(lock, "ACK {lba}").unwrap();
                }
            } else if completion.token & (1 << 63) != 0 {
                writeln!(lock, "ACK {}", completion.token & !(1 << 63)).unwrap();
            } else {
                unflushed.push(completion.token);
            }
        }
        lock.flush().unwrap();
    }
    writeln!(stdout.lock(), "DONE").unwrap();
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let exe = std::env::current_exe().unwrap();
    let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut rng = Rng(start | 1);
    let mut total_acked = 0;
    for round in 0..6u64 {
        let direct = round % 2 == 0;
        let path = TempPath::new("crash");
        FileBackend::open(&path.0, options(direct, CRASH_BLOCK as u32, CRASH_BLOCKS * CRASH_BLOCK as u64)).unwrap();
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_writer_child", "--nocapture", "--test-threads=1"])
            .env(CRASH_ENV, &path.0)
            .env(CRASH_DIRECT_ENV, if direct { "1" } else { "0" })
            .env("SLUICE_FILE_CRASH_SEED", rng.next().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = Duration::from_millis(20 + rng.next() % 300);
        let pid = child.id() as libc::pid_t;
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            // SAFETY: kill(2) on our own child, which is not reaped before the join below.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(lba) = line.strip_prefix("ACK ") {
                if let Ok(lba) = lba.parse::<u64>() {
                    acked.push(lba);
                }
            }
        }
        killer.join().unwrap();
        let _ = child.wait();
        // Verify through a fresh backend (and its own queue), as a restarted target would.
        let backend = FileBackend::open(&path.0, FileOptions { direct_io: true, ..FileOptions::default() }).unwrap();
        let mut queue = backend.open_queue();
        for &lba in &acked {
            let (result, data) = run(&mut *queue, lba, IoOp::Read { lba, blocks: 1 }, vec![0; CRASH_BLOCK]);
            assert_eq!(result, Ok(()));
            assert!(data == pattern(crash_seed(lba), CRASH_BLOCK), "round {round}: acknowledged lba {lba} lost");
        }
        total_acked += acked.len();
        eprintln!(
            "round {round} (direct {direct}): killed after {kill_after:?}, {} acknowledged writes verified",
            acked.len()
        );
    }
    assert!(total_acked > 0, "the writer never acknowledged anything before being killed");
}

#[test]
fn a_file_grows_live_and_reopens_at_the_new_length() {
    let path = TempPath::new("grow");
    let data = pattern(9, 4096);
    {
        let backend = FileBackend::open(&path.0, options(false, 4096, 1 << 20)).unwrap();
        let mut queue = backend.open_queue();
        assert_eq!(run(&mut *queue, 1, write_op(256, 1, false), data.clone()).0, Err(IoError::OutOfRange));
        assert_eq!(
            backend.grow(100),
            Err(storage::GrowError::WouldShrink { current_blocks: 256, requested_blocks: 100 })
        );
        assert_eq!(backend.grow(512).unwrap().block_count, 512);
        assert_eq!(std::fs::metadata(&path.0).unwrap().len(), 2 << 20, "extended on disk");
        // The queue opened before the resize writes past the old end.
        assert_eq!(run(&mut *queue, 2, write_op(256, 1, true), data.clone()).0, Ok(()));
        assert_eq!(run(&mut *queue, 3, write_op(512, 1, false), data.clone()).0, Err(IoError::OutOfRange));
    }
    let reopened = FileBackend::open(&path.0, FileOptions::default()).unwrap();
    assert_eq!(reopened.geometry().block_count, 512);
    let mut queue = reopened.open_queue();
    assert_eq!(run(&mut *queue, 4, IoOp::Read { lba: 256, blocks: 1 }, vec![0; 4096]).1, data);
}

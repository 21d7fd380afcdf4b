//! Compositions over io_uring files: the storage conformance suite on RAID0 of three
//! files (O_DIRECT and buffered), on a write-back cache with file tiers, on thick and
//! thin pool carves of a RAID0 of files, and on the whole tiered stack (a cache over a
//! carve of a pool on RAID0 of files); then that stack's data and identities across a
//! reopen, as a restarted target would see them.
//!
//! The storage crate runs the same suite on these compositions over RAM and over
//! artificially delayed RAM (write-through caches included); here the members are real
//! asynchronous devices (completions arrive on later reaps, out of order, after real
//! I/O), which is what the split/merge and cache state machines have to get right.

mod files;

use std::path::Path;
use std::sync::Arc;

use files::TempPath;
use runtime::{FileBackend, FileOptions};
use storage::conformance::{self, pattern, submit_and_wait};
use storage::{Backend, CacheBackend, CacheMode, IoOp, IoRequest, Pool, Raid0Backend, TableStore};

/// A new file backend; the file is unlinked at once (the descriptor keeps it) unless
/// `keep` holds its path.
fn file(direct_io: bool, block_size: u32, size_bytes: u64, keep: Option<&Path>) -> Arc<dyn Backend> {
    let options =
        FileOptions { block_size_bytes: Some(block_size), direct_io, size_bytes: Some(size_bytes), queue_entries: 32 };
    match keep {
        Some(path) => FileBackend::open(path, options).expect("open test file"),
        None => {
            let path = TempPath::new("member");
            FileBackend::open(&path.0, options).expect("open test file")
        }
    }
}

/// RAID0 over three 1 MiB files with 16 KiB strips: 3 MiB, most I/O of the random
/// check spans several strips and members.
fn raid0_of_files(direct_io: bool, block_size: u32) -> Arc<dyn Backend> {
    let members = (0..3).map(|_| file(direct_io, block_size, 1 << 20, None)).collect();
    Raid0Backend::new(members, 16 << 10).expect("raid0 of files")
}

#[test]
fn raid0_of_three_files_direct_io() {
    conformance::run_all(&|| raid0_of_files(true, 4096));
}

#[test]
fn raid0_of_three_files_buffered() {
    conformance::run_all(&|| raid0_of_files(false, 512));
    conformance::run_all(&|| raid0_of_files(false, 4096));
}

/// A cache with a 128 KiB file fast tier over a 1 MiB file slow tier and 16 KiB lines:
/// five slots for 64 lines, so the random check evicts (and destages) constantly. Small
/// on purpose: the check reads the whole device through the cache for every case.
fn write_back_cache_of_files() -> Arc<dyn Backend> {
    let fast = file(true, 4096, 128 << 10, None);
    let slow = file(true, 4096, 1 << 20, None);
    CacheBackend::with_line_size(fast, slow, CacheMode::WriteBack, 16 << 10).expect("cache of files")
}

#[test]
fn write_back_cache_with_file_tiers() {
    conformance::run_all(&write_back_cache_of_files);
}

/// A pool on RAID0 of three 2 MiB files with 256 KiB units; a 1 MiB carve is made first
/// so the carve under test does not start at unit 0. (The table is in memory here; the
/// reopen test below keeps it in a file.)
fn pool_carve_on_raid0(thin: bool) -> Arc<dyn Backend> {
    let members = (0..3).map(|_| file(true, 4096, 2 << 20, None)).collect();
    let stripe = Raid0Backend::new(members, 64 << 10).expect("raid0 of files");
    let pool = Pool::open_with_unit_size(stripe, TableStore::memory(), 256 << 10).expect("pool");
    pool.create(256, false).expect("first carve");
    let carve = pool.create(1024, thin).expect("carve under test");
    pool.get(carve).expect("carve backend")
}

#[test]
fn thick_pool_carve_on_raid0_of_files() {
    conformance::run_all(&|| pool_carve_on_raid0(false));
}

#[test]
fn thin_pool_carve_on_raid0_of_files() {
    conformance::run_all(&|| pool_carve_on_raid0(true));
}

/// Paths of one tiered stack: three RAID0 members, the pool table and the fast tier.
struct TieredFiles {
    members: Vec<TempPath>,
    table: TempPath,
    fast: TempPath,
}

impl TieredFiles {
    fn new() -> TieredFiles {
        TieredFiles {
            members: (0..3).map(|_| TempPath::new("tiered-member")).collect(),
            table: TempPath::new("tiered-table"),
            fast: TempPath::new("tiered-fast"),
        }
    }

    /// A write-back cache (128 KiB file fast tier, 16 KiB lines) over a 1 MiB carve of a
    /// pool on RAID0 of the three files; opens what exists and creates what does not,
    /// like `sluice serve` on a restart.
    fn open(&self) -> (Arc<dyn Backend>, storage::CarveRecord) {
        let members = self.members.iter().map(|path| file(true, 4096, 2 << 20, Some(&path.0))).collect();
        let stripe = Raid0Backend::new(members, 64 << 10).expect("raid0 of files");
        let pool = Pool::open_with_unit_size(stripe, TableStore::File(self.table.0.clone()), 256 << 10).expect("pool");
        let id = match pool.records().first() {
            Some(record) => record.id,
            None => pool.create(256, false).expect("carve"),
        };
        let record = pool.record(id).expect("record");
        let slow = pool.get(id).expect("carve backend");
        let fast = file(true, 4096, 128 << 10, Some(&self.fast.0));
        (CacheBackend::with_line_size(fast, slow, CacheMode::WriteBack, 16 << 10).expect("cache"), record)
    }
}

#[test]
fn cache_over_a_pool_carve_on_raid0_of_files() {
    conformance::run_all(&|| TieredFiles::new().open().0);
}

#[test]
fn the_tiered_stack_keeps_fua_and_flushed_writes_and_identities_across_a_reopen() {
    let files = TieredFiles::new();
    let block = 4096usize;
    let (written, identity) = {
        let (backend, record) = files.open();
        let mut queue = backend.open_queue();
        let blocks = backend.geometry().block_count;
        // The content each LBA must hold after the reopen (the last write wins).
        let mut written = std::collections::BTreeMap::new();
        // FUA writes spread over the device (many more lines than the fast tier has
        // slots), then plain writes made durable by a Flush.
        for (index, lba) in (0..blocks).step_by(5).enumerate() {
            let force_unit_access = index % 2 == 0;
            let data = pattern(lba, block);
            let op = IoOp::Write { lba, blocks: 1, force_unit_access };
            let completion = submit_and_wait(&mut *queue, IoRequest { token: lba, op, buffer: data.clone() });
            assert_eq!(completion.result, Ok(()), "write lba {lba}");
            written.insert(lba, data);
        }
        let flush = submit_and_wait(&mut *queue, IoRequest { token: u64::MAX, op: IoOp::Flush, buffer: Vec::new() });
        assert_eq!(flush.result, Ok(()));
        // One more FUA write after the Flush, over a block written before it: the new
        // content must survive without another Flush.
        let last = *written.keys().next_back().expect("blocks were written");
        let data = pattern(u64::MAX, block);
        let op = IoOp::Write { lba: last, blocks: 1, force_unit_access: true };
        assert_eq!(submit_and_wait(&mut *queue, IoRequest { token: last, op, buffer: data.clone() }).result, Ok(()));
        written.insert(last, data);
        (written, (record.id, record.nguid, record.uuid))
    };
    let (backend, record) = files.open();
    assert_eq!((record.id, record.nguid, record.uuid), identity, "the carve keeps its identity");
    let mut queue = backend.open_queue();
    for (lba, data) in written {
        let completion = submit_and_wait(
            &mut *queue,
            IoRequest { token: lba, op: IoOp::Read { lba, blocks: 1 }, buffer: vec![0; block] },
        );
        assert_eq!(completion.result, Ok(()));
        assert!(completion.buffer == data, "lba {lba} lost across the reopen");
    }
}

//! The pool: carving, first-fit, thin allocation and NoSpace, persistence and identities
//! across reopen, corrupt tables, and the conformance suite on thick and thin carves.

mod support;

use std::sync::Arc;

use storage::conformance::{self, pattern, submit_and_wait};
use storage::pool::{UnitExtent, UnitMapping};
use storage::{Backend, CarvedId, Geometry, IoError, IoOp, IoRequest, Pool, PoolError, RamBackend, TableStore};
use support::DelayedBackend;

const UNIT: u64 = 64 * 1024;

fn ram(block_count: u64) -> Arc<dyn Backend> {
    RamBackend::new(Geometry { block_size_bytes: 512, block_count })
}

/// A pool of `units` 64 KiB units (128 blocks each).
fn pool(units: u64) -> (Pool, Arc<dyn Backend>, TableStore) {
    let backend = ram(units * 128);
    let table = TableStore::memory();
    let pool = Pool::open_with_unit_size(Arc::clone(&backend), table.clone(), UNIT).unwrap();
    (pool, backend, table)
}

fn write(backend: &Arc<dyn Backend>, lba: u64, data: Vec<u8>) -> Result<(), IoError> {
    let mut queue = backend.open_queue();
    let blocks = (data.len() / 512) as u32;
    let op = IoOp::Write { lba, blocks, force_unit_access: false };
    submit_and_wait(&mut *queue, IoRequest { token: 1, op, buffer: data }).result
}

fn read(backend: &Arc<dyn Backend>, lba: u64, blocks: u32) -> Vec<u8> {
    let mut queue = backend.open_queue();
    let op = IoOp::Read { lba, blocks };
    let completion =
        submit_and_wait(&mut *queue, IoRequest { token: 2, op, buffer: vec![0xEE; blocks as usize * 512] });
    assert_eq!(completion.result, Ok(()));
    completion.buffer
}

fn flush(backend: &Arc<dyn Backend>) {
    let mut queue = backend.open_queue();
    let completion = submit_and_wait(&mut *queue, IoRequest { token: 3, op: IoOp::Flush, buffer: Vec::new() });
    assert_eq!(completion.result, Ok(()));
}

/// A fresh pool per call (the suite runs checks in parallel), carve sized 8 MiB.
fn thick_carve() -> Arc<dyn Backend> {
    let (pool, _, _) = pool(256);
    let _spacer = pool.create(300, false).unwrap();
    let id = pool.create(8192 * 2 + 5, false).unwrap();
    pool.get(id).unwrap()
}

fn thin_carve() -> Arc<dyn Backend> {
    let (pool, _, _) = pool(512);
    let id = pool.create(8192 * 2 + 5, true).unwrap();
    // Another thin carve allocates units in between, so the map is not identity.
    let other = pool.get(pool.create(1 << 14, true).unwrap()).unwrap();
    for unit in 0..40 {
        write(&other, unit * 128 * 3, vec![1; 512]).unwrap();
    }
    pool.get(id).unwrap()
}

fn thin_carve_delayed() -> Arc<dyn Backend> {
    let backend = DelayedBackend::new(ram(512 * 128), 2);
    let pool = Pool::open_with_unit_size(backend, TableStore::memory(), UNIT).unwrap();
    let id = pool.create(8192, true).unwrap();
    pool.get(id).unwrap()
}

fn thick_carve_delayed() -> Arc<dyn Backend> {
    let backend = DelayedBackend::new(ram(512 * 128), 3);
    let pool = Pool::open_with_unit_size(backend, TableStore::memory(), UNIT).unwrap();
    pool.create(77, false).unwrap();
    let id = pool.create(8192, false).unwrap();
    pool.get(id).unwrap()
}

macro_rules! conformance_tests {
    ($module:ident, $factory:path) => {
        mod $module {
            use super::*;
            #[test]
            fn run_all() {
                conformance::run_all(&$factory);
            }
        }
    };
}

/// Composition: a thin carve of a pool on a RAID0 of delayed members.
fn thin_carve_on_raid0() -> Arc<dyn Backend> {
    let members = (0..3).map(|_| DelayedBackend::new(ram(200 * 128), 1) as Arc<dyn Backend>).collect();
    let raid = storage::Raid0Backend::new(members, 16384).unwrap();
    let pool = Pool::open_with_unit_size(raid, TableStore::memory(), UNIT).unwrap();
    let id = pool.create(8192 + 3, true).unwrap();
    pool.get(id).unwrap()
}

conformance_tests!(thin_on_raid0, thin_carve_on_raid0);
conformance_tests!(thick, thick_carve);
conformance_tests!(thin, thin_carve);
conformance_tests!(thick_delayed, thick_carve_delayed);
conformance_tests!(thin_delayed, thin_carve_delayed);

#[test]
fn create_get_delete_and_reopen() {
    let (pool, backend, table) = pool(64);
    assert_eq!(pool.unit_count(), 64);
    let a = pool.create(1000, false).unwrap();
    let b = pool.create(128, true).unwrap();
    assert_eq!((a, b), (CarvedId(1), CarvedId(2)));
    let view = pool.get(a).unwrap();
    assert_eq!(view.geometry(), Geometry { block_size_bytes: 512, block_count: 1000 });
    assert_eq!(view.kind(), "pool-thick");
    assert_eq!(pool.get(b).unwrap().kind(), "pool-thin");
    assert_eq!(pool.free_units(), 64 - 8);
    let data = pattern(1, 512 * 10);
    write(&view, 990, data.clone()).unwrap();
    let records = pool.records();
    drop(view);
    drop(pool);

    let reopened = Pool::open(Arc::clone(&backend), table.clone()).unwrap();
    assert_eq!(reopened.unit_size_bytes(), UNIT, "the unit comes from the table");
    assert_eq!(reopened.records(), records, "ids, sizes, identities survive");
    assert_eq!(read(&reopened.get(a).unwrap(), 990, 10), data);
    reopened.delete(a).unwrap();
    assert_eq!(reopened.get(a).err(), Some(PoolError::NotFound(a)));
    assert_eq!(reopened.delete(a).unwrap_err(), PoolError::NotFound(a));
    assert_eq!(reopened.free_units(), 64);
    // Ids are never reused; the freed space reads as zeroes in a new carve.
    let c = reopened.create(64 * 128, false).unwrap();
    assert_eq!(c, CarvedId(3));
    assert_eq!(read(&reopened.get(c).unwrap(), 990, 10), vec![0; 5120]);
    assert_eq!(reopened.create(1, false).unwrap_err(), PoolError::NoSpace);
}

#[test]
fn identities_are_distinct_and_stable() {
    let (pool, backend, table) = pool(16);
    let ids: Vec<_> = (0..4).map(|index| pool.create(100, index % 2 == 0).unwrap()).collect();
    let records = pool.records();
    for (index, record) in records.iter().enumerate() {
        assert_eq!(record.uuid[6] >> 4, 4, "UUID version 4");
        for other in &records[index + 1..] {
            assert_ne!(record.nguid, other.nguid);
            assert_ne!(record.uuid, other.uuid);
        }
    }
    drop(pool);
    let reopened = Pool::open(backend, table).unwrap();
    for (id, record) in ids.iter().zip(&records) {
        assert_eq!(&reopened.record(*id).unwrap(), record);
    }
}

#[test]
fn thick_carves_are_first_fit() {
    let (pool, _, _) = pool(16);
    let a = pool.create(2 * 128, false).unwrap(); // units 0..2
    let b = pool.create(3 * 128, false).unwrap(); // units 2..5
    let c = pool.create(128, false).unwrap(); // unit 5
    let d = pool.create(4 * 128, false).unwrap(); // units 6..10
    pool.delete(b).unwrap(); // hole of 3 at unit 2
    pool.delete(d).unwrap(); // hole of 10 at unit 6
    let extent = |id| pool.record(id).unwrap().extents[0];
    let e = pool.create(4 * 128, false).unwrap();
    assert_eq!(extent(e), UnitExtent { start_unit: 6, unit_count: 4 }, "too big for the first hole");
    let f = pool.create(2 * 128 + 1, false).unwrap();
    assert_eq!(extent(f), UnitExtent { start_unit: 2, unit_count: 3 }, "rounded up to units");
    assert_eq!(pool.create(7 * 128, false).unwrap_err(), PoolError::NoSpace);
    let g = pool.create(6 * 128, false).unwrap();
    assert_eq!(extent(g), UnitExtent { start_unit: 10, unit_count: 6 });
    assert_eq!(pool.free_units(), 0);
    let _ = (a, c);
}

#[test]
fn thin_allocates_on_write_and_fails_the_write_with_no_space() {
    let (pool, backend, table) = pool(8);
    let thick = pool.create(5 * 128, false).unwrap();
    let thin = pool.create(100 * 128, true).unwrap(); // overcommitted
    let view = pool.get(thin).unwrap();
    assert_eq!(read(&view, 50 * 128, 4), vec![0; 2048], "unallocated reads zeroes");
    assert!(pool.record(thin).unwrap().unit_map.is_empty(), "reads do not allocate");
    // A write straddling two units allocates both.
    write(&view, 10 * 128 + 127, vec![7; 1024]).unwrap();
    let map = pool.record(thin).unwrap().unit_map;
    assert_eq!(
        map,
        vec![UnitMapping { logical_unit: 10, physical_unit: 5 }, UnitMapping { logical_unit: 11, physical_unit: 6 },]
    );
    assert_eq!(read(&view, 10 * 128 + 126, 4), [vec![0; 512], vec![7; 1024], vec![0; 512]].concat());
    write(&view, 0, vec![9; 512]).unwrap();
    assert_eq!(pool.free_units(), 0);
    // Out of space: this write fails, earlier data and other commands are unaffected.
    assert_eq!(write(&view, 99 * 128, vec![1; 512]), Err(IoError::NoSpace));
    assert_eq!(read(&view, 99 * 128, 1), vec![0; 512]);
    assert_eq!(read(&view, 0, 1), vec![9; 512]);
    write(&view, 1, vec![8; 512]).unwrap();
    flush(&view);
    // Mappings survive reopen after a Flush.
    drop(view);
    drop(pool);
    let reopened = Pool::open(backend, table).unwrap();
    let view = reopened.get(thin).unwrap();
    assert_eq!(read(&view, 0, 2), [vec![9; 512], vec![8; 512]].concat());
    assert_eq!(read(&view, 10 * 128 + 127, 2), vec![7; 1024]);
    // Deleting the thick carve frees space for the thin one.
    reopened.delete(thick).unwrap();
    write(&view, 99 * 128, vec![1; 512]).unwrap();
    assert_eq!(read(&view, 99 * 128, 1), vec![1; 512]);
}

#[test]
fn deleted_thin_units_are_zeroed_before_reuse() {
    let (pool, _, _) = pool(4);
    let first = pool.get(pool.create(4 * 128, true).unwrap()).unwrap();
    write(&first, 0, vec![0xAB; 4 * 128 * 512]).unwrap();
    let first_id = pool.records()[0].id;
    pool.delete(first_id).unwrap();
    // The old handle no longer reaches the device.
    let mut queue = first.open_queue();
    let completion = submit_and_wait(
        &mut *queue,
        IoRequest { token: 1, op: IoOp::Read { lba: 0, blocks: 1 }, buffer: vec![0; 512] },
    );
    assert_eq!(completion.result, Err(IoError::Internal));
    let second = pool.get(pool.create(4 * 128, true).unwrap()).unwrap();
    write(&second, 5, vec![1; 512]).unwrap();
    let contents = read(&second, 0, 128);
    assert!(contents[..5 * 512].iter().all(|&byte| byte == 0));
    assert!(contents[6 * 512..].iter().all(|&byte| byte == 0));
}

/// Found by the simulator (crates/sim, seed 260 at the time): a thin unit mapped after
/// the table's last save is free again in the table a crash leaves, but holds what was
/// written into it; handed out to another logical unit, it showed that data where
/// nothing had been written.
#[test]
fn units_mapped_before_a_crash_are_zeroed_before_reuse() {
    let (pool, backend, table) = pool(4);
    let id = pool.create(4 * 128, true).unwrap();
    let carve = pool.get(id).unwrap();
    // Logical unit 0 gets physical unit 0; the mapping is never saved (no Flush).
    write(&carve, 1, vec![0xAB; 512]).unwrap();
    drop(carve);
    // The process dies: no clean close.
    std::mem::forget(pool);

    let pool = Pool::open(Arc::clone(&backend), table.clone()).unwrap();
    let carve = pool.get(id).unwrap();
    assert!(read(&carve, 0, 128).iter().all(|&byte| byte == 0), "the lost mapping reads zeroes");
    // Logical unit 1 gets the first free physical unit: the one written before.
    write(&carve, 128, vec![1; 512]).unwrap();
    let contents = read(&carve, 128, 128);
    assert!(contents[512..].iter().all(|&byte| byte == 0), "unwritten blocks of a new unit read zeroes");
    drop(carve);
    drop(pool);

    // A clean close is remembered: the next open does not zero anything.
    let text = table.text().unwrap().unwrap();
    assert!(text.contains("\"clean_shutdown\": true"), "{text}");
    let pool = Pool::open(Arc::clone(&backend), table.clone()).unwrap();
    let carve = pool.get(id).unwrap();
    assert_eq!(read(&carve, 128, 1), vec![1; 512], "mapped and saved at close");
    assert!(!table.text().unwrap().unwrap().contains("\"clean_shutdown\": true"), "open again until closed");
}

#[test]
fn rejects_bad_sizes() {
    let (pool, _, _) = pool(4);
    assert_eq!(pool.create(0, false).unwrap_err(), PoolError::InvalidSize(0));
    assert_eq!(pool.create(u64::MAX, true).unwrap_err(), PoolError::InvalidSize(u64::MAX));
    assert_eq!(pool.create(u64::MAX / 256, false).unwrap_err(), PoolError::InvalidSize(u64::MAX / 256));
    assert_eq!(pool.create(u64::MAX / 512, false).unwrap_err(), PoolError::NoSpace);
    assert_eq!(pool.create(1 << 40, true).unwrap_err(), PoolError::InvalidSize(1 << 40));
    assert_eq!(pool.create(5 * 128, false).unwrap_err(), PoolError::NoSpace);
    assert!(matches!(
        Pool::open_with_unit_size(ram(1024), TableStore::memory(), 3000).unwrap_err(),
        PoolError::InvalidUnitSize { .. }
    ));
    assert!(matches!(
        Pool::open_with_unit_size(ram(64), TableStore::memory(), UNIT).unwrap_err(),
        PoolError::InvalidUnitSize { .. }
    ));
}

#[test]
fn corrupt_tables_are_rejected_with_a_reason() {
    let (pool, backend, table) = pool(8);
    pool.create(2 * 128, false).unwrap();
    let thin = pool.create(4 * 128, true).unwrap();
    write(&pool.get(thin).unwrap(), 0, vec![1; 512]).unwrap();
    pool.sync().unwrap();
    drop(pool);
    let good = table.text().unwrap().unwrap();
    let reopen = |text: &str| {
        table.set_memory_text(text);
        Pool::open(Arc::clone(&backend), table.clone()).unwrap_err()
    };
    let overlapping = good.replacen("\"physical_unit\": 2", "\"physical_unit\": 1", 1);
    assert_ne!(overlapping, good);
    let error = reopen(&overlapping);
    assert!(matches!(&error, PoolError::CorruptTable(message) if message.contains("overlaps")), "{error}");
    let beyond = good.replacen("\"physical_unit\": 2", "\"physical_unit\": 80", 1);
    let error = reopen(&beyond);
    assert!(matches!(&error, PoolError::CorruptTable(message) if message.contains("beyond")), "{error}");
    let error = reopen("{ not json");
    assert!(matches!(error, PoolError::CorruptTable(_)), "{error}");
    let error = reopen(&good.replacen("\"block_size_bytes\": 512", "\"block_size_bytes\": 4096", 1));
    assert!(matches!(&error, PoolError::CorruptTable(message) if message.contains("4096")), "{error}");
    table.set_memory_text(&good);
    Pool::open(backend, table).unwrap();
}

#[test]
fn file_table_is_written_atomically_and_reopens() {
    let directory = std::env::temp_dir().join(format!("sluice-pool-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join("pool.json");
    let _ = std::fs::remove_file(&path);
    let backend = ram(16 * 128);
    let store = TableStore::File(path.clone());
    let pool = Pool::open_with_unit_size(Arc::clone(&backend), store.clone(), UNIT).unwrap();
    let id = pool.create(300, true).unwrap();
    let view = pool.get(id).unwrap();
    write(&view, 200, vec![5; 512]).unwrap();
    flush(&view);
    let record = pool.record(id).unwrap();
    drop(view);
    drop(pool);
    assert!(path.exists());
    assert!(!directory.join("pool.json.tmp").exists());
    let reopened = Pool::open(backend, store).unwrap();
    assert_eq!(reopened.record(id).unwrap(), record);
    assert_eq!(read(&reopened.get(id).unwrap(), 200, 1), vec![5; 512]);
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn bindings_are_saved_with_the_carve_and_survive_reopen() {
    use storage::pool::NamespaceBinding;
    let (pool, backend, table) = pool(16);
    let binding = NamespaceBinding {
        subsystem_nqn: "nqn.2026-11.io.sluice:pool".into(),
        namespace_id: 7,
        all_hosts: false,
        hosts: vec![],
    };
    let id = pool.create_bound(256, true, Some(binding.clone())).unwrap();
    assert_eq!(pool.allocated_blocks(id).unwrap(), 0, "a thin carve uses nothing before a write");
    let attached = NamespaceBinding { hosts: vec!["nqn.2014-08.org.nvmexpress:uuid:host-a".into()], ..binding };
    pool.set_binding(id, Some(attached.clone())).unwrap();
    let carve = pool.get(id).unwrap();
    write(&carve, 0, pattern(1, 512)).unwrap();
    flush(&carve);
    assert_eq!(pool.allocated_blocks(id).unwrap(), 128, "one 64 KiB unit mapped");
    assert_eq!(pool.capacity_bytes(), 16 * UNIT);
    assert_eq!(pool.free_bytes(), 15 * UNIT);
    assert_eq!(pool.block_size_bytes(), 512);
    drop(carve);
    drop(pool);
    let reopened = Pool::open_with_unit_size(backend, table, UNIT).unwrap();
    assert_eq!(reopened.record(id).unwrap().binding, Some(attached));
    assert_eq!(reopened.set_binding(CarvedId(99), None), Err(PoolError::NotFound(CarvedId(99))));
}

/// Runs service jobs only when the test says so.
#[derive(Default)]
struct ManualExecutor {
    jobs: std::sync::Mutex<Vec<storage::service::ServiceJob>>,
}

impl ManualExecutor {
    fn run_all(&self) -> usize {
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap());
        let count = jobs.len();
        for job in jobs {
            job();
        }
        count
    }
}

impl storage::service::ServiceExecutor for ManualExecutor {
    fn execute(&self, job: storage::service::ServiceJob) {
        self.jobs.lock().unwrap().push(job);
    }
}

#[test]
fn flush_of_new_thin_mappings_completes_only_after_the_service_saved_the_table() {
    let executor = Arc::new(ManualExecutor::default());
    let backend = ram(16 * 128);
    let table = TableStore::memory();
    let pool = Pool::open_with_service(Arc::clone(&backend), table.clone(), UNIT, executor.clone()).unwrap();
    let id = pool.create(8 * 128, true).unwrap();
    let carve = pool.get(id).unwrap();
    let saved_mappings = || pool_record_in_table(&table, id);
    let waker_count = storage::conformance::WakeCounter::new();
    let waker = waker_count.waker();
    let mut queue = carve.open_queue_with_waker(&waker);

    // A plain write maps a unit without waiting for anything.
    queue.submit(IoRequest {
        token: 1,
        op: IoOp::Write { lba: 0, blocks: 1, force_unit_access: false },
        buffer: pattern(1, 512),
    });
    let mut done = Vec::new();
    queue.reap(&mut done);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].result, Ok(()));
    assert_eq!(saved_mappings(), 0, "nothing saved on the write path");

    // The Flush waits for the save, which runs only on the executor.
    queue.submit(IoRequest { token: 2, op: IoOp::Flush, buffer: Vec::new() });
    done.clear();
    for _ in 0..3 {
        queue.reap(&mut done);
    }
    assert!(done.is_empty(), "a Flush completed before its mappings were saved");
    assert_eq!(queue.in_flight(), 1);
    assert!(queue.wakes_on_completion(), "the queue's owner may sleep: the ticket wakes it");
    assert_eq!(saved_mappings(), 0);
    assert_eq!(executor.run_all(), 1);
    assert_eq!(saved_mappings(), 1);
    assert!(waker_count.count() >= 1, "finishing the save woke the owner");
    queue.reap(&mut done);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].token, done[0].result), (2, Ok(())));

    // Nothing new mapped: the next Flush needs no save.
    queue.submit(IoRequest { token: 3, op: IoOp::Flush, buffer: Vec::new() });
    done.clear();
    queue.reap(&mut done);
    assert_eq!(done.len(), 1, "a Flush with every mapping saved waits for no job");
    assert_eq!(executor.run_all(), 0);

    // Two FUA writes into new units share one save.
    for (token, lba) in [(4, 128), (5, 256)] {
        queue.submit(IoRequest {
            token,
            op: IoOp::Write { lba, blocks: 1, force_unit_access: true },
            buffer: pattern(token, 512),
        });
    }
    done.clear();
    queue.reap(&mut done);
    assert!(done.is_empty());
    assert_eq!(executor.run_all(), 1, "one save job serves both waiters");
    queue.reap(&mut done);
    assert_eq!(done.iter().map(|completion| completion.token).collect::<Vec<_>>().len(), 2);
    assert_eq!(saved_mappings(), 3);
}

/// Thin mappings of carve `id` in the stored table text.
fn pool_record_in_table(table: &TableStore, id: CarvedId) -> usize {
    let text = table.text().unwrap().unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["carves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|carve| carve["id"].as_u64() == Some(u64::from(id.0)))
        .and_then(|carve| carve["unit_map"].as_array().map(Vec::len))
        .unwrap_or(0)
}

#[test]
fn a_flush_whose_table_save_fails_fails_and_the_next_one_saves_again() {
    let directory = std::env::temp_dir().join(format!("sluice-pool-save-fails-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join("pool.json");
    let executor = Arc::new(ManualExecutor::default());
    let pool = Pool::open_with_service(ram(16 * 128), TableStore::File(path.clone()), UNIT, executor.clone()).unwrap();
    let id = pool.create(8 * 128, true).unwrap();
    let carve = pool.get(id).unwrap();
    let mut queue = carve.open_queue();
    let mut done = Vec::new();
    queue.submit(IoRequest {
        token: 1,
        op: IoOp::Write { lba: 0, blocks: 1, force_unit_access: false },
        buffer: pattern(1, 512),
    });
    queue.reap(&mut done);
    assert_eq!(done.pop().map(|completion| completion.result), Some(Ok(())));

    // The table's directory is gone: the save fails, and so does the Flush.
    std::fs::remove_dir_all(&directory).unwrap();
    queue.submit(IoRequest { token: 2, op: IoOp::Flush, buffer: Vec::new() });
    assert_eq!(executor.run_all(), 1);
    queue.reap(&mut done);
    assert_eq!(done.pop().map(|completion| completion.result), Some(Err(IoError::Internal)));

    // Still unsaved: the next Flush asks for a save again, which now succeeds.
    std::fs::create_dir_all(&directory).unwrap();
    queue.submit(IoRequest { token: 3, op: IoOp::Flush, buffer: Vec::new() });
    assert_eq!(executor.run_all(), 1, "a failed save leaves the mappings unsaved");
    queue.reap(&mut done);
    assert_eq!(done.pop().map(|completion| completion.result), Some(Ok(())));
    assert_eq!(pool_record_in_table(&TableStore::File(path), id), 1);
    drop(queue);
    drop(pool);
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn carves_grow_live_keep_their_data_and_reopen_grown() {
    let (pool, backend, table) = pool(64);
    let thin = pool.create(2 * 128, true).unwrap();
    let thick = pool.create(2 * 128, false).unwrap();
    let (thin_view, thick_view) = (pool.get(thin).unwrap(), pool.get(thick).unwrap());
    // Queues opened before the resize must take the new blocks too.
    let mut thin_queue = thin_view.open_queue();
    let mut thick_queue = thick_view.open_queue();
    let old_data = pattern(2, 512 * 4);
    write(&thick_view, 252, old_data.clone()).unwrap();
    let beyond = |token| IoRequest {
        token,
        op: IoOp::Write { lba: 256, blocks: 8, force_unit_access: false },
        buffer: pattern(3, 4096),
    };
    assert_eq!(submit_and_wait(&mut *thin_queue, beyond(1)).result, Err(IoError::OutOfRange), "not grown yet");

    assert_eq!(thick_view.grow(4 * 128).unwrap().block_count, 4 * 128);
    assert_eq!(pool.free_units(), 64 - 4, "the thick carve took the two units after it");
    write(&thin_view, 252, old_data.clone()).unwrap();
    assert_eq!(thin_view.grow(5 * 128 + 7).unwrap().block_count, 5 * 128 + 7, "a thin carve grows to any block count");
    assert_eq!(pool.free_units(), 64 - 4 - 1, "the thin one mapped only what was written");
    assert_eq!(submit_and_wait(&mut *thin_queue, beyond(2)).result, Ok(()));
    assert_eq!(submit_and_wait(&mut *thick_queue, beyond(3)).result, Ok(()));
    assert_eq!(read(&thin_view, 600, 40), vec![0; 40 * 512], "new thin blocks read as zeroes");
    assert_eq!(read(&thick_view, 300, 100), vec![0; 100 * 512], "new thick blocks read as zeroes");
    // Growing writes at the end of the new size work; one block past it does not.
    write(&thin_view, 5 * 128 + 6, pattern(4, 512)).unwrap();
    assert_eq!(write(&thin_view, 5 * 128 + 7, pattern(4, 512)), Err(IoError::OutOfRange));
    assert_eq!(thin_view.grow(5 * 128 + 7), Ok(thin_view.geometry()), "the same size again is a success");
    flush(&thin_view);
    drop((thin_queue, thick_queue, thin_view, thick_view));
    drop(pool);

    let reopened = Pool::open(Arc::clone(&backend), table.clone()).unwrap();
    let (thin_view, thick_view) = (reopened.get(thin).unwrap(), reopened.get(thick).unwrap());
    assert_eq!(thin_view.geometry().block_count, 5 * 128 + 7, "the new size was saved");
    assert_eq!(thick_view.geometry().block_count, 4 * 128);
    for view in [&thin_view, &thick_view] {
        assert_eq!(read(view, 252, 4), old_data);
        assert_eq!(read(view, 256, 8), pattern(3, 4096));
    }
    assert_eq!(reopened.free_units(), 64 - 4 - 3, "the table's unit use survived too");
}

#[test]
fn carves_never_shrink_and_a_thick_carve_grows_only_into_free_units_after_it() {
    let (pool, _, _) = pool(8);
    let thick = pool.create(2 * 128, false).unwrap();
    let neighbour = pool.create(128, false).unwrap();
    let view = pool.get(thick).unwrap();
    let error = view.grow(3 * 128).unwrap_err();
    assert!(
        matches!(&error, storage::GrowError::NoSpace(message) if message.contains("units 2..3 after it are in use")),
        "{error}"
    );
    assert_eq!(view.geometry().block_count, 2 * 128, "unchanged");
    assert_eq!(pool.free_units(), 5);
    assert_eq!(
        view.grow(2 * 128 - 1),
        Err(storage::GrowError::WouldShrink { current_blocks: 256, requested_blocks: 255 })
    );
    let last = pool.get(neighbour).unwrap();
    let error = last.grow(7 * 128).unwrap_err();
    assert!(
        matches!(&error, storage::GrowError::NoSpace(message) if message.contains("past the end of the pool")),
        "{error}"
    );
    assert_eq!(last.grow(6 * 128).unwrap().block_count, 6 * 128, "every unit up to the end");
    assert_eq!(pool.free_units(), 0);
    let thin = pool.get(pool.create(128, true).unwrap()).unwrap();
    let error = thin.grow((storage::pool::MAX_THIN_UNITS + 1) * 128).unwrap_err();
    assert!(matches!(error, storage::GrowError::TooLarge { .. }), "{error}");
    pool.delete(thick).unwrap();
    assert!(view.grow(3 * 128).is_err(), "a deleted carve does not grow");
}

/// Writers map thin units at and near the moving end while another thread grows the
/// carve unit by unit: every write lands in the map that stays (none is lost to a map
/// swapped under it), reads see the last write of each block, and so does the table
/// after a reopen. Each writer owns the blocks `lba % WRITERS == id`, so its own
/// record of what it wrote is the oracle.
#[test]
fn writes_racing_a_growing_thin_carve_are_all_kept() {
    const WRITERS: u64 = 3;
    const OPERATIONS: u64 = 1500;
    let (pool, backend, table) = pool(256);
    let id = pool.create(4 * 128, true).unwrap();
    let carve = pool.get(id).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let written: Vec<std::collections::HashMap<u64, Vec<u8>>> = std::thread::scope(|scope| {
        let grower = scope.spawn(|| {
            for units in 5..=200u64 {
                carve.grow(units * 128).unwrap();
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let carve = &carve;
                scope.spawn(move || {
                    let mut queue = carve.open_queue();
                    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ writer;
                    let mut next = move || {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state
                    };
                    let mut mine = std::collections::HashMap::new();
                    for operation in 0..OPERATIONS {
                        let size = carve.geometry().block_count;
                        // Half near the end (fresh units, often the newest), half anywhere.
                        let distance = if next() % 2 == 0 { next() % 256 } else { next() % size };
                        let mut lba = size.saturating_sub(1 + distance);
                        lba -= lba % WRITERS;
                        lba += writer;
                        if lba >= size {
                            continue;
                        }
                        let data = pattern(operation * 8 + writer + 1, 512);
                        let request = IoRequest {
                            token: operation,
                            op: IoOp::Write { lba, blocks: 1, force_unit_access: false },
                            buffer: data.clone(),
                        };
                        assert_eq!(submit_and_wait(&mut *queue, request).result, Ok(()), "write at {lba} of {size}");
                        mine.insert(lba, data);
                        if operation % 8 == 0 {
                            let (&check, expected) = mine.iter().next().unwrap();
                            let read = IoRequest {
                                token: operation,
                                op: IoOp::Read { lba: check, blocks: 1 },
                                buffer: vec![0; 512],
                            };
                            assert_eq!(&submit_and_wait(&mut *queue, read).buffer, expected, "block {check} read back");
                        }
                    }
                    mine
                })
            })
            .collect();
        let written = writers.into_iter().map(|writer| writer.join().unwrap()).collect();
        grower.join().unwrap();
        written
    });
    assert!(done.load(std::sync::atomic::Ordering::Acquire));
    let verify = |carve: &Arc<dyn Backend>| {
        for mine in &written {
            for (&lba, expected) in mine {
                assert!(read(carve, lba, 1) == *expected, "block {lba} lost");
            }
        }
    };
    verify(&carve);
    flush(&carve);
    drop(carve);
    drop(pool);
    let reopened = Pool::open(Arc::clone(&backend), table.clone()).unwrap();
    let carve = reopened.get(id).unwrap();
    assert_eq!(carve.geometry().block_count, 200 * 128);
    verify(&carve);
}

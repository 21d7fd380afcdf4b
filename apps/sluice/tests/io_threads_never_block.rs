//! The storage contract's promise, end to end: nothing reached from a runtime I/O
//! thread blocks. The target runs on the io_uring runtime (whose threads mark
//! themselves as I/O threads) with a pool over an asserting backend and a table file
//! (real fsyncs). A host creates a thin namespace, attaches it, writes with and without
//! FUA into new units, flushes, detaches and deletes it. With debug assertions on (as
//! the test command builds), a pool table save, a zeroing or another blocking step
//! reached from an I/O thread panics there (`storage::service`); the asserting backend
//! records every queue used off the thread that opened it, and counts where calls come
//! from, so the test also shows the blocking work did run, on the service thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use nvme_host::commands::{namespace_attach, namespace_create, namespace_delete, namespace_detach, NamespaceCreate};
use nvme_host::{HostCommand, HostCompletion};
use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use nvme_target::{HostAccess, ListenerSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use storage::service::is_io_thread;
use storage::{Backend, BackendQueue, Geometry, IoCompletion, IoRequest, Pool, RamBackend, TableStore};
use target_server::LoopbackTarget;

const POOL_NQN: &str = "nqn.2026-11.io.sluice:never-block";
const BLOCK_BYTES: u32 = 512;
const POOL_BYTES: u64 = 64 << 20;
/// Blocks of a 1 MiB pool unit.
const UNIT_BLOCKS: u64 = (1 << 20) / BLOCK_BYTES as u64;

/// What the asserting backend saw.
#[derive(Default)]
struct Record {
    violations: Mutex<Vec<String>>,
    io_thread_calls: AtomicU64,
    other_thread_calls: AtomicU64,
}

/// A backend whose queues panic (and record why) when used off the thread that
/// opened them: one owner per queue, as the runtime promises.
struct AssertingBackend {
    inner: Arc<dyn Backend>,
    record: Arc<Record>,
}

struct AssertingQueue {
    inner: Box<dyn BackendQueue>,
    owner: ThreadId,
    record: Arc<Record>,
}

impl AssertingQueue {
    fn check(&self, call: &str) {
        let counter = if is_io_thread() { &self.record.io_thread_calls } else { &self.record.other_thread_calls };
        counter.fetch_add(1, Ordering::Relaxed);
        let current = std::thread::current();
        if current.id() != self.owner {
            let violation = format!("{call} on thread {:?}, not the queue's owner", current.name());
            self.record.violations.lock().unwrap().push(violation.clone());
            panic!("{violation}");
        }
    }
}

impl BackendQueue for AssertingQueue {
    fn submit(&mut self, request: IoRequest) {
        self.check("submit");
        self.inner.submit(request);
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        self.check("reap");
        self.inner.reap(out);
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    fn wakes_on_completion(&self) -> bool {
        self.inner.wakes_on_completion()
    }
}

impl Backend for AssertingBackend {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn has_volatile_write_cache(&self) -> bool {
        self.inner.has_volatile_write_cache()
    }

    fn kind(&self) -> &'static str {
        "asserting"
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(AssertingQueue {
            inner: self.inner.open_queue(),
            owner: std::thread::current().id(),
            record: Arc::clone(&self.record),
        })
    }

    fn open_queue_with_waker(&self, waker: &Waker) -> Box<dyn BackendQueue> {
        Box::new(AssertingQueue {
            inner: self.inner.open_queue_with_waker(waker),
            owner: std::thread::current().id(),
            record: Arc::clone(&self.record),
        })
    }
}

struct Fixture {
    target: LoopbackTarget,
    pool: Arc<Pool>,
    record: Arc<Record>,
    table_path: PathBuf,
}

impl Fixture {
    fn start() -> Fixture {
        let directory = std::env::temp_dir().join(format!("sluice-never-block-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("temp dir");
        let table_path = directory.join("pool.json");
        let _ = std::fs::remove_file(&table_path);
        let record = Arc::new(Record::default());
        let ram: Arc<dyn Backend> = RamBackend::new(Geometry {
            block_size_bytes: BLOCK_BYTES,
            block_count: POOL_BYTES / u64::from(BLOCK_BYTES),
        });
        let backend: Arc<dyn Backend> = Arc::new(AssertingBackend { inner: ram, record: Arc::clone(&record) });
        let pool = Arc::new(Pool::open(backend, TableStore::File(table_path.clone())).expect("pool"));
        // Port 0: the runtime binds a free port and reports it (the discovery log,
        // which would show 0, is not used here).
        let target = Target::new(TargetSpec {
            listeners: vec![ListenerSpec::tcp("127.0.0.1", 0)],
            subsystems: vec![SubsystemSpec {
                nqn: POOL_NQN.into(),
                serial_number: None,
                model_number: None,
                namespaces: Vec::new(),
                pool: Some(Arc::clone(&pool)),
                hosts: HostAccess::allow_any(),
            }],
            settings: TargetSettings::default(),
        })
        .expect("target");
        let target = LoopbackTarget::start(target, 0, 1).expect("the target starts");
        Fixture { target, pool, record, table_path }
    }

    fn connect(&self) -> Controller {
        let mut options = ConnectOptions::new(self.target.address(), POOL_NQN);
        options.io_queues = 1;
        options.command_timeout = Duration::from_secs(20);
        options.connect_timeout = Duration::from_secs(5);
        Controller::connect(options).expect("the host connects")
    }

    /// Thin mappings of every carve in the table file as it is on disk now.
    fn saved_mappings(&self) -> usize {
        let text = std::fs::read_to_string(&self.table_path).expect("table file");
        let table: serde_json::Value = serde_json::from_str(&text).expect("table JSON");
        table["carves"]
            .as_array()
            .expect("carves")
            .iter()
            .map(|carve| carve["unit_map"].as_array().map_or(0, Vec::len))
            .sum()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(directory) = self.table_path.parent() {
            let _ = std::fs::remove_dir_all(directory);
        }
    }
}

fn admin_ok(host: &Controller, command: HostCommand, what: &str) -> HostCompletion {
    let completion = host.admin_command(command).unwrap_or_else(|error| panic!("{what}: {error}"));
    assert!(completion.cqe.status.is_success(), "{what}: {:?}", completion.cqe.status);
    completion
}

#[test]
fn pool_management_and_thin_durability_never_block_the_io_thread() {
    let fixture = Fixture::start();
    let host = fixture.connect();
    let units_at_start = fixture.pool.free_units();
    // Opening the fresh pool zeroed it on this thread; count from here.
    let other_thread_calls_at_start = fixture.record.other_thread_calls.load(Ordering::Relaxed);

    // Namespace Management create and attach: both save the pool table.
    let created = admin_ok(
        &host,
        namespace_create(&NamespaceCreate { size_blocks: 16 * UNIT_BLOCKS, capacity_blocks: 1, ..Default::default() }),
        "create a thin namespace",
    );
    let nsid = NamespaceId(created.cqe.result_dw0);
    assert_ne!(nsid.0, 0, "the new NSID comes back in DW0");
    admin_ok(&host, namespace_attach(nsid, &[host.controller_id()]), "attach");
    assert!(host.active_namespaces().expect("namespace list").contains(&nsid));

    // New units: a FUA write (its mapping must be saved before it completes) and a
    // plain write made durable by a Flush.
    let first = vec![0xA5u8; 4096];
    let second = vec![0x5Au8; 4096];
    host.write(nsid, 0, &first, true).expect("FUA write into a new unit");
    assert_eq!(fixture.saved_mappings(), 1, "a FUA write completes only after its mapping is saved");
    host.write(nsid, 3 * UNIT_BLOCKS, &second, false).expect("write into another new unit");
    host.flush(nsid).expect("flush");
    assert_eq!(fixture.saved_mappings(), 2, "a Flush completes only after every mapping is saved");
    assert_eq!(host.read(nsid, 0, 8).expect("read"), first);
    assert_eq!(host.read(nsid, 3 * UNIT_BLOCKS, 8).expect("read"), second);

    // Detach and delete: the carve's units are zeroed and freed off the I/O thread.
    admin_ok(&host, namespace_detach(nsid, &[host.controller_id()]), "detach");
    admin_ok(&host, namespace_delete(nsid), "delete");
    let deadline = Instant::now() + Duration::from_secs(20);
    while fixture.pool.free_units() != units_at_start {
        assert!(Instant::now() < deadline, "the deleted namespace's units were not freed within 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(host);

    let violations = fixture.record.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "queues used off their thread: {violations:?}");
    assert!(fixture.record.io_thread_calls.load(Ordering::Relaxed) > 0, "the data path ran on the I/O thread");
    assert!(
        fixture.record.other_thread_calls.load(Ordering::Relaxed) > other_thread_calls_at_start,
        "zeroing the deleted carve ran on a thread that may block"
    );
    let mut fixture = fixture;
    fixture.target.stop().expect("the runtime thread ended without a panic");
}

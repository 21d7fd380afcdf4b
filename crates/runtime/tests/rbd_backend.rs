//! The `rbd` backend against a real one-node Ceph cluster: the storage conformance
//! suite, completions that wake the owner instead of being polled for, write buffers
//! that are free once their write completes, one cluster connection for many images,
//! actionable open errors, and Sluice's librados defaults yielding to the operator's.
//! Each test deletes the images it made when it ends.
//!
//! Needs a cluster: `CEPH_CONF` naming its ceph.conf (scripts/test.sh starts one with
//! ../shared/ceph-single-node.sh and sets it). Without one the tests say so and pass,
//! unless `SLUICE_REQUIRE_CEPH=1` (set by scripts/test.sh), which turns that into a
//! failure so CI can never skip them silently.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use runtime::rbd_backend::{client_option, open_connections, ImageChange};
use runtime::{RadosObject, RbdBackend, RbdError, RbdOptions};
use storage::conformance::{pattern, submit_and_wait};
use storage::{Backend, IoCompletion, IoError, IoOp, IoRequest};

/// The pool ceph-single-node.sh creates.
const POOL: &str = "rbd";

/// The cluster, when there is one: the returned guard deletes the images this
/// test's thread named ([`unique_image`]) when the test ends, so runs leave the
/// shared cluster as they found it.
fn cluster() -> Option<ImagesOfThisTest> {
    if std::env::var_os("CEPH_CONF").is_some() {
        return Some(ImagesOfThisTest);
    }
    assert!(
        std::env::var_os("SLUICE_REQUIRE_CEPH").is_none(),
        "SLUICE_REQUIRE_CEPH is set but CEPH_CONF is not: start a cluster (../shared/ceph-single-node.sh up)"
    );
    eprintln!("skipped: no Ceph cluster (set CEPH_CONF; scripts/test.sh starts one)");
    None
}

thread_local! {
    /// The image names this thread's test made up (each test runs on its own thread).
    static NAMED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Deletes the images of this test when dropped (declared first in a test, so
/// dropped after the backends that hold them open). Never panics: it may run while
/// the test unwinds.
struct ImagesOfThisTest;

impl Drop for ImagesOfThisTest {
    fn drop(&mut self) {
        let cluster = RbdOptions::new(POOL, "").cluster;
        for image in NAMED.with(|named| std::mem::take(&mut *named.borrow_mut())) {
            // A handle's close lets go of its watch a moment later (EBUSY meanwhile).
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match runtime::rbd_backend::remove_image(&cluster, POOL, &image) {
                    Err(error) if error.is_busy() && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    Err(error) => {
                        eprintln!("could not delete test image {POOL}/{image}: {error}");
                        break;
                    }
                    Ok(_) => break,
                }
            }
        }
    }
}

/// Held by the tests that count this process's cluster connections and by the one
/// that opens connections of its own specs, which would otherwise be counted too
/// when both run at once.
static CONNECTION_COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A name no other test run uses.
fn unique_image(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    NAMED.with(|named| named.borrow_mut().push(name.clone()));
    name
}

fn new_image(prefix: &str, size_bytes: u64, block_size: u32) -> Arc<RbdBackend> {
    let mut options = RbdOptions::new(POOL, unique_image(prefix));
    options.size_bytes = Some(size_bytes);
    options.block_size_bytes = block_size;
    let (backend, change) = RbdBackend::open(&options).expect("create and open a test image");
    assert_eq!(change, ImageChange::Created);
    backend
}

#[test]
fn conformance_512_byte_blocks() {
    let Some(_images) = cluster() else { return };
    storage::conformance::run_all(&|| new_image("conf512", 4 << 20, 512) as Arc<dyn Backend>);
}

#[test]
fn conformance_4096_byte_blocks() {
    let Some(_images) = cluster() else { return };
    storage::conformance::run_all(&|| new_image("conf4k", 4 << 20, 4096) as Arc<dyn Backend>);
}

/// Counts wakes, like the runtime's storage eventfd would.
#[derive(Default)]
struct CountingWake(AtomicUsize);

impl Wake for CountingWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn completions_wake_the_owner() {
    let Some(_images) = cluster() else { return };
    let backend = new_image("wake", 8 << 20, 4096);
    let wakes = Arc::new(CountingWake::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut queue = backend.open_queue_with_waker(&waker);
    assert!(queue.wakes_on_completion(), "an idle queue opened with a waker wakes");
    let requests = 300; // more than RBD_QUEUE_SLOTS: some wait for a slot
    for index in 0..requests {
        let op = IoOp::Write { lba: index % 2048, blocks: 1, force_unit_access: index % 7 == 0 };
        queue.submit(IoRequest { token: index, op, buffer: pattern(index, 4096) });
    }
    let mut completions: Vec<IoCompletion> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while completions.len() < requests as usize {
        assert!(Instant::now() < deadline, "only {} of {requests} completions", completions.len());
        // Reap only after a wake, as the runtime does: a missed wake hangs here.
        let seen = wakes.0.load(Ordering::SeqCst);
        queue.reap(&mut completions);
        if completions.len() < requests as usize {
            while wakes.0.load(Ordering::SeqCst) == seen && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    assert_eq!(queue.in_flight(), 0);
    let mut tokens: Vec<u64> = completions.iter().map(|completion| completion.token).collect();
    tokens.sort_unstable();
    assert_eq!(tokens, (0..requests).collect::<Vec<_>>(), "every token exactly once");
    assert!(completions.iter().all(|completion| completion.result.is_ok()));

    // A request refused before librbd completes at once: the queue then asks to be
    // polled, since no wake will come for it.
    queue.submit(IoRequest { token: 1, op: IoOp::Read { lba: u64::MAX, blocks: 1 }, buffer: vec![0; 4096] });
    assert!(!queue.wakes_on_completion());
    let mut refused = Vec::new();
    queue.reap(&mut refused);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].result, Err(IoError::OutOfRange));
}

/// A buffer handed back with its write's completion is the caller's again: scribbled
/// over at once, it must not change what the image holds (librbd must be done with
/// it, whether it copied the data or, with zero-copy writes, sent from the buffer).
#[test]
fn write_buffers_are_free_once_their_write_completes() {
    let Some(_images) = cluster() else { return };
    const WRITES: u64 = 48;
    const BLOCKS: u64 = 32; // 128 KiB of 4 KiB blocks
    let bytes = (BLOCKS * 4096) as usize;
    let backend = new_image("reuse", WRITES * BLOCKS * 4096, 4096);
    let mut queue = backend.open_queue();
    for index in 0..WRITES {
        let op = IoOp::Write { lba: index * BLOCKS, blocks: BLOCKS as u32, force_unit_access: false };
        queue.submit(IoRequest { token: index, op, buffer: pattern(index, bytes) });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = 0;
    let mut completions = Vec::new();
    while done < WRITES {
        assert!(Instant::now() < deadline, "only {done} of {WRITES} writes completed");
        queue.reap(&mut completions);
        for mut completion in completions.drain(..) {
            assert_eq!(completion.result, Ok(()));
            completion.buffer.fill(0xEE);
            done += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for index in 0..WRITES {
        let read = IoOp::Read { lba: index * BLOCKS, blocks: BLOCKS as u32 };
        let answer = submit_and_wait(&mut *queue, IoRequest { token: index, op: read, buffer: vec![0; bytes] });
        assert_eq!(answer.result, Ok(()));
        assert!(answer.buffer == pattern(index, bytes), "write {index} reads back changed");
    }
}

#[test]
fn data_survives_reopen_and_many_images_share_one_connection() {
    let Some(_images) = cluster() else { return };
    let _counting = CONNECTION_COUNT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let name = unique_image("reopen");
    let mut options = RbdOptions::new(POOL, &name);
    options.size_bytes = Some(4 << 20);
    let data = pattern(99, 64 * 512);
    {
        let (backend, _) = RbdBackend::open(&options).expect("create");
        let mut queue = backend.open_queue();
        let write = IoOp::Write { lba: 100, blocks: 64, force_unit_access: true };
        assert_eq!(
            submit_and_wait(&mut *queue, IoRequest { token: 1, op: write, buffer: data.clone() }).result,
            Ok(())
        );
    }
    // Opened again, larger: grown, never shrunk, data kept.
    options.size_bytes = Some(8 << 20);
    let (backend, change) = RbdBackend::open(&options).expect("reopen");
    assert_eq!(change, ImageChange::Grown { from_bytes: 4 << 20 });
    assert_eq!(backend.geometry().capacity_bytes(), 8 << 20);
    options.size_bytes = Some(1 << 20);
    let (smaller, change) = RbdBackend::open(&options).expect("reopen with a smaller size");
    assert_eq!(change, ImageChange::None);
    assert_eq!(smaller.geometry().capacity_bytes(), 8 << 20, "never shrinks");
    let mut queue = backend.open_queue();
    let read = submit_and_wait(
        &mut *queue,
        IoRequest { token: 2, op: IoOp::Read { lba: 100, blocks: 64 }, buffer: vec![0; data.len()] },
    );
    assert_eq!(read.result, Ok(()));
    assert!(read.buffer == data, "data read back after reopen differs");

    let others: Vec<Arc<RbdBackend>> = (0..8).map(|_| new_image("shared", 1 << 20, 512)).collect();
    assert_eq!(open_connections(), 1, "every image of one cluster shares one librados connection");
    let status = others[0].status();
    assert_eq!((status.pool.as_str(), status.state, status.errors), (POOL, "connected", 0));
    assert!(!status.monitors.is_empty(), "{status:?}");
}

#[test]
fn open_errors_name_the_pool_image_and_fix() {
    let Some(_images) = cluster() else { return };
    let missing_pool = RbdBackend::open(&RbdOptions::new("no-such-pool", "x")).map(|_| ()).unwrap_err();
    assert!(matches!(missing_pool, RbdError::PoolMissing { .. }), "{missing_pool}");
    let text = missing_pool.to_string();
    assert!(text.contains("\"no-such-pool\"") && text.contains("ceph osd pool create"), "{text}");

    let missing_image = RbdBackend::open(&RbdOptions::new(POOL, unique_image("absent"))).map(|_| ()).unwrap_err();
    let text = missing_image.to_string();
    assert!(text.contains("does not exist") && text.contains("set `size`"), "{text}");
    // config check: nothing is created.
    let mut options = RbdOptions::new(POOL, unique_image("inspect"));
    options.size_bytes = Some(1 << 20);
    assert_eq!(RbdBackend::inspect(&options).expect("inspect"), None);
    assert_eq!(RbdBackend::inspect(&options).expect("inspect again"), None, "inspect created the image");
}

/// librados pings each watch once per objecter tick (`objecter_tick_interval`, 5 s by
/// default) and an OSD drops a watch it has not heard from within the watch's timeout
/// (an RBD image's header watch: `osd_client_watch_timeout`, 5 s on the test cluster).
/// A watch pinged no more often than it times out lapses every few seconds, and a
/// lapsed header watch makes the client's exclusive lock look dead: another gateway's
/// next write breaks the lock and blocklists the client, which a gateway then reads
/// as being fenced. Sluice's connections ping four times within the shortest timeout
/// they know of (1.25 s with the test cluster's 5 s), so a watch with a 3 s timeout
/// must stay registered (with librados' 5 s ticks it is lost within one tick).
#[test]
fn watches_are_pinged_often_enough_to_outlive_a_short_watch_timeout() {
    let Some(_images) = cluster() else { return };
    // Its own spec opens a connection the counting tests would see.
    let _counting = CONNECTION_COUNT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let spec = runtime::ClusterSpec { ceph_conf: None, client: "admin".to_string(), op_timeout_ms: 30_000 };
    let object = Arc::new(RadosObject::open(&spec, POOL, &unique_image("watch-ping")).expect("open the object"));
    object.replace_record("sluice.test", None, b"1", b"record").expect("create the object");
    let lost = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&lost);
    let handler: runtime::WatchHandler = Box::new(move |event| {
        if let runtime::WatchEvent::Lost(errno) = event {
            eprintln!("watch lost: {errno:?}");
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let watch = object.watch(handler, Duration::from_secs(3)).expect("watch the object");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(12) {
        std::thread::sleep(Duration::from_millis(250));
        if let Err(errno) = watch.check() {
            panic!(
                "the watch lapsed after {:?} ({errno:?}): librados did not ping it within its 3 s timeout",
                start.elapsed()
            );
        }
    }
    assert_eq!(lost.load(Ordering::SeqCst), 0, "the watch was lost and re-established");
}

/// A notice's acknowledgement may be sent after the callback returned, from another
/// thread: the notifier counts it; one dropped unsent leaves the watcher silent
/// (named by the notify, which a gateway then fences).
#[test]
fn a_notice_is_acknowledged_later_from_another_thread_or_withheld_by_dropping_it() {
    let Some(_images) = cluster() else { return };
    let spec = RbdOptions::new(POOL, "unused").cluster;
    let object = Arc::new(RadosObject::open(&spec, POOL, &unique_image("deferred-ack")).expect("open the object"));
    object.replace_record("sluice.test", None, b"1", b"record").expect("create the object");
    let (sender, receiver) = std::sync::mpsc::channel::<runtime::Acknowledgement>();
    let sender = std::sync::Mutex::new(sender);
    let handler: runtime::WatchHandler = Box::new(move |event| {
        if let runtime::WatchEvent::Notice(_, acknowledgement) = event {
            let _ = sender.lock().unwrap().send(acknowledgement);
        }
    });
    let _watch = object.watch(handler, Duration::from_secs(10)).expect("watch the object");
    let acknowledger = std::thread::spawn(move || {
        // The first notice: acknowledged 200 ms after the callback returned.
        let first = receiver.recv().expect("the first notice");
        std::thread::sleep(Duration::from_millis(200));
        first.acknowledge();
        // The second: dropped unsent.
        drop(receiver.recv().expect("the second notice"));
    });
    let silent = object.notify(b"first", Duration::from_secs(5)).expect("notify");
    assert!(silent.is_empty(), "acknowledged from another thread, yet silent: {silent:?}");
    let silent = object.notify(b"second", Duration::from_secs(1)).expect("notify");
    assert_eq!(silent, [object.instance_id()], "a dropped acknowledgement must leave this watcher silent");
    acknowledger.join().unwrap();
}

/// Why a notice callback must never wait for I/O (issue 49): librados runs watch
/// callbacks on the thread that completes the same client's I/O (Sluice runs it with
/// one such thread), so an RBD write submitted from inside a callback cannot complete
/// while the callback waits for it; it completes at once after the callback returns.
#[test]
fn a_write_cannot_complete_while_a_notice_callback_of_the_same_client_waits_for_it() {
    let Some(_images) = cluster() else { return };
    let backend = new_image("finisher", 8 << 20, 4096);
    let options = RbdOptions::new(POOL, "unused");
    let object =
        Arc::new(RadosObject::open(&options.cluster, POOL, &unique_image("finisher-watch")).expect("open the object"));
    object.replace_record("sluice.test", None, b"1", b"record").expect("create the object");
    let completed_in_callback = Arc::new(AtomicUsize::new(usize::MAX));
    let seen = Arc::clone(&completed_in_callback);
    let queue = Arc::new(std::sync::Mutex::new(backend.open_queue()));
    let callback_queue = Arc::clone(&queue);
    let handler: runtime::WatchHandler = Box::new(move |event| {
        if let runtime::WatchEvent::Notice(_, acknowledgement) = event {
            let mut queue = callback_queue.lock().unwrap();
            let op = IoOp::Write { lba: 0, blocks: 1, force_unit_access: false };
            queue.submit(IoRequest { token: 7, op, buffer: pattern(7, 4096) });
            let mut completions = Vec::new();
            let start = Instant::now();
            while completions.is_empty() && start.elapsed() < Duration::from_millis(1500) {
                queue.reap(&mut completions);
                std::thread::sleep(Duration::from_millis(1));
            }
            seen.store(completions.len(), Ordering::SeqCst);
            acknowledgement.acknowledge();
        }
    });
    let _watch = object.watch(handler, Duration::from_secs(10)).expect("watch the object");
    let silent = object.notify(b"wait for a write", Duration::from_secs(5)).expect("notify");
    assert!(silent.is_empty(), "{silent:?}");
    assert_eq!(
        completed_in_callback.load(Ordering::SeqCst),
        0,
        "the write completed while the callback waited on librados' thread"
    );
    let mut completions = Vec::new();
    let start = Instant::now();
    while completions.is_empty() && start.elapsed() < Duration::from_secs(10) {
        queue.lock().unwrap().reap(&mut completions);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(completions.len(), 1, "the write completes once the callback returned");
    assert!(completions[0].result.is_ok());
    eprintln!("completed {:?} after the callback returned", start.elapsed());
}

/// Sluice runs librados with one io_context thread unless the configuration file (or
/// CEPH_ARGS) says otherwise: the default applies, and an operator's value wins.
#[test]
fn librados_defaults_yield_to_the_configuration_file() {
    let Some(_images) = cluster() else { return };
    let _counting = CONNECTION_COUNT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // Specs of their own (the op timeout is part of a connection's key), so other tests'
    // connections are not reused.
    let spec = runtime::ClusterSpec { ceph_conf: None, client: "admin".to_string(), op_timeout_ms: 29_000 };
    let value = client_option(&spec, "librados_thread_count").expect("connect");
    assert_eq!(value.as_deref(), Some("1"), "Sluice's default for librados_thread_count");

    let conf = std::path::PathBuf::from(std::env::var_os("CEPH_CONF").expect("CEPH_CONF"));
    let text = std::fs::read_to_string(&conf).expect("read the cluster's ceph.conf");
    assert!(text.contains("[client]\n"), "ceph-single-node.sh's file has a [client] section");
    let tuned = conf.with_extension(format!("tuned-{}.conf", std::process::id()));
    std::fs::write(&tuned, text.replacen("[client]\n", "[client]\nlibrados_thread_count = 3\n", 1))
        .expect("write a tuned copy");
    let spec =
        runtime::ClusterSpec { ceph_conf: Some(tuned.clone()), client: "admin".to_string(), op_timeout_ms: 29_000 };
    let value = client_option(&spec, "librados_thread_count");
    let _ = std::fs::remove_file(&tuned);
    assert_eq!(
        value.expect("connect with the tuned file").as_deref(),
        Some("3"),
        "the file's value wins over Sluice's default"
    );
}

#[test]
fn an_image_grows_live_and_another_handle_sees_it_on_refresh_but_never_shrinks_it() {
    let Some(_images) = cluster() else { return };
    let name = unique_image("grow");
    let mut options = RbdOptions::new(POOL, &name);
    options.size_bytes = Some(4 << 20);
    let (first, _) = RbdBackend::open(&options).expect("create");
    // Another gateway's handle on the same image.
    options.size_bytes = None;
    let (second, _) = RbdBackend::open(&options).expect("open again");
    let mut queue = first.open_queue();
    let data = pattern(5, 8 * 512);
    let write = |token| IoRequest {
        token,
        op: IoOp::Write { lba: 8192, blocks: 8, force_unit_access: true },
        buffer: data.clone(),
    };
    assert_eq!(submit_and_wait(&mut *queue, write(1)).result, Err(IoError::OutOfRange));

    assert_eq!(first.grow(16384).unwrap().capacity_bytes(), 8 << 20);
    assert_eq!(submit_and_wait(&mut *queue, write(2)).result, Ok(()), "a queue opened before writes the new blocks");
    assert_eq!(second.geometry().capacity_bytes(), 4 << 20, "not refreshed yet");
    // A handle behind the resize growing to less than the image has must not shrink it.
    assert_eq!(second.grow(12288).unwrap().capacity_bytes(), 6 << 20);
    let (fresh, _) = RbdBackend::open(&options).expect("open a third");
    assert_eq!(fresh.geometry().capacity_bytes(), 8 << 20, "the image kept its 8 MiB");
    assert_eq!(second.refresh_geometry().unwrap().capacity_bytes(), 8 << 20, "seen through the image's header");
    assert_eq!(
        second.grow(12288).unwrap_err(),
        storage::GrowError::WouldShrink { current_blocks: 16384, requested_blocks: 12288 }
    );
    let mut queue = second.open_queue();
    let read = submit_and_wait(
        &mut *queue,
        IoRequest { token: 3, op: IoOp::Read { lba: 8192, blocks: 8 }, buffer: vec![0; data.len()] },
    );
    assert_eq!(read.result, Ok(()));
    assert!(read.buffer == data, "the other handle reads the new blocks");
}

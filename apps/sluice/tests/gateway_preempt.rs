//! Preempt and Abort through one gateway while the preempted host keeps writing
//! through the other (issue 49), on the cluster at `CEPH_CONF`: two gateways of one
//! group, three hosts.
//! - H1 holds Write Exclusive through gateway a and writes without pause (QD1, then
//!   QD16); H2, through gateway b, preempts and aborts H1's key; H3, a bystander on
//!   gateway a, reads throughout.
//! - Each Acquire must complete in under 100 ms (before the fix it took one whole
//!   lease: gateway a's notice callback waited for H1's writes on the librados thread
//!   that completes them, stayed silent and was fenced);
//! - no write of H1 submitted after the Acquire completed may succeed or land (each
//!   write carries a tag of its own; every block is read back through both gateways);
//! - no gateway is fenced (gateway a never rejoins), and H3 sees no error and no
//!   reconnect.
//!
//! And a gateway that misses a change (stopped through it, so it is fenced) never
//! answers from its old copy once resumed: its copy is vouched for only a bounded
//! time after its last round trip to the cluster (`gateway/copy_vouch.rs`).

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::ana::AnaState;
use nvme_spec::Status;
use support::ceph_cluster_given;
use support::gateway_group::{
    acquire_write_exclusive, await_state, connect_as, register, status_of, Group, BLOCK_BYTES, NAMESPACE, NQN,
};

/// One test at a time on the cluster.
static CLUSTER: Mutex<()> = Mutex::new(());

const H1: [u8; 16] = [0x11; 16];
const H2: [u8; 16] = [0x22; 16];
const H3: [u8; 16] = [0x33; 16];
const H1_KEY: u64 = 0xA1;
const H2_KEY: u64 = 0xB2;
/// Tries per queue depth (the acceptance).
const TRIES: u32 = 20;
/// The slowest Acquire accepted (the acceptance; measured: a few ms).
const ACQUIRE_LIMIT: Duration = Duration::from_millis(100);
/// How long H1 writes before it is preempted in each try.
const WRITING_BEFORE_PREEMPT: Duration = Duration::from_millis(60);
/// How long H1 goes on writing after the Acquire completed.
const WRITING_AFTER_PREEMPT: Duration = Duration::from_millis(30);
/// Blocks H1 writes to, each write to the next (64 MiB image of 4 KiB blocks).
const WRITE_BLOCKS: u64 = 16_384;

/// One write H1 sent.
struct Sent {
    lba: u64,
    tag: u64,
    submitted: Instant,
    status: Status,
}

/// A block whose first 8 bytes are `tag` and the rest a pattern of it.
fn block_of(tag: u64) -> Vec<u8> {
    let mut block = vec![(tag % 251) as u8; BLOCK_BYTES];
    block[..8].copy_from_slice(&tag.to_le_bytes());
    block
}

/// H1's writer: keeps `depth` writes in flight on its own I/O queue until `stop`,
/// refused or not (the losing node of a cluster is usually still writing when it is
/// preempted, and goes on until it notices); counts answers in `answered` and returns
/// every write with its status.
fn write_until_stopped(
    controller: &Controller,
    depth: usize,
    first_tag: u64,
    stop: &AtomicBool,
    answered: &AtomicUsize,
) -> Vec<Sent> {
    let mut queue = controller.take_io_queue(1).expect("H1's second I/O queue");
    let mut sent: Vec<Sent> = Vec::new();
    let mut out = Vec::new();
    let mut in_flight = 0usize;
    while !stop.load(Ordering::SeqCst) || in_flight > 0 {
        while in_flight < depth && !stop.load(Ordering::SeqCst) {
            let tag = first_tag + sent.len() as u64;
            let lba = tag % WRITE_BLOCKS;
            let mut command = nvme_host::commands::write(NAMESPACE, lba, block_of(tag), BLOCK_BYTES as u32, false);
            command.user_tag = sent.len() as u64;
            sent.push(Sent { lba, tag, submitted: Instant::now(), status: Status::SUCCESS });
            queue.submit(command).expect("submit H1's write");
            in_flight += 1;
        }
        out.clear();
        queue.reap(1, Duration::from_secs(10), &mut out).expect("reap H1's writes");
        assert!(!out.is_empty() || in_flight == 0, "H1's writes got no answer in 10 s");
        for completion in out.drain(..) {
            in_flight -= 1;
            sent[completion.user_tag as usize].status = completion.cqe.status.kind();
            answered.fetch_add(1, Ordering::SeqCst);
        }
    }
    sent
}

/// Waits until H1's writer has had `depth` writes answered (its queue is connected
/// and writes are flowing: under load the connection alone can outlast a fixed
/// sleep, and a Preempt with nothing in flight needs no fence), then lets it write
/// [`WRITING_BEFORE_PREEMPT`] more.
fn await_writes_flowing(answered: &AtomicUsize, depth: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while answered.load(Ordering::SeqCst) < depth {
        assert!(Instant::now() < deadline, "H1's writer had no {depth} writes answered in 20 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(WRITING_BEFORE_PREEMPT);
}

/// The bystander: reads through gateway a until `stop`; returns (reads, errors).
fn read_until(controller: &Controller, stop: &AtomicBool) -> (u64, Vec<String>) {
    let (mut reads, mut errors) = (0u64, Vec::new());
    while !stop.load(Ordering::SeqCst) {
        match controller.read(NAMESPACE, reads % WRITE_BLOCKS, 1) {
            Ok(_) => reads += 1,
            Err(error) => errors.push(error.to_string()),
        }
    }
    (reads, errors)
}

/// One try: H1 registered, holding Write Exclusive and writing; H2 preempts and
/// aborts. Returns the Acquire's latency, how many of H1's writes succeeded, and
/// (block, tag) of each write H1 submitted after the Acquire completed (none may land).
fn one_try(h1: &Controller, h2: &Controller, depth: usize, first_tag: u64) -> (Duration, usize, Vec<(u64, u64)>) {
    assert_eq!(register(h1, H1_KEY), Status::SUCCESS, "H1 registers");
    assert_eq!(acquire_write_exclusive(h1, 0, H1_KEY, 0), Status::SUCCESS, "H1 takes Write Exclusive");
    assert_eq!(register(h2, H2_KEY), Status::SUCCESS, "H2 registers");
    let stop = AtomicBool::new(false);
    let answered = AtomicUsize::new(0);
    let (latency, completed_at, sent) = std::thread::scope(|scope| {
        // A failed assertion below must stop the writer, or the scope waits forever.
        let _stop_on_failure = SetOnDrop(&stop);
        let writer = scope.spawn(|| write_until_stopped(h1, depth, first_tag, &stop, &answered));
        await_writes_flowing(&answered, depth);
        let started = Instant::now();
        let status = acquire_write_exclusive(h2, 2, H2_KEY, H1_KEY);
        let completed_at = Instant::now();
        assert_eq!(status, Status::SUCCESS, "Preempt and Abort through gateway b");
        // H1 goes on writing a while after the completion: each of those writes must
        // be refused and must not land.
        std::thread::sleep(WRITING_AFTER_PREEMPT);
        stop.store(true, Ordering::SeqCst);
        (completed_at - started, completed_at, writer.join().expect("H1's writer"))
    });
    let late: Vec<&Sent> = sent.iter().filter(|write| write.submitted > completed_at).collect();
    for write in &late {
        assert_eq!(
            write.status,
            Status::RESERVATION_CONFLICT,
            "a write of H1 submitted after the Acquire completed was not refused with Reservation Conflict (tag {})",
            write.tag
        );
    }
    assert!(!late.is_empty(), "H1 went on writing after the Acquire completed");
    let succeeded = sent.iter().filter(|write| write.status == Status::SUCCESS).count();
    assert!(succeeded > 0, "H1 wrote before it was preempted");
    // Released for the next try: H2 clears every registration and the reservation.
    assert_eq!(
        status_of(h2.io_command(nvme_host::commands::reservation_release(NAMESPACE, 1, false, 1, H2_KEY))),
        Status::SUCCESS,
        "H2 clears"
    );
    (latency, succeeded, late.iter().map(|write| (write.lba, write.tag)).collect())
}

/// No block holds the tag of a write submitted after its try's Acquire completed:
/// read back through both gateways.
fn check_landed(readers: [&Controller; 2], late_tags: &[(u64, u64)]) {
    for reader in readers {
        for (lba, tag) in late_tags {
            let block = reader.read(NAMESPACE, *lba, 1).expect("read back");
            let found = u64::from_le_bytes(block[..8].try_into().unwrap());
            assert_ne!(
                found, *tag,
                "block {lba} holds the late write tagged {tag}: it landed after the Acquire completed"
            );
        }
    }
}

/// The group and its three hosts: H1 and H3 on gateway a, H2 on gateway b. Fields
/// drop in this order: the hosts, then the gateways, then the group (which removes
/// its images: with the gateways still running, their locks made that retry for 30 s
/// and leak the image).
struct Scenario {
    h1: Controller,
    h2: Controller,
    h3: Controller,
    _gateways: [support::ServeProcess; 2],
    group: Group,
}

/// Sets the flag when dropped: a failed assertion in a `thread::scope` must still
/// stop the threads the scope waits for, or the test hangs instead of failing.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Scenario {
    /// `env_a`: gateway a's extra environment.
    fn start(test: &str, env_a: &[(&str, &str)]) -> Scenario {
        let group = Group::new(test);
        let a = group.start_with_env(0, env_a);
        let b = group.start(1);
        let (at_a, at_b) = (group.address(0), group.address(1));
        await_state(at_a, AnaState::Optimized, Duration::from_secs(15));
        await_state(at_b, AnaState::NonOptimized, Duration::from_secs(15));
        let h1 = {
            let mut options = ConnectOptions::new(at_a, NQN);
            options.host_identifier = H1;
            options.host_nqn = format!("nqn.2014-08.org.nvmexpress:uuid:{}", nvme_host_client::format_uuid(&H1));
            // Queue 0 for reservation commands, queue 1 for the writer.
            options.io_queues = 2;
            options.command_timeout = Duration::from_secs(20);
            options.controller_loss_timeout = Duration::ZERO;
            Controller::connect(options).expect("H1 connects to gateway a")
        };
        let h2 = connect_as(at_b, Some(H2));
        let h3 = connect_as(at_a, Some(H3));
        Scenario { group, _gateways: [a, b], h1, h2, h3 }
    }

    /// Gateway `member`'s count of rejoins after being fenced.
    fn rejoins(&self, member: usize) -> u64 {
        let status = self.group.manage(member, &["gateway", "status"]);
        let count =
            status.split("rejoins after being fenced ").nth(1).and_then(|rest| rest.split([',', ' ', '\n']).next());
        count.and_then(|count| count.parse().ok()).unwrap_or_else(|| panic!("no rejoin count in: {status}"))
    }
}

#[test]
fn preempt_and_abort_of_a_writing_host_completes_at_once_and_fences_no_gateway() {
    if !ceph_cluster_given("preempt and abort through a gateway group") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let scenario = Scenario::start("preempt", &[]);
    let Scenario { h1, h2, h3, .. } = &scenario;
    let h3_reconnects = h3.reconnect_count();

    let stop_bystander = AtomicBool::new(false);
    let mut report = Vec::new();
    let (bystander_reads, bystander_errors) = std::thread::scope(|scope| {
        let bystander = scope.spawn(|| read_until(h3, &stop_bystander));
        let _stop_on_failure = SetOnDrop(&stop_bystander);
        let mut next_tag = 1u64 << 32;
        for depth in [1usize, 16] {
            let mut latencies = Vec::new();
            let (mut writes, mut late_writes) = (0, 0);
            for _ in 0..TRIES {
                let (latency, succeeded, late) = one_try(h1, h2, depth, next_tag);
                check_landed([h1, h2], &late);
                latencies.push(latency);
                writes += succeeded;
                late_writes += late.len();
                next_tag += 1 << 20;
            }
            latencies.sort();
            let slowest = *latencies.last().unwrap();
            report.push(format!(
                "QD{depth}: {TRIES} Acquires, median {:.1} ms, slowest {:.1} ms; {writes} writes of H1 succeeded before, \
                 {late_writes} sent after were all refused and none landed",
                latencies[latencies.len() / 2].as_secs_f64() * 1000.0,
                slowest.as_secs_f64() * 1000.0
            ));
            assert!(
                slowest < ACQUIRE_LIMIT,
                "QD{depth}: an Acquire took {slowest:?} (limit {ACQUIRE_LIMIT:?}); all: {latencies:?}"
            );
        }
        stop_bystander.store(true, Ordering::SeqCst);
        bystander.join().expect("bystander")
    });
    for line in &report {
        eprintln!("{line}");
    }
    eprintln!("bystander on gateway a: {bystander_reads} reads, {} errors", bystander_errors.len());
    assert!(
        bystander_errors.is_empty(),
        "the bystander on gateway a saw errors: {:?}",
        &bystander_errors[..bystander_errors.len().min(5)]
    );
    assert_eq!(h3.reconnect_count(), h3_reconnects, "the bystander's controller was closed");
    // Neither gateway was fenced: neither rejoined, and a kept its ANA state.
    assert_eq!([scenario.rejoins(0), scenario.rejoins(1)], [0, 0], "a gateway was fenced");
    await_state(scenario.group.address(0), AnaState::Optimized, Duration::from_secs(1));
}

/// How many fresh groups the planted-cause test tries before it gives up: the cause
/// bites only when a completion of H1's writes is queued behind the notice on
/// librados' thread, which most tries hit and some do not (CI saw an 11 ms Acquire).
const PLANTED_CAUSE_TRIES: usize = 3;

/// The test above can fail: with the fence waited for on librados' thread again (the
/// cause of issue 49, planted by a test-only switch), one Preempt and Abort of a
/// writing host takes the fence bound and gateway a is fenced.
#[test]
fn with_the_fence_waited_for_on_the_watch_thread_the_gateway_is_fenced() {
    if !ceph_cluster_given("preempt and abort through a gateway group, planted cause") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let mut latencies = Vec::new();
    for attempt in 1..=PLANTED_CAUSE_TRIES {
        let scenario =
            Scenario::start(&format!("preempt-planted{attempt}"), &[("SLUICE_TEST_FENCE_WAIT_ON_WATCH_THREAD", "1")]);
        let latency = preempt_a_writing_host(&scenario);
        eprintln!("planted cause, try {attempt}: the Acquire took {:.0} ms", latency.as_secs_f64() * 1000.0);
        latencies.push(latency);
        if latency <= ACQUIRE_LIMIT * 10 {
            continue;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while scenario.rejoins(0) == 0 {
            assert!(Instant::now() < deadline, "gateway a was not fenced (no rejoin in 20 s) with the planted cause");
            std::thread::sleep(Duration::from_millis(200));
        }
        return;
    }
    panic!("the planted cause did not delay the Acquire in {PLANTED_CAUSE_TRIES} tries ({latencies:?}): the test cannot tell");
}

/// H1 registered, holding Write Exclusive and writing at QD 16 through a; H2 preempts
/// and aborts it through b. Returns the Acquire's latency.
fn preempt_a_writing_host(scenario: &Scenario) -> Duration {
    let Scenario { h1, h2, .. } = scenario;
    assert_eq!(register(h1, H1_KEY), Status::SUCCESS);
    assert_eq!(acquire_write_exclusive(h1, 0, H1_KEY, 0), Status::SUCCESS);
    assert_eq!(register(h2, H2_KEY), Status::SUCCESS);
    let stop = AtomicBool::new(false);
    let answered = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        // The writer's connection is closed when gateway a is fenced: its errors are
        // expected here.
        let _stop_on_failure = SetOnDrop(&stop);
        let writer = scope.spawn(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_until_stopped(h1, 16, 1, &stop, &answered)))
        });
        await_writes_flowing(&answered, 16);
        let started = Instant::now();
        let status = acquire_write_exclusive(h2, 2, H2_KEY, H1_KEY);
        let latency = started.elapsed();
        stop.store(true, Ordering::SeqCst);
        let _ = writer.join();
        assert_eq!(status, Status::SUCCESS);
        latency
    })
}

/// What a Reservation Report through a resumed, fenced gateway said.
#[derive(Debug, Default)]
struct ResumedAnswers {
    path_errors: u32,
    transport_errors: u32,
    current: u32,
}

/// Gateway b is stopped while H1 releases its reservation through a: b does not
/// acknowledge, is fenced, and a answers only after b's copy stopped being vouched
/// for. Resumed, b must never report the old holder: each Report through it is a
/// path error (or its controller is gone), or the new state once it reloaded.
#[test]
fn a_gateway_fenced_while_stopped_never_answers_from_its_old_copy() {
    if !ceph_cluster_given("a fenced gateway's old reservation copy") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let scenario = Scenario::start("stale-copy", &[]);
    let Scenario { h1, h2, .. } = &scenario;
    assert_eq!(register(h1, H1_KEY), Status::SUCCESS);
    assert_eq!(acquire_write_exclusive(h1, 0, H1_KEY, 0), Status::SUCCESS);
    assert_eq!(support::gateway_group::holder(h2), Some(H1), "b reports H1 holding");

    let b = scenario._gateways[1].child.id().to_string();
    let signal = |name: &str| {
        assert!(std::process::Command::new("kill").args([name, &b]).status().unwrap().success(), "kill {name}")
    };
    signal("-STOP");
    let started = Instant::now();
    let released = status_of(h1.io_command(nvme_host::commands::reservation_release(NAMESPACE, 0, false, 1, H1_KEY)));
    let took = started.elapsed();
    assert_eq!(released, Status::SUCCESS, "H1 releases through a");
    eprintln!(
        "release with b stopped: answered after {:.2} s (b fenced, then its copy's bound waited out)",
        took.as_secs_f64()
    );
    // The first Report is already waiting in b's socket when b resumes, so b's I/O
    // thread may answer it before any other thread of b runs.
    let answers = std::thread::scope(|scope| {
        let reporter = scope.spawn(|| {
            let mut answers = ResumedAnswers::default();
            let until = Instant::now() + Duration::from_secs(4);
            while Instant::now() < until {
                match h2.io_command(nvme_host::commands::reservation_report(NAMESPACE, 4096, true)) {
                    Ok(completion) => {
                        let data = completion.data;
                        assert_eq!(
                            data[4],
                            0,
                            "b reported a reservation held after it was released (stale copy): {:?}",
                            &data[..8]
                        );
                        answers.current += 1;
                    }
                    Err(nvme_host_client::ClientError::Command { status, .. }) => {
                        assert_eq!(status.kind(), Status::INTERNAL_PATH_ERROR, "b answered {status:?}");
                        answers.path_errors += 1;
                    }
                    Err(_) => {
                        answers.transport_errors += 1;
                        break;
                    }
                }
            }
            answers
        });
        std::thread::sleep(Duration::from_millis(100));
        signal("-CONT");
        reporter.join().expect("reporter")
    });
    eprintln!("reports through the resumed gateway: {answers:?}");
    assert!(answers.path_errors + answers.transport_errors > 0 || answers.current > 0, "no answer at all: {answers:?}");
}

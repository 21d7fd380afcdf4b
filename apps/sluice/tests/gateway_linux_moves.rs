//! Measurement (ignored; `scripts/measure-linux-moves.sh` runs it, see
//! docs/results/gateway.md): the Linux kernel host's fio write+verify through a drain,
//! an undrain and paced moves of ANA groups, for each namespace count of
//! `SLUICE_LINUX_MOVES_NAMESPACES` (default "1,1000").
//!
//! Two gateways (a, b), failback off, balancing by count (a pass every 2 s); the
//! namespaces spread over ANA groups 1..=4 (1 and 3 preferred by a, 2 and 4 by b;
//! with one namespace, group 1 alone, and 20 moves of it with nothing to balance).
//! The guest (`tests/interop/guest/moves-guest.sh`, linux-nvme-peer) connects to both,
//! so every namespace has two paths under one multipath head, and runs fio on up to 8
//! heads (4 KiB random writes at QD4, each read back and checked), logging every
//! I/O's latency. Meanwhile this side, paced `PACE` apart:
//! 1. drains a (its groups go to b) and undrains it (balancing by count brings two
//!    groups back: two balancing moves);
//! 2. `OPERATOR_MOVES` times moves ANA group 1 to the other member
//!    (`sluice gateway move`); each leaves the count 3/1, and a balancing pass moves
//!    another group back: one balancing move each.
//!
//! Sluice's own multipath host runs beside the guest: 4 threads writing and reading
//! back their own blocks (past fio's region) through both gateways.
//!
//! Checks: fio ends without an error on every job and Sluice's host without an error
//! or a mismatch; at least `MIN_BALANCING_MOVES`
//! balancing moves. Prints, per change, the longest I/O completion in the guest
//! between that change and the next (fio's latency log, its clock aligned on the
//! fio.started marker), and the longest overall.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_host_client::CommandQueue;
use nvme_spec::NamespaceId;
use serde_json::Value;
use support::gateway_group::{member_name, multipath_to, Group, BLOCK_BYTES, NQN};
use support::{ceph_cluster_given, ServeProcess};

const ANA_GROUPS: u32 = 4;
/// Heads fio runs on (at most the namespace count).
const FIO_JOBS: u32 = 8;
/// Pause between two changes, once the previous one settled.
const PACE: Duration = Duration::from_secs(4);
/// Operator moves with several ANA groups (each followed by a balancing move), and
/// with one (nothing to balance with: the moves are all there is).
const OPERATOR_MOVES: usize = 18;
const OPERATOR_MOVES_ALONE: usize = 20;
const MIN_BALANCING_MOVES: u64 = 20;
/// Longest a change may take to settle (a hand-over, a balancing pass, a round).
const SETTLE: Duration = Duration::from_secs(30);
/// fio's run: long enough for every change (5-8 s each) and a margin, with up to 64
/// namespaces and with more (their changes are slower).
const FIO_SECONDS: u64 = 160;
const FIO_SECONDS_MANY_NAMESPACES: u64 = 300;
/// Threads of Sluice's own multipath host writing and reading back beside the guest.
const SLUICE_HOSTS: u32 = 4;
/// Where they write: past fio's 8 MiB (blocks of 4 KiB), 64 blocks each.
const SLUICE_FIRST_BLOCK: u64 = 4096;
const SLUICE_BLOCKS: u64 = 64;
/// Changes the per-change pauses are kept for (more than the test makes).
const MAX_CHANGES: usize = 64;

/// What Sluice's host threads saw: per change (by index), the longest pause between
/// two successful write+read pairs, in µs.
struct SluiceHosts {
    stop: AtomicBool,
    change: AtomicUsize,
    longest_pause_us: Vec<AtomicU64>,
    commands: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// One thread of Sluice's multipath host: writes block after block of its own range
/// of `nsid` (a tag in every byte) and reads each back, until told to stop.
fn sluice_host(group: &Group, nsid: u32, thread: u32, hosts: &SluiceHosts) {
    let (multipath, mut queue) = match multipath_to(group, nsid) {
        Ok(connected) => connected,
        Err(error) => return hosts.errors.lock().unwrap().push(format!("thread {thread}: connect: {error}")),
    };
    let patience = Duration::from_secs(30);
    let mut last_success = Instant::now();
    let mut generation = 0u64;
    while !hosts.stop.load(Ordering::Relaxed) {
        generation += 1;
        let block = SLUICE_FIRST_BLOCK + u64::from(thread) * SLUICE_BLOCKS + generation % SLUICE_BLOCKS;
        let data = vec![(generation as u8) ^ (thread as u8).wrapping_mul(37); BLOCK_BYTES];
        let write = nvme_host::commands::write(NamespaceId(nsid), block, data.clone(), BLOCK_BYTES as u32, false);
        let outcome = queue.execute(write, patience).and_then(|_| {
            queue.execute(nvme_host::commands::read(NamespaceId(nsid), block, 1, BLOCK_BYTES as u32), patience)
        });
        match outcome {
            Ok(completion) if completion.data == data => {}
            Ok(_) => hosts.errors.lock().unwrap().push(format!("nsid {nsid} block {block}: read back other data")),
            Err(error) => hosts.errors.lock().unwrap().push(format!("nsid {nsid} block {block}: {error}")),
        }
        let change = hosts.change.load(Ordering::Relaxed).min(MAX_CHANGES - 1);
        hosts.longest_pause_us[change].fetch_max(last_success.elapsed().as_micros() as u64, Ordering::Relaxed);
        last_success = Instant::now();
        hosts.commands.fetch_add(2, Ordering::Relaxed);
    }
    drop(queue);
    let _ = multipath.disconnect();
}

fn status(group: &Group, member: usize) -> Value {
    let text = group.manage(member, &["gateway", "status", "-o", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("gateway status: {error}: {text}"))
}

/// The ANA groups in use: one per namespace up to [`ANA_GROUPS`].
fn ana_groups(group: &Group) -> u32 {
    group.namespaces.len().min(ANA_GROUPS as usize) as u32
}

fn owners(group: &Group) -> Option<Vec<usize>> {
    support::gateway_group::owners(group, ana_groups(group))
}

fn await_owners(group: &Group, accept: impl Fn(&[usize]) -> bool, what: &str) -> Vec<usize> {
    support::gateway_group::await_owners(group, ana_groups(group), accept, what, SETTLE)
}

/// Each member owns half the groups (one group: anywhere).
fn even(found: &[usize]) -> bool {
    found.len() == 1 || found.iter().filter(|&&owner| owner == 0).count() * 2 == found.len()
}

/// The longest completion (ms) of every I/O in fio's latency logs under `dir`, as
/// (completion time in ms since fio started, latency in ms).
fn completions(dir: &Path) -> Vec<(f64, f64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("share").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // lat_lat.N.log: submission to completion (fio writes clat and slat logs too).
        if !(name.starts_with("lat_lat.") && name.ends_with(".log")) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            // "time ms, latency ns, direction, block size, offset[, priority]"
            let mut fields = line.split(',').map(str::trim);
            let (Some(Ok(at_ms)), Some(Ok(latency_ns))) =
                (fields.next().map(str::parse::<f64>), fields.next().map(str::parse::<f64>))
            else {
                continue;
            };
            found.push((at_ms, latency_ns / 1e6));
        }
    }
    found
}

fn linux_nvme_peer() -> PathBuf {
    std::env::var_os("LINUX_NVME_PEER")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/linux-nvme-peer").to_path_buf())
}

fn measure(namespaces: u32) {
    let peer = linux_nvme_peer();
    assert!(peer.exists(), "linux-nvme-peer not found at {} (set LINUX_NVME_PEER)", peer.display());
    let layout: Vec<(u32, u32, usize)> = (1..=namespaces)
        .map(|nsid| {
            let ana_group = (nsid - 1) % ANA_GROUPS + 1;
            (nsid, ana_group, ((ana_group - 1) % 2) as usize)
        })
        .collect();
    let group = Arc::new(Group::with_members(&format!("linuxmoves{namespaces}"), 2).with_namespaces(&layout));
    let edit = |text: String| {
        text.replacen("lease_ms = 3000\n", "lease_ms = 3000\nfailback = false\n", 1)
            + "\n[gateway.rebalance]\nmode = \"count\"\ninterval_ms = 2000\nload_window_ms = 1000\nthreshold_percent = 25\nmax_moves = 8\n"
    };
    let started = Instant::now();
    let gateways: Vec<ServeProcess> = (0..2).map(|member| group.start_edited(member, edit)).collect();
    let settle = Instant::now();
    while owners(&group).is_none_or(|found| !even(&found)) {
        assert!(settle.elapsed() < Duration::from_secs(600), "the group never settled: {:?}", owners(&group));
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("[{namespaces} namespaces] two gateways up and even after {:.1?}", started.elapsed());

    let share = group.dir.join("share");
    std::fs::create_dir_all(&share).unwrap();
    let guest_script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/guest");
    let guest_log = std::fs::File::create(group.dir.join("guest.log")).unwrap();
    let fio_seconds = if namespaces > 64 { FIO_SECONDS_MANY_NAMESPACES } else { FIO_SECONDS };
    let env = format!(
        "PORT_A={} PORT_B={} NQN={NQN} NAMESPACES={namespaces} JOBS={FIO_JOBS} FIO_SECONDS={fio_seconds}",
        group.ports[0], group.ports[1]
    );
    let mut guest = Command::new(&peer)
        .args(["initiator", "--timeout", "1800", "--mem", "3072", "--share"])
        .arg(&share)
        .arg("--add")
        .arg(format!("{}:/root/moves-guest.sh", guest_script.join("moves-guest.sh").display()))
        .arg("--add")
        .arg(format!("{}:/root/checks.sh", guest_script.join("checks.sh").display()))
        .args(["--", &format!("{env} sh /root/moves-guest.sh")])
        .stdin(Stdio::null())
        .stdout(guest_log.try_clone().unwrap())
        .stderr(guest_log)
        .spawn()
        .expect("start linux-nvme-peer");
    let waiting = Instant::now();
    while !share.join("fio.started").exists() {
        if let Some(status) = guest.try_wait().unwrap() {
            panic!("the guest ended before fio started ({status}); see {}", group.dir.join("guest.log").display());
        }
        assert!(waiting.elapsed() < Duration::from_secs(1200), "fio never started in the guest");
        std::thread::sleep(Duration::from_millis(100));
    }
    let fio_started = Instant::now();
    eprintln!("[{namespaces} namespaces] guest connected and fio started after {:.1?}", waiting.elapsed());
    let sluice = Arc::new(SluiceHosts {
        stop: AtomicBool::new(false),
        change: AtomicUsize::new(0),
        longest_pause_us: (0..MAX_CHANGES).map(|_| AtomicU64::new(0)).collect(),
        commands: AtomicU64::new(0),
        errors: Mutex::new(Vec::new()),
    });
    let threads: Vec<_> = (0..SLUICE_HOSTS)
        .map(|thread| {
            let nsid = 1 + thread % namespaces.min(SLUICE_HOSTS);
            let (group, sluice) = (Arc::clone(&group), Arc::clone(&sluice));
            std::thread::spawn(move || sluice_host(&group, nsid, thread, &sluice))
        })
        .collect();
    std::thread::sleep(PACE);

    // (what, seconds since fio started) for each change.
    let mut changes: Vec<(String, f64)> = vec![("before any change (fio alone)".into(), 0.0)];
    let several = ana_groups(&group) > 1;
    let mut mark = |what: String| {
        changes.push((what, fio_started.elapsed().as_secs_f64()));
        sluice.change.store(changes.len() - 1, Ordering::Relaxed);
    };
    mark("drain a".into());
    group.manage(1, &["gateway", "drain", "a"]);
    await_owners(&group, |found| found.iter().all(|&owner| owner == 1), "drain");
    std::thread::sleep(PACE);
    mark(if several { "undrain a (two balancing moves back)" } else { "undrain a" }.into());
    group.manage(1, &["gateway", "undrain", "a"]);
    await_owners(&group, even, "undrain");
    std::thread::sleep(PACE);
    let operator_moves = if several { OPERATOR_MOVES } else { OPERATOR_MOVES_ALONE };
    for round in 0..operator_moves {
        let before = await_owners(&group, even, "before a move");
        let to = 1 - before[0];
        let and = if several { " (and one balancing move)" } else { "" };
        mark(format!("move {} of group 1 to {}{and}", round + 1, member_name(to)));
        group.manage(round % 2, &["gateway", "move", "1", &member_name(to), "--timeout-ms", "20000"]);
        await_owners(&group, |found| found[0] == to && even(found), "move and balance");
        std::thread::sleep(PACE);
    }
    let changes_done = fio_started.elapsed();
    sluice.stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("Sluice host thread");
    }
    let balancing_moves: u64 =
        (0..2).map(|member| status(&group, member)["rebalance"]["moves_total"].as_u64().unwrap_or(0)).sum();
    eprintln!(
        "[{namespaces} namespaces] {} changes in {:.0?}; balancing moves {balancing_moves}; waiting for fio ({fio_seconds} s)",
        changes.len(),
        changes_done
    );
    assert!(changes_done < Duration::from_secs(fio_seconds - 10), "the changes outlasted fio's run: raise FIO_SECONDS");

    let guest_status = support::wait_bounded(guest, Duration::from_secs(fio_seconds + 900))
        .map(|output| output.status)
        .expect("the guest did not end");
    let text = std::fs::read_to_string(share.join("fio.json")).unwrap_or_default();
    let fio: Value = text.find('{').and_then(|at| serde_json::from_str(&text[at..]).ok()).unwrap_or(Value::Null);
    let jobs = fio["jobs"].as_array().cloned().unwrap_or_default();
    let mut io_total = 0;
    for job in &jobs {
        let (writes, reads) =
            (job["write"]["total_ios"].as_u64().unwrap_or(0), job["read"]["total_ios"].as_u64().unwrap_or(0));
        io_total += writes + reads;
        eprintln!(
            "[{namespaces} namespaces] fio {}: error {}, {writes} writes, {reads} verified reads, longest write {:.0} ms",
            job["jobname"].as_str().unwrap_or("?"),
            job["error"],
            job["write"]["clat_ns"]["max"].as_f64().unwrap_or(0.0) / 1e6
        );
    }
    let completions = completions(&share);
    let overall = completions.iter().map(|(_, latency)| *latency).fold(0.0, f64::max);
    for (index, (what, at_s)) in changes.iter().enumerate() {
        let until_s = changes.get(index + 1).map_or(f64::MAX, |(_, next)| *next);
        let longest = completions
            .iter()
            .filter(|(done_ms, _)| *done_ms / 1000.0 >= *at_s && *done_ms / 1000.0 < until_s)
            .map(|(_, latency)| *latency)
            .fold(0.0, f64::max);
        let sluice_pause = sluice.longest_pause_us[index.min(MAX_CHANGES - 1)].load(Ordering::Relaxed) as f64 / 1000.0;
        eprintln!(
            "[{namespaces} namespaces] t={at_s:>6.1} s {what}: longest I/O {longest:.0} ms (Linux), \
             longest pause {sluice_pause:.0} ms (Sluice's host)"
        );
    }
    eprintln!(
        "[{namespaces} namespaces] result: guest {guest_status}, {} fio jobs, {io_total} I/Os ({} logged), \
         errors {}, longest I/O {overall:.0} ms, balancing moves {balancing_moves}, operator moves {operator_moves}",
        jobs.len(),
        completions.len(),
        jobs.iter().filter(|job| job["error"] != 0).count()
    );
    let sluice_errors = sluice.errors.lock().unwrap().clone();
    eprintln!(
        "[{namespaces} namespaces] Sluice's multipath host: {SLUICE_HOSTS} threads, {} commands, {} errors{}",
        sluice.commands.load(Ordering::Relaxed),
        sluice_errors.len(),
        sluice_errors.first().map(|first| format!(", first: {first}")).unwrap_or_default()
    );
    assert!(guest_status.success(), "the guest failed: see {}", group.dir.join("guest.log").display());
    assert!(sluice_errors.is_empty(), "Sluice's host: {sluice_errors:?}");
    assert!(!jobs.is_empty() && jobs.iter().all(|job| job["error"] == 0), "a fio job failed: {text}");
    if several {
        assert!(balancing_moves >= MIN_BALANCING_MOVES, "{balancing_moves} balancing moves");
    }
    drop(gateways);
    if namespaces > 64 {
        // `rbd rm` of a thousand images one at a time outlasts the measurement.
        std::mem::forget(Arc::try_unwrap(group).ok());
    }
}

#[test]
#[ignore = "a measurement with the Linux guest: scripts/measure-linux-moves.sh"]
fn the_linux_host_through_a_drain_an_undrain_and_paced_moves() {
    if !ceph_cluster_given("Linux host through moves") {
        return;
    }
    let sizes = std::env::var("SLUICE_LINUX_MOVES_NAMESPACES").unwrap_or_else(|_| "1,1000".into());
    for size in sizes.split(',').filter_map(|text| text.trim().parse::<u32>().ok()) {
        measure(size);
    }
}

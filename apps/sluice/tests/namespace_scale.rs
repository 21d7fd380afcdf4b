//! What namespaces cost a gateway group at the size its users run (issue 46): three
//! `sluice serve` gateways (a, b, c) sharing N RBD-backed namespaces on thin images in
//! pool "rbd" of the cluster at `CEPH_CONF`, one cluster connection per gateway, the
//! group's configuration kept in the cluster. For each N of `SLUICE_SCALE_NAMESPACES`
//! (default "1,4096"), side by side:
//! - start: a seeds the group and creates the N-1 images it is configured with (or
//!   opens them, when they are there), then b and c start from their own part only;
//!   for each, the time to "sluice: ready" and to serving (its ANA group optimized,
//!   every namespace in the active list and each one's reservations loaded: a
//!   Reservation Report succeeds on every namespace);
//! - each gateway's memory, open files and threads once idle, and the CPU the
//!   gateways, the OSD and the monitor spend over [`IDLE_SAMPLE`] of idleness (the
//!   cost of the watches: each gateway pings 2N+1 of them every second);
//! - `ns add` of the Nth namespace through a (its image created), and how long b and
//!   c take to list it; `ns list` at N;
//! - 64 KiB written to every namespace through its ANA group's owner (each image's
//!   first write takes its exclusive lock), then 4 KiB random reads within those
//!   blocks through a at [`READ_DEPTH`]: spread over all N namespaces against
//!   namespace 1 alone, interleaved over [`READ_ROUNDS`] rounds;
//! - the Linux host's view, when `LINUX_NVME_PEER` names linux-nvme-peer: discovery,
//!   connect, `nvme list` and the ANA log in the guest;
//! - takeover: a SIGKILLed, the time until one of b and c reports ANA group 1 (a
//!   third of the namespaces) optimized, and until every namespace of group 1 took a
//!   write through it (each image's exclusive lock moved to the new owner); then a
//!   restarted on the existing images.
//!
//! A measurement, not a check of behaviour: ignored by the test command.
//! scripts/measure-namespaces.sh runs it on a cluster of its own (the images of large
//! runs are left for the cluster's removal) and records the output under
//! docs/results/scale/.

mod support;

use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller, HostCompletion};
use nvme_spec::ana::AnaState;
use nvme_spec::NamespaceId;
use support::gateway_group::{ana_log, member_name, state_in, Group, BLOCK_BYTES, NQN};
use support::{ceph_cluster_given, ServeProcess};

/// Namespace counts measured when `SLUICE_SCALE_NAMESPACES` is not set.
const DEFAULT_SIZES: &str = "1,4096";
/// Gateways in the group, one ANA group each (namespace n in group (n - 1) % 3 + 1).
const MEMBERS: usize = 3;
/// Longest a gateway may take to start: creating 4,096 images takes about a minute on
/// the one-node cluster.
const START_DEADLINE: Duration = Duration::from_secs(600);
/// Longest a gateway may take from "ready" to serving every namespace in its group.
const SERVE_DEADLINE: Duration = Duration::from_secs(300);
/// How long the idle group is sampled for CPU.
const IDLE_SAMPLE: Duration = Duration::from_secs(10);
/// Blocks written to (and read from) each namespace: 64 KiB, in the image's first object.
const BLOCKS: u64 = 16;
/// Reads in flight on the reading host's one I/O queue.
const READ_DEPTH: usize = 32;
/// Each read round's length, per pattern.
const READ_SECONDS: u64 = 10;
/// Interleaved rounds of (spread, one namespace).
const READ_ROUNDS: usize = 3;
/// Images larger than this many are left in the cluster (the script removes it):
/// `rbd rm` one at a time takes longer than the whole measurement.
const MAX_IMAGES_REMOVED: usize = 64;

/// xorshift64*: the reads' namespaces and blocks, the same sequence every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// What /proc says of one process.
#[derive(Clone, Copy, Debug, Default)]
struct ProcessUse {
    rss_kib: u64,
    open_files: u64,
    threads: u64,
    /// user + system, in clock ticks.
    cpu_ticks: u64,
}

fn process_use(pid: u32) -> ProcessUse {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    let open_files = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|dir| dir.count() as u64).unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) end with ") ".
    let after_name = stat.rsplit_once(") ").map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index).and_then(|value| value.parse::<u64>().ok()).unwrap_or(0);
    ProcessUse {
        rss_kib: field("VmRSS:"),
        open_files,
        threads: field("Threads:"),
        // utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
        cpu_ticks: ticks(11) + ticks(12),
    }
}

/// The pid of the cluster daemon `name` ("osd.0", "mon.a") when the cluster is
/// ceph-single-node.sh's (`CEPH_DIR` with its pid files).
fn daemon_pid(name: &str) -> Option<u32> {
    let dir = std::env::var("CEPH_DIR").ok()?;
    std::fs::read_to_string(Path::new(&dir).join("pids").join(name)).ok()?.trim().parse().ok()
}

fn ticks_per_second() -> f64 {
    let output = std::process::Command::new("getconf").arg("CLK_TCK").output();
    output.ok().and_then(|output| String::from_utf8_lossy(&output.stdout).trim().parse().ok()).unwrap_or(100.0)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// A host controller on `address` with one I/O queue of 128 entries.
fn host(address: SocketAddr) -> Controller {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(60);
    options.controller_loss_timeout = Duration::ZERO;
    Controller::connect(options).unwrap_or_else(|error| panic!("connect to {address}: {error}"))
}

/// Sends `commands` on `controller`'s I/O queue with at most `depth` in flight; every
/// one must succeed. Returns how long they took.
fn run_all(controller: &Controller, depth: usize, commands: impl Iterator<Item = nvme_host::HostCommand>) -> Duration {
    let mut queue = controller.take_io_queue(0).expect("an I/O queue");
    let started = Instant::now();
    let (mut in_flight, mut out) = (0usize, Vec::<HostCompletion>::new());
    let mut commands = commands.peekable();
    while commands.peek().is_some() || in_flight > 0 {
        while in_flight < depth {
            let Some(command) = commands.next() else { break };
            queue.submit(command).expect("submit");
            in_flight += 1;
        }
        out.clear();
        queue.reap(1, Duration::from_secs(60), &mut out).expect("reap");
        assert!(!out.is_empty(), "no completion in 60 s");
        for completion in &out {
            assert!(completion.cqe.status.is_success(), "a command failed: {:?}", completion.cqe.status);
            in_flight -= 1;
        }
    }
    started.elapsed()
}

/// One read round: reads per second, and CPU microseconds per read of the gateway
/// and of the OSD.
#[derive(Clone, Copy, Debug)]
struct ReadRound {
    iops: f64,
    gateway_us_per_read: f64,
    osd_us_per_read: f64,
}

/// 4 KiB random reads within the first [`BLOCKS`] of namespaces 1..=`namespaces`,
/// [`READ_DEPTH`] in flight for [`READ_SECONDS`], through the gateway `gateway`.
fn read_round(controller: &Controller, namespaces: u32, random: &mut Random, gateway: u32) -> ReadRound {
    let osd = daemon_pid("osd.0");
    let (gateway_before, osd_before) =
        (process_use(gateway).cpu_ticks, osd.map_or(0, |pid| process_use(pid).cpu_ticks));
    let (iops, reads) = read_rate(controller, namespaces, random);
    let per_read = |start: u64, end: u64| (end - start) as f64 / ticks_per_second() * 1e6 / reads as f64;
    ReadRound {
        iops,
        gateway_us_per_read: per_read(gateway_before, process_use(gateway).cpu_ticks),
        osd_us_per_read: osd.map_or(0.0, |pid| per_read(osd_before, process_use(pid).cpu_ticks)),
    }
}

/// The reads of [`read_round`]: reads per second and how many.
fn read_rate(controller: &Controller, namespaces: u32, random: &mut Random) -> (f64, u64) {
    let mut queue = controller.take_io_queue(0).expect("an I/O queue");
    let (mut in_flight, mut done, mut out) = (0usize, 0u64, Vec::<HostCompletion>::new());
    let length = Duration::from_secs(READ_SECONDS);
    let started = Instant::now();
    while started.elapsed() < length || in_flight > 0 {
        while in_flight < READ_DEPTH && started.elapsed() < length {
            let nsid = NamespaceId(1 + random.below(u64::from(namespaces)) as u32);
            let command = nvme_host::commands::read(nsid, random.below(BLOCKS), 1, BLOCK_BYTES as u32);
            queue.submit(command).expect("submit a read");
            in_flight += 1;
        }
        out.clear();
        queue.reap(1, Duration::from_secs(60), &mut out).expect("reap reads");
        for completion in &out {
            assert!(completion.cqe.status.is_success(), "a read failed: {:?}", completion.cqe.status);
            in_flight -= 1;
            done += 1;
        }
    }
    (done as f64 / started.elapsed().as_secs_f64(), done)
}

/// Polls `address` until it reports `ana_group` optimized and lists `namespaces`
/// active namespaces; returns how long that took.
fn await_serving(address: SocketAddr, ana_group: u32, namespaces: usize) -> Duration {
    let started = Instant::now();
    loop {
        // A group without namespaces (fewer namespaces than gateways) is not in the log.
        let optimized = ana_log(address).is_some_and(|log| {
            let listed = log.groups.iter().any(|group| group.descriptor.group_id.0 == ana_group);
            if listed {
                state_in(&log, ana_group) == AnaState::Optimized
            } else {
                namespaces < ana_group as usize
            }
        });
        if optimized {
            let mut options = ConnectOptions::new(address, NQN);
            options.io_queues = 0;
            options.controller_loss_timeout = Duration::ZERO;
            let listed = Controller::connect(options).ok().and_then(|controller| controller.active_namespaces().ok());
            if listed.is_some_and(|listed| listed.len() == namespaces) && reservations_loaded(address, namespaces) {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < SERVE_DEADLINE,
            "{address}: not serving group {ana_group} after {SERVE_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// True when a Reservation Report succeeds on each of namespaces 1..=`namespaces` at
/// `address`: until a gateway has loaded a namespace's reservations from the cluster,
/// its I/O gets path errors (hosts go to another path).
fn reservations_loaded(address: SocketAddr, namespaces: usize) -> bool {
    let controller = host(address);
    let Some(mut queue) = controller.take_io_queue(0) else { return false };
    let (mut next, mut in_flight, mut loaded, mut out) = (1u32, 0usize, 0usize, Vec::<HostCompletion>::new());
    while next as usize <= namespaces || in_flight > 0 {
        while in_flight < READ_DEPTH && next as usize <= namespaces {
            let command = nvme_host::commands::reservation_report(NamespaceId(next), 4096, true);
            if queue.submit(command).is_err() {
                return false;
            }
            next += 1;
            in_flight += 1;
        }
        out.clear();
        if queue.reap(1, Duration::from_secs(60), &mut out).is_err() || out.is_empty() {
            return false;
        }
        in_flight -= out.len();
        loaded += out.iter().filter(|completion| completion.cqe.status.is_success()).count();
    }
    loaded == namespaces
}

/// Polls until exactly one of `live` reports `ana_group` optimized; returns it and how
/// long that took.
fn await_new_owner(group: &Group, live: &[usize], ana_group: u32) -> (usize, Duration) {
    let started = Instant::now();
    loop {
        let optimized: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&member| {
                ana_log(group.address(member)).is_some_and(|log| state_in(&log, ana_group) == AnaState::Optimized)
            })
            .collect();
        if let [owner] = optimized[..] {
            return (owner, started.elapsed());
        }
        assert!(started.elapsed() < SERVE_DEADLINE, "no single owner of ANA group {ana_group}: {optimized:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_member(group: &Group, member: usize, config: &Path) -> (ServeProcess, Duration) {
    let socket = group.socket(member);
    let started = Instant::now();
    // The coordinator's takeover lines (fence, locks freed, how long each took) too.
    let env = [("SLUICE_LOG", "warn,sluice_gateway::coordinator=info")];
    let process = ServeProcess::start_within(config, &["--rpc-socket", socket.to_str().unwrap()], &env, START_DEADLINE)
        .unwrap_or_else(|| panic!("gateway {} did not start within {START_DEADLINE:?}", member_name(member)));
    (process, started.elapsed())
}

/// `sluice ns list` through `member`: the namespaces listed and how long it took.
fn ns_list(group: &Group, member: usize) -> (usize, Duration) {
    let started = Instant::now();
    let text = group.manage(member, &["ns", "list", NQN, "-o", "json"]);
    let took = started.elapsed();
    let value: serde_json::Value = serde_json::from_str(&text).expect("ns list JSON");
    (value["namespaces"].as_array().map_or(0, Vec::len), took)
}

/// Sends `process` SIGTERM and waits (up to [`START_DEADLINE`]) for it to exit.
fn stop_time(mut process: ServeProcess) -> Duration {
    let started = Instant::now();
    let stopped = process.terminate_within(START_DEADLINE);
    assert!(stopped.is_some(), "a gateway did not stop within {START_DEADLINE:?}");
    started.elapsed()
}

/// The ANA group of namespace `nsid`.
fn ana_group_of(nsid: u32) -> u32 {
    (nsid - 1) % MEMBERS as u32 + 1
}

fn measure(size: u32, linux_peer: Option<&str>) {
    // The last namespace is added through `ns add` (a group of one adds a second and
    // removes it again).
    let configured = size.saturating_sub(1).max(1);
    let added = if size > 1 { size } else { 2 };
    let namespaces: Vec<(u32, u32, usize)> =
        (1..=configured).map(|nsid| (nsid, ana_group_of(nsid), ana_group_of(nsid) as usize - 1)).collect();
    let group = ManuallyDrop::new(Group::with_members(&format!("ns{size}"), MEMBERS).with_namespaces(&namespaces));
    let configs: Vec<_> = (0..MEMBERS).map(|member| group.cluster_config(member, member > 0)).collect();
    let row = |what: &str, value: String| eprintln!("| {size} | {what} | {value} |");

    let mut gateways: Vec<Option<ServeProcess>> = Vec::new();
    for (member, config) in configs.iter().enumerate() {
        let (process, ready) = start_member(&group, member, config);
        let serving = await_serving(group.address(member), member as u32 + 1, configured as usize);
        let what = if member == 0 { "start (seeds the group, creates the images)" } else { "start" };
        row(
            &format!("{what} {}: ready, then serving", member_name(member)),
            format!("{:.2} s, +{:.2} s", ready.as_secs_f64(), serving.as_secs_f64()),
        );
        gateways.push(Some(process));
    }

    // Idle: memory, files, threads, CPU.
    std::thread::sleep(Duration::from_secs(5));
    let pids: Vec<u32> = gateways.iter().map(|process| process.as_ref().unwrap().child.id()).collect();
    let (osd, mon) = (daemon_pid("osd.0"), daemon_pid("mon.a"));
    let before: Vec<ProcessUse> = pids.iter().map(|&pid| process_use(pid)).collect();
    let (osd_before, mon_before) = (osd.map(process_use), mon.map(process_use));
    std::thread::sleep(IDLE_SAMPLE);
    let after: Vec<ProcessUse> = pids.iter().map(|&pid| process_use(pid)).collect();
    let share = |start: u64, end: u64| (end - start) as f64 / ticks_per_second() / IDLE_SAMPLE.as_secs_f64() * 100.0;
    for (member, (start, end)) in before.iter().zip(&after).enumerate() {
        row(
            &format!("gateway {} idle: RSS, open files, threads, CPU", member_name(member)),
            format!(
                "{:.1} MiB, {}, {}, {:.1} % of a core",
                end.rss_kib as f64 / 1024.0,
                end.open_files,
                end.threads,
                share(start.cpu_ticks, end.cpu_ticks)
            ),
        );
    }
    for (name, pid, start) in [("OSD", osd, osd_before), ("monitor", mon, mon_before)] {
        if let (Some(pid), Some(start)) = (pid, start) {
            let end = process_use(pid);
            row(
                &format!("{name} while the group idles: RSS, CPU"),
                format!(
                    "{:.1} MiB, {:.1} % of a core",
                    end.rss_kib as f64 / 1024.0,
                    share(start.cpu_ticks, end.cpu_ticks)
                ),
            );
        }
    }

    // ns add through a (the image created by it), then ns list.
    let image = format!("rbd/{}-ns{added}", group.image);
    let nsid_text = added.to_string();
    let started = Instant::now();
    group.manage(0, &["ns", "add", NQN, "--rbd", &image, "--size", "64MiB", "--block-size", "4096", "-N", &nsid_text]);
    let add = started.elapsed();
    let listed_everywhere = (1..MEMBERS)
        .map(|member| {
            let started = Instant::now();
            while ns_list(&group, member).0 != added as usize {
                assert!(started.elapsed() < SERVE_DEADLINE, "member {member} does not list namespace {added}");
                std::thread::sleep(Duration::from_millis(100));
            }
            add + started.elapsed()
        })
        .max()
        .unwrap();
    row(
        &format!("ns add of namespace {added} through a; listed by b and c after"),
        format!("{:.0} ms; {:.0} ms", millis(add), millis(listed_everywhere)),
    );
    let lists: Vec<(usize, Duration)> = (0..3).map(|_| ns_list(&group, 0)).collect();
    let mut list_times: Vec<Duration> = lists.iter().map(|(_, took)| *took).collect();
    list_times.sort();
    row(&format!("ns list through a ({} listed), median of 3", lists[0].0), format!("{:.0} ms", millis(list_times[1])));
    // A group of one goes on with one.
    let total = if size == 1 {
        group.manage(0, &["ns", "remove", NQN, &nsid_text]);
        let started = Instant::now();
        while (0..MEMBERS).any(|member| ns_list(&group, member).0 != 1) {
            assert!(started.elapsed() < SERVE_DEADLINE, "namespace {added} still listed");
            std::thread::sleep(Duration::from_millis(100));
        }
        1
    } else {
        added
    };

    // 64 KiB to every namespace through its ANA group's owner; the added one is in
    // group 1 (a's).
    let owners: Vec<Controller> = (0..MEMBERS).map(|member| host(group.address(member))).collect();
    let block = vec![0xA5u8; BLOCKS as usize * BLOCK_BYTES];
    let mut slowest = Duration::ZERO;
    for (member, owner) in owners.iter().enumerate() {
        let mine: Vec<u32> = (1..=total)
            .filter(|&nsid| if nsid == added { member == 0 } else { ana_group_of(nsid) as usize == member + 1 })
            .collect();
        let writes = mine
            .iter()
            .map(|&nsid| nvme_host::commands::write(NamespaceId(nsid), 0, block.clone(), BLOCK_BYTES as u32, false));
        slowest = slowest.max(run_all(owner, READ_DEPTH, writes));
    }
    row(
        "64 KiB written to every namespace through its owner (depth 32 each)",
        format!("{:.2} s", slowest.as_secs_f64()),
    );

    // Reads through a: spread over all namespaces, and namespace 1 alone.
    let reader = &owners[0];
    let mut random = Random(0x9E37_79B9_7F4A_7C15);
    let (mut spread, mut one) = (Vec::new(), Vec::new());
    for _ in 0..READ_ROUNDS {
        spread.push(read_round(reader, total, &mut random, pids[0]));
        one.push(read_round(reader, 1, &mut random, pids[0]));
    }
    let median = |rounds: &mut Vec<ReadRound>| {
        rounds.sort_by(|left, right| left.iops.total_cmp(&right.iops));
        rounds[rounds.len() / 2]
    };
    let (spread_median, one_median) = (median(&mut spread), median(&mut one));
    let iops = |rounds: &[ReadRound]| rounds.iter().map(|round| format!("{:.0}", round.iops)).collect::<Vec<_>>();
    row(
        &format!(
            "4 KiB random reads through a at depth {READ_DEPTH}: over all {total} namespaces, over one; ratio \
             (median of {READ_ROUNDS} rounds, CPU per read of gateway a and of the OSD)"
        ),
        format!(
            "{:.0} IOPS ({:.1} + {:.1} us), {:.0} IOPS ({:.1} + {:.1} us); {:.2}x (rounds {:?} / {:?})",
            spread_median.iops,
            spread_median.gateway_us_per_read,
            spread_median.osd_us_per_read,
            one_median.iops,
            one_median.gateway_us_per_read,
            one_median.osd_us_per_read,
            spread_median.iops / one_median.iops,
            iops(&spread),
            iops(&one)
        ),
    );
    drop(owners);

    if let Some(peer) = linux_peer {
        linux_view(peer, group.address(0), total);
    }

    // Takeover: a SIGKILLed; one of b and c takes ANA group 1.
    let mut a = gateways[0].take().unwrap();
    let killed = Instant::now();
    a.child.kill().expect("SIGKILL a");
    let _ = a.child.wait();
    drop(a);
    let (owner, took) = await_new_owner(&group, &[1, 2], 1);
    let group_one: Vec<u32> = (1..=total).filter(|&nsid| nsid == added || ana_group_of(nsid) == 1).collect();
    let new_owner = host(group.address(owner));
    let block = vec![0x5Au8; BLOCK_BYTES];
    let writes = group_one
        .iter()
        .map(|&nsid| nvme_host::commands::write(NamespaceId(nsid), 0, block.clone(), BLOCK_BYTES as u32, false));
    let written = run_all(&new_owner, READ_DEPTH, writes);
    drop(new_owner);
    row(
        &format!(
            "takeover after SIGKILL of a (lease {} ms): group 1 optimized on {}; its {} namespaces written through it",
            support::gateway_group::LEASE_MS,
            member_name(owner),
            group_one.len()
        ),
        format!(
            "{:.2} s; +{:.2} s ({:.2} s after the kill)",
            took.as_secs_f64(),
            written.as_secs_f64(),
            killed.elapsed().as_secs_f64()
        ),
    );

    // a restarted on the existing images.
    let (process, ready) = start_member(&group, 0, &configs[0]);
    let serving = await_serving(group.address(0), 1, total as usize);
    row(
        "restart a on existing images: ready, then serving",
        format!("{:.2} s, +{:.2} s", ready.as_secs_f64(), serving.as_secs_f64()),
    );
    gateways[0] = Some(process);
    // Stops: SIGTERM, then the time until each has let go of its images and exited.
    let stops: Vec<Duration> = gateways.into_iter().flatten().map(stop_time).collect();
    row(
        "SIGTERM until exit, a b c",
        stops.iter().map(|took| format!("{:.2} s", took.as_secs_f64())).collect::<Vec<_>>().join(", "),
    );
    if group.namespaces.len() <= MAX_IMAGES_REMOVED {
        support::gateway_group::remove_image(&image);
        drop(ManuallyDrop::into_inner(group));
    }
}

/// The Linux kernel host against `address` with `namespaces` namespaces: discovery,
/// connect, the block devices, `nvme list` and the ANA log, timed in the guest.
fn linux_view(peer: &str, address: SocketAddr, namespaces: u32) {
    let script = format!(
        r#"set -e
# Milliseconds since boot (busybox date has no %N).
ms() {{ awk '{{ printf "%d", $1 * 1000 }}' /proc/uptime; }}
# Namespace block devices (nvme0n1, not the hidden per-path nvme0c0n1).
count() {{ ls /sys/block | grep -cE '^nvme[0-9]+n[0-9]+$' || true; }}
t0=$(ms)
nvme discover -t tcp -a "$LNP_TARGET_ADDR" -s "$LNP_TARGET_PORT" | grep -c subnqn | sed 's/^/discovery log entries: /'
t1=$(ms)
nvme connect -t tcp -a "$LNP_TARGET_ADDR" -s "$LNP_TARGET_PORT" -n "{NQN}"
want={namespaces}
i=0
while [ "$(count)" -lt "$want" ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i+1)); done
t2=$(ms)
echo "block devices: $(count)"
echo "nvme list lines: $(nvme list | grep -c '/dev/nvme')"
t3=$(ms)
dev=$(ls /dev | grep -E '^nvme[0-9]+$' | head -1)
nvme ana-log /dev/$dev | grep -E 'ana_state|ngrps|nnsids' | sort | uniq -c
t4=$(ms)
echo "ms: discover $((t1-t0)), connect until $want block devices $((t2-t1)), nvme list $((t3-t2)), ana-log $((t4-t3))"
nvme disconnect -n "{NQN}"
"#
    );
    let started = Instant::now();
    let output = std::process::Command::new(peer)
        .args(["initiator", "--target-port", &address.port().to_string(), "--subnqn", NQN, "--timeout", "900", "--"])
        .arg(&script)
        .output()
        .expect("run linux-nvme-peer");
    let text = String::from_utf8_lossy(&output.stdout);
    for line in text.lines().filter(|line| !line.starts_with("linux-nvme-peer:")) {
        eprintln!("| {namespaces} | Linux host | {line} |");
    }
    // A row either way: the guest's failure is a finding, not a reason to lose the
    // rest of the measurement.
    let outcome = if output.status.success() { "ok".to_string() } else { format!("FAILED ({})", output.status) };
    eprintln!(
        "| {namespaces} | Linux host: guest run (boot included) | {outcome}, {:.0} s |",
        started.elapsed().as_secs_f64()
    );
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    }
}

#[test]
#[ignore = "a measurement against a cluster: scripts/measure-namespaces.sh"]
fn a_three_gateway_group_at_many_namespaces() {
    if !ceph_cluster_given("namespace scale") {
        return;
    }
    let sizes = std::env::var("SLUICE_SCALE_NAMESPACES").unwrap_or_else(|_| DEFAULT_SIZES.to_string());
    let linux_peer = std::env::var("LINUX_NVME_PEER").ok();
    eprintln!("| namespaces | what | measured |");
    eprintln!("| ---: | --- | --- |");
    for size in sizes.split(',') {
        let size: u32 = size.trim().parse().expect("SLUICE_SCALE_NAMESPACES: a list of counts");
        assert!((1..=4096).contains(&size), "1..=4096 namespaces (MAX_NAMESPACE_ID)");
        measure(size, linux_peer.as_deref());
    }
}

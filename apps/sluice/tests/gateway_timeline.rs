//! Measurement (ignored; run by hand, see docs/results/gateway.md): the timelines of a
//! drain, a balancing move (with more than one ANA group), an operator's move and a
//! SIGKILL takeover of ANA group 1 with 32 host controllers on it, for each namespace
//! count of `SLUICE_TIMELINE_NAMESPACES` (default "1,1000"). Three
//! gateways, the namespaces spread over ANA groups 1..=3 (group n preferred by member
//! n - 1); 32 host threads, each reading at QD1 through Sluice's multipath host over
//! the three gateways from a namespace of group 1. Prints the new owner's timeline of
//! each change (`gateway status`: released or fenced, optimized, each controller's
//! ANA notice, log read and first command on the new path) and each host's longest
//! pause.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_host_client::CommandQueue;
use nvme_spec::ana::AnaState;
use nvme_spec::NamespaceId;
use serde_json::Value;
use support::gateway_group::{ana_log, member_name, multipath_to, state_in, Group, BLOCK_BYTES};
use support::{ceph_cluster_given, ServeProcess};

const HOSTS: usize = 32;

fn status(group: &Group, member: usize) -> Value {
    let text = group.manage(member, &["gateway", "status", "-o", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("gateway status: {error}: {text}"))
}

/// The member reporting ANA group 1 optimized among `live`, once exactly one does.
fn owner_of_group_1(group: &Group, live: &[usize], limit: Duration) -> usize {
    owner_of(group, 1, live, limit)
}

/// The member reporting ANA group `ana_group` optimized among `live`, once exactly
/// one does.
fn owner_of(group: &Group, ana_group: u32, live: &[usize], limit: Duration) -> usize {
    let start = Instant::now();
    loop {
        let optimized: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&member| {
                ana_log(group.address(member)).is_some_and(|log| state_in(&log, ana_group) == AnaState::Optimized)
            })
            .collect();
        if let [owner] = optimized[..] {
            return owner;
        }
        assert!(start.elapsed() < limit, "ANA group {ana_group} not settled on one of {live:?}: {optimized:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many changes each member keeps now (a later change is found after them).
fn kept_changes(group: &Group) -> Vec<usize> {
    (0..3).map(|member| status(group, member)["path_changes"].as_array().map_or(0, Vec::len)).collect()
}

/// Waits until ANA groups 1..=3 are on three different members; returns their owners.
fn one_group_each(group: &Group) -> [usize; 3] {
    let start = Instant::now();
    loop {
        let owners = [1, 2, 3].map(|ana_group| owner_of(group, ana_group, &[0, 1, 2], Duration::from_secs(30)));
        if owners[0] != owners[1] && owners[1] != owners[2] && owners[0] != owners[2] {
            return owners;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "ANA groups 1..=3 not one per member: {owners:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `member`'s newest change of group 1 after `since` changes is closed
/// (every controller sent its first command, or its wait ended); returns it.
fn closed_change(group: &Group, member: usize, kept_before: usize) -> Value {
    let start = Instant::now();
    loop {
        let status = status(group, member);
        let changes = status["path_changes"].as_array().cloned().unwrap_or_default();
        if let Some(change) = changes.iter().skip(kept_before).rev().find(|change| change["ana_group"] == 1) {
            if change["open"] == false {
                return change.clone();
            }
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no closed change of group 1 on {}", member_name(member));
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn print_change(what: &str, namespaces: u32, change: &Value) {
    let controllers = change["controllers"].as_array().cloned().unwrap_or_default();
    let column = |key: &str| -> Vec<u64> {
        let mut values: Vec<u64> = controllers.iter().filter_map(|controller| controller[key].as_u64()).collect();
        values.sort_unstable();
        values
    };
    let range = |values: &[u64]| match (values.first(), values.last()) {
        (Some(low), Some(high)) => format!("{low}-{high} ms ({} of {})", values.len(), controllers.len()),
        _ => format!("none of {}", controllers.len()),
    };
    eprintln!(
        "[{namespaces} namespaces] {what}: {} -> {} ({}); released {} ms, fenced {} ms, optimized {} ms, no optimized path {} ms; \
         ANA notices {}; log reads {}; first commands {}; last host {} ms",
        change["from"],
        change["to"],
        change["kind"],
        change["released_ms"],
        change["fenced_ms"],
        change["optimized_ms"],
        change["without_optimized_ms"],
        range(&column("notice_ms")),
        range(&column("log_read_ms")),
        range(&column("first_command_ms")),
        change["last_first_command_ms"]
    );
}

fn reader(group: &Group, nsid: u32, stop: &AtomicBool, errors: &AtomicU64, longest_pause_us: &AtomicU64) {
    let Ok((multipath, mut queue)) = multipath_to(group, nsid) else {
        errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let mut last = Instant::now();
    let mut block = 0;
    while !stop.load(Ordering::Relaxed) {
        block = (block + 1) % 16;
        let read = nvme_host::commands::read(NamespaceId(nsid), block, 1, BLOCK_BYTES as u32);
        if queue.execute(read, Duration::from_secs(60)).is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
        }
        longest_pause_us.fetch_max(last.elapsed().as_micros() as u64, Ordering::Relaxed);
        last = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(queue);
    let _ = multipath.disconnect();
}

fn measure(namespaces: u32) {
    let layout: Vec<(u32, u32, usize)> =
        (1..=namespaces).map(|nsid| (nsid, (nsid - 1) % 3 + 1, ((nsid - 1) % 3) as usize)).collect();
    let group = Arc::new(Group::with_members(&format!("timeline{namespaces}"), 3).with_namespaces(&layout));
    let started = Instant::now();
    // Balancing by count, a pass every 2 s: it moves nothing while each member has
    // one group (and nothing at all with one namespace, one group).
    let edit = |text: String| {
        text + "\n[gateway.rebalance]\nmode = \"count\"\ninterval_ms = 2000\nload_window_ms = 1000\nthreshold_percent = 25\nmax_moves = 8\n"
    };
    let mut gateways: Vec<Option<ServeProcess>> = (0..3).map(|member| Some(group.start_edited(member, edit))).collect();
    let owner = owner_of_group_1(&group, &[0, 1, 2], Duration::from_secs(600));
    eprintln!(
        "[{namespaces} namespaces] group up after {:.1?}; ANA group 1 on {}",
        started.elapsed(),
        member_name(owner)
    );
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let pauses: Vec<Arc<AtomicU64>> = (0..HOSTS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let group_1: Vec<u32> = (1..=namespaces).filter(|nsid| (nsid - 1) % 3 == 0).collect();
    let threads: Vec<_> = (0..HOSTS)
        .map(|host| {
            let nsid = group_1[host % group_1.len()];
            let (group, stop, errors, pause) =
                (Arc::clone(&group), Arc::clone(&stop), Arc::clone(&errors), Arc::clone(&pauses[host]));
            std::thread::spawn(move || reader(&group, nsid, &stop, &errors, &pause))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(5));

    // A drain of group 1's owner.
    let others: Vec<usize> = (0..3).filter(|&member| member != owner).collect();
    let kept = kept_changes(&group);
    group.manage(others[0], &["gateway", "drain", &member_name(owner)]);
    let taker = owner_of_group_1(&group, &others, Duration::from_secs(30));
    print_change("drain", namespaces, &closed_change(&group, taker, kept[taker]));
    group.manage(others[0], &["gateway", "undrain", &member_name(owner)]);
    let back = owner_of_group_1(&group, &[0, 1, 2], Duration::from_secs(30));
    let settle = Instant::now();
    while owner_of_group_1(&group, &[0, 1, 2], Duration::from_secs(30)) != owner
        && settle.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("[{namespaces} namespaces] after undrain group 1 on {}", member_name(back));
    std::thread::sleep(Duration::from_secs(5));

    if namespaces >= 3 {
        // A balancing move of group 1: the operator moves another group onto group
        // 1's owner, which then has two groups while one member has none; the pass
        // (by count) may move only group 1 (an operator's group stays).
        let owners = one_group_each(&group);
        let (owner, other) = (owners[0], owners[1]);
        let kept = kept_changes(&group);
        group.manage(owner, &["gateway", "move", "2", &member_name(owner)]);
        let taker = owner_of_group_1(&group, &[other], Duration::from_secs(60));
        print_change("balancing move", namespaces, &closed_change(&group, taker, kept[taker]));
        std::thread::sleep(Duration::from_secs(5));
    } else {
        eprintln!("[{namespaces} namespaces] no balancing move: one ANA group, nothing to balance it with");
    }

    // An operator's move of group 1 to the next member.
    let owner = owner_of_group_1(&group, &[0, 1, 2], Duration::from_secs(30));
    let to = (owner + 1) % 3;
    let kept = kept_changes(&group);
    group.manage(to, &["gateway", "move", "1", &member_name(to)]);
    owner_of_group_1(&group, &[to], Duration::from_secs(30));
    print_change("operator move", namespaces, &closed_change(&group, to, kept[to]));
    std::thread::sleep(Duration::from_secs(5));

    // A SIGKILL of group 1's owner.
    let owner = owner_of_group_1(&group, &[0, 1, 2], Duration::from_secs(30));
    let others: Vec<usize> = (0..3).filter(|&member| member != owner).collect();
    let kept = kept_changes(&group);
    let mut killed = gateways[owner].take().unwrap();
    killed.child.kill().expect("SIGKILL");
    let killed_at = Instant::now();
    let taker = owner_of_group_1(&group, &others, Duration::from_secs(60));
    eprintln!(
        "[{namespaces} namespaces] takeover: optimized on {} {:.2?} after SIGKILL",
        member_name(taker),
        killed_at.elapsed()
    );
    print_change("takeover", namespaces, &closed_change(&group, taker, kept[taker]));
    drop(killed);

    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    let longest: Vec<f64> = pauses.iter().map(|pause| pause.load(Ordering::Relaxed) as f64 / 1000.0).collect();
    eprintln!(
        "[{namespaces} namespaces] {HOSTS} hosts: errors {}, longest pause {:.0}-{:.0} ms",
        errors.load(Ordering::Relaxed),
        longest.iter().cloned().fold(f64::MAX, f64::min),
        longest.iter().cloned().fold(0.0, f64::max)
    );
    drop(gateways);
    if namespaces > 64 {
        // `rbd rm` of a thousand images one at a time outlasts the measurement: they
        // stay for the cluster's removal.
        std::mem::forget(Arc::try_unwrap(group).ok());
    }
}

#[test]
#[ignore = "a measurement: see docs/results/gateway.md"]
fn timelines_of_a_drain_and_a_takeover_with_32_host_controllers() {
    if !ceph_cluster_given("timeline measurement") {
        return;
    }
    let sizes = std::env::var("SLUICE_TIMELINE_NAMESPACES").unwrap_or_else(|_| "1,1000".into());
    for size in sizes.split(',').filter_map(|text| text.trim().parse::<u32>().ok()) {
        measure(size);
    }
}

//! Drain, undrain and balancing moves in a group of three gateways (a, b, c) against
//! the cluster at `CEPH_CONF`, under I/O: six namespaces in ANA groups 1..=6
//! (preferred a, b, c, a, b, c), each written and read back without pause by a host
//! thread through Sluice's own multipath host over all three gateways.
//! - `sluice gateway drain b` (asked through a) returns once b owns nothing; b keeps
//!   its listener and reports every group non-optimized; nobody is fenced;
//! - a drain that would leave a group with no optimized path is refused;
//! - undrain, then drain/undrain cycles with balancing by count (failback off): each
//!   undrained member gets groups back through balancing passes, at least 20 moves;
//! - an operator's `sluice gateway move` of group 1, answered once its new owner
//!   holds it; balancing then evens the count with other groups;
//! - no host command fails, every block reads back what was last written, and each
//!   change's timeline (released, optimized, each controller's first command) is in
//!   `gateway status`. The longest I/O pause is printed.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_host_client::CommandQueue;
use nvme_spec::NamespaceId;
use serde_json::Value;
use support::gateway_group::{member_name, multipath_to, Group, BLOCK_BYTES};
use support::{ceph_cluster_given, ServeProcess};

const GROUPS: u32 = 6;
/// Blocks each host thread cycles through.
const BLOCKS: u64 = 32;
/// Drain/undrain cycles; each gives two balancing moves back to the undrained member
/// (and the start four).
const CYCLES: usize = 8;
const MIN_REBALANCE_MOVES: u64 = 20;
/// Longest a drain or a pass may take to settle: a round or two (a quarter lease
/// each), a pass interval and a load window.
const SETTLE: Duration = Duration::from_secs(20);

fn status(group: &Group, member: usize) -> Value {
    let text = group.manage(member, &["gateway", "status", "-o", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("gateway status: {error}: {text}"))
}

fn owners(group: &Group) -> Option<Vec<usize>> {
    support::gateway_group::owners(group, GROUPS)
}

fn await_owners(group: &Group, accept: impl Fn(&[usize]) -> bool, what: &str) -> Vec<usize> {
    support::gateway_group::await_owners(group, GROUPS, accept, what, SETTLE)
}

/// One host thread's result.
#[derive(Default)]
struct Verifier {
    commands: AtomicU64,
    errors: Mutex<Vec<String>>,
    longest_pause_us: AtomicU64,
}

/// Writes block after block of namespace `nsid` (its generation in every byte) and
/// reads each back through the multipath host until `stop`.
fn verify(group: &Group, nsid: u32, stop: &AtomicBool, result: &Verifier) {
    let (multipath, mut queue) = multipath_to(group, nsid).expect("multipath connect");
    let mut last_success = Instant::now();
    let mut generation = 0u64;
    let patience = Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) {
        generation += 1;
        let block = generation % BLOCKS;
        let tag = (generation as u8) ^ (nsid as u8).wrapping_mul(31);
        let data = vec![tag; BLOCK_BYTES];
        let write = nvme_host::commands::write(NamespaceId(nsid), block, data.clone(), BLOCK_BYTES as u32, false);
        let outcome = queue.execute(write, patience).and_then(|_| {
            queue.execute(nvme_host::commands::read(NamespaceId(nsid), block, 1, BLOCK_BYTES as u32), patience)
        });
        match outcome {
            Ok(completion) if completion.data == data => {}
            Ok(_) => {
                result.errors.lock().unwrap().push(format!("namespace {nsid} block {block}: read back other data"))
            }
            Err(error) => result.errors.lock().unwrap().push(format!("namespace {nsid} block {block}: {error}")),
        }
        let pause = last_success.elapsed().as_micros() as u64;
        result.longest_pause_us.fetch_max(pause, Ordering::Relaxed);
        last_success = Instant::now();
        result.commands.fetch_add(2, Ordering::Relaxed);
    }
    drop(queue);
    let _ = multipath.disconnect();
}

fn drain(group: &Group, through: usize, member: usize) -> Value {
    let text = group.manage(through, &["gateway", "drain", &member_name(member), "-o", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("gateway drain: {error}: {text}"))
}

fn undrain(group: &Group, through: usize, member: usize) {
    group.manage(through, &["gateway", "undrain", &member_name(member)]);
}

#[test]
fn drains_undrains_and_balancing_moves_lose_no_host_command() {
    if !ceph_cluster_given("gateway drain") {
        return;
    }
    let namespaces: Vec<(u32, u32, usize)> = (1..=GROUPS).map(|id| (id, id, (id as usize - 1) % 3)).collect();
    let test_started = Instant::now();
    // Before the gateways: dropped after them (images are removed once they stopped).
    let group = Arc::new(Group::with_members("drain", 3).with_namespaces(&namespaces));
    let edit = |text: String| {
        text.replacen("lease_ms = 3000\n", "lease_ms = 3000\nfailback = false\n", 1)
            + "\n[gateway.rebalance]\nmode = \"count\"\ninterval_ms = 1000\nload_window_ms = 1000\nthreshold_percent = 25\nmax_moves = 8\n"
    };
    let _gateways: Vec<ServeProcess> = (0..3).map(|member| group.start_edited(member, edit)).collect();
    // Without failback the first member up takes every group; balancing by count
    // spreads them two by two.
    let balanced = |found: &[usize]| (0..3).all(|owner| found.iter().filter(|&&at| at == owner).count() == 2);
    await_owners(&group, balanced, "start");
    eprintln!("three gateways up and balanced after {:.1?}", test_started.elapsed());

    let stop = Arc::new(AtomicBool::new(false));
    let results: Vec<Arc<Verifier>> = (1..=GROUPS).map(|_| Arc::new(Verifier::default())).collect();
    let threads: Vec<_> = (1..=GROUPS)
        .map(|nsid| {
            let (group, stop, result) =
                (Arc::clone(&group), Arc::clone(&stop), Arc::clone(&results[nsid as usize - 1]));
            std::thread::spawn(move || verify(&group, nsid, &stop, &result))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    // Drain b through a: it returns with b owning nothing.
    let started = Instant::now();
    let reply = drain(&group, 0, 1);
    eprintln!("drain b answered after {:.2?}: {reply}", started.elapsed());
    assert_eq!(reply["drained"], true, "{reply}");
    assert_eq!(reply["still_owned"], serde_json::json!([]), "{reply}");
    let found = await_owners(&group, |found| !found.contains(&1), "after draining b");
    eprintln!("owners after draining b: {found:?}");
    let b = status(&group, 1);
    assert_eq!(b["drained"], true, "{b}");
    assert_eq!(b["fenced_peers"], 0, "{b}");
    // Draining a too would leave c alone: allowed; draining c then is refused.
    let reply = drain(&group, 2, 0);
    assert_eq!(reply["drained"], true, "{reply}");
    let refused = support::sluice(&["gateway", "drain", "c", "--socket", group.socket(0).to_str().unwrap()]);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && message.contains("no optimized path"), "{message}");
    assert!(message.contains("a drained") && message.contains("b drained"), "{message}");
    undrain(&group, 2, 0);
    undrain(&group, 0, 1);

    // Cycles: drain one member (its groups go to the others), undrain it (balancing
    // by count brings it groups back).
    for cycle in 0..CYCLES {
        let member = cycle % 3;
        let cycle_started = Instant::now();
        eprintln!("cycle {cycle}: draining {}", member_name(member));
        drain(&group, (member + 1) % 3, member);
        await_owners(&group, |found| !found.contains(&member), "drain cycle");
        undrain(&group, (member + 2) % 3, member);
        await_owners(&group, balanced, "balanced");
        eprintln!("cycle {cycle}: balanced again after {:.1?}", cycle_started.elapsed());
    }
    eprintln!("{CYCLES} cycles done after {:.1?}", test_started.elapsed());

    // An operator's move of group 1 to a member that does not own it: answered once
    // that member owns it; balancing by count then evens the members out again,
    // moving some other group (group 1 stays, as it was moved by the operator).
    let before = owners(&group).expect("settled owners");
    let to = (before[0] + 1) % 3;
    let started = Instant::now();
    let text = group.manage(2, &["gateway", "move", "1", &member_name(to), "-o", "json"]);
    let reply: Value = serde_json::from_str(&text).unwrap_or_else(|error| panic!("gateway move: {error}: {text}"));
    eprintln!("move of group 1 answered after {:.2?}: {reply}", started.elapsed());
    assert_eq!(reply["owner"].as_str(), Some(member_name(to).as_str()), "{reply}");
    let refused = support::sluice(&["gateway", "move", "1", "z", "--socket", group.socket(0).to_str().unwrap()]);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && message.contains("not a member"), "{message}");
    let found = await_owners(&group, balanced, "balanced after the move");
    assert_eq!(found[0], to, "group 1 stays where the operator moved it: {found:?}");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let stopping = Instant::now();
    for thread in threads {
        thread.join().expect("host thread");
    }
    eprintln!("host threads stopped in {:.1?}", stopping.elapsed());

    let mut moves = 0;
    let mut changes = Vec::new();
    for member in 0..3 {
        let status = status(&group, member);
        moves += status["rebalance"]["moves_total"].as_u64().unwrap_or(0);
        assert_eq!(status["fenced_peers"], 0, "nobody fenced: {status}");
        changes.extend(status["path_changes"].as_array().cloned().unwrap_or_default());
    }
    eprintln!("balancing moves: {moves}; path changes kept: {}", changes.len());
    for change in &changes {
        eprintln!(
            "  group {} {} {} -> {}: released {} ms, optimized {} ms, no optimized path {} ms, last host's first command {} ms ({} controllers)",
            change["ana_group"], change["kind"], change["from"], change["to"], change["released_ms"], change["optimized_ms"],
            change["without_optimized_ms"], change["last_first_command_ms"], change["controllers"].as_array().map_or(0, Vec::len)
        );
    }
    assert!(moves >= MIN_REBALANCE_MOVES, "{moves} balancing moves, expected at least {MIN_REBALANCE_MOVES}");
    assert!(changes.iter().any(|change| change["kind"] == "drain"), "drain timelines kept");
    assert!(changes.iter().any(|change| change["kind"] == "rebalance"), "rebalance timelines kept");
    assert!(changes.iter().any(|change| change["kind"] == "move"), "the operator's move's timeline kept");
    // Each host uses one namespace, so one controller per change: once the host
    // moved to the new owner, its first command there closes the change.
    let closed: Vec<&Value> = changes.iter().filter(|change| change["last_first_command_ms"].is_u64()).collect();
    assert!(!closed.is_empty(), "some change saw its host's first command on the new path");
    let mut total = 0;
    for (index, result) in results.iter().enumerate() {
        let errors = result.errors.lock().unwrap();
        let commands = result.commands.load(Ordering::Relaxed);
        total += commands;
        eprintln!(
            "namespace {}: {commands} commands, longest pause {:.1} ms",
            index + 1,
            result.longest_pause_us.load(Ordering::Relaxed) as f64 / 1000.0
        );
        assert!(
            errors.is_empty(),
            "namespace {}: {} failed commands, first {:?}",
            index + 1,
            errors.len(),
            errors.first()
        );
        assert!(commands > 100, "namespace {}: I/O flowed ({commands} commands)", index + 1);
    }
    eprintln!("{total} host commands, 0 errors");
}

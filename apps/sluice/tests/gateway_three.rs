//! A gateway group of three `sluice serve` processes (a, b, c) against the cluster at
//! `CEPH_CONF` (scripts/test.sh starts one and sets `SLUICE_REQUIRE_CEPH`, which turns
//! "skipped" into a failure): three namespaces, each on its own image, in ANA groups
//! 1, 2 and 3, preferred by a, b and c.
//! - each gateway reports its own group optimized and the other two non-optimized (as
//!   a host reads them: log 0Ch over NVMe/TCP);
//! - c SIGKILLed: group 3 becomes optimized on exactly one of a and b within a bound,
//!   its data reads back through the new owner and a write through it lands;
//! - b stopped with SIGTERM hands group 2 (and any group it took from c) to the live
//!   member; started again it gets group 2 back (failback);
//! - c started again rejoins and gets group 3 back;
//! - at every step every namespace holds what was last written to it and exactly one
//!   live gateway reports each group optimized, the others non-optimized.

mod support;

use std::time::{Duration, Instant};

use nvme_spec::ana::AnaState;
use nvme_spec::NamespaceId;
use support::gateway_group::{
    ana_log, connect, connect_as, member_name, register, state_in, status_of, Group, BLOCK_BYTES, LEASE_MS, NAMESPACE,
};
use support::{ceph_cluster_given, ServeProcess};

/// Blocks written in each pattern.
const BLOCKS: u32 = 16;
/// ANA groups 1..=3, namespace n in group n, group n preferred by member n - 1.
const GROUPS: [u32; 3] = [1, 2, 3];
/// How long a group may take to settle on its owner: a takeover after a SIGKILL waits
/// out the dead owner's lease (3 s) plus a coordinator round or two (a quarter lease
/// each); failback and a handover on SIGTERM take a round or two.
const SETTLE: Duration = Duration::from_secs(15);

fn pattern(tag: u8) -> Vec<u8> {
    (0..BLOCKS as usize * BLOCK_BYTES).map(|index| tag ^ (index % 251) as u8).collect()
}

/// Waits until exactly one of the `live` members reports `ana_group` optimized (the
/// member `owner`, when given) and every other live member reports it non-optimized;
/// returns the owner and how long that took.
fn await_owner(group: &Group, live: &[usize], ana_group: u32, owner: Option<usize>) -> (usize, Duration) {
    let start = Instant::now();
    loop {
        let states: Vec<Option<AnaState>> =
            live.iter().map(|&member| ana_log(group.address(member)).map(|log| state_in(&log, ana_group))).collect();
        let optimized: Vec<usize> = live
            .iter()
            .zip(&states)
            .filter(|(_, state)| **state == Some(AnaState::Optimized))
            .map(|(member, _)| *member)
            .collect();
        let others_non_optimized = live
            .iter()
            .zip(&states)
            .all(|(member, state)| optimized.contains(member) || *state == Some(AnaState::NonOptimized));
        if let [found] = optimized[..] {
            if others_non_optimized && owner.is_none_or(|owner| owner == found) {
                return (found, start.elapsed());
            }
        }
        assert!(
            start.elapsed() < SETTLE,
            "ANA group {ana_group}: expected one owner ({owner:?}) among members {live:?} within {SETTLE:?}, \
             they report {states:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Checks, as one more reading of every live member's log, that each ANA group has
/// the owner `owners` gives (by group) and is non-optimized on the other live members.
fn assert_owners(group: &Group, live: &[usize], owners: [usize; 3]) {
    for &member in live {
        let log = ana_log(group.address(member)).unwrap_or_else(|| panic!("member {member} does not answer"));
        for (ana_group, owner) in GROUPS.iter().zip(owners) {
            let expected = if owner == member { AnaState::Optimized } else { AnaState::NonOptimized };
            assert_eq!(
                state_in(&log, *ana_group),
                expected,
                "member {} for ANA group {ana_group}",
                member_name(member)
            );
        }
    }
}

/// Reads every namespace through each of the `live` members and checks it holds
/// `data[n - 1]`.
fn assert_data(group: &Group, live: &[usize], data: &[Vec<u8>; 3]) {
    for &member in live {
        let host = connect(group.address(member));
        for (index, expected) in data.iter().enumerate() {
            let nsid = NamespaceId(index as u32 + 1);
            let read = host
                .read(nsid, 0, BLOCKS)
                .unwrap_or_else(|error| panic!("read namespace {} through {}: {error}", nsid.0, member_name(member)));
            assert!(read == *expected, "namespace {} through {} lost its data", nsid.0, member_name(member));
        }
    }
}

/// Writes `data` to namespace `nsid` through member `member` and reads it back there.
fn write_through(group: &Group, member: usize, nsid: u32, data: &[u8]) {
    let host = connect(group.address(member));
    host.write(NamespaceId(nsid), 0, data, true)
        .unwrap_or_else(|error| panic!("write namespace {nsid} through {}: {error}", member_name(member)));
    assert!(host.read(NamespaceId(nsid), 0, BLOCKS).unwrap() == data, "read back through {}", member_name(member));
}

/// Mean latency of a reservation change (Register, replacing the key) through member
/// a: read, compare-and-write the record, notify every gateway and wait for each
/// acknowledgement. Leaves no registration behind.
fn reservation_change_ms(group: &Group) -> f64 {
    const CHANGES: u64 = 100;
    let host = connect_as(group.address(0), Some([0x3A; 16]));
    assert_eq!(register(&host, 1), nvme_spec::Status::SUCCESS);
    let replace =
        |key: u64| status_of(host.io_command(nvme_host::commands::reservation_register(NAMESPACE, 2, true, 0, 0, key)));
    let started = Instant::now();
    for key in 2..2 + CHANGES {
        assert_eq!(replace(key), nvme_spec::Status::SUCCESS);
    }
    let mean = started.elapsed().as_secs_f64() * 1000.0 / CHANGES as f64;
    let unregister = nvme_host::commands::reservation_register(NAMESPACE, 1, true, 0, 0, 0);
    assert_eq!(status_of(host.io_command(unregister)), nvme_spec::Status::SUCCESS);
    mean
}

/// `sluice gateway status -o json` of member `member`.
fn gateway_status(group: &Group, member: usize) -> serde_json::Value {
    let text = group.manage(member, &["gateway", "status", "-o", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("gateway status: {error}: {text}"))
}

/// Whether `status` lists member `name` as alive.
fn member_alive(status: &serde_json::Value, name: &str) -> Option<bool> {
    let members = status["members"].as_array()?;
    members.iter().find(|member| member["name"] == name)?["alive"].as_bool()
}

#[test]
fn three_gateways_take_over_a_killed_members_group_hand_over_on_stop_and_fail_back() {
    if !ceph_cluster_given("three gateways") {
        return;
    }
    let started = Instant::now();
    let group = Group::with_members("three", 3).with_namespaces(&[(1, 1, 0), (2, 2, 1), (3, 3, 2)]);
    let mut gateways: Vec<Option<ServeProcess>> = (0..3).map(|member| Some(group.start(member))).collect();
    let all = [0, 1, 2];

    // Each gateway owns the group it prefers.
    for ana_group in GROUPS {
        let preferred = ana_group as usize - 1;
        let (_, took) = await_owner(&group, &all, ana_group, Some(preferred));
        eprintln!("ANA group {ana_group} optimized on {} alone after {took:.1?}", member_name(preferred));
    }
    assert_owners(&group, &all, [0, 1, 2]);
    let mut data = [pattern(0x11), pattern(0x22), pattern(0x33)];
    for (index, pattern) in data.iter().enumerate() {
        write_through(&group, index, index as u32 + 1, pattern);
    }
    assert_data(&group, &all, &data);
    // A reservation change is answered once all three gateways acknowledged its notice.
    eprintln!("reservation register/replace through a, three gateways: mean {:.2} ms", reservation_change_ms(&group));

    // c dies without a word: group 3 goes to exactly one of a and b once c's lease
    // has run out.
    let mut c = gateways[2].take().unwrap();
    c.child.kill().expect("SIGKILL c");
    let killed_at = Instant::now();
    let (taker, _) = await_owner(&group, &[0, 1], 3, None);
    let takeover = killed_at.elapsed();
    eprintln!(
        "takeover of ANA group 3 by {} {:.1} s after SIGKILL of c (lease {LEASE_MS} ms)",
        member_name(taker),
        takeover.as_secs_f64()
    );
    assert!(
        takeover < Duration::from_millis(2 * LEASE_MS + 3000),
        "takeover took {takeover:?}: more than a lease and a few rounds"
    );
    drop(c);
    // The taker's own view: c not alive, group 3 its own, c fenced by it.
    let status = gateway_status(&group, taker);
    assert_eq!(member_alive(&status, "c"), Some(false), "{status}");
    assert_eq!(status["ana_groups"][2]["owner"], member_name(taker).as_str(), "{status}");
    assert!(status["fenced_peers"].as_u64() >= Some(1), "c was fenced by the taker: {status}");
    await_owner(&group, &[0, 1], 1, Some(0));
    await_owner(&group, &[0, 1], 2, Some(1));
    let mut owners = [0, 1, taker];
    assert_owners(&group, &[0, 1], owners);
    assert_data(&group, &[0, 1], &data);
    data[2] = pattern(0x3C);
    write_through(&group, taker, 3, &data[2]);
    assert_data(&group, &[0, 1], &data);

    // b stops gracefully: it hands its groups over (group 2, and group 3 if it took
    // it), so a serves all three without waiting out a lease.
    let stopping_at = Instant::now();
    let status = gateways[1].take().expect("b runs").terminate();
    let stopped = stopping_at.elapsed();
    assert!(status.success(), "b did not stop cleanly on SIGTERM: {status}");
    let (_, moved) = await_owner(&group, &[0], 2, Some(0));
    await_owner(&group, &[0], 3, Some(0));
    eprintln!(
        "b stopped (SIGTERM) in {:.1} s; ANA group 2 optimized on a {:.1} s after SIGTERM",
        stopped.as_secs_f64(),
        (stopped + moved).as_secs_f64()
    );
    owners = [0, 0, 0];
    assert_owners(&group, &[0], owners);
    assert_data(&group, &[0], &data);
    data[1] = pattern(0x2D);
    write_through(&group, 0, 2, &data[1]);

    // b again: it rejoins and gets group 2 back; group 3 stays with a (c is down).
    let restart_at = Instant::now();
    gateways[1] = Some(group.start(1));
    let ready = restart_at.elapsed();
    let (_, back) = await_owner(&group, &[0, 1], 2, Some(1));
    eprintln!(
        "b restarted: ready after {:.1} s, ANA group 2 back on b {:.1} s after that",
        ready.as_secs_f64(),
        back.as_secs_f64()
    );
    await_owner(&group, &[0, 1], 3, Some(0));
    owners = [0, 1, 0];
    assert_owners(&group, &[0, 1], owners);
    assert_data(&group, &[0, 1], &data);

    // c again: it rejoins and gets group 3 back.
    let restart_at = Instant::now();
    gateways[2] = Some(group.start(2));
    let ready = restart_at.elapsed();
    let (_, back) = await_owner(&group, &all, 3, Some(2));
    eprintln!(
        "c restarted: ready after {:.1} s, ANA group 3 back on c {:.1} s after that",
        ready.as_secs_f64(),
        back.as_secs_f64()
    );
    for ana_group in GROUPS {
        await_owner(&group, &all, ana_group, Some(ana_group as usize - 1));
    }
    assert_owners(&group, &all, [0, 1, 2]);
    for member in all {
        let status = gateway_status(&group, member);
        for name in ["a", "b", "c"] {
            assert_eq!(member_alive(&status, name), Some(true), "{name} as {} sees it: {status}", member_name(member));
        }
    }
    assert_data(&group, &all, &data);
    data[2] = pattern(0x3E);
    write_through(&group, 2, 3, &data[2]);
    assert_data(&group, &all, &data);
    drop(gateways);
    eprintln!("three gateways: {:.1} s in all", started.elapsed().as_secs_f64());
}

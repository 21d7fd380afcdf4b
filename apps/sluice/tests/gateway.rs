//! Two `sluice serve` gateways of one gateway group, exporting one RBD image, against
//! the cluster at `CEPH_CONF` (scripts/test.sh starts one and sets
//! `SLUICE_REQUIRE_CEPH`, which turns "skipped" into a failure):
//! - the preferred gateway reports the ANA group optimized, the other non-optimized
//!   (read as a host reads them: log 0Ch over NVMe/TCP), their CNTLIDs differ, and
//!   discovery on either lists both paths;
//! - fencing: the owner is SIGSTOPped with writes queued on its connection; the other
//!   takes the group (measured), and data written through it survives the stopped
//!   gateway's resumption: none of the queued writes lands, and the resumed gateway
//!   reports the group inaccessible (it was blocklisted);
//! - failback: the first gateway restarted gets its group back;
//! - a gateway whose namespace identity for the image differs from a live peer's is
//!   refused, naming both;
//! - reservations are the group's: taken through one gateway, reported and enforced
//!   through the other, kept when the gateway they were taken through is SIGKILLed,
//!   preempted through the survivor with a notice to the preempted host's controller
//!   there, and enforced by a gateway restarted afterwards on its first I/O;
//! - fused Compare and Write is atomic across the gateways (librbd's
//!   compare-and-write): racers on both gateways, one winner per round; with the
//!   test-only switch that keeps pairs atomic only within each process, the same race
//!   finds two winners (so the test can fail).

mod support;

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvme_host_client::Controller;
use nvme_spec::ana::AnaState;
use nvme_spec::NamespaceId;
use support::gateway_group::{
    acquire_write_exclusive, await_state, connect, connect_as, holder, register, status_of, Group, BLOCK_BYTES,
    LEASE_MS, NAMESPACE, NQN,
};
use support::{ceph_cluster_given, wait_bounded, ServeProcess};

/// Blocks written in each pattern.
const BLOCKS: u32 = 64;

/// One test at a time on the cluster.
static CLUSTER: Mutex<()> = Mutex::new(());

fn pattern(tag: u8) -> Vec<u8> {
    (0..BLOCKS as usize * BLOCK_BYTES).map(|index| tag ^ (index % 251) as u8).collect()
}

#[test]
fn owner_fenced_on_takeover_rejoins_by_itself_and_fails_back() {
    if !ceph_cluster_given("gateway failover") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let group = Group::new("failover");
    let a = group.start(0);
    let _b = group.start(1);
    let (at_a, at_b) = (group.address(0), group.address(1));
    await_state(at_a, AnaState::Optimized, Duration::from_secs(15));
    await_state(at_b, AnaState::NonOptimized, Duration::from_secs(15));

    // One subsystem, two controllers with different CNTLIDs; discovery lists both paths.
    let through_a = connect(at_a);
    let through_b = connect(at_b);
    assert_ne!(through_a.controller_id(), through_b.controller_id());
    let identify = through_a.identify();
    assert_ne!(identify.multipath_capabilities & nvme_spec::identify::cmic::ANA_REPORTING, 0);
    let nguid = |controller: &Controller| {
        controller.identify_namespace(NAMESPACE).unwrap().namespace_globally_unique_identifier
    };
    assert_eq!(nguid(&through_a), nguid(&through_b), "the same namespace on both paths");
    assert_eq!(through_b.identify_namespace(NAMESPACE).unwrap().ana_group_identifier, 1);
    let discovery =
        support::sluice(&["discover", "-t", "tcp", "-a", "127.0.0.1", "-s", &group.ports[1].to_string(), "-o", "json"]);
    let listed = String::from_utf8_lossy(&discovery.stdout);
    for port in &group.ports {
        assert!(
            listed.contains(&format!("\"{port}\"")) || listed.contains(&format!(": {port}")),
            "port {port} in {listed}"
        );
    }

    let first = pattern(0x11);
    through_a.write(NAMESPACE, 0, &first, true).expect("write through the owner");

    // The owner stops answering; writes wait on its connection.
    let pid = a.child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let stopped_at = Instant::now();
    let stale = pattern(0xEE);
    let queued = std::thread::spawn(move || {
        // Fails (timeout, or an error once the fenced gateway resumes): never succeeds.
        through_a.write(NAMESPACE, 0, &stale, true)
    });
    await_state(at_b, AnaState::Optimized, Duration::from_secs(20));
    eprintln!("takeover {:.1} s after SIGSTOP (lease {LEASE_MS} ms)", stopped_at.elapsed().as_secs_f64());
    let second = pattern(0x22);
    through_b.write(NAMESPACE, 0, &second, true).expect("write through the new owner");

    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    let outcome = queued.join().expect("writer thread");
    assert!(outcome.is_err(), "a write queued on the fenced gateway must not succeed");
    await_state(at_a, AnaState::Inaccessible, Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(1));
    let read = through_b.read(NAMESPACE, 0, BLOCKS).expect("read through the new owner");
    assert!(read == second, "a write queued on the fenced gateway landed after the takeover");

    // The fenced gateway comes back by itself, without a restart: a new cluster
    // client, its images reopened, non-optimized first, then its group handed back.
    let resumed_at = Instant::now();
    await_state(at_a, AnaState::Optimized, Duration::from_secs(45));
    eprintln!("rejoined and failed back {:.1} s after SIGCONT", resumed_at.elapsed().as_secs_f64());
    await_state(at_b, AnaState::NonOptimized, Duration::from_secs(5));
    let again = connect(at_a);
    assert!(again.read(NAMESPACE, 0, BLOCKS).unwrap() == second, "the data survives the failback");
    let third = pattern(0x33);
    again.write(NAMESPACE, 0, &third, true).expect("a write through the rejoined gateway's new client");
    assert!(through_b.read(NAMESPACE, 0, BLOCKS).unwrap() == third, "written through a, read through b");
    let status = support::sluice(&["gateway", "status", "--socket", group.socket(0).to_str().unwrap()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "gateway status: {}", String::from_utf8_lossy(&status.stderr));
    assert!(text.contains("optimized") && text.contains("non-optimized") && text.contains("held"), "{text}");
    assert!(text.contains("rejoins after being fenced 1"), "{text}");
    drop(a);
}

#[test]
fn a_conflicting_namespace_identity_is_refused_naming_both_gateways() {
    if !ceph_cluster_given("gateway identity conflict") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let group = Group::new("conflict");
    let _a = group.start(0);
    // b describes the same image as namespace 2.
    let config = group.config(1, 2);
    let child = Command::new(support::SLUICE)
        .args(["serve", "--no-rpc-socket", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gateway b");
    let output = wait_bounded(child, Duration::from_secs(60)).expect("gateway b exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "b must refuse to start: {stderr}");
    assert!(
        stderr.contains("gateway a serves it as")
            && stderr.contains("gateway b (this one)")
            && stderr.contains("nsid=2"),
        "{stderr}"
    );
}

#[test]
fn reservations_are_one_state_across_the_group_and_survive_the_gateway_they_were_taken_through() {
    if !ceph_cluster_given("gateway reservations") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let group = Group::new("resv");
    let a = group.start(0);
    let _b = group.start(1);
    let (at_a, at_b) = (group.address(0), group.address(1));
    await_state(at_a, AnaState::Optimized, Duration::from_secs(15));
    let _b = _b;
    let (first_id, second_id) = ([0x1A; 16], [0x2B; 16]);
    let first = connect_as(at_a, Some(first_id));
    let second = connect_as(at_b, Some(second_id));
    let identify = first.identify_namespace(NAMESPACE).unwrap();
    assert_eq!(identify.reservation_capabilities & 1, 1, "PTPL offered: the cluster keeps the state");

    // Taken through a; reported and enforced through b.
    let started = Instant::now();
    assert_eq!(register(&first, 0xA1), nvme_spec::Status::SUCCESS);
    assert_eq!(acquire_write_exclusive(&first, 0, 0xA1, 0), nvme_spec::Status::SUCCESS);
    eprintln!("register + acquire through the group: {:.1} ms", started.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(holder(&second), Some(first_id));
    let data = pattern(0x31);
    assert_eq!(status_of(second.write(NAMESPACE, 0, &data, false)), nvme_spec::Status::RESERVATION_CONFLICT);
    assert_eq!(status_of(first.write(NAMESPACE, 0, &data, false)), nvme_spec::Status::SUCCESS);

    // Gateway a dies; the first host reaches b and still holds the reservation.
    drop(first);
    let mut a = a;
    a.child.kill().expect("SIGKILL gateway a");
    let _ = a.child.wait();
    let first = connect_as(at_b, Some(first_id));
    assert_eq!(status_of(first.write(NAMESPACE, 0, &data, false)), nvme_spec::Status::SUCCESS, "still the holder");
    assert_eq!(status_of(second.write(NAMESPACE, 0, &data, false)), nvme_spec::Status::RESERVATION_CONFLICT);

    // Preempted through b: the first host's writes conflict and its controller has
    // the Reservation Notification log entry.
    assert_eq!(register(&second, 0xB2), nvme_spec::Status::SUCCESS);
    assert_eq!(acquire_write_exclusive(&second, 1, 0xB2, 0xA1), nvme_spec::Status::SUCCESS);
    assert_eq!(status_of(first.write(NAMESPACE, 0, &data, false)), nvme_spec::Status::RESERVATION_CONFLICT);
    let log = first.get_log_page(0x80, NamespaceId::BROADCAST, 0, 64).expect("log 80h");
    assert_eq!(log[8], 1, "registration preempted: {:?}", &log[..16]);
    assert_eq!(u32::from_le_bytes(log[12..16].try_into().unwrap()), NAMESPACE.0);

    // Gateway a restarted after the change enforces it on its first I/O.
    drop(a);
    let a = group.start(0);
    let late = connect_as(at_a, Some(first_id));
    assert_eq!(status_of(late.write(NAMESPACE, 0, &data, false)), nvme_spec::Status::RESERVATION_CONFLICT);
    assert_eq!(holder(&late), Some(second_id));

    // Persist Through Power Loss on a group: the group's power loss is every gateway
    // gone. With PTPL on the state outlives it; with PTPL off it does not.
    let replace = |host: &Controller, cptpl: u8| {
        status_of(host.io_command(nvme_host::commands::reservation_register(NAMESPACE, 2, false, cptpl, 0xB2, 0xB2)))
    };
    assert_eq!(replace(&second, 3), nvme_spec::Status::SUCCESS, "CPTPL 11b without a state_dir");
    drop((late, first, second, a, _b));
    let a = group.start(0);
    let second = connect_as(at_a, Some(second_id));
    assert_eq!(holder(&second), Some(second_id), "PTPL on: kept when the whole group restarts");
    assert_eq!(replace(&second, 2), nvme_spec::Status::SUCCESS);
    drop((second, a));
    let _a = group.start(0);
    let second = connect_as(at_a, Some(second_id));
    assert_eq!(holder(&second), None, "PTPL off: gone when the whole group restarts");
}

/// Blocks the Compare and Write race works on: one 512-byte block, what VMFS's ATS
/// heartbeat takes, and the most Ceph 16.2's librbd compares and writes in one OSD
/// operation (one sector; measured: 1,024 bytes or more are refused with EINVAL).
const RACE_BLOCKS: u32 = 1;
const RACE_BLOCK_BYTES: usize = 512;

/// The race's data for (round, racer).
fn race_data(round: u32, racer: u32) -> Vec<u8> {
    let tag = (round.wrapping_mul(31) ^ racer.wrapping_mul(0x9E37)).to_le_bytes();
    (0..RACE_BLOCKS as usize * RACE_BLOCK_BYTES).map(|index| tag[index % 4] ^ (index / 4) as u8 ^ racer as u8).collect()
}

/// Racers on both gateways run Compare and Write from the same expected data each
/// round, for `rounds` rounds; returns the rounds with other than exactly one winner
/// or with data other than the winner's afterwards.
fn race_compare_and_write(group: &Group, rounds: u32) -> (u32, Duration) {
    const RACERS: u32 = 4;
    let controllers: Vec<Controller> = (0..RACERS).map(|racer| connect(group.address(racer as usize % 2))).collect();
    let initial = race_data(0, RACERS);
    controllers[0].write(NAMESPACE, 0, &initial, true).expect("initial data");
    let barrier = std::sync::Barrier::new(RACERS as usize);
    let current = Mutex::new(initial);
    let wins = std::sync::atomic::AtomicU32::new(0);
    let bad_rounds = std::sync::atomic::AtomicU32::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for (racer, controller) in controllers.iter().enumerate() {
            let (barrier, current, wins, bad_rounds) = (&barrier, &current, &wins, &bad_rounds);
            scope.spawn(move || {
                for round in 1..=rounds {
                    let expected = current.lock().unwrap().clone();
                    barrier.wait();
                    let mine = race_data(round, racer as u32);
                    if controller.compare_and_write(NAMESPACE, 0, &expected, &mine).expect("compare and write") {
                        wins.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    if barrier.wait().is_leader() {
                        let held = controller.read(NAMESPACE, 0, RACE_BLOCKS).expect("read back");
                        let winners = wins.swap(0, std::sync::atomic::Ordering::SeqCst);
                        let holder = (0..RACERS).find(|&racer| held == race_data(round, racer));
                        if winners != 1 || holder.is_none() {
                            bad_rounds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        *current.lock().unwrap() = held;
                    }
                    barrier.wait();
                }
            });
        }
    });
    (bad_rounds.into_inner(), started.elapsed())
}

#[test]
fn compare_and_write_has_one_winner_across_gateways_and_fails_without_the_cluster_atomic_path() {
    if !ceph_cluster_given("gateway compare and write") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let mut group = Group::new("caw");
    group.block_bytes = RACE_BLOCK_BYTES;
    let _a = group.start(0);
    let _b = group.start(1);
    await_state(group.address(0), AnaState::Optimized, Duration::from_secs(15));
    let identify = connect(group.address(1)).identify_namespace(NAMESPACE).unwrap();
    assert_ne!(identify.namespace_features & nvme_spec::identify::nsfeat::NAMESPACE_ATOMICS, 0);
    assert_eq!(identify.atomic_boundary_size_normal, 0, "one 512-byte sector (Ceph 16.2)");
    assert_eq!(identify.atomic_compare_and_write_unit, 0, "NACWU: one block");
    // A pair across two sectors cannot be one OSD operation: refused, not retried.
    let two = vec![0u8; 2 * RACE_BLOCK_BYTES];
    let refused = connect(group.address(0)).compare_and_write(NAMESPACE, 0, &two, &two);
    assert!(
        matches!(refused, Err(nvme_host_client::ClientError::Command { status, .. })
            if status.kind() == nvme_spec::Status::INVALID_FIELD && status.do_not_retry()),
        "{refused:?}"
    );
    // Latency through one gateway, uncontended: a plain write, Compare and Write
    // (one OSD compare-and-write), and a reservation change (read, compare-and-replace
    // the record, notify both gateways).
    let timer = connect(group.address(0));
    let block = race_data(1, 1);
    let mean_us = |run: &mut dyn FnMut()| {
        let started = Instant::now();
        for _ in 0..200 {
            run();
        }
        started.elapsed().as_secs_f64() * 1e6 / 200.0
    };
    let write_us = mean_us(&mut || timer.write(NAMESPACE, 0, &block, false).expect("write"));
    let caw_us = mean_us(&mut || assert!(timer.compare_and_write(NAMESPACE, 0, &block, &block).expect("caw")));
    let mut key = 0u64;
    let reservation_us = mean_us(&mut || {
        key += 1;
        let status =
            status_of(timer.io_command(nvme_host::commands::reservation_register(NAMESPACE, 2, true, 0, 0, key)));
        let status = if status == nvme_spec::Status::RESERVATION_CONFLICT { register(&timer, key) } else { status };
        assert_eq!(status, nvme_spec::Status::SUCCESS);
    });
    eprintln!(
        "mean latency through one gateway, 512 B: write {write_us:.0} us, compare and write {caw_us:.0} us, reservation register/replace {reservation_us:.0} us"
    );
    drop(timer);
    let rounds = 2000;
    let (bad, took) = race_compare_and_write(&group, rounds);
    eprintln!(
        "{rounds} rounds, 4 racers on 2 gateways, cluster-atomic: {bad} bad rounds in {:.1} s",
        took.as_secs_f64()
    );
    assert_eq!(bad, 0, "every round has exactly one winner whose data the blocks hold");
    drop((_a, _b));

    // The same race with pairs atomic only within each gateway must go wrong.
    // The switch of crates/sluice-config/src/lib.rs (checked builds only).
    let local = [("SLUICE_TEST_LOCAL_COMPARE_AND_WRITE", "1")];
    let _a = group.start_with_env(0, &local);
    let _b = group.start_with_env(1, &local);
    await_state(group.address(0), AnaState::Optimized, Duration::from_secs(20));
    let (bad, took) = race_compare_and_write(&group, 500);
    eprintln!("500 rounds with the per-process range table only: {bad} bad rounds in {:.1} s", took.as_secs_f64());
    assert!(bad > 0, "without the cluster-atomic path two gateways' pairs must collide at least once");
}

/// `sluice ARGS --socket` of member `member`, which must succeed; its output.
fn start_cluster_configured(group: &Group, member: usize, config: &std::path::Path) -> ServeProcess {
    let socket = group.socket(member);
    ServeProcess::start_with_env(config, &["--rpc-socket", socket.to_str().unwrap()], &[])
        .unwrap_or_else(|| panic!("gateway {member} did not start"))
}

/// Waits until member `member` lists namespace `nsid` (or no longer does); returns
/// how long that took.
fn await_namespace(group: &Group, member: usize, nsid: u32, listed: bool, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let list = group.manage(member, &["ns", "list", NQN, "-o", "json"]);
        let value: serde_json::Value = serde_json::from_str(&list).unwrap();
        let present = value["namespaces"].as_array().unwrap().iter().any(|namespace| namespace["nsid"] == nsid);
        if present == listed {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "member {member}: namespace {nsid} listed {present} after {limit:?}: {list}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until member `member` lists namespace `nsid` with `size_bytes`; returns how
/// long that took.
fn await_size(group: &Group, member: usize, nsid: u32, size_bytes: u64, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let list = group.manage(member, &["ns", "list", NQN, "-o", "json"]);
        let value: serde_json::Value = serde_json::from_str(&list).unwrap();
        let namespaces = value["namespaces"].as_array().unwrap();
        if namespaces.iter().any(|namespace| namespace["nsid"] == nsid && namespace["size_bytes"] == size_bytes) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "member {member}: namespace {nsid} not {size_bytes} bytes after {limit:?}: {list}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_groups_configuration_is_one_copy_in_the_cluster_changed_through_any_gateway() {
    if !ceph_cluster_given("gateway group configuration") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let group = Group::new("config");
    // a's file seeds the empty group; b's holds only its own part.
    let (a_file, b_file) = (group.cluster_config(0, false), group.cluster_config(1, true));
    let a = start_cluster_configured(&group, 0, &a_file);
    let b = start_cluster_configured(&group, 1, &b_file);
    let (at_a, at_b) = (group.address(0), group.address(1));
    await_state(at_a, AnaState::Optimized, Duration::from_secs(15));
    await_state(at_b, AnaState::NonOptimized, Duration::from_secs(15));
    assert!(connect(at_b).identify_namespace(NAMESPACE).is_ok(), "b serves the group's namespace from the cluster");
    assert!(group.manage(1, &["gateway", "status"]).contains("group configuration: cluster, version 1"));

    // A namespace added through a, on a new image, is served by b too.
    let image = format!("rbd/{}-2", group.image);
    group.manage(0, &["ns", "add", NQN, "--rbd", &image, "--size", "16MiB", "--block-size", "4096", "-N", "2"]);
    let delay = await_namespace(&group, 1, 2, true, Duration::from_secs(10));
    eprintln!("namespace added through a listed by b after {:.0} ms", delay.as_secs_f64() * 1000.0);
    let through_b = connect(at_b);
    let data = pattern(0x5A);
    through_b.write(NamespaceId(2), 0, &data, true).expect("write to the new namespace through b");
    assert!(connect(at_a).read(NamespaceId(2), 0, BLOCKS).unwrap() == data, "the same image behind both");
    assert!(group.manage(1, &["gateway", "status"]).contains("version 2"));
    // a's file keeps only what it had: the change lives in the cluster.
    assert!(!std::fs::read_to_string(&a_file).unwrap().contains(&image));

    // Grown through a: the image grows once, b follows the group's configuration,
    // and b's host sees the new size and writes past the old end.
    let grown = group.manage(0, &["ns", "resize", NQN, "2", "--size", "32MiB"]);
    assert!(grown.contains("grew namespace 2") && grown.contains("to 32 MiB"), "{grown}");
    let delay = await_size(&group, 1, 2, 32 << 20, Duration::from_secs(10));
    eprintln!("namespace grown through a seen by b after {:.0} ms", delay.as_secs_f64() * 1000.0);
    assert_eq!(
        through_b.identify_namespace(NamespaceId(2)).unwrap().namespace_size,
        (32 << 20) / 4096,
        "NSZE through b"
    );
    through_b.write(NamespaceId(2), (16 << 20) / 4096, &data, true).expect("write past the old end through b");
    // Grown outside Sluice (`rbd resize`): both gateways notice within their size check.
    let resized =
        Command::new("rbd").args(["resize", "--no-progress", "--size", "48M", &image]).status().expect("run rbd");
    assert!(resized.success());
    for member in 0..2 {
        let delay = await_size(&group, member, 2, 48 << 20, Duration::from_secs(15));
        eprintln!("`rbd resize` seen by member {member} after {:.0} ms", delay.as_secs_f64() * 1000.0);
    }
    let shrink = manage_output(&group, 0, &["ns", "resize", NQN, "2", "--size", "16MiB"]);
    assert!(!shrink.status.success() && String::from_utf8_lossy(&shrink.stderr).contains("only grow"), "{shrink:?}");

    // b down while a removes it; b started again serves the group's new version.
    drop(through_b);
    drop(b);
    group.manage(0, &["ns", "remove", NQN, "2"]);
    let b = start_cluster_configured(&group, 1, &b_file);
    await_namespace(&group, 1, 2, false, Duration::from_secs(1));
    // Version 3 was the resize.
    assert!(group.manage(1, &["gateway", "status"]).contains("version 4"));

    // Concurrent changes through both gateways: each either lands or is refused with
    // a conflict naming the versions; none is lost, and both gateways converge.
    let mut landed = Vec::new();
    let mut conflicts = 0;
    for round in 0..5 {
        let names = [format!("nqn.2026-11.io.sluice:race-{round}-a"), format!("nqn.2026-11.io.sluice:race-{round}-b")];
        let outputs: Vec<std::process::Output> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|member| {
                    let (group, name) = (&group, &names[member]);
                    scope.spawn(move || manage_output(group, member, &["subsystem", "add", name]))
                })
                .collect();
            handles.into_iter().map(|handle| handle.join().unwrap()).collect()
        });
        for (member, output) in outputs.iter().enumerate() {
            if output.status.success() {
                landed.push(names[member].clone());
            } else {
                let error = String::from_utf8_lossy(&output.stderr);
                assert!(error.contains("changed through another gateway") && error.contains("version"), "{error}");
                conflicts += 1;
            }
        }
        // Let both apply before the next round (a conflict is retried after that).
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!("concurrent changes: {} landed, {conflicts} refused as conflicts", landed.len());
    for member in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let list = group.manage(member, &["subsystem", "list"]);
            if landed.iter().all(|nqn| list.contains(nqn.as_str())) {
                break;
            }
            assert!(Instant::now() < deadline, "member {member} lacks a change that landed: {list}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    drop((a, b));
}

fn manage_output(group: &Group, member: usize, args: &[&str]) -> std::process::Output {
    let socket = group.socket(member);
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--socket", socket.to_str().unwrap()]);
    support::sluice(&all)
}

#[test]
fn gateway_import_moves_a_files_group_part_into_the_cluster_once() {
    if !ceph_cluster_given("gateway import") {
        return;
    }
    let _turn = CLUSTER.lock().unwrap_or_else(|poison| poison.into_inner());
    let group = Group::new("import");
    // A gateway file of today's kind (the whole group in every file).
    let file = group.config(0, NAMESPACE.0);
    let imported = support::sluice(&["gateway", "import", file.to_str().unwrap(), "--rewrite"]);
    let said = String::from_utf8_lossy(&imported.stdout);
    assert!(imported.status.success(), "{}", String::from_utf8_lossy(&imported.stderr));
    assert!(said.contains("as version 1") && said.contains("config = \"cluster\""), "{said}");
    let rewritten = std::fs::read_to_string(&file).unwrap();
    assert!(rewritten.contains("config = \"cluster\"") && !rewritten.contains("[[subsystem]]"), "{rewritten}");
    let backup = file.with_file_name("gateway-a.toml.before-import");
    assert!(std::fs::read_to_string(&backup).unwrap().contains("[[subsystem]]"));
    // Once: the same part again changes nothing; a different one is refused.
    let again = support::sluice(&["gateway", "import", backup.to_str().unwrap()]);
    assert!(again.status.success() && String::from_utf8_lossy(&again.stdout).contains("already holds"));
    std::fs::write(
        &backup,
        std::fs::read_to_string(&backup).unwrap().replace("allow_any_host = true", "allow_any_host = false"),
    )
    .unwrap();
    let other = support::sluice(&["gateway", "import", backup.to_str().unwrap()]);
    assert!(!other.status.success(), "a different group part must be refused");
    assert!(String::from_utf8_lossy(&other.stderr).contains("different group configuration (version 1)"));
    // The rewritten file serves the group from the cluster.
    let a = start_cluster_configured(&group, 0, &file);
    await_state(group.address(0), AnaState::Optimized, Duration::from_secs(15));
    assert!(connect(group.address(0)).identify_namespace(NAMESPACE).is_ok());
    assert!(group.manage(0, &["gateway", "status"]).contains("group configuration: cluster, version 1"));
    drop(a);
}

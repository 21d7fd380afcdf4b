//! Multipath against two real targets serving one namespace (one RAM backend shared
//! in-process), each reporting its own ANA state: path choice, failover when the
//! optimized path's target stops mid-verify, and ANA status failover.

mod support;

use std::time::{Duration, Instant};

use nvme_host_client::{commands, discover_paths, HostCommand, HostCompletion, Multipath, MultipathQueue, PathPolicy};
use nvme_spec::ana::{AnaGroupId, AnaState};
use nvme_spec::Status;
use support::{free_port, options, pattern, ram_backend, TestTarget, BLOCK_BYTES, NAMESPACE};

const CHUNK_BLOCKS: u32 = 32; // 16 KiB per command

fn two_paths(state_b: AnaState) -> (TestTarget, TestTarget, Multipath) {
    let backend = ram_backend();
    let a = TestTarget::start_reporting_ana(free_port(), backend.clone());
    let b = TestTarget::start_reporting_ana(free_port(), backend);
    assert!(b.target.set_ana_state(AnaGroupId(1), state_b));
    let multipath = Multipath::connect(vec![options(a.address), options(b.address)], NAMESPACE, PathPolicy::QueueDepth)
        .expect("multipath");
    (a, b, multipath)
}

fn write_command(chunk: u64, seed: u64) -> HostCommand {
    let data = pattern((CHUNK_BLOCKS * BLOCK_BYTES) as usize, seed + chunk);
    let mut command = commands::write(NAMESPACE, chunk * u64::from(CHUNK_BLOCKS), data, BLOCK_BYTES, false);
    command.user_tag = chunk;
    command
}

fn read_command(chunk: u64) -> HostCommand {
    let mut command = commands::read(NAMESPACE, chunk * u64::from(CHUNK_BLOCKS), CHUNK_BLOCKS, BLOCK_BYTES);
    command.user_tag = chunk | 1 << 63;
    command
}

/// Writes then reads back `chunks` chunks at `depth` commands in flight, checking
/// every completion and every byte (a chunk is read once its write completed); calls
/// `midway` once after half the chunks were written. Returns the number of
/// completions checked.
fn write_and_verify(
    queue: &mut MultipathQueue,
    chunks: u64,
    seed: u64,
    depth: usize,
    mut midway: impl FnMut(),
) -> usize {
    let mut next_write = 0;
    let mut written: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    let mut verified = 0;
    let mut checked = 0;
    let mut midway_done = false;
    let mut completions: Vec<HostCompletion> = Vec::new();
    // Less than the paths' controller loss timeout (20 s): failover must not wait
    // for a dead path to be given up.
    let deadline = Instant::now() + Duration::from_secs(15);
    while verified < chunks {
        assert!(Instant::now() < deadline, "verify did not finish within 15 s ({verified} of {chunks})");
        while queue.in_flight() < depth {
            if let Some(chunk) = written.pop_front() {
                queue.submit(read_command(chunk)).expect("submit read");
            } else if next_write < chunks {
                queue.submit(write_command(next_write, seed)).expect("submit write");
                next_write += 1;
            } else {
                break;
            }
        }
        if !midway_done && next_write >= chunks / 2 {
            midway_done = true;
            midway();
        }
        completions.clear();
        queue.reap(1, Duration::from_secs(30), &mut completions).expect("reap");
        for completion in completions.drain(..) {
            checked += 1;
            assert_eq!(
                completion.cqe.status,
                Status::SUCCESS,
                "tag {:#x} failed: {:?}",
                completion.user_tag,
                completion.cqe
            );
            if completion.user_tag & 1 << 63 == 0 {
                written.push_back(completion.user_tag);
                continue;
            }
            let chunk = completion.user_tag & !(1 << 63);
            let expected = pattern((CHUNK_BLOCKS * BLOCK_BYTES) as usize, seed + chunk);
            let first_difference = completion.data.iter().zip(&expected).position(|(got, want)| got != want);
            assert!(
                completion.data.len() == expected.len() && first_difference.is_none(),
                "chunk {chunk}: {} bytes read, first difference at {first_difference:?}",
                completion.data.len()
            );
            verified += 1;
        }
    }
    checked
}

#[test]
fn io_goes_to_the_optimized_path_and_fails_over_when_its_target_stops_mid_verify() {
    let (mut a, _b, multipath) = two_paths(AnaState::NonOptimized);
    let states: Vec<_> = multipath.paths().iter().map(|path| path.ana_state).collect();
    assert_eq!(states, [Some(AnaState::Optimized), Some(AnaState::NonOptimized)]);
    let mut queue = multipath.take_io_queue(0).expect("queue");
    // While both live, the optimized path takes everything.
    for chunk in 0..8 {
        queue.submit(write_command(chunk, 1)).unwrap();
    }
    let load = queue.path_load();
    assert_eq!((load[0].1, load[1].1), (8, 0), "all commands on the optimized path: {load:?}");
    let mut done = Vec::new();
    while done.len() < 8 {
        queue.reap(1, Duration::from_secs(5), &mut done).unwrap();
    }
    assert!(done.iter().all(|completion| completion.cqe.status == Status::SUCCESS));

    // 2048 chunks (32 MiB) written and verified at QD 16; target A stops halfway.
    let checked = write_and_verify(&mut queue, 2048, 7, 16, || a.stop());
    assert_eq!(checked, 4096, "every write and read completed exactly once");
    assert_eq!(queue.path_load()[0].1, 0, "nothing left on the stopped path");
}

#[test]
fn an_inaccessible_path_hands_its_io_to_the_other_and_gets_it_back() {
    let (a, _b, multipath) = two_paths(AnaState::NonOptimized);
    let mut queue = multipath.take_io_queue(0).expect("queue");
    // A turns inaccessible mid-run: commands it refuses (ANA status) go to B.
    let checked = write_and_verify(&mut queue, 512, 3, 8, || {
        assert!(a.target.set_ana_state(AnaGroupId(1), AnaState::Inaccessible));
    });
    assert_eq!(checked, 1024);
    // Optimized again: the checker notices within a couple of seconds and I/O moves back.
    assert!(a.target.set_ana_state(AnaGroupId(1), AnaState::Optimized));
    let deadline = Instant::now() + Duration::from_secs(10);
    while multipath.paths()[0].ana_state != Some(AnaState::Optimized) {
        assert!(Instant::now() < deadline, "ANA change not noticed");
        std::thread::sleep(Duration::from_millis(50));
    }
    queue.submit(write_command(0, 3)).unwrap();
    assert_eq!(queue.path_load()[0].1, 1, "back on the optimized path");
    let mut done = Vec::new();
    queue.reap(1, Duration::from_secs(5), &mut done).unwrap();
    assert_eq!(done[0].cqe.status, Status::SUCCESS);
}

#[test]
fn round_robin_spreads_over_equal_paths_and_both_down_fails_in_bounded_time() {
    let backend = ram_backend();
    let mut a = TestTarget::start_reporting_ana(free_port(), backend.clone());
    let mut b = TestTarget::start_reporting_ana(free_port(), backend);
    let short = |address| {
        let mut options = options(address);
        options.command_timeout = Duration::from_secs(2);
        options
    };
    let paths = vec![short(a.address), short(b.address)];
    let multipath = Multipath::connect(paths, NAMESPACE, PathPolicy::RoundRobin).expect("multipath");
    let mut queue = multipath.take_io_queue(0).expect("queue");
    for chunk in 0..10 {
        queue.submit(write_command(chunk, 9)).unwrap();
    }
    let load = queue.path_load();
    assert_eq!((load[0].1, load[1].1), (5, 5), "round-robin alternates: {load:?}");
    let mut done = Vec::new();
    while done.len() < 10 {
        queue.reap(1, Duration::from_secs(5), &mut done).unwrap();
    }
    // No path left: the command fails with a path error once its time is up
    // (bounded retries with backoff), instead of hanging.
    a.stop();
    b.stop();
    let started = Instant::now();
    queue.submit(write_command(0, 9)).unwrap();
    done.clear();
    while done.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "no answer with every path down");
        queue.reap(1, Duration::from_secs(1), &mut done).unwrap();
    }
    assert_eq!(done[0].cqe.status.code_type(), 3, "a path-related status: {:?}", done[0].cqe.status);
    assert!(done[0].cqe.status.do_not_retry());
}

#[test]
fn paths_come_from_the_discovery_log() {
    let target = TestTarget::start_reporting_ana(free_port(), ram_backend());
    let paths = discover_paths(target.address, &options(target.address)).expect("discovery");
    let addresses: Vec<_> = paths.iter().map(|path| path.address).collect();
    assert_eq!(addresses, [target.address], "the subsystem's one listener");
    let multipath = Multipath::connect(paths, NAMESPACE, PathPolicy::QueueDepth).expect("multipath from discovery");
    assert_eq!(multipath.paths().len(), 1);
    let mut other = options(target.address);
    other.subsystem_nqn = "nqn.2026-11.io.sluice:elsewhere".into();
    assert!(discover_paths(target.address, &other).expect("discovery").is_empty(), "no record for another subsystem");
}

//! Sleep mode must really sleep: an idle runtime (with connections open and a
//! far-off timer) burns almost no CPU. Own test binary, so no other test's
//! threads are counted in the process's CPU time.

mod common;

use std::time::Duration;

use common::*;
use runtime::PollMode;

fn process_cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let time = |value: libc::timeval| Duration::new(value.tv_sec as u64, value.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The process's CPU time over 500 ms, after 50 ms for the runtime to settle.
fn cpu_used_over_half_a_second() -> Duration {
    std::thread::sleep(Duration::from_millis(50));
    let before = process_cpu_time();
    std::thread::sleep(Duration::from_millis(500));
    process_cpu_time() - before
}

/// One test function, so the checks run one after the other: each counts the
/// whole process's CPU time.
#[test]
fn idle_sleep_and_adaptive_modes_use_almost_no_cpu() {
    // Adaptive polling spins only right after completions: idle, it sleeps too.
    for poll_mode in [PollMode::Sleep, PollMode::ADAPTIVE] {
        idle_uses_almost_no_cpu(poll_mode);
    }
    adaptive_mode_sleeps_while_a_connection_awaits_storage();
}

/// Adaptive polling spins for the network, not for storage that wakes the thread:
/// with a window far longer than the wait, a connection awaiting its storage
/// completion leaves the thread asleep (spinning, it would use the whole wait).
fn adaptive_mode_sleeps_while_a_connection_awaits_storage() {
    let poll_mode = PollMode::Adaptive { spin_us: 5_000_000 };
    let (runtime, events) = start(Behavior::StorageWake { delay_ms: 900 }, config(1, poll_mode));
    let mut stream = connect(runtime.local_addrs()[0]);
    std::io::Write::write_all(&mut stream, b"x").unwrap();
    wait_until(|| events.bytes_received.load(std::sync::atomic::Ordering::SeqCst) == 1, "the byte");
    let used = cpu_used_over_half_a_second();
    assert!(used < Duration::from_millis(100), "the thread used {used:?} of CPU in 500 ms awaiting storage");
    let mut reply = [0u8; 6];
    std::io::Read::read_exact(&mut stream, &mut reply).unwrap();
    assert_eq!(&reply, b"woken\n");
    drop(stream);
    events.wait_for_closed(1);
    shutdown_and_join(runtime);
}

fn idle_uses_almost_no_cpu(poll_mode: PollMode) {
    let (runtime, events) = start(Behavior::Timer { interval_ms: 60_000, ticks: 1 }, config(2, poll_mode));
    let streams: Vec<_> = (0..4).map(|_| connect(runtime.local_addrs()[0])).collect();
    wait_until(|| events.accepted.load(std::sync::atomic::Ordering::SeqCst) == 4, "accepts");
    let used = cpu_used_over_half_a_second();
    assert!(used < Duration::from_millis(25), "idle {poll_mode:?} runtime used {used:?} of CPU in 500 ms");
    drop(streams);
    events.wait_for_closed(4);
    shutdown_and_join(runtime);
}

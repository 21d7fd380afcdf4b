//! What the bench reads from the system: per-thread CPU time from /proc, the
//! machine description, UTC timestamps, and the loopback TCP ceiling.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Thread names of the embedded target's runtime (`crates/runtime`: "sluice-io-N").
pub const TARGET_THREAD_PREFIX: &str = "sluice-io-";

/// CPU nanoseconds per live thread of this process, with the thread's name and, when
/// the kernel has schedstat, the nanoseconds it spent runnable but waiting for a CPU.
#[derive(Clone, Debug, Default)]
pub struct CpuSnapshot {
    threads: HashMap<u32, (String, u64, Option<u64>)>,
}

/// Initiator and target CPU seconds between two snapshots, and the seconds their
/// threads waited for a CPU (summed over threads; `None` without schedstat).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuDelta {
    pub initiator_seconds: f64,
    pub target_seconds: f64,
    pub initiator_runqueue_seconds: Option<f64>,
    pub target_runqueue_seconds: Option<f64>,
}

/// Clock ticks per second of /proc/*/stat (USER_HZ, 100 on every Linux ABI).
const USER_HZ: u64 = 100;

impl CpuSnapshot {
    /// Reads `/proc/self/task/*`: `schedstat` (nanoseconds on CPU, user + system, and
    /// nanoseconds waiting on a run queue) when the kernel has it, else utime + stime
    /// from `stat` (10 ms ticks) and no run-queue time.
    pub fn take() -> CpuSnapshot {
        let mut threads = HashMap::new();
        let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
            return CpuSnapshot { threads };
        };
        for entry in entries.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
                continue;
            };
            let path = entry.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string();
            let schedstat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
            let mut fields = schedstat.split_whitespace().map(|field| field.parse::<u64>().ok());
            let (on_cpu, waiting) = (fields.next().flatten(), fields.next().flatten());
            let nanos = on_cpu.or_else(|| {
                let stat = std::fs::read_to_string(path.join("stat")).ok()?;
                // Fields after the parenthesised comm: state is field 3; utime 14, stime 15.
                let rest = &stat[stat.rfind(')')? + 2..];
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
                Some(ticks * 1_000_000_000 / USER_HZ)
            });
            if let Some(nanos) = nanos {
                threads.insert(tid, (comm, nanos, waiting));
            }
        }
        CpuSnapshot { threads }
    }

    /// CPU seconds of the embedded target's threads alive now.
    pub fn target_seconds(&self) -> f64 {
        self.threads
            .values()
            .filter(|(comm, _, _)| comm.starts_with(TARGET_THREAD_PREFIX))
            .map(|(_, nanos, _)| *nanos as f64 / 1e9)
            .sum()
    }

    /// CPU used since `earlier`, split into target threads and everything else.
    /// Threads that ended in between are not counted (the bench keeps its workers
    /// alive until after the last snapshot).
    pub fn since(&self, earlier: &CpuSnapshot) -> CpuDelta {
        let mut delta = CpuDelta::default();
        let measured = !self.threads.is_empty() && self.threads.values().all(|(_, _, waiting)| waiting.is_some());
        let (mut initiator_wait, mut target_wait) = (0, 0);
        for (tid, (comm, nanos, waiting)) in &self.threads {
            let before = earlier.threads.get(tid);
            let seconds = nanos.saturating_sub(before.map_or(0, |(_, nanos, _)| *nanos)) as f64 / 1e9;
            let waited = waiting.unwrap_or(0).saturating_sub(before.and_then(|(_, _, waiting)| *waiting).unwrap_or(0));
            if comm.starts_with(TARGET_THREAD_PREFIX) {
                delta.target_seconds += seconds;
                target_wait += waited;
            } else {
                delta.initiator_seconds += seconds;
                initiator_wait += waited;
            }
        }
        if measured {
            delta.initiator_runqueue_seconds = Some(initiator_wait as f64 / 1e9);
            delta.target_runqueue_seconds = Some(target_wait as f64 / 1e9);
        }
        delta
    }
}

/// CPU seconds (user + system, all threads, living and ended) of process `pid` from
/// `/proc/PID/stat`, in 10 ms ticks; `None` when the process is gone.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised comm: state is field 3; utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / USER_HZ as f64)
}

/// The machine the bench runs on.
pub fn machine() -> bench_results::Machine {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default().trim().to_string();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split(':').nth(1))
        .map(|model| model.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let memory_bytes = read("/proc/meminfo")
        .lines()
        .find(|line| line.starts_with("MemTotal:"))
        .and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024);
    bench_results::Machine {
        hostname: read("/proc/sys/kernel/hostname"),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        cpu_model,
        kernel: read("/proc/sys/kernel/osrelease"),
        memory_bytes,
    }
}

/// Seconds since the epoch as (year, month, day, hour, minute, second), UTC.
fn civil(time: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32)
}

/// RFC 3339 UTC, e.g. `2026-11-21T18:42:17Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(time);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// For file names, e.g. `20261121T184217Z`.
pub fn compact_timestamp(time: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(time);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// Single-stream loopback TCP bandwidth: one sender thread writes 1 MiB buffers to
/// a receiver for `duration`; bytes received per second.
pub fn loopback_tcp_bandwidth(duration: Duration) -> std::io::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let sender = std::thread::Builder::new().name("bench-loopback".into()).spawn(move || -> std::io::Result<()> {
        let mut stream = TcpStream::connect(address)?;
        let buffer = vec![0x5Au8; 1 << 20];
        let end = Instant::now() + duration + Duration::from_millis(100);
        while Instant::now() < end {
            if stream.write_all(&buffer).is_err() {
                break;
            }
        }
        Ok(())
    })?;
    let (mut stream, _) = listener.accept()?;
    let mut buffer = vec![0u8; 1 << 20];
    // Skip the first moments (slow start).
    let warm = Instant::now() + duration / 10;
    while Instant::now() < warm {
        if stream.read(&mut buffer)? == 0 {
            break;
        }
    }
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < duration {
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        bytes += read as u64;
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(stream);
    let _ = sender.join();
    Ok(bytes as f64 / seconds.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let time = UNIX_EPOCH + Duration::from_secs(1_795_286_537); // 2026-11-21T18:42:17Z
        assert_eq!(rfc3339(time), "2026-11-21T18:42:17Z");
        assert_eq!(compact_timestamp(time), "20261121T184217Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn cpu_snapshots_see_this_thread() {
        // Spin until 20 ms of CPU show up (wall time varies on a loaded machine).
        let before = CpuSnapshot::take();
        let start = Instant::now();
        let mut x = 0u64;
        let mut delta = CpuDelta::default();
        while start.elapsed() < Duration::from_secs(10) {
            for _ in 0..100_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            delta = CpuSnapshot::take().since(&before);
            if delta.initiator_seconds > 0.02 {
                break;
            }
        }
        assert!(x > 0);
        assert!(delta.initiator_seconds > 0.02, "{delta:?}");
        assert_eq!(delta.target_seconds, 0.0);
        assert_eq!(CpuSnapshot::take().target_seconds(), 0.0);
        // Run-queue time is there when schedstat is (no target thread: none waited).
        if std::fs::metadata("/proc/thread-self/schedstat").is_ok() {
            assert!(delta.initiator_runqueue_seconds.is_some_and(|s| s >= 0.0), "{delta:?}");
            assert_eq!(delta.target_runqueue_seconds, Some(0.0));
        }
        // This process, read from the outside view (/proc/PID/stat): at least the 20 ms
        // spun above, in 10 ms ticks.
        let own = process_cpu_seconds(std::process::id()).unwrap();
        assert!(own >= 0.01, "{own}");
        assert_eq!(process_cpu_seconds(u32::MAX), None);
    }
}

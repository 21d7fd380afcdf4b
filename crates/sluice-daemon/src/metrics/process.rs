//! The process and its listeners in the exposition: CPU, memory and descriptors under
//! the names every Prometheus client library uses (`process_*`, so stock dashboards
//! and the CPU-per-I/O panel work), the build, and each listener accepting now.
//! Read from /proc at each scrape: a few small files, nothing per I/O.

use std::fmt::Write as _;

use nvme_target::Target;

use super::render::header;

/// Clock ticks per second of /proc/PID/stat's times: USER_HZ is 100 on every Linux
/// architecture Sluice builds for (the kernel converts to it for userspace).
const USER_HZ: f64 = 100.0;

/// `process_*`, `sluice_build_info` and `sluice_listener_accepting`.
pub fn render(out: &mut String, target: &Target) {
    if let Some(stat) = ProcessStat::read() {
        header(out, "process_cpu_seconds_total", "counter", "User and system CPU time of the process.");
        let _ = writeln!(out, "process_cpu_seconds_total {:.2}", stat.cpu_seconds);
        if let Some(resident) = resident_bytes() {
            header(out, "process_resident_memory_bytes", "gauge", "Resident memory of the process.");
            let _ = writeln!(out, "process_resident_memory_bytes {resident}");
        }
        header(out, "process_threads", "gauge", "Threads of the process.");
        let _ = writeln!(out, "process_threads {}", stat.threads);
        if let Some(start) = stat.start_time_seconds {
            header(out, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch.");
            let _ = writeln!(out, "process_start_time_seconds {start:.0}");
        }
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        header(out, "process_open_fds", "gauge", "Open file descriptors (one per connection, file and listener).");
        let _ = writeln!(out, "process_open_fds {}", entries.count());
    }
    header(out, "sluice_build_info", "gauge", "1, labelled with the version of the running binary.");
    let _ = writeln!(out, "sluice_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
    header(
        out,
        "sluice_listener_accepting",
        "gauge",
        "1 for each listener accepting connections now (role io or discovery).",
    );
    for (_, listener) in target.listeners() {
        let role = if listener.discovery_only { "discovery" } else { "io" };
        let _ = writeln!(
            out,
            "sluice_listener_accepting{{address=\"{}\",port=\"{}\",role=\"{role}\",tls=\"{}\"}} 1",
            listener.address.replace('"', ""),
            listener.port,
            listener.secure_channel.name()
        );
    }
}

/// The fields of /proc/self/stat the exposition needs.
struct ProcessStat {
    cpu_seconds: f64,
    threads: u64,
    start_time_seconds: Option<f64>,
}

impl ProcessStat {
    fn read() -> Option<Self> {
        let text = std::fs::read_to_string("/proc/self/stat").ok()?;
        Self::parse(&text, boot_time_seconds())
    }

    /// Parses /proc/PID/stat. The command name (field 2) is in parentheses and may
    /// hold spaces, so fields are counted from its closing parenthesis (field 3 on).
    fn parse(text: &str, boot_time_seconds: Option<f64>) -> Option<Self> {
        let rest = &text[text.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Field N of proc(5) is fields[N - 3].
        let field = |number: usize| fields.get(number - 3).and_then(|value| value.parse::<u64>().ok());
        let (user, system) = (field(14)?, field(15)?);
        let start_ticks = field(22)?;
        Some(ProcessStat {
            cpu_seconds: (user + system) as f64 / USER_HZ,
            threads: field(20)?,
            start_time_seconds: boot_time_seconds.map(|boot| boot + start_ticks as f64 / USER_HZ),
        })
    }
}

/// VmRSS of /proc/self/status (in kB there: no page size to assume).
fn resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let kilobytes: u64 =
        text.lines().find_map(|line| line.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok())?;
    Some(kilobytes * 1024)
}

/// The boot time (`btime` of /proc/stat), to turn the start ticks into a time.
fn boot_time_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines().find_map(|line| line.strip_prefix("btime ")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields_are_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis, as /proc allows.
        let text = "4242 (sluice (io) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 7 0 5000 \
                    123456789 2560 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let stat = ProcessStat::parse(text, Some(1_700_000_000.0)).expect("parses");
        assert!((stat.cpu_seconds - 3.8).abs() < 1e-9, "250 + 130 ticks");
        assert_eq!(stat.threads, 7);
        assert_eq!(stat.start_time_seconds, Some(1_700_000_050.0));
        assert!(ProcessStat::parse("garbage", None).is_none());
    }

    #[test]
    fn this_process_reads() {
        let stat = ProcessStat::read().expect("/proc/self/stat");
        assert!(stat.threads >= 1 && stat.cpu_seconds >= 0.0);
        assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
    }
}

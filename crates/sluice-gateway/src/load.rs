//! The load of the ANA groups a gateway serves, measured over a window and published
//! on the group's object (`load.<gateway>`) for the member that balances.
//!
//! One number per group decides balancing, in load units per second: commands per
//! second plus bytes per second divided by [`BYTES_PER_LOAD_UNIT`]. A small command
//! costs the target about the same whatever its size (parsing, dispatch, completion:
//! the per-I/O CPU), a large one costs by its bytes (copies, the network, the
//! cluster). 64 KiB is a chosen weight, not a measured one: a 4 KiB command weighs
//! 1.06 units, a 1 MiB one 17. The record also carries
//! the raw rates and the busy share of the gateway's I/O threads, for operators.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use nvme_spec::ana::AnaGroupId;

/// Bytes that weigh as much as one command in the load measure.
pub const BYTES_PER_LOAD_UNIT: f64 = 65_536.0;
/// The load record's format version.
pub const LOAD_RECORD_VERSION: u32 = 1;

/// The attribute holding `member`'s load record.
pub fn load_attribute(member: &str) -> String {
    format!("load.{member}")
}

/// Commands and bytes an ANA group served since the gateway started (summed over its
/// namespaces).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupTotals {
    pub commands: u64,
    pub bytes: u64,
}

/// One ANA group's rates over the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupRate {
    pub ana_group: u32,
    pub commands_per_second: f64,
    pub bytes_per_second: f64,
    /// The load measure (see the module comment).
    pub load: f64,
}

/// What one gateway publishes each window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadRecord {
    pub version: u32,
    pub gateway: String,
    /// End of the window (Unix time, ms).
    pub measured_unix_ms: u64,
    pub window_ms: u64,
    /// Busy time of the gateway's I/O threads over the window, in percent of one
    /// thread (200 is two threads always busy).
    pub io_threads_busy_percent: f64,
    /// The groups this gateway owned through the whole window.
    pub groups: Vec<GroupRate>,
}

impl LoadRecord {
    pub fn parse(bytes: &[u8]) -> Option<LoadRecord> {
        serde_json::from_slice::<LoadRecord>(bytes).ok().filter(|record| record.version <= LOAD_RECORD_VERSION)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// One sample: when, the I/O threads' busy time so far, each group's totals.
type Sample = (Instant, Duration, Vec<(AnaGroupId, GroupTotals)>);

/// Turns totals sampled at the end of each window into rates.
#[derive(Debug, Default)]
pub struct LoadMeter {
    previous: Option<Sample>,
    /// The groups owned at the previous sample.
    owned_before: Vec<AnaGroupId>,
}

impl LoadMeter {
    /// Of the groups `owned` now, those also owned at the previous sample; remembers
    /// `owned` for the next.
    pub fn owned_through(&mut self, owned: &[AnaGroupId]) -> Vec<AnaGroupId> {
        let through = owned.iter().filter(|group| self.owned_before.contains(group)).copied().collect();
        self.owned_before = owned.to_vec();
        through
    }

    /// A record for the window since the previous sample (`None` at the first).
    /// `owned` lists the groups this gateway owned through the whole window.
    pub fn sample(
        &mut self,
        now: Instant,
        now_unix_ms: u64,
        gateway: &str,
        busy: Duration,
        totals: Vec<(AnaGroupId, GroupTotals)>,
        owned: &[AnaGroupId],
    ) -> Option<LoadRecord> {
        let previous = self.previous.replace((now, busy, totals.clone()));
        let (then, busy_then, totals_then) = previous?;
        let seconds = now.duration_since(then).as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let groups = totals
            .iter()
            .filter(|(group, _)| owned.contains(group))
            .map(|(group, now_totals)| {
                let before =
                    totals_then.iter().find(|(id, _)| id == group).map(|(_, totals)| *totals).unwrap_or_default();
                let commands_per_second = now_totals.commands.saturating_sub(before.commands) as f64 / seconds;
                let bytes_per_second = now_totals.bytes.saturating_sub(before.bytes) as f64 / seconds;
                GroupRate {
                    ana_group: group.0,
                    commands_per_second,
                    bytes_per_second,
                    load: commands_per_second + bytes_per_second / BYTES_PER_LOAD_UNIT,
                }
            })
            .collect();
        Some(LoadRecord {
            version: LOAD_RECORD_VERSION,
            gateway: gateway.to_string(),
            measured_unix_ms: now_unix_ms,
            window_ms: (seconds * 1000.0) as u64,
            io_threads_busy_percent: busy.saturating_sub(busy_then).as_secs_f64() / seconds * 100.0,
            groups,
        })
    }
}

/// CPU time of this process's I/O threads (`sluice-io-*`) so far, from /proc; zero
/// where /proc is not readable.
pub fn io_threads_busy() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let ticks_per_second = 100.0; // USER_HZ: 100 on every Linux architecture Sluice builds for.
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else { continue };
        if !comm.starts_with("sluice-io-") {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // Fields after the command name (which may hold spaces): utime is the 14th
        // field of the line, the 12th after ")".
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |index: usize| fields.get(index).and_then(|text| text.parse::<u64>().ok()).unwrap_or(0);
        ticks += field(11) + field(12);
    }
    Duration::from_secs_f64(ticks as f64 / ticks_per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_cover_owned_groups_over_the_window() {
        let mut meter = LoadMeter::default();
        let start = Instant::now();
        let totals = |commands, bytes| GroupTotals { commands, bytes };
        assert!(meter
            .sample(start, 0, "a", Duration::ZERO, vec![(AnaGroupId(1), totals(0, 0))], &[AnaGroupId(1)])
            .is_none());
        let record = meter
            .sample(
                start + Duration::from_secs(2),
                2000,
                "a",
                Duration::from_millis(500),
                vec![(AnaGroupId(1), totals(2000, 2000 * 4096)), (AnaGroupId(2), totals(10, 0))],
                &[AnaGroupId(1)],
            )
            .unwrap();
        assert_eq!(record.groups.len(), 1, "group 2 was not owned");
        let rate = &record.groups[0];
        assert_eq!(rate.commands_per_second, 1000.0);
        assert_eq!(rate.load, 1000.0 + 1000.0 * 4096.0 / BYTES_PER_LOAD_UNIT);
        assert_eq!(record.io_threads_busy_percent, 25.0);
        assert_eq!(LoadRecord::parse(&record.encode()), Some(record));
    }

    #[test]
    fn the_io_threads_busy_time_reads_without_failing() {
        // The test process has no sluice-io threads: zero, never a panic.
        assert_eq!(io_threads_busy(), Duration::ZERO);
    }
}

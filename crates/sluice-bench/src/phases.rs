//! Where the embedded target's time went in each run: the namespace's per-phase
//! counters (`nvme_target::stats::IoPhase`: receive, QoS, storage, send) are read right
//! before and right after the run, and the run's `target_phases_us` is their growth
//! divided by the reads and writes completed in between. Only the embedded target can
//! be read so: runs against other targets (remote, iSCSI, fio's rbd engine) get none.

use bench_results::TargetPhases;
use nvme_target::stats::{IoPhase, StatsSnapshot};

use super::exec::Endpoint;

/// The namespace's phase counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseReading {
    /// Reads and writes completed successfully so far (those the phases are summed over).
    commands: u64,
    /// Microseconds summed per phase, in `IoPhase::ALL` order.
    sums_us: [u64; 4],
}

impl PhaseReading {
    /// The counters of a stats snapshot.
    pub fn of(snapshot: &StatsSnapshot) -> PhaseReading {
        PhaseReading {
            commands: snapshot.read_latency.count() + snapshot.write_latency.count(),
            sums_us: IoPhase::ALL.map(|phase| snapshot.phase(phase)),
        }
    }

    /// The embedded target's namespace under test now; `None` for any other target.
    pub fn take(endpoint: &Endpoint) -> Option<PhaseReading> {
        let embedded = endpoint.embedded.as_ref()?;
        let namespace = embedded.target.subsystem_by_nqn(&endpoint.nqn)?.namespace(endpoint.nsid)?;
        Some(PhaseReading::of(&namespace.stats.snapshot()))
    }

    /// The mean per command in each phase from this reading to the later `after`;
    /// `None` when no command completed in between.
    pub fn until(&self, after: &PhaseReading) -> Option<TargetPhases> {
        let commands = after.commands.saturating_sub(self.commands);
        let sums = std::array::from_fn(|index| after.sums_us[index].saturating_sub(self.sums_us[index]));
        TargetPhases::from_sums(commands, sums)
    }
}

/// The run's split: from `before` (taken when it started) to now.
pub fn since(endpoint: &Endpoint, before: Option<PhaseReading>) -> Option<TargetPhases> {
    before?.until(&PhaseReading::take(endpoint)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_target::stats::HistogramSnapshot;

    /// A namespace's snapshot after `reads` and `writes` commands with these phase sums.
    fn snapshot(reads: u64, writes: u64, sums_us: [u64; 4]) -> StatsSnapshot {
        let histogram = |count: u64| {
            let mut buckets = [0; nvme_target::stats::LATENCY_BUCKETS];
            buckets[5] = count;
            HistogramSnapshot { buckets, sum_microseconds: count * 20 }
        };
        StatsSnapshot {
            read_latency: histogram(reads),
            write_latency: histogram(writes),
            phase_microseconds: sums_us,
            ..StatsSnapshot::default()
        }
    }

    #[test]
    fn the_split_is_the_growth_over_the_commands_in_between() {
        // Earlier runs left counts behind; this one completed 300 reads and 100 writes.
        let before = PhaseReading::of(&snapshot(1_000, 500, [9_000, 0, 700, 4_000]));
        let after = PhaseReading::of(&snapshot(1_300, 600, [9_000 + 4_800, 200, 700 + 40, 4_000 + 3_000]));
        let phases = before.until(&after).unwrap();
        assert_eq!(phases, TargetPhases { commands: 400, receive: 12.0, qos: 0.5, storage: 0.1, send: 7.5 });
        assert!(phases.problems("runs[0].target_phases_us").is_empty());
        // Nothing completed: no split (not a division by zero).
        assert_eq!(after.until(&after), None);
        assert_eq!(PhaseReading::default().until(&PhaseReading::default()), None);
        // Counters never run backwards, but a reading that does gives zeros, not a wrap.
        let phases = after.until(&PhaseReading::of(&snapshot(1_301, 600, [0; 4]))).unwrap();
        assert_eq!(phases.means(), [0.0; 4]);
    }
}

//! Where the embedded target's time went in one run ([`TargetPhases`], the
//! `target_phases_us` of a [`crate::RunResult`]): the mean microseconds per command in
//! each phase of the target's work on a read or write, from the command capsule's
//! receipt to the response's last byte handed to the socket. The bench reads the
//! namespace's counters (`nvme_target::stats::IoPhase`) right before and right after
//! each run; the means are the differences over the commands completed in between.

use serde::{Deserialize, Serialize};

/// The phases' names as the report and the table show them, in a command's order (the
/// order of [`TargetPhases::means`]).
pub const PHASE_NAMES: [&str; 4] = ["receive", "QoS", "storage", "send"];

/// Mean microseconds per command in each phase of the embedded target's work, over the
/// reads and writes it completed successfully during one run (ramp included).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TargetPhases {
    /// Reads and writes the target completed successfully between the two readings
    /// (the ramp's included, so usually a little more than the run's `ios`).
    pub commands: u64,
    /// Receipt of the command to its storage request: the host's data in (R2T round
    /// trips for writes), waits behind other commands' ranges or a reservation change.
    pub receive: f64,
    /// Held by a QoS limit.
    pub qos: f64,
    /// The storage request to its completion.
    pub storage: f64,
    /// Storage completion to the response's last byte sent: the wait for the
    /// connection's previous response batch and the socket. Recorded when the batch
    /// was written, i.e. slightly after the other phases.
    pub send: f64,
}

impl TargetPhases {
    /// The means of the phase sums `sums_us` (microseconds, in [`PHASE_NAMES`] order)
    /// over `commands`; `None` when no command completed.
    pub fn from_sums(commands: u64, sums_us: [u64; 4]) -> Option<TargetPhases> {
        if commands == 0 {
            return None;
        }
        let [receive, qos, storage, send] = sums_us.map(|sum| sum as f64 / commands as f64);
        Some(TargetPhases { commands, receive, qos, storage, send })
    }

    /// The means in [`PHASE_NAMES`] order.
    pub fn means(&self) -> [f64; 4] {
        [self.receive, self.qos, self.storage, self.send]
    }

    /// The sum of the means: the target's mean time per command, receipt to response sent.
    pub fn total(&self) -> f64 {
        self.means().iter().sum()
    }

    /// "receive 12.3 / QoS 0.0 / storage 0.4 / send 8.1 us per command" (the table's line).
    pub fn summary(&self) -> String {
        let parts: Vec<String> =
            PHASE_NAMES.iter().zip(self.means()).map(|(name, mean)| format!("{name} {}", short(mean))).collect();
        format!("{} us per command", parts.join(" / "))
    }

    /// What is wrong with it, each problem prefixed with `path`: a mean that is not a
    /// finite non-negative number, or no commands (a run without any has no split).
    pub fn problems(&self, path: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if self.commands == 0 {
            problems.push(format!("{path}.commands: is 0 (a run without commands has no split: null)"));
        }
        for (name, mean) in ["receive", "qos", "storage", "send"].iter().zip(self.means()) {
            if !mean.is_finite() || mean < 0.0 {
                problems.push(format!("{path}.{name}: {mean} is not a finite non-negative number"));
            }
        }
        problems
    }
}

/// A mean in microseconds, to 3 significant digits or 0.1 µs: "0.04", "8.1", "12.3", "451".
pub fn short(us: f64) -> String {
    if !us.is_finite() {
        "-".into()
    } else if us >= 100.0 {
        format!("{us:.0}")
    } else if us >= 1.0 || us == 0.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_are_the_sums_over_the_commands() {
        let phases = TargetPhases::from_sums(4, [50, 0, 2, 30]).unwrap();
        assert_eq!(phases, TargetPhases { commands: 4, receive: 12.5, qos: 0.0, storage: 0.5, send: 7.5 });
        assert_eq!(phases.total(), 20.5);
        assert_eq!(phases.summary(), "receive 12.5 / QoS 0.0 / storage 0.50 / send 7.5 us per command");
        assert!(phases.problems("runs[0].target_phases_us").is_empty());
        assert_eq!(TargetPhases::from_sums(0, [1, 2, 3, 4]), None);
    }

    #[test]
    fn problems_name_the_field() {
        let phases = TargetPhases { commands: 0, receive: -1.0, qos: f64::NAN, storage: 0.0, send: 1.0 };
        let problems = phases.problems("runs[3].target_phases_us");
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].starts_with("runs[3].target_phases_us.commands: is 0"));
        assert!(problems[1].starts_with("runs[3].target_phases_us.receive: -1"));
        assert!(problems[2].starts_with("runs[3].target_phases_us.qos: NaN"));
    }
}

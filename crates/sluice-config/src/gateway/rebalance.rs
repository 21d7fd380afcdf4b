//! `[gateway.rebalance]`: whether and how a gateway group moves ANA groups between its
//! members to even out their load (see sluice-gateway's `placement` module). Part of
//! the group's configuration: with `[gateway] config = "cluster"` it is one copy in
//! the cluster, so every member balances by the same rules.

use serde::Deserialize;

use crate::{invalid, ConfigError};

/// Default pause between two balancing passes. Ceph's gateway balances every 7 s; a
/// pass here also waits for the loads measured after the previous pass's moves, so a
/// shorter interval would not move faster.
pub const DEFAULT_REBALANCE_INTERVAL_MS: u64 = 10_000;
/// Shortest interval accepted: a pass reads every member's load record and may write
/// the placement record (cluster round trips), and must see a load window after the
/// previous pass's moves.
pub const MIN_REBALANCE_INTERVAL_MS: u64 = 1_000;
/// Default spread allowed before a pass moves anything: the busiest and the idlest
/// member may differ by this share of the mean load.
pub const DEFAULT_REBALANCE_THRESHOLD_PERCENT: u32 = 25;
/// Default moves per pass: Ceph's gateway moves at most 8 namespaces per pass.
pub const DEFAULT_REBALANCE_MAX_MOVES: u32 = 8;
/// Most moves one pass may make: each move is a hand-over (an ANA change on every
/// controller of the group's namespaces), and the group has at most 64 ANA groups.
pub const MAX_REBALANCE_MOVES: u32 = 64;
/// Default window over which each gateway measures and publishes its ANA groups'
/// load.
pub const DEFAULT_LOAD_WINDOW_MS: u64 = 5_000;
/// Shortest load window: a shorter one measures bursts rather than load, and each
/// window is one write to the cluster per gateway.
pub const MIN_LOAD_WINDOW_MS: u64 = 1_000;

/// How a group balances.
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RebalanceMode {
    /// Ownership moves only on failure, stop, failback, drain and undrain.
    #[default]
    Off,
    /// Even out the number of ANA groups each member owns (Ceph's way).
    Count,
    /// Even out the measured load (commands and bytes per second) each member serves.
    Load,
}

impl RebalanceMode {
    pub const fn name(self) -> &'static str {
        match self {
            RebalanceMode::Off => "off",
            RebalanceMode::Count => "count",
            RebalanceMode::Load => "load",
        }
    }
}

/// `[gateway.rebalance]` as written.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RebalanceSection {
    #[serde(default)]
    pub mode: Option<RebalanceMode>,
    #[serde(default)]
    pub interval_ms: Option<u64>,
    #[serde(default)]
    pub threshold_percent: Option<u32>,
    #[serde(default)]
    pub max_moves: Option<u32>,
    #[serde(default)]
    pub load_window_ms: Option<u64>,
}

/// The checked `[gateway.rebalance]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebalancePlan {
    pub mode: RebalanceMode,
    /// Pause between two passes of the member holding the rebalance lease.
    pub interval_ms: u64,
    /// Spread (busiest minus idlest member) tolerated, in percent of the mean load.
    pub threshold_percent: u32,
    /// Moves one pass may make.
    pub max_moves: u32,
    /// Window of each published load measurement.
    pub load_window_ms: u64,
}

impl Default for RebalancePlan {
    fn default() -> Self {
        RebalancePlan {
            mode: RebalanceMode::Off,
            interval_ms: DEFAULT_REBALANCE_INTERVAL_MS,
            threshold_percent: DEFAULT_REBALANCE_THRESHOLD_PERCENT,
            max_moves: DEFAULT_REBALANCE_MAX_MOVES,
            load_window_ms: DEFAULT_LOAD_WINDOW_MS,
        }
    }
}

impl RebalanceSection {
    pub fn plan(&self) -> Result<RebalancePlan, ConfigError> {
        let location = "[gateway.rebalance]";
        let defaults = RebalancePlan::default();
        let plan = RebalancePlan {
            mode: self.mode.unwrap_or(defaults.mode),
            interval_ms: self.interval_ms.unwrap_or(defaults.interval_ms),
            threshold_percent: self.threshold_percent.unwrap_or(defaults.threshold_percent),
            max_moves: self.max_moves.unwrap_or(defaults.max_moves),
            load_window_ms: self.load_window_ms.unwrap_or(defaults.load_window_ms),
        };
        if plan.interval_ms < MIN_REBALANCE_INTERVAL_MS {
            return Err(invalid(
                format!("{location}.interval_ms"),
                format!("{} is below the minimum {MIN_REBALANCE_INTERVAL_MS}", plan.interval_ms),
            ));
        }
        if plan.load_window_ms < MIN_LOAD_WINDOW_MS || plan.load_window_ms > plan.interval_ms {
            return Err(invalid(
                format!("{location}.load_window_ms"),
                format!(
                    "{} must be {MIN_LOAD_WINDOW_MS}..={} (at most interval_ms: a pass needs a whole window measured \
                     after the previous pass's moves)",
                    plan.load_window_ms, plan.interval_ms
                ),
            ));
        }
        if plan.max_moves == 0 || plan.max_moves > MAX_REBALANCE_MOVES {
            return Err(invalid(
                format!("{location}.max_moves"),
                format!("{} must be 1..={MAX_REBALANCE_MOVES}", plan.max_moves),
            ));
        }
        if plan.threshold_percent == 0 || plan.threshold_percent > 200 {
            return Err(invalid(
                format!("{location}.threshold_percent"),
                format!(
                    "{} must be 1..=200 (the spread between the busiest and the idlest member, in percent of the \
                     mean load)",
                    plan.threshold_percent
                ),
            ));
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_and_limits_are_named_in_the_errors() {
        let plan = RebalanceSection::default().plan().unwrap();
        assert_eq!(plan, RebalancePlan::default());
        assert_eq!(plan.mode, RebalanceMode::Off);
        let section: RebalanceSection = toml::from_str("mode = \"load\"\ninterval_ms = 500").unwrap();
        let error = section.plan().unwrap_err().to_string();
        assert!(error.contains("interval_ms") && error.contains("minimum 1000"), "{error}");
        let section: RebalanceSection = toml::from_str("load_window_ms = 20000").unwrap();
        assert!(section.plan().unwrap_err().to_string().contains("at most interval_ms"));
        let section: RebalanceSection = toml::from_str("max_moves = 0").unwrap();
        assert!(section.plan().unwrap_err().to_string().contains("1..=64"));
        let section: RebalanceSection = toml::from_str("mode = \"count\"\nmax_moves = 2").unwrap();
        assert_eq!(section.plan().unwrap().mode, RebalanceMode::Count);
        assert!(toml::from_str::<RebalanceSection>("mode = \"sometimes\"").is_err());
    }
}

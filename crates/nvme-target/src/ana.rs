//! Asymmetric Namespace Access as this target reports it: the state of each ANA group
//! on this target's paths, the change counters of the ANA log (0Ch), and the status a
//! command gets on a path where its namespace's group serves no I/O.
//!
//! Every listener of one `sluice serve` process is one gateway, so the states belong to
//! the target, not to a port: all its controllers report the same state for a group.
//! A target that is no gateway reports every group optimized (as the Linux target
//! does), so hosts always see the same ANA-capable controller. The I/O path reads one
//! atomic per command; states change rarely (takeover, failback, cluster loss), from
//! the gateway coordinator's thread.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use nvme_spec::ana::{AnaGroupId, AnaState};
use nvme_spec::Status;

use crate::limits::MAX_ANA_GROUP_ID;

/// The group namespaces join when nothing else is configured.
pub const DEFAULT_ANA_GROUP: AnaGroupId = AnaGroupId(1);

/// ANA states and change counters of groups 1..=MAX_ANA_GROUP_ID.
#[derive(Debug)]
pub struct AnaStates {
    /// ANAS by ANAGRPID - 1.
    states: Vec<AtomicU8>,
    /// CHGCNT of each group's descriptor, by ANAGRPID - 1.
    group_change_counts: Vec<AtomicU64>,
    /// CHGCNT of the log header: bumped by every change of any group.
    change_count: AtomicU64,
}

impl Default for AnaStates {
    fn default() -> Self {
        let groups = MAX_ANA_GROUP_ID as usize;
        AnaStates {
            states: (0..groups).map(|_| AtomicU8::new(AnaState::Optimized as u8)).collect(),
            group_change_counts: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            change_count: AtomicU64::new(0),
        }
    }
}

/// True for an ANAGRPID this target can report (1..=ANAGRPMAX).
pub fn valid_group(group: AnaGroupId) -> bool {
    (1..=MAX_ANA_GROUP_ID).contains(&group.0)
}

impl AnaStates {
    /// The state of `group` on this target's paths (Inaccessible for an id out of range,
    /// which configuration checks never let through).
    pub fn state(&self, group: AnaGroupId) -> AnaState {
        let Some(state) = group.0.checked_sub(1).and_then(|index| self.states.get(index as usize)) else {
            return AnaState::Inaccessible;
        };
        AnaState::from_u8(state.load(Ordering::Acquire)).unwrap_or(AnaState::Inaccessible)
    }

    /// Sets the state of `group`; returns true when it changed (the counters moved).
    /// Callers tell the controllers (`Target::set_ana_state` does).
    pub(crate) fn set(&self, group: AnaGroupId, state: AnaState) -> bool {
        let Some(index) = group.0.checked_sub(1).map(|index| index as usize) else {
            return false;
        };
        // Both vectors have one entry per group.
        let (Some(current), Some(group_change_count)) = (self.states.get(index), self.group_change_counts.get(index))
        else {
            return false;
        };
        let previous = current.swap(state as u8, Ordering::AcqRel);
        if previous == state as u8 {
            return false;
        }
        group_change_count.fetch_add(1, Ordering::AcqRel);
        self.change_count.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// CHGCNT of the log header.
    pub fn change_count(&self) -> u64 {
        self.change_count.load(Ordering::Acquire)
    }

    /// CHGCNT of `group`'s descriptor.
    pub fn group_change_count(&self, group: AnaGroupId) -> u64 {
        group
            .0
            .checked_sub(1)
            .and_then(|index| self.group_change_counts.get(index as usize))
            .map_or(0, |count| count.load(Ordering::Acquire))
    }

    /// `Ok` when a command touching user data of a namespace in `group` is processed
    /// on this path; otherwise the path related status the spec names for the state
    /// (never with DNR: the host is meant to retry on another path).
    pub fn check_io(&self, group: AnaGroupId) -> Result<(), Status> {
        match self.state(group) {
            AnaState::Optimized | AnaState::NonOptimized => Ok(()),
            AnaState::Inaccessible => Err(Status::ASYMMETRIC_ACCESS_INACCESSIBLE),
            AnaState::PersistentLoss => Err(Status::ASYMMETRIC_ACCESS_PERSISTENT_LOSS),
            AnaState::Change => Err(Status::ASYMMETRIC_ACCESS_TRANSITION),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_start_optimized_and_changes_move_the_counters() {
        let states = AnaStates::default();
        assert_eq!(states.state(AnaGroupId(1)), AnaState::Optimized);
        assert_eq!(states.check_io(AnaGroupId(1)), Ok(()));
        assert!(states.set(AnaGroupId(2), AnaState::Inaccessible));
        assert!(!states.set(AnaGroupId(2), AnaState::Inaccessible), "no change, no count");
        assert_eq!(states.change_count(), 1);
        assert_eq!(states.group_change_count(AnaGroupId(2)), 1);
        assert_eq!(states.group_change_count(AnaGroupId(1)), 0);
        assert_eq!(states.check_io(AnaGroupId(2)), Err(Status::ASYMMETRIC_ACCESS_INACCESSIBLE));
        states.set(AnaGroupId(2), AnaState::Change);
        assert_eq!(states.check_io(AnaGroupId(2)), Err(Status::ASYMMETRIC_ACCESS_TRANSITION));
        assert!(!states.check_io(AnaGroupId(2)).unwrap_err().do_not_retry(), "path errors are retried elsewhere");
        states.set(AnaGroupId(2), AnaState::NonOptimized);
        assert_eq!(states.check_io(AnaGroupId(2)), Ok(()));
        assert_eq!(states.change_count(), 3);
    }

    #[test]
    fn ids_out_of_range_are_neither_stored_nor_served() {
        let states = AnaStates::default();
        assert!(!states.set(AnaGroupId(0), AnaState::NonOptimized));
        assert!(!states.set(AnaGroupId(MAX_ANA_GROUP_ID + 1), AnaState::NonOptimized));
        assert_eq!(states.state(AnaGroupId(0)), AnaState::Inaccessible);
        assert_eq!(states.state(AnaGroupId(MAX_ANA_GROUP_ID)), AnaState::Optimized);
        assert!(valid_group(AnaGroupId(MAX_ANA_GROUP_ID)) && !valid_group(AnaGroupId(0)));
    }
}

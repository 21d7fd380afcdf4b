//! When the hosts of one controller learned of an ANA change, and when their first
//! command for the changed group arrived: the per-controller half of a gateway's path
//! change timeline (the gateway keeps the other half: when the move was decided, the
//! fence, the state change).
//!
//! The I/O path pays two relaxed loads of one cache line per command
//! ([`PathWatch::note_command`]): a bit per ANA group is set when the group becomes
//! optimized here and cleared by the first command for it, which alone takes the lock
//! to record its time; another bit per group says the controller ever sent a command
//! for it (so a timeline waits only for the controllers that use the group).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use nvme_spec::ana::AnaGroupId;

use crate::limits::MAX_ANA_GROUP_ID;

// One bit per ANA group in `awaiting_first_command`.
const _: () = assert!(MAX_ANA_GROUP_ID <= 64);

/// What one controller saw of the latest ANA changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathEvents {
    /// The latest Asymmetric Namespace Access Change event handed to the host (an
    /// Asynchronous Event Request completed).
    pub ana_notice_sent: Option<Instant>,
    /// The latest read of the ANA log (0Ch).
    pub ana_log_read: Option<Instant>,
    /// Per ANA group: when it last became optimized here, and the first command for
    /// one of its namespaces after that (none yet).
    pub groups: Vec<(AnaGroupId, Instant, Option<Instant>)>,
    /// Bit `g - 1`: the controller sent a command for group `g` at least once.
    pub groups_used: u64,
}

impl PathEvents {
    /// The controller sent a command for `group` at least once.
    pub fn used(&self, group: AnaGroupId) -> bool {
        self.groups_used & bit(group) != 0
    }
}

#[derive(Debug, Default)]
pub struct PathWatch {
    /// Bit `g - 1`: group `g` became optimized here and no command for it came since.
    awaiting_first_command: AtomicU64,
    /// Bit `g - 1`: a command for group `g` came at least once.
    groups_used: AtomicU64,
    events: Mutex<PathEvents>,
}

fn bit(group: AnaGroupId) -> u64 {
    group.0.checked_sub(1).filter(|index| *index < 64).map_or(0, |index| 1u64 << index)
}

impl PathWatch {
    fn events(&self) -> std::sync::MutexGuard<'_, PathEvents> {
        self.events.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// `group` became optimized here at `at`: its next command is recorded.
    pub fn group_optimized(&self, group: AnaGroupId, at: Instant) {
        let mut events = self.events();
        events.groups.retain(|(known, _, _)| *known != group);
        events.groups.push((group, at, None));
        self.awaiting_first_command.fetch_or(bit(group), Ordering::AcqRel);
    }

    /// A command for a namespace of `group` arrived (the I/O path).
    #[inline]
    pub fn note_command(&self, group: AnaGroupId) {
        let bit = bit(group);
        if self.groups_used.load(Ordering::Relaxed) & bit == 0 {
            self.groups_used.fetch_or(bit, Ordering::Relaxed);
        }
        if self.awaiting_first_command.load(Ordering::Relaxed) & bit != 0 {
            self.first_command(group, bit);
        }
    }

    #[cold]
    fn first_command(&self, group: AnaGroupId, bit: u64) {
        if self.awaiting_first_command.fetch_and(!bit, Ordering::AcqRel) & bit == 0 {
            return; // another queue of the controller was first
        }
        let now = Instant::now();
        let mut events = self.events();
        if let Some(entry) = events.groups.iter_mut().find(|(known, _, _)| *known == group) {
            entry.2.get_or_insert(now);
        }
    }

    /// An ANA change event went to the host.
    pub fn notice_sent(&self) {
        self.events().ana_notice_sent = Some(Instant::now());
    }

    /// The host read the ANA log.
    pub fn log_read(&self) {
        self.events().ana_log_read = Some(Instant::now());
    }

    pub fn snapshot(&self) -> PathEvents {
        let mut events = self.events().clone();
        events.groups_used = self.groups_used.load(Ordering::Relaxed);
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_command_after_the_change_is_recorded() {
        let watch = PathWatch::default();
        watch.note_command(AnaGroupId(3));
        assert!(watch.snapshot().groups.is_empty(), "no change yet: nothing recorded");
        let changed = Instant::now();
        watch.group_optimized(AnaGroupId(3), changed);
        watch.note_command(AnaGroupId(2));
        assert_eq!(watch.snapshot().groups[0].2, None, "another group's command does not count");
        watch.note_command(AnaGroupId(3));
        let first = watch.snapshot().groups[0].2.unwrap();
        assert!(first >= changed);
        watch.note_command(AnaGroupId(3));
        assert_eq!(watch.snapshot().groups[0].2, Some(first), "later commands leave it");
        watch.group_optimized(AnaGroupId(3), Instant::now());
        assert_eq!(watch.snapshot().groups.len(), 1);
        assert_eq!(watch.snapshot().groups[0].2, None, "a new change waits for a new first command");
        watch.group_optimized(AnaGroupId(64), Instant::now());
        watch.note_command(AnaGroupId(64));
        assert!(watch.snapshot().groups.iter().any(|(group, _, first)| group.0 == 64 && first.is_some()));
        watch.note_command(AnaGroupId(0)); // out of range: ignored
        let events = watch.snapshot();
        assert!(events.used(AnaGroupId(3)) && events.used(AnaGroupId(2)) && !events.used(AnaGroupId(1)));
    }
}

//! The bound in time of a gateway's copies of its group's reservations.

use std::sync::Mutex;
use std::time::Instant;

/// How long the group vouches for this gateway's copies: until the deadline a
/// gateway's authority last set from a round trip to the cluster it made (a fenced
/// gateway's round trips fail, so its deadline passes). A copy no longer vouched for
/// answers nothing from itself (a Reservation Conflict or a Reservation Report): a
/// path error instead, so the host asks another gateway. Reads and writes it allows
/// go to storage, which a fenced gateway can no longer reach; a refusal or a report
/// is the copy's own answer, so it is what the deadline guards. Read only on those
/// paths, never on a command the copy allows.
#[derive(Debug, Default)]
pub struct CopyVouch {
    until: Mutex<Option<Instant>>,
}

impl CopyVouch {
    /// The copies are vouched for until `until` (never moved back).
    pub fn extend_to(&self, until: Instant) {
        let mut current = self.until.lock().unwrap_or_else(|poison| poison.into_inner());
        if current.is_none_or(|current| current < until) {
            *current = Some(until);
        }
    }

    /// The deadline (`None` before the first round trip succeeded).
    pub fn until(&self) -> Option<Instant> {
        *self.until.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// True while the copies may answer from themselves at `now`.
    pub fn covers(&self, now: Instant) -> bool {
        self.until.lock().unwrap_or_else(|poison| poison.into_inner()).is_some_and(|until| now < until)
    }
}

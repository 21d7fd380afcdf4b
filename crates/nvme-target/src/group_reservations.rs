//! Reservations held by a gateway group rather than by this process.
//!
//! When several targets (the gateways of a group) export one namespace, its
//! registrations and reservation must be one state, or a host fenced through one path
//! could still write through another. The application gives the target a
//! [`GroupReservations`] authority (`sluice serve` keeps one RADOS object per
//! namespace): a reservation command is then not applied here but handed to the
//! authority as a [`ReservationChange`]; the authority applies it to the
//! authoritative state atomically (the same pure rules, `ReservationChange::apply`),
//! publishes the new state to every gateway and answers. The command completes only
//! then.
//!
//! Each gateway keeps a copy in the namespace (`Reservations`) for the I/O path,
//! which never waits for the cluster. Copies are ordered by the group's
//! [`GroupUpdate::sequence`]: an update older than the copy is ignored, and one that
//! skips sequences brings the notices of the skipped changes with it (the record
//! keeps the recent ones). While the authority cannot vouch for the copy (a lost
//! watch, a namespace not loaded yet) the namespace is marked unknown and commands
//! that the reservation could refuse get a path error, so the host retries on
//! another path rather than being served from stale state.

use std::sync::Arc;

use nvme_spec::Status;

pub use crate::copy_vouch::CopyVouch;

use crate::reservation_store::NamespaceKey;
use crate::reservations::{
    AcquireAction, Effects, HostId, Notice, RegisterAction, ReleaseAction, ReservationState, ReservationType,
};

/// Most notices a group record keeps for gateways that missed an update.
pub const MAX_KEPT_NOTICES: usize = 64;

/// One reservation command, as every gateway of the group applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReservationChange {
    /// Reservation Register; `persist` is CPTPL (None: no change).
    Register {
        host: HostId,
        action: RegisterAction,
        current_key: u64,
        new_key: u64,
        ignore_key: bool,
        persist: Option<bool>,
    },
    /// Reservation Acquire.
    Acquire {
        host: HostId,
        action: AcquireAction,
        kind: ReservationType,
        current_key: u64,
        preempt_key: u64,
        ignore_key: bool,
    },
    /// Reservation Release; `kind` is RTYPE as sent (checked against the holder's).
    Release { host: HostId, action: ReleaseAction, kind: u8, current_key: u64, ignore_key: bool },
    /// Set Features 83h (Reservation Persistence).
    SetPersistence { persist: bool },
}

impl ReservationChange {
    /// Applies the change to `state` by the specification's rules: the effects on
    /// other hosts, or the status refusing it (then `state` is unchanged).
    pub fn apply(&self, state: &mut ReservationState) -> Result<Effects, Status> {
        match *self {
            ReservationChange::Register { host, action, current_key, new_key, ignore_key, persist } => {
                let effects = state.register(&host, action, current_key, new_key, ignore_key)?;
                // A failed Register leaves PTPL as it was.
                if let Some(persist) = persist {
                    state.persist_through_power_loss = persist;
                }
                Ok(effects)
            }
            ReservationChange::Acquire { host, action, kind, current_key, preempt_key, ignore_key } => {
                state.acquire(&host, action, kind, current_key, preempt_key, ignore_key)
            }
            ReservationChange::Release { host, action, kind, current_key, ignore_key } => {
                state.release(&host, action, kind, current_key, ignore_key)
            }
            ReservationChange::SetPersistence { persist } => {
                state.persist_through_power_loss = persist;
                Ok(Effects::default())
            }
        }
    }
}

/// The group's state of one namespace after a change, with the notices of recent
/// changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupUpdate {
    /// Bumped by every change the group accepted; orders copies on every gateway.
    pub sequence: u64,
    pub state: ReservationState,
    /// (sequence of the change that caused it, host, notice), oldest first, at most
    /// [`MAX_KEPT_NOTICES`].
    pub notices: Vec<(u64, HostId, Notice)>,
}

/// The group's answer to one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedChange {
    /// The command's status (success, or what the rules refused it with).
    pub status: Status,
    /// The state the group holds now (also when the change was refused or changed
    /// nothing: it is at least as new as the copy the command saw).
    pub update: GroupUpdate,
}

/// The completion of one change, finished by the authority from any thread. `Err`:
/// the group could not be reached or did not confirm (the text says why).
pub type ChangeTicket = storage::service::Ticket<Result<AppliedChange, String>>;

/// Where a gateway group keeps its reservations.
pub trait GroupReservations: Send + Sync {
    /// The bound of this gateway's copies ([`CopyVouch`]); `None`: the copies are
    /// vouched for as long as they are known (an authority that marks a fenced
    /// gateway's copies unknown at once).
    fn copy_vouch(&self) -> Option<Arc<CopyVouch>> {
        None
    }

    /// Starts following the namespace: load its state, learn of changes, and hand
    /// every newer state to `Target::install_group_reservations`. Until the first
    /// state arrives the namespace is marked unknown.
    fn track(&self, key: NamespaceKey);

    /// Applies `change` to the namespace's group state (atomically against every
    /// other gateway, durably), publishes it to the other gateways, then finishes
    /// `done`.
    fn apply(&self, key: NamespaceKey, change: ReservationChange, done: ChangeTicket);
}

/// Shared handle the target keeps.
pub type SharedGroupReservations = std::sync::Arc<dyn GroupReservations>;

/// The status of a group reservation command whose authority failed: a path error,
/// so the host retries on another gateway.
pub(crate) fn unreachable_status(error: &str) -> Status {
    tracing::warn!(%error, "reservation change not confirmed by the gateway group: answered with a path error");
    Status::INTERNAL_PATH_ERROR
}

/// The notices of `update` the copy at `applied_sequence` has not delivered yet.
pub(crate) fn new_notices(update: &GroupUpdate, applied_sequence: u64) -> Vec<(HostId, Notice)> {
    update
        .notices
        .iter()
        .filter(|(sequence, _, _)| *sequence > applied_sequence)
        .map(|(_, host, notice)| (*host, *notice))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: HostId = [0xA; 16];

    #[test]
    fn a_refused_register_leaves_persistence_unchanged() {
        let mut state = ReservationState::default();
        let register = |key, persist| ReservationChange::Register {
            host: A,
            action: RegisterAction::Register,
            current_key: 0,
            new_key: key,
            ignore_key: false,
            persist,
        };
        register(1, Some(true)).apply(&mut state).unwrap();
        assert!(state.persist_through_power_loss);
        assert_eq!(register(2, Some(false)).apply(&mut state), Err(Status::RESERVATION_CONFLICT));
        assert!(state.persist_through_power_loss, "the refused change must not clear PTPL");
    }

    #[test]
    fn only_notices_newer_than_the_copy_are_delivered() {
        let update = GroupUpdate {
            sequence: 7,
            state: ReservationState::default(),
            notices: vec![
                (5, A, Notice::ReservationReleased),
                (6, A, Notice::RegistrationPreempted),
                (7, A, Notice::ReservationPreempted),
            ],
        };
        assert_eq!(new_notices(&update, 5), [(A, Notice::RegistrationPreempted), (A, Notice::ReservationPreempted)]);
        assert!(new_notices(&update, 7).is_empty());
    }
}

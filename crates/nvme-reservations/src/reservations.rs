//! Persistent reservations of one namespace (NVMe Base 2.0, "Reservations"): who is
//! registered with which key, who holds which type of reservation, the generation
//! counter, and who may read or write. Pure state and rules; the commands that drive
//! them are in `reservation_commands.rs`.
//!
//! Registrations belong to hosts (their Host Identifier), not to controllers: every
//! controller of a registered host shares its registration. The state lives in the
//! namespace, so it holds across all controllers of the subsystem. The I/O path pays
//! one atomic load while no reservation is held.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::copy_vouch::CopyVouch;

use nvme_spec::Status;

/// HOSTID: the 128-bit Host Identifier from Connect.
pub type HostId = [u8; 16];

/// Most registrants of one namespace: bounds what hosts can make the target hold.
/// Clusters register each node (and Windows each path) once; 64 is ample.
pub const MAX_REGISTRANTS: usize = 64;

/// RTYPE: reservation type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReservationType {
    WriteExclusive = 1,
    ExclusiveAccess = 2,
    WriteExclusiveRegistrantsOnly = 3,
    ExclusiveAccessRegistrantsOnly = 4,
    WriteExclusiveAllRegistrants = 5,
    ExclusiveAccessAllRegistrants = 6,
}

impl ReservationType {
    pub fn from_u8(value: u8) -> Option<ReservationType> {
        use ReservationType::*;
        Some(match value {
            1 => WriteExclusive,
            2 => ExclusiveAccess,
            3 => WriteExclusiveRegistrantsOnly,
            4 => ExclusiveAccessRegistrantsOnly,
            5 => WriteExclusiveAllRegistrants,
            6 => ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }

    /// Every registrant is a holder.
    fn all_registrants(self) -> bool {
        matches!(self, ReservationType::WriteExclusiveAllRegistrants | ReservationType::ExclusiveAccessAllRegistrants)
    }

    /// Registrants (not only the holder) have access.
    fn registrants_have_access(self) -> bool {
        !matches!(self, ReservationType::WriteExclusive | ReservationType::ExclusiveAccess)
    }

    /// Reads are restricted too.
    fn exclusive_access(self) -> bool {
        matches!(
            self,
            ReservationType::ExclusiveAccess
                | ReservationType::ExclusiveAccessRegistrantsOnly
                | ReservationType::ExclusiveAccessAllRegistrants
        )
    }
}

/// The Reservation Notification log page types (log 80h, byte 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Notice {
    RegistrationPreempted = 1,
    ReservationReleased = 2,
    ReservationPreempted = 3,
}

/// RREGA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterAction {
    Register,
    Unregister,
    Replace,
}

/// RACQA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireAction {
    Acquire,
    Preempt,
    PreemptAndAbort,
}

/// RRELA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseAction {
    Release,
    Clear,
}

/// What a command did to other hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Notifications for the Reservation Notification log of these hosts' controllers.
    pub notices: Vec<(HostId, Notice)>,
    /// Hosts whose registration a Preempt and Abort removed (their commands to the
    /// namespace are aborted).
    pub preempted: Vec<HostId>,
}

/// A registrant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registrant {
    pub host: HostId,
    /// RKEY.
    pub key: u64,
}

/// The reservation held, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub kind: ReservationType,
    /// The holding host; `None` for the all-registrants types (every registrant holds).
    pub host: Option<HostId>,
}

/// Registrations and reservation of one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReservationState {
    /// PRGEN: bumped by every registration change and preemption.
    pub generation: u32,
    pub registrants: Vec<Registrant>,
    pub holder: Option<Holder>,
    /// PTPL: the state survives a restart of the target.
    pub persist_through_power_loss: bool,
}

fn conflict() -> Status {
    Status::RESERVATION_CONFLICT
}

fn invalid() -> Status {
    Status::INVALID_FIELD.with_do_not_retry()
}

impl ReservationState {
    fn key_of(&self, host: &HostId) -> Option<u64> {
        self.registrants.iter().find(|registrant| registrant.host == *host).map(|registrant| registrant.key)
    }

    /// The host is registered and showed its key (or asked to ignore it).
    fn authorize(&self, host: &HostId, current_key: u64, ignore_key: bool) -> Result<(), Status> {
        match self.key_of(host) {
            Some(key) if key == current_key || ignore_key => Ok(()),
            _ => Err(conflict()),
        }
    }

    /// True when `host` holds the reservation.
    pub fn holds(&self, host: &HostId) -> bool {
        match self.holder {
            Some(Holder { host: Some(holder), .. }) => holder == *host,
            Some(Holder { host: None, .. }) => self.key_of(host).is_some(),
            None => false,
        }
    }

    /// True when `host` may run a command of the read group (`write` false: Read,
    /// Compare, Verify) or the write group (Write, Write Zeroes, Dataset Management,
    /// Flush) on the namespace.
    pub fn allows(&self, host: &HostId, write: bool) -> bool {
        let Some(holder) = self.holder else { return true };
        if !write && !holder.kind.exclusive_access() {
            return true;
        }
        if holder.kind.registrants_have_access() {
            self.key_of(host).is_some()
        } else {
            self.holds(host)
        }
    }

    /// Other registrants, for notifications.
    fn others(&self, host: &HostId) -> impl Iterator<Item = HostId> + '_ {
        let host = *host;
        self.registrants.iter().map(|registrant| registrant.host).filter(move |other| *other != host)
    }

    /// Reservation Register.
    pub fn register(
        &mut self,
        host: &HostId,
        action: RegisterAction,
        current_key: u64,
        new_key: u64,
        ignore_key: bool,
    ) -> Result<Effects, Status> {
        let mut effects = Effects::default();
        match action {
            RegisterAction::Register => match self.key_of(host) {
                Some(key) if key == new_key => {}
                Some(_) => return Err(conflict()),
                None => {
                    if self.registrants.len() >= MAX_REGISTRANTS {
                        return Err(Status::CAPACITY_EXCEEDED.with_do_not_retry());
                    }
                    self.registrants.push(Registrant { host: *host, key: new_key });
                    self.generation = self.generation.wrapping_add(1);
                }
            },
            RegisterAction::Unregister => {
                self.authorize(host, current_key, ignore_key)?;
                let held = self.holds(host);
                self.registrants.retain(|registrant| registrant.host != *host);
                self.generation = self.generation.wrapping_add(1);
                if let Some(holder) = self.holder {
                    if holder.kind.all_registrants() {
                        if self.registrants.is_empty() {
                            self.holder = None;
                        }
                    } else if held {
                        self.holder = None;
                        if holder.kind.registrants_have_access() {
                            effects.notices.extend(self.others(host).map(|other| (other, Notice::ReservationReleased)));
                        }
                    }
                }
            }
            RegisterAction::Replace => {
                self.authorize(host, current_key, ignore_key)?;
                if let Some(registrant) = self.registrants.iter_mut().find(|registrant| registrant.host == *host) {
                    registrant.key = new_key;
                }
                self.generation = self.generation.wrapping_add(1);
            }
        }
        Ok(effects)
    }

    /// Reservation Acquire.
    pub fn acquire(
        &mut self,
        host: &HostId,
        action: AcquireAction,
        kind: ReservationType,
        current_key: u64,
        preempt_key: u64,
        ignore_key: bool,
    ) -> Result<Effects, Status> {
        self.authorize(host, current_key, ignore_key)?;
        let new_holder = Holder { kind, host: (!kind.all_registrants()).then_some(*host) };
        if action == AcquireAction::Acquire {
            return match self.holder {
                None => {
                    self.holder = Some(new_holder);
                    Ok(Effects::default())
                }
                Some(holder) if holder.kind == kind && self.holds(host) => Ok(Effects::default()),
                Some(_) => Err(conflict()),
            };
        }
        let mut effects = Effects::default();
        let holder_key = match self.holder {
            Some(Holder { host: Some(holder), .. }) => self.key_of(&holder),
            _ => None,
        };
        match self.holder {
            // An all-registrants reservation with PRKEY 0: every other registrant goes,
            // and the reservation is replaced.
            Some(holder) if holder.kind.all_registrants() && preempt_key == 0 => {
                let removed: Vec<HostId> = self.others(host).collect();
                self.registrants.retain(|registrant| registrant.host == *host);
                self.holder = Some(new_holder);
                self.note_removed(&removed, &mut effects);
            }
            // The holder's key: the preempting host takes the reservation and the
            // holder's registrations (all with that key) go.
            Some(_) if holder_key == Some(preempt_key) => {
                let removed = self.remove_key(host, preempt_key);
                let previous = self.holder;
                self.holder = Some(new_holder);
                if previous.is_some_and(|previous| previous.kind != kind || previous.host != new_holder.host) {
                    effects.notices.extend(
                        self.others(host)
                            .filter(|other| !removed.contains(other))
                            .map(|other| (other, Notice::ReservationPreempted))
                            .collect::<Vec<_>>(),
                    );
                }
                self.note_removed(&removed, &mut effects);
            }
            // Otherwise only registrations with the key go; PRKEY 0 names none.
            _ => {
                if preempt_key == 0 {
                    return Err(invalid());
                }
                let removed = self.remove_key(host, preempt_key);
                if removed.is_empty() {
                    return Err(conflict());
                }
                self.note_removed(&removed, &mut effects);
            }
        }
        self.generation = self.generation.wrapping_add(1);
        if action == AcquireAction::PreemptAndAbort {
            effects.preempted = effects
                .notices
                .iter()
                .filter(|(_, notice)| *notice == Notice::RegistrationPreempted)
                .map(|(host, _)| *host)
                .collect();
        }
        Ok(effects)
    }

    /// Removes the other hosts registered with `key`; returns them.
    fn remove_key(&mut self, host: &HostId, key: u64) -> Vec<HostId> {
        let removed: Vec<HostId> = self
            .registrants
            .iter()
            .filter(|registrant| registrant.key == key && registrant.host != *host)
            .map(|registrant| registrant.host)
            .collect();
        self.registrants.retain(|registrant| !removed.contains(&registrant.host));
        removed
    }

    fn note_removed(&self, removed: &[HostId], effects: &mut Effects) {
        effects.notices.extend(removed.iter().map(|host| (*host, Notice::RegistrationPreempted)));
    }

    /// Reservation Release.
    pub fn release(
        &mut self,
        host: &HostId,
        action: ReleaseAction,
        kind: u8,
        current_key: u64,
        ignore_key: bool,
    ) -> Result<Effects, Status> {
        self.authorize(host, current_key, ignore_key)?;
        let mut effects = Effects::default();
        match action {
            ReleaseAction::Release => {
                let Some(holder) = self.holder else { return Ok(effects) };
                if !self.holds(host) {
                    return Ok(effects);
                }
                if holder.kind as u8 != kind {
                    return Err(invalid());
                }
                self.holder = None;
                if holder.kind.registrants_have_access() {
                    effects.notices.extend(self.others(host).map(|other| (other, Notice::ReservationReleased)));
                }
            }
            ReleaseAction::Clear => {
                effects.notices.extend(self.others(host).map(|other| (other, Notice::ReservationPreempted)));
                self.registrants.clear();
                self.holder = None;
                self.generation = self.generation.wrapping_add(1);
            }
        }
        Ok(effects)
    }
}

/// Attention bits of [`Reservations`]: while none is set the I/O path checks nothing.
const HELD: u8 = 1;
/// The copy of a gateway group's state cannot be vouched for (see
/// `group_reservations`).
const UNKNOWN: u8 = 2;

/// The reservation state of a namespace, shared by every controller.
#[derive(Debug, Default)]
pub struct Reservations {
    state: Mutex<ReservationState>,
    /// HELD and UNKNOWN: commands check only when one is set.
    attention: AtomicU8,
    /// On a gateway group: the group sequence of the copy in `state` (written under
    /// its mutex).
    group_sequence: AtomicU64,
    /// On a gateway group whose authority bounds its copies in time: that bound.
    vouch: OnceLock<Arc<CopyVouch>>,
}

impl Reservations {
    /// Locks the state; call `publish` after changing it.
    pub fn lock(&self) -> MutexGuard<'_, ReservationState> {
        self.state.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Makes the I/O path see whether a reservation is held now.
    pub fn publish(&self, state: &ReservationState) {
        if state.holder.is_some() {
            self.attention.fetch_or(HELD, Ordering::SeqCst);
        } else {
            self.attention.fetch_and(!HELD, Ordering::SeqCst);
        }
    }

    /// `Ok` when `host` may run a command of the read or write group; Reservation
    /// Conflict otherwise, or a path error while a group copy is unknown. One atomic
    /// load while no reservation is held (sequentially consistent: Preempt and
    /// Abort's fence relies on it, see `write_fence`; on x86 it is a plain load).
    /// A refusal is the copy's own answer: on a group whose copy is no longer
    /// vouched for at `now` ([`CopyVouch`]) it is a path error instead.
    pub fn check(&self, host: &HostId, write: bool, now: Instant) -> Result<(), Status> {
        let attention = self.attention.load(Ordering::SeqCst);
        if attention == 0 {
            return Ok(());
        }
        if attention & UNKNOWN != 0 {
            return Err(Status::INTERNAL_PATH_ERROR);
        }
        if self.lock().allows(host, write) {
            Ok(())
        } else {
            self.answerable(now)?;
            Err(conflict())
        }
    }

    /// `Ok` when the copy may answer from itself at `now` (a Reservation Report, a
    /// Reservation Conflict): known, and on a bounded group still vouched for;
    /// otherwise a path error, so the host asks another gateway.
    pub fn answerable(&self, now: Instant) -> Result<(), Status> {
        if self.is_unknown() || self.vouch.get().is_some_and(|vouch| !vouch.covers(now)) {
            return Err(Status::INTERNAL_PATH_ERROR);
        }
        Ok(())
    }

    /// Bounds the copy by the group's [`CopyVouch`] (set once, when the namespace
    /// joins a group whose authority has one).
    pub fn bound_by(&self, vouch: Arc<CopyVouch>) {
        let _ = self.vouch.set(vouch);
    }

    /// True while the group copy cannot be vouched for.
    pub fn is_unknown(&self) -> bool {
        self.attention.load(Ordering::Acquire) & UNKNOWN != 0
    }

    /// The group can no longer vouch for the copy (a lost watch, not loaded yet).
    pub fn mark_unknown(&self) {
        self.attention.fetch_or(UNKNOWN, Ordering::AcqRel);
    }

    /// The group sequence of the copy.
    pub fn group_sequence(&self) -> u64 {
        self.group_sequence.load(Ordering::Acquire)
    }

    /// Installs a state a gateway group published as its `sequence`, unless the copy
    /// is newer. Returns the sequence the copy had (`None`: the update was older),
    /// from which the caller tells which notices are new. `vouched`: the group's
    /// watch is in place, so the copy is known again (an answer to this gateway's own
    /// command installs its state but does not vouch for later ones).
    pub fn install(&self, sequence: u64, published: &ReservationState, vouched: bool) -> Option<u64> {
        let mut state = self.lock();
        let applied = self.group_sequence.load(Ordering::Acquire);
        if sequence < applied {
            return None;
        }
        *state = published.clone();
        self.group_sequence.store(sequence, Ordering::Release);
        self.publish(&state);
        if vouched {
            self.attention.fetch_and(!UNKNOWN, Ordering::AcqRel);
        }
        Some(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReservationType::*;

    const A: HostId = [0xA; 16];
    const B: HostId = [0xB; 16];
    const C: HostId = [0xC; 16];

    fn registered(hosts: &[(HostId, u64)]) -> ReservationState {
        let mut state = ReservationState::default();
        for (host, key) in hosts {
            state.register(host, RegisterAction::Register, 0, *key, false).unwrap();
        }
        state
    }

    /// The access table of the specification: (holder, registrant, other) x (read,
    /// write), for each type, A holding and B registered, C not.
    #[test]
    fn each_type_grants_access_as_the_specification_tables_say() {
        let table: [(ReservationType, [bool; 6]); 6] = [
            //                 holder r/w,   registrant r/w, other r/w
            (WriteExclusive, [true, true, true, false, true, false]),
            (ExclusiveAccess, [true, true, false, false, false, false]),
            (WriteExclusiveRegistrantsOnly, [true, true, true, true, true, false]),
            (ExclusiveAccessRegistrantsOnly, [true, true, true, true, false, false]),
            (WriteExclusiveAllRegistrants, [true, true, true, true, true, false]),
            (ExclusiveAccessAllRegistrants, [true, true, true, true, false, false]),
        ];
        for (kind, expected) in table {
            let mut state = registered(&[(A, 1), (B, 2)]);
            state.acquire(&A, AcquireAction::Acquire, kind, 1, 0, false).unwrap();
            let seen = [
                state.allows(&A, false),
                state.allows(&A, true),
                state.allows(&B, false),
                state.allows(&B, true),
                state.allows(&C, false),
                state.allows(&C, true),
            ];
            assert_eq!(seen, expected, "{kind:?}");
        }
        assert!(ReservationState::default().allows(&C, true), "no reservation: no restriction");
    }

    #[test]
    fn keys_must_match_and_registrations_count_generations() {
        let mut state = registered(&[(A, 1)]);
        assert_eq!(state.generation, 1);
        assert!(state.register(&A, RegisterAction::Register, 0, 1, false).is_ok(), "same key again: no change");
        assert_eq!(state.register(&A, RegisterAction::Register, 0, 9, false), Err(Status::RESERVATION_CONFLICT));
        assert_eq!(state.register(&A, RegisterAction::Replace, 7, 5, false), Err(Status::RESERVATION_CONFLICT));
        state.register(&A, RegisterAction::Replace, 1, 5, false).unwrap();
        assert_eq!(state.key_of(&A), Some(5));
        state.register(&A, RegisterAction::Replace, 0, 6, true).unwrap();
        assert_eq!(state.generation, 3);
        assert_eq!(
            state.acquire(&B, AcquireAction::Acquire, WriteExclusive, 0, 0, false),
            Err(Status::RESERVATION_CONFLICT),
            "an unregistered host cannot acquire"
        );
        assert_eq!(
            state.acquire(&A, AcquireAction::Acquire, WriteExclusive, 1, 0, false),
            Err(Status::RESERVATION_CONFLICT)
        );
    }

    #[test]
    fn acquire_is_idempotent_for_the_holder_and_refused_to_others() {
        let mut state = registered(&[(A, 1), (B, 2)]);
        state.acquire(&A, AcquireAction::Acquire, WriteExclusive, 1, 0, false).unwrap();
        assert!(state.acquire(&A, AcquireAction::Acquire, WriteExclusive, 1, 0, false).is_ok());
        assert_eq!(
            state.acquire(&A, AcquireAction::Acquire, ExclusiveAccess, 1, 0, false),
            Err(Status::RESERVATION_CONFLICT)
        );
        assert_eq!(
            state.acquire(&B, AcquireAction::Acquire, WriteExclusive, 2, 0, false),
            Err(Status::RESERVATION_CONFLICT)
        );
    }

    #[test]
    fn release_and_unregister_free_the_reservation_and_notify_registrants_of_shared_types() {
        let mut state = registered(&[(A, 1), (B, 2)]);
        state.acquire(&A, AcquireAction::Acquire, WriteExclusiveRegistrantsOnly, 1, 0, false).unwrap();
        assert_eq!(
            state.release(&A, ReleaseAction::Release, 1, 1, false),
            Err(Status::INVALID_FIELD.with_do_not_retry())
        );
        assert_eq!(
            state.release(&B, ReleaseAction::Release, 3, 2, false),
            Ok(Effects::default()),
            "not the holder: no effect"
        );
        assert!(state.holder.is_some());
        let effects = state.release(&A, ReleaseAction::Release, 3, 1, false).unwrap();
        assert_eq!(effects.notices, [(B, Notice::ReservationReleased)]);
        assert!(state.holder.is_none());

        state.acquire(&B, AcquireAction::Acquire, ExclusiveAccess, 2, 0, false).unwrap();
        let effects = state.register(&B, RegisterAction::Unregister, 2, 0, false).unwrap();
        assert!(state.holder.is_none() && effects.notices.is_empty(), "EA: released silently");
    }

    #[test]
    fn preempt_takes_the_reservation_and_removes_the_holders_registration() {
        let mut state = registered(&[(A, 1), (B, 2), (C, 3)]);
        state.acquire(&A, AcquireAction::Acquire, WriteExclusive, 1, 0, false).unwrap();
        let generation = state.generation;
        let effects = state.acquire(&B, AcquireAction::PreemptAndAbort, ExclusiveAccess, 2, 1, false).unwrap();
        assert_eq!(state.holder, Some(Holder { kind: ExclusiveAccess, host: Some(B) }));
        assert_eq!(state.key_of(&A), None);
        assert!(effects.notices.contains(&(A, Notice::RegistrationPreempted)));
        assert!(effects.notices.contains(&(C, Notice::ReservationPreempted)));
        assert_eq!(effects.preempted, [A]);
        assert_eq!(state.generation, generation + 1);
        // Preempting a key nobody has is a conflict; PRKEY 0 without an
        // all-registrants reservation names nobody.
        assert_eq!(
            state.acquire(&B, AcquireAction::Preempt, ExclusiveAccess, 2, 42, false),
            Err(Status::RESERVATION_CONFLICT)
        );
        assert_eq!(
            state.acquire(&B, AcquireAction::Preempt, ExclusiveAccess, 2, 0, false),
            Err(Status::INVALID_FIELD.with_do_not_retry())
        );
        // A non-holder key only removes that registration.
        let effects = state.acquire(&B, AcquireAction::Preempt, ExclusiveAccess, 2, 3, false).unwrap();
        assert_eq!(effects.notices, [(C, Notice::RegistrationPreempted)]);
        assert_eq!(state.registrants.len(), 1);
    }

    #[test]
    fn all_registrants_reservations_last_while_a_registrant_remains() {
        let mut state = registered(&[(A, 1), (B, 2)]);
        state.acquire(&A, AcquireAction::Acquire, ExclusiveAccessAllRegistrants, 1, 0, false).unwrap();
        assert!(state.holds(&B), "every registrant holds it");
        state.register(&A, RegisterAction::Unregister, 1, 0, false).unwrap();
        assert!(state.holder.is_some());
        state.register(&B, RegisterAction::Register, 0, 2, false).unwrap();
        state.register(&A, RegisterAction::Register, 0, 1, false).unwrap();
        let effects = state.acquire(&A, AcquireAction::Preempt, WriteExclusive, 1, 0, false).unwrap();
        assert_eq!(effects.notices, [(B, Notice::RegistrationPreempted)]);
        assert_eq!(state.holder, Some(Holder { kind: WriteExclusive, host: Some(A) }));
    }

    #[test]
    fn clear_removes_everything_and_notifies_the_others() {
        let mut state = registered(&[(A, 1), (B, 2)]);
        state.acquire(&B, AcquireAction::Acquire, WriteExclusive, 2, 0, false).unwrap();
        assert_eq!(state.release(&A, ReleaseAction::Clear, 0, 9, false), Err(Status::RESERVATION_CONFLICT));
        let effects = state.release(&A, ReleaseAction::Clear, 0, 1, false).unwrap();
        assert_eq!(effects.notices, [(B, Notice::ReservationPreempted)]);
        assert!(state.registrants.is_empty() && state.holder.is_none());
    }
}

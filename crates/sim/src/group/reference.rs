//! The group's oracle: a reference reservation state machine written apart from the
//! target's (`nvme-target/src/reservations.rs`), applied in the cluster's commit
//! order, and the atomic registers of the lock blocks.
//!
//! The reference covers what the simulated hosts send: Register, Unregister and
//! Replace, Acquire, Preempt and Preempt and Abort (which changes the state as
//! Preempt does) of the four types that name one holder (Write Exclusive,
//! Exclusive Access and their Registrants Only variants), Release and Clear, each
//! with the key checked (IEKEY never set). Its rules, from the specification:
//! - Register of a host not registered adds it (PRGEN + 1); of a host registered with
//!   that key succeeds and changes nothing; with another key is a conflict.
//! - Every other command needs the host registered with CRKEY, or is a conflict.
//! - Unregister removes the host (PRGEN + 1) and its reservation if it held one;
//!   Replace gives it the new key (PRGEN + 1).
//! - Acquire takes a free reservation, succeeds again for the holder with the same
//!   type, and is a conflict otherwise.
//! - Preempt with the holder's key makes the host the holder with the new type and
//!   removes the other registrants with that key; with another key it only removes
//!   the other registrants with that key (none: a conflict; key 0: Invalid Field);
//!   either way PRGEN + 1.
//! - Release by a host that does not hold the reservation succeeds and does nothing;
//!   by the holder, with another type, is Invalid Field; else it frees it.
//! - Clear removes every registrant and the reservation (PRGEN + 1).
//! - CPTPL of a successful Register sets Persist Through Power Loss; the group's power
//!   loss (every gateway down for a lease) clears registrants and reservation
//!   (PRGEN + 1) unless it is set.
//! - Notices: a Preempt sends Registration Preempted to each host it unregisters, and
//!   Reservation Preempted to the other registrants (not the issuer) when the
//!   reservation changed hands or type; Clear sends Reservation Preempted to every
//!   other registrant; the holder's Release or Unregister of a Registrants Only type
//!   sends Reservation Released to the other registrants.
//! - Access: Write Exclusive lets anyone read, the holder write; Exclusive Access
//!   lets only the holder do either; the Registrants Only variants extend the holder's
//!   rights to every registrant.

use std::collections::BTreeMap;

use nvme_spec::Status;
use nvme_target::group_reservations::ReservationChange;
use nvme_target::reservations::{AcquireAction, HostId, RegisterAction, ReleaseAction, ReservationState};

use super::authority::Commit;
use super::store::Committed;
use crate::oracle::WriteTag;

/// The simulated host with this Host Identifier (host `index` has `[index + 1; 16]`).
pub fn host_index(host: &HostId) -> u8 {
    host[0].wrapping_sub(1)
}

/// Host `index`'s Host Identifier.
pub fn host_identifier(index: usize) -> HostId {
    [index as u8 + 1; 16]
}

/// One reservation state of the reference model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReferenceState {
    pub generation: u32,
    /// Registrant host index -> key.
    pub registrants: BTreeMap<u8, u64>,
    /// (RTYPE, holder host index).
    pub holder: Option<(u8, u8)>,
    /// PTPL.
    pub persist: bool,
}

/// Notice types of the Reservation Notification log.
pub const REGISTRATION_PREEMPTED: u8 = 1;
pub const RESERVATION_RELEASED: u8 = 2;
pub const RESERVATION_PREEMPTED: u8 = 3;

const WRITE_EXCLUSIVE: u8 = 1;
const EXCLUSIVE_ACCESS: u8 = 2;
const WRITE_EXCLUSIVE_REGISTRANTS_ONLY: u8 = 3;
const EXCLUSIVE_ACCESS_REGISTRANTS_ONLY: u8 = 4;

/// The types the hosts take (the ones with a single holder).
pub const TYPES: [u8; 4] =
    [WRITE_EXCLUSIVE, EXCLUSIVE_ACCESS, WRITE_EXCLUSIVE_REGISTRANTS_ONLY, EXCLUSIVE_ACCESS_REGISTRANTS_ONLY];

impl ReferenceState {
    fn authorized(&self, host: u8, current_key: u64) -> Result<(), Status> {
        match self.registrants.get(&host) {
            Some(&key) if key == current_key => Ok(()),
            _ => Err(Status::RESERVATION_CONFLICT),
        }
    }

    /// Applies one change; the status the specification answers it with (the state
    /// is unchanged when it is refused).
    pub fn apply(&mut self, change: &ReservationChange) -> Status {
        self.apply_with_notices(change).0
    }

    /// [`ReferenceState::apply`], with the notices the change owes: (host, type),
    /// sorted.
    pub fn apply_with_notices(&mut self, change: &ReservationChange) -> (Status, Vec<(u8, u8)>) {
        let mut next = self.clone();
        let mut notices = Vec::new();
        match next.apply_inner(change, &mut notices) {
            Ok(()) => {
                *self = next;
                notices.sort_unstable();
                (Status::SUCCESS, notices)
            }
            Err(status) => (status, Vec::new()),
        }
    }

    /// The group's power loss: without PTPL registrants and reservation go. False
    /// when nothing changes (PTPL on, or nothing to clear).
    pub fn power_loss(&mut self) -> bool {
        if self.persist || (self.registrants.is_empty() && self.holder.is_none()) {
            return false;
        }
        self.registrants.clear();
        self.holder = None;
        self.generation += 1;
        true
    }

    /// Registrants other than `host`.
    fn others(&self, host: u8) -> impl Iterator<Item = u8> + '_ {
        self.registrants.keys().copied().filter(move |&other| other != host)
    }

    /// The holder of a Registrants Only type (single holder) let it go: the others
    /// are told it was released.
    fn released_by(&self, host: u8, kind: u8, notices: &mut Vec<(u8, u8)>) {
        if [WRITE_EXCLUSIVE_REGISTRANTS_ONLY, EXCLUSIVE_ACCESS_REGISTRANTS_ONLY].contains(&kind) {
            notices.extend(self.others(host).map(|other| (other, RESERVATION_RELEASED)));
        }
    }

    fn apply_inner(&mut self, change: &ReservationChange, notices: &mut Vec<(u8, u8)>) -> Result<(), Status> {
        match *change {
            ReservationChange::Register { host, action, current_key, new_key, persist, .. } => {
                let host = host_index(&host);
                match action {
                    RegisterAction::Register => match self.registrants.get(&host) {
                        Some(&key) if key == new_key => {}
                        Some(_) => return Err(Status::RESERVATION_CONFLICT),
                        None => {
                            self.registrants.insert(host, new_key);
                            self.generation += 1;
                        }
                    },
                    RegisterAction::Unregister => {
                        self.authorized(host, current_key)?;
                        self.registrants.remove(&host);
                        self.generation += 1;
                        if let Some((kind, holder)) = self.holder.filter(|&(_, holder)| holder == host) {
                            self.holder = None;
                            self.released_by(holder, kind, notices);
                        }
                    }
                    RegisterAction::Replace => {
                        self.authorized(host, current_key)?;
                        self.registrants.insert(host, new_key);
                        self.generation += 1;
                    }
                }
                if let Some(persist) = persist {
                    self.persist = persist;
                }
            }
            ReservationChange::Acquire { host, action, kind, current_key, preempt_key, .. } => {
                let host = host_index(&host);
                let kind = kind as u8;
                self.authorized(host, current_key)?;
                if action == AcquireAction::Acquire {
                    match self.holder {
                        None => self.holder = Some((kind, host)),
                        Some(held) if held == (kind, host) => {}
                        Some(_) => return Err(Status::RESERVATION_CONFLICT),
                    }
                    return Ok(());
                }
                let holder_key = self.holder.and_then(|(_, holder)| self.registrants.get(&holder).copied());
                let removed: Vec<u8> = self
                    .registrants
                    .iter()
                    .filter(|&(&other, &key)| other != host && key == preempt_key)
                    .map(|(&other, _)| other)
                    .collect();
                if holder_key == Some(preempt_key) {
                    self.registrants.retain(|other, _| !removed.contains(other));
                    if self.holder != Some((kind, host)) {
                        notices.extend(self.others(host).map(|other| (other, RESERVATION_PREEMPTED)));
                    }
                    self.holder = Some((kind, host));
                } else {
                    if preempt_key == 0 {
                        return Err(Status::INVALID_FIELD);
                    }
                    if removed.is_empty() {
                        return Err(Status::RESERVATION_CONFLICT);
                    }
                    self.registrants.retain(|other, _| !removed.contains(other));
                }
                notices.extend(removed.iter().map(|&other| (other, REGISTRATION_PREEMPTED)));
                self.generation += 1;
            }
            ReservationChange::Release { host, action, kind, current_key, .. } => {
                let host = host_index(&host);
                self.authorized(host, current_key)?;
                match action {
                    ReleaseAction::Release => match self.holder {
                        Some((held, holder)) if holder == host => {
                            if held != kind {
                                return Err(Status::INVALID_FIELD);
                            }
                            self.holder = None;
                            self.released_by(host, held, notices);
                        }
                        _ => {}
                    },
                    ReleaseAction::Clear => {
                        notices.extend(self.others(host).map(|other| (other, RESERVATION_PREEMPTED)));
                        self.registrants.clear();
                        self.holder = None;
                        self.generation += 1;
                    }
                }
            }
            ReservationChange::SetPersistence { .. } => {}
        }
        Ok(())
    }

    /// True when `host` may read (`write` false) or write under this state.
    pub fn allows(&self, host: u8, write: bool) -> bool {
        let Some((kind, holder)) = self.holder else {
            return true;
        };
        if holder == host {
            return true;
        }
        let registered = self.registrants.contains_key(&host);
        match kind {
            WRITE_EXCLUSIVE => !write,
            WRITE_EXCLUSIVE_REGISTRANTS_ONLY => !write || registered,
            EXCLUSIVE_ACCESS_REGISTRANTS_ONLY => registered,
            _ => false,
        }
    }

    /// The reference's view of the target's state (for states the hosts can reach).
    pub fn of_target(state: &ReservationState) -> ReferenceState {
        ReferenceState {
            generation: state.generation,
            registrants: state
                .registrants
                .iter()
                .map(|registrant| (host_index(&registrant.host), registrant.key))
                .collect(),
            holder: state
                .holder
                .map(|holder| (holder.kind as u8, holder.host.map_or(u8::MAX, |host| host_index(&host)))),
            persist: state.persist_through_power_loss,
        }
    }

    /// The state an extended Reservation Report describes.
    pub fn of_report(data: &[u8]) -> Result<ReferenceState, String> {
        let word = |offset: usize, bytes: usize| -> u64 {
            let mut value = [0u8; 8];
            value[..bytes].copy_from_slice(&data[offset..offset + bytes]);
            u64::from_le_bytes(value)
        };
        if data.len() < 64 {
            return Err(format!("a report of {} bytes", data.len()));
        }
        let kind = data[4];
        let entries = word(5, 2) as usize;
        let mut state =
            ReferenceState { generation: word(0, 4) as u32, persist: data[9] & 1 != 0, ..ReferenceState::default() };
        for index in 0..entries {
            let offset = 64 + index * 64;
            if offset + 64 > data.len() {
                return Err(format!("{entries} registrants do not fit the report"));
            }
            let host = data[offset + 16].wrapping_sub(1);
            state.registrants.insert(host, word(offset + 8, 8));
            if data[offset + 2] & 1 != 0 {
                state.holder = Some((kind, host));
            }
        }
        if kind != 0 && state.holder.is_none() {
            return Err(format!("type {kind} reported with no holder"));
        }
        Ok(state)
    }
}

/// Statuses any command may end with in a world of lost paths: the host retries on
/// another gateway.
pub fn is_path_or_transport_failure(status: Status) -> bool {
    [
        Status::INTERNAL_PATH_ERROR,
        Status::NAMESPACE_NOT_READY,
        Status::ASYMMETRIC_ACCESS_TRANSITION,
        Status::TRANSIENT_TRANSPORT_ERROR,
        Status::ABORTED_SQ_DELETION,
        Status::KEEP_ALIVE_TIMER_EXPIRED,
    ]
    .iter()
    .any(|allowed| allowed.kind() == status.kind())
}

/// One change the group decided.
#[derive(Clone, Copy, Debug)]
struct Decision {
    /// Which of the (gateway process, host) pair's changes it was.
    call: u64,
    status: Status,
    /// The record's sequence after it.
    sequence: u64,
}

/// A Preempt and Abort answered with success to the host that sent it.
#[derive(Clone, Debug)]
struct AnsweredPreempt {
    /// The hosts it unregistered.
    victims: Vec<u8>,
    /// The version it made.
    sequence: u64,
    answered_ns: u64,
}

/// The reference states in commit order, and what hosts were told.
#[derive(Default)]
pub struct GroupOracle {
    /// The reference state after each accepted change (index: the record sequence).
    versions: Vec<ReferenceState>,
    /// The newest version whose change had been answered with success to a host.
    floor: u64,
    /// (gateway process, host index) -> the changes the group decided for them.
    decided: BTreeMap<(u64, u8), Vec<Decision>>,
    /// The hosts each Preempt and Abort unregistered, by the version it made.
    preempted: BTreeMap<u64, Vec<u8>>,
    answered_preempts: Vec<AnsweredPreempt>,
    /// Preempt and Abort answers the safety check holds (for the summary).
    pub preempts_answered: u64,
}

impl GroupOracle {
    pub fn new() -> Self {
        GroupOracle { versions: vec![ReferenceState::default()], ..GroupOracle::default() }
    }

    /// The newest version answered to a host so far (taken when a command is
    /// submitted: what it must see at least).
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The newest version committed.
    pub fn newest(&self) -> u64 {
        self.versions.len() as u64 - 1
    }

    /// The cluster decided a change: its status must be the reference's, and its
    /// record the reference's state.
    pub fn committed(&mut self, commit: &Commit) -> Result<(), String> {
        let mut state = self.versions.last().cloned().unwrap_or_default();
        let (expected, notices) = match &commit.change {
            Some(change) => state.apply_with_notices(change),
            None if state.power_loss() => (Status::SUCCESS, Vec::new()),
            None => {
                return Err(format!(
                    "the group cleared its reservations after a power loss, though the reference has nothing to clear there ({state:?})"
                ))
            }
        };
        if let Some(host) = commit.host {
            self.decided.entry((commit.instance, host_index(&host))).or_default().push(Decision {
                call: commit.call,
                status: commit.status,
                sequence: commit.sequence,
            });
        }
        if expected.kind() != commit.status.kind() {
            return Err(format!(
                "the group answered {:?} with status {:#x}, the reference with {:#x}",
                commit.change,
                commit.status.field(),
                expected.field()
            ));
        }
        if expected.is_success() {
            self.versions.push(state);
            let mut recorded: Vec<(u8, u8)> = commit
                .update
                .notices
                .iter()
                .filter(|(sequence, _, _)| *sequence == commit.sequence)
                .map(|(_, host, notice)| (host_index(host), *notice as u8))
                .collect();
            recorded.sort_unstable();
            if recorded != notices {
                return Err(format!(
                    "{:?} left the notices {recorded:?} (host, type) in the record; the reference owes {notices:?}",
                    commit.change
                ));
            }
            if let Some(ReservationChange::Acquire { action: AcquireAction::PreemptAndAbort, .. }) = commit.change {
                let victims = notices
                    .iter()
                    .filter(|(_, notice)| *notice == REGISTRATION_PREEMPTED)
                    .map(|(host, _)| *host)
                    .collect();
                self.preempted.insert(commit.sequence, victims);
            }
        }
        let recorded = ReferenceState::of_target(&commit.update.state);
        if commit.sequence != self.newest() || recorded != self.versions[self.newest() as usize] {
            return Err(format!(
                "after {:?} the record is {recorded:?} at sequence {}, the reference {:?} at {}",
                commit.change,
                commit.sequence,
                self.versions.last(),
                self.newest()
            ));
        }
        Ok(())
    }

    /// A reservation change of `host` through gateway process `instance` was
    /// answered `status`; `calls_before` is how many changes that pair had handed
    /// over when it was submitted.
    pub fn change_answered(
        &mut self,
        instance: u64,
        host: u8,
        calls_before: u64,
        status: Status,
        now_ns: u64,
    ) -> Result<(), String> {
        if is_path_or_transport_failure(status) {
            return Ok(());
        }
        // Changes handed over after the command was submitted; a command of an
        // earlier connection to the same gateway process may still be among them
        // (its bytes were in flight), so any of them may be this one.
        let candidates: Vec<Decision> = self
            .decided
            .get(&(instance, host))
            .into_iter()
            .flatten()
            .filter(|decision| decision.call >= calls_before)
            .copied()
            .collect();
        if candidates.is_empty() {
            return Err(format!("a reservation change answered {:#x} that the group never decided", status.field()));
        }
        let Some(sequence) = candidates
            .iter()
            .find(|decision| decision.status.kind() == status.kind())
            .map(|decision| decision.sequence)
        else {
            return Err(format!(
                "a reservation change answered {:#x}, decided {candidates:?} by the group",
                status.field()
            ));
        };
        if status.is_success() {
            self.floor = self.floor.max(sequence);
            let successes = candidates.iter().filter(|decision| decision.status.is_success()).count();
            // Only when it is sure which change this answer was.
            if let Some(victims) = self.preempted.get(&sequence).filter(|_| successes == 1) {
                self.preempts_answered += 1;
                self.answered_preempts.push(AnsweredPreempt {
                    victims: victims.clone(),
                    sequence,
                    answered_ns: now_ns,
                });
            }
        }
        Ok(())
    }

    /// A write (or Compare and Write) of `host` landed at `landed_ns`: not after a
    /// Preempt and Abort that unregistered the host was answered, unless the state it
    /// made or a later one lets the host write (with no reservation held an
    /// unregistered host may write: the fence does not order those writes).
    pub fn write_landed(&self, host: u8, landed_ns: u64) -> Result<(), String> {
        for preempt in &self.answered_preempts {
            if preempt.answered_ns >= landed_ns || !preempt.victims.contains(&host) {
                continue;
            }
            let since = &self.versions[preempt.sequence as usize..];
            if !since.iter().any(|state| state.allows(host, true)) {
                return Err(format!(
                    "a write of host {host} landed {} us after the Preempt and Abort that unregistered it (version {}) was answered, and no state since lets it write",
                    (landed_ns - preempt.answered_ns) / 1_000,
                    preempt.sequence
                ));
            }
        }
        Ok(())
    }

    /// A gateway that found the group down as a whole loaded the record at
    /// `sequence`, right after it cleared what PTPL does not keep: no registration or
    /// reservation is left there with PTPL off (that the group cleared nothing with
    /// PTPL on is checked as it commits).
    pub fn loaded_after_power_loss(&self, sequence: u64) -> Result<(), String> {
        let state = &self.versions[sequence as usize];
        if !state.persist && (!state.registrants.is_empty() || state.holder.is_some()) {
            return Err(format!(
                "after the group's power loss a gateway loaded version {sequence} with PTPL off and registrations or a reservation: {state:?}"
            ));
        }
        Ok(())
    }

    /// A Report must show the state of some version from `floor` (at submission) to
    /// the newest.
    pub fn report_answered(&self, data: &[u8], floor: u64) -> Result<(), String> {
        let reported = ReferenceState::of_report(data)?;
        if self.versions[floor as usize..].contains(&reported) {
            return Ok(());
        }
        Err(format!(
            "Reservation Report shows {reported:?}, no state from version {floor} to {} (newest {:?})",
            self.newest(),
            self.versions.last()
        ))
    }

    /// An I/O answered `status`: success must be allowed, and Reservation Conflict
    /// refused, by some version from `floor` (at submission) to the newest.
    pub fn io_answered(&self, host: u8, write: bool, status: Status, floor: u64) -> Result<(), String> {
        let allowed = |state: &ReferenceState| state.allows(host, write);
        let versions = &self.versions[floor as usize..];
        let what = if write { "write" } else { "read" };
        if status.is_success() && !versions.iter().any(allowed) {
            return Err(format!(
                "a {what} succeeded that no reservation state from version {floor} to {} allows ({:?})",
                self.newest(),
                self.versions.last()
            ));
        }
        if status.kind() == Status::RESERVATION_CONFLICT.kind() && versions.iter().all(allowed) {
            return Err(format!(
                "a {what} got Reservation Conflict though every reservation state from version {floor} to {} allows it",
                self.newest()
            ));
        }
        Ok(())
    }
}

/// A Compare and Write of `new` over `compare` succeeded: the store must have
/// committed `new` right after `compare` (so no two succeed over one value).
pub fn check_register_swap(log: &[Committed], compare: WriteTag, new: WriteTag) -> Result<(), String> {
    let Some(position) = log.iter().position(|entry| entry.tag == new) else {
        return Err(format!("value {new} acknowledged but never committed"));
    };
    let before = position.checked_sub(1).map(|index| log[index].tag);
    if before != Some(compare) {
        return Err(format!(
            "value {new} succeeded over {compare} but was committed over {before:?} (log {:?})",
            log.iter().map(|entry| entry.tag).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

/// True when `value` was the register's value at some time in `from_ns..=to_ns`.
pub fn was_current(log: &[Committed], value: WriteTag, from_ns: u64, to_ns: u64) -> bool {
    log.iter().enumerate().any(|(index, entry)| {
        entry.tag == value && entry.at_ns <= to_ns && log.get(index + 1).is_none_or(|next| next.at_ns >= from_ns)
    })
}

/// True when `value` was the register's value all through `from_ns..=to_ns` (then a
/// compare against it cannot fail).
pub fn was_current_throughout(log: &[Committed], value: WriteTag, from_ns: u64, to_ns: u64) -> bool {
    log.iter().enumerate().any(|(index, entry)| {
        entry.tag == value && entry.at_ns < from_ns && log.get(index + 1).is_none_or(|next| next.at_ns > to_ns)
    })
}

#[cfg(test)]
mod tests {
    use nvme_target::reservations::ReservationType;

    use super::*;

    fn register(host: u8, key: u64) -> ReservationChange {
        ReservationChange::Register {
            host: host_identifier(usize::from(host)),
            action: RegisterAction::Register,
            current_key: 0,
            new_key: key,
            ignore_key: false,
            persist: None,
        }
    }

    fn acquire(host: u8, action: AcquireAction, key: u64, preempt_key: u64) -> ReservationChange {
        ReservationChange::Acquire {
            host: host_identifier(usize::from(host)),
            action,
            kind: ReservationType::ExclusiveAccess,
            current_key: key,
            preempt_key,
            ignore_key: false,
        }
    }

    #[test]
    fn preempting_the_holder_moves_the_reservation_and_removes_its_registration() {
        let mut state = ReferenceState::default();
        assert_eq!(state.apply(&register(0, 10)), Status::SUCCESS);
        assert_eq!(state.apply(&register(1, 11)), Status::SUCCESS);
        assert_eq!(state.apply(&acquire(0, AcquireAction::Acquire, 10, 0)), Status::SUCCESS);
        assert!(!state.allows(1, false), "Exclusive Access: a registrant may not read");
        assert_eq!(state.apply(&acquire(1, AcquireAction::Acquire, 11, 0)).kind(), Status::RESERVATION_CONFLICT.kind());
        assert_eq!(state.apply(&acquire(1, AcquireAction::Preempt, 11, 10)), Status::SUCCESS);
        assert_eq!(state.holder, Some((EXCLUSIVE_ACCESS, 1)));
        assert!(!state.registrants.contains_key(&0));
        assert_eq!(state.generation, 3, "two registrations and a preempt");
    }

    #[test]
    fn a_preempt_naming_no_registrant_is_refused_and_changes_nothing() {
        let mut state = ReferenceState::default();
        state.apply(&register(0, 10));
        let before = state.clone();
        assert_eq!(
            state.apply(&acquire(0, AcquireAction::Preempt, 10, 99)).kind(),
            Status::RESERVATION_CONFLICT.kind()
        );
        assert_eq!(state.apply(&acquire(0, AcquireAction::Preempt, 10, 0)).kind(), Status::INVALID_FIELD.kind());
        assert_eq!(state, before);
    }

    fn release(host: u8, action: ReleaseAction, kind: u8, key: u64) -> ReservationChange {
        ReservationChange::Release {
            host: host_identifier(usize::from(host)),
            action,
            kind,
            current_key: key,
            ignore_key: false,
        }
    }

    #[test]
    fn changes_owe_the_notices_the_specification_names() {
        let mut state = ReferenceState::default();
        for (host, key) in [(0, 10), (1, 11), (2, 12)] {
            assert_eq!(state.apply_with_notices(&register(host, key)), (Status::SUCCESS, vec![]));
        }
        let take = |kind: ReservationType| ReservationChange::Acquire {
            host: host_identifier(0),
            action: AcquireAction::Acquire,
            kind,
            current_key: 10,
            preempt_key: 0,
            ignore_key: false,
        };
        assert_eq!(state.apply_with_notices(&take(ReservationType::WriteExclusiveRegistrantsOnly)).1, []);
        // The holder's Release of a Registrants Only type: the others are told.
        assert_eq!(
            state.apply_with_notices(&release(0, ReleaseAction::Release, WRITE_EXCLUSIVE_REGISTRANTS_ONLY, 10)),
            (Status::SUCCESS, vec![(1, RESERVATION_RELEASED), (2, RESERVATION_RELEASED)])
        );
        state.apply(&take(ReservationType::ExclusiveAccess));
        // Preempting the holder: it is unregistered, the other registrant learns the
        // reservation was preempted, the issuer learns nothing.
        assert_eq!(
            state.apply_with_notices(&acquire(1, AcquireAction::PreemptAndAbort, 11, 10)),
            (Status::SUCCESS, vec![(0, REGISTRATION_PREEMPTED), (2, RESERVATION_PREEMPTED)])
        );
        // Clear: every other registrant.
        assert_eq!(
            state.apply_with_notices(&release(2, ReleaseAction::Clear, 0, 12)),
            (Status::SUCCESS, vec![(1, RESERVATION_PREEMPTED)])
        );
        assert!(state.registrants.is_empty() && state.holder.is_none());
    }

    #[test]
    fn only_ptpl_keeps_the_state_through_the_group_power_loss() {
        let mut state = ReferenceState::default();
        assert!(!state.power_loss(), "nothing to clear");
        let mut persistent = register(0, 10);
        if let ReservationChange::Register { persist, .. } = &mut persistent {
            *persist = Some(true);
        }
        state.apply(&persistent);
        assert!(state.persist);
        let before = state.clone();
        assert!(!state.power_loss());
        assert_eq!(state, before, "PTPL on: kept");
        let mut volatile = register(0, 10);
        if let ReservationChange::Register { persist, .. } = &mut volatile {
            *persist = Some(false);
        }
        assert_eq!(state.apply(&volatile), Status::SUCCESS, "the same key again, PTPL off");
        assert!(state.power_loss());
        assert!(state.registrants.is_empty());
        assert_eq!(state.generation, before.generation + 1);
    }

    #[test]
    fn a_report_reads_back_as_the_state_it_describes() {
        let mut report = vec![0u8; 64 + 2 * 64];
        report[0..4].copy_from_slice(&7u32.to_le_bytes());
        report[4] = WRITE_EXCLUSIVE_REGISTRANTS_ONLY;
        report[5] = 2;
        report[9] = 1;
        for (entry, (host, key, holds)) in [(0u8, 10u64, false), (2, 12, true)].iter().enumerate() {
            let offset = 64 + entry * 64;
            report[offset + 2] = u8::from(*holds);
            report[offset + 8..offset + 16].copy_from_slice(&key.to_le_bytes());
            report[offset + 16..offset + 32].copy_from_slice(&host_identifier(usize::from(*host)));
        }
        let state = ReferenceState::of_report(&report).unwrap();
        assert_eq!(state.generation, 7);
        assert_eq!(state.holder, Some((WRITE_EXCLUSIVE_REGISTRANTS_ONLY, 2)));
        assert_eq!(state.registrants, BTreeMap::from([(0, 10), (2, 12)]));
        assert!(state.persist, "PTPLS");
    }

    #[test]
    fn two_swaps_over_one_value_cannot_both_be_in_the_log() {
        let log = [Committed { at_ns: 0, tag: 0 }, Committed { at_ns: 5, tag: 1 }, Committed { at_ns: 9, tag: 2 }];
        assert!(check_register_swap(&log, 0, 1).is_ok());
        assert!(check_register_swap(&log, 0, 2).is_err(), "2 was written over 1");
        assert!(check_register_swap(&log, 1, 3).is_err(), "3 was never written");
        assert!(was_current(&log, 1, 6, 8));
        assert!(!was_current(&log, 0, 6, 8));
        assert!(was_current_throughout(&log, 1, 6, 8));
        assert!(!was_current_throughout(&log, 1, 6, 10));
    }
}

//! Reservation Register, Acquire, Release and Report (I/O opcodes 0Dh, 11h, 15h, 0Eh)
//! over the namespace's [`Reservations`](crate::reservations::Reservations), and the
//! notifications they send to other hosts' controllers.

use std::time::{Duration, Instant};

use nvme_spec::{NamespaceId, Status, SubmissionQueueEntry};

use crate::connection::Connection;
use crate::group_reservations::{ChangeTicket, ReservationChange, SharedGroupReservations};
use crate::limits::{FENCE_CHECK_INTERVAL_MS, MAX_RESERVATION_REPORT_BYTES};
use crate::outcome::Outcome;
use crate::reservation_store::{NamespaceKey, PersistTicket};
use crate::reservations::{
    AcquireAction, Effects, HostId, RegisterAction, ReleaseAction, ReservationState, ReservationType,
};
use crate::slots::SlotState;

/// Bytes of the extended Reservation Status header and of each extended Registered
/// Controller data structure (128-bit Host Identifiers, the only kind fabrics use).
const REPORT_HEADER_BYTES: usize = 64;
const REPORT_ENTRY_BYTES: usize = 64;
/// CNTLID of every entry of a Reservation Report: this subsystem creates controllers
/// dynamically (Connect asks for FFFFh), and for the dynamic controller model the
/// Registered Controller data structure's CNTLID is FFFFh (NVMe Base 2.0, Reservation
/// Report), as the Linux target and SPDK report it.
const DYNAMIC_CONTROLLER: u16 = 0xFFFF;
/// CDW10 bit 3, IEKEY, of Register, Acquire and Release. RESCAP bit 7 (Identify
/// Namespace) says it has its NVMe 1.3 and later meaning: Register may ignore the
/// current key; in Acquire and Release the bit is not allowed, and a command with it
/// set gets Invalid Field in Command (as the Linux target and SPDK answer).
const IGNORE_EXISTING_KEY: u32 = 1 << 3;

fn invalid() -> Status {
    Status::INVALID_FIELD.with_do_not_retry()
}

fn key_at(data: &[u8], offset: usize) -> u64 {
    nvme_spec::bytes::get_u64(data, offset)
}

impl Connection {
    /// The namespace, the host's identifier and the command's first `needed` bytes of
    /// host data.
    fn reservation_request(
        &mut self,
        sqe: &SubmissionQueueEntry,
        slot_index: u16,
        needed: usize,
    ) -> Result<(std::sync::Arc<crate::namespaces::Namespace>, HostId, [u8; 16]), Status> {
        let namespace = self
            .view
            .get(sqe.namespace_id())
            .cloned()
            .ok_or(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry())?;
        let host = self.binding.as_ref().map(|binding| binding.controller.host_identifier).unwrap_or_default();
        let slot = self.slots.slot(slot_index);
        let Some(source) = slot.buffer.get(..needed).filter(|_| slot.host_data_bytes as usize >= needed) else {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        };
        let mut data = [0u8; 16];
        // `needed` is 8 or 16, from this file's callers.
        let Some(target) = data.get_mut(..needed) else { return Err(Status::INTERNAL_ERROR) };
        target.copy_from_slice(source);
        Ok((namespace, host, data))
    }

    /// Tells the controllers of the hosts in `effects` (any queue, any thread).
    fn send_reservation_notices(&self, nsid: NamespaceId, effects: &Effects) {
        if effects.notices.is_empty() {
            return;
        }
        let Some(subsystem) = self.binding.as_ref().and_then(|binding| binding.controller.subsystem.clone()) else {
            return;
        };
        for controller in self.target.controllers_of(subsystem.index) {
            for (host, notice) in &effects.notices {
                if controller.host_identifier == *host {
                    controller.note_reservation(nsid, *notice);
                }
            }
        }
        if !effects.preempted.is_empty() {
            tracing::info!(peer = %self.peer, nsid = nsid.0, hosts = effects.preempted.len(),
                "preempt and abort: registrations removed; answered once their writes at storage completed");
        }
    }

    pub(crate) fn io_reservation_register(
        &mut self,
        sqe: &SubmissionQueueEntry,
        slot_index: u16,
        now: Instant,
    ) -> Result<Outcome, Status> {
        let (namespace, host, data) = self.reservation_request(sqe, slot_index, 16)?;
        let cdw10 = sqe.dwords[10];
        let action = match cdw10 & 0b111 {
            0 => RegisterAction::Register,
            1 => RegisterAction::Unregister,
            2 => RegisterAction::Replace,
            _ => return Err(invalid()),
        };
        // CPTPL: 00b no change, 10b PTPL off, 11b PTPL on (only where the state
        // outlives the process: RESCAP bit 0 says so), 01b is reserved.
        let persist = match cdw10 >> 30 {
            0 => None,
            2 => Some(false),
            3 if self.persistence_offered() => Some(true),
            _ => return Err(invalid()),
        };
        let change = ReservationChange::Register {
            host,
            action,
            current_key: key_at(&data, 0),
            new_key: key_at(&data, 8),
            ignore_key: cdw10 & IGNORE_EXISTING_KEY != 0,
            persist,
        };
        self.change_reservations(slot_index, &namespace, change, now)
    }

    pub(crate) fn io_reservation_acquire(
        &mut self,
        sqe: &SubmissionQueueEntry,
        slot_index: u16,
        now: Instant,
    ) -> Result<Outcome, Status> {
        let (namespace, host, data) = self.reservation_request(sqe, slot_index, 16)?;
        let cdw10 = sqe.dwords[10];
        let action = match cdw10 & 0b111 {
            0 => AcquireAction::Acquire,
            1 => AcquireAction::Preempt,
            2 => AcquireAction::PreemptAndAbort,
            _ => return Err(invalid()),
        };
        let kind = ReservationType::from_u8((cdw10 >> 8) as u8).ok_or_else(invalid)?;
        if cdw10 & IGNORE_EXISTING_KEY != 0 {
            return Err(invalid());
        }
        let change = ReservationChange::Acquire {
            host,
            action,
            kind,
            current_key: key_at(&data, 0),
            preempt_key: key_at(&data, 8),
            ignore_key: false,
        };
        self.change_reservations(slot_index, &namespace, change, now)
    }

    pub(crate) fn io_reservation_release(
        &mut self,
        sqe: &SubmissionQueueEntry,
        slot_index: u16,
        now: Instant,
    ) -> Result<Outcome, Status> {
        let (namespace, host, data) = self.reservation_request(sqe, slot_index, 8)?;
        let cdw10 = sqe.dwords[10];
        let action = match cdw10 & 0b111 {
            0 => ReleaseAction::Release,
            1 => ReleaseAction::Clear,
            _ => return Err(invalid()),
        };
        let kind = (cdw10 >> 8) as u8;
        if action == ReleaseAction::Release && ReservationType::from_u8(kind).is_none() {
            return Err(invalid());
        }
        if cdw10 & IGNORE_EXISTING_KEY != 0 {
            return Err(invalid());
        }
        let change =
            ReservationChange::Release { host, action, kind, current_key: key_at(&data, 0), ignore_key: false };
        self.change_reservations(slot_index, &namespace, change, now)
    }

    /// Applies a reservation change: in the gateway group's authority when the
    /// subsystem has one (the command waits for the group), here otherwise (then made
    /// durable first when PTPL is or was on).
    ///
    /// A Preempt and Abort is answered only once the preempted hosts' writes at
    /// storage have completed (`write_fence`); on a group each gateway waits for its
    /// own before it acknowledges the change (`Target::install_group_reservations`).
    fn change_reservations(
        &mut self,
        slot_index: u16,
        namespace: &std::sync::Arc<crate::namespaces::Namespace>,
        change: ReservationChange,
        now: Instant,
    ) -> Result<Outcome, Status> {
        if let Some(group) = self.group_reservations() {
            return Ok(self.change_in_group(slot_index, namespace, &group, change, now));
        }
        let mut state = namespace.reservations.lock();
        let was_persistent = state.persist_through_power_loss;
        let effects = change.apply(&mut state)?;
        namespace.reservations.publish(&state);
        // Taken under the state's lock, after the new state is published: a write
        // of a preempted host either is counted here or sees the new state.
        let fence = namespace.writes.fence(&effects.preempted);
        let outcome = self.persist_reservations(slot_index, namespace, &state, was_persistent);
        drop(state);
        self.send_reservation_notices(namespace.id, &effects);
        Ok(self.hold_until_fenced(slot_index, outcome, fence, now))
    }

    /// Holds the command's answer (`outcome`, or the ticket it is held on) until
    /// `fence` has drained, polled every `FENCE_CHECK_INTERVAL_MS`.
    fn hold_until_fenced(
        &mut self,
        slot_index: u16,
        outcome: Outcome,
        fence: crate::write_fence::WriteFence,
        now: Instant,
    ) -> Outcome {
        if fence.is_drained() {
            return outcome;
        }
        let (inner, answer) = match outcome {
            Outcome::Done(status, result) => (None, Some((status, result))),
            Outcome::Pending => {
                let position = self.held_tickets.iter().rposition(|(slot, _)| *slot == slot_index);
                match position {
                    Some(position) => (Some(Box::new(self.held_tickets.swap_remove(position).1)), None),
                    None => return outcome,
                }
            }
            // Reservation changes return no data.
            Outcome::Data(_) => return outcome,
        };
        let quiesce = Duration::from_millis(u64::from(self.target.settings.command_quiesce_timeout_ms));
        tracing::debug!(peer = %self.peer, writes = fence.writes_in_flight(),
            "preempt and abort: waiting for the preempted hosts' writes at storage");
        self.slots.slot(slot_index).state = SlotState::HeldPersist;
        self.held_tickets.push((
            slot_index,
            crate::outcome::HeldTicket::Fenced {
                inner,
                answer: std::cell::Cell::new(answer),
                fence,
                give_up_at: now + quiesce,
            },
        ));
        self.timers.fence_check_at = Some(now + Duration::from_millis(FENCE_CHECK_INTERVAL_MS));
        Outcome::Pending
    }

    /// Hands `change` to the gateway group and holds the command until the group
    /// answers (see `group_reservations`).
    fn change_in_group(
        &mut self,
        slot_index: u16,
        namespace: &crate::namespaces::Namespace,
        group: &SharedGroupReservations,
        change: ReservationChange,
        now: Instant,
    ) -> Outcome {
        let Some(key) = self.namespace_key(namespace) else { return Outcome::status(Status::INTERNAL_PATH_ERROR) };
        let ticket = ChangeTicket::new(self.storage.waker().cloned());
        group.apply(key, change, ticket.clone());
        let held = crate::outcome::HeldTicket::Group { ticket, nguid: namespace.nguid };
        if let Some((status, _)) = held.take(&self.target, now) {
            return Outcome::status(status);
        }
        self.slots.slot(slot_index).state = SlotState::HeldPersist;
        self.held_tickets.push((slot_index, held));
        Outcome::Pending
    }

    fn namespace_key(&self, namespace: &crate::namespaces::Namespace) -> Option<NamespaceKey> {
        let subsystem = self.binding.as_ref()?.controller.subsystem.clone()?;
        Some(NamespaceKey { subsystem_nqn: subsystem.nqn.clone(), namespace_id: namespace.id, nguid: namespace.nguid })
    }

    /// The gateway group's reservation authority of this controller's subsystem.
    pub(crate) fn group_reservations(&self) -> Option<SharedGroupReservations> {
        let subsystem = self.binding.as_ref()?.controller.subsystem.as_ref()?;
        subsystem.group_reservations().cloned()
    }

    /// True when reservations outlive this process: a reservation store (PTPL on
    /// disk) or a gateway group (the cluster keeps them).
    pub(crate) fn persistence_offered(&self) -> bool {
        self.reservation_store().is_some() || self.group_reservations().is_some()
    }

    /// The subsystem's reservation store, when Persist Through Power Loss is offered.
    pub(crate) fn reservation_store(&self) -> Option<crate::reservation_store::SharedReservationStore> {
        let subsystem = self.binding.as_ref()?.controller.subsystem.as_ref()?;
        subsystem.reservation_store().cloned()
    }

    /// After a change of `state` (still locked, so saves keep the order of changes):
    /// with PTPL on now or before, hands the new state to the store and holds the
    /// command until it is durable. Success at once otherwise.
    pub(crate) fn persist_reservations(
        &mut self,
        slot_index: u16,
        namespace: &crate::namespaces::Namespace,
        state: &crate::reservations::ReservationState,
        was_persistent: bool,
    ) -> Outcome {
        if !state.persist_through_power_loss && !was_persistent {
            return Outcome::status(Status::SUCCESS);
        }
        let Some(store) = self.reservation_store() else { return Outcome::status(Status::SUCCESS) };
        let Some(subsystem) = self.binding.as_ref().and_then(|binding| binding.controller.subsystem.clone()) else {
            return Outcome::status(Status::SUCCESS);
        };
        let key =
            NamespaceKey { subsystem_nqn: subsystem.nqn.clone(), namespace_id: namespace.id, nguid: namespace.nguid };
        let ticket = PersistTicket::new(self.storage.waker().cloned());
        // PTPL off: the record goes, so a restart starts without reservations.
        store.save(key, state.persist_through_power_loss.then(|| state.clone()), ticket.clone());
        if let Some(result) = ticket.take() {
            return Outcome::status(crate::ptpl::persist_status(result));
        }
        self.slots.slot(slot_index).state = SlotState::HeldPersist;
        self.held_tickets.push((slot_index, crate::outcome::HeldTicket::Persist(ticket)));
        Outcome::Pending
    }

    /// Set Features 83h (Reservation Persistence): PTPL on needs state that outlives
    /// the process (RESCAP bit 0); off forgets the saved record.
    pub(crate) fn set_reservation_persistence(
        &mut self,
        slot_index: u16,
        sqe: &SubmissionQueueEntry,
        persist: bool,
        now: Instant,
    ) -> Outcome {
        let nsid = match self.reservation_feature_namespace(sqe, false) {
            Ok(nsid) => nsid,
            Err(status) => return Outcome::status(status),
        };
        if !self.target.settings.reservations || (persist && !self.persistence_offered()) {
            return Outcome::status(invalid());
        }
        let Some(namespace) = self.view.get(nsid).cloned() else {
            return Outcome::status(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry());
        };
        match self.change_reservations(slot_index, &namespace, ReservationChange::SetPersistence { persist }, now) {
            Ok(outcome) => outcome,
            Err(status) => Outcome::status(status),
        }
    }

    /// Completes held commands whose work ended (reservation state made durable, a
    /// namespace change made, a fence drained); keeps the fence timer while one
    /// still waits.
    pub(crate) fn complete_persisted(&mut self, now: Instant) {
        let mut position = 0;
        while let Some((_, ticket)) = self.held_tickets.get(position) {
            let Some((status, result)) = ticket.take(&self.target, now) else {
                position += 1;
                continue;
            };
            let (slot_index, _) = self.held_tickets.swap_remove(position);
            self.complete(slot_index, status, result);
        }
        self.timers.fence_check_at = self
            .held_tickets
            .iter()
            .any(|(_, ticket)| ticket.is_fenced())
            .then(|| now + Duration::from_millis(FENCE_CHECK_INTERVAL_MS));
    }

    /// Reservation Report, extended data structure only: fabrics Host Identifiers are
    /// 128 bits, so EDS clear gets Host Identifier Inconsistent (as the Linux target).
    /// One entry per registrant, CNTLID FFFFh (see [`encode_report`]).
    pub(crate) fn io_reservation_report(
        &mut self,
        sqe: &SubmissionQueueEntry,
        slot_index: u16,
    ) -> Result<Outcome, Status> {
        let namespace = self
            .view
            .get(sqe.namespace_id())
            .cloned()
            .ok_or(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry())?;
        let sgl = sqe.sgl();
        if sgl.length > 0 && !sgl.is_transport() {
            return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_do_not_retry());
        }
        // NUMD (0's based dwords) is what is transferred. Bounded before anything is
        // allocated: more than the host's data buffer holds (or than one transfer
        // carries, which no buffer may exceed) is Data SGL Length Invalid, as reads
        // and Get Log Page answer a buffer too short for their transfer.
        let length = (u64::from(sqe.dwords[10]) + 1) * 4;
        if length > u64::from(sgl.length) || length > u64::from(MAX_RESERVATION_REPORT_BYTES) {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        if sqe.dwords[11] & 1 == 0 {
            return Err(Status::HOST_IDENTIFIER_INCONSISTENT.with_do_not_retry());
        }
        // A gateway whose copy of the group's state is unknown, or no longer vouched
        // for, does not report it.
        namespace.reservations.answerable(self.now)?;
        // At most MAX_RESERVATION_REPORT_BYTES, checked above.
        let mut buffer = self.pool.take_zeroed(length as usize);
        encode_report(&namespace.reservations.lock(), &mut buffer);
        self.slots.slot(slot_index).buffer = buffer;
        Ok(Outcome::Data(length as u32))
    }
}

/// Writes the extended Reservation Status data structure of `state` into `out`, as
/// much of it as `out` holds (the rest of `out` is left as it is: zeroes).
///
/// The report is the namespace's state and nothing of this process's: one Registered
/// Controller entry per registrant (registrations belong to Host Identifiers, not to
/// controllers), each with CNTLID FFFFh, the dynamic controller model's value. So a
/// gateway group's report is the same through every gateway, whichever gateway the
/// host's controllers are on, and a single target reports by the same rule. REGCTL
/// counts every registrant, also those past the end of `out`.
pub(crate) fn encode_report(state: &ReservationState, out: &mut [u8]) {
    let mut header = [0u8; REPORT_HEADER_BYTES];
    header[0..4].copy_from_slice(&state.generation.to_le_bytes());
    header[4] = state.holder.map_or(0, |holder| holder.kind as u8);
    let registered = u16::try_from(state.registrants.len()).unwrap_or(u16::MAX);
    header[5..7].copy_from_slice(&registered.to_le_bytes());
    header[9] = u8::from(state.persist_through_power_loss);
    copy_into(out, 0, &header);
    for (index, registrant) in state.registrants.iter().enumerate() {
        let offset = REPORT_HEADER_BYTES + index * REPORT_ENTRY_BYTES;
        if offset >= out.len() {
            break;
        }
        let mut entry = [0u8; REPORT_ENTRY_BYTES];
        entry[0..2].copy_from_slice(&DYNAMIC_CONTROLLER.to_le_bytes());
        entry[2] = u8::from(state.holds(&registrant.host));
        entry[8..16].copy_from_slice(&registrant.key.to_le_bytes());
        entry[16..32].copy_from_slice(&registrant.host);
        copy_into(out, offset, &entry);
    }
}

/// Copies as much of `bytes` as fits into `out` from `offset` on.
fn copy_into(out: &mut [u8], offset: usize, bytes: &[u8]) {
    if let Some(target) = out.get_mut(offset..) {
        for (byte, value) in target.iter_mut().zip(bytes) {
            *byte = *value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservations::{Holder, Registrant};

    fn state(kind: ReservationType, holder: Option<u8>) -> ReservationState {
        ReservationState {
            generation: 9,
            registrants: (1..=3).map(|host| Registrant { host: [host; 16], key: u64::from(host) * 0x11 }).collect(),
            holder: Some(Holder { kind, host: holder.map(|host| [host; 16]) }),
            persist_through_power_loss: true,
        }
    }

    fn entry(report: &[u8], index: usize) -> &[u8] {
        &report[REPORT_HEADER_BYTES + index * REPORT_ENTRY_BYTES..][..REPORT_ENTRY_BYTES]
    }

    #[test]
    fn the_report_lists_each_registrant_once_with_cntlid_ffffh() {
        let mut report = vec![0u8; REPORT_HEADER_BYTES + 4 * REPORT_ENTRY_BYTES];
        encode_report(&state(ReservationType::WriteExclusive, Some(2)), &mut report);
        assert_eq!(report[0..4], 9u32.to_le_bytes());
        assert_eq!((report[4], u16::from_le_bytes([report[5], report[6]]), report[9]), (1, 3, 1));
        for index in 0..3 {
            let host = index as u8 + 1;
            let entry = entry(&report, index);
            assert_eq!(entry[0..2], [0xFF, 0xFF], "CNTLID FFFFh");
            assert_eq!(entry[2], u8::from(host == 2), "only the holder holds");
            assert_eq!(entry[8..16], (u64::from(host) * 0x11).to_le_bytes());
            assert_eq!(entry[16..32], [host; 16]);
        }
        assert!(entry(&report, 3).iter().all(|&byte| byte == 0), "no fourth entry");
        // All-registrants types: every registrant holds.
        encode_report(&state(ReservationType::ExclusiveAccessAllRegistrants, None), &mut report);
        assert!((0..3).all(|index| entry(&report, index)[2] == 1));
    }

    #[test]
    fn a_short_buffer_gets_the_start_of_the_report_and_the_full_count() {
        let whole = {
            let mut whole = vec![0u8; REPORT_HEADER_BYTES + 3 * REPORT_ENTRY_BYTES];
            encode_report(&state(ReservationType::WriteExclusive, Some(1)), &mut whole);
            whole
        };
        for length in [0, 4, 63, 64, 65, 100, 128, 150] {
            let mut report = vec![0u8; length];
            encode_report(&state(ReservationType::WriteExclusive, Some(1)), &mut report);
            assert_eq!(report, whole[..length], "{length} bytes");
        }
    }
}

//! Reservation Register, Acquire, Release and Report (I/O opcodes 0Dh, 11h, 15h, 0Eh)
//! over the namespace's [`Reservations`](crate::reservations::Reservations), and the
//! notifications they send to other hosts' controllers.

use std::time::{Duration, Instant};

use nvme_spec::{NamespaceId, Status, SubmissionQueueEntry};

use crate::connection::Connection;
use crate::group_reservations::{ChangeTicket, ReservationChange, SharedGroupReservations};
use crate::limits::{FENCE_CHECK_INTERVAL_MS, MAX_DATA_TRANSFER_BYTES};
use crate::outcome::Outcome;
use crate::reservation_store::{NamespaceKey, PersistTicket};
use crate::reservations::{AcquireAction, Effects, HostId, RegisterAction, ReleaseAction, ReservationType};
use crate::slots::SlotState;

/// Bytes of the extended Reservation Status header and of each extended Registered
/// Controller data structure (128-bit Host Identifiers, the only kind fabrics use).
const REPORT_HEADER_BYTES: usize = 64;
const REPORT_ENTRY_BYTES: usize = 64;
/// CNTLID of a registrant with no controller now (dynamic controller model).
const NO_CONTROLLER: u16 = 0xFFFF;

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
        let namespace = self.view.get(sqe.namespace_id()).cloned().ok_or(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry())?;
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
        let Some(subsystem) = self.binding.as_ref().and_then(|binding| binding.controller.subsystem.clone()) else { return };
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
            ignore_key: cdw10 & (1 << 3) != 0,
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
        let change = ReservationChange::Acquire {
            host,
            action,
            kind,
            current_key: key_at(&data, 0),
            preempt_key: key_at(&data, 8),
            ignore_key: cdw10 & (1 << 3) != 0,
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
        let change = ReservationChange::Release {
            host,
            action,
            kind,
            current_key: key_at(&data, 0),
            ignore_key: cdw10 & (1 << 3) != 0,
        };
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
                let position = self
                    .held_tickets
                    .iter()
                    .rposition(|(slot, _)| *slot == slot_index);
                match position {
                    Some(position) => (
                        Some(Box::new(self.held_tickets.swap_remove(position).1)),
                        None,
                    ),
                    None => return outcome,
                }
            }
            // Reservation changes return no data.
            Outcome::Data(_) => return outcome,
        };
        let quiesce =
            Duration::from_millis(u64::from(self.target.settings.command_quiesce_timeout_ms));
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
        let held = crate::outcome::HeldTicket::Group {
            ticket,
            nguid: namespace.nguid,
        };
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
        let key = NamespaceKey { subsystem_nqn: subsystem.nqn.clone(), namespace_id: namespace.id, nguid: namespace.nguid };
        let ticket = PersistTicket::new(self.storage.waker().cloned());
        // PTPL off: the record goes, so a restart starts without reservations.
        store.save(key, state.persist_through_power_loss.then(|| state.clone()), ticket.clone());
        if let Some(result) = ticket.take() {
            return Outcome::status(crate::reservation_store::persist_status(result));
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
        match self.change_reservations(
            slot_index,
            &namespace,
            ReservationChange::SetPersistence { persist },
            now,
        ) {
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
    pub(crate) fn io_reservation_report(&mut self, sqe: &SubmissionQueueEntry, slot_index: u16) -> Result<Outcome, Status> {
        let namespace = self.view.get(sqe.namespace_id()).cloned().ok_or(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry())?;
        let sgl = sqe.sgl();
        if sgl.length > 0 && !sgl.is_transport() {
            return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_do_not_retry());
        }
        let length = ((u64::from(sqe.dwords[10]) + 1) * 4).min(u64::from(sgl.length));
        if length > u64::from(MAX_DATA_TRANSFER_BYTES) {
            return Err(invalid());
        }
        if sqe.dwords[11] & 1 == 0 {
            return Err(Status::HOST_IDENTIFIER_INCONSISTENT.with_do_not_retry());
        }
        // A gateway whose copy of the group's state is unknown does not report it.
        if namespace.reservations.is_unknown() {
            return Err(Status::INTERNAL_PATH_ERROR);
        }
        let state = namespace.reservations.lock().clone();
        let controllers = self
            .binding
            .as_ref()
            .and_then(|binding| binding.controller.subsystem.clone())
            .map(|subsystem| self.target.controllers_of(subsystem.index))
            .unwrap_or_default();
        // One entry per controller of a registered host, or one without a controller.
        let mut entries: Vec<(u16, bool, u64, HostId)> = Vec::new();
        for registrant in &state.registrants {
            let holds = state.holds(&registrant.host);
            let mut ids: Vec<u16> = controllers
                .iter()
                .filter(|controller| controller.host_identifier == registrant.host)
                .map(|controller| controller.id.0)
                .collect();
            ids.sort_unstable();
            if ids.is_empty() {
                ids.push(NO_CONTROLLER);
            }
            entries.extend(ids.into_iter().map(|id| (id, holds, registrant.key, registrant.host)));
        }
        let mut report = Vec::with_capacity(REPORT_HEADER_BYTES + entries.len() * REPORT_ENTRY_BYTES);
        let mut header = [0u8; REPORT_HEADER_BYTES];
        header[0..4].copy_from_slice(&state.generation.to_le_bytes());
        header[4] = state.holder.map_or(0, |holder| holder.kind as u8);
        header[5..7].copy_from_slice(&(entries.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
        header[9] = u8::from(state.persist_through_power_loss);
        report.extend_from_slice(&header);
        for (controller, holds, key, host) in &entries {
            let mut entry = [0u8; REPORT_ENTRY_BYTES];
            entry[0..2].copy_from_slice(&controller.to_le_bytes());
            entry[2] = u8::from(*holds);
            entry[8..16].copy_from_slice(&key.to_le_bytes());
            entry[16..32].copy_from_slice(host);
            report.extend_from_slice(&entry);
        }
        let mut buffer = self.pool.take_zeroed(length as usize);
        // As much of the report as the host asked for; the rest stays zero.
        for (byte, reported) in buffer.iter_mut().zip(&report) {
            *byte = *reported;
        }
        self.slots.slot(slot_index).buffer = buffer;
        Ok(Outcome::Data(length as u32))
    }
}

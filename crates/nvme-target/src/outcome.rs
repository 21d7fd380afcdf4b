//! What a command handler decided: the one type every handler returns, kept apart
//! from the dispatcher so handlers depend on it and not on each other.

use nvme_spec::Status;

/// What a command handler decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Respond now with this status and DW1:DW0 result.
    Done(Status, u64),
    /// Respond with success after sending the first `bytes` of the slot's buffer.
    Data(u32),
    /// The command continues later (storage in flight, held AER).
    Pending,
}

impl Outcome {
    pub(crate) fn status(status: Status) -> Self {
        Outcome::Done(status, 0)
    }
}

/// A command held until work on the service executor or the reservation store ends
/// (slot state `HeldPersist`): its answer comes from the ticket.
pub(crate) enum HeldTicket {
    /// A reservation change being made durable: success, or Internal Error.
    Persist(crate::reservation_store::PersistTicket),
    /// A Namespace Management or Attachment change: its status and DW0.
    Management(storage::service::Ticket<(Status, u64)>),
    /// A reservation change in a gateway group's authority, for the namespace with
    /// this NGUID.
    Group { ticket: crate::group_reservations::ChangeTicket, nguid: [u8; 16] },
    /// A Preempt and Abort whose answer (ready in `answer`, or `inner`'s once it
    /// ends) waits until the preempted hosts' writes at storage have completed
    /// (`write_fence`), or until `give_up_at`.
    Fenced {
        inner: Option<Box<HeldTicket>>,
        answer: std::cell::Cell<Option<(Status, u64)>>,
        fence: crate::write_fence::WriteFence,
        give_up_at: std::time::Instant,
    },
}

impl HeldTicket {
    /// The command's answer once the work ended.
    /// A group's answer installs the state it returns on this gateway (and its
    /// notices) before the command completes.
    pub(crate) fn take(&self, target: &crate::Target, now: std::time::Instant) -> Option<(Status, u64)> {
        match self {
            HeldTicket::Persist(ticket) => ticket.take().map(|result| (crate::ptpl::persist_status(result), 0)),
            HeldTicket::Management(ticket) => ticket.take(),
            HeldTicket::Group { ticket, nguid } => ticket.take().map(|result| match result {
                Ok(applied) => {
                    target.install_group_answer(nguid, &applied.update);
                    (applied.status, 0)
                }
                Err(error) => (crate::group_reservations::unreachable_status(&error), 0),
            }),
            HeldTicket::Fenced { inner, answer, fence, give_up_at } => {
                if answer.get().is_none() {
                    answer.set(inner.as_ref().and_then(|inner| inner.take(target, now)));
                }
                let ready = answer.get()?;
                if fence.is_drained() {
                    return Some(ready);
                }
                if now < *give_up_at {
                    return None;
                }
                crate::stats::TargetCounters::count(&target.counters.fence_timeouts);
                tracing::warn!(
                    writes = fence.writes_in_flight(),
                    "preempt and abort: the preempted hosts' writes did not complete within \
                     command_quiesce_timeout_ms; answered anyway (they may still land)"
                );
                Some(ready)
            }
        }
    }

    /// True for a command waiting for a fence (polled by the connection's timer).
    pub(crate) fn is_fenced(&self) -> bool {
        matches!(self, HeldTicket::Fenced { .. })
    }
}

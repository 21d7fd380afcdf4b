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
}

impl HeldTicket {
    /// The command's answer once the work ended.
    pub(crate) fn take(&self) -> Option<(Status, u64)> {
        match self {
            HeldTicket::Persist(ticket) => ticket.take().map(|result| (crate::reservation_store::persist_status(result), 0)),
            HeldTicket::Management(ticket) => ticket.take(),
        }
    }
}

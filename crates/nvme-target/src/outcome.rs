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
}

impl HeldTicket {
    /// The command's answer once the work ended.
    /// A group's answer installs the state it returns on this gateway (and its
    /// notices) before the command completes.
    pub(crate) fn take(&self, target: &crate::Target) -> Option<(Status, u64)> {
        match self {
            HeldTicket::Persist(ticket) => ticket.take().map(|result| (crate::reservation_store::persist_status(result), 0)),
            HeldTicket::Management(ticket) => ticket.take(),
            HeldTicket::Group { ticket, nguid } => ticket.take().map(|result| match result {
                Ok(applied) => {
                    target.install_group_answer(nguid, &applied.update);
                    (applied.status, 0)
                }
                Err(error) => (crate::group_reservations::unreachable_status(&error), 0),
            }),
        }
    }
}

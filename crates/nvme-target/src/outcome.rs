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

//! Error completions by kind, for the metrics (`errors by status` on a dashboard):
//! a handful of classes an operator acts on differently, rather than every status
//! code (a label per code would multiply the series for little gain).

use nvme_spec::Status;

/// What kind of error a completion status is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The host sent something this target refuses: invalid opcode, field,
    /// namespace, SGL or sequence (a host or a driver bug, or an unsupported feature).
    InvalidCommand,
    /// LBA Out of Range or Capacity Exceeded: the host addressed past the namespace.
    OutOfRange,
    /// Reservation Conflict: another host holds the namespace.
    ReservationConflict,
    /// Compare Failure: a Compare (or VMware's ATS) found other data; not a fault.
    CompareFailure,
    /// Media and data integrity errors: the storage failed the command.
    Media,
    /// Path errors (ANA inaccessible, transition, persistent loss): the host should
    /// use another path.
    Path,
    /// Aborted: by request, at queue deletion, by a preempt, or a fused partner.
    Aborted,
    /// Namespace Not Ready: the storage is not there yet (or any more).
    NotReady,
    /// Command-specific statuses (Connect refusals, queue and log page errors).
    CommandSpecific,
    /// Anything else (Internal Error, transport errors).
    Other,
}

impl ErrorClass {
    /// Every class, in counter order.
    pub const ALL: [ErrorClass; 10] = [
        ErrorClass::InvalidCommand,
        ErrorClass::OutOfRange,
        ErrorClass::ReservationConflict,
        ErrorClass::CompareFailure,
        ErrorClass::Media,
        ErrorClass::Path,
        ErrorClass::Aborted,
        ErrorClass::NotReady,
        ErrorClass::CommandSpecific,
        ErrorClass::Other,
    ];

    /// The class of an error status (by status code type and code; DNR and More do
    /// not matter).
    pub fn of(status: Status) -> Self {
        const GENERIC: u8 = 0;
        const COMMAND_SPECIFIC: u8 = 1;
        const MEDIA: u8 = 2;
        const PATH: u8 = 3;
        let same = |other: Status| status.code_type() == other.code_type() && status.code() == other.code();
        match status.code_type() {
            GENERIC if same(Status::LBA_OUT_OF_RANGE) || same(Status::CAPACITY_EXCEEDED) => ErrorClass::OutOfRange,
            GENERIC if same(Status::RESERVATION_CONFLICT) => ErrorClass::ReservationConflict,
            GENERIC if same(Status::NAMESPACE_NOT_READY) => ErrorClass::NotReady,
            GENERIC
                if [
                    Status::ABORTED_BY_REQUEST,
                    Status::ABORTED_SQ_DELETION,
                    Status::ABORTED_FAILED_FUSED,
                    Status::ABORTED_MISSING_FUSED,
                    Status::ABORTED_POWER_LOSS,
                    Status::COMMAND_ABORTED_PREEMPT,
                ]
                .into_iter()
                .any(same) =>
            {
                ErrorClass::Aborted
            }
            GENERIC
                if same(Status::INTERNAL_ERROR)
                    || same(Status::DATA_TRANSFER_ERROR)
                    || same(Status::TRANSIENT_TRANSPORT_ERROR)
                    || same(Status::KEEP_ALIVE_TIMER_EXPIRED) =>
            {
                ErrorClass::Other
            }
            GENERIC => ErrorClass::InvalidCommand,
            COMMAND_SPECIFIC => ErrorClass::CommandSpecific,
            MEDIA if same(Status::COMPARE_FAILURE) => ErrorClass::CompareFailure,
            MEDIA => ErrorClass::Media,
            PATH => ErrorClass::Path,
            _ => ErrorClass::Other,
        }
    }

    /// The metric label.
    pub const fn label(self) -> &'static str {
        match self {
            ErrorClass::InvalidCommand => "invalid_command",
            ErrorClass::OutOfRange => "out_of_range",
            ErrorClass::ReservationConflict => "reservation_conflict",
            ErrorClass::CompareFailure => "compare_failure",
            ErrorClass::Media => "media",
            ErrorClass::Path => "path",
            ErrorClass::Aborted => "aborted",
            ErrorClass::NotReady => "not_ready",
            ErrorClass::CommandSpecific => "command_specific",
            ErrorClass::Other => "other",
        }
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_fall_in_the_class_an_operator_acts_on() {
        let cases = [
            (Status::INVALID_FIELD.with_do_not_retry(), ErrorClass::InvalidCommand),
            (Status::INVALID_OPCODE, ErrorClass::InvalidCommand),
            (Status::LBA_OUT_OF_RANGE.with_do_not_retry(), ErrorClass::OutOfRange),
            (Status::RESERVATION_CONFLICT, ErrorClass::ReservationConflict),
            (Status::COMPARE_FAILURE, ErrorClass::CompareFailure),
            (Status::WRITE_FAULT, ErrorClass::Media),
            (Status::UNRECOVERED_READ_ERROR, ErrorClass::Media),
            (Status::ASYMMETRIC_ACCESS_TRANSITION, ErrorClass::Path),
            (Status::ASYMMETRIC_ACCESS_INACCESSIBLE, ErrorClass::Path),
            (Status::ABORTED_BY_REQUEST, ErrorClass::Aborted),
            (Status::COMMAND_ABORTED_PREEMPT, ErrorClass::Aborted),
            (Status::NAMESPACE_NOT_READY, ErrorClass::NotReady),
            (Status::CONNECT_INVALID_HOST, ErrorClass::CommandSpecific),
            (Status::INTERNAL_ERROR, ErrorClass::Other),
        ];
        for (status, class) in cases {
            assert_eq!(ErrorClass::of(status), class, "{status:?}");
        }
        let labels: std::collections::HashSet<_> = ErrorClass::ALL.iter().map(|class| class.label()).collect();
        assert_eq!(labels.len(), ErrorClass::ALL.len(), "labels are distinct");
        assert!(ErrorClass::ALL.iter().enumerate().all(|(index, class)| class.index() == index));
    }
}

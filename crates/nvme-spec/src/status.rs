//! The completion status field: SCT, SC, CRD, M, DNR (NVMe Base 2.0, "Status Field").

/// SCT: status code type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StatusCodeType {
    Generic = 0x0,
    CommandSpecific = 0x1,
    MediaAndDataIntegrity = 0x2,
    PathRelated = 0x3,
    VendorSpecific = 0x7,
}

/// The 15-bit status field of a CQE, without the phase tag:
/// SC bits 7:0, SCT bits 10:8, CRD bits 12:11, M bit 13, DNR bit 14.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Status(u16);

const SCT_SHIFT: u16 = 8;
const MORE_BIT: u16 = 1 << 13;
const DO_NOT_RETRY_BIT: u16 = 1 << 14;

impl Status {
    /// Builds a status from its type and code, with M and DNR clear.
    pub const fn new(code_type: StatusCodeType, code: u8) -> Self {
        Self(((code_type as u16) << SCT_SHIFT) | code as u16)
    }

    /// Builds from the raw 15-bit field (the CQE status halfword shifted right by one).
    pub const fn from_field(field: u16) -> Self {
        Self(field & 0x7FFF)
    }

    /// The raw 15-bit field.
    pub const fn field(self) -> u16 {
        self.0
    }

    /// Sets DNR: do not retry. Used when repeating the command cannot succeed.
    pub const fn with_do_not_retry(self) -> Self {
        Self(self.0 | DO_NOT_RETRY_BIT)
    }

    /// Sets M: more status information is in the Error Information log page.
    pub const fn with_more(self) -> Self {
        Self(self.0 | MORE_BIT)
    }

    /// SC: status code.
    pub const fn code(self) -> u8 {
        self.0 as u8
    }

    /// SCT as a raw 3-bit value.
    pub const fn code_type(self) -> u8 {
        ((self.0 >> SCT_SHIFT) & 0b111) as u8
    }

    /// DNR: do not retry.
    pub const fn do_not_retry(self) -> bool {
        self.0 & DO_NOT_RETRY_BIT != 0
    }

    /// True when SCT and SC are both zero.
    pub const fn is_success(self) -> bool {
        self.0 & 0x7FF == 0
    }

    /// SCT and SC without the retry and more bits, for comparing kinds of failure.
    pub const fn kind(self) -> Self {
        Self(self.0 & 0x7FF)
    }

    // Generic command status (SCT 0h).
    pub const SUCCESS: Status = Status::new(StatusCodeType::Generic, 0x00);
    pub const INVALID_OPCODE: Status = Status::new(StatusCodeType::Generic, 0x01);
    pub const INVALID_FIELD: Status = Status::new(StatusCodeType::Generic, 0x02);
    pub const COMMAND_ID_CONFLICT: Status = Status::new(StatusCodeType::Generic, 0x03);
    pub const DATA_TRANSFER_ERROR: Status = Status::new(StatusCodeType::Generic, 0x04);
    pub const ABORTED_POWER_LOSS: Status = Status::new(StatusCodeType::Generic, 0x05);
    pub const INTERNAL_ERROR: Status = Status::new(StatusCodeType::Generic, 0x06);
    pub const ABORTED_BY_REQUEST: Status = Status::new(StatusCodeType::Generic, 0x07);
    pub const ABORTED_SQ_DELETION: Status = Status::new(StatusCodeType::Generic, 0x08);
    /// Command Aborted due to Failed Fused Command: the other command of the pair failed.
    pub const ABORTED_FAILED_FUSED: Status = Status::new(StatusCodeType::Generic, 0x09);
    /// Command Aborted due to Missing Fused Command: a fused command without its partner.
    pub const ABORTED_MISSING_FUSED: Status = Status::new(StatusCodeType::Generic, 0x0A);
    pub const INVALID_NAMESPACE_OR_FORMAT: Status = Status::new(StatusCodeType::Generic, 0x0B);
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::new(StatusCodeType::Generic, 0x0C);
    pub const INVALID_SGL_LAST_SEGMENT: Status = Status::new(StatusCodeType::Generic, 0x0D);
    pub const INVALID_SGL_DESCRIPTOR_COUNT: Status = Status::new(StatusCodeType::Generic, 0x0E);
    pub const DATA_SGL_LENGTH_INVALID: Status = Status::new(StatusCodeType::Generic, 0x0F);
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status = Status::new(StatusCodeType::Generic, 0x11);
    pub const INVALID_SGL_OFFSET: Status = Status::new(StatusCodeType::Generic, 0x16);
    pub const HOST_IDENTIFIER_INCONSISTENT: Status = Status::new(StatusCodeType::Generic, 0x18);
    pub const KEEP_ALIVE_TIMER_EXPIRED: Status = Status::new(StatusCodeType::Generic, 0x19);
    pub const INVALID_KEEP_ALIVE_TIMEOUT: Status = Status::new(StatusCodeType::Generic, 0x1A);
    pub const COMMAND_ABORTED_PREEMPT: Status = Status::new(StatusCodeType::Generic, 0x1B);
    pub const TRANSIENT_TRANSPORT_ERROR: Status = Status::new(StatusCodeType::Generic, 0x22);
    pub const LBA_OUT_OF_RANGE: Status = Status::new(StatusCodeType::Generic, 0x80);
    pub const CAPACITY_EXCEEDED: Status = Status::new(StatusCodeType::Generic, 0x81);
    pub const NAMESPACE_NOT_READY: Status = Status::new(StatusCodeType::Generic, 0x82);
    /// The command conflicts with a reservation held on the namespace (never with
    /// DNR: the reservation may change).
    pub const RESERVATION_CONFLICT: Status = Status::new(StatusCodeType::Generic, 0x83);

    // Command specific status (SCT 1h).
    pub const INVALID_QUEUE_IDENTIFIER: Status = Status::new(StatusCodeType::CommandSpecific, 0x01);
    /// Command Size Limit Exceeded (NVM command set, Copy): a copy beyond MSRC,
    /// MSSRL or MCL.
    pub const COMMAND_SIZE_LIMIT_EXCEEDED: Status = Status::new(StatusCodeType::CommandSpecific, 0x83);
    pub const INVALID_QUEUE_SIZE: Status = Status::new(StatusCodeType::CommandSpecific, 0x02);
    pub const ABORT_COMMAND_LIMIT_EXCEEDED: Status = Status::new(StatusCodeType::CommandSpecific, 0x03);
    pub const ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED: Status = Status::new(StatusCodeType::CommandSpecific, 0x05);
    pub const INVALID_FIRMWARE_SLOT: Status = Status::new(StatusCodeType::CommandSpecific, 0x06);
    pub const INVALID_LOG_PAGE: Status = Status::new(StatusCodeType::CommandSpecific, 0x09);
    pub const FEATURE_IDENTIFIER_NOT_SAVEABLE: Status = Status::new(StatusCodeType::CommandSpecific, 0x0D);
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::new(StatusCodeType::CommandSpecific, 0x0E);
    /// Namespace Management / Format: the LBA format (FLBAS) or protection settings
    /// are not supported.
    pub const INVALID_FORMAT: Status = Status::new(StatusCodeType::CommandSpecific, 0x0A);
    pub const NAMESPACE_INSUFFICIENT_CAPACITY: Status = Status::new(StatusCodeType::CommandSpecific, 0x15);
    pub const NAMESPACE_IDENTIFIER_UNAVAILABLE: Status = Status::new(StatusCodeType::CommandSpecific, 0x16);
    pub const NAMESPACE_ALREADY_ATTACHED: Status = Status::new(StatusCodeType::CommandSpecific, 0x18);
    /// Namespace Attachment: the namespace is private and cannot be attached to more
    /// controllers.
    pub const NAMESPACE_IS_PRIVATE: Status = Status::new(StatusCodeType::CommandSpecific, 0x19);
    pub const NAMESPACE_NOT_ATTACHED: Status = Status::new(StatusCodeType::CommandSpecific, 0x1A);
    /// Namespace Management: NCAP below NSZE asks for thin provisioning, which the
    /// controller does not offer.
    pub const THIN_PROVISIONING_NOT_SUPPORTED: Status = Status::new(StatusCodeType::CommandSpecific, 0x1B);
    pub const CONTROLLER_LIST_INVALID: Status = Status::new(StatusCodeType::CommandSpecific, 0x1C);
    pub const CONFLICTING_ATTRIBUTES: Status = Status::new(StatusCodeType::CommandSpecific, 0x80);
    /// Fabrics Connect: the Connect command or data format is not supported.
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::new(StatusCodeType::CommandSpecific, 0x80);
    /// Fabrics Connect: the controller is busy (e.g. no controller id left).
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::new(StatusCodeType::CommandSpecific, 0x81);
    /// Fabrics Connect: a parameter is invalid; DW0 carries IATTR and IPO.
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::new(StatusCodeType::CommandSpecific, 0x82);
    /// Fabrics Connect: restart discovery.
    pub const CONNECT_RESTART_DISCOVERY: Status = Status::new(StatusCodeType::CommandSpecific, 0x83);
    /// Fabrics Connect: the host is not allowed to connect.
    pub const CONNECT_INVALID_HOST: Status = Status::new(StatusCodeType::CommandSpecific, 0x84);
    /// Fabrics: property offset or size is not supported.
    pub const INVALID_PROPERTY: Status = Status::new(StatusCodeType::CommandSpecific, 0x8A);

    // Media and data integrity errors (SCT 2h).
    pub const WRITE_FAULT: Status = Status::new(StatusCodeType::MediaAndDataIntegrity, 0x80);
    pub const UNRECOVERED_READ_ERROR: Status = Status::new(StatusCodeType::MediaAndDataIntegrity, 0x81);
    pub const COMPARE_FAILURE: Status = Status::new(StatusCodeType::MediaAndDataIntegrity, 0x85);
    pub const ACCESS_DENIED: Status = Status::new(StatusCodeType::MediaAndDataIntegrity, 0x86);
    pub const DEALLOCATED_OR_UNWRITTEN_BLOCK: Status = Status::new(StatusCodeType::MediaAndDataIntegrity, 0x87);

    // Path related status (SCT 3h): never with DNR, so the host retries the command
    // on another path (and reads the ANA log).
    /// This path cannot serve the command now (e.g. its gateway lost the group's
    /// reservation state); another path may.
    pub const INTERNAL_PATH_ERROR: Status = Status::new(StatusCodeType::PathRelated, 0x00);
    /// The namespace's ANA group is in the Persistent Loss state on this path.
    pub const ASYMMETRIC_ACCESS_PERSISTENT_LOSS: Status = Status::new(StatusCodeType::PathRelated, 0x01);
    /// The namespace's ANA group is Inaccessible on this path.
    pub const ASYMMETRIC_ACCESS_INACCESSIBLE: Status = Status::new(StatusCodeType::PathRelated, 0x02);
    /// The namespace's ANA group is changing state on this path.
    pub const ASYMMETRIC_ACCESS_TRANSITION: Status = Status::new(StatusCodeType::PathRelated, 0x03);
}

impl core::fmt::Debug for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Status(sct={:#x}, sc={:#04x}", self.code_type(), self.code())?;
        if self.do_not_retry() {
            f.write_str(", dnr")?;
        }
        if self.0 & MORE_BIT != 0 {
            f.write_str(", more")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_where_the_spec_puts_them() {
        let status = Status::CONNECT_INVALID_HOST.with_do_not_retry();
        assert_eq!(status.code(), 0x84);
        assert_eq!(status.code_type(), 1);
        assert!(status.do_not_retry());
        assert_eq!(status.field(), 0x84 | (1 << 8) | (1 << 14));
        assert!(!status.is_success());
        assert!(Status::SUCCESS.is_success());
        assert_eq!(status.kind(), Status::CONNECT_INVALID_HOST);
        assert_eq!(Status::from_field(0xFFFF).field(), 0x7FFF);
    }
}

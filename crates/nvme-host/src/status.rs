//! Human-readable NVMe completion statuses, for error messages:
//! `LBA out of range (SCT 0h SC 80h, DNR)`.

use nvme_spec::Status;

/// SCT 3h (path related), SC 70h: Host Pathing Error. What a host reports for a
/// command it could not deliver because the path (here: the controller association)
/// is gone, as Linux does once `ctrl_loss_tmo` expires.
pub const HOST_PATHING_ERROR: Status = Status::new(nvme_spec::status::StatusCodeType::PathRelated, 0x70);

/// SCT 3h, SC 71h: Command Aborted By Host. Reported for a command the host gave up
/// on (timed out), as Linux does.
pub const COMMAND_ABORTED_BY_HOST: Status = Status::new(nvme_spec::status::StatusCodeType::PathRelated, 0x71);

/// The spec's name for a status (SCT and SC), or a generic one for codes not listed.
pub fn status_name(status: Status) -> &'static str {
    match (status.code_type(), status.code()) {
        (0x0, 0x00) => "Successful completion",
        (0x0, 0x01) => "Invalid command opcode",
        (0x0, 0x02) => "Invalid field in command",
        (0x0, 0x03) => "Command ID conflict",
        (0x0, 0x04) => "Data transfer error",
        (0x0, 0x05) => "Commands aborted due to power loss notification",
        (0x0, 0x06) => "Internal error",
        (0x0, 0x07) => "Command abort requested",
        (0x0, 0x08) => "Command aborted due to SQ deletion",
        (0x0, 0x09) => "Command aborted due to failed fused command",
        (0x0, 0x0A) => "Command aborted due to missing fused command",
        (0x0, 0x0B) => "Invalid namespace or format",
        (0x0, 0x0C) => "Command sequence error",
        (0x0, 0x0D) => "Invalid SGL segment descriptor",
        (0x0, 0x0E) => "Invalid number of SGL descriptors",
        (0x0, 0x0F) => "Data SGL length invalid",
        (0x0, 0x10) => "Metadata SGL length invalid",
        (0x0, 0x11) => "SGL descriptor type invalid",
        (0x0, 0x16) => "Invalid SGL offset",
        (0x0, 0x18) => "Host identifier inconsistent format",
        (0x0, 0x19) => "Keep alive timer expired",
        (0x0, 0x1A) => "Keep alive timeout invalid",
        (0x0, 0x1B) => "Command aborted due to preempt and abort",
        (0x0, 0x1D) => "Operation denied",
        (0x0, 0x20) => "Namespace is write protected",
        (0x0, 0x21) => "Command interrupted",
        (0x0, 0x22) => "Transient transport error",
        (0x0, 0x80) => "LBA out of range",
        (0x0, 0x81) => "Capacity exceeded",
        (0x0, 0x82) => "Namespace not ready",
        (0x0, 0x83) => "Reservation conflict",
        (0x0, 0x84) => "Format in progress",
        (0x1, 0x01) => "Invalid queue identifier",
        (0x1, 0x02) => "Invalid queue size",
        (0x1, 0x03) => "Abort command limit exceeded",
        (0x1, 0x05) => "Asynchronous event request limit exceeded",
        (0x1, 0x06) => "Invalid firmware slot",
        (0x1, 0x07) => "Invalid firmware image",
        (0x1, 0x09) => "Invalid log page",
        (0x1, 0x0A) => "Invalid format",
        (0x1, 0x0D) => "Feature identifier not saveable",
        (0x1, 0x0E) => "Feature not changeable",
        (0x1, 0x0F) => "Feature not namespace specific",
        (0x1, 0x15) => "Namespace insufficient capacity",
        (0x1, 0x16) => "Namespace identifier unavailable",
        (0x1, 0x18) => "Namespace already attached",
        (0x1, 0x1A) => "Namespace not attached",
        (0x1, 0x1C) => "Controller list invalid",
        (0x1, 0x80) => "Conflicting attributes / Connect incompatible format",
        (0x1, 0x81) => "Invalid protection information / Connect controller busy",
        (0x1, 0x82) => "Attempted write to read only range / Connect invalid parameters",
        (0x1, 0x83) => "Connect restart discovery",
        (0x1, 0x84) => "Connect invalid host",
        (0x1, 0x8A) => "Invalid property",
        (0x2, 0x80) => "Write fault",
        (0x2, 0x81) => "Unrecovered read error",
        (0x2, 0x82) => "End-to-end guard check error",
        (0x2, 0x83) => "End-to-end application tag check error",
        (0x2, 0x84) => "End-to-end reference tag check error",
        (0x2, 0x85) => "Compare failure",
        (0x2, 0x86) => "Access denied",
        (0x2, 0x87) => "Deallocated or unwritten logical block",
        (0x3, 0x00) => "Internal path error",
        (0x3, 0x01) => "Asymmetric access persistent loss",
        (0x3, 0x02) => "Asymmetric access inaccessible",
        (0x3, 0x03) => "Asymmetric access transition",
        (0x3, 0x60) => "Controller pathing error",
        (0x3, 0x70) => "Host pathing error",
        (0x3, 0x71) => "Command aborted by host",
        (0x0, _) => "Unknown generic status",
        (0x1, _) => "Unknown command specific status",
        (0x2, _) => "Unknown media or data integrity error",
        (0x3, _) => "Unknown path related status",
        (0x7, _) => "Vendor specific status",
        _ => "Reserved status code type",
    }
}

/// Displays a status as `name (SCT xh SC yyh[, DNR][, MORE])`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusDisplay(pub Status);

impl std::fmt::Display for StatusDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.0;
        write!(f, "{} (SCT {:X}h SC {:02X}h", status_name(status), status.code_type(), status.code())?;
        if status.do_not_retry() {
            f.write_str(", DNR")?;
        }
        if status.field() & (1 << 13) != 0 {
            f.write_str(", MORE")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes() {
        let text = StatusDisplay(Status::LBA_OUT_OF_RANGE.with_do_not_retry()).to_string();
        assert_eq!(text, "LBA out of range (SCT 0h SC 80h, DNR)");
        assert_eq!(StatusDisplay(HOST_PATHING_ERROR).to_string(), "Host pathing error (SCT 3h SC 70h)");
        assert_eq!(status_name(Status::from_field(0x5FF)), "Reserved status code type");
    }
}

//! Command opcodes for the admin, NVM I/O and Fabrics command sets.

/// Admin command set opcodes (NVMe Base 2.0, figure "Opcodes for Admin Commands").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AdminOpcode {
    DeleteIoSubmissionQueue = 0x00,
    CreateIoSubmissionQueue = 0x01,
    GetLogPage = 0x02,
    DeleteIoCompletionQueue = 0x04,
    CreateIoCompletionQueue = 0x05,
    Identify = 0x06,
    Abort = 0x08,
    SetFeatures = 0x09,
    GetFeatures = 0x0A,
    AsynchronousEventRequest = 0x0C,
    NamespaceManagement = 0x0D,
    FirmwareCommit = 0x10,
    FirmwareImageDownload = 0x11,
    DeviceSelfTest = 0x14,
    NamespaceAttachment = 0x15,
    KeepAlive = 0x18,
    DirectiveSend = 0x19,
    DirectiveReceive = 0x1A,
    /// Fabrics commands share opcode 7Fh on every queue; FCTYPE selects the command.
    Fabrics = 0x7F,
    FormatNvm = 0x80,
    SecuritySend = 0x81,
    SecurityReceive = 0x82,
    Sanitize = 0x84,
}

impl AdminOpcode {
    /// Decodes an opcode byte; `None` for opcodes this implementation does not know.
    pub fn from_u8(value: u8) -> Option<Self> {
        use AdminOpcode::*;
        Some(match value {
            0x00 => DeleteIoSubmissionQueue,
            0x01 => CreateIoSubmissionQueue,
            0x02 => GetLogPage,
            0x04 => DeleteIoCompletionQueue,
            0x05 => CreateIoCompletionQueue,
            0x06 => Identify,
            0x08 => Abort,
            0x09 => SetFeatures,
            0x0A => GetFeatures,
            0x0C => AsynchronousEventRequest,
            0x0D => NamespaceManagement,
            0x10 => FirmwareCommit,
            0x11 => FirmwareImageDownload,
            0x14 => DeviceSelfTest,
            0x15 => NamespaceAttachment,
            0x18 => KeepAlive,
            0x19 => DirectiveSend,
            0x1A => DirectiveReceive,
            0x7F => Fabrics,
            0x80 => FormatNvm,
            0x81 => SecuritySend,
            0x82 => SecurityReceive,
            0x84 => Sanitize,
            _ => return None,
        })
    }
}

/// NVM command set I/O opcodes (NVM Command Set 1.0, figure "Opcodes for NVM Commands").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum IoOpcode {
    Flush = 0x00,
    Write = 0x01,
    Read = 0x02,
    WriteUncorrectable = 0x04,
    Compare = 0x05,
    WriteZeroes = 0x08,
    DatasetManagement = 0x09,
    Verify = 0x0C,
    ReservationRegister = 0x0D,
    ReservationReport = 0x0E,
    ReservationAcquire = 0x11,
    ReservationRelease = 0x15,
    Copy = 0x19,
    /// Fabrics commands (Disconnect, Authentication) may arrive on I/O queues.
    Fabrics = 0x7F,
}

impl IoOpcode {
    /// Decodes an opcode byte; `None` for opcodes this implementation does not know.
    pub fn from_u8(value: u8) -> Option<Self> {
        use IoOpcode::*;
        Some(match value {
            0x00 => Flush,
            0x01 => Write,
            0x02 => Read,
            0x04 => WriteUncorrectable,
            0x05 => Compare,
            0x08 => WriteZeroes,
            0x09 => DatasetManagement,
            0x0C => Verify,
            0x0D => ReservationRegister,
            0x0E => ReservationReport,
            0x11 => ReservationAcquire,
            0x15 => ReservationRelease,
            0x19 => Copy,
            0x7F => Fabrics,
            _ => return None,
        })
    }
}

/// FCTYPE: Fabrics command type, byte 4 of a Fabrics SQE (NVMe over Fabrics 1.1,
/// figure "Fabrics Command Type").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FabricsCommandType {
    PropertySet = 0x00,
    Connect = 0x01,
    PropertyGet = 0x04,
    AuthenticationSend = 0x05,
    AuthenticationReceive = 0x06,
    Disconnect = 0x08,
}

impl FabricsCommandType {
    /// Decodes an FCTYPE byte; `None` for unknown types.
    pub fn from_u8(value: u8) -> Option<Self> {
        use FabricsCommandType::*;
        Some(match value {
            0x00 => PropertySet,
            0x01 => Connect,
            0x04 => PropertyGet,
            0x05 => AuthenticationSend,
            0x06 => AuthenticationReceive,
            0x08 => Disconnect,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_opcode_round_trips_and_unknown_ones_do_not_decode() {
        let mut admin_known = 0;
        let mut io_known = 0;
        for byte in 0..=255u8 {
            if let Some(op) = AdminOpcode::from_u8(byte) {
                assert_eq!(op as u8, byte);
                admin_known += 1;
            }
            if let Some(op) = IoOpcode::from_u8(byte) {
                assert_eq!(op as u8, byte);
                io_known += 1;
            }
            if let Some(op) = FabricsCommandType::from_u8(byte) {
                assert_eq!(op as u8, byte);
            }
        }
        assert_eq!(admin_known, 23);
        assert_eq!(io_known, 14);
    }
}

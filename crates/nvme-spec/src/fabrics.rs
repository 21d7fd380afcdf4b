//! NVMe over Fabrics commands (opcode 7Fh, selected by FCTYPE): Connect and its data,
//! the Connect response, Property Get and Property Set, Authentication Send and
//! Receive (NVMe Base 2.0, "Fabrics Command Set"). The typed property values live
//! in [`crate::registers`] and are re-exported here.
//!
//! Fabrics SQEs use bytes 40..63 for command-specific fields rather than named
//! CDWs, so the views below document byte offsets within the 64-byte SQE.

use crate::bits::{get_bits, set_bits};
use crate::bytes::{get_array, get_nul_padded, get_u16, put_nul_padded, put_u16};
use crate::ids::{ControllerId, QueueId};
use crate::sqe::SubmissionQueueEntry;
use crate::status::{Status, StatusCodeType};

pub use crate::registers::{ControllerCapabilities, ControllerConfiguration, ControllerStatus, Version};

/// Size of the Connect command data.
pub const CONNECT_DATA_BYTES: usize = 1024;
/// KATO a host uses when it does not choose one (NVMe Base 2.0: 2 minutes).
pub const DEFAULT_KEEP_ALIVE_TIMEOUT_MS: u32 = 120_000;
/// SQHD value in every completion once SQ flow control is disabled for the queue.
pub const SQ_HEAD_FLOW_CONTROL_DISABLED: u16 = 0xFFFF;
/// The only record format defined for Connect and the discovery log.
pub const RECORD_FORMAT_0: u16 = 0;

/// CATTR: connect attributes bits (SQE byte 46).
pub mod connect_attributes {
    /// Bits 1:0: priority class of the I/O queue (weighted round robin).
    pub const PRIORITY_CLASS_MASK: u8 = 0b11;
    /// Bit 2: the host asks to disable SQ flow control (SQHD then reads FFFFh).
    pub const DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;
    /// Bit 3: the host supports deletion of this I/O queue via Disconnect.
    pub const IO_QUEUE_DELETION: u8 = 1 << 3;
}

/// Connect command (FCTYPE 01h) fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectCommand {
    /// RECFMT: record format, bytes 41:40 (CDW10 bits 15:0); must be 0.
    pub record_format: u16,
    /// QID: queue to create, bytes 43:42 (CDW10 bits 31:16); 0 is the admin queue.
    pub queue_id: QueueId,
    /// SQSIZE: submission queue size, bytes 45:44 (CDW11 bits 15:0), 0's based.
    pub submission_queue_size: u16,
    /// CATTR: connect attributes, byte 46 (CDW11 bits 23:16) ([`connect_attributes`]).
    pub connect_attributes: u8,
    /// KATO: keep alive timeout in milliseconds, bytes 51:48 (CDW12); admin queue
    /// only, 0 disables keep alive.
    pub keep_alive_timeout_ms: u32,
}

impl ConnectCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        Self {
            record_format: get_bits(sqe.dwords[10], 0, 16) as u16,
            queue_id: QueueId(get_bits(sqe.dwords[10], 16, 16) as u16),
            submission_queue_size: get_bits(sqe.dwords[11], 0, 16) as u16,
            connect_attributes: get_bits(sqe.dwords[11], 16, 8) as u8,
            keep_alive_timeout_ms: sqe.dwords[12],
        }
    }

    /// Writes the fields into a submission queue entry (host side). CDW0 (opcode,
    /// CID) and FCTYPE are left to the caller, see
    /// [`SubmissionQueueEntry::set_fabrics_command_type`].
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.dwords[10] = u32::from(self.record_format) | (u32::from(self.queue_id.0) << 16);
        set_bits(&mut sqe.dwords[11], 0, 16, u32::from(self.submission_queue_size));
        set_bits(&mut sqe.dwords[11], 16, 8, u32::from(self.connect_attributes));
        sqe.dwords[12] = self.keep_alive_timeout_ms;
    }

    /// Entries in the submission queue (SQSIZE + 1).
    pub fn submission_queue_entries(&self) -> u32 {
        u32::from(self.submission_queue_size) + 1
    }

    /// True when the host asked to disable SQ flow control (CATTR bit 2).
    pub fn sq_flow_control_disabled(&self) -> bool {
        self.connect_attributes & connect_attributes::DISABLE_SQ_FLOW_CONTROL != 0
    }
}

/// Byte offsets within the Connect SQE, for [`connect_invalid_parameter_in_command`].
pub mod connect_command_offset {
    /// RECFMT.
    pub const RECORD_FORMAT: u16 = 40;
    /// QID.
    pub const QUEUE_ID: u16 = 42;
    /// SQSIZE.
    pub const SUBMISSION_QUEUE_SIZE: u16 = 44;
    /// CATTR.
    pub const CONNECT_ATTRIBUTES: u16 = 46;
    /// KATO.
    pub const KEEP_ALIVE_TIMEOUT: u16 = 48;
}

/// Byte offsets within Connect data, for [`connect_invalid_parameter_in_data`].
pub mod connect_data_offset {
    /// HOSTID.
    pub const HOST_IDENTIFIER: u16 = 0;
    /// CNTLID.
    pub const CONTROLLER_ID: u16 = 16;
    /// SUBNQN.
    pub const SUBSYSTEM_NQN: u16 = 256;
    /// HOSTNQN.
    pub const HOST_NQN: u16 = 512;
}

/// Connect command data, 1024 bytes, carried in-capsule with the Connect command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// HOSTID: 128-bit host identifier, bytes 15:0; must be the same on every
    /// queue of an association.
    pub host_identifier: [u8; 16],
    /// CNTLID: controller ID, bytes 17:16. FFFFh on the admin queue asks for the
    /// dynamic model; on an I/O queue it names the controller from the admin Connect.
    pub controller_id: ControllerId,
    /// SUBNQN: NVM subsystem NQN, bytes 511:256, NUL terminated.
    pub subsystem_nqn: [u8; 256],
    /// HOSTNQN: host NQN, bytes 767:512, NUL terminated.
    pub host_nqn: [u8; 256],
}

impl Default for ConnectData {
    fn default() -> Self {
        Self::decode(&[0; CONNECT_DATA_BYTES])
    }
}

impl ConnectData {
    /// Builds Connect data (host side and tests). Text is NUL padded and truncated.
    pub fn new(host_identifier: [u8; 16], controller_id: ControllerId, subsystem_nqn: &str, host_nqn: &str) -> Self {
        let mut data = Self { host_identifier, controller_id, ..Self::default() };
        put_nul_padded(&mut data.subsystem_nqn, subsystem_nqn);
        put_nul_padded(&mut data.host_nqn, host_nqn);
        data
    }

    /// Decodes 1024 bytes.
    pub fn decode(raw: &[u8; CONNECT_DATA_BYTES]) -> Self {
        Self {
            host_identifier: get_array(raw, 0),
            controller_id: ControllerId(get_u16(raw, 16)),
            subsystem_nqn: get_array(raw, 256),
            host_nqn: get_array(raw, 512),
        }
    }

    /// Encodes into 1024 bytes, reserved bytes zero.
    pub fn encode(&self, out: &mut [u8; CONNECT_DATA_BYTES]) {
        out.fill(0);
        out[0..16].copy_from_slice(&self.host_identifier);
        put_u16(out, 16, self.controller_id.0);
        out[256..512].copy_from_slice(&self.subsystem_nqn);
        out[512..768].copy_from_slice(&self.host_nqn);
    }

    /// SUBNQN up to its first NUL; `None` if not UTF-8. A field with no NUL at all
    /// yields all 256 bytes, longer than any valid NQN (223), so the caller's NQN
    /// validation rejects it.
    pub fn subsystem_nqn_str(&self) -> Option<&str> {
        get_nul_padded(&self.subsystem_nqn)
    }

    /// HOSTNQN up to its first NUL; `None` if not UTF-8.
    pub fn host_nqn_str(&self) -> Option<&str> {
        get_nul_padded(&self.host_nqn)
    }
}

/// DW0 of a successful Connect: CNTLID in bits 15:0, AUTHREQ bits clear.
///
/// The spec makes CNTLID meaningful only for the admin queue Connect; for an I/O
/// queue it may be zero. (Linux nvmet returns the controller ID there too; hosts
/// ignore it.)
pub fn connect_success_result(controller_id: ControllerId) -> u32 {
    u32::from(controller_id.0)
}

/// AUTHREQ bits of a successful Connect's DW0 (bits 31:16).
pub mod connect_authentication_required {
    /// ATR: authentication transaction required (DH-HMAC-CHAP) before use.
    pub const TRANSACTION: u32 = 1 << 17;
    /// ASCR: authentication to establish a secure channel required.
    pub const SECURE_CHANNEL: u32 = 1 << 18;
}

/// IATTR bit 0 (DW0 bit 16): the invalid parameter is in the Connect data (set) or
/// in the SQE (clear).
const IATTR_IN_DATA: u32 = 1 << 16;

/// DW0 for a Connect failing with Connect Invalid Parameters because of a field of
/// the SQE: IPO (bits 15:0) is the byte offset in the SQE, IATTR 0.
pub fn connect_invalid_parameter_in_command(offset: u16) -> u32 {
    u32::from(offset)
}

/// DW0 for a Connect failing with Connect Invalid Parameters because of a field of
/// the Connect data: IPO is the byte offset in the data, IATTR bit 0 set.
pub fn connect_invalid_parameter_in_data(offset: u16) -> u32 {
    IATTR_IN_DATA | u32::from(offset)
}

/// Property offsets (OFST) of the controller properties.
pub mod property_offset {
    /// CAP: controller capabilities, 8 bytes.
    pub const CAP: u32 = 0x00;
    /// VS: version, 4 bytes.
    pub const VS: u32 = 0x08;
    /// INTMS: interrupt mask set (reserved over fabrics).
    pub const INTMS: u32 = 0x0C;
    /// INTMC: interrupt mask clear (reserved over fabrics).
    pub const INTMC: u32 = 0x10;
    /// CC: controller configuration, 4 bytes.
    pub const CC: u32 = 0x14;
    /// CSTS: controller status, 4 bytes.
    pub const CSTS: u32 = 0x1C;
    /// NSSR: NVM subsystem reset, 4 bytes.
    pub const NSSR: u32 = 0x20;

    /// Width in bytes of the fabrics-defined property at `offset`, or `None` for an
    /// offset that has no property over fabrics (the Invalid Field/Property case).
    pub fn size_bytes(offset: u32) -> Option<u32> {
        match offset {
            CAP => Some(8),
            VS | CC | CSTS | NSSR => Some(4),
            _ => None,
        }
    }
}

/// ATTRIB SIZE value (bits 2:0) for a 4-byte property.
pub const PROPERTY_SIZE_4_BYTES: u8 = 0;
/// ATTRIB SIZE value (bits 2:0) for an 8-byte property.
pub const PROPERTY_SIZE_8_BYTES: u8 = 1;

/// Width in bytes encoded by an ATTRIB byte: 4, 8, or `None` for a reserved size.
fn property_size_bytes(attributes: u8) -> Option<u32> {
    match attributes & 0b111 {
        PROPERTY_SIZE_4_BYTES => Some(4),
        PROPERTY_SIZE_8_BYTES => Some(8),
        _ => None,
    }
}

/// Property Get command (FCTYPE 04h) fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PropertyGetCommand {
    /// ATTRIB: attributes, byte 40 (CDW10 bits 7:0); bits 2:0 are the size.
    pub attributes: u8,
    /// OFST: property offset, bytes 47:44 (CDW11) ([`property_offset`]).
    pub offset: u32,
}

impl PropertyGetCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        Self { attributes: get_bits(sqe.dwords[10], 0, 8) as u8, offset: sqe.dwords[11] }
    }

    /// Writes the fields into a submission queue entry (host side).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        set_bits(&mut sqe.dwords[10], 0, 8, u32::from(self.attributes));
        sqe.dwords[11] = self.offset;
    }

    /// Property width in bytes (4 or 8), `None` for a reserved ATTRIB size.
    pub fn size_bytes(&self) -> Option<u32> {
        property_size_bytes(self.attributes)
    }
}

/// Property Set command (FCTYPE 00h) fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PropertySetCommand {
    /// ATTRIB: attributes, byte 40 (CDW10 bits 7:0); bits 2:0 are the size.
    pub attributes: u8,
    /// OFST: property offset, bytes 47:44 (CDW11).
    pub offset: u32,
    /// VALUE: bytes 55:48 (CDW12, CDW13); only the low 4 bytes for a 4-byte
    /// property.
    pub value: u64,
}

impl PropertySetCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        Self {
            attributes: get_bits(sqe.dwords[10], 0, 8) as u8,
            offset: sqe.dwords[11],
            value: u64::from(sqe.dwords[12]) | (u64::from(sqe.dwords[13]) << 32),
        }
    }

    /// Writes the fields into a submission queue entry (host side).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        set_bits(&mut sqe.dwords[10], 0, 8, u32::from(self.attributes));
        sqe.dwords[11] = self.offset;
        sqe.dwords[12] = self.value as u32;
        sqe.dwords[13] = (self.value >> 32) as u32;
    }

    /// Property width in bytes (4 or 8), `None` for a reserved ATTRIB size.
    pub fn size_bytes(&self) -> Option<u32> {
        property_size_bytes(self.attributes)
    }
}

/// Authentication Send (FCTYPE 05h) and Authentication Receive (FCTYPE 06h) fields
/// (NVMe Base 2.0, "Authentication Send command" / "Authentication Receive
/// command"). Both carry a security protocol message: Send moves TL bytes from the
/// host (in-capsule), Receive returns up to AL bytes to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthenticationCommand {
    /// SPSP0: security protocol specific, byte 41 (CDW10 bits 15:8); 01h for
    /// DH-HMAC-CHAP.
    pub security_protocol_specific_0: u8,
    /// SPSP1: security protocol specific, byte 42 (CDW10 bits 23:16); 01h for
    /// DH-HMAC-CHAP.
    pub security_protocol_specific_1: u8,
    /// SECP: security protocol, byte 43 (CDW10 bits 31:24); E9h for DH-HMAC-CHAP.
    pub security_protocol: u8,
    /// TL (Send: transfer length) or AL (Receive: allocation length) in bytes,
    /// bytes 47:44 (CDW11).
    pub length: u32,
}

impl AuthenticationCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        Self {
            security_protocol_specific_0: get_bits(sqe.dwords[10], 8, 8) as u8,
            security_protocol_specific_1: get_bits(sqe.dwords[10], 16, 8) as u8,
            security_protocol: get_bits(sqe.dwords[10], 24, 8) as u8,
            length: sqe.dwords[11],
        }
    }

    /// Writes the fields into a submission queue entry (host side); byte 40 is
    /// reserved and left zero.
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.dwords[10] = (u32::from(self.security_protocol_specific_0) << 8)
            | (u32::from(self.security_protocol_specific_1) << 16)
            | (u32::from(self.security_protocol) << 24);
        sqe.dwords[11] = self.length;
    }
}

/// Byte offsets of the Authentication Send / Receive fields within the SQE.
pub mod authentication_command_offset {
    /// SPSP0.
    pub const SECURITY_PROTOCOL_SPECIFIC_0: u16 = 41;
    /// SPSP1.
    pub const SECURITY_PROTOCOL_SPECIFIC_1: u16 = 42;
    /// SECP.
    pub const SECURITY_PROTOCOL: u16 = 43;
    /// TL / AL.
    pub const LENGTH: u16 = 44;
}

/// Authentication Required (SCT 1h, SC 91h): the queue has not completed the
/// authentication the Connect response asked for (AUTHREQ), so the command is not
/// processed.
pub const AUTHENTICATION_REQUIRED: Status = Status::new(StatusCodeType::CommandSpecific, 0x91);

const _: () = assert!(CONNECT_DATA_BYTES == 1024);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_layout_round_trip, to_array};
    use proptest::prelude::*;

    fn sqe_bytes(sqe: &SubmissionQueueEntry) -> [u8; 64] {
        let mut raw = [0u8; 64];
        sqe.encode(&mut raw);
        raw
    }

    proptest! {
        #[test]
        fn connect_data_round_trips(raw in proptest::collection::vec(any::<u8>(), CONNECT_DATA_BYTES)) {
            assert_layout_round_trip(&to_array::<CONNECT_DATA_BYTES>(&raw), ConnectData::decode, ConnectData::encode);
        }

        #[test]
        fn connect_command_round_trips(recfmt in any::<u16>(), qid in any::<u16>(), sqsize in any::<u16>(), cattr in any::<u8>(), kato in any::<u32>()) {
            let command = ConnectCommand { record_format: recfmt, queue_id: QueueId(qid), submission_queue_size: sqsize, connect_attributes: cattr, keep_alive_timeout_ms: kato };
            let mut sqe = SubmissionQueueEntry::default();
            command.encode_into(&mut sqe);
            prop_assert_eq!(ConnectCommand::decode(&sqe), command);
        }

        #[test]
        fn property_commands_round_trip(attributes in any::<u8>(), offset in any::<u32>(), value in any::<u64>()) {
            let get = PropertyGetCommand { attributes, offset };
            let set = PropertySetCommand { attributes, offset, value };
            let mut sqe = SubmissionQueueEntry::default();
            get.encode_into(&mut sqe);
            prop_assert_eq!(PropertyGetCommand::decode(&sqe), get);
            set.encode_into(&mut sqe);
            prop_assert_eq!(PropertySetCommand::decode(&sqe), set);
        }
    }

    #[test]
    fn connect_fields_sit_at_the_spec_offsets() {
        let mut raw = [0u8; 64];
        raw[0] = 0x7F;
        raw[4] = 0x01; // FCTYPE Connect
        raw[42..44].copy_from_slice(&3u16.to_le_bytes());
        raw[44..46].copy_from_slice(&127u16.to_le_bytes());
        raw[46] = connect_attributes::DISABLE_SQ_FLOW_CONTROL;
        raw[48..52].copy_from_slice(&15_000u32.to_le_bytes());
        let sqe = SubmissionQueueEntry::decode(&raw);
        assert_eq!(sqe.fabrics_command_type(), 0x01);
        let connect = ConnectCommand::decode(&sqe);
        assert_eq!(connect.record_format, 0);
        assert_eq!(connect.queue_id, QueueId(3));
        assert_eq!(connect.submission_queue_entries(), 128);
        assert!(connect.sq_flow_control_disabled());
        assert_eq!(connect.keep_alive_timeout_ms, 15_000);
        let mut rebuilt = SubmissionQueueEntry::default();
        rebuilt.dwords[0] = 0x7F;
        rebuilt.set_fabrics_command_type(0x01);
        connect.encode_into(&mut rebuilt);
        assert_eq!(sqe_bytes(&rebuilt), raw);
    }

    #[test]
    fn connect_data_fields_sit_at_the_spec_offsets() {
        let data = ConnectData::new([0x11; 16], ControllerId::DYNAMIC, "nqn.sub", "nqn.host");
        let mut raw = [0u8; CONNECT_DATA_BYTES];
        data.encode(&mut raw);
        assert_eq!(raw[15], 0x11);
        assert_eq!(&raw[16..18], &[0xFF, 0xFF]);
        assert_eq!(&raw[256..264], b"nqn.sub\0");
        assert_eq!(&raw[512..521], b"nqn.host\0");
        let back = ConnectData::decode(&raw);
        assert_eq!(back.subsystem_nqn_str(), Some("nqn.sub"));
        assert_eq!(back.host_nqn_str(), Some("nqn.host"));
        raw[512] = 0xFF;
        assert_eq!(ConnectData::decode(&raw).host_nqn_str(), None);
    }

    #[test]
    fn authentication_fields_sit_at_the_spec_offsets() {
        let mut raw = [0u8; 64];
        raw[0] = 0x7F;
        raw[4] = 0x05; // FCTYPE Authentication Send
        raw[41] = 0x01;
        raw[42] = 0x02;
        raw[43] = 0xE9;
        raw[44..48].copy_from_slice(&1168u32.to_le_bytes());
        let sqe = SubmissionQueueEntry::decode(&raw);
        let command = AuthenticationCommand::decode(&sqe);
        assert_eq!(
            command,
            AuthenticationCommand {
                security_protocol_specific_0: 1,
                security_protocol_specific_1: 2,
                security_protocol: 0xE9,
                length: 1168
            }
        );
        let mut rebuilt = SubmissionQueueEntry::default();
        rebuilt.dwords[0] = 0x7F;
        rebuilt.set_fabrics_command_type(0x05);
        command.encode_into(&mut rebuilt);
        assert_eq!(sqe_bytes(&rebuilt), raw);
        assert_eq!(AUTHENTICATION_REQUIRED.code_type(), 1);
        assert_eq!(AUTHENTICATION_REQUIRED.code(), 0x91);
    }

    #[test]
    fn connect_results_encode_ipo_and_iattr() {
        assert_eq!(connect_success_result(ControllerId(0x1234)), 0x1234);
        assert_eq!(connect_invalid_parameter_in_command(connect_command_offset::QUEUE_ID), 42);
        assert_eq!(connect_invalid_parameter_in_data(connect_data_offset::HOST_NQN), 0x0001_0200);
        assert_eq!(connect_invalid_parameter_in_data(connect_data_offset::CONTROLLER_ID), 0x0001_0010);
    }

    #[test]
    fn property_fields_sit_at_the_spec_offsets() {
        let mut raw = [0u8; 64];
        raw[0] = 0x7F;
        raw[40] = PROPERTY_SIZE_8_BYTES;
        raw[44..48].copy_from_slice(&property_offset::CAP.to_le_bytes());
        raw[48..56].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        let sqe = SubmissionQueueEntry::decode(&raw);
        let get = PropertyGetCommand::decode(&sqe);
        assert_eq!((get.offset, get.size_bytes()), (property_offset::CAP, Some(8)));
        let set = PropertySetCommand::decode(&sqe);
        assert_eq!(set.value, 0x0102_0304_0506_0708);
        assert_eq!(PropertyGetCommand { attributes: 2, offset: 0 }.size_bytes(), None);
        assert_eq!(PropertyGetCommand { attributes: 0, offset: 0 }.size_bytes(), Some(4));
        assert_eq!(property_offset::size_bytes(property_offset::CC), Some(4));
        assert_eq!(property_offset::size_bytes(property_offset::CAP), Some(8));
        assert_eq!(property_offset::size_bytes(property_offset::INTMS), None);
        assert_eq!(property_offset::size_bytes(0x18), None);
    }
}

//! Get Features (admin opcode 0Ah) and Set Features (09h): feature identifiers, the
//! command view and the value encodings a target needs (NVMe Base 2.0, "Features").

use crate::bits::{get_bits, get_flag, set_bits, set_flag};
use crate::ids::NamespaceId;
use crate::sqe::SubmissionQueueEntry;

/// FID: feature identifiers.
pub mod feature_id {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MANAGEMENT: u8 = 0x02;
    /// LBA Range Type.
    pub const LBA_RANGE_TYPE: u8 = 0x03;
    /// Temperature Threshold.
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing (PCIe only).
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    /// Interrupt Vector Configuration (PCIe only).
    pub const INTERRUPT_VECTOR_CONFIGURATION: u8 = 0x09;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    /// Asynchronous Event Configuration.
    pub const ASYNCHRONOUS_EVENT_CONFIGURATION: u8 = 0x0B;
    /// Autonomous Power State Transition.
    pub const AUTONOMOUS_POWER_STATE_TRANSITION: u8 = 0x0C;
    /// Host Memory Buffer (PCIe only).
    pub const HOST_MEMORY_BUFFER: u8 = 0x0D;
    /// Timestamp.
    pub const TIMESTAMP: u8 = 0x0E;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    /// Host Controlled Thermal Management.
    pub const HOST_CONTROLLED_THERMAL: u8 = 0x10;
    /// Non-Operational Power State Config.
    pub const NON_OPERATIONAL_POWER_STATE: u8 = 0x11;
    /// I/O Command Set Profile.
    pub const IO_COMMAND_SET_PROFILE: u8 = 0x19;
    /// Host Identifier.
    pub const HOST_IDENTIFIER: u8 = 0x81;
    /// Reservation Notification Mask.
    pub const RESERVATION_NOTIFICATION_MASK: u8 = 0x82;
    /// Reservation Persistence.
    pub const RESERVATION_PERSISTENCE: u8 = 0x83;
    /// Namespace Write Protection Config.
    pub const WRITE_PROTECTION: u8 = 0x84;
}

/// SEL values of Get Features (CDW10 bits 10:8).
pub mod feature_select {
    /// The current value.
    pub const CURRENT: u8 = 0;
    /// The default value.
    pub const DEFAULT: u8 = 1;
    /// The saved value.
    pub const SAVED: u8 = 2;
    /// The capabilities of the feature (DW0 bits below).
    pub const SUPPORTED_CAPABILITIES: u8 = 3;
}

/// DW0 bits returned for SEL = supported capabilities.
pub mod feature_capabilities {
    /// The feature is saveable.
    pub const SAVEABLE: u32 = 1 << 0;
    /// The feature is namespace specific.
    pub const NAMESPACE_SPECIFIC: u32 = 1 << 1;
    /// The feature is changeable.
    pub const CHANGEABLE: u32 = 1 << 2;
}

/// Asynchronous Event Configuration (FID 0Bh) bits of CDW11 / DW0.
pub mod async_event_configuration {
    /// Bits 7:0: SMART / Health critical warnings that raise events.
    pub const SMART_CRITICAL_WARNINGS_MASK: u32 = 0xFF;
    /// Namespace Attribute Notices.
    pub const NAMESPACE_ATTRIBUTE_NOTICES: u32 = 1 << 8;
    /// Firmware Activation Notices.
    pub const FIRMWARE_ACTIVATION_NOTICES: u32 = 1 << 9;
    /// Telemetry Log Notices.
    pub const TELEMETRY_LOG_NOTICES: u32 = 1 << 10;
    /// ANA Change Notices.
    pub const ANA_CHANGE_NOTICES: u32 = 1 << 11;
    /// Discovery Log Page Change Notices.
    pub const DISCOVERY_LOG_PAGE_CHANGE_NOTICES: u32 = 1 << 31;
}

/// Volatile Write Cache (FID 06h) CDW11 / DW0 bit 0: WCE, cache enabled.
pub const VOLATILE_WRITE_CACHE_ENABLE: u32 = 1 << 0;

/// Get Features / Set Features command fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureCommand {
    /// NSID: namespace for namespace-specific features, else 0 or FFFFFFFFh.
    pub namespace_id: NamespaceId,
    /// FID: feature identifier, CDW10 bits 7:0 ([`feature_id`]).
    pub feature_id: u8,
    /// SEL: select, CDW10 bits 10:8 (Get Features only, [`feature_select`]).
    pub select: u8,
    /// SV: save, CDW10 bit 31 (Set Features only): persist across resets.
    pub save: bool,
    /// CDW11: the feature-specific value (Set) or parameter (Get).
    pub dword11: u32,
    /// UUID index, CDW14 bits 6:0.
    pub uuid_index: u8,
}

impl FeatureCommand {
    /// Reads the fields from a submission queue entry. SEL and SV are both read;
    /// each is reserved (zero) in the command it does not belong to.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        let cdw10 = sqe.dwords[10];
        Self {
            namespace_id: sqe.namespace_id(),
            feature_id: get_bits(cdw10, 0, 8) as u8,
            select: get_bits(cdw10, 8, 3) as u8,
            save: get_flag(cdw10, 31),
            dword11: sqe.dwords[11],
            uuid_index: get_bits(sqe.dwords[14], 0, 7) as u8,
        }
    }

    /// Writes the fields into a submission queue entry (host side); CDW0 is left
    /// alone.
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.dwords[1] = self.namespace_id.0;
        let cdw10 = &mut sqe.dwords[10];
        set_bits(cdw10, 0, 8, u32::from(self.feature_id));
        set_bits(cdw10, 8, 3, u32::from(self.select));
        set_flag(cdw10, 31, self.save);
        sqe.dwords[11] = self.dword11;
        set_bits(&mut sqe.dwords[14], 0, 7, u32::from(self.uuid_index));
    }
}

/// Number of Queues (FID 07h): the counts the host requests in CDW11, as 1-based
/// `(submission_queues, completion_queues)` from the 0's based NSQR (bits 15:0) and
/// NCQR (bits 31:16). A raw FFFFh (65536 queues) is not allowed by the spec; the
/// caller rejects it with Invalid Field.
pub fn number_of_queues_requested(cdw11: u32) -> (u32, u32) {
    (get_bits(cdw11, 0, 16) + 1, get_bits(cdw11, 16, 16) + 1)
}

/// Number of Queues result DW0: the 1-based allocated counts encoded 0's based, NSQA
/// in bits 15:0 and NCQA in bits 31:16. Counts are clamped to 1..=65535.
pub fn number_of_queues_result(submission_queues: u32, completion_queues: u32) -> u32 {
    let zero_based = |count: u32| count.clamp(1, 0xFFFF) - 1;
    zero_based(submission_queues) | (zero_based(completion_queues) << 16)
}

/// Builds the Number of Queues CDW11 (host side): 1-based counts, clamped like
/// [`number_of_queues_result`].
pub fn number_of_queues_request(submission_queues: u32, completion_queues: u32) -> u32 {
    number_of_queues_result(submission_queues, completion_queues)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn feature_command_round_trips(namespace in any::<u32>(), fid in any::<u8>(), select in 0u8..8, save in any::<bool>(), dword11 in any::<u32>(), uuid in 0u8..0x80) {
            let command = FeatureCommand { namespace_id: NamespaceId(namespace), feature_id: fid, select, save, dword11, uuid_index: uuid };
            let mut sqe = SubmissionQueueEntry::default();
            command.encode_into(&mut sqe);
            prop_assert_eq!(FeatureCommand::decode(&sqe), command);
        }

        #[test]
        fn queue_counts_round_trip(submission in 1u32..=0xFFFF, completion in 1u32..=0xFFFF) {
            let dword = number_of_queues_request(submission, completion);
            prop_assert_eq!(number_of_queues_requested(dword), (submission, completion));
        }
    }

    #[test]
    fn fields_sit_in_the_spec_bits() {
        let mut sqe = SubmissionQueueEntry::default();
        sqe.dwords[10] = (1 << 31) | (3 << 8) | u32::from(feature_id::NUMBER_OF_QUEUES);
        sqe.dwords[11] = 0x0003_0007;
        let command = FeatureCommand::decode(&sqe);
        assert_eq!(command.feature_id, feature_id::NUMBER_OF_QUEUES);
        assert_eq!(command.select, feature_select::SUPPORTED_CAPABILITIES);
        assert!(command.save);
        assert_eq!(number_of_queues_requested(command.dword11), (8, 4));
        assert_eq!(number_of_queues_result(8, 4), 0x0003_0007);
        assert_eq!(number_of_queues_result(0, 100_000), 0xFFFE_0000);
        assert_eq!(number_of_queues_requested(0xFFFF_FFFF), (0x1_0000, 0x1_0000));
        assert_eq!(async_event_configuration::NAMESPACE_ATTRIBUTE_NOTICES, 0x100);
    }
}

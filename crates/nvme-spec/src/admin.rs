//! Small command views for admin and NVM commands whose parameters live in the
//! command dwords: Identify, Abort, Asynchronous Event Request completions, Dataset
//! Management and Write Zeroes (NVMe Base 2.0 and NVM Command Set 1.0).
//!
//! Each view has `decode(&SubmissionQueueEntry)` for the target and `encode_into`
//! for the host side and tests; `encode_into` never touches CDW0 (opcode, CID).

use crate::bits::{get_bits, get_flag, set_bits, set_flag};
use crate::bytes::{get_u32, get_u64, put_u32, put_u64};
use crate::ids::{CommandId, ControllerId, NamespaceId, QueueId};
use crate::sqe::SubmissionQueueEntry;

/// Identify command fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentifyCommand {
    /// NSID: the namespace for namespace structures, or the "greater than" bound of
    /// namespace lists.
    pub namespace_id: NamespaceId,
    /// CNS: which structure to return, CDW10 bits 7:0 ([`crate::identify::cns`]).
    pub cns: u8,
    /// CNTID: controller identifier, CDW10 bits 31:16 (lower bound for controller
    /// lists).
    pub controller_id: ControllerId,
    /// CNSSI: CNS specific identifier, CDW11 bits 15:0.
    pub cns_specific_identifier: u16,
    /// CSI: command set identifier, CDW11 bits 31:24 ([`crate::identify::csi`]).
    pub command_set_identifier: u8,
    /// UUID index, CDW14 bits 6:0.
    pub uuid_index: u8,
}

impl IdentifyCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        let cdw10 = sqe.dwords[10];
        let cdw11 = sqe.dwords[11];
        Self {
            namespace_id: sqe.namespace_id(),
            cns: get_bits(cdw10, 0, 8) as u8,
            controller_id: ControllerId(get_bits(cdw10, 16, 16) as u16),
            cns_specific_identifier: get_bits(cdw11, 0, 16) as u16,
            command_set_identifier: get_bits(cdw11, 24, 8) as u8,
            uuid_index: get_bits(sqe.dwords[14], 0, 7) as u8,
        }
    }

    /// Writes the fields into a submission queue entry (host side).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.dwords[1] = self.namespace_id.0;
        set_bits(&mut sqe.dwords[10], 0, 8, u32::from(self.cns));
        set_bits(&mut sqe.dwords[10], 16, 16, u32::from(self.controller_id.0));
        set_bits(&mut sqe.dwords[11], 0, 16, u32::from(self.cns_specific_identifier));
        set_bits(&mut sqe.dwords[11], 24, 8, u32::from(self.command_set_identifier));
        set_bits(&mut sqe.dwords[14], 0, 7, u32::from(self.uuid_index));
    }
}

/// Abort command fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbortCommand {
    /// SQID: queue of the command to abort, CDW10 bits 15:0.
    pub submission_queue_id: QueueId,
    /// CID: the command to abort, CDW10 bits 31:16.
    pub command_id: CommandId,
}

impl AbortCommand {
    /// DW0 bit 0 of the Abort completion: set when the command was not aborted
    /// (the usual answer; aborting is best effort).
    pub const RESULT_NOT_ABORTED: u32 = 1;
    /// DW0 of the Abort completion when the command was aborted.
    pub const RESULT_ABORTED: u32 = 0;

    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        let cdw10 = sqe.dwords[10];
        Self {
            submission_queue_id: QueueId(get_bits(cdw10, 0, 16) as u16),
            command_id: CommandId(get_bits(cdw10, 16, 16) as u16),
        }
    }

    /// Writes the fields into a submission queue entry (host side).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.dwords[10] = u32::from(self.submission_queue_id.0) | (u32::from(self.command_id.0) << 16);
    }
}

/// SEL values of Namespace Management (CDW10 bits 3:0).
pub mod namespace_management_select {
    /// Create a namespace from the Identify Namespace-shaped data.
    pub const CREATE: u8 = 0;
    /// Delete the namespace in NSID (FFFFFFFFh: every namespace).
    pub const DELETE: u8 = 1;
}

/// Namespace Management (admin opcode 0Dh).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceManagementCommand {
    /// NSID: the namespace to delete (ignored by create).
    pub namespace_id: NamespaceId,
    /// SEL: CDW10 bits 3:0 ([`namespace_management_select`]).
    pub select: u8,
    /// CSI: command set of the namespace to create, CDW11 bits 31:24.
    pub command_set_identifier: u8,
}

impl NamespaceManagementCommand {
    /// Decodes the command fields.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        Self {
            namespace_id: sqe.namespace_id(),
            select: get_bits(sqe.dwords[10], 0, 4) as u8,
            command_set_identifier: get_bits(sqe.dwords[11], 24, 8) as u8,
        }
    }

    /// Writes the fields into an SQE (opcode and data pointer are the caller's).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.set_namespace_id(self.namespace_id);
        set_bits(&mut sqe.dwords[10], 0, 4, u32::from(self.select));
        set_bits(&mut sqe.dwords[11], 24, 8, u32::from(self.command_set_identifier));
    }
}

/// SEL values of Namespace Attachment (CDW10 bits 3:0).
pub mod namespace_attachment_select {
    /// Attach the namespace to the controllers in the list.
    pub const ATTACH: u8 = 0;
    /// Detach it from them.
    pub const DETACH: u8 = 1;
}

/// Namespace Attachment (admin opcode 15h); its data is a controller list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceAttachmentCommand {
    /// NSID: the namespace to attach or detach.
    pub namespace_id: NamespaceId,
    /// SEL: CDW10 bits 3:0 ([`namespace_attachment_select`]).
    pub select: u8,
}

impl NamespaceAttachmentCommand {
    /// Decodes the command fields.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        Self { namespace_id: sqe.namespace_id(), select: get_bits(sqe.dwords[10], 0, 4) as u8 }
    }

    /// Writes the fields into an SQE (opcode and data pointer are the caller's).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.set_namespace_id(self.namespace_id);
        set_bits(&mut sqe.dwords[10], 0, 4, u32::from(self.select));
    }
}

/// Asynchronous event types (completion DW0 bits 2:0).
pub mod async_event_type {
    /// Error status.
    pub const ERROR: u8 = 0;
    /// SMART / Health status.
    pub const SMART: u8 = 1;
    /// Notice.
    pub const NOTICE: u8 = 2;
    /// Immediate.
    pub const IMMEDIATE: u8 = 3;
    /// One-shot (NVMe 2.1).
    pub const ONE_SHOT: u8 = 4;
    /// I/O command set specific status.
    pub const IO_COMMAND_SET_SPECIFIC: u8 = 6;
    /// Vendor specific.
    pub const VENDOR_SPECIFIC: u8 = 7;
}

/// Asynchronous event information for event type Notice (DW0 bits 15:8).
pub mod async_event_notice {
    /// Namespace attribute changed: read the Changed Namespace List log (04h).
    pub const NAMESPACE_ATTRIBUTE_CHANGED: u8 = 0x00;
    /// Firmware activation starting.
    pub const FIRMWARE_ACTIVATION_STARTING: u8 = 0x01;
    /// Telemetry log changed.
    pub const TELEMETRY_LOG_CHANGED: u8 = 0x02;
    /// Asymmetric namespace access change: read the ANA log (0Ch).
    pub const ANA_CHANGE: u8 = 0x03;
    /// Discovery log page change (discovery controllers): read log 70h.
    pub const DISCOVERY_LOG_PAGE_CHANGE: u8 = 0xF0;
}

/// Completion DW0 of an Asynchronous Event Request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsynchronousEventCompletion {
    /// Asynchronous event type, bits 2:0 ([`async_event_type`]).
    pub event_type: u8,
    /// Asynchronous event information, bits 15:8 (e.g. [`async_event_notice`]).
    pub event_info: u8,
    /// Log page the host should read (and thereby clear the event), bits 23:16.
    pub log_page_id: u8,
}

impl AsynchronousEventCompletion {
    /// Encodes DW0.
    pub fn to_dword0(&self) -> u32 {
        async_event_result(self.event_type, self.event_info, self.log_page_id)
    }

    /// Decodes DW0 (host side).
    pub fn from_dword0(dword0: u32) -> Self {
        Self {
            event_type: get_bits(dword0, 0, 3) as u8,
            event_info: get_bits(dword0, 8, 8) as u8,
            log_page_id: get_bits(dword0, 16, 8) as u8,
        }
    }
}

/// Asynchronous Event Request completion DW0: event type (bits 2:0), event info
/// (bits 15:8), log page identifier (bits 23:16).
pub fn async_event_result(event_type: u8, event_info: u8, log_page_id: u8) -> u32 {
    u32::from(event_type & 0b111) | (u32::from(event_info) << 8) | (u32::from(log_page_id) << 16)
}

/// Dataset Management command fields (NVM opcode 09h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatasetManagementCommand {
    /// NR: number of ranges, CDW10 bits 7:0, 0's based (see [`Self::range_count`]).
    pub number_of_ranges_zero_based: u8,
    /// IDR: integral dataset for read, CDW11 bit 0.
    pub integral_dataset_read: bool,
    /// IDW: integral dataset for write, CDW11 bit 1.
    pub integral_dataset_write: bool,
    /// AD: deallocate the ranges, CDW11 bit 2.
    pub deallocate: bool,
}

impl DatasetManagementCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        let cdw11 = sqe.dwords[11];
        Self {
            number_of_ranges_zero_based: get_bits(sqe.dwords[10], 0, 8) as u8,
            integral_dataset_read: get_flag(cdw11, 0),
            integral_dataset_write: get_flag(cdw11, 1),
            deallocate: get_flag(cdw11, 2),
        }
    }

    /// Writes the fields into a submission queue entry (host side).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        set_bits(&mut sqe.dwords[10], 0, 8, u32::from(self.number_of_ranges_zero_based));
        set_flag(&mut sqe.dwords[11], 0, self.integral_dataset_read);
        set_flag(&mut sqe.dwords[11], 1, self.integral_dataset_write);
        set_flag(&mut sqe.dwords[11], 2, self.deallocate);
    }

    /// Number of ranges in the data buffer (NR + 1, so 1..=256).
    pub fn range_count(&self) -> usize {
        usize::from(self.number_of_ranges_zero_based) + 1
    }

    /// Bytes of range data the command carries (16 per range).
    pub fn data_bytes(&self) -> usize {
        self.range_count() * DATASET_RANGE_BYTES
    }
}

/// Size of one Dataset Management range.
pub const DATASET_RANGE_BYTES: usize = 16;

/// One Dataset Management range, 16 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatasetRange {
    /// Context attributes, bytes 3:0 (access hints; ignorable).
    pub context_attributes: u32,
    /// Length in logical blocks, bytes 7:4 (not 0's based; 0 is an empty range).
    pub length_blocks: u32,
    /// Starting LBA, bytes 15:8.
    pub starting_lba: u64,
}

impl DatasetRange {
    /// Decodes 16 bytes.
    pub fn decode(raw: &[u8; DATASET_RANGE_BYTES]) -> Self {
        Self { context_attributes: get_u32(raw, 0), length_blocks: get_u32(raw, 4), starting_lba: get_u64(raw, 8) }
    }

    /// Encodes into 16 bytes.
    pub fn encode(&self, out: &mut [u8; DATASET_RANGE_BYTES]) {
        put_u32(out, 0, self.context_attributes);
        put_u32(out, 4, self.length_blocks);
        put_u64(out, 8, self.starting_lba);
    }
}

/// Write Zeroes command fields (NVM opcode 08h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteZeroesCommand {
    /// SLBA: starting LBA, CDW10 (low) and CDW11 (high).
    pub starting_lba: u64,
    /// NLB: number of logical blocks, CDW12 bits 15:0, 0's based.
    pub number_of_blocks_zero_based: u16,
    /// DEAC: deallocate, CDW12 bit 25: the target may deallocate instead of writing.
    pub deallocate: bool,
    /// FUA: force unit access, CDW12 bit 30.
    pub force_unit_access: bool,
    /// LR: limited retry, CDW12 bit 31.
    pub limited_retry: bool,
}

impl WriteZeroesCommand {
    /// Reads the fields from a submission queue entry.
    pub fn decode(sqe: &SubmissionQueueEntry) -> Self {
        let cdw12 = sqe.dwords[12];
        Self {
            starting_lba: sqe.starting_lba(),
            number_of_blocks_zero_based: get_bits(cdw12, 0, 16) as u16,
            deallocate: get_flag(cdw12, 25),
            force_unit_access: get_flag(cdw12, 30),
            limited_retry: get_flag(cdw12, 31),
        }
    }

    /// Writes the fields into a submission queue entry (host side).
    pub fn encode_into(&self, sqe: &mut SubmissionQueueEntry) {
        sqe.dwords[10] = self.starting_lba as u32;
        sqe.dwords[11] = (self.starting_lba >> 32) as u32;
        let cdw12 = &mut sqe.dwords[12];
        set_bits(cdw12, 0, 16, u32::from(self.number_of_blocks_zero_based));
        set_flag(cdw12, 25, self.deallocate);
        set_flag(cdw12, 30, self.force_unit_access);
        set_flag(cdw12, 31, self.limited_retry);
    }

    /// Number of logical blocks (NLB + 1).
    pub fn block_count(&self) -> u32 {
        u32::from(self.number_of_blocks_zero_based) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::assert_layout_round_trip;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn identify_round_trips(namespace in any::<u32>(), cns in any::<u8>(), cntid in any::<u16>(), cnssi in any::<u16>(), csi in any::<u8>(), uuid in 0u8..0x80) {
            let command = IdentifyCommand { namespace_id: NamespaceId(namespace), cns, controller_id: ControllerId(cntid), cns_specific_identifier: cnssi, command_set_identifier: csi, uuid_index: uuid };
            let mut sqe = SubmissionQueueEntry::default();
            command.encode_into(&mut sqe);
            prop_assert_eq!(IdentifyCommand::decode(&sqe), command);
        }

        #[test]
        fn abort_round_trips(sqid in any::<u16>(), cid in any::<u16>()) {
            let command = AbortCommand { submission_queue_id: QueueId(sqid), command_id: CommandId(cid) };
            let mut sqe = SubmissionQueueEntry::default();
            command.encode_into(&mut sqe);
            prop_assert_eq!(AbortCommand::decode(&sqe), command);
        }

        #[test]
        fn async_event_round_trips(event_type in 0u8..8, info in any::<u8>(), lid in any::<u8>()) {
            let completion = AsynchronousEventCompletion { event_type, event_info: info, log_page_id: lid };
            prop_assert_eq!(AsynchronousEventCompletion::from_dword0(completion.to_dword0()), completion);
        }

        #[test]
        fn dataset_management_round_trips(nr in any::<u8>(), idr in any::<bool>(), idw in any::<bool>(), ad in any::<bool>()) {
            let command = DatasetManagementCommand { number_of_ranges_zero_based: nr, integral_dataset_read: idr, integral_dataset_write: idw, deallocate: ad };
            let mut sqe = SubmissionQueueEntry::default();
            command.encode_into(&mut sqe);
            prop_assert_eq!(DatasetManagementCommand::decode(&sqe), command);
        }

        #[test]
        fn dataset_range_round_trips(raw in any::<[u8; 16]>()) {
            assert_layout_round_trip(&raw, DatasetRange::decode, DatasetRange::encode);
        }

        #[test]
        fn write_zeroes_round_trips(slba in any::<u64>(), nlb in any::<u16>(), deac in any::<bool>(), fua in any::<bool>(), lr in any::<bool>()) {
            let command = WriteZeroesCommand { starting_lba: slba, number_of_blocks_zero_based: nlb, deallocate: deac, force_unit_access: fua, limited_retry: lr };
            let mut sqe = SubmissionQueueEntry::default();
            command.encode_into(&mut sqe);
            prop_assert_eq!(WriteZeroesCommand::decode(&sqe), command);
        }
    }

    #[test]
    fn fields_sit_at_the_spec_offsets() {
        let mut raw = [0u8; 64];
        raw[4..8].copy_from_slice(&1u32.to_le_bytes());
        raw[40] = crate::identify::cns::NAMESPACE_DESCRIPTOR_LIST;
        raw[42..44].copy_from_slice(&0x0102u16.to_le_bytes());
        raw[44..46].copy_from_slice(&0x0304u16.to_le_bytes());
        raw[47] = crate::identify::csi::ZONED;
        raw[56] = 0x7F;
        let identify = IdentifyCommand::decode(&SubmissionQueueEntry::decode(&raw));
        assert_eq!(identify.namespace_id, NamespaceId(1));
        assert_eq!(identify.cns, 0x03);
        assert_eq!(identify.controller_id, ControllerId(0x0102));
        assert_eq!(identify.cns_specific_identifier, 0x0304);
        assert_eq!(identify.command_set_identifier, 2);
        assert_eq!(identify.uuid_index, 0x7F);

        let abort = AbortCommand::decode(&SubmissionQueueEntry::decode(&raw));
        assert_eq!((abort.submission_queue_id, abort.command_id), (QueueId(0x0003), CommandId(0x0102)));

        let mut raw = [0u8; 64];
        raw[40] = 9; // NR: ten ranges
        raw[44] = 0b100; // AD
        raw[48..52].copy_from_slice(&((1u32 << 25) | (1 << 30) | 7).to_le_bytes());
        let sqe = SubmissionQueueEntry::decode(&raw);
        let dsm = DatasetManagementCommand::decode(&sqe);
        assert_eq!(dsm.range_count(), 10);
        assert_eq!(dsm.data_bytes(), 160);
        assert!(dsm.deallocate && !dsm.integral_dataset_read && !dsm.integral_dataset_write);
        let zeroes = WriteZeroesCommand::decode(&sqe);
        assert!(zeroes.deallocate && zeroes.force_unit_access && !zeroes.limited_retry);
        assert_eq!(zeroes.block_count(), 8);

        let range = DatasetRange { context_attributes: 1, length_blocks: 0x0203, starting_lba: 0x0405 };
        let mut raw = [0u8; DATASET_RANGE_BYTES];
        range.encode(&mut raw);
        assert_eq!(raw, [1, 0, 0, 0, 3, 2, 0, 0, 5, 4, 0, 0, 0, 0, 0, 0]);

        assert_eq!(
            async_event_result(async_event_type::NOTICE, async_event_notice::NAMESPACE_ATTRIBUTE_CHANGED, 0x04),
            0x0004_0002
        );
        assert_eq!(
            async_event_result(async_event_type::NOTICE, async_event_notice::DISCOVERY_LOG_PAGE_CHANGE, 0x70),
            0x0070_F002
        );
    }
}

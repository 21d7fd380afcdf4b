//! Builders for the commands a host sends. Each returns a [`HostCommand`] with
//! `user_tag` 0; the queue fills in CID, PSDT and the SGL at submission.
//!
//! Arguments are not validated beyond what the encoding needs: a value the command
//! cannot express (say 0 blocks, whose 0's based NLB wraps) yields a command whose
//! transfer length disagrees with its fields, which the target refuses with an NVMe
//! status rather than acting on it.

use nvme_spec::admin::{
    namespace_attachment_select, namespace_management_select, DatasetManagementCommand, DatasetRange, IdentifyCommand,
    NamespaceAttachmentCommand, NamespaceManagementCommand, WriteZeroesCommand, DATASET_RANGE_BYTES,
};
use nvme_spec::fabrics::{
    property_offset, PropertyGetCommand, PropertySetCommand, PROPERTY_SIZE_4_BYTES, PROPERTY_SIZE_8_BYTES,
};
use nvme_spec::features::FeatureCommand;
use nvme_spec::identify::{cns, csi, encode_controller_list, IdentifyNamespace, IDENTIFY_DATA_BYTES};
use nvme_spec::log_page::GetLogPageCommand;
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType, IoOpcode};
use nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER;
use nvme_spec::{CommandId, ControllerId, NamespaceId, QueueId, SubmissionQueueEntry};

use crate::{HostCommand, SourceBuffer};

/// Most ranges one Dataset Management command carries (NR is 8 bits, 0's based).
pub const MAX_DATASET_RANGES: usize = 256;

/// An SQE with just the opcode (and PSDT) set.
fn sqe_for(opcode: u8) -> SubmissionQueueEntry {
    let mut sqe = SubmissionQueueEntry::default();
    sqe.set_cdw0(opcode, CommandId(0), PSDT_SGL_METADATA_BUFFER);
    sqe
}

fn command(sqe: SubmissionQueueEntry) -> HostCommand {
    HostCommand { sqe, data_out: Vec::new(), data_in_bytes: 0, user_tag: 0, read_destination: None, write_source: None }
}

/// Abort (admin 08h) of the command `command_id` on submission queue `queue_id`.
/// DW0 bit 0 of the completion is 0 when the command was aborted, 1 when not.
pub fn abort(queue_id: QueueId, command_id: CommandId) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::Abort as u8);
    sqe.dwords[10] = u32::from(queue_id.0) | (u32::from(command_id.0) << 16);
    command(sqe)
}

/// Identify (admin 06h): CNS selects the structure, CSI the command set; 4096 bytes.
pub fn identify(cns: u8, nsid: NamespaceId, csi: u8) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::Identify as u8);
    IdentifyCommand { namespace_id: nsid, cns, command_set_identifier: csi, ..IdentifyCommand::default() }
        .encode_into(&mut sqe);
    HostCommand { data_in_bytes: IDENTIFY_DATA_BYTES as u32, ..command(sqe) }
}

/// Identify a controller list (CNS 12h or 13h): with `nsid`, the controllers the
/// namespace is attached to (12h); without, every controller of the NVM subsystem
/// (13h). Either lists only CNTLIDs of `first` and above, so a host pages through a
/// long list by asking again from the last one it saw plus one.
pub fn identify_controller_list(nsid: Option<NamespaceId>, first: ControllerId) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::Identify as u8);
    let (cns, namespace_id) = match nsid {
        Some(nsid) => (cns::NAMESPACE_ATTACHED_CONTROLLER_LIST, nsid),
        None => (cns::CONTROLLER_LIST, NamespaceId::NONE),
    };
    IdentifyCommand { namespace_id, cns, controller_id: first, ..IdentifyCommand::default() }.encode_into(&mut sqe);
    HostCommand { data_in_bytes: IDENTIFY_DATA_BYTES as u32, ..command(sqe) }
}

/// The fields a host chooses when it creates a namespace: the host-settable part of
/// the Identify Namespace structure that Namespace Management create carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamespaceCreate {
    /// NSZE: size in logical blocks of the chosen format.
    pub size_blocks: u64,
    /// NCAP: blocks that may be allocated at once; below NSZE asks for a thinly
    /// provisioned namespace.
    pub capacity_blocks: u64,
    /// FLBAS: the LBA format index (and the extended-metadata bit).
    pub formatted_lba_size: u8,
    /// DPS: end-to-end data protection type settings.
    pub protection_settings: u8,
    /// NMIC: multi-path I/O and sharing capabilities (bit 0: may be attached to two
    /// or more controllers at once).
    pub multipath_capabilities: u8,
}

/// Namespace Management create (admin 0Dh, SEL 0) of an NVM command set namespace.
/// The data is a whole Identify Namespace structure (4096 bytes) as nvme-cli sends
/// it, zero outside the fields of `settings`. The new NSID comes back in DW0.
pub fn namespace_create(settings: &NamespaceCreate) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::NamespaceManagement as u8);
    NamespaceManagementCommand {
        namespace_id: NamespaceId::NONE,
        select: namespace_management_select::CREATE,
        command_set_identifier: csi::NVM,
    }
    .encode_into(&mut sqe);
    let structure = IdentifyNamespace {
        namespace_size: settings.size_blocks,
        namespace_capacity: settings.capacity_blocks,
        formatted_lba_size: settings.formatted_lba_size,
        protection_settings: settings.protection_settings,
        multipath_capabilities: settings.multipath_capabilities,
        ..IdentifyNamespace::default()
    };
    let mut data = vec![0u8; IDENTIFY_DATA_BYTES];
    let raw: &mut [u8; IDENTIFY_DATA_BYTES] = data.as_mut_slice().try_into().expect("4096-byte buffer");
    structure.encode(raw);
    HostCommand { data_out: data, ..command(sqe) }
}

/// Namespace Management delete (admin 0Dh, SEL 1) of `nsid`; FFFFFFFFh deletes every
/// namespace the controller may delete.
pub fn namespace_delete(nsid: NamespaceId) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::NamespaceManagement as u8);
    NamespaceManagementCommand {
        namespace_id: nsid,
        select: namespace_management_select::DELETE,
        command_set_identifier: 0,
    }
    .encode_into(&mut sqe);
    command(sqe)
}

/// Namespace Attachment attach (admin 15h, SEL 0): makes `nsid` active on the
/// `controllers` (at most 2047; sorted and de-duplicated into the controller list).
pub fn namespace_attach(nsid: NamespaceId, controllers: &[ControllerId]) -> HostCommand {
    namespace_attachment(nsid, namespace_attachment_select::ATTACH, controllers)
}

/// Namespace Attachment detach (admin 15h, SEL 1): makes `nsid` inactive on the
/// `controllers`.
pub fn namespace_detach(nsid: NamespaceId, controllers: &[ControllerId]) -> HostCommand {
    namespace_attachment(nsid, namespace_attachment_select::DETACH, controllers)
}

fn namespace_attachment(nsid: NamespaceId, select: u8, controllers: &[ControllerId]) -> HostCommand {
    debug_assert!(
        controllers.len() <= nvme_spec::identify::CONTROLLER_LIST_CAPACITY,
        "a controller list holds at most 2047 controllers"
    );
    let mut sqe = sqe_for(AdminOpcode::NamespaceAttachment as u8);
    NamespaceAttachmentCommand { namespace_id: nsid, select }.encode_into(&mut sqe);
    // The controller list is a 4096-byte structure, like the one Identify returns.
    let mut data = vec![0u8; IDENTIFY_DATA_BYTES];
    let raw: &mut [u8; IDENTIFY_DATA_BYTES] = data.as_mut_slice().try_into().expect("4096-byte buffer");
    encode_controller_list(controllers.iter().copied(), raw);
    HostCommand { data_out: data, ..command(sqe) }
}

/// Get Log Page (admin 02h): `length` bytes of log `lid` from byte `offset` (a
/// multiple of 4). NUMD counts dwords, so the length is rounded up to one; RAE is
/// clear, so reading a log clears the asynchronous event that pointed at it.
pub fn get_log_page(lid: u8, nsid: NamespaceId, offset: u64, length: u32) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::GetLogPage as u8);
    let dwords = length.div_ceil(4).max(1);
    GetLogPageCommand {
        namespace_id: nsid,
        log_page_id: lid,
        dword_count: u64::from(dwords),
        offset,
        ..GetLogPageCommand::default()
    }
    .encode_into(&mut sqe);
    HostCommand { data_in_bytes: dwords.saturating_mul(4), ..command(sqe) }
}

/// Get Features (admin 0Ah): the value comes back in DW0. Features that return a
/// data structure (LBA Range Type, Timestamp, Host Identifier...) need
/// `data_in_bytes` set by the caller.
pub fn get_features(fid: u8, nsid: NamespaceId, select: u8, cdw11: u32) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::GetFeatures as u8);
    FeatureCommand { namespace_id: nsid, feature_id: fid, select, dword11: cdw11, ..FeatureCommand::default() }
        .encode_into(&mut sqe);
    command(sqe)
}

/// Set Features (admin 09h) with CDW11 as the value; `save` sets SV.
pub fn set_features(fid: u8, nsid: NamespaceId, cdw11: u32, save: bool) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::SetFeatures as u8);
    FeatureCommand { namespace_id: nsid, feature_id: fid, save, dword11: cdw11, ..FeatureCommand::default() }
        .encode_into(&mut sqe);
    command(sqe)
}

/// Keep Alive (admin 18h).
pub fn keep_alive() -> HostCommand {
    command(sqe_for(AdminOpcode::KeepAlive as u8))
}

/// Asynchronous Event Request (admin 0Ch): completes when the controller has an
/// event to report (see `nvme_spec::admin::AsynchronousEventCompletion`).
pub fn async_event_request() -> HostCommand {
    command(sqe_for(AdminOpcode::AsynchronousEventRequest as u8))
}

/// Property Get (Fabrics 7Fh, FCTYPE 04h) of `size_bytes` (4 or 8; anything else
/// asks for 4) at `offset` ([`property_offset`]); the value is DW1:DW0.
pub fn property_get(offset: u32, size_bytes: u8) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::Fabrics as u8);
    sqe.set_fabrics_command_type(FabricsCommandType::PropertyGet as u8);
    let attributes = if size_bytes == 8 { PROPERTY_SIZE_8_BYTES } else { PROPERTY_SIZE_4_BYTES };
    PropertyGetCommand { attributes, offset }.encode_into(&mut sqe);
    command(sqe)
}

/// Property Set (Fabrics 7Fh, FCTYPE 00h): the width is the property's own (8 bytes
/// for CAP, 4 for the others).
pub fn property_set(offset: u32, value: u64) -> HostCommand {
    let mut sqe = sqe_for(AdminOpcode::Fabrics as u8);
    sqe.set_fabrics_command_type(FabricsCommandType::PropertySet as u8);
    let attributes =
        if property_offset::size_bytes(offset) == Some(8) { PROPERTY_SIZE_8_BYTES } else { PROPERTY_SIZE_4_BYTES };
    PropertySetCommand { attributes, offset, value }.encode_into(&mut sqe);
    command(sqe)
}

/// SLBA (CDW10/11) and NLB (CDW12 bits 15:0, 0's based) of a read/write command.
fn set_range(sqe: &mut SubmissionQueueEntry, nsid: NamespaceId, lba: u64, blocks: u32) {
    sqe.set_namespace_id(nsid);
    sqe.dwords[10] = lba as u32;
    sqe.dwords[11] = (lba >> 32) as u32;
    sqe.dwords[12] = (sqe.dwords[12] & !0xFFFF) | (blocks.wrapping_sub(1) & 0xFFFF);
}

/// Read (NVM 02h) of `blocks` (1..=65536) blocks of `block_size` bytes from `lba`.
/// The read buffer is allocated at submission unless the caller puts a buffer with
/// enough capacity (and length 0) in `data_out`.
pub fn read(nsid: NamespaceId, lba: u64, blocks: u32, block_size: u32) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::Read as u8);
    set_range(&mut sqe, nsid, lba, blocks);
    HostCommand { data_in_bytes: blocks.saturating_mul(block_size), ..command(sqe) }
}

/// Write (NVM 01h) of `data` (a whole number of `block_size` blocks, at most 65536)
/// at `lba`; `fua` sets Force Unit Access (CDW12 bit 30).
pub fn write(nsid: NamespaceId, lba: u64, data: Vec<u8>, block_size: u32, fua: bool) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::Write as u8);
    let blocks = (data.len() / block_size.max(1) as usize) as u32;
    set_range(&mut sqe, nsid, lba, blocks);
    if fua {
        sqe.dwords[12] |= 1 << 30;
    }
    HostCommand { data_out: data, ..command(sqe) }
}

/// Write (NVM 01h) of data in the caller's memory (see [`crate::WriteSource`]):
/// `source.length` bytes (a whole number of `block_size` blocks) at `lba`, sent
/// straight from there; `fua` sets Force Unit Access.
pub fn write_from_source(nsid: NamespaceId, lba: u64, source: SourceBuffer, block_size: u32, fua: bool) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::Write as u8);
    let blocks = source.length / block_size.max(1);
    set_range(&mut sqe, nsid, lba, blocks);
    if fua {
        sqe.dwords[12] |= 1 << 30;
    }
    HostCommand { write_source: Some(source), ..command(sqe) }
}

/// Compare (NVM 05h) of `data` (whole `block_size` blocks) with the blocks at `lba`:
/// success when equal, Compare Failure when not.
pub fn compare(nsid: NamespaceId, lba: u64, data: Vec<u8>, block_size: u32) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::Compare as u8);
    let blocks = (data.len() / block_size.max(1) as usize) as u32;
    set_range(&mut sqe, nsid, lba, blocks);
    HostCommand { data_out: data, ..command(sqe) }
}

/// A fused Compare and Write (FUSE 01b then 10b): `new` is written at `lba` only if
/// the blocks there equal `expected`, atomically. Both commands must be submitted
/// back to back on one queue.
pub fn compare_and_write(
    nsid: NamespaceId,
    lba: u64,
    expected: Vec<u8>,
    new: Vec<u8>,
    block_size: u32,
) -> [HostCommand; 2] {
    let mut first = compare(nsid, lba, expected, block_size);
    first.sqe.set_fused(FUSE_FIRST);
    let mut second = write(nsid, lba, new, block_size, false);
    second.sqe.set_fused(FUSE_SECOND);
    [first, second]
}

/// Copy (NVM 19h), source range entries in format 0: the blocks of `ranges` (SLBA,
/// block count 1..=65536) in order, written from `destination`; `fua` sets FUA for
/// the destination write. At most 256 ranges (NR is 8 bits).
pub fn copy(nsid: NamespaceId, destination: u64, ranges: &[(u64, u32)], fua: bool) -> HostCommand {
    let count = ranges.len().clamp(1, COPY_MAX_RANGES);
    let mut sqe = sqe_for(IoOpcode::Copy as u8);
    sqe.set_namespace_id(nsid);
    sqe.dwords[10] = destination as u32;
    sqe.dwords[11] = (destination >> 32) as u32;
    sqe.dwords[12] = (count as u32 - 1) | if fua { 1 << 30 } else { 0 };
    let mut data = vec![0u8; count * COPY_RANGE_BYTES];
    for ((lba, blocks), entry) in ranges.iter().zip(data.chunks_exact_mut(COPY_RANGE_BYTES)) {
        entry[8..16].copy_from_slice(&lba.to_le_bytes());
        entry[16..18].copy_from_slice(&(blocks.wrapping_sub(1) as u16).to_le_bytes());
    }
    HostCommand { data_out: data, ..command(sqe) }
}

/// Bytes of one Copy source range entry in format 0.
const COPY_RANGE_BYTES: usize = 32;
/// Source ranges one Copy can name (NR is 8 bits, 0's based).
pub const COPY_MAX_RANGES: usize = 256;

/// FUSE 01b: first command of a fused operation.
const FUSE_FIRST: u8 = 0b01;
/// FUSE 10b: second command of a fused operation.
const FUSE_SECOND: u8 = 0b10;

/// Flush (NVM 00h) of the namespace's volatile write cache.
pub fn flush(nsid: NamespaceId) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::Flush as u8);
    sqe.set_namespace_id(nsid);
    command(sqe)
}

/// Write Zeroes (NVM 08h) of `blocks` (1..=65536) blocks from `lba`; `deallocate`
/// sets DEAC, letting the target deallocate instead of writing.
pub fn write_zeroes(nsid: NamespaceId, lba: u64, blocks: u32, deallocate: bool) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::WriteZeroes as u8);
    sqe.set_namespace_id(nsid);
    WriteZeroesCommand {
        starting_lba: lba,
        number_of_blocks_zero_based: blocks.wrapping_sub(1) as u16,
        deallocate,
        ..WriteZeroesCommand::default()
    }
    .encode_into(&mut sqe);
    command(sqe)
}

/// Dataset Management (NVM 09h) with AD set: deallocate (trim) the ranges. At most
/// [`MAX_DATASET_RANGES`] ranges are sent (NR is 8 bits); an empty slice sends one
/// empty range.
pub fn dataset_management_deallocate(nsid: NamespaceId, ranges: &[DatasetRange]) -> HostCommand {
    debug_assert!(ranges.len() <= MAX_DATASET_RANGES, "more than 256 Dataset Management ranges");
    let count = ranges.len().clamp(1, MAX_DATASET_RANGES);
    let mut sqe = sqe_for(IoOpcode::DatasetManagement as u8);
    sqe.set_namespace_id(nsid);
    DatasetManagementCommand {
        number_of_ranges_zero_based: (count - 1) as u8,
        deallocate: true,
        ..DatasetManagementCommand::default()
    }
    .encode_into(&mut sqe);
    let mut data = vec![0u8; count * DATASET_RANGE_BYTES];
    for (range, out) in ranges.iter().zip(data.chunks_exact_mut(DATASET_RANGE_BYTES)) {
        let mut raw = [0u8; DATASET_RANGE_BYTES];
        range.encode(&mut raw);
        out.copy_from_slice(&raw);
    }
    HostCommand { data_out: data, ..command(sqe) }
}

/// Reservation Register (NVM 0Dh): RREGA (0 register, 1 unregister, 2 replace), IEKEY,
/// CPTPL (0 no change, 2 clear, 3 set), with CRKEY and NRKEY as data.
pub fn reservation_register(
    nsid: NamespaceId,
    action: u8,
    ignore_key: bool,
    cptpl: u8,
    current_key: u64,
    new_key: u64,
) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::ReservationRegister as u8);
    sqe.set_namespace_id(nsid);
    sqe.dwords[10] = u32::from(action & 0b111) | (u32::from(ignore_key) << 3) | (u32::from(cptpl & 0b11) << 30);
    HostCommand { data_out: [current_key.to_le_bytes(), new_key.to_le_bytes()].concat(), ..command(sqe) }
}

/// Reservation Acquire (NVM 11h): RACQA (0 acquire, 1 preempt, 2 preempt and abort),
/// IEKEY, RTYPE (1..=6), with CRKEY and PRKEY as data.
pub fn reservation_acquire(
    nsid: NamespaceId,
    action: u8,
    ignore_key: bool,
    kind: u8,
    current_key: u64,
    preempt_key: u64,
) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::ReservationAcquire as u8);
    sqe.set_namespace_id(nsid);
    sqe.dwords[10] = u32::from(action & 0b111) | (u32::from(ignore_key) << 3) | (u32::from(kind) << 8);
    HostCommand { data_out: [current_key.to_le_bytes(), preempt_key.to_le_bytes()].concat(), ..command(sqe) }
}

/// Reservation Release (NVM 15h): RRELA (0 release, 1 clear), IEKEY, RTYPE, with CRKEY
/// as data.
pub fn reservation_release(nsid: NamespaceId, action: u8, ignore_key: bool, kind: u8, current_key: u64) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::ReservationRelease as u8);
    sqe.set_namespace_id(nsid);
    sqe.dwords[10] = u32::from(action & 0b111) | (u32::from(ignore_key) << 3) | (u32::from(kind) << 8);
    HostCommand { data_out: current_key.to_le_bytes().to_vec(), ..command(sqe) }
}

/// Reservation Report (NVM 0Eh) of `bytes` (a multiple of 4); `extended` asks for the
/// data structure with 128-bit Host Identifiers (EDS), the one fabrics use.
pub fn reservation_report(nsid: NamespaceId, bytes: u32, extended: bool) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::ReservationReport as u8);
    sqe.set_namespace_id(nsid);
    sqe.dwords[10] = (bytes / 4).saturating_sub(1);
    sqe.dwords[11] = u32::from(extended);
    HostCommand { data_in_bytes: bytes, ..command(sqe) }
}

/// Verify (NVM 0Ch) of `blocks` (1..=65536) blocks from `lba`: the target reads them
/// and transfers nothing.
pub fn verify(nsid: NamespaceId, lba: u64, blocks: u32) -> HostCommand {
    let mut sqe = sqe_for(IoOpcode::Verify as u8);
    set_range(&mut sqe, nsid, lba, blocks);
    command(sqe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_fields() {
        let read = read(NamespaceId(3), 0x1_0000_0002, 8, 512);
        assert_eq!(read.sqe.opcode(), 0x02);
        assert_eq!(read.sqe.namespace_id(), NamespaceId(3));
        assert_eq!(read.sqe.starting_lba(), 0x1_0000_0002);
        assert_eq!(read.sqe.block_count(), 8);
        assert_eq!(read.data_in_bytes, 4096);
        let write = write(NamespaceId(1), 5, vec![0; 1024], 512, true);
        assert_eq!(write.sqe.opcode(), 0x01);
        assert_eq!(write.sqe.block_count(), 2);
        assert!(write.sqe.force_unit_access());
        let from_source = write_from_source(NamespaceId(1), 5, SourceBuffer { source: 9, length: 1024 }, 512, false);
        assert_eq!((from_source.sqe.opcode(), from_source.sqe.block_count()), (0x01, 2));
        assert!(from_source.data_out.is_empty() && !from_source.sqe.force_unit_access());
        let zeroes = write_zeroes(NamespaceId(1), 7, 65536, true);
        assert_eq!(WriteZeroesCommand::decode(&zeroes.sqe).block_count(), 65536);
        let trim = dataset_management_deallocate(
            NamespaceId(1),
            &[DatasetRange { context_attributes: 0, length_blocks: 4, starting_lba: 9 }; 2],
        );
        assert_eq!(trim.data_out.len(), 32);
        assert_eq!(DatasetManagementCommand::decode(&trim.sqe).range_count(), 2);
    }

    #[test]
    fn admin_fields() {
        let log = get_log_page(2, NamespaceId::BROADCAST, 0, 512);
        let decoded = GetLogPageCommand::decode(&log.sqe);
        assert_eq!((decoded.log_page_id, decoded.length_bytes()), (2, 512));
        assert_eq!(log.data_in_bytes, 512);
        let get = property_get(property_offset::CAP, 8);
        assert_eq!(PropertyGetCommand::decode(&get.sqe).size_bytes(), Some(8));
        assert_eq!(get.sqe.fabrics_command_type(), FabricsCommandType::PropertyGet as u8);
        let set = property_set(property_offset::CC, 0x46_0001);
        assert_eq!(PropertySetCommand::decode(&set.sqe).size_bytes(), Some(4));
        let id = identify(nvme_spec::identify::cns::CONTROLLER, NamespaceId::NONE, 0);
        assert_eq!(IdentifyCommand::decode(&id.sqe).cns, 1);
        assert_eq!(id.data_in_bytes, 4096);
    }
    #[test]
    fn namespace_management_fields() {
        let create = namespace_create(&NamespaceCreate {
            size_blocks: 0x1_0000_0000,
            capacity_blocks: 2048,
            formatted_lba_size: 1,
            protection_settings: 0,
            multipath_capabilities: 1,
        });
        assert_eq!(create.sqe.opcode(), 0x0D);
        let fields = NamespaceManagementCommand::decode(&create.sqe);
        assert_eq!(fields.select, namespace_management_select::CREATE);
        assert_eq!(fields.command_set_identifier, csi::NVM);
        assert_eq!(fields.namespace_id, NamespaceId::NONE);
        assert_eq!(create.data_out.len(), IDENTIFY_DATA_BYTES);
        assert_eq!(create.data_in_bytes, 0);
        // NSZE bytes 7:0, NCAP 15:8, FLBAS 26, DPS 29, NMIC 30 (NVMe Base 2.0, figure 280).
        assert_eq!(create.data_out[0..8], 0x1_0000_0000u64.to_le_bytes());
        assert_eq!(create.data_out[8..16], 2048u64.to_le_bytes());
        assert_eq!((create.data_out[26], create.data_out[29], create.data_out[30]), (1, 0, 1));
        assert!(create.data_out[31..].iter().all(|&byte| byte == 0));

        let delete = namespace_delete(NamespaceId(7));
        let fields = NamespaceManagementCommand::decode(&delete.sqe);
        assert_eq!((delete.sqe.opcode(), fields.select, fields.namespace_id), (0x0D, 1, NamespaceId(7)));
        assert!(delete.data_out.is_empty());
    }

    #[test]
    fn namespace_attachment_fields() {
        let attach = namespace_attach(NamespaceId(5), &[ControllerId(9), ControllerId(2), ControllerId(9)]);
        assert_eq!(attach.sqe.opcode(), 0x15);
        let fields = NamespaceAttachmentCommand::decode(&attach.sqe);
        assert_eq!((fields.namespace_id, fields.select), (NamespaceId(5), namespace_attachment_select::ATTACH));
        assert_eq!(attach.data_out.len(), IDENTIFY_DATA_BYTES);
        // A count, then the CNTLIDs ascending without duplicates.
        assert_eq!(attach.data_out[0..6], [2, 0, 2, 0, 9, 0]);
        assert!(attach.data_out[6..].iter().all(|&byte| byte == 0));
        let detach = namespace_detach(NamespaceId(5), &[ControllerId(0x1234)]);
        assert_eq!(NamespaceAttachmentCommand::decode(&detach.sqe).select, namespace_attachment_select::DETACH);
        assert_eq!(detach.data_out[0..4], [1, 0, 0x34, 0x12]);

        let attached = identify_controller_list(Some(NamespaceId(5)), ControllerId(3));
        let fields = IdentifyCommand::decode(&attached.sqe);
        assert_eq!((fields.cns, fields.namespace_id, fields.controller_id), (0x12, NamespaceId(5), ControllerId(3)));
        assert_eq!(attached.data_in_bytes, 4096);
        let all = IdentifyCommand::decode(&identify_controller_list(None, ControllerId(0)).sqe);
        assert_eq!((all.cns, all.namespace_id), (0x13, NamespaceId::NONE));
    }
}

//! The 64-byte submission queue entry (NVMe Base 2.0, "Common Command Format") and the
//! 16-byte SGL descriptor that NVMe over Fabrics uses for its data pointer.

use crate::bytes::{get_u32, get_u64, put_u32, put_u64};
use crate::ids::{CommandId, NamespaceId};

/// Size of a submission queue entry in bytes (SQES 6 means 2^6).
pub const SUBMISSION_QUEUE_ENTRY_BYTES: usize = 64;
/// Size of an SGL descriptor in bytes.
pub const SGL_DESCRIPTOR_BYTES: usize = 16;

/// PSDT value in CDW0 meaning "SGLs are used, metadata pointer is an address"
/// (the only data-pointer form NVMe over Fabrics allows).
pub const PSDT_SGL_METADATA_BUFFER: u8 = 0b01;

/// A submission queue entry kept as its sixteen command dwords (CDW0..CDW15).
/// Accessors give the fields a name; the raw dwords stay available for
/// command-specific fields.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SubmissionQueueEntry {
    /// CDW0..CDW15 in host order.
    pub dwords: [u32; 16],
}

impl core::fmt::Debug for SubmissionQueueEntry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SubmissionQueueEntry")
            .field("opcode", &format_args!("{:#04x}", self.opcode()))
            .field("command_id", &self.command_id().0)
            .field("namespace_id", &self.namespace_id().0)
            .field("cdw10", &format_args!("{:#x}", self.dwords[10]))
            .field("cdw11", &format_args!("{:#x}", self.dwords[11]))
            .field("cdw12", &format_args!("{:#x}", self.dwords[12]))
            .finish()
    }
}

impl SubmissionQueueEntry {
    /// Decodes the 64 bytes of an SQE.
    pub fn decode(bytes: &[u8; SUBMISSION_QUEUE_ENTRY_BYTES]) -> Self {
        let mut dwords = [0u32; 16];
        for (index, dword) in dwords.iter_mut().enumerate() {
            *dword = get_u32(bytes, index * 4);
        }
        Self { dwords }
    }

    /// Encodes the SQE into 64 bytes.
    pub fn encode(&self, out: &mut [u8; SUBMISSION_QUEUE_ENTRY_BYTES]) {
        for (index, dword) in self.dwords.iter().enumerate() {
            put_u32(out, index * 4, *dword);
        }
    }

    /// OPC: opcode, CDW0 bits 7:0.
    pub fn opcode(&self) -> u8 {
        self.dwords[0] as u8
    }

    /// FUSE: fused operation, CDW0 bits 9:8.
    pub fn fused(&self) -> u8 {
        ((self.dwords[0] >> 8) & 0b11) as u8
    }

    /// Sets FUSE (CDW0 bits 9:8): 01b first command of a fused pair, 10b second.
    pub fn set_fused(&mut self, fuse: u8) {
        self.dwords[0] = (self.dwords[0] & !(0b11 << 8)) | (u32::from(fuse & 0b11) << 8);
    }

    /// PSDT: PRP or SGL for data transfer, CDW0 bits 15:14.
    pub fn psdt(&self) -> u8 {
        ((self.dwords[0] >> 14) & 0b11) as u8
    }

    /// CID: command identifier, CDW0 bits 31:16.
    pub fn command_id(&self) -> CommandId {
        CommandId((self.dwords[0] >> 16) as u16)
    }

    /// NSID: namespace identifier, CDW1.
    pub fn namespace_id(&self) -> NamespaceId {
        NamespaceId(self.dwords[1])
    }

    /// FCTYPE: Fabrics command type, byte 4 (only meaningful when the opcode is 7Fh;
    /// Fabrics commands have no NSID field).
    pub fn fabrics_command_type(&self) -> u8 {
        self.dwords[1] as u8
    }

    /// True for a Fabrics Connect command (opcode 7Fh, FCTYPE 01h).
    pub fn is_connect(&self) -> bool {
        self.opcode() == crate::opcode::AdminOpcode::Fabrics as u8
            && self.fabrics_command_type() == crate::opcode::FabricsCommandType::Connect as u8
    }

    /// MPTR: metadata pointer, CDW4..CDW5.
    pub fn metadata_pointer(&self) -> u64 {
        u64::from(self.dwords[4]) | (u64::from(self.dwords[5]) << 32)
    }

    /// SGL1: the first SGL descriptor, CDW6..CDW9 (DPTR).
    pub fn sgl(&self) -> SglDescriptor {
        let mut raw = [0u8; SGL_DESCRIPTOR_BYTES];
        for (chunk, dword) in raw.chunks_exact_mut(4).zip(self.dwords.iter().skip(6)) {
            put_u32(chunk, 0, *dword);
        }
        SglDescriptor::decode(&raw)
    }

    /// Sets SGL1 (CDW6..CDW9).
    pub fn set_sgl(&mut self, sgl: &SglDescriptor) {
        let mut raw = [0u8; SGL_DESCRIPTOR_BYTES];
        sgl.encode(&mut raw);
        for (dword, chunk) in self.dwords.iter_mut().skip(6).zip(raw.chunks_exact(4)) {
            *dword = get_u32(chunk, 0);
        }
    }

    /// Builds CDW0 from opcode, command id and PSDT (tests and the host side use this).
    pub fn set_cdw0(&mut self, opcode: u8, command_id: CommandId, psdt: u8) {
        self.dwords[0] = u32::from(opcode) | (u32::from(psdt & 0b11) << 14) | (u32::from(command_id.0) << 16);
    }

    /// Sets NSID (CDW1).
    pub fn set_namespace_id(&mut self, namespace_id: NamespaceId) {
        self.dwords[1] = namespace_id.0;
    }

    /// Sets FCTYPE (byte 4) of a Fabrics command, leaving bytes 5..7 as they are
    /// (they are reserved in every Fabrics command).
    pub fn set_fabrics_command_type(&mut self, fabrics_command_type: u8) {
        self.dwords[1] = (self.dwords[1] & !0xFF) | u32::from(fabrics_command_type);
    }

    /// Starting LBA of an NVM read/write-family command (SLBA, CDW10..CDW11).
    pub fn starting_lba(&self) -> u64 {
        u64::from(self.dwords[10]) | (u64::from(self.dwords[11]) << 32)
    }

    /// Number of logical blocks of an NVM read/write-family command: NLB (CDW12 bits
    /// 15:0) is 0's based, so this returns NLB + 1.
    pub fn block_count(&self) -> u32 {
        (self.dwords[12] & 0xFFFF) + 1
    }

    /// FUA: force unit access, CDW12 bit 30 of Read/Write/Write Zeroes/Compare.
    pub fn force_unit_access(&self) -> bool {
        self.dwords[12] & (1 << 30) != 0
    }
}

/// SGL descriptor type (high nibble of byte 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SglDescriptorType {
    DataBlock = 0x0,
    BitBucket = 0x1,
    Segment = 0x2,
    LastSegment = 0x3,
    KeyedDataBlock = 0x4,
    TransportDataBlock = 0x5,
}

/// SGL descriptor sub type (low nibble of byte 15).
pub mod sgl_subtype {
    /// The address field is an address.
    pub const ADDRESS: u8 = 0x0;
    /// The address field is an offset into in-capsule data.
    pub const OFFSET: u8 = 0x1;
    /// Transport specific: for NVMe/TCP, data moved by C2HData/H2CData/R2T PDUs.
    pub const TRANSPORT_SPECIFIC: u8 = 0xA;
}

/// A 16-byte SGL descriptor as NVMe over Fabrics uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SglDescriptor {
    /// Address, or offset into in-capsule data for sub type "offset".
    pub address: u64,
    /// Length of the data in bytes.
    pub length: u32,
    /// SGL identifier byte: descriptor type (bits 7:4) and sub type (bits 3:0).
    pub identifier: u8,
}

impl SglDescriptor {
    /// Decodes 16 bytes.
    pub fn decode(raw: &[u8; SGL_DESCRIPTOR_BYTES]) -> Self {
        Self { address: get_u64(raw, 0), length: get_u32(raw, 8), identifier: raw[15] }
    }

    /// Encodes into 16 bytes (reserved bytes 12..15 are zero).
    pub fn encode(&self, out: &mut [u8; SGL_DESCRIPTOR_BYTES]) {
        out.fill(0);
        put_u64(out, 0, self.address);
        put_u32(out, 8, self.length);
        out[15] = self.identifier;
    }

    /// Descriptor type, high nibble of the identifier.
    pub fn descriptor_type(&self) -> u8 {
        self.identifier >> 4
    }

    /// Descriptor sub type, low nibble of the identifier.
    pub fn subtype(&self) -> u8 {
        self.identifier & 0x0F
    }

    /// A data block descriptor addressing in-capsule data at `offset` (host side).
    pub fn in_capsule(offset: u64, length: u32) -> Self {
        Self { address: offset, length, identifier: ((SglDescriptorType::DataBlock as u8) << 4) | sgl_subtype::OFFSET }
    }

    /// A transport data block descriptor: data moves in transport PDUs (host side).
    pub fn transport(length: u32) -> Self {
        Self {
            address: 0,
            length,
            identifier: ((SglDescriptorType::TransportDataBlock as u8) << 4) | sgl_subtype::TRANSPORT_SPECIFIC,
        }
    }

    /// True when the data is carried inside the command capsule.
    pub fn is_in_capsule(&self) -> bool {
        self.descriptor_type() == SglDescriptorType::DataBlock as u8 && self.subtype() == sgl_subtype::OFFSET
    }

    /// True when the data is carried by transport data PDUs.
    pub fn is_transport(&self) -> bool {
        self.descriptor_type() == SglDescriptorType::TransportDataBlock as u8
            && self.subtype() == sgl_subtype::TRANSPORT_SPECIFIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sqe_round_trips(bytes in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform32(any::<u8>())) {
            let mut raw = [0u8; 64];
            raw[..32].copy_from_slice(&bytes);
            raw[32..].copy_from_slice(&tail);
            let sqe = SubmissionQueueEntry::decode(&raw);
            let mut again = [0u8; 64];
            sqe.encode(&mut again);
            prop_assert_eq!(raw, again);
        }

        #[test]
        fn sgl_round_trips_through_the_sqe(address in any::<u64>(), length in any::<u32>(), identifier in any::<u8>()) {
            let sgl = SglDescriptor { address, length, identifier };
            let mut sqe = SubmissionQueueEntry::default();
            sqe.set_sgl(&sgl);
            prop_assert_eq!(sqe.sgl(), sgl);
        }
    }

    #[test]
    fn fields_sit_at_the_spec_offsets() {
        let mut raw = [0u8; 64];
        raw[0] = 0x02; // OPC read
        raw[1] = 0x40; // PSDT = 01b
        raw[2..4].copy_from_slice(&0x1234u16.to_le_bytes());
        raw[4..8].copy_from_slice(&7u32.to_le_bytes());
        raw[40..48].copy_from_slice(&0x1_0000_0002u64.to_le_bytes());
        raw[48..52].copy_from_slice(&((1u32 << 30) | 7).to_le_bytes());
        raw[39] = 0x5A;
        raw[32..36].copy_from_slice(&4096u32.to_le_bytes());
        let sqe = SubmissionQueueEntry::decode(&raw);
        assert_eq!(sqe.opcode(), 0x02);
        assert_eq!(sqe.psdt(), PSDT_SGL_METADATA_BUFFER);
        assert_eq!(sqe.command_id(), CommandId(0x1234));
        assert_eq!(sqe.namespace_id(), NamespaceId(7));
        assert_eq!(sqe.starting_lba(), 0x1_0000_0002);
        assert_eq!(sqe.block_count(), 8);
        assert!(sqe.force_unit_access());
        assert!(sqe.sgl().is_transport());
        assert_eq!(sqe.sgl().length, 4096);
    }
}

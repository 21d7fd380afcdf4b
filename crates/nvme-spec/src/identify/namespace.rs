//! Identify Namespace data structure for the NVM command set (CNS 00h), NVM Command
//! Set 1.0 figure "Identify – I/O Command Set Specific Identify Namespace Data
//! Structure".

use super::IDENTIFY_DATA_BYTES;
use crate::bytes::{get_array, get_u128, get_u16, get_u32, get_u64, put_u128, put_u16, put_u32, put_u64};

/// Number of LBA format entries modelled. The spec has room for 64 (bytes 383:128),
/// but formats 16..63 only exist with extended LBA formats, which a target that
/// advertises a handful of formats never needs.
pub const LBA_FORMAT_COUNT: usize = 16;

/// Byte offset of LBAF0.
const LBA_FORMATS_OFFSET: usize = 128;

/// NSFEAT: namespace features (byte 24).
pub mod nsfeat {
    /// Thin provisioning: NCAP may be less than NSZE.
    pub const THIN_PROVISIONING: u8 = 1 << 0;
    /// NAWUN, NAWUPF and NACWU are valid for this namespace.
    pub const NAMESPACE_ATOMICS: u8 = 1 << 1;
    /// The Deallocated or Unwritten Logical Block error is supported.
    pub const DEALLOCATED_ERROR: u8 = 1 << 2;
    /// NGUID and EUI64, when non-zero, are never reused.
    pub const IDENTIFIER_REUSE: u8 = 1 << 3;
    /// NPWG, NPWA, NPDG, NPDA and NOWS are valid.
    pub const OPTIMAL_PERFORMANCE: u8 = 1 << 4;
}

/// DLFEAT: deallocate logical block features (byte 33).
pub mod dlfeat {
    /// Bits 2:0 = 001b: a deallocated block reads as all zeroes.
    pub const READ_ZEROES: u8 = 0b001;
    /// Bits 2:0 = 010b: a deallocated block reads as all FFh.
    pub const READ_ONES: u8 = 0b010;
    /// Mask of the read-behaviour bits.
    pub const READ_BEHAVIOUR_MASK: u8 = 0b111;
    /// Write Zeroes supports the Deallocate bit.
    pub const WRITE_ZEROES_DEALLOCATE: u8 = 1 << 3;
    /// The guard field of deallocated blocks carries the CRC of the data read.
    pub const GUARD_CRC: u8 = 1 << 4;
}

/// NMIC: namespace multi-path I/O and sharing capabilities (byte 30).
pub mod nmic {
    /// The namespace may be attached to two or more controllers at once.
    pub const SHARED: u8 = 1 << 0;
}

/// FLBAS: formatted LBA size (byte 26).
pub mod flbas {
    /// Bits 3:0: low four bits of the format index.
    pub const INDEX_LOW_MASK: u8 = 0x0F;
    /// Bit 4: metadata is transferred at the end of the data (extended LBA).
    pub const EXTENDED_METADATA: u8 = 1 << 4;
    /// Bits 6:5: high two bits of the format index (only with more than 16 formats).
    pub const INDEX_HIGH_MASK: u8 = 0b11 << 5;
}

/// One LBA format descriptor (LBAF), 4 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbaFormat {
    /// MS: metadata bytes per logical block, bytes 1:0.
    pub metadata_size: u16,
    /// LBADS: LBA data size, byte 2, as log2 of bytes (9 = 512, 12 = 4096); 0 means
    /// the format is not supported.
    pub lba_data_size_log2: u8,
    /// RP: relative performance, byte 3 bits 1:0 (0 best .. 3 degraded).
    pub relative_performance: u8,
}

impl LbaFormat {
    /// Decodes 4 bytes.
    pub fn decode(raw: &[u8; 4]) -> Self {
        Self { metadata_size: get_u16(raw, 0), lba_data_size_log2: raw[2], relative_performance: raw[3] & 0b11 }
    }

    /// Encodes into 4 bytes.
    pub fn encode(&self, out: &mut [u8; 4]) {
        put_u16(out, 0, self.metadata_size);
        out[2] = self.lba_data_size_log2;
        out[3] = self.relative_performance & 0b11;
    }

    /// Logical block size in bytes, or `None` when LBADS is out of the range the
    /// spec allows (9..=63 bits of shift; anything below 512 bytes is invalid).
    pub fn block_size_bytes(&self) -> Option<u64> {
        match self.lba_data_size_log2 {
            9..=63 => Some(1u64 << self.lba_data_size_log2),
            _ => None,
        }
    }
}

/// Identify Namespace data structure (CNS 00h). Counts are in logical blocks of the
/// formatted LBA size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// NSZE: namespace size in logical blocks, bytes 7:0.
    pub namespace_size: u64,
    /// NCAP: namespace capacity (blocks that may be allocated), bytes 15:8.
    pub namespace_capacity: u64,
    /// NUSE: namespace utilization (blocks currently allocated), bytes 23:16.
    pub namespace_utilization: u64,
    /// NSFEAT: namespace features, byte 24 ([`nsfeat`]).
    pub namespace_features: u8,
    /// NLBAF: number of LBA formats, byte 25, 0's based.
    pub number_of_lba_formats: u8,
    /// FLBAS: formatted LBA size, byte 26 ([`flbas`]).
    pub formatted_lba_size: u8,
    /// MC: metadata capabilities, byte 27.
    pub metadata_capabilities: u8,
    /// DPC: end-to-end data protection capabilities, byte 28.
    pub protection_capabilities: u8,
    /// DPS: end-to-end data protection type settings, byte 29.
    pub protection_settings: u8,
    /// NMIC: namespace multi-path I/O and sharing capabilities, byte 30 ([`nmic`]).
    pub multipath_capabilities: u8,
    /// RESCAP: reservation capabilities, byte 31.
    pub reservation_capabilities: u8,
    /// FPI: format progress indicator, byte 32.
    pub format_progress_indicator: u8,
    /// DLFEAT: deallocate logical block features, byte 33 ([`dlfeat`]).
    pub deallocate_features: u8,
    /// NAWUN: namespace atomic write unit normal, bytes 35:34, 0's based.
    pub atomic_write_unit_normal: u16,
    /// NAWUPF: namespace atomic write unit power fail, bytes 37:36, 0's based.
    pub atomic_write_unit_power_fail: u16,
    /// NACWU: namespace atomic compare and write unit, bytes 39:38, 0's based.
    pub atomic_compare_and_write_unit: u16,
    /// NABSN: namespace atomic boundary size normal, bytes 41:40, 0's based.
    pub atomic_boundary_size_normal: u16,
    /// NABO: namespace atomic boundary offset, bytes 43:42.
    pub atomic_boundary_offset: u16,
    /// NABSPF: namespace atomic boundary size power fail, bytes 45:44, 0's based.
    pub atomic_boundary_size_power_fail: u16,
    /// NOIOB: namespace optimal I/O boundary, bytes 47:46; 0 means none reported.
    pub optimal_io_boundary: u16,
    /// NVMCAP: NVM capacity in bytes, bytes 63:48.
    pub nvm_capacity: u128,
    /// NPWG: preferred write granularity, bytes 65:64, 0's based.
    pub preferred_write_granularity: u16,
    /// NPWA: preferred write alignment, bytes 67:66, 0's based.
    pub preferred_write_alignment: u16,
    /// NPDG: preferred deallocate granularity, bytes 69:68, 0's based.
    pub preferred_deallocate_granularity: u16,
    /// NPDA: preferred deallocate alignment, bytes 71:70, 0's based.
    pub preferred_deallocate_alignment: u16,
    /// NOWS: optimal write size, bytes 73:72, 0's based.
    pub optimal_write_size: u16,
    /// MSSRL: maximum single source range length for Copy, bytes 75:74.
    pub maximum_single_source_range_length: u16,
    /// MCL: maximum copy length, bytes 79:76.
    pub maximum_copy_length: u32,
    /// MSRC: maximum source range count for Copy, byte 80, 0's based.
    pub maximum_source_range_count: u8,
    /// ANAGRPID: ANA group identifier, bytes 95:92.
    pub ana_group_identifier: u32,
    /// NSATTR: namespace attributes, byte 99 (bit 0: write protected).
    pub namespace_attributes: u8,
    /// NVMSETID: NVM set identifier, bytes 101:100.
    pub nvm_set_identifier: u16,
    /// ENDGID: endurance group identifier, bytes 103:102.
    pub endurance_group_identifier: u16,
    /// NGUID: namespace globally unique identifier, bytes 119:104.
    pub namespace_globally_unique_identifier: [u8; 16],
    /// EUI64: IEEE extended unique identifier, bytes 127:120.
    pub ieee_extended_unique_identifier: [u8; 8],
    /// LBAF0..LBAF15: LBA formats, bytes 191:128.
    pub lba_formats: [LbaFormat; LBA_FORMAT_COUNT],
}

const _: () = assert!(LBA_FORMATS_OFFSET + LBA_FORMAT_COUNT * 4 <= IDENTIFY_DATA_BYTES);

impl Default for IdentifyNamespace {
    /// All zeros: this is also the structure returned for an inactive NSID.
    fn default() -> Self {
        Self::decode(&[0; IDENTIFY_DATA_BYTES])
    }
}

impl IdentifyNamespace {
    /// Decodes the 4096-byte structure.
    pub fn decode(raw: &[u8; IDENTIFY_DATA_BYTES]) -> Self {
        let mut lba_formats = [LbaFormat::default(); LBA_FORMAT_COUNT];
        for (index, format) in lba_formats.iter_mut().enumerate() {
            *format = LbaFormat::decode(&get_array(raw, LBA_FORMATS_OFFSET + index * 4));
        }
        Self {
            namespace_size: get_u64(raw, 0),
            namespace_capacity: get_u64(raw, 8),
            namespace_utilization: get_u64(raw, 16),
            namespace_features: raw[24],
            number_of_lba_formats: raw[25],
            formatted_lba_size: raw[26],
            metadata_capabilities: raw[27],
            protection_capabilities: raw[28],
            protection_settings: raw[29],
            multipath_capabilities: raw[30],
            reservation_capabilities: raw[31],
            format_progress_indicator: raw[32],
            deallocate_features: raw[33],
            atomic_write_unit_normal: get_u16(raw, 34),
            atomic_write_unit_power_fail: get_u16(raw, 36),
            atomic_compare_and_write_unit: get_u16(raw, 38),
            atomic_boundary_size_normal: get_u16(raw, 40),
            atomic_boundary_offset: get_u16(raw, 42),
            atomic_boundary_size_power_fail: get_u16(raw, 44),
            optimal_io_boundary: get_u16(raw, 46),
            nvm_capacity: get_u128(raw, 48),
            preferred_write_granularity: get_u16(raw, 64),
            preferred_write_alignment: get_u16(raw, 66),
            preferred_deallocate_granularity: get_u16(raw, 68),
            preferred_deallocate_alignment: get_u16(raw, 70),
            optimal_write_size: get_u16(raw, 72),
            maximum_single_source_range_length: get_u16(raw, 74),
            maximum_copy_length: get_u32(raw, 76),
            maximum_source_range_count: raw[80],
            ana_group_identifier: get_u32(raw, 92),
            namespace_attributes: raw[99],
            nvm_set_identifier: get_u16(raw, 100),
            endurance_group_identifier: get_u16(raw, 102),
            namespace_globally_unique_identifier: get_array(raw, 104),
            ieee_extended_unique_identifier: get_array(raw, 120),
            lba_formats,
        }
    }

    /// Encodes into 4096 bytes; everything not modelled is zero.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_DATA_BYTES]) {
        out.fill(0);
        put_u64(out, 0, self.namespace_size);
        put_u64(out, 8, self.namespace_capacity);
        put_u64(out, 16, self.namespace_utilization);
        out[24] = self.namespace_features;
        out[25] = self.number_of_lba_formats;
        out[26] = self.formatted_lba_size;
        out[27] = self.metadata_capabilities;
        out[28] = self.protection_capabilities;
        out[29] = self.protection_settings;
        out[30] = self.multipath_capabilities;
        out[31] = self.reservation_capabilities;
        out[32] = self.format_progress_indicator;
        out[33] = self.deallocate_features;
        put_u16(out, 34, self.atomic_write_unit_normal);
        put_u16(out, 36, self.atomic_write_unit_power_fail);
        put_u16(out, 38, self.atomic_compare_and_write_unit);
        put_u16(out, 40, self.atomic_boundary_size_normal);
        put_u16(out, 42, self.atomic_boundary_offset);
        put_u16(out, 44, self.atomic_boundary_size_power_fail);
        put_u16(out, 46, self.optimal_io_boundary);
        put_u128(out, 48, self.nvm_capacity);
        put_u16(out, 64, self.preferred_write_granularity);
        put_u16(out, 66, self.preferred_write_alignment);
        put_u16(out, 68, self.preferred_deallocate_granularity);
        put_u16(out, 70, self.preferred_deallocate_alignment);
        put_u16(out, 72, self.optimal_write_size);
        put_u16(out, 74, self.maximum_single_source_range_length);
        put_u32(out, 76, self.maximum_copy_length);
        out[80] = self.maximum_source_range_count;
        put_u32(out, 92, self.ana_group_identifier);
        out[99] = self.namespace_attributes;
        put_u16(out, 100, self.nvm_set_identifier);
        put_u16(out, 102, self.endurance_group_identifier);
        out[104..120].copy_from_slice(&self.namespace_globally_unique_identifier);
        out[120..128].copy_from_slice(&self.ieee_extended_unique_identifier);
        let slots = out[LBA_FORMATS_OFFSET..].chunks_exact_mut(4);
        for (format, slot) in self.lba_formats.iter().zip(slots) {
            let mut entry = [0u8; 4];
            format.encode(&mut entry);
            slot.copy_from_slice(&entry);
        }
    }

    /// Index of the LBA format in use: FLBAS bits 3:0, plus bits 6:5 as the high bits
    /// (those are only non-zero with more than 16 formats).
    pub fn formatted_lba_index(&self) -> usize {
        let low = self.formatted_lba_size & flbas::INDEX_LOW_MASK;
        let high = (self.formatted_lba_size & flbas::INDEX_HIGH_MASK) >> 5;
        usize::from(low | (high << 4))
    }

    /// The LBA format in use, if its index is one of the modelled sixteen.
    pub fn formatted_lba_format(&self) -> Option<LbaFormat> {
        self.lba_formats.get(self.formatted_lba_index()).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_layout_round_trip, to_array};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn identify_namespace_round_trips(raw in proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_BYTES)) {
            assert_layout_round_trip(&to_array::<IDENTIFY_DATA_BYTES>(&raw), IdentifyNamespace::decode, IdentifyNamespace::encode);
        }

        #[test]
        fn lba_format_round_trips(raw in any::<[u8; 4]>()) {
            assert_layout_round_trip(&raw, LbaFormat::decode, LbaFormat::encode);
        }
    }

    #[test]
    fn fields_sit_at_the_spec_offsets() {
        let mut namespace = IdentifyNamespace {
            namespace_size: 0x0102_0304_0506_0708,
            namespace_capacity: 0x10,
            namespace_utilization: 0x20,
            namespace_features: nsfeat::THIN_PROVISIONING,
            number_of_lba_formats: 1,
            formatted_lba_size: 1,
            multipath_capabilities: nmic::SHARED,
            deallocate_features: dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEALLOCATE,
            nvm_capacity: 1 << 100,
            optimal_write_size: 7,
            ana_group_identifier: 3,
            namespace_globally_unique_identifier: [0xAB; 16],
            ieee_extended_unique_identifier: [0xCD; 8],
            ..Default::default()
        };
        namespace.lba_formats[0] = LbaFormat { metadata_size: 0, lba_data_size_log2: 9, relative_performance: 0 };
        namespace.lba_formats[1] = LbaFormat { metadata_size: 8, lba_data_size_log2: 12, relative_performance: 2 };
        let mut raw = [0u8; IDENTIFY_DATA_BYTES];
        namespace.encode(&mut raw);
        assert_eq!(&raw[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(raw[8], 0x10);
        assert_eq!(raw[16], 0x20);
        assert_eq!((raw[24], raw[25], raw[26]), (1, 1, 1));
        assert_eq!(raw[30], 1);
        assert_eq!(raw[33], 0b1001);
        assert_eq!(raw[48 + 12], 0x10); // bit 100 is bit 4 of byte 12
        assert_eq!(raw[72], 7);
        assert_eq!(raw[92], 3);
        assert_eq!(raw[104], 0xAB);
        assert_eq!(raw[119], 0xAB);
        assert_eq!(raw[120], 0xCD);
        assert_eq!(raw[127], 0xCD);
        assert_eq!(&raw[128..132], &[0, 0, 9, 0]);
        assert_eq!(&raw[132..136], &[8, 0, 12, 2]);
        let back = IdentifyNamespace::decode(&raw);
        assert_eq!(back, namespace);
        assert_eq!(back.formatted_lba_index(), 1);
        assert_eq!(back.formatted_lba_format().and_then(|f| f.block_size_bytes()), Some(4096));
    }

    #[test]
    fn formatted_index_uses_the_high_bits() {
        let namespace = IdentifyNamespace { formatted_lba_size: 0b0110_0011, ..Default::default() };
        assert_eq!(namespace.formatted_lba_index(), 0x33);
        assert_eq!(namespace.formatted_lba_format(), None);
        assert_eq!(LbaFormat::default().block_size_bytes(), None);
    }
}

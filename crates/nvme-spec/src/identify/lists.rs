//! The list-shaped Identify data structures: namespace ID lists (CNS 02h, 07h, 10h),
//! namespace identification descriptors (CNS 03h), controller lists (CNS 12h, 13h)
//! and the I/O command set combination vectors (CNS 1Ch).

use super::IDENTIFY_DATA_BYTES;
use crate::bytes::{get_array, get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::ids::{ControllerId, NamespaceId};
use crate::sorted_ids::SortedIds;

/// Maximum entries in a namespace ID list (1024 four-byte NSIDs fill 4096 bytes).
pub const NAMESPACE_LIST_CAPACITY: usize = IDENTIFY_DATA_BYTES / 4;
/// Maximum entries in a controller list (a two-byte count, then 2047 IDs).
pub const CONTROLLER_LIST_CAPACITY: usize = IDENTIFY_DATA_BYTES / 2 - 1;
/// Number of I/O command set combination vectors in the CNS 1Ch structure.
pub const IO_COMMAND_SET_COMBINATIONS: usize = IDENTIFY_DATA_BYTES / 8;

const _: () = assert!(NAMESPACE_LIST_CAPACITY == 1024);
const _: () = assert!(CONTROLLER_LIST_CAPACITY == 2047);
const _: () = assert!(IO_COMMAND_SET_COMBINATIONS == 512);

/// Bits of an I/O command set combination vector (bit n = command set with CSI n).
pub mod command_set_vector {
    /// NVM command set.
    pub const NVM: u64 = 1 << 0;
    /// Key Value command set.
    pub const KEY_VALUE: u64 = 1 << 1;
    /// Zoned Namespace command set.
    pub const ZONED: u64 = 1 << 2;
}

/// Encodes a namespace ID list: up to 1024 NSIDs, ascending, the rest zero.
///
/// The ids are sorted and de-duplicated here, and when there are more than 1024 the
/// lowest 1024 are kept (a host pages through with "NSIDs greater than" the last one
/// it saw). NSID 0 and FFFFFFFFh are not namespaces and are skipped. Filtering by the
/// command's starting NSID is the caller's job. Returns the number of entries written.
pub fn encode_namespace_list(ids: impl IntoIterator<Item = NamespaceId>, out: &mut [u8; IDENTIFY_DATA_BYTES]) -> usize {
    let mut sorted = SortedIds::<NAMESPACE_LIST_CAPACITY>::new();
    for id in ids {
        if id != NamespaceId::NONE && id != NamespaceId::BROADCAST {
            sorted.insert(id.0);
        }
    }
    out.fill(0);
    for (index, id) in sorted.as_slice().iter().enumerate() {
        put_u32(out, index * 4, *id);
    }
    sorted.as_slice().len()
}

/// Iterates a namespace ID list up to its first zero entry.
pub fn decode_namespace_list(raw: &[u8; IDENTIFY_DATA_BYTES]) -> NamespaceListIter<'_> {
    NamespaceListIter { raw, index: 0 }
}

/// Iterator returned by [`decode_namespace_list`].
#[derive(Clone, Debug)]
pub struct NamespaceListIter<'a> {
    raw: &'a [u8; IDENTIFY_DATA_BYTES],
    index: usize,
}

impl Iterator for NamespaceListIter<'_> {
    type Item = NamespaceId;

    fn next(&mut self) -> Option<NamespaceId> {
        if self.index >= NAMESPACE_LIST_CAPACITY {
            return None;
        }
        let id = get_u32(self.raw, self.index * 4);
        if id == 0 {
            self.index = NAMESPACE_LIST_CAPACITY;
            return None;
        }
        self.index += 1;
        Some(NamespaceId(id))
    }
}

/// Encodes a controller list: the number of identifiers (bytes 1:0) followed by up
/// to 2047 controller IDs, ascending and de-duplicated like
/// [`encode_namespace_list`]. Returns the number of entries written.
pub fn encode_controller_list(
    ids: impl IntoIterator<Item = ControllerId>,
    out: &mut [u8; IDENTIFY_DATA_BYTES],
) -> usize {
    let mut sorted = SortedIds::<CONTROLLER_LIST_CAPACITY>::new();
    for id in ids {
        sorted.insert(u32::from(id.0));
    }
    out.fill(0);
    let ids = sorted.as_slice();
    // At most 2047 entries, so the count fits in the two-byte field.
    put_u16(out, 0, ids.len() as u16);
    for (index, id) in ids.iter().enumerate() {
        put_u16(out, 2 + index * 2, *id as u16);
    }
    ids.len()
}

/// Iterates a controller list. A count larger than 2047 (malformed) is clamped.
pub fn decode_controller_list(raw: &[u8; IDENTIFY_DATA_BYTES]) -> ControllerListIter<'_> {
    let count = usize::from(get_u16(raw, 0)).min(CONTROLLER_LIST_CAPACITY);
    ControllerListIter { raw, index: 0, count }
}

/// Iterator returned by [`decode_controller_list`].
#[derive(Clone, Debug)]
pub struct ControllerListIter<'a> {
    raw: &'a [u8; IDENTIFY_DATA_BYTES],
    index: usize,
    count: usize,
}

impl Iterator for ControllerListIter<'_> {
    type Item = ControllerId;

    fn next(&mut self) -> Option<ControllerId> {
        if self.index >= self.count {
            return None;
        }
        let id = get_u16(self.raw, 2 + self.index * 2);
        self.index += 1;
        Some(ControllerId(id))
    }
}

/// NIDT values of the namespace identification descriptors.
pub mod namespace_identifier_type {
    /// IEEE EUI-64, 8 bytes.
    pub const IEEE_EUI64: u8 = 1;
    /// NGUID, 16 bytes.
    pub const NGUID: u8 = 2;
    /// UUID (RFC 4122), 16 bytes.
    pub const UUID: u8 = 3;
    /// Command set identifier, 1 byte.
    pub const COMMAND_SET_IDENTIFIER: u8 = 4;
}

/// Size of a descriptor header: NIDT (byte 0), NIDL (byte 1), two reserved bytes.
const DESCRIPTOR_HEADER_BYTES: usize = 4;

/// One namespace identification descriptor (CNS 03h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceDescriptor {
    /// NIDT 1, NIDL 8: IEEE extended unique identifier.
    Ieee64([u8; 8]),
    /// NIDT 2, NIDL 16: namespace globally unique identifier.
    Nguid([u8; 16]),
    /// NIDT 3, NIDL 16: UUID.
    Uuid([u8; 16]),
    /// NIDT 4, NIDL 1: command set identifier ([`super::csi`]).
    CommandSetIdentifier(u8),
}

impl NamespaceDescriptor {
    /// NIDT of this descriptor.
    pub fn identifier_type(&self) -> u8 {
        match self {
            Self::Ieee64(_) => namespace_identifier_type::IEEE_EUI64,
            Self::Nguid(_) => namespace_identifier_type::NGUID,
            Self::Uuid(_) => namespace_identifier_type::UUID,
            Self::CommandSetIdentifier(_) => namespace_identifier_type::COMMAND_SET_IDENTIFIER,
        }
    }

    /// NID bytes (NIDL of them).
    pub fn identifier(&self) -> &[u8] {
        match self {
            Self::Ieee64(bytes) => bytes,
            Self::Nguid(bytes) | Self::Uuid(bytes) => bytes,
            Self::CommandSetIdentifier(csi) => core::slice::from_ref(csi),
        }
    }

    /// Parses one descriptor from its NIDT and NID bytes; `None` for an unknown
    /// type or a length that does not match the type.
    fn from_parts(identifier_type: u8, identifier: &[u8]) -> Option<Self> {
        match (identifier_type, identifier.len()) {
            (namespace_identifier_type::IEEE_EUI64, 8) => Some(Self::Ieee64(get_array(identifier, 0))),
            (namespace_identifier_type::NGUID, 16) => Some(Self::Nguid(get_array(identifier, 0))),
            (namespace_identifier_type::UUID, 16) => Some(Self::Uuid(get_array(identifier, 0))),
            (namespace_identifier_type::COMMAND_SET_IDENTIFIER, 1) => {
                identifier.first().copied().map(Self::CommandSetIdentifier)
            }
            _ => None,
        }
    }
}

/// Encodes a namespace identification descriptor list. Descriptors are packed back
/// to back (header then NID); the zero-filled remainder ends the list. Descriptors
/// that would not fit are dropped (at most 20 bytes each, so 204 always fit).
/// Returns the number of bytes used.
pub fn encode_namespace_descriptors(descriptors: &[NamespaceDescriptor], out: &mut [u8; IDENTIFY_DATA_BYTES]) -> usize {
    out.fill(0);
    let mut offset = 0;
    for descriptor in descriptors {
        let identifier = descriptor.identifier();
        let end = offset + DESCRIPTOR_HEADER_BYTES + identifier.len();
        // `None` when the descriptor would run past the end of the structure.
        let Some((header, nid)) =
            out.get_mut(offset..end).and_then(|slot| slot.split_first_chunk_mut::<DESCRIPTOR_HEADER_BYTES>())
        else {
            break;
        };
        header[0] = descriptor.identifier_type();
        // NIDL is at most 16, so the cast cannot truncate.
        header[1] = identifier.len() as u8;
        nid.copy_from_slice(identifier);
        offset = end;
    }
    offset
}

/// Iterates a namespace identification descriptor list (host side).
///
/// Stops at a zero NIDT, at a descriptor running past the end, or at a known type
/// whose length is wrong (the rest cannot be trusted). Unknown types with a
/// plausible length are skipped, so newer descriptor types do not hide the known ones.
pub fn decode_namespace_descriptors(raw: &[u8; IDENTIFY_DATA_BYTES]) -> NamespaceDescriptorIter<'_> {
    NamespaceDescriptorIter { raw, offset: 0 }
}

/// Iterator returned by [`decode_namespace_descriptors`].
#[derive(Clone, Debug)]
pub struct NamespaceDescriptorIter<'a> {
    raw: &'a [u8; IDENTIFY_DATA_BYTES],
    offset: usize,
}

impl Iterator for NamespaceDescriptorIter<'_> {
    type Item = NamespaceDescriptor;

    fn next(&mut self) -> Option<NamespaceDescriptor> {
        loop {
            // `None` when fewer than a descriptor header's bytes are left.
            let (header, rest) =
                self.raw.get(self.offset..).and_then(|rest| rest.split_first_chunk::<DESCRIPTOR_HEADER_BYTES>())?;
            let identifier_type = header[0];
            let length = usize::from(header[1]);
            let identifier = match rest.get(..length) {
                Some(identifier) if identifier_type != 0 => identifier,
                // A zero NIDT, or a descriptor running past the end.
                _ => {
                    self.offset = IDENTIFY_DATA_BYTES;
                    return None;
                }
            };
            self.offset += DESCRIPTOR_HEADER_BYTES + length;
            if let Some(descriptor) = NamespaceDescriptor::from_parts(identifier_type, identifier) {
                return Some(descriptor);
            }
            if (namespace_identifier_type::IEEE_EUI64..=namespace_identifier_type::COMMAND_SET_IDENTIFIER)
                .contains(&identifier_type)
            {
                // A known type with the wrong length: malformed, stop.
                self.offset = IDENTIFY_DATA_BYTES;
                return None;
            }
        }
    }
}

/// Encodes the I/O Command Set data structure (CNS 1Ch): up to 512 combination
/// vectors of 8 bytes, the rest zero. A target supporting only the NVM command set
/// passes `&[command_set_vector::NVM]`. Extra vectors are ignored.
pub fn encode_io_command_set_vector(combinations: &[u64], out: &mut [u8; IDENTIFY_DATA_BYTES]) {
    out.fill(0);
    for (index, vector) in combinations.iter().take(IO_COMMAND_SET_COMBINATIONS).enumerate() {
        put_u64(out, index * 8, *vector);
    }
}

/// Reads combination vector `index` of a CNS 1Ch structure; `None` past the end.
pub fn io_command_set_combination(raw: &[u8; IDENTIFY_DATA_BYTES], index: usize) -> Option<u64> {
    (index < IO_COMMAND_SET_COMBINATIONS).then(|| get_u64(raw, index * 8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn namespace_list_is_sorted_unique_and_round_trips(ids in proptest::collection::vec(any::<u32>(), 0..1500)) {
            let mut raw = [0u8; IDENTIFY_DATA_BYTES];
            let written = encode_namespace_list(ids.iter().map(|&id| NamespaceId(id)), &mut raw);
            let mut expected: Vec<u32> = ids.into_iter().filter(|&id| id != 0 && id != u32::MAX).collect();
            expected.sort_unstable();
            expected.dedup();
            expected.truncate(NAMESPACE_LIST_CAPACITY);
            let decoded: Vec<u32> = decode_namespace_list(&raw).map(|id| id.0).collect();
            prop_assert_eq!(written, expected.len());
            prop_assert_eq!(decoded, expected);
        }

        #[test]
        fn controller_list_round_trips(ids in proptest::collection::vec(any::<u16>(), 0..2500)) {
            let mut raw = [0u8; IDENTIFY_DATA_BYTES];
            let written = encode_controller_list(ids.iter().map(|&id| ControllerId(id)), &mut raw);
            let mut expected = ids;
            expected.sort_unstable();
            expected.dedup();
            expected.truncate(CONTROLLER_LIST_CAPACITY);
            let decoded: Vec<u16> = decode_controller_list(&raw).map(|id| id.0).collect();
            prop_assert_eq!(written, expected.len());
            prop_assert_eq!(usize::from(u16::from_le_bytes([raw[0], raw[1]])), expected.len());
            prop_assert_eq!(decoded, expected);
        }

        #[test]
        fn descriptors_round_trip(eui in any::<[u8; 8]>(), nguid in any::<[u8; 16]>(), uuid in any::<[u8; 16]>(), csi in any::<u8>()) {
            let descriptors = [
                NamespaceDescriptor::Ieee64(eui),
                NamespaceDescriptor::Nguid(nguid),
                NamespaceDescriptor::Uuid(uuid),
                NamespaceDescriptor::CommandSetIdentifier(csi),
            ];
            let mut raw = [0xEEu8; IDENTIFY_DATA_BYTES];
            let used = encode_namespace_descriptors(&descriptors, &mut raw);
            prop_assert_eq!(used, 12 + 20 + 20 + 5);
            let decoded: Vec<_> = decode_namespace_descriptors(&raw).collect();
            prop_assert_eq!(decoded.as_slice(), &descriptors[..]);
        }

        #[test]
        fn descriptor_decoder_never_panics(raw in proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_BYTES)) {
            let raw: [u8; IDENTIFY_DATA_BYTES] = crate::test_support::to_array(&raw);
            prop_assert!(decode_namespace_descriptors(&raw).count() <= IDENTIFY_DATA_BYTES / 5);
        }
    }

    #[test]
    fn descriptor_layout_matches_the_spec() {
        let mut raw = [0u8; IDENTIFY_DATA_BYTES];
        encode_namespace_descriptors(
            &[NamespaceDescriptor::Nguid([0x11; 16]), NamespaceDescriptor::CommandSetIdentifier(0)],
            &mut raw,
        );
        assert_eq!(&raw[0..4], &[2, 16, 0, 0]);
        assert_eq!(raw[4], 0x11);
        assert_eq!(raw[19], 0x11);
        assert_eq!(&raw[20..25], &[4, 1, 0, 0, 0]);
        assert_eq!(raw[25], 0); // end of list
    }

    #[test]
    fn descriptor_decoder_skips_unknown_and_stops_on_malformed() {
        let mut raw = [0u8; IDENTIFY_DATA_BYTES];
        raw[0] = 0x7F; // unknown type, 2 bytes
        raw[1] = 2;
        raw[6] = 4; // CSI
        raw[7] = 1;
        raw[10] = 2;
        raw[11] = 3; // NGUID claiming 3 bytes: malformed
        raw[15] = 1;
        raw[16] = 8;
        let decoded: Vec<_> = decode_namespace_descriptors(&raw).collect();
        assert_eq!(decoded, vec![NamespaceDescriptor::CommandSetIdentifier(2)]);
    }

    #[test]
    fn lists_sit_at_the_spec_offsets() {
        let mut raw = [0xFFu8; IDENTIFY_DATA_BYTES];
        encode_namespace_list([NamespaceId(5), NamespaceId(1), NamespaceId(5)], &mut raw);
        assert_eq!(&raw[0..12], &[1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);

        encode_controller_list([ControllerId(0x0203), ControllerId(1)], &mut raw);
        assert_eq!(&raw[0..8], &[2, 0, 1, 0, 0x03, 0x02, 0, 0]);

        encode_io_command_set_vector(&[command_set_vector::NVM], &mut raw);
        assert_eq!(&raw[0..9], &[1, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(io_command_set_combination(&raw, 0), Some(1));
        assert_eq!(io_command_set_combination(&raw, 511), Some(0));
        assert_eq!(io_command_set_combination(&raw, 512), None);
    }

    #[test]
    fn namespace_list_keeps_the_lowest_ids_when_full() {
        let mut raw = [0u8; IDENTIFY_DATA_BYTES];
        let written = encode_namespace_list((1..=3000u32).rev().map(NamespaceId), &mut raw);
        assert_eq!(written, 1024);
        let decoded: Vec<_> = decode_namespace_list(&raw).collect();
        assert_eq!(decoded.first(), Some(&NamespaceId(1)));
        assert_eq!(decoded.last(), Some(&NamespaceId(1024)));
    }
}

//! Asymmetric Namespace Access (NVMe Base 2.0, "Asymmetric Namespace Access
//! Reporting"): ANA states, the capability bits of Identify Controller, and the ANA
//! log page (0Ch) with its group descriptors.

use crate::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::NamespaceId;

/// ANAGRPID: ANA group identifier. 0 is "no group" and never reported in the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AnaGroupId(pub u32);

/// ANAS: the access state of an ANA group as one controller reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AnaState {
    /// Commands are processed, and this is the best path.
    Optimized = 0x01,
    /// Commands are processed, but another path is better.
    NonOptimized = 0x02,
    /// Commands that touch user data fail (Asymmetric Access Inaccessible).
    Inaccessible = 0x03,
    /// The path will never serve the group again (Asymmetric Access Persistent Loss).
    PersistentLoss = 0x04,
    /// The state is changing; commands fail with Asymmetric Access Transition and
    /// hosts retry them, for at most ANATT seconds.
    Change = 0x0F,
}

impl AnaState {
    /// Decodes ANAS (bits 3:0 of the descriptor's byte 16); `None` for reserved values.
    pub fn from_u8(value: u8) -> Option<AnaState> {
        match value & 0x0F {
            0x01 => Some(AnaState::Optimized),
            0x02 => Some(AnaState::NonOptimized),
            0x03 => Some(AnaState::Inaccessible),
            0x04 => Some(AnaState::PersistentLoss),
            0x0F => Some(AnaState::Change),
            _ => None,
        }
    }

    /// True when commands that access user data are processed in this state.
    pub fn serves_io(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }

    /// The name nvme-cli prints ("optimized", "non-optimized", ...).
    pub fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }
}

/// ANACAP: ANA capabilities (Identify Controller byte 343).
pub mod anacap {
    /// The controller reports the Optimized state.
    pub const REPORTS_OPTIMIZED: u8 = 1 << 0;
    /// ... the Non-Optimized state.
    pub const REPORTS_NON_OPTIMIZED: u8 = 1 << 1;
    /// ... the Inaccessible state.
    pub const REPORTS_INACCESSIBLE: u8 = 1 << 2;
    /// ... the Persistent Loss state.
    pub const REPORTS_PERSISTENT_LOSS: u8 = 1 << 3;
    /// ... the Change state.
    pub const REPORTS_CHANGE: u8 = 1 << 4;
    /// A namespace's ANAGRPID does not change while it is attached.
    pub const GROUP_ID_STATIC: u8 = 1 << 6;
    /// Namespace Management accepts a non-zero ANAGRPID.
    pub const GROUP_ID_IN_NAMESPACE_MANAGEMENT: u8 = 1 << 7;
}

/// LSP bit 0 of Get Log Page 0Ch: RGO, return groups only (no NSID lists).
pub const LOG_SPECIFIC_RETURN_GROUPS_ONLY: u8 = 1 << 0;

/// Size of the ANA log header: CHGCNT (8), NGRPS (2), reserved (6).
pub const ANA_LOG_HEADER_BYTES: usize = 16;
/// Size of a group descriptor before its NSID list.
pub const ANA_GROUP_DESCRIPTOR_BYTES: usize = 32;

/// One ANA group descriptor without its NSID list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnaGroupDescriptor {
    /// ANAGRPID.
    pub group_id: AnaGroupId,
    /// NNSIDS: how many NSIDs follow the descriptor (0 with RGO).
    pub namespace_count: u32,
    /// CHGCNT: changes of this group's state.
    pub change_count: u64,
    /// ANAS.
    pub state: AnaState,
}

/// Writes the log header into the first 16 bytes of `out` (at least that long;
/// nothing is written when it is shorter).
pub fn encode_ana_log_header(change_count: u64, group_count: u16, out: &mut [u8]) {
    let Some(header) = out.first_chunk_mut::<ANA_LOG_HEADER_BYTES>() else {
        return;
    };
    header.fill(0);
    put_u64(header, 0, change_count);
    put_u16(header, 8, group_count);
}

impl AnaGroupDescriptor {
    /// Writes the descriptor and then `namespaces` (exactly `namespace_count` of them)
    /// at the start of `out`; returns the bytes written, or `None` when `out` is too
    /// short (nothing useful is written then).
    pub fn encode(&self, namespaces: impl Iterator<Item = NamespaceId>, out: &mut [u8]) -> Option<usize> {
        let total = ANA_GROUP_DESCRIPTOR_BYTES + self.namespace_count as usize * 4;
        if out.len() < total {
            return None;
        }
        let (descriptor, list) = out.split_first_chunk_mut::<ANA_GROUP_DESCRIPTOR_BYTES>()?;
        descriptor.fill(0);
        put_u32(descriptor, 0, self.group_id.0);
        put_u32(descriptor, 4, self.namespace_count);
        put_u64(descriptor, 8, self.change_count);
        descriptor[16] = self.state as u8;
        let mut written = 0;
        // `list` has room for `namespace_count` NSIDs: `out` is at least `total` bytes.
        for (namespace, entry) in namespaces.take(self.namespace_count as usize).zip(list.chunks_exact_mut(4)) {
            put_u32(entry, 0, namespace.0);
            written += 1;
        }
        debug_assert_eq!(written, self.namespace_count, "namespace_count must match the NSIDs given");
        Some(total)
    }
}

/// One group of a decoded ANA log: the descriptor and its NSIDs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaGroup {
    pub descriptor: AnaGroupDescriptor,
    pub namespaces: Vec<NamespaceId>,
}

/// A decoded ANA log page (host side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaLog {
    /// CHGCNT of the whole log.
    pub change_count: u64,
    pub groups: Vec<AnaGroup>,
}

/// Why an ANA log cannot be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnaLogError {
    /// The log ends inside group descriptor `index` (or its NSID list).
    Truncated { index: u16 },
    /// Group descriptor `index` has a reserved ANAS value.
    ReservedState { index: u16, state: u8 },
}

impl std::fmt::Display for AnaLogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnaLogError::Truncated { index } => write!(f, "the ANA log ends inside group descriptor {index}"),
            AnaLogError::ReservedState { index, state } => {
                write!(f, "ANA group descriptor {index} has the reserved state {state:#x}")
            }
        }
    }
}

impl std::error::Error for AnaLogError {}

impl AnaLog {
    /// Decodes a log read from a controller; `data` may be longer than the log.
    pub fn decode(data: &[u8]) -> Result<AnaLog, AnaLogError> {
        if data.len() < ANA_LOG_HEADER_BYTES {
            return Err(AnaLogError::Truncated { index: 0 });
        }
        let change_count = get_u64(data, 0);
        let group_count = get_u16(data, 8);
        let mut groups = Vec::with_capacity(usize::from(group_count).min(1024));
        let mut offset = ANA_LOG_HEADER_BYTES;
        for index in 0..group_count {
            let truncated = AnaLogError::Truncated { index };
            let header = data
                .get(offset..)
                .and_then(|rest| rest.first_chunk::<ANA_GROUP_DESCRIPTOR_BYTES>())
                .ok_or(truncated)?;
            let namespace_count = get_u32(header, 4);
            let raw_state = header[16];
            let state =
                AnaState::from_u8(raw_state).ok_or(AnaLogError::ReservedState { index, state: raw_state & 0x0F })?;
            let list_start = offset + ANA_GROUP_DESCRIPTOR_BYTES;
            let list_bytes = (namespace_count as usize).checked_mul(4).ok_or(truncated)?;
            let list = data.get(list_start..list_start.checked_add(list_bytes).ok_or(truncated)?).ok_or(truncated)?;
            groups.push(AnaGroup {
                descriptor: AnaGroupDescriptor {
                    group_id: AnaGroupId(get_u32(header, 0)),
                    namespace_count,
                    change_count: get_u64(header, 8),
                    state,
                },
                namespaces: list.chunks_exact(4).map(|chunk| NamespaceId(get_u32(chunk, 0))).collect(),
            });
            offset = list_start + list_bytes;
        }
        Ok(AnaLog { change_count, groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_log_encodes_and_decodes_to_the_same_groups() {
        let mut page = [0u8; 256];
        encode_ana_log_header(7, 2, &mut page);
        let first = AnaGroupDescriptor {
            group_id: AnaGroupId(1),
            namespace_count: 2,
            change_count: 3,
            state: AnaState::Optimized,
        };
        let used = first.encode([NamespaceId(1), NamespaceId(5)].into_iter(), &mut page[16..]).unwrap();
        assert_eq!(used, 40);
        let second = AnaGroupDescriptor {
            group_id: AnaGroupId(2),
            namespace_count: 0,
            change_count: 1,
            state: AnaState::Change,
        };
        second.encode(std::iter::empty(), &mut page[56..]).unwrap();
        let log = AnaLog::decode(&page).unwrap();
        assert_eq!(log.change_count, 7);
        assert_eq!(log.groups.len(), 2);
        assert_eq!(log.groups[0].descriptor, first);
        assert_eq!(log.groups[0].namespaces, [NamespaceId(1), NamespaceId(5)]);
        assert_eq!(log.groups[1].descriptor, second);
        // Byte positions from the specification's figure.
        assert_eq!(page[8], 2);
        assert_eq!(page[16], 1);
        assert_eq!(page[20], 2);
        assert_eq!(page[32], AnaState::Optimized as u8);
        assert_eq!(page[48..52], 1u32.to_le_bytes());
        assert_eq!(page[52..56], 5u32.to_le_bytes());
    }

    #[test]
    fn a_short_buffer_is_refused() {
        let descriptor = AnaGroupDescriptor {
            group_id: AnaGroupId(1),
            namespace_count: 1,
            change_count: 0,
            state: AnaState::Optimized,
        };
        assert_eq!(descriptor.encode([NamespaceId(1)].into_iter(), &mut [0u8; 35]), None);
    }

    #[test]
    fn states_round_trip_and_reserved_ones_are_refused() {
        for state in [
            AnaState::Optimized,
            AnaState::NonOptimized,
            AnaState::Inaccessible,
            AnaState::PersistentLoss,
            AnaState::Change,
        ] {
            assert_eq!(AnaState::from_u8(state as u8), Some(state));
        }
        assert_eq!(AnaState::from_u8(0), None);
        assert_eq!(AnaState::from_u8(5), None);
        let mut page = [0u8; 48];
        encode_ana_log_header(1, 1, &mut page);
        page[16] = 1;
        page[32] = 5;
        assert_eq!(AnaLog::decode(&page), Err(AnaLogError::ReservedState { index: 0, state: 5 }));
    }

    proptest! {
        /// Hostile bytes never make the decoder panic, and a claimed NSID list longer
        /// than the data is refused.
        #[test]
        fn decoding_any_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(log) = AnaLog::decode(&data) {
                let listed: usize = log.groups.iter().map(|group| 32 + group.namespaces.len() * 4).sum();
                prop_assert!(16 + listed <= data.len());
            }
        }
    }
}

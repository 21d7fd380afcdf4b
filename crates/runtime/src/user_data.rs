//! What a completion belongs to, packed into the 64-bit io_uring user_data.
//!
//! Layout: bits 56..64 the operation kind, bits 32..56 the slot generation
//! (24 bits), bits 0..32 the slot index (or the listener id). A completion
//! whose generation no longer matches its slot belongs to a connection that has
//! been closed and whose slot was reused; the loop ignores it. In practice the
//! loop never frees a slot while operations are outstanding, so the generation
//! check is a second line of defence.

/// Largest generation value before it wraps (24 bits).
pub const GENERATION_MASK: u32 = (1 << 24) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OpKind {
    Accept = 1,
    Recv = 2,
    Send = 3,
    /// The read armed on the thread's wake eventfd.
    Wake = 4,
    /// An AsyncCancel; only its completion count matters.
    Cancel = 5,
    /// The read armed on the thread's storage-completion eventfd.
    StorageWake = 6,
}

impl OpKind {
    fn from_bits(bits: u8) -> Option<OpKind> {
        Some(match bits {
            1 => OpKind::Accept,
            2 => OpKind::Recv,
            3 => OpKind::Send,
            4 => OpKind::Wake,
            5 => OpKind::Cancel,
            6 => OpKind::StorageWake,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserData {
    pub kind: OpKind,
    pub generation: u32,
    pub index: u32,
}

impl UserData {
    pub fn new(kind: OpKind, generation: u32, index: u32) -> UserData {
        UserData { kind, generation: generation & GENERATION_MASK, index }
    }

    pub fn encode(self) -> u64 {
        ((self.kind as u64) << 56) | (u64::from(self.generation & GENERATION_MASK) << 32) | u64::from(self.index)
    }

    pub fn decode(value: u64) -> Option<UserData> {
        let kind = OpKind::from_bits((value >> 56) as u8)?;
        Some(UserData { kind, generation: ((value >> 32) as u32) & GENERATION_MASK, index: value as u32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind_and_masks_generation() {
        for kind in [OpKind::Accept, OpKind::Recv, OpKind::Send, OpKind::Wake, OpKind::Cancel] {
            let data = UserData::new(kind, 0x0123_4567, u32::MAX);
            let decoded = UserData::decode(data.encode()).unwrap();
            assert_eq!(decoded, data);
            assert_eq!(decoded.generation, 0x0023_4567);
        }
        assert_eq!(UserData::decode(0), None);
    }
}

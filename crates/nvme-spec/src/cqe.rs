//! The 16-byte completion queue entry (NVMe Base 2.0, "Common Completion Queue Entry").

use crate::bytes::{get_u16, get_u32, put_u16, put_u32};
use crate::ids::{CommandId, QueueId};
use crate::status::Status;

/// Size of a completion queue entry in bytes (CQES 4 means 2^4).
pub const COMPLETION_QUEUE_ENTRY_BYTES: usize = 16;

/// A completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CompletionQueueEntry {
    /// DW0: command specific result.
    pub result_dw0: u32,
    /// DW1: command specific result (Property Get of an 8-byte property uses both).
    pub result_dw1: u32,
    /// SQHD: submission queue head pointer.
    pub submission_queue_head: u16,
    /// SQID: submission queue identifier.
    pub submission_queue_id: QueueId,
    /// CID: identifier of the command this completes.
    pub command_id: CommandId,
    /// Status field (DW3 bits 31:17).
    pub status: Status,
    /// P: phase tag (DW3 bit 16). Fabrics transports leave it 0.
    pub phase: bool,
}

impl CompletionQueueEntry {
    /// Decodes 16 bytes.
    pub fn decode(raw: &[u8; COMPLETION_QUEUE_ENTRY_BYTES]) -> Self {
        let status_and_phase = get_u16(raw, 14);
        Self {
            result_dw0: get_u32(raw, 0),
            result_dw1: get_u32(raw, 4),
            submission_queue_head: get_u16(raw, 8),
            submission_queue_id: QueueId(get_u16(raw, 10)),
            command_id: CommandId(get_u16(raw, 12)),
            status: Status::from_field(status_and_phase >> 1),
            phase: status_and_phase & 1 != 0,
        }
    }

    /// Encodes into 16 bytes.
    pub fn encode(&self, out: &mut [u8; COMPLETION_QUEUE_ENTRY_BYTES]) {
        put_u32(out, 0, self.result_dw0);
        put_u32(out, 4, self.result_dw1);
        put_u16(out, 8, self.submission_queue_head);
        put_u16(out, 10, self.submission_queue_id.0);
        put_u16(out, 12, self.command_id.0);
        put_u16(out, 14, (self.status.field() << 1) | u16::from(self.phase));
    }

    /// The 64-bit result for 8-byte properties (DW1:DW0).
    pub fn result_u64(&self) -> u64 {
        u64::from(self.result_dw0) | (u64::from(self.result_dw1) << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cqe_round_trips(raw in proptest::array::uniform16(any::<u8>())) {
            let cqe = CompletionQueueEntry::decode(&raw);
            let mut again = [0u8; 16];
            cqe.encode(&mut again);
            prop_assert_eq!(raw, again);
        }
    }

    #[test]
    fn status_sits_above_the_phase_bit() {
        let cqe = CompletionQueueEntry {
            command_id: CommandId(9),
            status: Status::INVALID_FIELD.with_do_not_retry(),
            ..Default::default()
        };
        let mut raw = [0u8; 16];
        cqe.encode(&mut raw);
        // SC 02h at bits 8:1, DNR at bit 15 of the status halfword.
        assert_eq!(u16::from_le_bytes([raw[14], raw[15]]), (0x02 << 1) | 0x8000);
    }
}

//! Copy (NVM 19h), simple copy with source range entries in format 0: the blocks of
//! up to MSRC + 1 source ranges are read into one buffer, in range order, then
//! written from SDLBA with one write. A copy is at most MCL blocks (one MDTS), so
//! the buffer is one command's worth and nothing reaches the destination unless
//! every read succeeded (a failed copy answers Dword 0 = 0: no range copied).

use nvme_spec::{Status, SubmissionQueueEntry};
use storage::IoOp;

use crate::connection::Connection;
use crate::limits::{MAX_COPY_SOURCE_RANGES, MAX_DATA_TRANSFER_BYTES};
use crate::outcome::Outcome;
use crate::slots::PendingKind;

/// Bytes of one source range entry in format 0.
pub(crate) const COPY_RANGE_BYTES: usize = 32;
/// CDW12 bit 30 of Copy: FUA for the destination write.
const COPY_FORCE_UNIT_ACCESS: u32 = 1 << 30;
/// Storage tokens carry the source range index above the slot index.
const RANGE_INDEX_SHIFT: u32 = 16;

/// Command Size Limit Exceeded (command specific 83h): NR above MSRC, a range above
/// MSSRL or a total above MCL.
fn size_limit_exceeded() -> Status {
    Status::COMMAND_SIZE_LIMIT_EXCEEDED.with_do_not_retry()
}

/// SLBA and number of blocks (NLB + 1) of source range `index` in `entries`; `None`
/// when the entries end before it.
fn source_range(entries: &[u8], index: usize) -> Option<(u64, u64)> {
    let entry = entries.chunks_exact(COPY_RANGE_BYTES).nth(index)?;
    let blocks = u64::from(nvme_spec::bytes::get_u16(entry, 16)) + 1;
    Some((nvme_spec::bytes::get_u64(entry, 8), blocks))
}

/// MCL (and MSSRL) in blocks of `block_size_bytes`: one MDTS.
pub(crate) fn maximum_copy_blocks(block_size_bytes: u32) -> u32 {
    MAX_DATA_TRANSFER_BYTES / block_size_bytes.max(1)
}

impl Connection {
    pub(crate) fn io_copy(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Result<Outcome, Status> {
        let geometry = self.namespace_geometry(sqe.namespace_id(), true)?;
        let cdw12 = sqe.dwords[12];
        let range_count = (cdw12 & 0xFF) as usize + 1;
        // DESFMT, CDW12 bits 11:8: only format 0 (OCFS bit 0).
        if (cdw12 >> 8) & 0xF != 0 {
            return Err(Status::INVALID_FIELD.with_do_not_retry());
        }
        if range_count > MAX_COPY_SOURCE_RANGES {
            return Err(size_limit_exceeded());
        }
        let needed = range_count * COPY_RANGE_BYTES;
        let slot = self.slots.slot_ref(slot_index);
        if (slot.host_data_bytes as usize) < needed || slot.buffer.len() < needed {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        }
        let limit = u64::from(maximum_copy_blocks(geometry.block_size_bytes));
        let mut total_blocks = 0u64;
        for index in 0..range_count {
            // The buffer holds `needed` bytes: every range is there.
            let Some((lba, blocks)) = source_range(&slot.buffer, index) else {
                return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
            };
            if blocks > limit {
                return Err(size_limit_exceeded());
            }
            if !geometry.contains(lba, blocks) {
                return Err(Status::LBA_OUT_OF_RANGE.with_do_not_retry());
            }
            total_blocks += blocks;
        }
        if total_blocks > limit {
            return Err(size_limit_exceeded());
        }
        let destination = sqe.starting_lba();
        if !geometry.contains(destination, total_blocks) {
            return Err(Status::LBA_OUT_OF_RANGE.with_do_not_retry());
        }
        if self.must_wait_for_range(slot_index, sqe.namespace_id(), destination, total_blocks) {
            return Ok(Outcome::Pending);
        }
        // The copied blocks gather in `compare_buffer`; the entries stay in `buffer`.
        let bytes = (total_blocks * u64::from(geometry.block_size_bytes)) as usize;
        let gathered = self.pool.take(bytes);
        let slot = self.slots.slot(slot_index);
        slot.compare_buffer = gathered;
        slot.pending_kind = PendingKind::CopyRead;
        for index in 0..range_count {
            // Every range was read above.
            let entries = &self.slots.slot_ref(slot_index).buffer;
            let (lba, blocks) = source_range(entries, index).ok_or(Status::INTERNAL_ERROR)?;
            let length = (blocks * u64::from(geometry.block_size_bytes)) as usize;
            let buffer = self.pool.take(length);
            let op = IoOp::Read { lba, blocks: blocks as u32 };
            let token = u64::from(slot_index) | ((index as u64) << RANGE_INDEX_SHIFT);
            self.submit_storage_with_token(slot_index, token, sqe.namespace_id(), op, buffer)?;
        }
        Ok(Outcome::Pending)
    }

    /// A source range's blocks arrived: put them in their place in the gathered
    /// buffer.
    pub(crate) fn copy_read_arrived(&mut self, slot_index: u16, token: u64, data: Vec<u8>) {
        let index = (token >> RANGE_INDEX_SHIFT) as usize;
        let slot = self.slots.slot(slot_index);
        let place = source_range(&slot.buffer, index).and_then(|(_, blocks)| {
            let block_bytes = data.len() as u64 / blocks.max(1);
            let offset: u64 = (0..index)
                .filter_map(|earlier| source_range(&slot.buffer, earlier))
                .map(|(_, blocks)| blocks * block_bytes)
                .sum();
            let offset = offset as usize;
            slot.compare_buffer.get_mut(offset..offset + data.len())
        });
        if let Some(place) = place {
            place.copy_from_slice(&data);
        } else if slot.storage_status.is_success() {
            slot.storage_status = Status::INTERNAL_ERROR;
        }
        self.pool.give(data);
    }

    /// Every source range was read (successfully): write them at SDLBA.
    pub(crate) fn copy_reads_done(&mut self, slot_index: u16) {
        let slot = self.slots.slot(slot_index);
        let sqe = slot.sqe;
        let gathered = std::mem::take(&mut slot.compare_buffer);
        let block_bytes =
            self.view.get(sqe.namespace_id()).map_or(1, |namespace| namespace.geometry().block_size_bytes);
        let op = IoOp::Write {
            lba: sqe.starting_lba(),
            blocks: (gathered.len() / block_bytes.max(1) as usize) as u32,
            force_unit_access: sqe.dwords[12] & COPY_FORCE_UNIT_ACCESS != 0,
        };
        self.slots.slot(slot_index).pending_kind = PendingKind::CopyWrite;
        if let Err(status) = self.submit_storage(slot_index, sqe.namespace_id(), op, gathered) {
            self.complete(slot_index, status, 0);
        }
    }
}

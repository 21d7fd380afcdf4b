//! Requests, completions and errors that travel through a [`crate::BackendQueue`].

use std::fmt;

use crate::Geometry;

/// One storage operation. LBAs and block counts are in logical blocks of the backend's
/// [`Geometry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// Read `blocks` blocks at `lba` into the request buffer (the buffer's len must be
    /// blocks * block_size; the backend fills it).
    Read {
        /// First logical block.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
    },
    /// Write the request buffer (len blocks * block_size).
    Write {
        /// First logical block.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
        /// Durable before completion (FUA).
        force_unit_access: bool,
    },
    /// Make every completed write durable.
    Flush,
    /// Zero the range (buffer unused, may be empty).
    WriteZeroes {
        /// First logical block.
        lba: u64,
        /// Number of blocks.
        blocks: u64,
        /// The backend may also unmap the range (DEAC).
        deallocate: bool,
        /// Durable before completion (FUA).
        force_unit_access: bool,
    },
    /// Compare the blocks with the first half of the buffer and, only if they match,
    /// write the second half, as one operation no other writer can come between
    /// (fused Compare and Write on storage shared by several processes). Only for
    /// backends that offer it ([`crate::Backend::atomic_compare_and_write_boundary_bytes`]);
    /// a mismatch completes with [`IoError::CompareMismatch`].
    CompareAndWrite {
        /// First logical block.
        lba: u64,
        /// Number of blocks (the buffer holds twice as many).
        blocks: u32,
        /// Durable before completion (FUA).
        force_unit_access: bool,
    },
    /// Unmap/discard (buffer unused, may be empty). Afterwards the range reads as zeroes
    /// for backends that retain data (DLFEAT "read zeroes").
    Deallocate {
        /// First logical block.
        lba: u64,
        /// Number of blocks.
        blocks: u64,
    },
}

/// Why a request failed. Each maps onto an NVMe status in the target core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    /// Part of the LBA range lies beyond the namespace (LBA Out of Range).
    #[error("LBA range out of range")]
    OutOfRange,
    /// The buffer length is not blocks * block_size (Data SGL Length Invalid).
    #[error("buffer length does not match the block count")]
    BufferLengthMismatch,
    /// The medium failed to store the data (Write Fault).
    #[error("write fault")]
    WriteFault,
    /// The medium failed to return the data (Unrecovered Read Error).
    #[error("unrecovered read error")]
    ReadError,
    /// A thin-provisioned backend ran out of space (Capacity Exceeded).
    #[error("no space left")]
    NoSpace,
    /// The device cannot be reached for now (a network backend timed out, or its
    /// cluster fenced this client): Namespace Not Ready, without Do Not Retry, so the
    /// host retries or fails over to another path.
    #[error("storage unavailable")]
    Unavailable,
    /// A compare-and-write found other data than expected (Compare Failure).
    #[error("compare mismatch")]
    CompareMismatch,
    /// Anything else (Internal Error).
    #[error("internal backend error")]
    Internal,
}

/// A request handed to [`crate::BackendQueue::submit`]. The buffer is moved in and
/// handed back in the [`IoCompletion`], so the data path never allocates.
pub struct IoRequest {
    /// Caller's identifier, echoed in the completion.
    pub token: u64,
    /// What to do.
    pub op: IoOp,
    /// Data to write, or room to read into; unused (and may be empty) for the other ops.
    pub buffer: Vec<u8>,
}

/// The outcome of one [`IoRequest`].
pub struct IoCompletion {
    /// The request's token.
    pub token: u64,
    /// Success, or why the request failed.
    pub result: Result<(), IoError>,
    /// The request's buffer, filled for a successful read.
    pub buffer: Vec<u8>,
}

// Hand-written so that logging a request does not dump up to megabytes of data.
impl fmt::Debug for IoRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoRequest")
            .field("token", &self.token)
            .field("op", &self.op)
            .field("buffer_len", &self.buffer.len())
            .finish()
    }
}

impl fmt::Debug for IoCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoCompletion")
            .field("token", &self.token)
            .field("result", &self.result)
            .field("buffer_len", &self.buffer.len())
            .finish()
    }
}

impl IoOp {
    /// The LBA range the op touches as (lba, blocks); `None` for Flush.
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            IoOp::Read { lba, blocks }
            | IoOp::Write { lba, blocks, .. }
            | IoOp::CompareAndWrite { lba, blocks, .. } => Some((lba, u64::from(blocks))),
            IoOp::WriteZeroes { lba, blocks, .. } | IoOp::Deallocate { lba, blocks } => Some((lba, blocks)),
            IoOp::Flush => None,
        }
    }
}

/// The checks every backend applies before touching data: the range lies inside the
/// device (overflow-safe) and a read/write buffer is exactly blocks * block_size long.
/// Out of range is reported before a length mismatch, as the target core would check
/// the LBA range first.
/// A compare-and-write is refused here (Internal Error): only a backend that offers
/// it checks it, with [`validate_compare_and_write`].
pub fn validate_request(geometry: &Geometry, op: &IoOp, buffer_len: usize) -> Result<(), IoError> {
    if matches!(op, IoOp::CompareAndWrite { .. }) {
        return Err(IoError::Internal);
    }
    let Some((lba, blocks)) = op.range() else {
        return Ok(());
    };
    if !geometry.contains(lba, blocks) {
        return Err(IoError::OutOfRange);
    }
    if matches!(op, IoOp::Read { .. } | IoOp::Write { .. }) {
        // blocks is a u32 here and block size a u32, so the product cannot overflow u64.
        let expected = geometry.bytes_for_blocks(blocks);
        if expected != Some(buffer_len as u64) {
            return Err(IoError::BufferLengthMismatch);
        }
    }
    Ok(())
}

/// The checks of a [`IoOp::CompareAndWrite`] for a backend that offers it: in range,
/// and the buffer holds the compare data and the write data, each blocks * block_size.
pub fn validate_compare_and_write(
    geometry: &Geometry,
    lba: u64,
    blocks: u32,
    buffer_len: usize,
) -> Result<(), IoError> {
    if !geometry.contains(lba, u64::from(blocks)) {
        return Err(IoError::OutOfRange);
    }
    match geometry.bytes_for_blocks(u64::from(blocks)) {
        Some(bytes) if bytes.checked_mul(2) == Some(buffer_len as u64) => Ok(()),
        _ => Err(IoError::BufferLengthMismatch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEOMETRY: Geometry = Geometry { block_size_bytes: 512, block_count: 16 };

    #[test]
    fn in_range_requests_with_exact_buffers_pass() {
        assert_eq!(validate_request(&GEOMETRY, &IoOp::Read { lba: 0, blocks: 16 }, 8192), Ok(()));
        let write = IoOp::Write { lba: 15, blocks: 1, force_unit_access: true };
        assert_eq!(validate_request(&GEOMETRY, &write, 512), Ok(()));
        assert_eq!(validate_request(&GEOMETRY, &IoOp::Flush, 0), Ok(()));
        assert_eq!(validate_request(&GEOMETRY, &IoOp::Flush, 999), Ok(()), "buffer unused");
        let zeroes = IoOp::WriteZeroes { lba: 0, blocks: 16, deallocate: true, force_unit_access: false };
        assert_eq!(validate_request(&GEOMETRY, &zeroes, 0), Ok(()));
        assert_eq!(validate_request(&GEOMETRY, &IoOp::Deallocate { lba: 8, blocks: 8 }, 7), Ok(()));
    }

    #[test]
    fn out_of_range_wins_over_buffer_mismatch() {
        let read = IoOp::Read { lba: 16, blocks: 1 };
        assert_eq!(validate_request(&GEOMETRY, &read, 3), Err(IoError::OutOfRange));
        let dealloc = IoOp::Deallocate { lba: 1, blocks: u64::MAX };
        assert_eq!(validate_request(&GEOMETRY, &dealloc, 0), Err(IoError::OutOfRange));
    }

    #[test]
    fn read_and_write_need_exact_buffer_lengths() {
        for len in [0, 511, 513, 1024] {
            let read = IoOp::Read { lba: 0, blocks: 1 };
            assert_eq!(validate_request(&GEOMETRY, &read, len), Err(IoError::BufferLengthMismatch));
            let write = IoOp::Write { lba: 0, blocks: 1, force_unit_access: false };
            assert_eq!(validate_request(&GEOMETRY, &write, len), Err(IoError::BufferLengthMismatch));
        }
    }

    #[test]
    fn debug_shows_buffer_length_not_contents() {
        let request = IoRequest { token: 7, op: IoOp::Flush, buffer: vec![0xAB; 4096] };
        let text = format!("{request:?}");
        assert!(text.contains("buffer_len: 4096"), "{text}");
        assert!(!text.contains("171"), "{text}");
    }
}

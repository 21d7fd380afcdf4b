//! Backend memory lent to a read's response instead of copied into a buffer.
//!
//! A RAM namespace already holds the bytes a read asks for; copying them into a buffer
//! only for the kernel to copy them again into the socket costs a memory pass per read
//! (about a quarter of the target's CPU on 128 KiB reads). A [`LentBytes`] names the
//! namespace memory instead and keeps it allocated while it lives, so the runtime can
//! point a vectored send straight at it.
//!
//! Lent memory is not frozen: a write that runs while the response is being sent may
//! change it, exactly as it could change a copy made at the same moment (the read and
//! the write overlap in time, so either order is allowed). Memory is never freed or
//! reused while a `LentBytes` names it.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// Memory a backend can lend: implemented by the RAM backend's chunk store.
pub(crate) trait LentMemory: Send + Sync {
    /// Calls `visit(address, len)` for the memory holding bytes
    /// `[start_byte, start_byte + len)` of the device, in order.
    fn pieces(&self, start_byte: usize, len: usize, visit: &mut dyn FnMut(usize, usize));
    /// Copies bytes `[start_byte, start_byte + out.len())` of the device into `out`.
    fn copy_out(&self, start_byte: usize, out: &mut [u8]);
}

/// A range of a backend's memory, lent for as long as this value lives.
pub struct LentBytes {
    memory: Arc<dyn LentMemory>,
    /// Device byte offset of the first lent byte.
    start_byte: usize,
    len: usize,
}

impl LentBytes {
    pub(crate) fn new(memory: Arc<dyn LentMemory>, start_byte: usize, len: usize) -> Self {
        LentBytes { memory, start_byte, len }
    }

    /// Bytes lent.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `visit(address, len)` for each contiguous piece of memory that holds
    /// `range` (offsets into the lent bytes), in order. The addresses stay valid while
    /// `self` lives; they are meant for the kernel (a vectored send), which reads them
    /// outside Rust's memory model. `range` is clamped to the lent length.
    pub fn for_each_piece(&self, range: Range<usize>, mut visit: impl FnMut(usize, usize)) {
        let end = range.end.min(self.len);
        if range.start >= end {
            return;
        }
        self.memory.pieces(self.start_byte + range.start, end - range.start, &mut visit);
    }

    /// Copies `range` of the lent bytes into `out` (whose length must be the range's):
    /// for digests, tests and simulations, which read the data in Rust.
    ///
    /// # Panics
    /// When `range` is outside the lent bytes or `out` has another length.
    pub fn copy_to(&self, range: Range<usize>, out: &mut [u8]) {
        assert!(range.start <= range.end && range.end <= self.len, "range {range:?} outside {} lent bytes", self.len);
        assert_eq!(out.len(), range.len(), "output length");
        self.memory.copy_out(self.start_byte + range.start, out);
    }
}

impl fmt::Debug for LentBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LentBytes").field("start_byte", &self.start_byte).field("len", &self.len).finish()
    }
}

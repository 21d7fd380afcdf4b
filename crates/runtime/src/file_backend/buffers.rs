//! Page-aligned memory for O_DIRECT: bounce buffers and the static zero block.
//!
//! The storage trait moves `Vec<u8>` buffers, whose alignment is only 1 (in practice
//! malloc's 16). O_DIRECT needs the memory aligned to the device's DMA alignment, so
//! unless the caller's Vec happens to start on a [`DIRECT_IO_ALIGNMENT`] boundary, a
//! request is staged through an aligned bounce buffer from a per-queue pool: one
//! `memcpy` per direct read or write. A zero-copy path would need the target to hand
//! out aligned Vecs from its own pool (then the pointer check below skips the copy).

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Alignment of every bounce buffer, and the alignment a caller's buffer needs for
/// the copy to be skipped. A page satisfies every device's DMA alignment.
pub const DIRECT_IO_ALIGNMENT: usize = 4096;

/// Length of the static zero block used when a filesystem or device cannot zero a
/// range with fallocate.
pub(super) const ZERO_BLOCK_LEN: usize = 256 * 1024;

#[repr(C, align(4096))]
pub(super) struct ZeroBlock(pub(super) [u8; ZERO_BLOCK_LEN]);

/// Read-only zeroes, page aligned so O_DIRECT writes may use it directly.
pub(super) static ZEROES: ZeroBlock = ZeroBlock([0; ZERO_BLOCK_LEN]);

/// A page-aligned, zero-initialised heap allocation.
pub(super) struct AlignedBuf {
    ptr: NonNull<u8>,
    capacity: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Box<[u8]>); nothing else
// holds the pointer except the kernel while an I/O is in flight, which the queue
// tracks and never lets overlap with a move to another thread's use.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `capacity` zeroed bytes (rounded up to the alignment, at least one page).
    fn new(capacity: usize) -> AlignedBuf {
        let capacity = capacity.max(DIRECT_IO_ALIGNMENT).next_multiple_of(DIRECT_IO_ALIGNMENT);
        let layout = Layout::from_size_align(capacity, DIRECT_IO_ALIGNMENT)
            .expect("capacity rounded to the alignment fits a Layout");
        // SAFETY: the layout has a non-zero size (at least one page).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout);
        };
        AlignedBuf { ptr, capacity }
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(super) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(super) fn as_slice(&self, len: usize) -> &[u8] {
        assert!(len <= self.capacity);
        // SAFETY: the allocation is `capacity` initialised (zeroed at allocation, then
        // only written by us or the kernel) bytes, and `len <= capacity`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) }
    }

    pub(super) fn as_mut_slice(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.capacity);
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.capacity, DIRECT_IO_ALIGNMENT).expect("same layout as at allocation");
        // SAFETY: `ptr` came from `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

/// Smallest pooled size class (one page) as a power of two.
const MIN_CLASS_SHIFT: u32 = 12;
/// Largest pooled size class (1 MiB); bigger bounce buffers are freed after use.
const MAX_CLASS_SHIFT: u32 = 20;
const CLASS_COUNT: usize = (MAX_CLASS_SHIFT - MIN_CLASS_SHIFT + 1) as usize;

/// Per-queue free lists of bounce buffers by power-of-two size class. Owned by one
/// queue, so no locking.
pub(super) struct BouncePool {
    classes: [Vec<AlignedBuf>; CLASS_COUNT],
    max_per_class: usize,
}

impl BouncePool {
    pub(super) fn new(max_per_class: usize) -> BouncePool {
        BouncePool { classes: std::array::from_fn(|_| Vec::new()), max_per_class }
    }

    fn class_of(len: usize) -> Option<usize> {
        let shift = len.max(1).next_power_of_two().trailing_zeros().max(MIN_CLASS_SHIFT);
        (shift <= MAX_CLASS_SHIFT).then(|| (shift - MIN_CLASS_SHIFT) as usize)
    }

    /// A buffer of at least `len` bytes.
    pub(super) fn take(&mut self, len: usize) -> AlignedBuf {
        match Self::class_of(len) {
            Some(class) => {
                self.classes[class].pop().unwrap_or_else(|| AlignedBuf::new(1 << (class as u32 + MIN_CLASS_SHIFT)))
            }
            None => AlignedBuf::new(len),
        }
    }

    /// Returns a buffer the kernel no longer uses.
    pub(super) fn give_back(&mut self, buf: AlignedBuf) {
        if buf.capacity().is_power_of_two() {
            if let Some(class) = Self::class_of(buf.capacity()) {
                if self.classes[class].len() < self.max_per_class {
                    self.classes[class].push(buf);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_pooled_by_class() {
        let mut pool = BouncePool::new(2);
        let a = pool.take(512);
        assert_eq!(a.capacity(), 4096);
        assert_eq!(a.as_ptr() as usize % DIRECT_IO_ALIGNMENT, 0);
        let address = a.as_ptr();
        pool.give_back(a);
        assert_eq!(pool.take(4000).as_ptr(), address, "reused from the pool");
        let big = pool.take(3 << 20);
        assert_eq!(big.capacity(), 3 << 20);
        assert!(big.as_slice(3 << 20).iter().all(|&b| b == 0));
        assert_eq!(ZEROES.0.as_ptr() as usize % DIRECT_IO_ALIGNMENT, 0);
    }
}

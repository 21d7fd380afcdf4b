//! RAM namespace chunks on transparent huge pages.
//!
//! A RAM namespace of gigabytes served to random 4 KiB I/O touches a different 4 KiB
//! page on nearly every request, and with 4 KiB pages nearly every copy into or out of
//! the namespace (ours for writes, the kernel's for lent reads) starts with a TLB miss.
//! Each 2 MiB chunk of the RAM backend ([`storage::DEFAULT_CHUNK_SIZE_BYTES`]) gets its
//! own anonymous mapping here, aligned to 2 MiB and advised `MADV_HUGEPAGE`, so the
//! kernel backs it with one huge page at the first touch (transparent huge pages in
//! "madvise" or "always" mode). SPDK gets the same from its hugetlbfs memory.
//!
//! Where huge pages are off ("never", or no THP at all) the advice is refused or
//! ignored and the mapping holds 4 KiB pages: still zeroed lazily by the kernel at first
//! touch, which is cheaper than the heap chunk's zeroing loop. A failed mapping makes
//! the RAM backend fall back to the heap.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use storage::{ChunkMemory, ChunkWords};

/// The x86-64 (and AArch64 with 4 KiB base pages) PMD huge page.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Chunk memory for [`storage::RamBackend::with_chunk_memory`]: one 2 MiB-aligned,
/// `MADV_HUGEPAGE` mapping per chunk whose size is a multiple of 2 MiB; other sizes
/// (the cut last chunk of a namespace) come from the heap.
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePageChunkMemory;

impl ChunkMemory for HugePageChunkMemory {
    fn allocate_zeroed(&self, words: usize) -> Option<Box<dyn ChunkWords>> {
        let len_bytes = words.checked_mul(std::mem::size_of::<AtomicU64>())?;
        if len_bytes == 0 || len_bytes % HUGE_PAGE_BYTES != 0 {
            return None;
        }
        HugeMapping::new(len_bytes).map(|mapping| Box::new(mapping) as Box<dyn ChunkWords>)
    }
}

/// One private anonymous mapping, unmapped on drop.
struct HugeMapping {
    address: NonNull<AtomicU64>,
    len_bytes: usize,
}

// SAFETY: the mapping is owned by this value alone and only ever accessed through
// `&[AtomicU64]` (atomic operations), so sharing it between threads is sound.
unsafe impl Send for HugeMapping {}
// SAFETY: as above.
unsafe impl Sync for HugeMapping {}

impl HugeMapping {
    /// A zeroed mapping of `len_bytes` (a multiple of [`HUGE_PAGE_BYTES`]) starting at a
    /// 2 MiB boundary: `len_bytes + 2 MiB` is mapped, and the unaligned head and tail are
    /// unmapped again.
    fn new(len_bytes: usize) -> Option<HugeMapping> {
        let mapped_bytes = len_bytes.checked_add(HUGE_PAGE_BYTES)?;
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks; it
        // touches no memory of ours.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE_BYTES);
        let head_bytes = aligned - start;
        let tail_bytes = HUGE_PAGE_BYTES - head_bytes;
        // SAFETY: both ranges lie inside the mapping made above and outside
        // [aligned, aligned + len_bytes), which nothing has seen yet. Failure would only
        // leave address space mapped, never unmap memory in use.
        unsafe {
            if head_bytes > 0 {
                libc::munmap(raw, head_bytes);
            }
            if tail_bytes > 0 {
                libc::munmap((aligned + len_bytes) as *mut libc::c_void, tail_bytes);
            }
            // Advice only: refused where transparent huge pages are off, and the mapping
            // works the same with 4 KiB pages.
            libc::madvise(aligned as *mut libc::c_void, len_bytes, libc::MADV_HUGEPAGE);
        }
        Some(HugeMapping { address: NonNull::new(aligned as *mut AtomicU64)?, len_bytes })
    }
}

impl ChunkWords for HugeMapping {
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `address` is the start of a live mapping of `len_bytes` readable and
        // writable bytes, 2 MiB-aligned (so aligned for u64), zero-filled by the kernel;
        // AtomicU64 has u64's layout and every bit pattern is valid. The slice lives no
        // longer than `self`, which unmaps only on drop.
        unsafe { std::slice::from_raw_parts(self.address.as_ptr(), self.len_bytes / std::mem::size_of::<AtomicU64>()) }
    }
}

impl Drop for HugeMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `new` kept; no reference into it outlives
        // `self` (`words` borrows self).
        unsafe {
            libc::munmap(self.address.as_ptr().cast(), self.len_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use storage::{Backend, Geometry, IoOp, IoRequest, RamBackend};

    use super::*;

    #[test]
    fn chunks_are_zeroed_aligned_and_writable() {
        let memory = HugePageChunkMemory;
        let chunk = memory.allocate_zeroed(HUGE_PAGE_BYTES / 8).expect("a 2 MiB mapping");
        let words = chunk.words();
        assert_eq!(words.len(), HUGE_PAGE_BYTES / 8);
        assert_eq!(words.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
        assert!(words.iter().all(|word| word.load(Ordering::Relaxed) == 0));
        words[0].store(7, Ordering::Relaxed);
        words[words.len() - 1].store(9, Ordering::Relaxed);
        assert_eq!(words[0].load(Ordering::Relaxed) + words[words.len() - 1].load(Ordering::Relaxed), 16);
        // Sizes that are not whole huge pages go to the heap.
        assert!(memory.allocate_zeroed(512).is_none());
        assert!(memory.allocate_zeroed(0).is_none());
        assert!(memory.allocate_zeroed(usize::MAX).is_none());
    }

    #[test]
    fn a_ram_namespace_on_huge_pages_keeps_its_data() {
        // 4 MiB and 8 KiB: two huge-page chunks and a heap tail.
        let geometry = Geometry { block_size_bytes: 4096, block_count: 1026 };
        let backend = RamBackend::with_chunk_memory(geometry, Arc::new(HugePageChunkMemory)).expect("backend");
        let mut queue = backend.open_queue();
        let data: Vec<u8> = (0..4 * 4096).map(|index| (index * 7 % 251) as u8).collect();
        let mut out = Vec::new();
        for (lba, bytes) in [(510, data.clone()), (1024, data[..8192].to_vec())] {
            let blocks = (bytes.len() / 4096) as u32;
            queue.submit(IoRequest {
                token: lba,
                op: IoOp::Write { lba, blocks, force_unit_access: false },
                buffer: bytes,
            });
        }
        for (lba, expected) in [(510, data.clone()), (1024, data[..8192].to_vec())] {
            let blocks = (expected.len() / 4096) as u32;
            queue.submit(IoRequest { token: lba, op: IoOp::Read { lba, blocks }, buffer: vec![0; expected.len()] });
            queue.reap(&mut out);
            let read = out.pop().expect("synchronous");
            assert_eq!(read.buffer, expected, "lba {lba}");
        }
        drop(queue);
        drop(backend); // unmaps its chunks
    }
}

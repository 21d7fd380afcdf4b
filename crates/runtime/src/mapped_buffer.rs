//! A connection's own receive buffer, mapped from the kernel rather than taken from
//! the allocator, so that only the pages its receives touched are resident.
//!
//! Why: a target connection's buffer is 256 KiB (a whole 128 KiB data PDU and more fit
//! one receive), but most connections receive 72-byte command capsules and touch one
//! page of it. From the allocator, whether the rest is resident depends on malloc's
//! state: once any large chunk was freed, glibc raises its mmap threshold and serves
//! the next 256 KiB from the heap, and `calloc` zeroes (touches) all of it, which made
//! 1,000 busy connections cost 255 KiB each (measured in issue 46). An anonymous
//! mapping is zero-filled page by page on first touch, whatever the allocator did.

use std::io;
use std::ops::{Deref, DerefMut};

pub(crate) struct MappedBuffer {
    address: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (no aliases are handed out beyond
// borrows of it), so moving it to another thread moves exclusive ownership.
unsafe impl Send for MappedBuffer {}

impl MappedBuffer {
    /// `len` zero bytes (rounded up to whole pages by the kernel).
    pub(crate) fn new(len: usize) -> io::Result<MappedBuffer> {
        // SAFETY: an anonymous private mapping with no address hint; the result is
        // checked before use.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MappedBuffer { address: address.cast(), len })
    }

    /// Gives the touched pages back to the kernel (they read as zeros again): for a
    /// buffer kept for the next connection.
    pub(crate) fn release_pages(&mut self) {
        // SAFETY: the range is this mapping, which nothing else references while it
        // is borrowed mutably here. A failure leaves the pages resident, no more.
        unsafe { libc::madvise(self.address.cast(), self.len.max(1), libc::MADV_DONTNEED) };
    }
}

impl Deref for MappedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.address, self.len) }
    }
}

impl DerefMut for MappedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` writable bytes, alive as long as `self`, and
        // borrowed exclusively here.
        unsafe { std::slice::from_raw_parts_mut(self.address, self.len) }
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping came from mmap with this length and nothing refers to it
        // any more (a buffer the kernel may still write into is leaked, not dropped).
        unsafe { libc::munmap(self.address.cast(), self.len.max(1)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_zero_keeps_writes_and_reads_zero_after_release() {
        let mut buffer = MappedBuffer::new(256 * 1024).expect("mmap");
        assert_eq!(buffer.len(), 256 * 1024);
        assert!(buffer.iter().all(|&byte| byte == 0));
        buffer[4095] = 7;
        buffer[256 * 1024 - 1] = 9;
        assert_eq!((buffer[4095], buffer[256 * 1024 - 1]), (7, 9));
        buffer.release_pages();
        assert!(buffer.iter().all(|&byte| byte == 0));
    }
}

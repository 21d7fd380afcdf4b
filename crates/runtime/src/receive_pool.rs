//! A ring's receive buffers, shared by all its connections: a provided-buffer ring
//! (io_uring `IORING_REGISTER_PBUF_RING`) that multishot receives draw from.
//!
//! Why: with one buffer per connection, an idle connection holds a receive buffer the
//! size of the largest PDU it might get (256 KiB on the target), so 10,000 connections
//! held 2.5 GiB doing nothing. With a shared pool, the kernel picks a buffer only when
//! bytes arrive, the loop hands them to the handler (which parses or copies them before
//! it returns) and gives the buffer straight back, so the pool needs as many buffers
//! as connections receive in one loop turn, whatever the number of connections. A
//! multishot receive also stays armed across completions, which saves one submission
//! per receive.
//!
//! The kernel hands buffers out in ring order (first given back, first used), so every
//! buffer in the ring gets touched in turn. The pool therefore starts with
//! [`INITIAL_SHARED_RECEIVE_BUFFERS`] in the ring and doubles them each time a receive
//! finds none free (it ends with `ENOBUFS`, the bytes wait in the socket, and the loop
//! re-arms it after the turn, by when the buffers are back), up to the configured
//! count: its memory follows how many connections receive at once, not how many exist.
//!
//! Memory: `count x buffer_bytes` of address space per ring, resident only as far as
//! received bytes have touched buffers the ring has provided (a 72-byte capsule
//! touches one page of a buffer).

use std::io;

use io_uring::{types::BufRingEntry, IoUring};

/// The buffer group id of the pool (one pool per ring).
pub(crate) const RECEIVE_BUFFER_GROUP: u16 = 0;

/// The most buffers a pool may have: the kernel takes at most 32,768 entries in a
/// provided-buffer ring, and the count must be a power of two.
pub const MAX_SHARED_RECEIVE_BUFFERS: u16 = 32_768;

/// Buffers a pool provides at first. Few, because the kernel cycles through every
/// buffer in the ring: the fewer there are, the more likely the next receive lands in
/// memory still in the CPU's cache (measured: 64 buffers of 128 KiB made 128 KiB
/// writes on one connection 18 % slower than one buffer per connection did). A ring
/// whose connections receive more at once runs short and doubles it.
pub const INITIAL_SHARED_RECEIVE_BUFFERS: u16 = 4;

pub(crate) struct ReceivePool {
    /// The ring of buffer descriptors the kernel reads (page-aligned, from mmap).
    entries: *mut BufRingEntry,
    entries_bytes: usize,
    /// `count x buffer_bytes` bytes; buffer `id` starts at `id x buffer_bytes`.
    /// Zero-initialised through the allocator (calloc, mmap for large sizes), so
    /// pages never written are never resident.
    memory: Box<[u8]>,
    buffer_bytes: usize,
    count: u16,
    /// Buffers `0..provided` have been given to the kernel; the rest are untouched.
    provided: u16,
    /// The next descriptor slot to fill (the kernel consumes from its head).
    tail: u16,
}

impl ReceivePool {
    /// Maps the descriptor ring, registers it with `ring` and provides every buffer.
    /// `count` is rounded up to a power of two (at most
    /// [`MAX_SHARED_RECEIVE_BUFFERS`]). Fails on kernels without provided-buffer
    /// rings (before 5.19); the caller falls back to a buffer per connection.
    pub(crate) fn register(ring: &IoUring, count: u16, buffer_bytes: usize) -> io::Result<ReceivePool> {
        let count = count.clamp(1, MAX_SHARED_RECEIVE_BUFFERS).next_power_of_two();
        if buffer_bytes == 0 || u32::try_from(buffer_bytes).is_err() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "receive buffer size must fit in 32 bits"));
        }
        let entries_bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping, no address hint; the result is checked.
        // The kernel requires the descriptor ring page-aligned, which mmap gives.
        let mapped = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                entries_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut pool = ReceivePool {
            entries: mapped.cast(),
            entries_bytes,
            memory: vec![0u8; usize::from(count) * buffer_bytes].into_boxed_slice(),
            buffer_bytes,
            count,
            provided: 0,
            tail: 0,
        };
        // SAFETY: the descriptor ring is mapped for `count` entries and stays mapped
        // until `release` unregisters it (or forever, when operations may still be
        // in flight); the buffers it will describe live in `memory`, as long.
        let registered =
            unsafe { ring.submitter().register_buf_ring_with_flags(mapped as u64, count, RECEIVE_BUFFER_GROUP, 0) };
        if let Err(error) = registered {
            // Nothing was registered: the mapping is ours alone to undo.
            pool.unmap();
            std::mem::forget(pool);
            return Err(error);
        }
        pool.provide_up_to(INITIAL_SHARED_RECEIVE_BUFFERS.min(count));
        Ok(pool)
    }

    /// A receive found no free buffer: doubles the buffers provided, unless all are.
    /// Returns the new number provided, or `None` when the pool was already full.
    pub(crate) fn grow(&mut self) -> Option<u16> {
        if self.provided >= self.count {
            return None;
        }
        let target = self.provided.saturating_mul(2).clamp(1, self.count);
        self.provide_up_to(target);
        Some(self.provided)
    }

    fn provide_up_to(&mut self, target: u16) {
        while self.provided < target {
            self.give_back(self.provided);
            self.provided += 1;
        }
    }

    /// Buffers provided to the kernel so far.
    #[cfg(test)]
    pub(crate) fn provided(&self) -> u16 {
        self.provided
    }

    /// The bytes a completion says the kernel put in buffer `id`. `None` for an id
    /// or length outside the pool (never, from a kernel that honours the ring).
    pub(crate) fn received(&self, id: u16, length: usize) -> Option<&[u8]> {
        if id >= self.count || length > self.buffer_bytes {
            return None;
        }
        let start = usize::from(id) * self.buffer_bytes;
        self.memory.get(start..start + length)
    }

    /// Puts buffer `id` back at the ring's tail for the kernel to fill again.
    pub(crate) fn give_back(&mut self, id: u16) {
        if id >= self.count {
            return;
        }
        let slot = usize::from(self.tail & (self.count - 1));
        let address = self.memory.as_ptr() as u64 + (usize::from(id) * self.buffer_bytes) as u64;
        // SAFETY: `slot < count`, inside the mapped descriptor ring; the kernel only
        // reads descriptors between its head and the published tail, and this slot is
        // past the tail until the store below publishes it.
        unsafe {
            let entry = &mut *self.entries.add(slot);
            entry.set_addr(address);
            entry.set_len(self.buffer_bytes as u32);
            entry.set_bid(id);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field overlays the first descriptor's reserved field, as
        // the kernel's ABI lays it out (BufRingEntry::tail); the Release store makes
        // the descriptor written above visible before the kernel sees the new tail.
        unsafe {
            let tail = BufRingEntry::tail(self.entries).cast::<std::sync::atomic::AtomicU16>();
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    /// The most buffers the pool may provide (a power of two).
    #[cfg(test)]
    pub(crate) fn count(&self) -> u16 {
        self.count
    }

    /// Unregisters the pool and frees it. Only when no receive is armed on the ring
    /// (the caller checks): then the kernel holds no pointer into it.
    pub(crate) fn release(mut self, ring: &IoUring) {
        if let Err(error) = ring.submitter().unregister_buf_ring(RECEIVE_BUFFER_GROUP) {
            // The ring may still point at it: leak rather than free.
            tracing::warn!(%error, "unregistering the receive buffer pool failed; leaking it");
            std::mem::forget(self);
            return;
        }
        self.unmap();
    }

    fn unmap(&mut self) {
        if self.entries.is_null() {
            return;
        }
        // SAFETY: `entries` came from mmap with `entries_bytes` and nothing (the
        // kernel included, once unregistered or never registered) uses it any more.
        unsafe { libc::munmap(self.entries.cast(), self.entries_bytes) };
        self.entries = std::ptr::null_mut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_out_ids_inside_the_pool_only() {
        let ring = IoUring::new(8).expect("ring");
        let mut pool = ReceivePool::register(&ring, 3, 4096).expect("kernels since 5.19 have buffer rings");
        assert_eq!(pool.count(), 4, "rounded up to a power of two");
        assert_eq!(pool.provided(), 4, "no more than the initial number: all provided at once");
        assert_eq!(pool.received(3, 4096).map(<[u8]>::len), Some(4096));
        assert!(pool.received(4, 1).is_none(), "an id past the pool");
        assert!(pool.received(0, 4097).is_none(), "a length past a buffer");
        assert_eq!(pool.grow(), None, "a full pool does not grow");
        pool.release(&ring);
    }

    #[test]
    fn grows_by_doubling_up_to_its_count() {
        let ring = IoUring::new(8).expect("ring");
        let mut pool = ReceivePool::register(&ring, 1000, 64).expect("buffer ring");
        assert_eq!(pool.count(), 1024);
        assert_eq!(pool.provided(), INITIAL_SHARED_RECEIVE_BUFFERS);
        let steps: Vec<u16> = std::iter::from_fn(|| pool.grow()).collect();
        assert_eq!(steps, [8, 16, 32, 64, 128, 256, 512, 1024]);
        pool.release(&ring);
    }
}

//! The RAM backend: a sparse, lock-free, in-memory namespace.
//!
//! # Layout
//! The namespace is cut into fixed chunks (2 MiB by default: one transparent huge page).
//! Each chunk is a `OnceLock` of zeroed words that is allocated on the first write that
//! puts non-zero data into it, so creating a 1 GiB (or 1 TiB) namespace costs only the
//! chunk table and an unwritten chunk reads as zeroes without existing.
//!
//! # Where chunk memory comes from
//! From the heap by default, or from a [`ChunkMemory`] the caller provides: the runtime's
//! gives every 2 MiB chunk its own huge-page-aligned mapping with `MADV_HUGEPAGE`
//! (`runtime::HugePageChunkMemory`; this crate has no `unsafe`). Random 4 KiB I/O over a
//! namespace of gigabytes otherwise misses the TLB on nearly every request: measured
//! with SPDK's initiator against `sluice serve`, huge pages took 20 % off the target's
//! CPU per I/O for 4 KiB random reads and writes (docs/results/target-vs-spdk.md).
//!
//! # Concurrency
//! Any number of queues on any number of threads read and write the same namespace with
//! no lock per I/O and no `unsafe`: looking a chunk up is one acquire load (`OnceLock::get`),
//! and data moves with relaxed 64-bit atomic loads and stores, which on x86-64 and
//! AArch64 are ordinary moves. Only the first write into a chunk allocates, and two
//! threads racing to allocate the same chunk are resolved by the `OnceLock`.
//!
//! Overlapping writes that run at the same time may interleave at 8-byte granularity,
//! like a real disk without atomic write guarantees (NVMe AWUN/AWUPF of one block are
//! not promised here): each aligned 8-byte word ends up wholly from one writer or the
//! other, and a read racing a write may see a mix of old and new words. There is no
//! undefined behaviour in either case. Ordering between I/Os that do not overlap in time
//! comes from whatever hands a completion to the next submitter (a channel, a socket, a
//! thread join), which is a synchronisation point of its own.
//!
//! # Byte packing
//! Bytes are packed into each word little-endian (`to_le_bytes`/`from_le_bytes`), so the
//! word contents are the same on every host and identical to the byte image on x86-64,
//! where the conversion compiles to nothing.
//!
//! # What is not reclaimed
//! Zeroing or deallocating a range stores zeroes into chunks that exist and skips those
//! that do not, but never frees a chunk: a `OnceLock` cannot be emptied through a shared
//! reference, and doing it safely while other threads may be copying into the chunk
//! would need a lock (or reference counting) on every I/O. Memory therefore grows to the
//! set of chunks ever written with non-zero data and stays there until the backend is
//! dropped.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backend::ReadyCompletions;
use crate::io::validate_request;
use crate::lent::{LentBytes, LentMemory};
use crate::{Backend, BackendQueue, Geometry, GeometryError, IoCompletion, IoError, IoOp, IoRequest};

/// Default allocation unit: one x86-64 transparent huge page (2 MiB), so a chunk can be
/// one TLB entry; large enough that the chunk table of a big namespace stays small and
/// most I/Os touch one chunk, small enough that a sparse namespace stays sparse.
pub const DEFAULT_CHUNK_SIZE_BYTES: usize = 2 << 20;
const MIN_CHUNK_SIZE_BYTES: usize = 4096;
const MAX_CHUNK_SIZE_BYTES: usize = 1 << 30;
const WORD_BYTES: usize = std::mem::size_of::<u64>();
/// Caps the chunk table, the one up-front cost (32 bytes per chunk: 128 MiB here). With
/// the default 2 MiB chunks that allows namespaces up to 8 TiB, far beyond any RAM this
/// target will run with, while a typo in a config cannot ask for a petabyte table.
pub const MAX_CHUNK_COUNT: usize = 1 << 22;

/// One chunk of the namespace; empty until first written.
type ChunkSlot = OnceLock<Chunk>;

/// Provides zeroed memory for chunks (see the module docs), e.g. on huge pages.
pub trait ChunkMemory: Send + Sync + std::fmt::Debug + 'static {
    /// `words` zeroed 64-bit words, or `None` when this provider cannot make them
    /// (a size it does not serve, a failed mapping): the chunk then comes from the heap.
    fn allocate_zeroed(&self, words: usize) -> Option<Box<dyn ChunkWords>>;
}

/// A chunk's memory from a [`ChunkMemory`]: zeroed words, alive as long as the value.
pub trait ChunkWords: Send + Sync {
    /// The chunk's words, zeroed when handed out.
    fn words(&self) -> &[AtomicU64];
}

/// The memory of one allocated chunk.
enum Chunk {
    Heap(Box<[AtomicU64]>),
    Provided(Box<dyn ChunkWords>),
}

impl Chunk {
    fn words(&self) -> &[AtomicU64] {
        match self {
            Chunk::Heap(words) => words,
            Chunk::Provided(memory) => memory.words(),
        }
    }
}

// A chunk's words are data, not something to print.
impl std::fmt::Debug for Chunk {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if matches!(self, Chunk::Heap(_)) { "heap" } else { "provided" };
        write!(formatter, "Chunk({kind}, {} words)", self.words().len())
    }
}

/// An in-memory namespace. Cheap to create; see the module docs for the design.
#[derive(Debug)]
pub struct RamBackend {
    store: Arc<ChunkStore>,
}

impl RamBackend {
    /// A RAM namespace of the given shape with the default 2 MiB chunks, ready to be used
    /// as an `Arc<dyn Backend>`.
    ///
    /// # Panics
    /// On a geometry that [`RamBackend::try_new`] rejects. Meant for tests and for
    /// geometries that were validated already; use `try_new` for untrusted ones.
    pub fn new(geometry: Geometry) -> Arc<Self> {
        Self::try_new(geometry).unwrap_or_else(|error| panic!("RAM backend {geometry:?}: {error}"))
    }

    /// Like [`RamBackend::new`], reporting an invalid geometry (see [`Geometry::validate`])
    /// or one whose chunk table would exceed [`MAX_CHUNK_COUNT`] instead of panicking.
    pub fn try_new(geometry: Geometry) -> Result<Arc<Self>, GeometryError> {
        Self::with_chunk_size(geometry, DEFAULT_CHUNK_SIZE_BYTES)
    }

    /// Like [`RamBackend::try_new`], with chunk memory from `memory` (huge pages, say).
    pub fn with_chunk_memory(geometry: Geometry, memory: Arc<dyn ChunkMemory>) -> Result<Arc<Self>, GeometryError> {
        Self::build(geometry, DEFAULT_CHUNK_SIZE_BYTES, Some(memory))
    }

    /// A RAM namespace with a chosen allocation unit (a power of two between 4 KiB and
    /// 1 GiB). Chunks need not be a multiple of the block size: I/Os are split at chunk
    /// boundaries wherever they fall. Mostly useful to exercise chunk straddling in tests.
    pub fn with_chunk_size(geometry: Geometry, chunk_size_bytes: usize) -> Result<Arc<Self>, GeometryError> {
        Self::build(geometry, chunk_size_bytes, None)
    }

    fn build(
        geometry: Geometry,
        chunk_size_bytes: usize,
        memory: Option<Arc<dyn ChunkMemory>>,
    ) -> Result<Arc<Self>, GeometryError> {
        geometry.validate()?;
        if !chunk_size_bytes.is_power_of_two()
            || !(MIN_CHUNK_SIZE_BYTES..=MAX_CHUNK_SIZE_BYTES).contains(&chunk_size_bytes)
        {
            return Err(GeometryError::InvalidChunkSize(chunk_size_bytes));
        }
        // Offsets into the store are computed in usize, so the whole capacity must be
        // addressable even though it is never allocated at once.
        let capacity_bytes = geometry.capacity_bytes();
        if usize::try_from(capacity_bytes).is_err() {
            return Err(geometry.too_large());
        }
        let chunk_count = capacity_bytes.div_ceil(chunk_size_bytes as u64);
        if chunk_count > MAX_CHUNK_COUNT as u64 {
            return Err(geometry.too_large());
        }
        let chunk_count = chunk_count as usize;
        let chunks = (0..chunk_count).map(|_| ChunkSlot::new()).collect();
        let store = ChunkStore {
            geometry,
            capacity_bytes,
            chunk_size_bytes,
            chunk_shift: chunk_size_bytes.trailing_zeros(),
            chunks,
            memory,
            allocated_chunk_bytes: AtomicUsize::new(0),
        };
        Ok(Arc::new(Self { store: Arc::new(store) }))
    }

    /// Bytes of chunk memory allocated so far (excluding the chunk table). Grows on the
    /// first non-zero write into each chunk and never shrinks.
    pub fn allocated_bytes(&self) -> usize {
        self.store.allocated_chunk_bytes.load(Ordering::Relaxed)
    }
}

impl Backend for RamBackend {
    fn geometry(&self) -> Geometry {
        self.store.geometry
    }

    fn has_volatile_write_cache(&self) -> bool {
        false
    }

    fn kind(&self) -> &'static str {
        "ram"
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(RamQueue {
            store: Arc::clone(&self.store),
            lender: Arc::new(QueueLender(Arc::clone(&self.store))),
            ready: ReadyCompletions::new(),
        })
    }
}

/// Shared by the backend handle and all its queues, so a queue outlives neither.
#[derive(Debug)]
struct ChunkStore {
    geometry: Geometry,
    capacity_bytes: u64,
    chunk_size_bytes: usize,
    chunk_shift: u32,
    chunks: Box<[ChunkSlot]>,
    /// Where chunk memory comes from; the heap when `None`.
    memory: Option<Arc<dyn ChunkMemory>>,
    /// Only touched when a chunk is allocated, never on the steady-state path.
    allocated_chunk_bytes: AtomicUsize,
}

/// The part of one I/O that falls into one chunk.
struct Piece {
    chunk_index: usize,
    /// Word range inside the chunk.
    first_word: usize,
    word_count: usize,
    /// Byte range inside the request.
    request_offset: usize,
}

impl Piece {
    fn words<'chunk>(&self, chunk: &'chunk [AtomicU64]) -> &'chunk [AtomicU64] {
        &chunk[self.first_word..self.first_word + self.word_count]
    }

    fn request_bytes(&self) -> std::ops::Range<usize> {
        self.request_offset..self.request_offset + self.word_count * WORD_BYTES
    }
}

impl ChunkStore {
    /// Splits `[start_byte, start_byte + len_bytes)` at chunk boundaries. Callers have
    /// validated the range, and the capacity fits usize, so nothing here overflows.
    fn for_each_piece(&self, start_byte: u64, len_bytes: u64, mut visit: impl FnMut(Piece)) {
        debug_assert!(start_byte.checked_add(len_bytes).is_some_and(|end| end <= self.capacity_bytes));
        let mut start = start_byte as usize;
        let end = start + len_bytes as usize;
        let mut request_offset = 0;
        while start < end {
            let within_chunk = start & (self.chunk_size_bytes - 1);
            let piece_bytes = (self.chunk_size_bytes - within_chunk).min(end - start);
            visit(Piece {
                chunk_index: start >> self.chunk_shift,
                first_word: within_chunk / WORD_BYTES,
                word_count: piece_bytes / WORD_BYTES,
                request_offset,
            });
            start += piece_bytes;
            request_offset += piece_bytes;
        }
    }

    fn read(&self, start_byte: u64, buffer: &mut [u8]) {
        self.for_each_piece(start_byte, buffer.len() as u64, |piece| {
            let destination = &mut buffer[piece.request_bytes()];
            match self.chunks[piece.chunk_index].get() {
                Some(chunk) => load_words(piece.words(chunk.words()), destination),
                None => destination.fill(0),
            }
        });
    }

    fn write(&self, start_byte: u64, data: &[u8]) {
        self.for_each_piece(start_byte, data.len() as u64, |piece| {
            let source = &data[piece.request_bytes()];
            let slot = &self.chunks[piece.chunk_index];
            let chunk = match slot.get() {
                Some(chunk) => chunk,
                // Zeroes into a chunk that reads as zeroes already: stay sparse (mkfs and
                // guests zeroing disks do this a lot). The scan only happens while the
                // chunk is unallocated, so it is not on the steady-state path.
                None if is_all_zero(source) => return,
                None => slot.get_or_init(|| self.allocate_chunk(piece.chunk_index)),
            };
            store_words(piece.words(chunk.words()), source);
        });
    }

    /// Write Zeroes and Deallocate: store zeroes into chunks that exist and skip the
    /// others, which read as zeroes already.
    fn zero(&self, start_byte: u64, len_bytes: u64) {
        self.for_each_piece(start_byte, len_bytes, |piece| {
            if let Some(chunk) = self.chunks[piece.chunk_index].get() {
                for word in piece.words(chunk.words()) {
                    word.store(0, Ordering::Relaxed);
                }
            }
        });
    }

    /// The last chunk is cut to the capacity so that a small namespace never allocates a
    /// whole default chunk. Capacity is a multiple of 512, hence of the word size.
    fn allocate_chunk(&self, chunk_index: usize) -> Chunk {
        let chunk_start = chunk_index * self.chunk_size_bytes;
        let chunk_bytes = self.chunk_size_bytes.min(self.capacity_bytes as usize - chunk_start);
        self.allocated_chunk_bytes.fetch_add(chunk_bytes, Ordering::Relaxed);
        let words = chunk_bytes / WORD_BYTES;
        let provided = self.memory.as_ref().and_then(|memory| memory.allocate_zeroed(words));
        match provided {
            Some(memory) if memory.words().len() == words => Chunk::Provided(memory),
            _ => Chunk::Heap((0..words).map(|_| AtomicU64::new(0)).collect()),
        }
    }

    fn byte_offset(&self, lba: u64) -> u64 {
        lba * u64::from(self.geometry.block_size_bytes)
    }

    fn byte_length(&self, blocks: u64) -> u64 {
        blocks * u64::from(self.geometry.block_size_bytes)
    }
}

/// Bytes of the shared all-zero region lent for never-written chunks (a lent range over
/// several of them is several pieces of this region).
const ZERO_REGION_BYTES: usize = 128 * 1024;

/// The all-zero region, allocated on the first lend of a never-written chunk and never
/// written: unallocated chunks read as zeroes without existing.
fn zero_region() -> &'static [AtomicU64] {
    static ZERO_REGION: OnceLock<Box<[AtomicU64]>> = OnceLock::new();
    ZERO_REGION.get_or_init(|| (0..ZERO_REGION_BYTES / WORD_BYTES).map(|_| AtomicU64::new(0)).collect())
}

impl LentMemory for ChunkStore {
    fn pieces(&self, start_byte: usize, len: usize, visit: &mut dyn FnMut(usize, usize)) {
        debug_assert!((start_byte + len) as u64 <= self.capacity_bytes);
        let mut start = start_byte;
        let end = start_byte + len;
        while start < end {
            let within_chunk = start & (self.chunk_size_bytes - 1);
            let piece_bytes = (self.chunk_size_bytes - within_chunk).min(end - start);
            match self.chunks[start >> self.chunk_shift].get() {
                // Words hold their bytes little-endian, so on a little-endian machine
                // (the only kind that lends, see `lend_read`) the chunk's memory is
                // the device's byte image.
                Some(chunk) => visit(chunk.words().as_ptr() as usize + within_chunk, piece_bytes),
                None => {
                    let zeroes = zero_region();
                    let mut left = piece_bytes;
                    while left > 0 {
                        let bytes = left.min(ZERO_REGION_BYTES);
                        visit(zeroes.as_ptr() as usize, bytes);
                        left -= bytes;
                    }
                }
            }
            start += piece_bytes;
        }
    }

    fn copy_out(&self, start_byte: usize, out: &mut [u8]) {
        if start_byte % WORD_BYTES == 0 && out.len() % WORD_BYTES == 0 {
            self.read(start_byte as u64, out);
            return;
        }
        // Not word aligned (only tests ask for such ranges): read the enclosing words.
        let first = start_byte - start_byte % WORD_BYTES;
        let end = (start_byte + out.len()).next_multiple_of(WORD_BYTES);
        let mut words = vec![0u8; end - first];
        self.read(first as u64, &mut words);
        let offset = start_byte - first;
        out.copy_from_slice(&words[offset..offset + out.len()]);
    }
}

/// Copies words out as little-endian bytes. `chunks_exact_mut(8)` lets the compiler
/// drop bounds checks, so each word is one load and one store.
fn load_words(words: &[AtomicU64], destination: &mut [u8]) {
    debug_assert_eq!(words.len() * WORD_BYTES, destination.len());
    for (word, bytes) in words.iter().zip(destination.chunks_exact_mut(WORD_BYTES)) {
        bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
}

/// Copies little-endian bytes into words; the inverse of [`load_words`].
fn store_words(words: &[AtomicU64], source: &[u8]) {
    debug_assert_eq!(words.len() * WORD_BYTES, source.len());
    for (word, bytes) in words.iter().zip(source.chunks_exact(WORD_BYTES)) {
        let mut packed = [0u8; WORD_BYTES];
        packed.copy_from_slice(bytes);
        word.store(u64::from_le_bytes(packed), Ordering::Relaxed);
    }
}

/// Zero test that the compiler vectorises: OR-folding words has no early exit per byte.
fn is_all_zero(bytes: &[u8]) -> bool {
    bytes.chunks(4096).all(|block| block.iter().fold(0u8, |acc, &byte| acc | byte) == 0)
}

struct RamQueue {
    store: Arc<ChunkStore>,
    /// What this queue's lent reads hold: a reference count of the queue's own, so
    /// lending a read touches a cache line only this queue's thread writes, not the
    /// store's, which every thread serving the namespace would share.
    lender: Arc<QueueLender>,
    ready: ReadyCompletions,
}

/// The store, lent through one queue (see [`RamQueue::lender`]).
struct QueueLender(Arc<ChunkStore>);

impl LentMemory for QueueLender {
    fn pieces(&self, start_byte: usize, len: usize, visit: &mut dyn FnMut(usize, usize)) {
        self.0.pieces(start_byte, len, visit);
    }

    fn copy_out(&self, start_byte: usize, out: &mut [u8]) {
        self.0.copy_out(start_byte, out);
    }
}

impl BackendQueue for RamQueue {
    fn submit(&mut self, request: IoRequest) {
        let IoRequest { token, op, mut buffer } = request;
        let result = validate_request(&self.store.geometry, &op, buffer.len());
        if result.is_ok() {
            let store = &*self.store;
            match op {
                IoOp::Read { lba, .. } => store.read(store.byte_offset(lba), &mut buffer),
                // Force Unit Access and Flush have nothing to do: there is no cache
                // between a completed write and the memory it went to.
                IoOp::Write { lba, .. } => store.write(store.byte_offset(lba), &buffer),
                IoOp::Flush => {}
                IoOp::WriteZeroes { lba, blocks, .. } | IoOp::Deallocate { lba, blocks } => {
                    store.zero(store.byte_offset(lba), store.byte_length(blocks));
                }
                // Refused by validate_request.
                IoOp::CompareAndWrite { .. } => {}
            }
        }
        self.ready.push(IoCompletion { token, result, buffer });
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        self.ready.drain_into(out);
    }

    fn in_flight(&self) -> usize {
        self.ready.len()
    }

    fn lend_read(&mut self, lba: u64, blocks: u32) -> Option<Result<LentBytes, IoError>> {
        // Words are stored little-endian: only there is a chunk's memory the byte image.
        if cfg!(target_endian = "big") {
            return None;
        }
        let store = &self.store;
        let len = store.byte_length(u64::from(blocks));
        let checked = validate_request(&store.geometry, &IoOp::Read { lba, blocks }, len as usize);
        Some(checked.map(|()| {
            let memory: Arc<dyn LentMemory> = Arc::clone(&self.lender) as Arc<dyn LentMemory>;
            LentBytes::new(memory, store.byte_offset(lba) as usize, len as usize)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(block_size_bytes: u32, block_count: u64) -> Geometry {
        Geometry { block_size_bytes, block_count }
    }

    /// Submits one request on a fresh queue and returns its completion.
    fn run(backend: &RamBackend, token: u64, op: IoOp, buffer: Vec<u8>) -> IoCompletion {
        let mut queue = backend.open_queue();
        queue.submit(IoRequest { token, op, buffer });
        let mut out = Vec::with_capacity(1);
        queue.reap(&mut out);
        assert_eq!(queue.in_flight(), 0);
        out.pop().expect("synchronous backend completes inside submit")
    }

    fn write(backend: &RamBackend, lba: u64, data: Vec<u8>) {
        let blocks = (data.len() / backend.geometry().block_size_bytes as usize) as u32;
        let op = IoOp::Write { lba, blocks, force_unit_access: false };
        assert_eq!(run(backend, 1, op, data).result, Ok(()));
    }

    fn read(backend: &RamBackend, lba: u64, blocks: u32) -> Vec<u8> {
        let len = blocks as usize * backend.geometry().block_size_bytes as usize;
        let completion = run(backend, 2, IoOp::Read { lba, blocks }, vec![0xEE; len]);
        assert_eq!(completion.result, Ok(()));
        completion.buffer
    }

    #[test]
    fn a_one_gib_namespace_allocates_nothing_up_front() {
        let backend = RamBackend::new(geometry(4096, 1 << 18));
        assert_eq!(backend.geometry().capacity_bytes(), 1 << 30);
        assert_eq!(backend.allocated_bytes(), 0);
        assert_eq!(backend.store.chunks.len(), 512);
        assert_eq!(read(&backend, (1 << 18) - 1, 1), vec![0; 4096]);
        assert_eq!(backend.allocated_bytes(), 0, "reads do not allocate");
    }

    #[test]
    fn a_chunk_table_entry_is_32_bytes() {
        assert!(std::mem::size_of::<ChunkSlot>() <= 32, "{}", std::mem::size_of::<ChunkSlot>());
    }

    #[test]
    fn a_one_tib_namespace_is_only_a_chunk_table() {
        let backend = RamBackend::new(geometry(4096, 1 << 28));
        assert_eq!(backend.store.chunks.len(), 1 << 19);
        write(&backend, (1 << 28) - 1, vec![0x5A; 4096]);
        assert_eq!(backend.allocated_bytes(), DEFAULT_CHUNK_SIZE_BYTES);
        assert_eq!(read(&backend, (1 << 28) - 1, 1), vec![0x5A; 4096]);
    }

    #[test]
    fn words_hold_bytes_little_endian() {
        let backend = RamBackend::new(geometry(512, 8));
        let mut data = vec![0u8; 512];
        data[..16].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        write(&backend, 1, data.clone());
        let chunk = backend.store.chunks[0].get().expect("written chunk exists").words();
        assert_eq!(chunk[64].load(Ordering::Relaxed), 0x0807_0605_0403_0201);
        assert_eq!(chunk[65].load(Ordering::Relaxed), 0x100F_0E0D_0C0B_0A09);
        assert_eq!(read(&backend, 1, 1), data);
    }

    #[test]
    fn the_last_chunk_is_cut_to_the_capacity() {
        // 2 MiB + 512 bytes: one full chunk and a 512-byte tail.
        let backend = RamBackend::new(geometry(512, 4097));
        write(&backend, 4096, vec![7; 512]);
        assert_eq!(backend.allocated_bytes(), 512);
        assert_eq!(read(&backend, 4095, 2)[512..], vec![7; 512]);
    }

    /// Chunk memory from the heap through the provider seam, counting what it made;
    /// `wrong_length` hands out one word too few, which the store must not use.
    #[derive(Debug, Default)]
    struct CountingMemory {
        made: AtomicUsize,
        wrong_length: bool,
        refuse: bool,
    }

    struct Words(Box<[AtomicU64]>);

    impl ChunkWords for Words {
        fn words(&self) -> &[AtomicU64] {
            &self.0
        }
    }

    impl ChunkMemory for CountingMemory {
        fn allocate_zeroed(&self, words: usize) -> Option<Box<dyn ChunkWords>> {
            if self.refuse {
                return None;
            }
            self.made.fetch_add(1, Ordering::Relaxed);
            let words = if self.wrong_length { words - 1 } else { words };
            Some(Box::new(Words((0..words).map(|_| AtomicU64::new(0)).collect())))
        }
    }

    #[test]
    fn chunks_come_from_the_provided_memory_or_else_the_heap() {
        for (wrong_length, refuse, provided) in [(false, false, true), (true, false, false), (false, true, false)] {
            let memory = Arc::new(CountingMemory { wrong_length, refuse, ..CountingMemory::default() });
            // 4 MiB + 4 KiB: two full chunks and a 4 KiB tail.
            let backend =
                RamBackend::with_chunk_memory(geometry(4096, 1025), Arc::clone(&memory) as Arc<dyn ChunkMemory>)
                    .unwrap();
            let data: Vec<u8> = (0..3 * 4096).map(|index| (index % 253) as u8).collect();
            // Blocks 511..=513 straddle the first two chunks; block 1024 is the tail.
            write(&backend, 511, data.clone());
            write(&backend, 1024, vec![9; 4096]);
            assert_eq!(read(&backend, 511, 3), data);
            assert_eq!(read(&backend, 1024, 1), vec![9; 4096]);
            assert_eq!(read(&backend, 0, 1), vec![0; 4096], "provided memory starts zeroed");
            let chunk_kinds: Vec<bool> =
                backend.store.chunks.iter().map(|slot| matches!(slot.get(), Some(Chunk::Provided(_)))).collect();
            assert_eq!(chunk_kinds, vec![provided; 3], "wrong_length {wrong_length}, refuse {refuse}");
            assert_eq!(memory.made.load(Ordering::Relaxed), if refuse { 0 } else { 3 });
            assert_eq!(backend.allocated_bytes(), 4 << 20 | 4096);
        }
    }

    #[test]
    fn io_straddling_chunks_is_split_correctly() {
        // 4 KiB chunks under 64 KiB blocks: every block spans 16 chunks.
        let backend = RamBackend::with_chunk_size(geometry(65536, 4), 4096).unwrap();
        let data: Vec<u8> = (0..2 * 65536).map(|index| (index % 251) as u8).collect();
        write(&backend, 1, data.clone());
        assert_eq!(read(&backend, 1, 2), data);
        assert_eq!(read(&backend, 0, 1), vec![0; 65536]);
        assert_eq!(backend.allocated_bytes(), 2 * 65536);
    }

    #[test]
    fn zeroes_into_unallocated_chunks_stay_sparse() {
        let backend = RamBackend::with_chunk_size(geometry(512, 64), 4096).unwrap();
        write(&backend, 0, vec![0; 512 * 64]);
        let zeroes = IoOp::WriteZeroes { lba: 0, blocks: 64, deallocate: false, force_unit_access: true };
        assert_eq!(run(&backend, 3, zeroes, Vec::new()).result, Ok(()));
        assert_eq!(backend.allocated_bytes(), 0);
        // A partly zero write into an unallocated chunk still allocates that chunk only.
        let mut data = vec![0; 512 * 16];
        data[512 * 15] = 1;
        write(&backend, 0, data);
        assert_eq!(backend.allocated_bytes(), 4096);
    }

    #[test]
    fn deallocate_zeroes_allocated_chunks_without_freeing_them() {
        let backend = RamBackend::with_chunk_size(geometry(512, 64), 4096).unwrap();
        write(&backend, 0, vec![0xAA; 512 * 64]);
        let deallocate = IoOp::Deallocate { lba: 4, blocks: 20 };
        assert_eq!(run(&backend, 4, deallocate, Vec::new()).result, Ok(()));
        let contents = read(&backend, 0, 64);
        assert!(contents[..4 * 512].iter().all(|&byte| byte == 0xAA));
        assert!(contents[4 * 512..24 * 512].iter().all(|&byte| byte == 0));
        assert!(contents[24 * 512..].iter().all(|&byte| byte == 0xAA));
        assert_eq!(backend.allocated_bytes(), 512 * 64);
    }

    #[test]
    fn rejects_bad_chunk_sizes_and_geometries() {
        let good = geometry(512, 8);
        for bad in [0, 8, 2048, 3 * 4096, (1 << 30) * 2] {
            let error = RamBackend::with_chunk_size(good, bad).unwrap_err();
            assert_eq!(error, GeometryError::InvalidChunkSize(bad));
        }
        assert_eq!(RamBackend::try_new(geometry(4096, 0)).unwrap_err(), GeometryError::Empty);
        assert_eq!(RamBackend::try_new(geometry(520, 8)).unwrap_err(), GeometryError::InvalidBlockSize(520));
        assert!(matches!(RamBackend::try_new(geometry(512, u64::MAX / 512)), Err(GeometryError::TooLarge { .. })));
        let over_table = geometry(4096, (MAX_CHUNK_COUNT as u64 + 1) * (DEFAULT_CHUNK_SIZE_BYTES as u64 / 4096));
        assert!(matches!(RamBackend::try_new(over_table), Err(GeometryError::TooLarge { .. })));
    }

    #[test]
    #[should_panic(expected = "block size 100 bytes")]
    fn new_panics_on_an_invalid_geometry() {
        RamBackend::new(geometry(100, 8));
    }

    /// Two writers hammer the same blocks with uniform patterns; every 8-byte word read
    /// back must be wholly one pattern (no torn words), even if blocks mix both.
    #[test]
    fn overlapping_concurrent_writes_interleave_only_at_word_granularity() {
        let backend = RamBackend::with_chunk_size(geometry(512, 64), 4096).unwrap();
        let patterns = [0x1111_1111_1111_1111u64, 0x2222_2222_2222_2222u64];
        let writers: Vec<_> = patterns
            .iter()
            .map(|&pattern| {
                let backend = Arc::clone(&backend);
                std::thread::spawn(move || {
                    let mut queue = backend.open_queue();
                    let mut buffer = pattern.to_le_bytes().repeat(512 * 64 / WORD_BYTES);
                    let mut out = Vec::with_capacity(1);
                    for token in 0..200 {
                        let op = IoOp::Write { lba: 0, blocks: 64, force_unit_access: false };
                        queue.submit(IoRequest { token, op, buffer });
                        queue.reap(&mut out);
                        let completion = out.pop().unwrap();
                        assert_eq!(completion.result, Ok(()));
                        buffer = completion.buffer;
                    }
                })
            })
            .collect();
        let mut seen_words = 0;
        while seen_words < 50_000 {
            for word in read(&backend, 0, 64).chunks_exact(WORD_BYTES) {
                let value = u64::from_le_bytes(word.try_into().unwrap());
                assert!(value == 0 || patterns.contains(&value), "torn word {value:#x}");
                seen_words += 1;
            }
        }
        for writer in writers {
            writer.join().unwrap();
        }
    }

    /// Lends blocks [lba, lba + blocks) and returns the lent bytes and their pieces.
    fn lend(backend: &RamBackend, lba: u64, blocks: u32) -> (Vec<u8>, Vec<usize>) {
        let lent = backend.open_queue().lend_read(lba, blocks).expect("RAM lends").expect("in range");
        let mut bytes = vec![0xEE; lent.len()];
        lent.copy_to(0..lent.len(), &mut bytes);
        let mut piece_lengths = Vec::new();
        lent.for_each_piece(0..lent.len(), |_, len| piece_lengths.push(len));
        (bytes, piece_lengths)
    }

    #[test]
    fn lent_reads_match_copied_reads_across_chunks_and_holes() {
        // 4 KiB chunks of 8 blocks; chunk 1 is never written and lends zeroes.
        let backend = RamBackend::with_chunk_size(geometry(512, 64), 4096).unwrap();
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        write(&backend, 0, data.clone());
        write(&backend, 16, data.clone());
        for (lba, blocks) in [(0, 8), (3, 2), (4, 20), (0, 64), (9, 3)] {
            let (lent, pieces) = lend(&backend, lba, blocks);
            assert_eq!(lent, read(&backend, lba, blocks), "lba {lba} blocks {blocks}");
            assert_eq!(pieces.iter().sum::<usize>(), blocks as usize * 512);
        }
        // Three chunks (one a hole) are three pieces; one chunk is one.
        assert_eq!(lend(&backend, 4, 20).1, vec![2048, 4096, 4096]);
        assert_eq!(lend(&backend, 1, 2).1, vec![1024]);
    }

    #[test]
    fn lent_memory_sees_later_writes_and_outlives_the_backend() {
        let backend = RamBackend::new(geometry(512, 16));
        write(&backend, 0, vec![1; 512]);
        let lent = backend.open_queue().lend_read(0, 1).unwrap().unwrap();
        write(&backend, 0, vec![2; 512]);
        drop(backend);
        let mut out = vec![0; 16];
        lent.copy_to(100..116, &mut out);
        assert_eq!(out, vec![2; 16], "lent memory is the namespace's, not a snapshot");
        let mut odd = vec![0; 3];
        lent.copy_to(5..8, &mut odd);
        assert_eq!(odd, vec![2; 3]);
    }

    #[test]
    fn lending_checks_the_range_like_a_read() {
        let backend = RamBackend::new(geometry(512, 16));
        let mut queue = backend.open_queue();
        assert_eq!(queue.lend_read(15, 2).unwrap().unwrap_err(), IoError::OutOfRange);
        assert_eq!(queue.lend_read(u64::MAX, 1).unwrap().unwrap_err(), IoError::OutOfRange);
        assert_eq!(queue.in_flight(), 0, "lending leaves nothing to reap");
    }
}

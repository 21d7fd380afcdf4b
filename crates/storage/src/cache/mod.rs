//! A cache tier: a fast backend in front of a slow one, write-back or write-through.
//!
//! # Layout of the fast tier
//! - Block 0: a header (magic, line size, slot count, slow geometry), so a restart over
//!   the same tiers recognises its own metadata and a mismatched pair is refused instead
//!   of silently dropping dirty data.
//! - One metadata block per cache slot: {magic, line + 1, dirty}. One block per slot
//!   (rather than packing many slots per block) means two queues never write the same
//!   metadata block, so metadata writes need no ordering between queues.
//! - Then the slots, each one cache line (64 KiB by default), from a line-aligned LBA.
//!
//! The slow tier is cut into lines; line `L` can only live in slot `L % slot_count`
//! (direct mapped).
//!
//! # What is persisted
//! Only "slot S holds dirty line L" and "slot S is invalid" are written, always with FUA,
//! and always before the state they describe can be relied on: a slot is marked dirty on
//! the fast tier before new data goes into it, and an invalidation reaches the fast tier
//! before the slot is refilled with another line. Clean lines are not recorded (after a
//! restart the cache starts cold except for its dirty lines). A line that was destaged
//! stays recorded dirty until its slot is reused, which only costs a redundant destage
//! after a restart.
//!
//! # Concurrency
//! Each slot's state is one atomic word with a busy bit. A request claims the busy bits
//! of every slot it touches, all or nothing (so two requests never deadlock), and works
//! on them through a chain of child I/Os, one at a time; a request that cannot claim its
//! slots waits in its queue and retries on the next reap. That is a per-slot try-lock:
//! nobody blocks or spins, but two queues hitting the same slot serialise.
//!
//! # Flush
//! Write-back: Flush destages every dirty slot (claiming one slot at a time) and then
//! flushes the slow tier, so a completed Flush means durable on the slow tier. A FUA
//! write is durable once it and its dirty record are on the fast tier (with FUA), which
//! survives restart. Write-through writes reach the slow tier before they complete.

mod queue;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Backend, BackendQueue, CompositionError, Geometry, IoOp, IoRequest};

/// Default cache line.
pub const DEFAULT_LINE_SIZE_BYTES: u32 = 64 * 1024;

/// How writes are handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// Writes go to the fast tier and are destaged later (Flush, eviction, background).
    WriteBack,
    /// Writes go to the slow tier (and update the fast copy if cached) before completing.
    WriteThrough,
}

const HEADER_MAGIC: &[u8; 16] = b"SLUICE-CACHE-v1\0";
const META_MAGIC: u64 = u64::from_le_bytes(*b"SLCMETA1");
const SETUP_IO_TIMEOUT: Duration = Duration::from_secs(60);

/// Slot word: busy (claimed by a request), dirty, persisted-dirty (the fast tier records
/// this slot as dirty), and line + 1 in the low bits (0 = invalid).
pub(crate) const BUSY: u64 = 1 << 63;
pub(crate) const DIRTY: u64 = 1 << 62;
pub(crate) const PERSISTED: u64 = 1 << 61;
pub(crate) const TAG_MASK: u64 = PERSISTED - 1;

/// Shared by the backend handle and its queues.
pub(crate) struct CacheShared {
    pub(crate) fast: Arc<dyn Backend>,
    pub(crate) slow: Arc<dyn Backend>,
    pub(crate) mode: CacheMode,
    pub(crate) geometry: Geometry,
    pub(crate) line_blocks: u64,
    pub(crate) line_count: u64,
    pub(crate) slot_count: u64,
    pub(crate) data_start_lba: u64,
    pub(crate) slots: Box<[AtomicU64]>,
}

impl CacheShared {
    pub(crate) fn metadata_lba(&self, slot: u64) -> u64 {
        1 + slot
    }

    pub(crate) fn slot_lba(&self, slot: u64) -> u64 {
        self.data_start_lba + slot * self.line_blocks
    }

    /// Blocks of line `line` on the slow tier (the last line may be short).
    pub(crate) fn line_length_blocks(&self, line: u64) -> u64 {
        self.line_blocks.min(self.geometry.block_count - line * self.line_blocks)
    }

    /// The metadata block recording `line` as dirty (or invalid for `None`).
    pub(crate) fn metadata_block(&self, line: Option<u64>, buffer: &mut Vec<u8>) {
        buffer.clear();
        buffer.resize(self.geometry.block_size_bytes as usize, 0);
        buffer[..8].copy_from_slice(&META_MAGIC.to_le_bytes());
        if let Some(line) = line {
            buffer[8..16].copy_from_slice(&(line + 1).to_le_bytes());
            buffer[16..24].copy_from_slice(&1u64.to_le_bytes());
        }
    }
}

/// A write-back or write-through cache of `fast` in front of `slow`; see the module docs.
pub struct CacheBackend {
    shared: Arc<CacheShared>,
}

impl std::fmt::Debug for CacheBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheBackend")
            .field("mode", &self.shared.mode)
            .field("slot_count", &self.shared.slot_count)
            .field("line_blocks", &self.shared.line_blocks)
            .finish()
    }
}

impl CacheBackend {
    /// A cache with 64 KiB lines. Recovers the dirty lines recorded on `fast` by an
    /// earlier cache over the same two backends.
    pub fn new(fast: Arc<dyn Backend>, slow: Arc<dyn Backend>, mode: CacheMode) -> Result<Arc<Self>, CompositionError> {
        Self::with_line_size(fast, slow, mode, DEFAULT_LINE_SIZE_BYTES)
    }

    /// Like [`CacheBackend::new`] with a chosen line size (a power of two, at least one
    /// block). A restart must use the same line size.
    pub fn with_line_size(
        fast: Arc<dyn Backend>,
        slow: Arc<dyn Backend>,
        mode: CacheMode,
        line_size_bytes: u32,
    ) -> Result<Arc<Self>, CompositionError> {
        let tiers = |message: String| CompositionError::Tiers(message);
        let geometry = slow.geometry();
        let fast_geometry = fast.geometry();
        let block_size_bytes = geometry.block_size_bytes;
        if fast_geometry.block_size_bytes != block_size_bytes {
            return Err(tiers(format!(
                "fast tier has {}-byte blocks but the slow tier has {block_size_bytes}-byte blocks",
                fast_geometry.block_size_bytes
            )));
        }
        if !line_size_bytes.is_power_of_two() || line_size_bytes < block_size_bytes {
            return Err(tiers(format!(
                "cache line {line_size_bytes} bytes is not a power of two multiple of the {block_size_bytes}-byte block"
            )));
        }
        let line_blocks = u64::from(line_size_bytes / block_size_bytes);
        let slot_count = slots_that_fit(fast_geometry.block_count, line_blocks);
        if slot_count == 0 {
            return Err(tiers(format!(
                "fast tier of {} blocks cannot hold a header, metadata and one {line_size_bytes}-byte line",
                fast_geometry.block_count
            )));
        }
        let data_start_lba = (1 + slot_count).div_ceil(line_blocks) * line_blocks;
        let shared = CacheShared {
            line_count: geometry.block_count.div_ceil(line_blocks),
            fast,
            slow,
            mode,
            geometry,
            line_blocks,
            slot_count,
            data_start_lba,
            slots: (0..slot_count).map(|_| AtomicU64::new(0)).collect(),
        };
        recover_or_format(&shared, line_size_bytes)?;
        Ok(Arc::new(Self { shared: Arc::new(shared) }))
    }

    /// Number of cache slots (lines the fast tier holds).
    pub fn slot_count(&self) -> u64 {
        self.shared.slot_count
    }

    /// Slots currently holding dirty data.
    pub fn dirty_slots(&self) -> u64 {
        self.shared.slots.iter().filter(|slot| slot.load(Ordering::Acquire) & DIRTY != 0).count() as u64
    }

    /// Writes every dirty line to the slow tier and flushes it (a Flush on a private
    /// queue), waiting for it.
    pub fn destage(&self) -> Result<(), crate::IoError> {
        let mut queue = self.open_queue();
        run_one(&mut *queue, IoOp::Flush, Vec::new()).map(|_| ())
    }
}

impl Backend for CacheBackend {
    fn geometry(&self) -> Geometry {
        self.shared.geometry
    }

    fn has_volatile_write_cache(&self) -> bool {
        // Write-back holds acknowledged writes on the fast tier until Flush; they survive
        // a restart, but the host must Flush to get them onto the slow tier.
        self.shared.mode == CacheMode::WriteBack
            || self.shared.slow.has_volatile_write_cache()
            || self.shared.fast.has_volatile_write_cache()
    }

    fn kind(&self) -> &'static str {
        match self.shared.mode {
            CacheMode::WriteBack => "cache-write-back",
            CacheMode::WriteThrough => "cache-write-through",
        }
    }

    fn retains_data(&self) -> bool {
        self.shared.slow.retains_data() && self.shared.fast.retains_data()
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(queue::CacheQueue::new(Arc::clone(&self.shared), None))
    }

    fn open_queue_with_waker(&self, waker: &std::task::Waker) -> Box<dyn BackendQueue> {
        Box::new(queue::CacheQueue::new(Arc::clone(&self.shared), Some(waker)))
    }
}

/// Largest slot count s with header + s metadata blocks, rounded up to a line, plus s
/// lines fitting in `fast_blocks`.
fn slots_that_fit(fast_blocks: u64, line_blocks: u64) -> u64 {
    let fits = |slots: u64| (1 + slots).div_ceil(line_blocks) * line_blocks + slots * line_blocks <= fast_blocks;
    let mut slots = fast_blocks / (line_blocks + 1);
    while slots > 0 && !fits(slots) {
        slots -= 1;
    }
    slots
}

/// Runs one request to completion on `queue` (setup and `destage` only, not the data
/// path).
fn run_one(queue: &mut dyn BackendQueue, op: IoOp, buffer: Vec<u8>) -> Result<Vec<u8>, crate::IoError> {
    queue.submit(IoRequest { token: 0, op, buffer });
    let deadline = Instant::now() + SETUP_IO_TIMEOUT;
    let mut completions = Vec::with_capacity(1);
    loop {
        queue.reap(&mut completions);
        if let Some(completion) = completions.pop() {
            return completion.result.map(|()| completion.buffer);
        }
        if Instant::now() > deadline {
            return Err(crate::IoError::Internal);
        }
        std::thread::yield_now();
    }
}

fn header_block(shared: &CacheShared, line_size_bytes: u32) -> Vec<u8> {
    let mut header = vec![0u8; shared.geometry.block_size_bytes as usize];
    header[..16].copy_from_slice(HEADER_MAGIC);
    header[16..20].copy_from_slice(&line_size_bytes.to_le_bytes());
    header[20..28].copy_from_slice(&shared.slot_count.to_le_bytes());
    header[28..36].copy_from_slice(&shared.geometry.block_count.to_le_bytes());
    header[36..40].copy_from_slice(&shared.geometry.block_size_bytes.to_le_bytes());
    header
}

/// Metadata blocks per read while recovering.
const RECOVERY_BATCH_BLOCKS: u64 = 256;

/// Marks `slot` dirty if its metadata block records a dirty line.
fn recover_slot(shared: &CacheShared, slot: u64, block: &[u8]) -> Result<(), CompositionError> {
    let word = |index: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&block[index * 8..index * 8 + 8]);
        u64::from_le_bytes(bytes)
    };
    let (magic, tag, flags) = (word(0), word(1), word(2));
    if magic != META_MAGIC || tag == 0 || flags & 1 == 0 {
        return Ok(());
    }
    // The fast tier is ours, but a damaged one must not make us destage onto a line the
    // slot cannot hold (or beyond the slow tier).
    let line = tag - 1;
    if line >= shared.line_count || line % shared.slot_count != slot {
        return Err(CompositionError::Tiers(format!(
            "cache metadata of slot {slot} names line {line}, which cannot live there"
        )));
    }
    shared.slots[slot as usize].store(tag | DIRTY | PERSISTED, Ordering::Release);
    Ok(())
}

/// Loads the dirty lines recorded by an earlier cache, or formats a fresh fast tier.
fn recover_or_format(shared: &CacheShared, line_size_bytes: u32) -> Result<(), CompositionError> {
    let device_error = |error: crate::IoError| CompositionError::Tiers(format!("fast tier I/O failed: {error}"));
    let block_size = shared.geometry.block_size_bytes as usize;
    let mut queue = shared.fast.open_queue();
    let expected_header = header_block(shared, line_size_bytes);
    let header = run_one(&mut *queue, IoOp::Read { lba: 0, blocks: 1 }, vec![0; block_size]).map_err(device_error)?;
    if header[..16] == HEADER_MAGIC[..] {
        if header != expected_header {
            return Err(CompositionError::Tiers(
                "the fast tier holds cache metadata for a different line size or slow tier; refusing to drop its dirty lines".into(),
            ));
        }
        // Metadata is read in batches: one request per slot would make opening a large
        // fast tier take millions of round trips.
        let mut first_slot = 0;
        while first_slot < shared.slot_count {
            let batch = (shared.slot_count - first_slot).min(RECOVERY_BATCH_BLOCKS);
            let blocks = run_one(
                &mut *queue,
                IoOp::Read { lba: shared.metadata_lba(first_slot), blocks: batch as u32 },
                vec![0; batch as usize * block_size],
            )
            .map_err(device_error)?;
            for (index, block) in blocks.chunks_exact(block_size).enumerate() {
                recover_slot(shared, first_slot + index as u64, block)?;
            }
            first_slot += batch;
        }
        return Ok(());
    }
    // Fresh: every slot invalid on the medium before the header says the area is ours.
    let zeroes = IoOp::WriteZeroes { lba: 1, blocks: shared.slot_count, deallocate: false, force_unit_access: true };
    run_one(&mut *queue, zeroes, Vec::new()).map_err(device_error)?;
    let write = IoOp::Write { lba: 0, blocks: 1, force_unit_access: true };
    run_one(&mut *queue, write, expected_header).map_err(device_error)?;
    Ok(())
}

//! RAID0: striping over N member backends, plus the split/merge engine that RAID0 and
//! thin pool carves share.
//!
//! # Layout
//! The namespace is cut into strips of `strip_size_bytes`; strip `s` lives on member
//! `s % N` at member strip `s / N`. Every member contributes the same number of whole
//! strips (the smallest member, rounded down), so capacity = N x that.
//!
//! # Splitting
//! A read or write is cut at strip boundaries into child requests, one per strip piece,
//! submitted to the members' own queues. The trait moves owned `Vec<u8>` buffers, so a
//! child cannot borrow a slice of its parent's buffer: each child gets a pooled buffer
//! and the data is copied (into it before a write, out of it after a read). That costs one
//! memcpy of the payload for multi-strip I/O; an I/O that falls inside one strip, the
//! common case for small random I/O, hands the parent's buffer straight to the member and
//! copies nothing. Write Zeroes and Deallocate need no buffer and go to each member as a
//! single contiguous range (consecutive strips of one member are contiguous on it).
//! Flush goes to every member. The parent completes when its last child does; the first
//! child error is the parent's result.
//!
//! # Asynchronous members
//! Nothing assumes a member completes inside `submit`: children are tracked in a per-queue
//! table of in-flight parents and merged whenever `reap` sees their completions.
//!
//! # Allocation
//! The parent table, its free list, the spare child buffers and the scratch completion
//! vector all grow to the deepest queue depth reached and are then reused, so the steady
//! state allocates nothing and takes no lock.

use std::sync::Arc;
use std::task::Waker;

use crate::io::validate_request;
use crate::service::Ticket;
use crate::{Backend, BackendQueue, Geometry, IoCompletion, IoError, IoOp, IoRequest};

/// Why a composition (RAID0, pool, cache) cannot be built from the given backends.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompositionError {
    /// No members were given.
    #[error("a RAID0 set needs at least one member")]
    NoMembers,
    /// A member's block size differs from the first member's.
    #[error("member {member} has {member_block_size_bytes}-byte blocks but member 0 has {expected_block_size_bytes}-byte blocks")]
    BlockSizeMismatch {
        /// Index of the offending member in the list given.
        member: usize,
        /// Its block size.
        member_block_size_bytes: u32,
        /// Member 0's block size.
        expected_block_size_bytes: u32,
    },
    /// The strip size is not a power of two or not a multiple of the block size.
    #[error(
        "strip size {strip_size_bytes} bytes is not a power of two multiple of the {block_size_bytes}-byte block size"
    )]
    InvalidStripSize {
        /// The rejected strip size.
        strip_size_bytes: u32,
        /// The members' block size.
        block_size_bytes: u32,
    },
    /// The smallest member holds less than one strip.
    #[error("member {member} ({member_bytes} bytes) is smaller than one {strip_size_bytes}-byte strip")]
    MemberTooSmall {
        /// Index of the smallest member.
        member: usize,
        /// Its capacity.
        member_bytes: u64,
        /// The strip size.
        strip_size_bytes: u32,
    },
    /// The resulting capacity does not fit the geometry's limits.
    #[error("the composed capacity is too large")]
    TooLarge,
    /// The two tiers of a cache differ in a way the cache cannot bridge.
    #[error("{0}")]
    Tiers(String),
}

// ---------------------------------------------------------------------------------------
// The split/merge engine.
// ---------------------------------------------------------------------------------------

/// Where one piece of a parent request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `lba` on member `member`.
    Member { member: usize, lba: u64 },
    /// Nothing backs the piece (thin, unallocated): reads return zeroes, zeroing is a
    /// no-op, writes never see this (they allocate first).
    Zeroes,
}

/// One piece of a parent request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece {
    pub(crate) target: Target,
    pub(crate) blocks: u64,
    /// Offset of the piece inside the parent range, in blocks.
    pub(crate) parent_block_offset: u64,
}

/// What kind of op is being split (zeroing ops may merge pieces per member).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SplitKind {
    Data,
    Zeroing,
}

/// How a composition maps its LBAs onto member LBAs.
pub(crate) trait Layout: Send + Sync + 'static {
    fn geometry(&self) -> Geometry;
    fn member_count(&self) -> usize;
    /// Whether the composition accepts I/O at all (a pool carve being deleted does not).
    fn admit(&self) -> Result<(), IoError> {
        Ok(())
    }
    /// Before a write is split: reserve backing space for the whole range (thin pools),
    /// so a write either gets all its space or fails with NoSpace before any child runs.
    fn prepare_write(&self, _lba: u64, _blocks: u64) -> Result<(), IoError> {
        Ok(())
    }
    /// Before a Flush or a FUA write: `None` when layout metadata (thin mappings) is
    /// durable already, else a ticket finished once it is (and `waker` woken). The
    /// request completes only when its children and this ticket are done. Never blocks.
    fn request_durable_metadata(&self, _waker: Option<&Waker>) -> Option<Ticket<Result<(), IoError>>> {
        None
    }
    /// Visits the pieces of a validated range in order of parent offset.
    fn split(&self, lba: u64, blocks: u64, kind: SplitKind, visit: &mut dyn FnMut(Piece));
}

/// Low 32 bits of a child token: the piece's block offset in the parent (a read/write has
/// at most u32::MAX blocks). Bit 32: the child carries the parent's own buffer.
const DIRECT_FLAG: u64 = 1 << 32;
const SLOT_SHIFT: u32 = 33;

/// One parent request waiting for its children.
struct ParentSlot {
    token: u64,
    op: Option<IoOp>,
    buffer: Vec<u8>,
    outstanding_children: usize,
    /// A save of layout metadata this Flush or FUA write waits for.
    metadata: Option<Ticket<Result<(), IoError>>>,
    result: Result<(), IoError>,
}

/// A queue of a composition: member queues, the parent table and child buffer pool.
pub(crate) struct SplitQueue<L: Layout> {
    layout: Arc<L>,
    members: Vec<Box<dyn BackendQueue>>,
    block_size_bytes: usize,
    parents: Vec<ParentSlot>,
    free_slots: Vec<usize>,
    spare_buffers: Vec<Vec<u8>>,
    child_completions: Vec<IoCompletion>,
    /// Parents that completed without children (errors, all-unallocated reads).
    ready: Vec<IoCompletion>,
    busy_parents: usize,
    /// Slots whose metadata ticket is not collected yet (rare: only a Flush or FUA
    /// write after new thin mappings).
    waiting_metadata: Vec<usize>,
    /// Woken by metadata tickets, when the caller sleeps between reaps.
    waker: Option<Waker>,
}

const INITIAL_DEPTH: usize = 128;

impl<L: Layout> SplitQueue<L> {
    pub(crate) fn new(layout: Arc<L>, members: Vec<Box<dyn BackendQueue>>) -> Self {
        debug_assert_eq!(members.len(), layout.member_count());
        let block_size_bytes = layout.geometry().block_size_bytes as usize;
        Self {
            layout,
            members,
            block_size_bytes,
            parents: Vec::with_capacity(INITIAL_DEPTH),
            free_slots: Vec::with_capacity(INITIAL_DEPTH),
            spare_buffers: Vec::new(),
            child_completions: Vec::with_capacity(INITIAL_DEPTH),
            ready: Vec::with_capacity(INITIAL_DEPTH),
            busy_parents: 0,
            waiting_metadata: Vec::new(),
            waker: None,
        }
    }

    /// A queue whose caller sleeps between reaps: metadata tickets wake `waker`.
    pub(crate) fn with_waker(mut self, waker: &Waker) -> Self {
        self.waker = Some(waker.clone());
        self
    }

    /// Completes the parents whose metadata save finished.
    fn collect_metadata(&mut self, out: &mut Vec<IoCompletion>) {
        let mut index = 0;
        while index < self.waiting_metadata.len() {
            let slot = self.waiting_metadata[index];
            let parent = &mut self.parents[slot];
            let Some(result) = parent.metadata.as_ref().and_then(Ticket::take) else {
                index += 1;
                continue;
            };
            parent.metadata = None;
            if let (Ok(()), Err(error)) = (parent.result, result) {
                parent.result = Err(error);
            }
            self.waiting_metadata.swap_remove(index);
            self.finish_if_done(slot, out);
        }
    }

    fn take_slot(&mut self) -> usize {
        match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.parents.push(ParentSlot {
                    token: 0,
                    op: None,
                    buffer: Vec::new(),
                    outstanding_children: 0,
                    metadata: None,
                    result: Ok(()),
                });
                self.parents.len() - 1
            }
        }
    }

    fn fail(&mut self, token: u64, error: IoError, buffer: Vec<u8>) {
        self.ready.push(IoCompletion { token, result: Err(error), buffer });
    }

    fn submit_child(&mut self, slot: usize, member: usize, child: IoRequest) {
        self.parents[slot].outstanding_children += 1;
        self.members[member].submit(child);
    }

    /// Completes the parent in `slot` if it has no outstanding children.
    fn finish_if_done(&mut self, slot: usize, out: &mut Vec<IoCompletion>) {
        let parent = &mut self.parents[slot];
        if parent.outstanding_children > 0 || parent.metadata.is_some() {
            return;
        }
        let completion =
            IoCompletion { token: parent.token, result: parent.result, buffer: std::mem::take(&mut parent.buffer) };
        parent.op = None;
        parent.result = Ok(());
        self.free_slots.push(slot);
        self.busy_parents -= 1;
        out.push(completion);
    }

    fn submit_data(&mut self, slot: usize, op: IoOp, lba: u64, blocks: u32) {
        let is_write = matches!(op, IoOp::Write { .. });
        let force_unit_access = matches!(op, IoOp::Write { force_unit_access: true, .. });
        // Count pieces first: a single-piece I/O hands the parent buffer on untouched.
        let mut pieces = 0usize;
        let mut single = None;
        self.layout.split(lba, u64::from(blocks), SplitKind::Data, &mut |piece| {
            pieces += 1;
            single = Some(piece);
        });
        if let (1, Some(Piece { target: Target::Member { member, lba: member_lba }, .. })) = (pieces, single) {
            let buffer = std::mem::take(&mut self.parents[slot].buffer);
            let child_op = if is_write {
                IoOp::Write { lba: member_lba, blocks, force_unit_access }
            } else {
                IoOp::Read { lba: member_lba, blocks }
            };
            let token = ((slot as u64) << SLOT_SHIFT) | DIRECT_FLAG;
            self.submit_child(slot, member, IoRequest { token, op: child_op, buffer });
            return;
        }
        let block_size = self.block_size_bytes;
        let layout = Arc::clone(&self.layout);
        layout.split(lba, u64::from(blocks), SplitKind::Data, &mut |piece| {
            let start = piece.parent_block_offset as usize * block_size;
            let len = piece.blocks as usize * block_size;
            match piece.target {
                Target::Zeroes => {
                    // Writes allocated in prepare_write, so only reads get here.
                    self.parents[slot].buffer[start..start + len].fill(0);
                }
                Target::Member { member, lba: member_lba } => {
                    let mut child_buffer = self.spare_buffers.pop().unwrap_or_default();
                    child_buffer.clear();
                    let child_blocks = piece.blocks as u32;
                    let child_op = if is_write {
                        child_buffer.extend_from_slice(&self.parents[slot].buffer[start..start + len]);
                        IoOp::Write { lba: member_lba, blocks: child_blocks, force_unit_access }
                    } else {
                        child_buffer.resize(len, 0);
                        IoOp::Read { lba: member_lba, blocks: child_blocks }
                    };
                    let token = ((slot as u64) << SLOT_SHIFT) | piece.parent_block_offset;
                    self.submit_child(slot, member, IoRequest { token, op: child_op, buffer: child_buffer });
                }
            }
        });
    }

    fn submit_zeroing(&mut self, slot: usize, op: IoOp, lba: u64, blocks: u64) {
        let layout = Arc::clone(&self.layout);
        layout.split(lba, blocks, SplitKind::Zeroing, &mut |piece| {
            if let Target::Member { member, lba: member_lba } = piece.target {
                let child_op = match op {
                    IoOp::WriteZeroes { deallocate, force_unit_access, .. } => {
                        IoOp::WriteZeroes { lba: member_lba, blocks: piece.blocks, deallocate, force_unit_access }
                    }
                    _ => IoOp::Deallocate { lba: member_lba, blocks: piece.blocks },
                };
                let token = (slot as u64) << SLOT_SHIFT;
                self.submit_child(slot, member, IoRequest { token, op: child_op, buffer: Vec::new() });
            }
        });
    }

    fn merge_child(&mut self, child: IoCompletion, out: &mut Vec<IoCompletion>) {
        let slot = (child.token >> SLOT_SHIFT) as usize;
        let parent_block_offset = (child.token & u64::from(u32::MAX)) as usize;
        let Some(parent) = self.parents.get_mut(slot) else {
            debug_assert!(false, "member completed an unknown child token");
            return;
        };
        if parent.result.is_ok() {
            parent.result = child.result;
        }
        parent.outstanding_children -= 1;
        if child.token & DIRECT_FLAG != 0 {
            parent.buffer = child.buffer;
        } else {
            if child.result.is_ok() && matches!(parent.op, Some(IoOp::Read { .. })) {
                let start = parent_block_offset * self.block_size_bytes;
                parent.buffer[start..start + child.buffer.len()].copy_from_slice(&child.buffer);
            }
            if child.buffer.capacity() > 0 {
                self.spare_buffers.push(child.buffer);
            }
        }
        self.finish_if_done(slot, out);
    }
}

impl<L: Layout> BackendQueue for SplitQueue<L> {
    fn submit(&mut self, request: IoRequest) {
        let IoRequest { token, op, buffer } = request;
        let admitted = self.layout.admit();
        if let Err(error) = admitted.and_then(|()| validate_request(&self.layout.geometry(), &op, buffer.len())) {
            self.fail(token, error, buffer);
            return;
        }
        let needs_durable_metadata = match op {
            IoOp::Flush => true,
            IoOp::Write { force_unit_access, .. } | IoOp::WriteZeroes { force_unit_access, .. } => force_unit_access,
            _ => false,
        };
        if let IoOp::Write { lba, blocks, .. } = op {
            if let Err(error) = self.layout.prepare_write(lba, u64::from(blocks)) {
                self.fail(token, error, buffer);
                return;
            }
        }
        // The save and the data go out together; the request completes when both are
        // done (a crash between them leaves either a mapped unit of zeroes or an
        // unmapped unit, which the pool zeroes at its next open: never stale data).
        let metadata =
            if needs_durable_metadata { self.layout.request_durable_metadata(self.waker.as_ref()) } else { None };
        let slot = self.take_slot();
        self.busy_parents += 1;
        if metadata.is_some() {
            self.waiting_metadata.push(slot);
        }
        {
            let parent = &mut self.parents[slot];
            parent.token = token;
            parent.op = Some(op);
            parent.buffer = buffer;
            parent.outstanding_children = 0;
            parent.metadata = metadata;
            parent.result = Ok(());
        }
        match op {
            IoOp::Read { lba, blocks } | IoOp::Write { lba, blocks, .. } => {
                self.submit_data(slot, op, lba, blocks);
            }
            IoOp::Flush => {
                for member in 0..self.members.len() {
                    let child = IoRequest { token: (slot as u64) << SLOT_SHIFT, op: IoOp::Flush, buffer: Vec::new() };
                    self.submit_child(slot, member, child);
                }
            }
            IoOp::WriteZeroes { lba, blocks, .. } | IoOp::Deallocate { lba, blocks } => {
                self.submit_zeroing(slot, op, lba, blocks);
            }
            // Refused by validate_request: never admitted.
            IoOp::CompareAndWrite { .. } => {}
        }
        // No children (empty range, all-unallocated thin read): complete now, via ready
        // so the caller still gets it from reap.
        if self.parents[slot].outstanding_children == 0 {
            let mut ready = std::mem::take(&mut self.ready);
            self.finish_if_done(slot, &mut ready);
            self.ready = ready;
        }
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        out.append(&mut self.ready);
        let mut children = std::mem::take(&mut self.child_completions);
        for member in 0..self.members.len() {
            self.members[member].reap(&mut children);
        }
        for child in children.drain(..) {
            self.merge_child(child, out);
        }
        self.child_completions = children;
        if !self.waiting_metadata.is_empty() {
            self.collect_metadata(out);
        }
    }

    fn in_flight(&self) -> usize {
        self.busy_parents + self.ready.len()
    }

    /// Quiet while every member with requests in flight will wake the caller.
    fn wakes_on_completion(&self) -> bool {
        self.ready.is_empty()
            && (self.waiting_metadata.is_empty() || self.waker.is_some())
            && self.members.iter().all(|member| member.in_flight() == 0 || member.wakes_on_completion())
    }
}

// ---------------------------------------------------------------------------------------
// RAID0.
// ---------------------------------------------------------------------------------------

/// The striping arithmetic, shared by the backend and its queues.
#[derive(Debug)]
pub(crate) struct StripeLayout {
    geometry: Geometry,
    member_count: u64,
    strip_blocks: u64,
}

impl StripeLayout {
    /// Number of member-`member` blocks that lie in parent range `[0, end)`.
    fn member_blocks_before(&self, end: u64, member: u64) -> u64 {
        let row_blocks = self.strip_blocks * self.member_count;
        let row = end / row_blocks;
        let within_row = end % row_blocks;
        let partial = within_row.saturating_sub(member * self.strip_blocks).min(self.strip_blocks);
        row * self.strip_blocks + partial
    }
}

impl Layout for StripeLayout {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn member_count(&self) -> usize {
        self.member_count as usize
    }

    fn split(&self, lba: u64, blocks: u64, kind: SplitKind, visit: &mut dyn FnMut(Piece)) {
        let end = lba + blocks;
        if kind == SplitKind::Zeroing {
            // Each member's share of a range is one contiguous member range.
            for member in 0..self.member_count {
                let first = self.member_blocks_before(lba, member);
                let last = self.member_blocks_before(end, member);
                if last > first {
                    visit(Piece {
                        target: Target::Member { member: member as usize, lba: first },
                        blocks: last - first,
                        parent_block_offset: 0,
                    });
                }
            }
            return;
        }
        let mut current = lba;
        while current < end {
            let strip = current / self.strip_blocks;
            let within_strip = current % self.strip_blocks;
            let piece_blocks = (self.strip_blocks - within_strip).min(end - current);
            visit(Piece {
                target: Target::Member {
                    member: (strip % self.member_count) as usize,
                    lba: (strip / self.member_count) * self.strip_blocks + within_strip,
                },
                blocks: piece_blocks,
                parent_block_offset: current - lba,
            });
            current += piece_blocks;
        }
    }
}

/// Striping over several member backends; see the module docs.
pub struct Raid0Backend {
    layout: Arc<StripeLayout>,
    members: Vec<Arc<dyn Backend>>,
    strip_size_bytes: u32,
    volatile_write_cache: bool,
    retains_data: bool,
}

impl std::fmt::Debug for Raid0Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Raid0Backend")
            .field("geometry", &self.layout.geometry)
            .field("members", &self.members.len())
            .field("strip_size_bytes", &self.strip_size_bytes)
            .finish()
    }
}

impl Raid0Backend {
    /// Stripes over `members` in the given order. All members need the same block size;
    /// the strip is a power of two and a multiple of it.
    pub fn new(members: Vec<Arc<dyn Backend>>, strip_size_bytes: u32) -> Result<Arc<Self>, CompositionError> {
        let first = members.first().ok_or(CompositionError::NoMembers)?;
        let block_size_bytes = first.geometry().block_size_bytes;
        for (index, member) in members.iter().enumerate() {
            let member_block_size_bytes = member.geometry().block_size_bytes;
            if member_block_size_bytes != block_size_bytes {
                return Err(CompositionError::BlockSizeMismatch {
                    member: index,
                    member_block_size_bytes,
                    expected_block_size_bytes: block_size_bytes,
                });
            }
        }
        if !strip_size_bytes.is_power_of_two() || strip_size_bytes < block_size_bytes {
            return Err(CompositionError::InvalidStripSize { strip_size_bytes, block_size_bytes });
        }
        let strip_blocks = u64::from(strip_size_bytes / block_size_bytes);
        let (smallest, smallest_blocks) = members
            .iter()
            .map(|member| member.geometry().block_count)
            .enumerate()
            .min_by_key(|&(_, blocks)| blocks)
            .expect("members is not empty");
        let strips_per_member = smallest_blocks / strip_blocks;
        if strips_per_member == 0 {
            return Err(CompositionError::MemberTooSmall {
                member: smallest,
                member_bytes: members[smallest].geometry().capacity_bytes(),
                strip_size_bytes,
            });
        }
        let block_count = (members.len() as u64)
            .checked_mul(strips_per_member)
            .and_then(|strips| strips.checked_mul(strip_blocks))
            .ok_or(CompositionError::TooLarge)?;
        let geometry = Geometry { block_size_bytes, block_count };
        geometry.validate().map_err(|_| CompositionError::TooLarge)?;
        Ok(Arc::new(Self {
            layout: Arc::new(StripeLayout { geometry, member_count: members.len() as u64, strip_blocks }),
            volatile_write_cache: members.iter().any(|m| m.has_volatile_write_cache()),
            retains_data: members.iter().all(|m| m.retains_data()),
            members,
            strip_size_bytes,
        }))
    }

    /// The strip size this set was built with.
    pub fn strip_size_bytes(&self) -> u32 {
        self.strip_size_bytes
    }

    /// Where parent block `lba` lives: (member index, member LBA). `None` out of range.
    pub fn locate(&self, lba: u64) -> Option<(usize, u64)> {
        if lba >= self.layout.geometry.block_count {
            return None;
        }
        let mut found = None;
        self.layout.split(lba, 1, SplitKind::Data, &mut |piece| {
            if let Target::Member { member, lba } = piece.target {
                found = Some((member, lba));
            }
        });
        found
    }
}

impl Backend for Raid0Backend {
    fn geometry(&self) -> Geometry {
        self.layout.geometry
    }

    fn has_volatile_write_cache(&self) -> bool {
        self.volatile_write_cache
    }

    fn kind(&self) -> &'static str {
        "raid0"
    }

    fn retains_data(&self) -> bool {
        self.retains_data
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        let queues = self.members.iter().map(|member| member.open_queue()).collect();
        Box::new(SplitQueue::new(Arc::clone(&self.layout), queues))
    }

    /// Members that wake the caller's thread do so for the stripe set too.
    fn open_queue_with_waker(&self, waker: &std::task::Waker) -> Box<dyn BackendQueue> {
        let queues = self.members.iter().map(|member| member.open_queue_with_waker(waker)).collect();
        Box::new(SplitQueue::new(Arc::clone(&self.layout), queues))
    }
}

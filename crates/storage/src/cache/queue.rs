//! The cache's queue: each request is a small state machine that claims its slots and
//! then runs a chain of child I/Os on the fast and slow tiers, one at a time, advanced
//! whenever `reap` sees the previous child complete.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{CacheMode, CacheShared, BUSY, DIRTY, PERSISTED, TAG_MASK};
use crate::io::validate_request;
use crate::{BackendQueue, IoCompletion, IoError, IoOp, IoRequest};

/// The child a request is waiting for; decides what happens on its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Child {
    Nothing,
    /// Read hit: piece from the fast tier.
    FastRead,
    /// Write-back hit: piece to the fast tier.
    FastWrite,
    /// Write-through hit: piece to the fast tier, then the same buffer to the slow tier.
    FastWriteThenSlow,
    /// Piece to the slow tier (write-through).
    SlowWrite,
    /// The slot's metadata block (dirty record or invalidation).
    MetaWrite,
    /// Victim line from the fast tier, then to the slow tier.
    DestageRead,
    DestageWrite,
    /// Missing line from the slow tier, then into the slot.
    FillRead,
    FillWrite,
    /// The final zeroing or flush on the slow tier.
    SlowFinal,
    /// Write-back Flush: then the flush of the fast tier.
    FastFinal,
}

/// What [`CacheQueue::step`] decided.
enum Step {
    /// A child was submitted; wait for it.
    Submitted,
    /// Evaluate again (state changed without I/O).
    Again,
    /// Cannot claim a slot now; retry on the next reap.
    Blocked,
    /// The request is complete.
    Done,
}

struct Parent {
    /// In use (not on the free list).
    active: bool,
    token: u64,
    op: IoOp,
    buffer: Vec<u8>,
    result: Result<(), IoError>,
    started: bool,
    /// Claimed slots: `held_count` slots from `held_start`, wrapping.
    held_start: u64,
    held_count: u64,
    /// Reads/writes: the line being worked on. Zeroing and Flush: the slot index.
    cursor: u64,
    child: Child,
    /// The slot word before a dirty record was written, restored if that write fails.
    saved_word: u64,
    final_submitted: bool,
}

pub(super) struct CacheQueue {
    shared: Arc<CacheShared>,
    fast: Box<dyn crate::BackendQueue>,
    slow: Box<dyn crate::BackendQueue>,
    block_size_bytes: usize,
    parents: Vec<Parent>,
    free_parents: Vec<usize>,
    active_parents: usize,
    waiting: Vec<usize>,
    still_waiting: Vec<usize>,
    spare_buffers: Vec<Vec<u8>>,
    children: Vec<IoCompletion>,
    ready: Vec<IoCompletion>,
}

const INITIAL_DEPTH: usize = 128;

impl CacheQueue {
    /// A queue over both tiers; with `waker`, tiers that can wake the caller's thread
    /// are opened so (see `wakes_on_completion`).
    pub(super) fn new(shared: Arc<CacheShared>, waker: Option<&std::task::Waker>) -> Self {
        let open = |backend: &Arc<dyn crate::Backend>| match waker {
            Some(waker) => backend.open_queue_with_waker(waker),
            None => backend.open_queue(),
        };
        Self {
            fast: open(&shared.fast),
            slow: open(&shared.slow),
            block_size_bytes: shared.geometry.block_size_bytes as usize,
            shared,
            parents: Vec::with_capacity(INITIAL_DEPTH),
            free_parents: Vec::with_capacity(INITIAL_DEPTH),
            active_parents: 0,
            waiting: Vec::with_capacity(INITIAL_DEPTH),
            still_waiting: Vec::with_capacity(INITIAL_DEPTH),
            spare_buffers: Vec::new(),
            children: Vec::with_capacity(INITIAL_DEPTH),
            ready: Vec::with_capacity(INITIAL_DEPTH),
        }
    }

    fn word(&self, slot: u64) -> u64 {
        self.shared.slots[slot as usize].load(Ordering::Acquire)
    }

    /// Only the claimer of a slot stores into it, so a plain store keeps the busy bit.
    fn set_word(&self, slot: u64, word: u64) {
        self.shared.slots[slot as usize].store(word | BUSY, Ordering::Release);
    }

    fn try_claim(&self, start: u64, count: u64) -> bool {
        let slot_count = self.shared.slot_count;
        for index in 0..count {
            let slot = &self.shared.slots[((start + index) % slot_count) as usize];
            let mut word = slot.load(Ordering::Acquire);
            loop {
                if word & BUSY != 0 {
                    self.release(start, index);
                    return false;
                }
                match slot.compare_exchange_weak(word, word | BUSY, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(current) => word = current,
                }
            }
        }
        true
    }

    fn release(&self, start: u64, count: u64) {
        let slot_count = self.shared.slot_count;
        for index in 0..count {
            self.shared.slots[((start + index) % slot_count) as usize].fetch_and(!BUSY, Ordering::Release);
        }
    }

    fn take_buffer(&mut self) -> Vec<u8> {
        let mut buffer = self.spare_buffers.pop().unwrap_or_default();
        buffer.clear();
        buffer
    }

    fn recycle(&mut self, buffer: Vec<u8>) {
        if buffer.capacity() > 0 {
            self.spare_buffers.push(buffer);
        }
    }

    /// First and last line of a non-empty range.
    fn lines(&self, lba: u64, blocks: u64) -> (u64, u64) {
        let line_blocks = self.shared.line_blocks;
        (lba / line_blocks, (lba + blocks - 1) / line_blocks)
    }

    /// The current piece of a read/write: (first block, block count) inside `line`.
    fn piece(&self, parent: usize, line: u64) -> Option<(u64, u64)> {
        let (lba, blocks) = self.parents[parent].op.range()?;
        let line_start = line * self.shared.line_blocks;
        let start = lba.max(line_start);
        let end = (lba + blocks).min(line_start + self.shared.line_blocks);
        (start < end).then(|| (start, end - start))
    }

    fn submit_child(&mut self, parent: usize, kind: Child, to_fast: bool, op: IoOp, buffer: Vec<u8>) -> Step {
        self.parents[parent].child = kind;
        let request = IoRequest { token: parent as u64, op, buffer };
        if to_fast {
            self.fast.submit(request);
        } else {
            self.slow.submit(request);
        }
        Step::Submitted
    }

    /// Starts making room in `slot` for another line: destage a dirty victim, record an
    /// invalidation, or fill the slot with `line` from the slow tier.
    fn make_room(&mut self, parent: usize, slot: u64, line: u64) -> Step {
        let shared = Arc::clone(&self.shared);
        let word = self.word(slot);
        if word & DIRTY != 0 {
            let victim = (word & TAG_MASK) - 1;
            let blocks = shared.line_length_blocks(victim);
            let mut buffer = self.take_buffer();
            buffer.resize(blocks as usize * self.block_size_bytes, 0);
            let op = IoOp::Read { lba: shared.slot_lba(slot), blocks: blocks as u32 };
            return self.submit_child(parent, Child::DestageRead, true, op, buffer);
        }
        if word & PERSISTED != 0 {
            // The medium still says "dirty victim": record the invalidation before the
            // slot's data changes, or a restart would destage the new data as the victim.
            self.set_word(slot, PERSISTED);
            self.parents[parent].saved_word = word & !BUSY;
            let mut buffer = self.take_buffer();
            shared.metadata_block(None, &mut buffer);
            return self.meta_write(parent, slot, buffer);
        }
        self.set_word(slot, 0);
        let blocks = shared.line_length_blocks(line);
        let mut buffer = self.take_buffer();
        buffer.resize(blocks as usize * self.block_size_bytes, 0);
        let op = IoOp::Read { lba: line * shared.line_blocks, blocks: blocks as u32 };
        self.submit_child(parent, Child::FillRead, false, op, buffer)
    }

    fn meta_write(&mut self, parent: usize, slot: u64, buffer: Vec<u8>) -> Step {
        let op = IoOp::Write { lba: self.shared.metadata_lba(slot), blocks: 1, force_unit_access: true };
        self.submit_child(parent, Child::MetaWrite, true, op, buffer)
    }

    /// Decides and submits the next child of a read or write.
    fn step_data(&mut self, parent: usize) -> Step {
        let shared = Arc::clone(&self.shared);
        let line = self.parents[parent].cursor;
        let Some((start, blocks)) = self.piece(parent, line) else {
            return Step::Done;
        };
        let slot = line % shared.slot_count;
        let word = self.word(slot);
        let present = word & TAG_MASK == line + 1;
        let IoOp::Write { lba, force_unit_access, .. } = self.parents[parent].op else {
            // Read.
            if !present {
                return self.make_room(parent, slot, line);
            }
            let mut buffer = self.take_buffer();
            buffer.resize(blocks as usize * self.block_size_bytes, 0);
            let op =
                IoOp::Read { lba: shared.slot_lba(slot) + start - line * shared.line_blocks, blocks: blocks as u32 };
            return self.submit_child(parent, Child::FastRead, true, op, buffer);
        };
        let mut buffer = self.take_buffer();
        let from = (start - lba) as usize * self.block_size_bytes;
        let to = from + blocks as usize * self.block_size_bytes;
        if !present && shared.mode == CacheMode::WriteThrough {
            buffer.extend_from_slice(&self.parents[parent].buffer[from..to]);
            let op = IoOp::Write { lba: start, blocks: blocks as u32, force_unit_access };
            return self.submit_child(parent, Child::SlowWrite, false, op, buffer);
        }
        if !present {
            self.recycle(buffer);
            return self.make_room(parent, slot, line);
        }
        if shared.mode == CacheMode::WriteBack && word & DIRTY == 0 {
            if word & PERSISTED != 0 {
                // The medium already records this line dirty (it was destaged since).
                self.set_word(slot, word | DIRTY);
                self.recycle(buffer);
                return Step::Again;
            }
            // Record the line dirty before its data changes on the fast tier.
            self.set_word(slot, word | DIRTY | PERSISTED);
            self.parents[parent].saved_word = word & !BUSY;
            shared.metadata_block(Some(line), &mut buffer);
            return self.meta_write(parent, slot, buffer);
        }
        buffer.extend_from_slice(&self.parents[parent].buffer[from..to]);
        let kind = match shared.mode {
            CacheMode::WriteBack => Child::FastWrite,
            CacheMode::WriteThrough => Child::FastWriteThenSlow,
        };
        let op = IoOp::Write {
            lba: shared.slot_lba(slot) + start - line * shared.line_blocks,
            blocks: blocks as u32,
            force_unit_access,
        };
        self.submit_child(parent, kind, true, op, buffer)
    }

    /// Zeroing: destage and invalidate every claimed slot caching a line in the range,
    /// then zero the range on the slow tier.
    fn step_zeroing(&mut self, parent: usize) -> Step {
        let state = &self.parents[parent];
        let (lba, blocks) = state.op.range().unwrap_or((0, 0));
        if state.cursor < state.held_count {
            let slot = (state.held_start + state.cursor) % self.shared.slot_count;
            let (first_line, last_line) = self.lines(lba, blocks);
            let word = self.word(slot);
            let tag = word & TAG_MASK;
            if tag == 0 || !(first_line..=last_line).contains(&(tag - 1)) {
                self.parents[parent].cursor += 1;
                return Step::Again;
            }
            if word & (DIRTY | PERSISTED) != 0 {
                return self.make_room(parent, slot, tag - 1);
            }
            self.set_word(slot, 0);
            self.parents[parent].cursor += 1;
            return Step::Again;
        }
        self.final_child(parent)
    }

    /// Flush: destage every dirty slot, claiming one at a time, then flush the slow tier.
    fn step_flush(&mut self, parent: usize) -> Step {
        let slot_count = self.shared.slot_count;
        loop {
            let state = &self.parents[parent];
            let slot = state.cursor;
            if slot >= slot_count {
                return self.final_child(parent);
            }
            if state.held_count == 0 {
                let word = self.word(slot);
                // Clean and unclaimed: nothing to destage, no need to claim it.
                if word & (DIRTY | BUSY) == 0 {
                    self.parents[parent].cursor += 1;
                    continue;
                }
                if !self.try_claim(slot, 1) {
                    return Step::Blocked;
                }
                self.parents[parent].held_start = slot;
                self.parents[parent].held_count = 1;
            }
            if self.word(slot) & DIRTY != 0 {
                return self.make_room(parent, slot, u64::MAX);
            }
            self.release(slot, 1);
            self.parents[parent].held_count = 0;
            self.parents[parent].cursor += 1;
        }
    }

    fn final_child(&mut self, parent: usize) -> Step {
        if self.parents[parent].final_submitted {
            return Step::Done;
        }
        self.parents[parent].final_submitted = true;
        let op = self.parents[parent].op;
        self.submit_child(parent, Child::SlowFinal, false, op, Vec::new())
    }

    /// Runs the request until it waits for a child, is blocked, or completes.
    fn advance(&mut self, parent: usize) {
        loop {
            let step = if !self.parents[parent].started {
                if self.try_start(parent) {
                    Step::Again
                } else {
                    Step::Blocked
                }
            } else {
                match self.parents[parent].op {
                    IoOp::Read { .. } | IoOp::Write { .. } => self.step_data(parent),
                    IoOp::Flush => self.step_flush(parent),
                    IoOp::WriteZeroes { .. } | IoOp::Deallocate { .. } => self.step_zeroing(parent),
                    // Refused by validate_request before a parent starts.
                    IoOp::CompareAndWrite { .. } => Step::Blocked,
                }
            };
            match step {
                Step::Submitted => return,
                Step::Again => continue,
                Step::Blocked => {
                    self.still_waiting.push(parent);
                    return;
                }
                Step::Done => {
                    self.finish(parent);
                    return;
                }
            }
        }
    }

    /// Claims the slots of a read, write or zeroing (Flush claims as it goes).
    fn try_start(&mut self, parent: usize) -> bool {
        let op = self.parents[parent].op;
        let (lba, blocks) = op.range().unwrap_or((0, 0));
        let (start, count, cursor) = if blocks == 0 {
            (0, 0, 0)
        } else {
            let (first_line, last_line) = self.lines(lba, blocks);
            let count = (last_line - first_line + 1).min(self.shared.slot_count);
            let cursor = if matches!(op, IoOp::Read { .. } | IoOp::Write { .. }) { first_line } else { 0 };
            (first_line % self.shared.slot_count, count, cursor)
        };
        if !self.try_claim(start, count) {
            return false;
        }
        let state = &mut self.parents[parent];
        state.started = true;
        state.held_start = start;
        state.held_count = count;
        state.cursor = cursor;
        true
    }

    fn finish(&mut self, parent: usize) {
        let (start, count) = (self.parents[parent].held_start, self.parents[parent].held_count);
        self.release(start, count);
        let state = &mut self.parents[parent];
        state.held_count = 0;
        state.active = false;
        let completion =
            IoCompletion { token: state.token, result: state.result, buffer: std::mem::take(&mut state.buffer) };
        self.ready.push(completion);
        self.free_parents.push(parent);
        self.active_parents -= 1;
    }

    fn on_child(&mut self, completion: IoCompletion) {
        let parent = completion.token as usize;
        let kind = std::mem::replace(&mut self.parents[parent].child, Child::Nothing);
        let shared = Arc::clone(&self.shared);
        let slot = match self.parents[parent].op {
            IoOp::Read { .. } | IoOp::Write { .. } => self.parents[parent].cursor % shared.slot_count,
            IoOp::Flush => self.parents[parent].cursor,
            _ => (self.parents[parent].held_start + self.parents[parent].cursor) % shared.slot_count,
        };
        if let Err(error) = completion.result {
            if kind == Child::MetaWrite {
                self.set_word(slot, self.parents[parent].saved_word);
            }
            // Write-through: a failed write leaves the cached line holding data the slow
            // tier may not have (the fast copy was written first) or a torn fast copy.
            // Reads served from it would see a value that vanishes once the line is
            // evicted (found by simulator seed 1_400_107_323): forget the line, so every
            // later read sees what the slow tier holds. No record of it is on the medium
            // (write-through restarts cold), so forgetting it in memory is enough.
            if shared.mode == CacheMode::WriteThrough
                && matches!(kind, Child::FastWriteThenSlow | Child::SlowWrite)
                && matches!(self.parents[parent].op, IoOp::Write { .. })
            {
                let line = self.parents[parent].cursor;
                if self.word(slot) & TAG_MASK == line + 1 {
                    self.set_word(slot, 0);
                }
            }
            self.recycle(completion.buffer);
            self.parents[parent].result = Err(error);
            self.finish(parent);
            return;
        }
        let mut buffer = completion.buffer;
        match kind {
            Child::FastRead => {
                let line = self.parents[parent].cursor;
                if let Some((start, _)) = self.piece(parent, line) {
                    let (lba, _) = self.parents[parent].op.range().unwrap_or((0, 0));
                    let from = (start - lba) as usize * self.block_size_bytes;
                    self.parents[parent].buffer[from..from + buffer.len()].copy_from_slice(&buffer);
                }
                self.parents[parent].cursor += 1;
            }
            Child::FastWrite | Child::SlowWrite => self.parents[parent].cursor += 1,
            Child::FastWriteThenSlow => {
                let line = self.parents[parent].cursor;
                if let (Some((start, blocks)), IoOp::Write { force_unit_access, .. }) =
                    (self.piece(parent, line), self.parents[parent].op)
                {
                    let op = IoOp::Write { lba: start, blocks: blocks as u32, force_unit_access };
                    self.submit_child(parent, Child::SlowWrite, false, op, buffer);
                    return;
                }
            }
            Child::MetaWrite => {
                let word = self.word(slot);
                if word & TAG_MASK == 0 {
                    self.set_word(slot, 0); // The invalidation is on the medium.
                }
            }
            Child::DestageRead => {
                let victim = (self.word(slot) & TAG_MASK) - 1;
                // Durable before the slot counts as clean: an eviction or a zeroing
                // records the slot invalid right after this write, and even a Flush's
                // final slow-tier flush may fail or never run (its queue dropped) while
                // the slot stays clean; a crash would then lose the line (the medium no
                // longer says dirty, the slow tier has older data).
                let op = IoOp::Write {
                    lba: victim * shared.line_blocks,
                    blocks: shared.line_length_blocks(victim) as u32,
                    force_unit_access: true,
                };
                self.submit_child(parent, Child::DestageWrite, false, op, buffer);
                return;
            }
            Child::DestageWrite => {
                let word = self.word(slot);
                self.set_word(slot, word & !DIRTY);
            }
            Child::FillRead => {
                // Only reads and writes fill, and their cursor is the line.
                let line = self.parents[parent].cursor;
                // Write-back: once a write makes the line dirty, the metadata (written
                // with FUA) tells a restart to destage the whole slot; the filled
                // blocks must be on the medium by then, or the slot's older content
                // (another line's data) is destaged over this line.
                let op = IoOp::Write {
                    lba: shared.slot_lba(slot),
                    blocks: shared.line_length_blocks(line) as u32,
                    force_unit_access: shared.mode == CacheMode::WriteBack,
                };
                self.submit_child(parent, Child::FillWrite, true, op, buffer);
                return;
            }
            Child::FillWrite => {
                let line = self.parents[parent].cursor;
                self.set_word(slot, line + 1);
            }
            Child::SlowFinal
                if shared.mode == CacheMode::WriteBack && matches!(self.parents[parent].op, IoOp::Flush) =>
            {
                // A destaged line stays recorded dirty on the fast tier, and a restart
                // serves it from there: the fast copy must be as durable as the slow
                // one, or a crash brings back an older fast copy over flushed data.
                self.submit_child(parent, Child::FastFinal, true, IoOp::Flush, buffer);
                return;
            }
            Child::SlowFinal | Child::FastFinal | Child::Nothing => {}
        }
        buffer.clear();
        self.recycle(buffer);
        self.advance(parent);
    }

    /// Retries every blocked request once; those still blocked park again.
    fn retry_waiting(&mut self) {
        self.waiting.append(&mut self.still_waiting);
        let mut retry = std::mem::take(&mut self.waiting);
        for parent in retry.drain(..) {
            self.advance(parent);
        }
        self.waiting = retry;
        self.waiting.append(&mut self.still_waiting);
    }
}

impl BackendQueue for CacheQueue {
    fn submit(&mut self, request: IoRequest) {
        let IoRequest { token, op, buffer } = request;
        if let Err(error) = validate_request(&self.shared.geometry, &op, buffer.len()) {
            self.ready.push(IoCompletion { token, result: Err(error), buffer });
            return;
        }
        let parent = match self.free_parents.pop() {
            Some(parent) => parent,
            None => {
                self.parents.push(Parent {
                    active: false,
                    token: 0,
                    op: IoOp::Flush,
                    buffer: Vec::new(),
                    result: Ok(()),
                    started: false,
                    held_start: 0,
                    held_count: 0,
                    cursor: 0,
                    child: Child::Nothing,
                    saved_word: 0,
                    final_submitted: false,
                });
                self.parents.len() - 1
            }
        };
        let state = &mut self.parents[parent];
        state.active = true;
        state.token = token;
        state.op = op;
        state.buffer = buffer;
        state.result = Ok(());
        state.started = matches!(op, IoOp::Flush);
        state.held_start = 0;
        state.held_count = 0;
        state.cursor = 0;
        state.child = Child::Nothing;
        state.final_submitted = false;
        self.active_parents += 1;
        // Blocked requests land in still_waiting; move them to the waiting list.
        self.advance(parent);
        self.waiting.append(&mut self.still_waiting);
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        let mut children = std::mem::take(&mut self.children);
        self.fast.reap(&mut children);
        self.slow.reap(&mut children);
        for child in children.drain(..) {
            self.on_child(child);
        }
        self.children = children;
        // Completed children released slots that blocked requests may be waiting for.
        self.retry_waiting();
        out.append(&mut self.ready);
    }

    fn in_flight(&self) -> usize {
        self.active_parents + self.ready.len()
    }

    /// Quiet only while nothing waits for a slot another queue holds (its release
    /// wakes nobody here) and both tiers will wake the caller for what they hold.
    fn wakes_on_completion(&self) -> bool {
        let quiet = |queue: &dyn crate::BackendQueue| queue.in_flight() == 0 || queue.wakes_on_completion();
        self.waiting.is_empty() && self.ready.is_empty() && quiet(&*self.fast) && quiet(&*self.slow)
    }
}

impl Drop for CacheQueue {
    /// A queue dropped with requests in flight must not leave their slots claimed, or
    /// every other queue touching them would wait forever. The tiers' queues go first:
    /// their own drop waits for what the device still holds (a file queue waits for
    /// the kernel), so no child write of ours lands in a slot after another queue
    /// took it over. Then releasing is safe at any step: a half-done destage leaves
    /// the line dirty, a half-done fill leaves the slot invalid, and a write that
    /// never completed may leave either data.
    fn drop(&mut self) {
        drop(std::mem::replace(&mut self.fast, Box::new(Closed)));
        drop(std::mem::replace(&mut self.slow, Box::new(Closed)));
        for parent in &self.parents {
            if parent.active && parent.held_count > 0 {
                self.release(parent.held_start, parent.held_count);
            }
        }
    }
}

/// Stands in for a tier's queue once it is closed (only while the cache queue drops).
struct Closed;

impl crate::BackendQueue for Closed {
    /// Never called: nothing submits once the cache queue is dropping.
    fn submit(&mut self, _request: IoRequest) {}

    fn reap(&mut self, _out: &mut Vec<IoCompletion>) {}

    fn in_flight(&self) -> usize {
        0
    }
}

//! What every block may hold, written down as the hosts see their commands complete,
//! and the checks against it.
//!
//! Each write stamps its blocks with a unique [`WriteTag`] (and the block's own LBA),
//! so a read tells exactly which write it sees, or that it sees garbage. Per block the
//! oracle keeps the values a read may return now (`visible`) and the values that may
//! survive a crash (`durable`):
//! - a write acknowledged without FUA is visible alone, and joins the durable set (the
//!   cache may or may not have written it back);
//! - with FUA it is the one durable value;
//! - a completed Flush makes each block durable as it was visible when the Flush was
//!   submitted (blocks written since then keep their wider set);
//! - a write that failed or whose connection died may or may not have happened: it
//!   joins both sets;
//! - a crash makes the durable set visible.
//!
//! A read may also return a write that was in flight at any time during the read. The
//! workload never has two writes to one block in flight at once, so one `writer` per
//! block is enough.

use std::collections::BTreeMap;

/// Identifies one write; 0 is the all-zeroes block (never written, or zeroed).
pub type WriteTag = u64;

const LBA_SALT: u64 = 0xA076_1D64_78BD_642F;

/// Fills `out` (one block) with `tag`'s content for `lba`.
pub fn fill_block(tag: WriteTag, lba: u64, out: &mut [u8]) {
    if tag == 0 {
        out.fill(0);
        return;
    }
    let mut state = tag ^ lba.wrapping_mul(LBA_SALT);
    for (index, chunk) in out.chunks_mut(8).enumerate() {
        let word = match index {
            0 => tag,
            1 => lba,
            _ => {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            }
        };
        let bytes = word.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// The write a block holds, or why it is none of them.
pub fn decode_block(lba: u64, data: &[u8]) -> Result<WriteTag, String> {
    if data.iter().all(|&byte| byte == 0) {
        return Ok(0);
    }
    let word = |index: usize| -> u64 {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&data[index * 8..index * 8 + 8]);
        u64::from_le_bytes(bytes)
    };
    let (tag, stamped_lba) = (word(0), word(1));
    if stamped_lba != lba {
        return Err(format!("block {lba} holds block {stamped_lba}'s data (write {tag})"));
    }
    let mut expected = vec![0; data.len()];
    fill_block(tag, lba, &mut expected);
    if expected != data {
        return Err(format!("block {lba} is garbled (stamped with write {tag})"));
    }
    Ok(tag)
}

#[derive(Clone, Debug)]
struct BlockModel {
    visible: Vec<WriteTag>,
    durable: Vec<WriteTag>,
    /// The write in flight to this block, if any.
    writer: Option<WriteTag>,
    /// The crash epoch `writer` began in: a crash since then may have dropped it
    /// from a volatile cache although its acknowledgement arrives afterwards (a
    /// completion already on the wire).
    writer_epoch: u64,
    /// Oracle sequence of the last acknowledged change.
    last_change: u64,
    /// Writes begun, with the sequence they began at, kept while a read may need them.
    recent_writes: Vec<(u64, WriteTag)>,
    /// Writes whose host gave up on them while the target may still carry them out
    /// (their connection has not finished on the target side), by link.
    floating: Vec<(u64, WriteTag)>,
    /// Floating writes that settled while `writer` was in flight: they may have
    /// landed after it, so its acknowledgement does not rule them out.
    settled_during_writer: Vec<WriteTag>,
}

impl BlockModel {
    /// `tag` alone, or with writes still floating or that settled while it was in
    /// flight.
    fn only(&self, tag: WriteTag) -> Vec<WriteTag> {
        let mut set = vec![tag];
        for &(_, floating) in &self.floating {
            add(&mut set, floating);
        }
        for &settled in &self.settled_during_writer {
            add(&mut set, settled);
        }
        set
    }
}

fn add(set: &mut Vec<WriteTag>, tag: WriteTag) {
    if !set.contains(&tag) {
        set.push(tag);
    }
}

struct ReadWatch {
    began: u64,
    crash_epoch: u64,
    lba: u64,
    /// Per block: visible values and the writer when the read began.
    allowed_at_start: Vec<Vec<WriteTag>>,
}

/// Identifies a read the oracle watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReadId(u64);

/// The model of every block of one namespace.
pub struct Oracle {
    blocks: Vec<BlockModel>,
    block_bytes: usize,
    sequence: u64,
    crash_epoch: u64,
    reads: BTreeMap<ReadId, ReadWatch>,
}

/// How a write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Successful completion, with or without FUA.
    Acknowledged { force_unit_access: bool },
    /// Failed: it may or may not have happened.
    Uncertain,
    /// Did not happen (the Write of a Compare and Write whose Compare failed).
    NotApplied,
    /// Lost with its connection, which the target may still be carrying out: it may
    /// happen at any time until [`Oracle::settle_link`] for that link.
    Floating {
        /// The link the command went out on.
        link: u64,
    },
}

impl Oracle {
    /// Every block zero and durable.
    pub fn new(block_count: u64, block_bytes: usize) -> Self {
        let block = BlockModel {
            visible: vec![0],
            durable: vec![0],
            writer: None,
            writer_epoch: 0,
            last_change: 0,
            recent_writes: Vec::new(),
            floating: Vec::new(),
            settled_during_writer: Vec::new(),
        };
        Oracle {
            blocks: vec![block; block_count as usize],
            block_bytes,
            sequence: 0,
            crash_epoch: 0,
            reads: BTreeMap::new(),
        }
    }

    fn next_sequence(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    fn range(&self, lba: u64, blocks: u64) -> std::ops::Range<usize> {
        lba as usize..(lba + blocks) as usize
    }

    /// True when no write to any of these blocks is in flight.
    pub fn can_write(&self, lba: u64, blocks: u64) -> bool {
        self.blocks[self.range(lba, blocks)].iter().all(|block| block.writer.is_none())
    }

    /// What each block holds, when the oracle is sure (one possible value, nothing in
    /// flight or floating): what a Compare may expect.
    pub fn certain_values(&self, lba: u64, blocks: u64) -> Option<Vec<WriteTag>> {
        self.blocks[self.range(lba, blocks)]
            .iter()
            .map(|block| {
                let sure = block.visible.len() == 1 && block.writer.is_none() && block.floating.is_empty();
                sure.then(|| block.visible[0])
            })
            .collect()
    }

    /// A write of `tag` (0 for zeroes) to these blocks was submitted.
    pub fn begin_write(&mut self, lba: u64, blocks: u64, tag: WriteTag) {
        let sequence = self.next_sequence();
        let oldest_read = self.reads.values().map(|watch| watch.began).min().unwrap_or(u64::MAX);
        let range = self.range(lba, blocks);
        let epoch = self.crash_epoch;
        for block in &mut self.blocks[range] {
            debug_assert!(block.writer.is_none(), "the workload overlapped two writes");
            block.writer = Some(tag);
            block.writer_epoch = epoch;
            block.recent_writes.retain(|&(began, _)| began >= oldest_read);
            block.recent_writes.push((sequence, tag));
        }
    }

    /// The write of `tag` to these blocks ended.
    pub fn end_write(&mut self, lba: u64, blocks: u64, tag: WriteTag, outcome: WriteOutcome) {
        let sequence = self.next_sequence();
        let range = self.range(lba, blocks);
        let epoch = self.crash_epoch;
        for block in &mut self.blocks[range] {
            let ended_writer = block.writer == Some(tag);
            let crashed_meanwhile = ended_writer && block.writer_epoch != epoch;
            if ended_writer {
                block.writer = None;
            }
            match outcome {
                WriteOutcome::NotApplied => {}
                // Carried out before a crash that came before its acknowledgement
                // arrived, without FUA: the crash may have dropped it. (`crash` made
                // it one of the block's possible values already.)
                WriteOutcome::Acknowledged { force_unit_access: false } if crashed_meanwhile => {
                    add(&mut block.visible, tag);
                    add(&mut block.durable, tag);
                    block.last_change = sequence;
                }
                WriteOutcome::Acknowledged { force_unit_access } => {
                    block.visible = block.only(tag);
                    if force_unit_access {
                        block.durable = block.only(tag);
                    } else {
                        add(&mut block.durable, tag);
                    }
                    block.last_change = sequence;
                }
                WriteOutcome::Uncertain | WriteOutcome::Floating { .. } => {
                    add(&mut block.visible, tag);
                    add(&mut block.durable, tag);
                    block.last_change = sequence;
                    if let WriteOutcome::Floating { link } = outcome {
                        block.floating.push((link, tag));
                    }
                }
            }
            if ended_writer {
                block.settled_during_writer.clear();
            }
        }
    }

    /// A Flush was submitted; pass the answer to [`Oracle::end_flush`] when it succeeds.
    pub fn begin_flush(&mut self) -> u64 {
        self.next_sequence()
    }

    /// The Flush submitted at `began` completed successfully.
    pub fn end_flush(&mut self, began: u64) {
        for block in &mut self.blocks {
            if block.writer.is_none() && block.last_change < began {
                block.durable.clone_from(&block.visible);
            }
        }
    }

    /// A read of these blocks was submitted.
    pub fn begin_read(&mut self, lba: u64, blocks: u64) -> ReadId {
        let began = self.next_sequence();
        let range = self.range(lba, blocks);
        let allowed_at_start = self.blocks[range]
            .iter()
            .map(|block| {
                let mut allowed = block.visible.clone();
                if let Some(writer) = block.writer {
                    add(&mut allowed, writer);
                }
                allowed
            })
            .collect();
        let id = ReadId(began);
        self.reads.insert(id, ReadWatch { began, crash_epoch: self.crash_epoch, lba, allowed_at_start });
        id
    }

    /// The read ended: `data` is what it returned, `None` when it failed. An error
    /// names the first block that holds something no write could have left there.
    pub fn end_read(&mut self, id: ReadId, data: Option<&[u8]>) -> Result<(), String> {
        let Some(watch) = self.reads.remove(&id) else {
            return Err(format!("read {id:?} ended twice"));
        };
        let Some(data) = data else {
            return Ok(());
        };
        let crashed_since = watch.crash_epoch != self.crash_epoch;
        for (index, allowed_at_start) in watch.allowed_at_start.iter().enumerate() {
            let lba = watch.lba + index as u64;
            let found = decode_block(lba, &data[index * self.block_bytes..][..self.block_bytes])?;
            let block = &mut self.blocks[lba as usize];
            let written_during = block.recent_writes.iter().filter(|&&(began, _)| began > watch.began);
            let allowed = allowed_at_start.contains(&found)
                || block.visible.contains(&found)
                || block.writer == Some(found)
                || written_during.clone().any(|&(_, tag)| tag == found)
                || (crashed_since && block.durable.contains(&found));
            if !allowed {
                return Err(format!(
                    "block {lba} read write {found}; allowed {:?} (at start {allowed_at_start:?}, durable {:?})",
                    block.visible, block.durable
                ));
            }
            // Nothing changed the block while the read was out: it holds what was read.
            let untouched = block.writer.is_none()
                && block.floating.is_empty()
                && block.last_change < watch.began
                && written_during.count() == 0;
            if untouched && !crashed_since {
                block.visible = vec![found];
            }
        }
        Ok(())
    }

    /// The target side of `link` is finished: writes that went out on it and floated
    /// have happened or never will.
    pub fn settle_link(&mut self, link: u64) {
        let sequence = self.next_sequence();
        for block in &mut self.blocks {
            if block.floating.iter().any(|&(on, _)| on == link) {
                // It may have landed just now: a read out meanwhile may have missed
                // it, and a Flush begun before may not have covered it.
                block.last_change = sequence;
            }
            let writing = block.writer.is_some();
            let settled_during_writer = &mut block.settled_during_writer;
            block.floating.retain(|&(on, tag)| {
                // It may have landed after the write in flight (another host's, or
                // this host's on another path) was carried out, before that write is
                // acknowledged.
                if on == link && writing {
                    add(settled_during_writer, tag);
                }
                on != link
            });
        }
    }

    /// The target crashed: each block holds one of its durable values, and nothing
    /// floats any more.
    pub fn crash(&mut self) {
        self.crash_epoch += 1;
        for block in &mut self.blocks {
            block.floating.clear();
            block.settled_during_writer.clear();
            if let Some(writer) = block.writer {
                add(&mut block.durable, writer);
            }
            block.visible.clone_from(&block.durable);
        }
    }

    /// Blocks in the namespace.
    pub fn block_count(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Reads still watched.
    pub fn open_reads(&self) -> usize {
        self.reads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: usize = 512;

    fn block(tag: WriteTag, lba: u64) -> Vec<u8> {
        let mut data = vec![0; BLOCK];
        fill_block(tag, lba, &mut data);
        data
    }

    #[test]
    fn blocks_decode_to_their_write() {
        assert_eq!(decode_block(3, &block(77, 3)), Ok(77));
        assert_eq!(decode_block(3, &block(0, 3)), Ok(0));
        assert!(decode_block(4, &block(77, 3)).unwrap_err().contains("block 3's data"));
        let mut garbled = block(77, 3);
        garbled[300] ^= 1;
        assert!(decode_block(3, &garbled).unwrap_err().contains("garbled"));
    }

    #[test]
    fn a_read_after_an_acknowledged_write_must_see_it() {
        let mut oracle = Oracle::new(4, BLOCK);
        oracle.begin_write(1, 1, 5);
        oracle.end_write(1, 1, 5, WriteOutcome::Acknowledged { force_unit_access: false });
        let read = oracle.begin_read(1, 1);
        assert!(oracle.end_read(read, Some(&block(0, 1))).is_err(), "stale data");
        let read = oracle.begin_read(1, 1);
        assert_eq!(oracle.end_read(read, Some(&block(5, 1))), Ok(()));
    }

    #[test]
    fn a_read_during_writes_may_see_any_of_them() {
        let mut oracle = Oracle::new(4, BLOCK);
        let read = oracle.begin_read(0, 1);
        oracle.begin_write(0, 1, 8);
        oracle.end_write(0, 1, 8, WriteOutcome::Acknowledged { force_unit_access: false });
        oracle.begin_write(0, 1, 9);
        oracle.end_write(0, 1, 9, WriteOutcome::Acknowledged { force_unit_access: false });
        assert_eq!(oracle.end_read(read, Some(&block(8, 0))), Ok(()));
    }

    #[test]
    fn a_read_overtaken_by_a_write_does_not_pin_the_old_value() {
        let mut oracle = Oracle::new(2, BLOCK);
        oracle.begin_write(0, 1, 3);
        oracle.end_write(0, 1, 3, WriteOutcome::Acknowledged { force_unit_access: false });
        oracle.begin_write(0, 1, 0);
        let read = oracle.begin_read(0, 1);
        oracle.end_write(0, 1, 0, WriteOutcome::Acknowledged { force_unit_access: false });
        assert_eq!(oracle.end_read(read, Some(&block(3, 0))), Ok(()));
        let read = oracle.begin_read(0, 1);
        assert_eq!(oracle.end_read(read, Some(&block(0, 0))), Ok(()), "the zeroes were acknowledged last");
    }

    #[test]
    fn a_floating_write_may_land_until_its_link_settles() {
        let mut oracle = Oracle::new(1, BLOCK);
        oracle.begin_write(0, 1, 5);
        oracle.end_write(0, 1, 5, WriteOutcome::Floating { link: 9 });
        oracle.begin_write(0, 1, 6);
        oracle.end_write(0, 1, 6, WriteOutcome::Acknowledged { force_unit_access: true });
        let read = oracle.begin_read(0, 1);
        assert_eq!(oracle.end_read(read, Some(&block(5, 0))), Ok(()), "the old write landed late");
        oracle.settle_link(9);
        oracle.begin_write(0, 1, 7);
        oracle.end_write(0, 1, 7, WriteOutcome::Acknowledged { force_unit_access: true });
        let read = oracle.begin_read(0, 1);
        assert!(oracle.end_read(read, Some(&block(5, 0))).is_err());
    }

    #[test]
    fn a_write_acknowledged_after_a_crash_may_have_been_dropped_by_it() {
        // Seed 1200007218: the completion of a write without FUA was on the wire
        // when the target crashed; the crash dropped the write from the disk's cache.
        for survivor in [1, 2] {
            let mut oracle = Oracle::new(4, BLOCK);
            oracle.begin_write(0, 1, 1);
            oracle.end_write(0, 1, 1, WriteOutcome::Acknowledged { force_unit_access: false });
            let flush = oracle.begin_flush();
            oracle.end_flush(flush);
            oracle.begin_write(0, 1, 2);
            oracle.crash();
            oracle.end_write(0, 1, 2, WriteOutcome::Acknowledged { force_unit_access: false });
            let read = oracle.begin_read(0, 1);
            oracle.end_read(read, Some(&block(survivor, 0))).unwrap();
        }
        // With FUA the acknowledgement means it is on the disk, crash or not.
        let mut oracle = Oracle::new(4, BLOCK);
        oracle.begin_write(1, 1, 3);
        oracle.crash();
        oracle.end_write(1, 1, 3, WriteOutcome::Acknowledged { force_unit_access: true });
        let read = oracle.begin_read(1, 1);
        assert!(oracle.end_read(read, Some(&block(0, 1))).is_err());
    }

    #[test]
    fn a_crash_keeps_only_what_was_flushed_or_written_with_fua() {
        let crashed = || {
            let mut oracle = Oracle::new(4, BLOCK);
            oracle.begin_write(0, 2, 1);
            oracle.end_write(0, 2, 1, WriteOutcome::Acknowledged { force_unit_access: false });
            let flush = oracle.begin_flush();
            oracle.end_flush(flush);
            oracle.begin_write(0, 1, 2);
            oracle.end_write(0, 1, 2, WriteOutcome::Acknowledged { force_unit_access: false });
            oracle.begin_write(2, 1, 3);
            oracle.end_write(2, 1, 3, WriteOutcome::Acknowledged { force_unit_access: true });
            oracle.crash();
            oracle
        };
        // Block 0: the flushed write or the later one; block 1: only the flushed one.
        for (lba, tag, ok) in [(0, 1, true), (0, 2, true), (1, 0, false), (1, 1, true), (2, 3, true), (2, 0, false)] {
            let mut oracle = crashed();
            let read = oracle.begin_read(lba, 1);
            assert_eq!(oracle.end_read(read, Some(&block(tag, lba))).is_ok(), ok, "block {lba} write {tag}");
        }
    }

    #[test]
    fn an_uncertain_write_may_or_may_not_be_there() {
        let mut oracle = Oracle::new(2, BLOCK);
        oracle.begin_write(0, 1, 4);
        oracle.end_write(0, 1, 4, WriteOutcome::Uncertain);
        for tag in [0, 4] {
            let read = oracle.begin_read(0, 1);
            assert_eq!(oracle.end_read(read, Some(&block(tag, 0))), Ok(()));
            // The read pinned it down: the other value is no longer possible.
            let read = oracle.begin_read(0, 1);
            assert!(oracle.end_read(read, Some(&block(4 - tag, 0))).is_err());
            oracle.begin_write(0, 1, 4);
            oracle.end_write(0, 1, 4, WriteOutcome::Uncertain);
            oracle.begin_write(0, 1, 0);
            oracle.end_write(0, 1, 0, WriteOutcome::Uncertain);
        }
    }
}

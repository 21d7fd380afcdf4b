//! Offsets and read/write choice per thread, deterministic by seed.

use crate::{JobSpec, Pattern, Rng};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// Read.
    Read,
    /// Write.
    Write,
}

/// One I/O to issue: byte offset and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoPlan {
    /// Read or write.
    pub kind: IoKind,
    /// Byte offset (a multiple of the block size and of `align`).
    pub offset: u64,
    /// Bytes.
    pub length: u32,
}

/// The offsets of one worker thread.
///
/// Random: uniformly chosen block-aligned offsets over the whole region.
/// Sequential: thread `t` of `n` walks slice `t` (`region / n` bytes, rounded down to
/// whole blocks) in order and wraps, so sequential threads never overlap.
#[derive(Clone, Debug)]
pub struct OffsetGenerator {
    pattern: Pattern,
    block: u64,
    read_percent: u8,
    start: u64,
    slots: u64,
    next_slot: u64,
    rng: Rng,
}

impl OffsetGenerator {
    /// The generator of `thread` for `job` on a namespace region of `region` bytes.
    /// `region` must hold at least one block per thread (see [`JobSpec::validate`]).
    pub fn new(job: &JobSpec, thread: u32, region: u64) -> OffsetGenerator {
        let block = u64::from(job.block_size);
        let seed = job.seed ^ (u64::from(thread) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let (start, slots) = match job.pattern {
            Pattern::Random => (0, (region / block).max(1)),
            Pattern::Sequential => {
                let slice = region / u64::from(job.threads.max(1));
                let slots = (slice / block).max(1);
                (u64::from(thread) * slots * block, slots)
            }
        };
        OffsetGenerator {
            pattern: job.pattern,
            block,
            read_percent: job.read_percent,
            start,
            slots,
            next_slot: 0,
            rng: Rng::new(seed),
        }
    }

    /// The next I/O.
    pub fn next_io(&mut self) -> IoPlan {
        let slot = match self.pattern {
            Pattern::Random => self.rng.below(self.slots),
            Pattern::Sequential => {
                let slot = self.next_slot;
                self.next_slot = (self.next_slot + 1) % self.slots;
                slot
            }
        };
        let kind = match self.read_percent {
            100 => IoKind::Read,
            0 => IoKind::Write,
            percent => {
                if self.rng.below(100) < u64::from(percent) {
                    IoKind::Read
                } else {
                    IoKind::Write
                }
            }
        };
        IoPlan { kind, offset: self.start + slot * self.block, length: self.block as u32 }
    }

    /// Byte range this thread touches: `[start, end)`.
    pub fn span(&self) -> (u64, u64) {
        (self.start, self.start + self.slots * self.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_offsets_are_aligned_in_range_and_deterministic() {
        let job = JobSpec::new("r", Pattern::Random, 70, 8192, 4, 4);
        let region = 64 << 20;
        let mut a = OffsetGenerator::new(&job, 1, region);
        let mut b = OffsetGenerator::new(&job, 1, region);
        let mut reads = 0;
        for _ in 0..10_000 {
            let io = a.next_io();
            assert_eq!(io, b.next_io());
            assert_eq!(io.offset % 8192, 0);
            assert!(io.offset + 8192 <= region);
            reads += u32::from(io.kind == IoKind::Read);
        }
        assert!((6_500..7_500).contains(&reads), "{reads}");
        let mut other = OffsetGenerator::new(&job, 2, region);
        assert_ne!(
            (0..8).map(|_| other.next_io()).collect::<Vec<_>>(),
            (0..8).map(|_| a.next_io()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn sequential_threads_get_disjoint_slices_and_wrap() {
        let job = JobSpec::new("s", Pattern::Sequential, 0, 1 << 20, 3, 8);
        let region = 10 << 20;
        let spans: Vec<_> = (0..3).map(|t| OffsetGenerator::new(&job, t, region).span()).collect();
        for pair in spans.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{spans:?}");
        }
        assert!(spans[2].1 <= region);
        let mut generator = OffsetGenerator::new(&job, 1, region);
        let offsets: Vec<u64> = (0..4).map(|_| generator.next_io().offset).collect();
        assert_eq!(offsets, vec![3 << 20, 4 << 20, 5 << 20, 3 << 20]);
        assert!(offsets.iter().all(|_| generator.next_io().kind == IoKind::Write));
    }
}

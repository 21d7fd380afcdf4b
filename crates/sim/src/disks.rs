//! The simulated disks under the namespace, and how its backend is built from them:
//! one disk, RAID0 striping over several, or a cache tier (a fast disk in front of a
//! slow one). The composites are the real storage code, so their crash behaviour
//! (a cache's dirty lines recovered from its fast tier after a restart, a Flush that
//! must reach every member) is checked like the single disk's.

use std::sync::Arc;

use storage::{Backend, CacheBackend, CacheMode, Geometry, Raid0Backend};

use crate::disk::{Canary, DiskCounters, DiskFaults, SimDisk};
use crate::rng::{Rng, SimClock};

/// How the namespace's storage is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageShape {
    /// One disk (a thin pool, when the plan has one, lives on it).
    Disk,
    /// RAID0 over `members` disks, `strip_blocks` blocks per strip.
    Raid0 { members: usize, strip_blocks: u64 },
    /// A cache tier: `slots` lines of `line_blocks` blocks on a fast disk in front of
    /// a slow disk the size of the namespace. Few slots, so lines are evicted (and
    /// dirty ones destaged) all the time.
    Cache { write_back: bool, line_blocks: u64, slots: u64 },
}

impl StorageShape {
    /// Half of the worlds get one disk, a quarter RAID0, a quarter a cache tier.
    pub fn draw(rng: &mut Rng) -> StorageShape {
        match rng.below(4) {
            0 => StorageShape::Raid0 { members: rng.between(2, 3) as usize, strip_blocks: 1 << rng.below(4) },
            1 => StorageShape::Cache {
                write_back: rng.chance(750_000),
                line_blocks: 1 << rng.below(4),
                slots: rng.between(1, 8),
            },
            _ => StorageShape::Disk,
        }
    }

    /// For the plan's line.
    pub fn describe(&self) -> String {
        match *self {
            StorageShape::Disk => String::new(),
            StorageShape::Raid0 { members, strip_blocks } => {
                format!(", RAID0 of {members} disks, {strip_blocks}-block strips")
            }
            StorageShape::Cache { write_back, line_blocks, slots } => format!(
                ", {} cache of {slots} x {line_blocks}-block lines",
                if write_back { "write-back" } else { "write-through" }
            ),
        }
    }
}

/// The disks of one world and the shape built over them.
pub struct SimDisks {
    disks: Vec<SimDisk>,
    shape: StorageShape,
}

impl SimDisks {
    /// Zeroed disks for `shape`, holding at least `blocks` blocks of `block_bytes`
    /// as a namespace. Every disk draws its faults and planted bug from `rng`.
    pub fn new(
        shape: StorageShape,
        block_bytes: u32,
        blocks: u64,
        clock: &SimClock,
        rng: &mut Rng,
        faults: &DiskFaults,
        canary: Option<Canary>,
    ) -> SimDisks {
        let sizes = match shape {
            StorageShape::Disk => vec![blocks],
            StorageShape::Raid0 { members, strip_blocks } => {
                let strips_per_member = blocks.div_ceil(members as u64 * strip_blocks);
                vec![strips_per_member * strip_blocks; members]
            }
            StorageShape::Cache { line_blocks, slots, .. } => {
                // As the cache lays it out: header and one metadata block per slot,
                // rounded up to a line, then the lines.
                let fast_blocks = (1 + slots).div_ceil(line_blocks) * line_blocks + slots * line_blocks;
                vec![fast_blocks, blocks]
            }
        };
        let disks = sizes
            .into_iter()
            .map(|block_count| {
                let geometry = Geometry { block_size_bytes: block_bytes, block_count };
                SimDisk::new(geometry, clock.clone(), rng.fork(), faults.clone(), canary)
            })
            .collect();
        SimDisks { disks, shape }
    }

    /// The single disk a thin pool is made on.
    pub fn first(&self) -> Arc<dyn Backend> {
        self.disks[0].backend()
    }

    /// The namespace's backend over the disks, as a (re)started process builds it: a
    /// cache recovers the dirty lines its fast tier records. Builders wait for device
    /// I/O in a loop: call with the disks instant.
    pub fn backend(&self) -> Result<Arc<dyn Backend>, String> {
        let members: Vec<Arc<dyn Backend>> = self.disks.iter().map(SimDisk::backend).collect();
        match self.shape {
            StorageShape::Disk => Ok(self.first()),
            StorageShape::Raid0 { strip_blocks, .. } => {
                let block_bytes = members[0].geometry().block_size_bytes;
                let strip_bytes = u32::try_from(strip_blocks).unwrap_or(1) * block_bytes;
                Raid0Backend::new(members, strip_bytes)
                    .map(|raid| raid as Arc<dyn Backend>)
                    .map_err(|error| format!("RAID0 cannot be built: {error}"))
            }
            StorageShape::Cache { write_back, line_blocks, .. } => {
                let mode = if write_back { CacheMode::WriteBack } else { CacheMode::WriteThrough };
                let line_bytes = u32::try_from(line_blocks).unwrap_or(1) * members[0].geometry().block_size_bytes;
                let mut members = members.into_iter();
                let (Some(fast), Some(slow)) = (members.next(), members.next()) else {
                    return Err("a cache needs two disks".into());
                };
                CacheBackend::with_line_size(fast, slow, mode, line_bytes)
                    .map(|cache| cache as Arc<dyn Backend>)
                    .map_err(|error| format!("the cache cannot be built: {error}"))
            }
        }
    }

    /// Prints every disk request as it completes (`replay`): the cache's fast disk is
    /// "fast", its slow one "slow", RAID0 members "member N".
    pub fn trace(&self) {
        for (index, disk) in self.disks.iter().enumerate() {
            let name = match (self.shape, index) {
                (StorageShape::Disk, _) => "disk".to_string(),
                (StorageShape::Cache { .. }, 0) => "fast".to_string(),
                (StorageShape::Cache { .. }, _) => "slow".to_string(),
                (StorageShape::Raid0 { .. }, _) => format!("member {index}"),
            };
            disk.trace_as(name);
        }
    }

    /// The process died: every disk keeps or loses what it cached, independently.
    pub fn crash(&self) {
        self.disks.iter().for_each(SimDisk::crash);
    }

    /// Makes every disk answer at once and never fail (true), or behave as drawn.
    pub fn set_instant(&self, instant: bool) {
        self.disks.iter().for_each(|disk| disk.set_instant(instant));
    }

    /// When the next request in flight on any disk completes.
    pub fn next_ready_ns(&self) -> Option<u64> {
        self.disks.iter().filter_map(SimDisk::next_ready_ns).min()
    }

    /// Requests of dropped queues that are due land (see `SimDisk::land_orphans`).
    pub fn land_orphans(&self) {
        self.disks.iter().for_each(SimDisk::land_orphans);
    }

    /// What the disks did, added up.
    pub fn counters(&self) -> DiskCounters {
        let mut total = DiskCounters::default();
        for counters in self.disks.iter().map(SimDisk::counters) {
            total.completed += counters.completed;
            total.injected_errors += counters.injected_errors;
            total.crash_kept_blocks += counters.crash_kept_blocks;
            total.crash_lost_blocks += counters.crash_lost_blocks;
            total.orphans_landed += counters.orphans_landed;
        }
        total
    }
}

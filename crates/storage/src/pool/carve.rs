//! A carved namespace: a view of part of the pool backend, thick (one contiguous extent)
//! or thin (units mapped on first write), served through the shared split/merge queue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use std::task::Waker;

use super::PoolShared;
use crate::raid0::{Layout, Piece, SplitKind, SplitQueue, Target};
use crate::service::Ticket;
use crate::{Backend, BackendQueue, Geometry, GrowError, IoError, LiveGeometry};

/// A thin carve's unit map: entry = physical unit + 1, or 0 while unallocated. Entries
/// only ever go from 0 to a unit (under the pool lock) and are read lock-free.
#[derive(Debug)]
pub(super) struct ThinMap {
    pub(super) units: Box<[AtomicU64]>,
}

impl ThinMap {
    pub(super) fn new(unit_count: u64) -> Self {
        Self { units: (0..unit_count).map(|_| AtomicU64::new(0)).collect() }
    }

    pub(super) fn physical_unit(&self, logical_unit: u64) -> Option<u64> {
        match self.units[logical_unit as usize].load(Ordering::Acquire) {
            0 => None,
            entry => Some(entry - 1),
        }
    }
}

#[derive(Debug)]
pub(super) enum Placement {
    Thick {
        start_lba: u64,
    },
    /// Swapped for a larger copy when the carve grows (under the pool lock, which
    /// every mapping takes too, so no mapping is lost); readers load it lock-free.
    Thin {
        map: ArcSwap<ThinMap>,
    },
}

/// The mapping of one carve; shared by its backend handle and queues.
pub(super) struct CarveLayout {
    /// Grows live ([`super::Pool::grow`]); every queue's range check reads it.
    pub(super) geometry: LiveGeometry,
    pub(super) unit_blocks: u64,
    pub(super) placement: Placement,
    pub(super) pool: Arc<PoolShared>,
    /// Set when the carve is being deleted: later I/O fails instead of touching units
    /// that are about to be handed to someone else.
    pub(super) deleted: Arc<AtomicBool>,
}

impl Layout for CarveLayout {
    fn geometry(&self) -> Geometry {
        self.geometry.get()
    }

    fn member_count(&self) -> usize {
        1
    }

    fn admit(&self) -> Result<(), IoError> {
        if self.deleted.load(Ordering::Acquire) {
            Err(IoError::Internal)
        } else {
            Ok(())
        }
    }

    fn prepare_write(&self, lba: u64, blocks: u64) -> Result<(), IoError> {
        let Placement::Thin { map: shared_map } = &self.placement else {
            return Ok(());
        };
        if blocks == 0 {
            return Ok(());
        }
        let map = shared_map.load();
        let first_unit = lba / self.unit_blocks;
        let last_unit = (lba + blocks - 1) / self.unit_blocks;
        for logical_unit in first_unit..=last_unit {
            // The common case (already mapped) costs one atomic load and no lock.
            if map.physical_unit(logical_unit).is_none() {
                self.pool.allocate_unit(shared_map, logical_unit)?;
            }
        }
        Ok(())
    }

    fn request_durable_metadata(&self, waker: Option<&Waker>) -> Option<Ticket<Result<(), IoError>>> {
        match self.placement {
            Placement::Thick { .. } => None,
            Placement::Thin { .. } => self.pool.request_durable(waker),
        }
    }

    fn split(&self, lba: u64, blocks: u64, _kind: SplitKind, visit: &mut dyn FnMut(Piece)) {
        let map = match &self.placement {
            Placement::Thick { start_lba } => {
                visit(Piece {
                    target: Target::Member { member: 0, lba: start_lba + lba },
                    blocks,
                    parent_block_offset: 0,
                });
                return;
            }
            Placement::Thin { map } => map.load(),
        };
        let unit_blocks = self.unit_blocks;
        let end = lba + blocks;
        let mut current = lba;
        while current < end {
            let unit = current / unit_blocks;
            let within_unit = current % unit_blocks;
            let physical = map.physical_unit(unit);
            let mut piece_blocks = (unit_blocks - within_unit).min(end - current);
            // Merge following units while they continue the same physical run (or are
            // all unallocated), so a large zeroing or sequential I/O stays one child.
            loop {
                let next = current + piece_blocks;
                if next >= end {
                    break;
                }
                let next_unit = next / unit_blocks;
                let continues = match (physical, map.physical_unit(next_unit)) {
                    (None, None) => true,
                    (Some(first), Some(next_physical)) => next_physical == first + (next_unit - unit),
                    _ => false,
                };
                if !continues {
                    break;
                }
                piece_blocks += unit_blocks.min(end - next);
            }
            let target = match physical {
                None => Target::Zeroes,
                Some(physical_unit) => Target::Member { member: 0, lba: physical_unit * unit_blocks + within_unit },
            };
            visit(Piece { target, blocks: piece_blocks, parent_block_offset: current - lba });
            current += piece_blocks;
        }
    }
}

/// The backend handed out by [`super::Pool::get`].
pub(super) struct CarveBackend {
    pub(super) layout: Arc<CarveLayout>,
}

impl Backend for CarveBackend {
    fn geometry(&self) -> Geometry {
        self.layout.geometry.get()
    }

    fn grow(&self, block_count: u64) -> Result<Geometry, GrowError> {
        self.layout.pool.grow(&self.layout, block_count)
    }

    fn has_volatile_write_cache(&self) -> bool {
        // Thin mappings made since the last Flush are volatile too, so a thin carve has
        // a volatile write cache even over a device without one.
        matches!(self.layout.placement, Placement::Thin { .. }) || self.layout.pool.backend.has_volatile_write_cache()
    }

    fn kind(&self) -> &'static str {
        match self.layout.placement {
            Placement::Thick { .. } => "pool-thick",
            Placement::Thin { .. } => "pool-thin",
        }
    }

    fn retains_data(&self) -> bool {
        self.layout.pool.backend.retains_data()
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        let parent = self.layout.pool.backend.open_queue();
        Box::new(SplitQueue::new(Arc::clone(&self.layout), vec![parent]))
    }

    fn open_queue_with_waker(&self, waker: &std::task::Waker) -> Box<dyn BackendQueue> {
        let parent = self.layout.pool.backend.open_queue_with_waker(waker);
        Box::new(SplitQueue::new(Arc::clone(&self.layout), vec![parent]).with_waker(waker))
    }
}

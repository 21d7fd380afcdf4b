//! The shape of a namespace: block size and block count.

use crate::backend::GrowError;

/// Smallest logical block size a backend accepts; NVMe requires at least 512 bytes.
pub const MIN_BLOCK_SIZE_BYTES: u32 = 512;
/// Largest logical block size a backend accepts (LBA data size is 2^LBADS, and hosts in
/// practice stop at 64 KiB).
pub const MAX_BLOCK_SIZE_BYTES: u32 = 65536;

/// Block size and block count of one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size; a power of two in
    /// [`MIN_BLOCK_SIZE_BYTES`, `MAX_BLOCK_SIZE_BYTES`] once validated.
    pub block_size_bytes: u32,
    /// Number of logical blocks (NSZE).
    pub block_count: u64,
}

/// Why a [`Geometry`] (or a backend's tuning parameter) was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// The block size is not a power of two between 512 and 65536 bytes.
    #[error("block size {0} bytes is not a power of two between 512 and 65536")]
    InvalidBlockSize(u32),
    /// A namespace must have at least one block.
    #[error("block count is zero")]
    Empty,
    /// block_size * block_count does not fit in u64 bytes (or in this machine's address
    /// space, for backends that keep the data in memory).
    #[error("capacity of {block_count} blocks of {block_size_bytes} bytes is too large")]
    TooLarge {
        /// The rejected block size.
        block_size_bytes: u32,
        /// The rejected block count.
        block_count: u64,
    },
    /// A backend-specific chunk size is not a power of two in the accepted range.
    #[error("chunk size {0} bytes is not a power of two between 4096 and 1 GiB")]
    InvalidChunkSize(usize),
}

impl Geometry {
    /// Total size in bytes. Saturates instead of overflowing so that calling it on an
    /// unvalidated, hostile geometry cannot panic; [`Geometry::validate`] rejects those.
    pub fn capacity_bytes(&self) -> u64 {
        u64::from(self.block_size_bytes).saturating_mul(self.block_count)
    }

    /// True when `[lba, lba + blocks)` lies inside the device.
    ///
    /// Overflow-safe: written as a subtraction so that a hostile `lba + blocks` that wraps
    /// u64 is still rejected. An empty range (`blocks == 0`) is contained when
    /// `lba <= block_count`.
    pub fn contains(&self, lba: u64, blocks: u64) -> bool {
        blocks <= self.block_count && lba <= self.block_count - blocks
    }

    /// Checks the block size (power of two, 512..=65536), a non-zero block count and that
    /// the capacity in bytes fits u64. Backends call this in their constructors.
    pub fn validate(&self) -> Result<(), GeometryError> {
        let block_size = self.block_size_bytes;
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE_BYTES..=MAX_BLOCK_SIZE_BYTES).contains(&block_size) {
            return Err(GeometryError::InvalidBlockSize(block_size));
        }
        if self.block_count == 0 {
            return Err(GeometryError::Empty);
        }
        if u64::from(block_size).checked_mul(self.block_count).is_none() {
            return Err(self.too_large());
        }
        Ok(())
    }

    /// Byte length of `blocks` blocks, or `None` when it overflows u64.
    pub(crate) fn bytes_for_blocks(&self, blocks: u64) -> Option<u64> {
        u64::from(self.block_size_bytes).checked_mul(blocks)
    }

    /// This geometry grown to `block_count` blocks: the precondition every backend's
    /// [`crate::Backend::grow`] shares. Fewer blocks than now is
    /// [`GrowError::WouldShrink`]; a capacity past 64 bits is [`GrowError::TooLarge`].
    /// The same count is accepted (a repeated resize is a success).
    pub fn grown_to(&self, block_count: u64) -> Result<Geometry, GrowError> {
        if block_count < self.block_count {
            return Err(GrowError::WouldShrink { current_blocks: self.block_count, requested_blocks: block_count });
        }
        let wanted = Geometry { block_count, ..*self };
        if wanted.validate().is_err() {
            return Err(GrowError::TooLarge {
                requested_blocks: block_count,
                reason: "the capacity overflows 64 bits".into(),
            });
        }
        Ok(wanted)
    }

    pub(crate) fn too_large(&self) -> GeometryError {
        GeometryError::TooLarge { block_size_bytes: self.block_size_bytes, block_count: self.block_count }
    }
}

/// The geometry of storage that can grow while it is served (a live resize): the
/// block size is fixed, the block count only ever rises. Queues read it on every
/// request's range check, which costs one atomic load.
#[derive(Debug)]
pub struct LiveGeometry {
    block_size_bytes: u32,
    block_count: std::sync::atomic::AtomicU64,
}

impl LiveGeometry {
    /// Starts at `geometry` (validated by the caller).
    pub fn new(geometry: Geometry) -> LiveGeometry {
        LiveGeometry {
            block_size_bytes: geometry.block_size_bytes,
            block_count: std::sync::atomic::AtomicU64::new(geometry.block_count),
        }
    }

    /// The geometry now. Acquire: a request that sees the grown count also sees
    /// whatever the grower set up before raising it (a larger thin map, say).
    pub fn get(&self) -> Geometry {
        Geometry {
            block_size_bytes: self.block_size_bytes,
            block_count: self.block_count.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Raises the block count to `block_count` (never lowers it); returns the geometry
    /// after. Release pairs with [`LiveGeometry::get`].
    pub fn grow_to(&self, block_count: u64) -> Geometry {
        self.block_count.fetch_max(block_count, std::sync::atomic::Ordering::AcqRel);
        self.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(block_size_bytes: u32, block_count: u64) -> Geometry {
        Geometry { block_size_bytes, block_count }
    }

    #[test]
    fn grown_to_refuses_shrinking_and_overflow_and_accepts_the_same_size() {
        let now = geometry(4096, 100);
        assert_eq!(now.grown_to(100), Ok(now));
        assert_eq!(now.grown_to(150), Ok(geometry(4096, 150)));
        assert_eq!(now.grown_to(99), Err(GrowError::WouldShrink { current_blocks: 100, requested_blocks: 99 }));
        assert!(matches!(
            now.grown_to(u64::MAX / 4096 + 1),
            Err(GrowError::TooLarge { requested_blocks, .. }) if requested_blocks == u64::MAX / 4096 + 1
        ));
        assert_eq!(now.grown_to(u64::MAX / 4096), Ok(geometry(4096, u64::MAX / 4096)));
    }

    #[test]
    fn capacity_is_block_size_times_count() {
        assert_eq!(geometry(512, 8).capacity_bytes(), 4096);
        assert_eq!(geometry(4096, 1 << 18).capacity_bytes(), 1 << 30);
        assert_eq!(geometry(4096, u64::MAX).capacity_bytes(), u64::MAX, "saturates");
    }

    #[test]
    fn contains_accepts_ranges_up_to_the_end() {
        let g = geometry(512, 100);
        assert!(g.contains(0, 100));
        assert!(g.contains(99, 1));
        assert!(g.contains(100, 0), "empty range at the end");
        assert!(!g.contains(100, 1));
        assert!(!g.contains(99, 2));
        assert!(!g.contains(0, 101));
        assert!(!g.contains(101, 0));
    }

    #[test]
    fn contains_rejects_ranges_whose_end_overflows() {
        let g = geometry(512, 100);
        assert!(!g.contains(u64::MAX, 1));
        assert!(!g.contains(1, u64::MAX));
        assert!(!g.contains(u64::MAX, u64::MAX));
        assert!(!g.contains(u64::MAX - 1, 2), "lba + blocks wraps to 0");
        let full = geometry(512, u64::MAX / 512);
        assert!(!full.contains(u64::MAX - 10, 20));
    }

    #[test]
    fn validate_accepts_power_of_two_block_sizes_in_range() {
        for shift in 9..=16 {
            assert_eq!(geometry(1 << shift, 1).validate(), Ok(()));
        }
    }

    #[test]
    fn validate_rejects_bad_block_sizes() {
        for bad in [0, 1, 256, 511, 513, 1000, 3072, 131072, u32::MAX] {
            assert_eq!(geometry(bad, 8).validate(), Err(GeometryError::InvalidBlockSize(bad)));
        }
    }

    #[test]
    fn validate_rejects_empty_and_overflowing_devices() {
        assert_eq!(geometry(512, 0).validate(), Err(GeometryError::Empty));
        assert!(matches!(geometry(4096, u64::MAX).validate(), Err(GeometryError::TooLarge { .. })));
        assert_eq!(geometry(512, u64::MAX / 512).validate(), Ok(()));
    }
}

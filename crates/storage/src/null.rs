//! The null backend: writes are discarded and reads return zeroes. Useful to measure the
//! target's own overhead with no storage cost behind it.

use std::sync::Arc;

use crate::backend::ReadyCompletions;
use crate::io::validate_request;
use crate::{Backend, BackendQueue, Geometry, GeometryError, GrowError, IoCompletion, IoOp, IoRequest, LiveGeometry};

/// A namespace that stores nothing.
#[derive(Debug)]
pub struct NullBackend {
    /// Shared with its queues: it grows live (nothing is stored, so growing is free).
    geometry: Arc<LiveGeometry>,
}

impl NullBackend {
    /// A null namespace of the given shape, ready to be used as an `Arc<dyn Backend>`.
    ///
    /// # Panics
    /// On a geometry that [`Geometry::validate`] rejects; use [`NullBackend::try_new`]
    /// for untrusted ones.
    pub fn new(geometry: Geometry) -> Arc<Self> {
        Self::try_new(geometry).unwrap_or_else(|error| panic!("null backend {geometry:?}: {error}"))
    }

    /// Like [`NullBackend::new`], reporting an invalid geometry instead of panicking.
    pub fn try_new(geometry: Geometry) -> Result<Arc<Self>, GeometryError> {
        geometry.validate()?;
        Ok(Arc::new(Self { geometry: Arc::new(LiveGeometry::new(geometry)) }))
    }
}

impl Backend for NullBackend {
    fn geometry(&self) -> Geometry {
        self.geometry.get()
    }

    fn has_volatile_write_cache(&self) -> bool {
        false
    }

    fn kind(&self) -> &'static str {
        "null"
    }

    fn grow(&self, block_count: u64) -> Result<Geometry, GrowError> {
        let wanted = self.geometry.get().grown_to(block_count)?;
        Ok(self.geometry.grow_to(wanted.block_count))
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(NullQueue { geometry: Arc::clone(&self.geometry), ready: ReadyCompletions::new() })
    }

    fn retains_data(&self) -> bool {
        false
    }
}

struct NullQueue {
    geometry: Arc<LiveGeometry>,
    ready: ReadyCompletions,
}

impl BackendQueue for NullQueue {
    fn submit(&mut self, request: IoRequest) {
        let IoRequest { token, op, mut buffer } = request;
        let result = validate_request(&self.geometry.get(), &op, buffer.len());
        if result.is_ok() {
            if let IoOp::Read { .. } = op {
                // Reads return zeroes, not whatever the caller's recycled buffer held.
                buffer.fill(0);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IoError;

    #[test]
    fn reads_zero_a_dirty_buffer() {
        let backend = NullBackend::new(Geometry { block_size_bytes: 512, block_count: 4 });
        let mut queue = backend.open_queue();
        queue.submit(IoRequest { token: 1, op: IoOp::Read { lba: 0, blocks: 2 }, buffer: vec![0xFF; 1024] });
        assert_eq!(queue.in_flight(), 1);
        let mut out = Vec::new();
        queue.reap(&mut out);
        assert_eq!(queue.in_flight(), 0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].result, Ok(()));
        assert!(out[0].buffer.iter().all(|&byte| byte == 0));
    }

    #[test]
    fn failed_reads_leave_the_buffer_alone() {
        let backend = NullBackend::new(Geometry { block_size_bytes: 512, block_count: 4 });
        let mut queue = backend.open_queue();
        queue.submit(IoRequest { token: 2, op: IoOp::Read { lba: 4, blocks: 1 }, buffer: vec![0xFF; 512] });
        let mut out = Vec::new();
        queue.reap(&mut out);
        assert_eq!(out[0].result, Err(IoError::OutOfRange));
        assert!(out[0].buffer.iter().all(|&byte| byte == 0xFF));
    }

    #[test]
    fn rejects_invalid_geometry() {
        let bad = Geometry { block_size_bytes: 100, block_count: 4 };
        assert_eq!(NullBackend::try_new(bad).unwrap_err(), GeometryError::InvalidBlockSize(100));
    }
}

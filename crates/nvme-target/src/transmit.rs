//! Outgoing PDUs of a connection, gathered into batches that the runtime sends with
//! one vectored write. Headers are encoded into one byte buffer; command data is not
//! copied: the buffer that the backend filled travels in the batch and comes back to
//! the pool once sent, and memory a backend lent (a RAM namespace's own bytes) is sent
//! from where it lies.

use std::ops::Range;

use storage::LentBytes;

/// One contiguous piece of a batch.
#[derive(Clone, Copy, Debug)]
enum Segment {
    /// `headers[start..end]`.
    Header { start: u32, end: u32 },
    /// `buffers[buffer][start..end]`.
    Data { buffer: u32, start: u32, end: u32 },
    /// `lent[lent][start..end]`.
    Lent { lent: u32, start: u32, end: u32 },
}

/// One piece of a batch, in sending order (see [`TransmitBatch::for_each_part`]).
#[derive(Debug)]
pub enum BatchPart<'a> {
    /// Bytes the batch holds (headers, digests, filled buffers).
    Bytes(&'a [u8]),
    /// A range of backend memory the batch holds lent.
    Lent(&'a LentBytes, Range<usize>),
}

/// PDUs queued for sending, in order.
#[derive(Default, Debug)]
pub struct TransmitBatch {
    headers: Vec<u8>,
    buffers: Vec<Vec<u8>>,
    lent: Vec<LentBytes>,
    segments: Vec<Segment>,
    total_bytes: usize,
}

impl TransmitBatch {
    /// An empty batch with room for typical traffic, so steady state never grows it.
    pub fn with_capacity(header_bytes: usize, segments: usize) -> Self {
        TransmitBatch {
            headers: Vec::with_capacity(header_bytes),
            buffers: Vec::with_capacity(segments / 2),
            lent: Vec::with_capacity(segments / 2),
            segments: Vec::with_capacity(segments),
            total_bytes: 0,
        }
    }

    /// Bytes allocated for the data buffers attached to the batch (lent memory is the
    /// backend's, not counted).
    pub fn buffer_bytes(&self) -> u64 {
        self.buffers.iter().map(|buffer| buffer.capacity() as u64).sum()
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.total_bytes == 0
    }

    /// Bytes in the batch.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// Appends header bytes through `encode` (which appends to the header buffer) and
    /// records them as a segment, merged with the previous one when adjacent.
    pub fn push_header_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        let start = self.headers.len();
        encode(&mut self.headers);
        let end = self.headers.len();
        if end == start {
            return;
        }
        self.total_bytes += end - start;
        if let Some(Segment::Header { end: previous_end, .. }) = self.segments.last_mut() {
            if *previous_end as usize == start {
                *previous_end = end as u32;
                return;
            }
        }
        self.segments.push(Segment::Header { start: start as u32, end: end as u32 });
    }

    /// Takes ownership of a data buffer for the lifetime of the batch; returns its index
    /// for `push_data`.
    pub fn attach_buffer(&mut self, buffer: Vec<u8>) -> u32 {
        self.buffers.push(buffer);
        (self.buffers.len() - 1) as u32
    }

    /// The attached buffer `index` (to compute digests over the data being sent).
    pub fn buffer(&self, index: u32) -> &[u8] {
        debug_assert!((index as usize) < self.buffers.len(), "buffer {index} not attached");
        self.buffers.get(index as usize).map_or(&[], Vec::as_slice)
    }

    /// Queues `buffers[index][start..end]` (a range outside the buffer, a bug, is not).
    pub fn push_data(&mut self, index: u32, start: usize, end: usize) {
        let inside = self.buffers.get(index as usize).is_some_and(|buffer| start <= end && end <= buffer.len());
        debug_assert!(inside, "data {start}..{end} outside buffer {index}");
        if inside && end > start {
            self.total_bytes += end - start;
            self.segments.push(Segment::Data { buffer: index, start: start as u32, end: end as u32 });
        }
    }

    /// Holds lent memory for the lifetime of the batch; returns its index for
    /// `push_lent`.
    pub fn attach_lent(&mut self, lent: LentBytes) -> u32 {
        self.lent.push(lent);
        (self.lent.len() - 1) as u32
    }

    /// Queues `lent[index][start..end]` (a range outside the lent memory, a bug, is not).
    pub fn push_lent(&mut self, index: u32, start: usize, end: usize) {
        let inside = self.lent.get(index as usize).is_some_and(|lent| start <= end && end <= lent.len());
        debug_assert!(inside, "lent {start}..{end} outside lent {index}");
        if inside && end > start {
            self.total_bytes += end - start;
            self.segments.push(Segment::Lent { lent: index, start: start as u32, end: end as u32 });
        }
    }

    /// Visits the batch's pieces in sending order (for a vectored send).
    pub fn for_each_part<'a>(&'a self, mut visit: impl FnMut(BatchPart<'a>)) {
        for segment in &self.segments {
            let part = match *segment {
                Segment::Header { start, end } => self.headers.get(start as usize..end as usize).map(BatchPart::Bytes),
                Segment::Data { buffer, start, end } => self
                    .buffers
                    .get(buffer as usize)
                    .and_then(|buffer| buffer.get(start as usize..end as usize))
                    .map(BatchPart::Bytes),
                Segment::Lent { lent, start, end } => {
                    self.lent.get(lent as usize).map(|lent| BatchPart::Lent(lent, start as usize..end as usize))
                }
            };
            // The push methods record only ranges inside what the batch holds.
            debug_assert!(part.is_some(), "segment {segment:?} outside the batch");
            if let Some(part) = part {
                visit(part);
            }
        }
    }

    /// Copies the batch into one contiguous buffer (tests and simulations).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.total_bytes);
        self.for_each_part(|part| match part {
            BatchPart::Bytes(slice) => bytes.extend_from_slice(slice),
            BatchPart::Lent(lent, range) => {
                let start = bytes.len();
                bytes.resize(start + range.len(), 0);
                // `start` is the length before the resize: the new bytes are there.
                if let Some(place) = bytes.get_mut(start..) {
                    lent.copy_to(range, place);
                }
            }
        });
        bytes
    }

    /// Empties the batch for reuse, returning its data buffers to `pool`.
    pub fn recycle(&mut self, pool: &mut BufferPool) {
        self.headers.clear();
        self.segments.clear();
        self.total_bytes = 0;
        self.lent.clear();
        for buffer in self.buffers.drain(..) {
            pool.give(buffer);
        }
    }
}

/// Data buffers of one connection, reused across commands so that steady state
/// allocates nothing. The pool keeps at most `max_kept` buffers, and
/// [`BufferPool::trim_unused`] (once a second) frees those that stayed idle since the
/// last trim, so a connection's memory follows its load rather than its peak.
#[derive(Debug)]
pub struct BufferPool {
    free: Vec<Vec<u8>>,
    max_kept: usize,
    /// The fewest idle buffers since the last trim: that many were not needed.
    low_water: usize,
}

impl BufferPool {
    /// A pool that keeps up to `max_kept` idle buffers.
    pub fn new(max_kept: usize) -> Self {
        // The list grows as buffers come back: a connection that never needed a data
        // buffer holds no room for one.
        BufferPool { free: Vec::new(), max_kept, low_water: 0 }
    }

    /// A buffer of exactly `length` bytes. Its contents are unspecified (the caller
    /// overwrites all of it), which saves clearing on every command.
    pub fn take(&mut self, length: usize) -> Vec<u8> {
        let mut buffer = self.pop();
        if buffer.len() < length {
            buffer.resize(length, 0);
        } else {
            buffer.truncate(length);
        }
        buffer
    }

    /// A buffer of `length` zero bytes.
    pub fn take_zeroed(&mut self, length: usize) -> Vec<u8> {
        let mut buffer = self.pop();
        buffer.clear();
        buffer.resize(length, 0);
        buffer
    }

    fn pop(&mut self) -> Vec<u8> {
        let buffer = self.free.pop().unwrap_or_default();
        self.low_water = self.low_water.min(self.free.len());
        buffer
    }

    /// Frees the idle buffers no command took since the last trim (the low-water
    /// mark of the idle list): a connection that went quiet gives back its buffers,
    /// one under steady load keeps what it cycles through.
    pub fn trim_unused(&mut self) {
        let unused = self.low_water.min(self.free.len());
        // The buffers at the bottom of the list are the ones that sat idle longest.
        self.free.drain(..unused);
        self.low_water = self.free.len();
    }

    /// Idle buffers kept.
    pub fn kept(&self) -> usize {
        self.free.len()
    }

    /// Bytes allocated for the idle buffers kept.
    pub fn kept_bytes(&self) -> u64 {
        self.free.iter().map(|buffer| buffer.capacity() as u64).sum()
    }

    /// Returns a buffer for reuse.
    pub fn give(&mut self, buffer: Vec<u8>) {
        if self.free.len() < self.max_kept && buffer.capacity() > 0 {
            self.free.push(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_keep_order_and_adjacent_headers_merge() {
        let mut batch = TransmitBatch::with_capacity(64, 8);
        batch.push_header_with(|out| out.extend_from_slice(b"ab"));
        batch.push_header_with(|out| out.extend_from_slice(b"cd"));
        let index = batch.attach_buffer(b"0123456789".to_vec());
        batch.push_data(index, 2, 5);
        batch.push_header_with(|out| out.extend_from_slice(b"ef"));
        batch.push_data(index, 5, 10);
        let mut parts = 0;
        batch.for_each_part(|_| parts += 1);
        assert_eq!(parts, 4);
        assert_eq!(batch.to_bytes(), b"abcd234ef56789");
        assert_eq!(batch.total_bytes(), 14);

        let mut pool = BufferPool::new(4);
        batch.recycle(&mut pool);
        assert!(batch.is_empty());
        let reused = pool.take(3);
        assert_eq!(reused.len(), 3);
        assert!(reused.capacity() >= 10);
    }

    #[test]
    fn trimming_frees_what_no_command_needed_since_the_last_trim() {
        let mut pool = BufferPool::new(16);
        // A burst of eight commands in flight, then back to one at a time.
        let burst: Vec<Vec<u8>> = (0..8).map(|_| pool.take(4096)).collect();
        burst.into_iter().for_each(|buffer| pool.give(buffer));
        pool.trim_unused();
        assert_eq!(pool.kept(), 8, "the burst's interval needed all eight");
        for _ in 0..100 {
            let buffer = pool.take(4096);
            pool.give(buffer);
        }
        pool.trim_unused();
        assert_eq!(pool.kept(), 1, "one command at a time needs one buffer");
        pool.trim_unused();
        assert_eq!(pool.kept(), 0, "an idle interval needs none");
        assert_eq!(pool.take(4096).len(), 4096, "and a new command still gets one");
    }
}

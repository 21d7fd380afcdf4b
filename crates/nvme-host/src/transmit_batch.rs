//! What `HostQueue::transmit_batch` produces: the PDUs to send as a list of pieces
//! in wire order. PDU headers, digests, padding and small data are bytes the batch
//! owns; a write's data is a reference to the command's own buffer (shared with
//! its slot through an `Arc`) or to the caller's memory (through the queue's
//! [`WriteSource`]). The driver hands the pieces to one vectored send, so the
//! payload is copied only by the kernel, into the socket.
//!
//! Every reference holds the command's slot buffer, and a command completes only
//! when no batch holds it any more: clearing or dropping a batch once its bytes are
//! sent is what lets the completions waiting on it through.

use std::ops::Range;
use std::sync::Arc;

use crate::WriteSource;

/// Write data shorter than this is copied into the batch's own bytes rather than
/// referenced: an iovec of its own costs the kernel about what copying a few
/// hundred bytes does, and a copied command never waits for its send to finish.
/// Connect data, Dataset Management ranges and reservation keys are this small.
pub(crate) const COPY_DATA_BELOW_BYTES: usize = 512;

/// What a withdrawn source's data is sent as (see [`TransmitSlices`]).
static ZEROES: [u8; 4096] = [0; 4096];

#[derive(Debug)]
enum Segment {
    /// The batch's own bytes from where the previous `Bytes` segment ended up to
    /// `end`.
    Bytes { end: usize },
    /// `range` of a command's own buffer, shared with its slot.
    Buffer { data: Arc<Vec<u8>>, range: Range<usize> },
    /// `range` of the caller's buffer `source`, read through the batch's write
    /// source. `lease` is the command's slot buffer, held only so the command does
    /// not complete (and the caller does not reuse its memory) before the send is
    /// over.
    Source {
        #[allow(dead_code)] // Held for its reference count, never read.
        lease: Arc<Vec<u8>>,
        source: u64,
        range: Range<usize>,
    },
}

/// A command's write data in `range`, found before its PDU header is written (so
/// data that is not there any more stops the PDU before any of it is encoded).
pub(crate) struct DataPiece<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) lease: &'a Arc<Vec<u8>>,
    /// The write source and the buffer it names, for data in the caller's memory.
    pub(crate) source: Option<(&'a Arc<dyn WriteSource>, u64)>,
    pub(crate) range: Range<usize>,
}

/// PDUs ready to send, as pieces in wire order (see the module documentation).
/// Reused from send to send, it allocates nothing once its two vectors have grown.
pub struct TransmitBatch {
    bytes: Vec<u8>,
    segments: Vec<Segment>,
    /// Where the last `Bytes` segment ends: bytes beyond are not in a segment yet.
    covered: usize,
    /// Bytes in `Buffer` and `Source` segments.
    referenced: usize,
    /// The write source `Source` segments read from (the queue's).
    write_source: Option<Arc<dyn WriteSource>>,
    /// Copy all data into `bytes` (the copying `HostQueue::transmit`).
    copy_data: bool,
}

impl Default for TransmitBatch {
    fn default() -> Self {
        TransmitBatch::new()
    }
}

impl std::fmt::Debug for TransmitBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransmitBatch")
            .field("own_bytes", &self.bytes.len())
            .field("referenced_bytes", &self.referenced)
            .field("segments", &self.segments.len())
            .finish()
    }
}

impl TransmitBatch {
    /// An empty batch.
    pub fn new() -> Self {
        TransmitBatch {
            bytes: Vec::new(),
            segments: Vec::new(),
            covered: 0,
            referenced: 0,
            write_source: None,
            copy_data: false,
        }
    }

    /// A batch that copies all data into `bytes`, appending after what is there.
    pub(crate) fn copying(bytes: Vec<u8>) -> Self {
        let covered = bytes.len();
        TransmitBatch { bytes, copy_data: true, covered, ..TransmitBatch::new() }
    }

    /// The bytes of a copying batch.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Bytes to send.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.referenced
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything, keeping the capacity. Drops the batch's references to
    /// commands' data, so call it (or drop the batch) as soon as the send is over:
    /// commands whose response came meanwhile complete only after that.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.segments.clear();
        self.covered = 0;
        self.referenced = 0;
    }

    /// The pieces to send, in order (for one vectored send, or to encrypt).
    pub fn slices(&self) -> TransmitSlices<'_> {
        TransmitSlices { batch: self, next_segment: 0, bytes_start: 0, zero_fill: 0 }
    }

    /// Appends every byte to `out` (tests, and paths that copy anyway).
    pub fn copy_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        for slice in self.slices() {
            out.extend_from_slice(slice);
        }
    }

    /// The batch's own bytes, for PDU headers, padding and digests.
    pub(crate) fn bytes_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// Appends a piece of write data: copied when small (or in a copying batch),
    /// referenced otherwise.
    pub(crate) fn push_data(&mut self, piece: &DataPiece<'_>) {
        if self.copy_data || piece.bytes.len() < COPY_DATA_BELOW_BYTES {
            self.bytes.extend_from_slice(piece.bytes);
            return;
        }
        self.close_bytes();
        let range = piece.range.clone();
        self.referenced += range.len();
        match piece.source {
            None => self.segments.push(Segment::Buffer { data: Arc::clone(piece.lease), range }),
            Some((write_source, source)) => {
                // One queue has one write source: this clones the Arc (a reference
                // count) once per batch's life, not per command.
                if !self.write_source.as_ref().is_some_and(|held| Arc::ptr_eq(held, write_source)) {
                    self.write_source = Some(Arc::clone(write_source));
                }
                self.segments.push(Segment::Source { lease: Arc::clone(piece.lease), source, range });
            }
        }
    }

    /// Ends the current run of own bytes with a segment, so that segments cover
    /// every byte; called before each reference and when the batch is complete.
    pub(crate) fn close_bytes(&mut self) {
        if self.bytes.len() > self.covered {
            self.covered = self.bytes.len();
            self.segments.push(Segment::Bytes { end: self.covered });
        }
    }
}

/// The pieces of a [`TransmitBatch`], in wire order. A write source that no longer
/// has data it lent (it broke the [`WriteSource::data`] contract) gets zeroes in its
/// place rather than a shorter stream: the PDU framing stays intact, and with data
/// digests on the target refuses the data.
pub struct TransmitSlices<'a> {
    batch: &'a TransmitBatch,
    next_segment: usize,
    bytes_start: usize,
    /// Zero bytes still to yield in place of withdrawn data.
    zero_fill: usize,
}

impl<'a> Iterator for TransmitSlices<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.zero_fill > 0 {
            let length = self.zero_fill.min(ZEROES.len());
            self.zero_fill -= length;
            return Some(&ZEROES[..length]);
        }
        let batch = self.batch;
        let segment = batch.segments.get(self.next_segment)?;
        self.next_segment += 1;
        match segment {
            Segment::Bytes { end } => {
                let slice = &batch.bytes[self.bytes_start..*end];
                self.bytes_start = *end;
                Some(slice)
            }
            Segment::Buffer { data, range } => Some(&data[range.clone()]),
            Segment::Source { source, range, .. } => {
                let data = batch.write_source.as_ref().and_then(|write_source| {
                    write_source.data(*source, range.start, range.len()).filter(|data| data.len() == range.len())
                });
                if data.is_none() {
                    tracing::error!(
                        source,
                        bytes = range.len(),
                        "write source withdrew data it had lent; sending zeroes"
                    );
                    self.zero_fill = range.len();
                }
                data.or_else(|| self.next())
            }
        }
    }
}

//! One connection's in-flight vectored send: the batch, its iovec array and the
//! msghdr the kernel reads, all in one heap allocation whose address never
//! changes while a SendMsg operation points at it.

use std::io::IoSlice;
use std::mem::ManuallyDrop;

use crate::SendSource;

/// Linux rejects sendmsg with more iovecs than this (UIO_MAXIOV); longer
/// batches go out in several sends, exactly like a partial send.
const MAX_IOVECS_PER_SEND: usize = 1024;

/// Lives in a `Box` owned by the connection so `header`, `iovecs` and the
/// batch keep their addresses while the kernel uses them. Reused for the
/// connection's whole life: the iovec Vec keeps its capacity, so steady-state
/// sends allocate nothing.
pub struct SendState<B> {
    batch: Option<B>,
    iovecs: Vec<libc::iovec>,
    /// Index of the first iovec with bytes still to send.
    first_unsent: usize,
    remaining_bytes: usize,
    header: libc::msghdr,
}

impl<B: SendSource> SendState<B> {
    pub fn new() -> Box<SendState<B>> {
        Box::new(SendState {
            batch: None,
            iovecs: Vec::new(),
            first_unsent: 0,
            remaining_bytes: 0,
            // SAFETY: msghdr is plain data for which all-zero bytes are valid
            // (null name, null control, zero lengths).
            header: unsafe { std::mem::zeroed() },
        })
    }

    /// Takes ownership of `batch` and builds the iovec array from its slices.
    /// The batch is moved into `self` first, so slices that point into the batch
    /// itself stay valid until the batch leaves again through `take_batch`.
    /// `scratch` is an empty Vec reused across calls so this allocates nothing
    /// once capacities have grown.
    pub fn load(&mut self, batch: B, scratch: &mut Vec<IoSlice<'static>>) {
        debug_assert!(self.batch.is_none(), "a send is already loaded");
        self.iovecs.clear();
        self.first_unsent = 0;
        self.remaining_bytes = 0;
        let batch = self.batch.insert(batch);
        let mut slices: Vec<IoSlice<'_>> = reuse_empty(std::mem::take(scratch));
        batch.io_slices(&mut slices);
        for slice in &slices {
            if !slice.is_empty() {
                self.iovecs.push(libc::iovec { iov_base: slice.as_ptr() as *mut libc::c_void, iov_len: slice.len() });
                self.remaining_bytes += slice.len();
            }
        }
        debug_assert_eq!(self.remaining_bytes, batch.total_len(), "SendSource::total_len disagrees with io_slices");
        *scratch = reuse_empty(slices);
    }

    /// True when no bytes are left to send (also for a zero-length batch).
    pub fn is_done(&self) -> bool {
        self.remaining_bytes == 0
    }

    /// Points the msghdr at the unsent iovecs and returns it for a SendMsg.
    /// The pointer stays valid while `self` is neither moved out of its box,
    /// dropped, nor touched through `load`/`advance`/`take_batch`/`clear`.
    pub fn prepare(&mut self) -> *const libc::msghdr {
        let unsent = &self.iovecs[self.first_unsent..];
        self.header.msg_iov = unsent.as_ptr() as *mut libc::iovec;
        self.header.msg_iovlen = unsent.len().min(MAX_IOVECS_PER_SEND);
        &self.header
    }

    /// Records that the kernel accepted `sent_bytes`; trims the iovec array so
    /// the next `prepare` resumes at the right offset.
    pub fn advance(&mut self, mut sent_bytes: usize) {
        debug_assert!(sent_bytes <= self.remaining_bytes);
        self.remaining_bytes -= sent_bytes.min(self.remaining_bytes);
        while sent_bytes > 0 && self.first_unsent < self.iovecs.len() {
            let iovec = &mut self.iovecs[self.first_unsent];
            if sent_bytes >= iovec.iov_len {
                sent_bytes -= iovec.iov_len;
                self.first_unsent += 1;
            } else {
                // SAFETY: `sent_bytes < iov_len`, so the new base stays inside
                // the same slice of the batch.
                iovec.iov_base = unsafe { iovec.iov_base.cast::<u8>().add(sent_bytes) }.cast();
                iovec.iov_len -= sent_bytes;
                sent_bytes = 0;
            }
        }
    }

    /// Hands the batch back (after a complete send). The caller must not have a
    /// SendMsg in flight that points at this state.
    pub fn take_batch(&mut self) -> Option<B> {
        self.iovecs.clear();
        self.first_unsent = 0;
        self.remaining_bytes = 0;
        self.batch.take()
    }
}

/// Reuses an empty Vec's allocation for slices of a different lifetime.
fn reuse_empty<'from, 'to>(mut slices: Vec<IoSlice<'from>>) -> Vec<IoSlice<'to>> {
    slices.clear();
    let mut slices = ManuallyDrop::new(slices);
    let (pointer, capacity) = (slices.as_mut_ptr(), slices.capacity());
    // SAFETY: the Vec is empty, so no IoSlice with the old lifetime survives;
    // IoSlice<'from> and IoSlice<'to> differ only in lifetime and so have the
    // same size and alignment; the allocation came from the global allocator
    // with exactly this capacity, and ManuallyDrop prevents a double free.
    unsafe { Vec::from_raw_parts(pointer.cast::<IoSlice<'to>>(), 0, capacity) }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Parts(Vec<Vec<u8>>);

    impl SendSource for Parts {
        fn io_slices<'a>(&'a self, out: &mut Vec<IoSlice<'a>>) {
            out.extend(self.0.iter().map(|part| IoSlice::new(part)));
        }
        fn total_len(&self) -> usize {
            self.0.iter().map(Vec::len).sum()
        }
    }

    fn unsent_bytes(state: &mut SendState<Parts>) -> Vec<u8> {
        let header = state.prepare();
        // SAFETY: `header` points at live iovecs describing live batch memory.
        unsafe {
            let header = &*header;
            (0..header.msg_iovlen)
                .flat_map(|i| {
                    let iovec = *header.msg_iov.add(i);
                    std::slice::from_raw_parts(iovec.iov_base as *const u8, iovec.iov_len).to_vec()
                })
                .collect()
        }
    }

    #[test]
    fn partial_sends_resume_at_the_right_byte() {
        let mut scratch = Vec::new();
        let mut state = SendState::new();
        let parts = Parts(vec![vec![1, 2, 3], vec![], vec![4, 5], vec![6, 7, 8, 9]]);
        state.load(parts, &mut scratch);
        assert_eq!(unsent_bytes(&mut state), vec![1, 2, 3, 4, 5, 6, 7, 8, 9]);
        state.advance(2);
        assert_eq!(unsent_bytes(&mut state), vec![3, 4, 5, 6, 7, 8, 9]);
        state.advance(3);
        assert_eq!(unsent_bytes(&mut state), vec![6, 7, 8, 9]);
        assert!(!state.is_done());
        state.advance(4);
        assert!(state.is_done());
        assert_eq!(state.take_batch().unwrap().0.len(), 4);
        assert!(scratch.is_empty() && scratch.capacity() >= 4, "scratch capacity is kept for reuse");
    }

    #[test]
    fn caps_iovecs_per_send() {
        let mut state = SendState::new();
        state.load(Parts(vec![vec![0u8; 1]; 3000]), &mut Vec::new());
        let header = state.prepare();
        // SAFETY: reading a field of the live msghdr.
        assert_eq!(unsafe { (*header).msg_iovlen }, MAX_IOVECS_PER_SEND);
        state.advance(1024);
        state.advance(1024);
        let header = state.prepare();
        // SAFETY: as above.
        assert_eq!(unsafe { (*header).msg_iovlen }, 3000 - 2048);
    }

    #[test]
    fn zero_length_batch_is_done_at_once() {
        let mut state = SendState::new();
        state.load(Parts(vec![vec![]]), &mut Vec::new());
        assert!(state.is_done());
        assert!(state.take_batch().is_some());
    }
}

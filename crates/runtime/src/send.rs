//! One connection's in-flight vectored send: the batch, its iovec array and the
//! msghdr the kernel reads, all in one heap allocation whose address never
//! changes while a SendMsg operation points at it.

use std::marker::PhantomData;
use std::ops::Range;

use storage::LentBytes;

use crate::SendSource;

/// Linux rejects sendmsg with more iovecs than this (UIO_MAXIOV); longer
/// batches go out in several sends, exactly like a partial send.
const MAX_IOVECS_PER_SEND: usize = 1024;

/// The memory one send reads, in order, as a batch describes it to
/// [`SendSource::parts`]: byte slices the batch borrows, and backend memory it holds
/// lent ([`LentBytes`]), so a read's data goes from the namespace to the socket
/// without a copy in between.
pub struct SendParts<'a> {
    iovecs: Vec<libc::iovec>,
    bytes: usize,
    /// Everything pushed is borrowed from the batch for `'a`.
    borrowed: PhantomData<&'a [u8]>,
}

impl<'a> SendParts<'a> {
    fn new(mut iovecs: Vec<libc::iovec>) -> Self {
        iovecs.clear();
        SendParts { iovecs, bytes: 0, borrowed: PhantomData }
    }

    /// Appends bytes the batch holds. Empty slices are skipped.
    pub fn bytes(&mut self, bytes: &'a [u8]) {
        if !bytes.is_empty() {
            self.push(bytes.as_ptr() as usize, bytes.len());
        }
    }

    /// Appends `range` of memory the batch holds lent (clamped to the lent length).
    pub fn lent(&mut self, memory: &'a LentBytes, range: Range<usize>) {
        memory.for_each_piece(range, |address, len| self.push(address, len));
    }

    /// Bytes appended so far.
    pub fn total_len(&self) -> usize {
        self.bytes
    }

    fn push(&mut self, address: usize, len: usize) {
        if len > 0 {
            self.iovecs.push(libc::iovec { iov_base: address as *mut libc::c_void, iov_len: len });
            self.bytes += len;
        }
    }
}

/// An iovec array kept between [`for_each_slice`] calls for its capacity alone: it is
/// empty whenever the caller holds it.
#[derive(Default)]
pub(crate) struct IovecScratch(Vec<libc::iovec>);

// SAFETY: the vector is empty between calls (for_each_slice clears it before it
// returns), so moving it to another thread moves no pointer, only spare capacity.
unsafe impl Send for IovecScratch {}

/// Hands every part of `batch`, in order, to `sink` as a byte slice (the TLS layer
/// encrypts them). `scratch` keeps the iovec array's capacity, so this allocates
/// nothing once it has grown.
pub(crate) fn for_each_slice<B: SendSource>(batch: &B, scratch: &mut IovecScratch, mut sink: impl FnMut(&[u8])) {
    let mut parts = SendParts::new(std::mem::take(&mut scratch.0));
    batch.parts(&mut parts);
    for iovec in &parts.iovecs {
        // SAFETY: every iovec was appended by `SendParts::bytes` or `::lent` from
        // memory `batch` holds for the lifetime of this borrow of it, which outlives
        // the slice (it is only used inside `sink`).
        let slice = unsafe { std::slice::from_raw_parts(iovec.iov_base as *const u8, iovec.iov_len) };
        sink(slice);
    }
    parts.iovecs.clear();
    scratch.0 = parts.iovecs;
}

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

    /// Takes ownership of `batch` and builds the iovec array from its parts.
    /// The batch is moved into `self` first, so parts that point into the batch
    /// itself stay valid until the batch leaves again through `take_batch`; lent
    /// memory stays allocated because the batch holds its [`LentBytes`].
    /// Allocates nothing once the iovec array has grown to the largest batch.
    pub fn load(&mut self, batch: B) {
        debug_assert!(self.batch.is_none(), "a send is already loaded");
        self.first_unsent = 0;
        let batch = self.batch.insert(batch);
        let mut parts = SendParts::new(std::mem::take(&mut self.iovecs));
        batch.parts(&mut parts);
        debug_assert_eq!(parts.bytes, batch.total_len(), "SendSource::total_len disagrees with parts");
        self.remaining_bytes = parts.bytes;
        self.iovecs = parts.iovecs;
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Parts(Vec<Vec<u8>>);

    impl SendSource for Parts {
        fn parts<'a>(&'a self, out: &mut SendParts<'a>) {
            for part in &self.0 {
                out.bytes(part);
            }
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
        let mut state = SendState::new();
        let parts = Parts(vec![vec![1, 2, 3], vec![], vec![4, 5], vec![6, 7, 8, 9]]);
        state.load(parts);
        assert_eq!(unsent_bytes(&mut state), vec![1, 2, 3, 4, 5, 6, 7, 8, 9]);
        state.advance(2);
        assert_eq!(unsent_bytes(&mut state), vec![3, 4, 5, 6, 7, 8, 9]);
        state.advance(3);
        assert_eq!(unsent_bytes(&mut state), vec![6, 7, 8, 9]);
        assert!(!state.is_done());
        state.advance(4);
        assert!(state.is_done());
        assert_eq!(state.take_batch().unwrap().0.len(), 4);
        state.load(Parts(vec![vec![1]]));
        assert!(state.iovecs.capacity() >= 3, "the iovec array keeps its capacity for reuse");
    }

    /// Batches shaped like a host's (a header, then a write's data, many times over,
    /// empty parts among them), sent in pieces cut at random bytes, mid-iovec
    /// included: what the kernel would get is exactly the batch's bytes, in order.
    #[test]
    fn partial_sends_at_random_split_points_send_every_byte_once() {
        let mut state_bits = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |bound: usize| {
            state_bits ^= state_bits << 13;
            state_bits ^= state_bits >> 7;
            state_bits ^= state_bits << 17;
            (state_bits % bound as u64) as usize
        };
        let mut state = SendState::new();
        for round in 0..300 {
            let parts: Vec<Vec<u8>> = (0..1 + next(80))
                .map(|index| {
                    let length = if index % 2 == 0 { 72 } else { [0, 16, 512, 4096, 9000][next(5)] };
                    (0..length).map(|byte| (byte * 31 + index * 7 + round) as u8).collect()
                })
                .collect();
            let expected = parts.concat();
            state.load(Parts(parts));
            let mut sent = Vec::new();
            while !state.is_done() {
                let unsent = unsent_bytes(&mut state);
                let accepted = 1 + next(unsent.len().min(20_000));
                sent.extend_from_slice(&unsent[..accepted]);
                state.advance(accepted);
            }
            assert!(sent == expected, "round {round}: {} bytes sent, {} expected", sent.len(), expected.len());
            assert!(state.take_batch().is_some());
        }
    }

    #[test]
    fn caps_iovecs_per_send() {
        let mut state = SendState::new();
        state.load(Parts(vec![vec![0u8; 1]; 3000]));
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
        state.load(Parts(vec![vec![]]));
        assert!(state.is_done());
        assert!(state.take_batch().is_some());
    }
}

//! Responses queued for one `sendmsg`: PDU headers (and the rare Identify
//! page) copied into one byte buffer, read data referenced in STATIC_DATA, and
//! the iovec list and msghdr the kernel reads while the send is in flight.

use crate::controller::{ResponseSink, STATIC_DATA};

/// An iovec list is at most UIO_MAXIOV (1,024) entries; each static payload
/// takes two (itself and the headers before it), so a batch holds at most this
/// many payloads and further responses wait for the next batch.
const MAX_PAYLOADS_PER_BATCH: usize = 500;

/// Lives in a Box so the addresses handed to the kernel (`message`, and through
/// it `iovecs`) stay put while the connection table grows.
pub struct SendBatch {
    bytes: Vec<u8>,
    /// (position in `bytes` the payload follows, length) per static payload.
    payloads: Vec<(usize, usize)>,
    iovecs: Vec<libc::iovec>,
    message: libc::msghdr,
    total: usize,
    sent: usize,
}

impl SendBatch {
    pub fn new() -> Box<SendBatch> {
        Box::new(SendBatch {
            bytes: Vec::with_capacity(4096),
            payloads: Vec::new(),
            iovecs: Vec::new(),
            // SAFETY: msghdr is plain data; all-zero is a valid empty value.
            message: unsafe { std::mem::zeroed() },
            total: 0,
            sent: 0,
        })
    }

    pub fn is_full(&self) -> bool {
        self.payloads.len() >= MAX_PAYLOADS_PER_BATCH
    }

    pub fn is_finished(&self) -> bool {
        self.sent >= self.total
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.payloads.clear();
        self.iovecs.clear();
        self.total = 0;
        self.sent = 0;
    }

    /// Counts bytes the kernel took (a short send leaves the rest for the next).
    pub fn record_sent(&mut self, bytes: usize) {
        self.sent += bytes;
    }

    /// Builds the iovec list for the bytes not yet sent and returns the msghdr
    /// to pass to IORING_OP_SENDMSG. The batch must not change until that send
    /// completes.
    pub fn prepare(&mut self) -> *const libc::msghdr {
        self.iovecs.clear();
        let mut skip = self.sent;
        let mut position = 0;
        let base = self.bytes.as_ptr();
        let add = |pointer: *const u8, length: usize, skip: &mut usize, iovecs: &mut Vec<libc::iovec>| {
            if *skip >= length {
                *skip -= length;
                return;
            }
            iovecs.push(libc::iovec {
                // The kernel only reads from a send's iovecs; *mut is the C type.
                // SAFETY: *skip < length, so the offset stays inside the region.
                iov_base: unsafe { pointer.add(*skip) } as *mut libc::c_void,
                iov_len: length - *skip,
            });
            *skip = 0;
        };
        for &(at, length) in &self.payloads {
            if at > position {
                // SAFETY: position < at <= bytes.len(): inside `bytes`.
                add(unsafe { base.add(position) }, at - position, &mut skip, &mut self.iovecs);
            }
            add(STATIC_DATA.as_ptr(), length, &mut skip, &mut self.iovecs);
            position = at;
        }
        if self.bytes.len() > position {
            // SAFETY: position < bytes.len(): inside `bytes`.
            add(unsafe { base.add(position) }, self.bytes.len() - position, &mut skip, &mut self.iovecs);
        }
        self.message.msg_iov = self.iovecs.as_mut_ptr();
        self.message.msg_iovlen = self.iovecs.len();
        &self.message
    }

    #[cfg(test)]
    fn flatten_unsent(&mut self) -> Vec<u8> {
        self.prepare();
        let mut out = Vec::new();
        for iovec in &self.iovecs {
            // SAFETY: prepare() pointed every iovec at live bytes of its length.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(iovec.iov_base as *const u8, iovec.iov_len) });
        }
        out
    }
}

impl ResponseSink for SendBatch {
    fn push_bytes(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        self.total += bytes.len();
    }

    fn push_static_data(&mut self, length: usize) {
        self.payloads.push((self.bytes.len(), length));
        self.total += length;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iovecs_interleave_headers_and_static_data_and_resume_after_short_sends() {
        let mut batch = SendBatch::new();
        batch.push_bytes(&[1; 24]);
        batch.push_static_data(4096);
        batch.push_bytes(&[2; 24]);
        batch.push_bytes(&[3; 24]);
        batch.push_static_data(100);
        batch.push_bytes(&[4; 24]);
        let mut expected = vec![1u8; 24];
        expected.extend(&STATIC_DATA[..4096]);
        expected.extend([2u8; 24]);
        expected.extend([3u8; 24]);
        expected.extend(&STATIC_DATA[..100]);
        expected.extend([4u8; 24]);
        assert_eq!(batch.flatten_unsent(), expected);
        assert_eq!(batch.iovecs.len(), 5);
        for sent in [1, 23, 4000, 100, 10, 50] {
            batch.record_sent(sent);
            let done: usize = batch.sent;
            assert_eq!(batch.flatten_unsent(), expected[done..]);
        }
        batch.record_sent(expected.len() - batch.sent);
        assert!(batch.is_finished());
        batch.clear();
        assert!(batch.is_finished() && batch.flatten_unsent().is_empty());
    }
}

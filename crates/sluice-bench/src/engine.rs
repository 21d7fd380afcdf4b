//! I/O engines the workload runner drives: an NVMe/TCP I/O queue of Sluice's host,
//! and a storage backend queue directly (the local baseline, no network).

use std::time::{Duration, Instant};

use nvme_host_client::{commands, CommandQueue, HostCompletion};
use nvme_spec::NamespaceId;
use storage::{BackendQueue, IoCompletion, IoOp, IoRequest};
use workload::{Completion, Engine, IoKind, IoPlan};

/// The data pattern of writes: bytes counting 0..251 (a prime, so blocks differ).
fn pattern(length: usize) -> Vec<u8> {
    (0..length).map(|index| (index % 251) as u8).collect()
}

/// One NVMe/TCP I/O queue (or one per path, multipath). I/Os larger than the
/// controller's MDTS are split into several commands (as the Linux host does) and
/// complete when all of them have.
pub struct NvmeEngine<Q> {
    queue: Q,
    nsid: NamespaceId,
    lba_bytes: u32,
    chunk_bytes: u32,
    /// Per I/O tag: commands still outstanding and the first error.
    pending: Vec<(u32, Option<String>)>,
    read_buffers: Vec<Vec<u8>>,
    write_buffers: Vec<Vec<u8>>,
    completions: Vec<HostCompletion>,
    chunks_per_io: usize,
}

const CHUNK_SHIFT: u32 = 16;

impl<Q: CommandQueue> NvmeEngine<Q> {
    pub fn new(queue: Q, nsid: NamespaceId, lba_bytes: u32, max_transfer: u32, io_bytes: u32) -> NvmeEngine<Q> {
        let chunk_bytes = max_transfer.max(lba_bytes) / lba_bytes * lba_bytes;
        let chunk_bytes = chunk_bytes.min(io_bytes).max(lba_bytes);
        let chunks_per_io = io_bytes.div_ceil(chunk_bytes) as usize;
        let depth = queue.depth();
        NvmeEngine {
            queue,
            nsid,
            lba_bytes,
            chunk_bytes,
            pending: vec![(0, None); depth.max(1)],
            read_buffers: Vec::new(),
            write_buffers: Vec::new(),
            completions: Vec::with_capacity(depth),
            chunks_per_io,
        }
    }

    fn complete(&mut self, completion: HostCompletion, out: &mut Vec<Completion>) {
        let is_write = completion.user_tag & WRITE_TOKEN != 0;
        let tag = ((completion.user_tag & !WRITE_TOKEN) >> CHUNK_SHIFT) as usize;
        let error = if let Some(error) = &completion.transport_error {
            Some(error.to_string())
        } else if !completion.cqe.status.is_success() {
            Some(format!("NVMe status {:?}", completion.cqe.status))
        } else {
            None
        };
        let mut buffer = completion.data;
        if buffer.capacity() > 0 {
            if is_write {
                self.write_buffers.push(buffer);
            } else {
                buffer.clear();
                self.read_buffers.push(buffer);
            }
        }
        let Some(entry) = self.pending.get_mut(tag) else {
            return;
        };
        if entry.1.is_none() {
            entry.1 = error;
        }
        entry.0 = entry.0.saturating_sub(1);
        if entry.0 == 0 {
            out.push(Completion { tag: tag as u64, error: entry.1.take() });
        }
    }
}

impl<Q: CommandQueue> Engine for NvmeEngine<Q> {
    fn capacity(&self) -> usize {
        (self.queue.depth() / self.chunks_per_io).max(1)
    }

    fn submit(&mut self, tag: u64, io: &IoPlan) -> Result<(), String> {
        let chunks = io.length.div_ceil(self.chunk_bytes);
        if let Some(entry) = self.pending.get_mut(tag as usize) {
            *entry = (chunks, None);
        }
        for chunk in 0..chunks {
            let start = u64::from(chunk) * u64::from(self.chunk_bytes);
            let length = (io.length - start as u32).min(self.chunk_bytes);
            let lba = (io.offset + start) / u64::from(self.lba_bytes);
            let blocks = length / self.lba_bytes;
            let mut command = match io.kind {
                IoKind::Read => {
                    let mut command = commands::read(self.nsid, lba, blocks, self.lba_bytes);
                    let mut buffer = self.read_buffers.pop().unwrap_or_default();
                    buffer.clear();
                    buffer.reserve(length as usize);
                    command.data_out = buffer;
                    command
                }
                IoKind::Write => {
                    let mut buffer = self.write_buffers.pop().unwrap_or_default();
                    if buffer.len() != length as usize {
                        buffer = pattern(length as usize);
                    }
                    commands::write(self.nsid, lba, buffer, self.lba_bytes, false)
                }
            };
            command.user_tag = (tag << CHUNK_SHIFT) | u64::from(chunk);
            if io.kind == IoKind::Write {
                command.user_tag |= WRITE_TOKEN;
            }
            self.queue.submit(command).map_err(|error| format!("submit failed: {error}"))?;
        }
        Ok(())
    }

    fn reap(&mut self, min: usize, timeout: Duration, out: &mut Vec<Completion>) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let before = out.len();
        loop {
            let mut completions = std::mem::take(&mut self.completions);
            let left = deadline.saturating_duration_since(Instant::now());
            let result = self.queue.reap(1, left, &mut completions);
            for completion in completions.drain(..) {
                self.complete(completion, out);
            }
            self.completions = completions;
            result.map_err(|error| format!("I/O queue failed: {error}"))?;
            if out.len() - before >= min || Instant::now() >= deadline || self.queue.in_flight() == 0 {
                return Ok(());
            }
        }
    }
}

/// A backend queue used directly: the workload without the network.
pub struct LocalEngine {
    queue: Box<dyn BackendQueue>,
    lba_bytes: u32,
    depth: usize,
    read_buffers: Vec<Vec<u8>>,
    write_buffers: Vec<Vec<u8>>,
    completions: Vec<IoCompletion>,
}

impl LocalEngine {
    pub fn new(queue: Box<dyn BackendQueue>, lba_bytes: u32, depth: usize) -> LocalEngine {
        LocalEngine {
            queue,
            lba_bytes,
            depth,
            read_buffers: Vec::new(),
            write_buffers: Vec::new(),
            completions: Vec::with_capacity(depth),
        }
    }
}

const WRITE_TOKEN: u64 = 1 << 63;

impl Engine for LocalEngine {
    fn capacity(&self) -> usize {
        self.depth
    }

    fn submit(&mut self, tag: u64, io: &IoPlan) -> Result<(), String> {
        let lba = io.offset / u64::from(self.lba_bytes);
        let blocks = io.length / self.lba_bytes;
        let (op, buffer, token) = match io.kind {
            IoKind::Read => {
                let mut buffer = self.read_buffers.pop().unwrap_or_default();
                buffer.resize(io.length as usize, 0);
                (IoOp::Read { lba, blocks }, buffer, tag)
            }
            IoKind::Write => {
                let mut buffer = self.write_buffers.pop().unwrap_or_default();
                if buffer.len() != io.length as usize {
                    buffer = pattern(io.length as usize);
                }
                (IoOp::Write { lba, blocks, force_unit_access: false }, buffer, tag | WRITE_TOKEN)
            }
        };
        self.queue.submit(IoRequest { token, op, buffer });
        Ok(())
    }

    fn reap(&mut self, min: usize, timeout: Duration, out: &mut Vec<Completion>) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut got = 0;
        loop {
            self.queue.reap(&mut self.completions);
            for completion in self.completions.drain(..) {
                if completion.token & WRITE_TOKEN != 0 {
                    self.write_buffers.push(completion.buffer);
                } else {
                    self.read_buffers.push(completion.buffer);
                }
                got += 1;
                out.push(Completion {
                    tag: completion.token & !WRITE_TOKEN,
                    error: completion.result.err().map(|error| error.to_string()),
                });
            }
            if got >= min || Instant::now() >= deadline || self.queue.in_flight() == 0 {
                return Ok(());
            }
            std::thread::yield_now();
        }
    }
}

//! The request layer between the C calls and one host I/O queue, without any unsafe
//! or C types: it splits a request larger than the maximum data transfer size into
//! several NVMe commands, holds commands back while the queue is full (a backlog that
//! drains as completions arrive), copies read data into the caller's buffer when the
//! command completes, and merges the commands' statuses into one completion per
//! request.
//!
//! Every accepted request produces exactly one completion, also when the connection
//! fails (then with an error), and nothing writes to a read buffer except
//! [`QueueCore::reap`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use nvme_host::{HostCommand, HostCompletion};
use nvme_spec::Status;

use crate::client;
use crate::error::{FfiError, FfiResult};

/// What the request layer needs from an I/O queue (the client's `IoQueue`; a fake in
/// the tests).
pub trait CommandQueue {
    fn depth(&self) -> usize;
    fn in_flight(&self) -> usize;
    /// Sends one command. An error with [`is_fatal`] errno means the queue is gone.
    fn submit(&mut self, command: HostCommand) -> FfiResult<()>;
    /// Waits up to `timeout` for at least `min` completions, appending them to `out`.
    fn reap(&mut self, min: usize, timeout: Duration, out: &mut Vec<HostCompletion>) -> FfiResult<usize>;
    /// Writes the data of reads that name a destination through `destination` as it
    /// arrives (their completions then carry no data). False: not supported, reads
    /// come back with their data as usual.
    fn set_read_destination(&mut self, destination: std::sync::Arc<dyn nvme_host::ReadDestination>) -> bool {
        let _ = destination;
        false
    }
    /// Sends the data of writes that name a source from the memory `source` lends.
    /// False: not supported, writes must carry their data.
    fn set_write_source(&mut self, source: std::sync::Arc<dyn nvme_host::WriteSource>) -> bool {
        let _ = source;
        false
    }
}

/// Is an error from [`CommandQueue::submit`] the end of the queue (connection lost,
/// controller gone) rather than a problem with one command?
pub fn is_fatal(error: &FfiError) -> bool {
    !matches!(error.errno, libc::EINVAL | libc::E2BIG | libc::EAGAIN | libc::EOVERFLOW | libc::ERANGE)
}

/// Size and block size of a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub blocks: u64,
    pub block_size: u32,
}

/// The outcome of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub user_tag: u64,
    /// First non-success NVMe status of the request's commands (success otherwise).
    pub status: Status,
    /// 0, or a negative errno: -EIO for an NVMe error status, the transport's error
    /// when the queue failed, -EPROTO for a malformed completion.
    pub error: i32,
}

/// Most requests outstanding on one queue (the slot index has 16 bits in the tag).
pub const MAX_REQUESTS: usize = u16::MAX as usize;
/// Most NVMe commands one request is split into (the chunk index has 16 bits).
pub const MAX_COMMANDS_PER_REQUEST: u64 = 1 << 16;
/// NLB is a 16-bit 0's based field: 65536 blocks per read or write command at most.
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;
/// One Dataset Management range covers at most u32::MAX blocks; a command carries at
/// most 256 ranges.
const MAX_DSM_RANGES: u64 = 256;
/// Spare write buffers kept for reuse, beyond the queue depth.
const POOL_SLACK: usize = 16;

#[derive(Debug)]
enum Kind {
    /// `addr` is the caller's buffer, kept as an address: only `reap` writes to it,
    /// through the caller-supplied [`ReadSink`].
    Read {
        addr: usize,
        total_bytes: usize,
        chunk_bytes: usize,
    },
    Other,
}

#[derive(Debug)]
struct Request {
    user_tag: u64,
    kind: Kind,
    /// Commands not yet completed.
    pending: u32,
    status: Status,
    error: i32,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    request: Option<Request>,
}

/// Where completed read data goes: `(address, offset, bytes)`; the caller of `reap`
/// supplies it, since only it can vouch for the address.
pub trait ReadSink {
    fn copy_to(&mut self, addr: usize, offset: usize, data: &[u8]);
}

pub struct QueueCore<Q: CommandQueue> {
    queue: Q,
    max_transfer_bytes: u32,
    slots: Vec<Slot>,
    free: Vec<u16>,
    backlog: VecDeque<HostCommand>,
    ready: VecDeque<Completion>,
    reaped: Vec<HostCompletion>,
    pool: Vec<Vec<u8>>,
    /// Requests accepted and not yet in `ready`.
    outstanding: usize,
    /// Set when the queue failed for good: every later call reports it.
    failed: Option<FfiError>,
    /// Reads go straight to the caller's buffers through the queue's read destination
    /// (`deliver_reads_to`): the destination value of a read's command is the address
    /// its bytes belong at.
    direct_reads: bool,
    /// Writes in place go out straight from the caller's buffers through the queue's
    /// write source (`lend_writes_from`): the source value of a write's command is
    /// the address of its part of the buffer.
    direct_writes: bool,
}

fn make_tag(generation: u32, slot: u16, chunk: u16) -> u64 {
    (u64::from(generation) << 32) | (u64::from(slot) << 16) | u64::from(chunk)
}

fn split_tag(tag: u64) -> (u32, u16, u16) {
    ((tag >> 32) as u32, (tag >> 16) as u16, tag as u16)
}

impl<Q: CommandQueue> QueueCore<Q> {
    pub fn new(queue: Q, max_transfer_bytes: u32) -> Self {
        QueueCore {
            queue,
            max_transfer_bytes: max_transfer_bytes.max(512),
            slots: Vec::new(),
            free: Vec::new(),
            backlog: VecDeque::new(),
            ready: VecDeque::new(),
            reaped: Vec::new(),
            pool: Vec::new(),
            outstanding: 0,
            failed: None,
            direct_reads: false,
            direct_writes: false,
        }
    }

    /// From now on reads are received straight into the caller's buffers: each read
    /// command names the address of its part of the buffer, and `destination` (which
    /// must write to that address) gets the bytes as they arrive. Without it, `reap`
    /// copies each read's data over from the queue's own buffer.
    pub fn deliver_reads_to(&mut self, destination: std::sync::Arc<dyn nvme_host::ReadDestination>) {
        self.direct_reads = self.queue.set_read_destination(destination);
    }

    /// From now on writes in place (`submit_write_in_place`) are sent straight from
    /// the caller's buffers: each command names the address of its part of the
    /// buffer, and `source` (which must read that address) lends the bytes. Without
    /// it, writes in place are copied like any write.
    pub fn lend_writes_from(&mut self, source: std::sync::Arc<dyn nvme_host::WriteSource>) {
        self.direct_writes = self.queue.set_write_source(source);
    }

    pub fn depth(&self) -> usize {
        self.queue.depth()
    }

    /// Requests accepted whose completion has not been returned by `reap` yet.
    pub fn requests_in_flight(&self) -> usize {
        self.outstanding + self.ready.len()
    }

    fn check_usable(&self) -> FfiResult<()> {
        match &self.failed {
            Some(error) => Err(FfiError::new(error.errno, format!("the queue failed earlier: {}", error.message))),
            None => Ok(()),
        }
    }

    fn blocks_per_command(&self, block_size: u32) -> u32 {
        (self.max_transfer_bytes / block_size).clamp(1, MAX_BLOCKS_PER_COMMAND)
    }

    fn check_range(geometry: Geometry, lba: u64, blocks: u64) -> FfiResult<()> {
        if blocks == 0 {
            return Err(FfiError::invalid("a request needs at least one block"));
        }
        match lba.checked_add(blocks) {
            Some(end) if end <= geometry.blocks => Ok(()),
            _ => Err(FfiError::invalid(format!(
                "blocks {lba}..{lba}+{blocks} are beyond the end of the namespace ({} blocks)",
                geometry.blocks
            ))),
        }
    }

    fn allocate(&mut self, user_tag: u64, kind: Kind, commands: u32) -> FfiResult<(u32, u16)> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.slots.len() < MAX_REQUESTS => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u16
            }
            None => {
                return Err(FfiError::new(
                    libc::EAGAIN,
                    format!("{MAX_REQUESTS} requests are outstanding: reap some first"),
                ))
            }
        };
        let slot = &mut self.slots[usize::from(index)];
        slot.request = Some(Request { user_tag, kind, pending: commands, status: Status::SUCCESS, error: 0 });
        self.outstanding += 1;
        Ok((slot.generation, index))
    }

    fn release(&mut self, index: u16) -> Option<Request> {
        let slot = &mut self.slots[usize::from(index)];
        let request = slot.request.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.outstanding -= 1;
        Some(request)
    }

    fn take_buffer(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buffer = self.pool.pop().unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(bytes);
        buffer
    }

    fn recycle(&mut self, mut buffer: Vec<u8>) {
        if buffer.capacity() > 0 && self.pool.len() < self.queue.depth() + POOL_SLACK {
            buffer.clear();
            self.pool.push(buffer);
        }
    }

    /// Queues a read of `blocks` blocks at `lba` into the buffer at `addr` (at least
    /// blocks * block size bytes; written only by `reap`).
    pub fn submit_read(
        &mut self,
        nsid: u32,
        geometry: Geometry,
        lba: u64,
        blocks: u32,
        addr: usize,
        user_tag: u64,
    ) -> FfiResult<()> {
        self.check_usable()?;
        Self::check_range(geometry, lba, u64::from(blocks))?;
        let block_size = geometry.block_size;
        let per = self.blocks_per_command(block_size);
        let commands = self.command_count(blocks, per)?;
        let total_bytes = blocks as usize * block_size as usize;
        let chunk_bytes = per as usize * block_size as usize;
        let (generation, index) = self.allocate(user_tag, Kind::Read { addr, total_bytes, chunk_bytes }, commands)?;
        for chunk in 0..commands {
            let first = chunk * per;
            let count = per.min(blocks - first);
            let mut command = client::read_command(nsid, lba + u64::from(first), count, block_size);
            let chunk_address = addr.checked_add(chunk as usize * chunk_bytes).map(|address| address as u64);
            match chunk_address.filter(|_| self.direct_reads) {
                // Straight into the caller's buffer: no buffer of our own.
                Some(address) => command.read_destination = Some(address),
                // The client receives into data_out's capacity: reuse a pooled buffer.
                None => command.data_out = self.take_buffer(&[]),
            }
            command.user_tag = make_tag(generation, index, chunk as u16);
            self.backlog.push_back(command);
        }
        self.pump();
        Ok(())
    }

    /// Checks a write of `bytes` at `lba`: blocks per command and commands.
    fn plan_write(&self, geometry: Geometry, lba: u64, bytes: usize) -> FfiResult<(u32, u32)> {
        self.check_usable()?;
        let block_size = geometry.block_size as usize;
        if !bytes.is_multiple_of(block_size) {
            return Err(FfiError::invalid(format!("{bytes} bytes is not a whole number of {block_size}-byte blocks")));
        }
        let blocks =
            u32::try_from(bytes / block_size).map_err(|_| FfiError::invalid("a write of more than 2^32 blocks"))?;
        Self::check_range(geometry, lba, u64::from(blocks))?;
        let per = self.blocks_per_command(geometry.block_size);
        Ok((per, self.command_count(blocks, per)?))
    }

    /// Queues a write of `data` (a whole number of blocks) at `lba`, sent straight
    /// from `data`'s memory when the queue lends writes (`lend_writes_from`; the
    /// caller then keeps it readable and unchanged until the request completes),
    /// copied otherwise.
    pub fn submit_write_in_place(
        &mut self,
        nsid: u32,
        geometry: Geometry,
        lba: u64,
        data: &[u8],
        fua: bool,
        user_tag: u64,
    ) -> FfiResult<()> {
        if !self.direct_writes {
            return self.submit_write(nsid, geometry, lba, data, fua, user_tag);
        }
        let (per, commands) = self.plan_write(geometry, lba, data.len())?;
        let (generation, index) = self.allocate(user_tag, Kind::Other, commands)?;
        let chunk_bytes = per as usize * geometry.block_size as usize;
        let address = data.as_ptr() as usize;
        for chunk in 0..commands as usize {
            let offset = chunk * chunk_bytes;
            let length = chunk_bytes.min(data.len() - offset) as u32;
            let source = nvme_host::SourceBuffer { source: (address + offset) as u64, length };
            let first = chunk as u64 * u64::from(per);
            let mut command = client::write_from_source_command(nsid, lba + first, source, geometry.block_size, fua);
            command.user_tag = make_tag(generation, index, chunk as u16);
            self.backlog.push_back(command);
        }
        self.pump();
        Ok(())
    }

    /// Queues a write of `data` (a whole number of blocks) at `lba`; the data is copied.
    pub fn submit_write(
        &mut self,
        nsid: u32,
        geometry: Geometry,
        lba: u64,
        data: &[u8],
        fua: bool,
        user_tag: u64,
    ) -> FfiResult<()> {
        let (per, commands) = self.plan_write(geometry, lba, data.len())?;
        let (generation, index) = self.allocate(user_tag, Kind::Other, commands)?;
        let chunk_bytes = per as usize * geometry.block_size as usize;
        for (chunk, piece) in data.chunks(chunk_bytes).enumerate() {
            let buffer = self.take_buffer(piece);
            let first = chunk as u64 * u64::from(per);
            let mut command = client::write_command(nsid, lba + first, buffer, geometry.block_size, fua);
            command.user_tag = make_tag(generation, index, chunk as u16);
            self.backlog.push_back(command);
        }
        self.pump();
        Ok(())
    }

    pub fn submit_flush(&mut self, nsid: u32, user_tag: u64) -> FfiResult<()> {
        self.check_usable()?;
        let (generation, index) = self.allocate(user_tag, Kind::Other, 1)?;
        let mut command = client::flush_command(nsid);
        command.user_tag = make_tag(generation, index, 0);
        self.backlog.push_back(command);
        self.pump();
        Ok(())
    }

    /// Deallocates `blocks` blocks at `lba` (Dataset Management, AD), as many 2^32-1
    /// block ranges as needed, up to 256 ranges per command.
    pub fn submit_trim(
        &mut self,
        nsid: u32,
        geometry: Geometry,
        lba: u64,
        blocks: u64,
        user_tag: u64,
    ) -> FfiResult<()> {
        self.check_usable()?;
        Self::check_range(geometry, lba, blocks)?;
        let max_range = u64::from(u32::MAX);
        let ranges_needed = blocks.div_ceil(max_range);
        let commands = ranges_needed.div_ceil(MAX_DSM_RANGES);
        if commands > MAX_COMMANDS_PER_REQUEST {
            return Err(FfiError::invalid("trim range too large"));
        }
        let (generation, index) = self.allocate(user_tag, Kind::Other, commands as u32)?;
        let mut next = lba;
        let end = lba + blocks;
        for chunk in 0..commands {
            let mut ranges = Vec::new();
            while next < end && (ranges.len() as u64) < MAX_DSM_RANGES {
                let length = (end - next).min(max_range);
                ranges.push((next, length as u32));
                next += length;
            }
            let mut command = client::deallocate_command(nsid, &ranges);
            command.user_tag = make_tag(generation, index, chunk as u16);
            self.backlog.push_back(command);
        }
        self.pump();
        Ok(())
    }

    fn command_count(&self, blocks: u32, per: u32) -> FfiResult<u32> {
        let commands = blocks.div_ceil(per);
        if u64::from(commands) > MAX_COMMANDS_PER_REQUEST {
            return Err(FfiError::invalid(format!(
                "a request of {blocks} blocks needs more than {MAX_COMMANDS_PER_REQUEST} commands"
            )));
        }
        Ok(commands)
    }

    /// Sends backlogged commands while the queue has room.
    fn pump(&mut self) {
        while self.failed.is_none() && self.queue.in_flight() < self.queue.depth() {
            let Some(command) = self.backlog.pop_front() else { break };
            let tag = command.user_tag;
            if let Err(error) = self.queue.submit(command) {
                if is_fatal(&error) {
                    self.fail_all(error);
                } else {
                    self.finish_command(tag, Status::SUCCESS, -error.errno, None);
                }
            }
        }
    }

    /// Fails every outstanding request with `error` and refuses later submissions.
    fn fail_all(&mut self, error: FfiError) {
        let errno = error.errno;
        if self.failed.is_none() {
            self.failed = Some(error);
        }
        for command in std::mem::take(&mut self.backlog) {
            self.recycle(command.data_out);
        }
        for index in 0..self.slots.len() {
            if let Some(request) = self.release(index as u16) {
                self.ready.push_back(Completion { user_tag: request.user_tag, status: request.status, error: -errno });
            }
        }
    }

    /// One command of a request finished.
    fn finish_command(&mut self, tag: u64, status: Status, error: i32, data: Option<(&[u8], &mut dyn ReadSink)>) {
        let (generation, index, chunk) = split_tag(tag);
        let Some(slot) = self.slots.get_mut(usize::from(index)) else { return };
        if slot.generation != generation {
            return; // a late completion of a request already failed
        }
        let direct_reads = self.direct_reads;
        let Some(request) = slot.request.as_mut() else { return };
        if !status.is_success() && request.status.is_success() {
            request.status = status;
        }
        if error != 0 && request.error == 0 {
            request.error = error;
        }
        if let (Kind::Read { addr, total_bytes, chunk_bytes }, Some((bytes, sink))) = (&request.kind, data) {
            if status.is_success() && error == 0 {
                let offset = usize::from(chunk) * chunk_bytes;
                let expected = (*chunk_bytes).min(total_bytes.saturating_sub(offset));
                if bytes.len() == expected {
                    sink.copy_to(*addr, offset, bytes);
                } else if bytes.is_empty() && direct_reads {
                    // Already in the caller's buffer; the queue checked that all of
                    // it arrived (a short read completes with an error status).
                } else if request.error == 0 {
                    request.error = -libc::EPROTO;
                }
            }
        }
        request.pending -= 1;
        if request.pending == 0 {
            if let Some(request) = self.release(index) {
                let error = if request.error != 0 {
                    request.error
                } else if !request.status.is_success() {
                    -libc::EIO
                } else {
                    0
                };
                self.ready.push_back(Completion { user_tag: request.user_tag, status: request.status, error });
            }
        }
    }

    /// Returns between `min` and `max` completions (fewer when `timeout` passes first,
    /// or when fewer requests are outstanding); `None` waits without a time limit.
    pub fn reap(
        &mut self,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
        sink: &mut dyn ReadSink,
        out: &mut Vec<Completion>,
    ) -> FfiResult<usize> {
        let min = min.min(max);
        let deadline = timeout.map(|t| Instant::now() + t);
        let start = out.len();
        let mut polled = false;
        loop {
            while out.len() - start < max {
                match self.ready.pop_front() {
                    Some(completion) => out.push(completion),
                    None => break,
                }
            }
            let have = out.len() - start;
            if have >= max || (have >= min && polled) || self.outstanding == 0 {
                return Ok(have);
            }
            let wait = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(1),
            };
            if polled && wait.is_zero() {
                return Ok(have);
            }
            polled = true;
            self.pump();
            if self.queue.in_flight() == 0 {
                if self.failed.is_some() || self.backlog.is_empty() {
                    // Outstanding requests with nothing in flight cannot complete.
                    let error =
                        self.failed.clone().unwrap_or_else(|| FfiError::new(libc::EIO, "requests lost by the queue"));
                    self.fail_all(error);
                }
                continue;
            }
            let need = if wait.is_zero() || have >= min { 0 } else { 1 };
            let mut reaped = std::mem::take(&mut self.reaped);
            let result = self.queue.reap(need, wait, &mut reaped);
            for completion in reaped.drain(..) {
                let HostCompletion { user_tag, cqe, data, .. } = completion;
                self.finish_command(user_tag, cqe.status, 0, Some((&data, &mut *sink)));
                self.recycle(data);
            }
            self.reaped = reaped;
            if let Err(error) = result {
                self.fail_all(error);
            }
            self.pump();
        }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> Q {
        self.queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::CompletionQueueEntry;

    const BS: u32 = 512;

    /// An in-memory namespace behind a queue that completes commands on reap.
    struct FakeQueue {
        depth: usize,
        disk: Vec<u8>,
        in_flight: Vec<HostCompletion>,
        max_in_flight_seen: usize,
        max_command_bytes: usize,
        fail_reap: bool,
        submitted: usize,
        /// Set through `set_read_destination` when `takes_destination`.
        destination: Option<std::sync::Arc<dyn nvme_host::ReadDestination>>,
        takes_destination: bool,
        /// Set through `set_write_source` when `takes_source`.
        source: Option<std::sync::Arc<dyn nvme_host::WriteSource>>,
        takes_source: bool,
    }

    impl FakeQueue {
        fn new(depth: usize) -> Self {
            FakeQueue {
                depth,
                disk: vec![0; 1 << 20],
                in_flight: Vec::new(),
                max_in_flight_seen: 0,
                max_command_bytes: 0,
                fail_reap: false,
                submitted: 0,
                destination: None,
                takes_destination: false,
                source: None,
                takes_source: false,
            }
        }
    }

    impl CommandQueue for FakeQueue {
        fn depth(&self) -> usize {
            self.depth
        }
        fn in_flight(&self) -> usize {
            self.in_flight.len()
        }
        fn submit(&mut self, command: HostCommand) -> FfiResult<()> {
            assert!(self.in_flight.len() < self.depth, "submitted to a full queue");
            self.submitted += 1;
            let sqe = command.sqe;
            let offset = sqe.starting_lba() as usize * BS as usize;
            let bytes = sqe.block_count() as usize * BS as usize;
            let mut data = Vec::new();
            let mut status = Status::SUCCESS;
            match sqe.opcode() {
                0x01 => {
                    self.max_command_bytes = self.max_command_bytes.max(bytes);
                    match (command.write_source, &self.source) {
                        (Some(buffer), Some(source)) => {
                            assert!(command.data_out.is_empty());
                            assert_eq!(buffer.length as usize, bytes);
                            let data = source.data(buffer.source, 0, bytes).expect("lent");
                            self.disk[offset..offset + bytes].copy_from_slice(data);
                        }
                        _ => {
                            assert_eq!(command.data_out.len(), bytes);
                            self.disk[offset..offset + bytes].copy_from_slice(&command.data_out);
                        }
                    }
                }
                0x02 => {
                    assert_eq!(command.data_in_bytes as usize, bytes);
                    assert!(command.data_out.is_empty());
                    self.max_command_bytes = self.max_command_bytes.max(bytes);
                    if offset == 0 && bytes == BS as usize * 3 {
                        status = Status::INVALID_FIELD; // a marker: 3-block reads at 0 fail
                    } else if let (Some(destination), Some(sink)) = (command.read_destination, &self.destination) {
                        // As the host queue does: in pieces, as they arrive.
                        for (piece, bytes) in self.disk[offset..offset + bytes].chunks(1000).enumerate() {
                            sink.write(destination, piece * 1000, bytes);
                        }
                    } else {
                        data = self.disk[offset..offset + bytes].to_vec();
                    }
                }
                _ => {}
            }
            let cqe = CompletionQueueEntry { status, ..Default::default() };
            if sqe.opcode() != 0x02 {
                data = command.data_out;
            }
            self.in_flight.push(HostCompletion { user_tag: command.user_tag, cqe, data, transport_error: None });
            self.max_in_flight_seen = self.max_in_flight_seen.max(self.in_flight.len());
            Ok(())
        }
        fn reap(&mut self, _min: usize, _timeout: Duration, out: &mut Vec<HostCompletion>) -> FfiResult<usize> {
            if self.fail_reap {
                return Err(FfiError::new(libc::ECONNRESET, "connection reset"));
            }
            // complete in reverse order to exercise reassembly
            let n = self.in_flight.len();
            out.extend(self.in_flight.drain(..).rev());
            Ok(n)
        }
        fn set_read_destination(&mut self, destination: std::sync::Arc<dyn nvme_host::ReadDestination>) -> bool {
            if self.takes_destination {
                self.destination = Some(destination);
            }
            self.takes_destination
        }
        fn set_write_source(&mut self, source: std::sync::Arc<dyn nvme_host::WriteSource>) -> bool {
            if self.takes_source {
                self.source = Some(source);
            }
            self.takes_source
        }
    }

    /// Lends `bytes`, addressed by their real addresses (as the fio engine's buffers
    /// are).
    #[derive(Debug)]
    struct Lender {
        bytes: Vec<u8>,
    }
    impl nvme_host::WriteSource for Lender {
        fn data(&self, source: u64, offset: usize, length: usize) -> Option<&[u8]> {
            let start = (source as usize).checked_sub(self.bytes.as_ptr() as usize)? + offset;
            self.bytes.get(start..start + length)
        }
    }

    /// Memory addressed by destination values, as the fio engine's buffers are.
    #[derive(Debug)]
    struct Memory(std::sync::Mutex<Vec<u8>>);
    impl nvme_host::ReadDestination for Memory {
        fn write(&self, destination: u64, offset: usize, data: &[u8]) {
            let start = destination as usize + offset;
            self.0.lock().unwrap()[start..start + data.len()].copy_from_slice(data);
        }
    }

    /// A sink that must not be used: direct reads are already in place.
    struct NoCopies;
    impl ReadSink for NoCopies {
        fn copy_to(&mut self, addr: usize, offset: usize, data: &[u8]) {
            panic!("copied {} bytes to {addr}+{offset} although the read went straight there", data.len());
        }
    }

    struct Buffers(Vec<Vec<u8>>);
    impl ReadSink for Buffers {
        fn copy_to(&mut self, addr: usize, offset: usize, data: &[u8]) {
            self.0[addr][offset..offset + data.len()].copy_from_slice(data);
        }
    }

    const GEOMETRY: Geometry = Geometry { blocks: 2048, block_size: BS };

    #[test]
    fn large_requests_are_split_and_reassembled() {
        let mut core = QueueCore::new(FakeQueue::new(4), 4096);
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 + i / 512) as u8).collect();
        core.submit_write(1, GEOMETRY, 10, &data, false, 100).unwrap();
        let mut sink = Buffers(vec![vec![0; 64 * 1024]]);
        let mut out = Vec::new();
        assert_eq!(core.reap(1, 8, Some(Duration::from_secs(1)), &mut sink, &mut out).unwrap(), 1);
        assert_eq!(out[0], Completion { user_tag: 100, status: Status::SUCCESS, error: 0 });
        core.submit_read(1, GEOMETRY, 10, 128, 0, 200).unwrap();
        out.clear();
        assert_eq!(core.reap(1, 8, None, &mut sink, &mut out).unwrap(), 1);
        assert_eq!(out[0].error, 0);
        assert_eq!(out[0].user_tag, 200);
        assert!(sink.0[0] == data, "read data differs");
        let queue = core.into_inner();
        assert_eq!(queue.max_command_bytes, 4096);
        assert_eq!(queue.max_in_flight_seen, 4);
        assert_eq!(queue.submitted, 32);
    }

    #[test]
    fn direct_reads_land_at_each_commands_part_of_the_caller_buffer() {
        let mut queue = FakeQueue::new(4);
        queue.takes_destination = true;
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 13 + i / 512) as u8).collect();
        queue.disk[10 * BS as usize..10 * BS as usize + data.len()].copy_from_slice(&data);
        let mut core = QueueCore::new(queue, 4096);
        let memory = std::sync::Arc::new(Memory(std::sync::Mutex::new(vec![0; 128 * 1024])));
        core.deliver_reads_to(memory.clone());
        // 64 KiB at address 1000 of the "memory": 16 commands of 4 KiB, each told
        // where its part of the buffer starts.
        core.submit_read(1, GEOMETRY, 10, 128, 1000, 300).unwrap();
        let mut out = Vec::new();
        assert_eq!(core.reap(1, 8, None, &mut NoCopies, &mut out).unwrap(), 1);
        assert_eq!(out[0], Completion { user_tag: 300, status: Status::SUCCESS, error: 0 });
        let memory = memory.0.lock().unwrap();
        assert!(memory[1000..1000 + data.len()] == data[..], "the read landed elsewhere");
        assert!(memory[..1000].iter().chain(&memory[1000 + data.len()..]).all(|&byte| byte == 0), "wrote outside it");
        // A failed read reports its status, as before.
        drop(memory);
        core.submit_read(1, GEOMETRY, 0, 3, 0, 301).unwrap();
        out.clear();
        core.reap(1, 1, None, &mut NoCopies, &mut out).unwrap();
        assert_eq!(out, vec![Completion { user_tag: 301, status: Status::INVALID_FIELD, error: -libc::EIO }]);
    }

    #[test]
    fn writes_in_place_name_each_commands_part_of_the_caller_buffer() {
        for takes_source in [true, false] {
            let mut queue = FakeQueue::new(4);
            queue.takes_source = takes_source;
            let mut core = QueueCore::new(queue, 4096);
            let bytes = (0..64 * 1024 + 1000).map(|i| (i * 11 + i / 512) as u8).collect();
            let lender = std::sync::Arc::new(Lender { bytes });
            core.lend_writes_from(lender.clone());
            // 64 KiB from byte 1000 of the caller's buffer: 16 commands of 4 KiB, each
            // naming where its part starts (or, without a source, copied as before).
            let data = &lender.bytes[1000..];
            core.submit_write_in_place(1, GEOMETRY, 10, data, false, 400).unwrap();
            let mut out = Vec::new();
            assert_eq!(core.reap(1, 8, None, &mut NoCopies, &mut out).unwrap(), 1);
            assert_eq!(out[0], Completion { user_tag: 400, status: Status::SUCCESS, error: 0 });
            let queue = core.into_inner();
            let start = 10 * BS as usize;
            assert!(queue.disk[start..start + data.len()] == data[..], "written data differs");
            assert_eq!((queue.submitted, queue.max_command_bytes), (16, 4096));
        }
    }

    #[test]
    fn nvme_errors_and_ranges() {
        let mut core = QueueCore::new(FakeQueue::new(8), 128 * 1024);
        let mut sink = Buffers(vec![vec![0; 4096]]);
        core.submit_read(1, GEOMETRY, 0, 3, 0, 1).unwrap();
        let mut out = Vec::new();
        core.reap(1, 1, Some(Duration::ZERO), &mut sink, &mut out).unwrap();
        assert_eq!(out, vec![Completion { user_tag: 1, status: Status::INVALID_FIELD, error: -libc::EIO }]);
        assert_eq!(core.submit_read(1, GEOMETRY, 2047, 2, 0, 2).unwrap_err().errno, libc::EINVAL);
        assert_eq!(core.submit_read(1, GEOMETRY, u64::MAX, 2, 0, 2).unwrap_err().errno, libc::EINVAL);
        assert_eq!(core.submit_write(1, GEOMETRY, 0, &[0; 100], false, 2).unwrap_err().errno, libc::EINVAL);
        assert_eq!(core.requests_in_flight(), 0);
        // nothing outstanding: reap returns at once even with min > 0 and no timeout
        assert_eq!(core.reap(4, 4, None, &mut sink, &mut out).unwrap(), 0);
    }

    #[test]
    fn a_failed_queue_completes_everything_with_its_error() {
        let mut core = QueueCore::new(FakeQueue::new(2), 4096);
        let mut sink = Buffers(vec![vec![0; 64 * 1024]]);
        core.submit_read(1, GEOMETRY, 0, 128, 0, 7).unwrap();
        core.submit_flush(1, 8).unwrap();
        core.queue.fail_reap = true;
        let mut out = Vec::new();
        assert_eq!(core.reap(2, 4, None, &mut sink, &mut out).unwrap(), 2);
        assert!(out.iter().all(|c| c.error == -libc::ECONNRESET), "{out:?}");
        assert_eq!(core.submit_flush(1, 9).unwrap_err().errno, libc::ECONNRESET);
    }

    #[test]
    fn trims_and_flushes_complete() {
        let mut core = QueueCore::new(FakeQueue::new(2), 4096);
        let mut sink = Buffers(vec![]);
        core.submit_trim(1, GEOMETRY, 0, 2048, 1).unwrap();
        core.submit_flush(1, 2).unwrap();
        let mut out = Vec::new();
        assert_eq!(core.reap(2, 2, None, &mut sink, &mut out).unwrap(), 2);
        assert!(out.iter().all(|c| c.error == 0));
    }
}

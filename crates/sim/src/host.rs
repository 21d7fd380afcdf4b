//! A simulated host: the real `HostQueue` state machine for an admin and an I/O queue,
//! bring-up, keep-alive, reconnects with backoff, and a workload whose every
//! completion is checked by the oracle.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use nvme_host::{
    commands, HostCommand, HostCompletion, HostError, HostQueue, QueueConfig, QueueState, ReadDestination,
    SourceBuffer, TransmitBatch, WriteSource,
};
use nvme_spec::fabrics::property_offset;
use nvme_spec::features::{feature_id, number_of_queues_request};
use nvme_spec::registers::ControllerConfiguration;
use nvme_spec::{ControllerId, NamespaceId, QueueId, Status};

use crate::network::{Link, LinkOwner};
use crate::oracle::{fill_block, ReadId, WriteOutcome};
use crate::plan::HostSettings;
use crate::world::Context;

/// The subsystem every simulated host connects to.
pub const SUBSYSTEM_NQN: &str = "nqn.2026-11.io.sluice:sim";
/// The namespace every simulated host uses.
pub const NAMESPACE: NamespaceId = NamespaceId(1);

/// The host's memory for reads that name a destination: destination (the command's
/// user tag) -> the bytes written there so far.
#[derive(Debug, Default)]
struct ReadMemory(Mutex<BTreeMap<u64, Vec<u8>>>);

impl ReadMemory {
    fn take(&self, destination: u64) -> Option<Vec<u8>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&destination)
    }
}

impl ReadDestination for ReadMemory {
    fn write(&self, destination: u64, offset: usize, data: &[u8]) {
        let mut buffers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let buffer = buffers.entry(destination).or_default();
        let end = offset + data.len();
        if buffer.len() < end {
            buffer.resize(end, 0);
        }
        buffer[offset..end].copy_from_slice(data);
    }
}

/// Writes a host can have lent at once from its memory, per seed (the run's command
/// budget is 4,000); later writes carry their data as usual.
const WRITE_MEMORY_SLOTS: usize = 4096;

/// The host's memory for writes that name a source: one slot per write (the source
/// value is its index), filled once and kept until the host goes (a few MiB per
/// seed), so the slices it lends stay valid without a lock held.
#[derive(Debug)]
struct WriteMemory {
    slots: Box<[OnceLock<Box<[u8]>>]>,
    next: AtomicUsize,
}

impl WriteMemory {
    fn new() -> Self {
        WriteMemory { slots: (0..WRITE_MEMORY_SLOTS).map(|_| OnceLock::new()).collect(), next: AtomicUsize::new(0) }
    }

    /// Keeps `data` in a fresh slot and names it; hands it back when all are used.
    fn keep(&self, data: Vec<u8>) -> Result<SourceBuffer, Vec<u8>> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = self.slots.get(index) else { return Err(data) };
        let length = data.len() as u32;
        slot.set(data.into_boxed_slice()).map_err(Vec::from)?;
        Ok(SourceBuffer { source: index as u64, length })
    }
}

impl WriteSource for WriteMemory {
    fn data(&self, source: u64, offset: usize, length: usize) -> Option<&[u8]> {
        self.slots.get(usize::try_from(source).ok()?)?.get()?.get(offset..offset.checked_add(length)?)
    }
}

/// How long a held send stays in flight: longer than the shortest round trip, so
/// responses to the commands it carries come while it is held.
const HOLD_SEND_NS: u64 = 300_000;

/// Where a host is with the namespace it manages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Managed {
    Idle,
    /// A management command is outstanding.
    Waiting,
    Have {
        nsid: u32,
        attached: bool,
    },
}

/// Size of a namespace a host creates (thin: capacity 1 block).
const MANAGED_NAMESPACE_BLOCKS: u64 = 64;

/// What a submitted command was, to check its completion. Some fields are read only
/// through Debug, in traces and violation messages.
#[allow(dead_code)]
#[derive(Clone, Copy, Debug)]
enum Pending {
    PropertySetEnable,
    SetQueueCount,
    KeepAlive,
    /// Abort of whatever command has `command_id` on I/O queue `queue_id` (maybe none).
    Abort {
        queue_id: u16,
        command_id: u16,
    },
    Read {
        lba: u64,
        blocks: u32,
        watch: ReadId,
    },
    Write {
        lba: u64,
        blocks: u32,
        tag: u64,
        force_unit_access: bool,
    },
    Zeroes {
        lba: u64,
        blocks: u32,
    },
    Flush {
        began: u64,
    },
    /// The Compare of a fused Compare and Write (of what the oracle was sure the blocks
    /// held).
    Compare {
        lba: u64,
        blocks: u32,
        tag: u64,
    },
    /// Its Write of `tag`.
    CompareWrite {
        lba: u64,
        blocks: u32,
        tag: u64,
    },
    NamespaceCreate,
    NamespaceAttach {
        nsid: u32,
    },
    NamespaceDetach {
        nsid: u32,
    },
    NamespaceDelete {
        nsid: u32,
    },
}

struct Outstanding {
    what: Pending,
    submitted_ns: u64,
    /// The link the command went out on.
    link: u64,
}

/// Where bring-up is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No connection; try again at `retry_at_ns`.
    Down { retry_at_ns: u64 },
    /// Admin queue: ICReq / Connect.
    AdminConnecting,
    /// CC.EN written, waiting for its completion.
    Enabling,
    /// Number of Queues being set.
    SettingQueueCount,
    /// I/O queue: ICReq / Connect.
    IoConnecting,
    /// Both queues ready: the workload runs.
    Running,
}

struct QueueEnd {
    queue: HostQueue,
    link: u64,
    /// What the queue sent last, write data by reference; kept while the send is
    /// "in flight" (`held_until_ns`), cleared otherwise.
    batch: TransmitBatch,
    held_until_ns: Option<u64>,
}

/// One simulated host.
pub struct SimHost {
    index: usize,
    settings: HostSettings,
    phase: Phase,
    admin: Option<QueueEnd>,
    io: Vec<QueueEnd>,
    controller_id: ControllerId,
    outstanding: BTreeMap<u64, Outstanding>,
    next_user_tag: u64,
    keep_alive_due_ns: u64,
    failures_in_a_row: u32,
    managed: Managed,
    transmit_buffer: Vec<u8>,
    /// Where reads land when `settings.direct_reads`.
    read_memory: Option<Arc<ReadMemory>>,
    /// Where writes are sent from when `settings.source_writes`.
    write_memory: Option<Arc<WriteMemory>>,
    /// Sends so far, to hold every third one when `settings.hold_sends`.
    sends: u64,
    /// Commands completed successfully (for the summary).
    pub completed_ok: u64,
    /// Times the host lost its controller and reconnected.
    pub reconnects: u64,
}

/// Reconnect backoff: first delay and ceiling.
const RECONNECT_FIRST_DELAY_NS: u64 = 2_000_000;
const RECONNECT_MAX_DELAY_NS: u64 = 500_000_000;
/// Slack beyond the command timeout before a command nobody answered is a violation
/// (the host checks its timers only when the world wakes it).
const LIVENESS_GRACE_NS: u64 = 1_000_000_000;

impl SimHost {
    /// A host that connects at once.
    pub fn new(index: usize, settings: HostSettings) -> Self {
        let read_memory = settings.direct_reads.then(|| Arc::new(ReadMemory::default()));
        let write_memory = settings.source_writes.then(|| Arc::new(WriteMemory::new()));
        SimHost {
            read_memory,
            write_memory,
            sends: 0,
            index,
            settings,
            phase: Phase::Down { retry_at_ns: 0 },
            admin: None,
            io: Vec::new(),
            controller_id: ControllerId::DYNAMIC,
            outstanding: BTreeMap::new(),
            next_user_tag: 1,
            keep_alive_due_ns: 0,
            failures_in_a_row: 0,
            managed: Managed::Idle,
            transmit_buffer: Vec::new(),
            completed_ok: 0,
            reconnects: 0,
        }
    }

    fn host_nqn(&self) -> String {
        format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-{:012x}", self.index + 1)
    }

    fn config(&self, queue_id: u16) -> QueueConfig {
        let admin = queue_id == 0;
        QueueConfig {
            queue_id: QueueId(queue_id),
            queue_size: if admin { 32 } else { self.settings.queue_size },
            controller_id: if admin { ControllerId::DYNAMIC } else { self.controller_id },
            subsystem_nqn: SUBSYSTEM_NQN.into(),
            host_nqn: self.host_nqn(),
            host_identifier: [self.index as u8 + 1; 16],
            keep_alive_timeout_ms: if admin { self.settings.keep_alive_timeout_ms } else { 0 },
            digests: self.settings.digests,
            command_timeout_ms: self.settings.command_timeout_ms,
            max_r2t_outstanding: self.settings.max_r2t_outstanding,
            dhchap: None,
        }
    }

    /// The queue a link carries, for delivering its bytes.
    pub fn queue_for(&mut self, link: u64) -> Option<&mut HostQueue> {
        self.admin.iter_mut().chain(self.io.iter_mut()).find(|end| end.link == link).map(|end| &mut end.queue)
    }

    /// The link ended under a queue (RST, or the target closed): the association is
    /// gone.
    pub fn link_ended(&mut self, context: &mut Context, link: u64) {
        if self.queue_for(link).is_some() {
            self.tear_down(context, "connection closed by the target");
        }
    }

    /// Opens a queue: a new link, and a host queue on it.
    fn open_queue(&mut self, context: &mut Context, queue_id: u16) -> QueueEnd {
        let link = context.open_link(Link::new(LinkOwner { host: self.index, admin: queue_id == 0 }));
        let mut queue = HostQueue::new(self.config(queue_id), context.clock.now());
        if let Some(memory) = self.read_memory.as_ref().filter(|_| queue_id != 0) {
            queue.set_read_destination(Arc::clone(memory) as Arc<dyn ReadDestination>);
        }
        if let Some(memory) = self.write_memory.as_ref().filter(|_| queue_id != 0) {
            queue.set_write_source(Arc::clone(memory) as Arc<dyn WriteSource>);
        }
        QueueEnd { queue, link, batch: TransmitBatch::new(), held_until_ns: None }
    }

    /// Fails every outstanding command (writes become uncertain), drops both queues and
    /// schedules a reconnect with exponential backoff.
    fn tear_down(&mut self, context: &mut Context, why: &str) {
        let now_ns = context.clock.elapsed_ns();
        let ends: Vec<QueueEnd> = self.admin.take().into_iter().chain(self.io.drain(..)).collect();
        for end in ends {
            let QueueEnd { mut queue, link, .. } = end;
            // Completions that arrived before the end still count, those held back
            // by a send in flight too (abandon hands them out).
            queue.abandon(HostError::ConnectionLost);
            while let Some(completion) = queue.poll_completion() {
                let is_io = self.outstanding.get(&completion.user_tag).is_some_and(|entry| entry.what.is_io());
                if is_io {
                    self.complete(context, completion);
                }
            }
            context.close_link_from_host(link);
        }
        for (_, outstanding) in std::mem::take(&mut self.outstanding) {
            fail(context, outstanding.what, Some(outstanding.link));
        }
        if self.managed == Managed::Waiting {
            // Its outcome is unknown (the ledger says so): start over with a new one.
            self.managed = Managed::Idle;
        }
        self.failures_in_a_row += 1;
        let delay = (RECONNECT_FIRST_DELAY_NS << self.failures_in_a_row.min(12)).min(RECONNECT_MAX_DELAY_NS);
        self.phase = Phase::Down { retry_at_ns: now_ns + delay };
        self.reconnects += 1;
        // Reads that failed with their queues leave what part of them arrived.
        if let Some(memory) = &self.read_memory {
            memory.0.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
        context
            .note(|| format!("host {} lost its controller ({why}); reconnect in {} ms", self.index, delay / 1_000_000));
    }

    /// Runs everything due now: timers, completions, bring-up steps, new I/O, and hands
    /// the bytes to send to the links.
    pub fn service(&mut self, context: &mut Context, submit_io: bool) {
        let now = context.clock.now();
        let now_ns = context.clock.elapsed_ns();
        // Held sends whose time came are over: the batch lets go of the data.
        for end in self.admin.iter_mut().chain(self.io.iter_mut()) {
            if end.held_until_ns.is_some_and(|until| now_ns >= until) {
                end.batch.clear();
                end.held_until_ns = None;
            }
        }
        for end in self.admin.iter_mut().chain(self.io.iter_mut()) {
            if end.queue.next_deadline().is_some_and(|deadline| deadline <= now) {
                end.queue.handle_timeout(now);
            }
        }
        let mut completions = Vec::new();
        for end in self.admin.iter_mut().chain(self.io.iter_mut()) {
            while let Some(completion) = end.queue.poll_completion() {
                completions.push(completion);
            }
        }
        for completion in completions {
            self.complete(context, completion);
        }
        let failed = self
            .admin
            .iter()
            .chain(self.io.iter())
            .find(|end| end.queue.state() == QueueState::Failed)
            .map(|end| end.queue.error().map_or_else(|| "queue failed".to_string(), |error| error.to_string()));
        if let Some(why) = failed {
            self.tear_down(context, &why);
        }
        self.advance_bring_up(context);
        if self.phase == Phase::Running {
            if now_ns >= self.keep_alive_due_ns {
                self.keep_alive_due_ns = now_ns + u64::from(self.settings.keep_alive_timeout_ms) * 1_000_000 / 3;
                self.submit(context, None, commands::keep_alive(), Pending::KeepAlive);
            }
            if submit_io {
                self.submit_workload(context);
                if context.rng.chance(self.settings.abort_per_million) {
                    self.submit_abort(context);
                }
                if context.rng.chance(self.settings.namespace_management_per_million) {
                    self.submit_management(context);
                }
            }
        }
        for end in self.admin.iter_mut().chain(self.io.iter_mut()) {
            if end.held_until_ns.is_some() {
                continue; // one send in flight per connection, as on a ring
            }
            if end.queue.transmit_batch(&mut end.batch) == 0 {
                continue;
            }
            self.transmit_buffer.clear();
            end.batch.copy_to(&mut self.transmit_buffer);
            context.send_to_target(end.link, &self.transmit_buffer);
            self.sends += 1;
            if self.settings.hold_sends && self.sends.is_multiple_of(3) {
                end.held_until_ns = Some(now_ns + HOLD_SEND_NS);
            } else {
                end.batch.clear();
            }
        }
    }

    fn advance_bring_up(&mut self, context: &mut Context) {
        let now_ns = context.clock.elapsed_ns();
        let ready = |end: Option<&QueueEnd>| match end.map(|end| end.queue.state()) {
            Some(QueueState::Ready { controller_id }) => Some(controller_id),
            _ => None,
        };
        match self.phase {
            Phase::Down { retry_at_ns } if now_ns >= retry_at_ns => {
                self.admin = Some(self.open_queue(context, 0));
                self.phase = Phase::AdminConnecting;
            }
            Phase::AdminConnecting => {
                if let Some(controller_id) = ready(self.admin.as_ref()) {
                    self.controller_id = controller_id;
                    let command = crate::host::enable_controller_command();
                    self.submit(context, None, command, Pending::PropertySetEnable);
                    self.phase = Phase::Enabling;
                }
            }
            Phase::IoConnecting if self.io.iter().all(|end| ready(Some(end)).is_some()) => {
                self.phase = Phase::Running;
                self.failures_in_a_row = 0;
                self.keep_alive_due_ns = now_ns;
                context.note(|| format!("host {} running on controller {}", self.index, self.controller_id.0));
            }
            _ => {}
        }
    }

    /// Submits on the admin queue (`None`) or I/O queue `Some(index)`.
    fn submit(
        &mut self,
        context: &mut Context,
        io_queue: Option<usize>,
        mut command: HostCommand,
        what: Pending,
    ) -> bool {
        let end = match io_queue {
            None => self.admin.as_mut(),
            Some(index) => self.io.get_mut(index),
        };
        let Some(end) = end else {
            return false;
        };
        let link = end.link;
        command.user_tag = self.next_user_tag;
        match end.queue.submit(command, context.clock.now()) {
            Ok(()) => {
                let submitted_ns = context.clock.elapsed_ns();
                self.outstanding.insert(self.next_user_tag, Outstanding { what, submitted_ns, link });
                self.next_user_tag += 1;
                true
            }
            Err(_) => false,
        }
    }

    fn io_in_flight(&self) -> usize {
        self.outstanding.values().filter(|entry| entry.what.is_io()).count()
    }

    fn submit_workload(&mut self, context: &mut Context) {
        let block_bytes = context.block_bytes;
        let namespace_blocks = context.oracle.block_count();
        while self.io_in_flight() < self.settings.queue_depth && context.io_budget > 0 {
            if context.rng.chance(300_000) {
                // Leave the queue part-empty sometimes: depth varies over the run.
                return;
            }
            let blocks = context.rng.between(1, u64::from(self.settings.max_io_blocks)).min(namespace_blocks);
            let lba = context.rng.below(namespace_blocks - blocks + 1);
            let choice = context.rng.below(100);
            if choice < 6 && self.settings.queue_depth >= 2 && self.io_in_flight() + 2 <= self.settings.queue_depth {
                let blocks = blocks.min(32);
                if self.submit_compare_and_write(context, lba, blocks) {
                    continue;
                }
            }
            let (command, what) = if choice < 45 || (choice < 95 && !context.oracle.can_write(lba, blocks)) {
                let watch = context.oracle.begin_read(lba, blocks);
                let mut command = commands::read(NAMESPACE, lba, blocks as u32, block_bytes as u32);
                // The destination is the user tag `submit` gives the command.
                command.read_destination = self.read_memory.is_some().then_some(self.next_user_tag);
                (command, Pending::Read { lba, blocks: blocks as u32, watch })
            } else if choice < 88 {
                let tag = context.new_write_tag();
                let mut data = vec![0; blocks as usize * block_bytes];
                for (index, block) in data.chunks_mut(block_bytes).enumerate() {
                    fill_block(tag, lba + index as u64, block);
                }
                let force_unit_access = context.rng.chance(150_000);
                context.oracle.begin_write(lba, blocks, tag);
                let kept = match &self.write_memory {
                    Some(memory) => memory.keep(data),
                    None => Err(data),
                };
                let command = match kept {
                    Ok(source) => {
                        commands::write_from_source(NAMESPACE, lba, source, block_bytes as u32, force_unit_access)
                    }
                    Err(data) => commands::write(NAMESPACE, lba, data, block_bytes as u32, force_unit_access),
                };
                (command, Pending::Write { lba, blocks: blocks as u32, tag, force_unit_access })
            } else if choice < 95 {
                context.oracle.begin_write(lba, blocks, 0);
                let deallocate = context.rng.chance(500_000);
                (
                    commands::write_zeroes(NAMESPACE, lba, blocks as u32, deallocate),
                    Pending::Zeroes { lba, blocks: blocks as u32 },
                )
            } else {
                let began = context.oracle.begin_flush();
                (commands::flush(NAMESPACE), Pending::Flush { began })
            };
            let host = self.index;
            context.io_budget -= 1;
            context.note(|| format!("host {host} submits {what:?}"));
            let queue = context.rng.below(self.io.len() as u64) as usize;
            if !self.submit(context, Some(queue), command, what) {
                fail(context, what, None);
                return;
            }
        }
    }

    /// Aborts a command picked by CID, as a host whose command timed out would: it may
    /// name a command in flight, a finished one, or nothing.
    /// The next step with this host's own namespace, on the admin queue; the ledger
    /// learns what may change before it is sent.
    fn submit_management(&mut self, context: &mut Context) {
        let controllers = [self.controller_id];
        let (command, what) = match self.managed {
            Managed::Waiting => return,
            Managed::Idle => {
                let settings = commands::NamespaceCreate {
                    size_blocks: MANAGED_NAMESPACE_BLOCKS,
                    capacity_blocks: 1,
                    ..Default::default()
                };
                (commands::namespace_create(&settings), Pending::NamespaceCreate)
            }
            Managed::Have { nsid, attached: false } if context.rng.chance(600_000) => {
                (commands::namespace_attach(NamespaceId(nsid), &controllers), Pending::NamespaceAttach { nsid })
            }
            Managed::Have { nsid, attached: false } => {
                (commands::namespace_delete(NamespaceId(nsid)), Pending::NamespaceDelete { nsid })
            }
            Managed::Have { nsid, attached: true } => {
                (commands::namespace_detach(NamespaceId(nsid), &controllers), Pending::NamespaceDetach { nsid })
            }
        };
        let owner = self.host_nqn();
        match what {
            Pending::NamespaceCreate => context.namespaces.creating(),
            Pending::NamespaceAttach { nsid } | Pending::NamespaceDetach { nsid } => {
                context.namespaces.attachment_changing(nsid, &owner)
            }
            Pending::NamespaceDelete { nsid } => context.namespaces.existence_changing(nsid, &owner),
            _ => {}
        }
        if self.submit(context, None, command, what) {
            self.managed = Managed::Waiting;
        }
    }

    fn submit_abort(&mut self, context: &mut Context) {
        let queue_id = context.rng.between(1, self.io.len() as u64) as u16;
        let command_id = context.rng.below(u64::from(self.settings.queue_size)) as u16;
        let command = commands::abort(QueueId(queue_id), nvme_spec::CommandId(command_id));
        let host = self.index;
        context.note(|| format!("host {host} aborts command {command_id} on queue {queue_id}"));
        self.submit(context, None, command, Pending::Abort { queue_id, command_id });
    }

    /// A fused Compare and Write of blocks whose content the oracle is sure of, on a
    /// queue with room for both commands. False when none could be sent.
    fn submit_compare_and_write(&mut self, context: &mut Context, lba: u64, blocks: u64) -> bool {
        let Some(expected_tags) = context.oracle.certain_values(lba, blocks) else {
            return false;
        };
        let queue = context.rng.below(self.io.len() as u64) as usize;
        let room = self.io.get(queue).is_some_and(|end| end.queue.capacity() - end.queue.outstanding() >= 2);
        if !room {
            return false;
        }
        let block_bytes = context.block_bytes;
        let mut expected = vec![0; blocks as usize * block_bytes];
        for (index, block) in expected.chunks_mut(block_bytes).enumerate() {
            fill_block(expected_tags[index], lba + index as u64, block);
        }
        let tag = context.new_write_tag();
        let mut new = vec![0; blocks as usize * block_bytes];
        for (index, block) in new.chunks_mut(block_bytes).enumerate() {
            fill_block(tag, lba + index as u64, block);
        }
        let [compare, write] = commands::compare_and_write(NAMESPACE, lba, expected, new, block_bytes as u32);
        let blocks = blocks as u32;
        context.oracle.begin_write(lba, u64::from(blocks), tag);
        context.io_budget = context.io_budget.saturating_sub(2);
        let host = self.index;
        context
            .note(|| format!("host {host} submits Compare and Write {{ lba: {lba}, blocks: {blocks}, tag: {tag} }}"));
        let first = self.submit(context, Some(queue), compare, Pending::Compare { lba, blocks, tag });
        let second = first && self.submit(context, Some(queue), write, Pending::CompareWrite { lba, blocks, tag });
        if !second {
            context.violation(format!("host {host}: a queue with room for two commands refused a fused pair"));
        }
        true
    }

    fn complete(&mut self, context: &mut Context, completion: HostCompletion) {
        let Some(outstanding) = self.outstanding.remove(&completion.user_tag) else {
            context.violation(format!("host {}: completion for unknown tag {}", self.index, completion.user_tag));
            return;
        };
        let status = completion.cqe.status;
        let ok = status.is_success() && completion.transport_error.is_none();
        let host = self.index;
        context.note(|| format!("host {host} completes {:?}: status {:#x}", outstanding.what, status.field()));
        if ok {
            self.completed_ok += 1;
        } else if matches!(outstanding.what, Pending::Compare { .. }) && status.kind() == Status::COMPARE_FAILURE.kind()
        {
            context.data_violation(format!(
                "host {}: {:?} failed though the blocks held what it expected",
                self.index, outstanding.what
            ));
        } else if !expected_failure(status) && !outstanding.what.is_management() {
            context.data_violation(format!(
                "host {}: valid command {:?} failed with status {:#x}",
                self.index,
                outstanding.what,
                status.field()
            ));
        }
        match outstanding.what {
            Pending::PropertySetEnable if ok => {
                let command = commands::set_features(
                    feature_id::NUMBER_OF_QUEUES,
                    NamespaceId::NONE,
                    number_of_queues_request(u32::from(self.settings.io_queues), u32::from(self.settings.io_queues)),
                    false,
                );
                self.submit(context, None, command, Pending::SetQueueCount);
                self.phase = Phase::SettingQueueCount;
            }
            Pending::SetQueueCount if ok => {
                self.io = (1..=self.settings.io_queues).map(|queue_id| self.open_queue(context, queue_id)).collect();
                self.phase = Phase::IoConnecting;
            }
            Pending::PropertySetEnable | Pending::SetQueueCount => {
                self.tear_down(context, "bring-up command failed");
            }
            Pending::KeepAlive | Pending::Abort { .. } => {}
            Pending::Read { watch, .. } => {
                let landed = self.read_memory.as_ref().and_then(|memory| memory.take(completion.user_tag));
                let data = ok.then_some(landed.as_deref().unwrap_or(completion.data.as_slice()));
                if let Err(problem) = context.oracle.end_read(watch, data) {
                    context.data_violation(format!("host {}: {problem}", self.index));
                }
            }
            Pending::Write { lba, blocks, tag, force_unit_access } => {
                let outcome =
                    if ok { WriteOutcome::Acknowledged { force_unit_access } } else { WriteOutcome::Uncertain };
                context.oracle.end_write(lba, u64::from(blocks), tag, outcome);
            }
            Pending::Zeroes { lba, blocks } => {
                let outcome =
                    if ok { WriteOutcome::Acknowledged { force_unit_access: false } } else { WriteOutcome::Uncertain };
                context.oracle.end_write(lba, u64::from(blocks), 0, outcome);
            }
            Pending::Flush { began } => {
                if ok {
                    context.oracle.end_flush(began);
                }
            }
            // The pair's outcome is the Write's.
            Pending::Compare { .. } => {}
            // A refusal after an outcome nobody saw (attach of an attached namespace)
            // is expected: the ledger keeps such facts unknown.
            Pending::NamespaceCreate => {
                context.namespaces.create_answered();
                self.managed = Managed::Idle;
                let nsid = completion.cqe.result_dw0;
                let index = self.index;
                context.note(|| format!("host {index}: the target says it created namespace {nsid}"));
                if ok && nsid != 0 {
                    context.namespaces.created(nsid, &self.host_nqn());
                    self.managed = Managed::Have { nsid, attached: false };
                }
            }
            Pending::NamespaceAttach { nsid } => {
                if ok {
                    context.namespaces.attached(nsid, &self.host_nqn(), true);
                }
                self.managed = Managed::Have { nsid, attached: ok };
            }
            Pending::NamespaceDetach { nsid } => {
                if ok {
                    context.namespaces.attached(nsid, &self.host_nqn(), false);
                }
                self.managed = Managed::Have { nsid, attached: false };
            }
            Pending::NamespaceDelete { nsid } => {
                if ok {
                    context.namespaces.deleted(nsid, &self.host_nqn());
                }
                self.managed = Managed::Idle;
            }
            Pending::CompareWrite { lba, blocks, tag } => {
                let outcome = if ok {
                    WriteOutcome::Acknowledged { force_unit_access: false }
                } else if status.kind() == Status::ABORTED_FAILED_FUSED.kind() {
                    WriteOutcome::NotApplied
                } else {
                    WriteOutcome::Uncertain
                };
                context.oracle.end_write(lba, u64::from(blocks), tag, outcome);
            }
        }
    }

    /// Every outstanding command must complete, or fail on the host, within the host's
    /// command timeout.
    pub fn check_liveness(&self, context: &mut Context) {
        let now_ns = context.clock.elapsed_ns();
        let limit_ns = self.settings.command_timeout_ms * 1_000_000 + LIVENESS_GRACE_NS;
        if let Some((tag, entry)) = self.outstanding.iter().find(|(_, entry)| now_ns - entry.submitted_ns > limit_ns) {
            context.violation(format!(
                "host {}: command {tag} ({:?}) outstanding for {} ms, past its {} ms timeout",
                self.index,
                entry.what,
                (now_ns - entry.submitted_ns) / 1_000_000,
                self.settings.command_timeout_ms
            ));
        }
    }

    /// Nothing outstanding, and connected (or giving up is all that is left).
    pub fn idle(&self) -> bool {
        self.outstanding.values().all(|entry| !entry.what.is_io())
    }

    /// The earliest time this host has something to do.
    pub fn next_wake_ns(&self, context: &Context) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut consider = |at: u64| next = Some(next.map_or(at, |current| current.min(at)));
        for end in self.admin.iter().chain(self.io.iter()) {
            if let Some(deadline) = end.queue.next_deadline() {
                consider(context.clock.ns_of(deadline));
            }
            if let Some(until) = end.held_until_ns {
                consider(until);
            }
        }
        match self.phase {
            Phase::Down { retry_at_ns } => consider(retry_at_ns),
            Phase::Running => consider(self.keep_alive_due_ns),
            _ => {}
        }
        next
    }
}

impl Pending {
    fn is_io(&self) -> bool {
        matches!(
            self,
            Pending::Read { .. }
                | Pending::Write { .. }
                | Pending::Zeroes { .. }
                | Pending::Flush { .. }
                | Pending::Compare { .. }
                | Pending::CompareWrite { .. }
        )
    }

    fn is_management(&self) -> bool {
        matches!(
            self,
            Pending::NamespaceCreate
                | Pending::NamespaceAttach { .. }
                | Pending::NamespaceDetach { .. }
                | Pending::NamespaceDelete { .. }
        )
    }
}

/// A command that never completed: a write may or may not have happened, and while
/// the target still has the connection it went out on, it may yet happen.
fn fail(context: &mut Context, what: Pending, link: Option<u64>) {
    let outcome = link.map_or(WriteOutcome::Uncertain, |link| WriteOutcome::Floating { link });
    match what {
        Pending::Read { watch, .. } => {
            let _ = context.oracle.end_read(watch, None);
        }
        Pending::Write { lba, blocks, tag, .. } => context.oracle.end_write(lba, u64::from(blocks), tag, outcome),
        Pending::Zeroes { lba, blocks } => context.oracle.end_write(lba, u64::from(blocks), 0, outcome),
        Pending::CompareWrite { lba, blocks, tag } => context.oracle.end_write(lba, u64::from(blocks), tag, outcome),
        Pending::Compare { .. }
        | Pending::Flush { .. }
        | Pending::PropertySetEnable
        | Pending::SetQueueCount
        | Pending::KeepAlive
        | Pending::Abort { .. }
        | Pending::NamespaceCreate
        | Pending::NamespaceAttach { .. }
        | Pending::NamespaceDetach { .. }
        | Pending::NamespaceDelete { .. } => {}
    }
}

/// Statuses a valid command may end with in a world of failing disks and networks.
fn expected_failure(status: Status) -> bool {
    let kind = status.kind();
    [
        Status::WRITE_FAULT,
        Status::UNRECOVERED_READ_ERROR,
        Status::DATA_TRANSFER_ERROR,
        Status::ABORTED_SQ_DELETION,
        Status::ABORTED_BY_REQUEST,
        Status::TRANSIENT_TRANSPORT_ERROR,
        Status::NAMESPACE_NOT_READY,
        Status::KEEP_ALIVE_TIMER_EXPIRED,
        // The other half of a fused pair failed (a read error on the Compare).
        Status::ABORTED_FAILED_FUSED,
        // Too many Aborts outstanding.
        Status::ABORT_COMMAND_LIMIT_EXCEEDED,
    ]
    .iter()
    .any(|allowed| allowed.kind() == kind)
}

/// Property Set CC: EN=1 with the NVM command set's queue entry sizes (what every
/// simulated host sends once its admin queue is connected).
pub(crate) fn enable_controller_command() -> nvme_host::HostCommand {
    let cc = ControllerConfiguration(0)
        .with_io_submission_queue_entry_size(6)
        .with_io_completion_queue_entry_size(4)
        .with_enable(true);
    commands::property_set(property_offset::CC, u64::from(cc.raw()))
}

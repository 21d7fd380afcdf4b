//! A host of the gateway group: the real `HostQueue` for an admin and an I/O queue
//! to one gateway at a time (another one after a failure), with its own Host
//! Identifier and registration key, issuing reservation commands one at a time,
//! reads and writes on the data blocks, reads of the lock blocks and fused Compare
//! and Write on them (as VMFS takes its on-disk locks: only with Compare and Write,
//! comparing with the value it last saw) ([`workload`]). It keeps an Asynchronous
//! Event Request outstanding and reads the Reservation Notification log (80h) until
//! it is empty on every reservation event, as a Linux host's user space does. Every
//! completion is checked by the oracles.

mod workload;

use std::collections::BTreeMap;

use nvme_host::{commands, HostCommand, HostCompletion, HostError, HostQueue, QueueConfig, QueueState};
use nvme_spec::admin::{async_event_type, AsynchronousEventCompletion};
use nvme_spec::features::{feature_id, number_of_queues_request};
use nvme_spec::log_page::log_id;
use nvme_spec::{ControllerId, NamespaceId, QueueId, Status};
use nvme_tcp_wire::DigestSettings;

use super::context::{GroupContext, LOCK_BLOCKS};
use super::reference::{self, host_identifier, is_path_or_transport_failure};
use crate::host::SUBSYSTEM_NQN;
use crate::network::{Link, LinkOwner};
use crate::oracle::{decode_block, ReadId, WriteOutcome, WriteTag};

/// Bytes of Reservation Report asked for: the header and eight registrants.
const REPORT_BYTES: u32 = 64 + 8 * 64;
/// Slack beyond the command timeout before a command nobody answered is a violation.
const LIVENESS_GRACE_NS: u64 = 1_000_000_000;
const RECONNECT_FIRST_DELAY_NS: u64 = 2_000_000;
const RECONNECT_MAX_DELAY_NS: u64 = 300_000_000;

/// The key host `index` registers with (unique, so Preempt names one host).
pub fn key_of(index: u8) -> u64 {
    0x5100 + u64::from(index)
}

/// A host's other key: a Replace switches between the two.
fn other_key(key: u64) -> u64 {
    key ^ 0x0300
}

/// How a host drives its queues; drawn from the seed.
#[derive(Clone, Debug)]
pub struct GroupHostSettings {
    pub queue_size: u16,
    pub queue_depth: usize,
    pub keep_alive_timeout_ms: u32,
    pub command_timeout_ms: u64,
    /// Largest data I/O in blocks.
    pub max_io_blocks: u64,
    /// Mean time between two commands of the workload.
    pub think_ns: u64,
}

/// What a submitted command was. `floor` is the newest reservation version answered
/// to any host when it was submitted: what it must see at least.
#[derive(Clone, Debug)]
enum Work {
    PropertySetEnable,
    SetQueueCount,
    KeepAlive,
    /// Asynchronous Event Request: outstanding until the controller has an event.
    AsyncEvent,
    /// Log 80h, read on a reservation event.
    NoticeLog,
    Reservation {
        calls_before: u64,
        instance: u64,
        /// A Replace: the key the host holds once it succeeds.
        replaced_to: Option<u64>,
    },
    Report {
        floor: u64,
    },
    Read {
        watch: ReadId,
        floor: u64,
    },
    Write {
        lba: u64,
        blocks: u64,
        tag: WriteTag,
        floor: u64,
    },
    LockRead {
        lba: u64,
        floor: u64,
    },
    Compare {
        floor: u64,
    },
    CompareWrite {
        lba: u64,
        compare: WriteTag,
        new: WriteTag,
        floor: u64,
    },
}

impl Work {
    fn is_io(&self) -> bool {
        !matches!(
            self,
            Work::PropertySetEnable | Work::SetQueueCount | Work::KeepAlive | Work::AsyncEvent | Work::NoticeLog
        )
    }

    fn is_write(&self) -> bool {
        matches!(self, Work::Write { .. } | Work::CompareWrite { .. })
    }
}

struct Outstanding {
    work: Work,
    submitted_ns: u64,
    link: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Down { retry_at_ns: u64 },
    AdminConnecting,
    Enabling,
    SettingQueueCount,
    IoConnecting,
    Running,
}

struct QueueEnd {
    queue: HostQueue,
    link: u64,
}

/// One host of the group.
pub struct GroupHost {
    index: usize,
    settings: GroupHostSettings,
    phase: Phase,
    /// The gateway the host's queues go to now.
    gateway: usize,
    admin: Option<QueueEnd>,
    io: Option<QueueEnd>,
    controller_id: ControllerId,
    outstanding: BTreeMap<u64, Outstanding>,
    next_user_tag: u64,
    keep_alive_due_ns: u64,
    failures_in_a_row: u32,
    /// The value of each lock block the host saw last.
    lock_values: Vec<WriteTag>,
    /// The registration key the host believes it holds.
    key: u64,
    /// The workload's next command goes out no earlier.
    next_submit_ns: u64,
    /// A command got a path error: move to another gateway, as a multipath host
    /// retries on another path.
    fail_over: bool,
    transmit_buffer: Vec<u8>,
    /// Reading log 80h after a reservation event (until a page comes back empty).
    reading_notices: bool,
    pub completed_ok: u64,
    pub reconnects: u64,
    pub reservation_commands: u64,
    pub conflicts: u64,
    /// Commands refused with ANA Transition (a gateway handing the group over).
    pub ana_transitions: u64,
    pub swaps: u64,
}

impl GroupHost {
    pub fn new(index: usize, settings: GroupHostSettings, gateway: usize) -> Self {
        GroupHost {
            index,
            settings,
            phase: Phase::Down { retry_at_ns: 0 },
            gateway,
            admin: None,
            io: None,
            controller_id: ControllerId::DYNAMIC,
            outstanding: BTreeMap::new(),
            next_user_tag: 1,
            keep_alive_due_ns: 0,
            failures_in_a_row: 0,
            lock_values: vec![0; LOCK_BLOCKS as usize],
            fail_over: false,
            key: key_of(index as u8),
            next_submit_ns: 0,
            transmit_buffer: Vec::new(),
            reading_notices: false,
            completed_ok: 0,
            reconnects: 0,
            reservation_commands: 0,
            conflicts: 0,
            ana_transitions: 0,
            swaps: 0,
        }
    }

    fn me(&self) -> u8 {
        self.index as u8
    }

    fn config(&self, queue_id: u16) -> QueueConfig {
        let admin = queue_id == 0;
        QueueConfig {
            queue_id: QueueId(queue_id),
            queue_size: if admin { 32 } else { self.settings.queue_size },
            controller_id: if admin { ControllerId::DYNAMIC } else { self.controller_id },
            subsystem_nqn: SUBSYSTEM_NQN.into(),
            host_nqn: format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-{:012x}", self.index + 1),
            host_identifier: host_identifier(self.index),
            keep_alive_timeout_ms: if admin { self.settings.keep_alive_timeout_ms } else { 0 },
            digests: DigestSettings::default(),
            command_timeout_ms: self.settings.command_timeout_ms,
            max_r2t_outstanding: 0,
            dhchap: None,
        }
    }

    /// The queue a link carries.
    pub fn queue_for(&mut self, link: u64) -> Option<&mut HostQueue> {
        self.admin.iter_mut().chain(self.io.iter_mut()).find(|end| end.link == link).map(|end| &mut end.queue)
    }

    /// The link ended under a queue: the association is gone.
    pub fn link_ended(&mut self, context: &mut GroupContext, link: u64) {
        if self.queue_for(link).is_some() {
            self.tear_down(context, "connection closed by the gateway");
        }
    }

    fn open_queue(&mut self, context: &mut GroupContext, queue_id: u16) -> QueueEnd {
        let link = context.open_link(Link::new(LinkOwner { host: self.index, admin: queue_id == 0 }), self.gateway);
        if queue_id == 0 {
            context.notices.controller_opened(self.me(), link);
        }
        QueueEnd { queue: HostQueue::new(self.config(queue_id), context.clock.now()), link }
    }

    /// Fails what is outstanding, drops both queues, and reconnects later through
    /// another gateway (a path failed).
    fn tear_down(&mut self, context: &mut GroupContext, why: &str) {
        let now_ns = context.clock.elapsed_ns();
        let ends: Vec<QueueEnd> = self.admin.take().into_iter().chain(self.io.take()).collect();
        for QueueEnd { mut queue, link } in ends {
            queue.abandon(HostError::ConnectionLost);
            while let Some(completion) = queue.poll_completion() {
                if self.outstanding.contains_key(&completion.user_tag) {
                    self.complete(context, completion);
                }
            }
            context.close_link_from_host(link);
        }
        context.notices.controller_lost(self.me());
        self.reading_notices = false;
        for (_, outstanding) in std::mem::take(&mut self.outstanding) {
            match outstanding.work {
                Work::Read { watch, .. } => {
                    let _ = context.oracle.end_read(watch, None);
                }
                Work::Write { lba, blocks, tag, .. } => {
                    context.oracle.end_write(lba, blocks, tag, WriteOutcome::Floating { link: outstanding.link })
                }
                _ => {}
            }
        }
        self.failures_in_a_row += 1;
        let delay = (RECONNECT_FIRST_DELAY_NS << self.failures_in_a_row.min(10)).min(RECONNECT_MAX_DELAY_NS);
        self.phase = Phase::Down { retry_at_ns: now_ns + delay };
        self.reconnects += 1;
        if context.gateways > 1 {
            self.gateway =
                (self.gateway + 1 + context.rng.below(context.gateways as u64 - 1) as usize) % context.gateways;
        }
        let (index, gateway) = (self.index, self.gateway);
        context.note(|| {
            format!(
                "host {index} lost its controller ({why}); reconnect through gateway {gateway} in {} ms",
                delay / 1_000_000
            )
        });
    }

    /// Everything due now: timers, completions, bring-up, new work, transmissions.
    pub fn service(&mut self, context: &mut GroupContext, submit_io: bool) {
        let now = context.clock.now();
        let now_ns = context.clock.elapsed_ns();
        let mut completions = Vec::new();
        for end in self.admin.iter_mut().chain(self.io.iter_mut()) {
            if end.queue.next_deadline().is_some_and(|at| at <= now) {
                end.queue.handle_timeout(now);
            }
            while let Some(completion) = end.queue.poll_completion() {
                completions.push(completion);
            }
        }
        for completion in completions {
            // A tear-down while handling an earlier one completed the rest already.
            if self.outstanding.contains_key(&completion.user_tag) {
                self.complete(context, completion);
            }
        }
        if std::mem::take(&mut self.fail_over) && self.phase == Phase::Running {
            self.tear_down(context, "path error: trying another gateway");
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
                self.submit(context, false, commands::keep_alive(), Work::KeepAlive);
            }
            if submit_io {
                self.submit_workload(context);
            }
        }
        for end in self.admin.iter_mut().chain(self.io.iter_mut()) {
            self.transmit_buffer.clear();
            if end.queue.transmit(&mut self.transmit_buffer) == 0 {
                continue;
            }
            context.send(end.link, &self.transmit_buffer, true);
        }
        // What other hosts' Preempts aim at.
        context.writing[self.index] = self.outstanding.values().filter(|entry| entry.work.is_write()).count() as u32;
        context.keys[self.index] = self.key;
    }

    fn advance_bring_up(&mut self, context: &mut GroupContext) {
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
                    context.notices.controller_ready(self.me());
                    let command = crate::host::enable_controller_command();
                    self.submit(context, false, command, Work::PropertySetEnable);
                    self.phase = Phase::Enabling;
                }
            }
            Phase::IoConnecting if ready(self.io.as_ref()).is_some() => {
                self.phase = Phase::Running;
                self.failures_in_a_row = 0;
                self.keep_alive_due_ns = now_ns;
                self.submit(context, false, commands::async_event_request(), Work::AsyncEvent);
                let (index, gateway) = (self.index, self.gateway);
                context.note(|| format!("host {index} running through gateway {gateway}"));
            }
            _ => {}
        }
    }

    fn submit(&mut self, context: &mut GroupContext, io: bool, mut command: HostCommand, work: Work) -> bool {
        let end = if io { self.io.as_mut() } else { self.admin.as_mut() };
        let Some(end) = end else {
            return false;
        };
        command.user_tag = self.next_user_tag;
        if end.queue.submit(command, context.clock.now()).is_err() {
            return false;
        }
        let link = end.link;
        let index = self.index;
        context.note(|| format!("host {index} submits {work:?} on link {link}"));
        self.outstanding
            .insert(self.next_user_tag, Outstanding { work, submitted_ns: context.clock.elapsed_ns(), link });
        self.next_user_tag += 1;
        true
    }

    fn io_in_flight(&self) -> usize {
        self.outstanding.values().filter(|entry| entry.work.is_io()).count()
    }

    fn reservation_in_flight(&self) -> bool {
        self.outstanding.values().any(|entry| matches!(entry.work, Work::Reservation { .. } | Work::Report { .. }))
    }

    fn complete(&mut self, context: &mut GroupContext, completion: HostCompletion) {
        let Some(outstanding) = self.outstanding.remove(&completion.user_tag) else {
            context.violation(format!("host {}: completion for unknown tag {}", self.index, completion.user_tag));
            return;
        };
        let status = if completion.transport_error.is_some() {
            Status::TRANSIENT_TRANSPORT_ERROR
        } else {
            completion.cqe.status
        };
        let ok = status.is_success();
        let me = self.me();
        let index = self.index;
        context.note(|| format!("host {index} completes {:?}: status {:#x}", outstanding.work, status.field()));
        context.mix(u64::from(status.field()) << 8 | u64::from(me));
        if ok {
            self.completed_ok += 1;
        }
        if status.kind() == Status::RESERVATION_CONFLICT.kind() {
            self.conflicts += 1;
        }
        let path_error =
            [Status::INTERNAL_PATH_ERROR, Status::NAMESPACE_NOT_READY].iter().any(|path| path.kind() == status.kind());
        if status.kind() == Status::ASYMMETRIC_ACCESS_TRANSITION.kind() {
            // Only a gateway whose ANA group was changing refuses with it; a
            // multipath host retries on another path.
            self.ana_transitions += 1;
            let instance = context.link_instance.get(&outstanding.link).copied();
            let now_ns = context.clock.elapsed_ns();
            if !instance.is_some_and(|instance| context.was_changing(instance, outstanding.submitted_ns, now_ns)) {
                context.violation(format!(
                    "host {index}: {:?} got ANA Transition from gateway process {instance:?}, whose ANA group was not \
                     changing",
                    outstanding.work
                ));
            }
            self.fail_over = true;
        }
        if path_error {
            // Path errors are the answer of a gateway that cannot vouch for its
            // reservations (copy unknown, or fenced), and only of one.
            let instance = context.link_instance.get(&outstanding.link).copied();
            let now_ns = context.clock.elapsed_ns();
            if !instance.is_some_and(|instance| context.had_trouble(instance, outstanding.submitted_ns, now_ns)) {
                context.violation(format!(
                    "host {index}: {:?} got path error {:#x} from gateway process {instance:?}, which vouched for its reservations all along",
                    outstanding.work,
                    status.field()
                ));
            }
            if context.rng.chance(500_000) {
                self.fail_over = true;
            }
        }
        let checked = match outstanding.work {
            Work::PropertySetEnable if ok => {
                let command = commands::set_features(
                    feature_id::NUMBER_OF_QUEUES,
                    NamespaceId::NONE,
                    number_of_queues_request(1, 1),
                    false,
                );
                self.submit(context, false, command, Work::SetQueueCount);
                self.phase = Phase::SettingQueueCount;
                Ok(())
            }
            Work::SetQueueCount if ok => {
                self.io = Some(self.open_queue(context, 1));
                self.phase = Phase::IoConnecting;
                Ok(())
            }
            Work::PropertySetEnable | Work::SetQueueCount => {
                self.tear_down(context, "bring-up command failed");
                Ok(())
            }
            Work::KeepAlive => Ok(()),
            Work::AsyncEvent if ok => self.async_event(context, completion.cqe.result_dw0),
            Work::NoticeLog if ok => {
                self.notice_log_read(context, &completion.data, outstanding.link, outstanding.submitted_ns)
            }
            Work::AsyncEvent | Work::NoticeLog => {
                self.reading_notices = false;
                Ok(())
            }
            Work::Reservation { calls_before, instance, replaced_to } => {
                if let Some(key) = replaced_to.filter(|_| ok) {
                    self.key = key;
                }
                let now_ns = context.clock.elapsed_ns();
                context.group.change_answered(instance, me, calls_before, status, now_ns)
            }
            Work::Report { floor } if ok => context.group.report_answered(&completion.data, floor),
            Work::Report { .. } => expect_path_failure(status),
            Work::Read { watch, floor } => {
                let data = ok.then_some(completion.data.as_slice());
                context.oracle.end_read(watch, data).and_then(|()| self.check_access(context, false, status, floor))
            }
            Work::Write { lba, blocks, tag, floor } => {
                let outcome = if ok {
                    WriteOutcome::Acknowledged { force_unit_access: false }
                } else if status.kind() == Status::RESERVATION_CONFLICT.kind() {
                    WriteOutcome::NotApplied
                } else {
                    WriteOutcome::Uncertain
                };
                context.oracle.end_write(lba, blocks, tag, outcome);
                self.check_access(context, true, status, floor)
            }
            Work::LockRead { lba, floor } => self.check_access(context, false, status, floor).and_then(|()| {
                if !ok {
                    return Ok(());
                }
                let value = decode_block(lba, &completion.data)?;
                self.lock_values[lba as usize] = value;
                let log = context.store.register_log(lba);
                if reference::was_current(&log, value, outstanding.submitted_ns, context.clock.elapsed_ns()) {
                    Ok(())
                } else {
                    Err(format!(
                        "lock block {lba} read as {value}, which it did not hold while the read was outstanding"
                    ))
                }
            }),
            // A miscompare, or the pair aborted because its Write was refused, is
            // checked with the Write; a reservation answer is checked here.
            Work::Compare { floor } => {
                let pair_failure = [Status::COMPARE_FAILURE, Status::ABORTED_FAILED_FUSED]
                    .iter()
                    .any(|expected| expected.kind() == status.kind());
                if pair_failure {
                    Ok(())
                } else {
                    self.check_access(context, false, status, floor)
                }
            }
            Work::CompareWrite { lba, compare, new, floor } => {
                self.compare_and_write_answered(context, lba, compare, new, floor, status, outstanding.submitted_ns)
            }
        };
        if let Err(problem) = checked {
            context.violation(format!("host {}: {problem}", self.index));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn compare_and_write_answered(
        &mut self,
        context: &mut GroupContext,
        lba: u64,
        compare: WriteTag,
        new: WriteTag,
        floor: u64,
        status: Status,
        submitted_ns: u64,
    ) -> Result<(), String> {
        let log = context.store.register_log(lba);
        if status.is_success() {
            self.swaps += 1;
            self.lock_values[lba as usize] = new;
            context.group.io_answered(self.me(), true, status, floor)?;
            return reference::check_register_swap(&log, compare, new)
                .map_err(|problem| format!("lock block {lba}: {problem}"));
        }
        if status.kind() == Status::COMPARE_FAILURE.kind() {
            if reference::was_current_throughout(&log, compare, submitted_ns, context.clock.elapsed_ns()) {
                return Err(format!("lock block {lba}: Compare Failure though it held {compare} all along"));
            }
            return Ok(());
        }
        // Aborted because its Compare failed (a miscompare or a reservation conflict
        // of the pair): the Compare was checked.
        if status.kind() == Status::ABORTED_FAILED_FUSED.kind() {
            return Ok(());
        }
        self.check_access(context, true, status, floor)
    }

    /// An asynchronous event: a reservation one starts reading log 80h; the request
    /// goes out again at once.
    fn async_event(&mut self, context: &mut GroupContext, dword0: u32) -> Result<(), String> {
        let event = AsynchronousEventCompletion::from_dword0(dword0);
        self.submit(context, false, commands::async_event_request(), Work::AsyncEvent);
        if event.log_page_id != log_id::RESERVATION_NOTIFICATION {
            return Ok(());
        }
        if event.event_type != async_event_type::IO_COMMAND_SET_SPECIFIC {
            return Err(format!("a reservation log event of type {}", event.event_type));
        }
        if !self.reading_notices {
            self.reading_notices = true;
            self.read_notice_log(context);
        }
        Ok(())
    }

    fn read_notice_log(&mut self, context: &mut GroupContext) {
        let command = commands::get_log_page(log_id::RESERVATION_NOTIFICATION, NamespaceId::BROADCAST, 0, 64);
        if !self.submit(context, false, command, Work::NoticeLog) {
            self.reading_notices = false;
        }
    }

    /// One page of log 80h: read on until it is empty.
    fn notice_log_read(
        &mut self,
        context: &mut GroupContext,
        page: &[u8],
        link: u64,
        sent_ns: u64,
    ) -> Result<(), String> {
        let empty = context.notices.page_read(self.me(), link, page, sent_ns)?;
        if empty {
            self.reading_notices = false;
        } else {
            self.read_notice_log(context);
        }
        Ok(())
    }

    /// The end: the notices owed to the controller the host still uses were read.
    pub fn check_notices(&self, context: &GroupContext, before_ns: u64) -> Result<(), String> {
        match (&self.admin, self.phase) {
            (Some(admin), Phase::Running) => context.notices.check_end(self.me(), admin.link, before_ns),
            _ => Ok(()),
        }
    }

    /// Success and Reservation Conflict are checked against the reference; a path
    /// failure is always allowed; anything else is a violation.
    fn check_access(&self, context: &mut GroupContext, write: bool, status: Status, floor: u64) -> Result<(), String> {
        if status.is_success() || status.kind() == Status::RESERVATION_CONFLICT.kind() {
            return context.group.io_answered(self.me(), write, status, floor);
        }
        expect_path_failure(status)
    }

    /// Every outstanding command must complete or fail within the command timeout.
    pub fn check_liveness(&self, context: &mut GroupContext) {
        let now_ns = context.clock.elapsed_ns();
        let limit_ns = self.settings.command_timeout_ms * 1_000_000 + LIVENESS_GRACE_NS;
        if let Some((tag, entry)) = self
            .outstanding
            .iter()
            .find(|(_, entry)| !matches!(entry.work, Work::AsyncEvent) && now_ns - entry.submitted_ns > limit_ns)
        {
            context.violation(format!(
                "host {}: command {tag} ({:?}) outstanding for {} ms, past its {} ms timeout",
                self.index,
                entry.work,
                (now_ns - entry.submitted_ns) / 1_000_000,
                self.settings.command_timeout_ms
            ));
        }
    }

    /// No I/O outstanding.
    pub fn idle(&self) -> bool {
        self.io_in_flight() == 0
    }

    /// The earliest time this host has something to do.
    pub fn next_wake_ns(&self, context: &GroupContext, working: bool) -> Option<u64> {
        let deadlines = self
            .admin
            .iter()
            .chain(self.io.iter())
            .filter_map(|end| end.queue.next_deadline())
            .map(|at| context.clock.ns_of(at));
        let phase = match self.phase {
            Phase::Down { retry_at_ns } => Some(retry_at_ns),
            Phase::Running => Some(self.keep_alive_due_ns),
            _ => None,
        };
        let workload = (working
            && self.phase == Phase::Running
            && context.io_budget > 0
            && self.io_in_flight() < self.settings.queue_depth)
            .then_some(self.next_submit_ns);
        deadlines.chain(phase).chain(workload).min()
    }
}

fn expect_path_failure(status: Status) -> Result<(), String> {
    if is_path_or_transport_failure(status) {
        Ok(())
    } else {
        Err(format!("unexpected status {:#x}", status.field()))
    }
}

//! I/O queues: one TCP connection each, driven by the thread that owns it.
//!
//! Commands carry an internal tag (an index into a per-queue table sized at
//! creation) while in flight, so the queue can resubmit them after a reconnect and
//! give the caller its own tag back; nothing is allocated per command.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_host::status::{COMMAND_ABORTED_BY_HOST, HOST_PATHING_ERROR};
use nvme_host::{HostCommand, HostCompletion, HostError, MAX_COMMAND_DATA_BYTES};
use nvme_spec::{CompletionQueueEntry, NamespaceId, QueueId, Status, SubmissionQueueEntry};

use crate::admin::queue_config;
use crate::connection::{LinkFailure, QueueConnection, QueueTls};
use crate::io_link::IoLink;
use crate::options::IoPath;
use crate::ring_connection::RingConnection;
use crate::shared::{lock, LinkStatus, Shared, MAX_COMMAND_RESENDS};
use crate::ClientError;

/// A command [`IoQueue::submit_or_return`] did not take, with why.
#[derive(Debug)]
pub struct Refused {
    /// Why it was refused.
    pub error: ClientError,
    /// The command as given (its data included).
    pub command: HostCommand,
}

impl Refused {
    fn new(error: ClientError, command: HostCommand) -> Box<Refused> {
        Box::new(Refused { error, command })
    }
}

/// One command in flight (in the queue's table).
#[derive(Clone, Copy, Debug, Default)]
struct Inflight {
    in_use: bool,
    user_tag: u64,
    sqe: SubmissionQueueEntry,
    data_in_bytes: u32,
    /// The command's `read_destination`, for a retry.
    read_destination: Option<u64>,
    /// The command's `write_source`, for a retry (its memory stays the caller's
    /// until the final completion).
    write_source: Option<nvme_host::SourceBuffer>,
    /// Times sent again (retryable status, or a new connection after a
    /// reconnect); at most [`MAX_COMMAND_RESENDS`].
    resends: u8,
    /// When the command must be over, whatever happens to its connections
    /// ([`Shared::command_deadline`]).
    deadline: Option<Instant>,
}

/// Whether the queue can talk to the controller right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Connectivity {
    Connected,
    /// Waiting for the supervisor's next association; `generation` is what was seen.
    Waiting {
        generation: u64,
    },
}

/// The queue's state; lives in the controller's slot while nobody has taken it.
#[derive(Debug)]
pub(crate) struct IoQueueInner {
    index: usize,
    connection: Option<IoLink>,
    /// Epoch of `connection`.
    epoch: u64,
    /// A connection of this epoch failed; wait for the next one.
    failed_epoch: Option<u64>,
    /// Shared generation last checked while connected (fast path).
    seen_generation: u64,
    backlog: VecDeque<HostCommand>,
    table: Vec<Inflight>,
    free: Vec<u32>,
    ready: VecDeque<HostCompletion>,
    /// io_uring could not be set up on this queue's thread: stay on the blocking path.
    ring_unavailable: bool,
    /// `ConnectOptions::fail_fast_on_path_loss`.
    fail_fast: bool,
    /// Given to every connection's host queue (see `IoQueue::set_read_destination`).
    read_destination: Option<Arc<dyn nvme_host::ReadDestination>>,
    /// Given to every connection's host queue (see `IoQueue::set_write_source`).
    write_source: Option<Arc<dyn nvme_host::WriteSource>>,
}

impl IoQueueInner {
    /// Connects I/O queue `index` (QID `index + 1`) of the current association.
    pub(crate) fn connect(shared: &Shared, index: usize) -> Result<Self, ClientError> {
        let state = shared.snapshot();
        let depth = usize::from(state.io_queue_size.max(2) - 1);
        let mut inner = IoQueueInner {
            index,
            connection: None,
            epoch: state.epoch,
            failed_epoch: None,
            seen_generation: 0,
            backlog: VecDeque::with_capacity(depth),
            table: vec![Inflight::default(); depth],
            free: (0..depth as u32).rev().collect(),
            ready: VecDeque::with_capacity(depth),
            ring_unavailable: false,
            fail_fast: shared.options.fail_fast_on_path_loss,
            read_destination: None,
            write_source: None,
        };
        inner.open(shared)?;
        Ok(inner)
    }

    fn open(&mut self, shared: &Shared) -> Result<(), ClientError> {
        let generation = shared.generation();
        let state = shared.snapshot();
        let options = &shared.options;
        let config = queue_config(
            options,
            &options.subsystem_nqn,
            QueueId(self.index as u16 + 1),
            state.io_queue_size,
            state.controller_id,
            0,
        );
        let generated = lock(&shared.generated_tls).clone();
        let tls = QueueTls::of(options.tls.as_ref(), generated.as_deref());
        let mut connection = QueueConnection::connect(options.address, config, options.connect_timeout, tls)?;
        connection.queue.set_in_capsule_data_limit(state.io_in_capsule_data_bytes);
        if let Some(destination) = &self.read_destination {
            connection.queue.set_read_destination(Arc::clone(destination));
        }
        if let Some(source) = &self.write_source {
            connection.queue.set_write_source(Arc::clone(source));
        }
        self.connection = Some(IoLink::Blocking(Box::new(connection)));
        self.epoch = state.epoch;
        self.failed_epoch = None;
        self.seen_generation = generation;
        Ok(())
    }

    pub(crate) fn depth(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.table.len() - self.free.len()
    }

    /// Makes sure the queue is connected to the current association if it can be.
    fn poll_connection(&mut self, shared: &Shared) -> Result<Connectivity, ClientError> {
        let generation = shared.generation();
        if self.connection.is_some() && generation == self.seen_generation {
            return Ok(Connectivity::Connected);
        }
        let state = shared.snapshot();
        match state.status {
            LinkStatus::Closed => {
                self.fail_everything(HostError::ConnectionLost);
                self.connection = None;
                Err(ClientError::Closed)
            }
            LinkStatus::Lost => {
                self.fail_everything(HostError::ConnectionLost);
                self.connection = None;
                Err(ClientError::ControllerLost)
            }
            LinkStatus::Reconnecting { .. } => {
                if self.connection.is_some() {
                    // Another connection of this association failed: this one is
                    // going down with it. Take its commands back now.
                    self.drop_connection(shared, ClientError::ControllerLost, false);
                }
                self.fail_fast_backlog();
                Ok(Connectivity::Waiting { generation })
            }
            LinkStatus::Live => {
                if self.connection.is_some() && self.epoch == state.epoch {
                    self.seen_generation = generation;
                    return Ok(Connectivity::Connected);
                }
                if self.failed_epoch == Some(state.epoch) {
                    self.fail_fast_backlog();
                    return Ok(Connectivity::Waiting { generation });
                }
                if self.connection.is_some() {
                    self.drop_connection(shared, ClientError::ControllerLost, false);
                }
                if self.index >= state.io_queue_count {
                    tracing::warn!(
                        index = self.index,
                        granted = state.io_queue_count,
                        "I/O queue not granted after reconnect"
                    );
                    self.fail_everything(HostError::ConnectionLost);
                    return Err(ClientError::ControllerLost);
                }
                match self.open(shared) {
                    Ok(()) => {
                        tracing::info!(queue = self.index + 1, epoch = state.epoch, "I/O queue connected");
                        self.submit_backlog(shared);
                        Ok(Connectivity::Connected)
                    }
                    Err(error) => {
                        tracing::warn!(queue = self.index + 1, %error, "I/O queue connect failed");
                        self.failed_epoch = Some(state.epoch);
                        let cause = match &error {
                            ClientError::Protocol(error) => error.clone(),
                            ClientError::Connect { source, .. } | ClientError::Io { source, .. } => {
                                HostError::ConnectionFailed { kind: source.kind() }
                            }
                            _ => HostError::ConnectionLost,
                        };
                        shared.request_reconnect(state.epoch, cause);
                        self.fail_fast_backlog();
                        Ok(Connectivity::Waiting { generation })
                    }
                }
            }
        }
    }

    /// The connection ended: keep its commands for resubmission and, when `report`
    /// is set, ask for a new association.
    fn drop_connection(&mut self, shared: &Shared, error: ClientError, report: bool) {
        let Some(connection) = self.connection.take() else { return };
        let failure = connection.into_failure(error);
        if report {
            // Recorded before the commands are looked at, so one that gives up
            // now names this failure.
            self.failed_epoch = Some(self.epoch);
            shared.request_reconnect(self.epoch, failure.cause.clone());
        }
        self.take_failure(shared, failure);
    }

    fn take_failure(&mut self, shared: &Shared, failure: LinkFailure) {
        let LinkFailure { error, queue_error, abandoned, completed, .. } = failure;
        tracing::warn!(queue = self.index + 1, %error, "I/O queue connection ended");
        for completion in completed {
            self.on_completion(completion);
        }
        let timed_out = match queue_error {
            Some(HostError::CommandTimeout { command_id }) => Some(command_id),
            _ => None,
        };
        // Abandoned commands are older than anything in the backlog: they go first.
        for command in abandoned.into_iter().rev() {
            let resends = self.table.get(command.user_tag as usize).map_or(0, |entry| entry.resends);
            if timed_out == Some(command.sqe.command_id().0) {
                // Nothing came in time: a plain timeout on the first connection,
                // the whole story once the command had been sent again.
                let error = if resends == 0 {
                    HostError::CommandTimeout { command_id: command.sqe.command_id().0 }
                } else {
                    shared.gave_up(resends, true)
                };
                self.fail_command(command, COMMAND_ABORTED_BY_HOST.with_do_not_retry(), error);
            } else if !self.fail_fast && resends >= MAX_COMMAND_RESENDS {
                self.fail_command(command, HOST_PATHING_ERROR.with_do_not_retry(), shared.gave_up(resends, false));
            } else {
                if let Some(entry) = self.table.get_mut(command.user_tag as usize) {
                    entry.resends += u8::from(!self.fail_fast);
                }
                self.backlog.push_front(command);
            }
        }
        self.fail_fast_backlog();
    }

    /// Fails the waiting commands whose deadline has passed (they never go out
    /// again); returns the earliest deadline of those still waiting.
    fn expire_backlog(&mut self, shared: &Shared, now: Instant) -> Option<Instant> {
        let mut earliest: Option<Instant> = None;
        for _ in 0..self.backlog.len() {
            let Some(command) = self.backlog.pop_front() else { break };
            let entry = self.table.get(command.user_tag as usize).copied().unwrap_or_default();
            match entry.deadline {
                Some(deadline) if deadline <= now => {
                    self.fail_command(
                        command,
                        HOST_PATHING_ERROR.with_do_not_retry(),
                        shared.gave_up(entry.resends, true),
                    );
                }
                deadline => {
                    earliest = match (earliest, deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    self.backlog.push_back(command);
                }
            }
        }
        earliest
    }

    /// With fail-fast on: commands waiting for a connection complete now with Host
    /// Pathing Error, DNR clear (a multipath host retries them on another path).
    fn fail_fast_backlog(&mut self) {
        if !self.fail_fast || self.connection.is_some() {
            return;
        }
        while let Some(command) = self.backlog.pop_front() {
            self.fail_command(command, HOST_PATHING_ERROR, HostError::ConnectionLost);
        }
    }

    /// Completes an internal-tagged command with a host-made status (DNR as the
    /// caller set it).
    fn fail_command(&mut self, command: HostCommand, status: Status, error: HostError) {
        let cqe = CompletionQueueEntry {
            command_id: command.sqe.command_id(),
            submission_queue_id: QueueId(self.index as u16 + 1),
            status,
            ..CompletionQueueEntry::default()
        };
        let completion =
            HostCompletion { user_tag: command.user_tag, cqe, data: command.data_out, transport_error: Some(error) };
        self.deliver(completion);
    }

    /// Fails every command in flight (the controller is gone for good).
    fn fail_everything(&mut self, error: HostError) {
        if let Some(connection) = self.connection.take() {
            let failure = connection.into_failure(ClientError::ControllerLost);
            for completion in failure.completed {
                self.on_completion(completion);
            }
            self.backlog.extend(failure.abandoned);
        }
        while let Some(command) = self.backlog.pop_front() {
            self.fail_command(command, HOST_PATHING_ERROR.with_do_not_retry(), error.clone());
        }
    }

    /// A completion from the connection (internal tag): retry or hand out.
    fn on_completion(&mut self, mut completion: HostCompletion) {
        let Some(entry) = self.table.get_mut(completion.user_tag as usize).filter(|entry| entry.in_use) else {
            tracing::error!(tag = completion.user_tag, "completion for a command not in flight");
            return;
        };
        let status = completion.cqe.status;
        let retryable = !status.do_not_retry()
            && [Status::ABORTED_SQ_DELETION, Status::TRANSIENT_TRANSPORT_ERROR, Status::DATA_TRANSFER_ERROR]
                .contains(&status.kind());
        if retryable && entry.resends < MAX_COMMAND_RESENDS {
            entry.resends += 1;
            tracing::debug!(status = ?status, resends = entry.resends, "retrying command");
            let mut data = std::mem::take(&mut completion.data);
            if entry.data_in_bytes > 0 {
                data.clear();
            }
            self.backlog.push_back(HostCommand {
                sqe: entry.sqe,
                data_out: data,
                data_in_bytes: entry.data_in_bytes,
                user_tag: completion.user_tag,
                read_destination: entry.read_destination,
                write_source: entry.write_source,
            });
            return;
        }
        self.deliver(completion);
    }

    /// Frees the table entry and queues the completion for the caller.
    fn deliver(&mut self, mut completion: HostCompletion) {
        let index = completion.user_tag as usize;
        if let Some(entry) = self.table.get_mut(index).filter(|entry| entry.in_use) {
            entry.in_use = false;
            completion.user_tag = entry.user_tag;
            self.free.push(index as u32);
            self.ready.push_back(completion);
        }
    }

    /// Sends backlog commands while the queue has room (each bounded by its own
    /// deadline; one past it fails instead); writes them out.
    fn submit_backlog(&mut self, shared: &Shared) {
        if self.connection.is_none() {
            return;
        }
        let now = Instant::now();
        self.expire_backlog(shared, now);
        let Some(connection) = self.connection.as_mut() else { return };
        let queue = connection.queue();
        while queue.outstanding() < queue.capacity() {
            let Some(command) = self.backlog.pop_front() else { break };
            let deadline = self.table.get(command.user_tag as usize).and_then(|entry| entry.deadline);
            if let Err(error) = queue.submit_with_deadline(command, now, deadline) {
                self.backlog.push_front(error.into_command());
                break;
            }
        }
        if let Err(error) = connection.flush() {
            self.drop_connection(shared, error, true);
        }
    }

    /// Moves finished commands out of the connection.
    fn collect(&mut self, shared: &Shared) {
        loop {
            let Some(connection) = self.connection.as_mut() else { return };
            let Some(completion) = connection.queue().poll_completion() else { break };
            self.on_completion(completion);
        }
        let failure = self.connection.as_mut().and_then(IoLink::queue_failure);
        if let Some(error) = failure {
            self.drop_connection(shared, error, true);
        } else if !self.backlog.is_empty() {
            self.submit_backlog(shared);
        }
    }

    /// Takes `command` for sending; hands it back with the reason when refused.
    pub(crate) fn submit(&mut self, shared: &Shared, mut command: HostCommand) -> Result<(), Box<Refused>> {
        if command.data_out.len() > MAX_COMMAND_DATA_BYTES as usize || command.data_in_bytes > MAX_COMMAND_DATA_BYTES {
            let error =
                ClientError::InvalidArgument(format!("command data larger than {MAX_COMMAND_DATA_BYTES} bytes"));
            return Err(Refused::new(error, command));
        }
        let source_bytes = command.write_source.map_or(0, |buffer| buffer.length);
        if source_bytes > MAX_COMMAND_DATA_BYTES {
            let error =
                ClientError::InvalidArgument(format!("command data larger than {MAX_COMMAND_DATA_BYTES} bytes"));
            return Err(Refused::new(error, command));
        }
        if (!command.data_out.is_empty() || source_bytes > 0) && command.data_in_bytes > 0 {
            let error = ClientError::InvalidArgument("command moves data in both directions".into());
            return Err(Refused::new(error, command));
        }
        // Checked here, since the host queue would refuse it after every reconnect.
        if command.write_source.is_some() && (self.write_source.is_none() || !command.data_out.is_empty()) {
            let error = ClientError::InvalidArgument(
                "write_source needs a write source on the queue (IoQueue::set_write_source) and no data_out".into(),
            );
            return Err(Refused::new(error, command));
        }
        if let Err(error) = self.poll_connection(shared) {
            return Err(Refused::new(error, command));
        }
        let Some(index) = self.free.pop() else { return Err(Refused::new(ClientError::QueueFull, command)) };
        self.table[index as usize] = Inflight {
            in_use: true,
            user_tag: command.user_tag,
            sqe: command.sqe,
            data_in_bytes: command.data_in_bytes,
            read_destination: command.read_destination,
            write_source: command.write_source,
            resends: 0,
            deadline: shared.command_deadline(Instant::now()),
        };
        command.user_tag = u64::from(index);
        self.backlog.push_back(command);
        self.submit_backlog(shared);
        Ok(())
    }

    pub(crate) fn reap(
        &mut self,
        shared: &Shared,
        min_completions: usize,
        timeout: Duration,
        out: &mut Vec<HostCompletion>,
    ) -> Result<usize, ClientError> {
        let deadline = Instant::now() + timeout;
        let start = out.len();
        let mut polled_once = false;
        loop {
            out.extend(self.ready.drain(..));
            let got = out.len() - start;
            if (got >= min_completions && (min_completions > 0 || polled_once)) || self.in_flight() == 0 {
                return Ok(got);
            }
            if polled_once && Instant::now() >= deadline {
                return Ok(got);
            }
            polled_once = true;
            let connectivity = match self.poll_connection(shared) {
                Ok(connectivity) => connectivity,
                Err(error) => {
                    out.extend(self.ready.drain(..));
                    let got = out.len() - start;
                    return if got > 0 { Ok(got) } else { Err(error) };
                }
            };
            match connectivity {
                Connectivity::Waiting { generation } => {
                    let earliest = self.expire_backlog(shared, Instant::now());
                    if !self.ready.is_empty() {
                        continue; // failed fast or out of time: hand them out first
                    }
                    if min_completions == 0 {
                        out.extend(self.ready.drain(..));
                        return Ok(out.len() - start);
                    }
                    shared.wait_for_change(generation, earliest.map_or(deadline, |earliest| earliest.min(deadline)));
                }
                Connectivity::Connected => {
                    let Some(connection) = self.connection.as_mut() else { continue };
                    let result = if min_completions == 0 {
                        connection.receive_available()
                    } else {
                        connection.receive_until(deadline)
                    };
                    // R2T answers and anything else the received PDUs asked for.
                    let result = result.and_then(|()| connection.flush_after_receive());
                    if let Err(error) = result {
                        self.drop_connection(shared, error, true);
                    }
                    self.collect(shared);
                }
            }
        }
    }

    /// Waits for everything in flight and discards it (bounded).
    pub(crate) fn drain(&mut self, shared: &Shared, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut sink = Vec::new();
        while self.in_flight() > 0 && Instant::now() < deadline {
            sink.clear();
            if self.reap(shared, 1, deadline.saturating_duration_since(Instant::now()), &mut sink).is_err() {
                break;
            }
        }
        self.ready.clear();
    }

    /// Moves the connection onto the calling thread's ring when the options ask
    /// for one (first use, or after a reconnect). A ring left behind on another
    /// thread cannot be driven from here: that connection is given up like a
    /// failed one and the association reconnects.
    pub(crate) fn bind_to_thread(&mut self, shared: &Shared) {
        let IoPath::Ring(poll_mode) = shared.options.io_path else { return };
        match self.connection.take() {
            Some(IoLink::Blocking(connection)) if !self.ring_unavailable => {
                match RingConnection::attach(*connection, poll_mode) {
                    Ok(ring) => self.connection = Some(IoLink::Ring(Box::new(ring))),
                    Err(refused) => {
                        let (connection, error) = *refused;
                        tracing::warn!(queue = self.index + 1, %error, "no io_uring for this I/O queue; using blocking sockets");
                        self.ring_unavailable = true;
                        self.connection = Some(IoLink::Blocking(Box::new(connection)));
                    }
                }
            }
            Some(IoLink::Ring(ring)) if !ring.is_usable_here() => {
                let address = shared.options.address;
                self.connection = Some(IoLink::Ring(ring));
                let source = std::io::Error::other("I/O queue driven from a new thread after use");
                self.drop_connection(shared, ClientError::Io { address, source }, true);
            }
            other => self.connection = other,
        }
    }

    /// Moves the connection back onto a blocking socket, so the queue can be
    /// used from any thread again (it is going back to the controller).
    pub(crate) fn unbind_from_thread(&mut self, shared: &Shared) {
        let Some(IoLink::Ring(ring)) = self.connection.take() else { return };
        if !ring.is_usable_here() {
            self.connection = Some(IoLink::Ring(ring));
            let source = std::io::Error::other("I/O queue returned from a thread other than its ring's");
            self.drop_connection(shared, ClientError::Io { address: shared.options.address, source }, true);
            return;
        }
        match (*ring).detach() {
            Ok(connection) => self.connection = Some(IoLink::Blocking(Box::new(connection))),
            Err(failure) => {
                self.failed_epoch = Some(self.epoch);
                shared.request_reconnect(self.epoch, failure.cause.clone());
                self.take_failure(shared, *failure);
            }
        }
    }

    /// Closes the connection without waiting.
    pub(crate) fn close(&mut self) {
        self.connection = None;
    }
}

/// One I/O queue handed to a caller thread: one TCP connection, not shared. See the
/// crate documentation for how it reconnects. Dropping it waits (at most the command
/// timeout) for its commands to finish and gives it back to the controller.
#[derive(Debug)]
pub struct IoQueue {
    pub(crate) shared: Arc<Shared>,
    pub(crate) inner: Option<IoQueueInner>,
}

impl IoQueue {
    fn inner(&mut self) -> Result<&mut IoQueueInner, ClientError> {
        self.inner.as_mut().ok_or(ClientError::Closed)
    }

    /// Commands that may be in flight at once (queue size - 1).
    pub fn depth(&self) -> usize {
        self.inner.as_ref().map_or(0, IoQueueInner::depth)
    }

    /// Reads submitted with a `read_destination` from now on have their data written
    /// through `destination` as it arrives, on this connection and every one after a
    /// reconnect (see [`nvme_host::ReadDestination`]); their completions carry no data.
    pub fn set_read_destination(&mut self, destination: Arc<dyn nvme_host::ReadDestination>) {
        if let Some(inner) = self.inner.as_mut() {
            if let Some(link) = inner.connection.as_mut() {
                link.queue().set_read_destination(Arc::clone(&destination));
            }
            inner.read_destination = Some(destination);
        }
    }

    /// Writes submitted with a `write_source` from now on are sent straight from the
    /// memory `source` lends, on this connection and every one after a reconnect
    /// (see [`nvme_host::WriteSource`]); their completions carry no data. Such a
    /// write may be sent again (retry, reconnect) until its completion is reaped, so
    /// the memory must stay readable and unchanged until then.
    pub fn set_write_source(&mut self, source: Arc<dyn nvme_host::WriteSource>) {
        if let Some(inner) = self.inner.as_mut() {
            if let Some(link) = inner.connection.as_mut() {
                link.queue().set_write_source(Arc::clone(&source));
            }
            inner.write_source = Some(source);
        }
    }

    /// Commands submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.inner.as_ref().map_or(0, IoQueueInner::in_flight)
    }

    /// The block size of `nsid` in bytes, from the identify data cached at connect
    /// (and refreshed on namespace change events).
    pub fn block_size(&self, nsid: NamespaceId) -> Option<u32> {
        self.shared.cached_block_size(nsid)
    }

    /// Queues a command; never waits for the target. On a blocking socket it is
    /// written at once; on the ring it leaves at the next `reap`, in one send with
    /// everything submitted since the last one. While
    /// the controller reconnects the command is held and sent after. Fails with
    /// `QueueFull` when `depth()` commands are in flight, `ControllerLost` /
    /// `Closed` once the controller is gone.
    pub fn submit(&mut self, command: HostCommand) -> Result<(), ClientError> {
        self.submit_or_return(command).map_err(|refused| refused.error)
    }

    /// [`IoQueue::submit`] that hands the command back (with its data) when it
    /// is refused, so the caller can send it elsewhere.
    pub fn submit_or_return(&mut self, command: HostCommand) -> Result<(), Box<Refused>> {
        let shared = Arc::clone(&self.shared);
        let Some(inner) = self.inner.as_mut() else { return Err(Refused::new(ClientError::Closed, command)) };
        inner.bind_to_thread(&shared);
        inner.submit(&shared, command)
    }

    /// Waits until at least `min_completions` completions are available or `timeout`
    /// passes, and appends every available one to `out` (so possibly more than
    /// asked, or fewer on timeout). Also sends what is pending. With
    /// `min_completions` 0 it only collects what has already arrived. Returns the
    /// number appended; returns early when nothing is in flight.
    ///
    /// Commands that could not be delivered before the controller loss timeout
    /// complete with status Host Pathing Error (SCT 3h, SC 70h, DNR) and
    /// `transport_error` set; a command that timed out completes with Command Aborted
    /// By Host (SCT 3h, SC 71h, DNR).
    pub fn reap(
        &mut self,
        min_completions: usize,
        timeout: Duration,
        out: &mut Vec<HostCompletion>,
    ) -> Result<usize, ClientError> {
        let shared = Arc::clone(&self.shared);
        let inner = self.inner()?;
        inner.bind_to_thread(&shared);
        inner.reap(&shared, min_completions, timeout, out)
    }
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        let Some(mut inner) = self.inner.take() else { return };
        inner.drain(&self.shared, self.shared.options.command_timeout);
        inner.unbind_from_thread(&self.shared);
        if let Some(slot) = self.shared.io_slots.get(inner.index) {
            *lock(slot) = Some(inner);
        }
    }
}

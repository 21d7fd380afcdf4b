//! Commands held by a QoS limit (`qos`): an I/O command over its namespace's or its
//! host's limit books its place and waits (slot state `Throttled`) on the
//! connection's timer until then, so the runtime thread sleeps if nothing else is
//! ready. It keeps its slot, so it counts against the queue depth as any command
//! does. It is delayed, never failed; Abort completes it with Command Abort
//! Requested; a closing connection drops it like a parked command (nothing of it
//! reached storage).
//!
//! What counts: every command that reaches a namespace's storage counts one I/O
//! (Read, Write, Compare, Verify, Flush, Write Zeroes, Dataset Management, Copy);
//! Read, Compare and Verify count their blocks as read bytes, Write as written bytes,
//! the others no bytes. Fabrics, reservation and admin commands are never throttled,
//! nor is a fused Compare and Write (its pair holds a range other writes wait for).

use std::time::{Duration, Instant};

use nvme_spec::opcode::IoOpcode;
use nvme_spec::{Status, SubmissionQueueEntry};

use crate::connection::Connection;
use crate::namespaces::Namespace;
use crate::qos::{IoDirection, QosBuckets, QOS_RECHECK_INTERVAL_MS};
use crate::slots::{FusedLink, SlotState};

/// One command waiting for its limits.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    slot: u16,
    /// When its booking lets it run.
    release_at: Instant,
    /// When it started waiting (the throttled time counted at release).
    since: Instant,
    /// The generations of the namespace's and the host's limits it booked under.
    generations: (u64, u64),
    /// The slot's state before it waited (it goes back to it to run).
    state: SlotState,
}

/// The commands a connection holds for their limits. Room for the whole queue is
/// taken when the first command is held (not at Connect: a connection never held
/// to a limit costs nothing here), so holding one later allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct ThrottledCommands {
    waiting: Vec<Waiting>,
    /// The queue's depth: the room taken at the first hold.
    depth: u16,
}

impl ThrottledCommands {
    /// Room for `depth` commands (the queue's, at Connect), taken at the first hold.
    pub(crate) fn with_depth(depth: u16) -> Self {
        ThrottledCommands { waiting: Vec::new(), depth }
    }

    /// When the next command may run, or its limits must be looked at again.
    pub(crate) fn next_check(&self, now: Instant) -> Option<Instant> {
        let earliest = self.waiting.iter().map(|waiting| waiting.release_at).min()?;
        Some(earliest.min(now + Duration::from_millis(QOS_RECHECK_INTERVAL_MS)))
    }

    /// Commands waiting.
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Forgets every waiting command (the connection closed).
    pub(crate) fn clear(&mut self) {
        self.waiting.clear();
    }
}

/// What a command costs against the limits: its direction and bytes, or `None`
/// when it is never throttled.
fn cost(sqe: &SubmissionQueueEntry, block_size_bytes: u32) -> Option<(IoDirection, u64)> {
    let bytes = u64::from(sqe.block_count()) * u64::from(block_size_bytes);
    match IoOpcode::from_u8(sqe.opcode())? {
        IoOpcode::Read | IoOpcode::Compare | IoOpcode::Verify => Some((IoDirection::Read, bytes)),
        IoOpcode::Write => Some((IoDirection::Write, bytes)),
        IoOpcode::Flush | IoOpcode::WriteZeroes | IoOpcode::DatasetManagement | IoOpcode::Copy => {
            Some((IoDirection::Write, 0))
        }
        _ => None,
    }
}

/// Books one command against the namespace's limits and the host's; returns when
/// it may run.
fn book(namespace: &Namespace, host: Option<&QosBuckets>, now: Instant, direction: IoDirection, bytes: u64) -> Instant {
    let own = namespace.qos.namespace.reserve(now, direction, bytes);
    host.map_or(own, |host| own.max(host.reserve(now, direction, bytes)))
}

/// The generations of the namespace's limits and the host's.
fn generations(namespace: &Namespace, host: Option<&QosBuckets>) -> (u64, u64) {
    (namespace.qos.namespace.generation(), host.map_or(0, QosBuckets::generation))
}

impl Connection {
    /// Takes room for a queue of `depth` throttled commands (at Connect).
    pub(crate) fn make_room_for_throttled(&mut self, depth: u16) {
        self.throttled = ThrottledCommands::with_depth(depth);
    }

    /// Books the command in `slot_index` against its limits; true when it must wait
    /// (it is then held and runs from `release_throttled`). A command admitted once
    /// (run again after a fused pair's range freed) is not booked twice. Without a
    /// limit: two relaxed loads; with one, a compare-and-swap per limit (no reference
    /// count is touched: the namespace's is shared by every thread).
    pub(crate) fn throttle(&mut self, slot_index: u16, now: Instant) -> bool {
        let slot = self.slots.slot_ref(slot_index);
        if slot.qos_admitted || slot.fused != FusedLink::None {
            return false;
        }
        let sqe = slot.sqe;
        let namespace_id = sqe.namespace_id();
        let Some(namespace) = self.view.get(namespace_id) else { return false };
        let host = self.view.host_qos(namespace_id).map(|host| &**host).filter(|host| host.is_active());
        if !namespace.qos.namespace.is_active() && host.is_none() {
            return false;
        }
        // A path that serves no I/O for the namespace (ANA) answers at once, so the
        // host fails over without waiting for a budget it would not use.
        if self.target.ana.check_io(namespace.ana_group).is_err() {
            return false;
        }
        let Some((direction, bytes)) = cost(&sqe, namespace.geometry().block_size_bytes) else { return false };
        let release_at = book(namespace, host, now, direction, bytes);
        let generations = generations(namespace, host);
        let slot = self.slots.slot(slot_index);
        slot.qos_admitted = true;
        if release_at <= now {
            return false;
        }
        let state = std::mem::replace(&mut slot.state, SlotState::Throttled);
        // Room for the whole queue is taken once, at the first hold: later pushes
        // never allocate.
        if self.throttled.waiting.capacity() == 0 {
            self.throttled.waiting.reserve_exact(usize::from(self.throttled.depth.max(1)));
        }
        self.throttled.waiting.push(Waiting { slot: slot_index, release_at, since: now, generations, state });
        self.timers.throttle_check_at = self.throttled.next_check(now);
        true
    }

    /// Runs the throttled commands whose time came, and books again those whose
    /// limits changed while they waited (a removed or raised limit releases them).
    pub(crate) fn release_throttled(&mut self, now: Instant) {
        if self.throttled.waiting.is_empty() {
            self.timers.throttle_check_at = None;
            return;
        }
        // An idle queue's Aborts are otherwise looked at only every second.
        self.serve_abort_requests();
        let mut index = 0;
        while let Some(waiting) = self.throttled.waiting.get_mut(index) {
            let sqe = self.slots.slot_ref(waiting.slot).sqe;
            let namespace_id = sqe.namespace_id();
            match self.view.get(namespace_id) {
                Some(namespace) => {
                    let host = self.view.host_qos(namespace_id).map(|host| &**host);
                    let now_generations = generations(namespace, host);
                    if now_generations != waiting.generations {
                        let (direction, bytes) =
                            cost(&sqe, namespace.geometry().block_size_bytes).unwrap_or((IoDirection::Write, 0));
                        waiting.release_at = book(namespace, host, now, direction, bytes);
                        waiting.generations = now_generations;
                    }
                }
                // The namespace went away: the command runs now and fails as it would.
                None => waiting.release_at = now,
            }
            if waiting.release_at > now {
                index += 1;
                continue;
            }
            let waiting = self.throttled.waiting.swap_remove(index);
            self.run_released(waiting, now);
        }
        self.timers.throttle_check_at = self.throttled.next_check(now);
    }

    fn run_released(&mut self, waiting: Waiting, now: Instant) {
        let namespace_id = self.slots.slot_ref(waiting.slot).sqe.namespace_id();
        let waited = now.saturating_duration_since(waiting.since);
        if let Some(namespace) = self.view.get(namespace_id) {
            namespace.qos.namespace.count_throttled(waited);
        }
        if let Some(host) = self.view.host_qos(namespace_id) {
            host.count_throttled(waited);
        }
        let slot = self.slots.slot(waiting.slot);
        slot.state = waiting.state;
        slot.qos_held_microseconds = slot.qos_held_microseconds.saturating_add(waited.as_micros() as u64);
        let outcome = self.execute_io(waiting.slot, now);
        self.finish(waiting.slot, outcome);
    }

    /// Aborts the throttled command with this command identifier, if one waits; true
    /// when it did (the command completed with Command Abort Requested).
    pub(crate) fn abort_throttled(&mut self, command: nvme_spec::CommandId) -> bool {
        let Some(position) = self
            .throttled
            .waiting
            .iter()
            .position(|waiting| self.slots.slot_ref(waiting.slot).sqe.command_id() == command)
        else {
            return false;
        };
        let waiting = self.throttled.waiting.swap_remove(position);
        let slot = self.slots.slot(waiting.slot);
        let buffer = std::mem::take(&mut slot.buffer);
        self.pool.give(buffer);
        self.complete(waiting.slot, Status::ABORTED_BY_REQUEST, 0);
        true
    }

    /// True when a throttled command with this identifier waits.
    pub(crate) fn is_throttled(&self, command: nvme_spec::CommandId) -> bool {
        self.throttled.waiting.iter().any(|waiting| self.slots.slot_ref(waiting.slot).sqe.command_id() == command)
    }

    /// Commands held by QoS limits on this connection.
    pub fn throttled_commands(&self) -> usize {
        self.throttled.len()
    }
}

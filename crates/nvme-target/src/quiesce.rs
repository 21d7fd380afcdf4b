//! Command quiesce: what a dead connection started must finish before its host may
//! start again.
//!
//! A write whose connection dies stays in flight at storage. Were the connection
//! dropped at once, that write could land after the host reconnected and wrote the
//! same blocks again, silently replacing acknowledged data with older data (the
//! simulator found exactly this). So:
//!
//! - a closed connection keeps its backend queues and is drained: the runtime calls
//!   [`Connection::drain`] until it returns true, reaping completions nobody will be
//!   told about, and drops the connection then;
//! - a controller is settled when none of its queues is draining and, once torn
//!   down, all of them are closed and drained;
//! - a host's Connect (admin or I/O) to a subsystem is held while a controller of the
//!   same host (Host NQN and Host Identifier) there is not settled. The old
//!   controller may well be alive: a host that lost one I/O connection tears its
//!   whole association down and reconnects while the target may not have seen its
//!   admin connection go (the simulator found this case right after the first).
//!
//! Both waits end after `TargetSettings::command_quiesce_timeout_ms` even if storage
//! never answers: the requests are then let go, logged and counted
//! (`quiesce_timeouts`). What this does not cover: a connection the target has not
//! seen die yet (its controller is live until keep-alive expires), and other paths
//! of a multipath host; there the host must wait out its own command timeouts
//! before it rewrites blocks a lost write may still reach.

use std::time::{Duration, Instant};

use nvme_spec::fabrics::{ConnectCommand, ConnectData, CONNECT_DATA_BYTES};
use nvme_spec::QueueId;

use crate::connection::Connection;
use crate::limits::{MAX_IO_CONNECT_HOLD_MS, QUIESCE_CHECK_INTERVAL_MS};

/// One connection's part: its count in its controller, its drain, a held Connect.
#[derive(Debug, Default)]
pub(crate) struct QueueQuiesce {
    /// The connection counts in its controller's unquiet queues.
    counted: bool,
    /// The connection counts in its controller's draining queues.
    draining: bool,
    /// Closed: the drain gives up on storage then (set at the first drain call).
    drain_deadline: Option<Instant>,
    /// A Connect waiting for the host's previous controller to be quiet.
    held_connect: Option<HeldConnect>,
}

#[derive(Debug, Clone, Copy)]
struct HeldConnect {
    slot: u16,
    since: Instant,
    /// When it proceeds whatever the previous controller's state.
    until: Instant,
    /// Next look at the previous controller.
    check_at: Instant,
}

impl QueueQuiesce {
    /// When the held Connect or the drain next needs a look.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        match (self.held_connect, self.drain_deadline) {
            (Some(held), _) => Some(held.check_at),
            (None, deadline) => deadline,
        }
    }
}

impl Connection {
    /// The queue joined its controller: it counts until drained.
    pub(crate) fn count_in_controller(&mut self) {
        if let Some(binding) = &self.binding {
            if !self.quiesce.counted {
                binding.controller.queue_connected();
                self.quiesce.counted = true;
            }
        }
    }

    /// After [`Connection::handle_closed`]: reaps what storage finished (answering no
    /// one) and returns true once nothing this connection started is in flight, or
    /// `command_quiesce_timeout_ms` after the first call. Then the queues are dropped
    /// and the controller's count released; the connection may be dropped. Call
    /// again when storage wakes the thread, while `has_pending_storage`, and at
    /// `next_deadline`.
    pub fn drain(&mut self, now: Instant) -> bool {
        self.now = now;
        self.handle_closed();
        self.poll_storage(now);
        let in_flight = self.storage_in_flight();
        if in_flight > 0 {
            if !self.quiesce.draining {
                if let Some(binding) = &self.binding {
                    binding.controller.queue_draining();
                    self.target.retiring.watch(&binding.controller);
                    self.quiesce.draining = true;
                }
            }
            let timeout = self.quiesce_timeout();
            let deadline = *self.quiesce.drain_deadline.get_or_insert(now + timeout);
            if now < deadline {
                return false;
            }
            crate::stats::TargetCounters::count(&self.target.counters.quiesce_timeouts);
            tracing::error!(peer = %self.peer, requests = in_flight, timeout_ms = timeout.as_millis() as u64,
                "storage requests of a closed connection still in flight after command_quiesce_timeout_ms; \
                 letting them go (they may still land)");
        }
        self.finish_drain();
        true
    }

    /// The end of a connection's life: ranges it held are free, its queues closed, its
    /// controller no longer waits for it. Also from `Drop`, so nothing is left counted.
    pub(crate) fn finish_drain(&mut self) {
        self.release_all_held_ranges();
        self.storage.clear();
        if let Some(binding) = &self.binding {
            if std::mem::take(&mut self.quiesce.counted) {
                binding.controller.queue_quiet();
            }
            if std::mem::take(&mut self.quiesce.draining) {
                binding.controller.queue_drained();
            }
        }
        self.quiesce.drain_deadline = None;
    }

    /// Storage requests of every backend queue of this connection.
    pub(crate) fn storage_in_flight(&self) -> usize {
        self.storage.in_flight()
    }

    /// True when the Connect in `slot_index` must wait for a controller of its host to
    /// settle (it is then held and retried by `check_held_connect`).
    pub(crate) fn connect_must_wait(&mut self, slot_index: u16, now: Instant) -> bool {
        let Some(previous) = self.previous_controller_busy(slot_index) else {
            if let Some(held) = self.quiesce.held_connect.take() {
                tracing::info!(peer = %self.peer, waited_ms = now.saturating_duration_since(held.since).as_millis() as u64,
                    "Connect released: the host's other controller settled");
            }
            return false;
        };
        let check_at = now + Duration::from_millis(QUIESCE_CHECK_INTERVAL_MS);
        match self.quiesce.held_connect {
            None => {
                // Linux gives up on an I/O queue's Connect after its I/O timeout (30 s
                // by default), on the admin queue's after 60 s.
                let limit = match self.connect_queue(slot_index).is_some_and(QueueId::is_admin) {
                    true => self.quiesce_timeout(),
                    false => self.quiesce_timeout().min(Duration::from_millis(MAX_IO_CONNECT_HOLD_MS)),
                };
                let until = now + limit;
                tracing::info!(peer = %self.peer, previous_controller = previous,
                    "Connect held: requests of a dead queue of the host are still at storage");
                self.quiesce.held_connect = Some(HeldConnect { slot: slot_index, since: now, until, check_at });
                // A held Connect is not an idle socket.
                self.timers.setup_deadline =
                    self.timers.setup_deadline.map(|deadline| deadline.max(until + Duration::from_secs(1)));
                true
            }
            Some(held) if now >= held.until => {
                self.quiesce.held_connect = None;
                crate::stats::TargetCounters::count(&self.target.counters.quiesce_timeouts);
                tracing::error!(peer = %self.peer, previous_controller = previous,
                    "Connect proceeds although requests of a dead queue of the host are still at storage \
                     after command_quiesce_timeout_ms");
                false
            }
            Some(held) => {
                self.quiesce.held_connect = Some(HeldConnect { check_at, ..held });
                true
            }
        }
    }

    /// Timer: looks again at a held Connect.
    pub(crate) fn check_held_connect(&mut self, now: Instant) {
        let Some(held) = self.quiesce.held_connect else { return };
        if now >= held.check_at {
            self.execute_connect(held.slot, now);
        }
    }

    fn quiesce_timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.target.settings.command_quiesce_timeout_ms))
    }

    /// For a Connect to an I/O subsystem: the CNTLID of a controller of the same host
    /// there that is not settled.
    fn previous_controller_busy(&mut self, slot_index: u16) -> Option<u16> {
        let slot = self.slots.slot(slot_index);
        let sqe = slot.sqe;
        if !sqe.is_connect() {
            return None;
        }
        let raw: &[u8; CONNECT_DATA_BYTES] = slot.buffer.get(..CONNECT_DATA_BYTES)?.try_into().ok()?;
        let data = ConnectData::decode(raw);
        let subsystem = self.target.subsystem_by_nqn(data.subsystem_nqn_str()?)?;
        let host_nqn = data.host_nqn_str()?;
        // Hosts without an NQN cannot be told apart: one must not hold the others.
        if host_nqn.is_empty() {
            return None;
        }
        if ConnectCommand::decode(&sqe).queue_id.is_admin() {
            return self.target.retiring.busy_for(subsystem.index, host_nqn, &data.host_identifier);
        }
        // An I/O queue joins one controller: only a live one of this host with a queue
        // draining or left from before a reset makes it wait (a torn-down one, or
        // another host's, refuses it at once).
        let controller = self.target.controller(subsystem.index, data.controller_id)?;
        let busy = !controller.is_settled() || controller.has_stale_queues();
        (controller.host_nqn == host_nqn && !controller.is_torn_down() && busy).then_some(controller.id.0)
    }

    /// The QID a Connect in `slot_index` asks for.
    fn connect_queue(&self, slot_index: u16) -> Option<QueueId> {
        let sqe = &self.slots.slot_ref(slot_index).sqe;
        sqe.is_connect().then(|| ConnectCommand::decode(sqe).queue_id)
    }
}

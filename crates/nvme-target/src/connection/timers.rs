//! Time and events of a connection: the setup timeout, keep-alive, the periodic
//! controller check (torn-down controllers, deleted namespaces, Abort requests,
//! parked commands) and Asynchronous Event delivery; and binding a queue once
//! Connect succeeded, which starts those timers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Connection, Phase, QueueBinding};
use crate::controller::Controller;
use crate::limits::{ASYNC_EVENT_CHECK_INTERVAL_MS, CONTROLLER_CHECK_INTERVAL_MS};
use crate::slots::SlotTable;
use crate::stats::TargetCounters;
use crate::transmit::BufferPool;

/// When a connection next has something to do that no PDU or completion triggers.
#[derive(Debug, Default)]
pub(crate) struct ConnectionTimers {
    /// Connection setup (ICReq, Connect, authentication) must finish by then.
    pub(crate) setup_deadline: Option<Instant>,
    /// Admin queue: the controller is torn down unless a Keep Alive arrives by then.
    pub(crate) keep_alive_deadline: Option<Instant>,
    /// Next check whether the controller still exists (every queue).
    pub(crate) controller_check_at: Option<Instant>,
    /// Admin queue: next check for due asynchronous events (while requests are held).
    pub(crate) event_check_at: Option<Instant>,
    /// When to look for answers to held Abort commands.
    pub(crate) abort_check_at: Option<Instant>,
    /// When to look whether a held Preempt and Abort's fence drained.
    pub(crate) fence_check_at: Option<Instant>,
    /// When a throttled command may run, or its limits are looked at again.
    pub(crate) throttle_check_at: Option<Instant>,
}

impl Connection {
    /// The earliest time `handle_timeout` has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        // Closed: the other timers are over (`handle_timeout` no longer moves them on),
        // only the drain's remains.
        if self.cleaned_up {
            return self.quiesce.next_deadline();
        }
        let timers = &self.timers;
        let event_check_at = timers.event_check_at.filter(|_| !self.held_async_events.is_empty());
        let authentication_deadline = self.authentication_deadline();
        [
            timers.setup_deadline,
            timers.keep_alive_deadline,
            timers.controller_check_at,
            event_check_at,
            authentication_deadline,
            timers.abort_check_at,
            timers.fence_check_at,
            timers.throttle_check_at,
            self.quiesce.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Time passed: enforce the setup timeout and keep-alive, and notice controllers
    /// torn down elsewhere.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.phase == Phase::Closing {
            return;
        }
        if let Some(deadline) = self.timers.setup_deadline {
            if now >= deadline && self.phase != Phase::Live {
                let timeout_ms = self.target.settings.connection_setup_timeout_ms;
                TargetCounters::count(&self.target.counters.setup_timeouts);
                let log = self.target.setup_timeouts.lock().unwrap_or_else(|poison| poison.into_inner()).refused(now);
                if let Some(unlogged) = log {
                    tracing::info!(peer = %self.peer, phase = ?self.phase, closed_unlogged = unlogged,
                        "closing connection from {}: no ICReq and Connect within {timeout_ms} ms \
                         (connection_setup_timeout_ms)", self.peer);
                }
                self.phase = Phase::Closing;
                return;
            }
        }
        if self.authentication_timed_out(now) {
            self.phase = Phase::Closing;
            return;
        }
        self.check_held_connect(now);
        if let Some(deadline) = self.timers.keep_alive_deadline {
            if now >= deadline {
                if let Some(binding) = &self.binding {
                    TargetCounters::count(&self.target.counters.keep_alive_timeouts);
                    tracing::warn!(peer = %self.peer, controller = binding.controller.id.0,
                        "keep-alive timeout: tearing down the controller");
                    binding.controller.tear_down();
                }
                self.phase = Phase::Closing;
                return;
            }
        }
        if let Some(check_at) = self.timers.controller_check_at {
            if now >= check_at {
                self.timers.controller_check_at = Some(now + Duration::from_millis(CONTROLLER_CHECK_INTERVAL_MS));
                if self.controller_gone() {
                    self.phase = Phase::Closing;
                    return;
                }
                // Also lets an idle queue drop namespaces that were deleted.
                self.refresh_namespaces();
                self.serve_abort_requests();
                self.retry_parked(now);
                // Data buffers no command needed over the last interval go back to
                // the allocator: a connection keeps what its load uses, not its peak.
                self.pool.trim_unused();
            }
        }
        if self.timers.abort_check_at.is_some_and(|check_at| now >= check_at) {
            self.complete_answered_aborts(now);
        }
        if self.timers.fence_check_at.is_some_and(|check_at| now >= check_at) {
            self.complete_persisted(now);
        }
        if self.timers.throttle_check_at.is_some_and(|check_at| now >= check_at) {
            self.release_throttled(now);
        }
        if let Some(check_at) = self.timers.event_check_at {
            if now >= check_at {
                self.timers.event_check_at = Some(now + Duration::from_millis(ASYNC_EVENT_CHECK_INTERVAL_MS));
                self.refresh_namespaces();
                self.deliver_due_events();
            }
        }
    }

    /// Rebuilds the namespace view if the subsystem's table changed since, and retires
    /// backend queues of namespaces that are no longer active here. One atomic load
    /// when nothing changed.
    pub(crate) fn refresh_namespaces(&mut self) {
        let Some(binding) = &self.binding else { return };
        let Some(subsystem) = &binding.controller.subsystem else { return };
        let generation = subsystem.generation();
        if self.view.generation() == Some(generation) {
            return;
        }
        let table = subsystem.table();
        let controller = &binding.controller;
        self.view.rebuild(&table, &controller.host_nqn, generation, &subsystem.qos_host_defaults, &controller.view);
        self.storage.retire_inactive(&self.view);
    }

    /// Completes a held Asynchronous Event Request with a due event, if both exist.
    pub(crate) fn deliver_due_events(&mut self) {
        if self.held_async_events.is_empty() {
            return;
        }
        let Some(binding) = &self.binding else { return };
        let controller = Arc::clone(&binding.controller);
        if let Some(result) = controller.take_due_event() {
            if !self.raise_async_event(result) {
                controller.restore_due_event(result);
            }
        }
    }

    /// True when this I/O queue's controller was torn down.
    pub(crate) fn controller_gone(&self) -> bool {
        self.binding.as_ref().is_some_and(|binding| {
            binding.controller.is_torn_down()
                || (!binding.queue_id.is_admin() && binding.controller.generation() != binding.generation)
        })
    }

    /// Connect succeeded: size the queue and start its timers.
    pub(crate) fn bind(&mut self, binding: QueueBinding, now: Instant) {
        self.slots = SlotTable::new(binding.depth);
        self.pool = BufferPool::new(binding.depth as usize + crate::limits::SPARE_DATA_BUFFERS);
        self.make_room_for_throttled(binding.depth);
        self.timers.setup_deadline = None;
        if binding.queue_id.is_admin() {
            self.restart_keep_alive(&binding.controller, now);
            // Namespace notices (I/O controllers) and Discovery Log Page Change
            // notices (discovery controllers) both wait for this check.
            self.timers.event_check_at = Some(now + Duration::from_millis(ASYNC_EVENT_CHECK_INTERVAL_MS));
        }
        // Every queue, the admin queue too, closes once its controller is torn down
        // elsewhere (host denied or its TLS key changed, subsystem removed).
        self.timers.controller_check_at = Some(now + Duration::from_millis(CONTROLLER_CHECK_INTERVAL_MS));
        if let Some(subsystem) = &binding.controller.subsystem {
            let shard = subsystem.stats.register_queue_shard();
            binding.controller.stats.adopt(shard.clone());
            self.stats = Some(shard);
        }
        self.storage.set_host(binding.controller.host_identifier);
        self.binding = Some(binding);
        self.count_in_controller();
        self.phase = Phase::Live;
        self.refresh_namespaces();
    }

    /// Restarts the keep-alive timer from `now` (Keep Alive command, Connect,
    /// Set Features KATO). The timeout is rounded up to whole seconds as the Linux
    /// target does, which hosts are tested against.
    pub(crate) fn restart_keep_alive(&mut self, controller: &Controller, now: Instant) {
        // The Connect KATO passed `keep_alive_timeout` already; a Set Features value
        // outside the configured range runs the nearest allowed timer instead.
        let stored_ms = controller.state().features.keep_alive_timeout_ms;
        let timeout_ms = u64::from(self.target.settings.effective_keep_alive_timeout(controller.kind, stored_ms));
        self.timers.keep_alive_deadline =
            if timeout_ms == 0 { None } else { Some(now + Duration::from_millis(timeout_ms.div_ceil(1000) * 1000)) };
    }
}

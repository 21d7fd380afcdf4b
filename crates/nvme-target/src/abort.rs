//! Abort (admin opcode 08h). The command to abort lives on an I/O queue, which may be
//! another connection on another thread, so the admin queue files the request with
//! the controller and holds the Abort; the I/O queue looks at the requests when it
//! receives data and at its periodic controller check, aborts the command if it is
//! still waiting for R2T budget (no host data outstanding, nothing at the storage:
//! nothing can arrive for it afterwards) or waiting for its QoS limits (`throttle`),
//! and answers. The admin queue completes the
//! Abort with DW0 bit 0 clear (aborted) or set (not aborted), or set after
//! `ABORT_ANSWER_TIMEOUT_MS` when no queue answered.

use std::time::{Duration, Instant};

use nvme_spec::admin::AbortCommand;
use nvme_spec::{CommandId, QueueId, Status, SubmissionQueueEntry};

use crate::connection::Connection;
use crate::outcome::Outcome;
use crate::slots::SlotState;

/// How long an Abort waits for its I/O queue: longer than the queue's controller check
/// (`CONTROLLER_CHECK_INTERVAL_MS`), when an idle queue looks at the requests.
pub const ABORT_ANSWER_TIMEOUT_MS: u64 = 3_000;
/// How often the admin queue looks for answers while it holds an Abort.
pub const ABORT_CHECK_INTERVAL_MS: u64 = 50;

/// An Abort the admin queue holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldAbort {
    slot: u16,
    queue: QueueId,
    command: CommandId,
    give_up_at: Instant,
}

impl Connection {
    pub(crate) fn admin_abort(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry, now: Instant) -> Outcome {
        let abort = AbortCommand::decode(sqe);
        let not_aborted = Outcome::Done(Status::SUCCESS, u64::from(AbortCommand::RESULT_NOT_ABORTED));
        let Some(binding) = &self.binding else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.with_do_not_retry());
        };
        let controller = binding.controller.clone();
        let queue = abort.submission_queue_id;
        // Admin commands complete at once; a held Asynchronous Event Request is not
        // aborted (the host keeps it outstanding on purpose).
        if queue.is_admin() {
            return not_aborted;
        }
        let connected =
            1u128.checked_shl(u32::from(queue.0)).is_some_and(|bit| controller.state().connected_io_queues & bit != 0);
        if !connected {
            return not_aborted;
        }
        if !controller.request_abort(queue, abort.command_id) {
            return Outcome::status(Status::ABORT_COMMAND_LIMIT_EXCEEDED);
        }
        tracing::info!(peer = %self.peer, queue = queue.0, command = abort.command_id.0, "Abort requested");
        self.slots.slot(slot_index).state = SlotState::HeldAbort;
        self.held_aborts.push(HeldAbort {
            slot: slot_index,
            queue,
            command: abort.command_id,
            give_up_at: now + Duration::from_millis(ABORT_ANSWER_TIMEOUT_MS),
        });
        self.timers.abort_check_at = Some(now + Duration::from_millis(ABORT_CHECK_INTERVAL_MS));
        Outcome::Pending
    }

    /// Admin queue: completes the held Aborts that were answered or waited too long.
    pub(crate) fn complete_answered_aborts(&mut self, now: Instant) {
        let Some(binding) = &self.binding else { return };
        let controller = binding.controller.clone();
        let mut index = 0;
        while let Some(&held) = self.held_aborts.get(index) {
            match controller.take_abort_outcome(held.queue, held.command, now >= held.give_up_at) {
                Some(aborted) => {
                    self.held_aborts.remove(index);
                    let result = if aborted { AbortCommand::RESULT_ABORTED } else { AbortCommand::RESULT_NOT_ABORTED };
                    self.complete(held.slot, Status::SUCCESS, u64::from(result));
                }
                None => index += 1,
            }
        }
        self.timers.abort_check_at =
            (!self.held_aborts.is_empty()).then(|| now + Duration::from_millis(ABORT_CHECK_INTERVAL_MS));
    }

    /// I/O queue: answers the Aborts filed for its commands (one atomic load when there
    /// are none). A command still waiting for R2T budget is completed with Command
    /// Abort Requested; any other (at the storage, receiving data, or unknown) is not
    /// aborted and completes as usual.
    pub(crate) fn serve_abort_requests(&mut self) {
        let Some(binding) = &self.binding else { return };
        if binding.queue_id.is_admin() {
            return;
        }
        let (controller, queue) = (binding.controller.clone(), binding.queue_id);
        for command in controller.abort_requests_for(queue) {
            // A command waiting for its QoS limits has nothing at storage and all its
            // data: it can always be aborted.
            if self.is_throttled(command) {
                if controller.answer_abort(queue, command, true) {
                    tracing::info!(peer = %self.peer, queue = queue.0, command = command.0, "throttled command aborted by request");
                    self.abort_throttled(command);
                }
                continue;
            }
            let waiting = self.r2t.waiting.iter().position(|&slot_index| {
                let slot = self.slots.slot_ref(slot_index);
                slot.sqe.command_id() == command
                    && slot.state == SlotState::ReceivingHostData
                    && slot.requested_bytes == slot.received_bytes
            });
            let Some(position) = waiting else {
                controller.answer_abort(queue, command, false);
                continue;
            };
            // Only abort when the admin queue still waits for the answer.
            if !controller.answer_abort(queue, command, true) {
                continue;
            }
            let Some(slot_index) = self.r2t.waiting.remove(position) else { continue };
            let slot = self.slots.slot(slot_index);
            let buffer = std::mem::take(&mut slot.buffer);
            self.pool.give(buffer);
            tracing::info!(peer = %self.peer, queue = queue.0, command = command.0, "command aborted by request");
            self.complete(slot_index, Status::ABORTED_BY_REQUEST, 0);
        }
    }
}

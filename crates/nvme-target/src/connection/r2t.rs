//! R2T flow control: which commands get host data requested, how much, and which
//! wait. Per command at most MAXR2T + 1 R2Ts are outstanding; per connection at most
//! `max_outstanding_r2t_bytes_per_connection` bytes, so a host cannot make the target
//! buffer more than that by sending many large writes at once.

use std::collections::VecDeque;

use nvme_tcp_wire::ReadyToTransfer;

use super::Connection;
use crate::limits::MAX_R2T_LENGTH_BYTES;
use crate::slots::SlotState;

/// The connection's R2T state.
#[derive(Debug)]
pub(crate) struct R2tFlow {
    /// MAXR2T + 1: R2T PDUs the host accepts outstanding per command.
    pub(crate) host_max_outstanding: u32,
    /// Host data requested by R2T and not received yet, over all commands
    /// (bounded by `max_outstanding_r2t_bytes_per_connection`).
    outstanding_bytes: u64,
    /// Commands waiting for R2T budget, first come first served. A waiting command
    /// has nothing requested outstanding and holds no data buffer.
    pub(crate) waiting: VecDeque<u16>,
    /// Most host data ever requested and not received at once (for tests and
    /// diagnostics: never above the budget).
    high_water_bytes: u64,
}

impl R2tFlow {
    /// Before ICReq: one R2T per command until the host says otherwise.
    pub(crate) fn new() -> Self {
        R2tFlow { host_max_outstanding: 1, outstanding_bytes: 0, waiting: VecDeque::new(), high_water_bytes: 0 }
    }

    /// True when an R2T of `length` bytes fits `budget_bytes`. With nothing
    /// outstanding any R2T fits, so the connection always makes progress.
    fn allows(&self, length: u32, budget_bytes: u32) -> bool {
        self.outstanding_bytes == 0 || self.outstanding_bytes + u64::from(length) <= u64::from(budget_bytes)
    }

    /// An R2T for `length` bytes went out.
    fn requested(&mut self, length: u32) {
        self.outstanding_bytes += u64::from(length);
        self.high_water_bytes = self.high_water_bytes.max(self.outstanding_bytes);
    }

    /// `bytes` of requested host data arrived.
    pub(crate) fn received(&mut self, bytes: u32) {
        self.outstanding_bytes = self.outstanding_bytes.saturating_sub(u64::from(bytes));
    }
}

impl Connection {
    /// Asks for the next pieces of a command's host data with R2T PDUs, keeping at
    /// most MAXR2T + 1 outstanding for the command and at most
    /// `max_outstanding_r2t_bytes_per_connection` for the connection. A command that
    /// gets no R2T now waits in `R2tFlow::waiting` (a new command behind the ones already
    /// waiting, one whose transfer has started in front of them) until data arrives.
    pub(crate) fn request_host_data(&mut self, slot_index: u16) {
        if self.stream.is_terminated() {
            return;
        }
        let slot = self.slots.slot(slot_index);
        slot.state = SlotState::ReceivingHostData;
        let started = slot.requested_bytes > 0;
        if !started && !self.r2t.waiting.is_empty() {
            self.wait_for_r2t_budget(slot_index, false);
            return;
        }
        self.send_r2ts(slot_index);
        let slot = self.slots.slot(slot_index);
        if slot.requested_bytes == slot.received_bytes && slot.received_bytes < slot.host_data_bytes {
            // Nothing of it is outstanding: no arriving data would wake it up.
            self.wait_for_r2t_budget(slot_index, started);
        }
    }

    /// The next R2T length of a command, if it needs more data.
    fn next_r2t_length(&mut self, slot_index: u16) -> Option<u32> {
        let slot = self.slots.slot(slot_index);
        (slot.state == SlotState::ReceivingHostData && slot.requested_bytes < slot.host_data_bytes)
            .then(|| (slot.host_data_bytes - slot.requested_bytes).min(MAX_R2T_LENGTH_BYTES))
    }

    /// True when an R2T of `length` bytes fits the connection's budget. With nothing
    /// outstanding any R2T fits, so the connection always makes progress.
    fn r2t_budget_allows(&self, length: u32) -> bool {
        self.r2t.allows(length, self.target.settings.max_outstanding_r2t_bytes_per_connection)
    }

    /// Sends as many R2Ts for the command as its MAXR2T and the budget allow.
    fn send_r2ts(&mut self, slot_index: u16) {
        let max_outstanding = self.r2t.host_max_outstanding;
        while let Some(length) = self.next_r2t_length(slot_index) {
            let slot = self.slots.slot(slot_index);
            let outstanding = (slot.requested_bytes - slot.received_bytes).div_ceil(MAX_R2T_LENGTH_BYTES);
            if outstanding >= max_outstanding || !self.r2t_budget_allows(length) {
                break;
            }
            let slot = self.slots.slot(slot_index);
            if slot.buffer.len() != slot.host_data_bytes as usize {
                // Given back while it waited for budget.
                let length = slot.host_data_bytes as usize;
                let buffer = self.pool.take(length);
                self.slots.slot(slot_index).buffer = buffer;
            }
            let slot = self.slots.slot(slot_index);
            let offset = slot.requested_bytes;
            slot.requested_bytes += length;
            let r2t = ReadyToTransfer { command_id: slot.sqe.command_id(), transfer_tag: slot_index, offset, length };
            self.r2t.requested(length);
            self.stream.push_ready_to_transfer(r2t);
        }
    }

    /// Parks a command until R2T budget frees up. One that has received nothing yet
    /// gives its buffer back, so waiting commands hold no memory.
    fn wait_for_r2t_budget(&mut self, slot_index: u16, in_front: bool) {
        let slot = self.slots.slot(slot_index);
        if slot.received_bytes == 0 {
            let buffer = std::mem::take(&mut slot.buffer);
            self.pool.give(buffer);
        }
        tracing::trace!(peer = %self.peer, slot = slot_index, outstanding = self.r2t.outstanding_bytes,
            waiting = self.r2t.waiting.len(), "command waits for R2T budget (max_outstanding_r2t_bytes_per_connection)");
        if in_front {
            self.r2t.waiting.push_front(slot_index);
        } else {
            self.r2t.waiting.push_back(slot_index);
        }
    }

    /// Host data arrived (or a command went away): hand R2Ts to waiting commands, in
    /// order, while the budget allows.
    pub(crate) fn grant_waiting_r2ts(&mut self) {
        while let Some(&slot_index) = self.r2t.waiting.front() {
            if self.stream.is_terminated() {
                return;
            }
            let Some(length) = self.next_r2t_length(slot_index) else {
                // Not waiting any more (cannot happen while the stream is in sync).
                self.r2t.waiting.pop_front();
                continue;
            };
            if !self.r2t_budget_allows(length) {
                return;
            }
            self.r2t.waiting.pop_front();
            self.send_r2ts(slot_index);
        }
    }

    /// Largest amount of host data this connection ever had requested by R2T and not
    /// yet received (at most `max_outstanding_r2t_bytes_per_connection`).
    pub fn r2t_outstanding_high_water_bytes(&self) -> u64 {
        self.r2t.high_water_bytes
    }

    /// Commands waiting for R2T budget now.
    pub fn r2t_waiting_commands(&self) -> usize {
        self.r2t.waiting.len()
    }
}

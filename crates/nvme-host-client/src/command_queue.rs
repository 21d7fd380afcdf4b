//! What an [`IoQueue`] and a [`MultipathQueue`] have in common, for code that drives
//! either (the benchmark engine).

use std::time::{Duration, Instant};

use nvme_host::{HostCommand, HostCompletion};

use crate::controller::check_io;
use crate::{ClientError, IoQueue, MultipathQueue};

/// An I/O queue for one thread: submit commands, reap completions.
pub trait CommandQueue {
    /// Commands that may be in flight at once.
    fn depth(&self) -> usize;
    /// Commands submitted and not yet reaped.
    fn in_flight(&self) -> usize;
    /// Queues a command; never waits for the target.
    fn submit(&mut self, command: HostCommand) -> Result<(), ClientError>;
    /// Waits until `min_completions` completions are available or `timeout` passes
    /// and appends every available one to `out`; returns how many.
    fn reap(
        &mut self,
        min_completions: usize,
        timeout: Duration,
        out: &mut Vec<HostCompletion>,
    ) -> Result<usize, ClientError>;

    /// Runs one command on an idle queue and waits for it, at most `patience` (make
    /// it longer than the queue's command timeout: the queue fails a command that
    /// outlives that by itself). `Ok` holds a successful completion; an NVMe error
    /// status is [`ClientError::Command`]. For tools that issue one command at a time
    /// (the CLI); a data path keeps many in flight with `submit` and `reap`.
    fn execute(&mut self, command: HostCommand, patience: Duration) -> Result<HostCompletion, ClientError> {
        if self.in_flight() != 0 {
            return Err(ClientError::InvalidArgument("execute needs a queue with nothing in flight".into()));
        }
        let opcode = command.sqe.opcode();
        self.submit(command)?;
        let deadline = Instant::now() + patience;
        let mut out = Vec::with_capacity(1);
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout);
            }
            self.reap(1, deadline - now, &mut out)?;
            if let Some(completion) = out.pop() {
                check_io(&completion, opcode)?;
                return Ok(completion);
            }
        }
    }
}

impl CommandQueue for IoQueue {
    fn depth(&self) -> usize {
        IoQueue::depth(self)
    }
    fn in_flight(&self) -> usize {
        IoQueue::in_flight(self)
    }
    fn submit(&mut self, command: HostCommand) -> Result<(), ClientError> {
        IoQueue::submit(self, command)
    }
    fn reap(
        &mut self,
        min_completions: usize,
        timeout: Duration,
        out: &mut Vec<HostCompletion>,
    ) -> Result<usize, ClientError> {
        IoQueue::reap(self, min_completions, timeout, out)
    }
}

impl CommandQueue for MultipathQueue {
    fn depth(&self) -> usize {
        MultipathQueue::depth(self)
    }
    fn in_flight(&self) -> usize {
        MultipathQueue::in_flight(self)
    }
    fn submit(&mut self, command: HostCommand) -> Result<(), ClientError> {
        MultipathQueue::submit(self, command)
    }
    fn reap(
        &mut self,
        min_completions: usize,
        timeout: Duration,
        out: &mut Vec<HostCompletion>,
    ) -> Result<usize, ClientError> {
        MultipathQueue::reap(self, min_completions, timeout, out)
    }
}

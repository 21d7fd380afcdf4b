//! What an [`IoQueue`] and a [`MultipathQueue`] have in common, for code that drives
//! either (the benchmark engine).

use std::time::Duration;

use nvme_host::{HostCommand, HostCompletion};

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
    fn reap(&mut self, min_completions: usize, timeout: Duration, out: &mut Vec<HostCompletion>) -> Result<usize, ClientError>;
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
    fn reap(&mut self, min_completions: usize, timeout: Duration, out: &mut Vec<HostCompletion>) -> Result<usize, ClientError> {
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
    fn reap(&mut self, min_completions: usize, timeout: Duration, out: &mut Vec<HostCompletion>) -> Result<usize, ClientError> {
        MultipathQueue::reap(self, min_completions, timeout, out)
    }
}

//! An I/O queue's connection, on whichever path carries it now: a blocking socket
//! (how every queue comes up, and where it lives while no caller thread drives
//! it) or the io_uring ring of the thread that drives it.

use std::time::Instant;

use nvme_host::HostQueue;

use crate::connection::{LinkFailure, QueueConnection};
use crate::ring_connection::RingConnection;
use crate::ClientError;

#[derive(Debug)]
pub(crate) enum IoLink {
    /// Both boxed: each carries its queue and buffers inline.
    Blocking(Box<QueueConnection>),
    Ring(Box<RingConnection>),
}

impl IoLink {
    pub(crate) fn queue(&mut self) -> &mut HostQueue {
        match self {
            IoLink::Blocking(connection) => &mut connection.queue,
            IoLink::Ring(connection) => connection.queue(),
        }
    }

    /// Sends (blocking) or queues for the next turn (ring) what the queue wants
    /// to send.
    pub(crate) fn flush(&mut self) -> Result<(), ClientError> {
        match self {
            IoLink::Blocking(connection) => connection.flush(),
            IoLink::Ring(connection) => connection.flush(),
        }
    }

    /// Sends what the PDUs just received asked for (R2T answers). The ring
    /// already did, right after each receive.
    pub(crate) fn flush_after_receive(&mut self) -> Result<(), ClientError> {
        match self {
            IoLink::Blocking(connection) => connection.flush(),
            IoLink::Ring(_) => Ok(()),
        }
    }

    /// Waits for bytes at most until `deadline` (or the queue's own timers),
    /// feeds them to the queue and runs its timers.
    pub(crate) fn receive_until(&mut self, deadline: Instant) -> Result<(), ClientError> {
        match self {
            IoLink::Blocking(connection) => {
                let wait = connection.wait_until(deadline);
                connection.receive(wait).map(|_| ())
            }
            IoLink::Ring(connection) => connection.receive(deadline).map(|_| ()),
        }
    }

    /// Takes what has already arrived, without waiting.
    pub(crate) fn receive_available(&mut self) -> Result<(), ClientError> {
        match self {
            IoLink::Blocking(connection) => connection.receive_available(),
            IoLink::Ring(connection) => connection.receive_available(),
        }
    }

    /// The error to report when the queue failed by itself.
    pub(crate) fn queue_failure(&mut self) -> Option<ClientError> {
        match self {
            IoLink::Blocking(connection) => connection.queue_failure(),
            IoLink::Ring(connection) => connection.queue_failure(),
        }
    }

    /// Takes every command back from a connection that ended.
    pub(crate) fn into_failure(self, error: ClientError) -> LinkFailure {
        match self {
            IoLink::Blocking(connection) => (*connection).into_failure(error),
            IoLink::Ring(connection) => (*connection).into_failure(error),
        }
    }
}

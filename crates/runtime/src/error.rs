//! The runtime's error type.

use std::io;
use std::net::SocketAddr;

use crate::ListenerId;

/// Why the runtime could not start, why a thread stopped, or why a listener
/// could not be added or removed.
#[derive(thiserror::Error, Debug)]
pub enum RuntimeError {
    /// A listening socket could not be created, bound or put into listen mode.
    #[error("cannot listen on {address}: {source}")]
    Bind { address: SocketAddr, source: io::Error },
    /// io_uring or eventfd setup failed (old kernel, RLIMIT_MEMLOCK, seccomp...).
    #[error("io_uring setup failed: {0}")]
    RingSetup(io::Error),
    /// io_uring_enter failed in a way the loop cannot recover from.
    #[error("io_uring submission failed: {0}")]
    Submit(io::Error),
    /// A thread could not be spawned, exited early, or panicked.
    #[error("runtime thread failed: {0}")]
    Thread(String),
    /// The configuration makes no sense (zero threads, say).
    #[error("invalid runtime configuration: {0}")]
    InvalidConfig(String),
    /// A listener change was asked of a runtime that is shutting down or stopped.
    #[error("the runtime is not running")]
    NotRunning,
    /// No open listener has this id (never started, or already removed).
    #[error("no {0} is open")]
    UnknownListener(ListenerId),
    /// Some runtime threads did not confirm a listener removal in time (a
    /// handler blocking its thread). The removal stays queued: they apply it
    /// when they get to it.
    #[error("{pending_threads} runtime thread(s) did not confirm the listener change within {waited_ms} ms")]
    ListenerChangeTimedOut { pending_threads: usize, waited_ms: u64 },
    /// A [`crate::ClientRing`] was used from a thread other than the one that
    /// created it (its io_uring takes submissions from that thread only).
    #[error("a client ring was used from a thread other than its owner's")]
    ForeignThread,
    /// [`crate::ClientRing::detach`] did not get the socket back in time.
    #[error("the connection's operations did not finish within {waited_ms} ms")]
    DetachTimedOut { waited_ms: u64 },
    /// No open connection has this token (closed, or never opened here).
    #[error("no such connection on this ring")]
    UnknownConnection,
    /// All 2^32 listener ids were handed out; ids are never reused.
    #[error("no listener id left (ids are never reused)")]
    ListenerIdsExhausted,
}

//! The runtime's error type.

use std::io;
use std::net::SocketAddr;

/// Why the runtime could not start, or why a thread stopped.
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
}

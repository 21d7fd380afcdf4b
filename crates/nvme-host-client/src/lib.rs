//! A blocking NVMe/TCP host on `std::net`: discovery, controller bring-up, admin
//! commands, I/O queues, keep-alive and reconnect. The protocol itself is the
//! sans-io [`nvme_host`] core; this crate adds sockets, threads and clocks.
//!
//! ```no_run
//! use nvme_host_client::{ConnectOptions, Controller};
//! use nvme_spec::NamespaceId;
//!
//! let address = "127.0.0.1:4420".parse().unwrap();
//! let controller = Controller::connect(ConnectOptions::new(address, "nqn.2026-11.io.sluice:demo"))?;
//! controller.write(NamespaceId(1), 0, &[0xAB; 4096], false)?;
//! let data = controller.read(NamespaceId(1), 0, 8)?;
//! controller.disconnect()?;
//! # Ok::<(), nvme_host_client::ClientError>(())
//! ```
//!
//! # Threads and connections
//!
//! A [`Controller`] owns the admin queue (one TCP connection, behind a mutex: admin
//! commands from any thread are serialised) and a supervisor thread that sends Keep
//! Alive every KATO/2, picks up Asynchronous Events (a namespace attribute change
//! reads log 04h; see [`Controller::take_namespace_changes`]) and reconnects. Each
//! I/O queue is its own TCP connection; [`Controller::take_io_queue`] hands one to a
//! caller thread as an [`IoQueue`] (`submit` never blocks, `reap` waits with a
//! timeout), and the convenience [`Controller::read`] / [`Controller::write`] /
//! [`Controller::flush`] use the first queue not handed out. Sockets are blocking
//! with read timeouts (see `connection.rs`): no busy polling, no extra threads on
//! the I/O path.
//!
//! # Reconnect
//!
//! Like Linux, any connection failure (socket closed or reset, a C2HTermReq, a
//! protocol violation, a command timeout) resets the whole association:
//!
//! 1. The queue that saw the failure takes back its outstanding commands
//!    (`HostQueue::abandon`) and asks for a reconnect of the association (epoch) it
//!    belongs to. Requests for an older epoch are ignored, so many queues failing at
//!    once cause one reconnect.
//! 2. The supervisor closes the old admin connection (the target then tears the old
//!    controller and its I/O queues down), waits `reconnect_delay`, and builds a new
//!    association: admin Connect (a new CNTLID), CC.EN, Identify, Number of Queues,
//!    AER. It retries every `reconnect_delay` until `controller_loss_timeout` (from
//!    the first failure) expires; then the controller is *lost*.
//! 3. It publishes the new epoch through shared state that every [`IoQueue`] checks
//!    with one atomic load per call. A queue on an older epoch drops its connection,
//!    connects a new one (same QID, new CNTLID) and resubmits its commands, oldest
//!    first, ahead of anything submitted meanwhile. Admin commands waiting in
//!    [`Controller::admin_command`] are resubmitted the same way.
//!
//! Every command is bounded whatever the target does: it is sent again at most 5
//! times in all (after a reconnect, or after a retryable status; Linux's
//! nvme_max_retries), and it is over at the latest `command_timeout +
//! controller_loss_timeout` after it was first submitted (it may wait out one
//! whole outage), even when every reconnect succeeds: a target that fails the
//! connection whenever a command arrives cannot keep it going. Such a command
//! fails with [`HostError::GaveUp`], which says how the target ended the last
//! connection and whether it did so every time.
//!
//! Callers see resubmitted commands complete normally. Resubmitting is safe because
//! block writes are idempotent: writing the same data to the same LBAs twice leaves
//! the same result, and a write is only acknowledged to the caller once its
//! completion arrived, so nothing acknowledged is lost. (Commands that are not
//! idempotent, such as Compare or vendor commands, may run twice.) A command that
//! itself timed out is not resubmitted: it completes with Command Aborted By Host
//! (SCT 3h, SC 71h). Commands completed by the target with a retryable status
//! (Command Aborted due to SQ Deletion, Transient Transport Error, or Data Transfer
//! Error after a bad data digest; DNR clear) are resubmitted within the same bound.
//!
//! Nothing the target reports makes the host allocate without a bound: lists are
//! checked against what the controller said of itself (the Active Namespace ID
//! list against NN, at most [`MAX_ACTIVE_NAMESPACES`]; the ANA log against
//! NANAGRPID and NN; log pages in pieces of MDTS), and the CSTS.RDY wait of CAP.TO
//! is capped by the connect timeout.
//!
//! Once the controller is lost, commands in flight complete with Host Pathing Error
//! (SCT 3h, SC 70h, DNR), further calls fail with [`ClientError::ControllerLost`],
//! and the blocking helpers return that error.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admin;
mod command_queue;
mod connection;
mod controller;
mod discovery;
mod error;
mod io_link;
mod io_queue;
mod multipath;
mod options;
mod ring_connection;
mod shared;

pub use command_queue::CommandQueue;
pub use controller::{ana_log_length, Controller};
pub use discovery::{discover, MAX_DISCOVERY_RECORDS};
pub use error::{command_name, ClientError};
pub use io_queue::{IoQueue, Refused};
pub use multipath::{discover_paths, Multipath, MultipathQueue, PathPolicy, PathStatus, MAX_FAILOVERS};
pub use options::{default_host_identity, format_uuid, parse_uuid, ConnectOptions, IdentityChoice, IoPath, TlsOptions};
pub use runtime::PollMode;
pub use shared::MAX_ACTIVE_NAMESPACES;

pub use nvme_host::{commands, status, HostCommand, HostCompletion, HostError, StatusDisplay};

// The threading contract: a Controller is shared between threads, an IoQueue moves
// to the thread that drives it.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    const fn movable<T: Send>() {}
    shared::<Controller>();
    movable::<IoQueue>();
};

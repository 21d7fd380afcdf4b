//! The Sluice NVMe/TCP target core, as sans-io state machines.
//!
//! A [`Connection`] is one TCP connection (one NVMe queue). The runtime feeds it the
//! bytes it receives, the current time and storage completions; it answers with
//! batches of PDUs to send and a wish to close. Controllers and subsystems live in a
//! shared [`Target`]. No sockets, threads or clocks inside: everything here runs in
//! plain unit tests.
//!
//! Layout: `connection` (PDU stream, transmit, timers), `dispatch` (command flow and
//! storage), one file per command family (`fabrics`, `admin`, `io`), the data
//! structures the admin commands return (`admin_data`, `discovery`), and the shared
//! model (`target`, `subsystem`, `controller`, `stats`). Every limit is in `limits`.
#![forbid(unsafe_code)]
// Network input must never panic the target core (a failure is a status or an error); tests may index.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::unreachable)
)]

// Persistent reservations are their own crate; their modules keep their paths here.
pub use nvme_reservations::{copy_vouch, reservation_store, reservations};

mod abort;
pub mod access;
mod admin;
mod admin_data;
pub mod ana;
pub mod connection;
pub mod controller;
mod copy;
mod discovery;
mod dispatch;
pub mod error_class;
mod fabrics;
mod fused;
pub mod group_reservations;
pub mod host_access;
mod io;
pub mod limits;
pub mod management;
pub mod namespaces;
mod outcome;
pub mod path_watch;
mod ptpl;
pub mod qos;
mod quiesce;
pub mod range_locks;
mod reservation_commands;
mod retiring;
pub mod secure_channel;
pub mod slots;
pub mod stats;
mod storage_queues;
pub mod subsystem;
pub mod target;
mod throttle;
pub mod transmit;
pub mod write_fence;

pub use connection::{Connection, Phase, QueueBinding};
pub use controller::{Controller, ControllerKind};
pub use host_access::{HostAccess, HostAccessError, HostEntry, HostVerdict};
pub use management::ManagementError;
pub use namespaces::{Attachment, Namespace, NamespaceChange, NamespaceTable};
/// The DH-HMAC-CHAP choices a host entry allows (its `dhchap_policy`).
pub use nvme_auth::{ControllerPolicy, DhGroup, HashFunction};
pub use secure_channel::{SecureChannel, SecureChannelBinding};
pub use storage_queues::StorageActivity;
pub use subsystem::{NamespaceSpec, Subsystem, SubsystemError, SubsystemSpec};
pub use target::{
    AddressFamily, GrowNamespaceError, ListenerSpec, NamespaceSizeRefresh, PeerPath, Target, TargetError,
    TargetSettings, TargetSpec,
};
pub use transmit::{BatchPart, TransmitBatch};

//! NVMe and NVMe over Fabrics wire data: the 64-byte submission queue entry, the
//! 16-byte completion queue entry, status codes, opcodes and the data structures that
//! commands carry (Identify, log pages, Connect data, discovery log).
//!
//! Everything here is plain data with `decode`/`encode` over byte slices: no I/O, no
//! allocation, no unsafe. Sizes are pinned by compile-time assertions and every type
//! is round-trip tested. Field names are spelled out; the spec mnemonic is in each doc
//! comment. References are to the NVM Express Base Specification 2.0 and the NVMe
//! over Fabrics / NVMe-oF TCP Transport specifications.
#![forbid(unsafe_code)]
// Network input must never panic the codec (a failure is a status or an error); tests may index.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::unreachable)
)]

#[macro_use]
mod bits;
pub mod bytes;
pub mod cqe;
pub mod ids;
pub mod opcode;
pub mod sqe;
pub mod status;

pub mod admin;
pub mod ana;
pub mod discovery;
pub mod fabrics;
pub mod features;
pub mod identify;
pub mod log_page;
pub mod registers;
mod sorted_ids;

#[cfg(test)]
mod test_support;

pub use cqe::CompletionQueueEntry;
pub use identify::{IdentifyController, IdentifyNamespace, NamespaceDescriptor};
pub use ids::{CommandId, ControllerId, NamespaceId, QueueId};
pub use registers::{ControllerCapabilities, ControllerConfiguration, ControllerStatus, Version};
pub use sqe::{SglDescriptor, SubmissionQueueEntry};
pub use status::Status;

//! Persistent reservations of NVMe namespaces (NVMe Base 2.0, "Reservations"), as pure
//! state and rules: who is registered with which key, who holds which type, the
//! generation, who may read or write ([`reservations`]); where Persist Through Power
//! Loss keeps them ([`reservation_store`]: a trait the application implements); and
//! the bound in time of a gateway's copies of its group's reservations
//! ([`copy_vouch`]). The commands that drive them are the target core's
//! (`nvme-target`'s `reservation_commands`); the group's authority is
//! `sluice-gateway`'s.

#![forbid(unsafe_code)]
// Network input must never panic the target core (a failure is a status or an error); tests may index.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::unreachable)
)]

pub mod copy_vouch;
pub mod reservation_store;
pub mod reservations;

//! Gateway groups: several `sluice serve` processes export the same subsystems from the
//! same RBD images, each reporting ANA states that the cluster arbitrates
//! ([`coordinator`]); the coordinator runs on its own thread ([`service`]). With
//! `[gateway] config = "cluster"` the group's configuration is one copy in the
//! cluster ([`group_config`]). Reservations persist in files with Persist Through Power
//! Loss ([`reservation_files`]) and, in a group, in the cluster ([`reservations`]).

pub mod balance;
pub mod control;
pub mod coordinator;
pub mod copy_vouch;
pub mod fence_waits;
pub mod group_config;
pub mod load;
pub mod metrics;
pub mod placement;
pub mod published;
pub mod reservation_files;
pub mod reservation_record;
pub mod reservations;
pub mod service;
pub mod status;
#[cfg(test)]
mod tests;
pub mod timeline;

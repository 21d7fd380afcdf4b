//! Gateway groups: several `sluice serve` processes export the same subsystems from the
//! same RBD images, each reporting ANA states that the cluster arbitrates
//! ([`coordinator`]); the coordinator runs on its own thread ([`service`]).

pub mod coordinator;
pub mod reservations;
#[cfg(test)]
mod tests;
pub mod service;
pub mod status;

//! Observability: the Prometheus endpoint of `sluice serve` (`sluice stat`, its
//! reader, is the sluice-admin crate's).

pub mod process;
pub mod render;
pub mod server;

//! Observability: the Prometheus endpoint of `sluice serve` (`sluice stat`, its
//! reader, is the sluice-admin crate's).

pub mod render;
pub mod server;

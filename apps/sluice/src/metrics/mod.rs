//! Observability: the Prometheus endpoint of `sluice serve` and `sluice stat`.

pub mod render;
pub mod server;
pub mod stat;

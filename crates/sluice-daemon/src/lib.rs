//! The daemon behind `sluice serve`: it builds the target from a checked
//! configuration (sluice-config), joins its gateway group (sluice-gateway), serves the
//! management API, the Prometheus endpoint and the service manager's readiness
//! protocol, and runs until a signal stops it.
//!
//! - [`serve`]: start-up and shutdown, in the order the parts depend on each other.
//! - [`manage`]: the management API's server side (methods, socket, network endpoint,
//!   the file-first order of every change).
//! - [`metrics`]: the Prometheus text and its HTTP endpoint.
//! - [`notify`]: systemd's sd_notify.

pub mod manage;
pub mod metrics;
pub mod notify;
pub mod serve;

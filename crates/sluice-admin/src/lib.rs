//! The operator's commands against a running `sluice serve`: `sluice subsystem`, `ns`,
//! `host`, `listener`, `gateway`, `rpc` and friends through the management API
//! (management-client), and `sluice stat` through the metrics endpoint. They hold no
//! state of the target: every answer is the daemon's.
//!
//! - [`cli`]: the commands, their requests and their exit codes.
//! - `cli_output`: the text and JSON a person or a script reads (golden files in
//!   apps/sluice/tests/golden keep it byte for byte).
//! - `cli_qos`, `cli_attach`: the QoS and attachment commands' own arguments and text.
//! - [`stat`]: live per-namespace rates from two scrapes.

pub mod cli;
mod cli_attach;
mod cli_output;
mod cli_qos;
pub mod stat;

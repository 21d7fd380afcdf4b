//! The management API of `sluice serve`: JSON-RPC 2.0 on a Unix socket, in the
//! spirit of SPDK's rpc.py, and the `sluice subsystem|ns|host|listener|rpc`
//! commands that speak it.
//!
//! - `protocol`: framing, error codes, typed parameters.
//! - `service`: the methods; each change goes file-first (edit, check, build, write
//!   atomically, apply, restore on refusal).
//! - `document`: the TOML edits (comments and layout kept).
//! - `assemble`: checking a changed config and building one new piece with the
//!   config module.
//! - `persist`: the atomic write.
//! - `server`: the socket and its one thread.
//! - `cli`: the client commands.
//!
//! docs/operations.md describes the API for operators.

mod assemble;
pub mod cli;
mod document;
mod persist;
pub mod protocol;
mod server;
mod service;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvme_target::Target;

pub use server::{default_socket_path, ManagementServer, SocketError};
pub use service::{ActiveListener, Management};

/// Where `sluice serve` offers the management API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SocketChoice {
    /// The default path; if another server answers there, this one runs without a
    /// management socket (with a warning) instead of refusing to start.
    #[default]
    Default,
    /// A path given with --rpc-socket: refusing to start beats running unmanaged.
    Path(PathBuf),
    /// --no-rpc-socket.
    Off,
}

/// Starts the management socket of `sluice serve`. `Ok(None)`: not offered (turned
/// off, no default path, or the default path is taken by another server).
pub fn start_for_serve(
    target: &Arc<Target>,
    config_path: Option<&Path>,
    choice: SocketChoice,
    bound: &[(SocketAddr, bool)],
) -> Result<Option<ManagementServer>, SocketError> {
    let (path, explicit) = match choice {
        SocketChoice::Off => return Ok(None),
        SocketChoice::Path(path) => (path, true),
        SocketChoice::Default => match default_socket_path() {
            Some(path) => (path, false),
            None => {
                tracing::warn!("no management socket: XDG_RUNTIME_DIR is not set; give --rpc-socket PATH");
                return Ok(None);
            }
        },
    };
    let listeners = bound.iter().map(|&(address, discovery_only)| ActiveListener { address, discovery_only }).collect();
    let management = Management::new(Arc::clone(target), config_path, listeners).map_err(|source| {
        SocketError::ConfigFile { path: config_path.map(Path::to_path_buf).unwrap_or_default(), source }
    })?;
    match ManagementServer::start(&path, management) {
        Ok(server) => Ok(Some(server)),
        Err(error @ SocketError::InUse(_)) if !explicit => {
            tracing::warn!("{error}; this target runs without a management socket");
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

//! The management API of `sluice serve`: JSON-RPC 2.0 on a Unix socket (and, with
//! `[management.network]`, over TCP with mutual TLS), in the spirit of SPDK's rpc.py.
//! The `sluice subsystem|ns|host|listener|rpc` commands that speak it are the
//! sluice-admin crate's.
//!
//! - `protocol`: framing, error codes, typed parameters.
//! - `service`: the methods; each change goes file-first (edit, check, build, write
//!   atomically, apply, restore on refusal).
//! - `document`: the TOML edits (comments and layout kept).
//! - `assemble`: checking a changed config and building one new piece with the
//!   config module.
//! - the config file is replaced with `storage::durable_file::write_atomically`.
//! - `server`: the socket and its one thread; serving one client over any stream.
//! - `network`: the TCP endpoint with mutual TLS, a thread per client (bounded).
//! - `caller`: who calls, what they may call, the audit log of changes.
//! - `worker`: the management thread, the one owner of the service's state; the
//!   socket thread and SIGHUP (reload) hand it their work.
//! - `flatten`: the thread that copies RBD clones, so no management call waits on one.
//!
//! docs/operations.md describes the API for operators.

mod assemble;
mod caller;
mod document;
mod flatten;
mod network;
pub mod protocol;
mod server;
mod service;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvme_target::Target;

pub use management_client::default_socket_path;
pub use network::NetworkServer;
pub use server::{ManagementServer, SocketError};
pub use service::Management;
pub use worker::ManagementThread;

use sluice_config::OpenStorage;

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

/// Where `sluice serve` offers the management API: its socket, and with
/// `[management.network]` the network endpoint (the checked settings).
#[derive(Default)]
pub struct ApiEndpoints {
    pub socket: SocketChoice,
    pub network: Option<sluice_config::management::NetworkSettings>,
}

/// The management side of a running `sluice serve`: the thread that owns the API's
/// state (and runs reloads), and the socket when one is offered. Dropping it stops
/// the socket first, then the thread.
pub struct ManagementRunning {
    /// `None`: no socket (turned off, no default path, or the default path is taken by
    /// another server); reloads still work.
    pub server: Option<ManagementServer>,
    /// The network endpoint, with `[management.network]`.
    pub network: Option<NetworkServer>,
    pub thread: ManagementThread,
}

/// Starts the management thread and socket of `sluice serve`. `storage` is the named
/// storage the target was built with (`Config::open`); `listeners` changes the
/// runtime's listeners live.
pub fn start_for_serve(
    target: &Arc<Target>,
    config_path: Option<&Path>,
    endpoints: ApiEndpoints,
    listeners: target_server::LiveListeners,
    storage: OpenStorage,
    gateway: Option<sluice_gateway::service::GatewayHandle>,
    group_config: Option<(sluice_gateway::group_config::GroupConfigState, String)>,
) -> Result<ManagementRunning, SocketError> {
    let ApiEndpoints { socket: choice, network } = endpoints;
    // The live listeners replace the fixed list `new` takes.
    let management = Management::new(Arc::clone(target), config_path, Vec::new()).map_err(|source| {
        SocketError::ConfigFile { path: config_path.map(Path::to_path_buf).unwrap_or_default(), source }
    })?;
    let (group_state, running_text) = group_config.map_or((None, None), |(state, text)| (Some(state), Some(text)));
    let management = management.with_group_config(group_state, running_text);
    let thread =
        ManagementThread::start(management.with_storage(storage).with_live_listeners(listeners).with_gateway(gateway))
            .map_err(|source| SocketError::Io { path: PathBuf::from("(management thread)"), source })?;
    let network = network.map(|settings| NetworkServer::start(settings, thread.handle())).transpose()?;
    let (path, explicit) = match choice {
        SocketChoice::Off => return Ok(ManagementRunning { server: None, network, thread }),
        SocketChoice::Path(path) => (path, true),
        SocketChoice::Default => match default_socket_path() {
            Some(path) => (path, false),
            None => {
                tracing::warn!("no management socket: XDG_RUNTIME_DIR is not set; give --rpc-socket PATH");
                return Ok(ManagementRunning { server: None, network, thread });
            }
        },
    };
    let server = match ManagementServer::start(&path, thread.handle()) {
        Ok(server) => Some(server),
        Err(error @ SocketError::InUse(_)) if !explicit => {
            tracing::warn!("{error}; this target runs without a management socket");
            None
        }
        Err(error) => return Err(error),
    };
    Ok(ManagementRunning { server, network, thread })
}

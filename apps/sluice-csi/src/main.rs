//! `sluice-csi`: a Kubernetes CSI driver for Sluice. It serves the CSI Identity,
//! Controller and Node services over a Unix socket; volumes are namespaces of a
//! `sluice serve` gateway, made through its management API and attached on nodes
//! with the kernel's NVMe/TCP host (see controller.rs and node/mod.rs).

mod api;
mod controller;
#[cfg(test)]
mod deploy_files;
mod expand;
#[cfg(test)]
mod fake_gateway;
mod gateway;
mod identity;
mod locks;
mod node;
mod paging;
mod parameters;
mod secrets;
mod snapshots;
mod volume_id;

/// The CSI spec's messages and services, generated from proto/csi.proto.
#[allow(clippy::all, clippy::pedantic)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use crate::csi::controller_server::ControllerServer;
use crate::csi::identity_server::IdentityServer;
use crate::csi::node_server::NodeServer;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Identity, Controller and Node (one process does everything).
    All,
    /// Identity and Controller: the Deployment next to the external-provisioner.
    Controller,
    /// Identity and Node: the DaemonSet on every node.
    Node,
}

#[derive(Debug, Parser)]
#[command(name = "sluice-csi", version, about = "A Kubernetes CSI driver for Sluice NVMe/TCP gateways")]
struct Arguments {
    /// Where to serve CSI: unix:///path/to/csi.sock (or a plain path).
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    endpoint: String,
    /// The gateway's management API: unix:///run/sluice/sluice.sock (the socket
    /// `sluice serve` makes as root; or another path),
    /// or https://HOST:PORT (mutual TLS with --api-ca/--api-cert/--api-key). For a
    /// gateway group, each member's API (repeat, or separate with commas): a call
    /// goes to the next one when a gateway cannot be reached.
    #[arg(long, env = "SLUICE_API", value_delimiter = ',', default_value = "unix:///run/sluice/sluice.sock")]
    api: Vec<String>,
    /// CA certificate of a TLS management endpoint (https:// only).
    #[arg(long)]
    api_ca: Option<PathBuf>,
    /// Client certificate for a TLS management endpoint (https:// only).
    #[arg(long)]
    api_cert: Option<PathBuf>,
    /// Client key for a TLS management endpoint (https:// only).
    #[arg(long)]
    api_key: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Mode::All)]
    mode: Mode,
    /// The driver's name, as the StorageClass's provisioner names it.
    #[arg(long, default_value = "csi.sluice.io")]
    driver_name: String,
    /// This node's host NQN (its node id); default: /etc/nvme/hostnqn.
    #[arg(long, env = "NODE_NQN")]
    node_nqn: Option<String>,
    /// NVMe/TCP discovery addresses (HOST:PORT) nodes use, repeatable; default:
    /// the gateway's listeners that are not wildcard binds.
    #[arg(long = "discovery-address")]
    discovery_addresses: Vec<String>,
    /// Where the node service records the volumes it staged (which NVMe
    /// connections are still needed): the node's own /run (the DaemonSet mounts
    /// it), so the records outlive a restarted pod as the connections do, and end
    /// with the node's boot as they do.
    #[arg(long, default_value = "/run/sluice-csi")]
    state_dir: PathBuf,
}

fn socket_path(endpoint: &str) -> Result<PathBuf, String> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.is_empty() || path.contains("://") {
        return Err(format!("--endpoint {endpoint:?}: give unix:///path/to/csi.sock"));
    }
    Ok(PathBuf::from(path))
}

fn node_nqn(given: Option<String>) -> Result<String, String> {
    let nqn = match given {
        Some(nqn) => nqn,
        None => std::fs::read_to_string("/etc/nvme/hostnqn").map_err(|error| {
            format!(
                "no --node-nqn and /etc/nvme/hostnqn cannot be read ({error}); `nvme gen-hostnqn > /etc/nvme/hostnqn`"
            )
        })?,
    };
    let nqn = nqn.trim().to_string();
    if !nqn.starts_with("nqn.") {
        return Err(format!("the node's host NQN {nqn:?} is not an NQN"));
    }
    Ok(nqn)
}

async fn run(arguments: Arguments) -> Result<(), String> {
    let tls = api::TlsFiles { ca: arguments.api_ca, certificate: arguments.api_cert, key: arguments.api_key };
    let endpoints = arguments.api.iter().map(|url| api::endpoint_of(url, &tls)).collect::<Result<Vec<_>, _>>()?;
    if endpoints.is_empty() {
        return Err("--api: give at least one management endpoint".to_string());
    }
    let api = api::Api::new(endpoints);
    let locks = Arc::new(locks::VolumeLocks::default());
    let serves_controller = arguments.mode != Mode::Node;
    let serves_node = arguments.mode != Mode::Controller;

    let path = socket_path(&arguments.endpoint)?;
    // A socket left by a previous run would make bind fail.
    if path.exists() {
        std::fs::remove_file(&path)
            .map_err(|error| format!("cannot remove the stale socket {}: {error}", path.display()))?;
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|error| format!("{}: {error}", parent.display()))?;
    }
    let listener =
        UnixListener::bind(&path).map_err(|error| format!("cannot listen on {}: {error}", path.display()))?;

    let identity =
        identity::IdentityService { driver_name: arguments.driver_name.clone(), controller: serves_controller };
    let controller = serves_controller.then(|| {
        ControllerServer::new(controller::ControllerService {
            api: api.clone(),
            locks: Arc::clone(&locks),
            discovery_addresses: arguments.discovery_addresses.clone(),
        })
    });
    let node = match serves_node {
        true => Some(NodeServer::new(node::NodeService {
            host_nqn: node_nqn(arguments.node_nqn)?,
            commands: Arc::new(node::system::SystemCommands),
            sysfs: PathBuf::from("/sys"),
            staged: node::records::StagedRecords::new(&arguments.state_dir),
            locks: Arc::clone(&locks),
        })),
        false => None,
    };
    tracing::info!(endpoint = %path.display(), api = %arguments.api.join(","), mode = ?arguments.mode, driver = %arguments.driver_name, "serving CSI");
    let shutdown = async {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot watch SIGTERM; Ctrl-C still stops");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("stopping");
    };
    let served = tonic::transport::Server::builder()
        .add_service(IdentityServer::new(identity))
        .add_optional_service(controller)
        .add_optional_service(node)
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await;
    let _ = std::fs::remove_file(&path);
    served.map_err(|error| format!("serving CSI on {}: {error}", path.display()))
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let arguments = Arguments::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sluice-csi: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(arguments)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sluice-csi: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! `csi-call`: issues single CSI calls to a driver's Unix socket, for tests that
//! drive sluice-csi step by step where no container orchestrator (and no Go CSI
//! client) is around, e.g. tests/interop/csi-failover.sh inside its Linux guest.
//! A test tool, never shipped: an example of the sluice-csi package, built with
//! `cargo build --release -p sluice-csi --example csi-call`. It uses the client
//! generated from the same proto/csi.proto as the driver, so the two always agree.
//!
//! Each subcommand is one RPC; results go to stdout (a volume id, a publish
//! context as JSON), failures to stderr as the gRPC code and message, exit 1.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

#[allow(clippy::all, clippy::pedantic)]
mod csi {
    tonic::include_proto!("csi.v1");
}

use csi::controller_client::ControllerClient;
use csi::node_client::NodeClient;
use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use csi::*;

#[derive(Debug, Parser)]
#[command(name = "csi-call", about = "One CSI call to a driver's Unix socket (a test tool)")]
struct Arguments {
    /// The driver's socket: unix:///path/to/csi.sock or a plain path.
    #[arg(long, default_value = "unix:///csi/csi.sock")]
    endpoint: String,
    /// Raw block access instead of a mounted filesystem (volume capability).
    #[arg(long, global = true)]
    block: bool,
    /// The filesystem of a mounted volume (volume capability).
    #[arg(long, global = true, default_value = "ext4")]
    fs_type: String,
    #[command(subcommand)]
    call: Call,
}

#[derive(Debug, Subcommand)]
enum Call {
    /// NodeGetInfo: prints the node id.
    NodeInfo,
    /// CreateVolume: prints the volume id.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long)]
        size_bytes: i64,
        /// A StorageClass parameter KEY=VALUE, repeatable.
        #[arg(long = "parameter", value_parser = key_value)]
        parameters: Vec<(String, String)>,
    },
    /// DeleteVolume.
    Delete {
        #[arg(long)]
        volume_id: String,
    },
    /// ControllerPublishVolume: prints the publish context as a JSON object.
    ControllerPublish {
        #[arg(long)]
        volume_id: String,
        #[arg(long)]
        node_id: String,
    },
    /// ControllerUnpublishVolume.
    ControllerUnpublish {
        #[arg(long)]
        volume_id: String,
        #[arg(long)]
        node_id: String,
    },
    /// NodeStageVolume.
    NodeStage {
        #[arg(long)]
        volume_id: String,
        #[arg(long)]
        staging_path: PathBuf,
        /// The publish context ControllerPublishVolume returned (a JSON object).
        #[arg(long, default_value = "{}")]
        publish_context: String,
    },
    /// NodeUnstageVolume.
    NodeUnstage {
        #[arg(long)]
        volume_id: String,
        #[arg(long)]
        staging_path: PathBuf,
    },
    /// NodePublishVolume.
    NodePublish {
        #[arg(long)]
        volume_id: String,
        #[arg(long)]
        staging_path: PathBuf,
        #[arg(long)]
        target_path: PathBuf,
        #[arg(long)]
        readonly: bool,
    },
    /// NodeUnpublishVolume.
    NodeUnpublish {
        #[arg(long)]
        volume_id: String,
        #[arg(long)]
        target_path: PathBuf,
    },
}

fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

fn capability(arguments: &Arguments) -> VolumeCapability {
    let access_type = if arguments.block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume { fs_type: arguments.fs_type.clone(), ..Default::default() })
    };
    VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode { mode: Mode::SingleNodeWriter as i32 }),
    }
}

/// A gRPC channel over the Unix socket (the URI is required by tonic, never dialled).
async fn connect(endpoint: &str) -> Result<Channel, String> {
    let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
    Endpoint::from_static("http://csi.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        }))
        .await
        .map_err(|error| format!("cannot connect to the driver at {endpoint}: {error}"))
}

fn path_text(path: &std::path::Path) -> String {
    path.display().to_string()
}

async fn call(arguments: Arguments) -> Result<String, String> {
    let channel = connect(&arguments.endpoint).await?;
    let mut controller = ControllerClient::new(channel.clone());
    let mut node = NodeClient::new(channel);
    let capability = capability(&arguments);
    let refused = |status: tonic::Status| format!("{:?}: {}", status.code(), status.message());
    let output = match arguments.call {
        Call::NodeInfo => node.node_get_info(NodeGetInfoRequest {}).await.map_err(refused)?.into_inner().node_id,
        Call::Create { name, size_bytes, parameters } => {
            let request = CreateVolumeRequest {
                name,
                capacity_range: Some(CapacityRange { required_bytes: size_bytes, limit_bytes: 0 }),
                volume_capabilities: vec![capability],
                parameters: parameters.into_iter().collect(),
                ..Default::default()
            };
            let response = controller.create_volume(request).await.map_err(refused)?.into_inner();
            response.volume.map(|volume| volume.volume_id).unwrap_or_default()
        }
        Call::Delete { volume_id } => {
            let request = DeleteVolumeRequest { volume_id, ..Default::default() };
            controller.delete_volume(request).await.map_err(refused)?;
            String::new()
        }
        Call::ControllerPublish { volume_id, node_id } => {
            let request = ControllerPublishVolumeRequest {
                volume_id,
                node_id,
                volume_capability: Some(capability),
                ..Default::default()
            };
            let response = controller.controller_publish_volume(request).await.map_err(refused)?;
            serde_json::to_string(&response.into_inner().publish_context).map_err(|error| error.to_string())?
        }
        Call::ControllerUnpublish { volume_id, node_id } => {
            let request = ControllerUnpublishVolumeRequest { volume_id, node_id, ..Default::default() };
            controller.controller_unpublish_volume(request).await.map_err(refused)?;
            String::new()
        }
        Call::NodeStage { volume_id, staging_path, publish_context } => {
            let publish_context: HashMap<String, String> = serde_json::from_str(&publish_context)
                .map_err(|error| format!("--publish-context: not a JSON object of strings: {error}"))?;
            let request = NodeStageVolumeRequest {
                volume_id,
                publish_context,
                staging_target_path: path_text(&staging_path),
                volume_capability: Some(capability),
                ..Default::default()
            };
            node.node_stage_volume(request).await.map_err(refused)?;
            String::new()
        }
        Call::NodeUnstage { volume_id, staging_path } => {
            let request = NodeUnstageVolumeRequest { volume_id, staging_target_path: path_text(&staging_path) };
            node.node_unstage_volume(request).await.map_err(refused)?;
            String::new()
        }
        Call::NodePublish { volume_id, staging_path, target_path, readonly } => {
            let request = NodePublishVolumeRequest {
                volume_id,
                staging_target_path: path_text(&staging_path),
                target_path: path_text(&target_path),
                volume_capability: Some(capability),
                readonly,
                ..Default::default()
            };
            node.node_publish_volume(request).await.map_err(refused)?;
            String::new()
        }
        Call::NodeUnpublish { volume_id, target_path } => {
            let request = NodeUnpublishVolumeRequest { volume_id, target_path: path_text(&target_path) };
            node.node_unpublish_volume(request).await.map_err(refused)?;
            String::new()
        }
    };
    Ok(output)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match call(Arguments::parse()).await {
        Ok(output) => {
            if !output.is_empty() {
                println!("{output}");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("csi-call: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

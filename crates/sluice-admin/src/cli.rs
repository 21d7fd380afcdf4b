//! `sluice subsystem|ns|host|listener|backend|pool|limits|rpc`: clients of the management socket of a
//! running `sluice serve`, with human output by default and `-o json` for scripts.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};

use management_client::api::{self, Method, Names, Quantity};
use management_client::{CallError, Client, Endpoint, TlsEndpoint};

use super::cli_output::{render, View};
use management_client::codes::{APPLY_FAILED, INTERNAL_ERROR, PERSIST_FAILED};
use management_client::default_socket_path;
use sluice_config::TlsSetting;

/// Exit status when the request was refused and the user can fix it (arguments, a
/// conflicting or invalid change).
const EXIT_REFUSED: u8 = 2;
/// Exit status when the target could not be reached or failed.
const EXIT_FAILED: u8 = 1;

/// After-help of the management commands.
const AFTER_HELP: &str = "\
Talks to the management socket of a running `sluice serve`, or with --api to its
network endpoint over mutual TLS (docs/operations.md). Changes are written to its
config file and applied at once.

Exit status:
  0  success
  1  the socket or API could not be reached, or the target failed
  2  the request was refused (bad arguments, or a change that conflicts or would
     make the config invalid): nothing was changed";

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Normal,
    Json,
}

/// Options every management command takes.
#[derive(Debug, Args)]
pub struct ClientOptions {
    /// Management socket of `sluice serve` [default: /run/sluice/sluice.sock as root,
    /// else $XDG_RUNTIME_DIR/sluice.sock].
    #[arg(long, global = true, env = "SLUICE_RPC_SOCKET", value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The network endpoint of a `sluice serve` ([management.network]) instead of the
    /// socket: https://HOST:PORT, with --api-ca, --api-cert and --api-key.
    #[arg(long, global = true, env = "SLUICE_API", value_name = "https://HOST:PORT")]
    api: Option<String>,
    /// With --api: PEM file of the CA that signed the server's certificate.
    #[arg(long, global = true, env = "SLUICE_API_CA", value_name = "FILE")]
    api_ca: Option<PathBuf>,
    /// With --api: PEM file of our client certificate; its subject CN must be listed
    /// in the server's [[management.network.client]] entries.
    #[arg(long, global = true, env = "SLUICE_API_CERT", value_name = "FILE")]
    api_cert: Option<PathBuf>,
    /// With --api: PEM file of our certificate's private key.
    #[arg(long, global = true, env = "SLUICE_API_KEY", value_name = "FILE")]
    api_key: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Normal)]
    output_format: Format,
}

/// The management commands (flattened into `sluice`'s subcommands).
#[derive(Debug, Subcommand)]
pub enum ManageCommand {
    /// Subsystems of a running `sluice serve`: add, remove, list, show.
    #[command(after_help = AFTER_HELP)]
    Subsystem {
        #[command(subcommand)]
        command: SubsystemCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// Namespaces of a subsystem: add, remove, list. Connected hosts are notified.
    #[command(after_help = AFTER_HELP)]
    Ns {
        #[command(subcommand)]
        command: NamespaceCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// Hosts allowed to connect to a subsystem, with DH-HMAC-CHAP secrets: allow,
    /// deny, list.
    #[command(after_help = AFTER_HELP)]
    Host {
        #[command(subcommand)]
        command: HostAccessCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// Listeners: add, remove, list (changes apply at once).
    #[command(after_help = AFTER_HELP)]
    Listener {
        #[command(subcommand)]
        command: ListenerCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// Named backends of the config file: kind, size, whether open, who uses them.
    #[command(after_help = AFTER_HELP)]
    Backend {
        #[command(subcommand)]
        command: BackendCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// Pools of the config file: capacity, free space, carves and who uses them.
    #[command(after_help = AFTER_HELP)]
    Pool {
        #[command(subcommand)]
        command: PoolCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// The limits in effect (the config's [target] section and the protocol's).
    #[command(after_help = AFTER_HELP)]
    Limits {
        #[command(subcommand)]
        command: LimitsCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// The gateway group of a running gateway: members and their leases, each ANA
    /// group's owner, and its state as every member reports it to hosts.
    #[command(after_help = AFTER_HELP)]
    Gateway {
        #[command(subcommand)]
        command: GatewayCommand,
        #[command(flatten)]
        client: ClientOptions,
    },
    /// Calls any management method with JSON params, e.g.
    /// `sluice rpc ns_list '{"nqn":"nqn.2026-11.io.sluice:default"}'` or
    /// `sluice rpc rpc_methods`. Prints the JSON result.
    #[command(after_help = AFTER_HELP)]
    Rpc {
        /// Method name.
        method: String,
        /// Params as a JSON object.
        params: Option<String>,
        #[command(flatten)]
        client: ClientOptions,
    },
}

#[derive(Debug, Subcommand)]
pub enum SubsystemCommand {
    /// Adds an empty subsystem (add namespaces with `sluice ns add`).
    Add {
        /// Subsystem NQN, e.g. nqn.2026-11.io.sluice:db1.
        nqn: String,
        /// Serial number [default: derived from the NQN].
        #[arg(long)]
        serial: Option<String>,
        /// Model number.
        #[arg(long)]
        model: Option<String>,
        /// Let any host connect (otherwise only hosts added with `sluice host allow`).
        #[arg(long)]
        allow_any_host: bool,
    },
    /// Removes a subsystem; its hosts are disconnected.
    Remove { nqn: String },
    /// Lists the subsystems.
    List,
    /// Shows one subsystem with its namespaces, hosts and controllers.
    Show { nqn: String },
}

// Parsed once per command line: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// Adds a namespace (the lowest free NSID unless --nsid is given).
    Add {
        /// Subsystem NQN.
        nqn: String,
        /// Namespace ID [default: the lowest free one].
        #[arg(long, short = 'N')]
        nsid: Option<u32>,
        /// Inline backend: ram, null or file.
        #[arg(long, short = 'b', conflicts_with_all = ["device", "pool", "rbd"])]
        backend: Option<String>,
        /// A Ceph RBD image, POOL/IMAGE: a [[backend]] kind = "rbd" is added for it
        /// (on a gateway, with the gateway's cluster settings) and the image created
        /// with --size when it does not exist.
        #[arg(long, conflicts_with_all = ["device", "pool", "path"])]
        rbd: Option<String>,
        /// A [[backend]] of the config file, served whole (`sluice backend list`).
        #[arg(long, conflicts_with = "pool")]
        device: Option<String>,
        /// A [[pool]] of the config file to carve the namespace from (needs --size).
        #[arg(long)]
        pool: Option<String>,
        /// With --pool: allocate on write instead of reserving the space now.
        #[arg(long, requires = "pool")]
        thin: bool,
        /// Capacity, e.g. 1GiB or 1G (K, M, G, T and KiB...: powers of 1024; KB, MB...:
        /// powers of 1000); required for ram and null, and for a file that does not
        /// exist yet.
        #[arg(long, short = 's')]
        size: Option<String>,
        /// Block size in bytes [default: 512 for ram/null, 4096 or the device's for file].
        #[arg(long)]
        block_size: Option<u32>,
        /// File or block device (backend file).
        #[arg(long)]
        path: Option<PathBuf>,
        /// O_DIRECT for backend file [default: true].
        #[arg(long)]
        direct_io: Option<bool>,
        /// NGUID override (32 hex digits) [default: derived from NQN and NSID].
        #[arg(long)]
        nguid: Option<String>,
        /// UUID override [default: derived from NQN and NSID].
        #[arg(long)]
        uuid: Option<String>,
        /// Only these hosts see it (comma-separated NQNs; "" for no host yet)
        /// [default: every allowed host].
        #[arg(long, value_name = "NQN,...")]
        hosts: Option<String>,
    },
    /// Removes a namespace (a file or device backend keeps its data).
    Remove {
        /// Subsystem NQN.
        nqn: String,
        /// Namespace ID.
        nsid: u32,
    },
    /// Lists a subsystem's namespaces.
    List {
        /// Subsystem NQN.
        nqn: String,
    },
    /// Sets or removes QoS limits of a namespace, or of one host on it, live.
    Qos(super::cli_qos::QosArgs),
    /// Lets a host see the namespace (adds it to the namespace's hosts list).
    Attach(super::cli_attach::AttachArgs),
    /// Hides the namespace from a host (the last host leaves an empty list: no host).
    Detach(super::cli_attach::AttachArgs),
    /// Grows a namespace live (pool carve, file, RBD image); hosts are told and see
    /// the new size. Namespaces never shrink.
    Resize {
        /// Subsystem NQN.
        nqn: String,
        /// Namespace ID.
        nsid: u32,
        /// The new size: bytes or "20GiB" (K, M, G, T and KiB...: powers of 1024; KB,
        /// MB...: powers of 1000), a multiple of the block size.
        #[arg(long)]
        size: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum BackendCommand {
    /// Lists the [[backend]] entries.
    List,
    /// Removes a [[backend]] entry nothing uses (and, with --delete-image, its RBD
    /// image: what a failed `ns remove --delete-image` left).
    Remove {
        /// The backend's name.
        name: String,
        /// Also delete its RBD image (refused while the image has snapshots).
        #[arg(long)]
        delete_image: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Lists the [[pool]] entries.
    List,
}

#[derive(Debug, Subcommand)]
pub enum LimitsCommand {
    /// Shows the limits in effect.
    Show,
}

#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Shows the group, its members and ANA group owners and states.
    Status,
    /// Takes member NAME out of service (through any member): its ANA groups move to
    /// the other live members, it keeps its listeners and serves non-optimized until
    /// `undrain`. Refused when no other member could take its groups. Waits until
    /// the groups moved (or --timeout-ms) unless --no-wait.
    Drain {
        /// The member's [gateway] name.
        name: String,
        /// Return once the drain is recorded.
        #[arg(long)]
        no_wait: bool,
        /// Longest wait for the groups to move (default: one and a half leases).
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Puts member NAME back in service; its groups come back by the usual rules
    /// (failback to their preferred member).
    Undrain {
        /// The member's [gateway] name.
        name: String,
    },
    /// Moves ANA group GROUP to member TO (through any member) through the ANA
    /// change state, as a balancing pass would. It stays there until TO is drained or
    /// down (balancing passes move other groups around it). Waits until TO owns it (or
    /// --timeout-ms) unless --no-wait.
    Move {
        /// The ANA group's id.
        group: u32,
        /// The member's [gateway] name.
        to: String,
        /// Return once the move is recorded.
        #[arg(long)]
        no_wait: bool,
        /// Longest wait for the group to move (default: one and a half leases).
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Moves the group's part of a gateway's config file (members, ANA groups,
    /// backends, subsystems) into the cluster as the group's configuration, once;
    /// offline, through the cluster (no sluice serve needed).
    Import {
        /// The gateway's config file, holding the group's part.
        config: PathBuf,
        /// Then rewrite the file to the gateway's own part with `config = "cluster"`
        /// (the old file is kept as FILE.before-import).
        #[arg(long)]
        rewrite: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum HostAccessCommand {
    /// Allows a host, or replaces its secrets (secret rotation).
    Allow {
        /// Subsystem NQN.
        nqn: String,
        /// Host NQN.
        host: String,
        /// The host's DH-HMAC-CHAP secret (DHHC-1:...): the host must authenticate.
        /// `@FILE` reads it from FILE (a command line is visible to other users).
        #[arg(long, value_name = "SECRET|@FILE")]
        dhchap_secret: Option<String>,
        /// The controller's secret, for bidirectional authentication (`@FILE` too).
        #[arg(long, value_name = "SECRET|@FILE")]
        dhchap_ctrl_secret: Option<String>,
        /// Hash functions the host may negotiate, most preferred first
        /// (comma-separated: sha256,sha384,sha512).
        #[arg(long, value_name = "LIST")]
        dhchap_hashes: Option<String>,
        /// DH groups the host may negotiate, most preferred first
        /// (comma-separated: ffdhe2048,...,ffdhe8192,null).
        #[arg(long, value_name = "LIST")]
        dhchap_groups: Option<String>,
        /// The host's TLS pre-shared key (NVMeTLSkey-1:..., `@FILE` reads it from FILE),
        /// for listeners with TLS.
        #[arg(long, value_name = "KEY|@FILE")]
        tls_key: Option<String>,
        /// How the host derives TLS keys: rfc8446 (default) or compat (libnvme
        /// before 1.16).
        #[arg(long, value_name = "rfc8446|compat")]
        tls_key_derivation: Option<String>,
    },
    /// Removes a host from the allowed hosts.
    Deny {
        /// Subsystem NQN.
        nqn: String,
        /// Host NQN.
        host: String,
    },
    /// Lists the allowed hosts (secrets are never shown).
    List {
        /// Subsystem NQN.
        nqn: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ListenerCommand {
    /// Listens on an address now and at every start (added to the config file).
    /// An address in use is refused.
    Add {
        /// IP:port, e.g. 0.0.0.0:4420 or [::]:4420.
        address: String,
        /// Serve only discovery on it (like port 8009).
        #[arg(long)]
        discovery_only: bool,
        /// TLS 1.3 with pre-shared keys: the hosts' keys are each subsystem host
        /// entry's `tls_key` (see `sluice host allow --tls-key`).
        #[arg(long, value_enum, default_value_t = TlsSetting::None)]
        tls: TlsSetting,
    },
    /// Stops listening on an address and closes the connections accepted through
    /// it (only those); removed from the config file. The last listener stays.
    Remove { address: String },
    /// Lists configured and active listeners.
    List,
}

/// A failure with its exit status.
struct Failure {
    message: String,
    code: u8,
    /// The JSON-RPC error object, printed with `-o json`.
    error: Option<Value>,
}

impl Failure {
    fn refused(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: EXIT_REFUSED, error: None }
    }

    fn failed(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: EXIT_FAILED, error: None }
    }
}

/// Runs a management command; errors are one `sluice: error: ...` line on stderr.
pub fn run(command: ManageCommand) -> ExitCode {
    if let ManageCommand::Gateway { command: GatewayCommand::Import { config, rewrite }, .. } = &command {
        return match sluice_gateway::group_config::import(config, *rewrite) {
            Ok(message) => {
                println!("{message}");
                ExitCode::SUCCESS
            }
            Err(message) => report(Failure::refused(message), Format::Normal),
        };
    }
    let (client, method, params, view) = match request_of(command) {
        Ok(request) => request,
        Err(failure) => return report(failure, Format::Normal),
    };
    let outcome = endpoint(&client).and_then(|endpoint| call(endpoint, &method, params));
    match outcome {
        Ok(mut result) => {
            if matches!(view, View::Gateway) {
                sluice_gateway::status::add_reported_states(&mut result);
            }
            match client.output_format {
                Format::Json => println!("{}", serde_json::to_string_pretty(&result).unwrap_or_default()),
                Format::Normal => print!("{}", render(view, &result)),
            }
            ExitCode::SUCCESS
        }
        Err(failure) => report(failure, client.output_format),
    }
}

fn report(failure: Failure, format: Format) -> ExitCode {
    if let (Format::Json, Some(error)) = (format, &failure.error) {
        println!("{}", serde_json::to_string_pretty(&json!({ "error": error })).unwrap_or_default());
    }
    eprintln!("sluice: error: {}", failure.message);
    ExitCode::from(failure.code)
}

type Call = (ClientOptions, String, Value, View);

/// The method, params and view of a command.
fn request_of(command: ManageCommand) -> Result<Call, Failure> {
    let (client, (method, params), view) = match command {
        ManageCommand::Subsystem { command, client } => match command {
            SubsystemCommand::Add { nqn, serial, model, allow_any_host } => (
                client,
                typed(api::SubsystemAdd { nqn, serial, model, allow_any_host: allow_any_host.then_some(true) }),
                View::SubsystemAdded,
            ),
            SubsystemCommand::Remove { nqn } => (client, typed(api::SubsystemRemove { nqn }), View::SubsystemRemoved),
            SubsystemCommand::List => (client, typed(api::SubsystemList {}), View::Subsystems),
            SubsystemCommand::Show { nqn } => (client, typed(api::SubsystemShow { nqn }), View::Subsystem),
        },
        ManageCommand::Ns { command, client } => match command {
            NamespaceCommand::Add {
                nqn,
                nsid,
                backend,
                rbd,
                device,
                pool,
                thin,
                size,
                block_size,
                path,
                direct_io,
                nguid,
                uuid,
                hosts,
            } => {
                let request = api::NamespaceAdd {
                    nqn,
                    nsid,
                    backend,
                    rbd,
                    device,
                    pool,
                    thin: thin.then_some(true),
                    // "4096" is sent as a number of bytes, anything else as written.
                    size: size.map(|size| Quantity::from_text(&size)),
                    block_size,
                    path: path.map(|path| path.display().to_string()),
                    direct_io,
                    nguid,
                    uuid,
                    // A comma-separated string; the method splits it (empty: no host).
                    hosts: hosts.map(Names::CommaSeparated),
                    clone_from: None,
                };
                (client, typed(request), View::NamespaceAdded)
            }
            NamespaceCommand::Remove { nqn, nsid } => {
                (client, typed(api::NamespaceRemove { nqn, nsid, delete_image: None }), View::NamespaceRemoved)
            }
            NamespaceCommand::List { nqn } => (client, typed(api::NamespaceListRequest { nqn }), View::Namespaces),
            NamespaceCommand::Qos(arguments) => (client, typed(arguments.into_request()), View::QosChanged),
            NamespaceCommand::Attach(arguments) => (client, typed(arguments.into_attach()), View::AttachmentChanged),
            NamespaceCommand::Detach(arguments) => (client, typed(arguments.into_detach()), View::AttachmentChanged),
            NamespaceCommand::Resize { nqn, nsid, size } => {
                (client, typed(api::NamespaceResize { nqn, nsid, size: Quantity::Text(size) }), View::Resized)
            }
        },
        ManageCommand::Host { command, client } => match command {
            HostAccessCommand::Allow {
                nqn,
                host,
                dhchap_secret,
                dhchap_ctrl_secret,
                dhchap_hashes,
                dhchap_groups,
                tls_key,
                tls_key_derivation,
            } => {
                let request = api::HostAllow {
                    nqn,
                    host,
                    dhchap_secret: dhchap_secret.map(|text| secret_value(&text)).transpose()?,
                    dhchap_ctrl_secret: dhchap_ctrl_secret.map(|text| secret_value(&text)).transpose()?,
                    dhchap_hashes: dhchap_hashes.map(Names::CommaSeparated),
                    dhchap_groups: dhchap_groups.map(Names::CommaSeparated),
                    tls_key: tls_key.map(|text| secret_value(&text)).transpose()?,
                    tls_key_derivation,
                };
                (client, typed(request), View::HostChanged)
            }
            HostAccessCommand::Deny { nqn, host } => (client, typed(api::HostDeny { nqn, host }), View::HostChanged),
            HostAccessCommand::List { nqn } => (client, typed(api::HostListRequest { nqn }), View::Hosts),
        },
        ManageCommand::Listener { command, client } => match command {
            ListenerCommand::Add { address, discovery_only, tls } => {
                let tls = tls.secure_channel();
                let request = api::ListenerAdd {
                    address,
                    discovery_only: discovery_only.then_some(true),
                    tls: (tls != nvme_target::SecureChannel::None).then(|| tls.name().to_string()),
                };
                (client, typed(request), View::ListenerChanged)
            }
            ListenerCommand::Remove { address } => {
                (client, typed(api::ListenerRemove { address }), View::ListenerChanged)
            }
            ListenerCommand::List => (client, typed(api::ListenerList {}), View::Listeners),
        },
        ManageCommand::Backend { command: BackendCommand::List, client } => {
            (client, typed(api::BackendList {}), View::Backends)
        }
        ManageCommand::Backend { command: BackendCommand::Remove { name, delete_image }, client } => {
            (client, typed(api::BackendRemove { name, delete_image: Some(delete_image) }), View::Raw)
        }
        ManageCommand::Pool { command: PoolCommand::List, client } => (client, typed(api::PoolList {}), View::Pools),
        ManageCommand::Limits { command: LimitsCommand::Show, client } => {
            (client, typed(api::LimitsShow {}), View::Limits)
        }
        ManageCommand::Gateway { command: GatewayCommand::Status, client } => {
            (client, typed(api::GatewayStatus {}), View::Gateway)
        }
        ManageCommand::Gateway { command: GatewayCommand::Drain { name, no_wait, timeout_ms }, client } => (
            client,
            typed(api::GatewayDrain { gateway: name, wait: Some(!no_wait), timeout_ms }),
            View::GatewayPlacement,
        ),
        ManageCommand::Gateway { command: GatewayCommand::Undrain { name }, client } => {
            (client, typed(api::GatewayUndrain { gateway: name }), View::GatewayPlacement)
        }
        ManageCommand::Gateway { command: GatewayCommand::Move { group, to, no_wait, timeout_ms }, client } => (
            client,
            typed(api::GatewayMoveAnaGroup { ana_group: group, to, wait: Some(!no_wait), timeout_ms }),
            View::GatewayMoved,
        ),
        ManageCommand::Gateway { command: GatewayCommand::Import { .. }, .. } => {
            return Err(Failure::failed("gateway import runs without the management socket"))
        }
        ManageCommand::Rpc { method, params: text, client } => {
            let params = match text {
                None => Value::Object(Map::new()),
                Some(text) => serde_json::from_str::<Value>(&text)
                    .map_err(|error| Failure::refused(format!("params are not JSON: {error}")))?,
            };
            return Ok((client, method, params, View::Raw));
        }
    };
    Ok((client, method.to_string(), params, view))
}

/// A typed request as the method's name and its parameters.
fn typed<M: Method>(request: M) -> (&'static str, Value) {
    // A request type is plain data (strings, numbers, lists): it always serialises.
    (M::NAME, serde_json::to_value(&request).unwrap_or_default())
}

/// A secret given as `@FILE` is read from FILE (surrounding whitespace dropped).
fn secret_value(text: &str) -> Result<String, Failure> {
    let Some(path) = text.strip_prefix('@') else { return Ok(text.to_string()) };
    std::fs::read_to_string(path)
        .map(|secret| secret.trim().to_string())
        .map_err(|error| Failure::refused(format!("cannot read the secret file {path}: {error}")))
}

fn socket_path(client: &ClientOptions) -> Result<PathBuf, Failure> {
    client.socket.clone().or_else(default_socket_path).ok_or_else(|| {
        Failure::refused("no management socket path: give --socket PATH (or set SLUICE_RPC_SOCKET or XDG_RUNTIME_DIR)")
    })
}

/// The network endpoint with --api (which then needs its three files), else the socket.
fn endpoint(client: &ClientOptions) -> Result<Endpoint, Failure> {
    let Some(url) = &client.api else { return socket_path(client).map(Endpoint::Unix) };
    let file = |given: &Option<PathBuf>, option: &str, what: &str| {
        given.clone().ok_or_else(|| Failure::refused(format!("--api needs {option} FILE: {what}")))
    };
    let ca = file(&client.api_ca, "--api-ca", "the PEM certificate of the CA that signed the server's certificate")?;
    let certificate = file(&client.api_cert, "--api-cert", "our PEM client certificate")?;
    let private_key = file(&client.api_key, "--api-key", "the PEM private key of --api-cert")?;
    TlsEndpoint::parse(url, ca, certificate, private_key)
        .map(Endpoint::Tls)
        .map_err(|reason| Failure::refused(format!("--api: {reason}")))
}

/// One request and its response.
fn call(endpoint: Endpoint, method: &str, params: Value) -> Result<Value, Failure> {
    let client = Client::new(endpoint);
    client.call(method, params).map_err(|error| match error {
        CallError::Remote(remote) => {
            let exit = if matches!(remote.code, INTERNAL_ERROR | PERSIST_FAILED | APPLY_FAILED) {
                EXIT_FAILED
            } else {
                EXIT_REFUSED
            };
            Failure {
                message: format!("{} (JSON-RPC error {})", remote.message, remote.code),
                code: exit,
                error: Some(remote.to_json()),
            }
        }
        other => Failure::failed(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_are_consistent() {
        let command = ManageCommand::augment_subcommands(clap::Command::new("sluice"));
        command.debug_assert();
    }

    #[test]
    fn sizes_are_sent_as_bytes_or_as_written() {
        assert_eq!(Quantity::from_text("4096"), Quantity::Number(4096));
        assert_eq!(Quantity::from_text("1GiB"), Quantity::Text("1GiB".into()));
    }
}

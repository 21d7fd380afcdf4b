//! `sluice`: the command-line front end.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use sluice_config::Config;

/// Exit code for a configuration or usage problem the user can fix.
const EXIT_CONFIG_ERROR: u8 = 2;
/// Exit code for a failure at run time (e.g. the port is in use).
const EXIT_RUNTIME_ERROR: u8 = 1;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Userspace NVMe/TCP target, host and benchmark suite",
    after_help = "\
Host subcommands (discover, connect, list, id-ctrl, ...) speak nvme-cli's vocabulary
over the network: `sluice <subcommand> --help` for each.

Exit status:
  0  success
  1  run-time failure (the target answered with an NVMe error, the connection
     failed, the port is in use)
  2  usage or configuration error"
)]
struct Cli {
    /// Log filter (error, warn, info, debug, trace, or tracing directives)
    /// [default: info for serve, off for the host subcommands].
    #[arg(long, global = true, env = "SLUICE_LOG")]
    log_level: Option<String>,
    /// Log line format on stderr: text (human-readable) or json (one JSON object
    /// per line: timestamp, level, fields.message, target, spans).
    #[arg(long, global = true, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`: how log events are written to stderr.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines (colour on a terminal).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve NVMe/TCP. Without --config: one 1 GiB RAM namespace on 127.0.0.1:4420,
    /// discovery on 127.0.0.1:8009.
    Serve {
        /// TOML file describing listeners, subsystems and namespaces.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Threads (one per core); overrides the config file.
        #[arg(long)]
        threads: Option<usize>,
        /// Serve Prometheus metrics at http://ADDRESS/metrics (e.g. 127.0.0.1:9520).
        #[arg(long, value_name = "ADDRESS")]
        metrics_address: Option<std::net::SocketAddr>,
        /// Management API socket [default: /run/sluice/sluice.sock as root, else
        /// $XDG_RUNTIME_DIR/sluice.sock]. Changes made through it are written to --config.
        #[arg(long, env = "SLUICE_RPC_SOCKET", value_name = "PATH", conflicts_with = "no_rpc_socket")]
        rpc_socket: Option<PathBuf>,
        /// Run without a management socket.
        #[arg(long)]
        no_rpc_socket: bool,
    },
    /// Live per-namespace IOPS, bandwidth and latency of a running `sluice serve`
    /// (read from its metrics endpoint).
    Stat(sluice_admin::stat::StatArgs),
    /// Configuration file tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Benchmark suites (quick, four-corners, eswa, curves, hci) against an embedded
    /// or remote NVMe/TCP target: table, JSON result and HTML report.
    Bench(Box<sluice_bench::BenchArgs>),
    /// Render one or more `sluice bench` JSON results into one HTML report.
    Report(sluice_bench::ReportArgs),
    /// Make an NVMe/TCP TLS pre-shared key in the interchange format (like `nvme
    /// gen-tls-key`); with --hostnqn and --subsysnqn also print its PSK identity.
    #[command(name = "gen-tls-key")]
    GenTlsKey(sluice_host_cli::tls_keys::GenTlsKeyArgs),
    /// Check a TLS pre-shared key (like `nvme check-tls-key`) and print the PSK
    /// identity a host offers with it; never prints the key.
    #[command(name = "check-tls-key")]
    CheckTlsKey(sluice_host_cli::tls_keys::CheckTlsKeyArgs),
    #[command(flatten)]
    Host(Box<sluice_host_cli::HostCommand>),
    #[command(flatten)]
    Manage(Box<sluice_admin::cli::ManageCommand>),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a config file and print what it describes (touches no storage: files,
    /// pools and cache tiers are only created or opened by `serve`).
    Check { file: PathBuf },
    /// Print the embedded default configuration as TOML.
    Default,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Host subcommands report every failure as their own one-line message.
    let default_level = if matches!(
        cli.command,
        Command::Host(_)
            | Command::GenTlsKey(_)
            | Command::CheckTlsKey(_)
            | Command::Bench(_)
            | Command::Report(_)
            | Command::Stat(_)
            | Command::Manage(_)
    ) {
        "off"
    } else {
        "info"
    };
    let log_level = cli.log_level.as_deref().unwrap_or(default_level);
    let filter = tracing_subscriber::EnvFilter::try_new(log_level).unwrap_or_else(|_| {
        eprintln!("sluice: --log-level {log_level:?} is not a valid filter; using \"{default_level}\"");
        tracing_subscriber::EnvFilter::new(default_level)
    });
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => subscriber.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => subscriber.json().with_ansi(false).init(),
    }

    match cli.command {
        Command::Serve { config: config_path, threads, metrics_address, rpc_socket, no_rpc_socket } => {
            let rpc_socket = match (rpc_socket, no_rpc_socket) {
                (_, true) => sluice_daemon::manage::SocketChoice::Off,
                (Some(path), false) => sluice_daemon::manage::SocketChoice::Path(path),
                (None, false) => sluice_daemon::manage::SocketChoice::Default,
            };
            let mut config = match &config_path {
                Some(path) => match Config::load(path) {
                    Ok(config) => config,
                    Err(error) => return fail(error, EXIT_CONFIG_ERROR),
                },
                None => Config::embedded_default(),
            };
            if threads.is_some() {
                config.runtime.threads = threads;
            }
            match sluice_daemon::serve::serve(
                &config,
                &sluice_daemon::serve::ServeOptions { metrics_address, config_path, rpc_socket },
            ) {
                Ok(()) => ExitCode::SUCCESS,
                Err(
                    error @ (sluice_daemon::serve::ServeError::Config(_)
                    | sluice_daemon::serve::ServeError::Target(_)
                    | sluice_daemon::serve::ServeError::State(_)),
                ) => fail(error, EXIT_CONFIG_ERROR),
                Err(error) => fail(error, EXIT_RUNTIME_ERROR),
            }
        }
        Command::Config { command: ConfigCommand::Check { file } } => {
            // Validation only: nothing is created, opened for writing or formatted.
            let checked = Config::load(&file).and_then(|config| {
                let mut report = config.check()?;
                // Ceph clusters answer here too (connected, pool and image looked up,
                // nothing created): a config that validates but cannot serve fails now.
                config.check_clusters()?;
                // The network management API's certificates and key, read and matched.
                if let Some(network) = config.network_management()? {
                    report.warnings.extend(network.warnings);
                }
                Ok(report)
            });
            match checked {
                Ok(report) => {
                    println!("{}: ok", file.display());
                    for line in &report.lines {
                        println!("  {line}");
                    }
                    for warning in &report.warnings {
                        eprintln!("sluice: warning: {warning}");
                    }
                    ExitCode::SUCCESS
                }
                Err(error) => fail(error, EXIT_CONFIG_ERROR),
            }
        }
        Command::Config { command: ConfigCommand::Default } => {
            print!("{}", include_str!("default-config.toml"));
            ExitCode::SUCCESS
        }
        Command::Stat(args) => match sluice_admin::stat::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error @ (sluice_admin::stat::StatError::Interval(_) | sluice_admin::stat::StatError::Format(_))) => {
                fail(error, EXIT_CONFIG_ERROR)
            }
            Err(error) => fail(error, EXIT_RUNTIME_ERROR),
        },
        Command::Bench(args) => sluice_bench::bench(*args),
        Command::Report(args) => sluice_bench::report(args),
        Command::GenTlsKey(args) => sluice_host_cli::tls_keys::gen_tls_key(&args),
        Command::CheckTlsKey(args) => sluice_host_cli::tls_keys::check_tls_key(&args),
        Command::Host(command) => sluice_host_cli::run(*command),
        Command::Manage(command) => sluice_admin::cli::run(*command),
    }
}

fn fail(error: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("sluice: error: {error}");
    ExitCode::from(code)
}

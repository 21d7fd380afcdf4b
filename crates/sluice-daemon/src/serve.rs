//! `sluice serve`: the target on the thread-per-core runtime, until SIGINT/SIGTERM.
//! SIGHUP reloads the config file (on the management thread, see manage/worker.rs);
//! the service manager hears of each state through `notify`.

use std::net::SocketAddr;

use nvme_target::Target;
use target_server::{PollMode, RuntimeConfig};

use sluice_config::{Config, PollModeConfig};

/// Errors of `sluice serve` with the exit code each one maps to.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] sluice_config::ConfigError),
    #[error("{0}")]
    Target(#[from] nvme_target::TargetError),
    #[error("cannot start the runtime: {0}")]
    Runtime(#[from] target_server::RuntimeError),
    #[error("cannot install the signal handler: {0}")]
    Signals(std::io::Error),
    #[error("cannot serve metrics on {address}: {source}")]
    Metrics { address: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Management(#[from] crate::manage::SocketError),
    #[error("cannot join the gateway group: {0}")]
    Gateway(String),
    #[error("{0}")]
    State(String),
}

/// Options of `sluice serve` given on the command line rather than in the config.
#[derive(Debug, Default, Clone)]
pub struct ServeOptions {
    /// Where to serve Prometheus metrics; `None`: no endpoint.
    pub metrics_address: Option<SocketAddr>,
    /// The file the config came from: the management API writes its changes there.
    pub config_path: Option<std::path::PathBuf>,
    /// Where the management API listens.
    pub rpc_socket: crate::manage::SocketChoice,
}

/// Keeps the target's reservations in the gateway group's cluster, and waits (up to
/// one lease) until every namespace's state is loaded, so the first host command
/// finds the group's reservations in force; a namespace still unknown then answers
/// path errors until its state arrives, which the log says.
fn follow_group_reservations(
    plan: &sluice_config::gateway::GatewayPlan,
    target: &std::sync::Arc<Target>,
) -> Result<std::sync::Arc<sluice_gateway::reservations::ClusterReservations>, ServeError> {
    let lease = std::time::Duration::from_millis(plan.lease_ms);
    let whole_group_was_down = sluice_gateway::service::whole_group_was_down(plan);
    let group = sluice_gateway::reservations::ClusterReservations::start(
        sluice_gateway::reservations::GroupSettings {
            cluster: plan.cluster.clone(),
            pool: plan.pool.clone(),
            group: plan.group.clone(),
            member: plan.name.clone(),
            members: plan.members.iter().map(|(name, _)| name.clone()).collect(),
            notify_timeout: lease,
            whole_group_was_down,
        },
        target,
    )
    .map_err(ServeError::State)?;
    let group = std::sync::Arc::new(group);
    target.set_group_reservations(
        std::sync::Arc::clone(&group) as std::sync::Arc<dyn nvme_target::group_reservations::GroupReservations>
    );
    let deadline = std::time::Instant::now() + lease;
    while target.group_reservations_unknown() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    group.end_startup();
    let unknown = target.group_reservations_unknown();
    if unknown > 0 {
        tracing::warn!(namespaces = unknown, group = %plan.group,
            "the group's reservations of some namespaces are not loaded yet: their I/O gets path errors until they are");
    }
    Ok(group)
}

/// Runs the target described by `config` until SIGINT or SIGTERM.
pub fn serve(config: &Config, options: &ServeOptions) -> Result<(), ServeError> {
    // A gateway whose group's configuration is in the cluster runs the group's
    // version (seeding an empty group with its file's group part).
    let (group_config, group_state) =
        match sluice_gateway::group_config::start(config, options.config_path.as_deref(), &|line| {
            crate::notify::send(line);
        })
        .map_err(ServeError::Gateway)?
        {
            Some(started) => (Some(started.config), Some((started.state, started.running_text))),
            None => (None, None),
        };
    let config = group_config.as_ref().unwrap_or(config);
    // Before anything starts: a certificate that cannot be read stops the start.
    let network_management = config.network_management()?;
    for warning in network_management.iter().flat_map(|settings| &settings.warnings) {
        tracing::warn!("config: {warning}");
    }
    let (spec, storage) = config.open()?;
    let target = Target::new(spec)?;
    // Before the listeners open: the first command meets its limits.
    sluice_config::qos::apply(&target, config)?;
    // Before the listeners open: a namespace limited to some hosts is never seen by others.
    sluice_config::attachment::apply(&target, config);
    // Before the listeners open: saved reservations are in force for the first command.
    let mut group_reservations = None;
    match (&config.target.state_dir, config.gateway_plan()?) {
        (state_dir, Some(plan)) => {
            if let Some(state_dir) = state_dir {
                tracing::info!(state_dir = %state_dir.display(),
                    "[target] state_dir does not hold a gateway's reservations: the group keeps them in the cluster");
            }
            group_reservations = Some(follow_group_reservations(&plan, &target)?);
        }
        (Some(state_dir), None) => {
            let store =
                sluice_gateway::reservation_files::ReservationFiles::open(state_dir).map_err(ServeError::State)?;
            target.set_reservation_store(std::sync::Arc::new(store));
        }
        (None, None) => {}
    }
    // Before the listeners open: hosts must never see a group accessible that this
    // gateway has not been granted yet.
    let gateway = match config.gateway_plan()? {
        Some(plan) => Some(sluice_gateway::service::start(&plan, &target).map_err(ServeError::Gateway)?),
        None => None,
    };
    let threads = config
        .runtime
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
        .max(1);
    let runtime_config = RuntimeConfig {
        threads,
        pin_threads: config.runtime.pin_threads,
        poll_mode: match config.runtime.poll_mode {
            PollModeConfig::Sleep => PollMode::Sleep,
            PollModeConfig::BusyPoll => PollMode::BusyPoll,
            PollModeConfig::Adaptive => match config.runtime.adaptive_spin_us {
                Some(spin_us) => PollMode::Adaptive { spin_us },
                None => PollMode::ADAPTIVE,
            },
        },
        listeners: config.listen_addresses()?,
        recv_buffer_bytes: runtime::TARGET_RECEIVE_BUFFER_BYTES,
        shared_receive_buffers: runtime::TARGET_SHARED_RECEIVE_BUFFERS,
        ring_entries: 1024,
        tcp_nodelay: true,
    };
    for subsystem in target.subsystems() {
        let rules = subsystem.hosts.current();
        if !rules.allow_any_host && rules.hosts.is_empty() {
            tracing::warn!(subsystem = %subsystem.nqn,
                "no host may connect: add [[subsystem.host]] nqn = \"...\" entries, `sluice host allow`, or allow_any_host = true");
        }
    }
    let runtime = target_server::start(target.clone(), runtime_config)?;
    let listeners = target_server::LiveListeners::new(target.clone(), &runtime);
    let config_path = options.config_path.as_deref();
    let gateway_status = gateway.as_ref().map(|gateway| gateway.status.clone());
    let management = crate::manage::start_for_serve(
        &target,
        config_path,
        crate::manage::ApiEndpoints { socket: options.rpc_socket.clone(), network: network_management },
        listeners,
        storage,
        gateway.as_ref().map(|gateway| gateway.handle()),
        group_state,
    )?;
    // Members' changes to the group's configuration reach the management thread.
    let group_config_follower = match (config.gateway_plan()?, group_config.is_some()) {
        (Some(plan), true) => {
            let handle = management.thread.handle();
            let changed: std::sync::Arc<dyn Fn() + Send + Sync> =
                std::sync::Arc::new(move || handle.group_config_changed());
            Some(sluice_gateway::group_config::Follower::start(&plan, changed).map_err(ServeError::Gateway)?)
        }
        _ => None,
    };
    if let Some(server) = &management.server {
        println!("sluice: management socket {}", server.path().display());
    }
    if let Some(network) = &management.network {
        println!("sluice: management API at https://{} (mutual TLS)", network.address());
    }
    // Before the banner: its last line, "sluice: ready", means everything is up.
    if let Some(address) = options.metrics_address {
        let bound = crate::metrics::server::start(address, target.clone(), gateway_status.clone())
            .map_err(|source| ServeError::Metrics { address, source })?;
        println!("sluice: metrics at http://{bound}/metrics");
    }
    // Before "ready": a SIGHUP sent by whoever waited for it must reload, not kill
    // (SIGHUP's default action ends the process).
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(ServeError::Signals)?;
    let signal_handle = signals.handle();
    print_banner(config, &target, runtime.local_addrs(), threads);

    let handle = runtime.shutdown_handle();
    let reload = management.thread.handle();
    let waiter = std::thread::Builder::new()
        .name("sluice-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal == SIGHUP {
                    // The management thread reloads; this one stays free for SIGTERM.
                    tracing::info!("SIGHUP: reloading the config file");
                    reload.request_reload();
                    continue;
                }
                tracing::info!(signal, "stopping");
                crate::notify::stopping();
                handle.shutdown();
                break;
            }
        })
        .map_err(ServeError::Signals)?;
    crate::notify::ready(&format!("serving {} subsystem(s)", target.subsystems().len()));
    let result = runtime.join();
    // Also when the runtime stopped by itself (a failure) rather than on a signal.
    crate::notify::stopping();
    drop(group_config_follower);
    drop(management);
    // Hands owned ANA groups to the other gateways at once (no lease to wait out).
    drop(gateway);
    // Unwatches the reservation objects, so the other gateways' changes do not wait
    // for this one's acknowledgement until the OSD drops its watches.
    if let Some(group) = group_reservations {
        group.stop();
    }
    signal_handle.close();
    let _ = waiter.join();
    close_storage(target);
    result?;
    println!("sluice: stopped");
    Ok(())
}

/// Lets go of the target with every backend closed at once (an RBD image's close is a
/// few cluster round trips: one after another, 4,096 of them held a stopping gateway
/// for minutes). The last holder of a backend closes it, so the target goes first
/// (the opened storage went with the management thread), then the backends are
/// dropped in parallel.
fn close_storage(target: std::sync::Arc<Target>) {
    let mut backends: Vec<std::sync::Arc<dyn storage::Backend>> = Vec::new();
    for subsystem in target.subsystems() {
        backends.extend(subsystem.table().entries().map(|entry| std::sync::Arc::clone(&entry.namespace.backend)));
    }
    drop(target);
    runtime::rbd_backend::drop_in_parallel(backends);
}

fn print_banner(config: &Config, target: &Target, bound: &[SocketAddr], threads: usize) {
    let io_listener =
        bound.iter().zip(&config.listeners).find(|(_, listener)| !listener.discovery_only).map(|(address, _)| *address);
    let discovery_listener = bound
        .iter()
        .zip(&config.listeners)
        .find(|(_, listener)| listener.discovery_only)
        .map(|(address, _)| *address)
        .or(io_listener);
    for subsystem in target.subsystems() {
        let total_bytes = subsystem.capacity_bytes();
        let management = match &subsystem.pool {
            Some(pool) => format!(
                ", namespace management on a pool with {:.1} of {:.1} GiB free",
                pool.free_bytes() as f64 / (1u64 << 30) as f64,
                pool.capacity_bytes() as f64 / (1u64 << 30) as f64
            ),
            None => String::new(),
        };
        println!(
            "sluice: subsystem {} with {} namespace(s), {:.1} GiB{management}",
            subsystem.nqn,
            subsystem.namespace_ids().len(),
            total_bytes as f64 / (1u64 << 30) as f64
        );
    }
    for (address, listener) in bound.iter().zip(&config.listeners) {
        let role = if listener.discovery_only { "discovery" } else { "I/O and discovery" };
        println!("sluice: listening on {address} ({role})");
    }
    println!("sluice: {threads} thread(s), {:?} mode", config.runtime.poll_mode);
    if let (Some(io), Some(discovery), Some(subsystem)) = (io_listener, discovery_listener, target.subsystems().first())
    {
        println!("Connect from a Linux host with nvme-cli:");
        println!("  nvme discover -t tcp -a {} -s {}", discovery.ip(), discovery.port());
        println!("  nvme connect -t tcp -a {} -s {} -n {}", io.ip(), io.port(), subsystem.nqn);
    }
    println!("sluice: ready");
}

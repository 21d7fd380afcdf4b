//! Running jobs: the embedded or remote target, one run over the network, one run
//! on the backend directly (local baseline), live progress and CPU accounting.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller, IoPath, Multipath, PathPolicy};
use nvme_spec::NamespaceId;
use nvme_target::{ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use storage::{Backend, Geometry, NullBackend, RamBackend};
use target_server::{PollMode, Runtime, RuntimeConfig};
use workload::{run_worker, Arrivals, Engine, JobSpec, RunControl, Shared, WorkerConfig, WorkerResult};

use super::engine::{LocalEngine, NvmeEngine};
use super::system::CpuSnapshot;
use super::BenchError;

/// NQN of the embedded target's subsystem.
pub const EMBEDDED_NQN: &str = "nqn.2026-11.io.sluice:bench";
/// Logical block size of the embedded namespace.
pub const EMBEDDED_BLOCK_SIZE: u32 = 512;

/// Where the runs go.
pub struct Endpoint {
    pub address: SocketAddr,
    /// The subsystem NQN (for iSCSI: the target's IQN).
    pub nqn: String,
    /// The namespace (for iSCSI: the LUN).
    pub nsid: NamespaceId,
    pub lba_bytes: u32,
    pub capacity: u64,
    pub protocol: Protocol,
    /// The embedded target's backend (for the local baseline) and runtime.
    pub embedded: Option<Embedded>,
    /// How Sluice's host drives its I/O queues to this target (`--host-io`).
    pub host_io: IoPath,
    /// Every path to the subsystem when there are several (multipath runs), else
    /// empty.
    pub paths: Vec<SocketAddr>,
}

/// How the endpoint is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    NvmeTcp,
    /// iSCSI to the `tgtd` process with this pid (its CPU time is the target's).
    Iscsi {
        tgtd_pid: u32,
    },
    /// No target: fio's own rbd engine straight to the image named by `nqn`
    /// ("POOL/IMAGE"), the baseline of `--compare fio-rbd`.
    Rbd,
}

impl Endpoint {
    /// The target runs on this machine, started by the bench: its CPU time can be read
    /// and the loopback ceiling applies.
    pub fn is_local(&self) -> bool {
        self.embedded.is_some() || matches!(self.protocol, Protocol::Iscsi { .. })
    }

    /// `"embedded" | "remote" | "iscsi-tgt"` (`TargetInfo::kind`).
    pub fn kind(&self) -> &'static str {
        match (self.protocol, &self.embedded) {
            (Protocol::Iscsi { .. }, _) => "iscsi-tgt",
            (Protocol::Rbd, _) => "fio-rbd",
            (Protocol::NvmeTcp, Some(_)) => "embedded",
            (Protocol::NvmeTcp, None) => "remote",
        }
    }

    /// The backend's name (`TargetInfo::backend`).
    pub fn backend_kind(&self) -> &'static str {
        match (self.protocol, &self.embedded) {
            (_, Some(embedded)) => embedded.backend_kind,
            (Protocol::Iscsi { .. }, None) => "file",
            (Protocol::Rbd, None) => "rbd",
            (Protocol::NvmeTcp, None) => "remote",
        }
    }

    /// Where the target's CPU time can be read.
    pub fn target_cpu(&self) -> TargetCpu {
        match (self.protocol, &self.embedded) {
            (Protocol::Iscsi { tgtd_pid }, _) => TargetCpu::Process(tgtd_pid),
            (Protocol::NvmeTcp, Some(_)) => TargetCpu::EmbeddedThreads,
            (Protocol::NvmeTcp | Protocol::Rbd, None) => TargetCpu::Unknown,
            (Protocol::Rbd, Some(_)) => TargetCpu::Unknown,
        }
    }
}

/// Where a target's CPU time comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetCpu {
    /// A remote target: not readable.
    Unknown,
    /// The embedded target's runtime threads in this process.
    EmbeddedThreads,
    /// Another process on this machine (all its threads).
    Process(u32),
}

impl TargetCpu {
    /// CPU seconds used so far (user + system), `None` when not readable.
    pub fn seconds(self) -> Option<f64> {
        match self {
            TargetCpu::Unknown => None,
            TargetCpu::EmbeddedThreads => Some(CpuSnapshot::take().target_seconds()),
            TargetCpu::Process(pid) => super::system::process_cpu_seconds(pid),
        }
    }
}

/// The embedded namespace's storage.
pub enum EmbeddedBackend<'a> {
    Ram,
    Null,
    /// A regular file, created sparse at the namespace size when missing.
    File {
        path: &'a std::path::Path,
        direct_io: bool,
    },
    /// A Ceph RBD image, as POOL/IMAGE, in the cluster of $CEPH_CONF (or librados'
    /// default lookup); created or grown to the namespace size.
    Rbd(String),
}

pub struct Embedded {
    pub backend: Arc<dyn Backend>,
    /// The target itself (its namespace's QoS counters are read directly).
    pub target: Arc<Target>,
    pub backend_kind: &'static str,
    runtime: Option<Runtime>,
}

impl Drop for Embedded {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_handle().shutdown();
            let _ = runtime.join();
        }
    }
}

/// Starts the embedded target on 127.0.0.1 (a free port) with one namespace.
pub fn start_embedded(
    storage: EmbeddedBackend<'_>,
    capacity: u64,
    threads: usize,
    poll_mode: PollMode,
) -> Result<Endpoint, BenchError> {
    let geometry =
        Geometry { block_size_bytes: EMBEDDED_BLOCK_SIZE, block_count: capacity / u64::from(EMBEDDED_BLOCK_SIZE) };
    let (backend, kind): (Arc<dyn Backend>, &'static str) = match storage {
        EmbeddedBackend::Ram => (
            RamBackend::with_chunk_memory(geometry, Arc::new(runtime::HugePageChunkMemory))
                .map_err(|e| BenchError::Usage(format!("--namespace-size: {e}")))?,
            "ram",
        ),
        EmbeddedBackend::Null => {
            (NullBackend::try_new(geometry).map_err(|e| BenchError::Usage(format!("--namespace-size: {e}")))?, "null")
        }
        EmbeddedBackend::File { path, direct_io } => {
            let options = runtime::FileOptions {
                block_size_bytes: Some(EMBEDDED_BLOCK_SIZE),
                direct_io,
                size_bytes: Some(geometry.capacity_bytes()),
                ..runtime::FileOptions::default()
            };
            let backend = runtime::FileBackend::open(path, options)
                .map_err(|e| BenchError::Usage(format!("--backing-file: {e}")))?;
            (backend as Arc<dyn Backend>, "file")
        }
        EmbeddedBackend::Rbd(pool_and_image) => {
            let (pool, image) = pool_and_image.split_once('/').unwrap_or(("rbd", &pool_and_image));
            let mut options = runtime::RbdOptions::new(pool, image);
            options.size_bytes = Some(geometry.capacity_bytes());
            options.block_size_bytes = EMBEDDED_BLOCK_SIZE;
            let (backend, _) = runtime::RbdBackend::open(&options)
                .map_err(|e| BenchError::Usage(format!("--rbd-image {pool_and_image}: {e}")))?;
            // The image may be larger than asked (never shrunk): serve all of it.
            (backend as Arc<dyn Backend>, "rbd")
        }
    };
    let spec = TargetSpec {
        listeners: vec![ListenerSpec::tcp("127.0.0.1", 0)],
        subsystems: vec![SubsystemSpec {
            hosts: nvme_target::HostAccess::allow_any(),
            pool: None,
            nqn: EMBEDDED_NQN.into(),
            serial_number: None,
            model_number: Some("Sluice bench".into()),
            namespaces: vec![NamespaceSpec {
                id: NamespaceId(1),
                backend: backend.clone(),
                nguid: None,
                uuid: None,
                ana_group: None,
            }],
        }],
        settings: TargetSettings::default(),
    };
    let target = Target::new(spec).map_err(|e| BenchError::Runtime(format!("embedded target: {e}")))?;
    // Port 0: the runtime binds a free port that all its threads share.
    let bind: SocketAddr = "127.0.0.1:0".parse().expect("a socket address");
    let config = RuntimeConfig {
        threads: threads.max(1),
        pin_threads: false,
        poll_mode,
        listeners: vec![bind],
        recv_buffer_bytes: runtime::TARGET_RECEIVE_BUFFER_BYTES,
        shared_receive_buffers: runtime::TARGET_SHARED_RECEIVE_BUFFERS,
        ring_entries: 1024,
        tcp_nodelay: true,
    };
    let runtime = target_server::start(Arc::clone(&target), config)
        .map_err(|e| BenchError::Runtime(format!("embedded target: {e}")))?;
    let address = runtime.local_addrs().first().copied().unwrap_or(bind);
    Ok(Endpoint {
        address,
        nqn: EMBEDDED_NQN.into(),
        nsid: NamespaceId(1),
        lba_bytes: EMBEDDED_BLOCK_SIZE,
        capacity: geometry.capacity_bytes(),
        protocol: Protocol::NvmeTcp,
        embedded: Some(Embedded { backend, target, backend_kind: kind, runtime: Some(runtime) }),
        host_io: IoPath::default(),
        paths: Vec::new(),
    })
}

/// Parses `tcp://ADDR:PORT/NQN`, or `tcp://ADDR:PORT,ADDR:PORT,.../NQN` for one
/// namespace through several paths (multipath).
pub fn parse_target(text: &str) -> Result<(Vec<SocketAddr>, String), BenchError> {
    let usage = || BenchError::Usage(format!("--target {text:?}: expected tcp://ADDR:PORT[,ADDR:PORT...]/NQN"));
    let rest = text.strip_prefix("tcp://").ok_or_else(usage)?;
    let (addresses, nqn) = rest.split_once('/').ok_or_else(usage)?;
    let addresses = addresses
        .split(',')
        .map(|address| {
            std::net::ToSocketAddrs::to_socket_addrs(address.trim()).map_err(|_| usage())?.next().ok_or_else(usage)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if nqn.is_empty() {
        return Err(usage());
    }
    Ok((addresses, nqn.to_string()))
}

/// The command timeout of the bench's host by default: an I/O that takes longer
/// is a failure of the target, not a measurement (and a target that stops
/// answering costs a job about this long after its window). `--timeout` sets it.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest connection setup of the bench's host (at most the command timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The command timeout in milliseconds, 0 for [`DEFAULT_COMMAND_TIMEOUT`]: one
/// setting of the whole invocation (`--timeout`), read by every connect.
static COMMAND_TIMEOUT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets the host's command timeout for the rest of the invocation (`--timeout`).
pub fn set_command_timeout(timeout: Duration) {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1);
    COMMAND_TIMEOUT_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

fn command_timeout() -> Duration {
    match COMMAND_TIMEOUT_MS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => DEFAULT_COMMAND_TIMEOUT,
        ms => Duration::from_millis(ms),
    }
}

fn options(address: SocketAddr, nqn: &str, queues: u16, queue_size: u16) -> ConnectOptions {
    let mut options = ConnectOptions::new(address, nqn);
    options.io_queues = queues.max(1);
    options.queue_size = queue_size.max(2);
    options.command_timeout = command_timeout();
    options.connect_timeout = CONNECT_TIMEOUT.min(command_timeout());
    options.controller_loss_timeout = Duration::from_secs(5);
    options.reconnect_delay = Duration::from_millis(500);
    options
}

/// Connects to a remote target and finds its first active namespace. With several
/// addresses (paths to one subsystem) the first is asked, and the runs go through
/// every path (multipath).
pub fn connect_remote(addresses: &[SocketAddr], nqn: &str) -> Result<Endpoint, BenchError> {
    let address = addresses[0];
    let controller = Controller::connect(options(address, nqn, 1, 32))
        .map_err(|e| BenchError::Runtime(format!("cannot connect to {address} ({nqn}): {e}")))?;
    let nsid = controller
        .active_namespaces()
        .map_err(|e| BenchError::Runtime(format!("{address}: listing namespaces failed: {e}")))?
        .first()
        .copied()
        .ok_or_else(|| BenchError::Runtime(format!("{address} ({nqn}) has no active namespace")))?;
    let identify = controller
        .identify_namespace(nsid)
        .map_err(|e| BenchError::Runtime(format!("{address}: Identify Namespace failed: {e}")))?;
    let lba_bytes = controller
        .block_size(nsid)
        .map_err(|e| BenchError::Runtime(format!("{address}: namespace {}: {e}", nsid.0)))?;
    let capacity = identify.namespace_size * u64::from(lba_bytes);
    let _ = controller.disconnect();
    Ok(Endpoint {
        address,
        nqn: nqn.to_string(),
        nsid,
        lba_bytes,
        capacity,
        protocol: Protocol::NvmeTcp,
        embedded: None,
        host_io: IoPath::default(),
        paths: addresses.to_vec(),
    })
}

/// What one run measured, ready to become a `RunResult`.
pub struct Measured {
    pub result: WorkerResult,
    pub samples: Vec<workload::SecondSample>,
    pub initiator_seconds: f64,
    pub target_seconds: f64,
    /// Seconds the threads waited for a CPU (runnable, not running), summed over
    /// threads; `None` when the kernel does not say.
    pub initiator_runqueue_seconds: Option<f64>,
    pub target_runqueue_seconds: Option<f64>,
    /// Why the target failed this run (it could not be connected, or connections
    /// failed during the run and the host reconnected), as the host saw it.
    pub target_failure: Option<String>,
}

impl Measured {
    /// A run that never started: the target failed first.
    fn target_failed(reason: String) -> Measured {
        Measured {
            result: WorkerResult::default(),
            samples: Vec::new(),
            initiator_seconds: 0.0,
            target_seconds: 0.0,
            initiator_runqueue_seconds: None,
            target_runqueue_seconds: None,
            target_failure: Some(reason),
        }
    }
}

/// Checks a job fits the endpoint.
pub fn check_fits(job: &JobSpec, endpoint: &Endpoint) -> Result<u64, BenchError> {
    job.validate().map_err(|e| BenchError::Usage(e.to_string()))?;
    if !job.block_size.is_multiple_of(endpoint.lba_bytes) {
        return Err(BenchError::Usage(format!(
            "job {:?}: block size {} is not a multiple of the namespace's {} byte blocks",
            job.name, job.block_size, endpoint.lba_bytes
        )));
    }
    let region = job.effective_region(endpoint.capacity);
    let needed = u64::from(job.block_size)
        * match job.pattern {
            workload::Pattern::Sequential => u64::from(job.threads),
            workload::Pattern::Random => 1,
        };
    if region < needed {
        return Err(BenchError::Usage(format!(
            "namespace too small for job {:?}: {} bytes available, {} needed ({} thread(s) x {} byte blocks)",
            job.name, region, needed, job.threads, job.block_size
        )));
    }
    if let Some(size) = job.region_bytes {
        if size > endpoint.capacity {
            return Err(BenchError::Usage(format!(
                "namespace too small for job {:?}: region {} bytes > namespace {} bytes",
                job.name, size, endpoint.capacity
            )));
        }
    }
    Ok(region)
}

/// Runs `job` over NVMe/TCP against `endpoint`.
pub fn run_network(
    job: &JobSpec,
    endpoint: &Endpoint,
    stop: &RunControl,
    progress: bool,
) -> Result<Measured, BenchError> {
    if endpoint.protocol != Protocol::NvmeTcp {
        return Err(BenchError::Usage(
            "Sluice's host speaks NVMe/TCP only: drive an iSCSI target with --driver fio".into(),
        ));
    }
    let region = check_fits(job, endpoint)?;
    let threads = job.threads as usize;
    // Queue entries: the job's depth times the commands one I/O takes (MDTS 128 KiB
    // on Sluice; a larger I/O is split), plus one (a queue of N entries holds N-1).
    let chunks = job.block_size.div_ceil(128 * 1024).max(1);
    let queue_size = (job.queue_depth * chunks + 1).clamp(2, 1024) as u16;
    if endpoint.paths.len() > 1 {
        return run_multipath(job, endpoint, region, queue_size, stop, progress);
    }
    // One controller with `threads` I/O queues; if the target grants fewer, more
    // controllers are connected until every thread has a queue of its own.
    let mut controllers = Vec::new();
    let mut queues = Vec::new();
    while queues.len() < threads {
        let wanted = (threads - queues.len()).min(u16::MAX as usize) as u16;
        // A target that fails here fails this run; the suite goes on.
        let controller = match Controller::connect(ConnectOptions {
            io_path: endpoint.host_io,
            ..options(endpoint.address, &endpoint.nqn, wanted, queue_size)
        }) {
            Ok(controller) => controller,
            Err(e) => {
                let reason = format!("cannot connect to {} ({}): {e}", endpoint.address, endpoint.nqn);
                return Ok(Measured::target_failed(reason));
            }
        };
        let max_transfer = controller.max_transfer_bytes().max(endpoint.lba_bytes);
        let granted = controller.io_queue_count();
        if granted == 0 {
            return Ok(Measured::target_failed(format!("{} granted no I/O queue", endpoint.address)));
        }
        for index in 0..granted.min(threads - queues.len()) {
            let Some(queue) = controller.take_io_queue(index) else {
                return Ok(Measured::target_failed(format!("I/O queue {index} unavailable")));
            };
            queues.push(NvmeEngine::new(queue, endpoint.nsid, endpoint.lba_bytes, max_transfer, job.block_size));
        }
        controllers.push(controller);
    }
    let mut measured = run_engines(job, region, queues, stop, progress);
    let reconnects: u64 = controllers.iter().map(Controller::reconnect_count).sum();
    if let Some(cause) = controllers.iter().find_map(Controller::last_failure) {
        measured.target_failure = Some(format!(
            "a connection to the target failed during the run ({reconnects} reconnect(s) succeeded), the last one \
             because {cause}"
        ));
    }
    for controller in controllers {
        let _ = controller.disconnect();
    }
    Ok(measured)
}

/// Runs `job` through every path of `endpoint` (one controller per path, each
/// worker thread with one multipath queue).
fn run_multipath(
    job: &JobSpec,
    endpoint: &Endpoint,
    region: u64,
    queue_size: u16,
    stop: &RunControl,
    progress: bool,
) -> Result<Measured, BenchError> {
    let threads = (job.threads as usize).min(u16::MAX as usize) as u16;
    let paths = endpoint
        .paths
        .iter()
        .map(|&address| ConnectOptions {
            io_path: endpoint.host_io,
            ..options(address, &endpoint.nqn, threads, queue_size)
        })
        .collect();
    let multipath = match Multipath::connect(paths, endpoint.nsid, PathPolicy::QueueDepth) {
        Ok(multipath) => multipath,
        Err(e) => {
            let reason = format!("multipath connect to {} ({}): {e}", endpoint.address, endpoint.nqn);
            return Ok(Measured::target_failed(reason));
        }
    };
    for (address, why) in multipath.unreachable() {
        tracing::warn!(%address, why, "multipath: path unreachable; running without it");
    }
    if multipath.io_queue_count() < usize::from(threads) {
        return Err(BenchError::Runtime(format!(
            "the paths grant {} I/O queue(s), {threads} thread(s) need one each",
            multipath.io_queue_count()
        )));
    }
    let max_transfer = multipath.max_transfer_bytes().max(endpoint.lba_bytes);
    let mut engines = Vec::with_capacity(usize::from(threads));
    for index in 0..usize::from(threads) {
        let queue = multipath
            .take_io_queue(index)
            .ok_or_else(|| BenchError::Runtime(format!("multipath I/O queue {index} unavailable")))?;
        engines.push(NvmeEngine::new(queue, endpoint.nsid, endpoint.lba_bytes, max_transfer, job.block_size));
    }
    let measured = run_engines(job, region, engines, stop, progress);
    let _ = multipath.disconnect();
    Ok(measured)
}

/// Runs `job` on the embedded backend directly (no network).
pub fn run_local(job: &JobSpec, endpoint: &Endpoint, stop: &RunControl) -> Result<Option<Measured>, BenchError> {
    let Some(embedded) = &endpoint.embedded else {
        return Ok(None);
    };
    let region = check_fits(job, endpoint)?;
    let engines: Vec<LocalEngine> = (0..job.threads)
        .map(|_| LocalEngine::new(embedded.backend.open_queue(), endpoint.lba_bytes, job.queue_depth as usize))
        .collect();
    Ok(Some(run_engines(job, region, engines, stop, false)))
}

fn run_engines<E: Engine + Send>(
    job: &JobSpec,
    region: u64,
    mut engines: Vec<E>,
    stop: &RunControl,
    progress: bool,
) -> Measured {
    let shared = Shared::new(stop.clone());
    let threads = engines.len() as u32;
    let arrivals = match job.rate_limit_iops {
        Some(rate) => Arrivals::Open { rate: rate / f64::from(threads) },
        None => Arrivals::Closed,
    };
    let start = Instant::now() + Duration::from_millis(20);
    let base = WorkerConfig { job: job.clone(), thread: 0, region, arrivals, start };
    let measure_start = base.measure_start();
    let measure_end = base.measure_end();
    // Workers wait here after their run until the coordinator has taken its last
    // CPU snapshot: a thread that has exited is no longer in /proc.
    let release = std::sync::Barrier::new(engines.len() + 1);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let (result, cpu) = std::thread::scope(|scope| {
        let handles: Vec<_> = engines
            .drain(..)
            .enumerate()
            .map(|(thread, mut engine)| {
                let config = WorkerConfig { thread: thread as u32, ..base.clone() };
                let (shared, release, done) = (&shared, &release, &done);
                std::thread::Builder::new()
                    .name(format!("bench-worker-{thread}"))
                    .spawn_scoped(scope, move || {
                        let result = run_worker(&config, &mut engine, shared);
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        release.wait();
                        // Dropped here, on the thread whose io_uring ring carries its
                        // queue: another thread could not drive that ring.
                        drop(engine);
                        result
                    })
                    .expect("spawn a bench worker")
            })
            .collect();
        // Coordinator: CPU snapshots at the window's edges, progress every second.
        let mut first: Option<CpuSnapshot> = None;
        let mut last: Option<CpuSnapshot> = None;
        let mut printer = Progress::new(progress, &job.name);
        let mut next_tick = measure_start + Duration::from_secs(1);
        loop {
            let now = Instant::now();
            let finished = done.load(std::sync::atomic::Ordering::Relaxed) == handles.len();
            if first.is_none() && now >= measure_start {
                first = Some(CpuSnapshot::take());
            }
            if last.is_none() && (now >= measure_end || stop.load(std::sync::atomic::Ordering::Relaxed) || finished) {
                last = Some(CpuSnapshot::take());
            }
            if last.is_some() || finished {
                break;
            }
            if now >= next_tick + Duration::from_millis(30) {
                let second = next_tick.duration_since(measure_start).as_secs() as usize;
                if let Some(sample) = shared.sample(second - 1) {
                    printer.tick(second, &sample);
                }
                next_tick += Duration::from_secs(1);
            }
            let wake = [measure_start, measure_end, next_tick + Duration::from_millis(30)]
                .into_iter()
                .filter(|at| *at > now)
                .min()
                .unwrap_or(now + Duration::from_millis(10));
            std::thread::sleep(wake.saturating_duration_since(now).min(Duration::from_millis(50)));
        }
        printer.finish();
        release.wait();
        let mut total = WorkerResult::default();
        for handle in handles {
            if let Ok(result) = handle.join() {
                total.merge(&result);
            }
        }
        let cpu = match (first, last) {
            (Some(first), Some(last)) => last.since(&first),
            _ => Default::default(),
        };
        (total, cpu)
    });
    let seconds = result.measured.as_secs_f64().ceil() as usize;
    Measured {
        samples: shared.samples(seconds.max(1)),
        result,
        initiator_seconds: cpu.initiator_seconds,
        target_seconds: cpu.target_seconds,
        initiator_runqueue_seconds: cpu.initiator_runqueue_seconds,
        target_runqueue_seconds: cpu.target_runqueue_seconds,
        target_failure: None,
    }
}

/// The live progress line: rewritten in place on a terminal, one line per second
/// otherwise (both on stderr).
pub struct Progress {
    enabled: bool,
    tty: bool,
    name: String,
    printed: bool,
}

impl Progress {
    pub fn new(enabled: bool, name: &str) -> Progress {
        Progress { enabled, tty: std::io::stderr().is_terminal(), name: name.to_string(), printed: false }
    }

    fn tick(&mut self, second: usize, sample: &workload::SecondSample) {
        self.show(second as f64, sample.ios as f64, sample.bytes as f64, sample.p99_ns as f64 / 1e3, sample.errors);
    }

    /// One interval ending `seconds` into the measured time.
    pub fn show(&mut self, seconds: f64, iops: f64, bytes_per_second: f64, p99_us: f64, errors: u64) {
        if !self.enabled {
            return;
        }
        let line = format!(
            "  {:<40} {:>4.0}s {:>10.0} IOPS {:>9.1} MB/s  p99 {:>8.1} us{}",
            self.name,
            seconds,
            iops,
            bytes_per_second / 1e6,
            p99_us,
            if errors > 0 { format!("  {errors} errors") } else { String::new() }
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
        self.printed = true;
    }

    pub fn finish(&mut self) {
        if self.enabled && self.tty && self.printed {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod target_tests {
    use super::*;

    #[test]
    fn targets_name_one_or_several_paths() {
        let (paths, nqn) = parse_target("tcp://127.0.0.1:4420/nqn.2026-11.io.sluice:a").unwrap();
        assert_eq!((paths, nqn.as_str()), (vec!["127.0.0.1:4420".parse().unwrap()], "nqn.2026-11.io.sluice:a"));
        let (paths, _) = parse_target("tcp://127.0.0.1:4420,127.0.0.1:4421/nqn.2026-11.io.sluice:a").unwrap();
        assert_eq!(paths.len(), 2);
        assert_eq!(paths[1].port(), 4421);
        for bad in ["127.0.0.1:4420/nqn", "tcp://127.0.0.1:4420/", "tcp://127.0.0.1:4420,/nqn", "tcp://127.0.0.1/nqn"] {
            assert!(parse_target(bad).is_err(), "{bad} accepted");
        }
    }
}

//! Native NVMe multipath: one namespace reached through several controllers of one
//! subsystem (several listeners, several gateways), chosen by Asymmetric Namespace
//! Access state, with I/O failed over to another path when one dies.
//!
//! - **Paths** are controllers connected with `fail_fast_on_path_loss`: when a
//!   path's connection drops, its commands come back at once with Host Pathing
//!   Error instead of waiting for its reconnect, which goes on in the background.
//! - **ANA**: each path's state for the namespace comes from its ANA log (0Ch), read
//!   at connect and then by one checker thread per path (every second while the
//!   path is not optimized, every five seconds otherwise, and at once after an ANA
//!   error status), so the I/O thread never waits for an admin command.
//! - **Choice**: among paths that are up, optimized ones; non-optimized ones only
//!   when no optimized path is up; inaccessible, persistent-loss and changing paths
//!   never. Round-robin or least queue depth within that tier ([`PathPolicy`]).
//! - **Failover**: a command that completes with a path error (Host Pathing Error,
//!   an ANA status, Command Aborted By Host after a timeout, Transient Transport
//!   Error) is sent again on another path, at most [`MAX_FAILOVERS`] times and never
//!   past the command timeout from its first submission. A path that failed is left
//!   alone for a backoff that doubles per consecutive failure (50 ms to 2 s) and
//!   resets on its first success, so a flapping path cannot make I/O bounce forever.
//!   With no usable path a command waits (parked, with the same backoff) until one
//!   comes back or its time is up; then it completes with the last path error.
//!
//! Resending is safe for reads and writes (idempotent), as with the single-path
//! reconnect; a fused Compare and Write may run twice.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvme_host::status::HOST_PATHING_ERROR;
use nvme_host::{HostCommand, HostCompletion, MAX_COMMAND_DATA_BYTES};
use nvme_spec::ana::AnaState;
use nvme_spec::{CompletionQueueEntry, NamespaceId, Status, SubmissionQueueEntry};

use crate::shared::lock;
use crate::{ClientError, ConnectOptions, Controller, IoPath, IoQueue, PollMode};

/// Times one command is sent again on another path before its error is reported.
pub const MAX_FAILOVERS: u8 = 16;
/// First backoff of a path that failed, and of a command that found no path.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// ANA log reads while a path is not optimized, and while it is.
const ANA_RECHECK_NOT_OPTIMIZED: Duration = Duration::from_secs(1);
const ANA_RECHECK_OPTIMIZED: Duration = Duration::from_secs(5);
/// ANA log reads while a path reports the change state. It is transient (a gateway
/// hands a group over, or takes one, within a round), and while every path of a
/// namespace is changing commands wait parked until a checker reads a state that
/// serves: at the non-optimized pace that was a 0.7 s pause per move with two
/// gateways (docs/results/gateway.md).
const ANA_RECHECK_CHANGE: Duration = Duration::from_millis(100);
/// Longest single wait on one path while others may complete too.
const WAIT_SLICE: Duration = Duration::from_micros(200);

/// How I/O is spread over the usable paths of the best ANA state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PathPolicy {
    /// Each command to the next path in turn (Linux's `round-robin`).
    RoundRobin,
    /// Each command to the path with the fewest commands in flight (Linux's
    /// `queue-depth`).
    #[default]
    QueueDepth,
}

/// ANA state stored in an atomic: 0 means "not reported" (the path serves I/O).
const STATE_UNREPORTED: u8 = 0;

fn state_from_u8(value: u8) -> Option<AnaState> {
    AnaState::from_u8(value)
}

/// What the paths' checker threads and the I/O threads share about one path.
#[derive(Debug)]
struct PathShared {
    address: SocketAddr,
    controller: Controller,
    /// ANAS for the namespace, or `STATE_UNREPORTED`.
    state: AtomicU8,
    /// Set to make the checker read the ANA log now.
    recheck: Mutex<bool>,
    recheck_signal: Condvar,
}

impl PathShared {
    fn state(&self) -> Option<AnaState> {
        state_from_u8(self.state.load(Ordering::Relaxed))
    }

    /// True unless the path reports a state that serves no I/O.
    fn serves_io(&self) -> bool {
        !matches!(self.state(), Some(state) if !state.serves_io())
    }

    /// True unless the path reports a state other than optimized.
    fn optimized(&self) -> bool {
        matches!(self.state(), None | Some(AnaState::Optimized))
    }

    fn ask_recheck(&self) {
        *lock(&self.recheck) = true;
        self.recheck_signal.notify_one();
    }
}

/// The paths to `options.subsystem_nqn` that the discovery controller at
/// `discovery` lists (TCP records; a gateway lists every member's listener): one
/// copy of `options` per path, ready for [`Multipath::connect`]. Records whose
/// address or port does not parse are skipped with a warning; duplicates are
/// listed once.
pub fn discover_paths(discovery: SocketAddr, options: &ConnectOptions) -> Result<Vec<ConnectOptions>, ClientError> {
    let mut paths: Vec<ConnectOptions> = Vec::new();
    for entry in crate::discover(discovery, options)? {
        if entry.transport_type != nvme_spec::discovery::TRTYPE_TCP
            || entry.subsystem_nqn_str() != Some(options.subsystem_nqn.as_str())
        {
            continue;
        }
        let (address, port) =
            (entry.transport_address_str().unwrap_or(""), entry.transport_service_id_str().unwrap_or(""));
        let parsed = address.trim().parse::<std::net::IpAddr>().ok().zip(port.trim().parse::<u16>().ok());
        let Some((ip, port)) = parsed else {
            tracing::warn!(address, port, "multipath: discovery record with an unusable address; skipped");
            continue;
        };
        let address = SocketAddr::new(ip, port);
        if !paths.iter().any(|path| path.address == address) {
            paths.push(ConnectOptions { address, ..options.clone() });
        }
    }
    Ok(paths)
}

/// One path as [`Multipath::paths`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathStatus {
    /// The controller's address.
    pub address: SocketAddr,
    /// The namespace's ANA state on this path (`None`: the controller reports no ANA).
    pub ana_state: Option<AnaState>,
    /// Times this path's controller reconnected.
    pub reconnects: u64,
}

/// A namespace through several paths. See the module documentation.
#[derive(Debug)]
pub struct Multipath {
    nsid: NamespaceId,
    policy: PathPolicy,
    paths: Vec<Arc<PathShared>>,
    /// Paths given at connect that could not be reached then (not retried).
    unreachable: Vec<(SocketAddr, String)>,
    stop: Arc<AtomicBool>,
    checkers: Vec<JoinHandle<()>>,
    command_timeout: Duration,
    spin_across_paths: Option<Duration>,
}

impl Multipath {
    /// Connects every path (one controller each; `fail_fast_on_path_loss` is
    /// forced on), checks that they lead to the same namespace (same NGUID and
    /// EUI-64 in Identify Namespace) and reads each one's ANA state. Paths that
    /// cannot be reached now are skipped (see [`Multipath::unreachable`]); at least
    /// one must connect.
    pub fn connect(
        paths: Vec<ConnectOptions>,
        nsid: NamespaceId,
        policy: PathPolicy,
    ) -> Result<Multipath, ClientError> {
        if paths.is_empty() {
            return Err(ClientError::InvalidArgument("multipath needs at least one path".into()));
        }
        let command_timeout = paths.iter().map(|options| options.command_timeout).max().unwrap_or_default();
        let spin_across_paths = match paths[0].io_path {
            IoPath::Ring(PollMode::BusyPoll) => Some(Duration::MAX),
            IoPath::Ring(PollMode::Adaptive { spin_us }) => {
                Some(Duration::from_micros(u64::from(spin_us)).max(WAIT_SLICE))
            }
            IoPath::Ring(PollMode::Sleep) | IoPath::Blocking => None,
        };
        let mut connected = Vec::new();
        let mut unreachable = Vec::new();
        let mut first_error = None;
        let mut identity = None;
        for mut options in paths {
            options.fail_fast_on_path_loss = true;
            let address = options.address;
            let controller = match Controller::connect(options) {
                Ok(controller) => controller,
                Err(error) => {
                    tracing::warn!(%address, %error, "multipath: path unreachable");
                    unreachable.push((address, error.to_string()));
                    first_error.get_or_insert(error);
                    continue;
                }
            };
            let namespace = controller.identify_namespace(nsid)?;
            if namespace.namespace_size == 0 {
                return Err(ClientError::InvalidArgument(format!("namespace {} is not active on {address}", nsid.0)));
            }
            let this = (namespace.namespace_globally_unique_identifier, namespace.ieee_extended_unique_identifier);
            match identity {
                None => identity = Some((this, address)),
                Some((first, first_address)) if first != this => {
                    return Err(ClientError::InvalidController(format!(
                        "{address} and {first_address} report different identities for namespace {}: not paths to one namespace",
                        nsid.0
                    )));
                }
                Some(_) => {}
            }
            let state = controller.ana_state(nsid)?.map_or(STATE_UNREPORTED, |state| state as u8);
            connected.push(Arc::new(PathShared {
                address,
                controller,
                state: AtomicU8::new(state),
                recheck: Mutex::new(false),
                recheck_signal: Condvar::new(),
            }));
        }
        if connected.is_empty() {
            return Err(first_error.unwrap_or(ClientError::Closed));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut checkers = Vec::with_capacity(connected.len());
        for path in &connected {
            let (path, stop) = (Arc::clone(path), Arc::clone(&stop));
            let spawned = std::thread::Builder::new()
                .name("sluice-ana-check".into())
                .spawn(move || check_ana(&path, nsid, &stop))
                .map_err(|error| ClientError::InvalidArgument(format!("cannot start a path checker: {error}")))?;
            checkers.push(spawned);
        }
        Ok(Multipath {
            nsid,
            policy,
            paths: connected,
            unreachable,
            stop,
            checkers,
            command_timeout,
            spin_across_paths,
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> NamespaceId {
        self.nsid
    }

    /// Every connected path with its ANA state, in the order given.
    pub fn paths(&self) -> Vec<PathStatus> {
        self.paths
            .iter()
            .map(|path| PathStatus {
                address: path.address,
                ana_state: path.state(),
                reconnects: path.controller.reconnect_count(),
            })
            .collect()
    }

    /// Paths that could not be reached at connect, with why.
    pub fn unreachable(&self) -> &[(SocketAddr, String)] {
        &self.unreachable
    }

    /// Identify Namespace data of the namespace (from the first path).
    pub fn identify_namespace(&self) -> Result<nvme_spec::IdentifyNamespace, ClientError> {
        self.paths[0].controller.identify_namespace(self.nsid)
    }

    /// The namespace's block size (from the first path).
    pub fn block_size(&self) -> Result<u32, ClientError> {
        self.paths[0].controller.block_size(self.nsid)
    }

    /// Largest transfer of one command on every path (the smallest MDTS).
    pub fn max_transfer_bytes(&self) -> u32 {
        self.paths.iter().map(|path| path.controller.max_transfer_bytes()).min().unwrap_or(4096)
    }

    /// Number of I/O queues every path has.
    pub fn io_queue_count(&self) -> usize {
        self.paths.iter().map(|path| path.controller.io_queue_count()).min().unwrap_or(0)
    }

    /// Takes I/O queue `index` of every path and makes one multipath queue of them
    /// for one caller thread. `None` when a path has no such queue free.
    pub fn take_io_queue(&self, index: usize) -> Option<MultipathQueue> {
        let mut paths = Vec::with_capacity(self.paths.len());
        for shared in &self.paths {
            let queue = shared.controller.take_io_queue(index)?;
            paths.push(QueuePath { shared: Arc::clone(shared), queue, in_flight: 0, failures: 0, down_until: None });
        }
        let depth = paths.iter().map(|path| path.queue.depth()).min().unwrap_or(0);
        Some(MultipathQueue {
            policy: self.policy,
            paths,
            next_path: 0,
            table: vec![Tracked::default(); depth],
            free: (0..depth as u32).rev().collect(),
            ready: VecDeque::with_capacity(depth),
            parked: VecDeque::with_capacity(depth),
            scratch: Vec::with_capacity(depth),
            command_timeout: self.command_timeout,
            spin_across_paths: self.spin_across_paths,
            last_completion_at: Instant::now(),
            has_write_source: false,
        })
    }

    /// Disconnects every path cleanly; returns the first error.
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        self.stop_checkers();
        let mut result = Ok(());
        for path in std::mem::take(&mut self.paths) {
            match Arc::try_unwrap(path) {
                Ok(path) => {
                    if let Err(error) = path.controller.disconnect() {
                        result = result.and(Err(error));
                    }
                }
                // A MultipathQueue still holds it: dropping closes it later.
                Err(_) => {
                    result = result.and(Err(ClientError::InvalidArgument("a multipath queue is still in use".into())))
                }
            }
        }
        result
    }

    fn stop_checkers(&mut self) {
        self.stop.store(true, Ordering::Release);
        for path in &self.paths {
            path.ask_recheck();
        }
        for checker in self.checkers.drain(..) {
            let _ = checker.join();
        }
    }
}

impl Drop for Multipath {
    fn drop(&mut self) {
        self.stop_checkers();
    }
}

/// A path's checker thread: re-reads the namespace's ANA state now and then, and
/// at once when asked.
fn check_ana(path: &PathShared, nsid: NamespaceId, stop: &AtomicBool) {
    loop {
        let interval = match path.state() {
            Some(AnaState::Optimized) | None => ANA_RECHECK_OPTIMIZED,
            Some(AnaState::Change) => ANA_RECHECK_CHANGE,
            Some(_) => ANA_RECHECK_NOT_OPTIMIZED,
        };
        {
            let asked = lock(&path.recheck);
            let (mut asked, _) = path
                .recheck_signal
                .wait_timeout_while(asked, interval, |asked| !*asked && !stop.load(Ordering::Acquire))
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *asked = false;
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        match path.controller.ana_state(nsid) {
            Ok(state) => {
                let value = state.map_or(STATE_UNREPORTED, |state| state as u8);
                let previous = path.state.swap(value, Ordering::Relaxed);
                if previous != value {
                    tracing::info!(address = %path.address, state = state.map_or("unreported", AnaState::name), "multipath: ANA state changed");
                }
            }
            Err(error) => tracing::debug!(address = %path.address, %error, "multipath: ANA log read failed"),
        }
    }
}

/// One path of a [`MultipathQueue`].
#[derive(Debug)]
struct QueuePath {
    shared: Arc<PathShared>,
    queue: IoQueue,
    in_flight: usize,
    /// Consecutive path errors (sets the backoff).
    failures: u32,
    /// Not used before then after a path error.
    down_until: Option<Instant>,
}

impl QueuePath {
    fn usable(&self, now: Instant) -> bool {
        !matches!(self.down_until, Some(until) if until > now) && self.shared.serves_io()
    }
}

/// One command of a [`MultipathQueue`].
#[derive(Clone, Copy, Debug, Default)]
struct Tracked {
    in_use: bool,
    user_tag: u64,
    sqe: SubmissionQueueEntry,
    data_in_bytes: u32,
    /// The command's `read_destination`, for a resubmission on another path.
    read_destination: Option<u64>,
    /// The command's `write_source`, for a resubmission on another path.
    write_source: Option<nvme_host::SourceBuffer>,
    failovers: u8,
    /// The path it is on now (index into `paths`).
    path: usize,
    submitted_at: Option<Instant>,
    /// The last path error, reported if it runs out of tries.
    last_status: Status,
}

/// The I/O queues of every path for one caller thread: `submit` / `reap` like an
/// [`IoQueue`], with path choice and failover. Depth: the smallest of the paths'.
#[derive(Debug)]
pub struct MultipathQueue {
    policy: PathPolicy,
    paths: Vec<QueuePath>,
    next_path: usize,
    table: Vec<Tracked>,
    free: Vec<u32>,
    ready: VecDeque<HostCompletion>,
    /// Commands that found no usable path: (table index, data, retry at).
    parked: VecDeque<(u32, Vec<u8>, Instant)>,
    scratch: Vec<HostCompletion>,
    command_timeout: Duration,
    /// With several paths busy, how long after the last completion `reap` keeps
    /// polling every path without waiting on any (`None`: never, it waits). Each
    /// path has its own ring, and a wait on one does not see the others'
    /// completions, so spinning across all of them is what keeps a polling host
    /// from leaving one path's completions waiting while it waits on another.
    spin_across_paths: Option<Duration>,
    last_completion_at: Instant,
    /// `set_write_source` was called: commands may name a `write_source`.
    has_write_source: bool,
}

/// Statuses that say "this path", not "this command": the command goes to
/// another path.
fn is_path_error(status: Status) -> bool {
    let kind = status.kind();
    kind == HOST_PATHING_ERROR.kind()
        || kind == Status::ASYMMETRIC_ACCESS_INACCESSIBLE.kind()
        || kind == Status::ASYMMETRIC_ACCESS_PERSISTENT_LOSS.kind()
        || kind == Status::ASYMMETRIC_ACCESS_TRANSITION.kind()
        || kind == nvme_host::status::COMMAND_ABORTED_BY_HOST.kind()
        || kind == Status::TRANSIENT_TRANSPORT_ERROR.kind()
}

fn is_ana_error(status: Status) -> bool {
    let kind = status.kind();
    kind == Status::ASYMMETRIC_ACCESS_INACCESSIBLE.kind()
        || kind == Status::ASYMMETRIC_ACCESS_PERSISTENT_LOSS.kind()
        || kind == Status::ASYMMETRIC_ACCESS_TRANSITION.kind()
}

fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1 << failures.saturating_sub(1).min(6)).min(MAX_BACKOFF)
}

impl MultipathQueue {
    /// Reads submitted with a `read_destination` have their data written through
    /// `destination` on whichever path serves them (see [`nvme_host::ReadDestination`]).
    pub fn set_read_destination(&mut self, destination: Arc<dyn nvme_host::ReadDestination>) {
        for path in &mut self.paths {
            path.queue.set_read_destination(Arc::clone(&destination));
        }
    }

    /// Writes submitted with a `write_source` are sent from the memory `source`
    /// lends on whichever path serves them (see [`nvme_host::WriteSource`]); the
    /// memory must stay readable and unchanged until the completion is reaped.
    pub fn set_write_source(&mut self, source: Arc<dyn nvme_host::WriteSource>) {
        for path in &mut self.paths {
            path.queue.set_write_source(Arc::clone(&source));
        }
        self.has_write_source = true;
    }

    /// Commands that may be in flight at once.
    pub fn depth(&self) -> usize {
        self.table.len()
    }

    /// Commands submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.table.len() - self.free.len()
    }

    /// The paths' addresses and, per path, the commands in flight on it now.
    pub fn path_load(&self) -> Vec<(SocketAddr, usize)> {
        self.paths.iter().map(|path| (path.shared.address, path.in_flight)).collect()
    }

    /// Queues a command on the best usable path (see the module documentation);
    /// with none usable it waits inside the queue. Fails with `QueueFull` when
    /// `depth()` commands are in flight.
    pub fn submit(&mut self, command: HostCommand) -> Result<(), ClientError> {
        if command.data_out.len() > MAX_COMMAND_DATA_BYTES as usize || command.data_in_bytes > MAX_COMMAND_DATA_BYTES {
            return Err(ClientError::InvalidArgument(format!(
                "command data larger than {MAX_COMMAND_DATA_BYTES} bytes"
            )));
        }
        // Refused here: every path would refuse it, and a refusal marks a path down.
        if command.write_source.is_some() && (!self.has_write_source || !command.data_out.is_empty()) {
            return Err(ClientError::InvalidArgument(
                "write_source needs a write source on the queue (set_write_source) and no data_out".into(),
            ));
        }
        let Some(index) = self.free.pop() else { return Err(ClientError::QueueFull) };
        self.table[index as usize] = Tracked {
            in_use: true,
            user_tag: command.user_tag,
            sqe: command.sqe,
            data_in_bytes: command.data_in_bytes,
            read_destination: command.read_destination,
            write_source: command.write_source,
            failovers: 0,
            path: usize::MAX,
            submitted_at: Some(Instant::now()),
            last_status: HOST_PATHING_ERROR,
        };
        self.dispatch(index, command.data_out, Instant::now());
        Ok(())
    }

    /// The path for the next command: the best ANA tier among usable paths,
    /// then the policy. `None` when no path is usable.
    fn choose_path(&mut self, now: Instant) -> Option<usize> {
        let any_optimized = self.paths.iter().any(|path| path.usable(now) && path.shared.optimized());
        let eligible = |path: &QueuePath| path.usable(now) && (!any_optimized || path.shared.optimized());
        match self.policy {
            PathPolicy::RoundRobin => {
                let count = self.paths.len();
                let found = (0..count)
                    .map(|step| (self.next_path + step) % count)
                    .find(|&index| eligible(&self.paths[index]))?;
                self.next_path = (found + 1) % count;
                Some(found)
            }
            PathPolicy::QueueDepth => (0..self.paths.len())
                .filter(|&index| eligible(&self.paths[index]))
                .min_by_key(|&index| self.paths[index].in_flight),
        }
    }

    /// Sends table entry `index` (with its data) on a path, or parks it.
    fn dispatch(&mut self, index: u32, mut data: Vec<u8>, now: Instant) {
        loop {
            let Some(path_index) = self.choose_path(now) else {
                // Parked: on no path (so a path that fails meanwhile does not claim it).
                self.table[index as usize].path = usize::MAX;
                let retry_at = now + backoff(u32::from(self.table[index as usize].failovers) + 1);
                self.parked.push_back((index, data, retry_at));
                return;
            };
            let entry = &mut self.table[index as usize];
            if entry.data_in_bytes > 0 {
                data.clear();
            }
            let command = HostCommand {
                sqe: entry.sqe,
                data_out: data,
                data_in_bytes: entry.data_in_bytes,
                user_tag: u64::from(index),
                read_destination: entry.read_destination,
                write_source: entry.write_source,
            };
            entry.path = path_index;
            let path = &mut self.paths[path_index];
            match path.queue.submit_or_return(command) {
                Ok(()) => {
                    path.in_flight += 1;
                    return;
                }
                Err(refused) => {
                    // The queue refused it outright (closed, lost): that path is down.
                    tracing::debug!(address = %path.shared.address, error = %refused.error, "multipath: path refused a command");
                    path.failures += 1;
                    path.down_until = Some(now + backoff(path.failures));
                    data = refused.command.data_out;
                }
            }
        }
    }

    /// Hands a command's final completion to the caller.
    fn finish(&mut self, index: u32, status: Status, data: Vec<u8>) {
        let entry = &mut self.table[index as usize];
        entry.in_use = false;
        let cqe = CompletionQueueEntry { status, ..CompletionQueueEntry::default() };
        self.ready.push_back(HostCompletion { user_tag: entry.user_tag, cqe, data, transport_error: None });
        self.free.push(index);
    }

    /// A completion from path `path_index`: deliver, or fail over.
    fn on_completion(&mut self, path_index: usize, mut completion: HostCompletion, now: Instant) {
        let index = completion.user_tag as u32;
        let Some(entry) = self.table.get(index as usize).copied().filter(|entry| entry.in_use) else {
            tracing::error!(tag = completion.user_tag, "multipath: completion for a command not in flight");
            return;
        };
        if entry.path != path_index {
            // The path was given up with this command on it (see `path_gone`) and
            // the command has been finished or sent elsewhere since: too late.
            tracing::debug!(tag = completion.user_tag, "multipath: late completion from a path given up; dropped");
            return;
        }
        self.last_completion_at = now;
        let path = &mut self.paths[path_index];
        path.in_flight = path.in_flight.saturating_sub(1);
        let status = completion.cqe.status;
        if !is_path_error(status) {
            path.failures = 0;
            path.down_until = None;
            completion.user_tag = entry.user_tag;
            self.table[index as usize].in_use = false;
            self.free.push(index);
            self.ready.push_back(completion);
            return;
        }
        if is_ana_error(status) {
            // The path answers but does not serve the namespace now: believe the
            // status until the checker reads the log.
            let state = if status.kind() == Status::ASYMMETRIC_ACCESS_PERSISTENT_LOSS.kind() {
                AnaState::PersistentLoss
            } else if status.kind() == Status::ASYMMETRIC_ACCESS_TRANSITION.kind() {
                AnaState::Change
            } else {
                AnaState::Inaccessible
            };
            path.shared.state.store(state as u8, Ordering::Relaxed);
            path.shared.ask_recheck();
            // Also a short pause: a controller whose log disagrees with its
            // statuses must not get every retry at once.
            path.down_until = Some(now + FIRST_BACKOFF);
        } else {
            path.failures += 1;
            path.down_until = Some(now + backoff(path.failures));
        }
        tracing::debug!(address = %path.shared.address, status = ?status, "multipath: path error; failing over");
        let entry = &mut self.table[index as usize];
        entry.last_status = status;
        let out_of_time =
            entry.submitted_at.is_some_and(|at| now.saturating_duration_since(at) >= self.command_timeout);
        if entry.failovers >= MAX_FAILOVERS || out_of_time {
            let status = entry.last_status.with_do_not_retry();
            self.finish(index, status, std::mem::take(&mut completion.data));
            return;
        }
        entry.failovers += 1;
        self.dispatch(index, std::mem::take(&mut completion.data), now);
    }

    /// Parked commands whose time has come try again (or run out of time).
    fn retry_parked(&mut self, now: Instant) {
        for _ in 0..self.parked.len() {
            let Some((index, data, retry_at)) = self.parked.pop_front() else { break };
            if retry_at > now {
                self.parked.push_back((index, data, retry_at));
                continue;
            }
            let entry = self.table[index as usize];
            if entry.submitted_at.is_some_and(|at| now.saturating_duration_since(at) >= self.command_timeout) {
                self.finish(index, entry.last_status.with_do_not_retry(), data);
                continue;
            }
            self.table[index as usize].failovers = entry.failovers.saturating_add(1).min(MAX_FAILOVERS);
            self.dispatch(index, data, now);
        }
    }

    /// Collects what every path has finished, without waiting.
    fn collect(&mut self, now: Instant) {
        for path_index in 0..self.paths.len() {
            if self.paths[path_index].in_flight == 0 {
                continue;
            }
            let mut scratch = std::mem::take(&mut self.scratch);
            let result = self.paths[path_index].queue.reap(0, Duration::ZERO, &mut scratch);
            for completion in scratch.drain(..) {
                self.on_completion(path_index, completion, now);
            }
            self.scratch = scratch;
            if let Err(error) = result {
                self.path_gone(path_index, &error, now);
            }
        }
    }

    /// A path's queue reported an error of its own (its controller is lost or
    /// closed): what it had in flight cannot come back, so fail it over.
    fn path_gone(&mut self, path_index: usize, error: &ClientError, now: Instant) {
        let path = &mut self.paths[path_index];
        tracing::debug!(address = %path.shared.address, %error, "multipath: path queue failed");
        path.failures += 1;
        path.down_until = Some(now + backoff(path.failures));
        path.in_flight = 0;
        // With fail-fast the path's queue completed everything it held (Host Pathing
        // Error, so it failed over in `on_completion`) before reporting an error.
        // Anything still on it would otherwise wait for ever: finish it with a path
        // status the caller may retry (DNR clear). Its data went with it, so it
        // cannot be sent again here.
        let orphans: Vec<u32> = (0..self.table.len() as u32)
            .filter(|&index| self.table[index as usize].in_use && self.table[index as usize].path == path_index)
            .collect();
        if !orphans.is_empty() {
            tracing::warn!(
                commands = orphans.len(),
                "multipath: a failed path still held commands; failing them with a path status"
            );
        }
        for index in orphans {
            self.table[index as usize].path = usize::MAX;
            self.finish(index, HOST_PATHING_ERROR, Vec::new());
        }
    }

    /// Waits until at least `min_completions` completions are available or
    /// `timeout` passes, and appends every available one to `out`. Like
    /// [`IoQueue::reap`]; failovers happen inside.
    pub fn reap(
        &mut self,
        min_completions: usize,
        timeout: Duration,
        out: &mut Vec<HostCompletion>,
    ) -> Result<usize, ClientError> {
        let start = out.len();
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            self.collect(now);
            if !self.parked.is_empty() {
                self.retry_parked(now);
            }
            out.extend(self.ready.drain(..));
            let got = out.len() - start;
            // With min_completions 0 this returns after one collection.
            if got >= min_completions || self.in_flight() == 0 || now >= deadline {
                return Ok(got);
            }
            // Wait on the busiest path; only briefly when others have work too.
            let busy: Vec<usize> = (0..self.paths.len()).filter(|&index| self.paths[index].in_flight > 0).collect();
            match busy.as_slice() {
                [] => {
                    // Only parked commands: sleep until the first retry.
                    let next = self.parked.iter().map(|(_, _, at)| *at).min().unwrap_or(deadline).min(deadline);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()).min(MAX_BACKOFF));
                }
                [only] => self.wait_on(*only, deadline.min(now + MAX_BACKOFF), now),
                _ if self
                    .spin_across_paths
                    .is_some_and(|spin| now.saturating_duration_since(self.last_completion_at) < spin) =>
                {
                    // Completions came recently: poll every path again (the loop's
                    // collect) rather than wait on one.
                }
                _ => {
                    let busiest = *busy.iter().max_by_key(|&&index| self.paths[index].in_flight).unwrap_or(&busy[0]);
                    self.wait_on(busiest, deadline.min(now + WAIT_SLICE), now);
                }
            }
        }
    }

    fn wait_on(&mut self, path_index: usize, until: Instant, now: Instant) {
        let mut scratch = std::mem::take(&mut self.scratch);
        let wait = until.saturating_duration_since(now);
        let result = self.paths[path_index].queue.reap(1, wait, &mut scratch);
        let now = Instant::now();
        for completion in scratch.drain(..) {
            self.on_completion(path_index, completion, now);
        }
        self.scratch = scratch;
        if let Err(error) = result {
            self.path_gone(path_index, &error, now);
        }
    }
}

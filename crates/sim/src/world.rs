//! The simulated world: one target process over a simulated disk, hosts, the network
//! between them and the clock, stepped from one seed.

use std::collections::BTreeMap;
use std::sync::Arc;

use nvme_target::{
    Connection, HostAccess, ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec,
};
use storage::Backend;

use crate::disks::SimDisks;
use crate::host::{SimHost, NAMESPACE, SUBSYSTEM_NQN};
use crate::network::{Link, NetworkFaults};
use crate::oracle::Oracle;
use crate::plan::Plan;
use crate::rng::{Rng, SimClock};
use crate::service::SimService;

/// What the hosts and the world share: randomness, time, the oracle and the links.
pub struct Context {
    /// The world's generator (workload and faults).
    pub rng: Rng,
    /// Simulated time.
    pub clock: SimClock,
    /// What every block may hold.
    pub oracle: Oracle,
    /// What hosts were told about the namespaces they manage in the pool.
    pub namespaces: crate::ledger::NamespaceLedger,
    /// Namespace block size.
    pub block_bytes: usize,
    /// I/O commands the hosts may still submit.
    pub io_budget: u64,
    links: BTreeMap<u64, Link>,
    next_link: u64,
    next_write_tag: u64,
    network: NetworkFaults,
    network_rng: Rng,
    /// Both digests are on: a flipped bit is always detected.
    network_guarded: bool,
    trace: bool,
    violations: Vec<String>,
    /// A bit was flipped where no digest guards it: data checks no longer hold, the
    /// others (no panic, liveness, limits) still do.
    data_unverifiable: bool,
    /// Data mismatches ignored because of that.
    pub excused_data_mismatches: u64,
    /// A digest of every delivery and completion, to show two runs of a seed agree.
    fingerprint: u64,
}

impl Context {
    /// Writes a trace line (only computed when tracing).
    pub fn note(&mut self, line: impl FnOnce() -> String) {
        if self.trace {
            println!("{:>12.6} ms  {}", self.clock.elapsed_ns() as f64 / 1e6, line());
        }
    }

    /// An invariant broke.
    pub fn violation(&mut self, what: String) {
        self.note(|| format!("VIOLATION: {what}"));
        self.violations.push(what);
    }

    /// A read returned data no write could have left, a valid command failed with a
    /// status no fault explains, or the pool table disagrees with what a host was told:
    /// a violation unless an unguarded bit flip may explain it (a flipped LBA in a
    /// command, or a flipped NSID in an answer, without header digest is a valid,
    /// different one).
    pub fn data_violation(&mut self, what: String) {
        if self.data_unverifiable {
            self.excused_data_mismatches += 1;
            self.note(|| format!("data mismatch excused by an undetectable bit flip: {what}"));
        } else {
            self.violation(what);
        }
    }

    /// A fresh tag for a write.
    pub fn new_write_tag(&mut self) -> u64 {
        self.next_write_tag += 1;
        self.next_write_tag
    }

    /// Registers a new connection; the world hands it to the target.
    pub fn open_link(&mut self, link: Link) -> u64 {
        self.next_link += 1;
        self.links.insert(self.next_link, link);
        self.next_link
    }

    /// The host side closed (FIN after what it sent).
    pub fn close_link_from_host(&mut self, id: u64) {
        if let Some(link) = self.links.get_mut(&id) {
            link.host_gone = true;
            link.to_target.close();
        }
    }

    /// Bytes from a host queue.
    pub fn send_to_target(&mut self, id: u64, bytes: &[u8]) {
        self.send(id, bytes, true);
    }

    fn send(&mut self, id: u64, bytes: &[u8], to_target: bool) {
        let now_ns = self.clock.elapsed_ns();
        let Some(link) = self.links.get_mut(&id) else {
            return;
        };
        if link.reset {
            return;
        }
        let pipe = if to_target { &mut link.to_target } else { &mut link.to_host };
        if pipe.send(bytes, now_ns, &mut self.network_rng, &self.network) {
            let guarded = self.network_guarded;
            if !guarded {
                self.data_unverifiable = true;
            }
            self.note(|| {
                format!(
                    "link {id}: a bit flipped on the way {}",
                    if to_target { "to the target" } else { "to the host" }
                )
            });
        }
    }

    fn mix(&mut self, value: u64) {
        self.fingerprint = mixed(self.fingerprint, value);
    }
}

/// One FNV-1a style step of the run's fingerprint (a free function so callers holding a
/// borrow of another part of the context can use it).
fn mixed(fingerprint: u64, value: u64) -> u64 {
    (fingerprint ^ value).wrapping_mul(0x0000_0100_0000_01B3)
}

/// How one seed's run ended.
#[derive(Debug)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Broken invariants, first first.
    pub violations: Vec<String>,
    /// What the seed drew.
    pub plan: String,
    /// Digest of the run, equal for two runs of one seed.
    pub fingerprint: u64,
    /// Counts for the summary line.
    pub summary: String,
}

/// Everything in one run.
pub struct World {
    context: Context,
    plan: Plan,
    disks: SimDisks,
    /// The namespace's backend as the running (or last) target process built it;
    /// built again after a crash, as a restarted process would.
    backend: Option<Arc<dyn Backend>>,
    target: Option<Arc<Target>>,
    target_down_until_ns: u64,
    connections: BTreeMap<u64, Connection>,
    /// Closed target connections whose storage requests are still in flight: the
    /// runtime keeps them until `Connection::drain` says so, and so does the world.
    draining: BTreeMap<u64, Connection>,
    /// `undrained-close`: closed connections are dropped at once instead.
    undrained_close: bool,
    hosts: Vec<SimHost>,
    /// With a thin pool: its table (survives crashes as a file would), the carve, and
    /// the open pool (dropped without its clean-shutdown save on a crash).
    pool_table: Option<(storage::TableStore, storage::CarvedId)>,
    pool: Option<Arc<storage::Pool>>,
    /// Where the pool's blocking work (table saves) runs: at later steps.
    service: Arc<SimService>,
    next_fault_ns: u64,
    crashes: u64,
    faults_injected: u64,
}

/// Options of one run that are not drawn from the seed.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Plant this bug.
    pub canary: Option<crate::disk::Canary>,
    /// Print every step.
    pub trace: bool,
}

/// Steps at one instant before the world counts as spinning.
const MAX_STEPS_AT_ONE_INSTANT: u32 = 100_000;
/// Wakes in a row at a time already passed before the world counts as spinning.
const MAX_STALE_WAKES: u32 = 10_000;
/// After the workload stops: time for outstanding commands to finish.
const QUIESCE_NS: u64 = 30_000_000_000;

/// The target: the namespace over the disk, or the subsystem's pool (whose carve
/// bound to NSID 1 is the namespace, and where hosts may create their own).
fn target_spec(storage: TargetStorage, plan: &Plan) -> TargetSpec {
    let (pool, namespaces) = match storage {
        TargetStorage::Disk(backend) => {
            (None, vec![NamespaceSpec { id: NAMESPACE, backend, nguid: None, uuid: None, ana_group: None }])
        }
        TargetStorage::Pool(pool) => (Some(pool), Vec::new()),
    };
    TargetSpec {
        listeners: vec![ListenerSpec::tcp("192.0.2.1", 4420)],
        subsystems: vec![SubsystemSpec {
            hosts: HostAccess::allow_any(),
            pool,
            nqn: SUBSYSTEM_NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces,
        }],
        settings: TargetSettings {
            connection_setup_timeout_ms: 2_000,
            max_outstanding_r2t_bytes_per_connection: plan.r2t_budget_bytes,
            ..TargetSettings::default()
        },
    }
}

/// What the target serves from.
enum TargetStorage {
    Disk(Arc<dyn Backend>),
    Pool(Arc<storage::Pool>),
}

impl World {
    /// The world of `seed`.
    pub fn new(seed: u64, options: RunOptions) -> World {
        let mut rng = Rng::new(seed);
        let plan = Plan::draw(&mut rng);
        let clock = SimClock::new();
        // A pool needs whole units and some to spare (units lost in a crash stay free).
        let disk_blocks = match plan.thin_pool_unit_bytes {
            Some(unit_bytes) => {
                let unit_blocks = unit_bytes / plan.block_bytes as u64;
                plan.namespace_blocks.div_ceil(unit_blocks) * unit_blocks + 4 * unit_blocks
            }
            None => plan.namespace_blocks,
        };
        let disks = SimDisks::new(
            plan.shape,
            plan.block_bytes as u32,
            disk_blocks,
            &clock,
            &mut rng,
            &plan.disk,
            options.canary,
        );
        if options.trace {
            disks.trace();
        }
        let network_rng = rng.fork();
        let service = Arc::new(SimService::new(clock.clone(), rng.fork()));
        let context = Context {
            rng,
            clock,
            oracle: Oracle::new(plan.namespace_blocks, plan.block_bytes),
            namespaces: Default::default(),
            block_bytes: plan.block_bytes,
            io_budget: plan.max_commands,
            links: BTreeMap::new(),
            next_link: 0,
            next_write_tag: 0,
            network: plan.network.clone(),
            network_rng,
            network_guarded: plan.host.digests.header && plan.host.digests.data,
            trace: options.trace,
            violations: Vec::new(),
            data_unverifiable: false,
            excused_data_mismatches: 0,
            fingerprint: 0xCBF2_9CE4_8422_2325,
        };
        let hosts = (0..plan.hosts).map(|index| SimHost::new(index, plan.host.clone())).collect();
        let mut world = World {
            context,
            disks,
            backend: None,
            target: None,
            target_down_until_ns: 0,
            connections: BTreeMap::new(),
            draining: BTreeMap::new(),
            undrained_close: options.canary == Some(crate::disk::Canary::UndrainedClose),
            hosts,
            pool_table: None,
            pool: None,
            service,
            next_fault_ns: u64::MAX,
            crashes: 0,
            faults_injected: 0,
            plan,
        };
        if let Some(unit_bytes) = world.plan.thin_pool_unit_bytes {
            world.create_pool(unit_bytes);
        }
        world.start_target();
        world.schedule_fault();
        world
    }

    fn executor(&self) -> Arc<dyn storage::service::ServiceExecutor> {
        Arc::clone(&self.service) as Arc<dyn storage::service::ServiceExecutor>
    }

    /// Service jobs due now. Pool work waits for its device I/O in a loop, which
    /// simulated time would never end: the disk answers at once meanwhile.
    fn run_service_jobs(&mut self) -> bool {
        match self.service.next_due_ns() {
            Some(due_ns) if due_ns <= self.context.clock.elapsed_ns() => {}
            _ => return false,
        }
        self.disks.set_instant(true);
        let ran = self.service.run_due();
        self.disks.set_instant(false);
        if ran {
            self.context.note(|| "service jobs ran (pool table saves)".into());
        }
        ran
    }

    fn create_pool(&mut self, unit_bytes: u64) {
        let table = storage::TableStore::memory();
        // A new pool zeroes its device and waits for it in a loop: no simulated time.
        self.disks.set_instant(true);
        // Bound to NSID 1 of the subsystem, for every host, as a namespace the config
        // made: the target serves it from the pool and hosts cannot delete it.
        let binding = storage::NamespaceBinding {
            subsystem_nqn: SUBSYSTEM_NQN.into(),
            namespace_id: NAMESPACE.0,
            all_hosts: true,
            hosts: Vec::new(),
        };
        let created = storage::Pool::open_with_service(self.disks.first(), table.clone(), unit_bytes, self.executor())
            .and_then(|pool| pool.create_bound(self.plan.namespace_blocks, true, Some(binding)).map(|id| (pool, id)));
        self.disks.set_instant(false);
        match created {
            Ok((pool, id)) => {
                self.pool = Some(Arc::new(pool));
                self.pool_table = Some((table, id));
            }
            Err(error) => self.context.violation(format!("the pool cannot be created: {error}")),
        }
    }

    /// The namespace's backend: the disk, or the thin carve (opening the pool from its
    /// table after a crash).
    fn namespace_backend(&mut self) -> Option<Arc<dyn Backend>> {
        let Some((_, id)) = self.pool_table.clone() else {
            return self.composed_backend();
        };
        let pool = self.open_pool()?;
        match pool.get(id) {
            Ok(backend) => Some(backend),
            Err(error) => {
                self.context.violation(format!("the pool lost its carve: {error}"));
                None
            }
        }
    }

    /// The backend over the disks: the one the target runs on, or (after a crash) a
    /// new one, which for a cache tier recovers its dirty lines from the fast disk.
    fn composed_backend(&mut self) -> Option<Arc<dyn Backend>> {
        if let Some(backend) = &self.backend {
            return Some(Arc::clone(backend));
        }
        self.disks.set_instant(true);
        let built = self.disks.backend();
        self.disks.set_instant(false);
        match built {
            Ok(backend) => {
                self.backend = Some(Arc::clone(&backend));
                Some(backend)
            }
            Err(error) => {
                self.context.violation(if self.crashes == 0 { error } else { format!("after a crash: {error}") });
                None
            }
        }
    }

    /// The pool, opened from its table after a crash; then what hosts were told about
    /// their namespaces must agree with the table.
    fn open_pool(&mut self) -> Option<Arc<storage::Pool>> {
        if let Some(pool) = &self.pool {
            return Some(Arc::clone(pool));
        }
        let (table, _) = self.pool_table.clone()?;
        self.disks.set_instant(true);
        let unit_bytes = storage::pool::DEFAULT_UNIT_SIZE_BYTES; // the table keeps its own
        let opened = storage::Pool::open_with_service(self.disks.first(), table, unit_bytes, self.executor());
        self.disks.set_instant(false);
        match opened {
            Ok(pool) => {
                let pool = Arc::new(pool);
                // A flipped bit in a Namespace Management answer without header digest
                // (the NSID in CQE DW0) tells the host of a namespace that never
                // existed, which the ledger cannot tell from a lost one (seed
                // 746410014: NSID 4 read as 8196): excused like a data mismatch.
                for problem in self.context.namespaces.disagreements(&pool.records(), SUBSYSTEM_NQN) {
                    self.context.data_violation(format!("after a crash: {problem}"));
                }
                self.pool = Some(Arc::clone(&pool));
                Some(pool)
            }
            Err(error) => {
                self.context.violation(format!("the pool does not open after a crash: {error}"));
                None
            }
        }
    }

    /// The process dies: an open pool goes without the save its clean shutdown does.
    fn crash_storage(&mut self) {
        self.disks.crash();
        self.backend = None;
        self.service.crash();
        if let Some(pool) = self.pool.take() {
            std::mem::forget(pool);
        }
    }

    fn start_target(&mut self) {
        let storage = if self.pool_table.is_some() {
            let Some(pool) = self.open_pool() else { return };
            TargetStorage::Pool(pool)
        } else {
            let Some(backend) = self.composed_backend() else { return };
            TargetStorage::Disk(backend)
        };
        // Starting frees carves no namespace is bound to (device I/O the target waits
        // for in a loop): the disk answers at once meanwhile.
        self.disks.set_instant(true);
        let started = Target::new(target_spec(storage, &self.plan));
        self.disks.set_instant(false);
        match started {
            Ok(target) => self.target = Some(target),
            Err(error) => self.context.violation(format!("the target does not start: {error}")),
        }
        self.context.note(|| "target started".into());
    }

    fn schedule_fault(&mut self) {
        let mean = self.plan.mean_fault_interval_ns;
        self.next_fault_ns = if mean == 0 {
            u64::MAX
        } else {
            self.context.clock.elapsed_ns() + self.context.rng.between(mean / 4, mean * 2)
        };
    }

    /// Runs the workload, lets it drain, then checks every block, crashes the target
    /// and checks every block again.
    pub fn run(mut self, seed: u64) -> SeedReport {
        let run_end_ns = self.plan.run_ns;
        let mut steps_at_instant = 0u32;
        let mut stale_wakes = 0u32;
        loop {
            let now_ns = self.context.clock.elapsed_ns();
            let working = now_ns < run_end_ns;
            if !working && (self.hosts.iter().all(SimHost::idle) || now_ns > run_end_ns + QUIESCE_NS) {
                break;
            }
            let moved = self.step(working);
            if !self.context.violations.is_empty() {
                break;
            }
            if moved {
                steps_at_instant += 1;
                if steps_at_instant > MAX_STEPS_AT_ONE_INSTANT {
                    self.context
                        .violation(format!("no progress: {MAX_STEPS_AT_ONE_INSTANT} steps without time passing"));
                    break;
                }
                continue;
            }
            steps_at_instant = 0;
            let next = self.next_event_ns(working).unwrap_or(now_ns + 1_000_000);
            if next <= now_ns {
                stale_wakes += 1;
                if stale_wakes > MAX_STALE_WAKES {
                    let who = self.stale_wake_owner(now_ns);
                    self.context.violation(format!(
                        "spinning: {who} asks to be woken at a time already passed, again and again"
                    ));
                    break;
                }
            } else {
                stale_wakes = 0;
            }
            self.context.clock.advance_to(next.max(now_ns + 1));
        }
        if self.context.violations.is_empty() {
            self.verify_at_rest();
        }
        let summary = format!(
            "{} ms simulated, {} commands ok, {} reconnects, {} crashes, {} faults, disk: {:?}, {} excused",
            self.context.clock.elapsed_ns() / 1_000_000,
            self.hosts.iter().map(|host| host.completed_ok).sum::<u64>(),
            self.hosts.iter().map(|host| host.reconnects).sum::<u64>(),
            self.crashes,
            self.faults_injected,
            self.disks.counters(),
            self.context.excused_data_mismatches,
        );
        SeedReport {
            seed,
            violations: self.context.violations,
            plan: self.plan.describe(),
            fingerprint: self.context.fingerprint,
            summary,
        }
    }

    /// One pass over everything due now. True when anything moved (so time must not
    /// pass yet).
    fn step(&mut self, working: bool) -> bool {
        let now = self.context.clock.now();
        let now_ns = self.context.clock.elapsed_ns();
        let mut moved = false;
        if self.target.is_none() && now_ns >= self.target_down_until_ns {
            self.start_target();
        }
        moved |= self.accept_links(now);
        moved |= self.deliver(now);
        moved |= self.run_service_jobs();
        moved |= self.service_target(now);
        for index in 0..self.hosts.len() {
            let host = &mut self.hosts[index];
            host.service(&mut self.context, working);
            host.check_liveness(&mut self.context);
        }
        if working && now_ns >= self.next_fault_ns {
            self.inject_fault();
            self.schedule_fault();
            moved = true;
        }
        moved
    }

    /// New links reach the target, or are refused while it is down.
    fn accept_links(&mut self, now: std::time::Instant) -> bool {
        let mut moved = false;
        let ids: Vec<u64> = self.context.links.keys().copied().collect();
        for id in ids {
            if self.connections.contains_key(&id) {
                continue;
            }
            let Some(link) = self.context.links.get_mut(&id) else { continue };
            if link.target_gone {
                continue;
            }
            match &self.target {
                Some(target) => {
                    let connection = Connection::new(target.clone(), 0, format!("sim-link-{id}"), now);
                    self.connections.insert(id, connection);
                }
                None => {
                    link.reset();
                    link.target_gone = true;
                    self.context.oracle.settle_link(id);
                }
            }
            moved = true;
        }
        moved
    }

    /// Delivers what is due, link by link in a random order, and ends links.
    fn deliver(&mut self, now: std::time::Instant) -> bool {
        let now_ns = self.context.clock.elapsed_ns();
        let mut ids: Vec<u64> = self.context.links.keys().copied().collect();
        self.context.rng.shuffle(&mut ids);
        let mut moved = false;
        for id in ids {
            let Some(link) = self.context.links.get_mut(&id) else { continue };
            let owner = link.owner;
            // A random share of what is due, so deliveries of links interleave.
            let budget = 1 + self.context.rng.below(8);
            for _ in 0..budget {
                if now_ns < link.held_until_ns {
                    break;
                }
                let Some(bytes) = link.to_target.take_due(now_ns) else { break };
                if let Some(connection) = self.connections.get_mut(&id) {
                    connection.handle_received(&bytes, now);
                }
                self.context.fingerprint = mixed(self.context.fingerprint, id << 32 | bytes.len() as u64);
                moved = true;
            }
            let Some(link) = self.context.links.get_mut(&id) else { continue };
            for _ in 0..budget {
                if now_ns < link.held_until_ns {
                    break;
                }
                let Some(bytes) = link.to_host.take_due(now_ns) else { break };
                if let Some(queue) = self.hosts[owner.host].queue_for(id) {
                    queue.handle_received(&bytes, now);
                }
                self.context.fingerprint = mixed(self.context.fingerprint, id << 40 | bytes.len() as u64);
                moved = true;
            }
            let link = &self.context.links[&id];
            let (target_sees_end, host_sees_end) = (
                !link.target_gone && (link.reset || link.to_target.ended()),
                !link.host_gone && (link.reset || link.to_host.ended()),
            );
            if target_sees_end {
                self.close_connection(id);
                if let Some(link) = self.context.links.get_mut(&id) {
                    link.target_gone = true;
                }
                moved = true;
            }
            if host_sees_end {
                self.hosts[owner.host].link_ended(&mut self.context, id);
                if let Some(link) = self.context.links.get_mut(&id) {
                    link.host_gone = true;
                }
                moved = true;
            }
            if self.context.links.get(&id).is_some_and(|link| link.target_gone && link.host_gone) {
                self.context.links.remove(&id);
            }
        }
        moved
    }

    /// Storage completions, timers and transmissions of every target connection.
    fn service_target(&mut self, now: std::time::Instant) -> bool {
        let mut moved = false;
        self.disks.land_orphans();
        let drained: Vec<u64> =
            self.draining.iter_mut().filter_map(|(&id, connection)| connection.drain(now).then_some(id)).collect();
        for id in drained {
            self.draining.remove(&id);
            self.context.oracle.settle_link(id);
            self.context.note(|| format!("link {id}: the closed connection drained"));
            moved = true;
        }
        let budget = self.target.as_ref().map(|target| target.settings.max_outstanding_r2t_bytes_per_connection);
        let ids: Vec<u64> = self.connections.keys().copied().collect();
        for id in ids {
            let Some(connection) = self.connections.get_mut(&id) else { continue };
            connection.poll_storage(now);
            if connection.next_deadline().is_some_and(|deadline| deadline <= now) {
                connection.handle_timeout(now);
            }
            while let Some(batch) = connection.take_transmit() {
                let bytes = batch.to_bytes();
                connection.transmit_complete(batch, now);
                self.context.send(id, &bytes, false);
                moved = true;
            }
            let depth = connection.binding().map_or(1, |binding| binding.depth);
            let buffered = connection.buffered_data_bytes();
            let limit = nvme_target::limits::max_connection_buffer_bytes(depth);
            if buffered > limit {
                self.context.violation(format!(
                    "link {id}: {buffered} bytes of data buffers, over the {limit} byte limit of a queue of {depth}"
                ));
            }
            if let Some(budget) = budget {
                let high_water = connection.r2t_outstanding_high_water_bytes();
                if high_water > u64::from(budget) {
                    self.context.violation(format!(
                        "link {id}: {high_water} bytes requested by R2T, over the {budget} byte budget"
                    ));
                }
            }
            if connection.wants_close() {
                self.close_connection(id);
                if let Some(link) = self.context.links.get_mut(&id) {
                    link.to_host.close();
                    link.target_gone = true;
                }
                self.context.note(|| format!("link {id}: the target closed the connection"));
                moved = true;
            }
        }
        moved
    }

    /// The socket is gone: like the runtime, tell the connection, and keep it until
    /// its storage requests in flight are done (`drain`); writes that went out on the
    /// link may land until then.
    fn close_connection(&mut self, id: u64) {
        if let Some(mut connection) = self.connections.remove(&id) {
            connection.handle_closed();
            if !self.undrained_close && !connection.drain(self.context.clock.now()) {
                self.draining.insert(id, connection);
                return;
            }
        }
        self.context.oracle.settle_link(id);
    }

    fn inject_fault(&mut self) {
        self.faults_injected += 1;
        let now_ns = self.context.clock.elapsed_ns();
        match self.context.rng.below(10) {
            0..=2 => self.crash_target(),
            3..=5 => {
                let victim = self.context.rng.below(self.hosts.len() as u64) as usize;
                let until = now_ns + self.context.rng.between(1_000_000, 3_000_000_000);
                for link in self.context.links.values_mut().filter(|link| link.owner.host == victim) {
                    link.held_until_ns = link.held_until_ns.max(until);
                }
                self.context
                    .note(|| format!("fault: host {victim} partitioned for {} ms", (until - now_ns) / 1_000_000));
            }
            _ => {
                let ids: Vec<u64> = self.context.links.keys().copied().collect();
                if ids.is_empty() {
                    return;
                }
                let id = ids[self.context.rng.below(ids.len() as u64) as usize];
                if let Some(link) = self.context.links.get_mut(&id) {
                    link.reset();
                }
                self.context.note(|| format!("fault: link {id} reset"));
            }
        }
    }

    /// The target process dies: unflushed data may be lost, every connection resets;
    /// it comes back a little later over the same disk.
    fn crash_target(&mut self) {
        self.crashes += 1;
        self.crash_storage();
        self.context.namespaces.target_crashed();
        self.context.oracle.crash();
        self.connections.clear();
        self.draining.clear();
        self.target = None;
        for link in self.context.links.values_mut() {
            link.reset();
            link.target_gone = true;
        }
        let now_ns = self.context.clock.elapsed_ns();
        self.target_down_until_ns = now_ns + self.context.rng.between(1_000_000, 200_000_000);
        self.context.note(|| "fault: target crashed".into());
    }

    /// Which part keeps a deadline that is already past (for the spinning report).
    fn stale_wake_owner(&self, now_ns: u64) -> String {
        let clock = &self.context.clock;
        let past = |at: Option<std::time::Instant>| at.is_some_and(|at| clock.ns_of(at) <= now_ns);
        if let Some(id) =
            self.connections.iter().find(|(_, connection)| past(connection.next_deadline())).map(|(id, _)| id)
        {
            return format!("the target connection of link {id} (phase {:?})", self.connections[id].phase());
        }
        if let Some(id) =
            self.draining.iter().find(|(_, connection)| past(connection.next_deadline())).map(|(id, _)| id)
        {
            return format!("the draining target connection of link {id}");
        }
        if let Some(index) =
            self.hosts.iter().position(|host| host.next_wake_ns(&self.context).is_some_and(|at| at <= now_ns))
        {
            return format!("host {index}");
        }
        "the disk or the network".into()
    }

    fn next_event_ns(&self, working: bool) -> Option<u64> {
        let clock = &self.context.clock;
        let mut candidates: Vec<u64> = Vec::new();
        candidates.extend(self.context.links.values().filter_map(Link::next_due_ns));
        candidates.extend(
            self.connections
                .values()
                .chain(self.draining.values())
                .filter_map(Connection::next_deadline)
                .map(|at| clock.ns_of(at)),
        );
        candidates.extend(self.disks.next_ready_ns());
        candidates.extend(self.service.next_due_ns());
        candidates.extend(self.hosts.iter().filter_map(|host| host.next_wake_ns(&self.context)));
        if self.target.is_none() {
            candidates.push(self.target_down_until_ns);
        }
        if working {
            candidates.push(self.next_fault_ns);
            candidates.push(self.plan.run_ns);
        }
        candidates.into_iter().min()
    }

    /// With the workload drained: every block reads back as the oracle allows, and
    /// after a crash as its durable values allow.
    fn verify_at_rest(&mut self) {
        if self.context.oracle.open_reads() != 0 {
            self.context.violation(format!("{} reads never ended", self.context.oracle.open_reads()));
            return;
        }
        // Stop the target as `sluice serve` stops: every connection closes and drains
        // (its storage requests land) before it is dropped; then nothing else touches
        // the disks.
        self.drain_every_connection();
        self.target = None;
        self.read_every_block("at rest");
        self.crash_storage();
        self.context.oracle.crash();
        self.read_every_block("after a final crash");
    }

    /// Closes every target connection and drains them all, letting simulated time
    /// pass (storage completes, service jobs run); what is still draining after the
    /// quiesce time of the runtime is dropped, as the runtime would.
    fn drain_every_connection(&mut self) {
        for (id, mut connection) in std::mem::take(&mut self.connections) {
            connection.handle_closed();
            self.draining.insert(id, connection);
        }
        let give_up_ns = self.context.clock.elapsed_ns() + QUIESCE_NS;
        while !self.draining.is_empty() && self.context.clock.elapsed_ns() < give_up_ns {
            self.run_service_jobs();
            self.disks.land_orphans();
            let now = self.context.clock.now();
            let drained: Vec<u64> =
                self.draining.iter_mut().filter_map(|(&id, connection)| connection.drain(now).then_some(id)).collect();
            for id in drained {
                self.draining.remove(&id);
                self.context.oracle.settle_link(id);
            }
            let clock = &self.context.clock;
            let next = self
                .draining
                .values()
                .filter_map(Connection::next_deadline)
                .map(|at| clock.ns_of(at))
                .chain(self.disks.next_ready_ns())
                .chain(self.service.next_due_ns())
                .min()
                .unwrap_or(give_up_ns);
            self.context.clock.advance_to(next.max(clock.elapsed_ns() + 1));
        }
        self.draining.clear();
    }

    fn read_every_block(&mut self, when: &str) {
        let Some(backend) = self.namespace_backend() else { return };
        let mut queue = backend.open_queue();
        let blocks = self.context.oracle.block_count();
        let block_bytes = self.plan.block_bytes;
        for lba in 0..blocks {
            queue.submit(storage::IoRequest {
                token: lba,
                op: storage::IoOp::Read { lba, blocks: 1 },
                buffer: vec![0; block_bytes],
            });
        }
        let mut done = Vec::new();
        // A cache tier thrashes under this scan (each block may cost a destage, an
        // invalidation and a fill), so the bound is per block.
        for _ in 0..blocks * 64 + 1000 {
            if done.len() as u64 == blocks {
                break;
            }
            // Requests of queues dropped earlier land on their own; until they are
            // gone they would hold the clock at their time.
            self.disks.land_orphans();
            let next = self.disks.next_ready_ns().unwrap_or(self.context.clock.elapsed_ns());
            self.context.clock.advance_to(next);
            queue.reap(&mut done);
        }
        if (done.len() as u64) < blocks {
            self.context
                .violation(format!("{when}: {} of {blocks} block reads never completed", blocks - done.len() as u64));
        }
        done.sort_by_key(|completion| completion.token);
        for completion in done {
            let lba = completion.token;
            let watch = self.context.oracle.begin_read(lba, 1);
            // Injected read errors are not what this checks: read such a block again.
            let data = completion.result.is_ok().then_some(completion.buffer.as_slice());
            if let Err(problem) = self.context.oracle.end_read(watch, data) {
                self.context.data_violation(format!("{when}: {problem}"));
            }
        }
        self.context.mix(blocks);
    }
}

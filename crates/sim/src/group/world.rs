//! The group world's step loop: gateways (each a real `Target` with its connections),
//! the cluster, the hosts and the faults, stepped from one seed; after the workload,
//! an end phase in which the hosts read the notices still owed them, then the checks
//! at rest.

use std::collections::BTreeMap;
use std::sync::Arc;

use nvme_target::group_reservations::CopyVouch;
use nvme_target::{
    Connection, HostAccess, ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec,
};

use super::ana::AnaOwnership;
use super::authority::{Cluster, GatewayAction};
use super::context::{GroupContext, LOCK_BLOCKS};
use super::fences::Fences;
use super::host::{key_of, GroupHost};
use super::notices::NoticeLedger;
use super::plan::GroupPlan;
use super::reference::GroupOracle;
use super::store::SharedStore;
use crate::host::{NAMESPACE, SUBSYSTEM_NQN};
use crate::oracle::Oracle;
use crate::rng::{Rng, SimClock};
use crate::world::{RunOptions, SeedReport};
use crate::Canary;

/// The namespace's NGUID on every gateway (one namespace, one record).
pub(super) const NGUID: [u8; 16] = [0x5A; 16];
pub(super) const MS: u64 = 1_000_000;
/// The end phase lasts this long after the last partition is over ...
const NOTICE_TAIL_NS: u64 = 1_500 * MS;
/// ... and every notice owed this long before its end must have been read.
const NOTICE_READ_SLACK_NS: u64 = 800 * MS;
/// After the workload stops: time for outstanding commands to finish.
const QUIESCE_NS: u64 = 30_000 * MS;
const MAX_STEPS_AT_ONE_INSTANT: u32 = 100_000;
const MAX_STALE_WAKES: u32 = 10_000;

/// One gateway process and its connections.
#[derive(Default)]
pub(super) struct Gateway {
    pub(super) target: Option<Arc<Target>>,
    /// This process's number (every start makes a new one).
    pub(super) instance: u64,
    /// Down (crashed) until then.
    pub(super) down_until_ns: u64,
    /// The record was installed since the process started: listeners open.
    pub(super) loaded: bool,
    /// Fenced: restarted (with a new cluster client) at this time.
    pub(super) restart_at_ns: Option<u64>,
    pub(super) connections: BTreeMap<u64, Connection>,
    /// Closed connections whose storage requests are still in flight.
    pub(super) draining: BTreeMap<u64, Connection>,
    /// How long its copy may answer from itself (`None`: the `no-copy-vouch` canary).
    pub(super) vouch: Option<Arc<CopyVouch>>,
    /// When its next round trip to the cluster renews the vouch.
    pub(super) next_renewal_ns: u64,
    /// Fenced: when it learns so (its watch reported lost) and marks its copy unknown.
    pub(super) mark_unknown_at_ns: Option<u64>,
}

/// Everything in one group run.
pub struct GroupWorld {
    pub(super) context: GroupContext,
    pub(super) plan: GroupPlan,
    pub(super) gateways: Vec<Gateway>,
    pub(super) hosts: Vec<GroupHost>,
    next_instance: u64,
    pub(super) canary: Option<Canary>,
    pub(super) next_fault_ns: u64,
    pub(super) fences: Fences,
    pub(super) crashes: u64,
    pub(super) faults_injected: u64,
    pub(super) watch_breaks: u64,
    pub(super) cluster_restarts: u64,
    pub(super) power_losses: u64,
    /// Gateways that started while no other held its membership lease (after the
    /// first start of all).
    whole_group_restarts: u64,
    pub(super) ana: AnaOwnership,
}

fn target_spec(backend: Arc<dyn storage::Backend>, gateway: usize, canary: Option<Canary>) -> TargetSpec {
    TargetSpec {
        listeners: vec![ListenerSpec::tcp(&format!("192.0.2.{}", gateway + 1), 4420)],
        subsystems: vec![SubsystemSpec {
            hosts: HostAccess::allow_any(),
            pool: None,
            nqn: SUBSYSTEM_NQN.into(),
            serial_number: None,
            model_number: None,
            namespaces: vec![NamespaceSpec { id: NAMESPACE, backend, nguid: Some(NGUID), uuid: None, ana_group: None }],
        }],
        settings: TargetSettings {
            connection_setup_timeout_ms: 2_000,
            // `local-compare-and-write`: the test-only switch the gateway race test
            // uses to show two winners.
            compare_and_write_in_process_only_for_tests: canary == Some(Canary::LocalCompareAndWrite),
            ..TargetSettings::default()
        },
    }
}

impl GroupWorld {
    pub fn new(seed: u64, options: RunOptions) -> GroupWorld {
        let mut rng = Rng::new(seed ^ 0x6A7E_6A7E_6A7E_6A7E);
        let plan = GroupPlan::draw(&mut rng);
        let clock = SimClock::new();
        let store = SharedStore::new(
            plan.namespace_blocks,
            LOCK_BLOCKS,
            plan.gateways,
            clock.clone(),
            rng.fork(),
            plan.store_latency_max_ns,
        );
        let cluster = Cluster::new(plan.gateways, clock.clone(), rng.fork(), plan.cluster.clone(), options.canary);
        let network_rng = rng.fork();
        let hosts = (0..plan.hosts)
            .map(|index| {
                let gateway = rng.below(plan.gateways as u64) as usize;
                GroupHost::new(index, plan.host.clone(), gateway)
            })
            .collect();
        let context = GroupContext {
            rng,
            clock,
            oracle: Oracle::new(plan.namespace_blocks, 512),
            group: GroupOracle::new(),
            store,
            cluster,
            gateways: plan.gateways,
            io_budget: plan.max_commands,
            links: BTreeMap::new(),
            link_gateway: BTreeMap::new(),
            link_instance: BTreeMap::new(),
            trouble: BTreeMap::new(),
            ana_changing: BTreeMap::new(),
            notices: NoticeLedger::default(),
            writing: vec![0; plan.hosts],
            keys: (0..plan.hosts).map(|index| key_of(index as u8)).collect(),
            tag_owner: BTreeMap::new(),
            next_link: 0,
            next_write_tag: 0,
            network: plan.network.clone(),
            network_rng,
            trace: options.trace,
            violations: Vec::new(),
            fingerprint: 0xCBF2_9CE4_8422_2325,
        };
        let mut world = GroupWorld {
            context,
            gateways: (0..plan.gateways).map(|_| Gateway::default()).collect(),
            hosts,
            next_instance: 1,
            canary: options.canary,
            next_fault_ns: u64::MAX,
            fences: Fences::new(plan.gateways),
            crashes: 0,
            faults_injected: 0,
            watch_breaks: 0,
            cluster_restarts: 0,
            power_losses: 0,
            whole_group_restarts: 0,
            ana: AnaOwnership::default(),
            plan,
        };
        for gateway in 0..world.gateways.len() {
            world.start_gateway(gateway);
        }
        world.start_ana();
        world.schedule_fault();
        world
    }

    /// A gateway process starts: a new target over the shared image, its authority
    /// handle, a new cluster client (not fenced); it loads the record before its
    /// listeners open.
    fn start_gateway(&mut self, index: usize) {
        let instance = self.next_instance;
        self.next_instance += 1;
        let backend = self.context.store.backend_for(index);
        let target = match Target::new(target_spec(backend, index, self.canary)) {
            Ok(target) => target,
            Err(error) => {
                self.context.violation(format!("gateway {index} does not start: {error}"));
                return;
            }
        };
        let vouch = (self.canary != Some(Canary::NoCopyVouch)).then(|| Arc::new(CopyVouch::default()));
        target.set_group_reservations(Arc::new(self.context.cluster.authority_for(index, instance, vouch.clone())));
        self.context.store.set_fenced(index, false);
        if self.context.cluster.gateway_started(index, instance) {
            // The group's power loss: the reference checks what the record holds
            // when this process loads it.
            if self.context.clock.elapsed_ns() > 0 {
                self.whole_group_restarts += 1;
                self.context.note(|| format!("gateway {index} finds every other gateway's lease run out"));
            }
        }
        let gateway = &mut self.gateways[index];
        gateway.target = Some(target);
        gateway.instance = instance;
        gateway.loaded = false;
        gateway.restart_at_ns = None;
        gateway.vouch = vouch;
        gateway.next_renewal_ns = self.context.clock.elapsed_ns();
        gateway.mark_unknown_at_ns = None;
        self.ana_gateway_started(index);
        self.context.note(|| format!("gateway {index} started (process {instance})"));
    }

    /// Carries out what the cluster did to the gateways.
    fn apply_cluster(&mut self) -> bool {
        let actions = self.context.cluster.step();
        let commits = self.context.cluster.take_commits();
        let moved = !actions.is_empty() || !commits.is_empty();
        for commit in &commits {
            let sequence = commit.sequence;
            self.context.mix(sequence << 16 | u64::from(commit.status.field()));
            if let Err(problem) = self.context.group.committed(commit) {
                self.context.violation(problem);
            }
            self.context.notices.committed(commit);
        }
        for action in actions {
            let (index, instance) = match action {
                GatewayAction::OwnFence { gateway, instance, publication, update } => {
                    self.own_fence(gateway, instance, publication, &update);
                    continue;
                }
                GatewayAction::Install { gateway, instance, .. }
                | GatewayAction::MarkUnknown { gateway, instance }
                | GatewayAction::Fence { gateway, instance } => (gateway, instance),
            };
            let gateway = &mut self.gateways[index];
            let Some(target) = gateway.target.clone().filter(|_| gateway.instance == instance) else {
                continue;
            };
            match action {
                GatewayAction::Install { update, publication, acknowledgement_lost, .. } => {
                    self.notice_arrived(index, instance, update, publication, acknowledgement_lost)
                }
                GatewayAction::MarkUnknown { .. } => {
                    target.mark_group_reservations_unknown(&NGUID);
                    self.context.note(|| format!("gateway {index}: reservations unknown"));
                }
                GatewayAction::OwnFence { .. } => {}
                GatewayAction::Fence { .. } => {
                    // Cut off from storage at once; its copy is marked unknown only when
                    // it learns of the fence, meanwhile bounded by its vouch.
                    self.context.store.set_fenced(index, true);
                    let now_ns = self.context.clock.elapsed_ns();
                    let learns_ns = now_ns + self.context.rng.between(10 * MS, self.plan.cluster.lease_ns.max(20 * MS));
                    gateway.mark_unknown_at_ns = Some(learns_ns);
                    gateway.restart_at_ns = Some(learns_ns + self.context.rng.between(10 * MS, 100 * MS));
                    self.context.note(|| format!("gateway {index} fenced: it did not acknowledge a notice"));
                }
            }
        }
        self.check_fences();
        moved
    }

    /// Each gateway process's copy of the reservations: the notices of the changes
    /// it took on are owed to the controllers there.
    fn observe_copies(&mut self) {
        let now_ns = self.context.clock.elapsed_ns();
        for gateway in &self.gateways {
            let Some(namespace) = gateway
                .target
                .as_ref()
                .and_then(|target| target.subsystems().first().and_then(|subsystem| subsystem.namespace(NAMESPACE)))
            else {
                continue;
            };
            let sequence = namespace.reservations.group_sequence();
            self.context.notices.copy_at(gateway.instance, sequence, now_ns, &self.context.link_instance);
        }
    }

    /// Writes down which gateway processes cannot vouch for their reservations now
    /// (nothing changes that until the cluster's next step).
    fn note_trouble(&mut self) {
        let now_ns = self.context.clock.elapsed_ns();
        for gateway in &self.gateways {
            let Some(target) = &gateway.target else {
                continue;
            };
            let lapsed =
                gateway.vouch.as_ref().is_some_and(|vouch| !vouch.covers(self.context.clock.instant_at(now_ns)));
            let troubled = target.group_reservations_unknown() > 0 || gateway.restart_at_ns.is_some() || lapsed;
            let spans = self.context.trouble.entry(gateway.instance).or_default();
            let ongoing = spans.last_mut().filter(|span| span.1 == u64::MAX);
            match ongoing {
                Some(span) if !troubled => span.1 = now_ns,
                None if troubled => spans.push((now_ns, u64::MAX)),
                _ => {}
            }
        }
    }

    /// Runs the workload, lets it drain, lets the hosts read the notices still owed
    /// them, then checks at rest.
    pub fn run(mut self, seed: u64) -> SeedReport {
        let run_end_ns = self.plan.run_ns;
        let mut pacing = (0u32, 0u32);
        loop {
            let now_ns = self.context.clock.elapsed_ns();
            let working = now_ns < run_end_ns;
            if !working && (self.hosts.iter().all(GroupHost::idle) || now_ns > run_end_ns + QUIESCE_NS) {
                break;
            }
            if !self.advance(working, &mut pacing, None) {
                break;
            }
        }
        if self.context.violations.is_empty() {
            self.read_owed_notices(&mut pacing);
        }
        if self.context.violations.is_empty() {
            self.verify_at_rest();
        }
        let (fences, lost_notices) = self.context.cluster.counters();
        let summary = format!(
            "{} ms simulated, {} commands ok, {} reservation changes, {} versions, {} conflicts, {} lock swaps, {} reconnects, {} gateway restarts, {} fences, {} lost notices or acknowledgements, {} watch breaks, {} cluster restarts, {} fence waits, {} acknowledgements withheld, {} preempt and abort answers, {} power losses, {} whole-group restarts, {} cleared without PTPL, {} notices owed, {} notices read, {} faults, {} ANA moves, {} ANA takeovers, {} commands refused with ANA Transition",
            self.context.clock.elapsed_ns() / MS,
            self.hosts.iter().map(|host| host.completed_ok).sum::<u64>(),
            self.hosts.iter().map(|host| host.reservation_commands).sum::<u64>(),
            self.context.group.newest(),
            self.hosts.iter().map(|host| host.conflicts).sum::<u64>(),
            self.hosts.iter().map(|host| host.swaps).sum::<u64>(),
            self.hosts.iter().map(|host| host.reconnects).sum::<u64>(),
            self.crashes,
            fences,
            lost_notices,
            self.watch_breaks,
            self.cluster_restarts,
            self.fences.waited,
            self.fences.withheld_count,
            self.context.group.preempts_answered,
            self.power_losses,
            self.whole_group_restarts,
            self.context.cluster.power_loss_clears(),
            self.context.notices.owed,
            self.context.notices.read,
            self.faults_injected,
            self.ana.moves,
            self.ana.takeovers,
            self.hosts.iter().map(|host| host.ana_transitions).sum::<u64>(),
        );
        SeedReport {
            seed,
            violations: self.context.violations,
            plan: self.plan.describe(),
            fingerprint: self.context.fingerprint,
            summary,
        }
    }

    /// The end phase: no workload, no faults, until every partition is over and a
    /// while more; then every notice owed before the last moments has been read.
    fn read_owed_notices(&mut self, pacing: &mut (u32, u32)) {
        let now_ns = self.context.clock.elapsed_ns();
        let held_ns = self.context.links.values().map(|link| link.held_until_ns).max().unwrap_or(0);
        let end_ns = now_ns.max(held_ns) + NOTICE_TAIL_NS;
        while self.context.clock.elapsed_ns() < end_ns {
            if !self.advance(false, pacing, Some(end_ns)) {
                return;
            }
        }
        for index in 0..self.hosts.len() {
            let checked = self.hosts[index].check_notices(&self.context, end_ns - NOTICE_READ_SLACK_NS);
            if let Err(problem) = checked {
                self.context.violation(problem);
            }
        }
    }

    /// One step, then time moves on to the next event (no later than `until_ns`).
    /// False when the run must stop. `pacing`: steps at this instant, and wakes at a
    /// time already passed in a row.
    fn advance(&mut self, working: bool, pacing: &mut (u32, u32), until_ns: Option<u64>) -> bool {
        let now_ns = self.context.clock.elapsed_ns();
        let moved = self.step(working);
        if !self.context.violations.is_empty() {
            return false;
        }
        let (steps_at_instant, stale_wakes) = pacing;
        if moved {
            *steps_at_instant += 1;
            if *steps_at_instant > MAX_STEPS_AT_ONE_INSTANT {
                self.context.violation(format!("no progress: {MAX_STEPS_AT_ONE_INSTANT} steps without time passing"));
                return false;
            }
            return true;
        }
        *steps_at_instant = 0;
        let mut next = self.next_event_ns(working).unwrap_or(now_ns + MS);
        if let Some(until_ns) = until_ns {
            next = next.min(until_ns);
        }
        if next <= now_ns {
            *stale_wakes += 1;
            if *stale_wakes > MAX_STALE_WAKES {
                self.context
                    .violation("spinning: something asks to be woken at a time already passed, again and again".into());
                return false;
            }
        } else {
            *stale_wakes = 0;
        }
        self.context.clock.advance_to(next.max(now_ns + 1));
        true
    }

    fn step(&mut self, working: bool) -> bool {
        let now = self.context.clock.now();
        let now_ns = self.context.clock.elapsed_ns();
        let mut moved = false;
        for index in 0..self.gateways.len() {
            let gateway = &self.gateways[index];
            if gateway.restart_at_ns.is_some_and(|at| now_ns >= at) {
                self.crash_gateway(index, 0, "restarted after it was fenced");
                moved = true;
            }
            let gateway = &self.gateways[index];
            if gateway.target.is_none() && now_ns >= gateway.down_until_ns {
                self.start_gateway(index);
                moved = true;
            }
        }
        moved |= self.apply_cluster();
        moved |= self.step_ana(working);
        moved |= self.renew_vouches();
        self.observe_copies();
        self.note_trouble();
        moved |= self.accept_links(now);
        moved |= self.deliver(now);
        moved |= self.service_gateways(now);
        moved |= self.settle_fences();
        self.observe_copies();
        for index in 0..self.hosts.len() {
            self.hosts[index].service(&mut self.context, working);
            self.hosts[index].check_liveness(&mut self.context);
        }
        if working && now_ns >= self.next_fault_ns {
            self.inject_fault();
            self.schedule_fault();
            moved = true;
        }
        self.check_landings();
        moved
    }

    /// New links reach their gateway, or are refused while it is down or loading.
    fn accept_links(&mut self, now: std::time::Instant) -> bool {
        let mut moved = false;
        let ids: Vec<u64> = self.context.links.keys().copied().collect();
        for id in ids {
            let index = self.context.link_gateway[&id];
            let gateway = &mut self.gateways[index];
            if self.context.link_instance.contains_key(&id) {
                continue;
            }
            let Some(link) = self.context.links.get_mut(&id) else {
                continue;
            };
            if link.target_gone {
                continue;
            }
            match gateway.target.as_ref().filter(|_| gateway.loaded) {
                Some(target) => {
                    let connection = Connection::new(target.clone(), 0, format!("sim-link-{id}"), now);
                    gateway.connections.insert(id, connection);
                    self.context.link_instance.insert(id, gateway.instance);
                }
                None => {
                    // Refused (connection reset): no process took it. Instances
                    // count from 1, so 0 names none (and marks the link as handled).
                    link.reset();
                    link.target_gone = true;
                    self.context.link_instance.insert(id, 0);
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
            let gateway = self.context.link_gateway[&id];
            let Some(link) = self.context.links.get_mut(&id) else {
                continue;
            };
            let owner = link.owner;
            let budget = 1 + self.context.rng.below(8);
            for _ in 0..budget {
                let Some(link) = self.context.links.get_mut(&id) else {
                    break;
                };
                if now_ns < link.held_until_ns {
                    break;
                }
                let Some(bytes) = link.to_target.take_due(now_ns) else {
                    break;
                };
                if let Some(connection) = self.gateways[gateway].connections.get_mut(&id) {
                    connection.handle_received(&bytes, now);
                }
                self.context.mix(id << 32 | bytes.len() as u64);
                moved = true;
            }
            for _ in 0..budget {
                let Some(link) = self.context.links.get_mut(&id) else {
                    break;
                };
                if now_ns < link.held_until_ns {
                    break;
                }
                let Some(bytes) = link.to_host.take_due(now_ns) else {
                    break;
                };
                if let Some(queue) = self.hosts[owner.host].queue_for(id) {
                    queue.handle_received(&bytes, now);
                }
                self.context.mix(id << 40 | bytes.len() as u64);
                moved = true;
            }
            let link = &self.context.links[&id];
            let target_sees_end = !link.target_gone && (link.reset || link.to_target.ended());
            let host_sees_end = !link.host_gone && (link.reset || link.to_host.ended());
            if target_sees_end {
                self.close_connection(gateway, id);
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

    /// The socket is gone: keep the connection until its storage requests land.
    fn close_connection(&mut self, index: usize, id: u64) {
        let gateway = &mut self.gateways[index];
        if let Some(mut connection) = gateway.connections.remove(&id) {
            connection.handle_closed();
            if !connection.drain(self.context.clock.now()) {
                gateway.draining.insert(id, connection);
                return;
            }
        }
        self.context.oracle.settle_link(id);
    }

    /// Storage completions, timers and transmissions of every gateway's connections.
    fn service_gateways(&mut self, now: std::time::Instant) -> bool {
        let mut moved = false;
        self.context.store.land_due();
        for index in 0..self.gateways.len() {
            let drained: Vec<u64> = self.gateways[index]
                .draining
                .iter_mut()
                .filter_map(|(&id, connection)| connection.drain(now).then_some(id))
                .collect();
            for id in drained {
                self.gateways[index].draining.remove(&id);
                self.context.oracle.settle_link(id);
                moved = true;
            }
            let ids: Vec<u64> = self.gateways[index].connections.keys().copied().collect();
            for id in ids {
                let Some(connection) = self.gateways[index].connections.get_mut(&id) else {
                    continue;
                };
                connection.poll_storage(now);
                if connection.next_deadline().is_some_and(|deadline| deadline <= now) {
                    connection.handle_timeout(now);
                }
                let mut sent = Vec::new();
                while let Some(batch) = connection.take_transmit() {
                    sent.push(batch.to_bytes());
                    connection.transmit_complete(batch, now);
                }
                let wants_close = connection.wants_close();
                for bytes in sent {
                    self.context.send(id, &bytes, false);
                    moved = true;
                }
                if wants_close {
                    self.close_connection(index, id);
                    if let Some(link) = self.context.links.get_mut(&id) {
                        link.to_host.close();
                        link.target_gone = true;
                    }
                    moved = true;
                }
            }
        }
        moved
    }

    fn next_event_ns(&self, working: bool) -> Option<u64> {
        let clock = &self.context.clock;
        let mut candidates: Vec<u64> = Vec::new();
        candidates.extend(self.context.links.values().filter_map(|link| link.next_due_ns()));
        for gateway in &self.gateways {
            candidates.extend(
                gateway
                    .connections
                    .values()
                    .chain(gateway.draining.values())
                    .filter_map(Connection::next_deadline)
                    .map(|at| clock.ns_of(at)),
            );
            if gateway.target.is_none() {
                candidates.push(gateway.down_until_ns);
            }
            candidates.extend(gateway.restart_at_ns);
        }
        candidates.extend(self.context.store.next_ready_ns());
        candidates.extend(self.context.cluster.next_event_ns());
        candidates.extend(self.fences.next_deadline_ns());
        candidates.extend(self.vouch_events_ns());
        candidates.extend(self.ana_events_ns(working));
        candidates.extend(self.hosts.iter().filter_map(|host| host.next_wake_ns(&self.context, working)));
        if working {
            candidates.push(self.next_fault_ns);
            candidates.push(self.plan.run_ns);
        }
        candidates.into_iter().min()
    }

    /// With the workload drained: the cluster settles, every live gateway that is not
    /// fenced knows its copy again and holds the record's sequence, and every data
    /// block reads back as the oracle allows.
    fn verify_at_rest(&mut self) {
        if self.context.oracle.open_reads() != 0 {
            self.context.violation(format!("{} reads never ended", self.context.oracle.open_reads()));
            return;
        }
        for gateway in &mut self.gateways {
            for (id, mut connection) in std::mem::take(&mut gateway.connections) {
                connection.handle_closed();
                gateway.draining.insert(id, connection);
            }
        }
        let give_up_ns = self.context.clock.elapsed_ns() + QUIESCE_NS;
        loop {
            let now = self.context.clock.now();
            self.apply_cluster();
            self.service_gateways(now);
            self.settle_fences();
            self.check_landings();
            let draining = self.gateways.iter().any(|gateway| !gateway.draining.is_empty());
            let next = self
                .context
                .cluster
                .next_event_ns()
                .into_iter()
                .chain(self.context.store.next_ready_ns())
                .chain(self.fences.next_deadline_ns())
                .min();
            let now_ns = self.context.clock.elapsed_ns();
            match next {
                Some(at) if now_ns < give_up_ns => self.context.clock.advance_to(at.max(now_ns + 1)),
                _ if draining && now_ns < give_up_ns => self.context.clock.advance_to(now_ns + MS),
                _ => break,
            }
        }
        let sequence = self.context.cluster.sequence();
        for (index, gateway) in self.gateways.iter().enumerate() {
            let Some(target) = &gateway.target else {
                continue;
            };
            let Some(namespace) = target.subsystems().first().and_then(|subsystem| subsystem.namespace(NAMESPACE))
            else {
                continue;
            };
            let copy = namespace.reservations.group_sequence();
            // Not fenced and its watch registered again by now: it must vouch again.
            if namespace.reservations.is_unknown() && gateway.restart_at_ns.is_none() {
                self.context.violation(format!("at rest: gateway {index} still has no known copy of the reservations"));
            } else if !namespace.reservations.is_unknown() && copy != sequence {
                self.context.violation(format!(
                    "at rest: gateway {index} serves reservations of sequence {copy}, the group is at {sequence}"
                ));
            }
        }
        for lba in LOCK_BLOCKS..self.context.oracle.block_count() {
            let data = self.context.store.block(lba);
            let watch = self.context.oracle.begin_read(lba, 1);
            if let Err(problem) = self.context.oracle.end_read(watch, Some(&data)) {
                self.context.violation(format!("at rest: {problem}"));
            }
        }
    }
}

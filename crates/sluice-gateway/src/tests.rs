//! The coordinator against an in-memory cluster with a settable clock: locks that
//! expire, attributes, and a blocklist that makes every later request of a fenced
//! client fail as librados does (ESHUTDOWN).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nvme_spec::ana::{AnaGroupId, AnaState};
use runtime::{Locker, RadosErrno};

use super::coordinator::*;

mod ownership_sim;

#[derive(Default)]
pub(super) struct World {
    now: Option<Instant>,
    /// lock name -> (client, cookie, address, expires)
    locks: HashMap<String, (String, String, String, Instant)>,
    attributes: HashMap<String, Vec<u8>>,
    blocklist: Vec<String>,
    /// Clients whose requests time out (cut off from the cluster).
    unreachable: Vec<String>,
    /// Addresses whose image locks a takeover freed, in order.
    image_locks_freed: Vec<String>,
}

#[derive(Clone)]
pub(super) struct FakeStore {
    world: Rc<RefCell<World>>,
    client: String,
    address: String,
}

impl FakeStore {
    fn check(&self) -> Result<(), RadosErrno> {
        let world = self.world.borrow();
        if world.unreachable.contains(&self.client) {
            return Err(RadosErrno::TIMED_OUT);
        }
        if world.blocklist.contains(&self.address) {
            return Err(RadosErrno::BLOCKLISTED);
        }
        Ok(())
    }
}

impl LeaseStore for FakeStore {
    fn lock(&self, name: &str, cookie: &str, _: &str, duration: Duration) -> Result<(), RadosErrno> {
        self.check()?;
        let mut world = self.world.borrow_mut();
        let now = world.now.unwrap();
        if let Some((client, held_cookie, _, expires)) = world.locks.get(name) {
            if *expires > now && (*client != self.client || held_cookie != cookie) {
                return Err(RadosErrno::BUSY);
            }
        }
        world.locks.insert(name.into(), (self.client.clone(), cookie.into(), self.address.clone(), now + duration));
        Ok(())
    }
    fn unlock(&self, name: &str, cookie: &str) -> Result<(), RadosErrno> {
        self.check()?;
        let mut world = self.world.borrow_mut();
        match world.locks.get(name) {
            Some((client, held, _, _)) if *client == self.client && held == cookie => {
                world.locks.remove(name);
                Ok(())
            }
            _ => Err(RadosErrno::NOT_FOUND),
        }
    }
    fn lockers(&self, name: &str) -> Result<Vec<Locker>, RadosErrno> {
        self.check()?;
        let world = self.world.borrow();
        let now = world.now.unwrap();
        Ok(world
            .locks
            .get(name)
            .filter(|(_, _, _, expires)| *expires > now)
            .map(|(client, cookie, address, _)| Locker {
                client: client.clone(),
                cookie: cookie.clone(),
                address: address.clone(),
            })
            .into_iter()
            .collect())
    }
    fn attribute(&self, name: &str) -> Result<Option<Vec<u8>>, RadosErrno> {
        self.check()?;
        Ok(self.world.borrow().attributes.get(name).cloned())
    }
    fn set_attribute(&self, name: &str, value: &[u8]) -> Result<(), RadosErrno> {
        self.check()?;
        self.world.borrow_mut().attributes.insert(name.into(), value.to_vec());
        Ok(())
    }
    fn blocklist(&self, address: &str, _: Duration) -> Result<(), RadosErrno> {
        self.check()?;
        self.world.borrow_mut().blocklist.push(address.into());
        Ok(())
    }
    fn break_image_locks_of(&self, address: &str, _: &[String]) -> Result<usize, String> {
        let mut world = self.world.borrow_mut();
        // Never for a client the cluster does not refuse yet.
        assert!(world.blocklist.iter().any(|fenced| fenced == address), "locks of {address} freed before its fence");
        world.image_locks_freed.push(address.into());
        Ok(1)
    }
}

/// The ANA states one gateway reports.
#[derive(Default)]
pub(super) struct Sink(RefCell<HashMap<u32, AnaState>>);

impl AnaSink for Sink {
    fn set_ana_state(&self, group: AnaGroupId, state: AnaState) -> bool {
        self.0.borrow_mut().insert(group.0, state) != Some(state)
    }
    fn images_in(&self, group: AnaGroupId) -> Vec<String> {
        vec![format!("rbd:pool/image-of-group-{}", group.0)]
    }
}

impl Sink {
    fn state(&self, group: u32) -> AnaState {
        self.0.borrow()[&group]
    }
}

pub(super) const LEASE: Duration = Duration::from_secs(6);

pub(super) struct Gateway {
    coordinator: Coordinator<FakeStore>,
    sink: Sink,
}

pub(super) fn gateway(world: &Rc<RefCell<World>>, name: &str, life: u32) -> Gateway {
    let client = format!("client.{name}{life}");
    let address = format!("127.0.0.1:0/{name}{life}");
    let store = FakeStore { world: Rc::clone(world), client: client.clone(), address: address.clone() };
    let settings = CoordinatorSettings {
        name: name.into(),
        cookie: format!("{name}@{life}"),
        address,
        members: vec!["a".into(), "b".into()],
        groups: vec![(AnaGroupId(1), "a".into()), (AnaGroupId(2), "b".into())],
        lease: LEASE,
        failback: true,
    };
    let sink = Sink::default();
    let coordinator = Coordinator::new(store, settings, &sink);
    Gateway { coordinator, sink }
}

pub(super) fn advance(world: &Rc<RefCell<World>>, by: Duration) -> Instant {
    let mut world = world.borrow_mut();
    let now = world.now.unwrap() + by;
    world.now = Some(now);
    now
}

fn join(world: &Rc<RefCell<World>>, gateway: &mut Gateway) {
    let now = world.borrow().now.unwrap();
    gateway.coordinator.join(|| now, |_| {}).unwrap();
}

/// Steps every running gateway `rounds` times, a quarter lease apart.
fn run(world: &Rc<RefCell<World>>, gateways: &mut [&mut Gateway], rounds: usize) {
    for _ in 0..rounds {
        let now = advance(world, LEASE / 4);
        for gateway in gateways.iter_mut() {
            gateway.coordinator.step(now, &gateway.sink);
        }
    }
}

pub(super) fn world() -> Rc<RefCell<World>> {
    Rc::new(RefCell::new(World { now: Some(Instant::now()), ..World::default() }))
}

#[test]
fn each_group_is_optimized_on_its_preferred_gateway_and_non_optimized_elsewhere() {
    let world = world();
    let (mut a, mut b) = (gateway(&world, "a", 1), gateway(&world, "b", 1));
    assert_eq!(a.sink.state(1), AnaState::Inaccessible, "nothing is known before the first round");
    join(&world, &mut a);
    join(&world, &mut b);
    run(&world, &mut [&mut a, &mut b], 2);
    assert_eq!((a.sink.state(1), a.sink.state(2)), (AnaState::Optimized, AnaState::NonOptimized));
    assert_eq!((b.sink.state(1), b.sink.state(2)), (AnaState::NonOptimized, AnaState::Optimized));
    assert!(world.borrow().blocklist.is_empty(), "nobody is fenced when nobody failed");
}

#[test]
fn a_group_a_reload_adds_is_inaccessible_everywhere_until_coordinated_then_optimized_on_one_gateway() {
    let world = world();
    let (mut a, mut b) = (gateway(&world, "a", 1), gateway(&world, "b", 1));
    join(&world, &mut a);
    join(&world, &mut b);
    run(&world, &mut [&mut a, &mut b], 2);
    // Group 3 was not served at the start: no gateway may report it optimized.
    assert_eq!((a.sink.state(3), b.sink.state(3)), (AnaState::Inaccessible, AnaState::Inaccessible));
    assert!(a.coordinator.add_group(AnaGroupId(3), "b", &a.sink));
    assert!(b.coordinator.add_group(AnaGroupId(3), "b", &b.sink));
    assert!(!b.coordinator.add_group(AnaGroupId(3), "b", &b.sink), "coordinated once");
    run(&world, &mut [&mut a, &mut b], 2);
    assert_eq!((a.sink.state(3), b.sink.state(3)), (AnaState::NonOptimized, AnaState::Optimized));
    assert_eq!((a.sink.state(1), b.sink.state(2)), (AnaState::Optimized, AnaState::Optimized), "others unchanged");
}

#[test]
fn a_dead_owner_is_fenced_and_its_group_taken_within_a_lease_and_a_round() {
    let world = world();
    let (mut a, mut b) = (gateway(&world, "a", 1), gateway(&world, "b", 1));
    join(&world, &mut a);
    join(&world, &mut b);
    run(&world, &mut [&mut a, &mut b], 2);
    // a stops (SIGKILL or SIGSTOP): b alone steps on.
    let mut rounds = 0;
    while b.sink.state(1) != AnaState::Optimized {
        run(&world, &mut [&mut b], 1);
        rounds += 1;
        assert!(rounds <= 5, "b must take group 1 within a lease plus a round");
    }
    assert!(rounds >= 3, "not before a's lease expired (took {rounds} rounds)");
    assert_eq!(world.borrow().blocklist, ["127.0.0.1:0/a1"], "a is fenced before b serves its group");
    // ... and a's image locks freed after its fence (the fake checks the order).
    assert_eq!(world.borrow().image_locks_freed, ["127.0.0.1:0/a1"], "a's image locks freed once");
    assert_eq!(b.coordinator.counters.takeovers, 2, "its own group at start, then a's");
    assert_eq!(b.coordinator.counters.fenced_peers, 1);
    // a resumes: its requests fail as a blocklisted client's do; it never reports a
    // group accessible again.
    run(&world, &mut [&mut a, &mut b], 2);
    assert_eq!(a.coordinator.phase, Phase::Fenced);
    assert_eq!((a.sink.state(1), a.sink.state(2)), (AnaState::Inaccessible, AnaState::Inaccessible));
    assert_eq!(b.sink.state(2), AnaState::Optimized);
}

#[test]
fn a_restarted_preferred_gateway_gets_its_group_back_without_fencing_the_other() {
    let world = world();
    let (mut a, mut b) = (gateway(&world, "a", 1), gateway(&world, "b", 1));
    join(&world, &mut a);
    join(&world, &mut b);
    run(&world, &mut [&mut a, &mut b], 2);
    run(&world, &mut [&mut b], 6);
    assert_eq!(b.sink.state(1), AnaState::Optimized);
    // a restarts: a new process, a new client.
    let mut a2 = gateway(&world, "a", 2);
    join(&world, &mut a2);
    run(&world, &mut [&mut a2, &mut b], 3);
    assert_eq!(a2.sink.state(1), AnaState::Optimized);
    assert_eq!(b.sink.state(1), AnaState::NonOptimized);
    assert_eq!(world.borrow().blocklist, ["127.0.0.1:0/a1"], "the failback fenced nobody new");
    assert_eq!(b.coordinator.phase, Phase::Serving);
}

#[test]
fn without_failback_the_group_stays_where_it_is() {
    let world = world();
    let (mut a, mut b) = (gateway(&world, "a", 1), gateway(&world, "b", 1));
    let (store, settings) = (b.coordinator_store(), b.coordinator.settings().clone());
    b.coordinator = Coordinator::new(store, CoordinatorSettings { failback: false, ..settings }, &b.sink);
    join(&world, &mut a);
    join(&world, &mut b);
    run(&world, &mut [&mut a, &mut b], 2);
    run(&world, &mut [&mut b], 6);
    let mut a2 = gateway(&world, "a", 2);
    join(&world, &mut a2);
    run(&world, &mut [&mut a2, &mut b], 4);
    assert_eq!((a2.sink.state(1), b.sink.state(1)), (AnaState::NonOptimized, AnaState::Optimized));
}

#[test]
fn a_gateway_cut_off_from_the_cluster_reports_inaccessible_and_recovers() {
    let world = world();
    let (mut a, mut b) = (gateway(&world, "a", 1), gateway(&world, "b", 1));
    join(&world, &mut a);
    join(&world, &mut b);
    run(&world, &mut [&mut a, &mut b], 2);
    world.borrow_mut().unreachable.push("client.b1".into());
    run(&world, &mut [&mut a, &mut b], 2);
    assert_eq!(b.sink.state(2), AnaState::Optimized, "a short outage changes nothing");
    run(&world, &mut [&mut a, &mut b], 3);
    assert_eq!(b.coordinator.phase, Phase::ClusterLost);
    assert_eq!((b.sink.state(1), b.sink.state(2)), (AnaState::Inaccessible, AnaState::Inaccessible));
    assert_eq!(a.sink.state(2), AnaState::Optimized, "a took b's group");
    world.borrow_mut().unreachable.clear();
    run(&world, &mut [&mut a, &mut b], 1);
    // b was fenced by a's takeover (the service then rejoins it with a new client).
    assert_eq!(b.coordinator.phase, Phase::Fenced);
}

#[test]
fn a_second_process_with_the_same_name_is_refused_while_the_first_lives() {
    let world = world();
    let mut a = gateway(&world, "a", 1);
    join(&world, &mut a);
    let first = a.coordinator_store();
    let mut twin = gateway(&world, "a", 2);
    let clock = Rc::clone(&world);
    let error = twin
        .coordinator
        .join(
            || clock.borrow().now.unwrap(),
            |pause| {
                advance(&clock, pause);
                // The first process keeps renewing while the twin waits.
                first.lock(&member_lock("a"), "a@1", "", LEASE).unwrap();
            },
        )
        .unwrap_err();
    assert!(error.contains("another live process holds gateway name \"a\""), "{error}");
    // Once the first is gone for a lease, a restarted process gets the name.
    let mut restarted = gateway(&world, "a", 3);
    let clock = Rc::clone(&world);
    restarted
        .coordinator
        .join(
            || clock.borrow().now.unwrap(),
            |pause| {
                advance(&clock, pause);
            },
        )
        .unwrap();
}

impl Gateway {
    fn coordinator_store(&self) -> FakeStore {
        self.coordinator.store().clone()
    }
}

#[test]
fn the_metrics_say_which_group_configuration_runs_and_whether_one_is_pending() {
    let world = world();
    let a = gateway(&world, "a", 1);
    let plan = sluice_config::gateway::GatewayPlan {
        name: "a".into(),
        group: "ha".into(),
        pool: "rbd".into(),
        cluster: runtime::ClusterSpec { ceph_conf: None, client: "admin".into(), op_timeout_ms: 0 },
        lease_ms: 6000,
        failback: true,
        members: Vec::new(),
        position: 0,
        preferred: Vec::new(),
        config: Default::default(),
        rebalance: Default::default(),
    };
    let mut status = crate::published::snapshot(
        &plan,
        &[],
        &a.coordinator,
        String::new(),
        &crate::balance::Balancer::default(),
        None,
    );
    status.rejoins = 1;
    let text = super::service::render_metrics(&status);
    assert!(text.contains("sluice_gateway_rejoins_total{group=\"ha\",gateway=\"a\"} 1"), "{text}");
    assert!(!text.contains("sluice_gateway_config_version"), "a file-configured gateway has none: {text}");
    status.config_versions = Some((7, Some(8)));
    let text = super::service::render_metrics(&status);
    assert!(text.contains("sluice_gateway_config_version{group=\"ha\",gateway=\"a\"} 7"), "{text}");
    assert!(text.contains("sluice_gateway_config_pending{group=\"ha\",gateway=\"a\"} 1"), "{text}");
}

fn three(world: &Rc<RefCell<World>>) -> (Gateway, Gateway, Gateway) {
    let make = |name: &str| {
        let mut gateway = gateway(world, name, 1);
        let (store, settings) = (gateway.coordinator_store(), gateway.coordinator.settings().clone());
        let settings = CoordinatorSettings {
            members: vec!["a".into(), "b".into(), "c".into()],
            groups: (1..=6).map(|id| (AnaGroupId(id), ["a", "b", "c"][(id as usize - 1) % 3].to_string())).collect(),
            ..settings
        };
        gateway.coordinator = Coordinator::new(store, settings, &gateway.sink);
        gateway
    };
    let (mut a, mut b, mut c) = (make("a"), make("b"), make("c"));
    join(world, &mut a);
    join(world, &mut b);
    join(world, &mut c);
    (a, b, c)
}

/// The members reporting `group` optimized.
fn optimized_at(group: u32, gateways: &[&Gateway]) -> Vec<String> {
    gateways
        .iter()
        .filter(|gateway| gateway.sink.0.borrow().get(&group) == Some(&AnaState::Optimized))
        .map(|gateway| gateway.coordinator.settings().name.clone())
        .collect()
}

#[test]
fn a_drain_moves_every_group_of_the_member_without_fencing_and_never_optimized_twice() {
    let world = world();
    let (mut a, mut b, mut c) = three(&world);
    run(&world, &mut [&mut a, &mut b, &mut c], 2);
    assert_eq!(optimized_at(1, &[&a, &b, &c]), ["a"]);
    let change = crate::balance::drain(&b.coordinator, "a").unwrap();
    assert_eq!(change.moves.len(), 2, "a owns groups 1 and 4: {change:?}");
    // Round by round: each group optimized on at most one member, always.
    for _ in 0..4 {
        run(&world, &mut [&mut a, &mut b, &mut c], 1);
        for group in 1..=6 {
            assert!(optimized_at(group, &[&a, &b, &c]).len() <= 1, "group {group} optimized twice");
        }
    }
    for group in 1..=6 {
        assert_eq!(optimized_at(group, &[&a, &b, &c]).len(), 1, "group {group} optimized somewhere");
        assert_ne!(optimized_at(group, &[&a, &b, &c]), ["a"], "a is drained");
    }
    assert_eq!(a.sink.state(1), AnaState::NonOptimized, "the drained member keeps serving non-optimized");
    assert!(world.borrow().blocklist.is_empty(), "a drain fences nobody");
    assert!(a.coordinator.drained());
    // The takers recorded the changes' timelines as drains.
    let changes: Vec<_> = [&b, &c].iter().flat_map(|gateway| gateway.coordinator.timelines.changes.clone()).collect();
    let drains: Vec<_> = changes.iter().filter(|change| change.kind == crate::timeline::ChangeKind::Drain).collect();
    assert_eq!(drains.len(), 2, "{changes:?}");
    assert!(drains.iter().all(|change| change.from == "a" && change.released_ms.is_some()));
    // Undrain: failback brings a's preferred groups back.
    crate::balance::undrain(&c.coordinator, "a").unwrap();
    run(&world, &mut [&mut a, &mut b, &mut c], 4);
    assert_eq!(optimized_at(1, &[&a, &b, &c]), ["a"]);
    assert_eq!(optimized_at(4, &[&a, &b, &c]), ["a"]);
    assert!(world.borrow().blocklist.is_empty());
}

#[test]
fn a_drain_that_would_leave_no_optimized_path_is_refused() {
    let world = world();
    let (mut a, mut b, mut c) = three(&world);
    run(&world, &mut [&mut a, &mut b, &mut c], 2);
    crate::balance::drain(&a.coordinator, "b").unwrap();
    run(&world, &mut [&mut a, &mut b, &mut c], 2);
    // c dies; a is the only one left undrained and alive: draining a is refused.
    run(&world, &mut [&mut a, &mut b], 6);
    let error = crate::balance::drain(&a.coordinator, "a").unwrap_err();
    assert!(error.contains("no optimized path") && error.contains("b drained") && error.contains("c down"), "{error}");
    // A drained member still takes groups when nobody else can: a dies too.
    run(&world, &mut [&mut b], 8);
    for group in 1..=6 {
        assert_eq!(b.sink.state(group), AnaState::Optimized, "group {group}: b serves rather than leave it pathless");
    }
}

#[test]
fn a_balancing_move_hands_the_group_over_and_the_taker_records_it() {
    let world = world();
    let (mut a, mut b, mut c) = three(&world);
    run(&world, &mut [&mut a, &mut b, &mut c], 2);
    // What a pass commits: group 2 (b's) to c.
    crate::balance::update_placement(a.coordinator.store(), "test", |record| {
        record.assign(crate::placement::Assignment {
            ana_group: 2,
            gateway: "c".into(),
            from: "b".into(),
            kind: crate::placement::MoveKind::Rebalance,
            reason: "test".into(),
            decided_unix_ms: crate::timeline::unix_ms(std::time::SystemTime::now()),
            pass: 1,
        });
        Ok(((), true))
    })
    .unwrap();
    run(&world, &mut [&mut a, &mut b, &mut c], 3);
    assert_eq!(optimized_at(2, &[&a, &b, &c]), ["c"]);
    assert_eq!(b.sink.state(2), AnaState::NonOptimized);
    let change = c.coordinator.timelines.changes.back().unwrap();
    assert_eq!((change.kind, change.from.as_str(), change.ana_group), (crate::timeline::ChangeKind::Rebalance, "b", 2));
    // Failback does not undo a balancing move: b is group 2's preferred member.
    run(&world, &mut [&mut a, &mut b, &mut c], 4);
    assert_eq!(optimized_at(2, &[&a, &b, &c]), ["c"]);
}

#[test]
fn a_lock_of_this_gateway_on_a_group_it_does_not_serve_is_released_and_the_group_taken_properly() {
    let world = world();
    let (mut a, mut b) = (gateway(&world, "a", 1), gateway(&world, "b", 1));
    join(&world, &mut a);
    join(&world, &mut b);
    run(&world, &mut [&mut a, &mut b], 2);
    // a dies; b takes group 1 half-way: its lock is taken, then the takeover failed
    // and the unlock did not reach the cluster (as after a cut-off).
    run(&world, &mut [&mut b], 6);
    let (store, cookie) = (b.coordinator_store(), b.coordinator.settings().cookie.clone());
    store.unlock(&group_lock(AnaGroupId(1)), &cookie).unwrap();
    b.coordinator.groups[0].owned = false;
    store.lock(&group_lock(AnaGroupId(1)), &cookie, "owner", LEASE).unwrap();
    run(&world, &mut [&mut b], 1);
    assert!(store.lockers(&group_lock(AnaGroupId(1))).unwrap().is_empty(), "released at the next round");
    run(&world, &mut [&mut b], 2);
    assert_eq!(b.sink.state(1), AnaState::Optimized, "then taken the whole way");
}

#[test]
fn an_operator_move_hands_the_group_over_and_refuses_what_it_cannot_do() {
    let world = world();
    let (mut a, mut b, mut c) = three(&world);
    run(&world, &mut [&mut a, &mut b, &mut c], 2);
    assert!(crate::balance::move_group(&a.coordinator, 9, "c").unwrap_err().contains("not one of"));
    assert!(crate::balance::move_group(&a.coordinator, 2, "z").unwrap_err().contains("not a member"));
    let change = crate::balance::move_group(&a.coordinator, 2, "c").unwrap();
    assert_eq!((change.moves.as_slice(), change.note.as_str()), (&[(2, "c".to_string())][..], ""));
    let bytes = a.coordinator_store().attribute(crate::placement::PLACEMENT_ATTRIBUTE).unwrap().unwrap();
    let record: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(record["version"], 2, "a record with an operator move is version 2: {record}");
    run(&world, &mut [&mut a, &mut b, &mut c], 3);
    assert_eq!(optimized_at(2, &[&a, &b, &c]), ["c"]);
    assert!(world.borrow().blocklist.is_empty(), "a move fences nobody");
    let change = c.coordinator.timelines.changes.back().unwrap();
    assert_eq!((change.kind, change.from.as_str(), change.ana_group), (crate::timeline::ChangeKind::Move, "b", 2));
    // Failback does not undo it (b is group 2's preferred member); a move back does.
    run(&world, &mut [&mut a, &mut b, &mut c], 4);
    assert_eq!(optimized_at(2, &[&a, &b, &c]), ["c"]);
    assert!(crate::balance::move_group(&a.coordinator, 2, "c").unwrap().note.contains("already on c"));
    crate::balance::drain(&a.coordinator, "b").unwrap();
    run(&world, &mut [&mut a, &mut b, &mut c], 1);
    assert!(crate::balance::move_group(&a.coordinator, 2, "b").unwrap_err().contains("drained"));
    crate::balance::undrain(&a.coordinator, "b").unwrap();
    run(&world, &mut [&mut a, &mut b, &mut c], 2);
    crate::balance::move_group(&a.coordinator, 2, "b").unwrap();
    run(&world, &mut [&mut a, &mut b, &mut c], 3);
    assert_eq!(optimized_at(2, &[&a, &b, &c]), ["b"]);
    // c dies: moving to it is refused once its membership lease lapsed.
    run(&world, &mut [&mut a, &mut b], 6);
    assert!(crate::balance::move_group(&a.coordinator, 1, "c").unwrap_err().contains("down"));
}

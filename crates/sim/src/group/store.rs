//! The cluster's block store under a gateway group (an RBD image): one image every
//! gateway reads and writes, durable once a request completes (there is no cache to
//! flush), with an atomic compare-and-write inside one 512-byte region as librbd's
//! `rbd_aio_compare_and_write` (a mismatch is EILSEQ, which the runtime's RBD queue
//! maps to [`IoError::CompareMismatch`], so that is what this store answers).
//!
//! A request lands (changes the image) when its latency is over, whether or not its
//! gateway reaps the completion then: the completion waits for the gateway, which may
//! be slow to take it (`hold_completions`: librados hands a client's completions to
//! one finisher thread, which a blocked callback holds up). Every write that lands is
//! logged with its write tag ([`Landing`]), for the oracle of Preempt and Abort. A
//! fenced (blocklisted) gateway's requests fail as Unavailable and change nothing, as
//! the OSDs refuse a blocklisted client; a stalled gateway's requests (a slow OSD)
//! land only once the stall is over.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use storage::{
    validate_compare_and_write, validate_request, Backend, BackendQueue, Geometry, IoCompletion, IoError, IoOp,
    IoRequest,
};

use crate::oracle::{decode_block, WriteTag};
use crate::rng::{Rng, SimClock};

/// The region a compare-and-write must stay inside (librbd on Ceph 16.2: one sector).
pub const COMPARE_AND_WRITE_REGION_BYTES: u64 = 512;

/// One value a lock block took, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    pub at_ns: u64,
    pub tag: WriteTag,
}

/// A write (or compare-and-write) that changed the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landing {
    pub at_ns: u64,
    pub gateway: usize,
    pub lba: u64,
    /// The write tag of its first block (every block of a write carries the same).
    pub tag: WriteTag,
}

struct InFlight {
    gateway: usize,
    /// 0: the queue was dropped (the request still lands at its time).
    queue: u64,
    ready_at_ns: u64,
    request: IoRequest,
}

struct StoreState {
    block_bytes: usize,
    image: Vec<u8>,
    in_flight: Vec<InFlight>,
    rng: Rng,
    latency_min_ns: u64,
    latency_max_ns: u64,
    /// Blocklisted gateways: their requests fail and change nothing.
    fenced: Vec<bool>,
    /// A cluster restart: nothing completes before then.
    paused_until_ns: u64,
    next_queue: u64,
    /// Every value each lock block held, oldest first (the atomic registers' truth).
    register_log: Vec<Vec<Committed>>,
    /// Completions of landed requests, by queue, until their gateway reaps them.
    done: BTreeMap<u64, Vec<IoCompletion>>,
    /// Gateways whose completions are not handed out (their finisher is blocked).
    held: Vec<bool>,
    /// Gateways whose requests do not land before then (their OSDs stall).
    stalled_until_ns: Vec<u64>,
    /// Writes that landed since the world last took them.
    landings: Vec<Landing>,
}

struct StoreShared {
    geometry: Geometry,
    clock: SimClock,
    state: Mutex<StoreState>,
}

/// The shared image; each gateway reaches it through [`SharedStore::backend_for`].
#[derive(Clone)]
pub struct SharedStore {
    shared: Arc<StoreShared>,
}

impl SharedStore {
    /// A zeroed image of `blocks` 512-byte blocks, the first `lock_blocks` of which are
    /// the lock blocks whose every value is logged.
    pub fn new(blocks: u64, lock_blocks: u64, gateways: usize, clock: SimClock, rng: Rng, latency_max_ns: u64) -> Self {
        let block_bytes = COMPARE_AND_WRITE_REGION_BYTES as usize;
        let state = StoreState {
            block_bytes,
            image: vec![0; blocks as usize * block_bytes],
            in_flight: Vec::new(),
            rng,
            latency_min_ns: 20_000,
            latency_max_ns,
            fenced: vec![false; gateways],
            paused_until_ns: 0,
            next_queue: 1,
            register_log: (0..lock_blocks).map(|_| vec![Committed { at_ns: 0, tag: 0 }]).collect(),
            done: BTreeMap::new(),
            held: vec![false; gateways],
            stalled_until_ns: vec![0; gateways],
            landings: Vec::new(),
        };
        SharedStore {
            shared: Arc::new(StoreShared {
                geometry: Geometry { block_size_bytes: block_bytes as u32, block_count: blocks },
                clock,
                state: Mutex::new(state),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, StoreState> {
        // Single-threaded: a poisoned lock only means a panic the run reports anyway.
        self.shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The backend gateway `gateway` serves the namespace from.
    pub fn backend_for(&self, gateway: usize) -> Arc<dyn Backend> {
        Arc::new(GatewayBackend { store: self.clone(), gateway })
    }

    /// The gateway is blocklisted (true) or restarted with a new client (false).
    pub fn set_fenced(&self, gateway: usize, fenced: bool) {
        self.state().fenced[gateway] = fenced;
    }

    /// The cluster restarts: nothing completes until `until_ns`.
    pub fn pause_until(&self, until_ns: u64) {
        let mut state = self.state();
        state.paused_until_ns = state.paused_until_ns.max(until_ns);
    }

    /// The gateway's process died: each of its requests in flight either reached the
    /// OSDs (carried out now) or not (dropped), and none is answered.
    pub fn gateway_crashed(&self, gateway: usize) {
        let now_ns = self.shared.clock.elapsed_ns();
        let mut state = self.state();
        let state = &mut *state;
        state.held[gateway] = false;
        let mut index = 0;
        while index < state.in_flight.len() {
            if state.in_flight[index].gateway != gateway {
                index += 1;
                continue;
            }
            let entry = state.in_flight.remove(index);
            if state.rng.chance(500_000) {
                let mut buffer = entry.request.buffer;
                let _ = execute(state, entry.gateway, entry.request.op, &mut buffer, now_ns);
            }
        }
    }

    /// Lands every request that is due (those of dropped queues too: nobody is told).
    pub fn land_due(&self) {
        let now_ns = self.shared.clock.elapsed_ns();
        land_due(&mut self.state(), now_ns);
    }

    /// `held`: gateway `gateway`'s completions are not handed out (its finisher is
    /// blocked); its requests still land.
    pub fn hold_completions(&self, gateway: usize, held: bool) {
        self.state().held[gateway] = held;
    }

    /// Gateway `gateway`'s requests land no earlier than `until_ns` (a slow OSD).
    pub fn stall(&self, gateway: usize, until_ns: u64) {
        let mut state = self.state();
        state.stalled_until_ns[gateway] = state.stalled_until_ns[gateway].max(until_ns);
    }

    /// Writes that landed since the last call, in the order they landed.
    pub fn take_landings(&self) -> Vec<Landing> {
        std::mem::take(&mut self.state().landings)
    }

    /// When the next request can complete.
    pub fn next_ready_ns(&self) -> Option<u64> {
        let state = self.state();
        let paused = state.paused_until_ns;
        state
            .in_flight
            .iter()
            .map(|entry| entry.ready_at_ns.max(paused).max(state.stalled_until_ns[entry.gateway]))
            .min()
    }

    /// The image's block `lba` as it is now.
    pub fn block(&self, lba: u64) -> Vec<u8> {
        let state = self.state();
        let start = lba as usize * state.block_bytes;
        state.image[start..start + state.block_bytes].to_vec()
    }

    /// Every value lock block `lba` held, oldest first.
    pub fn register_log(&self, lba: u64) -> Vec<Committed> {
        self.state().register_log[lba as usize].clone()
    }

    /// Requests in flight, over every gateway.
    pub fn in_flight(&self) -> usize {
        self.state().in_flight.len()
    }
}

/// Lands the requests due now, in the order of their times (then of submission).
fn land_due(state: &mut StoreState, now_ns: u64) {
    if now_ns < state.paused_until_ns {
        return;
    }
    let stalled = &state.stalled_until_ns;
    let (mut due, rest): (Vec<InFlight>, Vec<InFlight>) = std::mem::take(&mut state.in_flight)
        .into_iter()
        .partition(|entry| entry.ready_at_ns <= now_ns && stalled[entry.gateway] <= now_ns);
    state.in_flight = rest;
    due.sort_by_key(|entry| entry.ready_at_ns);
    for InFlight { gateway, queue, request, .. } in due {
        let IoRequest { token, op, mut buffer } = request;
        let result = execute(state, gateway, op, &mut buffer, now_ns);
        if queue != 0 {
            state.done.entry(queue).or_default().push(IoCompletion { token, result, buffer });
        }
    }
}

/// Carries out one request now.
fn execute(state: &mut StoreState, gateway: usize, op: IoOp, buffer: &mut [u8], now_ns: u64) -> Result<(), IoError> {
    if state.fenced[gateway] {
        return Err(IoError::Unavailable);
    }
    let block_bytes = state.block_bytes;
    let span = |lba: u64, blocks: u64| lba as usize * block_bytes..(lba + blocks) as usize * block_bytes;
    let changed = match op {
        IoOp::Read { lba, blocks } => {
            buffer.copy_from_slice(&state.image[span(lba, u64::from(blocks))]);
            None
        }
        IoOp::Write { lba, blocks, .. } => {
            state.image[span(lba, u64::from(blocks))].copy_from_slice(buffer);
            Some((lba, u64::from(blocks)))
        }
        IoOp::WriteZeroes { lba, blocks, .. } | IoOp::Deallocate { lba, blocks } => {
            state.image[span(lba, blocks)].fill(0);
            Some((lba, blocks))
        }
        IoOp::CompareAndWrite { lba, blocks, .. } => {
            let range = span(lba, u64::from(blocks));
            let (expected, new) = buffer.split_at(range.len());
            if state.image[range.clone()] != *expected {
                return Err(IoError::CompareMismatch);
            }
            state.image[range].copy_from_slice(new);
            Some((lba, u64::from(blocks)))
        }
        IoOp::Flush => None,
    };
    if let Some((lba, blocks)) = changed {
        if let Ok(tag) = decode_block(lba, &state.image[span(lba, 1)]) {
            state.landings.push(Landing { at_ns: now_ns, gateway, lba, tag });
        }
        for block in lba..lba + blocks {
            let Some(log) = state.register_log.get_mut(block as usize) else {
                continue;
            };
            let data = &state.image[span(block, 1)];
            // A lock block that does not decode still changed: log it as a value no
            // host wrote, so the register check sees it.
            let tag = decode_block(block, data).unwrap_or(u64::MAX);
            log.push(Committed { at_ns: now_ns, tag });
        }
    }
    Ok(())
}

struct GatewayBackend {
    store: SharedStore,
    gateway: usize,
}

impl Backend for GatewayBackend {
    fn geometry(&self) -> Geometry {
        self.store.shared.geometry
    }

    fn has_volatile_write_cache(&self) -> bool {
        false
    }

    fn kind(&self) -> &'static str {
        "sim-cluster"
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        let id = {
            let mut state = self.store.state();
            state.next_queue += 1;
            state.next_queue
        };
        Box::new(StoreQueue { store: self.store.clone(), gateway: self.gateway, id, ready: BTreeMap::new() })
    }

    fn atomic_compare_and_write_boundary_bytes(&self) -> Option<u64> {
        Some(COMPARE_AND_WRITE_REGION_BYTES)
    }

    fn shared_name(&self) -> Option<String> {
        Some("sim:cluster/image".into())
    }
}

struct StoreQueue {
    store: SharedStore,
    gateway: usize,
    id: u64,
    /// Requests refused at submission, answered at the next reap.
    ready: BTreeMap<u64, IoCompletion>,
}

impl BackendQueue for StoreQueue {
    fn submit(&mut self, request: IoRequest) {
        let geometry = self.store.shared.geometry;
        let refused = match request.op {
            IoOp::CompareAndWrite { lba, blocks, .. } => {
                validate_compare_and_write(&geometry, lba, blocks, request.buffer.len()).err()
            }
            op => validate_request(&geometry, &op, request.buffer.len()).err(),
        };
        if let Some(error) = refused {
            self.ready.insert(
                request.token,
                IoCompletion { token: request.token, result: Err(error), buffer: request.buffer },
            );
            return;
        }
        let now_ns = self.store.shared.clock.elapsed_ns();
        let mut state = self.store.state();
        let (shortest, longest) = (state.latency_min_ns, state.latency_max_ns);
        let latency = state.rng.between(shortest, longest.max(shortest));
        state.in_flight.push(InFlight {
            gateway: self.gateway,
            queue: self.id,
            ready_at_ns: now_ns + latency,
            request,
        });
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        out.extend(std::mem::take(&mut self.ready).into_values());
        let now_ns = self.store.shared.clock.elapsed_ns();
        let mut state = self.store.state();
        let state = &mut *state;
        land_due(state, now_ns);
        if state.held[self.gateway] {
            return;
        }
        if let Some(done) = state.done.remove(&self.id) {
            out.extend(done);
        }
    }

    fn in_flight(&self) -> usize {
        let state = self.store.state();
        self.ready.len()
            + state.done.get(&self.id).map_or(0, Vec::len)
            + state.in_flight.iter().filter(|entry| entry.queue == self.id).count()
    }
}

impl Drop for StoreQueue {
    fn drop(&mut self) {
        let mut state = self.store.state();
        state.done.remove(&self.id);
        for entry in state.in_flight.iter_mut().filter(|entry| entry.queue == self.id) {
            entry.queue = 0;
        }
    }
}

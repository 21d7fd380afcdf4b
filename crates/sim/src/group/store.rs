//! The cluster's block store under a gateway group (an RBD image): one image every
//! gateway reads and writes, durable once a request completes (there is no cache to
//! flush), with an atomic compare-and-write inside one 512-byte region as librbd's
//! `rbd_aio_compare_and_write` (a mismatch is EILSEQ, which the runtime's RBD queue
//! maps to [`IoError::CompareMismatch`], so that is what this store answers).
//!
//! A request is carried out when its gateway reaps it after its latency, so the order
//! in which requests change the image is the order the world observes. A fenced
//! (blocklisted) gateway's requests fail as Unavailable and change nothing, as the
//! OSDs refuse a blocklisted client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use storage::{
    validate_compare_and_write, validate_request, Backend, BackendQueue, Geometry, IoCompletion,
    IoError, IoOp, IoRequest,
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
    pub fn new(
        blocks: u64,
        lock_blocks: u64,
        gateways: usize,
        clock: SimClock,
        rng: Rng,
        latency_max_ns: u64,
    ) -> Self {
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
            register_log: (0..lock_blocks)
                .map(|_| vec![Committed { at_ns: 0, tag: 0 }])
                .collect(),
        };
        SharedStore {
            shared: Arc::new(StoreShared {
                geometry: Geometry {
                    block_size_bytes: block_bytes as u32,
                    block_count: blocks,
                },
                clock,
                state: Mutex::new(state),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, StoreState> {
        // Single-threaded: a poisoned lock only means a panic the run reports anyway.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The backend gateway `gateway` serves the namespace from.
    pub fn backend_for(&self, gateway: usize) -> Arc<dyn Backend> {
        Arc::new(GatewayBackend {
            store: self.clone(),
            gateway,
        })
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

    /// Carries out requests of dropped queues that are due (nobody is told).
    pub fn land_orphans(&self) {
        let now_ns = self.shared.clock.elapsed_ns();
        let mut state = self.state();
        let state = &mut *state;
        if now_ns < state.paused_until_ns {
            return;
        }
        let mut index = 0;
        while index < state.in_flight.len() {
            let entry = &state.in_flight[index];
            if entry.queue != 0 || entry.ready_at_ns > now_ns {
                index += 1;
                continue;
            }
            let entry = state.in_flight.remove(index);
            let mut buffer = entry.request.buffer;
            let _ = execute(state, entry.gateway, entry.request.op, &mut buffer, now_ns);
        }
    }

    /// When the next request can complete.
    pub fn next_ready_ns(&self) -> Option<u64> {
        let state = self.state();
        let paused = state.paused_until_ns;
        state
            .in_flight
            .iter()
            .map(|entry| entry.ready_at_ns.max(paused))
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

/// Carries out one request now.
fn execute(
    state: &mut StoreState,
    gateway: usize,
    op: IoOp,
    buffer: &mut [u8],
    now_ns: u64,
) -> Result<(), IoError> {
    if state.fenced[gateway] {
        return Err(IoError::Unavailable);
    }
    let block_bytes = state.block_bytes;
    let span =
        |lba: u64, blocks: u64| lba as usize * block_bytes..(lba + blocks) as usize * block_bytes;
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
        Box::new(StoreQueue {
            store: self.store.clone(),
            gateway: self.gateway,
            id,
            ready: BTreeMap::new(),
        })
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
                IoCompletion {
                    token: request.token,
                    result: Err(error),
                    buffer: request.buffer,
                },
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
        if now_ns < state.paused_until_ns {
            return;
        }
        let mut index = 0;
        while index < state.in_flight.len() {
            let entry = &state.in_flight[index];
            if entry.queue != self.id || entry.ready_at_ns > now_ns {
                index += 1;
                continue;
            }
            let InFlight {
                gateway, request, ..
            } = state.in_flight.remove(index);
            let IoRequest {
                token,
                op,
                mut buffer,
            } = request;
            let result = execute(state, gateway, op, &mut buffer, now_ns);
            out.push(IoCompletion {
                token,
                result,
                buffer,
            });
        }
    }

    fn in_flight(&self) -> usize {
        let state = self.store.state();
        self.ready.len()
            + state
                .in_flight
                .iter()
                .filter(|entry| entry.queue == self.id)
                .count()
    }
}

impl Drop for StoreQueue {
    fn drop(&mut self) {
        for entry in self
            .store
            .state()
            .in_flight
            .iter_mut()
            .filter(|entry| entry.queue == self.id)
        {
            entry.queue = 0;
        }
    }
}

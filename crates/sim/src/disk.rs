//! A simulated disk with a volatile write cache, behind the real storage trait.
//!
//! Requests complete after a simulated latency; a write lands in the volatile cache
//! unless it carries FUA; Flush moves the cache to the durable medium; a crash keeps a
//! random subset of what was cached or in flight, block by block (a torn multi-block
//! write), and loses the rest. Faults (latency spikes, read and write errors) and the
//! planted bugs of [`Canary`] are drawn from the disk's own seeded generator.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use storage::{validate_request, Backend, BackendQueue, Geometry, IoCompletion, IoError, IoOp, IoRequest};

use crate::rng::{Rng, SimClock};

/// A known bug planted in the simulated world, which a run must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canary {
    /// Flush completes without making the cache durable.
    LostFlush,
    /// Two reads completing together get each other's data.
    ReorderedCompletion,
    /// Reads come from the durable medium, ignoring newer cached writes.
    StaleRead,
    /// A closed connection is dropped at once with its storage requests in flight
    /// (no drain): they land later, after the host rewrote the blocks (ghost writes).
    UndrainedClose,
    /// On a gateway group: a gateway that misses a reservation notice (lost, or its
    /// watch broke) acknowledges it anyway and keeps serving I/O from its old copy,
    /// instead of being fenced or marking its copy unknown.
    SkipCheckAfterMissedNotice,
    /// On a gateway group: fused Compare and Write runs as a compare then a write
    /// under the gateway's own range table (atomic within one process only), instead
    /// of as one compare-and-write of the cluster.
    LocalCompareAndWrite,
    /// On a gateway group: a gateway waits for Preempt and Abort's fence inside the
    /// notice handler, on the one thread (librados' finisher) that also delivers its
    /// storage completions, which are then held until the wait ends: the fence cannot
    /// drain, the acknowledgement is withheld, and the gateway is fenced (issue 49).
    FenceWaitOnFinisher,
    /// On a gateway group: copies are not bounded in time (no `CopyVouch`) and a
    /// change that fenced a gateway is answered at once: the fenced gateway, which
    /// learns of its fence only later, answers Reservation Report and Conflict from
    /// its old copy meanwhile, after the change was answered.
    NoCopyVouch,
    /// On a gateway group: an ANA group moves without the change state: the member
    /// it goes to reports it optimized at once, while the old owner still does until
    /// it releases it (issue 47).
    SkipAnaChange,
}

impl Canary {
    /// Every canary, with the name `--canary` takes.
    pub const ALL: [(&'static str, Canary); 9] = [
        ("lost-flush", Canary::LostFlush),
        ("reordered-completion", Canary::ReorderedCompletion),
        ("stale-read", Canary::StaleRead),
        ("undrained-close", Canary::UndrainedClose),
        ("missed-notice", Canary::SkipCheckAfterMissedNotice),
        ("local-compare-and-write", Canary::LocalCompareAndWrite),
        ("fence-wait-on-finisher", Canary::FenceWaitOnFinisher),
        ("no-copy-vouch", Canary::NoCopyVouch),
        ("skip-ana-change", Canary::SkipAnaChange),
    ];

    /// The canary called `name`.
    pub fn from_name(name: &str) -> Option<Canary> {
        Self::ALL.iter().find(|(known, _)| *known == name).map(|(_, canary)| *canary)
    }

    /// Its `--canary` name.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, canary)| *canary == self).map_or("?", |(name, _)| name)
    }
}

/// How the disk misbehaves; probabilities are per request, in parts per million.
#[derive(Clone, Debug)]
pub struct DiskFaults {
    /// Shortest service time.
    pub latency_min_ns: u64,
    /// Longest ordinary service time.
    pub latency_max_ns: u64,
    /// A request takes `spike_ns` longer.
    pub spike_per_million: u32,
    /// Extra time of a latency spike.
    pub spike_ns: u64,
    /// A read fails (Unrecovered Read Error).
    pub read_error_per_million: u32,
    /// A write fails before touching the medium (Write Fault).
    pub write_error_per_million: u32,
}

/// What the disk did, for the run's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskCounters {
    /// Requests completed.
    pub completed: u64,
    /// Errors injected.
    pub injected_errors: u64,
    /// Cached or in-flight blocks a crash kept.
    pub crash_kept_blocks: u64,
    /// Cached or in-flight blocks a crash lost.
    pub crash_lost_blocks: u64,
    /// Requests whose queue was dropped while they were in flight, which then
    /// happened anyway (a disk cannot take back what it was given).
    pub orphans_landed: u64,
}

/// The `queue` of a request whose queue was dropped while it was in flight.
const ORPHANED: u64 = 0;

struct InFlight {
    queue: u64,
    sequence: u64,
    ready_at_ns: u64,
    request: IoRequest,
    failure: Option<IoError>,
}

struct DiskState {
    durable: Vec<u8>,
    /// Blocks written and not yet durable (VWC).
    cache: BTreeMap<u64, Vec<u8>>,
    in_flight: Vec<InFlight>,
    rng: Rng,
    faults: DiskFaults,
    canary: Option<Canary>,
    /// Requests complete at once and never fail: for management I/O that waits for
    /// its completions in a loop (a pool's zeroing), which simulated time cannot serve.
    instant: bool,
    next_queue: u64,
    next_sequence: u64,
    counters: DiskCounters,
    /// `replay`: print every request as it completes, under this name.
    trace: Option<String>,
}

struct DiskShared {
    geometry: Geometry,
    clock: SimClock,
    state: Mutex<DiskState>,
}

impl DiskShared {
    fn state(&self) -> MutexGuard<'_, DiskState> {
        // The simulation is single-threaded; a poisoned lock only means a panic that the
        // run reports anyway, so the state is still worth reading.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The disk: the backend namespaces are built on, and the handle the world crashes.
#[derive(Clone)]
pub struct SimDisk {
    shared: Arc<DiskShared>,
}

impl SimDisk {
    /// A zeroed disk.
    pub fn new(geometry: Geometry, clock: SimClock, rng: Rng, faults: DiskFaults, canary: Option<Canary>) -> Self {
        let bytes = usize::try_from(geometry.block_count * u64::from(geometry.block_size_bytes)).unwrap_or(0);
        let state = DiskState {
            durable: vec![0; bytes],
            cache: BTreeMap::new(),
            in_flight: Vec::new(),
            rng,
            faults,
            canary,
            instant: false,
            next_queue: 0,
            next_sequence: 0,
            counters: DiskCounters::default(),
            trace: None,
        };
        SimDisk { shared: Arc::new(DiskShared { geometry, clock, state: Mutex::new(state) }) }
    }

    /// The backend to put behind a namespace.
    pub fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.clone())
    }

    /// The process died: every cached or in-flight block is kept or lost at random,
    /// independently (so multi-block writes tear), and nothing in flight completes.
    pub fn crash(&self) {
        let block_bytes = self.shared.geometry.block_size_bytes as usize;
        let mut state = self.shared.state();
        let state = &mut *state;
        let cache = std::mem::take(&mut state.cache);
        for (lba, data) in cache {
            keep_or_lose(state, lba, &data);
        }
        let in_flight = std::mem::take(&mut state.in_flight);
        if let Some(name) = &state.trace {
            println!(
                "{:>12.6} ms    {name}: crash with {} requests in flight",
                self.shared.clock.elapsed_ns() as f64 / 1e6,
                in_flight.len()
            );
        }
        for entry in in_flight {
            if entry.failure.is_some() {
                continue;
            }
            match entry.request.op {
                IoOp::Write { lba, blocks, .. } => {
                    for index in 0..u64::from(blocks) {
                        let start = index as usize * block_bytes;
                        keep_or_lose(state, lba + index, &entry.request.buffer[start..start + block_bytes]);
                    }
                }
                IoOp::WriteZeroes { lba, blocks, .. } | IoOp::Deallocate { lba, blocks } => {
                    let zeroes = vec![0; block_bytes];
                    for index in 0..blocks {
                        keep_or_lose(state, lba + index, &zeroes);
                    }
                }
                // Refused at submission (the simulated disk does not offer it).
                IoOp::Read { .. } | IoOp::Flush | IoOp::CompareAndWrite { .. } => {}
            }
        }
    }

    /// Prints every request as it completes (and what a crash drops), as `name`.
    pub fn trace_as(&self, name: String) {
        self.shared.state().trace = Some(name);
    }

    /// What the disk did so far.
    pub fn counters(&self) -> DiskCounters {
        self.shared.state().counters.clone()
    }

    /// Makes requests complete at once and never fail (true), or behave as drawn.
    pub fn set_instant(&self, instant: bool) {
        self.shared.state().instant = instant;
    }

    /// When the next request in flight completes.
    pub fn next_ready_ns(&self) -> Option<u64> {
        self.shared.state().in_flight.iter().map(|entry| entry.ready_at_ns).min()
    }

    /// Requests submitted and not completed, over every queue.
    pub fn in_flight(&self) -> usize {
        self.shared.state().in_flight.len()
    }

    /// Carries out the orphaned requests that are due: their data lands, nobody is
    /// told. A target that drops a queue with writes in flight (rather than draining
    /// it) gets ghost writes this way, which the oracle catches.
    pub fn land_orphans(&self) {
        let now_ns = self.shared.clock.elapsed_ns();
        let block_bytes = self.shared.geometry.block_size_bytes as usize;
        let mut state = self.shared.state();
        let state = &mut *state;
        let mut index = 0;
        while index < state.in_flight.len() {
            let entry = &state.in_flight[index];
            if entry.queue != ORPHANED || entry.ready_at_ns > now_ns {
                index += 1;
                continue;
            }
            let InFlight { request, failure, .. } = state.in_flight.swap_remove(index);
            if failure.is_none() {
                let IoRequest { op, mut buffer, .. } = request;
                execute(state, block_bytes, op, &mut buffer);
            }
            state.counters.orphans_landed += 1;
        }
    }
}

fn keep_or_lose(state: &mut DiskState, lba: u64, data: &[u8]) {
    if state.rng.chance(500_000) {
        let start = lba as usize * data.len();
        state.durable[start..start + data.len()].copy_from_slice(data);
        state.counters.crash_kept_blocks += 1;
    } else {
        state.counters.crash_lost_blocks += 1;
    }
}

impl Backend for SimDisk {
    fn geometry(&self) -> Geometry {
        self.shared.geometry
    }

    fn has_volatile_write_cache(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "sim"
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        let id = {
            let mut state = self.shared.state();
            state.next_queue += 1;
            state.next_queue
        };
        Box::new(SimDiskQueue { shared: self.shared.clone(), id })
    }
}

struct SimDiskQueue {
    shared: Arc<DiskShared>,
    id: u64,
}

impl BackendQueue for SimDiskQueue {
    fn submit(&mut self, request: IoRequest) {
        let now_ns = self.shared.clock.elapsed_ns();
        let geometry = self.shared.geometry;
        let mut state = self.shared.state();
        let state = &mut *state;
        let mut failure = validate_request(&geometry, &request.op, request.buffer.len()).err();
        let faults = state.faults.clone();
        if state.instant {
            state.next_sequence += 1;
            let sequence = state.next_sequence;
            state.in_flight.push(InFlight { queue: self.id, sequence, ready_at_ns: now_ns, request, failure });
            return;
        }
        if failure.is_none() {
            let injected = match request.op {
                IoOp::Read { .. } if state.rng.chance(faults.read_error_per_million) => Some(IoError::ReadError),
                IoOp::Write { .. } | IoOp::WriteZeroes { .. } if state.rng.chance(faults.write_error_per_million) => {
                    Some(IoError::WriteFault)
                }
                _ => None,
            };
            if injected.is_some() {
                state.counters.injected_errors += 1;
                failure = injected;
            }
        }
        let mut latency_ns = state.rng.between(faults.latency_min_ns, faults.latency_max_ns);
        if state.rng.chance(faults.spike_per_million) {
            latency_ns += faults.spike_ns;
        }
        state.next_sequence += 1;
        let sequence = state.next_sequence;
        state.in_flight.push(InFlight { queue: self.id, sequence, ready_at_ns: now_ns + latency_ns, request, failure });
    }

    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        let now_ns = self.shared.clock.elapsed_ns();
        let block_bytes = self.shared.geometry.block_size_bytes as usize;
        let mut state = self.shared.state();
        let state = &mut *state;
        let mut due: Vec<InFlight> = Vec::new();
        let mut index = 0;
        while index < state.in_flight.len() {
            let entry = &state.in_flight[index];
            if entry.queue == self.id && entry.ready_at_ns <= now_ns {
                due.push(state.in_flight.swap_remove(index));
            } else {
                index += 1;
            }
        }
        due.sort_by_key(|entry| (entry.ready_at_ns, entry.sequence));
        let mut reads: Vec<usize> = Vec::new();
        for entry in due {
            let InFlight { request, failure, .. } = entry;
            let IoRequest { token, op, mut buffer } = request;
            if matches!(op, IoOp::Read { .. }) && failure.is_none() {
                reads.push(out.len());
            }
            let result = match failure {
                Some(error) => Err(error),
                None => {
                    execute(state, block_bytes, op, &mut buffer);
                    Ok(())
                }
            };
            if let Some(name) = &state.trace {
                println!("{:>12.6} ms    {name}: {op:?} queue {} -> {result:?}", now_ns as f64 / 1e6, self.id);
            }
            state.counters.completed += 1;
            out.push(IoCompletion { token, result, buffer });
        }
        if state.canary == Some(Canary::ReorderedCompletion) {
            swap_two_reads(out, &reads);
        }
    }

    fn in_flight(&self) -> usize {
        self.shared.state().in_flight.iter().filter(|entry| entry.queue == self.id).count()
    }
}

impl Drop for SimDiskQueue {
    fn drop(&mut self) {
        // A queue dropped with requests in flight: they still happen, at their time,
        // with no one to reap them (`SimDisk::land_orphans`).
        let id = self.id;
        for entry in self.shared.state().in_flight.iter_mut().filter(|entry| entry.queue == id) {
            entry.queue = ORPHANED;
        }
    }
}

fn execute(state: &mut DiskState, block_bytes: usize, op: IoOp, buffer: &mut [u8]) {
    match op {
        IoOp::Read { lba, blocks } => {
            for index in 0..u64::from(blocks) {
                let target = &mut buffer[index as usize * block_bytes..][..block_bytes];
                let cached = state.cache.get(&(lba + index)).filter(|_| state.canary != Some(Canary::StaleRead));
                match cached {
                    Some(data) => target.copy_from_slice(data),
                    None => {
                        let start = (lba + index) as usize * block_bytes;
                        target.copy_from_slice(&state.durable[start..start + block_bytes]);
                    }
                }
            }
        }
        IoOp::Write { lba, blocks, force_unit_access } => {
            for index in 0..u64::from(blocks) {
                let data = &buffer[index as usize * block_bytes..][..block_bytes];
                store(state, lba + index, data, force_unit_access);
            }
        }
        IoOp::WriteZeroes { lba, blocks, force_unit_access, .. } => {
            let zeroes = vec![0; block_bytes];
            for index in 0..blocks {
                store(state, lba + index, &zeroes, force_unit_access);
            }
        }
        IoOp::Deallocate { lba, blocks } => {
            let zeroes = vec![0; block_bytes];
            for index in 0..blocks {
                store(state, lba + index, &zeroes, false);
            }
        }
        // Refused at submission (validate_request).
        IoOp::CompareAndWrite { .. } => {}
        IoOp::Flush => {
            if state.canary != Some(Canary::LostFlush) {
                let cache = std::mem::take(&mut state.cache);
                for (lba, data) in cache {
                    let start = lba as usize * data.len();
                    state.durable[start..start + data.len()].copy_from_slice(&data);
                }
            }
        }
    }
}

fn store(state: &mut DiskState, lba: u64, data: &[u8], durable: bool) {
    if durable {
        let start = lba as usize * data.len();
        state.durable[start..start + data.len()].copy_from_slice(data);
        state.cache.remove(&lba);
    } else {
        state.cache.insert(lba, data.to_vec());
    }
}

/// The reordered-completion canary: the first two reads of one size in a batch swap
/// buffers.
fn swap_two_reads(out: &mut [IoCompletion], reads: &[usize]) {
    for (position, &first) in reads.iter().enumerate() {
        let partner = reads[position + 1..].iter().find(|&&other| out[other].buffer.len() == out[first].buffer.len());
        if let Some(&second) = partner {
            let (left, right) = out.split_at_mut(second);
            std::mem::swap(&mut left[first].buffer, &mut right[0].buffer);
            return;
        }
    }
}

//! Deterministic simulation of Sluice: the real target (`nvme-target`) and host
//! (`nvme-host`) state machines, wired through a simulated network to each other and
//! to a simulated disk, on a simulated clock, all on one thread and driven by one
//! seed. A seed replays exactly.
//!
//! ```text
//!   SimHost (HostQueue x2) --Link (pipes, partitions, RST, bit flips)--> Connection
//!          |                                                              |
//!        Oracle <-- every completion                     Target --> SimDisk (VWC,
//!                                                               latency, EIO, crash)
//! ```
//! - [`plan`]: what a seed draws: hosts, queue depths, block size, digests, and how
//!   hostile the network and the disk are (a quarter of seeds are calm).
//! - [`world`]: the step loop: deliveries in random order across connections, storage
//!   completions, timers, faults (target crash and restart, resets, partitions), and
//!   the checks at rest (every block read back, then again after a final crash).
//! - [`host`]: bring-up, keep-alive, reconnect with backoff, and a workload of reads,
//!   writes (some FUA), Write Zeroes and Flush on a shared namespace.
//! - [`oracle`]: what each block may hold now and after a crash.
//! - [`ledger`]: what hosts were told about the namespaces they manage in the pool,
//!   checked against the pool table after every crash.
//! - [`disk`]: the simulated disk and the planted bugs ([`Canary`]).
//! - [`group`]: one seed in four (by a hash of the seed) runs a gateway group
//!   instead: 2-3 real targets exporting one namespace from one shared cluster image
//!   (durable, with an atomic compare-and-write, every landed write logged),
//!   reservations held by a simulated cluster authority (one record with a sequence,
//!   changes applied in one order with `ReservationChange::apply`, notices to every
//!   watching gateway with their own delays, each acknowledged only once Preempt and
//!   Abort's fence drained there, lost notices, broken watches, cluster restarts,
//!   fencing of a gateway that does not acknowledge, with its cause), membership
//!   leases and the group's power loss (PTPL), gateway crashes and restarts, storage
//!   stalls, moves of the namespace's ANA group through the change state (and its
//!   takeover after the owner crashed), and 2-4 hosts that reach it through any
//!   gateway, move to another when a
//!   path fails, and read log 80h on reservation events. Its oracle: an independent
//!   reference reservation model in commit order (every answer, every Report, every
//!   I/O's success or Reservation Conflict against the states from the newest one
//!   answered before it was submitted, the notices each change owes, PTPL across the
//!   power loss), one atomic register per lock block (Compare and Write), the data
//!   oracle for the other blocks, no preempted host's write landing after the Preempt
//!   and Abort was answered, no gateway fenced that did nothing wrong, every notice
//!   owed to a host's controller read, path errors only from a gateway whose copy was
//!   unknown or that was fenced, ANA Transition only from a gateway whose group was
//!   changing, never two gateways reporting the group optimized, and at rest every
//!   gateway's copy known and at the record's sequence.
//!
//! Invariants: no acknowledged write lost or torn (after a crash, only flushed or FUA
//! data is promised), reads return the last acknowledged or a concurrent write, every
//! command completes or fails on its host within the host's command timeout, valid
//! commands fail only with statuses the faults explain, R2T requests stay within the
//! per-connection byte budget, each connection's data buffers stay within the named
//! limit for its queue depth, and nothing panics. Not in the group mode: disk faults
//! (the cluster image fails requests only of a fenced gateway), bit flips, the
//! commands Preempt and Abort aborts that have not reached storage, and the All
//! Registrants types.

pub mod disk;
pub mod disks;
pub mod group;
pub mod host;
pub mod ledger;
pub mod network;
pub mod oracle;
pub mod plan;
pub mod rng;
pub mod service;
pub mod world;

use std::panic::{self, AssertUnwindSafe};

pub use disk::Canary;
pub use world::{RunOptions, SeedReport, World};

/// Runs one seed. A panic anywhere in the real code or the simulation is caught and
/// reported as a violation.
pub fn run_seed(seed: u64, options: RunOptions) -> SeedReport {
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        if group::is_group_seed(seed) {
            group::GroupWorld::new(seed, options).run(seed)
        } else {
            World::new(seed, options).run(seed)
        }
    }));
    match outcome {
        Ok(report) => report,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            SeedReport {
                seed,
                violations: vec![format!("panic: {message}")],
                plan: String::new(),
                fingerprint: 0,
                summary: String::new(),
            }
        }
    }
}

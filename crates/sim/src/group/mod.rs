//! A gateway group: two or three gateway processes (each a real `Target`) exporting
//! one namespace (same NGUID) from one shared cluster image, with their reservations
//! held by a simulated cluster authority; hosts connect through any gateway and move
//! to another when a path fails.
//!
//! ```text
//!   GroupHost --Link--> gateway 0: Target --+--> SharedStore (atomic compare-and-write)
//!       |      \------> gateway 1: Target --+
//!  GroupOracle      (GatewayAuthority each) +--> Cluster (record, notices, fencing)
//! ```
//! - [`store`]: the image, with compare-and-write as one step, fencing, the log of
//!   the writes that landed, and completions a gateway's finisher may hold.
//! - [`authority`]: the reservation record, its notices, watches, fencing (with its
//!   causes), membership leases and the group's power loss.
//! - [`reference`]: the reference reservation model (states, statuses, notices) and
//!   the checks against it, and the atomic registers of the lock blocks.
//! - [`host`]: hosts issuing reservation commands, reads and writes on data blocks,
//!   and fused Compare and Write on the lock blocks, and reading log 80h on
//!   reservation events.
//! - [`notices`]: the notices each host's controller is owed, and what it read.
//! - [`fences`]: acknowledgements that wait for Preempt and Abort's fence, the
//!   gateway's finisher, and the oracles of safety (no preempted write lands after the
//!   answer) and liveness (no gateway fenced that did nothing wrong).
//! - [`plan`]: what a group seed draws; [`faults`]: the faults injected.
//! - [`world`]: the step loop, gateway starts, the end phase for notices, and the
//!   checks at rest.

pub mod authority;
pub mod faults;
pub mod fences;
pub mod host;
pub mod notices;
pub mod plan;
pub mod reference;
pub mod store;
pub mod vouch;
pub mod world;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::network::{Link, NetworkFaults};
use crate::oracle::{Oracle, WriteTag};
use crate::rng::{Rng, SimClock};

pub use world::GroupWorld;

/// One seed in four runs a gateway group (chosen from the seed by a hash of its own,
/// so that no draw of the single-target world moves, and the seeds CI replays stay
/// single-target worlds).
pub fn is_group_seed(seed: u64) -> bool {
    let mixed = (seed ^ 0x5EED_6A7E_0000_0011).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 61) % 4 == 3
}

/// Blocks 0..LOCK_BLOCKS are the lock blocks hosts change only with Compare and
/// Write; the rest are ordinary data blocks.
pub const LOCK_BLOCKS: u64 = 2;

/// What the hosts and the group world share.
pub struct GroupContext {
    pub rng: Rng,
    pub clock: SimClock,
    /// What every data block may hold.
    pub oracle: Oracle,
    /// The reference reservation states and what hosts were told.
    pub group: reference::GroupOracle,
    pub store: store::SharedStore,
    pub cluster: Arc<authority::Cluster>,
    pub gateways: usize,
    /// I/O commands the hosts may still submit.
    pub io_budget: u64,
    pub links: BTreeMap<u64, Link>,
    /// The gateway each link was opened to.
    pub link_gateway: BTreeMap<u64, usize>,
    /// The gateway process that accepted each link.
    pub link_instance: BTreeMap<u64, u64>,
    /// When each gateway process could not vouch for its reservations (its copy
    /// unknown, or it was fenced): (from, to) in ns, `to` u64::MAX while it lasts.
    pub trouble: BTreeMap<u64, Vec<(u64, u64)>>,
    /// What each host's controller is owed of reservation notices, and read.
    pub notices: notices::NoticeLedger,
    /// Writes (and Compare and Writes) each host has out now.
    pub writing: Vec<u32>,
    /// The key each host believes it holds.
    pub keys: Vec<u64>,
    /// The host of each write tag.
    pub tag_owner: BTreeMap<WriteTag, u8>,
    next_link: u64,
    next_write_tag: u64,
    network: NetworkFaults,
    network_rng: Rng,
    trace: bool,
    pub violations: Vec<String>,
    fingerprint: u64,
}

impl GroupContext {
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

    /// A fresh tag for a write of host `host`.
    pub fn new_write_tag(&mut self, host: usize) -> WriteTag {
        self.next_write_tag += 1;
        self.tag_owner.insert(self.next_write_tag, host as u8);
        self.next_write_tag
    }

    /// A new connection from a host to `gateway`.
    pub fn open_link(&mut self, link: Link, gateway: usize) -> u64 {
        self.next_link += 1;
        self.links.insert(self.next_link, link);
        self.link_gateway.insert(self.next_link, gateway);
        self.next_link
    }

    /// The host side closed (FIN after what it sent).
    pub fn close_link_from_host(&mut self, id: u64) {
        if let Some(link) = self.links.get_mut(&id) {
            link.host_gone = true;
            link.to_target.close();
        }
    }

    /// Bytes one way on a link (the group's network flips no bits: what it checks is
    /// reservations and registers, not digests).
    pub fn send(&mut self, id: u64, bytes: &[u8], to_target: bool) {
        let now_ns = self.clock.elapsed_ns();
        let Some(link) = self.links.get_mut(&id) else {
            return;
        };
        if link.reset {
            return;
        }
        let pipe = if to_target { &mut link.to_target } else { &mut link.to_host };
        pipe.send(bytes, now_ns, &mut self.network_rng, &self.network);
    }

    /// Gateway process `instance` could not vouch for its reservations at some time
    /// in `from_ns..=to_ns` (so a path error then is its honest answer).
    pub fn had_trouble(&self, instance: u64, from_ns: u64, to_ns: u64) -> bool {
        self.trouble.get(&instance).is_some_and(|spans| spans.iter().any(|&(from, to)| from <= to_ns && to >= from_ns))
    }

    /// Mixes one event into the run's fingerprint.
    pub fn mix(&mut self, value: u64) {
        self.fingerprint = (self.fingerprint ^ value).wrapping_mul(0x0000_0100_0000_01B3);
    }
}

//! What the group's hosts and its world share: the clock, the draws, the oracles,
//! the links and who owns them. A leaf below the world and the hosts (both use it,
//! it uses neither).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{authority, notices, reference, store};
use crate::network::{Link, NetworkFaults};
use crate::oracle::{Oracle, WriteTag};
use crate::rng::{Rng, SimClock};

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
    /// When each gateway process reported the ANA group in the change state (a
    /// hand-over): (from, to) in ns.
    pub ana_changing: BTreeMap<u64, Vec<(u64, u64)>>,
    /// What each host's controller is owed of reservation notices, and read.
    pub notices: notices::NoticeLedger,
    /// Writes (and Compare and Writes) each host has out now.
    pub writing: Vec<u32>,
    /// The key each host believes it holds.
    pub keys: Vec<u64>,
    /// The host of each write tag.
    pub tag_owner: BTreeMap<WriteTag, u8>,
    pub(super) next_link: u64,
    pub(super) next_write_tag: u64,
    pub(super) network: NetworkFaults,
    pub(super) network_rng: Rng,
    pub(super) trace: bool,
    pub violations: Vec<String>,
    pub(super) fingerprint: u64,
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

    /// Gateway process `instance` reported the ANA group in the change state at some
    /// time in `from_ns..=to_ns` (so ANA Transition then is its honest answer).
    pub fn was_changing(&self, instance: u64, from_ns: u64, to_ns: u64) -> bool {
        self.ana_changing
            .get(&instance)
            .is_some_and(|spans| spans.iter().any(|&(from, to)| from <= to_ns && to >= from_ns))
    }

    /// Mixes one event into the run's fingerprint.
    pub fn mix(&mut self, value: u64) {
        self.fingerprint = (self.fingerprint ^ value).wrapping_mul(0x0000_0100_0000_01B3);
    }
}

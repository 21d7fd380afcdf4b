//! The discovery log (log page 70h): one record per (NVM subsystem, listener that
//! serves I/O), for the subsystems the reading host may connect to: a host not on
//! a subsystem's allow-list does not learn that it exists. When the log changes,
//! discovery controllers whose host sees different records get a Discovery Log Page
//! Change notice.

use std::hash::{DefaultHasher, Hasher};

use nvme_spec::discovery::{
    address_family, copy_discovery_log_range, subsystem_type, DiscoveryLogEntry, DiscoveryLogHeader,
    DISCOVERY_LOG_RECORD_BYTES,
};

use crate::connection::Connection;
use crate::limits::MAX_ADMIN_QUEUE_DEPTH;
use crate::target::{AddressFamily, Target};

/// Builds the records of the discovery log as `host_nqn` sees it. The admin path may
/// allocate: the log is read a few times per host connection.
pub(crate) fn discovery_entries(target: &Target, host_nqn: &str) -> Vec<DiscoveryLogEntry> {
    let mut entries = Vec::new();
    let listeners = target.listeners();
    let peer_paths = target.peer_paths();
    for subsystem in target.subsystems().iter().filter(|subsystem| subsystem.hosts.allows(host_nqn)) {
        // PORTID: from the listener's id, which stays the same while the target runs
        // (other listeners coming and going do not move it) and follows configuration
        // order at start.
        let own = listeners
            .iter()
            .filter(|(_, listener)| !listener.discovery_only)
            .map(|(id, listener)| (port_id(*id), listener));
        // The same subsystem through the other gateways of its gateway group.
        let peers = peer_paths
            .iter()
            .filter(|peer| peer.subsystem_nqn == subsystem.nqn)
            .map(|peer| (peer.port_id, &peer.listener));
        for (port, listener) in own.chain(peers) {
            let mut entry = DiscoveryLogEntry::tcp(
                subsystem_type::NVME_SUBSYSTEM,
                family_code(listener.family),
                port,
                &listener.address,
                &listener.port.to_string(),
                &subsystem.nqn,
            );
            entry.admin_max_submission_queue_size = MAX_ADMIN_QUEUE_DEPTH;
            entry.transport_requirements = listener.secure_channel.transport_requirements();
            entry.transport_specific_address_subtype[0] = listener.secure_channel.security_type();
            entries.push(entry);
        }
    }
    entries
}

fn family_code(family: AddressFamily) -> u8 {
    match family {
        AddressFamily::Ipv4 => address_family::IPV4,
        AddressFamily::Ipv6 => address_family::IPV6,
    }
}

/// A fingerprint of the records `host_nqn` sees (GENCTR aside): equal fingerprints
/// mean the host would read the same records.
pub(crate) fn discovery_log_fingerprint(target: &Target, host_nqn: &str) -> u64 {
    // SipHash with fixed keys: the same records give the same value within the
    // process, which is all a comparison needs.
    let mut hasher = DefaultHasher::new();
    let mut record = [0u8; DISCOVERY_LOG_RECORD_BYTES];
    for entry in discovery_entries(target, host_nqn) {
        entry.encode(&mut record);
        hasher.write(&record);
    }
    hasher.finish()
}

impl Target {
    /// The discovery log records `host_nqn` reads now.
    pub(crate) fn discovery_entries_for(&self, host_nqn: &str) -> Vec<DiscoveryLogEntry> {
        discovery_entries(self, host_nqn)
    }

    /// The discovery log changed (GENCTR moved): every discovery controller whose
    /// host now sees different records gets a Discovery Log Page Change notice, if
    /// its host enabled them. Runs on the management path, never on I/O.
    pub(crate) fn notify_discovery_log_change(&self) {
        for controller in self.discovery_controllers() {
            controller.check_discovery_log(|| discovery_log_fingerprint(self, &controller.host_nqn));
        }
    }
}

/// PORTID of the listener with `id`: id + 1 (0 reads as "no port" to some
/// hosts). Ids past 65534 (that many listeners added while running) share the
/// last value rather than wrap onto a live listener's.
fn port_id(id: usize) -> u16 {
    u16::try_from(id + 1).unwrap_or(u16::MAX)
}

impl Connection {
    /// Copies `[offset, offset + out.len())` of the discovery log into `out`; returns
    /// the bytes that came from the log. With `retain_event` clear the read unmasks
    /// the Discovery Log Page Change notice first, so a change that lands after the
    /// log was built raises a new one.
    pub(crate) fn copy_discovery_log(&self, offset: u64, out: &mut [u8], retain_event: bool) -> usize {
        let controller = self.binding.as_ref().map(|binding| &binding.controller);
        if let Some(controller) = controller {
            controller.discovery_log_read(retain_event);
        }
        let host_nqn = controller.map_or("", |controller| controller.host_nqn.as_str());
        let entries = self.target.discovery_entries_for(host_nqn);
        let header = DiscoveryLogHeader {
            generation_counter: self.target.discovery_generation(),
            number_of_records: entries.len() as u64,
            record_format: 0,
        };
        copy_discovery_log_range(&header, &entries, offset, out)
    }
}

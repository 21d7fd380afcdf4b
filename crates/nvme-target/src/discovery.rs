//! The discovery log (log page 70h): one record per (NVM subsystem, listener that
//! serves I/O), for the subsystems the reading host may connect to: a host not on
//! a subsystem's allow-list does not learn that it exists.

use nvme_spec::discovery::{
    address_family, copy_discovery_log_range, subsystem_type, DiscoveryLogEntry, DiscoveryLogHeader,
};

use crate::connection::Connection;
use crate::limits::MAX_ADMIN_QUEUE_DEPTH;
use crate::target::{AddressFamily, Target};

/// Builds the records of the discovery log as `host_nqn` sees it. The admin path may
/// allocate: the log is read a few times per host connection.
pub(crate) fn discovery_entries(target: &Target, host_nqn: &str) -> Vec<DiscoveryLogEntry> {
    let mut entries = Vec::new();
    let listeners = target.listeners();
    for subsystem in target.subsystems().iter().filter(|subsystem| subsystem.hosts.allows(host_nqn)) {
        for (id, listener) in &listeners {
            if listener.discovery_only {
                continue;
            }
            let family = match listener.family {
                AddressFamily::Ipv4 => address_family::IPV4,
                AddressFamily::Ipv6 => address_family::IPV6,
            };
            let mut entry = DiscoveryLogEntry::tcp(
                subsystem_type::NVME_SUBSYSTEM,
                family,
                // PORTID: from the listener's id, which stays the same while the
                // target runs (other listeners coming and going do not move it)
                // and follows configuration order at start.
                port_id(*id),
                &listener.address,
                &listener.port.to_string(),
                &subsystem.nqn,
            );
            entry.admin_max_submission_queue_size = MAX_ADMIN_QUEUE_DEPTH;
            entries.push(entry);
        }
    }
    entries
}

/// PORTID of the listener with `id`: id + 1 (0 reads as "no port" to some
/// hosts). Ids past 65534 (that many listeners added while running) share the
/// last value rather than wrap onto a live listener's.
fn port_id(id: usize) -> u16 {
    u16::try_from(id + 1).unwrap_or(u16::MAX)
}

impl Connection {
    /// Copies `[offset, offset + out.len())` of the discovery log into `out`; returns
    /// the bytes that came from the log.
    pub(crate) fn copy_discovery_log(&self, offset: u64, out: &mut [u8]) -> usize {
        let host_nqn = self.binding.as_ref().map_or("", |binding| binding.controller.host_nqn.as_str());
        let entries = discovery_entries(&self.target, host_nqn);
        let header = DiscoveryLogHeader {
            generation_counter: self.target.discovery_generation(),
            number_of_records: entries.len() as u64,
            record_format: 0,
        };
        copy_discovery_log_range(&header, &entries, offset, out)
    }
}

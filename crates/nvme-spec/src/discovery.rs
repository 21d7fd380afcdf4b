//! The discovery log page (log 70h) that a discovery controller returns: a 1024-byte
//! header followed by one 1024-byte record per subsystem port (NVMe Base 2.0,
//! "Discovery Log Page"; NVMe/TCP Transport 1.0 for the TCP-specific TSAS byte).
//!
//! A host reads this log in pieces at arbitrary offsets: typically the header first
//! to learn NUMREC, then the whole log, then the header again to check GENCTR did
//! not move. [`copy_discovery_log_range`] serves any such window without building
//! the whole log in memory.

use crate::bytes::{copy_prefix, get_array, get_nul_padded, get_u16, get_u64, put_nul_padded, put_u16, put_u64};
use crate::ids::ControllerId;

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Size of the header and of each record.
pub const DISCOVERY_LOG_RECORD_BYTES: usize = 1024;

/// TRTYPE: transport type.
pub const TRTYPE_RDMA: u8 = 1;
/// TRTYPE: Fibre Channel.
pub const TRTYPE_FC: u8 = 2;
/// TRTYPE: TCP.
pub const TRTYPE_TCP: u8 = 3;

/// ADRFAM: address family.
pub mod address_family {
    /// IPv4 (TRADDR is dotted decimal).
    pub const IPV4: u8 = 1;
    /// IPv6 (TRADDR is the RFC 5952 text form).
    pub const IPV6: u8 = 2;
    /// InfiniBand.
    pub const INFINIBAND: u8 = 3;
    /// Fibre Channel.
    pub const FIBRE_CHANNEL: u8 = 4;
}

/// SUBTYPE: subsystem type of a record.
pub mod subsystem_type {
    /// A referral to another discovery service.
    pub const DISCOVERY_REFERRAL: u8 = 1;
    /// An NVM subsystem with I/O controllers.
    pub const NVME_SUBSYSTEM: u8 = 2;
    /// This discovery subsystem itself (a port of the current discovery service).
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// TREQ: transport requirements.
pub mod transport_requirements {
    /// Bits 1:0 = 00b: secure channel requirement not specified.
    pub const SECURE_CHANNEL_NOT_SPECIFIED: u8 = 0b00;
    /// Bits 1:0 = 01b: a secure channel (TLS) is required.
    pub const SECURE_CHANNEL_REQUIRED: u8 = 0b01;
    /// Bits 1:0 = 10b: a secure channel is not required.
    pub const SECURE_CHANNEL_NOT_REQUIRED: u8 = 0b10;
    /// Bit 2: the controller supports disabling SQ flow control (Connect CATTR bit 2).
    pub const SQ_FLOW_CONTROL_DISABLE_SUPPORTED: u8 = 1 << 2;
}

/// EFLAGS: entry flags.
pub mod entry_flags {
    /// DUPRETINFO: this entry returns the same information as other flagged entries.
    pub const DUPLICATE_RETURNED_INFORMATION: u16 = 1 << 0;
    /// EPCSD: explicit persistent connections supported for discovery.
    pub const EXPLICIT_PERSISTENT_CONNECTION: u16 = 1 << 1;
    /// NCC: no CDC connectivity.
    pub const NO_CDC_CONNECTIVITY: u16 = 1 << 2;
}

/// SECTYPE values, TSAS byte 0 for TCP.
pub mod tcp_security_type {
    /// No security.
    pub const NONE: u8 = 0;
    /// TLS 1.2.
    pub const TLS_1_2: u8 = 1;
    /// TLS 1.3.
    pub const TLS_1_3: u8 = 2;
}

/// Discovery log header, bytes 1023:0 of the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiscoveryLogHeader {
    /// GENCTR: generation counter, bytes 7:0; incremented on every change so a host
    /// can detect a log that changed between its partial reads.
    pub generation_counter: u64,
    /// NUMREC: number of records, bytes 15:8.
    pub number_of_records: u64,
    /// RECFMT: record format, bytes 17:16 (0).
    pub record_format: u16,
}

impl DiscoveryLogHeader {
    /// Decodes 1024 bytes.
    pub fn decode(raw: &[u8; DISCOVERY_LOG_RECORD_BYTES]) -> Self {
        Self {
            generation_counter: get_u64(raw, 0),
            number_of_records: get_u64(raw, 8),
            record_format: get_u16(raw, 16),
        }
    }

    /// Encodes into 1024 bytes, reserved bytes zero.
    pub fn encode(&self, out: &mut [u8; DISCOVERY_LOG_RECORD_BYTES]) {
        out.fill(0);
        put_u64(out, 0, self.generation_counter);
        put_u64(out, 8, self.number_of_records);
        put_u16(out, 16, self.record_format);
    }
}

/// One discovery log record (entry), 1024 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscoveryLogEntry {
    /// TRTYPE: transport type, byte 0 ([`TRTYPE_TCP`]).
    pub transport_type: u8,
    /// ADRFAM: address family, byte 1 ([`address_family`]).
    pub address_family: u8,
    /// SUBTYPE: subsystem type, byte 2 ([`subsystem_type`]).
    pub subsystem_type: u8,
    /// TREQ: transport requirements, byte 3 ([`transport_requirements`]).
    pub transport_requirements: u8,
    /// PORTID: NVM subsystem port ID, bytes 5:4.
    pub port_id: u16,
    /// CNTLID: controller ID, bytes 7:6; FFFFh for the dynamic controller model.
    pub controller_id: ControllerId,
    /// ASQSZ: admin max SQ size, bytes 9:8 (entries, at least 32).
    pub admin_max_submission_queue_size: u16,
    /// EFLAGS: entry flags, bytes 11:10 ([`entry_flags`]).
    pub entry_flags: u16,
    /// TRSVCID: transport service identifier, bytes 63:32 (for TCP the port number
    /// in decimal text), NUL padded.
    pub transport_service_id: [u8; 32],
    /// SUBNQN: subsystem NQN, bytes 511:256, NUL padded.
    pub subsystem_nqn: [u8; 256],
    /// TRADDR: transport address, bytes 767:512, NUL padded.
    pub transport_address: [u8; 256],
    /// TSAS: transport specific address subtype, bytes 1023:768; for TCP, byte 0 is
    /// SECTYPE ([`tcp_security_type`]) and the rest is reserved.
    pub transport_specific_address_subtype: [u8; 256],
}

impl Default for DiscoveryLogEntry {
    fn default() -> Self {
        Self::decode(&[0; DISCOVERY_LOG_RECORD_BYTES])
    }
}

impl DiscoveryLogEntry {
    /// An NVMe/TCP record: dynamic controller model, admin queue of 32 entries, no
    /// secure channel requirement stated, no TLS. The text fields are NUL padded and
    /// truncated to their widths; adjust the public fields afterwards as needed.
    pub fn tcp(
        subsystem_type: u8,
        address_family: u8,
        port_id: u16,
        transport_address: &str,
        transport_service_id: &str,
        subsystem_nqn: &str,
    ) -> Self {
        let mut entry = Self {
            transport_type: TRTYPE_TCP,
            address_family,
            subsystem_type,
            port_id,
            controller_id: ControllerId::DYNAMIC,
            admin_max_submission_queue_size: 32,
            ..Self::default()
        };
        entry.set_transport_address(transport_address);
        entry.set_transport_service_id(transport_service_id);
        entry.set_subsystem_nqn(subsystem_nqn);
        entry
    }

    /// Decodes 1024 bytes.
    pub fn decode(raw: &[u8; DISCOVERY_LOG_RECORD_BYTES]) -> Self {
        Self {
            transport_type: raw[0],
            address_family: raw[1],
            subsystem_type: raw[2],
            transport_requirements: raw[3],
            port_id: get_u16(raw, 4),
            controller_id: ControllerId(get_u16(raw, 6)),
            admin_max_submission_queue_size: get_u16(raw, 8),
            entry_flags: get_u16(raw, 10),
            transport_service_id: get_array(raw, 32),
            subsystem_nqn: get_array(raw, 256),
            transport_address: get_array(raw, 512),
            transport_specific_address_subtype: get_array(raw, 768),
        }
    }

    /// Encodes into 1024 bytes, reserved bytes zero.
    pub fn encode(&self, out: &mut [u8; DISCOVERY_LOG_RECORD_BYTES]) {
        out.fill(0);
        out[0] = self.transport_type;
        out[1] = self.address_family;
        out[2] = self.subsystem_type;
        out[3] = self.transport_requirements;
        put_u16(out, 4, self.port_id);
        put_u16(out, 6, self.controller_id.0);
        put_u16(out, 8, self.admin_max_submission_queue_size);
        put_u16(out, 10, self.entry_flags);
        out[32..64].copy_from_slice(&self.transport_service_id);
        out[256..512].copy_from_slice(&self.subsystem_nqn);
        out[512..768].copy_from_slice(&self.transport_address);
        out[768..1024].copy_from_slice(&self.transport_specific_address_subtype);
    }

    /// Sets TRSVCID (NUL padded, truncated to 32 bytes).
    pub fn set_transport_service_id(&mut self, text: &str) {
        put_nul_padded(&mut self.transport_service_id, text);
    }

    /// Sets SUBNQN (NUL padded, truncated to 256 bytes).
    pub fn set_subsystem_nqn(&mut self, text: &str) {
        put_nul_padded(&mut self.subsystem_nqn, text);
    }

    /// Sets TRADDR (NUL padded, truncated to 256 bytes).
    pub fn set_transport_address(&mut self, text: &str) {
        put_nul_padded(&mut self.transport_address, text);
    }

    /// TRSVCID text; `None` if not UTF-8.
    pub fn transport_service_id_str(&self) -> Option<&str> {
        get_nul_padded(&self.transport_service_id)
    }

    /// SUBNQN text; `None` if not UTF-8.
    pub fn subsystem_nqn_str(&self) -> Option<&str> {
        get_nul_padded(&self.subsystem_nqn)
    }

    /// TRADDR text; `None` if not UTF-8.
    pub fn transport_address_str(&self) -> Option<&str> {
        get_nul_padded(&self.transport_address)
    }

    /// SECTYPE for a TCP record (TSAS byte 0).
    pub fn tcp_security_type(&self) -> u8 {
        self.transport_specific_address_subtype[0]
    }

    /// Sets SECTYPE for a TCP record.
    pub fn set_tcp_security_type(&mut self, security_type: u8) {
        self.transport_specific_address_subtype[0] = security_type;
    }
}

/// Total size in bytes of a discovery log with `records` entries.
pub fn discovery_log_size_bytes(records: usize) -> u64 {
    (records as u64 + 1) * DISCOVERY_LOG_RECORD_BYTES as u64
}

/// Fills `out` with bytes `[offset, offset + out.len())` of the discovery log made of
/// `header` and `entries`, encoding only the records that overlap the window.
/// Whatever lies past the end of the log is zero-filled. Returns the number of bytes
/// that came from the log (0 when `offset` is at or beyond its end).
///
/// The header's NUMREC is written as given; the caller keeps it equal to
/// `entries.len()`.
pub fn copy_discovery_log_range(
    header: &DiscoveryLogHeader,
    entries: &[DiscoveryLogEntry],
    offset: u64,
    out: &mut [u8],
) -> usize {
    out.fill(0);
    let log_end = discovery_log_size_bytes(entries.len());
    let window_end = offset.saturating_add(out.len() as u64).min(log_end);
    if offset >= window_end {
        return 0;
    }
    let mut record = [0u8; DISCOVERY_LOG_RECORD_BYTES];
    let record_bytes = DISCOVERY_LOG_RECORD_BYTES as u64;
    let first = offset / record_bytes;
    let last = (window_end - 1) / record_bytes;
    for index in first..=last {
        // Record 0 is the header, record n is entry n - 1; `index` is below
        // entries.len() + 1 because window_end is capped at the log's end.
        if index == 0 {
            header.encode(&mut record);
        } else {
            match entries.get((index - 1) as usize) {
                Some(entry) => entry.encode(&mut record),
                None => break,
            }
        }
        let record_start = index * record_bytes;
        let from = offset.max(record_start);
        let to = window_end.min(record_start + record_bytes);
        // [from, to) lies inside this record and inside the window, so both ranges
        // are in bounds and the whole source fits.
        let source = record.get((from - record_start) as usize..(to - record_start) as usize).unwrap_or_default();
        let target = out.get_mut((from - offset) as usize..).unwrap_or_default();
        copy_prefix(target, source);
    }
    (window_end - offset) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_layout_round_trip, to_array};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_round_trips(raw in proptest::collection::vec(any::<u8>(), DISCOVERY_LOG_RECORD_BYTES)) {
            assert_layout_round_trip(&to_array::<DISCOVERY_LOG_RECORD_BYTES>(&raw), DiscoveryLogHeader::decode, DiscoveryLogHeader::encode);
        }

        #[test]
        fn entry_round_trips(raw in proptest::collection::vec(any::<u8>(), DISCOVERY_LOG_RECORD_BYTES)) {
            assert_layout_round_trip(&to_array::<DISCOVERY_LOG_RECORD_BYTES>(&raw), DiscoveryLogEntry::decode, DiscoveryLogEntry::encode);
        }

        #[test]
        fn any_window_matches_the_whole_log(records in 0usize..4, offset in 0u64..5000, len in 0usize..5000, generation in any::<u64>()) {
            let entries: Vec<_> = (0..records)
                .map(|index| DiscoveryLogEntry::tcp(subsystem_type::NVME_SUBSYSTEM, address_family::IPV4, index as u16, "10.0.0.1", "4420", "nqn.2024-01.io.sluice:x"))
                .collect();
            let header = DiscoveryLogHeader { generation_counter: generation, number_of_records: records as u64, record_format: 0 };
            let mut whole = vec![0u8; (records + 1) * DISCOVERY_LOG_RECORD_BYTES];
            let mut record = [0u8; DISCOVERY_LOG_RECORD_BYTES];
            header.encode(&mut record);
            whole[..DISCOVERY_LOG_RECORD_BYTES].copy_from_slice(&record);
            for (index, entry) in entries.iter().enumerate() {
                entry.encode(&mut record);
                whole[(index + 1) * DISCOVERY_LOG_RECORD_BYTES..(index + 2) * DISCOVERY_LOG_RECORD_BYTES].copy_from_slice(&record);
            }
            let mut window = vec![0xAAu8; len];
            let copied = copy_discovery_log_range(&header, &entries, offset, &mut window);
            let mut expected = vec![0u8; len];
            let copied_expected = crate::log_page::copy_log_page_range(&whole, offset, &mut expected);
            prop_assert_eq!(copied, copied_expected);
            prop_assert_eq!(window, expected);
        }
    }

    #[test]
    fn fields_sit_at_the_spec_offsets() {
        let mut entry = DiscoveryLogEntry::tcp(
            subsystem_type::NVME_SUBSYSTEM,
            address_family::IPV4,
            0x0102,
            "192.168.1.10",
            "4420",
            "nqn.2024-01.io.sluice:disk0",
        );
        entry.transport_requirements = transport_requirements::SECURE_CHANNEL_NOT_REQUIRED
            | transport_requirements::SQ_FLOW_CONTROL_DISABLE_SUPPORTED;
        entry.set_tcp_security_type(tcp_security_type::NONE);
        let mut raw = [0u8; DISCOVERY_LOG_RECORD_BYTES];
        entry.encode(&mut raw);
        assert_eq!(&raw[0..12], &[3, 1, 2, 0b110, 0x02, 0x01, 0xFF, 0xFF, 32, 0, 0, 0]);
        assert_eq!(&raw[32..37], b"4420\0");
        assert_eq!(&raw[256..283], b"nqn.2024-01.io.sluice:disk0");
        assert_eq!(&raw[512..525], b"192.168.1.10\0");
        assert_eq!(raw[768], 0);
        let back = DiscoveryLogEntry::decode(&raw);
        assert_eq!(back, entry);
        assert_eq!(back.transport_address_str(), Some("192.168.1.10"));
        assert_eq!(back.transport_service_id_str(), Some("4420"));
        assert_eq!(back.subsystem_nqn_str(), Some("nqn.2024-01.io.sluice:disk0"));

        let header = DiscoveryLogHeader { generation_counter: 5, number_of_records: 2, record_format: 0 };
        header.encode(&mut raw);
        assert_eq!(&raw[0..18], &[5, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(discovery_log_size_bytes(2), 3072);
    }

    #[test]
    fn header_only_read_then_past_the_end() {
        let header = DiscoveryLogHeader { generation_counter: 1, number_of_records: 0, record_format: 0 };
        let mut window = [0xFFu8; 16];
        assert_eq!(copy_discovery_log_range(&header, &[], 0, &mut window), 16);
        assert_eq!(window[0], 1);
        assert_eq!(copy_discovery_log_range(&header, &[], 1024, &mut window), 0);
        assert!(window.iter().all(|&b| b == 0));
        assert_eq!(copy_discovery_log_range(&header, &[], u64::MAX, &mut window), 0);
    }
}

//! Identify Controller data structure (CNS 01h), NVMe Base 2.0 figure "Identify –
//! Identify Controller Data Structure, I/O Command Set Independent", plus the bit
//! constants for the capability fields a target fills in.

use super::IDENTIFY_DATA_BYTES;
use crate::bytes::{
    get_array, get_nul_padded, get_u128, get_u16, get_u32, put_ascii_padded, put_nul_padded, put_u128, put_u16, put_u32,
};
use crate::ids::ControllerId;
use crate::registers::Version;

/// Size of one power state descriptor in bytes.
pub const POWER_STATE_DESCRIPTOR_BYTES: usize = 32;

/// Byte offset of power state descriptor 0 (PSD0) in Identify Controller.
const POWER_STATE_0_OFFSET: usize = 2048;

/// OACS: optional admin command support bits (Identify Controller bytes 257:256).
pub mod oacs {
    /// Security Send and Security Receive.
    pub const SECURITY: u16 = 1 << 0;
    /// Format NVM.
    pub const FORMAT: u16 = 1 << 1;
    /// Firmware Commit and Firmware Image Download.
    pub const FIRMWARE: u16 = 1 << 2;
    /// Namespace Management and Namespace Attachment.
    pub const NAMESPACE_MANAGEMENT: u16 = 1 << 3;
    /// Device Self-test.
    pub const DEVICE_SELF_TEST: u16 = 1 << 4;
    /// Directive Send and Directive Receive.
    pub const DIRECTIVES: u16 = 1 << 5;
    /// NVMe-MI Send and NVMe-MI Receive.
    pub const NVME_MI: u16 = 1 << 6;
    /// Virtualization Management.
    pub const VIRTUALIZATION_MANAGEMENT: u16 = 1 << 7;
    /// Doorbell Buffer Config (PCIe only).
    pub const DOORBELL_BUFFER_CONFIG: u16 = 1 << 8;
    /// Get LBA Status.
    pub const GET_LBA_STATUS: u16 = 1 << 9;
    /// Command and Feature Lockdown.
    pub const COMMAND_AND_FEATURE_LOCKDOWN: u16 = 1 << 10;
}

/// ONCS: optional NVM command support bits (Identify Controller bytes 521:520).
pub mod oncs {
    /// Compare.
    pub const COMPARE: u16 = 1 << 0;
    /// Write Uncorrectable.
    pub const WRITE_UNCORRECTABLE: u16 = 1 << 1;
    /// Dataset Management.
    pub const DATASET_MANAGEMENT: u16 = 1 << 2;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u16 = 1 << 3;
    /// Save in Set Features and a non-zero Select in Get Features.
    pub const SAVE_SELECT: u16 = 1 << 4;
    /// Reservations.
    pub const RESERVATIONS: u16 = 1 << 5;
    /// Timestamp feature.
    pub const TIMESTAMP: u16 = 1 << 6;
    /// Verify.
    pub const VERIFY: u16 = 1 << 7;
    /// Copy.
    pub const COPY: u16 = 1 << 8;
}

/// LPA: log page attribute bits (Identify Controller byte 261).
pub mod lpa {
    /// SMART / Health log is available per namespace (NSID other than FFFFFFFFh).
    pub const SMART_PER_NAMESPACE: u8 = 1 << 0;
    /// Commands Supported and Effects log page.
    pub const COMMANDS_EFFECTS: u8 = 1 << 1;
    /// Extended Get Log Page: NUMDU, LPO and the 32-bit dword count.
    pub const EXTENDED_DATA: u8 = 1 << 2;
    /// Telemetry host- and controller-initiated logs.
    pub const TELEMETRY: u8 = 1 << 3;
    /// Persistent Event log.
    pub const PERSISTENT_EVENT: u8 = 1 << 4;
    /// Supported Log Pages, Feature Identifiers Supported and Effects and similar.
    pub const SUPPORTED_LOG_PAGES: u8 = 1 << 5;
    /// Telemetry data area 4.
    pub const TELEMETRY_DATA_AREA_4: u8 = 1 << 6;
}

/// OAES: optional asynchronous events supported (Identify Controller bytes 95:92).
pub mod oaes {
    /// Namespace Attribute Notices (and the Changed Namespace List log).
    pub const NAMESPACE_ATTRIBUTE_NOTICES: u32 = 1 << 8;
    /// Firmware Activation Notices.
    pub const FIRMWARE_ACTIVATION_NOTICES: u32 = 1 << 9;
    /// Asymmetric Namespace Access Change Notices.
    pub const ANA_CHANGE_NOTICES: u32 = 1 << 11;
    /// Discovery Log Page Change Notifications (discovery controllers).
    pub const DISCOVERY_LOG_PAGE_CHANGE: u32 = 1 << 31;
}

/// CMIC: controller multi-path I/O and namespace sharing capabilities (byte 76).
pub mod cmic {
    /// The subsystem may have more than one port.
    pub const MULTIPLE_PORTS: u8 = 1 << 0;
    /// The subsystem may have more than one controller (needed for multipath).
    pub const MULTIPLE_CONTROLLERS: u8 = 1 << 1;
    /// The controller is an SR-IOV virtual function.
    pub const SR_IOV_VIRTUAL_FUNCTION: u8 = 1 << 2;
    /// Asymmetric Namespace Access reporting.
    pub const ANA_REPORTING: u8 = 1 << 3;
}

/// CTRATT: controller attributes (bytes 99:96).
pub mod ctratt {
    /// 128-bit host identifier (required for NVMe over Fabrics).
    pub const HOST_ID_128_BIT: u32 = 1 << 0;
    /// Traffic Based Keep Alive.
    pub const TRAFFIC_BASED_KEEP_ALIVE: u32 = 1 << 6;
}

/// SGLS: SGL support (bytes 539:536).
pub mod sgls {
    /// Bits 1:0 = 01b: SGLs supported with no alignment or granularity requirement.
    pub const SUPPORTED_NO_ALIGNMENT: u32 = 0b01;
    /// Bits 1:0 = 10b: SGLs supported with dword alignment and granularity.
    pub const SUPPORTED_DWORD_ALIGNED: u32 = 0b10;
    /// Mask of the two support bits.
    pub const SUPPORT_MASK: u32 = 0b11;
    /// Keyed SGL Data Block descriptor (RDMA).
    pub const KEYED: u32 = 1 << 2;
    /// SGL Bit Bucket descriptor.
    pub const BIT_BUCKET: u32 = 1 << 16;
    /// Byte-aligned contiguous physical buffer of metadata.
    pub const METADATA_BYTE_ALIGNED: u32 = 1 << 17;
    /// SGL length may exceed the data to transfer.
    pub const OVERSIZE: u32 = 1 << 18;
    /// MPTR may hold an SGL descriptor.
    pub const METADATA_SGL: u32 = 1 << 19;
    /// Address field may be an offset (in-capsule data).
    pub const SGL_OFFSET: u32 = 1 << 20;
    /// Transport SGL Data Block descriptor (NVMe/TCP data PDUs).
    pub const TRANSPORT_DATA_BLOCK: u32 = 1 << 21;
}

/// FCATT: fabrics controller attributes (byte 1802).
pub mod fcatt {
    /// Set: static controller model; clear: dynamic controller model.
    pub const STATIC_CONTROLLER_MODEL: u8 = 1 << 0;
}

/// OFCS: optional fabrics commands support (bytes 1805:1804).
pub mod ofcs {
    /// Disconnect command and deletion of individual I/O queues.
    pub const DISCONNECT: u16 = 1 << 0;
}

/// VWC: volatile write cache (byte 525).
pub mod vwc {
    /// A volatile write cache is present (the host may enable it via Set Features).
    pub const PRESENT: u8 = 1 << 0;
    /// Bits 2:1 = 10b: Flush with NSID FFFFFFFFh is not supported.
    pub const FLUSH_BROADCAST_NOT_SUPPORTED: u8 = 0b10 << 1;
    /// Bits 2:1 = 11b: Flush with NSID FFFFFFFFh is supported.
    pub const FLUSH_BROADCAST_SUPPORTED: u8 = 0b11 << 1;
}

/// FRMW: firmware update capabilities (byte 260).
pub mod frmw {
    /// Firmware slot 1 is read only.
    pub const SLOT_1_READ_ONLY: u8 = 1 << 0;
    /// Bits 3:1: number of firmware slots.
    pub const SLOT_COUNT_SHIFT: u8 = 1;
    /// Firmware activation without reset.
    pub const ACTIVATION_WITHOUT_RESET: u8 = 1 << 4;
}

/// CNTRLTYPE values (byte 111).
pub mod controller_type {
    /// Not reported (controllers before NVMe 1.4).
    pub const NOT_REPORTED: u8 = 0;
    /// I/O controller.
    pub const IO: u8 = 1;
    /// Discovery controller.
    pub const DISCOVERY: u8 = 2;
    /// Administrative controller.
    pub const ADMINISTRATIVE: u8 = 3;
}

/// One 32-byte power state descriptor. A fabrics target reports a single
/// operational state (NPSS 0), so only descriptor 0 is modelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerStateDescriptor {
    /// MP: maximum power, bytes 1:0, in 0.01 W or 0.0001 W units per MXPS.
    pub maximum_power: u16,
    /// Byte 3: bit 0 MXPS (max power scale 0.0001 W), bit 1 NOPS (non-operational).
    pub flags: u8,
    /// ENLAT: entry latency in microseconds, bytes 7:4.
    pub entry_latency_us: u32,
    /// EXLAT: exit latency in microseconds, bytes 11:8.
    pub exit_latency_us: u32,
    /// RRT: relative read throughput, byte 12 bits 4:0.
    pub relative_read_throughput: u8,
    /// RRL: relative read latency, byte 13 bits 4:0.
    pub relative_read_latency: u8,
    /// RWT: relative write throughput, byte 14 bits 4:0.
    pub relative_write_throughput: u8,
    /// RWL: relative write latency, byte 15 bits 4:0.
    pub relative_write_latency: u8,
    /// IDLP: idle power, bytes 17:16.
    pub idle_power: u16,
    /// IPS: idle power scale, byte 18 bits 7:6.
    pub idle_power_scale: u8,
    /// ACTP: active power, bytes 21:20.
    pub active_power: u16,
    /// Byte 22: APW active power workload (bits 2:0) and APS scale (bits 7:6).
    pub active_power_workload_and_scale: u8,
}

impl PowerStateDescriptor {
    /// Decodes 32 bytes.
    pub fn decode(raw: &[u8; POWER_STATE_DESCRIPTOR_BYTES]) -> Self {
        Self {
            maximum_power: get_u16(raw, 0),
            flags: raw[3] & 0b11,
            entry_latency_us: get_u32(raw, 4),
            exit_latency_us: get_u32(raw, 8),
            relative_read_throughput: raw[12] & 0x1F,
            relative_read_latency: raw[13] & 0x1F,
            relative_write_throughput: raw[14] & 0x1F,
            relative_write_latency: raw[15] & 0x1F,
            idle_power: get_u16(raw, 16),
            idle_power_scale: raw[18] >> 6,
            active_power: get_u16(raw, 20),
            active_power_workload_and_scale: raw[22] & 0b1100_0111,
        }
    }

    /// Encodes into 32 bytes, reserved bits zero.
    pub fn encode(&self, out: &mut [u8; POWER_STATE_DESCRIPTOR_BYTES]) {
        out.fill(0);
        put_u16(out, 0, self.maximum_power);
        out[3] = self.flags & 0b11;
        put_u32(out, 4, self.entry_latency_us);
        put_u32(out, 8, self.exit_latency_us);
        out[12] = self.relative_read_throughput & 0x1F;
        out[13] = self.relative_read_latency & 0x1F;
        out[14] = self.relative_write_throughput & 0x1F;
        out[15] = self.relative_write_latency & 0x1F;
        put_u16(out, 16, self.idle_power);
        out[18] = (self.idle_power_scale & 0b11) << 6;
        put_u16(out, 20, self.active_power);
        out[22] = self.active_power_workload_and_scale & 0b1100_0111;
    }
}

/// Identify Controller data structure (CNS 01h). Fields not listed here (vendor
/// specific area, power states 1..31, PCIe-only and management fields) encode as
/// zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentifyController {
    /// VID: PCI vendor ID, bytes 1:0.
    pub pci_vendor_id: u16,
    /// SSVID: PCI subsystem vendor ID, bytes 3:2.
    pub pci_subsystem_vendor_id: u16,
    /// SN: serial number, bytes 23:4, ASCII padded with spaces.
    pub serial_number: [u8; 20],
    /// MN: model number, bytes 63:24, ASCII padded with spaces.
    pub model_number: [u8; 40],
    /// FR: firmware revision, bytes 71:64, ASCII padded with spaces.
    pub firmware_revision: [u8; 8],
    /// RAB: recommended arbitration burst, byte 72, a power of two.
    pub recommended_arbitration_burst: u8,
    /// IEEE: IEEE OUI identifier, bytes 75:73, least significant byte first.
    pub ieee_oui_identifier: [u8; 3],
    /// CMIC: multi-path I/O and namespace sharing capabilities, byte 76 ([`cmic`]).
    pub multipath_capabilities: u8,
    /// MDTS: maximum data transfer size, byte 77, a power of two in units of
    /// CAP.MPSMIN; 0 means no limit.
    pub maximum_data_transfer_size: u8,
    /// CNTLID: controller ID, bytes 79:78.
    pub controller_id: ControllerId,
    /// VER: version, bytes 83:80, same format as the VS property.
    pub version: Version,
    /// RTD3R: RTD3 resume latency in microseconds, bytes 87:84.
    pub rtd3_resume_latency_us: u32,
    /// RTD3E: RTD3 entry latency in microseconds, bytes 91:88.
    pub rtd3_entry_latency_us: u32,
    /// OAES: optional asynchronous events supported, bytes 95:92 ([`oaes`]).
    pub optional_async_events_supported: u32,
    /// CTRATT: controller attributes, bytes 99:96 ([`ctratt`]).
    pub controller_attributes: u32,
    /// RRLS: read recovery levels supported, bytes 101:100.
    pub read_recovery_levels_supported: u16,
    /// CNTRLTYPE: controller type, byte 111 ([`controller_type`]).
    pub controller_type: u8,
    /// FGUID: FRU globally unique identifier, bytes 127:112.
    pub fru_globally_unique_identifier: [u8; 16],
    /// CRDT1..CRDT3: command retry delay times in 100 ms units, bytes 133:128.
    pub command_retry_delay_times: [u16; 3],
    /// OACS: optional admin command support, bytes 257:256 ([`oacs`]).
    pub optional_admin_command_support: u16,
    /// ACL: abort command limit, byte 258, 0's based.
    pub abort_command_limit: u8,
    /// AERL: asynchronous event request limit, byte 259, 0's based.
    pub async_event_request_limit: u8,
    /// FRMW: firmware updates, byte 260 ([`frmw`]).
    pub firmware_updates: u8,
    /// LPA: log page attributes, byte 261 ([`lpa`]).
    pub log_page_attributes: u8,
    /// ELPE: error log page entries, byte 262, 0's based.
    pub error_log_page_entries: u8,
    /// NPSS: number of power states supported, byte 263, 0's based.
    pub number_of_power_states: u8,
    /// AVSCC: admin vendor specific command configuration, byte 264.
    pub admin_vendor_specific_command_configuration: u8,
    /// APSTA: autonomous power state transition attributes, byte 265.
    pub autonomous_power_state_transition_attributes: u8,
    /// WCTEMP: warning composite temperature threshold in kelvin, bytes 267:266.
    pub warning_composite_temperature_threshold: u16,
    /// CCTEMP: critical composite temperature threshold in kelvin, bytes 269:268.
    pub critical_composite_temperature_threshold: u16,
    /// TNVMCAP: total NVM capacity in bytes, bytes 295:280.
    pub total_nvm_capacity: u128,
    /// UNVMCAP: unallocated NVM capacity in bytes, bytes 311:296.
    pub unallocated_nvm_capacity: u128,
    /// KAS: keep alive support, bytes 321:320, granularity in 100 ms units; 0 means
    /// Keep Alive is not supported (it is mandatory over fabrics).
    pub keep_alive_support: u16,
    /// ANATT: ANA transition time in seconds, byte 342.
    pub ana_transition_time: u8,
    /// ANACAP: ANA capabilities, byte 343.
    pub ana_capabilities: u8,
    /// ANAGRPMAX: ANA group identifier maximum, bytes 347:344.
    pub ana_group_identifier_maximum: u32,
    /// NANAGRPID: number of ANA group identifiers, bytes 351:348.
    pub number_of_ana_group_identifiers: u32,
    /// CQT: command quiesce time, bytes 387:386, in milliseconds: the longest the
    /// controller expects commands of a host it lost (connection loss, Keep Alive
    /// timeout) to stay in flight. A multipath host waits this long before retrying
    /// them on another path, so a late write cannot land over a newer one. 0: not
    /// reported.
    pub command_quiesce_time_ms: u16,
    /// SQES: submission queue entry size, byte 512: bits 3:0 required, bits 7:4
    /// maximum, each log2 of bytes (6 = 64 bytes).
    pub submission_queue_entry_size: u8,
    /// CQES: completion queue entry size, byte 513, same encoding (4 = 16 bytes).
    pub completion_queue_entry_size: u8,
    /// MAXCMD: maximum outstanding commands per queue, bytes 515:514 (fabrics).
    pub maximum_outstanding_commands: u16,
    /// NN: number of namespaces (the highest valid NSID), bytes 519:516.
    pub number_of_namespaces: u32,
    /// ONCS: optional NVM command support, bytes 521:520 ([`oncs`]).
    pub optional_nvm_command_support: u16,
    /// FUSES: fused operation support, bytes 523:522.
    pub fused_operation_support: u16,
    /// FNA: format NVM attributes, byte 524.
    pub format_nvm_attributes: u8,
    /// VWC: volatile write cache, byte 525 ([`vwc`]).
    pub volatile_write_cache: u8,
    /// AWUN: atomic write unit normal in logical blocks, bytes 527:526, 0's based.
    pub atomic_write_unit_normal: u16,
    /// AWUPF: atomic write unit power fail in logical blocks, bytes 529:528, 0's
    /// based.
    pub atomic_write_unit_power_fail: u16,
    /// ICSVSCC: I/O command set vendor specific command configuration, byte 530.
    pub io_vendor_specific_command_configuration: u8,
    /// NWPC: namespace write protection capabilities, byte 531.
    pub namespace_write_protection_capabilities: u8,
    /// ACWU: atomic compare and write unit, bytes 533:532, 0's based.
    pub atomic_compare_and_write_unit: u16,
    /// OCFS: optional copy formats supported, bytes 535:534.
    pub optional_copy_formats_supported: u16,
    /// SGLS: SGL support, bytes 539:536 ([`sgls`]).
    pub sgl_support: u32,
    /// MNAN: maximum number of allowed namespaces, bytes 543:540; 0 means NN.
    pub maximum_number_of_allowed_namespaces: u32,
    /// SUBNQN: NVM subsystem NVMe Qualified Name, bytes 1023:768, NUL padded.
    pub subsystem_nqn: [u8; 256],
    /// IOCCSZ: I/O queue command capsule supported size in 16-byte units, bytes
    /// 1795:1792 (64-byte SQE plus in-capsule data).
    pub io_command_capsule_size: u32,
    /// IORCSZ: I/O queue response capsule supported size in 16-byte units, bytes
    /// 1799:1796.
    pub io_response_capsule_size: u32,
    /// ICDOFF: in-capsule data offset in 16-byte units after the SQE, bytes
    /// 1801:1800.
    pub in_capsule_data_offset: u16,
    /// FCATT: fabrics controller attributes, byte 1802 ([`fcatt`]).
    pub fabrics_controller_attributes: u8,
    /// MSDBD: maximum SGL data block descriptors per command, byte 1803; 0 means no
    /// limit.
    pub maximum_sgl_data_block_descriptors: u8,
    /// OFCS: optional fabrics commands support, bytes 1805:1804 ([`ofcs`]).
    pub optional_fabrics_commands_support: u16,
    /// DCTYPE: discovery controller type, byte 1806 (0 for I/O controllers).
    pub discovery_controller_type: u8,
    /// PSD0: power state 0 descriptor, bytes 2079:2048.
    pub power_state_0: PowerStateDescriptor,
}

const _: () = assert!(POWER_STATE_0_OFFSET + POWER_STATE_DESCRIPTOR_BYTES <= IDENTIFY_DATA_BYTES);
const _: () = assert!(IDENTIFY_DATA_BYTES == 4096);

impl Default for IdentifyController {
    /// All zeros, like an all-zero 4096-byte buffer.
    fn default() -> Self {
        Self::decode(&[0; IDENTIFY_DATA_BYTES])
    }
}

impl IdentifyController {
    /// Decodes the 4096-byte structure.
    pub fn decode(raw: &[u8; IDENTIFY_DATA_BYTES]) -> Self {
        Self {
            pci_vendor_id: get_u16(raw, 0),
            pci_subsystem_vendor_id: get_u16(raw, 2),
            serial_number: get_array(raw, 4),
            model_number: get_array(raw, 24),
            firmware_revision: get_array(raw, 64),
            recommended_arbitration_burst: raw[72],
            ieee_oui_identifier: get_array(raw, 73),
            multipath_capabilities: raw[76],
            maximum_data_transfer_size: raw[77],
            controller_id: ControllerId(get_u16(raw, 78)),
            version: Version(get_u32(raw, 80)),
            rtd3_resume_latency_us: get_u32(raw, 84),
            rtd3_entry_latency_us: get_u32(raw, 88),
            optional_async_events_supported: get_u32(raw, 92),
            controller_attributes: get_u32(raw, 96),
            read_recovery_levels_supported: get_u16(raw, 100),
            controller_type: raw[111],
            fru_globally_unique_identifier: get_array(raw, 112),
            command_retry_delay_times: [get_u16(raw, 128), get_u16(raw, 130), get_u16(raw, 132)],
            optional_admin_command_support: get_u16(raw, 256),
            abort_command_limit: raw[258],
            async_event_request_limit: raw[259],
            firmware_updates: raw[260],
            log_page_attributes: raw[261],
            error_log_page_entries: raw[262],
            number_of_power_states: raw[263],
            admin_vendor_specific_command_configuration: raw[264],
            autonomous_power_state_transition_attributes: raw[265],
            warning_composite_temperature_threshold: get_u16(raw, 266),
            critical_composite_temperature_threshold: get_u16(raw, 268),
            total_nvm_capacity: get_u128(raw, 280),
            unallocated_nvm_capacity: get_u128(raw, 296),
            keep_alive_support: get_u16(raw, 320),
            ana_transition_time: raw[342],
            ana_capabilities: raw[343],
            ana_group_identifier_maximum: get_u32(raw, 344),
            number_of_ana_group_identifiers: get_u32(raw, 348),
            command_quiesce_time_ms: get_u16(raw, 386),
            submission_queue_entry_size: raw[512],
            completion_queue_entry_size: raw[513],
            maximum_outstanding_commands: get_u16(raw, 514),
            number_of_namespaces: get_u32(raw, 516),
            optional_nvm_command_support: get_u16(raw, 520),
            fused_operation_support: get_u16(raw, 522),
            format_nvm_attributes: raw[524],
            volatile_write_cache: raw[525],
            atomic_write_unit_normal: get_u16(raw, 526),
            atomic_write_unit_power_fail: get_u16(raw, 528),
            io_vendor_specific_command_configuration: raw[530],
            namespace_write_protection_capabilities: raw[531],
            atomic_compare_and_write_unit: get_u16(raw, 532),
            optional_copy_formats_supported: get_u16(raw, 534),
            sgl_support: get_u32(raw, 536),
            maximum_number_of_allowed_namespaces: get_u32(raw, 540),
            subsystem_nqn: get_array(raw, 768),
            io_command_capsule_size: get_u32(raw, 1792),
            io_response_capsule_size: get_u32(raw, 1796),
            in_capsule_data_offset: get_u16(raw, 1800),
            fabrics_controller_attributes: raw[1802],
            maximum_sgl_data_block_descriptors: raw[1803],
            optional_fabrics_commands_support: get_u16(raw, 1804),
            discovery_controller_type: raw[1806],
            power_state_0: PowerStateDescriptor::decode(&get_array(raw, POWER_STATE_0_OFFSET)),
        }
    }

    /// Encodes into 4096 bytes; everything not modelled is zero.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_DATA_BYTES]) {
        out.fill(0);
        put_u16(out, 0, self.pci_vendor_id);
        put_u16(out, 2, self.pci_subsystem_vendor_id);
        out[4..24].copy_from_slice(&self.serial_number);
        out[24..64].copy_from_slice(&self.model_number);
        out[64..72].copy_from_slice(&self.firmware_revision);
        out[72] = self.recommended_arbitration_burst;
        out[73..76].copy_from_slice(&self.ieee_oui_identifier);
        out[76] = self.multipath_capabilities;
        out[77] = self.maximum_data_transfer_size;
        put_u16(out, 78, self.controller_id.0);
        put_u32(out, 80, self.version.0);
        put_u32(out, 84, self.rtd3_resume_latency_us);
        put_u32(out, 88, self.rtd3_entry_latency_us);
        put_u32(out, 92, self.optional_async_events_supported);
        put_u32(out, 96, self.controller_attributes);
        put_u16(out, 100, self.read_recovery_levels_supported);
        out[111] = self.controller_type;
        out[112..128].copy_from_slice(&self.fru_globally_unique_identifier);
        for (index, delay) in self.command_retry_delay_times.iter().enumerate() {
            put_u16(out, 128 + index * 2, *delay);
        }
        put_u16(out, 256, self.optional_admin_command_support);
        out[258] = self.abort_command_limit;
        out[259] = self.async_event_request_limit;
        out[260] = self.firmware_updates;
        out[261] = self.log_page_attributes;
        out[262] = self.error_log_page_entries;
        out[263] = self.number_of_power_states;
        out[264] = self.admin_vendor_specific_command_configuration;
        out[265] = self.autonomous_power_state_transition_attributes;
        put_u16(out, 266, self.warning_composite_temperature_threshold);
        put_u16(out, 268, self.critical_composite_temperature_threshold);
        put_u128(out, 280, self.total_nvm_capacity);
        put_u128(out, 296, self.unallocated_nvm_capacity);
        put_u16(out, 320, self.keep_alive_support);
        out[342] = self.ana_transition_time;
        out[343] = self.ana_capabilities;
        put_u32(out, 344, self.ana_group_identifier_maximum);
        put_u32(out, 348, self.number_of_ana_group_identifiers);
        put_u16(out, 386, self.command_quiesce_time_ms);
        out[512] = self.submission_queue_entry_size;
        out[513] = self.completion_queue_entry_size;
        put_u16(out, 514, self.maximum_outstanding_commands);
        put_u32(out, 516, self.number_of_namespaces);
        put_u16(out, 520, self.optional_nvm_command_support);
        put_u16(out, 522, self.fused_operation_support);
        out[524] = self.format_nvm_attributes;
        out[525] = self.volatile_write_cache;
        put_u16(out, 526, self.atomic_write_unit_normal);
        put_u16(out, 528, self.atomic_write_unit_power_fail);
        out[530] = self.io_vendor_specific_command_configuration;
        out[531] = self.namespace_write_protection_capabilities;
        put_u16(out, 532, self.atomic_compare_and_write_unit);
        put_u16(out, 534, self.optional_copy_formats_supported);
        put_u32(out, 536, self.sgl_support);
        put_u32(out, 540, self.maximum_number_of_allowed_namespaces);
        out[768..1024].copy_from_slice(&self.subsystem_nqn);
        put_u32(out, 1792, self.io_command_capsule_size);
        put_u32(out, 1796, self.io_response_capsule_size);
        put_u16(out, 1800, self.in_capsule_data_offset);
        out[1802] = self.fabrics_controller_attributes;
        out[1803] = self.maximum_sgl_data_block_descriptors;
        put_u16(out, 1804, self.optional_fabrics_commands_support);
        out[1806] = self.discovery_controller_type;
        let mut power_state = [0u8; POWER_STATE_DESCRIPTOR_BYTES];
        self.power_state_0.encode(&mut power_state);
        out[POWER_STATE_0_OFFSET..POWER_STATE_0_OFFSET + POWER_STATE_DESCRIPTOR_BYTES].copy_from_slice(&power_state);
    }

    /// Sets SN, space padded and truncated to 20 bytes.
    pub fn set_serial_number(&mut self, text: &str) {
        put_ascii_padded(&mut self.serial_number, text);
    }

    /// Sets MN, space padded and truncated to 40 bytes.
    pub fn set_model_number(&mut self, text: &str) {
        put_ascii_padded(&mut self.model_number, text);
    }

    /// Sets FR, space padded and truncated to 8 bytes.
    pub fn set_firmware_revision(&mut self, text: &str) {
        put_ascii_padded(&mut self.firmware_revision, text);
    }

    /// Sets SUBNQN, NUL padded (an NQN is at most 223 bytes, so a NUL always follows).
    pub fn set_subsystem_nqn(&mut self, nqn: &str) {
        put_nul_padded(&mut self.subsystem_nqn, nqn);
    }

    /// SUBNQN up to its first NUL; `None` if not UTF-8.
    pub fn subsystem_nqn_str(&self) -> Option<&str> {
        get_nul_padded(&self.subsystem_nqn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_layout_round_trip, to_array};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn identify_controller_round_trips(raw in proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_BYTES)) {
            assert_layout_round_trip(&to_array::<IDENTIFY_DATA_BYTES>(&raw), IdentifyController::decode, IdentifyController::encode);
        }

        #[test]
        fn power_state_descriptor_round_trips(raw in proptest::array::uniform32(any::<u8>())) {
            assert_layout_round_trip(&raw, PowerStateDescriptor::decode, PowerStateDescriptor::encode);
        }
    }

    #[test]
    fn default_is_all_zero() {
        let mut out = [0xFFu8; IDENTIFY_DATA_BYTES];
        IdentifyController::default().encode(&mut out);
        assert!(out.iter().all(|&b| b == 0));
    }

    #[test]
    fn fields_sit_at_the_spec_offsets() {
        let mut id = IdentifyController {
            pci_vendor_id: 0x1B36,
            maximum_data_transfer_size: 5,
            controller_id: ControllerId(0x0102),
            version: Version::V2_0_0,
            controller_type: controller_type::IO,
            optional_admin_command_support: oacs::NAMESPACE_MANAGEMENT,
            keep_alive_support: 100,
            command_quiesce_time_ms: 0x1234,
            submission_queue_entry_size: 0x66,
            completion_queue_entry_size: 0x44,
            maximum_outstanding_commands: 128,
            number_of_namespaces: 1024,
            optional_nvm_command_support: oncs::WRITE_ZEROES | oncs::DATASET_MANAGEMENT,
            volatile_write_cache: vwc::PRESENT,
            sgl_support: sgls::SUPPORTED_NO_ALIGNMENT | sgls::SGL_OFFSET | sgls::TRANSPORT_DATA_BLOCK,
            maximum_number_of_allowed_namespaces: 77,
            io_command_capsule_size: 260,
            io_response_capsule_size: 1,
            in_capsule_data_offset: 0,
            fabrics_controller_attributes: 0,
            maximum_sgl_data_block_descriptors: 1,
            optional_fabrics_commands_support: ofcs::DISCONNECT,
            power_state_0: PowerStateDescriptor { maximum_power: 0x09C4, ..Default::default() },
            ..Default::default()
        };
        id.set_serial_number("SN1");
        id.set_model_number("Sluice");
        id.set_firmware_revision("0.1");
        id.set_subsystem_nqn("nqn.2024-01.io.sluice:a");
        let mut raw = [0u8; IDENTIFY_DATA_BYTES];
        id.encode(&mut raw);
        assert_eq!(&raw[0..2], &[0x36, 0x1B]);
        assert_eq!(&raw[4..8], b"SN1 ");
        assert_eq!(raw[23], b' ');
        assert_eq!(&raw[24..30], b"Sluice");
        assert_eq!(&raw[64..68], b"0.1 ");
        assert_eq!(raw[77], 5);
        assert_eq!(&raw[78..80], &[0x02, 0x01]);
        assert_eq!(&raw[80..84], &[0x00, 0x00, 0x02, 0x00]);
        assert_eq!(raw[111], 1);
        assert_eq!(&raw[256..258], &[0x08, 0x00]);
        assert_eq!(&raw[320..322], &[100, 0]);
        assert_eq!(&raw[386..388], &[0x34, 0x12]);
        assert_eq!((raw[512], raw[513]), (0x66, 0x44));
        assert_eq!(&raw[514..516], &[128, 0]);
        assert_eq!(&raw[516..520], &[0x00, 0x04, 0, 0]);
        assert_eq!(&raw[520..522], &[0x0C, 0x00]);
        assert_eq!(raw[525], 1);
        assert_eq!(&raw[536..540], &[0x01, 0x00, 0x30, 0x00]);
        assert_eq!(raw[540], 77);
        assert_eq!(&raw[768..791], b"nqn.2024-01.io.sluice:a");
        assert_eq!(raw[791], 0);
        assert_eq!(&raw[1792..1796], &[4, 1, 0, 0]);
        assert_eq!(raw[1796], 1);
        assert_eq!(raw[1803], 1);
        assert_eq!(raw[1804], 1);
        assert_eq!(&raw[2048..2050], &[0xC4, 0x09]);
        let back = IdentifyController::decode(&raw);
        assert_eq!(back, id);
        assert_eq!(back.subsystem_nqn_str(), Some("nqn.2024-01.io.sluice:a"));
    }
}

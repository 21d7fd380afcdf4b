//! Controller properties (the PCIe "controller registers") that a fabrics host reads
//! and writes with Property Get / Property Set: CAP, VS, CC and CSTS (NVMe Base 2.0,
//! "Controller Properties").
//!
//! Each register is a newtype over its raw integer with a getter per field and a
//! `with_*` builder, so that the target composes a value field by field and the host
//! side (and tests) can take one apart. The raw value stays public for the wire.

/// CAP: controller capabilities, property offset 00h, 8 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ControllerCapabilities(pub u64);

impl ControllerCapabilities {
    /// The raw property value as it travels in Property Get/Set.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// CSS bit 0 (CAP bit 37): the NVM command set.
    pub const COMMAND_SET_NVM: u8 = 1 << 0;
    /// CSS bit 6 (CAP bit 43): one or more I/O command sets, selected with
    /// CC.CSS = 110b and the I/O Command Set Profile feature.
    pub const COMMAND_SET_IO_COMMAND_SETS: u8 = 1 << 6;
    /// CSS bit 7 (CAP bit 44): no I/O command set (admin-only controller).
    pub const COMMAND_SET_NO_IO: u8 = 1 << 7;

    register_field!(
        /// MQES: maximum queue entries supported, bits 15:0, 0's based (so a value of
        /// 127 means 128 entries). Applies to every I/O queue.
        maximum_queue_entries_zero_based, with_maximum_queue_entries_zero_based, u64, u16, 0, 16
    );
    register_flag!(
        /// CQR: contiguous queues required, bit 16 (always set over fabrics).
        contiguous_queues_required, with_contiguous_queues_required, u64, 16
    );
    register_field!(
        /// AMS: arbitration mechanisms supported beyond round robin, bits 18:17.
        arbitration_mechanisms_supported, with_arbitration_mechanisms_supported, u64, u8, 17, 2
    );
    register_field!(
        /// TO: timeout, bits 31:24, in 500 ms units: the worst-case time the host
        /// waits for CSTS.RDY to follow CC.EN.
        timeout_500ms_units, with_timeout_500ms_units, u64, u8, 24, 8
    );
    register_field!(
        /// DSTRD: doorbell stride, bits 35:32 (0 over fabrics, no doorbells).
        doorbell_stride, with_doorbell_stride, u64, u8, 32, 4
    );
    register_flag!(
        /// NSSRS: NVM subsystem reset supported, bit 36.
        subsystem_reset_supported, with_subsystem_reset_supported, u64, 36
    );
    register_field!(
        /// CSS: command sets supported, bits 44:37 (see the `COMMAND_SET_*` bits).
        command_sets_supported, with_command_sets_supported, u64, u8, 37, 8
    );
    register_flag!(
        /// BPS: boot partition support, bit 45.
        boot_partition_support, with_boot_partition_support, u64, 45
    );
    register_field!(
        /// CPS: controller power scope, bits 47:46.
        controller_power_scope, with_controller_power_scope, u64, u8, 46, 2
    );
    register_field!(
        /// MPSMIN: memory page size minimum, bits 51:48, page size 2^(12 + MPSMIN).
        memory_page_size_minimum, with_memory_page_size_minimum, u64, u8, 48, 4
    );
    register_field!(
        /// MPSMAX: memory page size maximum, bits 55:52, page size 2^(12 + MPSMAX).
        memory_page_size_maximum, with_memory_page_size_maximum, u64, u8, 52, 4
    );
    register_flag!(
        /// PMRS: persistent memory region supported, bit 56.
        persistent_memory_region_supported, with_persistent_memory_region_supported, u64, 56
    );
    register_flag!(
        /// CMBS: controller memory buffer supported, bit 57.
        controller_memory_buffer_supported, with_controller_memory_buffer_supported, u64, 57
    );
    register_flag!(
        /// NSSS: NVM subsystem shutdown supported, bit 58.
        subsystem_shutdown_supported, with_subsystem_shutdown_supported, u64, 58
    );
    register_field!(
        /// CRMS: controller ready modes supported, bits 60:59 (bit 59 CRWMS ready
        /// with media, bit 60 CRIMS ready independent of media).
        controller_ready_modes_supported, with_controller_ready_modes_supported, u64, u8, 59, 2
    );

    /// Number of entries an I/O queue may have (MQES + 1).
    pub const fn maximum_queue_entries(self) -> u32 {
        self.maximum_queue_entries_zero_based() as u32 + 1
    }
}

/// VS: version, property offset 08h, 4 bytes (same layout as Identify VER).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32);

impl Version {
    /// The raw property value as it travels in Property Get/Set.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// NVMe 1.3.0.
    pub const V1_3_0: Version = Version::new(1, 3, 0);
    /// NVMe 1.4.0.
    pub const V1_4_0: Version = Version::new(1, 4, 0);
    /// NVMe 2.0.0.
    pub const V2_0_0: Version = Version::new(2, 0, 0);

    /// Builds MJR.MNR.TER.
    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Self {
        Self(((major as u32) << 16) | ((minor as u32) << 8) | tertiary as u32)
    }

    register_field!(
        /// MJR: major version, bits 31:16.
        major, with_major, u32, u16, 16, 16
    );
    register_field!(
        /// MNR: minor version, bits 15:8.
        minor, with_minor, u32, u8, 8, 8
    );
    register_field!(
        /// TER: tertiary version, bits 7:0.
        tertiary, with_tertiary, u32, u8, 0, 8
    );
}

/// CC: controller configuration, property offset 14h, 4 bytes. Written by the host
/// to enable (EN) and shut down (SHN) the controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ControllerConfiguration(pub u32);

impl ControllerConfiguration {
    /// The raw property value as it travels in Property Get/Set.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// CSS 000b: the NVM command set.
    pub const COMMAND_SET_NVM: u8 = 0b000;
    /// CSS 110b: all supported I/O command sets.
    pub const COMMAND_SET_ALL_IO: u8 = 0b110;
    /// CSS 111b: admin command set only.
    pub const COMMAND_SET_ADMIN_ONLY: u8 = 0b111;
    /// SHN 00b: no notification.
    pub const SHUTDOWN_NONE: u8 = 0b00;
    /// SHN 01b: normal shutdown notification.
    pub const SHUTDOWN_NORMAL: u8 = 0b01;
    /// SHN 10b: abrupt shutdown notification.
    pub const SHUTDOWN_ABRUPT: u8 = 0b10;

    register_flag!(
        /// EN: enable, bit 0.
        enable, with_enable, u32, 0
    );
    register_field!(
        /// CSS: I/O command set selected, bits 6:4.
        command_set_selected, with_command_set_selected, u32, u8, 4, 3
    );
    register_field!(
        /// MPS: memory page size, bits 10:7, page size 2^(12 + MPS).
        memory_page_size, with_memory_page_size, u32, u8, 7, 4
    );
    register_field!(
        /// AMS: arbitration mechanism selected, bits 13:11.
        arbitration_mechanism, with_arbitration_mechanism, u32, u8, 11, 3
    );
    register_field!(
        /// SHN: shutdown notification, bits 15:14 (`SHUTDOWN_*`).
        shutdown_notification, with_shutdown_notification, u32, u8, 14, 2
    );
    register_field!(
        /// IOSQES: I/O submission queue entry size, bits 19:16, log2 of bytes (6).
        io_submission_queue_entry_size, with_io_submission_queue_entry_size, u32, u8, 16, 4
    );
    register_field!(
        /// IOCQES: I/O completion queue entry size, bits 23:20, log2 of bytes (4).
        io_completion_queue_entry_size, with_io_completion_queue_entry_size, u32, u8, 20, 4
    );
    register_flag!(
        /// CRIME: controller ready independent of media enable, bit 24.
        ready_independent_of_media, with_ready_independent_of_media, u32, 24
    );
}

/// CSTS: controller status, property offset 1Ch, 4 bytes. Read-only for the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ControllerStatus(pub u32);

impl ControllerStatus {
    /// The raw property value as it travels in Property Get/Set.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// SHST 00b: normal operation, no shutdown requested.
    pub const SHUTDOWN_NORMAL_OPERATION: u8 = 0b00;
    /// SHST 01b: shutdown processing occurring.
    pub const SHUTDOWN_OCCURRING: u8 = 0b01;
    /// SHST 10b: shutdown processing complete.
    pub const SHUTDOWN_COMPLETE: u8 = 0b10;

    register_flag!(
        /// RDY: ready, bit 0; follows CC.EN once the controller can take commands.
        ready, with_ready, u32, 0
    );
    register_flag!(
        /// CFS: controller fatal status, bit 1.
        controller_fatal_status, with_controller_fatal_status, u32, 1
    );
    register_field!(
        /// SHST: shutdown status, bits 3:2 (`SHUTDOWN_*`).
        shutdown_status, with_shutdown_status, u32, u8, 2, 2
    );
    register_flag!(
        /// NSSRO: NVM subsystem reset occurred, bit 4.
        subsystem_reset_occurred, with_subsystem_reset_occurred, u32, 4
    );
    register_flag!(
        /// PP: processing paused, bit 5.
        processing_paused, with_processing_paused, u32, 5
    );
    register_flag!(
        /// ST: shutdown type, bit 6 (set when the shutdown is subsystem-wide).
        shutdown_type, with_shutdown_type, u32, 6
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn capabilities_bits_are_where_the_spec_puts_them() {
        let cap = ControllerCapabilities::default()
            .with_maximum_queue_entries_zero_based(127)
            .with_contiguous_queues_required(true)
            .with_timeout_500ms_units(30)
            .with_command_sets_supported(ControllerCapabilities::COMMAND_SET_NVM)
            .with_memory_page_size_minimum(0)
            .with_memory_page_size_maximum(4);
        assert_eq!(cap.0, 127 | (1 << 16) | (30 << 24) | (1 << 37) | (4 << 52));
        assert_eq!(cap.maximum_queue_entries(), 128);
        assert_eq!(
            ControllerCapabilities(1 << 43).command_sets_supported(),
            ControllerCapabilities::COMMAND_SET_IO_COMMAND_SETS
        );
        assert_eq!(ControllerCapabilities(1 << 44).command_sets_supported(), ControllerCapabilities::COMMAND_SET_NO_IO);
        assert_eq!(ControllerCapabilities(0b11 << 59).controller_ready_modes_supported(), 3);
        assert!(ControllerCapabilities(1 << 58).subsystem_shutdown_supported());
        assert_eq!(ControllerCapabilities(0xF << 32).doorbell_stride(), 0xF);
    }

    #[test]
    fn version_constants() {
        assert_eq!(Version::V2_0_0.0, 0x0002_0000);
        assert_eq!(Version::V1_4_0.0, 0x0001_0400);
        assert_eq!(Version(0x0001_0302).tertiary(), 2);
        assert_eq!(Version(0x0001_0302).minor(), 3);
        assert_eq!(Version(0x0001_0302).major(), 1);
    }

    #[test]
    fn configuration_and_status_bits() {
        // What Linux writes to enable: EN, IOSQES 6, IOCQES 4, MPS 0, CSS NVM.
        let cc = ControllerConfiguration(0x0046_0001);
        assert!(cc.enable());
        assert_eq!(cc.io_submission_queue_entry_size(), 6);
        assert_eq!(cc.io_completion_queue_entry_size(), 4);
        assert_eq!(cc.command_set_selected(), ControllerConfiguration::COMMAND_SET_NVM);
        let shutdown = cc.with_shutdown_notification(ControllerConfiguration::SHUTDOWN_NORMAL);
        assert_eq!(shutdown.0, 0x0046_4001);
        assert!(ControllerConfiguration(1 << 24).ready_independent_of_media());
        assert_eq!(ControllerConfiguration(0b110 << 4).command_set_selected(), 6);
        assert_eq!(ControllerConfiguration(0b111 << 11).arbitration_mechanism(), 7);
        assert_eq!(ControllerConfiguration(0xF << 7).memory_page_size(), 0xF);

        let csts =
            ControllerStatus::default().with_ready(true).with_shutdown_status(ControllerStatus::SHUTDOWN_COMPLETE);
        assert_eq!(csts.0, 0b1001);
        assert!(ControllerStatus(1 << 1).controller_fatal_status());
        assert!(ControllerStatus(1 << 4).subsystem_reset_occurred());
        assert!(ControllerStatus(1 << 5).processing_paused());
        assert!(ControllerStatus(1 << 6).shutdown_type());
    }

    proptest! {
        #[test]
        fn capability_fields_round_trip(raw in any::<u64>()) {
            let cap = ControllerCapabilities(raw);
            let rebuilt = ControllerCapabilities(raw & !0x1FFF_FFFF_FFFF_FFFF)
                .with_maximum_queue_entries_zero_based(cap.maximum_queue_entries_zero_based())
                .with_contiguous_queues_required(cap.contiguous_queues_required())
                .with_arbitration_mechanisms_supported(cap.arbitration_mechanisms_supported())
                .with_timeout_500ms_units(cap.timeout_500ms_units())
                .with_doorbell_stride(cap.doorbell_stride())
                .with_subsystem_reset_supported(cap.subsystem_reset_supported())
                .with_command_sets_supported(cap.command_sets_supported())
                .with_boot_partition_support(cap.boot_partition_support())
                .with_controller_power_scope(cap.controller_power_scope())
                .with_memory_page_size_minimum(cap.memory_page_size_minimum())
                .with_memory_page_size_maximum(cap.memory_page_size_maximum())
                .with_persistent_memory_region_supported(cap.persistent_memory_region_supported())
                .with_controller_memory_buffer_supported(cap.controller_memory_buffer_supported())
                .with_subsystem_shutdown_supported(cap.subsystem_shutdown_supported())
                .with_controller_ready_modes_supported(cap.controller_ready_modes_supported());
            // Reserved bits 23:19 stay as the raw value had them; everything else is
            // rebuilt from the getters.
            let reserved = 0x00F8_0000u64;
            prop_assert_eq!(rebuilt.0 | (raw & reserved), raw);
        }

        #[test]
        fn configuration_fields_round_trip(raw in any::<u32>()) {
            let cc = ControllerConfiguration(raw);
            let rebuilt = ControllerConfiguration(0)
                .with_enable(cc.enable())
                .with_command_set_selected(cc.command_set_selected())
                .with_memory_page_size(cc.memory_page_size())
                .with_arbitration_mechanism(cc.arbitration_mechanism())
                .with_shutdown_notification(cc.shutdown_notification())
                .with_io_submission_queue_entry_size(cc.io_submission_queue_entry_size())
                .with_io_completion_queue_entry_size(cc.io_completion_queue_entry_size())
                .with_ready_independent_of_media(cc.ready_independent_of_media());
            prop_assert_eq!(rebuilt.0, raw & 0x01FF_FFF1);
        }

        #[test]
        fn status_and_version_fields_round_trip(raw in any::<u32>()) {
            let csts = ControllerStatus(raw);
            let rebuilt = ControllerStatus(0)
                .with_ready(csts.ready())
                .with_controller_fatal_status(csts.controller_fatal_status())
                .with_shutdown_status(csts.shutdown_status())
                .with_subsystem_reset_occurred(csts.subsystem_reset_occurred())
                .with_processing_paused(csts.processing_paused())
                .with_shutdown_type(csts.shutdown_type());
            prop_assert_eq!(rebuilt.0, raw & 0x7F);
            let vs = Version(raw);
            prop_assert_eq!(Version::new(vs.major(), vs.minor(), vs.tertiary()), vs);
            prop_assert_eq!(Version(0).with_major(vs.major()).with_minor(vs.minor()).with_tertiary(vs.tertiary()), vs);
        }
    }
}

//! Identify (admin opcode 06h) data structures: what a host learns about the
//! controller and its namespaces before it issues any I/O (NVMe Base 2.0, "Identify
//! command", and the NVM Command Set 1.0 for the namespace structure).
//!
//! Every Identify data structure is 4096 bytes, whatever the CNS value. The
//! structures are split by kind:
//!
//! * [`IdentifyController`] (CNS 01h) in `controller`,
//! * [`IdentifyNamespace`] (CNS 00h) in `namespace`,
//! * the lists (active namespaces, namespace identification descriptors,
//!   controllers, I/O command set combinations) in `lists`.

mod controller;
mod lists;
mod namespace;

pub use controller::*;
pub use lists::*;
pub use namespace::*;

/// Size of every Identify data structure in bytes.
pub const IDENTIFY_DATA_BYTES: usize = 4096;

/// CNS: Controller or Namespace Structure, CDW10 bits 7:0, selects which data
/// structure an Identify command returns.
pub mod cns {
    /// Identify Namespace data structure for the NVM command set (NSID selects it).
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller data structure.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list: active NSIDs greater than the command's NSID.
    pub const ACTIVE_NAMESPACE_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list for the command's NSID.
    pub const NAMESPACE_DESCRIPTOR_LIST: u8 = 0x03;
    /// I/O Command Set specific Identify Namespace (CSI in CDW11 selects the set).
    pub const IO_COMMAND_SET_NAMESPACE: u8 = 0x05;
    /// I/O Command Set specific Identify Controller.
    pub const IO_COMMAND_SET_CONTROLLER: u8 = 0x06;
    /// Active Namespace ID list restricted to one I/O command set.
    pub const IO_COMMAND_SET_ACTIVE_NAMESPACE_LIST: u8 = 0x07;
    /// I/O Command Set Independent Identify Namespace.
    pub const IO_COMMAND_SET_INDEPENDENT_NAMESPACE: u8 = 0x08;
    /// Allocated Namespace ID list (namespace management).
    pub const ALLOCATED_NAMESPACE_LIST: u8 = 0x10;
    /// Identify Namespace for an allocated (possibly unattached) NSID.
    pub const ALLOCATED_NAMESPACE: u8 = 0x11;
    /// Controllers attached to the command's NSID.
    pub const NAMESPACE_ATTACHED_CONTROLLER_LIST: u8 = 0x12;
    /// Controllers in the NVM subsystem.
    pub const CONTROLLER_LIST: u8 = 0x13;
    /// I/O Command Set data structure: supported command set combinations.
    pub const IO_COMMAND_SET: u8 = 0x1C;
}

/// CSI: Command Set Identifier (Identify CDW11 bits 31:24, Get Log Page CDW14 bits
/// 31:24, namespace identification descriptor type 4).
pub mod csi {
    /// NVM Command Set (block storage).
    pub const NVM: u8 = 0x00;
    /// Key Value Command Set.
    pub const KEY_VALUE: u8 = 0x01;
    /// Zoned Namespace Command Set.
    pub const ZONED: u8 = 0x02;
}

//! Newtypes for the identifiers that travel in commands, so that a queue id cannot be
//! passed where a controller id is expected.

/// NSID: namespace identifier. 0 is "no namespace"; 0xFFFF_FFFF is the broadcast value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamespaceId(pub u32);

impl NamespaceId {
    /// The broadcast NSID, meaning "all namespaces" where a command allows it.
    pub const BROADCAST: NamespaceId = NamespaceId(0xFFFF_FFFF);
    /// NSID 0, "not used" by the command.
    pub const NONE: NamespaceId = NamespaceId(0);
}

/// CNTLID: controller identifier, unique within an NVM subsystem.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ControllerId(pub u16);

impl ControllerId {
    /// 0xFFFF in Connect data asks for the dynamic controller model (any controller).
    pub const DYNAMIC: ControllerId = ControllerId(0xFFFF);
    /// 0xFFFE in Connect data asks for the static model with any controller.
    pub const STATIC_ANY: ControllerId = ControllerId(0xFFFE);
    /// Highest valid controller id (0xFFF0..=0xFFFF are reserved).
    pub const MAX_VALID: u16 = 0xFFEF;
}

/// QID: queue identifier. 0 is the admin queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueId(pub u16);

impl QueueId {
    /// The admin queue.
    pub const ADMIN: QueueId = QueueId(0);

    /// True for the admin queue.
    pub fn is_admin(self) -> bool {
        self.0 == 0
    }
}

/// CID: command identifier, chosen by the host, unique among its outstanding commands
/// on one submission queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommandId(pub u16);

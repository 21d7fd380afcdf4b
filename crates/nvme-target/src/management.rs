//! Namespace Management (create, delete) and Namespace Attachment (attach, detach):
//! the subsystem operations, shared with the management API, and the admin commands.
//!
//! Each change holds the subsystem's change lock from reading the table to swapping
//! in the new one, persists to the pool table before the new table is visible (a
//! change the host saw succeed survives a restart), and then tells the controllers
//! whose view changed, which report a namespace attribute notice.
//!
//! The pool table save is a blocking file write, so the admin commands run the change
//! on the subsystem's service executor and hold the command until it is done (like a
//! reservation change waiting for its store): the I/O thread never waits for a disk.

use std::sync::Arc;

use nvme_spec::admin::{
    namespace_attachment_select, namespace_management_select, NamespaceAttachmentCommand, NamespaceManagementCommand,
};
use nvme_spec::identify::{csi, flbas, IDENTIFY_DATA_BYTES};
use nvme_spec::{ControllerId, IdentifyNamespace, NamespaceId, Status, SubmissionQueueEntry};
use storage::{NamespaceBinding, PoolError};

use crate::connection::Connection;
use crate::limits::MAX_NAMESPACE_ID;
use crate::namespaces::{Attachment, Namespace, NamespaceChange, PoolCarve, TableEntry};
use crate::outcome::Outcome;
use crate::slots::SlotState;
use crate::subsystem::{derive_identifier, NamespaceSpec, Subsystem};

/// Bytes of a controller list: a 2-byte count and up to 2047 2-byte CNTLIDs.
const CONTROLLER_LIST_MAX_ENTRIES: usize = 2047;
/// Bytes of the create data the handler reads: NSZE through NMIC (byte 30).
const CREATE_DATA_MIN_BYTES: usize = 32;

/// Why a namespace change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagementError {
    #[error("the subsystem has no pool, so namespaces cannot be created or deleted")]
    NoPool,
    #[error("no free namespace id (all {max} are allocated)")]
    NoFreeNamespaceId { max: u32 },
    #[error("namespace id {0} is already allocated")]
    NamespaceIdInUse(u32),
    #[error("namespace id {0} is not allocated")]
    NotAllocated(u32),
    #[error("namespace {0} comes from the configuration; change the configuration to remove or re-attach it")]
    ConfiguredNamespace(u32),
    #[error("the pool has not enough free space")]
    InsufficientCapacity,
    #[error("size of {0} blocks is not valid")]
    InvalidSize(u64),
    #[error("namespace {0} was created through Namespace Management; its attachment follows Namespace Attachment")]
    ManagedNamespace(u32),
    #[error("namespace {0} is already attached to that host")]
    AlreadyAttached(u32),
    #[error("namespace {0} is not attached to that host")]
    NotAttached(u32),
    #[error("pool: {0}")]
    Pool(String),
    #[error("ANA group {0} is outside 1..={max}", max = crate::limits::MAX_ANA_GROUP_ID)]
    InvalidAnaGroup(u32),
}

impl ManagementError {
    /// The NVMe status of a Namespace Management or Attachment command refused so.
    pub fn status(&self) -> Status {
        match self {
            ManagementError::NoPool => Status::INVALID_OPCODE.with_do_not_retry(),
            ManagementError::NoFreeNamespaceId { .. } | ManagementError::NamespaceIdInUse(_) => {
                Status::NAMESPACE_IDENTIFIER_UNAVAILABLE.with_do_not_retry()
            }
            ManagementError::NotAllocated(_) => Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry(),
            ManagementError::ConfiguredNamespace(_) | ManagementError::ManagedNamespace(_) => {
                Status::INVALID_FIELD.with_do_not_retry()
            }
            ManagementError::InsufficientCapacity => Status::NAMESPACE_INSUFFICIENT_CAPACITY.with_do_not_retry(),
            ManagementError::InvalidSize(_) | ManagementError::InvalidAnaGroup(_) => {
                Status::INVALID_FIELD.with_do_not_retry()
            }
            ManagementError::AlreadyAttached(_) => Status::NAMESPACE_ALREADY_ATTACHED.with_do_not_retry(),
            ManagementError::NotAttached(_) => Status::NAMESPACE_NOT_ATTACHED.with_do_not_retry(),
            // A table write failed: the change did not happen; the host may retry.
            ManagementError::Pool(_) => Status::INTERNAL_ERROR,
        }
    }
}

fn pool_error(error: PoolError) -> ManagementError {
    match error {
        PoolError::NoSpace => ManagementError::InsufficientCapacity,
        PoolError::InvalidSize(blocks) => ManagementError::InvalidSize(blocks),
        other => ManagementError::Pool(other.to_string()),
    }
}

impl Subsystem {
    /// Creates a namespace of `size_blocks` in the pool, unattached, with the lowest
    /// free NSID or `requested`.
    pub fn create_namespace(
        &self,
        size_blocks: u64,
        thin: bool,
        requested: Option<NamespaceId>,
    ) -> Result<NamespaceId, ManagementError> {
        let pool = self.pool.as_ref().ok_or(ManagementError::NoPool)?;
        let _change = self.lock_changes();
        let mut table = (*self.table()).clone();
        let id = match requested {
            Some(id) if id.0 == 0 || id.0 > MAX_NAMESPACE_ID => return Err(ManagementError::NotAllocated(id.0)),
            Some(id) if table.contains(id) => return Err(ManagementError::NamespaceIdInUse(id.0)),
            Some(id) => id,
            None => table
                .lowest_free_id(MAX_NAMESPACE_ID)
                .ok_or(ManagementError::NoFreeNamespaceId { max: MAX_NAMESPACE_ID })?,
        };
        let binding = NamespaceBinding {
            subsystem_nqn: self.nqn.clone(),
            namespace_id: id.0,
            all_hosts: false,
            hosts: Vec::new(),
        };
        let carve_id = pool.create_bound(size_blocks, thin, Some(binding)).map_err(pool_error)?;
        let record = pool.record(carve_id).map_err(pool_error)?;
        let backend = pool.get(carve_id).map_err(pool_error)?;
        let carve = PoolCarve { pool: Arc::clone(pool), id: carve_id, thin };
        let namespace = Namespace::new(id, backend, record.nguid, record.uuid, Some(carve));
        table.insert(TableEntry {
            namespace: Arc::new(namespace),
            attachment: Attachment::Hosts(Vec::new()),
            managed: true,
        });
        self.replace_table(table);
        tracing::info!(subsystem = %self.nqn, nsid = id.0, size_blocks, thin, "namespace created");
        Ok(id)
    }

    /// Deletes a namespace created in the pool. Hosts it was attached to lose it now;
    /// its space returns to the pool once no queue holds it.
    pub fn delete_namespace(&self, id: NamespaceId) -> Result<NamespaceChange, ManagementError> {
        let pool = self.pool.as_ref().ok_or(ManagementError::NoPool)?;
        let _change = self.lock_changes();
        let mut table = (*self.table()).clone();
        let entry = table.get(id).ok_or(ManagementError::NotAllocated(id.0))?;
        let Some(carve) = entry.namespace.carve.as_ref().filter(|_| entry.managed) else {
            return Err(ManagementError::ConfiguredNamespace(id.0));
        };
        // Unbind first (persisted): after a stop or crash from here on the carve is an
        // orphan that the next start frees (`Subsystem::new`), never a namespace that
        // comes back.
        pool.set_binding(carve.id, None).map_err(pool_error)?;
        let entry = table.remove(id).ok_or(ManagementError::NotAllocated(id.0))?;
        entry.namespace.mark_deleted();
        self.replace_table(table);
        tracing::info!(subsystem = %self.nqn, nsid = id.0, "namespace deleted");
        Ok(NamespaceChange { namespace_id: id, hosts: entry.attachment })
    }

    /// Adds a namespace over any backend, attached to every host (the management
    /// API's "ns add"; the config's namespaces are added the same way at start).
    pub fn add_namespace(&self, spec: NamespaceSpec) -> Result<NamespaceChange, ManagementError> {
        self.add_namespace_attached(spec, Attachment::AllHosts)
    }

    /// Adds a namespace over any backend, attached as the configuration says, in
    /// one table swap: a namespace limited to some hosts is never seen by others,
    /// not even for a moment.
    pub fn add_namespace_attached(
        &self,
        spec: NamespaceSpec,
        attachment: Attachment,
    ) -> Result<NamespaceChange, ManagementError> {
        let id = spec.id;
        if id.0 == 0 || id.0 > MAX_NAMESPACE_ID {
            return Err(ManagementError::NotAllocated(id.0));
        }
        if let Some(group) = spec.ana_group.filter(|group| !crate::ana::valid_group(*group)) {
            return Err(ManagementError::InvalidAnaGroup(group.0));
        }
        let _change = self.lock_changes();
        let mut table = (*self.table()).clone();
        if table.contains(id) {
            return Err(ManagementError::NamespaceIdInUse(id.0));
        }
        let namespace = Namespace::new(
            id,
            spec.backend,
            spec.nguid.unwrap_or_else(|| derive_identifier(&self.nqn, id.0, b"nguid")),
            spec.uuid.unwrap_or_else(|| derive_identifier(&self.nqn, id.0, b"uuid")),
            None,
        )
        .in_ana_group(spec.ana_group.unwrap_or(crate::ana::DEFAULT_ANA_GROUP));
        table.insert(TableEntry { namespace: Arc::new(namespace), attachment: attachment.clone(), managed: false });
        self.replace_table(table);
        tracing::info!(subsystem = %self.nqn, nsid = id.0, ?attachment, "namespace added");
        Ok(NamespaceChange { namespace_id: id, hosts: attachment })
    }

    /// Serves the carve of this subsystem's pool that is bound to `id`, attached as its
    /// binding says: a pool namespace the config adds while the target runs (at start,
    /// `Subsystem::new` loads every bound carve). Like a namespace Namespace Management
    /// created, removing it deletes the carve. `configured` replaces the binding's
    /// attachment (a host list from the configuration; the pool table keeps the
    /// configured carve bound to all hosts).
    pub fn add_bound_carve(
        &self,
        id: NamespaceId,
        configured: Option<Attachment>,
    ) -> Result<NamespaceChange, ManagementError> {
        let pool = self.pool.as_ref().ok_or(ManagementError::NoPool)?;
        let _change = self.lock_changes();
        let mut table = (*self.table()).clone();
        if table.contains(id) {
            return Err(ManagementError::NamespaceIdInUse(id.0));
        }
        let (record, binding) = pool
            .records()
            .into_iter()
            .find_map(|record| {
                let binding = record
                    .binding
                    .clone()
                    .filter(|binding| binding.subsystem_nqn == self.nqn && binding.namespace_id == id.0)?;
                Some((record, binding))
            })
            .ok_or(ManagementError::NotAllocated(id.0))?;
        let backend = pool.get(record.id).map_err(pool_error)?;
        let managed = !binding.all_hosts;
        let stored = if binding.all_hosts { Attachment::AllHosts } else { Attachment::Hosts(binding.hosts) };
        let attachment = configured.filter(|_| !managed).unwrap_or(stored);
        let carve = PoolCarve { pool: Arc::clone(pool), id: record.id, thin: record.thin };
        let namespace = Namespace::new(id, backend, record.nguid, record.uuid, Some(carve));
        table.insert(TableEntry { namespace: Arc::new(namespace), attachment: attachment.clone(), managed });
        self.replace_table(table);
        tracing::info!(subsystem = %self.nqn, nsid = id.0, carve = record.id.0, "pool namespace added");
        Ok(NamespaceChange { namespace_id: id, hosts: attachment })
    }

    /// Removes any namespace (the management API's "ns remove"). A namespace carved
    /// from this subsystem's pool is deleted, its space returned; any other backend is
    /// only let go (its file or device keeps the data).
    pub fn remove_namespace(&self, id: NamespaceId) -> Result<NamespaceChange, ManagementError> {
        let _change = self.lock_changes();
        let mut table = (*self.table()).clone();
        let entry = table.get(id).ok_or(ManagementError::NotAllocated(id.0))?;
        if let Some(carve) = &entry.namespace.carve {
            carve.pool.set_binding(carve.id, None).map_err(pool_error)?;
            entry.namespace.mark_deleted();
        }
        let entry = table.remove(id).ok_or(ManagementError::NotAllocated(id.0))?;
        self.replace_table(table);
        tracing::info!(subsystem = %self.nqn, nsid = id.0, "namespace removed");
        Ok(NamespaceChange { namespace_id: id, hosts: entry.attachment })
    }

    /// Namespaces Namespace Management may delete (broadcast delete).
    pub fn managed_namespace_ids(&self) -> Vec<NamespaceId> {
        self.table()
            .entries()
            .filter(|entry| entry.namespace.carve.is_some() && entry.managed)
            .map(|entry| entry.namespace.id)
            .collect()
    }

    /// Attaches (`attach`) or detaches a namespace to or from the controllers of
    /// `hosts`. All or nothing: one host already in the wanted state refuses the lot.
    pub fn change_attachment(
        &self,
        id: NamespaceId,
        hosts: &[String],
        attach: bool,
    ) -> Result<NamespaceChange, ManagementError> {
        let pool = self.pool.as_ref().ok_or(ManagementError::NoPool)?;
        let _change = self.lock_changes();
        let mut table = (*self.table()).clone();
        let entry = table.get(id).ok_or(ManagementError::NotAllocated(id.0))?;
        let (Some(carve), Attachment::Hosts(current), true) =
            (&entry.namespace.carve, &entry.attachment, entry.managed)
        else {
            return Err(if attach && entry.attachment == Attachment::AllHosts {
                ManagementError::AlreadyAttached(id.0)
            } else {
                ManagementError::ConfiguredNamespace(id.0)
            });
        };
        let mut updated = current.clone();
        for host in hosts {
            let present = updated.contains(host);
            match (attach, present) {
                (true, true) => return Err(ManagementError::AlreadyAttached(id.0)),
                (false, false) => return Err(ManagementError::NotAttached(id.0)),
                (true, false) => updated.push(host.clone()),
                (false, true) => updated.retain(|existing| existing != host),
            }
        }
        let binding = NamespaceBinding {
            subsystem_nqn: self.nqn.clone(),
            namespace_id: id.0,
            all_hosts: false,
            hosts: updated.clone(),
        };
        pool.set_binding(carve.id, Some(binding)).map_err(pool_error)?;
        let namespace = Arc::clone(&entry.namespace);
        table.insert(TableEntry { namespace, attachment: Attachment::Hosts(updated), managed: true });
        self.replace_table(table);
        tracing::info!(subsystem = %self.nqn, nsid = id.0, ?hosts, attach, "namespace attachment changed");
        Ok(NamespaceChange { namespace_id: id, hosts: Attachment::Hosts(hosts.to_vec()) })
    }

    /// Sets the attachment of a namespace the configuration declared (every host,
    /// or a list of hosts, possibly empty: no host). `Ok(None)` when it already was;
    /// otherwise the change names the hosts whose view changed, for the Namespace
    /// Attribute Changed notice. A namespace a host created through Namespace
    /// Management is refused: its attachment follows Namespace Attachment.
    pub fn set_configured_attachment(
        &self,
        id: NamespaceId,
        attachment: Attachment,
    ) -> Result<Option<NamespaceChange>, ManagementError> {
        let _change = self.lock_changes();
        let mut table = (*self.table()).clone();
        let entry = table.get(id).ok_or(ManagementError::NotAllocated(id.0))?;
        if entry.managed {
            return Err(ManagementError::ManagedNamespace(id.0));
        }
        if entry.attachment == attachment {
            return Ok(None);
        }
        let changed = match (&entry.attachment, &attachment) {
            (Attachment::Hosts(before), Attachment::Hosts(after)) => Attachment::Hosts(
                before
                    .iter()
                    .filter(|host| !after.contains(host))
                    .chain(after.iter().filter(|host| !before.contains(host)))
                    .cloned()
                    .collect(),
            ),
            // From or to every host: any connected host may have gained or lost it.
            _ => Attachment::AllHosts,
        };
        let namespace = Arc::clone(&entry.namespace);
        table.insert(TableEntry { namespace, attachment: attachment.clone(), managed: false });
        self.replace_table(table);
        tracing::info!(subsystem = %self.nqn, nsid = id.0, ?attachment, "namespace attachment configured");
        Ok(Some(NamespaceChange { namespace_id: id, hosts: changed }))
    }
}

impl Connection {
    /// Namespace Management (0Dh).
    pub(crate) fn admin_namespace_management(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        let Some(subsystem) = self.bound_subsystem() else {
            return Outcome::status(Status::INVALID_OPCODE.with_do_not_retry());
        };
        if !subsystem.supports_namespace_management() {
            return Outcome::status(Status::INVALID_OPCODE.with_do_not_retry());
        }
        let command = NamespaceManagementCommand::decode(sqe);
        match command.select {
            namespace_management_select::CREATE => {
                if command.command_set_identifier != csi::NVM {
                    return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
                }
                let slot = self.slots.slot(slot_index);
                let length = (slot.host_data_bytes as usize).min(slot.buffer.len());
                if length < CREATE_DATA_MIN_BYTES {
                    return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
                }
                // The first `length` bytes (at most one structure); the rest stays zero.
                let mut raw = [0u8; IDENTIFY_DATA_BYTES];
                for (byte, sent) in raw.iter_mut().zip(slot.buffer.iter().take(length)) {
                    *byte = *sent;
                }
                let request = IdentifyNamespace::decode(&raw);
                let size_blocks = request.namespace_size;
                let capacity_blocks = request.namespace_capacity;
                if size_blocks == 0 || capacity_blocks == 0 || capacity_blocks > size_blocks {
                    return Outcome::status(Status::INVALID_FIELD.with_do_not_retry());
                }
                // One LBA format (index 0, the pool's block size), no metadata, no
                // protection information.
                let format_index = (request.formatted_lba_size & flbas::INDEX_LOW_MASK)
                    | ((request.formatted_lba_size & flbas::INDEX_HIGH_MASK) >> 1);
                if format_index != 0
                    || request.formatted_lba_size & flbas::EXTENDED_METADATA != 0
                    || request.protection_settings != 0
                {
                    return Outcome::status(Status::INVALID_FORMAT.with_do_not_retry());
                }
                // NCAP below NSZE asks for thin provisioning: space on first write.
                let thin = capacity_blocks < size_blocks;
                let peer = self.peer.clone();
                self.hold_for_service(slot_index, &subsystem, move |subsystem, _target| {
                    match subsystem.create_namespace(size_blocks, thin, None) {
                        Ok(id) => (Status::SUCCESS, u64::from(id.0)),
                        Err(error) => {
                            tracing::info!(%peer, %error, "Namespace Management create refused");
                            (error.status(), 0)
                        }
                    }
                })
            }
            namespace_management_select::DELETE => {
                let ids = if command.namespace_id == NamespaceId::BROADCAST {
                    subsystem.managed_namespace_ids()
                } else {
                    vec![command.namespace_id]
                };
                let peer = self.peer.clone();
                self.hold_for_service(slot_index, &subsystem, move |subsystem, target| {
                    for id in ids {
                        match subsystem.delete_namespace(id) {
                            Ok(change) => target.notify_namespace_change(subsystem, &change),
                            Err(error) => {
                                tracing::info!(%peer, %error, "Namespace Management delete refused");
                                return (error.status(), 0);
                            }
                        }
                    }
                    (Status::SUCCESS, 0)
                })
            }
            _ => Outcome::status(Status::INVALID_FIELD.with_do_not_retry()),
        }
    }

    /// Namespace Attachment (15h): the data is a controller list of this subsystem.
    pub(crate) fn admin_namespace_attachment(&mut self, slot_index: u16, sqe: &SubmissionQueueEntry) -> Outcome {
        let Some(subsystem) = self.bound_subsystem() else {
            return Outcome::status(Status::INVALID_OPCODE.with_do_not_retry());
        };
        if !subsystem.supports_namespace_management() {
            return Outcome::status(Status::INVALID_OPCODE.with_do_not_retry());
        }
        let command = NamespaceAttachmentCommand::decode(sqe);
        let attach = match command.select {
            namespace_attachment_select::ATTACH => true,
            namespace_attachment_select::DETACH => false,
            _ => return Outcome::status(Status::INVALID_FIELD.with_do_not_retry()),
        };
        if command.namespace_id.0 == 0 || command.namespace_id.0 > MAX_NAMESPACE_ID {
            return Outcome::status(Status::INVALID_NAMESPACE_OR_FORMAT.with_do_not_retry());
        }
        let controller_ids = match self.controller_list(slot_index) {
            Ok(ids) => ids,
            Err(status) => return Outcome::status(status),
        };
        let mut hosts: Vec<String> = Vec::with_capacity(controller_ids.len());
        for id in controller_ids {
            let Some(controller) = self.target.controller(subsystem.index, id) else {
                return Outcome::status(Status::CONTROLLER_LIST_INVALID.with_do_not_retry());
            };
            if !hosts.contains(&controller.host_nqn) {
                hosts.push(controller.host_nqn.clone());
            }
        }
        let peer = self.peer.clone();
        let namespace_id = command.namespace_id;
        self.hold_for_service(slot_index, &subsystem, move |subsystem, target| {
            match subsystem.change_attachment(namespace_id, &hosts, attach) {
                Ok(change) => {
                    target.notify_namespace_change(subsystem, &change);
                    (Status::SUCCESS, 0)
                }
                Err(error) => {
                    tracing::info!(%peer, %error, attach, "Namespace Attachment refused");
                    (error.status(), 0)
                }
            }
        })
    }

    /// Runs `change` (which saves the pool table) on the subsystem's service executor
    /// and holds the command until it returns its status and DW0; an executor that
    /// ran it at once answers now.
    fn hold_for_service<F>(&mut self, slot_index: u16, subsystem: &Arc<Subsystem>, change: F) -> Outcome
    where
        F: FnOnce(&Subsystem, &crate::target::Target) -> (Status, u64) + Send + 'static,
    {
        let ticket = storage::service::Ticket::new(self.storage.waker().cloned());
        let done = ticket.clone();
        let (job_subsystem, target) = (Arc::clone(subsystem), Arc::clone(&self.target));
        subsystem.service_executor().execute(Box::new(move || {
            // A bug in the change must still answer the command, not hold it forever.
            let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| change(&job_subsystem, &target)));
            done.finish(answer.unwrap_or_else(|_| {
                tracing::error!(subsystem = %job_subsystem.nqn, "a namespace change panicked; answered Internal Error");
                (Status::INTERNAL_ERROR, 0)
            }));
        }));
        if let Some((status, result)) = ticket.take() {
            return Outcome::Done(status, result);
        }
        self.slots.slot(slot_index).state = SlotState::HeldPersist;
        self.held_tickets.push((slot_index, crate::outcome::HeldTicket::Management(ticket)));
        Outcome::Pending
    }

    /// The controller list in a command's data: a count, then that many CNTLIDs.
    fn controller_list(&mut self, slot_index: u16) -> Result<Vec<ControllerId>, Status> {
        let slot = self.slots.slot(slot_index);
        // The host's data: its first `host_data_bytes`, or all the buffer holds.
        let data = slot.buffer.get(..slot.host_data_bytes as usize).unwrap_or(&slot.buffer);
        let Some(count_bytes) = data.first_chunk::<2>() else {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        };
        let count = usize::from(u16::from_le_bytes(*count_bytes));
        if count == 0 || count > CONTROLLER_LIST_MAX_ENTRIES {
            return Err(Status::CONTROLLER_LIST_INVALID.with_do_not_retry());
        }
        let Some(entries) = data.get(2..2 + count * 2) else {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_do_not_retry());
        };
        Ok(entries.chunks_exact(2).map(|raw| ControllerId(nvme_spec::bytes::get_u16(raw, 0))).collect())
    }

    /// The subsystem of this connection's controller.
    pub(crate) fn bound_subsystem(&self) -> Option<Arc<Subsystem>> {
        self.binding.as_ref().and_then(|binding| binding.controller.subsystem.clone())
    }
}

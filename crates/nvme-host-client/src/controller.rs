//! The controller: admin commands, the supervisor thread (keep-alive, events,
//! reconnect), convenience blocking I/O and handing out I/O queues.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvme_host::{commands, HostCommand, HostCompletion, HostError};
use nvme_spec::admin::{async_event_notice, async_event_type, AsynchronousEventCompletion};
use nvme_spec::ana::{AnaLog, AnaState};
use nvme_spec::identify::cmic;
use nvme_spec::identify::{cns, csi, decode_namespace_descriptors, decode_namespace_list, NAMESPACE_LIST_CAPACITY};
use nvme_spec::log_page::{log_id, SmartHealthLog, CHANGED_NAMESPACE_LIST_BYTES, SMART_HEALTH_LOG_BYTES};
use nvme_spec::opcode::AdminOpcode;
use nvme_spec::registers::{ControllerCapabilities, Version};
use nvme_spec::{ControllerId, IdentifyController, IdentifyNamespace, NamespaceDescriptor, NamespaceId};

use crate::admin::{check_admin, establish, identify_data, shut_down, Association, ASYNC_EVENT_TAG};
use crate::io_queue::{IoQueue, IoQueueInner};
use crate::shared::MAX_ACTIVE_NAMESPACES;
use crate::shared::{lock, AdminLink, AssociationState, LinkStatus, Shared, MAX_COMMAND_RESENDS};
use crate::{ClientError, ConnectOptions};

/// Longest `disconnect` (or a drop) waits for the supervisor thread to stop. It
/// stops at once unless it is inside a reconnect attempt, which a target that does
/// not answer stretches to the connect timeout; then it is left to end by itself,
/// so that closing a controller is never held up by the target.
const SUPERVISOR_STOP_WAIT: Duration = Duration::from_millis(200);

/// Namespaces whose block size `connect` reads ahead (one Identify Namespace
/// each); the others are identified when first used. One list page: the admin
/// round trips of a connect stay bounded whatever the target lists.
const NAMESPACES_IDENTIFIED_AT_CONNECT: usize = NAMESPACE_LIST_CAPACITY;

/// A connected NVMe controller. `Send + Sync`: admin commands from any thread are
/// serialised on the admin queue; I/O goes through [`IoQueue`]s or the convenience
/// methods. Dropping it closes every connection (without a shutdown notification;
/// use [`Controller::disconnect`] for a clean one).
#[derive(Debug)]
pub struct Controller {
    shared: Arc<Shared>,
    identify: IdentifyController,
    capabilities: ControllerCapabilities,
    version: Version,
    supervisor: Option<JoinHandle<()>>,
}

fn association_state(epoch: u64, association: &Association) -> AssociationState {
    AssociationState {
        epoch,
        status: LinkStatus::Live,
        controller_id: association.controller_id,
        io_queue_count: association.io_queue_count,
        io_queue_size: association.io_queue_size,
        io_in_capsule_data_bytes: association.io_in_capsule_data_bytes,
        max_transfer_bytes: association.max_transfer_bytes,
    }
}

impl Controller {
    /// Connects the admin queue, enables the controller, identifies it, asks for
    /// `options.io_queues` I/O queues and connects them (one TCP connection each),
    /// arms an Asynchronous Event Request and starts the keep-alive thread.
    pub fn connect(options: ConnectOptions) -> Result<Controller, ClientError> {
        if options.subsystem_nqn.is_empty() || options.subsystem_nqn.len() > 223 {
            return Err(ClientError::InvalidArgument("subsystem NQN must be 1..=223 bytes".into()));
        }
        let association =
            establish(&options, options.address, &options.subsystem_nqn, options.keep_alive_timeout_ms, true)?;
        let state = association_state(1, &association);
        let identify = association.identify;
        let (capabilities, version) = (association.capabilities, association.version);
        let admin = AdminLink { connection: Some(association.connection), ..AdminLink::default() };
        let shared = Arc::new(Shared::new(options, state, admin, state.io_queue_count));
        *lock(&shared.generated_tls) = association.generated_tls;
        for index in 0..state.io_queue_count {
            let inner = IoQueueInner::connect(&shared, index)?;
            *lock(&shared.io_slots[index]) = Some(inner);
        }
        let supervisor_shared = Arc::clone(&shared);
        let supervisor = std::thread::Builder::new()
            .name(format!("nvme-host-{}", identify.controller_id.0))
            .spawn(move || supervise(&supervisor_shared))
            .map_err(|error| ClientError::InvalidArgument(format!("cannot start the keep-alive thread: {error}")))?;
        let controller = Controller { shared, identify, capabilities, version, supervisor: Some(supervisor) };
        controller.prefetch_block_sizes();
        Ok(controller)
    }

    /// Reads the block sizes of the first active namespaces ahead, for
    /// [`IoQueue::block_size`]. Only a prefetch: no command is sent again, the first
    /// failure ends it, and so does the connect timeout (a target answering each
    /// command just in time cannot stretch a connect); namespaces left out are
    /// identified when first used.
    fn prefetch_block_sizes(&self) {
        let until = Instant::now() + self.shared.options.connect_timeout;
        let Ok(namespaces) = self.list_active_namespaces(0) else { return };
        for nsid in namespaces.into_iter().take(NAMESPACES_IDENTIFIED_AT_CONNECT) {
            if Instant::now() >= until {
                tracing::info!(nsid = nsid.0, "block sizes from here on are read when first used");
                return;
            }
            let command = commands::identify(cns::NAMESPACE, nsid, csi::NVM);
            let identify = admin_command(&self.shared, command, 0)
                .and_then(|completion| check_admin(AdminOpcode::Identify as u8, completion))
                .and_then(|completion| Ok(IdentifyNamespace::decode(identify_data(&completion)?)));
            match identify {
                Ok(identify) => self.shared.cache_block_size(nsid, namespace_block_size(&identify)),
                Err(error) => {
                    tracing::warn!(nsid = nsid.0, %error, "cannot identify namespace");
                    return;
                }
            }
        }
    }

    /// CNTLID of the current association (changes when the controller reconnects).
    pub fn controller_id(&self) -> ControllerId {
        self.shared.snapshot().controller_id
    }

    /// How many times the association was rebuilt since `connect`.
    pub fn reconnect_count(&self) -> u64 {
        self.shared.snapshot().epoch - 1
    }

    /// How the last association ended (the failure that made the host reconnect,
    /// as the host saw it: what the target did, or that it did not answer), `None`
    /// while it never failed.
    pub fn last_failure(&self) -> Option<HostError> {
        lock(&self.shared.failures).cause.clone()
    }

    /// Identify Controller data from the initial connect.
    pub fn identify(&self) -> &IdentifyController {
        &self.identify
    }

    /// CAP as read at the initial connect.
    pub fn capabilities(&self) -> ControllerCapabilities {
        self.capabilities
    }

    /// VS as read at the initial connect.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Number of I/O queues granted.
    pub fn io_queue_count(&self) -> usize {
        self.shared.io_slots.len()
    }

    /// Largest transfer of one command in bytes (MDTS).
    pub fn max_transfer_bytes(&self) -> u32 {
        self.shared.snapshot().max_transfer_bytes
    }

    /// Runs one admin command and waits for it (at most the command timeout once
    /// sent; across a reconnect, until the controller is back or lost). An error
    /// status is returned as a completion, not an error: check `cqe.status`.
    pub fn admin_command(&self, command: HostCommand) -> Result<HostCompletion, ClientError> {
        admin_command(&self.shared, command, MAX_COMMAND_RESENDS)
    }

    fn admin_checked(&self, command: HostCommand) -> Result<HostCompletion, ClientError> {
        let opcode = command.sqe.opcode();
        check_admin(opcode, self.admin_command(command)?)
    }

    /// Identify Controller, fresh.
    pub fn identify_controller(&self) -> Result<IdentifyController, ClientError> {
        let completion = self.admin_checked(commands::identify(cns::CONTROLLER, NamespaceId::NONE, csi::NVM))?;
        Ok(IdentifyController::decode(identify_data(&completion)?))
    }

    /// Identify Namespace (NVM command set) of `nsid`.
    pub fn identify_namespace(&self, nsid: NamespaceId) -> Result<IdentifyNamespace, ClientError> {
        let completion = self.admin_checked(commands::identify(cns::NAMESPACE, nsid, csi::NVM))?;
        Ok(IdentifyNamespace::decode(identify_data(&completion)?))
    }

    /// Every active NSID, paging through the Active Namespace ID list (CNS 02h).
    /// The list is checked as the spec defines it: each page ascends, past the NSID
    /// asked for, and names no NSID above NN (Identify Controller), so the pages
    /// end by NN / 1024 + 1; and the whole list stops at [`MAX_ACTIVE_NAMESPACES`].
    /// A list that breaks a rule is the target's fault, named in the error.
    pub fn active_namespaces(&self) -> Result<Vec<NamespaceId>, ClientError> {
        self.list_active_namespaces(MAX_COMMAND_RESENDS)
    }

    /// [`Controller::active_namespaces`], each page sent again at most
    /// `max_resends` times.
    fn list_active_namespaces(&self, max_resends: u8) -> Result<Vec<NamespaceId>, ClientError> {
        let highest = self.identify.number_of_namespaces;
        let mut namespaces = Vec::new();
        let mut after = NamespaceId::NONE;
        loop {
            let command = commands::identify(cns::ACTIVE_NAMESPACE_LIST, after, csi::NVM);
            let completion = check_admin(command.sqe.opcode(), admin_command(&self.shared, command, max_resends)?)?;
            let page: Vec<NamespaceId> = decode_namespace_list(identify_data(&completion)?).collect();
            let mut previous = after;
            for nsid in &page {
                let problem = if nsid.0 <= previous.0 {
                    Some(format!("NSID {} does not ascend past {}", nsid.0, previous.0))
                } else if *nsid == NamespaceId::BROADCAST {
                    Some("it names the broadcast NSID FFFFFFFFh".to_string())
                } else if nsid.0 > highest {
                    Some(format!("NSID {} is above the highest NSID the controller reports (NN {highest})", nsid.0))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    return Err(ClientError::InvalidController(format!(
                        "the target's Active Namespace ID list (Identify CNS 02h after NSID {}) is invalid: {problem}",
                        after.0
                    )));
                }
                previous = *nsid;
            }
            if namespaces.len() + page.len() > MAX_ACTIVE_NAMESPACES {
                return Err(ClientError::InvalidController(format!(
                    "the target lists more than {MAX_ACTIVE_NAMESPACES} active namespaces (NN {highest}), more than \
                     this host handles"
                )));
            }
            let full = page.len() == NAMESPACE_LIST_CAPACITY;
            namespaces.extend(page);
            match namespaces.last() {
                // An NSID of FFFFFFFEh or more cannot be asked after.
                Some(last) if full && last.0 < highest && last.0 < NamespaceId::BROADCAST.0 - 1 => after = *last,
                _ => return Ok(namespaces),
            }
        }
    }

    /// Namespace Identification Descriptors (CNS 03h) of `nsid`.
    pub fn namespace_descriptors(&self, nsid: NamespaceId) -> Result<Vec<NamespaceDescriptor>, ClientError> {
        let completion = self.admin_checked(commands::identify(cns::NAMESPACE_DESCRIPTOR_LIST, nsid, csi::NVM))?;
        Ok(decode_namespace_descriptors(identify_data(&completion)?).collect())
    }

    /// `length` bytes of log `log_id` from `offset`, in pieces of at most MDTS.
    pub fn get_log_page(
        &self,
        log_id: u8,
        nsid: NamespaceId,
        offset: u64,
        length: u32,
    ) -> Result<Vec<u8>, ClientError> {
        if !offset.is_multiple_of(4) {
            return Err(ClientError::InvalidArgument("log page offset must be a multiple of 4".into()));
        }
        let chunk_bytes = self.max_transfer_bytes().max(4096) & !3;
        let mut data = Vec::with_capacity(length as usize);
        while (data.len() as u32) < length {
            let piece = (length - data.len() as u32).min(chunk_bytes);
            let completion =
                self.admin_checked(commands::get_log_page(log_id, nsid, offset + data.len() as u64, piece))?;
            let take = (piece as usize).min(completion.data.len());
            data.extend_from_slice(&completion.data[..take]);
            if take < piece as usize {
                break;
            }
        }
        Ok(data)
    }

    /// The whole Asymmetric Namespace Access log (0Ch) of this controller, sized
    /// from its Identify data: header, one descriptor per group (NANAGRPID), one
    /// NSID per namespace (MNAN, else NN). Refused when it reports no ANA (CMIC
    /// bit 3 clear).
    pub fn ana_log(&self) -> Result<AnaLog, ClientError> {
        if self.identify.multipath_capabilities & cmic::ANA_REPORTING == 0 {
            return Err(ClientError::InvalidController("the controller does not report ANA (CMIC bit 3 clear)".into()));
        }
        let data = self.get_log_page(
            log_id::ASYMMETRIC_NAMESPACE_ACCESS,
            NamespaceId::BROADCAST,
            0,
            ana_log_length(&self.identify),
        )?;
        let log =
            AnaLog::decode(&data).map_err(|error| ClientError::InvalidController(format!("bad ANA log: {error}")))?;
        check_ana_log(&log, &self.identify)
            .map_err(|problem| ClientError::InvalidController(format!("bad ANA log: {problem}")))?;
        Ok(log)
    }

    /// The ANA state of `nsid` on this controller (this path): its group's state in
    /// the ANA log. `None` when the controller does not report ANA; an active
    /// namespace missing from every group is reported inaccessible.
    pub fn ana_state(&self, nsid: NamespaceId) -> Result<Option<AnaState>, ClientError> {
        if self.identify.multipath_capabilities & cmic::ANA_REPORTING == 0 {
            return Ok(None);
        }
        let log = self.ana_log()?;
        let state =
            log.groups.iter().find(|group| group.namespaces.contains(&nsid)).map(|group| group.descriptor.state);
        Ok(Some(state.unwrap_or(AnaState::Inaccessible)))
    }

    /// SMART / Health Information (log 02h) for the whole controller.
    pub fn smart_log(&self) -> Result<SmartHealthLog, ClientError> {
        let data = self.get_log_page(log_id::SMART_HEALTH, NamespaceId::BROADCAST, 0, SMART_HEALTH_LOG_BYTES as u32)?;
        let raw: &[u8; SMART_HEALTH_LOG_BYTES] =
            data.as_slice().try_into().map_err(|_| ClientError::InvalidController("short SMART log".into()))?;
        Ok(SmartHealthLog::decode(raw))
    }

    /// Get Features: DW0 of the completion.
    pub fn get_feature(&self, feature_id: u8, nsid: NamespaceId, select: u8, cdw11: u32) -> Result<u32, ClientError> {
        Ok(self.admin_checked(commands::get_features(feature_id, nsid, select, cdw11))?.cqe.result_dw0)
    }

    /// Set Features: DW0 of the completion.
    pub fn set_feature(&self, feature_id: u8, nsid: NamespaceId, cdw11: u32, save: bool) -> Result<u32, ClientError> {
        Ok(self.admin_checked(commands::set_features(feature_id, nsid, cdw11, save))?.cqe.result_dw0)
    }

    /// NSIDs reported changed (namespace attribute notices) since the last call.
    /// The event is noticed when the admin connection is next read: at the latest
    /// at the next keep-alive (KATO/2), or within 1 s when KATO is 0.
    pub fn take_namespace_changes(&self) -> Vec<NamespaceId> {
        std::mem::take(&mut *lock(&self.shared.namespace_changes))
    }

    /// Block size of `nsid`, from the cache or Identify Namespace.
    pub fn block_size(&self, nsid: NamespaceId) -> Result<u32, ClientError> {
        if let Some(bytes) = self.shared.cached_block_size(nsid) {
            return Ok(bytes);
        }
        self.refresh_block_size(nsid)?
            .ok_or_else(|| ClientError::InvalidArgument(format!("namespace {} is not active", nsid.0)))
    }

    fn refresh_block_size(&self, nsid: NamespaceId) -> Result<Option<u32>, ClientError> {
        let block_size = namespace_block_size(&self.identify_namespace(nsid)?);
        self.shared.cache_block_size(nsid, block_size);
        Ok(block_size)
    }

    /// Hands I/O queue `index` to the caller (one thread per queue). `None` when it
    /// is out of range or already taken. Dropping the [`IoQueue`] gives it back.
    pub fn take_io_queue(&self, index: usize) -> Option<IoQueue> {
        let inner = lock(self.shared.io_slots.get(index)?).take()?;
        Some(IoQueue { shared: Arc::clone(&self.shared), inner: Some(inner) })
    }

    /// Disconnects cleanly: closes the I/O queues, sends a normal shutdown
    /// notification (CC.SHN) and waits for CSTS.SHST (at most 5 s), then closes the
    /// admin queue.
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        for slot in &self.shared.io_slots {
            if let Some(inner) = lock(slot).as_mut() {
                inner.close();
            }
        }
        let result = {
            let mut admin = lock(&self.shared.admin);
            let live = self.shared.snapshot().status == LinkStatus::Live;
            match admin.connection.as_mut() {
                Some(connection) if live => shut_down(connection),
                _ => Ok(()),
            }
        };
        self.stop();
        result
    }

    /// Marks the controller closed, stops the supervisor and closes the sockets.
    fn stop(&mut self) {
        self.shared.update(|state| state.status = LinkStatus::Closed);
        if let Some(supervisor) = self.supervisor.take() {
            // It may be inside a reconnect attempt against a target that does not
            // answer (up to the connect timeout): wait a little, then let it end
            // on its own (it sees Closed and drops what it connected).
            let until = Instant::now() + SUPERVISOR_STOP_WAIT;
            while !supervisor.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            if supervisor.is_finished() {
                let _ = supervisor.join();
            }
        }
        lock(&self.shared.admin).connection = None;
        for slot in &self.shared.io_slots {
            if let Some(inner) = lock(slot).as_mut() {
                inner.close();
            }
        }
    }

    /// Runs commands on the first I/O queue still held by the controller, up to its
    /// depth at once; returns the completions in the order of `commands`.
    fn run_io(&self, commands: Vec<HostCommand>) -> Result<Vec<HostCompletion>, ClientError> {
        // Tags carry a per-call sequence number, so a completion left over from an
        // earlier call that gave up (timeout, lost controller) is never taken for one
        // of ours.
        static CALLS: AtomicU64 = AtomicU64::new(1);
        let call = CALLS.fetch_add(1, Ordering::Relaxed) << 32;
        let options = &self.shared.options;
        let patience = options.command_timeout + options.controller_loss_timeout + options.connect_timeout;
        for slot in &self.shared.io_slots {
            let mut guard = lock(slot);
            let Some(inner) = guard.as_mut() else { continue };
            let total = commands.len();
            let mut results: Vec<Option<HostCompletion>> = (0..total).map(|_| None).collect();
            let mut pending = commands.into_iter().enumerate();
            let mut done = 0;
            let mut out = Vec::new();
            let mut deadline = Instant::now() + patience;
            while done < total {
                while inner.in_flight() < inner.depth() {
                    let Some((index, mut command)) = pending.next() else { break };
                    command.user_tag = call | index as u64;
                    inner.submit(&self.shared, command).map_err(|refused| refused.error)?;
                }
                out.clear();
                inner.reap(&self.shared, 1, Duration::from_secs(1), &mut out)?;
                for completion in out.drain(..) {
                    if completion.user_tag & !0xFFFF_FFFF != call {
                        continue;
                    }
                    if let Some(entry @ None) = results.get_mut((completion.user_tag & 0xFFFF_FFFF) as usize) {
                        *entry = Some(completion);
                        done += 1;
                        deadline = Instant::now() + patience;
                    }
                }
                if Instant::now() >= deadline {
                    return Err(ClientError::Timeout);
                }
            }
            return Ok(results.into_iter().flatten().collect());
        }
        Err(ClientError::InvalidArgument("no I/O queue available: all were taken or none was granted".into()))
    }

    /// Blocks per command for `blocks` blocks of `block_size` bytes.
    fn blocks_per_command(&self, block_size: u32) -> u32 {
        (self.max_transfer_bytes() / block_size).clamp(1, 65536)
    }

    /// Reads `blocks` blocks from `lba` (split at MDTS, several commands in flight).
    pub fn read(&self, nsid: NamespaceId, lba: u64, blocks: u32) -> Result<Vec<u8>, ClientError> {
        let block_size = self.block_size(nsid)?;
        if blocks == 0 || lba.checked_add(u64::from(blocks)).is_none() {
            return Err(ClientError::InvalidArgument(format!("cannot read {blocks} blocks at LBA {lba}")));
        }
        let total_bytes = u64::from(blocks) * u64::from(block_size);
        if total_bytes > isize::MAX as u64 {
            return Err(ClientError::InvalidArgument("read too large".into()));
        }
        let per_command = self.blocks_per_command(block_size);
        let commands = (0..blocks)
            .step_by(per_command as usize)
            .map(|first| commands::read(nsid, lba + u64::from(first), per_command.min(blocks - first), block_size))
            .collect();
        let mut data = Vec::with_capacity(total_bytes as usize);
        for completion in self.run_io(commands)? {
            check_io(&completion, nvme_spec::opcode::IoOpcode::Read as u8)?;
            data.extend_from_slice(&completion.data);
        }
        Ok(data)
    }

    /// Writes `data` (whole blocks) at `lba`, split at MDTS; `force_unit_access` sets
    /// FUA on every command.
    pub fn write(&self, nsid: NamespaceId, lba: u64, data: &[u8], force_unit_access: bool) -> Result<(), ClientError> {
        let block_size = self.block_size(nsid)?;
        if data.is_empty() || !data.len().is_multiple_of(block_size as usize) {
            return Err(ClientError::InvalidArgument(format!(
                "write of {} bytes is not a whole number of {block_size}-byte blocks",
                data.len()
            )));
        }
        let chunk_bytes = (self.blocks_per_command(block_size) * block_size) as usize;
        let commands = data
            .chunks(chunk_bytes)
            .enumerate()
            .map(|(index, chunk)| {
                let first = (index * chunk_bytes / block_size as usize) as u64;
                commands::write(nsid, lba + first, chunk.to_vec(), block_size, force_unit_access)
            })
            .collect();
        for completion in self.run_io(commands)? {
            check_io(&completion, nvme_spec::opcode::IoOpcode::Write as u8)?;
        }
        Ok(())
    }

    /// Runs one I/O command (built with `nvme_host::commands`) and checks its status;
    /// returns its completion (with any data read).
    pub fn io_command(&self, command: HostCommand) -> Result<HostCompletion, ClientError> {
        let opcode = command.sqe.opcode();
        let completion = self.run_io(vec![command])?.pop().ok_or(ClientError::Timeout)?;
        check_io(&completion, opcode)?;
        Ok(completion)
    }

    /// Compare of `data` (whole blocks) with the blocks at `lba`: `Ok(true)` when
    /// equal, `Ok(false)` on Compare Failure.
    pub fn compare(&self, nsid: NamespaceId, lba: u64, data: &[u8]) -> Result<bool, ClientError> {
        let block_size = self.whole_blocks(nsid, data.len(), "compare")?;
        let completion = self
            .run_io(vec![commands::compare(nsid, lba, data.to_vec(), block_size)])?
            .pop()
            .ok_or(ClientError::Timeout)?;
        if is_compare_failure(&completion) {
            return Ok(false);
        }
        check_io(&completion, nvme_spec::opcode::IoOpcode::Compare as u8)?;
        Ok(true)
    }

    /// Fused Compare and Write: writes `new` at `lba` only if the blocks there equal
    /// `expected`, atomically against every other writer of those blocks. `Ok(true)`
    /// when written, `Ok(false)` when the compare failed (nothing written). At most
    /// one command's worth (MDTS) of blocks.
    pub fn compare_and_write(
        &self,
        nsid: NamespaceId,
        lba: u64,
        expected: &[u8],
        new: &[u8],
    ) -> Result<bool, ClientError> {
        let block_size = self.whole_blocks(nsid, expected.len(), "compare and write")?;
        if new.len() != expected.len() {
            return Err(ClientError::InvalidArgument(format!(
                "compare and write needs as many bytes to write ({}) as to compare ({})",
                new.len(),
                expected.len()
            )));
        }
        if expected.len() > (self.blocks_per_command(block_size) * block_size) as usize {
            return Err(ClientError::InvalidArgument("compare and write is limited to one command (MDTS)".into()));
        }
        let pair = commands::compare_and_write(nsid, lba, expected.to_vec(), new.to_vec(), block_size);
        let mut completions = self.run_io(pair.into())?.into_iter();
        let (Some(compare), Some(write)) = (completions.next(), completions.next()) else {
            return Err(ClientError::Timeout);
        };
        if is_compare_failure(&compare) {
            return Ok(false);
        }
        check_io(&compare, nvme_spec::opcode::IoOpcode::Compare as u8)?;
        check_io(&write, nvme_spec::opcode::IoOpcode::Write as u8)?;
        Ok(true)
    }

    /// Copy of `ranges` (SLBA, blocks) in order to `destination` on the target, no
    /// data crossing the network; `force_unit_access` sets FUA on the destination.
    pub fn copy(
        &self,
        nsid: NamespaceId,
        destination: u64,
        ranges: &[(u64, u32)],
        force_unit_access: bool,
    ) -> Result<(), ClientError> {
        if ranges.is_empty() || ranges.len() > commands::COPY_MAX_RANGES {
            return Err(ClientError::InvalidArgument(format!(
                "copy takes 1..={} source ranges, not {}",
                commands::COPY_MAX_RANGES,
                ranges.len()
            )));
        }
        if let Some((lba, blocks)) = ranges.iter().find(|(_, blocks)| *blocks == 0 || *blocks > 65536) {
            return Err(ClientError::InvalidArgument(format!(
                "source range at LBA {lba} has {blocks} blocks (1..=65536)"
            )));
        }
        let command = commands::copy(nsid, destination, ranges, force_unit_access);
        self.io_command(command).map(|_| ())
    }

    /// The namespace's block size, checking that `bytes` is a whole, non-zero number
    /// of blocks.
    fn whole_blocks(&self, nsid: NamespaceId, bytes: usize, what: &str) -> Result<u32, ClientError> {
        let block_size = self.block_size(nsid)?;
        if bytes == 0 || !bytes.is_multiple_of(block_size as usize) {
            return Err(ClientError::InvalidArgument(format!(
                "{what} of {bytes} bytes is not a whole number of {block_size}-byte blocks"
            )));
        }
        Ok(block_size)
    }

    /// Flush of `nsid`.
    pub fn flush(&self, nsid: NamespaceId) -> Result<(), ClientError> {
        for completion in self.run_io(vec![commands::flush(nsid)])? {
            check_io(&completion, nvme_spec::opcode::IoOpcode::Flush as u8)?;
        }
        Ok(())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Block size of a namespace from its formatted LBA format, `None` when inactive.
fn namespace_block_size(identify: &IdentifyNamespace) -> Option<u32> {
    if identify.namespace_size == 0 {
        return None;
    }
    identify
        .formatted_lba_format()
        .and_then(|format| format.block_size_bytes())
        .and_then(|bytes| u32::try_from(bytes).ok())
}

/// True for a completion with Compare Failure (media and data integrity 85h).
fn is_compare_failure(completion: &HostCompletion) -> bool {
    let status = completion.cqe.status;
    completion.transport_error.is_none()
        && status.code_type() == nvme_spec::Status::COMPARE_FAILURE.code_type()
        && status.code() == nvme_spec::Status::COMPARE_FAILURE.code()
}

/// `Ok` for a successful I/O completion, the matching error otherwise.
pub(crate) fn check_io(completion: &HostCompletion, opcode: u8) -> Result<(), ClientError> {
    let status = completion.cqe.status;
    if status.is_success() && completion.transport_error.is_none() {
        return Ok(());
    }
    Err(match &completion.transport_error {
        Some(HostError::ConnectionLost) => ClientError::ControllerLost,
        Some(HostError::CommandTimeout { .. }) => ClientError::Timeout,
        // What the target did, rather than the status the host made up for it.
        Some(
            error @ (HostError::GaveUp { .. } | HostError::DataDigestMismatch { .. } | HostError::ShortData { .. }),
        ) => ClientError::Protocol(error.clone()),
        _ => ClientError::Command { admin: false, opcode, status },
    })
}

/// One admin command across reconnects; see [`Controller::admin_command`]. The
/// command is sent again after each reconnect, at most `max_resends` times
/// ([`MAX_COMMAND_RESENDS`] but for prefetches), and never past its own deadline ([`Shared::command_deadline`]): a target
/// that fails the connection whenever this command arrives, and accepts every
/// reconnect, cannot keep the caller waiting for ever.
fn admin_command(shared: &Shared, mut command: HostCommand, max_resends: u8) -> Result<HostCompletion, ClientError> {
    let options = &shared.options;
    // Without a deadline (a controller loss timeout of "for ever"): how long one
    // wait for a reconnect may take, as before.
    let patience = options.controller_loss_timeout + options.reconnect_delay + options.connect_timeout * 2;
    let deadline = shared.command_deadline(Instant::now());
    let mut resends: u8 = 0;
    loop {
        let state = shared.wait_while_reconnecting(deadline.unwrap_or_else(|| Instant::now() + patience));
        match state.status {
            LinkStatus::Lost => return Err(ClientError::ControllerLost),
            LinkStatus::Closed => return Err(ClientError::Closed),
            LinkStatus::Reconnecting { .. } => return Err(ClientError::Protocol(shared.gave_up(resends, true))),
            LinkStatus::Live => {}
        }
        let mut admin = lock(&shared.admin);
        // Read again under the admin lock: the supervisor publishes a new
        // association before it lets go of that lock, so this epoch is the one
        // of the connection used below (a failure reported for an older one
        // would be ignored).
        let state = shared.snapshot();
        let tag = admin.next_tag();
        let mut pending_event = false;
        let Some(connection) = admin.connection.as_mut() else {
            drop(admin);
            // Failed, and the supervisor has not started reconnecting yet.
            shared.request_reconnect(state.epoch, HostError::ConnectionLost);
            continue;
        };
        let user_tag = command.user_tag;
        let result = connection.execute(command, tag, deadline, &mut |other| on_admin_event(other, &mut pending_event));
        if pending_event {
            admin.namespace_event_pending = true;
            shared.poke();
        }
        match result {
            Ok(mut completion) => {
                completion.user_tag = user_tag;
                return Ok(completion);
            }
            Err(error) => {
                let Some(connection) = admin.connection.take() else { return Err(error) };
                let failure = connection.into_failure(error);
                // Asked for under the admin lock, so nobody finds the connection
                // gone first and reports a vaguer cause.
                shared.request_reconnect(state.epoch, failure.cause.clone());
                drop(admin);
                if let Some(HostError::CommandTimeout { .. }) = failure.queue_error {
                    // Nothing came in time: a plain timeout the first time, the
                    // whole story once the command had been sent again.
                    return Err(if resends == 0 {
                        ClientError::Timeout
                    } else {
                        ClientError::Protocol(shared.gave_up(resends, true))
                    });
                }
                if let Some(completion) = failure.completed.into_iter().find(|completion| completion.user_tag == tag) {
                    return Ok(HostCompletion { user_tag, ..completion });
                }
                match failure.abandoned.into_iter().find(|abandoned| abandoned.user_tag == tag) {
                    Some(abandoned) => command = HostCommand { user_tag, ..abandoned },
                    None => return Err(failure.error),
                }
                if resends >= max_resends {
                    return Err(ClientError::Protocol(shared.gave_up(resends, false)));
                }
                resends += 1;
                tracing::info!(cause = %failure.cause, resends, "admin connection lost; command resent after reconnect");
            }
        }
    }
}

/// A completion on the admin queue that nobody waits for: the AER. Returns the
/// re-armed request.
fn on_admin_event(completion: HostCompletion, pending_event: &mut bool) -> Option<HostCommand> {
    if completion.user_tag != ASYNC_EVENT_TAG {
        return None;
    }
    if !completion.cqe.status.is_success() {
        tracing::info!(status = ?completion.cqe.status, "Asynchronous Event Request failed; not re-armed");
        return None;
    }
    let event = AsynchronousEventCompletion::from_dword0(completion.cqe.result_dw0);
    tracing::info!(?event, "asynchronous event");
    if event.event_type == async_event_type::NOTICE
        && event.event_info == async_event_notice::NAMESPACE_ATTRIBUTE_CHANGED
    {
        *pending_event = true;
    }
    let mut request = commands::async_event_request();
    request.user_tag = ASYNC_EVENT_TAG;
    Some(request)
}

/// The supervisor thread: keep-alive every KATO/2, namespace change events and
/// reconnects, until the controller is closed or lost.
fn supervise(shared: &Shared) {
    let keep_alive_ms = shared.options.keep_alive_timeout_ms;
    // Without keep-alive, still wake up now and then to pick up asynchronous events.
    let interval = if keep_alive_ms == 0 {
        Duration::from_secs(1)
    } else {
        Duration::from_millis(u64::from(keep_alive_ms / 2).max(100))
    };
    let mut next_keep_alive = Instant::now() + interval;
    loop {
        let state = shared.snapshot();
        match state.status {
            LinkStatus::Closed | LinkStatus::Lost => return,
            LinkStatus::Reconnecting { since } => {
                reconnect(shared, since);
                next_keep_alive = Instant::now() + interval;
                continue;
            }
            LinkStatus::Live => {}
        }
        shared.sleep_until(next_keep_alive);
        if shared.snapshot().status != LinkStatus::Live {
            continue;
        }
        if std::mem::take(&mut lock(&shared.admin).namespace_event_pending) {
            read_namespace_changes(shared);
        }
        if Instant::now() >= next_keep_alive {
            next_keep_alive = Instant::now() + interval;
            // Also drains the admin socket, picking up asynchronous events.
            let command = if keep_alive_ms > 0 { commands::keep_alive() } else { commands::property_get(0x1C, 4) };
            if let Err(error) = admin_command_once(shared, command, state.epoch) {
                tracing::warn!(%error, "keep-alive failed");
            }
        }
    }
}

/// One admin command on the current connection, without waiting for reconnects (the
/// supervisor is the one that would do them).
fn admin_command_once(shared: &Shared, command: HostCommand, epoch: u64) -> Result<HostCompletion, ClientError> {
    let mut admin = lock(&shared.admin);
    if shared.snapshot().epoch != epoch {
        // Reconnected since the caller looked: this command was for the old one.
        return Err(ClientError::ControllerLost);
    }
    let tag = admin.next_tag();
    let mut pending_event = false;
    let Some(connection) = admin.connection.as_mut() else {
        drop(admin);
        shared.request_reconnect(epoch, HostError::ConnectionLost);
        return Err(ClientError::ControllerLost);
    };
    let result = connection.execute(command, tag, None, &mut |other| on_admin_event(other, &mut pending_event));
    admin.namespace_event_pending |= pending_event;
    if let Err(error) = result {
        tracing::warn!(%error, "admin connection failed");
        let cause = match admin.connection.take() {
            Some(connection) => connection.into_failure(error).cause,
            None => HostError::ConnectionLost,
        };
        shared.request_reconnect(epoch, cause.clone());
        drop(admin);
        return Err(ClientError::Protocol(cause));
    }
    result
}

/// Reads the Changed Namespace List (log 04h, which also clears the event) and
/// records the NSIDs; refreshes their cached block sizes.
fn read_namespace_changes(shared: &Shared) {
    let epoch = shared.snapshot().epoch;
    let command = commands::get_log_page(
        log_id::CHANGED_NAMESPACE_LIST,
        NamespaceId::BROADCAST,
        0,
        CHANGED_NAMESPACE_LIST_BYTES as u32,
    );
    let Ok(completion) = admin_command_once(shared, command, epoch) else { return };
    let Ok(raw) = identify_data(&completion) else { return };
    let changed: Vec<NamespaceId> = decode_namespace_list(raw).collect();
    for nsid in &changed {
        if *nsid == NamespaceId::BROADCAST {
            // More than 1024 changed: every namespace may have.
            shared.block_sizes.write().unwrap_or_else(|poison| poison.into_inner()).clear();
            continue;
        }
        let identify = commands::identify(cns::NAMESPACE, *nsid, csi::NVM);
        if let Ok(completion) = admin_command_once(shared, identify, epoch) {
            if let Ok(raw) = identify_data(&completion) {
                shared.cache_block_size(*nsid, namespace_block_size(&IdentifyNamespace::decode(raw)));
            }
        }
    }
    tracing::info!(?changed, "namespaces changed");
    shared.record_namespace_changes(&changed);
}

/// Builds a new association after `reconnect_delay`, retrying until the controller
/// loss timeout (counted from `since`) expires.
fn reconnect(shared: &Shared, since: Instant) {
    let options = &shared.options;
    // The old admin connection goes first: closing it makes the target tear the old
    // controller down, which closes its remaining I/O queues.
    drop(lock(&shared.admin).connection.take());
    loop {
        shared.sleep_until(Instant::now() + options.reconnect_delay);
        let state = shared.snapshot();
        if matches!(state.status, LinkStatus::Closed | LinkStatus::Lost) {
            return;
        }
        if since.elapsed() >= options.controller_loss_timeout {
            tracing::error!(after = ?since.elapsed(), "controller lost: giving up reconnecting");
            shared.update(|state| state.status = LinkStatus::Lost);
            return;
        }
        // Without the admin lock: nothing uses the admin connection while it is
        // gone, and `stop` must not wait for an attempt to finish.
        match establish(options, options.address, &options.subsystem_nqn, options.keep_alive_timeout_ms, true) {
            Ok(association) => {
                let mut admin = lock(&shared.admin);
                if matches!(shared.snapshot().status, LinkStatus::Closed | LinkStatus::Lost) {
                    return;
                }
                let epoch = state.epoch + 1;
                let next = association_state(epoch, &association);
                *lock(&shared.generated_tls) = association.generated_tls;
                admin.connection = Some(association.connection);
                // Published before the admin lock is let go: whoever takes the
                // connection next sees its epoch.
                shared.update(|state| {
                    if state.status != LinkStatus::Closed {
                        *state = next;
                    }
                });
                drop(admin);
                tracing::info!(epoch, controller = next.controller_id.0, "controller reconnected");
                return;
            }
            Err(error) => tracing::warn!(%error, "reconnect attempt failed"),
        }
    }
}

/// An ANA log against what the controller reported of itself: at most NANAGRPID
/// groups, group IDs in 1..=NANAGRPID, NSIDs in 1..=NN.
fn check_ana_log(log: &AnaLog, identify: &IdentifyController) -> Result<(), String> {
    let groups = identify.number_of_ana_group_identifiers;
    if log.groups.len() as u64 > u64::from(groups) {
        return Err(format!("{} group descriptors, but NANAGRPID is {groups}", log.groups.len()));
    }
    for group in &log.groups {
        let id = group.descriptor.group_id.0;
        if id == 0 || id > groups {
            return Err(format!("group ID {id} is outside 1..={groups} (NANAGRPID)"));
        }
        if let Some(nsid) = group.namespaces.iter().find(|nsid| nsid.0 == 0 || nsid.0 > identify.number_of_namespaces) {
            return Err(format!(
                "group {id} lists NSID {}, outside 1..={} (NN)",
                nsid.0, identify.number_of_namespaces
            ));
        }
    }
    Ok(())
}

/// The length to ask for the whole ANA log of a controller with this Identify data:
/// header, one descriptor per group (NANAGRPID) and one NSID per namespace (MNAN,
/// else NN).
pub fn ana_log_length(identify: &IdentifyController) -> u32 {
    let namespaces = if identify.maximum_number_of_allowed_namespaces != 0 {
        identify.maximum_number_of_allowed_namespaces
    } else {
        identify.number_of_namespaces
    };
    let bytes = 16u64 + u64::from(identify.number_of_ana_group_identifiers) * 32 + u64::from(namespaces) * 4;
    // Get Log Page counts dwords; MDTS of any real controller is far above this.
    bytes.min(1 << 20) as u32
}

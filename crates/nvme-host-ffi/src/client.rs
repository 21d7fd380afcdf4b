//! The only module that names the host client's types: command builders, connect
//! (one controller or multipath), namespace geometry, and the `CommandQueue` impl
//! for the client's queues, with the client's errors turned into errno-style
//! [`FfiError`]s.

use std::time::Duration;

use nvme_host::{commands, HostCommand, HostCompletion};
use nvme_host_client::{
    parse_uuid, ClientError, ConnectOptions, Controller, IoQueue, Multipath, MultipathQueue, PathPolicy,
};
use nvme_spec::admin::DatasetRange;
use nvme_spec::NamespaceId;

use crate::error::{FfiError, FfiResult};
use crate::queue::{CommandQueue, Geometry};

/// Largest data transfer of one command when the controller reports no limit (MDTS
/// 0): the MDTS of the Sluice target and SPDK's default (128 KiB).
pub const DEFAULT_MAX_TRANSFER_BYTES: u32 = 128 * 1024;

pub fn read_command(nsid: u32, lba: u64, blocks: u32, block_size: u32) -> HostCommand {
    commands::read(NamespaceId(nsid), lba, blocks, block_size)
}

pub fn write_command(nsid: u32, lba: u64, data: Vec<u8>, block_size: u32, fua: bool) -> HostCommand {
    commands::write(NamespaceId(nsid), lba, data, block_size, fua)
}

pub fn write_from_source_command(
    nsid: u32,
    lba: u64,
    source: nvme_host::SourceBuffer,
    block_size: u32,
    fua: bool,
) -> HostCommand {
    commands::write_from_source(NamespaceId(nsid), lba, source, block_size, fua)
}

pub fn flush_command(nsid: u32) -> HostCommand {
    commands::flush(NamespaceId(nsid))
}

pub fn deallocate_command(nsid: u32, ranges: &[(u64, u32)]) -> HostCommand {
    let ranges: Vec<DatasetRange> = ranges
        .iter()
        .map(|&(starting_lba, length_blocks)| DatasetRange { context_attributes: 0, length_blocks, starting_lba })
        .collect();
    commands::dataset_management_deallocate(NamespaceId(nsid), &ranges)
}

/// errno for a client error.
pub fn errno_of(error: &ClientError) -> i32 {
    fn io_errno(source: &std::io::Error, default: i32) -> i32 {
        if let Some(code) = source.raw_os_error() {
            return code;
        }
        match source.kind() {
            std::io::ErrorKind::ConnectionRefused => libc::ECONNREFUSED,
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => libc::ETIMEDOUT,
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => libc::ECONNRESET,
            _ => default,
        }
    }
    #[allow(unreachable_patterns)] // the client may grow variants
    match error {
        ClientError::Connect { source, .. } => io_errno(source, libc::ECONNREFUSED),
        ClientError::Io { source, .. } => io_errno(source, libc::ECONNRESET),
        ClientError::Protocol(_) => libc::EPROTO,
        ClientError::Command { status, .. } if status.code_type() == 0 && status.code() == 0x0B => libc::ENODEV,
        ClientError::Command { .. } => libc::EIO,
        ClientError::Timeout => libc::ETIMEDOUT,
        ClientError::ControllerLost => libc::ENOTCONN,
        ClientError::InvalidArgument(_) => libc::EINVAL,
        ClientError::InvalidController(_) => libc::EPROTO,
        ClientError::QueueFull => libc::EAGAIN,
        ClientError::Closed => libc::ESHUTDOWN,
        _ => libc::EIO,
    }
}

pub fn ffi_error(context: &str, error: ClientError) -> FfiError {
    FfiError::new(errno_of(&error), format!("{context}: {error}"))
}

/// Sets the host NQN, and HOSTID from it when it is a UUID-based NQN (as Linux does
/// with /etc/nvme/hostnqn and hostid); other NQNs keep the default HOSTID.
pub fn set_host_nqn(options: &mut ConnectOptions, host_nqn: String) {
    if let Some(id) = host_nqn.strip_prefix("nqn.2014-08.org.nvmexpress:uuid:").and_then(parse_uuid) {
        options.host_identifier = id;
    }
    options.host_nqn = host_nqn;
}

/// Largest data transfer of one command: the controller's MDTS (`reported`, 0 for
/// no limit), lowered to `requested` when that is smaller (0: no request).
fn clamp_transfer(reported: u32, requested: u32) -> u32 {
    let mdts = match reported {
        0 => DEFAULT_MAX_TRANSFER_BYTES,
        bytes => bytes,
    };
    match requested {
        0 => mdts,
        bytes => bytes.min(mdts),
    }
}

pub fn connect(options: ConnectOptions) -> FfiResult<Controller> {
    let target = format!("{} ({})", options.address, options.subsystem_nqn);
    Controller::connect(options).map_err(|error| ffi_error(&format!("connect to {target}"), error))
}

/// Connects one namespace through several paths (multipath: ANA-aware path choice,
/// failover), least queue depth first.
pub fn connect_multipath(paths: Vec<ConnectOptions>, nsid: u32) -> FfiResult<Multipath> {
    let addresses: Vec<String> = paths.iter().map(|options| options.address.to_string()).collect();
    let target =
        format!("{} ({})", addresses.join(","), paths.first().map_or("", |options| options.subsystem_nqn.as_str()));
    Multipath::connect(paths, NamespaceId(nsid), PathPolicy::QueueDepth)
        .map_err(|error| ffi_error(&format!("multipath connect to {target}"), error))
}

/// A controller handle's connection(s): one controller, or one namespace through
/// several (multipath).
#[derive(Debug)]
pub enum Paths {
    /// Boxed: a controller carries its Identify data inline.
    Single(Box<Controller>),
    Multi(Multipath),
}

impl Paths {
    pub fn io_queue_count(&self) -> usize {
        match self {
            Paths::Single(controller) => controller.io_queue_count(),
            Paths::Multi(multipath) => multipath.io_queue_count(),
        }
    }

    /// Largest data transfer of one command (see [`max_transfer_bytes`]).
    pub fn max_transfer_bytes(&self, requested: u32) -> u32 {
        let reported = match self {
            Paths::Single(controller) => controller.max_transfer_bytes(),
            Paths::Multi(multipath) => multipath.max_transfer_bytes(),
        };
        clamp_transfer(reported, requested)
    }

    /// Size and block size of namespace `nsid`; a multipath handle serves only
    /// its own namespace.
    pub fn geometry(&self, nsid: u32) -> FfiResult<Geometry> {
        let identify = match self {
            Paths::Single(controller) => controller.identify_namespace(NamespaceId(nsid)),
            Paths::Multi(multipath) if multipath.namespace().0 == nsid => multipath.identify_namespace(),
            Paths::Multi(multipath) => {
                return Err(FfiError::invalid(format!(
                    "this multipath handle serves namespace {} only, not {nsid}",
                    multipath.namespace().0
                )))
            }
        };
        namespace_geometry(identify.map_err(|error| ffi_error(&format!("identify namespace {nsid}"), error))?, nsid)
    }

    /// I/O queue `index` for one thread (of every path, for multipath).
    pub fn take_queue(&self, index: usize) -> Option<AnyQueue> {
        match self {
            Paths::Single(controller) => controller.take_io_queue(index).map(AnyQueue::Single),
            Paths::Multi(multipath) => multipath.take_io_queue(index).map(AnyQueue::Multi),
        }
    }

    pub fn disconnect(self) -> FfiResult<()> {
        let result = match self {
            Paths::Single(controller) => (*controller).disconnect(),
            Paths::Multi(multipath) => multipath.disconnect(),
        };
        result.map_err(|error| ffi_error("disconnect", error))
    }
}

/// An I/O queue of either kind of handle.
#[derive(Debug)]
pub enum AnyQueue {
    Single(IoQueue),
    Multi(MultipathQueue),
}

/// Size and block size from Identify Namespace data; an inactive namespace
/// (all-zero data) is ENODEV.
fn namespace_geometry(identify: nvme_spec::IdentifyNamespace, nsid: u32) -> FfiResult<Geometry> {
    if identify.namespace_size == 0 {
        return Err(FfiError::new(libc::ENODEV, format!("namespace {nsid} is not active on this controller")));
    }
    let format = identify.lba_formats[identify.formatted_lba_index() % identify.lba_formats.len()];
    let block_size = match format.lba_data_size_log2 {
        9..=31 => 1u32 << format.lba_data_size_log2,
        other => {
            return Err(FfiError::new(
                libc::EPROTO,
                format!("namespace {nsid} reports an invalid LBA data size 2^{other}"),
            ))
        }
    };
    Ok(Geometry { blocks: identify.namespace_size, block_size })
}

impl CommandQueue for AnyQueue {
    fn depth(&self) -> usize {
        match self {
            AnyQueue::Single(queue) => queue.depth(),
            AnyQueue::Multi(queue) => queue.depth(),
        }
    }

    fn in_flight(&self) -> usize {
        match self {
            AnyQueue::Single(queue) => queue.in_flight(),
            AnyQueue::Multi(queue) => queue.in_flight(),
        }
    }

    fn submit(&mut self, command: HostCommand) -> FfiResult<()> {
        let result = match self {
            AnyQueue::Single(queue) => queue.submit(command),
            AnyQueue::Multi(queue) => queue.submit(command),
        };
        result.map_err(|error| ffi_error("submit", error))
    }

    fn reap(&mut self, min: usize, timeout: Duration, out: &mut Vec<HostCompletion>) -> FfiResult<usize> {
        let result = match self {
            AnyQueue::Single(queue) => queue.reap(min, timeout, out),
            AnyQueue::Multi(queue) => queue.reap(min, timeout, out),
        };
        result.map_err(|error| ffi_error("reap", error))
    }

    fn set_read_destination(&mut self, destination: std::sync::Arc<dyn nvme_host::ReadDestination>) -> bool {
        match self {
            AnyQueue::Single(queue) => queue.set_read_destination(destination),
            AnyQueue::Multi(queue) => queue.set_read_destination(destination),
        }
        true
    }

    fn set_write_source(&mut self, source: std::sync::Arc<dyn nvme_host::WriteSource>) -> bool {
        match self {
            AnyQueue::Single(queue) => queue.set_write_source(source),
            AnyQueue::Multi(queue) => queue.set_write_source(source),
        }
        true
    }
}

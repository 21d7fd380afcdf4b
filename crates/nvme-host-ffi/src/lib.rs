//! `libsluice_host`: a C ABI over Sluice's blocking NVMe/TCP host client, so C
//! programs (the fio ioengine in `fio/`) can connect to an NVMe/TCP controller and
//! run I/O on its queues. The header is `include/sluice_host.h`; it documents every
//! function, the threading rules and the buffer lifetime contract.
//!
//! Every entry point returns an `int`: >= 0 on success, a negative errno on failure,
//! with a message for `sluice_last_error()` kept per thread. No panic unwinds into C:
//! each entry point catches it, reports -EIO, and marks the queue it was using as
//! failed.
//!
//! Layers: `error` (codes, last error, panic catching), `queue` (requests split into
//! commands, backlog, read data copy; safe code), `client` (the only module that
//! names the host client's types), and this file (the `extern "C"` functions, the only
//! `unsafe`: pointers from C).
#![deny(unsafe_op_in_unsafe_fn)]

mod client;
mod error;
mod queue;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvme_host_client::{ConnectOptions, IoPath, PollMode};

use crate::error::{ffi_call, last_error_ptr, FfiError, FfiResult};
use crate::queue::{Completion, Geometry, QueueCore, ReadSink};

/// The default NVMe/TCP I/O port (IANA).
pub const DEFAULT_PORT: u16 = 4420;

/// `struct sluice_connect_options` (see the header for each field). All-zero means
/// "default" for every numeric field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sluice_connect_options {
    pub traddr: *const c_char,
    pub subnqn: *const c_char,
    pub hostnqn: *const c_char,
    pub trsvcid: u16,
    pub nr_io_queues: u16,
    pub queue_size: u16,
    /// `SLUICE_IO_*`: how I/O queues wait.
    pub io_mode: u16,
    pub hdr_digest: i32,
    pub data_digest: i32,
    pub keep_alive_timeout_ms: u32,
    pub command_timeout_ms: u32,
    pub connect_timeout_ms: u32,
    pub reconnect_delay_ms: u32,
    pub controller_loss_timeout_ms: u32,
    pub max_transfer_bytes: u32,
    /// TLS PSK in the interchange format; NULL or "" = plain NVMe/TCP.
    pub tls_key: *const c_char,
    /// `SLUICE_TLS_*` bits.
    pub tls_flags: u32,
    pub reserved: u32,
}

/// `SLUICE_TLS_IDENTITY_V0`: offer a format 0 PSK identity.
pub const SLUICE_TLS_IDENTITY_V0: u32 = 1;
/// `SLUICE_TLS_COMPAT`: libnvme's pre-1.16 key derivation.
pub const SLUICE_TLS_COMPAT: u32 = 2;

/// `struct sluice_completion`: one finished request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sluice_completion {
    pub user_tag: u64,
    /// 0, or a negative errno (-EIO when the NVMe status is not success).
    pub error: i32,
    /// NVMe status code type and status code of the first failing command.
    pub sct: u8,
    pub sc: u8,
    /// Do Not Retry bit of that status.
    pub dnr: u8,
    pub reserved: u8,
}

// The header declares these layouts; keep them pinned.
const _: () = assert!(std::mem::size_of::<sluice_connect_options>() == 80);
const _: () = assert!(std::mem::size_of::<sluice_completion>() == 16);

/// What a controller handle and its queues share.
struct Shared {
    paths: client::Paths,
    geometry: Mutex<HashMap<u32, Geometry>>,
    max_transfer_bytes: u32,
}

impl Shared {
    fn geometry(&self, nsid: u32) -> FfiResult<Geometry> {
        if nsid == 0 || nsid == u32::MAX {
            return Err(FfiError::invalid(format!("namespace id {nsid} is not a valid I/O namespace")));
        }
        if let Some(geometry) = self.geometry.lock().unwrap_or_else(|e| e.into_inner()).get(&nsid) {
            return Ok(*geometry);
        }
        let geometry = self.paths.geometry(nsid)?;
        self.geometry.lock().unwrap_or_else(|e| e.into_inner()).insert(nsid, geometry);
        Ok(geometry)
    }
}

/// The opaque `sluice_controller`.
pub struct SluiceController {
    shared: Arc<Shared>,
}

/// The opaque `sluice_queue`.
pub struct SluiceQueue {
    /// Where reads land as they arrive and writes in place are sent from; switched
    /// off for reads before the queue goes, for writes after (`writes_closer`).
    caller_memory: Arc<CallerMemory>,
    core: QueueCore<client::AnyQueue>,
    shared: Arc<Shared>,
    geometry: HashMap<u32, Geometry>,
    completions: Vec<Completion>,
    poisoned: bool,
    /// Declared after `core`, so it is dropped after it: the queue drains while
    /// writes in place may still be sent from the caller's memory (it is the
    /// caller's until sluice_queue_release returns), and only then is it closed.
    #[allow(dead_code)] // Held for its Drop alone.
    writes_closer: CloseWrites,
}

/// Stops lending writes from the caller's memory when dropped.
struct CloseWrites(Arc<CallerMemory>);

impl Drop for CloseWrites {
    fn drop(&mut self) {
        self.0.writes_open.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl SluiceQueue {
    fn check(&self) -> FfiResult<()> {
        if self.poisoned {
            return Err(FfiError::new(libc::EIO, "the queue hit an internal error earlier and is no longer usable"));
        }
        Ok(())
    }

    /// The namespace's geometry and the bytes `blocks` blocks of a write from `buf`
    /// take (a NULL `buf` or a size overflow refused).
    fn write_extent(&mut self, nsid: u32, blocks: u32, buf: *const c_void) -> FfiResult<(Geometry, usize)> {
        if buf.is_null() {
            return Err(FfiError::invalid("buf is NULL"));
        }
        let geometry = self.geometry(nsid)?;
        let bytes = (blocks as usize)
            .checked_mul(geometry.block_size as usize)
            .ok_or_else(|| FfiError::invalid("write too large"))?;
        Ok((geometry, bytes))
    }

    fn geometry(&mut self, nsid: u32) -> FfiResult<Geometry> {
        if let Some(geometry) = self.geometry.get(&nsid) {
            return Ok(*geometry);
        }
        let geometry = self.shared.geometry(nsid)?;
        self.geometry.insert(nsid, geometry);
        Ok(geometry)
    }
}

impl Drop for SluiceQueue {
    /// Released with reads still outstanding, the caller may have freed their buffers
    /// already: nothing is written to them any more, even while the client waits for
    /// those commands as it lets the queue go.
    fn drop(&mut self) {
        self.caller_memory.open.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Receives read data straight into the buffers the caller gave `sluice_submit_read`,
/// as it arrives from the socket (one copy fewer than collecting it first), and lends
/// the data of `sluice_submit_write_in_place` to the queue's sends (no copy at all).
#[derive(Debug)]
struct CallerMemory {
    /// False once the queue is being released.
    open: std::sync::atomic::AtomicBool,
    /// False once the queue has been released.
    writes_open: std::sync::atomic::AtomicBool,
}

impl CallerMemory {
    fn new() -> Self {
        CallerMemory {
            open: std::sync::atomic::AtomicBool::new(true),
            writes_open: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl nvme_host::WriteSource for CallerMemory {
    fn data(&self, source: u64, offset: usize, length: usize) -> Option<&[u8]> {
        if !self.writes_open.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        // SAFETY: `source` is the address of a write command's part of a buffer
        // passed to sluice_submit_write_in_place (QueueCore::submit_write_in_place
        // sets it), which the caller keeps valid and unchanged until the request's
        // completion is returned by sluice_reap, or until sluice_queue_release
        // returns (the contract in sluice_host.h); after that `writes_open` is false.
        // The host queue asks only for offset + length within the command's length,
        // and holds back the completion of a command whose data a send may still be
        // reading until that send is over, so no slice is read after the caller got
        // the buffer back. Every call runs on the thread that drives the queue,
        // inside a sluice_* call on it.
        Some(unsafe { std::slice::from_raw_parts((source as usize as *const u8).add(offset), length) })
    }
}

impl nvme_host::ReadDestination for CallerMemory {
    fn write(&self, destination: u64, offset: usize, data: &[u8]) {
        if !self.open.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        // SAFETY: `destination` is the address of a read command's part of a buffer
        // passed to sluice_submit_read (QueueCore::submit_read sets it), which the
        // caller keeps valid and writable until the request's completion is returned
        // by sluice_reap (the contract in sluice_host.h). The host queue calls this
        // only while that command is outstanding, so before its completion can reach
        // the caller, with offset + data.len() within the command's length (checked
        // in nvme_host's receive path). Every call runs on the thread that drives
        // the queue, inside a sluice_* call on it. `data` is the client's receive
        // buffer, which does not overlap the caller's memory.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (destination as usize as *mut u8).add(offset), data.len());
        }
    }
}

/// Copies read data to the address the caller gave `sluice_submit_read`.
struct CallerBuffers;

impl ReadSink for CallerBuffers {
    fn copy_to(&mut self, addr: usize, offset: usize, data: &[u8]) {
        // SAFETY: `addr` is the buffer passed to sluice_submit_read, which the caller
        // keeps valid and writable for blocks * block size bytes until the request's
        // completion is returned by sluice_reap (the contract in sluice_host.h); the
        // queue only calls this for a request still outstanding, with
        // offset + data.len() <= that size (QueueCore::finish_command checks it).
        // `data` is the client's own Vec, so the regions do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (addr as *mut u8).add(offset), data.len()) };
    }
}

/// Reads a C string argument: required (`NULL` is an error) or optional.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn c_str(ptr: *const c_char, what: &str, required: bool) -> FfiResult<Option<String>> {
    if ptr.is_null() {
        return if required { Err(FfiError::invalid(format!("{what} is NULL"))) } else { Ok(None) };
    }
    // SAFETY: non-NULL and NUL-terminated per this function's contract.
    let text = unsafe { CStr::from_ptr(ptr) };
    let text = text.to_str().map_err(|_| FfiError::invalid(format!("{what} is not UTF-8")))?;
    if text.is_empty() {
        return if required { Err(FfiError::invalid(format!("{what} is empty"))) } else { Ok(None) };
    }
    Ok(Some(text.to_string()))
}

fn resolve(traddr: &str, port: u16) -> FfiResult<SocketAddr> {
    // An IPv6 literal may come with or without brackets.
    let host = traddr.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .map_err(|e| FfiError::new(libc::EHOSTUNREACH, format!("cannot resolve traddr {traddr:?}: {e}")))?
        .next()
        .ok_or_else(|| FfiError::new(libc::EHOSTUNREACH, format!("traddr {traddr:?} has no address")))
}

/// The addresses of `traddr`: one, or a comma-separated list for multipath, each
/// `host`, `host:port` or `[v6]:port` (`port` when none is given).
fn path_addresses(traddr: &str, port: u16) -> FfiResult<Vec<SocketAddr>> {
    traddr
        .split(',')
        .map(str::trim)
        .map(|entry| {
            if entry.is_empty() {
                return Err(FfiError::invalid(format!("traddr {traddr:?} has an empty entry")));
            }
            if let Ok(address) = entry.parse::<SocketAddr>() {
                return Ok(address);
            }
            // host:port with a name or IPv4 (one colon); anything else is a host.
            match entry.rsplit_once(':') {
                Some((host, entry_port)) if !host.contains(':') || host.ends_with(']') => {
                    let entry_port = entry_port
                        .parse()
                        .map_err(|_| FfiError::invalid(format!("traddr entry {entry:?}: bad port {entry_port:?}")))?;
                    resolve(host, entry_port)
                }
                _ => resolve(entry, port),
            }
        })
        .collect()
}

fn millis(value: u32) -> Option<Duration> {
    (value != 0).then(|| Duration::from_millis(u64::from(value)))
}

/// The addresses `o.traddr` names (see [`path_addresses`]).
fn addresses_of(o: &sluice_connect_options) -> FfiResult<Vec<SocketAddr>> {
    // SAFETY: the header requires traddr to be NULL or a NUL-terminated string
    // valid during the connect call.
    let traddr = unsafe { c_str(o.traddr, "traddr", true) }?.unwrap_or_default();
    let port = if o.trsvcid == 0 { DEFAULT_PORT } else { o.trsvcid };
    path_addresses(&traddr, port)
}

/// Connect options for the path at `address`, from everything else in `o`.
fn build_options(o: &sluice_connect_options, address: SocketAddr) -> FfiResult<(ConnectOptions, u32)> {
    // SAFETY: the header requires subnqn/hostnqn to be NULL or NUL-terminated
    // strings valid during the connect call.
    let subnqn = unsafe { c_str(o.subnqn, "subnqn", true) }?.unwrap_or_default();
    // SAFETY: as above.
    let hostnqn = unsafe { c_str(o.hostnqn, "hostnqn", false) }?;
    let io_path = match o.io_mode {
        0 => IoPath::Ring(PollMode::ADAPTIVE),
        1 => IoPath::Ring(PollMode::BusyPoll),
        2 => IoPath::Ring(PollMode::Sleep),
        3 => IoPath::Blocking,
        other => return Err(FfiError::invalid(format!("io_mode {other} is not one of SLUICE_IO_* (0..=3)"))),
    };
    let mut options = ConnectOptions::new(address, subnqn);
    if let Some(hostnqn) = hostnqn {
        client::set_host_nqn(&mut options, hostnqn);
    }
    options.io_path = io_path;
    options.io_queues = o.nr_io_queues.max(1);
    if o.queue_size != 0 {
        if o.queue_size < 2 {
            return Err(FfiError::invalid("queue_size must be at least 2"));
        }
        options.queue_size = o.queue_size;
    }
    options.header_digest = o.hdr_digest != 0;
    options.data_digest = o.data_digest != 0;
    if o.keep_alive_timeout_ms != 0 {
        options.keep_alive_timeout_ms = o.keep_alive_timeout_ms;
    }
    if let Some(d) = millis(o.command_timeout_ms) {
        options.command_timeout = d;
    }
    if let Some(d) = millis(o.connect_timeout_ms) {
        options.connect_timeout = d;
    }
    if let Some(d) = millis(o.reconnect_delay_ms) {
        options.reconnect_delay = d;
    }
    if let Some(d) = millis(o.controller_loss_timeout_ms) {
        options.controller_loss_timeout = d;
    }
    if o.max_transfer_bytes != 0 && o.max_transfer_bytes < 512 {
        return Err(FfiError::invalid("max_transfer_bytes must be 0 or at least 512"));
    }
    if o.reserved != 0 {
        return Err(FfiError::invalid("reserved must be zero"));
    }
    // SAFETY: as above (the header requires tls_key to be NULL or NUL-terminated).
    // The copy of the key is wiped when it goes (the parsed TlsKey wipes its own).
    let tls_key = unsafe { c_str(o.tls_key, "tls_key", false) }?.map(zeroize::Zeroizing::new);
    if tls_key.is_none() && o.tls_flags != 0 {
        return Err(FfiError::invalid("tls_flags without a tls_key"));
    }
    if let Some(text) = tls_key {
        if o.tls_flags & !(SLUICE_TLS_IDENTITY_V0 | SLUICE_TLS_COMPAT) != 0 {
            return Err(FfiError::invalid(format!("tls_flags {:#x} has unknown bits", o.tls_flags)));
        }
        // The key's own error never quotes it.
        let key =
            nvme_auth::TlsKey::parse(&text[..]).map_err(|error| FfiError::invalid(format!("tls_key: {error}")))?;
        // Without SLUICE_TLS_IDENTITY_V0: format 1, then format 0 if the target
        // refuses it (IdentityChoice::Auto).
        let identity = (o.tls_flags & SLUICE_TLS_IDENTITY_V0 != 0).then_some(nvme_auth::IdentityVersion::V0);
        options.tls = Some(nvme_host_client::TlsOptions::new(key, identity, o.tls_flags & SLUICE_TLS_COMPAT != 0));
    }
    Ok((options, o.max_transfer_bytes))
}

/// Turns a handle pointer into a reference.
///
/// # Safety
/// `ptr` is NULL or a live handle of type `T` returned by this library and not yet
/// released, used by one thread at a time for `&mut` (the header's rules).
unsafe fn handle<'a, T>(ptr: *mut T, what: &str) -> FfiResult<&'a mut T> {
    // SAFETY: per this function's contract.
    unsafe { ptr.as_mut() }.ok_or_else(|| FfiError::invalid(format!("{what} is NULL")))
}

fn to_int(value: usize) -> c_int {
    c_int::try_from(value).unwrap_or(c_int::MAX)
}

/// Fills `opts` with zeros: every numeric field then means "default".
///
/// # Safety
/// `opts` is NULL or points to writable memory for one `sluice_connect_options`.
#[no_mangle]
pub unsafe extern "C" fn sluice_connect_options_init(opts: *mut sluice_connect_options) {
    if opts.is_null() {
        return;
    }
    // SAFETY: non-NULL and writable per the contract; all-zero is a valid value of
    // this struct (NULL pointers, zero numbers).
    unsafe { std::ptr::write_bytes(opts, 0, 1) };
}

/// Connects to a controller (admin queue + `nr_io_queues` I/O queues).
///
/// # Safety
/// `opts` points to a valid options struct whose strings are NUL-terminated; `out`
/// points to writable storage for one pointer.
#[no_mangle]
pub unsafe extern "C" fn sluice_connect(opts: *const sluice_connect_options, out: *mut *mut SluiceController) -> c_int {
    ffi_call(
        "sluice_connect",
        || {},
        || {
            if out.is_null() {
                return Err(FfiError::invalid("out is NULL"));
            }
            // SAFETY: `out` is non-NULL and writable per the contract; NULL it first so a
            // failed call never leaves a stale handle behind.
            unsafe { out.write(std::ptr::null_mut()) };
            // SAFETY: `opts` is NULL or a valid options struct per the contract.
            let opts = unsafe { opts.as_ref() }.ok_or_else(|| FfiError::invalid("opts is NULL"))?;
            let address = match addresses_of(opts)?.as_slice() {
                [one] => *one,
                _ => return Err(FfiError::invalid("traddr lists several addresses: use sluice_connect_multipath")),
            };
            let (options, requested_max_transfer) = build_options(opts, address)?;
            let paths = client::Paths::Single(Box::new(client::connect(options)?));
            // SAFETY: `out` is non-NULL and writable per the contract.
            unsafe { publish_controller(paths, requested_max_transfer, out) };
            Ok(0)
        },
    )
}

/// Connects namespace `nsid` through every address of `opts->traddr` (a
/// comma-separated list, each `host`, `host:port` or `[v6]:port`; `trsvcid` for
/// entries without a port): one controller per path, ANA-aware path choice and
/// failover (see the header). At least one path must connect.
///
/// # Safety
/// As [`sluice_connect`].
#[no_mangle]
pub unsafe extern "C" fn sluice_connect_multipath(
    opts: *const sluice_connect_options,
    nsid: u32,
    out: *mut *mut SluiceController,
) -> c_int {
    ffi_call(
        "sluice_connect_multipath",
        || {},
        || {
            if out.is_null() {
                return Err(FfiError::invalid("out is NULL"));
            }
            // SAFETY: `out` is non-NULL and writable per the contract.
            unsafe { out.write(std::ptr::null_mut()) };
            // SAFETY: `opts` is NULL or a valid options struct per the contract.
            let opts = unsafe { opts.as_ref() }.ok_or_else(|| FfiError::invalid("opts is NULL"))?;
            if nsid == 0 || nsid == u32::MAX {
                return Err(FfiError::invalid(format!("namespace id {nsid} is not a valid I/O namespace")));
            }
            let addresses = addresses_of(opts)?;
            let (template, requested_max_transfer) = build_options(opts, addresses[0])?;
            let paths = addresses.into_iter().map(|address| ConnectOptions { address, ..template.clone() }).collect();
            let paths = client::Paths::Multi(client::connect_multipath(paths, nsid)?);
            // SAFETY: `out` is non-NULL and writable per the contract.
            unsafe { publish_controller(paths, requested_max_transfer, out) };
            Ok(0)
        },
    )
}

/// Wraps connected paths in a controller handle and writes it to `out`.
///
/// # Safety
/// `out` is non-NULL and writable.
unsafe fn publish_controller(paths: client::Paths, requested_max_transfer: u32, out: *mut *mut SluiceController) {
    let max_transfer_bytes = paths.max_transfer_bytes(requested_max_transfer);
    let shared = Arc::new(Shared { paths, geometry: Mutex::new(HashMap::new()), max_transfer_bytes });
    let handle = Box::into_raw(Box::new(SluiceController { shared }));
    // SAFETY: per this function's contract.
    unsafe { out.write(handle) };
}

/// Number of I/O queues the controller granted (>= 1), or a negative errno.
///
/// # Safety
/// `ctrl` is NULL or a live controller handle.
#[no_mangle]
pub unsafe extern "C" fn sluice_controller_io_queue_count(ctrl: *mut SluiceController) -> c_int {
    ffi_call(
        "sluice_controller_io_queue_count",
        || {},
        || {
            // SAFETY: per the contract; only shared access is needed.
            let ctrl = unsafe { handle(ctrl, "ctrl") }?;
            Ok(to_int(ctrl.shared.paths.io_queue_count()))
        },
    )
}

/// Size (in blocks) and block size of namespace `nsid`.
///
/// # Safety
/// `ctrl` is NULL or a live controller handle; `blocks` and `block_size` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_controller_namespace_info(
    ctrl: *mut SluiceController,
    nsid: u32,
    blocks: *mut u64,
    block_size: *mut u32,
) -> c_int {
    ffi_call(
        "sluice_controller_namespace_info",
        || {},
        || {
            // SAFETY: per the contract.
            let ctrl = unsafe { handle(ctrl, "ctrl") }?;
            let geometry = ctrl.shared.geometry(nsid)?;
            // SAFETY: each output pointer is NULL or writable per the contract.
            unsafe {
                if let Some(blocks) = blocks.as_mut() {
                    *blocks = geometry.blocks;
                }
                if let Some(block_size) = block_size.as_mut() {
                    *block_size = geometry.block_size;
                }
            }
            Ok(0)
        },
    )
}

/// Takes I/O queue `index` (0-based) for the calling thread; each queue can be
/// taken once.
///
/// # Safety
/// `ctrl` is NULL or a live controller handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn sluice_take_queue(
    ctrl: *mut SluiceController,
    index: c_uint,
    out: *mut *mut SluiceQueue,
) -> c_int {
    ffi_call(
        "sluice_take_queue",
        || {},
        || {
            if out.is_null() {
                return Err(FfiError::invalid("out is NULL"));
            }
            // SAFETY: `out` is non-NULL and writable per the contract.
            unsafe { out.write(std::ptr::null_mut()) };
            // SAFETY: per the contract.
            let ctrl = unsafe { handle(ctrl, "ctrl") }?;
            let count = ctrl.shared.paths.io_queue_count();
            if index as usize >= count {
                return Err(FfiError::invalid(format!(
                    "queue index {index} out of range: the controller has {count} I/O queue(s)"
                )));
            }
            let queue = ctrl
                .shared
                .paths
                .take_queue(index as usize)
                .ok_or_else(|| FfiError::new(libc::EBUSY, format!("I/O queue {index} was already taken")))?;
            let mut core = QueueCore::new(queue, ctrl.shared.max_transfer_bytes);
            let caller_memory = Arc::new(CallerMemory::new());
            core.deliver_reads_to(caller_memory.clone());
            core.lend_writes_from(caller_memory.clone());
            let queue = SluiceQueue {
                writes_closer: CloseWrites(caller_memory.clone()),
                caller_memory,
                core,
                shared: ctrl.shared.clone(),
                geometry: HashMap::new(),
                completions: Vec::new(),
                poisoned: false,
            };
            // SAFETY: as above.
            unsafe { out.write(Box::into_raw(Box::new(queue))) };
            Ok(0)
        },
    )
}

/// NVMe commands the queue holds in flight at most.
///
/// # Safety
/// `q` is NULL or a live queue handle.
#[no_mangle]
pub unsafe extern "C" fn sluice_queue_depth(q: *mut SluiceQueue) -> c_int {
    ffi_call(
        "sluice_queue_depth",
        || {},
        || {
            // SAFETY: per the contract.
            let q = unsafe { handle(q, "q") }?;
            Ok(to_int(q.core.depth()))
        },
    )
}

/// Requests submitted whose completion sluice_reap has not returned yet.
///
/// # Safety
/// `q` is NULL or a live queue handle.
#[no_mangle]
pub unsafe extern "C" fn sluice_queue_outstanding(q: *mut SluiceQueue) -> c_int {
    ffi_call(
        "sluice_queue_outstanding",
        || {},
        || {
            // SAFETY: per the contract.
            let q = unsafe { handle(q, "q") }?;
            Ok(to_int(q.core.requests_in_flight()))
        },
    )
}

/// Runs `body` on queue `q`, marking the queue failed if it panics.
///
/// # Safety
/// `q` is NULL or a live queue handle not used concurrently by another thread.
unsafe fn with_queue(
    name: &str,
    q: *mut SluiceQueue,
    body: impl FnOnce(&mut SluiceQueue) -> FfiResult<c_int>,
) -> c_int {
    let on_panic = || {
        // SAFETY: runs after `body` has unwound, so no other reference to the queue
        // is alive; `q` is live per the contract (checked non-NULL by the body first).
        if let Some(q) = unsafe { q.as_mut() } {
            q.poisoned = true;
        }
    };
    ffi_call(name, on_panic, || {
        // SAFETY: per the contract.
        let q = unsafe { handle(q, "q") }?;
        q.check()?;
        body(q)
    })
}

/// Queues a read of `blocks` blocks at `lba` of namespace `nsid` into `buf`.
///
/// # Safety
/// `q` is a live queue handle; `buf` is valid for writes of blocks * block size bytes
/// until sluice_reap returns this request's completion, or sluice_queue_release.
#[no_mangle]
pub unsafe extern "C" fn sluice_submit_read(
    q: *mut SluiceQueue,
    nsid: u32,
    lba: u64,
    blocks: u32,
    buf: *mut c_void,
    user_tag: u64,
) -> c_int {
    let body = |q: &mut SluiceQueue| {
        if buf.is_null() {
            return Err(FfiError::invalid("buf is NULL"));
        }
        let geometry = q.geometry(nsid)?;
        q.core.submit_read(nsid, geometry, lba, blocks, buf as usize, user_tag)?;
        Ok(0)
    };
    // SAFETY: `q` is NULL or a live queue handle used by this thread only, per the
    // contract above.
    unsafe { with_queue("sluice_submit_read", q, body) }
}

/// Queues a write of `blocks` blocks from `buf` (copied before this returns).
///
/// # Safety
/// `q` is a live queue handle; `buf` is readable for blocks * block size bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_submit_write(
    q: *mut SluiceQueue,
    nsid: u32,
    lba: u64,
    blocks: u32,
    buf: *const c_void,
    fua: c_int,
    user_tag: u64,
) -> c_int {
    let body = |q: &mut SluiceQueue| {
        let (geometry, bytes) = q.write_extent(nsid, blocks, buf)?;
        // SAFETY: the caller guarantees `buf` is readable for blocks * block size
        // bytes for the duration of this call; the slice is copied before return.
        let data = unsafe { std::slice::from_raw_parts(buf as *const u8, bytes) };
        q.core.submit_write(nsid, geometry, lba, data, fua != 0, user_tag)?;
        Ok(0)
    };
    // SAFETY: `q` is NULL or a live queue handle used by this thread only, per the
    // contract above.
    unsafe { with_queue("sluice_submit_write", q, body) }
}

/// Queues a write of `blocks` blocks from `buf`, sent straight from `buf` (not
/// copied).
///
/// # Safety
/// `q` is a live queue handle; `buf` is readable for blocks * block size bytes and
/// stays valid and unchanged until sluice_reap returns this request's completion, or
/// until sluice_queue_release returns.
#[no_mangle]
pub unsafe extern "C" fn sluice_submit_write_in_place(
    q: *mut SluiceQueue,
    nsid: u32,
    lba: u64,
    blocks: u32,
    buf: *const c_void,
    fua: c_int,
    user_tag: u64,
) -> c_int {
    let body = |q: &mut SluiceQueue| {
        let (geometry, bytes) = q.write_extent(nsid, blocks, buf)?;
        // SAFETY: the caller guarantees `buf` is readable for blocks * block size
        // bytes until the request completes (see above); the queue keeps only its
        // address, and reads it through CallerMemory while that holds.
        let data = unsafe { std::slice::from_raw_parts(buf as *const u8, bytes) };
        q.core.submit_write_in_place(nsid, geometry, lba, data, fua != 0, user_tag)?;
        Ok(0)
    };
    // SAFETY: `q` is NULL or a live queue handle used by this thread only, per the
    // contract above.
    unsafe { with_queue("sluice_submit_write_in_place", q, body) }
}

/// Queues a Flush of namespace `nsid`.
///
/// # Safety
/// `q` is a live queue handle.
#[no_mangle]
pub unsafe extern "C" fn sluice_submit_flush(q: *mut SluiceQueue, nsid: u32, user_tag: u64) -> c_int {
    let body = |q: &mut SluiceQueue| {
        q.geometry(nsid)?;
        q.core.submit_flush(nsid, user_tag)?;
        Ok(0)
    };
    // SAFETY: `q` is NULL or a live queue handle used by this thread only, per the
    // contract above.
    unsafe { with_queue("sluice_submit_flush", q, body) }
}

/// Queues a deallocate (Dataset Management, trim) of `blocks` blocks at `lba`.
///
/// # Safety
/// `q` is a live queue handle.
#[no_mangle]
pub unsafe extern "C" fn sluice_submit_trim(
    q: *mut SluiceQueue,
    nsid: u32,
    lba: u64,
    blocks: u64,
    user_tag: u64,
) -> c_int {
    let body = |q: &mut SluiceQueue| {
        let geometry = q.geometry(nsid)?;
        q.core.submit_trim(nsid, geometry, lba, blocks, user_tag)?;
        Ok(0)
    };
    // SAFETY: `q` is NULL or a live queue handle used by this thread only, per the
    // contract above.
    unsafe { with_queue("sluice_submit_trim", q, body) }
}

/// Waits for at least `min` (at most `max`) completions, or `timeout_ms` (< 0: no
/// limit, 0: poll). Returns the number written to `out`.
///
/// # Safety
/// `q` is a live queue handle; `out` is writable for `max` completions.
#[no_mangle]
pub unsafe extern "C" fn sluice_reap(
    q: *mut SluiceQueue,
    min: c_uint,
    max: c_uint,
    timeout_ms: c_int,
    out: *mut sluice_completion,
) -> c_int {
    let body = |q: &mut SluiceQueue| {
        if max == 0 {
            return Ok(0);
        }
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        let max = (max as usize).min(c_int::MAX as usize);
        let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        let mut completions = std::mem::take(&mut q.completions);
        completions.clear();
        let result = q.core.reap(min as usize, max, timeout, &mut CallerBuffers, &mut completions);
        for (index, completion) in completions.iter().enumerate() {
            let status = completion.status;
            let entry = sluice_completion {
                user_tag: completion.user_tag,
                error: completion.error,
                sct: status.code_type(),
                sc: status.code(),
                dnr: u8::from(status.do_not_retry()),
                reserved: 0,
            };
            // SAFETY: `out` is writable for `max` entries and index < max.
            unsafe { out.add(index).write(entry) };
        }
        let count = completions.len();
        q.completions = completions;
        result?;
        Ok(to_int(count))
    };
    // SAFETY: `q` is NULL or a live queue handle used by this thread only, per the
    // contract above.
    unsafe { with_queue("sluice_reap", q, body) }
}

/// Releases a queue. Outstanding requests are abandoned: their buffers are never
/// touched after this returns. NULL is a no-op.
///
/// # Safety
/// `q` is NULL or a live queue handle, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn sluice_queue_release(q: *mut SluiceQueue) -> c_int {
    ffi_call(
        "sluice_queue_release",
        || {},
        || {
            if q.is_null() {
                return Ok(0);
            }
            // SAFETY: `q` came from Box::into_raw in sluice_take_queue and is released
            // once, per the contract.
            drop(unsafe { Box::from_raw(q) });
            Ok(0)
        },
    )
}

/// Disconnects and frees a controller. Fails with -EBUSY (the handle stays valid)
/// while any of its queues is not released. NULL is a no-op.
///
/// # Safety
/// `ctrl` is NULL or a live controller handle, not used again after success.
#[no_mangle]
pub unsafe extern "C" fn sluice_disconnect(ctrl: *mut SluiceController) -> c_int {
    ffi_call(
        "sluice_disconnect",
        || {},
        || {
            if ctrl.is_null() {
                return Ok(0);
            }
            // SAFETY: live handle per the contract.
            let held = Arc::strong_count(&unsafe { &*ctrl }.shared) - 1;
            if held > 0 {
                return Err(FfiError::new(libc::EBUSY, format!("{held} queue(s) of this controller are not released")));
            }
            // SAFETY: `ctrl` came from Box::into_raw in sluice_connect; from here on the
            // handle is consumed (also when the disconnect itself reports an error).
            let ctrl = unsafe { Box::from_raw(ctrl) };
            let shared = Arc::try_unwrap(ctrl.shared)
                .map_err(|_| FfiError::new(libc::EBUSY, "a queue was taken concurrently with sluice_disconnect"))?;
            shared.paths.disconnect()?;
            Ok(0)
        },
    )
}

/// This thread's last error message ("" if none).
#[no_mangle]
pub extern "C" fn sluice_last_error() -> *const c_char {
    last_error_ptr()
}

/// The library version, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn sluice_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traddr_lists_every_form_of_address() {
        let addresses = path_addresses("127.0.0.1:4421, 127.0.0.2,[::1]:4423,::1", 4420).unwrap();
        let expected: Vec<SocketAddr> = ["127.0.0.1:4421", "127.0.0.2:4420", "[::1]:4423", "[::1]:4420"]
            .iter()
            .map(|text| text.parse().unwrap())
            .collect();
        assert_eq!(addresses, expected);
        assert_eq!(path_addresses("localhost:4430", 4420).unwrap()[0].port(), 4430);
        assert_eq!(path_addresses("127.0.0.1,", 4420).unwrap_err().errno, libc::EINVAL);
        assert_eq!(path_addresses("127.0.0.1:port", 4420).unwrap_err().errno, libc::EINVAL);
    }
}

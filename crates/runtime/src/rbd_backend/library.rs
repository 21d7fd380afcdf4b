//! librados and librbd, loaded at run time.
//!
//! `sluice` must start and serve other backends on a machine without Ceph, so the two
//! libraries are opened with `dlopen` (through `libloading`) the first time an `rbd`
//! backend is configured, never linked. Only the functions the backend uses are looked
//! up; their signatures are those of Ceph 16.2's `rados/librados.h` and `rbd/librbd.h`
//! (stable C ABI since long before that release).

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// `rados_t`: one cluster connection.
pub(crate) type Rados = *mut c_void;
/// `rados_ioctx_t`: a pool context of a cluster connection.
pub(crate) type IoContext = *mut c_void;
/// `rbd_image_t`: an open image.
pub(crate) type Image = *mut c_void;
/// `rbd_completion_t`: one asynchronous request.
pub(crate) type Completion = *mut c_void;
/// `rados_write_op_t`: a compound write applied to one object atomically.
pub(crate) type WriteOperation = *mut c_void;
/// `rbd_image_options_t`: options for creating or cloning an image.
pub(crate) type ImageOptions = *mut c_void;
/// `RBD_IMAGE_OPTION_CLONE_FORMAT` (librbd.h): 1 (the snapshot must be protected) or 2.
pub(crate) const IMAGE_OPTION_CLONE_FORMAT: c_int = 12;
/// `RBD_SNAP_NAMESPACE_TYPE_USER`: a snapshot someone took by name (not a group's,
/// a mirror's, or one in the trash).
pub(crate) const SNAPSHOT_NAMESPACE_USER: c_int = 0;

/// `rbd_snap_info_t`: one snapshot of an image, as `rbd_snap_list` fills it.
#[repr(C)]
pub(crate) struct SnapshotInfo {
    pub id: u64,
    pub size: u64,
    pub name: *const c_char,
}
/// `rbd_linked_image_spec_t`: an image a clone is linked to, as `rbd_get_parent` fills
/// it (freed with `rbd_linked_image_spec_cleanup`).
#[repr(C)]
pub(crate) struct LinkedImageSpec {
    pub pool_name: *mut c_char,
    pub pool_namespace: *mut c_char,
    pub image_id: *mut c_char,
    pub image_name: *mut c_char,
    pub trash: bool,
}
/// `rbd_snap_spec_t`: a snapshot, as `rbd_get_parent` fills it (freed with
/// `rbd_snap_spec_cleanup`).
#[repr(C)]
pub(crate) struct SnapshotSpec {
    pub id: u64,
    pub namespace_type: c_int,
    pub name: *mut c_char,
}
/// `struct notify_timeout_t` (rados_types.h): a watcher that did not acknowledge.
#[repr(C)]
pub(crate) struct NotifyTimeout {
    /// The watcher client's global id (its entity is "client.<id>").
    pub notifier_id: u64,
    pub cookie: u64,
}
/// `struct notify_ack_t` (rados_types.h): a watcher that acknowledged, with its reply.
#[repr(C)]
pub(crate) struct NotifyAck {
    /// The watcher client's global id.
    pub notifier_id: u64,
    pub cookie: u64,
    pub payload: *mut c_char,
    pub payload_length: u64,
}
/// `rados_watchcb2_t`: called on a librados thread for each notify on a watched object.
pub(crate) type WatchCallback = unsafe extern "C" fn(
    argument: *mut c_void,
    notify_id: u64,
    handle: u64,
    notifier_id: u64,
    data: *mut c_void,
    length: usize,
);
/// `rados_watcherrcb_t`: called on a librados thread when a watch is lost.
pub(crate) type WatchErrorCallback = unsafe extern "C" fn(argument: *mut c_void, cookie: u64, error: c_int);
/// `rbd_callback_t`: called on a librbd thread when a request completes.
pub(crate) type Callback = unsafe extern "C" fn(completion: Completion, argument: *mut c_void);
/// librbd_progress_fn_t: progress of a long image operation; non-zero cancels it.
pub(crate) type ProgressCallback = unsafe extern "C" fn(offset: u64, total: u64, argument: *mut c_void) -> c_int;

/// `LIBRADOS_OP_FLAG_FADVISE_FUA`: ask the OSD to make the write durable before it
/// acknowledges (it always does for replicated pools; the flag keeps the intent).
pub(crate) const OP_FLAG_FADVISE_FUA: c_int = 0x80;

/// The shared objects tried, in order (the Debian packages librados2 and librbd1).
const RADOS_SONAME: &str = "librados.so.2";
const RBD_SONAME: &str = "librbd.so.1";

/// What to install when the libraries are missing (shown in config and serve errors).
pub const INSTALL_HINT: &str =
    "install Ceph's client libraries (Debian/Ubuntu: apt-get install librbd1 librados2; RHEL/Fedora: dnf install librbd1)";

/// The function table. Function pointers stay valid while the `Library` values they
/// came from are loaded, and those are kept here for the life of the process.
pub(crate) struct Library {
    pub rados_create: unsafe extern "C" fn(cluster: *mut Rados, id: *const c_char) -> c_int,
    pub rados_conf_read_file: unsafe extern "C" fn(cluster: Rados, path: *const c_char) -> c_int,
    pub rados_conf_parse_env: unsafe extern "C" fn(cluster: Rados, variable: *const c_char) -> c_int,
    pub rados_conf_set: unsafe extern "C" fn(cluster: Rados, option: *const c_char, value: *const c_char) -> c_int,
    pub rados_conf_get:
        unsafe extern "C" fn(cluster: Rados, option: *const c_char, buffer: *mut c_char, length: usize) -> c_int,
    pub rados_connect: unsafe extern "C" fn(cluster: Rados) -> c_int,
    pub rados_shutdown: unsafe extern "C" fn(cluster: Rados),
    pub rados_ioctx_create: unsafe extern "C" fn(cluster: Rados, pool: *const c_char, io: *mut IoContext) -> c_int,
    pub rados_ioctx_destroy: unsafe extern "C" fn(io: IoContext),
    pub rbd_create: unsafe extern "C" fn(io: IoContext, name: *const c_char, size: u64, order: *mut c_int) -> c_int,
    pub rbd_open:
        unsafe extern "C" fn(io: IoContext, name: *const c_char, image: *mut Image, snapshot: *const c_char) -> c_int,
    pub rbd_close: unsafe extern "C" fn(image: Image) -> c_int,
    pub rbd_get_size: unsafe extern "C" fn(image: Image, size: *mut u64) -> c_int,
    pub rbd_get_id: unsafe extern "C" fn(image: Image, id: *mut c_char, length: usize) -> c_int,
    pub rbd_resize2: unsafe extern "C" fn(
        image: Image,
        size: u64,
        allow_shrink: bool,
        progress: ProgressCallback,
        argument: *mut c_void,
    ) -> c_int,
    pub rbd_aio_create_completion:
        unsafe extern "C" fn(argument: *mut c_void, callback: Callback, completion: *mut Completion) -> c_int,
    pub rbd_aio_get_return_value: unsafe extern "C" fn(completion: Completion) -> isize,
    pub rbd_aio_release: unsafe extern "C" fn(completion: Completion),
    pub rbd_aio_read:
        unsafe extern "C" fn(image: Image, offset: u64, length: usize, buffer: *mut c_char, c: Completion) -> c_int,
    pub rbd_aio_compare_and_write: unsafe extern "C" fn(
        image: Image,
        offset: u64,
        length: usize,
        compare: *const c_char,
        buffer: *const c_char,
        completion: Completion,
        mismatch_offset: *mut u64,
        flags: c_int,
    ) -> isize,
    pub rbd_aio_write2: unsafe extern "C" fn(
        image: Image,
        offset: u64,
        length: usize,
        buffer: *const c_char,
        c: Completion,
        op_flags: c_int,
    ) -> c_int,
    pub rbd_aio_flush: unsafe extern "C" fn(image: Image, c: Completion) -> c_int,
    pub rbd_aio_discard: unsafe extern "C" fn(image: Image, offset: u64, length: u64, c: Completion) -> c_int,
    pub rbd_aio_write_zeroes: unsafe extern "C" fn(
        image: Image,
        offset: u64,
        length: usize,
        c: Completion,
        zero_flags: c_int,
        op_flags: c_int,
    ) -> c_int,
    pub rados_lock_exclusive: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        name: *const c_char,
        cookie: *const c_char,
        description: *const c_char,
        duration: *mut libc::timeval,
        flags: u8,
    ) -> c_int,
    pub rados_unlock:
        unsafe extern "C" fn(io: IoContext, object: *const c_char, name: *const c_char, cookie: *const c_char) -> c_int,
    pub rados_break_lock: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        name: *const c_char,
        client: *const c_char,
        cookie: *const c_char,
    ) -> c_int,
    pub rados_list_lockers: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        name: *const c_char,
        exclusive: *mut c_int,
        tag: *mut c_char,
        tag_length: *mut usize,
        clients: *mut c_char,
        clients_length: *mut usize,
        cookies: *mut c_char,
        cookies_length: *mut usize,
        addresses: *mut c_char,
        addresses_length: *mut usize,
    ) -> isize,
    pub rados_getxattr: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        name: *const c_char,
        buffer: *mut c_char,
        length: usize,
    ) -> c_int,
    pub rados_setxattr: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        name: *const c_char,
        buffer: *const c_char,
        length: usize,
    ) -> c_int,
    pub rados_blocklist_add: unsafe extern "C" fn(cluster: Rados, address: *mut c_char, expire_seconds: u32) -> c_int,
    pub rados_getaddrs: unsafe extern "C" fn(cluster: Rados, addresses: *mut *mut c_char) -> c_int,
    pub rados_buffer_free: unsafe extern "C" fn(buffer: *mut c_char),
    pub rados_get_instance_id: unsafe extern "C" fn(cluster: Rados) -> u64,
    pub rados_wait_for_latest_osdmap: unsafe extern "C" fn(cluster: Rados) -> c_int,
    pub rados_read: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        buffer: *mut c_char,
        length: usize,
        offset: u64,
    ) -> c_int,
    pub rados_create_write_op: unsafe extern "C" fn() -> WriteOperation,
    pub rados_release_write_op: unsafe extern "C" fn(operation: WriteOperation),
    pub rados_write_op_create:
        unsafe extern "C" fn(operation: WriteOperation, exclusive: c_int, category: *const c_char),
    pub rados_write_op_cmpxattr: unsafe extern "C" fn(
        operation: WriteOperation,
        name: *const c_char,
        comparison: u8,
        value: *const c_char,
        length: usize,
    ),
    pub rados_write_op_setxattr:
        unsafe extern "C" fn(operation: WriteOperation, name: *const c_char, value: *const c_char, length: usize),
    pub rados_write_op_write_full:
        unsafe extern "C" fn(operation: WriteOperation, buffer: *const c_char, length: usize),
    pub rados_write_op_operate: unsafe extern "C" fn(
        operation: WriteOperation,
        io: IoContext,
        object: *const c_char,
        mtime: *mut libc::time_t,
        flags: c_int,
    ) -> c_int,
    pub rados_watch3: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        cookie: *mut u64,
        callback: WatchCallback,
        error_callback: WatchErrorCallback,
        timeout_seconds: u32,
        argument: *mut c_void,
    ) -> c_int,
    pub rados_unwatch2: unsafe extern "C" fn(io: IoContext, cookie: u64) -> c_int,
    pub rados_watch_check: unsafe extern "C" fn(io: IoContext, cookie: u64) -> c_int,
    pub rados_watch_flush: unsafe extern "C" fn(cluster: Rados) -> c_int,
    pub rados_notify2: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        buffer: *const c_char,
        length: c_int,
        timeout_ms: u64,
        reply: *mut *mut c_char,
        reply_length: *mut usize,
    ) -> c_int,
    pub rados_decode_notify_response: unsafe extern "C" fn(
        reply: *mut c_char,
        reply_length: usize,
        acks: *mut *mut NotifyAck,
        ack_count: *mut usize,
        timeouts: *mut *mut NotifyTimeout,
        timeout_count: *mut usize,
    ) -> c_int,
    pub rados_free_notify_response:
        unsafe extern "C" fn(acks: *mut NotifyAck, ack_count: usize, timeouts: *mut NotifyTimeout),
    pub rados_notify_ack: unsafe extern "C" fn(
        io: IoContext,
        object: *const c_char,
        notify_id: u64,
        cookie: u64,
        buffer: *const c_char,
        length: c_int,
    ) -> c_int,
    pub rbd_remove: unsafe extern "C" fn(io: IoContext, name: *const c_char) -> c_int,
    pub rbd_snap_create: unsafe extern "C" fn(image: Image, name: *const c_char) -> c_int,
    pub rbd_snap_remove: unsafe extern "C" fn(image: Image, name: *const c_char) -> c_int,
    /// Which namespace a snapshot is in (`rbd_snap_namespace_type_t`): user
    /// snapshots are [`SNAPSHOT_NAMESPACE_USER`]; a removed snapshot whose format 2
    /// clones still read from it waits in the trash namespace, under a generated name.
    pub rbd_snap_get_namespace_type:
        unsafe extern "C" fn(image: Image, snap_id: u64, namespace_type: *mut c_int) -> c_int,
    pub rbd_snap_list: unsafe extern "C" fn(image: Image, snapshots: *mut SnapshotInfo, max: *mut c_int) -> c_int,
    pub rbd_snap_list_end: unsafe extern "C" fn(snapshots: *mut SnapshotInfo),
    pub rbd_snap_get_timestamp:
        unsafe extern "C" fn(image: Image, snapshot_id: u64, timestamp: *mut libc::timespec) -> c_int,
    pub rbd_image_options_create: unsafe extern "C" fn(options: *mut ImageOptions),
    pub rbd_image_options_destroy: unsafe extern "C" fn(options: ImageOptions),
    pub rbd_image_options_set_uint64: unsafe extern "C" fn(options: ImageOptions, option: c_int, value: u64) -> c_int,
    pub rbd_clone3: unsafe extern "C" fn(
        parent_io: IoContext,
        parent_name: *const c_char,
        parent_snapshot: *const c_char,
        child_io: IoContext,
        child_name: *const c_char,
        options: ImageOptions,
    ) -> c_int,
    /// The image's parent and its snapshot; ENOENT when it has none (`rbd_get_overlap`
    /// answers 0 bytes then, the same as for a clone that reads nothing from its parent).
    pub rbd_get_parent:
        unsafe extern "C" fn(image: Image, parent: *mut LinkedImageSpec, snapshot: *mut SnapshotSpec) -> c_int,
    pub rbd_linked_image_spec_cleanup: unsafe extern "C" fn(spec: *mut LinkedImageSpec),
    pub rbd_snap_spec_cleanup: unsafe extern "C" fn(spec: *mut SnapshotSpec),
    /// `rbd_flatten_with_progress`: the callback is called as objects are copied;
    /// a negative return stops the copy (no new object is started) and is returned.
    pub rbd_flatten_with_progress:
        unsafe extern "C" fn(image: Image, progress: ProgressCallback, argument: *mut c_void) -> c_int,
    _rados: libloading::Library,
    _rbd: libloading::Library,
}

static LIBRARY: OnceLock<Result<Library, String>> = OnceLock::new();

/// The loaded libraries, or why they could not be loaded (with what to install).
/// Loaded once per process; later calls return the same answer.
pub(crate) fn library() -> Result<&'static Library, String> {
    LIBRARY.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// True when librbd and librados can be loaded here.
pub fn available() -> bool {
    library().is_ok()
}

fn open(soname: &str) -> Result<libloading::Library, String> {
    // SAFETY: loading a shared object runs its initialisers; librados and librbd are
    // the system's Ceph client libraries, whose initialisers only set up their own
    // globals.
    unsafe { libloading::Library::new(soname) }
        .map_err(|error| format!("cannot load {soname} ({error}); {INSTALL_HINT}"))
}

fn load() -> Result<Library, String> {
    let rados = open(RADOS_SONAME)?;
    let rbd = open(RBD_SONAME)?;
    macro_rules! symbol {
        ($library:expr, $name:ident) => {{
            // SAFETY: the type of the field this initialises is the C prototype of
            // `$name` in Ceph's headers; the pointer is used only while the library
            // stays loaded (it is stored next to it, for the life of the process).
            let symbol = unsafe { $library.get(concat!(stringify!($name), "\0").as_bytes()) }.map_err(|error| {
                format!("{} lacks {} ({error}); {INSTALL_HINT}", stringify!($library), stringify!($name))
            })?;
            *symbol
        }};
    }
    Ok(Library {
        rados_create: symbol!(rados, rados_create),
        rados_conf_read_file: symbol!(rados, rados_conf_read_file),
        rados_conf_parse_env: symbol!(rados, rados_conf_parse_env),
        rados_conf_set: symbol!(rados, rados_conf_set),
        rados_conf_get: symbol!(rados, rados_conf_get),
        rados_connect: symbol!(rados, rados_connect),
        rados_shutdown: symbol!(rados, rados_shutdown),
        rados_ioctx_create: symbol!(rados, rados_ioctx_create),
        rados_ioctx_destroy: symbol!(rados, rados_ioctx_destroy),
        rados_lock_exclusive: symbol!(rados, rados_lock_exclusive),
        rados_unlock: symbol!(rados, rados_unlock),
        rados_break_lock: symbol!(rados, rados_break_lock),
        rados_list_lockers: symbol!(rados, rados_list_lockers),
        rados_getxattr: symbol!(rados, rados_getxattr),
        rados_setxattr: symbol!(rados, rados_setxattr),
        rados_blocklist_add: symbol!(rados, rados_blocklist_add),
        rados_getaddrs: symbol!(rados, rados_getaddrs),
        rados_buffer_free: symbol!(rados, rados_buffer_free),
        rados_get_instance_id: symbol!(rados, rados_get_instance_id),
        rados_wait_for_latest_osdmap: symbol!(rados, rados_wait_for_latest_osdmap),
        rados_read: symbol!(rados, rados_read),
        rados_create_write_op: symbol!(rados, rados_create_write_op),
        rados_release_write_op: symbol!(rados, rados_release_write_op),
        rados_write_op_create: symbol!(rados, rados_write_op_create),
        rados_write_op_cmpxattr: symbol!(rados, rados_write_op_cmpxattr),
        rados_write_op_setxattr: symbol!(rados, rados_write_op_setxattr),
        rados_write_op_write_full: symbol!(rados, rados_write_op_write_full),
        rados_write_op_operate: symbol!(rados, rados_write_op_operate),
        rados_watch3: symbol!(rados, rados_watch3),
        rados_unwatch2: symbol!(rados, rados_unwatch2),
        rados_watch_check: symbol!(rados, rados_watch_check),
        rados_watch_flush: symbol!(rados, rados_watch_flush),
        rados_notify2: symbol!(rados, rados_notify2),
        rados_notify_ack: symbol!(rados, rados_notify_ack),
        rados_decode_notify_response: symbol!(rados, rados_decode_notify_response),
        rados_free_notify_response: symbol!(rados, rados_free_notify_response),
        rbd_create: symbol!(rbd, rbd_create),
        rbd_open: symbol!(rbd, rbd_open),
        rbd_close: symbol!(rbd, rbd_close),
        rbd_get_size: symbol!(rbd, rbd_get_size),
        rbd_get_id: symbol!(rbd, rbd_get_id),
        rbd_resize2: symbol!(rbd, rbd_resize2),
        rbd_aio_create_completion: symbol!(rbd, rbd_aio_create_completion),
        rbd_aio_get_return_value: symbol!(rbd, rbd_aio_get_return_value),
        rbd_aio_release: symbol!(rbd, rbd_aio_release),
        rbd_aio_read: symbol!(rbd, rbd_aio_read),
        rbd_aio_write2: symbol!(rbd, rbd_aio_write2),
        rbd_aio_compare_and_write: symbol!(rbd, rbd_aio_compare_and_write),
        rbd_aio_flush: symbol!(rbd, rbd_aio_flush),
        rbd_aio_discard: symbol!(rbd, rbd_aio_discard),
        rbd_aio_write_zeroes: symbol!(rbd, rbd_aio_write_zeroes),
        rbd_remove: symbol!(rbd, rbd_remove),
        rbd_snap_create: symbol!(rbd, rbd_snap_create),
        rbd_snap_remove: symbol!(rbd, rbd_snap_remove),
        rbd_snap_get_namespace_type: symbol!(rbd, rbd_snap_get_namespace_type),
        rbd_snap_list: symbol!(rbd, rbd_snap_list),
        rbd_snap_list_end: symbol!(rbd, rbd_snap_list_end),
        rbd_snap_get_timestamp: symbol!(rbd, rbd_snap_get_timestamp),
        rbd_image_options_create: symbol!(rbd, rbd_image_options_create),
        rbd_image_options_destroy: symbol!(rbd, rbd_image_options_destroy),
        rbd_image_options_set_uint64: symbol!(rbd, rbd_image_options_set_uint64),
        rbd_clone3: symbol!(rbd, rbd_clone3),
        rbd_get_parent: symbol!(rbd, rbd_get_parent),
        rbd_linked_image_spec_cleanup: symbol!(rbd, rbd_linked_image_spec_cleanup),
        rbd_snap_spec_cleanup: symbol!(rbd, rbd_snap_spec_cleanup),
        rbd_flatten_with_progress: symbol!(rbd, rbd_flatten_with_progress),
        _rados: rados,
        _rbd: rbd,
    })
}

/// `strerror` for a negative errno from librados/librbd, e.g. "Connection timed out".
pub(crate) fn describe_errno(code: i64) -> String {
    let errno = i32::try_from(code.unsigned_abs()).unwrap_or(i32::MAX);
    std::io::Error::from_raw_os_error(errno).to_string()
}

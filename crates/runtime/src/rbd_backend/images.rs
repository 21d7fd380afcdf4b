//! Image life cycle through librbd: removing an image, its snapshots, and clones of
//! a snapshot (what a CSI driver needs besides serving the image).
//!
//! Every function here blocks until the cluster answers (or the op timeout), so they
//! run on the management thread, never on an I/O thread. Each is idempotent the way a
//! retrying caller needs: creating what exists reports `false` instead of failing,
//! removing what is missing reports `false` too.
//!
//! Clones are made with clone format 2 (Ceph Mimic and later): the parent snapshot
//! need not be protected, and a snapshot whose clones still exist can be removed (Ceph
//! moves it to the image's trash namespace until the last clone is gone). A clone is
//! served at once (librbd reads what it has not copied from the parent) and then
//! flattened ([`flatten_image`]), so that it shares no data with its parent: a volume
//! made from a snapshot outlives the snapshot and its source image, and the source can
//! be deleted once its own snapshots are gone and its clones are flattened.
//! Flattening copies the parent's allocated data, so it takes as long as copying the
//! image: the caller runs it where nothing waits for it.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::cluster::{connect, cstring, Cluster, ClusterSpec};
use super::errors::RbdError;
use super::library::{self, IoContext, SnapshotInfo as RawSnapshot};

/// One snapshot of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub name: String,
    /// librbd's snapshot id (grows with every snapshot of the image).
    pub id: u64,
    /// The image's size when the snapshot was taken.
    pub size_bytes: u64,
    /// When it was taken, in seconds since the Unix epoch (0: librbd did not say).
    pub created_unix_seconds: i64,
}

/// A pool context, destroyed when dropped.
struct Pool {
    cluster: Arc<Cluster>,
    io: IoContext,
    name: String,
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: `io` came from rados_ioctx_create and is destroyed once, here; every
        // image opened through it was closed first (`Image` borrows the pool).
        unsafe { (self.cluster.library.rados_ioctx_destroy)(self.io) };
    }
}

fn open_pool(spec: &ClusterSpec, pool: &str) -> Result<Pool, RbdError> {
    let cluster = connect(spec)?;
    let pool_c = cstring(pool, "pool")?;
    let mut io: IoContext = std::ptr::null_mut();
    // SAFETY: the cluster is connected; `io` is a valid out pointer; the name is
    // NUL-terminated and outlives the call.
    let code = unsafe { (cluster.library.rados_ioctx_create)(cluster.handle, pool_c.as_ptr(), &mut io) };
    if code == -libc::ENOENT {
        return Err(RbdError::PoolMissing { pool: pool.to_string(), cluster: spec.describe() });
    }
    if code < 0 {
        return Err(RbdError::Cluster {
            cluster: spec.describe(),
            step: format!("opening pool {pool:?}"),
            code: i64::from(code),
        });
    }
    Ok(Pool { cluster, io, name: pool.to_string() })
}

impl Pool {
    fn failed(&self, image: &str, step: &str, code: c_int) -> RbdError {
        RbdError::Image {
            image: format!("{}/{image}", self.name),
            cluster: self.cluster.spec.describe(),
            step: step.to_string(),
            code: i64::from(code),
        }
    }

    fn missing(&self, image: &str) -> RbdError {
        RbdError::ImageMissing {
            image: format!("{}/{image}", self.name),
            cluster: self.cluster.spec.describe(),
            will_create: false,
        }
    }

    /// Opens `image` (None: it does not exist).
    fn open(&self, image: &str) -> Result<Option<Image<'_>>, RbdError> {
        let name_c = cstring(image, "image")?;
        let mut handle: library::Image = std::ptr::null_mut();
        // SAFETY: `io` is live, `handle` a valid out pointer, the name NUL-terminated,
        // and a null snapshot name opens the image itself.
        let code = unsafe { (self.cluster.library.rbd_open)(self.io, name_c.as_ptr(), &mut handle, std::ptr::null()) };
        match code {
            0 => Ok(Some(Image { pool: self, handle, name: image.to_string() })),
            code if code == -libc::ENOENT => Ok(None),
            code => Err(self.failed(image, "opening the image", code)),
        }
    }
}

/// An open image, closed when dropped.
struct Image<'pool> {
    pool: &'pool Pool,
    handle: library::Image,
    name: String,
}

impl Drop for Image<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from rbd_open and is closed once, here.
        unsafe { (self.pool.cluster.library.rbd_close)(self.handle) };
    }
}

impl Image<'_> {
    fn snapshots(&self) -> Result<Vec<Snapshot>, RbdError> {
        let library = self.pool.cluster.library;
        let mut capacity: c_int = 16;
        loop {
            let mut raw: Vec<RawSnapshot> =
                (0..capacity).map(|_| RawSnapshot { id: 0, size: 0, name: std::ptr::null() }).collect();
            let mut count = capacity;
            // SAFETY: the image is open; `raw` holds `count` writable entries.
            let code = unsafe { (library.rbd_snap_list)(self.handle, raw.as_mut_ptr(), &mut count) };
            if code == -libc::ERANGE {
                // `count` now holds how many there are (+1 for the list's end marker).
                capacity = count.max(capacity.saturating_mul(2));
                continue;
            }
            if code < 0 {
                return Err(self.pool.failed(&self.name, "listing its snapshots", code));
            }
            let listed = usize::try_from(code).unwrap_or(0).min(raw.len());
            let mut snapshots = Vec::with_capacity(listed);
            for entry in &raw[..listed] {
                let mut namespace_type: c_int = library::SNAPSHOT_NAMESPACE_USER;
                // SAFETY: the image is open; `namespace_type` is a valid out pointer.
                let code = unsafe { (library.rbd_snap_get_namespace_type)(self.handle, entry.id, &mut namespace_type) };
                // Only snapshots taken by name are listed: one in the trash (removed,
                // its clones not yet copied) is no longer anyone's to use or remove.
                if code == 0 && namespace_type != library::SNAPSHOT_NAMESPACE_USER {
                    continue;
                }
                // SAFETY: rbd_snap_list filled `listed` entries whose names are
                // NUL-terminated strings it allocated, freed below by rbd_snap_list_end.
                let name = unsafe { CStr::from_ptr(entry.name) }.to_string_lossy().into_owned();
                let mut timestamp = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: the image is open; `timestamp` is a valid out pointer.
                let code = unsafe { (library.rbd_snap_get_timestamp)(self.handle, entry.id, &mut timestamp) };
                let created_unix_seconds = if code < 0 { 0 } else { timestamp.tv_sec };
                snapshots.push(Snapshot { name, id: entry.id, size_bytes: entry.size, created_unix_seconds });
            }
            // SAFETY: `raw` was filled by rbd_snap_list just now; this frees its names once.
            unsafe { (library.rbd_snap_list_end)(raw.as_mut_ptr()) };
            return Ok(snapshots);
        }
    }
}

/// The snapshots of `pool/image` (user snapshots; oldest first). A missing image is
/// [`RbdError::ImageMissing`].
pub fn list_snapshots(spec: &ClusterSpec, pool: &str, image: &str) -> Result<Vec<Snapshot>, RbdError> {
    storage::service::debug_assert_may_block("listing RBD snapshots");
    let pool = open_pool(spec, pool)?;
    let opened = pool.open(image)?.ok_or_else(|| pool.missing(image))?;
    opened.snapshots()
}

/// Takes snapshot `snapshot` of `pool/image`; an existing one of that name is kept.
/// Returns it and whether it was taken now.
pub fn create_snapshot(
    spec: &ClusterSpec,
    pool: &str,
    image: &str,
    snapshot: &str,
) -> Result<(Snapshot, bool), RbdError> {
    storage::service::debug_assert_may_block("taking an RBD snapshot");
    let pool = open_pool(spec, pool)?;
    let opened = pool.open(image)?.ok_or_else(|| pool.missing(image))?;
    let snapshot_c = cstring(snapshot, "snapshot")?;
    // SAFETY: the image is open; the name is NUL-terminated and outlives the call.
    let code = unsafe { (pool.cluster.library.rbd_snap_create)(opened.handle, snapshot_c.as_ptr()) };
    if code < 0 && code != -libc::EEXIST {
        return Err(pool.failed(image, &format!("taking snapshot {snapshot:?}"), code));
    }
    let taken = opened
        .snapshots()?
        .into_iter()
        .find(|listed| listed.name == snapshot)
        .ok_or_else(|| pool.failed(image, &format!("finding snapshot {snapshot:?} just taken"), -libc::ENOENT))?;
    Ok((taken, code == 0))
}

/// Removes snapshot `snapshot` of `pool/image`. Returns false when there was none
/// (or no such image). A snapshot with clones of format 2 goes to the image's trash
/// until its last clone is gone.
pub fn remove_snapshot(spec: &ClusterSpec, pool: &str, image: &str, snapshot: &str) -> Result<bool, RbdError> {
    storage::service::debug_assert_may_block("removing an RBD snapshot");
    let pool = open_pool(spec, pool)?;
    let Some(opened) = pool.open(image)? else {
        return Ok(false);
    };
    let snapshot_c = cstring(snapshot, "snapshot")?;
    // SAFETY: the image is open; the name is NUL-terminated and outlives the call.
    let code = unsafe { (pool.cluster.library.rbd_snap_remove)(opened.handle, snapshot_c.as_ptr()) };
    match code {
        0 => Ok(true),
        code if code == -libc::ENOENT => Ok(false),
        code if code == -libc::EBUSY => Err(pool.failed(
            image,
            &format!("removing snapshot {snapshot:?} (it is protected and has clones of format 1: flatten them first)"),
            code,
        )),
        code => Err(pool.failed(image, &format!("removing snapshot {snapshot:?}"), code)),
    }
}

/// Deletes `pool/image` and its data. Returns false when there was no such image.
/// librbd refuses while the image has snapshots (ENOTEMPTY) or is open elsewhere
/// (EBUSY: a watcher).
pub fn remove_image(spec: &ClusterSpec, pool: &str, image: &str) -> Result<bool, RbdError> {
    storage::service::debug_assert_may_block("removing an RBD image");
    let pool = open_pool(spec, pool)?;
    let name_c = cstring(image, "image")?;
    // SAFETY: `io` is live; the name is NUL-terminated and outlives the call.
    let code = unsafe { (pool.cluster.library.rbd_remove)(pool.io, name_c.as_ptr()) };
    match code {
        0 => Ok(true),
        code if code == -libc::ENOENT => Ok(false),
        code if code == -libc::ENOTEMPTY => Err(pool.failed(
            image,
            "removing the image (it still has snapshots: remove them first; a snapshot removed while a clone of \
             it was still being copied waits in the image's trash until the copy is done: see the copies in \
             `sluice backend list`, or the trash in `rbd snap ls --all POOL/IMAGE`, then retry)",
            code,
        )),
        code if code == -libc::EBUSY => Err(pool.failed(
            image,
            "removing the image (a client still has it open, or clones still depend on it)",
            code,
        )),
        code => Err(pool.failed(image, "removing the image", code)),
    }
}

/// Makes `pool/image` a format 2 clone of `parent_pool/parent_image@snapshot`,
/// not yet flattened (see the module comment: [`flatten_image`] does that). Returns
/// false when `pool/image` exists already; the caller decides whether it is the same
/// clone.
pub fn clone_image(
    spec: &ClusterSpec,
    parent_pool: &str,
    parent_image: &str,
    snapshot: &str,
    pool: &str,
    image: &str,
) -> Result<bool, RbdError> {
    storage::service::debug_assert_may_block("cloning an RBD image");
    let parent = open_pool(spec, parent_pool)?;
    let child = open_pool(spec, pool)?;
    let source = format!("{parent_pool}/{parent_image}@{snapshot}");
    Ok(child.open(image)?.is_none() && clone(&parent, &child, parent_image, snapshot, image, &source)?)
}

/// What [`flatten_image`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flattened {
    /// The image had a parent; it no longer does.
    Copied,
    /// Nothing to do: no parent (never a clone, or flattened before), or no such image.
    Independent,
    /// `cancel` was set: the copy stopped part way (the next flatten finishes it).
    Cancelled,
}

/// Copies into `pool/image` whatever it still reads from its parent snapshot, so it
/// no longer depends on it (`rbd_flatten_with_progress`). Blocks for as long as the
/// copy takes, unless `cancel` is set meanwhile: it is looked at after each object,
/// and the copy then stops once the objects in flight are done. Serving the image
/// meanwhile is fine (librbd's exclusive lock coordinates the two), and a flatten
/// cut off part way is finished by the next one.
pub fn flatten_image(spec: &ClusterSpec, pool: &str, image: &str, cancel: &AtomicBool) -> Result<Flattened, RbdError> {
    storage::service::debug_assert_may_block("flattening an RBD image");
    // A served image (every one at a start asks) is asked through its open handle.
    if super::open_image_has_parent(spec, pool, image) == Some(false) {
        return Ok(Flattened::Independent);
    }
    let pool = open_pool(spec, pool)?;
    let Some(opened) = pool.open(image)? else {
        return Ok(Flattened::Independent);
    };
    let library = pool.cluster.library;
    // Asked first so that images with no parent (most of them, at a start) cost no
    // flatten call, which librbd would log as an error.
    if super::has_parent(library, opened.handle) == Some(false) {
        return Ok(Flattened::Independent);
    }
    // SAFETY: the image is open; `cancel` outlives the call, which is the only time
    // librbd calls `stop_when_cancelled` with it.
    let code = unsafe {
        (library.rbd_flatten_with_progress)(
            opened.handle,
            stop_when_cancelled,
            cancel as *const AtomicBool as *mut std::ffi::c_void,
        )
    };
    match code {
        0 => Ok(Flattened::Copied),
        // EINVAL: it has no parent (flattened by another client meanwhile).
        code if code == -libc::EINVAL => Ok(Flattened::Independent),
        code if code == -libc::ECANCELED && cancel.load(Ordering::Acquire) => Ok(Flattened::Cancelled),
        code => Err(pool.failed(image, "flattening the clone (copying its parent's data)", code)),
    }
}

/// The progress callback of [`flatten_image`]: stops the copy once its flag is set.
unsafe extern "C" fn stop_when_cancelled(_offset: u64, _total: u64, argument: *mut std::ffi::c_void) -> c_int {
    // SAFETY: `argument` is the `&AtomicBool` flatten_image passed, alive for the call.
    let cancel = unsafe { &*(argument as *const AtomicBool) };
    if cancel.load(Ordering::Acquire) {
        -libc::ECANCELED
    } else {
        0
    }
}

/// `rbd_clone3` of the snapshot into `image` (clone format 2); false when another
/// client made `image` first.
fn clone(
    parent: &Pool,
    child: &Pool,
    parent_image: &str,
    snapshot: &str,
    image: &str,
    source: &str,
) -> Result<bool, RbdError> {
    let library = parent.cluster.library;
    let (parent_c, snapshot_c, child_c) =
        (cstring(parent_image, "image")?, cstring(snapshot, "snapshot")?, cstring(image, "image")?);
    let mut options: library::ImageOptions = std::ptr::null_mut();
    // SAFETY: `options` is a valid out pointer; destroyed below on every path.
    unsafe { (library.rbd_image_options_create)(&mut options) };
    // SAFETY: `options` was just created.
    let mut code = unsafe { (library.rbd_image_options_set_uint64)(options, library::IMAGE_OPTION_CLONE_FORMAT, 2) };
    if code == 0 {
        // SAFETY: both pool contexts are live, the names NUL-terminated and alive
        // through the call, `options` valid.
        code = unsafe {
            (library.rbd_clone3)(parent.io, parent_c.as_ptr(), snapshot_c.as_ptr(), child.io, child_c.as_ptr(), options)
        };
    }
    // SAFETY: created above, destroyed once.
    unsafe { (library.rbd_image_options_destroy)(options) };
    match code {
        0 => Ok(true),
        code if code == -libc::EEXIST => Ok(false),
        code if code == -libc::ENOENT => Err(RbdError::ImageMissing {
            image: source.to_string(),
            cluster: parent.cluster.spec.describe(),
            will_create: false,
        }),
        code => Err(child.failed(image, &format!("cloning it from {source}"), code)),
    }
}

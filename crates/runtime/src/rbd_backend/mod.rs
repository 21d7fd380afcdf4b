//! The `rbd` storage backend: a Ceph RBD image served through librbd's asynchronous
//! API.
//!
//! - librados and librbd are loaded at run time ([`library`]): a `sluice` binary without
//!   Ceph installed serves every other backend, and an `rbd` entry says what to install.
//! - One cluster connection per (ceph.conf, cephx user, op timeout) in the process,
//!   one image handle per backend, shared by all its queues ([`cluster`]).
//! - Each queue submits on the thread that owns it; completions arrive on librbd's
//!   threads and wake that thread through the waker it opened the queue with, so the
//!   runtime sleeps while requests are at the cluster ([`queue`]).
//! - Semantics: librbd's cache is off, so a write completes once the OSDs have it
//!   (durable in the cluster): no volatile write cache is advertised, FUA needs nothing
//!   more, and Flush is `rbd_aio_flush` (a barrier for requests already completed).
//!   Write Zeroes is `rbd_aio_write_zeroes`. Deallocate is `rbd_aio_discard`, which
//!   frees whole objects and may leave partial ones untouched, so deallocated blocks
//!   are not promised to read as zeroes (DLFEAT says "not reported").
//! - A cluster that does not answer fails requests after the op timeout
//!   (`rados_osd_op_timeout`) with [`storage::IoError::Unavailable`] (Namespace Not
//!   Ready, retryable), never a hang; requests succeed again once it is back.

mod cluster;
mod coordination;
mod errors;
mod images;
mod library;
mod lock_breaks;
mod queue;
mod watched;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::task::Waker;
use std::time::{SystemTime, UNIX_EPOCH};

use storage::{Backend, BackendQueue, Geometry, GrowError, LiveGeometry};

pub use cluster::{
    client_option, open_connections, ClusterSpec, CONNECT_TIMEOUT_SECONDS, SLUICE_WATCH_TIMEOUT_SECONDS,
};
pub use coordination::{Locker, RadosErrno, RadosObject};
use errors::resize_progress;
pub use errors::{Health, RbdError};
pub use images::{
    clone_image, create_snapshot, flatten_image, list_snapshots, remove_image, remove_snapshot, Flattened, Snapshot,
};
pub use library::{available as library_available, INSTALL_HINT};
pub use lock_breaks::{break_locks_of_fenced_client, PARALLEL_LOCK_BREAKS};
pub use queue::RBD_QUEUE_SLOTS;
pub use watched::{Acknowledgement, NotifyReplies, ReplaceError, Watch, WatchEvent, WatchHandler, MAX_RECORD_BYTES};

use cluster::{OpenImage, OpenMode};
use library::describe_errno;

/// How large an aligned compare-and-write librbd runs as one OSD operation: one
/// 512-byte sector. Measured with Ceph 16.2's librbd here: 512 bytes at any sector
/// boundary run (a mismatch is EILSEQ); 1 KiB and more, or a range across a sector
/// boundary, are refused with EINVAL. Taken as a constant rather than probed at open:
/// a probe is a write, and with the exclusive-lock feature it took the image's lock
/// from the gateway that owns it (seen in the gateway interop test).
const COMPARE_AND_WRITE_REGION_BYTES: u64 = 512;

/// Default op timeout: below the Linux host's 30 s I/O timeout, so the host hears
/// Namespace Not Ready from Sluice (and may fail over) before it gives up on its own.
pub const DEFAULT_OP_TIMEOUT_MS: u64 = 20_000;
/// Default logical block size of an RBD namespace.
pub const DEFAULT_RBD_BLOCK_SIZE_BYTES: u32 = 512;
/// Default cephx user.
pub const DEFAULT_CLIENT: &str = "admin";

/// How to open an [`RbdBackend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbdOptions {
    /// RADOS pool holding the image.
    pub pool: String,
    /// Image name within the pool.
    pub image: String,
    /// Create the image with this size when it does not exist, grow it to this size
    /// when it is smaller (never shrinks). `None`: the image must exist.
    pub size_bytes: Option<u64>,
    /// Logical block size of the namespace (power of two, 512..=4096 makes sense).
    pub block_size_bytes: u32,
    /// Which cluster, as whom, with which op timeout.
    pub cluster: ClusterSpec,
}

impl RbdOptions {
    /// Options with the defaults for everything but pool and image.
    pub fn new(pool: impl Into<String>, image: impl Into<String>) -> RbdOptions {
        RbdOptions {
            pool: pool.into(),
            image: image.into(),
            size_bytes: None,
            block_size_bytes: DEFAULT_RBD_BLOCK_SIZE_BYTES,
            cluster: ClusterSpec {
                ceph_conf: None,
                client: DEFAULT_CLIENT.to_string(),
                op_timeout_ms: DEFAULT_OP_TIMEOUT_MS,
            },
        }
    }
}

/// What `sluice backend list` shows of an RBD backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbdStatus {
    /// [`ClusterSpec::describe`].
    pub cluster: String,
    /// The monitors the connection was made to (`mon_host`).
    pub monitors: String,
    pub pool: String,
    pub image: String,
    pub size_bytes: u64,
    /// "connected", or "errors" when the last request failed within the last minute.
    pub state: &'static str,
    /// Failed requests since the image was opened.
    pub errors: u64,
    /// The last failure, e.g. "Connection timed out", if any.
    pub last_error: Option<String>,
}

/// A Ceph RBD image as a namespace's device.
pub struct RbdBackend {
    /// The image as open now; replaced by [`reopen_images`] after this process was
    /// fenced. Queues keep the image they were opened with.
    image: RwLock<Arc<OpenImage>>,
    /// Shared with the queues: the image grows live ([`Backend::grow`], or another
    /// gateway's resize seen by [`Backend::refresh_geometry`]).
    geometry: Arc<LiveGeometry>,
    library: &'static library::Library,
    health: Arc<Health>,
    /// What it was opened with (to reopen it on a new cluster client).
    options: RbdOptions,
}

/// Every RBD backend open in the process, to reopen them on a new cluster client.
static OPEN_BACKENDS: Mutex<Vec<Weak<RbdBackend>>> = Mutex::new(Vec::new());

/// After this process's cluster client for `spec` was blocklisted (another gateway
/// fenced it): starts a new client and reopens every image of that cluster through
/// it. Queues opened before keep the old image, whose requests the cluster refuses,
/// so only queues opened afterwards (new connections) reach the new one. Returns how
/// many images were reopened. Blocks (connecting, opening): never on an I/O thread.
pub fn reopen_images(spec: &ClusterSpec) -> Result<usize, RbdError> {
    storage::service::debug_assert_may_block("reopening RBD images");
    cluster::forget(spec);
    let backends: Vec<Arc<RbdBackend>> = {
        let mut open = OPEN_BACKENDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        open.retain(|backend| backend.strong_count() > 0);
        open.iter().filter_map(Weak::upgrade).filter(|backend| backend.options.cluster == *spec).collect()
    };
    // All at once (a gateway rejoining after a fence reopens every image it serves).
    let reopened = in_parallel(&backends, |backend| backend.reopen());
    reopened.into_iter().collect::<Result<Vec<()>, RbdError>>()?;
    Ok(backends.len())
}

/// Images opened (or reopened) at once. Opening one is several round trips to the
/// cluster spent waiting (about 10 ms each on the one-node test cluster, more across a
/// network), so a gateway with 4,096 namespaces opening them one after another would
/// take minutes to start or rejoin; librados serves concurrent opens on one client
/// connection. 32 at a time keeps that client's queue of requests short while the
/// cluster's latency, not the count, sets the time.
pub const PARALLEL_RBD_OPENS: usize = 32;

/// `work` applied to every item on up to [`PARALLEL_RBD_OPENS`] threads, the results
/// in the items' order. For blocking cluster calls; never from an I/O thread.
pub fn in_parallel<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    in_parallel_on(PARALLEL_RBD_OPENS, items, work)
}

/// Drops `items` on up to [`PARALLEL_RBD_OPENS`] threads: for things whose drop
/// blocks on the cluster (an image's close releases its lock and unregisters its
/// watch; a watch's drop unregisters it). A gateway stopping with 4,096 images closed
/// them one after another for minutes.
pub fn drop_in_parallel<T: Send>(items: Vec<T>) {
    if items.len() <= 1 {
        return;
    }
    let per_thread = items.len().div_ceil(PARALLEL_RBD_OPENS);
    let mut items = items;
    std::thread::scope(|scope| {
        while !items.is_empty() {
            let chunk: Vec<T> = items.drain(..per_thread.min(items.len())).collect();
            scope.spawn(move || drop(chunk));
        }
    });
}

/// [`in_parallel`] on up to `threads` threads.
pub fn in_parallel_on<T: Sync, R: Send>(threads: usize, items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(work).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, items.len()) {
            scope.spawn(|| loop {
                let position = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(position) else { break };
                let result = work(item);
                *results[position].lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
            });
        }
    });
    results
        .into_iter()
        .filter_map(|slot| slot.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner))
        .collect()
}

/// What [`RbdBackend::open`] did to the image, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageChange {
    /// Opened as it was.
    None,
    /// Created with the configured size.
    Created,
    /// Grown from this many bytes to the configured size.
    Grown {
        /// The size before.
        from_bytes: u64,
    },
}

impl RbdBackend {
    /// Connects (or reuses the process's connection to the cluster), creates or grows
    /// the image as configured, and opens it. Blocks up to the connect timeout: never
    /// call it on an I/O thread.
    pub fn open(options: &RbdOptions) -> Result<(Arc<RbdBackend>, ImageChange), RbdError> {
        Self::open_with(options, OpenMode::CreateOrGrow)
    }

    /// Checks that the cluster answers and the pool exists, and that the image exists
    /// unless a size is configured, changing nothing (`sluice config check`). Returns
    /// the image size when it exists.
    pub fn inspect(options: &RbdOptions) -> Result<Option<u64>, RbdError> {
        match Self::open_with(options, OpenMode::Inspect) {
            Ok((backend, _)) => Ok(Some(backend.geometry.get().capacity_bytes())),
            Err(RbdError::ImageMissing { will_create: true, .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn open_with(options: &RbdOptions, mode: OpenMode) -> Result<(Arc<RbdBackend>, ImageChange), RbdError> {
        storage::service::debug_assert_may_block("opening an RBD image");
        let library = library::library().map_err(RbdError::LibraryMissing)?;
        let cluster = cluster::connect(&options.cluster)?;
        let opened = cluster::open_image(cluster, &options.pool, &options.image, options.size_bytes, mode)?;
        let block_size = u64::from(options.block_size_bytes);
        let geometry =
            Geometry { block_size_bytes: options.block_size_bytes, block_count: opened.size_bytes / block_size };
        if opened.size_bytes == 0 || opened.size_bytes % block_size != 0 || geometry.validate().is_err() {
            return Err(RbdError::Geometry {
                image: format!("{}/{}", options.pool, options.image),
                size_bytes: opened.size_bytes,
                block_size_bytes: options.block_size_bytes,
            });
        }
        let change = match (opened.created, opened.grown_from_bytes) {
            (true, _) => ImageChange::Created,
            (false, Some(from_bytes)) => ImageChange::Grown { from_bytes },
            (false, None) => ImageChange::None,
        };
        let backend = Arc::new(RbdBackend {
            image: RwLock::new(Arc::new(opened.image)),
            geometry: Arc::new(LiveGeometry::new(geometry)),
            library,
            health: Arc::default(),
            options: options.clone(),
        });
        if mode == OpenMode::CreateOrGrow {
            let mut open = OPEN_BACKENDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            open.retain(|backend| backend.strong_count() > 0);
            open.push(Arc::downgrade(&backend));
        }
        Ok((backend, change))
    }

    /// Opens the image again through the process's current client for its cluster
    /// (see [`reopen_images`]); it must still exist, at least as large (another
    /// gateway may have grown it; the next size refresh tells the hosts).
    fn reopen(&self) -> Result<(), RbdError> {
        let options = &self.options;
        let cluster = cluster::connect(&options.cluster)?;
        let opened = cluster::open_image(cluster, &options.pool, &options.image, None, OpenMode::Inspect)?;
        if opened.size_bytes < self.geometry.get().capacity_bytes() {
            return Err(RbdError::Geometry {
                image: format!("{}/{}", options.pool, options.image),
                size_bytes: opened.size_bytes,
                block_size_bytes: options.block_size_bytes,
            });
        }
        *self.image.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(opened.image);
        Ok(())
    }

    fn current_image(&self) -> Arc<OpenImage> {
        Arc::clone(&self.image.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Cluster, pool, image and connection state.
    pub fn status(&self) -> RbdStatus {
        let code = self.health.last_error_code.load(Ordering::Relaxed);
        let at_ms = self.health.last_error_at_unix_ms.load(Ordering::Relaxed);
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64);
        let recent_error = code != 0 && now_ms.saturating_sub(at_ms) < 60_000;
        let image = self.current_image();
        RbdStatus {
            cluster: image.cluster.spec.describe(),
            monitors: image.cluster.monitors.clone(),
            pool: image.pool.clone(),
            image: image.name.clone(),
            size_bytes: self.geometry.get().capacity_bytes(),
            state: if recent_error { "errors" } else { "connected" },
            errors: self.health.errors.load(Ordering::Relaxed),
            last_error: (code != 0).then(|| describe_errno(code)),
        }
    }

    fn queue(&self, waker: Option<&Waker>) -> Box<dyn BackendQueue> {
        Box::new(queue::RbdQueue::new(
            self.current_image(),
            Arc::clone(&self.geometry),
            self.library,
            waker,
            Arc::clone(&self.health),
        ))
    }
}

impl std::fmt::Debug for RbdBackend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RbdBackend")
            .field("pool", &self.options.pool)
            .field("image", &self.options.image)
            .field("geometry", &self.geometry.get())
            .finish()
    }
}

/// Whether `pool/image` on `spec`, when this process has it open, still reads from a
/// parent snapshot: `Some(false)` when it has no parent, `None` when it is not open
/// here (or librbd could not tell). Local to librbd (the open image knows its
/// parent), so a start asking this of 4,096 served images costs no cluster round
/// trip, where opening each again would cost several.
pub fn open_image_has_parent(spec: &ClusterSpec, pool: &str, image: &str) -> Option<bool> {
    let backend = {
        let open = OPEN_BACKENDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        open.iter().filter_map(Weak::upgrade).find(|backend| {
            backend.options.cluster == *spec && backend.options.pool == pool && backend.options.image == image
        })?
    };
    let opened = Arc::clone(&backend.image.read().unwrap_or_else(|poisoned| poisoned.into_inner()));
    has_parent(backend.library, opened.image)
}

/// Whether the open `image` has a parent (`rbd_get_parent`); `None` when librbd could
/// not tell.
pub(crate) fn has_parent(library: &library::Library, image: library::Image) -> Option<bool> {
    let mut parent = library::LinkedImageSpec {
        pool_name: std::ptr::null_mut(),
        pool_namespace: std::ptr::null_mut(),
        image_id: std::ptr::null_mut(),
        image_name: std::ptr::null_mut(),
        trash: false,
    };
    let mut snapshot = library::SnapshotSpec { id: 0, namespace_type: 0, name: std::ptr::null_mut() };
    // SAFETY: the image is open for the call; both out structs are valid and are
    // freed below only when librbd filled them (success).
    let code = unsafe { (library.rbd_get_parent)(image, &mut parent, &mut snapshot) };
    match code {
        0 => {
            // SAFETY: filled by the successful call above, freed once.
            unsafe {
                (library.rbd_linked_image_spec_cleanup)(&mut parent);
                (library.rbd_snap_spec_cleanup)(&mut snapshot);
            }
            Some(true)
        }
        code if code == -libc::ENOENT => Some(false),
        _ => None,
    }
}

impl RbdBackend {
    /// The image's size as librbd knows it now (it re-reads the header when another
    /// client changed it). Blocking.
    fn image_size_bytes(&self, image: &OpenImage) -> Result<u64, GrowError> {
        let mut size_bytes: u64 = 0;
        // SAFETY: the image stays open while `image` is held; `size_bytes` is a valid
        // out pointer.
        let code = unsafe { (self.library.rbd_get_size)(image.image, &mut size_bytes) };
        if code < 0 {
            return Err(GrowError::Failed(format!(
                "reading the size of RBD image {}/{}: {}",
                image.pool,
                image.name,
                describe_errno(i64::from(code))
            )));
        }
        Ok(size_bytes)
    }
}

impl Backend for RbdBackend {
    fn geometry(&self) -> Geometry {
        self.geometry.get()
    }

    /// `rbd_resize2` with shrinking refused by librbd itself, so a gateway that has
    /// not seen another's larger resize yet can never cut the image back.
    fn grow(&self, block_count: u64) -> Result<Geometry, GrowError> {
        storage::service::debug_assert_may_block("growing an RBD image");
        let current = self.geometry.get();
        let wanted = current.grown_to(block_count)?;
        let image = self.current_image();
        let wanted_bytes = wanted.capacity_bytes();
        if self.image_size_bytes(&image)? < wanted_bytes {
            // SAFETY: the image stays open while `image` is held; the progress callback
            // ignores its argument, so a null argument is fine.
            let code = unsafe {
                (self.library.rbd_resize2)(image.image, wanted_bytes, false, resize_progress, std::ptr::null_mut())
            };
            // Another gateway may have grown it past `wanted_bytes` meanwhile (librbd
            // then refuses to "shrink" it): what counts is the size now.
            if code < 0 && self.image_size_bytes(&image)? < wanted_bytes {
                return Err(GrowError::Failed(format!(
                    "growing RBD image {}/{} to {wanted_bytes} bytes: {}",
                    image.pool,
                    image.name,
                    describe_errno(i64::from(code))
                )));
            }
        }
        Ok(self.geometry.grow_to(block_count))
    }

    fn refresh_geometry(&self) -> Result<Geometry, GrowError> {
        let image = self.current_image();
        let size_bytes = self.image_size_bytes(&image)?;
        let current = self.geometry.get();
        // Whole blocks only: a size that is not a multiple (resized by hand) serves
        // the blocks it holds in full.
        Ok(self.geometry.grow_to(size_bytes / u64::from(current.block_size_bytes)))
    }

    /// librbd's cache is off: a completed write is in the cluster.
    fn has_volatile_write_cache(&self) -> bool {
        false
    }

    fn kind(&self) -> &'static str {
        "rbd"
    }

    fn open_queue(&self) -> Box<dyn BackendQueue> {
        self.queue(None)
    }

    fn open_queue_with_waker(&self, waker: &Waker) -> Box<dyn BackendQueue> {
        self.queue(Some(waker))
    }

    fn deallocate_reads_zeroes(&self) -> bool {
        false
    }

    fn shared_name(&self) -> Option<String> {
        Some(format!("rbd:{}/{}", self.options.pool, self.options.image))
    }

    /// librbd's compare-and-write: the OSD compares and writes in one operation, so
    /// pairs are atomic against every gateway and client of the image.
    fn atomic_compare_and_write_boundary_bytes(&self) -> Option<u64> {
        Some(COMPARE_AND_WRITE_REGION_BYTES)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn in_parallel_keeps_the_items_order_and_runs_each_once() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let items: Vec<u64> = (0..1000).collect();
        let squares = super::in_parallel(&items, |&item| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            item * item
        });
        assert_eq!(squares, items.iter().map(|item| item * item).collect::<Vec<_>>());
        assert_eq!(calls.into_inner(), 1000);
        assert!(super::in_parallel(&[] as &[u8], |_| ()).is_empty());
    }
}

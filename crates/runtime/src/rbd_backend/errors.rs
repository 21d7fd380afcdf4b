//! What goes wrong with an image, and what is kept of it: the errors every step of
//! the backend returns, the per-image error counters `sluice backend list` shows, and
//! librbd's resize progress callback. A leaf of the backend's modules, so the cluster,
//! image, queue and coordination modules share it without going through the backend.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::library::describe_errno;

/// Why an image could not be opened. Each message names the image or pool, the
/// cluster, the step that failed and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RbdError {
    /// librados/librbd are not installed.
    #[error("{0}")]
    LibraryMissing(String),
    /// A value cannot be passed to librados (a NUL byte).
    #[error("{0}")]
    Invalid(String),
    /// Connecting to the cluster failed.
    #[error("cluster ({cluster}): {step} failed: {}; {}", describe_errno(*code), cluster_hint(*code))]
    Cluster {
        /// `ClusterSpec::describe`.
        cluster: String,
        /// What was being done.
        step: String,
        /// The negative errno librados returned.
        code: i64,
    },
    /// The pool does not exist.
    #[error("pool {pool:?} does not exist in the cluster ({cluster}); create it (ceph osd pool create {pool} && rbd pool init {pool}) or fix `pool`")]
    PoolMissing {
        /// The pool name.
        pool: String,
        /// `ClusterSpec::describe`.
        cluster: String,
    },
    /// The image does not exist (and was not to be created).
    #[error("image {image} does not exist in the cluster ({cluster}); {}", if *will_create { "sluice serve creates it with the configured size" } else { "set `size` to create it, or create it with rbd create" })]
    ImageMissing {
        /// pool/image.
        image: String,
        /// `ClusterSpec::describe`.
        cluster: String,
        /// A size is configured: serve creates the image.
        will_create: bool,
    },
    /// Another step on the image failed.
    #[error("image {image} in the cluster ({cluster}): {step} failed: {}", describe_errno(*code))]
    Image {
        /// pool/image.
        image: String,
        /// `ClusterSpec::describe`.
        cluster: String,
        /// What was being done.
        step: String,
        /// The negative errno librbd returned.
        code: i64,
    },
    /// The image size does not fit the block size.
    #[error("image {image} holds {size_bytes} bytes, not a positive multiple of the {block_size_bytes}-byte block size; resize the image or change block_size")]
    Geometry {
        /// pool/image.
        image: String,
        /// Its size.
        size_bytes: u64,
        /// The configured block size.
        block_size_bytes: u32,
    },
}

impl RbdError {
    /// librbd answered EBUSY: the image is still open somewhere (or has clones).
    pub fn is_busy(&self) -> bool {
        matches!(self, RbdError::Image { code, .. } if *code == -i64::from(libc::EBUSY))
    }
    /// librbd answered ENOTEMPTY: the image still has snapshots (a removed one whose
    /// clones are not yet flattened waits in the image's trash, and counts).
    pub fn has_snapshots(&self) -> bool {
        matches!(self, RbdError::Image { code, .. } if *code == -i64::from(libc::ENOTEMPTY))
    }
}

fn cluster_hint(code: i64) -> &'static str {
    match i32::try_from(-code).unwrap_or(0) {
        libc::ENOENT => "check that the ceph.conf exists (ceph_conf or $CEPH_CONF) and names a keyring for the client",
        libc::EACCES | libc::EPERM => "the cephx key was refused: check the client name and its keyring",
        libc::ETIMEDOUT => {
            "no monitor answered: check mon_host in the ceph.conf and that the monitors run and are reachable"
        }
        libc::EINVAL => "the ceph.conf or CEPH_ARGS holds an invalid setting",
        _ => "check the cluster's health (ceph -s) and the ceph.conf",
    }
}

/// Errors seen on an image since it was opened, for `sluice backend list`.
#[derive(Debug, Default)]
pub struct Health {
    pub(super) errors: AtomicU64,
    /// Negative errno of the last failed request (0: none yet).
    pub(super) last_error_code: AtomicI64,
    /// When it failed, in milliseconds since the Unix epoch.
    pub(super) last_error_at_unix_ms: AtomicU64,
}

impl Health {
    pub(super) fn record_error(&self, code: i64) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.last_error_code.store(code, Ordering::Relaxed);
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64);
        self.last_error_at_unix_ms.store(now_ms, Ordering::Relaxed);
    }
}

/// librbd calls this with the progress of a resize; 0 goes on.
pub(crate) unsafe extern "C" fn resize_progress(
    _offset: u64,
    _total: u64,
    _argument: *mut std::ffi::c_void,
) -> std::ffi::c_int {
    0
}

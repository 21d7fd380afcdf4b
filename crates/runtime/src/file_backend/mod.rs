//! The `file` storage backend: a regular file or a block device driven through
//! io_uring, with O_DIRECT by default.
//!
//! - Each [`storage::BackendQueue`] owns a small io_uring of its own (one per
//!   thread/connection, no shared lock). `submit` only pushes SQEs; `io_uring_enter`
//!   runs in `reap` (or when the submission ring is full), so requests submitted
//!   between two reaps go to the kernel in one system call.
//! - Writes may sit in the page cache or the device's cache until Flush, so the backend
//!   reports a volatile write cache. Flush is `IORING_OP_FSYNC` with
//!   `IORING_FSYNC_DATASYNC`; a FUA write is `IORING_OP_WRITE` with `RWF_DSYNC`.
//! - Write Zeroes is `fallocate(FALLOC_FL_ZERO_RANGE)`, or `PUNCH_HOLE | KEEP_SIZE` when
//!   the host allows deallocation; Deallocate is `PUNCH_HOLE | KEEP_SIZE` (on a block
//!   device the kernel turns that into a zero-out with unmap). When the filesystem or
//!   device refuses, the backend falls back to ZERO_RANGE and then to writing zeroes
//!   from a static zero block, so deallocated ranges always read back as zeroes.
//! - O_DIRECT buffers are staged through page-aligned bounce buffers unless the
//!   caller's Vec is already page aligned (see [`DIRECT_IO_ALIGNMENT`]).

mod buffers;
mod queue;

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use storage::{Backend, BackendQueue, Geometry, GrowError, LiveGeometry};

pub use buffers::DIRECT_IO_ALIGNMENT;

/// Default submission ring size per queue.
pub const DEFAULT_QUEUE_ENTRIES: u32 = 128;
/// Default block size of a regular file: 4096 satisfies the direct-I/O alignment of
/// every common filesystem and device.
pub const DEFAULT_FILE_BLOCK_SIZE_BYTES: u32 = 4096;

/// How to open a [`FileBackend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileOptions {
    /// Logical block size of the namespace. Default: the device's logical block size
    /// (BLKSSZGET) for a block device, [`DEFAULT_FILE_BLOCK_SIZE_BYTES`] for a file.
    /// Must be a power of two in 512..=65536 and at least the device's logical block
    /// size (with O_DIRECT, at least the filesystem's direct-I/O alignment).
    pub block_size_bytes: Option<u32>,
    /// O_DIRECT (the default): bypass the page cache. False: buffered I/O.
    pub direct_io: bool,
    /// Regular files: create the file, or extend it, to this size. Required when the
    /// file does not exist. Block devices: use only the first `size_bytes` bytes.
    pub size_bytes: Option<u64>,
    /// Submission ring entries of each queue (rounded up to a power of two by the
    /// kernel); more requests than this in flight are queued in user space.
    pub queue_entries: u32,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions { block_size_bytes: None, direct_io: true, size_bytes: None, queue_entries: DEFAULT_QUEUE_ENTRIES }
    }
}

/// Why [`FileBackend::open`] failed. Every message names the path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file does not exist and no size was given to create it.
    #[error("{}: no such file; set size_bytes to create it (a multiple of the block size), or fix the path", path.display())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// Opening for reading and writing was refused.
    #[error("{}: permission denied opening for read and write; run as a user that may write it (block devices usually need root or the disk group) or fix its permissions", path.display())]
    PermissionDenied {
        /// The path given.
        path: PathBuf,
    },
    /// The filesystem (or device) refused O_DIRECT.
    #[error("{}: the filesystem does not support direct I/O (O_DIRECT), as with tmpfs on older kernels: set direct_io = false, or put the file on a filesystem such as ext4 or xfs ({source})", path.display())]
    DirectIoUnsupported {
        /// The path given.
        path: PathBuf,
        /// The error the kernel returned.
        source: io::Error,
    },
    /// The path is neither a regular file nor a block device.
    #[error("{}: not a regular file or a block device", path.display())]
    NotFileOrBlockDevice {
        /// The path given.
        path: PathBuf,
    },
    /// The block size is not a power of two in 512..=65536.
    #[error("{}: block size {block_size_bytes} is not a power of two between 512 and 65536", path.display())]
    InvalidBlockSize {
        /// The path given.
        path: PathBuf,
        /// The rejected block size.
        block_size_bytes: u32,
    },
    /// The block size is smaller than what the device can address.
    #[error("{}: block size {block_size_bytes} is smaller than the device's {what} of {device_bytes} bytes; use block_size_bytes >= {device_bytes}", path.display())]
    BlockSizeTooSmall {
        /// The path given.
        path: PathBuf,
        /// The rejected block size.
        block_size_bytes: u32,
        /// The device's minimum.
        device_bytes: u32,
        /// Which minimum ("logical block size", "direct-I/O alignment").
        what: &'static str,
    },
    /// The size is not a whole number of blocks, or zero.
    #[error("{}: size {size_bytes} bytes is not a non-zero multiple of the block size {block_size_bytes}; choose size_bytes (or the file's length) as a multiple of {block_size_bytes}", path.display())]
    SizeNotMultiple {
        /// The path given.
        path: PathBuf,
        /// The rejected size.
        size_bytes: u64,
        /// The block size in use.
        block_size_bytes: u32,
    },
    /// The requested size does not fit the existing file or device.
    #[error("{}: size_bytes {requested} does not fit: the {what} is {actual} bytes; {hint}", path.display())]
    SizeMismatch {
        /// The path given.
        path: PathBuf,
        /// `size_bytes` as given.
        requested: u64,
        /// The file's or device's size.
        actual: u64,
        /// "file" or "block device".
        what: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// io_uring is unavailable (old kernel, seccomp, RLIMIT_MEMLOCK).
    #[error("{}: cannot set up io_uring for the file backend: {source}", path.display())]
    RingSetup {
        /// The path given.
        path: PathBuf,
        /// The error from io_uring_setup.
        source: io::Error,
    },
    /// Any other system call failure while opening.
    #[error("{}: {action} failed: {source}", path.display())]
    Io {
        /// The path given.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// What queues share: the open file and what the backend learned about it.
pub(crate) struct Shared {
    pub(crate) file: File,
    /// Grows live ([`Backend::grow`]); every queue's range check reads it.
    pub(crate) geometry: LiveGeometry,
    pub(crate) direct_io: bool,
    pub(crate) queue_entries: u32,
    /// Cleared after fallocate(PUNCH_HOLE) is refused, so later requests skip it.
    pub(crate) punch_hole_supported: AtomicBool,
    /// Cleared after fallocate(ZERO_RANGE) is refused.
    pub(crate) zero_range_supported: AtomicBool,
}

/// A namespace stored in a regular file or a block device. See the module docs.
pub struct FileBackend {
    shared: Arc<Shared>,
    path: PathBuf,
    is_block_device: bool,
}

impl std::fmt::Debug for FileBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBackend")
            .field("path", &self.path)
            .field("block_device", &self.is_block_device)
            .field("direct_io", &self.shared.direct_io)
            .field("geometry", &self.shared.geometry.get())
            .finish()
    }
}

impl FileBackend {
    /// Opens (and for a regular file with `size_bytes`, creates or extends) `path`.
    pub fn open(path: impl AsRef<Path>, options: FileOptions) -> Result<Arc<FileBackend>, FileError> {
        let path = path.as_ref().to_path_buf();
        let io_error = |action: &'static str| {
            let path = path.clone();
            move |source: io::Error| FileError::Io { path, action, source }
        };
        let exists = match std::fs::metadata(&path) {
            Ok(_) => true,
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                return Err(FileError::PermissionDenied { path })
            }
            Err(error) => return Err(io_error("stat")(error)),
        };
        if !exists && options.size_bytes.is_none() {
            return Err(FileError::NotFound { path });
        }
        let mut open_options = OpenOptions::new();
        open_options.read(true).write(true).create(!exists);
        if options.direct_io {
            open_options.custom_flags(libc::O_DIRECT);
        }
        let mut file = match open_options.open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                return Err(FileError::PermissionDenied { path })
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Err(FileError::NotFound { path }),
            Err(error) if options.direct_io && error.raw_os_error() == Some(libc::EINVAL) => {
                return Err(FileError::DirectIoUnsupported { path, source: error })
            }
            Err(error) => return Err(io_error("open")(error)),
        };
        let file_type = file.metadata().map_err(io_error("stat"))?.file_type();
        let is_block_device = file_type.is_block_device();
        if !is_block_device && !file_type.is_file() {
            return Err(FileError::NotFileOrBlockDevice { path });
        }

        let device_block_size =
            if is_block_device { Some(logical_block_size(&file).map_err(io_error("ioctl(BLKSSZGET)"))?) } else { None };
        let block_size = options.block_size_bytes.or(device_block_size).unwrap_or(DEFAULT_FILE_BLOCK_SIZE_BYTES);
        if !block_size.is_power_of_two()
            || !(storage::MIN_BLOCK_SIZE_BYTES..=storage::MAX_BLOCK_SIZE_BYTES).contains(&block_size)
        {
            return Err(FileError::InvalidBlockSize { path, block_size_bytes: block_size });
        }
        if let Some(device_bytes) = device_block_size {
            if block_size < device_bytes {
                return Err(FileError::BlockSizeTooSmall {
                    path,
                    block_size_bytes: block_size,
                    device_bytes,
                    what: "logical block size",
                });
            }
        }

        let size_bytes = if is_block_device {
            let device_size = file.seek(SeekFrom::End(0)).map_err(io_error("seek to the device's end"))?;
            match options.size_bytes {
                Some(requested) if requested > device_size => {
                    return Err(FileError::SizeMismatch {
                        path,
                        requested,
                        actual: device_size,
                        what: "block device",
                        hint: "use a size_bytes no larger than the device, or leave it unset to use the whole device",
                    })
                }
                Some(requested) => requested,
                None => device_size - device_size % u64::from(block_size),
            }
        } else {
            let current = file.metadata().map_err(io_error("stat"))?.len();
            match options.size_bytes {
                Some(requested) if requested < current => {
                    return Err(FileError::SizeMismatch {
                        path,
                        requested,
                        actual: current,
                        what: "file",
                        hint: "the backend never shrinks a file: leave size_bytes unset to use the file's length, or truncate the file yourself",
                    })
                }
                Some(requested) => requested,
                None => current,
            }
        };
        if size_bytes == 0 || size_bytes % u64::from(block_size) != 0 {
            return Err(FileError::SizeNotMultiple { path, size_bytes, block_size_bytes: block_size });
        }
        if !is_block_device && file.metadata().map_err(io_error("stat"))?.len() < size_bytes {
            file.set_len(size_bytes).map_err(io_error("extend the file (ftruncate)"))?;
        }
        let geometry = Geometry { block_size_bytes: block_size, block_count: size_bytes / u64::from(block_size) };
        if geometry.validate().is_err() {
            return Err(FileError::SizeNotMultiple { path, size_bytes, block_size_bytes: block_size });
        }
        if options.direct_io {
            probe_direct_read(&file, block_size).map_err(|source| match source.raw_os_error() {
                Some(libc::EINVAL) if is_block_device => FileError::DirectIoUnsupported { path: path.clone(), source },
                Some(libc::EINVAL) => FileError::BlockSizeTooSmall {
                    path: path.clone(),
                    block_size_bytes: block_size,
                    device_bytes: block_size.saturating_mul(2),
                    what: "direct-I/O alignment (or the filesystem lacks O_DIRECT: then set direct_io = false)",
                },
                _ => FileError::Io { path: path.clone(), action: "direct-I/O probe read", source },
            })?;
        }
        let queue_entries = options.queue_entries.clamp(1, 32768);
        // Fail here rather than in open_queue (which cannot return an error).
        queue::build_ring(queue_entries, false)
            .map_err(|source| FileError::RingSetup { path: path.clone(), source })?;
        Ok(Arc::new(FileBackend {
            shared: Arc::new(Shared {
                file,
                geometry: LiveGeometry::new(geometry),
                direct_io: options.direct_io,
                queue_entries,
                punch_hole_supported: AtomicBool::new(true),
                zero_range_supported: AtomicBool::new(true),
            }),
            path,
            is_block_device,
        }))
    }

    /// The path the backend was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True for a block device, false for a regular file.
    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }

    /// True when the file was opened with O_DIRECT.
    pub fn direct_io(&self) -> bool {
        self.shared.direct_io
    }
}

impl Backend for FileBackend {
    fn geometry(&self) -> Geometry {
        self.shared.geometry.get()
    }

    /// A file is extended (ftruncate, then fsync so the length survives a crash); a
    /// block device's size is its own, so it grows only as far as the device already
    /// reaches (grow the LV or the disk first).
    fn grow(&self, block_count: u64) -> Result<Geometry, GrowError> {
        storage::service::debug_assert_may_block("growing a file backend");
        let current = self.shared.geometry.get();
        let wanted = current.grown_to(block_count)?;
        let wanted_bytes = wanted.capacity_bytes();
        let path = self.path.display();
        let failed = |action: &str, error: std::io::Error| GrowError::Failed(format!("{path}: {action}: {error}"));
        if self.is_block_device {
            let mut file = &self.shared.file;
            let device_bytes =
                file.seek(SeekFrom::End(0)).map_err(|error| failed("seek to the device's end", error))?;
            if device_bytes < wanted_bytes {
                return Err(GrowError::NoSpace(format!(
                    "the block device {path} holds {device_bytes} bytes, less than {wanted_bytes}: grow the device \
                     (lvextend, a larger disk) first, then resize the namespace"
                )));
            }
        } else {
            let file = &self.shared.file;
            let length = file.metadata().map_err(|error| failed("stat", error))?.len();
            if length < wanted_bytes {
                file.set_len(wanted_bytes).map_err(|error| failed("extend the file (ftruncate)", error))?;
                file.sync_all().map_err(|error| failed("fsync the new length", error))?;
            }
        }
        Ok(self.shared.geometry.grow_to(block_count))
    }

    /// True: completed writes may sit in the page cache or the device's cache until
    /// Flush (or FUA).
    fn has_volatile_write_cache(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        if self.is_block_device {
            "block-device"
        } else {
            "file"
        }
    }

    /// A queue with its own io_uring. If the ring cannot be created (resource limits),
    /// the queue completes every request with `IoError::Internal` and logs why.
    fn open_queue(&self) -> Box<dyn BackendQueue> {
        Box::new(queue::FileQueue::new(Arc::clone(&self.shared), None))
    }

    /// On a runtime thread, the queue's ring rings the thread's storage-wake eventfd
    /// itself (the waker is the same doorbell), so the thread sleeps while file I/O
    /// is in flight. Elsewhere (no runtime thread) it is polled like `open_queue`.
    fn open_queue_with_waker(&self, _waker: &std::task::Waker) -> Box<dyn BackendQueue> {
        Box::new(queue::FileQueue::new(Arc::clone(&self.shared), crate::storage_wake::current_wake_fd()))
    }
}

fn logical_block_size(file: &File) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at a live c_int.
    let result = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut size as *mut libc::c_int) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(size).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "negative logical block size"))
}

/// One synchronous aligned read of the first block: proves that O_DIRECT works and
/// that the block size satisfies the direct-I/O alignment.
fn probe_direct_read(file: &File, block_size: u32) -> io::Result<()> {
    let mut pool = buffers::BouncePool::new(0);
    let mut buffer = pool.take(block_size as usize);
    // SAFETY: the buffer is at least `block_size` bytes, owned here, and outlives the call.
    let result = unsafe { libc::pread(file.as_raw_fd(), buffer.as_mut_ptr().cast(), block_size as usize, 0) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

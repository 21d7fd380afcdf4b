//! The storage seam of the Sluice NVMe/TCP target.
//!
//! A [`Backend`] is one namespace's device. The target opens a [`BackendQueue`] per
//! connection thread, submits [`IoRequest`]s (the data buffer moves in and comes back in
//! the [`IoCompletion`], so nothing is allocated per I/O) and reaps completions. The
//! submit/reap shape fits asynchronous backends (io_uring files and block devices, RAID0,
//! pools, cache tiers) as well as the synchronous ones here:
//!
//! - [`RamBackend`]: sparse, lock-free, in-memory namespace.
//! - [`NullBackend`]: discards writes, reads zeroes.
//! - [`Raid0Backend`]: striping over several backends.
//! - [`CacheBackend`]: a write-back or write-through cache tier over two backends.
//! - [`Pool`]: thick and thin namespaces carved out of one backend, with a persisted table.
//!
//! Blocking work (pool table saves, zeroing) runs on a [`service::ServiceExecutor`], never
//! on the thread that submits I/O; see [`service`].
//!
//! With the `conformance` feature, the `conformance` module holds the checks every backend must
//! pass; other crates run them against their own backends from their tests.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod cache;
pub mod durable_file;
mod geometry;
mod io;
mod lent;
mod null;
pub mod pool;
mod raid0;
mod ram;
pub mod service;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use backend::{Backend, BackendQueue, GrowError};
pub use cache::{CacheBackend, CacheMode, DEFAULT_LINE_SIZE_BYTES};
pub use geometry::{Geometry, GeometryError, LiveGeometry, MAX_BLOCK_SIZE_BYTES, MIN_BLOCK_SIZE_BYTES};
pub use io::{validate_compare_and_write, validate_request, IoCompletion, IoError, IoOp, IoRequest};
pub use lent::LentBytes;
pub use null::NullBackend;
pub use pool::{CarveIdentity, CarveRecord, CarvedId, NamespaceBinding, Pool, PoolError, TableStore};
pub use raid0::{CompositionError, Raid0Backend};
pub use ram::{ChunkMemory, ChunkWords, RamBackend, DEFAULT_CHUNK_SIZE_BYTES, MAX_CHUNK_COUNT};

//! One RADOS object used for coordination between processes: advisory locks that
//! expire (cls_lock with a duration), extended attributes, and the cluster's client
//! blocklist. Sluice's gateways decide ANA group ownership with these, so the cluster
//! itself is the arbiter and no consensus protocol is written here.
//!
//! The object shares the process's cluster connection with the RBD images of the same
//! [`ClusterSpec`]: when another gateway blocklists this client, the images' writes
//! and the leases fail together, which is what fencing needs.

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::Arc;
use std::time::Duration;

use super::cluster::{self, Cluster};
use super::errors::RbdError;
use super::library::{describe_errno, IoContext};

/// `LIBRADOS_LOCK_FLAG_MAY_RENEW`: take the lock, or extend it if this client holds
/// it with the same cookie.
const LOCK_FLAG_MAY_RENEW: u8 = 0x1;
/// Room for the lockers of one lock (names, cookies and addresses are short).
const LOCKER_BUFFER_BYTES: usize = 4096;
/// Largest extended attribute read back (the records written here are small).
const MAX_ATTRIBUTE_BYTES: usize = 4096;

/// An errno from librados, negative as librados returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RadosErrno(pub i32);

impl RadosErrno {
    /// EBUSY: another client holds the lock.
    pub const BUSY: RadosErrno = RadosErrno(-libc::EBUSY);
    /// ESHUTDOWN: librados' EBLOCKLISTED.
    pub const BLOCKLISTED: RadosErrno = RadosErrno(-libc::ESHUTDOWN);
    /// ETIMEDOUT: the cluster did not answer within the op timeout.
    pub const TIMED_OUT: RadosErrno = RadosErrno(-libc::ETIMEDOUT);
    /// ENOENT.
    pub const NOT_FOUND: RadosErrno = RadosErrno(-libc::ENOENT);

    /// Another client holds the lock.
    pub fn is_busy(self) -> bool {
        self.0 == -libc::EBUSY || self.0 == -libc::EEXIST
    }
    /// This client was blocklisted (fenced) by another: nothing it sends lands.
    pub fn is_blocklisted(self) -> bool {
        // librados reports EBLOCKLISTED, which is ESHUTDOWN on Linux.
        self.0 == -libc::ESHUTDOWN
    }
    /// The object or the attribute does not exist.
    pub fn is_missing(self) -> bool {
        self.0 == -libc::ENOENT || self.0 == -libc::ENODATA
    }
}

impl std::fmt::Display for RadosErrno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (errno {})", describe_errno(i64::from(self.0)), -self.0)
    }
}

/// One holder of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locker {
    /// The client entity, e.g. "client.4235".
    pub client: String,
    /// The cookie it locked with.
    pub cookie: String,
    /// Its address, as the blocklist takes it.
    pub address: String,
}

/// A RADOS object in one pool, reached through the process's cluster connection.
pub struct RadosObject {
    pub(super) cluster: Arc<Cluster>,
    pub(super) io: IoContext,
    pub(super) object: CString,
    pool: String,
}

// SAFETY: librados allows calls on one pool context from several threads at once;
// the context is destroyed only in Drop, when no other reference exists.
unsafe impl Send for RadosObject {}
// SAFETY: as above; the struct keeps no other state.
unsafe impl Sync for RadosObject {}

impl Drop for RadosObject {
    fn drop(&mut self) {
        // SAFETY: the context is live and nothing else uses it once we are dropped.
        unsafe { (self.cluster.library.rados_ioctx_destroy)(self.io) };
    }
}

fn cstring(text: &str, what: &str) -> Result<CString, RbdError> {
    CString::new(text).map_err(|_| RbdError::Invalid(format!("{what} {text:?} contains a NUL byte")))
}

fn checked(code: c_int) -> Result<c_int, RadosErrno> {
    if code < 0 {
        Err(RadosErrno(code))
    } else {
        Ok(code)
    }
}

/// Splits librados' NUL-separated list (`count` entries) into strings.
fn split_list(buffer: &[u8], count: usize) -> Vec<String> {
    buffer.split(|&byte| byte == 0).take(count).map(|entry| String::from_utf8_lossy(entry).into_owned()).collect()
}

impl RadosObject {
    /// Opens `object` in `pool` on the process's connection for `spec` (connecting if
    /// needed). Blocks up to the connect timeout: call it off the I/O threads.
    pub fn open(spec: &super::cluster::ClusterSpec, pool: &str, object: &str) -> Result<RadosObject, RbdError> {
        let cluster = cluster::connect(spec)?;
        let library = cluster.library;
        let pool_c = cstring(pool, "pool")?;
        let mut io: IoContext = std::ptr::null_mut();
        // SAFETY: the cluster is connected; `io` is a valid out pointer.
        let code = unsafe { (library.rados_ioctx_create)(cluster.handle, pool_c.as_ptr(), &mut io) };
        if code < 0 {
            return Err(if code == -libc::ENOENT {
                RbdError::PoolMissing { pool: pool.to_string(), cluster: cluster.spec.describe() }
            } else {
                RbdError::Cluster {
                    cluster: cluster.spec.describe(),
                    step: format!("opening pool {pool}"),
                    code: i64::from(code),
                }
            });
        }
        Ok(RadosObject { object: cstring(object, "object")?, cluster, io, pool: pool.to_string() })
    }

    /// The cluster it is reached through.
    pub fn cluster_spec(&self) -> super::cluster::ClusterSpec {
        self.cluster.spec.clone()
    }

    /// The object's name within its pool.
    pub fn name(&self) -> String {
        self.object.to_string_lossy().into_owned()
    }

    /// "pool/object" for messages.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.pool, self.object.to_string_lossy())
    }

    /// Takes (or renews, when this client holds it with `cookie`) the exclusive lock
    /// `name` for `duration`; after that it expires unless renewed. `Err` with
    /// [`RadosErrno::is_busy`] when another client holds it.
    pub fn lock(&self, name: &str, cookie: &str, description: &str, duration: Duration) -> Result<(), RadosErrno> {
        let (name, cookie, description) = (c(name), c(cookie), c(description));
        let mut timeout = libc::timeval {
            tv_sec: duration.as_secs() as libc::time_t,
            tv_usec: duration.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: the context is live; every string is NUL-terminated and outlives the
        // call; `timeout` is a valid timeval librados only reads.
        let code = unsafe {
            (self.cluster.library.rados_lock_exclusive)(
                self.io,
                self.object.as_ptr(),
                name.as_ptr(),
                cookie.as_ptr(),
                description.as_ptr(),
                &mut timeout,
                LOCK_FLAG_MAY_RENEW,
            )
        };
        checked(code).map(|_| ())
    }

    /// Releases lock `name` held with `cookie` (ENOENT when not held).
    pub fn unlock(&self, name: &str, cookie: &str) -> Result<(), RadosErrno> {
        let (name, cookie) = (c(name), c(cookie));
        // SAFETY: the context is live; the strings are NUL-terminated.
        let code = unsafe {
            (self.cluster.library.rados_unlock)(self.io, self.object.as_ptr(), name.as_ptr(), cookie.as_ptr())
        };
        checked(code).map(|_| ())
    }

    /// The clients holding lock `name` now (expired holders are not listed).
    pub fn lockers(&self, name: &str) -> Result<Vec<Locker>, RadosErrno> {
        let name = c(name);
        let mut exclusive: c_int = 0;
        let mut tag = vec![0u8; 256];
        let mut clients = vec![0u8; LOCKER_BUFFER_BYTES];
        let mut cookies = vec![0u8; LOCKER_BUFFER_BYTES];
        let mut addresses = vec![0u8; LOCKER_BUFFER_BYTES];
        let (mut tag_length, mut clients_length, mut cookies_length, mut addresses_length) =
            (tag.len(), clients.len(), cookies.len(), addresses.len());
        // SAFETY: the context is live; each buffer is writable for the length passed
        // with it, and librados writes at most that much (ERANGE otherwise).
        let count = unsafe {
            (self.cluster.library.rados_list_lockers)(
                self.io,
                self.object.as_ptr(),
                name.as_ptr(),
                &mut exclusive,
                tag.as_mut_ptr().cast::<c_char>(),
                &mut tag_length,
                clients.as_mut_ptr().cast::<c_char>(),
                &mut clients_length,
                cookies.as_mut_ptr().cast::<c_char>(),
                &mut cookies_length,
                addresses.as_mut_ptr().cast::<c_char>(),
                &mut addresses_length,
            )
        };
        if count < 0 {
            let errno = RadosErrno(count as i32);
            // No object yet means no lockers.
            return if errno.is_missing() { Ok(Vec::new()) } else { Err(errno) };
        }
        let count = count as usize;
        let clients = split_list(&clients[..clients_length.min(LOCKER_BUFFER_BYTES)], count);
        let cookies = split_list(&cookies[..cookies_length.min(LOCKER_BUFFER_BYTES)], count);
        let addresses = split_list(&addresses[..addresses_length.min(LOCKER_BUFFER_BYTES)], count);
        Ok(clients
            .into_iter()
            .zip(cookies)
            .zip(addresses)
            .map(|((client, cookie), address)| Locker { client, cookie, address })
            .collect())
    }

    /// Removes `locker`'s hold on lock `name` (`rados_break_lock`): only for a holder
    /// the cluster already refuses (blocklisted), whose writes can no longer land.
    pub fn break_lock(&self, name: &str, locker: &Locker) -> Result<(), RadosErrno> {
        let (name, client, cookie) = (c(name), c(&locker.client), c(&locker.cookie));
        // SAFETY: the context is live; the strings are NUL-terminated.
        let code = unsafe {
            (self.cluster.library.rados_break_lock)(
                self.io,
                self.object.as_ptr(),
                name.as_ptr(),
                client.as_ptr(),
                cookie.as_ptr(),
            )
        };
        match checked(code) {
            // Released or broken by someone else meanwhile.
            Err(errno) if errno.is_missing() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Extended attribute `name`; `None` when the object or attribute is missing.
    pub fn attribute(&self, name: &str) -> Result<Option<Vec<u8>>, RadosErrno> {
        let name = c(name);
        let mut buffer = vec![0u8; MAX_ATTRIBUTE_BYTES];
        // SAFETY: the context is live; the buffer is writable for its whole length.
        let code = unsafe {
            (self.cluster.library.rados_getxattr)(
                self.io,
                self.object.as_ptr(),
                name.as_ptr(),
                buffer.as_mut_ptr().cast::<c_char>(),
                buffer.len(),
            )
        };
        match checked(code) {
            Ok(length) => {
                buffer.truncate(length as usize);
                Ok(Some(buffer))
            }
            Err(errno) if errno.is_missing() => Ok(None),
            Err(errno) => Err(errno),
        }
    }

    /// Sets extended attribute `name` (creating the object when missing).
    pub fn set_attribute(&self, name: &str, value: &[u8]) -> Result<(), RadosErrno> {
        let name = c(name);
        // SAFETY: the context is live; `value` is readable for its length.
        let code = unsafe {
            (self.cluster.library.rados_setxattr)(
                self.io,
                self.object.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast::<c_char>(),
                value.len(),
            )
        };
        checked(code).map(|_| ())
    }

    /// Adds `address` (a client address as [`Locker::address`] or [`Self::my_address`]
    /// give it) to the cluster's blocklist for `expire`, then waits for the newest OSD
    /// map, so no OSD accepts a request from that client once this returns.
    pub fn blocklist(&self, address: &str, expire: Duration) -> Result<(), RadosErrno> {
        let mut address = c(address).into_bytes_with_nul();
        let seconds = u32::try_from(expire.as_secs()).unwrap_or(u32::MAX).max(1);
        let library = self.cluster.library;
        // SAFETY: the cluster is connected; the address buffer is NUL-terminated,
        // writable and outlives the call (librados takes a non-const pointer but only
        // reads it).
        checked(unsafe { (library.rados_blocklist_add)(self.cluster.handle, address.as_mut_ptr().cast(), seconds) })?;
        // SAFETY: the cluster is connected.
        checked(unsafe { (library.rados_wait_for_latest_osdmap)(self.cluster.handle) }).map(|_| ())
    }

    /// This client's address, as another client would blocklist it.
    pub fn my_address(&self) -> Result<String, RadosErrno> {
        let library = self.cluster.library;
        let mut addresses: *mut c_char = std::ptr::null_mut();
        // SAFETY: the cluster is connected; `addresses` is a valid out pointer.
        checked(unsafe { (library.rados_getaddrs)(self.cluster.handle, &mut addresses) })?;
        if addresses.is_null() {
            return Err(RadosErrno(-libc::ENOENT));
        }
        // SAFETY: librados returned a NUL-terminated string it allocated.
        let text = unsafe { CStr::from_ptr(addresses) }.to_string_lossy().into_owned();
        // SAFETY: the buffer came from rados_getaddrs and is freed once.
        unsafe { (library.rados_buffer_free)(addresses) };
        Ok(first_address(&text))
    }

    /// This client's global id (its entity is "client.<id>").
    pub fn instance_id(&self) -> u64 {
        // SAFETY: the cluster is connected.
        unsafe { (self.cluster.library.rados_get_instance_id)(self.cluster.handle) }
    }
}

/// NUL-free C string of a name that came from our own config (NUL bytes are refused
/// there); a NUL would only shorten it.
fn c(text: &str) -> CString {
    CString::new(text.replace('\0', "")).unwrap_or_default()
}

/// The first address of an address vector as librados prints it
/// ("[v2:127.0.0.1:0/123,v1:127.0.0.1:0/123]" or "127.0.0.1:0/123").
fn first_address(text: &str) -> String {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    inner.split(',').next().unwrap_or(inner).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_vectors_give_their_first_address() {
        assert_eq!(first_address("[v2:127.0.0.1:0/123,v1:127.0.0.1:0/123]"), "v2:127.0.0.1:0/123");
        assert_eq!(first_address("127.0.0.1:0/4000"), "127.0.0.1:0/4000");
    }

    #[test]
    fn lists_split_at_nul_bytes() {
        assert_eq!(split_list(b"client.1\0client.2\0\0", 2), ["client.1", "client.2"]);
        assert_eq!(split_list(b"", 0), Vec::<String>::new());
    }
}

//! Exclusive locks of a fenced client, broken at once.
//!
//! When a gateway takes an ANA group over, it first blocklists the previous owner's
//! cluster client (the fence). That client still holds librbd's exclusive lock on
//! each image it was writing, and librbd gives the lock to the new owner only at its
//! first write: it sees the holder dead, blocklists it once more (a monitor command
//! that waits for a new OSD map, about a second on the one-node cluster, and the
//! monitor commits such maps one after another) and breaks the lock. With 1,366
//! images in the group that took 44 s before every namespace took a write. The
//! holder is blocklisted already, so its locks can be broken directly: one
//! `rados_break_lock` on each image header, no monitor round, all images at once.

use std::sync::{Arc, Weak};

use super::coordination::RadosObject;
use super::{in_parallel_on, ClusterSpec, RbdBackend, RbdError, OPEN_BACKENDS};

/// librbd's exclusive lock on an image header object.
const RBD_LOCK_NAME: &str = "rbd_lock";

/// Lock listings and breaks in flight at once. Each is one light OSD operation, and a
/// takeover waits for all of them before the group serves: more at once than the 32
/// opens of a start (1,366 images of a 4,096-namespace group took 1.1 s at 32).
pub const PARALLEL_LOCK_BREAKS: usize = 128;

/// Longest image id librbd gives out (hex of a 64-bit client id and a counter).
const MAX_IMAGE_ID_BYTES: usize = 64;

/// An address as the blocklist and lock listings print it, without a messenger
/// prefix ("v1:", "v2:", "any:").
fn bare_address(address: &str) -> &str {
    match address.split_once(':') {
        Some((prefix, rest)) if ["v1", "v2", "any"].contains(&prefix) => rest,
        _ => address,
    }
}

/// Breaks the exclusive lock of every image open here on `spec` that `chosen` picks
/// (by its shared name, "rbd:POOL/IMAGE": the images of the ANA group taken over) and
/// the client at `fenced_address` holds. The caller must have blocklisted that client
/// first (its writes can then no longer land, which is what makes breaking safe).
/// Returns how many locks were broken; blocks (a lock listing per image and a break
/// per held lock, [`PARALLEL_LOCK_BREAKS`] at a time): never on an I/O thread.
pub fn break_locks_of_fenced_client(
    spec: &ClusterSpec,
    fenced_address: &str,
    chosen: impl Fn(&str) -> bool,
) -> Result<usize, RbdError> {
    storage::service::debug_assert_may_block("breaking a fenced client's image locks");
    let backends: Vec<Arc<RbdBackend>> = {
        let open = OPEN_BACKENDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        open.iter()
            .filter_map(Weak::upgrade)
            .filter(|backend| {
                backend.options.cluster == *spec
                    && storage::Backend::shared_name(&**backend).is_some_and(|name| chosen(&name))
            })
            .collect()
    };
    let fenced = bare_address(fenced_address);
    let broken = in_parallel_on(PARALLEL_LOCK_BREAKS, &backends, |backend| break_lock_of(backend, fenced));
    let mut count = 0;
    for result in broken {
        count += usize::from(result?);
    }
    Ok(count)
}

/// The lock of one image, when `fenced` holds it: true when it was broken.
fn break_lock_of(backend: &RbdBackend, fenced: &str) -> Result<bool, RbdError> {
    let options = &backend.options;
    let image = Arc::clone(&backend.image.read().unwrap_or_else(|poisoned| poisoned.into_inner()));
    let mut id = [0u8; MAX_IMAGE_ID_BYTES];
    // SAFETY: the image stays open while `image` is held; the buffer is writable for
    // its whole length, and librbd writes a NUL-terminated id or fails with ERANGE.
    let code = unsafe { (backend.library.rbd_get_id)(image.image, id.as_mut_ptr().cast(), id.len()) };
    let failed = |step: &str, code: i64| RbdError::Cluster {
        cluster: options.cluster.describe(),
        step: format!("{step} of image {}/{}", options.pool, options.image),
        code,
    };
    if code < 0 {
        return Err(failed("reading the id", i64::from(code)));
    }
    let id =
        std::ffi::CStr::from_bytes_until_nul(&id).map_err(|_| failed("reading the id", -i64::from(libc::ERANGE)))?;
    let header = RadosObject::open(&options.cluster, &options.pool, &format!("rbd_header.{}", id.to_string_lossy()))?;
    let lockers = header.lockers(RBD_LOCK_NAME).map_err(|errno| failed("listing the lock", i64::from(errno.0)))?;
    let mut broken = false;
    for locker in lockers.iter().filter(|locker| bare_address(&locker.address) == fenced) {
        header.break_lock(RBD_LOCK_NAME, locker).map_err(|errno| failed("breaking the lock", i64::from(errno.0)))?;
        broken = true;
    }
    Ok(broken)
}

#[cfg(test)]
mod tests {
    use super::bare_address;

    #[test]
    fn addresses_compare_without_their_messenger_prefix() {
        assert_eq!(bare_address("127.0.0.1:0/747590436"), "127.0.0.1:0/747590436");
        assert_eq!(bare_address("v1:127.0.0.1:0/747590436"), "127.0.0.1:0/747590436");
        assert_eq!(bare_address("any:10.0.0.5:0/1"), "10.0.0.5:0/1");
        assert_eq!(bare_address("[::1]:0/5"), "[::1]:0/5");
    }
}

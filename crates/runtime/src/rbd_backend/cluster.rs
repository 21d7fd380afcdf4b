//! Cluster connections and open images.
//!
//! One librados connection per (configuration file, cephx user, op timeout) in the
//! process, shared by every image opened through it: a connection costs threads,
//! sockets to every monitor and OSD, and memory, so 64 images on one cluster must not
//! cost 64 of them. Connecting and opening block (up to the connect timeout), so they
//! run where the config is built (the main or management thread), never on an I/O
//! thread.

use std::ffi::{c_int, CStr, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use super::errors::RbdError;
use super::library::{self, IoContext, Library, Rados};

/// How long connecting may take before librados gives up (`client_mount_timeout`,
/// whose default of 300 s would hold `sluice serve` for five minutes when a monitor
/// is unreachable).
pub const CONNECT_TIMEOUT_SECONDS: u64 = 10;

/// How long an OSD keeps a watch Sluice registers itself (a gateway group's
/// reservation records and configuration) once it stops hearing from the client.
pub const SLUICE_WATCH_TIMEOUT_SECONDS: u64 = 10;

/// Pings each watch gets within the shortest watch timeout it may have.
///
/// librados pings every watch once per tick (`objecter_tick_interval`, 5 s by
/// default), and an OSD drops a watch it has not heard from within the watch's
/// timeout: Sluice's own watches [`SLUICE_WATCH_TIMEOUT_SECONDS`], an RBD image's
/// header watch the cluster's `osd_client_watch_timeout` (30 s by default; 5 s on
/// clusters tuned for a fast takeover, such as the test cluster). A watch pinged no
/// more often than it times out lapses every few seconds although the client is
/// healthy, and a lapsed header watch makes this client's exclusive lock look dead:
/// another gateway's next write breaks it and blocklists this client
/// (`rbd_blocklist_on_break_lock`), which a gateway must take as being fenced. Four
/// pings per timeout leave room for three late ones.
///
/// Each ping is an op the OSD serves: a gateway with N namespaces holds 2N+1 watches,
/// so the tick is as long as the timeouts allow (a fixed 1 s tick cost the one-node
/// cluster's OSD most of a core, and each gateway a third of one, with 4,096
/// namespaces on three gateways).
const PINGS_PER_WATCH_TIMEOUT: f64 = 4.0;

/// librados' own `objecter_tick_interval`: never lengthened past it.
const LIBRADOS_TICK_SECONDS: f64 = 5.0;

/// The tick for watches that time out after `osd_client_watch_timeout` seconds (as
/// this client's configuration resolves it) or Sluice's own timeout, whichever is
/// shorter.
fn watch_ping_interval_seconds(osd_client_watch_timeout_seconds: Option<f64>) -> f64 {
    let header = osd_client_watch_timeout_seconds.filter(|timeout| *timeout > 0.0).unwrap_or(30.0);
    let shortest = header.min(SLUICE_WATCH_TIMEOUT_SECONDS as f64);
    (shortest / PINGS_PER_WATCH_TIMEOUT).min(LIBRADOS_TICK_SECONDS)
}

/// Which cluster, as whom, and how long an operation may take.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClusterSpec {
    /// The ceph.conf to read; `None`: librados' own lookup ($CEPH_CONF, then
    /// /etc/ceph/ceph.conf, ~/.ceph/config, ./ceph.conf).
    pub ceph_conf: Option<PathBuf>,
    /// The cephx user without `client.` (e.g. "admin").
    pub client: String,
    /// `rados_osd_op_timeout` and `rados_mon_op_timeout` in milliseconds (rounded up to
    /// whole seconds for librados): a request the cluster does not answer in time fails
    /// with ETIMEDOUT instead of waiting forever (librados' default, 0).
    pub op_timeout_ms: u64,
}

impl ClusterSpec {
    /// "conf /etc/ceph/ceph.conf, client.admin" for messages.
    pub fn describe(&self) -> String {
        let conf = match &self.ceph_conf {
            Some(path) => path.display().to_string(),
            None => match std::env::var_os("CEPH_CONF") {
                Some(path) => format!("{} (from $CEPH_CONF)", PathBuf::from(path).display()),
                None => "librados' default (/etc/ceph/ceph.conf)".to_string(),
            },
        };
        format!("conf {conf}, client.{}", self.client)
    }

    fn op_timeout_seconds(&self) -> u64 {
        self.op_timeout_ms.div_ceil(1000).max(1)
    }
}

/// One connected librados client.
pub(crate) struct Cluster {
    pub(crate) handle: Rados,
    pub(crate) spec: ClusterSpec,
    /// The monitors it reached (`mon_host`), for `sluice backend list` and messages.
    pub(crate) monitors: String,
    pub(crate) library: &'static Library,
}

// SAFETY: a `rados_t` may be used from any thread at once (librados is thread-safe);
// the handle is only shut down in Drop, when no other reference exists.
unsafe impl Send for Cluster {}
// SAFETY: as above; the struct has no interior state of its own besides the handle.
unsafe impl Sync for Cluster {}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle came from rados_create + rados_connect and every image
        // and pool context made from it holds an Arc of this cluster, so none is left.
        unsafe { (self.library.rados_shutdown)(self.handle) };
    }
}

/// The connections open now, by spec; entries die with their last image.
static CLUSTERS: Mutex<Vec<(ClusterSpec, Weak<Cluster>)>> = Mutex::new(Vec::new());

/// The process's connection for `spec`, connecting when there is none.
///
/// The list is not locked while connecting, which takes up to the op timeout when
/// the cluster does not answer: a connect to one cluster (or a slow one) must not
/// hold up every thread that opens or reopens anything on another. Two threads that
/// connect to the same spec at once each make a client; the first listed is kept and
/// the other is shut down.
pub(crate) fn connect(spec: &ClusterSpec) -> Result<Arc<Cluster>, RbdError> {
    if let Some(cluster) = listed(spec) {
        return Ok(cluster);
    }
    let connected = Arc::new(connect_new(spec)?);
    let mut clusters = CLUSTERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    clusters.retain(|(_, cluster)| cluster.strong_count() > 0);
    if let Some(cluster) = clusters.iter().find(|(open, _)| open == spec).and_then(|(_, cluster)| cluster.upgrade()) {
        // Another thread connected first: ours is shut down, outside the lock.
        drop(clusters);
        drop(connected);
        return Ok(cluster);
    }
    clusters.push((spec.clone(), Arc::downgrade(&connected)));
    Ok(connected)
}

/// The listed connection for `spec`, if one is open.
fn listed(spec: &ClusterSpec) -> Option<Arc<Cluster>> {
    let mut clusters = CLUSTERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    clusters.retain(|(_, cluster)| cluster.strong_count() > 0);
    clusters.iter().find(|(open, _)| open == spec).and_then(|(_, cluster)| cluster.upgrade())
}

/// Makes the next [`connect`] for `spec` start a new client: the current one was
/// blocklisted (fenced), and a blocklist entry names one client instance, so a new
/// one is served again. Images and objects opened through the old client keep it
/// (their requests fail) until they are reopened.
pub(crate) fn forget(spec: &ClusterSpec) {
    let mut clusters = CLUSTERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    clusters.retain(|(open, cluster)| open != spec && cluster.strong_count() > 0);
}

/// How many cluster connections are open in this process (for tests and status).
pub fn open_connections() -> usize {
    let clusters = CLUSTERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    clusters.iter().filter(|(_, cluster)| cluster.strong_count() > 0).count()
}

pub(crate) fn cstring(text: &str, what: &str) -> Result<CString, RbdError> {
    CString::new(text).map_err(|_| RbdError::Invalid(format!("{what} {text:?} contains a NUL byte")))
}

/// librados options Sluice sets differently from Ceph's defaults, unless the
/// configuration file or CEPH_ARGS names them (a value set through the API outranks
/// both, so Sluice looks before it sets; see [`operator_sets`]).
///
/// `librados_thread_count`: the threads of the client's io_context pool, which run
/// librbd's dispatch of each request and every completion callback (Ceph's default: 2).
/// With two, a request's dispatch and its completion land on either thread, and each
/// hand-off wakes a sleeping one; with one, the thread finds the next request queued
/// behind the last and runs them in a row. Measured against SPDK's bdev_rbd target
/// (docs/results/rbd.md, section 7): 4 KiB random reads at QD16 took 19 instead of
/// 26 us of gateway CPU per I/O and 1.15-1.3x the IOPS. The thread spends 5-7 us per
/// 4 KiB request, so one serves some 140,000 requests a second per cluster connection;
/// a gateway that needs more sets the option in its configuration file.
const GATEWAY_DEFAULTS: [(&str, &str); 1] = [("librados_thread_count", "1")];

fn connect_new(spec: &ClusterSpec) -> Result<Cluster, RbdError> {
    let library = library::library().map_err(RbdError::LibraryMissing)?;
    let failed = |step: &str, code: c_int| RbdError::Cluster {
        cluster: spec.describe(),
        step: step.to_string(),
        code: i64::from(code),
    };
    let client = cstring(&spec.client, "client")?;
    let mut handle: Rados = std::ptr::null_mut();
    // SAFETY: `handle` is a valid out pointer and `client` a NUL-terminated string
    // that outlives the call.
    let code = unsafe { (library.rados_create)(&mut handle, client.as_ptr()) };
    if code < 0 {
        return Err(failed("creating the client", code));
    }
    // From here on, Drop shuts the handle down on every error path.
    let mut cluster = Cluster { handle, spec: spec.clone(), monitors: String::new(), library };
    let path = spec.ceph_conf.as_ref().map(|path| cstring(&path.to_string_lossy(), "ceph_conf")).transpose()?;
    // SAFETY: the handle is live; the path is NUL-terminated or null (default lookup).
    let code =
        unsafe { (library.rados_conf_read_file)(handle, path.as_ref().map_or(std::ptr::null(), |path| path.as_ptr())) };
    if code < 0 {
        return Err(failed("reading the configuration file", code));
    }
    // SAFETY: the handle is live; null means the CEPH_ARGS variable.
    unsafe { (library.rados_conf_parse_env)(handle, std::ptr::null()) };
    let file = spec.ceph_conf.clone().or_else(default_conf_file);
    let file_text = file.as_ref().and_then(|file| std::fs::read_to_string(file).ok()).unwrap_or_default();
    let arguments = std::env::var("CEPH_ARGS").unwrap_or_default();
    for (option, value) in GATEWAY_DEFAULTS {
        if operator_sets(&file_text, &arguments, option) {
            continue;
        }
        let (option_c, value_c) = (cstring(option, "option")?, cstring(value, "value")?);
        // SAFETY: the handle is live; both strings are NUL-terminated.
        let code = unsafe { (library.rados_conf_set)(handle, option_c.as_ptr(), value_c.as_ptr()) };
        if code < 0 {
            return Err(failed(&format!("setting {option}"), code));
        }
    }
    let timeout = spec.op_timeout_seconds().to_string();
    let connect_timeout = CONNECT_TIMEOUT_SECONDS.to_string();
    // librbd copies each write's data (`rbd_disable_zero_copy_writes`, on by default),
    // and that stays: with zero-copy writes librbd holds a request's completion back
    // until the messenger has let go of the caller's buffer, and a message still
    // queued to an OSD that stalled without closing its connection holds it until the
    // connection is reset, which can be far past the op timeout. The copy costs a few
    // microseconds per 128 KiB write; a request that outlives its timeout costs a hang.
    let settings: [(&str, &str); 7] = [
        // Writes are acknowledged only once the OSDs have them: no volatile cache to
        // flush, so the namespace advertises none and FUA needs nothing extra.
        ("rbd_cache", "false"),
        ("rados_osd_op_timeout", &timeout),
        ("rados_mon_op_timeout", &timeout),
        ("client_mount_timeout", &connect_timeout),
        // librados would print its own retries on sluice's stderr; sluice reports
        // failures itself, with the backend they belong to.
        ("log_to_stderr", "false"),
        ("err_to_stderr", "false"),
        ("log_file", ""),
    ];
    for (option, value) in settings {
        let (option_c, value_c) = (cstring(option, "option")?, cstring(value, "value")?);
        // SAFETY: the handle is live; both strings are NUL-terminated.
        let code = unsafe { (library.rados_conf_set)(handle, option_c.as_ptr(), value_c.as_ptr()) };
        if code < 0 {
            return Err(failed(&format!("setting {option}"), code));
        }
    }
    let number = |option: &str| conf_get(library, handle, option).and_then(|value| value.trim().parse::<f64>().ok());
    let ping_interval = watch_ping_interval_seconds(number("osd_client_watch_timeout"));
    if number("objecter_tick_interval").is_none_or(|tick| tick > ping_interval) {
        let option_c = cstring("objecter_tick_interval", "option")?;
        let value_c = cstring(&ping_interval.to_string(), "value")?;
        // SAFETY: the handle is live; both strings are NUL-terminated.
        let code = unsafe { (library.rados_conf_set)(handle, option_c.as_ptr(), value_c.as_ptr()) };
        if code < 0 {
            return Err(failed("setting objecter_tick_interval", code));
        }
    }
    cluster.monitors = conf_get(library, handle, "mon_host").unwrap_or_default();
    // SAFETY: the handle is live and configured.
    let code = unsafe { (library.rados_connect)(handle) };
    if code < 0 {
        return Err(failed(&format!("connecting to the monitors ({})", display_monitors(&cluster.monitors)), code));
    }
    Ok(cluster)
}

fn display_monitors(monitors: &str) -> &str {
    if monitors.is_empty() {
        "no mon_host configured"
    } else {
        monitors
    }
}

/// One option's value in the process's client for `spec` (connecting if there is
/// none), as librados resolved it: Sluice's defaults, then the configuration file, then
/// CEPH_ARGS, then what Sluice forces. `None`: librados knows no such option.
pub fn client_option(spec: &ClusterSpec, option: &str) -> Result<Option<String>, RbdError> {
    let cluster = connect(spec)?;
    Ok(conf_get(cluster.library, cluster.handle, option))
}

/// The file librados reads when no `ceph_conf` is given: $CEPH_CONF, then the first of
/// /etc/ceph/ceph.conf, ~/.ceph/ceph.conf and ./ceph.conf that exists.
fn default_conf_file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CEPH_CONF") {
        return Some(PathBuf::from(path));
    }
    let home = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".ceph/ceph.conf"));
    [Some(PathBuf::from("/etc/ceph/ceph.conf")), home, Some(PathBuf::from("ceph.conf"))]
        .into_iter()
        .flatten()
        .find(|path| path.exists())
}

/// Whether the operator's configuration names `option` (in any section of the file, or
/// in CEPH_ARGS), in any of the spellings Ceph accepts: `librados_thread_count`,
/// `librados thread count`, `librados-thread-count`.
fn operator_sets(file_text: &str, arguments: &str, option: &str) -> bool {
    let normal = |text: &str| text.trim().to_ascii_lowercase().replace([' ', '-'], "_");
    let in_file = file_text.lines().any(|line| {
        let line = line.trim_start();
        !line.starts_with(['#', ';']) && line.split_once('=').is_some_and(|(key, _)| normal(key) == option)
    });
    let in_arguments = arguments
        .split_whitespace()
        .any(|argument| normal(argument.trim_start_matches('-').split('=').next().unwrap_or_default()) == option);
    in_file || in_arguments
}

/// One option's value as librados sees it.
fn conf_get(library: &Library, handle: Rados, option: &str) -> Option<String> {
    let option = CString::new(option).ok()?;
    let mut buffer = vec![0u8; 1024];
    // SAFETY: the handle is live; the buffer is writable for its whole length.
    let code = unsafe { (library.rados_conf_get)(handle, option.as_ptr(), buffer.as_mut_ptr().cast(), buffer.len()) };
    if code < 0 {
        return None;
    }
    CStr::from_bytes_until_nul(&buffer).ok().map(|value| value.to_string_lossy().into_owned())
}

/// An open image and the pool context it was opened through.
pub(crate) struct OpenImage {
    pub(crate) cluster: Arc<Cluster>,
    io: IoContext,
    pub(crate) image: library::Image,
    pub(crate) pool: String,
    pub(crate) name: String,
}

// SAFETY: librbd allows asynchronous requests on one `rbd_image_t` from several
// threads at once; the handles are closed only in Drop, when no queue is left.
unsafe impl Send for OpenImage {}
// SAFETY: as above.
unsafe impl Sync for OpenImage {}

impl Drop for OpenImage {
    /// Closing waits for librbd (and the last image of a cluster shuts its connection
    /// down): when the last holder was a connection on an I/O thread, the service
    /// thread closes it.
    fn drop(&mut self) {
        let closing = ClosingImage { cluster: Arc::clone(&self.cluster), io: self.io, image: self.image };
        if storage::service::is_io_thread() {
            storage::service::process_service().execute(Box::new(move || closing.close()));
        } else {
            closing.close();
        }
    }
}

/// The handles of an image whose `OpenImage` is gone, on their way to being closed.
struct ClosingImage {
    cluster: Arc<Cluster>,
    io: IoContext,
    image: library::Image,
}

// SAFETY: the handles moved out of an `OpenImage` that no queue uses any more; librbd
// and librados allow closing them from any thread.
unsafe impl Send for ClosingImage {}

impl ClosingImage {
    fn close(self) {
        storage::service::debug_assert_may_block("closing an RBD image");
        let library = self.cluster.library;
        // SAFETY: both handles are live and closed once, here; every queue held an Arc
        // of the image and drained (or leaked) its requests before letting go.
        unsafe {
            (library.rbd_close)(self.image);
            (library.rados_ioctx_destroy)(self.io);
        }
    }
}

/// What opening found or did.
pub(crate) struct Opened {
    pub(crate) image: OpenImage,
    pub(crate) size_bytes: u64,
    /// The image did not exist and was created with the configured size.
    pub(crate) created: bool,
    /// The image was smaller than the configured size and was grown (from this size).
    pub(crate) grown_from_bytes: Option<u64>,
}

/// Whether opening may change the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenMode {
    /// Create a missing image and grow a smaller one to `size` (`sluice serve`).
    CreateOrGrow,
    /// Change nothing; a missing image is reported, not created (`sluice config check`).
    Inspect,
}

/// Opens `pool/name` on `cluster`.
pub(crate) fn open_image(
    cluster: Arc<Cluster>,
    pool: &str,
    name: &str,
    size_bytes: Option<u64>,
    mode: OpenMode,
) -> Result<Opened, RbdError> {
    let library = cluster.library;
    let image_spec = format!("{pool}/{name}");
    let failed = |step: &str, code: c_int| RbdError::Image {
        image: image_spec.clone(),
        cluster: cluster.spec.describe(),
        step: step.to_string(),
        code: i64::from(code),
    };
    let (pool_c, name_c) = (cstring(pool, "pool")?, cstring(name, "image")?);
    let mut io: IoContext = std::ptr::null_mut();
    // SAFETY: the cluster is connected; `io` is a valid out pointer.
    let code = unsafe { (library.rados_ioctx_create)(cluster.handle, pool_c.as_ptr(), &mut io) };
    if code < 0 {
        return Err(if code == -libc::ENOENT {
            RbdError::PoolMissing { pool: pool.to_string(), cluster: cluster.spec.describe() }
        } else {
            failed("opening the pool", code)
        });
    }
    let mut image: library::Image = std::ptr::null_mut();
    let open = |image: &mut library::Image| {
        // SAFETY: `io` is a live pool context, `image` a valid out pointer, and a null
        // snapshot name opens the image itself.
        unsafe { (library.rbd_open)(io, name_c.as_ptr(), image, std::ptr::null()) }
    };
    let destroy_io = || {
        // SAFETY: `io` is live and nothing else uses it on this error path.
        unsafe { (library.rados_ioctx_destroy)(io) }
    };
    let mut created = false;
    let mut code = open(&mut image);
    if code == -libc::ENOENT {
        match (size_bytes, mode) {
            (Some(size), OpenMode::CreateOrGrow) => {
                let mut order: c_int = 0; // 0: the default object size (4 MiB)
                                          // SAFETY: `io` is live; `order` is a valid in/out pointer.
                let create = unsafe { (library.rbd_create)(io, name_c.as_ptr(), size, &mut order) };
                if create < 0 && create != -libc::EEXIST {
                    destroy_io();
                    return Err(failed("creating the image", create));
                }
                created = create == 0;
                code = open(&mut image);
            }
            _ => {
                destroy_io();
                return Err(RbdError::ImageMissing {
                    image: image_spec.clone(),
                    cluster: cluster.spec.describe(),
                    will_create: size_bytes.is_some(),
                });
            }
        }
    }
    if code < 0 {
        destroy_io();
        return Err(failed("opening the image", code));
    }
    let opened_image =
        OpenImage { cluster: Arc::clone(&cluster), io, image, pool: pool.to_string(), name: name.to_string() };
    let mut current: u64 = 0;
    // SAFETY: the image is open; `current` is a valid out pointer.
    let code = unsafe { (library.rbd_get_size)(opened_image.image, &mut current) };
    if code < 0 {
        return Err(failed("reading the image size", code));
    }
    let mut grown_from_bytes = None;
    if let (Some(wanted), OpenMode::CreateOrGrow) = (size_bytes, mode) {
        if wanted > current {
            // SAFETY: the image is open; the progress callback ignores its (null)
            // argument. Shrinking is refused by librbd itself: another gateway may
            // have grown the image past `wanted` since `current` was read.
            let code = unsafe {
                (library.rbd_resize2)(
                    opened_image.image,
                    wanted,
                    false,
                    super::errors::resize_progress,
                    std::ptr::null_mut(),
                )
            };
            let mut after: u64 = 0;
            // SAFETY: as above; `after` is a valid out pointer.
            let read = unsafe { (library.rbd_get_size)(opened_image.image, &mut after) };
            if read < 0 {
                return Err(failed("reading the image size", read));
            }
            if code < 0 && after < wanted {
                return Err(failed("growing the image to the configured size", code));
            }
            grown_from_bytes = Some(current);
            current = after;
        }
    }
    Ok(Opened { image: opened_image, size_bytes: current, created, grown_from_bytes })
}

#[cfg(test)]
mod tests {
    use super::{operator_sets, watch_ping_interval_seconds};

    #[test]
    fn watches_are_pinged_four_times_within_the_shortest_timeout_and_never_less_often_than_librados_does() {
        // Ceph's default header watch timeout (30 s): Sluice's own 10 s bounds it.
        assert_eq!(watch_ping_interval_seconds(Some(30.0)), 2.5);
        assert_eq!(watch_ping_interval_seconds(None), 2.5);
        // A cluster tuned for fast takeover (the test cluster's 5 s).
        assert_eq!(watch_ping_interval_seconds(Some(5.0)), 1.25);
        assert_eq!(watch_ping_interval_seconds(Some(0.0)), 2.5, "0 is not a timeout");
        for timeout in [0.5, 1.0, 3.0, 7.0, 10.0, 60.0, 600.0] {
            let interval = watch_ping_interval_seconds(Some(timeout));
            assert!(interval * 4.0 <= timeout.min(10.0) + 1e-9 && interval <= 5.0, "{timeout}: {interval}");
        }
    }

    #[test]
    fn operator_settings_are_found_in_every_spelling() {
        let option = "librados_thread_count";
        for file in [
            "[client]\nlibrados_thread_count = 3\n",
            "[global]\n  librados thread count=4\n",
            "[client.admin]\nlibrados-thread-count = 2",
        ] {
            assert!(operator_sets(file, "", option), "{file:?}");
        }
        for arguments in ["--librados_thread_count=3", "--id admin --librados-thread-count 3"] {
            assert!(operator_sets("", arguments, option), "{arguments:?}");
        }
        for (file, arguments) in [
            ("[client]\n# librados_thread_count = 3\n; librados_thread_count = 3\nkeyring = x\n", "--id admin"),
            ("[client]\nlibrados_thread_count_max = 3\n", "--librados_thread_count_max=3"),
        ] {
            assert!(!operator_sets(file, arguments, option), "{file:?} {arguments:?}");
        }
    }
}

//! A small record kept in one RADOS object and shared by several processes: read it
//! whole, replace it only if nobody changed it since (a compare on an extended
//! attribute in the same compound operation, so two writers can never both win), and
//! learn of other writers' changes through watch/notify.
//!
//! Sluice's gateway groups keep each namespace's reservations this way: the OSD that
//! holds the object serialises every change, so no consensus protocol is written here.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::Arc;
use std::time::Duration;

use super::coordination::{RadosErrno, RadosObject};

/// Largest record read back: reservation records are a few KiB at most.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// `LIBRADOS_CREATE_EXCLUSIVE`: the create fails with EEXIST when the object exists.
const CREATE_EXCLUSIVE: c_int = 1;
/// `LIBRADOS_CMPXATTR_OP_EQ`.
const COMPARE_EQUAL: u8 = 1;

/// What a replace found when it did not write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplaceError {
    /// Another writer changed (or created) the record first: read it again and retry.
    Changed,
    /// The cluster refused or did not answer.
    Cluster(RadosErrno),
}

/// Who answered a notify, by client global id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotifyReplies {
    /// Watchers that acknowledged in time.
    pub acknowledged: Vec<u64>,
    /// Watchers that did not.
    pub silent: Vec<u64>,
}

/// What a watch reports, on a librados thread.
#[derive(Debug)]
pub enum WatchEvent<'payload> {
    /// Another client (or this one) notified the object with this payload. The
    /// notifier counts this watcher as having acted on it only once the
    /// [`Acknowledgement`] is sent, which the handler may do at once or later from
    /// any thread (dropping it withholds it).
    Notice(&'payload [u8], Acknowledgement),
    /// The watch was lost (the OSD timed it out, or this client was disconnected or
    /// blocklisted): notices may have been missed until it is re-established.
    Lost(RadosErrno),
}

/// The acknowledgement one notice's notifier waits for. Send it with
/// [`Acknowledgement::acknowledge`] once the notice has been acted on; dropping it
/// unsent withholds it, so the notifier sees this watcher as silent when its timeout
/// passes (and may fence it).
///
/// Why it can outlive the callback: librados delivers notices on the same finisher
/// thread as this client's I/O completions (RBD images included). A handler that
/// waited there for I/O to finish would wait for completions queued behind itself;
/// it hands this to a thread of its own instead.
#[must_use = "a notice is withheld unless its acknowledgement is sent"]
pub struct Acknowledgement {
    object: Arc<RadosObject>,
    notify_id: u64,
    cookie: u64,
}

impl std::fmt::Debug for Acknowledgement {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Acknowledgement")
            .field("object", &self.object.describe())
            .field("notify_id", &self.notify_id)
            .finish()
    }
}

impl Acknowledgement {
    /// Tells the notifier this watcher has acted on the notice (the OSD forwards
    /// it; nothing waits for an answer here).
    pub fn acknowledge(self) {
        let object = &self.object;
        // SAFETY: the pool context and object name are live (held by the Arc); an
        // empty reply is allowed; librados accepts an acknowledgement from any thread,
        // also after the watch was unregistered (the OSD then ignores it).
        unsafe {
            (object.cluster.library.rados_notify_ack)(
                object.io,
                object.object.as_ptr(),
                self.notify_id,
                self.cookie,
                std::ptr::null(),
                0,
            );
        }
    }
}

/// Called for each [`WatchEvent`]; must not block (librados runs it on the finisher
/// thread that also completes this client's I/O) and must not call back into the
/// watch.
pub type WatchHandler = Box<dyn Fn(WatchEvent<'_>) + Send + Sync>;

/// The state a watch callback reaches through librados' `void *` argument.
struct WatchContext {
    object: Arc<RadosObject>,
    handler: WatchHandler,
}

/// One registered watch; dropping it unregisters it and waits until no callback runs.
pub struct Watch {
    context: Box<WatchContext>,
    cookie: u64,
}

// SAFETY: the context is only read by callbacks (through a shared reference) and by
// Drop, which unregisters and flushes callbacks before freeing it.
unsafe impl Send for Watch {}
// SAFETY: as above; `check` only reads the cookie.
unsafe impl Sync for Watch {}

impl Watch {
    /// Time since the OSD last confirmed the watch, or why it is broken (ENOTCONN
    /// when it must be registered again).
    pub fn check(&self) -> Result<Duration, RadosErrno> {
        let object = &self.context.object;
        // SAFETY: the pool context is live (the context holds the object) and the
        // cookie came from rados_watch3.
        let code = unsafe { (object.cluster.library.rados_watch_check)(object.io, self.cookie) };
        if code < 0 {
            Err(RadosErrno(code))
        } else {
            Ok(Duration::from_millis(code as u64))
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let object = &self.context.object;
        // SAFETY: the cookie came from rados_watch3 on this pool context; after the
        // flush no callback holds a reference to the context, so it may be freed.
        unsafe {
            (object.cluster.library.rados_unwatch2)(object.io, self.cookie);
            (object.cluster.library.rados_watch_flush)(object.cluster.handle);
        }
    }
}

unsafe extern "C" fn on_notice(
    argument: *mut c_void,
    notify_id: u64,
    cookie: u64,
    _notifier: u64,
    data: *mut c_void,
    length: usize,
) {
    // SAFETY: `argument` is the boxed WatchContext, alive until Drop has flushed the
    // callbacks.
    let context = unsafe { &*argument.cast::<WatchContext>() };
    let payload: &[u8] = if data.is_null() || length == 0 {
        &[]
    } else {
        // SAFETY: librados passes `length` readable bytes at `data` for the call.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) }
    };
    let acknowledgement = Acknowledgement { object: Arc::clone(&context.object), notify_id, cookie };
    // A panic must not cross into C. A handler that panicked dropped the
    // acknowledgement unsent: the notifier treats this watcher as silent.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (context.handler)(WatchEvent::Notice(payload, acknowledgement))
    }));
}

unsafe extern "C" fn on_watch_error(argument: *mut c_void, _cookie: u64, error: c_int) {
    // SAFETY: as in `on_notice`.
    let context = unsafe { &*argument.cast::<WatchContext>() };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (context.handler)(WatchEvent::Lost(RadosErrno(error)))
    }));
}

fn name(text: &str) -> CString {
    CString::new(text.replace('\0', "")).unwrap_or_default()
}

impl RadosObject {
    /// The whole object (up to [`MAX_RECORD_BYTES`]); `None` when it does not exist.
    pub fn read_record(&self) -> Result<Option<Vec<u8>>, RadosErrno> {
        self.read_record_up_to(MAX_RECORD_BYTES)
    }

    /// The whole object, which must be shorter than `max_bytes` (a longer one is
    /// refused with EFBIG rather than returned cut short); `None` when it does not
    /// exist.
    pub fn read_record_up_to(&self, max_bytes: usize) -> Result<Option<Vec<u8>>, RadosErrno> {
        let mut buffer = vec![0u8; max_bytes];
        // SAFETY: the context is live; the buffer is writable for its whole length.
        let code = unsafe {
            (self.cluster.library.rados_read)(
                self.io,
                self.object.as_ptr(),
                buffer.as_mut_ptr().cast::<c_char>(),
                buffer.len(),
                0,
            )
        };
        if code < 0 {
            let errno = RadosErrno(code);
            return if errno.is_missing() { Ok(None) } else { Err(errno) };
        }
        if code as usize >= max_bytes {
            return Err(RadosErrno(-libc::EFBIG));
        }
        buffer.truncate(code as usize);
        Ok(Some(buffer))
    }

    /// Replaces the object's content with `content` and its attribute `attribute`
    /// with `new_value`, in one operation that runs only if the attribute still is
    /// `expected` (or, with `None`, if the object does not exist yet).
    pub fn replace_record(
        &self,
        attribute: &str,
        expected: Option<&[u8]>,
        new_value: &[u8],
        content: &[u8],
    ) -> Result<(), ReplaceError> {
        let library = self.cluster.library;
        let attribute = name(attribute);
        // SAFETY: creating an empty operation has no preconditions.
        let operation = unsafe { (library.rados_create_write_op)() };
        if operation.is_null() {
            return Err(ReplaceError::Cluster(RadosErrno(-libc::ENOMEM)));
        }
        // SAFETY: the operation is live until released below; every buffer outlives
        // rados_write_op_operate, which is where librados reads them.
        let code = unsafe {
            match expected {
                None => (library.rados_write_op_create)(operation, CREATE_EXCLUSIVE, std::ptr::null()),
                Some(value) => (library.rados_write_op_cmpxattr)(
                    operation,
                    attribute.as_ptr(),
                    COMPARE_EQUAL,
                    value.as_ptr().cast::<c_char>(),
                    value.len(),
                ),
            }
            (library.rados_write_op_setxattr)(
                operation,
                attribute.as_ptr(),
                new_value.as_ptr().cast::<c_char>(),
                new_value.len(),
            );
            (library.rados_write_op_write_full)(operation, content.as_ptr().cast::<c_char>(), content.len());
            let code =
                (library.rados_write_op_operate)(operation, self.io, self.object.as_ptr(), std::ptr::null_mut(), 0);
            (library.rados_release_write_op)(operation);
            code
        };
        match code {
            0.. => Ok(()),
            // cmpxattr mismatch, an exclusive create of an existing object, or the
            // attribute missing on an object someone else created.
            code if code == -libc::ECANCELED || code == -libc::EEXIST || code == -libc::ENODATA => {
                Err(ReplaceError::Changed)
            }
            code => Err(ReplaceError::Cluster(RadosErrno(code))),
        }
    }

    /// Sends `payload` to every watcher of the object (this client's too) and waits
    /// until each acknowledged or `timeout` passed. Returns the global ids of the
    /// watchers that did not acknowledge in time (they will not have the change until
    /// they do).
    pub fn notify(&self, payload: &[u8], timeout: Duration) -> Result<Vec<u64>, RadosErrno> {
        self.notify_watchers(payload, timeout).map(|replies| replies.silent)
    }

    /// [`RadosObject::notify`], with who acknowledged too: a client that neither
    /// acknowledged nor was silent had no watch registered (a lost watch).
    pub fn notify_watchers(&self, payload: &[u8], timeout: Duration) -> Result<NotifyReplies, RadosErrno> {
        let library = self.cluster.library;
        let length = c_int::try_from(payload.len()).map_err(|_| RadosErrno(-libc::E2BIG))?;
        let mut reply: *mut c_char = std::ptr::null_mut();
        let mut reply_length: usize = 0;
        // SAFETY: the context is live; the payload is readable for `length`; reply
        // and its length are valid out pointers.
        let code = unsafe {
            (library.rados_notify2)(
                self.io,
                self.object.as_ptr(),
                payload.as_ptr().cast::<c_char>(),
                length,
                timeout.as_millis() as u64,
                &mut reply,
                &mut reply_length,
            )
        };
        let mut replies = NotifyReplies::default();
        if !reply.is_null() {
            let mut acks: *mut super::library::NotifyAck = std::ptr::null_mut();
            let mut timeouts: *mut super::library::NotifyTimeout = std::ptr::null_mut();
            let (mut ack_count, mut timeout_count) = (0usize, 0usize);
            // SAFETY: `reply` is the buffer librados returned with its length (set
            // also on timeout); the out pointers are valid.
            let decoded = unsafe {
                (library.rados_decode_notify_response)(
                    reply,
                    reply_length,
                    &mut acks,
                    &mut ack_count,
                    &mut timeouts,
                    &mut timeout_count,
                )
            };
            if decoded == 0 {
                if !timeouts.is_null() && timeout_count > 0 {
                    // SAFETY: librados allocated `timeout_count` entries at `timeouts`.
                    let entries = unsafe { std::slice::from_raw_parts(timeouts, timeout_count) };
                    replies.silent.extend(entries.iter().map(|entry| entry.notifier_id));
                }
                if !acks.is_null() && ack_count > 0 {
                    // SAFETY: librados allocated `ack_count` entries at `acks`.
                    let entries = unsafe { std::slice::from_raw_parts(acks, ack_count) };
                    replies.acknowledged.extend(entries.iter().map(|entry| entry.notifier_id));
                }
                // SAFETY: both arrays came from rados_decode_notify_response and are freed once.
                unsafe { (library.rados_free_notify_response)(acks, ack_count, timeouts) };
            }
            // SAFETY: librados allocated the reply and it is freed once.
            unsafe { (library.rados_buffer_free)(reply) };
        }
        // A timeout that names who was silent is an answer; any other failure is not.
        let silent_named = code == -libc::ETIMEDOUT && !replies.silent.is_empty();
        if code < 0 && !silent_named {
            return Err(RadosErrno(code));
        }
        Ok(replies)
    }

    /// Registers a watch: `handler` hears every notify on the object until the
    /// returned [`Watch`] is dropped, and hears when the watch is lost.
    /// `timeout`: how long the OSD keeps the watch of a silent client.
    pub fn watch(self: &Arc<Self>, handler: WatchHandler, timeout: Duration) -> Result<Watch, RadosErrno> {
        let context = Box::new(WatchContext { object: Arc::clone(self), handler });
        let mut cookie: u64 = 0;
        let argument = (&*context as *const WatchContext).cast_mut().cast::<c_void>();
        let timeout_seconds = u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX).max(1);
        // SAFETY: the context is live; the callbacks match librados' prototypes and
        // get `argument`, which points into the box kept in the Watch (its address
        // does not change when the box moves).
        let code = unsafe {
            (self.cluster.library.rados_watch3)(
                self.io,
                self.object.as_ptr(),
                &mut cookie,
                on_notice,
                on_watch_error,
                timeout_seconds,
                argument,
            )
        };
        if code < 0 {
            return Err(RadosErrno(code));
        }
        Ok(Watch { context, cookie })
    }
}

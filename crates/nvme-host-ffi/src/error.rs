//! Errors at the C boundary: a negative errno-style code for the return value and a
//! message kept per thread for `sluice_last_error()`; every entry point runs inside
//! [`ffi_call`], which also turns a panic into an error instead of unwinding into C.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error for the C caller: `errno` is positive (EINVAL, EIO, ...); the entry point
/// returns `-errno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FfiError {
    pub errno: c_int,
    pub message: String,
}

impl FfiError {
    pub fn new(errno: c_int, message: impl Into<String>) -> Self {
        FfiError { errno, message: message.into() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        FfiError::new(libc::EINVAL, message)
    }
}

pub type FfiResult<T> = Result<T, FfiError>;

thread_local! {
    /// The message of the last failed call on this thread ("" before any failure).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error (interior NULs become spaces).
pub fn set_last_error(message: &str) {
    let bytes: Vec<u8> = message.bytes().map(|b| if b == 0 { b' ' } else { b }).collect();
    let text = CString::new(bytes).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; then the text is lost
    // rather than panicking.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = text;
        }
    });
}

/// Pointer to this thread's last error message; valid until the next failing call on
/// this thread. Never panics ("" when the thread's storage is already torn down).
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.try_with(|slot| slot.try_borrow().map(|text| text.as_ptr()).ok()).ok().flatten().unwrap_or(c"".as_ptr())
}

/// Runs one entry point: `Ok(value)` is returned as is (it must be >= 0); an error
/// sets the last-error text and returns `-errno`; a panic is caught (it must not
/// unwind into C), reported as `-EIO`, and `on_panic` runs so the caller can mark the
/// handle it was using as unusable.
pub fn ffi_call(name: &str, on_panic: impl FnOnce(), body: impl FnOnce() -> FfiResult<c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => {
            set_last_error(&format!("{name}: {}", error.message));
            -error.errno.abs().max(1)
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            // on_panic itself must not unwind either.
            let _ = catch_unwind(AssertUnwindSafe(on_panic));
            set_last_error(&format!("{name}: internal error (panic: {what}); the handle is no longer usable"));
            -libc::EIO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: last_error_ptr points at this thread's live CString.
        unsafe { CStr::from_ptr(last_error_ptr()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn errors_and_panics_become_negative_codes() {
        assert_eq!(ffi_call("ok", || {}, || Ok(7)), 7);
        assert_eq!(ffi_call("f", || {}, || Err(FfiError::invalid("bad nsid"))), -libc::EINVAL);
        assert_eq!(last(), "f: bad nsid");
        let mut poisoned = false;
        let rc = ffi_call("g", || poisoned = true, || panic!("boom"));
        assert_eq!(rc, -libc::EIO);
        assert!(poisoned);
        assert!(last().contains("boom"), "{}", last());
    }

    #[test]
    fn messages_with_nul_bytes_are_kept() {
        set_last_error("a\0b");
        assert_eq!(last(), "a b");
    }
}

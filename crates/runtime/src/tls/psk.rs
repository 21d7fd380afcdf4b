//! OpenSSL's TLS 1.3 external-PSK callbacks, which the `openssl` crate does not wrap:
//! the server's find-session callback (look the offered identity up, hand OpenSSL a
//! session holding the PSK) and the client's use-session callback (offer one identity
//! and its PSK). The legacy PSK callbacks the crate does wrap only ever produce
//! TLS_AES_128_GCM_SHA256 sessions in TLS 1.3, and NVMe/TCP needs SHA-384 keys too.

use std::ffi::c_int;
use std::panic::AssertUnwindSafe;

use openssl_sys::{EVP_MD, SSL, SSL_CIPHER, SSL_CTX, SSL_SESSION};

use super::{client_state_index, server_state_index, CipherSuite, ClientState, ServerState};

type FindSessionCallback = unsafe extern "C" fn(
    ssl: *mut SSL,
    identity: *const u8,
    identity_len: usize,
    session: *mut *mut SSL_SESSION,
) -> c_int;
type UseSessionCallback = unsafe extern "C" fn(
    ssl: *mut SSL,
    md: *const EVP_MD,
    identity: *mut *const u8,
    identity_len: *mut usize,
    session: *mut *mut SSL_SESSION,
) -> c_int;

// libssl 3 functions the openssl-sys crate does not declare (OpenSSL's ssl.h); the
// library is linked through openssl-sys.
extern "C" {
    fn SSL_CTX_set_psk_find_session_callback(context: *mut SSL_CTX, callback: Option<FindSessionCallback>);
    fn SSL_CTX_set_psk_use_session_callback(context: *mut SSL_CTX, callback: Option<UseSessionCallback>);
    fn SSL_SESSION_new() -> *mut SSL_SESSION;
    fn SSL_SESSION_set1_master_key(session: *mut SSL_SESSION, key: *const u8, length: usize) -> c_int;
    fn SSL_SESSION_set_cipher(session: *mut SSL_SESSION, cipher: *const SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(session: *mut SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut SSL, id: *const u8) -> *const SSL_CIPHER;
}

/// Installs the server callback on a context being built.
pub(super) fn install_server_callback(context: &mut openssl::ssl::SslContextBuilder) {
    // SAFETY: the context pointer is live (we hold its builder); the callback has the
    // signature libssl declares.
    unsafe { SSL_CTX_set_psk_find_session_callback(context.as_ptr(), Some(find_session)) };
}

/// TLS extension number of pre_shared_key (RFC 8446, section 4.2).
const PRE_SHARED_KEY_EXTENSION: u32 = 41;

/// The identities a ClientHello offers in its pre_shared_key extension, in order
/// (empty when it offers none or the extension is malformed).
pub(super) fn offered_identities(ssl: &openssl::ssl::SslRef) -> Vec<&[u8]> {
    use foreign_types::ForeignTypeRef as _;
    let mut data: *const u8 = std::ptr::null();
    let mut length: usize = 0;
    // SAFETY: called from the client hello callback, where the ClientHello is
    // available; the out pointers are valid locals.
    let found = unsafe {
        openssl_sys::SSL_client_hello_get0_ext(ssl.as_ptr(), PRE_SHARED_KEY_EXTENSION, &mut data, &mut length)
    };
    if found != 1 || data.is_null() {
        return Vec::new();
    }
    // SAFETY: libssl points at `length` bytes of the ClientHello, which lives while
    // the handshake runs; the slice does not outlive the callback's borrow of `ssl`.
    let extension = unsafe { std::slice::from_raw_parts(data, length) };
    let mut identities = parse_offered_identities(extension);
    identities.truncate(MAX_IDENTITIES_LOOKED_UP);
    identities
}

/// Offered identities looked up per ClientHello: each lookup costs HMACs and HKDFs
/// before the peer has proven anything, so a ClientHello listing thousands of
/// identities gets only the first few considered. (A host offers one.)
pub(super) const MAX_IDENTITIES_LOOKED_UP: usize = 4;

/// Splits OfferedPsks (RFC 8446, section 4.2.11): a 16-bit length of identities,
/// each a 16-bit length, the identity and a 32-bit ticket age; then the binders,
/// which are ignored here. Malformed input yields what parsed before the fault.
pub(super) fn parse_offered_identities(extension: &[u8]) -> Vec<&[u8]> {
    let mut identities = Vec::new();
    let Some(list_length) = extension.get(..2).map(|bytes| usize::from(u16::from_be_bytes([bytes[0], bytes[1]])))
    else {
        return identities;
    };
    let Some(mut list) = extension.get(2..2 + list_length) else { return identities };
    while list.len() >= 2 {
        let identity_length = usize::from(u16::from_be_bytes([list[0], list[1]]));
        let Some(identity) = list.get(2..2 + identity_length) else { break };
        let Some(rest) = list.get(2 + identity_length + 4..) else { break };
        identities.push(identity);
        list = rest;
    }
    identities
}

/// Installs the client callback on a context being built.
pub(super) fn install_client_callback(context: &mut openssl::ssl::SslContextBuilder) {
    // SAFETY: as above.
    unsafe { SSL_CTX_set_psk_use_session_callback(context.as_ptr(), Some(use_session)) };
}

/// A TLS 1.3 session whose resumption secret is `key`, for `suite`: what OpenSSL takes
/// as an external PSK. Null when OpenSSL refuses (no memory, suite not enabled).
///
/// # Safety
/// `ssl` is a live SSL in a handshake (we are inside one of its callbacks).
unsafe fn psk_session(ssl: *mut SSL, key: &[u8], suite: CipherSuite) -> *mut SSL_SESSION {
    let id = suite.id_bytes();
    // SAFETY: `ssl` is live per the contract; `id` is the two-byte suite id it reads.
    let cipher = unsafe { SSL_CIPHER_find(ssl, id.as_ptr()) };
    if cipher.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: plain constructor.
    let session = unsafe { SSL_SESSION_new() };
    if session.is_null() {
        return session;
    }
    // SAFETY: `session` was just made and is ours; `key` is readable for its length
    // (libssl copies it); `cipher` came from libssl's own table.
    let ok = unsafe {
        SSL_SESSION_set1_master_key(session, key.as_ptr(), key.len()) == 1
            && SSL_SESSION_set_cipher(session, cipher) == 1
            && SSL_SESSION_set_protocol_version(session, openssl_sys::TLS1_3_VERSION) == 1
    };
    if !ok {
        // SAFETY: ours, not handed to libssl.
        unsafe { openssl_sys::SSL_SESSION_free(session) };
        return std::ptr::null_mut();
    }
    session
}

/// libssl's server callback: `identity` is what the ClientHello offered. Returns 1
/// with a session for a known identity, 1 with none for an unknown one (the handshake
/// then fails: there is no certificate to fall back on), 0 on an internal failure.
///
/// # Safety
/// Called by libssl during a handshake with a live `ssl`, `identity` readable for
/// `identity_len` bytes and `session` writable.
unsafe extern "C" fn find_session(
    ssl: *mut SSL,
    identity: *const u8,
    identity_len: usize,
    session: *mut *mut SSL_SESSION,
) -> c_int {
    // SAFETY: `session` is writable per the contract.
    unsafe { *session = std::ptr::null_mut() };
    let Some(index) = server_state_index() else { return 0 };
    // SAFETY: `ssl` is live; the value at this index, when present, is the
    // ServerState the session put there (openssl's set_ex_data stores a Box<T>).
    let state = unsafe { openssl_sys::SSL_get_ex_data(ssl, index.as_raw()) }.cast::<ServerState>();
    if state.is_null() || (identity.is_null() && identity_len != 0) {
        return 0;
    }
    let offered = if identity_len == 0 {
        &[][..]
    } else {
        // SAFETY: libssl hands over `identity_len` readable bytes.
        unsafe { std::slice::from_raw_parts(identity, identity_len) }
    };
    // SAFETY: the state lives as long as the SSL, which is inside this handshake; no
    // Rust reference to it is alive while libssl runs the handshake.
    let state = unsafe { &*state };
    // Only the identities the ClientHello callback considered (OpenSSL walks the
    // list in order, so later ones are past the bound).
    if state.lookups.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= MAX_IDENTITIES_LOOKED_UP {
        state.record_refusal(offered);
        return 1;
    }
    // The ClientHello callback usually found it already; else look it up here. A
    // panic must not unwind into C.
    let choice = match state.take_found(offered) {
        Some(choice) => Some(choice),
        None => match std::panic::catch_unwind(AssertUnwindSafe(|| (state.lookup)(offered))) {
            Ok(choice) => choice,
            Err(_) => return 0,
        },
    };
    let Some(choice) = choice else {
        state.record_refusal(offered);
        return 1;
    };
    // SAFETY: `ssl` is live per the contract.
    let made = unsafe { psk_session(ssl, &choice.key, choice.suite) };
    if made.is_null() {
        return 0;
    }
    state.record_identity(offered);
    // SAFETY: writable per the contract; libssl takes ownership of the session.
    unsafe { *session = made };
    1
}

/// libssl's client callback: offers the configured identity with its PSK. `md` is
/// null on the first call and the server's chosen hash after a HelloRetryRequest; the
/// client offers only its key's suite, so the PSK is offered either way (OpenSSL 3
/// hands a different EVP_MD object for the same hash, so comparing pointers would
/// wrongly drop the PSK after every HelloRetryRequest).
///
/// # Safety
/// Called by libssl during a handshake with a live `ssl` and writable out pointers.
unsafe extern "C" fn use_session(
    ssl: *mut SSL,
    _md: *const EVP_MD,
    identity: *mut *const u8,
    identity_len: *mut usize,
    session: *mut *mut SSL_SESSION,
) -> c_int {
    // SAFETY: writable per the contract.
    unsafe {
        *session = std::ptr::null_mut();
        *identity = std::ptr::null();
        *identity_len = 0;
    }
    let Some(index) = client_state_index() else { return 0 };
    // SAFETY: as in `find_session`: the ClientState the session stored.
    let state = unsafe { openssl_sys::SSL_get_ex_data(ssl, index.as_raw()) }.cast::<ClientState>();
    if state.is_null() {
        return 0;
    }
    // SAFETY: lives as long as the SSL; only read here.
    let state = unsafe { &*state };
    // SAFETY: `ssl` is live per the contract.
    let made = unsafe { psk_session(ssl, &state.key, state.suite) };
    if made.is_null() {
        return 0;
    }
    // SAFETY: writable per the contract; the identity bytes live in the state, which
    // outlives the handshake; libssl takes ownership of the session.
    unsafe {
        *identity = state.identity.as_ptr();
        *identity_len = state.identity.len();
        *session = made;
    }
    1
}

//! NVMe in-band authentication: DH-HMAC-CHAP (NVMe TP 8006, NVMe Base 2.0 "NVMe
//! over Fabrics In-band Authentication"), sans-io.
//!
//! After a Fabrics Connect whose response sets AUTHREQ.ATR, the host proves on that
//! queue that it knows a secret shared with the controller, and may ask the
//! controller to prove the same about a second secret (bidirectional
//! authentication). The exchange rides in the data of Fabrics Authentication Send
//! (host to controller) and Authentication Receive (controller to host) commands:
//!
//! ```text
//! host                                        controller
//!  | -- Send AUTH_Negotiate (hashes, groups) -->  | picks hash and DH group
//!  | -- Receive ----------------------------------| DH-HMAC-CHAP_Challenge (C1, S1, g^x)
//!  | -- Send DH-HMAC-CHAP_Reply (R1, [C2, S2], g^y) ->  checks R1
//!  | -- Receive ----------------------------------| DH-HMAC-CHAP_Success1 ([R2]) or AUTH_Failure1
//!  | -- Send DH-HMAC-CHAP_Success2 (only when R2 was asked and matched) or AUTH_Failure2
//! ```
//!
//! - [`Secret`]: the `DHHC-1:...` representation nvme-cli prints, with the key
//!   transform; never printed by `Debug`/`Display`, zeroed on drop.
//! - [`message`]: the wire format of every message, decoded with every length
//!   checked against a named limit; nothing here panics on hostile input.
//! - [`DhGroup`], [`HashFunction`]: the negotiable groups (null, RFC 7919 ffdhe2048
//!   .. ffdhe8192) and hashes (SHA-256/384/512).
//! - [`ControllerAuthentication`] and [`HostAuthentication`]: one queue's transaction
//!   as a state machine each; bytes in, next message or outcome out. No sockets,
//!   threads or clocks: the caller runs the commands and the timers.
//!
//! NVMe/TCP's TLS keys share the secrets' representation and hashes, so they live
//! here too:
//! - [`TlsKey`]: a configured PSK in the `NVMeTLSkey-1:...` interchange format, and
//!   the retained PSK, PSK digest and TLS PSK derived from it;
//! - [`PskIdentity`]: the identity a host offers in its TLS ClientHello.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod controller;
mod group;
mod hash;
mod host;
mod key_text;
pub mod message;
mod primes;
mod random;
mod response;
mod secret;
mod tls_identity;
mod tls_key;

pub use controller::{
    ControllerAuthentication, ControllerCredentials, ControllerPolicy, Negotiated, Progress, ReceiveError,
};
pub use group::{DhError, DhGroup, EphemeralKey, MAX_PUBLIC_VALUE_BYTES};
pub use hash::{DigestValue, HashFunction, MAX_DIGEST_BYTES};
pub use host::{
    CommandResult, HostAuthError, HostAuthentication, HostCredentials, HostPolicy, HostStep, RECEIVE_ALLOCATION_BYTES,
};
pub use message::{FailureReason, Message};
pub use random::{OsRandom, RandomError, RandomSource, SeededRandom};
pub use secret::{Secret, SecretError, TransformedKey, KEY_LENGTHS};
pub use tls_identity::{IdentityError, IdentityVersion, PskIdentity, PskKind, MAX_NQN_BYTES, MAX_PSK_IDENTITY_BYTES};
pub use tls_key::{KeyDerivation, TlsKey, TlsKeyError, TlsPsk, TLS_KEY_LENGTHS};

/// SECP of Authentication Send / Receive for DH-HMAC-CHAP: E9h (NVMe Base 2.0,
/// "Security Protocol" values for authentication).
pub const SECURITY_PROTOCOL_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 of Authentication Send / Receive for DH-HMAC-CHAP: 01h each.
pub const SECURITY_PROTOCOL_SPECIFIC_DHCHAP: u8 = 0x01;

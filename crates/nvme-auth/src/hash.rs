//! The hash functions DH-HMAC-CHAP negotiates (NVMe Base 2.0, "DH-HMAC-CHAP hash
//! function identifiers"): SHA-256, SHA-384 and SHA-512, used both as a plain hash
//! (of the Diffie-Hellman session key) and inside HMAC (responses, key transform).

use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256, Sha384, Sha512};
use zeroize::Zeroize;

/// Longest digest of any negotiable hash (SHA-512): bounds every challenge and
/// response field.
pub const MAX_DIGEST_BYTES: usize = 64;

/// A hash function of DH-HMAC-CHAP, by its HashID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashFunction {
    /// HashID 01h.
    Sha256,
    /// HashID 02h.
    Sha384,
    /// HashID 03h.
    Sha512,
}

impl HashFunction {
    /// Every hash function, in identifier order.
    pub const ALL: [HashFunction; 3] = [HashFunction::Sha256, HashFunction::Sha384, HashFunction::Sha512];

    /// HashID as carried in messages.
    pub const fn id(self) -> u8 {
        match self {
            HashFunction::Sha256 => 0x01,
            HashFunction::Sha384 => 0x02,
            HashFunction::Sha512 => 0x03,
        }
    }

    /// The hash function with this HashID; `None` for reserved values.
    pub const fn from_id(id: u8) -> Option<Self> {
        match id {
            0x01 => Some(HashFunction::Sha256),
            0x02 => Some(HashFunction::Sha384),
            0x03 => Some(HashFunction::Sha512),
            _ => None,
        }
    }

    /// Digest length in bytes: HL in the Challenge, Reply and Success1 messages.
    pub const fn length(self) -> usize {
        match self {
            HashFunction::Sha256 => 32,
            HashFunction::Sha384 => 48,
            HashFunction::Sha512 => 64,
        }
    }

    /// The name nvme-cli and Linux use ("sha256"...).
    pub const fn name(self) -> &'static str {
        match self {
            HashFunction::Sha256 => "sha256",
            HashFunction::Sha384 => "sha384",
            HashFunction::Sha512 => "sha512",
        }
    }

    /// The hash function named `name`: "sha256", or the Linux crypto name
    /// "hmac(sha256)" (what nvmet's `dhchap_hash` attribute shows); `None` otherwise.
    pub fn from_name(name: &str) -> Option<Self> {
        let bare = name.strip_prefix("hmac(").and_then(|rest| rest.strip_suffix(')')).unwrap_or(name);
        HashFunction::ALL.into_iter().find(|hash| hash.name().eq_ignore_ascii_case(bare))
    }

    /// H(data).
    pub fn hash(self, data: &[u8]) -> DigestValue {
        let mut out = DigestValue::empty(self.length());
        match self {
            HashFunction::Sha256 => out.bytes[..32].copy_from_slice(&Sha256::digest(data)),
            HashFunction::Sha384 => out.bytes[..48].copy_from_slice(&Sha384::digest(data)),
            HashFunction::Sha512 => out.bytes[..64].copy_from_slice(&Sha512::digest(data)),
        }
        out
    }

    /// HMAC(key, parts[0] || parts[1] || ...): the responses and the key transform
    /// are HMACs over a concatenation, fed piece by piece so nothing is copied.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> DigestValue {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]], out: &mut [u8]) {
            // HMAC accepts keys of any length (long keys are hashed first), so
            // `new_from_slice` cannot fail.
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
            for part in parts {
                mac.update(part);
            }
            out.copy_from_slice(&mac.finalize().into_bytes());
        }
        let mut out = DigestValue::empty(self.length());
        let length = self.length();
        match self {
            HashFunction::Sha256 => run::<Hmac<Sha256>>(key, parts, &mut out.bytes[..length]),
            HashFunction::Sha384 => run::<Hmac<Sha384>>(key, parts, &mut out.bytes[..length]),
            HashFunction::Sha512 => run::<Hmac<Sha512>>(key, parts, &mut out.bytes[..length]),
        }
        out
    }
}

/// A digest or HMAC value of up to [`MAX_DIGEST_BYTES`], zeroed on drop (responses
/// and hashed session keys are secret until they are on the wire).
#[derive(Clone)]
pub struct DigestValue {
    bytes: [u8; MAX_DIGEST_BYTES],
    length: usize,
}

impl DigestValue {
    fn empty(length: usize) -> Self {
        debug_assert!(length <= MAX_DIGEST_BYTES);
        DigestValue { bytes: [0; MAX_DIGEST_BYTES], length }
    }

    /// A copy of `bytes` (at most [`MAX_DIGEST_BYTES`]; longer input is our bug and
    /// is cut, never overrun).
    pub(crate) fn copy_of(bytes: &[u8]) -> Self {
        debug_assert!(bytes.len() <= MAX_DIGEST_BYTES);
        let length = bytes.len().min(MAX_DIGEST_BYTES);
        let mut value = DigestValue::empty(length);
        value.bytes[..length].copy_from_slice(&bytes[..length]);
        value
    }

    /// The value.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.length]
    }

    /// Compares with `other` in time independent of where they differ, so a peer
    /// probing responses learns nothing from how long a refusal takes.
    pub fn constant_time_eq(&self, other: &[u8]) -> bool {
        constant_time_eq(self.as_bytes(), other)
    }
}

impl Drop for DigestValue {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl std::fmt::Debug for DigestValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DigestValue({} bytes)", self.length)
    }
}

/// Equality of two byte strings without an early exit.
pub fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    if left.len() != right.len() {
        return false;
    }
    let difference = left.iter().zip(right).fold(0u8, |accumulated, (a, b)| accumulated | (a ^ b));
    // black_box keeps the optimiser from turning the fold back into an early exit.
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn identifiers_round_trip_and_reserved_values_are_refused() {
        for hash in HashFunction::ALL {
            assert_eq!(HashFunction::from_id(hash.id()), Some(hash));
        }
        assert_eq!(HashFunction::from_id(0), None);
        assert_eq!(HashFunction::from_id(4), None);
        assert_eq!(HashFunction::from_id(0xFF), None);
    }

    #[test]
    fn known_answers() {
        // FIPS 180-2 "abc" and RFC 4231 test case 2 ("Jefe").
        assert_eq!(
            hex(HashFunction::Sha256.hash(b"abc").as_bytes()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(HashFunction::Sha256.hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"]).as_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(HashFunction::Sha384.hmac(b"k", &[b"x"]).as_bytes().len(), 48);
        assert_eq!(HashFunction::Sha512.hash(b"").as_bytes().len(), 64);
    }

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        let value = HashFunction::Sha256.hash(b"x");
        assert!(value.constant_time_eq(HashFunction::Sha256.hash(b"x").as_bytes()));
    }
}

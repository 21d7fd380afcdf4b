//! DH-HMAC-CHAP secrets in the NVMe secret representation that nvme-cli prints and
//! Linux parses: `DHHC-1:<tt>:<base64 of key || CRC-32>:` (NVMe Base 2.0,
//! "Secret representation").
//!
//! - `tt` is the hash that transforms the key before use: 00 none, 01 SHA-256,
//!   02 SHA-384, 03 SHA-512.
//! - the base64 text (RFC 4648, with padding) decodes to the key (32, 48 or 64
//!   bytes) followed by the CRC-32 (IEEE 802.3, the one zlib computes) of the key,
//!   least significant byte first.
//!
//! The transform, for a host secret with the host NQN and for a controller secret
//! with the subsystem NQN: `HMAC(key, NQN || "NVMe-over-Fabrics")` with the secret's
//! hash; an untransformed secret is used as is.
//!
//! A [`Secret`] never shows its key: `Debug` and `Display` print only the transform
//! and the length, and the key is zeroed when the secret is dropped. The only way
//! to get the text back is [`Secret::to_representation`], named so a reviewer sees
//! it.

use std::str::FromStr;

use zeroize::{Zeroize, Zeroizing};

use crate::hash::{constant_time_eq, DigestValue, HashFunction};
use crate::key_text;
use crate::random::RandomSource;

/// The fixed start of the representation.
const PREFIX: &str = "DHHC-1:";
/// Key lengths the representation allows, in bytes.
pub const KEY_LENGTHS: [usize; 3] = [32, 48, 64];
/// The text appended to the NQN in the key transform.
const TRANSFORM_SUFFIX: &[u8] = b"NVMe-over-Fabrics";
/// Longest representation accepted: prefix, `tt:`, base64 of 68 bytes (92
/// characters) and the final colon, with room for surrounding whitespace. Anything
/// longer is refused before it is decoded.
const MAX_REPRESENTATION_BYTES: usize = 128;

/// Why a secret was refused. The messages never contain any part of the secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The text does not have the `DHHC-1:<tt>:<base64>:` shape.
    #[error("not a DH-HMAC-CHAP secret: expected DHHC-1:<00|01|02|03>:<base64>: as printed by `nvme gen-dhchap-key`")]
    Format,
    /// The transform field is not 00, 01, 02 or 03.
    #[error("DH-HMAC-CHAP secret names transform hash {0:?}; only 00 (none), 01 (SHA-256), 02 (SHA-384) and 03 (SHA-512) exist")]
    Transform(String),
    /// The base64 text does not decode.
    #[error("DH-HMAC-CHAP secret: the key is not valid base64")]
    Base64,
    /// The key (without its CRC) is not 32, 48 or 64 bytes long.
    #[error("DH-HMAC-CHAP secret: the key is {0} bytes; it must be 32, 48 or 64")]
    KeyLength(usize),
    /// The CRC-32 after the key does not match the key: a typo or a truncated copy.
    #[error("DH-HMAC-CHAP secret: the CRC does not match the key (mistyped or truncated?)")]
    Crc,
    /// The operating system's random number generator failed (key generation).
    #[error("no random numbers available from the operating system")]
    Random,
}

/// A DH-HMAC-CHAP secret: a key and the hash that transforms it.
#[derive(Clone)]
pub struct Secret {
    key: Zeroizing<Vec<u8>>,
    transform: Option<HashFunction>,
}

/// A key after the transform, ready to key the response HMAC. Zeroed on drop.
pub type TransformedKey = Zeroizing<Vec<u8>>;

impl Secret {
    /// Parses the representation (surrounding whitespace is ignored; the final colon
    /// may be missing, as Linux accepts).
    pub fn parse(text: &str) -> Result<Secret, SecretError> {
        let (transform_text, encoded) =
            key_text::split(text, PREFIX, MAX_REPRESENTATION_BYTES).ok_or(SecretError::Format)?;
        let transform = match transform_text {
            "00" => None,
            "01" => Some(HashFunction::Sha256),
            "02" => Some(HashFunction::Sha384),
            "03" => Some(HashFunction::Sha512),
            other => {
                // Only the (short, non-secret) transform field goes into the error.
                let shown: String = other.chars().take(4).collect();
                return Err(SecretError::Transform(shown));
            }
        };
        let decoded = key_text::decode(encoded).map_err(|error| match error {
            key_text::DecodeError::Base64 => SecretError::Base64,
            key_text::DecodeError::TooShort => SecretError::KeyLength(0),
        })?;
        if !KEY_LENGTHS.contains(&decoded.key.len()) {
            return Err(SecretError::KeyLength(decoded.key.len()));
        }
        if !decoded.crc_matches {
            return Err(SecretError::Crc);
        }
        Ok(Secret { key: decoded.key, transform })
    }

    /// A secret from raw key bytes (32, 48 or 64 of them).
    pub fn from_key(key: &[u8], transform: Option<HashFunction>) -> Result<Secret, SecretError> {
        if !KEY_LENGTHS.contains(&key.len()) {
            return Err(SecretError::KeyLength(key.len()));
        }
        Ok(Secret { key: Zeroizing::new(key.to_vec()), transform })
    }

    /// A new random secret of `length` bytes (32, 48 or 64) from the operating
    /// system's generator.
    pub fn generate(length: usize, transform: Option<HashFunction>) -> Result<Secret, SecretError> {
        if !KEY_LENGTHS.contains(&length) {
            return Err(SecretError::KeyLength(length));
        }
        let mut key = Zeroizing::new(vec![0u8; length]);
        crate::random::OsRandom.fill(&mut key).map_err(|_| SecretError::Random)?;
        Ok(Secret { key, transform })
    }

    /// The representation, `DHHC-1:<tt>:<base64>:`, exactly as nvme-cli prints it.
    /// This is the secret itself: never log it.
    pub fn to_representation(&self) -> Zeroizing<String> {
        key_text::encode(PREFIX, self.transform_id(), &self.key)
    }

    /// The transform field: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512.
    pub fn transform_id(&self) -> u8 {
        self.transform.map_or(0, HashFunction::id)
    }

    /// The hash that transforms the key, if any.
    pub fn transform(&self) -> Option<HashFunction> {
        self.transform
    }

    /// Length of the key in bytes.
    pub fn key_length(&self) -> usize {
        self.key.len()
    }

    /// The key as it keys the response HMAC: `HMAC(key, nqn || "NVMe-over-Fabrics")`
    /// with the transform hash, or the key itself when untransformed. `nqn` is the
    /// host NQN for a host secret and the subsystem NQN for a controller secret.
    pub fn transformed(&self, nqn: &str) -> TransformedKey {
        match self.transform {
            None => Zeroizing::new(self.key.to_vec()),
            Some(hash) => {
                let value: DigestValue = hash.hmac(&self.key, &[nqn.as_bytes(), TRANSFORM_SUFFIX]);
                Zeroizing::new(value.as_bytes().to_vec())
            }
        }
    }
}

impl FromStr for Secret {
    type Err = SecretError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Secret::parse(text)
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.transform == other.transform && constant_time_eq(&self.key, &other.key)
    }
}

impl Eq for Secret {}

// Debug and Display name what kind of secret it is, never the key: secrets end up
// in configuration structs, error chains and log lines.
impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(DHHC-1:{:02x}, {}-byte key, redacted)", self.transform_id(), self.key.len())
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DHHC-1:{:02x}:<redacted {}-byte key>:", self.transform_id(), self.key.len())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // Zeroizing already clears the key; the transform is not secret. Spelled out
        // so removing the Zeroizing wrapper by accident still leaves this.
        self.key.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_0_TO_31: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";

    #[test]
    fn parses_and_formats_nvme_cli_output() {
        // `nvme gen-dhchap-key -s 000102...1f -m 0` (nvme-cli 2.3).
        let secret = Secret::parse(KEY_0_TO_31).unwrap();
        assert_eq!(secret.key_length(), 32);
        assert_eq!(secret.transform(), None);
        assert_eq!(secret.to_representation().as_str(), KEY_0_TO_31);
        let expected: Vec<u8> = (0..32).collect();
        assert_eq!(&secret.key[..], &expected[..]);
        // Missing final colon and surrounding whitespace are tolerated.
        assert_eq!(Secret::parse(&format!(" {} \n", &KEY_0_TO_31[..KEY_0_TO_31.len() - 1])).unwrap(), secret);
    }

    #[test]
    fn refuses_malformed_secrets_without_echoing_them() {
        let bad_crc = KEY_0_TO_31.replace("KfiaR", "KfiaS");
        assert_eq!(Secret::parse(&bad_crc), Err(SecretError::Crc));
        assert_eq!(Secret::parse("DHHC-2:00:AAAA:"), Err(SecretError::Format));
        assert_eq!(Secret::parse("DHHC-1:04:AAAA:"), Err(SecretError::Transform("04".into())));
        assert_eq!(Secret::parse("DHHC-1:00:!!!!:"), Err(SecretError::Base64));
        assert_eq!(Secret::parse("DHHC-1:00:AAAAAAAA:"), Err(SecretError::KeyLength(2)));
        assert_eq!(Secret::parse("DHHC-1:00::"), Err(SecretError::Format));
        assert_eq!(Secret::parse(&"A".repeat(400)), Err(SecretError::Format));
        for error in [SecretError::Crc, SecretError::Base64, SecretError::KeyLength(3)] {
            assert!(!error.to_string().contains("AAEC"));
        }
    }

    #[test]
    fn debug_and_display_never_show_the_key() {
        let secret = Secret::parse(KEY_0_TO_31).unwrap();
        for text in [format!("{secret:?}"), format!("{secret}"), format!("{:?}", Some(&secret))] {
            assert!(!text.contains("AAEC"), "{text}");
            assert!(text.contains("redacted"), "{text}");
        }
    }

    #[test]
    fn transform_is_hmac_of_nqn_and_suffix() {
        // `nvme gen-dhchap-key -s 000102...1f -m 1 -n nqn.2014-08.org.nvmexpress:uuid:0000`
        // prints the transformed key: our transform of the raw key must equal it.
        let raw = Secret::parse(KEY_0_TO_31).unwrap();
        let expected = Secret::parse("DHHC-1:01:B46EA9NPfwA9odngcp0p1uBz8sbm6jki4Bcycn2xBlah1I03:").unwrap();
        let with_sha256 = Secret::from_key(&raw.key, Some(HashFunction::Sha256)).unwrap();
        assert_eq!(&with_sha256.transformed("nqn.2014-08.org.nvmexpress:uuid:0000")[..], &expected.key[..]);
        // An untransformed key is used as it is.
        assert_eq!(&raw.transformed("anything")[..], &raw.key[..]);
    }

    #[test]
    fn generated_secrets_round_trip() {
        for length in KEY_LENGTHS {
            for transform in [None, Some(HashFunction::Sha256), Some(HashFunction::Sha512)] {
                let secret = Secret::generate(length, transform).unwrap();
                assert_eq!(Secret::parse(&secret.to_representation()).unwrap(), secret);
            }
        }
        assert_eq!(Secret::generate(33, None).err(), Some(SecretError::KeyLength(33)));
    }
}

//! Configured TLS pre-shared keys of NVMe/TCP in the PSK interchange format that
//! `nvme gen-tls-key` prints, and the keys derived from them (NVMe TCP Transport,
//! "Transport Layer Security"; TP 8011 and TP 8018).
//!
//! Interchange format: `NVMeTLSkey-1:<hh>:<base64 of key || CRC-32>:` where `hh` is
//! the hash that turns the configured PSK into the retained PSK (00 none, 01 SHA-256
//! with a 32-byte key, 02 SHA-384 with a 48-byte key) and the CRC-32 is zlib's, least
//! significant byte first (the same layout as the DH-HMAC-CHAP secret).
//!
//! From a configured PSK to the key TLS uses, with HKDF (RFC 5869) and TLS 1.3's
//! HKDF-Expand-Label (RFC 8446, section 7.1), as Linux's libnvme does:
//! 1. retained PSK = HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN",
//!    host NQN, length of the configured PSK) with the `hh` hash, or the configured
//!    PSK itself when `hh` is 00;
//! 2. the cipher suite hash is `hh`'s, or by key length when `hh` is 00 (32 bytes
//!    SHA-256, 48 bytes SHA-384);
//! 3. PSK digest (identity format 1) = base64 of HMAC(retained PSK, host NQN || " "
//!    || subsystem NQN || " NVMe-over-Fabrics") with the cipher suite hash;
//! 4. TLS PSK = HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk", context,
//!    length of the key), where the context is the identity itself for format 0 and
//!    `<hh> <PSK digest>` for format 1.
//!
//! Like [`crate::Secret`], a [`TlsKey`] never shows its key in `Debug` or `Display`
//! and is zeroed when dropped; derived keys are [`Zeroizing`] too.

use std::str::FromStr;

use base64::Engine as _;
use zeroize::Zeroizing;

use crate::hash::{constant_time_eq, HashFunction, MAX_DIGEST_BYTES};
use crate::key_text;
use crate::random::RandomSource;
use crate::tls_identity::{IdentityError, IdentityVersion, PskIdentity, PskKind};

/// The fixed start of the interchange format.
const PREFIX: &str = "NVMeTLSkey-1:";
/// Key lengths the format allows, in bytes (SHA-256 and SHA-384 cipher suites).
pub const TLS_KEY_LENGTHS: [usize; 2] = [32, 48];
/// Longest text accepted: the prefix, `hh:`, base64 of 52 bytes (72 characters), the
/// final colon and some surrounding whitespace. Longer text is refused undecoded.
const MAX_INTERCHANGE_BYTES: usize = 128;
/// What the PSK digest HMAC appends after the NQNs.
const DIGEST_SEED: &[u8] = b"NVMe-over-Fabrics";
/// HKDF-Expand-Label's prefix of every label (RFC 8446, section 7.1).
const LABEL_PREFIX: &[u8] = b"tls13 ";
/// Longest label or context HKDF-Expand-Label can carry (one length byte each).
const MAX_LABEL_FIELD_BYTES: usize = 255;

/// A TLS PSK as TLS uses it (the output of step 4): zeroed on drop.
pub type TlsPsk = Zeroizing<Vec<u8>>;

/// How HKDF-Expand-Label's input is laid out in steps 1 and 4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KeyDerivation {
    /// As RFC 8446 defines HkdfLabel (big-endian length, length-prefixed label and
    /// context): the NVMe/TCP specification, Linux's own secure-concatenation code
    /// and libnvme from 1.16.
    #[default]
    Rfc8446,
    /// What libnvme before 1.16 computes (nvme-cli up to 2.15: Debian 13, Ubuntu
    /// 24.04, RHEL 9): the length little-endian, then "tls13 ", the label and the
    /// context run together without length bytes. libnvme 1.16 keeps it as "compat".
    Compat,
}

/// Why a key or a derivation was refused. The messages never contain any part of a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlsKeyError {
    /// Not `NVMeTLSkey-1:<hh>:<base64>:`.
    #[error("not a TLS PSK in interchange format: expected NVMeTLSkey-1:<00|01|02>:<base64>: as printed by `nvme gen-tls-key` or `sluice gen-tls-key`")]
    Format,
    /// The hash field is not 00, 01 or 02.
    #[error("TLS PSK names hash {0:?}; only 00 (none), 01 (SHA-256) and 02 (SHA-384) exist")]
    Hash(String),
    /// The base64 text does not decode.
    #[error("TLS PSK: the key is not valid base64")]
    Base64,
    /// The key is not 32 or 48 bytes, or does not fit its hash (01 needs 32, 02 needs 48).
    #[error("TLS PSK: a {length}-byte key does not fit hash {hash_id:02}: 01 takes 32 bytes, 02 takes 48, 00 either")]
    KeyLength {
        /// Bytes of key (without the CRC).
        length: usize,
        /// The hash field.
        hash_id: u8,
    },
    /// The CRC-32 after the key does not match: mistyped or truncated.
    #[error("TLS PSK: the CRC does not match the key (mistyped or truncated?)")]
    Crc,
    /// The operating system's random number generator failed.
    #[error("no random numbers available from the operating system")]
    Random,
    /// An NQN or identity that cannot be used.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The identity a host offered does not belong to this key (wrong NQNs, hash or
    /// digest, or a generated PSK, which configured keys never are).
    #[error("the PSK identity does not match this host's key: {0}")]
    Mismatch(&'static str),
    /// An HKDF-Expand-Label context longer than its one-byte length allows (format 0
    /// identities of two very long NQNs).
    #[error("the PSK identity is {0} bytes, too long to derive a TLS PSK from (at most 255); use identity format 1")]
    ContextTooLong(usize),
}

/// A configured TLS PSK and the hash that turns it into the retained PSK.
#[derive(Clone)]
pub struct TlsKey {
    key: Zeroizing<Vec<u8>>,
    transform: Option<HashFunction>,
}

impl TlsKey {
    /// Parses the interchange format (surrounding whitespace ignored; the final colon
    /// may be missing).
    pub fn parse(text: &str) -> Result<TlsKey, TlsKeyError> {
        let (hash_text, encoded) = key_text::split(text, PREFIX, MAX_INTERCHANGE_BYTES).ok_or(TlsKeyError::Format)?;
        let transform = match hash_text {
            "00" => None,
            "01" => Some(HashFunction::Sha256),
            "02" => Some(HashFunction::Sha384),
            other => return Err(TlsKeyError::Hash(other.chars().take(4).collect())),
        };
        let decoded = key_text::decode(encoded).map_err(|error| match error {
            key_text::DecodeError::Base64 => TlsKeyError::Base64,
            key_text::DecodeError::TooShort => {
                TlsKeyError::KeyLength { length: 0, hash_id: transform.map_or(0, HashFunction::id) }
            }
        })?;
        check_length(decoded.key.len(), transform)?;
        if !decoded.crc_matches {
            return Err(TlsKeyError::Crc);
        }
        Ok(TlsKey { key: decoded.key, transform })
    }

    /// A key from raw bytes: 32 for SHA-256, 48 for SHA-384, either without transform.
    pub fn from_key(key: &[u8], transform: Option<HashFunction>) -> Result<TlsKey, TlsKeyError> {
        check_length(key.len(), transform)?;
        Ok(TlsKey { key: Zeroizing::new(key.to_vec()), transform })
    }

    /// A new random key for `hash` (32 bytes for SHA-256, 48 for SHA-384), transformed
    /// with that hash, like `nvme gen-tls-key --hmac`.
    pub fn generate(hash: HashFunction, random: &mut dyn RandomSource) -> Result<TlsKey, TlsKeyError> {
        let length = hash.length();
        check_length(length, Some(hash))?;
        let mut key = Zeroizing::new(vec![0u8; length]);
        random.fill(&mut key).map_err(|_| TlsKeyError::Random)?;
        Ok(TlsKey { key, transform: Some(hash) })
    }

    /// The interchange format, exactly as nvme-cli prints it. This is the key itself:
    /// never log it.
    pub fn to_interchange(&self) -> Zeroizing<String> {
        key_text::encode(PREFIX, self.transform_id(), &self.key)
    }

    /// The hash field: 0 none, 1 SHA-256, 2 SHA-384.
    pub fn transform_id(&self) -> u8 {
        self.transform.map_or(0, HashFunction::id)
    }

    /// Length of the key in bytes.
    pub fn key_length(&self) -> usize {
        self.key.len()
    }

    /// The cipher suite's hash: the transform's, or by key length without one.
    pub fn cipher_hash(&self) -> HashFunction {
        match self.transform {
            Some(hash) => hash,
            None if self.key.len() == HashFunction::Sha384.length() => HashFunction::Sha384,
            None => HashFunction::Sha256,
        }
    }

    /// The retained PSK for `host_nqn` (step 1).
    pub fn retained(&self, host_nqn: &str) -> Result<Zeroizing<Vec<u8>>, TlsKeyError> {
        self.retained_with(host_nqn, KeyDerivation::Rfc8446)
    }

    /// The retained PSK for `host_nqn` with `derivation`'s HKDF layout.
    pub fn retained_with(&self, host_nqn: &str, derivation: KeyDerivation) -> Result<Zeroizing<Vec<u8>>, TlsKeyError> {
        match self.transform {
            None => Ok(self.key.clone()),
            Some(hash) => {
                hkdf_expand_label(hash, derivation, &self.key, b"HostNQN", host_nqn.as_bytes(), self.key.len())
            }
        }
    }

    /// The identity a host with this key offers to `subsystem_nqn`, in `version`'s format.
    pub fn identity(
        &self,
        host_nqn: &str,
        subsystem_nqn: &str,
        version: IdentityVersion,
    ) -> Result<PskIdentity, TlsKeyError> {
        self.identity_with(host_nqn, subsystem_nqn, version, KeyDerivation::Rfc8446)
    }

    /// [`Self::identity`] with `derivation` (format 1's digest depends on it).
    pub fn identity_with(
        &self,
        host_nqn: &str,
        subsystem_nqn: &str,
        version: IdentityVersion,
        derivation: KeyDerivation,
    ) -> Result<PskIdentity, TlsKeyError> {
        let hash = self.cipher_hash();
        Ok(match version {
            IdentityVersion::V0 => PskIdentity::v0(PskKind::Retained, hash, host_nqn, subsystem_nqn)?,
            IdentityVersion::V1 => {
                let retained = self.retained_with(host_nqn, derivation)?;
                let digest = psk_digest(hash, &retained, host_nqn, subsystem_nqn);
                PskIdentity::v1(PskKind::Retained, hash, host_nqn, subsystem_nqn, &digest)?
            }
        })
    }

    /// The TLS PSK for `identity` (RFC 8446 layout); see [`Self::tls_psk_with`].
    pub fn tls_psk(&self, identity: &PskIdentity) -> Result<TlsPsk, TlsKeyError> {
        self.tls_psk_with(identity, KeyDerivation::Rfc8446)
    }

    /// The TLS PSK for `identity`, after checking that the identity belongs to this
    /// key: a retained PSK, this key's cipher suite hash, and for format 1 a digest
    /// that only this key (with `derivation`) produces.
    pub fn tls_psk_with(&self, identity: &PskIdentity, derivation: KeyDerivation) -> Result<TlsPsk, TlsKeyError> {
        if identity.kind() != PskKind::Retained {
            return Err(TlsKeyError::Mismatch("a generated PSK (secure channel concatenation) is not supported"));
        }
        let hash = self.cipher_hash();
        if identity.hash() != hash {
            return Err(TlsKeyError::Mismatch("the identity names a different cipher suite hash than the key"));
        }
        let retained = self.retained_with(identity.host_nqn(), derivation)?;
        let label = b"nvme-tls-psk";
        match identity.digest() {
            None => {
                hkdf_expand_label(hash, derivation, &retained, label, identity.to_string().as_bytes(), retained.len())
            }
            Some(offered) => {
                let digest = psk_digest(hash, &retained, identity.host_nqn(), identity.subsystem_nqn());
                if !constant_time_eq(digest.as_bytes(), offered.as_bytes()) {
                    return Err(TlsKeyError::Mismatch("the PSK digest differs (another key, or other NQNs)"));
                }
                let context = Zeroizing::new(format!("{:02} {digest}", hash.id()));
                hkdf_expand_label(hash, derivation, &retained, label, context.as_bytes(), retained.len())
            }
        }
    }

    /// The controller's lookup: the TLS PSK for an identity a host offered. A format 1
    /// identity's digest tells which derivation the host used (both are tried); a
    /// format 0 identity carries no such hint, so `format_0_derivation` decides.
    pub fn tls_psk_for_host(
        &self,
        identity: &PskIdentity,
        format_0_derivation: KeyDerivation,
    ) -> Result<(TlsPsk, KeyDerivation), TlsKeyError> {
        if identity.digest().is_none() {
            return self.tls_psk_with(identity, format_0_derivation).map(|psk| (psk, format_0_derivation));
        }
        match self.tls_psk_with(identity, KeyDerivation::Rfc8446) {
            Ok(psk) => Ok((psk, KeyDerivation::Rfc8446)),
            Err(TlsKeyError::Mismatch(_)) => {
                self.tls_psk_with(identity, KeyDerivation::Compat).map(|psk| (psk, KeyDerivation::Compat))
            }
            Err(error) => Err(error),
        }
    }
}

fn check_length(length: usize, transform: Option<HashFunction>) -> Result<(), TlsKeyError> {
    let fits = match transform {
        None => TLS_KEY_LENGTHS.contains(&length),
        Some(HashFunction::Sha256) => length == 32,
        Some(HashFunction::Sha384) => length == 48,
        Some(HashFunction::Sha512) => false,
    };
    if fits {
        Ok(())
    } else {
        Err(TlsKeyError::KeyLength { length, hash_id: transform.map_or(0, HashFunction::id) })
    }
}

/// Step 3: base64 of HMAC(retained, host NQN || " " || subsystem NQN || " " ||
/// "NVMe-over-Fabrics").
pub(crate) fn psk_digest(hash: HashFunction, retained: &[u8], host_nqn: &str, subsystem_nqn: &str) -> String {
    let value = hash.hmac(retained, &[host_nqn.as_bytes(), b" ", subsystem_nqn.as_bytes(), b" ", DIGEST_SEED]);
    base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
}

impl FromStr for TlsKey {
    type Err = TlsKeyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        TlsKey::parse(text)
    }
}

impl PartialEq for TlsKey {
    fn eq(&self, other: &Self) -> bool {
        self.transform == other.transform && constant_time_eq(&self.key, &other.key)
    }
}

impl Eq for TlsKey {}

// Keys end up in configuration structs, error chains and log lines: Debug and Display
// say what kind of key it is, never the key.
impl std::fmt::Debug for TlsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsKey(NVMeTLSkey-1:{:02x}, {}-byte key, redacted)", self.transform_id(), self.key.len())
    }
}

impl std::fmt::Display for TlsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NVMeTLSkey-1:{:02x}:<redacted {}-byte key>:", self.transform_id(), self.key.len())
    }
}

/// HKDF-Expand-Label(HKDF-Extract(0, secret), label, context, length) (RFC 8446,
/// section 7.1, over RFC 5869): the salt is empty, which HMAC pads to a zero key of
/// the hash's length, as "0" means there.
pub(crate) fn hkdf_expand_label(
    hash: HashFunction,
    derivation: KeyDerivation,
    secret: &[u8],
    label: &[u8],
    context: &[u8],
    length: usize,
) -> Result<Zeroizing<Vec<u8>>, TlsKeyError> {
    if context.len() > MAX_LABEL_FIELD_BYTES {
        return Err(TlsKeyError::ContextTooLong(context.len()));
    }
    debug_assert!(LABEL_PREFIX.len() + label.len() <= MAX_LABEL_FIELD_BYTES && length <= usize::from(u16::MAX));
    let pseudo_random_key = hash.hmac(&[], &[secret]);
    let mut info = Vec::with_capacity(4 + LABEL_PREFIX.len() + label.len() + context.len());
    match derivation {
        KeyDerivation::Rfc8446 => {
            info.extend_from_slice(&(length as u16).to_be_bytes());
            info.push((LABEL_PREFIX.len() + label.len()) as u8);
            info.extend_from_slice(LABEL_PREFIX);
            info.extend_from_slice(label);
            info.push(context.len() as u8);
            info.extend_from_slice(context);
        }
        KeyDerivation::Compat => {
            info.extend_from_slice(&(length as u16).to_le_bytes());
            info.extend_from_slice(LABEL_PREFIX);
            info.extend_from_slice(label);
            info.extend_from_slice(context);
        }
    }
    Ok(hkdf_expand(hash, pseudo_random_key.as_bytes(), &info, length))
}

/// HKDF-Expand (RFC 5869, section 2.3): T(i) = HMAC(PRK, T(i-1) || info || i).
fn hkdf_expand(hash: HashFunction, pseudo_random_key: &[u8], info: &[u8], length: usize) -> Zeroizing<Vec<u8>> {
    debug_assert!(length <= 255 * hash.length() && hash.length() <= MAX_DIGEST_BYTES);
    let mut output = Zeroizing::new(Vec::with_capacity(length));
    let mut previous: Option<crate::hash::DigestValue> = None;
    let mut counter = 1u8;
    while output.len() < length {
        let block = hash
            .hmac(pseudo_random_key, &[previous.as_ref().map_or(&[][..], |value| value.as_bytes()), info, &[counter]]);
        let take = (length - output.len()).min(block.as_bytes().len());
        output.extend_from_slice(&block.as_bytes()[..take]);
        previous = Some(block);
        counter = counter.wrapping_add(1);
    }
    output
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex")).collect()
    }

    // libnvme's test/psk.c vectors (key 55 12 db b6 ...).
    const KEY_32: &str = "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03";
    const KEY_48: &str =
        "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03ffc344bcf442e2dd6d8bc4870b5d5b03";
    const TEXT_00: &str = "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const TEXT_01: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    const TEXT_02: &str = "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:6e4bbd3b-2c76-4f6c-8d3a-3c1f0e1a2b3c";
    const SUBSYSTEM: &str = "nqn.2026-11.io.sluice:tls";

    #[test]
    fn interchange_format_matches_libnvme() {
        for (text, key, transform) in [
            (TEXT_00, KEY_32, None),
            (TEXT_01, KEY_32, Some(HashFunction::Sha256)),
            (TEXT_02, KEY_48, Some(HashFunction::Sha384)),
        ] {
            let parsed = TlsKey::parse(text).expect(text);
            assert_eq!(parsed, TlsKey::from_key(&unhex(key), transform).expect("key"));
            assert_eq!(parsed.to_interchange().as_str(), text);
        }
        assert!(TlsKey::parse(TEXT_01.trim_end_matches(':')).is_ok(), "the final colon may be missing");
    }

    #[test]
    fn malformed_keys_are_refused_without_echoing_them() {
        let bad_crc = TEXT_01.replace("9LrZ", "9LrA");
        assert_eq!(TlsKey::parse(&bad_crc), Err(TlsKeyError::Crc));
        assert_eq!(TlsKey::parse(&TEXT_01.replace(":01:", ":03:")), Err(TlsKeyError::Hash("03".to_owned())));
        assert_eq!(
            TlsKey::parse(&TEXT_02.replace(":02:", ":01:")),
            Err(TlsKeyError::KeyLength { length: 48, hash_id: 1 })
        );
        assert_eq!(TlsKey::parse(&TEXT_01.replace("VRLb", "VR!b")), Err(TlsKeyError::Base64));
        for bad in ["", "NVMeTLSkey-1:", "NVMeTLSkey-2:01:AAAA:", "DHHC-1:00:AAAA:", &"A".repeat(200)] {
            assert_eq!(TlsKey::parse(bad), Err(TlsKeyError::Format), "{bad:?}");
        }
        for error in [TlsKeyError::Crc, TlsKeyError::Base64, TlsKeyError::Format] {
            assert!(!error.to_string().contains("VRLb"));
        }
    }

    #[test]
    fn debug_and_display_never_show_the_key() {
        let key = TlsKey::parse(TEXT_01).expect("key");
        for shown in [format!("{key:?}"), key.to_string()] {
            assert!(!shown.contains("VRLb") && !shown.contains("5512"), "{shown}");
        }
    }

    #[test]
    fn hkdf_matches_rfc_5869_test_case_1() {
        // RFC 5869 A.1 (SHA-256, with salt): PRK and a 42-byte OKM (two blocks).
        let ikm = [0x0bu8; 22];
        let salt = unhex("000102030405060708090a0b0c");
        let info = unhex("f0f1f2f3f4f5f6f7f8f9");
        let pseudo_random_key = HashFunction::Sha256.hmac(&salt, &[&ikm]);
        assert_eq!(
            hex(pseudo_random_key.as_bytes()),
            "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"
        );
        assert_eq!(
            hex(&hkdf_expand(HashFunction::Sha256, pseudo_random_key.as_bytes(), &info, 42)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
    }

    // Expected values computed independently with OpenSSL's HKDF and HMAC (`openssl
    // kdf ... HKDF`, `openssl dgst -mac HMAC`) over the same HkdfLabel bytes libnvme
    // builds.
    #[test]
    fn derivations_match_openssl_sha256() {
        let key = TlsKey::parse(TEXT_01).expect("key");
        assert_eq!(
            hex(&key.retained(HOST).expect("retained")),
            "6774a3c7824f818b2a0980485e5b94641150c79546492dc693e9acfd6254608e"
        );
        let v1 = key.identity(HOST, SUBSYSTEM, IdentityVersion::V1).expect("v1");
        assert_eq!(v1.to_string(), format!("NVMe1R01 {HOST} {SUBSYSTEM} bPSiqeLE6Fgz0wHkSAk8uUBpQqvTY3ToYTpFVyuABR0="));
        assert_eq!(
            hex(&key.tls_psk(&v1).expect("psk")),
            "f941fad3c34ac16a952b3f72c2a822d67a5e4f92d8c0ceeadd9be41c4e9fed3d"
        );
        let v0 = key.identity(HOST, SUBSYSTEM, IdentityVersion::V0).expect("v0");
        assert_eq!(v0.to_string(), format!("NVMe0R01 {HOST} {SUBSYSTEM}"));
        assert_eq!(
            hex(&key.tls_psk(&v0).expect("psk")),
            "8895ab389f22fdd66b806422876df3317f81200a26eb660647784c0f8cfa315f"
        );
    }

    #[test]
    fn derivations_match_openssl_sha384() {
        let key = TlsKey::parse(TEXT_02).expect("key");
        assert_eq!(
            hex(&key.retained(HOST).expect("retained")),
            "1c6bfb5d2523090a0e930fb5b61dbff73ca6cb3bc5701ef3f999407d6d828b9d8e1dcff04beb6c58d040e9a740469096"
        );
        let v1 = key.identity(HOST, SUBSYSTEM, IdentityVersion::V1).expect("v1");
        assert_eq!(v1.digest(), Some("3vvz9A1PS4LQ/MvOQolibkRPCAHpZQQ0iPjkDjUHEBP0CiN5oO1vIEjyEXyylggO"));
        assert_eq!(
            hex(&key.tls_psk(&v1).expect("psk")),
            "d4e4f544d9c411e98a8afae1073fc75e9ba835bb0cb9803326cd0b7a83d38e34eb10b4364b8b0f03e0df424265c63211"
        );
        let v0 = key.identity(HOST, SUBSYSTEM, IdentityVersion::V0).expect("v0");
        assert_eq!(
            hex(&key.tls_psk(&v0).expect("psk")),
            "c983365723d31882c7ea0b591b00ce03edd275baad01bdf439171fb1391f43d8395edc0f5cfc52d51ef78521d1171d84"
        );
    }

    // Values from Debian 13's libnvme 1.13 (compat: the keys its `nvme
    // check-tls-key -i` put into a Linux 6.12 keyring) and libnvme's RFC 8446 layout,
    // for libnvme's test keys with host nqn.psk-test-host, subsystem nqn.psk-test-subsys.
    #[test]
    fn both_derivations_match_libnvme() {
        let (host, subsystem) = ("nqn.psk-test-host", "nqn.psk-test-subsys");
        let cases = [
            (
                TEXT_01,
                KeyDerivation::Compat,
                IdentityVersion::V0,
                None,
                "09fb1983ac6d6d0353e7cae4f23daddd651c367fa347c59d9cf6936f5a83eafb",
            ),
            (
                TEXT_01,
                KeyDerivation::Compat,
                IdentityVersion::V1,
                Some("66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM="),
                "b9f5ab2a41ba6e72a23a12066302a2f775fa6c0942c8e0b18ca8ac07edf305e2",
            ),
            (
                TEXT_02,
                KeyDerivation::Compat,
                IdentityVersion::V0,
                None,
                "2ee4754186a625b28a3936ef4a40d839c3ad958b2e017562ee07e2501f172ce999dc9c29033ea7ee33f814f192c13f47",
            ),
            (
                TEXT_02,
                KeyDerivation::Compat,
                IdentityVersion::V1,
                Some("RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz"),
                "fcefe2e2a2e682b1447dcabf1ec268f78f08c63cd075753abcc8bda2c5c34d48d3014aa8d76ad80107e4f5c9f27e2149",
            ),
            (
                TEXT_01,
                KeyDerivation::Rfc8446,
                IdentityVersion::V0,
                None,
                "05c6503551ad136e6ee32e6eeb3f6d500b69701d84ec71e328f65c7f51566f68",
            ),
            (
                TEXT_01,
                KeyDerivation::Rfc8446,
                IdentityVersion::V1,
                Some("iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU="),
                "8fc3c0badfd4c0c66fa3ca33aadd0314f85536cc9bc47338b60f3e6e563786ca",
            ),
        ];
        for (text, derivation, version, digest, expected) in cases {
            let key = TlsKey::parse(text).expect("key");
            let identity = key.identity_with(host, subsystem, version, derivation).expect("identity");
            assert_eq!(identity.digest(), digest, "{derivation:?} {version:?}");
            assert_eq!(
                hex(&key.tls_psk_with(&identity, derivation).expect("psk")),
                expected,
                "{derivation:?} {version:?}"
            );
            // The controller's lookup finds the derivation of a format 1 identity by
            // itself; format 0 takes the configured one.
            let (psk, found) = key.tls_psk_for_host(&identity, derivation).expect("lookup");
            assert_eq!((hex(&psk).as_str(), found), (expected, derivation));
            if version == IdentityVersion::V1 {
                let other = match derivation {
                    KeyDerivation::Rfc8446 => KeyDerivation::Compat,
                    KeyDerivation::Compat => KeyDerivation::Rfc8446,
                };
                let (psk, found) = key.tls_psk_for_host(&identity, other).expect("lookup");
                assert_eq!((hex(&psk).as_str(), found), (expected, derivation), "digest decides");
            }
        }
    }

    #[test]
    fn an_untransformed_key_is_its_own_retained_psk() {
        let key = TlsKey::parse(TEXT_00).expect("key");
        assert_eq!(hex(&key.retained(HOST).expect("retained")), KEY_32);
        assert_eq!(key.cipher_hash(), HashFunction::Sha256);
        assert_eq!(TlsKey::from_key(&unhex(KEY_48), None).expect("48").cipher_hash(), HashFunction::Sha384);
    }

    #[test]
    fn identities_of_other_keys_or_nqns_are_refused() {
        let key = TlsKey::parse(TEXT_01).expect("key");
        let other = TlsKey::generate(HashFunction::Sha256, &mut SeededRandom::new(7)).expect("other");
        let theirs = other.identity(HOST, SUBSYSTEM, IdentityVersion::V1).expect("identity");
        assert!(matches!(key.tls_psk(&theirs), Err(TlsKeyError::Mismatch(_))));
        let other_subsystem = key.identity(HOST, "nqn.2026-11.io.sluice:other", IdentityVersion::V1).expect("id");
        let forged = PskIdentity::v1(
            PskKind::Retained,
            HashFunction::Sha256,
            HOST,
            SUBSYSTEM,
            other_subsystem.digest().expect("d"),
        )
        .expect("forged");
        assert!(matches!(key.tls_psk(&forged), Err(TlsKeyError::Mismatch(_))));
        let wrong_hash = PskIdentity::v0(PskKind::Retained, HashFunction::Sha384, HOST, SUBSYSTEM).expect("id");
        assert!(matches!(key.tls_psk(&wrong_hash), Err(TlsKeyError::Mismatch(_))));
        let generated = PskIdentity::v0(PskKind::Generated, HashFunction::Sha256, HOST, SUBSYSTEM).expect("id");
        assert!(matches!(key.tls_psk(&generated), Err(TlsKeyError::Mismatch(_))));
    }

    #[test]
    fn generated_keys_round_trip() {
        let mut random = SeededRandom::new(1);
        for hash in [HashFunction::Sha256, HashFunction::Sha384] {
            let key = TlsKey::generate(hash, &mut random).expect("generate");
            assert_eq!(key.key_length(), hash.length());
            assert_eq!(TlsKey::parse(&key.to_interchange()).expect("parse"), key);
        }
        assert!(TlsKey::generate(HashFunction::Sha512, &mut random).is_err());
    }

    #[test]
    fn long_format_0_contexts_are_refused_not_truncated() {
        let key = TlsKey::parse(TEXT_01).expect("key");
        let long_nqn = format!("nqn.2026-11.io.sluice:{}", "x".repeat(180));
        let identity = key.identity(&long_nqn, &long_nqn, IdentityVersion::V0).expect("identity");
        assert!(matches!(key.tls_psk(&identity), Err(TlsKeyError::ContextTooLong(_))));
        let v1 = key.identity(&long_nqn, &long_nqn, IdentityVersion::V1).expect("v1");
        assert!(key.tls_psk(&v1).is_ok(), "format 1 contexts stay short");
    }
}

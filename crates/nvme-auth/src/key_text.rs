//! The text shape the DH-HMAC-CHAP secret (`DHHC-1:`) and the TLS PSK interchange
//! format (`NVMeTLSkey-1:`) share: `<prefix><hh>:<base64 of key || CRC-32>:`, where
//! `hh` names a hash and the CRC-32 (little-endian) guards the key against typos.
//! Each format reads `hh` and checks the key length its own way; the split, the
//! decoding, the CRC and the printing are here, once.

use base64::Engine as _;
use zeroize::Zeroizing;

/// Bytes of the CRC-32 that follow the key inside the base64 text.
pub(crate) const CRC_BYTES: usize = 4;

/// The hash field and the base64 text of `text` (trimmed; the final colon may be
/// missing, as Linux accepts). `None` when the text is longer than `max_bytes` or
/// does not have the shape.
pub(crate) fn split<'t>(text: &'t str, prefix: &str, max_bytes: usize) -> Option<(&'t str, &'t str)> {
    let text = text.trim();
    if text.len() > max_bytes {
        return None;
    }
    let rest = text.strip_prefix(prefix)?;
    let (hash_field, rest) = rest.split_once(':')?;
    let encoded = rest.strip_suffix(':').unwrap_or(rest);
    if encoded.is_empty() || encoded.contains(':') {
        return None;
    }
    Some((hash_field, encoded))
}

/// Why the base64 part is unusable.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not base64.
    Base64,
    /// Shorter than its CRC.
    TooShort,
}

/// The key in the base64 text, and whether the CRC after it matches.
pub(crate) struct Decoded {
    pub(crate) key: Zeroizing<Vec<u8>>,
    pub(crate) crc_matches: bool,
}

/// Decodes the base64 text into the key and checks its CRC.
pub(crate) fn decode(encoded: &str) -> Result<Decoded, DecodeError> {
    let mut decoded =
        Zeroizing::new(base64::engine::general_purpose::STANDARD.decode(encoded).map_err(|_| DecodeError::Base64)?);
    if decoded.len() < CRC_BYTES {
        return Err(DecodeError::TooShort);
    }
    let key_length = decoded.len() - CRC_BYTES;
    let crc = &decoded[key_length..];
    let crc_matches = crc32(&decoded[..key_length]) == u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    // Drop the CRC in place: the key never exists in a second, unzeroed buffer.
    decoded.truncate(key_length);
    Ok(Decoded { key: decoded, crc_matches })
}

/// `<prefix><hh>:<base64 of key || CRC-32>:`, as nvme-cli prints it.
pub(crate) fn encode(prefix: &str, hash_id: u8, key: &[u8]) -> Zeroizing<String> {
    let mut raw = Zeroizing::new(Vec::with_capacity(key.len() + CRC_BYTES));
    raw.extend_from_slice(key);
    raw.extend_from_slice(&crc32(key).to_le_bytes());
    let encoded = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&raw[..]));
    Zeroizing::new(format!("{prefix}{hash_id:02x}:{}:", encoded.as_str()))
}

/// CRC-32 as zlib computes it (IEEE 802.3, reflected, polynomial EDB88320h, initial
/// and final XOR with FFFFFFFFh), the one both formats use. A handful of bytes per
/// key parse, so no table.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn encode_then_split_and_decode_round_trips() {
        let key = [0x5Au8; 32];
        let text = encode("TEST-1:", 2, &key);
        let (hash_field, encoded) = split(&text, "TEST-1:", 128).expect("shape");
        assert_eq!(hash_field, "02");
        let decoded = decode(encoded).expect("decodes");
        assert!(decoded.crc_matches);
        assert_eq!(&decoded.key[..], &key[..]);
    }

    #[test]
    fn shapes_that_are_refused() {
        assert_eq!(split("TEST-1:01:", "TEST-1:", 128), None, "empty key");
        assert_eq!(split("TEST-1:01:a:b:", "TEST-1:", 128), None, "extra field");
        assert_eq!(split("OTHER-1:01:AAAA:", "TEST-1:", 128), None, "prefix");
        assert_eq!(split(&format!("TEST-1:01:{}:", "A".repeat(200)), "TEST-1:", 128), None, "too long");
        assert_eq!(split("  TEST-1:01:AAAA  ", "TEST-1:", 128), Some(("01", "AAAA")), "trimmed, colon optional");
        assert!(matches!(decode("!!!!"), Err(DecodeError::Base64)));
        assert!(matches!(decode("AAA="), Err(DecodeError::TooShort)));
    }
}

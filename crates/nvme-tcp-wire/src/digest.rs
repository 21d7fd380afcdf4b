//! CRC32C digests (NVMe/TCP 1.0, "PDU Header and Data Digests").
//!
//! HDGST covers the PDU header (common header and PDU specific header, HLEN bytes);
//! DDGST covers the PDU data (not the padding before it). Both are the CRC32C
//! (Castagnoli) of those bytes, sent little-endian. This is the same CRC as iSCSI
//! uses: the `crc32c` crate's value (pre- and post-inverted), hardware accelerated
//! where the CPU has it.

/// HDGST / DDGST: size of a header or data digest in bytes.
pub const DIGEST_BYTES: usize = 4;

/// CRC32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// Extends a CRC32C computed over earlier bytes with `data`:
/// `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`; start from 0.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    ::crc32c::crc32c_append(crc, data)
}

/// An incremental data digest for data that arrives or leaves in pieces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataDigest {
    crc: u32,
}

impl DataDigest {
    /// A digest over no bytes yet.
    pub const fn new() -> Self {
        Self { crc: 0 }
    }

    /// Adds the next piece of data.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.crc = crc32c_append(self.crc, data);
    }

    /// The CRC32C over everything added so far.
    pub fn value(&self) -> u32 {
        self.crc
    }

    /// The digest as it travels on the wire (little-endian).
    pub fn to_wire(&self) -> [u8; DIGEST_BYTES] {
        self.crc.to_le_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vectors() {
        // RFC 3720 appendix B.4: 32 bytes of zeros, of ones, and an incrementing run.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let incrementing: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&incrementing), 0x46DD_794E);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut digest = DataDigest::new();
        for piece in data.chunks(37) {
            digest.update(piece);
        }
        assert_eq!(digest.value(), crc32c(&data));
        assert_eq!(digest.to_wire(), crc32c(&data).to_le_bytes());
    }
}

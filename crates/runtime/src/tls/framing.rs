//! Where the received ciphertext stands against TLS record boundaries, so a
//! connection can tell whether a record is partly received (the peer is mid-record)
//! without asking OpenSSL, which keeps a partial record in its own buffer.

/// TLS record header: content type, legacy version (2 bytes), length (2 bytes)
/// (RFC 8446, section 5.1).
const RECORD_HEADER_BYTES: usize = 5;

/// Position in the received ciphertext stream: how much of the current record's
/// header and body is still to come. Costs a few comparisons per received chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordFraming {
    header: [u8; RECORD_HEADER_BYTES],
    /// Header bytes of the current record seen so far (0 at a boundary).
    header_seen: usize,
    /// Body bytes of the current record still to come.
    body_remaining: usize,
}

impl RecordFraming {
    /// Follows `bytes`, the next ciphertext received.
    pub(crate) fn advance(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.body_remaining > 0 {
                let taken = self.body_remaining.min(bytes.len());
                self.body_remaining -= taken;
                bytes = &bytes[taken..];
                continue;
            }
            let wanted = RECORD_HEADER_BYTES - self.header_seen;
            let taken = wanted.min(bytes.len());
            self.header[self.header_seen..self.header_seen + taken].copy_from_slice(&bytes[..taken]);
            self.header_seen += taken;
            bytes = &bytes[taken..];
            if self.header_seen == RECORD_HEADER_BYTES {
                self.header_seen = 0;
                self.body_remaining = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            }
        }
    }

    /// True when the ciphertext received so far ends inside a record.
    pub(crate) fn is_mid_record(&self) -> bool {
        self.header_seen > 0 || self.body_remaining > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(length: u16) -> Vec<u8> {
        let mut bytes = vec![23, 3, 3];
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend(std::iter::repeat_n(0xAB, usize::from(length)));
        bytes
    }

    #[test]
    fn boundaries_are_found_under_any_chunking() {
        let stream: Vec<u8> = [record(16_401), record(0), record(37), record(16_384)].concat();
        let boundaries = [0, 16_406, 16_411, 16_453, stream.len()];
        for chunk in [1, 2, 3, 5, 7, 4096, 16_406, 65_536] {
            let mut framing = RecordFraming::default();
            let mut offset = 0;
            for piece in stream.chunks(chunk) {
                framing.advance(piece);
                offset += piece.len();
                // The oracle: mid-record exactly when the offset is not a boundary.
                assert_eq!(framing.is_mid_record(), !boundaries.contains(&offset), "chunk {chunk}, offset {offset}");
            }
        }
    }
}

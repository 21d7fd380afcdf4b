//! Little-endian field access on byte slices. NVMe is little-endian throughout.
//!
//! These helpers index the slice and therefore panic on a short slice: callers pass
//! fixed-size structure buffers whose lengths are pinned by the types, never raw
//! network input of unchecked length.

/// Reads a little-endian u16 at `offset`.
pub fn get_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

/// Reads a little-endian u32 at `offset`.
pub fn get_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(raw)
}

/// Reads a little-endian u64 at `offset`.
pub fn get_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(raw)
}

/// Reads a little-endian u128 at `offset` (SMART counters are 128-bit).
pub fn get_u128(bytes: &[u8], offset: usize) -> u128 {
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&bytes[offset..offset + 16]);
    u128::from_le_bytes(raw)
}

/// Writes a little-endian u16 at `offset`.
pub fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
    bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
}

/// Writes a little-endian u32 at `offset`.
pub fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// Writes a little-endian u64 at `offset`.
pub fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

/// Writes a little-endian u128 at `offset`.
pub fn put_u128(bytes: &mut [u8], offset: usize, value: u128) {
    bytes[offset..offset + 16].copy_from_slice(&value.to_le_bytes());
}

/// Copies `text` into a fixed-width ASCII field padded with spaces (SN, MN, FR are
/// space-padded per the spec).
pub fn put_ascii_padded(field: &mut [u8], text: &str) {
    field.fill(b' ');
    let len = text.len().min(field.len());
    field[..len].copy_from_slice(&text.as_bytes()[..len]);
}

/// Copies `text` into a fixed-width field padded with NUL bytes (NQNs and transport
/// addresses are NUL-terminated/padded).
pub fn put_nul_padded(field: &mut [u8], text: &str) {
    field.fill(0);
    let len = text.len().min(field.len());
    field[..len].copy_from_slice(&text.as_bytes()[..len]);
}

/// Reads a NUL-padded text field up to the first NUL. Returns `None` when the bytes
/// are not UTF-8 (an NQN from the network is untrusted).
pub fn get_nul_padded(field: &[u8]) -> Option<&str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    core::str::from_utf8(&field[..end]).ok()
}

/// Copies `M` bytes starting at `offset` into an array, for handing a sub-structure
/// (a power state descriptor, a discovery record) to a decoder that takes `&[u8; M]`.
/// Like the other getters it indexes, so the caller passes a buffer whose length is
/// fixed by its type.
pub fn get_array<const M: usize>(bytes: &[u8], offset: usize) -> [u8; M] {
    let mut out = [0u8; M];
    out.copy_from_slice(&bytes[offset..offset + M]);
    out
}

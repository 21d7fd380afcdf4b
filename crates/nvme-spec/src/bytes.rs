//! Little-endian field access on byte slices. NVMe is little-endian throughout.
//!
//! Callers pass fixed-size structure buffers whose lengths are pinned by the types
//! (`&[u8; N]`), at offsets inside them, never raw network input of unchecked length.
//! The helpers still never panic: a field that does not lie entirely inside `bytes`
//! reads as zero (an array of zeros for [`get_array`]) and is not written. No caller
//! in this workspace reaches that fallback; the round-trip tests pin every offset.

/// The `N` bytes at `offset`, or `None` when they are not all inside `bytes`.
fn field<const N: usize>(bytes: &[u8], offset: usize) -> Option<&[u8; N]> {
    bytes.get(offset..)?.first_chunk()
}

/// Mutable [`field`].
fn field_mut<const N: usize>(bytes: &mut [u8], offset: usize) -> Option<&mut [u8; N]> {
    bytes.get_mut(offset..)?.first_chunk_mut()
}

/// Reads a little-endian u16 at `offset`.
pub fn get_u16(bytes: &[u8], offset: usize) -> u16 {
    field(bytes, offset).map_or(0, |raw| u16::from_le_bytes(*raw))
}

/// Reads a little-endian u32 at `offset`.
pub fn get_u32(bytes: &[u8], offset: usize) -> u32 {
    field(bytes, offset).map_or(0, |raw| u32::from_le_bytes(*raw))
}

/// Reads a little-endian u64 at `offset`.
pub fn get_u64(bytes: &[u8], offset: usize) -> u64 {
    field(bytes, offset).map_or(0, |raw| u64::from_le_bytes(*raw))
}

/// Reads a little-endian u128 at `offset` (SMART counters are 128-bit).
pub fn get_u128(bytes: &[u8], offset: usize) -> u128 {
    field(bytes, offset).map_or(0, |raw| u128::from_le_bytes(*raw))
}

/// Writes a little-endian u16 at `offset`.
pub fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
    if let Some(raw) = field_mut(bytes, offset) {
        *raw = value.to_le_bytes();
    }
}

/// Writes a little-endian u32 at `offset`.
pub fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    if let Some(raw) = field_mut(bytes, offset) {
        *raw = value.to_le_bytes();
    }
}

/// Writes a little-endian u64 at `offset`.
pub fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    if let Some(raw) = field_mut(bytes, offset) {
        *raw = value.to_le_bytes();
    }
}

/// Writes a little-endian u128 at `offset`.
pub fn put_u128(bytes: &mut [u8], offset: usize, value: u128) {
    if let Some(raw) = field_mut(bytes, offset) {
        *raw = value.to_le_bytes();
    }
}

/// Copies as much of `source` as fits to the start of `target`; returns how many
/// bytes that was (the shorter of the two lengths).
pub(crate) fn copy_prefix(target: &mut [u8], source: &[u8]) -> usize {
    let length = target.len().min(source.len());
    if let (Some(target), Some(source)) = (target.get_mut(..length), source.get(..length)) {
        target.copy_from_slice(source);
    }
    length
}

/// Copies `text` into a fixed-width ASCII field padded with spaces (SN, MN, FR are
/// space-padded per the spec).
pub fn put_ascii_padded(field: &mut [u8], text: &str) {
    field.fill(b' ');
    copy_prefix(field, text.as_bytes());
}

/// Copies `text` into a fixed-width field padded with NUL bytes (NQNs and transport
/// addresses are NUL-terminated/padded).
pub fn put_nul_padded(field: &mut [u8], text: &str) {
    field.fill(0);
    copy_prefix(field, text.as_bytes());
}

/// Reads a NUL-padded text field up to the first NUL. Returns `None` when the bytes
/// are not UTF-8 (an NQN from the network is untrusted).
pub fn get_nul_padded(field: &[u8]) -> Option<&str> {
    // `split` yields at least one piece: the bytes before the first NUL, or all.
    let text = field.split(|&byte| byte == 0).next().unwrap_or_default();
    core::str::from_utf8(text).ok()
}

/// Copies `M` bytes starting at `offset` into an array, for handing a sub-structure
/// (a power state descriptor, a discovery record) to a decoder that takes `&[u8; M]`.
/// Like the other getters it expects a buffer whose length is fixed by its type; the
/// array is all zeros when the bytes are not there.
pub fn get_array<const M: usize>(bytes: &[u8], offset: usize) -> [u8; M] {
    field(bytes, offset).copied().unwrap_or([0; M])
}

//! Shared checks for the fixed-size data structures.

use core::fmt::Debug;

/// Round-trips `raw` through a structure and back, and checks the layout:
///
/// * the bits the structure models come back unchanged, and every other bit comes
///   back zero (reserved bytes are zero-filled, even over a dirty output buffer);
/// * decoding the re-encoded bytes gives the same value.
///
/// Which bits are "modelled" is learned by decoding all-ones and encoding the result,
/// so the check needs no hand-kept list of field offsets.
pub fn assert_layout_round_trip<T, const N: usize>(
    raw: &[u8; N],
    decode: impl Fn(&[u8; N]) -> T,
    encode: impl Fn(&T, &mut [u8; N]),
) where
    T: PartialEq + Debug,
{
    let mut modelled = [0u8; N];
    encode(&decode(&[0xFF; N]), &mut modelled);

    let value = decode(raw);
    let mut out = [0xA5u8; N];
    encode(&value, &mut out);
    for index in 0..N {
        assert_eq!(
            out[index],
            raw[index] & modelled[index],
            "byte {index} not reproduced (or reserved byte not zeroed)"
        );
    }
    assert_eq!(decode(&out), value);
}

/// Converts a proptest-generated vector into a fixed array.
pub fn to_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

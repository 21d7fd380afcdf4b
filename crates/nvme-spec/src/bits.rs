//! Bit-field plumbing shared by the register newtypes and the command views.
//!
//! NVMe packs most command parameters into the command dwords (CDW10..CDW15) as bit
//! ranges; these helpers keep the shift-and-mask arithmetic in one place so each view
//! reads as a list of "field at bits high:low".

/// A mask of `width` low bits (`width` up to 32).
pub(crate) const fn mask32(width: u32) -> u32 {
    if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    }
}

/// Extracts bits `low + width - 1 : low` of `dword`.
pub(crate) const fn get_bits(dword: u32, low: u32, width: u32) -> u32 {
    (dword >> low) & mask32(width)
}

/// Replaces bits `low + width - 1 : low` of `dword` with the low bits of `value`.
pub(crate) fn set_bits(dword: &mut u32, low: u32, width: u32, value: u32) {
    let mask = mask32(width) << low;
    *dword = (*dword & !mask) | ((value << low) & mask);
}

/// Reads one bit of `dword` as a flag.
pub(crate) const fn get_flag(dword: u32, bit: u32) -> bool {
    (dword >> bit) & 1 != 0
}

/// Sets or clears one bit of `dword`.
pub(crate) fn set_flag(dword: &mut u32, bit: u32, value: bool) {
    set_bits(dword, bit, 1, u32::from(value));
}

/// Defines a getter and a `with_*` builder for a one-bit flag of a register newtype
/// whose raw integer is field `.0`.
macro_rules! register_flag {
    ($(#[$meta:meta])* $get:ident, $with:ident, $raw:ty, $bit:expr) => {
        $(#[$meta])*
        pub const fn $get(self) -> bool {
            (self.0 >> $bit) & 1 != 0
        }

        #[doc = concat!("Returns a copy with [`Self::", stringify!($get), "`] set to `value`.")]
        pub const fn $with(self, value: bool) -> Self {
            let mask: $raw = 1 << $bit;
            Self(if value { self.0 | mask } else { self.0 & !mask })
        }
    };
}

/// Defines a getter and a `with_*` builder for a multi-bit field of a register
/// newtype. The builder drops bits of `value` that do not fit the field.
macro_rules! register_field {
    ($(#[$meta:meta])* $get:ident, $with:ident, $raw:ty, $ty:ty, $low:expr, $width:expr) => {
        $(#[$meta])*
        pub const fn $get(self) -> $ty {
            let mask: $raw = (1 << $width) - 1;
            ((self.0 >> $low) & mask) as $ty
        }

        #[doc = concat!("Returns a copy with [`Self::", stringify!($get), "`] set to `value`.")]
        pub const fn $with(self, value: $ty) -> Self {
            let mask: $raw = ((1 << $width) - 1) << $low;
            Self((self.0 & !mask) | (((value as $raw) << $low) & mask))
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_insert_and_extract_without_touching_neighbours() {
        let mut dword = 0xFFFF_FFFFu32;
        set_bits(&mut dword, 8, 7, 0);
        assert_eq!(dword, 0xFFFF_80FF);
        set_bits(&mut dword, 8, 7, 0x1FF); // too wide: only 7 bits land
        assert_eq!(dword, 0xFFFF_FFFF);
        assert_eq!(get_bits(0x1234_5678, 16, 16), 0x1234);
        assert_eq!(get_bits(0x1234_5678, 0, 32), 0x1234_5678);
        set_flag(&mut dword, 31, false);
        assert!(!get_flag(dword, 31));
        assert!(get_flag(dword, 30));
    }
}

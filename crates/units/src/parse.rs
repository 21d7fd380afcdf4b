//! Reading a size: "4096", "0x1000", "4k", "64 KiB", "1GB" (the rules are in lib.rs).

use std::fmt;

use crate::format::thousands;

/// A unit a size may be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// `B`, or no unit at all.
    Byte,
    /// `KiB` or `K`: 1024 bytes.
    Kibibyte,
    /// `MiB` or `M`: 1024² bytes.
    Mebibyte,
    /// `GiB` or `G`: 1024³ bytes.
    Gibibyte,
    /// `TiB` or `T`: 1024⁴ bytes.
    Tebibyte,
    /// `KB`: 1000 bytes.
    Kilobyte,
    /// `MB`: 1000² bytes.
    Megabyte,
    /// `GB`: 1000³ bytes.
    Gigabyte,
    /// `TB`: 1000⁴ bytes.
    Terabyte,
}

impl Unit {
    /// Every unit, bytes first, then the binary ones, then the decimal ones.
    pub const ALL: [Unit; 9] = [
        Unit::Byte,
        Unit::Kibibyte,
        Unit::Mebibyte,
        Unit::Gibibyte,
        Unit::Tebibyte,
        Unit::Kilobyte,
        Unit::Megabyte,
        Unit::Gigabyte,
        Unit::Terabyte,
    ];

    /// Bytes in one of this unit.
    pub const fn bytes(self) -> u64 {
        match self {
            Unit::Byte => 1,
            Unit::Kibibyte => 1 << 10,
            Unit::Mebibyte => 1 << 20,
            Unit::Gibibyte => 1 << 30,
            Unit::Tebibyte => 1 << 40,
            Unit::Kilobyte => 1_000,
            Unit::Megabyte => 1_000_000,
            Unit::Gigabyte => 1_000_000_000,
            Unit::Terabyte => 1_000_000_000_000,
        }
    }

    /// The unit's symbol as Sluice writes it: "B", "KiB", "KB", ...
    pub const fn symbol(self) -> &'static str {
        match self {
            Unit::Byte => "B",
            Unit::Kibibyte => "KiB",
            Unit::Mebibyte => "MiB",
            Unit::Gibibyte => "GiB",
            Unit::Tebibyte => "TiB",
            Unit::Kilobyte => "KB",
            Unit::Megabyte => "MB",
            Unit::Gigabyte => "GB",
            Unit::Terabyte => "TB",
        }
    }

    /// KB, MB, GB and TB: the units other tools (nvme-cli, fio by default) read as
    /// powers of two, so a size written in one is worth a second look.
    pub const fn is_power_of_ten(self) -> bool {
        matches!(self, Unit::Kilobyte | Unit::Megabyte | Unit::Gigabyte | Unit::Terabyte)
    }

    /// The binary unit of the same rank (KiB for KB): what a tool that reads every
    /// suffix as a power of two takes this unit to mean.
    pub const fn binary_counterpart(self) -> Unit {
        match self {
            Unit::Kilobyte => Unit::Kibibyte,
            Unit::Megabyte => Unit::Mebibyte,
            Unit::Gigabyte => Unit::Gibibyte,
            Unit::Terabyte => Unit::Tebibyte,
            binary => binary,
        }
    }

    /// The unit written as `suffix` (any case; "" is bytes), if it is one.
    pub fn from_suffix(suffix: &str) -> Option<Unit> {
        let unit = match suffix.to_ascii_lowercase().as_str() {
            "" | "b" => Unit::Byte,
            "k" | "kib" => Unit::Kibibyte,
            "m" | "mib" => Unit::Mebibyte,
            "g" | "gib" => Unit::Gibibyte,
            "t" | "tib" => Unit::Tebibyte,
            "kb" => Unit::Kilobyte,
            "mb" => Unit::Megabyte,
            "gb" => Unit::Gigabyte,
            "tb" => Unit::Terabyte,
            _ => return None,
        };
        Some(unit)
    }

    /// The units a number of bytes is written in when it is a whole number of them,
    /// largest first, in the same family (binary or decimal) as `self`.
    fn family_largest_first(self) -> [Unit; 5] {
        if self.is_power_of_ten() {
            [Unit::Terabyte, Unit::Gigabyte, Unit::Megabyte, Unit::Kilobyte, Unit::Byte]
        } else {
            [Unit::Tebibyte, Unit::Gibibyte, Unit::Mebibyte, Unit::Kibibyte, Unit::Byte]
        }
    }
}

/// A size as it was written: the number, its unit and the bytes they make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrittenSize {
    /// The number before the unit (the whole value for hex).
    pub number: u64,
    /// The unit after it (bytes when none was written).
    pub unit: Unit,
    /// `number` times the unit.
    pub bytes: u64,
}

/// Why a text is not a size. Every message quotes the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Nothing that reads as a number where the size starts.
    NotANumber {
        /// The text, trimmed.
        text: String,
    },
    /// "0x" without hex digits after it, or with a unit.
    NotHex {
        /// The text, trimmed.
        text: String,
    },
    /// A unit this crate does not know.
    UnknownUnit {
        /// The text, trimmed.
        text: String,
        /// The part that should have been a unit.
        unit: String,
    },
    /// A fraction ("1.5GiB"): sizes are exact.
    Fraction {
        /// The text, trimmed.
        text: String,
        /// The same size as a whole number of a unit, when it is a whole number of
        /// bytes ("1536MiB" for "1.5GiB").
        whole: Option<String>,
    },
    /// More bytes than 64 bits hold (16 EiB).
    TooLarge {
        /// The text, trimmed.
        text: String,
    },
}

impl fmt::Display for SizeError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::NotANumber { text } => {
                write!(formatter, "size {text:?} must start with a number, e.g. \"4KiB\" or 4096")
            }
            SizeError::NotHex { text } => {
                write!(formatter, "size {text:?} is not a hex number of bytes: 0x and hex digits, without a unit")
            }
            SizeError::UnknownUnit { text, unit } => write!(
                formatter,
                "size {text:?} has unknown unit {unit:?}; use B, KiB, MiB, GiB or TiB (also K, M, G, \
                 T: powers of 1024) or KB, MB, GB or TB (powers of 1000)"
            ),
            SizeError::Fraction { text, whole: Some(whole) } => {
                write!(formatter, "size {text:?} must be a whole number of its unit, without a fraction; write {whole}")
            }
            SizeError::Fraction { text, whole: None } => {
                write!(formatter, "size {text:?} must be a whole number of its unit, without a fraction")
            }
            SizeError::TooLarge { text } => {
                write!(formatter, "size {text:?} is too large: the most is {} bytes (16 EiB)", thousands(u64::MAX))
            }
        }
    }
}

impl std::error::Error for SizeError {}

/// Reads a size written by a person (the rules are in the crate's documentation) as
/// bytes.
pub fn parse_byte_size(text: &str) -> Result<u64, SizeError> {
    parse_written_size(text).map(|size| size.bytes)
}

/// Reads a size and keeps how it was written: the number and the unit as well as the
/// bytes, for a caller that must tell how the unit was meant (see [`MeaningChanged`]).
pub fn parse_written_size(text: &str) -> Result<WrittenSize, SizeError> {
    let text = text.trim();
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        return parse_hex(text, hex);
    }
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, rest) = text.split_at_checked(digits_end).unwrap_or((text, ""));
    if digits.is_empty() {
        return Err(SizeError::NotANumber { text: text.to_string() });
    }
    let too_large = || SizeError::TooLarge { text: text.to_string() };
    // Only overflow is left to fail: `digits` is one or more ASCII digits.
    let number: u64 = digits.parse().map_err(|_| too_large())?;
    let (fraction, rest) = split_fraction(rest);
    let unit = Unit::from_suffix(rest.trim())
        .ok_or_else(|| SizeError::UnknownUnit { text: text.to_string(), unit: rest.trim().to_string() })?;
    if let Some(fraction) = fraction {
        let whole = whole_spelling(number, fraction, unit);
        return Err(SizeError::Fraction { text: text.to_string(), whole });
    }
    let bytes = number.checked_mul(unit.bytes()).ok_or_else(too_large)?;
    Ok(WrittenSize { number, unit, bytes })
}

/// "0x1000": bytes in hex, as nvme-cli takes numbers; no unit may follow.
fn parse_hex(text: &str, hex: &str) -> Result<WrittenSize, SizeError> {
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(SizeError::NotHex { text: text.to_string() });
    }
    let number = u64::from_str_radix(hex, 16).map_err(|_| SizeError::TooLarge { text: text.to_string() })?;
    Ok(WrittenSize { number, unit: Unit::Byte, bytes: number })
}

/// Splits ".5GiB" into the fraction's digits ("5") and the rest ("GiB"); a point
/// without a digit after it is no fraction (it stays, to be an unknown unit).
fn split_fraction(rest: &str) -> (Option<&str>, &str) {
    let Some(after_point) = rest.strip_prefix('.') else {
        return (None, rest);
    };
    let end = after_point.find(|c: char| !c.is_ascii_digit()).unwrap_or(after_point.len());
    match after_point.split_at_checked(end) {
        Some((fraction, unit)) if !fraction.is_empty() => (Some(fraction), unit),
        _ => (None, rest),
    }
}

/// "1536MiB" for 1.5 GiB: the size as a whole number of the largest unit, of the same
/// family and no larger than the one written, that holds it exactly ("2GiB" for
/// "2.0GiB"); None when it is not a whole number of bytes, or too long to work out.
fn whole_spelling(number: u64, fraction: &str, unit: Unit) -> Option<String> {
    let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    let fraction: u128 = fraction.parse().ok()?;
    // The size times 10^digits, in whole numbers: 1.5 GiB is 15 * 2^30 / 10.
    let scaled_number = u128::from(number).checked_mul(scale)?.checked_add(fraction)?;
    let scaled_bytes = scaled_number.checked_mul(u128::from(unit.bytes()))?;
    if !scaled_bytes.is_multiple_of(scale) {
        return None;
    }
    let bytes = u64::try_from(scaled_bytes / scale).ok()?;
    let exact = unit
        .family_largest_first()
        .into_iter()
        .find(|candidate| candidate.bytes() <= unit.bytes() && bytes.is_multiple_of(candidate.bytes()))?;
    Some(format!("{}{}", bytes / exact.bytes(), exact.symbol()))
}

/// A size that a surface used to read differently: the warning that names what it
/// means now and how to keep what it meant before.
///
/// The host's `-z` read every suffix as a power of two, as nvme-cli does, so `-z 1mb`
/// was 1,048,576 bytes; with one set of rules it is 1,000,000, and the user is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeaningChanged {
    /// Where the size was given, e.g. "-z".
    pub given_as: String,
    /// The size as written, trimmed, e.g. "1mb".
    pub text: String,
    /// What the surface read it as before.
    pub before_bytes: u64,
    /// What it reads it as now.
    pub now_bytes: u64,
    /// A spelling that means `before_bytes` now, e.g. "1MiB".
    pub spelling_for_before: String,
    /// The unit as written (a power of ten), for the message.
    unit: Unit,
}

impl MeaningChanged {
    /// For a surface that read KB, MB, GB and TB as powers of two: the change, when
    /// `size` was written in one of them (None for any other unit, for zero, which
    /// means the same either way, and when the old reading overflowed: an error then
    /// cannot have silently changed).
    pub fn decimal_unit_was_binary(given_as: &str, text: &str, size: &WrittenSize) -> Option<Self> {
        if !size.unit.is_power_of_ten() {
            return None;
        }
        let binary = size.unit.binary_counterpart();
        let before_bytes = size.number.checked_mul(binary.bytes())?;
        if before_bytes == size.bytes {
            return None;
        }
        Some(MeaningChanged {
            given_as: given_as.to_string(),
            text: text.trim().to_string(),
            before_bytes,
            now_bytes: size.bytes,
            spelling_for_before: format!("{}{}", size.number, binary.symbol()),
            unit: size.unit,
        })
    }
}

impl fmt::Display for MeaningChanged {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{given} {text} now means {now} bytes ({symbol} is a power of 1000); write {given} \
             {spelling} for {before} bytes as before",
            given = self.given_as,
            text = self.text,
            now = thousands(self.now_bytes),
            symbol = self.unit.symbol(),
            spelling = self.spelling_for_before,
            before = thousands(self.before_bytes),
        )
    }
}

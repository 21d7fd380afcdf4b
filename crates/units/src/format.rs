//! Writing a byte count for people. One ladder of units; the presentations below are
//! the ones Sluice's outputs and messages are pinned to (their golden text must not
//! change), so each keeps its exact form:
//!
//! - [`exact`]: "64 MiB", or "1000 bytes" when no binary unit holds it whole (config
//!   messages, `sluice ns resize`: a value the reader may copy back into a config);
//! - [`approximate`]: "64 MiB", "1.5 GiB", "512 B" (the management CLI's tables);
//! - [`scale`]: a value and its prefix, for nvme-cli's own columns ("1.07 GB",
//!   "512 B"), which the host verbs copy character for character;
//! - [`thousands`]: "1,048,576", for warnings that name an exact count.

/// Binary units from the largest down: the ladder [`exact`] and [`approximate`] climb.
const BINARY_UNITS: [(u64, &str); 4] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];

/// Writes a byte count the way a config would give it: "64 MiB" when it is a whole
/// number of a binary unit, else "N bytes".
pub fn exact(bytes: u64) -> String {
    for (unit_bytes, unit) in BINARY_UNITS {
        if bytes >= unit_bytes && bytes.is_multiple_of(unit_bytes) {
            return format!("{} {unit}", bytes / unit_bytes);
        }
    }
    format!("{bytes} bytes")
}

/// "64 MiB", "1.5 GiB" (one decimal when it is not whole), "512 B".
pub fn approximate(bytes: u64) -> String {
    for (unit_bytes, unit) in BINARY_UNITS {
        if bytes >= unit_bytes {
            let whole = bytes / unit_bytes;
            return if whole * unit_bytes == bytes {
                format!("{whole} {unit}")
            } else {
                format!("{:.1} {unit}", bytes as f64 / unit_bytes as f64)
            };
        }
    }
    format!("{bytes} B")
}

/// Which powers a prefix of [`scale`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// 1024: "Ki", "Mi", "Gi", "Ti".
    Binary,
    /// 1000: "k", "M", "G", "T", "P" (nvme-cli's lower-case kilo).
    Decimal,
}

impl Base {
    /// The step between prefixes and the prefixes, smallest first; the last one takes
    /// everything above it (nvme-cli's columns stop at TiB and PB).
    const fn ladder(self) -> (f64, &'static [&'static str]) {
        match self {
            Base::Binary => (1024.0, &["", "Ki", "Mi", "Gi", "Ti"]),
            Base::Decimal => (1000.0, &["", "k", "M", "G", "T", "P"]),
        }
    }
}

/// The value in the largest prefix of `base` it reaches (below one step of the next):
/// (1.5, "Gi") for 1.5 * 2^30 bytes. The caller writes the unit after the prefix.
pub fn scale(value: f64, base: Base) -> (f64, &'static str) {
    let (step, prefixes) = base.ladder();
    let mut value = value;
    let mut chosen = "";
    for (index, prefix) in prefixes.iter().enumerate() {
        chosen = prefix;
        if value < step || index + 1 == prefixes.len() {
            break;
        }
        value /= step;
    }
    (value, chosen)
}

/// "1,048,576": the digits in groups of three, for a count a reader must compare.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_writes_whole_binary_units_or_bytes() {
        assert_eq!(exact(64 << 20), "64 MiB");
        assert_eq!(exact(3 << 29), "1536 MiB");
        assert_eq!(exact(1 << 40), "1 TiB");
        assert_eq!(exact(1000), "1000 bytes");
        assert_eq!(exact(0), "0 bytes");
    }

    #[test]
    fn approximate_keeps_one_decimal() {
        assert_eq!(approximate(64 << 20), "64 MiB");
        assert_eq!(approximate(3 << 29), "1.5 GiB");
        assert_eq!(approximate(100), "100 B");
        assert_eq!(approximate((1 << 30) + 1), "1.0 GiB");
        assert_eq!(approximate(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn scale_stops_at_the_top_of_the_ladder() {
        assert_eq!(scale(512.0, Base::Binary), (512.0, ""));
        assert_eq!(scale(1536.0, Base::Binary), (1.5, "Ki"));
        assert_eq!(scale((1u64 << 50) as f64, Base::Binary), (1024.0, "Ti"));
        let (value, prefix) = scale(1_140_000_000.0, Base::Decimal);
        assert_eq!((format!("{value:.2}"), prefix), ("1.14".to_string(), "G"));
        assert_eq!(scale(999.0, Base::Decimal), (999.0, ""));
        assert_eq!(scale(2e18, Base::Decimal), (2000.0, "P"));
    }

    #[test]
    fn thousands_groups_by_three() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_048_576), "1,048,576");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }
}

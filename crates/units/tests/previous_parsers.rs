//! The three size parsers Sluice had before this crate, their logic kept as it was
//! (the messages cut short) as the record of what every surface accepted, and the
//! promise checked against them: a spelling one of them accepted means the same number
//! of bytes now, or the surface warns with both values (the host's `-z` for KB, MB and
//! GB), or it is refused out loud. No accepted spelling changes meaning in silence.

use proptest::prelude::*;
use units::{parse_byte_size, parse_written_size, MeaningChanged, Unit};

/// The parsers as they were (issue 45 replaced them).
mod before {
    /// `crates/sluice-config/src/lib.rs` `parse_byte_size`: the config file and the
    /// management API.
    pub fn config(text: &str) -> Result<u64, String> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let number: u64 = digits.parse().map_err(|_| format!("size {text:?} must start with a number"))?;
        let multiplier: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" | "K" => 1 << 10,
            "MiB" | "M" => 1 << 20,
            "GiB" | "G" => 1 << 30,
            "TiB" | "T" => 1 << 40,
            "KB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            other => return Err(format!("size {text:?} has unknown unit {other:?}")),
        };
        number.checked_mul(multiplier).ok_or_else(|| format!("size {text:?} is too large"))
    }

    /// `crates/workload/src/job.rs` `parse_size`: job files and `sluice bench`'s
    /// `--block-size`, `--size`, `--namespace-size`.
    pub fn workload(text: &str) -> Result<u64, String> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let number: u64 = digits.parse().map_err(|_| format!("size {text:?} must start with a number"))?;
        let multiplier: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" | "K" | "k" => 1 << 10,
            "MiB" | "M" => 1 << 20,
            "GiB" | "G" => 1 << 30,
            "TiB" | "T" => 1 << 40,
            "KB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            other => return Err(format!("size {text:?} has unknown unit {other:?}")),
        };
        number.checked_mul(multiplier).ok_or_else(|| format!("size {text:?} is too large"))
    }

    fn parse_number(text: &str) -> Result<u64, String> {
        let text = text.trim();
        match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => text.parse::<u64>(),
        }
        .map_err(|_| format!("{text:?} is not a number (decimal, or hex with 0x)"))
    }

    /// `crates/sluice-host-cli/src/args.rs` `parse_size`: the host verbs' `-z`.
    pub fn host(text: &str) -> Result<u64, String> {
        let text = text.trim();
        let (number, suffix) = if text.starts_with("0x") || text.starts_with("0X") {
            (text, "")
        } else {
            text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()))
        };
        let shift = match suffix.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kib" | "kb" => 10,
            "m" | "mib" | "mb" => 20,
            "g" | "gib" | "gb" => 30,
            other => return Err(format!("unknown size suffix {other:?}")),
        };
        let value = parse_number(number)?;
        value.checked_mul(1 << shift).ok_or_else(|| format!("{text} is too large"))
    }
}

/// Every spelling of every unit any parser knew or knows, in the cases people type.
const SUFFIXES: &[&str] = &[
    "", "b", "B", "k", "K", "kb", "kB", "Kb", "KB", "kib", "KiB", "KIB", "Kib", "m", "M", "mb", "mB", "Mb", "MB",
    "mib", "MiB", "MIB", "g", "G", "gb", "GB", "Gb", "gib", "GiB", "GIB", "t", "T", "tb", "TB", "Tb", "tib", "TiB",
    "TIB", "x", "kiB", "KiBB", "i", "KBi", "parsec", ".", "PB", "PiB", "bytes", "k b",
];

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..5000).prop_map(|number| number.to_string()),
        any::<u64>().prop_map(|number| number.to_string()),
        "[0-9]{1,25}",
        any::<u64>().prop_map(|number| format!("{number:#x}")),
        any::<u64>().prop_map(|number| format!("0X{number:X}")),
        "0x[0-9a-fA-F+]{0,18}",
        "[0-9]{1,4}\\.[0-9]{1,3}",
        "[-+ .]?[0-9]{0,3}",
    ]
}

fn size_text() -> impl Strategy<Value = String> {
    (
        number_text(),
        prop::sample::select(SUFFIXES),
        prop::sample::select(&["", " ", "\t", "  "][..]),
        prop::sample::select(&["", " ", "\n"][..]),
    )
        .prop_map(|(number, suffix, between, around)| format!("{around}{number}{between}{suffix}{around}"))
}

/// What the host's `-z` says about a size that meant something else before: KB, MB
/// and GB only (the old `-z` refused TB), as `crates/sluice-host-cli/src/args.rs` asks.
fn host_warning(text: &str) -> Option<MeaningChanged> {
    let size = parse_written_size(text).ok()?;
    let knew_unit = matches!(size.unit, Unit::Kilobyte | Unit::Megabyte | Unit::Gigabyte);
    knew_unit.then(|| MeaningChanged::decimal_unit_was_binary("-z", text, &size)).flatten()
}

/// The one refusal of something an old parser accepted: the old `-z` handed "0x+10"
/// to a hex reader that allowed a sign; a size with a plus sign in it is no size.
fn refused_on_purpose(text: &str) -> bool {
    text.trim().get(2..).is_some_and(|hex| hex.starts_with('+'))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn the_config_and_the_api_keep_every_meaning(text in size_text()) {
        if let Ok(bytes) = before::config(&text) {
            prop_assert_eq!(parse_byte_size(&text), Ok(bytes), "{:?}", text);
        }
    }

    #[test]
    fn the_bench_and_job_files_keep_every_meaning(text in size_text()) {
        if let Ok(bytes) = before::workload(&text) {
            prop_assert_eq!(parse_byte_size(&text), Ok(bytes), "{:?}", text);
        }
    }

    #[test]
    fn the_host_keeps_every_meaning_or_warns(text in size_text()) {
        let now = parse_byte_size(&text);
        let warning = host_warning(&text);
        match before::host(&text) {
            Ok(bytes) if now == Ok(bytes) => prop_assert!(warning.is_none(), "{:?}: {:?}", text, warning),
            Ok(bytes) => match (&now, &warning) {
                (Ok(now_bytes), Some(warning)) => {
                    prop_assert_eq!(warning.before_bytes, bytes);
                    prop_assert_eq!(warning.now_bytes, *now_bytes);
                    // The spelling it offers means what the text meant before.
                    prop_assert_eq!(parse_byte_size(&warning.spelling_for_before), Ok(bytes));
                }
                (Err(_), _) => prop_assert!(refused_on_purpose(&text), "{:?} is now refused", text),
                (Ok(_), None) => prop_assert!(false, "{:?} changed meaning without a warning", text),
            },
            // A refusal that now reads as a size had no meaning to change.
            Err(_) => {}
        }
    }
}

#[test]
fn the_host_warns_about_each_decimal_unit_it_read_as_binary() {
    for (text, before, now, spelling) in
        [("1mb", 1 << 20, 1_000_000, "1MiB"), ("4KB", 4 << 10, 4_000, "4KiB"), ("2 Gb", 2 << 30, 2_000_000_000, "2GiB")]
    {
        let warning = host_warning(text).expect("a warning");
        assert_eq!((warning.before_bytes, warning.now_bytes), (before, now), "{text}");
        assert_eq!(warning.spelling_for_before, spelling);
        assert_eq!(before::host(text), Ok(before));
    }
    assert_eq!(
        host_warning("1mb").expect("a warning").to_string(),
        "-z 1mb now means 1,000,000 bytes (MB is a power of 1000); write -z 1MiB for 1,048,576 bytes as before"
    );
    for text in ["1MiB", "1M", "1m", "4096", "0x1000", "1tb", "1TB", "0MB"] {
        assert_eq!(host_warning(text), None, "{text}");
    }
}

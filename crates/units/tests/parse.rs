//! The parser against a plain oracle: a table of every unit's spellings and what it is
//! worth, the number times that (or too large), whatever the case and spacing.

use proptest::prelude::*;
use units::{parse_byte_size, parse_written_size, SizeError, Unit, WrittenSize};

/// Every accepted unit spelling in lower case, and its bytes: the rules of lib.rs
/// written out once more by hand.
const ORACLE: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1024),
    ("kib", 1024),
    ("m", 1024 * 1024),
    ("mib", 1024 * 1024),
    ("g", 1024 * 1024 * 1024),
    ("gib", 1024 * 1024 * 1024),
    ("t", 1024 * 1024 * 1024 * 1024),
    ("tib", 1024 * 1024 * 1024 * 1024),
    ("kb", 1000),
    ("mb", 1000 * 1000),
    ("gb", 1000 * 1000 * 1000),
    ("tb", 1000 * 1000 * 1000 * 1000),
];

/// The spelling with each letter's case picked by the bits of `cases`.
fn with_cases(spelling: &str, cases: u8) -> String {
    spelling
        .chars()
        .enumerate()
        .map(|(index, c)| if cases >> index & 1 == 1 { c.to_ascii_uppercase() } else { c })
        .collect()
}

fn spacing() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["", " ", "  ", "\t", " \t "][..])
}

fn small_or_any() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..100_000, any::<u64>(), (0u32..64).prop_map(|shift| 1u64 << shift)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn every_unit_in_every_case_and_spacing(
        number in small_or_any(),
        entry in prop::sample::select(ORACLE),
        cases in any::<u8>(),
        before in spacing(),
        between in spacing(),
        after in spacing(),
    ) {
        let (spelling, unit_bytes) = entry;
        let text = format!("{before}{number}{between}{}{after}", with_cases(spelling, cases));
        match number.checked_mul(unit_bytes) {
            Some(bytes) => {
                let written = parse_written_size(&text).unwrap();
                prop_assert_eq!(written.bytes, bytes, "{:?}", text);
                prop_assert_eq!(written.number, number);
                prop_assert_eq!(written.unit.bytes(), unit_bytes);
            }
            None => prop_assert_eq!(
                parse_byte_size(&text),
                Err(SizeError::TooLarge { text: text.trim().to_string() })
            ),
        }
    }

    #[test]
    fn hex_is_bytes_in_either_case(number in any::<u64>(), upper in any::<bool>(), before in spacing()) {
        let text = if upper { format!("{before}0X{number:X}") } else { format!("{before}0x{number:x}") };
        prop_assert_eq!(
            parse_written_size(&text),
            Ok(WrittenSize { number, unit: Unit::Byte, bytes: number })
        );
    }

    #[test]
    fn fractions_are_refused_with_a_whole_spelling_when_there_is_one(
        whole in 0u64..10_000,
        fraction in "[0-9]{1,4}",
        entry in prop::sample::select(ORACLE),
    ) {
        let text = format!("{whole}.{fraction}{}", entry.0);
        let Err(SizeError::Fraction { whole: spelling, .. }) = parse_byte_size(&text) else {
            return Err(TestCaseError::fail(format!("{text:?} is not refused as a fraction")));
        };
        // Exact arithmetic: the size in bytes times 10^digits.
        let scale = 10u128.pow(fraction.len() as u32);
        let scaled = (u128::from(whole) * scale + fraction.parse::<u128>().unwrap()) * u128::from(entry.1);
        match spelling {
            Some(spelling) => prop_assert_eq!(
                u128::from(parse_byte_size(&spelling).unwrap()) * scale,
                scaled,
                "{:?} -> {:?}", text, spelling
            ),
            None => prop_assert!(!scaled.is_multiple_of(scale), "{:?} has a whole spelling", text),
        }
    }

    #[test]
    fn any_text_is_a_size_or_an_error_that_quotes_it(text in "\\PC{0,12}") {
        match parse_byte_size(&text) {
            Ok(_) => prop_assert!(text.trim().starts_with(|c: char| c.is_ascii_digit())),
            Err(error) => prop_assert!(
                error.to_string().contains(&format!("{:?}", text.trim())),
                "{} does not quote {:?}", error, text
            ),
        }
    }
}

#[test]
fn zero_is_a_size_in_every_unit() {
    for (spelling, _) in ORACLE {
        assert_eq!(parse_byte_size(&format!("0{spelling}")), Ok(0), "{spelling}");
    }
    assert_eq!(parse_byte_size("0x0"), Ok(0));
}

#[test]
fn the_limits_are_exact() {
    assert_eq!(parse_byte_size("18446744073709551615"), Ok(u64::MAX));
    assert_eq!(parse_byte_size("0xffffffffffffffff"), Ok(u64::MAX));
    assert_eq!(parse_byte_size("16777215TiB"), Ok(16_777_215 << 40));
    assert_eq!(parse_byte_size("18446744TB"), Ok(18_446_744_000_000_000_000));
    for text in ["18446744073709551616", "0x10000000000000000", "16777216TiB", "18446745TB", "99999999999999999999999k"]
    {
        let error = parse_byte_size(text).unwrap_err();
        assert_eq!(error, SizeError::TooLarge { text: text.to_string() });
        assert_eq!(
            error.to_string(),
            format!("size {text:?} is too large: the most is 18,446,744,073,709,551,615 bytes (16 EiB)")
        );
    }
}

#[test]
fn errors_say_what_is_wrong() {
    let message = |text: &str| parse_byte_size(text).unwrap_err().to_string();
    assert_eq!(message(""), "size \"\" must start with a number, e.g. \"4KiB\" or 4096");
    assert_eq!(message(" GiB "), "size \"GiB\" must start with a number, e.g. \"4KiB\" or 4096");
    assert!(message("-1").contains("must start with a number"));
    assert!(message("+1").contains("must start with a number"));
    assert_eq!(
        message("1 parsec"),
        "size \"1 parsec\" has unknown unit \"parsec\"; use B, KiB, MiB, GiB or TiB (also K, M, G, T: \
         powers of 1024) or KB, MB, GB or TB (powers of 1000)"
    );
    assert!(message("1PiB").contains("unknown unit \"PiB\""));
    assert!(message("1 K iB").contains("unknown unit \"K iB\""));
    assert!(message("1.").contains("unknown unit \".\""));
    assert_eq!(message("0x10k"), "size \"0x10k\" is not a hex number of bytes: 0x and hex digits, without a unit");
    assert!(message("0x").contains("not a hex number"));
    assert!(message("0x+10").contains("not a hex number"));
    assert_eq!(
        message("1.5GiB"),
        "size \"1.5GiB\" must be a whole number of its unit, without a fraction; write 1536MiB"
    );
    assert!(message("2.5 tb").ends_with("write 2500GB"));
    assert!(message("1.5k").ends_with("write 1536B"));
    assert!(message("2.0 GiB").ends_with("write 2GiB"));
    assert!(message("0.0").ends_with("write 0B"));
    assert_eq!(message("1.5"), "size \"1.5\" must be a whole number of its unit, without a fraction");
    assert!(message("1.0001KiB").ends_with("without a fraction"));
}

#[test]
fn the_unit_table_agrees_with_itself() {
    for unit in Unit::ALL {
        assert_eq!(Unit::from_suffix(unit.symbol()), Some(unit), "{unit:?}");
        assert_eq!(Unit::from_suffix(&unit.symbol().to_lowercase()), Some(unit));
        let binary = unit.binary_counterpart();
        assert!(!binary.is_power_of_ten());
        assert_eq!(unit.is_power_of_ten(), unit != binary);
    }
    for (spelling, bytes) in ORACLE {
        assert_eq!(Unit::from_suffix(spelling).map(Unit::bytes), Some(*bytes), "{spelling}");
    }
}

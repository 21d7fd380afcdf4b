//! Byte sizes as people write them and read them, the same on every surface of Sluice:
//! the config file, the management API, the `sluice` command line (host verbs, `ns`
//! verbs, `bench`) and the bench's job files.
//!
//! # The rules
//!
//! A size is a whole number with an optional unit; the unit's case does not matter
//! and spaces may stand between the number and the unit:
//!
//! | Written                          | Means                                  |
//! | -------------------------------- | -------------------------------------- |
//! | `4096`, `4096B`                  | bytes                                  |
//! | `0x1000`                         | bytes, in hex (no unit after hex)      |
//! | `KiB`, `MiB`, `GiB`, `TiB`       | powers of 1024 (IEC)                   |
//! | `K`, `M`, `G`, `T`               | powers of 1024, like `KiB` etc.        |
//! | `KB`, `MB`, `GB`, `TB`           | powers of 1000 (SI)                    |
//!
//! The single letters stay binary because storage engineers mean 4096 by `4k`: so do
//! fio (`bs=4k` under its default `kb_base=1024`), dd (`bs=4K`), nvme-cli (`-z 4k`)
//! and every Sluice surface before these rules. The two-letter SI units are powers of
//! ten as the standard has them (dd agrees; fio's default and nvme-cli read them as
//! powers of two, which is why the host's `-z` warns about them: see
//! [`MeaningChanged`]). `b` and `B` both mean bytes, never bits. Fractions are
//! refused (write `1536MiB`, not `1.5GiB`): a size is exact or it is an error.
//!
//! Formatting is in [`format`]: one ladder of binary units, with the few
//! presentations the command-line outputs and messages are pinned to.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// User input must never panic the parser: a bad size is an error naming the text.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::unreachable)
)]

pub mod format;
mod parse;

pub use parse::{parse_byte_size, parse_written_size, MeaningChanged, SizeError, Unit, WrittenSize};

//! Random operations checked against a byte-for-byte model of the device.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

use super::checks::Device;
use super::io::pattern;
use crate::{Backend, Geometry, IoError, IoOp};

/// The model covers the whole device up to this size, and otherwise its first this many
/// bytes (plus one maximal op), so a huge device does not need a huge model.
const MODEL_LIMIT_BYTES: u64 = 8 << 20;
/// Largest read/write the generator makes.
const MAX_OP_BYTES: u64 = 256 << 10;
/// Cases per run unless PROPTEST_CASES says otherwise.
const DEFAULT_CASES: u32 = 48;

/// One generated operation. Write data comes from a seed rather than being generated
/// byte by byte, which keeps cases small and shrinking fast.
#[derive(Clone, Debug)]
enum ModelOp {
    Read { lba: u64, blocks: u32 },
    Write { lba: u64, blocks: u32, force_unit_access: bool, seed: u64 },
    Flush,
    WriteZeroes { lba: u64, blocks: u64, deallocate: bool, force_unit_access: bool },
    Deallocate { lba: u64, blocks: u64 },
}

/// Where generated ops may land.
#[derive(Clone, Copy, Debug)]
struct Window {
    /// Blocks mirrored by the model.
    model_blocks: u64,
    /// Ops start below this lba; when the model covers the whole device it is the block
    /// count, so ops straddle the end and must fail.
    lba_limit: u64,
    max_op_blocks: u64,
    block_count: u64,
}

impl Window {
    fn new(geometry: Geometry) -> Self {
        let block_size = u64::from(geometry.block_size_bytes);
        let max_op_blocks = (MAX_OP_BYTES / block_size).clamp(1, geometry.block_count);
        let limit_blocks = MODEL_LIMIT_BYTES / block_size;
        if geometry.block_count <= limit_blocks + max_op_blocks {
            let block_count = geometry.block_count;
            Self { model_blocks: block_count, lba_limit: block_count, max_op_blocks, block_count }
        } else {
            // Every in-range op starting below limit_blocks ends inside the model.
            let model_blocks = limit_blocks + max_op_blocks;
            Self { model_blocks, lba_limit: limit_blocks, max_op_blocks, block_count: geometry.block_count }
        }
    }

    /// Mostly lbas inside the window; sometimes hostile ones at or past the end.
    fn lba(&self) -> impl Strategy<Value = u64> {
        let count = self.block_count;
        prop_oneof![
            30 => 0..self.lba_limit,
            1 => Just(count),
            1 => Just(u64::MAX),
            1 => (count - self.max_op_blocks.min(count))..count,
        ]
    }

    fn strategy(self) -> impl Strategy<Value = Vec<ModelOp>> {
        let blocks = 1..=self.max_op_blocks;
        let small_blocks = blocks.clone().prop_map(|blocks| blocks as u32);
        // Zeroing ops may be longer than reads and writes, and sometimes overflow.
        let zero_blocks = prop_oneof![8 => 1..=self.max_op_blocks * 4, 1 => Just(u64::MAX)];
        let op = prop_oneof![
            4 => (self.lba(), small_blocks.clone()).prop_map(|(lba, blocks)| ModelOp::Read { lba, blocks }),
            5 => (self.lba(), small_blocks, any::<bool>(), any::<u64>()).prop_map(
                |(lba, blocks, force_unit_access, seed)| ModelOp::Write { lba, blocks, force_unit_access, seed }
            ),
            1 => Just(ModelOp::Flush),
            2 => (self.lba(), zero_blocks.clone(), any::<bool>(), any::<bool>()).prop_map(
                |(lba, blocks, deallocate, force_unit_access)| {
                    ModelOp::WriteZeroes { lba, blocks, deallocate, force_unit_access }
                }
            ),
            2 => (self.lba(), zero_blocks).prop_map(|(lba, blocks)| ModelOp::Deallocate { lba, blocks }),
        ];
        proptest::collection::vec(op, 1..48)
    }
}

/// Random sequences of every op on one queue, each read compared with a `Vec<u8>` model
/// of the device (seeded by reading the device first), ops past the end expected to
/// fail with OutOfRange and change nothing. Shrinks to a minimal failing sequence.
pub fn random_ops_match_model(make_backend: &dyn Fn() -> Arc<dyn Backend>) {
    let probe = make_backend();
    let (kind, window) = (probe.kind(), Window::new(probe.geometry()));
    drop(probe);

    let cases = if std::env::var_os("PROPTEST_CASES").is_some() { Config::default().cases } else { DEFAULT_CASES };
    // No failure persistence: the suite runs from other crates' test directories.
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&window.strategy(), |ops| run_case(make_backend, window, &ops));
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => {
            panic!("{kind}: random ops diverged from the model: {reason}\nminimal failing ops: {ops:#?}")
        }
        Err(TestError::Abort(reason)) => panic!("{kind}: random-ops check aborted: {reason}"),
    }
}

fn run_case(make_backend: &dyn Fn() -> Arc<dyn Backend>, window: Window, ops: &[ModelOp]) -> Result<(), TestCaseError> {
    let mut device = Device::new(make_backend);
    let block_size = device.block_size;
    let mut model = read_blocks(&mut device, 0, window.model_blocks);
    // Per byte: false once deallocated on a backend that does not promise zeroes there,
    // until the next write or Write Zeroes defines it again.
    let mut defined = vec![true; model.len()];

    for op in ops {
        let io_op = match *op {
            ModelOp::Read { lba, blocks } => IoOp::Read { lba, blocks },
            ModelOp::Write { lba, blocks, force_unit_access, .. } => IoOp::Write { lba, blocks, force_unit_access },
            ModelOp::Flush => IoOp::Flush,
            ModelOp::WriteZeroes { lba, blocks, deallocate, force_unit_access } => {
                IoOp::WriteZeroes { lba, blocks, deallocate, force_unit_access }
            }
            ModelOp::Deallocate { lba, blocks } => IoOp::Deallocate { lba, blocks },
        };
        let range = io_op.range();
        let in_range = range.map_or(true, |(lba, blocks)| device.geometry.contains(lba, blocks));
        let buffer = match *op {
            ModelOp::Read { blocks, .. } => vec![0xA5; blocks as usize * block_size],
            ModelOp::Write { blocks, seed, .. } => pattern(seed, blocks as usize * block_size),
            _ => Vec::new(),
        };
        let written = buffer.clone();
        let completion = device.run(io_op, buffer);
        let expected = if in_range { Ok(()) } else { Err(IoError::OutOfRange) };
        prop_assert_eq!(completion.result, expected, "result of {:?}", op);
        if !in_range || !device.retains_data {
            continue;
        }
        let Some((lba, blocks)) = range else { continue };
        let bytes = lba as usize * block_size..(lba + blocks) as usize * block_size;
        // On a device larger than the model, in-range reads and writes near the end fall
        // outside it: their results were checked above, their data cannot be.
        let inside_model = bytes.end <= model.len();
        match *op {
            ModelOp::Read { .. } if inside_model => {
                let defined = &defined[bytes.clone()];
                if let Some(offset) = first_defined_difference(&completion.buffer, &model[bytes], defined) {
                    return Err(TestCaseError::fail(format!("{op:?} differs from the model at byte {offset}")));
                }
            }
            ModelOp::Write { .. } if inside_model => {
                model[bytes.clone()].copy_from_slice(&written);
                defined[bytes].fill(true);
            }
            ModelOp::Read { .. } | ModelOp::Write { .. } => {}
            ModelOp::WriteZeroes { .. } | ModelOp::Deallocate { .. } => {
                // Zeroing ops may run past the model window on a large device.
                let end = bytes.end.min(model.len());
                if bytes.start < end {
                    model[bytes.start..end].fill(0);
                    let zeroes = matches!(op, ModelOp::WriteZeroes { .. }) || device.deallocate_reads_zeroes;
                    defined[bytes.start..end].fill(zeroes);
                }
            }
            ModelOp::Flush => {}
        }
    }

    if device.retains_data {
        let contents = read_blocks(&mut device, 0, window.model_blocks);
        if let Some(offset) = first_defined_difference(&contents, &model, &defined) {
            return Err(TestCaseError::fail(format!("final contents differ from the model at byte {offset}")));
        }
    }
    Ok(())
}

/// Reads `[lba, lba + blocks)` in op-sized pieces.
fn read_blocks(device: &mut Device, lba: u64, blocks: u64) -> Vec<u8> {
    let mut contents = Vec::with_capacity(blocks as usize * device.block_size);
    let mut done = 0;
    while done < blocks {
        let piece = (blocks - done).min(1024) as u32;
        contents.extend_from_slice(&device.read(lba + done, piece));
        done += u64::from(piece);
    }
    contents
}

/// The first byte where `actual` differs from `expected` among the bytes `defined` says
/// the model knows.
fn first_defined_difference(actual: &[u8], expected: &[u8], defined: &[bool]) -> Option<usize> {
    actual.iter().zip(expected).zip(defined).position(|((a, e), &known)| known && a != e)
}

//! RAID0: construction errors, the conformance suite over RAM and delayed members, and a
//! layout oracle that checks which member holds which bytes.

mod support;

use std::sync::Arc;

use storage::conformance::{self, pattern, submit_and_wait};
use storage::{Backend, CompositionError, Geometry, IoOp, IoRequest, Raid0Backend, RamBackend};
use support::DelayedBackend;

fn ram(block_size_bytes: u32, block_count: u64) -> Arc<dyn Backend> {
    RamBackend::new(Geometry { block_size_bytes, block_count })
}

fn raid(members: usize, strip: u32, member_blocks: u64, delay: Option<u32>) -> Arc<dyn Backend> {
    let members = (0..members)
        .map(|index| {
            // Uneven member sizes: capacity follows the smallest, rounded to strips.
            let member = ram(512, member_blocks + index as u64 * 3);
            match delay {
                Some(reaps) => DelayedBackend::new(member, reaps) as Arc<dyn Backend>,
                None => member,
            }
        })
        .collect();
    Raid0Backend::new(members, strip).unwrap()
}

fn two_4k() -> Arc<dyn Backend> {
    raid(2, 4096, 4096, None)
}
fn three_64k() -> Arc<dyn Backend> {
    raid(3, 65536, 4096, None)
}
fn four_4k() -> Arc<dyn Backend> {
    raid(4, 4096, 2048, None)
}
fn four_64k() -> Arc<dyn Backend> {
    raid(4, 65536, 2048, None)
}
fn two_4k_delayed() -> Arc<dyn Backend> {
    raid(2, 4096, 4096, Some(2))
}
fn three_64k_delayed() -> Arc<dyn Backend> {
    raid(3, 65536, 4096, Some(3))
}
fn four_4k_4k_blocks_delayed() -> Arc<dyn Backend> {
    let members = (0..4).map(|_| DelayedBackend::new(ram(4096, 300), 1) as Arc<dyn Backend>).collect();
    Raid0Backend::new(members, 4096).unwrap()
}

macro_rules! conformance_tests {
    ($module:ident, $factory:path) => {
        mod $module {
            use super::*;
            #[test]
            fn run_all() {
                conformance::run_all(&$factory);
            }
        }
    };
}

conformance_tests!(two_members_4k, two_4k);
conformance_tests!(three_members_64k, three_64k);
conformance_tests!(four_members_4k, four_4k);
conformance_tests!(four_members_64k, four_64k);
conformance_tests!(two_members_4k_delayed, two_4k_delayed);
conformance_tests!(three_members_64k_delayed, three_64k_delayed);
conformance_tests!(four_members_4k_blocks_delayed, four_4k_4k_blocks_delayed);

#[test]
fn capacity_is_members_times_smallest_in_whole_strips() {
    let members = vec![ram(512, 100), ram(512, 70), ram(512, 90)];
    let raid = Raid0Backend::new(members, 4096).unwrap();
    // 70 blocks = 8 whole 8-block strips = 64 blocks per member.
    assert_eq!(raid.geometry().block_count, 3 * 64);
    assert_eq!(raid.kind(), "raid0");
}

#[test]
fn rejects_bad_compositions() {
    assert_eq!(Raid0Backend::new(Vec::new(), 4096).unwrap_err(), CompositionError::NoMembers);
    let error = Raid0Backend::new(vec![ram(512, 64), ram(512, 64), ram(4096, 64)], 4096).unwrap_err();
    assert_eq!(
        error,
        CompositionError::BlockSizeMismatch {
            member: 2,
            member_block_size_bytes: 4096,
            expected_block_size_bytes: 512
        }
    );
    assert!(error.to_string().contains("member 2"), "{error}");
    for strip in [0, 256, 3 * 4096, 4096 + 512] {
        assert!(matches!(
            Raid0Backend::new(vec![ram(512, 64)], strip).unwrap_err(),
            CompositionError::InvalidStripSize { .. }
        ));
    }
    assert!(matches!(
        Raid0Backend::new(vec![ram(512, 64), ram(512, 7)], 4096).unwrap_err(),
        CompositionError::MemberTooSmall { member: 1, .. }
    ));
}

#[test]
fn volatile_write_cache_follows_members() {
    let raid = Raid0Backend::new(vec![ram(512, 64), ram(512, 64)], 4096).unwrap();
    assert!(!raid.has_volatile_write_cache());
}

fn read_member(member: &Arc<dyn Backend>, lba: u64, blocks: u32) -> Vec<u8> {
    let mut queue = member.open_queue();
    let len = blocks as usize * member.geometry().block_size_bytes as usize;
    let completion =
        submit_and_wait(&mut *queue, IoRequest { token: 1, op: IoOp::Read { lba, blocks }, buffer: vec![0; len] });
    assert_eq!(completion.result, Ok(()));
    completion.buffer
}

/// Writes the whole RAID through odd-sized, strip-straddling I/Os, then checks every block
/// against an independent model of the layout by reading the members directly.
#[test]
fn layout_oracle_places_every_block_on_the_right_member() {
    for (member_count, strip_bytes, delay) in [(2, 4096u32, None), (3, 8192, Some(2)), (4, 4096, Some(1))] {
        let rams: Vec<Arc<dyn Backend>> = (0..member_count).map(|_| ram(512, 256)).collect();
        let members = rams
            .iter()
            .map(|member| match delay {
                Some(reaps) => DelayedBackend::new(Arc::clone(member), reaps) as Arc<dyn Backend>,
                None => Arc::clone(member),
            })
            .collect();
        let raid = Raid0Backend::new(members, strip_bytes).unwrap();
        let total = raid.geometry().block_count;
        let image = pattern(7 + member_count as u64, total as usize * 512);
        let mut queue = raid.open_queue();
        let mut lba = 0u64;
        let mut step = 1u64;
        while lba < total {
            let blocks = step.min(total - lba);
            let start = lba as usize * 512;
            let data = image[start..start + blocks as usize * 512].to_vec();
            let op = IoOp::Write { lba, blocks: blocks as u32, force_unit_access: false };
            let completion = submit_and_wait(&mut *queue, IoRequest { token: lba, op, buffer: data });
            assert_eq!(completion.result, Ok(()));
            lba += blocks;
            step = step % 37 + 5;
        }
        let strip_blocks = u64::from(strip_bytes) / 512;
        for parent_lba in 0..total {
            let strip = parent_lba / strip_blocks;
            let member = (strip % member_count as u64) as usize;
            let member_lba = strip / member_count as u64 * strip_blocks + parent_lba % strip_blocks;
            assert_eq!(raid.locate(parent_lba), Some((member, member_lba)));
            let start = parent_lba as usize * 512;
            assert_eq!(
                read_member(&rams[member], member_lba, 1),
                image[start..start + 512],
                "parent block {parent_lba} should be member {member} block {member_lba}"
            );
        }
        assert_eq!(raid.locate(total), None);
        // One read across the whole device reassembles the image.
        let completion = submit_and_wait(
            &mut *queue,
            IoRequest { token: 9, op: IoOp::Read { lba: 0, blocks: total as u32 }, buffer: vec![0; image.len()] },
        );
        assert_eq!(completion.result, Ok(()));
        assert!(completion.buffer == image);
        // Write Zeroes over a strip-straddling range reaches exactly those blocks.
        let zero = IoOp::WriteZeroes { lba: 3, blocks: strip_blocks * 3, deallocate: false, force_unit_access: true };
        assert_eq!(submit_and_wait(&mut *queue, IoRequest { token: 10, op: zero, buffer: Vec::new() }).result, Ok(()));
        for parent_lba in 0..total {
            let (member, member_lba) = raid.locate(parent_lba).unwrap();
            let start = parent_lba as usize * 512;
            let expected = if (3..3 + strip_blocks * 3).contains(&parent_lba) {
                vec![0; 512]
            } else {
                image[start..start + 512].to_vec()
            };
            assert_eq!(read_member(&rams[member], member_lba, 1), expected, "block {parent_lba} after write zeroes");
        }
    }
}

/// A member error fails the parent (with its buffer back), other members' children
/// still complete, and VWC reports the member's cache.
#[test]
fn member_error_fails_the_parent() {
    let failing: Arc<dyn Backend> = Arc::new(support::FaultyBackend::failing_reads(ram(512, 64)));
    let raid = Raid0Backend::new(vec![ram(512, 64), failing], 4096).unwrap();
    assert!(raid.has_volatile_write_cache());
    let mut queue = raid.open_queue();
    let completion = submit_and_wait(
        &mut *queue,
        IoRequest { token: 5, op: IoOp::Read { lba: 0, blocks: 32 }, buffer: vec![0; 32 * 512] },
    );
    assert_eq!(completion.result, Err(storage::IoError::ReadError));
    assert_eq!(completion.buffer.len(), 32 * 512);
    // A read that stays on the healthy member succeeds.
    let completion = submit_and_wait(
        &mut *queue,
        IoRequest { token: 6, op: IoOp::Read { lba: 0, blocks: 8 }, buffer: vec![0; 8 * 512] },
    );
    assert_eq!(completion.result, Ok(()));
}

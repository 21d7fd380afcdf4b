//! A `HostQueue` against the real target `Connection`, in-process: bring-up, admin
//! commands, I/O in-capsule and through R2T, deep queues, with and without digests,
//! under random chunking.

mod support;

use nvme_host::{commands, HostCommand, QueueState};
use nvme_spec::identify::{cns, csi};
use nvme_spec::log_page::{log_id, SmartHealthLog, SMART_HEALTH_LOG_BYTES};
use nvme_spec::{IdentifyController, NamespaceId, Status};
use nvme_tcp_wire::DigestSettings;
use proptest::prelude::*;
use support::*;

const NO_DIGESTS: DigestSettings = DigestSettings { header: false, data: false };
const ALL_DIGESTS: DigestSettings = DigestSettings { header: true, data: true };

fn identify_controller(admin: &mut Link) -> IdentifyController {
    let completion = admin.run_ok(commands::identify(cns::CONTROLLER, NamespaceId::NONE, csi::NVM));
    let raw: &[u8; 4096] = completion.data.as_slice().try_into().expect("4096 bytes");
    IdentifyController::decode(raw)
}

#[test]
fn admin_queue_comes_up_and_identifies() {
    for digests in [NO_DIGESTS, ALL_DIGESTS, DigestSettings { header: true, data: false }] {
        let (mut admin, _io) = bring_up(digests, 0, 1, 32);
        let identify = identify_controller(&mut admin);
        assert_eq!(Some(identify.controller_id), admin.host.controller_id());
        assert_ne!(identify.keep_alive_support, 0);
        assert!(identify.io_command_capsule_size * 16 >= 64 + 8192);
        assert_eq!(admin.host.capacity(), 31);
        assert_eq!(admin.host.outstanding(), 0);
    }
}

#[test]
fn bring_up_survives_any_chunking() {
    for seed in 0..20 {
        let digests = if seed % 2 == 0 { ALL_DIGESTS } else { NO_DIGESTS };
        let (mut admin, mut io) = bring_up(digests, 1 + seed as usize * 7, seed, 16);
        identify_controller(&mut admin);
        let data = pattern(4096, seed);
        io.run_ok(commands::write(NAMESPACE, 8, data.clone(), BLOCK_BYTES, false));
        let read = io.run_ok(commands::read(NAMESPACE, 8, 8, BLOCK_BYTES));
        assert_eq!(read.data, data);
    }
}

#[test]
fn writes_in_capsule_and_through_r2t_read_back() {
    for digests in [NO_DIGESTS, ALL_DIGESTS] {
        for max_chunk in [0, 3, 1000] {
            let (_admin, mut io) = bring_up(digests, max_chunk, 7, 32);
            io.host.set_in_capsule_data_limit(16 * 1024);
            // 4 KiB rides in the capsule; 128 KiB (the target's MDTS) needs an R2T.
            for (lba, bytes) in [(0u64, 4096usize), (64, 128 * 1024), (512, 16 * 1024), (1024, 16 * 1024 + 512)] {
                let data = pattern(bytes, lba);
                let before = io.bytes_to_host;
                let written = io.run_ok(commands::write(NAMESPACE, lba, data.clone(), BLOCK_BYTES, false));
                assert_eq!(written.data, data, "the write buffer comes back");
                // An R2T costs the target a PDU before the response.
                let answered = io.bytes_to_host - before;
                if bytes <= 16 * 1024 {
                    assert_eq!(answered, 24 + if digests.header { 4 } else { 0 }, "in-capsule write");
                } else {
                    assert!(answered > 24 + 4, "R2T write");
                }
                let read = io.run_ok(commands::read(NAMESPACE, lba, (bytes / 512) as u32, BLOCK_BYTES));
                assert_eq!(read.data.len(), bytes);
                assert!(read.data == data, "data at lba {lba} differs");
            }
        }
    }
}

#[test]
fn reads_reuse_the_buffer_moved_in() {
    let (_admin, mut io) = bring_up(NO_DIGESTS, 0, 3, 8);
    let mut command = commands::read(NAMESPACE, 0, 8, BLOCK_BYTES);
    let buffer = Vec::with_capacity(4096);
    let pointer = buffer.as_ptr();
    command.data_out = buffer;
    let completion = io.run_ok(command);
    assert_eq!(completion.data.len(), 4096);
    assert_eq!(completion.data.as_ptr(), pointer, "no new allocation for the read buffer");
}

#[test]
fn many_commands_outstanding_at_once() {
    let (_admin, mut io) = bring_up(ALL_DIGESTS, 0, 11, 64);
    let depth = io.host.capacity();
    assert_eq!(depth, 63);
    for index in 0..depth as u64 {
        let data = pattern(8192 + 512 * (index as usize % 3), index);
        let mut command = commands::write(NAMESPACE, index * 32, data, BLOCK_BYTES, false);
        command.user_tag = index;
        io.host.submit(command, io.now).expect("submit");
    }
    // One more does not fit.
    let refused = io.host.submit(commands::flush(NAMESPACE), io.now).unwrap_err();
    assert!(matches!(refused, nvme_host::SubmitError::QueueFull(_)));
    assert_eq!(io.host.outstanding(), depth);
    io.pump();
    let mut tags: Vec<u64> = std::iter::from_fn(|| io.host.poll_completion())
        .map(|completion| {
            assert!(completion.cqe.status.is_success());
            completion.user_tag
        })
        .collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..depth as u64).collect::<Vec<_>>());
    for index in 0..depth as u64 {
        let blocks = (8192 + 512 * (index as u32 % 3)) / 512;
        let mut command = commands::read(NAMESPACE, index * 32, blocks, BLOCK_BYTES);
        command.user_tag = index;
        io.host.submit(command, io.now).expect("submit");
    }
    io.pump();
    let mut seen = 0;
    while let Some(completion) = io.host.poll_completion() {
        let index = completion.user_tag;
        assert_eq!(completion.data, pattern(8192 + 512 * (index as usize % 3), index));
        seen += 1;
    }
    assert_eq!(seen, depth);
}

#[test]
fn nvme_errors_come_back_as_statuses() {
    let (mut admin, mut io) = bring_up(NO_DIGESTS, 0, 5, 8);
    let beyond = io.run(commands::read(NAMESPACE, NAMESPACE_BLOCKS, 1, BLOCK_BYTES));
    assert_eq!(beyond.cqe.status.kind(), Status::LBA_OUT_OF_RANGE);
    assert!(beyond.transport_error.is_none());
    let missing = io.run(commands::write(NamespaceId(9), 0, vec![1; 512], BLOCK_BYTES, false));
    assert_eq!(missing.cqe.status.kind(), Status::INVALID_NAMESPACE_OR_FORMAT);
    let log = admin.run(commands::get_log_page(0x7E, NamespaceId::BROADCAST, 0, 512));
    assert_eq!(log.cqe.status.kind(), Status::INVALID_LOG_PAGE);
    // The queues are still fine.
    assert!(matches!(io.host.state(), QueueState::Ready { .. }));
    io.run_ok(commands::flush(NAMESPACE));
}

#[test]
fn smart_log_counts_io() {
    let (mut admin, mut io) = bring_up(NO_DIGESTS, 0, 5, 8);
    for lba in 0..3 {
        io.run_ok(commands::write(NAMESPACE, lba * 8, pattern(4096, lba), BLOCK_BYTES, false));
    }
    io.run_ok(commands::read(NAMESPACE, 0, 8, BLOCK_BYTES));
    let completion = admin.run_ok(commands::get_log_page(
        log_id::SMART_HEALTH,
        NamespaceId::BROADCAST,
        0,
        SMART_HEALTH_LOG_BYTES as u32,
    ));
    let raw: &[u8; SMART_HEALTH_LOG_BYTES] = completion.data.as_slice().try_into().unwrap();
    let log = SmartHealthLog::decode(raw);
    assert_eq!(log.host_write_commands, 3);
    assert_eq!(log.host_read_commands, 1);
}

#[test]
fn write_zeroes_and_deallocate() {
    let (_admin, mut io) = bring_up(NO_DIGESTS, 0, 5, 8);
    io.run_ok(commands::write(NAMESPACE, 0, vec![0xAB; 8192], BLOCK_BYTES, true));
    io.run_ok(commands::write_zeroes(NAMESPACE, 0, 8, false));
    io.run_ok(commands::dataset_management_deallocate(
        NAMESPACE,
        &[nvme_spec::admin::DatasetRange { context_attributes: 0, length_blocks: 8, starting_lba: 8 }],
    ));
    let read = io.run_ok(commands::read(NAMESPACE, 0, 16, BLOCK_BYTES));
    assert!(read.data.iter().all(|&byte| byte == 0));
}

#[test]
fn held_async_event_request_never_times_out_and_completes_on_an_event() {
    let (mut admin, _io) = bring_up(NO_DIGESTS, 0, 5, 8);
    let mut request = commands::async_event_request();
    request.user_tag = 77;
    admin.host.submit(request, admin.now).unwrap();
    admin.pump();
    assert!(admin.host.poll_completion().is_none());
    admin.host.handle_timeout(later(admin.now, 3_600_000));
    assert!(matches!(admin.host.state(), QueueState::Ready { .. }));
    assert_eq!(admin.host.next_deadline(), None);
    let dw0 = nvme_spec::admin::async_event_result(2, 0, log_id::CHANGED_NAMESPACE_LIST);
    assert!(admin.connection.raise_async_event(dw0));
    admin.pump();
    let completion = admin.host.poll_completion().expect("AER completion");
    assert_eq!((completion.user_tag, completion.cqe.result_dw0), (77, dw0));
}

#[test]
fn abandon_hands_back_outstanding_commands_in_order() {
    let (_admin, mut io) = bring_up(NO_DIGESTS, 0, 5, 8);
    for tag in 0..3u64 {
        let mut command: HostCommand = if tag == 1 {
            commands::read(NAMESPACE, 0, 1, BLOCK_BYTES)
        } else {
            commands::write(NAMESPACE, tag, vec![tag as u8; 512], BLOCK_BYTES, false)
        };
        command.user_tag = tag;
        io.host.submit(command, io.now).unwrap();
    }
    let back = io.host.abandon(nvme_host::HostError::ConnectionLost);
    assert_eq!(back.iter().map(|command| command.user_tag).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(back[0].data_out, vec![0u8; 512]);
    assert!(back[1].data_out.is_empty());
    assert_eq!(back[1].data_in_bytes, 512);
    assert_eq!(io.host.state(), QueueState::Failed);
    assert_eq!(io.host.error(), Some(&nvme_host::HostError::ConnectionLost));
    assert_eq!(io.host.outstanding(), 0);
    let mut out = Vec::new();
    assert_eq!(io.host.transmit(&mut out), 0, "nothing is sent after a drop");
}

#[derive(Clone, Debug)]
enum Operation {
    Write { lba: u64, blocks: u32, seed: u64 },
    Read { lba: u64, blocks: u32 },
}

fn operation() -> impl Strategy<Value = Operation> {
    let range = (0u64..NAMESPACE_BLOCKS - 256, 1u32..=256);
    prop_oneof![
        (range.clone(), any::<u64>()).prop_map(|((lba, blocks), seed)| Operation::Write { lba, blocks, seed }),
        range.prop_map(|(lba, blocks)| Operation::Read { lba, blocks }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random reads and writes, several outstanding at once, match a Vec model.
    #[test]
    fn random_io_matches_a_model(
        operations in proptest::collection::vec(operation(), 1..24),
        batch in 1usize..6,
        max_chunk in 0usize..3000,
        digests in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let digests = if digests { ALL_DIGESTS } else { NO_DIGESTS };
        let (_admin, mut io) = bring_up(digests, max_chunk, seed, 8);
        let mut model = vec![0u8; (NAMESPACE_BLOCKS * u64::from(BLOCK_BYTES)) as usize];
        for group in operations.chunks(batch) {
            // Within a batch, overlapping commands may run in any order: only check
            // reads against ranges no write of the same batch touches.
            let mut written: Vec<(u64, u64)> = Vec::new();
            let mut expected = Vec::new();
            let mut left_out = 0;
            for (tag, operation) in group.iter().enumerate() {
                match *operation {
                    Operation::Write { lba, blocks, .. }
                        if written.iter().any(|&(start, stop)| lba < stop && lba + u64::from(blocks) > start) =>
                    {
                        // Two outstanding writes to the same blocks may complete in
                        // either order (a small in-capsule write overtakes a large one
                        // waiting for its R2T), so no model can say which wins: leave
                        // such a write out. (Found by this test in CI.)
                        expected.push(None);
                        left_out += 1;
                    }
                    Operation::Write { lba, blocks, seed } => {
                        let data = pattern((blocks * BLOCK_BYTES) as usize, seed);
                        let start = (lba * u64::from(BLOCK_BYTES)) as usize;
                        model[start..start + data.len()].copy_from_slice(&data);
                        written.push((lba, lba + u64::from(blocks)));
                        let mut command = commands::write(NAMESPACE, lba, data, BLOCK_BYTES, false);
                        command.user_tag = tag as u64;
                        io.host.submit(command, io.now).unwrap();
                        expected.push(None);
                    }
                    Operation::Read { lba, blocks } => {
                        let mut command = commands::read(NAMESPACE, lba, blocks, BLOCK_BYTES);
                        command.user_tag = tag as u64;
                        io.host.submit(command, io.now).unwrap();
                        expected.push(Some((lba, blocks)));
                    }
                }
            }
            io.pump();
            let mut completions = 0;
            while let Some(completion) = io.host.poll_completion() {
                completions += 1;
                prop_assert!(completion.cqe.status.is_success(), "{:?}", completion.cqe.status);
                if let Some((lba, blocks)) = expected[completion.user_tag as usize] {
                    let end = lba + u64::from(blocks);
                    if written.iter().all(|&(start, stop)| end <= start || lba >= stop) {
                        let start = (lba * u64::from(BLOCK_BYTES)) as usize;
                        prop_assert!(completion.data == model[start..start + completion.data.len()]);
                        prop_assert_eq!(completion.data.len(), (blocks * BLOCK_BYTES) as usize);
                    }
                }
            }
            prop_assert_eq!(completions, group.len() - left_out);
        }
        // Finally every block reads back as the model says.
        for lba in (0..NAMESPACE_BLOCKS).step_by(256) {
            let read = io.run_ok(commands::read(NAMESPACE, lba, 256, BLOCK_BYTES));
            let start = (lba * u64::from(BLOCK_BYTES)) as usize;
            prop_assert!(read.data == model[start..start + read.data.len()]);
        }
    }
}

/// Collects what a queue writes through its read destination: destination value ->
/// buffer (a stand-in for the caller's memory the fio engine points at).
#[derive(Debug, Default)]
struct Buffers(std::sync::Mutex<std::collections::HashMap<u64, Vec<u8>>>);

impl nvme_host::ReadDestination for Buffers {
    fn write(&self, destination: u64, offset: usize, data: &[u8]) {
        let mut buffers = self.0.lock().unwrap();
        let buffer = buffers.entry(destination).or_default();
        assert_eq!(buffer.len(), offset, "data arrives in order, each byte once");
        buffer.extend_from_slice(data);
    }
}

#[test]
fn reads_with_a_destination_land_there_under_any_chunking() {
    for digests in [NO_DIGESTS, ALL_DIGESTS] {
        for max_chunk in [0, 5, 1000] {
            let (_admin, mut io) = bring_up(digests, max_chunk, 11, 16);
            let buffers = std::sync::Arc::new(Buffers::default());
            io.host.set_read_destination(buffers.clone());
            // 128 KiB: several C2HData PDUs (the target splits at its MAXH2CDATA-like
            // chunk), so offsets past the first PDU are exercised.
            for (destination, (lba, bytes)) in [(0u64, 4096usize), (256, 128 * 1024)].into_iter().enumerate() {
                let data = pattern(bytes, lba + 1);
                io.run_ok(commands::write(NAMESPACE, lba, data.clone(), BLOCK_BYTES, false));
                let mut read = commands::read(NAMESPACE, lba, (bytes / 512) as u32, BLOCK_BYTES);
                read.read_destination = Some(destination as u64 + 100);
                let completion = io.run_ok(read);
                assert!(completion.data.is_empty(), "the data went to the destination, not the completion");
                let landed = buffers.0.lock().unwrap().remove(&(destination as u64 + 100)).expect("written");
                assert!(landed == data, "data at lba {lba} differs ({} bytes landed)", landed.len());
            }
            // A read without a destination on the same queue is collected as before.
            let read = io.run_ok(commands::read(NAMESPACE, 0, 8, BLOCK_BYTES));
            assert_eq!(read.data, pattern(4096, 1));
            assert!(buffers.0.lock().unwrap().is_empty());
        }
    }
}

/// Caller memory a queue sends writes from: source value -> bytes (leaked when put
/// in, so slices of it live as long as the test).
#[derive(Debug, Default)]
struct Sources(std::sync::Mutex<std::collections::HashMap<u64, &'static [u8]>>);

impl nvme_host::WriteSource for Sources {
    fn data(&self, source: u64, offset: usize, length: usize) -> Option<&[u8]> {
        let buffer: &'static [u8] = self.0.lock().unwrap().get(&source)?;
        buffer.get(offset..offset + length)
    }
}

#[test]
fn writes_from_a_write_source_reach_the_namespace() {
    for digests in [NO_DIGESTS, ALL_DIGESTS] {
        for max_chunk in [0, 7, 1000] {
            let (_admin, mut io) = bring_up(digests, max_chunk, 13, 16);
            io.host.set_in_capsule_data_limit(8192);
            let sources = std::sync::Arc::new(Sources::default());
            io.host.set_write_source(sources.clone());
            // In the capsule, through one R2T, through several H2CData PDUs, and
            // below the size that is copied rather than lent.
            for (source, (lba, bytes)) in
                [(0u64, 4096usize), (256, 128 * 1024), (1024, 16 * 1024), (2048, 512)].into_iter().enumerate()
            {
                let data = pattern(bytes, lba + 3);
                sources.0.lock().unwrap().insert(source as u64, Box::leak(data.clone().into_boxed_slice()));
                let buffer = nvme_host::SourceBuffer { source: source as u64, length: bytes as u32 };
                let write = commands::write_from_source(NAMESPACE, lba, buffer, BLOCK_BYTES, false);
                let completion = io.run_ok(write);
                assert!(completion.data.is_empty(), "the caller's memory is not handed back");
                let read = io.run_ok(commands::read(NAMESPACE, lba, (bytes / 512) as u32, BLOCK_BYTES));
                assert!(read.data == data, "data at lba {lba} differs");
            }
        }
    }
}

//! The referencing transmit path against the copying one it replaced: for random
//! commands (own buffers and a write source, in-capsule and R2T data, digests, PDU
//! data alignment, MAXH2CDATA), the bytes of a `TransmitBatch` equal what the old
//! code, kept here as the oracle, copied into one buffer. Plus the rules that keep
//! lent data alive: a command completes only once no batch holds its data.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nvme_spec::{CommandId, CompletionQueueEntry, ControllerId, NamespaceId, QueueId, Status};
use nvme_tcp_wire::{
    CapsuleCommand, CapsuleResponse, DataHeader, DigestSettings, InitializeConnectionResponse, PduHeader, PduWriter,
    ReadyToTransfer,
};
use proptest::prelude::*;

use crate::queue::{HostQueue, Pending};
use crate::{commands, HostCommand, HostError, QueueConfig, QueueState, SourceBuffer, TransmitBatch, WriteSource};

/// Caller memory for the tests: buffers by source value, and a switch that
/// withdraws them all.
#[derive(Debug, Default)]
struct Memory {
    /// Leaked when put in, so a slice of one outlives every borrow of `self`.
    buffers: Mutex<HashMap<u64, &'static [u8]>>,
    withdrawn: std::sync::atomic::AtomicBool,
}

impl Memory {
    fn insert(&self, source: u64, data: Vec<u8>) {
        self.buffers.lock().unwrap().insert(source, Box::leak(data.into_boxed_slice()));
    }
}

impl WriteSource for Memory {
    fn data(&self, source: u64, offset: usize, length: usize) -> Option<&[u8]> {
        if self.withdrawn.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let buffer: &'static [u8] = self.buffers.lock().unwrap().get(&source)?;
        buffer.get(offset..offset + length)
    }
}

/// The transmit path before write data was referenced, verbatim but for where the
/// data is read from: every byte copied into `out`.
fn reference_transmit(queue: &mut HostQueue, out: &mut Vec<u8>) {
    while let Some(item) = queue.pending.pop_front() {
        match item {
            Pending::Command { slot: index, generation } => {
                let slot = &queue.slots[usize::from(index)];
                if !slot.in_use || slot.generation != generation {
                    continue;
                }
                let data =
                    if slot.in_capsule { reference_data(queue, index, 0, slot.data_out_bytes) } else { Vec::new() };
                let header = PduHeader::CapsuleCmd(CapsuleCommand { sqe: slot.sqe });
                queue.writer.write_header(&header, data.len() as u32, out);
                out.extend_from_slice(&data);
                queue.writer.append_data_digest(&[&data], out);
            }
            Pending::HostData { slot: index, generation, transfer_tag, offset, length } => {
                let max_pdu_bytes = queue.max_h2c_data_bytes.max(4);
                let slot = &mut queue.slots[usize::from(index)];
                if !slot.in_use || slot.generation != generation {
                    continue;
                }
                slot.r2t_pending = slot.r2t_pending.saturating_sub(1);
                let command_id = slot.sqe.command_id();
                let data = reference_data(queue, index, offset, length);
                let mut sent = 0usize;
                while sent < data.len() {
                    let piece_bytes = (data.len() - sent).min(max_pdu_bytes as usize);
                    let piece = &data[sent..sent + piece_bytes];
                    let header = DataHeader {
                        command_id,
                        transfer_tag,
                        data_offset: offset + sent as u32,
                        data_length: piece_bytes as u32,
                        last: sent + piece_bytes == data.len(),
                        success: false,
                    };
                    queue.writer.write_header(&PduHeader::H2cData(header), piece_bytes as u32, out);
                    out.extend_from_slice(piece);
                    queue.writer.append_data_digest(&[piece], out);
                    sent += piece_bytes;
                }
            }
            other => panic!("the oracle only encodes I/O: {other:?}"),
        }
    }
}

/// The command's data, read the plain way: its own buffer, or the write source.
fn reference_data(queue: &HostQueue, index: u16, offset: u32, length: u32) -> Vec<u8> {
    let slot = &queue.slots[usize::from(index)];
    let range = offset as usize..(offset + length) as usize;
    match slot.write_source {
        None => slot.data_out[range].to_vec(),
        Some(buffer) => {
            queue.write_source.as_ref().unwrap().data(buffer.source, range.start, range.len()).unwrap().to_vec()
        }
    }
}

fn controller_writer(digests: DigestSettings) -> PduWriter {
    let mut writer = PduWriter::new();
    writer.set_digests(digests);
    writer
}

fn response(digests: DigestSettings, command_id: u16, status: Status) -> Vec<u8> {
    let cqe = CompletionQueueEntry { command_id: CommandId(command_id), status, ..CompletionQueueEntry::default() };
    let mut bytes = Vec::new();
    controller_writer(digests).write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, &mut bytes);
    bytes
}

fn ready_to_transfer(digests: DigestSettings, command_id: u16, offset: u32, length: u32) -> Vec<u8> {
    let request =
        ReadyToTransfer { command_id: CommandId(command_id), transfer_tag: command_id ^ 0x5A, offset, length };
    let mut bytes = Vec::new();
    controller_writer(digests).write_header(&PduHeader::R2t(request), 0, &mut bytes);
    bytes
}

/// An I/O queue through ICResp and Connect, ready for commands.
fn ready_queue(digests: DigestSettings, alignment: u8, max_h2c_data_bytes: u32, in_capsule_limit: u32) -> HostQueue {
    let now = Instant::now();
    let config = QueueConfig {
        queue_id: QueueId(1),
        queue_size: 32,
        controller_id: ControllerId(1),
        subsystem_nqn: "nqn.2026-11.io.sluice:transmit".into(),
        host_nqn: "nqn.2026-11.io.sluice:host".into(),
        host_identifier: [3; 16],
        keep_alive_timeout_ms: 0,
        digests,
        command_timeout_ms: 0,
        max_r2t_outstanding: 0,
        dhchap: None,
    };
    let mut queue = HostQueue::new(config, now);
    queue.transmit(&mut Vec::new());
    let mut answer = Vec::new();
    let ic_response = InitializeConnectionResponse {
        protocol_format_version: 0,
        controller_pdu_data_alignment: alignment,
        digests,
        max_h2c_data_bytes,
    };
    PduWriter::new().write_header(&PduHeader::IcResp(ic_response), 0, &mut answer);
    queue.handle_received(&answer, now);
    queue.transmit(&mut Vec::new());
    queue.handle_received(&response(digests, 0, Status::SUCCESS), now);
    assert!(matches!(queue.state(), QueueState::Ready { .. }), "{:?}", queue.error());
    queue.set_in_capsule_data_limit(in_capsule_limit);
    queue
}

/// One command of a random run: a write of `bytes` (from a source or not), or a
/// read of `bytes`.
#[derive(Clone, Debug)]
struct Plan {
    bytes: usize,
    read: bool,
    from_source: bool,
    /// R2T lengths are cut at this many bytes (as a target with a small buffer does).
    r2t_piece: usize,
}

fn plan() -> impl Strategy<Value = Plan> {
    let bytes = prop_oneof![1usize..600, 600usize..10_000, 10_000usize..70_000];
    (bytes, any::<bool>(), any::<bool>(), 1usize..40_000).prop_map(|(bytes, read, from_source, r2t_piece)| Plan {
        bytes: bytes.div_ceil(4) * 4,
        read,
        from_source,
        r2t_piece,
    })
}

fn command_for(plan: &Plan, seed: u64, memory: &Memory) -> HostCommand {
    if plan.read {
        return commands::read(NamespaceId(1), seed, (plan.bytes as u32).div_ceil(512), 512);
    }
    let data: Vec<u8> = (0..plan.bytes).map(|index| (index as u64 * 31 + seed) as u8).collect();
    if !plan.from_source {
        return commands::write(NamespaceId(1), seed, data, 512, false);
    }
    let length = data.len() as u32;
    memory.insert(seed, data);
    let mut command = commands::write(NamespaceId(1), seed, Vec::new(), 512, false);
    command.write_source = Some(SourceBuffer { source: seed, length });
    command
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn referenced_bytes_equal_the_copied_bytes(
        plans in proptest::collection::vec(plan(), 1..24),
        header_digest in any::<bool>(),
        data_digest in any::<bool>(),
        alignment in prop_oneof![Just(0u8), 0u8..32],
        max_h2c_kib in 1u32..40,
        in_capsule_limit in prop_oneof![Just(0u32), Just(8192), 0u32..20_000],
        batch_every in 1usize..6,
    ) {
        let digests = DigestSettings { header: header_digest, data: data_digest };
        let max_h2c = max_h2c_kib * 4096;
        let now = Instant::now();
        let memory = Arc::new(Memory::default());
        let mut copied = ready_queue(digests, alignment, max_h2c, in_capsule_limit);
        let mut referenced = ready_queue(digests, alignment, max_h2c, in_capsule_limit);
        copied.set_write_source(memory.clone());
        referenced.set_write_source(memory.clone());
        let mut batch = TransmitBatch::new();
        let mut expected = Vec::new();
        let mut actual = Vec::new();
        let mut sent_data = HashMap::new();
        for (position, plan) in plans.iter().enumerate() {
            let command = command_for(plan, position as u64, &memory);
            sent_data.insert(position as u64, command.data_out.clone());
            let command = HostCommand { user_tag: position as u64, ..command };
            copied.submit(command.clone(), now).unwrap();
            referenced.submit(command, now).unwrap();
            if position % batch_every == 0 {
                reference_transmit(&mut copied, &mut expected);
                referenced.transmit_batch(&mut batch);
            }
        }
        reference_transmit(&mut copied, &mut expected);
        referenced.transmit_batch(&mut batch);
        // Answer every R2T-path write in pieces, transmitting after each R2T (one
        // outstanding at a time, as MAXR2T 0 allows).
        for (command_id, plan) in plans.iter().enumerate() {
            let in_capsule = plan.bytes as u32 <= in_capsule_limit;
            if plan.read || in_capsule {
                continue;
            }
            let mut offset = 0;
            while offset < plan.bytes {
                let length = plan.r2t_piece.min(plan.bytes - offset);
                let request = ready_to_transfer(digests, command_id as u16, offset as u32, length as u32);
                copied.handle_received(&request, now);
                referenced.handle_received(&request, now);
                reference_transmit(&mut copied, &mut expected);
                referenced.transmit_batch(&mut batch);
                offset += length;
            }
        }
        batch.copy_to(&mut actual);
        prop_assert_eq!(batch.len(), actual.len());
        prop_assert!(actual == expected, "{} bytes referenced against {} copied", actual.len(), expected.len());
        // Referenced data is held by the batch: responses wait for it to let go.
        for command_id in 0..plans.len() {
            referenced.handle_received(&response(digests, command_id as u16, Status::SUCCESS), now);
        }
        let early: Vec<_> = std::iter::from_fn(|| referenced.poll_completion()).collect();
        let copy_below = crate::transmit_batch::COPY_DATA_BELOW_BYTES;
        let lent = |plan: &Plan| {
            let in_capsule = plan.bytes as u32 <= in_capsule_limit;
            let largest_piece = if in_capsule { plan.bytes } else { plan.r2t_piece.min(plan.bytes) };
            !plan.read && largest_piece >= copy_below
        };
        for completion in &early {
            let plan = &plans[completion.user_tag as usize];
            prop_assert!(!lent(plan), "a completion came while its data was lent: {plan:?}");
        }
        prop_assert_eq!(early.len(), plans.iter().filter(|plan| !lent(plan)).count());
        batch.clear();
        let late: Vec<_> = std::iter::from_fn(|| referenced.poll_completion()).collect();
        prop_assert_eq!(early.len() + late.len(), plans.len());
        for completion in early.iter().chain(&late) {
            let plan = &plans[completion.user_tag as usize];
            // Reads got no data here, so they end short; writes succeed.
            prop_assert_eq!(completion.cqe.status.is_success(), !plan.read);
            if !plan.read {
                // The command's own buffer comes back whole; a source's stays the caller's.
                prop_assert!(completion.data == sent_data[&completion.user_tag]);
            }
        }
        prop_assert_eq!(referenced.outstanding(), 0);
    }
}

fn write_of(bytes: usize) -> HostCommand {
    commands::write(NamespaceId(1), 0, vec![0xA5; bytes], 512, false)
}

#[test]
fn a_held_batch_holds_the_completion_and_abandon_hands_back_copies() {
    let digests = DigestSettings { header: false, data: true };
    let now = Instant::now();
    let mut queue = ready_queue(digests, 0, 8192, 8192);
    let mut batch = TransmitBatch::new();
    for tag in 0..3 {
        queue.submit(HostCommand { user_tag: tag, ..write_of(4096) }, now).unwrap();
    }
    queue.transmit_batch(&mut batch);
    // Command 0 is answered while its data is still lent: it waits.
    queue.handle_received(&response(digests, 0, Status::SUCCESS), now);
    assert!(queue.poll_completion().is_none());
    // Its CID names nothing any more: a second response for it is a protocol error.
    // (Checked on a twin below; here the connection drops instead.)
    let abandoned = queue.abandon(HostError::ConnectionLost);
    // The answered command completes; the others come back with their data, copied
    // since the batch still holds the originals.
    let completed = queue.poll_completion().expect("the answered command completes on abandon");
    assert_eq!((completed.user_tag, completed.data.len()), (0, 4096));
    assert_eq!(abandoned.iter().map(|command| command.user_tag).collect::<Vec<_>>(), [1, 2]);
    assert!(abandoned.iter().all(|command| command.data_out == vec![0xA5; 4096]));
    let mut bytes = Vec::new();
    batch.copy_to(&mut bytes);
    assert_eq!(bytes.len(), batch.len(), "the batch still reads its data");
}

#[test]
fn a_second_response_for_a_waiting_command_fails_the_queue() {
    let digests = DigestSettings::default();
    let now = Instant::now();
    let mut queue = ready_queue(digests, 0, 8192, 8192);
    let mut batch = TransmitBatch::new();
    queue.submit(write_of(4096), now).unwrap();
    queue.transmit_batch(&mut batch);
    queue.handle_received(&response(digests, 0, Status::SUCCESS), now);
    assert_eq!(queue.state(), QueueState::Ready { controller_id: ControllerId(1) });
    queue.handle_received(&response(digests, 0, Status::SUCCESS), now);
    assert!(matches!(queue.error(), Some(HostError::UnknownCommandId { command_id: 0, .. })), "{:?}", queue.error());
}

#[test]
fn a_withdrawn_source_keeps_the_command_off_the_wire() {
    let digests = DigestSettings::default();
    let now = Instant::now();
    let memory = Arc::new(Memory::default());
    let mut queue = ready_queue(digests, 0, 8192, 8192);
    queue.set_write_source(memory.clone());
    memory.insert(7, vec![1; 4096]);
    memory.withdrawn.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut command = write_of(0);
    command.write_source = Some(SourceBuffer { source: 7, length: 4096 });
    queue.submit(command, now).unwrap();
    let mut batch = TransmitBatch::new();
    assert_eq!(queue.transmit_batch(&mut batch), 0, "nothing is sent");
    let completion = queue.poll_completion().expect("completed by the host");
    assert_eq!(completion.cqe.status, crate::status::COMMAND_ABORTED_BY_HOST.with_do_not_retry());
    assert_eq!(completion.transport_error, Some(HostError::WriteSourceWithdrawn { command_id: 0 }));
    assert_eq!(queue.state(), QueueState::Ready { controller_id: ControllerId(1) });
}

#[test]
fn data_withdrawn_after_an_r2t_asked_for_it_fails_the_queue() {
    let digests = DigestSettings::default();
    let now = Instant::now();
    let memory = Arc::new(Memory::default());
    let mut queue = ready_queue(digests, 0, 8192, 0);
    queue.set_write_source(memory.clone());
    memory.insert(7, vec![1; 8192]);
    let mut command = write_of(0);
    command.write_source = Some(SourceBuffer { source: 7, length: 8192 });
    queue.submit(command, now).unwrap();
    let mut batch = TransmitBatch::new();
    queue.transmit_batch(&mut batch);
    memory.withdrawn.store(true, std::sync::atomic::Ordering::Relaxed);
    queue.handle_received(&ready_to_transfer(digests, 0, 0, 8192), now);
    let before = batch.len();
    queue.transmit_batch(&mut batch);
    assert_eq!(batch.len(), before, "no H2CData header without its data");
    assert_eq!(queue.error(), Some(&HostError::WriteSourceWithdrawn { command_id: 0 }));
}

#[test]
fn submit_refuses_a_source_without_a_write_source_or_with_data() {
    let now = Instant::now();
    let mut queue = ready_queue(DigestSettings::default(), 0, 8192, 8192);
    let mut command = write_of(0);
    command.write_source = Some(SourceBuffer { source: 1, length: 512 });
    let refused = queue.submit(command.clone(), now).unwrap_err();
    assert!(matches!(refused, crate::SubmitError::InvalidWriteSource(_)));
    queue.set_write_source(Arc::new(Memory::default()));
    command.data_out = vec![0; 512];
    let refused = queue.submit(command, now).unwrap_err();
    assert!(matches!(refused, crate::SubmitError::InvalidWriteSource(_)));
}

#[test]
fn small_data_is_copied_and_large_data_referenced() {
    let now = Instant::now();
    let mut queue = ready_queue(DigestSettings::default(), 0, 8192, 8192);
    queue.submit(write_of(16), now).unwrap();
    queue.submit(write_of(4096), now).unwrap();
    let mut batch = TransmitBatch::new();
    queue.transmit_batch(&mut batch);
    // Header and 16 bytes of data together, the next header, then the 4 KiB by reference.
    let lengths: Vec<usize> = batch.slices().map(<[u8]>::len).collect();
    assert_eq!(lengths, [72 + 16 + 72, 4096]);
    batch.clear();
    assert!(batch.is_empty());
}

//! The host's receive path against a hostile target: any stream of PDUs (scripted
//! well-formed ones for the commands the host has outstanding, so deep states are
//! reached, mixed with wrong ones and raw bytes), in any chunking, with time
//! passing and commands submitted in between, into `nvme_host::HostQueue`; and the
//! completion data the host library decodes (Identify pages, lists, the ANA log).
//!
//! Checked: no panic; every completion names a command that was submitted and not
//! completed yet (never twice, never one it did not send), with no more data than
//! the command asked for; the host never has more outstanding than its queue
//! holds; what the host sends always parses as a host-to-controller stream; after
//! `abandon`, every command comes back exactly once (completed or handed back).
//! Memory and time are bounded by libFuzzer's -rss_limit_mb and -timeout (see
//! scripts/fuzz-host.sh).
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use nvme_host::{commands, HostCommand, HostQueue, QueueConfig, TransmitBatch, MAX_COMMAND_DATA_BYTES};
use nvme_spec::identify::{decode_namespace_descriptors, decode_namespace_list, IDENTIFY_DATA_BYTES};
use nvme_spec::{
    CommandId, CompletionQueueEntry, ControllerId, IdentifyController, IdentifyNamespace, NamespaceId, QueueId,
    Status,
};
use nvme_tcp_wire::{
    CapsuleResponse, DataHeader, DigestSettings, FatalErrorStatus, InitializeConnectionResponse, PduHeader,
    PduReader, PduWriter, ReadEvent, ReaderLimits, ReadyToTransfer, Role, TerminationRequest,
};

const BLOCK_BYTES: u32 = 512;

/// The fuzz input, consumed from the front.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }

    fn bytes(&mut self, count: usize) -> Option<&[u8]> {
        if self.0.len() < count {
            return None;
        }
        let (head, rest) = self.0.split_at(count);
        self.0 = rest;
        Some(head)
    }
}

/// What the host sent, as the target sees it: the commands it has outstanding.
struct TargetView {
    reader: PduReader,
    /// CID -> (data_in_bytes from the SGL length, has R2T data).
    outstanding: BTreeMap<u16, (u32, bool)>,
}

impl TargetView {
    fn take(&mut self, host: &mut HostQueue, batch: &mut TransmitBatch, digests: DigestSettings) {
        let mut bytes = Vec::new();
        while host.transmit_batch(batch) > 0 {
            batch.copy_to(&mut bytes);
            batch.clear();
        }
        let mut input = &bytes[..];
        loop {
            match self.reader.next_event(&mut input) {
                Ok(None) => break,
                Ok(Some(ReadEvent::Header { header, .. })) => match header {
                    PduHeader::IcReq(_) => self.reader.set_digests(digests),
                    PduHeader::CapsuleCmd(capsule) => {
                        let sgl = capsule.sqe.sgl();
                        let r2t = sgl.is_transport() && capsule.sqe.opcode() == 0x01;
                        let data_in = if sgl.is_transport() && !r2t { sgl.length } else { 0 };
                        self.outstanding.insert(capsule.sqe.command_id().0, (data_in, r2t));
                    }
                    PduHeader::H2cTermReq(_) => break,
                    _ => {}
                },
                Ok(Some(_)) => {}
                Err(error) => panic!("the host sent a malformed stream: {error}"),
            }
        }
    }

    /// A CID to answer: one the host has outstanding (as the input picks), or the
    /// input's own.
    fn pick(&self, choice: u16) -> (u16, u32, bool) {
        if choice & 0x8000 != 0 || self.outstanding.is_empty() {
            return (choice & 0x7FFF, 4096, false);
        }
        let index = usize::from(choice) % self.outstanding.len();
        let (&cid, &(data_in, r2t)) = self.outstanding.iter().nth(index).expect("index below the length");
        (cid, data_in, r2t)
    }
}

/// The host's side of the books: what it was given and what came back.
#[derive(Default)]
struct Ledger {
    next_tag: u64,
    /// user tag -> (data_in_bytes, data_out bytes).
    submitted: BTreeMap<u64, (u32, usize)>,
    done: BTreeSet<u64>,
}

impl Ledger {
    fn collect(&mut self, host: &mut HostQueue) {
        while let Some(completion) = host.poll_completion() {
            let tag = completion.user_tag;
            let Some(&(data_in, data_out)) = self.submitted.get(&tag) else {
                panic!("completion for user tag {tag}, never submitted");
            };
            assert!(self.done.insert(tag), "command {tag} completed twice");
            if data_in > 0 {
                assert!(completion.data.len() <= data_in as usize, "more data than asked for");
            } else {
                assert_eq!(completion.data.len(), data_out, "a write's buffer came back another size");
            }
        }
        assert!(host.outstanding() <= host.capacity());
    }

    fn submit(&mut self, host: &mut HostQueue, mut command: HostCommand, now: Instant) {
        command.user_tag = self.next_tag;
        let sizes = (command.data_in_bytes, command.data_out.len());
        if host.submit(command, now).is_ok() {
            self.submitted.insert(self.next_tag, sizes);
        }
        self.next_tag += 1;
    }
}

fn response(writer: &PduWriter, command_id: u16, status: u16, out: &mut Vec<u8>) {
    let cqe = CompletionQueueEntry {
        command_id: CommandId(command_id),
        status: Status::from_field(status),
        ..CompletionQueueEntry::default()
    };
    writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, out);
}

/// The completion data the host library decodes, from `page`.
fn decode_pages(page: &[u8]) {
    let mut raw = [0u8; IDENTIFY_DATA_BYTES];
    for (index, byte) in raw.iter_mut().enumerate() {
        *byte = page.get(index % page.len().max(1)).copied().unwrap_or(0);
    }
    let _ = IdentifyController::decode(&raw);
    let _ = IdentifyNamespace::decode(&raw).formatted_lba_format();
    assert!(decode_namespace_list(&raw).count() <= IDENTIFY_DATA_BYTES / 4);
    let _ = decode_namespace_descriptors(&raw).count();
    let _ = nvme_spec::ana::AnaLog::decode(page);
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let (Some(flags), Some(size), Some(timeout), Some(chunk)) = (input.byte(), input.byte(), input.byte(), input.byte())
    else {
        return;
    };
    let digests = DigestSettings { header: flags & 1 != 0, data: flags & 2 != 0 };
    let admin = flags & 4 != 0;
    let chunk = usize::from(chunk).max(1);
    let config = QueueConfig {
        queue_id: if admin { QueueId::ADMIN } else { QueueId(1) },
        queue_size: 2 + u16::from(size % 15),
        controller_id: if admin { ControllerId::DYNAMIC } else { ControllerId(1) },
        subsystem_nqn: "nqn.2026-11.io.sluice:fuzz".into(),
        host_nqn: "nqn.2014-08.org.nvmexpress:uuid:fuzz".into(),
        host_identifier: [1; 16],
        keep_alive_timeout_ms: if admin { 5000 } else { 0 },
        digests,
        command_timeout_ms: u64::from(timeout) * 20,
        max_r2t_outstanding: u32::from(flags >> 6),
        dhchap: None,
    };
    let start = Instant::now();
    let mut now = start;
    let mut host = HostQueue::new(config, start);
    let mut batch = TransmitBatch::new();
    let limits = ReaderLimits { max_data_bytes: MAX_COMMAND_DATA_BYTES };
    let mut view = TargetView { reader: PduReader::new(Role::Controller, limits), outstanding: BTreeMap::new() };
    let mut ledger = Ledger::default();
    let mut writer = PduWriter::new();
    view.take(&mut host, &mut batch, digests);

    let mut stream = Vec::new();
    // Mostly a well-behaved start (ICResp, then the Connect response), so the
    // script reaches commands; else the script starts from nothing.
    if flags & 8 == 0 {
        // The host aligns its H2C data as the CPDA we announce says.
        view.reader.set_data_alignment(flags >> 4 & 3);
        let response_header = InitializeConnectionResponse {
            protocol_format_version: 0,
            controller_pdu_data_alignment: flags >> 4 & 3,
            digests,
            max_h2c_data_bytes: 4096 << (size >> 6),
        };
        writer.write_header(&PduHeader::IcResp(response_header), 0, &mut stream);
        writer.set_digests(digests);
        host.handle_received(&stream, now);
        stream.clear();
        view.take(&mut host, &mut batch, digests);
        let cqe = CompletionQueueEntry { result_dw0: 1, ..CompletionQueueEntry::default() };
        writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, &mut stream);
        view.outstanding.clear();
    }

    while let Some(op) = input.byte() {
        match op % 10 {
            // The host submits a command: a read, a write (in capsule or by R2T) or
            // one without data.
            0 => {
                let Some(blocks) = input.byte() else { break };
                let blocks = u32::from(blocks % 64) + 1;
                let command = match op / 10 % 4 {
                    0 => commands::read(NamespaceId(1), 0, blocks, BLOCK_BYTES),
                    1 => commands::write(NamespaceId(1), 0, vec![0xA5; (blocks * BLOCK_BYTES) as usize], BLOCK_BYTES, false),
                    2 => commands::keep_alive(),
                    _ => commands::identify(1, NamespaceId::NONE, 0),
                };
                ledger.submit(&mut host, command, now);
            }
            // CapsuleResp for a CID, with a status.
            1 => {
                let (Some(choice), Some(status)) = (input.u16(), input.u16()) else { break };
                let (cid, _, _) = view.pick(choice);
                response(&writer, cid, if op & 0x80 != 0 { status } else { 0 }, &mut stream);
                view.outstanding.remove(&cid);
            }
            // C2HData for a CID.
            2 => {
                let (Some(choice), Some(offset), Some(length), Some(bits)) =
                    (input.u16(), input.u16(), input.u16(), input.byte())
                else {
                    break;
                };
                let (cid, data_in, _) = view.pick(choice);
                let (offset, length) = if bits & 4 == 0 {
                    (0, data_in.min(1 << 17))
                } else {
                    (u32::from(offset), u32::from(length))
                };
                let header = DataHeader {
                    command_id: CommandId(cid),
                    transfer_tag: 0,
                    data_offset: offset,
                    data_length: length,
                    last: bits & 1 != 0,
                    success: bits & 3 == 3,
                };
                let payload = vec![0x5A; length as usize];
                writer.write_header(&PduHeader::C2hData(header), length, &mut stream);
                stream.extend_from_slice(&payload);
                writer.append_data_digest(&[&payload], &mut stream);
                if header.success {
                    view.outstanding.remove(&cid);
                }
            }
            // R2T for a CID.
            3 => {
                let (Some(choice), Some(offset), Some(length), Some(tag)) =
                    (input.u16(), input.u16(), input.u16(), input.byte())
                else {
                    break;
                };
                let (cid, _, _) = view.pick(choice);
                let request = ReadyToTransfer {
                    command_id: CommandId(cid),
                    transfer_tag: u16::from(tag),
                    offset: u32::from(offset) * 4,
                    length: u32::from(length),
                };
                writer.write_header(&PduHeader::R2t(request), 0, &mut stream);
            }
            // C2HTermReq.
            4 => {
                let (Some(status), Some(info)) = (input.byte(), input.u16()) else { break };
                let status = FatalErrorStatus::from_u16(u16::from(status % 6) + 1).unwrap_or(FatalErrorStatus::PduSequenceError);
                let request = TerminationRequest::new(status, u32::from(info), &[]);
                writer.write_header(&PduHeader::C2hTermReq(request), 0, &mut stream);
            }
            // Raw bytes: anything at all.
            5 | 6 => {
                let Some(length) = input.byte() else { break };
                let Some(raw) = input.bytes(usize::from(length)) else { break };
                stream.extend_from_slice(raw);
            }
            // Time passes.
            7 => {
                let Some(ticks) = input.byte() else { break };
                now += Duration::from_millis(u64::from(ticks) * 10);
                host.handle_timeout(now);
            }
            // Completion data the library decodes.
            8 => {
                let Some(length) = input.byte() else { break };
                let Some(page) = input.bytes(usize::from(length)) else { break };
                decode_pages(page);
            }
            // Flip one bit of what is queued for the host.
            _ => {
                let Some(at) = input.u16() else { break };
                if !stream.is_empty() {
                    let index = usize::from(at) % stream.len();
                    stream[index] ^= 1 << (at >> 13);
                }
            }
        }
        for piece in stream.chunks(chunk) {
            host.handle_received(piece, now);
        }
        stream.clear();
        view.take(&mut host, &mut batch, digests);
        ledger.collect(&mut host);
        if let Some(deadline) = host.next_deadline() {
            // A deadline far ahead of the clock is fine; one that keeps the driver
            // spinning is not: handling it must move it on or fail the queue.
            if deadline <= now {
                host.handle_timeout(now);
                assert!(host.next_deadline().is_none_or(|next| next > now), "a deadline that never moves on");
            }
        }
    }
    // The connection ends: every command comes back exactly once.
    let abandoned = host.abandon(nvme_host::HostError::ConnectionLost);
    ledger.collect(&mut host);
    for command in abandoned {
        let tag = command.user_tag;
        assert!(ledger.submitted.contains_key(&tag), "abandoned a command never submitted: {tag}");
        assert!(ledger.done.insert(tag), "command {tag} both completed and handed back");
    }
    assert_eq!(ledger.done.len(), ledger.submitted.len(), "a command vanished");
});

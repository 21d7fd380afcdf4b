//! A fake NVMe/TCP target on loopback that behaves as the spec says up to a chosen
//! command and then misbehaves, every time that command comes again (on every
//! connection, after every reconnect): a broken or hostile target, driving the real
//! host (the library here, the `sluice` binary in apps/sluice/tests).
//!
//! What it implements, from NVMe/TCP 1.0 and NVMe over Fabrics 1.1 / Base 2.0:
//! ICReq/ICResp with the digests the host asks for, Fabrics Connect (admin: a
//! CNTLID; I/O: joins it), Property Get/Set (CAP, VS, CC, CSTS: RDY follows EN,
//! SHST follows SHN), Identify (controller, namespace 1, the Active Namespace ID
//! list, an empty descriptor list), Set/Get Features, Keep Alive, Get Log Page
//! (zeros), Asynchronous Event Requests held, and Read, Write (in-capsule, or R2T
//! then H2CData) and Flush on one 64 MiB namespace of 512-byte blocks.
//!
//! What it does wrong is a [`Fault`]. The module is shared with
//! `apps/sluice/tests/hostile_target.rs` through `#[path]`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvme_spec::fabrics::{property_offset, ConnectCommand, PropertyGetCommand, PropertySetCommand};
use nvme_spec::identify::{cns, IDENTIFY_DATA_BYTES};
use nvme_spec::registers::{ControllerCapabilities, ControllerConfiguration, ControllerStatus, Version};
use nvme_spec::{
    CommandId, CompletionQueueEntry, ControllerId, IdentifyController, QueueId, Status, SubmissionQueueEntry,
};
use nvme_tcp_wire::{
    CapsuleResponse, DataHeader, DigestSettings, FatalErrorStatus, InitializeConnectionResponse, PduHeader, PduReader,
    PduWriter, ReadEvent, ReaderLimits, ReadyToTransfer, Role, TerminationRequest,
};

/// The subsystem it serves (any NQN is accepted).
pub const NQN: &str = "nqn.2026-11.io.sluice:hostile";
/// Namespace 1: 64 MiB of 512-byte blocks (the memory is taken only where written).
pub const BLOCK_BYTES: u32 = 512;
pub const NAMESPACE_BLOCKS: u64 = 131_072;
/// MAXH2CDATA announced, and the largest C2HData PDU sent.
const MAX_DATA_PDU_BYTES: u32 = 128 * 1024;
/// In-capsule data accepted on I/O queues (IOCCSZ = (64 + this) / 16).
const IN_CAPSULE_BYTES: u32 = 8192;
/// The CNTLID every admin Connect gets.
const CONTROLLER_ID: u16 = 1;

/// Which command sets the misbehaviour off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Identify CNS 02h (the Active Namespace ID list): `list-ns`, and every connect.
    NamespaceList,
    /// Get Log Page 02h (SMART / Health Information): `smart-log`.
    SmartLog,
    /// Read (I/O 02h).
    Read,
    /// Write (I/O 01h).
    Write,
}

/// What the target does instead of answering a triggering command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misdeed {
    /// Resets the connection (RST: SO_LINGER 0, then close).
    Reset,
    /// Sends a C2HTermReq with this FES and FEI, then closes.
    TermReq { status: FatalErrorStatus, info: u32 },
    /// Sends the first 10 bytes of a CapsuleResp, then closes (FIN).
    CloseMidPdu,
    /// Answers with an R2T for the command (wrong for a read).
    R2t,
    /// Sends a C2HData header announcing a 4 GiB PDU.
    HugePduLength,
    /// Sends the answer with a wrong header digest (needs header digests on).
    BadHeaderDigest,
    /// Sends read data without its data digest (needs data digests on).
    MissingDataDigest,
    /// Sends an R2T for a command ID that is not outstanding.
    R2tForUnknownCommand,
    /// Sends C2HData for the command (wrong for a write).
    C2hData,
}

/// How the target misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// None: a correct target.
    None,
    /// `Misdeed` instead of the answer to every `Trigger` command.
    On(Trigger, Misdeed),
    /// Identify Controller says NN = 1, and every Active Namespace ID list page
    /// comes back full: 1,024 valid-looking NSIDs above the one asked after.
    NamespaceListFlood,
    /// Completes every Asynchronous Event Request this many times (a namespace
    /// attribute notice, the same CID each time).
    AsyncEventCompletedTimes(u32),
    /// CAP.TO = 255 (127.5 s) and CSTS.RDY never set.
    NeverReady,
    /// Every I/O command's CapsuleResp is sent twice.
    DuplicateIoCompletions,
    /// After this many I/O commands (all connections together), every I/O
    /// command resets its connection.
    ResetAfterIo(u64),
    /// After this many I/O commands, the target answers nothing more on any
    /// connection (and keeps them open).
    SilentAfterIo(u64),
}

/// A running fake target; stops (and closes every connection) when dropped.
pub struct HostileTarget {
    pub address: SocketAddr,
    state: Arc<TargetState>,
}

struct TargetState {
    fault: Fault,
    stop: AtomicBool,
    /// Connections accepted.
    connections: AtomicU64,
    /// Times the fault went off.
    misdeeds: AtomicU64,
    /// I/O commands received.
    io_commands: AtomicU64,
    blocks: Mutex<Vec<u8>>,
}

impl HostileTarget {
    /// Listens on a free loopback port and serves until dropped.
    pub fn start(fault: Fault) -> HostileTarget {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let address = listener.local_addr().expect("local address");
        let state = Arc::new(TargetState {
            fault,
            stop: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            misdeeds: AtomicU64::new(0),
            io_commands: AtomicU64::new(0),
            blocks: Mutex::new(vec![0u8; (NAMESPACE_BLOCKS * u64::from(BLOCK_BYTES)) as usize]),
        });
        let accepting = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                accepting.connections.fetch_add(1, Ordering::SeqCst);
                let state = Arc::clone(&accepting);
                std::thread::spawn(move || Connection::new(stream, state).serve());
            }
        });
        HostileTarget { address, state }
    }

    /// `tcp://ADDR:PORT/NQN`, for the CLI.
    pub fn url(&self) -> String {
        format!("tcp://{}/{NQN}", self.address)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Times the fault went off so far.
    pub fn misdeeds(&self) -> u64 {
        self.state.misdeeds.load(Ordering::SeqCst)
    }
}

impl Drop for HostileTarget {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop.
        let _ = TcpStream::connect(self.address);
    }
}

/// What a connection does after a misdeed.
enum After {
    Continue,
    Close,
}

/// One accepted connection: one queue.
struct Connection {
    stream: TcpStream,
    state: Arc<TargetState>,
    reader: PduReader,
    writer: PduWriter,
    digests: DigestSettings,
    queue_id: QueueId,
    configuration: u32,
    /// A command whose in-capsule data is arriving.
    capsule: Option<(SubmissionQueueEntry, Vec<u8>)>,
    /// Writes waiting for H2CData: CID -> (SLBA, data so far, length).
    writes: HashMap<u16, (u64, Vec<u8>, u32)>,
    /// The write whose H2CData is arriving.
    receiving: Option<u16>,
    /// An I/O command (not Connect) is being answered.
    serving_io: bool,
    out: Vec<u8>,
}

impl Connection {
    fn new(stream: TcpStream, state: Arc<TargetState>) -> Connection {
        Connection {
            stream,
            state,
            reader: PduReader::new(Role::Controller, ReaderLimits { max_data_bytes: MAX_DATA_PDU_BYTES }),
            writer: PduWriter::new(),
            digests: DigestSettings::default(),
            queue_id: QueueId::ADMIN,
            configuration: 0,
            capsule: None,
            writes: HashMap::new(),
            receiving: None,
            serving_io: false,
            out: Vec::new(),
        }
    }

    fn serve(mut self) {
        let _ = self.stream.set_read_timeout(Some(Duration::from_millis(100)));
        let _ = self.stream.set_nodelay(true);
        let mut buffer = vec![0u8; 256 * 1024];
        while !self.state.stop.load(Ordering::SeqCst) {
            let count = match self.stream.read(&mut buffer) {
                Ok(0) => return,
                Ok(count) => count,
                Err(error)
                    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) =>
                {
                    continue
                }
                Err(_) => return,
            };
            let mut input = &buffer[..count];
            loop {
                let event = match self.reader.next_event(&mut input) {
                    Ok(Some(event)) => event,
                    Ok(None) => break,
                    Err(_) => return,
                };
                if let After::Close = self.on_event(event) {
                    return;
                }
            }
            if self.silent() {
                self.out.clear();
            }
            if !self.out.is_empty() {
                if self.stream.write_all(&self.out).is_err() {
                    return;
                }
                self.out.clear();
            }
        }
    }

    fn silent(&self) -> bool {
        matches!(self.state.fault, Fault::SilentAfterIo(count) if self.state.io_commands.load(Ordering::SeqCst) > count)
    }

    fn on_event(&mut self, event: ReadEvent<'_>) -> After {
        match event {
            ReadEvent::Header { header: PduHeader::IcReq(request), .. } => {
                self.digests = request.digests;
                let response = InitializeConnectionResponse {
                    protocol_format_version: 0,
                    controller_pdu_data_alignment: 0,
                    digests: request.digests,
                    max_h2c_data_bytes: MAX_DATA_PDU_BYTES,
                };
                self.writer.write_header(&PduHeader::IcResp(response), 0, &mut self.out);
                self.writer.set_digests(request.digests);
                self.reader.set_digests(request.digests);
                After::Continue
            }
            ReadEvent::Header { header: PduHeader::CapsuleCmd(capsule), data_length } => {
                if data_length == 0 {
                    return self.on_command(capsule.sqe, Vec::new());
                }
                self.capsule = Some((capsule.sqe, Vec::with_capacity(data_length as usize)));
                After::Continue
            }
            ReadEvent::Header { header: PduHeader::H2cData(data), .. } => {
                self.receiving = Some(data.command_id.0);
                After::Continue
            }
            ReadEvent::Header { .. } => After::Close,
            ReadEvent::Data(chunk) => {
                if let Some((_, data)) = self.capsule.as_mut() {
                    data.extend_from_slice(chunk);
                } else if let Some((_, data, _)) = self.receiving.and_then(|cid| self.writes.get_mut(&cid)) {
                    data.extend_from_slice(chunk);
                }
                After::Continue
            }
            ReadEvent::DataEnd { .. } => {
                if let Some((sqe, data)) = self.capsule.take() {
                    return self.on_command(sqe, data);
                }
                let Some(cid) = self.receiving.take() else { return After::Continue };
                let complete = self.writes.get(&cid).is_some_and(|(_, data, length)| data.len() as u32 >= *length);
                if complete {
                    if let Some((lba, data, _)) = self.writes.remove(&cid) {
                        self.store(lba, &data);
                        self.serving_io = true;
                        self.respond(cid, 0, Status::SUCCESS);
                        self.serving_io = false;
                    }
                }
                After::Continue
            }
        }
    }

    fn respond(&mut self, command_id: u16, result: u32, status: Status) {
        let cqe = CompletionQueueEntry {
            result_dw0: result,
            submission_queue_id: self.queue_id,
            command_id: CommandId(command_id),
            status,
            ..CompletionQueueEntry::default()
        };
        self.writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, &mut self.out);
        if self.serving_io && self.state.fault == Fault::DuplicateIoCompletions {
            self.writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, &mut self.out);
        }
    }

    /// C2HData with `data` (one PDU per MAXH2CDATA), then the CapsuleResp.
    fn send_data(&mut self, command_id: u16, data: &[u8]) {
        let mut offset = 0usize;
        for piece in data.chunks(MAX_DATA_PDU_BYTES as usize) {
            let header = DataHeader {
                command_id: CommandId(command_id),
                transfer_tag: 0,
                data_offset: offset as u32,
                data_length: piece.len() as u32,
                last: offset + piece.len() == data.len(),
                success: false,
            };
            self.writer.write_header(&PduHeader::C2hData(header), piece.len() as u32, &mut self.out);
            self.out.extend_from_slice(piece);
            self.writer.append_data_digest(&[piece], &mut self.out);
            offset += piece.len();
        }
        self.respond(command_id, 0, Status::SUCCESS);
    }

    fn trigger_of(&self, sqe: &SubmissionQueueEntry) -> Option<Trigger> {
        let opcode = sqe.opcode();
        if self.queue_id == QueueId::ADMIN {
            match opcode {
                0x06 if sqe.dwords[10] & 0xFF == u32::from(cns::ACTIVE_NAMESPACE_LIST) => Some(Trigger::NamespaceList),
                0x02 if sqe.dwords[10] & 0xFF == 0x02 => Some(Trigger::SmartLog),
                _ => None,
            }
        } else {
            match opcode {
                0x02 => Some(Trigger::Read),
                0x01 => Some(Trigger::Write),
                _ => None,
            }
        }
    }

    fn on_command(&mut self, sqe: SubmissionQueueEntry, data: Vec<u8>) -> After {
        let cid = sqe.command_id().0;
        if self.queue_id != QueueId::ADMIN && sqe.opcode() != 0x7F {
            let served = self.state.io_commands.fetch_add(1, Ordering::SeqCst);
            if let Fault::ResetAfterIo(count) = self.state.fault {
                if served >= count {
                    self.state.misdeeds.fetch_add(1, Ordering::SeqCst);
                    return self.misdeed(Misdeed::Reset, &sqe);
                }
            }
        }
        if let Fault::On(trigger, misdeed) = self.state.fault {
            if self.trigger_of(&sqe) == Some(trigger) {
                self.state.misdeeds.fetch_add(1, Ordering::SeqCst);
                return self.misdeed(misdeed, &sqe);
            }
        }
        match (self.queue_id == QueueId::ADMIN || sqe.opcode() == 0x7F, sqe.opcode()) {
            (_, 0x7F) => self.fabrics(&sqe),
            (true, 0x06) => self.identify(&sqe),
            (true, 0x09) => {
                // Set Features: Number of Queues grants what was asked.
                let result = if sqe.dwords[10] & 0xFF == 0x07 { sqe.dwords[11] } else { 0 };
                self.respond(cid, result, Status::SUCCESS);
            }
            (true, 0x0A | 0x18) => self.respond(cid, 0, Status::SUCCESS),
            (true, 0x02) => {
                let dwords = ((sqe.dwords[11] & 0xFFFF) << 16 | sqe.dwords[10] >> 16) + 1;
                let length = (dwords as usize * 4).min(64 * 1024);
                self.send_data(cid, &vec![0u8; length]);
            }
            (true, 0x0C) => self.async_event(cid),
            (true, _) => self.respond(cid, 0, Status::INVALID_OPCODE.with_do_not_retry()),
            (false, opcode) => {
                self.serving_io = true;
                self.io(&sqe, opcode, data);
                self.serving_io = false;
            }
        }
        After::Continue
    }

    fn fabrics(&mut self, sqe: &SubmissionQueueEntry) {
        let cid = sqe.command_id().0;
        match sqe.fabrics_command_type() {
            0x01 => {
                self.queue_id = ConnectCommand::decode(sqe).queue_id;
                let result = if self.queue_id == QueueId::ADMIN { u32::from(CONTROLLER_ID) } else { 0 };
                self.respond(cid, result, Status::SUCCESS);
            }
            0x04 => {
                let get = PropertyGetCommand::decode(sqe);
                let never_ready = self.state.fault == Fault::NeverReady;
                let value = match get.offset {
                    property_offset::CAP => ControllerCapabilities(0)
                        .with_maximum_queue_entries_zero_based(127)
                        .with_contiguous_queues_required(true)
                        .with_timeout_500ms_units(if never_ready { 255 } else { 15 })
                        .with_command_sets_supported(ControllerCapabilities::COMMAND_SET_NVM)
                        .raw(),
                    property_offset::VS => u64::from(Version::new(1, 4, 0).raw()),
                    property_offset::CC => u64::from(self.configuration),
                    property_offset::CSTS => {
                        let configuration = ControllerConfiguration(self.configuration);
                        let mut status = ControllerStatus(0).with_ready(configuration.enable() && !never_ready);
                        if configuration.shutdown_notification() != 0 {
                            status = status.with_shutdown_status(ControllerStatus::SHUTDOWN_COMPLETE);
                        }
                        u64::from(status.raw())
                    }
                    _ => 0,
                };
                let cqe = CompletionQueueEntry {
                    result_dw0: value as u32,
                    result_dw1: (value >> 32) as u32,
                    submission_queue_id: self.queue_id,
                    command_id: CommandId(cid),
                    status: Status::SUCCESS,
                    ..CompletionQueueEntry::default()
                };
                self.writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, &mut self.out);
            }
            0x00 => {
                let set = PropertySetCommand::decode(sqe);
                if set.offset == property_offset::CC {
                    self.configuration = set.value as u32;
                }
                self.respond(cid, 0, Status::SUCCESS);
            }
            _ => self.respond(cid, 0, Status::INVALID_OPCODE.with_do_not_retry()),
        }
    }

    fn identify(&mut self, sqe: &SubmissionQueueEntry) {
        let cid = sqe.command_id().0;
        let mut page = vec![0u8; IDENTIFY_DATA_BYTES];
        let nsid = sqe.namespace_id().0;
        match (sqe.dwords[10] & 0xFF) as u8 {
            cns::CONTROLLER => {
                let mut identify = IdentifyController {
                    controller_id: ControllerId(CONTROLLER_ID),
                    version: Version::new(1, 4, 0),
                    maximum_data_transfer_size: 5,
                    keep_alive_support: 1,
                    sgl_support: 1,
                    number_of_namespaces: 1,
                    io_command_capsule_size: (64 + IN_CAPSULE_BYTES) / 16,
                    io_response_capsule_size: 1,
                    submission_queue_entry_size: 0x66,
                    completion_queue_entry_size: 0x44,
                    optional_async_events_supported: 1 << 8,
                    async_event_request_limit: 3,
                    ..IdentifyController::default()
                };
                identify.serial_number[..7].copy_from_slice(b"HOSTILE");
                identify.model_number[..12].copy_from_slice(b"fake target ");
                identify.subsystem_nqn[..NQN.len()].copy_from_slice(NQN.as_bytes());
                let mut raw = [0u8; IDENTIFY_DATA_BYTES];
                identify.encode(&mut raw);
                page.copy_from_slice(&raw);
            }
            cns::NAMESPACE if nsid == 1 => {
                // NSZE, NCAP, NUSE; NLBAF 0 (one format); FLBAS 0; LBAF0: LBADS 9.
                for field in 0..3 {
                    page[field * 8..field * 8 + 8].copy_from_slice(&NAMESPACE_BLOCKS.to_le_bytes());
                }
                page[130] = 9;
            }
            cns::ACTIVE_NAMESPACE_LIST if self.state.fault == Fault::NamespaceListFlood => {
                for (index, entry) in page.chunks_exact_mut(4).enumerate() {
                    let listed = nsid.saturating_add(1 + index as u32).min(0xFFFF_FFFE);
                    entry.copy_from_slice(&listed.to_le_bytes());
                }
            }
            cns::ACTIVE_NAMESPACE_LIST if nsid < 1 => page[..4].copy_from_slice(&1u32.to_le_bytes()),
            _ => {}
        }
        self.send_data(cid, &page);
    }

    fn async_event(&mut self, cid: u16) {
        let Fault::AsyncEventCompletedTimes(times) = self.state.fault else { return };
        self.state.misdeeds.fetch_add(1, Ordering::SeqCst);
        // A namespace attribute notice: type 2h, information 0h, log page 04h.
        let notice = 0x02 | (0x04 << 16);
        for _ in 0..times {
            self.respond(cid, notice, Status::SUCCESS);
        }
    }

    fn io(&mut self, sqe: &SubmissionQueueEntry, opcode: u8, data: Vec<u8>) {
        let cid = sqe.command_id().0;
        let lba = sqe.starting_lba();
        let blocks = u64::from(sqe.block_count());
        if opcode == 0x00 {
            self.respond(cid, 0, Status::SUCCESS);
            return;
        }
        if opcode != 0x01 && opcode != 0x02 {
            self.respond(cid, 0, Status::INVALID_OPCODE.with_do_not_retry());
            return;
        }
        if lba.saturating_add(blocks) > NAMESPACE_BLOCKS {
            self.respond(cid, 0, Status::LBA_OUT_OF_RANGE.with_do_not_retry());
            return;
        }
        let start = (lba * u64::from(BLOCK_BYTES)) as usize;
        let length = (blocks * u64::from(BLOCK_BYTES)) as usize;
        if opcode == 0x02 {
            let read = self.state.blocks.lock().unwrap()[start..start + length].to_vec();
            self.send_data(cid, &read);
        } else if !data.is_empty() {
            self.store(lba, &data);
            self.respond(cid, 0, Status::SUCCESS);
        } else {
            self.writes.insert(cid, (lba, Vec::with_capacity(length), length as u32));
            let request =
                ReadyToTransfer { command_id: CommandId(cid), transfer_tag: cid, offset: 0, length: length as u32 };
            self.writer.write_header(&PduHeader::R2t(request), 0, &mut self.out);
        }
    }

    fn store(&mut self, lba: u64, data: &[u8]) {
        let start = (lba * u64::from(BLOCK_BYTES)) as usize;
        let mut blocks = self.state.blocks.lock().unwrap();
        if let Some(target) = blocks.get_mut(start..start + data.len()) {
            target.copy_from_slice(data);
        }
    }

    /// Flushes what is queued, then does `misdeed` in answer to `sqe`.
    fn misdeed(&mut self, misdeed: Misdeed, sqe: &SubmissionQueueEntry) -> After {
        let cid = sqe.command_id().0;
        let length = (u64::from(sqe.block_count()) * u64::from(BLOCK_BYTES)).min(u64::from(MAX_DATA_PDU_BYTES)) as u32;
        let mut bytes = std::mem::take(&mut self.out);
        match misdeed {
            Misdeed::Reset => {
                let _ = self.stream.write_all(&bytes);
                reset(&self.stream);
                return After::Close;
            }
            Misdeed::TermReq { status, info } => {
                let request = TerminationRequest::new(status, info, &[]);
                self.writer.write_header(&PduHeader::C2hTermReq(request), 0, &mut bytes);
                let _ = self.stream.write_all(&bytes);
                std::thread::sleep(Duration::from_millis(20));
                let _ = self.stream.shutdown(Shutdown::Both);
                return After::Close;
            }
            Misdeed::CloseMidPdu => {
                let cqe = CompletionQueueEntry { command_id: CommandId(cid), ..CompletionQueueEntry::default() };
                let mut response = Vec::new();
                self.writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, &mut response);
                bytes.extend_from_slice(&response[..10]);
                let _ = self.stream.write_all(&bytes);
                let _ = self.stream.shutdown(Shutdown::Both);
                return After::Close;
            }
            Misdeed::R2t | Misdeed::R2tForUnknownCommand => {
                let command_id = if misdeed == Misdeed::R2t { cid } else { cid ^ 0x4000 };
                let request = ReadyToTransfer { command_id: CommandId(command_id), transfer_tag: 1, offset: 0, length };
                self.writer.write_header(&PduHeader::R2t(request), 0, &mut bytes);
            }
            Misdeed::HugePduLength => {
                let mut header = [0u8; 24];
                header[0] = 0x07; // C2HData
                header[2] = 24; // HLEN
                header[3] = 24; // PDO
                header[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
                header[8..10].copy_from_slice(&cid.to_le_bytes());
                bytes.extend_from_slice(&header);
            }
            Misdeed::BadHeaderDigest => {
                let cqe = CompletionQueueEntry { command_id: CommandId(cid), ..CompletionQueueEntry::default() };
                let start = bytes.len();
                self.writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, &mut bytes);
                if let Some(last) = bytes[start..].last_mut() {
                    *last ^= 0xFF;
                }
            }
            Misdeed::MissingDataDigest | Misdeed::C2hData => {
                let header = DataHeader {
                    command_id: CommandId(cid),
                    transfer_tag: 0,
                    data_offset: 0,
                    data_length: length.max(4),
                    last: true,
                    success: false,
                };
                let mut plain = self.writer;
                if misdeed == Misdeed::MissingDataDigest {
                    plain.set_digests(DigestSettings { data: false, ..self.digests });
                }
                plain.write_header(&PduHeader::C2hData(header), header.data_length, &mut bytes);
                bytes.resize(bytes.len() + header.data_length as usize, 0);
                plain.append_data_digest(&[&vec![0u8; header.data_length as usize]], &mut bytes);
            }
        }
        let _ = self.stream.write_all(&bytes);
        After::Continue
    }
}

/// Closes `stream` with a TCP reset: SO_LINGER on with a zero timeout makes the
/// kernel send RST instead of FIN.
fn reset(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the descriptor is open (borrowed from `stream`), and the option value
    // is a valid `linger` of the size passed.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

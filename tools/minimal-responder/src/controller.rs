//! The few NVMe answers a host needs before and while it reads: ICReq, Fabrics
//! Connect and properties, the Identify pages, features, log pages of zeros,
//! and reads answered from one static buffer. No namespace, no queue, no
//! state beyond what the answers must echo (CC, the keep-alive timeout, the
//! controller id); anything else is "success".

use crate::wire::{
    self, pdu_type, read_u16, read_u32, read_u64, CommonHeader, Completion, ProtocolError,
    COMMAND_CAPSULE_HEADER_BYTES, CONTROLLER_TO_HOST_DATA_HEADER_BYTES,
};

/// The logical block size the one namespace reports and reads use.
pub const BLOCK_BYTES: usize = 4096;
/// Blocks in the namespace: 1 GiB, like the targets it is measured beside.
const NAMESPACE_BLOCKS: u64 = (1 << 30) / BLOCK_BYTES as u64;
/// Every read, log page and zero-filled answer is sent from this buffer, so
/// the longest data transfer is its size (MDTS 5 = 32 x 4 KiB says the same).
pub const STATIC_DATA_BYTES: usize = 128 * 1024;
pub static STATIC_DATA: [u8; STATIC_DATA_BYTES] = [0; STATIC_DATA_BYTES];
/// Identify data is one 4 KiB page.
const IDENTIFY_BYTES: usize = 4096;
/// NVMe 1.3: enough for a host to ask for namespace identification descriptors,
/// not new enough for it to look for I/O command set specific pages.
const VERSION: u32 = 0x0001_0300;
/// Entries per queue (0-based in CAP.MQES): the target's 1,024.
const MAX_QUEUE_ENTRIES_ZERO_BASED: u64 = 1023;

/// Where responses go: the connection's outgoing batch. Bytes are copied,
/// payloads are sent by reference to STATIC_DATA.
pub trait ResponseSink {
    fn push_bytes(&mut self, bytes: &[u8]);
    fn push_static_data(&mut self, length: usize);
}

/// What one connection (one queue) remembers.
#[derive(Debug, Default)]
pub struct QueueState {
    /// ICReq answered: only then do command capsules make sense.
    initialized: bool,
    /// Zero bytes between a C2HData header and its data for the host's HPDA.
    data_padding: usize,
    queue_id: u16,
    controller_id: u16,
    /// Entries in the submission queue (from Connect's SQSIZE, 1-based here).
    queue_entries: u32,
    submission_queue_head: u16,
    /// Controller state, meaningful on the admin queue only.
    configuration: u32,
    keep_alive_milliseconds: u32,
    /// The subsystem NQN the host connected to, echoed in Identify Controller.
    subsystem_nqn: Vec<u8>,
}

/// Hands out controller ids to admin connections, 1, 2, ... (wrapping inside
/// the valid 1..=0xffef range).
#[derive(Debug)]
pub struct ControllerIds {
    next: u16,
}

impl Default for ControllerIds {
    fn default() -> Self {
        Self { next: 1 }
    }
}

impl ControllerIds {
    fn allocate(&mut self) -> u16 {
        let id = self.next;
        self.next = if self.next >= 0xffef { 1 } else { self.next + 1 };
        id
    }
}

/// One PDU from the host: the kept bytes (`pdu`, at least the header).
pub fn handle_pdu(
    queue: &mut QueueState,
    header: CommonHeader,
    pdu: &[u8],
    controller_ids: &mut ControllerIds,
    out: &mut impl ResponseSink,
) -> Result<(), ProtocolError> {
    match header.pdu_type {
        pdu_type::INITIALIZE_CONNECTION_REQUEST => {
            if queue.initialized {
                return Err(ProtocolError::UnexpectedPdu(header.pdu_type));
            }
            let version = read_u16(pdu, 8);
            if version != 0 {
                return Err(ProtocolError::UnsupportedVersion(version));
            }
            // HPDA (byte 10): data must start at a multiple of (HPDA + 1) dwords.
            let alignment = (usize::from(pdu[10] & 0x1f) + 1) * 4;
            let data_offset = CONTROLLER_TO_HOST_DATA_HEADER_BYTES.div_ceil(alignment) * alignment;
            queue.data_padding = data_offset - CONTROLLER_TO_HOST_DATA_HEADER_BYTES;
            queue.initialized = true;
            queue.queue_entries = 128;
            out.push_bytes(&wire::initialize_connection_response());
            Ok(())
        }
        pdu_type::COMMAND_CAPSULE if queue.initialized => {
            handle_command(queue, header, pdu, controller_ids, out);
            Ok(())
        }
        // No R2T is ever sent, so there is no H2CData to expect; skip it.
        pdu_type::HOST_TO_CONTROLLER_DATA if queue.initialized => Ok(()),
        pdu_type::HOST_TO_CONTROLLER_TERMINATION => Err(ProtocolError::HostTerminated),
        other => Err(ProtocolError::UnexpectedPdu(other)),
    }
}

/// Command fields by PDU offset (8-byte common header + SQE byte offset).
const OPCODE: usize = 8;
const COMMAND_ID: usize = 10;
const NAMESPACE_ID: usize = 12;
const FABRICS_COMMAND_TYPE: usize = 12;
const SGL_LENGTH: usize = 40;
const DWORD10: usize = 48;
const DWORD11: usize = 52;
const DWORD12: usize = 56;

mod opcode {
    pub const FABRICS: u8 = 0x7f;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const IDENTIFY: u8 = 0x06;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0a;
    pub const ASYNCHRONOUS_EVENT_REQUEST: u8 = 0x0c;
    pub const READ: u8 = 0x02;
    pub const FABRICS_PROPERTY_SET: u8 = 0x00;
    pub const FABRICS_CONNECT: u8 = 0x01;
    pub const FABRICS_PROPERTY_GET: u8 = 0x04;
}

const FEATURE_NUMBER_OF_QUEUES: u8 = 0x07;
const FEATURE_KEEP_ALIVE_TIMER: u8 = 0x0f;
/// Number of Queues result: 1,024 submission and completion queues (0-based).
const NUMBER_OF_QUEUES_RESULT: u64 = (1023 << 16) | 1023;

fn handle_command(
    queue: &mut QueueState,
    header: CommonHeader,
    pdu: &[u8],
    controller_ids: &mut ControllerIds,
    out: &mut impl ResponseSink,
) {
    let command_id = read_u16(pdu, COMMAND_ID);
    let dword10 = read_u32(pdu, DWORD10);
    let dword11 = read_u32(pdu, DWORD11);
    // The host's buffer for this command: no answer sends more than that.
    let host_buffer = read_u32(pdu, SGL_LENGTH) as usize;
    let mut result = 0u64;
    let mut data_length = 0usize;
    // Identify pages are built here; every other transfer is STATIC_DATA.
    let mut identify_page: Option<Box<[u8; IDENTIFY_BYTES]>> = None;

    let opcode = pdu[OPCODE];
    if opcode == opcode::FABRICS {
        match pdu[FABRICS_COMMAND_TYPE] {
            opcode::FABRICS_CONNECT => result = u64::from(connect(queue, header, pdu, controller_ids)),
            opcode::FABRICS_PROPERTY_GET => {
                let value = property(queue, read_u32(pdu, DWORD11));
                // ATTRIB bits 0..2: 0 = 4 bytes, 1 = 8 bytes.
                result = if pdu[DWORD10] & 0x7 == 1 { value } else { value & 0xffff_ffff };
            }
            // Only CC (offset 0x14) is writable; CSTS follows it.
            opcode::FABRICS_PROPERTY_SET if read_u32(pdu, DWORD11) == 0x14 => {
                queue.configuration = read_u64(pdu, DWORD12) as u32;
            }
            _ => {}
        }
    } else if queue.queue_id == 0 {
        match opcode {
            opcode::IDENTIFY => {
                let page = identify(queue, dword10 as u8, read_u32(pdu, NAMESPACE_ID));
                data_length = IDENTIFY_BYTES.min(host_buffer);
                identify_page = Some(page);
            }
            opcode::SET_FEATURES | opcode::GET_FEATURES => match dword10 as u8 {
                FEATURE_NUMBER_OF_QUEUES => result = NUMBER_OF_QUEUES_RESULT,
                FEATURE_KEEP_ALIVE_TIMER => {
                    if opcode == opcode::SET_FEATURES {
                        queue.keep_alive_milliseconds = dword11;
                    }
                    result = u64::from(queue.keep_alive_milliseconds);
                }
                _ => {}
            },
            opcode::GET_LOG_PAGE => {
                // NUMD: NUMDL in CDW10 bits 16..31, NUMDU in CDW11 bits 0..15, 0-based dwords.
                let dwords = (u64::from(dword11 & 0xffff) << 16 | u64::from(dword10 >> 16)) + 1;
                data_length = (dwords * 4).min(STATIC_DATA_BYTES as u64) as usize;
                data_length = data_length.min(host_buffer);
            }
            // Kept by the host until an event it will never see: no answer.
            opcode::ASYNCHRONOUS_EVENT_REQUEST => {
                advance_head(queue);
                return;
            }
            // Keep Alive and everything else: success, no data.
            _ => {}
        }
    } else if opcode == opcode::READ {
        // NLB (CDW12 bits 0..15) is 0-based.
        let blocks = (read_u32(pdu, DWORD12) & 0xffff) as usize + 1;
        data_length = (blocks * BLOCK_BYTES).min(STATIC_DATA_BYTES).min(host_buffer);
    }

    if data_length > 0 {
        let data_header = wire::controller_to_host_data_header(command_id, data_length, queue.data_padding);
        out.push_bytes(&data_header);
        if queue.data_padding > 0 {
            out.push_bytes(&[0u8; 128][..queue.data_padding]);
        }
        match &identify_page {
            Some(page) => out.push_bytes(&page[..data_length]),
            None => out.push_static_data(data_length),
        }
    }
    advance_head(queue);
    let completion = Completion {
        command_id,
        submission_queue_head: queue.submission_queue_head,
        submission_queue_id: queue.queue_id,
        result,
        status: 0,
    };
    out.push_bytes(&wire::response_capsule(completion));
}

fn advance_head(queue: &mut QueueState) {
    queue.submission_queue_head = ((u32::from(queue.submission_queue_head) + 1) % queue.queue_entries.max(1)) as u16;
}

/// Connect: remembers the queue, returns the controller id for the response.
/// The admin queue (QID 0) gets a new controller; an I/O queue joins the one
/// its Connect data names.
fn connect(queue: &mut QueueState, header: CommonHeader, pdu: &[u8], controller_ids: &mut ControllerIds) -> u16 {
    queue.queue_id = read_u16(pdu, 50);
    queue.queue_entries = u32::from(read_u16(pdu, 52)) + 1;
    queue.submission_queue_head = 0;
    let data_offset = usize::from(header.data_offset).max(COMMAND_CAPSULE_HEADER_BYTES);
    // Connect data: HOSTID (16), CNTLID at 16, SUBNQN at 256, HOSTNQN at 512.
    let data = pdu.get(data_offset..).unwrap_or(&[]);
    if queue.queue_id == 0 {
        queue.keep_alive_milliseconds = read_u32(pdu, DWORD12);
        queue.controller_id = controller_ids.allocate();
        if let Some(nqn) = data.get(256..512) {
            let length = nqn.iter().position(|&byte| byte == 0).unwrap_or(nqn.len());
            queue.subsystem_nqn = nqn[..length].to_vec();
        }
    } else {
        queue.controller_id = data.get(16..18).map_or(0, |bytes| read_u16(bytes, 0));
    }
    queue.controller_id
}

/// Property Get: CAP, VS, CC, CSTS (others read as 0).
fn property(queue: &QueueState, offset: u32) -> u64 {
    let enabled = queue.configuration & 1;
    let shutdown_requested = (queue.configuration >> 14) & 0x3 != 0;
    match offset {
        // CAP: MQES, CQR (bit 16), TO 15 s (bits 24..31, 500 ms units), CSS NVM
        // (bit 37), MPSMIN = MPSMAX = 0 (4 KiB pages).
        0x00 => MAX_QUEUE_ENTRIES_ZERO_BASED | 1 << 16 | 30 << 24 | 1 << 37,
        0x08 => u64::from(VERSION),
        0x14 => u64::from(queue.configuration),
        // CSTS: RDY follows CC.EN; SHST "complete" (2) once a shutdown is asked.
        0x1c => u64::from(enabled) | if shutdown_requested { 2 << 2 } else { 0 },
        _ => 0,
    }
}

fn put_text(page: &mut [u8], offset: usize, length: usize, text: &str) {
    let field = &mut page[offset..offset + length];
    field.fill(b' ');
    let bytes = text.as_bytes();
    let used = bytes.len().min(length);
    field[..used].copy_from_slice(&bytes[..used]);
}

fn put(page: &mut [u8], offset: usize, bytes: &[u8]) {
    page[offset..offset + bytes.len()].copy_from_slice(bytes);
}

/// Identify: controller (CNS 1), namespace 1 (CNS 0), active namespace list
/// (CNS 2), namespace identification descriptors (CNS 3); zeros otherwise.
fn identify(queue: &QueueState, cns: u8, namespace_id: u32) -> Box<[u8; IDENTIFY_BYTES]> {
    let mut page = Box::new([0u8; IDENTIFY_BYTES]);
    let is_namespace_one = namespace_id == 1 || namespace_id == u32::MAX;
    match cns {
        0x01 => identify_controller(queue, &mut page[..]),
        0x00 if is_namespace_one => {
            for offset in [0, 8, 16] {
                // NSZE, NCAP, NUSE
                put(&mut page[..], offset, &NAMESPACE_BLOCKS.to_le_bytes());
            }
            // NLBAF 0 (one format), FLBAS 0; LBAF0: no metadata, LBADS 12 (4 KiB).
            page[130] = BLOCK_BYTES.trailing_zeros() as u8;
        }
        // Active namespaces above the given id: just namespace 1.
        0x02 if namespace_id < 1 => put(&mut page[..], 0, &1u32.to_le_bytes()),
        0x03 if namespace_id == 1 => {
            // One descriptor: NIDT 3 (UUID), NIDL 16, a fixed UUID.
            put(&mut page[..], 0, &[3, 16, 0, 0]);
            put(&mut page[..], 4, b"sluice-responder");
        }
        _ => {}
    }
    page
}

fn identify_controller(queue: &QueueState, page: &mut [u8]) {
    // VID and SSVID stay 0: no host quirk table matches.
    put_text(page, 4, 20, "SLUICE-RESPONDER");
    put_text(page, 24, 40, "Sluice minimal NVMe/TCP responder");
    put_text(page, 64, 8, "0.1");
    page[72] = 6; // RAB
    page[76] = 0x02; // CMIC: the subsystem may have several controllers
    page[77] = 5; // MDTS: 2^5 x 4 KiB = 128 KiB, the static buffer
    put(page, 78, &queue.controller_id.to_le_bytes());
    put(page, 80, &VERSION.to_le_bytes());
    put(page, 96, &1u32.to_le_bytes()); // CTRATT: 128-bit host identifier
    page[111] = 1; // CNTRLTYPE: I/O controller
    page[258] = 3; // ACL
    page[259] = 3; // AERL: 4 outstanding events
    page[260] = 0x03; // FRMW: slot 1 read-only, 1 slot
    page[261] = 0x04; // LPA: extended data for Get Log Page
    page[262] = 127; // ELPE
    put(page, 266, &0x0157u16.to_le_bytes()); // WCTEMP
    put(page, 268, &0x0175u16.to_le_bytes()); // CCTEMP
    put(page, 320, &10u16.to_le_bytes()); // KAS: keep alive in 1 s (10 x 100 ms) steps
    page[512] = 0x66; // SQES: 64-byte entries
    page[513] = 0x44; // CQES: 16-byte entries
    put(page, 514, &1024u16.to_le_bytes()); // MAXCMD
    put(page, 516, &1u32.to_le_bytes()); // NN: one namespace
                                         // SGLS: SGLs supported (byte aligned), keyed SGL data block (bit 2) and
                                         // SGL offset (bit 20), as SPDK's and Linux's targets report them.
    put(page, 536, &(1u32 | 1 << 2 | 1 << 20).to_le_bytes());
    let nqn = &queue.subsystem_nqn[..queue.subsystem_nqn.len().min(255)];
    put(page, 768, nqn);
    // Fabrics: IOCCSZ 4 (a bare 64-byte command, no in-capsule data on I/O
    // queues), IORCSZ 1 (a 16-byte completion), ICDOFF 0, MSDBD 1.
    put(page, 1792, &4u32.to_le_bytes());
    put(page, 1796, &1u32.to_le_bytes());
    page[1803] = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collected {
        bytes: Vec<u8>,
        static_data: Vec<usize>,
    }

    impl ResponseSink for Collected {
        fn push_bytes(&mut self, bytes: &[u8]) {
            self.bytes.extend_from_slice(bytes);
        }
        fn push_static_data(&mut self, length: usize) {
            self.static_data.push(length);
        }
    }

    fn command(opcode: u8, command_id: u16, fill: impl FnOnce(&mut [u8])) -> Vec<u8> {
        let mut pdu = vec![0u8; 72];
        pdu[..8].copy_from_slice(&[pdu_type::COMMAND_CAPSULE, 0, 72, 0, 72, 0, 0, 0]);
        pdu[OPCODE] = opcode;
        pdu[COMMAND_ID..COMMAND_ID + 2].copy_from_slice(&command_id.to_le_bytes());
        pdu[SGL_LENGTH..SGL_LENGTH + 4].copy_from_slice(&(1u32 << 20).to_le_bytes());
        fill(&mut pdu);
        pdu
    }

    fn run(queue: &mut QueueState, ids: &mut ControllerIds, pdu: &[u8]) -> Collected {
        let mut out = Collected::default();
        let header = wire::parse_common_header(pdu).unwrap();
        handle_pdu(queue, header, pdu, ids, &mut out).unwrap();
        out
    }

    fn initialized() -> QueueState {
        let mut queue = QueueState::default();
        let mut request = [0u8; 128];
        request[..8].copy_from_slice(&[0, 0, 128, 0, 128, 0, 0, 0]);
        let out = run(&mut queue, &mut ControllerIds::default(), &request);
        assert_eq!(out.bytes.len(), 128);
        queue
    }

    #[test]
    fn read_sends_data_then_response() {
        let mut queue = initialized();
        queue.queue_id = 1;
        let read = command(opcode::READ, 0x42, |pdu| pdu[DWORD12] = 1);
        let out = run(&mut queue, &mut ControllerIds::default(), &read);
        assert_eq!(out.static_data, vec![8192]);
        assert_eq!(out.bytes.len(), 24 + 24);
        assert_eq!(out.bytes[0], pdu_type::CONTROLLER_TO_HOST_DATA);
        assert_eq!(read_u32(&out.bytes, 16), 8192);
        assert_eq!(out.bytes[24], pdu_type::RESPONSE_CAPSULE);
        assert_eq!(read_u16(&out.bytes, 24 + 20), 0x42);
        assert_eq!(read_u16(&out.bytes, 24 + 18), 1);
    }

    #[test]
    fn connect_hands_out_controller_ids_and_io_queues_reuse_them() {
        let mut ids = ControllerIds::default();
        for expected in [1u16, 2] {
            let mut admin = initialized();
            let mut connect = command(opcode::FABRICS, 1, |pdu| pdu[FABRICS_COMMAND_TYPE] = opcode::FABRICS_CONNECT);
            connect.resize(72 + 1024, 0);
            connect[3] = 72;
            connect[4..8].copy_from_slice(&(72u32 + 1024).to_le_bytes());
            connect[72 + 256..72 + 256 + 5].copy_from_slice(b"nqn.x");
            let out = run(&mut admin, &mut ids, &connect);
            assert_eq!(read_u16(&out.bytes, 8), expected);
            assert_eq!(admin.subsystem_nqn, b"nqn.x");
        }
        let mut io = initialized();
        let mut connect = command(opcode::FABRICS, 1, |pdu| {
            pdu[FABRICS_COMMAND_TYPE] = opcode::FABRICS_CONNECT;
            pdu[50] = 3; // QID 3
        });
        connect.resize(72 + 1024, 0);
        connect[3] = 72;
        connect[4..8].copy_from_slice(&(72u32 + 1024).to_le_bytes());
        connect[72 + 16] = 2; // CNTLID 2
        let out = run(&mut io, &mut ids, &connect);
        assert_eq!(read_u16(&out.bytes, 8), 2);
        assert_eq!(read_u16(&out.bytes, 18), 3);
    }

    #[test]
    fn enable_and_shutdown_show_in_csts() {
        let mut queue = initialized();
        let mut ids = ControllerIds::default();
        let get = |offset: u32| {
            command(opcode::FABRICS, 2, move |pdu| {
                pdu[FABRICS_COMMAND_TYPE] = opcode::FABRICS_PROPERTY_GET;
                pdu[DWORD11..DWORD11 + 4].copy_from_slice(&offset.to_le_bytes());
            })
        };
        let set_cc = |value: u32| {
            command(opcode::FABRICS, 3, move |pdu| {
                pdu[FABRICS_COMMAND_TYPE] = opcode::FABRICS_PROPERTY_SET;
                pdu[DWORD11] = 0x14;
                pdu[DWORD12..DWORD12 + 4].copy_from_slice(&value.to_le_bytes());
            })
        };
        assert_eq!(read_u32(&run(&mut queue, &mut ids, &get(0x1c)).bytes, 8), 0);
        run(&mut queue, &mut ids, &set_cc(0x0046_0001));
        assert_eq!(read_u32(&run(&mut queue, &mut ids, &get(0x14)).bytes, 8), 0x0046_0001);
        assert_eq!(read_u32(&run(&mut queue, &mut ids, &get(0x1c)).bytes, 8), 1);
        run(&mut queue, &mut ids, &set_cc(0x0046_4001));
        assert_eq!(read_u32(&run(&mut queue, &mut ids, &get(0x1c)).bytes, 8), 1 | 8);
        assert_eq!(read_u32(&run(&mut queue, &mut ids, &get(0x08)).bytes, 8), VERSION);
    }

    #[test]
    fn identify_and_log_pages_fit_the_host_buffer() {
        let mut queue = initialized();
        let mut ids = ControllerIds::default();
        let identify = command(opcode::IDENTIFY, 4, |pdu| pdu[DWORD10] = 1);
        let out = run(&mut queue, &mut ids, &identify);
        assert_eq!(out.bytes.len(), 24 + 4096 + 24);
        assert_eq!(out.bytes[24 + 512], 0x66);
        let log = command(opcode::GET_LOG_PAGE, 5, |pdu| {
            pdu[DWORD10 + 2] = 127; // NUMDL: 128 dwords
            pdu[SGL_LENGTH..SGL_LENGTH + 4].copy_from_slice(&256u32.to_le_bytes());
        });
        assert_eq!(run(&mut queue, &mut ids, &log).static_data, vec![256]);
        let event = command(opcode::ASYNCHRONOUS_EVENT_REQUEST, 6, |_| {});
        assert!(run(&mut queue, &mut ids, &event).bytes.is_empty());
    }

    #[test]
    fn commands_before_icreq_close_the_connection() {
        let mut queue = QueueState::default();
        let read = command(opcode::READ, 1, |_| {});
        let header = wire::parse_common_header(&read).unwrap();
        let result = handle_pdu(&mut queue, header, &read, &mut ControllerIds::default(), &mut Collected::default());
        assert!(result.is_err());
    }
}

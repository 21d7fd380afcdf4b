//! The I/O loop: one thread, one io_uring (single issuer, deferred task run),
//! multishot accept, one multishot recv per connection from a shared
//! provided-buffer ring, and per loop turn at most one sendmsg per connection
//! carrying every response produced for it during that turn. One
//! io_uring_enter per turn submits the sends and waits for the next events.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::controller::{handle_pdu, ControllerIds, QueueState};
use crate::send_batch::SendBatch;
use crate::wire::{PduReassembler, ProtocolError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollMode {
    /// Block in io_uring_enter until at least one completion.
    Sleep,
    /// Never block: enter only when there is something to submit or reap.
    BusyPoll,
}

/// Submission entries: enough for one send and one re-armed recv per
/// connection in a turn (more only costs an extra enter mid-turn).
const SUBMISSION_ENTRIES: u32 = 4096;
/// Completion entries: room for every connection's recv and send of a turn,
/// so the kernel rarely has to hold completions back (overflow).
const COMPLETION_ENTRIES: u32 = 32768;
/// Provided buffers: one per recv completion until the turn gives it back, so
/// 1,024 covers a recv on each of 1,000 connections in one turn; a turn that
/// needs more ends some multishot recvs with ENOBUFS and re-arms them after.
/// The ring is used in order, so fewer buffers keep the kernel's writes and
/// our reads in fewer cache lines and pages.
const BUFFER_COUNT: u16 = 1024;
/// 16 KiB takes a one-connection burst of 200+ capsules in one completion; the
/// kernel only touches the bytes it writes, so the size costs address space.
const BUFFER_BYTES: usize = 16 * 1024;
const BUFFER_GROUP: u16 = 0;

const KIND_ACCEPT: u64 = 1;
const KIND_RECV: u64 = 2;
const KIND_SEND: u64 = 3;

fn user_data(kind: u64, slot: usize) -> u64 {
    (kind << 32) | slot as u64
}

/// Buffers registered with the kernel for multishot recv (IORING_REGISTER_PBUF_RING).
struct ProvidedBuffers {
    ring: *mut types::BufRingEntry,
    memory: Vec<u8>,
    tail: u16,
}

impl ProvidedBuffers {
    fn register(ring: &IoUring) -> io::Result<ProvidedBuffers> {
        let ring_bytes = usize::from(BUFFER_COUNT) * std::mem::size_of::<types::BufRingEntry>();
        // SAFETY: a fresh anonymous private mapping, page-aligned as the kernel
        // requires of a buffer ring; nothing else refers to it.
        let mapping = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mapping == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut buffers = ProvidedBuffers {
            ring: mapping.cast(),
            memory: vec![0; usize::from(BUFFER_COUNT) * BUFFER_BYTES],
            tail: 0,
        };
        // SAFETY: the mapping holds BUFFER_COUNT entries and is never unmapped
        // (the process ends with the loop), so the kernel may use it for good.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(mapping as u64, BUFFER_COUNT, BUFFER_GROUP, 0)?;
        }
        for id in 0..BUFFER_COUNT {
            buffers.give_back(id);
        }
        Ok(buffers)
    }

    fn get(&self, id: u16, length: usize) -> &[u8] {
        let start = usize::from(id) * BUFFER_BYTES;
        &self.memory[start..start + length.min(BUFFER_BYTES)]
    }

    /// Returns buffer `id` to the kernel at the ring's tail.
    fn give_back(&mut self, id: u16) {
        if id >= BUFFER_COUNT {
            return;
        }
        let slot = usize::from(self.tail & (BUFFER_COUNT - 1));
        let address = self.memory[usize::from(id) * BUFFER_BYTES..].as_ptr() as u64;
        // SAFETY: slot < BUFFER_COUNT entries of the mapping; the kernel reads
        // an entry only after the tail store below publishes it.
        unsafe {
            let entry = &mut *self.ring.add(slot);
            entry.set_addr(address);
            entry.set_len(BUFFER_BYTES as u32);
            entry.set_bid(id);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field overlays the first entry's reserved u16,
        // inside the mapping; AtomicU16 has u16's layout.
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }
}

struct Connection {
    socket: OwnedFd,
    reassembler: PduReassembler,
    queue: QueueState,
    /// Batches of responses in order; the front one is the send in flight
    /// when `sending`. A new response goes to the back one unless it is full.
    batches: VecDeque<Box<SendBatch>>,
    sending: bool,
    recv_armed: bool,
    closing: bool,
    shut_down: bool,
    /// Already in the turn's list of connections with something to send.
    listed: bool,
}

pub struct Server {
    ring: IoUring,
    listener: OwnedFd,
    buffers: ProvidedBuffers,
    connections: Vec<Option<Connection>>,
    free_slots: Vec<usize>,
    /// Emptied batches kept for reuse (no allocation per turn). Boxed because a
    /// batch's msghdr must not move while a send points at it.
    #[allow(clippy::vec_box)]
    spare_batches: Vec<Box<SendBatch>>,
    controller_ids: ControllerIds,
    /// Connections that got responses (or finished a send) this turn.
    to_send: Vec<usize>,
    /// Connections to look at after the turn: maybe free, maybe re-arm recv.
    to_check: Vec<usize>,
    accept_armed: bool,
    poll_mode: PollMode,
}

impl Server {
    pub fn bind(address: SocketAddrV4, poll_mode: PollMode) -> io::Result<Server> {
        let listener = listen(address)?;
        // SINGLE_ISSUER + DEFER_TASKRUN: completions are produced only when this
        // thread enters the kernel, in one batch, with no interrupting task work.
        // TASKRUN_FLAG lets a busy-polling loop see that such work is waiting.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(COMPLETION_ENTRIES)
            .build(SUBMISSION_ENTRIES)?;
        let buffers = ProvidedBuffers::register(&ring)?;
        Ok(Server {
            ring,
            listener,
            buffers,
            connections: Vec::new(),
            free_slots: Vec::new(),
            spare_batches: Vec::new(),
            controller_ids: ControllerIds::default(),
            to_send: Vec::new(),
            to_check: Vec::new(),
            accept_armed: false,
            poll_mode,
        })
    }

    pub fn run(&mut self) -> io::Result<()> {
        let mut completions: Vec<(u64, i32, u32)> = Vec::with_capacity(COMPLETION_ENTRIES as usize);
        loop {
            if !self.accept_armed {
                let accept = opcode::AcceptMulti::new(types::Fd(self.listener.as_raw_fd()))
                    .build()
                    .user_data(user_data(KIND_ACCEPT, 0));
                self.push(accept);
                self.accept_armed = true;
            }
            self.enter()?;
            completions.clear();
            completions.extend(self.ring.completion().map(|entry| (entry.user_data(), entry.result(), entry.flags())));
            for &(data, result, flags) in &completions {
                let slot = (data & 0xffff_ffff) as usize;
                match data >> 32 {
                    KIND_ACCEPT => self.on_accept(result, flags),
                    KIND_RECV => self.on_recv(slot, result, flags),
                    KIND_SEND => self.on_send(slot, result),
                    _ => {}
                }
            }
            // One send per connection for everything this turn produced.
            let mut to_send = std::mem::take(&mut self.to_send);
            for &slot in &to_send {
                self.start_send(slot);
            }
            to_send.clear();
            self.to_send = to_send;
            let mut to_check = std::mem::take(&mut self.to_check);
            for &slot in &to_check {
                self.check(slot);
            }
            to_check.clear();
            self.to_check = to_check;
        }
    }

    /// The turn's one io_uring_enter: submit, and (sleep mode) wait for an event.
    fn enter(&mut self) -> io::Result<()> {
        loop {
            let result = match self.poll_mode {
                PollMode::Sleep => self.ring.submit_and_wait(1),
                PollMode::BusyPoll => {
                    let must_enter = {
                        let mut submission = self.ring.submission();
                        submission.sync();
                        !submission.is_empty() || submission.taskrun() || submission.cq_overflow()
                    };
                    if !must_enter {
                        if self.ring.completion().is_empty() {
                            std::hint::spin_loop();
                            continue;
                        }
                        return Ok(());
                    }
                    self.ring.submit_and_wait(0)
                }
            };
            match result {
                Ok(_) => return Ok(()),
                Err(error) if matches!(error.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)) => {
                    // Interrupted or the completion queue is backed up: reap first.
                    if !self.ring.completion().is_empty() {
                        return Ok(());
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: every buffer an entry points to outlives the operation:
            // the listener and connection sockets are closed, and a connection's
            // batches dropped, only once none of its operations is in flight
            // (see `check`); provided buffers and STATIC_DATA live for good.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // Queue full: submit what is there (an extra enter, rare).
            if let Err(error) = self.ring.submit() {
                eprintln!("minimal-responder: submit: {error}");
            }
        }
    }

    fn on_accept(&mut self, result: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
        }
        if result < 0 {
            eprintln!("minimal-responder: accept: {}", io::Error::from_raw_os_error(-result));
            return;
        }
        // SAFETY: a successful accept returns a new descriptor that we own.
        let socket = unsafe { OwnedFd::from_raw_fd(result) };
        set_no_delay(&socket);
        let connection = Connection {
            socket,
            reassembler: PduReassembler::default(),
            queue: QueueState::default(),
            batches: VecDeque::new(),
            sending: false,
            recv_armed: false,
            closing: false,
            shut_down: false,
            listed: false,
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.connections[slot] = Some(connection);
                slot
            }
            None => {
                self.connections.push(Some(connection));
                self.connections.len() - 1
            }
        };
        self.arm_recv(slot);
    }

    fn arm_recv(&mut self, slot: usize) {
        let Some(connection) = self.connections[slot].as_mut() else { return };
        connection.recv_armed = true;
        let entry = opcode::RecvMulti::new(types::Fd(connection.socket.as_raw_fd()), BUFFER_GROUP)
            .build()
            .user_data(user_data(KIND_RECV, slot));
        self.push(entry);
    }

    fn on_recv(&mut self, slot: usize, result: i32, flags: u32) {
        let buffer_id = cqueue::buffer_select(flags);
        if let Some(connection) = self.connections.get_mut(slot).and_then(Option::as_mut) {
            if !cqueue::more(flags) {
                connection.recv_armed = false;
                // -ENOBUFS: buffers ran out this turn; `check` re-arms after the
                // turn gave its buffers back. Any other end closes the connection.
                if result != -libc::ENOBUFS && result <= 0 {
                    connection.closing = true;
                }
                self.to_check.push(slot);
            } else if result <= 0 {
                connection.closing = true;
                self.to_check.push(slot);
            }
            match buffer_id {
                Some(id) if result > 0 && !connection.closing => {
                    let data = self.buffers.get(id, result as usize);
                    let outcome = respond(connection, data, &mut self.spare_batches, &mut self.controller_ids);
                    if let Err(error) = outcome {
                        eprintln!("minimal-responder: closing a connection: {error:?}");
                        connection.closing = true;
                        self.to_check.push(slot);
                    } else if !connection.listed && !connection.sending {
                        connection.listed = true;
                        self.to_send.push(slot);
                    }
                }
                _ => {}
            }
        }
        if let Some(id) = buffer_id {
            self.buffers.give_back(id);
        }
    }

    fn on_send(&mut self, slot: usize, result: i32) {
        let Some(connection) = self.connections.get_mut(slot).and_then(Option::as_mut) else { return };
        connection.sending = false;
        if result < 0 {
            connection.closing = true;
        } else if let Some(batch) = connection.batches.front_mut() {
            batch.record_sent(result as usize);
        }
        if connection.closing {
            // Nothing more goes out; the connection may be free to drop now.
            self.to_check.push(slot);
        } else if !connection.listed {
            connection.listed = true;
            self.to_send.push(slot);
        }
    }

    /// Sends the front batch (or what a short send left of it), recycling
    /// finished batches first.
    fn start_send(&mut self, slot: usize) {
        let Some(connection) = self.connections[slot].as_mut() else { return };
        connection.listed = false;
        if connection.sending || connection.closing {
            return;
        }
        while connection.batches.front().is_some_and(|batch| batch.is_finished()) {
            if let Some(mut batch) = connection.batches.pop_front() {
                batch.clear();
                self.spare_batches.push(batch);
            }
        }
        let Some(batch) = connection.batches.front_mut() else { return };
        connection.sending = true;
        let message = batch.prepare();
        // MSG_NOSIGNAL: a peer gone mid-send is an error result, not SIGPIPE.
        // MSG_WAITALL: io_uring keeps sending on a stream socket until all of it
        // is queued, so short sends (handled anyway) are rare.
        let entry = opcode::SendMsg::new(types::Fd(connection.socket.as_raw_fd()), message)
            .flags((libc::MSG_NOSIGNAL | libc::MSG_WAITALL) as u32)
            .build()
            .user_data(user_data(KIND_SEND, slot));
        self.push(entry);
    }

    /// After a turn: re-arm a recv that ran out of buffers, make a closing
    /// connection's recv end (shutdown), free it once nothing is in flight.
    fn check(&mut self, slot: usize) {
        let Some(connection) = self.connections[slot].as_mut() else { return };
        if !connection.closing {
            if !connection.recv_armed {
                self.arm_recv(slot);
            }
            return;
        }
        if connection.recv_armed && !connection.shut_down {
            connection.shut_down = true;
            // SAFETY: shutdown on a socket we own; it ends the multishot recv.
            unsafe { libc::shutdown(connection.socket.as_raw_fd(), libc::SHUT_RDWR) };
        }
        if !connection.recv_armed && !connection.sending {
            if let Some(mut connection) = self.connections[slot].take() {
                for mut batch in connection.batches.drain(..) {
                    batch.clear();
                    self.spare_batches.push(batch);
                }
            }
            self.free_slots.push(slot);
        }
    }
}

/// Parses received bytes and queues the responses. A batch being sent is
/// never appended to (the kernel holds pointers into it): responses go to the
/// back batch unless that one is in flight or full.
#[allow(clippy::vec_box)] // the batches are boxed for address stability (SendBatch)
fn respond(
    connection: &mut Connection,
    data: &[u8],
    spare_batches: &mut Vec<Box<SendBatch>>,
    controller_ids: &mut ControllerIds,
) -> Result<(), ProtocolError> {
    let Connection { reassembler, queue, batches, sending, .. } = connection;
    reassembler.consume(data, |header, pdu| {
        let back_in_flight = *sending && batches.len() == 1;
        if back_in_flight || batches.back().is_none_or(|batch| batch.is_full()) {
            batches.push_back(spare_batches.pop().unwrap_or_else(SendBatch::new));
        }
        match batches.back_mut() {
            Some(batch) => handle_pdu(queue, header, pdu, controller_ids, &mut **batch),
            None => Ok(()),
        }
    })
}

fn check_os(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// A listening TCP socket on `address` (SO_REUSEADDR, a long backlog: 1,000
/// connections arrive at once).
fn listen(address: SocketAddrV4) -> io::Result<OwnedFd> {
    // SAFETY: plain socket calls on a descriptor we own; the sockaddr_in is
    // fully initialised and its size passed with it.
    unsafe {
        let fd = check_os(libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0))?;
        let socket = OwnedFd::from_raw_fd(fd);
        let one: libc::c_int = 1;
        check_os(libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        ))?;
        let mut sockaddr: libc::sockaddr_in = std::mem::zeroed();
        sockaddr.sin_family = libc::AF_INET as libc::sa_family_t;
        sockaddr.sin_port = address.port().to_be();
        sockaddr.sin_addr.s_addr = u32::from_ne_bytes(address.ip().octets());
        check_os(libc::bind(
            fd,
            (&sockaddr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        ))?;
        check_os(libc::listen(fd, 4096))?;
        Ok(socket)
    }
}

/// TCP_NODELAY: a response goes out at once, not after Nagle's wait for an ACK.
fn set_no_delay(socket: &OwnedFd) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid pointer and length on a socket we own;
    // a failure only costs latency.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
    }
}

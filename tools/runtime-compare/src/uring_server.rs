//! The "thin loop": one io_uring per thread, multishot accept, one recv always
//! armed per connection, at most one send in flight per connection, and all
//! responses produced while a send is in flight coalesced into the next send.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use io_uring::{opcode, squeue, types, IoUring};

use crate::common::{bind_reuseport, pin_to_core, set_nodelay, RequestParser, RECV_BUFFER_BYTES};

#[derive(Clone, Copy)]
pub struct UringOptions {
    pub busy_poll: bool,
    /// IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN: completions are only
    /// processed when this thread enters the kernel, cutting interrupts.
    pub defer_taskrun: bool,
    /// Receive with multishot recv from a shared provided-buffer ring instead
    /// of one single-shot recv into a per-connection buffer.
    pub buffer_ring: bool,
}

/// Provided-buffer ring: entries and buffer size for the buffer_ring variant.
const BUFFER_RING_ENTRIES: u16 = 256;
const BUFFER_RING_BUFFER_BYTES: usize = 32 * 1024;
const BUFFER_GROUP: u16 = 0;

/// A provided-buffer ring shared by all connections of one thread.
struct BufferRing {
    entries: *mut io_uring::types::BufRingEntry,
    buffers: Vec<u8>,
    tail: u16,
}

impl BufferRing {
    fn register(ring: &IoUring) -> BufferRing {
        let ring_bytes = BUFFER_RING_ENTRIES as usize * std::mem::size_of::<io_uring::types::BufRingEntry>();
        // SAFETY: anonymous private mapping; page-aligned as the kernel requires.
        let memory = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(memory, libc::MAP_FAILED);
        let mut this = BufferRing {
            entries: memory.cast(),
            buffers: vec![0; BUFFER_RING_ENTRIES as usize * BUFFER_RING_BUFFER_BYTES],
            tail: 0,
        };
        // SAFETY: the mapping lives for the thread's life (never unmapped).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(memory as u64, BUFFER_RING_ENTRIES, BUFFER_GROUP, 0)
                .expect("register buffer ring");
        }
        for id in 0..BUFFER_RING_ENTRIES {
            this.give_back(id);
        }
        this
    }

    fn buffer(&self, id: u16, length: usize) -> &[u8] {
        let start = id as usize * BUFFER_RING_BUFFER_BYTES;
        &self.buffers[start..start + length]
    }

    fn give_back(&mut self, id: u16) {
        let slot = (self.tail & (BUFFER_RING_ENTRIES - 1)) as usize;
        // SAFETY: slot < entries; the buffer address is inside `buffers`.
        unsafe {
            let entry = &mut *self.entries.add(slot);
            entry.set_addr(self.buffers.as_ptr().add(id as usize * BUFFER_RING_BUFFER_BYTES) as u64);
            entry.set_len(BUFFER_RING_BUFFER_BYTES as u32);
            entry.set_bid(id);
            self.tail = self.tail.wrapping_add(1);
            let tail = io_uring::types::BufRingEntry::tail(self.entries) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }
}

const KIND_ACCEPT: u64 = 1;
const KIND_RECV: u64 = 2;
const KIND_SEND: u64 = 3;

fn user_data(kind: u64, slot: usize) -> u64 {
    (kind << 32) | slot as u64
}

struct Connection {
    fd: libc::c_int,
    recv_buffer: Vec<u8>,
    parser: RequestParser,
    /// Responses waiting for the current send to finish.
    pending: Vec<u8>,
    /// Bytes owned by the in-flight send.
    in_flight: Vec<u8>,
    in_flight_offset: usize,
    sending: bool,
    recv_armed: bool,
    closing: bool,
}

pub fn run(address: SocketAddr, threads: usize, options: UringOptions) {
    let handles: Vec<_> = (0..threads)
        .map(|thread| std::thread::spawn(move || thread_main(address, thread, options)))
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

fn push(ring: &mut IoUring, entry: squeue::Entry) {
    // SAFETY: every buffer an entry points to lives in a Connection that is
    // only freed after its outstanding operations complete (see `maybe_free`).
    unsafe {
        while ring.submission().push(&entry).is_err() {
            ring.submit().unwrap();
        }
    }
}

fn thread_main(address: SocketAddr, thread: usize, options: UringOptions) {
    pin_to_core(thread);
    let listener = bind_reuseport(address).expect("bind");
    let mut builder = IoUring::builder();
    if options.defer_taskrun {
        // TASKRUN_FLAG makes the kernel raise IORING_SQ_TASKRUN when deferred
        // completions are waiting, so a busy loop knows when to enter.
        builder.setup_single_issuer().setup_defer_taskrun().setup_taskrun_flag();
    }
    let mut ring = builder.build(1024).expect("ring");
    let mut buffer_ring = options.buffer_ring.then(|| BufferRing::register(&ring));
    let mut connections: Vec<Option<Connection>> = Vec::new();
    let mut free_slots: Vec<usize> = Vec::new();

    push(
        &mut ring,
        opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
            .build()
            .user_data(user_data(KIND_ACCEPT, 0)),
    );

    let mut completions: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
    loop {
        if options.busy_poll {
            // Spin without a syscall unless there is something to submit or,
            // with DEFER_TASKRUN, deferred completions to run.
            let must_enter = {
                let mut submission = ring.submission();
                submission.sync();
                !submission.is_empty() || submission.taskrun() || submission.cq_overflow()
            };
            if must_enter {
                ring.submit_and_wait(0).unwrap();
            }
        } else {
            ring.submit_and_wait(1).unwrap();
        }
        completions.clear();
        completions.extend(ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        for &(data, result, flags) in &completions {
            let kind = data >> 32;
            let slot = (data & 0xffff_ffff) as usize;
            match kind {
                KIND_ACCEPT => {
                    if result >= 0 {
                        set_nodelay(result);
                        let connection = Connection {
                            fd: result,
                            recv_buffer: vec![0; RECV_BUFFER_BYTES],
                            parser: RequestParser::default(),
                            pending: Vec::with_capacity(1 << 20),
                            in_flight: Vec::with_capacity(1 << 20),
                            in_flight_offset: 0,
                            sending: false,
                            recv_armed: false,
                            closing: false,
                        };
                        let slot = match free_slots.pop() {
                            Some(slot) => {
                                connections[slot] = Some(connection);
                                slot
                            }
                            None => {
                                connections.push(Some(connection));
                                connections.len() - 1
                            }
                        };
                        if options.buffer_ring {
                            arm_recv_multi(&mut ring, &mut connections, slot);
                        } else {
                            arm_recv(&mut ring, &mut connections, slot);
                        }
                    }
                    if !io_uring::cqueue::more(flags) {
                        push(
                            &mut ring,
                            opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
                                .build()
                                .user_data(user_data(KIND_ACCEPT, 0)),
                        );
                    }
                }
                KIND_RECV if options.buffer_ring => {
                    let buffers = buffer_ring.as_mut().unwrap();
                    let connection = connections[slot].as_mut().unwrap();
                    let more = io_uring::cqueue::more(flags);
                    if result > 0 && !connection.closing {
                        let id = io_uring::cqueue::buffer_select(flags).expect("buffer id");
                        let Connection { parser, pending, .. } = connection;
                        parser.consume(buffers.buffer(id, result as usize), pending);
                        buffers.give_back(id);
                        if !more {
                            connection.recv_armed = false;
                            arm_recv_multi(&mut ring, &mut connections, slot);
                        }
                        start_send(&mut ring, &mut connections, slot);
                    } else {
                        if let Some(id) = io_uring::cqueue::buffer_select(flags) {
                            buffers.give_back(id);
                        }
                        if !more {
                            connection.recv_armed = false;
                            if result == -libc::ENOBUFS && !connection.closing {
                                arm_recv_multi(&mut ring, &mut connections, slot);
                            } else {
                                connection.closing = true;
                            }
                        } else if result <= 0 {
                            connection.closing = true;
                        }
                    }
                }
                KIND_RECV => {
                    let connection = connections[slot].as_mut().unwrap();
                    connection.recv_armed = false;
                    if result <= 0 || connection.closing {
                        connection.closing = true;
                    } else {
                        let n = result as usize;
                        let Connection { recv_buffer, parser, pending, .. } = connection;
                        parser.consume(&recv_buffer[..n], pending);
                        arm_recv(&mut ring, &mut connections, slot);
                        start_send(&mut ring, &mut connections, slot);
                    }
                }
                KIND_SEND => {
                    let connection = connections[slot].as_mut().unwrap();
                    connection.sending = false;
                    if result <= 0 {
                        connection.closing = true;
                    } else {
                        connection.in_flight_offset += result as usize;
                        if connection.in_flight_offset == connection.in_flight.len() {
                            connection.in_flight.clear();
                            connection.in_flight_offset = 0;
                        }
                        start_send(&mut ring, &mut connections, slot);
                    }
                }
                _ => unreachable!(),
            }
            maybe_free(&mut connections, &mut free_slots, slot, kind);
        }
        if options.busy_poll {
            std::hint::spin_loop();
        }
    }
}

fn maybe_free(
    connections: &mut [Option<Connection>],
    free_slots: &mut Vec<usize>,
    slot: usize,
    kind: u64,
) {
    if kind == KIND_ACCEPT {
        return;
    }
    let Some(connection) = connections[slot].as_ref() else { return };
    if connection.closing && !connection.sending && !connection.recv_armed {
        // SAFETY: no operation references this fd or its buffers any more.
        unsafe { libc::close(connection.fd) };
        connections[slot] = None;
        free_slots.push(slot);
    }
}

fn arm_recv(ring: &mut IoUring, connections: &mut [Option<Connection>], slot: usize) {
    let connection = connections[slot].as_mut().unwrap();
    connection.recv_armed = true;
    let entry = opcode::Recv::new(
        types::Fd(connection.fd),
        connection.recv_buffer.as_mut_ptr(),
        connection.recv_buffer.len() as u32,
    )
    .build()
    .user_data(user_data(KIND_RECV, slot));
    push(ring, entry);
}

fn arm_recv_multi(ring: &mut IoUring, connections: &mut [Option<Connection>], slot: usize) {
    let connection = connections[slot].as_mut().unwrap();
    connection.recv_armed = true;
    let entry = opcode::RecvMulti::new(types::Fd(connection.fd), BUFFER_GROUP)
        .build()
        .user_data(user_data(KIND_RECV, slot));
    push(ring, entry);
}

fn start_send(ring: &mut IoUring, connections: &mut [Option<Connection>], slot: usize) {
    let connection = connections[slot].as_mut().unwrap();
    if connection.sending || connection.closing {
        return;
    }
    if connection.in_flight.is_empty() {
        if connection.pending.is_empty() {
            return;
        }
        std::mem::swap(&mut connection.in_flight, &mut connection.pending);
    }
    connection.sending = true;
    let remaining = &connection.in_flight[connection.in_flight_offset..];
    let entry = opcode::Send::new(types::Fd(connection.fd), remaining.as_ptr(), remaining.len() as u32)
        .build()
        .user_data(user_data(KIND_SEND, slot));
    push(ring, entry);
}

//! Per-connection work of the event loop: receive, send, drive the handler,
//! timers, polls, and the close sequence that waits for outstanding
//! operations before freeing what they point at.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

use io_uring::{opcode, types};

use crate::mapped_buffer::MappedBuffer;
use crate::receive_pool::RECEIVE_BUFFER_GROUP;
use crate::ring_core::{Outcome, ReceiveBuffers, Released, RingCore, MAX_SPARE_BUFFERS};
use crate::send::SendState;
use crate::user_data::{OpKind, UserData};
use crate::{CloseReason, ConnectionHandler, ListenerId};

/// One accepted socket and its handler.
pub struct Connection<H: ConnectionHandler> {
    stream: TcpStream,
    handler: H,
    /// The listener it was accepted through: removing that listener closes it.
    /// None for a connection the owner opened (a host's).
    listener: Option<ListenerId>,
    /// With a buffer per connection (`ReceiveBuffers::PerConnection`), the kernel
    /// writes received bytes here; boxed, so moving the Connection (the slab's Vec
    /// may grow) never moves the buffer. `None` when the ring's shared pool is used.
    recv_buffer: Option<MappedBuffer>,
    /// A receive is armed (single-shot, or multishot until its final completion).
    recv_in_flight: bool,
    /// Boxed for the same reason: the kernel reads its msghdr and iovecs.
    send: Box<SendState<H::Batch>>,
    send_in_flight: bool,
    /// `handler.next_deadline()` as of the last call into the handler.
    deadline: Option<Instant>,
    /// The earliest entry the ring's timer queue holds for this connection: a
    /// deadline later than it needs no new entry (the entry re-reads `deadline`).
    scheduled: Option<Instant>,
    /// `handler.has_pending_work()` as of the last call into the handler.
    pending_work: bool,
    /// `handler.awaits_storage()` as of the last call into the handler.
    awaits_storage: bool,
    /// The index is in the ring's `pending_list` (at most once).
    listed_pending: bool,
    /// Set once closing has begun; the reason `on_closed` will get.
    closing: Option<CloseReason>,
    /// Set once the owner asked for the socket back (`ClientRing::detach`): no new
    /// operations, the receive is cancelled, a send in flight finishes.
    detaching: bool,
}

impl<H: ConnectionHandler> Connection<H> {
    /// Neither closing nor being detached: the handler may be driven.
    fn is_active(&self) -> bool {
        self.closing.is_none() && !self.detaching
    }

    /// The abnormal exit path (operations may still be in flight): shut the
    /// socket down so the peer sees the end at once, close the descriptor (the
    /// ring keeps its own reference until its operations are cancelled), drop
    /// the handler without `on_closed`, and leak the buffers the kernel may
    /// still touch.
    pub(crate) fn abandon(self) {
        let Connection { stream, handler, recv_buffer, send, .. } = self;
        let _ = stream.shutdown(Shutdown::Both);
        drop(stream);
        drop(handler);
        std::mem::forget(recv_buffer);
        std::mem::forget(send);
    }
}

/// Errors that only mean the peer went away.
fn is_normal_disconnect(kind: io::ErrorKind) -> bool {
    matches!(kind, io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted)
}

impl<H: ConnectionHandler> RingCore<H> {
    pub(crate) fn add_connection(
        &mut self,
        stream: TcpStream,
        handler: H,
        listener: Option<ListenerId>,
        now: Instant,
    ) -> io::Result<(u32, u32)> {
        let recv_buffer = match &mut self.receive {
            ReceiveBuffers::PerConnection { bytes, spares } => match spares.pop() {
                Some(spare) => Some(spare),
                None => match MappedBuffer::new(*bytes) {
                    Ok(buffer) => Some(buffer),
                    Err(error) => {
                        // Out of address space or mappings (vm.max_map_count): this
                        // connection ends, the others carry on.
                        let mut handler = handler;
                        drop(stream);
                        handler.on_closed(CloseReason::Error(error.kind()));
                        return Err(error);
                    }
                },
            },
            ReceiveBuffers::Shared(_) => None,
        };
        let connection = Connection {
            stream,
            handler,
            listener,
            recv_buffer,
            recv_in_flight: false,
            send: SendState::new(),
            send_in_flight: false,
            deadline: None,
            scheduled: None,
            pending_work: false,
            awaits_storage: false,
            listed_pending: false,
            closing: None,
            detaching: false,
        };
        let (index, generation) = self.connections.insert(connection);
        self.arm_recv(index, generation);
        // A handler may have something to say before the peer speaks.
        self.drive(index, generation, now);
        Ok((index, generation))
    }

    fn arm_recv(&mut self, index: u32, generation: u32) {
        let Some(connection) = self.connections.get_mut(index, generation) else { return };
        connection.recv_in_flight = true;
        let fd = types::Fd(connection.stream.as_raw_fd());
        let entry = match connection.recv_buffer.as_mut() {
            Some(buffer) => opcode::Recv::new(fd, buffer.as_mut_ptr(), buffer.len() as u32).build(),
            None => opcode::RecvMulti::new(fd, RECEIVE_BUFFER_GROUP).build(),
        };
        let entry = entry.user_data(UserData::new(OpKind::Recv, generation, index).encode());
        // SAFETY: a per-connection receive buffer is boxed and the connection (with
        // it) is only removed from the slab once `recv_in_flight` is false again; a
        // multishot receive writes into the ring's pool, which is freed only with no
        // operation outstanding (RingCore's Drop).
        unsafe { self.push(&entry) };
    }

    /// A receive found the pool empty: provide more buffers, if any are left.
    fn grow_receive_pool(&mut self) {
        if let ReceiveBuffers::Shared(pool) = &mut self.receive {
            if let Some(provided) = pool.grow() {
                tracing::debug!(thread = self.thread, provided, "receive buffer pool grown");
            }
        }
    }

    /// Gives a pool buffer a completion carried back to the pool.
    fn give_back_receive_buffer(&mut self, flags: u32) {
        if let (ReceiveBuffers::Shared(pool), Some(id)) = (&mut self.receive, io_uring::cqueue::buffer_select(flags)) {
            pool.give_back(id);
        }
    }

    fn submit_send(&mut self, index: u32, generation: u32) {
        let Some(connection) = self.connections.get_mut(index, generation) else { return };
        connection.send_in_flight = true;
        let header = connection.send.prepare();
        let entry = opcode::SendMsg::new(types::Fd(connection.stream.as_raw_fd()), header)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(UserData::new(OpKind::Send, generation, index).encode());
        // SAFETY: `header`, the iovecs and the batch they describe live in the
        // boxed SendState, which is neither touched nor freed until the send's
        // completion clears `send_in_flight`.
        unsafe { self.push(&entry) };
    }

    /// A receive completed: single-shot into the connection's buffer, or one of a
    /// multishot receive's completions (`IORING_CQE_F_MORE` while it stays armed)
    /// into a pool buffer, which goes back to the pool before this returns.
    pub(crate) fn on_recv_completion(&mut self, index: u32, generation: u32, result: i32, flags: u32, now: Instant) {
        let final_completion = !io_uring::cqueue::more(flags);
        if final_completion {
            self.outstanding_ops -= 1;
        }
        let Some(connection) = self.connections.get_mut(index, generation) else {
            tracing::error!(index, "receive completion for a freed slot");
            self.give_back_receive_buffer(flags);
            return;
        };
        if final_completion {
            connection.recv_in_flight = false;
        }
        let received = match usize::try_from(result) {
            Ok(length) if length > 0 => match (&connection.recv_buffer, &self.receive) {
                (Some(buffer), _) => buffer.get(..length),
                (None, ReceiveBuffers::Shared(pool)) => {
                    io_uring::cqueue::buffer_select(flags).and_then(|id| pool.received(id, length))
                }
                (None, ReceiveBuffers::PerConnection { .. }) => None,
            },
            _ => None,
        };
        if connection.closing.is_some() {
            self.give_back_receive_buffer(flags);
            self.finish_close_if_idle(index, generation);
            return;
        }
        if connection.detaching {
            // Bytes that raced the cancellation still belong to the handler; an
            // error is left for the owner to meet on the socket itself.
            if let Some(data) = received {
                if !connection.handler.wants_close() {
                    connection.handler.on_receive(data, now);
                }
            }
            self.give_back_receive_buffer(flags);
            self.finish_detach_if_idle(index, generation);
            return;
        }
        if result > 0 {
            let Some(data) = received else {
                // A completion naming no buffer of ours: the kernel broke the
                // contract; drop the connection rather than guess.
                tracing::error!(thread = self.thread, result, flags, "receive completion without its buffer");
                self.give_back_receive_buffer(flags);
                self.begin_close(index, generation, CloseReason::Error(io::ErrorKind::InvalidData));
                return;
            };
            // Once the handler wants to close, further bytes are discarded:
            // the runtime is only flushing what the handler still sends.
            if !connection.handler.wants_close() {
                connection.handler.on_receive(data, now);
                // Mid-message, the peer may hold its next segment until our ACK
                // (Nagle): acknowledge now rather than in 40 ms. A failure only
                // means the ACK goes on its usual timer.
                if connection.handler.awaits_rest_of_message() {
                    let _ = crate::sys::set_quick_ack(connection.stream.as_raw_fd());
                }
            }
            self.give_back_receive_buffer(flags);
            if final_completion {
                self.arm_recv(index, generation);
            }
            self.drive(index, generation, now);
        } else if result == 0 {
            self.begin_close(index, generation, CloseReason::PeerClosed);
        } else {
            self.give_back_receive_buffer(flags);
            if -result == libc::ENOBUFS {
                self.grow_receive_pool();
            }
            match -result {
                // ENOBUFS: every pool buffer was taken when bytes arrived; they are
                // back (and the pool has grown) by the time this re-armed receive
                // is submitted.
                libc::EINTR | libc::EAGAIN | libc::ENOBUFS if final_completion => self.arm_recv(index, generation),
                libc::EINTR | libc::EAGAIN | libc::ENOBUFS => {}
                errno => self.close_on_error(index, generation, errno, "receive"),
            }
        }
    }

    pub(crate) fn on_send_completion(&mut self, index: u32, generation: u32, result: i32, now: Instant) {
        self.outstanding_ops -= 1;
        let Some(connection) = self.connections.get_mut(index, generation) else {
            tracing::error!(index, "send completion for a freed slot");
            return;
        };
        connection.send_in_flight = false;
        if connection.closing.is_some() {
            self.finish_close_if_idle(index, generation);
            return;
        }
        if connection.detaching {
            // A send is never cancelled halfway (the peer would see half a PDU):
            // finish it, then hand the socket over. After a failure the rest of
            // the batch is dropped; the owner meets the error on the socket.
            if result > 0 {
                connection.send.advance(result as usize);
                if !connection.send.is_done() {
                    self.submit_send(index, generation);
                    return;
                }
                if let Some(batch) = connection.send.take_batch() {
                    connection.handler.on_sent(batch, now);
                }
            } else if matches!(-result, libc::EINTR | libc::EAGAIN | libc::ENOBUFS) {
                self.submit_send(index, generation);
                return;
            }
            self.finish_detach_if_idle(index, generation);
            return;
        }
        if result > 0 {
            connection.send.advance(result as usize);
            if connection.send.is_done() {
                if let Some(batch) = connection.send.take_batch() {
                    connection.handler.on_sent(batch, now);
                }
                self.drive(index, generation, now);
            } else {
                // Partial send: resubmit from where the kernel stopped.
                self.submit_send(index, generation);
            }
        } else if result == 0 {
            self.close_on_error(index, generation, libc::EPIPE, "send");
        } else {
            match -result {
                libc::EINTR | libc::EAGAIN | libc::ENOBUFS => self.submit_send(index, generation),
                errno => self.close_on_error(index, generation, errno, "send"),
            }
        }
    }

    fn close_on_error(&mut self, index: u32, generation: u32, errno: i32, operation: &'static str) {
        let error = io::Error::from_raw_os_error(errno);
        let kind = error.kind();
        if is_normal_disconnect(kind) {
            tracing::debug!(thread = self.thread, %error, operation, "connection closed by peer");
        } else {
            tracing::info!(thread = self.thread, %error, operation, "connection failed");
        }
        self.begin_close(index, generation, CloseReason::Error(kind));
    }

    /// After any call into the handler: hand it the next send if none is in
    /// flight, close if it asked to and nothing is left to send, and refresh the
    /// cached deadline and pending-work flag.
    pub(crate) fn drive(&mut self, index: u32, generation: u32, now: Instant) {
        loop {
            let Some(connection) = self.connections.get_mut(index, generation) else { return };
            if !connection.is_active() {
                return;
            }
            if !connection.send_in_flight {
                if let Some(batch) = connection.handler.take_send() {
                    connection.send.load(batch);
                    if connection.send.is_done() {
                        // Nothing to write: hand it straight back, ask again.
                        if let Some(batch) = connection.send.take_batch() {
                            connection.handler.on_sent(batch, now);
                        }
                        continue;
                    }
                    self.submit_send(index, generation);
                } else if connection.handler.wants_close() {
                    self.begin_close(index, generation, CloseReason::Requested);
                    return;
                }
            }
            break;
        }
        self.refresh_handler_state(index, generation);
    }

    fn refresh_handler_state(&mut self, index: u32, generation: u32) {
        let Some(connection) = self.connections.get_mut(index, generation) else { return };
        connection.deadline = connection.handler.next_deadline();
        let crate::HandlerActivity { pending_work, awaits_storage } = connection.handler.activity();
        let deadline = connection.deadline;
        let was_pending = std::mem::replace(&mut connection.pending_work, pending_work);
        match (was_pending, pending_work) {
            (false, true) => self.pending_work_connections += 1,
            (true, false) => self.pending_work_connections -= 1,
            _ => {}
        }
        match (std::mem::replace(&mut connection.awaits_storage, awaits_storage), awaits_storage) {
            (false, true) => self.storage_waiting_connections += 1,
            (true, false) => self.storage_waiting_connections -= 1,
            _ => {}
        }
        if pending_work && !connection.listed_pending {
            connection.listed_pending = true;
            self.pending_list.push(index);
        }
        if let Some(deadline) = deadline {
            // Written out rather than Option::is_none_or, which is newer than the
            // workspace's rust-version (1.80).
            let earlier = match connection.scheduled {
                Some(scheduled) => deadline < scheduled,
                None => true,
            };
            if earlier {
                connection.scheduled = Some(deadline);
                self.timers.schedule(deadline, index, generation);
            }
        }
    }

    /// Rebuilds the timer queue from the connections' deadlines, dropping stale
    /// entries (see `TIMER_ENTRIES_PER_CONNECTION_BEFORE_REBUILD`).
    pub(crate) fn rebuild_timers(&mut self) {
        self.timers.clear();
        for index in 0..self.connections.index_bound() {
            let Some((connection, generation)) = self.connections.get_mut_at(index) else { continue };
            connection.scheduled = connection.deadline;
            if let Some(deadline) = connection.deadline {
                self.timers.schedule(deadline, index, generation);
            }
        }
    }

    /// Polls the connections that reported pending work, and only those, so a loop
    /// turn costs the pending connections rather than all of them. A connection
    /// still pending afterwards stays listed for the next round. The two lists
    /// trade places and keep their capacity: steady state allocates nothing.
    pub(crate) fn poll_pending_connections(&mut self, now: Instant) {
        let mut listed = std::mem::take(&mut self.pending_scratch);
        std::mem::swap(&mut listed, &mut self.pending_list);
        for &index in &listed {
            if let Some((connection, _)) = self.connections.get_mut_at(index) {
                connection.listed_pending = false;
            }
        }
        for &index in &listed {
            self.poll_connection(index, false, now);
        }
        for &index in &listed {
            if let Some((connection, _)) = self.connections.get_mut_at(index) {
                if connection.pending_work && !connection.listed_pending {
                    connection.listed_pending = true;
                    self.pending_list.push(index);
                }
            }
        }
        listed.clear();
        self.pending_scratch = listed;
    }

    /// Polls the connection at `index` if it reported pending work, or always when
    /// `storage_woke`: a storage completion that wakes the thread leaves its
    /// connection with nothing pending until it is polled.
    pub(crate) fn poll_connection(&mut self, index: u32, storage_woke: bool, now: Instant) {
        let Some((connection, generation)) = self.connections.get_mut_at(index) else { return };
        if !(connection.pending_work || storage_woke) || !connection.is_active() {
            return;
        }
        connection.handler.poll(now);
        self.drive(index, generation, now);
    }

    /// A timer entry for `at` came due: fires the connection's timer if its deadline
    /// has passed, or schedules its later deadline. Skips entries of closed
    /// connections and entries an earlier one superseded.
    pub(crate) fn fire_timer_if_due(&mut self, at: Instant, index: u32, generation: u32, now: Instant) {
        let Some(connection) = self.connections.get_mut(index, generation) else { return };
        if connection.scheduled != Some(at) {
            return;
        }
        connection.scheduled = None;
        if !connection.is_active() {
            return;
        }
        if connection.deadline.is_some_and(|deadline| deadline <= now) {
            connection.handler.on_timer(now);
            self.drive(index, generation, now);
        } else {
            // Moved later since it was scheduled: schedule where it is now.
            self.refresh_handler_state(index, generation);
        }
    }

    /// The listener of the connection at `index`, if one is there and not
    /// already closing.
    pub(crate) fn connection_listener(&mut self, index: u32) -> Option<ListenerId> {
        let (connection, _) = self.connections.get_mut_at(index)?;
        connection.closing.is_none().then_some(connection.listener).flatten()
    }

    /// Starts closing the connection at `index` (whatever its generation).
    pub(crate) fn close_connection_at(&mut self, index: u32, reason: CloseReason) {
        if let Some((_, generation)) = self.connections.get_mut_at(index) {
            self.begin_close(index, generation, reason);
        }
    }

    /// Stops the connection's traffic and cancels its operations; the slot is
    /// freed (and `on_closed` called) once no operation points into it.
    fn begin_close(&mut self, index: u32, generation: u32, reason: CloseReason) {
        let Some(connection) = self.connections.get_mut(index, generation) else { return };
        if connection.closing.is_some() {
            return;
        }
        connection.closing = Some(reason);
        tracing::debug!(thread = self.thread, ?reason, "closing connection");
        // After wants_close everything has been sent: shut down only the write
        // side, so the FIN follows the data. Otherwise stop both directions so
        // in-flight operations finish at once.
        let how = if reason == CloseReason::Requested { Shutdown::Write } else { Shutdown::Both };
        if let Err(error) = connection.stream.shutdown(how) {
            tracing::debug!(%error, "shutdown on a closing socket failed");
        }
        let (recv_in_flight, send_in_flight) = (connection.recv_in_flight, connection.send_in_flight);
        if connection.pending_work {
            connection.pending_work = false;
            self.pending_work_connections -= 1;
        }
        if connection.awaits_storage {
            connection.awaits_storage = false;
            self.storage_waiting_connections -= 1;
        }
        if recv_in_flight {
            self.cancel(UserData::new(OpKind::Recv, generation, index));
        }
        if send_in_flight {
            self.cancel(UserData::new(OpKind::Send, generation, index));
        }
        self.finish_close_if_idle(index, generation);
    }

    fn finish_close_if_idle(&mut self, index: u32, generation: u32) {
        let Some(connection) = self.connections.get_mut(index, generation) else { return };
        let Some(reason) = connection.closing else { return };
        if connection.recv_in_flight || connection.send_in_flight {
            return;
        }
        let Some(connection) = self.connections.remove(index) else { return };
        let Connection { stream, mut handler, recv_buffer, mut send, .. } = connection;
        // No operation points into this connection any more: drop an unsent
        // batch, close the socket, then tell the handler.
        drop(send.take_batch());
        drop(stream);
        handler.on_closed(reason);
        match self.released.as_mut() {
            Some(released) => released.push(Released { index, generation, handler, outcome: Outcome::Closed(reason) }),
            None => {
                // Kept while what it started still runs (see `ConnectionHandler::drain`).
                if !handler.drain(Instant::now()) {
                    self.draining.push(handler);
                    self.draining_pending_work |= self.draining.last().is_some_and(ConnectionHandler::has_pending_work);
                    let deadline = self.draining.last().and_then(ConnectionHandler::next_deadline);
                    self.draining_deadline = deadline.into_iter().chain(self.draining_deadline).min();
                }
            }
        }
        self.recycle_recv_buffer(recv_buffer);
    }

    /// Keeps a closed connection's own receive buffer for the next connection.
    fn recycle_recv_buffer(&mut self, recv_buffer: Option<MappedBuffer>) {
        if let (ReceiveBuffers::PerConnection { bytes, spares }, Some(mut buffer)) = (&mut self.receive, recv_buffer) {
            if spares.len() < MAX_SPARE_BUFFERS && buffer.len() == *bytes {
                // Its pages go back to the kernel: a spare costs no memory.
                buffer.release_pages();
                spares.push(buffer);
            }
        }
    }
}

impl<H: ConnectionHandler> RingCore<H> {
    /// Starts handing the connection's socket and handler back to the owner
    /// (only rings with a `released` list do that): no new operations, the
    /// receive is cancelled, a send in flight runs to its end. Returns false when
    /// there is no such connection or it is already closing.
    pub(crate) fn begin_detach(&mut self, index: u32, generation: u32) -> bool {
        let Some(connection) = self.connections.get_mut(index, generation) else { return false };
        if connection.closing.is_some() {
            return false;
        }
        if connection.detaching {
            return true;
        }
        connection.detaching = true;
        let recv_in_flight = connection.recv_in_flight;
        if connection.pending_work {
            connection.pending_work = false;
            self.pending_work_connections -= 1;
        }
        if connection.awaits_storage {
            connection.awaits_storage = false;
            self.storage_waiting_connections -= 1;
        }
        if recv_in_flight {
            self.cancel(UserData::new(OpKind::Recv, generation, index));
        }
        self.finish_detach_if_idle(index, generation);
        true
    }

    fn finish_detach_if_idle(&mut self, index: u32, generation: u32) {
        let Some(connection) = self.connections.get_mut(index, generation) else { return };
        if !connection.detaching || connection.recv_in_flight || connection.send_in_flight {
            return;
        }
        let Some(connection) = self.connections.remove(index) else { return };
        let Connection { stream, handler, recv_buffer, mut send, .. } = connection;
        drop(send.take_batch());
        self.recycle_recv_buffer(recv_buffer);
        let released = Released { index, generation, handler, outcome: Outcome::Detached(stream) };
        match self.released.as_mut() {
            Some(list) => list.push(released),
            // A ring that cannot hand sockets back closes them.
            None => drop(released),
        }
    }
}

impl<H: ConnectionHandler> RingCore<H> {
    /// The handler of a connection still on the ring (closing or not).
    pub(crate) fn handler_mut(&mut self, index: u32, generation: u32) -> Option<&mut H> {
        self.connections.get_mut(index, generation).map(|connection| &mut connection.handler)
    }
}

impl<H: ConnectionHandler> RingCore<H> {
    /// Starts closing the connection if `generation` is still the one at `index`.
    pub(crate) fn close_connection_at_generation(&mut self, index: u32, generation: u32, reason: CloseReason) {
        self.begin_close(index, generation, reason);
    }
}

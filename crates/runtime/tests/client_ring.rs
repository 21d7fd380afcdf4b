//! The caller-driven ring: connections the owner opened, echoed through a plain
//! std server thread; sends, receives, detach back to a blocking socket, close,
//! timers, and the owner-thread check.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use runtime::{
    ClientRing, ClientRingConfig, CloseReason, ConnectionHandler, PollMode, RuntimeError, SendParts, SendSource,
};

struct Bytes(Vec<u8>);

impl SendSource for Bytes {
    fn parts<'a>(&'a self, out: &mut SendParts<'a>) {
        out.bytes(&self.0);
    }
    fn total_len(&self) -> usize {
        self.0.len()
    }
}

/// Sends what it is told, keeps what it receives.
#[derive(Default)]
struct Collector {
    to_send: Vec<u8>,
    received: Vec<u8>,
    sent_batches: usize,
    closed: Option<CloseReason>,
    deadline: Option<Instant>,
    timers_fired: usize,
}

impl ConnectionHandler for Collector {
    type Batch = Bytes;
    fn on_receive(&mut self, data: &[u8], _now: Instant) {
        self.received.extend_from_slice(data);
    }
    fn take_send(&mut self) -> Option<Bytes> {
        (!self.to_send.is_empty()).then(|| Bytes(std::mem::take(&mut self.to_send)))
    }
    fn on_sent(&mut self, _batch: Bytes, _now: Instant) {
        self.sent_batches += 1;
    }
    fn on_timer(&mut self, now: Instant) {
        if self.deadline.is_some_and(|deadline| deadline <= now) {
            self.deadline = None;
            self.timers_fired += 1;
        }
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.deadline
    }
    fn wants_close(&self) -> bool {
        false
    }
    fn on_closed(&mut self, reason: CloseReason) {
        self.closed = Some(reason);
    }
}

/// A server thread that echoes everything on one connection until it closes.
fn echo_server() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buffer = [0u8; 65536];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(count) => {
                    if stream.write_all(&buffer[..count]).is_err() {
                        return;
                    }
                }
            }
        }
    });
    (address, server)
}

fn turn_until(ring: &mut ClientRing<Collector>, mut done: impl FnMut(&mut ClientRing<Collector>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(ring) {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        ring.turn(Some(Instant::now() + Duration::from_millis(100))).unwrap();
    }
}

fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length).map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn echoes_through_the_ring_then_detaches_to_a_blocking_socket() {
    for poll_mode in [PollMode::Sleep, PollMode::BusyPoll, PollMode::ADAPTIVE] {
        let (address, server) = echo_server();
        let config =
            ClientRingConfig { poll_mode, recv_buffer_bytes: 4096, shared_receive_buffers: 0, ring_entries: 16 };
        let mut ring = ClientRing::new(config).unwrap();
        let stream = TcpStream::connect(address).unwrap();
        let token = ring.add(stream, Collector::default()).unwrap();
        // Larger than the receive buffer: arrives in many receives.
        let message = pattern(300_000, 7);
        ring.handler_mut(token).unwrap().to_send = message.clone();
        ring.flush(token).unwrap();
        turn_until(&mut ring, |ring| ring.handler_mut(token).unwrap().received.len() >= message.len());
        assert_eq!(ring.handler_mut(token).unwrap().received, message);
        assert_eq!(ring.handler_mut(token).unwrap().sent_batches, 1);

        let (mut stream, handler) = ring.detach(token).unwrap();
        assert!(handler.closed.is_none(), "a detached connection is not closed");
        assert_eq!(ring.connection_count(), 0);
        assert!(ring.handler_mut(token).is_none(), "the token is stale after detach");
        // The socket works as a plain blocking one: nothing was lost or left armed.
        stream.write_all(b"after detach").unwrap();
        let mut echoed = [0u8; 12];
        stream.read_exact(&mut echoed).unwrap();
        assert_eq!(&echoed, b"after detach");
        drop(stream);
        server.join().unwrap();
    }
}

#[test]
fn a_peer_that_closes_hands_the_handler_back() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.write_all(b"bye").unwrap();
    });
    let mut ring = ClientRing::new(ClientRingConfig::default()).unwrap();
    let token = ring.add(TcpStream::connect(address).unwrap(), Collector::default()).unwrap();
    server.join().unwrap();
    let mut closed = None;
    turn_until(&mut ring, |ring| {
        closed = closed.take().or_else(|| ring.take_closed());
        closed.is_some()
    });
    let (closed_token, handler, reason) = closed.unwrap();
    assert_eq!(closed_token, token);
    assert_eq!(handler.received, b"bye");
    assert_eq!(reason, CloseReason::PeerClosed);
    assert_eq!(handler.closed, Some(CloseReason::PeerClosed));
    assert!(matches!(ring.detach(token), Err(RuntimeError::UnknownConnection)));
}

#[test]
fn close_and_timers() {
    let (address, server) = echo_server();
    let mut ring = ClientRing::new(ClientRingConfig { poll_mode: PollMode::Sleep, ..Default::default() }).unwrap();
    let handler = Collector { deadline: Some(Instant::now() + Duration::from_millis(30)), ..Default::default() };
    let token = ring.add(TcpStream::connect(address).unwrap(), handler).unwrap();
    let started = Instant::now();
    // A sleeping ring still wakes for the handler's deadline, before `until`.
    ring.turn(Some(started + Duration::from_secs(5))).unwrap();
    turn_until(&mut ring, |ring| ring.handler_mut(token).unwrap().timers_fired == 1);
    assert!(started.elapsed() < Duration::from_secs(4), "the timer did not wake the ring");
    ring.close(token).unwrap();
    let mut closed = None;
    turn_until(&mut ring, |ring| {
        closed = closed.take().or_else(|| ring.take_closed());
        closed.is_some()
    });
    assert_eq!(closed.unwrap().2, CloseReason::Requested);
    server.join().unwrap();
}

#[test]
fn only_the_owner_thread_drives_the_ring() {
    let (address, server) = echo_server();
    let mut ring = ClientRing::new(ClientRingConfig::default()).unwrap();
    let token = ring.add(TcpStream::connect(address).unwrap(), Collector::default()).unwrap();
    let mut ring = std::thread::spawn(move || {
        assert!(matches!(ring.turn(None), Err(RuntimeError::ForeignThread)));
        assert!(matches!(ring.flush(token), Err(RuntimeError::ForeignThread)));
        assert!(matches!(ring.detach(token), Err(RuntimeError::ForeignThread)));
        ring
    })
    .join()
    .unwrap();
    // Back home it works, and dropping it closes the connection cleanly.
    ring.handler_mut(token).unwrap().to_send = b"ping".to_vec();
    ring.flush(token).unwrap();
    turn_until(&mut ring, |ring| ring.handler_mut(token).unwrap().received == b"ping");
    drop(ring);
    server.join().unwrap();
}

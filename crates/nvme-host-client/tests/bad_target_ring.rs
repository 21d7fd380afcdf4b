//! A target that misbehaves on the wire, seen by I/O queues on the io_uring ring
//! path: a proxy between the host and a real target corrupts or swallows what the
//! target sends. The host must not panic or hang past its timeouts; a corrupt PDU
//! fails the connection, which reconnects and finishes the command.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_host_client::{commands, ClientError, Controller, HostCompletion, IoPath, PollMode};
use nvme_spec::Status;
use support::{options, pattern, TestTarget, BLOCK_BYTES, NAMESPACE};

/// Target-to-host bytes pass unchanged.
const PASS: u8 = 0;
/// Target-to-host bytes are swallowed (a target that stops answering).
const SILENT: u8 = 1;
/// The next target-to-host chunk on the first I/O connection becomes a PDU header
/// announcing 4 GiB, then the proxy passes bytes again.
const CORRUPT_ONCE: u8 = 2;

struct Proxy {
    address: SocketAddr,
    mode: Arc<AtomicU8>,
}

/// Forwards every connection to `target`; connection 0 is the admin queue, 1 the
/// first I/O queue (the order `Controller::connect` opens them).
fn start_proxy(target: SocketAddr) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let mode = Arc::new(AtomicU8::new(PASS));
    let accepted = Arc::new(AtomicUsize::new(0));
    let proxy_mode = Arc::clone(&mode);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(target) else { continue };
            let index = accepted.fetch_add(1, Ordering::SeqCst);
            let (client_read, server_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || pump(client_read, server_write, None));
            let mode = Arc::clone(&proxy_mode);
            std::thread::spawn(move || pump(server, client, Some((mode, index))));
        }
    });
    Proxy { address, mode }
}

/// Copies `from` to `to`; target-to-host traffic (`control` set) obeys the mode.
fn pump(mut from: TcpStream, mut to: TcpStream, control: Option<(Arc<AtomicU8>, usize)>) {
    let mut buffer = [0u8; 65536];
    loop {
        let count = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(count) => count,
        };
        let mut out = &buffer[..count];
        let garbage;
        if let Some((mode, index)) = &control {
            match mode.load(Ordering::SeqCst) {
                SILENT => continue,
                CORRUPT_ONCE if *index == 1 => {
                    // C2HData, HLEN 24, PLEN 0xFFFFFFFF: a length no command asked for.
                    let mut header = [0u8; 24];
                    header[0] = 0x07;
                    header[2] = 24;
                    header[3] = 24;
                    header[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
                    garbage = header;
                    out = &garbage;
                    mode.store(PASS, Ordering::SeqCst);
                }
                _ => {}
            }
        }
        if to.write_all(out).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

fn ring_options(address: SocketAddr) -> nvme_host_client::ConnectOptions {
    let mut options = options(address);
    options.io_path = IoPath::Ring(PollMode::ADAPTIVE);
    options.command_timeout = Duration::from_secs(1);
    options.reconnect_delay = Duration::from_millis(100);
    options.controller_loss_timeout = Duration::from_secs(3);
    options.connect_timeout = Duration::from_secs(1);
    options.keep_alive_timeout_ms = 1000;
    options
}

#[test]
fn a_corrupt_pdu_fails_the_connection_and_the_read_completes_after_reconnect() {
    let target = TestTarget::new();
    let proxy = start_proxy(target.address);
    let controller = Controller::connect(ring_options(proxy.address)).expect("connect through the proxy");
    let data = pattern(8 * BLOCK_BYTES as usize, 11);
    controller.write(NAMESPACE, 0, &data, false).expect("write");
    let mut queue = controller.take_io_queue(0).expect("queue");
    // First use moves the queue onto this thread's ring; then its next answer is garbage.
    let mut done: Vec<HostCompletion> = Vec::new();
    queue.submit(commands::read(NAMESPACE, 0, 8, BLOCK_BYTES)).unwrap();
    queue.reap(1, Duration::from_secs(5), &mut done).unwrap();
    assert_eq!(done.len(), 1);
    proxy.mode.store(CORRUPT_ONCE, Ordering::SeqCst);
    done.clear();
    let started = Instant::now();
    queue.submit(commands::read(NAMESPACE, 0, 8, BLOCK_BYTES)).unwrap();
    while done.is_empty() && started.elapsed() < Duration::from_secs(10) {
        queue.reap(1, Duration::from_secs(1), &mut done).expect("reap");
    }
    assert_eq!(done.len(), 1, "the read completed after the reconnect");
    assert_eq!(done[0].cqe.status, Status::SUCCESS, "{:?}", done[0]);
    assert!(done[0].data == data, "the read returned the written data");
    assert!(controller.reconnect_count() >= 1, "the corrupt PDU forced a reconnect");
}

#[test]
fn a_target_that_stops_answering_ends_in_errors_not_a_hang() {
    let target = TestTarget::new();
    let proxy = start_proxy(target.address);
    let controller = Controller::connect(ring_options(proxy.address)).expect("connect through the proxy");
    let mut queue = controller.take_io_queue(0).expect("queue");
    let mut done: Vec<HostCompletion> = Vec::new();
    queue.submit(commands::read(NAMESPACE, 0, 8, BLOCK_BYTES)).unwrap();
    queue.reap(1, Duration::from_secs(5), &mut done).unwrap();
    proxy.mode.store(SILENT, Ordering::SeqCst);
    done.clear();
    let started = Instant::now();
    for lba in 0..4 {
        queue.submit(commands::read(NAMESPACE, lba * 8, 8, BLOCK_BYTES)).unwrap();
    }
    let mut error = None;
    // Command timeout (1 s), then reconnects that never finish until the controller
    // loss timeout (3 s): every command comes back failed, or the queue reports the
    // loss. Bounded well below anything a hang would take.
    while done.len() < 4 && error.is_none() && started.elapsed() < Duration::from_secs(20) {
        match queue.reap(1, Duration::from_secs(1), &mut done) {
            Ok(_) => {}
            Err(failure) => error = Some(failure),
        }
    }
    assert!(
        done.len() == 4 || matches!(error, Some(ClientError::ControllerLost)),
        "got {} of 4, error {error:?}",
        done.len()
    );
    assert!(done.iter().all(|completion| !completion.cqe.status.is_success()), "no read can succeed: {done:?}");
    drop(queue);
    drop(controller);
    drop(target);
}

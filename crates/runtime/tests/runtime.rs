//! End-to-end tests over loopback: echo with random chunking, partial sends,
//! peers that vanish, wants_close, timers, pending work, shutdown, bind errors.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use runtime::{CloseReason, ListenerId, PollMode, Runtime, RuntimeError, ShutdownHandle};

/// Each client writes random-sized chunks from one thread while reading the
/// echo on another, then checks every byte came back in order.
fn echo_clients(address: SocketAddr, clients: usize, bytes_per_client: usize) {
    let workers: Vec<_> = (0..clients)
        .map(|client| {
            std::thread::spawn(move || {
                let mut random = Random::new(client as u64 + 1);
                let payload: Vec<u8> = (0..bytes_per_client).map(|_| random.next() as u8).collect();
                let mut stream = connect(address);
                let mut writer = stream.try_clone().unwrap();
                let to_send = payload.clone();
                let write_side = std::thread::spawn(move || {
                    let mut random = Random::new(client as u64 + 1000);
                    let mut offset = 0;
                    while offset < to_send.len() {
                        let chunk = (1 + random.below(8192)).min(to_send.len() - offset);
                        writer.write_all(&to_send[offset..offset + chunk]).unwrap();
                        offset += chunk;
                    }
                });
                let echoed = read_exact_bytes(&mut stream, payload.len());
                write_side.join().unwrap();
                assert!(echoed == payload, "client {client} got different bytes back");
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("echo client");
    }
}

fn echo_many_connections(threads: usize, poll_mode: PollMode) {
    echo_many_connections_with(config(threads, poll_mode));
}

fn echo_many_connections_with(config: runtime::RuntimeConfig) {
    let (runtime, events) = start(Behavior::Echo, config);
    let address = runtime.local_addrs()[0];
    echo_clients(address, 16, 256 * 1024);
    let reasons = events.wait_for_closed(16);
    assert!(reasons.iter().all(|&reason| reason == CloseReason::PeerClosed), "{reasons:?}");
    assert_eq!(events.bytes_received.load(Ordering::SeqCst), 16 * 256 * 1024);
    shutdown_and_join(runtime);
    assert_eq!(events.closed_count(), 16, "on_closed exactly once per connection");
    events.assert_no_violations();
}

#[test]
fn echo_many_connections_sleep_mode_two_threads() {
    echo_many_connections(2, PollMode::Sleep);
}

#[test]
fn echo_many_connections_busy_poll_mode() {
    // One busy thread: two would leave the clients no core on a 2-core machine.
    echo_many_connections(1, PollMode::BusyPoll);
}

#[test]
fn echo_with_a_receive_buffer_per_connection() {
    // The single-shot mode (and the fallback on kernels without buffer rings).
    let config = runtime::RuntimeConfig { shared_receive_buffers: 0, ..config(2, PollMode::Sleep) };
    echo_many_connections_with(config);
}

#[test]
fn echo_survives_a_shared_receive_pool_of_one_small_buffer() {
    // Sixteen connections and one 512-byte buffer: receives keep finding the pool
    // empty (ENOBUFS), are re-armed, and not a byte is lost or reordered.
    let config =
        runtime::RuntimeConfig { shared_receive_buffers: 1, recv_buffer_bytes: 512, ..config(1, PollMode::Sleep) };
    echo_many_connections_with(config);
}

#[test]
fn large_batches_are_sent_completely_despite_partial_sends() {
    const BATCH_BYTES: usize = 1024 * 1024;
    let (runtime, events) = start(Behavior::BigResponse { bytes: BATCH_BYTES }, config(1, PollMode::Sleep));
    let mut stream = connect(runtime.local_addrs()[0]);
    write_all(&mut stream, b"abcd"); // four 1 MiB batches
                                     // Let the socket buffers fill so the kernel takes each batch in pieces.
    std::thread::sleep(Duration::from_millis(200));
    let received = read_exact_bytes(&mut stream, 4 * BATCH_BYTES);
    for (index, &byte) in received.iter().enumerate() {
        assert_eq!(byte, pattern_byte(index % BATCH_BYTES), "byte {index}");
    }
    wait_until(|| events.batches_sent.load(Ordering::SeqCst) >= 1, "on_sent");
    drop(stream);
    events.wait_for_closed(1);
    shutdown_and_join(runtime);
    events.assert_no_violations();
}

#[test]
fn peer_closing_mid_send_closes_once_and_runtime_keeps_serving() {
    let (runtime, events) = start(Behavior::BigResponse { bytes: 8 * 1024 * 1024 }, config(1, PollMode::Sleep));
    let address = runtime.local_addrs()[0];
    for round in 0..4 {
        let mut stream = connect(address);
        write_all(&mut stream, b"x");
        let _ = read_exact_bytes(&mut stream, 1000 + round * 100_000);
        drop(stream); // unread data pending: the kernel sends RST
    }
    let reasons = events.wait_for_closed(4);
    for reason in &reasons {
        assert!(
            matches!(
                reason,
                CloseReason::PeerClosed
                    | CloseReason::Error(std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe)
            ),
            "unexpected close reason {reason:?}"
        );
    }
    // Still serving: a fresh connection gets its full response.
    let mut stream = connect(address);
    write_all(&mut stream, b"y");
    assert_eq!(read_exact_bytes(&mut stream, 8 * 1024 * 1024).len(), 8 * 1024 * 1024);
    drop(stream);
    events.wait_for_closed(5);
    shutdown_and_join(runtime);
    assert_eq!(events.closed_count(), 5);
    events.assert_no_violations();
}

#[test]
fn wants_close_sends_the_response_then_closes() {
    let (runtime, events) = start(Behavior::RespondThenClose, config(1, PollMode::Sleep));
    let mut stream = connect(runtime.local_addrs()[0]);
    write_all(&mut stream, b"hello\n");
    // Bytes after the request are discarded, never handed to on_receive
    // (the handler records a violation if they are).
    let _ = stream.write_all(b"ignored after close\n");
    assert_eq!(read_until_closed(&mut stream), b"bye:hello\n");
    assert_eq!(events.wait_for_closed(1), vec![CloseReason::Requested]);
    shutdown_and_join(runtime);
    events.assert_no_violations();
}

#[test]
fn timers_fire_in_sleep_and_busy_modes() {
    for poll_mode in [PollMode::Sleep, PollMode::BusyPoll, PollMode::ADAPTIVE] {
        let (runtime, events) = start(Behavior::Timer { interval_ms: 30, ticks: 3 }, config(1, poll_mode));
        let started = Instant::now();
        let mut stream = connect(runtime.local_addrs()[0]);
        assert_eq!(read_to_end(&mut stream), b"tick\ntick\ntick\n");
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(85), "ticks came too early: {elapsed:?}");
        assert!(elapsed < Duration::from_secs(5), "ticks came too late: {elapsed:?}");
        assert_eq!(events.wait_for_closed(1), vec![CloseReason::Requested]);
        shutdown_and_join(runtime);
        events.assert_no_violations();
    }
}

#[test]
fn pending_work_is_polled_until_done() {
    for poll_mode in [PollMode::Sleep, PollMode::BusyPoll, PollMode::ADAPTIVE] {
        let (runtime, events) = start(Behavior::PendingWork { polls: 50 }, config(1, poll_mode));
        let mut stream = connect(runtime.local_addrs()[0]);
        write_all(&mut stream, b"go");
        assert_eq!(read_exact_bytes(&mut stream, 7), b"polled\n");
        drop(stream);
        events.wait_for_closed(1);
        shutdown_and_join(runtime);
        events.assert_no_violations();
    }
}

#[test]
fn a_storage_wake_polls_a_connection_that_reports_no_pending_work() {
    // Sleep mode must block (nothing pending), and the wake from another thread must
    // still reach the handler's poll: this is how RBD completions arrive.
    for poll_mode in [PollMode::Sleep, PollMode::BusyPoll, PollMode::ADAPTIVE] {
        let (runtime, events) = start(Behavior::StorageWake { delay_ms: 50 }, config(1, poll_mode));
        let mut stream = connect(runtime.local_addrs()[0]);
        write_all(&mut stream, b"go");
        assert_eq!(read_exact_bytes(&mut stream, 6), b"woken\n");
        drop(stream);
        events.wait_for_closed(1);
        shutdown_and_join(runtime);
        events.assert_no_violations();
    }
}

#[test]
fn a_closed_connection_is_kept_until_its_drain_is_done() {
    // Sleep mode must block while the drain waits (nothing pending), and the storage
    // wake from another thread must bring the drain to an end.
    for poll_mode in [PollMode::Sleep, PollMode::BusyPoll, PollMode::ADAPTIVE] {
        let (runtime, events) = start(Behavior::DrainAfterClose { delay_ms: 100 }, config(1, poll_mode));
        let mut stream = connect(runtime.local_addrs()[0]);
        write_all(&mut stream, b"go");
        drop(stream);
        events.wait_for_closed(1);
        wait_until(|| events.drains_done.load(Ordering::SeqCst) == 1, "the drain to finish");
        assert!(events.drains_pending.load(Ordering::SeqCst) >= 1, "the first drain call came before the wake");
        // Another connection is accepted and closed normally; it is still draining
        // when shutdown begins, and shutdown waits for it.
        let stream = connect(runtime.local_addrs()[0]);
        drop(stream);
        events.wait_for_closed(2);
        shutdown_and_join(runtime);
        assert_eq!(
            events.dropped_undrained.load(Ordering::SeqCst),
            0,
            "a handler was dropped before its drain was done"
        );
        events.assert_no_violations();
    }
}

#[test]
fn shutdown_closes_open_connections_once() {
    for poll_mode in [PollMode::Sleep, PollMode::BusyPoll, PollMode::ADAPTIVE] {
        let threads = if poll_mode == PollMode::Sleep { 2 } else { 1 };
        let (runtime, events) = start(Behavior::Echo, config(threads, poll_mode));
        let address = runtime.local_addrs()[0];
        let mut streams: Vec<_> = (0..10).map(|_| connect(address)).collect();
        for stream in &mut streams {
            write_all(stream, b"ping");
            assert_eq!(read_exact_bytes(stream, 4), b"ping");
        }
        // One connection in the middle of a large echo when shutdown comes.
        let mut busy = connect(address);
        write_all(&mut busy, &vec![7u8; 512 * 1024]);
        wait_until(|| events.accepted.load(Ordering::SeqCst) == 11, "accepts");
        let took = shutdown_and_join(runtime);
        assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
        let reasons = events.closed.lock().unwrap().clone();
        assert_eq!(reasons.len(), 11, "on_closed exactly once each: {reasons:?}");
        assert!(reasons.iter().all(|&reason| reason == CloseReason::Shutdown), "{reasons:?}");
        for stream in &mut streams {
            let mut rest = Vec::new();
            // EOF (or a reset) and no hang: the server closed the socket.
            let _ = stream.read_to_end(&mut rest);
        }
        events.assert_no_violations();
        // The listening sockets are gone too.
        assert!(std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err());
    }
}

#[test]
fn shutdown_wakes_an_idle_sleeping_runtime_promptly() {
    let (runtime, events) = start(Behavior::Echo, config(2, PollMode::Sleep));
    std::thread::sleep(Duration::from_millis(50)); // let both threads block
    let handle: ShutdownHandle = runtime.shutdown_handle();
    let from_other_thread = std::thread::spawn(move || handle.shutdown());
    from_other_thread.join().unwrap();
    let took = shutdown_and_join(runtime);
    assert!(took < Duration::from_millis(500), "shutdown took {took:?}");
    assert_eq!(events.closed_count(), 0);
}

#[test]
fn bind_error_names_the_address_in_use() {
    let occupied = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = occupied.local_addr().unwrap();
    let mut config = config(2, PollMode::Sleep);
    config.listeners = vec!["127.0.0.1:0".parse().unwrap(), address];
    let service = Arc::new(TestService { behavior: Behavior::Echo, events: Arc::default(), refuse: false });
    match Runtime::start(config, service) {
        Err(RuntimeError::Bind { address: reported, source }) => {
            assert_eq!(reported, address);
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
            assert!(RuntimeError::Bind { address: reported, source }.to_string().contains(&address.to_string()));
        }
        Err(other) => panic!("expected a bind error, got {other}"),
        Ok(_) => panic!("bound an address that is in use"),
    }
}

#[test]
fn a_second_runtime_on_the_same_port_is_refused() {
    // Without the check, SO_REUSEPORT would let the second runtime join the
    // first one's group and silently take half of its connections.
    let (first, _events) = start(Behavior::Echo, config(1, PollMode::Sleep));
    let address = first.local_addrs()[0];
    let mut second_config = config(1, PollMode::Sleep);
    second_config.listeners = vec![address];
    let service = Arc::new(TestService { behavior: Behavior::Echo, events: Arc::default(), refuse: false });
    match Runtime::start(second_config, service) {
        Err(RuntimeError::Bind { address: reported, source }) => {
            assert_eq!(reported, address);
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
        }
        Err(other) => panic!("expected a bind error, got {other}"),
        Ok(_) => panic!("a second runtime joined the first one's port"),
    }
    shutdown_and_join(first);
}

#[test]
fn port_zero_resolves_per_listener_and_listener_index_is_reported() {
    let mut config = config(2, PollMode::Sleep);
    config.listeners = vec!["127.0.0.1:0".parse().unwrap(), "127.0.0.1:0".parse().unwrap()];
    let (runtime, events) = start(Behavior::Echo, config);
    let addresses = runtime.local_addrs().to_vec();
    assert_eq!(addresses.len(), 2);
    assert!(addresses.iter().all(|address| address.port() != 0));
    assert_ne!(addresses[0], addresses[1]);
    for (index, &address) in addresses.iter().enumerate() {
        let mut stream = connect(address);
        write_all(&mut stream, b"hi");
        assert_eq!(read_exact_bytes(&mut stream, 2), b"hi");
        let seen = events.listeners_seen.lock().unwrap().last().copied();
        assert_eq!(seen.map(ListenerId::index), Some(index));
    }
    shutdown_and_join(runtime);
    events.assert_no_violations();
}

#[test]
fn refused_connections_are_closed() {
    let events = Arc::new(Events::default());
    let service = Arc::new(TestService { behavior: Behavior::Echo, events: Arc::clone(&events), refuse: true });
    let runtime = Runtime::start(config(1, PollMode::Sleep), service).unwrap();
    let mut stream = connect(runtime.local_addrs()[0]);
    let _ = stream.write_all(b"anyone?");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest); // EOF or reset, promptly
    assert!(rest.is_empty());
    stream.shutdown(Shutdown::Both).ok();
    shutdown_and_join(runtime);
    assert_eq!(events.closed_count(), 0, "refused connections never had a handler");
}

#[test]
fn invalid_config_is_rejected() {
    let mut config = config(0, PollMode::Sleep);
    let service = Arc::new(TestService { behavior: Behavior::Echo, events: Arc::default(), refuse: false });
    assert!(matches!(Runtime::start(config.clone(), Arc::clone(&service)), Err(RuntimeError::InvalidConfig(_))));
    config.threads = 1;
    config.recv_buffer_bytes = 0;
    assert!(matches!(Runtime::start(config, service), Err(RuntimeError::InvalidConfig(_))));
}

#[test]
fn shutdown_handle_is_send_sync_clone() {
    fn assert_traits<T: Send + Sync + Clone + 'static>() {}
    assert_traits::<ShutdownHandle>();
}

#[test]
fn a_panicking_handler_stops_the_runtime_and_join_reports_it() {
    let (runtime, events) = start(Behavior::PanicOnReceive, config(2, PollMode::Sleep));
    let address = runtime.local_addrs()[0];
    let mut idle = connect(address);
    let mut victim = connect(address);
    wait_until(|| events.accepted.load(Ordering::SeqCst) == 2, "accepts");
    write_all(&mut victim, b"boom");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(runtime.join()));
    let result = receiver.recv_timeout(STEP_TIMEOUT).expect("join returns after a handler panic");
    match result {
        Err(RuntimeError::Thread(message)) => assert!(message.contains("on purpose"), "{message}"),
        other => panic!("expected a thread error, got {other:?}"),
    }
    // Both sockets end: the panicking thread's by its ring closing, the other
    // thread's by the shutdown the panic triggered.
    let _ = read_until_closed(&mut idle);
    let _ = read_until_closed(&mut victim);
}

//! Listeners added and removed while the runtime runs: an added listener accepts
//! on every thread, removing it closes its socket and exactly the connections
//! accepted through it (through the normal close path), addresses in use are
//! refused like at start, and ids are never reused. Loopback only, every wait
//! bounded.

mod common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::*;
use runtime::{CloseReason, PollMode, RuntimeError};

/// Connections per listener: enough that, with two threads, both threads very
/// likely own some (the kernel spreads them by hash).
const CONNECTIONS_PER_LISTENER: usize = 6;

/// A connected client whose echo round trip proves the runtime accepted it.
fn echoing_client(address: SocketAddr) -> TcpStream {
    let mut stream = connect(address);
    write_all(&mut stream, b"ping");
    assert_eq!(read_exact_bytes(&mut stream, 4), b"ping");
    stream
}

fn refuses_connections(address: SocketAddr) -> bool {
    TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err()
}

fn add_then_remove_closes_only_that_listeners_connections(threads: usize, poll_mode: PollMode) {
    let (runtime, events) = start(Behavior::Echo, config(threads, poll_mode));
    let control = runtime.listener_control();
    let original = runtime.local_addrs()[0];
    let (original_id, _) = control.listeners()[0];

    let (added_id, added) = control.add_listener("127.0.0.1:0".parse().unwrap()).expect("add a listener");
    assert_ne!(added_id, original_id);
    assert_ne!(added.port(), 0, "port 0 resolves to a real port");
    assert_eq!(control.listeners(), [(original_id, original), (added_id, added)]);

    let mut staying: Vec<TcpStream> = (0..CONNECTIONS_PER_LISTENER).map(|_| echoing_client(original)).collect();
    let mut leaving: Vec<TcpStream> = (0..CONNECTIONS_PER_LISTENER).map(|_| echoing_client(added)).collect();
    let seen = events.listeners_seen.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|&&id| id == added_id).count(), CONNECTIONS_PER_LISTENER, "{seen:?}");

    let closed = control.remove_listener(added_id).expect("remove the listener");
    assert_eq!(closed, CONNECTIONS_PER_LISTENER, "every connection of the removed listener, and only those");
    assert!(refuses_connections(added), "the removed listener's socket is closed on every thread");
    for stream in &mut leaving {
        // EOF or reset, promptly (the read timeout bounds it).
        assert!(read_until_closed(stream).is_empty());
    }
    let reasons = events.wait_for_closed(CONNECTIONS_PER_LISTENER);
    assert_eq!(reasons, vec![CloseReason::ListenerRemoved; CONNECTIONS_PER_LISTENER], "through the close path");
    for stream in &mut staying {
        write_all(stream, b"still here");
        assert_eq!(read_exact_bytes(stream, 10), b"still here");
    }
    assert_eq!(control.listeners(), [(original_id, original)]);
    assert!(matches!(control.remove_listener(added_id), Err(RuntimeError::UnknownListener(id)) if id == added_id));

    // The address is free again, and comes back under a new id.
    let (again_id, again) = control.add_listener(added).expect("re-add the removed address");
    assert_eq!(again, added);
    assert!(again_id > added_id, "ids are never reused");
    drop(echoing_client(again));
    assert_eq!(events.listeners_seen.lock().unwrap().last(), Some(&again_id));

    // Removing a configured listener works the same way.
    let closed = control.remove_listener(original_id).expect("remove the configured listener");
    assert_eq!(closed, CONNECTIONS_PER_LISTENER);
    assert!(refuses_connections(original));
    for stream in &mut staying {
        assert!(read_until_closed(stream).is_empty());
    }

    drop(staying);
    drop(leaving);
    shutdown_and_join(runtime);
    // Every connection was closed exactly once: six and six by removal, the
    // re-added listener's one by its peer.
    assert_eq!(events.closed_count(), 2 * CONNECTIONS_PER_LISTENER + 1);
    events.assert_no_violations();
}

#[test]
fn add_then_remove_closes_only_that_listeners_connections_two_threads() {
    add_then_remove_closes_only_that_listeners_connections(2, PollMode::Sleep);
}

#[test]
fn add_then_remove_closes_only_that_listeners_connections_busy_poll() {
    // One busy thread: two would leave the clients no core on a 2-core machine.
    add_then_remove_closes_only_that_listeners_connections(1, PollMode::BusyPoll);
}

#[test]
fn an_address_in_use_is_refused_and_nothing_changes() {
    let (runtime, events) = start(Behavior::Echo, config(2, PollMode::Sleep));
    let control = runtime.listener_control();
    let before = control.listeners();

    // Another program's socket, and one of the runtime's own addresses.
    let occupied = TcpListener::bind("127.0.0.1:0").unwrap();
    for address in [occupied.local_addr().unwrap(), runtime.local_addrs()[0]] {
        match control.add_listener(address) {
            Err(RuntimeError::Bind { address: reported, source }) => {
                assert_eq!(reported, address);
                assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
            }
            other => panic!("adding {address} (in use) gave {other:?}"),
        }
    }
    assert_eq!(control.listeners(), before);
    // The runtime's listener still serves alone: nobody joined its port group.
    drop(echoing_client(runtime.local_addrs()[0]));
    assert!(events.listeners_seen.lock().unwrap().iter().all(|&id| id == before[0].0));

    // A prepared listener that is dropped instead of started closes its
    // sockets and leaves the address free.
    let prepared = control.prepare_listener("127.0.0.1:0".parse().unwrap()).expect("prepare");
    let address = prepared.local_addr();
    drop(prepared);
    assert!(refuses_connections(address));
    assert_eq!(control.listeners(), before);
    let (_, again) = control.add_listener(address).expect("the dropped listener's address is free");
    drop(echoing_client(again));

    shutdown_and_join(runtime);
    events.assert_no_violations();
}

#[test]
fn listener_changes_after_shutdown_are_refused() {
    let (runtime, _events) = start(Behavior::Echo, config(1, PollMode::Sleep));
    let control = runtime.listener_control();
    let (id, _) = control.listeners()[0];
    shutdown_and_join(runtime);
    assert!(matches!(control.add_listener("127.0.0.1:0".parse().unwrap()), Err(RuntimeError::NotRunning)));
    assert!(matches!(control.remove_listener(id), Err(RuntimeError::NotRunning)));
}

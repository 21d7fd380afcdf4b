//! The NVMe/TCP target on the runtime: each accepted TCP connection becomes an
//! `nvme_target::Connection` driven by the runtime's events. `sluice serve`, the host
//! library's tests and the benchmarks all start targets through `start`;
//! `LiveListeners` adds and removes listeners while it runs.
#![forbid(unsafe_code)]

mod live_listeners;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

pub use live_listeners::{ActiveListener, LiveListeners, PendingListener};
use nvme_auth::PskIdentity;
use nvme_target::{BatchPart, Connection, SecureChannel, Target, TransmitBatch};
use runtime::tls::{PskChoice, PskLookup};
use runtime::{
    CloseReason, ConnectionHandler, HandlerActivity, SendParts, SendSource, Service, TlsConnection, TlsListener,
    TlsPolicy,
};
pub use runtime::{ListenerControl, ListenerId, PollMode, Runtime, RuntimeConfig, RuntimeError, ShutdownHandle};

/// Starts `target` on a runtime configured by `config` (its `listeners` are in the
/// same order as the target's listener specs: the runtime's listener ids 0, 1, ...
/// are the target's listener ids, by which connections name their listener).
pub fn start(target: Arc<Target>, config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
    Runtime::start(config, Arc::new(TargetService { target, tls_listeners: Mutex::new(HashMap::new()) }))
}

/// A target served by a runtime of its own on 127.0.0.1, stopped when dropped: what
/// tests start in process. Its one runtime listener is the target's listener 0.
pub struct LoopbackTarget {
    runtime: Option<Runtime>,
    address: SocketAddr,
}

impl LoopbackTarget {
    /// Serves `target` on 127.0.0.1:`port` (0: a free port the kernel picks; the
    /// discovery log then shows the port of the spec) with `threads` runtime threads
    /// that sleep while idle.
    pub fn start(target: Arc<Target>, port: u16, threads: usize) -> Result<LoopbackTarget, RuntimeError> {
        let config = RuntimeConfig {
            threads,
            pin_threads: false,
            poll_mode: PollMode::Sleep,
            listeners: vec![SocketAddr::from(([127, 0, 0, 1], port))],
            recv_buffer_bytes: runtime::TARGET_RECEIVE_BUFFER_BYTES,
            shared_receive_buffers: runtime::TARGET_SHARED_RECEIVE_BUFFERS,
            ring_entries: 256,
            tcp_nodelay: true,
        };
        let runtime = start(target, config)?;
        let address = runtime.local_addrs().first().copied().unwrap_or(SocketAddr::from(([127, 0, 0, 1], port)));
        Ok(LoopbackTarget { runtime: Some(runtime), address })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops serving (every connection closes) and waits for the runtime's threads;
    /// an error if one of them panicked. Dropping stops it too.
    pub fn stop(&mut self) -> Result<(), RuntimeError> {
        match self.runtime.take() {
            Some(runtime) => {
                runtime.shutdown_handle().shutdown();
                runtime.join()
            }
            None => Ok(()),
        }
    }
}

impl Drop for LoopbackTarget {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Accepts connections for the target.
struct TargetService {
    target: Arc<Target>,
    /// The TLS side of each listener with TLS, made at its first connection (an
    /// OpenSSL context each). Locked once per accepted connection, never per I/O.
    tls_listeners: Mutex<HashMap<usize, TlsListener>>,
}

impl TargetService {
    /// The TLS side of listener `index`, or `None` for a plain listener (or when
    /// OpenSSL cannot be set up, which is logged and refuses the connection).
    fn tls_listener(&self, index: usize) -> Result<Option<TlsListener>, ()> {
        let policy = match self.target.listener(index).map(|listener| listener.secure_channel) {
            None | Some(SecureChannel::None) => return Ok(None),
            Some(SecureChannel::Optional) => TlsPolicy::Optional,
            Some(SecureChannel::Required) => TlsPolicy::Required,
        };
        let mut listeners = self.tls_listeners.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(listener) = listeners.get(&index) {
            return Ok(Some(listener.clone()));
        }
        let target = Arc::clone(&self.target);
        let lookup: PskLookup = Arc::new(move |identity: &[u8]| {
            let (key, _identity) = target.tls_psk(identity)?;
            Some(PskChoice::for_key(key))
        });
        match TlsListener::new(policy, lookup) {
            Ok(listener) => {
                listeners.insert(index, listener.clone());
                Ok(Some(listener))
            }
            Err(error) => {
                tracing::error!(%error, listener = index, "TLS cannot be set up; refusing connections on this listener");
                Err(())
            }
        }
    }
}

/// One connection: the sans-io core driven by the runtime.
struct TargetConnection {
    connection: Connection,
}

/// A batch of PDUs the runtime sends without copying.
struct Outgoing(TransmitBatch);

impl SendSource for Outgoing {
    fn parts<'a>(&'a self, out: &mut SendParts<'a>) {
        self.0.for_each_part(|part| match part {
            BatchPart::Bytes(bytes) => out.bytes(bytes),
            BatchPart::Lent(lent, range) => out.lent(lent, range),
        });
    }

    fn total_len(&self) -> usize {
        self.0.total_bytes()
    }
}

impl Service for TargetService {
    type Handler = TlsConnection<TargetConnection>;

    fn accept(
        &self,
        thread: usize,
        listener: ListenerId,
        _local: SocketAddr,
        peer: SocketAddr,
        storage_waker: &std::task::Waker,
        now: Instant,
    ) -> Option<TlsConnection<TargetConnection>> {
        tracing::debug!(%peer, thread, %listener, "connection accepted");
        let tls = self.tls_listener(listener.index()).ok()?;
        let mut connection = Connection::new(self.target.clone(), listener.index(), peer.to_string(), now);
        connection.set_storage_waker(storage_waker.clone());
        let connection = TargetConnection { connection };
        Some(match tls {
            None => TlsConnection::plain(connection, now),
            Some(tls) => TlsConnection::new(connection, &tls, peer.to_string(), now),
        })
    }
}

impl ConnectionHandler for TargetConnection {
    type Batch = Outgoing;

    fn on_receive(&mut self, data: &[u8], now: Instant) {
        self.connection.handle_received(data, now);
    }

    fn take_send(&mut self) -> Option<Outgoing> {
        self.connection.take_transmit().map(Outgoing)
    }

    fn on_sent(&mut self, batch: Outgoing, now: Instant) {
        self.connection.transmit_complete(batch.0, now);
    }

    fn on_timer(&mut self, now: Instant) {
        self.connection.handle_timeout(now);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.connection.next_deadline()
    }

    fn has_pending_work(&self) -> bool {
        self.connection.has_pending_storage()
    }

    fn awaits_storage(&self) -> bool {
        self.connection.awaits_storage()
    }

    fn activity(&self) -> HandlerActivity {
        let activity = self.connection.storage_activity();
        HandlerActivity { pending_work: activity.pending_storage, awaits_storage: activity.awaits_storage }
    }

    fn poll(&mut self, now: Instant) {
        self.connection.poll_storage(now);
    }

    fn wants_close(&self) -> bool {
        self.connection.wants_close()
    }

    fn awaits_rest_of_message(&self) -> bool {
        self.connection.awaits_rest_of_pdu()
    }

    fn on_secure_channel(&mut self, psk_identity: &[u8]) {
        // The lookup parsed this identity before the handshake used its key; should it
        // not parse now, no Connect may pass on this connection.
        match PskIdentity::parse(psk_identity) {
            Ok(identity) => {
                self.connection.bind_secure_channel(identity.host_nqn(), identity.subsystem_nqn());
                // Only a generated PSK's lookup succeeds for a `G` identity.
                if identity.kind() == nvme_auth::PskKind::Generated {
                    self.connection.mark_generated_psk();
                }
            }
            Err(error) => {
                tracing::warn!(%error, "TLS established with an identity that does not parse; refusing every Connect");
                self.connection.bind_secure_channel("", "");
            }
        }
    }

    fn on_closed(&mut self, reason: CloseReason) {
        tracing::debug!(queue = ?self.connection.binding().map(|binding| binding.queue_id), ?reason,
            "connection closed");
        self.connection.handle_closed();
    }

    fn drain(&mut self, now: Instant) -> bool {
        self.connection.drain(now)
    }
}

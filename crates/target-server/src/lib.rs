//! The NVMe/TCP target on the runtime: each accepted TCP connection becomes an
//! `nvme_target::Connection` driven by the runtime's events. `sluice serve`, the host
//! library's tests and the benchmarks all start targets through `start`;
//! `LiveListeners` adds and removes listeners while it runs.
#![forbid(unsafe_code)]

mod live_listeners;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use nvme_target::{BatchPart, Connection, Target, TransmitBatch};
pub use live_listeners::{ActiveListener, LiveListeners, PendingListener};
pub use runtime::{ListenerControl, ListenerId, PollMode, Runtime, RuntimeConfig, RuntimeError, ShutdownHandle};
use runtime::{CloseReason, ConnectionHandler, SendParts, SendSource, Service};

/// Starts `target` on a runtime configured by `config` (its `listeners` are in the
/// same order as the target's listener specs: the runtime's listener ids 0, 1, ...
/// are the target's listener ids, by which connections name their listener).
pub fn start(target: Arc<Target>, config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
    Runtime::start(config, Arc::new(TargetService { target }))
}

/// Accepts connections for the target.
struct TargetService {
    target: Arc<Target>,
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
    type Handler = TargetConnection;

    fn accept(
        &self,
        thread: usize,
        listener: ListenerId,
        _local: SocketAddr,
        peer: SocketAddr,
        storage_waker: &std::task::Waker,
        now: Instant,
    ) -> Option<TargetConnection> {
        tracing::debug!(%peer, thread, %listener, "connection accepted");
        let mut connection = Connection::new(self.target.clone(), listener.index(), peer.to_string(), now);
        connection.set_storage_waker(storage_waker.clone());
        Some(TargetConnection { connection })
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

    fn on_sent(&mut self, batch: Outgoing, _now: Instant) {
        self.connection.transmit_complete(batch.0);
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

    fn poll(&mut self, now: Instant) {
        self.connection.poll_storage(now);
    }

    fn wants_close(&self) -> bool {
        self.connection.wants_close()
    }

    fn on_closed(&mut self, reason: CloseReason) {
        tracing::debug!(queue = ?self.connection.binding().map(|binding| binding.queue_id), ?reason,
            "connection closed");
        self.connection.handle_closed();
    }
}

//! Listeners of a running target, added and removed while it serves (what SPDK's
//! `nvmf_subsystem_add_listener` / `nvmf_subsystem_remove_listener` do, for the
//! whole target): the runtime binds and closes the sockets and the connections,
//! the target's listener table (the discovery log, the discovery-only check at
//! Connect) follows, both under the runtime's listener id.

use std::net::SocketAddr;
use std::sync::Arc;

use nvme_target::{AddressFamily, ListenerSpec, SecureChannel, Target, TargetError};
use runtime::{ListenerControl, ListenerId, PreparedListener, Runtime, RuntimeError};

/// A listener the runtime accepts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveListener {
    pub id: ListenerId,
    /// The address bound (port 0 resolved to the real port).
    pub address: SocketAddr,
    /// Serves only the discovery subsystem.
    pub discovery_only: bool,
    /// TLS on this listener (TP 8011).
    pub secure_channel: SecureChannel,
}

/// A listener bound on every runtime thread but neither accepting nor in the
/// discovery log yet: hand it to [`LiveListeners::activate`], or drop it to close
/// its sockets and change nothing.
#[derive(Debug)]
pub struct PendingListener {
    prepared: PreparedListener,
    discovery_only: bool,
    secure_channel: SecureChannel,
}

impl PendingListener {
    /// The address bound (port 0 resolved to the real port).
    pub fn address(&self) -> SocketAddr {
        self.prepared.local_addr()
    }
}

/// Changes the listeners of a target running on a runtime. `Clone + Send + Sync`.
#[derive(Clone, Debug)]
pub struct LiveListeners {
    target: Arc<Target>,
    control: ListenerControl,
}

impl LiveListeners {
    /// For `target` served by `runtime` (started with [`crate::start`]).
    pub fn new(target: Arc<Target>, runtime: &Runtime) -> LiveListeners {
        LiveListeners { target, control: runtime.listener_control() }
    }

    /// The listeners accepting now, in id order.
    pub fn list(&self) -> Vec<ActiveListener> {
        self.control
            .listeners()
            .into_iter()
            .map(|(id, address)| {
                let listener = self.target.listener(id.index());
                ActiveListener {
                    id,
                    address,
                    discovery_only: listener.as_ref().is_some_and(|listener| listener.discovery_only),
                    secure_channel: listener.map(|listener| listener.secure_channel).unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The active listener bound to exactly `address`.
    pub fn find(&self, address: SocketAddr) -> Option<ActiveListener> {
        self.list().into_iter().find(|listener| listener.address == address)
    }

    /// Binds `address` on every runtime thread: "address in use" (by another
    /// program or by one of this target's listeners) is refused here, with
    /// nothing changed. Nothing is accepted until [`LiveListeners::activate`].
    pub fn bind(
        &self,
        address: SocketAddr,
        discovery_only: bool,
        secure_channel: SecureChannel,
    ) -> Result<PendingListener, RuntimeError> {
        let prepared = self.control.prepare_listener(address)?;
        Ok(PendingListener { prepared, discovery_only, secure_channel })
    }

    /// Puts a bound listener in the target's listener table (the discovery log
    /// lists it, its generation moves), then lets the runtime accept on it: the
    /// first Connect through it already finds it.
    pub fn activate(&self, pending: PendingListener) -> Result<ActiveListener, TargetError> {
        let PendingListener { prepared, discovery_only, secure_channel } = pending;
        let (id, address) = (prepared.id(), prepared.local_addr());
        self.target.add_listener(id.index(), listener_spec(address, discovery_only, secure_channel))?;
        self.control.start_listener(prepared);
        Ok(ActiveListener { id, address, discovery_only, secure_channel })
    }

    /// Closes listener `id`: the runtime stops accepting on it and closes the
    /// connections accepted through it (only those), then the discovery log
    /// drops it. Returns how many connections were closed.
    ///
    /// On [`RuntimeError::ListenerChangeTimedOut`] the removal is committed (the
    /// threads apply it when they catch up) and the discovery log already
    /// reflects it; on any other error nothing changed.
    pub fn remove(&self, id: ListenerId) -> Result<usize, RuntimeError> {
        let result = self.control.remove_listener(id);
        if matches!(result, Ok(_) | Err(RuntimeError::ListenerChangeTimedOut { .. })) {
            if let Err(error) = self.target.remove_listener(id.index()) {
                // Listeners bound through `bind`/`activate` or at start are
                // always in both tables.
                tracing::error!(%id, %error, "a removed listener was not in the target's table");
            }
        }
        result
    }
}

/// How the target (and the discovery log) describe a listener bound to `address`.
fn listener_spec(address: SocketAddr, discovery_only: bool, secure_channel: SecureChannel) -> ListenerSpec {
    ListenerSpec {
        address: address.ip().to_string(),
        port: address.port(),
        family: if address.is_ipv4() { AddressFamily::Ipv4 } else { AddressFamily::Ipv6 },
        discovery_only,
        secure_channel,
    }
}

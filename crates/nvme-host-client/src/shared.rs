//! State shared by the `Controller`, its supervisor thread and its I/O queues: the
//! current association (epoch, CNTLID, queue parameters, link status) and the admin
//! connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use nvme_spec::{ControllerId, NamespaceId};

use crate::connection::QueueConnection;
use crate::io_queue::IoQueueInner;
use crate::ConnectOptions;

/// Whether the association is usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkStatus {
    /// Connected; I/O queues connect to `controller_id` of this epoch.
    Live,
    /// A connection of this epoch failed; the supervisor is building the next one.
    Reconnecting { since: Instant },
    /// No reconnect succeeded within the controller loss timeout: final.
    Lost,
    /// Disconnected or dropped by the owner: final.
    Closed,
}

/// The current association, as I/O queues need it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AssociationState {
    /// Bumped by every successful (re)connect.
    pub epoch: u64,
    pub status: LinkStatus,
    pub controller_id: ControllerId,
    pub io_queue_count: usize,
    pub io_queue_size: u16,
    pub io_in_capsule_data_bytes: u32,
    pub max_transfer_bytes: u32,
}

/// The admin connection and what arrives on it unasked.
#[derive(Debug, Default)]
pub(crate) struct AdminLink {
    /// `None` while reconnecting.
    pub connection: Option<QueueConnection>,
    pub next_tag: u64,
    /// An Asynchronous Event said namespace attributes changed; the supervisor reads
    /// the Changed Namespace List log.
    pub namespace_event_pending: bool,
}

impl AdminLink {
    /// A fresh tag for one admin command (the AER owns `u64::MAX`).
    pub fn next_tag(&mut self) -> u64 {
        self.next_tag = (self.next_tag + 1) % (u64::MAX - 1);
        self.next_tag
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub options: ConnectOptions,
    pub admin: Mutex<AdminLink>,
    association: Mutex<AssociationState>,
    changed: Condvar,
    /// Bumped on every change of `association`, so I/O queues check it with one
    /// atomic load per call instead of taking the lock.
    generation: AtomicU64,
    pub io_slots: Vec<Mutex<Option<IoQueueInner>>>,
    pub namespace_changes: Mutex<Vec<NamespaceId>>,
    /// Block size in bytes per NSID, from Identify Namespace.
    pub block_sizes: RwLock<HashMap<u32, u32>>,
    /// The TLS PSK of the current association when secure channel concatenation
    /// generated one (every association generates its own).
    pub generated_tls: Mutex<Option<std::sync::Arc<crate::connection::GeneratedTls>>>,
}

/// Locks a mutex, carrying on past poisoning: every critical section leaves the
/// state consistent field by field, and a panicking caller thread must not take
/// the controller down with it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl Shared {
    pub fn new(options: ConnectOptions, state: AssociationState, admin: AdminLink, io_slots: usize) -> Self {
        Shared {
            options,
            admin: Mutex::new(admin),
            association: Mutex::new(state),
            changed: Condvar::new(),
            generation: AtomicU64::new(1),
            io_slots: (0..io_slots).map(|_| Mutex::new(None)).collect(),
            namespace_changes: Mutex::new(Vec::new()),
            block_sizes: RwLock::new(HashMap::new()),
            generated_tls: Mutex::new(None),
        }
    }

    /// The current association.
    pub fn snapshot(&self) -> AssociationState {
        *lock(&self.association)
    }

    /// Counter that changes whenever the association does.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Applies `change` and wakes every waiter.
    pub fn update(&self, change: impl FnOnce(&mut AssociationState)) {
        let mut state = lock(&self.association);
        change(&mut state);
        self.generation.fetch_add(1, Ordering::AcqRel);
        drop(state);
        self.changed.notify_all();
    }

    /// Wakes the supervisor (and any waiter) without changing the association.
    pub fn poke(&self) {
        let _state = lock(&self.association);
        self.changed.notify_all();
    }

    /// A connection of association `epoch` failed: ask for a new association unless
    /// someone already did.
    pub fn request_reconnect(&self, epoch: u64) {
        let state = self.snapshot();
        if state.epoch == epoch && state.status == LinkStatus::Live {
            tracing::warn!(epoch, "connection lost; reconnecting the controller");
            self.update(|state| {
                if state.epoch == epoch && state.status == LinkStatus::Live {
                    state.status = LinkStatus::Reconnecting { since: Instant::now() };
                }
            });
        }
    }

    /// Waits until the generation moves past `seen` or `until` passes.
    pub fn wait_for_change(&self, seen: u64, until: Instant) {
        let mut state = lock(&self.association);
        while self.generation() == seen {
            let now = Instant::now();
            if now >= until {
                return;
            }
            state = match self.changed.wait_timeout(state, until - now) {
                Ok((guard, _)) => guard,
                Err(poison) => poison.into_inner().0,
            };
        }
    }

    /// Waits on the condition variable (woken by `update` or `poke`) at most until
    /// `until`.
    pub fn sleep_until(&self, until: Instant) {
        let state = lock(&self.association);
        let now = Instant::now();
        if now < until {
            let _ = self.changed.wait_timeout(state, until - now);
        }
    }

    /// Waits until the link is not reconnecting any more (or `until`); returns the
    /// state then.
    pub fn wait_while_reconnecting(&self, until: Instant) -> AssociationState {
        loop {
            let seen = self.generation();
            let state = self.snapshot();
            if !matches!(state.status, LinkStatus::Reconnecting { .. }) || Instant::now() >= until {
                return state;
            }
            self.wait_for_change(seen, until);
        }
    }

    /// Block size of `nsid` from the cache.
    pub fn cached_block_size(&self, nsid: NamespaceId) -> Option<u32> {
        self.block_sizes.read().unwrap_or_else(|poison| poison.into_inner()).get(&nsid.0).copied()
    }

    pub fn cache_block_size(&self, nsid: NamespaceId, block_size: Option<u32>) {
        let mut sizes = self.block_sizes.write().unwrap_or_else(|poison| poison.into_inner());
        match block_size {
            Some(bytes) => sizes.insert(nsid.0, bytes),
            None => sizes.remove(&nsid.0),
        };
    }
}

//! State shared by the `Controller`, its supervisor thread and its I/O queues: the
//! current association (epoch, CNTLID, queue parameters, link status) and the admin
//! connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use nvme_host::HostError;
use nvme_spec::{ControllerId, NamespaceId};

use crate::connection::QueueConnection;
use crate::io_queue::IoQueueInner;
use crate::ConnectOptions;

/// Most active NSIDs [`crate::Controller::active_namespaces`] lists: 64 Identify pages
/// (256 KiB). Far above what targets serve per subsystem (Sluice 4096, Linux
/// nvmet's NVMET_MAX_NAMESPACES 1024), so only a target inventing namespaces
/// reaches it.
pub const MAX_ACTIVE_NAMESPACES: usize = 64 * nvme_spec::identify::NAMESPACE_LIST_CAPACITY;

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

/// Times one command is sent again, for any reason, before the host gives up on
/// it: after a retryable status (queue deleted under it, transient transport
/// error, bad data digest) or on the new connection after a reconnect. Linux's
/// nvme_max_retries is 5 too, and counts both the same way. Without a bound, a
/// target that fails the connection whenever one command arrives (and accepts
/// the reconnect) keeps that command, and its caller, going for ever.
pub(crate) const MAX_COMMAND_RESENDS: u8 = 5;

/// Changed NSIDs kept for [`crate::Controller::take_namespace_changes`] before
/// they collapse into "every namespace may have changed" (the broadcast NSID, as
/// the Changed Namespace List itself reports an overflow). One log page's worth:
/// a target that keeps sending namespace notices cannot grow the list.
pub(crate) const MAX_PENDING_NAMESPACE_CHANGES: usize = 1024;

/// How the association's connections ended, so that a command the host gives up
/// on can say what the target did rather than only that it gave up.
#[derive(Debug, Default)]
pub(crate) struct FailureRecord {
    /// How the last association ended: the failure that asked for its reconnect.
    pub cause: Option<HostError>,
    /// Associations in a row that ended the same kind of way as `cause`.
    pub alike: u32,
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
    /// How the last associations ended.
    pub failures: Mutex<FailureRecord>,
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
            failures: Mutex::new(FailureRecord::default()),
        }
    }

    /// When a command first submitted at `submitted` must be over, whatever
    /// happens to its connections: one command timeout plus one controller loss
    /// timeout (it may wait out one whole outage), `None` when that is past what
    /// `Instant` holds (a controller loss timeout of "for ever").
    pub fn command_deadline(&self, submitted: Instant) -> Option<Instant> {
        let budget = self.options.command_timeout.checked_add(self.options.controller_loss_timeout)?;
        submitted.checked_add(budget)
    }

    /// The error for a command the host gives up on after `resends` resends (or,
    /// with `out_of_time`, when its deadline passed): how the last association
    /// ended, and whether every one it was sent on ended that way.
    pub fn gave_up(&self, resends: u8, out_of_time: bool) -> HostError {
        let failures = lock(&self.failures);
        let cause = failures.cause.clone().unwrap_or(HostError::ConnectionLost);
        let every_time = failures.alike > u32::from(resends);
        HostError::GaveUp { cause: Box::new(cause), resends, every_time, out_of_time }
    }

    /// Records NSIDs reported changed, bounded by [`MAX_PENDING_NAMESPACE_CHANGES`].
    pub fn record_namespace_changes(&self, changed: &[NamespaceId]) {
        let mut pending = lock(&self.namespace_changes);
        if pending.first() == Some(&NamespaceId::BROADCAST) {
            return;
        }
        for nsid in changed {
            if !pending.contains(nsid) {
                pending.push(*nsid);
            }
        }
        if pending.len() > MAX_PENDING_NAMESPACE_CHANGES || pending.contains(&NamespaceId::BROADCAST) {
            pending.clear();
            pending.push(NamespaceId::BROADCAST);
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

    /// A connection of association `epoch` failed (`cause` says how): ask for a
    /// new association unless someone already did. The first cause reported for an
    /// association is the one recorded.
    pub fn request_reconnect(&self, epoch: u64, cause: HostError) {
        let state = self.snapshot();
        if state.epoch == epoch && state.status == LinkStatus::Live {
            let mut first = false;
            self.update(|state| {
                if state.epoch == epoch && state.status == LinkStatus::Live {
                    state.status = LinkStatus::Reconnecting { since: Instant::now() };
                    first = true;
                }
            });
            if first {
                tracing::warn!(epoch, %cause, "connection lost; reconnecting the controller");
                let mut failures = lock(&self.failures);
                let alike = failures.cause.as_ref().is_some_and(|last| same_kind(last, &cause));
                failures.alike = if alike { failures.alike.saturating_add(1) } else { 1 };
                failures.cause = Some(cause);
            }
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

    /// Caches (or, with `None`, forgets) the block size of `nsid`; at most
    /// [`MAX_ACTIVE_NAMESPACES`] namespaces are kept, so notices
    /// naming ever new NSIDs cannot grow the cache.
    pub fn cache_block_size(&self, nsid: NamespaceId, block_size: Option<u32>) {
        let mut sizes = self.block_sizes.write().unwrap_or_else(|poison| poison.into_inner());
        if block_size.is_some() && sizes.len() >= MAX_ACTIVE_NAMESPACES && !sizes.contains_key(&nsid.0) {
            return;
        }
        match block_size {
            Some(bytes) => sizes.insert(nsid.0, bytes),
            None => sizes.remove(&nsid.0),
        };
    }
}

/// Two connection failures of the same kind (the same variant, and for a
/// termination request the same FES): details such as CIDs differ between
/// connections anyway.
fn same_kind(first: &HostError, second: &HostError) -> bool {
    match (first, second) {
        (HostError::TerminatedByTarget { status: a, .. }, HostError::TerminatedByTarget { status: b, .. }) => a == b,
        (HostError::InvalidPdu { kind: a }, HostError::InvalidPdu { kind: b }) => {
            std::mem::discriminant(a) == std::mem::discriminant(b)
        }
        _ => std::mem::discriminant(first) == std::mem::discriminant(second),
    }
}

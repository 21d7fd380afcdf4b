//! Persist Through Power Loss (PTPL): where a namespace's registrations and
//! reservation are kept so that a restart of the target finds them again.
//!
//! The target core does no I/O: the application gives the target a
//! [`ReservationStore`] (`sluice serve` keeps one file per namespace under
//! `[target] state_dir`). A reservation command that changes the state of a namespace
//! with PTPL on hands the new state to the store and completes only when the store
//! says it is durable; the store works on a thread of its own and wakes the
//! connection's thread, so no runtime thread waits for a disk. The state is taken and
//! handed over under the namespace's reservation mutex, so saves arrive in the order
//! the changes happened.

use std::sync::{Arc, Mutex};

use nvme_spec::NamespaceId;

use crate::reservations::ReservationState;

/// Which namespace a record belongs to. The NGUID identifies it across restarts (it
/// is derived from the subsystem NQN and NSID unless configured); NQN and NSID are
/// kept for people reading the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceKey {
    pub subsystem_nqn: String,
    pub namespace_id: NamespaceId,
    /// NGUID: namespace globally unique identifier.
    pub nguid: [u8; 16],
}

/// Durable storage of reservation state, one record per namespace.
pub trait ReservationStore: Send + Sync {
    /// The record of the namespace with this NGUID, if one was saved.
    fn load(&self, nguid: &[u8; 16]) -> Result<Option<ReservationState>, String>;

    /// Saves `state` (or, with `None`, forgets the namespace's record) durably, in
    /// call order, then calls `done.finish` from any thread.
    fn save(&self, key: NamespaceKey, state: Option<ReservationState>, done: PersistTicket);
}

/// The completion of one save: finished by the store (from any thread), collected by
/// the connection whose command waits for it, which it wakes.
pub type PersistTicket = storage::service::Ticket<Result<(), String>>;

/// A store in memory that finishes every save at once: for tests, and to show the
/// contract.
#[derive(Debug, Default)]
pub struct MemoryReservationStore {
    records: Mutex<Vec<(NamespaceKey, ReservationState)>>,
}

impl MemoryReservationStore {
    fn records(&self) -> std::sync::MutexGuard<'_, Vec<(NamespaceKey, ReservationState)>> {
        self.records.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.records().len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.records().is_empty()
    }
}

impl ReservationStore for MemoryReservationStore {
    fn load(&self, nguid: &[u8; 16]) -> Result<Option<ReservationState>, String> {
        Ok(self.records().iter().find(|(key, _)| key.nguid == *nguid).map(|(_, state)| state.clone()))
    }

    fn save(&self, key: NamespaceKey, state: Option<ReservationState>, done: PersistTicket) {
        let mut records = self.records();
        records.retain(|(known, _)| known.nguid != key.nguid);
        if let Some(state) = state {
            records.push((key, state));
        }
        drop(records);
        done.finish(Ok(()));
    }
}

/// Shared handle the target keeps.
pub type SharedReservationStore = Arc<dyn ReservationStore>;

//! The target's side of Persist Through Power Loss: a namespace's saved reservations
//! loaded once when it is first served, and a save's outcome turned into the
//! command's status. The store itself is `nvme_reservations::reservation_store`.

use crate::reservation_store::SharedReservationStore;

/// Loads the saved state of `namespace` once (when the store has one). A record that
/// cannot be read is logged as an error: the namespace then starts without
/// reservations, which the log line says, rather than refusing to serve.
pub(crate) fn restore(namespace: &crate::Namespace, store: &SharedReservationStore, subsystem_nqn: &str) {
    if namespace.reservations_restored.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    match store.load(&namespace.nguid) {
        Ok(Some(state)) => {
            let mut current = namespace.reservations.lock();
            *current = state;
            namespace.reservations.publish(&current);
            tracing::info!(subsystem = %subsystem_nqn, nsid = namespace.id.0, registrants = current.registrants.len(),
                held = current.holder.is_some(), "reservations restored (persist through power loss)");
        }
        Ok(None) => {}
        Err(error) => {
            tracing::error!(subsystem = %subsystem_nqn, nsid = namespace.id.0, %error,
                "saved reservations cannot be read: the namespace starts without registrations or reservation");
        }
    }
}

/// The status of a reservation command once the store answered. A failed save leaves
/// the new state in force but not durable: the host learns it (Internal Error) and
/// the log says why.
pub(crate) fn persist_status(result: Result<(), String>) -> nvme_spec::Status {
    match result {
        Ok(()) => nvme_spec::Status::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "reservation state not saved: it is in force but will not survive a restart");
            nvme_spec::Status::INTERNAL_ERROR
        }
    }
}

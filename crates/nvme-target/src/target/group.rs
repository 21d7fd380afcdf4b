//! The target's side of a gateway group's reservations (`group_reservations`):
//! installing the states the group publishes, and marking copies it cannot vouch
//! for.

use std::sync::Arc;

use super::Target;
use crate::write_fence::WriteFence;

impl Target {
    /// Keeps every subsystem's reservations in a gateway group's authority (call it
    /// right after `new`, before hosts connect). Set once.
    pub fn set_group_reservations(&self, group: crate::group_reservations::SharedGroupReservations) {
        let group = Arc::clone(self.group_reservations.get_or_init(|| group));
        for subsystem in self.subsystems() {
            subsystem.attach_group_reservations(Arc::clone(&group));
        }
    }

    /// Installs a state the gateway group published for the namespace with this
    /// NGUID (in every subsystem that has it), unless the copy here is newer, and
    /// tells this gateway's controllers of affected hosts.
    ///
    /// Returns the fence of the hosts whose registrations the new changes preempted
    /// (Preempt, Preempt and Abort), and the update's own change even if the copy had
    /// it already: their writes already at storage on this gateway. The group's
    /// authority must not count this gateway as having the change before the fence
    /// drained (the watch acknowledges only then), so that nothing a preempted host
    /// sent lands after the command is answered.
    pub fn install_group_reservations(
        &self,
        nguid: &[u8; 16],
        update: &crate::group_reservations::GroupUpdate,
    ) -> WriteFence {
        self.install_group_state(nguid, update, true)
    }

    /// Installs the state the group answered a command of this gateway with: newer
    /// than the copy perhaps, but it says nothing about changes after it, so a copy
    /// marked unknown stays unknown.
    pub(crate) fn install_group_answer(&self, nguid: &[u8; 16], update: &crate::group_reservations::GroupUpdate) {
        // The fence is the notice's to wait for: the watch's notice of a change
        // fences the hosts it preempted whether or not an answer installed it first.
        let _ = self.install_group_state(nguid, update, false);
    }

    /// Installs the state of a change this gateway made and whose own notice it did
    /// not acknowledge (its watch was lost while the change was notified, or its own
    /// fence did not drain within the bound), as `install_group_answer` does (a copy
    /// marked unknown stays unknown), and returns the fence of the hosts the change
    /// preempted: their writes already at storage here, which no notice waited for.
    /// The gateway must wait for it (or be fenced) before it answers the change.
    pub fn install_own_change(&self, nguid: &[u8; 16], update: &crate::group_reservations::GroupUpdate) -> WriteFence {
        self.install_group_state(nguid, update, false)
    }

    fn install_group_state(
        &self,
        nguid: &[u8; 16],
        update: &crate::group_reservations::GroupUpdate,
        vouched: bool,
    ) -> WriteFence {
        let mut fence = WriteFence::default();
        for subsystem in self.subsystems() {
            for entry in subsystem.table().entries().filter(|entry| entry.namespace.nguid == *nguid) {
                let applied = entry.namespace.reservations.install(update.sequence, &update.state, vouched);
                // After the install published the state (see `write_fence`): the hosts
                // preempted by the changes the copy takes on now, and by the update's
                // own change even when the copy had it already (the answer to a
                // refused command of this gateway installed it, or a newer notice came
                // first): this update's acknowledgement must wait for their writes
                // here all the same.
                let preempted: Vec<crate::reservations::HostId> = update
                    .notices
                    .iter()
                    .filter(|(sequence, _, notice)| {
                        *notice == crate::reservations::Notice::RegistrationPreempted
                            && (*sequence == update.sequence || applied.is_some_and(|applied| *sequence > applied))
                    })
                    .map(|(_, host, _)| *host)
                    .collect();
                fence.join(entry.namespace.writes.fence(&preempted));
                let Some(applied) = applied else { continue };
                let notices = crate::group_reservations::new_notices(update, applied);
                for controller in self.controllers_of(subsystem.index) {
                    for (host, notice) in &notices {
                        if controller.host_identifier == *host {
                            controller.note_reservation(entry.namespace.id, *notice);
                        }
                    }
                }
            }
        }
        fence
    }

    /// The gateway group can no longer vouch for this gateway's copy of the
    /// namespace's reservations: until a state is installed again, commands the
    /// reservation could refuse get a path error.
    pub fn mark_group_reservations_unknown(&self, nguid: &[u8; 16]) {
        for subsystem in self.subsystems() {
            for entry in subsystem.table().entries().filter(|entry| entry.namespace.nguid == *nguid) {
                entry.namespace.reservations.mark_unknown();
            }
        }
    }

    /// Namespaces whose gateway-group reservations are not known here (not loaded
    /// yet, or a lost watch).
    pub fn group_reservations_unknown(&self) -> usize {
        self.subsystems()
            .iter()
            .map(|subsystem| {
                subsystem.table().entries().filter(|entry| entry.namespace.reservations.is_unknown()).count()
            })
            .sum()
    }
}

//! Controllers that are not settled (a queue closed with requests still at storage,
//! or torn down with queues not yet drained): a Connect of the same host to the same
//! subsystem waits for them (see `quiesce`).

use std::sync::{Arc, Mutex};

use crate::controller::Controller;

/// Controllers that may not be settled. Short: an entry leaves at the first look after
/// its controller settled.
#[derive(Default)]
pub(crate) struct RetiringControllers {
    controllers: Mutex<Vec<Arc<Controller>>>,
}

impl RetiringControllers {
    /// `controller` was torn down or has a queue draining; it stays listed until
    /// settled.
    pub(crate) fn watch(&self, controller: &Arc<Controller>) {
        let mut controllers = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        controllers.retain(|listed| !listed.is_settled());
        let listed = controllers.iter().any(|listed| Arc::ptr_eq(listed, controller));
        if !listed && !controller.is_settled() {
            controllers.push(Arc::clone(controller));
        }
    }

    /// The CNTLID of a controller of this host in this subsystem that is not settled,
    /// if any.
    pub(crate) fn busy_for(&self, subsystem_index: usize, host_nqn: &str, host_identifier: &[u8; 16]) -> Option<u16> {
        let mut controllers = self.controllers.lock().unwrap_or_else(|poison| poison.into_inner());
        controllers.retain(|listed| !listed.is_settled());
        controllers
            .iter()
            .find(|listed| {
                listed.subsystem.as_ref().is_some_and(|subsystem| subsystem.index == subsystem_index)
                    && listed.host_nqn == host_nqn
                    && &listed.host_identifier == host_identifier
            })
            .map(|listed| listed.id.0)
    }
}

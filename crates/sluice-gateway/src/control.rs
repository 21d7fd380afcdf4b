//! How the management API reaches the coordinator thread: a drain, undrain or move is
//! queued, the thread is woken, runs it with its cluster client and its view of the
//! group between two rounds, and answers. The same signal tells the thread to stop.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::balance::PlacementChange;
use crate::published::StatusHandle;

/// A change to the placement record asked through the management API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlacementRequest {
    Drain(String),
    Undrain(String),
    /// ANA group `ana_group` to member `to`.
    Move {
        ana_group: u32,
        to: String,
    },
}

type Reply = mpsc::Sender<Result<PlacementChange, String>>;

#[derive(Default)]
pub(crate) struct Signals {
    pub(crate) stopping: bool,
    pub(crate) requests: Vec<(PlacementRequest, Reply)>,
}

/// Shared by the coordinator thread and its callers.
pub(crate) type SignalHandle = Arc<(Mutex<Signals>, Condvar)>;

pub(crate) fn lock(signals: &SignalHandle) -> std::sync::MutexGuard<'_, Signals> {
    signals.0.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// What the management API holds of a running gateway.
#[derive(Clone)]
pub struct GatewayHandle {
    pub status: StatusHandle,
    pub(crate) signals: SignalHandle,
}

impl GatewayHandle {
    /// Runs `request` on the coordinator thread; waits up to `timeout` for its answer.
    pub fn request(&self, request: PlacementRequest, timeout: Duration) -> Result<PlacementChange, String> {
        let (reply, answer) = mpsc::channel();
        {
            let mut signals = lock(&self.signals);
            if signals.stopping {
                return Err("the gateway is stopping".into());
            }
            signals.requests.push((request, reply));
        }
        self.signals.1.notify_all();
        answer.recv_timeout(timeout).map_err(|_| {
            format!(
                "the gateway's coordinator did not answer within {} ms (the cluster may be slow)",
                timeout.as_millis()
            )
        })?
    }
}

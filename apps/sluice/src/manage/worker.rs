//! The management thread: the one owner of [`Management`]. The socket thread hands it
//! each request and waits for the answer; the signal thread hands it reloads (SIGHUP).
//! So changes never run at the same time as each other, never on an I/O thread, and
//! a reload that builds storage never delays a SIGTERM.

use std::sync::mpsc;
use std::thread::JoinHandle;

use serde_json::Value;

use super::protocol::{Params, RpcError, INTERNAL_ERROR};
use super::service::Management;
use crate::notify;

enum Work {
    Call { method: String, params: Params, reply: mpsc::Sender<Result<Value, RpcError>> },
    Reload,
    /// A member changed the gateway group's configuration.
    GroupConfigChanged,
    Stop,
}

/// Hands work to the management thread; cheap to clone.
#[derive(Clone)]
pub struct ManagementHandle {
    sender: mpsc::Sender<Work>,
}

impl ManagementHandle {
    /// Runs one method on the management thread and waits for its answer.
    pub fn call(&self, method: &str, params: Params) -> Result<Value, RpcError> {
        let (reply, answer) = mpsc::channel();
        let gone = || RpcError::new(INTERNAL_ERROR, "the management thread has stopped; see the log");
        self.sender.send(Work::Call { method: method.to_string(), params, reply }).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    /// Asks the management thread to apply the gateway group's newest configuration
    /// (see `gateway::group_config`); returns at once.
    pub fn group_config_changed(&self) {
        let _ = self.sender.send(Work::GroupConfigChanged);
    }

    /// Asks for a reload of the config file and returns at once (the signal thread
    /// must stay free for SIGTERM).
    pub fn request_reload(&self) {
        if self.sender.send(Work::Reload).is_err() {
            tracing::warn!("reload not done: the management thread has stopped");
        }
    }
}

/// The running management thread; stopped on drop.
pub struct ManagementThread {
    handle: ManagementHandle,
    thread: Option<JoinHandle<()>>,
}

impl ManagementThread {
    pub fn start(management: Management) -> std::io::Result<ManagementThread> {
        let (sender, receiver) = mpsc::channel();
        let thread =
            std::thread::Builder::new().name("sluice-manage".into()).spawn(move || run(management, &receiver))?;
        Ok(ManagementThread { handle: ManagementHandle { sender }, thread: Some(thread) })
    }

    pub fn handle(&self) -> ManagementHandle {
        self.handle.clone()
    }
}

impl Drop for ManagementThread {
    fn drop(&mut self) {
        let _ = self.handle.sender.send(Work::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How often the management thread checks whether a namespace's storage grew
/// elsewhere (an RBD image resized with `rbd resize`, or through another gateway of
/// the group before this one applied the group's configuration).
const SIZE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

fn run(mut management: Management, receiver: &mpsc::Receiver<Work>) {
    let mut next_size_check = std::time::Instant::now() + SIZE_CHECK_INTERVAL;
    loop {
        let wait = next_size_check.saturating_duration_since(std::time::Instant::now());
        let work = match receiver.recv_timeout(wait) {
            Ok(work) => work,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| management.refresh_namespace_sizes())).is_err() {
                    tracing::error!("checking the namespaces' storage sizes panicked; see the log");
                }
                next_size_check = std::time::Instant::now() + SIZE_CHECK_INTERVAL;
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match work {
            Work::Call { method, params, reply } => {
                // A bug in one method must not take the management thread down with it.
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| management.call(&method, params)));
                let answer = outcome.unwrap_or_else(|_| {
                    tracing::error!(%method, "management method panicked");
                    Err(RpcError::new(INTERNAL_ERROR, format!("internal error in {method}; see the log")))
                });
                let _ = reply.send(answer);
            }
            Work::Reload => {
                notify::reloading();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| management.reload()));
                let status = match outcome {
                    Ok(outcome) => outcome.summary(),
                    Err(_) => {
                        tracing::error!("the reload panicked; the target may run part of the edited config file");
                        "reload failed with an internal error; see the log".to_string()
                    }
                };
                notify::ready(&status);
            }
            Work::GroupConfigChanged => {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| management.apply_group_config())).is_err() {
                    tracing::error!("applying the group's configuration panicked; see the log");
                }
            }
            Work::Stop => break,
        }
    }
}

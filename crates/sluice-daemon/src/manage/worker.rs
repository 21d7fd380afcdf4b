//! The management thread: the one owner of [`Management`]. The socket thread hands it
//! each request and waits for the answer; the signal thread hands it reloads (SIGHUP).
//! So changes never run at the same time as each other, never on an I/O thread, and
//! a reload that builds storage never delays a SIGTERM.
//!
//! A second thread checks every few seconds whether a namespace's storage grew
//! elsewhere (`rbd resize`, another gateway): reading an image's size may wait for the
//! cluster, which must not hold up management calls.

use std::sync::mpsc;
use std::thread::JoinHandle;

use serde_json::Value;

use super::protocol::{Params, RpcError, INTERNAL_ERROR};
use super::service::Management;
use crate::notify;

enum Work {
    Call {
        method: String,
        params: Params,
        reply: mpsc::Sender<Result<Value, RpcError>>,
    },
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
    /// The size checker: a message (or the sender's drop) stops it.
    size_check: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

/// How often a namespace's storage size is read again, to notice an RBD image resized
/// with `rbd resize`, or through another gateway of the group before this one applied
/// the group's configuration.
const SIZE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

fn check_sizes(target: &nvme_target::Target, stop: &mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(SIZE_CHECK_INTERVAL) {
        let checked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| super::service::refresh_namespace_sizes(target)));
        if checked.is_err() {
            tracing::error!("checking the namespaces' storage sizes panicked; see the log");
        }
    }
}

impl ManagementThread {
    pub fn start(mut management: Management) -> std::io::Result<ManagementThread> {
        // Clones whose copy a stop cut off are finished in the background.
        management.copy_unfinished_clones();
        let (sender, receiver) = mpsc::channel();
        let target = management.target();
        let (stop, stopped) = mpsc::channel();
        let checker =
            std::thread::Builder::new().name("sluice-sizes".into()).spawn(move || check_sizes(&target, &stopped))?;
        let thread =
            std::thread::Builder::new().name("sluice-manage".into()).spawn(move || run(management, &receiver))?;
        Ok(ManagementThread {
            handle: ManagementHandle { sender },
            thread: Some(thread),
            size_check: Some((stop, checker)),
        })
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
        if let Some((stop, checker)) = self.size_check.take() {
            let _ = stop.send(());
            let _ = checker.join();
        }
    }
}

fn run(mut management: Management, receiver: &mpsc::Receiver<Work>) {
    while let Ok(work) = receiver.recv() {
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

//! Reloading the config file (SIGHUP, `systemctl reload sluice`): the file is read,
//! checked like `sluice config check`, compared with the config the target runs
//! (`config::diff`), and the differences are applied through the same steps the
//! management API uses, without editing or writing the file (the operator did that).
//!
//! Two phases, so that a reload either applies or changes nothing:
//! 1. build every new piece (subsystems, namespaces, host rules) on top of the open
//!    storage. Any refusal (a backend that cannot be opened, a pool without room, an
//!    NSID a host took through Namespace Management) is logged with the file and the
//!    reason, what was built is dropped (carves it created are deleted again), and
//!    the target keeps running unchanged.
//!    New listeners are bound here too (an address in use refuses the reload).
//! 2. apply: host rules, namespace and subsystem removals, closing backends nothing
//!    uses any more, then additions, then listeners (removed ones stop accepting and
//!    close their connections; bound ones start accepting), through the runtime's
//!    live listeners as `listener_add`/`listener_remove` use them. The target itself
//!    rarely refuses at this point; a refusal is logged and the rest still applies.
//!
//! What cannot change while running (runtime threads, limits, a subsystem's serial,
//! a namespace whose storage changed under the same NSID, an open backend whose
//! definition changed) is logged as needing a restart, naming the key.

use std::net::SocketAddr;
use std::sync::Arc;

use nvme_spec::NamespaceId;
use nvme_target::{HostAccess, Subsystem};
use target_server::PendingListener;
use toml_edit::DocumentMut;

use super::views::NamespaceKey;
use super::Management;
use crate::manage::assemble::{self, BuiltNamespace, BuiltSubsystem};
use crate::manage::document::Namespaces;
use crate::manage::protocol::RpcError;
use sluice_config::{diff, Change, Config};

/// What a reload did, for the log and the service manager's status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// Changes applied.
    pub applied: usize,
    /// Changes that need a restart (logged with their key).
    pub needs_restart: usize,
    /// Changes the running target refused in the apply phase.
    pub failed: usize,
    /// Why nothing was applied (the file does not parse or check, or a piece could
    /// not be built); `None` when the reload went ahead.
    pub refused: Option<String>,
}

impl ReloadOutcome {
    fn refused(reason: String) -> ReloadOutcome {
        ReloadOutcome { applied: 0, needs_restart: 0, failed: 0, refused: Some(reason) }
    }

    /// One line for `STATUS=` and the log.
    pub fn summary(&self) -> String {
        match &self.refused {
            Some(reason) => format!("reload refused, running the previous configuration: {reason}"),
            None => format!(
                "reloaded: {} change(s) applied, {} need a restart, {} failed",
                self.applied, self.needs_restart, self.failed
            ),
        }
    }
}

/// A piece built in phase 1, applied in phase 2.
enum Prepared {
    Subsystem(BuiltSubsystem),
    Namespace {
        nqn: String,
        built: BuiltNamespace,
    },
    Hosts {
        nqn: String,
        rules: HostAccess,
    },
    /// Bound on every runtime thread, accepting once activated.
    Listener(PendingListener),
}

impl Management {
    /// Re-reads the config file and applies what changed (see the module comment).
    pub fn reload(&mut self) -> ReloadOutcome {
        let Some(file) = &self.config_file else {
            let reason =
                "sluice serve runs the embedded default configuration (no --config): there is no file to reload";
            tracing::warn!("{reason}");
            return ReloadOutcome::refused(reason.to_string());
        };
        let path = file.path.clone();
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) => return refuse(format!("cannot read the config file {shown}: {error}")),
        };
        // A gateway whose group's configuration is kept in the cluster runs the
        // file's own part with the group's current version.
        let text = match self.with_group_part(&text) {
            Ok(text) => text,
            Err(error) => return refuse(format!("config file {shown}: {error}")),
        };
        self.reload_text(text, &shown)
    }

    /// Applies `text` (a whole configuration; `shown` names where it came from)
    /// through the two phases of the module comment.
    pub(crate) fn reload_text(&mut self, text: String, shown: &str) -> ReloadOutcome {
        let Some(file) = &self.config_file else {
            return refuse("no config file".to_string());
        };
        if text == file.text {
            tracing::info!(path = %shown, "reload: the config file is unchanged");
            return ReloadOutcome { applied: 0, needs_restart: 0, failed: 0, refused: None };
        }
        let edited = match Config::parse(&text) {
            Ok(config) => config,
            Err(message) => return refuse(format!("config file {shown}: {message}")),
        };
        if let Err(error) = edited.check() {
            return refuse(format!("config file {shown}: {error}"));
        }
        let running = match Config::parse(&file.text) {
            Ok(config) => config,
            Err(message) => return refuse(format!("the running configuration no longer parses ({message}); restart")),
        };
        let document = match text.parse::<DocumentMut>() {
            Ok(document) => document,
            Err(error) => return refuse(format!("config file {shown}: {error}")),
        };
        let changes = diff(&running, &edited);
        tracing::info!(path = %shown, changes = changes.len(), "reload: applying the edited config file");
        let prepared = match self.prepare(&document, &running, &changes) {
            Ok(prepared) => prepared,
            Err(reason) => return refuse(format!("config file {shown}: {reason}")),
        };
        let mut outcome = self.apply(&edited, &changes, prepared);
        if let Some(file) = self.config_file.as_mut() {
            // The file is what the target runs now (or will after the restart the log
            // asks for); management API changes edit it from here on.
            file.text = text;
        }
        outcome.refused = None;
        if outcome.failed > 0 {
            tracing::error!(path = %shown, "{}; the running target differs from the file where logged above", outcome.summary());
        } else {
            tracing::info!(path = %shown, "{}", outcome.summary());
        }
        outcome
    }

    /// Phase 1: builds every new piece; the first refusal refuses the whole reload.
    fn prepare(
        &mut self,
        document: &DocumentMut,
        running: &Config,
        changes: &[Change],
    ) -> Result<Vec<Prepared>, String> {
        let removed = removed_namespaces(running, changes);
        let mut prepared = Vec::new();
        let fail = |change: &Change, error: RpcError| format!("cannot apply \"{change}\": {}", error.message);
        for change in changes {
            match change {
                Change::SubsystemAdded { nqn } => {
                    let mut built = assemble::build_subsystem(document, nqn, Namespaces::All, &self.storage)
                        .map_err(|error| fail(change, error))?;
                    self.refuse_served(&built.reused_backends, &removed).map_err(|error| fail(change, error))?;
                    // Later builds of this reload must see what this one opened.
                    built.storage.share_opened(&mut self.storage);
                    prepared.push(Prepared::Subsystem(built));
                }
                Change::NamespaceAdded { nqn, nsid } => {
                    let subsystem = self.live_subsystem(nqn).map_err(|error| fail(change, error))?;
                    if subsystem.namespace(NamespaceId(*nsid)).is_some() {
                        return Err(format!(
                            "cannot apply \"{change}\": subsystem {nqn} already serves namespace {nsid} (created \
                             through Namespace Management); give the new entry another nsid"
                        ));
                    }
                    let mut built = assemble::build_namespace(document, nqn, *nsid, &self.storage)
                        .map_err(|error| fail(change, error))?;
                    self.refuse_served(&built.reused_backends, &removed).map_err(|error| fail(change, error))?;
                    built.storage.share_opened(&mut self.storage);
                    prepared.push(Prepared::Namespace { nqn: nqn.clone(), built });
                }
                Change::HostsChanged { nqn } => {
                    let built = assemble::build_subsystem(document, nqn, Namespaces::None, &self.storage)
                        .map_err(|error| fail(change, error))?;
                    prepared.push(Prepared::Hosts { nqn: nqn.clone(), rules: built.spec.hosts });
                }
                Change::ListenerAdded { address, discovery_only, secure_channel } => {
                    let (Some(live), Ok(address)) = (&self.live_listeners, address.parse::<SocketAddr>()) else {
                        continue;
                    };
                    // An address that changes its role is bound after its old listener
                    // closes (phase 2).
                    if live.find(address).is_some() {
                        continue;
                    }
                    let pending = live
                        .bind(address, *discovery_only, *secure_channel)
                        .map_err(|error| format!("cannot apply \"{change}\": cannot listen on {address}: {error}"))?;
                    prepared.push(Prepared::Listener(pending));
                }
                _ => {}
            }
        }
        Ok(prepared)
    }

    /// Phase 2: removals first (so that storage they let go of can be reused), then
    /// additions, listeners, and what needs a restart.
    fn apply(&mut self, edited: &Config, changes: &[Change], prepared: Vec<Prepared>) -> ReloadOutcome {
        let mut outcome = ReloadOutcome { applied: 0, needs_restart: 0, failed: 0, refused: None };
        let mut additions = Vec::new();
        let mut listeners = Vec::new();
        for piece in prepared {
            match piece {
                Prepared::Hosts { nqn, rules } => match self.target.subsystem_by_nqn(&nqn) {
                    Some(subsystem) => {
                        let disconnected = self.apply_host_rules(&subsystem, rules);
                        tracing::info!(subsystem = %nqn, disconnected, "reload: allowed hosts replaced");
                        outcome.applied += 1;
                    }
                    None => {
                        tracing::error!(subsystem = %nqn, "reload: the subsystem is not running; its hosts were not changed");
                        outcome.failed += 1;
                    }
                },
                other => additions.push(other),
            }
        }
        for change in changes {
            match change {
                Change::NamespaceRemoved { nqn, nsid } => self.remove_namespace_for_reload(nqn, *nsid, &mut outcome),
                Change::SubsystemRemoved { nqn } => match self.target.remove_subsystem(nqn) {
                    Ok(_) => {
                        tracing::info!(subsystem = %nqn, "reload: subsystem removed");
                        outcome.applied += 1;
                    }
                    Err(error) => {
                        tracing::error!(subsystem = %nqn, %error, "reload: the subsystem could not be removed");
                        outcome.failed += 1;
                    }
                },
                _ => {}
            }
        }
        let closed = self.storage.close_unused(edited);
        if !closed.is_empty() {
            tracing::info!(?closed, "reload: closed backends the config file no longer names");
        }
        for piece in additions {
            match piece {
                Prepared::Subsystem(built) => {
                    let nqn = built.spec.nqn.clone();
                    match self.apply_subsystem(built) {
                        Ok(_) => {
                            tracing::info!(subsystem = %nqn, "reload: subsystem added");
                            outcome.applied += 1;
                        }
                        Err(refusal) => {
                            tracing::error!(subsystem = %nqn, %refusal, "reload: the subsystem could not be added");
                            outcome.failed += 1;
                        }
                    }
                }
                Prepared::Namespace { nqn, built } => {
                    let applied = match self.target.subsystem_by_nqn(&nqn) {
                        Some(subsystem) => self.apply_namespace(&subsystem, built),
                        None => Err(format!("subsystem {nqn} is not running")),
                    };
                    match applied {
                        Ok(namespace) => {
                            tracing::info!(subsystem = %nqn, nsid = %namespace["nsid"], "reload: namespace added");
                            outcome.applied += 1;
                        }
                        Err(refusal) => {
                            tracing::error!(subsystem = %nqn, %refusal, "reload: the namespace could not be added");
                            outcome.failed += 1;
                        }
                    }
                }
                Prepared::Hosts { .. } | Prepared::Listener(_) => listeners.push(piece),
            }
        }
        self.apply_listeners(changes, listeners, &mut outcome);
        // Host lists follow the file whole, after the hosts they name were allowed.
        sluice_config::attachment::apply(&self.target, edited);
        for change in changes {
            if let Change::AttachmentChanged { nqn, nsid } = change {
                tracing::info!(subsystem = %nqn, nsid, "reload: the namespace's hosts applied");
                outcome.applied += 1;
            }
        }
        // Sizes grow after additions, so a grown backend's new namespaces grow too.
        for change in changes {
            if matches!(change, Change::NamespaceGrown { .. } | Change::BackendGrown { .. }) {
                match self.apply_grown(change) {
                    Ok(()) => {
                        tracing::info!("reload: {change}; hosts were told");
                        outcome.applied += 1;
                    }
                    Err(error) => {
                        tracing::error!(%error, "reload: {change} could not be applied");
                        outcome.failed += 1;
                    }
                }
            }
        }
        for change in changes {
            if let Change::NeedsRestart { key, reason } = change {
                tracing::warn!("reload: {key} changed: {reason}");
                outcome.needs_restart += 1;
            }
        }
        // Limits follow the file whole (new namespaces get theirs too); unchanged
        // ones keep their buckets and the commands waiting in them.
        match sluice_config::qos::apply(&self.target, edited) {
            Ok(()) => {
                for change in changes {
                    if let Change::QosChanged { nqn } = change {
                        tracing::info!(subsystem = %nqn, "reload: QoS limits applied");
                        outcome.applied += 1;
                    }
                }
            }
            Err(error) => {
                tracing::error!(%error, "reload: the QoS limits could not be applied");
                outcome.failed += 1;
            }
        }
        // Compared with the definitions the open entries were built from, which a
        // reload before this one may already have changed.
        for (entry, key) in self.storage.changed_definitions(edited) {
            tracing::warn!("reload: {entry}.{key} changed, but {entry} is open: takes effect at the next start");
            outcome.needs_restart += 1;
        }
        outcome
    }

    /// Listener changes through the runtime's live listeners: removals first (their
    /// connections close), then the listeners bound in phase 1 start accepting, then
    /// addresses that changed their role are bound again. Without a runtime attached
    /// (tests), they take effect at the next start.
    fn apply_listeners(&mut self, changes: &[Change], prepared: Vec<Prepared>, outcome: &mut ReloadOutcome) {
        let Some(live) = self.live_listeners.clone() else {
            for change in changes {
                if matches!(change, Change::ListenerAdded { .. } | Change::ListenerRemoved { .. }) {
                    tracing::warn!("reload: {change}: listener changes take effect at the next start");
                    outcome.needs_restart += 1;
                }
            }
            return;
        };
        let mut failed = |change: &Change, error: String| {
            tracing::error!("reload: {change}: {error}");
            outcome.failed += 1;
        };
        let mut applied = 0;
        for change in changes {
            let Change::ListenerRemoved { address } = change else { continue };
            let Some(listener) = address.parse::<SocketAddr>().ok().and_then(|address| live.find(address)) else {
                continue;
            };
            match live.remove(listener.id) {
                Ok(closed) => {
                    tracing::info!(%address, connections_closed = closed, "reload: listener removed");
                    applied += 1;
                }
                Err(error) => failed(change, error.to_string()),
            }
        }
        for piece in prepared {
            let Prepared::Listener(pending) = piece else { continue };
            let address = pending.address();
            match live.activate(pending) {
                Ok(_) => {
                    tracing::info!(%address, "reload: listener added");
                    applied += 1;
                }
                Err(error) => failed(
                    &Change::ListenerAdded {
                        address: address.to_string(),
                        discovery_only: false,
                        secure_channel: Default::default(),
                    },
                    error.to_string(),
                ),
            }
        }
        for change in changes {
            let Change::ListenerAdded { address, discovery_only, secure_channel } = change else { continue };
            let Ok(parsed) = address.parse::<SocketAddr>() else { continue };
            if live.find(parsed).is_some() {
                continue;
            }
            match live
                .bind(parsed, *discovery_only, *secure_channel)
                .map_err(|error| error.to_string())
                .and_then(|pending| live.activate(pending).map_err(|error| error.to_string()))
            {
                Ok(_) => {
                    tracing::info!(%address, discovery_only, "reload: listener added");
                    applied += 1;
                }
                Err(error) => failed(change, error),
            }
        }
        outcome.applied += applied;
    }

    /// Removes a namespace the file no longer lists, as a restart would: a carve of
    /// the subsystem's own Namespace Management pool stays (the pool's table keeps
    /// it bound to the subsystem, and a restart serves it too).
    fn remove_namespace_for_reload(&mut self, nqn: &str, nsid: u32, outcome: &mut ReloadOutcome) {
        let Some(subsystem) = self.target.subsystem_by_nqn(nqn) else { return };
        let id = NamespaceId(nsid);
        let Some(namespace) = subsystem.namespace(id) else { return };
        let own_pool = namespace
            .carve
            .as_ref()
            .zip(subsystem.pool.as_ref())
            .is_some_and(|(carve, pool)| Arc::ptr_eq(&carve.pool, pool));
        if own_pool {
            tracing::warn!(subsystem = %nqn, nsid,
                "reload: the namespace is a carve of the subsystem's Namespace Management pool and stays, served from \
                 the pool's table (as after a restart); delete it with `sluice ns remove`");
            return;
        }
        match subsystem.remove_namespace(id) {
            Ok(change) => {
                self.target.notify_namespace_change(&subsystem, &change);
                tracing::info!(subsystem = %nqn, nsid, "reload: namespace removed");
                outcome.applied += 1;
            }
            Err(error) => {
                tracing::error!(subsystem = %nqn, nsid, %error, "reload: the namespace could not be removed");
                outcome.failed += 1;
            }
        }
    }

    /// Puts a built subsystem in force and keeps the storage its build opened.
    pub(super) fn apply_subsystem(&mut self, built: BuiltSubsystem) -> Result<Arc<Subsystem>, String> {
        let BuiltSubsystem { spec, storage, attachments, .. } = built;
        let subsystem = self.target.add_subsystem(spec).map_err(|error| error.to_string())?;
        // Right after the add, before any host could have connected to the new
        // subsystem and found its namespaces.
        for (nsid, attachment) in attachments {
            if let Err(error) = subsystem.set_configured_attachment(NamespaceId(nsid), attachment) {
                tracing::error!(subsystem = %subsystem.nqn, nsid, %error, "the namespace's hosts could not be applied");
            }
        }
        storage.keep(&mut self.storage);
        Ok(subsystem)
    }
}

/// Logs why a reload changed nothing and says so.
fn refuse(reason: String) -> ReloadOutcome {
    tracing::error!("reload refused, still running the previous configuration: {reason}");
    ReloadOutcome::refused(reason)
}

/// The namespaces a reload takes away: those removed, and those of removed subsystems.
fn removed_namespaces(running: &Config, changes: &[Change]) -> Vec<NamespaceKey> {
    let mut removed = Vec::new();
    for change in changes {
        match change {
            Change::NamespaceRemoved { nqn, nsid } => removed.push((nqn.clone(), *nsid)),
            Change::SubsystemRemoved { nqn } => {
                let subsystem = running.subsystems.iter().find(|subsystem| &subsystem.nqn == nqn);
                let mut next = 1u32;
                for namespace in subsystem.iter().flat_map(|subsystem| &subsystem.namespaces) {
                    let nsid = namespace.nsid.unwrap_or(next);
                    next = nsid.saturating_add(1);
                    removed.push((nqn.clone(), nsid));
                }
            }
            _ => {}
        }
    }
    removed
}

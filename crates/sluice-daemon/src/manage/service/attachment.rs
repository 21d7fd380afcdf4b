//! `ns_attach` and `ns_detach`: which hosts see a namespace (NVMe Namespace
//! Attachment through the management API).
//!
//! A namespace of the config file is attached through its `hosts` list (see
//! `config::attachment`), edited and written like every other change before the
//! running target sees it. A namespace a host created through Namespace Management
//! is not in the file; its attachment is changed in the target, which keeps it in
//! the pool's table.
//!
//! Both methods are idempotent: attaching an attached host or detaching a detached
//! one succeeds with `"change": "unchanged"` and writes nothing, so that a caller
//! that retries (a CSI driver after a timeout) needs no special case. Detaching the
//! last host leaves `hosts = []`: the namespace is then seen by no host, never by
//! every host.

use serde_json::{json, Value};
use toml_edit::{value, Array, Table};

use nvme_spec::NamespaceId;
use nvme_target::{Attachment, ManagementError, Subsystem};

use super::Management;
use crate::manage::assemble::edit_error;
use crate::manage::document;
use crate::manage::protocol::{Params, RpcError, APPLY_FAILED};

/// What an edit of a `hosts` list did.
enum HostsEdit {
    /// The list now reads so.
    Changed(Vec<String>),
    /// Nothing to do; the attachment as it stays (`None`: every admitted host).
    Unchanged(Option<Vec<String>>),
}

impl Management {
    pub(super) fn ns_attach(&mut self, params: Params) -> Result<Value, RpcError> {
        self.change_namespace_hosts(params, true)
    }

    pub(super) fn ns_detach(&mut self, params: Params) -> Result<Value, RpcError> {
        self.change_namespace_hosts(params, false)
    }

    fn change_namespace_hosts(&mut self, mut params: Params, attach: bool) -> Result<Value, RpcError> {
        let method = if attach { "ns_attach" } else { "ns_detach" };
        let nqn = params.required_string("nqn")?;
        let nsid = params.required_u32("nsid")?;
        let host = params.required_string("host")?;
        params.finish(method)?;
        nvme_target::subsystem::validate_nqn(&host).map_err(|reason| RpcError::invalid_params("host", reason))?;
        let subsystem = self.live_subsystem(&nqn)?;
        let id = NamespaceId(nsid);
        let Some(entry) = subsystem.table().get(id).cloned() else {
            return Err(RpcError::refused(
                "nsid",
                format!("subsystem {nqn} has no namespace {nsid} (`sluice ns list`)"),
            )
            .with_cause(management_client::codes::causes::NOT_FOUND));
        };
        let rules = subsystem.hosts.current();
        if attach && !rules.allows(&host) {
            return Err(RpcError::refused(
                "host",
                format!(
                    "host {host} is not allowed on subsystem {nqn}, so it could never see the namespace; \
                     allow it first (`sluice host allow --nqn {nqn} --host {host}`)"
                ),
            ));
        }
        if entry.managed {
            return self.change_managed_attachment(&subsystem, nsid, &host, attach);
        }
        let mut draft = self.draft()?;
        let Some(table) = document::namespace_mut(&mut draft.document, &nqn, nsid).map_err(edit_error)? else {
            return Err(RpcError::refused(
                "nsid",
                format!(
                    "namespace {nsid} of {nqn} is not in the config file (a carve of the subsystem's pool the file \
                     no longer lists); remove it (`sluice ns remove`) or add its entry back to the file"
                ),
            ));
        };
        // "Every admitted host" as a list, for a detach from a namespace without one.
        let admitted = (!rules.allow_any_host).then(|| rules.hosts.iter().map(|entry| entry.nqn.clone()).collect());
        let edit = edit_hosts(table, &host, attach, admitted).map_err(|reason| RpcError::refused("nsid", reason))?;
        let hosts = match edit {
            HostsEdit::Unchanged(hosts) => return Ok(answer(&nqn, nsid, &host, "unchanged", hosts.as_deref(), true)),
            HostsEdit::Changed(hosts) => hosts,
        };
        let text = self.check(&draft)?;
        self.write(&text)?;
        match subsystem.set_configured_attachment(id, Attachment::Hosts(hosts.clone())) {
            Ok(change) => {
                if let Some(change) = change {
                    self.target.notify_namespace_change(&subsystem, &change);
                }
                tracing::info!(subsystem = %nqn, nsid, %host, attach, ?hosts, "management: namespace attachment changed");
                let change = if attach { "attached" } else { "detached" };
                Ok(answer(&nqn, nsid, &host, change, Some(&hosts), true))
            }
            Err(error) => Err(self.restore(draft.previous, error.to_string())),
        }
    }

    /// A namespace a host created: attached in the target (which saves the pool's
    /// table), "already" and "not attached" being the unchanged answers.
    fn change_managed_attachment(
        &mut self,
        subsystem: &Subsystem,
        nsid: u32,
        host: &str,
        attach: bool,
    ) -> Result<Value, RpcError> {
        let nqn = &subsystem.nqn;
        let id = NamespaceId(nsid);
        let (change, label) = match subsystem.change_attachment(id, &[host.to_string()], attach) {
            Ok(change) => (Some(change), if attach { "attached" } else { "detached" }),
            Err(ManagementError::AlreadyAttached(_) | ManagementError::NotAttached(_)) => (None, "unchanged"),
            Err(error) => return Err(RpcError::new(APPLY_FAILED, format!("the running target refused: {error}"))),
        };
        if let Some(change) = change {
            self.target.notify_namespace_change(subsystem, &change);
            tracing::info!(subsystem = %nqn, nsid, %host, attach, "management: attachment of a host-created namespace changed");
        }
        let hosts = match subsystem.table().get(id).map(|entry| entry.attachment.clone()) {
            Some(Attachment::Hosts(hosts)) => Some(hosts),
            _ => None,
        };
        Ok(answer(nqn, nsid, host, label, hosts.as_deref(), false))
    }

    /// `host_deny` of a host some namespace is still attached to is refused: a
    /// configured namespace's `hosts` list would then name a host the subsystem does
    /// not admit, which the config check refuses, and a namespace a host created
    /// would keep an attachment nobody could use or see through the denied host
    /// (and would show again, unasked, if the host were allowed back). The message
    /// says what to do instead.
    pub(super) fn refuse_deny_of_attached_host(&self, nqn: &str, host: &str) -> Result<(), RpcError> {
        let Some(config) = self.running_config() else { return Ok(()) };
        let Some(subsystem) = config.subsystems.iter().find(|subsystem| subsystem.nqn == nqn) else { return Ok(()) };
        if subsystem.allow_any_host.unwrap_or(false) {
            return Ok(());
        }
        let mut attached = sluice_config::attachment::attached_to(subsystem, host);
        if let Some(live) = self.target.subsystem_by_nqn(nqn) {
            let created_by_hosts = live
                .table()
                .entries()
                .filter(|entry| {
                    entry.managed && matches!(&entry.attachment, Attachment::Hosts(hosts) if hosts.iter().any(|listed| listed == host))
                })
                .map(|entry| entry.namespace.id.0)
                .collect::<Vec<_>>();
            attached.extend(created_by_hosts);
            attached.sort_unstable();
            attached.dedup();
        }
        let Some(first) = attached.first() else { return Ok(()) };
        Err(RpcError::refused(
            "host",
            format!(
                "host {host} is still attached to namespace(s) {attached:?} of {nqn} (a `hosts` list, or a namespace a \
                 host created); detach it first (`sluice ns detach --nqn {nqn} --nsid {first} --host {host}`)"
            ),
        )
        .with_cause(management_client::codes::causes::IN_USE))
    }
}

/// Adds or removes `host` in the namespace entry's `hosts` list. Without a list the
/// namespace is attached to every admitted host: attaching changes nothing, and
/// detaching writes the list of the other admitted hosts (`admitted`; `None` when
/// the subsystem admits any host, which no list can spell out: refused).
fn edit_hosts(table: &mut Table, host: &str, attach: bool, admitted: Option<Vec<String>>) -> Result<HostsEdit, String> {
    let Some(item) = table.get_mut("hosts") else {
        if attach {
            return Ok(HostsEdit::Unchanged(None));
        }
        let Some(admitted) = admitted else {
            return Err("the namespace has no hosts list and the subsystem allows any host, so every host sees it; \
                        give it an explicit list first (hosts = [...] in its config entry, then reload)"
                .to_string());
        };
        let others: Vec<String> = admitted.into_iter().filter(|entry| entry != host).collect();
        table.insert("hosts", value(others.iter().map(String::as_str).collect::<Array>()));
        return Ok(HostsEdit::Changed(others));
    };
    let Some(array) = item.as_array_mut() else {
        return Err("its hosts key is not an array of host NQNs; edit the file by hand".to_string());
    };
    let current: Vec<String> = array.iter().filter_map(|entry| entry.as_str().map(str::to_string)).collect();
    let present = current.iter().any(|entry| entry == host);
    match (attach, present) {
        (true, true) | (false, false) => return Ok(HostsEdit::Unchanged(Some(current))),
        (true, false) => array.push(host),
        (false, true) => array.retain(|entry| entry.as_str() != Some(host)),
    }
    let updated = array.iter().filter_map(|entry| entry.as_str().map(str::to_string)).collect();
    Ok(HostsEdit::Changed(updated))
}

fn answer(nqn: &str, nsid: u32, host: &str, change: &str, hosts: Option<&[String]>, in_config_file: bool) -> Value {
    json!({
        "nqn": nqn,
        "nsid": nsid,
        "host": host,
        "change": change,
        "all_hosts": hosts.is_none(),
        "hosts": hosts,
        "in_config_file": in_config_file,
    })
}

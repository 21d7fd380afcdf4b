//! Which hosts see a namespace: the `hosts` key of `[[subsystem.namespace]]` (NVMe
//! Namespace Attachment, declared in the configuration).
//!
//! Absent, the namespace is attached to every host the subsystem admits (as before
//! the key existed); a list limits it to those hosts; an empty list attaches it to
//! no host. The empty list is written out rather than dropped so that a namespace
//! whose last host was detached stays hidden instead of falling back to everyone.
//!
//! Like QoS limits, the attachments are applied to the running target whole
//! (`apply`): at start before the listeners open, after a reload, and after a
//! management API change. A namespace a host created through Namespace Management
//! is not in the file; its attachment stays in its pool's table.

use nvme_spec::NamespaceId;
use nvme_target::{Attachment, Target};

use super::qos::numbered;
use super::{invalid, Config, ConfigError, NamespaceConfig, SubsystemConfig};

/// The attachment `namespace` declares.
pub fn of(namespace: &NamespaceConfig) -> Attachment {
    match &namespace.hosts {
        None => Attachment::AllHosts,
        Some(hosts) => Attachment::Hosts(hosts.clone()),
    }
}

/// Checks every `hosts` key: NQNs that are valid, listed once, and admitted by the
/// subsystem. A host the subsystem does not admit could never connect to see the
/// namespace, so listing it is a mistake (most likely a typo, or a host denied
/// while still attached) that the file must not keep silently; with
/// `allow_any_host = true` every host is admitted and any NQN may be listed.
pub fn check(config: &Config) -> Result<(), ConfigError> {
    for (subsystem_index, subsystem) in config.subsystems.iter().enumerate() {
        for (namespace_index, namespace) in subsystem.namespaces.iter().enumerate() {
            let Some(hosts) = &namespace.hosts else { continue };
            let location =
                format!("subsystem[{subsystem_index}] ({}) namespace[{namespace_index}].hosts", subsystem.nqn);
            for (index, host) in hosts.iter().enumerate() {
                nvme_target::subsystem::validate_nqn(host)
                    .map_err(|reason| invalid(&location, format!("{host:?} is not a host NQN: {reason}")))?;
                if hosts[..index].contains(host) {
                    return Err(invalid(&location, format!("{host:?} is listed twice; list each host once")));
                }
                if !admits(subsystem, host) {
                    return Err(invalid(
                        &location,
                        format!(
                            "{host:?} is not allowed on the subsystem: add a [[subsystem.host]] entry for it \
                             (`sluice host allow`), or remove it from the list"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn admits(subsystem: &SubsystemConfig, host: &str) -> bool {
    subsystem.allow_any_host.unwrap_or(false) || subsystem.hosts.iter().any(|entry| entry.nqn == host)
}

/// The namespaces of `subsystem` (by NSID) whose `hosts` list names `host`.
pub fn attached_to(subsystem: &SubsystemConfig, host: &str) -> Vec<u32> {
    numbered(&subsystem.namespaces)
        .into_iter()
        .filter(|(_, namespace)| namespace.hosts.as_ref().is_some_and(|hosts| hosts.iter().any(|entry| entry == host)))
        .map(|(nsid, _)| nsid)
        .collect()
}

/// Puts every configured attachment in force on the running target and tells the
/// connected hosts whose view changed (Namespace Attribute Changed). Returns how
/// many namespaces changed. Namespaces the running target does not serve (not
/// available) or that hosts created are left alone; a refusal is logged.
pub fn apply(target: &Target, config: &Config) -> usize {
    let mut changed = 0;
    for subsystem_config in &config.subsystems {
        let Some(subsystem) = target.subsystem_by_nqn(&subsystem_config.nqn) else { continue };
        for (nsid, namespace) in numbered(&subsystem_config.namespaces) {
            let id = NamespaceId(nsid);
            if subsystem.table().get(id).is_none_or(|entry| entry.managed) {
                continue;
            }
            match subsystem.set_configured_attachment(id, of(namespace)) {
                Ok(Some(change)) => {
                    target.notify_namespace_change(&subsystem, &change);
                    changed += 1;
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::error!(subsystem = %subsystem.nqn, nsid, %error, "the namespace's hosts could not be applied");
                }
            }
        }
    }
    changed
}

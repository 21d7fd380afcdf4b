//! What differs between the configuration a target runs and an edited file: the list
//! of changes a reload (SIGHUP) applies, and what only a restart can change.
//!
//! A pure function of two parsed configs, so that it is tested without a target. It
//! compares by identity: subsystems by NQN, namespaces by (NQN, NSID) with NSIDs
//! numbered the way the config module numbers them (explicit, else the previous one
//! plus one), listeners by address, storage entries by name.

use std::net::SocketAddr;

use super::schema::{BackendConfig, StorageKind};
use super::{BackendKind, ByteSize, Config, ListenerConfig, NamespaceConfig, SubsystemConfig};

/// One difference, as a reload applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A `[[subsystem]]` the running config does not have (with its namespaces and hosts).
    SubsystemAdded {
        nqn: String,
    },
    /// A `[[subsystem]]` the file no longer has.
    SubsystemRemoved {
        nqn: String,
    },
    /// A namespace of a subsystem in both configs that only the file has.
    NamespaceAdded {
        nqn: String,
        nsid: u32,
    },
    /// A namespace of a subsystem in both configs that the file no longer has.
    NamespaceRemoved {
        nqn: String,
        nsid: u32,
    },
    /// `allow_any_host` or the `[[subsystem.host]]` entries (NQNs or secrets) changed.
    HostsChanged {
        nqn: String,
    },
    /// A namespace's `qos` table or a host's `qos` entries changed (applied live,
    /// without reconnecting anyone).
    QosChanged {
        nqn: String,
    },
    /// A namespace's `hosts` list changed (applied live: the hosts that gain or lose
    /// it get a Namespace Attribute Changed notice).
    AttachmentChanged {
        nqn: String,
        nsid: u32,
    },
    /// Only a namespace's inline `size` changed, and grew: the namespace grows live
    /// (a pool carve, a file), and its hosts get a Namespace Attribute Changed notice.
    NamespaceGrown {
        nqn: String,
        nsid: u32,
        size_bytes: u64,
    },
    /// Only a `[[backend]]`'s `size` changed, and grew: the open backend grows live
    /// (an RBD image another gateway of the group has already grown, a file), and so
    /// do the namespaces over it.
    BackendGrown {
        name: String,
        size_bytes: u64,
    },
    ListenerAdded {
        address: String,
        discovery_only: bool,
        secure_channel: nvme_target::SecureChannel,
    },
    ListenerRemoved {
        address: String,
    },
    /// A `[[backend]]` or `[[pool]]` entry (`entry` is `backend "x"` or `pool "p"`)
    /// whose `key` changed: nothing to do unless it is open, which only a restart
    /// can change.
    StorageChanged {
        entry: String,
        key: &'static str,
    },
    /// Cannot be applied while running; `key` names the setting (`runtime.threads`,
    /// `subsystem "nqn".serial`, `subsystem "nqn" namespace 3.device`).
    NeedsRestart {
        key: String,
        reason: &'static str,
    },
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::SubsystemAdded { nqn } => write!(f, "subsystem {nqn} added"),
            Change::SubsystemRemoved { nqn } => write!(f, "subsystem {nqn} removed"),
            Change::NamespaceAdded { nqn, nsid } => write!(f, "namespace {nsid} of {nqn} added"),
            Change::NamespaceRemoved { nqn, nsid } => write!(f, "namespace {nsid} of {nqn} removed"),
            Change::HostsChanged { nqn } => write!(f, "allowed hosts of {nqn} changed"),
            Change::QosChanged { nqn } => write!(f, "QoS limits of {nqn} changed"),
            Change::AttachmentChanged { nqn, nsid } => write!(f, "hosts of namespace {nsid} of {nqn} changed"),
            Change::NamespaceGrown { nqn, nsid, size_bytes } => {
                write!(f, "namespace {nsid} of {nqn} grown to {size_bytes} bytes")
            }
            Change::BackendGrown { name, size_bytes } => write!(f, "backend {name:?} grown to {size_bytes} bytes"),
            Change::ListenerAdded { address, .. } => write!(f, "listener {address} added"),
            Change::ListenerRemoved { address } => write!(f, "listener {address} removed"),
            Change::StorageChanged { entry, key } => write!(f, "{entry}.{key} changed"),
            Change::NeedsRestart { key, reason } => write!(f, "{key} changed: {reason}"),
        }
    }
}

const RESTART_SETTING: &str = "read at start; takes effect at the next start of sluice serve";
const RESTART_LISTENER: &str = "a listener with `advertise` is announced as configured only when bound at start; \
     takes effect at the next start of sluice serve";
const RESTART_IDENTITY: &str =
    "a subsystem's identity and Namespace Management pool are fixed while it runs; takes effect at the next start \
     (or remove the subsystem, reload, add it back, reload)";
const RESTART_NAMESPACE: &str = "a namespace's storage or identity does not change under the same NSID while hosts \
     may use it; takes effect at the next start (or give the new definition another nsid)";

/// The changes that turn `running` into `edited`, in a fixed order: subsystems, then
/// namespaces and hosts per subsystem, listeners, storage, settings.
pub fn diff(running: &Config, edited: &Config) -> Vec<Change> {
    let mut changes = Vec::new();
    for subsystem in &running.subsystems {
        if !edited.subsystems.iter().any(|other| other.nqn == subsystem.nqn) {
            changes.push(Change::SubsystemRemoved { nqn: subsystem.nqn.clone() });
        }
    }
    for subsystem in &edited.subsystems {
        match running.subsystems.iter().find(|other| other.nqn == subsystem.nqn) {
            None => changes.push(Change::SubsystemAdded { nqn: subsystem.nqn.clone() }),
            Some(before) => diff_subsystem(before, subsystem, &mut changes),
        }
    }
    diff_listeners(&running.listeners, &edited.listeners, &mut changes);
    for backend in &edited.backends {
        let Some(before) = running.backends.iter().find(|other| other.name == backend.name) else { continue };
        // Only storage a namespace names directly grows live: a cache tier, a RAID0
        // member or a pool's device has a user whose own size is fixed.
        let named_by_namespace = edited
            .subsystems
            .iter()
            .flat_map(|subsystem| &subsystem.namespaces)
            .any(|namespace| namespace.device.as_deref() == Some(backend.name.as_str()));
        let grows_live = named_by_namespace
            && matches!(backend.kind, StorageKind::File | StorageKind::Null | StorageKind::Rbd | StorageKind::Carve);
        let only_size = || grows_live && BackendConfig { size: backend.size, ..before.clone() } == *backend;
        if let Some(size_bytes) = grown_size(before.size, backend.size, only_size) {
            changes.push(Change::BackendGrown { name: backend.name.clone(), size_bytes });
        } else if let Some(key) = before.first_difference(backend) {
            changes.push(Change::StorageChanged { entry: format!("backend {:?}", backend.name), key });
        }
    }
    for pool in &edited.pools {
        let before = running.pools.iter().find(|other| other.name == pool.name);
        if let Some(key) = before.and_then(|before| before.first_difference(pool)) {
            changes.push(Change::StorageChanged { entry: format!("pool {:?}", pool.name), key });
        }
    }
    let (before, after) = (&running.runtime, &edited.runtime);
    let runtime = [
        ("threads", before.threads == after.threads),
        ("poll_mode", before.poll_mode == after.poll_mode),
        ("pin_threads", before.pin_threads == after.pin_threads),
        ("adaptive_spin_us", before.adaptive_spin_us == after.adaptive_spin_us),
    ];
    let (before, after) = (&running.target, &edited.target);
    let target = [
        ("max_io_queues_per_controller", before.max_io_queues_per_controller == after.max_io_queues_per_controller),
        ("max_io_queue_depth", before.max_io_queue_depth == after.max_io_queue_depth),
        ("max_connections_per_host", before.max_connections_per_host == after.max_connections_per_host),
        (
            "max_outstanding_r2t_bytes_per_connection",
            before.max_outstanding_r2t_bytes_per_connection == after.max_outstanding_r2t_bytes_per_connection,
        ),
        ("in_capsule_data_bytes", before.in_capsule_data_bytes == after.in_capsule_data_bytes),
        ("connection_setup_timeout_ms", before.connection_setup_timeout_ms == after.connection_setup_timeout_ms),
        ("command_quiesce_timeout_ms", before.command_quiesce_timeout_ms == after.command_quiesce_timeout_ms),
        ("min_keep_alive_timeout_ms", before.min_keep_alive_timeout_ms == after.min_keep_alive_timeout_ms),
        ("max_keep_alive_timeout_ms", before.max_keep_alive_timeout_ms == after.max_keep_alive_timeout_ms),
        ("allow_keep_alive_disabled", before.allow_keep_alive_disabled == after.allow_keep_alive_disabled),
        ("state_dir", before.state_dir == after.state_dir),
    ];
    let settings = runtime
        .iter()
        .map(|(key, same)| ("runtime", key, same))
        .chain(target.iter().map(|(key, same)| ("target", key, same)));
    for (section, key, same) in settings {
        if !same {
            changes.push(Change::NeedsRestart { key: format!("{section}.{key}"), reason: RESTART_SETTING });
        }
    }
    if running.management != edited.management {
        changes.push(Change::NeedsRestart { key: "management.network".to_string(), reason: RESTART_SETTING });
    }
    changes
}

fn diff_subsystem(before: &SubsystemConfig, after: &SubsystemConfig, changes: &mut Vec<Change>) {
    let nqn = &after.nqn;
    let identity = [
        ("serial", before.serial == after.serial),
        ("model", before.model == after.model),
        ("pool", before.pool == after.pool),
    ];
    for (key, same) in identity {
        if !same {
            changes.push(Change::NeedsRestart { key: format!("subsystem {nqn:?}.{key}"), reason: RESTART_IDENTITY });
        }
    }
    let (old, new) = (numbered(&before.namespaces), numbered(&after.namespaces));
    for (nsid, _) in old.iter().filter(|(nsid, _)| !new.iter().any(|(other, _)| other == nsid)) {
        changes.push(Change::NamespaceRemoved { nqn: nqn.clone(), nsid: *nsid });
    }
    for (nsid, namespace) in &new {
        match old.iter().find(|(other, _)| other == nsid) {
            None => changes.push(Change::NamespaceAdded { nqn: nqn.clone(), nsid: *nsid }),
            Some((_, previous)) => {
                // A RAM disk's size is fixed while served; a carve, a file or null grow.
                let grows_live =
                    previous.pool.is_some() || matches!(previous.backend, Some(BackendKind::File | BackendKind::Null));
                let only_size = || {
                    grows_live
                        && namespace_difference(
                            &NamespaceConfig { size: namespace.size, ..(*previous).clone() },
                            namespace,
                        )
                        .is_none()
                };
                if let Some(size_bytes) = grown_size(previous.size, namespace.size, only_size) {
                    changes.push(Change::NamespaceGrown { nqn: nqn.clone(), nsid: *nsid, size_bytes });
                } else if let Some(key) = namespace_difference(previous, namespace) {
                    changes.push(Change::NeedsRestart {
                        key: format!("subsystem {nqn:?} namespace {nsid}.{key}"),
                        reason: RESTART_NAMESPACE,
                    });
                }
                if previous.hosts != namespace.hosts {
                    changes.push(Change::AttachmentChanged { nqn: nqn.clone(), nsid: *nsid });
                }
            }
        }
    }
    // A host's `qos` entries are limits, not access: they change without touching
    // the host rules.
    let without_qos = |hosts: &[super::HostConfig]| -> Vec<super::HostConfig> {
        hosts.iter().map(|host| super::HostConfig { qos: Vec::new(), ..host.clone() }).collect()
    };
    if before.allow_any_host != after.allow_any_host || without_qos(&before.hosts) != without_qos(&after.hosts) {
        changes.push(Change::HostsChanged { nqn: nqn.clone() });
    }
    let host_qos = |hosts: &[super::HostConfig]| -> Vec<(String, Vec<super::qos::HostQosConfig>)> {
        hosts.iter().filter(|host| !host.qos.is_empty()).map(|host| (host.nqn.clone(), host.qos.clone())).collect()
    };
    let namespace_qos = |namespaces: &[NamespaceConfig]| -> Vec<(u32, super::qos::QosConfig)> {
        numbered(namespaces)
            .into_iter()
            .filter_map(|(nsid, namespace)| namespace.qos.clone().map(|qos| (nsid, qos)))
            .collect()
    };
    if host_qos(&before.hosts) != host_qos(&after.hosts)
        || namespace_qos(&before.namespaces) != namespace_qos(&after.namespaces)
    {
        changes.push(Change::QosChanged { nqn: nqn.clone() });
    }
}

use super::qos::numbered;

/// The first key (other than `nsid`, which is the identity) that differs.
/// The new size when a size was set before and after, grew, and nothing else of
/// the entry changed (`only_size`): storage grows live; it never shrinks.
fn grown_size(before: Option<ByteSize>, after: Option<ByteSize>, only_size: impl FnOnce() -> bool) -> Option<u64> {
    match (before, after) {
        (Some(before), Some(after)) if after.0 > before.0 && only_size() => Some(after.0),
        _ => None,
    }
}

fn namespace_difference(before: &NamespaceConfig, after: &NamespaceConfig) -> Option<&'static str> {
    [
        ("backend", before.backend == after.backend),
        ("device", before.device == after.device),
        ("pool", before.pool == after.pool),
        ("size", before.size == after.size),
        ("thin", before.thin == after.thin),
        ("block_size", before.block_size == after.block_size),
        ("path", before.path == after.path),
        ("direct_io", before.direct_io == after.direct_io),
        ("nguid", before.nguid == after.nguid),
        ("uuid", before.uuid == after.uuid),
    ]
    .into_iter()
    .find_map(|(key, same)| (!same).then_some(key))
}

/// Listeners by address value ("127.0.0.1:4420" and "127.0.0.1:04420" are one); a
/// changed `discovery_only` or `tls` is a removal and an addition (its connections
/// close: a listener that now requires TLS keeps no plain connection).
///
/// A listener with `advertise` (before or after) is left alone and any change to it
/// needs a restart: what the discovery log announces is set when the listener is bound
/// at start, and one added while running announces its bound address, which hosts
/// may not reach.
fn diff_listeners(before: &[ListenerConfig], after: &[ListenerConfig], changes: &mut Vec<Change>) {
    let normalized = |listener: &ListenerConfig| {
        listener.address.parse::<SocketAddr>().map_or_else(|_| listener.address.clone(), |address| address.to_string())
    };
    let key =
        |listener: &ListenerConfig| (normalized(listener), listener.discovery_only, listener.tls.secure_channel());
    let advertised = |listeners: &[ListenerConfig], address: &str| {
        listeners
            .iter()
            .find(|listener| normalized(listener) == address)
            .and_then(|listener| listener.advertise.clone())
    };
    let (old, new): (Vec<_>, Vec<_>) = (before.iter().map(key).collect(), after.iter().map(key).collect());
    let mut pinned: Vec<String> = Vec::new();
    for address in old.iter().chain(&new).map(|entry| entry.0.clone()) {
        let (was, is) = (advertised(before, &address), advertised(after, &address));
        if (was.is_some() || is.is_some()) && !pinned.contains(&address) {
            let same = old.iter().find(|entry| entry.0 == address) == new.iter().find(|entry| entry.0 == address);
            if !same || was != is {
                changes.push(Change::NeedsRestart { key: format!("listener {address:?}"), reason: RESTART_LISTENER });
            }
            pinned.push(address);
        }
    }
    for entry in old.iter().filter(|entry| !pinned.contains(&entry.0)) {
        if !new.contains(entry) {
            changes.push(Change::ListenerRemoved { address: entry.0.clone() });
        }
    }
    for (address, discovery_only, secure_channel) in new.iter().filter(|entry| !pinned.contains(&entry.0)) {
        if !old.contains(&(address.clone(), *discovery_only, *secure_channel)) {
            changes.push(Change::ListenerAdded {
                address: address.clone(),
                discovery_only: *discovery_only,
                secure_channel: *secure_channel,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_target::SecureChannel;

    const RUNNING: &str = r#"
[[listener]]
address = "127.0.0.1:4420"

[[backend]]
name = "disk"
kind = "ram"
size = "8MiB"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"
allow_any_host = true

[[subsystem.namespace]]
backend = "ram"
size = "1MiB"

[[subsystem.namespace]]
device = "disk"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:b"

[[subsystem.host]]
nqn = "nqn.2014-08.io.sluice:h"
"#;
    const A: &str = "nqn.2026-11.io.sluice:a";
    const B: &str = "nqn.2026-11.io.sluice:b";

    fn changes(edited: &str) -> Vec<Change> {
        diff(&Config::parse(RUNNING).unwrap(), &Config::parse(edited).unwrap())
    }

    #[test]
    fn the_same_file_has_no_changes_even_with_nsids_written_out() {
        assert_eq!(changes(RUNNING), []);
        // The management API pins implicit NSIDs; that is not a change.
        let pinned = RUNNING.replacen("[[subsystem.namespace]]\n", "[[subsystem.namespace]]\nnsid = 1\n", 1);
        assert_eq!(changes(&pinned), []);
        let reformatted =
            RUNNING.replace("size = \"1MiB\"", "size = 1048576").replace("127.0.0.1:4420", "127.0.0.1:04420");
        assert_eq!(changes(&reformatted), []);
    }

    #[test]
    fn subsystems_and_namespaces_come_and_go() {
        let edited = format!(
            "{RUNNING}\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:c\"\n[[subsystem.namespace]]\nbackend = \"null\"\nsize = \"1MiB\"\n"
        )
        .replace(&format!("nqn = \"{B}\"\n\n[[subsystem.host]]\nnqn = \"nqn.2014-08.io.sluice:h\"\n"), "nqn = \"nqn.2026-11.io.sluice:d\"\n");
        assert_eq!(
            changes(&edited),
            [
                Change::SubsystemRemoved { nqn: B.into() },
                Change::SubsystemAdded { nqn: "nqn.2026-11.io.sluice:d".into() },
                Change::SubsystemAdded { nqn: "nqn.2026-11.io.sluice:c".into() },
            ]
        );
        // Namespace 1 removed, 2 kept (now explicit), 5 added.
        let edited = RUNNING.replacen("[[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"1MiB\"\n", "", 1).replace(
            "device = \"disk\"",
            "nsid = 2\ndevice = \"disk\"\n\n[[subsystem.namespace]]\nnsid = 5\nbackend = \"null\"\nsize = \"4MiB\"",
        );
        assert_eq!(
            changes(&edited),
            [Change::NamespaceRemoved { nqn: A.into(), nsid: 1 }, Change::NamespaceAdded { nqn: A.into(), nsid: 5 }]
        );
    }

    #[test]
    fn hosts_and_secrets_are_live_changes() {
        let secret = nvme_host::Secret::from_key(&[7; 32], None).unwrap().to_representation().to_string();
        let edited = RUNNING.replace(
            "nqn = \"nqn.2014-08.io.sluice:h\"\n",
            &format!("nqn = \"nqn.2014-08.io.sluice:h\"\ndhchap_secret = \"{secret}\"\n"),
        );
        assert_eq!(changes(&edited), [Change::HostsChanged { nqn: B.into() }]);
        let edited = RUNNING.replace("allow_any_host = true\n", "");
        assert_eq!(changes(&edited), [Change::HostsChanged { nqn: A.into() }]);
    }

    #[test]
    fn a_namespace_host_list_is_a_live_change_and_empty_is_not_absent() {
        let limited = RUNNING.replace("device = \"disk\"", "device = \"disk\"\nhosts = [\"nqn.2014-08.io.sluice:h\"]");
        assert_eq!(changes(&limited), [Change::AttachmentChanged { nqn: A.into(), nsid: 2 }]);
        let running = Config::parse(&limited).unwrap();
        let nobody = Config::parse(&limited.replace("hosts = [\"nqn.2014-08.io.sluice:h\"]", "hosts = []")).unwrap();
        assert_eq!(diff(&running, &nobody), [Change::AttachmentChanged { nqn: A.into(), nsid: 2 }]);
        let everyone = Config::parse(RUNNING).unwrap();
        assert_eq!(diff(&nobody, &everyone), [Change::AttachmentChanged { nqn: A.into(), nsid: 2 }]);
    }

    #[test]
    fn a_larger_size_of_storage_that_grows_is_a_live_change_and_ram_waits_for_a_restart() {
        let running = RUNNING.replace("kind = \"ram\"\nsize = \"8MiB\"", "kind = \"null\"\nsize = \"8MiB\"")
            + "\n[[subsystem.namespace]]\nnsid = 3\nbackend = \"file\"\npath = \"/tmp/x\"\nsize = \"4MiB\"\n";
        let grown =
            running.replace("size = \"8MiB\"", "size = \"16MiB\"").replace("size = \"4MiB\"", "size = \"6MiB\"");
        let changes = diff(&Config::parse(&running).unwrap(), &Config::parse(&grown).unwrap());
        // Subsystem b's namespace (nsid 3 belongs to the last [[subsystem]] in the text).
        assert_eq!(
            changes,
            [
                Change::NamespaceGrown { nqn: B.into(), nsid: 3, size_bytes: 6 << 20 },
                Change::BackendGrown { name: "disk".into(), size_bytes: 16 << 20 },
            ]
        );
        // A backend no namespace names (here: a pool's device) waits for a restart.
        let pooled = running
            .replace(
                "[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"",
                "[[pool]]\nname = \"p\"\ndevice = \"disk\"\n\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"",
            )
            .replace(
                "device = \"disk\"\n\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:b\"",
                "backend = \"null\"\nsize = \"1MiB\"\n\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:b\"",
            );
        let pooled_grown = pooled.replace("size = \"8MiB\"", "size = \"16MiB\"");
        let changes = diff(&Config::parse(&pooled).unwrap(), &Config::parse(&pooled_grown).unwrap());
        assert!(matches!(&changes[..], [Change::StorageChanged { key: "size", .. }]), "{changes:?}");
        let shrunk = running.replace("size = \"4MiB\"", "size = \"2MiB\"");
        let changes = diff(&Config::parse(&running).unwrap(), &Config::parse(&shrunk).unwrap());
        assert!(
            matches!(&changes[..], [Change::NeedsRestart { key, .. }] if key.ends_with("namespace 3.size")),
            "{changes:?}"
        );
        // A larger size and another change at once is not a resize.
        let both = running.replace("size = \"4MiB\"", "size = \"6MiB\"\ndirect_io = false");
        let changes = diff(&Config::parse(&running).unwrap(), &Config::parse(&both).unwrap());
        assert!(matches!(&changes[..], [Change::NeedsRestart { .. }]), "{changes:?}");
    }

    #[test]
    fn what_cannot_change_live_names_its_key() {
        let edited = RUNNING
            .replace("size = \"1MiB\"", "size = \"2MiB\"")
            .replace(&format!("nqn = \"{A}\"\n"), &format!("nqn = \"{A}\"\nmodel = \"New\"\n"))
            .replace("size = \"8MiB\"", "size = \"16MiB\"")
            + "\n[runtime]\nthreads = 3\n[target]\nmax_io_queue_depth = 128\n"
            + "[management.network]\nlisten = \"127.0.0.1\"\ncertificate = \"c.pem\"\nprivate_key = \"k.pem\"\n\
               client_ca = \"ca.pem\"\n[[management.network.client]]\ncommon_name = \"admin\"\naccess = \"read-write\"\n";
        let keys: Vec<String> = changes(&edited)
            .iter()
            .map(|change| match change {
                Change::NeedsRestart { key, .. } => key.clone(),
                Change::StorageChanged { entry, key } => format!("{entry}.{key}"),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            keys,
            [
                format!("subsystem {A:?}.model"),
                format!("subsystem {A:?} namespace 1.size"),
                "backend \"disk\".size".to_string(),
                "runtime.threads".to_string(),
                "target.max_io_queue_depth".to_string(),
                "management.network".to_string(),
            ]
        );
    }

    #[test]
    fn listeners_compare_by_address_and_role() {
        let edited = RUNNING.replace(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\n",
            "[[listener]]\naddress = \"127.0.0.1:4420\"\ndiscovery_only = true\n\n[[listener]]\naddress = \"[::1]:4420\"\n",
        );
        assert_eq!(
            changes(&edited),
            [
                Change::ListenerRemoved { address: "127.0.0.1:4420".into() },
                Change::ListenerAdded {
                    address: "127.0.0.1:4420".into(),
                    discovery_only: true,
                    secure_channel: SecureChannel::None
                },
                Change::ListenerAdded {
                    address: "[::1]:4420".into(),
                    discovery_only: false,
                    secure_channel: SecureChannel::None
                },
            ]
        );
        // Turning TLS on re-creates the listener: its plain connections close.
        let secured = RUNNING.replace(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\n",
            "[[listener]]\naddress = \"127.0.0.1:4420\"\ntls = \"required\"\n",
        );
        assert_eq!(
            changes(&secured),
            [
                Change::ListenerRemoved { address: "127.0.0.1:4420".into() },
                Change::ListenerAdded {
                    address: "127.0.0.1:4420".into(),
                    discovery_only: false,
                    secure_channel: SecureChannel::Required
                },
            ]
        );
    }

    #[test]
    fn a_listener_with_an_advertised_address_changes_at_the_next_start() {
        let advertised = RUNNING.replace(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\n",
            "[[listener]]\naddress = \"127.0.0.1:4420\"\nadvertise = \"192.0.2.10:4420\"\n",
        );
        let restart = Change::NeedsRestart { key: "listener \"127.0.0.1:4420\"".into(), reason: RESTART_LISTENER };
        assert_eq!(changes(&advertised), [restart]);
        // Nor is a new listener with `advertise` bound by a reload.
        let added = format!("{RUNNING}\n[[listener]]\naddress = \"127.0.0.1:4421\"\nadvertise = \"192.0.2.10:4421\"\n");
        assert_eq!(
            changes(&added),
            [Change::NeedsRestart { key: "listener \"127.0.0.1:4421\"".into(), reason: RESTART_LISTENER }]
        );
    }
}

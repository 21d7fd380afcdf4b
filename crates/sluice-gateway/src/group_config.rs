//! The group's configuration kept in the cluster (`[gateway] config = "cluster"`).
//!
//! A gateway's config file has two parts. What belongs to the gateway (its listeners,
//! runtime and target settings, and in `[gateway]` its name, the group's name, pool
//! and how to reach the cluster) stays in its file. What belongs to the group (the
//! `[[backend]]`, `[[pool]]` and `[[subsystem]]` tables, and in `[gateway]` the
//! members, ANA groups, `lease_ms` and `failback`) is one TOML document in the RADOS
//! object `sluice.config.<group>`, with a version: the object holds
//! `{"version": N, "config": "<TOML>"}` and the attribute `sluice.version` holds N.
//!
//! - **Start.** The first gateway of an empty group writes its file's group part as
//!   version 1 (an exclusive create: of two gateways starting at once, one seeds and
//!   the other loads what it wrote). Every other gateway ignores its file's group
//!   part (a seed, logged when it differs) and runs the cluster's. A gateway whose
//!   file holds only its own part and finds the group empty waits for the member that
//!   seeds it (started at the same moment, as systemd starts them at boot), up to
//!   [`SEED_WAIT`], logging the wait.
//! - **Change.** A management API change on any member writes the new group part in
//!   one operation that first compares `sluice.version` with the version this
//!   gateway runs: if another member changed the group since, nothing is written and
//!   the caller gets a conflict naming both versions (apply the other change first:
//!   it arrives within the delay below, then retry). Then the writer notifies the
//!   object.
//! - **Apply.** Every member watches the object; a notice, or the version attribute
//!   found newer by a check every [`CHECK_INTERVAL`] (a notice can be lost), makes the
//!   management thread read the record and apply it with the reload machinery
//!   (`Management::apply_group_config`: build everything new first, then apply, as a
//!   SIGHUP reload does). A version it cannot apply is logged and kept as pending,
//!   and retried at the next notice or check.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use runtime::{RadosObject, ReplaceError, Watch, WatchEvent};
use serde::{Deserialize, Serialize};
use toml_edit::{DocumentMut, Item, Table};

use std::path::Path;

use sluice_config::gateway::{GatewayPlan, GroupConfigSource, GroupLocation};
use sluice_config::Config;

/// Attribute of the object holding the version (compared by every write).
const VERSION_ATTRIBUTE: &str = "sluice.version";
/// Largest group configuration kept (about 20,000 namespaces): a read of more is
/// refused rather than cut short.
pub const MAX_GROUP_CONFIG_BYTES: usize = 4 << 20;
/// How often a member compares the cluster's version with the one it runs, for
/// notices that were lost (the bound on how late a member applies a change).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// How long a change's writer waits for the members' acknowledgements of its notice
/// (they acknowledge on receipt; applying follows on their management threads).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the cluster keeps a watch without hearing from its client (the runtime
/// pings watches often enough for it).
const WATCH_TIMEOUT: Duration = Duration::from_secs(runtime::rbd_backend::SLUICE_WATCH_TIMEOUT_SECONDS);
/// How long a gateway whose file holds only its own part waits for the group's
/// configuration when the cluster has none yet. Gateways of a group started at the
/// same moment (systemd starts them at boot) race: the member whose file holds the
/// group's part seeds the group, the others must find its configuration there. The
/// seeder writes it after a cluster connection (at most 10 s, librados'
/// `client_mount_timeout` as `runtime` sets it), a read and an exclusive create (each
/// at most `op_timeout_ms`, 20 s by default): 50 s, so 60 s leaves room, and leaves
/// most of the systemd unit's `TimeoutStartSec=300s` to the rest of the start. A group
/// still empty then is an error, as before (no member's file holds the group's part).
pub const SEED_WAIT: Duration = Duration::from_secs(60);
/// How often the cluster is read again while waiting for the seed (one small read).
const SEED_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How often a wait for the seed is logged again.
const SEED_WAIT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Top-level arrays of tables that belong to the group.
const GROUP_TABLES: [&str; 3] = ["backend", "pool", "subsystem"];
/// Keys of `[gateway]` that belong to the group.
const GROUP_GATEWAY_KEYS: [&str; 5] = ["member", "ana_group", "lease_ms", "failback", "rebalance"];

/// The RADOS object holding a group's configuration.
pub fn config_object(group: &str) -> String {
    format!("sluice.config.{group}")
}

/// The layout of the group's configuration record. Bumped when the layout changes; a
/// gateway refuses a record of another format by name rather than misread it.
///
/// History:
/// - 1: `{ "version", "config" }` (records written before the field existed carry no
///   `format` and are read as 1).
const GROUP_CONFIG_FORMAT: u32 = 1;

/// What the object holds.
#[derive(Serialize, Deserialize)]
struct Record {
    /// [`GROUP_CONFIG_FORMAT`]; absent in the first records, which are format 1.
    #[serde(default = "first_format")]
    format: u32,
    version: u64,
    config: String,
}

fn first_format() -> u32 {
    1
}

/// The group's configuration from the bytes of its record in `object`.
fn decode_record(bytes: &[u8], object: &str) -> Result<GroupConfig, String> {
    let record: Record = serde_json::from_slice(bytes)
        .map_err(|error| format!("{object} does not hold a group configuration: {error}"))?;
    if record.format != GROUP_CONFIG_FORMAT {
        return Err(format!(
            "{object} holds a group configuration of record format {} (this sluice reads {GROUP_CONFIG_FORMAT}): \
             upgrade this gateway to the version the group's other members run",
            record.format
        ));
    }
    Ok(GroupConfig { version: record.version, text: record.config })
}

/// One version of the group's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    pub version: u64,
    /// The group part, as TOML.
    pub text: String,
}

/// The group's configuration as a gateway runs it (kept by the management API).
pub struct GroupConfigState {
    pub store: GroupConfigStore,
    /// The version this gateway runs, and its text.
    pub current: GroupConfig,
    /// The config file's text as last read or written (its own part, perhaps with
    /// a seed of the group's that is not used).
    pub file_text: String,
    /// A newer version this gateway could not apply yet (logged; retried).
    pub pending: Option<u64>,
}

/// What a gateway starts with when its group's configuration is in the cluster.
pub struct Started {
    /// The configuration it runs: its file's own part with the group's version.
    pub config: Config,
    pub running_text: String,
    pub state: GroupConfigState,
}

/// At start: with `[gateway] config = "cluster"`, loads the group's configuration
/// (seeding an empty group with the file's group part) and returns what the gateway
/// runs. `None` when the group's configuration is the file's. `status` tells the
/// service manager what a long start waits for (sd_notify `STATUS=` lines: the daemon
/// owns that channel, so it is handed in).
pub fn start(config: &Config, path: Option<&Path>, status: &dyn Fn(&str)) -> Result<Option<Started>, String> {
    let Some(section) = &config.gateway else { return Ok(None) };
    if section.config.unwrap_or_default() != GroupConfigSource::Cluster {
        return Ok(None);
    }
    let location = section.location().map_err(|error| error.to_string())?;
    let path = path.ok_or(
        "[gateway] config = \"cluster\" needs sluice serve --config FILE (the gateway's own part lives there)",
    )?;
    let file_text = std::fs::read_to_string(path).map_err(|error| format!("reading {}: {error}", path.display()))?;
    let store = GroupConfigStore::open(&location)?;
    let seed = group_text(&file_text)?;
    // Only a whole group part may seed the group: a file with just its own part
    // (no members) must find the group's configuration there.
    let seed_usable = Config::parse(&file_text).ok().is_some_and(|whole| matches!(whole.gateway_plan(), Ok(Some(_))));
    let (current, seeded) = if seed_usable {
        store.load_or_seed(&seed)?
    } else {
        let current = await_seed(
            || store.load(),
            SEED_WAIT,
            &store.describe(),
            std::time::Instant::now,
            std::thread::sleep,
            status,
        )?
        .ok_or_else(|| {
            format!(
                "the gateway group {:?} has no configuration in the cluster ({}) after waiting {} s for a member \
                     to seed it, and {} holds only this gateway's own part: start a gateway whose file also holds the \
                     group's part (members, subsystems), which seeds it",
                location.group,
                store.describe(),
                SEED_WAIT.as_secs(),
                path.display()
            )
        })?;
        (current, false)
    };
    if seeded {
        tracing::info!(object = %store.describe(), "the group had no configuration: seeded it with this file's group part (version 1)");
    } else if current.text != seed && GROUP_TABLES.iter().any(|key| seed.contains(&format!("[[{key}]]"))) {
        tracing::warn!(object = %store.describe(), version = current.version,
            "this file's group part differs from the group's configuration in the cluster, which is what runs \
             (the file's group part only seeds an empty group)");
    }
    let running_text = merge_text(&file_text, &current.text)?;
    let running = Config::parse(&running_text)
        .map_err(|error| format!("the group's configuration version {}: {error}", current.version))?;
    running.check().map_err(|error| format!("the group's configuration version {}: {error}", current.version))?;
    tracing::info!(object = %store.describe(), version = current.version, "running the gateway group's configuration");
    Ok(Some(Started {
        config: running,
        running_text,
        state: GroupConfigState { store, current, file_text, pending: None },
    }))
}

/// Reads the group's configuration with `load` until there is one, or until `limit`
/// has passed (then `None`), every [`SEED_POLL_INTERVAL`]; logs the wait (and tells
/// `status`) when the first read finds none. `now` and `sleep` are the
/// clock (a test's own in tests).
fn await_seed(
    mut load: impl FnMut() -> Result<Option<GroupConfig>, String>,
    limit: Duration,
    object: &str,
    now: impl Fn() -> std::time::Instant,
    sleep: impl Fn(Duration),
    status: &dyn Fn(&str),
) -> Result<Option<GroupConfig>, String> {
    let start = now();
    let mut next_log: Option<Duration> = None;
    loop {
        if let Some(current) = load()? {
            if next_log.is_some() {
                let waited = now().saturating_duration_since(start);
                tracing::info!(%object, version = current.version, waited_ms = waited.as_millis() as u64,
                    "found the group's configuration, seeded by another member");
            }
            return Ok(Some(current));
        }
        let waited = now().saturating_duration_since(start);
        if waited >= limit {
            tracing::warn!(%object, waited_s = waited.as_secs(), "no member seeded the group's configuration in time");
            return Ok(None);
        }
        match next_log {
            None => {
                tracing::info!(%object, limit_s = limit.as_secs(),
                    "the gateway group has no configuration in the cluster yet, and this file holds only this \
                     gateway's own part: waiting for the member that seeds it (one whose file holds the group's \
                     part, started at the same moment)");
                status(&format!(
                    "STATUS=waiting up to {} s for a member to seed the group's configuration ({object})",
                    limit.as_secs()
                ));
                next_log = Some(SEED_WAIT_LOG_INTERVAL);
            }
            Some(at) if waited >= at => {
                tracing::info!(%object, waited_s = waited.as_secs(), limit_s = limit.as_secs(),
                    "still waiting for the member that seeds the group's configuration");
                next_log = Some(at + SEED_WAIT_LOG_INTERVAL);
            }
            Some(_) => {}
        }
        sleep(SEED_POLL_INTERVAL.min(limit - waited));
    }
}

/// `sluice gateway import FILE`: writes FILE's group part to the cluster as the
/// group's configuration (version 1) when the group has none; with `rewrite`, then
/// rewrites FILE to its own part with `config = "cluster"`, keeping the old file as
/// FILE.before-import. Returns what it did.
pub fn import(path: &Path, rewrite: bool) -> Result<String, String> {
    let file_text = std::fs::read_to_string(path).map_err(|error| format!("reading {}: {error}", path.display()))?;
    let config = Config::parse(&file_text).map_err(|error| format!("{}: {error}", path.display()))?;
    let Some(section) = &config.gateway else {
        return Err(format!("{} has no [gateway] section: there is no group to import into", path.display()));
    };
    if !matches!(config.gateway_plan(), Ok(Some(_))) {
        return Err(format!(
            "{} holds no group part to import (no [[gateway.member]] entries): it is already a gateway's own part",
            path.display()
        ));
    }
    config.check().map_err(|error| format!("{}: {error}", path.display()))?;
    let location = section.location().map_err(|error| error.to_string())?;
    let store = GroupConfigStore::open(&location)?;
    let seed = group_text(&file_text)?;
    let outcome = match store.load()? {
        Some(current) if current.text == seed => {
            format!("{} already holds this group part as version {}", store.describe(), current.version)
        }
        Some(current) => {
            return Err(format!(
                "{} already holds a different group configuration (version {}); nothing was imported: \
                 change the group through a gateway's `sluice subsystem|ns|host ...`",
                store.describe(),
                current.version
            ))
        }
        None => match store.write(None, 1, &seed) {
            Ok(()) => format!("imported {}'s group part into {} as version 1", path.display(), store.describe()),
            Err(WriteError::Conflict { current }) => {
                return Err(format!(
                    "{} was written meanwhile (version {current}); nothing was imported",
                    store.describe()
                ))
            }
            Err(WriteError::Cluster(error)) => return Err(error),
        },
    };
    if !rewrite {
        return Ok(outcome);
    }
    let mut own = local_part(&file_text.parse::<DocumentMut>().map_err(|error| error.to_string())?);
    if let Some(gateway) = own.get_mut("gateway").and_then(Item::as_table_mut) {
        gateway.insert("config", toml_edit::value("cluster"));
    }
    let backup = path.with_file_name(format!(
        "{}.before-import",
        path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
    ));
    std::fs::copy(path, &backup).map_err(|error| format!("keeping {}: {error}", backup.display()))?;
    storage::durable_file::write_atomically(path, own.to_string().as_bytes())
        .map_err(|error| format!("rewriting {}: {error}", path.display()))?;
    Ok(format!(
        "{outcome}; {} now holds only this gateway's own part with config = \"cluster\" (the old file: {})",
        path.display(),
        backup.display()
    ))
}

/// Why a change was not written.
#[derive(Debug)]
pub enum WriteError {
    /// Another member changed the group first: the cluster holds this version.
    Conflict { current: u64 },
    /// The cluster refused or could not be reached (the text says which and what).
    Cluster(String),
}

/// The gateway's part of `document` (the group's keys removed).
pub fn local_part(document: &DocumentMut) -> DocumentMut {
    let mut local = document.clone();
    for key in GROUP_TABLES {
        local.remove(key);
    }
    if let Some(gateway) = local.get_mut("gateway").and_then(Item::as_table_mut) {
        for key in GROUP_GATEWAY_KEYS {
            gateway.remove(key);
        }
    }
    local
}

/// The group's part of `document`: its group tables, and the group's keys of
/// `[gateway]` in a `[gateway]` table of their own.
pub fn group_part(document: &DocumentMut) -> DocumentMut {
    let mut group = DocumentMut::new();
    if let Some(gateway) = document.get("gateway").and_then(Item::as_table) {
        let mut table = Table::new();
        for key in GROUP_GATEWAY_KEYS {
            if let Some(item) = gateway.get(key) {
                table.insert(key, item.clone());
            }
        }
        if !table.is_empty() {
            group.insert("gateway", Item::Table(table));
        }
    }
    for key in GROUP_TABLES {
        if let Some(item) = document.get(key) {
            group.insert(key, item.clone());
        }
    }
    group
}

/// The whole configuration a member runs: its own part of `local` with `group`'s
/// part in place of whatever group keys `local` has.
pub fn merge(local: &DocumentMut, group: &DocumentMut) -> DocumentMut {
    let mut merged = local_part(local);
    if let Some(gateway) = group.get("gateway").and_then(Item::as_table) {
        if let Some(own) = merged.get_mut("gateway").and_then(Item::as_table_mut) {
            for (key, item) in gateway.iter() {
                own.insert(key, item.clone());
            }
        }
    }
    for key in GROUP_TABLES {
        if let Some(item) = group.get(key) {
            merged.insert(key, item.clone());
        }
    }
    merged
}

/// [`merge`] of two texts.
pub fn merge_text(local: &str, group: &str) -> Result<String, String> {
    let local = local.parse::<DocumentMut>().map_err(|error| format!("the config file does not parse: {error}"))?;
    let group =
        group.parse::<DocumentMut>().map_err(|error| format!("the group's configuration does not parse: {error}"))?;
    Ok(merge(&local, &group).to_string())
}

/// [`group_part`] of a text, as text.
pub fn group_text(full: &str) -> Result<String, String> {
    let document = full.parse::<DocumentMut>().map_err(|error| error.to_string())?;
    Ok(group_part(&document).to_string())
}

/// [`local_part`] of a text, as text.
pub fn local_text(full: &str) -> Result<String, String> {
    let document = full.parse::<DocumentMut>().map_err(|error| error.to_string())?;
    Ok(local_part(&document).to_string())
}

/// The group's configuration object.
pub struct GroupConfigStore {
    object: Arc<RadosObject>,
    location: GroupLocation,
}

impl GroupConfigStore {
    /// Opens `sluice.config.<group>` in the group's pool. Blocks (connecting).
    pub fn open(location: &GroupLocation) -> Result<GroupConfigStore, String> {
        let object = RadosObject::open(&location.cluster, &location.pool, &config_object(&location.group))
            .map_err(|error| format!("the group's configuration object: {error}"))?;
        Ok(GroupConfigStore { object: Arc::new(object), location: location.clone() })
    }

    /// "pool/object" for messages.
    pub fn describe(&self) -> String {
        self.object.describe()
    }

    /// The current version, `None` when the group has none yet.
    pub fn load(&self) -> Result<Option<GroupConfig>, String> {
        let bytes = self
            .object
            .read_record_up_to(MAX_GROUP_CONFIG_BYTES)
            .map_err(|errno| format!("reading {}: {errno}", self.describe()))?;
        let Some(bytes) = bytes else { return Ok(None) };
        decode_record(&bytes, &self.describe()).map(Some)
    }

    /// The version attribute alone (a cheap check for a newer version).
    pub fn version(&self) -> Result<Option<u64>, String> {
        let value = self
            .object
            .attribute(VERSION_ATTRIBUTE)
            .map_err(|errno| format!("reading {}: {errno}", self.describe()))?;
        Ok(value.and_then(|bytes| String::from_utf8(bytes).ok()).and_then(|text| text.parse().ok()))
    }

    /// The group's configuration, seeded with `seed` (version 1) when it has none.
    /// Returns what the group runs and whether this call seeded it.
    pub fn load_or_seed(&self, seed: &str) -> Result<(GroupConfig, bool), String> {
        if let Some(current) = self.load()? {
            return Ok((current, false));
        }
        match self.write(None, 1, seed) {
            Ok(()) => Ok((GroupConfig { version: 1, text: seed.to_string() }, true)),
            // Another member seeded it at the same moment.
            Err(WriteError::Conflict { .. }) => match self.load()? {
                Some(current) => Ok((current, false)),
                None => Err(format!("{} changed while it was seeded; start again", self.describe())),
            },
            Err(WriteError::Cluster(error)) => Err(error),
        }
    }

    /// Writes `text` as the version after `expected` (which must still be the
    /// cluster's), then notifies the members. Returns the new version.
    pub fn replace(&self, expected: u64, text: &str) -> Result<u64, WriteError> {
        let version = expected + 1;
        self.write(Some(expected), version, text)?;
        if let Err(errno) = self.object.notify(version.to_string().as_bytes(), NOTIFY_TIMEOUT) {
            tracing::warn!(%errno, version, "could not notify the group of its new configuration; members find it at their next check");
        }
        Ok(version)
    }

    fn write(&self, expected: Option<u64>, version: u64, text: &str) -> Result<(), WriteError> {
        if text.len() > MAX_GROUP_CONFIG_BYTES {
            return Err(WriteError::Cluster(format!(
                "the group's configuration would be {} bytes, more than the {MAX_GROUP_CONFIG_BYTES} kept",
                text.len()
            )));
        }
        let record = serde_json::to_vec(&Record { format: GROUP_CONFIG_FORMAT, version, config: text.to_string() })
            .map_err(|error| WriteError::Cluster(error.to_string()))?;
        let expected_text = expected.map(|version| version.to_string());
        match self.object.replace_record(
            VERSION_ATTRIBUTE,
            expected_text.as_deref().map(str::as_bytes),
            version.to_string().as_bytes(),
            &record,
        ) {
            Ok(()) => Ok(()),
            Err(ReplaceError::Changed) => {
                let current = self.version().ok().flatten().unwrap_or(0);
                Err(WriteError::Conflict { current })
            }
            Err(ReplaceError::Cluster(errno)) => {
                Err(WriteError::Cluster(format!("writing {}: {errno}", self.describe())))
            }
        }
    }

    /// Watches the object: `changed` runs (on librados' thread; keep it short) for
    /// every notice. Reopens the object first when this client was blocklisted.
    pub fn watch(&mut self, changed: Arc<dyn Fn() + Send + Sync>) -> Result<Watch, String> {
        let handler = move || -> runtime::WatchHandler {
            let changed = Arc::clone(&changed);
            Box::new(move |event| {
                if let WatchEvent::Notice(_, acknowledgement) = event {
                    changed();
                    acknowledgement.acknowledge();
                }
            })
        };
        match self.object.watch(handler(), WATCH_TIMEOUT) {
            Err(errno) if errno.is_blocklisted() => {
                let object = RadosObject::open(
                    &self.location.cluster,
                    &self.location.pool,
                    &config_object(&self.location.group),
                )
                .map_err(|error| format!("reopening {}: {error}", self.describe()))?;
                self.object = Arc::new(object);
                self.object.watch(handler(), WATCH_TIMEOUT)
            }
            other => other,
        }
        .map_err(|errno| format!("watching {}: {errno}", self.describe()))
    }
}

/// Every how many checks the management thread is asked to look again although the
/// version did not move (a version it could not apply is retried then).
const RETRY_EVERY_CHECKS: u32 = 15;

/// Watches the group's configuration and tells the management thread (`changed`)
/// when a member changed it; stopped on drop.
pub struct Follower {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Follower {
    pub fn start(plan: &GatewayPlan, changed: Arc<dyn Fn() + Send + Sync>) -> Result<Follower, String> {
        let location =
            GroupLocation { group: plan.group.clone(), pool: plan.pool.clone(), cluster: plan.cluster.clone() };
        let mut store = GroupConfigStore::open(&location)?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("sluice-group-config".into())
                .spawn(move || follow(&mut store, &changed, &stop))
                .map_err(|error| format!("cannot start the group configuration thread: {error}"))?
        };
        Ok(Follower { stop, thread: Some(thread) })
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let (lock, signal) = &*self.stop;
        *lock.lock().unwrap_or_else(|poison| poison.into_inner()) = true;
        signal.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn follow(store: &mut GroupConfigStore, changed: &Arc<dyn Fn() + Send + Sync>, stop: &(Mutex<bool>, Condvar)) {
    let mut watch: Option<Watch> = None;
    let mut last_seen: Option<u64> = None;
    let mut rounds: u32 = 0;
    loop {
        if watch.as_ref().is_none_or(|watch| watch.check().is_err()) {
            watch = None;
            match store.watch(Arc::clone(changed)) {
                Ok(new) => watch = Some(new),
                Err(error) => {
                    tracing::warn!(%error, "the group's configuration is not watched: changes arrive at the next check")
                }
            }
        }
        match store.version() {
            Ok(version) if version != last_seen || rounds.is_multiple_of(RETRY_EVERY_CHECKS) => {
                last_seen = version;
                changed();
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot read the group's configuration version; retrying"),
        }
        rounds = rounds.wrapping_add(1);
        let (lock, signal) = stop;
        let stopping = lock.lock().unwrap_or_else(|poison| poison.into_inner());
        let (stopping, _) = signal
            .wait_timeout_while(stopping, CHECK_INTERVAL, |stopping| !*stopping)
            .unwrap_or_else(|poison| poison.into_inner());
        if *stopping {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# gateway a
[[listener]]
address = "127.0.0.1:4420"

[gateway]
name = "a"
group = "ha"
lease_ms = 6000

[[gateway.member]]
name = "a"
address = "127.0.0.1:4420"

[[backend]]
name = "img"
kind = "rbd"
image = "img"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:ha"

[[subsystem.namespace]]
nsid = 1
device = "img"

[runtime]
threads = 1
"#;

    #[test]
    fn the_record_carries_its_format_and_the_first_records_read_as_format_one() {
        let written = serde_json::to_vec(&Record { format: GROUP_CONFIG_FORMAT, version: 7, config: "x = 1".into() })
            .expect("a record serialises");
        assert!(String::from_utf8_lossy(&written).contains("\"format\":1"));
        assert_eq!(decode_record(&written, "o"), Ok(GroupConfig { version: 7, text: "x = 1".into() }));
        // Written before the field existed.
        let first = br#"{"version":3,"config":"y = 2"}"#;
        assert_eq!(decode_record(first, "o"), Ok(GroupConfig { version: 3, text: "y = 2".into() }));
        // A newer layout is refused by name, not misread.
        let newer = br#"{"format":2,"version":4,"config":""}"#;
        let refused = decode_record(newer, "rbd/sluice.config.g").expect_err("format 2 is refused");
        assert!(refused.contains("record format 2 (this sluice reads 1)"), "{refused}");
        assert!(refused.contains("rbd/sluice.config.g"), "{refused}");
    }

    #[test]
    fn a_file_splits_into_its_own_part_and_the_groups_and_merges_back() {
        let document = FILE.parse::<DocumentMut>().unwrap();
        let local = local_part(&document).to_string();
        let group = group_part(&document).to_string();
        assert!(
            local.contains("[[listener]]") && local.contains("name = \"a\"") && local.contains("[runtime]"),
            "{local}"
        );
        assert!(!local.contains("subsystem") && !local.contains("member") && !local.contains("lease_ms"), "{local}");
        assert!(
            group.contains("[[subsystem]]") && group.contains("[[gateway.member]]") && group.contains("lease_ms"),
            "{group}"
        );
        assert!(!group.contains("listener") && !group.contains("runtime") && !group.contains("group = "), "{group}");

        let merged = merge_text(&local, &group).unwrap();
        let parsed = sluice_config::Config::parse(&merged).unwrap();
        let original = sluice_config::Config::parse(FILE).unwrap();
        assert_eq!(format!("{parsed:?}"), format!("{original:?}"), "{merged}");
    }

    /// A clock that moves only when slept on, and a cluster whose group is seeded
    /// after `seeded_after` reads (never: `None`).
    struct Seeding {
        now: std::cell::Cell<std::time::Instant>,
        reads: std::cell::Cell<u32>,
        seeded_after: Option<u32>,
    }

    impl Seeding {
        fn new(seeded_after: Option<u32>) -> Seeding {
            Seeding {
                now: std::cell::Cell::new(std::time::Instant::now()),
                reads: std::cell::Cell::new(0),
                seeded_after,
            }
        }

        fn wait(&self, limit: Duration) -> (Result<Option<GroupConfig>, String>, Duration) {
            let start = self.now.get();
            let load = || {
                self.reads.set(self.reads.get() + 1);
                let seeded = self.seeded_after.is_some_and(|after| self.reads.get() > after);
                Ok(seeded.then(|| GroupConfig { version: 1, text: String::new() }))
            };
            let result = await_seed(
                load,
                limit,
                "rbd/sluice.config.test",
                || self.now.get(),
                |step| self.now.set(self.now.get() + step),
                &|_| {},
            );
            (result, self.now.get() - start)
        }
    }

    #[test]
    fn a_gateway_waits_for_the_member_that_seeds_the_group() {
        // Found at once: no wait.
        let seeding = Seeding::new(Some(0));
        let (found, waited) = seeding.wait(SEED_WAIT);
        assert_eq!((found.unwrap().map(|config| config.version), waited), (Some(1), Duration::ZERO));
        // Seeded by another member 40 reads later: found then, polled every interval.
        let seeding = Seeding::new(Some(40));
        let (found, waited) = seeding.wait(SEED_WAIT);
        assert_eq!(found.unwrap().map(|config| config.version), Some(1));
        assert_eq!(waited, SEED_POLL_INTERVAL * 40);
        assert_eq!(seeding.reads.get(), 41);
    }

    #[test]
    fn the_wait_for_a_seed_is_bounded() {
        let seeding = Seeding::new(None);
        let (found, waited) = seeding.wait(SEED_WAIT);
        assert_eq!(found, Ok(None));
        assert_eq!(waited, SEED_WAIT, "waits exactly the bound, then gives up");
        let reads = seeding.reads.get();
        assert_eq!(reads, (SEED_WAIT.as_millis() / SEED_POLL_INTERVAL.as_millis()) as u32 + 1, "a read per interval");
        // A bound that is not a whole number of intervals is kept too.
        let seeding = Seeding::new(None);
        assert_eq!(seeding.wait(Duration::from_millis(600)).1, Duration::from_millis(600));
        // A cluster error ends the wait at once, with the error.
        let failing = await_seed(
            || Err("reading: EIO".to_string()),
            SEED_WAIT,
            "x",
            std::time::Instant::now,
            |_| panic!("no wait"),
            &|_| {},
        );
        assert_eq!(failing, Err("reading: EIO".to_string()));
    }

    #[test]
    fn the_groups_part_replaces_whatever_the_file_says_of_the_group() {
        let stale = FILE.replace("nsid = 1", "nsid = 7").replace("lease_ms = 6000", "lease_ms = 9000");
        let group = group_text(FILE).unwrap();
        let merged = sluice_config::Config::parse(&merge_text(&stale, &group).unwrap()).unwrap();
        assert_eq!(merged.subsystems[0].namespaces[0].nsid, Some(1));
        assert_eq!(merged.gateway.unwrap().lease_ms, Some(6000));
        // A file that holds only its own part runs the group's.
        let own = local_text(FILE).unwrap();
        let merged = sluice_config::Config::parse(&merge_text(&own, &group).unwrap()).unwrap();
        assert_eq!(merged.subsystems.len(), 1);
    }
}

//! Edits of the config file as a TOML document (`toml_edit`), so the operator's
//! comments, key order and layout survive every change the management API makes.
//!
//! These functions only edit text; whether the result is a valid configuration is
//! decided afterwards by parsing and validating it like any config file.
//!
//! Namespace identity: a namespace without `nsid` takes the previous one's NSID plus
//! one, and its NGUID and UUID derive from (subsystem NQN, NSID). Removing or
//! inserting an entry would shift the NSIDs of the entries after it, so every edit
//! of a subsystem's namespaces first writes the NSID of each entry explicitly
//! ("pins" it): what hosts see keeps its identity across the edit and a restart.

use std::net::SocketAddr;

use toml_edit::{value, ArrayOfTables, DocumentMut, Item, Table};

/// Key of the array of listener tables.
const LISTENER_KEY: &str = "listener";
/// Key of the array of subsystem tables.
const SUBSYSTEM_KEY: &str = "subsystem";
/// Key of a subsystem's array of namespace tables.
const NAMESPACE_KEY: &str = "namespace";
/// Key of a subsystem's array of allowed-host tables.
pub const HOST_KEY: &str = "host";

/// Why an edit cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The entry the request names does not exist (`field` is the request field).
    NotFound { field: &'static str, message: String },
    /// The request would duplicate an existing entry.
    Conflict { field: &'static str, message: String },
    /// The file is laid out in a way these edits do not handle (e.g. an inline
    /// array instead of `[[subsystem]]` tables); the operator has to edit by hand.
    Layout { location: String, message: String },
}

impl std::fmt::Display for EditError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::NotFound { message, .. } | EditError::Conflict { message, .. } => formatter.write_str(message),
            EditError::Layout { location, message } => write!(formatter, "{location}: {message}"),
        }
    }
}

fn layout(location: impl Into<String>, message: impl Into<String>) -> EditError {
    EditError::Layout { location: location.into(), message: message.into() }
}

/// The array of tables under `key` in `table`, created empty when absent.
fn array_of_tables<'a>(table: &'a mut Table, key: &str, location: &str) -> Result<&'a mut ArrayOfTables, EditError> {
    let item = table.entry(key).or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    item.as_array_of_tables_mut().ok_or_else(|| {
        layout(
            format!("{location}{key}"),
            format!("is not written as [[{location}{key}]] tables; edit the file by hand"),
        )
    })
}

/// The array of tables under `key`, or `None` when absent.
fn existing_array_of_tables<'a>(
    table: &'a Table,
    key: &str,
    location: &str,
) -> Result<Option<&'a ArrayOfTables>, EditError> {
    match table.get(key) {
        None => Ok(None),
        Some(item) => item.as_array_of_tables().map(Some).ok_or_else(|| {
            layout(
                format!("{location}{key}"),
                format!("is not written as [[{location}{key}]] tables; edit the file by hand"),
            )
        }),
    }
}

fn string_of<'a>(table: &'a Table, key: &str) -> Option<&'a str> {
    table.get(key).and_then(Item::as_str)
}

/// The subsystem NQNs in file order.
pub fn subsystem_nqns(document: &DocumentMut) -> Result<Vec<String>, EditError> {
    let Some(subsystems) = existing_array_of_tables(document.as_table(), SUBSYSTEM_KEY, "")? else {
        return Ok(Vec::new());
    };
    Ok(subsystems.iter().filter_map(|table| string_of(table, "nqn").map(str::to_string)).collect())
}

/// The table of the subsystem `nqn`.
pub fn subsystem<'a>(document: &'a DocumentMut, nqn: &str) -> Result<&'a Table, EditError> {
    existing_array_of_tables(document.as_table(), SUBSYSTEM_KEY, "")?
        .and_then(|subsystems| subsystems.iter().find(|table| string_of(table, "nqn") == Some(nqn)))
        .ok_or_else(|| not_found_subsystem(nqn))
}

fn subsystem_mut<'a>(document: &'a mut DocumentMut, nqn: &str) -> Result<&'a mut Table, EditError> {
    array_of_tables(document.as_table_mut(), SUBSYSTEM_KEY, "")?
        .iter_mut()
        .find(|table| string_of(table, "nqn") == Some(nqn))
        .ok_or_else(|| not_found_subsystem(nqn))
}

fn not_found_subsystem(nqn: &str) -> EditError {
    EditError::NotFound { field: "nqn", message: format!("the config file has no subsystem {nqn}") }
}

/// The `[[backend]]` table named `name`, if any.
pub fn backend<'a>(document: &'a DocumentMut, name: &str) -> Option<&'a Table> {
    document
        .get("backend")
        .and_then(Item::as_array_of_tables)
        .and_then(|backends| backends.iter().find(|table| string_of(table, "name") == Some(name)))
}

/// The `[[backend]]` table named `name`, to edit, if any.
pub fn backend_mut<'a>(document: &'a mut DocumentMut, name: &str) -> Option<&'a mut Table> {
    document
        .get_mut("backend")
        .and_then(Item::as_array_of_tables_mut)
        .and_then(|backends| backends.iter_mut().find(|table| string_of(table, "name") == Some(name)))
}

/// Appends a `[[backend]]` table (its `name` must be new).
pub fn add_backend(document: &mut DocumentMut, table: Table) -> Result<(), EditError> {
    let name = string_of(&table, "name").unwrap_or_default().to_string();
    if backend(document, &name).is_some() {
        return Err(EditError::Conflict {
            field: "rbd",
            message: format!("a [[backend]] named {name} already exists"),
        });
    }
    array_of_tables(document.as_table_mut(), "backend", "")?.push(table);
    Ok(())
}

/// Appends a `[[subsystem]]` table (its `nqn` must be new).
pub fn add_subsystem(document: &mut DocumentMut, table: Table) -> Result<(), EditError> {
    let nqn = string_of(&table, "nqn").unwrap_or_default().to_string();
    if subsystem_nqns(document)?.contains(&nqn) {
        return Err(EditError::Conflict { field: "nqn", message: format!("subsystem {nqn} already exists") });
    }
    array_of_tables(document.as_table_mut(), SUBSYSTEM_KEY, "")?.push(table);
    Ok(())
}

/// Removes the `[[subsystem]]` table of `nqn` with its namespaces and hosts.
pub fn remove_subsystem(document: &mut DocumentMut, nqn: &str) -> Result<(), EditError> {
    let subsystems = array_of_tables(document.as_table_mut(), SUBSYSTEM_KEY, "")?;
    let index = subsystems
        .iter()
        .position(|table| string_of(table, "nqn") == Some(nqn))
        .ok_or_else(|| not_found_subsystem(nqn))?;
    subsystems.remove(index);
    if subsystems.is_empty() {
        // An empty array of tables prints nothing; dropping the key keeps it that way.
        document.remove(SUBSYSTEM_KEY);
    }
    Ok(())
}

/// The NSIDs of a subsystem's namespace entries as the config module assigns them
/// (explicit, else the previous one plus one, starting at 1).
pub fn namespace_ids(subsystem: &Table) -> Result<Vec<u32>, EditError> {
    let nqn = string_of(subsystem, "nqn").unwrap_or_default();
    let Some(namespaces) = existing_array_of_tables(subsystem, NAMESPACE_KEY, "subsystem.")? else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::with_capacity(namespaces.len());
    let mut next = 1u32;
    for (index, namespace) in namespaces.iter().enumerate() {
        let id = match namespace.get("nsid") {
            None => next,
            Some(item) => item
                .as_integer()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| layout(format!("subsystem {nqn} namespace[{index}].nsid"), "is not an NSID"))?,
        };
        next = id.saturating_add(1);
        ids.push(id);
    }
    Ok(ids)
}

/// Writes `nsid = N` into every namespace entry of `subsystem` that relies on the
/// implicit numbering; returns the NSIDs in entry order.
fn pin_namespace_ids(subsystem: &mut Table) -> Result<Vec<u32>, EditError> {
    let ids = namespace_ids(subsystem)?;
    if let Some(namespaces) = subsystem.get_mut(NAMESPACE_KEY).and_then(Item::as_array_of_tables_mut) {
        for (namespace, &id) in namespaces.iter_mut().zip(&ids) {
            if !namespace.contains_key("nsid") {
                namespace.insert("nsid", value(i64::from(id)));
                // Put it first, where a reader looks for it.
                namespace.sort_values_by(|left, _, right, _| (left.get() != "nsid").cmp(&(right.get() != "nsid")));
            }
        }
    }
    Ok(ids)
}

/// Appends a namespace entry (`table` holds its keys but not `nsid`) with NSID `id`.
pub fn add_namespace(document: &mut DocumentMut, nqn: &str, id: u32, mut table: Table) -> Result<(), EditError> {
    let subsystem = subsystem_mut(document, nqn)?;
    // Check before pinning: a refused edit leaves the document as it was.
    if namespace_ids(subsystem)?.contains(&id) {
        return Err(EditError::Conflict {
            field: "nsid",
            message: format!("subsystem {nqn} already has namespace {id} in the config file"),
        });
    }
    pin_namespace_ids(subsystem)?;
    table.insert("nsid", value(i64::from(id)));
    table.sort_values_by(|left, _, right, _| (left.get() != "nsid").cmp(&(right.get() != "nsid")));
    array_of_tables(subsystem, NAMESPACE_KEY, "subsystem.")?.push(table);
    Ok(())
}

/// Removes the namespace entry with NSID `id`. `Ok(false)`: the file does not
/// describe that namespace (e.g. one a host created through Namespace Management,
/// which lives in the pool's table); the document is unchanged then.
pub fn remove_namespace(document: &mut DocumentMut, nqn: &str, id: u32) -> Result<bool, EditError> {
    let subsystem = subsystem_mut(document, nqn)?;
    let ids = namespace_ids(subsystem)?;
    let Some(position) = ids.iter().position(|&existing| existing == id) else { return Ok(false) };
    pin_namespace_ids(subsystem)?;
    let namespaces = array_of_tables(subsystem, NAMESPACE_KEY, "subsystem.")?;
    namespaces.remove(position);
    if namespaces.is_empty() {
        subsystem.remove(NAMESPACE_KEY);
    }
    Ok(true)
}

/// The namespace entry with NSID `id` (NSIDs pinned first, as every edit of a
/// subsystem's namespaces does). `Ok(None)`: the file does not describe it.
pub fn namespace_mut<'a>(
    document: &'a mut DocumentMut,
    nqn: &str,
    id: u32,
) -> Result<Option<&'a mut Table>, EditError> {
    let subsystem = subsystem_mut(document, nqn)?;
    let ids = namespace_ids(subsystem)?;
    let Some(position) = ids.iter().position(|&existing| existing == id) else { return Ok(None) };
    pin_namespace_ids(subsystem)?;
    Ok(array_of_tables(subsystem, NAMESPACE_KEY, "subsystem.")?.get_mut(position))
}

/// The `[[subsystem.host]]` entry of `host_nqn`, or `Ok(None)` when it has none.
pub fn host_mut<'a>(
    document: &'a mut DocumentMut,
    nqn: &str,
    host_nqn: &str,
) -> Result<Option<&'a mut Table>, EditError> {
    let subsystem = subsystem_mut(document, nqn)?;
    if !subsystem.contains_key(HOST_KEY) {
        return Ok(None);
    }
    let hosts = array_of_tables(subsystem, HOST_KEY, "subsystem.")?;
    Ok(hosts.iter_mut().find(|host| string_of(host, "nqn") == Some(host_nqn)))
}

/// A sub-table (`qos`) of an entry, created empty (as `[...qos]`) when absent.
pub fn sub_table_mut<'a>(table: &'a mut Table, key: &str, location: &str) -> Result<&'a mut Table, EditError> {
    let item = table.entry(key).or_insert(Item::Table(Table::new()));
    item.as_table_mut()
        .ok_or_else(|| layout(format!("{location}.{key}"), "is not written as a table; edit the file by hand"))
}

/// The array of tables `key` (`qos`) of an entry, created empty when absent.
pub fn sub_array_of_tables_mut<'a>(
    table: &'a mut Table,
    key: &str,
    location: &str,
) -> Result<&'a mut ArrayOfTables, EditError> {
    array_of_tables(table, key, location)
}

/// Whether `host_allow` added a host or replaced an existing entry's secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostChange {
    Added,
    Updated,
}

/// Allows `host_nqn` on subsystem `nqn` with the keys in `table` (secrets), adding an
/// entry or replacing the existing one's keys (secret rotation).
pub fn allow_host(
    document: &mut DocumentMut,
    nqn: &str,
    host_nqn: &str,
    mut table: Table,
) -> Result<HostChange, EditError> {
    let subsystem = subsystem_mut(document, nqn)?;
    let hosts = array_of_tables(subsystem, HOST_KEY, "subsystem.")?;
    table.insert("nqn", value(host_nqn));
    table.sort_values_by(|left, _, right, _| (left.get() != "nqn").cmp(&(right.get() != "nqn")));
    if let Some(existing) = hosts.iter_mut().find(|host| string_of(host, "nqn") == Some(host_nqn)) {
        // Keep the entry where it is (and its comments); replace its keys, but not
        // its QoS limits (`ns_qos` sets those; a secret rotation keeps them).
        let keys: Vec<String> = existing.iter().map(|(key, _)| key.to_string()).filter(|key| key != "qos").collect();
        for key in keys {
            existing.remove(&key);
        }
        for (key, item) in table.iter() {
            existing.insert(key, item.clone());
        }
        return Ok(HostChange::Updated);
    }
    hosts.push(table);
    Ok(HostChange::Added)
}

/// Removes `host_nqn` from subsystem `nqn`'s allowed hosts.
pub fn deny_host(document: &mut DocumentMut, nqn: &str, host_nqn: &str) -> Result<(), EditError> {
    let subsystem = subsystem_mut(document, nqn)?;
    let not_found = || EditError::NotFound {
        field: "host",
        message: format!("host {host_nqn} is not in the allowed hosts of {nqn} in the config file"),
    };
    let Some(hosts) = subsystem.get_mut(HOST_KEY) else { return Err(not_found()) };
    let hosts = hosts.as_array_of_tables_mut().ok_or_else(|| {
        layout("subsystem.host", "is not written as [[subsystem.host]] tables; edit the file by hand")
    })?;
    let index = hosts.iter().position(|host| string_of(host, "nqn") == Some(host_nqn)).ok_or_else(not_found)?;
    hosts.remove(index);
    if hosts.is_empty() {
        subsystem.remove(HOST_KEY);
    }
    Ok(())
}

/// Removes a plain key of subsystem `nqn` (absent is fine).
pub fn remove_subsystem_key(document: &mut DocumentMut, nqn: &str, key: &str) -> Result<(), EditError> {
    subsystem_mut(document, nqn)?.remove(key);
    Ok(())
}

/// In file order, each `[[listener]]`'s address, `discovery_only` and `tls` setting as written
/// (`tls` defaults to "none").
pub fn listeners(document: &DocumentMut) -> Result<Vec<(String, bool, String)>, EditError> {
    let Some(listeners) = existing_array_of_tables(document.as_table(), LISTENER_KEY, "")? else {
        return Ok(Vec::new());
    };
    Ok(listeners
        .iter()
        .map(|table| {
            let address = string_of(table, "address").unwrap_or_default().to_string();
            let discovery_only = table.get("discovery_only").and_then(Item::as_bool).unwrap_or(false);
            let tls = string_of(table, "tls").unwrap_or("none").to_string();
            (address, discovery_only, tls)
        })
        .collect())
}

/// In file order, each `[[listener]]`'s address and its `advertise` address, for those
/// that have one (what the discovery log announces instead of the bound address).
pub fn advertised_listeners(document: &DocumentMut) -> Vec<(String, String)> {
    let Ok(Some(listeners)) = existing_array_of_tables(document.as_table(), LISTENER_KEY, "") else {
        return Vec::new();
    };
    listeners
        .iter()
        .filter_map(|table| {
            Some((string_of(table, "address")?.to_string(), string_of(table, "advertise")?.to_string()))
        })
        .collect()
}

/// The index of the listener entry whose address means `address` ("127.0.0.1:4420"
/// and "127.0.0.1:04420" are one address; entries that do not parse match nothing).
fn listener_position(listeners: &ArrayOfTables, address: SocketAddr) -> Option<usize> {
    listeners
        .iter()
        .position(|table| string_of(table, "address").and_then(|text| text.parse::<SocketAddr>().ok()) == Some(address))
}

/// Appends a `[[listener]]` (its address must be new).
pub fn add_listener(
    document: &mut DocumentMut,
    address: SocketAddr,
    discovery_only: bool,
    secure_channel: nvme_target::SecureChannel,
) -> Result<(), EditError> {
    let listeners = array_of_tables(document.as_table_mut(), LISTENER_KEY, "")?;
    if listener_position(listeners, address).is_some() {
        return Err(EditError::Conflict { field: "address", message: format!("listener {address} already exists") });
    }
    let mut table = Table::new();
    table.insert("address", value(address.to_string()));
    if discovery_only {
        table.insert("discovery_only", value(true));
    }
    if secure_channel != nvme_target::SecureChannel::None {
        table.insert("tls", value(secure_channel.name()));
    }
    listeners.push(table);
    Ok(())
}

/// Removes the `[[listener]]` of `address`.
pub fn remove_listener(document: &mut DocumentMut, address: SocketAddr) -> Result<(), EditError> {
    let listeners = array_of_tables(document.as_table_mut(), LISTENER_KEY, "")?;
    let index = listener_position(listeners, address).ok_or_else(|| EditError::NotFound {
        field: "address",
        message: format!("the config file has no listener {address}"),
    })?;
    listeners.remove(index);
    if listeners.is_empty() {
        document.remove(LISTENER_KEY);
    }
    Ok(())
}

/// Which namespace entries a stand-alone subsystem document keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespaces {
    All,
    None,
    Only(u32),
}

/// A config document holding only `listener_address` and subsystem `nqn` (with the
/// chosen namespaces, NSIDs pinned), for building that subsystem's pieces with the
/// config module without touching anything else the file describes.
pub fn standalone_subsystem(
    document: &DocumentMut,
    nqn: &str,
    listener_address: &str,
    keep: Namespaces,
) -> Result<DocumentMut, EditError> {
    let mut subsystem = subsystem(document, nqn)?.clone();
    let ids = pin_namespace_ids(&mut subsystem)?;
    if let Some(namespaces) = subsystem.get_mut(NAMESPACE_KEY).and_then(Item::as_array_of_tables_mut) {
        let mut position = 0;
        namespaces.retain(|_| {
            let id = ids[position];
            position += 1;
            match keep {
                Namespaces::All => true,
                Namespaces::None => false,
                Namespaces::Only(wanted) => id == wanted,
            }
        });
        if namespaces.is_empty() {
            subsystem.remove(NAMESPACE_KEY);
        }
    }
    let mut standalone = DocumentMut::new();
    let mut listener = Table::new();
    listener.insert("address", value(listener_address));
    let mut listeners = ArrayOfTables::new();
    listeners.push(listener);
    standalone.insert(LISTENER_KEY, Item::ArrayOfTables(listeners));
    let mut subsystems = ArrayOfTables::new();
    subsystems.push(subsystem);
    standalone.insert(SUBSYSTEM_KEY, Item::ArrayOfTables(subsystems));
    Ok(standalone)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# Production target: edit with care.
[[listener]]
address = "127.0.0.1:4420"   # I/O

[[listener]]
address = "127.0.0.1:8009"
discovery_only = true

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"   # the first one

[[subsystem.namespace]]
backend = "ram"
size = "64MiB"

[[subsystem.namespace]]
# scratch space
backend = "null"
size = "1GiB"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:b"

[runtime]
threads = 1
"#;

    const A: &str = "nqn.2026-11.io.sluice:a";
    const B: &str = "nqn.2026-11.io.sluice:b";

    fn document() -> DocumentMut {
        FILE.parse().unwrap()
    }

    fn ram(size: &str) -> Table {
        let mut table = Table::new();
        table.insert("backend", value("ram"));
        table.insert("size", value(size));
        table
    }

    #[test]
    fn adding_a_namespace_pins_the_implicit_nsids_and_keeps_comments() {
        let mut document = document();
        add_namespace(&mut document, A, 7, ram("8MiB")).unwrap();
        let text = document.to_string();
        assert!(text.starts_with("# Production target: edit with care."), "{text}");
        assert!(
            text.contains("# the first one") && text.contains("# scratch space") && text.contains("# I/O"),
            "{text}"
        );
        let subsystem = subsystem(&document, A).unwrap();
        assert_eq!(namespace_ids(subsystem).unwrap(), [1, 2, 7]);
        // The implicit NSIDs are now written out, first in their tables.
        assert!(text.contains("[[subsystem.namespace]]\nnsid = 1\nbackend = \"ram\""), "{text}");
        assert!(text.contains("nsid = 7\nbackend = \"ram\"\nsize = \"8MiB\""), "{text}");
        // The new entry sits under subsystem a, before subsystem b.
        assert!(text.find("nsid = 7").unwrap() < text.find(B).unwrap(), "{text}");
        // The edited text is still a config the parser takes.
        sluice_config::Config::parse(&text).unwrap();
    }

    #[test]
    fn a_namespace_nsid_is_never_taken_twice() {
        let mut document = document();
        let error = add_namespace(&mut document, A, 2, ram("8MiB")).unwrap_err();
        assert!(matches!(error, EditError::Conflict { field: "nsid", .. }), "{error:?}");
        assert_eq!(document.to_string(), FILE, "a refused edit changes nothing");
        let error = add_namespace(&mut document, "nqn.2026-11.io.sluice:none", 1, ram("8MiB")).unwrap_err();
        assert!(matches!(error, EditError::NotFound { field: "nqn", .. }), "{error:?}");
    }

    #[test]
    fn the_first_namespace_of_a_subsystem_gets_its_own_array() {
        let mut document = document();
        add_namespace(&mut document, B, 1, ram("8MiB")).unwrap();
        let text = document.to_string();
        assert!(
            text.find("[[subsystem.namespace]]\nnsid = 1\nbackend = \"ram\"\nsize = \"8MiB\"").unwrap()
                > text.find(B).unwrap()
        );
        assert_eq!(namespace_ids(subsystem(&document, B).unwrap()).unwrap(), [1]);
        sluice_config::Config::parse(&text).unwrap();
    }

    #[test]
    fn removing_a_namespace_keeps_the_others_nsids() {
        let mut document = document();
        assert!(remove_namespace(&mut document, A, 1).unwrap());
        assert_eq!(namespace_ids(subsystem(&document, A).unwrap()).unwrap(), [2], "NSID 2 did not slide to 1");
        assert!(!remove_namespace(&mut document, A, 5).unwrap(), "not in the file");
        assert!(remove_namespace(&mut document, A, 2).unwrap());
        let text = document.to_string();
        assert!(!text.contains("subsystem.namespace"), "{text}");
        sluice_config::Config::parse(&text).unwrap();
    }

    #[test]
    fn subsystems_are_added_once_and_removed_with_their_entries() {
        let mut document = document();
        let mut table = Table::new();
        table.insert("nqn", value("nqn.2026-11.io.sluice:c"));
        add_subsystem(&mut document, table.clone()).unwrap();
        assert!(matches!(add_subsystem(&mut document, table), Err(EditError::Conflict { field: "nqn", .. })));
        remove_subsystem(&mut document, A).unwrap();
        assert_eq!(subsystem_nqns(&document).unwrap(), [B, "nqn.2026-11.io.sluice:c"]);
        let text = document.to_string();
        assert!(!text.contains("64MiB") && !text.contains("scratch space"), "{text}");
        assert!(text.contains("[runtime]\nthreads = 1"), "{text}");
        remove_subsystem(&mut document, B).unwrap();
        remove_subsystem(&mut document, "nqn.2026-11.io.sluice:c").unwrap();
        assert!(matches!(remove_subsystem(&mut document, B), Err(EditError::NotFound { .. })));
        assert!(!document.to_string().contains("[[subsystem"));
    }

    #[test]
    fn hosts_are_added_rotated_and_denied() {
        let mut document = document();
        let mut secret = Table::new();
        secret.insert("dhchap_secret", value("DHHC-1:00:old:"));
        assert_eq!(allow_host(&mut document, A, "nqn.host1", secret).unwrap(), HostChange::Added);
        assert_eq!(allow_host(&mut document, A, "nqn.host2", Table::new()).unwrap(), HostChange::Added);
        let mut rotated = Table::new();
        rotated.insert("dhchap_secret", value("DHHC-1:00:new:"));
        assert_eq!(allow_host(&mut document, A, "nqn.host1", rotated).unwrap(), HostChange::Updated);
        let text = document.to_string();
        assert!(text.contains("[[subsystem.host]]\nnqn = \"nqn.host1\"\ndhchap_secret = \"DHHC-1:00:new:\""), "{text}");
        assert!(!text.contains(":old:"), "{text}");
        assert!(text.find("nqn.host1").unwrap() < text.find("nqn.host2").unwrap(), "rotation keeps the order");
        deny_host(&mut document, A, "nqn.host1").unwrap();
        assert!(matches!(deny_host(&mut document, A, "nqn.host1"), Err(EditError::NotFound { field: "host", .. })));
        deny_host(&mut document, A, "nqn.host2").unwrap();
        assert!(!document.to_string().contains("subsystem.host"));
        assert!(matches!(deny_host(&mut document, B, "nqn.host2"), Err(EditError::NotFound { field: "host", .. })));
    }

    #[test]
    fn listeners_match_by_address_value() {
        let mut document = document();
        let address: SocketAddr = "127.0.0.1:4421".parse().unwrap();
        add_listener(&mut document, address, false, nvme_target::SecureChannel::Required).unwrap();
        assert!(matches!(
            add_listener(&mut document, "127.0.0.1:4420".parse().unwrap(), true, nvme_target::SecureChannel::None),
            Err(EditError::Conflict { field: "address", .. })
        ));
        assert_eq!(listeners(&document).unwrap().len(), 3);
        remove_listener(&mut document, "127.0.0.1:8009".parse().unwrap()).unwrap();
        assert_eq!(
            listeners(&document).unwrap(),
            [
                ("127.0.0.1:4420".to_string(), false, "none".to_string()),
                ("127.0.0.1:4421".to_string(), false, "required".to_string())
            ]
        );
        assert!(matches!(
            remove_listener(&mut document, "127.0.0.1:8009".parse().unwrap()),
            Err(EditError::NotFound { field: "address", .. })
        ));
        assert!(document.to_string().contains("tls = \"required\""), "{document}");
        sluice_config::Config::parse(&document.to_string()).unwrap();
    }

    #[test]
    fn a_standalone_subsystem_keeps_only_what_is_asked() {
        let document = document();
        let only_two = standalone_subsystem(&document, A, "127.0.0.1:1", Namespaces::Only(2)).unwrap().to_string();
        assert!(only_two.contains("nsid = 2") && !only_two.contains("64MiB"), "{only_two}");
        assert!(!only_two.contains(B) && !only_two.contains("[runtime]"), "{only_two}");
        let config = sluice_config::Config::parse(&only_two).unwrap();
        assert_eq!(config.subsystems.len(), 1);
        assert_eq!(config.subsystems[0].namespaces[0].nsid, Some(2));
        let none = standalone_subsystem(&document, A, "127.0.0.1:1", Namespaces::None).unwrap().to_string();
        assert!(!none.contains("namespace"), "{none}");
        let all = standalone_subsystem(&document, A, "127.0.0.1:1", Namespaces::All).unwrap();
        assert_eq!(namespace_ids(subsystem(&all, A).unwrap()).unwrap(), [1, 2]);
        assert_eq!(document.to_string(), FILE, "the source document is not touched");
    }

    #[test]
    fn files_these_edits_cannot_handle_are_refused_not_mangled() {
        let mut document: DocumentMut = "subsystem = [{ nqn = \"nqn.x\" }]\n".parse().unwrap();
        assert!(matches!(add_namespace(&mut document, "nqn.x", 1, ram("1MiB")), Err(EditError::Layout { .. })));
        let mut document: DocumentMut =
            "[[subsystem]]\nnqn = \"nqn.x\"\n[[subsystem.namespace]]\nnsid = \"one\"\n".parse().unwrap();
        assert!(matches!(add_namespace(&mut document, "nqn.x", 2, ram("1MiB")), Err(EditError::Layout { .. })));
    }
}

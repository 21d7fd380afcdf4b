//! What a change asks of the config module: check the whole changed configuration
//! without side effects, and build only the new piece (a subsystem, a namespace's
//! backend, a subsystem's host rules) without rebuilding what already runs.
//!
//! Building a piece goes through the config module's own build on a stand-alone
//! document holding that subsystem and every `[[backend]]` and `[[pool]]` entry (see
//! `document::standalone_subsystem`), so a namespace added live is built exactly as
//! it will be built from the file at the next start. The build starts from the
//! storage the target holds open ([`OpenStorage`]): a namespace over a named backend,
//! or carved from a pool, uses the open one, and only entries nothing opened yet are
//! opened (at their first use). What a build opens or creates comes back in
//! [`StorageChanges`], kept once the change is in force and undone otherwise.

use nvme_spec::NamespaceId;
use nvme_target::{Attachment, NamespaceSpec, SubsystemSpec};
use toml_edit::{DocumentMut, Item};

use super::document::{self, Namespaces};
use super::protocol::{RpcError, CONFIG_INVALID, INTERNAL_ERROR};
use management_client::codes::causes;
use sluice_config::{Config, ConfigError, OpenStorage, StorageChanges};

/// The listener of a stand-alone document: the config module wants one, and nothing
/// is ever bound to it.
const STANDALONE_LISTENER: &str = "127.0.0.1:4420";

/// A subsystem built for a change.
pub struct BuiltSubsystem {
    pub spec: SubsystemSpec,
    /// NSIDs of the pool namespaces it serves from its own Namespace Management pool
    /// (not in `spec`; the subsystem loads them from the pool's table).
    pub pool_namespaces: Vec<u32>,
    /// Backends that were open already and that the build used: no running namespace
    /// may still serve them when the change is applied.
    pub reused_backends: Vec<String>,
    pub storage: StorageChanges,
    /// The attachment of each namespace with a `hosts` list, by NSID (the others are
    /// attached to every admitted host): applied as the subsystem is added.
    pub attachments: Vec<(u32, Attachment)>,
}

/// What a namespace is built into.
pub enum NamespacePiece {
    /// Storage of its own (inline, a named backend, or a carve of a pool other than
    /// the subsystem's Namespace Management pool).
    Spec(NamespaceSpec),
    /// A carve of the subsystem's own Namespace Management pool, created and bound to
    /// the NSID: `Subsystem::add_bound_carve` serves it.
    SubsystemPoolCarve(NamespaceId),
}

/// A namespace built for a change.
pub struct BuiltNamespace {
    pub piece: NamespacePiece,
    /// Its `hosts` key: the namespace is added attached so, in one step.
    pub attachment: Attachment,
    pub reused_backends: Vec<String>,
    pub storage: StorageChanges,
}

/// Parses `text` and checks the whole configuration with the config module's
/// side-effect-free `Config::check` (references, NSIDs, NQNs, shapes, paths used
/// twice, limits; it reads file metadata only).
pub fn parse_and_check(text: &str) -> Result<Config, RpcError> {
    let config = Config::parse(text).map_err(|reason| RpcError::config_invalid("config file", reason))?;
    config.check().map_err(|error| config_error(&error, None))?;
    Ok(config)
}

/// Builds subsystem `nqn` of `document` with the namespaces `keep` selects, on top of
/// the storage `open` holds.
pub fn build_subsystem(
    document: &DocumentMut,
    nqn: &str,
    keep: Namespaces,
    open: &OpenStorage,
) -> Result<BuiltSubsystem, RpcError> {
    let mut standalone =
        document::standalone_subsystem(document, nqn, STANDALONE_LISTENER, keep).map_err(edit_error)?;
    // The storage entries come along; the build opens only those the kept namespaces
    // need and `open` does not hold.
    for key in ["backend", "pool"] {
        if let Some(item) = document.get(key) {
            standalone.insert(key, item.clone());
        }
    }
    if keep != Namespaces::All && !keeps_a_carve_of_its_own_pool(&standalone, nqn)? {
        // A namespace or the host rules alone do not need the subsystem's Namespace
        // Management pool (which the running subsystem holds already).
        document::remove_subsystem_key(&mut standalone, nqn, "pool").map_err(edit_error)?;
    }
    let config = Config::parse(&standalone.to_string())
        .map_err(|reason| RpcError::config_invalid(&format!("subsystem {nqn}"), reason))?;
    let mut output = config.build_with(open).map_err(|error| config_error(&error, Some(keep)))?;
    let spec = output
        .subsystems
        .pop()
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, format!("building subsystem {nqn} produced no subsystem")))?;
    let attachments = config
        .subsystems
        .iter()
        .flat_map(|subsystem| sluice_config::qos::numbered(&subsystem.namespaces))
        .filter(|(_, namespace)| namespace.hosts.is_some())
        .map(|(nsid, namespace)| (nsid, sluice_config::attachment::of(namespace)))
        .collect();
    Ok(BuiltSubsystem {
        attachments,
        spec,
        pool_namespaces: output.pool_namespaces.iter().map(|&(_, nsid)| nsid).collect(),
        reused_backends: std::mem::take(&mut output.reused_backends),
        storage: output.storage,
    })
}

/// Whether the stand-alone subsystem's namespaces include a carve of its own
/// Namespace Management pool (which then has to stay in the document).
fn keeps_a_carve_of_its_own_pool(standalone: &DocumentMut, nqn: &str) -> Result<bool, RpcError> {
    let subsystem = document::subsystem(standalone, nqn).map_err(edit_error)?;
    let Some(own_pool) = subsystem.get("pool").and_then(Item::as_str) else { return Ok(false) };
    let namespaces = subsystem.get("namespace").and_then(Item::as_array_of_tables);
    Ok(namespaces
        .into_iter()
        .flat_map(|tables| tables.iter())
        .any(|namespace| namespace.get("pool").and_then(Item::as_str) == Some(own_pool)))
}

/// Builds namespace `id` of subsystem `nqn` (its backend is opened or created, or the
/// open one is used).
pub fn build_namespace(
    document: &DocumentMut,
    nqn: &str,
    id: u32,
    open: &OpenStorage,
) -> Result<BuiltNamespace, RpcError> {
    let mut built = build_subsystem(document, nqn, Namespaces::Only(id), open)?;
    let piece = if built.pool_namespaces.contains(&id) {
        NamespacePiece::SubsystemPoolCarve(NamespaceId(id))
    } else {
        let spec =
            built.spec.namespaces.pop().filter(|namespace| namespace.id == NamespaceId(id)).ok_or_else(|| {
                RpcError::new(INTERNAL_ERROR, format!("building namespace {id} of {nqn} produced no namespace"))
            })?;
        NamespacePiece::Spec(spec)
    };
    let attachment = built
        .attachments
        .iter()
        .find(|(nsid, _)| *nsid == id)
        .map_or(Attachment::AllHosts, |(_, attachment)| attachment.clone());
    Ok(BuiltNamespace { piece, attachment, reused_backends: built.reused_backends, storage: built.storage })
}

/// A config module error as a JSON-RPC error. Locations of a stand-alone build
/// (`keep` given) say `subsystem[0]` and `namespace[0]`, which are indexes of the
/// stand-alone document, not of the file: they are rewritten to name the NSID.
pub fn config_error(error: &ConfigError, keep: Option<Namespaces>) -> RpcError {
    let (location, message, cause) = match error {
        ConfigError::Invalid { location, message } => (location, message, None),
        ConfigError::NoSpace { location, message } => (location, message, Some(causes::NO_SPACE)),
        _ => return RpcError::config_invalid("config", error.to_string()),
    };
    let mut location = location.clone();
    if keep.is_some() {
        location = location.replacen("subsystem[0] ", "subsystem ", 1);
    }
    if let Some(Namespaces::Only(id)) = keep {
        location = location.replacen("namespace[0]", &format!("namespace {id}"), 1);
    }
    let mut rpc_error = RpcError::config_invalid(&location, message.clone());
    // A location ending in `.key` names the request parameter of the same name.
    if let (Some(data), Some((_, key))) = (rpc_error.data.as_mut(), location.rsplit_once('.')) {
        if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            data["field"] = serde_json::Value::String(key.to_string());
        }
    }
    match cause {
        Some(cause) => rpc_error.with_cause(cause),
        None => rpc_error,
    }
}

/// A document edit refusal as a JSON-RPC error.
pub fn edit_error(error: document::EditError) -> RpcError {
    match error {
        document::EditError::NotFound { field, message } => {
            RpcError::refused(field, message).with_cause(causes::NOT_FOUND)
        }
        document::EditError::Conflict { field, message } => {
            RpcError::refused(field, message).with_cause(causes::ALREADY_EXISTS)
        }
        document::EditError::Layout { location, message } => RpcError {
            code: CONFIG_INVALID,
            message: format!("the config file cannot be edited automatically: {location}: {message}"),
            data: Some(serde_json::json!({ "location": location, "reason": message })),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[listener]]
address = "127.0.0.1:4420"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"

[[subsystem.namespace]]
backend = "ram"
size = "1MiB"

[[subsystem.namespace]]
backend = "null"
size = "2MiB"
block_size = 4096
"#;

    fn document(text: &str) -> DocumentMut {
        text.parse().unwrap()
    }

    #[test]
    fn a_valid_file_checks_and_a_duplicate_nsid_does_not() {
        parse_and_check(FILE).unwrap();
        let duplicate = FILE.replace("backend = \"null\"", "nsid = 1\nbackend = \"null\"");
        let error = parse_and_check(&duplicate).unwrap_err();
        assert_eq!(error.code, CONFIG_INVALID);
        assert_eq!(error.data.unwrap()["field"], "nsid");
        let no_listener = FILE.replace("address = \"127.0.0.1:4420\"", "address = \"nowhere\"");
        let error = parse_and_check(&no_listener).unwrap_err();
        assert!(error.message.contains("listener[0].address"), "{}", error.message);
        let unknown_key = FILE.replace("size = \"1MiB\"", "size = \"1MiB\"\ncolour = \"red\"");
        let error = parse_and_check(&unknown_key).unwrap_err();
        assert!(error.message.contains("colour") && error.message.contains("line"), "{}", error.message);
    }

    #[test]
    fn one_namespace_is_built_with_its_nsid() {
        let built = build_namespace(&document(FILE), "nqn.2026-11.io.sluice:a", 2, &OpenStorage::default());
        let Ok(BuiltNamespace { piece: NamespacePiece::Spec(namespace), .. }) = built else { panic!("builds") };
        assert_eq!(namespace.id, NamespaceId(2));
        assert_eq!(namespace.backend.kind(), "null");
        assert_eq!(namespace.backend.geometry().block_count, 512);
    }

    #[test]
    fn a_bad_namespace_names_its_nsid_and_field() {
        let bad = FILE.replace("size = \"2MiB\"", "size = 1000");
        let error =
            build_namespace(&document(&bad), "nqn.2026-11.io.sluice:a", 2, &OpenStorage::default()).err().unwrap();
        let data = error.data.unwrap();
        assert_eq!(data["field"], "size", "{data}");
        assert!(data["location"].as_str().unwrap().contains("namespace 2"), "{data}");
    }

    #[test]
    fn named_storage_is_built_once_and_reused_when_open() {
        let pooled = format!(
            "{FILE}\n[[subsystem.namespace]]\nnsid = 3\ndevice = \"fast\"\n\n\
             [[subsystem.namespace]]\nnsid = 4\npool = \"p\"\nsize = \"1MiB\"\n"
        )
        .replacen(
            "[[subsystem]]",
            "[[backend]]\nname = \"fast\"\nkind = \"ram\"\nsize = \"4MiB\"\n\n\
             [[backend]]\nname = \"pooldev\"\nkind = \"ram\"\nsize = \"8MiB\"\n\n\
             [[pool]]\nname = \"p\"\ndevice = \"pooldev\"\n\n[[subsystem]]",
            1,
        );
        let document = document(&pooled);
        let (_, open) = Config::parse(&pooled).unwrap().open().unwrap();
        let fast = std::sync::Arc::clone(&open.backend("fast").unwrap().backend);
        // The named backend that is open is the one the namespace gets.
        let built = build_namespace(&document, "nqn.2026-11.io.sluice:a", 3, &open).ok().unwrap();
        let NamespacePiece::Spec(spec) = &built.piece else { panic!("a namespace of its own") };
        assert!(std::sync::Arc::ptr_eq(&spec.backend, &fast));
        assert_eq!(built.reused_backends, ["fast"]);
        assert!(built.storage.opened_names().is_empty(), "nothing opened twice");
        // The pool namespace's carve is found again in the open pool (created at start).
        let pool = std::sync::Arc::clone(&open.pool("p").unwrap().pool);
        let built = build_namespace(&document, "nqn.2026-11.io.sluice:a", 4, &open).ok().unwrap();
        assert!(built.storage.opened_names().is_empty());
        assert_eq!(pool.records().len(), 1);
        drop(built);
        assert_eq!(pool.records().len(), 1, "a carve found, not created, stays when the change is dropped");

        // Without open storage the same build opens what it needs, and the change
        // keeps it.
        let mut fresh = OpenStorage::default();
        let built = build_namespace(&document, "nqn.2026-11.io.sluice:a", 3, &fresh).ok().unwrap();
        assert_eq!(built.storage.opened_names(), ["fast"]);
        built.storage.keep(&mut fresh);
        assert!(fresh.backend("fast").is_some());
        assert!(fresh.pool("p").is_none(), "only what the namespace needs is opened");
        assert!(open.backend("pooldev").is_some());
    }

    #[test]
    fn a_carve_created_for_a_dropped_change_is_deleted_again() {
        let with_pool = FILE.replacen(
            "[[subsystem]]",
            "[[backend]]\nname = \"pooldev\"\nkind = \"ram\"\nsize = \"8MiB\"\n\n\
             [[pool]]\nname = \"p\"\ndevice = \"pooldev\"\n\n[[subsystem]]",
            1,
        );
        let (_, open) = Config::parse(&with_pool).unwrap().open().unwrap();
        assert!(open.pool("p").is_none(), "nothing used the pool at start");
        let pooled = format!("{with_pool}\n[[subsystem.namespace]]\nnsid = 4\npool = \"p\"\nsize = \"1MiB\"\n");
        let built = build_namespace(&document(&pooled), "nqn.2026-11.io.sluice:a", 4, &open).ok().unwrap();
        assert_eq!(built.storage.opened_names(), ["pooldev", "p"], "opened lazily at first use");
        let NamespacePiece::Spec(spec) = &built.piece else { panic!("a carve served as a namespace") };
        assert_eq!(spec.backend.geometry().capacity_bytes(), 1 << 20);
        let pool = std::sync::Arc::clone(&built.storage.opened.pool("p").unwrap().pool);
        assert_eq!(pool.records().len(), 1);
        drop(built);
        assert!(pool.records().is_empty(), "the change was dropped, so its carve was deleted");
    }
}

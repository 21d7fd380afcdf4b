//! What a change asks of the config module: check the whole changed configuration
//! without side effects, and build only the new piece (a subsystem, a namespace's
//! backend, a subsystem's host rules) without rebuilding what already runs.
//!
//! Building a piece goes through the config module's own `target_spec` on a
//! stand-alone document holding just that subsystem (see
//! `document::standalone_subsystem`), so a namespace added live is built exactly as
//! it will be built from the file at the next start.
//!
//! Pieces this cannot build live are refused before anything changes: namespaces
//! over a named `[[backend]]` (`device`) or a pool (`pool`), and new subsystems with
//! a Namespace Management pool. Their storage may already be open in the running
//! target, and building it a second time would open a pool table twice. (Inline
//! namespaces and host rules of a subsystem with a pool are built without it.)

use nvme_spec::NamespaceId;
use nvme_target::{NamespaceSpec, SubsystemSpec};
use toml_edit::DocumentMut;

use super::document::{self, Namespaces};
use super::protocol::{RpcError, CONFIG_INVALID, INTERNAL_ERROR};
use crate::config::{Config, ConfigError};

/// The listener of a stand-alone document: the config module wants one, and nothing
/// is ever bound to it.
const STANDALONE_LISTENER: &str = "127.0.0.1:4420";

/// Keys that make a namespace or subsystem use shared storage that the running
/// target may hold open already (see the module comment).
const SHARED_STORAGE_KEYS: [&str; 2] = ["device", "pool"];

/// Parses `text` and checks the whole configuration with the config module's
/// side-effect-free `Config::check` (references, NSIDs, NQNs, shapes, paths used
/// twice, limits; it reads file metadata only).
pub fn parse_and_check(text: &str) -> Result<Config, RpcError> {
    let config = Config::parse(text).map_err(|reason| RpcError::config_invalid("config file", reason))?;
    config.check().map_err(|error| config_error(&error, None))?;
    Ok(config)
}

/// Builds subsystem `nqn` of `document` with the namespaces `keep` selects.
pub fn build_subsystem(document: &DocumentMut, nqn: &str, keep: Namespaces) -> Result<SubsystemSpec, RpcError> {
    let mut standalone =
        document::standalone_subsystem(document, nqn, STANDALONE_LISTENER, keep).map_err(edit_error)?;
    if keep != Namespaces::All {
        // A namespace or the host rules alone do not need the subsystem's Namespace
        // Management pool, which the running target holds open already.
        document::remove_subsystem_key(&mut standalone, nqn, "pool").map_err(edit_error)?;
    }
    refuse_shared_storage(&standalone, nqn)?;
    let config = Config::parse(&standalone.to_string())
        .map_err(|reason| RpcError::config_invalid(&format!("subsystem {nqn}"), reason))?;
    let mut spec = config.target_spec().map_err(|error| config_error(&error, Some(keep)))?;
    spec.subsystems
        .pop()
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, format!("building subsystem {nqn} produced no subsystem")))
}

/// Builds namespace `id` of subsystem `nqn` (its backend is opened or created).
pub fn build_namespace(document: &DocumentMut, nqn: &str, id: u32) -> Result<NamespaceSpec, RpcError> {
    let mut spec = build_subsystem(document, nqn, Namespaces::Only(id))?;
    spec.namespaces
        .pop()
        .filter(|namespace| namespace.id == NamespaceId(id))
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, format!("building namespace {id} of {nqn} produced no namespace")))
}

fn refuse_shared_storage(standalone: &DocumentMut, nqn: &str) -> Result<(), RpcError> {
    let subsystem = document::subsystem(standalone, nqn).map_err(edit_error)?;
    if subsystem.contains_key("pool") {
        return Err(RpcError::refused(
            "pool",
            format!(
                "subsystem {nqn} uses a Namespace Management pool, which cannot be opened while the target runs; \
                 add it to the config file and restart sluice serve"
            ),
        ));
    }
    let namespaces = subsystem.get("namespace").and_then(toml_edit::Item::as_array_of_tables);
    for namespace in namespaces.into_iter().flat_map(|tables| tables.iter()) {
        if let Some(key) = SHARED_STORAGE_KEYS.iter().find(|key| namespace.contains_key(key)) {
            return Err(RpcError::refused(
                key,
                format!(
                    "namespaces over a named backend or a pool (`{key}`) cannot be built while the target runs yet; \
                     add it to the config file and restart sluice serve"
                ),
            ));
        }
    }
    Ok(())
}

/// A config module error as a JSON-RPC error. Locations of a stand-alone build
/// (`keep` given) say `subsystem[0]` and `namespace[0]`, which are indexes of the
/// stand-alone document, not of the file: they are rewritten to name the NSID.
pub fn config_error(error: &ConfigError, keep: Option<Namespaces>) -> RpcError {
    let ConfigError::Invalid { location, message } = error else {
        return RpcError::config_invalid("config", error.to_string());
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
    rpc_error
}

/// A document edit refusal as a JSON-RPC error.
pub fn edit_error(error: document::EditError) -> RpcError {
    match error {
        document::EditError::NotFound { field, message } | document::EditError::Conflict { field, message } => {
            RpcError::refused(field, message)
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
        let Ok(namespace) = build_namespace(&document(FILE), "nqn.2026-11.io.sluice:a", 2) else { panic!("builds") };
        assert_eq!(namespace.id, NamespaceId(2));
        assert_eq!(namespace.backend.kind(), "null");
        assert_eq!(namespace.backend.geometry().block_count, 512);
    }

    #[test]
    fn a_bad_namespace_names_its_nsid_and_field() {
        let bad = FILE.replace("size = \"2MiB\"", "size = 1000");
        let error = build_namespace(&document(&bad), "nqn.2026-11.io.sluice:a", 2).err().unwrap();
        let data = error.data.unwrap();
        assert_eq!(data["field"], "size", "{data}");
        assert!(data["location"].as_str().unwrap().contains("namespace 2"), "{data}");
    }

    #[test]
    fn shared_storage_is_refused_before_it_is_opened() {
        let pooled = FILE.replace("backend = \"null\"", "device = \"fast\"");
        let error = build_subsystem(&document(&pooled), "nqn.2026-11.io.sluice:a", Namespaces::All).err().unwrap();
        assert_eq!(error.data.unwrap()["field"], "device");
        // Only the namespaces selected count.
        assert!(build_subsystem(&document(&pooled), "nqn.2026-11.io.sluice:a", Namespaces::Only(1)).is_ok());
        // A subsystem's management pool is refused whole, and left out for one namespace.
        let managed =
            FILE.replace("nqn = \"nqn.2026-11.io.sluice:a\"", "nqn = \"nqn.2026-11.io.sluice:a\"\npool = \"p\"");
        let error = build_subsystem(&document(&managed), "nqn.2026-11.io.sluice:a", Namespaces::All).err().unwrap();
        assert_eq!(error.data.unwrap()["field"], "pool");
        assert!(build_namespace(&document(&managed), "nqn.2026-11.io.sluice:a", 1).is_ok());
    }
}

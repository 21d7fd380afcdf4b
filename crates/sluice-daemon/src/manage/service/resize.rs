//! Growing a namespace while hosts use it: `ns_resize`, the same change arriving by
//! a reload (an edited `size`, or another gateway of the group that resized), and the
//! periodic size check that notices an RBD image resized elsewhere.
//!
//! Order, for a crash at any point: the configuration is written first (the size is
//! the intent), then the storage grows durably, then hosts are told. A start that
//! finds the configuration larger than the storage grows the storage (a pool carve in
//! `ensure_carve`, a file or an RBD image when opened), so an interrupted resize
//! completes at the next start. Nothing ever shrinks: a host may hold data in any
//! block it was once given.

use management_client::codes::causes;
use nvme_spec::NamespaceId;
use serde_json::{json, Value};
use toml_edit::value;

use super::super::document;
use super::super::protocol::{Params, RpcError, SizeParam, CHANGE_REFUSED};
use super::{edit_error, Management};
use nvme_target::GrowNamespaceError;
use sluice_config::describe_bytes;
use sluice_config::Change;
use storage::GrowError;

impl Management {
    /// `ns_resize {nqn, nsid, size}`: grows the namespace to `size` bytes live.
    pub(super) fn ns_resize(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let nqn = params.required_string("nqn")?;
        let nsid = params.required_u32("nsid")?;
        let size_bytes = match params.optional_size("size")? {
            Some(SizeParam::Bytes(bytes)) => bytes,
            Some(SizeParam::Text(text)) => {
                units::parse_byte_size(&text).map_err(|reason| RpcError::invalid_params("size", reason.to_string()))?
            }
            None => return Err(RpcError::invalid_params("size", "missing: give the new size, e.g. \"20GiB\"")),
        };
        params.finish("ns_resize")?;
        let subsystem = self.live_subsystem(&nqn)?;
        let namespace = subsystem.namespace(NamespaceId(nsid)).ok_or_else(|| {
            RpcError::refused("nsid", format!("subsystem {nqn} has no namespace {nsid}")).with_cause(causes::NOT_FOUND)
        })?;
        let before = namespace.geometry();
        let block_size = u64::from(before.block_size_bytes);
        if size_bytes == 0 || !size_bytes.is_multiple_of(block_size) {
            return Err(RpcError::invalid_params(
                "size",
                format!("{size_bytes} bytes is not a positive multiple of the namespace's {block_size}-byte blocks"),
            ));
        }
        let block_count = size_bytes / block_size;
        let answer = |changed: bool, after: storage::Geometry| {
            json!({
                "nqn": nqn,
                "nsid": nsid,
                "size_bytes": after.capacity_bytes(),
                "block_size": after.block_size_bytes,
                "blocks": after.block_count,
                "previous_size_bytes": before.capacity_bytes(),
                "changed": changed,
            })
        };
        if block_count == before.block_count {
            return Ok(answer(false, before));
        }
        if block_count < before.block_count {
            return Err(refusal(
                causes::WOULD_SHRINK,
                format!(
                    "namespace {nsid} of {nqn} holds {}; namespaces only grow (a host may hold data in every block), \
                     so give a size of at least that",
                    describe_bytes(before.capacity_bytes())
                ),
            ));
        }
        // The file's size, where it has one, changes first: a crash before the
        // storage grew is finished by the next start.
        let mut draft = self.draft()?;
        let home = set_size_in_document(&mut draft.document, &nqn, nsid, size_bytes)?;
        let in_file = home != SizeHome::NotInFile;
        if in_file {
            let text = self.check(&draft)?;
            self.write(&text)?;
        }
        match self.target.grow_namespace(&subsystem, NamespaceId(nsid), block_count) {
            Ok((_, after)) => {
                if let SizeHome::Backend(name) = &home {
                    // The open backend's definition follows, so the next reload does
                    // not report the size as waiting for a restart.
                    self.storage.note_backend_size(name, size_bytes);
                }
                tracing::info!(subsystem = %nqn, nsid, from = before.capacity_bytes(), to = after.capacity_bytes(),
                    "management: namespace grown; its hosts were told");
                Ok(answer(true, after))
            }
            Err(error) => {
                let refused = grow_refusal(&nqn, nsid, &error);
                if !in_file {
                    return Err(refused);
                }
                // The file goes back; the refusal keeps its field and cause, and says
                // whether the file could be restored.
                let restored = self.restore(draft.previous, refused.message.clone());
                let file_restored = restored.data.as_ref().and_then(|data| data.get("file_restored")).cloned();
                let mut data = refused.data.clone().unwrap_or_else(|| json!({}));
                data["file_restored"] = file_restored.clone().unwrap_or(Value::Bool(false));
                if file_restored == Some(Value::Bool(true)) {
                    Err(RpcError { data: Some(data), ..refused })
                } else {
                    Err(RpcError { code: restored.code, message: restored.message, data: Some(data) })
                }
            }
        }
    }

    /// A reload's [`Change::NamespaceGrown`] or [`Change::BackendGrown`]: the storage
    /// grows (an RBD image another gateway grew already is only re-read) and hosts are
    /// told. `Err` says why not, for the log.
    pub(super) fn apply_grown(&mut self, change: &Change) -> Result<(), String> {
        match change {
            Change::NamespaceGrown { nqn, nsid, size_bytes } => {
                let subsystem =
                    self.target.subsystem_by_nqn(nqn).ok_or_else(|| format!("subsystem {nqn} is not running"))?;
                let namespace =
                    subsystem.namespace(NamespaceId(*nsid)).ok_or_else(|| format!("no namespace {nsid}"))?;
                let block_size = u64::from(namespace.geometry().block_size_bytes);
                self.target
                    .grow_namespace(&subsystem, NamespaceId(*nsid), size_bytes / block_size)
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            }
            Change::BackendGrown { name, size_bytes } => {
                let open = self.storage.backend(name).ok_or_else(|| format!("backend {name:?} is not open"))?;
                let block_size = u64::from(open.backend.geometry().block_size_bytes);
                open.backend.grow(size_bytes / block_size).map_err(|error| error.to_string())?;
                self.storage.note_backend_size(name, *size_bytes);
                refresh_namespace_sizes(&self.target);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The target, for the thread that checks storage sizes.
    pub fn target(&self) -> std::sync::Arc<nvme_target::Target> {
        std::sync::Arc::clone(&self.target)
    }
}

/// Grows every namespace whose storage grew elsewhere (an RBD image resized through
/// another gateway or with `rbd resize`) and tells its hosts. Run every few seconds
/// by a thread of its own (`worker.rs`) and after a reload grew a backend.
pub fn refresh_namespace_sizes(target: &nvme_target::Target) {
    let refresh = target.refresh_namespace_sizes();
    for (nqn, nsid, before, after) in &refresh.grown {
        tracing::info!(subsystem = %nqn, nsid = nsid.0, from = before.capacity_bytes(), to = after.capacity_bytes(),
            "namespace storage grew elsewhere; the namespace grew and its hosts were told");
    }
    for (nqn, nsid, error) in &refresh.failed {
        tracing::debug!(subsystem = %nqn, nsid = nsid.0, %error, "could not read a namespace's storage size");
    }
}

/// A refusal with a machine-readable `data.cause` ([`causes`]).
fn refusal(cause: &str, message: String) -> RpcError {
    RpcError {
        code: CHANGE_REFUSED,
        message: message.clone(),
        data: Some(json!({ "field": "size", "reason": message, "cause": cause })),
    }
}

fn grow_refusal(nqn: &str, nsid: u32, error: &GrowNamespaceError) -> RpcError {
    let what = format!("namespace {nsid} of {nqn}");
    match error {
        GrowNamespaceError::NoSuchNamespace => {
            RpcError::refused("nsid", format!("subsystem {nqn} has no namespace {nsid}")).with_cause(causes::NOT_FOUND)
        }
        GrowNamespaceError::Storage(GrowError::NotResizable { kind }) => refusal(
            causes::NOT_RESIZABLE,
            format!("{what} is served from {kind} storage, whose size is fixed while it is served; move the data to a pool carve, a file or an RBD image to grow it"),
        ),
        GrowNamespaceError::Storage(GrowError::WouldShrink { .. }) => {
            refusal(causes::WOULD_SHRINK, format!("{what}: {error}", error = error))
        }
        GrowNamespaceError::Storage(GrowError::NoSpace(reason)) => {
            refusal(causes::NO_SPACE, format!("{what} cannot grow: {reason}"))
        }
        GrowNamespaceError::Storage(other) => {
            RpcError::with_field(CHANGE_REFUSED, "size", format!("{what} cannot grow: {other}"))
        }
    }
}

/// Where the file keeps a namespace's size.
#[derive(Debug, PartialEq, Eq)]
enum SizeHome {
    /// Not in the file: a host made the namespace through Namespace Management, and
    /// its pool table keeps the size.
    NotInFile,
    /// The namespace entry's own `size`.
    Namespace,
    /// The `size` of the `[[backend]]` the namespace names (`device`).
    Backend(String),
}

/// Writes `size_bytes` where the file keeps the namespace's size.
fn set_size_in_document(
    document: &mut toml_edit::DocumentMut,
    nqn: &str,
    nsid: u32,
    size_bytes: u64,
) -> Result<SizeHome, RpcError> {
    let bytes = i64::try_from(size_bytes).map_err(|_| RpcError::invalid_params("size", "is too large"))?;
    let Some(namespace) = document::namespace_mut(document, nqn, nsid).map_err(edit_error)? else {
        return Ok(SizeHome::NotInFile);
    };
    let device = namespace.get("device").and_then(toml_edit::Item::as_str).map(str::to_string);
    match device {
        Some(name) => {
            let backend = document::backend_mut(document, &name).ok_or_else(|| {
                RpcError::new(
                    CHANGE_REFUSED,
                    format!("namespace {nsid} of {nqn} names backend {name:?}, which the config file does not define"),
                )
            })?;
            backend.insert("size", value(bytes));
            Ok(SizeHome::Backend(name))
        }
        None => {
            namespace.insert("size", value(bytes));
            Ok(SizeHome::Namespace)
        }
    }
}

//! Error codes of the management API (JSON-RPC 2.0, section 5.1; server-defined codes
//! in -32000..=-32099). Every refusal carries one, so a script can branch on it.

/// The request is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON, but not a JSON-RPC 2.0 request (no method, bad id, a batch, too long).
pub const INVALID_REQUEST: i64 = -32600;
/// No method of that name.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// A parameter is missing, unknown, or has the wrong type or value.
pub const INVALID_PARAMS: i64 = -32602;
/// A bug on our side; the running target and the file are unchanged.
pub const INTERNAL_ERROR: i64 = -32603;

// Server-defined codes live in -32000..=-32099 (JSON-RPC 2.0, section 5.1).

/// The change conflicts with what exists (NQN or NSID taken, unknown subsystem,
/// port in use) and was not made.
pub const CHANGE_REFUSED: i64 = -32000;
/// The configuration with the change would not validate (or a backend could not be
/// built from it); `data.location` names the entry. Nothing was changed.
pub const CONFIG_INVALID: i64 = -32001;
/// `sluice serve` runs without a config file, so no change can be made persistent
/// and none is made.
pub const NO_CONFIG_FILE: i64 = -32002;
/// The config file on disk differs from what the running target was built from
/// (edited by hand); changes are refused until the two agree again.
pub const CONFIG_CHANGED_ON_DISK: i64 = -32003;
/// The new config file could not be written; the old one and the running target
/// are unchanged.
pub const PERSIST_FAILED: i64 = -32004;
/// The file was written but the running target refused the change; the previous
/// file was put back (`data.file_restored` says whether that worked).
pub const APPLY_FAILED: i64 = -32005;
/// A gateway group's configuration was changed through another member first (its
/// version moved on): nothing was written; retry once this member has applied it.
pub const GROUP_CONFIG_CONFLICT: i64 = -32006;
/// The caller may not call this method: a network client with `access = "read-only"`
/// asked for a change, or its certificate's CN is not listed among the server's
/// `[[management.network.client]]` entries. The message names the client, the method
/// and what to change. Nothing was changed.
pub const ACCESS_DENIED: i64 = -32007;

/// Every code above, in the order docs/operations.md lists them (a test checks the
/// two agree).
pub const ALL: [i64; 13] = [
    PARSE_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    INVALID_PARAMS,
    INTERNAL_ERROR,
    CHANGE_REFUSED,
    CONFIG_INVALID,
    NO_CONFIG_FILE,
    CONFIG_CHANGED_ON_DISK,
    PERSIST_FAILED,
    APPLY_FAILED,
    GROUP_CONFIG_CONFLICT,
    ACCESS_DENIED,
];

/// Machine-readable causes a refusal carries in `data.cause`, so a caller (the CSI
/// driver) branches on them instead of on the message, which is for people.
pub mod causes {
    /// The pool (or image store) has no room for what was asked.
    pub const NO_SPACE: &str = "no_space";
    /// `ns_resize` to a size below the namespace's: shrinking would cut off blocks a
    /// host may hold data in, so it is never done.
    pub const WOULD_SHRINK: &str = "would_shrink";
    /// The namespace's storage cannot change size while served (a RAM disk, a block
    /// device, a RAID0 set).
    pub const NOT_RESIZABLE: &str = "not_resizable";
    /// What the request names is not there: no such subsystem, namespace or image.
    pub const NOT_FOUND: &str = "not_found";
    /// What the request would make exists already: an NQN, an NSID, an NGUID/UUID
    /// used by another namespace, a listener, a config entry.
    pub const ALREADY_EXISTS: &str = "already_exists";
    /// Something still uses it: a host still attached to a namespace of the
    /// subsystem, a backend another entry serves.
    pub const IN_USE: &str = "in_use";
    /// An RBD image that has snapshots cannot be deleted (they would go with it).
    pub const HAS_SNAPSHOTS: &str = "has_snapshots";

    /// Every cause above.
    pub const ALL: [&str; 7] =
        [NO_SPACE, WOULD_SHRINK, NOT_RESIZABLE, NOT_FOUND, ALREADY_EXISTS, IN_USE, HAS_SNAPSHOTS];
}

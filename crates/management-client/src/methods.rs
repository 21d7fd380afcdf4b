//! The method table of the management API: every method `sluice serve` answers and
//! what it does to the target. One table for every side: the server dispatches and
//! authorises by it (`rpc_methods` lists it, a method missing here is not found), the
//! audit log follows it, and a test checks docs/operations.md against it.

/// The management API's version, answered by `api_version` so a client can tell what
/// it talks to before it relies on a method. Bumped when a method changes in a way an
/// existing client would misread (a parameter or reply field removed, renamed or given
/// another meaning); a method or an optional field added keeps it.
///
/// History:
/// - 1 (Sluice 0.1, 2026-12): the methods of [`METHODS`].
pub const API_VERSION: u32 = 1;

/// What a method does to the target: decides who may call it and what is audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Reads state and changes nothing: open to read-only network clients, not audited.
    ReadsOnly,
    /// Changes the target or its config file (or could: a refused change too):
    /// read-write clients only, one audit line per call.
    Changes,
}

/// Every method and its effect, in the order `rpc_methods` lists them. A new method
/// needs a line here (and a row in docs/operations.md), and whether read-only clients
/// may call it is decided on that line.
pub const METHODS: [(&str, Effect); 32] = [
    ("subsystem_add", Effect::Changes),
    ("subsystem_remove", Effect::Changes),
    ("subsystem_list", Effect::ReadsOnly),
    ("subsystem_show", Effect::ReadsOnly),
    ("ns_add", Effect::Changes),
    ("ns_remove", Effect::Changes),
    ("ns_list", Effect::ReadsOnly),
    ("ns_qos", Effect::Changes),
    ("ns_resize", Effect::Changes),
    ("ns_attach", Effect::Changes),
    ("ns_detach", Effect::Changes),
    ("host_allow", Effect::Changes),
    ("host_deny", Effect::Changes),
    ("host_list", Effect::ReadsOnly),
    ("listener_add", Effect::Changes),
    ("listener_remove", Effect::Changes),
    ("listener_list", Effect::ReadsOnly),
    ("config_show", Effect::ReadsOnly),
    ("rpc_methods", Effect::ReadsOnly),
    ("api_version", Effect::ReadsOnly),
    ("target_show", Effect::ReadsOnly),
    ("backend_list", Effect::ReadsOnly),
    ("backend_remove", Effect::Changes),
    ("pool_list", Effect::ReadsOnly),
    ("limits_show", Effect::ReadsOnly),
    ("gateway_status", Effect::ReadsOnly),
    ("gateway_drain", Effect::Changes),
    ("gateway_undrain", Effect::Changes),
    ("gateway_move", Effect::Changes),
    ("rbd_snapshot_create", Effect::Changes),
    ("rbd_snapshot_remove", Effect::Changes),
    ("rbd_snapshot_list", Effect::ReadsOnly),
];

/// The effect of `method`; `None`: no such method.
pub fn method_effect(method: &str) -> Option<Effect> {
    METHODS.iter().find(|(name, _)| *name == method).map(|&(_, effect)| effect)
}

/// The names of every method, in the table's order.
pub fn method_names() -> Vec<&'static str> {
    METHODS.iter().map(|&(name, _)| name).collect()
}

/// The names of the methods that change nothing.
pub fn read_only_method_names() -> Vec<&'static str> {
    METHODS.iter().filter(|(_, effect)| *effect == Effect::ReadsOnly).map(|&(name, _)| name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_is_listed_once() {
        let names = method_names();
        for (index, name) in names.iter().enumerate() {
            assert!(!names[..index].contains(name), "{name} is in METHODS twice");
        }
        assert_eq!(method_effect("ns_list"), Some(Effect::ReadsOnly));
        assert_eq!(method_effect("ns_add"), Some(Effect::Changes));
        assert_eq!(method_effect("no_such_method"), None);
        assert!(read_only_method_names().contains(&"rpc_methods"));
        assert!(!read_only_method_names().contains(&"ns_remove"));
    }
}

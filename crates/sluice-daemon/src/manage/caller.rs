//! Who calls the management API, what they may call, and the audit log of changes.
//!
//! The local socket's callers may call everything (the socket file's mode already
//! limits them to the user running `sluice serve`). A network client is named by its
//! certificate's subject CN and may call what its `[[management.network.client]]`
//! entry's `access` allows; the effect of each method comes from the one table,
//! `service::METHODS`. Every call of a method that changes something, allowed or not,
//! gets one line on the tracing target [`AUDIT_TARGET`], so operators can route it.

use std::net::SocketAddr;

use super::protocol::{RpcError, ACCESS_DENIED};
use super::service::{method_effect, read_only_method_names, Effect};
use sluice_config::management::Access;

/// The tracing target of the audit log (`SLUICE_LOG=info,sluice::audit=info` keeps it
/// when the rest is quieter; a JSON log has it in each line's "target").
pub const AUDIT_TARGET: &str = "sluice::audit";

/// A connected caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Shown in the audit log and in refusals: "local socket", or
    /// `client "CN" from ADDRESS`.
    name: String,
    rights: Rights,
}

/// What a caller may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rights {
    /// The local socket: everything.
    Local,
    /// A listed network client: what its entry's `access` allows.
    Network(Access),
    /// A network client whose CN is not listed: nothing.
    Unlisted,
}

impl Caller {
    pub fn local_socket() -> Caller {
        Caller { name: "local socket".to_string(), rights: Rights::Local }
    }

    /// A network client with a certificate the client CA signed; `access` is `None`
    /// when its CN is not listed.
    pub fn network(common_name: &str, peer: SocketAddr, access: Option<Access>) -> Caller {
        let rights = access.map_or(Rights::Unlisted, Rights::Network);
        Caller { name: format!("client {common_name:?} from {peer}"), rights }
    }

    /// A refused caller gets one answer, then the connection is closed.
    pub fn is_refused(&self) -> bool {
        self.rights == Rights::Unlisted
    }

    /// Whether this caller may call `method`: a refusal names the client, the method
    /// and what to change. An unknown method is let through to be answered "not found"
    /// (the service runs only the table's methods).
    pub fn authorise(&self, method: &str) -> Result<(), RpcError> {
        match (self.rights, method_effect(method)) {
            (Rights::Local | Rights::Network(Access::ReadWrite), _) => Ok(()),
            (Rights::Network(Access::ReadOnly), Some(Effect::ReadsOnly) | None) => Ok(()),
            (Rights::Network(Access::ReadOnly), Some(Effect::Changes)) => Err(RpcError::new(
                ACCESS_DENIED,
                format!(
                    "{} has access = \"read-only\" and may not call {method}, which changes the target; it may call {}. \
                     To let it make changes, set access = \"read-write\" in its [[management.network.client]] entry \
                     and restart sluice serve",
                    self.name,
                    read_only_method_names().join(", ")
                ),
            )),
            (Rights::Unlisted, _) => Err(RpcError::new(
                ACCESS_DENIED,
                format!(
                    "{} is refused ({method} not run): its certificate is signed by the client CA but its CN is not \
                     listed in this server's [management.network] clients; add a [[management.network.client]] entry \
                     with this common_name and access = \"read-only\" or \"read-write\", then restart sluice serve",
                    self.name
                ),
            )),
        }
    }
}

impl Caller {
    /// What this caller is shown of `method`'s result: a read-only client reads
    /// `config_show`'s text with host secrets (DH-HMAC-CHAP secrets, TLS PSKs) masked,
    /// since it may not change them and so has no need to know them.
    pub fn shown_result(&self, method: &str, mut result: serde_json::Value) -> serde_json::Value {
        if self.rights == Rights::Network(Access::ReadOnly) && method == "config_show" {
            if let Some(text) = result.get("text").and_then(serde_json::Value::as_str) {
                result["text"] = sluice_config::redact_secrets(text).into();
            }
        }
        result
    }
}

impl std::fmt::Display for Caller {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.name)
    }
}

/// Whether calls of `method` are audited: those that change something (or would have).
pub fn is_audited(method: &str) -> bool {
    method_effect(method) == Some(Effect::Changes)
}

/// The audit line of one change request: who, what (params already redacted), and
/// the outcome (`Err(code)`: the JSON-RPC error code it was refused with).
pub fn audit(caller: &Caller, method: &str, redacted_params: &str, outcome: Result<(), i64>) {
    match outcome {
        Ok(()) => tracing::info!(
            target: AUDIT_TARGET,
            who = %caller,
            method = %method,
            params = %redacted_params,
            outcome = %"ok",
            "management change"
        ),
        Err(code) => tracing::info!(
            target: AUDIT_TARGET,
            who = %caller,
            method = %method,
            params = %redacted_params,
            outcome = %"error",
            code,
            "management change"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use management_client::methods::METHODS;

    fn peer() -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 7], 50_000))
    }

    #[test]
    fn read_only_clients_may_call_exactly_the_methods_that_change_nothing() {
        let monitor = Caller::network("monitor", peer(), Some(Access::ReadOnly));
        for (method, effect) in METHODS {
            let allowed = monitor.authorise(method).is_ok();
            assert_eq!(allowed, effect == Effect::ReadsOnly, "{method}");
            assert_eq!(is_audited(method), effect == Effect::Changes, "{method}");
        }
        let refusal = monitor.authorise("ns_add").unwrap_err();
        assert_eq!(refusal.code, ACCESS_DENIED);
        for part in ["client \"monitor\" from 192.0.2.7:50000", "ns_add", "access = \"read-write\"", "ns_list"] {
            assert!(refusal.message.contains(part), "{part}: {}", refusal.message);
        }
        // Unknown methods go on to be answered "not found" (nothing runs them).
        assert!(monitor.authorise("no_such_method").is_ok());
    }

    #[test]
    fn read_only_clients_read_the_config_without_its_secrets() {
        let text = "[[subsystem.host]]\nnqn = \"nqn.h\"\ndhchap_secret = \"DHHC-1:00:c2VjcmV0c2VjcmV0:\"\n";
        let result = serde_json::json!({ "path": "/etc/sluice.toml", "text": text });
        let monitor = Caller::network("monitor", peer(), Some(Access::ReadOnly));
        let shown = monitor.shown_result("config_show", result.clone());
        let shown_text = shown["text"].as_str().unwrap();
        assert!(!shown_text.contains("c2VjcmV0") && shown_text.contains("nqn.h"), "{shown_text}");
        let admin = Caller::network("admin", peer(), Some(Access::ReadWrite));
        assert_eq!(admin.shown_result("config_show", result.clone()), result);
        assert_eq!(Caller::local_socket().shown_result("config_show", result.clone()), result);
    }

    #[test]
    fn read_write_and_local_callers_may_call_everything() {
        let admin = Caller::network("admin", peer(), Some(Access::ReadWrite));
        let local = Caller::local_socket();
        for (method, _) in METHODS {
            assert!(admin.authorise(method).is_ok() && local.authorise(method).is_ok(), "{method}");
        }
        assert!(!admin.is_refused() && !local.is_refused());
    }

    #[test]
    fn an_unlisted_client_may_call_nothing_and_is_told_what_to_add() {
        let stranger = Caller::network("stranger", peer(), None);
        assert!(stranger.is_refused());
        for (method, _) in METHODS {
            assert_eq!(stranger.authorise(method).map_err(|error| error.code), Err(ACCESS_DENIED), "{method}");
        }
        let refusal = stranger.authorise("subsystem_list").unwrap_err();
        assert!(
            refusal.message.contains("not listed") && refusal.message.contains("[[management.network.client]]"),
            "{}",
            refusal.message
        );
    }
}

//! Which hosts may use a subsystem, and with which DH-HMAC-CHAP secrets.
//!
//! Per subsystem: an allow-list of host NQNs, each with an optional host secret
//! (the host must authenticate, NVMe in-band authentication) and an optional
//! controller secret (the controller proves itself too when the host asks). A host
//! not on the list is refused at Connect (Connect Invalid Host) and does not see
//! the subsystem in the discovery log. Any host is allowed only when
//! `allow_any_host` is set explicitly; listed hosts keep their secrets then.
//!
//! Secrets are [`nvme_auth::Secret`]s: they never appear in `Debug` output or logs.
//!
//! A running subsystem holds its rules in a [`SharedHostAccess`], which the
//! management API replaces as a whole (allow, deny, secret rotation); a Connect reads
//! the rules current at that moment.

use std::sync::{Arc, RwLock};

use nvme_auth::{ControllerPolicy, KeyDerivation, Secret, TlsKey};

/// One host allowed to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// HOSTNQN.
    pub nqn: String,
    /// The host's DH-HMAC-CHAP secret: when set, the host must authenticate on every
    /// queue before any other command is processed.
    pub dhchap_secret: Option<Secret>,
    /// The controller's DH-HMAC-CHAP secret, for bidirectional authentication (the
    /// host asks for it with its own copy). Requires `dhchap_secret`.
    pub dhchap_controller_secret: Option<Secret>,
    /// The hash functions and DH groups this host may negotiate, most preferred
    /// first (as nvmet's per-host `dhchap_hash` and `dhchap_dhgroup`, but lists).
    pub dhchap_policy: ControllerPolicy,
    /// The host's configured TLS PSK (`NVMeTLSkey-1:...`), for listeners with TLS.
    pub tls_key: Option<TlsKey>,
    /// How the host derives keys from `tls_key` when it offers a format 0 identity
    /// (format 1 identities show it by their digest).
    pub tls_key_derivation: KeyDerivation,
}

impl std::fmt::Debug for HostEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secret's own Debug is redacted; say only whether there is one.
        f.debug_struct("HostEntry")
            .field("nqn", &self.nqn)
            .field("dhchap_secret", &self.dhchap_secret.is_some())
            .field("dhchap_controller_secret", &self.dhchap_controller_secret.is_some())
            .field("dhchap_policy", &self.dhchap_policy)
            .field("tls_key", &self.tls_key.is_some())
            .field("tls_key_derivation", &self.tls_key_derivation)
            .finish()
    }
}

impl HostEntry {
    /// A host allowed without authentication.
    pub fn new(nqn: impl Into<String>) -> Self {
        HostEntry {
            nqn: nqn.into(),
            dhchap_secret: None,
            dhchap_controller_secret: None,
            dhchap_policy: ControllerPolicy::default(),
            tls_key: None,
            tls_key_derivation: KeyDerivation::default(),
        }
    }
}

/// The access rules of one subsystem.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAccess {
    /// Any host NQN may connect (hosts listed below still need their secrets).
    /// Off unless set explicitly: the default is an empty allow-list, which admits
    /// nobody.
    pub allow_any_host: bool,
    /// The listed hosts.
    pub hosts: Vec<HostEntry>,
}

/// Why access rules cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostAccessError {
    /// The same host NQN is listed twice.
    #[error("host {0} is listed twice")]
    DuplicateHost(String),
    /// A controller secret without a host secret: bidirectional authentication
    /// needs the host to authenticate first.
    #[error("host {0}: a controller secret (dhchap_ctrl_secret) needs a host secret (dhchap_secret) too")]
    ControllerSecretWithoutHostSecret(String),
}

/// Whether a host may connect, and how.
#[derive(Debug, PartialEq, Eq)]
pub enum HostVerdict {
    /// Not allowed: refuse the Connect.
    Refused,
    /// Allowed without authentication.
    Allowed,
    /// Allowed once it authenticates with this entry's secrets (a copy: the rules
    /// may be replaced while the queue authenticates).
    AuthenticationRequired(HostEntry),
}

impl HostAccess {
    /// Any host, no authentication: for the embedded demo and tests.
    pub fn allow_any() -> Self {
        HostAccess { allow_any_host: true, hosts: Vec::new() }
    }

    /// Only these hosts, each without authentication.
    pub fn only(nqns: &[&str]) -> Self {
        HostAccess { allow_any_host: false, hosts: nqns.iter().map(|nqn| HostEntry::new(*nqn)).collect() }
    }

    /// Checks the rules: no host twice, no controller secret without a host secret.
    pub fn validate(&self) -> Result<(), HostAccessError> {
        for (index, host) in self.hosts.iter().enumerate() {
            if self.hosts.iter().take(index).any(|earlier| earlier.nqn == host.nqn) {
                return Err(HostAccessError::DuplicateHost(host.nqn.clone()));
            }
            if host.dhchap_controller_secret.is_some() && host.dhchap_secret.is_none() {
                return Err(HostAccessError::ControllerSecretWithoutHostSecret(host.nqn.clone()));
            }
        }
        Ok(())
    }

    /// The listed entry of `host_nqn`.
    pub fn entry(&self, host_nqn: &str) -> Option<&HostEntry> {
        self.hosts.iter().find(|host| host.nqn == host_nqn)
    }

    /// Whether `host_nqn` may connect, and whether it must authenticate. An entry
    /// with a controller secret but no host secret (which `validate` refuses) fails
    /// closed: the host is refused rather than let in unauthenticated.
    pub fn verdict(&self, host_nqn: &str) -> HostVerdict {
        match self.entry(host_nqn) {
            Some(entry) if entry.dhchap_secret.is_some() => HostVerdict::AuthenticationRequired(entry.clone()),
            Some(entry) if entry.dhchap_controller_secret.is_some() => HostVerdict::Refused,
            Some(_) => HostVerdict::Allowed,
            None if self.allow_any_host => HostVerdict::Allowed,
            None => HostVerdict::Refused,
        }
    }

    /// True when `host_nqn` may connect (and so may see the subsystem in the
    /// discovery log).
    pub fn allows(&self, host_nqn: &str) -> bool {
        match self.entry(host_nqn) {
            Some(entry) => entry.dhchap_secret.is_some() || entry.dhchap_controller_secret.is_none(),
            None => self.allow_any_host,
        }
    }
}

/// The rules of a running subsystem, replaced as a whole while connections read
/// them. Readers take a snapshot (`current`); only Connect and the discovery log
/// read the rules, never the I/O path.
#[derive(Debug)]
pub struct SharedHostAccess(RwLock<Arc<HostAccess>>);

impl SharedHostAccess {
    pub fn new(access: HostAccess) -> Self {
        SharedHostAccess(RwLock::new(Arc::new(access)))
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<HostAccess> {
        Arc::clone(&self.0.read().unwrap_or_else(|poison| poison.into_inner()))
    }

    /// Puts new rules in force for every later Connect and discovery log read.
    /// Connected controllers are not touched: the caller tears down those whose
    /// host the new rules refuse.
    pub fn replace(&self, access: HostAccess) {
        *self.0.write().unwrap_or_else(|poison| poison.into_inner()) = Arc::new(access);
    }

    /// [`HostAccess::verdict`] under the current rules.
    pub fn verdict(&self, host_nqn: &str) -> HostVerdict {
        self.current().verdict(host_nqn)
    }

    /// [`HostAccess::allows`] under the current rules.
    pub fn allows(&self, host_nqn: &str) -> bool {
        self.current().allows(host_nqn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::from_key(&[7; 32], None).unwrap()
    }

    #[test]
    fn verdicts() {
        let mut access = HostAccess::only(&["nqn.a"]);
        access.hosts.push(HostEntry { dhchap_secret: Some(secret()), dhchap_controller_secret: None, ..HostEntry::new("nqn.b") });
        assert_eq!(access.verdict("nqn.a"), HostVerdict::Allowed);
        assert!(matches!(access.verdict("nqn.b"), HostVerdict::AuthenticationRequired(_)));
        assert_eq!(access.verdict("nqn.c"), HostVerdict::Refused);
        assert!(!access.allows("nqn.c"));
        access.allow_any_host = true;
        assert_eq!(access.verdict("nqn.c"), HostVerdict::Allowed);
        assert!(matches!(access.verdict("nqn.b"), HostVerdict::AuthenticationRequired(_)));
        assert_eq!(HostAccess::default().verdict("nqn.a"), HostVerdict::Refused);
        assert_eq!(HostAccess::allow_any().verdict("nqn.a"), HostVerdict::Allowed);
    }

    #[test]
    fn shared_rules_are_replaced_whole_and_allows_matches_verdict() {
        let shared = SharedHostAccess::new(HostAccess::allow_any());
        assert!(shared.allows("nqn.a"));
        let mut rules = HostAccess::only(&["nqn.a"]);
        rules.hosts.push(HostEntry { dhchap_secret: Some(secret()), dhchap_controller_secret: None, ..HostEntry::new("nqn.b") });
        rules.hosts.push(HostEntry { dhchap_secret: None, dhchap_controller_secret: Some(secret()), ..HostEntry::new("nqn.c") });
        let before = shared.current();
        shared.replace(rules.clone());
        assert!(before.allow_any_host, "a snapshot taken before keeps the old rules");
        for host in ["nqn.a", "nqn.b", "nqn.c", "nqn.d"] {
            assert_eq!(shared.allows(host), rules.verdict(host) != HostVerdict::Refused, "{host}");
        }
        assert!(matches!(shared.verdict("nqn.b"), HostVerdict::AuthenticationRequired(entry) if entry.nqn == "nqn.b"));
        assert!(!shared.allows("nqn.d"));
    }

    #[test]
    fn validation_and_fail_closed() {
        let mut access = HostAccess::only(&["nqn.a", "nqn.a"]);
        assert_eq!(access.validate(), Err(HostAccessError::DuplicateHost("nqn.a".into())));
        access.hosts.pop();
        access.hosts[0].dhchap_controller_secret = Some(secret());
        assert_eq!(access.validate(), Err(HostAccessError::ControllerSecretWithoutHostSecret("nqn.a".into())));
        assert_eq!(access.verdict("nqn.a"), HostVerdict::Refused);
        access.hosts[0].dhchap_secret = Some(secret());
        assert_eq!(access.validate(), Ok(()));
    }

    #[test]
    fn debug_output_has_no_secrets() {
        let access = HostAccess {
            allow_any_host: false,
            hosts: vec![HostEntry { dhchap_secret: Some(secret()), dhchap_controller_secret: None, ..HostEntry::new("nqn.a") }],
        };
        let text = format!("{access:?}");
        assert!(!text.contains("BwcH"), "{text}");
        assert!(text.contains("dhchap_secret: true"), "{text}");
    }
}

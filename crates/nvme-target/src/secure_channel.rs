//! NVMe/TCP over TLS (NVMe TCP Transport, "Transport Layer Security"; TP 8011) as the
//! target core sees it: which listeners offer or require TLS, which key a PSK identity
//! names, and that a queue on a TLS connection only connects as the host and to the
//! subsystem its identity names. The handshake and the records run below the core
//! (the runtime's TLS session); the core learns the identity once it is established.

use nvme_auth::{KeyDerivation, PskIdentity, PskKind, TlsKey, TlsPsk};
use nvme_spec::discovery::{tcp_security_type, transport_requirements};

use crate::target::Target;

/// The well-known discovery subsystem NQN (NVMe Base 2.0, "Discovery NQN").
const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Whether a listener speaks TLS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SecureChannel {
    /// Plain NVMe/TCP only.
    #[default]
    None,
    /// TLS or plain, as each host chooses (the first byte tells them apart).
    Optional,
    /// TLS only: a connection that does not start with a TLS handshake is closed.
    Required,
}

impl SecureChannel {
    /// TREQ bits 1:0 of this listener's discovery log entries.
    pub fn transport_requirements(self) -> u8 {
        match self {
            SecureChannel::None => transport_requirements::SECURE_CHANNEL_NOT_SPECIFIED,
            SecureChannel::Optional => transport_requirements::SECURE_CHANNEL_NOT_REQUIRED,
            SecureChannel::Required => transport_requirements::SECURE_CHANNEL_REQUIRED,
        }
    }

    /// SECTYPE (TSAS byte 0 for TCP) of this listener's discovery log entries.
    pub fn security_type(self) -> u8 {
        match self {
            SecureChannel::None => tcp_security_type::NONE,
            SecureChannel::Optional | SecureChannel::Required => tcp_security_type::TLS_1_3,
        }
    }

    /// The setting a configuration spelling names, if any.
    pub fn from_name(name: &str) -> Option<SecureChannel> {
        [SecureChannel::None, SecureChannel::Optional, SecureChannel::Required]
            .into_iter()
            .find(|setting| setting.name() == name)
    }

    /// The configuration spelling ("none", "optional", "required").
    pub fn name(self) -> &'static str {
        match self {
            SecureChannel::None => "none",
            SecureChannel::Optional => "optional",
            SecureChannel::Required => "required",
        }
    }
}

/// Who a TLS connection's PSK identity says the peer is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecureChannelBinding {
    /// NQNh of the identity.
    pub host_nqn: String,
    /// NQNc of the identity.
    pub subsystem_nqn: String,
}

impl Target {
    /// The TLS PSK for the identity a host offered, or `None` (unknown host or
    /// subsystem, no TLS key configured, a digest that does not match, a generated
    /// PSK). Runs inside the TLS handshake: reads the access rules, derives two HKDFs.
    ///
    /// For a subsystem, the key is the host entry's `tls_key`. For the discovery
    /// subsystem, which has no host list, every subsystem's entry for the host is
    /// tried (a format 1 identity's digest tells the keys apart).
    pub fn tls_psk(&self, identity_bytes: &[u8]) -> Option<(TlsPsk, PskIdentity)> {
        let identity = match PskIdentity::parse(identity_bytes) {
            Ok(identity) => identity,
            Err(error) => {
                tracing::debug!(%error, "TLS: unusable PSK identity");
                return None;
            }
        };
        if identity.kind() != PskKind::Retained {
            tracing::debug!("TLS: generated PSKs (secure channel concatenation) are not supported");
            return None;
        }
        let keys = self.tls_keys_for(identity.host_nqn(), identity.subsystem_nqn());
        let (psk, derivation) =
            keys.iter().find_map(|(key, derivation)| key.tls_psk_for_host(&identity, *derivation).ok())?;
        tracing::debug!(identity = %identity, ?derivation, "TLS: PSK found");
        Some((psk, identity))
    }

    /// The TLS keys (and format 0 derivations) configured for `host_nqn` that may
    /// serve `subsystem_nqn`.
    fn tls_keys_for(&self, host_nqn: &str, subsystem_nqn: &str) -> Vec<(TlsKey, KeyDerivation)> {
        let key_of = |subsystem: &crate::subsystem::Subsystem| {
            let rules = subsystem.hosts.current();
            let host = rules.hosts.iter().find(|host| host.nqn == host_nqn)?;
            host.tls_key.clone().map(|key| (key, host.tls_key_derivation))
        };
        if subsystem_nqn != DISCOVERY_NQN {
            // One subsystem by name: no scan of every subsystem per handshake.
            return self.subsystem_by_nqn(subsystem_nqn).and_then(|subsystem| key_of(&subsystem)).into_iter().collect();
        }
        self.subsystems().iter().filter_map(|subsystem| key_of(subsystem)).collect()
    }
}

/// Whether `rules` give `host_nqn` a TLS key: such a host may connect only over TLS.
pub(crate) fn host_has_tls_key(rules: &crate::host_access::HostAccess, host_nqn: &str) -> bool {
    rules.hosts.iter().any(|host| host.nqn == host_nqn && host.tls_key.is_some())
}

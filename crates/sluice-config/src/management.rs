//! `[management.network]`: the management API over TCP with mutual TLS (off unless the
//! table is given). The server shows `certificate` (with `private_key`), accepts only
//! clients whose certificate `client_ca` signed, and lets each listed subject CN do
//! what its `access` says; a CA-signed certificate whose CN is not listed is refused.
//!
//! Two steps, as the rest of the config: [`NetworkSection::check`] needs no file (the
//! management API runs it on every edited config), [`NetworkSection::load`] reads and
//! matches the PEM files (`sluice config check` and `sluice serve`).

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use openssl::asn1::Asn1Time;
use openssl::pkey::{PKey, Private};
use openssl::x509::X509;
use serde::Deserialize;

use super::{invalid, ConfigError};

/// Port of the network management API when `listen` gives none. Not 4420 (NVMe/TCP)
/// or 4421-4429 (extra NVMe/TCP listeners by custom), not 8009 (NVMe discovery),
/// 5500 (the Ceph NVMe-oF gateway's gRPC), 4433 (`openssl s_server`'s default) or
/// 9520 (sluice's metrics): near 4420, so firewall rules for a storage network can
/// group them, without being mistaken for an NVMe port.
pub const DEFAULT_NETWORK_PORT: u16 = 4430;

/// `[management]`: how `sluice serve` offers its management API besides the local
/// socket (which `--rpc-socket` sets).
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ManagementSection {
    /// `[management.network]`: the API over TCP with mutual TLS.
    #[serde(default)]
    pub network: Option<NetworkSection>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// "IP:port", or "IP" for port [`DEFAULT_NETWORK_PORT`].
    pub listen: String,
    /// PEM: the server's certificate, then any intermediate CA certificates.
    pub certificate: PathBuf,
    /// PEM: the certificate's private key (unencrypted: no one is there to type a
    /// passphrase at start).
    pub private_key: PathBuf,
    /// PEM: the CA certificate(s) client certificates must be signed by.
    pub client_ca: PathBuf,
    /// `[[management.network.client]]`: who may connect, by subject CN.
    #[serde(default, rename = "client")]
    pub clients: Vec<NetworkClient>,
}

/// `[[management.network.client]]`.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkClient {
    /// The subject common name (CN) of the client's certificate.
    pub common_name: String,
    pub access: Access,
}

/// What a network client may call.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Every method.
    ReadWrite,
    /// Only the methods that change nothing (`manage::service::METHODS` says which).
    ReadOnly,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadWrite => "read-write",
            Access::ReadOnly => "read-only",
        }
    }
}

/// A checked `[management.network]` with its certificates and key loaded.
pub struct NetworkSettings {
    pub address: SocketAddr,
    /// The server's certificate first, then its intermediates.
    pub certificate_chain: Vec<X509>,
    pub private_key: PKey<Private>,
    pub client_cas: Vec<X509>,
    /// (common name, access), each name once.
    pub clients: Vec<(String, Access)>,
    /// Things that work but should be fixed (a key others can read, an expired
    /// certificate).
    pub warnings: Vec<String>,
}

const LOCATION: &str = "management.network";

impl NetworkSection {
    /// The checks that need no file: the address, the client list. Returns the address.
    pub fn check(&self) -> Result<SocketAddr, ConfigError> {
        let address = parse_listen(&self.listen)?;
        if self.clients.is_empty() {
            return Err(invalid(
                format!("{LOCATION}.client"),
                "no client is listed, so every connection would be refused: add [[management.network.client]] \
                 entries with common_name = \"<certificate CN>\" and access = \"read-write\" or \"read-only\"",
            ));
        }
        for (index, client) in self.clients.iter().enumerate() {
            let location = format!("{LOCATION}.client[{index}].common_name");
            if client.common_name.trim().is_empty() {
                return Err(invalid(location, "is empty: give the subject CN of the client's certificate"));
            }
            if let Some(first) = self.clients[..index].iter().position(|other| other.common_name == client.common_name)
            {
                return Err(invalid(
                    location,
                    format!("{:?} is also client[{first}]: list each certificate CN once", client.common_name),
                ));
            }
        }
        Ok(address)
    }

    /// [`check`](Self::check), then reads the PEM files and checks that the key
    /// belongs to the certificate.
    pub fn load(&self) -> Result<NetworkSettings, ConfigError> {
        let address = self.check()?;
        let mut warnings = Vec::new();
        let certificate_chain = read_certificates(&self.certificate, "certificate")?;
        let key_text = read_file(&self.private_key, "private_key")?;
        let private_key = PKey::private_key_from_pem(&key_text).map_err(|_| {
            invalid(
                format!("{LOCATION}.private_key"),
                format!(
                    "{} holds no unencrypted PEM private key (an encrypted key cannot be used: nobody types a \
                     passphrase at start; `openssl pkey -in KEY -out KEY.plain` decrypts it)",
                    self.private_key.display()
                ),
            )
        })?;
        let server_certificate = &certificate_chain[0];
        let matches = server_certificate.public_key().is_ok_and(|public| public.public_eq(&private_key));
        if !matches {
            return Err(invalid(
                format!("{LOCATION}.private_key"),
                format!(
                    "{} is not the key of the certificate {}: give the key the certificate was made for",
                    self.private_key.display(),
                    self.certificate.display()
                ),
            ));
        }
        let client_cas = read_certificates(&self.client_ca, "client_ca")?;
        if let Ok(metadata) = std::fs::metadata(&self.private_key) {
            if metadata.permissions().mode() & 0o077 != 0 {
                warnings.push(format!(
                    "{LOCATION}.private_key: {} can be read by other users; chmod 600 it",
                    self.private_key.display()
                ));
            }
        }
        let now = Asn1Time::days_from_now(0).ok();
        for (key, certificate) in
            [("certificate", server_certificate)].into_iter().chain(client_cas.iter().map(|ca| ("client_ca", ca)))
        {
            if now.as_ref().is_some_and(|now| certificate.not_after() < now) {
                warnings.push(format!(
                    "{LOCATION}.{key}: a certificate expired on {}; clients will refuse it (renew it)",
                    certificate.not_after()
                ));
            }
        }
        let clients = self.clients.iter().map(|client| (client.common_name.clone(), client.access)).collect();
        Ok(NetworkSettings { address, certificate_chain, private_key, client_cas, clients, warnings })
    }

    /// One line for `sluice config check`.
    pub fn describe(&self) -> String {
        let read_only = self.clients.iter().filter(|client| client.access == Access::ReadOnly).count();
        format!(
            "management API on {} (mutual TLS): {} client(s), {} read-write, {read_only} read-only",
            parse_listen(&self.listen).map_or_else(|_| self.listen.clone(), |address| address.to_string()),
            self.clients.len(),
            self.clients.len() - read_only
        )
    }
}

/// "IP:port", or "IP" (also "[IPv6]") for the default port.
fn parse_listen(text: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let bare = text.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')).unwrap_or(text);
    bare.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, DEFAULT_NETWORK_PORT)).map_err(|_| {
        invalid(
            format!("{LOCATION}.listen"),
            format!(
                "{text:?} is not IP:port or IP (e.g. \"10.0.0.5:{DEFAULT_NETWORK_PORT}\", \"[::]:{DEFAULT_NETWORK_PORT}\"; \
                 the port defaults to {DEFAULT_NETWORK_PORT})"
            ),
        )
    })
}

fn read_file(path: &Path, key: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|error| invalid(format!("{LOCATION}.{key}"), format!("cannot read {}: {error}", path.display())))
}

fn read_certificates(path: &Path, key: &str) -> Result<Vec<X509>, ConfigError> {
    let text = read_file(path, key)?;
    match X509::stack_from_pem(&text) {
        Ok(certificates) if !certificates.is_empty() => Ok(certificates),
        _ => Err(invalid(
            format!("{LOCATION}.{key}"),
            format!("{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use openssl::hash::MessageDigest;
    use openssl::rsa::Rsa;
    use openssl::x509::X509NameBuilder;

    fn key() -> PKey<Private> {
        PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap()
    }

    fn self_signed(key: &PKey<Private>, common_name: &str) -> X509 {
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", common_name).unwrap();
        let name = name.build();
        let mut builder = X509::builder().unwrap();
        builder.set_version(2).unwrap();
        builder.set_subject_name(&name).unwrap();
        builder.set_issuer_name(&name).unwrap();
        builder.set_pubkey(key).unwrap();
        builder.set_not_before(&Asn1Time::days_from_now(0).unwrap()).unwrap();
        builder.set_not_after(&Asn1Time::days_from_now(1).unwrap()).unwrap();
        builder.sign(key, MessageDigest::sha256()).unwrap();
        builder.build()
    }

    /// A directory with server.pem, server.key, other.key (not the server's) and ca.pem.
    fn files(test: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!("sluice-management-config-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let server_key = key();
        std::fs::write(directory.join("server.pem"), self_signed(&server_key, "gateway").to_pem().unwrap()).unwrap();
        std::fs::write(directory.join("server.key"), server_key.private_key_to_pem_pkcs8().unwrap()).unwrap();
        std::fs::set_permissions(directory.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(directory.join("other.key"), key().private_key_to_pem_pkcs8().unwrap()).unwrap();
        std::fs::write(directory.join("ca.pem"), self_signed(&key(), "ca").to_pem().unwrap()).unwrap();
        directory
    }

    fn section(directory: &Path, listen: &str, private_key: &str, clients: &str) -> Result<NetworkSection, String> {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\n[management.network]\nlisten = \"{listen}\"\n\
             certificate = \"{0}/server.pem\"\nprivate_key = \"{0}/{private_key}\"\nclient_ca = \"{0}/ca.pem\"\n{clients}",
            directory.display()
        );
        Config::parse(&text).map(|config| config.management.network.expect("a [management.network] table"))
    }

    const ADMIN: &str = "[[management.network.client]]\ncommon_name = \"admin\"\naccess = \"read-write\"\n\
                         [[management.network.client]]\ncommon_name = \"monitor\"\naccess = \"read-only\"\n";

    #[test]
    fn a_good_section_loads_with_its_clients() {
        let directory = files("good");
        let settings = section(&directory, "127.0.0.1", "server.key", ADMIN).unwrap().load().unwrap();
        assert_eq!(settings.address, SocketAddr::from(([127, 0, 0, 1], DEFAULT_NETWORK_PORT)));
        assert_eq!(
            settings.clients,
            [("admin".to_string(), Access::ReadWrite), ("monitor".to_string(), Access::ReadOnly)]
        );
        assert!(settings.warnings.is_empty(), "{:?}", settings.warnings);
    }

    #[test]
    fn errors_name_the_key_and_what_to_do() {
        let directory = files("errors");
        let error = |listen: &str, key: &str, clients: &str| match section(&directory, listen, key, clients) {
            Ok(section) => section.load().err().map(|error| error.to_string()).unwrap_or_default(),
            Err(message) => message,
        };
        let message = error("10.0.0.5:99999", "server.key", ADMIN);
        assert!(message.contains("management.network.listen") && message.contains("IP:port"), "{message}");
        let message = error("127.0.0.1:0", "missing.key", ADMIN);
        assert!(message.contains("management.network.private_key") && message.contains("missing.key"), "{message}");
        let message = error("127.0.0.1:0", "ca.pem", ADMIN);
        assert!(
            message.contains("management.network.private_key") && message.contains("no unencrypted PEM private key"),
            "{message}"
        );
        let message = error("127.0.0.1:0", "other.key", ADMIN);
        assert!(message.contains("is not the key of the certificate"), "{message}");
        let message = error("127.0.0.1:0", "server.key", "");
        assert!(message.contains("management.network.client") && message.contains("no client is listed"), "{message}");
        let twice = format!("{ADMIN}[[management.network.client]]\ncommon_name = \"admin\"\naccess = \"read-only\"\n");
        let message = error("127.0.0.1:0", "server.key", &twice);
        assert!(message.contains("client[2].common_name") && message.contains("also client[0]"), "{message}");
        let bad_access = "[[management.network.client]]\ncommon_name = \"admin\"\naccess = \"root\"\n";
        let message = error("127.0.0.1:0", "server.key", bad_access);
        assert!(message.contains("read-write") && message.contains("read-only"), "{message}");
    }

    #[test]
    fn a_key_others_can_read_is_a_warning() {
        let directory = files("mode");
        std::fs::set_permissions(directory.join("server.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let settings = section(&directory, "[::1]:4430", "server.key", ADMIN).unwrap().load().unwrap();
        assert!(settings.warnings.iter().any(|warning| warning.contains("chmod 600")), "{:?}", settings.warnings);
        let _ = std::fs::remove_dir_all(directory);
    }
}

//! The network endpoint of the management API: one TLS connection per call, mutual
//! TLS (the server checks our certificate against its `client_ca` and looks up its
//! subject CN; we check the server's certificate against `ca` and the host name or IP
//! address we dialled).

use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use openssl::ssl::{HandshakeError, SslConnector, SslFiletype, SslMethod, SslStream, SslVersion};
use openssl::x509::X509VerifyResult;

use super::{CallError, RESPONSE_TIMEOUT};

/// How long to wait for the TCP connection of one address, so a firewalled address
/// fails in seconds rather than after the kernel's minutes of SYN retries.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how to reach a management API offered over the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsEndpoint {
    /// `HOST:PORT` as dialled (a name, an IPv4 address, or `[IPv6]`).
    pub address: String,
    /// The name the server's certificate must carry (a DNS name or an IP address
    /// among its subject alternative names); usually `address` without the port.
    pub server_name: String,
    /// PEM file of the CA that signed the server's certificate.
    pub ca: PathBuf,
    /// PEM file of our certificate (its subject CN names us to the server).
    pub certificate: PathBuf,
    /// PEM file of our certificate's private key.
    pub private_key: PathBuf,
}

impl TlsEndpoint {
    /// From a `https://HOST:PORT` (or bare `HOST:PORT`) address; the server name is
    /// the HOST part, without the brackets of an IPv6 address.
    pub fn parse(url: &str, ca: PathBuf, certificate: PathBuf, private_key: PathBuf) -> Result<TlsEndpoint, String> {
        let address = url.strip_prefix("https://").unwrap_or(url).trim_end_matches('/');
        if address.contains("://") || address.contains('/') {
            return Err(format!("{url:?} is not https://HOST:PORT (the management API is JSON-RPC lines over TLS)"));
        }
        let Some((host, port)) = address.rsplit_once(':') else {
            return Err(format!("{url:?} has no port: give https://HOST:PORT, e.g. https://gateway1.example.com:4430"));
        };
        if port.parse::<u16>().is_err() || host.is_empty() {
            return Err(format!("{url:?} is not https://HOST:PORT, e.g. https://gateway1.example.com:4430"));
        }
        let server_name = host.strip_prefix('[').and_then(|host| host.strip_suffix(']')).unwrap_or(host);
        Ok(TlsEndpoint {
            address: address.to_string(),
            server_name: server_name.to_string(),
            ca,
            certificate,
            private_key,
        })
    }

    /// Connects, shakes hands and checks the server: a stream ready for one call.
    pub(crate) fn connect(&self, shown: &str) -> Result<SslStream<TcpStream>, CallError> {
        let connector = self.connector().map_err(|reason| CallError::Local { endpoint: shown.to_string(), reason })?;
        let unreachable = |reason: String| CallError::Unreachable { endpoint: shown.to_string(), reason };
        let addresses = self
            .address
            .to_socket_addrs()
            .map_err(|error| unreachable(format!("cannot resolve {}: {error}", self.address)))?;
        let mut last_error = None;
        let mut stream = None;
        for address in addresses {
            match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
                Ok(connected) => {
                    // The handshake and each request are small writes that wait for an
                    // answer: Nagle's algorithm would hold them for the peer's delayed
                    // ACK (40 ms a call on Linux).
                    let _ = connected.set_nodelay(true);
                    stream = Some(connected);
                    break;
                }
                Err(error) => last_error = Some(format!("{address}: {error}")),
            }
        }
        let stream = stream.ok_or_else(|| {
            unreachable(format!(
                "{}: is `sluice serve` running with a [management.network] table listening there, and does a \
                 firewall let the port through?",
                last_error.unwrap_or_else(|| format!("{} resolves to no address", self.address))
            ))
        })?;
        let broken =
            |error: std::io::Error| CallError::Broken { endpoint: shown.to_string(), reason: error.to_string() };
        // Bounds the handshake too: a server that accepts and never answers.
        stream.set_read_timeout(Some(RESPONSE_TIMEOUT)).map_err(broken)?;
        stream.set_write_timeout(Some(RESPONSE_TIMEOUT)).map_err(broken)?;
        let configuration = connector.configure().map_err(|error| CallError::Local {
            endpoint: shown.to_string(),
            reason: format!("cannot set up TLS: {error}"),
        })?;
        // Checks the server's certificate against `ca` and `server_name` (a DNS name,
        // or an IP address matched against the certificate's IP addresses).
        configuration.connect(&self.server_name, stream).map_err(|error| unreachable(self.handshake_failure(error)))
    }

    fn connector(&self) -> Result<SslConnector, String> {
        let mut builder =
            SslConnector::builder(SslMethod::tls_client()).map_err(|error| format!("cannot set up TLS: {error}"))?;
        builder
            .set_min_proto_version(Some(SslVersion::TLS1_2))
            .map_err(|error| format!("cannot set up TLS: {error}"))?;
        readable(&self.ca, "--api-ca (the CA that signed the server's certificate)")?;
        builder
            .set_ca_file(&self.ca)
            .map_err(|error| format!("{} is not a PEM CA certificate (--api-ca): {error}", self.ca.display()))?;
        readable(&self.certificate, "--api-cert (our client certificate)")?;
        builder.set_certificate_chain_file(&self.certificate).map_err(|error| {
            format!("{} is not a PEM certificate (--api-cert): {error}", self.certificate.display())
        })?;
        readable(&self.private_key, "--api-key (our certificate's private key)")?;
        builder
            .set_private_key_file(&self.private_key, SslFiletype::PEM)
            .map_err(|error| format!("{} is not a PEM private key (--api-key): {error}", self.private_key.display()))?;
        builder.check_private_key().map_err(|_| {
            format!(
                "the private key {} does not belong to the certificate {}: give --api-key the key the \
                 certificate was made for",
                self.private_key.display(),
                self.certificate.display()
            )
        })?;
        Ok(builder.build())
    }

    /// What went wrong in the handshake, and what to check.
    fn handshake_failure(&self, error: HandshakeError<TcpStream>) -> String {
        match error {
            HandshakeError::SetupFailure(error) => format!("cannot set up TLS: {error}"),
            HandshakeError::Failure(stream) | HandshakeError::WouldBlock(stream) => {
                let verify = stream.ssl().verify_result();
                if verify != X509VerifyResult::OK {
                    format!(
                        "the server's certificate is not trusted ({}): is --api-ca {} the CA that signed it, and is \
                         {:?} among its names (subject alternative names)?",
                        verify.error_string(),
                        self.ca.display(),
                        self.server_name
                    )
                } else {
                    format!("the TLS handshake failed ({}): {}", stream.error(), REFUSED_CERTIFICATE_HINT)
                }
            }
        }
    }
}

/// What to check when the server broke off the handshake: with TLS 1.3 the server
/// judges our certificate after we sent it, so its refusal arrives as an alert on the
/// first read.
pub(crate) const REFUSED_CERTIFICATE_HINT: &str =
    "the server refused our certificate: is --api-cert signed by the CA the server names as client_ca in \
     [management.network], and not expired?";

fn readable(path: &Path, what: &str) -> Result<(), String> {
    std::fs::File::open(path).map(drop).map_err(|error| format!("cannot read {what} {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<TlsEndpoint, String> {
        TlsEndpoint::parse(url, "ca.pem".into(), "client.pem".into(), "client.key".into())
    }

    #[test]
    fn addresses_parse_with_their_server_name() {
        let endpoint = parse("https://gateway1.example.com:4430").unwrap();
        assert_eq!(endpoint.address, "gateway1.example.com:4430");
        assert_eq!(endpoint.server_name, "gateway1.example.com");
        let endpoint = parse("https://[::1]:4430/").unwrap();
        assert_eq!((endpoint.address.as_str(), endpoint.server_name.as_str()), ("[::1]:4430", "::1"));
        let endpoint = parse("10.0.0.5:4430").unwrap();
        assert_eq!(endpoint.server_name, "10.0.0.5");
    }

    #[test]
    fn bad_addresses_say_what_is_expected() {
        for url in ["https://gateway1", "http://gateway1:4430", "https://:4430", "https://host:port", "https://h:1/x"] {
            let error = parse(url).unwrap_err();
            assert!(error.contains("HOST:PORT"), "{url}: {error}");
        }
    }
}

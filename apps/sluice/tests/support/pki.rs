//! Throw-away certificate authorities and certificates for the tests of the network
//! management API, made with the openssl crate (nothing outside the build is needed).
//! P-256 keys: quick to make; one day of validity.

use std::path::{Path, PathBuf};

use openssl::asn1::{Asn1Integer, Asn1Time};
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName};
use openssl::x509::{X509Builder, X509NameBuilder, X509};

/// A certificate and its key, as PEM files.
pub struct Issued {
    pub certificate: PathBuf,
    pub private_key: PathBuf,
}

/// A CA that signs certificates; its certificate is `DIR/NAME.pem`.
pub struct Authority {
    key: PKey<Private>,
    certificate: X509,
    pub certificate_file: PathBuf,
}

fn key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("P-256");
    PKey::from_ec_key(EcKey::generate(&group).expect("EC key")).expect("PKey")
}

/// A builder with a random serial, `common_name` as subject, one day of validity.
fn builder(common_name: &str, key: &PKey<Private>) -> X509Builder {
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_text("CN", common_name).unwrap();
    let name = name.build();
    let mut builder = X509Builder::new().unwrap();
    builder.set_version(2).unwrap();
    let mut serial = BigNum::new().unwrap();
    serial.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
    builder.set_serial_number(&Asn1Integer::from_bn(&serial).unwrap()).unwrap();
    builder.set_subject_name(&name).unwrap();
    builder.set_pubkey(key).unwrap();
    builder.set_not_before(&Asn1Time::days_from_now(0).unwrap()).unwrap();
    builder.set_not_after(&Asn1Time::days_from_now(1).unwrap()).unwrap();
    builder
}

impl Authority {
    /// A self-signed CA named `name`, its certificate written to `dir/name.pem`.
    pub fn new(dir: &Path, name: &str) -> Authority {
        let key = key();
        let mut builder = builder(name, &key);
        builder
            .set_issuer_name(
                &X509NameBuilder::new()
                    .map(|mut issuer| {
                        issuer.append_entry_by_text("CN", name).unwrap();
                        issuer.build()
                    })
                    .unwrap(),
            )
            .unwrap();
        builder.append_extension(BasicConstraints::new().critical().ca().build().unwrap()).unwrap();
        builder.append_extension(KeyUsage::new().critical().key_cert_sign().crl_sign().build().unwrap()).unwrap();
        builder.sign(&key, MessageDigest::sha256()).unwrap();
        let certificate = builder.build();
        let certificate_file = dir.join(format!("{name}.pem"));
        std::fs::write(&certificate_file, certificate.to_pem().unwrap()).unwrap();
        Authority { key, certificate, certificate_file }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self, dir: &Path, name: &str) -> Issued {
        self.issue(dir, name, true)
    }

    /// A client certificate with subject CN `common_name`.
    pub fn client(&self, dir: &Path, common_name: &str) -> Issued {
        self.issue(dir, common_name, false)
    }

    fn issue(&self, dir: &Path, common_name: &str, server: bool) -> Issued {
        let key = key();
        let mut builder = builder(common_name, &key);
        builder.set_issuer_name(self.certificate.subject_name()).unwrap();
        builder.append_extension(BasicConstraints::new().build().unwrap()).unwrap();
        builder.append_extension(KeyUsage::new().critical().digital_signature().build().unwrap()).unwrap();
        if server {
            builder.append_extension(ExtendedKeyUsage::new().server_auth().build().unwrap()).unwrap();
            let names = SubjectAlternativeName::new()
                .ip("127.0.0.1")
                .dns("localhost")
                .build(&builder.x509v3_context(Some(&self.certificate), None))
                .unwrap();
            builder.append_extension(names).unwrap();
        } else {
            builder.append_extension(ExtendedKeyUsage::new().client_auth().build().unwrap()).unwrap();
        }
        builder.sign(&self.key, MessageDigest::sha256()).unwrap();
        let stem = format!("{}-{common_name}", self.certificate_file.file_stem().unwrap().to_string_lossy());
        let issued =
            Issued { certificate: dir.join(format!("{stem}.pem")), private_key: dir.join(format!("{stem}.key")) };
        std::fs::write(&issued.certificate, builder.build().to_pem().unwrap()).unwrap();
        std::fs::write(&issued.private_key, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&issued.private_key, std::fs::Permissions::from_mode(0o600)).unwrap();
        issued
    }
}

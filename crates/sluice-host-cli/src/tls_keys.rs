//! `sluice gen-tls-key` and `sluice check-tls-key`: NVMe/TCP TLS PSKs in the
//! interchange format nvme-cli uses, and the PSK identity a host offers with one.
//!
//! The key goes to stdout and nowhere else (scripts capture it); everything else
//! (identity, hash, length) goes to stdout only in `check-tls-key`, which never
//! prints the key.

use std::process::ExitCode;

use clap::Args;
use nvme_auth::{HashFunction, IdentityVersion, KeyDerivation, OsRandom, TlsKey};

use crate::args::{OutputArgs, OutputFormat};

/// `sluice gen-tls-key`.
#[derive(Args, Debug)]
pub struct GenTlsKeyArgs {
    /// Hash of the retained PSK and the TLS cipher suite: 1 = SHA-256
    /// (TLS_AES_128_GCM_SHA256, 32-byte key), 2 = SHA-384 (TLS_AES_256_GCM_SHA384,
    /// 48-byte key).
    #[arg(short = 'm', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    hmac: u8,
    /// The key in hexadecimal (64 or 96 digits) instead of a random one.
    #[arg(short = 's', long, value_name = "HEX")]
    secret: Option<String>,
    #[command(flatten)]
    identity: IdentityArgs,
}

/// `sluice check-tls-key`.
#[derive(Args, Debug)]
pub struct CheckTlsKeyArgs {
    /// The key, as `nvme gen-tls-key` or `sluice gen-tls-key` printed it
    /// (NVMeTLSkey-1:...). Read from the SLUICE_TLS_KEY environment variable when
    /// absent, so it need not appear in the process list.
    #[arg(short = 'k', long, env = "SLUICE_TLS_KEY", hide_env_values = true)]
    key: String,
    #[command(flatten)]
    identity: IdentityArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Which PSK identity to show (both commands).
#[derive(Args, Debug)]
struct IdentityArgs {
    /// Host NQN: with --subsysnqn, print the PSK identity the key gives (gen-tls-key
    /// prints it on stderr, so stdout stays the key alone).
    #[arg(short = 'n', long)]
    hostnqn: Option<String>,
    /// Subsystem NQN (with --hostnqn).
    #[arg(short = 'c', long)]
    subsysnqn: Option<String>,
    /// PSK identity format: 0 (NQNs only) or 1 (with the PSK digest).
    #[arg(short = 'I', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    identity: u8,
    /// The identity as libnvme before 1.16 derives it (format 1's digest differs).
    #[arg(long)]
    compat: bool,
}

/// Why a command failed: all of them are the caller's to fix (exit status 2).
#[derive(Debug, thiserror::Error)]
enum KeyCommandError {
    #[error("--secret: {0}")]
    Secret(String),
    #[error("{0}")]
    Key(#[from] nvme_auth::TlsKeyError),
    #[error("--hostnqn and --subsysnqn go together: give both to derive a PSK identity, or neither")]
    HalfIdentity,
}

/// Runs `gen-tls-key`.
pub fn gen_tls_key(args: &GenTlsKeyArgs) -> ExitCode {
    match generate(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sluice: error: {error}");
            ExitCode::from(crate::EXIT_USAGE)
        }
    }
}

fn generate(args: &GenTlsKeyArgs) -> Result<(), KeyCommandError> {
    let hash = if args.hmac == 2 { HashFunction::Sha384 } else { HashFunction::Sha256 };
    let key = match &args.secret {
        None => TlsKey::generate(hash, &mut OsRandom)?,
        Some(text) => {
            let bytes = zeroize::Zeroizing::new(parse_hex(text, hash.length())?);
            TlsKey::from_key(&bytes, Some(hash))?
        }
    };
    let identity = identity_text(&key, &args.identity)?;
    println!("{}", key.to_interchange().as_str());
    if let Some(identity) = identity {
        eprintln!("PSK identity: {identity}");
    }
    Ok(())
}

/// Runs `check-tls-key`.
pub fn check_tls_key(args: &CheckTlsKeyArgs) -> ExitCode {
    match check(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sluice: error: {error}");
            ExitCode::from(crate::EXIT_USAGE)
        }
    }
}

fn check(args: &CheckTlsKeyArgs) -> Result<(), KeyCommandError> {
    let key = TlsKey::parse(&args.key)?;
    let identity = identity_text(&key, &args.identity)?;
    match args.output.output_format {
        OutputFormat::Json => {
            let mut value = serde_json::json!({
                "valid": true,
                "hmac": key.transform_id(),
                "key_length": key.key_length(),
                "cipher_suite": cipher_suite(key.cipher_hash()),
            });
            if let Some(identity) = &identity {
                value["identity"] = serde_json::Value::String(identity.clone());
            }
            println!("{value:#}");
        }
        OutputFormat::Normal => {
            println!(
                "Key is valid (HMAC {}, length {}, cipher suite {})",
                key.transform_id(),
                key.key_length(),
                cipher_suite(key.cipher_hash())
            );
            if let Some(identity) = identity {
                println!("PSK identity: {identity}");
            }
        }
    }
    Ok(())
}

fn cipher_suite(hash: HashFunction) -> &'static str {
    match hash {
        HashFunction::Sha384 => "TLS_AES_256_GCM_SHA384",
        _ => "TLS_AES_128_GCM_SHA256",
    }
}

fn identity_text(key: &TlsKey, args: &IdentityArgs) -> Result<Option<String>, KeyCommandError> {
    let version = if args.identity == 0 { IdentityVersion::V0 } else { IdentityVersion::V1 };
    let derivation = if args.compat { KeyDerivation::Compat } else { KeyDerivation::Rfc8446 };
    match (args.hostnqn.as_deref(), args.subsysnqn.as_deref()) {
        (None, None) => Ok(None),
        (Some(host), Some(subsystem)) => Ok(Some(key.identity_with(host, subsystem, version, derivation)?.to_string())),
        _ => Err(KeyCommandError::HalfIdentity),
    }
}

/// `length` bytes from hexadecimal text (the key; never echoed in errors).
fn parse_hex(text: &str, length: usize) -> Result<Vec<u8>, KeyCommandError> {
    let text = text.trim();
    if text.len() != 2 * length {
        return Err(KeyCommandError::Secret(format!(
            "expected {} hexadecimal digits ({length} bytes) for this --hmac, got {}",
            2 * length,
            text.len()
        )));
    }
    // from_str_radix alone would take a sign ("+a").
    if !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(KeyCommandError::Secret("not hexadecimal".to_owned()));
    }
    (0..length)
        .map(|index| {
            u8::from_str_radix(&text[2 * index..2 * index + 2], 16)
                .map_err(|_| KeyCommandError::Secret("not hexadecimal".to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_secrets_are_checked_for_length_and_digits() {
        assert_eq!(parse_hex(&"ab".repeat(32), 32).expect("ok"), vec![0xAB; 32]);
        assert!(matches!(parse_hex("abcd", 32), Err(KeyCommandError::Secret(message)) if message.contains("64")));
        assert!(matches!(parse_hex(&"zz".repeat(32), 32), Err(KeyCommandError::Secret(_))));
        assert!(parse_hex(&"é".repeat(32), 32).is_err(), "multi-byte text does not panic");
        assert!(parse_hex(&"+a".repeat(32), 32).is_err(), "no signs");
    }

    #[test]
    fn an_identity_needs_both_nqns() {
        let key = TlsKey::generate(HashFunction::Sha256, &mut OsRandom).expect("key");
        let args = |host: Option<&str>, subsystem: Option<&str>, identity| IdentityArgs {
            hostnqn: host.map(str::to_owned),
            subsysnqn: subsystem.map(str::to_owned),
            identity,
            compat: false,
        };
        assert!(matches!(identity_text(&key, &args(Some("nqn.a"), None, 1)), Err(KeyCommandError::HalfIdentity)));
        assert_eq!(identity_text(&key, &args(None, None, 1)).expect("none"), None);
        let text = identity_text(&key, &args(Some("nqn.h"), Some("nqn.s"), 0)).expect("v0").expect("some");
        assert_eq!(text, "NVMe0R01 nqn.h nqn.s");
    }
}

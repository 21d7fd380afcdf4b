//! Cross-checks with nvme-cli's own key tools (`nvme gen-dhchap-key`,
//! `nvme check-dhchap-key`, `nvme gen-tls-key`, `nvme check-tls-key`, installed by
//! scripts/setup.sh): the representation we
//! parse and print, and the transformed key, must be nvme-cli's byte for byte. Skipped
//! with a printed reason when nvme-cli is not installed.

use std::process::Command;

use nvme_auth::{HashFunction, OsRandom, Secret, TlsKey};

const HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";

/// Runs `nvme ARGS`; `None` when nvme-cli is missing.
fn nvme(args: &[&str]) -> Option<(bool, String)> {
    let output = match Command::new("nvme").args(args).output() {
        Ok(output) => output,
        Err(error) => {
            eprintln!("SKIPPED: nvme-cli is not installed ({error}); scripts/setup.sh installs it");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
    Some((output.status.success(), text))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn our_secrets_are_nvme_cli_secrets() {
    for length in [32usize, 48, 64] {
        let raw: Vec<u8> = (0..length).map(|index| (index * 7 + length) as u8).collect();
        // No transform: nvme-cli prints the key itself.
        let Some((ok, printed)) = nvme(&["gen-dhchap-key", "-s", &hex(&raw), "-l", &length.to_string(), "-m", "0"])
        else {
            return;
        };
        assert!(ok, "gen-dhchap-key failed: {printed}");
        let ours = Secret::from_key(&raw, None).unwrap();
        assert_eq!(ours.to_representation().as_str(), printed, "representation of a {length}-byte key");
        assert_eq!(Secret::parse(&printed).unwrap(), ours);
        // nvme-cli accepts what we print.
        let (ok, verdict) = nvme(&["check-dhchap-key", "-k", &ours.to_representation()]).unwrap();
        assert!(ok && verdict.starts_with("Key is valid"), "{verdict}");
    }
}

#[test]
fn our_transform_is_nvme_cli_transform() {
    // With -m 1..3, nvme-cli prints HMAC(key, NQN || "NVMe-over-Fabrics") in the
    // representation: our transform of the same key must decode to the same bytes.
    for hash in HashFunction::ALL {
        let length = hash.length();
        let raw: Vec<u8> = (0..length).map(|index| (index * 13 + 1) as u8).collect();
        let Some((ok, printed)) = nvme(&[
            "gen-dhchap-key",
            "-s",
            &hex(&raw),
            "-l",
            &length.to_string(),
            "-m",
            &hash.id().to_string(),
            "-n",
            HOST_NQN,
        ]) else {
            return;
        };
        assert!(ok, "gen-dhchap-key failed: {printed}");
        let nvme_cli = Secret::parse(&printed).unwrap();
        assert_eq!(nvme_cli.transform(), Some(hash));
        let ours = Secret::from_key(&raw, Some(hash)).unwrap();
        let transformed = ours.transformed(HOST_NQN);
        let expected = Secret::from_key(&transformed, Some(hash)).unwrap();
        assert_eq!(expected, nvme_cli, "{}", hash.name());
    }
}

#[test]
fn nvme_cli_refuses_what_we_refuse() {
    let Some((_, printed)) = nvme(&["gen-dhchap-key", "-m", "1", "-n", HOST_NQN]) else { return };
    let secret = Secret::parse(&printed).unwrap();
    // One character changed: the CRC catches it on both sides.
    let representation = secret.to_representation();
    let mut broken: Vec<char> = representation.chars().collect();
    let position = 15;
    broken[position] = if broken[position] == 'A' { 'B' } else { 'A' };
    let broken: String = broken.into_iter().collect();
    let (ok, _) = nvme(&["check-dhchap-key", "-k", &broken]).unwrap();
    assert!(!ok, "nvme-cli accepted a corrupted key");
    assert!(Secret::parse(&broken).is_err());
}

#[test]
fn our_tls_keys_are_nvme_cli_tls_keys() {
    for hash in [HashFunction::Sha256, HashFunction::Sha384] {
        // nvme-cli's keys parse here, with the hash and length it reports.
        let Some((ok, printed)) = nvme(&["gen-tls-key", "-m", &hash.id().to_string()]) else { return };
        assert!(ok, "gen-tls-key failed: {printed}");
        let theirs = TlsKey::parse(&printed).unwrap();
        assert_eq!((theirs.transform_id(), theirs.key_length()), (hash.id(), hash.length()));
        assert_eq!(theirs.to_interchange().as_str(), printed, "printed back byte for byte");
        // Ours pass nvme-cli's check, which reports the same hash and length.
        let ours = TlsKey::generate(hash, &mut OsRandom).unwrap();
        let (ok, verdict) = nvme(&["check-tls-key", "-k", &ours.to_interchange()]).unwrap();
        let expected = format!("Key is valid (HMAC {}, length {}", hash.id(), hash.length());
        assert!(ok && verdict.starts_with(&expected), "{verdict}");
        // One character changed: both sides refuse it.
        let mut broken: Vec<char> = ours.to_interchange().chars().collect();
        broken[20] = if broken[20] == 'A' { 'B' } else { 'A' };
        let broken: String = broken.into_iter().collect();
        let (ok, _) = nvme(&["check-tls-key", "-k", &broken]).unwrap();
        assert!(!ok, "nvme-cli accepted a corrupted TLS key");
        assert!(TlsKey::parse(&broken).is_err());
    }
}

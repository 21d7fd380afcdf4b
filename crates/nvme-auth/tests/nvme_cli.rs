//! Cross-checks with nvme-cli's own key tools (`nvme gen-dhchap-key`,
//! `nvme check-dhchap-key`, installed by scripts/setup.sh): the representation we
//! parse and print, and the transformed key, must be nvme-cli's byte for byte. Skipped
//! with a printed reason when nvme-cli is not installed.

use std::process::Command;

use nvme_auth::{HashFunction, Secret};

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

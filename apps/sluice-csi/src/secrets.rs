//! DH-HMAC-CHAP keys from the CSI secrets of a call.
//!
//! The CO passes a Kubernetes Secret's data as `secrets` in ControllerPublishVolume
//! (`csi.storage.k8s.io/controller-publish-secret-name`) and NodeStageVolume
//! (`csi.storage.k8s.io/node-stage-secret-name`). Two keys are understood:
//! `dhchapSecret`, the host's key (what `nvme gen-dhchap-key` prints, `DHHC-1:...:`),
//! and `dhchapCtrlSecret`, the controller's key for bidirectional authentication.
//! Their values are never logged nor put in an error: errors name the key, and any
//! text that may quote one (a gateway refusal, a failed command line) goes through
//! `redact` first.

use std::collections::HashMap;

use tonic::Status;

/// The host's DH-HMAC-CHAP key.
pub const HOST_SECRET_KEY: &str = "dhchapSecret";
/// The controller's key: the host authenticates the gateway too (bidirectional).
pub const CONTROLLER_SECRET_KEY: &str = "dhchapCtrlSecret";

/// What a DH-HMAC-CHAP key in its interchange form starts with.
const KEY_PREFIX: &str = "DHHC-1:";
/// What stands for a key in logs and errors.
const REDACTED: &str = "<redacted>";

/// The DH-HMAC-CHAP keys of one call; both absent when its secrets hold none.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DhchapKeys {
    pub host: Option<String>,
    pub controller: Option<String>,
}

// By hand: a derived Debug would print the keys.
impl std::fmt::Debug for DhchapKeys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DhchapKeys")
            .field("host", &self.host.as_ref().map(|_| REDACTED))
            .field("controller", &self.controller.as_ref().map(|_| REDACTED))
            .finish()
    }
}

impl DhchapKeys {
    /// `text` with these keys, and anything else shaped like a key, replaced.
    pub fn scrub(&self, text: &str) -> String {
        let mut scrubbed = text.to_string();
        for key in [&self.host, &self.controller].into_iter().flatten() {
            scrubbed = scrubbed.replace(key.as_str(), REDACTED);
        }
        redact(&scrubbed)
    }
}

/// The DH-HMAC-CHAP keys in a call's `secrets`. A key the driver does not know is
/// refused (a misspelt `dhchapSecret` must not silently mean "no authentication"),
/// and so is a value not in the `DHHC-1:HH:BASE64:` form; the errors name the key,
/// never its value.
pub fn dhchap_keys(secrets: &HashMap<String, String>) -> Result<DhchapKeys, Status> {
    let mut unknown: Vec<&str> = secrets
        .keys()
        .map(String::as_str)
        .filter(|key| *key != HOST_SECRET_KEY && *key != CONTROLLER_SECRET_KEY)
        .collect();
    unknown.sort_unstable();
    if let Some(first) = unknown.first() {
        return Err(Status::invalid_argument(format!(
            "secrets: unknown key {first:?}; sluice-csi takes {HOST_SECRET_KEY} and {CONTROLLER_SECRET_KEY} \
             (check the Secret named by the StorageClass)"
        )));
    }
    let checked = |key: &str| -> Result<Option<String>, Status> {
        let Some(value) = secrets.get(key) else { return Ok(None) };
        // A Secret made from a file often ends in a newline; nvme-cli would refuse it.
        let value = value.trim();
        check_key_form(value).map_err(|reason| {
            Status::invalid_argument(format!(
                "secrets: {key} is not a DH-HMAC-CHAP key as `nvme gen-dhchap-key` prints it \
                 (DHHC-1:HH:BASE64:): {reason}"
            ))
        })?;
        Ok(Some(value.to_string()))
    };
    let keys = DhchapKeys { host: checked(HOST_SECRET_KEY)?, controller: checked(CONTROLLER_SECRET_KEY)? };
    if keys.controller.is_some() && keys.host.is_none() {
        return Err(Status::invalid_argument(format!(
            "secrets: {CONTROLLER_SECRET_KEY} needs {HOST_SECRET_KEY} too: bidirectional authentication \
             authenticates the host first"
        )));
    }
    Ok(keys)
}

/// Cheap checks of the interchange form (the gateway and the kernel check the CRC):
/// `DHHC-1:`, a two-digit hash id (00 none, 01 SHA-256, 02 SHA-384, 03 SHA-512), and
/// the base64 of a 32, 48 or 64-byte key with its 4-byte CRC, ending in `:`. The
/// reasons never quote the value.
fn check_key_form(value: &str) -> Result<(), &'static str> {
    if value.is_empty() {
        return Err("it is empty");
    }
    let rest = value.strip_prefix(KEY_PREFIX).ok_or("it does not start with DHHC-1:")?;
    let (hash, rest) = rest.split_once(':').ok_or("no `:` after the hash id")?;
    if !matches!(hash, "00" | "01" | "02" | "03") {
        return Err("the hash id is not 00, 01, 02 or 03");
    }
    let encoded = rest.strip_suffix(':').ok_or("it does not end with `:`")?;
    let decoded_length = base64_decoded_length(encoded).ok_or("the key part is not base64")?;
    // The key and its CRC-32.
    if !matches!(decoded_length, 36 | 52 | 68) {
        return Err("the key part is not a 32, 48 or 64-byte key with its CRC");
    }
    Ok(())
}

/// The length `encoded` (standard alphabet, padded) decodes to; None when it is not
/// base64.
fn base64_decoded_length(encoded: &str) -> Option<usize> {
    if encoded.is_empty() || !encoded.len().is_multiple_of(4) {
        return None;
    }
    let body = encoded.trim_end_matches('=');
    let padding = encoded.len() - body.len();
    if padding > 2 || !body.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'+' || byte == b'/') {
        return None;
    }
    Some(encoded.len() / 4 * 3 - padding)
}

/// `text` with everything shaped like a DH-HMAC-CHAP key (`DHHC-1:` and the key
/// characters after it) replaced: for text that may quote one, such as a failed
/// `nvme connect` command line or a gateway's refusal.
pub fn redact(text: &str) -> String {
    let mut redacted = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(KEY_PREFIX) {
        redacted.push_str(&rest[..start + KEY_PREFIX.len()]);
        redacted.push_str(REDACTED);
        let after = &rest[start + KEY_PREFIX.len()..];
        let end = after
            .find(|character: char| !(character.is_ascii_alphanumeric() || "+/=:".contains(character)))
            .unwrap_or(after.len());
        rest = &after[end..];
    }
    redacted.push_str(rest);
    redacted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A well-formed key: 32 zero bytes and a CRC (not checked here), base64.
    const HOST_KEY: &str = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:";
    const CONTROLLER_KEY: &str =
        "DHHC-1:03:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB=:";

    fn secrets(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
    }

    #[test]
    fn keys_are_read_and_none_is_no_authentication() {
        assert_eq!(dhchap_keys(&HashMap::new()).unwrap(), DhchapKeys::default());
        let keys = dhchap_keys(&secrets(&[(HOST_SECRET_KEY, &format!("{HOST_KEY}\n"))])).unwrap();
        assert_eq!(keys, DhchapKeys { host: Some(HOST_KEY.to_string()), controller: None });
        let both =
            dhchap_keys(&secrets(&[(HOST_SECRET_KEY, HOST_KEY), (CONTROLLER_SECRET_KEY, CONTROLLER_KEY)])).unwrap();
        assert_eq!(both.controller.as_deref(), Some(CONTROLLER_KEY));
    }

    #[test]
    fn unknown_keys_and_malformed_values_are_refused_naming_the_key_only() {
        let error = dhchap_keys(&secrets(&[("dhchapsecret", HOST_KEY), ("zeta", "x")])).unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(error.message().contains("\"dhchapsecret\""), "{}", error.message());
        assert!(!error.message().contains("AAAA"), "{}", error.message());

        let malformed = [
            "",
            "hunter2",
            "DHHC-1:04:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:",
            "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "DHHC-1:00:AAAA*AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:",
            "DHHC-1:00:AAAAAAAA:",
        ];
        for value in malformed {
            let error = dhchap_keys(&secrets(&[(HOST_SECRET_KEY, value)])).unwrap_err();
            assert_eq!(error.code(), tonic::Code::InvalidArgument, "{value:?}");
            assert!(error.message().contains(HOST_SECRET_KEY), "{}", error.message());
            if !value.is_empty() {
                assert!(!error.message().contains(value), "the value is echoed: {}", error.message());
            }
        }
        let error = dhchap_keys(&secrets(&[(CONTROLLER_SECRET_KEY, CONTROLLER_KEY)])).unwrap_err();
        assert!(error.message().contains(HOST_SECRET_KEY), "{}", error.message());
        assert!(!error.message().contains("BBBB"), "{}", error.message());
    }

    #[test]
    fn keys_are_redacted_in_debug_and_in_text_that_quotes_them() {
        let keys = DhchapKeys { host: Some(HOST_KEY.to_string()), controller: Some("not-a-key-form".to_string()) };
        let shown = format!("{keys:?}");
        assert!(!shown.contains("AAAA") && !shown.contains("not-a-key-form"), "{shown}");
        let line = format!("`nvme connect --dhchap-secret={HOST_KEY} --x` failed: bad key \"{HOST_KEY}\"");
        assert_eq!(
            redact(&line),
            "`nvme connect --dhchap-secret=DHHC-1:<redacted> --x` failed: bad key \"DHHC-1:<redacted>\""
        );
        assert_eq!(keys.scrub("gateway: not-a-key-form refused"), "gateway: <redacted> refused");
        assert_eq!(redact("no key here"), "no key here");
    }
}

//! StorageClass parameters and capacity ranges.
//!
//! Parameters (all strings, as Kubernetes passes them):
//! - `subsystem`: the NQN of the subsystem the volumes go into, one per
//!   StorageClass. Required. Created on the gateway if missing (with no host
//!   allowed: ControllerPublishVolume allows each node's host NQN).
//! - `pool`: a `[[pool]]` of the gateway; volumes are carves of it.
//! - `rbdPool`: a Ceph pool; volumes are RBD images in it (named after the
//!   namespace UUID), created by the gateway. Exactly one of `pool` and `rbdPool`.
//! - `blockSize`: the logical block size in bytes. For a pool it must be the pool's
//!   (the pool's device sets it); for RBD it is the namespace's (default 512).
//! - `thin`: `true` (default) or `false`, pool carves only.
//!
//! Keys under `csi.storage.k8s.io/` are the external-provisioner's own and ignored;
//! any other key is refused by name, so a typo does not silently change a volume.

use std::collections::HashMap;

/// The size a volume gets when the CO asks for none.
pub const DEFAULT_VOLUME_SIZE_BYTES: u64 = 1 << 30;

/// Where a volume's blocks live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// A carve of a `[[pool]]`.
    Pool { name: String, thin: bool },
    /// An RBD image in a Ceph pool.
    Rbd { ceph_pool: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageClass {
    pub subsystem_nqn: String,
    pub backing: Backing,
    pub block_size_bytes: Option<u32>,
}

/// A refusal naming the parameter to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("StorageClass parameter {key:?}: {reason}")]
pub struct ParameterError {
    pub key: String,
    pub reason: String,
}

fn refuse(key: &str, reason: impl Into<String>) -> ParameterError {
    ParameterError { key: key.to_string(), reason: reason.into() }
}

const KNOWN_KEYS: [&str; 5] = ["subsystem", "pool", "rbdPool", "blockSize", "thin"];
const PROVISIONER_PREFIX: &str = "csi.storage.k8s.io/";

/// Refuses keys this driver does not know (naming the first, in key order so the
/// answer is the same every time).
fn refuse_unknown_keys(parameters: &HashMap<String, String>) -> Result<(), ParameterError> {
    let mut keys: Vec<&String> = parameters.keys().collect();
    keys.sort();
    for key in keys {
        if !KNOWN_KEYS.contains(&key.as_str()) && !key.starts_with(PROVISIONER_PREFIX) {
            return Err(refuse(key, format!("unknown; sluice-csi takes {}", KNOWN_KEYS.join(", "))));
        }
    }
    Ok(())
}

impl StorageClass {
    pub fn parse(parameters: &HashMap<String, String>) -> Result<StorageClass, ParameterError> {
        refuse_unknown_keys(parameters)?;
        let text = |key: &str| parameters.get(key).map(|value| value.trim()).filter(|value| !value.is_empty());
        let subsystem_nqn = text("subsystem")
            .ok_or_else(|| {
                refuse("subsystem", "missing: give the NQN of the subsystem this StorageClass's volumes go into")
            })?
            .to_string();
        if !subsystem_nqn.starts_with("nqn.") {
            return Err(refuse(
                "subsystem",
                format!("{subsystem_nqn:?} is not an NQN (nqn.yyyy-mm.reverse.domain:name)"),
            ));
        }
        let thin = match text("thin") {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(other) => return Err(refuse("thin", format!("{other:?} is neither true nor false"))),
        };
        let block_size_bytes = match text("blockSize") {
            None => None,
            Some(value) => {
                let bytes: u32 =
                    value.parse().map_err(|_| refuse("blockSize", format!("{value:?} is not a number of bytes")))?;
                if !(512..=65536).contains(&bytes) || !bytes.is_power_of_two() {
                    return Err(refuse("blockSize", format!("{bytes} is not a power of two in 512..=65536")));
                }
                Some(bytes)
            }
        };
        let backing = match (text("pool"), text("rbdPool")) {
            (Some(pool), None) => Backing::Pool { name: pool.to_string(), thin: thin.unwrap_or(true) },
            (None, Some(ceph_pool)) => {
                if thin.is_some() {
                    return Err(refuse("thin", "applies to pool carves only (RBD images are always thin)"));
                }
                Backing::Rbd { ceph_pool: ceph_pool.to_string() }
            }
            (Some(_), Some(_)) => return Err(refuse("rbdPool", "give either pool or rbdPool, not both")),
            (None, None) => return Err(refuse("pool", "missing: give pool (a [[pool]] of the gateway) or rbdPool")),
        };
        Ok(StorageClass { subsystem_nqn, backing, block_size_bytes })
    }
}

/// Parameters of GetCapacity: the same keys, all optional (no pool: every pool).
pub fn capacity_pool(parameters: &HashMap<String, String>) -> Result<Option<String>, ParameterError> {
    refuse_unknown_keys(parameters)?;
    if parameters.contains_key("rbdPool") {
        return Err(refuse("rbdPool", "the capacity of a Ceph pool is not known to the gateway"));
    }
    Ok(parameters.get("pool").cloned())
}

/// Why a capacity range cannot be met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("capacity_range: required_bytes and limit_bytes must not be negative")]
    Negative,
    #[error("capacity_range: no multiple of the {block_size_bytes}-byte block size lies between required_bytes {required_bytes} and limit_bytes {limit_bytes}")]
    OutOfRange { required_bytes: u64, limit_bytes: u64, block_size_bytes: u64 },
}

/// The size in bytes of a new volume: `required_bytes` (or the default when the CO
/// gives none) rounded up to whole blocks, within `limit_bytes` when one is given.
pub fn volume_size_bytes(required_bytes: i64, limit_bytes: i64, block_size_bytes: u64) -> Result<u64, SizeError> {
    let (Ok(required_bytes), Ok(limit_bytes)) = (u64::try_from(required_bytes), u64::try_from(limit_bytes)) else {
        return Err(SizeError::Negative);
    };
    let block_size_bytes = block_size_bytes.max(1);
    let out_of_range = SizeError::OutOfRange { required_bytes, limit_bytes, block_size_bytes };
    let wanted = match (required_bytes, limit_bytes) {
        (0, 0) => DEFAULT_VOLUME_SIZE_BYTES,
        (0, limit) => DEFAULT_VOLUME_SIZE_BYTES.min(limit),
        (required, _) => required,
    };
    let rounded = wanted.div_ceil(block_size_bytes).checked_mul(block_size_bytes).ok_or(out_of_range.clone())?;
    if limit_bytes == 0 || rounded <= limit_bytes {
        return Ok(rounded);
    }
    // Rounding up overshot the limit: the largest whole size below it, if that
    // still holds what is required.
    let largest = limit_bytes / block_size_bytes * block_size_bytes;
    if largest > 0 && largest >= required_bytes {
        Ok(largest)
    } else {
        Err(out_of_range)
    }
}

/// Whether an existing volume of `size_bytes` meets a capacity range.
pub fn size_fits(size_bytes: u64, required_bytes: i64, limit_bytes: i64) -> bool {
    let required = u64::try_from(required_bytes).unwrap_or(0);
    let limit = u64::try_from(limit_bytes).unwrap_or(0);
    size_bytes >= required && (limit == 0 || size_bytes <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parameters(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
    }

    #[test]
    fn a_pool_class_parses_with_thin_by_default_and_provisioner_keys_ignored() {
        let class = StorageClass::parse(&parameters(&[
            ("subsystem", "nqn.2026-11.io.sluice:gold"),
            ("pool", "fast"),
            ("csi.storage.k8s.io/pv/name", "pvc-1"),
        ]))
        .unwrap();
        assert_eq!(class.backing, Backing::Pool { name: "fast".into(), thin: true });
        assert_eq!(class.block_size_bytes, None);
    }

    #[test]
    fn unknown_and_bad_parameters_are_refused_by_name() {
        let base = [("subsystem", "nqn.2026-11.io.sluice:gold"), ("pool", "fast")];
        let refused = |extra: &[(&str, &str)]| {
            let mut all = parameters(&base);
            all.extend(parameters(extra));
            StorageClass::parse(&all).unwrap_err().key
        };
        assert_eq!(refused(&[("poool", "x")]), "poool");
        assert_eq!(refused(&[("thin", "yes")]), "thin");
        assert_eq!(refused(&[("blockSize", "1000")]), "blockSize");
        assert_eq!(refused(&[("rbdPool", "rbd")]), "rbdPool");
        assert_eq!(StorageClass::parse(&parameters(&[("pool", "fast")])).unwrap_err().key, "subsystem");
        assert_eq!(
            StorageClass::parse(&parameters(&[("subsystem", "gold"), ("pool", "f")])).unwrap_err().key,
            "subsystem"
        );
        assert_eq!(StorageClass::parse(&parameters(&[("subsystem", "nqn.a:b")])).unwrap_err().key, "pool");
        let rbd = parameters(&[("subsystem", "nqn.a:b"), ("rbdPool", "rbd"), ("thin", "true")]);
        assert_eq!(StorageClass::parse(&rbd).unwrap_err().key, "thin");
        assert!(StorageClass::parse(&parameters(&[("x", "1")])).unwrap_err().to_string().contains("\"x\""));
    }

    #[test]
    fn sizes_round_up_to_blocks_and_respect_the_limit() {
        assert_eq!(volume_size_bytes(0, 0, 4096), Ok(DEFAULT_VOLUME_SIZE_BYTES));
        assert_eq!(volume_size_bytes(1, 0, 4096), Ok(4096));
        assert_eq!(volume_size_bytes(4097, 0, 512), Ok(4608));
        assert_eq!(volume_size_bytes(0, 1 << 20, 4096), Ok(1 << 20));
        // Rounding up would pass the limit; the whole blocks below it still hold it.
        assert_eq!(volume_size_bytes(4000, 4100, 4096), Ok(4096));
        assert!(matches!(volume_size_bytes(5000, 6000, 4096), Err(SizeError::OutOfRange { .. })));
        assert!(matches!(volume_size_bytes(10, 5, 512), Err(SizeError::OutOfRange { .. })));
        assert_eq!(volume_size_bytes(-1, 0, 512), Err(SizeError::Negative));
    }

    #[test]
    fn an_existing_size_fits_a_range_or_not() {
        assert!(size_fits(4096, 4000, 0));
        assert!(size_fits(4096, 0, 4096));
        assert!(!size_fits(4096, 8192, 0));
        assert!(!size_fits(8192, 0, 4096));
    }
}

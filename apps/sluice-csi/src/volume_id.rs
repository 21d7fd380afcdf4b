//! Volume ids that survive restarts and decode without state.
//!
//! A volume is one namespace of one subsystem of the gateway. Its id is
//! `<subsystem NQN>:<namespace UUID>`; the UUID is a v5 UUID of the CSI volume name
//! under a fixed Sluice namespace, so a retried CreateVolume derives the same UUID
//! and finds the namespace the first attempt made (idempotency by name, as the CSI
//! spec requires), and a node finds the block device by that UUID in sysfs instead
//! of guessing a device name. NQNs may contain colons, UUIDs never do: the id splits
//! at its last colon.

use uuid::Uuid;

/// The v5 namespace every Sluice CSI volume UUID is derived under (a fixed random
/// UUID: changing it would orphan every existing volume).
pub const SLUICE_CSI_NAMESPACE: Uuid = Uuid::from_u128(0x5b0c_9e8a_4a1d_4f3e_9c57_2d61_8e0f_a7c3);

/// The CSI spec's limit on a volume id (bytes); Kubernetes stores it in a
/// PersistentVolume, so longer ids are refused when the volume is made.
pub const MAX_VOLUME_ID_BYTES: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VolumeId {
    /// The subsystem the namespace belongs to.
    pub subsystem_nqn: String,
    /// The namespace's UUID (also its NGUID: see `controller`).
    pub namespace_uuid: Uuid,
}

impl VolumeId {
    /// The id of the volume named `name` in `subsystem_nqn`.
    pub fn for_name(subsystem_nqn: &str, name: &str) -> VolumeId {
        VolumeId { subsystem_nqn: subsystem_nqn.to_string(), namespace_uuid: namespace_uuid_for_name(name) }
    }

    /// Decodes an id made by `encode`; None for anything else (an id this driver
    /// never made names no volume: callers answer NOT_FOUND, or OK for deletion).
    pub fn decode(text: &str) -> Option<VolumeId> {
        let (subsystem_nqn, uuid_text) = text.rsplit_once(':')?;
        if subsystem_nqn.is_empty() || uuid_text.len() != 36 {
            return None;
        }
        let namespace_uuid = Uuid::try_parse(uuid_text).ok()?;
        Some(VolumeId { subsystem_nqn: subsystem_nqn.to_string(), namespace_uuid })
    }

    pub fn encode(&self) -> String {
        format!("{}:{}", self.subsystem_nqn, self.namespace_uuid.hyphenated())
    }
}

/// The namespace UUID (and NGUID) of the volume named `name`.
pub fn namespace_uuid_for_name(name: &str) -> Uuid {
    Uuid::new_v5(&SLUICE_CSI_NAMESPACE, name.as_bytes())
}

/// Whether a namespace with these identifiers was made by this driver: a v5 UUID
/// whose NGUID holds the same 16 bytes. ListVolumes shows only those, not the
/// gateway's other namespaces.
pub fn made_by_driver(namespace_uuid: &Uuid, nguid: &[u8; 16]) -> bool {
    namespace_uuid.get_version_num() == 5 && namespace_uuid.as_bytes() == nguid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_round_trips_even_with_colons_in_the_nqn() {
        let id = VolumeId::for_name("nqn.2026-11.io.sluice:csi:gold", "pvc-1234");
        let text = id.encode();
        assert!(text.starts_with("nqn.2026-11.io.sluice:csi:gold:"), "{text}");
        assert_eq!(VolumeId::decode(&text), Some(id));
    }

    #[test]
    fn the_uuid_depends_only_on_the_name() {
        assert_eq!(namespace_uuid_for_name("pvc-a"), namespace_uuid_for_name("pvc-a"));
        assert_ne!(namespace_uuid_for_name("pvc-a"), namespace_uuid_for_name("pvc-b"));
        assert_eq!(namespace_uuid_for_name("pvc-a").get_version_num(), 5);
    }

    #[test]
    fn ids_this_driver_never_made_do_not_decode() {
        for text in
            ["", "fake-vol-id", "fake-vol-id-1234567890", ":8c3e0a52-0000-5000-8000-000000000000", "nqn.x:not-a-uuid"]
        {
            assert_eq!(VolumeId::decode(text), None, "{text:?}");
        }
        // 32 hex digits without dashes parse as a UUID but are not what encode writes.
        assert_eq!(VolumeId::decode("nqn.x:8c3e0a5200005000800000000000000a"), None);
    }

    #[test]
    fn only_v5_uuids_with_the_same_nguid_are_the_drivers() {
        let uuid = namespace_uuid_for_name("pvc-a");
        assert!(made_by_driver(&uuid, uuid.as_bytes()));
        assert!(!made_by_driver(&uuid, &[0; 16]));
        let random = Uuid::from_u128(0x1234_5678_9abc_4def_8123_4567_89ab_cdef);
        assert!(!made_by_driver(&random, random.as_bytes()));
    }
}

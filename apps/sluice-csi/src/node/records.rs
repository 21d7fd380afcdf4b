//! What this node has staged: one small file per staged volume,
//! `<state dir>/staged/<namespace UUID>`, holding the volume's subsystem NQN. An
//! unstage disconnects a subsystem only when no other staged volume names it: the
//! namespaces a host sees on a subsystem are not all staged (an operator's namespace
//! may be attached to every host), so the devices in sysfs cannot tell which
//! connections are still needed. The files live under /run, which the DaemonSet
//! mounts from the node (so they outlive the pod, as the connections do); a reboot
//! ends both.

use std::path::{Path, PathBuf};

use uuid::Uuid;

pub struct StagedRecords {
    directory: PathBuf,
}

impl StagedRecords {
    pub fn new(state_dir: &Path) -> StagedRecords {
        StagedRecords { directory: state_dir.join("staged") }
    }

    /// Records that the volume with `uuid` on `subsystem_nqn` is staged here.
    pub fn add(&self, uuid: &Uuid, subsystem_nqn: &str) -> Result<(), String> {
        let cannot = |error: std::io::Error| {
            format!(
                "cannot record the staged volume in {}: {error} (the node service needs a writable --state-dir)",
                self.directory.display()
            )
        };
        std::fs::create_dir_all(&self.directory).map_err(cannot)?;
        std::fs::write(self.file(uuid), format!("{subsystem_nqn}\n")).map_err(cannot)
    }

    /// Forgets the volume; a volume that was not recorded is no error.
    pub fn remove(&self, uuid: &Uuid) -> Result<(), String> {
        match std::fs::remove_file(self.file(uuid)) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(format!("cannot remove {}: {error}", self.file(uuid).display())),
        }
    }

    /// Whether a staged volume other than `uuid` is on `subsystem_nqn`. An `Err`
    /// when the records cannot be read: the caller must then keep the connections
    /// (disconnecting under a mounted volume is the one thing never to do).
    pub fn others_on(&self, uuid: &Uuid, subsystem_nqn: &str) -> Result<bool, String> {
        let own = uuid.hyphenated().to_string();
        let entries = match std::fs::read_dir(&self.directory) {
            Ok(entries) => entries,
            // Nothing was ever staged here.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(format!("cannot read {}: {error}", self.directory.display())),
        };
        for entry in entries {
            let entry = entry.map_err(|error| format!("cannot read {}: {error}", self.directory.display()))?;
            if entry.file_name().to_string_lossy() == own {
                continue;
            }
            let text = std::fs::read_to_string(entry.path())
                .map_err(|error| format!("cannot read {}: {error}", entry.path().display()))?;
            if text.trim() == subsystem_nqn {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The subsystem NQN of the volume with `uuid` if it is staged here; None when
    /// it is not.
    pub fn subsystem_of(&self, uuid: &Uuid) -> Result<Option<String>, String> {
        match std::fs::read_to_string(self.file(uuid)) {
            Ok(text) => Ok(Some(text.trim().to_string())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(format!("cannot read {}: {error}", self.file(uuid).display())),
        }
    }

    fn file(&self, uuid: &Uuid) -> PathBuf {
        self.directory.join(uuid.hyphenated().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume_id::namespace_uuid_for_name;

    #[test]
    fn a_subsystem_is_needed_while_another_volume_on_it_is_staged() {
        let root = std::env::temp_dir().join(format!("sluice-csi-records-{}", std::process::id()));
        let records = StagedRecords::new(&root);
        let (a, b, c) =
            (namespace_uuid_for_name("pvc-a"), namespace_uuid_for_name("pvc-b"), namespace_uuid_for_name("pvc-c"));
        assert!(!records.others_on(&a, "nqn.a:gold").unwrap(), "nothing recorded yet");
        records.add(&a, "nqn.a:gold").unwrap();
        records.add(&b, "nqn.a:gold").unwrap();
        records.add(&c, "nqn.a:silver").unwrap();
        assert_eq!(records.subsystem_of(&c).unwrap().as_deref(), Some("nqn.a:silver"));
        assert!(records.others_on(&a, "nqn.a:gold").unwrap());
        assert!(!records.others_on(&c, "nqn.a:silver").unwrap());
        records.remove(&b).unwrap();
        records.remove(&b).unwrap();
        assert!(!records.others_on(&a, "nqn.a:gold").unwrap());
        assert_eq!(records.subsystem_of(&b).unwrap(), None);
        let _ = std::fs::remove_dir_all(root);
    }
}

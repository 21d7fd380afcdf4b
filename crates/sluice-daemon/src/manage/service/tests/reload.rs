//! Reloads on a real `Target` (no runtime: listener changes are logged for the next
//! start): what changed is applied, a reload that cannot be applied whole changes
//! nothing, and what needs a restart is counted, not applied.

use std::sync::Arc;

use serde_json::json;

use super::{StorageFixture as Fixture, STORAGE_FILE as FILE};
use nvme_spec::NamespaceId;

const A: &str = "nqn.2026-11.io.sluice:a";
const B: &str = "nqn.2026-11.io.sluice:b";

#[test]
fn a_reload_adds_and_removes_what_the_file_says() {
    let mut fixture = Fixture::new("reload-apply", FILE);
    let disk = Arc::clone(&fixture.target.subsystem_by_nqn(A).unwrap().namespace(NamespaceId(1)).unwrap().backend);
    let host = "nqn.2014-08.io.sluice:h";
    // Namespace 1 goes, its backend comes back as namespace 3 in the same reload;
    // namespace 2 is new storage opened lazily; subsystem B is new; A's host rules change.
    let edited = FILE
        .replace(
            "nsid = 1\ndevice = \"disk\"",
            "nsid = 2\ndevice = \"spare\"\n\n[[subsystem.namespace]]\nnsid = 3\ndevice = \"disk\"",
        )
        .replace("allow_any_host = true\n", &format!("\n[[subsystem.host]]\nnqn = \"{host}\"\n"))
        + &format!(
            "\n[[subsystem]]\nnqn = \"{B}\"\nallow_any_host = true\n\n[[subsystem.namespace]]\nnsid = 1\npool = \"capacity\"\nsize = \"2MiB\"\n"
        );
    std::fs::write(&fixture.path, &edited).unwrap();
    let outcome = fixture.management.reload();
    assert_eq!(outcome.refused, None);
    assert_eq!((outcome.applied, outcome.failed, outcome.needs_restart), (5, 0, 0), "{outcome:?}");
    assert_eq!(fixture.live_ids(A), [2, 3]);
    assert_eq!(fixture.live_ids(B), [1]);
    let three = Arc::clone(&fixture.target.subsystem_by_nqn(A).unwrap().namespace(NamespaceId(3)).unwrap().backend);
    assert!(std::ptr::addr_eq(Arc::as_ptr(&three), Arc::as_ptr(&disk)), "the open backend moved, not reopened");
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    assert!(subsystem.hosts.allows(host) && !subsystem.hosts.allows("nqn.other"));

    // The API edits the reloaded file from here on (no "changed on disk" refusal).
    fixture.call("ns_add", json!({"nqn": B, "backend": "ram", "size": "1MiB"})).unwrap();
    assert!(fixture.file().starts_with(&edited[..40]));
    // Unchanged: nothing to do.
    let outcome = fixture.management.reload();
    assert_eq!((outcome.applied, outcome.refused), (0, None));
}

#[test]
fn a_reload_that_cannot_apply_whole_changes_nothing() {
    let managed = FILE.replace("allow_any_host = true\n", "allow_any_host = true\npool = \"capacity\"\n");
    let mut fixture = Fixture::new("reload-refused", &managed);
    // A host takes 6 MiB of the pool through Namespace Management.
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let pool = Arc::clone(subsystem.pool.as_ref().unwrap());
    subsystem.create_namespace((6 << 20) / 512, false, None).unwrap();
    let carves = pool.records().len();

    // Not TOML: the reason names the line.
    std::fs::write(&fixture.path, format!("{managed}\n[[subsystem]\n")).unwrap();
    let outcome = fixture.management.reload();
    let reason = outcome.refused.expect("refused");
    assert!(reason.contains("line") && reason.contains("sluice.toml"), "{reason}");

    // Valid on paper, but the pool has only 2 MiB free: the subsystem added in the same
    // edit is not added either, and no carve stays behind.
    let edited = format!(
        "{managed}\n[[subsystem.namespace]]\nnsid = 5\npool = \"capacity\"\nsize = \"4MiB\"\n\n\
         [[subsystem]]\nnqn = \"{B}\"\nallow_any_host = true\n"
    );
    std::fs::write(&fixture.path, &edited).unwrap();
    let outcome = fixture.management.reload();
    let reason = outcome.refused.expect("refused");
    assert!(reason.contains("namespace 5") && reason.contains("no room"), "{reason}");
    assert!(fixture.target.subsystem_by_nqn(B).is_none(), "nothing of a refused reload applies");
    assert_eq!(fixture.live_ids(A), [1, 2]);
    assert_eq!(pool.records().len(), carves, "no carve created");
    // Until the file agrees with the target again, the API refuses to write over it.
    let error = fixture.call("ns_add", json!({"nqn": A, "backend": "ram", "size": "1MiB"})).unwrap_err();
    assert_eq!(error.code, crate::manage::protocol::CONFIG_CHANGED_ON_DISK);
}

#[test]
fn what_needs_a_restart_is_counted_not_applied() {
    let mut fixture = Fixture::new("reload-restart", FILE);
    let edited = FILE
        .replace("nsid = 1\ndevice = \"disk\"", "nsid = 1\ndevice = \"spare\"")
        .replace("size = \"4MiB\"", "size = \"8MiB\"")
        + "\n[runtime]\nthreads = 2\n\n[[listener]]\naddress = \"127.0.0.1:4421\"\n";
    std::fs::write(&fixture.path, &edited).unwrap();
    let outcome = fixture.management.reload();
    // The namespace's device, the open backend's size, the threads, and (without a
    // runtime attached) the listener.
    assert_eq!((outcome.applied, outcome.needs_restart, outcome.failed), (0, 4, 0), "{outcome:?}");
    let namespace = fixture.target.subsystem_by_nqn(A).unwrap().namespace(NamespaceId(1)).unwrap();
    assert_eq!(namespace.geometry().capacity_bytes(), 4 << 20, "still the disk it had");
}

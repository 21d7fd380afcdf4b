//! `ns_resize` and a reload of a grown `size`: the file first, then the storage, then
//! the hosts; refusals carry `data.cause` and leave file and target as they were; a
//! restart serves the grown size.

use super::*;

/// A RAM namespace (fixed size), a thin carve, and two thick carves laid out one
/// after the other, so the first cannot grow in place.
fn resizable(table: &std::path::Path) -> String {
    format!(
        r#"[[listener]]
address = "127.0.0.1:4420"

[[backend]]
name = "r"
kind = "file"
path = "{}"
size = "16MiB"
block_size = 512

[[pool]]
name = "p"
device = "r"
table = "{}"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"

[[subsystem.namespace]]
nsid = 1
backend = "ram"
size = "1MiB"

[[subsystem.namespace]]
nsid = 2
pool = "p"
size = "2MiB"
thin = true

[[subsystem.namespace]]
nsid = 3
pool = "p"
size = "2MiB"

[[subsystem.namespace]]
nsid = 4
pool = "p"
size = "1MiB"
"#,
        table.with_file_name("pool.img").display(),
        table.display()
    )
}

fn fixture(name: &str) -> Fixture {
    let directory = std::env::temp_dir().join(format!("sluice-manage-{name}-{}", std::process::id()));
    let text = resizable(&directory.join("pool.json"));
    // Fixture::new makes the directory afresh; the paths above point into it.
    Fixture::new(name, &text)
}

fn live_bytes(fixture: &Fixture, nsid: u32) -> u64 {
    fixture.target.subsystem_by_nqn(A).unwrap().namespace(NamespaceId(nsid)).unwrap().geometry().capacity_bytes()
}

fn cause(error: &RpcError) -> &str {
    error.data.as_ref().and_then(|data| data.get("cause")).and_then(Value::as_str).unwrap_or("")
}

#[test]
fn a_namespace_grows_in_the_file_and_live_and_a_restart_keeps_the_size() {
    let mut fixture = fixture("resize");
    let grown = fixture.call("ns_resize", json!({"nqn": A, "nsid": 2, "size": "4MiB"})).unwrap();
    assert_eq!(grown["changed"], true);
    assert_eq!((grown["size_bytes"].as_u64(), grown["previous_size_bytes"].as_u64()), (Some(4 << 20), Some(2 << 20)));
    assert_eq!(grown["blocks"], 8192);
    assert_eq!(live_bytes(&fixture, 2), 4 << 20);
    assert!(fixture.file().contains("size = 4194304\nthin = true"), "{}", fixture.file());
    let file = fixture.file();
    let again = fixture.call("ns_resize", json!({"nqn": A, "nsid": 2, "size": 4 << 20})).unwrap();
    assert_eq!(again["changed"], false, "the same size again: nothing to do");
    assert_eq!(fixture.file(), file);

    // A restart from the file finds the same carve at the new size (the pool table
    // is read again; the running pool saved the grown carve before it was served).
    let config = Config::parse(&fixture.file()).unwrap();
    let (spec, _) = config.open().unwrap();
    let namespace = spec.subsystems[0].namespaces.iter().find(|namespace| namespace.id.0 == 2).unwrap();
    assert_eq!(namespace.backend.geometry().capacity_bytes(), 4 << 20);
}

#[test]
fn refusals_name_the_cause_and_change_nothing() {
    let mut fixture = fixture("resize-refused");
    let error =
        fixture.assert_refused("ns_resize", json!({"nqn": A, "nsid": 2, "size": "1MiB"}), CHANGE_REFUSED, "size");
    assert_eq!(cause(&error), "would_shrink", "{error:?}");
    let error =
        fixture.assert_refused("ns_resize", json!({"nqn": A, "nsid": 1, "size": "2MiB"}), CHANGE_REFUSED, "size");
    assert_eq!(cause(&error), "not_resizable", "{error:?}");
    assert!(error.message.contains("ram storage"), "{}", error.message);
    assert_eq!(live_bytes(&fixture, 1), 1 << 20);
    // Carve 3 is thick, and carve 4 sits right after it.
    let error =
        fixture.assert_refused("ns_resize", json!({"nqn": A, "nsid": 3, "size": "3MiB"}), CHANGE_REFUSED, "size");
    assert_eq!(cause(&error), "no_space", "{error:?}");
    assert!(error.message.contains("after it are in use"), "{}", error.message);
    fixture.assert_refused("ns_resize", json!({"nqn": A, "nsid": 2, "size": 1000}), INVALID_PARAMS, "size");
    fixture.assert_refused("ns_resize", json!({"nqn": A, "nsid": 2}), INVALID_PARAMS, "size");
    fixture.assert_refused("ns_resize", json!({"nqn": A, "nsid": 9, "size": "8MiB"}), CHANGE_REFUSED, "nsid");
    // The last thick carve grows into the free units after it.
    fixture.call("ns_resize", json!({"nqn": A, "nsid": 4, "size": "3MiB"})).unwrap();
    assert_eq!(live_bytes(&fixture, 4), 3 << 20);
}

#[test]
fn a_reload_of_a_larger_size_grows_the_namespace_live() {
    let mut fixture = fixture("resize-reload");
    let edited = fixture.file().replacen("size = \"2MiB\"\nthin = true", "size = \"6MiB\"\nthin = true", 1);
    std::fs::write(&fixture.path, &edited).unwrap();
    let outcome = fixture.management.reload();
    assert_eq!((outcome.applied, outcome.failed, outcome.needs_restart), (1, 0, 0), "{}", outcome.summary());
    assert_eq!(live_bytes(&fixture, 2), 6 << 20);
    // Smaller again is not a resize: it waits for a restart (which refuses it).
    let shrunk = edited.replacen("size = \"6MiB\"", "size = \"4MiB\"", 1);
    std::fs::write(&fixture.path, &shrunk).unwrap();
    let outcome = fixture.management.reload();
    assert_eq!((outcome.applied, outcome.needs_restart), (0, 1), "{}", outcome.summary());
    assert_eq!(live_bytes(&fixture, 2), 6 << 20);
}

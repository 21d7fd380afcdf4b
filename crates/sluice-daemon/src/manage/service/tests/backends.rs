//! Named backends and pools through the API on a real `Target`: a namespace gets the
//! open backend (never a second opening), a claimed backend is refused naming its
//! user, removal lets go of it, and pool carves come from the open pool.

use std::sync::Arc;

use serde_json::json;

use super::{StorageFixture as Fixture, STORAGE_FILE as FILE};
use crate::manage::protocol::CONFIG_INVALID;
use nvme_spec::NamespaceId;
use nvme_target::Target;
use sluice_config::Config;

const A: &str = "nqn.2026-11.io.sluice:a";

#[test]
fn a_backend_serves_one_namespace_and_is_free_again_after_its_removal() {
    let mut fixture = Fixture::new("device", FILE);
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let disk = Arc::clone(&subsystem.namespace(NamespaceId(1)).unwrap().backend);

    fixture.assert_refused(
        json!({"nqn": A, "device": "disk", "nsid": 2}),
        "device",
        "namespace 1 of nqn.2026-11.io.sluice:a serves it",
    );
    // A part of another entry: named by the file.
    fixture.assert_refused(json!({"nqn": A, "device": "pooldev"}), "device", "used by pool \"capacity\" as its device");
    fixture.assert_refused(json!({"nqn": A, "device": "tape"}), "device", "no [[backend]] named \"tape\"");
    fixture.assert_refused(json!({"nqn": A, "device": "capacity"}), "device", "is a [[pool]]");

    // A backend nothing used at start is opened at its first use.
    let added = fixture.call("ns_add", json!({"nqn": A, "device": "spare"})).unwrap();
    assert_eq!((added["nsid"].as_u64(), added["block_size"].as_u64()), (Some(2), Some(4096)), "{added}");
    assert!(fixture.file().contains("nsid = 2\ndevice = \"spare\""), "{}", fixture.file());
    let listed = fixture.call("backend_list", json!({})).unwrap();
    let spare = listed["backends"].as_array().unwrap().iter().find(|backend| backend["name"] == "spare").unwrap();
    assert_eq!((spare["open"].as_bool(), spare["namespace"]["nsid"].as_u64()), (Some(true), Some(2)), "{listed}");

    // Removed, the backend stays open and goes to the next namespace that asks.
    fixture.call("ns_remove", json!({"nqn": A, "nsid": 1})).unwrap();
    let added = fixture.call("ns_add", json!({"nqn": A, "device": "disk", "nsid": 7})).unwrap();
    assert_eq!(added["nsid"], 7);
    let served = Arc::clone(&subsystem.namespace(NamespaceId(7)).unwrap().backend);
    assert!(std::ptr::addr_eq(Arc::as_ptr(&served), Arc::as_ptr(&disk)), "the same open backend, not a second one");
    // A restart from the file builds the same.
    let restarted = Target::new(Config::parse(&fixture.file()).unwrap().target_spec().unwrap()).unwrap();
    assert_eq!(restarted.subsystem_by_nqn(A).unwrap().namespace_ids(), [NamespaceId(2), NamespaceId(7)]);
}

#[test]
fn pool_namespaces_come_from_the_open_pool_and_must_fit_its_free_space() {
    let mut fixture = Fixture::new("pool", FILE);
    // Not open yet: the file's demand is compared with the pool's size.
    let before = fixture.file();
    let error = fixture.call("ns_add", json!({"nqn": A, "pool": "capacity", "size": "16MiB"})).unwrap_err();
    assert_eq!(
        (error.code, error.data.as_ref().unwrap()["field"].as_str()),
        (CONFIG_INVALID, Some("size")),
        "{error:?}"
    );
    assert_eq!(fixture.file(), before);
    fixture.assert_refused(json!({"nqn": A, "pool": "nowhere", "size": "1MiB"}), "pool", "no [[pool]] named");
    fixture.assert_refused(json!({"nqn": A, "pool": "disk", "size": "1MiB"}), "pool", "is a [[backend]]");

    let added = fixture.call("ns_add", json!({"nqn": A, "pool": "capacity", "size": "6MiB", "nsid": 3})).unwrap();
    assert_eq!(added["size_bytes"], 6 << 20, "{added}");
    fixture.assert_refused(json!({"nqn": A, "pool": "capacity", "size": "4MiB", "nsid": 4}), "size", "has 2 MiB free");
    // Thin carves promise more than the pool holds.
    fixture.call("ns_add", json!({"nqn": A, "pool": "capacity", "size": "64MiB", "thin": true, "nsid": 4})).unwrap();
    assert_eq!(fixture.live_ids(A), [1, 3, 4]);

    let pools = fixture.call("pool_list", json!({})).unwrap();
    let pool = &pools["pools"][0];
    assert_eq!((pool["open"].as_bool(), pool["free_bytes"].as_u64()), (Some(true), Some(2 << 20)), "{pools}");
    let carves = pool["carves"].as_array().unwrap();
    assert_eq!(carves.len(), 2);
    assert!(carves.iter().all(|carve| carve["served"] == true && carve["nqn"] == A), "{pools}");

    // Removing a pool namespace of a subsystem without Namespace Management keeps the
    // carve (and its data), as removing it from the file and restarting does; adding
    // the NSID back serves the same carve.
    let nguid = fixture.target.subsystem_by_nqn(A).unwrap().namespace(NamespaceId(3)).unwrap().nguid;
    fixture.call("ns_remove", json!({"nqn": A, "nsid": 3})).unwrap();
    let pools = fixture.call("pool_list", json!({})).unwrap();
    assert_eq!(pools["pools"][0]["carves"][0]["served"], false, "{pools}");
    fixture.call("ns_add", json!({"nqn": A, "pool": "capacity", "size": "6MiB", "nsid": 3})).unwrap();
    assert_eq!(fixture.target.subsystem_by_nqn(A).unwrap().namespace(NamespaceId(3)).unwrap().nguid, nguid);
    // Under its old NSID only: its size is fixed.
    let error = fixture
        .call("ns_remove", json!({"nqn": A, "nsid": 3}))
        .and_then(|_| fixture.call("ns_add", json!({"nqn": A, "pool": "capacity", "size": "5MiB", "nsid": 3})));
    let error = error.unwrap_err();
    assert_eq!(error.data.unwrap()["field"], "size");
}

#[test]
fn limits_show_the_settings_in_effect() {
    let text = format!("{FILE}\n[target]\nmax_io_queue_depth = 128\nin_capsule_data_bytes = \"16KiB\"\n");
    let mut fixture = Fixture::new("limits", &text);
    let limits = fixture.call("limits_show", json!({})).unwrap();
    assert_eq!(limits["target"]["max_io_queue_depth"], 128);
    assert_eq!(limits["target"]["in_capsule_data_bytes"], 16 * 1024);
    assert_eq!(limits["target"]["max_io_queues_per_controller"], 64);
    assert_eq!(limits["protocol"]["max_namespace_id"], 4096);
}

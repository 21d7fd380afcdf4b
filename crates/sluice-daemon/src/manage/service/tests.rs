//! The management methods against a real `Target` built from a config file in a
//! temporary directory: accepted changes reach the file and the target; refused ones
//! leave both as they were.

use std::net::TcpListener;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;
use crate::manage::protocol::{CHANGE_REFUSED, INVALID_PARAMS, METHOD_NOT_FOUND};
use sluice_config::Config;

const A: &str = "nqn.2026-11.io.sluice:a";

const FILE: &str = r#"# operator's notes stay
[[listener]]
address = "127.0.0.1:4420"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"

[[subsystem.namespace]]
backend = "ram"
size = "1MiB"
"#;

struct Fixture {
    directory: PathBuf,
    path: PathBuf,
    management: Management,
    target: Arc<Target>,
}

impl Fixture {
    fn new(name: &str, text: &str) -> Fixture {
        let directory = std::env::temp_dir().join(format!("sluice-manage-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join("sluice.toml");
        std::fs::write(&path, text).unwrap();
        // As `sluice serve` does: the named storage the target opened goes to the API.
        let config = Config::parse(text).unwrap();
        let (spec, storage) = config.open().unwrap();
        let target = Target::new(spec).unwrap();
        sluice_config::attachment::apply(&target, &config);
        let listeners = vec![ActiveListener {
            address: "127.0.0.1:4420".parse().unwrap(),
            discovery_only: false,
            secure_channel: nvme_target::SecureChannel::None,
        }];
        let management = Management::new(Arc::clone(&target), Some(&path), listeners).unwrap().with_storage(storage);
        Fixture { directory, path, management, target }
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        let params = Params::new(params.as_object().cloned().unwrap_or_default());
        self.management.call(method, params)
    }

    fn file(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap()
    }

    fn live_ids(&self, nqn: &str) -> Vec<u32> {
        self.target.subsystem_by_nqn(nqn).unwrap().namespace_ids().iter().map(|id| id.0).collect()
    }

    /// `method` is refused with `code`, naming `field`, and changes nothing.
    fn assert_refused(&mut self, method: &str, params: Value, code: i64, field: &str) -> RpcError {
        let before = self.file();
        let live_before = self.live_ids(A);
        let error = self.call(method, params.clone()).expect_err(&format!("{method} {params}"));
        assert_eq!(error.code, code, "{method} {params}: {error:?}");
        let named = error.data.as_ref().and_then(|data| data.get("field")).and_then(Value::as_str).unwrap_or("");
        assert_eq!(named, field, "{method} {params}: {error:?}");
        assert_eq!(self.file(), before, "{method} {params}: the file must be byte-identical");
        assert_eq!(self.live_ids(A), live_before, "{method} {params}: the target must be unchanged");
        error
    }
}

/// `text` with a 64 MiB RAM-backed `[[pool]]` "fast" that subsystem A takes its
/// Namespace Management namespaces from (its table lives as long as the target).
fn with_ram_pool(text: &str) -> String {
    text.replace(
        "[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\n",
        "[[backend]]\nname = \"pooldev\"\nkind = \"ram\"\nsize = \"64MiB\"\n\n\
         [[pool]]\nname = \"fast\"\ndevice = \"pooldev\"\n\n\
         [[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\npool = \"fast\"\n",
    )
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

#[test]
fn a_namespace_added_is_live_in_the_file_and_noticed_by_hosts() {
    let mut fixture = Fixture::new("ns-add", FILE);
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let controller = fixture
        .target
        .create_controller(nvme_target::ControllerKind::Io, Some(subsystem), "nqn.host".into(), [1; 16], 0)
        .unwrap();

    let added =
        fixture.call("ns_add", json!({"nqn": A, "backend": "ram", "size": "2MiB", "block_size": 4096})).unwrap();
    assert_eq!(added["nsid"], 2, "{added}");
    assert_eq!(added["block_size"], 4096);
    assert_eq!(added["size_bytes"], 2 << 20);
    assert_eq!(fixture.live_ids(A), [1, 2]);
    let log = controller.changed_namespace_log(false);
    assert_eq!(u32::from_le_bytes(log[..4].try_into().unwrap()), 2, "the controller is told NSID 2 changed");

    let file = fixture.file();
    assert!(file.starts_with("# operator's notes stay"), "{file}");
    assert!(file.contains("nsid = 2\nbackend = \"ram\"\nsize = \"2MiB\"\nblock_size = 4096"), "{file}");
    // A restart from the file builds the same namespaces with the same identity.
    let restarted = Target::new(Config::parse(&file).unwrap().target_spec().unwrap()).unwrap();
    let before = fixture.target.subsystem_by_nqn(A).unwrap();
    let after = restarted.subsystem_by_nqn(A).unwrap();
    for id in [1, 2] {
        let id = NamespaceId(id);
        assert_eq!(before.namespace(id).unwrap().nguid, after.namespace(id).unwrap().nguid);
        assert_eq!(before.namespace(id).unwrap().uuid, after.namespace(id).unwrap().uuid);
    }

    let listed = fixture.call("ns_list", json!({"nqn": A})).unwrap();
    let namespaces = listed["namespaces"].as_array().unwrap();
    assert_eq!(namespaces.len(), 2);
    assert_eq!(namespaces[1]["source"], "config");
    assert_eq!(namespaces[1]["nguid"].as_str().unwrap().len(), 32);
}

#[test]
fn refused_changes_leave_file_and_target_untouched() {
    let mut fixture = Fixture::new("refused", FILE);
    fixture.assert_refused(
        "ns_add",
        json!({"nqn": A, "nsid": 1, "backend": "ram", "size": "1MiB"}),
        CHANGE_REFUSED,
        "nsid",
    );
    let error =
        fixture.assert_refused("ns_add", json!({"nqn": A, "backend": "tape", "size": "1MiB"}), CONFIG_INVALID, "");
    assert!(error.message.contains("tape"), "{error:?}");
    fixture.assert_refused("ns_add", json!({"nqn": A, "backend": "ram", "size": 1000}), CONFIG_INVALID, "size");
    fixture.assert_refused("ns_add", json!({"nqn": A, "backend": "ram"}), CONFIG_INVALID, "size");
    fixture.assert_refused("ns_add", json!({"nqn": A, "size": "1MiB"}), INVALID_PARAMS, "backend");
    fixture.assert_refused("ns_add", json!({"backend": "ram", "size": "1MiB"}), INVALID_PARAMS, "nqn");
    fixture.assert_refused(
        "ns_add",
        json!({"nqn": A, "backend": "ram", "size": "1MiB", "colour": 1}),
        INVALID_PARAMS,
        "colour",
    );
    fixture.assert_refused("ns_add", json!({"nqn": A, "backend": "ram", "nsid": 0}), INVALID_PARAMS, "nsid");
    fixture.assert_refused("ns_add", json!({"nqn": A, "backend": "ram", "nguid": "xyz"}), INVALID_PARAMS, "nguid");
    fixture.assert_refused(
        "ns_add",
        json!({"nqn": "nqn.none", "backend": "ram", "size": "1MiB"}),
        CHANGE_REFUSED,
        "nqn",
    );
    // A reference to storage the file does not define.
    let error = fixture.assert_refused(
        "ns_add",
        json!({"nqn": A, "pool": "fast", "size": "1MiB", "nsid": 5}),
        CHANGE_REFUSED,
        "pool",
    );
    assert!(error.message.contains("no [[pool]] named \"fast\""), "{error:?}");
    let error = fixture.assert_refused("ns_add", json!({"nqn": A, "device": "disk0"}), CHANGE_REFUSED, "device");
    assert!(error.message.contains("no [[backend]] named \"disk0\""), "{error:?}");
    fixture.assert_refused("ns_remove", json!({"nqn": A, "nsid": 9}), CHANGE_REFUSED, "nsid");
    fixture.assert_refused("subsystem_add", json!({"nqn": A}), CHANGE_REFUSED, "nqn");
    fixture.assert_refused("subsystem_add", json!({"nqn": "not an nqn"}), INVALID_PARAMS, "nqn");
    fixture.assert_refused("subsystem_remove", json!({"nqn": "nqn.2026-11.io.sluice:none"}), CHANGE_REFUSED, "nqn");
    fixture.assert_refused("listener_add", json!({"address": "localhost"}), INVALID_PARAMS, "address");
    fixture.assert_refused("listener_add", json!({"address": "127.0.0.1:4420"}), CHANGE_REFUSED, "address");
    fixture.assert_refused("listener_remove", json!({"address": "127.0.0.1:4420"}), CHANGE_REFUSED, "address");
    // Listener changes apply to a runtime; without one they are refused after their
    // checks (listeners.rs tests them on a running target).
    let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    fixture.assert_refused("listener_add", json!({"address": free}), APPLY_FAILED, "");
    let error = fixture.call("no_such_method", json!({})).unwrap_err();
    assert_eq!(error.code, METHOD_NOT_FOUND);
}

#[test]
fn removing_a_namespace_keeps_the_identity_of_the_others() {
    let two = format!("{FILE}\n[[subsystem.namespace]]\nbackend = \"null\"\nsize = \"1MiB\"\n");
    let mut fixture = Fixture::new("ns-remove", &two);
    let nguid_of_two = fixture.target.subsystem_by_nqn(A).unwrap().namespace(NamespaceId(2)).unwrap().nguid;
    let removed = fixture.call("ns_remove", json!({"nqn": A, "nsid": 1})).unwrap();
    assert_eq!(removed["removed_from_config_file"], true);
    assert_eq!(fixture.live_ids(A), [2]);
    let restarted = Target::new(Config::parse(&fixture.file()).unwrap().target_spec().unwrap()).unwrap();
    let subsystem = restarted.subsystem_by_nqn(A).unwrap();
    assert_eq!(subsystem.namespace_ids(), [NamespaceId(2)], "NSID 2 did not become 1");
    assert_eq!(subsystem.namespace(NamespaceId(2)).unwrap().nguid, nguid_of_two);
}

#[test]
fn subsystems_come_and_go_live_and_in_the_file() {
    let mut fixture = Fixture::new("subsystems", FILE);
    let nqn = "nqn.2026-11.io.sluice:b";
    let added = fixture.call("subsystem_add", json!({"nqn": nqn, "serial": "SN-B", "model": "Model B"})).unwrap();
    assert_eq!(added["serial"], "SN-B");
    assert!(fixture.target.subsystem_by_nqn(nqn).is_some());
    fixture.call("ns_add", json!({"nqn": nqn, "backend": "null", "size": 1048576})).unwrap();
    let shown = fixture.call("subsystem_show", json!({"nqn": nqn})).unwrap();
    assert_eq!(shown["namespace_list"][0]["nsid"], 1);
    assert_eq!(shown["model"], "Model B");
    let listed = fixture.call("subsystem_list", json!({})).unwrap();
    assert_eq!(listed["subsystems"].as_array().unwrap().len(), 2);
    let config = Config::parse(&fixture.file()).unwrap();
    assert_eq!(config.subsystems[1].nqn, nqn);

    fixture.call("subsystem_remove", json!({"nqn": nqn})).unwrap();
    assert!(fixture.target.subsystem_by_nqn(nqn).is_none());
    assert!(!fixture.file().contains(nqn));
    // The NQN can be used again, and its namespace gets the same identity back.
    fixture.call("subsystem_add", json!({"nqn": nqn})).unwrap();
}

#[test]
fn listener_list_shows_the_file_next_to_the_listeners_accepting() {
    let mut fixture = Fixture::new("listeners", FILE);
    let listed = fixture.call("listener_list", json!({})).unwrap();
    let expected = json!([{"address": "127.0.0.1:4420", "discovery_only": false, "tls": "none", "configured": true, "active": true}]);
    assert_eq!(listed["listeners"], expected);
}

#[test]
fn hand_edits_and_missing_files_refuse_changes() {
    let mut fixture = Fixture::new("hand-edit", FILE);
    std::fs::write(&fixture.path, format!("{FILE}# edited by hand\n")).unwrap();
    let error = fixture.call("ns_add", json!({"nqn": A, "backend": "ram", "size": "1MiB"})).unwrap_err();
    assert_eq!(error.code, CONFIG_CHANGED_ON_DISK);
    assert!(fixture.file().ends_with("# edited by hand\n"));
    assert_eq!(fixture.live_ids(A), [1]);

    let target = Target::new(Config::parse(FILE).unwrap().target_spec().unwrap()).unwrap();
    let mut embedded = Management::new(target, None, Vec::new()).unwrap();
    let params = Params::new(json!({"nqn": A, "backend": "ram", "size": "1MiB"}).as_object().cloned().unwrap());
    assert_eq!(embedded.call("ns_add", params).unwrap_err().code, NO_CONFIG_FILE);
    let shown = embedded.call("config_show", Params::default()).unwrap();
    assert_eq!(shown["persistent"], false);
}

#[test]
fn a_symbolic_link_to_the_config_stays_a_link() {
    let mut fixture = Fixture::new("symlink", FILE);
    let link = fixture.directory.join("link.toml");
    std::os::unix::fs::symlink(&fixture.path, &link).unwrap();
    let target = Arc::clone(&fixture.target);
    fixture.management = Management::new(target, Some(&link), Vec::new()).unwrap();
    fixture.call("ns_add", json!({"nqn": A, "backend": "ram", "size": "1MiB"})).unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(fixture.file().contains("nsid = 2"));
}

#[test]
fn host_rules_apply_live_and_disconnect_hosts_no_longer_allowed() {
    const HOST: &str = "nqn.2014-08.io.sluice:h";
    let mut fixture = Fixture::new("hosts", FILE);
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let other = fixture
        .target
        .create_controller(
            nvme_target::ControllerKind::Io,
            Some(Arc::clone(&subsystem)),
            "nqn.other".into(),
            [2; 16],
            0,
        )
        .unwrap();
    let generation = fixture.target.discovery_generation();

    let allowed = fixture.call("host_allow", json!({"nqn": A, "host": HOST})).unwrap();
    assert_eq!(allowed["allow_any_host"], false, "listing a host closes the subsystem to the others");
    assert_eq!(allowed["controllers_disconnected"], 1);
    assert!(other.is_torn_down());
    assert!(subsystem.hosts.allows(HOST) && !subsystem.hosts.allows("nqn.other"));
    assert!(fixture.target.discovery_generation() > generation, "hosts re-read the discovery log");
    assert!(fixture.file().contains(&format!("[[subsystem.host]]\nnqn = \"{HOST}\"")));

    let before = fixture.file();
    let error =
        fixture.call("host_allow", json!({"nqn": A, "host": HOST, "dhchap_secret": "DHHC-1:00:bad:"})).unwrap_err();
    assert_eq!(error.code, CONFIG_INVALID, "{error:?}");
    assert_eq!(fixture.file(), before);
    fixture.assert_refused(
        "host_allow",
        json!({"nqn": A, "host": HOST, "dhchap_ctrl_secret": "DHHC-1:00:x:"}),
        INVALID_PARAMS,
        "dhchap_ctrl_secret",
    );
    fixture.assert_refused("host_allow", json!({"nqn": A, "host": "host one"}), INVALID_PARAMS, "host");
    fixture.assert_refused(
        "host_deny",
        json!({"nqn": A, "host": "nqn.2014-08.io.sluice:none"}),
        CHANGE_REFUSED,
        "host",
    );
    assert!(subsystem.hosts.allows(HOST) && !subsystem.hosts.allows("nqn.other"), "refusals change no rule");

    let secret = nvme_host::Secret::from_key(&[3; 32], None).unwrap().to_representation().to_string();
    let rotated = fixture.call("host_allow", json!({"nqn": A, "host": HOST, "dhchap_secret": secret})).unwrap();
    assert_eq!((rotated["change"].as_str(), rotated["dhchap"].as_bool()), (Some("updated"), Some(true)));
    let listed = fixture.call("host_list", json!({"nqn": A})).unwrap();
    assert_eq!(listed["hosts"][0]["dhchap"], true);
    assert!(!listed.to_string().contains("DHHC-1"), "secrets are never shown: {listed}");

    // A TLS key through the API: in force at once, listed as present, never shown.
    let key = nvme_auth::TlsKey::from_key(&[5; 32], Some(nvme_auth::HashFunction::Sha256)).unwrap();
    let key_text = key.to_interchange().to_string();
    let before = fixture.file();
    let broken = key_text.replace(":01:", ":02:");
    let error = fixture.call("host_allow", json!({"nqn": A, "host": HOST, "tls_key": broken})).unwrap_err();
    assert_eq!(error.code, CONFIG_INVALID, "{error:?}");
    assert!(!format!("{error:?}").contains(&key_text[16..40]), "the refused key is not echoed: {error:?}");
    assert_eq!(fixture.file(), before);
    let keyed = fixture
        .call("host_allow", json!({"nqn": A, "host": HOST, "tls_key": key_text, "tls_key_derivation": "compat"}))
        .unwrap();
    assert_eq!(keyed["tls"], true);
    let rules = subsystem.hosts.current();
    let entry = rules.hosts.iter().find(|entry| entry.nqn == HOST).expect("listed");
    assert_eq!(entry.tls_key.as_ref(), Some(&key));
    assert_eq!(entry.tls_key_derivation, nvme_auth::KeyDerivation::Compat);
    let listed = fixture.call("host_list", json!({"nqn": A})).unwrap();
    assert_eq!(listed["hosts"][0]["tls"], true);
    assert!(!listed.to_string().contains("NVMeTLSkey"), "keys are never shown: {listed}");

    fixture.call("host_deny", json!({"nqn": A, "host": HOST})).unwrap();
    assert!(
        !subsystem.hosts.allows("nqn.other") && !subsystem.hosts.allows(HOST),
        "no host listed and allow_any_host unset: nobody may connect"
    );
}

#[test]
fn a_subsystem_with_a_pool_takes_inline_and_pool_namespaces_live() {
    let pooled = with_ram_pool(FILE);
    let mut fixture = Fixture::new("pool", &pooled);
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    assert!(subsystem.supports_namespace_management());
    fixture.call("ns_add", json!({"nqn": A, "backend": "ram", "size": "1MiB"})).unwrap();
    // A carve of the subsystem's own pool is served from the pool's table, like
    // one a host created; removing it deletes the carve.
    let pool = Arc::clone(subsystem.pool.as_ref().unwrap());
    let added = fixture.call("ns_add", json!({"nqn": A, "pool": "fast", "size": "1MiB", "nsid": 9})).unwrap();
    assert_eq!((added["nsid"].as_u64(), added["size_bytes"].as_u64()), (Some(9), Some(1 << 20)), "{added}");
    assert_eq!(fixture.live_ids(A), [1, 2, 9]);
    assert_eq!(pool.records().len(), 1, "carved from the open pool, not a second opening of it");
    fixture.call("ns_remove", json!({"nqn": A, "nsid": 9})).unwrap();
    assert_eq!(fixture.live_ids(A), [1, 2]);

    // A namespace a host created through Namespace Management lives in the pool's
    // table, not the file: listed as such, removed without touching the file.
    let created = subsystem.create_namespace(256, false, None).unwrap();
    let listed = fixture.call("ns_list", json!({"nqn": A})).unwrap();
    let sources: Vec<&str> =
        listed["namespaces"].as_array().unwrap().iter().map(|ns| ns["source"].as_str().unwrap()).collect();
    assert_eq!(sources, ["config", "config", "pool"], "{listed}");
    let before = fixture.file();
    let removed = fixture.call("ns_remove", json!({"nqn": A, "nsid": created.0})).unwrap();
    assert_eq!(removed["removed_from_config_file"], false);
    assert_eq!(fixture.file(), before);
    assert_eq!(fixture.live_ids(A), [1, 2]);
}

/// A pool namespace can be given its UUID and NGUID (a CSI driver derives them from
/// the volume name); a second namespace with an identifier in use is refused, and
/// once the first is removed (its carve deleted) the identifier is free again.
#[test]
fn pool_namespaces_take_given_identifiers_and_duplicates_are_refused() {
    let pooled = with_ram_pool(FILE);
    let mut fixture = Fixture::new("pool-identity", &pooled);
    let uuid = "5b0c9e8a-4a1d-5f3e-9c57-2d618e0fa7c3";
    let nguid = "5b0c9e8a4a1d5f3e9c572d618e0fa7c3";
    let carve = json!({"nqn": A, "pool": "fast", "size": "1MiB", "thin": true, "uuid": uuid, "nguid": nguid});
    fixture.call("ns_add", carve.clone()).unwrap();
    let listed = fixture.call("ns_list", json!({"nqn": A})).unwrap();
    let namespace = listed["namespaces"].as_array().unwrap().iter().find(|ns| ns["uuid"] == uuid).cloned();
    let namespace = namespace.unwrap_or_else(|| panic!("no namespace with the given UUID: {listed}"));
    assert_eq!(namespace["nguid"], nguid, "{listed}");
    let nsid = namespace["nsid"].as_u64().unwrap();
    // The same UUID again (a retry that raced, or another subsystem) is refused.
    fixture.assert_refused("ns_add", carve.clone(), CHANGE_REFUSED, "nguid");
    let mut only_uuid = carve.clone();
    only_uuid.as_object_mut().unwrap().remove("nguid");
    fixture.assert_refused("ns_add", only_uuid, CHANGE_REFUSED, "uuid");
    fixture.call("ns_remove", json!({"nqn": A, "nsid": nsid})).unwrap();
    fixture.call("ns_add", carve).unwrap();
}

/// A generated PSK (secure channel concatenation) stands for the DH-HMAC-CHAP secret
/// it came from: rotating the secret or dropping `concat` forgets the host's PSKs and
/// tears its controllers down; an unrelated change keeps them.
#[test]
fn concat_secret_changes_forget_generated_psks() {
    const HOST: &str = "nqn.2014-08.io.sluice:concat";
    let fixture = Fixture::new("concat", FILE);
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let secret = |byte: u8| nvme_auth::Secret::from_key(&[byte; 32], None).unwrap();
    let entry = |secret: nvme_auth::Secret, concat: bool| nvme_target::HostEntry {
        dhchap_secret: Some(secret),
        concat,
        ..nvme_target::HostEntry::new(HOST)
    };
    let rules = |entry| nvme_target::HostAccess { allow_any_host: false, hosts: vec![entry] };
    let generated = nvme_auth::GeneratedPsk::generate(nvme_auth::HashFunction::Sha256, &[1; 256], &[2; 32], &[3; 32]);
    let file = |target: &Target| target.generated_psks.insert(&generated, HOST, A).expect("filed");

    fixture.management.apply_host_rules(&subsystem, rules(entry(secret(1), true)));
    file(&fixture.target);
    let controller = fixture
        .target
        .create_controller(nvme_target::ControllerKind::Io, Some(Arc::clone(&subsystem)), HOST.into(), [4; 16], 0)
        .unwrap();
    // The same secret and concat (another host added): kept.
    let mut same = rules(entry(secret(1), true));
    same.hosts.push(nvme_target::HostEntry::new("nqn.2014-08.io.sluice:other"));
    assert_eq!(fixture.management.apply_host_rules(&subsystem, same), 0);
    assert_eq!(fixture.target.generated_psks.len(), 1);
    // Rotated: forgotten, and the controller goes.
    assert_eq!(fixture.management.apply_host_rules(&subsystem, rules(entry(secret(2), true))), 1);
    assert!(fixture.target.generated_psks.is_empty() && controller.is_torn_down());
    // concat dropped: forgotten too.
    file(&fixture.target);
    fixture.management.apply_host_rules(&subsystem, rules(entry(secret(2), false)));
    assert!(fixture.target.generated_psks.is_empty());
}

#[test]
fn qos_limits_change_live_without_reconnecting_and_bad_ones_are_refused() {
    const HOST: &str = "nqn.2014-08.io.sluice:h";
    let mut fixture = Fixture::new("qos", FILE);
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let namespace = subsystem.namespace(NamespaceId(1)).unwrap();
    let host = fixture
        .target
        .create_controller(nvme_target::ControllerKind::Io, Some(Arc::clone(&subsystem)), HOST.into(), [2; 16], 0)
        .unwrap();

    let set = fixture.call("ns_qos", json!({"nqn": A, "nsid": 1, "rw_ios_per_second": 10, "burst_ms": 0})).unwrap();
    assert_eq!(set["qos"], json!({"rw_ios_per_second": 10, "burst_ms": 0}));
    assert!(
        fixture.file().contains("[subsystem.namespace.qos]\nrw_ios_per_second = 10\nburst_ms = 0"),
        "{}",
        fixture.file()
    );
    assert!(!host.is_torn_down(), "a limit changes no connection");
    // In force at once: the second of two commands at the same instant waits 100 ms.
    let now = std::time::Instant::now();
    let direction = nvme_target::qos::IoDirection::Read;
    assert_eq!(namespace.qos.namespace.reserve(now, direction, 4096), now);
    assert_eq!(namespace.qos.namespace.reserve(now, direction, 4096), now + std::time::Duration::from_millis(100));
    let listed = fixture.call("ns_list", json!({"nqn": A})).unwrap();
    assert_eq!(listed["namespaces"][0]["qos"]["rw_ios_per_second"], 10);

    for (key, bad) in [
        ("rw_ios_per_second", json!(0)),
        ("w_mbytes_per_second", json!(-3)),
        ("r_mbytes_per_second", json!(1u64 << 41)),
    ] {
        let before = fixture.file();
        let error = fixture.call("ns_qos", json!({"nqn": A, "nsid": 1, key: bad})).unwrap_err();
        assert_eq!(error.code, CONFIG_INVALID, "{error:?}");
        assert!(error.message.contains(key), "names the key: {error:?}");
        assert_eq!(fixture.file(), before);
        assert_eq!(namespace.qos.namespace.limits().rw_ios_per_second, Some(10), "the running limit stays");
    }
    fixture.assert_refused(
        "ns_qos",
        json!({"nqn": A, "nsid": 1, "rw_ios_per_second": "many"}),
        INVALID_PARAMS,
        "rw_ios_per_second",
    );
    fixture.assert_refused("ns_qos", json!({"nqn": A, "nsid": 1, "remove": ["iops"]}), INVALID_PARAMS, "remove");
    fixture.assert_refused(
        "ns_qos",
        json!({"nqn": A, "nsid": 1, "host": HOST, "rw_ios_per_second": 5}),
        CHANGE_REFUSED,
        "host",
    );

    // Per host: in the host's entry, kept across a secret rotation, gone with the host.
    fixture.call("host_allow", json!({"nqn": A, "host": HOST})).unwrap();
    fixture.call("ns_qos", json!({"nqn": A, "nsid": 1, "host": HOST, "w_mbytes_per_second": "5"})).unwrap();
    assert!(fixture.file().contains("[[subsystem.host.qos]]\nnsid = 1\nw_mbytes_per_second = 5"), "{}", fixture.file());
    let host_limits = nvme_target::qos::QosLimits { w_mbytes_per_second: Some(5), ..Default::default() };
    assert_eq!(namespace.qos.host_limits(), [(HOST.to_string(), host_limits)]);
    let secret = nvme_host::Secret::from_key(&[3; 32], None).unwrap().to_representation().to_string();
    fixture.call("host_allow", json!({"nqn": A, "host": HOST, "dhchap_secret": secret})).unwrap();
    assert_eq!(namespace.qos.host_limits(), [(HOST.to_string(), host_limits)], "a secret rotation keeps the limits");
    fixture.call("host_deny", json!({"nqn": A, "host": HOST})).unwrap();
    assert!(namespace.qos.host_limits().is_empty());

    // Removing the limit: the file loses the table, the namespace its limit.
    fixture.call("ns_qos", json!({"nqn": A, "nsid": 1, "remove": "all"})).unwrap();
    assert!(!fixture.file().contains("qos"), "{}", fixture.file());
    assert!(!namespace.qos.namespace.is_active());

    // A reload applies an edited file's limits too.
    let edited = format!("{FILE}\n[subsystem.namespace.qos]\nrw_mbytes_per_second = 50\n");
    std::fs::write(&fixture.path, &edited).unwrap();
    let outcome = fixture.management.reload();
    assert_eq!((outcome.applied, outcome.failed, outcome.refused.clone()), (1, 0, None), "{outcome:?}");
    assert_eq!(namespace.qos.namespace.limits().rw_mbytes_per_second, Some(50));
}

/// The method table decides what read-only network clients may call: every method
/// `call` runs must be in it, each once, and the read-only ones are exactly these
/// (a method moved to read-only must be a decision taken here, in review).
#[test]
fn every_method_is_in_the_table_once_and_classified() {
    let mut fixture = Fixture::new("method-table", FILE);
    let names = method_names();
    for (index, name) in names.iter().enumerate() {
        assert!(!names[..index].contains(name), "{name} is in METHODS twice");
        // An unknown parameter: every method refuses it, none answers "not found".
        let answer = fixture.call(name, json!({ "no_such_parameter": 1 }));
        assert!(
            !matches!(&answer, Err(error) if error.code == METHOD_NOT_FOUND),
            "{name} is in METHODS but `call` has no arm for it"
        );
    }
    assert_eq!(
        read_only_method_names(),
        [
            "subsystem_list",
            "subsystem_show",
            "ns_list",
            "host_list",
            "listener_list",
            "config_show",
            "rpc_methods",
            "api_version",
            "target_show",
            "backend_list",
            "pool_list",
            "limits_show",
            "gateway_status",
            // Snapshot names and sizes: no secret, and monitoring may watch them.
            "rbd_snapshot_list",
        ]
    );
    // The API's version, and the daemon's release beside it.
    let version = fixture.call("api_version", json!({})).expect("api_version answers");
    assert_eq!(version["api_version"], json!(management_client::methods::API_VERSION));
    assert_eq!(version["sluice_version"], json!(env!("CARGO_PKG_VERSION")));
    // Not in the table: not found, whatever `call` might know.
    let error = fixture.call("subsystem_list_all", json!({})).unwrap_err();
    assert_eq!(error.code, METHOD_NOT_FOUND);
    assert_eq!(fixture.file(), FILE, "no call above changed the file");
}

/// The config the storage, reload and API contract tests (backends.rs, reload.rs,
/// contract.rs) start from: subsystem A with
/// namespace 1 over the named backend "disk", a named backend "spare" nothing uses,
/// and a pool "capacity" over "pooldev".
pub(crate) const STORAGE_FILE: &str = r#"[[listener]]
address = "127.0.0.1:4420"

[[backend]]
name = "disk"
kind = "ram"
size = "4MiB"

[[backend]]
name = "spare"
kind = "null"
size = "2MiB"
block_size = 4096

[[backend]]
name = "pooldev"
kind = "ram"
size = "8MiB"

[[pool]]
name = "capacity"
device = "pooldev"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
device = "disk"
"#;

pub(crate) struct StorageFixture {
    pub directory: PathBuf,
    pub path: PathBuf,
    pub management: Management,
    pub target: Arc<Target>,
}

impl StorageFixture {
    pub fn new(name: &str, text: &str) -> StorageFixture {
        let directory = std::env::temp_dir().join(format!("sluice-storage-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join("sluice.toml");
        std::fs::write(&path, text).unwrap();
        let (spec, storage) = Config::parse(text).unwrap().open().unwrap();
        let target = Target::new(spec).unwrap();
        let listeners = vec![ActiveListener {
            address: "127.0.0.1:4420".parse().unwrap(),
            discovery_only: false,
            secure_channel: nvme_target::SecureChannel::None,
        }];
        let management = Management::new(Arc::clone(&target), Some(&path), listeners).unwrap().with_storage(storage);
        StorageFixture { directory, path, management, target }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.management.call(method, Params::new(params.as_object().cloned().unwrap_or_default()))
    }

    pub fn file(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap()
    }

    pub fn live_ids(&self, nqn: &str) -> Vec<u32> {
        self.target
            .subsystem_by_nqn(nqn)
            .map_or_else(Vec::new, |subsystem| subsystem.namespace_ids().iter().map(|id| id.0).collect())
    }

    /// Refused with `code` naming `field`; the file and the target are unchanged.
    fn assert_refused(&mut self, params: Value, field: &str, says: &str) {
        let (before, live_before) = (self.file(), self.live_ids(A));
        let error = self.call("ns_add", params.clone()).expect_err(&params.to_string());
        assert_eq!(error.code, CHANGE_REFUSED, "{params}: {error:?}");
        assert_eq!(error.data.as_ref().unwrap()["field"], field, "{params}: {error:?}");
        assert!(error.message.contains(says), "{params}: {error:?}");
        assert_eq!(self.file(), before, "{params}: the file must be byte-identical");
        assert_eq!(self.live_ids(A), live_before, "{params}: the target must be unchanged");
    }
}

impl Drop for StorageFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

mod attachment;
mod backends;
mod contract;
mod reload;
mod resize;

/// `delete_image`, `clone_from` and the snapshot methods refuse what they cannot apply
/// before anything changes (these refusals come before any cluster is asked).
#[test]
fn image_deletion_clones_and_snapshots_refuse_what_cannot_apply() {
    let mut fixture = Fixture::new("rbd-refusals", FILE);
    let nqn = "nqn.2026-11.io.sluice:a";
    let field = |error: &RpcError| error.data.as_ref().and_then(|data| data["field"].as_str().map(str::to_string));
    let error = fixture.call("ns_remove", json!({ "nqn": nqn, "nsid": 1, "delete_image": true })).unwrap_err();
    assert_eq!((error.code, field(&error).as_deref()), (CHANGE_REFUSED, Some("delete_image")), "{}", error.message);
    for params in [
        json!({ "nqn": nqn, "backend": "ram", "size": "1MiB", "clone_from": "rbd/a@s" }),
        json!({ "nqn": nqn, "rbd": "rbd/new", "size": "1MiB", "clone_from": "rbd/a" }),
    ] {
        let error = fixture.call("ns_add", params.clone()).unwrap_err();
        assert_eq!(
            (error.code, field(&error).as_deref()),
            (INVALID_PARAMS, Some("clone_from")),
            "{params}: {}",
            error.message
        );
    }
    for (params, wrong) in
        [(json!({ "rbd": "rbd", "snapshot": "s" }), "rbd"), (json!({ "rbd": "rbd/a", "snapshot": "a@b" }), "snapshot")]
    {
        let error = fixture.call("rbd_snapshot_create", params.clone()).unwrap_err();
        assert_eq!(
            (error.code, field(&error).as_deref()),
            (INVALID_PARAMS, Some(wrong)),
            "{params}: {}",
            error.message
        );
    }
    assert_eq!(fixture.file(), FILE, "a refusal changed the file");
}

#[test]
fn backend_remove_drops_only_an_unused_entry_and_says_why_not() {
    let text = "[[listener]]\naddress = \"127.0.0.1:4420\"\n\n[[backend]]\nname = \"spare\"\nkind = \"ram\"\nsize = \"1MiB\"\n\n\
                [[backend]]\nname = \"disk\"\nkind = \"ram\"\nsize = \"1MiB\"\n\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\n\n\
                [[subsystem.namespace]]\ndevice = \"disk\"\n";
    let mut fixture = Fixture::new("backend-remove", text);
    let cause = |error: &RpcError| {
        error.data.as_ref().and_then(|data| data.get("cause")).and_then(Value::as_str).map(str::to_string)
    };
    let error = fixture.assert_refused("backend_remove", json!({ "name": "disk" }), CHANGE_REFUSED, "name");
    assert_eq!(cause(&error).as_deref(), Some("in_use"), "{error:?}");
    let error = fixture.assert_refused("backend_remove", json!({ "name": "nope" }), CHANGE_REFUSED, "name");
    assert_eq!(cause(&error).as_deref(), Some("not_found"), "{error:?}");
    fixture.assert_refused(
        "backend_remove",
        json!({ "name": "spare", "delete_image": true }),
        CHANGE_REFUSED,
        "delete_image",
    );
    let removed = fixture.call("backend_remove", json!({ "name": "spare" })).unwrap();
    assert_eq!(removed["removed"], json!(true));
    assert!(!fixture.file().contains("spare") && fixture.file().contains("name = \"disk\""), "{}", fixture.file());
}

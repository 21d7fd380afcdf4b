//! Parsing, sizes and building the existing kinds of config (inline namespaces).

use nvme_spec::NamespaceId;

use super::*;

#[test]
fn sizes_parse_with_units_and_refuse_nonsense() {
    assert_eq!(parse_byte_size("4096"), Ok(4096));
    assert_eq!(parse_byte_size("1GiB"), Ok(1 << 30));
    assert_eq!(parse_byte_size("512 MiB"), Ok(512 << 20));
    assert_eq!(parse_byte_size("2TB"), Ok(2_000_000_000_000));
    assert!(parse_byte_size("1 parsec").unwrap_err().to_string().contains("unknown unit"));
    assert!(parse_byte_size("GiB").unwrap_err().to_string().contains("must start with a number"));
    assert!(parse_byte_size("99999999999TiB").unwrap_err().to_string().contains("too large"));
}

#[test]
fn config_sizes_follow_the_one_set_of_rules() {
    let size = |text: &str| {
        let config = format!("[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\n[[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"{text}\"\n");
        Config::parse(&config).map(|config| config.subsystems[0].namespaces[0].size.map(|size| size.0))
    };
    // Every spelling the config took before keeps its value...
    assert_eq!(size("1MB"), Ok(Some(1_000_000)));
    assert_eq!(size("1M"), Ok(Some(1 << 20)));
    assert_eq!(size("1MiB"), Ok(Some(1 << 20)));
    // ...and the spellings the command line took mean the same here now.
    assert_eq!(size("4k"), Ok(Some(4096)));
    assert_eq!(size("1mb"), Ok(Some(1_000_000)));
    assert_eq!(size("0x1000"), Ok(Some(4096)));
    let error = size("1.5GiB").unwrap_err();
    assert!(error.contains("write 1536MiB"), "{error}");
}

#[test]
fn a_full_config_parses_and_builds() {
    let config = Config::parse(
        r#"
        [[listener]]
        address = "127.0.0.1:4420"
        [[listener]]
        address = "127.0.0.1:8009"
        discovery_only = true
        [[subsystem]]
        nqn = "nqn.2026-11.io.sluice:a"
        [[subsystem.namespace]]
        backend = "ram"
        size = "64MiB"
        [[subsystem.namespace]]
        backend = "null"
        size = 1048576
        block_size = 4096
        [runtime]
        threads = 1
        poll_mode = "busy-poll"
        "#,
    )
    .unwrap();
    assert_eq!(config.runtime.poll_mode, PollModeConfig::BusyPoll);
    let spec = config.target_spec().unwrap();
    assert_eq!(spec.listeners.len(), 2);
    assert!(spec.listeners[1].discovery_only);
    let namespaces = &spec.subsystems[0].namespaces;
    assert_eq!(namespaces[0].id, NamespaceId(1));
    assert_eq!(namespaces[1].id, NamespaceId(2));
    assert_eq!(namespaces[1].backend.geometry().block_count, 256);
}

#[test]
fn file_namespaces_need_a_path_and_create_the_file() {
    let directory = std::env::temp_dir().join(format!("sluice-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let file = directory.join("ns1.img");
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:f\"\n\
         [[subsystem.namespace]]\nbackend = \"file\"\npath = {:?}\nsize = \"8MiB\"\ndirect_io = false\n",
        file
    );
    let spec = Config::parse(&text).unwrap().target_spec().unwrap();
    let backend = &spec.subsystems[0].namespaces[0].backend;
    assert_eq!(backend.kind(), "file");
    assert_eq!(backend.geometry().capacity_bytes(), 8 << 20);
    assert!(backend.has_volatile_write_cache());
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 8 << 20);

    let missing_path = text.replace(&format!("path = {:?}\n", file), "");
    let error = Config::parse(&missing_path).unwrap().target_spec().err().unwrap().to_string();
    assert!(error.contains("namespace[0].path"), "{error}");
    let ram_with_path = text.replace("backend = \"file\"", "backend = \"ram\"");
    let error = Config::parse(&ram_with_path).unwrap().target_spec().err().unwrap().to_string();
    assert!(error.contains("only apply"), "{error}");
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn hosts_and_secrets_build_the_allow_list() {
    let secret = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\n\
         [[subsystem.host]]\nnqn = \"nqn.2014-08.org.example:h1\"\ndhchap_secret = \"{secret}\"\n\
         dhchap_ctrl_secret = \"{secret}\"\n[[subsystem.host]]\nnqn = \"nqn.2014-08.org.example:h2\"\n"
    );
    let config = Config::parse(&text).unwrap();
    assert!(!format!("{config:?}").contains("AAEC"), "Debug shows no secret");
    let spec = config.target_spec().unwrap();
    let hosts = &spec.subsystems[0].hosts;
    assert!(!hosts.allow_any_host, "listing hosts makes the list exclusive");
    assert!(hosts.allows("nqn.2014-08.org.example:h2") && !hosts.allows("nqn.2014-08.org.example:h3"));
    assert!(hosts.entry("nqn.2014-08.org.example:h1").unwrap().dhchap_secret.is_some());
    let bad = text.replace("KfiaR:", "KfiaS:");
    let error = Config::parse(&bad).unwrap_err();
    assert!(error.contains("CRC") && !error.contains("AAEC"), "{error}");
    let ctrl_only = text.replacen(&format!("dhchap_secret = \"{secret}\"\n"), "", 1);
    let error = Config::parse(&ctrl_only).unwrap().target_spec().err().expect("refused").to_string();
    assert!(error.contains("needs a host secret"), "{error}");
    // The side-effect-free check refuses it too.
    let error = Config::parse(&ctrl_only).unwrap().check().unwrap_err().to_string();
    assert!(error.contains("needs a host secret"), "{error}");
}

#[test]
fn dhchap_hashes_and_groups_choose_what_a_host_may_negotiate() {
    let secret = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\n\
         [[subsystem.host]]\nnqn = \"nqn.2014-08.org.example:h1\"\ndhchap_secret = \"{secret}\"\n\
         dhchap_hashes = [\"sha512\", \"hmac(sha256)\"]\ndhchap_groups = [\"ffdhe4096\", \"null\"]\n\
         [[subsystem.host]]\nnqn = \"nqn.2014-08.org.example:h2\"\ndhchap_secret = \"{secret}\"\n"
    );
    let spec = Config::parse(&text).unwrap().target_spec().unwrap();
    let hosts = &spec.subsystems[0].hosts;
    let chosen = &hosts.entry("nqn.2014-08.org.example:h1").unwrap().dhchap_policy;
    assert_eq!(chosen.hashes, vec![HashFunction::Sha512, HashFunction::Sha256]);
    assert_eq!(chosen.groups, vec![DhGroup::Ffdhe4096, DhGroup::Null]);
    assert_eq!(hosts.entry("nqn.2014-08.org.example:h2").unwrap().dhchap_policy, ControllerPolicy::default());

    let refused = |text: String, expected: &str| {
        let error = Config::parse(&text).unwrap().target_spec().err().expect("refused").to_string();
        assert!(error.contains(expected) && error.contains("nqn.2014-08.org.example:h1"), "{error}");
    };
    refused(text.replace("\"sha512\"", "\"md5\""), "dhchap_hashes: unknown name \"md5\"");
    refused(text.replace("\"null\"]", "\"ffdhe4096\"]"), "dhchap_groups: \"ffdhe4096\" is listed twice");
    refused(text.replace("[\"ffdhe4096\", \"null\"]", "[]"), "at least one choice");
    let no_secret = text.replacen(&format!("dhchap_secret = \"{secret}\"\n"), "", 1);
    refused(no_secret, "need a dhchap_secret");
}

#[test]
fn errors_say_where_and_what() {
    let error = Config::parse("[[listener]]\naddres = \"x\"\n").unwrap_err();
    assert!(error.contains("line 2"), "{error}");
    assert!(error.contains("addres"), "{error}");

    let mut config = Config::embedded_default();
    config.subsystems[0].namespaces[0].size = Some(ByteSize(1000));
    let error = config.target_spec().err().unwrap().to_string();
    assert!(error.contains("subsystem[0]") && error.contains("namespace[0].size"), "{error}");

    let mut config = Config::embedded_default();
    config.listeners[0].address = "localhost".into();
    let error = config.target_spec().err().unwrap().to_string();
    assert!(error.contains("listener[0].address"), "{error}");
}

#[test]
fn an_unreachable_rbd_backend_is_left_out_at_start_and_everything_else_is_served() {
    // No cluster answers at this ceph.conf (it does not exist), so the rbd entry fails
    // to open whether or not librbd is installed; the RAM namespaces and the subsystem
    // without RBD are still served, and the cache tier built on the image is left out.
    let config = Config::parse(
        r#"
        [[listener]]
        address = "127.0.0.1:4420"
        [[backend]]
        name = "vol"
        kind = "rbd"
        pool = "rbd"
        image = "vol1"
        ceph_conf = "/nonexistent/sluice-test/ceph.conf"
        [[backend]]
        name = "fast"
        kind = "ram"
        size = "8MiB"
        [[backend]]
        name = "tiered"
        kind = "cache"
        fast = "fast"
        slow = "vol"
        mode = "write-through"
        [[subsystem]]
        nqn = "nqn.2026-11.io.sluice:mixed"
        [[subsystem.namespace]]
        backend = "ram"
        size = "8MiB"
        [[subsystem.namespace]]
        device = "tiered"
        [[subsystem]]
        nqn = "nqn.2026-11.io.sluice:plain"
        [[subsystem.namespace]]
        backend = "ram"
        size = "8MiB"
        "#,
    )
    .unwrap();
    let (spec, open) = config.open().expect("serve starts without the cluster");
    assert_eq!(spec.subsystems.len(), 2);
    assert_eq!(spec.subsystems[0].namespaces.len(), 1, "only the RAM namespace of the mixed subsystem");
    assert_eq!(spec.subsystems[0].namespaces[0].id, NamespaceId(1));
    assert_eq!(spec.subsystems[1].namespaces.len(), 1);
    assert!(open.backend("vol").is_none() && open.backend("tiered").is_none());

    // The management API's builds (and config check) fail instead, naming the entry.
    let error = config.build_with(&OpenStorage::default()).err().expect("no cluster").to_string();
    assert!(error.contains("\"vol\" (rbd)"), "{error}");
}

#[test]
fn parse_errors_never_show_keys() {
    let key = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrA:"; // CRC broken
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"nqn.a\"\n[[subsystem.host]]\nnqn = \"nqn.h\"\ntls_key = \"{key}\"\n"
    );
    let error = Config::parse(&text).expect_err("bad CRC");
    assert!(!error.contains("VRLbtnN9"), "{error}");
    assert!(error.contains("CRC"), "{error}");
    // A mistyped marker is hidden too, and messages keep their placeholders.
    let typo = text.replace("NVMeTLSkey-1", "NVMeTLSkey1");
    let error = Config::parse(&typo).expect_err("bad format");
    assert!(!error.contains("VRLbtnN9"), "{error}");
    assert!(error.contains("NVMeTLSkey-1:<00|01|02>"), "{error}");
}

#[test]
fn secrets_are_redacted_wherever_they_are_assigned_on_a_line() {
    // A mistyped key carries no marker: only the assignment gives it away.
    let inline = r#"host = { nqn = "h", tls_key_derivation = 1, tls_key = "typo-secret" }"#;
    assert!(!redact_secrets(inline).contains("typo-secret"), "{}", redact_secrets(inline));
    let plain = r#"dhchap_secret = "not-a-dhhc-secret""#;
    assert_eq!(redact_secrets(plain), r#"dhchap_secret = "<redacted>""#);
    // A longer name that merely contains a secret's name is not a secret.
    let derivation = "tls_key_derivation = 1";
    assert_eq!(redact_secrets(derivation), derivation);
    let marked = "key NVMeTLSkey-1:01:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0:";
    assert_eq!(redact_secrets(marked), "key NVMeTLSkey-1:01:<redacted>:");
}

#[test]
fn concat_needs_a_host_secret_and_no_tls_key() {
    let secret = "DHHC-1:01:B46EA9NPfwA9odngcp0p1uBz8sbm6jki4Bcycn2xBlah1I03:";
    let key = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    let with_host = |host: &str| {
        format!(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\ntls = \"optional\"\n[[subsystem]]\nnqn = \"nqn.a\"\n\
             [[subsystem.host]]\nnqn = \"nqn.h\"\n{host}\n"
        )
    };
    let config = Config::parse(&with_host(&format!("dhchap_secret = \"{secret}\"\nconcat = true"))).expect("parses");
    let access = config.subsystems[0].host_access("subsystem \"nqn.a\"").expect("valid");
    assert!(access.hosts[0].concat);
    let config = Config::parse(&with_host("concat = true")).expect("parses");
    let error = config.subsystems[0].host_access("subsystem \"nqn.a\"").expect_err("no secret").to_string();
    assert!(error.contains("concat") && error.contains("dhchap_secret"), "{error}");
    let both = format!("dhchap_secret = \"{secret}\"\ntls_key = \"{key}\"\nconcat = true");
    let config = Config::parse(&with_host(&both)).expect("parses");
    let error = config.subsystems[0].host_access("subsystem \"nqn.a\"").expect_err("tls_key too").to_string();
    assert!(error.contains("remove tls_key"), "{error}");
    assert!(!error.contains("VRLbtnN9") && !error.contains("B46EA9NP"), "{error}");
}

#[test]
fn a_host_secret_may_be_a_reference_to_a_file_only_its_owner_reads() {
    use std::os::unix::fs::PermissionsExt;
    let secret = "DHHC-1:01:B46EA9NPfwA9odngcp0p1uBz8sbm6jki4Bcycn2xBlah1I03:";
    let directory = std::env::temp_dir().join(format!("sluice-secret-file-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join("host1.dhchap");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let with_secret = |value: &str| {
        format!(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"nqn.a\"\n\
             [[subsystem.host]]\nnqn = \"nqn.h\"\ndhchap_secret = \"{value}\"\n"
        )
    };
    let inline = Config::parse(&with_secret(secret)).expect("inline secret");
    let referenced = Config::parse(&with_secret(&format!("file:{}", path.display()))).expect("referenced secret");
    assert_eq!(referenced.subsystems[0].hosts[0].dhchap_secret, inline.subsystems[0].hosts[0].dhchap_secret);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = Config::parse(&with_secret(&format!("file:{}", path.display()))).unwrap_err();
    assert!(error.contains("chmod 600") && !error.contains("B46EA9"), "{error}");
    let missing = Config::parse(&with_secret("file:/nonexistent/sluice-secret")).unwrap_err();
    assert!(missing.contains("/nonexistent/sluice-secret"), "{missing}");
    std::fs::remove_dir_all(&directory).unwrap();
}

/// The discovery log's TRADDR/TRSVCID come from the target's listener table
/// (`ListenerSpec`, crates/nvme-target/src/discovery.rs): with `advertise` it holds
/// the address hosts dial, not the bound one.
#[test]
fn the_discovery_log_announces_the_advertised_address() {
    let text = |advertise: &str| {
        format!(
            "[[listener]]\naddress = \"0.0.0.0:4420\"\n{advertise}\n[[listener]]\naddress = \"127.0.0.1:8009\"\n\
             discovery_only = true\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\n[[subsystem.namespace]]\n\
             backend = \"null\"\nsize = \"1MiB\"\n"
        )
    };
    let spec = Config::parse(&text("advertise = \"10.0.2.2:14420\"")).unwrap().target_spec().unwrap();
    assert_eq!((spec.listeners[0].address.as_str(), spec.listeners[0].port), ("10.0.2.2", 14420));
    // Without it, the bound address.
    assert_eq!((spec.listeners[1].address.as_str(), spec.listeners[1].port), ("127.0.0.1", 8009));
    let target = nvme_target::Target::new(spec).unwrap();
    let announced: Vec<(String, u16)> =
        target.listeners().into_iter().map(|(_, listener)| (listener.address, listener.port)).collect();
    assert_eq!(announced[0], ("10.0.2.2".to_string(), 14420));
    let v6 = Config::parse(&text("advertise = \"[2001:db8::10]:4420\"")).unwrap().target_spec().unwrap();
    assert_eq!(v6.listeners[0].family, nvme_target::AddressFamily::Ipv6);

    for (bad, says) in [
        ("advertise = \"gateway.example:4420\"", "is not IP:port"),
        ("advertise = \"10.0.2.2\"", "is not IP:port"),
        ("advertise = \"0.0.0.0:4420\"", "cannot be dialled"),
        ("advertise = \"10.0.2.2:0\"", "cannot be dialled"),
    ] {
        let error = Config::parse(&text(bad)).unwrap().check().err().map(|error| error.to_string()).unwrap_or_default();
        assert!(error.contains("listener[0].advertise") && error.contains(says), "{bad}: {error}");
    }
}

//! `ns_attach` / `ns_detach`: the file's `hosts` list and the running target's
//! attachment change together; repeats change nothing; the last detach leaves no
//! host, never every host.

use super::*;
use nvme_target::Attachment;

const H1: &str = "nqn.2014-08.io.sluice:host-1";
const H2: &str = "nqn.2014-08.io.sluice:host-2";

const LIMITED: &str = r#"[[listener]]
address = "127.0.0.1:4420"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"

[[subsystem.host]]
nqn = "nqn.2014-08.io.sluice:host-1"

[[subsystem.host]]
nqn = "nqn.2014-08.io.sluice:host-2"

# made ready for no host yet
[[subsystem.namespace]]
backend = "ram"
size = "1MiB"
hosts = []

[[subsystem.namespace]]
backend = "ram"
size = "1MiB"
"#;

fn attachment(fixture: &Fixture, nsid: u32) -> Attachment {
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let table = subsystem.table();
    table.get(NamespaceId(nsid)).unwrap().attachment.clone()
}

fn file_hosts(fixture: &Fixture, nsid: u32) -> Option<Vec<String>> {
    let config = Config::parse(&fixture.file()).unwrap();
    let subsystem = config.subsystems.iter().find(|subsystem| subsystem.nqn == A).unwrap();
    sluice_config::qos::numbered(&subsystem.namespaces)
        .into_iter()
        .find(|(id, _)| *id == nsid)
        .and_then(|(_, namespace)| namespace.hosts.clone())
}

fn change(result: &Value) -> &str {
    result["change"].as_str().unwrap()
}

#[test]
fn attach_and_detach_edit_the_file_and_the_target_and_repeat_harmlessly() {
    let mut fixture = Fixture::new("attach", LIMITED);
    assert_eq!(attachment(&fixture, 1), Attachment::Hosts(Vec::new()), "hosts = [] is no host at start");
    assert_eq!(attachment(&fixture, 2), Attachment::AllHosts);

    let attached = fixture.call("ns_attach", json!({ "nqn": A, "nsid": 1, "host": H1 })).unwrap();
    assert_eq!(change(&attached), "attached");
    assert_eq!(attached["hosts"], json!([H1]));
    assert_eq!(attachment(&fixture, 1), Attachment::Hosts(vec![H1.into()]));
    assert_eq!(file_hosts(&fixture, 1), Some(vec![H1.to_string()]));
    assert!(fixture.file().contains("# made ready for no host yet"), "comments survive");

    // Again: nothing to do, nothing written.
    let before = fixture.file();
    let again = fixture.call("ns_attach", json!({ "nqn": A, "nsid": 1, "host": H1 })).unwrap();
    assert_eq!(change(&again), "unchanged");
    let never_attached = fixture.call("ns_detach", json!({ "nqn": A, "nsid": 1, "host": H2 })).unwrap();
    assert_eq!(change(&never_attached), "unchanged");
    assert_eq!(fixture.file(), before);

    // The last host goes: no host sees it, and the file says so explicitly.
    let detached = fixture.call("ns_detach", json!({ "nqn": A, "nsid": 1, "host": H1 })).unwrap();
    assert_eq!(change(&detached), "detached");
    assert_eq!(attachment(&fixture, 1), Attachment::Hosts(Vec::new()));
    assert_eq!(file_hosts(&fixture, 1), Some(Vec::new()));
    let again = fixture.call("ns_detach", json!({ "nqn": A, "nsid": 1, "host": H1 })).unwrap();
    assert_eq!(change(&again), "unchanged");

    // ns_list shows it: null is every allowed host, [] no host.
    let listed = fixture.call("ns_list", json!({ "nqn": A })).unwrap();
    assert_eq!(listed["namespaces"][0]["hosts"], json!([]));
    assert_eq!(listed["namespaces"][0]["all_hosts"], json!(false));
    assert_eq!(listed["namespaces"][1]["hosts"], Value::Null);
    assert_eq!(listed["namespaces"][1]["all_hosts"], json!(true));
}

#[test]
fn detaching_from_every_host_keeps_the_others_and_attaching_is_already_done() {
    let mut fixture = Fixture::new("attach-all", LIMITED);
    let already = fixture.call("ns_attach", json!({ "nqn": A, "nsid": 2, "host": H1 })).unwrap();
    assert_eq!(change(&already), "unchanged");
    assert_eq!(file_hosts(&fixture, 2), None);
    let detached = fixture.call("ns_detach", json!({ "nqn": A, "nsid": 2, "host": H1 })).unwrap();
    assert_eq!(change(&detached), "detached");
    assert_eq!(attachment(&fixture, 2), Attachment::Hosts(vec![H2.into()]));
    assert_eq!(file_hosts(&fixture, 2), Some(vec![H2.to_string()]));
}

#[test]
fn hosts_the_subsystem_does_not_allow_are_refused_and_attached_hosts_are_not_denied() {
    let mut fixture = Fixture::new("attach-refused", LIMITED);
    let stranger = "nqn.2014-08.io.sluice:stranger";
    fixture.assert_refused("ns_attach", json!({ "nqn": A, "nsid": 1, "host": stranger }), CHANGE_REFUSED, "host");
    fixture.assert_refused("ns_attach", json!({ "nqn": A, "nsid": 9, "host": H1 }), CHANGE_REFUSED, "nsid");
    fixture.assert_refused("ns_attach", json!({ "nqn": A, "nsid": 1 }), INVALID_PARAMS, "host");
    fixture.call("ns_attach", json!({ "nqn": A, "nsid": 1, "host": H1 })).unwrap();
    let error = fixture.assert_refused("host_deny", json!({ "nqn": A, "host": H1 }), CHANGE_REFUSED, "host");
    assert!(error.message.contains("ns detach"), "{error:?}");
    fixture.call("ns_detach", json!({ "nqn": A, "nsid": 1, "host": H1 })).unwrap();
    fixture.call("host_deny", json!({ "nqn": A, "host": H1 })).unwrap();
}

#[test]
fn a_namespace_added_for_no_host_is_seen_by_none_from_the_start() {
    let mut fixture = Fixture::new("attach-add", LIMITED);
    let added = fixture.call("ns_add", json!({ "nqn": A, "backend": "ram", "size": "1MiB", "hosts": [] })).unwrap();
    let nsid = added["nsid"].as_u64().unwrap() as u32;
    assert_eq!(added["hosts"], json!([]));
    assert_eq!(attachment(&fixture, nsid), Attachment::Hosts(Vec::new()));
    assert_eq!(file_hosts(&fixture, nsid), Some(Vec::new()));
    fixture.call("ns_attach", json!({ "nqn": A, "nsid": nsid, "host": H2 })).unwrap();
    assert_eq!(attachment(&fixture, nsid), Attachment::Hosts(vec![H2.into()]));
}

#[test]
fn a_reload_applies_an_edited_hosts_list() {
    let mut fixture = Fixture::new("attach-reload", LIMITED);
    let edited = LIMITED.replacen("hosts = []", &format!("hosts = [\"{H2}\"]"), 1);
    let outcome = fixture.management.reload_text(edited, "test");
    assert_eq!((outcome.applied, outcome.failed, outcome.refused.clone()), (1, 0, None), "{outcome:?}");
    assert_eq!(attachment(&fixture, 1), Attachment::Hosts(vec![H2.into()]));
}

#[test]
fn ns_attach_and_ns_detach_are_changes() {
    assert_eq!(method_effect("ns_attach"), Some(Effect::Changes));
    assert_eq!(method_effect("ns_detach"), Some(Effect::Changes));
}

#[test]
fn a_host_attached_to_a_namespace_it_created_is_not_denied_until_detached() {
    let text = with_ram_pool(LIMITED);
    let mut fixture = Fixture::new("attach-managed", &text);
    // What a host's Namespace Management and Namespace Attachment commands do.
    let subsystem = fixture.target.subsystem_by_nqn(A).unwrap();
    let created = subsystem.create_namespace(1024, true, None).unwrap();
    subsystem.change_attachment(created, &[H1.to_string()], true).unwrap();

    let error = fixture.assert_refused("host_deny", json!({ "nqn": A, "host": H1 }), CHANGE_REFUSED, "host");
    assert!(error.message.contains(&format!("[{}]", created.0)) && error.message.contains("ns detach"), "{error:?}");
    assert_eq!(error.data.as_ref().and_then(|data| data["cause"].as_str()), Some("in_use"));
    // A host the namespace is not attached to is denied as before.
    fixture.call("host_deny", json!({ "nqn": A, "host": H2 })).unwrap();

    let detached = fixture.call("ns_detach", json!({ "nqn": A, "nsid": created.0, "host": H1 })).unwrap();
    assert_eq!(change(&detached), "detached");
    assert_eq!(attachment(&fixture, created.0), Attachment::Hosts(Vec::new()));
    fixture.call("host_deny", json!({ "nqn": A, "host": H1 })).unwrap();
}

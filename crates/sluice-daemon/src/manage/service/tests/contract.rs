//! The typed API (`management_client::api`) against the daemon that answers it: every
//! parameter a request type names is one the method takes (sent alone beside the
//! required ones, it is never refused as unknown), and the answers of a real target
//! read back as the reply types. So a parameter or reply field renamed on one side
//! fails here, before any client (the `sluice` commands, the CSI driver) meets it.

use serde_json::{json, Map, Value};

use super::{StorageFixture as Fixture, STORAGE_FILE as FILE};
use management_client::api::{self, Method, Names, Quantity};

const A: &str = "nqn.2026-11.io.sluice:a";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";

/// A request of every method with its required parameters only, and one with every
/// parameter it can take set.
fn cases() -> Vec<(&'static str, Value, Value)> {
    fn pair<M: Method + Default>(required: M, full: M) -> (&'static str, Value, Value) {
        let json = |request: &M| serde_json::to_value(request).expect("a request serialises");
        (M::NAME, json(&required), json(&full))
    }
    let text = |value: &str| Some(value.to_string());
    vec![
        pair(
            api::SubsystemAdd { nqn: "nqn.2026-11.io.sluice:b".into(), ..Default::default() },
            api::SubsystemAdd {
                nqn: "nqn.2026-11.io.sluice:b".into(),
                serial: text("serial"),
                model: text("model"),
                allow_any_host: Some(true),
            },
        ),
        pair(api::SubsystemRemove { nqn: "nqn.2026-11.io.sluice:none".into() }, Default::default()),
        pair(api::SubsystemList {}, api::SubsystemList {}),
        pair(api::SubsystemShow { nqn: A.into() }, api::SubsystemShow { nqn: A.into() }),
        pair(
            api::NamespaceAdd { nqn: A.into(), ..Default::default() },
            api::NamespaceAdd {
                nqn: A.into(),
                nsid: Some(9),
                backend: text("ram"),
                rbd: text("rbd/image"),
                device: text("spare"),
                pool: text("capacity"),
                thin: Some(true),
                size: Some(Quantity::from_text("1MiB")),
                block_size: Some(512),
                path: text("/nonexistent/file"),
                direct_io: Some(false),
                nguid: text("00000000000000000000000000000009"),
                uuid: text("00000000-0000-0000-0000-000000000009"),
                hosts: Some(Names::List(vec![HOST.into()])),
                clone_from: text("rbd/image@snapshot"),
            },
        ),
        pair(
            api::NamespaceRemove { nqn: A.into(), nsid: 77, ..Default::default() },
            api::NamespaceRemove { nqn: A.into(), nsid: 77, delete_image: Some(true) },
        ),
        pair(api::NamespaceListRequest { nqn: A.into() }, Default::default()),
        pair(
            api::NamespaceQos { nqn: A.into(), nsid: 1, ..Default::default() },
            api::NamespaceQos {
                nqn: A.into(),
                nsid: 1,
                host: text(HOST),
                rw_ios_per_second: Some(Quantity::Number(1000)),
                rw_mbytes_per_second: Some(Quantity::Number(100)),
                r_mbytes_per_second: Some(Quantity::Number(100)),
                w_mbytes_per_second: Some(Quantity::Number(100)),
                burst_ms: Some(Quantity::Number(100)),
                remove: text("all"),
            },
        ),
        pair(api::NamespaceResize { nqn: A.into(), nsid: 1, size: Quantity::from_text("4MiB") }, Default::default()),
        pair(api::NamespaceAttach { nqn: A.into(), nsid: 1, host: HOST.into() }, Default::default()),
        pair(api::NamespaceDetach { nqn: A.into(), nsid: 1, host: HOST.into() }, Default::default()),
        pair(
            api::HostAllow { nqn: A.into(), host: HOST.into(), ..Default::default() },
            api::HostAllow {
                nqn: A.into(),
                host: HOST.into(),
                dhchap_secret: text("DHHC-1:00:bad"),
                dhchap_ctrl_secret: text("DHHC-1:00:bad"),
                dhchap_hashes: Some(Names::List(vec!["sha256".into()])),
                dhchap_groups: Some(Names::CommaSeparated("null".into())),
                tls_key: text("NVMeTLSkey-1:01:bad"),
                tls_key_derivation: text("rfc8446"),
            },
        ),
        pair(api::HostDeny { nqn: A.into(), host: HOST.into() }, Default::default()),
        pair(api::HostListRequest { nqn: A.into() }, Default::default()),
        pair(
            api::ListenerAdd { address: "127.0.0.1:0".into(), ..Default::default() },
            api::ListenerAdd { address: "127.0.0.1:0".into(), discovery_only: Some(true), tls: text("none") },
        ),
        pair(api::ListenerRemove { address: "127.0.0.1:9".into() }, Default::default()),
        pair(api::ListenerList {}, api::ListenerList {}),
        pair(api::ConfigShow {}, api::ConfigShow {}),
        pair(api::RpcMethods {}, api::RpcMethods {}),
        pair(api::ApiVersionRequest {}, api::ApiVersionRequest {}),
        pair(api::TargetShow {}, api::TargetShow {}),
        pair(api::BackendList {}, api::BackendList {}),
        pair(
            api::BackendRemove { name: "nothing".into(), ..Default::default() },
            api::BackendRemove { name: "nothing".into(), delete_image: Some(true) },
        ),
        pair(api::PoolList {}, api::PoolList {}),
        pair(api::LimitsShow {}, api::LimitsShow {}),
        pair(api::GatewayStatus {}, api::GatewayStatus {}),
        pair(
            api::GatewayDrain { gateway: "b".into(), ..Default::default() },
            api::GatewayDrain { gateway: "b".into(), wait: Some(false), timeout_ms: Some(10) },
        ),
        pair(api::GatewayUndrain { gateway: "b".into() }, Default::default()),
        pair(
            api::GatewayMoveAnaGroup { ana_group: 2, to: "b".into(), ..Default::default() },
            api::GatewayMoveAnaGroup { ana_group: 2, to: "b".into(), wait: Some(false), timeout_ms: Some(10) },
        ),
        pair(api::SnapshotCreate { rbd: "rbd/image".into(), snapshot: "s".into() }, Default::default()),
        pair(api::SnapshotRemove { rbd: "rbd/image".into(), snapshot: "s".into() }, Default::default()),
        pair(api::SnapshotListRequest { rbd: "rbd/image".into() }, Default::default()),
    ]
}

#[test]
fn every_parameter_of_every_request_type_is_one_the_method_takes() {
    let cases = cases();
    let names: Vec<&str> = cases.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(names, management_client::methods::method_names(), "a case per method, in the table's order");
    // What the check looks for: a parameter no method takes is refused with it.
    let refused = Fixture::new("contract", FILE).call("listener_list", json!({ "bogus": true }));
    assert!(refused.is_err_and(|error| error.message.contains("unknown parameter")));
    for (method, required, full) in cases {
        let required = required.as_object().cloned().unwrap_or_default();
        let mut sent: Vec<Map<String, Value>> = vec![required.clone()];
        for (key, value) in full.as_object().into_iter().flatten() {
            if !required.contains_key(key) {
                let mut one = required.clone();
                one.insert(key.clone(), value.clone());
                sent.push(one);
            }
        }
        for params in sent {
            // A fresh target each time: a change that succeeds must not decide the next.
            let mut fixture = Fixture::new("contract", FILE);
            if let Err(error) = fixture.call(method, Value::Object(params.clone())) {
                assert!(
                    !error.message.contains("unknown parameter"),
                    "{method} {}: a parameter of the request type is unknown to the daemon: {}",
                    Value::Object(params),
                    error.message
                );
            }
        }
    }
}

/// `method`'s answer to `params`, read as its reply type.
fn answer<M: Method>(fixture: &mut Fixture, request: M) -> M::Reply {
    let params = serde_json::to_value(&request).expect("a request serialises");
    let answer =
        fixture.call(M::NAME, params.clone()).unwrap_or_else(|error| panic!("{} {params}: {error:?}", M::NAME));
    serde_json::from_value(answer.clone())
        .unwrap_or_else(|error| panic!("{}'s answer does not read as its reply type: {error}\n{answer}", M::NAME))
}

#[test]
fn the_daemons_answers_read_back_as_the_reply_types() {
    let mut fixture = Fixture::new("replies", FILE);
    let version = answer(&mut fixture, api::ApiVersionRequest {});
    assert_eq!(version.api_version, management_client::methods::API_VERSION);
    assert_eq!(answer(&mut fixture, api::RpcMethods {}), management_client::methods::method_names());
    let subsystems = answer(&mut fixture, api::SubsystemList {});
    assert_eq!(subsystems.subsystems.iter().map(|subsystem| subsystem.nqn.as_str()).collect::<Vec<_>>(), [A]);

    // A pool carve, so the pool shows its carves.
    let added = answer(
        &mut fixture,
        api::NamespaceAdd {
            nqn: A.into(),
            pool: Some("capacity".into()),
            size: Some(Quantity::from_text("1MiB")),
            thin: Some(true),
            hosts: Some(Names::List(Vec::new())),
            ..Default::default()
        },
    );
    // Written to the file, so the file describes it.
    assert_eq!((added.namespace.source.as_str(), added.copying), ("config", None));
    let listed = answer(&mut fixture, api::NamespaceListRequest { nqn: A.into() });
    assert!(listed.namespaces.iter().any(|namespace| namespace.nsid == added.namespace.nsid));
    let pools = answer(&mut fixture, api::PoolList {});
    let carves = pools.pools.iter().flat_map(|pool| pool.carves.clone().unwrap_or_default()).count();
    assert_eq!(carves, 1, "{pools:?}");
    let backends = answer(&mut fixture, api::BackendList {});
    assert!(backends.backends.iter().any(|backend| backend.name == "disk" && backend.namespace.is_some()));
    let listeners = answer(&mut fixture, api::ListenerList {});
    assert_eq!(listeners.listeners.len(), 1);

    // A carve grows live.
    let nsid = added.namespace.nsid;
    let resized = answer(&mut fixture, api::NamespaceResize { nqn: A.into(), nsid, size: Quantity::from_text("2MiB") });
    assert!(resized.changed && resized.size_bytes == 2 << 20, "{resized:?}");
    let allowed = answer(&mut fixture, api::HostAllow { nqn: A.into(), host: HOST.into(), ..Default::default() });
    assert_eq!(allowed.change, "added");
    let hosts = answer(&mut fixture, api::HostListRequest { nqn: A.into() });
    assert_eq!(hosts.hosts.iter().map(|entry| entry.host.as_str()).collect::<Vec<_>>(), [HOST]);
    // The carve was made for no host: attaching shows it to one, detaching hides it.
    let attached = answer(&mut fixture, api::NamespaceAttach { nqn: A.into(), nsid, host: HOST.into() });
    assert_eq!((attached.change.as_str(), attached.hosts), ("attached", Some(vec![HOST.to_string()])));
    let detached = answer(&mut fixture, api::NamespaceDetach { nqn: A.into(), nsid, host: HOST.into() });
    assert_eq!((detached.change.as_str(), detached.hosts), ("detached", Some(Vec::new())));
    let denied = answer(&mut fixture, api::HostDeny { nqn: A.into(), host: HOST.into() });
    assert_eq!(denied.change, "removed");
    let removed =
        answer(&mut fixture, api::NamespaceRemove { nqn: A.into(), nsid: added.namespace.nsid, ..Default::default() });
    assert!(removed.removed);
    // The reply types of the reads are what the daemon sends, field for field.
    exact(&mut fixture, api::NamespaceListRequest { nqn: A.into() });
    exact(&mut fixture, api::SubsystemList {});
    exact(&mut fixture, api::HostListRequest { nqn: A.into() });
    exact(&mut fixture, api::ListenerList {});
    exact(&mut fixture, api::PoolList {});
    exact(&mut fixture, api::BackendList {});
    exact(&mut fixture, api::ApiVersionRequest {});
}

/// `request`'s typed reply, written back, is the daemon's answer byte for byte.
fn exact<M: Method + Clone>(fixture: &mut Fixture, request: M) {
    let params = serde_json::to_value(&request).expect("a request serialises");
    let sent = fixture.call(M::NAME, params).expect("the read answers");
    let typed = serde_json::to_value(answer(fixture, request)).expect("a reply serialises");
    assert_eq!(typed, sent, "{}'s reply type must name every field of its answer, with its type", M::NAME);
}

//! What a notice to a gateway group costs as the group grows: N watchers (N = 1, 3,
//! 8, 16; 16 is `MAX_GATEWAYS`) on one RADOS object, each on a cluster client of its
//! own as each gateway is, acknowledging every notice in its callback (as a gateway's
//! reservation watcher does once it installed the record); one of them notifies, as
//! the gateway that made a reservation change notifies its own watch too, and waits
//! for every acknowledgement (`RadosObject::notify_watchers`). Prints the median, p99
//! and slowest round trip per N (docs/ARCHITECTURE.md, "Limits of a gateway group"),
//! and for comparison one lock-holder lookup (`RadosObject::lockers`), which a
//! reservation change makes once per member after its notice.
//!
//! A measurement, not a check of behaviour: ignored by the test command. Run it
//! against a cluster with
//! `CEPH_CONF=... cargo test --release -p sluice-gateway --test notify_cost -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use runtime::{ClusterSpec, RadosObject, Watch, WatchEvent, WatchHandler};

/// The pool ceph-single-node.sh creates.
const POOL: &str = "rbd";
/// Group sizes measured.
const SIZES: [usize; 4] = [1, 3, 8, 16];
/// Timed notices per size (after a few untimed ones).
const NOTICES: usize = 500;
const WARM_UP: usize = 10;
/// A reservation record of a few registrants is about this long.
const PAYLOAD_BYTES: usize = 1024;

/// The `p`-th percentile (0..=100) of sorted `samples`, nearest rank.
fn percentile(samples: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[test]
#[ignore = "a measurement against a cluster: run with --ignored --nocapture"]
fn notify_round_trip_to_n_watchers() {
    if std::env::var_os("CEPH_CONF").is_none() {
        assert!(std::env::var_os("SLUICE_REQUIRE_CEPH").is_none(), "SLUICE_REQUIRE_CEPH is set but CEPH_CONF is not");
        eprintln!("skipped: no Ceph cluster (set CEPH_CONF)");
        return;
    }
    let name = format!("sluice-notify-cost-{}", std::process::id());
    let largest = SIZES[SIZES.len() - 1];
    // One connection per (conf, user, op timeout) in the process: a distinct op
    // timeout gives each watcher a client of its own, like separate gateways.
    let clients: Vec<Arc<RadosObject>> = (0..largest as u64)
        .map(|index| {
            let spec = ClusterSpec { ceph_conf: None, client: "admin".to_string(), op_timeout_ms: 30_000 + index };
            Arc::new(RadosObject::open(&spec, POOL, &name).expect("open the object"))
        })
        .collect();
    let ids: std::collections::BTreeSet<u64> = clients.iter().map(|client| client.instance_id()).collect();
    assert_eq!(ids.len(), largest, "one cluster client per watcher");
    clients[0].replace_record("sluice.test", None, b"1", b"record").expect("create the object");
    let payload = vec![0x5Au8; PAYLOAD_BYTES];
    eprintln!(
        "notice of {PAYLOAD_BYTES} B to N watchers (each its own client), all acknowledged; {NOTICES} notices per N"
    );
    eprintln!("| watchers | median ms | p99 ms | slowest ms |");
    eprintln!("| ---: | ---: | ---: | ---: |");
    for size in SIZES {
        let watches: Vec<Watch> = clients[..size]
            .iter()
            .map(|client| {
                let handler: WatchHandler = Box::new(|event| {
                    if let WatchEvent::Notice(_, acknowledgement) = event {
                        acknowledgement.acknowledge();
                    }
                });
                client.watch(handler, Duration::from_secs(10)).expect("watch the object")
            })
            .collect();
        let mut samples = Vec::with_capacity(NOTICES);
        for round in 0..WARM_UP + NOTICES {
            let started = Instant::now();
            let replies = clients[0].notify_watchers(&payload, Duration::from_secs(5)).expect("notify");
            let took = started.elapsed();
            assert!(replies.silent.is_empty(), "a watcher was silent: {replies:?}");
            assert_eq!(replies.acknowledged.len(), size, "every watcher acknowledged: {replies:?}");
            if round >= WARM_UP {
                samples.push(took);
            }
        }
        drop(watches);
        samples.sort();
        eprintln!(
            "| {size} | {:.2} | {:.2} | {:.2} |",
            ms(percentile(&samples, 50.0)),
            ms(percentile(&samples, 99.0)),
            ms(samples[samples.len() - 1])
        );
    }
    let mut lookups = Vec::with_capacity(NOTICES);
    for _ in 0..NOTICES {
        let started = Instant::now();
        clients[0].lockers("member.nobody").expect("lockers");
        lookups.push(started.elapsed());
    }
    lookups.sort();
    eprintln!(
        "one lock-holder lookup (lockers): median {:.2} ms, p99 {:.2} ms",
        ms(percentile(&lookups, 50.0)),
        ms(percentile(&lookups, 99.0))
    );
    drop(clients);
    let _ = std::process::Command::new("rados").args(["-p", POOL, "rm", &name]).status();
}

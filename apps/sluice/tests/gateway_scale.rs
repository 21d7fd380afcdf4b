//! What a gateway group's size costs, measured on the cluster at `CEPH_CONF`: groups of
//! 2, 4, 8 and 16 `sluice serve` gateways (16 is `MAX_GATEWAYS`) exporting one
//! namespace; through gateway a, the latency of a reservation change (read,
//! compare-and-write the record, notify every gateway, wait for each acknowledgement,
//! then look up which members answered) and of a 4 KiB write for comparison. The
//! numbers are in docs/ARCHITECTURE.md ("Limits of a gateway group").
//!
//! A measurement, not a check of behaviour: ignored by the test command. Run it with
//! `CEPH_CONF=... cargo test --release -p sluice --test gateway_scale -- --ignored --nocapture`.

mod support;

use std::time::{Duration, Instant};

use nvme_spec::ana::AnaState;
use nvme_spec::Status;
use support::ceph_cluster_given;
use support::gateway_group::{await_state, connect_as, register, status_of, Group, BLOCK_BYTES, NAMESPACE};

/// Timed commands of each kind per group size.
const COMMANDS: usize = 200;

fn percentile_ms(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1].as_secs_f64() * 1000.0
}

#[test]
#[ignore = "a measurement against a cluster: run with --ignored --nocapture"]
fn reservation_change_latency_by_group_size() {
    if !ceph_cluster_given("gateway group size") {
        return;
    }
    eprintln!("| gateways | reservation change median ms | p99 ms | 4 KiB write median ms |");
    eprintln!("| ---: | ---: | ---: | ---: |");
    for members in [2, 4, 8, 16] {
        let group = Group::with_members(&format!("scale{members}"), members);
        let gateways: Vec<support::ServeProcess> = (0..members).map(|member| group.start(member)).collect();
        for member in 1..members {
            await_state(group.address(member), AnaState::NonOptimized, Duration::from_secs(20));
        }
        await_state(group.address(0), AnaState::Optimized, Duration::from_secs(20));
        let host = connect_as(group.address(0), Some([0x5C; 16]));
        assert_eq!(register(&host, 1), Status::SUCCESS);
        let mut changes = Vec::with_capacity(COMMANDS);
        for key in 2..2 + COMMANDS as u64 {
            let command = nvme_host::commands::reservation_register(NAMESPACE, 2, true, 0, 0, key);
            let started = Instant::now();
            assert_eq!(status_of(host.io_command(command)), Status::SUCCESS);
            changes.push(started.elapsed());
        }
        let block = vec![0x5Cu8; BLOCK_BYTES];
        let mut writes = Vec::with_capacity(COMMANDS);
        for index in 0..COMMANDS as u64 {
            let started = Instant::now();
            host.write(NAMESPACE, index, &block, false).expect("write");
            writes.push(started.elapsed());
        }
        eprintln!(
            "| {members} | {:.2} | {:.2} | {:.2} |",
            percentile_ms(&mut changes, 50.0),
            percentile_ms(&mut changes, 99.0),
            percentile_ms(&mut writes, 50.0)
        );
        drop(host);
        drop(gateways);
    }
}

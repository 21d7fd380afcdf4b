//! The gateway's Prometheus lines (appended to the target's /metrics): membership,
//! ANA states, leases, fences, drains, balancing moves, each owned group's load and
//! the path change histograms.

use std::fmt::Write;

use crate::service::GatewayStatus;
use crate::timeline::{Histogram, HISTOGRAM_BUCKETS_SECONDS};

/// Prometheus lines of the gateway state (appended to /metrics).
pub fn render_metrics(status: &GatewayStatus) -> String {
    let mut out = String::new();
    let labels = format!("group=\"{}\",gateway=\"{}\"", status.group, status.name);
    let _ = writeln!(out, "# HELP sluice_gateway_fenced 1 when another gateway fenced (blocklisted) this one.");
    let _ = writeln!(out, "# TYPE sluice_gateway_fenced gauge");
    let _ = writeln!(out, "sluice_gateway_fenced{{{labels}}} {}", u8::from(status.phase == "fenced"));
    let _ = writeln!(out, "# HELP sluice_gateway_cluster_lost 1 while leases cannot be renewed (groups inaccessible).");
    let _ = writeln!(out, "# TYPE sluice_gateway_cluster_lost gauge");
    let _ = writeln!(out, "sluice_gateway_cluster_lost{{{labels}}} {}", u8::from(status.phase == "cluster-lost"));
    let _ = writeln!(out, "# HELP sluice_gateway_member_alive 1 when the member renews its membership lease.");
    let _ = writeln!(out, "# TYPE sluice_gateway_member_alive gauge");
    for member in &status.members {
        let _ = writeln!(
            out,
            "sluice_gateway_member_alive{{{labels},member=\"{}\"}} {}",
            member.name,
            u8::from(member.alive)
        );
    }
    let _ = writeln!(
        out,
        "# HELP sluice_gateway_ana_group_optimized 1 when this gateway reports the ANA group optimized (owns it)."
    );
    let _ = writeln!(out, "# TYPE sluice_gateway_ana_group_optimized gauge");
    for group in &status.ana_groups {
        let _ = writeln!(
            out,
            "sluice_gateway_ana_group_optimized{{{labels},ana_group=\"{}\",state=\"{}\"}} {}",
            group.ana_group,
            group.state,
            u8::from(group.state == "optimized")
        );
    }
    for (name, help, value) in [
        ("sluice_gateway_takeovers_total", "ANA groups this gateway took ownership of.", status.takeovers),
        ("sluice_gateway_releases_total", "ANA groups this gateway gave back or lost.", status.releases),
        (
            "sluice_gateway_fenced_peers_total",
            "Previous owners this gateway fenced before a takeover.",
            status.fenced_peers,
        ),
        (
            "sluice_gateway_rejoins_total",
            "Times this gateway rejoined its group with a new cluster client after being fenced.",
            status.rejoins,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {value}");
    }
    if let Some((version, pending)) = status.config_versions {
        let _ = writeln!(
            out,
            "# HELP sluice_gateway_config_version The group configuration version (in the cluster) this gateway runs."
        );
        let _ = writeln!(
            out,
            "# TYPE sluice_gateway_config_version gauge\nsluice_gateway_config_version{{{labels}}} {version}"
        );
        let _ = writeln!(out, "# HELP sluice_gateway_config_pending 1 while a newer group configuration version could not be applied here (see the log).");
        let _ = writeln!(
            out,
            "# TYPE sluice_gateway_config_pending gauge\nsluice_gateway_config_pending{{{labels}}} {}",
            u8::from(pending.is_some())
        );
    }
    if let Some(ms) = status.last_takeover_ms {
        let _ = writeln!(out, "# HELP sluice_gateway_last_takeover_seconds Time an ANA group was ownerless before this gateway's last takeover.");
        let _ = writeln!(out, "# TYPE sluice_gateway_last_takeover_seconds gauge");
        let _ = writeln!(out, "sluice_gateway_last_takeover_seconds{{{labels}}} {:.3}", ms as f64 / 1000.0);
    }
    render_placement(&mut out, status, &labels);
    out
}

/// Drains, handovers, balancing, owned groups' load and the path change histograms.
fn render_placement(out: &mut String, status: &GatewayStatus, labels: &str) {
    let _ = writeln!(
        out,
        "# HELP sluice_gateway_member_drained 1 when the member is drained (out of service, listeners kept)."
    );
    let _ = writeln!(out, "# TYPE sluice_gateway_member_drained gauge");
    for member in &status.members {
        let _ = writeln!(
            out,
            "sluice_gateway_member_drained{{{labels},member=\"{}\"}} {}",
            member.name,
            u8::from(member.drained)
        );
    }
    let _ =
        writeln!(out, "# HELP sluice_gateway_handovers_total ANA groups this gateway handed over to another member.");
    let _ = writeln!(
        out,
        "# TYPE sluice_gateway_handovers_total counter\nsluice_gateway_handovers_total{{{labels}}} {}",
        status.handovers
    );
    let rebalance = &status.rebalance;
    let _ =
        writeln!(out, "# HELP sluice_gateway_rebalance_leader 1 when this gateway runs the group's balancing passes.");
    let _ = writeln!(
        out,
        "# TYPE sluice_gateway_rebalance_leader gauge\nsluice_gateway_rebalance_leader{{{labels},mode=\"{}\"}} {}",
        rebalance.mode,
        u8::from(rebalance.leader)
    );
    let _ = writeln!(
        out,
        "# HELP sluice_gateway_rebalance_moves_total ANA groups moved by this gateway's balancing passes."
    );
    let _ = writeln!(
        out,
        "# TYPE sluice_gateway_rebalance_moves_total counter\nsluice_gateway_rebalance_moves_total{{{labels}}} {}",
        rebalance.moves_total
    );
    let _ = writeln!(out, "# HELP sluice_gateway_member_load The load measure of each member at the leader's last pass (load units per second, or groups in count mode).");
    let _ = writeln!(out, "# TYPE sluice_gateway_member_load gauge");
    for member in &rebalance.totals {
        let _ = writeln!(out, "sluice_gateway_member_load{{{labels},member=\"{}\"}} {:.1}", member.name, member.load);
    }
    let _ = writeln!(out, "# HELP sluice_gateway_ana_group_load The load measure of an ANA group this gateway owns, over the last load window (load units per second).");
    let _ = writeln!(out, "# TYPE sluice_gateway_ana_group_load gauge");
    for group in &status.ana_groups {
        if let Some(load) = group.load {
            let _ =
                writeln!(out, "sluice_gateway_ana_group_load{{{labels},ana_group=\"{}\"}} {load:.1}", group.ana_group);
        }
    }
    if let Some(busy) = status.io_threads_busy_percent {
        let _ = writeln!(out, "# HELP sluice_gateway_io_threads_busy_percent Busy time of the I/O threads over the last load window (percent of one thread).");
        let _ = writeln!(out, "# TYPE sluice_gateway_io_threads_busy_percent gauge\nsluice_gateway_io_threads_busy_percent{{{labels}}} {busy:.1}");
    }
    let _ = writeln!(
        out,
        "# HELP sluice_gateway_path_changes_total Path changes this gateway completed as the new owner, by kind."
    );
    let _ = writeln!(out, "# TYPE sluice_gateway_path_changes_total counter");
    for (kind, count) in &status.histograms.counts {
        let _ = writeln!(out, "sluice_gateway_path_changes_total{{{labels},kind=\"{}\"}} {count}", kind.name());
    }
    for (name, help, list) in [
        (
            "sluice_gateway_path_change_without_optimized_seconds",
            "Time an ANA group had no optimized path during a change this gateway completed.",
            &status.histograms.without_optimized,
        ),
        (
            "sluice_gateway_path_change_last_host_seconds",
            "Time from a change's start to the last host controller's first command on this gateway.",
            &status.histograms.to_last_first_command,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (kind, histogram) in list {
            render_histogram(out, name, &format!("{labels},kind=\"{}\"", kind.name()), histogram);
        }
    }
}

fn render_histogram(out: &mut String, name: &str, labels: &str, histogram: &Histogram) {
    for (bound, count) in HISTOGRAM_BUCKETS_SECONDS.iter().zip(histogram.buckets) {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", histogram.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {:.3}", histogram.sum_seconds);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", histogram.count);
}

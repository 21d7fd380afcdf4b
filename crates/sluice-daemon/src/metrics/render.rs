//! The Prometheus text exposition of a running target: per subsystem, namespace and
//! controller counters, latency histograms and gauges. Pure: a target in, text out.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use nvme_target::error_class::ErrorClass;
use nvme_target::stats::{
    ConnectRefusalReason, HistogramSnapshot, IoPhase, ReservationChange, StatsSnapshot, TargetCounters, LATENCY_BUCKETS,
};
use nvme_target::Target;

/// Renders every metric. Label values are NQNs (printable ASCII, checked at
/// Connect and in the config) but are escaped anyway.
pub fn render(target: &Target) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let subsystems = target.subsystems();
    header(&mut out, "sluice_discovery_generation", "gauge", "GENCTR of the discovery log.");
    let _ = writeln!(out, "sluice_discovery_generation {}", target.discovery_generation());

    target_counters(&mut out, &target.counters);
    super::process::render(&mut out, target);

    header(&mut out, "sluice_subsystem_namespaces", "gauge", "Allocated namespaces per subsystem.");
    for subsystem in &subsystems {
        let _ = writeln!(
            out,
            "sluice_subsystem_namespaces{{subsystem=\"{}\"}} {}",
            escape(&subsystem.nqn),
            subsystem.namespace_ids().len()
        );
    }
    header(&mut out, "sluice_subsystem_controllers", "gauge", "Live controllers per subsystem.");
    for subsystem in &subsystems {
        let controllers = target.controllers_of(subsystem.index).len();
        let _ = writeln!(out, "sluice_subsystem_controllers{{subsystem=\"{}\"}} {controllers}", escape(&subsystem.nqn));
    }
    header(&mut out, "sluice_controller_io_queues", "gauge", "Connected I/O queues per controller.");
    for subsystem in &subsystems {
        for controller in target.controllers_of(subsystem.index) {
            let queues = controller.state().connected_io_queues.count_ones();
            let _ = writeln!(
                out,
                "sluice_controller_io_queues{{subsystem=\"{}\",cntlid=\"{}\",host=\"{}\"}} {queues}",
                escape(&subsystem.nqn),
                controller.id.0,
                escape(&controller.host_nqn)
            );
        }
    }

    let mut subsystem_rows = Vec::new();
    let mut namespace_rows = Vec::new();
    let mut capacity_rows = Vec::new();
    for subsystem in &subsystems {
        let subsystem_label = format!("subsystem=\"{}\"", escape(&subsystem.nqn));
        subsystem_rows.push((subsystem_label.clone(), subsystem.stats.snapshot()));
        for entry in subsystem.table().entries() {
            let namespace = &entry.namespace;
            let labels = format!("{subsystem_label},nsid=\"{}\"", namespace.id.0);
            capacity_rows.push((
                labels.clone(),
                namespace.geometry().capacity_bytes(),
                namespace.utilization_blocks() * u64::from(namespace.geometry().block_size_bytes),
            ));
            namespace_rows.push((labels, namespace.stats.snapshot()));
        }
    }
    header(&mut out, "sluice_namespace_capacity_bytes", "gauge", "Namespace size (NSZE) in bytes.");
    for (labels, capacity, _) in &capacity_rows {
        let _ = writeln!(out, "sluice_namespace_capacity_bytes{{{labels}}} {capacity}");
    }
    header(
        &mut out,
        "sluice_namespace_used_bytes",
        "gauge",
        "Bytes holding space (NUSE); below capacity for thin namespaces.",
    );
    for (labels, _, used) in &capacity_rows {
        let _ = writeln!(out, "sluice_namespace_used_bytes{{{labels}}} {used}");
    }
    qos(&mut out, &subsystems);
    let mut controller_rows = Vec::new();
    for subsystem in &subsystems {
        for controller in target.controllers_of(subsystem.index) {
            let labels = format!(
                "subsystem=\"{}\",cntlid=\"{}\",host=\"{}\"",
                escape(&subsystem.nqn),
                controller.id.0,
                escape(&controller.host_nqn)
            );
            controller_rows.push((labels, controller.stats.snapshot()));
        }
    }
    counters(&mut out, "sluice_subsystem", &subsystem_rows, Scope::Subsystem);
    counters(&mut out, "sluice_namespace", &namespace_rows, Scope::Namespace);
    counters(&mut out, "sluice_controller", &controller_rows, Scope::Controller);
    out
}

/// QoS: the limits in force and what throttling cost, per namespace (every host's
/// commands together, whichever limit held them) and per host that has limits.
fn qos(out: &mut String, subsystems: &[std::sync::Arc<nvme_target::Subsystem>]) {
    let mut limits = Vec::new();
    let mut namespaces = Vec::new();
    let mut hosts = Vec::new();
    for subsystem in subsystems {
        for entry in subsystem.table().entries() {
            let namespace = &entry.namespace;
            let labels = format!("subsystem=\"{}\",nsid=\"{}\"", escape(&subsystem.nqn), namespace.id.0);
            let configured = namespace.qos.namespace.limits();
            for (key, value) in rates(&configured) {
                limits.push((format!("{labels},host=\"\",limit=\"{key}\""), value));
            }
            namespaces.push((labels.clone(), namespace.qos.namespace.throttled()));
            for (host, host_limits) in namespace.qos.host_limits() {
                let host_labels = format!("{labels},host=\"{}\"", escape(&host));
                for (key, value) in rates(&host_limits) {
                    limits.push((format!("{host_labels},limit=\"{key}\""), value));
                }
                hosts.push((host_labels, namespace.qos.for_host(&host).throttled()));
            }
        }
    }
    header(
        out,
        "sluice_qos_limit",
        "gauge",
        "QoS limits in force (commands or MiB per second; host empty: all hosts together).",
    );
    for (labels, value) in &limits {
        let _ = writeln!(out, "sluice_qos_limit{{{labels}}} {value}");
    }
    header(out, "sluice_qos_throttled_commands_total", "counter", "I/O commands a QoS limit delayed, per namespace.");
    for (labels, (commands, _)) in &namespaces {
        let _ = writeln!(out, "sluice_qos_throttled_commands_total{{{labels}}} {commands}");
    }
    header(
        out,
        "sluice_qos_throttled_seconds_total",
        "counter",
        "Time I/O commands waited for QoS limits, summed, per namespace.",
    );
    for (labels, (_, seconds)) in &namespaces {
        let _ = writeln!(out, "sluice_qos_throttled_seconds_total{{{labels}}} {seconds}");
    }
    header(
        out,
        "sluice_qos_host_throttled_commands_total",
        "counter",
        "I/O commands of a host with its own limits that waited.",
    );
    for (labels, (commands, _)) in &hosts {
        let _ = writeln!(out, "sluice_qos_host_throttled_commands_total{{{labels}}} {commands}");
    }
}

/// The rates a limits set holds, by config key.
fn rates(limits: &nvme_target::qos::QosLimits) -> Vec<(&'static str, u64)> {
    [
        ("rw_ios_per_second", limits.rw_ios_per_second),
        ("rw_mbytes_per_second", limits.rw_mbytes_per_second),
        ("r_mbytes_per_second", limits.r_mbytes_per_second),
        ("w_mbytes_per_second", limits.w_mbytes_per_second),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|value| (key, value)))
    .collect()
}

/// Connections, refusals and why connections ended, for the whole target.
fn target_counters(out: &mut String, counters: &TargetCounters) {
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let simple: [(&str, &str, &str, &AtomicU64); 8] = [
        ("sluice_connections_accepted_total", "counter", "TCP connections accepted.", &counters.connections_accepted),
        ("sluice_connections_open", "gauge", "TCP connections open now.", &counters.connections_open),
        ("sluice_setup_timeouts_total", "counter", "Connections closed without ICReq and Connect in time (connection_setup_timeout_ms).", &counters.setup_timeouts),
        ("sluice_keep_alive_timeouts_total", "counter", "Controllers torn down because the host's keep-alive stopped.", &counters.keep_alive_timeouts),
        ("sluice_transport_errors_total", "counter", "Connections ended with a C2HTermReq (broken PDU stream).", &counters.transport_errors),
        ("sluice_quiesce_timeouts_total", "counter", "Storage requests of a dead connection still in flight after command_quiesce_timeout_ms.", &counters.quiesce_timeouts),
        ("sluice_fence_timeouts_total", "counter", "Preempt and Abort answered while the preempted hosts' writes were still at storage after command_quiesce_timeout_ms.", &counters.fence_timeouts),
        ("sluice_authentication_failures_total", "counter", "DH-HMAC-CHAP transactions failed or timed out.", &counters.authentication_failures),
    ];
    for (metric, kind, help, counter) in simple {
        header(out, metric, kind, help);
        let _ = writeln!(out, "{metric} {}", load(counter));
    }
    header(
        out,
        "sluice_authentication_successes_total",
        "counter",
        "DH-HMAC-CHAP transactions that succeeded (one per queue).",
    );
    let _ = writeln!(out, "sluice_authentication_successes_total {}", load(&counters.authentication_successes));
    header(out, "sluice_connect_refusals_total", "counter", "Connect commands refused, by reason.");
    for reason in ConnectRefusalReason::ALL {
        let _ = writeln!(
            out,
            "sluice_connect_refusals_total{{reason=\"{}\"}} {}",
            reason.label(),
            counters.refusals(reason)
        );
    }
}

/// Which rows a counter family is rendered for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Subsystem,
    Namespace,
    Controller,
}

/// Reads one counter out of a snapshot.
type CounterOf = fn(&StatsSnapshot) -> u64;
/// Reads one histogram out of a snapshot.
type HistogramOf = fn(&StatsSnapshot) -> HistogramSnapshot;

fn counters(out: &mut String, prefix: &str, rows: &[(String, StatsSnapshot)], scope: Scope) {
    let simple: [(&str, &str, CounterOf); 9] = [
        ("read_commands_total", "Reads and compares completed successfully.", |s| s.read_commands),
        ("write_commands_total", "Writes completed successfully.", |s| s.write_commands),
        ("other_commands_total", "Flush, Write Zeroes and Dataset Management completed successfully.", |s| {
            s.other_commands
        }),
        ("read_bytes_total", "Bytes read.", |s| s.bytes_read),
        ("written_bytes_total", "Bytes written.", |s| s.bytes_written),
        ("errors_total", "Commands the storage failed.", |s| s.media_errors),
        ("error_completions_total", "Commands completed with any error status (admin and I/O).", |s| {
            s.error_completions
        }),
        ("outstanding_commands", "I/O commands received and not yet completed (queue depth in use).", |s| {
            s.outstanding_commands
        }),
        ("queues", "Queues counting into these totals now.", |s| s.live_queues),
    ];
    for (name, help, value) in simple {
        // Namespace shards count I/O only: errors of other kinds and queue depth
        // belong to the queue, so to the subsystem and the controller.
        let queue_only = matches!(name, "error_completions_total" | "outstanding_commands");
        if scope == Scope::Namespace && queue_only {
            continue;
        }
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let metric = format!("{prefix}_{name}");
        header(out, &metric, kind, help);
        for (labels, snapshot) in rows {
            let _ = writeln!(out, "{metric}{{{labels}}} {}", value(snapshot));
        }
    }
    // Where the time of reads and writes goes (IoPhase), per subsystem, namespace and
    // host: divided by the commands, the mean split per command.
    let metric = format!("{prefix}_io_phase_seconds_total");
    header(
        out,
        &metric,
        "counter",
        "Time reads and writes spent per phase: receive (receipt to the storage request, host data in), qos (held by a limit), storage, send (storage completion to the response sent).",
    );
    for (labels, snapshot) in rows {
        for phase in IoPhase::ALL {
            let seconds = snapshot.phase(phase) as f64 / 1e6;
            let _ = writeln!(out, "{metric}{{{labels},phase=\"{}\"}} {seconds}", phase.label());
        }
    }
    if scope == Scope::Subsystem {
        // Per-phase percentiles: subsystems only (see nvme_target::stats::PhaseHistograms).
        let metric = format!("{prefix}_io_phase_latency_seconds");
        header(out, &metric, "histogram", "Time each read or write spent per phase (see io_phase_seconds_total).");
        for (labels, snapshot) in rows {
            for phase in IoPhase::ALL {
                histogram(
                    out,
                    &metric,
                    &format!("{labels},phase=\"{}\"", phase.label()),
                    &snapshot.phase_histogram(phase),
                );
            }
        }
    }
    if scope != Scope::Namespace {
        // Counted on queue shards only (nvme_target::stats::QueueOnlyCounters).
        let metric = format!("{prefix}_error_completions_by_class_total");
        header(
            out,
            &metric,
            "counter",
            "Error completions by class of status (invalid_command, out_of_range, reservation_conflict, compare_failure, media, path, aborted, not_ready, command_specific, other).",
        );
        for (labels, snapshot) in rows {
            for (class, count) in ErrorClass::ALL.iter().zip(snapshot.errors_by_class) {
                let _ = writeln!(out, "{metric}{{{labels},class=\"{}\"}} {count}", class.label());
            }
        }
        let metric = format!("{prefix}_reservation_changes_total");
        header(out, &metric, "counter", "Reservation Register, Acquire and Release commands that succeeded.");
        for (labels, snapshot) in rows {
            for (kind, count) in ReservationChange::ALL.iter().zip(snapshot.reservation_changes) {
                let _ = writeln!(out, "{metric}{{{labels},kind=\"{}\"}} {count}", kind.label());
            }
        }
    }
    if scope == Scope::Controller {
        // Per-controller latency histograms would multiply the series by the hosts;
        // the subsystem's and namespaces' cover latency.
        return;
    }
    for (name, help, pick) in [
        (
            "read_latency_seconds",
            "Capsule receipt to completion, reads.",
            (|s: &StatsSnapshot| s.read_latency) as HistogramOf,
        ),
        ("write_latency_seconds", "Capsule receipt to completion, writes.", |s: &StatsSnapshot| s.write_latency),
    ] {
        let metric = format!("{prefix}_{name}");
        header(out, &metric, "histogram", help);
        for (labels, snapshot) in rows {
            histogram(out, &metric, labels, &pick(snapshot));
        }
    }
}

fn histogram(out: &mut String, metric: &str, labels: &str, histogram: &HistogramSnapshot) {
    let mut cumulative = 0;
    for (index, count) in histogram.buckets.iter().enumerate() {
        cumulative += count;
        if index == LATENCY_BUCKETS - 1 {
            break;
        }
        let bound_seconds = HistogramSnapshot::bucket_upper_bound_microseconds(index) as f64 / 1e6;
        let _ = writeln!(out, "{metric}_bucket{{{labels},le=\"{bound_seconds}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{metric}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(out, "{metric}_sum{{{labels}}} {}", histogram.sum_microseconds as f64 / 1e6);
    let _ = writeln!(out, "{metric}_count{{{labels}}} {cumulative}");
}

pub(super) fn header(out: &mut String, metric: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {metric} {help}");
    let _ = writeln!(out, "# TYPE {metric} {kind}");
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

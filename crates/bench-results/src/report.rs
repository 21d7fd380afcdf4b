//! The self-contained HTML report: inline CSS and SVG only (no scripts, no network), so
//! the file can be mailed, archived or opened from a CI artifact as is.
//!
//! Per result: a header (suite, driver, machine, target, ceilings, notes, a warning when
//! the result is partial), preconditioning rounds with the steady-state window, a table of
//! runs, where the embedded target's time went (runs with `target_phases_us`), and per
//! group of runs: IOPS and mean latency versus threads x queue depth,
//! latency versus load level, percentile curves and time series. With several results,
//! a comparison table aligns runs by name and shows the change against the first result
//! (and the target's split of the runs that have one in two or more results).

use crate::phases::{short, TargetPhases, PHASE_NAMES};
use crate::result::{BenchResult, RunResult};
use crate::svg::{esc, si, Plot, Scale, Series, StackedBars};
use std::fmt::Write;

const CSS: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:14px;color:#1b1b1b;background:#fafafa}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 8px;border-bottom:2px solid #0072b2;padding-bottom:3px}
h3{font-size:15px;margin:18px 0 6px}
section.result{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 12px;margin:14px 0}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d6d6d6;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#eef3f8;text-align:center}td.l,th.l{text-align:left}
table.kv td{text-align:left}table.kv td:first-child{font-weight:600;background:#f6f6f6}
.warn{background:#fff3cd;border:1px solid #e0b84d;color:#6b4e00;padding:6px 10px;border-radius:4px;margin:8px 0}
.flag{color:#b00020;font-weight:600}.up{color:#00734d}.down{color:#b00020}.muted{color:#777}
.plots{display:flex;flex-wrap:wrap;gap:12px}td.sched{white-space:normal;min-width:30em;max-width:44em;text-align:left}.scroll{overflow-x:auto;max-width:100%}table.runs{font-size:12px}table.runs td,table.runs th{padding:2px 5px}
svg.plot{border:1px solid #e2e2e2;border-radius:4px;background:#fff}
svg .pt{font:600 13px sans-serif}svg .tk{font:10px sans-serif;fill:#444}svg .al{font:11px sans-serif;fill:#222}svg .lg{font:10.5px sans-serif;fill:#222}
"#;

/// Renders results (label, e.g. the JSON file name; result) into one self-contained HTML
/// file. Works for any number of results and runs, including none.
pub fn render_html(results: &[(String, BenchResult)]) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let title = match results {
        [] => "Sluice benchmark report".to_string(),
        [(label, r)] => format!("Sluice benchmark: {} ({})", r.suite, label),
        _ => format!("Sluice benchmark comparison: {} results", results.len()),
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><meta name=\"generator\" content=\"sluice bench-results {}\"><title>{}</title><style>{CSS}</style></head><body>\n<h1>{}</h1>\n",
        env!("CARGO_PKG_VERSION"),
        esc(&title),
        esc(&title)
    );
    if results.is_empty() {
        h.push_str("<p class=\"muted\">No results given.</p>");
    }
    if results.len() > 1 {
        comparison(&mut h, results);
    }
    for (i, (label, r)) in results.iter().enumerate() {
        result_section(&mut h, i, label, r);
    }
    h.push_str("\n</body></html>\n");
    h
}

fn result_section(h: &mut String, index: usize, label: &str, r: &BenchResult) {
    let _ = write!(
        h,
        "<section class=\"result\" id=\"result-{index}\"><h2>{} &mdash; suite <em>{}</em>, driver <em>{}</em></h2>",
        esc(label),
        esc(&r.suite),
        esc(&r.driver)
    );
    if r.partial {
        h.push_str("<div class=\"warn\"><b>Partial result:</b> the run was interrupted; the last run may be cut short and later runs are missing.</div>");
    }
    if let Some(pc) = &r.preconditioning {
        if !pc.steady_state.reached {
            h.push_str("<div class=\"warn\"><b>Steady state not reached</b> during preconditioning: the results below may still drift (flagged &#9888; in the table).</div>");
        }
    }
    if let Err(problems) = crate::result::validate(r) {
        let _ = write!(
            h,
            "<div class=\"warn\"><b>This result fails validation</b> ({} problem(s)); numbers may be inconsistent:<ul>",
            problems.len()
        );
        for p in problems.iter().take(10) {
            let _ = write!(h, "<li>{}</li>", esc(p));
        }
        h.push_str("</ul></div>");
    }
    header(h, r);
    preconditioning(h, r);
    runs_table(h, r);
    phases_section(h, r);
    group_plots(h, r);
    h.push_str("</section>\n");
}

fn header(h: &mut String, r: &BenchResult) {
    let m = &r.machine;
    let t = &r.target;
    let kv = |h: &mut String, k: &str, v: String| {
        let _ = write!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(&v));
    };
    h.push_str("<div class=\"plots\"><table class=\"kv\">");
    kv(h, "Started", r.started_at.clone());
    kv(h, "Finished", r.finished_at.clone());
    kv(h, "Schema", r.schema.clone());
    kv(h, "Host", format!("{} ({} CPUs, {:.1} GiB)", m.hostname, m.cpus, m.memory_bytes as f64 / (1u64 << 30) as f64));
    kv(h, "CPU", m.cpu_model.clone());
    kv(h, "Kernel", m.kernel.clone());
    h.push_str("</table><table class=\"kv\">");
    kv(h, "Target", format!("{} at {}", t.kind, t.address));
    kv(h, "Subsystem", t.subsystem_nqn.clone());
    kv(
        h,
        "Namespace",
        format!(
            "{} ({} backend, {} B blocks, {})",
            t.namespace_id,
            t.backend,
            t.block_size,
            bytes_h(t.capacity_bytes as f64)
        ),
    );
    kv(
        h,
        "Loopback TCP ceiling",
        r.ceilings.loopback_tcp_bytes_per_second.map_or("not measured".into(), |b| format!("{:.0} MB/s", b / 1e6)),
    );
    kv(h, "Local baselines", format!("{} run(s)", r.ceilings.local_baseline.len()));
    h.push_str("</table></div>");
    if !r.notes.is_empty() {
        h.push_str("<ul>");
        for n in &r.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
}

fn bytes_h(b: f64) -> String {
    if b >= (1u64 << 40) as f64 {
        format!("{:.1} TiB", b / (1u64 << 40) as f64)
    } else if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    }
}

fn preconditioning(h: &mut String, r: &BenchResult) {
    let Some(pc) = &r.preconditioning else { return };
    let ss = &pc.steady_state;
    let _ = write!(
        h,
        "<h3>Preconditioning</h3><p>{} &mdash; {} written, {} rounds of {:.0} s. Steady state (SNIA PTS, {}-round window): {}; window average {} IOPS, data excursion {:.1} % (limit 20 %), slope excursion {:.1} % (limit 10 %).</p>",
        esc(&pc.method),
        bytes_h(pc.bytes_written as f64),
        pc.rounds.len(),
        pc.round_seconds,
        ss.window_rounds,
        if ss.reached { "<b class=\"up\">reached</b>" } else { "<b class=\"flag\">NOT reached</b>" },
        si(ss.average),
        ss.data_excursion_percent,
        ss.slope_excursion_percent
    );
    if pc.rounds.is_empty() {
        return;
    }
    let n = pc.rounds.len();
    let mut plot = Plot::new("Preconditioning rounds", "round", "IOPS");
    plot.series
        .push(Series::new("IOPS per round", pc.rounds.iter().enumerate().map(|(i, v)| ((i + 1) as f64, *v)).collect()));
    let w = (ss.window_rounds as usize).min(n);
    if w > 0 {
        let first = (n - w + 1) as f64;
        let avg = ss.average;
        plot.series.push(Series::new("window average", vec![(first, avg), (n as f64, avg)]).dashed().colour("#009e73"));
        // PTS data-excursion limit: max - min within 20 % of the average, i.e. ±10 %.
        plot.series.push(
            Series::new("average +10 %", vec![(first, avg * 1.1), (n as f64, avg * 1.1)]).dashed().colour("#999999"),
        );
        plot.series.push(
            Series::new("average −10 %", vec![(first, avg * 0.9), (n as f64, avg * 0.9)]).dashed().colour("#999999"),
        );
        plot.shade_x = Some((first - 0.5, n as f64 + 0.5, "steady-state window".into()));
    }
    let _ = write!(h, "<div class=\"plots\">{}</div>", plot.render());
}

fn fmt_us(v: f64) -> String {
    if !v.is_finite() {
        "—".into()
    } else if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Latency at `p` (exact match within 1e-6) or "—".
fn pct(run: &RunResult, p: f64) -> Option<f64> {
    run.latency_us.percentiles.iter().find(|q| (q.percentile - p).abs() < 1e-6).map(|q| q.value)
}

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or("—".into(), f)
}

fn runs_table(h: &mut String, r: &BenchResult) {
    let _ = write!(h, "<h3>Runs ({})</h3>", r.runs.len());
    if r.runs.is_empty() {
        h.push_str("<p class=\"muted\">No runs recorded.</p>");
        return;
    }
    let not_steady = r.preconditioning.as_ref().is_some_and(|p| !p.steady_state.reached);
    let behind: Vec<&str> = r
        .runs
        .iter()
        .filter(|run| run.schedule.as_ref().is_some_and(|s| s.fell_behind))
        .map(|run| run.name.as_str())
        .collect();
    if !behind.is_empty() {
        let _ = write!(
            h,
            "<div class=\"warn\"><b>{} rate-limited run(s) fell behind their arrival schedule</b> ({}): the host did not issue their I/Os at the offered rate, because its threads were descheduled or woken late, or because the target did not complete I/O fast enough (the queue was full). Their latency, measured from each I/O's scheduled time, includes that wait; see the schedule column.</div>",
            behind.len(),
            esc(&behind.join(", "))
        );
    }
    h.push_str("<div class=\"scroll\"><table class=\"runs\"><tr><th class=\"l\">run</th><th>workload</th><th>T&times;QD</th><th>load</th><th>IOPS</th><th>MB/s</th><th>avg<br>µs</th><th>p99<br>µs</th><th>p99.99<br>µs</th><th>max<br>µs</th><th>stddev<br>µs</th><th>CPU µs/IO<br>initiator</th><th>CPU µs/IO<br>target</th><th>IOPS per<br>init. core</th><th>errors</th><th>% of<br>ceiling</th><th>bound by</th><th class=\"l\">schedule (rate-limited runs)</th></tr>");
    for run in &r.runs {
        let workload = format!(
            "{} {} {}",
            size_h(run.block_size),
            run.pattern,
            match run.read_percent {
                100 => "read".to_string(),
                0 => "write".to_string(),
                p => format!("{p}/{} r/w", 100 - p),
            }
        );
        let flag =
            if not_steady { " <span class=\"flag\" title=\"steady state not reached\">&#9888;</span>" } else { "" };
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}{flag}</td><td class=\"l\">{}</td><td>{}&times;{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"sched\">{}</td></tr>",
            esc(&run.name),
            esc(&workload),
            run.threads,
            run.queue_depth,
            run.load_percent.map_or("max".into(), |l| format!("{l} %")),
            si(run.iops),
            run.bytes_per_second / 1e6,
            fmt_us(run.latency_us.mean),
            opt(pct(run, 99.0), fmt_us),
            opt(pct(run, 99.99), fmt_us),
            fmt_us(run.latency_us.max),
            fmt_us(run.latency_us.stddev),
            run.cpu.initiator_us_per_io,
            opt(run.cpu.target_us_per_io, |v| format!("{v:.2}")),
            si(run.cpu.iops_per_initiator_core),
            if run.errors > 0 { " class=\"flag\"" } else { "" },
            run.errors,
            opt(run.percent_of_ceiling, |v| format!("{v:.1} %")),
            esc(run.bound_by.as_deref().unwrap_or("—")),
            schedule_cell(run),
        );
    }
    h.push_str("</table></div>");
}

/// The schedule column: "—" for maximum-rate runs (or a driver without the data), else
/// the summary, flagged when the run fell behind.
fn schedule_cell(run: &RunResult) -> String {
    match &run.schedule {
        None if run.rate_limit_iops.is_some() => "<span class=\"muted\">not recorded</span>".into(),
        None => "—".into(),
        Some(s) => {
            let text = crate::schedule::run_summary(run).unwrap_or_else(|| s.summary());
            match text.strip_prefix("fell behind") {
                Some(rest) if s.fell_behind => {
                    format!("<span class=\"flag\">&#9888; fell behind</span>{}", esc(rest))
                }
                _ => esc(&text),
            }
        }
    }
}

/// The title of the split's sections.
const PHASES_TITLE: &str = "Where the target's time went (mean µs per command: receive / QoS / storage / send)";
/// Colours of the phases, in [`PHASE_NAMES`] order.
const PHASE_COLOURS: [&str; 4] = ["#0072b2", "#e69f00", "#009e73", "#cc79a7"];

fn phase_bars(title: &str) -> StackedBars {
    let segments = PHASE_NAMES.iter().zip(PHASE_COLOURS).map(|(name, colour)| (name.to_string(), colour)).collect();
    StackedBars::new(title, "mean µs per command", segments)
}

/// The target's split of each run that has one (runs against the embedded target): a
/// table next to the host's mean latency and a stacked bar per run. Nothing without.
fn phases_section(h: &mut String, r: &BenchResult) {
    let runs: Vec<(&RunResult, &TargetPhases)> =
        r.runs.iter().filter_map(|run| Some((run, run.target_phases_us.as_ref()?))).collect();
    if runs.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<h3>{}</h3><p class=\"muted\">Measured by the embedded target, from its counters read right before and right after each run (ramp included): from a command's receipt to its response's last byte handed to the socket (a host I/O larger than the target's maximum transfer size is several commands). The rest of the host's latency is the host and the network. Send is recorded when the response batch was written, slightly after the other phases; a RAM backend's storage shows about 0 because the runtime reads its clock once per call.</p>",
        esc(PHASES_TITLE)
    );
    h.push_str("<div class=\"scroll\"><table class=\"runs phases\"><tr><th class=\"l\">run</th><th>commands</th><th>receive<br>µs</th><th>QoS<br>µs</th><th>storage<br>µs</th><th>send<br>µs</th><th>target<br>total µs</th><th>host avg<br>latency µs</th></tr>");
    for (run, phases) in &runs {
        let _ = write!(h, "<tr><td class=\"l\">{}</td><td>{}</td>", esc(&run.name), phases.commands);
        for mean in phases.means() {
            let _ = write!(h, "<td>{}</td>", short(mean));
        }
        let _ = write!(h, "<td>{}</td><td>{}</td></tr>", short(phases.total()), fmt_us(run.latency_us.mean));
    }
    h.push_str("</table></div>");
    let mut bars = phase_bars("Where the target's time went, per run");
    bars.bars = runs.iter().map(|(run, phases)| (run.name.clone(), phases.means().to_vec())).collect();
    let _ = write!(h, "<div class=\"plots\">{}</div>", bars.render());
}

fn size_h(b: u32) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{}M", b >> 20)
    } else if b >= 1024 && b % 1024 == 0 {
        format!("{}K", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// Groups in first-appearance order.
fn groups(r: &BenchResult) -> Vec<(&str, Vec<&RunResult>)> {
    let mut out: Vec<(&str, Vec<&RunResult>)> = Vec::new();
    for run in &r.runs {
        match out.iter_mut().find(|(g, _)| *g == run.group) {
            Some((_, v)) => v.push(run),
            None => out.push((&run.group, vec![run])),
        }
    }
    out
}

fn group_plots(h: &mut String, r: &BenchResult) {
    for (group, runs) in groups(r) {
        let _ = write!(h, "<h3>Group <em>{}</em></h3><div class=\"plots\">", esc(group));
        sweep_plots(h, &runs);
        load_plot(h, &runs);
        percentile_plot(h, group, &runs);
        time_series_plots(h, group, &runs);
        h.push_str("</div>");
    }
}

/// IOPS and mean latency versus threads x queue depth, for groups of maximum-rate runs
/// with at least two distinct (threads, qd) points.
fn sweep_plots(h: &mut String, runs: &[&RunResult]) {
    let mut pts: Vec<&RunResult> = runs.iter().copied().filter(|r| r.load_percent.is_none()).collect();
    pts.sort_by_key(|r| (r.threads * r.queue_depth, r.threads, r.queue_depth));
    let mut shapes: Vec<(u32, u32)> = pts.iter().map(|r| (r.threads, r.queue_depth)).collect();
    shapes.dedup();
    if shapes.len() < 2 {
        return;
    }
    let ticks: Vec<(f64, String)> =
        shapes.iter().enumerate().map(|(i, (t, q))| (i as f64, format!("{t}×{q}"))).collect();
    let pos = |r: &RunResult| shapes.iter().position(|s| *s == (r.threads, r.queue_depth)).unwrap_or(0) as f64;
    // One line per workload shape sharing the sweep (block size, mix, pattern).
    let mut lines: Vec<(String, Vec<&RunResult>)> = Vec::new();
    for r in &pts {
        let key = format!("{} {} {}% read", size_h(r.block_size), r.pattern, r.read_percent);
        match lines.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => lines.push((key, vec![r])),
        }
    }
    // A sweep is one workload at several (threads, qd) points.
    lines.retain(|(_, rs)| rs.len() >= 2);
    if lines.is_empty() {
        return;
    }
    let mut iops =
        Plot::new("IOPS vs threads × queue depth", "threads × queue depth (sorted by outstanding I/Os)", "IOPS");
    let mut lat = Plot::new(
        "Mean latency vs threads × queue depth",
        "threads × queue depth (sorted by outstanding I/Os)",
        "mean latency (µs)",
    );
    for (key, rs) in &lines {
        iops.series.push(Series::new(key.clone(), rs.iter().map(|r| (pos(r), r.iops)).collect()));
        lat.series.push(Series::new(key.clone(), rs.iter().map(|r| (pos(r), r.latency_us.mean)).collect()));
    }
    iops.x_ticks = Some(ticks.clone());
    lat.x_ticks = Some(ticks);
    let iops = iops.auto_log_y(50.0);
    let lat = lat.auto_log_y(20.0);
    h.push_str(&iops.render());
    h.push_str(&lat.render());
}

/// Average and p99 latency versus load level, for runs with `load_percent`.
fn load_plot(h: &mut String, runs: &[&RunResult]) {
    let mut pts: Vec<&RunResult> = runs.iter().copied().filter(|r| r.load_percent.is_some()).collect();
    if pts.len() < 2 {
        return;
    }
    pts.sort_by_key(|r| r.load_percent);
    let x = |r: &RunResult| r.load_percent.unwrap_or(0) as f64;
    let mut p = Plot::new("Latency vs load level", "load (% of maximum rate)", "latency (µs)");
    p.series.push(Series::new("average", pts.iter().map(|r| (x(r), r.latency_us.mean)).collect()));
    p.series.push(Series::new("p99", pts.iter().filter_map(|r| Some((x(r), pct(r, 99.0)?))).collect()).dashed());
    p.series.push(Series::new("p99.99", pts.iter().filter_map(|r| Some((x(r), pct(r, 99.99)?))).collect()).dashed());
    p.y_scale = Scale::Log10;
    h.push_str(&p.render());
}

/// Latency percentile curves on a "nines" axis, one line per run.
fn percentile_plot(h: &mut String, group: &str, runs: &[&RunResult]) {
    let series: Vec<Series> = runs
        .iter()
        .filter(|r| !r.latency_us.percentiles.is_empty())
        .map(|r| {
            Series::new(r.name.clone(), r.latency_us.percentiles.iter().map(|q| (q.percentile, q.value)).collect())
        })
        .collect();
    if series.is_empty() {
        return;
    }
    let mut p = Plot::new(format!("Latency percentiles: {group}"), "percentile", "latency (µs)");
    p.x_scale = Scale::Nines;
    p.y_scale = Scale::Log10;
    p.series = series;
    h.push_str(&p.render());
}

/// IOPS and p99 over time, one line per run.
fn time_series_plots(h: &mut String, group: &str, runs: &[&RunResult]) {
    let with: Vec<&&RunResult> = runs.iter().filter(|r| !r.time_series.is_empty()).collect();
    if with.is_empty() {
        return;
    }
    let mut iops = Plot::new(format!("IOPS over time: {group}"), "time (s)", "IOPS");
    let mut p99 = Plot::new(format!("p99 latency over time: {group}"), "time (s)", "p99 latency (µs)");
    for r in with {
        iops.series.push(Series::new(r.name.clone(), r.time_series.iter().map(|s| (s.t_seconds, s.iops)).collect()));
        p99.series.push(Series::new(r.name.clone(), r.time_series.iter().map(|s| (s.t_seconds, s.p99_us)).collect()));
    }
    h.push_str(&iops.auto_log_y(20.0).render());
    h.push_str(&p99.auto_log_y(20.0).render());
}

fn delta(base: f64, v: f64, higher_is_better: bool) -> String {
    if !(base.is_finite() && v.is_finite()) || base == 0.0 {
        return "<td>—</td>".into();
    }
    let d = (v - base) / base * 100.0;
    let class = if d.abs() < 0.05 {
        ""
    } else if (d > 0.0) == higher_is_better {
        " class=\"up\""
    } else {
        " class=\"down\""
    };
    format!("<td{class}>{d:+.1} %</td>")
}

/// Side-by-side table: one row per run name (first-appearance order across results),
/// IOPS / p99 / CPU per I/O for each result and the change against the first result.
fn comparison(h: &mut String, results: &[(String, BenchResult)]) {
    h.push_str("<section class=\"result\" id=\"comparison\"><h2>Comparison</h2><p>Runs are aligned by name; &Delta; is relative to the first result (<span class=\"up\">green</span> = better).</p><table class=\"kv\">");
    for (i, (label, r)) in results.iter().enumerate() {
        let _ = write!(
            h,
            "<tr><td>#{}</td><td>{} &mdash; {} / {} on {} ({}){}</td></tr>",
            i + 1,
            esc(label),
            esc(&r.suite),
            esc(&r.driver),
            esc(&r.machine.hostname),
            esc(&r.started_at),
            if r.partial { " <span class=\"flag\">partial</span>" } else { "" }
        );
    }
    h.push_str("</table><div class=\"scroll\"><table><tr><th class=\"l\" rowspan=\"2\">run</th>");
    for i in 0..results.len() {
        let span = if i == 0 { 3 } else { 6 };
        let _ = write!(h, "<th colspan=\"{span}\">#{}</th>", i + 1);
    }
    h.push_str("</tr><tr>");
    for i in 0..results.len() {
        h.push_str("<th>IOPS</th><th>p99 µs</th><th>µs/IO</th>");
        if i > 0 {
            h.push_str("<th>&Delta; IOPS</th><th>&Delta; p99</th><th>&Delta; µs/IO</th>");
        }
    }
    h.push_str("</tr>");
    let mut names: Vec<&str> = Vec::new();
    for (_, r) in results {
        for run in &r.runs {
            if !names.contains(&run.name.as_str()) {
                names.push(&run.name);
            }
        }
    }
    for &name in &names {
        let _ = write!(h, "<tr><td class=\"l\">{}</td>", esc(name));
        let base = results[0].1.runs.iter().find(|r| r.name == name);
        for (i, (_, r)) in results.iter().enumerate() {
            let cells = if i == 0 { 3 } else { 6 };
            let Some(run) = r.runs.iter().find(|r| r.name == name) else {
                for _ in 0..cells {
                    h.push_str("<td class=\"muted\">—</td>");
                }
                continue;
            };
            let p99 = pct(run, 99.0).unwrap_or(f64::NAN);
            let _ = write!(
                h,
                "<td>{}</td><td>{}</td><td>{:.2}</td>",
                si(run.iops),
                fmt_us(p99),
                run.cpu.initiator_us_per_io
            );
            if i > 0 {
                match base {
                    Some(b) => {
                        h.push_str(&delta(b.iops, run.iops, true));
                        h.push_str(&delta(pct(b, 99.0).unwrap_or(f64::NAN), p99, false));
                        h.push_str(&delta(b.cpu.initiator_us_per_io, run.cpu.initiator_us_per_io, false));
                    }
                    None => h.push_str("<td>—</td><td>—</td><td>—</td>"),
                }
            }
        }
        h.push_str("</tr>");
    }
    h.push_str("</table></div>");
    comparison_phases(h, results, &names);
    h.push_str("</section>\n");
}

/// The target's split of the runs (by name) that have one in two or more results, each
/// result's next to the others': a table and a stacked bar per run and result.
fn comparison_phases(h: &mut String, results: &[(String, BenchResult)], names: &[&str]) {
    let rows: Vec<(&str, Vec<Option<&TargetPhases>>)> = names
        .iter()
        .map(|name| {
            let phases = results
                .iter()
                .map(|(_, r)| r.runs.iter().find(|run| run.name == *name)?.target_phases_us.as_ref())
                .collect::<Vec<_>>();
            (*name, phases)
        })
        .filter(|(_, phases)| phases.iter().flatten().count() >= 2)
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = write!(h, "<h3>{}</h3><div class=\"scroll\"><table><tr><th class=\"l\">run</th>", esc(PHASES_TITLE));
    for i in 0..results.len() {
        let _ = write!(h, "<th>#{} receive / QoS / storage / send µs</th><th>#{} total µs</th>", i + 1, i + 1);
    }
    h.push_str("</tr>");
    let mut bars = phase_bars("Where the target's time went, per run and result");
    for (name, phases) in &rows {
        let _ = write!(h, "<tr><td class=\"l\">{}</td>", esc(name));
        for (i, phases) in phases.iter().enumerate() {
            let Some(phases) = phases else {
                h.push_str("<td class=\"muted\">—</td><td class=\"muted\">—</td>");
                continue;
            };
            let means: Vec<String> = phases.means().iter().map(|mean| short(*mean)).collect();
            let _ = write!(h, "<td>{}</td><td>{}</td>", means.join(" / "), short(phases.total()));
            bars.bars.push((format!("#{} {name}", i + 1), phases.means().to_vec()));
        }
        h.push_str("</tr>");
    }
    let _ = write!(h, "</table></div><div class=\"plots\">{}</div>", bars.render());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::sample_result;

    #[test]
    fn renders_sample() {
        let r = sample_result();
        let html = render_html(&[("a.json".into(), r.clone())]);
        assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"));
        assert!(!html.contains("<script"), "no scripts in the report");
        assert!(!html.contains("https://"), "no external resources");
        let svgs = html.matches("<svg").count();
        assert!(svgs >= 10, "{svgs} plots");
        for title in [
            "IOPS vs threads × queue depth",
            "Latency vs load level",
            "Latency percentiles: four-corners",
            "IOPS over time: four-corners",
            "Preconditioning rounds",
            "steady-state window",
        ] {
            assert!(html.contains(title), "missing {title}");
        }
        // Table values: 4k random read IOPS and p99, ceiling and bound.
        assert!(html.contains("<td>412k</td>"));
        assert!(html.contains(&fmt_us(pct(&r.runs[0], 99.0).unwrap())));
        assert!(html.contains("local-baseline") && html.contains("loopback-tcp"));
        assert!(html.contains("Steady state not reached"));
        assert!(!html.contains("Partial result"));
        assert!(!html.contains("fails validation"));
        // Rate-limited runs: the two behind are named in a warning and flagged in their
        // row; the others say they kept up.
        assert!(html.contains("2 rate-limited run(s) fell behind their arrival schedule</b> (curve-4k-randread-90pct, curve-4k-randread-100pct)"));
        assert_eq!(html.matches("&#9888; fell behind</span>: achieved").count(), 2);
        assert_eq!(html.matches("<td class=\"sched\">kept up: achieved 100 % of offered").count(), 4);
        assert!(html.contains("still ") && html.contains("behind at the end"));
        // A rate-limited run without schedule data (a sluice-bench/1 result) says so.
        let mut old = r.clone();
        for run in &mut old.runs {
            run.schedule = None;
        }
        let html = render_html(&[("old.json".into(), old)]);
        assert_eq!(html.matches("not recorded").count(), 6);
        assert!(!html.contains("fell behind"));
        assert!(!html.contains("NaN"));
    }

    #[test]
    fn phases_section_shows_the_runs_with_a_split() {
        let r = sample_result();
        let title = esc(PHASES_TITLE);
        let row = |run: &RunResult| {
            let p = run.target_phases_us.as_ref().unwrap();
            format!(
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&run.name),
                p.commands,
                short(p.receive),
                short(p.qos),
                short(p.storage),
                short(p.send),
                short(p.total()),
                fmt_us(run.latency_us.mean)
            )
        };
        let html = render_html(&[("a.json".into(), r.clone())]);
        assert_eq!(html.matches(title.as_str()).count(), 1);
        assert!(r.runs.iter().all(|run| html.contains(&row(run))));
        assert!(html.contains("Where the target&#39;s time went, per run</title>"));
        assert_eq!(html.matches("</title></rect>").count(), 3 * r.runs.len(), "receive, storage, send (QoS is 0)");

        // Runs without a split are left out; a result without any has no section.
        let mut some = r.clone();
        some.runs[0].target_phases_us = None;
        let html = render_html(&[("some.json".into(), some.clone())]);
        assert!(!html.contains(&format!("<tr><td class=\"l\">{}</td><td>", r.runs[0].name)));
        assert!(html.contains(&row(&r.runs[1])));
        let mut none = r.clone();
        for run in &mut none.runs {
            run.target_phases_us = None;
        }
        assert!(!render_html(&[("none.json".into(), none.clone())]).contains(title.as_str()));

        // Compared: the runs with a split in two or more results, each result's side by side.
        let html = render_html(&[("a.json".into(), r.clone()), ("none.json".into(), none), ("some.json".into(), some)]);
        let comparison = &html[..html.find("id=\"result-0\"").unwrap()];
        assert!(comparison.contains(title.as_str()));
        let (first, second) = (&r.runs[0].name, &r.runs[1].name);
        assert!(
            comparison.contains(&format!(">#1 {second}</text>"))
                && comparison.contains(&format!(">#3 {second}</text>"))
        );
        assert!(!comparison.contains(&format!(">#1 {first}</text>")), "only #1 has {first}");
        assert!(!comparison.contains(&format!(">#2 {second}</text>")), "#2 has no split");
        let p = r.runs[1].target_phases_us.as_ref().unwrap();
        let cells =
            format!("<td>{} / {} / {} / {}</td>", short(p.receive), short(p.qos), short(p.storage), short(p.send));
        assert_eq!(comparison.matches(&cells).count(), 2);
        assert!(!html.contains("NaN"));
    }

    #[test]
    fn escapes_user_text() {
        let mut r = sample_result();
        r.runs[0].name = "<script>alert(1)</script>".into();
        r.ceilings.local_baseline[0].run = r.runs[0].name.clone();
        r.runs[1].group = "\"><img src=x onerror=alert(2)>".into();
        r.notes.push("<b>bold</b> & co".into());
        r.partial = true;
        let html = render_html(&[("<label>.json".into(), r)]);
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!html.contains("<img"));
        assert!(!html.contains("<b>bold</b>"));
        assert!(html.contains("&lt;label&gt;.json"));
        assert!(html.contains("Partial result"));
    }

    #[test]
    fn renders_empty_inputs() {
        let html = render_html(&[]);
        assert!(html.contains("No results given"));
        let mut r = sample_result();
        r.runs.clear();
        r.ceilings.local_baseline.clear();
        r.preconditioning = None;
        let html = render_html(&[("empty.json".into(), r.clone()), ("empty2.json".into(), r)]);
        assert!(html.contains("No runs recorded"));
        assert!(html.contains("Comparison"));
    }

    #[test]
    fn comparison_aligns_runs() {
        let a = sample_result();
        let mut b = a.clone();
        b.runs[0].iops *= 1.1;
        b.runs.remove(1);
        let html = render_html(&[("a.json".into(), a), ("b.json".into(), b)]);
        assert!(html.contains("+10.0 %"));
        assert!(html.contains("<td class=\"muted\">—</td>"), "missing run shown as a gap");
    }

    #[test]
    fn invalid_result_is_flagged_not_fatal() {
        let mut r = sample_result();
        r.runs[0].latency_us.mean = f64::NAN;
        r.runs[0].time_series[0].iops = f64::INFINITY;
        let html = render_html(&[("bad.json".into(), r)]);
        assert!(html.contains("fails validation"));
        assert!(!html.contains("NaN\"") && !html.contains("inf,"));
    }
}

//! `sluice stat`: live per-namespace IOPS, bandwidth and latency, computed from two
//! scrapes of the metrics endpoint (so it works against any running target without
//! another interface).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nvme_target::stats::IoPhase;

/// Longest metrics response read (a target with thousands of namespaces stays well
/// below this).
const MAX_RESPONSE_BYTES: u64 = 64 << 20;
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub struct StatArgs {
    /// Metrics endpoint of `sluice serve --metrics-address`.
    #[arg(long, default_value = "127.0.0.1:9520")]
    pub metrics_address: SocketAddr,
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Samples to print (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Output format: normal (a table per sample) or json (one object per line).
    #[arg(long, short = 'o', default_value = "normal")]
    pub output_format: String,
}

/// One series: metric name and its label set, as written in the exposition.
type Samples = BTreeMap<String, f64>;

/// Why `sluice stat` cannot show anything.
#[derive(Debug, thiserror::Error)]
pub enum StatError {
    #[error(
        "cannot scrape http://{address}/metrics: {source}; is `sluice serve --metrics-address {address}` running?"
    )]
    Scrape { address: SocketAddr, source: std::io::Error },
    #[error("http://{address}/metrics answered {status:?}")]
    Status { address: SocketAddr, status: String },
    #[error("--interval must be between 0.1 and 3600 seconds, not {0}")]
    Interval(f64),
    #[error("--output-format must be normal or json, not {0:?}")]
    Format(String),
}

/// Runs until `count` samples were printed (or forever).
pub fn run(args: &StatArgs) -> Result<(), StatError> {
    if !(0.1..=3600.0).contains(&args.interval) {
        return Err(StatError::Interval(args.interval));
    }
    let json = match args.output_format.as_str() {
        "normal" => false,
        "json" => true,
        other => return Err(StatError::Format(other.to_string())),
    };
    let mut previous = (Instant::now(), scrape(args.metrics_address)?);
    let mut printed = 0;
    while args.count == 0 || printed < args.count {
        std::thread::sleep(Duration::from_secs_f64(args.interval));
        let current = (Instant::now(), scrape(args.metrics_address)?);
        let seconds = current.0.duration_since(previous.0).as_secs_f64();
        let rows = namespace_rates(&previous.1, &current.1, seconds);
        if json {
            println!("{}", serde_json::to_string(&rows).unwrap_or_default());
        } else {
            print_table(&rows);
        }
        previous = current;
        printed += 1;
    }
    Ok(())
}

/// Rates of one namespace over one interval.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NamespaceRates {
    pub subsystem: String,
    pub nsid: String,
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_megabytes_per_second: f64,
    pub write_megabytes_per_second: f64,
    /// Mean latency over the interval; `None` without completions.
    pub read_latency_average_microseconds: Option<f64>,
    pub write_latency_average_microseconds: Option<f64>,
    /// Upper bound of the power-of-two bucket holding the 99th percentile.
    pub read_latency_p99_microseconds: Option<f64>,
    pub write_latency_p99_microseconds: Option<f64>,
    /// Where a read's or write's time went, mean microseconds per command over the
    /// interval (`IoPhase`: receive, qos, storage, send); `None` without completions.
    pub phase_average_microseconds: Option<PhaseAverages>,
}

/// Mean microseconds per read or write in each `IoPhase`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PhaseAverages {
    pub receive: f64,
    pub qos: f64,
    pub storage: f64,
    pub send: f64,
}

fn scrape(address: SocketAddr) -> Result<Samples, StatError> {
    let failed = |source| StatError::Scrape { address, source };
    let mut stream = TcpStream::connect_timeout(&address, SCRAPE_TIMEOUT).map_err(failed)?;
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT)).map_err(failed)?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").map_err(failed)?;
    let mut response = String::new();
    stream.take(MAX_RESPONSE_BYTES).read_to_string(&mut response).map_err(failed)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    if !status.contains(" 200 ") {
        return Err(StatError::Status { address, status });
    }
    Ok(parse_exposition(body))
}

/// Parses `name{labels} value` lines; comments and malformed lines are skipped.
pub fn parse_exposition(text: &str) -> Samples {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse::<f64>().ok()?))
        })
        .collect()
}

/// Splits `name{a="x",b="y"}` into the name and the label text.
fn split_series(series: &str) -> (&str, &str) {
    match series.split_once('{') {
        Some((name, rest)) => (name, rest.trim_end_matches('}')),
        None => (series, ""),
    }
}

fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let end = labels[start..].find('"')? + start;
    Some(&labels[start..end])
}

/// Per-namespace rates between two scrapes.
pub fn namespace_rates(before: &Samples, after: &Samples, seconds: f64) -> Vec<NamespaceRates> {
    let delta = |series: &str| after.get(series).copied().unwrap_or(0.0) - before.get(series).copied().unwrap_or(0.0);
    let mut rows = Vec::new();
    for series in after.keys() {
        let (name, labels) = split_series(series);
        if name != "sluice_namespace_read_commands_total" {
            continue;
        }
        let (Some(subsystem), Some(nsid)) = (label(labels, "subsystem"), label(labels, "nsid")) else { continue };
        let of = |metric: &str| format!("{metric}{{{labels}}}");
        let per_second = |value: f64| if seconds > 0.0 { value / seconds } else { 0.0 };
        let latency = |kind: &str| {
            let count = delta(&of(&format!("sluice_namespace_{kind}_latency_seconds_count")));
            let sum = delta(&of(&format!("sluice_namespace_{kind}_latency_seconds_sum")));
            let average = (count > 0.0).then(|| sum / count * 1e6);
            let p99 = (count > 0.0).then(|| percentile_bound(before, after, labels, kind, count * 0.99)).flatten();
            (average, p99)
        };
        let (read_average, read_p99) = latency("read");
        let (write_average, write_p99) = latency("write");
        let commands = delta(&of("sluice_namespace_read_latency_seconds_count"))
            + delta(&of("sluice_namespace_write_latency_seconds_count"));
        let phase = |phase: IoPhase| {
            delta(&format!("sluice_namespace_io_phase_seconds_total{{{labels},phase=\"{}\"}}", phase.label()))
                / commands
                * 1e6
        };
        let phases = (commands > 0.0).then(|| PhaseAverages {
            receive: phase(IoPhase::Receive),
            qos: phase(IoPhase::Qos),
            storage: phase(IoPhase::Storage),
            send: phase(IoPhase::Send),
        });
        rows.push(NamespaceRates {
            subsystem: subsystem.to_string(),
            nsid: nsid.to_string(),
            read_iops: per_second(delta(series)),
            write_iops: per_second(delta(&of("sluice_namespace_write_commands_total"))),
            read_megabytes_per_second: per_second(delta(&of("sluice_namespace_read_bytes_total"))) / 1e6,
            write_megabytes_per_second: per_second(delta(&of("sluice_namespace_written_bytes_total"))) / 1e6,
            read_latency_average_microseconds: read_average,
            write_latency_average_microseconds: write_average,
            read_latency_p99_microseconds: read_p99,
            write_latency_p99_microseconds: write_p99,
            phase_average_microseconds: phases,
        });
    }
    rows
}

/// The smallest bucket bound whose cumulative count over the interval reaches `rank`.
fn percentile_bound(before: &Samples, after: &Samples, labels: &str, kind: &str, rank: f64) -> Option<f64> {
    let prefix = format!("sluice_namespace_{kind}_latency_seconds_bucket{{{labels},le=\"");
    let mut bounds: Vec<(f64, f64)> = after
        .iter()
        .filter_map(|(series, value)| {
            let bound = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            let bound = if bound == "+Inf" { f64::INFINITY } else { bound.parse().ok()? };
            Some((bound, value - before.get(series).copied().unwrap_or(0.0)))
        })
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    bounds.into_iter().find(|&(_, cumulative)| cumulative >= rank).map(|(bound, _)| bound * 1e6)
}

fn print_table(rows: &[NamespaceRates]) {
    let micros = |value: Option<f64>| value.map_or_else(|| "-".to_string(), |value| format!("{value:.0}"));
    println!(
        "{:<44} {:>5} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   {:>7} {:>7} {:>7} {:>7}",
        "subsystem",
        "nsid",
        "read IOPS",
        "write IOPS",
        "read MB/s",
        "write MB/s",
        "rd avg µs",
        "rd p99 µs",
        "wr avg µs",
        "wr p99 µs",
        "recv µs",
        "qos µs",
        "stor µs",
        "send µs"
    );
    for row in rows {
        let phase = |pick: fn(&PhaseAverages) -> f64| micros(row.phase_average_microseconds.as_ref().map(pick));
        println!(
            "{:<44} {:>5} {:>10.0} {:>10.0} {:>9.1} {:>9.1} {:>9} {:>9} {:>9} {:>9}   {:>7} {:>7} {:>7} {:>7}",
            row.subsystem,
            row.nsid,
            row.read_iops,
            row.write_iops,
            row.read_megabytes_per_second,
            row.write_megabytes_per_second,
            micros(row.read_latency_average_microseconds),
            micros(row.read_latency_p99_microseconds),
            micros(row.write_latency_average_microseconds),
            micros(row.write_latency_p99_microseconds),
            phase(|split| split.receive),
            phase(|split| split.qos),
            phase(|split| split.storage),
            phase(|split| split.send),
        );
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_two_scrapes() {
        let labels = "subsystem=\"nqn.x\",nsid=\"1\"";
        let scrape = |reads: f64, bytes: f64, small: f64, large: f64, sum: f64| {
            parse_exposition(&format!(
                "# TYPE x counter\n\
                 sluice_namespace_read_commands_total{{{labels}}} {reads}\n\
                 sluice_namespace_read_bytes_total{{{labels}}} {bytes}\n\
                 sluice_namespace_read_latency_seconds_bucket{{{labels},le=\"0.000128\"}} {small}\n\
                 sluice_namespace_read_latency_seconds_bucket{{{labels},le=\"0.000256\"}} {large}\n\
                 sluice_namespace_read_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {large}\n\
                 sluice_namespace_read_latency_seconds_sum{{{labels}}} {sum}\n\
                 sluice_namespace_read_latency_seconds_count{{{labels}}} {large}\n\
                 sluice_namespace_io_phase_seconds_total{{{labels},phase=\"receive\"}} {receive}\n\
                 sluice_namespace_io_phase_seconds_total{{{labels},phase=\"storage\"}} {storage}\n\
                 sluice_namespace_io_phase_seconds_total{{{labels},phase=\"send\"}} {send}\n\
                 garbage line\n",
                receive = sum * 0.2,
                storage = sum * 0.8,
                send = sum * 0.1,
            ))
        };
        let before = scrape(100.0, 409_600.0, 100.0, 100.0, 0.01);
        // 1000 reads in 2 s: 980 under 128 µs, 20 between 128 and 256 µs.
        let after = scrape(1100.0, 4_505_600.0, 1080.0, 1100.0, 0.11);
        let rows = namespace_rates(&before, &after, 2.0);
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!((row.subsystem.as_str(), row.nsid.as_str()), ("nqn.x", "1"));
        assert!((row.read_iops - 500.0).abs() < 1e-9);
        assert!((row.read_megabytes_per_second - 2.048).abs() < 1e-9);
        assert!((row.read_latency_average_microseconds.unwrap() - 100.0).abs() < 1e-6);
        assert_eq!(row.read_latency_p99_microseconds, Some(256.0), "the 990th of 1000 is in the 256 µs bucket");
        assert_eq!(row.write_latency_average_microseconds, None);
        let phases = row.phase_average_microseconds.expect("1000 reads");
        // 0.1 s over 1000 reads: 20 µs receiving, 80 µs at storage, 10 µs sending.
        assert!((phases.receive - 20.0).abs() < 1e-6 && (phases.storage - 80.0).abs() < 1e-6);
        assert!((phases.send - 10.0).abs() < 1e-6);
        assert_eq!(phases.qos, 0.0, "a phase with no series counts as none");
    }
}

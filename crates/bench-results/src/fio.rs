//! fio's JSON output turned into the quantities of a [`RunResult`](crate::RunResult).
//!
//! `sluice bench --driver fio` runs fio with `--output-format=json+ --status-interval=1`
//! and `lat_percentiles=1`. The output file then holds, in this order:
//!
//! * free text lines (fio's notes and warnings, e.g. `note: both iodepth >= 1 and
//!   synchronous I/O engine are selected`),
//! * one JSON report per status interval, cumulative since the job's statistics were
//!   last reset: reports written during `ramp_time` count the ramp's I/Os; at the end of
//!   the ramp fio resets every counter (and the CPU accounting) and starts again,
//! * the final report, also a JSON object, after the jobs have ended.
//!
//! Every report has `timestamp_ms` (wall clock, when it was written) and per job
//! `job_runtime` (milliseconds measured so far). Their difference is the start of the
//! counters, which tells the ramp's reports from the measured ones and gives the
//! measurement window in wall-clock time, so that a target's CPU time can be sampled
//! over the same window from outside fio.
//!
//! Latency is fio's `lat_ns` (submission to completion). Percentiles are computed here
//! from the merged `bins` of every job and both directions (json+ output), with fio's own
//! rule, so a mixed read/write run gets one distribution like Sluice's own host reports.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use crate::result::{Latency, Percentile, Sample};

/// One fio report (a status-interval report or the final one).
#[derive(Deserialize, Debug, Clone)]
pub struct FioReport {
    /// E.g. `fio-3.33`.
    #[serde(rename = "fio version", default)]
    pub fio_version: String,
    /// Wall clock when fio wrote the report, milliseconds since the epoch.
    pub timestamp_ms: f64,
    /// One entry per job (every `numjobs` clone separately unless `group_reporting`).
    pub jobs: Vec<FioJob>,
}

/// One job of a report.
#[derive(Deserialize, Debug, Clone)]
pub struct FioJob {
    pub jobname: String,
    /// errno of the error that stopped the job, 0 when none did.
    #[serde(default)]
    pub error: i64,
    /// I/O errors counted under `continue_on_error` (absent without it).
    #[serde(default)]
    pub total_err: u64,
    /// errno of the first counted error.
    #[serde(default)]
    pub first_error: i64,
    /// Measured milliseconds (excluding `ramp_time`).
    pub job_runtime: f64,
    /// User CPU time of the job's process (or thread) as % of `job_runtime`.
    #[serde(default)]
    pub usr_cpu: f64,
    /// System CPU time as % of `job_runtime`.
    #[serde(default)]
    pub sys_cpu: f64,
    pub read: FioDirection,
    pub write: FioDirection,
}

/// Reads or writes of one job.
#[derive(Deserialize, Debug, Clone)]
pub struct FioDirection {
    pub io_bytes: u64,
    pub total_ios: u64,
    /// Total latency (submission to completion) in nanoseconds.
    pub lat_ns: FioLatency,
}

impl FioDirection {
    /// Completed I/Os: the latency samples, which agree with `io_bytes`. (`total_ios`
    /// runs a few I/Os short: it leaves out those in flight when the ramp ended.)
    pub fn completed(&self) -> u64 {
        if self.lat_ns.count > 0 {
            self.lat_ns.count
        } else {
            self.total_ios
        }
    }
}

/// fio's latency statistics, nanoseconds.
#[derive(Deserialize, Debug, Clone)]
pub struct FioLatency {
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub stddev: f64,
    #[serde(rename = "N", default)]
    pub count: u64,
    /// fio's own percentiles (`"99.000000": 199680`), present when the job had I/O.
    #[serde(default)]
    pub percentile: BTreeMap<String, f64>,
    /// json+ only: histogram bucket value (ns) -> count.
    #[serde(default, deserialize_with = "bins")]
    pub bins: BTreeMap<u64, u64>,
}

fn bins<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<u64, u64>, D::Error> {
    let raw: BTreeMap<String, u64> = BTreeMap::deserialize(deserializer)?;
    raw.into_iter()
        .map(|(key, count)| {
            key.parse::<u64>()
                .map(|value| (value, count))
                .map_err(|_| serde::de::Error::custom(format!("bin {key:?} is not a number")))
        })
        .collect()
}

/// A report reduced to what the time series needs: every job and both directions added
/// up, bins merged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub timestamp_ms: f64,
    /// The longest `job_runtime` of the report's jobs.
    pub runtime_ms: f64,
    pub ios: u64,
    pub bytes: u64,
    pub bins: BTreeMap<u64, u64>,
}

impl Snapshot {
    fn of(report: &FioReport) -> Snapshot {
        let mut snapshot = Snapshot { timestamp_ms: report.timestamp_ms, ..Snapshot::default() };
        for job in &report.jobs {
            snapshot.runtime_ms = snapshot.runtime_ms.max(job.job_runtime);
            for direction in [&job.read, &job.write] {
                snapshot.ios += direction.completed();
                snapshot.bytes += direction.io_bytes;
                for (value, count) in &direction.lat_ns.bins {
                    *snapshot.bins.entry(*value).or_default() += count;
                }
            }
        }
        snapshot
    }

    /// Wall-clock start of the counters this report shows.
    fn counters_start_ms(&self) -> f64 {
        self.timestamp_ms - self.runtime_ms
    }
}

/// Everything read from one fio output file.
#[derive(Debug, Default)]
pub struct FioOutput {
    /// Every report except the last, reduced.
    pub interim: Vec<Snapshot>,
    /// The last report: the final one when fio finished.
    pub last: Option<FioReport>,
    /// Text lines that were not part of a report (fio's notes, warnings and errors).
    pub messages: Vec<String>,
}

/// Why fio's output gave no measurement.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FioError {
    #[error("fio wrote no JSON report{}", first_message(.0))]
    NoReport(Vec<String>),
    #[error("fio's report has no jobs")]
    NoJobs,
    #[error("fio report {index}: {message}")]
    Json { index: usize, message: String },
}

fn first_message(messages: &[String]) -> String {
    messages
        .iter()
        .find(|line| !line.trim().is_empty())
        .map_or(String::new(), |line| format!(" (fio said: {})", line.trim()))
}

/// Reads fio's output as it grows: text lines and JSON reports, in any chunking.
#[derive(Debug, Default)]
pub struct FioOutputReader {
    pending: String,
    output: FioOutput,
    /// Reports that did not parse (kept to report the first).
    errors: Vec<FioError>,
    reports: usize,
}

impl FioOutputReader {
    pub fn new() -> FioOutputReader {
        FioOutputReader::default()
    }

    /// Adds more of the output; returns how many new reports were completed.
    pub fn push(&mut self, text: &str) -> usize {
        self.pending.push_str(text);
        self.drain(false)
    }

    /// Takes every complete report and text line out of `pending`. A report is complete
    /// at its closing brace: fio's JSON is indented, so the top level's `}` is the only
    /// one at the start of a line. (Parsing a prefix and waiting on "end of input" is not
    /// enough: a number cut in half, `100.`, is a syntax error, not an end of input.)
    fn drain(&mut self, at_end: bool) -> usize {
        let before = self.reports;
        loop {
            // A report starts with "{" at the beginning of a line; anything before it is text.
            let Some(start) = report_start(&self.pending) else {
                // Only complete lines are text; keep a partial line for later.
                if let Some(end) = self.pending.rfind('\n') {
                    let text: String = self.pending.drain(..=end).collect();
                    self.messages_from(&text);
                }
                break;
            };
            if start > 0 {
                let text: String = self.pending.drain(..start).collect();
                self.messages_from(&text);
            }
            let end = match self.pending.find("\n}\n") {
                Some(n) => n + 2,
                None if at_end && self.pending.trim_end().ends_with("\n}") => self.pending.trim_end().len(),
                None => break, // the rest is still coming
            };
            match serde_json::from_str::<FioReport>(&self.pending[..end]) {
                Ok(report) => {
                    self.pending.drain(..end);
                    self.reports += 1;
                    if let Some(previous) = self.output.last.replace(report) {
                        self.output.interim.push(Snapshot::of(&previous));
                    }
                }
                Err(error) => {
                    // Not a report after all: keep its first line as text and go on.
                    self.errors
                        .push(FioError::Json { index: self.reports + self.errors.len(), message: error.to_string() });
                    let line_end = self.pending.find('\n').map_or(self.pending.len(), |n| n + 1);
                    let line: String = self.pending.drain(..line_end).collect();
                    self.messages_from(&line);
                }
            }
        }
        self.reports - before
    }

    fn messages_from(&mut self, text: &str) {
        self.output.messages.extend(text.lines().filter(|line| !line.trim().is_empty()).map(str::to_string));
    }

    /// The reports read so far (the last one may be an interim one while fio runs).
    pub fn output(&self) -> &FioOutput {
        &self.output
    }

    /// Ends the input: a trailing partial line becomes a message.
    pub fn finish(mut self) -> Result<FioOutput, FioError> {
        self.drain(true);
        let rest = std::mem::take(&mut self.pending);
        self.messages_from(&rest);
        if self.output.last.is_none() {
            if let Some(error) = self.errors.into_iter().next() {
                return Err(error);
            }
            return Err(FioError::NoReport(self.output.messages));
        }
        Ok(self.output)
    }
}

/// Byte offset of the first line that starts with `{`.
fn report_start(text: &str) -> Option<usize> {
    if text.starts_with('{') {
        return Some(0);
    }
    text.find("\n{").map(|n| n + 1)
}

/// Parses a complete fio output file.
pub fn parse_output(text: &str) -> Result<FioOutput, FioError> {
    let mut reader = FioOutputReader::new();
    reader.push(text);
    reader.finish()
}

/// What one fio run measured, in the units of a [`RunResult`](crate::RunResult).
#[derive(Debug, Clone, PartialEq)]
pub struct FioMeasurement {
    /// E.g. `fio-3.33`.
    pub fio_version: String,
    /// Measured seconds (the longest job's `job_runtime`).
    pub duration_seconds: f64,
    /// Completed reads and writes.
    pub ios: u64,
    pub bytes: u64,
    /// I/O errors (`total_err` under `continue_on_error`, at least one per failed job).
    pub errors: u64,
    /// The first error, e.g. `job rr: Input/output error (os error 5)`.
    pub first_error: Option<String>,
    /// Total latency over every job and both directions, microseconds.
    pub latency_us: Latency,
    /// CPU seconds of fio's jobs over the measured time: (usr + sys) x runtime, summed.
    pub initiator_seconds: f64,
    /// One sample per status interval of the measured time.
    pub time_series: Vec<Sample>,
    /// The measured time in wall-clock milliseconds since the epoch: [start, end].
    pub window_ms: (f64, f64),
}

/// How far (ms) the counters' start of an interim report may lie before that of the last
/// interim report and still belong to the measured time: fio writes reports once a
/// second and the ramp is one second or more whenever a report falls inside it, so ramp
/// reports start at least this much earlier.
fn ramp_gap_ms(ramp_ms: f64) -> f64 {
    (ramp_ms / 2.0).clamp(100.0, 1000.0)
}

/// Turns fio's output into a measurement. `ramp_ms` is the job's `ramp_time`;
/// `percentiles` the percentiles to report (e.g. 50, 90, 99, 99.9, 99.99).
pub fn measure(output: &FioOutput, ramp_ms: f64, percentiles: &[f64]) -> Result<FioMeasurement, FioError> {
    let last = output.last.as_ref().ok_or_else(|| FioError::NoReport(output.messages.clone()))?;
    if last.jobs.is_empty() {
        return Err(FioError::NoJobs);
    }
    let final_snapshot = Snapshot::of(last);
    let runtime_ms = final_snapshot.runtime_ms;

    // The measured interim reports: those whose counters started with the last interim
    // report's, unless even that one still counted the ramp (a run shorter than the
    // status interval after its ramp).
    let measured: Vec<&Snapshot> = match output.interim.last() {
        Some(latest)
            if ramp_ms <= 0.0
                || latest.counters_start_ms() >= final_snapshot.counters_start_ms() - ramp_gap_ms(ramp_ms) =>
        {
            let start = latest.counters_start_ms();
            output
                .interim
                .iter()
                .filter(|s| {
                    s.runtime_ms > 0.0
                        && s.runtime_ms <= runtime_ms
                        && (ramp_ms <= 0.0 || s.counters_start_ms() >= start - ramp_gap_ms(ramp_ms))
                })
                .collect()
        }
        _ => Vec::new(),
    };
    // The final report is written after the jobs have torn down; an interim report's
    // start is closer to the truth.
    let window_start = measured.last().map_or(final_snapshot.counters_start_ms(), |s| s.counters_start_ms());
    let window = (window_start, window_start + runtime_ms);

    let mut ios = 0;
    let mut bytes = 0;
    let mut errors = 0;
    let mut first_error = None;
    let mut initiator_seconds = 0.0;
    let mut directions = Vec::new();
    for job in &last.jobs {
        initiator_seconds += (job.usr_cpu + job.sys_cpu) / 100.0 * job.job_runtime / 1000.0;
        let counted = job.total_err.max(u64::from(job.error != 0));
        errors += counted;
        if counted > 0 && first_error.is_none() {
            let errno = if job.first_error != 0 { job.first_error } else { job.error };
            first_error = Some(format!("job {}: {}", job.jobname, errno_text(errno)));
        }
        for direction in [&job.read, &job.write] {
            ios += direction.completed();
            bytes += direction.io_bytes;
            if direction.lat_ns.count > 0 {
                directions.push(&direction.lat_ns);
            }
        }
    }

    Ok(FioMeasurement {
        fio_version: last.fio_version.clone(),
        duration_seconds: runtime_ms / 1000.0,
        ios,
        bytes,
        errors,
        first_error,
        latency_us: merged_latency(&directions, &final_snapshot.bins, percentiles),
        initiator_seconds,
        time_series: time_series(&measured, &final_snapshot),
        window_ms: window,
    })
}

fn errno_text(errno: i64) -> String {
    i32::try_from(errno)
        .map_or_else(|_| format!("error {errno}"), |code| std::io::Error::from_raw_os_error(code).to_string())
}

/// One latency distribution from several (job, direction) parts: count-weighted mean,
/// pooled standard deviation, overall min and max, percentiles from the merged bins
/// (or, without bins, the largest of the parts' own percentiles: an upper bound).
fn merged_latency(parts: &[&FioLatency], bins: &BTreeMap<u64, u64>, wanted: &[f64]) -> Latency {
    let count: u64 = parts.iter().map(|p| p.count).sum();
    if count == 0 {
        return Latency {
            mean: 0.0,
            min: 0.0,
            max: 0.0,
            stddev: 0.0,
            percentiles: wanted.iter().map(|&percentile| Percentile { percentile, value: 0.0 }).collect(),
        };
    }
    let n = count as f64;
    let mean = parts.iter().map(|p| p.count as f64 * p.mean).sum::<f64>() / n;
    let second_moment = parts.iter().map(|p| p.count as f64 * (p.stddev * p.stddev + p.mean * p.mean)).sum::<f64>() / n;
    let stddev = (second_moment - mean * mean).max(0.0).sqrt();
    let min = parts.iter().map(|p| p.min).fold(f64::INFINITY, f64::min);
    let max = parts.iter().map(|p| p.max).fold(0.0, f64::max);
    let values: Vec<f64> = if bins.values().sum::<u64>() > 0 {
        percentiles_from_bins(bins, wanted)
    } else {
        wanted
            .iter()
            .map(|&p| parts.iter().filter_map(|part| fio_percentile(&part.percentile, p)).fold(0.0, f64::max))
            .collect()
    };
    // Bucket values are bucket midpoints: never report one above the exact maximum, and
    // keep the values ascending.
    let mut floor = 0.0f64;
    let percentiles = wanted
        .iter()
        .zip(values)
        .map(|(&percentile, value)| {
            floor = floor.max(value.min(max));
            Percentile { percentile, value: floor / 1e3 }
        })
        .collect();
    Latency { mean: mean / 1e3, min: min.min(max) / 1e3, max: max / 1e3, stddev: stddev / 1e3, percentiles }
}

/// fio's percentile map has keys like `"99.900000"`.
fn fio_percentile(map: &BTreeMap<String, f64>, percentile: f64) -> Option<f64> {
    map.iter().find(|(key, _)| key.parse::<f64>().is_ok_and(|p| (p - percentile).abs() < 1e-6)).map(|(_, value)| *value)
}

/// Percentiles (ns) of a histogram, by fio's rule (`stat.c: calc_clat_percentiles`): the
/// first bucket at which the running count reaches `p / 100 * total`.
pub fn percentiles_from_bins(bins: &BTreeMap<u64, u64>, wanted: &[f64]) -> Vec<f64> {
    let total: u64 = bins.values().sum();
    wanted
        .iter()
        .map(|&p| {
            let threshold = p / 100.0 * total as f64;
            let mut running = 0u64;
            for (&value, &count) in bins {
                running += count;
                if running as f64 >= threshold {
                    return value as f64;
                }
            }
            bins.keys().next_back().map_or(0.0, |&v| v as f64)
        })
        .collect()
}

/// Per-interval samples from consecutive cumulative reports (the final one last).
/// Intervals shorter than 200 ms (the final report usually follows the last interim one
/// closely) are folded into the next sample.
fn time_series(measured: &[&Snapshot], final_snapshot: &Snapshot) -> Vec<Sample> {
    let mut points: Vec<&Snapshot> = measured.to_vec();
    if points.last().map_or(true, |last| final_snapshot.runtime_ms >= last.runtime_ms + 200.0) {
        points.push(final_snapshot);
    } else if let Some(last) = points.last_mut() {
        // The final report replaces an interim one written moments before it.
        *last = final_snapshot;
    }
    let mut samples = Vec::new();
    let empty = Snapshot::default();
    let mut previous = &empty;
    for point in points {
        let seconds = (point.runtime_ms - previous.runtime_ms) / 1000.0;
        if seconds < 0.2 && previous.runtime_ms > 0.0 {
            continue;
        }
        if let Some(sample) = interval(previous, point) {
            samples.push(sample);
            previous = point;
        }
    }
    samples
}

/// The sample between two cumulative reports of the same counters.
fn interval(previous: &Snapshot, point: &Snapshot) -> Option<Sample> {
    let seconds = (point.runtime_ms - previous.runtime_ms) / 1000.0;
    if seconds <= 0.0 || point.ios < previous.ios {
        return None;
    }
    let mut bins = BTreeMap::new();
    for (value, count) in &point.bins {
        let before = previous.bins.get(value).copied().unwrap_or(0);
        if *count > before {
            bins.insert(*value, count - before);
        }
    }
    let p99 = if bins.is_empty() { 0.0 } else { percentiles_from_bins(&bins, &[99.0])[0] };
    Some(Sample {
        t_seconds: point.runtime_ms / 1000.0,
        iops: (point.ios - previous.ios) as f64 / seconds,
        bytes_per_second: point.bytes.saturating_sub(previous.bytes) as f64 / seconds,
        p99_us: p99 / 1e3,
    })
}

/// The interval between the two latest reports while fio runs (for a progress line).
/// `None` during the ramp: fio counts the ramp's I/Os but records no latency for them.
pub fn latest_interval(output: &FioOutput) -> Option<Sample> {
    let last = Snapshot::of(output.last.as_ref()?);
    if last.bins.is_empty() {
        return None;
    }
    match output.interim.last() {
        Some(previous) if (previous.counters_start_ms() - last.counters_start_ms()).abs() < 100.0 => {
            interval(previous, &last)
        }
        _ => interval(&Snapshot::default(), &last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from `fio --output-format=json+ --status-interval=1` (fio 3.33, Sluice's fio
    /// engine against `sluice serve`): 2 jobs of 4 KiB random 70/30 read/write at iodepth
    /// 4, `ramp_time=1s`, `runtime=2500ms`. Holds one report written during the ramp,
    /// two measured interim reports and the final report.
    const RANDRW: &str = include_str!("../tests/data/fio-randrw-json-plus.json");
    const PERCENTILES: [f64; 6] = [50.0, 90.0, 95.0, 99.0, 99.9, 99.99];

    #[test]
    fn reads_every_report_and_the_final_one() {
        let output = parse_output(RANDRW).unwrap();
        assert_eq!(output.interim.len(), 3);
        let last = output.last.as_ref().unwrap();
        assert_eq!(last.fio_version, "fio-3.33");
        assert_eq!(last.jobs.len(), 2);
        assert_eq!(last.jobs[0].job_runtime, 2500.0);
        assert!(output.messages.is_empty(), "{:?}", output.messages);
    }

    #[test]
    fn measurement_adds_up_jobs_and_directions() {
        let output = parse_output(RANDRW).unwrap();
        let m = measure(&output, 1000.0, &PERCENTILES).unwrap();
        let last = output.last.as_ref().unwrap();
        let ios: u64 = last.jobs.iter().map(|j| j.read.lat_ns.count + j.write.lat_ns.count).sum();
        assert_eq!(m.ios, ios);
        assert_eq!(m.bytes, ios * 4096);
        assert_eq!(m.duration_seconds, 2.5);
        assert_eq!(m.errors, 0);
        assert_eq!(m.first_error, None);
        // (usr + sys) % of 2.5 s, per job.
        let cpu: f64 = last.jobs.iter().map(|j| (j.usr_cpu + j.sys_cpu) / 100.0 * 2.5).sum();
        assert!((m.initiator_seconds - cpu).abs() < 1e-9);
        assert!(m.initiator_seconds > 0.5 && m.initiator_seconds < 5.0);
        // The merged mean lies between the directions' means.
        let means: Vec<f64> = last.jobs.iter().flat_map(|j| [j.read.lat_ns.mean, j.write.lat_ns.mean]).collect();
        let lo = means.iter().cloned().fold(f64::INFINITY, f64::min) / 1e3;
        let hi = means.iter().cloned().fold(0.0, f64::max) / 1e3;
        assert!(lo <= m.latency_us.mean && m.latency_us.mean <= hi);
        assert!(m.latency_us.min <= m.latency_us.mean && m.latency_us.mean <= m.latency_us.max);
        let values: Vec<f64> = m.latency_us.percentiles.iter().map(|p| p.value).collect();
        assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");
        assert!(values[3] > values[0] && values[5] <= m.latency_us.max);
    }

    #[test]
    fn percentiles_match_fios_own_for_one_direction() {
        let output = parse_output(RANDRW).unwrap();
        for job in &output.last.as_ref().unwrap().jobs {
            for direction in [&job.read, &job.write] {
                let ours = percentiles_from_bins(&direction.lat_ns.bins, &PERCENTILES);
                for (p, value) in PERCENTILES.iter().zip(ours) {
                    let fios = fio_percentile(&direction.lat_ns.percentile, *p).unwrap();
                    assert_eq!(value, fios, "p{p} of {}", job.jobname);
                }
                assert_eq!(direction.lat_ns.bins.values().sum::<u64>(), direction.lat_ns.count);
            }
        }
    }

    #[test]
    fn the_ramp_report_is_left_out_and_the_window_found() {
        let output = parse_output(RANDRW).unwrap();
        let m = measure(&output, 1000.0, &PERCENTILES).unwrap();
        // Interim reports at 999 ms and 1999 ms of measured time, then the final one at
        // 2500 ms: three samples; the report during the ramp (its counters started a
        // second earlier) is not one of them.
        let t: Vec<f64> = m.time_series.iter().map(|s| s.t_seconds).collect();
        assert_eq!(t, vec![0.999, 1.999, 2.5]);
        let mut counted = 0.0;
        let mut from = 0.0;
        for sample in &m.time_series {
            counted += sample.iops * (sample.t_seconds - from);
            from = sample.t_seconds;
        }
        assert!((counted - m.ios as f64).abs() < 2.0, "{counted} vs {}", m.ios);
        assert!(m.time_series.iter().all(|s| s.p99_us > 0.0 && s.iops > 0.0));
        // Counters started 1795292150201 (timestamp_ms - job_runtime of the interim reports).
        assert_eq!(m.window_ms, (1_795_292_150_201.0, 1_795_292_152_701.0));
    }

    #[test]
    fn text_lines_chunking_and_truncation() {
        // fio's notes come before the JSON in the same file; any chunking works.
        let text = format!("note: both iodepth >= 1 and synchronous I/O engine are selected\n{RANDRW}");
        let mut reader = FioOutputReader::new();
        let mut completed = 0;
        for chunk in text.as_bytes().chunks(7) {
            completed += reader.push(std::str::from_utf8(chunk).unwrap());
        }
        assert_eq!(completed, 4);
        let output = reader.finish().unwrap();
        assert_eq!(output.messages.len(), 1);
        assert_eq!(output.interim.len(), 3);
        let whole = parse_output(RANDRW).unwrap();
        assert_eq!(output.interim, whole.interim);

        // Cut off in the middle of the final report (fio killed): the last complete
        // report stands in for it.
        let cut = &RANDRW[..RANDRW.len() - 2000];
        let output = parse_output(cut).unwrap();
        assert_eq!(output.interim.len(), 2);
        assert!(measure(&output, 1000.0, &PERCENTILES).is_ok());

        // No report at all: fio's own message says why.
        let e = parse_output("fio: engine libfoo not loadable\nfio: failed to load engine\n").unwrap_err();
        assert!(e.to_string().contains("engine libfoo not loadable"), "{e}");
    }

    #[test]
    fn errors_are_counted_per_job() {
        let mut output = parse_output(RANDRW).unwrap();
        let last = output.last.as_mut().unwrap();
        last.jobs[1].total_err = 3;
        last.jobs[1].first_error = 5;
        let m = measure(&output, 1000.0, &PERCENTILES).unwrap();
        assert_eq!(m.errors, 3);
        let message = m.first_error.unwrap();
        assert!(message.contains("Input/output error"), "{message}");
        // A job stopped by an error without continue_on_error counts once.
        let last = output.last.as_mut().unwrap();
        last.jobs[1].total_err = 0;
        last.jobs[1].error = 110;
        assert_eq!(measure(&output, 1000.0, &PERCENTILES).unwrap().errors, 1);
    }

    #[test]
    fn progress_shows_the_latest_interval() {
        let mut reader = FioOutputReader::new();
        // The first report was written during the ramp: nothing to show yet.
        let end_of_first_report = RANDRW.find("\n}\n").unwrap() + 3;
        reader.push(&RANDRW[..end_of_first_report]);
        assert_eq!(latest_interval(reader.output()), None);
        let mut reader = FioOutputReader::new();
        let end_of_second_report = RANDRW.match_indices("\n}\n").nth(1).unwrap().0 + 3;
        reader.push(&RANDRW[..end_of_second_report]);
        // The second report restarted the counters after the ramp: its interval starts
        // at zero, 999 ms long.
        let sample = latest_interval(reader.output()).unwrap();
        assert_eq!(sample.t_seconds, 0.999);
        reader.push(&RANDRW[end_of_second_report..]);
        let sample = latest_interval(reader.output()).unwrap();
        assert_eq!(sample.t_seconds, 2.5);
        assert!(sample.iops > 0.0 && sample.p99_us > 0.0);
    }

    #[test]
    fn no_io_gives_zero_latency() {
        let latency = merged_latency(&[], &BTreeMap::new(), &PERCENTILES);
        assert_eq!(latency.mean, 0.0);
        assert_eq!(latency.percentiles.len(), PERCENTILES.len());
    }
}

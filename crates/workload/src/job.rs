//! The job model: what one benchmark run does, and suite files (TOML) describing
//! lists of jobs.

use std::time::Duration;

/// How offsets are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Uniformly random, block-aligned offsets over the region.
    Random,
    /// Each thread walks its own disjoint slice of the region in order, wrapping.
    Sequential,
}

impl Pattern {
    /// "random" / "sequential".
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Random => "random",
            Pattern::Sequential => "sequential",
        }
    }
}

/// One run: a workload with its load shape.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    /// Display name, e.g. "4K random read".
    pub name: String,
    /// Group the run belongs to (a sweep, a load curve), e.g. "4K RR".
    pub group: String,
    /// Random or sequential offsets.
    pub pattern: Pattern,
    /// Share of reads, 0..=100 (the rest are writes).
    pub read_percent: u8,
    /// Bytes per I/O (a multiple of 512).
    pub block_size: u32,
    /// Worker threads, each with its own queue.
    pub threads: u32,
    /// Outstanding I/Os per thread (closed loop), or the most outstanding per thread
    /// when rate limited.
    pub queue_depth: u32,
    /// Measured time.
    pub duration: Duration,
    /// Unmeasured warm-up before `duration`.
    pub ramp: Duration,
    /// Bytes of the namespace the job touches from offset 0; `None`: the whole
    /// namespace. Sequential jobs split it into one disjoint slice per thread.
    pub region_bytes: Option<u64>,
    /// Open loop: this many I/Os per second in total, exponential inter-arrival
    /// times, latency measured from the intended issue time.
    pub rate_limit_iops: Option<f64>,
    /// Load level of a curve point: the rate is this percentage of the maximum
    /// measured by the group's unlimited run (filled in by the runner into
    /// `rate_limit_iops`). `None` for a plain run.
    pub load_percent: Option<f64>,
    /// Seed of the offset and arrival generators.
    pub seed: u64,
}

impl JobSpec {
    /// A closed-loop job with default duration (10 s), 1 s ramp, no region limit.
    pub fn new(
        name: &str,
        pattern: Pattern,
        read_percent: u8,
        block_size: u32,
        threads: u32,
        queue_depth: u32,
    ) -> Self {
        JobSpec {
            name: name.to_string(),
            group: name.to_string(),
            pattern,
            read_percent,
            block_size,
            threads,
            queue_depth,
            duration: Duration::from_secs(10),
            ramp: Duration::from_secs(1),
            region_bytes: None,
            rate_limit_iops: None,
            load_percent: None,
            seed: 0x5EED,
        }
    }

    /// Sets the group.
    pub fn group(mut self, group: &str) -> Self {
        self.group = group.to_string();
        self
    }

    /// The region used against a namespace of `capacity` bytes.
    pub fn effective_region(&self, capacity: u64) -> u64 {
        self.region_bytes.map_or(capacity, |region| region.min(capacity))
    }

    /// Checks the job makes sense; the error names the field.
    pub fn validate(&self) -> Result<(), JobError> {
        let bad = |field: &str, message: String| Err(JobError { job: self.name.clone(), field: field.into(), message });
        if self.name.trim().is_empty() {
            return bad("name", "must not be empty".into());
        }
        if self.read_percent > 100 {
            return bad("read_percent", format!("{} is not between 0 and 100", self.read_percent));
        }
        if self.block_size == 0 || !self.block_size.is_multiple_of(512) {
            return bad("block_size", format!("{} is not a positive multiple of 512", self.block_size));
        }
        if self.block_size > 16 << 20 {
            return bad("block_size", format!("{} is larger than 16 MiB", self.block_size));
        }
        if !(1..=1024).contains(&self.threads) {
            return bad("threads", format!("{} is not between 1 and 1024", self.threads));
        }
        if !(1..=4096).contains(&self.queue_depth) {
            return bad("queue_depth", format!("{} is not between 1 and 4096", self.queue_depth));
        }
        if self.duration.is_zero() {
            return bad("duration", "must be longer than 0".into());
        }
        if let Some(region) = self.region_bytes {
            let per_thread = match self.pattern {
                Pattern::Random => region,
                Pattern::Sequential => region / u64::from(self.threads),
            };
            if per_thread < u64::from(self.block_size) {
                return bad("region", format!("{region} bytes leave less than one block per thread"));
            }
        }
        if let Some(rate) = self.rate_limit_iops {
            if !(rate.is_finite() && rate > 0.0) {
                return bad("rate_iops", format!("{rate} is not a positive number of I/Os per second"));
            }
            if rate > 1e9 {
                return bad("rate_iops", format!("{rate} I/Os per second is impossible to issue"));
            }
        }
        if let Some(load) = self.load_percent {
            if !(load.is_finite() && load > 0.0 && load <= 1000.0) {
                return bad("load_percent", format!("{load} is not between 0 and 1000"));
            }
        }
        Ok(())
    }

    /// Parses a suite file: a TOML list of `[[job]]` tables. Fields: `name`
    /// (required), `group`, `pattern` ("random"/"sequential", default random),
    /// `read_percent` (default 100), `block_size` ("4KiB" or bytes, default 4KiB),
    /// `threads` (1), `queue_depth` (1), `duration` ("10s", "500ms"), `ramp`,
    /// `region` (bytes), `rate_iops`, `load_percent`, `seed`.
    pub fn parse_suite(text: &str) -> Result<Vec<JobSpec>, JobError> {
        let file: SuiteFile = toml::from_str(text).map_err(|error| {
            let message = one_line(error.message());
            // The key at the error's position (type errors), else the field the
            // message quotes (unknown or missing fields).
            let line_start =
                error.span().map(|span| text[..span.start.min(text.len())].rfind('\n').map_or(0, |i| i + 1));
            let line = line_start
                .map(|start| (text[..start].matches('\n').count() + 1, text[start..].lines().next().unwrap_or("")));
            let quoted = message.split('`').nth(1).map(str::to_string);
            let keyed = line.and_then(|(_, line)| line.split_once('=')).map(|(key, _)| key.trim().to_string());
            let field = if message.starts_with("unknown field") || message.starts_with("missing field") {
                quoted.or(keyed)
            } else {
                keyed.or(quoted)
            }
            .unwrap_or_else(|| "suite".into());
            let message = match line {
                Some((number, _)) => format!("line {number}: {message}"),
                None => message,
            };
            JobError { job: String::new(), field, message }
        })?;
        if file.job.is_empty() {
            return Err(JobError { job: String::new(), field: "job".into(), message: "no [[job]] table".into() });
        }
        let mut jobs = Vec::new();
        for (index, raw) in file.job.into_iter().enumerate() {
            let label = raw.name.clone().unwrap_or_else(|| format!("job[{index}]"));
            let err = |field: &str, message: String| JobError { job: label.clone(), field: field.into(), message };
            let name = raw.name.clone().ok_or_else(|| err("name", "is missing".into()))?;
            let size = |field: &str, value: &Option<SizeValue>, default: u64| -> Result<u64, JobError> {
                match value {
                    None => Ok(default),
                    Some(SizeValue::Number(n)) => Ok(*n),
                    // The same rules as every other size of Sluice (the units crate).
                    Some(SizeValue::Text(text)) => {
                        units::parse_byte_size(text).map_err(|error| err(field, error.to_string()))
                    }
                }
            };
            let time = |field: &str, value: &Option<String>, default: Duration| -> Result<Duration, JobError> {
                match value {
                    None => Ok(default),
                    Some(text) => parse_duration(text).map_err(|message| err(field, message)),
                }
            };
            let block_size = size("block_size", &raw.block_size, 4096)?;
            let block_size =
                u32::try_from(block_size).map_err(|_| err("block_size", format!("{block_size} is too large")))?;
            let read_percent = raw.read_percent.unwrap_or(100);
            let read_percent = u8::try_from(read_percent)
                .ok()
                .filter(|percent| *percent <= 100)
                .ok_or_else(|| err("read_percent", format!("{read_percent} is not between 0 and 100")))?;
            let threads = raw.threads.unwrap_or(1);
            let threads = u32::try_from(threads).map_err(|_| err("threads", format!("{threads} is out of range")))?;
            let queue_depth = raw.queue_depth.unwrap_or(1);
            let queue_depth =
                u32::try_from(queue_depth).map_err(|_| err("queue_depth", format!("{queue_depth} is out of range")))?;
            let job = JobSpec {
                group: raw.group.clone().unwrap_or_else(|| name.clone()),
                name,
                pattern: raw.pattern.unwrap_or(Pattern::Random),
                read_percent,
                block_size,
                threads,
                queue_depth,
                duration: time("duration", &raw.duration, Duration::from_secs(10))?,
                ramp: time("ramp", &raw.ramp, Duration::from_secs(1))?,
                region_bytes: match &raw.region {
                    None => None,
                    Some(_) => Some(size("region", &raw.region, 0)?),
                },
                rate_limit_iops: raw.rate_iops,
                load_percent: raw.load_percent,
                seed: raw.seed.unwrap_or(0x5EED + index as u64),
            };
            job.validate()?;
            jobs.push(job);
        }
        Ok(jobs)
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A job description that does not make sense.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobError {
    /// The job's name (empty when the file as a whole is wrong).
    pub job: String,
    /// The field at fault.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.job.is_empty() {
            write!(f, "field `{}`: {}", self.field, self.message)
        } else {
            write!(f, "job {:?}, field `{}`: {}", self.job, self.field, self.message)
        }
    }
}

impl std::error::Error for JobError {}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    #[serde(default)]
    job: Vec<RawJob>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Number(u64),
    Text(String),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Option<String>,
    group: Option<String>,
    pattern: Option<Pattern>,
    read_percent: Option<i64>,
    block_size: Option<SizeValue>,
    threads: Option<i64>,
    queue_depth: Option<i64>,
    duration: Option<String>,
    ramp: Option<String>,
    region: Option<SizeValue>,
    rate_iops: Option<f64>,
    load_percent: Option<f64>,
    seed: Option<u64>,
}

/// "1s", "300ms", "2m", "500us", "1.5s".
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 =
        number.parse().map_err(|_| format!("duration {text:?} must start with a number, e.g. \"10s\" or \"300ms\""))?;
    let seconds = match unit.trim() {
        "s" | "" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("duration {text:?} has unknown unit {other:?}; use ms, s, m or h")),
    };
    if !seconds.is_finite() || seconds > 1e7 {
        return Err(format!("duration {text:?} is too long"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_files_parse_and_errors_name_the_field() {
        let jobs = JobSpec::parse_suite(
            r#"
            [[job]]
            name = "a"
            pattern = "sequential"
            block_size = "128KiB"
            threads = 2
            queue_depth = 4
            duration = "300ms"
            region = "64MiB"
            [[job]]
            name = "b"
            read_percent = 70
            rate_iops = 1000.0
            "#,
        )
        .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].block_size, 128 << 10);
        assert_eq!(jobs[0].duration, Duration::from_millis(300));
        assert_eq!(jobs[1].read_percent, 70);

        let error = JobSpec::parse_suite("[[job]]\nname = \"x\"\nblock_size = \"3 parsecs\"\n").unwrap_err();
        assert_eq!(error.field, "block_size");
        let error = JobSpec::parse_suite("[[job]]\nname = \"x\"\nread_percent = 170\n").unwrap_err();
        assert_eq!(error.field, "read_percent");
        let error = JobSpec::parse_suite("[[job]]\nname = \"x\"\nqueue_depht = 1\n").unwrap_err();
        assert_eq!(error.field, "queue_depht", "{error}");
        let error = JobSpec::parse_suite("[[job]]\nname = \"x\"\nthreads = 0\n").unwrap_err();
        assert_eq!(error.field, "threads");
        let error = JobSpec::parse_suite("[[job]]\nname = \"x\"\nrate_iops = -5.0\n").unwrap_err();
        assert_eq!(error.field, "rate_iops");
        assert!(!error.to_string().contains('\n'));
        let error = JobSpec::parse_suite("[[job]]\nthreads = 1\n").unwrap_err();
        assert_eq!(error.field, "name");
        let error = JobSpec::parse_suite("[[job]]\nname = \"x\"\nqueue_depth = \"deep\"\n").unwrap_err();
        assert_eq!(error.field, "queue_depth", "{error}");
        assert!(error.to_string().contains("line 3"), "{error}");
        let error = JobSpec::parse_suite("[[job]]\nname = \"x\"\npattern = \"zigzag\"\n").unwrap_err();
        assert!(error.to_string().contains("zigzag"), "{error}");
    }

    #[test]
    fn durations_and_sizes_parse() {
        assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("fast").is_err());
        let region = |text: &str| {
            JobSpec::parse_suite(&format!("[[job]]\nname = \"x\"\nregion = \"{text}\"\n"))
                .map(|jobs| jobs[0].region_bytes)
        };
        assert_eq!(region("64MiB").unwrap(), Some(64 << 20));
        assert_eq!(region("4k").unwrap(), Some(4096));
        assert_eq!(region("1 TB").unwrap(), Some(1_000_000_000_000));
        let error = region("4X").unwrap_err();
        assert_eq!(error.field, "region");
        assert!(error.message.contains("unknown unit \"X\""), "{error}");
    }
}

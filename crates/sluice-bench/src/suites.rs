//! The named suites (from the field reports in the project brief) and the overrides
//! applied to them.

use std::time::Duration;

use workload::{JobSpec, Pattern};

/// Suite names `--suite` accepts.
pub const SUITES: &[&str] = &["quick", "four-corners", "eswa", "curves", "hci"];

/// Load levels of the `curves` suite, in % of the group's maximum rate.
pub const LOAD_LEVELS: [f64; 6] = [10.0, 50.0, 70.0, 80.0, 90.0, 100.0];

const KIB: u32 = 1024;

/// How long runs take by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scale {
    /// The suite's own durations (quick: 4 s runs; the others: 30 s).
    Full,
    /// Seconds per suite: 300 ms runs, at most 2 threads x QD 4 (for tests and a
    /// smoke check).
    Mini,
}

/// Overrides from the command line.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub duration: Option<Duration>,
    pub ramp: Option<Duration>,
    pub threads: Option<u32>,
    pub queue_depth: Option<u32>,
    pub block_size: Option<u32>,
    pub region: Option<u64>,
}

fn job(name: &str, group: &str, pattern: Pattern, read: u8, bs: u32, threads: u32, qd: u32) -> JobSpec {
    JobSpec::new(name, pattern, read, bs, threads, qd).group(group)
}

fn curve(name: &str, pattern: Pattern, read: u8, bs: u32, threads: u32, qd: u32, region: Option<u64>) -> Vec<JobSpec> {
    let mut base = job(&format!("{name} max"), name, pattern, read, bs, threads, qd);
    base.region_bytes = region;
    let mut jobs = vec![base.clone()];
    for level in LOAD_LEVELS {
        let mut point = base.clone();
        point.name = format!("{name} @{level}%");
        point.load_percent = Some(level);
        jobs.push(point);
    }
    jobs
}

/// The jobs of suite `name` for a namespace of `capacity` bytes, before overrides.
pub fn suite(name: &str, capacity: u64) -> Option<Vec<JobSpec>> {
    use Pattern::{Random as R, Sequential as S};
    let fifth = Some((capacity / 5).max(1 << 20));
    let jobs = match name {
        "four-corners" => vec![
            job("4K random read", "four-corners", R, 100, 4 * KIB, 16, 32),
            job("4K random write", "four-corners", R, 0, 4 * KIB, 8, 4),
            job("64K random read", "four-corners", R, 100, 64 * KIB, 4, 32),
            job("64K random write", "four-corners", R, 0, 64 * KIB, 4, 1),
            job("1M sequential read", "four-corners", S, 100, 1024 * KIB, 2, 8),
            job("1M sequential write", "four-corners", S, 0, 1024 * KIB, 1, 8),
        ],
        "eswa" => {
            let mut jobs = vec![
                job("4K random read 1T1Q", "eswa 4K random", R, 100, 4 * KIB, 1, 1),
                job("4K random write 1T1Q", "eswa 4K random", R, 0, 4 * KIB, 1, 1),
                job("4K random read 16T16Q", "eswa 4K random", R, 100, 4 * KIB, 16, 16),
                job("4K random write 16T16Q", "eswa 4K random", R, 0, 4 * KIB, 16, 16),
            ];
            for n in [2, 4, 8, 16] {
                jobs.push(job(&format!("8K 70/30 {n}T{n}Q"), "eswa 8K 70/30 sweep", R, 70, 8 * KIB, n, n));
            }
            jobs.push(job("8K sequential read 16T16Q", "eswa 8K sequential", S, 100, 8 * KIB, 16, 16));
            jobs.push(job("8K sequential write 16T16Q", "eswa 8K sequential", S, 0, 8 * KIB, 16, 16));
            jobs.push(job("128K sequential read 16T16Q", "eswa 128K sequential", S, 100, 128 * KIB, 16, 16));
            jobs.push(job("128K sequential write 16T16Q", "eswa 128K sequential", S, 0, 128 * KIB, 16, 16));
            // The tier comparison ran each device over 20 % of its capacity.
            for job in &mut jobs {
                job.region_bytes = fifth;
            }
            jobs
        }
        "curves" => {
            let mut jobs = curve("4K random read", R, 100, 4 * KIB, 4, 8, None);
            jobs.extend(curve("64K sequential read", S, 100, 64 * KIB, 4, 8, None));
            // Stand-ins for the vdbench database mixes: 8K random 90 % read; "Oracle"
            // spreads over the whole namespace, "SQL" over a fifth of it.
            jobs.extend(curve("SQL 90/10 (8K random 90% read)", R, 90, 8 * KIB, 4, 8, fifth));
            jobs.extend(curve("Oracle 90/10 (8K random 90% read, larger region)", R, 90, 8 * KIB, 4, 8, None));
            jobs
        }
        "hci" => vec![
            job("4K random read 16 outstanding/worker", "hci", R, 100, 4 * KIB, 4, 16),
            job("4K random 70/30 16 outstanding/worker", "hci", R, 70, 4 * KIB, 4, 16),
            job("128K sequential read 1 outstanding/worker", "hci", S, 100, 128 * KIB, 4, 1),
        ],
        "quick" => {
            let mut jobs = vec![
                job("4K random read 16x32", "four-corners", R, 100, 4 * KIB, 16, 32),
                job("4K random write 8x4", "four-corners", R, 0, 4 * KIB, 8, 4),
                job("1M sequential read 2x8", "four-corners", S, 100, 1024 * KIB, 2, 8),
                job("4K random read 1T1Q", "eswa", R, 100, 4 * KIB, 1, 1),
                job("8K 70/30 4T4Q", "eswa", R, 70, 8 * KIB, 4, 4),
                job("128K sequential read 4x1", "hci", S, 100, 128 * KIB, 4, 1),
            ];
            let mut points = curve("4K random read", R, 100, 4 * KIB, 4, 8, None);
            points.retain(|job| matches!(job.load_percent, None | Some(50.0) | Some(90.0)));
            jobs.extend(points);
            for job in &mut jobs {
                job.duration = Duration::from_secs(4);
                job.ramp = Duration::from_secs(1);
            }
            jobs
        }
        _ => return None,
    };
    let mut jobs = jobs;
    if name != "quick" {
        for job in &mut jobs {
            job.duration = Duration::from_secs(30);
            job.ramp = Duration::from_secs(3);
        }
    }
    for (index, job) in jobs.iter_mut().enumerate() {
        job.seed = 0x5EED + index as u64;
    }
    Some(jobs)
}

/// Applies the scale and the overrides (overrides win).
pub fn apply(jobs: &mut [JobSpec], scale: Scale, overrides: &Overrides) {
    for job in jobs.iter_mut() {
        if scale == Scale::Mini {
            job.duration = Duration::from_millis(300);
            job.ramp = Duration::from_millis(100);
            job.threads = job.threads.min(2);
            job.queue_depth = job.queue_depth.min(4);
        }
        if let Some(duration) = overrides.duration {
            job.duration = duration;
            // Keep the ramp short next to a short run.
            job.ramp = job.ramp.min(duration / 3);
        }
        if let Some(ramp) = overrides.ramp {
            job.ramp = ramp;
        }
        if let Some(threads) = overrides.threads {
            job.threads = threads;
        }
        if let Some(depth) = overrides.queue_depth {
            job.queue_depth = depth;
        }
        if let Some(block_size) = overrides.block_size {
            job.block_size = block_size;
        }
        if let Some(region) = overrides.region {
            job.region_bytes = Some(region);
        }
    }
}

/// Makes run names unique ("name", "name #2", ...).
pub fn dedupe_names(jobs: &mut [JobSpec]) {
    let mut seen: Vec<String> = Vec::new();
    for job in jobs.iter_mut() {
        let mut name = job.name.clone();
        let mut n = 2;
        while seen.contains(&name) {
            name = format!("{} #{n}", job.name);
            n += 1;
        }
        job.name = name.clone();
        seen.push(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_builds_valid_jobs_with_unique_names() {
        for name in SUITES {
            let mut jobs = suite(name, 1 << 30).unwrap();
            apply(&mut jobs, Scale::Mini, &Overrides::default());
            let mut names: Vec<_> = jobs.iter().map(|job| job.name.clone()).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), jobs.len(), "{name}");
            for job in &jobs {
                job.validate().unwrap();
            }
        }
        assert!(suite("nope", 1 << 30).is_none());
        let four = suite("four-corners", 1 << 30).unwrap();
        assert_eq!((four[0].threads, four[0].queue_depth), (16, 32));
        assert_eq!((four[5].threads, four[5].queue_depth, four[5].block_size), (1, 8, 1 << 20));
    }
}

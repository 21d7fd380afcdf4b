//! `sluice-sim`: runs the deterministic simulation over many seeds, or replays one.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use sim::{run_seed, Canary, RunOptions, SeedReport};

#[derive(Parser)]
#[command(name = "sluice-sim", about = "Deterministic simulation of Sluice's target, hosts, network and disk")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs seeds first-seed .. first-seed + seeds - 1; prints one line per failing seed.
    Run {
        /// How many seeds.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        first_seed: u64,
        /// Plant a known bug (lost-flush, reordered-completion, stale-read,
        /// undrained-close, missed-notice, local-compare-and-write,
        /// fence-wait-on-finisher): the run succeeds when a seed catches it, and
        /// stops there.
        #[arg(long, value_parser = parse_canary)]
        canary: Option<Canary>,
        /// Worker threads (default: one per core).
        #[arg(long)]
        jobs: Option<usize>,
        /// Stop starting new seeds after this many seconds of wall time.
        #[arg(long)]
        time_limit_s: Option<u64>,
    },
    /// Runs one seed again, printing every step.
    Replay {
        /// The seed to replay.
        seed: u64,
        /// The canary the failing run had planted.
        #[arg(long, value_parser = parse_canary)]
        canary: Option<Canary>,
        /// Only the outcome, not the trace.
        #[arg(long)]
        quiet: bool,
    },
}

fn parse_canary(name: &str) -> Result<Canary, String> {
    Canary::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Canary::ALL.iter().map(|(name, _)| *name).collect();
        format!("unknown canary '{name}'; known: {}", known.join(", "))
    })
}

fn replay_hint(report: &SeedReport, canary: Option<Canary>) -> String {
    match canary {
        Some(canary) => format!("sluice-sim replay {} --canary {}", report.seed, canary.name()),
        None => format!("sluice-sim replay {}", report.seed),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { seeds, first_seed, canary, jobs, time_limit_s } => {
            run(seeds, first_seed, canary, jobs, time_limit_s)
        }
        Command::Replay { seed, canary, quiet } => replay(seed, canary, quiet),
    }
}

fn run(
    seeds: u64,
    first_seed: u64,
    canary: Option<Canary>,
    jobs: Option<usize>,
    time_limit_s: Option<u64>,
) -> ExitCode {
    // Panics are reported per seed with their message; the default hook's backtrace
    // noise would bury the summary.
    std::panic::set_hook(Box::new(|_| {}));
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)).max(1);
    let started = Instant::now();
    let deadline = time_limit_s.map(|seconds| started + Duration::from_secs(seconds));
    let next = AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let results: Mutex<Vec<(u64, bool)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) || deadline.is_some_and(|deadline| Instant::now() > deadline) {
                    return;
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= seeds {
                    return;
                }
                let report = run_seed(first_seed.wrapping_add(index), RunOptions { canary, trace: false });
                let failed = !report.violations.is_empty();
                if failed {
                    println!("seed {} FAILED: {}", report.seed, report.violations[0]);
                    println!("  world: {}", report.plan);
                    println!("  replay: {}", replay_hint(&report, canary));
                    if canary.is_some() {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                results.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((index, failed));
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    let failed = results.iter().filter(|(_, failed)| *failed).count();
    let passed = results.len() - failed;
    if (results.len() as u64) < seeds && canary.is_none() {
        println!("time limit: {} of {seeds} seeds run", results.len());
    }
    println!("seeds: {passed} passed, {failed} failed ({:.1} s)", started.elapsed().as_secs_f64());
    match canary {
        Some(canary) => {
            let caught_at = results.iter().filter(|(_, failed)| *failed).map(|(index, _)| index + 1).min();
            match caught_at {
                Some(count) => {
                    println!("canary {} caught within {count} seeds", canary.name());
                    ExitCode::SUCCESS
                }
                None => {
                    println!("canary {} NOT caught in {} seeds", canary.name(), results.len());
                    ExitCode::FAILURE
                }
            }
        }
        None if failed == 0 => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}

fn replay(seed: u64, canary: Option<Canary>, quiet: bool) -> ExitCode {
    let report = run_seed(seed, RunOptions { canary, trace: !quiet });
    println!("seed {seed}: {}", report.plan);
    println!("  {}", report.summary);
    println!("  fingerprint {:016x}", report.fingerprint);
    if report.violations.is_empty() {
        println!("  passed");
        ExitCode::SUCCESS
    } else {
        for violation in &report.violations {
            println!("  VIOLATION: {violation}");
        }
        ExitCode::FAILURE
    }
}

//! `sluice bench hold`: what idle and lightly busy connections cost a target (issue
//! 46: "an idle connection costs at most 16 KiB").
//!
//! Brings up CONTROLLERS controllers the way the Linux host brings one up, then
//! holds them idle. Per controller:
//!
//! - an admin connection: ICReq; Fabrics Connect (QID 0, 32 entries, KATO);
//!   Property Get CAP; Property Set CC (EN, IOSQES 6, IOCQES 4, NVM command set);
//!   Property Get CSTS until RDY; Identify Controller; Set Features Number of Queues
//!   (one I/O queue); Identify Namespace; one Asynchronous Event Request held;
//! - one I/O connection: ICReq; Connect (QID 1, 128 entries, the admin queue's
//!   CNTLID); one 4 KiB read of LBA 0;
//! - then nothing but a Keep Alive on the admin queue every KATO / 2 (its answer
//!   read, the I/O connection checked at the same time) until the hold ends. The
//!   controllers' keep-alives are spread evenly over that interval (controller i of
//!   n first sends i/n of it after coming up), as those of hosts that connected at
//!   different times are, rather than bunched by when they all came up: a target
//!   whose cost per wake-up grows with its connections shows it then.
//!
//! Every controller is a host of its own (its own host NQN and host ID): 5,000 idle
//! controllers on a target are 5,000 hosts, not one host's 5,000 controllers (which
//! the target's `max_connections_per_host` would refuse anyway).
//!
//! One thread drives every connection, without a thread per controller (the host
//! library's `Controller` has a supervisor thread each, too heavy for thousands):
//! std sockets in non-blocking mode, each queue nvme-host's sans-io [`HostQueue`](nvme_host::HostQueue),
//! visited round-robin with short sleeps when nothing moved. Up to `in_flight`
//! controllers come up at once. Only the TCP connect itself blocks (std has no
//! non-blocking connect): microseconds on loopback or a LAN.
//!
//! With the target's PID, its RSS (VmRSS), open files and CPU time (utime + stime)
//! are read from /proc before the first connection, once every controller is up
//! (after the reads) and at the end of the hold, for the cost per connection and
//! the CPU the idle connections take.

mod controller;
mod holder;
mod options;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nvme_spec::NamespaceId;

use crate::{BenchArgs, BenchCommand, BenchError};
use holder::Holder;
pub use options::{
    HoldOptions, ADMIN_QUEUE_ENTRIES, DEFAULT_IN_FLIGHT, DEFAULT_KEEP_ALIVE_TIMEOUT_MS, IO_QUEUE_ENTRIES, READ_BYTES,
};
pub use report::{open_files_limit, raise_open_files_limit, HoldReport, OpenFilesLimit, ProcessSample, TargetSamples};

/// Files this process needs besides its connections (stdio, /proc reads, spare).
const SPARE_FILES: u64 = 64;

/// Brings up `options.controllers` controllers, holds them for `options.hold`,
/// closes them and says what it took. Controllers that fail are counted, not fatal;
/// `Err` is for what stops the run from starting (the open-file limit, an
/// unreadable target process).
pub fn run(options: &HoldOptions) -> Result<HoldReport, BenchError> {
    if options.controllers == 0 || options.in_flight == 0 {
        return Err(BenchError::Usage("--controllers and --in-flight must be at least 1".into()));
    }
    let limit = raise_open_files_limit()
        .map_err(|error| BenchError::Runtime(format!("cannot read the open-file limit: {error}")))?;
    let needed = 2 * options.controllers as u64 + SPARE_FILES;
    if limit.soft < needed {
        return Err(BenchError::Usage(format!(
            "{} controllers take {} connections, and this process may open only {} files (hard limit {}): raise \
             ulimit -n to at least {needed} (beyond the hard limit: as root, or in /etc/security/limits.conf) and \
             run again",
            options.controllers,
            2 * options.controllers,
            limit.soft,
            limit.hard
        )));
    }
    let sample = |pid: u32| {
        ProcessSample::read(pid)
            .map_err(|error| BenchError::Runtime(format!("cannot read the target's /proc/{pid}: {error}")))
    };
    let before = options.target_pid.map(sample).transpose()?;
    let mut holder = Holder::new(options);
    let started = Instant::now();
    holder.open();
    let open_seconds = started.elapsed().as_secs_f64();
    let after_open = options.target_pid.map(sample).transpose()?;
    let (controllers_up, reads_ok) = (holder.up, holder.reads_ok);
    // What the sample above holds: controllers lost since they came up are gone.
    let connections = 2 * holder.controllers.iter().flatten().count();
    if options.progress {
        eprintln!(
            "hold: {controllers_up} of {} controllers up in {open_seconds:.2} s; holding for {} s",
            options.controllers,
            options.hold.as_secs()
        );
    }
    let hold_started = Instant::now();
    holder.hold_until(hold_started + options.hold);
    let hold_seconds = hold_started.elapsed().as_secs_f64();
    let end = options.target_pid.map(sample).transpose()?;
    let report = HoldReport {
        controllers_requested: options.controllers,
        controllers_up,
        connections,
        open_seconds,
        reads_ok,
        failures: holder.failures,
        first_error: holder.first_error.take(),
        lost_during_hold: holder.lost_during_hold,
        controllers_at_end: holder.controllers.iter().flatten().count(),
        hold_seconds,
        keep_alive_timeout_ms: options.keep_alive_timeout_ms,
        keep_alives_sent: holder.keep_alives_sent,
        keep_alives_answered: holder.keep_alives_answered,
        target: match (options.target_pid, before, after_open, end) {
            (Some(pid), Some(before), Some(after_open), Some(end)) => {
                Some(TargetSamples { pid, before, after_open, end })
            }
            _ => None,
        },
    };
    // Dropping the holder closes every connection.
    drop(holder);
    Ok(report)
}

/// `sluice bench hold`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Brings up --controllers controllers on the target the way the Linux host does
(an admin connection: ICReq, Connect with 32 entries and KATO, Property Get CAP,
Property Set CC.EN, CSTS.RDY, Identify Controller, Number of Queues, Identify
Namespace, an Asynchronous Event Request; one I/O connection of 128 entries and
one 4 KiB read on it), each as a host of its own, from one thread, then holds
them idle for --seconds with a Keep Alive every KATO / 2 (spread evenly over
that interval across the controllers, as independent hosts' are). With --target-pid
(a target on this machine) it reports the target's RSS, open files and CPU
time before, with every controller up, and at the end, and the RSS each
connection costs. Each controller takes two file descriptors here: the soft
limit is raised to the hard one (with prlimit); raise the hard one with
ulimit -n when it is too low. Exit status 1 when any controller failed.")]
pub struct HoldArgs {
    /// The target: tcp://ADDR:PORT/NQN.
    #[arg(long)]
    target: String,
    /// Controllers to bring up (two TCP connections each).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    controllers: u64,
    /// How long to hold them once all are up, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// KATO in milliseconds (a Keep Alive goes out every KATO / 2; 0: none).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_KEEP_ALIVE_TIMEOUT_MS)]
    keep_alive_ms: u32,
    /// Controllers coming up at once.
    #[arg(long, default_value_t = DEFAULT_IN_FLIGHT as u64, value_parser = clap::value_parser!(u64).range(1..=65536))]
    in_flight: u64,
    /// The namespace each I/O queue reads.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// The target's process on this machine: its RSS, open files and CPU time are
    /// sampled from /proc.
    #[arg(long, value_name = "PID")]
    target_pid: Option<u32>,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Runs `sluice bench hold`.
pub(crate) fn command(args: &HoldArgs) -> Result<ExitCode, BenchError> {
    let (addresses, nqn) = crate::exec::parse_target(&args.target)?;
    let Some(&address) = addresses.first() else {
        return Err(BenchError::Usage(format!("--target {:?}: no address", args.target)));
    };
    if addresses.len() > 1 {
        return Err(BenchError::Usage("--target: hold takes one address".into()));
    }
    let mut options = HoldOptions::new(address, &nqn, args.controllers as usize, Duration::from_secs(args.seconds));
    options.keep_alive_timeout_ms = args.keep_alive_ms;
    options.in_flight = args.in_flight as usize;
    options.namespace = NamespaceId(args.nsid);
    options.target_pid = args.target_pid;
    options.progress = true;
    let report = run(&options)?;
    print!("{}", report.text());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json()).unwrap_or_default() + "\n";
        crate::write_file(path, &text)?;
    }
    Ok(if report.failures == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Runs `sluice bench hold` when that is the subcommand, the suite (`suite`) otherwise.
pub(crate) fn or_suite(
    args: BenchArgs,
    suite: impl FnOnce(BenchArgs) -> Result<ExitCode, BenchError>,
) -> Result<ExitCode, BenchError> {
    match &args.command {
        Some(BenchCommand::Hold(hold)) => command(hold),
        None => suite(args),
    }
}

//! The command lines of `sluice bench` and `sluice report`: options, their parsers and
//! the choices they take (how the host moves I/O, how the embedded target waits).

use std::path::PathBuf;
use std::time::Duration;

use workload::parse_duration;

use super::suites::Scale;

// Sizes follow the rules of every Sluice size (the units crate): 4k and 4KiB are
// 4096, 4KB is 4000.
fn parse_size_arg(text: &str) -> Result<u64, String> {
    units::parse_byte_size(text).map_err(|error| error.to_string())
}

fn parse_u32_size_arg(text: &str) -> Result<u32, String> {
    let bytes = parse_size_arg(text)?;
    u32::try_from(bytes).map_err(|_| format!("{text} is too large"))
}

/// `sluice bench`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "\
Suites: quick (default, about a minute), four-corners, eswa, curves, hci.
Without --target an embedded Sluice target is started on 127.0.0.1 (a free port)
with one RAM namespace. Results: a table on stdout, JSON and HTML under
target/bench/ (or --json PATH). Ctrl-C stops the current run and writes the
partial result (exit 130).

--driver fio runs every job through fio and the Sluice ioengine (build it with
scripts/build-fio-engine.sh). --compare iscsi runs the suite through fio over
NVMe/TCP to the embedded target and over iSCSI to Debian's tgt, both on sparse
files of --namespace-size, and prints them side by side (needs the tgt and
libiscsi-dev packages: scripts/setup.sh installs them).

--backend rbd --rbd-image POOL/IMAGE serves a Ceph RBD image (the cluster of
--ceph-conf or $CEPH_CONF). --compare fio-rbd runs the suite through Sluice to that
image (fio and Sluice's engine; --driver sluice: Sluice's host), then through fio's
own rbd engine straight to the same image (librbd's cache off, so writes complete
once the OSDs have them on both sides), and prints them side by side.

Sizes (--block-size, --size, --namespace-size, a suite file's block_size and
region): 4096, 0x1000, 4k or 4KiB; K, M, G, T and KiB, MiB, GiB, TiB are powers
of 1024, KB, MB, GB, TB powers of 1000 (as dd reads them; fio by default reads
4KB as 4096).

`sluice bench hold` brings up many idle controllers on a target and says what
they cost it (see `sluice bench hold --help`).",
    args_conflicts_with_subcommands = true
)]
pub struct BenchArgs {
    /// Named suite.
    #[arg(long, default_value = "quick", value_parser = clap::builder::PossibleValuesParser::new(super::suites::SUITES))]
    pub(super) suite: String,
    /// TOML file with [[job]] tables (name, group, pattern, read_percent, block_size,
    /// threads, queue_depth, duration, ramp, region, rate_iops, load_percent, seed).
    #[arg(long, conflicts_with = "suite")]
    pub(super) suite_file: Option<PathBuf>,
    /// full: the suite's durations; mini: 300 ms runs at <= 2 threads x QD 4.
    #[arg(long, value_enum, default_value = "full")]
    pub(super) scale: Scale,
    /// Measured time per run, e.g. 10s or 300ms.
    #[arg(long, value_parser = parse_duration)]
    pub(super) duration: Option<Duration>,
    /// Unmeasured warm-up per run.
    #[arg(long, value_parser = parse_duration)]
    pub(super) ramp: Option<Duration>,
    /// Worker threads per run (each with its own I/O queue).
    #[arg(long)]
    pub(super) threads: Option<u32>,
    /// Outstanding I/Os per thread.
    #[arg(long)]
    pub(super) queue_depth: Option<u32>,
    /// I/O size, e.g. 4KiB.
    #[arg(long, value_parser = parse_u32_size_arg)]
    pub(super) block_size: Option<u32>,
    /// Bytes of the namespace each job touches (from offset 0).
    #[arg(long, value_parser = parse_size_arg)]
    pub(super) size: Option<u64>,
    /// An NVMe/TCP target instead of the embedded one: tcp://ADDR:PORT/NQN.
    #[arg(long)]
    pub(super) target: Option<String>,
    /// Backend of the embedded namespace: ram, null, file (--backing-file) or rbd
    /// (--rbd-image) [default: ram].
    #[arg(long)]
    pub(super) backend: Option<String>,
    /// The Ceph RBD image behind --backend rbd and --compare fio-rbd, as POOL/IMAGE:
    /// created at --namespace-size when missing, grown when smaller (never shrunk).
    #[arg(long, value_name = "POOL/IMAGE")]
    pub(super) rbd_image: Option<String>,
    /// ceph.conf of the cluster holding --rbd-image [default: librados' own lookup:
    /// $CEPH_CONF, /etc/ceph/ceph.conf].
    #[arg(long, value_name = "PATH")]
    pub(super) ceph_conf: Option<PathBuf>,
    /// The regular file behind --backend file (created sparse at --namespace-size
    /// when missing).
    #[arg(long)]
    pub(super) backing_file: Option<PathBuf>,
    /// File backends (and tgt's LUN under --compare iscsi) bypass the page cache
    /// (O_DIRECT); by default they use it.
    #[arg(long)]
    pub(super) direct_io: bool,
    /// Size of the embedded namespace.
    #[arg(long, default_value = "1GiB", value_parser = parse_size_arg)]
    pub(super) namespace_size: u64,
    /// Threads of the embedded target's runtime [default: half the CPUs, at least 1].
    #[arg(long)]
    pub(super) target_threads: Option<usize>,
    /// How the embedded target's threads wait: sleep (a wake-up per request at low
    /// depth; it shares this machine's CPUs with the host and, for RBD, the cluster),
    /// adaptive (`sluice serve`'s default: spin briefly for the host's next command,
    /// never while requests wait on storage that wakes the thread), or busy-poll.
    #[arg(long, value_enum, default_value_t = TargetPollMode::Sleep)]
    pub(super) target_poll_mode: TargetPollMode,
    /// Precondition first: 128 KiB sequential writes over twice the capacity, then
    /// rounds of the first job until steady state (SNIA PTS) or 25 rounds (always
    /// with Sluice's host).
    #[arg(long)]
    pub(super) precondition: bool,
    /// Skip the local-baseline ceiling runs.
    #[arg(long)]
    pub(super) no_baseline: bool,
    /// Where to write the JSON result [default: target/bench/<suite>-<time>.json];
    /// the HTML report goes next to it. With --compare: the stem of the two results
    /// (<stem>-nvme-tcp.json, <stem>-iscsi.json), the report and the table (<stem>.md).
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// I/O driver: sluice (Sluice's own host) [default], or fio (fio through the Sluice
    /// ioengine; scripts/build-fio-engine.sh builds it).
    #[arg(long)]
    pub(super) driver: Option<String>,
    /// Directory holding the fio engines libsluice_fio.so and libfio_libiscsi.so
    /// [default: $SLUICE_FIO_OUT or target/fio, where scripts/build-fio-engine.sh puts them].
    #[arg(long)]
    pub(super) fio_engine_dir: Option<PathBuf>,
    /// Also run the suite another way and compare: iscsi (over iSCSI to Debian's tgt,
    /// through fio's libiscsi engine) or fio-rbd (fio's rbd engine straight to
    /// --rbd-image).
    #[arg(long)]
    pub(super) compare: Option<String>,
    /// How Sluice's host (the default driver) moves I/O: adaptive (each worker's
    /// io_uring ring, spinning while completions keep coming, then sleeping),
    /// busy-poll (spin always), sleep (never spin), blocking (blocking sockets, no
    /// io_uring), or auto: sleep against the embedded target (it shares this
    /// machine's CPUs, and a spinning host takes them from it: measured 157 K vs
    /// 334 K IOPS for 4K random read 4x8 on 2 CPUs), adaptive against --target.
    /// Also the Sluice fio engine's `host_io` under --driver fio and --compare; under
    /// --compare fio-rbd, busy-poll also makes fio's rbd engine spin (busy_poll=1).
    #[arg(long, value_enum, default_value_t = HostIo::Auto)]
    pub(super) host_io: HostIo,
    /// Sluice's host: how long one I/O command may take, in milliseconds, before
    /// it counts as failed (and at most how long connecting may take). A target
    /// that stops answering costs a run about this long, plus the controller loss
    /// time (5 s), after its window [default: 10000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) timeout: Option<u64>,
    /// The management socket of the `sluice serve` behind --target: the bench reads
    /// the namespace's QoS limits and throttle counters there before and after the
    /// suite, and warns when they held it back [default: the default management
    /// socket, when the target is on this machine].
    #[arg(long, value_name = "PATH")]
    pub(super) target_rpc_socket: Option<PathBuf>,
    /// `sluice bench hold`; none: a suite.
    #[command(subcommand)]
    pub(super) command: Option<BenchCommand>,
}

/// `sluice bench`'s subcommands (without one: a suite).
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Bring up many controllers on a target (the Linux host's way, each with one
    /// I/O queue and one 4 KiB read), hold them idle with keep-alives, and report
    /// the target's RSS, open files and CPU per connection.
    Hold(super::hold::HoldArgs),
}

/// `--target-poll-mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetPollMode {
    Sleep,
    Adaptive,
    BusyPoll,
}

impl TargetPollMode {
    pub fn poll_mode(self) -> target_server::PollMode {
        match self {
            TargetPollMode::Sleep => target_server::PollMode::Sleep,
            TargetPollMode::Adaptive => target_server::PollMode::ADAPTIVE,
            TargetPollMode::BusyPoll => target_server::PollMode::BusyPoll,
        }
    }

    /// The spelling of the option's value, for notes in results.
    pub fn name(self) -> &'static str {
        match self {
            TargetPollMode::Sleep => "sleep",
            TargetPollMode::Adaptive => "adaptive",
            TargetPollMode::BusyPoll => "busy-poll",
        }
    }
}

/// `--host-io`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostIo {
    Auto,
    Adaptive,
    BusyPoll,
    Sleep,
    Blocking,
}

impl HostIo {
    /// The host's I/O path against a target that runs on this machine
    /// (`shares_cpus`) or elsewhere.
    pub fn io_path(self, shares_cpus: bool) -> nvme_host_client::IoPath {
        use nvme_host_client::{IoPath, PollMode};
        match self {
            HostIo::Auto if shares_cpus => IoPath::Ring(PollMode::Sleep),
            HostIo::Auto | HostIo::Adaptive => IoPath::Ring(PollMode::ADAPTIVE),
            HostIo::BusyPoll => IoPath::Ring(PollMode::BusyPoll),
            HostIo::Sleep => IoPath::Ring(PollMode::Sleep),
            HostIo::Blocking => IoPath::Blocking,
        }
    }
}

/// `sluice report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Result files written by `sluice bench --json`.
    #[arg(required = true)]
    pub(super) results: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, default_value = "report.html")]
    pub(super) output: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_rules_of_every_sluice_size() {
        assert_eq!(parse_size_arg("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size_arg("1g"), Ok(1 << 30));
        assert_eq!(parse_size_arg("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_u32_size_arg("4k"), Ok(4096));
        assert_eq!(parse_u32_size_arg("4KB"), Ok(4000));
        assert_eq!(parse_u32_size_arg("4GiB"), Err("4GiB is too large".to_string()));
        assert!(parse_size_arg("4 parsecs").unwrap_err().contains("unknown unit"));
    }
}

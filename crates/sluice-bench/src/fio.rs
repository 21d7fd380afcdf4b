//! `--driver fio`: every job of a suite becomes one fio job file, run by Debian's fio
//! through an external ioengine: Sluice's (`fio/sluice_engine.c` over Sluice's host
//! library, built by `scripts/build-fio-engine.sh`) for NVMe/TCP, or fio's own libiscsi
//! engine (built by the same script from the same fio sources) for iSCSI.
//!
//! fio writes `--output-format=json+` with a report every second; the reports give the
//! time series, the final one the result (`bench_results::fio`). Jobs run as processes
//! (fio's default), so fio's per-job CPU figures (`getrusage(RUSAGE_SELF)` in the job's
//! process) include the host library's threads. The target's CPU time is sampled from
//! /proc while fio runs and read over fio's measured window.
//!
//! Job files, fio's output and its log stay next to the result (`<result>-fio/`), so a
//! run can be repeated by hand with `fio --output-format=json+ FILE`.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bench_results::fio::{measure, FioMeasurement, FioOutputReader};
use workload::{JobSpec, Pattern, RunControl, PERCENTILES};

use super::exec::{check_fits, Endpoint, Progress, Protocol, TargetCpu};
use super::BenchError;

/// File name of Sluice's fio engine (scripts/build-fio-engine.sh).
pub const NVME_ENGINE: &str = "libsluice_fio.so";
/// File name of fio's libiscsi engine built as an external engine (same script).
pub const ISCSI_ENGINE: &str = "libfio_libiscsi.so";

/// fio and the engines it loads.
#[derive(Clone, Debug)]
pub struct FioTools {
    pub fio: PathBuf,
    /// `fio --version`, e.g. `fio-3.33`.
    pub version: String,
    pub nvme_engine: PathBuf,
    pub iscsi_engine: Option<PathBuf>,
}

/// Where the engines are looked for: `--fio-engine-dir` alone when given; otherwise
/// `$SLUICE_FIO_OUT` (the build script's output directory), `target/fio` under the
/// current directory, next to the executable's target directory, and under the
/// repository this binary was built from.
fn engine_dirs(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(dir) = explicit {
        return vec![dir.to_path_buf()];
    }
    let mut dirs = Vec::new();
    if let Some(out) = std::env::var_os("SLUICE_FIO_OUT") {
        dirs.push(PathBuf::from(out));
    }
    dirs.push(PathBuf::from("target/fio"));
    if let Some(profile_dir) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
        // target/release/sluice -> target/fio
        if let Some(target_dir) = profile_dir.parent() {
            dirs.push(target_dir.join("fio"));
        }
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fio"));
    dirs
}

fn find_engine(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    dirs.iter().map(|dir| dir.join(name)).find(|path| path.is_file()).map(|path| path.canonicalize().unwrap_or(path))
}

fn shown(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// Finds fio and the engines; `what` names the option that needs them in errors.
pub fn find_tools(engine_dir: Option<&Path>, need_iscsi: bool, what: &str) -> Result<FioTools, BenchError> {
    let fio = std::env::var_os("FIO").map_or_else(|| PathBuf::from("fio"), PathBuf::from);
    let version = match Command::new(&fio).arg("--version").output() {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or("fio").trim().to_string()
        }
        Ok(output) => {
            return Err(BenchError::Runtime(format!(
                "{what}: '{} --version' failed ({})",
                fio.display(),
                output.status
            )))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(BenchError::Runtime(format!(
                "{what}: fio is not installed: apt-get install fio (scripts/setup.sh installs it)"
            )))
        }
        Err(error) => return Err(BenchError::Runtime(format!("{what}: cannot run {}: {error}", fio.display()))),
    };
    let dirs = engine_dirs(engine_dir);
    let nvme_engine = find_engine(&dirs, NVME_ENGINE).ok_or_else(|| {
        BenchError::Runtime(format!(
            "{what}: the Sluice fio engine {NVME_ENGINE} is not built: run scripts/build-fio-engine.sh (looked in {})",
            shown(&dirs)
        ))
    })?;
    let iscsi_engine = find_engine(&dirs, ISCSI_ENGINE);
    if need_iscsi && iscsi_engine.is_none() {
        let hint = if Path::new("/usr/include/iscsi/iscsi.h").exists() {
            "run scripts/build-fio-engine.sh"
        } else {
            "install Debian's libiscsi-dev (scripts/setup.sh does), then run scripts/build-fio-engine.sh"
        };
        return Err(BenchError::Runtime(format!(
            "{what}: fio's libiscsi engine {ISCSI_ENGINE} is not built (Debian's fio has no libiscsi engine built in): {hint} (looked in {})",
            shown(&dirs)
        )));
    }
    Ok(FioTools { fio, version, nvme_engine, iscsi_engine })
}

/// fio escapes `:` in file names (it separates several files).
fn fio_escape(text: &str) -> String {
    text.replace(':', "\\:")
}

/// A job name as an fio section name and a file name: letters, digits, `.`, `_`, `-`.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-').to_string();
    if out.is_empty() {
        "job".into()
    } else {
        out
    }
}

fn milliseconds(duration: Duration) -> u128 {
    duration.as_millis()
}

/// What fio's rbd engine runs with under `--compare fio-rbd`: librbd's cache off, so
/// that a write completes once the OSDs have it, as through Sluice (which advertises
/// no volatile write cache). With librbd's defaults the engine measures librbd's
/// write-around cache instead, which completes writes before they reach an OSD
/// (measured on the test cluster: 4 KiB writes at fio QD1 "complete" at 6 K IOPS
/// while the OSD's own counters show about 180 of them outstanding; with the cache
/// off, 1.5 K IOPS).
pub const RBD_DURABLE_CEPH_ARGS: &str = "--rbd_cache=false";

/// The fio job file for `job` over `region` bytes of `endpoint`'s namespace.
pub fn job_file(job: &JobSpec, region: u64, endpoint: &Endpoint, engine: &Path) -> String {
    let mut lines = vec![
        format!("; sluice bench --driver fio: {}", job.name),
        "; repeat by hand: fio --output-format=json+ THIS-FILE".to_string(),
        "[global]".to_string(),
    ];
    // The engine first: fio knows an external engine's options only once loaded.
    if endpoint.protocol == Protocol::Rbd {
        lines.push("ioengine=rbd".to_string());
    } else {
        lines.push(format!("ioengine=external:{}", engine.display()));
    }
    match endpoint.protocol {
        Protocol::NvmeTcp => {
            if endpoint.paths.len() > 1 {
                // Multipath: every path as host:port (IPv6 in brackets).
                let paths: Vec<String> = endpoint.paths.iter().map(ToString::to_string).collect();
                lines.push(format!("traddr={}", paths.join(",")));
            } else {
                lines.push(format!("traddr={}", endpoint.address.ip()));
            }
            lines.push(format!("trsvcid={}", endpoint.address.port()));
            lines.push(format!("subnqn={}", endpoint.nqn));
            lines.push(format!("nsid={}", endpoint.nsid.0));
            lines.push(format!("host_io={}", host_io_name(endpoint.host_io)));
            // Each job (each numjobs clone) connects its own controller with one I/O
            // queue: the same shape as Sluice's host, one queue per thread.
        }
        Protocol::Iscsi { .. } => {
            let url = match endpoint.address {
                SocketAddr::V4(v4) => format!("iscsi://{v4}/{}/{}", endpoint.nqn, endpoint.nsid.0),
                SocketAddr::V6(v6) => {
                    format!("iscsi://[{}]:{}/{}/{}", v6.ip(), v6.port(), endpoint.nqn, endpoint.nsid.0)
                }
            };
            lines.push(format!("filename={}", fio_escape(&url)));
            // One iSCSI session per job (each numjobs clone), again one queue per thread.
            lines.push("initiator=iqn.2026-11.io.sluice:bench-initiator".to_string());
        }
        Protocol::Rbd => {
            // The cluster is librados' default lookup ($CEPH_CONF): the same one the
            // Sluice side opened. Each job (numjobs clone) opens the image itself.
            lines.insert(
                2,
                format!("; with CEPH_ARGS={RBD_DURABLE_CEPH_ARGS} (writes acknowledged once the OSDs have them)"),
            );
            let (pool, image) = endpoint.nqn.split_once('/').unwrap_or(("rbd", &endpoint.nqn));
            lines.push("clientname=admin".to_string());
            lines.push(format!("pool={}", fio_escape(pool)));
            lines.push(format!("rbdname={}", fio_escape(image)));
            // The same way of waiting as the Sluice side's initiator (`--host-io`):
            // on a machine whose idle CPUs are expensive to wake, a spinning
            // initiator changes the result more than anything else does (measured:
            // QD1 reads 20-30 % faster on both sides), so the two are compared like
            // with like. fio's engine has no adaptive mode: it sleeps then.
            let busy_poll = endpoint.host_io == nvme_host_client::IoPath::Ring(nvme_host_client::PollMode::BusyPoll);
            lines.push(format!("busy_poll={}", u8::from(busy_poll)));
        }
    }
    let read = job.read_percent;
    let rw = match (job.pattern, read) {
        (Pattern::Random, 100) => "randread",
        (Pattern::Random, 0) => "randwrite",
        (Pattern::Random, _) => "randrw",
        (Pattern::Sequential, 100) => "read",
        (Pattern::Sequential, 0) => "write",
        (Pattern::Sequential, _) => "rw",
    };
    lines.push(format!("rw={rw}"));
    if read != 0 && read != 100 {
        lines.push(format!("rwmixread={read}"));
    }
    lines.push(format!("bs={}", job.block_size));
    lines.push(format!("iodepth={}", job.queue_depth));
    lines.push(format!("numjobs={}", job.threads));
    let block = u64::from(job.block_size);
    match job.pattern {
        Pattern::Random => {
            // Every thread over the whole region, uniformly (no random map, which would
            // make each pass visit every block once).
            lines.push("offset=0".into());
            lines.push(format!("size={}", region / block * block));
            lines.push("norandommap=1".into());
        }
        Pattern::Sequential => {
            // Each thread walks its own slice, as Sluice's host does.
            let slice = region / u64::from(job.threads) / block * block;
            lines.push("offset=0".into());
            lines.push(format!("size={slice}"));
            if job.threads > 1 {
                lines.push(format!("offset_increment={slice}"));
            }
        }
    }
    lines.push(format!("randseed={}", job.seed));
    lines.push("time_based=1".into());
    lines.push(format!("runtime={}ms", milliseconds(job.duration).max(1)));
    lines.push(format!("ramp_time={}ms", milliseconds(job.ramp)));
    if let Some(rate) = job.rate_limit_iops {
        // fio limits each direction separately: split the rate by the mix.
        let per_job = rate / f64::from(job.threads);
        let share = |percent: u8| ((per_job * f64::from(percent) / 100.0).round() as u64).max(1);
        let value = match read {
            100 => format!("{}", share(100)),
            0 => format!(",{}", share(100)),
            _ => format!("{},{}", share(read), share(100 - read)),
        };
        lines.push(format!("rate_iops={value}"));
        lines.push("rate_process=poisson".into());
    }
    // Count I/O errors and go on, as Sluice's host does.
    lines.push("continue_on_error=io".into());
    // Total latency (submission to completion) with its histogram (json+ bins).
    lines.push("lat_percentiles=1".into());
    lines.push("clat_percentiles=0".into());
    lines.push(format!("percentile_list={}", PERCENTILES.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(":")));
    lines.push(String::new());
    lines.push(format!("[{}]", slug(&job.name)));
    lines.push(String::new());
    lines.join("\n")
}

/// The fio process running now (0: none), for [`emergency_stop`].
static RUNNING_FIO: AtomicU32 = AtomicU32::new(0);

/// On a second Ctrl-C (the process exits at once): end the running fio, which would
/// otherwise finish its job unattended.
pub fn emergency_stop() {
    let pid = RUNNING_FIO.swap(0, Ordering::SeqCst);
    if pid != 0 {
        send_signal(pid, "KILL");
    }
}

/// What watching one fio process gave.
struct Watched {
    status: std::process::ExitStatus,
    reader: FioOutputReader,
    /// (wall-clock ms, the target's cumulative CPU seconds)
    cpu_samples: Vec<(f64, f64)>,
}

/// One finished fio run.
pub struct FioRun {
    pub measurement: FioMeasurement,
    /// The target's CPU seconds over fio's measured window, when readable.
    pub target_seconds: Option<f64>,
}

/// Runs the jobs of one suite through fio, keeping the files in one directory.
pub struct FioRunner {
    pub tools: FioTools,
    dir: PathBuf,
    runs: usize,
}

/// Wall clock in milliseconds since the epoch (fio's `timestamp_ms` clock).
fn epoch_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Linear interpolation in (time, cumulative value) samples, clamped at the ends.
fn value_at(samples: &[(f64, f64)], t: f64) -> Option<f64> {
    let first = samples.first()?;
    let last = samples.last()?;
    if t <= first.0 {
        return Some(first.1);
    }
    if t >= last.0 {
        return Some(last.1);
    }
    let after = samples.iter().position(|(at, _)| *at >= t)?;
    let (t0, v0) = samples[after - 1];
    let (t1, v1) = samples[after];
    if t1 <= t0 {
        return Some(v1);
    }
    Some(v0 + (v1 - v0) * (t - t0) / (t1 - t0))
}

/// Sends `signal` (e.g. "INT") to `pid` with kill(1): this crate has no unsafe code.
pub fn send_signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The first line of fio's log that says what went wrong.
fn complaint(log: &Path, messages: &[String]) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .chain(messages.iter().map(String::as_str))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    lines
        .iter()
        .find(|line| {
            let lower = line.to_ascii_lowercase();
            lower.contains("error") || lower.contains("fail") || lower.starts_with("sluice")
        })
        .or(lines.first())
        .map_or("no message".to_string(), |line| line.to_string())
}

impl FioRunner {
    pub fn new(tools: FioTools, dir: PathBuf) -> Result<FioRunner, BenchError> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::Runtime(format!("cannot create {}: {e}", dir.display())))?;
        Ok(FioRunner { tools, dir, runs: 0 })
    }

    /// Where the job files and fio's outputs go.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `job` against `endpoint` through fio. `None`: interrupted before fio
    /// reported anything.
    pub fn run(
        &mut self,
        job: &JobSpec,
        endpoint: &Endpoint,
        stop: &RunControl,
        progress: bool,
    ) -> Result<Option<FioRun>, BenchError> {
        let region = check_fits(job, endpoint)?;
        let engine = match endpoint.protocol {
            // fio's built-in engine: no file to load.
            Protocol::NvmeTcp | Protocol::Rbd => self.tools.nvme_engine.clone(),
            Protocol::Iscsi { .. } => self
                .tools
                .iscsi_engine
                .clone()
                .ok_or_else(|| BenchError::Runtime(format!("fio's libiscsi engine {ISCSI_ENGINE} is not built")))?,
        };
        self.runs += 1;
        let base = self.dir.join(format!("{:02}-{}", self.runs, slug(&job.name)));
        let job_path = base.with_extension("fio");
        let output_path = base.with_extension("json");
        let log_path = base.with_extension("log");
        let write = |path: &Path, text: &str| {
            std::fs::write(path, text).map_err(|e| BenchError::Runtime(format!("cannot write {}: {e}", path.display())))
        };
        write(&job_path, &job_file(job, region, endpoint, &engine))?;
        write(&output_path, "")?;
        let log = std::fs::File::create(&log_path)
            .map_err(|e| BenchError::Runtime(format!("cannot write {}: {e}", log_path.display())))?;
        let log_err = log.try_clone().map_err(|e| BenchError::Runtime(format!("{}: {e}", log_path.display())))?;
        let mut command = Command::new(&self.tools.fio);
        if endpoint.protocol == Protocol::Rbd {
            command.env("CEPH_ARGS", RBD_DURABLE_CEPH_ARGS);
        }
        let mut child = command
            .arg("--output-format=json+")
            .arg("--status-interval=1")
            .arg(format!("--output={}", output_path.display()))
            .arg(&job_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| BenchError::Runtime(format!("cannot start {}: {e}", self.tools.fio.display())))?;
        let watched = self.watch(&mut child, job, endpoint.target_cpu(), stop, progress, &output_path);
        let Watched { status, reader, cpu_samples } = match watched {
            Ok(done) => done,
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(error);
            }
        };
        let interrupted = stop.load(Ordering::Relaxed);
        if interrupted && reader.output().last.is_none() {
            // Interrupted while fio was still connecting: nothing was measured.
            return Ok(None);
        }
        let where_ = format!("job file {}, log {}", job_path.display(), log_path.display());
        let output = reader.finish().map_err(|error| {
            BenchError::Runtime(format!(
                "fio {} for {:?} ({status}): {}; {where_}",
                self.tools.version,
                job.name,
                match error {
                    bench_results::fio::FioError::NoReport(messages) => complaint(&log_path, &messages),
                    other => other.to_string(),
                }
            ))
        })?;
        let measurement = measure(&output, job.ramp.as_secs_f64() * 1e3, &PERCENTILES)
            .map_err(|e| BenchError::Runtime(format!("fio output for {:?}: {e}; {where_}", job.name)))?;
        if !status.success() && !interrupted && measurement.errors == 0 {
            return Err(BenchError::Runtime(format!(
                "fio {} for {:?} exited with {status}: {}; {where_}",
                self.tools.version,
                job.name,
                complaint(&log_path, &output.messages)
            )));
        }
        let (start, end) = measurement.window_ms;
        let target_seconds = match (value_at(&cpu_samples, start), value_at(&cpu_samples, end)) {
            (Some(before), Some(after)) => Some((after - before).max(0.0)),
            _ => None,
        };
        Ok(Some(FioRun { measurement, target_seconds }))
    }

    /// Waits for fio: samples the target's CPU every 100 ms, reads fio's reports as they
    /// come (progress), passes an interrupt on, and kills a fio that overruns.
    fn watch(
        &self,
        child: &mut Child,
        job: &JobSpec,
        target_cpu: TargetCpu,
        stop: &RunControl,
        progress: bool,
        output_path: &Path,
    ) -> Result<Watched, BenchError> {
        RUNNING_FIO.store(child.id(), Ordering::SeqCst);
        let watched = self.watch_inner(child, job, target_cpu, stop, progress, output_path);
        RUNNING_FIO.store(0, Ordering::SeqCst);
        watched
    }

    fn watch_inner(
        &self,
        child: &mut Child,
        job: &JobSpec,
        target_cpu: TargetCpu,
        stop: &RunControl,
        progress: bool,
        output_path: &Path,
    ) -> Result<Watched, BenchError> {
        let mut reader = FioOutputReader::new();
        let mut file = std::fs::File::open(output_path)
            .map_err(|e| BenchError::Runtime(format!("{}: {e}", output_path.display())))?;
        let mut chunk = Vec::new();
        let mut cpu_samples = Vec::new();
        let mut printer = Progress::new(progress, &job.name);
        // Connecting (16 controllers on a busy machine, an emulated guest) and tearing
        // down take time of their own; beyond this fio is stuck.
        let limit = job.ramp + job.duration + Duration::from_secs(120);
        let started = Instant::now();
        let mut interrupted_at: Option<Instant> = None;
        let mut next_read = Instant::now() + Duration::from_millis(500);
        let status = loop {
            if let Some(seconds) = target_cpu.seconds() {
                cpu_samples.push((epoch_ms(), seconds));
            }
            if let Some(status) = child.try_wait().map_err(|e| BenchError::Runtime(format!("waiting for fio: {e}")))? {
                break status;
            }
            if stop.load(Ordering::Relaxed) && interrupted_at.is_none() {
                // fio ends its jobs on SIGINT and still writes its report.
                send_signal(child.id(), "INT");
                interrupted_at = Some(Instant::now());
            }
            let overdue =
                started.elapsed() > limit || interrupted_at.is_some_and(|at| at.elapsed() > Duration::from_secs(30));
            if overdue {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Runtime(format!(
                    "fio did not finish {:?} within {} s and was killed (see {})",
                    job.name,
                    limit.as_secs(),
                    output_path.with_extension("log").display()
                )));
            }
            if Instant::now() >= next_read {
                next_read += Duration::from_secs(1);
                chunk.clear();
                if file.read_to_end(&mut chunk).is_ok() && !chunk.is_empty() {
                    let new = reader.push(&String::from_utf8_lossy(&chunk));
                    if new > 0 {
                        if let Some(sample) = bench_results::fio::latest_interval(reader.output()) {
                            printer.show(sample.t_seconds, sample.iops, sample.bytes_per_second, sample.p99_us, 0);
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        printer.finish();
        if let Some(seconds) = target_cpu.seconds() {
            cpu_samples.push((epoch_ms(), seconds));
        }
        chunk.clear();
        let _ = file.read_to_end(&mut chunk);
        reader.push(&String::from_utf8_lossy(&chunk));
        Ok(Watched { status, reader, cpu_samples })
    }
}

/// The Sluice engine's `host_io` value for `--host-io`.
fn host_io_name(path: nvme_host_client::IoPath) -> &'static str {
    use nvme_host_client::{IoPath, PollMode};
    match path {
        IoPath::Blocking => "blocking",
        IoPath::Ring(PollMode::BusyPoll) => "busy-poll",
        IoPath::Ring(PollMode::Sleep) => "sleep",
        IoPath::Ring(PollMode::Adaptive { .. }) => "adaptive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::NamespaceId;

    fn endpoint(protocol: Protocol) -> Endpoint {
        Endpoint {
            address: "127.0.0.1:4420".parse().unwrap(),
            nqn: match protocol {
                Protocol::NvmeTcp => "nqn.2026-11.io.sluice:bench".into(),
                Protocol::Iscsi { .. } => "iqn.2026-11.io.sluice:bench".into(),
                Protocol::Rbd => "rbd/bench-image".into(),
            },
            nsid: NamespaceId(1),
            lba_bytes: 512,
            capacity: 1 << 30,
            protocol,
            embedded: None,
            host_io: nvme_host_client::IoPath::default(),
            paths: Vec::new(),
        }
    }

    fn lines(text: &str) -> Vec<&str> {
        text.lines().collect()
    }

    #[test]
    fn random_mixed_job_over_nvme() {
        let mut job = JobSpec::new("8K 70/30 4T4Q", Pattern::Random, 70, 8192, 4, 4);
        job.duration = Duration::from_secs(15);
        job.ramp = Duration::from_millis(1500);
        job.seed = 42;
        let text = job_file(&job, (1 << 30) + 100, &endpoint(Protocol::NvmeTcp), Path::new("/x/libsluice_fio.so"));
        let l = lines(&text);
        // The engine comes before its options.
        let engine = l.iter().position(|x| *x == "ioengine=external:/x/libsluice_fio.so");
        let traddr = l.iter().position(|x| *x == "traddr=127.0.0.1");
        assert!(engine.unwrap() < traddr.unwrap(), "{text}");
        for want in [
            "trsvcid=4420",
            "subnqn=nqn.2026-11.io.sluice:bench",
            "nsid=1",
            "rw=randrw",
            "rwmixread=70",
            "bs=8192",
            "iodepth=4",
            "numjobs=4",
            "size=1073741824",
            "norandommap=1",
            "randseed=42",
            "runtime=15000ms",
            "ramp_time=1500ms",
            "continue_on_error=io",
            "lat_percentiles=1",
            "percentile_list=50:90:95:99:99.9:99.99",
            "[8K-70-30-4T4Q]",
        ] {
            assert!(l.contains(&want), "{want} missing in\n{text}");
        }
        assert!(!text.contains("rate_iops"));
        assert!(!text.contains("offset_increment"));
    }

    #[test]
    fn sequential_threads_get_disjoint_slices_and_rates_split_by_mix() {
        let mut job = JobSpec::new("1M sequential read", Pattern::Sequential, 100, 1 << 20, 2, 8);
        let text = job_file(&job, 1 << 30, &endpoint(Protocol::NvmeTcp), Path::new("/e.so"));
        let l = lines(&text);
        assert!(l.contains(&"rw=read") && l.contains(&"size=536870912"), "{text}");
        assert!(l.contains(&"offset_increment=536870912"), "{text}");

        job.pattern = Pattern::Random;
        job.read_percent = 90;
        job.threads = 4;
        job.rate_limit_iops = Some(10_000.0);
        let text = job_file(&job, 1 << 30, &endpoint(Protocol::NvmeTcp), Path::new("/e.so"));
        // 2500 per job: 2250 reads and 250 writes.
        assert!(lines(&text).contains(&"rate_iops=2250,250"), "{text}");
        assert!(lines(&text).contains(&"rate_process=poisson"), "{text}");

        job.read_percent = 0;
        let text = job_file(&job, 1 << 30, &endpoint(Protocol::NvmeTcp), Path::new("/e.so"));
        assert!(lines(&text).contains(&"rate_iops=,2500"), "{text}");
    }

    #[test]
    fn iscsi_job_names_the_lun_with_escaped_colons() {
        let job = JobSpec::new("4K random write", Pattern::Random, 0, 4096, 8, 4);
        let text =
            job_file(&job, 1 << 30, &endpoint(Protocol::Iscsi { tgtd_pid: 1 }), Path::new("/x/libfio_libiscsi.so"));
        let l = lines(&text);
        assert!(l.contains(&r"filename=iscsi\://127.0.0.1\:4420/iqn.2026-11.io.sluice\:bench/1"), "{text}");
        assert!(l.contains(&"rw=randwrite"), "{text}");
        assert!(!text.contains("traddr"), "{text}");
    }

    #[test]
    fn fio_rbd_jobs_use_fio_s_own_engine_on_the_image() {
        let job = JobSpec::new("r", workload::Pattern::Random, 100, 4096, 1, 16);
        let text = job_file(&job, 1 << 30, &endpoint(Protocol::Rbd), Path::new("/x/libsluice_fio.so"));
        let l = lines(&text);
        for expected in ["ioengine=rbd", "clientname=admin", "pool=rbd", "rbdname=bench-image", "rw=randread"] {
            assert!(l.contains(&expected), "{expected} missing:\n{text}");
        }
        assert!(!text.contains("external:") && !text.contains("traddr") && !text.contains("filename"), "{text}");
        assert!(l.contains(&"busy_poll=0"), "a sleeping initiator side sleeps in fio's engine too:\n{text}");
    }

    #[test]
    fn fio_rbd_jobs_spin_when_the_sluice_side_s_initiator_does() {
        let job = JobSpec::new("r", workload::Pattern::Random, 100, 4096, 1, 1);
        let mut spinning = endpoint(Protocol::Rbd);
        spinning.host_io = nvme_host_client::IoPath::Ring(nvme_host_client::PollMode::BusyPoll);
        let text = job_file(&job, 1 << 30, &spinning, Path::new("/x/libsluice_fio.so"));
        assert!(lines(&text).contains(&"busy_poll=1"), "{text}");
        assert!(!text.contains("busy_poll=0"), "{text}");
    }

    #[test]
    fn slugs_and_interpolation() {
        assert_eq!(slug("4K random read 16x32"), "4K-random-read-16x32");
        assert_eq!(slug("SQL 90/10 (8K random 90% read)"), "SQL-90-10-8K-random-90-read");
        assert_eq!(slug("@@"), "job");
        let samples = [(0.0, 1.0), (100.0, 2.0), (200.0, 4.0)];
        assert_eq!(value_at(&samples, -5.0), Some(1.0));
        assert_eq!(value_at(&samples, 50.0), Some(1.5));
        assert_eq!(value_at(&samples, 150.0), Some(3.0));
        assert_eq!(value_at(&samples, 500.0), Some(4.0));
        assert_eq!(value_at(&[], 1.0), None);
    }

    #[test]
    fn missing_engines_name_the_build_script() {
        let dir = std::env::temp_dir().join(format!("sluice-no-engine-{}", std::process::id()));
        let error = match find_tools(Some(&dir), false, "--driver fio") {
            Err(error) => error.to_string(),
            Ok(_) => panic!("found an engine in the empty directory {}", dir.display()),
        };
        if error.contains("fio is not installed") {
            return;
        }
        assert!(error.contains("scripts/build-fio-engine.sh"), "{error}");
        assert!(error.contains(NVME_ENGINE) && !error.contains('\n'), "{error}");
    }
}

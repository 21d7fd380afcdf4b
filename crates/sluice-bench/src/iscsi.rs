//! `--compare iscsi`: Debian's `tgt` (the Linux SCSI target framework's userspace
//! daemon, `tgtd`) serving one LUN on a regular file, on loopback only, for the same
//! suite over iSCSI.
//!
//! `tgtd` runs in the foreground as our child, in its own process group (so a Ctrl-C at
//! the terminal reaches the bench, which stops it in order, and not tgtd directly), with
//! a private management socket (`-C N`: `/var/run/tgtd/socket.N`) so it never meets a
//! system tgtd, and its iSCSI portal on 127.0.0.1 at a free port. SIGTERM does not stop
//! it (it leaves it deaf to tgtadm instead), so it is never sent; the clean stop is
//! tgtadm's: delete the target (`--force`: sessions may still be logged in), then
//! `--mode system --op delete`; SIGKILL only when that fails.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::BenchError;

/// The target's IQN.
pub const IQN: &str = "iqn.2026-11.io.sluice:bench";
/// tgt's target id and the LUN of the backing file (LUN 0 is tgt's controller LUN).
const TID: &str = "1";
pub const LUN: u32 = 1;
/// tgtd's management sockets live here (`socket.N`, `socket.N.lock`).
const SOCKET_DIR: &str = "/var/run/tgtd";
/// tgtd takes management ports (`-C N`) up to this.
const MAX_CONTROL_PORT: u32 = 32767;
/// A tgtadm call that takes longer has hung (tgtd stops answering its management
/// socket after a SIGTERM, for one).
const TGTADM_TIMEOUT: Duration = Duration::from_secs(10);

/// What a second Ctrl-C must stop before exiting at once: (pid, management port,
/// tgtadm).
static RUNNING: Mutex<Option<(u32, u16, PathBuf)>> = Mutex::new(None);

/// A program from Debian's `tgt`, in PATH or in the sbin directories (which a
/// non-root PATH may lack).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A running `tgtd` with one target and one LUN.
pub struct Tgtd {
    child: Child,
    tgtadm: PathBuf,
    control_port: u16,
    pub portal: SocketAddr,
    log: PathBuf,
    stopped: bool,
}

/// Checks `tgtd` and `tgtadm` are installed (before anything else starts).
pub fn check_installed() -> Result<(), BenchError> {
    for program in ["tgtd", "tgtadm"] {
        if find_program(program).is_none() {
            return Err(BenchError::Runtime(format!(
                "--compare iscsi: {program} is not installed: apt-get install tgt (scripts/setup.sh installs it)"
            )));
        }
    }
    Ok(())
}

fn last_log_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("no output")
        .to_string()
}

impl Tgtd {
    /// Starts tgtd with LUN 1 on `backing` (blocks of `block_size`; O_DIRECT with
    /// `direct_io`), logging to `log`.
    pub fn start(backing: &Path, block_size: u32, direct_io: bool, log: &Path) -> Result<Tgtd, BenchError> {
        check_installed()?;
        let tgtd = find_program("tgtd").expect("checked");
        let tgtadm = find_program("tgtadm").expect("checked");
        // A free port for the portal (taken by tgtd a moment after we let go of it).
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|e| BenchError::Runtime(format!("no free loopback port for tgtd: {e}")))?
            .port();
        let portal: SocketAddr = ([127, 0, 0, 1], port).into();
        let control_port = free_control_port();
        let log_file = std::fs::File::create(log)
            .map_err(|e| BenchError::Runtime(format!("cannot write {}: {e}", log.display())))?;
        let log_err = log_file.try_clone().map_err(|e| BenchError::Runtime(format!("{}: {e}", log.display())))?;
        let child = {
            use std::os::unix::process::CommandExt;
            Command::new(&tgtd)
                .args(["-f", "-C", &control_port.to_string(), "--iscsi"])
                .arg(format!("portal={portal}"))
                .stdin(Stdio::null())
                .stdout(log_file)
                .stderr(log_err)
                .process_group(0)
                .spawn()
                .map_err(|e| BenchError::Runtime(format!("cannot start {}: {e}", tgtd.display())))?
        };
        let mut daemon = Tgtd { child, tgtadm, control_port, portal, log: log.to_path_buf(), stopped: false };
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((daemon.child.id(), control_port, daemon.tgtadm.clone()));
        daemon.wait_ready()?;
        daemon.tgtadm(&["--lld", "iscsi", "--mode", "target", "--op", "new", "--tid", TID, "--targetname", IQN])?;
        let backing_text = backing.display().to_string();
        let block_text = block_size.to_string();
        let lun_text = LUN.to_string();
        let mut lun = vec![
            "--lld",
            "iscsi",
            "--mode",
            "logicalunit",
            "--op",
            "new",
            "--tid",
            TID,
            "--lun",
            &lun_text,
            "--backing-store",
            &backing_text,
            "--blocksize",
            &block_text,
        ];
        if direct_io {
            lun.extend(["--bsoflags", "direct"]);
        }
        daemon.tgtadm(&lun)?;
        // Loopback only: the portal listens on 127.0.0.1 and only 127.0.0.1 may log in.
        daemon.tgtadm(&[
            "--lld",
            "iscsi",
            "--mode",
            "target",
            "--op",
            "bind",
            "--tid",
            TID,
            "--initiator-address",
            "127.0.0.1",
        ])?;
        Ok(daemon)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// tgt's version (`tgtadm --version`: the same package as tgtd).
    pub fn version(&self) -> String {
        Command::new(&self.tgtadm)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|v| !v.is_empty())
            .map_or_else(|| "tgt".into(), |v| format!("tgt {v}"))
    }

    fn tgtadm(&self, args: &[&str]) -> Result<(), BenchError> {
        run_tgtadm(&self.tgtadm, self.control_port, args, TGTADM_TIMEOUT)
    }

    /// Waits until tgtd answers on its management socket.
    fn wait_ready(&mut self) -> Result<(), BenchError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.stopped = true;
                RUNNING.lock().unwrap_or_else(|e| e.into_inner()).take();
                let line = last_log_line(&self.log);
                let hint = if line.contains("Permission denied") || line.contains("Operation not permitted") {
                    " (tgtd needs root: it creates /var/run/tgtd)"
                } else {
                    ""
                };
                return Err(BenchError::Runtime(format!(
                    "tgtd exited at start ({status}): {line}{hint}; log {}",
                    self.log.display()
                )));
            }
            if self.tgtadm(&["--mode", "system", "--op", "show"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Runtime(format!(
                    "tgtd did not answer on its management socket within 10 s: {}; log {}",
                    last_log_line(&self.log),
                    self.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops tgtd in order (target, then the daemon); kills it if it does not exit.
    pub fn stop(mut self) -> Result<(), BenchError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), BenchError> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let ours = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).take().is_some();
        if !ours {
            // A second Ctrl-C's emergency_stop() is already stopping it (and exits).
            let _ = self.child.wait();
            return Ok(());
        }
        let _ = self.tgtadm(&["--lld", "iscsi", "--mode", "target", "--op", "delete", "--force", "--tid", TID]);
        let ordered = self.tgtadm(&["--mode", "system", "--op", "delete"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut exited = false;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        remove_sockets(self.control_port);
        match (ordered, exited) {
            (Ok(()), true) => Ok(()),
            (Err(error), _) => Err(BenchError::Runtime(format!("{error}; tgtd was killed instead"))),
            (Ok(()), false) => {
                Err(BenchError::Runtime("tgtd did not exit within 5 s of its shutdown and was killed".into()))
            }
        }
    }
}

impl Drop for Tgtd {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            eprintln!("sluice: warning: {error}");
        }
    }
}

/// A management port (tgtd's `-C`, naming `/var/run/tgtd/socket.N`) no socket uses,
/// spread by our pid so that concurrent benches do not pick the same one.
fn free_control_port() -> u16 {
    let start = std::process::id() % (MAX_CONTROL_PORT - 1000);
    (0..MAX_CONTROL_PORT - 1000)
        .map(|offset| 1000 + (start + offset) % (MAX_CONTROL_PORT - 1000))
        .find(|n| !Path::new(SOCKET_DIR).join(format!("socket.{n}")).exists())
        .unwrap_or(1000) as u16
}

/// Runs `tgtadm -C PORT ARGS`, killed after `timeout`; the error carries its first line
/// on stderr.
fn run_tgtadm(tgtadm: &Path, control_port: u16, args: &[&str], timeout: Duration) -> Result<(), BenchError> {
    let what = || format!("tgtadm {}", args.join(" "));
    let mut child = Command::new(tgtadm)
        .arg("-C")
        .arg(control_port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::Runtime(format!("cannot run {}: {e}", tgtadm.display())))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Runtime(format!("{} did not answer within {} s", what(), timeout.as_secs())));
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut message = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        use std::io::Read;
        let _ = stderr.read_to_string(&mut message);
    }
    Err(BenchError::Runtime(format!("{} failed: {}", what(), message.lines().next().unwrap_or("no message").trim())))
}

fn remove_sockets(control_port: u16) {
    let dir = Path::new(SOCKET_DIR);
    let _ = std::fs::remove_file(dir.join(format!("socket.{control_port}")));
    let _ = std::fs::remove_file(dir.join(format!("socket.{control_port}.lock")));
}

/// On a second Ctrl-C (the process exits at once, no destructors): stop tgtd the quick
/// way, so it does not outlive the bench.
pub fn emergency_stop() {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some((pid, port, tgtadm)) = running else {
        return;
    };
    let _ = run_tgtadm(
        &tgtadm,
        port,
        &["--lld", "iscsi", "--mode", "target", "--op", "delete", "--force", "--tid", TID],
        Duration::from_secs(1),
    );
    let _ = run_tgtadm(&tgtadm, port, &["--mode", "system", "--op", "delete"], Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(300));
    if Path::new(&format!("/proc/{pid}/exe")).exists() {
        super::fio::send_signal(pid, "KILL");
    }
    remove_sockets(port);
}

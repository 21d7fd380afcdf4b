//! What the end-to-end tests of the `sluice` binary share: scratch directories, free
//! ports, bounded runs of `sluice`, a `sluice serve` child that is stopped with
//! SIGTERM (killed if it does not stop) when dropped, and one with a config file and
//! a management socket in a directory of its own that is killed when dropped.
#![allow(dead_code)]

pub mod gateway_group;
pub mod pki;

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_host_client::Controller;
use nvme_spec::NamespaceId;

pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
/// Longest any one `sluice` invocation may take.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(60);
/// Longest `sluice serve` may take to print "sluice: ready".
pub const READY_DEADLINE: Duration = Duration::from_secs(30);

/// Longest a connected host may take to hear of a namespace change: the client reads
/// its admin queue at every keep-alive, at least once a second in these tests.
pub const NOTICE_DEADLINE: Duration = Duration::from_secs(10);

/// A scratch directory per test under Cargo's target tmpdir (a real filesystem, so
/// O_DIRECT works).
pub fn scratch_dir(name: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "sluice-test-{name}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A port nobody listens on right now (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind port 0").local_addr().unwrap().port()
}

/// Runs `sluice ARGS`, bounded by [`COMMAND_DEADLINE`].
pub fn sluice<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    let child = Command::new(SLUICE)
        .args(args)
        .env_remove("SLUICE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    wait_bounded(child, COMMAND_DEADLINE)
        .unwrap_or_else(|| panic!("sluice {:?} did not finish within {COMMAND_DEADLINE:?}", args_text(args)))
}

/// The output of `child` (its stdout and stderr piped or null), or `None`, with the
/// child killed, when it has not finished within `limit`.
pub fn wait_bounded(child: Child, limit: Duration) -> Option<Output> {
    let pid = child.id();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait_with_output());
    });
    match done_rx.recv_timeout(limit) {
        Ok(output) => output.ok(),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            None
        }
    }
}

/// Whether a Ceph cluster is given (`CEPH_CONF`). Without one a test that needs it
/// says it is skipped and returns, unless `SLUICE_REQUIRE_CEPH` says the test command
/// started one (scripts/test.sh does): then this fails the test.
pub fn ceph_cluster_given(test: &str) -> bool {
    if std::env::var_os("CEPH_CONF").is_some() {
        return true;
    }
    assert!(
        std::env::var_os("SLUICE_REQUIRE_CEPH").is_none(),
        "{test}: SLUICE_REQUIRE_CEPH is set but CEPH_CONF is not: the test command must start a Ceph cluster \
         (scripts/test.sh does, with ../shared/ceph-single-node.sh)"
    );
    eprintln!("{test}: skipped: no Ceph cluster (set CEPH_CONF; ../shared/ceph-single-node.sh up DIR starts one)");
    false
}

pub fn args_text<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    args.iter().map(|arg| arg.as_ref().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}

/// A running `sluice serve`.
pub struct ServeProcess {
    pub child: Child,
    /// Everything it printed on stdout so far.
    pub stdout_lines: Arc<Mutex<Vec<String>>>,
}

impl ServeProcess {
    /// Starts `sluice serve --config FILE EXTRA...` and waits for "sluice: ready";
    /// `None` if it exited or hung first (e.g. a port was taken: pick others).
    pub fn start(config: &Path, extra_args: &[&str]) -> Option<ServeProcess> {
        Self::start_with_env(config, extra_args, &[])
    }

    /// `start` with extra environment variables.
    pub fn start_with_env(config: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> Option<ServeProcess> {
        Self::start_within(config, extra_args, env, READY_DEADLINE)
    }

    /// `start_with_env` that waits up to `deadline` for "sluice: ready" (a gateway
    /// opening thousands of images takes longer than [`READY_DEADLINE`]).
    pub fn start_within(
        config: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> Option<ServeProcess> {
        let child = Command::new(SLUICE)
            .args(["serve", "--config"])
            .arg(config)
            .args(extra_args)
            .env("SLUICE_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sluice serve");
        let (child, stdout_lines) = wait_until_ready_within(child, deadline)?;
        Some(ServeProcess { child, stdout_lines })
    }

    /// Stops it with SIGTERM and waits (up to a minute) for it to exit; its exit status
    /// (a clean stop is a success).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.terminate_within(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("sluice serve did not stop within a minute of SIGTERM"))
    }

    /// Sends SIGTERM (quietly: a test may have SIGKILLed and reaped it already) and
    /// waits up to `limit` for it to exit; `None` when it is still running then.
    pub fn terminate_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).stderr(Stdio::null()).status();
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => return None,
            }
        }
    }

    /// The first stdout line starting with `prefix`, without the prefix.
    pub fn printed(&self, prefix: &str) -> Option<String> {
        let lines = self.stdout_lines.lock().unwrap();
        lines.iter().find_map(|line| line.strip_prefix(prefix).map(str::to_string))
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        match self.terminate_within(Duration::from_secs(10)) {
            Some(status) => {
                // Killed by the test (SIGKILL) or stopped cleanly are expected; an
                // abort or a failure on the way out is worth a line in the output.
                use std::os::unix::process::ExitStatusExt;
                if !status.success() && status.signal() != Some(libc::SIGKILL) {
                    eprintln!("warning: sluice serve (pid {}) ended with {status}", self.child.id());
                }
            }
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// Collects the stdout lines of `child` (spawned with piped stdout) on a thread of
/// their own and waits for "sluice: ready"; if it exits or hangs first, kills and
/// reaps it and returns `None`.
pub fn wait_until_ready(child: Child) -> Option<(Child, Arc<Mutex<Vec<String>>>)> {
    wait_until_ready_within(child, READY_DEADLINE)
}

/// [`wait_until_ready`] with a deadline of the caller's.
pub fn wait_until_ready_within(mut child: Child, deadline: Duration) -> Option<(Child, Arc<Mutex<Vec<String>>>)> {
    let stdout = child.stdout.take().expect("piped stdout");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (ready_tx, ready_rx) = mpsc::channel();
    let collected = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let ready = line.trim() == READY_LINE;
            collected.lock().unwrap().push(line);
            if ready {
                let _ = ready_tx.send(());
            }
        }
    });
    match ready_rx.recv_timeout(deadline) {
        Ok(()) => Some((child, lines)),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// What `sluice serve` prints on stdout once it serves.
pub const READY_LINE: &str = "sluice: ready";

/// How many free ports a test tries before it gives up on `sluice serve`.
const PORT_ATTEMPTS: usize = 5;

/// `attempt(port)` on fresh free ports until it returns `Some`: a port free a moment
/// ago may be taken by the time sluice binds it. Panics after a few tries.
pub fn on_a_free_port<T>(mut attempt: impl FnMut(u16) -> Option<T>) -> T {
    for _ in 0..PORT_ATTEMPTS {
        if let Some(value) = attempt(free_port()) {
            return value;
        }
    }
    panic!("sluice serve did not become ready");
}

/// The subsystem of [`managed_config`].
pub const BASE: &str = "nqn.2026-11.io.sluice:base";

/// A config file for [`ManagedServer`]: a comment the management API must keep, one
/// listener on 127.0.0.1:`port`, a named RAM backend "spare" (8 MiB) that nothing
/// uses at start, subsystem [`BASE`] open to any host with namespace 1 (16 MiB of
/// RAM), and one runtime thread.
pub fn managed_config(port: u16) -> String {
    format!(
        r#"# Written by the test; the management API must keep this comment.
[[listener]]
address = "127.0.0.1:{port}"

[[backend]]
name = "spare"
kind = "ram"
size = "8MiB"

[[subsystem]]
nqn = "{BASE}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = "ram"
size = "16MiB"

[runtime]
threads = 1
"#
    )
}

/// How a [`ManagedServer`] runs.
pub struct ServeSetup<'a> {
    /// Its `SLUICE_LOG`.
    pub log_level: &'a str,
    /// Its stderr goes to DIR/serve.log (see [`ManagedServer::log`]) rather than the
    /// test's own.
    pub stderr_to_file: bool,
    /// Environment changes: `(NAME, Some(value))` sets NAME, `(NAME, None)` removes it.
    pub env: &'a [(&'a str, Option<&'a OsStr>)],
}

impl ServeSetup<'static> {
    /// Warnings only, on the test's own stderr; the environment as inherited.
    pub const QUIET: ServeSetup<'static> = ServeSetup { log_level: "warn", stderr_to_file: false, env: &[] };
}

/// `sluice serve --config DIR/sluice.toml --rpc-socket DIR/sluice.sock`, once it has
/// printed "sluice: ready" (its stdout is drained by a thread); SIGKILLed when dropped.
pub struct ManagedServer {
    pub child: Child,
    /// The port of the listener the config file started with.
    pub port: u16,
    pub dir: PathBuf,
    /// Everything it printed on stdout so far.
    pub stdout_lines: Arc<Mutex<Vec<String>>>,
}

impl ManagedServer {
    /// Starts on a fresh [`managed_config`] file in `dir`, trying a few ports.
    pub fn start(dir: &Path, setup: &ServeSetup) -> ManagedServer {
        ManagedServer::start_with_config(dir, setup, managed_config)
    }

    /// Starts on the config `config(port)` writes, trying a few ports.
    pub fn start_with_config(dir: &Path, setup: &ServeSetup, config: impl Fn(u16) -> String) -> ManagedServer {
        on_a_free_port(|port| {
            std::fs::write(dir.join("sluice.toml"), config(port)).expect("write config");
            ManagedServer::spawn(dir, setup, port)
        })
    }

    /// Starts again from the file in `dir` as it is now (listening on `port`).
    pub fn restart(dir: &Path, setup: &ServeSetup, port: u16) -> ManagedServer {
        // The killed process's listener may linger a moment; serve retries briefly,
        // and so does this.
        for _ in 0..PORT_ATTEMPTS {
            if let Some(server) = ManagedServer::spawn(dir, setup, port) {
                return server;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("sluice serve did not come back from its config file");
    }

    fn spawn(dir: &Path, setup: &ServeSetup, port: u16) -> Option<ManagedServer> {
        let mut command = Command::new(SLUICE);
        command
            .arg("serve")
            .arg("--config")
            .arg(dir.join("sluice.toml"))
            .arg("--rpc-socket")
            .arg(dir.join("sluice.sock"))
            .env("SLUICE_LOG", setup.log_level)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if setup.stderr_to_file {
            command.stderr(File::create(dir.join("serve.log")).expect("create serve.log"));
        } else {
            command.stderr(Stdio::inherit());
        }
        for (name, value) in setup.env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let (child, stdout_lines) = wait_until_ready(command.spawn().expect("spawn sluice serve"))?;
        Some(ManagedServer { child, port, dir: dir.to_path_buf(), stdout_lines })
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("sluice.toml")
    }

    /// The first stdout line starting with `prefix`, without the prefix.
    pub fn printed(&self, prefix: &str) -> Option<String> {
        let lines = self.stdout_lines.lock().unwrap();
        lines.iter().find_map(|line| line.strip_prefix(prefix).map(str::to_string))
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("sluice.sock")
    }

    /// Its stderr so far ([`ServeSetup::stderr_to_file`]).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).expect("read serve.log")
    }

    /// `kill -NAME`, which must succeed.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// SIGKILL: no chance to clean up, the socket file stays behind.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits, bounded by [`NOTICE_DEADLINE`], until `controller` has heard a Namespace
/// Attribute Changed notice that names `nsid`.
pub fn await_namespace_notice(controller: &Controller, nsid: NamespaceId) {
    let deadline = Instant::now() + NOTICE_DEADLINE;
    let mut changed = Vec::new();
    while !changed.contains(&nsid) {
        assert!(Instant::now() < deadline, "no namespace attribute notice for NSID {} (got {changed:?})", nsid.0);
        std::thread::sleep(Duration::from_millis(100));
        changed.extend(controller.take_namespace_changes());
    }
}

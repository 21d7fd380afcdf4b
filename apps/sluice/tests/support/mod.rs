//! What the end-to-end tests of the `sluice` binary share: scratch directories, free
//! ports, bounded runs of `sluice`, and a `sluice serve` child that is stopped with
//! SIGTERM (killed if it does not stop) when dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
/// Longest any one `sluice` invocation may take.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(60);
/// Longest `sluice serve` may take to print "sluice: ready".
pub const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A scratch directory per test under Cargo's target tmpdir (a real filesystem, so
/// O_DIRECT works).
pub fn scratch_dir(name: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "cli-{name}-{}-{}",
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
    let pid = child.id();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait_with_output());
    });
    match done_rx.recv_timeout(COMMAND_DEADLINE) {
        Ok(output) => output.expect("wait for sluice"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("sluice {:?} did not finish within {COMMAND_DEADLINE:?}", args_text(args));
        }
    }
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
        let mut child = Command::new(SLUICE)
            .args(["serve", "--config"])
            .arg(config)
            .args(extra_args)
            .env("SLUICE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sluice serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let collected = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let ready = line.trim() == "sluice: ready";
                collected.lock().unwrap().push(line);
                if ready {
                    let _ = ready_tx.send(());
                }
            }
        });
        match ready_rx.recv_timeout(READY_DEADLINE) {
            Ok(()) => Some(ServeProcess { child, stdout_lines: lines }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                None
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
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
    }
}

//! Test files for the io_uring file backend tests: a directory on a filesystem that
//! supports O_DIRECT and unique paths removed when dropped.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use runtime::{FileBackend, FileOptions};

static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// A directory for test files on a filesystem that supports O_DIRECT: the system temp
/// dir if it does (it may be tmpfs, which refuses O_DIRECT on older kernels), else the
/// cargo target dir next to the test binary.
pub fn test_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut candidates = vec![std::env::temp_dir()];
        if let Some(deps) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
            candidates.push(deps);
        }
        for base in candidates {
            let dir = base.join(format!("sluice-file-tests-{}", std::process::id()));
            if std::fs::create_dir_all(&dir).is_err() {
                continue;
            }
            let probe = dir.join("probe");
            let options = FileOptions { size_bytes: Some(1 << 20), ..FileOptions::default() };
            let direct_io_works = FileBackend::open(&probe, options).is_ok();
            let _ = std::fs::remove_file(&probe);
            if direct_io_works {
                return dir;
            }
        }
        panic!("no directory on a filesystem with O_DIRECT found (tried the temp dir and the target dir)");
    })
}

/// A fresh, unique path under [`test_dir`]; the file is removed when the guard drops.
pub struct TempPath(pub PathBuf);

impl TempPath {
    pub fn new(name: &str) -> TempPath {
        let n = NEXT_FILE.fetch_add(1, Ordering::Relaxed);
        TempPath(test_dir().join(format!("{name}-{n}.img")))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

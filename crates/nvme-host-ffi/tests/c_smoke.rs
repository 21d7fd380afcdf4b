//! Builds tests/c_smoke.c against include/sluice_host.h and this crate's C
//! libraries (the static archive, and the shared library), and runs both programs
//! against an in-process Sluice target: the C ABI seen from C.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{InProcessTarget, NQN};

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding this crate's libsluice_host.{a,so} of the current build:
/// the integration test binary lives in target/<profile>/deps, next to them.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    for dir in [deps.clone(), deps.parent().expect("profile dir").to_path_buf()] {
        if dir.join("libsluice_host.a").exists() && dir.join("libsluice_host.so").exists() {
            return dir;
        }
    }
    panic!("libsluice_host.a / .so not found next to {} (cargo builds them with the lib target)", exe.display());
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

fn compile(out: &Path, link: &[String]) {
    let source = manifest_dir().join("tests/c_smoke.c");
    let include = manifest_dir().join("include");
    let mut command = Command::new(compiler());
    command
        .args(["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-o"])
        .arg(out)
        .arg(&source)
        .arg(format!("-I{}", include.display()))
        .args(link);
    let output = command.output().unwrap_or_else(|e| panic!("cannot run the C compiler {:?}: {e}", compiler()));
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}{}",
        source.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn run(program: &Path, target: &InProcessTarget) {
    let output = Command::new(program)
        .arg(target.address.ip().to_string())
        .arg(target.address.port().to_string())
        .arg(NQN)
        .output()
        .expect("run c_smoke");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}{stderr}");
    assert!(output.status.success(), "{} failed ({}):\n{stdout}{stderr}", program.display(), output.status);
    assert!(stdout.contains("checks passed"), "no summary line:\n{stdout}");
}

#[test]
fn c_program_uses_the_library_through_the_header() {
    let libs = library_dir();
    let work = libs.join("c_smoke");
    std::fs::create_dir_all(&work).expect("create work dir");
    let target = InProcessTarget::start();

    // static: the archive carries the Rust standard library; add what it needs (and
    // the system's OpenSSL, for TLS)
    let static_exe = work.join("c_smoke_static");
    let mut link = vec![libs.join("libsluice_host.a").display().to_string()];
    link.extend(
        ["-lssl", "-lcrypto", "-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"].map(String::from),
    );
    compile(&static_exe, &link);
    run(&static_exe, &target);

    // shared: the exported symbols of the cdylib
    let shared_exe = work.join("c_smoke_shared");
    let link =
        vec![format!("-L{}", libs.display()), "-lsluice_host".to_string(), format!("-Wl,-rpath,{}", libs.display())];
    compile(&shared_exe, &link);
    run(&shared_exe, &target);
}

//! `sluice config check` end to end: a composed config (docs/examples/tiered.toml) is
//! reported without creating any file, and a broken one exits with status 2 and a
//! message naming the entry.

use std::path::{Path, PathBuf};
use std::process::Command;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("config-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_tiered_example_checks_without_touching_storage() {
    let dir = scratch_dir("tiered");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/tiered.toml");
    let text = std::fs::read_to_string(example).unwrap().replace("/var/lib/sluice", &dir.display().to_string());
    let config = dir.join("tiered.toml");
    std::fs::write(&config, text).unwrap();
    let output = Command::new(SLUICE).args(["config", "check"]).arg(&config).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains(": ok"), "{stdout}");
    assert!(
        stdout.contains("backend \"tier\": cache (write-back), fast tier \"flash\" over slow tier \"tier-slow\""),
        "{stdout}"
    );
    assert!(stdout.contains("nqn.2026-11.io.sluice:tiered: 2 namespace(s)"), "{stdout}");
    assert_eq!(files_in(&dir), vec!["tiered.toml"], "config check must not create files");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_composition_exits_2_naming_the_entry() {
    let dir = scratch_dir("broken");
    let config = dir.join("broken.toml");
    std::fs::write(
        &config,
        "[[listener]]\naddress = \"127.0.0.1:4420\"\n\
         [[backend]]\nname = \"a\"\nkind = \"raid0\"\nmembers = [\"b\"]\n\
         [[backend]]\nname = \"b\"\nkind = \"raid0\"\nmembers = [\"a\"]\n",
    )
    .unwrap();
    let output = Command::new(SLUICE).args(["config", "check"]).arg(&config).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("sluice: error: config backend \"a\" (raid0): cycle a -> b -> a"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

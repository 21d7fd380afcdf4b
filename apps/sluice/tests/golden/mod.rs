//! The machinery of `cli_golden.rs`: running `sluice` with a clean environment, turning
//! one run into the text of a golden file, the one normalisation function, and
//! comparing with (or, in update mode, rewriting) the files under `tests/golden/`.
//!
//! A golden file is what one command line printed, framed so that every byte of it
//! shows and nothing else varies:
//!
//! ```text
//! $ sluice id-ctrl -a 127.0.0.1 --trsvcid <io1> ...   (the command, with placeholders)
//! exit status: 0
//! --- stdout
//! ...exactly what it printed...
//! --- stderr: empty
//! ```
//!
//! A stream that does not end in a newline gets the line `--- no newline at the end
//! of stdout` after it; one that is not UTF-8 text, or holds NUL bytes, is shown as
//! hex (`--- stdout: N bytes, not text, in hex`).

pub mod diff;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::{wait_bounded, COMMAND_DEADLINE, SLUICE};

/// Set to anything but "" or "0" to rewrite the golden files instead of comparing.
pub const UPDATE_VARIABLE: &str = "SLUICE_UPDATE_GOLDEN";

/// `tests/golden/` in the source tree.
pub fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

// ---------------------------------------------------------------------------------
// Placeholders and the normalisation

/// The values that change from run to run, each with the placeholder that stands for
/// it in command templates and golden files.
///
/// Command templates are written with the placeholders and expanded before running
/// (`expand`); outputs go the other way (`normalise`). Inputs are made deterministic
/// wherever sluice lets us choose them (host NQNs and IDs, serial and model numbers,
/// NGUIDs and UUIDs, TLS key material): what is left is the scratch directory and the
/// TCP ports, which the system hands out.
#[derive(Default)]
pub struct Placeholders {
    /// The scratch directory, written `<DIR>`.
    directory: Option<String>,
    /// (placeholder, port). Placeholders are five characters wide like the ports
    /// (which `five_digit_free_port` guarantees) so that tables keep their columns.
    ports: Vec<(&'static str, u16)>,
}

/// Where sluice prints a port number: after the loopback address, and after the
/// words nvme-cli's formats and sluice's messages put before one. A port is replaced
/// only in these places (and only when no further digit follows), never as a bare
/// number: a 5-digit port could equal a block count or a byte count elsewhere in the
/// output.
const PORT_CONTEXTS: [&str; 6] = ["127.0.0.1:", "trsvcid: ", "trsvcid=", "\"trsvcid\": \"", "port ", "-s "];

impl Placeholders {
    pub fn new(directory: &Path) -> Placeholders {
        Placeholders { directory: Some(directory.display().to_string()), ports: Vec::new() }
    }

    /// Registers `port` under `placeholder` (five characters, e.g. `<io1>`).
    pub fn add_port(&mut self, placeholder: &'static str, port: u16) {
        assert_eq!(placeholder.len(), 5, "a port placeholder is as wide as a port: {placeholder}");
        assert!((10_000..=65_535).contains(&port), "port {port} is not five digits wide");
        self.ports.push((placeholder, port));
    }

    pub fn port(&self, placeholder: &str) -> u16 {
        self.ports.iter().find(|(name, _)| *name == placeholder).map(|(_, port)| *port).expect("a registered port")
    }

    /// A command template's argument with the real values in.
    pub fn expand(&self, argument: &str) -> String {
        let mut text = argument.to_string();
        if let Some(directory) = &self.directory {
            text = text.replace("<DIR>", directory);
        }
        for (placeholder, port) in &self.ports {
            text = text.replace(placeholder, &port.to_string());
        }
        text
    }

    /// THE normalisation: the scratch directory anywhere becomes `<DIR>`, and each
    /// registered port in one of [`PORT_CONTEXTS`] becomes its placeholder. Nothing
    /// else is touched: spacing, column widths, key order and every other number are
    /// compared byte for byte.
    pub fn normalise(&self, text: &str) -> String {
        let mut text = match &self.directory {
            Some(directory) => text.replace(directory.as_str(), "<DIR>"),
            None => text.to_string(),
        };
        for (placeholder, port) in &self.ports {
            for context in PORT_CONTEXTS {
                text = replace_number(&text, &format!("{context}{port}"), &format!("{context}{placeholder}"));
            }
        }
        text
    }

    /// A registered port still in `text` after `normalise`, as a number of its own:
    /// either sluice prints ports somewhere new (add the place to [`PORT_CONTEXTS`])
    /// or the port happens to equal a number in the output (run again). Checked
    /// before a golden file is written, so that no run-specific port is ever
    /// recorded.
    pub fn port_left_in(&self, text: &str) -> Option<(&'static str, u16)> {
        self.ports.iter().copied().find(|(_, port)| {
            let digits = port.to_string();
            text.match_indices(&digits).any(|(at, _)| {
                let before = text[..at].chars().next_back();
                let after = text[at + digits.len()..].chars().next();
                !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
            })
        })
    }
}

/// `text` with every `needle` (which ends in a number) that is not followed by a
/// further digit replaced by `replacement`.
fn replace_number(text: &str, needle: &str, replacement: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(needle) {
        let after = &rest[at + needle.len()..];
        out.push_str(&rest[..at]);
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            out.push_str(needle);
        } else {
            out.push_str(replacement);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------
// Running sluice

/// Runs `sluice ARGS` in `directory` with an empty environment (only PATH kept), so
/// that nothing of the caller's shows: `--help` prints the value of SLUICE_LOG,
/// SLUICE_RPC_SOCKET and the like when they are set, and the log level follows
/// SLUICE_LOG. Bounded by the support module's deadline.
pub fn run_sluice(arguments: &[String], directory: &Path) -> Output {
    let mut command = Command::new(SLUICE);
    command.args(arguments).current_dir(directory).env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let child =
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn sluice");
    wait_bounded(child, COMMAND_DEADLINE)
        .unwrap_or_else(|| panic!("sluice {} did not finish within {COMMAND_DEADLINE:?}", arguments.join(" ")))
}

/// The command line as a reader would type it: arguments with spaces or shell
/// characters in single quotes.
pub fn shell_line(template: &[&str]) -> String {
    let quoted: Vec<String> = template
        .iter()
        .map(|argument| {
            let plain = !argument.is_empty()
                && argument.chars().all(|c| c.is_ascii_alphanumeric() || "-_.,:/=@+<>".contains(c));
            if plain {
                argument.to_string()
            } else {
                format!("'{argument}'")
            }
        })
        .collect();
    format!("$ sluice {}", quoted.join(" "))
}

/// The golden text of one run (before normalisation).
pub fn frame(template: &[&str], output: &Output) -> String {
    let status = match output.status.code() {
        Some(code) => format!("exit status: {code}"),
        None => format!("killed: {:?}", output.status),
    };
    let mut text = format!("{}\n{status}\n", shell_line(template));
    frame_stream(&mut text, "stdout", &output.stdout);
    frame_stream(&mut text, "stderr", &output.stderr);
    text
}

fn frame_stream(out: &mut String, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        _ if bytes.is_empty() => out.push_str(&format!("--- {name}: empty\n")),
        Ok(text) if !text.contains('\0') => {
            out.push_str(&format!("--- {name}\n{text}"));
            if !text.ends_with('\n') {
                out.push_str(&format!("\n--- no newline at the end of {name}\n"));
            }
        }
        _ => {
            out.push_str(&format!("--- {name}: {} bytes, not text, in hex\n", bytes.len()));
            for line in bytes.chunks(32) {
                let hex: Vec<String> = line.iter().map(|byte| format!("{byte:02x}")).collect();
                out.push_str(&hex.join(""));
                out.push('\n');
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Golden files

/// The golden files of one test: the subdirectories of `tests/golden/` it owns, the
/// files it checked, and what differed. Failures are collected so that one run shows
/// every difference; `finish` fails the test.
pub struct GoldenSet {
    owned: Vec<&'static str>,
    update: bool,
    checked: BTreeSet<PathBuf>,
    failures: Vec<String>,
}

impl GoldenSet {
    /// The set for a test owning `tests/golden/{owned...}`.
    pub fn new(owned: &[&'static str]) -> GoldenSet {
        let update = std::env::var(UPDATE_VARIABLE).is_ok_and(|value| !value.is_empty() && value != "0");
        GoldenSet { owned: owned.to_vec(), update, checked: BTreeSet::new(), failures: Vec::new() }
    }

    /// Whether this run rewrites the files (`SLUICE_UPDATE_GOLDEN`).
    pub fn updating(&self) -> bool {
        self.update
    }

    /// Compares `actual` with `tests/golden/{name}.golden` (or rewrites that file in
    /// update mode). `name` starts with one of the owned subdirectories.
    pub fn check(&mut self, name: &str, actual: &str) {
        let owner = name.split('/').next().unwrap_or_default();
        assert!(self.owned.contains(&owner), "{name}: not under a subdirectory this test owns ({:?})", self.owned);
        let path = golden_root().join(format!("{name}.golden"));
        assert!(self.checked.insert(path.clone()), "{name}: two cases write the same golden file");
        let expected = std::fs::read(&path).ok();
        if expected.as_deref() == Some(actual.as_bytes()) {
            return;
        }
        if self.update {
            std::fs::create_dir_all(path.parent().expect("a parent directory")).expect("create the golden directory");
            std::fs::write(&path, actual).expect("write the golden file");
            eprintln!("updated {}", path.display());
            return;
        }
        let message = match expected {
            None => format!("{}: missing (run with {UPDATE_VARIABLE}=1 to write it)", path.display()),
            Some(expected) => {
                let expected = String::from_utf8_lossy(&expected);
                format!("{}: differs\n{}", path.display(), diff::unified(&expected, actual, "golden", "actual"))
            }
        };
        eprintln!("{message}");
        self.failures.push(message);
    }

    /// Fails on any difference, and on golden files nothing checked (a command that
    /// was dropped or renamed leaves one behind); update mode deletes those instead.
    pub fn finish(mut self) {
        for owned in &self.owned {
            for path in golden_files(&golden_root().join(owned)) {
                if self.checked.contains(&path) {
                    continue;
                }
                if self.update {
                    std::fs::remove_file(&path).expect("remove a stale golden file");
                    eprintln!("removed {}", path.display());
                } else {
                    let message = format!("{}: no case writes this file any more", path.display());
                    eprintln!("{message}");
                    self.failures.push(message);
                }
            }
        }
        let count = self.failures.len();
        assert!(
            count == 0,
            "{count} golden file(s) differ, are missing or are stale (diffs above; if the change is \
             intended, run again with {UPDATE_VARIABLE}=1 and review `git diff apps/sluice/tests/golden`):\n{}",
            self.failures
                .iter()
                .map(|failure| failure.lines().next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Every `*.golden` file under `directory`, recursively.
fn golden_files(directory: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(directory) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(golden_files(&path));
        } else if path.extension().is_some_and(|extension| extension == "golden") {
            found.push(path);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_replaced_only_in_their_places() {
        let mut placeholders = Placeholders::default();
        placeholders.add_port("<io1>", 32768);
        let text = "tcp://127.0.0.1:32768/nqn\ntrsvcid: 32768\n\"blocks\": 32768\n127.0.0.1:327680";
        let normalised = "tcp://127.0.0.1:<io1>/nqn\ntrsvcid: <io1>\n\"blocks\": 32768\n127.0.0.1:327680";
        assert_eq!(placeholders.normalise(text), normalised);
        assert_eq!(placeholders.expand("-s <io1>"), "-s 32768");
        assert_eq!(placeholders.port_left_in("\"blocks\": 32768\n"), Some(("<io1>", 32768)));
        assert_eq!(placeholders.port_left_in("327680 132768"), None);
    }
}

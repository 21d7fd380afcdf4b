//! The shape of every crate, checked from its source (as `nvme-target` checks its own
//! in detail): files stay small enough to read, and no chain of three or more files
//! imports its way back to where it started (a two-file pair, a parent and its child,
//! or a type and the handler that extends it, is allowed). What the application crate
//! holds beyond that today is listed below as its baseline: entries may only shrink
//! or go (a file that grows past its baseline, a new long file, or a new cycle fails),
//! and one that no longer applies must be removed, so the list stays the truth.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file, in lines.
const MAX_FILE_LINES: usize = 800;

/// Most cycles listed per crate (a bound on the search in a tangled crate).
const MAX_CYCLES_LISTED: usize = 100_000;

/// Files longer than [`MAX_FILE_LINES`] today ("crate/path from the crate root"), with
/// their length: to be split by concept (issue 45), never to grow. (The lengths are
/// those after the workspace's one reformat to rustfmt.toml.)
const LONG_FILES_BASELINE: [(&str, usize); 11] = [
    ("storage/pool", 865),
    ("nvme-host-client/controller", 921),
    ("nvme-host-ffi/(root)", 912),
    ("nvme-host-ffi/queue", 830),
    ("bench-results/result", 827),
    ("sim/host", 847),
    ("sim/world", 890),
    ("sluice-bench/(root)", 803),
    ("sluice-config/(root)", 896),
    ("sluice-daemon/manage/service", 895),
    ("sluice-gateway/reservations", 815),
];

/// Per crate, the modules that lie on an import cycle through three or more files.
/// Empty: no crate has one (issue 45 broke the last); a new cycle fails the test.
const CYCLE_MODULES_BASELINE: [(&str, &[&str]); 0] = [];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every member crate: (package name, its `src` directory).
fn crates() -> Vec<(String, PathBuf)> {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace manifest");
    let workspace: toml::Table = text.parse().expect("the workspace manifest parses");
    workspace["workspace"]["members"]
        .as_array()
        .expect("workspace.members")
        .iter()
        .map(|member| {
            let directory = root.join(member.as_str().expect("a member path"));
            let manifest: toml::Table = std::fs::read_to_string(directory.join("Cargo.toml"))
                .expect("a member manifest")
                .parse()
                .expect("a member manifest parses");
            let name = manifest["package"]["name"].as_str().expect("package.name").to_string();
            (name, directory.join("src"))
        })
        .collect()
}

/// Module path ("host::session"; a crate root is "") -> source text, for one crate.
fn modules(source: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut pending = vec![source.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                // A binary's own tree (src/bin/NAME.rs or src/bin/NAME/) is another root.
                if path.file_name().is_some_and(|name| name != "bin") {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(source).expect("under src").with_extension("");
                let mut parts: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
                if parts.last().is_some_and(|last| last == "mod") {
                    parts.pop();
                }
                if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
                    parts.clear();
                }
                if parts.first().is_some_and(|first| first == "bin") {
                    continue;
                }
                found.insert(parts.join("::"), std::fs::read_to_string(&path).expect("a source file"));
            }
        }
    }
    found
}

/// The text without line comments (doc comments name modules without using them).
fn code_of(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The longest known module a path (already made absolute) names.
fn resolve(parts: &[String], known: &BTreeSet<String>) -> Option<String> {
    (0..=parts.len()).rev().map(|length| parts[..length].join("::")).find(|candidate| known.contains(candidate))
}

/// The paths starting at `at` in `code` (after `crate::`, `super::` or `self::`),
/// expanding one level of `{a, b::c}` groups.
fn paths_after(code: &str, at: usize) -> Vec<String> {
    let rest = &code[at..];
    let path_of = |text: &str| -> String {
        text.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect()
    };
    let head = path_of(rest);
    let after_head = &rest[head.len()..];
    let Some(group) = after_head.strip_prefix('{') else {
        return vec![head];
    };
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut item_start = 0usize;
    for (offset, character) in group.char_indices() {
        match character {
            '{' => depth += 1,
            '}' if depth == 0 => {
                found.push(format!("{head}{}", path_of(&group[item_start..offset])));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                found.push(format!("{head}{}", path_of(&group[item_start..offset])));
                item_start = offset + 1;
            }
            _ => {}
        }
    }
    found
}

/// Modules of the crate that module `name` refers to (`crate::`, `super::`,
/// `self::` paths, and the child modules it declares).
fn dependencies(name: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let code = code_of(text);
    let own: Vec<String> = if name.is_empty() { Vec::new() } else { name.split("::").map(String::from).collect() };
    // An inline `mod tests { use super::*; }` names the file's own module with
    // `super::`, not its parent: the code after it is read as that child's.
    let (code, tests) = match code.find("mod tests {") {
        Some(at) => (code[..at].to_string(), Some(code[at..].to_string())),
        None => (code, None),
    };
    let mut found = paths_named(&code, &own, known);
    if let Some(tests) = tests {
        let mut inner = own.clone();
        inner.push("tests".to_string());
        found.extend(paths_named(&tests, &inner, known));
    }
    // A parent uses the child modules it declares.
    for line in code.lines() {
        let declared =
            line.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ").trim_start_matches("pub ");
        if let Some(child) = declared.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')) {
            let child = if name.is_empty() { child.to_string() } else { format!("{name}::{child}") };
            if known.contains(&child) {
                found.insert(child);
            }
        }
    }
    found.remove(name);
    // The crate root re-exports and declares; counting it would join every cycle.
    found.remove("");
    found
}

/// The modules of the crate that the `crate::`, `super::` and `self::` paths in
/// `code` name, read from inside module `own`.
fn paths_named(code: &str, own: &[String], known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut index = 0;
    while index < code.len() {
        let rest = &code[index..];
        let at_word_start = index == 0
            || !(bytes[index - 1].is_ascii_alphanumeric() || bytes[index - 1] == b'_' || bytes[index - 1] == b':');
        let prefix =
            ["crate::", "super::", "self::"].into_iter().find(|prefix| at_word_start && rest.starts_with(prefix));
        let Some(prefix) = prefix else {
            index += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        for path in paths_after(code, index) {
            let mut parts: Vec<String> = path.split("::").filter(|part| !part.is_empty()).map(String::from).collect();
            let mut base: Vec<String> = match prefix {
                "crate::" => {
                    parts.remove(0);
                    Vec::new()
                }
                _ => own.to_vec(),
            };
            while parts.first().is_some_and(|part| part == "super" || part == "self") {
                if parts.remove(0) == "super" {
                    base.pop();
                }
            }
            base.extend(parts);
            found.extend(resolve(&base, known));
        }
        index += prefix.len();
    }
    found
}

/// Every simple cycle of three or more modules (each from its least member, in
/// order), up to `limit` of them.
fn long_cycles(graph: &BTreeMap<String, BTreeSet<String>>, limit: usize) -> Vec<Vec<String>> {
    fn search(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        path: &mut Vec<String>,
        found: &mut Vec<Vec<String>>,
        limit: usize,
    ) {
        let current = path.last().cloned().unwrap_or_default();
        for next in graph.get(&current).into_iter().flatten() {
            if found.len() >= limit {
                return;
            }
            if next == start && path.len() >= 3 {
                found.push(path.clone());
            } else if next.as_str() > start && !path.contains(next) {
                path.push(next.clone());
                search(graph, start, path, found, limit);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for start in graph.keys() {
        search(graph, start, &mut vec![start.clone()], &mut found, limit);
    }
    found
}

#[test]
fn no_source_file_is_longer_than_the_limit_or_its_baseline() {
    let mut problems = Vec::new();
    let mut seen_baseline = BTreeSet::new();
    for (crate_name, source) in crates() {
        for (module, text) in modules(&source) {
            let lines = text.lines().count();
            let key = format!(
                "{crate_name}/{}",
                if module.is_empty() { "(root)".to_string() } else { module.replace("::", "/") }
            );
            let allowed = match LONG_FILES_BASELINE.iter().find(|(file, _)| *file == key) {
                Some(&(_, baseline)) => {
                    seen_baseline.insert(key.clone());
                    baseline
                }
                None => MAX_FILE_LINES,
            };
            if lines > allowed {
                problems.push(format!("{key}: {lines} lines, over {allowed}: split it by concept"));
            }
        }
    }
    for (file, _) in LONG_FILES_BASELINE {
        if !seen_baseline.contains(file) {
            problems.push(format!("{file} is in LONG_FILES_BASELINE but is gone or renamed: remove it"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_new_import_cycle_runs_through_more_than_two_files() {
    let mut problems = Vec::new();
    let mut report = Vec::new();
    for (crate_name, source) in crates() {
        let modules = modules(&source);
        let known: BTreeSet<String> = modules.keys().cloned().collect();
        let graph: BTreeMap<String, BTreeSet<String>> =
            modules.iter().map(|(name, text)| (name.clone(), dependencies(name, text, &known))).collect();
        let cycles = long_cycles(&graph, MAX_CYCLES_LISTED);
        let on_cycles: BTreeSet<&str> = cycles.iter().flatten().map(String::as_str).collect();
        let baseline: BTreeSet<&str> = CYCLE_MODULES_BASELINE
            .iter()
            .find(|(name, _)| *name == crate_name)
            .map(|(_, modules)| modules.iter().copied().collect())
            .unwrap_or_default();
        for module in on_cycles.difference(&baseline) {
            let example =
                cycles.iter().find(|cycle| cycle.iter().any(|member| member == module)).expect("a cycle through it");
            problems.push(format!(
                "{crate_name}: {} is on an import cycle through {} files: {}",
                if module.is_empty() { "the crate root" } else { module },
                example.len(),
                example.join(" -> ")
            ));
        }
        for module in baseline.difference(&on_cycles) {
            problems.push(format!(
                "{crate_name}: {module} is in CYCLE_MODULES_BASELINE but on no long cycle any more: remove it"
            ));
        }
        if !on_cycles.is_empty() {
            report.push(format!("(\"{crate_name}\", &{:?}),", on_cycles));
        }
    }
    assert!(problems.is_empty(), "{}\n\nmodules on long cycles now:\n{}", problems.join("\n"), report.join("\n"));
}

#[test]
fn the_scan_sees_relative_and_grouped_imports() {
    let known: BTreeSet<String> = ["host", "host::session", "host::args", "host::ana", "manage", "manage::cli"]
        .into_iter()
        .map(String::from)
        .collect();
    let text = "use super::session::{command_error, Session};\nuse super::{args::Target, HostError};\nuse crate::manage::cli;\n";
    let found = dependencies("host::ana", text, &known);
    let expected: BTreeSet<String> =
        ["host::session", "host::args", "host", "manage::cli"].into_iter().map(String::from).collect();
    assert_eq!(found, expected);
}

#[test]
fn an_inline_test_module_names_its_own_file_with_super() {
    let known: BTreeSet<String> =
        ["manage", "manage::document", "manage::protocol"].into_iter().map(String::from).collect();
    let text = "use super::protocol::RpcError;
#[cfg(test)]
mod tests {
    use super::*;
    use super::super::protocol;
}
";
    let found = dependencies("manage::document", text, &known);
    // `super::*` in the test module is document itself (no edge), `super::super` the
    // parent: only the sibling is named.
    let expected: BTreeSet<String> = ["manage::protocol".to_string()].into_iter().collect();
    assert_eq!(found, expected);
    // The same `use super::*` outside a test module names the parent.
    let found = dependencies(
        "manage::document",
        "use super::*;
",
        &known,
    );
    assert_eq!(found, ["manage".to_string()].into_iter().collect());
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["a", "c"]), ("c", vec!["d"]), ("d", vec!["b"])]
            .into_iter()
            .map(|(name, deps)| (name.to_string(), deps.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(long_cycles(&graph, 10), vec![vec!["b".to_string(), "c".to_string(), "d".to_string()]]);
    let two_file_cycles_only: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b", "c"]), ("b", vec!["a"]), ("c", vec!["a"])]
            .into_iter()
            .map(|(name, deps)| (name.to_string(), deps.into_iter().map(String::from).collect()))
            .collect();
    assert!(long_cycles(&two_file_cycles_only, 10).is_empty());
}

//! The shape of the target core, checked from its source: files stay small enough to
//! read, and modules depend on each other in layers. A handler file may add methods
//! to `Connection` (and so import `connection`), and `connection` may hold that
//! handler's state type (a two-file cycle), but no chain of three or more files may
//! lead back to where it started: that is the tangle where any handler can reach
//! any state.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Longest source file of the crate, in lines.
const MAX_FILE_LINES: usize = 800;

/// Module name ("connection::r2t") -> its source text.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    let mut pending = vec![root.clone()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(&root).expect("under src").with_extension("");
                let name = relative.to_string_lossy().replace('/', "::");
                found.insert(name, std::fs::read_to_string(&path).expect("read file"));
            }
        }
    }
    found
}

/// The text without line comments (doc comments name modules without using them).
fn code_of(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Names lib.rs re-exports at the crate root ("Namespace" -> "namespaces"), so that
/// `crate::Namespace` counts as a use of its module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for line in code_of(lib).lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else { continue };
        let Some((module, items)) = rest.split_once("::") else { continue };
        for item in items.trim_end_matches(';').trim_matches(|c| c == '{' || c == '}').split(',') {
            found.insert(item.trim().to_string(), module.to_string());
        }
    }
    found
}

/// Modules of this crate that `name`'s source refers to: `crate::a::b` paths (also
/// inside `use crate::{a, b::c}` groups, and names lib.rs re-exports) and `super::`
/// from a child module.
fn dependencies(
    name: &str,
    text: &str,
    known: &BTreeSet<String>,
    reexported: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let code = code_of(text);
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").filter(|part| !part.is_empty()).collect();
        if let Some(module) = parts.first().and_then(|first| reexported.get(*first)) {
            return Some(module.clone());
        }
        (1..=parts.len()).rev().map(|length| parts[..length].join("::")).find(|candidate| known.contains(candidate))
    };
    let path_of = |text: &str| -> String {
        text.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect()
    };
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(start) = rest.find("crate::") {
        rest = &rest[start + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The items at the top level of the group (nested groups count by the
            // path before them: `a::{b, c}` is a use of `a`).
            let mut depth = 0usize;
            let mut item_start = 0usize;
            for (at, character) in group.char_indices() {
                match character {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.extend(resolve(&path_of(&group[item_start..at])));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.extend(resolve(&path_of(&group[item_start..at])));
                        item_start = at + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.extend(resolve(&path_of(rest)));
        }
    }
    if let Some((parent, _)) = name.rsplit_once("::") {
        if code.contains("super::") {
            found.insert(parent.to_string());
        }
    }
    // A parent uses the child modules it declares (through relative paths).
    for line in code.lines() {
        let declared = line.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        if let Some(child) = declared.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')) {
            let child = if name == "lib" { child.to_string() } else { format!("{name}::{child}") };
            if known.contains(&child) {
                found.insert(child);
            }
        }
    }
    found.remove(name);
    found.remove("lib");
    found
}

/// A simple cycle of three or more modules, if any.
fn long_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn search(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        path: &mut Vec<String>,
        on_path: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        let current = path.last().cloned().unwrap_or_default();
        for next in graph.get(&current).into_iter().flatten() {
            if next == start && path.len() >= 3 {
                return Some(path.clone());
            }
            // Only modules after `start` in order: each cycle is found from its least member.
            if next.as_str() > start && !on_path.contains(next) {
                path.push(next.clone());
                on_path.insert(next.clone());
                if let Some(cycle) = search(graph, start, path, on_path) {
                    return Some(cycle);
                }
                on_path.remove(next);
                path.pop();
            }
        }
        None
    }
    graph.keys().find_map(|start| {
        let mut path = vec![start.clone()];
        let mut on_path = BTreeSet::from([start.clone()]);
        search(graph, start, &mut path, &mut on_path)
    })
}

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let long: Vec<String> = modules()
        .iter()
        .map(|(name, text)| (name, text.lines().count()))
        .filter(|(_, lines)| *lines > MAX_FILE_LINES)
        .map(|(name, lines)| format!("{name}: {lines} lines"))
        .collect();
    assert!(long.is_empty(), "files over {MAX_FILE_LINES} lines: {long:?}");
}

#[test]
fn no_import_cycle_runs_through_more_than_two_files() {
    let modules = modules();
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let reexported = reexports(&modules["lib"]);
    assert_eq!(reexported.get("Namespace").map(String::as_str), Some("namespaces"));
    let graph: BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|(name, text)| (name.clone(), dependencies(name, text, &known, &reexported))).collect();
    assert!(graph["connection"].contains("target"), "the scan must see `use crate::target::...`");
    if let Some(cycle) = long_cycle(&graph) {
        panic!("import cycle through {} files: {}", cycle.len(), cycle.join(" -> "));
    }
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["a", "c"]), ("c", vec!["d"]), ("d", vec!["b"])]
            .into_iter()
            .map(|(name, deps)| (name.to_string(), deps.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(long_cycle(&graph), Some(vec!["b".to_string(), "c".to_string(), "d".to_string()]));
    let two_file_cycles_only: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b", "c"]), ("b", vec!["a"]), ("c", vec!["a"])]
            .into_iter()
            .map(|(name, deps)| (name.to_string(), deps.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(long_cycle(&two_file_cycles_only), None);
}

//! Dependencies point one way (docs/ARCHITECTURE.md): every crate of the workspace
//! sits in one layer, and what it depends on to build (`[dependencies]` and
//! `[build-dependencies]`) sits in a lower layer, or in its own layer through an edge
//! listed here with its reason. Tests may reach further (`[dev-dependencies]`: a host
//! test runs a real target), but never up into the applications. A crate added to the
//! workspace without a layer fails here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first, and the crates in each (package names).
const LAYERS: [(&str, &[&str]); 11] = [
    // Values everything may use: byte sizes.
    ("base", &["units"]),
    // Pure codecs of the NVMe and NVMe/TCP wire formats.
    ("wire", &["nvme-spec", "nvme-tcp-wire"]),
    // The storage seam: backends behind one trait, no sockets.
    ("storage", &["storage"]),
    // Sans-io state machines: authentication, the target, the host.
    ("core", &["nvme-auth", "nvme-reservations", "nvme-target", "nvme-host"]),
    // Where I/O happens: the io_uring runtime and the host driver on it.
    ("io", &["runtime", "nvme-host-client"]),
    // Libraries of the applications, and the simulator (which runs the cores
    // without the runtime: see NEVER).
    (
        "application libraries",
        &["target-server", "nvme-host-ffi", "bench-results", "workload", "management-client", "sim"],
    ),
    // `sluice serve`'s configuration: parsed, validated, planned, diffed, built.
    ("configuration", &["sluice-config"]),
    // Gateway groups: coordination through the cluster, the reservations authority,
    // the group's configuration record.
    ("gateway group", &["sluice-gateway"]),
    // What the binary's subcommands run, side by side and never on each other: the
    // daemon, the operator's commands, the host commands, the benchmark suite.
    ("front ends", &["sluice-daemon", "sluice-admin", "sluice-host-cli", "sluice-bench"]),
    // The binaries' crates: argument wiring only.
    ("applications", &["sluice", "sluice-csi"]),
    // This crate: checks of the whole workspace, depending on none of it.
    ("workspace checks", &["workspace-tests"]),
];

/// Edges inside one layer, each with why it is not a tangle.
const SAME_LAYER_EDGES: [(&str, &str, &str); 6] = [
    ("nvme-tcp-wire", "nvme-spec", "the PDUs carry the spec's command and completion layouts"),
    ("nvme-target", "nvme-auth", "the target answers DH-HMAC-CHAP with the auth state machines"),
    ("nvme-target", "nvme-reservations", "the target's reservation commands drive the reservation state and its store"),
    ("nvme-host", "nvme-auth", "the host authenticates with the same state machines"),
    ("nvme-host-client", "runtime", "the host driver's I/O queues run on the runtime's ClientRing"),
    ("sim", "workload", "the simulator draws its I/O mix with the workload engine's generators"),
];

/// Edges that must never exist, whatever the layers say.
const NEVER: [(&str, &str, &str); 3] = [
    ("sim", "runtime", "the simulation is deterministic: one thread, a simulated clock and network"),
    ("sim", "nvme-host-client", "the simulation drives the sans-io host, not the driver on the runtime"),
    ("sim", "target-server", "the simulation drives the sans-io target, not the server on the runtime"),
];

/// The crates tests may not depend on: nothing below an application links one.
const APPLICATIONS: [&str; 2] = ["sluice", "sluice-csi"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read_toml(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    text.parse::<toml::Table>().unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// One workspace member: its package name and the workspace crates it names in each
/// dependency table.
struct Member {
    name: String,
    manifest: PathBuf,
    build: BTreeSet<String>,
    dev: BTreeSet<String>,
}

fn members() -> Vec<Member> {
    let root = workspace_root();
    let workspace = read_toml(&root.join("Cargo.toml"));
    let paths: Vec<String> = workspace["workspace"]["members"]
        .as_array()
        .expect("workspace.members is a list")
        .iter()
        .map(|member| member.as_str().expect("a member is a path").to_string())
        .collect();
    let mut manifests = BTreeMap::new();
    for path in &paths {
        let manifest = root.join(path).join("Cargo.toml");
        let table = read_toml(&manifest);
        let name = table["package"]["name"].as_str().expect("package.name").to_string();
        manifests.insert(name, (manifest, table));
    }
    let names: BTreeSet<String> = manifests.keys().cloned().collect();
    let named_in = |table: &toml::Table, key: &str| -> BTreeSet<String> {
        table
            .get(key)
            .and_then(|dependencies| dependencies.as_table())
            .map(|dependencies| {
                dependencies
                    .iter()
                    // A renamed dependency names its package.
                    .map(|(key, value)| {
                        value.get("package").and_then(|package| package.as_str()).unwrap_or(key).to_string()
                    })
                    .filter(|name| names.contains(name))
                    .collect()
            })
            .unwrap_or_default()
    };
    manifests
        .into_iter()
        .map(|(name, (manifest, table))| {
            let mut build = named_in(&table, "dependencies");
            build.extend(named_in(&table, "build-dependencies"));
            let dev = named_in(&table, "dev-dependencies");
            Member { name, manifest, build, dev }
        })
        .collect()
}

fn layer_of(name: &str) -> Option<(usize, &'static str)> {
    LAYERS.iter().enumerate().find(|(_, (_, crates))| crates.contains(&name)).map(|(index, (layer, _))| (index, *layer))
}

#[test]
fn every_crate_has_a_layer_and_depends_only_downwards() {
    let members = members();
    let mut problems = Vec::new();
    for member in &members {
        let Some((rank, layer)) = layer_of(&member.name) else {
            problems.push(format!(
                "{} ({}) is in no layer: add it to LAYERS in {}",
                member.name,
                member.manifest.display(),
                file!()
            ));
            continue;
        };
        for dependency in &member.build {
            let Some((dependency_rank, dependency_layer)) = layer_of(dependency) else {
                continue;
            };
            let listed = SAME_LAYER_EDGES.iter().any(|(from, to, _)| *from == member.name && to == dependency);
            let allowed = dependency_rank < rank || (dependency_rank == rank && listed);
            if !allowed {
                problems.push(format!(
                    "{} (layer {layer}) depends on {dependency} (layer {dependency_layer}): dependencies point down the layers; \
                     move the shared part down, or list a same-layer edge with its reason",
                    member.name
                ));
            }
            if let Some((_, _, why)) = NEVER.iter().find(|(from, to, _)| *from == member.name && to == dependency) {
                problems.push(format!("{} must never depend on {dependency}: {why}", member.name));
            }
        }
        for dependency in member.dev.iter().filter(|dependency| APPLICATIONS.contains(&dependency.as_str())) {
            problems.push(format!(
                "{}'s tests depend on the application crate {dependency}: test through a library crate instead",
                member.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_tables_name_only_crates_of_the_workspace() {
    let members = members();
    let names: BTreeSet<&str> = members.iter().map(|member| member.name.as_str()).collect();
    let mut listed: Vec<&str> = LAYERS.iter().flat_map(|(_, crates)| crates.iter().copied()).collect();
    listed.extend(SAME_LAYER_EDGES.iter().flat_map(|(from, to, _)| [*from, *to]));
    listed.extend(NEVER.iter().flat_map(|(from, to, _)| [*from, *to]));
    let unknown: BTreeSet<&str> = listed.into_iter().filter(|name| !names.contains(name)).collect();
    assert!(unknown.is_empty(), "not crates of the workspace (renamed or removed?): {unknown:?}");
    let mut seen = BTreeSet::new();
    for (_, crates) in LAYERS {
        for name in crates {
            assert!(seen.insert(*name), "{name} is in two layers");
        }
    }
    // A same-layer edge that is no longer used should go, so the list stays the truth.
    for (from, to, _) in SAME_LAYER_EDGES {
        let used = members.iter().any(|member| member.name == from && member.build.contains(to));
        assert!(used, "the same-layer edge {from} -> {to} is listed but not used: remove it");
    }
}

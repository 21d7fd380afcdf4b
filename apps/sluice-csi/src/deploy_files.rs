//! The deployment files under deploy/kubernetes/ stay in step with the flags this
//! binary takes: the `sluice-csi` container's arguments in each manifest must parse.
//! A renamed or removed flag fails here, not in somebody's cluster.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::Arguments;

fn deploy_directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

/// The `args:` list of the container named `sluice-csi` in a manifest. The files are
/// ours and written in one style (a `- name: sluice-csi` item, then `args:` with one
/// quoted argument per line), so reading them needs no YAML parser.
fn container_arguments(manifest: &str) -> Vec<Vec<String>> {
    arguments_of(manifest, "sluice-csi")
}

/// The `args:` lists of the containers named `container` in a manifest.
fn arguments_of(manifest: &str, container: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut lines = manifest.lines().peekable();
    let item = format!("- name: {container}");
    while let Some(line) = lines.next() {
        if line.trim() != item {
            continue;
        }
        // The container's keys, up to its `args:`.
        while let Some(line) = lines.peek() {
            if line.trim() == "args:" || line.trim_start().starts_with("- name:") {
                break;
            }
            lines.next();
        }
        if lines.next_if(|line| line.trim() == "args:").is_none() {
            continue;
        }
        let mut arguments = Vec::new();
        while let Some(item) = lines.next_if(|line| line.trim_start().starts_with("- \"")) {
            let text = item.trim_start().trim_start_matches("- ").trim_matches('"');
            arguments.push(text.to_string());
        }
        found.push(arguments);
    }
    found
}

#[test]
fn every_manifest_passes_flags_this_binary_takes() {
    let mut checked = 0;
    for name in ["controller.yaml", "node.yaml"] {
        let path = deploy_directory().join(name);
        let manifest = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let containers = container_arguments(&manifest);
        assert_eq!(containers.len(), 1, "{name}: one sluice-csi container with args");
        for arguments in containers {
            assert!(!arguments.is_empty(), "{name}: the sluice-csi container has no args");
            let command_line = std::iter::once("sluice-csi".to_string()).chain(arguments.iter().cloned());
            if let Err(error) = Arguments::try_parse_from(command_line) {
                panic!("{name}: sluice-csi {arguments:?} does not parse:\n{error}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 2);
}

#[test]
fn a_flag_this_binary_does_not_take_is_caught() {
    let manifest = "      containers:\n        - name: sluice-csi\n          image: x\n          args:\n            - \"--mode=node\"\n            - \"--no-such-flag=1\"\n        - name: other\n";
    let containers = container_arguments(manifest);
    assert_eq!(containers, vec![vec!["--mode=node".to_string(), "--no-such-flag=1".to_string()]]);
    let command_line = std::iter::once("sluice-csi".to_string()).chain(containers[0].iter().cloned());
    assert!(Arguments::try_parse_from(command_line).is_err());
}

#[test]
fn the_controller_runs_a_sidecar_for_each_capability_on_the_shared_socket() {
    let path = deploy_directory().join("controller.yaml");
    let manifest = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    // CREATE_DELETE_VOLUME, PUBLISH_UNPUBLISH_VOLUME, CREATE_DELETE_SNAPSHOT, EXPAND_VOLUME.
    for sidecar in ["csi-provisioner", "csi-attacher", "csi-snapshotter", "csi-resizer"] {
        let containers = arguments_of(&manifest, sidecar);
        assert_eq!(containers.len(), 1, "controller.yaml: one {sidecar} container with args");
        for wanted in ["--csi-address=/csi/csi.sock", "--leader-election"] {
            assert!(
                containers[0].iter().any(|argument| argument == wanted),
                "controller.yaml: {sidecar} lacks {wanted}"
            );
        }
    }
}

#[test]
fn every_storage_class_allows_expansion() {
    for name in ["storageclass-pool.yaml", "storageclass-rbd.yaml"] {
        let path = deploy_directory().join(name);
        let manifest = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let settings: Vec<&str> =
            manifest.lines().filter(|line| line.trim_start().starts_with("allowVolumeExpansion:")).collect();
        assert_eq!(settings, ["allowVolumeExpansion: true"], "{name}");
    }
}

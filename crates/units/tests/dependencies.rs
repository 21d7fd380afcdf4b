//! This crate sits below every other crate of the workspace (the config, the bench's
//! workload, the host CLI and the crates split out of apps/sluice later all read sizes
//! with it), so it may depend on none of them, nor on anything else: a dependency
//! here would be one of every crate.

#[test]
fn the_crate_depends_on_nothing() {
    let manifest = include_str!("../Cargo.toml");
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        assert!(
            !matches!(section, "[dependencies]" | "[build-dependencies]") && !section.starts_with("[target."),
            "units must stay without dependencies, but {section} has {line:?}"
        );
    }
}

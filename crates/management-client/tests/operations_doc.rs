//! docs/operations.md documents the management API for operators: its method table,
//! its error-code table and the `data.cause` words must name exactly what the code
//! answers with (`methods::METHODS`, `codes::ALL`, `codes::causes::ALL`), so a method
//! added to the table and not to the docs, or dropped from one of them, fails here.

use std::collections::BTreeSet;
use std::path::Path;

use management_client::{codes, methods};

fn operations_doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The first cells of the table whose header row starts with `header`.
fn first_cells<'a>(doc: &'a str, header: &str) -> Vec<&'a str> {
    let mut lines = doc.lines().skip_while(|line| !line.starts_with(header));
    assert!(lines.next().is_some(), "docs/operations.md has no table headed {header:?}");
    lines
        .skip(1) // the | --- | row
        .take_while(|line| line.starts_with('|'))
        .map(|line| line.trim_start_matches('|').split('|').next().unwrap_or("").trim())
        .collect()
}

#[test]
fn the_method_table_names_every_method_and_no_other() {
    let doc = operations_doc();
    let documented: BTreeSet<&str> =
        first_cells(&doc, "| Method |").into_iter().map(|cell| cell.trim_matches('`')).collect();
    let served: BTreeSet<&str> = methods::method_names().into_iter().collect();
    let undocumented: Vec<&&str> = served.difference(&documented).collect();
    let unknown: Vec<&&str> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/operations.md's method table and management_client::methods::METHODS differ: \
         not documented {undocumented:?}; documented but not served {unknown:?}"
    );
}

#[test]
fn the_code_table_names_every_error_code_and_no_other() {
    let doc = operations_doc();
    let documented: Vec<i64> = first_cells(&doc, "| Code |")
        .into_iter()
        .map(|cell| cell.parse().unwrap_or_else(|_| panic!("{cell:?} in the code table is not a code")))
        .collect();
    assert_eq!(documented, codes::ALL, "docs/operations.md's code table and management_client::codes::ALL differ");
}

#[test]
fn every_cause_is_documented() {
    let doc = operations_doc();
    let start = doc.find("also carry `data.cause`").expect("docs/operations.md has the paragraph on data.cause");
    let paragraph = &doc[start..start + doc[start..].find("\n\n").unwrap_or(doc.len() - start)];
    for cause in codes::causes::ALL {
        assert!(
            paragraph.contains(&format!("`{cause}`")),
            "the cause {cause:?} is not in docs/operations.md's data.cause paragraph"
        );
    }
}

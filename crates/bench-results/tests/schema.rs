//! The sample result validates against docs/bench-result.schema.json, and mutations that
//! break the shape are rejected by both the schema and `BenchResult::from_json`.

use bench_results::sample::sample_result;
use bench_results::BenchResult;
use serde_json::{json, Value};

fn validator() -> jsonschema::Validator {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/bench-result.schema.json"
    );
    let text = std::fs::read_to_string(path).expect("docs/bench-result.schema.json");
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::draft202012::new(&schema).expect("schema compiles")
}

fn sample_value() -> Value {
    serde_json::from_str(&sample_result().to_json_pretty()).unwrap()
}

#[test]
fn sample_validates_against_schema() {
    let v = validator();
    let instance = sample_value();
    let errors: Vec<String> = v
        .iter_errors(&instance)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn empty_result_validates_against_schema() {
    let mut r = sample_result();
    r.runs.clear();
    r.ceilings.local_baseline.clear();
    r.ceilings.loopback_tcp_bytes_per_second = None;
    r.preconditioning = None;
    r.partial = true;
    let instance: Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
    assert!(validator().is_valid(&instance));
}

#[test]
fn mutations_fail_schema_and_parse() {
    let v = validator();
    type Mutation = fn(&mut Value);
    let mutations: &[(&str, Mutation)] = &[
        ("wrong schema id", |x| x["schema"] = json!("sluice-bench/2")),
        ("unknown top-level field", |x| x["extra"] = json!(1)),
        ("missing runs[0].iops", |x| {
            x["runs"][0].as_object_mut().unwrap().remove("iops");
        }),
        ("string latency", |x| {
            x["runs"][1]["latency_us"]["mean"] = json!("fast")
        }),
        ("negative ios", |x| x["runs"][0]["ios"] = json!(-1)),
        ("unknown driver", |x| x["driver"] = json!("vdbench")),
        ("read_percent over 100", |x| {
            x["runs"][0]["read_percent"] = json!(101)
        }),
        ("bad timestamp", |x| x["started_at"] = json!("yesterday")),
        ("bad bound_by", |x| x["runs"][0]["bound_by"] = json!("disk")),
        ("percentile 0", |x| {
            x["runs"][0]["latency_us"]["percentiles"][0]["percentile"] = json!(0)
        }),
    ];
    for (what, mutate) in mutations {
        let mut x = sample_value();
        mutate(&mut x);
        assert!(!v.is_valid(&x), "schema accepted: {what}");
        // Everything the schema rejects, the Rust side rejects too (parse or validate).
        let text = x.to_string();
        let rust_ok = match BenchResult::from_json(&text) {
            Ok(r) => bench_results::validate(&r).is_ok(),
            Err(_) => false,
        };
        assert!(!rust_ok, "Rust accepted: {what}");
    }
}

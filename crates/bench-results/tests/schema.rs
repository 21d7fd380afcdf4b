//! The sample result validates against docs/bench-result.schema.json, and mutations that
//! break the shape are rejected by both the schema and `BenchResult::from_json`.

use bench_results::sample::sample_result;
use bench_results::BenchResult;
use serde_json::{json, Value};

fn docs(path: &str) -> String {
    format!("{}/../../docs/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn validator_of(file: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(docs(file)).expect(file);
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::draft202012::new(&schema).expect("schema compiles")
}

fn validator() -> jsonschema::Validator {
    validator_of("bench-result.schema.json")
}

fn sample_value() -> Value {
    serde_json::from_str(&sample_result().to_json_pretty()).unwrap()
}

#[test]
fn sample_validates_against_schema() {
    let v = validator();
    let instance = sample_value();
    let errors: Vec<String> = v.iter_errors(&instance).map(|e| format!("{} at {}", e, e.instance_path)).collect();
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
        ("wrong schema id", |x| x["schema"] = json!("sluice-bench/4")),
        ("unknown target_phases_us field", |x| x["runs"][0]["target_phases_us"]["network"] = json!(1.0)),
        ("missing target_phases_us.send", |x| {
            x["runs"][0]["target_phases_us"].as_object_mut().unwrap().remove("send");
        }),
        ("negative receive", |x| x["runs"][0]["target_phases_us"]["receive"] = json!(-0.5)),
        ("string commands", |x| x["runs"][1]["target_phases_us"]["commands"] = json!("many")),
        ("no commands", |x| x["runs"][1]["target_phases_us"]["commands"] = json!(0)),
        ("unknown schedule field", |x| {
            let last = x["runs"].as_array().unwrap().len() - 1;
            x["runs"][last]["schedule"]["lag_p99_us"] = json!(1.0)
        }),
        ("negative lag", |x| {
            let last = x["runs"].as_array().unwrap().len() - 1;
            x["runs"][last]["schedule"]["lag_max_us"] = json!(-1.0)
        }),
        ("string late_ios", |x| {
            let last = x["runs"].as_array().unwrap().len() - 1;
            x["runs"][last]["schedule"]["late_ios"] = json!("some")
        }),
        ("unknown top-level field", |x| x["extra"] = json!(1)),
        ("missing runs[0].iops", |x| {
            x["runs"][0].as_object_mut().unwrap().remove("iops");
        }),
        ("string latency", |x| x["runs"][1]["latency_us"]["mean"] = json!("fast")),
        ("negative ios", |x| x["runs"][0]["ios"] = json!(-1)),
        ("unknown driver", |x| x["driver"] = json!("vdbench")),
        ("read_percent over 100", |x| x["runs"][0]["read_percent"] = json!(101)),
        ("bad timestamp", |x| x["started_at"] = json!("yesterday")),
        ("bad bound_by", |x| x["runs"][0]["bound_by"] = json!("disk")),
        ("percentile 0", |x| x["runs"][0]["latency_us"]["percentiles"][0]["percentile"] = json!(0)),
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

/// The sample's curve has runs with a schedule, one of which fell behind.
#[test]
fn sample_has_schedules() {
    let r = sample_result();
    let schedules: Vec<_> = r.runs.iter().filter_map(|run| run.schedule.as_ref()).collect();
    assert_eq!(schedules.len(), 6);
    assert!(schedules.iter().any(|s| s.fell_behind) && schedules.iter().any(|s| !s.fell_behind));
}

/// Results recorded as sluice-bench/1 (docs/results/) still match their schema and are
/// read as the current shape: no schedule, an upgraded schema id and a note saying so.
#[test]
fn recorded_schema_1_results_are_read() {
    let v1 = validator_of("bench-result-1.schema.json");
    let dir = docs("results");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        if value["schema"] != json!(bench_results::SCHEMA_ID_1) {
            continue;
        }
        let errors: Vec<String> = v1.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        let r = BenchResult::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(r.schema, bench_results::SCHEMA_ID);
        assert!(r.runs.iter().all(|run| run.schedule.is_none() && run.target_phases_us.is_none()));
        assert_eq!(r.notes.last().map(String::as_str), Some(bench_results::result::UPGRADED_NOTE));
        // Upgraded, it is a valid current result.
        let upgraded: Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        assert!(validator().is_valid(&upgraded), "{}", path.display());
        read += 1;
    }
    assert!(read >= 3, "only {read} sluice-bench/1 results under {dir}");

    // A schedule in a /1 result is an unknown field there.
    let mut x = sample_value();
    x["schema"] = json!(bench_results::SCHEMA_ID_1);
    let e = BenchResult::from_json(&x.to_string()).unwrap_err().to_string();
    assert!(e.contains("runs[0].schedule"), "{e}");
    // Without it and the split, the sample reads as /1 and comes back as the sample
    // without them (plus the note).
    for run in x["runs"].as_array_mut().unwrap() {
        run.as_object_mut().unwrap().remove("schedule");
        run.as_object_mut().unwrap().remove("target_phases_us");
    }
    let r = BenchResult::from_json(&x.to_string()).unwrap();
    assert_eq!(r.runs.len(), sample_result().runs.len());
    assert!(r.runs.iter().all(|run| run.schedule.is_none() && run.target_phases_us.is_none()));
    assert_eq!(r.notes.last().map(String::as_str), Some(bench_results::result::UPGRADED_NOTE));
}

/// Every run of the sample has the target's split, and a run without one (null) is valid.
#[test]
fn sample_has_target_phases() {
    let r = sample_result();
    assert!(r.runs.iter().all(|run| run.target_phases_us.as_ref().is_some_and(|p| p.commands >= run.ios)));
    let mut x = sample_value();
    x["runs"][0]["target_phases_us"] = Value::Null;
    assert!(validator().is_valid(&x));
    let back = BenchResult::from_json(&x.to_string()).unwrap();
    assert_eq!(back.runs[0].target_phases_us, None);
    assert_eq!(back.runs[1], r.runs[1], "round trip of a split");
}

/// A sluice-bench/2 result (the sample without the split) reads as the current shape:
/// no split, an upgraded schema id and a note saying so; a split in it is refused.
#[test]
fn schema_2_results_are_read() {
    let mut x = sample_value();
    x["schema"] = json!(bench_results::SCHEMA_ID_2);
    let e = BenchResult::from_json(&x.to_string()).unwrap_err().to_string();
    assert!(e.contains("runs[0].target_phases_us") && e.contains("sluice-bench/2"), "{e}");
    for run in x["runs"].as_array_mut().unwrap() {
        run.as_object_mut().unwrap().remove("target_phases_us");
    }
    let r = BenchResult::from_json(&x.to_string()).unwrap();
    assert_eq!(r.schema, bench_results::SCHEMA_ID);
    assert_eq!(r.notes.last().map(String::as_str), Some(bench_results::result::UPGRADED_NOTE_2));
    assert_eq!(r.notes.len(), sample_result().notes.len() + 1);
    let mut expected = sample_result();
    for run in &mut expected.runs {
        run.target_phases_us = None;
    }
    assert_eq!(r.runs, expected.runs, "everything else as written");
    assert!(r.runs.iter().any(|run| run.schedule.is_some()), "a /2 result keeps its schedules");
    assert_eq!(bench_results::validate(&r), Ok(()));
    let upgraded: Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
    assert!(validator().is_valid(&upgraded));
}

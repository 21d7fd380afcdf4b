//! The result of a `sluice bench` run and the HTML report made from it.
//!
//! * [`result`]: the versioned JSON result (`"schema": "sluice-bench/3"`; `/2` and `/1`
//!   are still read): serde types,
//!   [`BenchResult::from_json`] / [`BenchResult::to_json_pretty`], and [`validate`] for the
//!   semantic checks JSON Schema cannot express. The same shape is described for other
//!   tools in `docs/bench-result.schema.json`.
//! * [`report`]: [`render_html`] turns one or more results into a single self-contained
//!   HTML file (inline CSS and SVG, no network).
//! * [`phases`]: where the embedded target's time went in a run (receive, QoS, storage,
//!   send), shown in the report's "Where the target's time went" section.
//! * [`fio`]: fio's JSON output (`--output-format=json+`) read into the same quantities,
//!   for `sluice bench --driver fio` and `--compare iscsi`.

pub mod fio;
pub mod phases;
pub mod report;
pub mod result;
#[cfg(any(test, feature = "sample"))]
pub mod sample;
pub mod schedule;
mod svg;
mod upgrade;

pub use report::render_html;
pub use result::{
    validate, BaselineResult, BenchResult, Ceilings, CpuUse, Latency, Machine, Percentile, Preconditioning,
    QosObservation, ResultError, RunResult, Sample, Schedule, SteadyState, TargetInfo, TargetPhases,
    BEHIND_ACHIEVED_PERCENT, BEHIND_LATE_PERCENT, SCHEMA_ID, SCHEMA_ID_1, SCHEMA_ID_2,
};

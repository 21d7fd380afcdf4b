//! Results of earlier shapes read as the current one (see
//! [`crate::BenchResult::from_json`]): each is read in its own shape, strictly (a field
//! it did not have is refused), the run fields it lacked are added as `null`, and a
//! note says what it cannot show.

use crate::result::{
    deserialize, BenchResult, ResultError, SCHEMA_ID, SCHEMA_ID_1, SCHEMA_ID_2, UPGRADED_NOTE, UPGRADED_NOTE_2,
};

/// Per earlier shape: the [`crate::RunResult`] fields it lacked (all `Option`s) and
/// the note its upgrade gets. (`CpuUse`'s run-queue times, also new in /2, read as
/// `null` when absent.)
const EARLIER: [(&str, &[&str], &str); 2] = [
    (SCHEMA_ID_2, &["target_phases_us"], UPGRADED_NOTE_2),
    (SCHEMA_ID_1, &["schedule", "target_phases_us"], UPGRADED_NOTE),
];

/// `value`, a result of shape `schema`, as the current shape; `None` when `schema` is
/// not an earlier shape this build reads.
pub(crate) fn upgrade(schema: &str, mut value: serde_json::Value) -> Option<Result<BenchResult, ResultError>> {
    let &(_, missing, note) = EARLIER.iter().find(|(id, _, _)| *id == schema)?;
    if let Some(runs) = value.get_mut("runs").and_then(|r| r.as_array_mut()) {
        for (i, run) in runs.iter_mut().enumerate() {
            let Some(run) = run.as_object_mut() else {
                continue;
            };
            for field in missing {
                if run.contains_key(*field) {
                    return Some(Err(ResultError::Field {
                        path: format!("runs[{i}].{field}"),
                        message: format!("unknown field `{field}` in a {schema} result"),
                    }));
                }
                run.insert((*field).into(), serde_json::Value::Null);
            }
        }
    }
    Some(deserialize(value).map(|mut result| {
        result.schema = SCHEMA_ID.into();
        result.notes.push(note.into());
        result
    }))
}

//! The files every experiment writes.

use crate::ExperimentError;
use std::path::Path;

/// Writes an experiment's `runs.json` (every run, pretty JSON) and `table.md` to `out`.
pub fn write_runs_and_table<T: serde::Serialize>(
    out: &Path,
    runs: &T,
    table: String,
) -> Result<(), ExperimentError> {
    let w = |name: &str, text: String| {
        std::fs::write(out.join(name), text)
            .map_err(|e| ExperimentError::step(format!("cannot write {name}"), e))
    };
    w(
        "runs.json",
        serde_json::to_string_pretty(runs).map_err(ExperimentError::other)?,
    )?;
    w("table.md", table)
}

//! The files every experiment writes.

use std::path::Path;

/// Writes an experiment's `runs.json` (every run, pretty JSON) and `table.md` to `out`.
pub fn write_runs_and_table<T: serde::Serialize>(
    out: &Path,
    runs: &T,
    table: String,
) -> Result<(), String> {
    let w = |name: &str, text: String| {
        std::fs::write(out.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))
    };
    w(
        "runs.json",
        serde_json::to_string_pretty(runs).map_err(|e| e.to_string())?,
    )?;
    w("table.md", table)
}

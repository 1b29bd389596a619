//! The CPU-bound bottleneck of the overload and scale-out experiments, calibrated
//! once per experiment.

use crate::ExperimentError;

/// Checksum passes of the bottleneck for `ms` of CPU per request: `given`, or the
/// largest of five calibrations here (the one least disturbed by other load on the
/// machine), said through `log`. Experiments pass the result to every
/// `seda serve --bottleneck-passes`, so that every server of every run does the same
/// work per request.
pub fn bottleneck_passes(
    given: Option<u64>,
    ms: f64,
    log: &mut dyn FnMut(&str),
) -> Result<u64, ExperimentError> {
    if let Some(k) = given {
        return Ok(k);
    }
    let d = std::time::Duration::from_secs_f64(ms / 1e3);
    let mut best = 0;
    for _ in 0..5 {
        let b = seda_http::Bottleneck::calibrate(d)
            .map_err(|e| ExperimentError::step("cannot calibrate the bottleneck", e))?;
        best = best.max(b.passes());
    }
    log(&format!(
        "bottleneck: {ms} ms calibrated here to {best} passes (largest of 5), used by every server"
    ));
    Ok(best)
}

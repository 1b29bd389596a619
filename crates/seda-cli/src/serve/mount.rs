//! Mounting `seda serve`'s dynamic handlers: the bottleneck handler and the overload
//! control applied to every dynamic stage, and the settings that would have no effect.

use std::time::Duration;

use seda::control::ThreadPoolConfig;
use seda_http::{Bottleneck, DEFAULT_SAMPLE_PERIOD, OverloadControl, ServerConfig};

/// Settings that would have no effect, said once at start.
pub(super) fn warnings(
    cfg: &ServerConfig,
    overload: &OverloadControl,
    bottleneck: Option<Duration>,
) -> Vec<String> {
    let mut out = Vec::new();
    if cfg.handlers.is_empty() && cfg.proxies.is_empty() && bottleneck.is_none() {
        let set: Vec<&str> = [
            (overload.rt_target.is_some(), "--rt-target-ms"),
            (overload.admission.is_some(), "--admission"),
            (overload.classes.header.is_some(), "--class-header"),
            (!overload.handlers.is_empty(), "[[handler]]"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if !set.is_empty() {
            out.push(format!(
                "{} has no effect: no dynamic handler or proxy route is mounted (static \
                 files have no admission controller; add --bottleneck-ms, a --proxy route \
                 or serve the demo site)",
                set.join(", ")
            ));
        }
    }
    if let Some(a) = cfg.admin_listen
        && !a.ip().is_loopback()
    {
        out.push(format!(
            "the admin listener {a} is not on loopback: anyone who reaches it sees the server's statistics"
        ));
    }
    out
}

/// Adds the bottleneck handler (if asked for) and applies the overload control to
/// every dynamic handler; returns the bottleneck's passes (calibrated, or `passes`).
pub(super) fn mount_overload(
    cfg: &mut ServerConfig,
    overload: &OverloadControl,
    bottleneck: Option<Duration>,
    passes: Option<u64>,
) -> Result<Option<u64>, String> {
    // Every check before the calibration, so that a bad setting fails at once.
    let mut names: Vec<String> = cfg.handlers.iter().map(registration_name).collect();
    let mut quality = None;
    if bottleneck.is_some() {
        names.push("bottleneck".into());
        if overload.degrade {
            quality = Some(
                overload
                    .quality_for("bottleneck")
                    .map_err(|e| e.to_string())?,
            );
        }
    }
    overload
        .validate(names.iter().map(String::as_str))
        .map_err(|e| e.to_string())?;
    let given = passes;
    let mut passes = None;
    if let Some(ms) = bottleneck {
        let mut b = match given {
            Some(k) => Bottleneck::with_passes(ms, k),
            None => Bottleneck::calibrate(ms),
        }
        .map_err(|e| format!("cannot set up the bottleneck handler: {e}"))?;
        passes = Some(b.passes());
        if let Some(q) = quality {
            b = b
                .degrade(q, DEFAULT_SAMPLE_PERIOD)
                .map_err(|e| e.to_string())?;
        }
        cfg.handlers
            .push(b.registration().thread_pool(bottleneck_pool()));
    }
    cfg.handlers = std::mem::take(&mut cfg.handlers)
        .into_iter()
        .map(|r| overload.apply(r).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    Ok(passes)
}

/// The bottleneck's thread pool: CPU-bound work needs a thread per core from the
/// start. The thread-pool controller adds a thread only when more than 10 requests
/// wait, and admission control keeps the queue under that: with one thread to begin
/// with, the default policy held the stage at one thread, half the machine's
/// capacity (issue 14's runs).
fn bottleneck_pool() -> ThreadPoolConfig {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    ThreadPoolConfig::default()
        .with_min_threads(cores.min(8))
        .with_max_threads(8)
        .with_queue_threshold(10)
}

/// The handler name of a registration (its stage is `handler:<name>`).
fn registration_name(r: &seda_http::HandlerRegistration) -> String {
    r.stage_name()
        .strip_prefix("handler:")
        .unwrap_or_default()
        .to_owned()
}

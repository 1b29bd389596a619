//! Admin endpoints on the serving port: the runtime's statistics and stage graph.
//!
//! - `GET /_seda/stats`: JSON `{"stages":[{name, queue_len, threads, processed,
//!   rejected, rt_p90_ms, admission_rate, rt_target_ms, classes, ...}], "edges":
//!   [[from, to]], "haboob": {...}, "sockets": {...}}` (every field of
//!   `seda::StageSnapshot` per stage). Per stage, `admission` is `{policy, enabled,
//!   rate, p90_ms, target_ms, limit, classes}` (policy `"none"` without one),
//!   `classes` is `[{class, admitted, rejected}]`, and each dynamic handler's stage
//!   has `quality` (automatic service quality in 0..1, or null).
//! - `GET /_seda/graph`: the stage graph as Graphviz DOT.
//! - `GET /_seda/metrics`: Prometheus text exposition.

use super::core::Haboob;
use crate::handler::Response;

/// The admin response for `path`, or `None` if it names no endpoint.
pub(crate) fn respond(hb: &Haboob, path: &[u8]) -> Option<Response> {
    let resp = match path {
        b"/_seda/stats" => Response::ok("application/json", stats_json(hb)),
        b"/_seda/graph" => Response::ok(
            "text/vnd.graphviz; charset=utf-8",
            hb.rt.snapshot().to_dot(),
        ),
        b"/_seda/metrics" => Response::ok("text/plain; version=0.0.4; charset=utf-8", metrics(hb)),
        _ => return None,
    };
    Some(resp.with_header("Cache-Control", "no-store"))
}

/// The stats document.
pub(crate) fn stats_json(hb: &Haboob) -> String {
    let snap = hb.rt.snapshot();
    let mut doc = serde_json::to_value(&snap).unwrap_or_else(|_| serde_json::json!({}));
    let qualities: Vec<(String, Option<f64>)> = hb
        .routes
        .read()
        .iter()
        .map(|r| (r.reg.stage_name(), r.reg.handler.quality()))
        .collect();
    if let Some(stages) = doc.get_mut("stages").and_then(|s| s.as_array_mut()) {
        for st in stages.iter_mut().filter_map(|s| s.as_object_mut()) {
            overload_fields(st, &qualities);
        }
    }
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(
            "haboob".into(),
            serde_json::to_value(hb.counter_snapshot()).unwrap_or_default(),
        );
        if let Some(s) = hb.sockets.get() {
            obj.insert(
                "sockets".into(),
                serde_json::to_value(s.stats()).unwrap_or_default(),
            );
        }
    }
    doc.to_string()
}

/// The overload-control view of one stage (the contract of `seda experiment
/// overload`): `admission` is always an object with `enabled` (a stage without a
/// policy reads `{"policy": "none", "enabled": false, ...}`), and dynamic stages get
/// `quality` (their handler's automatic quality, or null).
fn overload_fields(
    st: &mut serde_json::Map<String, serde_json::Value>,
    qualities: &[(String, Option<f64>)],
) {
    use serde_json::{Value, json};
    let enabled = st
        .get("admission_enabled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match st.get_mut("admission") {
        Some(Value::Object(a)) => {
            a.insert("enabled".into(), Value::Bool(enabled));
        }
        _ => {
            st.insert(
                "admission".into(),
                json!({"policy": "none", "enabled": false, "rate": null, "p90_ms": null,
                       "target_ms": null, "limit": null, "classes": []}),
            );
        }
    }
    let name = st.get("name").and_then(Value::as_str).unwrap_or_default();
    if let Some((_, q)) = qualities.iter().find(|(n, _)| n == name) {
        st.insert("quality".into(), json!(q));
    }
}

fn metrics(hb: &Haboob) -> String {
    let mut out = hb.rt.snapshot().to_prometheus();
    let c = hb.counter_snapshot();
    let lines: [(&str, &str, f64); 9] = [
        (
            "haboob_requests_total",
            "Requests parsed.",
            c.requests as f64,
        ),
        (
            "haboob_direct_hits_total",
            "Requests answered on the direct hit path.",
            c.direct_hits as f64,
        ),
        (
            "haboob_cache_misses_total",
            "Requests sent to CacheMiss.",
            c.cache_misses as f64,
        ),
        (
            "haboob_dynamic_requests_total",
            "Requests routed to dynamic handlers.",
            c.dynamic_requests as f64,
        ),
        (
            "haboob_overload_responses_total",
            "Requests answered with the overload action.",
            c.overload_responses as f64,
        ),
        (
            "haboob_bad_requests_total",
            "Requests that failed to parse.",
            c.bad_requests as f64,
        ),
        (
            "haboob_header_timeouts_total",
            "Connections cut off by the header timeout.",
            c.header_timeouts as f64,
        ),
        (
            "haboob_connections_open",
            "Open connections.",
            c.connections_open as f64,
        ),
        (
            "haboob_page_cache_bytes",
            "Bytes in the page cache.",
            c.page_cache.bytes as f64,
        ),
    ];
    for (name, help, v) in lines {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
        ));
    }
    out
}

//! Prometheus text exposition (format 0.0.4) of a runtime snapshot.

use std::fmt::Write as _;

use super::{LatencySummary, RuntimeSnapshot, StageSnapshot};

impl RuntimeSnapshot {
    /// The snapshot in the Prometheus text format, one metric family per statistic,
    /// labelled by `stage` (and `class` for per-class counters).
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        type Get = fn(&StageSnapshot) -> f64;
        let gauges: [(&str, &str, &str, Get); 16] = [
            (
                "seda_stage_queue_length",
                "gauge",
                "Events waiting in the stage queue.",
                |s| s.queue_len as f64,
            ),
            (
                "seda_stage_queue_capacity",
                "gauge",
                "Capacity of the stage queue.",
                |s| s.capacity as f64,
            ),
            (
                "seda_stage_threads",
                "gauge",
                "Threads in the stage's own pool.",
                |s| s.threads as f64,
            ),
            (
                "seda_stage_threads_busy",
                "gauge",
                "Threads or events busy in the handler.",
                |s| s.threads_busy as f64,
            ),
            (
                "seda_stage_enqueued_total",
                "counter",
                "Enqueue attempts.",
                |s| s.enqueued as f64,
            ),
            (
                "seda_stage_admitted_total",
                "counter",
                "Events admitted.",
                |s| s.admitted as f64,
            ),
            (
                "seda_stage_rejected_total",
                "counter",
                "Events refused by admission control.",
                |s| s.rejected as f64,
            ),
            (
                "seda_stage_full_total",
                "counter",
                "Events refused by a full queue.",
                |s| s.full as f64,
            ),
            (
                "seda_stage_dropped_total",
                "counter",
                "Events dropped by lossy enqueue.",
                |s| s.dropped as f64,
            ),
            (
                "seda_stage_processed_total",
                "counter",
                "Events handled.",
                |s| s.processed as f64,
            ),
            (
                "seda_stage_panics_total",
                "counter",
                "Handler panics caught.",
                |s| s.panics as f64,
            ),
            (
                "seda_stage_batch_size",
                "gauge",
                "Current batching factor.",
                |s| s.batch_size as f64,
            ),
            (
                "seda_stage_admission_enabled",
                "gauge",
                "1 when admission control is on.",
                |s| f64::from(u8::from(s.admission_enabled)),
            ),
            (
                "seda_stage_admission_rate",
                "gauge",
                "Admission rate, events per second (NaN if none).",
                |s| s.admission_rate.unwrap_or(f64::NAN),
            ),
            (
                "seda_stage_rt_p90_seconds",
                "gauge",
                "Current 90th-percentile response time estimate.",
                |s| s.rt_p90_ms.map_or(f64::NAN, |v| v / 1000.0),
            ),
            (
                "seda_stage_rt_target_seconds",
                "gauge",
                "90th-percentile response time target.",
                |s| s.rt_target_ms.map_or(f64::NAN, |v| v / 1000.0),
            ),
        ];
        for (name, kind, help, get) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for s in &self.stages {
                let _ = writeln!(
                    out,
                    "{name}{{stage=\"{}\"}} {}",
                    label(&s.name),
                    num(get(s))
                );
            }
        }
        for (family, help) in [
            ("admitted", "Events admitted, by class."),
            ("rejected", "Events rejected, by class."),
        ] {
            let name = format!("seda_stage_class_{family}_total");
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for s in &self.stages {
                for c in &s.classes {
                    let v = if family == "admitted" {
                        c.admitted
                    } else {
                        c.rejected
                    };
                    let _ = writeln!(
                        out,
                        "{name}{{stage=\"{}\",class=\"{}\"}} {v}",
                        label(&s.name),
                        c.class
                    );
                }
            }
        }
        type Hist = fn(&StageSnapshot) -> &LatencySummary;
        let summaries: [(&str, &str, Hist); 3] = [
            (
                "seda_stage_queue_delay_seconds",
                "Time events wait in the queue.",
                |s| &s.queue_delay,
            ),
            (
                "seda_stage_service_time_seconds",
                "Handler time per event.",
                |s| &s.service_time,
            ),
            (
                "seda_stage_response_time_seconds",
                "Response time since the request was born.",
                |s| &s.response_time,
            ),
        ];
        for (name, help, get) in summaries {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
            for s in &self.stages {
                let h = get(s);
                let l = label(&s.name);
                for (q, v) in [("0.5", h.p50_ms), ("0.9", h.p90_ms), ("0.99", h.p99_ms)] {
                    let _ = writeln!(
                        out,
                        "{name}{{stage=\"{l}\",quantile=\"{q}\"}} {}",
                        num(v / 1000.0)
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_sum{{stage=\"{l}\"}} {}",
                    num(h.mean_ms * h.count as f64 / 1000.0)
                );
                let _ = writeln!(out, "{name}_count{{stage=\"{l}\"}} {}", h.count);
            }
        }
        let _ = writeln!(
            out,
            "# HELP seda_graph_edge Stage graph edge observed at run time.\n# TYPE seda_graph_edge gauge"
        );
        for (from, to) in &self.edges {
            let _ = writeln!(
                out,
                "seda_graph_edge{{from=\"{}\",to=\"{}\"}} 1",
                label(from),
                label(to)
            );
        }
        out
    }
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else {
        format!("{v}")
    }
}

//! Prometheus text exposition (format 0.0.4): [`PrometheusText`], the one writer of
//! the workspace's exporters (the runtime's snapshot below, Haboob's counters,
//! Gnutella's), and the runtime snapshot written with it.
//!
//! # Invariants
//! - Each family is one `# HELP` and one `# TYPE` line followed by its samples.
//! - Label values and help texts are escaped as the format asks (`\\`, `\"` in label
//!   values, `\n`), so a stage or label named by a user cannot break a line.
//! - Integers are written exactly; floats as Rust prints them, `NaN`, `+Inf`, `-Inf`.

use std::fmt::Write as _;

use super::{LatencySummary, RuntimeSnapshot, StageSnapshot};

/// The `# TYPE` of a metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A count that only grows (names end in `_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Quantiles with `_sum` and `_count` samples.
    Summary,
}

impl MetricKind {
    fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Summary => "summary",
        }
    }
}

/// A sample value: integers are written exactly, floats with `NaN` and `±Inf` spelled
/// as Prometheus reads them.
pub trait MetricValue: Copy {
    /// Appends the value's text to `out`.
    fn write_to(self, out: &mut String);
}

macro_rules! integer_value {
    ($($t:ty),*) => {$(
        impl MetricValue for $t {
            fn write_to(self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
integer_value!(u8, u16, u32, u64, usize, i32, i64);

impl MetricValue for f64 {
    fn write_to(self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

/// Writes metric families in the Prometheus text format (0.0.4) onto a `String`.
///
/// # Examples
///
/// ```
/// use seda::{MetricKind, PrometheusText};
///
/// let mut out = String::new();
/// PrometheusText::new(&mut out)
///     .family("app_requests_total", MetricKind::Counter, "Requests served.")
///     .sample("app_requests_total", &[("route", "/a")], 3u64)
///     .sample("app_requests_total", &[("route", "say \"hi\"")], 1u64)
///     .metric("app_open", MetricKind::Gauge, "Open connections.", 2u64);
/// let lines: Vec<&str> = out.lines().collect();
/// assert_eq!(
///     lines,
///     [
///         "# HELP app_requests_total Requests served.",
///         "# TYPE app_requests_total counter",
///         r#"app_requests_total{route="/a"} 3"#,
///         r#"app_requests_total{route="say \"hi\""} 1"#,
///         "# HELP app_open Open connections.",
///         "# TYPE app_open gauge",
///         "app_open 2",
///     ]
/// );
/// ```
#[derive(Debug)]
pub struct PrometheusText<'a> {
    out: &'a mut String,
}

impl<'a> PrometheusText<'a> {
    /// A writer that appends to `out`.
    pub fn new(out: &'a mut String) -> Self {
        PrometheusText { out }
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines. Its samples follow.
    pub fn family(&mut self, name: &str, kind: MetricKind, help: &str) -> &mut Self {
        debug_assert!(valid_name(name), "bad metric name {name:?}");
        let _ = write!(self.out, "# HELP {name} ");
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.as_str());
        self
    }

    /// One sample line, `name{label="value",...} value` (no braces without labels).
    /// `name` is the family's, or a summary's `_sum` / `_count`.
    pub fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        value: impl MetricValue,
    ) -> &mut Self {
        debug_assert!(valid_name(name), "bad metric name {name:?}");
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                debug_assert!(valid_name(k) && !k.contains(':'), "bad label {k:?}");
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label(self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        value.write_to(self.out);
        self.out.push('\n');
        self
    }

    /// A family of one unlabelled sample.
    pub fn metric(
        &mut self,
        name: &str,
        kind: MetricKind,
        help: &str,
        value: impl MetricValue,
    ) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }
}

fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl RuntimeSnapshot {
    /// The snapshot in the Prometheus text format, one metric family per statistic,
    /// labelled by `stage` (and `class` for per-class counters).
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        let mut w = PrometheusText::new(&mut out);
        use MetricKind::{Counter, Gauge};
        type Get = fn(&StageSnapshot) -> f64;
        let families: [(&str, MetricKind, &str, Get); 16] = [
            (
                "seda_stage_queue_length",
                Gauge,
                "Events waiting in the stage queue.",
                |s| s.queue_len as f64,
            ),
            (
                "seda_stage_queue_capacity",
                Gauge,
                "Capacity of the stage queue.",
                |s| s.capacity as f64,
            ),
            (
                "seda_stage_threads",
                Gauge,
                "Threads in the stage's own pool.",
                |s| s.threads as f64,
            ),
            (
                "seda_stage_threads_busy",
                Gauge,
                "Threads or events busy in the handler.",
                |s| s.threads_busy as f64,
            ),
            (
                "seda_stage_enqueued_total",
                Counter,
                "Enqueue attempts.",
                |s| s.enqueued as f64,
            ),
            (
                "seda_stage_admitted_total",
                Counter,
                "Events admitted.",
                |s| s.admitted as f64,
            ),
            (
                "seda_stage_rejected_total",
                Counter,
                "Events refused by admission control.",
                |s| s.rejected as f64,
            ),
            (
                "seda_stage_full_total",
                Counter,
                "Events refused by a full queue.",
                |s| s.full as f64,
            ),
            (
                "seda_stage_dropped_total",
                Counter,
                "Events dropped by lossy enqueue.",
                |s| s.dropped as f64,
            ),
            (
                "seda_stage_processed_total",
                Counter,
                "Events handled.",
                |s| s.processed as f64,
            ),
            (
                "seda_stage_panics_total",
                Counter,
                "Handler panics caught.",
                |s| s.panics as f64,
            ),
            (
                "seda_stage_batch_size",
                Gauge,
                "Current batching factor.",
                |s| s.batch_size as f64,
            ),
            (
                "seda_stage_admission_enabled",
                Gauge,
                "1 when admission control is on.",
                |s| f64::from(u8::from(s.admission_enabled)),
            ),
            (
                "seda_stage_admission_rate",
                Gauge,
                "Admission rate, events per second (NaN if none).",
                |s| s.admission_rate.unwrap_or(f64::NAN),
            ),
            (
                "seda_stage_rt_p90_seconds",
                Gauge,
                "Current 90th-percentile response time estimate.",
                |s| s.rt_p90_ms.map_or(f64::NAN, |v| v / 1000.0),
            ),
            (
                "seda_stage_rt_target_seconds",
                Gauge,
                "90th-percentile response time target.",
                |s| s.rt_target_ms.map_or(f64::NAN, |v| v / 1000.0),
            ),
        ];
        for (name, kind, help, get) in families {
            w.family(name, kind, help);
            for s in &self.stages {
                w.sample(name, &[("stage", &s.name)], get(s));
            }
        }
        for (family, help) in [
            ("admitted", "Events admitted, by class."),
            ("rejected", "Events rejected, by class."),
        ] {
            let name = format!("seda_stage_class_{family}_total");
            w.family(&name, Counter, help);
            for s in &self.stages {
                for c in &s.classes {
                    let v = if family == "admitted" {
                        c.admitted
                    } else {
                        c.rejected
                    };
                    let class = c.class.to_string();
                    w.sample(&name, &[("stage", &s.name), ("class", &class)], v);
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
            w.family(name, MetricKind::Summary, help);
            let (sum, count) = (format!("{name}_sum"), format!("{name}_count"));
            for s in &self.stages {
                let h = get(s);
                for (q, v) in [("0.5", h.p50_ms), ("0.9", h.p90_ms), ("0.99", h.p99_ms)] {
                    w.sample(name, &[("stage", &s.name), ("quantile", q)], v / 1000.0);
                }
                w.sample(
                    &sum,
                    &[("stage", &s.name)],
                    h.mean_ms * h.count as f64 / 1000.0,
                );
                w.sample(&count, &[("stage", &s.name)], h.count);
            }
        }
        w.family(
            "seda_graph_edge",
            Gauge,
            "Stage graph edge observed at run time.",
        );
        for (from, to) in &self.edges {
            w.sample("seda_graph_edge", &[("from", from), ("to", to)], 1u32);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_labels_are_written_as_the_format_reads_them() {
        let mut out = String::new();
        PrometheusText::new(&mut out)
            .family("m", MetricKind::Gauge, "a \\ b\nc")
            .sample("m", &[("l", "x\\y\n\"z\"")], f64::NAN)
            .sample("m", &[], f64::INFINITY)
            .sample("m", &[], f64::NEG_INFINITY)
            .sample("m", &[], 0.25)
            .sample("m", &[("a", "1"), ("b", "2")], u64::MAX);
        assert_eq!(
            out,
            "# HELP m a \\\\ b\\nc\n# TYPE m gauge\n\
             m{l=\"x\\\\y\\n\\\"z\\\"\"} NaN\n\
             m +Inf\nm -Inf\nm 0.25\n\
             m{a=\"1\",b=\"2\"} 18446744073709551615\n"
        );
    }
}

//! The stats document of `/_seda/stats`: one serde type, written by the admin
//! server and read by the experiments (`seda-load`), so that the contract between
//! them is checked by the compiler, not by string keys.
//!
//! Every field has a default, so a reader accepts documents from servers that send
//! fewer fields, and readers that know fewer fields ignore the rest.

use std::collections::BTreeMap;

use seda::{RuntimeSnapshot, StageSnapshot};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// `GET /_seda/stats`: the runtime's stages and stage graph, plus one section per
/// application part (`haboob`, `sockets`, ...).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct StatsDoc {
    /// Milliseconds since the runtime was built.
    pub uptime_ms: u64,
    /// Default thread model of the runtime.
    pub thread_model: String,
    /// Workers of the shared pool (0 when unused).
    pub shared_workers: usize,
    /// Timers scheduled and not yet fired.
    pub timers_pending: usize,
    /// Every stage, in registration order.
    pub stages: Vec<StageStats>,
    /// Edges of the stage graph observed at run time, `[from, to]`.
    pub edges: Vec<(String, String)>,
    /// Application sections by name; read one with [`StatsDoc::section`].
    #[serde(flatten)]
    pub sections: BTreeMap<String, serde_json::Value>,
}

impl StatsDoc {
    /// The runtime part of the document, from a snapshot.
    pub fn from_snapshot(snap: &RuntimeSnapshot) -> Self {
        StatsDoc {
            uptime_ms: snap.uptime_ms,
            thread_model: snap.thread_model.clone(),
            shared_workers: snap.shared_workers,
            timers_pending: snap.timers_pending,
            stages: snap.stages.iter().map(StageStats::from).collect(),
            edges: snap.edges.clone(),
            sections: BTreeMap::new(),
        }
    }

    /// One stage by name.
    pub fn stage(&self, name: &str) -> Option<&StageStats> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// Whether the graph has the edge `from -> to`.
    pub fn has_edge(&self, from: &str, to: &str) -> bool {
        self.edges.iter().any(|(f, t)| f == from && t == to)
    }

    /// The section `name` as its type (e.g. [`crate::HaboobStats`] for `haboob`),
    /// or `None` if it is absent or of another shape.
    pub fn section<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        serde_json::from_value(self.sections.get(name)?.clone()).ok()
    }
}

/// One stage in the stats document: the runtime's [`StageSnapshot`], with the
/// admission view always present and the handler's service quality.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct StageStats {
    /// Stage name.
    pub name: String,
    /// Lifecycle state: `created`, `running`, `draining` or `stopped`.
    pub state: String,
    /// Thread model: `per-stage` or `shared`.
    pub thread_model: String,
    /// Events waiting in the queue.
    pub queue_len: usize,
    /// Queue capacity.
    pub capacity: usize,
    /// Threads of the stage's own pool (0 under the shared pool).
    pub threads: usize,
    /// Threads inside the handler now.
    pub threads_busy: usize,
    /// Idle threads of the stage's own pool.
    pub threads_idle: usize,
    /// Enqueue attempts.
    pub enqueued: u64,
    /// Events admitted to the queue.
    pub admitted: u64,
    /// Events refused by admission control.
    pub rejected: u64,
    /// Events refused because the queue was full.
    pub full: u64,
    /// Events refused because the stage was closed.
    pub closed: u64,
    /// Events dropped by lossy enqueues.
    pub dropped: u64,
    /// Events handled.
    pub processed: u64,
    /// Of these, events handed over inline (run on the caller's thread).
    pub inlined: u64,
    /// Handler panics caught.
    pub panics: u64,
    /// Message of the last panic.
    pub last_panic: Option<String>,
    /// Current batching factor.
    pub batch_size: usize,
    /// Whether admission control is on.
    pub admission_enabled: bool,
    /// Current admission rate (events per second), for rate-based policies.
    pub admission_rate: Option<f64>,
    /// Current p90 response time, milliseconds.
    pub rt_p90_ms: Option<f64>,
    /// Response-time target, milliseconds.
    pub rt_target_ms: Option<f64>,
    /// The admission policy's state; `policy` is `"none"` without one.
    pub admission: AdmissionView,
    /// Per-class admitted and rejected counts.
    pub classes: Vec<ClassCount>,
    /// The handler's automatic service quality in 0..1 (USITS'03 3.4), for a dynamic
    /// handler's stage that degrades; else `None`.
    pub quality: Option<f64>,
    /// Time waiting in the queue.
    pub queue_delay: Latency,
    /// Handler time per event.
    pub service_time: Latency,
    /// Response time since the request was born.
    pub response_time: Latency,
}

impl From<&StageSnapshot> for StageStats {
    fn from(s: &StageSnapshot) -> Self {
        let admission = match &s.admission {
            Some(a) => AdmissionView {
                policy: a.policy.clone(),
                // A stage whose policy slot is empty (`none`) controls nothing.
                enabled: s.admission_enabled && a.policy != "none",
                rate: a.rate,
                p90_ms: a.p90_ms,
                target_ms: a.target_ms,
                limit: a.limit,
                classes: a
                    .classes
                    .iter()
                    .map(|c| ClassTarget {
                        class: c.class,
                        rate: c.rate,
                        p90_ms: c.p90_ms,
                        target_ms: c.target_ms,
                    })
                    .collect(),
            },
            None => AdmissionView::none(),
        };
        StageStats {
            name: s.name.clone(),
            state: s.state.clone(),
            thread_model: s.thread_model.clone(),
            queue_len: s.queue_len,
            capacity: s.capacity,
            threads: s.threads,
            threads_busy: s.threads_busy,
            threads_idle: s.threads_idle,
            enqueued: s.enqueued,
            admitted: s.admitted,
            rejected: s.rejected,
            full: s.full,
            closed: s.closed,
            dropped: s.dropped,
            processed: s.processed,
            inlined: s.inlined,
            panics: s.panics,
            last_panic: s.last_panic.clone(),
            batch_size: s.batch_size,
            admission_enabled: s.admission_enabled,
            admission_rate: s.admission_rate,
            rt_p90_ms: s.rt_p90_ms,
            rt_target_ms: s.rt_target_ms,
            admission,
            classes: s
                .classes
                .iter()
                .map(|c| ClassCount {
                    class: c.class,
                    admitted: c.admitted,
                    rejected: c.rejected,
                })
                .collect(),
            quality: None,
            queue_delay: Latency::from(&s.queue_delay),
            service_time: Latency::from(&s.service_time),
            response_time: Latency::from(&s.response_time),
        }
    }
}

/// The admission view of a stage (the contract of `seda experiment overload`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct AdmissionView {
    /// Policy name (`"none"` without a policy).
    pub policy: String,
    /// Whether admission control is on.
    pub enabled: bool,
    /// Token rate, events per second (rate-based policies).
    pub rate: Option<f64>,
    /// The controller's smoothed p90 estimate, milliseconds.
    pub p90_ms: Option<f64>,
    /// The controller's target, milliseconds.
    pub target_ms: Option<f64>,
    /// Limit on queue length or concurrency (limit-based policies).
    pub limit: Option<f64>,
    /// Per-class state of multiclass policies.
    pub classes: Vec<ClassTarget>,
}

impl AdmissionView {
    /// The view of a stage without a policy.
    pub fn none() -> Self {
        AdmissionView {
            policy: "none".to_owned(),
            enabled: false,
            rate: None,
            p90_ms: None,
            target_ms: None,
            limit: None,
            classes: Vec::new(),
        }
    }
}

impl Default for AdmissionView {
    fn default() -> Self {
        AdmissionView::none()
    }
}

/// Per-class state of a multiclass admission policy.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct ClassTarget {
    /// The class (0 lowest).
    pub class: u8,
    /// Token rate, events per second.
    pub rate: f64,
    /// Smoothed p90 estimate, milliseconds.
    pub p90_ms: Option<f64>,
    /// Target, milliseconds.
    pub target_ms: f64,
}

/// Admitted and rejected events of one class at one stage.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
#[non_exhaustive]
pub struct ClassCount {
    /// The class (0 lowest; the last tracked class also counts higher ones).
    pub class: u8,
    /// Events admitted.
    pub admitted: u64,
    /// Events rejected.
    pub rejected: u64,
}

/// Summary of a latency histogram, milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl From<&seda::LatencySummary> for Latency {
    fn from(l: &seda::LatencySummary) -> Self {
        Latency {
            count: l.count,
            mean_ms: l.mean_ms,
            p50_ms: l.p50_ms,
            p90_ms: l.p90_ms,
            p99_ms: l.p99_ms,
            max_ms: l.max_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_old_documents() {
        let mut doc = StatsDoc {
            stages: vec![StageStats {
                name: "handler:x".into(),
                quality: Some(0.5),
                ..StageStats::default()
            }],
            edges: vec![("a".into(), "b".into())],
            ..StatsDoc::default()
        };
        doc.sections
            .insert("haboob".into(), serde_json::json!({"requests": 3}));
        let text = serde_json::to_string(&doc).unwrap();
        let back: StatsDoc = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
        assert!(back.has_edge("a", "b"));
        let h: crate::HaboobStats = back.section("haboob").unwrap();
        assert_eq!(h.requests, 3);
        // A document with fewer fields still reads.
        let old: StatsDoc =
            serde_json::from_str(r#"{"stages":[{"name":"s","queue_len":2}]}"#).unwrap();
        assert_eq!(old.stage("s").unwrap().queue_len, 2);
        assert_eq!(old.stage("s").unwrap().admission.policy, "none");
    }
}

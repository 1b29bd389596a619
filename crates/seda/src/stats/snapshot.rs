//! One stage's [`StageSnapshot`], assembled from its queue word, its stats and its
//! admission policy.

use std::sync::atomic::Ordering::Relaxed;

use super::{
    ClassCounts, LatencySummary, SnapshotInput, StageSnapshot, StageStats, TRACKED_CLASSES,
};

impl StageStats {
    /// The snapshot; merges pending samples first, so its histograms are exact.
    pub(crate) fn snapshot(&self, i: SnapshotInput<'_>) -> StageSnapshot {
        self.drain();
        let t = self.totals();
        let classes = (0..TRACKED_CLASSES)
            .map(|c| ClassCounts {
                class: c as u8,
                admitted: t.class_admitted[c],
                rejected: t.class_rejected[c],
            })
            .filter(|c| c.admitted + c.rejected > 0)
            .collect();
        let (queue_delay, service_time, response_time) = {
            let h = self.hist.lock();
            let mut response = h.response_time.clone();
            let _ = response.add(&h.recent);
            (
                LatencySummary::of(&h.queue_delay),
                LatencySummary::of(&h.service_time),
                LatencySummary::of(&response),
            )
        };
        let admission = i.admission;
        StageSnapshot {
            name: i.name.to_owned(),
            state: i.state.to_owned(),
            thread_model: i.thread_model.to_owned(),
            domain: i.domain.map(str::to_owned),
            queue_len: i.queue_len,
            capacity: i.capacity,
            threads: i.threads.0,
            threads_busy: i.threads.1,
            threads_idle: i.threads.2,
            enqueued: t.offered(),
            admitted: t.admitted(),
            rejected: t.rejected(),
            full: t.full,
            closed: t.closed,
            dropped: t.dropped,
            processed: t.processed,
            inlined: t.inlined,
            panics: self.panics.load(Relaxed),
            last_panic: self.last_panic.lock().clone(),
            batch_size: i.batch_size,
            admission_enabled: i.admission_enabled,
            admission_rate: admission.as_ref().and_then(|a| a.rate),
            rt_p90_ms: i.p90.map(|d| d.as_secs_f64() * 1000.0),
            rt_target_ms: admission.as_ref().and_then(|a| a.target_ms),
            admission,
            classes,
            queue_delay,
            service_time,
            response_time,
        }
    }
}

//! The USITS'03 response-time policies, one feature in one module: the policies
//! ([`ResponseTimePolicy`], [`MulticlassPolicy`]) wire the controllers of
//! `controller.rs` (USITS'03 3.2) and `multiclass.rs` (3.3) to token buckets on a
//! stage's queue; their configurations ([`ResponseTimeConfig`], [`MulticlassConfig`])
//! are what a user sets.
//!
//! Samples are the response time of each finished event measured from `born` (USITS'03
//! 3.2: the time the request entered the service, so the p90 covers every queue it has
//! crossed). Each sample goes into a [`P90Window`]; a full window, or the controller
//! thread's tick after `timeout`, yields the p90 sample that drives one controller
//! update, and the new rate is installed in the bucket.

use std::collections::BTreeMap;
use std::time::Instant;

use parking_lot::Mutex;

mod controller;
mod multiclass;
#[cfg(test)]
mod tests;

#[cfg(test)]
use controller::RateChange;
pub use controller::ResponseTimeConfig;
pub(crate) use controller::{P90Window, ResponseTimeController};
pub use multiclass::MulticlassConfig;
pub(crate) use multiclass::MulticlassController;

use super::simple::TokenBucket;
use super::{AdmissionPolicy, AdmissionState, ClassState, Completion, Offer};
use crate::control::ConfigError;
use crate::envelope::Class;

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Debug)]
struct Single {
    ctl: ResponseTimeController,
    window: P90Window,
    bucket: TokenBucket,
    /// Admitted and not yet completed (for idle windows).
    in_flight: u64,
}

impl Single {
    fn apply(&mut self, samp: Option<std::time::Duration>, now: Instant) {
        if let Some(samp) = samp {
            let rate = self.ctl.update(samp).rate();
            self.bucket.set_rate(rate, now);
        }
    }
}

/// Token-bucket admission tuned by the USITS'03 response-time controller.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda::admission::{AdmissionPolicy, ResponseTimeConfig, ResponseTimePolicy};
/// use seda::{Batch, Context, Runtime};
///
/// // Hold the p90 response time near 100 ms (USITS'03 3.2, the paper's defaults).
/// let mut cfg = ResponseTimeConfig::with_target(Duration::from_millis(100));
/// cfg.initial_rate = 50.0; // tokens per second before the first measurement
/// let policy = ResponseTimePolicy::new(cfg).unwrap();
/// let state = policy.state();
/// assert_eq!((state.rate, state.target_ms), (Some(50.0), Some(100.0)));
///
/// let rt = Runtime::builder().build();
/// let sink = rt
///     .stage("bottleneck", |_b: Batch<'_, u32>, _cx: &Context<'_>| {})
///     .admission(policy)
///     .build()
///     .unwrap();
/// rt.start().unwrap();
/// // A refusal comes back as EnqueueError::Rejected: the caller answers 503.
/// match sink.try_enqueue(1) {
///     Ok(()) => {}
///     Err(e) => assert!(e.is_rejected() || e.is_full()),
/// }
/// assert!(rt.shutdown(Duration::from_secs(5)).drained);
/// ```
#[derive(Debug)]
pub struct ResponseTimePolicy {
    inner: Mutex<Single>,
}

impl ResponseTimePolicy {
    /// A policy with these controller parameters.
    pub fn new(cfg: ResponseTimeConfig) -> Result<Self, ConfigError> {
        let now = Instant::now();
        let ctl = ResponseTimeController::new(cfg)?;
        let c = ctl.config();
        let window = P90Window::new(c.nreq, c.timeout, now);
        let bucket = TokenBucket::with_burst(c.initial_rate, c.bucket_depth, c.burst, now);
        Ok(Self {
            inner: Mutex::new(Single {
                ctl,
                window,
                bucket,
                in_flight: 0,
            }),
        })
    }

    /// A policy with the paper's defaults and this target.
    pub fn with_target(target: std::time::Duration) -> Self {
        Self::new(ResponseTimeConfig::with_target(target)).expect("defaults are valid")
    }
}

impl AdmissionPolicy for ResponseTimePolicy {
    fn name(&self) -> &'static str {
        "response-time"
    }

    fn admit(&self, offer: &Offer) -> bool {
        let mut s = self.inner.lock();
        let ok = s.bucket.try_take(offer.now);
        s.in_flight += u64::from(ok);
        ok
    }

    fn on_complete(&self, done: &Completion) {
        let mut s = self.inner.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        let samp = s.window.push(done.response_time, done.now);
        s.apply(samp, done.now);
    }

    fn on_tick(&self, now: Instant) {
        let mut s = self.inner.lock();
        let idle = s.in_flight == 0;
        let samp = s.window.tick_idle(now, idle);
        s.apply(samp, now);
    }

    fn state(&self) -> AdmissionState {
        let s = self.inner.lock();
        AdmissionState {
            policy: self.name().into(),
            rate: Some(s.ctl.rate()),
            p90_ms: s.ctl.estimate().map(ms),
            target_ms: Some(ms(s.ctl.config().target)),
            ..Default::default()
        }
    }
}

#[derive(Debug)]
struct Multi {
    ctl: MulticlassController,
    windows: BTreeMap<Class, P90Window>,
    buckets: BTreeMap<Class, TokenBucket>,
    /// Admitted and not yet completed, per class (for idle windows).
    in_flight: BTreeMap<Class, u64>,
    nreq: usize,
    timeout: std::time::Duration,
    depth: f64,
    burst: std::time::Duration,
}

impl Multi {
    fn sync_rates(&mut self, now: Instant) {
        for (class, bucket) in &mut self.buckets {
            let r = self.ctl.rate(*class);
            if r != bucket.rate() {
                bucket.set_rate(r, now);
            }
        }
    }

    fn bucket(&mut self, class: Class, now: Instant) -> &mut TokenBucket {
        if !self.buckets.contains_key(&class) {
            self.ctl.add_class(class);
            self.windows
                .insert(class, P90Window::new(self.nreq, self.timeout, now));
            let b = TokenBucket::with_burst(self.ctl.rate(class), self.depth, self.burst, now);
            self.buckets.insert(class, b);
        }
        self.buckets.get_mut(&class).expect("inserted")
    }
}

/// Per-class token buckets tuned by the USITS'03 multiclass controller: when a class
/// misses its target, lower classes are cut first.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda::admission::{AdmissionPolicy, MulticlassConfig, MulticlassPolicy};
/// use seda::{Batch, Context, Runtime};
///
/// // Class 1 (say, paying users) gets 200 ms, class 0 500 ms; under overload class 0
/// // is cut first (USITS'03 3.3).
/// let cfg = MulticlassConfig::with_target(Duration::from_millis(500))
///     .class_target(1, Duration::from_millis(200));
/// let policy = MulticlassPolicy::new(cfg).unwrap();
/// assert_eq!(policy.state().policy, "multiclass");
///
/// let rt = Runtime::builder().build();
/// let sink = rt
///     .stage("search", |_b: Batch<'_, String>, _cx: &Context<'_>| {})
///     .admission(policy)
///     .build()
///     .unwrap();
/// rt.start().unwrap();
/// let gold = seda::Meta::new().with_class(1);
/// let _ = sink.try_enqueue_with("query".to_owned(), gold);
/// assert!(rt.shutdown(Duration::from_secs(5)).drained);
/// ```
#[derive(Debug)]
pub struct MulticlassPolicy {
    inner: Mutex<Multi>,
}

impl MulticlassPolicy {
    /// A policy with these parameters.
    pub fn new(cfg: MulticlassConfig) -> Result<Self, ConfigError> {
        let nreq = cfg.base.nreq;
        let timeout = cfg.base.timeout;
        let depth = cfg.base.bucket_depth;
        let burst = cfg.base.burst;
        let ctl = MulticlassController::new(cfg)?;
        let now = Instant::now();
        let mut m = Multi {
            ctl,
            windows: BTreeMap::new(),
            buckets: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            nreq,
            timeout,
            depth,
            burst,
        };
        let known: Vec<Class> = m.ctl.classes().collect();
        for c in known {
            m.bucket(c, now);
        }
        Ok(Self {
            inner: Mutex::new(m),
        })
    }
}

impl AdmissionPolicy for MulticlassPolicy {
    fn name(&self) -> &'static str {
        "multiclass"
    }

    fn admit(&self, offer: &Offer) -> bool {
        let mut m = self.inner.lock();
        let ok = m.bucket(offer.class, offer.now).try_take(offer.now);
        if ok {
            *m.in_flight.entry(offer.class).or_default() += 1;
        }
        ok
    }

    fn on_complete(&self, done: &Completion) {
        let mut m = self.inner.lock();
        m.bucket(done.class, done.now);
        if let Some(n) = m.in_flight.get_mut(&done.class) {
            *n = n.saturating_sub(1);
        }
        let samp = m
            .windows
            .get_mut(&done.class)
            .and_then(|w| w.push(done.response_time, done.now));
        if let Some(samp) = samp {
            m.ctl.update(done.class, samp);
            m.sync_rates(done.now);
        }
    }

    fn on_tick(&self, now: Instant) {
        let mut m = self.inner.lock();
        let Multi {
            windows, in_flight, ..
        } = &mut *m;
        let due: Vec<(Class, std::time::Duration)> = windows
            .iter_mut()
            .filter_map(|(c, w)| {
                let idle = in_flight.get(c).copied().unwrap_or(0) == 0;
                w.tick_idle(now, idle).map(|s| (*c, s))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        // Highest class first, so that its flags apply to this round of lower classes.
        for (class, samp) in due.into_iter().rev() {
            m.ctl.update(class, samp);
        }
        m.sync_rates(now);
    }

    fn state(&self) -> AdmissionState {
        let m = self.inner.lock();
        let classes: Vec<ClassState> = m
            .ctl
            .classes()
            .map(|c| ClassState {
                class: c,
                rate: m.ctl.rate(c),
                p90_ms: m.ctl.estimate(c).map(ms),
                target_ms: ms(m.ctl.target(c)),
            })
            .collect();
        let p90_ms = classes
            .iter()
            .filter_map(|c| c.p90_ms)
            .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
        let target_ms = classes.iter().map(|c| c.target_ms).reduce(f64::min);
        AdmissionState {
            policy: self.name().into(),
            rate: Some(classes.iter().map(|c| c.rate).sum()),
            p90_ms,
            target_ms,
            limit: None,
            classes,
        }
    }
}

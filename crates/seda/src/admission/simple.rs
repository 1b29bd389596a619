//! The simple policies: unbounded, queue threshold, RED, token bucket.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{AdmissionPolicy, AdmissionState, Offer};

/// Admits everything; only the queue's capacity bounds the stage.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, Unbounded};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// assert!(Unbounded.admit(&offer(999, 999))); // only the queue's capacity bounds it
/// assert_eq!(Unbounded.state().policy, "unbounded");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Unbounded;

impl AdmissionPolicy for Unbounded {
    fn name(&self) -> &'static str {
        "unbounded"
    }

    fn admit(&self, _offer: &Offer) -> bool {
        true
    }
}

/// Admits while the queue holds fewer than `threshold` events (SEDA's fixed queue
/// threshold; a tail drop below the queue's hard capacity).
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, QueueThreshold};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// let p = QueueThreshold::new(100);
/// assert!(p.admit(&offer(99, 103)));
/// assert!(!p.admit(&offer(100, 104))); // the 101st waiting event is refused
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QueueThreshold {
    threshold: usize,
}

impl QueueThreshold {
    /// Admit while `queue_len < threshold`.
    pub fn new(threshold: usize) -> Self {
        Self { threshold }
    }
}

impl AdmissionPolicy for QueueThreshold {
    fn name(&self) -> &'static str {
        "queue-threshold"
    }

    fn admit(&self, offer: &Offer) -> bool {
        offer.queue_len < self.threshold
    }

    fn state(&self) -> AdmissionState {
        AdmissionState {
            policy: self.name().into(),
            limit: Some(self.threshold as f64),
            ..Default::default()
        }
    }
}

/// Random early detection on the queue length.
///
/// `avg = (1 - w) * avg + w * queue_len` at each offer; admit surely below `min_th`,
/// reject surely at or above `max_th`, and in between reject with probability
/// `max_p * (avg - min_th) / (max_th - min_th)`.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, Red};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// // Weight 1: the average is the queue length now (a short queue reacts at once).
/// let p = Red::new(10, 50, 0.1, 1.0);
/// assert!(p.admit(&offer(5, 5))); // below min_th: always
/// assert!(!p.admit(&offer(50, 50))); // at max_th: never
/// ```
#[derive(Debug)]
pub struct Red {
    min_th: f64,
    max_th: f64,
    max_p: f64,
    weight: f64,
    avg: Mutex<f64>,
}

impl Red {
    /// RED with thresholds in events, maximum drop probability `max_p` and averaging
    /// weight `weight` (classic: 0.002; use larger for short queues).
    pub fn new(min_th: usize, max_th: usize, max_p: f64, weight: f64) -> Self {
        let max_th = max_th.max(min_th + 1);
        Self {
            min_th: min_th as f64,
            max_th: max_th as f64,
            max_p: max_p.clamp(0.0, 1.0),
            weight: weight.clamp(1e-6, 1.0),
            avg: Mutex::new(0.0),
        }
    }

    /// Drop probability at an averaged queue length.
    pub fn drop_probability(&self, avg: f64) -> f64 {
        if avg < self.min_th {
            0.0
        } else if avg >= self.max_th {
            1.0
        } else {
            self.max_p * (avg - self.min_th) / (self.max_th - self.min_th)
        }
    }

    /// Current averaged queue length.
    pub fn average(&self) -> f64 {
        *self.avg.lock()
    }
}

impl AdmissionPolicy for Red {
    fn name(&self) -> &'static str {
        "red"
    }

    fn admit(&self, offer: &Offer) -> bool {
        let avg = {
            let mut a = self.avg.lock();
            *a = (1.0 - self.weight) * *a + self.weight * offer.queue_len as f64;
            *a
        };
        let p = self.drop_probability(avg);
        p <= 0.0 || (p < 1.0 && fastrand::f64() >= p)
    }

    fn state(&self) -> AdmissionState {
        AdmissionState {
            policy: self.name().into(),
            limit: Some(self.average()),
            ..Default::default()
        }
    }
}

/// A token bucket: `rate` tokens per second, at most `depth` stored. Pure; time is
/// passed in.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    depth: f64,
    min_depth: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, depth: f64, now: Instant) -> Self {
        Self::with_burst(rate, depth, Duration::ZERO, now)
    }

    /// A full bucket whose depth follows the rate: `max(min_depth, rate * burst)`.
    pub fn with_burst(rate: f64, min_depth: f64, burst: Duration, now: Instant) -> Self {
        let rate = rate.max(0.0);
        let min_depth = min_depth.max(1.0);
        let burst = burst.as_secs_f64();
        let depth = min_depth.max(rate * burst);
        Self {
            rate,
            depth,
            min_depth,
            burst,
            tokens: depth,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.depth);
        if now > self.last {
            self.last = now;
        }
    }

    /// Takes a token if one is there.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        // The epsilon absorbs rounding in the accrual (0.1 + 0.1 + ... < 1.0).
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens = (self.tokens - 1.0).max(0.0);
            true
        } else {
            false
        }
    }

    /// Changes the rate from `now` on (tokens accrued so far are kept).
    pub fn set_rate(&mut self, rate: f64, now: Instant) {
        self.refill(now);
        self.rate = rate.max(0.0);
        self.depth = self.min_depth.max(self.rate * self.burst);
        self.tokens = self.tokens.min(self.depth);
    }

    /// Current depth, tokens.
    pub fn depth(&self) -> f64 {
        self.depth
    }

    /// Current rate, tokens per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Time until the next token at the current rate, if the rate is positive.
    pub fn next_token_in(&self) -> Option<Duration> {
        (self.rate > 0.0)
            .then(|| Duration::from_secs_f64(((1.0 - self.tokens).max(0.0)) / self.rate))
    }
}

/// Admission by a fixed-rate token bucket.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, TokenBucketPolicy};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// // One admission a minute, bursts of 2: a full bucket lets two through, then refuses.
/// let p = TokenBucketPolicy::new(1.0 / 60.0, 2.0);
/// assert!(p.admit(&offer(0, 0)));
/// assert!(p.admit(&offer(1, 1)));
/// assert!(!p.admit(&offer(2, 2)));
/// ```
#[derive(Debug)]
pub struct TokenBucketPolicy {
    bucket: Mutex<TokenBucket>,
}

impl TokenBucketPolicy {
    /// `rate` admissions per second with bursts of up to `depth`.
    pub fn new(rate: f64, depth: f64) -> Self {
        Self {
            bucket: Mutex::new(TokenBucket::new(rate, depth, Instant::now())),
        }
    }
}

impl AdmissionPolicy for TokenBucketPolicy {
    fn name(&self) -> &'static str {
        "token-bucket"
    }

    fn admit(&self, offer: &Offer) -> bool {
        self.bucket.lock().try_take(offer.now)
    }

    fn state(&self) -> AdmissionState {
        AdmissionState {
            policy: self.name().into(),
            rate: Some(self.bucket.lock().rate()),
            ..Default::default()
        }
    }
}

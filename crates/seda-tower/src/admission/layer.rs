//! The layer and its builder.

use std::sync::Arc;
use std::time::{Duration, Instant};

use seda::admission::AdmissionPolicy;
use tower_layer::Layer;

use super::classify::SingleClass;
use super::gate::{Gate, Settings};
use super::handle::AdmissionHandle;
use super::reject::RejectWithError;
use super::service::Admission;

/// Default tick interval: the `seda` runtime's control interval.
const TICK_INTERVAL: Duration = Duration::from_millis(50);

/// Applies a `seda` admission policy to a service: p90-targeted load shedding with
/// per-class targets (USITS'03 3.2-3.3) for tower, axum and hyper.
///
/// Built with [`AdmissionLayer::new`] or [`AdmissionLayer::builder`]. `K` classifies
/// requests ([`Classify`](super::Classify)), `R` answers refused ones
/// ([`Reject`](super::Reject)).
///
/// # What it measures
/// For each admitted request, the time from when the layer saw it (`call`), or from
/// the instant the classifier reports as its `born`, to when the inner service's
/// response future resolves, with a response or an error. For HTTP that is the time to
/// the response head; a streamed body is not included. The policy receives it as
/// `Completion::response_time`, with `queue_delay` = the time before the layer saw the
/// request (`seen - born`, zero without `born`), `service_time` = the time in the inner
/// service, and the requests still in flight. `ResponseTimePolicy` and
/// `MulticlassPolicy` take their p90 over windows of these samples.
///
/// # When it refuses
/// In `call`, before the inner service sees the request:
/// 1. if [`max_in_flight`](AdmissionBuilder::max_in_flight) admitted requests are in
///    flight ([`Refusal::InFlightLimit`](super::Refusal::InFlightLimit));
/// 2. else if the policy's `admit` says no ([`Refusal::Policy`](super::Refusal::Policy))
///    to an `Offer` with the request's class, `in_flight` = admitted requests not yet
///    completed (this one excluded), `capacity` = `max_in_flight`, and `queue_len` = 0:
///    the layer keeps no queue (waiting happens in the runtime and the inner service,
///    out of its sight), so policies that judge the queue length (`QueueThreshold`,
///    `Red`, `CoDel`'s delay estimate) never refuse here. Use the response-time
///    policies, `TokenBucketPolicy`, `GradientLimit` or `AimdLimit`.
///
/// A refused request is never passed to the inner service; `R` makes its answer
/// ([`ServiceUnavailable`](super::ServiceUnavailable): a `503` with `Retry-After`;
/// [`RejectWithError`]: `Err(Overloaded)`).
///
/// # On drop
/// An admitted request holds a permit inside its response future, as
/// `tower::limit::ConcurrencyLimit` does. The permit is released when the inner future
/// resolves or when the response future is dropped, whichever is first: a request the
/// client abandoned (a closed connection, a timeout, a lost `select!`) frees its slot at
/// once and never leaks it. The policy then gets the completion with the time elapsed
/// until the drop: a client that gave up on a slow service still tells the controller
/// the service was slow, and the policy's own in-flight accounting stays exact.
///
/// # `poll_ready`
/// Forwards the inner service's readiness unchanged and reserves nothing: admission
/// depends on the request's class, so it is decided in `call`. The layer adds no
/// backpressure of its own; it sheds instead. A refused request does not call the inner
/// service, so whatever the inner `poll_ready` reserved stays reserved for the next
/// call (as with `tower::load_shed`). To shed when the inner service is not ready,
/// wrap it in `tower::load_shed` below this layer.
///
/// # Ticks
/// Policies also need a clock: `ResponseTimePolicy` evaluates a window after `timeout`
/// when few samples came, and counts an idle window as a zero sample so that a rate
/// cut to the floor climbs back. The `seda` runtime ticks them from its controller
/// thread; the layer needs no runtime and ticks *lazily*: a request that finds
/// [`tick_interval`](AdmissionBuilder::tick_interval) (default 50 ms) passed since the
/// last tick ticks the policy before its admission (refused requests too), all others
/// pay one atomic load. Under traffic
/// the policy is ticked as in the runtime. After an idle spell the first request ticks
/// once, so the policy sees one idle window, not one per second of idleness. To keep
/// the clock going while idle, call [`AdmissionHandle::tick`] from a timer of your
/// runtime, or start [`AdmissionHandle::spawn_ticker`]. Ticks from all sources are
/// spaced by at least the interval.
///
/// # Sharing
/// Every service made by one layer (and their clones) shares one policy, one in-flight
/// count and one set of counters: axum's `Router::layer` applies the layer to every
/// route, which then form one stage. For a controller per request type (SEDA's stage
/// per request type, as in the Arashi mail service), give each route its own layer.
#[derive(Clone, Debug)]
pub struct AdmissionLayer<K = SingleClass, R = RejectWithError> {
    gate: Arc<Gate>,
    classify: K,
    reject: R,
}

impl AdmissionLayer {
    /// A layer with this policy and the defaults: every request class 0, refusals as
    /// `Err(Overloaded)`, no cap on requests in flight, `Retry-After` 1 s, ticks every
    /// 50 ms, `Instant::now` as the clock.
    pub fn new(policy: impl AdmissionPolicy) -> Self {
        Self::builder(policy).build()
    }

    /// A builder starting from the defaults of [`new`](Self::new).
    pub fn builder(policy: impl AdmissionPolicy) -> AdmissionBuilder {
        AdmissionBuilder::shared(Arc::new(policy))
    }
}

impl<K, R> AdmissionLayer<K, R> {
    /// Handle on the state the layer's services share (stats, ticks).
    pub fn handle(&self) -> AdmissionHandle {
        AdmissionHandle {
            gate: Arc::clone(&self.gate),
        }
    }
}

impl<S, K: Clone, R: Clone> Layer<S> for AdmissionLayer<K, R> {
    type Service = Admission<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Admission::new(
            inner,
            Arc::clone(&self.gate),
            self.classify.clone(),
            self.reject.clone(),
        )
    }
}

/// Configures an [`AdmissionLayer`].
#[derive(Debug)]
pub struct AdmissionBuilder<K = SingleClass, R = RejectWithError> {
    settings: Settings,
    classify: K,
    reject: R,
}

impl AdmissionBuilder {
    /// A builder for a policy that may be shared with others, e.g. a `seda` stage or a
    /// second layer, to put two services under one controller.
    pub fn shared(policy: Arc<dyn AdmissionPolicy>) -> Self {
        Self {
            settings: Settings {
                policy,
                max_in_flight: usize::MAX,
                retry_after: Duration::from_secs(1),
                tick_interval: TICK_INTERVAL,
                clock: Instant::now,
            },
            classify: SingleClass,
            reject: RejectWithError,
        }
    }
}

impl<K, R> AdmissionBuilder<K, R> {
    /// How requests get their class (default: all class 0).
    pub fn classify<K2>(self, classify: K2) -> AdmissionBuilder<K2, R> {
        AdmissionBuilder {
            settings: self.settings,
            classify,
            reject: self.reject,
        }
    }

    /// What a refused request becomes (default: [`RejectWithError`]).
    pub fn reject_with<R2>(self, reject: R2) -> AdmissionBuilder<K, R2> {
        AdmissionBuilder {
            settings: self.settings,
            classify: self.classify,
            reject,
        }
    }

    /// Hard cap on admitted requests in flight, checked before the policy (default: no
    /// cap). A safety net under an adaptive policy, or a plain concurrency limit that
    /// sheds instead of waiting.
    ///
    /// # Panics
    /// If `max` is 0 (every request would be refused).
    #[must_use]
    pub fn max_in_flight(mut self, max: usize) -> Self {
        assert!(max > 0, "max_in_flight must be at least 1");
        self.settings.max_in_flight = max;
        self
    }

    /// The `Retry-After` hint carried by every refusal (default 1 s; sent in whole
    /// seconds, rounded up).
    #[must_use]
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.settings.retry_after = after;
        self
    }

    /// Least time between two ticks of the policy (default 50 ms). See "Ticks" in
    /// [`AdmissionLayer`].
    ///
    /// # Panics
    /// If `every` is zero.
    #[must_use]
    pub fn tick_interval(mut self, every: Duration) -> Self {
        assert!(!every.is_zero(), "tick_interval must be positive");
        self.settings.tick_interval = every;
        self
    }

    /// The clock for admissions, completions and ticks (default `Instant::now`). Tests
    /// on tokio's paused clock pass `|| tokio::time::Instant::now().into_std()`.
    #[must_use]
    pub fn clock(mut self, clock: fn() -> Instant) -> Self {
        self.settings.clock = clock;
        self
    }

    /// The layer.
    pub fn build(self) -> AdmissionLayer<K, R> {
        AdmissionLayer {
            gate: Arc::new(Gate::new(self.settings)),
            classify: self.classify,
            reject: self.reject,
        }
    }
}

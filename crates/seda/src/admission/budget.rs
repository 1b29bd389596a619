//! Delay-budget admission, the default for a response-time target: a queue-delay
//! signal at the door (what CoDel acts on, predicted instead of measured) whose
//! threshold the USITS'03 p90 loop sets.
//!
//! The paper's controller (USITS'03 3.2, [`super::ResponseTimePolicy`]) learns of
//! overload only from completions: a request's response time is known after it has
//! waited, so a flash crowd builds a queue for one or more windows before the token
//! rate falls, and that queue must drain before the p90 is back under target (our
//! runs: 8 to 21 s). A queue-delay signal reacts before any completion (CoDel and the
//! gradient limit held the p90 from the first second of the same spike) but holds a
//! fixed delay, far under a target of a second. This policy predicts, at admission,
//! the response time a request would see at the stage and refuses it when that is
//! over a budget; the p90 loop moves the budget so that the p90 *measured from
//! `born`* (socket and parse time included) sits at `setpoint x target`.
//!
//! # Control law
//! The estimator (per completion; no knowledge of threads or batches needed):
//! - `delta` = the stage's inter-departure time while it is busy: busy time over
//!   departures, in blocks of at least 16 departures (whole batches). Time since the
//!   previous departure counts as busy if the stage still held events then, and the
//!   first departure of a busy period counts from the arrival that began it; an idle
//!   gap counts nothing. Each block moves `delta` halfway to its own mean. `1 /
//!   delta` is the stage's departure rate under load, whatever its threads and batch
//!   sizes. (Issue 26: counting only the gaps
//!   after a departure that left events, a few users on two servers read as
//!   1,000/s instead of 180/s, since their departures came close together and the
//!   gaps before them were idle; a crowd was then admitted 300 ms deep);
//! - `s` = EWMA (weight 1/8) of the per-event service time.
//!
//! The actuator (per offer):
//! - predicted response time at the stage `r = max(s, (in_flight + 1) * delta)`:
//!   every event ahead of it leaves at the measured rate (Little's law), then it;
//! - admit iff `r <= B_c`, or `r <= s` (it would start at once: the gate never starves
//!   a stage with idle threads, CoDel's "never drop from an empty queue"), or the
//!   stage is idle;
//! - before the first completion (no `s`), admit while the stage holds fewer than 4
//!   events: a flash crowd on a fresh server must not queue unmeasured work (the
//!   class experiment's 128 users did, 3.7 s of it); before 16 busy departures (no
//!   `delta`), `delta = s / h` with `h = max(1, in_flight - queue_len)`;
//! - classes (USITS'03 3.3): with `K` and `L` the highest and lowest classes offered
//!   within `class_memory`, a class `c < K` gets `B_c = B * lower_share ^ (K - c)`,
//!   each class a `lower_share` of the one above, so lower classes are cut first and
//!   only while a higher class is present; the top class gets `B_K = B + (B - B_L)`:
//!   the whole budget plus the room the cut of the lowest class frees. Without that
//!   loan a class arriving in a crowd finds the stage full of lower-class work
//!   admitted under the whole budget, and is refused until it drains (the high class
//!   of the class experiment lost 12-26 % of its requests that way, each refused user
//!   waiting 5 s); the loop still sees the p90 of all classes and corrects `B`.
//!
//! The loop (per p90 sample; USITS'03 3.2's window: every `nreq` completions or
//! `timeout`, response times measured from `born`):
//! - `B <- clamp(B + gain * (setpoint * target - p90), min_budget * target,
//!   max_budget * target)`, changing by at most `max_step * target` a sample: an
//!   integral law in time units, since the p90 is the budget plus what the budget
//!   does not see (time before admission, the spread of service times), which the
//!   loop learns;
//! - `B` grows only if the budget refused something in this window *and* the one
//!   before (anti-windup: under light load the p90 is far below the target whatever
//!   `B` is, and the window in which a spike starts holds the calm before it; a
//!   budget grown then lets the spike's first seconds queue too much work, which the
//!   first run of the experiment showed), or if the window before refused at least
//!   half of what it was offered: a crowd was sent away, and what this window
//!   completes is what the budget let in of it. (Issue 26: closed-loop users who
//!   stay away 5 s after a refusal come back all at once, refused in one window and
//!   absent in the next, so the budget never grew from its start; the spike's
//!   crowd was held at half the setpoint for the whole spike, a backlog too
//!   shallow to keep the backend's workers busy through the jitter of their service
//!   times. Growth after *any* refusing window instead also grew it from the few
//!   refusals of Poisson bursts at 0.8x the capacity, and the p90 after the
//!   capacity drop rose by 10-20 ms in the model of `budget/tests.rs`);
//! - an idle window (no completions, nothing in flight) leaves `B` as it is.
//!
//! `B` starts at `initial_budget * target`, half the target: the first second of a
//! spike, before any p90 sample of it, is held by the prediction alone, and the
//! loop then raises `B` until the p90 sits at the setpoint. A request admitted with
//! budget `B` completes about `B` later, two to three windows: an integral loop with
//! that dead time is stable for `gain x plant gain < 2 sin(pi / 14) = 0.45`, so
//! `gain` 0.3 tolerates a prediction off by 1.5x (with 0.5 the budget overshot from
//! 0.8 s to the floor in one second of the class experiment, and the stage idled).
//! The floor, `0.1 x target`, keeps a few events queued for a bursty crowd.
//!
//! # Parameters ([`DelayBudgetConfig`])
//! | name | unit | default | range |
//! |---|---|---|---|
//! | `target` | time | - | > 0 |
//! | `setpoint` | x target | 0.8 | (0, 1] |
//! | `nreq` | samples | 100 | >= 1 |
//! | `timeout` | time | 500 ms | > 0 |
//! | `gain` | 1 | 0.3 | (0, 1] |
//! | `initial_budget` | x target | 0.5 | [`min_budget`, `max_budget`] |
//! | `min_budget`, `max_budget` | x target | 0.1, 1 | 0 < min <= max |
//! | `max_step` | x target per sample | 0.25 | > 0 |
//! | `lower_share` | fraction | 0.5 | (0, 1] |
//! | `class_memory` | time | 2 s | > 0 |
//!
//! # Invariants
//! `min_budget * target <= B <= max_budget * target`; `delta >= 0`.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::response_time::P90Window;
use super::{AdmissionPolicy, AdmissionState, ClassState, Completion, Offer};
use crate::control::{ConfigError, check};
use crate::envelope::Class;

/// Parameters of [`DelayBudget`]. See the module docs for units and ranges.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct DelayBudgetConfig {
    /// The 90th-percentile response-time target.
    pub target: Duration,
    /// Where the loop puts the p90, as a fraction of `target`.
    pub setpoint: f64,
    /// Completions per p90 sample.
    pub nreq: usize,
    /// A window shorter than `nreq` is evaluated after this long.
    pub timeout: Duration,
    /// Budget change per second of p90 error.
    pub gain: f64,
    /// Budget at start, as a multiple of `target`.
    pub initial_budget: f64,
    /// Smallest budget, multiple of `target`.
    pub min_budget: f64,
    /// Largest budget, multiple of `target`.
    pub max_budget: f64,
    /// Largest change of the budget per p90 sample, multiple of `target`.
    pub max_step: f64,
    /// Budget of a class as a fraction of the budget of the class above it.
    pub lower_share: f64,
    /// How long a class counts as present after its last offer.
    pub class_memory: Duration,
}

// Setters, one per field, for code outside the crate (the struct is
// `#[non_exhaustive]`: a new parameter is not a breaking change).
crate::setters!(DelayBudgetConfig {
    with_setpoint: setpoint: f64,
    with_nreq: nreq: usize,
    with_timeout: timeout: Duration,
    with_gain: gain: f64,
    with_initial_budget: initial_budget: f64,
    with_min_budget: min_budget: f64,
    with_max_budget: max_budget: f64,
    with_max_step: max_step: f64,
    with_lower_share: lower_share: f64,
    with_class_memory: class_memory: Duration,
});

impl DelayBudgetConfig {
    /// The defaults of the module docs with this target.
    pub fn with_target(target: Duration) -> Self {
        Self {
            target,
            setpoint: 0.8,
            nreq: 100,
            timeout: Duration::from_millis(500),
            gain: 0.3,
            initial_budget: 0.5,
            min_budget: 0.1,
            max_budget: 1.0,
            max_step: 0.25,
            lower_share: 0.5,
            class_memory: Duration::from_secs(2),
        }
    }

    /// Checks the ranges of the module docs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pre = "delay-budget";
        let frac = |v: f64| v > 0.0 && v <= 1.0;
        check(!self.target.is_zero(), || {
            format!("{pre}: target must be positive")
        })?;
        check(frac(self.setpoint), || {
            format!("{pre}: setpoint must be in (0, 1]")
        })?;
        check(self.nreq >= 1, || format!("{pre}: nreq must be at least 1"))?;
        check(!self.timeout.is_zero(), || {
            format!("{pre}: timeout must be positive")
        })?;
        check(frac(self.gain), || format!("{pre}: gain must be in (0, 1]"))?;
        check(
            self.min_budget > 0.0 && self.min_budget <= self.max_budget,
            || format!("{pre}: need 0 < min_budget <= max_budget"),
        )?;
        check(
            (self.min_budget..=self.max_budget).contains(&self.initial_budget),
            || format!("{pre}: initial_budget outside [min_budget, max_budget]"),
        )?;
        check(self.max_step > 0.0 && self.max_step.is_finite(), || {
            format!("{pre}: max_step must be positive")
        })?;
        check(frac(self.lower_share), || {
            format!("{pre}: lower_share must be in (0, 1]")
        })?;
        check(!self.class_memory.is_zero(), || {
            format!("{pre}: class_memory must be positive")
        })
    }
}

/// The budget loop alone, a pure step function (see the module docs).
#[derive(Clone, Debug)]
pub struct BudgetLoop {
    cfg: DelayBudgetConfig,
    budget: f64,
    /// The share of offers the budget refused in the previous window.
    was_refused: f64,
}

impl BudgetLoop {
    /// A share of refused offers at or over which a window counts as a crowd sent
    /// away (see the module docs).
    pub const CROWD: f64 = 0.5;

    /// A loop at its initial budget.
    pub fn new(cfg: DelayBudgetConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let budget = cfg.initial_budget * cfg.target.as_secs_f64();
        Ok(Self {
            cfg,
            budget,
            was_refused: 0.0,
        })
    }

    /// The budget of the top class, seconds.
    pub fn budget(&self) -> f64 {
        self.budget
    }

    /// One p90 sample, `refused` the share of the window's offers the budget
    /// refused: moves the budget towards the one that puts the p90 at the setpoint;
    /// it grows only if it refused something in this window and the one before, or
    /// if the window before refused at least [`Self::CROWD`] of its offers.
    pub fn step(&mut self, p90: Duration, refused: f64) -> f64 {
        let t = self.cfg.target.as_secs_f64();
        let error = self.cfg.setpoint * t - p90.as_secs_f64();
        let step = self.cfg.max_step * t;
        let binding = refused > 0.0;
        let grows = (binding && self.was_refused > 0.0) || self.was_refused >= Self::CROWD;
        let up = if grows { step } else { 0.0 };
        let change = (self.cfg.gain * error).clamp(-step, up);
        self.budget =
            (self.budget + change).clamp(self.cfg.min_budget * t, self.cfg.max_budget * t);
        self.was_refused = refused;
        self.budget
    }
}

/// The stage's departure rate under load, from its completions (see the module docs).
#[derive(Clone, Debug, Default)]
struct Departures {
    /// Smoothed inter-departure time while busy, seconds.
    delta: Option<f64>,
    /// Busy time and departures since the last update of `delta`.
    busy: f64,
    count: u32,
    /// Instant of the latest departure seen.
    last: Option<Instant>,
    /// Events left in the stage after the departures seen at `last`.
    left: usize,
    /// Whether the departures at `last` are samples (the stage was busy before).
    sampling: bool,
    /// When an event arrived at the idle stage after `last`: a busy period began.
    busy_since: Option<Instant>,
}

impl Departures {
    /// Departures per update of `delta`, and the weight of an update.
    const BLOCK: u32 = 16;
    const WEIGHT: f64 = 0.5;

    /// One event left at `now`; `in_flight` counts the stage's events before its
    /// batch left (the batch included).
    fn push(&mut self, now: Instant, in_flight: usize) {
        match self.last {
            Some(t) if now > t => {
                // Whole batches only: a block ends where a new departure instant starts.
                if self.count >= Self::BLOCK {
                    let d = self.busy / f64::from(self.count);
                    self.delta = Some(self.delta.map_or(d, |e| e + (d - e) * Self::WEIGHT));
                    self.busy = 0.0;
                    self.count = 0;
                }
                // Busy since the last departure, or since the busy period began:
                // the first departure of a busy period counts from its first
                // arrival, or light load (a few events leaving close together,
                // the gaps to the next arrival idle) reads as a fast stage.
                let from = if self.left > 0 {
                    Some(t)
                } else {
                    self.busy_since.filter(|b| *b >= t)
                };
                self.sampling = from.is_some();
                if let Some(from) = from {
                    self.busy += now.saturating_duration_since(from).as_secs_f64();
                    self.count += 1;
                }
                self.busy_since = None;
                self.last = Some(now);
                self.left = in_flight.saturating_sub(1);
            }
            // The same batch, or another worker's departure reported out of order.
            Some(_) => {
                self.count += u32::from(self.sampling);
                self.left = self.left.saturating_sub(1);
            }
            None => {
                self.last = Some(now);
                self.left = in_flight.saturating_sub(1);
            }
        }
    }

    /// An event arrived at `now` at a stage that held none: a busy period begins.
    fn arrive_idle(&mut self, now: Instant) {
        if self
            .busy_since
            .is_none_or(|b| self.last.is_some_and(|t| b < t))
        {
            self.busy_since = Some(now);
        }
    }
}

#[derive(Debug)]
struct State {
    budget: BudgetLoop,
    window: P90Window,
    last_p90: Option<Duration>,
    departures: Departures,
    service_ewma: Option<f64>,
    /// When each class (the last slot: that class and above) was last offered.
    seen: [Option<Instant>; CLASS_SLOTS],
    /// Offers since the last p90 sample, and how many of them the budget refused.
    offered: u32,
    refused: u32,
}

impl State {
    fn sample(&mut self, p90: Duration) {
        self.last_p90 = Some(p90);
        let share = f64::from(self.refused) / f64::from(self.offered.max(1));
        self.budget.step(p90, share);
        (self.offered, self.refused) = (0, 0);
    }
}

/// Events a stage may hold before its first completion tells the service time.
const LEARN: usize = 4;

/// Classes told apart; higher ones share the last slot.
const CLASS_SLOTS: usize = 8;

fn slot(class: Class) -> usize {
    usize::from(class).min(CLASS_SLOTS - 1)
}

/// Delay-budget admission. See the module docs for the law.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// use seda::admission::{AdmissionPolicy, Offer, DelayBudget, DelayBudgetConfig};
///
/// // What a stage's queue shows the policy at one enqueue.
/// let offer = |queue_len: usize, in_flight: usize| Offer {
///     class: 0,
///     queue_len,
///     in_flight,
///     capacity: 1000,
///     now: Instant::now(),
/// };
/// let cfg = DelayBudgetConfig::with_target(std::time::Duration::from_millis(200));
/// let p = DelayBudget::new(cfg).unwrap();
/// assert!(p.admit(&offer(0, 0))); // an empty stage always admits
/// assert_eq!(p.state().policy, "delay-budget");
/// ```
#[derive(Debug)]
pub struct DelayBudget {
    cfg: DelayBudgetConfig,
    state: Mutex<State>,
}

impl DelayBudget {
    /// A policy with these parameters.
    pub fn new(cfg: DelayBudgetConfig) -> Result<Self, ConfigError> {
        let now = Instant::now();
        let state = State {
            budget: BudgetLoop::new(cfg.clone())?,
            window: P90Window::new(cfg.nreq, cfg.timeout, now),
            last_p90: None,
            departures: Departures::default(),
            service_ewma: None,
            seen: [None; CLASS_SLOTS],
            offered: 0,
            refused: 0,
        };
        Ok(Self {
            cfg,
            state: Mutex::new(state),
        })
    }

    /// The stage's departure rate under load the prediction uses, events per second
    /// (`None` until measured).
    pub fn departure_rate(&self) -> Option<f64> {
        let s = self.state.lock();
        s.departures.delta.filter(|d| *d > 0.0).map(|d| 1.0 / d)
    }

    /// The highest and lowest class offered within `class_memory`, with `class`.
    fn present(&self, s: &State, class: Class, now: Instant) -> (usize, usize) {
        let c = slot(class);
        let recent = |k: &usize| {
            s.seen[*k].is_some_and(|at| now.saturating_duration_since(at) < self.cfg.class_memory)
        };
        let top = (c..CLASS_SLOTS).rev().find(recent).unwrap_or(c);
        let bottom = (0..c).find(recent).unwrap_or(c);
        (top, bottom)
    }

    /// The budget class `class` gets now, seconds.
    fn budget_of(&self, s: &State, class: Class, now: Instant) -> f64 {
        let (top, bottom) = self.present(s, class, now);
        let b = s.budget.budget();
        let share = |levels: usize| self.cfg.lower_share.powi(levels as i32);
        if slot(class) < top {
            b * share(top - slot(class))
        } else {
            b * (2.0 - share(top - bottom))
        }
    }
}

impl AdmissionPolicy for DelayBudget {
    fn name(&self) -> &'static str {
        "delay-budget"
    }

    fn admit(&self, offer: &Offer) -> bool {
        let mut s = self.state.lock();
        s.seen[slot(offer.class)] = Some(offer.now);
        if offer.in_flight == 0 {
            s.departures.arrive_idle(offer.now);
        }
        let ok = match s.service_ewma {
            _ if offer.in_flight == 0 => true,
            None => offer.in_flight < LEARN,
            Some(svc) => {
                let delta = s.departures.delta.unwrap_or_else(|| {
                    let handling = offer.in_flight.saturating_sub(offer.queue_len).max(1);
                    svc / handling as f64
                });
                let predicted = ((offer.in_flight + 1) as f64 * delta).max(svc);
                predicted <= svc || predicted <= self.budget_of(&s, offer.class, offer.now)
            }
        };
        s.offered = s.offered.saturating_add(1);
        s.refused = s.refused.saturating_add(u32::from(!ok));
        ok
    }

    fn on_complete(&self, done: &Completion) {
        let mut s = self.state.lock();
        let svc = done.service_time.as_secs_f64();
        s.service_ewma = Some(s.service_ewma.map_or(svc, |e| e + (svc - e) / 8.0));
        s.departures.push(done.now, done.in_flight);
        if let Some(p90) = s.window.push(done.response_time, done.now) {
            s.sample(p90);
        }
    }

    fn on_tick(&self, now: Instant) {
        let mut s = self.state.lock();
        if let Some(p90) = s.window.tick(now) {
            s.sample(p90);
        }
    }

    fn state(&self) -> AdmissionState {
        let s = self.state.lock();
        let ms = |secs: f64| secs * 1000.0;
        let now = Instant::now();
        let top = s.seen.iter().rposition(Option::is_some).unwrap_or(0);
        let classes = if top > 0 {
            (0..=top as Class)
                .map(|c| ClassState {
                    class: c,
                    rate: 0.0,
                    p90_ms: None,
                    target_ms: ms(self.budget_of(&s, c, now)),
                })
                .collect()
        } else {
            Vec::new()
        };
        AdmissionState {
            policy: self.name().into(),
            rate: None,
            p90_ms: s.last_p90.map(|d| ms(d.as_secs_f64())),
            target_ms: Some(ms(self.cfg.target.as_secs_f64())),
            limit: Some(ms(s.budget.budget())),
            classes,
        }
    }
}

#[cfg(test)]
mod tests;

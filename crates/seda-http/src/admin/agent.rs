//! HAProxy's `agent-check`, answered from the runtime's admission state, so that a
//! load balancer sends each replica what its overload controllers admit.
//!
//! HAProxy connects to the agent port every `agent-inter`, reads one line and closes
//! (HAProxy configuration manual, "agent-check"). The line is one of:
//! - `ready N%`: serving; weight N % of the configured weight. `ready` also ends a
//!   `drain` this agent said before (only the agent can undo what it set).
//! - `drain`: take no new requests (persistent connections may finish).
//!
//! # The law
//! Over a window of at least [`AgentConfig::window`], for each *controlled* stage (an
//! admission policy, or a response-time target):
//!
//! ```text
//! admit    = admitted / (admitted + rejected + full)     of this window's arrivals (1 if none)
//! headroom = min(1, target / p90)                         stage and per-class targets (1 if none)
//! capacity = min over controlled stages of min(admit, headroom)
//! w       <- (1 - alpha) * w + alpha * capacity           (w starts at 1)
//! weight   = clamp(round(100 * w), min_weight, 100) %
//! ```
//!
//! `p90` is the controller's smoothed estimate where the policy has one (USITS'03
//! 3.2), otherwise the stage's last-window p90. A replica refusing nearly everything
//! thus falls to a weight of a few percent: next to replicas that admit, it gets a
//! few percent of the traffic.
//!
//! The answer is `drain` when the service is shutting down
//! ([`AgentServer::set_draining`], or any stage draining or stopped). With
//! [`AgentConfig::drain_refused`] set, also when a controlled stage refused more than
//! that fraction of at least [`AgentConfig::min_events`] arrivals in the window; with
//! no arrivals the next window says `ready` again. That is off by default: when the
//! whole fleet is overloaded every replica refuses nearly everything, so every
//! replica drains, HAProxy has no server and refuses everything itself, the drained
//! replicas see no arrivals and come back, and the fleet flaps between the two about
//! once per window (measured in `docs/scale-out/`). A low weight keeps the fleet
//! serving and still steers traffic away from a replica that refuses more than the
//! others.
//!
//! Between windows the last answer is repeated, so several checkers (one HAProxy per
//! host, or a person with `nc`) see the same state and do not shorten the window.
//!
//! # Serving
//! One thread accepts and answers each connection at once: one short line, then the
//! connection is closed (after at most 100 ms for the peer's own close).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::acceptor::Acceptor;
use super::doc::{StageStats, StatsDoc};

/// Settings of the agent's law (see the module doc). Units: seconds for the window,
/// fractions in 0..=1, percent for the weight. `#[non_exhaustive]`: start from
/// `Default` and use the `with_*` setters.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// Shortest window over which admitted and refused events are counted.
    /// Default 1 s; 100 ms ..= 60 s.
    pub window: Duration,
    /// Smoothing of the weight, in (0, 1]; 1 follows each window alone. Default 0.5.
    pub alpha: f64,
    /// Refused fraction of a window's arrivals above which the replica drains, in
    /// (0, 1]; `None` (the default): refusals lower the weight only (see the module
    /// doc for why).
    pub drain_refused: Option<f64>,
    /// Arrivals a window needs before its refusals can drain the replica. Default 20.
    pub min_events: u64,
    /// Lowest weight while ready, percent, 1 ..= 100 (0 would mean drain). Default 1.
    pub min_weight: u8,
}

crate::setters::setters!(AgentConfig {
    with_window: window: Duration,
    with_alpha: alpha: f64,
    with_drain_refused: drain_refused: Option<f64>,
    with_min_events: min_events: u64,
    with_min_weight: min_weight: u8,
});

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            window: Duration::from_secs(1),
            alpha: 0.5,
            drain_refused: None,
            min_events: 20,
            min_weight: 1,
        }
    }
}

/// An [`AgentConfig`] parameter out of its range: names the parameter, its range and
/// the value given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("agent {parameter} must be {range}, got {got}")]
pub struct AgentConfigError {
    parameter: &'static str,
    range: &'static str,
    got: String,
}

impl AgentConfigError {
    fn new(parameter: &'static str, range: &'static str, got: impl fmt::Debug) -> Self {
        AgentConfigError {
            parameter,
            range,
            got: format!("{got:?}"),
        }
    }

    /// The parameter: `window`, `alpha`, `drain_refused` or `min_weight`.
    pub fn parameter(&self) -> &'static str {
        self.parameter
    }
}

impl AgentConfig {
    /// Checks every parameter's range; the error names the parameter.
    pub fn validate(&self) -> Result<(), AgentConfigError> {
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.window) {
            return Err(AgentConfigError::new(
                "window",
                "100 ms ..= 60 s",
                self.window,
            ));
        }
        if !(self.alpha > 0.0 && self.alpha <= 1.0) {
            return Err(AgentConfigError::new("alpha", "in (0, 1]", self.alpha));
        }
        if let Some(d) = self.drain_refused
            && !(d > 0.0 && d <= 1.0)
        {
            return Err(AgentConfigError::new("drain_refused", "in (0, 1]", d));
        }
        if !(1..=100).contains(&self.min_weight) {
            return Err(AgentConfigError::new(
                "min_weight",
                "1 ..= 100 %",
                self.min_weight,
            ));
        }
        Ok(())
    }
}

/// What the agent answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentReply {
    /// Serving, at this weight (percent of the configured weight, 1 ..= 100).
    Ready {
        /// Weight, percent.
        weight: u8,
    },
    /// Take no new requests.
    Drain(DrainReason),
}

/// Why the agent says `drain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainReason {
    /// Shutting down (told so, or a stage is draining or stopped).
    ShuttingDown,
    /// A controlled stage refused nearly every arrival in the last window.
    Refusing,
}

impl fmt::Display for AgentReply {
    /// The line HAProxy reads, with its newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentReply::Ready { weight } => writeln!(f, "ready {weight}%"),
            AgentReply::Drain(_) => writeln!(f, "drain"),
        }
    }
}

/// Cumulative counts of one controlled stage at the start of a window.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    admitted: u64,
    refused: u64,
}

impl Counts {
    fn of(s: &StageStats) -> Counts {
        Counts {
            admitted: s.admitted,
            refused: s.rejected + s.full,
        }
    }
}

fn controlled(s: &StageStats) -> bool {
    s.admission.policy != "none" || s.rt_target_ms.is_some() || s.admission.target_ms.is_some()
}

/// min(1, target / p90) over the stage's own and its classes' targets.
fn headroom(s: &StageStats) -> f64 {
    let ratio = |target: Option<f64>, p90: Option<f64>| match (target, p90) {
        (Some(t), Some(p)) if t > 0.0 && p > t => t / p,
        _ => 1.0,
    };
    let stage = ratio(
        s.admission.target_ms.or(s.rt_target_ms),
        s.admission.p90_ms.or(s.rt_p90_ms),
    );
    s.admission
        .classes
        .iter()
        .map(|c| ratio(Some(c.target_ms), c.p90_ms))
        .fold(stage, f64::min)
}

/// The law of the module doc, step by step; no clock, no I/O.
#[derive(Debug)]
struct Law {
    cfg: AgentConfig,
    /// Counts at the start of the current window, by stage name.
    start: Vec<(String, Counts)>,
    /// Smoothed capacity, 0..=1.
    weight: f64,
    last: AgentReply,
}

impl Law {
    fn new(cfg: AgentConfig) -> Law {
        Law {
            cfg,
            start: Vec::new(),
            weight: 1.0,
            last: AgentReply::Ready { weight: 100 },
        }
    }

    /// Ends a window at `doc`: the new answer.
    fn step(&mut self, doc: &StatsDoc) -> AgentReply {
        let mut capacity: f64 = 1.0;
        let mut refusing = false;
        let mut start = Vec::new();
        for s in doc.stages.iter().filter(|s| controlled(s)) {
            let now = Counts::of(s);
            let before = self
                .start
                .iter()
                .find(|(n, _)| *n == s.name)
                .map(|(_, c)| *c);
            start.push((s.name.clone(), now));
            let mut admit = 1.0;
            if let Some(b) = before {
                let admitted = now.admitted.saturating_sub(b.admitted);
                let refused = now.refused.saturating_sub(b.refused);
                let arrived = admitted + refused;
                if arrived > 0 {
                    admit = admitted as f64 / arrived as f64;
                }
                if let Some(d) = self.cfg.drain_refused
                    && arrived >= self.cfg.min_events.max(1)
                    && refused as f64 > d * arrived as f64
                {
                    refusing = true;
                }
            }
            capacity = capacity.min(admit).min(headroom(s));
        }
        self.start = start;
        let a = self.cfg.alpha;
        self.weight = (1.0 - a) * self.weight + a * capacity.clamp(0.0, 1.0);
        self.last = if refusing {
            AgentReply::Drain(DrainReason::Refusing)
        } else {
            let pct = (100.0 * self.weight).round().clamp(0.0, 100.0) as u8;
            AgentReply::Ready {
                weight: pct.max(self.cfg.min_weight),
            }
        };
        self.last
    }
}

fn shutting_down(doc: &StatsDoc) -> bool {
    doc.stages
        .iter()
        .any(|s| s.state == "draining" || s.state == "stopped")
}

type Source = Box<dyn Fn() -> StatsDoc + Send + Sync>;

/// The answering side: the law, its window clock, and the operator's drain switch.
struct Responder {
    source: Source,
    law: Mutex<(Option<Instant>, Law)>,
    draining: AtomicBool,
}

impl Responder {
    fn reply(&self) -> AgentReply {
        let doc = (self.source)();
        self.reply_at(Instant::now(), &doc)
    }

    fn reply_at(&self, now: Instant, doc: &StatsDoc) -> AgentReply {
        let mut guard = self.law.lock();
        let (since, law) = &mut *guard;
        let due = since.is_none_or(|t| now.saturating_duration_since(t) >= law.cfg.window);
        let reply = if due {
            *since = Some(now);
            law.step(doc)
        } else {
            law.last
        };
        if self.draining.load(Relaxed) || shutting_down(doc) {
            AgentReply::Drain(DrainReason::ShuttingDown)
        } else {
            reply
        }
    }
}

/// A running agent-check listener. Dropping it stops it.
pub struct AgentServer {
    responder: Arc<Responder>,
    acceptor: Acceptor,
}

impl fmt::Debug for AgentServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentServer")
            .field("local_addr", &self.acceptor.local_addr())
            .finish_non_exhaustive()
    }
}

impl AgentServer {
    /// Binds `addr` and answers agent checks from the stats documents `source` makes
    /// (e.g. `move || admin.stats()` of an [`AdminBuilder`](super::AdminBuilder)).
    /// Errors: an invalid `cfg` (`InvalidInput`), or the bind (naming the address).
    pub fn start(
        addr: SocketAddr,
        cfg: AgentConfig,
        source: impl Fn() -> StatsDoc + Send + Sync + 'static,
    ) -> io::Result<AgentServer> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let responder = Arc::new(Responder {
            source: Box::new(source),
            law: Mutex::new((None, Law::new(cfg))),
            draining: AtomicBool::new(false),
        });
        let r = Arc::clone(&responder);
        let acceptor = Acceptor::start(addr, "seda-agent", move |stream| answer(stream, &r))?;
        Ok(AgentServer {
            responder,
            acceptor,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.acceptor.local_addr()
    }

    /// Says `drain` from now on (before a graceful shutdown), or stops saying it.
    pub fn set_draining(&self, on: bool) {
        self.responder.draining.store(on, Relaxed);
    }

    /// What a check would be answered now (and counts as one).
    pub fn reply(&self) -> AgentReply {
        self.responder.reply()
    }

    /// Stops listening.
    pub fn stop(self) {
        self.acceptor.stop();
    }
}

fn answer(mut stream: TcpStream, responder: &Responder) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let line = responder.reply().to_string();
    let _ = stream.write_all(line.as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
    // Take what the peer sends (an `agent-send` string) until it closes, for at most
    // LINGER, so that our close is a FIN after the line, not a reset that could
    // discard it. HAProxy closes as soon as it has the line.
    let _ = stream.set_read_timeout(Some(LINGER));
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 512];
    while Instant::now() < deadline && matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

/// Longest wait for a checker to close after its answer.
const LINGER: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::super::doc::{AdmissionView, ClassTarget};
    use super::*;

    fn stage(name: &str, admitted: u64, rejected: u64, p90: Option<f64>) -> StageStats {
        StageStats {
            name: name.into(),
            state: "running".into(),
            admitted,
            rejected,
            admission: AdmissionView {
                policy: "response-time".into(),
                enabled: true,
                p90_ms: p90,
                target_ms: Some(100.0),
                ..AdmissionView::none()
            },
            ..StageStats::default()
        }
    }

    fn doc(stages: Vec<StageStats>) -> StatsDoc {
        StatsDoc {
            stages,
            ..StatsDoc::default()
        }
    }

    fn responder(cfg: AgentConfig) -> Responder {
        Responder {
            source: Box::new(StatsDoc::default),
            law: Mutex::new((None, Law::new(cfg))),
            draining: AtomicBool::new(false),
        }
    }

    /// One window per call, `alpha` 1 so each answer reflects its window alone;
    /// draining above 90 % refused.
    fn sharp() -> AgentConfig {
        AgentConfig {
            alpha: 1.0,
            drain_refused: Some(0.9),
            ..AgentConfig::default()
        }
    }

    #[test]
    fn no_controlled_stage_is_ready_at_full_weight() {
        let r = responder(AgentConfig::default());
        let plain = StageStats {
            name: "HttpSend".into(),
            admitted: 500,
            ..StageStats::default()
        };
        let t = Instant::now();
        assert_eq!(
            r.reply_at(t, &doc(vec![plain])),
            AgentReply::Ready { weight: 100 }
        );
        assert_eq!(
            AgentReply::Ready { weight: 100 }.to_string(),
            "ready 100%\n"
        );
    }

    #[test]
    fn healthy_under_target_is_ready_at_full_weight() {
        let r = responder(sharp());
        let t = Instant::now();
        r.reply_at(t, &doc(vec![stage("h", 0, 0, Some(20.0))]));
        let reply = r.reply_at(
            t + Duration::from_secs(1),
            &doc(vec![stage("h", 300, 0, Some(40.0))]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 100 });
    }

    #[test]
    fn p90_over_target_lowers_the_weight() {
        let r = responder(sharp());
        let t = Instant::now();
        r.reply_at(t, &doc(vec![stage("h", 0, 0, None)]));
        // p90 250 ms against 100 ms: 40 %.
        let reply = r.reply_at(
            t + Duration::from_secs(1),
            &doc(vec![stage("h", 100, 0, Some(250.0))]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 40 });
    }

    #[test]
    fn partial_admission_sets_the_weight_and_the_worst_stage_wins() {
        let r = responder(sharp());
        let t = Instant::now();
        r.reply_at(
            t,
            &doc(vec![stage("a", 0, 0, None), stage("b", 0, 0, None)]),
        );
        // a admits 3 of 4 arrivals; b admits all but is at 2x its target.
        let reply = r.reply_at(
            t + Duration::from_secs(1),
            &doc(vec![
                stage("a", 75, 25, Some(50.0)),
                stage("b", 10, 0, Some(200.0)),
            ]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 50 });
        let reply = r.reply_at(
            t + Duration::from_secs(2),
            &doc(vec![
                stage("a", 150, 50, Some(50.0)),
                stage("b", 20, 0, Some(50.0)),
            ]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 75 });
    }

    #[test]
    fn refusing_nearly_everything_drains_and_recovers_when_idle() {
        let r = responder(sharp());
        let t = Instant::now();
        r.reply_at(t, &doc(vec![stage("h", 0, 0, None)]));
        let reply = r.reply_at(
            t + Duration::from_secs(1),
            &doc(vec![stage("h", 5, 95, Some(90.0))]),
        );
        assert_eq!(reply, AgentReply::Drain(DrainReason::Refusing));
        assert_eq!(reply.to_string(), "drain\n");
        // Drained, nothing arrives; the p90 is back under its target: ready again.
        let reply = r.reply_at(
            t + Duration::from_secs(2),
            &doc(vec![stage("h", 5, 95, Some(90.0))]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 100 });
    }

    #[test]
    fn by_default_refusals_lower_the_weight_and_never_drain() {
        let r = responder(AgentConfig {
            alpha: 1.0,
            ..AgentConfig::default()
        });
        let t = Instant::now();
        r.reply_at(t, &doc(vec![stage("h", 0, 0, None)]));
        let reply = r.reply_at(
            t + Duration::from_secs(1),
            &doc(vec![stage("h", 5, 995, Some(90.0))]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 1 });
        let reply = r.reply_at(
            t + Duration::from_secs(2),
            &doc(vec![stage("h", 55, 1945, Some(90.0))]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 5 });
    }

    #[test]
    fn a_few_refusals_do_not_drain() {
        let r = responder(sharp());
        let t = Instant::now();
        r.reply_at(t, &doc(vec![stage("h", 0, 0, None)]));
        // 10 of 10 refused: under min_events (20), so only the weight falls.
        let reply = r.reply_at(
            t + Duration::from_secs(1),
            &doc(vec![stage("h", 0, 10, None)]),
        );
        assert_eq!(reply, AgentReply::Ready { weight: 1 });
    }

    #[test]
    fn shutting_down_drains_whatever_the_load() {
        let r = responder(AgentConfig::default());
        let t = Instant::now();
        r.draining.store(true, Relaxed);
        assert_eq!(
            r.reply_at(t, &doc(vec![stage("h", 0, 0, None)])),
            AgentReply::Drain(DrainReason::ShuttingDown)
        );
        r.draining.store(false, Relaxed);
        let mut s = stage("h", 0, 0, None);
        s.state = "draining".into();
        assert_eq!(
            r.reply_at(t, &doc(vec![s])),
            AgentReply::Drain(DrainReason::ShuttingDown)
        );
    }

    #[test]
    fn class_targets_count_and_the_weight_is_smoothed() {
        let r = responder(AgentConfig::default()); // alpha 0.5
        let mut s = stage("h", 0, 0, None);
        s.admission.target_ms = None;
        s.admission.classes = vec![ClassTarget {
            class: 1,
            rate: 10.0,
            p90_ms: Some(400.0),
            target_ms: 100.0,
        }];
        // Capacity 0.25 (class 1 at 4x its target): w = 0.5 * 1 + 0.5 * 0.25.
        assert_eq!(
            r.reply_at(Instant::now(), &doc(vec![s])),
            AgentReply::Ready { weight: 63 }
        );
    }

    #[test]
    fn within_a_window_the_last_answer_is_repeated() {
        let r = responder(sharp());
        let t = Instant::now();
        r.reply_at(t, &doc(vec![stage("h", 0, 0, None)]));
        let first = r.reply_at(
            t + Duration::from_millis(1000),
            &doc(vec![stage("h", 50, 50, None)]),
        );
        assert_eq!(first, AgentReply::Ready { weight: 50 });
        // A second checker 100 ms later: same answer, the window is not cut short.
        let again = r.reply_at(
            t + Duration::from_millis(1100),
            &doc(vec![stage("h", 50, 60, None)]),
        );
        assert_eq!(again, first);
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        for (cfg, word) in [
            (
                AgentConfig {
                    alpha: 0.0,
                    ..AgentConfig::default()
                },
                "alpha",
            ),
            (
                AgentConfig {
                    min_weight: 0,
                    ..AgentConfig::default()
                },
                "min_weight",
            ),
            (
                AgentConfig {
                    drain_refused: Some(1.5),
                    ..AgentConfig::default()
                },
                "drain_refused",
            ),
            (
                AgentConfig {
                    window: Duration::ZERO,
                    ..AgentConfig::default()
                },
                "window",
            ),
        ] {
            let e = cfg.validate().unwrap_err();
            assert_eq!(e.parameter(), word);
            assert!(e.to_string().contains(word), "{word}");
        }
    }

    #[test]
    fn answers_one_line_on_loopback_and_drains_on_request() {
        let agent = AgentServer::start(
            "127.0.0.1:0".parse().unwrap(),
            AgentConfig::default(),
            || doc(vec![stage("h", 0, 0, Some(10.0))]),
        )
        .unwrap();
        let read = |send: &[u8]| {
            let mut s = TcpStream::connect(agent.local_addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(send).unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            text
        };
        assert_eq!(read(b""), "ready 100%\n");
        // An agent-send string is taken and ignored.
        assert_eq!(read(b"backend/server\n"), "ready 100%\n");
        agent.set_draining(true);
        assert_eq!(read(b""), "drain\n");
        agent.stop();
    }
}

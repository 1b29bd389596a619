//! Overload control of the dynamic stages: which admission policy guards each
//! handler's queue, how requests are sorted into classes, and what a refused client
//! gets (SEDA 5.1.4; USITS'03 3.2-3.4).
//!
//! [`OverloadControl`] is a description, not a running thing: [`OverloadControl::apply`]
//! gives one [`HandlerRegistration`] a *fresh* policy instance (so every stage runs its
//! own controller on its own samples), the classifier and the overload action.
//!
//! # Policies
//! | [`Admission`] | law (see `seda::admission` for each one's equations) | needs |
//! |---|---|---|
//! | `none` | admit all; only the queue capacity (1024) bounds the stage | - |
//! | `delay-budget` | refuse when the predicted response time at the stage, `(in_flight + 1)` times the measured time between departures, exceeds a budget; an integral p90 loop (USITS'03 3.2's windows) sets the budget so that the p90 sits at 0.8 x target; lower classes get half the budget of the class above while it is present, the top class the room that frees | target |
//! | `response-time` | token bucket, rate AIMD-tuned from the smoothed p90 since `born` (USITS'03 3.2) | target |
//! | `multiclass` | one bucket and controller per class; lower classes cut by `adjlo_d` = 10 first (USITS'03 3.3) | target |
//! | `queue-threshold` | admit while `queue_len < threshold` (SEDA 3.2; default threshold 100) | - |
//! | `codel` | shed when the minimum queueing delay over `interval` (100 ms) stayed above `target` (5 ms) | - |
//! | `gradient` | concurrency limit `limit * clamp(1.5 * long / short, 0.5, 1) + sqrt(limit)`, smoothed | - |
//! | `aimd` | concurrency limit, +1 per fast completion, x0.9 when in-stage latency > timeout | - |
//!
//! When no policy is named, a response-time target selects `delay-budget` (it holds
//! the target from the first second of a spike, where the paper's controller learns
//! of the spike only from completions; `docs/overload/README.md` has the comparison),
//! or `multiclass` when per-class targets are given; without a target, `none`.
//! `response-time` with classes configured becomes `multiclass`, each class's
//! target defaulting to the single target. The `aimd` timeout is the response-time
//! target if one is set, else 1 s (USITS'03's targets are of that order).
//!
//! # Classes
//! [`ClassRules`] derives a request's class (0 = lowest) from, in this order: the
//! integer value of a header, the integer value of a cookie, the first client-address
//! prefix that contains the peer. A missing or malformed value falls through to the
//! next source, and to class 0 at the end (USITS'03 3.3: "derived from ... IP address
//! or HTTP cookie information").

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use seda::Class;
use seda::admission::{
    AdmissionPolicy, AimdLimit, AimdLimitConfig, CoDel, CoDelConfig, DelayBudget,
    DelayBudgetConfig, GradientLimit, GradientLimitConfig, MulticlassConfig, MulticlassPolicy,
    QueueThreshold, ResponseTimeConfig, ResponseTimePolicy,
};
use seda::control::QualityConfig;

use crate::handler::{HandlerRegistration, OverloadAction, Request};
use crate::proxy::ProxyRoute;
use crate::server::ServerError;

/// The admission policy of each dynamic stage. See the module docs for the laws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// No admission control (the queue's capacity still applies).
    None,
    /// Predicted response time against a budget the p90 loop sets (the default).
    DelayBudget,
    /// USITS'03 3.2 response-time controller.
    ResponseTime,
    /// USITS'03 3.3 multiclass controller.
    Multiclass,
    /// CoDel-style queueing-delay shedding.
    CoDel,
    /// Gradient concurrency limit.
    Gradient,
    /// AIMD concurrency limit.
    Aimd,
    /// Fixed queue threshold.
    QueueThreshold,
}

impl Admission {
    /// Every policy, in the order `--help` lists them.
    pub const ALL: [Admission; 8] = [
        Admission::DelayBudget,
        Admission::ResponseTime,
        Admission::Multiclass,
        Admission::CoDel,
        Admission::Gradient,
        Admission::Aimd,
        Admission::QueueThreshold,
        Admission::None,
    ];

    /// The name on the command line and in `/_seda/stats`.
    pub fn name(self) -> &'static str {
        match self {
            Admission::None => "none",
            Admission::DelayBudget => "delay-budget",
            Admission::ResponseTime => "response-time",
            Admission::Multiclass => "multiclass",
            Admission::CoDel => "codel",
            Admission::Gradient => "gradient",
            Admission::Aimd => "aimd",
            Admission::QueueThreshold => "queue-threshold",
        }
    }

    /// Whether the policy cannot work without a response-time target.
    pub fn needs_target(self) -> bool {
        matches!(
            self,
            Admission::ResponseTime | Admission::Multiclass | Admission::DelayBudget
        )
    }
}

impl fmt::Display for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Admission {
    type Err = seda::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Admission::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Admission::ALL.iter().map(|a| a.name()).collect();
                seda::UnknownName::new(
                    "admission policy",
                    format!("one of: {}", names.join(", ")),
                    s,
                )
            })
    }
}

/// An IPv4 or IPv6 address prefix in CIDR notation, e.g. `10.0.0.0/8`, `::1/128`.
/// An IPv4 prefix also matches IPv4-mapped IPv6 peers (`::ffff:a.b.c.d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrPrefix {
    addr: IpAddr,
    len: u8,
}

impl AddrPrefix {
    /// Whether `ip` lies inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                masked(u128::from(p.to_bits()), self.len, 32)
                    == masked(u128::from(a.to_bits()), self.len, 32)
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                masked(p.to_bits(), self.len, 128) == masked(a.to_bits(), self.len, 128)
            }
            _ => false,
        }
    }
}

/// The top `len` bits of a `width`-bit address.
fn masked(bits: u128, len: u8, width: u32) -> u128 {
    let len = u32::from(len);
    if len == 0 { 0 } else { bits >> (width - len) }
}

/// Why a string is not an [`AddrPrefix`]; the text names the string.
/// `#[non_exhaustive]`: a match needs a `_` arm.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// No `/LENGTH`.
    #[error("bad address prefix `{0}`: expected ADDRESS/LENGTH, e.g. 10.0.0.0/8")]
    NoLength(String),
    /// What comes before the `/` is not an IPv4 or IPv6 address.
    #[error("bad address prefix `{0}`: not an IP address")]
    Address(String),
    /// The length is not a number up to the address's width.
    #[error("bad address prefix `{input}`: length must be 0..={max}")]
    Length {
        /// The string given.
        input: String,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
}

impl FromStr for AddrPrefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| PrefixError::NoLength(s.to_owned()))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| PrefixError::Address(s.to_owned()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len: u8 =
            len.parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| PrefixError::Length {
                    input: s.to_owned(),
                    max,
                })?;
        Ok(AddrPrefix { addr, len })
    }
}

impl fmt::Display for AddrPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Where a request's class comes from. See the module docs for the order.
///
/// `#[non_exhaustive]`: start from `Default` and use the `with_*` setters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClassRules {
    /// Header whose integer value is the class, e.g. `X-Class`.
    pub header: Option<String>,
    /// Cookie whose integer value is the class.
    pub cookie: Option<String>,
    /// Client-address prefixes and their classes; the first match wins.
    pub prefixes: Vec<(AddrPrefix, Class)>,
}

impl ClassRules {
    /// Whether no source is configured (every request is class 0).
    pub fn is_empty(&self) -> bool {
        self.header.is_none() && self.cookie.is_none() && self.prefixes.is_empty()
    }

    /// Checks that the header and cookie names can occur in a request: each must be
    /// an RFC 9110 token (`X-Class`; not `bad name`, which no request can carry, so
    /// every request would silently be class 0).
    pub fn validate(&self) -> Result<(), ServerError> {
        for (what, name) in [("header", &self.header), ("cookie", &self.cookie)] {
            if let Some(n) = name
                && !is_token(n)
            {
                return Err(config_err(format!(
                    "class {what} `{n}` is not a valid {what} name (letters, digits and                      !#$%&'*+-.^_`|~ only, no spaces)"
                )));
            }
        }
        Ok(())
    }

    /// The class of a request (0 when no source gives one).
    pub fn class_of(&self, req: &Request) -> Class {
        let from_header = || {
            let name = self.header.as_deref()?;
            class_value(req.header(name)?)
        };
        let from_cookie = || {
            let name = self.cookie.as_deref()?;
            req.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
                .find_map(|(_, v)| cookie_value(v, name))
        };
        let from_prefix = || {
            let peer = req.peer?.ip();
            self.prefixes
                .iter()
                .find(|(p, _)| p.contains(peer))
                .map(|(_, c)| *c)
        };
        from_header()
            .or_else(from_cookie)
            .or_else(from_prefix)
            .unwrap_or(0)
    }
}

/// Whether `s` is an RFC 9110 5.6.2 token: one or more `tchar`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// A class written as a decimal integer (surrounding blanks and quotes allowed).
fn class_value(v: &[u8]) -> Option<Class> {
    std::str::from_utf8(v)
        .ok()?
        .trim()
        .trim_matches('"')
        .parse()
        .ok()
}

/// The class in cookie `name` of one `Cookie` header (`a=1; class=2`).
fn cookie_value(header: &[u8], name: &str) -> Option<Class> {
    header
        .split(|b| *b == b';')
        .filter_map(|pair| {
            let eq = pair.iter().position(|b| *b == b'=')?;
            Some((pair[..eq].trim_ascii(), &pair[eq + 1..]))
        })
        .find(|(n, _)| *n == name.as_bytes())
        .and_then(|(_, v)| class_value(v))
}

/// Response-time targets of one handler, overriding the global ones.
/// `#[non_exhaustive]`: start from `Default` and use the `with_*` setters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandlerTargets {
    /// Handler name (`bottleneck`, `hello`: its stage is `handler:<name>`).
    pub name: String,
    /// p90 target of the handler's stage.
    pub rt_target: Option<Duration>,
    /// p90 target per class, index = class.
    pub class_targets: Vec<Duration>,
}

/// Overload control of the dynamic stages. `Default` is no control at all, 503 with
/// `Retry-After: 1` when a queue is full. `#[non_exhaustive]`: start from `Default`
/// and set what differs with the `with_*` setters (or assign the public fields).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use seda::admission::AdmissionPolicy as _;
/// use seda_http::{Admission, OverloadControl};
///
/// // USITS'03 3.2 on every dynamic stage: hold each one's p90 near 500 ms.
/// let oc = OverloadControl::default()
///     .with_admission(Some(Admission::ResponseTime))
///     .with_rt_target(Some(Duration::from_millis(500)));
/// let policy = oc.policy_for("/hello").unwrap().expect("a target: a policy");
/// assert_eq!(policy.name(), "response-time");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OverloadControl {
    /// Policy of every dynamic stage; `None`: `delay-budget` (or `multiclass` with
    /// per-class targets) on the stages that have a target, no admission control on
    /// the others.
    pub admission: Option<Admission>,
    /// p90 response-time target of every dynamic stage.
    pub rt_target: Option<Duration>,
    /// p90 target per class (index = class) for the multiclass controller; classes
    /// without one use `rt_target`.
    pub class_targets: Vec<Duration>,
    /// Per-handler targets.
    pub handlers: Vec<HandlerTargets>,
    /// Parameters of the response-time controllers (their `target` is replaced by
    /// the stage's target). Default: the paper's (USITS'03 Fig. 4).
    pub response_time: ResponseTimeConfig,
    /// Parameters of `delay-budget` (its `target` is replaced by the stage's).
    pub delay_budget: DelayBudgetConfig,
    /// Threshold of `queue-threshold`, events. Default 100.
    pub queue_threshold: usize,
    /// Parameters of `codel`. Default target 5 ms, interval 100 ms.
    pub codel: CoDelConfig,
    /// Parameters of `gradient`. Default: `GradientLimitConfig::default()`.
    pub gradient: GradientLimitConfig,
    /// Parameters of `aimd`; `None`: defaults with the timeout of the module docs.
    pub aimd: Option<AimdLimitConfig>,
    /// Where classes come from.
    pub classes: ClassRules,
    /// What a refused request gets.
    pub on_overload: OverloadAction,
    /// Automatic service degradation of the handlers that support it (USITS'03 3.4).
    pub degrade: bool,
}

crate::setters::setters!(OverloadControl {
    with_admission: admission: Option<Admission>,
    with_rt_target: rt_target: Option<Duration>,
    with_class_targets: class_targets: Vec<Duration>,
    with_handlers: handlers: Vec<HandlerTargets>,
    with_response_time: response_time: ResponseTimeConfig,
    with_delay_budget: delay_budget: DelayBudgetConfig,
    with_queue_threshold: queue_threshold: usize,
    with_codel: codel: CoDelConfig,
    with_gradient: gradient: GradientLimitConfig,
    with_aimd: aimd: Option<AimdLimitConfig>,
    with_classes: classes: ClassRules,
    with_on_overload: on_overload: OverloadAction,
    with_degrade: degrade: bool,
});

crate::setters::setters!(ClassRules {
    with_header: header: Option<String>,
    with_cookie: cookie: Option<String>,
    with_prefixes: prefixes: Vec<(AddrPrefix, Class)>,
});

crate::setters::setters!(HandlerTargets {
    with_name: name: String,
    with_rt_target: rt_target: Option<Duration>,
    with_class_targets: class_targets: Vec<Duration>,
});

impl Default for OverloadControl {
    fn default() -> Self {
        OverloadControl {
            admission: None,
            rt_target: None,
            class_targets: Vec::new(),
            handlers: Vec::new(),
            response_time: ResponseTimeConfig::with_target(Duration::from_secs(1)),
            delay_budget: DelayBudgetConfig::with_target(Duration::from_secs(1)),
            queue_threshold: 100,
            codel: CoDelConfig::default(),
            gradient: GradientLimitConfig::default(),
            aimd: None,
            classes: ClassRules::default(),
            on_overload: OverloadAction::default(),
            degrade: false,
        }
    }
}

fn config_err(msg: impl Into<String>) -> ServerError {
    ServerError::Config(msg.into())
}

impl OverloadControl {
    /// The policy of `handler`'s stage, named or implied: without a name, a target
    /// for that handler (its own, the global one, or class targets) implies
    /// `delay-budget` (`multiclass` with per-class targets), else `none`.
    pub fn policy_kind(&self, handler: &str) -> Admission {
        match self.admission {
            Some(a) => a,
            None if !self.targets_of(handler).1.is_empty() => Admission::Multiclass,
            None if self.target_for(handler).is_some() => Admission::DelayBudget,
            None => Admission::None,
        }
    }

    fn targets_of(&self, handler: &str) -> (Option<Duration>, &[Duration]) {
        let own = self.handlers.iter().find(|h| h.name == handler);
        let target = own.and_then(|h| h.rt_target).or(self.rt_target);
        let classes = match own {
            Some(h) if !h.class_targets.is_empty() => &h.class_targets[..],
            _ => &self.class_targets[..],
        };
        (target, classes)
    }

    /// The p90 target of a handler's stage: its own, else the global one, else (with
    /// class targets only) the highest class's.
    pub fn target_for(&self, handler: &str) -> Option<Duration> {
        let (target, classes) = self.targets_of(handler);
        target.or_else(|| classes.last().copied())
    }

    /// A fresh admission policy for the stage of `handler` (`None`: no control).
    pub fn policy_for(
        &self,
        handler: &str,
    ) -> Result<Option<Arc<dyn AdmissionPolicy>>, ServerError> {
        let kind = self.policy_kind(handler);
        let target = self.target_for(handler);
        if kind.needs_target() && target.is_none() {
            return Err(config_err(format!(
                "admission policy {kind} needs a response-time target (--rt-target-ms, or rt-target-ms in the config)"
            )));
        }
        let err = |e: seda::control::ConfigError| config_err(format!("handler {handler}: {e}"));
        let (_, class_targets) = self.targets_of(handler);
        let multiclass = kind == Admission::Multiclass
            || (kind == Admission::ResponseTime
                && (!self.classes.is_empty() || !class_targets.is_empty()));
        let policy: Arc<dyn AdmissionPolicy> = match kind {
            Admission::None => return Ok(None),
            Admission::DelayBudget => {
                let mut cfg = self.delay_budget.clone();
                cfg.target = target.unwrap_or(cfg.target);
                Arc::new(DelayBudget::new(cfg).map_err(err)?)
            }
            Admission::ResponseTime | Admission::Multiclass => {
                let mut base = self.response_time.clone();
                base.target = target.unwrap_or(base.target);
                if multiclass {
                    // Class 0 is tracked from the start, so that stats show a rate
                    // and a target before the first request.
                    let mut cfg =
                        MulticlassConfig::with_target(base.target).class_target(0, base.target);
                    cfg.base = base;
                    for (c, t) in class_targets.iter().enumerate() {
                        let c = Class::try_from(c)
                            .map_err(|_| config_err("at most 256 class targets"))?;
                        cfg = cfg.class_target(c, *t);
                    }
                    Arc::new(MulticlassPolicy::new(cfg).map_err(err)?)
                } else {
                    Arc::new(ResponseTimePolicy::new(base).map_err(err)?)
                }
            }
            Admission::QueueThreshold => {
                if self.queue_threshold == 0 {
                    return Err(config_err("queue-threshold must be at least 1"));
                }
                Arc::new(QueueThreshold::new(self.queue_threshold))
            }
            Admission::CoDel => Arc::new(CoDel::new(self.codel.clone()).map_err(err)?),
            Admission::Gradient => {
                Arc::new(GradientLimit::new(self.gradient.clone()).map_err(err)?)
            }
            Admission::Aimd => {
                let cfg = self.aimd.clone().unwrap_or_else(|| {
                    AimdLimitConfig::with_timeout(target.unwrap_or(Duration::from_secs(1)))
                });
                Arc::new(AimdLimit::new(cfg).map_err(err)?)
            }
        };
        Ok(Some(policy))
    }

    /// The degradation controller's settings for `handler` (USITS'03 3.4): its
    /// target; admission control on throughout under the default policy, re-enabled
    /// at the lowest quality (the paper's order) under the others, never with `none`.
    /// Errors without a target.
    pub fn quality_for(&self, handler: &str) -> Result<QualityConfig, ServerError> {
        let target = self.target_for(handler).ok_or_else(|| {
            config_err("--degrade needs a response-time target (--rt-target-ms, or rt-target-ms in the config)")
        })?;
        let mut cfg = QualityConfig::with_target(target);
        match self.policy_kind(handler) {
            Admission::None => cfg.reenable_after = None,
            // The default holds the target at the door from the start; quality falls
            // while it refuses (control::quality, "under admission control").
            Admission::DelayBudget => cfg.with_admission = true,
            _ => {}
        }
        cfg.validate()
            .map_err(|e| config_err(format!("handler {handler}: {e}")))?;
        Ok(cfg)
    }

    /// Checks everything [`OverloadControl::apply`] would, for handlers named `names`;
    /// also that every per-handler entry names one of them.
    pub fn validate<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ServerError> {
        let names: Vec<&str> = names.into_iter().collect();
        self.classes.validate()?;
        for h in &self.handlers {
            if !names.contains(&h.name.as_str()) {
                return Err(config_err(format!(
                    "[[handler]] `{}` names no mounted handler (mounted: {})",
                    h.name,
                    names.join(", ")
                )));
            }
        }
        for n in &names {
            self.policy_for(n)?;
        }
        Ok(())
    }

    /// A proxy route with this control: a fresh policy for its stage (the route's
    /// own target, else the one for its stage name or the global one), the class
    /// rules with the route's class header first, and the overload action.
    pub fn apply_route(&self, mut route: ProxyRoute) -> Result<ProxyRoute, ServerError> {
        let name = route.stage_name();
        let mut oc = self.clone();
        if let Some(t) = route.rt_target {
            oc.handlers.retain(|h| h.name != name);
            oc.handlers.push(HandlerTargets {
                name: name.clone(),
                rt_target: Some(t),
                class_targets: Vec::new(),
            });
        }
        route.admission = oc.policy_for(&name)?;
        let mut rules = self.classes.clone();
        if let Some(h) = &route.class_header {
            rules.header = Some(h.clone());
        }
        route.classifier = (!rules.is_empty()).then(|| {
            Arc::new(move |req: &Request| rules.class_of(req)) as crate::handler::Classifier
        });
        route.on_overload = self.on_overload.clone();
        Ok(route)
    }

    /// The registration with this control: a fresh policy for its stage, the class
    /// rules as its classifier (if any), and the overload action.
    pub fn apply(&self, reg: HandlerRegistration) -> Result<HandlerRegistration, ServerError> {
        let mut reg = reg.on_overload(self.on_overload.clone());
        if let Some(policy) = self.policy_for(&reg.name)? {
            reg = reg.admission(policy);
        }
        if !self.classes.is_empty() {
            let rules = self.classes.clone();
            reg = reg.classify(move |req: &Request| rules.class_of(req));
        }
        Ok(reg)
    }
}

#[cfg(test)]
mod tests;

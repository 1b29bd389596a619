//! `seda serve`'s overload settings (admission policy, targets, classes, handlers,
//! the controllers' parameters) turned into the server's
//! [`OverloadControl`](seda_http::OverloadControl): the part of
//! [`ServeConfig::validate`] that builds it.

use std::time::Duration;

use seda::admission::{AimdLimitConfig, GradientLimitConfig};
use seda_http::{AddrPrefix, HandlerTargets, OverloadControl};

use super::config::{ConfigError, ServeConfig, millis, overload_action};
use super::words::Word;

impl ServeConfig {
    /// The overload settings and the bottleneck's cost.
    pub(super) fn overload(&self) -> Result<(OverloadControl, Option<Duration>), ConfigError> {
        let mut oc = OverloadControl::default();
        let bottleneck = self
            .bottleneck_ms
            .map(|v| millis("bottleneck-ms", v))
            .transpose()?;
        oc.rt_target = self
            .rt_target_ms
            .map(|v| millis("rt-target-ms", v))
            .transpose()?;
        if let Some(v) = &self.class_targets_ms {
            oc.class_targets = v
                .iter()
                .map(|&t| millis("class-targets-ms", t))
                .collect::<Result<_, _>>()?;
        }
        oc.admission = self.admission.as_ref().map(Word::get);
        if let Some(n) = self.queue_threshold {
            if n == 0 {
                return Err("queue-threshold must be at least 1".into());
            }
            oc.queue_threshold = n;
        }
        if let Some(v) = self.codel_target_ms {
            oc.codel.target = millis("codel-target-ms", v)?;
        }
        if let Some(v) = self.codel_interval_ms {
            oc.codel.interval = millis("codel-interval-ms", v)?;
        }
        if let Some(c) = &self.classes {
            oc.classes.header.clone_from(&c.header);
            oc.classes.cookie.clone_from(&c.cookie);
            for p in &c.prefixes {
                let prefix: AddrPrefix = p
                    .prefix
                    .parse()
                    .map_err(|e| format!("[classes] prefixes: {e}"))?;
                oc.classes.prefixes.push((prefix, p.class));
            }
        }
        if let Some(h) = &self.class_header {
            oc.classes.header = Some(h.clone());
        }
        // A name no request can carry is a mistake, not a setting without effect.
        oc.classes.validate().map_err(|e| e.to_string())?;
        for h in &self.handler {
            if oc.handlers.iter().any(|o| o.name == h.name) {
                return Err(format!("[[handler]] `{}` appears twice", h.name).into());
            }
            oc.handlers.push(
                HandlerTargets::default()
                    .with_name(h.name.clone())
                    .with_rt_target(
                        h.rt_target_ms
                            .map(|v| millis("[[handler]] rt-target-ms", v))
                            .transpose()?,
                    )
                    .with_class_targets(
                        h.class_targets_ms
                            .iter()
                            .map(|&t| millis("[[handler]] class-targets-ms", t))
                            .collect::<Result<_, _>>()?,
                    ),
            );
        }
        if let Some(r) = &self.response_time {
            let c = &mut oc.response_time;
            c.nreq = r.nreq.unwrap_or(c.nreq);
            if let Some(v) = r.timeout_ms {
                c.timeout = millis("[response-time] timeout-ms", v)?;
            }
            if let Some(v) = r.burst_ms {
                c.burst = if v == 0.0 {
                    Duration::ZERO
                } else {
                    millis("[response-time] burst-ms", v)?
                };
            }
            for (field, v) in [
                (&mut c.alpha, r.alpha),
                (&mut c.err_d, r.err_d),
                (&mut c.err_i, r.err_i),
                (&mut c.adj_i, r.adj_i),
                (&mut c.adj_d, r.adj_d),
                (&mut c.c_i, r.c_i),
                (&mut c.rate_min, r.rate_min),
                (&mut c.rate_max, r.rate_max),
                (&mut c.initial_rate, r.initial_rate),
                (&mut c.bucket_depth, r.bucket_depth),
            ] {
                if let Some(v) = v {
                    *field = v;
                }
            }
            c.validate().map_err(|e| format!("[response-time]: {e}"))?;
        }
        if let Some(g) = &self.gradient {
            let d = GradientLimitConfig::default();
            oc.gradient = GradientLimitConfig::default()
                .with_initial(g.initial.unwrap_or(d.initial))
                .with_min(g.min.unwrap_or(d.min))
                .with_max(g.max.unwrap_or(d.max))
                .with_tolerance(g.tolerance.unwrap_or(d.tolerance))
                .with_smoothing(g.smoothing.unwrap_or(d.smoothing))
                .with_long_window(g.long_window.unwrap_or(d.long_window))
                .with_window(
                    g.window_ms
                        .map(|v| millis("[gradient] window-ms", v))
                        .transpose()?
                        .unwrap_or(d.window),
                );
        }
        if let Some(a) = &self.aimd {
            let timeout = match a.timeout_ms {
                Some(v) => millis("[aimd] timeout-ms", v)?,
                None => oc.rt_target.unwrap_or(Duration::from_secs(1)),
            };
            let d = AimdLimitConfig::with_timeout(timeout);
            oc.aimd = Some(
                d.clone()
                    .with_initial(a.initial.unwrap_or(d.initial))
                    .with_min(a.min.unwrap_or(d.min))
                    .with_max(a.max.unwrap_or(d.max))
                    .with_backoff(a.backoff.unwrap_or(d.backoff)),
            );
        }
        let retry_after_secs = self.retry_after_secs.unwrap_or(1);
        oc.on_overload = overload_action(
            self.overload_action.as_deref().unwrap_or("reject"),
            retry_after_secs,
        )?;
        oc.degrade = self.degrade.unwrap_or(false);
        if oc.degrade && bottleneck.is_none() {
            return Err("degrade needs bottleneck-ms (the handler it degrades)".into());
        }
        Ok((oc, bottleneck))
    }
}

//! [`Server::reload`](super::Server::reload): a new configuration applied to the
//! running server, without dropping a connection or a request in flight.
//!
//! Everything is checked first, then applied; a configuration that fails a check
//! changes nothing. What is applied, and how a request in flight sees it:
//! - request limits, `max_pipelined`, header and idle timeouts: swapped as one set
//!   ([`Live`]); a request is parsed under the set in force when its bytes are parsed;
//! - `max_connections`: the socket layer's bound (open connections over a lower
//!   bound stay; new ones are refused until under it);
//! - the overload control of every dynamic handler: a new policy in each stage's
//!   [`PolicySlot`](crate::policy_slot::PolicySlot), the class rules and the
//!   overload action; requests already queued stay queued;
//! - the access log's file and format (reopened in order with the queued lines);
//! - the TLS listener's certificate and key (new connections get the new ones;
//!   sessions and tickets issued before stay valid).
//!
//! Settings that shape the stages and sockets (addresses, root, caches, threads,
//! handoff) keep their running values; [`Reloaded::restart_needed`] names those the
//! new configuration changed.

use std::sync::Arc;

use seda_io::{SocketHandle, TlsHandle};

use super::config::{self, ServerConfig, ServerError};
use super::events::Route;
use super::state::{Haboob, Live};
use crate::handler::Request;
use crate::overload::OverloadControl;

/// What a reload did.
#[derive(Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// Settings the new configuration changed and the server now runs with.
    pub applied: Vec<&'static str>,
    /// Settings the new configuration changed that take effect only at a restart;
    /// their running values are kept.
    pub restart_needed: Vec<&'static str>,
}

impl Live {
    /// The live settings of `cfg`.
    pub(crate) fn of(cfg: &ServerConfig) -> Live {
        Live {
            limits: cfg.limits.clone(),
            header_timeout: cfg.header_timeout,
            idle_timeout: cfg.idle_timeout,
            max_pipelined: cfg.max_pipelined as u64,
        }
    }
}

/// [`Server::reload`](super::Server::reload) on the running server's parts: `hb`,
/// its socket layer, its TLS listener and the configuration it `started` with.
pub(super) fn apply(
    hb: &Haboob,
    sockets: &SocketHandle,
    tls: Option<&TlsHandle>,
    started: &ServerConfig,
    cfg: &ServerConfig,
    overload: Option<&OverloadControl>,
) -> Result<Reloaded, ServerError> {
    let root = config::validate(cfg)?;
    let mut done = Reloaded::default();
    // Every check before any change.
    let retargeted = match overload {
        Some(oc) => Some(retarget(&hb.routes.all(), oc)?),
        None => None,
    };
    let log = match (&started.access_log, &cfg.access_log) {
        (Some(old), Some(new)) if old != new => {
            if old.queue != new.queue {
                done.restart_needed.push("access-log-queue");
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&new.path)
                .map_err(|e| {
                    ServerError::Config(format!("access log {}: {e}", new.path.display()))
                })?;
            Some(new)
        }
        (None, Some(_)) | (Some(_), None) => {
            done.restart_needed.push("access-log");
            None
        }
        _ => None,
    };

    // Apply. The certificate first: the one step that may still fail (a rustls
    // configuration the checked keys cannot build), before anything has changed.
    if let (Some(new), Some(tls)) = (&cfg.tls, tls) {
        tls.reload(&new.keys).map_err(ServerError::Io)?;
        done.applied.push("tls certificates");
    }
    let live = Live::of(cfg);
    let old = hb.live.load_full();
    if *old != live {
        if old.limits != live.limits {
            done.applied.push("limits");
        }
        if old.max_pipelined != live.max_pipelined {
            done.applied.push("max-pipelined");
        }
        if (old.header_timeout, old.idle_timeout) != (live.header_timeout, live.idle_timeout) {
            done.applied.push("timeouts");
        }
        hb.live.store(Arc::new(live));
    }
    if cfg.max_connections != started.max_connections {
        sockets.set_max_connections(cfg.max_connections);
        if let Some(tls) = tls {
            tls.set_max_connections(cfg.max_connections);
        }
        done.applied.push("max-connections");
    }
    if let Some(routes) = retargeted {
        for (route, new) in routes {
            route.policy.replace(new.reg.admission.clone());
            hb.routes.replace(&route, new);
        }
        done.applied.push("overload control");
    }
    if let (Some(new), Some(running)) = (log, &hb.log) {
        running
            .reopen(&new.path, new.format)
            .map_err(ServerError::Io)?;
        done.applied.push("access-log");
    }
    done.restart_needed
        .extend(restart_needed(started, cfg, root == hb.set.root));
    Ok(done)
}

/// Each route with its registration under `oc` (checked for every route before any
/// is changed).
fn retarget(
    routes: &[Arc<Route>],
    oc: &OverloadControl,
) -> Result<Vec<(Arc<Route>, Route)>, ServerError> {
    oc.validate(routes.iter().map(|r| r.reg.name.as_str()))?;
    routes
        .iter()
        .map(|r| {
            let mut reg = r.reg.clone();
            reg.on_overload = oc.on_overload.clone();
            reg.admission = oc.policy_for(&reg.name)?;
            reg.classifier = if oc.classes.is_empty() {
                None
            } else {
                let rules = oc.classes.clone();
                Some(Arc::new(move |req: &Request| rules.class_of(req)))
            };
            let new = Route {
                reg,
                sink: r.sink.clone(),
                stage: Arc::clone(&r.stage),
                policy: Arc::clone(&r.policy),
            };
            Ok((Arc::clone(r), new))
        })
        .collect()
}

/// The settings that differ between the configuration the server started with and
/// `new`, among those a reload cannot change.
fn restart_needed(old: &ServerConfig, new: &ServerConfig, same_root: bool) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut differs = |name, changed: bool| {
        if changed {
            out.push(name);
        }
    };
    differs("listen", old.listen != new.listen);
    differs("root", !same_root);
    differs("cache-mb", old.cache_bytes != new.cache_bytes);
    differs(
        "path-cache-mb",
        old.path_cache_bytes != new.path_cache_bytes,
    );
    differs(
        "max-cached-file-kb",
        old.max_cached_file != new.max_cached_file,
    );
    differs("thread-model", old.thread_model != new.thread_model);
    differs("event-loops", old.event_loops != new.event_loops);
    differs("handoff", old.handoff != new.handoff);
    differs("parse-threads", old.parse_threads != new.parse_threads);
    differs("send-timeout", old.send_timeout != new.send_timeout);
    differs("revalidate", old.revalidate != new.revalidate);
    differs("index", old.index != new.index);
    differs("dotfiles", old.dotfiles != new.dotfiles);
    differs(
        "residency-check",
        old.residency_check != new.residency_check,
    );
    differs("file-io", old.file_io != new.file_io);
    differs("header-cache", old.header_cache != new.header_cache);
    differs(
        "write-threshold",
        old.write_threshold != new.write_threshold,
    );
    differs(
        "retry-after-secs",
        old.retry_after_secs != new.retry_after_secs,
    );
    differs("admin-listen", old.admin_listen != new.admin_listen);
    let listen = |c: &ServerConfig| c.tls.as_ref().map(|t| t.listen);
    let handshakes = |c: &ServerConfig| {
        c.tls
            .as_ref()
            .map(|t| (t.handshake_timeout, t.max_handshakes, t.inline))
    };
    differs("tls-listen", listen(old) != listen(new));
    differs("tls-handshakes", handshakes(old) != handshakes(new));
    out
}

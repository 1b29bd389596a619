//! # seda-http: Haboob, the staged HTTP/1.1 server (SEDA, SOSP'01 section 5.1)
//!
//! Haboob answers HTTP/1.0 and 1.1 (GET and HEAD for files; any method for dynamic
//! handlers) with keep-alive and pipelining. Its stages follow SEDA Fig. 5: the
//! socket stages of `seda-io`, HttpParse, HttpRecv, PageCache, CacheMiss, the file
//! helper, HttpSend, and one stage per dynamic handler; every request passes through
//! the stages that count it. Beside the page cache sit Flash's pathname-translation
//! and response-header caches (Flash 5.2-5.3), both bounded in bytes.
//!
//! - [`proto`]: the protocol, pure (parsing with limits, chunked bodies, paths,
//!   validators, ranges).
//! - [`Server`] / [`ServerConfig`]: start, register handlers, reload a configuration
//!   while serving ([`Server::reload`]), graceful shutdown.
//! - [`AdminServer`] / [`StatsDoc`]: the admin listener (`/_seda/stats`, `graph`,
//!   `metrics`) on an address of its own, reused by the other services, and the stats
//!   document's type, shared by the server and the experiments that read it; the
//!   live dashboard at `/_seda/`. [`AgentServer`]: HAProxy's `agent-check` answered
//!   from the admission state (weight, `drain`), for replicas behind a load balancer.
//! - [`Handler`] / [`HandlerRegistration`]: the dynamic handler API (HDAPI).
//! - [`PageCache`]: the page cache with the path cache (one lookup, one lock).
//! - [`DemoSite`]: the built-in demo site.
//! - [`AccessLog`]: the access log, a stage of its own fed by lossy enqueue (nginx's
//!   `combined` or JSON lines, with the request time and the stage that answered).
//! - [`ProxyRoute`]: the front door, a route whose requests go to upstream servers
//!   through a stage of its own (`proxy:<name>`) with the same admission control as
//!   a dynamic handler; upstream connections over seda-io, pooled, bodies streamed
//!   both ways through bounded windows, one framing forwarded, `502`/`504`, retries
//!   and passive health. Its counters are the `proxy` section of the stats.
//! - [`OverloadControl`]: admission policy, classes and overload action of the
//!   dynamic stages (USITS'03 3.2-3.4); [`Bottleneck`]: the calibrated CPU-bound
//!   handler of SEDA 5.1.4 with its quality knob and automatic degradation.
//!
//! # Overload control (`seda serve`)
//! | flag | effect |
//! |---|---|
//! | `--bottleneck-ms N` | mounts [`Bottleneck`] at `/bottleneck` (~N ms of CPU per request; `?q=0..1`) |
//! | `--rt-target-ms N` | p90 target of every dynamic stage; selects the USITS'03 response-time controller |
//! | `--admission P` | [`Admission`]: `response-time`, `multiclass`, `codel`, `gradient`, `aimd`, `queue-threshold`, `none` |
//! | `--class-header H` | [`ClassRules`]: class = integer value of header `H` (TOML adds cookie and address prefixes) |
//! | `--degrade` | automatic quality of the bottleneck (USITS'03 3.4), admission back on at the lowest quality |
//! | `--overload-action A` | `reject` (503 + `Retry-After: --retry-after-secs`), `redirect:URL`, `degrade` |
//!
//! ```no_run
//! use seda_http::{DemoSite, Server, ServerConfig};
//! let site = DemoSite::create().unwrap();
//! let cfg = ServerConfig::default()
//!     .with_root(site.path().to_owned())
//!     .with_handlers(vec![DemoSite::hello_handler()]);
//! let server = Server::start(cfg).unwrap();
//! println!("listening on {}", server.local_addr());
//! server.shutdown(std::time::Duration::from_secs(5));
//! ```
#![forbid(unsafe_code)]

mod access_log;
mod admin;
mod bottleneck;
mod cache;
mod demo;
mod handler;
pub mod html;
mod overload;
mod policy_slot;
pub mod proto;
mod proxy;
mod server;
mod setters;

pub use access_log::{
    ACCESS_LOG_STAGE, AccessLog, AccessLogConfig, AccessLogFormat, AccessLogStats,
};
pub use admin::{
    AdminBuilder, AdminServer, AdmissionView, AgentConfig, AgentConfigError, AgentReply,
    AgentServer, ClassCount, ClassTarget, DrainReason, Latency, StageStats, StatsDoc,
};
pub use bottleneck::{Bottleneck, DEFAULT_SAMPLE_PERIOD};
pub use cache::{FileInfo, FileKey, Lookup, PageCache, PageCacheStats, Target};
pub use demo::DemoSite;
pub use handler::{
    Classifier, Handler, HandlerContext, HandlerRegistration, OverloadAction, Request, Response,
};
pub use overload::{
    AddrPrefix, Admission, ClassRules, HandlerTargets, OverloadControl, PrefixError,
};
pub use proxy::{
    DEFAULT_TIMEOUT as DEFAULT_PROXY_TIMEOUT, ProxyRoute, ProxyStats, RouteError, RouteStats,
    UPSTREAM_STAGE, UpstreamStats, UpstreamUrl,
};
pub use server::{
    DescriptorBudget, FileIo, HaboobStats, Handoff, IoBackend, PathCacheStats, Reloaded, Server,
    ServerConfig, ServerError, ServerShutdown, TlsListen, stages,
};

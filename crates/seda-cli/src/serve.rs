//! `seda serve`: Haboob, the staged HTTP/1.1 server (issue 3).
//!
//! Every flag can also be set in a TOML file given with `--config` (same names,
//! e.g. `cache-mb = 64`); flags on the command line override the file. Without
//! `--root` the built-in demo site is served, with a dynamic handler at `/hello`.
//! The first line on standard output is `listening on http://ADDR` (tests and scripts
//! parse it; `--listen 127.0.0.1:0` picks a free port), the second `admin at
//! http://ADDR/_seda/` (the admin listener: stats, stage graph, metrics; loopback on a
//! free port unless `--admin-listen ADDR`, absent with `--admin-listen none`).
//! With `--agent-listen ADDR` it also answers HAProxy's agent-check there
//! (`seda_http::AgentServer`) and prints `agent-check at ADDR` after those lines.
//! SIGINT or SIGTERM shuts down gracefully: the agent says `drain`, requests in flight
//! are answered, then the process exits.
//!
//! Values that cannot work are errors (a cache larger than the machine's memory,
//! more connections than open files); settings that would have no effect are
//! warned about on stderr (an admission target with no dynamic handler mounted).
//!
//! # Overload control (issue 5; `shared/contracts/overload.md`)
//! `--bottleneck-ms N` mounts the calibrated bottleneck handler at `/bottleneck` and
//! prints `bottleneck: N ms calibrated to K iterations` after the listening line;
//! `--bottleneck-passes K` gives K instead of calibrating (replicas doing the same work).
//! `--rt-target-ms`, `--admission`, `--class-header`, `--degrade`,
//! `--overload-action` and `--retry-after-secs` configure every dynamic stage (see
//! `seda_http::OverloadControl` for the laws). The TOML file adds:
//!
//! ```toml
//! class-targets-ms = [1000, 200]        # p90 target per class, index = class
//! [classes]
//! header = "X-Class"                     # integer value; missing or bad: next source
//! cookie = "class"
//! prefixes = [{ prefix = "127.0.0.2/32", class = 1 }]   # first match wins
//! [response-time]                      # USITS'03 Fig. 4 parameters; any of: nreq,
//! bucket-depth = 4                       #   timeout-ms, alpha, err-d, err-i, adj-i,
//!                                        #   adj-d, c-i, rate-min, rate-max, initial-rate,
//!                                        #   burst-ms (0: the paper's fixed depth)
//! [[handler]]
//! name = "bottleneck"
//! rt-target-ms = 500
//! class-targets-ms = [1000, 200]
//! [gradient]                             # any of: initial, min, max, tolerance,
//! tolerance = 2.0                        #   smoothing, long-window, window-ms
//! [aimd]                                 # any of: initial, min, max, backoff, timeout-ms
//! backoff = 0.8
//! ```

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use seda::ThreadModel;
use seda::admission::{AimdLimitConfig, GradientLimitConfig};
use seda_http::proto::Dotfiles;
use seda_http::{
    AddrPrefix, Admission, AgentConfig, AgentServer, DemoSite, HandlerTargets, Handoff,
    OverloadAction, OverloadControl, Server, ServerConfig,
};
use serde::Deserialize;

mod mount;
use mount::{mount_overload, warnings};

/// Arguments of `seda serve`.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:8080; port 0 picks a free port].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Directory to serve [default: the built-in demo site].
    #[arg(long)]
    root: Option<PathBuf>,
    /// Page-cache capacity in MiB [default: 200].
    #[arg(long)]
    cache_mb: Option<u64>,
    /// Thread model of the stages: per-stage or shared [default: per-stage].
    #[arg(long)]
    thread_model: Option<ThreadModel>,
    /// TOML file with any of these settings; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Files larger than this many KiB stream with sendfile instead of entering the
    /// page cache [default: 1024].
    #[arg(long)]
    max_cached_file_kb: Option<u64>,
    /// Seconds a client has to send a request once it started [default: 10].
    #[arg(long)]
    header_timeout: Option<f64>,
    /// Seconds an idle keep-alive connection is kept [default: 30].
    #[arg(long)]
    idle_timeout: Option<f64>,
    /// Most open connections [default: 10000].
    #[arg(long)]
    max_connections: Option<usize>,
    /// Socket event loops [default: one per core].
    #[arg(long)]
    event_loops: Option<usize>,
    /// Most threads of the HttpParse stage [default: 2].
    #[arg(long)]
    parse_threads: Option<usize>,
    /// How the CPU-bound stages hand events on: inline (the runtime runs the next
    /// stage on the same thread when its queue is empty) or queued [default: inline].
    #[arg(long, value_name = "inline|queued")]
    handoff: Option<HandoffArg>,
    /// Address of the admin listener (/_seda/stats, graph, metrics), or `none` to
    /// have none [default: 127.0.0.1 on a free port, printed at start as `admin at
    /// http://ADDR/_seda/`; never on the service port].
    #[arg(long, value_name = "ADDR|none")]
    admin_listen: Option<AdminListen>,
    /// Seconds a client may take none of its pending response before it is
    /// disconnected [default: 60].
    #[arg(long)]
    send_timeout: Option<f64>,
    /// Most requests of one connection in flight; past it the connection is not read
    /// until half are answered [default: 16].
    #[arg(long, value_name = "N")]
    max_pipelined: Option<usize>,
    /// Serve files and directories whose name starts with a dot: hide (404) or serve
    /// [default: hide; `.well-known` is always served].
    #[arg(long, value_name = "hide|serve")]
    dotfiles: Option<DotfilesArg>,
    /// Capacity of the pathname-translation cache in MiB; 0 turns it off, so every
    /// request is translated (decode, canonicalize, stat, open) [default: 16].
    #[arg(long)]
    path_cache_mb: Option<u64>,
    /// Where a cache miss's blocking calls run: `helper` (CacheMiss's pool and the
    /// file helper: Flash's AMPED) or `inline` (on the event loop that found the
    /// miss, which waits for the disk: Flash's SPED, for comparison) [default: helper].
    #[arg(long, value_name = "helper|inline")]
    file_io: Option<seda_http::FileIo>,
    /// Format every file response's header instead of keeping it with the file's
    /// translation (turns off Flash's response-header cache).
    #[arg(long)]
    no_header_cache: bool,
    /// Seconds to let requests in flight finish on SIGINT/SIGTERM [default: 10].
    #[arg(long)]
    shutdown_grace: Option<f64>,
    /// Mount the bottleneck handler at /bottleneck, calibrated to about this many
    /// milliseconds of CPU per request.
    #[arg(long, value_name = "MS")]
    bottleneck_ms: Option<f64>,
    /// Checksum passes per bottleneck request instead of calibrating (the K that
    /// `bottleneck: N ms calibrated to K iterations` printed), so that several
    /// servers do the same work.
    #[arg(long, value_name = "K")]
    bottleneck_passes: Option<u64>,
    /// 90th-percentile response-time target of every dynamic stage, milliseconds
    /// (selects the delay-budget admission policy unless --admission says).
    #[arg(long, value_name = "MS")]
    rt_target_ms: Option<f64>,
    /// Admission policy of every dynamic stage: delay-budget, response-time (the
    /// USITS'03 controller), multiclass, codel, gradient, aimd, queue-threshold or
    /// none [default: delay-budget with a target (multiclass with per-class
    /// targets), else none].
    #[arg(long, value_name = "POLICY")]
    admission: Option<Admission>,
    /// Threshold of --admission queue-threshold, requests [default: 100].
    #[arg(long, value_name = "N")]
    queue_threshold: Option<usize>,
    /// Target queueing delay of --admission codel, milliseconds [default: 5].
    #[arg(long, value_name = "MS")]
    codel_target_ms: Option<f64>,
    /// Interval of --admission codel, milliseconds [default: 100].
    #[arg(long, value_name = "MS")]
    codel_interval_ms: Option<f64>,
    /// Class of a request = integer value of this header (missing or bad: 0).
    #[arg(long, value_name = "NAME")]
    class_header: Option<String>,
    /// Automatic service degradation of the bottleneck handler (needs a target).
    #[arg(long)]
    degrade: bool,
    /// What a refused request gets: reject (503 + Retry-After), redirect:URL (302), or
    /// degrade (the handler's cheap answer) [default: reject].
    #[arg(long, value_name = "ACTION")]
    overload_action: Option<String>,
    /// Retry-After of a 503, seconds [default: 1].
    #[arg(long, value_name = "SECS")]
    retry_after_secs: Option<u32>,
    /// Answer HAProxy's agent-check on this address with the admission state
    /// (`ready N%` from the admitted fraction and p90 vs target, `drain` when shutting
    /// down) [default: off].
    #[arg(long, value_name = "ADDR")]
    agent_listen: Option<SocketAddr>,
    /// Also say `drain` while a stage refuses more than this fraction (0-1] of its
    /// arrivals [default: never; refusals lower the weight: a whole fleet draining at
    /// once would leave HAProxy no server].
    #[arg(long, value_name = "FRACTION")]
    agent_drain_refused: Option<f64>,
}

/// The same settings in a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSettings {
    listen: Option<SocketAddr>,
    root: Option<PathBuf>,
    cache_mb: Option<u64>,
    thread_model: Option<String>,
    max_cached_file_kb: Option<u64>,
    header_timeout: Option<f64>,
    idle_timeout: Option<f64>,
    max_connections: Option<usize>,
    event_loops: Option<usize>,
    parse_threads: Option<usize>,
    handoff: Option<String>,
    admin_listen: Option<String>,
    send_timeout: Option<f64>,
    max_pipelined: Option<usize>,
    dotfiles: Option<String>,
    path_cache_mb: Option<u64>,
    file_io: Option<String>,
    header_cache: Option<bool>,
    shutdown_grace: Option<f64>,
    bottleneck_ms: Option<f64>,
    bottleneck_passes: Option<u64>,
    rt_target_ms: Option<f64>,
    class_targets_ms: Option<Vec<f64>>,
    admission: Option<String>,
    queue_threshold: Option<usize>,
    codel_target_ms: Option<f64>,
    codel_interval_ms: Option<f64>,
    class_header: Option<String>,
    degrade: Option<bool>,
    overload_action: Option<String>,
    retry_after_secs: Option<u32>,
    classes: Option<FileClasses>,
    #[serde(default)]
    handler: Vec<FileHandler>,
    response_time: Option<FileResponseTime>,
    gradient: Option<FileGradient>,
    aimd: Option<FileAimd>,
    agent_listen: Option<SocketAddr>,
    agent_drain_refused: Option<f64>,
}

/// Where the admin listener goes: an address, or nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminListen {
    /// Listen here.
    At(SocketAddr),
    /// No admin listener.
    None,
}

impl std::str::FromStr for AdminListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(AdminListen::None);
        }
        s.parse().map(AdminListen::At).map_err(|_| {
            format!("--admin-listen must be an address (e.g. 127.0.0.1:9090) or `none`, got `{s}`")
        })
    }
}

/// `--handoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoffArg {
    /// Inline when the next queue is empty.
    Inline,
    /// Always through the queue.
    Queued,
}

impl std::str::FromStr for HandoffArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "inline" => Ok(HandoffArg::Inline),
            "queued" => Ok(HandoffArg::Queued),
            _ => Err(format!("--handoff must be inline or queued, got `{s}`")),
        }
    }
}

/// `--dotfiles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotfilesArg {
    /// 404 for them.
    Hide,
    /// Serve them.
    Serve,
}

impl std::str::FromStr for DotfilesArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hide" => Ok(DotfilesArg::Hide),
            "serve" => Ok(DotfilesArg::Serve),
            _ => Err(format!("--dotfiles must be hide or serve, got `{s}`")),
        }
    }
}

/// The admin listener's default: loopback, a free port.
const DEFAULT_ADMIN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// `[response-time]` of the TOML file: the USITS'03 controller's parameters.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileResponseTime {
    nreq: Option<usize>,
    timeout_ms: Option<f64>,
    alpha: Option<f64>,
    err_d: Option<f64>,
    err_i: Option<f64>,
    adj_i: Option<f64>,
    adj_d: Option<f64>,
    c_i: Option<f64>,
    rate_min: Option<f64>,
    rate_max: Option<f64>,
    initial_rate: Option<f64>,
    bucket_depth: Option<f64>,
    burst_ms: Option<f64>,
}

/// `[classes]` of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileClasses {
    header: Option<String>,
    cookie: Option<String>,
    #[serde(default)]
    prefixes: Vec<FilePrefix>,
}

/// One entry of `[classes] prefixes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FilePrefix {
    prefix: String,
    class: u8,
}

/// One `[[handler]]` of the TOML file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileHandler {
    name: String,
    rt_target_ms: Option<f64>,
    #[serde(default)]
    class_targets_ms: Vec<f64>,
}

/// `[gradient]` of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileGradient {
    initial: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    tolerance: Option<f64>,
    smoothing: Option<f64>,
    long_window: Option<f64>,
    window_ms: Option<f64>,
}

/// `[aimd]` of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileAimd {
    initial: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    backoff: Option<f64>,
    timeout_ms: Option<f64>,
}

fn secs(name: &str, v: f64) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "--{name} must be a positive number of seconds, got {v}"
        ))
    }
}

fn millis(name: &str, v: f64) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v < 1e12 {
        Ok(Duration::from_secs_f64(v / 1000.0))
    } else {
        Err(format!(
            "{name} must be a positive number of milliseconds, got {v}"
        ))
    }
}

fn overload_action(s: &str, retry_after_secs: u32) -> Result<OverloadAction, String> {
    match s {
        "reject" => Ok(OverloadAction::Reject503 { retry_after_secs }),
        "degrade" => Ok(OverloadAction::Degrade),
        _ => match s.strip_prefix("redirect:") {
            Some(url) if !url.is_empty() && !url.contains(['\r', '\n']) => {
                Ok(OverloadAction::Redirect(url.to_owned()))
            }
            _ => Err(format!(
                "--overload-action must be reject, redirect:URL or degrade, got `{s}`"
            )),
        },
    }
}

/// What `seda serve` runs: the server's configuration, the root, the shutdown grace
/// period, and the overload control of the dynamic stages.
#[derive(Debug)]
struct Settings {
    cfg: ServerConfig,
    root: Option<PathBuf>,
    grace: Duration,
    overload: OverloadControl,
    bottleneck: Option<Duration>,
    bottleneck_passes: Option<u64>,
    agent_listen: Option<SocketAddr>,
    agent_cfg: AgentConfig,
}

/// The overload settings, flags over the file.
fn resolve_overload(
    args: &ServeArgs,
    file: &FileSettings,
) -> Result<(OverloadControl, Option<Duration>), String> {
    let mut oc = OverloadControl::default();
    let bottleneck = args
        .bottleneck_ms
        .or(file.bottleneck_ms)
        .map(|v| millis("--bottleneck-ms", v))
        .transpose()?;
    oc.rt_target = args
        .rt_target_ms
        .or(file.rt_target_ms)
        .map(|v| millis("--rt-target-ms", v))
        .transpose()?;
    if let Some(v) = &file.class_targets_ms {
        oc.class_targets = v
            .iter()
            .map(|&t| millis("class-targets-ms", t))
            .collect::<Result<_, _>>()?;
    }
    oc.admission = match (args.admission, &file.admission) {
        (Some(a), _) => Some(a),
        (None, Some(s)) => Some(s.parse::<Admission>()?),
        (None, None) => None,
    };
    if let Some(n) = args.queue_threshold.or(file.queue_threshold) {
        if n == 0 {
            return Err("--queue-threshold must be at least 1".into());
        }
        oc.queue_threshold = n;
    }
    if let Some(v) = args.codel_target_ms.or(file.codel_target_ms) {
        oc.codel.target = millis("--codel-target-ms", v)?;
    }
    if let Some(v) = args.codel_interval_ms.or(file.codel_interval_ms) {
        oc.codel.interval = millis("--codel-interval-ms", v)?;
    }
    if let Some(c) = &file.classes {
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
    if let Some(h) = args.class_header.as_ref().or(file.class_header.as_ref()) {
        oc.classes.header = Some(h.clone());
    }
    for h in &file.handler {
        if oc.handlers.iter().any(|o| o.name == h.name) {
            return Err(format!("[[handler]] `{}` appears twice", h.name));
        }
        oc.handlers.push(HandlerTargets {
            name: h.name.clone(),
            rt_target: h
                .rt_target_ms
                .map(|v| millis("rt-target-ms", v))
                .transpose()?,
            class_targets: h
                .class_targets_ms
                .iter()
                .map(|&t| millis("class-targets-ms", t))
                .collect::<Result<_, _>>()?,
        });
    }
    if let Some(r) = &file.response_time {
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
    if let Some(g) = &file.gradient {
        let d = GradientLimitConfig::default();
        oc.gradient = GradientLimitConfig {
            initial: g.initial.unwrap_or(d.initial),
            min: g.min.unwrap_or(d.min),
            max: g.max.unwrap_or(d.max),
            tolerance: g.tolerance.unwrap_or(d.tolerance),
            smoothing: g.smoothing.unwrap_or(d.smoothing),
            long_window: g.long_window.unwrap_or(d.long_window),
            window: g
                .window_ms
                .map(|v| millis("[gradient] window-ms", v))
                .transpose()?
                .unwrap_or(d.window),
        };
    }
    if let Some(a) = &file.aimd {
        let timeout = match a.timeout_ms {
            Some(v) => millis("[aimd] timeout-ms", v)?,
            None => oc.rt_target.unwrap_or(Duration::from_secs(1)),
        };
        let d = AimdLimitConfig::with_timeout(timeout);
        oc.aimd = Some(AimdLimitConfig {
            initial: a.initial.unwrap_or(d.initial),
            min: a.min.unwrap_or(d.min),
            max: a.max.unwrap_or(d.max),
            backoff: a.backoff.unwrap_or(d.backoff),
            timeout,
        });
    }
    let retry_after_secs = args.retry_after_secs.or(file.retry_after_secs).unwrap_or(1);
    if let Some(a) = args
        .overload_action
        .as_ref()
        .or(file.overload_action.as_ref())
    {
        oc.on_overload = overload_action(a, retry_after_secs)?;
    } else {
        oc.on_overload = OverloadAction::Reject503 { retry_after_secs };
    }
    oc.degrade = args.degrade || file.degrade.unwrap_or(false);
    if oc.degrade && bottleneck.is_none() {
        return Err("--degrade needs --bottleneck-ms (the handler it degrades)".into());
    }
    Ok((oc, bottleneck))
}

/// Merges the file's settings under the flags.
fn resolve(args: ServeArgs) -> Result<Settings, String> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
            toml::from_str::<FileSettings>(&text).map_err(|e| {
                format!(
                    "config {}: {}",
                    path.display(),
                    e.message().replace('\n', " ")
                )
            })?
        }
        None => FileSettings::default(),
    };
    let mut cfg = ServerConfig::default();
    if let Some(v) = args.listen.or(file.listen) {
        cfg.listen = v;
    }
    if let Some(mb) = args.cache_mb.or(file.cache_mb) {
        cfg.cache_bytes = mb
            .checked_mul(1 << 20)
            .ok_or_else(|| format!("--cache-mb {mb} is too large"))?;
    }
    let (overload, bottleneck) = resolve_overload(&args, &file)?;
    let model = match (args.thread_model, file.thread_model) {
        (Some(m), _) => Some(m),
        (None, Some(s)) => Some(s.parse::<ThreadModel>()?),
        (None, None) => None,
    };
    if let Some(m) = model {
        cfg.thread_model = m;
    }
    if let Some(kb) = args.max_cached_file_kb.or(file.max_cached_file_kb) {
        cfg.max_cached_file = kb.saturating_mul(1024);
    }
    if let Some(s) = args.header_timeout.or(file.header_timeout) {
        cfg.header_timeout = secs("header-timeout", s)?;
    }
    if let Some(s) = args.idle_timeout.or(file.idle_timeout) {
        cfg.idle_timeout = secs("idle-timeout", s)?;
    }
    if let Some(n) = args.max_connections.or(file.max_connections) {
        cfg.max_connections = n;
    }
    if let Some(n) = args.event_loops.or(file.event_loops) {
        cfg.event_loops = n;
    }
    if let Some(n) = args.parse_threads.or(file.parse_threads) {
        cfg.parse_threads = n;
    }
    let handoff = match (args.handoff, &file.handoff) {
        (Some(h), _) => Some(h),
        (None, Some(s)) => Some(s.parse()?),
        (None, None) => None,
    };
    cfg.handoff = match handoff {
        Some(HandoffArg::Queued) => Handoff::Queued,
        Some(HandoffArg::Inline) | None => Handoff::Inline,
    };
    let admin = match (args.admin_listen, &file.admin_listen) {
        (Some(a), _) => a,
        (None, Some(s)) => s.parse()?,
        (None, None) => AdminListen::At(DEFAULT_ADMIN),
    };
    cfg.admin_listen = match admin {
        AdminListen::At(a) => Some(a),
        AdminListen::None => None,
    };
    if let Some(s) = args.send_timeout.or(file.send_timeout) {
        cfg.send_timeout = secs("send-timeout", s)?;
    }
    if let Some(n) = args.max_pipelined.or(file.max_pipelined) {
        if n == 0 || n > 4096 {
            return Err(format!("--max-pipelined must be in 1..=4096, got {n}"));
        }
        cfg.max_pipelined = n;
    }
    let dotfiles = match (args.dotfiles, &file.dotfiles) {
        (Some(d), _) => Some(d),
        (None, Some(s)) => Some(s.parse()?),
        (None, None) => None,
    };
    cfg.dotfiles = match dotfiles {
        Some(DotfilesArg::Serve) => Dotfiles::Serve,
        Some(DotfilesArg::Hide) | None => Dotfiles::Hide,
    };
    if let Some(mb) = args.path_cache_mb.or(file.path_cache_mb) {
        cfg.path_cache_bytes = mb
            .checked_mul(1 << 20)
            .ok_or_else(|| format!("--path-cache-mb {mb} is too large"))?;
    }
    match (args.file_io, &file.file_io) {
        (Some(f), _) => cfg.file_io = f,
        (None, Some(s)) => cfg.file_io = s.parse()?,
        (None, None) => {}
    }
    cfg.header_cache = !args.no_header_cache && file.header_cache.unwrap_or(true);
    cfg.retry_after_secs = args.retry_after_secs.or(file.retry_after_secs).unwrap_or(1);
    let grace = secs(
        "shutdown-grace",
        args.shutdown_grace.or(file.shutdown_grace).unwrap_or(10.0),
    )?;
    let bottleneck_passes = args.bottleneck_passes.or(file.bottleneck_passes);
    match (bottleneck_passes, bottleneck) {
        (Some(0), _) => return Err("--bottleneck-passes must be at least 1".into()),
        (Some(_), None) => {
            return Err("--bottleneck-passes needs --bottleneck-ms (the handler it sets)".into());
        }
        _ => {}
    }
    let agent_listen = args.agent_listen.or(file.agent_listen);
    let agent_cfg = AgentConfig {
        drain_refused: args.agent_drain_refused.or(file.agent_drain_refused),
        ..AgentConfig::default()
    };
    agent_cfg
        .validate()
        .map_err(|e| format!("--agent-drain-refused: {e}"))?;
    if agent_cfg.drain_refused.is_some() && agent_listen.is_none() {
        return Err("--agent-drain-refused needs --agent-listen".into());
    }
    Ok(Settings {
        cfg,
        root: args.root.or(file.root),
        grace,
        overload,
        bottleneck,
        bottleneck_passes,
        agent_listen,
        agent_cfg,
    })
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> Result<(), String> {
    let Settings {
        mut cfg,
        root,
        grace,
        overload,
        bottleneck,
        bottleneck_passes,
        agent_listen,
        agent_cfg,
    } = resolve(args)?;
    let demo = match root {
        Some(root) => {
            cfg.root = root;
            None
        }
        None => {
            let site =
                DemoSite::create().map_err(|e| format!("cannot write the demo site: {e}"))?;
            cfg.root = site.path().to_owned();
            cfg.handlers.push(DemoSite::hello_handler());
            Some(site)
        }
    };
    for w in warnings(&cfg, &overload, bottleneck) {
        eprintln!("seda serve: warning: {w}");
    }
    let calibrated = mount_overload(&mut cfg, &overload, bottleneck, bottleneck_passes)?;
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("cannot install signal handler: {e}"))?;
    let root_shown = if demo.is_some() {
        "built-in demo site".to_owned()
    } else {
        cfg.root.display().to_string()
    };
    let server = Server::start(cfg).map_err(|e| e.to_string())?;
    announce!("listening on http://{}", server.local_addr());
    if let Some(admin) = server.admin_addr() {
        announce!("admin at http://{admin}/_seda/");
    }
    if let (Some(ms), Some(passes)) = (bottleneck, calibrated) {
        let how = if bottleneck_passes.is_some() {
            "set by --bottleneck-passes to"
        } else {
            "calibrated to"
        };
        announce!(
            "bottleneck: {} ms {how} {passes} iterations",
            ms.as_secs_f64() * 1000.0
        );
    }
    let agent = match agent_listen {
        Some(addr) => {
            let pages = server.admin_builder();
            let agent = AgentServer::start(addr, agent_cfg, move || pages.stats())
                .map_err(|e| format!("agent-check: {e}"))?;
            announce!("agent-check at {}", agent.local_addr());
            Some(agent)
        }
        None => None,
    };
    let _ = std::io::stdout().flush();
    eprintln!("seda serve: serving {root_shown}; Ctrl-C to stop");
    // Block until SIGINT or SIGTERM (no polling: shutdown starts as the signal lands).
    let _ = signals.forever().next();
    eprintln!(
        "seda serve: shutting down (grace {:.1} s)",
        grace.as_secs_f64()
    );
    // A load balancer stops sending new requests while those in flight finish.
    if let Some(a) = &agent {
        a.set_draining(true);
    }
    let report = server.shutdown(grace);
    drop(agent);
    eprintln!(
        "seda serve: stopped; requests drained: {}, connections cut: {}, events unfinished: {}",
        report.requests_drained,
        report.connections_cut,
        report.runtime.unfinished()
    );
    drop(demo);
    Ok(())
}

#[cfg(test)]
mod tests;

//! `seda serve`'s configuration: one struct, three layers, one validation.
//!
//! [`ServeConfig`] is every setting of the server, spelled the same as a flag
//! (`--cache-mb 64`) and as a key of the TOML file given with `--config`
//! (`cache-mb = 64`); a few (tables such as `[classes]`, `[[handler]]`) exist only in
//! the file. [`ServeConfig::load`] layers them with `figment`: **flags over the file
//! over the defaults** ([`ServeConfig::defaults`]). [`ServeConfig::validate`] is the
//! one place that checks the result and turns it into the typed [`Settings`] the
//! server runs with; a value that cannot work is a one-line error naming its key.
//! A reload (SIGHUP) does the same again: the same flags over the file as it is now.
//!
//! ```toml
//! listen = "0.0.0.0:8080"
//! root = "/srv/www"
//! cache-mb = 64
//! rt-target-ms = 500
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
//! [[route]]                              # the front door (also --proxy PREFIX=URL,...)
//! prefix = "/api"
//! upstreams = ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]
//! rt-target-ms = 200                     # this route's p90 target
//! class-header = "X-Class"
//! max-body-kb = 10240
//! timeout-ms = 5000                      # to the response head [default: proxy-timeout-ms]
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format as _, Serialized, Toml};
use seda::ThreadModel;
use seda_http::proto::Dotfiles;
use seda_http::{
    AccessLogConfig, AccessLogFormat, Admission, AgentConfig, DEFAULT_PROXY_TIMEOUT, FileIo,
    Handoff, OverloadAction, OverloadControl, ProxyRoute, ServerConfig, TlsListen,
};
use seda_io::TlsKeys;

use serde::{Deserialize, Serialize};

use super::file::{FileAimd, FileClasses, FileGradient, FileHandler, FileResponseTime, FileRoute};
use super::words::{AdminListen, DotfilesArg, HandoffArg, TlsStageArg, Word};
use crate::error::CliError;

/// Every setting of `seda serve`: the flags, and the keys of the TOML file. Every
/// field is optional: a layer that does not set it leaves the layer below in force.
#[derive(Clone, Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServeConfig {
    /// Address to listen on [default: 127.0.0.1:8080; port 0 picks a free port].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Directory to serve [default: the built-in demo site].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    /// Page-cache capacity in MiB [default: 200].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_mb: Option<u64>,
    /// Thread model of the stages: per-stage or shared [default: per-stage].
    #[arg(long, value_name = "per-stage|shared")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_model: Option<Word<ThreadModel>>,
    /// Files larger than this many KiB stream with sendfile instead of entering the
    /// page cache [default: 1024].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cached_file_kb: Option<u64>,
    /// Seconds a client has to send a request once it started [default: 10].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_timeout: Option<f64>,
    /// Seconds an idle keep-alive connection is kept [default: 30].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<f64>,
    /// Most open connections, on each listener (plain, and TLS with its handshakes);
    /// a cap the open-files limit cannot hold beside the server's own descriptors is
    /// refused at start [default: 10000, or what the limit leaves, with a warning].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Socket event loops [default: one per core].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_loops: Option<usize>,
    /// System interface of the socket loops: epoll, uring (io_uring; an error where
    /// the kernel lacks it) or auto (the faster one on this machine where io_uring
    /// is available, else epoll) [default: auto]. `seda serve` says on stderr which
    /// runs and why.
    #[arg(long, value_name = "auto|epoll|uring")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<Word<seda_http::IoBackend>>,
    /// Most threads of the HttpParse stage [default: 2].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parse_threads: Option<usize>,
    /// How the CPU-bound stages hand events on: inline (the runtime runs the next
    /// stage on the same thread when its queue is empty) or queued [default: inline].
    #[arg(long, value_name = "inline|queued")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Word<HandoffArg>>,
    /// Address of the admin listener (/_seda/stats, graph, metrics), or `none` to
    /// have none [default: 127.0.0.1 on a free port, printed at start as `admin at
    /// http://ADDR/_seda/`; never on the service port].
    #[arg(long, value_name = "ADDR|none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<Word<AdminListen>>,
    /// Seconds a client may take none of its pending response before it is
    /// disconnected [default: 60].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_timeout: Option<f64>,
    /// Most requests of one connection in flight; past it the connection is not read
    /// until half are answered [default: 16].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pipelined: Option<usize>,
    /// Serve files and directories whose name starts with a dot: hide (404) or serve
    /// [default: hide; `.well-known` is always served].
    #[arg(long, value_name = "hide|serve")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dotfiles: Option<Word<DotfilesArg>>,
    /// Capacity of the pathname-translation cache in MiB; 0 turns it off, so every
    /// request is translated (decode, canonicalize, stat, open) [default: 16].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_cache_mb: Option<u64>,
    /// Where a cache miss's blocking calls run: `helper` (CacheMiss's pool and the
    /// file helper: Flash's AMPED) or `inline` (on the event loop that found the
    /// miss, which waits for the disk: Flash's SPED, for comparison) [default: helper].
    #[arg(long, value_name = "helper|inline")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_io: Option<Word<FileIo>>,
    /// Format every file response's header instead of keeping it with the file's
    /// translation (turns off Flash's response-header cache). In the file:
    /// `header-cache = false`.
    #[arg(
        long = "no-header-cache",
        num_args = 0,
        default_missing_value = "false"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_cache: Option<bool>,
    /// Seconds to let requests in flight finish on SIGINT/SIGTERM [default: 10].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_grace: Option<f64>,
    /// Mount the bottleneck handler at /bottleneck, calibrated to about this many
    /// milliseconds of CPU per request.
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bottleneck_ms: Option<f64>,
    /// Checksum passes per bottleneck request instead of calibrating (the K that
    /// `bottleneck: N ms calibrated to K iterations` printed), so that several
    /// servers do the same work.
    #[arg(long, value_name = "K")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bottleneck_passes: Option<u64>,
    /// 90th-percentile response-time target of every dynamic stage, milliseconds
    /// (selects the delay-budget admission policy unless --admission says).
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rt_target_ms: Option<f64>,
    /// p90 target per class, milliseconds, index = class (file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class_targets_ms: Option<Vec<f64>>,
    /// Admission policy of every dynamic stage: delay-budget, response-time (the
    /// USITS'03 controller), multiclass, codel, gradient, aimd, queue-threshold or
    /// none [default: delay-budget with a target (multiclass with per-class
    /// targets), else none].
    #[arg(long, value_name = "POLICY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<Word<Admission>>,
    /// Threshold of --admission queue-threshold, requests [default: 100].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_threshold: Option<usize>,
    /// Target queueing delay of --admission codel, milliseconds [default: 5].
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codel_target_ms: Option<f64>,
    /// Interval of --admission codel, milliseconds [default: 100].
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codel_interval_ms: Option<f64>,
    /// Class of a request = integer value of this header (missing or bad: 0).
    #[arg(long, value_name = "NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class_header: Option<String>,
    /// Automatic service degradation of the bottleneck handler (needs a target).
    #[arg(long, num_args = 0, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degrade: Option<bool>,
    /// What a refused request gets: reject (503 + Retry-After), redirect:URL (302), or
    /// degrade (the handler's cheap answer) [default: reject].
    #[arg(long, value_name = "ACTION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overload_action: Option<String>,
    /// Retry-After of a 503, seconds [default: 1].
    #[arg(long, value_name = "SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u32>,
    /// `[classes]`: where a request's class comes from (file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<FileClasses>,
    /// `[[handler]]`: per-handler targets (file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub handler: Vec<FileHandler>,
    /// Forward requests under PREFIX to the upstream servers (round robin, passive
    /// health), through a stage of its own with the server's admission control;
    /// repeatable, e.g. `--proxy /api=http://127.0.0.1:9000,http://127.0.0.1:9001`.
    #[arg(long, value_name = "PREFIX=URL[,URL...]")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub proxy: Vec<String>,
    /// Time a proxy route waits for its upstream's response head (and the longest
    /// silence of a streaming body), milliseconds; past it the client gets 504
    /// [default: 30000].
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_timeout_ms: Option<f64>,
    /// `[[route]]`: proxy routes with settings of their own (file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub route: Vec<FileRoute>,
    /// `[response-time]`: the USITS'03 controller's parameters (file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_time: Option<FileResponseTime>,
    /// `[gradient]` (file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradient: Option<FileGradient>,
    /// `[aimd]` (file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aimd: Option<FileAimd>,
    /// Also serve HTTPS on this address (HTTP/1.1 over TLS 1.2/1.3, ALPN http/1.1,
    /// session resumption); needs --tls-cert and --tls-key [default: none].
    #[arg(long, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain of the TLS listener, leaf first (re-read on SIGHUP).
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the TLS listener (re-read on SIGHUP).
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// Seconds a TLS handshake may take before the connection is closed [default: 10].
    #[arg(long, value_name = "SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_handshake_timeout: Option<f64>,
    /// Most TLS handshakes in progress; more connections are closed at once
    /// [default: 1024].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_max_handshakes: Option<usize>,
    /// Where TLS handshakes and decryption run: `pool` (a stage with threads of its
    /// own behind a queue) or `inline` (on the socket loops, when the stage's queue
    /// is empty) [default: pool].
    #[arg(long, value_name = "pool|inline")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_stage: Option<Word<TlsStageArg>>,
    /// Write an access log to this file: one line per response, by a stage of its
    /// own fed without waiting (a full queue drops lines and counts them); SIGUSR1
    /// reopens the file (logrotate) [default: none].
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<PathBuf>,
    /// Access log lines: combined (nginx's, plus request time and the stage that
    /// answered) or json [default: combined].
    #[arg(long, value_name = "combined|json")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log_format: Option<Word<AccessLogFormat>>,
    /// Lines the access log's queue holds before it drops lines [default: 16384].
    #[arg(long, value_name = "LINES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log_queue: Option<usize>,
    /// Answer HAProxy's agent-check on this address with the admission state
    /// (`ready N%` from the admitted fraction and p90 vs target, `drain` when shutting
    /// down) [default: off].
    #[arg(long, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_listen: Option<SocketAddr>,
    /// Also say `drain` while a stage refuses more than this fraction (0-1] of its
    /// arrivals [default: never; refusals lower the weight: a whole fleet draining at
    /// once would leave HAProxy no server].
    #[arg(long, value_name = "FRACTION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_drain_refused: Option<f64>,
}

/// A configuration that cannot work: one line, naming the key (or the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl From<String> for ConfigError {
    fn from(s: String) -> Self {
        ConfigError(s)
    }
}

impl From<&str> for ConfigError {
    fn from(s: &str) -> Self {
        ConfigError(s.to_owned())
    }
}

impl From<seda_http::RouteError> for ConfigError {
    fn from(e: seda_http::RouteError) -> Self {
        ConfigError(e.to_string())
    }
}

/// Turns figment's errors (one per bad key, some spanning lines) into one line:
/// `config FILE: KEY: what is wrong`.
fn one_line(file: &Path, err: figment::Error) -> ConfigError {
    let parts: Vec<String> = err
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let what = e.kind.to_string();
            let what = what.split_whitespace().collect::<Vec<_>>().join(" ");
            if key.is_empty() {
                what
            } else {
                format!("{key}: {what}")
            }
        })
        .collect();
    ConfigError(format!("config {}: {}", file.display(), parts.join("; ")))
}

impl ServeConfig {
    /// The bottom layer: the value of every setting that has one when neither a flag
    /// nor the file sets it (taken from the library's own defaults, so the two never
    /// disagree). Settings whose absence means "off" stay `None`.
    pub fn defaults() -> ServeConfig {
        let d = ServerConfig::default();
        let oc = OverloadControl::default();
        fn word<T: FromStr<Err: Into<CliError>>>(s: &str) -> Option<Word<T>> {
            s.parse().ok()
        }
        ServeConfig {
            listen: Some(d.listen),
            cache_mb: Some(d.cache_bytes >> 20),
            thread_model: word(d.thread_model.as_str()),
            max_cached_file_kb: Some(d.max_cached_file >> 10),
            header_timeout: Some(d.header_timeout.as_secs_f64()),
            idle_timeout: Some(d.idle_timeout.as_secs_f64()),
            // Unset, the server takes the library's default or, under a lower
            // open-files limit, what the limit leaves (with a warning); set, a value
            // the limit cannot hold is an error (serve.rs).
            max_connections: None,
            event_loops: Some(d.event_loops),
            io: word(d.io.as_str()),
            parse_threads: Some(d.parse_threads),
            handoff: word("inline"),
            admin_listen: word("127.0.0.1:0"),
            send_timeout: Some(d.send_timeout.as_secs_f64()),
            max_pipelined: Some(d.max_pipelined),
            dotfiles: word("hide"),
            path_cache_mb: Some(d.path_cache_bytes >> 20),
            file_io: word("helper"),
            header_cache: Some(d.header_cache),
            shutdown_grace: Some(10.0),
            queue_threshold: Some(oc.queue_threshold),
            codel_target_ms: Some(oc.codel.target.as_secs_f64() * 1e3),
            codel_interval_ms: Some(oc.codel.interval.as_secs_f64() * 1e3),
            degrade: Some(false),
            overload_action: Some("reject".into()),
            retry_after_secs: Some(d.retry_after_secs),
            ..ServeConfig::default()
        }
    }

    /// Layers `flags` over the TOML file at `file` (if any) over the defaults.
    ///
    /// The file alone must be a valid configuration too (a bad value in it is an
    /// error even where a flag overrides it: `--check` must find it before a reload
    /// without that flag would).
    pub fn load(flags: &ServeConfig, file: Option<&Path>) -> Result<ServeConfig, ConfigError> {
        let mut layers = Figment::from(Serialized::defaults(ServeConfig::defaults()));
        if let Some(path) = file {
            Figment::from(Toml::file_exact(path))
                .extract::<ServeConfig>()
                .map_err(|e| one_line(path, e))?;
            layers = layers.merge(Toml::file_exact(path));
        }
        layers
            .merge(Serialized::defaults(flags))
            .extract()
            .map_err(|e| one_line(file.unwrap_or(Path::new("(flags)")), e))
    }

    /// Checks every setting and returns what the server runs with. The one place
    /// that decides whether a configuration can work.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let mut cfg = ServerConfig::default();
        if let Some(v) = self.listen {
            cfg.listen = v;
        }
        if let Some(mb) = self.cache_mb {
            cfg.cache_bytes = mb
                .checked_mul(1 << 20)
                .ok_or_else(|| format!("cache-mb {mb} is too large"))?;
        }
        if let Some(m) = &self.thread_model {
            cfg.thread_model = m.get();
        }
        if let Some(kb) = self.max_cached_file_kb {
            cfg.max_cached_file = kb.saturating_mul(1024);
        }
        if let Some(s) = self.header_timeout {
            cfg.header_timeout = secs("header-timeout", s)?;
        }
        if let Some(s) = self.idle_timeout {
            cfg.idle_timeout = secs("idle-timeout", s)?;
        }
        if let Some(n) = self.max_connections {
            cfg.max_connections = n;
        }
        if let Some(n) = self.event_loops {
            cfg.event_loops = n;
        }
        if let Some(io) = &self.io {
            cfg.io = io.get();
        }
        if let Some(n) = self.parse_threads {
            cfg.parse_threads = n;
        }
        cfg.handoff = match self.handoff.as_ref().map(Word::get) {
            Some(HandoffArg::Queued) => Handoff::Queued,
            Some(HandoffArg::Inline) | None => Handoff::Inline,
        };
        cfg.admin_listen = match self.admin_listen.as_ref().map(Word::get) {
            Some(AdminListen::At(a)) => Some(a),
            Some(AdminListen::None) | None => None,
        };
        if let Some(s) = self.send_timeout {
            cfg.send_timeout = secs("send-timeout", s)?;
        }
        if let Some(n) = self.max_pipelined {
            if n == 0 || n > 4096 {
                return Err(format!("max-pipelined must be in 1..=4096, got {n}").into());
            }
            cfg.max_pipelined = n;
        }
        cfg.dotfiles = match self.dotfiles.as_ref().map(Word::get) {
            Some(DotfilesArg::Serve) => Dotfiles::Serve,
            Some(DotfilesArg::Hide) | None => Dotfiles::Hide,
        };
        if let Some(mb) = self.path_cache_mb {
            cfg.path_cache_bytes = mb
                .checked_mul(1 << 20)
                .ok_or_else(|| format!("path-cache-mb {mb} is too large"))?;
        }
        if let Some(f) = &self.file_io {
            cfg.file_io = f.get();
        }
        cfg.header_cache = self.header_cache.unwrap_or(true);
        cfg.tls = self.tls()?;
        cfg.access_log = match &self.access_log {
            Some(path) => {
                let mut log = AccessLogConfig::new(path);
                if let Some(f) = &self.access_log_format {
                    log.format = f.get();
                }
                if let Some(n) = self.access_log_queue {
                    if n == 0 {
                        return Err("access-log-queue must be at least 1".into());
                    }
                    log.queue = n;
                }
                if path.as_os_str().is_empty() || path.is_dir() {
                    return Err(format!("access-log {}: not a file", path.display()).into());
                }
                Some(log)
            }
            None if self.access_log_format.is_some() || self.access_log_queue.is_some() => {
                return Err("access-log-format and access-log-queue need access-log".into());
            }
            None => None,
        };
        cfg.retry_after_secs = self.retry_after_secs.unwrap_or(1);
        let grace = secs("shutdown-grace", self.shutdown_grace.unwrap_or(10.0))?;
        let (overload, bottleneck) = self.overload()?;
        let bottleneck_passes = self.bottleneck_passes;
        match (bottleneck_passes, bottleneck) {
            (Some(0), _) => return Err("bottleneck-passes must be at least 1".into()),
            (Some(_), None) => {
                return Err("bottleneck-passes needs bottleneck-ms (the handler it sets)".into());
            }
            _ => {}
        }
        let agent_cfg = AgentConfig::default().with_drain_refused(self.agent_drain_refused);
        agent_cfg
            .validate()
            .map_err(|e| format!("agent-drain-refused: {e}"))?;
        if agent_cfg.drain_refused.is_some() && self.agent_listen.is_none() {
            return Err("agent-drain-refused needs agent-listen".into());
        }
        // The handlers that will be mounted: the demo's without a root, the
        // bottleneck if asked for. Per-handler targets must name one of them.
        let mut names = Vec::new();
        if self.root.is_none() {
            names.push("hello");
        }
        if bottleneck.is_some() {
            names.push("bottleneck");
            if overload.degrade {
                overload
                    .quality_for("bottleneck")
                    .map_err(|e| e.to_string())?;
            }
        }
        overload.validate(names).map_err(|e| e.to_string())?;
        cfg.proxies = self.routes(&overload)?;
        Ok(Settings {
            cfg,
            root: self.root.clone(),
            grace,
            overload,
            bottleneck,
            bottleneck_passes,
            agent_listen: self.agent_listen,
            agent_cfg,
            max_connections_set: self.max_connections.is_some(),
        })
    }

    /// The proxy routes of `--proxy` and `[[route]]`, with the overload control
    /// applied to each.
    fn routes(&self, overload: &OverloadControl) -> Result<Vec<ProxyRoute>, ConfigError> {
        let timeout = self
            .proxy_timeout_ms
            .map(|v| millis("proxy-timeout-ms", v))
            .transpose()?
            .unwrap_or(DEFAULT_PROXY_TIMEOUT);
        let mut routes = Vec::new();
        for flag in &self.proxy {
            routes.push(ProxyRoute::parse_flag(flag)?.with_timeout(timeout));
        }
        for r in &self.route {
            let urls: Vec<&str> = r.upstreams.iter().map(String::as_str).collect();
            let mut route = ProxyRoute::new(&r.prefix, &urls)
                .map_err(|e| format!("[[route]] {}: {e}", r.prefix))?
                .with_timeout(timeout);
            if let Some(v) = r.rt_target_ms {
                route = route.with_rt_target(millis("[[route]] rt-target-ms", v)?);
            }
            if let Some(h) = &r.class_header {
                route = route.with_class_header(h);
            }
            if let Some(kb) = r.max_body_kb {
                route = route.with_max_body(kb.saturating_mul(1024));
            }
            if let Some(v) = r.timeout_ms {
                route = route.with_timeout(millis("[[route]] timeout-ms", v)?);
            }
            routes.push(route);
        }
        let mut seen = std::collections::HashSet::new();
        routes
            .into_iter()
            .map(|r| {
                if !seen.insert(r.prefix.clone()) {
                    return Err(format!("two proxy routes at {}", r.prefix).into());
                }
                r.validate()?;
                overload
                    .apply_route(r)
                    .map_err(|e| ConfigError::from(e.to_string()))
            })
            .collect()
    }

    /// The TLS listener: its address, certificate and key (loaded and checked here,
    /// so `--check` and a reload find a bad file), and its bounds.
    fn tls(&self) -> Result<Option<TlsListen>, ConfigError> {
        let (listen, cert, key) = match (self.tls_listen, &self.tls_cert, &self.tls_key) {
            (None, None, None) => {
                if self.tls_handshake_timeout.is_some()
                    || self.tls_max_handshakes.is_some()
                    || self.tls_stage.is_some()
                {
                    return Err(
                        "tls-handshake-timeout, tls-max-handshakes and tls-stage need tls-listen"
                            .into(),
                    );
                }
                return Ok(None);
            }
            (Some(l), Some(c), Some(k)) => (l, c, k),
            (Some(_), _, _) => return Err("tls-listen needs tls-cert and tls-key".into()),
            (None, _, _) => return Err("tls-cert and tls-key need tls-listen".into()),
        };
        let keys = TlsKeys::load(cert, key).map_err(|e| format!("tls: {e}"))?;
        let mut t = TlsListen::new(listen, keys);
        if let Some(s) = self.tls_handshake_timeout {
            t.handshake_timeout = secs("tls-handshake-timeout", s)?;
        }
        if let Some(n) = self.tls_max_handshakes {
            if n == 0 {
                return Err("tls-max-handshakes must be at least 1".into());
            }
            t.max_handshakes = n;
        }
        t.inline = self.tls_stage.as_ref().map(Word::get) == Some(TlsStageArg::Inline);
        if listen.port() != 0 && Some(listen) == self.listen {
            return Err(format!("tls-listen {listen} is also the plain listener's address").into());
        }
        Ok(Some(t))
    }
}

/// What `seda serve` runs with: the server's configuration, the root, the shutdown
/// grace period, and the overload control of the dynamic stages. Made only by
/// [`ServeConfig::validate`].
#[derive(Debug)]
pub struct Settings {
    pub cfg: ServerConfig,
    pub root: Option<PathBuf>,
    pub grace: Duration,
    pub overload: OverloadControl,
    pub bottleneck: Option<Duration>,
    pub bottleneck_passes: Option<u64>,
    pub agent_listen: Option<SocketAddr>,
    pub agent_cfg: AgentConfig,
    /// `max-connections` was set (flag or file): if the open-files limit cannot
    /// hold it, starting fails; the default is lowered to what fits instead.
    pub max_connections_set: bool,
}

/// `v` seconds, in `0.001..1e9` (shorter rounds to nothing: `1e-300` would be a
/// zero timeout; longer is a typo); the error quotes the value as written (not a
/// 301-digit expansion).
fn secs(name: &str, v: f64) -> Result<Duration, ConfigError> {
    if (0.001..1e9).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!(
            "{name} must be a number of seconds from 0.001 to 1e9, got {}",
            shown(v)
        )
        .into())
    }
}

/// `v` milliseconds, in `0.001..1e12`.
pub(super) fn millis(name: &str, v: f64) -> Result<Duration, ConfigError> {
    if (0.001..1e12).contains(&v) {
        Ok(Duration::from_secs_f64(v / 1000.0))
    } else {
        Err(format!(
            "{name} must be a number of milliseconds from 0.001 to 1e12, got {}",
            shown(v)
        )
        .into())
    }
}

/// A number as a person wrote it, near enough: `1e300` and `1e-300`, not their
/// 301 digits; `-1`, `2.5` and `2000000000` as they are.
fn shown(v: f64) -> String {
    let plain = v.to_string();
    if plain.len() > 20 {
        format!("{v:e}")
    } else {
        plain
    }
}

pub(super) fn overload_action(
    s: &str,
    retry_after_secs: u32,
) -> Result<OverloadAction, ConfigError> {
    match s {
        "reject" => Ok(OverloadAction::Reject503 { retry_after_secs }),
        "degrade" => Ok(OverloadAction::Degrade),
        _ => match s.strip_prefix("redirect:") {
            Some(url) if !url.is_empty() && !url.contains(['\r', '\n']) => {
                Ok(OverloadAction::Redirect(url.to_owned()))
            }
            _ => Err(
                format!("overload-action must be reject, redirect:URL or degrade, got `{s}`")
                    .into(),
            ),
        },
    }
}

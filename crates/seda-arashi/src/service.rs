//! The running service: Haboob with one dynamic stage per request type, the static
//! stages for the logo and stylesheet, and the SQLite store (USITS'03 Fig. 1).
//!
//! # Stage graph
//! `accept -> read -> HttpParse -> HttpRecv -> handler:<type>` (nine request stages,
//! each with its own queue, admission policy and thread pool) `-> HttpSend`, and
//! `HttpRecv -> PageCache / CacheMiss -> HttpSend` for `/static/*` and `/`. HttpRecv,
//! the first stage after parsing, classifies each request (its priority class, from
//! [`OverloadControl::classes`]) as it routes it.
//!
//! # Overload control
//! - [`ControlScope::PerStage`] (the paper's design): every request stage gets a
//!   fresh admission policy of [`OverloadControl`] with its own p90 target (a
//!   per-type target in `OverloadControl::handlers`, else the global one).
//! - [`ControlScope::Single`] (USITS'03 Fig. 11's alternative): one policy instance,
//!   shared by all request stages, sees every completion and admits or rejects every
//!   request whatever its type: a single controller in front of the service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use seda::ThreadModel;
use seda::control::ThreadPoolConfig;
use seda_http::{
    Admission, HandlerRegistration, OverloadControl, Server, ServerConfig, ServerShutdown,
};

use crate::data::DataDir;
use crate::error::{ArashiError, UnknownScope};
use crate::seed::SeedPlan;
use crate::stages::RequestType;
use crate::store::{MailStore, SqliteStore};
use crate::web::App;
use crate::web::assets::write_www;

/// The response-time controller's parameters for Arashi's stages: the paper's law
/// and gains (USITS'03 Fig. 4) with the rate scaled to this service. Our request
/// stages serve hundreds to a few thousand requests a second where the paper's
/// served tens, so the paper's initial rate (100/s) and additive step (2/s per
/// update) would hold a stage far under its capacity for minutes and reject at light
/// load. Here the initial rate is 1,000/s and the additive step 20/s; decrease
/// (divide by 1.2 while over target) is the paper's.
pub fn controller_config(target: Duration) -> seda::admission::ResponseTimeConfig {
    let mut c = seda::admission::ResponseTimeConfig::with_target(target);
    c.initial_rate = 1000.0;
    c.adj_i = 20.0;
    c
}

/// Where admission control sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ControlScope {
    /// One controller per request stage (USITS'03 4.1).
    #[default]
    PerStage,
    /// One controller shared by all request stages (USITS'03 Fig. 11).
    Single,
}

impl ControlScope {
    /// Name on the command line: `per-stage`, `single`.
    pub fn name(self) -> &'static str {
        match self {
            ControlScope::PerStage => "per-stage",
            ControlScope::Single => "single",
        }
    }

    /// The scope named `s`.
    pub fn parse(s: &str) -> Result<ControlScope, UnknownScope> {
        match s {
            "per-stage" => Ok(ControlScope::PerStage),
            "single" => Ok(ControlScope::Single),
            _ => Err(UnknownScope(s.to_owned())),
        }
    }
}

/// Configuration of [`Arashi`]. `#[non_exhaustive]`: build it from
/// [`ArashiConfig::default`] and the `with_*` setters (or set its public fields).
///
/// # Examples
///
/// ```
/// use seda_arashi::{ArashiConfig, SeedPlan};
///
/// let cfg = ArashiConfig::default()
///     .with_listen("127.0.0.1:0".parse().unwrap())
///     .with_data("arashi-data".into())
///     .with_seed(SeedPlan::default().with_users(8))
///     .with_stage_threads(2);
/// assert_eq!((cfg.stage_threads, cfg.seed.users), (2, 8));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ArashiConfig {
    /// Address to listen on. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Data directory (seeded on first use).
    pub data: PathBuf,
    /// How to seed an empty data directory.
    pub seed: SeedPlan,
    /// Admission policy, targets, classes and overload action of the request stages.
    /// Default: no admission control.
    pub overload: OverloadControl,
    /// One controller per stage or one for all.
    pub scope: ControlScope,
    /// Most threads of each request stage's pool (>= 1). Default 4.
    pub stage_threads: usize,
    /// Queue capacity of each request stage. Default 1024.
    pub stage_capacity: usize,
    /// Thread model of Haboob's CPU-bound stages.
    pub thread_model: ThreadModel,
    /// The admin listener (`/_seda/stats`, `graph`, `metrics`), never on the service
    /// port; `None` for none. Default: loopback, a free port.
    pub admin_listen: Option<SocketAddr>,
}

crate::setters::setters!(ArashiConfig {
    with_listen: listen: SocketAddr,
    with_data: data: PathBuf,
    with_seed: seed: SeedPlan,
    with_overload: overload: OverloadControl,
    with_scope: scope: ControlScope,
    with_stage_threads: stage_threads: usize,
    with_stage_capacity: stage_capacity: usize,
    with_thread_model: thread_model: ThreadModel,
    with_admin_listen: admin_listen: Option<SocketAddr>,
});

impl Default for ArashiConfig {
    fn default() -> Self {
        ArashiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data: PathBuf::from("arashi-data"),
            seed: SeedPlan::default(),
            overload: OverloadControl::default(),
            scope: ControlScope::PerStage,
            stage_threads: 4,
            stage_capacity: 1024,
            thread_model: ThreadModel::PerStage,
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        }
    }
}

/// The running Arashi service.
#[derive(Debug)]
pub struct Arashi {
    server: Server,
    store: Arc<SqliteStore>,
    description: String,
}

/// The registrations of the request stages under `cfg`'s control.
fn registrations(cfg: &ArashiConfig, app: &App) -> Result<Vec<HandlerRegistration>, ArashiError> {
    if cfg.stage_threads == 0 {
        return Err(ArashiError::Config(
            "stage threads must be at least 1".into(),
        ));
    }
    let names: Vec<&str> = RequestType::ALL.iter().map(|t| t.name()).collect();
    cfg.overload.validate(names)?;
    let shared = match cfg.scope {
        ControlScope::PerStage => None,
        ControlScope::Single => cfg.overload.policy_for("arashi")?,
    };
    let without_policy = cfg.overload.clone().with_admission(Some(Admission::None));
    RequestType::ALL
        .into_iter()
        .map(|t| {
            let reg = HandlerRegistration::shared(&t.path(), t.handler(app.clone()))
                .name(t.name())
                .capacity(cfg.stage_capacity)
                .thread_pool(
                    ThreadPoolConfig::default()
                        .with_min_threads(1)
                        .with_max_threads(cfg.stage_threads)
                        .with_queue_threshold(10),
                );
            let reg = match &shared {
                None if cfg.scope == ControlScope::PerStage => cfg.overload.apply(reg),
                None => without_policy.apply(reg),
                Some(p) => without_policy
                    .apply(reg)
                    .map(|r| r.admission(Arc::clone(p))),
            };
            reg.map_err(ArashiError::from)
        })
        .collect()
}

impl Arashi {
    /// Opens (seeding if empty) the data directory, writes the static files and
    /// starts serving.
    pub fn start(cfg: ArashiConfig, log: &mut dyn FnMut(&str)) -> Result<Arashi, ArashiError> {
        let data = DataDir::new(&cfg.data);
        let (store, seeded) = data.open_or_seed(&cfg.seed, log)?;
        if let Some(s) = seeded {
            log(&format!(
                "seeded {} users, {} messages (Inbox sizes {}..{}) in {} s",
                s.users, s.messages, s.inbox_range.0, s.inbox_range.1, s.seconds
            ));
        }
        let description = DataDir::describe(&store);
        write_www(&data.www())
            .map_err(|e| ArashiError::io(format!("cannot write {}", data.www().display()), e))?;
        let store = Arc::new(store);
        let app = App {
            store: Arc::clone(&store) as Arc<dyn MailStore>,
        };
        let handlers = registrations(&cfg, &app)?;
        let server = Server::start(
            ServerConfig::default()
                .with_listen(cfg.listen)
                .with_root(data.www())
                .with_thread_model(cfg.thread_model)
                .with_handlers(handlers)
                .with_admin_listen(cfg.admin_listen),
        )?;
        Ok(Arashi {
            server,
            store,
            description,
        })
    }

    /// The address the service listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// `N users, X corpus`.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The store.
    pub fn store(&self) -> &Arc<SqliteStore> {
        &self.store
    }

    /// The admin listener's address, if it has one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.server.admin_addr()
    }

    /// The `/_seda/stats` document.
    pub fn stats_json(&self) -> String {
        self.server.stats_json()
    }

    /// The stats document (the request stages are `handler:<type>`).
    pub fn stats(&self) -> seda_http::StatsDoc {
        self.server.stats()
    }

    /// Graceful shutdown (see [`Server::shutdown`]).
    pub fn shutdown(self, grace: Duration) -> ServerShutdown {
        self.server.shutdown(grace)
    }
}

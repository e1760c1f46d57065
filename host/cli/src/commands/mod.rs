//! Runs each subcommand. Shared here: loading the configuration (file, then
//! environment and flags, validated once), opening the queue, and the
//! mapping of failures to exit codes.

mod admin;
mod bench;
mod check;
mod demo;
mod enqueue;
mod examples;
mod history;
mod schedules;
mod serve;

pub use crate::error::{usage, JobFailed, WaitTimedOut};
pub use examples::write_atomically as write_module;

use std::path::Path;

use boxcar_queue::{connect, Queue, Registry};

use crate::{
    cli::{Cli, Command},
    config::{Config, DEFAULT_DB},
};

/// The resolved configuration plus global flags.
pub struct Context {
    /// Validated configuration (file + flags).
    pub config: Config,
    /// The database URL in force.
    pub db: String,
    /// `--json`.
    pub json: bool,
}

impl Context {
    fn load(cli: &Cli) -> anyhow::Result<Self> {
        let config = match &cli.config {
            Some(path) => Config::load(path)?,
            None if Path::new("boxcar.toml").is_file() => Config::load(Path::new("boxcar.toml"))?,
            None => Config::default(),
        };
        let db = cli
            .db
            .clone()
            .or_else(|| config.db.clone())
            .unwrap_or_else(|| DEFAULT_DB.to_string());
        Ok(Self {
            config,
            db,
            json: cli.json,
        })
    }

    /// Opens (and migrates) the store and wraps it in a queue.
    pub async fn queue(&self) -> anyhow::Result<Queue> {
        let store = connect(&self.db).await?;
        let queue = Queue::new(store, self.config.queue.clone())?;
        Ok(queue)
    }

    /// A producer-side registry: types some live host serves (per the
    /// store's deployed types), configured `handled_elsewhere` types, and
    /// payload schemas from a local handlers directory when one is
    /// configured.
    pub async fn producer_registry(
        &self,
        queue: &Queue,
    ) -> anyhow::Result<std::sync::Arc<Registry>> {
        let registry = Registry::new();
        registry.declare_elsewhere(self.config.handled_elsewhere.iter().cloned());
        queue.refresh_known_types(&registry).await?;
        if let Some(dir) = &self.config.handlers {
            declare_local_schemas(&registry, dir);
        }
        Ok(registry)
    }
}

fn declare_local_schemas(registry: &Registry, dir: &Path) {
    for manifest in crate::deploy::scan::manifests(dir) {
        if let Some(validator) = &manifest.settings.payload_validator {
            for job_type in &manifest.job_types {
                registry.set_validator(job_type.clone(), validator.clone());
            }
        }
    }
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let context = Context::load(&cli)?;
    match cli.command {
        Command::Serve(args) => serve::run(context, args).await,
        Command::Enqueue(args) => enqueue::run(context, args).await,
        Command::Jobs(args) => admin::jobs(context, args).await,
        Command::Job { id } => admin::job(context, &id).await,
        Command::Logs(args) => history::logs(context, args).await,
        Command::Counts => admin::counts(context).await,
        Command::Cancel(args) => admin::cancel(context, args).await,
        Command::RetryFailed(args) => admin::retry_failed(context, args).await,
        Command::Prune(args) => admin::prune(context, args).await,
        Command::Handlers => admin::handlers(context).await,
        Command::Schedules(args) => schedules::run(context, args).await,
        Command::Migrate => admin::migrate(context).await,
        Command::Check(args) => check::run(context, args).await,
        Command::Examples { command } => examples::run(context, command),
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(context, args).await,
        Command::CompileComponent(_) => Err(usage(
            "compile-component is internal: boxcar runs it as a child process",
        )),
    }
}

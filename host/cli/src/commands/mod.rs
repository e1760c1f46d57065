//! Runs each subcommand. Shared here: loading the configuration (file, then
//! environment and flags, validated once), opening the queue, and the
//! mapping of failures to exit codes.

mod admin;
mod bench;
mod check;
mod enqueue;
mod examples;
mod schedules;
mod serve;

pub use examples::write_atomically as write_module;

use std::path::{Path, PathBuf};

use boxcar_queue::{connect, Queue, Registry};

use crate::{
    cli::{Cli, Command},
    config::{Config, DEFAULT_DB},
};

/// Bad usage or input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The job waited for did not succeed: exit code 3.
#[derive(Debug, thiserror::Error)]
#[error(
    "job {id} {status}: {}{}",
    crate::output::printable(message),
    code.as_ref().map(|c| format!(" (code {})", crate::output::printable(c))).unwrap_or_default()
)]
pub struct JobFailed {
    pub id: String,
    pub status: String,
    pub message: String,
    /// The handler's machine-readable error code, when it gave one.
    pub code: Option<String>,
}

/// A wait ran out: exit code 4.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WaitTimedOut(pub String);

/// The exit code for a failure.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<UsageError>().is_some()
        || error
            .downcast_ref::<crate::toml_file::FileError>()
            .is_some()
        || error.downcast_ref::<crate::deploy::DeployError>().is_some()
        || error.downcast_ref::<boxcar_queue::EnqueueError>().is_some()
        || matches!(
            error.downcast_ref::<boxcar_queue::QueueError>(),
            Some(boxcar_queue::QueueError::Enqueue(_))
        )
    {
        2
    } else if error.downcast_ref::<JobFailed>().is_some() {
        3
    } else if error.downcast_ref::<WaitTimedOut>().is_some() {
        4
    } else {
        1
    }
}

/// Shorthand for a usage error.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

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

    /// Opens (and migrates) the store and wraps it in a queue. A registry
    /// is attached that knows the types deployed anywhere (from the store's
    /// deploy records) plus configured ones, so enqueue can refuse unknown
    /// types from a process that runs no handlers.
    pub async fn queue(&self) -> anyhow::Result<Queue> {
        let store = connect(&self.db).await?;
        let queue = Queue::new(store, self.config.queue.clone())?;
        Ok(queue)
    }

    /// A producer-side registry: types deployed anywhere (per the store's
    /// deploy records), configured `handled_elsewhere` types, and payload
    /// schemas from a local handlers directory when one is configured.
    pub async fn producer_registry(
        &self,
        queue: &Queue,
    ) -> anyhow::Result<std::sync::Arc<Registry>> {
        let registry = Registry::new();
        registry.declare_elsewhere(self.config.handled_elsewhere.iter().cloned());
        registry.declare_elsewhere(admin::deployed_types(queue).await?);
        if let Some(dir) = &self.config.handlers {
            declare_local_schemas(&registry, dir);
        }
        Ok(registry)
    }
}

fn declare_local_schemas(registry: &Registry, dir: &PathBuf) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let Ok(manifest) = crate::manifest::Manifest::load(&path) else {
            continue;
        };
        let Some(schema) = &manifest.payload_schema else {
            continue;
        };
        if let Ok(validator) = crate::schema::JsonSchemaValidator::new(schema) {
            let validator = std::sync::Arc::new(validator);
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
        Command::Counts => admin::counts(context).await,
        Command::Cancel(args) => admin::cancel(context, args).await,
        Command::RetryFailed(args) => admin::retry_failed(context, args).await,
        Command::Prune(args) => admin::prune(context, args).await,
        Command::Handlers => admin::handlers(context).await,
        Command::Schedules(args) => schedules::run(context, args).await,
        Command::Migrate => admin::migrate(context).await,
        Command::Check(args) => check::run(context, args).await,
        Command::Examples { command } => examples::run(context, command),
        Command::Demo(args) => crate::demo::run(args).await,
        Command::Bench(args) => bench::run(context, args).await,
        Command::CompileComponent(_) => Err(usage(
            "compile-component is internal: boxcar runs it as a child process",
        )),
    }
}

//! What every subcommand starts from: the configuration (file, then
//! environment and flags, validated once), the database URL in force and
//! the output mode, and the queue and producer registry they open.

use std::path::Path;

use boxcar_queue::{connect, open_store, Queue, Registry};

use crate::{
    cli::Cli,
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
    pub(super) fn load(cli: &Cli) -> anyhow::Result<Self> {
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

    /// Opens the store as it is, without migrating (nothing is written),
    /// for commands that only read it; a SQLite file that does not exist is
    /// refused rather than created.
    pub async fn existing_queue(&self) -> anyhow::Result<Queue> {
        let path = self
            .db
            .strip_prefix("sqlite://")
            .or_else(|| self.db.strip_prefix("sqlite:"));
        if let Some(path) = path.filter(|p| !Path::new(p).exists()) {
            return Err(crate::error::usage(format!(
                "no database at {path}: give the one the jobs are in with --db"
            )));
        }
        let store = open_store(&self.db).await?;
        Ok(Queue::new(store, self.config.queue.clone())?)
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

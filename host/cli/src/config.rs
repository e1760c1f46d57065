//! `boxcar.toml`: host configuration, parsed then resolved and validated once.
//!
//! Step one turns TOML into raw structs (strict: unknown keys are errors
//! naming the key). Step two resolves defaults and validates through the
//! queue's own option types, so a bad value is an error naming the option at
//! start-up, never a silent default. `boxcar check --config` runs both steps
//! alone. Command-line flags override the file; the caller applies them to
//! the resolved [`Config`].

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use boxcar_queue::{
    schedule::Schedule, JobStatus, PoolConfig, QueueOptions, RetentionPolicy, WorkerOptions,
};
use serde::Deserialize;

mod sandbox;
mod schedules;
mod telemetry;

pub use sandbox::SandboxSettings;
pub use telemetry::{LogFormat, OtelSettings};

use crate::units::{ByteSize, HumanDuration};

/// The database used when neither `--db`, `BOXCAR_DB` nor `db` is set.
pub const DEFAULT_DB: &str = "sqlite://boxcar.db";
/// The HTTP API's default address (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// The owner of declared schedules when `schedules_owner` is not set.
pub const DEFAULT_SCHEDULES_OWNER: &str = "boxcar";

/// A configuration file that failed to load or validate.
pub type ConfigError = crate::toml_file::FileError;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    db: Option<String>,
    handlers: Option<PathBuf>,
    listen: Option<String>,
    token: Option<String>,
    check_job_types: Option<bool>,
    #[serde(default)]
    handled_elsewhere: Vec<String>,
    max_payload: Option<ByteSize>,
    #[serde(default)]
    worker: RawWorker,
    #[serde(default)]
    retention: RawRetention,
    #[serde(default)]
    sandbox: sandbox::RawSandbox,
    #[serde(default)]
    pools: BTreeMap<String, RawPool>,
    schedules_owner: Option<String>,
    #[serde(default)]
    schedules: Vec<schedules::RawSchedule>,
    #[serde(default)]
    log: telemetry::RawLog,
    otel: Option<telemetry::RawOtel>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    worker_id: Option<String>,
    poll_interval: Option<HumanDuration>,
    base_backoff: Option<HumanDuration>,
    max_backoff: Option<HumanDuration>,
    lease_grace: Option<HumanDuration>,
    abandon_grace: Option<HumanDuration>,
    shutdown_grace: Option<HumanDuration>,
    default_max_attempts: Option<i64>,
    starvation_polls: Option<i64>,
    claim_ahead: Option<HumanDuration>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    #[serde(default)]
    enabled: bool,
    older_than: Option<HumanDuration>,
    interval: Option<HumanDuration>,
    statuses: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    concurrency: Option<i64>,
    rate_per_minute: Option<i64>,
    #[serde(default)]
    types: Vec<String>,
    #[serde(default)]
    costs: BTreeMap<String, i64>,
    #[serde(default)]
    rate_costs: BTreeMap<String, i64>,
}

/// A resolved, validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Database URL (`sqlite://…`, `postgres://…`, `memory://`).
    pub db: Option<String>,
    /// Handlers directory to watch; `None` = producer/API-only host.
    pub handlers: Option<PathBuf>,
    /// HTTP API address.
    pub listen: Option<String>,
    /// Bearer token for the HTTP API.
    pub token: Option<String>,
    /// Producer-side options.
    pub queue: QueueOptions,
    /// Engine options.
    pub worker: WorkerOptions,
    /// Types handled by other processes (known at enqueue).
    pub handled_elsewhere: Vec<String>,
    /// Sandbox settings.
    pub sandbox: SandboxSettings,
    /// Resource pools.
    pub pools: Vec<PoolConfig>,
    /// Declared recurring schedules (validated).
    pub schedules: Vec<Schedule>,
    /// Who owns the declared schedules: a host reconciling them removes
    /// only stored schedules of this owner that are no longer declared.
    pub schedules_owner: String,
    /// The format of the host's own log.
    pub log_format: LogFormat,
    /// Where job-run spans are exported; `None`: nowhere.
    pub otel: Option<OtelSettings>,
}

impl Default for Config {
    fn default() -> Self {
        Self::resolve(Path::new("<defaults>"), RawConfig::default())
            .unwrap_or_else(|_| unreachable!("the built-in defaults are valid"))
    }
}

impl Config {
    /// Loads and validates a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the option.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = crate::toml_file::read(path, "configuration")?;
        Self::parse(path, &text)
    }

    /// Parses and validates configuration text.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the option.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = crate::toml_file::parse(path, text)?;
        Self::resolve(path, raw)
    }

    /// Re-validates after flags changed fields.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the option.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: PathBuf::from("<configuration>"),
            message,
        };
        self.queue.validate().map_err(|e| invalid(e.to_string()))?;
        self.worker.validate().map_err(|e| invalid(e.to_string()))?;
        Ok(())
    }

    fn resolve(path: &Path, raw: RawConfig) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let defaults = WorkerOptions::default();
        let w = raw.worker;
        let duration =
            |value: Option<HumanDuration>, default: Duration| value.map_or(default, |d| d.0);
        let worker = {
            let mut opts = WorkerOptions::default();
            opts.worker_id = w.worker_id.unwrap_or(defaults.worker_id);
            opts.poll_interval = duration(w.poll_interval, defaults.poll_interval);
            opts.base_backoff = duration(w.base_backoff, defaults.base_backoff);
            opts.max_backoff = duration(w.max_backoff, defaults.max_backoff);
            opts.lease_grace = duration(w.lease_grace, defaults.lease_grace);
            opts.abandon_grace = duration(w.abandon_grace, defaults.abandon_grace);
            opts.shutdown_grace = duration(w.shutdown_grace, defaults.shutdown_grace);
            opts.claim_ahead = duration(w.claim_ahead, defaults.claim_ahead);
            opts.starvation_polls = positive_u32("worker.starvation_polls", w.starvation_polls)
                .map_err(invalid)?
                .unwrap_or(defaults.starvation_polls);
            opts.retention = resolve_retention(raw.retention).map_err(invalid)?;
            opts
        };
        let mut queue = QueueOptions::default();
        if let Some(n) =
            positive_u32("worker.default_max_attempts", w.default_max_attempts).map_err(invalid)?
        {
            queue.default_max_attempts = n;
        }
        if let Some(bytes) = raw.max_payload {
            queue.payload_limits.max_bytes = usize::try_from(bytes.0).unwrap_or(usize::MAX);
        }
        if let Some(check) = raw.check_job_types {
            queue.check_known_types = check;
        }
        queue.validate().map_err(|e| invalid(e.to_string()))?;
        worker.validate().map_err(|e| invalid(e.to_string()))?;

        let sandbox = sandbox::resolve(raw.sandbox).map_err(invalid)?;
        if let Some(token) = &raw.token {
            if token.trim().len() < 16 {
                return Err(invalid(
                    "invalid option `token`: use at least 16 characters (e.g. `openssl rand -hex 16`)".into(),
                ));
            }
        }
        let pools = raw
            .pools
            .into_iter()
            .map(|(name, pool)| resolve_pool(name, pool))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;

        let schedules_owner = raw
            .schedules_owner
            .unwrap_or_else(|| DEFAULT_SCHEDULES_OWNER.to_string());
        if schedules_owner.trim().is_empty() {
            return Err(invalid(
                "invalid option `schedules_owner`: must not be blank".into(),
            ));
        }
        let schedules = schedules::resolve(raw.schedules).map_err(invalid)?;
        let otel = telemetry::resolve_otel(raw.otel).map_err(invalid)?;

        Ok(Self {
            db: raw.db,
            handlers: raw.handlers,
            listen: raw.listen,
            token: raw.token,
            queue,
            worker,
            handled_elsewhere: raw.handled_elsewhere,
            sandbox,
            pools,
            schedules,
            schedules_owner,
            log_format: telemetry::resolve_log(raw.log),
            otel,
        })
    }
}

fn positive_u32(key: &str, value: Option<i64>) -> Result<Option<u32>, String> {
    match value {
        None => Ok(None),
        Some(n) if n >= 1 => u32::try_from(n)
            .map(Some)
            .map_err(|_| format!("invalid option `{key}`: {n} is too large")),
        Some(n) => Err(format!(
            "invalid option `{key}`: must be a positive integer, got {n}"
        )),
    }
}

fn resolve_retention(raw: RawRetention) -> Result<Option<RetentionPolicy>, String> {
    if !raw.enabled {
        return Ok(None);
    }
    let older_than = raw
        .older_than
        .ok_or("invalid option `retention.older_than`: required when retention is enabled, e.g. \"7d\"")?
        .0;
    let sweep_interval = raw.interval.map_or(Duration::from_secs(3600), |d| d.0);
    if older_than.is_zero() {
        return Err("invalid option `retention.older_than`: must be positive".into());
    }
    if sweep_interval.is_zero() {
        return Err("invalid option `retention.interval`: must be positive".into());
    }
    let statuses = match raw.statuses {
        None => vec![
            JobStatus::Succeeded,
            JobStatus::Failed,
            JobStatus::Cancelled,
        ],
        Some(names) => {
            if names.is_empty() {
                return Err(
                    "invalid option `retention.statuses`: must list at least one terminal status"
                        .into(),
                );
            }
            names
                .iter()
                .map(|name| match name.parse::<JobStatus>() {
                    Ok(status) if status.is_terminal() => Ok(status),
                    _ => Err(format!(
                        "invalid option `retention.statuses`: `{name}` is not a terminal status (succeeded, failed, cancelled)"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    Ok(Some(RetentionPolicy::new(
        older_than,
        sweep_interval,
        statuses,
    )))
}

fn resolve_pool(name: String, raw: RawPool) -> Result<PoolConfig, String> {
    let key = |field: &str| format!("pools.{name}.{field}");
    let concurrency = positive_u32(&key("concurrency"), raw.concurrency)?;
    let rate_per_minute = positive_u32(&key("rate_per_minute"), raw.rate_per_minute)?;
    let costs = raw
        .costs
        .into_iter()
        .map(|(job_type, cost)| {
            positive_u32(&key("costs"), Some(cost)).map(|c| (job_type, c.unwrap_or(1)))
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let rate_costs = raw
        .rate_costs
        .into_iter()
        .map(|(job_type, cost)| {
            positive_u32(&key("rate_costs"), Some(cost)).map(|c| (job_type, c.unwrap_or(1)))
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let mut pool = PoolConfig::new(name, raw.types);
    pool.concurrency = concurrency;
    pool.rate_per_minute = rate_per_minute;
    pool.costs = costs;
    pool.rate_costs = rate_costs;
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("boxcar.toml"), text)
    }

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let config = parse("").expect("valid");
        assert_eq!(config.worker.poll_interval, Duration::from_millis(500));
        assert_eq!(config.worker.base_backoff, Duration::from_secs(2));
        assert_eq!(config.worker.max_backoff, Duration::from_secs(300));
        assert_eq!(config.worker.lease_grace, Duration::from_secs(30));
        assert_eq!(config.worker.abandon_grace, Duration::from_secs(5));
        assert_eq!(config.worker.shutdown_grace, Duration::from_secs(15));
        assert_eq!(config.queue.default_max_attempts, 3);
        assert!(config.worker.retention.is_none());
        assert_eq!(config.log_format, LogFormat::Text);
        assert!(config.otel.is_none(), "no span export unless configured");
        let config = parse("[log]\nformat = \"json\"\n[otel]\nendpoint = \"http://127.0.0.1:4318\"\nservice_name = \"jobs\"\n").expect("valid");
        assert_eq!(config.log_format, LogFormat::Json);
        let otel = config.otel.expect("configured");
        assert_eq!(otel.traces_url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(otel.service_name, "jobs");
        assert!(config.sandbox.engine.pooling);
        assert_eq!(
            config.sandbox.engine.scratch_mode,
            boxcar_sandbox::ScratchMode::Auto
        );
        let config = parse("[sandbox]\nscratch_mode = \"directory\"\n").expect("valid");
        assert_eq!(
            config.sandbox.engine.scratch_mode,
            boxcar_sandbox::ScratchMode::Directory
        );
        assert_eq!(config.sandbox.engine.pool_instances, 256);
        assert_eq!(config.sandbox.max_module, 32 << 20);
        assert_eq!(config.sandbox.compile_memory, 1 << 30);
        assert_eq!(config.sandbox.compile_timeout, Duration::from_secs(120));
        let set = parse(
            "[sandbox]\nmax_module = \"1MiB\"\ncompile_memory = \"64MiB\"\ncompile_timeout = \"5s\"\n",
        )
        .expect("valid");
        assert_eq!(set.sandbox.max_module, 1 << 20);
        assert_eq!(set.sandbox.compile_memory, 64 << 20);
        assert_eq!(set.sandbox.compile_timeout, Duration::from_secs(5));
    }

    #[test]
    fn every_bad_option_is_named() {
        for (text, option) in [
            ("[worker]\npoll_interval = \"0s\"\n", "poll_interval"),
            (
                "[worker]\nbase_backoff = \"10m\"\nmax_backoff = \"1m\"\n",
                "max_backoff",
            ),
            (
                "[worker]\ndefault_max_attempts = 0\n",
                "worker.default_max_attempts",
            ),
            ("[worker]\nworker_id = \"  \"\n", "worker_id"),
            ("[sandbox]\nmax_module = \"100\"\n", "sandbox.max_module"),
            (
                "[sandbox]\ncompile_memory = \"1MiB\"\n",
                "sandbox.compile_memory",
            ),
            (
                "[sandbox]\ncompile_timeout = \"0s\"\n",
                "sandbox.compile_timeout",
            ),
            (
                "[worker]\nstarvation_polls = -3\n",
                "worker.starvation_polls",
            ),
            ("[retention]\nenabled = true\n", "retention.older_than"),
            (
                "[retention]\nenabled = true\nolder_than = \"0s\"\n",
                "retention.older_than",
            ),
            (
                "[retention]\nenabled = true\nolder_than = \"1d\"\ninterval = \"0s\"\n",
                "retention.interval",
            ),
            (
                "[retention]\nenabled = true\nolder_than = \"1d\"\nstatuses = []\n",
                "retention.statuses",
            ),
            (
                "[retention]\nenabled = true\nolder_than = \"1d\"\nstatuses = [\"pending\"]\n",
                "retention.statuses",
            ),
            ("[sandbox]\nepoch_tick = \"0ms\"\n", "sandbox.epoch_tick"),
            ("[sandbox]\npool_instances = 0\n", "sandbox.pool_instances"),
            (
                "[sandbox]\npool_instances = 100001\n",
                "sandbox.pool_instances",
            ),
            (
                "[sandbox]\nkeep_resident = \"2GiB\"\n",
                "sandbox.keep_resident",
            ),
            (
                "[sandbox]\nscratch_mode = \"zfs\"\n",
                "sandbox.scratch_mode",
            ),
            ("token = \"short\"\n", "token"),
            (
                "[pools.api]\nconcurrency = 0\ntypes = [\"a\"]\n",
                "pools.api.concurrency",
            ),
            (
                "[pools.api]\nrate_per_minute = -1\ntypes = [\"a\"]\n",
                "pools.api.rate_per_minute",
            ),
            (
                "[pools.api]\nconcurrency = 2\ntypes = [\"a\"]\ncosts = { a = 0 }\n",
                "pools.api.costs",
            ),
            ("pol_interval = \"1s\"\n", "pol_interval"),
            ("[log]\nformat = \"xml\"\n", "xml"),
            ("[otel]\nservice_name = \"x\"\n", "otel.endpoint"),
            ("[otel]\nendpoint = \"https://c:4318\"\n", "otel.endpoint"),
            ("[worker]\npoll_interval = \"fast\"\n", "fast"),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(option), "{text:?} gave {error}");
        }
    }

    #[test]
    fn pools_and_retention_resolve() {
        let config = parse(
            r#"
            [retention]
            enabled = true
            older_than = "7d"
            statuses = ["succeeded"]
            [pools.spotify]
            concurrency = 4
            rate_per_minute = 180
            types = ["spotify-sync", "track-hydrate"]
            costs = { "spotify-sync" = 2 }
            rate_costs = { "track-hydrate" = 50 }
            "#,
        )
        .expect("valid");
        let retention = config.worker.retention.expect("enabled");
        assert_eq!(retention.older_than, Duration::from_secs(7 * 86_400));
        assert_eq!(retention.statuses, vec![JobStatus::Succeeded]);
        let pool = &config.pools[0];
        assert_eq!(pool.name, "spotify");
        assert_eq!(pool.concurrency, Some(4));
        assert_eq!(pool.costs.get("spotify-sync"), Some(&2));
        assert_eq!(pool.rate_costs.get("track-hydrate"), Some(&50));
    }
}

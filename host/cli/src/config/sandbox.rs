//! `[sandbox]` of `boxcar.toml`: the engine settings land in the sandbox's
//! own [`SandboxConfig`] and are validated by it (its ranges and defaults
//! are the only ones), beside the deploy budget the binary owns (module
//! size, compile memory and time).
//!
//! Invariant: a value the sandbox would refuse is refused here, naming the
//! `sandbox.<key>` of the file, so `boxcar check --config` catches it.

use std::{path::PathBuf, time::Duration};

use boxcar_sandbox::{SandboxConfig, SandboxError, ScratchMode};
use serde::Deserialize;

use super::positive_u32;
use crate::units::{ByteSize, HumanDuration};

/// Default `[sandbox] max_module`: 32 MiB.
pub const DEFAULT_MAX_MODULE: u64 = 32 << 20;
/// Default `[sandbox] compile_memory`: 1 GiB.
pub const DEFAULT_COMPILE_MEMORY: u64 = 1 << 30;
/// Default `[sandbox] compile_timeout`: 120 s.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    epoch_tick: Option<HumanDuration>,
    pooling: Option<bool>,
    cache_dir: Option<PathBuf>,
    scratch_dir: Option<PathBuf>,
    fuel: Option<bool>,
    keep_resident: Option<ByteSize>,
    warm_slots: Option<i64>,
    scratch_mode: Option<String>,
    pool_instances: Option<i64>,
    job_instances: Option<i64>,
    job_memories: Option<i64>,
    job_tables: Option<i64>,
    max_module: Option<ByteSize>,
    compile_memory: Option<ByteSize>,
    compile_timeout: Option<HumanDuration>,
}

/// Sandbox settings from `[sandbox]`.
#[derive(Clone, Debug)]
pub struct SandboxSettings {
    /// The engine's settings, validated; `cache_dir: None` is the default
    /// location ([`default_cache_dir`]), filled in by
    /// [`SandboxSettings::sandbox_config`].
    pub engine: SandboxConfig,
    /// Largest module file deployed, in bytes; larger ones are refused
    /// before compiling.
    pub max_module: u64,
    /// Memory a module's compile process may use, in bytes.
    pub compile_memory: u64,
    /// How long a module's compile process may run before it is killed.
    pub compile_timeout: Duration,
}

impl SandboxSettings {
    /// What `Sandbox::new` takes: the engine settings with the compile
    /// cache at its default location unless `cache_dir` names one.
    pub fn sandbox_config(&self) -> SandboxConfig {
        SandboxConfig {
            cache_dir: Some(
                self.engine
                    .cache_dir
                    .clone()
                    .unwrap_or_else(default_cache_dir),
            ),
            ..self.engine.clone()
        }
    }
}

/// `$XDG_CACHE_HOME/boxcar` or `~/.cache/boxcar`, else a temp dir.
fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("boxcar");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".cache").join("boxcar");
    }
    std::env::temp_dir().join("boxcar-cache")
}

/// Resolves `[sandbox]`: unset keys take the sandbox's defaults.
pub(super) fn resolve(raw: RawSandbox) -> Result<SandboxSettings, String> {
    let defaults = SandboxConfig::default();
    let count = |key: &str, value: Option<i64>, default: u32| {
        positive_u32(&format!("sandbox.{key}"), value).map(|n| n.unwrap_or(default))
    };
    let scratch_mode = match raw.scratch_mode.as_deref() {
        None => defaults.scratch_mode,
        Some(mode) => mode.parse::<ScratchMode>().map_err(|_| {
            format!(
                "invalid option `sandbox.scratch_mode`: `{}` is not `auto`, `tmpfs` or `directory`",
                mode.escape_debug()
            )
        })?,
    };
    let engine = SandboxConfig {
        epoch_tick: raw.epoch_tick.map_or(defaults.epoch_tick, |d| d.0),
        pooling: raw.pooling.unwrap_or(defaults.pooling),
        pool_instances: count(
            "pool_instances",
            raw.pool_instances,
            defaults.pool_instances,
        )?,
        job_instances: count("job_instances", raw.job_instances, defaults.job_instances)?,
        job_memories: count("job_memories", raw.job_memories, defaults.job_memories)?,
        job_tables: count("job_tables", raw.job_tables, defaults.job_tables)?,
        memory_keep_resident: raw
            .keep_resident
            .map_or(defaults.memory_keep_resident, |b| {
                usize::try_from(b.0).unwrap_or(usize::MAX)
            }),
        warm_slots: match raw.warm_slots {
            None => defaults.warm_slots,
            Some(n) => u32::try_from(n).map_err(|_| {
                format!("invalid option `sandbox.warm_slots`: {n} is outside 0..=100000")
            })?,
        },
        cache_dir: raw.cache_dir,
        scratch_dir: raw.scratch_dir,
        fuel: raw.fuel.unwrap_or(defaults.fuel),
        scratch_mode,
        ..defaults
    };
    engine.validate().map_err(|error| match error {
        SandboxError::Config(message) => match message.split_once(": ") {
            Some((field, why)) => format!("invalid option `sandbox.{}`: {why}", toml_key(field)),
            None => format!("invalid option in [sandbox]: {message}"),
        },
        other => format!("invalid [sandbox]: {other}"),
    })?;
    let settings = SandboxSettings {
        engine,
        max_module: raw.max_module.map_or(DEFAULT_MAX_MODULE, |b| b.0),
        compile_memory: raw.compile_memory.map_or(DEFAULT_COMPILE_MEMORY, |b| b.0),
        compile_timeout: raw.compile_timeout.map_or(DEFAULT_COMPILE_TIMEOUT, |d| d.0),
    };
    if !(1 << 10..=1 << 30).contains(&settings.max_module) {
        return Err(format!(
            "invalid option `sandbox.max_module`: {} bytes is outside 1KiB..=1GiB",
            settings.max_module
        ));
    }
    if !(32 << 20..=1 << 40).contains(&settings.compile_memory) {
        return Err(format!(
            "invalid option `sandbox.compile_memory`: {} bytes is outside 32MiB..=1TiB",
            settings.compile_memory
        ));
    }
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&settings.compile_timeout) {
        return Err(format!(
            "invalid option `sandbox.compile_timeout`: {:?} is outside 1s..=1h",
            settings.compile_timeout
        ));
    }
    Ok(settings)
}

/// The `boxcar.toml` key of a [`SandboxConfig`] field.
fn toml_key(field: &str) -> &str {
    match field {
        "memory_keep_resident" => "keep_resident",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn sandbox(text: &str) -> Result<SandboxSettings, String> {
        Config::parse(Path::new("boxcar.toml"), text)
            .map(|config| config.sandbox)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_key_reaches_the_sandbox_config() {
        let settings = sandbox(
            "[sandbox]\nepoch_tick = \"2ms\"\npooling = false\ncache_dir = \"/c\"\nscratch_dir = \"/srv/boxcar-scratch\"\nfuel = true\nkeep_resident = \"1MiB\"\nwarm_slots = 3\nscratch_mode = \"directory\"\npool_instances = 12\njob_instances = 30\njob_memories = 20\njob_tables = 11\nmax_module = \"1MiB\"\ncompile_memory = \"64MiB\"\ncompile_timeout = \"5s\"\n",
        )
        .expect("valid");
        let config = settings.sandbox_config();
        assert_eq!(config.epoch_tick, Duration::from_millis(2));
        assert!(!config.pooling);
        assert_eq!(config.cache_dir, Some(PathBuf::from("/c")));
        assert_eq!(
            config.scratch_dir,
            Some(PathBuf::from("/srv/boxcar-scratch"))
        );
        assert!(config.fuel);
        assert_eq!(config.memory_keep_resident, 1 << 20);
        assert_eq!(config.warm_slots, 3);
        assert_eq!(config.scratch_mode, ScratchMode::Directory);
        assert_eq!(
            (
                config.pool_instances,
                config.job_instances,
                config.job_memories,
                config.job_tables
            ),
            (12, 30, 20, 11)
        );
        assert_eq!(settings.max_module, 1 << 20);
        assert_eq!(settings.compile_memory, 64 << 20);
        assert_eq!(settings.compile_timeout, Duration::from_secs(5));
        let default = sandbox("").expect("valid");
        assert_eq!(default.engine.scratch_dir, None);
        assert!(default.sandbox_config().cache_dir.is_some());
    }

    #[test]
    fn the_sandboxs_own_ranges_are_named_by_key() {
        for (text, option) in [
            ("[sandbox]\nepoch_tick = \"0ms\"\n", "sandbox.epoch_tick"),
            ("[sandbox]\nepoch_tick = \"5s\"\n", "sandbox.epoch_tick"),
            ("[sandbox]\njob_memories = 0\n", "sandbox.job_memories"),
            ("[sandbox]\njob_instances = 1001\n", "sandbox.job_instances"),
            ("[sandbox]\njob_tables = -1\n", "sandbox.job_tables"),
            ("[sandbox]\nwarm_slots = -1\n", "sandbox.warm_slots"),
            ("[sandbox]\nwarm_slots = 100001\n", "sandbox.warm_slots"),
            (
                "[sandbox]\nkeep_resident = \"2GiB\"\n",
                "sandbox.keep_resident",
            ),
        ] {
            let error = sandbox(text).unwrap_err();
            assert!(error.contains(option), "{text:?} gave {error}");
        }
    }
}

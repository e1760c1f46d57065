//! Translation from operator configuration (manifest, `boxcar.toml`) into
//! the sandbox's own settings types. Pure functions; no I/O.

use boxcar_sandbox::{Capabilities, HandlerLimits, SandboxConfig};

use crate::{config::SandboxSettings, manifest::Manifest};

/// The sandbox limits a manifest asks for.
pub fn limits(manifest: &Manifest) -> HandlerLimits {
    let to_usize = |bytes: u64| usize::try_from(bytes).unwrap_or(usize::MAX);
    let defaults = HandlerLimits::default();
    HandlerLimits {
        memory: manifest.limits.memory,
        fuel: manifest.limits.fuel,
        max_result: to_usize(manifest.limits.max_result),
        max_progress: to_usize(manifest.limits.max_progress),
        max_log: to_usize(manifest.limits.max_log),
        max_log_line: defaults
            .max_log_line
            .min(to_usize(manifest.limits.max_log).max(1)),
        max_enqueues: manifest.limits.max_enqueues,
        max_http_body: manifest.limits.max_http_body,
        ..defaults
    }
}

/// The capabilities a manifest grants.
pub fn capabilities(manifest: &Manifest) -> Capabilities {
    let caps = &manifest.capabilities;
    Capabilities {
        may_enqueue: caps.may_enqueue.clone(),
        http: caps.http.clone(),
        dirs: caps.dirs.clone(),
        scratch: caps.scratch,
        env: caps.env.clone(),
    }
}

/// The engine-wide sandbox configuration.
pub fn sandbox_config(settings: &SandboxSettings) -> SandboxConfig {
    SandboxConfig {
        epoch_tick: settings.epoch_tick,
        pooling: settings.pooling,
        pool_instances: settings.pool_instances,
        cache_dir: Some(settings.cache_dir.clone().unwrap_or_else(default_cache_dir)),
        fuel: settings.fuel,
        scratch_dir: settings.scratch_dir.clone(),
        memory_keep_resident: settings
            .keep_resident
            .unwrap_or(SandboxConfig::default().memory_keep_resident),
        scratch_mode: settings.scratch_mode,
        ..SandboxConfig::default()
    }
}

/// `$XDG_CACHE_HOME/boxcar` or `~/.cache/boxcar`, else a temp dir.
pub fn default_cache_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return std::path::PathBuf::from(dir).join("boxcar");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return std::path::PathBuf::from(home).join(".cache").join("boxcar");
    }
    std::env::temp_dir().join("boxcar-cache")
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::config::Config;

    #[test]
    fn sandbox_scratch_dir_reaches_the_sandbox_config() {
        let config = Config::parse(
            Path::new("boxcar.toml"),
            "[sandbox]\nscratch_dir = \"/srv/boxcar-scratch\"\n",
        )
        .expect("valid config");
        assert_eq!(
            super::sandbox_config(&config.sandbox).scratch_dir,
            Some(PathBuf::from("/srv/boxcar-scratch"))
        );
        let default = Config::parse(Path::new("boxcar.toml"), "").expect("valid config");
        assert_eq!(super::sandbox_config(&default.sandbox).scratch_dir, None);
    }
}

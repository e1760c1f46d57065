//! The engine-wide sandbox configuration `boxcar.toml` resolves to (its
//! `[sandbox]` values already live in the sandbox's own
//! [`SandboxConfig`]; handler limits and grants come straight from the
//! manifest as the sandbox's types).

use boxcar_sandbox::SandboxConfig;

use crate::config::SandboxSettings;

/// The engine-wide sandbox configuration.
pub fn sandbox_config(settings: &SandboxSettings) -> SandboxConfig {
    settings.sandbox_config()
}

//! Validating and compiling one module + manifest pair, without deploying
//! it: the manifest, the module size limit (checked before the module is
//! read), the `sha256` pin, then compilation in a budgeted child process
//! ([`super::compile`]) and the world check.
//!
//! Invariant: nothing here touches the registry; a pair that fails any step
//! is a [`DeployError`] naming the file and what to change.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use boxcar_sandbox::{LoadedHandler, ModuleBytes, Sandbox};

use super::compile::{self, human_bytes, CompileBudget};
use crate::manifest::Manifest;

/// A pair that passed every check and can be registered.
pub struct Prepared {
    /// The validated manifest.
    pub manifest: Manifest,
    /// The compiled, linked module.
    pub handler: Arc<LoadedHandler>,
    /// sha256 of the module bytes (hex).
    pub digest: String,
}

/// Why a pair was refused.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The module file is over `[sandbox] max_module`.
    #[error("{path}: the module is {size}, over the {limit} module size limit ([sandbox] max_module in boxcar.toml); shrink the module or raise the limit")]
    ModuleTooLarge {
        /// The module file.
        path: PathBuf,
        /// Its size, human-readable.
        size: String,
        /// The limit, human-readable.
        limit: String,
    },
    /// The module file could not be read.
    #[error("{path}: cannot read the module")]
    ReadModule {
        /// The module file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// The bytes do not match the manifest's `sha256` pin.
    #[error("{path}: module digest {actual} does not match the pinned handler.sha256 {pinned}; update the pin or deploy the pinned module")]
    PinMismatch {
        /// The module file.
        path: PathBuf,
        /// The digest of the bytes found.
        actual: String,
        /// The pinned digest.
        pinned: String,
    },
    /// The sandbox refused the module (not a component, wrong world, ...).
    #[error("{path}: the sandbox refused the module")]
    Sandbox {
        /// The module file.
        path: PathBuf,
        /// The sandbox's error.
        source: boxcar_sandbox::SandboxError,
    },
    /// The registry refused the settings (e.g. a `waits_for` cycle).
    #[error("{path}: {message}")]
    Registry {
        /// The manifest file.
        path: PathBuf,
        /// The registry's message.
        message: String,
    },
    /// A `dirs` grant reaches a path the host must keep from guests.
    #[error("{path}: {source}")]
    ProtectedPath {
        /// The manifest file.
        path: PathBuf,
        /// Which grant and which protected path.
        source: crate::protected::GrantOverlap,
    },
    /// Another pair already serves one of the types.
    #[error(
        "{path}: job type `{job_type}` is already served by {other}; one job type has one handler"
    )]
    TypeTaken {
        /// The manifest file.
        path: PathBuf,
        /// The contested type.
        job_type: String,
        /// The pair that serves it.
        other: String,
    },
}

/// Validates a module + manifest and compiles it under `budget`, without
/// deploying. The module is measured before it is read, so one over the
/// size limit is never read.
///
/// # Errors
/// [`DeployError`] naming the file and the reason.
pub async fn prepare(
    sandbox: &Arc<Sandbox>,
    budget: &CompileBudget,
    module: &Path,
    manifest: &Path,
) -> Result<Prepared, DeployError> {
    let read_error = |source| DeployError::ReadModule {
        path: module.to_path_buf(),
        source,
    };
    let size = tokio::fs::metadata(module).await.map_err(read_error)?.len();
    if size > budget.max_module {
        // The manifest's own errors come first, as for a module read.
        Manifest::load(manifest)?;
        return Err(too_large(module, size, budget));
    }
    let bytes = tokio::fs::read(module).await.map_err(read_error)?;
    prepare_read(sandbox, budget, module, manifest, ModuleBytes::new(bytes)).await
}

/// [`prepare`] of a module already read (and hashed) from `module`.
///
/// # Errors
/// [`DeployError`] naming the file and the reason.
pub async fn prepare_read(
    sandbox: &Arc<Sandbox>,
    budget: &CompileBudget,
    module: &Path,
    manifest: &Path,
    bytes: ModuleBytes,
) -> Result<Prepared, DeployError> {
    let manifest = Manifest::load(manifest)?;
    let size = u64::try_from(bytes.bytes().len()).unwrap_or(u64::MAX);
    if size > budget.max_module {
        return Err(too_large(module, size, budget));
    }
    let digest = bytes.digest().to_string();
    if let Some(pinned) = &manifest.sha256 {
        if *pinned != digest {
            return Err(DeployError::PinMismatch {
                path: module.to_path_buf(),
                actual: digest,
                pinned: pinned.clone(),
            });
        }
    }
    let limits = manifest.limits.clone();
    let capabilities = manifest.capabilities.clone();
    let sandbox = sandbox.clone();
    let budget = budget.clone();
    let path = module.to_path_buf();
    let handler = tokio::task::spawn_blocking(move || {
        let codegen = sandbox.config().codegen();
        let compile = |wasm: &[u8]| compile::in_child(&budget, &codegen, &path, wasm);
        sandbox
            .load_compiled_by(&bytes, limits, capabilities, &compile)
            .map(|(handler, _)| handler)
    })
    .await
    .map_err(|join| DeployError::Registry {
        path: module.to_path_buf(),
        message: format!("compilation task failed: {join}"),
    })?
    .map_err(|source| DeployError::Sandbox {
        path: module.to_path_buf(),
        source,
    })?;
    Ok(Prepared {
        manifest,
        handler,
        digest,
    })
}

fn too_large(module: &Path, size: u64, budget: &CompileBudget) -> DeployError {
    DeployError::ModuleTooLarge {
        path: module.to_path_buf(),
        size: human_bytes(size),
        limit: human_bytes(budget.max_module),
    }
}

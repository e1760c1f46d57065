//! The on-disk compilation cache: `<dir>/<sha256>-<engine hash>.cwasm`.
//!
//! The key covers the module bytes (digest) and everything in the engine
//! that changes compiled code (`Engine::precompile_compatibility_hash`), so
//! a file is only ever loaded into an engine that can run it. Files are
//! written to a temporary name and renamed into place; a file that fails to
//! load is recompiled and overwritten.
//!
//! Trust: loading a `.cwasm` runs native code; the directory must be
//! writable only by the host (it is never fed from guests or users).

use std::{
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
};

use wasmtime::{component::Component, Engine};

use crate::SandboxError;

/// Key of the engine settings, as hex.
pub(crate) fn engine_key(engine: &Engine) -> String {
    let mut h = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

pub(crate) fn entry(dir: &Path, digest: &str, engine_key: &str) -> PathBuf {
    dir.join(format!("{digest}-{engine_key}.cwasm"))
}

/// Loads a cached component, or `None` when absent or unusable.
pub(crate) fn load(engine: &Engine, path: &Path) -> Option<Component> {
    if !path.is_file() {
        return None;
    }
    // SAFETY: the file was written by `store` below from
    // `Component::serialize` of an engine with the same compatibility hash
    // (part of the name), in a directory only the host writes.
    #[allow(unsafe_code)]
    let loaded = unsafe { Component::deserialize_file(engine, path) };
    match loaded {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compile cache entry");
            None
        }
    }
}

/// Loads an artifact made by [`crate::precompile`] (see
/// [`Sandbox::load_compiled_by`](crate::Sandbox::load_compiled_by)). The
/// error is wasmtime's: the caller tells a component over the pool's
/// per-component limits from an artifact that does not load.
pub(crate) fn from_artifact(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: the caller of `load_compiled_by` vouches that the artifact was
    // made by `precompile` in a host-controlled process and stored where
    // only the host writes; wasmtime checks the format, version and engine
    // compatibility hash before using it.
    #[allow(unsafe_code)]
    let loaded = unsafe { Component::deserialize(engine, artifact) };
    loaded
}

/// Writes a compiled component atomically.
pub(crate) fn store(dir: &Path, path: &Path, component: &Component) -> Result<(), SandboxError> {
    let err = |message: String| SandboxError::Cache {
        path: path.to_path_buf(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create the directory: {e}")))?;
    let bytes = component
        .serialize()
        .map_err(|e| err(format!("cannot serialize: {e}")))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| err(format!("cannot write: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| err(format!("cannot rename into place: {e}")))
}

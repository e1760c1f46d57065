//! Which module and manifest `boxcar replay` runs a job with.
//!
//! - The module: the one given (`--module`), else the module whose sha256 is
//!   the digest recorded on the job's last attempt — a `.wasm` of the
//!   handlers directory with that digest, else that digest's entry in the
//!   compile cache.
//! - The manifest: the one given (`--manifest`), else the one beside the
//!   module (a given module's `NAME.toml`, or the handlers directory pair
//!   it was found in), else the deployed manifest serving the job's type.
//!
//! Invariant: the manifest chosen lists the job's type; the module is never
//! read when it is over `[sandbox] max_module`.

use std::path::{Path, PathBuf};

use boxcar_sandbox::ModuleBytes;

use crate::{deploy::scan, error::usage, manifest::Manifest};

/// What to look for.
pub struct Wanted<'a> {
    /// The job's type.
    pub job_type: &'a str,
    /// The module digest recorded on the job's last attempt.
    pub digest: Option<&'a str>,
    /// `--module`.
    pub module: Option<&'a Path>,
    /// `--manifest`.
    pub manifest: Option<&'a Path>,
    /// The handlers directory, when there is one.
    pub handlers: Option<&'a Path>,
    /// `[sandbox] max_module`.
    pub max_module: u64,
}

/// The module to run.
pub enum Module {
    /// A module file, read.
    File {
        /// Where it was read from.
        path: PathBuf,
        /// Its bytes.
        bytes: ModuleBytes,
    },
    /// Only the compile cache holds it.
    Cached {
        /// Its sha256 (hex).
        digest: String,
    },
}

/// The module and manifest found, with where they came from.
pub struct Source {
    /// The module.
    pub module: Module,
    /// The manifest (read from `Manifest::path`).
    pub manifest: Manifest,
    /// Where the module came from, in words.
    pub origin: String,
}

/// Finds the module and manifest (see the module docs).
///
/// # Errors
/// A usage error naming what is missing and what to pass instead.
pub fn find(wanted: &Wanted<'_>) -> anyhow::Result<Source> {
    let (module, beside, origin) = match (wanted.module, wanted.digest) {
        (Some(path), _) => {
            let bytes = read_module(path, wanted.max_module)?;
            let origin = format!("{} (sha256 {}, given)", path.display(), bytes.digest());
            let beside = Some(path.with_extension("toml")).filter(|m| m.is_file());
            let module = Module::File {
                path: path.to_path_buf(),
                bytes,
            };
            (module, beside, origin)
        }
        (None, Some(digest)) => by_digest(wanted, digest)?,
        (None, None) => {
            let (pair, _) = deployed(wanted)?.ok_or_else(|| {
                usage(format!(
                    "job type `{}` never ran here and no handler in {} serves it: give the module with --module FILE",
                    wanted.job_type,
                    handlers_text(wanted.handlers)
                ))
            })?;
            let bytes = read_module(&pair.module, wanted.max_module)?;
            let origin = format!(
                "{} (sha256 {}, the deployed module: the job has no attempt yet)",
                pair.module.display(),
                bytes.digest()
            );
            let module = Module::File {
                path: pair.module,
                bytes,
            };
            (module, Some(pair.manifest), origin)
        }
    };
    let manifest = match (wanted.manifest, beside) {
        (Some(path), _) => Manifest::load(path)?,
        (None, Some(path)) => Manifest::load(&path)?,
        (None, None) => deployed(wanted)?.map(|(_, m)| m).ok_or_else(|| {
            usage(format!(
                "no manifest for job type `{}`: none beside the module and none in {}; give one with --manifest FILE",
                wanted.job_type,
                handlers_text(wanted.handlers)
            ))
        })?,
    };
    if !manifest.job_types.iter().any(|t| t == wanted.job_type) {
        return Err(usage(format!(
            "{} does not serve job type `{}` (it lists {}): give a manifest for it with --manifest FILE",
            manifest.path.display(),
            wanted.job_type,
            manifest.job_types.join(", ")
        )));
    }
    Ok(Source {
        module,
        manifest,
        origin,
    })
}

/// The module of `digest`: in the handlers directory, else in the cache.
fn by_digest(
    wanted: &Wanted<'_>,
    digest: &str,
) -> anyhow::Result<(Module, Option<PathBuf>, String)> {
    let is_sha256 = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_sha256 {
        return Err(usage(format!(
            "the job's last attempt ran handler version `{digest}`, not a WASM module: give one with --module FILE"
        )));
    }
    if let Some(dir) = wanted.handlers {
        let pairs = scan::pairs(dir).unwrap_or_default();
        for pair in pairs.into_values() {
            let Ok(bytes) = read_module(&pair.module, wanted.max_module) else {
                continue;
            };
            if bytes.digest() == digest {
                let origin = format!(
                    "{} (sha256 {digest}, the module of the job's last attempt)",
                    pair.module.display()
                );
                let module = Module::File {
                    path: pair.module,
                    bytes,
                };
                return Ok((module, Some(pair.manifest), origin));
            }
        }
    }
    let origin = format!(
        "the compile cache's entry for sha256 {digest} (the module of the job's last attempt; no module in {} has that digest)",
        handlers_text(wanted.handlers)
    );
    let module = Module::Cached {
        digest: digest.to_string(),
    };
    Ok((module, None, origin))
}

/// The handlers directory pair serving the job's type, with its manifest.
fn deployed(wanted: &Wanted<'_>) -> anyhow::Result<Option<(scan::Pair, Manifest)>> {
    let Some(dir) = wanted.handlers else {
        return Ok(None);
    };
    let pairs = scan::pairs(dir).map_err(|e| {
        usage(format!(
            "cannot read the handlers directory {}: {e}",
            dir.display()
        ))
    })?;
    Ok(pairs.into_values().find_map(|pair| {
        let manifest = Manifest::load(&pair.manifest).ok()?;
        manifest
            .job_types
            .iter()
            .any(|t| t == wanted.job_type)
            .then_some((pair, manifest))
    }))
}

/// Reads a module no larger than `max_module`.
fn read_module(path: &Path, max_module: u64) -> anyhow::Result<ModuleBytes> {
    let unreadable = |e: std::io::Error| usage(format!("cannot read {}: {e}", path.display()));
    let size = std::fs::metadata(path).map_err(unreadable)?.len();
    if size > max_module {
        return Err(usage(format!(
            "{} is {size} bytes, over the module size limit ([sandbox] max_module)",
            path.display()
        )));
    }
    Ok(ModuleBytes::new(std::fs::read(path).map_err(unreadable)?))
}

fn handlers_text(dir: Option<&Path>) -> String {
    dir.map_or_else(
        || "the handlers directory (none given: pass --handlers DIR)".to_string(),
        |d| d.display().to_string(),
    )
}

//! Handler manifests: the operator-written TOML beside each module.
//!
//! `name.toml` describes `name.wasm`: the job types it handles, how many run
//! at once, the timeout and lease, guards, limits and granted capabilities.
//! Parsing is strict: an unknown key is an error naming the key and the
//! file. Parsing and validation happen once, here; everything downstream
//! receives a [`Manifest`] whose values are known to be valid.
//!
//! The values land in the types of the layer that enforces them, with that
//! layer's defaults: `[handler]` and the enqueue rules in the queue's
//! [`HandlerSettings`], `[limits]` in the sandbox's [`HandlerLimits`]
//! ([`limits`]), `[capabilities]` in the sandbox's [`Capabilities`]
//! ([`grants`]). Only the units ("64MiB", "30s") and the key names are
//! this module's.
//!
//! Invariant: nothing in a manifest comes from the guest. A module cannot
//! widen its own limits or capabilities.

mod grants;
mod limits;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    sync::Arc,
};

use boxcar_queue::{
    bounds::{at_most, MAX_HANDLER_TIMEOUT, MAX_LEASE_DURATION},
    HandlerSettings,
};
use boxcar_sandbox::{Capabilities, HandlerLimits};
use serde::Deserialize;

use crate::{schema::JsonSchemaValidator, units::HumanDuration};

/// A manifest that failed to parse or validate.
pub type ManifestError = crate::toml_file::FileError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    handler: RawHandler,
    #[serde(default)]
    limits: limits::RawLimits,
    #[serde(default)]
    capabilities: grants::RawCapabilities,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHandler {
    job_type: Option<String>,
    job_types: Option<Vec<String>>,
    concurrency: Option<i64>,
    timeout: Option<HumanDuration>,
    max_attempts: Option<i64>,
    lease_duration: Option<HumanDuration>,
    #[serde(default)]
    serialize_by_scope: bool,
    #[serde(default)]
    not_while_running: Vec<String>,
    #[serde(default)]
    waits_for: Vec<String>,
    payload_schema: Option<PathBuf>,
    sha256: Option<String>,
}

/// A validated manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The manifest file it came from.
    pub path: PathBuf,
    /// The job types this module handles (non-empty, unique).
    pub job_types: Vec<String>,
    /// How the queue runs each of the types: concurrency, timeout, lease,
    /// attempts, guards, the payload validator, and what a running job may
    /// enqueue (`may_enqueue`, the `[limits] enqueue_*` bounds). Unset keys
    /// are [`HandlerSettings::default`].
    pub settings: HandlerSettings,
    /// The payload JSON Schema, loaded from `payload_schema`.
    pub payload_schema: Option<serde_json::Value>,
    /// Required sha256 of the module bytes (lowercase hex).
    pub sha256: Option<String>,
    /// Per-job limits, as the sandbox enforces them.
    pub limits: HandlerLimits,
    /// Granted capabilities, as the sandbox enforces them (directory
    /// existence is checked at load).
    pub capabilities: Capabilities,
}

impl Manifest {
    /// Reads and validates a manifest file.
    ///
    /// # Errors
    /// [`ManifestError`] naming the file and the problem.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = crate::toml_file::read(path, "manifest")?;
        Self::parse(path, &text)
    }

    /// Parses and validates manifest text; `path` is used in messages and to
    /// resolve `payload_schema`.
    ///
    /// # Errors
    /// [`ManifestError`] naming the file and the problem.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ManifestError> {
        let raw: RawManifest = crate::toml_file::parse(path, text)?;
        let invalid = |message: String| ManifestError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let handler = raw.handler;
        let job_types = job_types(handler.job_type, handler.job_types).map_err(invalid)?;
        let mut settings = HandlerSettings::default();
        if let Some(n) = positive("handler.concurrency", handler.concurrency).map_err(invalid)? {
            settings.concurrency = u32::try_from(n).unwrap_or(u32::MAX);
        }
        settings.max_attempts = positive("handler.max_attempts", handler.max_attempts)
            .map_err(invalid)?
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        if let Some(timeout) = handler.timeout {
            settings.timeout = timeout.0;
        }
        if settings.timeout.is_zero() {
            return Err(invalid(
                "handler.timeout must be positive, e.g. \"30s\"".into(),
            ));
        }
        at_most(settings.timeout, MAX_HANDLER_TIMEOUT)
            .map_err(|m| invalid(format!("handler.timeout: {m}")))?;
        settings.lease_duration = handler.lease_duration.map(|d| d.0);
        if let Some(lease) = settings.lease_duration {
            if lease.is_zero() {
                return Err(invalid(
                    "handler.lease_duration must be positive, e.g. \"30s\"".into(),
                ));
            }
            at_most(lease, MAX_LEASE_DURATION)
                .map_err(|m| invalid(format!("handler.lease_duration: {m}")))?;
        }
        for (key, list) in [
            ("handler.not_while_running", &handler.not_while_running),
            ("handler.waits_for", &handler.waits_for),
        ] {
            for name in list {
                check_name(key, name).map_err(invalid)?;
            }
        }
        settings.serialize_by_scope = handler.serialize_by_scope;
        settings.not_while_running = handler.not_while_running;
        settings.waits_for = handler.waits_for;

        let payload_schema = match handler.payload_schema {
            None => None,
            Some(schema_path) => {
                let (schema, validator) = load_schema(path, &schema_path).map_err(invalid)?;
                settings.payload_validator = Some(validator);
                Some(schema)
            }
        };
        let sha256 = handler.sha256.map(pin).transpose().map_err(invalid)?;

        let (limits, enqueue_bounds) = limits::resolve(&raw.limits).map_err(invalid)?;
        settings.enqueue_bounds = enqueue_bounds;
        let (may_enqueue, capabilities) = grants::resolve(raw.capabilities).map_err(invalid)?;
        settings.may_enqueue = may_enqueue;

        Ok(Self {
            path: path.to_path_buf(),
            job_types,
            settings,
            payload_schema,
            sha256,
            limits,
            capabilities,
        })
    }

    /// Instances of the sandbox's pool each of its types runs at once.
    pub fn concurrency(&self) -> usize {
        usize::try_from(self.settings.concurrency).unwrap_or(usize::MAX)
    }

    /// One line naming every grant, for deploy records and listings. Env
    /// values are never included (they may be secrets), only their names.
    pub fn grants_summary(&self) -> String {
        grants::summary(&self.settings.may_enqueue, &self.capabilities)
    }
}

/// `handler.job_type` or `handler.job_types`: one of them, non-empty, each
/// name usable and listed once.
fn job_types(one: Option<String>, many: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let job_types = match (one, many) {
        (Some(one), None) => vec![one],
        (None, Some(many)) => many,
        (Some(_), Some(_)) => {
            return Err("set either handler.job_type or handler.job_types, not both".into())
        }
        (None, None) => {
            return Err("handler.job_type is missing: name the job type this module handles".into())
        }
    };
    if job_types.is_empty() {
        return Err("handler.job_types is empty: list at least one job type".into());
    }
    let mut seen = BTreeSet::new();
    for job_type in &job_types {
        check_name("handler.job_type", job_type)?;
        if !seen.insert(job_type) {
            return Err(format!("handler.job_types lists `{job_type}` twice"));
        }
    }
    Ok(job_types)
}

/// `handler.sha256`, lowercased: 64 hex digits.
fn pin(pin: String) -> Result<String, String> {
    let pin = pin.trim().to_ascii_lowercase();
    if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(
            "handler.sha256 must be 64 hex digits (the output of `sha256sum MODULE.wasm`)".into(),
        );
    }
    Ok(pin)
}

fn check_name(key: &str, name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(format!("{key} contains an empty job type name"));
    }
    if name.len() > 200 || name.chars().any(char::is_control) {
        return Err(format!(
            "{key}: `{}` is not a usable job type name (at most 200 printable characters)",
            name.escape_debug()
        ));
    }
    Ok(())
}

fn positive(key: &str, value: Option<i64>) -> Result<Option<u64>, String> {
    match value {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n.unsigned_abs())),
        Some(n) => Err(format!("{key} must be a positive integer, got {n}")),
    }
}

/// The schema at `schema` (relative to the manifest) and its compiled
/// validator.
fn load_schema(
    manifest: &Path,
    schema: &Path,
) -> Result<(serde_json::Value, Arc<JsonSchemaValidator>), String> {
    let full = manifest.parent().unwrap_or(Path::new(".")).join(schema);
    let text = read_schema_file(&full)
        .map_err(|why| format!("handler.payload_schema: {}: {why}", full.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|error| {
        format!(
            "handler.payload_schema: {} is not JSON: {error}",
            full.display()
        )
    })?;
    let validator = JsonSchemaValidator::new(&value)
        .map_err(|error| format!("handler.payload_schema: {}: {error}", full.display()))?;
    Ok((value, Arc::new(validator)))
}

/// Largest `payload_schema` file read.
const MAX_SCHEMA_BYTES: u64 = 1 << 20;

/// The text of a schema file: a regular file of at most
/// [`MAX_SCHEMA_BYTES`]. Opened without blocking and checked on the open
/// handle, so a FIFO, a device such as `/dev/zero` or a file swapped for
/// one after a check cannot hang the deploy or grow the host's memory.
fn read_schema_file(path: &Path) -> Result<String, String> {
    use std::{io::Read, os::unix::fs::OpenOptionsExt};

    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|error| format!("cannot read it: {error}"))?;
    let meta = file
        .metadata()
        .map_err(|error| format!("cannot read it: {error}"))?;
    if !meta.is_file() {
        return Err("is not a regular file: name a JSON file".to_string());
    }
    if meta.len() > MAX_SCHEMA_BYTES {
        return Err(format!(
            "is {} bytes, more than the {MAX_SCHEMA_BYTES} a schema may hold",
            meta.len()
        ));
    }
    let mut text = String::new();
    file.take(MAX_SCHEMA_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|error| format!("cannot read it as UTF-8 text: {error}"))?;
    if text.len() as u64 > MAX_SCHEMA_BYTES {
        return Err(format!(
            "grew past the {MAX_SCHEMA_BYTES} bytes a schema may hold while it was read"
        ));
    }
    Ok(text)
}

/// Parses `text` as `handlers/x.toml`.
#[cfg(test)]
fn parse_for_test(text: &str) -> Result<Manifest, ManifestError> {
    Manifest::parse(Path::new("handlers/x.toml"), text)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use boxcar_queue::bounds::EnqueueBounds;

    use super::*;
    use crate::manifest::parse_for_test as parse;

    #[test]
    fn minimal_manifest_gets_defaults() {
        let manifest = parse("[handler]\njob_type = \"echo\"\n").expect("valid");
        assert_eq!(manifest.job_types, vec!["echo"]);
        assert_eq!(manifest.settings.concurrency, 4);
        assert_eq!(manifest.concurrency(), 4);
        assert_eq!(manifest.settings.timeout, Duration::from_secs(60));
        assert_eq!(manifest.limits, HandlerLimits::default());
        assert_eq!(manifest.limits.memory, 64 << 20);
        assert_eq!(manifest.limits.fuel, None);
        assert!(manifest.settings.may_enqueue.is_empty());
        assert_eq!(manifest.capabilities, Capabilities::default());
        assert_eq!(manifest.settings.enqueue_bounds, EnqueueBounds::default());
    }

    #[test]
    fn enqueue_bounds_and_duration_caps() {
        let manifest = parse(
            "[handler]\njob_type = \"a\"\ntimeout = \"24h\"\nlease_duration = \"24h\"\n[limits]\nenqueue_priority = [-5, 5]\nenqueue_max_attempts = 4\nenqueue_max_delay = \"1h\"\n",
        )
        .expect("valid");
        assert_eq!(manifest.settings.timeout, MAX_HANDLER_TIMEOUT);
        assert_eq!(manifest.settings.lease_duration, Some(MAX_LEASE_DURATION));
        assert_eq!(
            manifest.settings.enqueue_bounds,
            EnqueueBounds::new(-5..=5, 4, Duration::from_secs(3600))
        );
    }

    #[test]
    fn full_manifest_parses_every_key() {
        let manifest = parse(
            r#"
            [handler]
            job_types = ["a", "b"]
            concurrency = 2
            timeout = "5s"
            max_attempts = 7
            lease_duration = "30s"
            serialize_by_scope = true
            not_while_running = ["c"]
            waits_for = ["d"]
            sha256 = "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
            [limits]
            memory = "32MiB"
            fuel = 1000
            max_result = "1KiB"
            max_log = "2KiB"
            max_progress = "512"
            max_enqueues = 3
            [capabilities]
            may_enqueue = ["e"]
            "#,
        )
        .expect("valid");
        assert_eq!(manifest.job_types, vec!["a", "b"]);
        assert_eq!(manifest.settings.concurrency, 2);
        assert_eq!(manifest.settings.timeout, Duration::from_secs(5));
        assert_eq!(manifest.settings.max_attempts, Some(7));
        assert_eq!(
            manifest.settings.lease_duration,
            Some(Duration::from_secs(30))
        );
        assert!(manifest.settings.serialize_by_scope);
        assert_eq!(manifest.settings.not_while_running, vec!["c"]);
        assert_eq!(manifest.settings.waits_for, vec!["d"]);
        assert_eq!(manifest.limits.memory, 32 * 1024 * 1024);
        assert_eq!(manifest.limits.fuel, Some(1000));
        assert_eq!(manifest.limits.max_progress, 512);
        assert_eq!(manifest.limits.max_enqueues, 3);
        assert_eq!(manifest.settings.may_enqueue, vec!["e"]);
        assert!(manifest
            .sha256
            .as_deref()
            .is_some_and(|s| s.starts_with("abcdef")));
    }

    #[test]
    fn unknown_key_is_named_with_the_file() {
        let error = parse("[handler]\njob_type = \"echo\"\nconcurency = 2\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("handlers/x.toml"), "{error}");
        assert!(error.contains("concurency"), "{error}");
    }

    #[test]
    fn bad_values_are_refused_with_the_key() {
        for (text, key) in [
            ("[handler]\n", "job_type"),
            ("[handler]\njob_type = \"\"\n", "empty"),
            (
                "[handler]\njob_type = \"a\"\nconcurrency = 0\n",
                "handler.concurrency",
            ),
            (
                "[handler]\njob_type = \"a\"\nmax_attempts = -1\n",
                "handler.max_attempts",
            ),
            (
                "[handler]\njob_type = \"a\"\ntimeout = \"0s\"\n",
                "handler.timeout",
            ),
            ("[handler]\njob_type = \"a\"\ntimeout = \"soon\"\n", "soon"),
            (
                "[handler]\njob_type = \"a\"\nsha256 = \"xyz\"\n",
                "handler.sha256",
            ),
            (
                "[handler]\njob_type = \"a\"\n[limits]\nmemory = \"1KiB\"\n",
                "limits.memory",
            ),
            (
                "[handler]\njob_type = \"a\"\ntimeout = \"1000000years\"\n",
                "is longer than the maximum 1d",
            ),
            (
                "[handler]\njob_type = \"a\"\ntimeout = \"25h\"\n",
                "handler.timeout",
            ),
            (
                "[handler]\njob_type = \"a\"\nlease_duration = \"2d\"\n",
                "handler.lease_duration: 2d is longer than the maximum 1d",
            ),
            (
                "[handler]\njob_type = \"a\"\n[limits]\nenqueue_priority = [10, 1]\n",
                "limits.enqueue_priority",
            ),
            (
                "[handler]\njob_type = \"a\"\n[limits]\nenqueue_priority = [0, 3000000000]\n",
                "limits.enqueue_priority",
            ),
            (
                "[handler]\njob_type = \"a\"\n[limits]\nenqueue_max_attempts = 0\n",
                "limits.enqueue_max_attempts",
            ),
            (
                "[handler]\njob_type = \"a\"\njob_types = [\"b\"]\n",
                "not both",
            ),
            ("[handler]\njob_types = [\"a\", \"a\"]\n", "twice"),
            (
                "[handler]\njob_type = \"a\"\npayload_schema = \"missing.json\"\n",
                "payload_schema",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(key), "{text:?} gave {error}");
        }
    }

    #[test]
    fn payload_schema_is_loaded_relative_to_the_manifest() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("s.json"),
            r#"{"type":"object","required":["url"]}"#,
        )
        .expect("write schema");
        let manifest = Manifest::parse(
            &dir.path().join("h.toml"),
            "[handler]\njob_type = \"a\"\npayload_schema = \"s.json\"\n",
        )
        .expect("valid");
        assert!(manifest.payload_schema.is_some());
        assert!(manifest.settings.payload_validator.is_some());
        std::fs::write(dir.path().join("bad.json"), r#"{"type": 12}"#).expect("write");
        let error = Manifest::parse(
            &dir.path().join("h.toml"),
            "[handler]\njob_type = \"a\"\npayload_schema = \"bad.json\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("not a valid JSON Schema"), "{error}");
    }

    #[test]
    fn payload_schema_must_be_a_small_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo failed");
        std::fs::write(
            dir.path().join("big.json"),
            vec![b' '; (MAX_SCHEMA_BYTES + 1) as usize],
        )
        .expect("write");
        for (schema, expected) in [
            ("/dev/zero", "not a regular file"),
            ("fifo.json", "not a regular file"),
            (".", "not a regular file"),
            ("big.json", "more than the"),
        ] {
            let error = Manifest::parse(
                &dir.path().join("h.toml"),
                &format!("[handler]\njob_type = \"a\"\npayload_schema = \"{schema}\"\n"),
            )
            .unwrap_err()
            .to_string();
            assert!(
                error.contains("payload_schema") && error.contains(expected),
                "{schema}: {error}"
            );
        }
    }
}

//! Handler manifests: the operator-written TOML beside each module.
//!
//! `name.toml` describes `name.wasm`: the job types it handles, how many run
//! at once, the timeout and lease, guards, limits and granted capabilities.
//! Parsing is strict: an unknown key is an error naming the key and the
//! file. Parsing and validation happen once, here; everything downstream
//! receives a [`Manifest`] whose values are known to be valid.
//!
//! Invariant: nothing in a manifest comes from the guest. A module cannot
//! widen its own limits or capabilities.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use boxcar_queue::bounds::{at_most, EnqueueBounds, MAX_HANDLER_TIMEOUT, MAX_LEASE_DURATION};
use boxcar_sandbox::{DirGrant, DirMode, HttpOrigin, SandboxError};
use serde::Deserialize;

use crate::units::{ByteSize, HumanDuration};

/// Default wall-clock timeout per job.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default number of simultaneously running jobs per type on one host.
pub const DEFAULT_CONCURRENCY: usize = 4;
/// Default linear memory cap per job.
pub const DEFAULT_MEMORY: u64 = 64 * 1024 * 1024;
/// Default bound on a job's JSON result.
pub const DEFAULT_MAX_RESULT: u64 = 256 * 1024;
/// Default bound on a job's total log volume.
pub const DEFAULT_MAX_LOG: u64 = 1024 * 1024;
/// Default bound on one progress report.
pub const DEFAULT_MAX_PROGRESS: u64 = 64 * 1024;
/// Default bound on enqueue calls per job.
pub const DEFAULT_MAX_ENQUEUES: u32 = 100;
/// Default bound on one outbound HTTP response body.
pub const DEFAULT_MAX_HTTP_BODY: u64 = 4 * 1024 * 1024;

/// A manifest that failed to parse or validate.
pub type ManifestError = crate::toml_file::FileError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    handler: RawHandler,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    capabilities: RawCapabilities,
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<ByteSize>,
    fuel: Option<u64>,
    max_result: Option<ByteSize>,
    max_log: Option<ByteSize>,
    max_progress: Option<ByteSize>,
    max_enqueues: Option<i64>,
    max_http_body: Option<ByteSize>,
    enqueue_priority: Option<(i64, i64)>,
    enqueue_max_attempts: Option<i64>,
    enqueue_max_delay: Option<HumanDuration>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCapabilities {
    #[serde(default)]
    may_enqueue: Vec<String>,
    #[serde(default)]
    http: Vec<String>,
    #[serde(default)]
    dirs: Vec<RawDir>,
    scratch: Option<ByteSize>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDir {
    host: PathBuf,
    guest: String,
    mode: Option<String>,
}

/// Per-job sandbox limits from `[limits]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory cap in bytes.
    pub memory: u64,
    /// Fuel per job; `None` when off.
    pub fuel: Option<u64>,
    /// Largest JSON result in bytes.
    pub max_result: u64,
    /// Largest total log volume in bytes.
    pub max_log: u64,
    /// Largest progress report in bytes.
    pub max_progress: u64,
    /// Most enqueue calls per job.
    pub max_enqueues: u32,
    /// Largest outbound HTTP response body in bytes.
    pub max_http_body: u64,
    /// Priority, attempt and delay bounds on the jobs the guest enqueues.
    pub enqueue: EnqueueBounds,
}

/// What the operator grants the module, from `[capabilities]`. `Debug`
/// shows env variable names only: values may be secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Job types the guest may enqueue.
    pub may_enqueue: Vec<String>,
    /// Origins outbound HTTP may reach.
    pub http: Vec<HttpOrigin>,
    /// Preopened host directories (existence is checked at load).
    pub dirs: Vec<DirGrant>,
    /// Size cap of the per-job scratch `/tmp`, if granted.
    pub scratch: Option<u64>,
    /// The guest's whole environment.
    pub env: BTreeMap<String, String>,
}

impl Capabilities {
    /// One line naming every grant, for deploy records and listings. Env
    /// values are never included (they may be secrets), only their names.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.may_enqueue.is_empty() {
            parts.push(format!("may_enqueue={}", self.may_enqueue.join(",")));
        }
        if !self.http.is_empty() {
            let origins: Vec<String> = self.http.iter().map(ToString::to_string).collect();
            parts.push(format!("http={}", origins.join(",")));
        }
        for dir in &self.dirs {
            let mode = match dir.mode {
                DirMode::ReadOnly => "ro",
                DirMode::ReadWrite => "rw",
            };
            parts.push(format!("dir={}:{}:{mode}", dir.host.display(), dir.guest));
        }
        if let Some(bytes) = self.scratch {
            parts.push(format!("scratch={}", crate::units::ByteSize(bytes)));
        }
        if !self.env.is_empty() {
            let names: Vec<&str> = self.env.keys().map(String::as_str).collect();
            parts.push(format!("env={}", names.join(",")));
        }
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(" ")
        }
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capabilities")
            .field("may_enqueue", &self.may_enqueue)
            .field("http", &self.http)
            .field("dirs", &self.dirs)
            .field("scratch", &self.scratch)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A validated manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The manifest file it came from.
    pub path: PathBuf,
    /// The job types this module handles (non-empty, unique).
    pub job_types: Vec<String>,
    /// Simultaneously running jobs per type on one host.
    pub concurrency: usize,
    /// Wall-clock deadline per run.
    pub timeout: Duration,
    /// Attempt budget for jobs enqueued without one; `None` uses the host default.
    pub max_attempts: Option<u32>,
    /// Lease length with renewal; `None` means `timeout + lease_grace`.
    pub lease_duration: Option<Duration>,
    /// Guard: one running job per scope at a time.
    pub serialize_by_scope: bool,
    /// Guard: not while these types hold live leases.
    pub not_while_running: Vec<String>,
    /// Guard: not while these types have due or running work.
    pub waits_for: Vec<String>,
    /// The payload JSON Schema, loaded from `payload_schema`.
    pub payload_schema: Option<serde_json::Value>,
    /// Required sha256 of the module bytes (lowercase hex).
    pub sha256: Option<String>,
    /// Per-job limits.
    pub limits: Limits,
    /// Granted capabilities.
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

        let job_types = match (handler.job_type, handler.job_types) {
            (Some(one), None) => vec![one],
            (None, Some(many)) => many,
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "set either handler.job_type or handler.job_types, not both".into(),
                ))
            }
            (None, None) => {
                return Err(invalid(
                    "handler.job_type is missing: name the job type this module handles".into(),
                ))
            }
        };
        if job_types.is_empty() {
            return Err(invalid(
                "handler.job_types is empty: list at least one job type".into(),
            ));
        }
        let mut seen = BTreeSet::new();
        for job_type in &job_types {
            check_name("handler.job_type", job_type).map_err(invalid)?;
            if !seen.insert(job_type) {
                return Err(invalid(format!(
                    "handler.job_types lists `{job_type}` twice"
                )));
            }
        }

        let concurrency = positive("handler.concurrency", handler.concurrency)
            .map_err(invalid)?
            .unwrap_or(DEFAULT_CONCURRENCY as u64) as usize;
        let max_attempts = positive("handler.max_attempts", handler.max_attempts)
            .map_err(invalid)?
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        let timeout = handler.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0);
        if timeout.is_zero() {
            return Err(invalid(
                "handler.timeout must be positive, e.g. \"30s\"".into(),
            ));
        }
        at_most(timeout, MAX_HANDLER_TIMEOUT)
            .map_err(|m| invalid(format!("handler.timeout: {m}")))?;
        let lease_duration = handler.lease_duration.map(|d| d.0);
        if lease_duration.is_some_and(|d| d.is_zero()) {
            return Err(invalid(
                "handler.lease_duration must be positive, e.g. \"30s\"".into(),
            ));
        }
        if let Some(lease) = lease_duration {
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

        let payload_schema = match handler.payload_schema {
            None => None,
            Some(schema_path) => Some(load_schema(path, &schema_path).map_err(invalid)?),
        };
        let sha256 = match handler.sha256 {
            None => None,
            Some(pin) => {
                let pin = pin.trim().to_ascii_lowercase();
                if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(invalid(
                        "handler.sha256 must be 64 hex digits (the output of `sha256sum MODULE.wasm`)"
                            .into(),
                    ));
                }
                Some(pin)
            }
        };

        let limits = raw.limits;
        let limits = Limits {
            memory: limits.memory.map_or(DEFAULT_MEMORY, |b| b.0),
            fuel: limits.fuel.filter(|fuel| *fuel > 0),
            max_result: limits.max_result.map_or(DEFAULT_MAX_RESULT, |b| b.0),
            max_log: limits.max_log.map_or(DEFAULT_MAX_LOG, |b| b.0),
            max_progress: limits.max_progress.map_or(DEFAULT_MAX_PROGRESS, |b| b.0),
            max_enqueues: positive("limits.max_enqueues", limits.max_enqueues)
                .map_err(invalid)?
                .map_or(DEFAULT_MAX_ENQUEUES, |n| {
                    u32::try_from(n).unwrap_or(u32::MAX)
                }),
            max_http_body: limits.max_http_body.map_or(DEFAULT_MAX_HTTP_BODY, |b| b.0),
            enqueue: enqueue_bounds(&limits).map_err(invalid)?,
        };
        if limits.max_http_body == 0 {
            return Err(invalid(
                "limits.max_http_body must be positive, e.g. \"4MiB\"".into(),
            ));
        }
        if limits.memory < 1024 * 1024 {
            return Err(invalid(
                "limits.memory must be at least 1MiB; a component needs memory to start".into(),
            ));
        }

        for name in &raw.capabilities.may_enqueue {
            check_name("capabilities.may_enqueue", name).map_err(invalid)?;
        }
        let capabilities = capabilities(raw.capabilities).map_err(invalid)?;

        Ok(Self {
            path: path.to_path_buf(),
            job_types,
            concurrency,
            timeout,
            max_attempts,
            lease_duration,
            serialize_by_scope: handler.serialize_by_scope,
            not_while_running: handler.not_while_running,
            waits_for: handler.waits_for,
            payload_schema,
            sha256,
            limits,
            capabilities,
        })
    }
}

/// Parses and checks `[capabilities]` (directory existence is left to load
/// time: a directory may be mounted after the manifest is written).
fn capabilities(raw: RawCapabilities) -> Result<Capabilities, String> {
    let http = raw
        .http
        .iter()
        .map(|o| HttpOrigin::parse(o).map_err(|e| format!("capabilities.http: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let dirs = raw
        .dirs
        .into_iter()
        .map(|d| {
            let mode = match d.mode.as_deref() {
                None | Some("ro") => DirMode::ReadOnly,
                Some("rw") => DirMode::ReadWrite,
                Some(other) => {
                    return Err(format!(
                        "capabilities.dirs: mode `{}` for {} must be \"ro\" or \"rw\"",
                        other.escape_debug(),
                        d.guest.escape_debug()
                    ))
                }
            };
            Ok(DirGrant {
                host: d.host,
                guest: d.guest,
                mode,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let caps = Capabilities {
        may_enqueue: raw.may_enqueue,
        http,
        dirs,
        scratch: raw.scratch.map(|b| b.0),
        env: raw.env,
    };
    let form = boxcar_sandbox::Capabilities {
        dirs: caps.dirs.clone(),
        scratch: caps.scratch,
        env: caps.env.clone(),
        ..boxcar_sandbox::Capabilities::default()
    };
    form.validate_form().map_err(|e| match e {
        SandboxError::Capabilities(m) => format!("capabilities.{m}"),
        other => other.to_string(),
    })?;
    Ok(caps)
}

/// `[limits] enqueue_*`: the bounds on a guest's enqueues (defaults in
/// [`EnqueueBounds`]).
fn enqueue_bounds(limits: &RawLimits) -> Result<EnqueueBounds, String> {
    let defaults = EnqueueBounds::default();
    let priority = match limits.enqueue_priority {
        None => defaults.priority,
        Some((low, high)) => {
            let fit = |n: i64| {
                i32::try_from(n)
                    .map_err(|_| format!("limits.enqueue_priority: {n} is not a 32-bit priority"))
            };
            fit(low)?..=fit(high)?
        }
    };
    let max_attempts = positive("limits.enqueue_max_attempts", limits.enqueue_max_attempts)?
        .map_or(defaults.max_attempts, |n| {
            u32::try_from(n).unwrap_or(u32::MAX)
        });
    let max_delay = limits.enqueue_max_delay.map_or(defaults.max_delay, |d| d.0);
    let bounds = EnqueueBounds::new(priority, max_attempts, max_delay);
    bounds
        .validate()
        .map_err(|(key, reason)| format!("limits.{key}: {reason}"))?;
    Ok(bounds)
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
        Some(n) if n >= 1 => Ok(Some(n as u64)),
        Some(n) => Err(format!("{key} must be a positive integer, got {n}")),
    }
}

fn load_schema(manifest: &Path, schema: &Path) -> Result<serde_json::Value, String> {
    let full = manifest.parent().unwrap_or(Path::new(".")).join(schema);
    let text = std::fs::read_to_string(&full).map_err(|error| {
        format!(
            "handler.payload_schema: cannot read {}: {error}",
            full.display()
        )
    })?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|error| {
        format!(
            "handler.payload_schema: {} is not JSON: {error}",
            full.display()
        )
    })?;
    jsonschema::validator_for(&value).map_err(|error| {
        format!(
            "handler.payload_schema: {} is not a valid JSON Schema: {error}",
            full.display()
        )
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(Path::new("handlers/x.toml"), text)
    }

    #[test]
    fn minimal_manifest_gets_defaults() {
        let manifest = parse("[handler]\njob_type = \"echo\"\n").expect("valid");
        assert_eq!(manifest.job_types, vec!["echo"]);
        assert_eq!(manifest.concurrency, DEFAULT_CONCURRENCY);
        assert_eq!(manifest.timeout, DEFAULT_TIMEOUT);
        assert_eq!(manifest.limits.memory, DEFAULT_MEMORY);
        assert_eq!(manifest.limits.fuel, None);
        assert!(manifest.capabilities.may_enqueue.is_empty());
        assert_eq!(manifest.limits.enqueue, EnqueueBounds::default());
    }

    #[test]
    fn enqueue_bounds_and_duration_caps() {
        let manifest = parse(
            "[handler]\njob_type = \"a\"\ntimeout = \"24h\"\nlease_duration = \"24h\"\n[limits]\nenqueue_priority = [-5, 5]\nenqueue_max_attempts = 4\nenqueue_max_delay = \"1h\"\n",
        )
        .expect("valid");
        assert_eq!(manifest.timeout, MAX_HANDLER_TIMEOUT);
        assert_eq!(
            manifest.limits.enqueue,
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
        assert_eq!(manifest.concurrency, 2);
        assert_eq!(manifest.timeout, Duration::from_secs(5));
        assert_eq!(manifest.max_attempts, Some(7));
        assert_eq!(manifest.lease_duration, Some(Duration::from_secs(30)));
        assert!(manifest.serialize_by_scope);
        assert_eq!(manifest.limits.memory, 32 * 1024 * 1024);
        assert_eq!(manifest.limits.fuel, Some(1000));
        assert_eq!(manifest.limits.max_progress, 512);
        assert_eq!(manifest.limits.max_enqueues, 3);
        assert_eq!(manifest.capabilities.may_enqueue, vec!["e"]);
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
    fn capabilities_parse() {
        let manifest = parse(
            r#"
            [handler]
            job_type = "a"
            [limits]
            max_http_body = "1MiB"
            [capabilities]
            http = ["https://api.example.com", "http://127.0.0.1:8089", "https://*.example.org"]
            dirs = [
                { host = "/srv/media", guest = "/media", mode = "ro" },
                { host = "/srv/out", guest = "/out", mode = "rw" },
                { host = "/srv/default", guest = "/default" },
            ]
            scratch = "64MiB"
            env = { API_BASE = "https://api.example.com", TOKEN = "hunter2" }
            may_enqueue = ["article.audio"]
            "#,
        )
        .expect("valid");
        let caps = &manifest.capabilities;
        let http: Vec<String> = caps.http.iter().map(ToString::to_string).collect();
        assert_eq!(
            http,
            vec![
                "https://api.example.com:443",
                "http://127.0.0.1:8089",
                "https://*.example.org:443"
            ]
        );
        assert_eq!(caps.dirs.len(), 3);
        assert_eq!(caps.dirs[0].guest, "/media");
        assert_eq!(caps.dirs[0].mode, DirMode::ReadOnly);
        assert_eq!(caps.dirs[1].mode, DirMode::ReadWrite);
        assert_eq!(caps.dirs[2].mode, DirMode::ReadOnly);
        assert_eq!(caps.scratch, Some(64 * 1024 * 1024));
        assert_eq!(caps.env["TOKEN"], "hunter2");
        assert_eq!(manifest.limits.max_http_body, 1024 * 1024);
        let shown = format!("{manifest:?}");
        assert!(
            shown.contains("TOKEN") && !shown.contains("hunter2"),
            "{shown}"
        );
        // Directories need not exist yet: that is checked at load.
        assert_eq!(caps.dirs[0].host, Path::new("/srv/media"));
    }

    #[test]
    fn bad_capabilities_are_refused_with_the_key() {
        let caps = |body: &str| format!("[handler]\njob_type = \"a\"\n[capabilities]\n{body}\n");
        for (body, expect) in [
            (r#"http = ["api.example.com"]"#, "capabilities.http"),
            (r#"http = ["ftp://x"]"#, "capabilities.http"),
            (r#"http = ["https://x/path"]"#, "capabilities.http"),
            (r#"http = ["https://x:0"]"#, "capabilities.http"),
            (
                r#"dirs = [{ host = "/srv", guest = "/m", mode = "rx" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "srv", guest = "/m" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "/srv", guest = "m" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "/srv", guest = "/m/../etc" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "/a", guest = "/m" }, { host = "/b", guest = "/m" }]"#,
                "twice",
            ),
            (
                "scratch = \"1MiB\"\ndirs = [{ host = \"/a\", guest = \"/tmp\" }]",
                "twice",
            ),
            (
                r#"dirs = [{ host = "/a", guest = "/m", extra = 1 }]"#,
                "extra",
            ),
            ("scratch = \"0\"", "capabilities.scratch"),
            (r#"env = { "A=B" = "x" }"#, "capabilities.env"),
            ("network = true", "network"),
        ] {
            let error = parse(&caps(body)).unwrap_err().to_string();
            assert!(error.contains(expect), "{body:?} gave {error}");
            assert!(error.contains("handlers/x.toml"), "{error}");
        }
        let error = parse("[handler]\njob_type = \"a\"\n[limits]\nmax_http_body = \"0\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("limits.max_http_body"), "{error}");
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
        std::fs::write(dir.path().join("bad.json"), r#"{"type": 12}"#).expect("write");
        let error = Manifest::parse(
            &dir.path().join("h.toml"),
            "[handler]\njob_type = \"a\"\npayload_schema = \"bad.json\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("not a valid JSON Schema"), "{error}");
    }
}

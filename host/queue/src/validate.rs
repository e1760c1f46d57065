//! Enqueue validation, once, before anything is stored: a job has a
//! non-blank type; its payload is a JSON object within the size and depth
//! limits, with finite numbers (and matches its type's schema when one is
//! set); `max_attempts` is positive; a delay or TTL is at most about 100
//! years and `run_at` / `expires_at` fall in the years 1970..=9999; scope
//! parts and a dedupe key are non-empty identifiers (below). Every rule is a
//! distinct [`EnqueueError`] variant naming the job type and the category
//! of the problem.
//!
//! Invariant: no message built here contains payload text or payload values;
//! payload problems are described by category and, for schema failures, by
//! JSON pointer only. A job type that is itself unusable is shown escaped
//! and shortened.
//!
//! Text fields are identifiers, stored in `text` columns and shown in
//! terminals: a job type and a scope type are at most [`MAX_NAME_BYTES`], a
//! scope id, dedupe key and parent id at most [`MAX_KEY_BYTES`], none holds
//! a control character (NUL, escape sequences, line breaks), and dedupe keys
//! beginning with [`RESERVED_DEDUPE_PREFIX`] are the host's own (a running
//! job's enqueues are namespaced there).

use serde_json::Value;

use crate::job::NewJob;

/// Longest job type or scope type, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest scope id, dedupe key or parent id, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Dedupe keys beginning with this are reserved for the host.
pub const RESERVED_DEDUPE_PREFIX: &str = "boxcar:";

/// Bounds on what a payload may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PayloadLimits {
    /// Largest payload text in bytes (default 1 MiB).
    pub max_bytes: usize,
    /// Deepest nesting of arrays/objects (default 64).
    pub max_depth: usize,
}

impl PayloadLimits {
    /// Default payload size bound: 1 MiB.
    pub const DEFAULT_MAX_BYTES: usize = 1024 * 1024;
    /// Default nesting bound.
    pub const DEFAULT_MAX_DEPTH: usize = 64;
}

impl Default for PayloadLimits {
    fn default() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            max_depth: Self::DEFAULT_MAX_DEPTH,
        }
    }
}

/// Why an enqueue was refused. Never contains payload text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The job type is empty.
    #[error("job type is empty: give every job a non-empty type")]
    EmptyJobType,
    /// The dedupe key is present but empty.
    #[error("job `{job_type}`: dedupe key is empty; omit it or give a non-empty key")]
    EmptyDedupeKey {
        /// The job type.
        job_type: String,
    },
    /// A scope part is empty.
    #[error("job `{job_type}`: scope {part} is empty; scopes need a non-empty type and id")]
    EmptyScope {
        /// The job type.
        job_type: String,
        /// `type` or `id`.
        part: &'static str,
    },
    /// `max_attempts` is zero.
    #[error("job `{job_type}`: max_attempts must be a positive integer (got 0)")]
    InvalidMaxAttempts {
        /// The job type.
        job_type: String,
    },
    /// The `traceparent` is not a W3C trace context.
    #[error("job `{job_type}`: {error}")]
    InvalidTraceparent {
        /// The job type.
        job_type: String,
        /// What is wrong with it.
        error: crate::trace_context::InvalidTraceparent,
    },
    /// `run_at` + delay or the expiry is out of range.
    #[error("job `{job_type}`: {field} is not a valid time (out of range)")]
    InvalidTime {
        /// The job type.
        job_type: String,
        /// `run_at`, `delay`, `expires_at` or `ttl`.
        field: &'static str,
    },
    /// The payload is not JSON.
    #[error("job `{job_type}`: payload is not valid JSON ({category}); send a JSON object")]
    PayloadNotJson {
        /// The job type.
        job_type: String,
        /// syntax, eof, data (no payload content).
        category: &'static str,
    },
    /// The payload is JSON but not an object.
    #[error("job `{job_type}`: payload must be a JSON object, got {kind}")]
    PayloadNotObject {
        /// The job type.
        job_type: String,
        /// array, string, number, bool, null.
        kind: &'static str,
    },
    /// The payload is larger than the configured bound.
    #[error("job `{job_type}`: payload is {size} bytes, over the {limit}-byte limit; store large data elsewhere and pass a reference")]
    PayloadTooLarge {
        /// The job type.
        job_type: String,
        /// Payload size in bytes.
        size: usize,
        /// The bound.
        limit: usize,
    },
    /// The payload nests deeper than allowed.
    #[error("job `{job_type}`: payload nests deeper than {limit} levels")]
    PayloadTooDeep {
        /// The job type.
        job_type: String,
        /// The bound.
        limit: usize,
    },
    /// The payload holds a number that does not round-trip (NaN, infinity, overflow).
    #[error("job `{job_type}`: payload holds a non-finite number; encode it as a string")]
    PayloadNonFinite {
        /// The job type.
        job_type: String,
    },
    /// No handler is deployed for the type and it is not declared as handled elsewhere.
    #[error(
        "unknown job type `{job_type}`: deploy a handler for it or declare it as handled elsewhere"
    )]
    UnknownJobType {
        /// The job type.
        job_type: String,
    },
    /// The payload does not satisfy the handler's JSON Schema.
    #[error("job `{job_type}`: payload does not match the schema at `{pointer}`: {reason}")]
    SchemaViolation {
        /// The job type.
        job_type: String,
        /// JSON pointer of the failing value in the payload.
        pointer: String,
        /// The schema keyword that failed (never the value).
        reason: String,
    },
    /// A text field is too long or holds a control character.
    #[error("job `{job_type}`: {field} {problem}")]
    UnusableText {
        /// The job type (escaped and shortened when it is the problem).
        job_type: String,
        /// `job type`, `scope type`, `scope id`, `dedupe key` or `parent id`.
        field: &'static str,
        /// What is wrong, without the text itself.
        problem: String,
    },
    /// The dedupe key uses the host's reserved prefix.
    #[error("job `{job_type}`: dedupe keys beginning with `{RESERVED_DEDUPE_PREFIX}` are reserved for the host (jobs enqueued by running handlers); choose another key")]
    ReservedDedupeKey {
        /// The job type.
        job_type: String,
    },
    /// The parent job of a flow does not exist.
    #[error("job `{job_type}`: parent job `{parent_id}` does not exist")]
    UnknownParent {
        /// The job type.
        job_type: String,
        /// The missing parent id.
        parent_id: String,
    },
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn depth_ok(v: &Value, left: usize) -> bool {
    match v {
        Value::Array(items) => left > 0 && items.iter().all(|i| depth_ok(i, left - 1)),
        Value::Object(map) => left > 0 && map.values().all(|i| depth_ok(i, left - 1)),
        _ => true,
    }
}

fn finite(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_f64().is_none_or(f64::is_finite),
        Value::Array(items) => items.iter().all(finite),
        Value::Object(map) => map.values().all(finite),
        _ => true,
    }
}

/// Checks a payload's text against the limits; returns the parsed object.
///
/// # Errors
/// One [`EnqueueError`] naming the job type and the payload problem.
pub fn check_payload(
    job_type: &str,
    payload: &str,
    limits: &PayloadLimits,
) -> Result<Value, EnqueueError> {
    let job_type = job_type.to_string();
    if payload.len() > limits.max_bytes {
        return Err(EnqueueError::PayloadTooLarge {
            job_type,
            size: payload.len(),
            limit: limits.max_bytes,
        });
    }
    // serde_json refuses nesting beyond 128 by itself; report that as depth.
    let value: Value = match serde_json::from_str(payload) {
        Ok(v) => v,
        Err(e) if e.to_string().contains("recursion limit") => {
            return Err(EnqueueError::PayloadTooDeep {
                job_type,
                limit: limits.max_depth,
            })
        }
        Err(e) if e.to_string().contains("number out of range") => {
            return Err(EnqueueError::PayloadNonFinite { job_type })
        }
        Err(e) => {
            let category = match e.classify() {
                serde_json::error::Category::Io => "io",
                serde_json::error::Category::Syntax => "syntax error",
                serde_json::error::Category::Data => "data error",
                serde_json::error::Category::Eof => "unexpected end",
            };
            return Err(EnqueueError::PayloadNotJson { job_type, category });
        }
    };
    if !value.is_object() {
        return Err(EnqueueError::PayloadNotObject {
            job_type,
            kind: kind_of(&value),
        });
    }
    if !depth_ok(&value, limits.max_depth) {
        return Err(EnqueueError::PayloadTooDeep {
            job_type,
            limit: limits.max_depth,
        });
    }
    if !finite(&value) {
        return Err(EnqueueError::PayloadNonFinite { job_type });
    }
    Ok(value)
}

/// Why `text` is not a usable identifier of at most `max` bytes.
pub(crate) fn text_problem(text: &str, max: usize) -> Option<String> {
    if text.len() > max {
        return Some(format!(
            "is {} bytes, over the {max}-byte limit",
            text.len()
        ));
    }
    text.chars().any(char::is_control).then(|| {
        "contains a control character (NUL, escape, line break, ...); use printable text"
            .to_string()
    })
}

/// A job type fit for an error message: escaped, at most 64 characters.
fn shown(job_type: &str) -> String {
    let escaped: String = job_type.escape_debug().collect();
    if escaped.chars().count() > 64 {
        format!("{}…", escaped.chars().take(64).collect::<String>())
    } else {
        escaped
    }
}

/// Checks the identifiers of a new job (see the module docs).
fn check_text(job: &NewJob) -> Result<(), EnqueueError> {
    if let Some(problem) = text_problem(&job.job_type, MAX_NAME_BYTES) {
        return Err(EnqueueError::UnusableText {
            job_type: shown(&job.job_type),
            field: "job type",
            problem,
        });
    }
    let scope = job.scope.as_ref();
    let fields = [
        (
            "scope type",
            scope.map(|s| s.scope_type.as_str()),
            MAX_NAME_BYTES,
        ),
        (
            "scope id",
            scope.map(|s| s.scope_id.as_str()),
            MAX_KEY_BYTES,
        ),
        ("dedupe key", job.dedupe_key.as_deref(), MAX_KEY_BYTES),
        ("parent id", job.parent_id.as_deref(), MAX_KEY_BYTES),
    ];
    for (field, text, max) in fields {
        if let Some(problem) = text.and_then(|t| text_problem(t, max)) {
            return Err(EnqueueError::UnusableText {
                job_type: job.job_type.clone(),
                field,
                problem,
            });
        }
    }
    if job
        .dedupe_key
        .as_deref()
        .is_some_and(|k| k.starts_with(RESERVED_DEDUPE_PREFIX))
    {
        return Err(EnqueueError::ReservedDedupeKey {
            job_type: job.job_type.clone(),
        });
    }
    Ok(())
}

/// Checks the non-payload fields of a new job.
///
/// # Errors
/// The first rule the job breaks.
pub fn check_fields(job: &NewJob) -> Result<(), EnqueueError> {
    if job.job_type.trim().is_empty() {
        return Err(EnqueueError::EmptyJobType);
    }
    check_text(job)?;
    let job_type = || job.job_type.clone();
    if job.dedupe_key.as_deref().is_some_and(|k| k.is_empty()) {
        return Err(EnqueueError::EmptyDedupeKey {
            job_type: job_type(),
        });
    }
    if let Some(scope) = &job.scope {
        if scope.scope_type.is_empty() {
            return Err(EnqueueError::EmptyScope {
                job_type: job_type(),
                part: "type",
            });
        }
        if scope.scope_id.is_empty() {
            return Err(EnqueueError::EmptyScope {
                job_type: job_type(),
                part: "id",
            });
        }
    }
    if job.max_attempts == Some(0) {
        return Err(EnqueueError::InvalidMaxAttempts {
            job_type: job_type(),
        });
    }
    let bad_duration = |d: Option<std::time::Duration>| {
        d.is_some_and(|d| chrono::Duration::from_std(d).is_err() || d > crate::bounds::MAX_HORIZON)
    };
    if bad_duration(job.delay) {
        return Err(EnqueueError::InvalidTime {
            job_type: job_type(),
            field: "delay",
        });
    }
    if bad_duration(job.ttl) {
        return Err(EnqueueError::InvalidTime {
            job_type: job_type(),
            field: "ttl",
        });
    }
    let year_ok = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.is_none_or(|t| (1970..=9999).contains(&chrono::Datelike::year(&t)))
    };
    if !year_ok(job.run_at) {
        return Err(EnqueueError::InvalidTime {
            job_type: job_type(),
            field: "run_at",
        });
    }
    if !year_ok(job.expires_at) {
        return Err(EnqueueError::InvalidTime {
            job_type: job_type(),
            field: "expires_at",
        });
    }
    if let Some(traceparent) = &job.traceparent {
        crate::trace_context::TraceParent::parse(traceparent).map_err(|error| {
            EnqueueError::InvalidTraceparent {
                job_type: job_type(),
                error,
            }
        })?;
    }
    Ok(())
}

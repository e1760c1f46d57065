//! Request bodies of the HTTP API and their translation into queue calls.
//! Unknown fields are refused so a typo is an error, not a silent default.

use std::time::Duration;

use boxcar_queue::{JobFilter, NewJob, Scope};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::ApiError;
use crate::units::parse_duration;

/// `POST /jobs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    job_type: String,
    #[serde(default = "empty_object")]
    payload: Value,
    scope: Option<Scope>,
    dedupe_key: Option<String>,
    max_attempts: Option<u32>,
    /// e.g. `"10s"`.
    delay: Option<String>,
    run_at: Option<DateTime<Utc>>,
    #[serde(default)]
    priority: i32,
    /// e.g. `"1h"`: the job must start within this long.
    ttl: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    /// Children of a flow: they run first; this job runs when all are done.
    #[serde(default)]
    children: Vec<EnqueueRequest>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn duration_field(name: &str, text: Option<String>) -> Result<Option<Duration>, ApiError> {
    text.map(|t| {
        parse_duration(&t).map_err(|m| ApiError::bad_request("invalid_job", format!("{name}: {m}")))
    })
    .transpose()
}

impl EnqueueRequest {
    /// The job and its children (empty unless this is a flow).
    ///
    /// # Errors
    /// A malformed field (durations); the queue validates the rest.
    pub fn into_jobs(self) -> Result<(NewJob, Vec<NewJob>), ApiError> {
        let mut children = Vec::with_capacity(self.children.len());
        for child in self.children {
            if !child.children.is_empty() {
                return Err(ApiError::bad_request(
                    "invalid_job",
                    "children cannot have children of their own; enqueue nested flows separately",
                ));
            }
            children.push(child.into_jobs()?.0);
        }
        let mut job = NewJob::new(self.job_type, &self.payload);
        job.scope = self.scope;
        job.dedupe_key = self.dedupe_key;
        job.max_attempts = self.max_attempts;
        job.delay = duration_field("delay", self.delay)?;
        job.run_at = self.run_at;
        job.priority = self.priority;
        job.ttl = duration_field("ttl", self.ttl)?;
        job.expires_at = self.expires_at;
        Ok((job, children))
    }
}

/// The request's `traceparent` header, if any (checked at enqueue).
///
/// # Errors
/// The header is not text, or appears more than once.
pub fn traceparent(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("traceparent").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "invalid_traceparent",
            "more than one traceparent header; send one W3C trace context",
        ));
    }
    let text = value.to_str().map_err(|_| {
        ApiError::bad_request(
            "invalid_traceparent",
            "the traceparent header is not ASCII text; send a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)",
        )
    })?;
    Ok(Some(text.to_string()))
}

/// `POST /jobs/{id}/cancel` and `POST /scopes/{type}/{id}/cancel`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Stored as the job's last error.
    pub reason: Option<String>,
    /// Scope cancel only: leave running jobs alone.
    #[serde(default)]
    pub pending_only: bool,
}

/// `POST /jobs/{id}/retry`: no fields; the body is `{}` or empty.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RetryJobRequest {}

/// `POST /jobs/retry-failed`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    #[serde(default)]
    types: Vec<String>,
    scope: Option<Scope>,
    limit: Option<u32>,
    offset: Option<u32>,
}

impl RetryRequest {
    /// The filter of failed jobs to retry.
    ///
    /// # Errors
    /// Never today; kept fallible for future fields.
    pub fn into_filter(self) -> Result<JobFilter, ApiError> {
        let mut filter = JobFilter::default();
        filter.types = self.types;
        filter.scope = self.scope;
        filter.limit = self.limit;
        filter.offset = self.offset;
        Ok(filter)
    }
}

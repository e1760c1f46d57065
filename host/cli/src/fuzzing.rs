//! Entry points for the fuzz targets (`host/fuzz-targets`, run by `fuzz/`):
//! each runs one of this crate's real parsers or validators on fuzzer input
//! and reports what the caller would see. Not part of the supported API.
//!
//! Invariants: every function here returns for every input (a panic is a
//! bug in the code it calls); none touches the network or writes a file.
//! The HTTP functions run the same extractor (`axum::Json`, `Query`) and the
//! same translation the handlers run, stopping where the handler would call
//! the store; an error is reported as the HTTP status it would answer.

use std::{path::Path, time::Duration};

use axum::{
    extract::Query,
    http::{HeaderMap, HeaderValue, Uri},
    response::IntoResponse,
    Json,
};
use boxcar_queue::{PayloadValidator, Queue};
use serde_json::Value;

use crate::api::{
    self,
    error::ApiError,
    history::LogsQuery,
    requests::{CancelRequest, EnqueueRequest, RetryRequest},
    ListQuery, WaitQuery,
};

/// Parses and validates `text` as the manifest `/nonexistent/fuzz.toml`
/// (a relative `payload_schema` then names no file).
///
/// # Errors
/// The manifest's error message.
pub fn manifest(text: &str) -> Result<(), String> {
    crate::manifest::Manifest::parse(Path::new("/nonexistent/fuzz.toml"), text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Parses and validates `text` as `boxcar.toml` (its `[[schedules]]`
/// included), then re-validates it as `serve` does after flags.
///
/// # Errors
/// The configuration's error message.
pub fn config(text: &str) -> Result<(), String> {
    let config =
        crate::config::Config::parse(Path::new("boxcar.toml"), text).map_err(|e| e.to_string())?;
    config.validate().map_err(|e| e.to_string())
}

/// A duration as manifests, the configuration and the API parse it.
///
/// # Errors
/// The message that quotes the text.
pub fn duration(text: &str) -> Result<Duration, String> {
    crate::units::parse_duration(text)
}

/// A byte size as manifests and the configuration parse it, shown back as
/// the host prints it.
///
/// # Errors
/// The message that quotes the text.
pub fn byte_size(text: &str) -> Result<String, String> {
    crate::units::parse_bytes(text).map(|n| crate::units::ByteSize(n).to_string())
}

/// Compiles `schema` as a manifest's `payload_schema` and checks `payload`
/// against it; `Ok(false)` when the schema itself is refused.
///
/// # Errors
/// The payload fails the schema: the JSON pointer and the rule.
pub fn payload_schema(schema: &Value, payload: &Value) -> Result<bool, String> {
    let Ok(validator) = crate::schema::JsonSchemaValidator::new(schema) else {
        return Ok(false);
    };
    validator
        .validate(payload)
        .map(|()| true)
        .map_err(|f| format!("{}: {}", f.pointer, f.reason))
}

/// What the API answers for a request: `Ok` where the handler would go on
/// to the store, or the status and body of its error.
pub type ApiAnswer = Result<(), (u16, String)>;

fn answer(error: ApiError) -> (u16, String) {
    let shown = format!("{error:?}");
    (error.into_response().status().as_u16(), shown)
}

/// `POST /jobs` with `body` and optional `traceparent` header bytes: the
/// JSON extractor, the flow translation and `queue`'s enqueue checks for
/// the job and each child.
///
/// # Errors
/// The status and code the API answers.
pub fn enqueue_body(queue: &Queue, body: &[u8], traceparent: Option<&[u8]>) -> ApiAnswer {
    let run = || -> Result<(), ApiError> {
        let Json(request) = Json::<EnqueueRequest>::from_bytes(body)?;
        let mut headers = HeaderMap::new();
        if let Some(value) = traceparent.and_then(|t| HeaderValue::from_bytes(t).ok()) {
            headers.insert("traceparent", value);
        }
        let traceparent = api::requests::traceparent(&headers)?;
        let (mut job, children) = request.into_jobs()?;
        job.traceparent = traceparent;
        queue.prepare(job).map_err(ApiError::from)?;
        for child in children {
            queue.prepare(child).map_err(ApiError::from)?;
        }
        Ok(())
    };
    run().map_err(answer)
}

/// The query string of `GET /jobs`, `GET /jobs/{id}/wait` or
/// `GET /jobs/{id}/logs` (`route` 0, 1 or 2), parsed by the extractor
/// and translated as the handler does. A query that is not a valid URI
/// never reaches the API and counts as `Ok`.
///
/// # Errors
/// The status and code the API answers.
pub fn query(route: u8, query: &str) -> ApiAnswer {
    let Ok(uri) = Uri::try_from(format!("/jobs?{query}")) else {
        return Ok(());
    };
    let bad = |e: axum::extract::rejection::QueryRejection| {
        ApiError::bad_request("bad_query", e.body_text())
    };
    let run = || -> Result<(), ApiError> {
        match route % 3 {
            0 => {
                let Query(q) = Query::<ListQuery>::try_from_uri(&uri).map_err(bad)?;
                api::list_filter(q).map(|_| ())
            }
            1 => {
                let Query(q) = Query::<WaitQuery>::try_from_uri(&uri).map_err(bad)?;
                api::wait_timeout(q).map(|_| ())
            }
            _ => {
                let Query(q) = Query::<LogsQuery>::try_from_uri(&uri).map_err(bad)?;
                let _ = api::history::log_query("job".into(), q);
                Ok(())
            }
        }
    };
    run().map_err(answer)
}

/// The body of `POST /jobs/{id}/cancel` (`retry` false) or
/// `POST /jobs/retry-failed` (`retry` true), with the handlers' checks.
///
/// # Errors
/// The status and code the API answers.
pub fn optional_body(retry: bool, body: &[u8]) -> ApiAnswer {
    let run = || -> Result<(), ApiError> {
        if retry {
            let request: RetryRequest = api::optional_body(body)?;
            let filter = request.into_filter()?;
            let scope = filter.scope.iter();
            let scope = scope.flat_map(|s| [s.scope_type.as_str(), s.scope_id.as_str()]);
            api::filter_text(
                "bad_json",
                "the filter",
                filter.types.iter().map(String::as_str).chain(scope),
            )
        } else {
            let request: CancelRequest = api::optional_body(body)?;
            api::filter_text("bad_json", "the reason", request.reason.as_deref())
        }
    };
    run().map_err(answer)
}

//! `POST /jobs/batch`: many jobs in one request and one transaction, as a
//! JSON array of enqueue requests or as NDJSON (one request per line,
//! `Content-Type: application/x-ndjson`).
//!
//! Invariants:
//! - Every item is parsed and validated on its own: a malformed or invalid
//!   item is answered with its own `{error, message}` and does not keep the
//!   others out. The valid ones are inserted in one transaction: all of
//!   them or (a store failure, `500`) none.
//! - The answer lists one entry per item, in order; its status is `201`
//!   when every item was accepted, `200` when some were refused.
//! - At most [`MAX_BATCH`] items; flows (`children`) go through `POST /jobs`.

use axum::{
    body::Bytes,
    extract::{rejection::BytesRejection, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use boxcar_queue::NewJob;
use serde_json::{json, Value};

use super::{requests, requests::EnqueueRequest, ApiError, AppState};

/// Most jobs one batch may hold.
pub const MAX_BATCH: usize = 10_000;

/// One item of a batch after parsing: a job, or why it was refused.
pub type Parsed = Result<NewJob, ApiError>;

/// Whether the body is NDJSON (else it must be a JSON array).
fn is_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/x-ndjson"))
}

fn too_many(count: usize) -> ApiError {
    ApiError::bad_request(
        "batch_too_large",
        format!("the batch holds {count} jobs; send at most {MAX_BATCH} per request"),
    )
}

/// One item from its JSON value.
fn item(value: Value, position: usize) -> Parsed {
    let request: EnqueueRequest = serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request("invalid_job", format!("item {position}: {e}")))?;
    let (job, children) = request.into_jobs()?;
    if !children.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_job",
            format!("item {position}: a batch holds no flows; enqueue a job with children through POST /jobs"),
        ));
    }
    Ok(job)
}

/// The items of a JSON array body.
fn from_array(body: &[u8]) -> Result<Vec<Parsed>, ApiError> {
    let values: Vec<Value> = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(
            "bad_json",
            format!("the body is not a JSON array of jobs ({e}); for NDJSON send Content-Type: application/x-ndjson"),
        )
    })?;
    if values.len() > MAX_BATCH {
        return Err(too_many(values.len()));
    }
    Ok(values
        .into_iter()
        .enumerate()
        .map(|(position, value)| item(value, position))
        .collect())
}

/// One NDJSON line (an enqueue request without children) as a job; also
/// what `boxcar enqueue --jsonl` reads.
///
/// # Errors
/// The line is not JSON, not an enqueue request, or a flow.
pub fn ndjson_item(line: &str, position: usize) -> Parsed {
    serde_json::from_str(line)
        .map_err(|e| ApiError::bad_request("bad_json", format!("item {position}: {e}")))
        .and_then(|value| item(value, position))
}

/// The items of an NDJSON body: one per non-blank line.
fn from_ndjson(body: &[u8]) -> Result<Vec<Parsed>, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request("bad_json", format!("the NDJSON body is not UTF-8: {e}"))
    })?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() > MAX_BATCH {
        return Err(too_many(lines.len()));
    }
    Ok(lines
        .into_iter()
        .enumerate()
        .map(|(position, line)| ndjson_item(line, position))
        .collect())
}

/// `POST /jobs/batch` (see the module docs).
pub async fn enqueue_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "request body is over the size limit; split the batch",
            )
        } else {
            ApiError::bad_request(
                "bad_json",
                format!("the body could not be read: {rejection}"),
            )
        }
    })?;
    let traceparent = requests::traceparent(&headers)?;
    let parsed = if is_ndjson(&headers) {
        from_ndjson(&body)?
    } else {
        from_array(&body)?
    };
    let mut jobs = Vec::with_capacity(parsed.len());
    let mut verdicts = Vec::with_capacity(parsed.len());
    for item in parsed {
        match item {
            Ok(mut job) => {
                job.traceparent.clone_from(&traceparent);
                jobs.push(job);
                verdicts.push(None);
            }
            Err(refused) => verdicts.push(Some(refused)),
        }
    }
    let mut outcomes = state.queue.add_each(jobs).await?.into_iter();
    let (mut added, mut deduplicated, mut refused) = (0, 0, 0);
    let mut answers = Vec::with_capacity(verdicts.len());
    for verdict in verdicts {
        let answer = match verdict
            .map(Err)
            .or_else(|| outcomes.next().map(|o| o.map_err(ApiError::from)))
        {
            Some(Ok(result)) => {
                if result.deduplicated {
                    deduplicated += 1;
                } else {
                    added += 1;
                }
                json!({"id": result.id, "deduplicated": result.deduplicated})
            }
            Some(Err(error)) => {
                refused += 1;
                error.body()
            }
            None => {
                return Err(ApiError::internal(
                    &"the queue answered fewer jobs than it was given",
                ))
            }
        };
        answers.push(answer);
    }
    let status = if refused == 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(json!({
            "added": added,
            "deduplicated": deduplicated,
            "refused": refused,
            "jobs": answers,
        })),
    )
        .into_response())
}

//! The dashboard: one HTML page, its script and its style sheet, embedded in
//! the binary (no CDN, nothing downloaded at run time), plus the two reads
//! only the page needs (live counts per type, and a job's payload on demand).
//!
//! Invariants:
//! - The three assets hold no data, so they are served without a token:
//!   the page itself asks for the token when the API answers `401` and
//!   keeps it in the browser's session storage (never in a URL).
//! - Every asset is sent with a Content-Security-Policy that allows script
//!   and style only from this origin's own files: no inline script, no
//!   `eval`, no other origin; the page renders data with `textContent`, so
//!   a job field can never become markup, and this policy is the second
//!   line should that ever break.

use axum::{
    extract::{Path, State},
    http::header,
    response::{IntoResponse, Response},
    Json,
};
use serde_json::Value;

use super::{ApiError, AppState};
use crate::views::json_text;

/// The policy every dashboard asset is served with.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const PAGE: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("dashboard.js");
const STYLE: &str = include_str!("dashboard.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the page.
pub(super) async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /dashboard.js`: the page's script.
pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /dashboard.css`: the page's style sheet.
pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `GET /counts/types`: per job type, pending jobs due now and scheduled
/// later, and running jobs (types with none of them are left out).
pub(super) async fn type_counts(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let counts = state.queue.store().count_live_by_type().await?;
    Ok(Json(
        counts
            .iter()
            .map(|c| {
                serde_json::json!({
                    "job_type": c.job_type,
                    "due": c.due,
                    "scheduled": c.scheduled,
                    "running": c.running,
                })
            })
            .collect(),
    ))
}

/// `GET /jobs/{id}/payload`: the job's payload, for an operator who asks
/// for it (the job views leave it out, as it may hold secrets).
pub(super) async fn payload(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = super::job_id(id)?;
    let Some(job) = state.queue.get(&id).await? else {
        return Err(ApiError::job_not_found(&id));
    };
    Ok(Json(json_text(&job.payload)))
}

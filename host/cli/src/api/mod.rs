//! The HTTP API (JSON) served by `boxcar serve`, plus the dashboard page and
//! Prometheus metrics.
//!
//! Invariants:
//! - Bound to loopback unless configured; off loopback a bearer token is
//!   required on every route but `/healthz`, `/openapi.json` and the
//!   dashboard's static assets, which hold no data (the server refuses to
//!   start without one).
//! - `/openapi.json` describes exactly the routes of [`json_routes`]
//!   (tested), and their answers (checked by schemathesis end to end).
//! - Request bodies are size-limited; every error is `{error, message}`.
//! - Browser rules ([`browser`]): on loopback the `Host` must be a loopback
//!   name with the listening port (DNS rebinding); state-changing requests
//!   need `Content-Type: application/json` and must not be cross-origin.
//! - Handlers validate exactly as the Rust API does: they call [`Queue`].

pub mod batch;
mod browser;
mod dashboard;
pub(crate) mod error;
pub(crate) mod history;
mod metrics;
mod openapi;
pub(crate) mod requests;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    extract::{DefaultBodyLimit, Path, Query, Request, State},
    http::{header, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post, MethodRouter},
    Json, Router,
};
use boxcar_queue::{JobCursor, JobFilter, PoolStatus, Queue, Registry, Scheduler, Scope};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use error::ApiError;
pub use metrics::Metrics;
use requests::{CancelRequest, EnqueueRequest, RetryJobRequest, RetryRequest};

use crate::{
    deploy::Deployer,
    views::{HandlerEventView, JobView, ScheduleView},
};

/// Largest accepted request body. Payloads are bounded separately (1 MiB by
/// default); this leaves room for the envelope and flow children.
pub const MAX_BODY: usize = 4 * 1024 * 1024;
/// Longest `wait` a client may ask for.
const MAX_WAIT: Duration = Duration::from_secs(300);

/// What every request handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The queue.
    pub queue: Queue,
    /// The registry of this host (deployed handlers).
    pub registry: Arc<Registry>,
    /// The hot deployer, when this host runs handlers.
    pub deployer: Option<Arc<Deployer>>,
    /// Lifecycle counters.
    pub metrics: Arc<Metrics>,
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// The address the server is bound to (with its real port). On a
    /// loopback address, requests must name it in `Host`; `None` (an
    /// in-process router without a socket) skips only that check.
    pub listen: Option<SocketAddr>,
}

/// Builds the router: every route comes from [`json_routes`] or
/// [`asset_routes`], so the OpenAPI document can be checked against them.
/// The browser rules and the token guard the methods a route serves: any
/// other method is a `405` (naming the served ones in `Allow`), and a path
/// no route serves a `404` — both with the usual JSON error body.
pub fn router(state: AppState) -> Router {
    let browser = middleware::from_fn_with_state(state.clone(), browser::enforce);
    let token = middleware::from_fn_with_state(state.clone(), require_token);
    let guarded = json_routes()
        .into_iter()
        .map(|(path, access, route)| match access {
            Access::Public => (path, route),
            Access::Token => (path, route.route_layer(token.clone())),
        })
        .chain(asset_routes());
    guarded
        .fold(Router::new(), |router, (path, route)| {
            router.route(path, route.route_layer(browser.clone()))
        })
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("this route does not serve {method}; the Allow header lists the methods it does"),
    )
}

async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!(
            "no route `{}`; /openapi.json lists the API's routes",
            uri.path()
        ),
    )
}

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Anyone who reaches the server: the route holds no data.
    Public,
    /// With the bearer token, when one is configured.
    Token,
}

/// The JSON routes (and `/metrics`), each path once with all its methods:
/// exactly the paths of the OpenAPI document.
fn json_routes() -> Vec<(&'static str, Access, MethodRouter<AppState>)> {
    use Access::{Public, Token};
    vec![
        ("/healthz", Public, get(health)),
        ("/openapi.json", Public, get(openapi::document)),
        ("/jobs", Token, post(enqueue).get(list_jobs)),
        ("/jobs/batch", Token, post(batch::enqueue_batch)),
        ("/jobs/retry-failed", Token, post(retry_failed)),
        ("/jobs/{id}", Token, get(get_job)),
        ("/jobs/{id}/wait", Token, get(wait_job)),
        ("/jobs/{id}/attempts", Token, get(history::attempts)),
        ("/jobs/{id}/logs", Token, get(history::logs)),
        ("/jobs/{id}/payload", Token, get(dashboard::payload)),
        ("/jobs/{id}/cancel", Token, post(cancel_job)),
        ("/jobs/{id}/retry", Token, post(retry_job)),
        (
            "/scopes/{scope_type}/{scope_id}/cancel",
            Token,
            post(cancel_scope),
        ),
        ("/counts", Token, get(counts)),
        ("/counts/types", Token, get(dashboard::type_counts)),
        ("/handlers", Token, get(handlers)),
        ("/schedules", Token, get(schedules)),
        ("/metrics", Token, get(metrics_text)),
    ]
}

/// The dashboard's static assets: public, and not part of the JSON API.
fn asset_routes() -> Vec<(&'static str, MethodRouter<AppState>)> {
    vec![
        ("/", get(dashboard::page)),
        ("/dashboard.js", get(dashboard::script)),
        ("/dashboard.css", get(dashboard::style)),
    ]
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(expected) = &state.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|given| constant_time_eq(given.as_bytes(), expected.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /jobs`: a `traceparent` header (W3C trace context) is stored on
/// the job and its children, so their runs join the caller's trace.
async fn enqueue(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Result<Json<EnqueueRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    let traceparent = requests::traceparent(&headers)?;
    let (mut job, mut children) = request.into_jobs()?;
    if let Some(traceparent) = traceparent {
        for job in std::iter::once(&mut job).chain(children.iter_mut()) {
            job.traceparent = Some(traceparent.clone());
        }
    }
    if children.is_empty() {
        let added = state.queue.add(job).await?;
        let status = if added.deduplicated {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok((
            status,
            Json(json!({"id": added.id, "deduplicated": added.deduplicated})),
        )
            .into_response())
    } else {
        let id = state.queue.add_flow(job, children).await?;
        let mut of_parent = JobFilter::default();
        of_parent.parent_id = Some(id.clone());
        of_parent.limit = Some(10_000);
        let children = state.queue.find(&of_parent).await?;
        let child_ids: Vec<&str> = children.iter().map(|c| c.id.as_str()).collect();
        Ok((
            StatusCode::CREATED,
            Json(json!({"id": id, "deduplicated": false, "children": child_ids})),
        )
            .into_response())
    }
}

/// The job's view; a due pending job that a guard holds back also carries
/// `blocked_by` (the guards of this host's handler for its type, and pools).
async fn get_job(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = job_id(id)?;
    let Some(job) = state.queue.get(&id).await? else {
        return Err(ApiError::job_not_found(&id));
    };
    let blocked_by = state
        .queue
        .blocked_by(&job, &state.registry.guards_for(&job.job_type))
        .await?;
    let mut value =
        serde_json::to_value(JobView::from(&job)).map_err(|e| ApiError::internal(&e))?;
    if let (Some(why), Some(fields)) = (blocked_by, value.as_object_mut()) {
        fields.insert("blocked_by".into(), why.to_string().into());
    }
    Ok(Json(value))
}

/// `GET /jobs`'s query string.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    status: Option<String>,
    #[serde(rename = "type")]
    job_type: Option<String>,
    scope: Option<String>,
    parent: Option<String>,
    limit: Option<u32>,
    offset: Option<u32>,
    after: Option<String>,
    order: Option<String>,
}

/// A job of the list with its position: pass the last one's `cursor` as
/// `after` for the next page.
#[derive(Serialize)]
struct ListedJob {
    #[serde(flatten)]
    job: JobView,
    cursor: String,
}

async fn list_jobs(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<ListedJob>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let filter = list_filter(query)?;
    let jobs = state.queue.find(&filter).await?;
    Ok(Json(
        jobs.iter()
            .map(|j| ListedJob {
                job: JobView::from(j),
                cursor: JobCursor::of(j).to_string(),
            })
            .collect(),
    ))
}

/// The store filter a `GET /jobs` query asks for.
///
/// # Errors
/// A malformed cursor, order, status or scope, or a NUL in the filter.
pub(crate) fn list_filter(query: ListQuery) -> Result<JobFilter, ApiError> {
    let mut filter = JobFilter::default();
    filter.limit = Some(query.limit.unwrap_or(JobFilter::DEFAULT_LIMIT).min(1000));
    filter.offset = query.offset;
    filter.parent_id = query.parent;
    if let Some(after) = query.after {
        filter.after = Some(
            after
                .parse::<JobCursor>()
                .map_err(|e| ApiError::bad_request("bad_cursor", e.to_string()))?,
        );
    }
    filter.newest_first = match query.order.as_deref() {
        None | Some("oldest") => false,
        Some("newest") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_query",
                format!("unknown order `{other}`: use oldest or newest"),
            ))
        }
    };
    if let Some(statuses) = query.status {
        for name in statuses.split(',').filter(|s| !s.is_empty()) {
            filter.statuses.push(
                name.parse()
                    .map_err(|_| ApiError::bad_request("bad_query", format!("unknown status `{name}`: use pending, running, succeeded, failed or cancelled")))?,
            );
        }
    }
    if let Some(types) = query.job_type {
        filter.types = types
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
    }
    if let Some(scope) = query.scope {
        filter.scope =
            Some(parse_scope(&scope).map_err(|m| ApiError::bad_request("bad_query", m))?);
    }
    let scope = filter.scope.iter();
    let scope = scope.flat_map(|s| [s.scope_type.as_str(), s.scope_id.as_str()]);
    filter_text(
        "bad_query",
        "the filter",
        filter
            .types
            .iter()
            .chain(filter.parent_id.iter())
            .map(String::as_str)
            .chain(scope),
    )?;
    Ok(filter)
}

/// A job id from a path: one holding a NUL names no job (enqueue refuses
/// control characters, and Postgres cannot even compare one), so it is a
/// `404` before the store is asked.
pub(super) fn job_id(id: String) -> Result<String, ApiError> {
    if id.contains('\0') {
        return Err(ApiError::job_not_found(&id.escape_default().to_string()));
    }
    Ok(id)
}

/// Text a filter or a cancel sends to the store: a NUL is refused with a
/// `400` (`code`) rather than sent, for the same reasons.
pub(super) fn filter_text<'a>(
    code: &'static str,
    field: &str,
    texts: impl IntoIterator<Item = &'a str>,
) -> Result<(), ApiError> {
    if texts.into_iter().any(|t| t.contains('\0')) {
        return Err(ApiError::bad_request(
            code,
            format!("{field} contains a NUL character, which the store cannot hold"),
        ));
    }
    Ok(())
}

/// Parses `TYPE:ID` into a scope.
pub fn parse_scope(text: &str) -> Result<Scope, String> {
    match text.split_once(':') {
        Some((scope_type, scope_id)) if !scope_type.is_empty() && !scope_id.is_empty() => {
            Ok(Scope::new(scope_type, scope_id))
        }
        _ => Err(format!(
            "scope `{text}` must be written TYPE:ID, e.g. account:42"
        )),
    }
}

/// `GET /jobs/{id}/wait`'s query string.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitQuery {
    timeout: Option<String>,
}

async fn wait_job(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobView>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let id = job_id(id)?;
    let timeout = wait_timeout(query)?;
    let job = state.queue.wait(&id, timeout).await?;
    Ok(Json(JobView::from(&job)))
}

/// How long a `GET /jobs/{id}/wait` waits (30 s unless given, at most
/// [`MAX_WAIT`]).
///
/// # Errors
/// The timeout is not a duration.
pub(crate) fn wait_timeout(query: WaitQuery) -> Result<Duration, ApiError> {
    Ok(match query.timeout {
        None => Duration::from_secs(30),
        Some(text) => crate::units::parse_duration(&text)
            .map_err(|m| ApiError::bad_request("bad_query", m))?,
    }
    .min(MAX_WAIT))
}

/// A JSON body that may be empty (then `T::default()`); the content type
/// was checked by the browser rules.
pub(crate) fn optional_body<T: serde::de::DeserializeOwned + Default>(
    body: &[u8],
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(
            "bad_json",
            format!("request body is not the expected JSON: {e}"),
        )
    })
}

async fn cancel_job(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let id = job_id(id)?;
    let request: CancelRequest = optional_body(&body)?;
    filter_text("bad_json", "the reason", request.reason.as_deref())?;
    let reason = request
        .reason
        .unwrap_or_else(|| "cancelled via the API".into());
    if state.queue.get(&id).await?.is_none() {
        return Err(ApiError::job_not_found(&id));
    }
    let cancelled = state.queue.cancel(&id, &reason).await?;
    Ok(Json(json!({"id": id, "cancelled": cancelled})))
}

/// Makes one failed job pending again, as `retry-failed` does for many;
/// `retried` is false when the job is not failed.
async fn retry_job(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let id = job_id(id)?;
    let RetryJobRequest {} = optional_body(&body)?;
    if state.queue.get(&id).await?.is_none() {
        return Err(ApiError::job_not_found(&id));
    }
    let mut filter = JobFilter::default();
    filter.id = Some(id.clone());
    let retried = state.queue.retry_failed(&filter).await? > 0;
    Ok(Json(json!({"id": id, "retried": retried})))
}

async fn cancel_scope(
    State(state): State<AppState>,
    Path((scope_type, scope_id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: CancelRequest = optional_body(&body)?;
    filter_text("bad_json", "the reason", request.reason.as_deref())?;
    let reason = request
        .reason
        .unwrap_or_else(|| "cancelled via the API".into());
    filter_text(
        "bad_query",
        "the scope",
        [scope_type.as_str(), scope_id.as_str()],
    )?;
    let scope = Scope::new(scope_type, scope_id);
    let cancelled = if request.pending_only {
        state.queue.cancel_pending_for_scope(scope, &reason).await?
    } else {
        state.queue.cancel_for_scope(scope, &reason).await?
    };
    Ok(Json(json!({"cancelled": cancelled})))
}

async fn retry_failed(
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: RetryRequest = optional_body(&body)?;
    let filter = request.into_filter()?;
    let scope = filter.scope.iter();
    let scope = scope.flat_map(|s| [s.scope_type.as_str(), s.scope_id.as_str()]);
    filter_text(
        "bad_json",
        "the filter",
        filter.types.iter().map(String::as_str).chain(scope),
    )?;
    let retried = state.queue.retry_failed(&filter).await?;
    Ok(Json(json!({"retried": retried})))
}

/// Jobs per status (top-level keys) and, under `pools`, each declared
/// pool's occupancy and rate budget left in its window.
async fn counts(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let counts = state.queue.count_by_status().await?;
    let pools = state.queue.pool_status(&state.registry.pools()).await?;
    let mut value = serde_json::to_value(counts).map_err(|e| ApiError::internal(&e))?;
    if let Some(object) = value.as_object_mut() {
        object.insert(
            "pools".into(),
            pools.iter().map(PoolStatus::to_json).collect(),
        );
    }
    Ok(Json(value))
}

async fn handlers(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let (deployed, rejected) = match &state.deployer {
        Some(deployer) => (deployer.deployed(), deployer.rejections()),
        None => (Vec::new(), Vec::new()),
    };
    let events = state.queue.handler_events(50).await?;
    let events: Vec<HandlerEventView> = events.iter().map(HandlerEventView::from).collect();
    Ok(Json(json!({
        "deployed": deployed,
        "rejected": rejected,
        "types": state.registry.types(),
        "events": events,
    })))
}

async fn schedules(State(state): State<AppState>) -> Result<Json<Vec<ScheduleView>>, ApiError> {
    let schedules = Scheduler::new(state.queue.clone()).list().await?;
    Ok(Json(schedules.iter().map(ScheduleView::from).collect()))
}

async fn metrics_text(State(state): State<AppState>) -> Result<Response, ApiError> {
    let counts = state.queue.count_by_status().await?;
    let live = state.queue.store().count_live_by_type().await?;
    let text = state.metrics.render(&metrics::Scrape {
        counts: &counts,
        live: &live,
        queue: state.queue.metrics(),
        dropped_events: state.queue.dropped_lifecycle_events(),
        pool: state
            .deployer
            .as_ref()
            .and_then(|deployer| deployer.sandbox().pool_residency()),
    });
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod browser_tests;
#[cfg(test)]
mod list_tests;
#[cfg(test)]
mod openapi_tests;
#[cfg(test)]
mod tests;

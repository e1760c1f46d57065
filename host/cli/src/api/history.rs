//! `GET /jobs/{id}/attempts` and `GET /jobs/{id}/logs`.
//!
//! Logs are read in pages after a cursor (`after`, the `cursor` of the last
//! line seen). With `follow=1` the answer is a server-sent event stream: one
//! `log` event per line (its `id` is the line's cursor, its data the line's
//! JSON), polled from the store every [`FOLLOW_EVERY`], then one `end`
//! event with the job's final status once the job is finished and every
//! line stored up to its end was sent (the status is read before the
//! lines, so lines written with the final transition are never missed).

use std::{convert::Infallible, time::Duration};

use axum::{
    extract::{Path, Query, State},
    response::{
        sse::{Event, KeepAlive, Sse},
        IntoResponse, Response,
    },
    Json,
};
use boxcar_queue::{LogQuery, Queue};
use futures::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, AppState};
use crate::views::{AttemptView, LogLineView};

/// How often a followed log is read from the store.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Every attempt of the job, oldest first (the running one last).
pub(super) async fn attempts(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<AttemptView>>, ApiError> {
    let id = super::job_id(id)?;
    let Some(attempts) = state.queue.attempts(&id).await? else {
        return Err(ApiError::job_not_found(&id));
    };
    Ok(Json(attempts.iter().map(AttemptView::from).collect()))
}

/// `GET /jobs/{id}/logs`'s query string.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogsQuery {
    attempt: Option<u32>,
    after: Option<i64>,
    limit: Option<u32>,
    follow: Option<u8>,
}

/// A page of the job's stored log lines, or with `follow=1` an event stream.
pub(super) async fn logs(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let id = super::job_id(id)?;
    if state.queue.get(&id).await?.is_none() {
        return Err(ApiError::job_not_found(&id));
    }
    let follows = q.follow.unwrap_or(0) != 0;
    let query = log_query(id, q);
    if !follows {
        let lines = state.queue.logs(&query).await?;
        let views: Vec<LogLineView> = lines.iter().map(LogLineView::from).collect();
        return Ok(Json(views).into_response());
    }
    Ok(Sse::new(follow(state.queue.clone(), query))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The store query a `GET /jobs/{id}/logs` query string asks for (the
/// page size at most [`LogQuery::DEFAULT_LIMIT`]).
pub(crate) fn log_query(job_id: String, q: LogsQuery) -> LogQuery {
    LogQuery {
        job_id,
        attempt: q.attempt,
        after: q.after,
        limit: Some(
            q.limit
                .unwrap_or(LogQuery::DEFAULT_LIMIT)
                .min(LogQuery::DEFAULT_LIMIT),
        ),
    }
}

/// Where a followed log stands.
enum Follow {
    Reading(Queue, LogQuery),
    Done,
}

/// The events of a followed log.
fn follow(queue: Queue, query: LogQuery) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(Follow::Reading(queue, query), step).flat_map(stream::iter)
}

/// The next events of a followed log: its new lines, or its end.
async fn step(state: Follow) -> Option<(Vec<Result<Event, Infallible>>, Follow)> {
    let Follow::Reading(queue, mut query) = state else {
        return None;
    };
    loop {
        let job = match queue.get(&query.job_id).await {
            Ok(job) => job,
            Err(e) => return Some((vec![Ok(error_event(&e))], Follow::Done)),
        };
        let lines = match queue.logs(&query).await {
            Ok(lines) => lines,
            Err(e) => return Some((vec![Ok(error_event(&e))], Follow::Done)),
        };
        if let Some(last) = lines.last() {
            query.after = Some(last.cursor);
            let events = lines
                .iter()
                .map(|l| {
                    Ok(Event::default()
                        .event("log")
                        .id(l.cursor.to_string())
                        .json_data(LogLineView::from(l))
                        .unwrap_or_else(|e| error_event(&e)))
                })
                .collect();
            return Some((events, Follow::Reading(queue, query)));
        }
        match job {
            Some(job) if !job.status.is_terminal() => tokio::time::sleep(FOLLOW_EVERY).await,
            job => {
                let status = job.map(|j| j.status.as_str());
                let end = Event::default()
                    .event("end")
                    .data(json!({ "status": status }).to_string());
                return Some((vec![Ok(end)], Follow::Done));
            }
        }
    }
}

fn error_event(e: &dyn std::fmt::Display) -> Event {
    Event::default()
        .event("error")
        .data(json!({ "message": e.to_string() }).to_string())
}

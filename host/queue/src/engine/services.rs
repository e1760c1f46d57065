//! [`JobServices`] for one run: progress (fenced on this worker's claim),
//! follow-up enqueue, and the run's children (flows). This is the one place
//! that decides what a running job may ask of the queue; the sandbox only
//! forwards its guest's calls here.
//!
//! Rules for an enqueue from a running job:
//! - its type must be listed, exactly, in the handler's `may_enqueue`
//!   (there is no wildcard);
//! - priority, `max_attempts` and delay must lie within the handler's
//!   [`EnqueueBounds`] (manifest `[limits]`), else the call is refused;
//!   without a priority the job gets 0, or the nearest bound when 0 is
//!   outside them;
//! - every field passes the producers' validation ([`Queue::prepare`]);
//! - a dedupe key is namespaced by the enqueuing job's type (see
//!   [`guest_dedupe_key`]), so a guest can only ever collide with keys of
//!   its own handler, never with a producer's.
//!
//! Progress must be JSON text of at most `MAX_JSON_BYTES`.
//!
//! The rules are free functions, so a replay (`super::replay`) applies the
//! very same ones while writing nothing.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::handler_output::MAX_JSON_BYTES;
use crate::bounds::EnqueueBounds;
use crate::handler::{ChildJobRequest, ChildSummary, JobServices, ServiceError};
use crate::job::{JobFilter, NewJob};
use crate::queue::{Queue, QueueError};
use crate::registry::HandlerSettings;
use crate::store::{ClaimRef, InsertJob};
use crate::validate::RESERVED_DEDUPE_PREFIX;

pub(crate) struct RunServices {
    pub queue: Queue,
    pub worker_id: String,
    /// The run's claim (the job and its attempt): the progress fence.
    pub claim: ClaimRef,
    pub rules: EnqueueRules,
}

/// What a running job may enqueue.
#[derive(Clone, Debug)]
pub(crate) struct EnqueueRules {
    /// The type of the running job (the dedupe namespace of its enqueues).
    pub job_type: String,
    /// The types it may enqueue.
    pub may_enqueue: Vec<String>,
    /// Bounds on priority, attempts and delay.
    pub bounds: EnqueueBounds,
}

impl EnqueueRules {
    /// The rules for a job of `job_type` run under `settings`.
    pub(crate) fn of(job_type: &str, settings: &HandlerSettings) -> Self {
        Self {
            job_type: job_type.to_string(),
            may_enqueue: settings.may_enqueue.clone(),
            bounds: settings.enqueue_bounds.clone(),
        }
    }
}

/// Most children listed for one parent.
const MAX_CHILDREN: u32 = 10_000;

/// The dedupe key stored for `key` given by a job of `enqueuing_type`:
/// `boxcar:from:<enqueuing type>/<key>`, with `%` and `/` in the type
/// written `%25` and `%2F` so the first `/` always ends the type. Producers
/// cannot use keys that begin with `boxcar:` (refused at enqueue), so no
/// producer key can equal one of these. Use it to cancel a guest's jobs by
/// dedupe key.
pub fn guest_dedupe_key(enqueuing_type: &str, key: &str) -> String {
    let namespace = enqueuing_type.replace('%', "%25").replace('/', "%2F");
    format!("{RESERVED_DEDUPE_PREFIX}from:{namespace}/{key}")
}

/// The request as a producer's job within `bounds`, or why it is outside
/// them.
fn bounded_job(bounds: &EnqueueBounds, request: ChildJobRequest) -> Result<NewJob, ServiceError> {
    let (low, high) = (*bounds.priority.start(), *bounds.priority.end());
    let priority = match request.priority {
        None => 0.clamp(low, high),
        Some(p) if bounds.priority.contains(&p) => p,
        Some(p) => {
            return Err(ServiceError::Invalid(format!(
                "priority {p} is outside [{low}, {high}], the priorities this handler may give (limits.enqueue_priority in its manifest)"
            )))
        }
    };
    if let Some(n) = request.max_attempts.filter(|n| *n > bounds.max_attempts) {
        return Err(ServiceError::Invalid(format!(
            "max_attempts {n} is more than {}, the most this handler may give (limits.enqueue_max_attempts in its manifest)",
            bounds.max_attempts
        )));
    }
    if let Some(delay) = request.delay.filter(|d| *d > bounds.max_delay) {
        return Err(ServiceError::Invalid(format!(
            "a delay of {} ms is longer than {} ms, the longest this handler may give (limits.enqueue_max_delay in its manifest)",
            delay.as_millis(),
            bounds.max_delay.as_millis()
        )));
    }
    Ok(NewJob {
        job_type: request.job_type,
        payload: request.payload,
        scope: request.scope,
        dedupe_key: request.dedupe_key,
        max_attempts: request.max_attempts,
        delay: request.delay,
        priority,
        ..NewJob::default()
    })
}

/// What a job of `rules.job_type` may enqueue: the request checked against
/// `may_enqueue`, the bounds and the producers' validation, ready to insert
/// (its dedupe key namespaced).
///
/// # Errors
/// Why the request is refused, as the guest is told.
pub(super) fn admit_enqueue(
    queue: &Queue,
    rules: &EnqueueRules,
    request: ChildJobRequest,
) -> Result<InsertJob, ServiceError> {
    if !rules.may_enqueue.contains(&request.job_type) {
        return Err(ServiceError::NotAllowed(request.job_type));
    }
    let job = bounded_job(&rules.bounds, request)?;
    let mut prepared = queue.prepare(job).map_err(|e| queue_error(e.into()))?;
    prepared.dedupe_key = prepared
        .dedupe_key
        .map(|key| guest_dedupe_key(&rules.job_type, &key));
    Ok(prepared)
}

/// Checks progress text as the engine stores it.
///
/// # Errors
/// The text is over [`MAX_JSON_BYTES`] or not JSON.
pub(super) fn check_progress(json: &str) -> Result<(), ServiceError> {
    if json.len() > MAX_JSON_BYTES {
        return Err(ServiceError::Invalid(format!(
            "progress of {} bytes is over the {MAX_JSON_BYTES}-byte limit",
            json.len()
        )));
    }
    if serde_json::from_str::<serde::de::IgnoredAny>(json).is_err() {
        return Err(ServiceError::Invalid("progress must be JSON text".into()));
    }
    Ok(())
}

/// The children of job `parent_id` (flows), as its handler sees them.
///
/// # Errors
/// The store failed.
pub(super) async fn children_of(
    queue: &Queue,
    parent_id: &str,
) -> Result<Vec<ChildSummary>, ServiceError> {
    let filter = JobFilter {
        parent_id: Some(parent_id.to_string()),
        limit: Some(MAX_CHILDREN),
        ..JobFilter::default()
    };
    let jobs = queue
        .find(&filter)
        .await
        .map_err(|e| ServiceError::Host(e.to_string()))?;
    Ok(jobs
        .into_iter()
        .map(|j| ChildSummary {
            id: j.id,
            job_type: j.job_type,
            status: j.status.as_str().to_string(),
            result: j.result,
            error: j.last_error,
        })
        .collect())
}

fn queue_error(e: QueueError) -> ServiceError {
    match e {
        QueueError::Enqueue(e) => ServiceError::Invalid(e.to_string()),
        QueueError::Store(e) => ServiceError::Host(e.to_string()),
    }
}

impl JobServices for RunServices {
    fn progress(&self, json: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        async move {
            check_progress(&json)?;
            self.queue
                .store()
                .set_progress(&self.worker_id, &self.claim, &json)
                .await
                .map(|_| ())
                .map_err(|e| ServiceError::Host(e.to_string()))
        }
        .boxed()
    }

    fn enqueue(&self, request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        async move {
            let prepared = admit_enqueue(&self.queue, &self.rules, request)?;
            let mut added = self
                .queue
                .add_prepared(vec![prepared])
                .await
                .map_err(queue_error)?;
            added.pop().map(|r| r.id).ok_or_else(|| {
                ServiceError::Host("the store returned no row for the insert".into())
            })
        }
        .boxed()
    }

    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>> {
        async move { children_of(&self.queue, &self.claim.id).await }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::guest_dedupe_key;

    #[test]
    fn guest_keys_are_namespaced_unambiguously() {
        assert_eq!(
            guest_dedupe_key("article.extract", "a/b"),
            "boxcar:from:article.extract/a/b"
        );
        assert_ne!(guest_dedupe_key("a", "b/c"), guest_dedupe_key("a/b", "c"));
        assert_eq!(guest_dedupe_key("50%/x", "k"), "boxcar:from:50%25%2Fx/k");
    }
}

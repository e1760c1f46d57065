//! The queue's side of the WIT boundary, for the fuzz targets
//! (`host/fuzz-targets`): what the engine does with what a guest hands
//! over — its answer ([`admit_outcome`]), a retry's delay
//! ([`retry_at`]), a progress report ([`check_progress`]) and an enqueue
//! request ([`admit_enqueue`]). Not part of the supported API.
//!
//! Invariant: these are the functions the engine runs, not copies; each
//! returns for every input.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    backoff::retry_delay,
    handler_output::admit,
    services::{self, EnqueueRules},
};
use crate::{
    bounds::EnqueueBounds,
    handler::{ChildJobRequest, Outcome, ServiceError},
    queue::Queue,
};

/// The outcome as the engine would store it.
pub fn admit_outcome(outcome: Outcome) -> Outcome {
    admit(outcome)
}

/// When a retried job would run again after `attempts` attempts with the
/// guest's `retry_after`, from `now`, and the delay in the store's
/// milliseconds.
pub fn retry_at(
    attempts: u32,
    base: Duration,
    max: Duration,
    retry_after: Option<Duration>,
    now: DateTime<Utc>,
) -> (DateTime<Utc>, i64) {
    let delay = retry_delay(attempts, base, max, retry_after);
    (crate::time::after(now, delay), crate::time::millis(delay))
}

/// A progress report as the engine checks it before storing it.
///
/// # Errors
/// Why the report is refused, as the guest is told.
pub fn check_progress(json: &str) -> Result<(), ServiceError> {
    services::check_progress(json)
}

/// An enqueue request from a running job of `job_type` allowed to enqueue
/// `may_enqueue` within `bounds`, as the engine admits it before the
/// insert; the stored dedupe key.
///
/// # Errors
/// Why the request is refused, as the guest is told.
pub fn admit_enqueue(
    queue: &Queue,
    job_type: &str,
    may_enqueue: Vec<String>,
    bounds: EnqueueBounds,
    request: ChildJobRequest,
) -> Result<Option<String>, ServiceError> {
    let rules = EnqueueRules {
        job_type: job_type.to_string(),
        may_enqueue,
        bounds,
    };
    services::admit_enqueue(queue, &rules, request).map(|prepared| prepared.dedupe_key)
}

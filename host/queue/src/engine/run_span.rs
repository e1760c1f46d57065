//! The tracing span of one run of one job (target `boxcar::job`, name
//! `job`): every event of the run, a guest's log lines included, is inside
//! it, so a subscriber sees the job's id, type, attempt and module digest
//! on each; the run's outcome is recorded on it when the run ends. A
//! subscriber that exports traces makes it the run's span, parented to the
//! producer's `traceparent` when the job carries one.
//!
//! Invariant: the outcome recorded is the one the attempt's record gets
//! (the sandbox's cause — `timed_out`, `out_of_memory`, … — when there is
//! one, else the transition: `succeeded`, `retried`, `failed`), or the
//! reason the run ended without a transition of its own (`cancelled`,
//! `lease_lost`, `released`).

use tracing::field::Empty;

use crate::attempt::AttemptOutcome;
use crate::job::Job;

/// The target of the run span.
pub const TARGET: &str = "boxcar::job";

/// The span of `job`'s current attempt, run by the handler of `digest`.
pub(crate) fn span(job: &Job, digest: &str) -> tracing::Span {
    let span = tracing::info_span!(
        target: TARGET,
        "job",
        job_id = %job.id,
        job_type = %job.job_type,
        attempt = job.attempts,
        digest = %digest,
        traceparent = Empty,
        outcome = Empty,
        error = Empty,
    );
    if let Some(traceparent) = &job.traceparent {
        span.record("traceparent", traceparent.as_str());
    }
    span
}

/// Records how the current run ended on its span: `cause` when the sandbox
/// gave one, else `ended`.
pub(crate) fn record_outcome(
    cause: Option<AttemptOutcome>,
    ended: AttemptOutcome,
    error: Option<&str>,
) {
    let span = tracing::Span::current();
    span.record("outcome", cause.unwrap_or(ended).as_str());
    if let Some(error) = error {
        span.record("error", error);
    }
}

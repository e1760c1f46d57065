//! One run of one claimed job: its start, its supervision while the
//! handler works ([`supervise`]: deadline, lease renewal, aborts), and the
//! mapping from [`Outcome`] to exactly one fenced store transition.
//!
//! Invariants:
//! - The slot is freed once the handler stopped or `abandon_grace` after
//!   an abort or the deadline, whatever the handler does.
//! - Every write of the run is fenced on its claim (worker and attempt), so
//!   a run whose lease expired cannot write over a later claim of its job,
//!   not even one this worker made.
//! - A run aborted because of a cancel or a lost lease writes nothing; one
//!   aborted by shutdown releases its lease (attempt given back).
//! - Every handler's outcome passes `handler_output::admit` before it is
//!   written; a failure or retry write the database refuses is replaced by
//!   a host-written failure (`unstorable`), never left to lease expiry.
//! - Deadlines and lease instants are computed with checked arithmetic
//!   (settings are bounded at registration; this is the second line).
//! - Every run has a [`RunRecord`]: the guest's log lines are stored with
//!   the attempt's transition (same transaction), and a long run's lines
//!   meanwhile by [`supervise`] (one write for all its new lines, so
//!   `logs --follow` sees them); a run that ends without a transition of
//!   its own (cancel, lost lease, shutdown) stores its last lines unfenced.
//!   The measurement costs the engine two `Instant`s and a few relaxed
//!   atomics per run.
//! - Every run counts in the queue's metrics: its queue wait when it
//!   starts; when it ends, its wall time, the host's time outside the
//!   guest and how the attempt ended, classified as its stored attempt is.
//! - The run's `started` lifecycle event is handed to observers after the
//!   handler's first poll ([`StartAnnouncement`]), before any later event
//!   of the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::completer::Done;
use super::handler_output::admit;
use super::run_span::record_outcome;
use super::services::{EnqueueRules, RunServices};
use super::start_announcement::StartAnnouncement;
use super::supervise::{flush_logs, supervise};
use super::unstorable::{fail_unstorable, is_refusal};
use super::{backoff::retry_delay, Engine};
use crate::attempt::{AttemptEnd, AttemptOutcome};
use crate::handler::{JobContext, JobRun, Outcome};
use crate::inflight::{AbortReason, RunHandle};
use crate::job::{Job, JobStatus};
use crate::lease_clock::LeaseClock;
use crate::metrics::StoreOp;
use crate::observer::{LifecycleEvent, LifecycleOutcome};
use crate::registry::HandlerEntry;
use crate::run_record::RunRecord;
use crate::store::{ClaimRef, FailParams, ReleaseParams, RetryParams};
use crate::time;

/// The attempt a run ends: its cause, figures and unstored lines.
fn attempt_end(record: &RunRecord, outcome: &Outcome, duration: Duration) -> AttemptEnd {
    let mut usage = record.usage();
    usage.wall_ms = Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
    let (cause, returned) = match outcome {
        Outcome::Succeeded { result } => (None, result.as_ref().map(String::len)),
        Outcome::Retryable { .. } => (None, None),
        Outcome::Terminal { details, .. } => (None, details.as_ref().map(String::len)),
        Outcome::Trapped { .. } => (Some(AttemptOutcome::Trapped), None),
        Outcome::TimedOut => (Some(AttemptOutcome::TimedOut), None),
        Outcome::Cancelled => (Some(AttemptOutcome::Cancelled), None),
        Outcome::OutOfMemory => (Some(AttemptOutcome::OutOfMemory), None),
        Outcome::FuelExhausted => (Some(AttemptOutcome::FuelExhausted), None),
        Outcome::LimitExceeded { .. } => (Some(AttemptOutcome::LimitExceeded), None),
        Outcome::HostError { .. } => (Some(AttemptOutcome::HostError), None),
    };
    usage.result_bytes = Some(returned.unwrap_or(0) as u64);
    AttemptEnd {
        outcome: cause,
        usage,
        logs: record.take_logs(),
    }
}

pub(crate) async fn run_job(
    engine: Arc<Engine>,
    entry: Arc<HandlerEntry>,
    job: Job,
    handle: RunHandle,
    lease_deadline: Option<tokio::time::Instant>,
) {
    let started = Instant::now();
    let executing = engine.executing();
    let claim = ClaimRef::of(&job);
    let event =
        |outcome, error: Option<String>, duration| run_event(&job, outcome, error, duration);
    if lease_deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
        tracing::warn!(job_id = %job.id, "the claim's lease ran out before its run started (was this process paused?); not running it: the job is recovered after its lease");
        engine.queue.inflight().remove(&claim);
        record_outcome(None, AttemptOutcome::LeaseLost, None);
        let metrics = engine.queue.metrics();
        metrics.ended(&job.job_type, AttemptOutcome::LeaseLost, None, None);
        engine
            .queue
            .emit(event(LifecycleOutcome::LeaseLost, None, None));
        engine.free_slot(&job.job_type, None);
        return;
    }
    // A job claimed ahead may have been cancelled, or its lease found lost,
    // while it waited for a slot: its handler is then never called.
    let aborted_before_start = handle.reason().is_some();
    if !aborted_before_start {
        engine
            .queue
            .metrics()
            .started(&job.job_type, queue_wait(&job));
    }
    let started_event = StartAnnouncement::new(
        engine.queue.clone(),
        (!aborted_before_start).then(|| event(LifecycleOutcome::Started, None, None)),
    );
    let timeout = entry.settings.timeout;
    let run = job_run(&job, job.attempts, timeout);
    let record = Arc::new(RunRecord::new(job.id.clone(), job.attempts));
    let lease = LeaseClock::with_end(lease_deadline.map(tokio::time::Instant::into_std));
    let ctx = JobContext {
        record: Arc::clone(&record),
        lease: lease.clone(),
        cancel: handle.token.clone(),
        services: Arc::new(RunServices {
            queue: engine.queue.clone(),
            worker_id: engine.opts.worker_id.clone(),
            claim: claim.clone(),
            rules: EnqueueRules::of(&job.job_type, &entry.settings),
        }),
    };
    let supervised = if aborted_before_start {
        Outcome::Cancelled
    } else {
        let fut = started_event.after_first_poll(entry.handler.handle(run, ctx));
        let deadline = time::instant_after(timeout);
        supervise(
            &engine,
            &entry,
            &job,
            &handle,
            (fut, lease_deadline, &lease),
            deadline,
            &record,
        )
        .await
    };
    started_event.announce();
    let outcome = admit(supervised);
    engine.queue.inflight().remove(&claim);
    let duration = started.elapsed();
    let worker_id = engine.opts.worker_id.clone();
    if handle.reason().is_some() {
        flush_logs(&engine, &record).await;
    }
    let attempt = attempt_end(&record, &outcome, duration);
    let cause = attempt.outcome;
    let mut ended = ended_as(handle.reason(), &outcome, cause, &job);

    match (handle.reason(), outcome) {
        (Some(AbortReason::Cancelled), _) => {
            record_outcome(None, AttemptOutcome::Cancelled, None);
            engine.queue.emit(event(
                LifecycleOutcome::Cancelled,
                Some("cancelled".into()),
                Some(duration),
            ));
        }
        (Some(AbortReason::LeaseLost), _) => {
            let row = engine.store.get(&job.id).await.ok().flatten();
            let outcome = if row.is_some_and(|r| r.status == JobStatus::Cancelled) {
                ended = AttemptOutcome::Cancelled;
                record_outcome(None, AttemptOutcome::Cancelled, None);
                LifecycleOutcome::Cancelled
            } else {
                record_outcome(None, AttemptOutcome::LeaseLost, None);
                LifecycleOutcome::LeaseLost
            };
            engine.queue.emit(event(outcome, None, Some(duration)));
        }
        (Some(AbortReason::Shutdown), _) => {
            record_outcome(None, AttemptOutcome::Released, None);
            let params = ReleaseParams {
                worker_id,
                claims: vec![claim],
            };
            let metrics = engine.queue.metrics();
            if let Err(e) = metrics
                .timed(StoreOp::Release, engine.store.release(params))
                .await
            {
                tracing::warn!(job_id = %job.id, error = %e, "release at shutdown failed; the job is recovered after its lease");
            }
        }
        (None, Outcome::Succeeded { result }) => {
            record_outcome(cause, AttemptOutcome::Succeeded, None);
            let done = Done {
                claim,
                result,
                job_type: job.job_type.clone(),
                scope: job.scope.clone(),
                duration,
                has_parent: job.parent_id.is_some(),
                ending: attempt,
            };
            // Handed over: the outcome writer no longer waits for this run.
            drop(executing);
            if engine.completions.send(done).await.is_err() {
                tracing::error!(job_id = %job.id, "outcome writer stopped; the job is recovered after its lease");
            }
        }
        (
            None,
            Outcome::Terminal {
                message,
                code,
                details,
            },
        ) => {
            record_outcome(cause, AttemptOutcome::Failed, Some(&message));
            fail(&engine, &job, message, (code, details), attempt, duration).await;
        }
        (None, other) => {
            let (retry_after, consumes) = match &other {
                Outcome::Retryable {
                    retry_after,
                    consumes_attempt,
                    ..
                } => (*retry_after, *consumes_attempt),
                _ => (None, true),
            };
            let message = other
                .error_message()
                .unwrap_or_else(|| "unknown failure".into());
            if gives_up(consumes, &job) {
                record_outcome(cause, AttemptOutcome::Failed, Some(&message));
                fail(&engine, &job, message, (None, None), attempt, duration).await;
            } else {
                record_outcome(cause, AttemptOutcome::Retried, Some(&message));
                let backoff = (retry_after, consumes);
                retry(&engine, &job, message, backoff, attempt, duration).await;
            }
        }
    }
    let overhead = record
        .guest_time()
        .map(|guest| duration.saturating_sub(guest));
    engine
        .queue
        .metrics()
        .ended(&job.job_type, ended, Some(duration), overhead);
    let ran = (!aborted_before_start).then_some(duration);
    engine.free_slot(&job.job_type, ran);
}

/// What a handler is given to run `job` as `attempt`, due within `timeout`.
pub(super) fn job_run(job: &Job, attempt: u32, timeout: Duration) -> JobRun {
    JobRun {
        id: job.id.clone(),
        job_type: job.job_type.clone(),
        payload: job.payload.clone(),
        attempt,
        max_attempts: job.max_attempts,
        scope: job.scope.clone(),
        schedule_id: job.schedule_id.clone(),
        parent_id: job.parent_id.clone(),
        deadline: time::after(Utc::now(), timeout),
    }
}

/// Whether a failed run that `consumes` an attempt ends the job.
fn gives_up(consumes: bool, job: &Job) -> bool {
    consumes && job.attempts >= job.max_attempts
}

/// How the attempt ended, as its stored attempt records it (a lost lease
/// whose job turns out cancelled is corrected by the caller).
fn ended_as(
    reason: Option<AbortReason>,
    outcome: &Outcome,
    cause: Option<AttemptOutcome>,
    job: &Job,
) -> AttemptOutcome {
    match (reason, outcome) {
        (Some(AbortReason::Cancelled), _) => AttemptOutcome::Cancelled,
        (Some(AbortReason::LeaseLost), _) => AttemptOutcome::LeaseLost,
        (Some(AbortReason::Shutdown), _) => AttemptOutcome::Released,
        (None, Outcome::Succeeded { .. }) => AttemptOutcome::Succeeded,
        (None, Outcome::Terminal { .. }) => AttemptOutcome::Failed,
        (
            None,
            Outcome::Retryable {
                consumes_attempt, ..
            },
        ) if gives_up(*consumes_attempt, job) => AttemptOutcome::Failed,
        (None, Outcome::Retryable { .. }) => AttemptOutcome::Retried,
        (None, _) => cause.unwrap_or(AttemptOutcome::Failed),
    }
}

/// From when the job became due (`run_at`) to its claim's start, both on
/// the store's clock; zero when the clocks disagree.
fn queue_wait(job: &Job) -> Duration {
    let started = job.started_at.unwrap_or_else(Utc::now);
    (started - job.run_at).to_std().unwrap_or(Duration::ZERO)
}

/// The lifecycle event of `job`'s run.
fn run_event(
    job: &Job,
    outcome: LifecycleOutcome,
    error: Option<String>,
    duration: Option<Duration>,
) -> LifecycleEvent {
    LifecycleEvent {
        job_id: job.id.clone(),
        job_type: job.job_type.clone(),
        scope: job.scope.clone(),
        outcome,
        attempts: job.attempts,
        error,
        duration,
    }
}

/// Puts the run's job back to `pending` after its backoff.
pub(super) async fn retry(
    engine: &Engine,
    job: &Job,
    message: String,
    (retry_after, consumes_attempt): (Option<Duration>, bool),
    ending: AttemptEnd,
    duration: Duration,
) {
    let attempts_for_backoff = if consumes_attempt {
        job.attempts
    } else {
        job.attempts.max(1)
    };
    let delay = retry_delay(
        attempts_for_backoff,
        engine.opts.base_backoff,
        engine.opts.max_backoff,
        retry_after,
    );
    let params = RetryParams {
        worker_id: engine.opts.worker_id.clone(),
        id: job.id.clone(),
        attempt: job.attempts,
        delay,
        error: message.clone(),
        consumes_attempt,
        ending,
    };
    match engine
        .queue
        .metrics()
        .timed(StoreOp::Retry, engine.store.retry(params))
        .await
    {
        Ok(true) => engine.queue.emit(run_event(
            job,
            LifecycleOutcome::RetryScheduled,
            Some(message),
            Some(duration),
        )),
        Ok(false) => {
            tracing::warn!(job_id = %job.id, "retry rejected: the lease was lost or the job was cancelled")
        }
        Err(e) if is_refusal(&e) => {
            let run = run_event(job, LifecycleOutcome::RetryScheduled, None, Some(duration));
            fail_unstorable(engine, ClaimRef::of(job), "retry", &e, run).await;
        }
        Err(e) => {
            tracing::error!(job_id = %job.id, error = %e, "retry write failed; the job is recovered after its lease")
        }
    }
}

/// Marks the run failed; `coded` is the handler's (code, details), if any.
pub(super) async fn fail(
    engine: &Engine,
    job: &Job,
    message: String,
    coded: (Option<String>, Option<String>),
    ending: AttemptEnd,
    duration: Duration,
) {
    let (code, details) = coded;
    let params = FailParams {
        worker_id: engine.opts.worker_id.clone(),
        id: job.id.clone(),
        attempt: job.attempts,
        error: message.clone(),
        code,
        details,
        ending,
    };
    match engine
        .queue
        .metrics()
        .timed(StoreOp::Fail, engine.store.fail(params))
        .await
    {
        Ok(true) => {
            if job.parent_id.is_some() {
                // The parent may be claimable now (see the completer).
                engine.queue.wake();
            }
            engine.queue.emit(run_event(
                job,
                LifecycleOutcome::FailedTerminal,
                Some(message),
                Some(duration),
            ));
        }
        Ok(false) => {
            tracing::warn!(job_id = %job.id, "failure write rejected: the lease was lost or the job was cancelled")
        }
        Err(e) if is_refusal(&e) => {
            let run = run_event(job, LifecycleOutcome::FailedTerminal, None, Some(duration));
            fail_unstorable(engine, ClaimRef::of(job), "failure", &e, run).await;
        }
        Err(e) => {
            tracing::error!(job_id = %job.id, error = %e, "failure write failed; the job is recovered after its lease")
        }
    }
}

//! Replaying a stored job: one run of its payload on a given handler, built
//! as the engine builds a run (the same [`JobRun`] fields and deadline, the
//! same rules for what the guest may ask, the same admission of its
//! answer), but nothing is written to the queue.
//!
//! Invariants:
//! - The store is only read: no claim, no attempt row, no log row, no
//!   progress write, no enqueue. A guest's `enqueue` is a dry run: checked
//!   by the engine's rules ([`super::services`]), answered with the id the
//!   job would have had, reported in [`Replay::enqueues`] and never
//!   inserted. Its progress is checked the same way and reported.
//! - The run ends by the handler's timeout: the handler stops itself at
//!   its deadline (the sandbox does); one that does not is given up
//!   `abandon_grace` later as `TimedOut`, as the engine would.
//! - Every ending is an [`Outcome`] that passed the engine's admission.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::handler_output::admit;
use super::services::{admit_enqueue, check_progress, children_of, EnqueueRules};
use crate::attempt::{AttemptUsage, LogLine};
use crate::handler::{
    ChildJobRequest, ChildSummary, Handler, JobContext, JobServices, Outcome, ServiceError,
};
use crate::job::Job;
use crate::lease_clock::LeaseClock;
use crate::queue::Queue;
use crate::registry::HandlerSettings;
use crate::run_record::RunRecord;
use crate::time;

/// What to replay and how.
pub struct ReplayRequest<'a> {
    /// The stored job.
    pub job: &'a Job,
    /// The attempt number the guest sees (the run being reproduced).
    pub attempt: u32,
    /// The handler that runs it.
    pub handler: Arc<dyn Handler>,
    /// The manifest's settings: timeout and what the guest may enqueue.
    pub settings: &'a HandlerSettings,
    /// How long a handler that ignores its deadline is waited for.
    pub abandon_grace: Duration,
    /// Stops the run (reported as `Cancelled`).
    pub cancel: CancellationToken,
}

/// An enqueue the guest asked for during a replay (never inserted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DryEnqueue {
    /// The type asked for.
    pub job_type: String,
    /// The payload asked for.
    pub payload: String,
    /// The id the guest was given, or why the enqueue was refused (as the
    /// guest was told).
    pub answer: Result<String, String>,
}

/// How a replay went.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The outcome, admitted as the engine admits it.
    pub outcome: Outcome,
    /// What the guest logged, in order.
    pub logs: Vec<LogLine>,
    /// The run's figures.
    pub usage: AttemptUsage,
    /// The enqueues the guest asked for (none was inserted).
    pub enqueues: Vec<DryEnqueue>,
    /// The progress reports the guest made (none was stored).
    pub progress: Vec<String>,
}

impl Replay {
    /// A short name for the outcome: `succeeded`, `retryable`, `failed`,
    /// `trapped`, `timed_out`, `cancelled`, `out_of_memory`,
    /// `fuel_exhausted`, `limit_exceeded` or `host_error`.
    pub fn outcome_name(&self) -> &'static str {
        match &self.outcome {
            Outcome::Succeeded { .. } => "succeeded",
            Outcome::Retryable { .. } => "retryable",
            Outcome::Terminal { .. } => "failed",
            Outcome::Trapped { .. } => "trapped",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::OutOfMemory => "out_of_memory",
            Outcome::FuelExhausted => "fuel_exhausted",
            Outcome::LimitExceeded { .. } => "limit_exceeded",
            Outcome::HostError { .. } => "host_error",
        }
    }
}

/// Host services of a replay: reads are real, writes are dry runs.
struct DryRunServices {
    queue: Queue,
    job_id: String,
    rules: EnqueueRules,
    enqueues: Mutex<Vec<DryEnqueue>>,
    progress: Mutex<Vec<String>>,
}

impl JobServices for DryRunServices {
    fn progress(&self, json: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        async move {
            check_progress(&json)?;
            self.progress
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(json);
            Ok(())
        }
        .boxed()
    }

    fn enqueue(&self, request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        async move {
            let (job_type, payload) = (request.job_type.clone(), request.payload.clone());
            let answer = admit_enqueue(&self.queue, &self.rules, request).map(|job| job.id);
            self.enqueues
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(DryEnqueue {
                    job_type,
                    payload,
                    answer: answer.clone().map_err(|e| e.to_string()),
                });
            answer
        }
        .boxed()
    }

    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>> {
        async move { children_of(&self.queue, &self.job_id).await }.boxed()
    }
}

/// Runs `request.job` once on `request.handler` without writing to the
/// queue (see the module docs).
pub async fn replay(queue: &Queue, request: ReplayRequest<'_>) -> Replay {
    let job = request.job;
    let timeout = request.settings.timeout;
    let run = super::run::job_run(job, request.attempt, timeout);
    let record = Arc::new(RunRecord::new(job.id.clone(), request.attempt));
    let services = Arc::new(DryRunServices {
        queue: queue.clone(),
        job_id: job.id.clone(),
        rules: EnqueueRules::of(&job.job_type, request.settings),
        enqueues: Mutex::new(Vec::new()),
        progress: Mutex::new(Vec::new()),
    });
    let ctx = JobContext {
        cancel: request.cancel.clone(),
        services: Arc::clone(&services) as Arc<dyn JobServices>,
        record: Arc::clone(&record),
        lease: LeaseClock::unbounded(),
    };
    let started = Instant::now();
    let give_up = time::instant_after(timeout.saturating_add(request.abandon_grace));
    let outcome = tokio::select! {
        outcome = request.handler.handle(run, ctx) => outcome,
        () = tokio::time::sleep_until(give_up) => Outcome::TimedOut,
    };
    let outcome = admit(outcome);
    let mut usage = record.usage();
    usage.wall_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    let returned = match &outcome {
        Outcome::Succeeded { result } => result.as_ref().map_or(0, String::len),
        Outcome::Terminal { details, .. } => details.as_ref().map_or(0, String::len),
        _ => 0,
    };
    usage.result_bytes = Some(returned as u64);
    Replay {
        outcome,
        logs: record.take_logs(),
        usage,
        enqueues: drain(&services.enqueues),
        progress: drain(&services.progress),
    }
}

fn drain<T>(list: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *list.lock().unwrap_or_else(|p| p.into_inner()))
}

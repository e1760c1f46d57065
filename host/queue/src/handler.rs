//! The seam between the engine and whatever runs a job.
//!
//! The engine (dispatcher) claims a job, builds a [`JobRun`] and a
//! [`JobContext`], and calls [`Handler::handle`]. The handler returns one
//! [`Outcome`] — a closed enum: every way a run can end is a variant, and the
//! engine maps each variant to exactly one store transition.
//!
//! Invariants:
//! - A handler never writes job state itself; it only returns an outcome and
//!   uses the [`JobServices`] it was given (progress, enqueue, children).
//! - The handler must stop promptly once `ctx.cancel` fires or `job.deadline`
//!   passes. The sandbox enforces this for guests with epoch interruption;
//!   the engine additionally stops waiting after `abandon_grace`.
//! - Why a run was cancelled (user cancel, lost lease, shutdown) is known to
//!   the engine, not the handler: the handler just reports `Cancelled`.

use std::{fmt, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::lease_clock::LeaseClock;
use crate::run_record::RunRecord;

/// A `(scope_type, scope_id)` pair, e.g. `("account", "42")`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Scope {
    /// The kind of thing the job belongs to, e.g. `account`.
    #[serde(rename = "type")]
    pub scope_type: String,
    /// The identity of that thing, e.g. `42`.
    #[serde(rename = "id")]
    pub scope_id: String,
}

impl Scope {
    /// Builds a scope from its two parts.
    pub fn new(scope_type: impl Into<String>, scope_id: impl Into<String>) -> Self {
        Self {
            scope_type: scope_type.into(),
            scope_id: scope_id.into(),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.scope_type, self.scope_id)
    }
}

/// Everything a handler learns about the job it runs.
#[derive(Clone, Debug)]
pub struct JobRun {
    /// The job's id.
    pub id: String,
    /// The job type, which selected this handler.
    pub job_type: String,
    /// The payload: JSON object text, already validated at enqueue.
    pub payload: String,
    /// 1-based attempt number of this run.
    pub attempt: u32,
    /// The job's attempt budget; `attempt == max_attempts` is the last try.
    pub max_attempts: u32,
    /// The job's scope, if any.
    pub scope: Option<Scope>,
    /// The schedule that enqueued this job, if any.
    pub schedule_id: Option<String>,
    /// The parent job (flows), if any.
    pub parent_id: Option<String>,
    /// When this run must have ended; the handler is stopped at this instant.
    pub deadline: DateTime<Utc>,
}

/// A request from a running job to enqueue another job (a follow-up or
/// child). The engine checks it against the handler's `may_enqueue` list.
#[derive(Clone, Debug, Default)]
pub struct ChildJobRequest {
    /// Type of the job to enqueue.
    pub job_type: String,
    /// JSON object text.
    pub payload: String,
    /// Optional scope for the new job.
    pub scope: Option<Scope>,
    /// Optional dedupe key.
    pub dedupe_key: Option<String>,
    /// Delay before the new job becomes due.
    pub delay: Option<Duration>,
    /// Priority (lower runs first); `None` means the default 0.
    pub priority: Option<i32>,
    /// Attempt budget; `None` means the handler's or host's default.
    pub max_attempts: Option<u32>,
}

/// What a child of a flow looks like to its parent's handler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChildSummary {
    /// The child's id.
    pub id: String,
    /// The child's job type.
    pub job_type: String,
    /// `succeeded`, `failed`, `cancelled` (or a live status if not done).
    pub status: String,
    /// The child's JSON result text, when it succeeded with one.
    pub result: Option<String>,
    /// The child's last error, when it failed or was cancelled.
    pub error: Option<String>,
}

/// Why a call from a running job into the host was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceError {
    /// The manifest does not allow this job to enqueue that type.
    #[error("enqueueing job type `{0}` is not allowed for this handler: add it to capabilities.may_enqueue in the manifest")]
    NotAllowed(String),
    /// The per-job bound on a host call was reached.
    #[error("per-job limit reached: {0}")]
    LimitReached(String),
    /// The request was invalid (bad payload, unknown type, ...).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store failed; the job may retry.
    #[error("host error: {0}")]
    Host(String),
}

/// Host services a running job may call. The engine implements this for each
/// run (bound to the job id and the handler's allow-lists); tests may supply
/// a double.
pub trait JobServices: Send + Sync {
    /// Stores the job's progress (JSON text). Does not renew the lease.
    fn progress(&self, json: String) -> BoxFuture<'_, Result<(), ServiceError>>;
    /// Enqueues a follow-up job; returns its id.
    fn enqueue(&self, request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>>;
    /// Lists this job's children (flows) with their results and errors.
    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>>;
}

/// Per-run context: cancellation, host services, and the run's record.
#[derive(Clone)]
pub struct JobContext {
    /// Fires when the run must stop (cancel, lease lost, shutdown).
    pub cancel: CancellationToken,
    /// Host services bound to this run.
    pub services: Arc<dyn JobServices>,
    /// Where the handler reports what it measures and what the guest logs;
    /// the engine stores it with the attempt.
    pub record: Arc<RunRecord>,
    /// Until when the run's lease is provably held: a handler must not
    /// start (or continue) guest code once it has lapsed, even before
    /// `cancel` fires.
    pub lease: LeaseClock,
}

/// Which bounded resource a guest exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum LimitKind {
    /// The JSON result was larger than `max_result`.
    ResultSize,
    /// A progress report was larger than allowed.
    ProgressSize,
    /// Log volume (or one log line) was larger than `max_log`.
    LogVolume,
    /// Too many enqueue calls in one run.
    EnqueueCount,
    /// Table elements or instances beyond the store limits.
    Tables,
    /// Some other store limit.
    Other,
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::ResultSize => "result size",
            Self::ProgressSize => "progress size",
            Self::LogVolume => "log volume",
            Self::EnqueueCount => "enqueue count",
            Self::Tables => "tables",
            Self::Other => "store limit",
        };
        f.write_str(name)
    }
}

/// How a run ended. Closed: the engine maps each variant to one transition.
///
/// `Succeeded`, `Retryable` and `Terminal` are the handler's own answers.
/// Every other variant is a failure the host observed; all of those are
/// retryable and consume an attempt, except `Cancelled`, whose
/// meaning the engine decides from why it cancelled.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Done; the optional JSON result text is stored.
    Succeeded {
        /// JSON text, already size-checked by the handler runner.
        result: Option<String>,
    },
    /// Try again later.
    Retryable {
        /// What went wrong, as the handler said it.
        message: String,
        /// A floor on the backoff before the next attempt.
        retry_after: Option<Duration>,
        /// `false` gives the attempt back (capacity or rate limits).
        consumes_attempt: bool,
    },
    /// Fail now; no retry.
    Terminal {
        /// What went wrong, as the handler said it.
        message: String,
        /// A machine-readable code, e.g. `content-refused`.
        code: Option<String>,
        /// Machine-readable details (JSON text).
        details: Option<String>,
    },
    /// The guest trapped (panic, unreachable, stack overflow, ...).
    Trapped {
        /// The trap description, including a guest panic message.
        message: String,
    },
    /// The deadline passed and the run was stopped.
    TimedOut,
    /// The cancel token fired and the run was stopped.
    Cancelled,
    /// The guest hit its linear memory cap.
    OutOfMemory,
    /// The guest ran out of fuel.
    FuelExhausted,
    /// The guest exceeded a bounded resource.
    LimitExceeded {
        /// Which bound.
        which: LimitKind,
        /// A human-readable detail (sizes, counts), never payload text.
        detail: String,
    },
    /// The host failed to run the job (instantiation, store error, ...).
    HostError {
        /// What failed.
        message: String,
    },
}

impl Outcome {
    /// A one-line description for `last_error`, or `None` for success.
    pub fn error_message(&self) -> Option<String> {
        match self {
            Self::Succeeded { .. } => None,
            Self::Retryable { message, .. } => Some(message.clone()),
            Self::Terminal { message, .. } => Some(message.clone()),
            Self::Trapped { message } => Some(format!("trapped: {message}")),
            Self::TimedOut => {
                Some("timed out: the job ran past its deadline and was stopped".into())
            }
            Self::Cancelled => Some("cancelled".into()),
            Self::OutOfMemory => Some("out of memory: the guest hit its memory limit".into()),
            Self::FuelExhausted => Some("fuel exhausted: the guest ran out of fuel".into()),
            Self::LimitExceeded { which, detail } => {
                Some(format!("limit exceeded ({which}): {detail}"))
            }
            Self::HostError { message } => Some(format!("host error: {message}")),
        }
    }
}

/// Runs jobs of one or more types. Implemented natively (tests, benchmarks)
/// and by the WASM sandbox.
pub trait Handler: Send + Sync + 'static {
    /// Runs one job to an outcome. Must return soon after `ctx.cancel` fires
    /// or `job.deadline` passes.
    fn handle(&self, job: JobRun, ctx: JobContext) -> BoxFuture<'static, Outcome>;

    /// The version that runs jobs (module digest for WASM; recorded in the
    /// job's `handler_version`).
    fn version(&self) -> String {
        "native".to_string()
    }
}

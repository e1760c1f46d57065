//! Attempt history and stored job logs: what each run of a job was, and
//! what its handler logged.
//!
//! Why a table of attempts (`job_attempts`) rather than an array on the job
//! row: an attempt row is written once, when the attempt ends, by an
//! append-only `INSERT … SELECT` from the job row in the same transaction
//! as the job's own transition (so it is fenced exactly like it: the
//! `SELECT` reads the row only while it is still `running` under the
//! writer's lease). The job row itself does not grow with each attempt, so
//! claims, scans and the hot completion path read and rewrite the same
//! bytes as before, and a job with many attempts costs its history only
//! when someone asks for it (one index range on `(job_id, id)`). Pruning a
//! job deletes its attempt and log rows in the same transaction.
//!
//! Invariants:
//! - Finished attempts are stored; two attempts are facts of the job row
//!   itself and are derived on reading ([`derived_attempt`]): the attempt
//!   running now (the row's lease owner, digest and start) and an expiry
//!   (the job failed with the `expired` code before any run started), so
//!   the claim path writes nothing extra.
//! - Attempt numbers are the job's `attempts` counter at the run, which is
//!   not unique: an attempt given back (shutdown release, a retry that
//!   keeps its attempt) is run again under the same number, and an
//!   operator's retry of a failed job starts again from 1. Rows are ordered
//!   by insertion (`id`), never keyed by attempt number alone.
//! - The figures of [`AttemptUsage`] are measured by the host (see
//!   [`RunRecord`](crate::RunRecord)); a figure the host could not measure
//!   is `None`, never a guess.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::job::{Job, JobStatus};
use crate::store::EXPIRED_CODE;

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// Still running (derived from the job row, never stored).
    Running,
    /// The handler succeeded.
    Succeeded,
    /// The handler failed and another attempt was scheduled.
    Retried,
    /// The handler failed and the job failed for good.
    Failed,
    /// The run passed its timeout and was stopped.
    TimedOut,
    /// The guest hit its memory cap.
    OutOfMemory,
    /// The guest used up its fuel.
    FuelExhausted,
    /// The guest broke another per-job limit (log volume, result size, …).
    LimitExceeded,
    /// The guest trapped (panic, unreachable, stack overflow, exit).
    Trapped,
    /// The host failed to run the handler.
    HostError,
    /// An operator or producer cancelled the job while it ran.
    Cancelled,
    /// The worker stopped renewing its lease (crash, partition) and the
    /// job was rescued by another host.
    LeaseLost,
    /// The host shut down and gave the attempt back.
    Released,
    /// The job's start deadline passed before it could run (derived).
    Expired,
}

impl AttemptOutcome {
    /// Every outcome.
    pub const ALL: [Self; 14] = [
        Self::Running,
        Self::Succeeded,
        Self::Retried,
        Self::Failed,
        Self::TimedOut,
        Self::OutOfMemory,
        Self::FuelExhausted,
        Self::LimitExceeded,
        Self::Trapped,
        Self::HostError,
        Self::Cancelled,
        Self::LeaseLost,
        Self::Released,
        Self::Expired,
    ];

    /// The snake_case name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::OutOfMemory => "out_of_memory",
            Self::FuelExhausted => "fuel_exhausted",
            Self::LimitExceeded => "limit_exceeded",
            Self::Trapped => "trapped",
            Self::HostError => "host_error",
            Self::Cancelled => "cancelled",
            Self::LeaseLost => "lease_lost",
            Self::Released => "released",
            Self::Expired => "expired",
        }
    }

    /// The outcome named `s` (as [`as_str`](Self::as_str) spells it).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one attempt cost, measured by the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptUsage {
    /// Wall time from the handler's start to its outcome, in milliseconds.
    pub wall_ms: Option<u64>,
    /// The high-water mark of the guest's linear memory, in bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Fuel consumed, when the sandbox meters fuel.
    pub fuel: Option<u64>,
    /// Bytes of log text the guest wrote (stored or not).
    pub log_bytes: Option<u64>,
    /// Bytes of the result (or error details) the handler returned.
    pub result_bytes: Option<u64>,
    /// Outbound HTTP requests sent.
    pub http_requests: Option<u64>,
    /// Outbound HTTP body bytes received.
    pub http_bytes: Option<u64>,
    /// Jobs the run enqueued.
    pub enqueues: Option<u64>,
}

/// What a transition records about the attempt it ends (besides what the
/// job row already says: number, worker, digest, start).
#[derive(Clone, Debug, Default)]
pub struct AttemptEnd {
    /// The cause; `None` takes the transition's own meaning (`succeeded`
    /// for a completion, `retried` for a retry, `failed` for a failure).
    pub outcome: Option<AttemptOutcome>,
    /// The run's figures.
    pub usage: AttemptUsage,
    /// Log lines not yet stored; written in the same transaction.
    pub logs: Vec<LogLine>,
}

/// One attempt of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// The job.
    pub job_id: String,
    /// The job's attempt counter during this run.
    pub attempt: u32,
    /// The worker (host) that ran it.
    pub worker: Option<String>,
    /// The module digest (handler version) it ran.
    pub digest: Option<String>,
    /// When the run started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended; `None` while running.
    pub finished_at: Option<DateTime<Utc>>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error message, if any.
    pub error: Option<String>,
    /// The handler's error code, if any.
    pub error_code: Option<String>,
    /// The handler's JSON error details, if any.
    pub error_details: Option<String>,
    /// The run's figures.
    #[serde(flatten)]
    pub usage: AttemptUsage,
}

/// One line a guest logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// The job.
    pub job_id: String,
    /// The attempt that logged it.
    pub attempt: u32,
    /// Its position within the attempt, from 0.
    pub seq: u32,
    /// When it was logged.
    pub at: DateTime<Utc>,
    /// `trace`, `debug`, `info`, `warn`, `error`, `stdout` or `stderr`.
    pub level: String,
    /// The text (cut at the handler's `max_log_line`).
    pub message: String,
}

/// A stored log line with its position in the store, the cursor to read
/// on from (`after`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredLogLine {
    /// Increases with every stored line; pass as [`LogQuery::after`].
    pub cursor: i64,
    /// The line.
    #[serde(flatten)]
    pub line: LogLine,
}

/// Which stored log lines of a job to read.
#[derive(Clone, Debug, Default)]
pub struct LogQuery {
    /// The job.
    pub job_id: String,
    /// Only this attempt.
    pub attempt: Option<u32>,
    /// Only lines stored after this cursor.
    pub after: Option<i64>,
    /// At most this many lines (default 1000).
    pub limit: Option<u32>,
}

impl LogQuery {
    /// The default page size.
    pub const DEFAULT_LIMIT: u32 = 1000;

    /// The page size to use.
    pub fn page(&self) -> u32 {
        self.limit.unwrap_or(Self::DEFAULT_LIMIT).max(1)
    }
}

/// The attempt the job row itself describes and no stored row does: the
/// one running now, or an expiry before any run.
pub fn derived_attempt(job: &Job) -> Option<Attempt> {
    let base = |outcome| Attempt {
        job_id: job.id.clone(),
        attempt: job.attempts,
        worker: None,
        digest: None,
        started_at: None,
        finished_at: None,
        outcome,
        error: None,
        error_code: None,
        error_details: None,
        usage: AttemptUsage::default(),
    };
    match job.status {
        JobStatus::Running => Some(Attempt {
            worker: job.lease_owner.clone(),
            digest: job.handler_version.clone(),
            started_at: job.started_at,
            ..base(AttemptOutcome::Running)
        }),
        JobStatus::Failed if job.error_code.as_deref() == Some(EXPIRED_CODE) => Some(Attempt {
            attempt: job.attempts.saturating_add(1),
            finished_at: job.finished_at,
            error: job.last_error.clone(),
            error_code: job.error_code.clone(),
            ..base(AttemptOutcome::Expired)
        }),
        _ => None,
    }
}

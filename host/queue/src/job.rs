//! The job record and the values producers and inspectors pass
//! around: [`NewJob`], [`AddResult`], [`JobFilter`], [`StatusCounts`],
//! [`HandlerEvent`].
//!
//! Invariants: `Job` mirrors one row of the jobs table, every column; a
//! terminal status never changes except through `retry_failed`. Payload text is never part of a `Debug` or `Display`
//! rendering of a [`NewJob`] (it may hold secrets).

use std::{fmt, str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::cursor::JobCursor;
use crate::handler::Scope;

/// Where a job is in its life. `Succeeded`, `Failed`, `Cancelled` are terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting to be claimed (possibly not yet due).
    Pending,
    /// Claimed by a worker under a lease.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Dead-lettered: terminal failure, exhausted attempts, expired.
    Failed,
    /// Cancelled by an operator or producer.
    Cancelled,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 5] = [
        Self::Pending,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];
    /// The terminal statuses.
    pub const TERMINAL: [JobStatus; 3] = [Self::Succeeded, Self::Failed, Self::Cancelled];

    /// The lowercase name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the job is done for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of the five statuses.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown job status `{0}`: expected pending, running, succeeded, failed or cancelled")]
pub struct UnknownStatus(pub String);

impl FromStr for JobStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

/// One job row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Unique, sortable by creation (UUID v7).
    pub id: String,
    /// Selects the handler.
    pub job_type: String,
    /// JSON object text.
    pub payload: String,
    /// Optional scope.
    pub scope: Option<Scope>,
    /// Current status.
    pub status: JobStatus,
    /// Lower runs first.
    pub priority: i32,
    /// Not claimed before this instant.
    pub run_at: DateTime<Utc>,
    /// Attempts started so far.
    pub attempts: u32,
    /// Attempt budget.
    pub max_attempts: u32,
    /// The most recent failure (or cancel reason).
    pub last_error: Option<String>,
    /// Machine-readable code of a terminal handler error (e.g. `content-refused`).
    pub error_code: Option<String>,
    /// JSON details of a terminal handler error.
    pub error_details: Option<String>,
    /// Live-job dedupe key.
    pub dedupe_key: Option<String>,
    /// Worker holding the lease while running.
    pub lease_owner: Option<String>,
    /// When the lease runs out.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When the job most recently became running.
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a terminal status.
    pub finished_at: Option<DateTime<Utc>>,
    /// JSON result text of a successful run.
    pub result: Option<String>,
    /// Latest JSON progress text reported by the handler.
    pub progress: Option<String>,
    /// Parent job in a flow.
    pub parent_id: Option<String>,
    /// Schedule that enqueued this job.
    pub schedule_id: Option<String>,
    /// Deadline to *start*; a job not started by then fails as expired.
    pub expires_at: Option<DateTime<Utc>>,
    /// Version (module digest) of the handler that last ran it.
    pub handler_version: Option<String>,
    /// The producer's W3C trace context (`traceparent`), when it gave one.
    pub traceparent: Option<String>,
    /// Insert time.
    pub created_at: DateTime<Utc>,
    /// Last write time.
    pub updated_at: DateTime<Utc>,
}

/// A job to enqueue. Build with [`NewJob::new`] and the builder methods.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct NewJob {
    /// Job type; must be non-empty and known.
    pub job_type: String,
    /// JSON object text.
    pub payload: String,
    /// Optional scope.
    pub scope: Option<Scope>,
    /// Optional dedupe key (unique among live jobs).
    pub dedupe_key: Option<String>,
    /// Attempt budget; `None` uses the handler's or the queue's default.
    pub max_attempts: Option<u32>,
    /// Absolute due time; `None` means now.
    pub run_at: Option<DateTime<Utc>>,
    /// Added to `run_at` (or now).
    pub delay: Option<Duration>,
    /// Lower runs first; default 0.
    pub priority: i32,
    /// Deadline to start.
    pub expires_at: Option<DateTime<Utc>>,
    /// Relative deadline to start (from now); ignored when `expires_at` is set.
    pub ttl: Option<Duration>,
    /// Parent job (flows).
    pub parent_id: Option<String>,
    /// Schedule that enqueued the job.
    pub schedule_id: Option<String>,
    /// The producer's W3C trace context (`00-<trace id>-<span id>-<flags>`):
    /// the job's runs are traced as children of that span. Checked at
    /// enqueue.
    pub traceparent: Option<String>,
}

impl fmt::Debug for NewJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewJob")
            .field("job_type", &self.job_type)
            .field("payload", &format_args!("<{} bytes>", self.payload.len()))
            .field("scope", &self.scope)
            .field("dedupe_key", &self.dedupe_key)
            .field("run_at", &self.run_at)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

impl NewJob {
    /// A job of `job_type` with a JSON object payload.
    pub fn new(job_type: impl Into<String>, payload: &serde_json::Value) -> Self {
        Self::from_text(job_type, payload.to_string())
    }

    /// A job whose payload is JSON text (validated at enqueue).
    pub fn from_text(job_type: impl Into<String>, payload: impl Into<String>) -> Self {
        Self {
            job_type: job_type.into(),
            payload: payload.into(),
            ..Self::default()
        }
    }

    /// Sets the scope.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = Some(scope);
        self
    }
    /// Sets the dedupe key.
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }
    /// Sets the attempt budget.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }
    /// Sets the absolute due time.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }
    /// Delays the job.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }
    /// Sets the priority (lower runs first).
    pub fn priority(mut self, p: i32) -> Self {
        self.priority = p;
        self
    }
    /// Sets the start deadline.
    pub fn expires_at(mut self, at: DateTime<Utc>) -> Self {
        self.expires_at = Some(at);
        self
    }
    /// Sets a relative start deadline.
    pub fn ttl(mut self, d: Duration) -> Self {
        self.ttl = Some(d);
        self
    }
    /// Carries the producer's W3C `traceparent` (e.g. the current span's
    /// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`), so the job's
    /// runs join the producer's trace.
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }
    /// Makes the job a child of `parent_id`.
    pub fn parent(mut self, parent_id: impl Into<String>) -> Self {
        self.parent_id = Some(parent_id.into());
        self
    }
}

/// The answer to an enqueue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddResult {
    /// The new job's id, or the live duplicate's id.
    pub id: String,
    /// `true` when a live job with the same dedupe key already existed.
    pub deduplicated: bool,
}

/// Which jobs `find`, `retry_failed` and friends act on. Empty lists match
/// everything.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobFilter {
    /// Job types to match.
    #[serde(default)]
    pub types: Vec<String>,
    /// Statuses to match.
    #[serde(default)]
    pub statuses: Vec<JobStatus>,
    /// Exact scope.
    #[serde(default)]
    pub scope: Option<Scope>,
    /// Children of this parent.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// Only the job with this id.
    #[serde(default)]
    pub id: Option<String>,
    /// Page size; `find` defaults to [`JobFilter::DEFAULT_LIMIT`].
    #[serde(default)]
    pub limit: Option<u32>,
    /// Rows to skip (after `after`, when both are given). A deep offset
    /// reads every skipped row: page with `after` instead.
    #[serde(default)]
    pub offset: Option<u32>,
    /// Keyset paging (`find` only): the jobs strictly after this position
    /// in the list's order, i.e. the page after the one this cursor ended.
    #[serde(default)]
    pub after: Option<JobCursor>,
    /// List newest first (`find` only); oldest first by default. Either way
    /// the order is (`created_at`, `id`), ties broken by id.
    #[serde(default)]
    pub newest_first: bool,
}

impl JobFilter {
    /// `find`'s page size when no limit is given.
    pub const DEFAULT_LIMIT: u32 = 100;

    /// Everything in one scope.
    pub fn for_scope(scope: Scope) -> Self {
        Self {
            scope: Some(scope),
            ..Self::default()
        }
    }
}

/// Number of jobs in each status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCounts {
    /// Pending jobs (due or not).
    pub pending: u64,
    /// Running jobs.
    pub running: u64,
    /// Succeeded jobs.
    pub succeeded: u64,
    /// Failed jobs.
    pub failed: u64,
    /// Cancelled jobs.
    pub cancelled: u64,
}

impl StatusCounts {
    /// Adds `n` to the counter of `status`.
    pub fn add(&mut self, status: JobStatus, n: u64) {
        match status {
            JobStatus::Pending => self.pending += n,
            JobStatus::Running => self.running += n,
            JobStatus::Succeeded => self.succeeded += n,
            JobStatus::Failed => self.failed += n,
            JobStatus::Cancelled => self.cancelled += n,
        }
    }
}

/// Unfinished jobs of one type, read at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeCounts {
    /// The job type.
    pub job_type: String,
    /// Pending and due (`run_at` reached).
    pub due: u64,
    /// Pending, due later (`run_at` in the future).
    pub scheduled: u64,
    /// Running.
    pub running: u64,
}

/// What happened to a handler module on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandlerEventKind {
    /// A new version now serves its type.
    Deployed,
    /// A module or manifest was refused; the previous version keeps serving.
    Rejected,
    /// The module was undeployed.
    Removed,
}

impl HandlerEventKind {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployed => "deployed",
            Self::Rejected => "rejected",
            Self::Removed => "removed",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "deployed" => Some(Self::Deployed),
            "rejected" => Some(Self::Rejected),
            "removed" => Some(Self::Removed),
            _ => None,
        }
    }
}

/// One row of the `handler_events` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandlerEvent {
    /// When it happened (the store fills this in on insert).
    pub at: DateTime<Utc>,
    /// Job type, when known.
    pub job_type: Option<String>,
    /// The module or manifest file.
    pub file: Option<String>,
    /// Module digest, when known.
    pub digest: Option<String>,
    /// What happened.
    pub kind: HandlerEventKind,
    /// Why (for rejections).
    pub reason: Option<String>,
}

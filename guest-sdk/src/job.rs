//! The job a handler receives, with its payload already decoded.

use crate::bindings::boxcar::handler::types as wit;

/// A `(type, id)` pair the job belongs to, e.g. `account` / `42`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The kind of thing, e.g. `account`.
    pub scope_type: String,
    /// Its identity, e.g. `42`.
    pub scope_id: String,
}

/// One job, with its payload decoded into `P`.
#[derive(Debug, Clone)]
pub struct Job<P> {
    /// Unique id, sortable by creation.
    pub id: String,
    /// The job type that selected this handler.
    pub job_type: String,
    /// The decoded payload.
    pub payload: P,
    /// 1-based attempt number.
    pub attempt: u32,
    /// The job's attempt budget.
    pub max_attempts: u32,
    /// The scope, if the producer gave one.
    pub scope: Option<Scope>,
    /// The schedule that enqueued this job, if any.
    pub schedule_id: Option<String>,
    /// The parent job of a flow, if any.
    pub parent_id: Option<String>,
    /// When the host stops this run, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
}

impl<P> Job<P> {
    /// True on the last try (`attempt >= max_attempts`).
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    pub(crate) fn from_wit(job: wit::Job, payload: P) -> Self {
        Self {
            id: job.id,
            job_type: job.job_type,
            payload,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            scope: job.scope.map(Scope::from_wit),
            schedule_id: job.schedule_id,
            parent_id: job.parent_id,
            deadline_ms: job.deadline_ms,
        }
    }
}

impl Scope {
    /// Builds a scope from its two parts.
    pub fn new(scope_type: impl Into<String>, scope_id: impl Into<String>) -> Self {
        Self {
            scope_type: scope_type.into(),
            scope_id: scope_id.into(),
        }
    }

    fn from_wit(s: wit::Scope) -> Self {
        Self {
            scope_type: s.scope_type,
            scope_id: s.scope_id,
        }
    }

    pub(crate) fn into_wit(self) -> wit::Scope {
        wit::Scope {
            scope_type: self.scope_type,
            scope_id: self.scope_id,
        }
    }
}

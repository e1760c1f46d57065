//! The parameters of the engine's writes after a claim: which claim a
//! write belongs to ([`ClaimRef`]) and what each fenced transition carries.
//! Every one of them is fenced on the claim: `status = running AND
//! lease_owner = worker AND attempts = the claim's attempt`.

use std::time::Duration;

use crate::attempt::AttemptEnd;
use crate::job::Job;

/// One claim of a job: the job's id and the attempt the claim made (the
/// job's `attempts` right after it). With the worker id it is the fence of
/// every write the claim's run makes: a later claim of the same job, even
/// by the same worker, has another attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    /// Job id.
    pub id: String,
    /// The claim's attempt.
    pub attempt: u32,
}

impl ClaimRef {
    /// The claim `job` is in right after it was claimed.
    pub fn of(job: &Job) -> Self {
        Self {
            id: job.id.clone(),
            attempt: job.attempts,
        }
    }
}

/// Extend leases of running jobs owned by `worker_id`.
#[derive(Clone, Debug)]
pub struct RenewParams {
    /// Lease owner.
    pub worker_id: String,
    /// Claims to renew.
    pub claims: Vec<ClaimRef>,
    /// New lease length from the store's now.
    pub lease: Duration,
}

/// One successful run to record.
#[derive(Clone, Debug)]
pub struct Completed {
    /// Job id.
    pub id: String,
    /// The claim's attempt (fence).
    pub attempt: u32,
    /// JSON result text.
    pub result: Option<String>,
    /// The attempt this completion ends; it is recorded as succeeded
    /// whatever outcome it names.
    pub ending: AttemptEnd,
}

/// Mark jobs `succeeded` (batched).
#[derive(Clone, Debug)]
pub struct CompleteParams {
    /// Lease owner (fence).
    pub worker_id: String,
    /// The finished runs.
    pub jobs: Vec<Completed>,
}

/// Put a running job back to `pending` for a later attempt.
#[derive(Clone, Debug)]
pub struct RetryParams {
    /// Lease owner (fence).
    pub worker_id: String,
    /// Job id.
    pub id: String,
    /// The claim's attempt (fence).
    pub attempt: u32,
    /// Backoff before the next attempt.
    pub delay: Duration,
    /// The failure.
    pub error: String,
    /// `false` gives the attempt back.
    pub consumes_attempt: bool,
    /// The attempt this retry ends.
    pub ending: AttemptEnd,
}

/// Mark a running job `failed`.
#[derive(Clone, Debug)]
pub struct FailParams {
    /// Lease owner (fence).
    pub worker_id: String,
    /// Job id.
    pub id: String,
    /// The claim's attempt (fence).
    pub attempt: u32,
    /// The failure.
    pub error: String,
    /// The handler's machine-readable error code (terminal errors).
    pub code: Option<String>,
    /// The handler's JSON error details (terminal errors).
    pub details: Option<String>,
    /// The attempt this failure ends.
    pub ending: AttemptEnd,
}

/// Give running jobs back (shutdown): `pending`, unleased, attempt returned.
#[derive(Clone, Debug)]
pub struct ReleaseParams {
    /// Lease owner (fence).
    pub worker_id: String,
    /// Claims to release.
    pub claims: Vec<ClaimRef>,
}

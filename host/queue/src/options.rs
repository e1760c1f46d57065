//! Queue and worker options with named defaults, validated once at
//! construction. A bad option is an [`OptionsError`] naming it — never a
//! silent default.

use std::time::Duration;

use crate::bounds::{
    at_most, MAX_ABANDON_GRACE, MAX_GRACE, MAX_HORIZON, MAX_POLL_INTERVAL, MAX_RETRY_DELAY,
};
use crate::job::JobStatus;
use crate::validate::PayloadLimits;

/// Default claim poll interval.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Default retry backoff base.
pub const DEFAULT_BASE_BACKOFF: Duration = Duration::from_secs(2);
/// Default ceiling on backoff growth.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Default lease headroom beyond the timeout.
pub const DEFAULT_LEASE_GRACE: Duration = Duration::from_secs(30);
/// Default time an aborted run may take to exit before its slot is freed.
pub const DEFAULT_ABANDON_GRACE: Duration = Duration::from_secs(5);
/// Default time in-flight work may finish on shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(15);
/// Default attempt budget.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default number of consecutive blocked polls before a starvation warning.
pub const DEFAULT_STARVATION_POLLS: u32 = 20;
/// Default claim-ahead horizon.
pub const DEFAULT_CLAIM_AHEAD: Duration = Duration::from_millis(20);
/// Longest claim-ahead horizon accepted: a buffered job's lease is not
/// renewed, so it must start well within the shortest default lease.
pub const MAX_CLAIM_AHEAD: Duration = Duration::from_secs(1);

/// An option is out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid option `{option}`: {reason}")]
pub struct OptionsError {
    /// The option's name.
    pub option: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

fn err(option: &'static str, reason: impl Into<String>) -> OptionsError {
    OptionsError {
        option,
        reason: reason.into(),
    }
}

/// Producer-side options. Start from `QueueOptions::default()` and set
/// fields; more options may come.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueOptions {
    /// Attempt budget when neither the job nor its handler sets one.
    pub default_max_attempts: u32,
    /// Payload bounds.
    pub payload_limits: PayloadLimits,
    /// Refuse unknown job types when a registry is attached.
    pub check_known_types: bool,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            default_max_attempts: DEFAULT_MAX_ATTEMPTS,
            payload_limits: PayloadLimits::default(),
            check_known_types: true,
        }
    }
}

impl QueueOptions {
    /// Checks every option.
    ///
    /// # Errors
    /// The first invalid option, by name.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if self.default_max_attempts == 0 {
            return Err(err("default_max_attempts", "must be a positive integer"));
        }
        if self.payload_limits.max_bytes == 0 {
            return Err(err("payload_limits.max_bytes", "must be positive"));
        }
        if self.payload_limits.max_depth == 0 {
            return Err(err("payload_limits.max_depth", "must be positive"));
        }
        Ok(())
    }
}

/// Opt-in pruning of old terminal jobs ([`RetentionPolicy::new`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionPolicy {
    /// Delete terminal jobs finished longer ago than this.
    pub older_than: Duration,
    /// How often the sweeper runs.
    pub sweep_interval: Duration,
    /// Which terminal statuses to delete.
    pub statuses: Vec<JobStatus>,
}

impl RetentionPolicy {
    /// Delete jobs in `statuses` finished longer than `older_than` ago,
    /// sweeping every `sweep_interval` (validated with the worker options).
    pub fn new(older_than: Duration, sweep_interval: Duration, statuses: Vec<JobStatus>) -> Self {
        Self {
            older_than,
            sweep_interval,
            statuses,
        }
    }
}

/// Engine options. Start from `WorkerOptions::default()` and set fields;
/// more options may come.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Lease owner identity (default: a random UUID).
    pub worker_id: String,
    /// Claim loop / reconcile / rescue interval.
    pub poll_interval: Duration,
    /// Retry backoff base.
    pub base_backoff: Duration,
    /// Ceiling on backoff growth (an explicit retry_after still wins).
    pub max_backoff: Duration,
    /// Lease headroom beyond the timeout when leases are not renewed.
    pub lease_grace: Duration,
    /// How long an aborted run may take to exit before its slot is freed.
    pub abandon_grace: Duration,
    /// How long in-flight work may finish on shutdown before being aborted.
    pub shutdown_grace: Duration,
    /// Consecutive blocked polls before a starvation warning.
    pub starvation_polls: u32,
    /// Opt-in retention sweeper.
    pub retention: Option<RetentionPolicy>,
    /// Claim-ahead horizon: an unguarded type whose runs are short claims
    /// as many jobs beyond its free slots as those slots are expected to
    /// start within this time (at most 32 per slot and 1,024 per type), so
    /// claims come in larger batches. Zero turns it off.
    pub claim_ahead: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            worker_id: uuid::Uuid::new_v4().to_string(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            base_backoff: DEFAULT_BASE_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            lease_grace: DEFAULT_LEASE_GRACE,
            abandon_grace: DEFAULT_ABANDON_GRACE,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            starvation_polls: DEFAULT_STARVATION_POLLS,
            retention: None,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
        }
    }
}

impl WorkerOptions {
    /// Checks every option.
    ///
    /// # Errors
    /// The first invalid option, by name.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if self.worker_id.trim().is_empty() {
            return Err(err("worker_id", "must not be blank"));
        }
        if self.poll_interval.is_zero() {
            return Err(err("poll_interval", "must be positive"));
        }
        if self.max_backoff < self.base_backoff {
            return Err(err(
                "max_backoff",
                format!(
                    "must be at least base_backoff ({:?} < {:?})",
                    self.max_backoff, self.base_backoff
                ),
            ));
        }
        if self.starvation_polls == 0 {
            return Err(err("starvation_polls", "must be a positive integer"));
        }
        let durations = [
            ("poll_interval", self.poll_interval, MAX_POLL_INTERVAL),
            ("max_backoff", self.max_backoff, MAX_RETRY_DELAY),
            ("lease_grace", self.lease_grace, MAX_GRACE),
            ("abandon_grace", self.abandon_grace, MAX_ABANDON_GRACE),
            ("shutdown_grace", self.shutdown_grace, MAX_GRACE),
            ("claim_ahead", self.claim_ahead, MAX_CLAIM_AHEAD),
        ];
        for (option, value, max) in durations {
            at_most(value, max).map_err(|reason| err(option, reason))?;
        }
        if let Some(r) = &self.retention {
            at_most(r.older_than, MAX_HORIZON).map_err(|m| err("retention.older_than", m))?;
            at_most(r.sweep_interval, MAX_HORIZON)
                .map_err(|m| err("retention.sweep_interval", m))?;
            if r.older_than.is_zero() {
                return Err(err("retention.older_than", "must be positive"));
            }
            if r.sweep_interval.is_zero() {
                return Err(err("retention.sweep_interval", "must be positive"));
            }
            if r.statuses.is_empty() {
                return Err(err("retention.statuses", "must name at least one status"));
            }
            if let Some(s) = r.statuses.iter().find(|s| !s.is_terminal()) {
                return Err(err(
                    "retention.statuses",
                    format!(
                        "`{s}` is not terminal; only succeeded, failed, cancelled can be pruned"
                    ),
                ));
            }
        }
        Ok(())
    }
}

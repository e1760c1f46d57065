//! Parameters of the schedule methods of the [`JobStore`](super::JobStore)
//! port.
//!
//! Invariants every store keeps:
//! - `reconcile_schedules` runs in one transaction: declared schedules are
//!   created or, when their definition changed, updated in place (new
//!   `next_run_at`); unchanged ones keep their `next_run_at`; schedules of
//!   the same owner that are no longer declared are deleted.
//! - `fire_schedule` is a compare-and-set of `next_run_at` from the tick to
//!   the next tick, in the same transaction as the job insert: across any
//!   number of hosts, one tick yields at most one job.

use chrono::{DateTime, Utc};

use super::InsertJob;
use crate::schedule::ScheduleDef;

/// One declared schedule with the first tick it gets if it is new or edited.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredSchedule {
    /// The definition.
    pub def: ScheduleDef,
    /// `next_run_at` to store when the row is created or its definition
    /// changed (`None`: never runs, e.g. past `end_at`).
    pub first_run: Option<DateTime<Utc>>,
}

/// Make the stored schedules of `owner` equal to `declared`.
#[derive(Clone, Debug)]
pub struct ReconcileSchedules {
    /// The declaring set (e.g. one configuration); only its rows are removed.
    pub owner: String,
    /// Every schedule the owner declares.
    pub declared: Vec<DeclaredSchedule>,
}

/// What a reconcile changed (ids, sorted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Newly stored.
    pub created: Vec<String>,
    /// Definition changed, updated in place.
    pub updated: Vec<String>,
    /// No longer declared, deleted.
    pub removed: Vec<String>,
}

/// Enqueue the job of one due tick, if no one else did.
#[derive(Clone, Debug)]
pub struct FireSchedule {
    /// The schedule.
    pub schedule_id: String,
    /// The tick being run: must equal the stored `next_run_at`.
    pub tick: DateTime<Utc>,
    /// The `next_run_at` to store (`None`: the schedule is finished).
    pub next_run_at: Option<DateTime<Utc>>,
    /// The job to insert (its `schedule_id` set).
    pub job: InsertJob,
}

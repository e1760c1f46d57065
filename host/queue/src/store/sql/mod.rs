//! What the SQL stores share, written once:
//! - the statements of the policy primitives and schedules (`statements`)
//!   and of the engine's fenced transitions, inspection and handler events
//!   (`transitions`), over a [`Dialect`] that spells what differs (table
//!   names, now, bound lists, row locks, saturating time sums);
//! - the jobs, schedules and events column lists and the live-status
//!   predicate;
//! - the mapping from a result row to a [`Job`], [`ScheduleRecord`],
//!   [`HandlerEvent`] or counts, over [`SqlRow`], a small adapter each
//!   backend implements for its row type (SQLite keeps times as integer
//!   milliseconds, Postgres as `timestamptz`);
//! - attempt rows and log lines (`history`);
//! - the `JobStore` impl's delegation to each backend's concern modules
//!   ([`sql_job_store!`]).
//!
//! What stays per backend: binding values (times, lists, booleans are
//! encoded differently), inserts, the unguarded claim, batched
//! completions, cancels and filtered queries, whose SQL is what differs.

mod deployed_types;
mod dialect;
mod history;
mod page;
mod statements;
mod transitions;

pub(super) use deployed_types::{deployed_type_from_row, type_max_attempts};
#[cfg(feature = "sqlite")]
pub(super) use dialect::sqlite_json_elements;
pub(super) use dialect::Dialect;
pub(super) use history::{
    attempt_from_row, endings_json, figure_values, log_from_row, logs_json, set_figures_from,
    with_figures, Ending as SqlEnding, FIGURES,
};
pub(super) use page::{page_query, Bind as PageBind};

use std::str::FromStr;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};

use super::policy::guards::Candidate;
use super::{CancelledJob, StoreError};
use crate::handler::Scope;
use crate::job::{HandlerEvent, HandlerEventKind, Job, JobStatus, StatusCounts, TypeCounts};
use crate::schedule::{ScheduleDef, ScheduleRecord};

/// Every column of a job row, in the order [`job_from_row`] reads them.
const JOB_COLUMNS: [&str; 27] = [
    "id",
    "job_type",
    "payload",
    "scope_type",
    "scope_id",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "last_error",
    "dedupe_key",
    "lease_owner",
    "lease_expires_at",
    "started_at",
    "finished_at",
    "result",
    "progress",
    "parent_id",
    "schedule_id",
    "expires_at",
    "handler_version",
    "created_at",
    "updated_at",
    "error_code",
    "error_details",
    "traceparent",
];

/// The job columns, comma-separated.
pub(super) static JOB_COLS: LazyLock<String> = LazyLock::new(|| job_columns(""));

/// The job columns, each prefixed (e.g. `j.`).
pub(super) fn job_columns(prefix: &str) -> String {
    JOB_COLUMNS
        .iter()
        .map(|c| format!("{prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns of a schedule row.
pub(super) const SCHEDULE_COLS: &str = "id, job_type, payload, every_ms, cron, tz, immediately, \
    start_at, end_at, next_run_at, last_run_at, owner, created_at, updated_at";

/// A job that is neither finished nor cancelled: it holds its dedupe key,
/// blocks its parent, and can be cancelled.
pub(super) const LIVE: &str = "status IN ('pending', 'running')";

/// The column reads the shared row mappings need.
pub(super) trait SqlRow {
    /// A text column.
    fn text(&self, col: &str) -> Result<String, StoreError>;
    /// A nullable text column.
    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError>;
    /// A 32-bit integer column (`int4` on Postgres).
    fn int4(&self, col: &str) -> Result<i32, StoreError>;
    /// A nullable 64-bit integer column (`int8` on Postgres).
    fn opt_int8(&self, col: &str) -> Result<Option<i64>, StoreError>;
    /// A nullable instant column.
    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, StoreError>;
    /// A boolean column.
    fn flag(&self, col: &str) -> Result<bool, StoreError>;

    /// A non-null instant column.
    fn time(&self, col: &str) -> Result<DateTime<Utc>, StoreError> {
        self.opt_time(col)?
            .ok_or_else(|| StoreError::Corrupt(format!("column `{col}` is NULL")))
    }

    /// A count column; `fallback` for a negative value.
    fn count(&self, col: &str, fallback: u32) -> Result<u32, StoreError> {
        Ok(u32::try_from(self.int4(col)?).unwrap_or(fallback))
    }
}

fn status(r: &impl SqlRow) -> Result<JobStatus, StoreError> {
    JobStatus::from_str(&r.text("status")?).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn scope(r: &impl SqlRow) -> Result<Option<Scope>, StoreError> {
    Ok(r.opt_text("scope_type")?
        .zip(r.opt_text("scope_id")?)
        .map(|(t, i)| Scope::new(t, i)))
}

/// A job from a row with the [`JOB_COLS`].
pub(super) fn job_from_row(r: &impl SqlRow) -> Result<Job, StoreError> {
    Ok(Job {
        id: r.text("id")?,
        job_type: r.text("job_type")?,
        payload: r.text("payload")?,
        scope: scope(r)?,
        status: status(r)?,
        priority: r.int4("priority")?,
        run_at: r.time("run_at")?,
        attempts: r.count("attempts", 0)?,
        max_attempts: r.count("max_attempts", 1)?,
        last_error: r.opt_text("last_error")?,
        error_code: r.opt_text("error_code")?,
        error_details: r.opt_text("error_details")?,
        dedupe_key: r.opt_text("dedupe_key")?,
        lease_owner: r.opt_text("lease_owner")?,
        lease_expires_at: r.opt_time("lease_expires_at")?,
        started_at: r.opt_time("started_at")?,
        finished_at: r.opt_time("finished_at")?,
        result: r.opt_text("result")?,
        progress: r.opt_text("progress")?,
        parent_id: r.opt_text("parent_id")?,
        schedule_id: r.opt_text("schedule_id")?,
        expires_at: r.opt_time("expires_at")?,
        handler_version: r.opt_text("handler_version")?,
        traceparent: r.opt_text("traceparent")?,
        created_at: r.time("created_at")?,
        updated_at: r.time("updated_at")?,
    })
}

/// A guarded claim's candidate from a row with `id, scope_type, scope_id,
/// expires_at`.
fn candidate_from_row(r: &impl SqlRow) -> Result<Candidate, StoreError> {
    Ok(Candidate {
        id: r.text("id")?,
        scope: scope(r)?,
        expires_at: r.opt_time("expires_at")?,
    })
}

/// Candidates from rows with the columns of [`candidate_from_row`].
pub(super) fn candidates_from_rows<R: SqlRow>(rows: &[R]) -> Result<Vec<Candidate>, StoreError> {
    rows.iter().map(candidate_from_row).collect()
}

/// Jobs from rows with the [`JOB_COLS`].
pub(super) fn jobs_from_rows<R: SqlRow>(rows: &[R]) -> Result<Vec<Job>, StoreError> {
    rows.iter().map(job_from_row).collect()
}

/// A cancelled job from a row with `id, job_type, scope_type, scope_id,
/// attempts` and its status before the cancel in `status_column`.
pub(super) fn cancelled_from_row(
    r: &impl SqlRow,
    status_column: &str,
) -> Result<CancelledJob, StoreError> {
    Ok(CancelledJob {
        id: r.text("id")?,
        job_type: r.text("job_type")?,
        scope: scope(r)?,
        was_running: r.text(status_column)? == JobStatus::Running.as_str(),
        attempts: r.count("attempts", 0)?,
    })
}

/// A schedule from a row with the [`SCHEDULE_COLS`].
pub(super) fn schedule_from_row(r: &impl SqlRow) -> Result<ScheduleRecord, StoreError> {
    Ok(ScheduleRecord {
        def: ScheduleDef {
            id: r.text("id")?,
            job_type: r.text("job_type")?,
            payload: r.text("payload")?,
            every_ms: r.opt_int8("every_ms")?,
            cron: r.opt_text("cron")?,
            tz: r.opt_text("tz")?,
            immediately: r.flag("immediately")?,
            start_at: r.opt_time("start_at")?,
            end_at: r.opt_time("end_at")?,
        },
        next_run_at: r.opt_time("next_run_at")?,
        last_run_at: r.opt_time("last_run_at")?,
        owner: r.opt_text("owner")?,
        created_at: r.time("created_at")?,
        updated_at: r.time("updated_at")?,
    })
}

/// Counts per status from rows of `status, n` (`COUNT(*) AS n`).
pub(super) fn status_counts<R: SqlRow>(rows: &[R]) -> Result<StatusCounts, StoreError> {
    let mut counts = StatusCounts::default();
    for r in rows {
        let n = r.opt_int8("n")?.unwrap_or(0);
        counts.add(status(r)?, u64::try_from(n).unwrap_or(0));
    }
    Ok(counts)
}

/// Unfinished jobs per type from rows of `job_type, due, scheduled, running`.
pub(super) fn live_type_counts<R: SqlRow>(rows: &[R]) -> Result<Vec<TypeCounts>, StoreError> {
    let n = |r: &R, col: &str| -> Result<u64, StoreError> {
        Ok(u64::try_from(r.opt_int8(col)?.unwrap_or(0)).unwrap_or(0))
    };
    rows.iter()
        .map(|r| {
            Ok(TypeCounts {
                job_type: r.text("job_type")?,
                due: n(r, "due")?,
                scheduled: n(r, "scheduled")?,
                running: n(r, "running")?,
            })
        })
        .collect()
}

/// Counts per job type from rows of `job_type, n` (`COUNT(*) AS n`).
pub(super) fn type_counts<R: SqlRow>(rows: &[R]) -> Result<Vec<(String, u64)>, StoreError> {
    rows.iter()
        .map(|r| {
            let n = r.opt_int8("n")?.unwrap_or(0);
            Ok((r.text("job_type")?, u64::try_from(n).unwrap_or(0)))
        })
        .collect()
}

/// The columns of a handler event row.
pub(super) const EVENT_COLS: &str = "at, job_type, file, digest, kind, reason";

/// A handler event from a row with the [`EVENT_COLS`].
pub(super) fn event_from_row(r: &impl SqlRow) -> Result<HandlerEvent, StoreError> {
    let kind = r.text("kind")?;
    Ok(HandlerEvent {
        at: r.time("at")?,
        job_type: r.opt_text("job_type")?,
        file: r.opt_text("file")?,
        digest: r.opt_text("digest")?,
        kind: HandlerEventKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("handler event kind `{kind}`")))?,
        reason: r.opt_text("reason")?,
    })
}

/// Implements `JobStore` for a SQL store whose concern modules (`writes`,
/// `admin`, `events`, `schedules`, `tx`, `deployed_types`, `due`,
/// `history`) provide a function per port method, named after it and taking
/// the store first — the layout both SQL backends share. The methods that
/// differ (`backend`, `migrate`, `now`, `add_many`, `add_in_tx`) are passed
/// in as the macro's body. The call site imports the port's types.
macro_rules! sql_job_store {
    ($store:ty { $($own:tt)* }) => {
        #[async_trait]
        impl JobStore for $store {
            $($own)*

            async fn claim_batch(&self, p: ClaimParams) -> Result<ClaimResult, StoreError> {
                writes::claim_batch(self, p).await
            }

            async fn claim_many(&self, p: ClaimManyParams) -> Result<ClaimResult, StoreError> {
                match p.into_single() {
                    Ok(one) => writes::claim_batch(self, one).await,
                    Err(many) => due::claim_many(self, many).await,
                }
            }

            async fn due_types(&self, job_types: &[String]) -> Result<DueTypes, StoreError> {
                due::due_types(self, job_types).await
            }

            async fn renew_leases(&self, p: RenewParams) -> Result<Vec<String>, StoreError> {
                writes::renew_leases(self, p).await
            }

            async fn complete(&self, p: CompleteParams) -> Result<Vec<String>, StoreError> {
                writes::complete(self, p).await
            }

            async fn retry(&self, p: RetryParams) -> Result<bool, StoreError> {
                writes::retry(self, p).await
            }

            async fn fail(&self, p: FailParams) -> Result<bool, StoreError> {
                writes::fail(self, p).await
            }

            async fn release(&self, p: ReleaseParams) -> Result<u64, StoreError> {
                writes::release(self, p).await
            }

            async fn cancel(&self, p: CancelParams) -> Result<Vec<CancelledJob>, StoreError> {
                admin::cancel(self, p).await
            }

            async fn rescue(&self, p: RescueParams) -> Result<Vec<Job>, StoreError> {
                tx::rescue(self, p.limit).await
            }

            async fn still_owned(
                &self,
                worker_id: &str,
                claims: &[ClaimRef],
            ) -> Result<Vec<String>, StoreError> {
                admin::still_owned(self, worker_id, claims).await
            }

            async fn set_progress(
                &self,
                worker_id: &str,
                claim: &ClaimRef,
                json: &str,
            ) -> Result<bool, StoreError> {
                writes::set_progress(self, worker_id, claim, json).await
            }

            async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
                admin::get(self, id).await
            }

            async fn find(&self, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
                admin::find(self, f).await
            }

            async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
                admin::count_by_status(self).await
            }

            async fn count_live_by_type(&self) -> Result<Vec<TypeCounts>, StoreError> {
                admin::count_live_by_type(self).await
            }

            async fn retry_failed(&self, f: &JobFilter) -> Result<u64, StoreError> {
                admin::retry_failed(self, f).await
            }

            async fn prune(&self, p: PruneParams) -> Result<u64, StoreError> {
                admin::prune(self, p).await
            }

            async fn record_handler_event(&self, e: HandlerEvent) -> Result<(), StoreError> {
                events::record(self, e).await
            }

            async fn handler_events(&self, limit: u32) -> Result<Vec<HandlerEvent>, StoreError> {
                events::recent(self, limit).await
            }

            async fn pool_status(
                &self,
                pools: &[PoolGuard],
            ) -> Result<Vec<PoolStatus>, StoreError> {
                tx::pool_status(self, pools).await
            }

            async fn reconcile_schedules(
                &self,
                params: ReconcileSchedules,
            ) -> Result<ReconcileReport, StoreError> {
                schedules::reconcile_schedules(self, params).await
            }

            async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
                schedules::list(self).await
            }

            async fn due_schedules(
                &self,
                now: DateTime<Utc>,
                limit: u32,
            ) -> Result<Vec<ScheduleRecord>, StoreError> {
                schedules::due(self, now, limit).await
            }

            async fn fire_schedule(
                &self,
                params: FireSchedule,
            ) -> Result<Option<AddResult>, StoreError> {
                schedules::fire(self, params).await
            }

            async fn blocked_by(
                &self,
                job: &Job,
                guards: &ClaimGuards,
            ) -> Result<Option<Blocker>, StoreError> {
                tx::blocked_by(self, job, guards).await
            }

            fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
                self.subscribe_events()
            }

            fn subscribe_wakeups(&self) -> broadcast::Receiver<StoreEvent> {
                self.subscribe_wakeup_events()
            }

            async fn record_deployed_types(
                &self,
                p: RecordDeployedTypes,
            ) -> Result<(), StoreError> {
                deployed_types::record(self, p).await
            }

            async fn deployed_types(&self) -> Result<Vec<DeployedTypeRecord>, StoreError> {
                deployed_types::list(self).await
            }

            async fn attempts(&self, job_id: &str) -> Result<Vec<Attempt>, StoreError> {
                history::attempts(self, job_id).await
            }

            async fn append_logs(&self, lines: Vec<LogLine>) -> Result<(), StoreError> {
                history::append_logs(self, lines).await
            }

            async fn logs(&self, query: &LogQuery) -> Result<Vec<StoredLogLine>, StoreError> {
                history::logs(self, query).await
            }
        }
    };
}

pub(super) use sql_job_store;

//! Administration on Postgres: inspect (get, find, counts, ownership),
//! cancel, retry failed jobs, prune.
//!
//! Invariant: a cancel is one statement — a recursive walk from the
//! targets to their unfinished descendants, rows locked `FOR UPDATE`, then
//! updated — so a job and its children are cancelled together; the same
//! statement records the attempt of each job that was running. A prune
//! deletes the jobs' attempts and logs in its transaction.

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::Postgres;

use super::rows::claim_arrays;
use super::PostgresStore;
use crate::attempt::AttemptOutcome;
use crate::job::{Job, JobFilter, JobStatus, StatusCounts, TypeCounts};
use crate::store::sql::{
    cancelled_from_row, job_from_row, jobs_from_rows, live_type_counts, page_query, status_counts,
    PageBind, LIVE,
};
use crate::store::{
    CancelParams, CancelTarget, CancelledJob, ClaimRef, PruneParams, StoreError, StoreEvent,
};

/// The `WHERE` clause of `f`, numbering its parameters from `*n + 1`.
fn filter_sql(f: &JobFilter, n: &mut usize) -> String {
    let mut next = || {
        *n += 1;
        *n
    };
    let mut w = vec!["true".to_string()];
    if !f.types.is_empty() {
        w.push(format!("job_type = ANY(${})", next()));
    }
    if !f.statuses.is_empty() {
        w.push(format!("status = ANY(${})", next()));
    }
    if f.scope.is_some() {
        let a = next();
        let b = next();
        w.push(format!("scope_type = ${a} AND scope_id = ${b}"));
    }
    if f.parent_id.is_some() {
        w.push(format!("parent_id = ${}", next()));
    }
    if f.id.is_some() {
        w.push(format!("id = ${}", next()));
    }
    w.join(" AND ")
}

/// Binds `f`'s parameters in [`filter_sql`]'s order.
fn bind_filter<'q>(
    mut q: Query<'q, Postgres, PgArguments>,
    f: &JobFilter,
) -> Query<'q, Postgres, PgArguments> {
    if !f.types.is_empty() {
        q = q.bind(f.types.clone());
    }
    if !f.statuses.is_empty() {
        let statuses: Vec<String> = f.statuses.iter().map(|s| s.as_str().to_string()).collect();
        q = q.bind(statuses);
    }
    if let Some(s) = &f.scope {
        q = q.bind(s.scope_type.clone()).bind(s.scope_id.clone());
    }
    if let Some(p) = &f.parent_id {
        q = q.bind(p.clone());
    }
    if let Some(id) = &f.id {
        q = q.bind(id.clone());
    }
    q
}

pub(super) async fn get(store: &PostgresStore, id: &str) -> Result<Option<Job>, StoreError> {
    let row = sqlx::query(&store.sql.job())
        .bind(id)
        .fetch_optional(&store.pool)
        .await?;
    row.as_ref().map(job_from_row).transpose()
}

pub(super) async fn find(store: &PostgresStore, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
    let page = page_query(&store.sql.jobs, f);
    let mut q = sqlx::query(&page.sql);
    for b in page.binds {
        q = match b {
            PageBind::Text(t) => q.bind(t),
            PageBind::Time(t) => q.bind(t),
            PageBind::Int(n) => q.bind(n),
        };
    }
    let rows = q.fetch_all(&store.pool).await?;
    jobs_from_rows(&rows)
}

pub(super) async fn count_by_status(store: &PostgresStore) -> Result<StatusCounts, StoreError> {
    let rows = sqlx::query(&store.sql.status_counts())
        .fetch_all(&store.pool)
        .await?;
    status_counts(&rows)
}

pub(super) async fn count_live_by_type(
    store: &PostgresStore,
) -> Result<Vec<TypeCounts>, StoreError> {
    let rows = sqlx::query(&store.sql.live_type_counts())
        .fetch_all(&store.pool)
        .await?;
    live_type_counts(&rows)
}

pub(super) async fn still_owned(
    store: &PostgresStore,
    worker_id: &str,
    claims: &[ClaimRef],
) -> Result<Vec<String>, StoreError> {
    let (ids, attempts) = claim_arrays(claims);
    Ok(sqlx::query_scalar(&store.sql.still_owned())
        .bind(ids)
        .bind(attempts)
        .bind(worker_id)
        .fetch_all(&store.pool)
        .await?)
}

pub(super) async fn cancel(
    store: &PostgresStore,
    p: CancelParams,
) -> Result<Vec<CancelledJob>, StoreError> {
    let t = &store.sql.jobs;
    let (cond, a, b): (String, Vec<String>, Option<String>) = match &p.target {
        CancelTarget::Ids(ids) => (format!("id = ANY($2) AND {LIVE}"), ids.clone(), None),
        CancelTarget::Scope {
            scope,
            include_running,
        } => {
            let st = if *include_running {
                LIVE
            } else {
                "status = 'pending'"
            };
            (
                format!("scope_type = $2[1] AND scope_id = $2[2] AND {st}"),
                vec![scope.scope_type.clone(), scope.scope_id.clone()],
                None,
            )
        }
        CancelTarget::DedupeKeys { job_type, keys } => (
            format!("job_type = $3 AND dedupe_key = ANY($2) AND {LIVE}"),
            keys.clone(),
            Some(job_type.clone()),
        ),
    };
    let sql = format!(
        "WITH RECURSIVE targets AS ( \
             SELECT id FROM {t} WHERE {cond} \
             UNION SELECT c.id FROM {t} c JOIN targets ON c.parent_id = targets.id WHERE c.{LIVE}), \
         locked AS (SELECT j.id, j.status AS old_status FROM {t} j JOIN targets USING (id) \
             WHERE j.{LIVE} FOR UPDATE OF j), \
         ended AS (INSERT INTO {attempts} (job_id, attempt, worker, digest, started_at, \
             finished_at, outcome, error) \
             SELECT j.id, j.attempts, j.lease_owner, j.handler_version, j.started_at, now(), \
               '{cancelled}', $1 FROM {t} j JOIN locked USING (id) \
             WHERE locked.old_status = 'running') \
         UPDATE {t} j SET status = 'cancelled', last_error = $1, finished_at = now(), \
           lease_owner = NULL, lease_expires_at = NULL, updated_at = now() \
         FROM locked WHERE j.id = locked.id \
         RETURNING j.id, j.job_type, j.scope_type, j.scope_id, locked.old_status, j.attempts",
        attempts = store.sql.attempts,
        cancelled = AttemptOutcome::Cancelled.as_str(),
    );
    let rows = sqlx::query(&sql)
        .bind(&p.reason)
        .bind(&a)
        .bind(&b)
        .fetch_all(&store.pool)
        .await?;
    rows.iter()
        .map(|r| cancelled_from_row(r, "old_status"))
        .collect()
}

pub(super) async fn retry_failed(store: &PostgresStore, f: &JobFilter) -> Result<u64, StoreError> {
    let mut f = f.clone();
    f.statuses = vec![JobStatus::Failed];
    let mut n = 0;
    let w = filter_sql(&f, &mut n);
    let sql = format!(
        "UPDATE {t} SET status = 'pending', \
           max_attempts = LEAST(attempts::bigint + max_attempts, 2147483647)::integer, \
           last_error = NULL, finished_at = NULL, \
           error_code = NULL, error_details = NULL, \
           run_at = now(), updated_at = now() \
         WHERE id IN (SELECT id FROM {t} WHERE {w} ORDER BY created_at, id LIMIT ${} OFFSET ${}) \
           AND status = 'failed'",
        n + 1,
        n + 2,
        t = store.sql.jobs
    );
    let r = bind_filter(sqlx::query(&sql), &f)
        .bind(f.limit.map(i64::from))
        .bind(i64::from(f.offset.unwrap_or(0)))
        .execute(&store.pool)
        .await?;
    store.events.send(StoreEvent::Inserted(String::new()));
    Ok(r.rows_affected())
}

pub(super) async fn prune(store: &PostgresStore, p: PruneParams) -> Result<u64, StoreError> {
    let statuses: Vec<String> = p
        .statuses
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| s.as_str().to_string())
        .collect();
    let mut tx = store.pool.begin().await?;
    for sql in store.sql.prune_history() {
        sqlx::query(&sql)
            .bind(&statuses)
            .bind(p.older_than)
            .execute(&mut *tx)
            .await?;
    }
    let r = sqlx::query(&store.sql.prune())
        .bind(&statuses)
        .bind(p.older_than)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(r.rows_affected())
}

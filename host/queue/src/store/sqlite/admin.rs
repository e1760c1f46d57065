//! Administration on SQLite: inspect (get, find, counts, ownership),
//! cancel, retry failed jobs, prune.
//!
//! Invariant: a cancel walks the job and its unfinished descendants inside
//! one `BEGIN IMMEDIATE` transaction, so a child enqueued concurrently is
//! either cancelled with its parent or sees the parent already cancelled;
//! the attempt of a job cancelled while running is recorded in it. A prune
//! deletes the jobs' attempts and logs in its transaction.

use chrono::Utc;
use sqlx::sqlite::SqliteRow;

use super::rows::{claim_lists, json_list, ms};
use super::{history, SqliteStore};
use crate::attempt::AttemptOutcome;
use crate::job::{Job, JobFilter, JobStatus, StatusCounts, TypeCounts};
use crate::store::sql::{
    cancelled_from_row, job_from_row, jobs_from_rows, live_type_counts, page_query, status_counts,
    PageBind, SqlEnding, LIVE,
};
use crate::store::{
    CancelParams, CancelTarget, CancelledJob, ClaimRef, PruneParams, StoreError, StoreEvent,
};

/// The `WHERE` clause of `f`, pushing its binds in order.
fn filter_sql(f: &JobFilter, binds: &mut Vec<String>) -> String {
    let mut w = vec!["1 = 1".to_string()];
    if !f.types.is_empty() {
        w.push("job_type IN (SELECT value FROM json_each(?))".into());
        binds.push(json_list(&f.types));
    }
    if !f.statuses.is_empty() {
        w.push("status IN (SELECT value FROM json_each(?))".into());
        let s: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
        binds.push(json_list(&s));
    }
    if let Some(s) = &f.scope {
        w.push("scope_type = ? AND scope_id = ?".into());
        binds.push(s.scope_type.clone());
        binds.push(s.scope_id.clone());
    }
    if let Some(p) = &f.parent_id {
        w.push("parent_id = ?".into());
        binds.push(p.clone());
    }
    if let Some(id) = &f.id {
        w.push("id = ?".into());
        binds.push(id.clone());
    }
    w.join(" AND ")
}

pub(super) async fn get(store: &SqliteStore, id: &str) -> Result<Option<Job>, StoreError> {
    let row = sqlx::query(&store.sql.job())
        .bind(id)
        .fetch_optional(&store.own)
        .await?;
    row.as_ref().map(job_from_row).transpose()
}

pub(super) async fn find(store: &SqliteStore, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
    let page = page_query(&store.sql.jobs, f);
    let mut q = sqlx::query(&page.sql);
    for b in page.binds {
        q = match b {
            PageBind::Text(t) => q.bind(t),
            PageBind::Time(t) => q.bind(ms(t)),
            PageBind::Int(n) => q.bind(n),
        };
    }
    let rows = q.fetch_all(&store.own).await?;
    jobs_from_rows(&rows)
}

pub(super) async fn count_by_status(store: &SqliteStore) -> Result<StatusCounts, StoreError> {
    let rows = sqlx::query(&store.sql.status_counts())
        .fetch_all(&store.own)
        .await?;
    status_counts(&rows)
}

pub(super) async fn count_live_by_type(store: &SqliteStore) -> Result<Vec<TypeCounts>, StoreError> {
    let rows = sqlx::query(&store.sql.live_type_counts())
        .bind(ms(Utc::now()))
        .fetch_all(&store.own)
        .await?;
    live_type_counts(&rows)
}

pub(super) async fn still_owned(
    store: &SqliteStore,
    worker_id: &str,
    claims: &[ClaimRef],
) -> Result<Vec<String>, StoreError> {
    let (ids, attempts) = claim_lists(claims);
    Ok(sqlx::query_scalar(&store.sql.still_owned())
        .bind(ids)
        .bind(attempts)
        .bind(worker_id)
        .fetch_all(&store.own)
        .await?)
}

pub(super) async fn cancel(
    store: &SqliteStore,
    p: CancelParams,
) -> Result<Vec<CancelledJob>, StoreError> {
    let _w = store.write.lock().await;
    let now = ms(Utc::now());
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let select =
        "SELECT id, job_type, scope_type, scope_id, status, attempts FROM boxcar_jobs WHERE ";
    let rows = match &p.target {
        CancelTarget::Ids(ids) => {
            sqlx::query(&format!(
                "{select} id IN (SELECT value FROM json_each(?)) AND +{LIVE}"
            ))
            .bind(json_list(ids))
            .fetch_all(&mut *tx)
            .await?
        }
        CancelTarget::Scope {
            scope,
            include_running,
        } => {
            let st = if *include_running {
                LIVE
            } else {
                "status = 'pending'"
            };
            sqlx::query(&format!(
                "{select} scope_type = ? AND scope_id = ? AND {st}"
            ))
            .bind(&scope.scope_type)
            .bind(&scope.scope_id)
            .fetch_all(&mut *tx)
            .await?
        }
        CancelTarget::DedupeKeys { job_type, keys } => {
            sqlx::query(&format!(
            "{select} job_type = ? AND dedupe_key IN (SELECT value FROM json_each(?)) AND {LIVE}"
        ))
            .bind(job_type)
            .bind(json_list(keys))
            .fetch_all(&mut *tx)
            .await?
        }
    };
    let mut out = Vec::new();
    let mut frontier: Vec<SqliteRow> = rows;
    while !frontier.is_empty() {
        let cancelled = frontier
            .iter()
            .map(|r| cancelled_from_row(r, "status"))
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<&str> = cancelled.iter().map(|c| c.id.as_str()).collect();
        let list = json_list(&ids);
        let endings: Vec<SqlEnding<'_>> = cancelled
            .iter()
            .filter(|c| c.was_running)
            .map(|c| SqlEnding::bare(&c.id, AttemptOutcome::Cancelled, Some(p.reason.as_str())))
            .collect();
        history::record(&mut tx, &store.sql, &endings, None, now).await?;
        sqlx::query(&format!(
            "UPDATE boxcar_jobs SET status = 'cancelled', last_error = ?1, finished_at = ?2, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = ?2 \
             WHERE id IN (SELECT value FROM json_each(?3)) AND +{LIVE}"
        ))
        .bind(&p.reason)
        .bind(now)
        .bind(&list)
        .execute(&mut *tx)
        .await?;
        frontier = sqlx::query(&format!(
            "{select} parent_id IN (SELECT value FROM json_each(?)) AND {LIVE}"
        ))
        .bind(&list)
        .fetch_all(&mut *tx)
        .await?;
        out.extend(cancelled);
    }
    tx.commit().await?;
    for c in &out {
        store.notify(StoreEvent::Finished(c.id.clone()));
    }
    Ok(out)
}

pub(super) async fn retry_failed(store: &SqliteStore, f: &JobFilter) -> Result<u64, StoreError> {
    let _w = store.write.lock().await;
    let mut f = f.clone();
    f.statuses = vec![JobStatus::Failed];
    let mut binds = Vec::new();
    let w = filter_sql(&f, &mut binds);
    let now = ms(Utc::now());
    let sql = format!(
        "UPDATE boxcar_jobs SET status = 'pending', \
           max_attempts = MIN(attempts + max_attempts, 2147483647), last_error = NULL, \
           error_code = NULL, error_details = NULL, \
           finished_at = NULL, run_at = ?, updated_at = ? \
         WHERE id IN (SELECT id FROM boxcar_jobs WHERE {w} ORDER BY created_at, id LIMIT ? OFFSET ?)"
    );
    let mut q = sqlx::query(&sql).bind(now).bind(now);
    for b in binds {
        q = q.bind(b);
    }
    let r = q
        .bind(f.limit.map_or(-1, i64::from))
        .bind(i64::from(f.offset.unwrap_or(0)))
        .execute(&store.own)
        .await?;
    for t in &f.types {
        store.notify(StoreEvent::Inserted(t.clone()));
    }
    if f.types.is_empty() {
        store.notify(StoreEvent::Inserted(String::new()));
    }
    Ok(r.rows_affected())
}

pub(super) async fn prune(store: &SqliteStore, p: PruneParams) -> Result<u64, StoreError> {
    let mut write = store.write.lock().await;
    let statuses: Vec<&str> = p
        .statuses
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| s.as_str())
        .collect();
    let statuses = json_list(&statuses);
    let older_than = ms(p.older_than);
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    for sql in store.sql.prune_history() {
        sqlx::query(&sql)
            .bind(&statuses)
            .bind(older_than)
            .execute(&mut *tx)
            .await?;
    }
    let r = sqlx::query(&store.sql.prune())
        .bind(&statuses)
        .bind(older_than)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    if r.rows_affected() == 0 {
        write.changed_nothing();
    }
    Ok(r.rows_affected())
}

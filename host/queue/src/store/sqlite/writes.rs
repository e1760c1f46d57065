//! Job writes on SQLite: insert (the rows: `insert`), claim, renew,
//! complete, retry, fail, release, progress.
//!
//! Invariant: every state change is a single conditional `UPDATE`, fenced
//! on the claim (`status = running AND lease_owner = worker AND attempts =
//! the claim's attempt`) after a claim; a transition that ends an attempt
//! runs in a `BEGIN IMMEDIATE` transaction with its unstored log lines,
//! and records the attempt: a completion on the job rows it updates (the
//! succeeded attempt's worker and figures), the others as an attempt row
//! written first under the same fence (`history`). An
//! unguarded claim is one `UPDATE … WHERE id IN (SELECT … LIMIT n)
//! RETURNING`: SQLite takes the write lock before the statement reads, so
//! candidates cannot be claimed twice. Writers of this process queue on the
//! store's writer mutex.

use std::sync::LazyLock;

use chrono::Utc;
use sqlx::pool::PoolConnection;
use sqlx::Sqlite;

use super::rows::{claim_lists, ms};
use super::{history, insert, tx, SqliteStore};
use crate::attempt::AttemptOutcome;
use crate::job::{AddResult, JobStatus};
use crate::store::sql::{
    jobs_from_rows, logs_json, set_figures_from, sqlite_json_elements, with_figures, SqlEnding,
    FIGURES, JOB_COLS, LIVE,
};
use crate::store::{
    ClaimParams, ClaimRef, ClaimResult, CompleteParams, FailParams, InsertJob, ReleaseParams,
    RenewParams, RetryParams, StoreError, StoreEvent, EXPIRED_CODE, EXPIRED_ERROR,
};
use crate::time;

pub(super) async fn add_many(
    store: &SqliteStore,
    jobs: Vec<InsertJob>,
) -> Result<Vec<AddResult>, StoreError> {
    let _w = store.write.lock().await;
    let stored_alone =
        match jobs.as_slice() {
            [job] if job.parent_id.is_none() => insert::try_insert_alone(&store.own, job)
                .await?
                .then(|| AddResult {
                    id: job.id.clone(),
                    deduplicated: false,
                }),
            _ => None,
        };
    let out = match stored_alone {
        Some(result) => vec![result],
        None => {
            let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
            let out = insert::insert_all(&mut tx, &jobs).await?;
            tx.commit().await?;
            out
        }
    };
    let mut types: Vec<&str> = jobs.iter().map(|j| j.job_type.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    for t in types {
        store.notify(StoreEvent::Inserted(t.to_string()));
    }
    Ok(out)
}

/// A claim: the single-statement fast path when the type has no guard,
/// else the shared guard policy in a `BEGIN IMMEDIATE` transaction.
pub(super) async fn claim_batch(
    store: &SqliteStore,
    p: ClaimParams,
) -> Result<ClaimResult, StoreError> {
    let mut write = store.write.lock().await;
    if !p.guards.is_empty() {
        return tx::claim(store, &p).await;
    }
    let now = ms(Utc::now());
    let sql = format!(
        "UPDATE boxcar_jobs SET \
           status = CASE WHEN expires_at <= ?1 THEN 'failed' ELSE 'running' END, \
           last_error = CASE WHEN expires_at <= ?1 THEN ?2 ELSE last_error END, \
           error_code = CASE WHEN expires_at <= ?1 THEN ?8 ELSE error_code END, \
           finished_at = CASE WHEN expires_at <= ?1 THEN ?1 ELSE NULL END, \
           lease_owner = CASE WHEN expires_at <= ?1 THEN NULL ELSE ?3 END, \
           lease_expires_at = CASE WHEN expires_at <= ?1 THEN NULL ELSE ?4 END, \
           started_at = CASE WHEN expires_at <= ?1 THEN started_at ELSE ?1 END, \
           attempts = CASE WHEN expires_at <= ?1 THEN attempts ELSE attempts + 1 END, \
           handler_version = CASE WHEN expires_at <= ?1 THEN handler_version ELSE ?5 END, \
           updated_at = ?1 \
         WHERE id IN (SELECT j.id FROM boxcar_jobs j \
             WHERE j.status = 'pending' AND j.job_type = ?6 AND j.run_at <= ?1 \
               AND NOT EXISTS (SELECT 1 FROM boxcar_jobs c WHERE c.parent_id = j.id AND c.{LIVE}) \
             ORDER BY j.priority, j.run_at, j.id LIMIT ?7) \
         RETURNING {cols}",
        cols = *JOB_COLS
    );
    let rows = sqlx::query(&sql)
        .bind(now)
        .bind(EXPIRED_ERROR)
        .bind(&p.worker_id)
        .bind(time::after_ms(now, p.lease))
        .bind(&p.handler_version)
        .bind(&p.job_type)
        .bind(i64::from(p.limit))
        .bind(EXPIRED_CODE)
        .fetch_all(&store.own)
        .await?;
    if rows.is_empty() {
        write.changed_nothing();
    }
    Ok(claim_result(store, jobs_from_rows(&rows)?))
}

/// Splits claimed rows into runs and expiries (announcing each expiry),
/// runs in claim order.
pub(super) fn claim_result(store: &SqliteStore, jobs: Vec<crate::job::Job>) -> ClaimResult {
    let mut res = ClaimResult::default();
    for job in jobs {
        if job.status == JobStatus::Failed {
            store.notify(StoreEvent::Finished(job.id.clone()));
            res.expired.push(job);
        } else {
            res.claimed.push(job);
        }
    }
    res.claimed
        .sort_by(|a, b| (a.priority, a.run_at, &a.id).cmp(&(b.priority, b.run_at, &b.id)));
    res
}

pub(super) async fn renew_leases(
    store: &SqliteStore,
    p: RenewParams,
) -> Result<Vec<String>, StoreError> {
    let _w = store.write.lock().await;
    let (ids, attempts) = claim_lists(&p.claims);
    Ok(sqlx::query_scalar(&store.sql.renew())
        .bind(time::millis(p.lease))
        .bind(ids)
        .bind(attempts)
        .bind(&p.worker_id)
        .bind(ms(Utc::now()))
        .fetch_all(&store.own)
        .await?)
}

/// A batch of successes in one request to SQLite's worker thread: the
/// unstored log lines (`$3`) and the fenced job updates (`?1` worker, `?2`
/// now, `?4`: id, attempt, result and figures per job, the succeeded
/// attempt kept on the job row) inside one `BEGIN IMMEDIATE … COMMIT`: one
/// round trip to the worker thread instead of three (begin, update,
/// commit). A statement that
/// fails leaves the transaction open on its connection, so that connection
/// is closed, not reused ([`OwnTransaction`]): SQLite rolls the transaction
/// back and nothing of a failed batch is kept.
static COMPLETE: LazyLock<String> = LazyLock::new(|| {
    let sql = crate::store::sql::Dialect::sqlite();
    let extract_figures: String = FIGURES
        .iter()
        .map(|f| format!(", json_extract(element, '$.{f}') AS {f}"))
        .collect();
    let set_figures = set_figures_from("c");
    format!(
        "BEGIN IMMEDIATE; {logs}; \
         UPDATE boxcar_jobs SET status = 'succeeded', result = c.result, finished_at = ?2, \
           lease_owner = NULL, lease_expires_at = NULL, updated_at = ?2, \
           finished_by = ?1, {set_figures} \
         FROM (SELECT json_extract(element, '$.id') AS id, \
                 json_extract(element, '$.attempt') AS attempt, \
                 json_extract(element, '$.result') AS result{extract_figures} \
               FROM {batch}) AS c \
         WHERE boxcar_jobs.id = c.id AND +boxcar_jobs.status = 'running' \
           AND boxcar_jobs.lease_owner = ?1 AND boxcar_jobs.attempts = c.attempt \
         RETURNING boxcar_jobs.id; \
         COMMIT",
        batch = sqlite_json_elements("?4"),
        logs = sql.insert_logs_at(3),
    )
});

/// A connection lent to a request that runs its own `BEGIN … COMMIT`:
/// unless `finished` was set after the request succeeded — it failed, or
/// its future was dropped part-way — the connection is closed when this is
/// dropped instead of going back to the pool with the transaction (and
/// SQLite's write lock) still open.
struct OwnTransaction {
    conn: PoolConnection<Sqlite>,
    finished: bool,
}

impl Drop for OwnTransaction {
    fn drop(&mut self) {
        if !self.finished {
            self.conn.close_on_drop();
        }
    }
}

pub(super) async fn complete(
    store: &SqliteStore,
    p: CompleteParams,
) -> Result<Vec<String>, StoreError> {
    let _w = store.write.lock().await;
    let now = ms(Utc::now());
    let batch = serde_json::Value::Array(
        p.jobs
            .iter()
            .map(|c| {
                let element =
                    serde_json::json!({ "id": c.id, "attempt": c.attempt, "result": c.result });
                with_figures(element, &c.ending.usage)
            })
            .collect(),
    )
    .to_string();
    let logs = logs_json(p.jobs.iter().flat_map(|c| &c.ending.logs));
    let mut own = OwnTransaction {
        conn: store.own.acquire().await?,
        finished: false,
    };
    let done: Vec<String> = sqlx::query_scalar(&COMPLETE)
        .bind(&p.worker_id)
        .bind(now)
        .bind(logs)
        .bind(batch)
        .fetch_all(&mut *own.conn)
        .await?;
    own.finished = true;
    for id in &done {
        store.notify(StoreEvent::Finished(id.clone()));
    }
    Ok(done)
}

pub(super) async fn retry(store: &SqliteStore, p: RetryParams) -> Result<bool, StoreError> {
    let _w = store.write.lock().await;
    let now = ms(Utc::now());
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let ending = SqlEnding::of(
        &p.id,
        &p.ending,
        AttemptOutcome::Retried,
        Some(p.error.as_str()),
    )
    .fenced(p.attempt);
    history::record(&mut tx, &store.sql, &[ending], Some(&p.worker_id), now).await?;
    history::store_logs(&mut tx, &store.sql, p.ending.logs.iter().collect()).await?;
    let r = sqlx::query(&store.sql.retry())
        .bind(time::millis(p.delay))
        .bind(&p.error)
        .bind(p.consumes_attempt)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(i64::from(p.attempt))
        .bind(now)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(r.rows_affected() == 1)
}

pub(super) async fn fail(store: &SqliteStore, p: FailParams) -> Result<bool, StoreError> {
    let _w = store.write.lock().await;
    let now = ms(Utc::now());
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let ending = SqlEnding {
        code: p.code.as_deref(),
        details: p.details.as_deref(),
        ..SqlEnding::of(
            &p.id,
            &p.ending,
            AttemptOutcome::Failed,
            Some(p.error.as_str()),
        )
        .fenced(p.attempt)
    };
    history::record(&mut tx, &store.sql, &[ending], Some(&p.worker_id), now).await?;
    history::store_logs(&mut tx, &store.sql, p.ending.logs.iter().collect()).await?;
    let r = sqlx::query(&store.sql.fail())
        .bind(&p.error)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(&p.code)
        .bind(&p.details)
        .bind(i64::from(p.attempt))
        .bind(now)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    let ok = r.rows_affected() == 1;
    if ok {
        store.notify(StoreEvent::Finished(p.id));
    }
    Ok(ok)
}

pub(super) async fn release(store: &SqliteStore, p: ReleaseParams) -> Result<u64, StoreError> {
    let _w = store.write.lock().await;
    let (ids, attempts) = claim_lists(&p.claims);
    let now = ms(Utc::now());
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let endings: Vec<SqlEnding<'_>> = p
        .claims
        .iter()
        .map(|c| SqlEnding::bare(&c.id, AttemptOutcome::Released, None).fenced(c.attempt))
        .collect();
    history::record(&mut tx, &store.sql, &endings, Some(&p.worker_id), now).await?;
    let r = sqlx::query(&store.sql.release())
        .bind(ids)
        .bind(attempts)
        .bind(&p.worker_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(r.rows_affected())
}

pub(super) async fn set_progress(
    store: &SqliteStore,
    worker_id: &str,
    claim: &ClaimRef,
    json: &str,
) -> Result<bool, StoreError> {
    let _w = store.write.lock().await;
    let r = sqlx::query(&store.sql.set_progress())
        .bind(json)
        .bind(&claim.id)
        .bind(worker_id)
        .bind(i64::from(claim.attempt))
        .bind(ms(Utc::now()))
        .execute(&store.own)
        .await?;
    Ok(r.rows_affected() == 1)
}

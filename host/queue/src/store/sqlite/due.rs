//! Claims that do not grow with the number of types on SQLite: which types
//! have pending work, and one claim for many unguarded types.
//!
//! Invariants: the due-types answer is one statement of one index probe per
//! asked type (`boxcar_jobs_due`: `MIN(run_at)` of its pending jobs). The
//! multi-type claim is one `UPDATE … WHERE id IN (a UNION ALL of one
//! `LIMIT n` candidate query per type)` per chunk of [`TYPES_PER_STATEMENT`]
//! types (SQLite caps compound selects), under the store's writer mutex;
//! SQLite takes the write lock before the statement reads, so candidates
//! cannot be claimed twice, and each type's share is capped by its own
//! `LIMIT`.

use chrono::Utc;
use sqlx::{Row, SqliteConnection};

use super::rows::ms;
use super::SqliteStore;
use crate::job::Job;
use crate::store::sql::{jobs_from_rows, JOB_COLS, LIVE};
use crate::store::{
    ClaimManyParams, ClaimResult, DueTypes, StoreError, TypeClaim, EXPIRED_CODE, EXPIRED_ERROR,
};
use crate::time;

/// Types per claim statement: well under SQLite's default cap of 500 terms
/// in a compound select.
const TYPES_PER_STATEMENT: usize = 100;

pub(super) async fn due_types(
    store: &SqliteStore,
    job_types: &[String],
) -> Result<DueTypes, StoreError> {
    if job_types.is_empty() {
        return Ok(DueTypes::default());
    }
    let rows = sqlx::query(
        "SELECT t.value AS job_type, \
           (SELECT MIN(j.run_at) FROM boxcar_jobs j \
             WHERE j.status = 'pending' AND j.job_type = t.value) - ?2 AS wait_ms \
         FROM json_each(?1) t",
    )
    .bind(super::rows::json_list(job_types))
    .bind(ms(Utc::now()))
    .fetch_all(&store.own)
    .await?;
    let mut waits = Vec::with_capacity(rows.len());
    for r in rows {
        if let Some(wait) = r.try_get::<Option<i64>, _>("wait_ms")? {
            waits.push((r.try_get::<String, _>("job_type")?, wait));
        }
    }
    Ok(DueTypes::from_waits(waits))
}

/// The claim statement for `chunk`: `?1` now, `?2` expired error, `?3`
/// worker, `?4` the per-type leases and versions as JSON, `?5` expired
/// code, `?6…` the types.
pub(super) fn claim_sql(chunk: &[TypeClaim]) -> String {
    let candidates: Vec<String> = chunk
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "SELECT id FROM (SELECT j.id FROM boxcar_jobs j \
                   WHERE j.status = 'pending' AND j.job_type = ?{n} AND j.run_at <= ?1 \
                     AND NOT EXISTS (SELECT 1 FROM boxcar_jobs c \
                       WHERE c.parent_id = j.id AND c.{LIVE}) \
                   ORDER BY j.priority, j.run_at, j.id LIMIT {limit})",
                n = i + 6,
                limit = c.limit
            )
        })
        .collect();
    format!(
        "UPDATE boxcar_jobs SET \
           status = CASE WHEN expires_at <= ?1 THEN 'failed' ELSE 'running' END, \
           last_error = CASE WHEN expires_at <= ?1 THEN ?2 ELSE last_error END, \
           error_code = CASE WHEN expires_at <= ?1 THEN ?5 ELSE error_code END, \
           finished_at = CASE WHEN expires_at <= ?1 THEN ?1 ELSE NULL END, \
           lease_owner = CASE WHEN expires_at <= ?1 THEN NULL ELSE ?3 END, \
           lease_expires_at = CASE WHEN expires_at <= ?1 THEN NULL ELSE r.lease_until END, \
           started_at = CASE WHEN expires_at <= ?1 THEN started_at ELSE ?1 END, \
           attempts = CASE WHEN expires_at <= ?1 THEN attempts ELSE attempts + 1 END, \
           handler_version = CASE WHEN expires_at <= ?1 THEN handler_version ELSE r.version END, \
           updated_at = ?1 \
         FROM (SELECT json_extract(value, '$[0]') AS claim_type, \
                 json_extract(value, '$[1]') AS lease_until, \
                 json_extract(value, '$[2]') AS version FROM json_each(?4)) AS r \
         WHERE boxcar_jobs.job_type = r.claim_type AND boxcar_jobs.id IN ({}) \
         RETURNING {cols}",
        candidates.join(" UNION ALL "),
        cols = *JOB_COLS
    )
}

/// Claims `chunk`'s types on `conn` in one statement; returns the rows.
async fn claim_chunk(
    conn: &mut SqliteConnection,
    worker_id: &str,
    chunk: &[TypeClaim],
) -> Result<Vec<Job>, StoreError> {
    let now = ms(Utc::now());
    let per_type = serde_json::Value::Array(
        chunk
            .iter()
            .map(|c| {
                serde_json::json!([c.job_type, time::after_ms(now, c.lease), c.handler_version])
            })
            .collect(),
    )
    .to_string();
    let sql = claim_sql(chunk);
    let mut q = sqlx::query(&sql)
        .bind(now)
        .bind(EXPIRED_ERROR)
        .bind(worker_id)
        .bind(per_type)
        .bind(EXPIRED_CODE);
    for c in chunk {
        q = q.bind(&c.job_type);
    }
    jobs_from_rows(&q.fetch_all(&mut *conn).await?)
}

/// One statement for up to [`TYPES_PER_STATEMENT`] types; more types run
/// their statements in one `BEGIN IMMEDIATE` transaction, so a failure
/// claims nothing.
pub(super) async fn claim_many(
    store: &SqliteStore,
    p: ClaimManyParams,
) -> Result<ClaimResult, StoreError> {
    if p.types.is_empty() {
        return Ok(ClaimResult::default());
    }
    let mut write = store.write.lock().await;
    let mut jobs = Vec::new();
    if p.types.len() <= TYPES_PER_STATEMENT {
        let mut conn = store.own.acquire().await?;
        jobs = claim_chunk(&mut conn, &p.worker_id, &p.types).await?;
    } else {
        let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
        for chunk in p.types.chunks(TYPES_PER_STATEMENT) {
            jobs.extend(claim_chunk(&mut tx, &p.worker_id, chunk).await?);
        }
        tx.commit().await?;
    }
    if jobs.is_empty() {
        write.changed_nothing();
    }
    Ok(super::writes::claim_result(store, jobs))
}

//! Job inserts on SQLite: many jobs per statement.
//!
//! The jobs of a batch are bound as one JSON array and inserted with one
//! `INSERT … SELECT FROM json_each(?) … ON CONFLICT DO NOTHING` per chunk,
//! in batch order, instead of one statement per job (each statement is a
//! round trip to sqlx's connection thread). A chunk whose row count says
//! every job was stored returns no rows: `RETURNING id` streamed one row
//! per job back from sqlx's worker thread, a thread wake-up each. A job's unset
//! attempt budget is the type's newest deploy's, else its default (see
//! `store::deployed_types`).
//!
//! A single job without a parent is first tried as one statement on its
//! own (no `BEGIN`/`COMMIT` round trips); only if its dedupe key is held
//! does it take the transactional path.
//!
//! Invariants: the caller holds the write transaction (`BEGIN IMMEDIATE`),
//! so nothing else inserts between the statement and the dedupe lookup; a
//! job that was not inserted is a duplicate of a live job with its dedupe
//! key (an earlier job of the same batch included), else the batch fails
//! as corrupt; a parent outside the batch must exist.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use chrono::Utc;
use serde_json::{json, Value};
use sqlx::SqliteConnection;

use super::rows::{json_list, ms};
use crate::job::AddResult;
use crate::store::sql::{sqlite_json_elements, type_max_attempts, LIVE};
use crate::store::{InsertJob, StoreError};
use crate::time;

/// Jobs per statement: bounds the JSON text bound at once.
const CHUNK: usize = 500;

/// `?1` the rows (a JSON array of [`row`] arrays), `?2` now in ms.
static INSERT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO boxcar_jobs (id, job_type, payload, scope_type, scope_id, status, \
         priority, run_at, attempts, max_attempts, dedupe_key, parent_id, schedule_id, expires_at, \
         created_at, updated_at, traceparent) \
         SELECT r.element ->> 0, r.element ->> 1, r.element ->> 2, r.element ->> 3, r.element ->> 4, \
           'pending', r.element ->> 5, r.element ->> 6, 0, \
           COALESCE(r.element ->> 7, {type_max}, r.element ->> 8), \
           r.element ->> 9, r.element ->> 10, r.element ->> 11, r.element ->> 12, ?2, ?2, r.element ->> 13 \
         FROM {rows} AS r WHERE true \
         ON CONFLICT DO NOTHING",
        type_max = type_max_attempts("boxcar_deployed_types", "(r.element ->> 1)"),
        rows = sqlite_json_elements("?1"),
    )
});

/// One job as the positional array [`INSERT`] reads.
fn row(j: &InsertJob, now: i64) -> Value {
    let expires = j
        .expires_at
        .map(ms)
        .or_else(|| j.ttl.map(|t| time::after_ms(now, t)));
    json!([
        j.id,
        j.job_type,
        j.payload,
        j.scope.as_ref().map(|s| s.scope_type.as_str()),
        j.scope.as_ref().map(|s| s.scope_id.as_str()),
        j.priority,
        time::after_ms(j.run_at.map_or(now, ms), j.delay),
        j.max_attempts,
        j.default_max_attempts,
        j.dedupe_key,
        j.parent_id,
        j.schedule_id,
        expires,
        j.traceparent,
    ])
}

/// Inserts jobs on `conn` (the caller owns the transaction); one answer
/// per job, in order.
pub(super) async fn insert_all(
    conn: &mut SqliteConnection,
    jobs: &[InsertJob],
) -> Result<Vec<AddResult>, StoreError> {
    check_parents(conn, jobs).await?;
    let now = ms(Utc::now());
    let mut inserted: HashSet<String> = HashSet::with_capacity(jobs.len());
    for chunk in jobs.chunks(CHUNK) {
        let rows = Value::Array(chunk.iter().map(|j| row(j, now)).collect());
        let stored = sqlx::query(&INSERT)
            .bind(rows.to_string())
            .bind(now)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if usize::try_from(stored).is_ok_and(|n| n == chunk.len()) {
            inserted.extend(chunk.iter().map(|j| j.id.clone()));
        } else {
            inserted.extend(inserted_of(conn, chunk, now).await?);
        }
    }
    let duplicates = live_duplicates(conn, jobs, &inserted).await?;
    jobs.iter()
        .map(|j| {
            if inserted.contains(&j.id) {
                return Ok(AddResult {
                    id: j.id.clone(),
                    deduplicated: false,
                });
            }
            match j.dedupe_key.as_ref().and_then(|k| duplicates.get(k)) {
                Some(existing) => Ok(AddResult {
                    id: existing.clone(),
                    deduplicated: true,
                }),
                None => Err(StoreError::Corrupt(format!(
                    "insert of job `{}` conflicted but no live duplicate exists",
                    j.id
                ))),
            }
        })
        .collect()
}

/// Inserts `job` with one statement of its own, outside any transaction (a
/// statement is atomic), and answers whether it was stored: a job whose
/// dedupe key a live job holds is not, and is left to [`insert_all`] under
/// the write transaction. For a job without a parent only: its parent's
/// existence is checked inside a transaction.
pub(super) async fn try_insert_alone(
    pool: &sqlx::SqlitePool,
    job: &InsertJob,
) -> Result<bool, StoreError> {
    let now = ms(Utc::now());
    let rows = Value::Array(vec![row(job, now)]);
    let stored = sqlx::query(&INSERT)
        .bind(rows.to_string())
        .bind(now)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(stored == 1)
}

/// The ids of `chunk` that its insert at `now` stored, when some of it
/// conflicted (a job's fresh id that exists with this insert's creation
/// time was stored by it).
async fn inserted_of(
    conn: &mut SqliteConnection,
    chunk: &[InsertJob],
    now: i64,
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<&str> = chunk.iter().map(|j| j.id.as_str()).collect();
    Ok(sqlx::query_scalar(
        "SELECT id FROM boxcar_jobs WHERE id IN (SELECT value FROM json_each(?1)) \
         AND created_at = ?2",
    )
    .bind(json_list(&ids))
    .bind(now)
    .fetch_all(&mut *conn)
    .await?)
}

/// Fails with the first parent that is neither in the batch nor stored.
async fn check_parents(conn: &mut SqliteConnection, jobs: &[InsertJob]) -> Result<(), StoreError> {
    let in_batch: HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    let mut checked: HashSet<&str> = HashSet::new();
    for parent in jobs.iter().filter_map(|j| j.parent_id.as_deref()) {
        if in_batch.contains(parent) || !checked.insert(parent) {
            continue;
        }
        let found = sqlx::query("SELECT 1 FROM boxcar_jobs WHERE id = ?")
            .bind(parent)
            .fetch_optional(&mut *conn)
            .await?;
        if found.is_none() {
            return Err(StoreError::UnknownParent(parent.to_string()));
        }
    }
    Ok(())
}

/// Dedupe key → the live job holding it, for the jobs not inserted.
async fn live_duplicates(
    conn: &mut SqliteConnection,
    jobs: &[InsertJob],
    inserted: &HashSet<String>,
) -> Result<HashMap<String, String>, StoreError> {
    let keys: Vec<&str> = jobs
        .iter()
        .filter(|j| !inserted.contains(&j.id))
        .filter_map(|j| j.dedupe_key.as_deref())
        .collect();
    let mut live = HashMap::new();
    for chunk in keys.chunks(CHUNK) {
        let rows: Vec<(String, String)> = sqlx::query_as(&format!(
            "SELECT dedupe_key, id FROM boxcar_jobs \
             WHERE dedupe_key IN (SELECT value FROM json_each(?)) AND {LIVE}"
        ))
        .bind(json!(chunk).to_string())
        .fetch_all(&mut *conn)
        .await?;
        live.extend(rows);
    }
    Ok(live)
}

//! Job writes on Postgres: insert, claim, renew, complete, retry, fail,
//! release, progress.
//!
//! Invariants: inserts are one `INSERT … SELECT FROM unnest(…)` per round
//! (a live dedupe conflict is resolved to the existing id, a few rounds for
//! races with finishing duplicates; a batch without dedupe keys is one
//! plain insert, since its fresh ids cannot conflict) that takes a job's unset attempt budget
//! from the type's newest deploy (see `store::deployed_types`); an
//! unguarded claim selects candidates `FOR UPDATE SKIP LOCKED` and claims
//! them in the same statement; many
//! completions are one statement; every write after a claim is fenced on
//! the claim (`status = running AND lease_owner = worker AND attempts = the
//! claim's attempt`), and one that ends an attempt runs in a transaction
//! that first records the attempt and its unstored log lines under the same
//! fence (`history`). Engine transitions use the
//! `synchronous_commit = off` pool (see [`PostgresStore`]).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};

use super::rows::{attempt, claim_arrays};
use super::{history, tx, PostgresStore};
use crate::attempt::AttemptOutcome;
use crate::job::{AddResult, JobStatus};
use crate::store::sql::{job_columns, jobs_from_rows, type_max_attempts, Dialect, SqlEnding, LIVE};
use crate::store::{
    ClaimParams, ClaimRef, ClaimResult, CompleteParams, FailParams, InsertJob, ReleaseParams,
    RenewParams, RetryParams, StoreError, EXPIRED_CODE, EXPIRED_ERROR,
};
use crate::time;

/// The insert's columns, one array per column.
#[derive(Default)]
struct Columns {
    id: Vec<String>,
    job_type: Vec<String>,
    payload: Vec<String>,
    scope_type: Vec<Option<String>>,
    scope_id: Vec<Option<String>>,
    priority: Vec<i32>,
    run_at: Vec<Option<DateTime<Utc>>>,
    delay_ms: Vec<i64>,
    max_attempts: Vec<Option<i32>>,
    default_max_attempts: Vec<i32>,
    dedupe_key: Vec<Option<String>>,
    parent_id: Vec<Option<String>>,
    schedule_id: Vec<Option<String>>,
    expires_at: Vec<Option<DateTime<Utc>>>,
    ttl_ms: Vec<Option<i64>>,
    traceparent: Vec<Option<String>>,
}

impl Columns {
    fn of(jobs: &[&InsertJob]) -> Self {
        let mut c = Self::default();
        for j in jobs {
            c.id.push(j.id.clone());
            c.job_type.push(j.job_type.clone());
            c.payload.push(j.payload.clone());
            c.scope_type
                .push(j.scope.as_ref().map(|s| s.scope_type.clone()));
            c.scope_id
                .push(j.scope.as_ref().map(|s| s.scope_id.clone()));
            c.priority.push(j.priority);
            c.run_at.push(j.run_at);
            c.delay_ms.push(time::millis(j.delay));
            let attempts = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
            c.max_attempts.push(j.max_attempts.map(attempts));
            c.default_max_attempts
                .push(attempts(j.default_max_attempts));
            c.dedupe_key.push(j.dedupe_key.clone());
            c.parent_id.push(j.parent_id.clone());
            c.schedule_id.push(j.schedule_id.clone());
            c.expires_at.push(j.expires_at);
            c.ttl_ms.push(j.ttl.map(time::millis));
            c.traceparent.push(j.traceparent.clone());
        }
        c
    }
}

/// Inserts jobs on `conn` (the caller owns the transaction).
pub(super) async fn insert_all(
    conn: &mut PgConnection,
    sql: &Dialect,
    jobs: &[InsertJob],
) -> Result<Vec<AddResult>, StoreError> {
    let jobs_table = &sql.jobs;
    let parents: Vec<String> = jobs
        .iter()
        .filter_map(|j| j.parent_id.clone())
        .filter(|p| !jobs.iter().any(|o| &o.id == p))
        .collect();
    if !parents.is_empty() {
        let found: Vec<String> =
            sqlx::query_scalar(&format!("SELECT id FROM {jobs_table} WHERE id = ANY($1)"))
                .bind(&parents)
                .fetch_all(&mut *conn)
                .await?;
        if let Some(missing) = parents.into_iter().find(|p| !found.contains(p)) {
            return Err(StoreError::UnknownParent(missing));
        }
    }
    // `ON CONFLICT` makes Postgres insert speculatively (an arbiter-index
    // probe and an extra WAL record per row, about a quarter of a batch's
    // server time); ids are fresh UUIDv7s, so only a dedupe key can
    // conflict, and a batch without one takes a plain insert.
    let may_conflict = jobs.iter().any(|j| j.dedupe_key.is_some());
    let on_conflict = if may_conflict {
        "ON CONFLICT DO NOTHING"
    } else {
        ""
    };
    let sql = format!(
        "INSERT INTO {jobs_table} (id, job_type, payload, scope_type, scope_id, priority, run_at, \
           max_attempts, dedupe_key, parent_id, schedule_id, expires_at, traceparent) \
         SELECT id, job_type, payload, scope_type, scope_id, priority, {run_at}, \
           COALESCE(max_attempts, {type_max}, default_max_attempts), \
           dedupe_key, parent_id, schedule_id, \
           COALESCE(expires_at, CASE WHEN ttl_ms IS NOT NULL THEN {ttl} END), traceparent \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], \
           $7::timestamptz[], $8::int8[], $9::int4[], $10::text[], $11::text[], $12::text[], \
           $13::timestamptz[], $14::int8[], $15::int4[], $16::text[]) \
           AS t(id, job_type, payload, scope_type, scope_id, priority, run_at, delay_ms, \
                max_attempts, dedupe_key, parent_id, schedule_id, expires_at, ttl_ms, \
                default_max_attempts, traceparent) \
         {on_conflict} RETURNING id",
        run_at = sql.plus_ms("COALESCE(run_at, now())", "delay_ms"),
        ttl = sql.plus_ms("now()", "ttl_ms"),
        type_max = type_max_attempts(&sql.deployed_types, "t.job_type"),
    );
    let mut pending: Vec<&InsertJob> = jobs.iter().collect();
    let mut results: HashMap<String, AddResult> = HashMap::new();
    for _round in 0..5 {
        if pending.is_empty() {
            break;
        }
        let c = Columns::of(&pending);
        let inserted: Vec<String> = sqlx::query_scalar(&sql)
            .bind(c.id)
            .bind(c.job_type)
            .bind(c.payload)
            .bind(c.scope_type)
            .bind(c.scope_id)
            .bind(c.priority)
            .bind(c.run_at)
            .bind(c.delay_ms)
            .bind(c.max_attempts)
            .bind(c.dedupe_key)
            .bind(c.parent_id)
            .bind(c.schedule_id)
            .bind(c.expires_at)
            .bind(c.ttl_ms)
            .bind(c.default_max_attempts)
            .bind(c.traceparent)
            .fetch_all(&mut *conn)
            .await?;
        for id in inserted {
            let result = AddResult {
                id: id.clone(),
                deduplicated: false,
            };
            results.insert(id, result);
        }
        pending.retain(|j| !results.contains_key(&j.id));
        let keys: Vec<String> = pending
            .iter()
            .filter_map(|j| j.dedupe_key.clone())
            .collect();
        if keys.is_empty() {
            break;
        }
        let rows = sqlx::query(&format!(
            "SELECT id, dedupe_key FROM {jobs_table} WHERE dedupe_key = ANY($1) AND {LIVE}"
        ))
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
        let mut live = HashMap::new();
        for r in rows {
            live.insert(
                r.try_get::<String, _>("dedupe_key")?,
                r.try_get::<String, _>("id")?,
            );
        }
        pending.retain(|j| match j.dedupe_key.as_ref().and_then(|k| live.get(k)) {
            Some(existing) => {
                let result = AddResult {
                    id: existing.clone(),
                    deduplicated: true,
                };
                results.insert(j.id.clone(), result);
                false
            }
            None => true,
        });
    }
    jobs.iter()
        .map(|j| {
            results.remove(&j.id).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "job `{}` was neither inserted nor deduplicated",
                    j.id
                ))
            })
        })
        .collect()
}

/// A claim: the single-statement fast path when the type has no guard,
/// else the shared guard policy in one transaction.
pub(super) async fn claim_batch(
    store: &PostgresStore,
    p: ClaimParams,
) -> Result<ClaimResult, StoreError> {
    if !p.guards.is_empty() {
        return tx::claim(store, &p).await;
    }
    let t = &store.sql.jobs;
    let exp = "j.expires_at <= now()";
    let sql = format!(
        "WITH cand AS (SELECT id FROM {t} j \
             WHERE status = 'pending' AND job_type = $1 AND run_at <= now() \
               AND NOT EXISTS (SELECT 1 FROM {t} c WHERE c.parent_id = j.id AND c.{LIVE}) \
             ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
         UPDATE {t} j SET \
           status = CASE WHEN {exp} THEN 'failed' ELSE 'running' END, \
           last_error = CASE WHEN {exp} THEN $3 ELSE j.last_error END, \
           error_code = CASE WHEN {exp} THEN $7 ELSE j.error_code END, \
           finished_at = CASE WHEN {exp} THEN now() ELSE NULL END, \
           lease_owner = CASE WHEN {exp} THEN NULL ELSE $4 END, \
           lease_expires_at = CASE WHEN {exp} THEN NULL ELSE {lease} END, \
           started_at = CASE WHEN {exp} THEN j.started_at ELSE now() END, \
           attempts = CASE WHEN {exp} THEN j.attempts ELSE j.attempts + 1 END, \
           handler_version = CASE WHEN {exp} THEN j.handler_version ELSE $6 END, \
           updated_at = now() \
         FROM cand WHERE j.id = cand.id RETURNING {cols}",
        lease = store.sql.plus_ms("now()", "$5"),
        cols = job_columns("j.")
    );
    let rows = sqlx::query(&sql)
        .bind(&p.job_type)
        .bind(i64::from(p.limit))
        .bind(EXPIRED_ERROR)
        .bind(&p.worker_id)
        .bind(time::millis(p.lease))
        .bind(&p.handler_version)
        .bind(EXPIRED_CODE)
        .fetch_all(&store.fast)
        .await?;
    let mut res = ClaimResult::default();
    for job in jobs_from_rows(&rows)? {
        if job.status == JobStatus::Failed {
            res.expired.push(job);
        } else {
            res.claimed.push(job);
        }
    }
    res.claimed
        .sort_by(|a, b| (a.priority, a.run_at, &a.id).cmp(&(b.priority, b.run_at, &b.id)));
    Ok(res)
}

pub(super) async fn renew_leases(
    store: &PostgresStore,
    p: RenewParams,
) -> Result<Vec<String>, StoreError> {
    let (ids, attempts) = claim_arrays(&p.claims);
    Ok(sqlx::query_scalar(&store.sql.renew())
        .bind(time::millis(p.lease))
        .bind(ids)
        .bind(attempts)
        .bind(&p.worker_id)
        .fetch_all(&store.fast)
        .await?)
}

pub(super) async fn complete(
    store: &PostgresStore,
    p: CompleteParams,
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<String> = p.jobs.iter().map(|c| c.id.clone()).collect();
    let results: Vec<Option<String>> = p.jobs.iter().map(|c| c.result.clone()).collect();
    let attempts: Vec<i32> = p.jobs.iter().map(|c| attempt(c.attempt)).collect();
    let mut tx = store.fast.begin().await?;
    let endings: Vec<SqlEnding<'_>> = p
        .jobs
        .iter()
        .map(|c| SqlEnding::of(&c.id, &c.ending, AttemptOutcome::Succeeded, None).fenced(c.attempt))
        .collect();
    history::record(&mut tx, &store.sql, &endings, Some(&p.worker_id)).await?;
    let logs = p.jobs.iter().flat_map(|c| &c.ending.logs).collect();
    history::store_logs(&mut tx, &store.sql, logs).await?;
    let done = sqlx::query_scalar(&format!(
        "UPDATE {} j SET status = 'succeeded', result = c.result, finished_at = now(), \
           lease_owner = NULL, lease_expires_at = NULL, updated_at = now() \
         FROM unnest($1::text[], $2::text[], $4::int4[]) AS c(id, result, attempt) \
         WHERE j.id = c.id AND j.status = 'running' AND j.lease_owner = $3 \
           AND j.attempts = c.attempt RETURNING j.id",
        store.sql.jobs
    ))
    .bind(&ids)
    .bind(&results)
    .bind(&p.worker_id)
    .bind(&attempts)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done)
}

pub(super) async fn retry(store: &PostgresStore, p: RetryParams) -> Result<bool, StoreError> {
    let mut tx = store.fast.begin().await?;
    let ending = SqlEnding::of(
        &p.id,
        &p.ending,
        AttemptOutcome::Retried,
        Some(p.error.as_str()),
    )
    .fenced(p.attempt);
    history::record(&mut tx, &store.sql, &[ending], Some(&p.worker_id)).await?;
    history::store_logs(&mut tx, &store.sql, p.ending.logs.iter().collect()).await?;
    let r = sqlx::query(&store.sql.retry())
        .bind(time::millis(p.delay))
        .bind(&p.error)
        .bind(p.consumes_attempt)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(attempt(p.attempt))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(r.rows_affected() == 1)
}

pub(super) async fn fail(store: &PostgresStore, p: FailParams) -> Result<bool, StoreError> {
    let mut tx = store.fast.begin().await?;
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
    history::record(&mut tx, &store.sql, &[ending], Some(&p.worker_id)).await?;
    history::store_logs(&mut tx, &store.sql, p.ending.logs.iter().collect()).await?;
    let r = sqlx::query(&store.sql.fail())
        .bind(&p.error)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(&p.code)
        .bind(&p.details)
        .bind(attempt(p.attempt))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(r.rows_affected() == 1)
}

pub(super) async fn release(store: &PostgresStore, p: ReleaseParams) -> Result<u64, StoreError> {
    let (ids, attempts) = claim_arrays(&p.claims);
    let mut tx = store.fast.begin().await?;
    let endings: Vec<SqlEnding<'_>> = p
        .claims
        .iter()
        .map(|c| SqlEnding::bare(&c.id, AttemptOutcome::Released, None).fenced(c.attempt))
        .collect();
    history::record(&mut tx, &store.sql, &endings, Some(&p.worker_id)).await?;
    let r = sqlx::query(&store.sql.release())
        .bind(ids)
        .bind(attempts)
        .bind(&p.worker_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(r.rows_affected())
}

pub(super) async fn set_progress(
    store: &PostgresStore,
    worker_id: &str,
    claim: &ClaimRef,
    json: &str,
) -> Result<bool, StoreError> {
    let r = sqlx::query(&store.sql.set_progress())
        .bind(json)
        .bind(&claim.id)
        .bind(worker_id)
        .bind(attempt(claim.attempt))
        .execute(&store.fast)
        .await?;
    Ok(r.rows_affected() == 1)
}

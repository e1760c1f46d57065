//! Claims that do not grow with the number of types on Postgres: which
//! types have pending work, and one claim for many unguarded types.
//!
//! Invariants: the due-types answer is one statement of one index probe per
//! asked type (`jobs_due`: `min(run_at)` of its pending jobs); the
//! multi-type claim is one statement that takes, per type, at most that
//! type's limit of candidates in claim order (`LATERAL … LIMIT`), each
//! locked `FOR UPDATE SKIP LOCKED`, and claims them (or fails them as
//! expired) in the same statement, on the `synchronous_commit = off` pool
//! like every engine transition.

use sqlx::Row;

use super::writes::claim_or_expire;
use super::PostgresStore;
use crate::job::JobStatus;
use crate::store::sql::{job_columns, jobs_from_rows};
use crate::store::{
    ClaimManyParams, ClaimResult, DueTypes, StoreError, EXPIRED_CODE, EXPIRED_ERROR,
};
use crate::time;

pub(super) async fn due_types(
    store: &PostgresStore,
    job_types: &[String],
) -> Result<DueTypes, StoreError> {
    if job_types.is_empty() {
        return Ok(DueTypes::default());
    }
    let rows = sqlx::query(&format!(
        "SELECT t.job_type, \
           CEIL(EXTRACT(EPOCH FROM (m.earliest - now())) * 1000)::int8 AS wait_ms \
         FROM unnest($1::text[]) AS t(job_type) \
         CROSS JOIN LATERAL (SELECT min(j.run_at) AS earliest FROM {} j \
           WHERE j.status = 'pending' AND j.job_type = t.job_type) m \
         WHERE m.earliest IS NOT NULL",
        store.sql.jobs
    ))
    .bind(job_types)
    .fetch_all(&store.fast)
    .await?;
    let mut waits = Vec::with_capacity(rows.len());
    for r in rows {
        waits.push((
            r.try_get::<String, _>("job_type")?,
            r.try_get::<i64, _>("wait_ms")?,
        ));
    }
    Ok(DueTypes::from_waits(waits))
}

pub(super) async fn claim_many(
    store: &PostgresStore,
    p: ClaimManyParams,
) -> Result<ClaimResult, StoreError> {
    let mut res = ClaimResult::default();
    if p.types.is_empty() {
        return Ok(res);
    }
    let sql = claim_many_statement(store);
    let types: Vec<&str> = p.types.iter().map(|c| c.job_type.as_str()).collect();
    let limits: Vec<i64> = p.types.iter().map(|c| i64::from(c.limit)).collect();
    let leases: Vec<i64> = p.types.iter().map(|c| time::millis(c.lease)).collect();
    let versions: Vec<Option<&str>> = p
        .types
        .iter()
        .map(|c| c.handler_version.as_deref())
        .collect();
    let rows = sqlx::query(&sql)
        .bind(&types)
        .bind(&limits)
        .bind(&leases)
        .bind(&versions)
        .bind(EXPIRED_ERROR)
        .bind(&p.worker_id)
        .bind(EXPIRED_CODE)
        .fetch_all(&store.fast)
        .await?;
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

/// The claim for many unguarded types: `$1`..`$4` each type's name, most
/// jobs, lease in ms and handler version; `$5` expiry error, `$6` worker,
/// `$7` expiry code. `id = ANY(…)` beside the join to `cand` makes the
/// claimed rows a primary-key read in every plan (see
/// `writes::claim_statement`).
pub(super) fn claim_many_statement(store: &PostgresStore) -> String {
    let t = &store.sql.jobs;
    format!(
        "WITH req AS (SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[]) \
             AS r(job_type, lim, lease_ms, version)), \
         cand AS (SELECT pick.id, req.lease_ms, req.version FROM req CROSS JOIN LATERAL \
             (SELECT j.id FROM {t} j \
               WHERE j.status = 'pending' AND j.job_type = req.job_type AND j.run_at <= now() \
                 AND {childless} \
               ORDER BY j.priority, j.run_at, j.id LIMIT req.lim FOR UPDATE SKIP LOCKED) pick) \
         UPDATE {t} j SET {set} \
         FROM cand WHERE j.id = cand.id AND j.id = ANY(ARRAY(SELECT id FROM cand)) \
         RETURNING {cols}",
        childless = store.sql.no_live_children(t),
        set = claim_or_expire(
            &store.sql.plus_ms("now()", "cand.lease_ms"),
            "$5",
            "$7",
            "$6",
            "cand.version"
        ),
        cols = job_columns("j.")
    )
}

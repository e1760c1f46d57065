//! Job writes on Postgres (inserts are `insert`'s): claim, renew,
//! complete, retry, fail, release, progress.
//!
//! Invariants: an unguarded claim selects candidates `FOR UPDATE SKIP
//! LOCKED` and claims them in the same statement; many completions are one
//! statement; every write after a claim is fenced on
//! the claim (`status = running AND lease_owner = worker AND attempts = the
//! claim's attempt`), and one that ends an attempt records the attempt and
//! its unstored log lines with it: a completion on the job rows it updates
//! (the succeeded attempt's worker and figures), in one statement; the
//! others in a transaction that first records the attempt row under the
//! same fence (`history`). Engine
//! transitions use the `synchronous_commit = off` pool (see
//! [`PostgresStore`]).

use super::rows::{attempt, claim_arrays};
use super::{history, tx, PostgresStore};
use crate::attempt::AttemptOutcome;
use crate::attempt::LogLine;
use crate::job::JobStatus;
use crate::store::sql::{
    endings_json, figure_values, job_columns, jobs_from_rows, logs_json, set_figures_from, Dialect,
    SqlEnding, FIGURES,
};
use crate::store::{
    ClaimParams, ClaimRef, ClaimResult, CompleteParams, FailParams, ReleaseParams, RenewParams,
    RetryParams, StoreError, EXPIRED_CODE, EXPIRED_ERROR,
};
use crate::time;

/// A claim: the single-statement fast path when the type has no guard,
/// else the shared guard policy in one transaction.
pub(super) async fn claim_batch(
    store: &PostgresStore,
    p: ClaimParams,
) -> Result<ClaimResult, StoreError> {
    if !p.guards.is_empty() {
        return tx::claim(store, &p).await;
    }
    let sql = claim_statement(store);
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

/// The unguarded claim: `$1` job type, `$2` most jobs, `$3` expiry error,
/// `$4` worker, `$5` lease in ms, `$6` handler version, `$7` expiry code.
/// The claimed rows are found again by `id = ANY(…)`, a primary-key read
/// in every plan; a join to `cand` was planned as a hash join over the
/// whole table whenever the statistics overestimated the candidates.
pub(super) fn claim_statement(store: &PostgresStore) -> String {
    let t = &store.sql.jobs;
    format!(
        "WITH cand AS (SELECT id FROM {t} j \
             WHERE status = 'pending' AND job_type = $1 AND run_at <= now() \
               AND {childless} \
             ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
         UPDATE {t} j SET {set} \
         WHERE j.id = ANY(ARRAY(SELECT id FROM cand)) RETURNING {cols}",
        childless = store.sql.no_live_children(t),
        set = claim_or_expire(&store.sql.plus_ms("now()", "$5"), "$3", "$7", "$4", "$6"),
        cols = job_columns("j.")
    )
}

/// The `SET` list of a claim of the candidate rows `j`: one past its
/// `expires_at` fails with error `error` and code `code`; any other runs
/// under worker `worker`'s lease until `lease`, recording handler version
/// `version` (each an SQL expression).
pub(super) fn claim_or_expire(
    lease: &str,
    error: &str,
    code: &str,
    worker: &str,
    version: &str,
) -> String {
    let exp = "j.expires_at <= now()";
    format!(
        "status = CASE WHEN {exp} THEN 'failed' ELSE 'running' END, \
         last_error = CASE WHEN {exp} THEN {error} ELSE j.last_error END, \
         error_code = CASE WHEN {exp} THEN {code} ELSE j.error_code END, \
         finished_at = CASE WHEN {exp} THEN now() ELSE NULL END, \
         lease_owner = CASE WHEN {exp} THEN NULL ELSE {worker} END, \
         lease_expires_at = CASE WHEN {exp} THEN NULL ELSE {lease} END, \
         started_at = CASE WHEN {exp} THEN j.started_at ELSE now() END, \
         attempts = CASE WHEN {exp} THEN j.attempts ELSE j.attempts + 1 END, \
         handler_version = CASE WHEN {exp} THEN j.handler_version ELSE {version} END, \
         updated_at = now()"
    )
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

/// The CTE `announced` that notifies channel `$5` of the ids `done`
/// returned: 32 ids per notification, separated by spaces (the relay splits
/// them), so a payload stays far below Postgres's 8,000-byte limit. An id
/// longer than 200 bytes (never one boxcar made) is left out rather than
/// risk failing the completion; its waiters find it at their next read.
const ANNOUNCE: &str = "numbered AS (SELECT id, row_number() OVER () - 1 AS n FROM done \
       WHERE octet_length(id) <= 200), \
     announced AS (SELECT count(pg_notify($5, g.ids)) AS sent \
       FROM (SELECT string_agg(id, ' ') AS ids FROM numbered GROUP BY n / 32) g)";

/// The completion statement: `$1` ids, `$2` results, `$3` the worker,
/// `$4` the claims' attempts, `$5` the finished channel, `$6` the JSON log
/// lines, `$7`.. the figure columns ([`FIGURES`]), one array each.
pub(super) fn complete_statement(sql: &Dialect) -> String {
    let figure_params = FIGURES
        .iter()
        .enumerate()
        .map(|(n, _)| format!("${}::int8[]", n + 7))
        .collect::<Vec<_>>()
        .join(", ");
    let set_figures = set_figures_from("c");
    format!(
        "WITH done AS (UPDATE {} j SET status = 'succeeded', result = c.result, \
           finished_at = now(), lease_owner = NULL, lease_expires_at = NULL, updated_at = now(), \
           finished_by = $3, {set_figures} \
         FROM unnest($1::text[], $2::text[], $4::int4[], {figure_params}) \
           AS c(id, result, attempt, {}) \
         WHERE j.id = c.id AND {running} = 'running' AND j.lease_owner = $3 \
           AND j.attempts = c.attempt \
         RETURNING j.id), \
         logged AS ({}), {ANNOUNCE} \
         SELECT done.id FROM done, announced",
        sql.jobs,
        FIGURES.join(", "),
        sql.insert_logs_at(6),
        running = sql.unindexed("j.status"),
    )
}

/// Marks the batch succeeded (fenced on each claim) with each job's
/// succeeded attempt on its row (worker and figures), stores the batch's
/// log lines, and announces the ids on the finished channel: one
/// statement, one round trip (its data-modifying parts all run, in one
/// snapshot, and commit together). No attempt row is written: the history
/// reads a succeeded attempt from the job row. Answers the ids it
/// completed.
pub(super) async fn complete(
    store: &PostgresStore,
    p: CompleteParams,
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<&str> = p.jobs.iter().map(|c| c.id.as_str()).collect();
    let results: Vec<Option<&str>> = p.jobs.iter().map(|c| c.result.as_deref()).collect();
    let attempts: Vec<i32> = p.jobs.iter().map(|c| attempt(c.attempt)).collect();
    let figures: Vec<[Option<i64>; 8]> = p
        .jobs
        .iter()
        .map(|c| figure_values(&c.ending.usage))
        .collect();
    let figure_column = |n: usize| -> Vec<Option<i64>> { figures.iter().map(|f| f[n]).collect() };
    let logs: Vec<&LogLine> = p.jobs.iter().flat_map(|c| &c.ending.logs).collect();
    let statement = complete_statement(&store.sql);
    let mut query = sqlx::query_scalar(&statement)
        .bind(&ids)
        .bind(&results)
        .bind(&p.worker_id)
        .bind(&attempts)
        .bind(&store.finished_channel)
        .bind(logs_json(logs.into_iter()));
    for n in 0..FIGURES.len() {
        query = query.bind(figure_column(n));
    }
    let done = query.fetch_all(&store.fast).await?;
    Ok(done)
}

/// The fenced transition `update` (an `UPDATE` of one job whose fence
/// holds the claim's attempt at `$attempt`) with the attempt it ends
/// recorded from its own `RETURNING` row (endings `$endings`, worker
/// `$worker`) and log lines `$logs` stored: one statement, one round trip.
/// Answers the number of jobs the update changed (0 or 1).
fn ending_in_one_statement(
    sql: &Dialect,
    update: &str,
    [attempt, endings, worker, logs]: [usize; 4],
) -> String {
    format!(
        "WITH ended AS ({update} RETURNING id, handler_version, started_at), \
         done AS (SELECT id, ${attempt}::int4 AS attempts, handler_version, started_at \
           FROM ended), \
         recorded AS ({}), logged AS ({}) \
         SELECT count(*) FROM done",
        sql.record_attempts_of_done(endings, worker),
        sql.insert_logs_at(logs),
    )
}

/// Puts the job back to pending (fenced on the claim), records the attempt
/// it ends and stores its log lines, in one statement.
pub(super) async fn retry(store: &PostgresStore, p: RetryParams) -> Result<bool, StoreError> {
    let ending = SqlEnding::of(
        &p.id,
        &p.ending,
        AttemptOutcome::Retried,
        Some(p.error.as_str()),
    )
    .fenced(p.attempt);
    let statement = ending_in_one_statement(&store.sql, &store.sql.retry(), [6, 7, 5, 8]);
    let changed: i64 = sqlx::query_scalar(&statement)
        .bind(time::millis(p.delay))
        .bind(&p.error)
        .bind(p.consumes_attempt)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(attempt(p.attempt))
        .bind(endings_json(&[ending]))
        .bind(logs_json(p.ending.logs.iter()))
        .fetch_one(&store.fast)
        .await?;
    Ok(changed == 1)
}

/// Fails the job (fenced on the claim), records the attempt it ends and
/// stores its log lines, in one statement.
pub(super) async fn fail(store: &PostgresStore, p: FailParams) -> Result<bool, StoreError> {
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
    let statement = ending_in_one_statement(&store.sql, &store.sql.fail(), [6, 7, 3, 8]);
    let changed: i64 = sqlx::query_scalar(&statement)
        .bind(&p.error)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(&p.code)
        .bind(&p.details)
        .bind(attempt(p.attempt))
        .bind(endings_json(&[ending]))
        .bind(logs_json(p.ending.logs.iter()))
        .fetch_one(&store.fast)
        .await?;
    Ok(changed == 1)
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

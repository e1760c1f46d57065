//! Job inserts on Postgres: one `INSERT … SELECT FROM unnest(…)` per round,
//! every column bound as one array borrowed from the batch (no copy of a
//! payload or an id).
//!
//! A job's unset attempt budget is its type's newest deploy's, else its
//! default (see `store::deployed_types`; the subquery is the one SQLite's
//! insert uses). The subquery runs once per distinct type of the batch
//! (bound as its own array), not once per job: per job it was an index
//! probe of `deployed_types` per row, ≈ a tenth of a batch insert's time
//! once a deploy is recorded. Each job finds its type's answer by position
//! in an array made once per statement; joining the answers instead made
//! the plan depend on the batch's size (a hash of the whole batch in the
//! generic plan, ≈ 1 ms of planning per 1,000-job batch in custom ones).
//!
//! A batch of one job without a dedupe key (every one-by-one enqueue) binds
//! its columns as scalars in a `VALUES` row instead: one-element arrays
//! cost the server ≈ 40 µs more per statement (seventeen arrays decoded, a
//! function scan into a tuple store), a tenth of a one-job enqueue's whole
//! round trip. Both statements store the same row and send the same
//! wake-up.
//!
//! Invariants: ids are fresh UUIDv7s, so only a dedupe key can conflict. A
//! batch without one is a plain insert (`ON CONFLICT` makes Postgres insert
//! speculatively: an arbiter-index probe and an extra WAL record per row)
//! that stores every job or fails whole, and answers nothing per job. A
//! batch with dedupe keys resolves a live conflict to the existing id, in a
//! few rounds for races with finishing duplicates. A parent outside the
//! batch must exist. Every insert statement notifies the schema's insert
//! channel once per job type it stored, in the same statement (no trigger:
//! reading the types back from a transition table cost a PL/pgSQL query
//! per statement).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};

use crate::job::AddResult;
use crate::store::sql::{type_max_attempts, Dialect, LIVE};
use crate::store::{InsertJob, StoreError};
use crate::time;

/// Where a store's inserts go: its statements' tables and its insert
/// channel.
pub(super) struct Target<'a> {
    /// The store's statements.
    pub sql: &'a Dialect,
    /// The channel the store's listeners wait on for inserts.
    pub channel: &'a str,
}

/// Rounds of insert-then-resolve before a batch with dedupe keys gives up.
const ROUNDS: usize = 5;

/// The insert's columns, one array per column, borrowing the jobs.
#[derive(Default)]
struct Columns<'a> {
    id: Vec<&'a str>,
    job_type: Vec<&'a str>,
    payload: Vec<&'a str>,
    scope_type: Vec<Option<&'a str>>,
    scope_id: Vec<Option<&'a str>>,
    priority: Vec<i32>,
    run_at: Vec<Option<DateTime<Utc>>>,
    delay_ms: Vec<i64>,
    max_attempts: Vec<Option<i32>>,
    default_max_attempts: Vec<i32>,
    dedupe_key: Vec<Option<&'a str>>,
    parent_id: Vec<Option<&'a str>>,
    schedule_id: Vec<Option<&'a str>>,
    expires_at: Vec<Option<DateTime<Utc>>>,
    ttl_ms: Vec<Option<i64>>,
    traceparent: Vec<Option<&'a str>>,
    /// The batch's job types, each once: their defaults and wake-ups.
    distinct_types: Vec<&'a str>,
    /// Each job's type as a 1-based position in `distinct_types`.
    type_n: Vec<i32>,
}

/// An attempt budget as the column's type (larger budgets saturate).
fn attempts(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl<'a> Columns<'a> {
    fn of(jobs: &[&'a InsertJob]) -> Self {
        let mut c = Self::default();
        let mut positions: HashMap<&str, i32> = HashMap::new();
        for j in jobs {
            c.id.push(&j.id);
            c.job_type.push(&j.job_type);
            c.payload.push(&j.payload);
            c.scope_type
                .push(j.scope.as_ref().map(|s| s.scope_type.as_str()));
            c.scope_id
                .push(j.scope.as_ref().map(|s| s.scope_id.as_str()));
            c.priority.push(j.priority);
            c.run_at.push(j.run_at);
            c.delay_ms.push(time::millis(j.delay));
            c.max_attempts.push(j.max_attempts.map(attempts));
            c.default_max_attempts
                .push(attempts(j.default_max_attempts));
            c.dedupe_key.push(j.dedupe_key.as_deref());
            c.parent_id.push(j.parent_id.as_deref());
            c.schedule_id.push(j.schedule_id.as_deref());
            c.expires_at.push(j.expires_at);
            c.ttl_ms.push(j.ttl.map(time::millis));
            c.traceparent.push(j.traceparent.as_deref());
            let next = i32::try_from(positions.len() + 1).unwrap_or(i32::MAX);
            let n = *positions.entry(&j.job_type).or_insert_with(|| {
                c.distinct_types.push(&j.job_type);
                next
            });
            c.type_n.push(n);
        }
        c
    }
}

/// Which insert a [`statement`] is.
#[derive(Clone, Copy)]
enum Insert {
    /// Every job is stored or the statement fails (no conflict clause, no
    /// condition); notifies every type of the batch.
    Plain,
    /// A job whose dedupe key is live (held by a stored job or an earlier
    /// job of the batch) is skipped; answers the stored ids and notifies
    /// the types it stored. Rows are inserted in batch order, so the first
    /// of a batch's duplicates wins.
    Deduplicated,
}

/// The insert statement: `$1`..`$16` the columns, `$17` the batch's
/// distinct job types (for their deployed defaults), `$18` the schema's
/// insert channel, `$19` each job's type as a position in `$17`. The
/// types' defaults are read once per statement into an array (an
/// uncorrelated subquery) that each row indexes: no join, so the plan is
/// the same for every batch size and is made once per connection. The
/// same statement sends the wake-up, one notification per job type
/// (delivered at commit, dropped with a rollback).
fn statement(sql: &Dialect, kind: Insert) -> String {
    let defaults = format!(
        "SELECT array_agg({} ORDER BY u.n) \
         FROM unnest($17::text[]) WITH ORDINALITY AS u(job_type, n)",
        type_max_attempts(&sql.deployed_types, "u.job_type")
    );
    let insert = format!(
        "INSERT INTO {jobs} (id, job_type, payload, scope_type, scope_id, priority, run_at, \
           max_attempts, dedupe_key, parent_id, schedule_id, expires_at, traceparent) \
         SELECT t.id, t.job_type, t.payload, t.scope_type, t.scope_id, t.priority, {run_at}, \
           COALESCE(t.max_attempts, ({defaults})[t.type_n], t.default_max_attempts), \
           t.dedupe_key, t.parent_id, t.schedule_id, \
           COALESCE(t.expires_at, CASE WHEN t.ttl_ms IS NOT NULL THEN {ttl} END), t.traceparent \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], \
           $7::timestamptz[], $8::int8[], $9::int4[], $10::text[], $11::text[], $12::text[], \
           $13::timestamptz[], $14::int8[], $15::int4[], $16::text[], $19::int4[]) \
           WITH ORDINALITY \
           AS t(id, job_type, payload, scope_type, scope_id, priority, run_at, delay_ms, \
                max_attempts, dedupe_key, parent_id, schedule_id, expires_at, ttl_ms, \
                default_max_attempts, traceparent, type_n, n)",
        jobs = sql.jobs,
        run_at = sql.plus_ms("COALESCE(t.run_at, now())", "t.delay_ms"),
        ttl = sql.plus_ms("now()", "t.ttl_ms"),
    );
    match kind {
        // A data-modifying WITH runs to completion whether or not the
        // query reads it.
        Insert::Plain => format!(
            "WITH ins AS ({insert}) \
             SELECT count(pg_notify($18, u.job_type)) FROM unnest($17::text[]) AS u(job_type)"
        ),
        Insert::Deduplicated => format!(
            "WITH ins AS ({insert} ORDER BY t.n ON CONFLICT DO NOTHING RETURNING id, job_type), \
             woke AS (SELECT count(pg_notify($18, i.job_type)) AS n \
               FROM (SELECT DISTINCT job_type FROM ins) i) \
             SELECT ins.id FROM ins, woke"
        ),
    }
}

/// The insert of one job without a dedupe key: the [`Insert::Plain`]
/// statement's row, each column bound as a scalar (`$1`..`$15` as
/// [`bound_single`] binds them, `$16` the insert channel). It notifies the
/// job's type.
fn single_statement(sql: &Dialect) -> String {
    format!(
        "WITH ins AS (INSERT INTO {jobs} (id, job_type, payload, scope_type, scope_id, priority, \
           run_at, max_attempts, parent_id, schedule_id, expires_at, traceparent) \
         VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::int4, {run_at}, \
           COALESCE($9::int4, {defaults}, $10::int4), $11::text, $12::text, \
           COALESCE($13::timestamptz, CASE WHEN $14::int8 IS NOT NULL THEN {ttl} END), \
           $15::text)) \
         SELECT pg_notify($16, $2::text)",
        jobs = sql.jobs,
        run_at = sql.plus_ms("COALESCE($7::timestamptz, now())", "$8::int8"),
        defaults = type_max_attempts(&sql.deployed_types, "$2::text"),
        ttl = sql.plus_ms("now()", "$14::int8"),
    )
}

/// [`single_statement`] bound to `job` and the insert channel.
fn bound_single<'q>(
    statement: &'q str,
    job: &'q InsertJob,
    channel: &'q str,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(statement)
        .bind(&job.id)
        .bind(&job.job_type)
        .bind(&job.payload)
        .bind(job.scope.as_ref().map(|s| s.scope_type.as_str()))
        .bind(job.scope.as_ref().map(|s| s.scope_id.as_str()))
        .bind(job.priority)
        .bind(job.run_at)
        .bind(time::millis(job.delay))
        .bind(job.max_attempts.map(attempts))
        .bind(attempts(job.default_max_attempts))
        .bind(job.parent_id.as_deref())
        .bind(job.schedule_id.as_deref())
        .bind(job.expires_at)
        .bind(job.ttl.map(time::millis))
        .bind(job.traceparent.as_deref())
        .bind(channel)
}

/// `statement` bound to the columns of `c` and the insert channel.
fn bound<'q>(
    statement: &'q str,
    c: &'q Columns<'q>,
    channel: &'q str,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(statement)
        .bind(&c.id)
        .bind(&c.job_type)
        .bind(&c.payload)
        .bind(&c.scope_type)
        .bind(&c.scope_id)
        .bind(&c.priority)
        .bind(&c.run_at)
        .bind(&c.delay_ms)
        .bind(&c.max_attempts)
        .bind(&c.dedupe_key)
        .bind(&c.parent_id)
        .bind(&c.schedule_id)
        .bind(&c.expires_at)
        .bind(&c.ttl_ms)
        .bind(&c.default_max_attempts)
        .bind(&c.traceparent)
        .bind(&c.distinct_types)
        .bind(channel)
        .bind(&c.type_n)
}

/// Fails with the first parent that is neither in the batch nor stored.
async fn check_parents(
    conn: &mut PgConnection,
    sql: &Dialect,
    jobs: &[InsertJob],
) -> Result<(), StoreError> {
    let in_batch: HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    let parents: Vec<&str> = jobs
        .iter()
        .filter_map(|j| j.parent_id.as_deref())
        .filter(|p| !in_batch.contains(p))
        .collect::<HashSet<&str>>()
        .into_iter()
        .collect();
    if parents.is_empty() {
        return Ok(());
    }
    let found: Vec<String> =
        sqlx::query_scalar(&format!("SELECT id FROM {} WHERE id = ANY($1)", sql.jobs))
            .bind(&parents)
            .fetch_all(&mut *conn)
            .await?;
    match parents.into_iter().find(|p| !found.iter().any(|f| f == p)) {
        Some(missing) => Err(StoreError::UnknownParent(missing.to_string())),
        None => Ok(()),
    }
}

/// Inserts jobs on `conn` (the caller owns the transaction, if any); one
/// answer per job, in order.
pub(super) async fn insert_all(
    conn: &mut PgConnection,
    store: &Target<'_>,
    jobs: &[InsertJob],
) -> Result<Vec<AddResult>, StoreError> {
    check_parents(conn, store.sql, jobs).await?;
    if jobs.iter().any(|j| j.dedupe_key.is_some()) {
        return insert_deduplicated(conn, store, jobs).await;
    }
    if let [job] = jobs {
        let statement = single_statement(store.sql);
        bound_single(&statement, job, store.channel)
            .execute(&mut *conn)
            .await?;
        return Ok(vec![AddResult {
            id: job.id.clone(),
            deduplicated: false,
        }]);
    }
    let all: Vec<&InsertJob> = jobs.iter().collect();
    let columns = Columns::of(&all);
    let statement = statement(store.sql, Insert::Plain);
    bound(&statement, &columns, store.channel)
        .execute(&mut *conn)
        .await?;
    Ok(jobs
        .iter()
        .map(|j| AddResult {
            id: j.id.clone(),
            deduplicated: false,
        })
        .collect())
}

/// Inserts a batch with dedupe keys: each job is stored, or answered with
/// the live job that holds its key.
async fn insert_deduplicated(
    conn: &mut PgConnection,
    store: &Target<'_>,
    jobs: &[InsertJob],
) -> Result<Vec<AddResult>, StoreError> {
    let sql = store.sql;
    let statement = statement(sql, Insert::Deduplicated);
    let mut pending: Vec<&InsertJob> = jobs.iter().collect();
    let mut results: HashMap<String, AddResult> = HashMap::new();
    for _round in 0..ROUNDS {
        if pending.is_empty() {
            break;
        }
        let columns = Columns::of(&pending);
        let inserted: Vec<String> = bound(&statement, &columns, store.channel)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get::<String, _>("id"))
            .collect::<Result<_, _>>()?;
        for id in inserted {
            let result = AddResult {
                id: id.clone(),
                deduplicated: false,
            };
            results.insert(id, result);
        }
        pending.retain(|j| !results.contains_key(&j.id));
        let keys: Vec<&str> = pending
            .iter()
            .filter_map(|j| j.dedupe_key.as_deref())
            .collect();
        if keys.is_empty() {
            break;
        }
        let rows = sqlx::query(&format!(
            "SELECT id, dedupe_key FROM {} WHERE dedupe_key = ANY($1) AND {LIVE}",
            sql.jobs
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

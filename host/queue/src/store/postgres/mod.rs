//! Postgres [`JobStore`] for fleets of hosts.
//!
//! Invariants:
//! - All tables live in one schema (default `boxcar`); every statement names
//!   it explicitly, so a caller's transaction with any `search_path` can
//!   enqueue (`add_in_tx`), and several schemas can share a database.
//! - Lease and due-time comparisons use the database clock (`now()`).
//! - Inserts notify `<schema>_jobs_inserted` (each inserting statement, per
//!   job type) and terminal transitions notify `<schema>_jobs_finished`
//!   (completions from their statement, failures and cancellations from a
//!   trigger); a listener task relays both to [`JobStore::subscribe`].
//! - Migrations of one schema run behind a session advisory lock keyed on
//!   the schema, so processes starting together apply each version once.
//!
//! Modules by concern: `insert`, `writes` (claim, complete, retry, fail,
//! release, progress), `admin` (inspect, cancel, retry failed, prune),
//! `events`, `deployed_types`, `due` (which types have due work, multi-type
//! claims), `history` (attempts and logs), `listen` (the LISTEN relay),
//! `schedules`, `tx` (the primitives the shared policies run on: guarded
//! claims, rescue, guard answers) and `rows` (column reads).

mod admin;
mod deployed_types;
mod due;
mod events;
mod history;
mod insert;
mod listen;
mod rows;
mod schedules;
mod tx;
mod writes;

#[cfg(test)]
mod plan_tests;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};
use tokio::sync::broadcast;

use super::deployed_types::{DeployedTypeRecord, RecordDeployedTypes};
use super::due::{ClaimManyParams, DueTypes};
use super::event_hub::EventHub;
use super::migrations::{self, Applied};
use super::schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};
use super::sql::{sql_job_store, Dialect};
use super::{
    CancelParams, CancelledJob, ClaimParams, ClaimRef, ClaimResult, CompleteParams, FailParams,
    InsertJob, JobStore, PruneParams, ReleaseParams, RenewParams, RescueParams, RetryParams,
    StoreError, StoreEvent, TxConn,
};
use crate::attempt::{Attempt, LogLine, LogQuery, StoredLogLine};
use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus};
use crate::job::{AddResult, HandlerEvent, Job, JobFilter, StatusCounts, TypeCounts};
use crate::schedule::ScheduleRecord;

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "boxcar";

/// Whether `s` is a safe unquoted schema name.
pub fn valid_schema(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A Postgres-backed store in one schema.
pub struct PostgresStore {
    pool: PgPool,
    /// Durable connections that plan each statement once ([`plan_once`]),
    /// for the store's inserts. `pool`, which callers also get for
    /// their own transactions, keeps Postgres's default planning.
    enqueue: PgPool,
    /// Connections with `synchronous_commit = off` that plan each
    /// statement once ([`plan_once`]), used only for engine
    /// transitions (claim, renew, complete, retry, fail, release, rescue,
    /// progress). Losing the last of these on a database crash only makes
    /// a job run again, which at-least-once delivery already allows;
    /// enqueues (`enqueue`) and cancels (`pool`) stay durable.
    fast: PgPool,
    schema: String,
    /// The channel this schema's inserts are notified on.
    inserted_channel: String,
    /// The channel this schema's terminal transitions are notified on.
    finished_channel: String,
    /// The shared statements, spelled for this schema.
    sql: Dialect,
    events: EventHub,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Applies the migrations to `schema` on `conn`, holding a session advisory
/// lock keyed on the schema name for the whole run.
async fn migrate_schema(
    conn: &mut PgConnection,
    schema: &str,
    migrator: &sqlx::migrate::Migrator,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_lock(hashtext('boxcar.migrate'), hashtext($1))")
        .bind(schema)
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!("SET search_path TO {schema}"))
        .execute(&mut *conn)
        .await?;
    migrator.run_direct(&mut *conn).await?;
    sqlx::query("RESET search_path").execute(&mut *conn).await?;
    sqlx::query("SELECT pg_advisory_unlock(hashtext('boxcar.migrate'), hashtext($1))")
        .bind(schema)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A connection used within this long is handed out without a ping.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// Pool options: a connection idle for longer than [`FRESH_FOR`] is pinged
/// before it is handed out (the server may have restarted meanwhile, and a
/// dead one is replaced); one used more recently is not. sqlx's default
/// pings every connection it hands out: one more round trip to the server
/// for every statement, on the path of every claim. sqlx still pings each
/// connection given back, off the caller's path.
fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > FRESH_FOR {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// Makes `conn` plan each prepared statement once: the custom plans
/// Postgres otherwise keeps choosing for the store's statements (their array
/// parameters make the generic plan look dearer) are the same plans,
/// re-planned on every call — ≈ 0.6 ms for a claim, about half a job's
/// pickup latency, and ≈ 0.12 ms for a one-job insert, as long as the
/// insert itself.
///
/// It also turns off JIT compilation on `conn`: a generic plan's cost can
/// be overestimated past `jit_above_cost` when the statistics are skewed
/// (one job type holding most of the table), and compiling it took
/// ≈ 0.5 s for a claim that runs in a fraction of a millisecond.
async fn plan_once(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await?;
    sqlx::query("SET jit = off").execute(&mut *conn).await?;
    Ok(())
}

impl PostgresStore {
    /// Where this store's inserts go.
    fn insert_target(&self) -> insert::Target<'_> {
        insert::Target {
            sql: &self.sql,
            channel: &self.inserted_channel,
        }
    }

    /// Local events plus the LISTEN relay's (see `listen`).
    fn subscribe_events(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    /// [`PostgresStore::subscribe_events`] without `Finished`.
    fn subscribe_wakeup_events(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe_wakeups()
    }

    /// Connects to `url` using tables in `schema` (created by `migrate`).
    /// Starts the LISTEN task that relays wake-ups.
    ///
    /// # Errors
    /// The schema name is not a plain lowercase identifier, or the server
    /// cannot be reached.
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        if !valid_schema(schema) {
            return Err(StoreError::BadUrl {
                url: "postgres://…".into(),
                reason: format!(
                    "schema `{schema}` must be a lowercase identifier ([a-z_][a-z0-9_]*)"
                ),
            });
        }
        let opts = PgConnectOptions::from_str(url)?;
        let pool = pool_options(8).connect_with(opts.clone()).await?;
        // Opened on first use: most CLI commands never enqueue.
        let enqueue = pool_options(4)
            .after_connect(|conn, _| Box::pin(async move { plan_once(conn).await }))
            .connect_lazy_with(opts.clone());
        let fast = pool_options(4)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("SET synchronous_commit = off")
                        .execute(&mut *conn)
                        .await?;
                    plan_once(conn).await
                })
            })
            .connect_with(opts)
            .await?;
        let events = EventHub::new(4096);
        let listener = listen::relay(&pool, schema, events.clone()).await?;
        Ok(Self {
            pool,
            enqueue,
            fast,
            sql: Dialect::postgres(schema),
            schema: schema.to_string(),
            inserted_channel: listen::inserted_channel(schema),
            finished_channel: listen::finished_channel(schema),
            events,
            listener,
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Drops the schema and everything in it (tests).
    ///
    /// # Errors
    /// The database refused.
    pub async fn drop_schema(&self) -> Result<(), StoreError> {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

sql_job_store!(PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // sqlx's migrator takes an advisory lock per database, but only after
        // our `CREATE SCHEMA IF NOT EXISTS`, which is not safe against a
        // concurrent twin (it can fail on pg_namespace's unique index); and
        // it does not release its lock when a migration fails. So: one
        // session lock per schema around everything, and a connection that
        // saw an error is closed rather than returned (dropping any lock it
        // still holds).
        let migrator = sqlx::migrate!("../../migrations/postgres");
        let current = sqlx::query_as::<_, Applied>(&migrations::applied_query(&format!(
            "{}.",
            self.schema
        )))
        .fetch_all(&self.pool)
        .await
        .is_ok_and(|applied| migrations::is_current(&applied, &migrator));
        if current {
            return Ok(());
        }
        let mut conn = self.pool.acquire().await?;
        let res = migrate_schema(&mut conn, &self.schema, &migrator).await;
        if res.is_err() {
            conn.close().await.ok();
        }
        res
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        Ok(sqlx::query_scalar("SELECT now()")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn add_many(&self, jobs: Vec<InsertJob>) -> Result<Vec<AddResult>, StoreError> {
        // The insert's plan does not depend on the batch's size: made once
        // per connection.
        let mut conn = self.enqueue.acquire().await?;
        insert::insert_all(&mut conn, &self.insert_target(), &jobs).await
    }

    async fn add_in_tx(
        &self,
        conn: TxConn<'_>,
        jobs: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, StoreError> {
        match conn {
            TxConn::Postgres(c) => insert::insert_all(c, &self.insert_target(), &jobs).await,
            #[allow(unreachable_patterns)]
            _ => Err(StoreError::Unsupported(
                "this queue uses Postgres; enqueue through a Postgres transaction on the same database".into(),
            )),
        }
    }
});

//! SQLite [`JobStore`]: one file, WAL, busy timeout, safe for several OS
//! processes on one machine.
//!
//! Invariants:
//! - Times are integer milliseconds (UTC) from the process clock.
//! - Every state change is a single conditional `UPDATE`; multi-statement
//!   writes and guarded claims run in `BEGIN IMMEDIATE` transactions, so a
//!   deferred reader never fails to upgrade and SQLite's write lock covers
//!   a whole decision.
//! - This process's writers queue on one async mutex before SQLite's lock.
//! - No connection is reused inside a transaction, so no later user runs
//!   inside a stranger's transaction or waits on the write lock it holds.
//!   The store's own statements run on a pool that neither pings a
//!   connection before handing it out nor resets it when it comes back
//!   (each would be one more request to that connection's thread per
//!   statement): its transactions are sqlx's, rolled back when dropped
//!   unfinished, and the one request that opens a transaction itself (a
//!   completion batch) closes its connection unless it finished. The pool
//!   [`SqliteStore::pool`] hands to users (their own transactions, by hand)
//!   is a second one, which rolls back what a returned connection left
//!   open, and closes one whose transaction state sqlx and SQLite disagree
//!   on.
//! - Migrations run inside one `BEGIN IMMEDIATE` transaction, so processes
//!   migrating one file at the same moment apply each version once; opening
//!   retries a set-up that SQLite refused with an immediate `SQLITE_BUSY`.
//! - The store's own connections never checkpoint the WAL inside a commit;
//!   a task does it beside the writers (`checkpoint`).
//!
//! Modules by concern: `changes` (other processes' commits, noticed),
//! `checkpoint` (WAL checkpoints off the write path),
//! `writes` (insert, claim, complete, retry, fail,
//! release, progress), `admin` (inspect, cancel, retry failed, prune),
//! `events`, `deployed_types`, `due` (which types have due work,
//! multi-type claims), `history` (attempts and logs), `schedules`, `tx` (the primitives the shared policies run on:
//! guarded claims, rescue, guard answers) and `rows` (column reads).

mod admin;
mod changes;
mod checkpoint;
mod deployed_types;
mod due;
mod events;
mod history;
mod insert;
#[cfg(test)]
mod plans;
mod rows;
mod schedules;
mod tx;
mod writes;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};
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
use crate::job::{AddResult, HandlerEvent, Job, JobFilter, JobStatus, StatusCounts, TypeCounts};
use crate::schedule::ScheduleRecord;

/// The busy timeout every connection waits for the write lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A SQLite-backed store.
#[derive(Clone)]
pub struct SqliteStore {
    /// The store's own statements (see the module docs).
    own: SqlitePool,
    /// Handed to users by [`SqliteStore::pool`]; connects on first use.
    shared: SqlitePool,
    events: EventHub,
    /// Serializes this process's writers, so they queue here instead of in
    /// SQLite's sleeping busy handler (which starves one writer under load).
    /// Other processes still wait through the busy timeout. Counts writes,
    /// so the watch tells other processes' commits from ours.
    write: Arc<changes::WriteLock>,
    /// Publishes other processes' commits to subscribers.
    watch: Arc<changes::Watch>,
    /// Checkpoints the WAL beside this process's writers (the own pool's
    /// connections do not checkpoint in their commits).
    _checkpointer: Arc<checkpoint::Checkpointer>,
    /// The shared statements, spelled for SQLite.
    sql: Arc<Dialect>,
}

/// Whether SQLite answered `SQLITE_BUSY` (any extended variant).
fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| c & 0xff == 5),
        _ => false,
    }
}

/// Pool options for the store's own statements: a SQLite connection is a
/// file handle in this process, which cannot go stale while idle, so it is
/// handed out without a ping (sqlx's default pings each one, a round trip
/// to its thread per statement).
fn engine_pool_options() -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
}

/// Opens the store's own pool. Each connection switches the file to WAL: on
/// a file not yet in WAL mode that reads the header, then upgrades to a
/// write lock, and SQLite refuses a read-to-write upgrade at once
/// (`SQLITE_BUSY`, no busy handler) while another process holds the write
/// lock — as when hosts start together on a new file. Such a failure is
/// retried every 10 ms for up to the busy timeout; once the file is in WAL
/// mode the switch is a no-op.
async fn connect_pool(opts: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let res = engine_pool_options().connect_with(opts.clone()).await;
        match res {
            Err(e) if is_busy(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

/// Whether the file already holds exactly this build's migrations (one
/// read; any error answers `false`).
async fn schema_is_current(pool: &SqlitePool, migrator: &sqlx::migrate::Migrator) -> bool {
    match sqlx::query_as::<_, Applied>(&migrations::applied_query(""))
        .fetch_all(pool)
        .await
    {
        Ok(applied) => migrations::is_current(&applied, migrator),
        Err(_) => false,
    }
}

/// Readies a connection the pool takes back: rolls back a transaction
/// still open on it. `Ok(true)` keeps it for reuse; `Ok(false)` (sqlx still
/// counts a transaction SQLite no longer has) and an error close it.
async fn reset_on_release(conn: &mut SqliteConnection) -> Result<bool, sqlx::Error> {
    match sqlx::query("ROLLBACK").execute(&mut *conn).await {
        Ok(_) => {
            tracing::warn!("a SQLite connection came back to the pool inside a transaction; rolled it back before reuse");
        }
        Err(sqlx::Error::Database(e)) if e.message().contains("no transaction is active") => {}
        Err(e) => return Err(e),
    }
    Ok(!conn.is_in_transaction())
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` — a file path or
    /// a `sqlite://` URL. Does not migrate.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub async fn open(path: &str) -> Result<Self, StoreError> {
        let url = if path.starts_with("sqlite:") {
            path.to_string()
        } else {
            format!("sqlite://{path}")
        };
        let opts = SqliteConnectOptions::from_str(&url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(false);
        let own = connect_pool(
            opts.clone()
                .pragma("wal_autocheckpoint", checkpoint::AUTOCHECKPOINT_OFF),
        )
        .await?;
        let shared = SqlitePoolOptions::new()
            .max_connections(4)
            .after_release(|conn, _| Box::pin(reset_on_release(conn)))
            .connect_lazy_with(opts.clone());
        let events = EventHub::new(1024);
        let write = Arc::new(changes::WriteLock::default());
        let watch = Arc::new(changes::Watch::new(
            opts,
            events.clone(),
            Arc::clone(&write),
        ));
        let checkpointer = checkpoint::Checkpointer::start(own.clone(), Arc::clone(&write));
        Ok(Self {
            own,
            shared,
            events,
            write,
            watch,
            _checkpointer: Arc::new(checkpointer),
            sql: Arc::new(Dialect::sqlite()),
        })
    }

    /// Local events, plus [`StoreEvent::Changed`] for other processes'
    /// commits while anyone subscribes (see `changes`).
    fn subscribe_events(&self) -> broadcast::Receiver<StoreEvent> {
        let receiver = self.events.subscribe();
        self.watch.subscribed();
        receiver
    }

    /// [`SqliteStore::subscribe_events`] without `Finished`.
    fn subscribe_wakeup_events(&self) -> broadcast::Receiver<StoreEvent> {
        let receiver = self.events.subscribe_wakeups();
        self.watch.subscribed();
        receiver
    }

    /// A connection pool on the same file, for the caller's own statements
    /// and transactions (e.g. a transactional enqueue). A connection given
    /// back inside a transaction is rolled back before it is reused.
    pub fn pool(&self) -> &SqlitePool {
        &self.shared
    }

    fn notify(&self, ev: StoreEvent) {
        self.events.send(ev);
    }

    /// Rescued jobs wake waiters (failed) or dispatchers (requeued).
    fn notify_rescued(&self, jobs: &[Job]) {
        for j in jobs {
            if j.status == JobStatus::Failed {
                self.notify(StoreEvent::Finished(j.id.clone()));
            } else {
                self.notify(StoreEvent::Inserted(j.job_type.clone()));
            }
        }
    }
}

sql_job_store!(SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // SQLite has no advisory lock and sqlx's migrator takes none, so two
        // processes migrating a new file would both apply version 1 and one
        // would fail on `_sqlx_migrations`. The whole run happens inside one
        // `BEGIN IMMEDIATE` transaction instead (each migration becomes a
        // savepoint): the write lock is held from before the applied list is
        // read until the last migration commits, and a second process waits
        // through the busy timeout, then finds everything applied.
        //
        // A file already at this build's schema is recognised with a read
        // alone: commands that only read (`counts`, `jobs`) must not wait
        // for the write lock, which another process may hold for long (one
        // stopped by a debugger or SIGSTOP holds it until it resumes).
        let migrator = sqlx::migrate!("../../migrations/sqlite");
        if schema_is_current(&self.own, &migrator).await {
            return Ok(());
        }
        let _w = self.write.lock().await;
        let mut tx = self.own.begin_with("BEGIN IMMEDIATE").await?;
        migrator.run_direct(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        Ok(Utc::now())
    }

    async fn add_many(&self, jobs: Vec<InsertJob>) -> Result<Vec<AddResult>, StoreError> {
        writes::add_many(self, jobs).await
    }

    async fn add_in_tx(
        &self,
        conn: TxConn<'_>,
        jobs: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, StoreError> {
        match conn {
            TxConn::Sqlite(c) => insert::insert_all(c, &jobs).await,
            #[allow(unreachable_patterns)]
            _ => Err(StoreError::Unsupported(
                "this queue uses SQLite; enqueue through a SQLite transaction on the same file"
                    .into(),
            )),
        }
    }
});

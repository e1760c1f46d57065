//! The `JobStore` port: the only boundary between the engine and persistence.
//!
//! Methods are named after state changes and take params structs. Every
//! state change is one conditional write:
//! - claims are compare-and-set on `status = pending` (or batch claims that
//!   lock candidates, `FOR UPDATE SKIP LOCKED` / `BEGIN IMMEDIATE`);
//! - completions, retries, failures, releases, progress and renewals are
//!   fenced on the claim: `status = running AND lease_owner = worker AND
//!   attempts = the claim's attempt` (a [`ClaimRef`]), so a run whose lease
//!   expired cannot write over a later claim of the same job — not even one
//!   its own worker made;
//! - renewals are additionally fenced on an unexpired lease;
//! - the attempt a transition ends (complete, retry, fail, release, cancel
//!   of a running job, rescue) is recorded in the same transaction, read
//!   from the job row under the same fence (see [`crate::attempt`]); pruning
//!   deletes a job's attempts and logs with it.
//!
//! Only the implementations in this module's children contain SQL; the
//! engine and the facade call the port. The decisions every store makes
//! (guarded claims, rescue of expired leases, schedule reconcile) are
//! written once in `policy` and run inside each store's transaction over
//! primitive queries; a store only executes them. Three implementations
//! share one conformance suite (`tests/all/conformance/`):
//! [`memory::MemoryStore`], `sqlite::SqliteStore` (feature `sqlite`) and
//! `postgres::PostgresStore` (feature `postgres`).

mod claim_writes;
pub mod connect;
pub mod deployed_types;
pub mod due;
mod event_hub;
pub mod memory;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod migrations;
pub(crate) mod policy;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod schedules;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod traced;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

use crate::attempt::{Attempt, LogLine, LogQuery, StoredLogLine};
use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus};
use crate::handler::Scope;
use crate::job::{AddResult, HandlerEvent, Job, JobFilter, JobStatus, StatusCounts, TypeCounts};
use crate::schedule::ScheduleRecord;
pub use claim_writes::{
    ClaimRef, CompleteParams, Completed, FailParams, ReleaseParams, RenewParams, RetryParams,
};
use deployed_types::{DeployedTypeRecord, RecordDeployedTypes};
pub use due::{ClaimManyParams, DueTypes, TypeClaim};
use schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying migrations failed.
    #[error("migration failed: {0}; check the database user may create tables in the schema")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A store URL could not be understood.
    #[error("bad store url `{url}`: {reason}")]
    BadUrl {
        /// The URL with any password removed.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// A row held a value this version cannot read.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The referenced parent job does not exist.
    #[error("parent job `{0}` does not exist")]
    UnknownParent(String),
    /// The operation is not supported by this store.
    #[error("{0}")]
    Unsupported(String),
}

/// Notifications a store publishes to local subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreEvent {
    /// Jobs of this type were inserted (wake a dispatcher); an empty type
    /// means jobs of any type may have become due.
    Inserted(String),
    /// A job reached a terminal status (wake a waiter).
    Finished(String),
    /// Another process committed something the store could not name (a
    /// SQLite file shared by several processes): a waiter reads its job
    /// again, a dispatcher asks which types are due.
    Changed,
}

/// A caller's open transaction (or connection) to enqueue through. Its
/// variants follow the enabled backend features.
#[non_exhaustive]
pub enum TxConn<'a> {
    /// A SQLite connection, e.g. `&mut *tx` of a `sqlx::Transaction<Sqlite>`.
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut sqlx::SqliteConnection),
    /// A Postgres connection, e.g. `&mut *tx` of a `sqlx::Transaction<Postgres>`.
    #[cfg(feature = "postgres")]
    Postgres(&'a mut sqlx::PgConnection),
    /// No database backend is compiled in: there is no connection to pass.
    #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
    #[doc(hidden)]
    Unavailable(std::convert::Infallible, std::marker::PhantomData<&'a ()>),
}

#[cfg(feature = "sqlite")]
impl<'a> From<&'a mut sqlx::SqliteConnection> for TxConn<'a> {
    fn from(c: &'a mut sqlx::SqliteConnection) -> Self {
        Self::Sqlite(c)
    }
}

#[cfg(feature = "postgres")]
impl<'a> From<&'a mut sqlx::PgConnection> for TxConn<'a> {
    fn from(c: &'a mut sqlx::PgConnection) -> Self {
        Self::Postgres(c)
    }
}

/// A validated job ready for insertion. Times are resolved by the store
/// (with its clock) from `run_at`/`delay` and `expires_at`/`ttl`.
#[derive(Clone, Debug)]
pub struct InsertJob {
    /// New id (UUID v7).
    pub id: String,
    /// Job type.
    pub job_type: String,
    /// JSON object text.
    pub payload: String,
    /// Scope.
    pub scope: Option<Scope>,
    /// Dedupe key.
    pub dedupe_key: Option<String>,
    /// Attempt budget the producer chose (its own value, or its own
    /// manifest's); `None` takes the type's newest deploy's, see
    /// [`deployed_types`].
    pub max_attempts: Option<u32>,
    /// Attempt budget when neither the producer nor the type's newest
    /// deploy sets one.
    pub default_max_attempts: u32,
    /// Absolute due time, or `None` for the store's now.
    pub run_at: Option<DateTime<Utc>>,
    /// Added to the due time.
    pub delay: Duration,
    /// Priority.
    pub priority: i32,
    /// Absolute start deadline.
    pub expires_at: Option<DateTime<Utc>>,
    /// Relative start deadline (used when `expires_at` is `None`).
    pub ttl: Option<Duration>,
    /// Parent job.
    pub parent_id: Option<String>,
    /// Schedule.
    pub schedule_id: Option<String>,
    /// The producer's W3C trace context (checked).
    pub traceparent: Option<String>,
}

/// Claim up to `limit` due jobs of one type.
#[derive(Clone, Debug)]
pub struct ClaimParams {
    /// Lease owner.
    pub worker_id: String,
    /// Job type to claim.
    pub job_type: String,
    /// Most jobs to claim.
    pub limit: u32,
    /// Lease length from the store's now.
    pub lease: Duration,
    /// Recorded as the job's `handler_version`.
    pub handler_version: Option<String>,
    /// Guards the claim must honour.
    pub guards: ClaimGuards,
}

/// The result of a claim.
#[derive(Clone, Debug, Default)]
pub struct ClaimResult {
    /// Jobs now running under the caller's lease.
    pub claimed: Vec<Job>,
    /// Jobs that were due but whose `expires_at` passed: now `failed`.
    pub expired: Vec<Job>,
    /// When the claim admitted fewer jobs than it could because of a guard:
    /// what blocked it (the last candidate held back), for the dispatcher's
    /// pool reservation and starvation warnings.
    pub blocked_by: Option<Blocker>,
}

/// Which jobs to cancel.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum CancelTarget {
    /// These ids (pending or running).
    Ids(Vec<String>),
    /// Every live job of a scope; `include_running = false` leaves running ones.
    Scope {
        /// The scope.
        scope: Scope,
        /// Also cancel running jobs.
        include_running: bool,
    },
    /// Live jobs of `job_type` with one of these dedupe keys.
    DedupeKeys {
        /// The job type.
        job_type: String,
        /// The keys.
        keys: Vec<String>,
    },
}

/// Cancel live jobs. Children of cancelled jobs are cancelled too.
#[derive(Clone, Debug)]
pub struct CancelParams {
    /// Which jobs.
    pub target: CancelTarget,
    /// Stored as `last_error`.
    pub reason: String,
}

/// A job the cancel moved to `cancelled`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelledJob {
    /// Job id.
    pub id: String,
    /// Its type.
    pub job_type: String,
    /// Its scope.
    pub scope: Option<Scope>,
    /// Whether it was running (and so must be aborted where it runs).
    pub was_running: bool,
    /// Its attempts.
    pub attempts: u32,
}

/// Recover running jobs whose lease expired.
#[derive(Clone, Debug)]
pub struct RescueParams {
    /// Most rows to recover in one call.
    pub limit: u32,
}

/// Delete old terminal jobs.
#[derive(Clone, Debug)]
pub struct PruneParams {
    /// Only rows that finished before this instant.
    pub older_than: DateTime<Utc>,
    /// Statuses to delete; non-terminal ones are ignored.
    pub statuses: Vec<JobStatus>,
}

/// The port. See the module docs for the invariants every method keeps.
#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    /// `sqlite`, `postgres` or `memory`.
    fn backend(&self) -> &'static str;

    /// Applies this backend's migrations.
    ///
    /// # Errors
    /// The database refused a migration.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// The store's clock (the database's `now()` on Postgres).
    ///
    /// # Errors
    /// The database could not be reached.
    async fn now(&self) -> Result<DateTime<Utc>, StoreError>;

    /// Inserts jobs in one round trip; a live duplicate dedupe key returns
    /// the existing id with `deduplicated = true` (enforced by a partial
    /// unique index, never read-then-write).
    ///
    /// # Errors
    /// The write failed; nothing was inserted.
    async fn add_many(&self, jobs: Vec<InsertJob>) -> Result<Vec<AddResult>, StoreError>;

    /// Inserts jobs through the caller's own transaction on the same
    /// database, so they commit or roll back with the caller's writes.
    ///
    /// # Errors
    /// The connection belongs to another backend, or the write failed.
    async fn add_in_tx(
        &self,
        conn: TxConn<'_>,
        jobs: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, StoreError>;

    /// Claims due jobs of one type in priority, then `run_at` order; due
    /// jobs past `expires_at` become `failed` instead.
    ///
    /// # Locks and transactions
    /// One transaction; guarded claims lock guard rows in sorted key order.
    ///
    /// # Errors
    /// The database failed; nothing was claimed.
    async fn claim_batch(&self, params: ClaimParams) -> Result<ClaimResult, StoreError>;

    /// Claims due jobs of several unguarded types, each up to its own
    /// limit, in one statement where the backend allows it; the same order
    /// and expiry rules as [`JobStore::claim_batch`] within each type.
    ///
    /// # Errors
    /// The database failed; nothing was claimed.
    async fn claim_many(&self, params: ClaimManyParams) -> Result<ClaimResult, StoreError>;

    /// Of `job_types`, those with a pending job due now, and how long until
    /// the earliest pending job of the rest is due (one indexed statement).
    ///
    /// # Errors
    /// The database failed.
    async fn due_types(&self, job_types: &[String]) -> Result<DueTypes, StoreError>;

    /// Extends leases still held (running, owned by the claim, unexpired);
    /// returns the ids renewed. A missing id means the lease is lost.
    ///
    /// # Errors
    /// The database failed.
    async fn renew_leases(&self, params: RenewParams) -> Result<Vec<String>, StoreError>;

    /// Marks runs `succeeded`; returns the ids whose fence held.
    ///
    /// # Errors
    /// The database failed; no row changed.
    async fn complete(&self, params: CompleteParams) -> Result<Vec<String>, StoreError>;

    /// Schedules another attempt; `false` when the fence did not hold.
    ///
    /// # Errors
    /// The database failed.
    async fn retry(&self, params: RetryParams) -> Result<bool, StoreError>;

    /// Marks a run `failed`; `false` when the fence did not hold.
    ///
    /// # Errors
    /// The database failed.
    async fn fail(&self, params: FailParams) -> Result<bool, StoreError>;

    /// Releases runs (shutdown); returns how many rows changed.
    ///
    /// # Errors
    /// The database failed.
    async fn release(&self, params: ReleaseParams) -> Result<u64, StoreError>;

    /// Cancels live jobs (and their unfinished children).
    ///
    /// # Errors
    /// The database failed; nothing was cancelled.
    async fn cancel(&self, params: CancelParams) -> Result<Vec<CancelledJob>, StoreError>;

    /// Recovers expired leases: back to `pending`, or `failed` with a
    /// lease-expired error when attempts are exhausted. Returns the jobs as
    /// they are after the rescue.
    ///
    /// # Errors
    /// The database failed.
    async fn rescue(&self, params: RescueParams) -> Result<Vec<Job>, StoreError>;

    /// Of `claims`, the ids of those still `running` under `worker_id`'s
    /// lease at the claim's attempt (reconcile).
    ///
    /// # Errors
    /// The database failed.
    async fn still_owned(
        &self,
        worker_id: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<String>, StoreError>;

    /// Stores progress JSON of a running job still in `worker_id`'s
    /// `claim`; `false` when the fence did not hold.
    ///
    /// # Errors
    /// The database failed.
    async fn set_progress(
        &self,
        worker_id: &str,
        claim: &ClaimRef,
        json: &str,
    ) -> Result<bool, StoreError>;

    /// One job.
    ///
    /// # Errors
    /// The database failed.
    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError>;

    /// Jobs matching a filter in (`created_at`, `id`) order, oldest first
    /// (newest with `newest_first`), after the filter's cursor, then its
    /// offset; default limit 100. Each page reads only its own rows from
    /// an index, however deep it is, when paged by cursor.
    ///
    /// # Errors
    /// The database failed.
    async fn find(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError>;

    /// Number of jobs per status.
    ///
    /// # Errors
    /// The database failed.
    async fn count_by_status(&self) -> Result<StatusCounts, StoreError>;

    /// Per job type with unfinished jobs: how many are pending and due,
    /// pending and due later, and running — one grouped read, in type
    /// order.
    ///
    /// # Errors
    /// The database failed.
    async fn count_live_by_type(&self) -> Result<Vec<TypeCounts>, StoreError>;

    /// Failed jobs matching the filter back to `pending`, error cleared,
    /// with a fresh budget: `attempts` is kept (so attempt numbers, the
    /// history and the completion fence never repeat) and `max_attempts`
    /// grows by its own value (capped at `i32::MAX`). Without
    /// limit/offset: every match, oldest first; the filter's cursor and
    /// order are ignored.
    ///
    /// # Errors
    /// The database failed.
    async fn retry_failed(&self, filter: &JobFilter) -> Result<u64, StoreError>;

    /// Deletes terminal jobs finished before `older_than`.
    ///
    /// # Errors
    /// The database failed.
    async fn prune(&self, params: PruneParams) -> Result<u64, StoreError>;

    /// Appends a handler deploy event.
    ///
    /// # Errors
    /// The database failed.
    async fn record_handler_event(&self, event: HandlerEvent) -> Result<(), StoreError>;

    /// The most recent handler events, newest first.
    ///
    /// # Errors
    /// The database failed.
    async fn handler_events(&self, limit: u32) -> Result<Vec<HandlerEvent>, StoreError>;

    /// Per pool: summed cost of members holding live leases, and the rate
    /// spend of the open window (read-only; takes no guard lock). `pools`
    /// carry their member costs; the per-type `cost`/`rate_cost` are unused.
    ///
    /// # Errors
    /// The database failed.
    async fn pool_status(&self, pools: &[PoolGuard]) -> Result<Vec<PoolStatus>, StoreError>;

    /// Stores `owner`'s declared schedules: creates new ones, updates edited
    /// ones in place (new `next_run_at`), deletes the owner's undeclared ones.
    ///
    /// # Locks and transactions
    /// One transaction; reconciles of several hosts serialize.
    ///
    /// # Errors
    /// The database failed; nothing changed.
    async fn reconcile_schedules(
        &self,
        params: ReconcileSchedules,
    ) -> Result<ReconcileReport, StoreError>;

    /// Every stored schedule, by id.
    ///
    /// # Errors
    /// The database failed.
    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError>;

    /// Schedules whose `next_run_at` is at or before `now`, earliest first,
    /// at most `limit` (an index on `next_run_at` keeps this cheap however
    /// many schedules exist).
    ///
    /// # Errors
    /// The database failed.
    async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError>;

    /// Enqueues a due tick's job if `next_run_at` still equals the tick,
    /// moving it to the next tick in the same transaction. `None`: another
    /// host ran this tick (or the schedule is gone or was edited).
    ///
    /// # Errors
    /// The database failed; nothing changed.
    async fn fire_schedule(&self, params: FireSchedule) -> Result<Option<AddResult>, StoreError>;

    /// What would block a claim of `job` under `guards` right now (the
    /// claim's own predicate, read-only and without guard locks, so only a
    /// snapshot); `None` when the guards admit it. Ignores due time, flow
    /// children and per-host concurrency.
    ///
    /// # Errors
    /// The database failed.
    async fn blocked_by(
        &self,
        job: &Job,
        guards: &ClaimGuards,
    ) -> Result<Option<Blocker>, StoreError>;

    /// Local notifications (inserts, terminal transitions). Postgres also
    /// relays other processes' inserts and completions via LISTEN/NOTIFY;
    /// SQLite tells of other processes' commits with
    /// [`StoreEvent::Changed`] while anyone subscribes.
    fn subscribe(&self) -> broadcast::Receiver<StoreEvent>;

    /// The events of [`JobStore::subscribe`] that can make a job due:
    /// every one but [`StoreEvent::Finished`], so that a flood of
    /// completions never makes a dispatcher's receiver lag. A store that
    /// keeps one channel answers all of its events.
    fn subscribe_wakeups(&self) -> broadcast::Receiver<StoreEvent> {
        self.subscribe()
    }

    /// Makes `host`'s deployed-type rows exactly `params.types` and
    /// forgets rows not seen for `forget_after` (see [`deployed_types`]).
    ///
    /// # Locks and transactions
    /// One transaction.
    ///
    /// # Errors
    /// The database failed; nothing changed.
    async fn record_deployed_types(&self, params: RecordDeployedTypes) -> Result<(), StoreError>;

    /// Every deployed-type row, by job type then host.
    ///
    /// # Errors
    /// The database failed.
    async fn deployed_types(&self) -> Result<Vec<DeployedTypeRecord>, StoreError>;

    /// The finished attempts of job `job_id`, oldest first (the running one
    /// and an expiry are derived from the job row, see
    /// [`crate::attempt::derived_attempt`]).
    ///
    /// # Errors
    /// The database failed.
    async fn attempts(&self, job_id: &str) -> Result<Vec<Attempt>, StoreError>;

    /// Stores log lines of running jobs in one write (not fenced: a line
    /// belongs to its attempt whatever became of the lease).
    ///
    /// # Errors
    /// The database failed; nothing was stored.
    async fn append_logs(&self, lines: Vec<LogLine>) -> Result<(), StoreError>;

    /// Stored log lines of a job, in the order they were stored.
    ///
    /// # Errors
    /// The database failed.
    async fn logs(&self, query: &LogQuery) -> Result<Vec<StoredLogLine>, StoreError>;
}

pub use policy::rescue::{LEASE_EXPIRED_ERROR, LEASE_RECOVERED_ERROR};

/// The error stored on a job whose start deadline passed.
pub const EXPIRED_ERROR: &str = "expired: the job was not started before its expires_at";

/// The `error_code` stored with [`EXPIRED_ERROR`], so dashboards and
/// `jobs --status failed` can tell expiry from handler failures.
pub const EXPIRED_CODE: &str = "expired";

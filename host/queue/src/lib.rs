//! boxcar-queue: the durable job queue core. No wasmtime.
//!
//! What an embedder uses is re-exported here:
//! - producing and administering: [`Queue`] (enqueue, inspect, cancel,
//!   wait, retry, prune) over a [`JobStore`] from [`connect`] /
//!   [`open_store`], with [`NewJob`], [`Job`], [`JobFilter`] and
//!   [`QueueOptions`];
//! - running handlers: [`Registry`] of [`Handler`]s with
//!   [`HandlerSettings`] and [`PoolConfig`]s, started by [`Worker::start`]
//!   with [`WorkerOptions`]; [`LifecycleObserver`]s see every transition;
//! - guards and visibility: [`ClaimGuards`], [`Blocker`] (what holds a job
//!   back), [`PoolStatus`];
//! - what each run was and what it logged: [`attempt`] ([`Attempt`],
//!   [`LogLine`]), measured through a [`RunRecord`] a handler fills;
//! - whether a run's lease is still provably held, for a handler to stop
//!   its guest at once when it is not: [`LeaseClock`];
//! - debugging a stored job: [`replay`] runs it once on a given handler
//!   and writes nothing;
//! - a producer's W3C trace context carried by a job: [`trace_context`];
//! - recurring jobs: [`schedule`] and [`Scheduler`];
//! - which types are known and their job defaults, from store state:
//!   [`deployed`];
//! - what this process measured of the queue's work, for `/metrics`:
//!   [`metrics`];
//! - limits on what enters the queue: [`bounds`] (duration caps,
//!   [`EnqueueBounds`] for a running job's enqueues), the error codes of
//!   refused handler answers ([`INVALID_OUTPUT`], [`UNSTORABLE_OUTCOME`])
//!   and where a running job's dedupe keys live ([`guest_dedupe_key`]);
//! - the store port and its implementations: [`store`] (params, the
//!   memory store, and — per cargo feature `sqlite` / `postgres`, both on
//!   by default — the SQLite and Postgres stores).
//!
//! Everything else (the dispatcher, retry arithmetic, the observer hub,
//! the decision policies the stores share) is private. The benchmark
//! workloads behind `boxcar bench` live in the hidden [`bench`] module;
//! test doubles for other crates' tests in `testing` (feature `test-util`).
//!
//! Delivery is at least once: a job can run more than once (worker crash,
//! partition past the lease, kill between finishing and recording). Dedupe
//! keys prevent duplicate *enqueues*, not duplicate execution — write
//! handlers to be idempotent.

pub mod attempt;
#[doc(hidden)]
pub mod bench;
pub mod bounds;
mod clock;
mod cursor;
pub mod deployed;
mod engine;
mod guards;
mod handler;
mod inflight;
mod job;
mod lease_clock;
pub mod metrics;
mod observer;
mod options;
mod queue;
mod registry;
mod run_record;
pub mod schedule;
pub mod store;
#[cfg(feature = "test-util")]
pub mod testing;
mod time;
pub mod trace_context;
mod validate;

pub use attempt::{Attempt, AttemptOutcome, AttemptUsage, LogLine, LogQuery, StoredLogLine};
pub use bounds::EnqueueBounds;
pub use clock::{Clock, ManualClock, SystemClock};
pub use cursor::{InvalidCursor, JobCursor};
#[doc(hidden)]
pub use engine::fuzzing;
pub use engine::{
    guest_dedupe_key, replay, DryEnqueue, FiredTick, Maintenance, Replay, ReplayRequest, Scheduler,
    SchedulerHandle, Worker, WorkerHandle, INVALID_OUTPUT, RUN_SPAN_TARGET, UNSTORABLE_OUTCOME,
};
pub use guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus};
pub use handler::{
    ChildJobRequest, ChildSummary, Handler, JobContext, JobRun, JobServices, LimitKind, Outcome,
    Scope, ServiceError,
};
pub use job::{
    AddResult, HandlerEvent, HandlerEventKind, Job, JobFilter, JobStatus, NewJob, StatusCounts,
    TypeCounts, UnknownStatus,
};
pub use lease_clock::LeaseClock;
pub use observer::{LifecycleEvent, LifecycleObserver, LifecycleOutcome};
pub use options::{OptionsError, QueueOptions, RetentionPolicy, WorkerOptions};
pub use queue::{Queue, QueueError, WaitError};
pub use registry::{
    HandlerEntry, HandlerSettings, PayloadValidator, PoolConfig, Registry, RegistryError,
    SchemaFailure,
};
pub use run_record::RunRecord;
pub use store::connect::{connect, open_store};
pub use store::{JobStore, StoreError, TxConn};
pub use time::far_future;
pub use trace_context::{InvalidTraceparent, TraceParent};
pub use validate::{EnqueueError, PayloadLimits};

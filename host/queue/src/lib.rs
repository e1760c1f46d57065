//! boxcar-queue: the durable job queue core. No wasmtime.
//!
//! - [`Queue`]: enqueue, inspect, cancel, wait, administer (producers).
//! - [`connect`] / [`open_store`]: a [`JobStore`] from a URL.
//! - [`Registry`] + [`Worker::start`]: run registered [`Handler`]s.
//! - [`bench`]: the drain and latency benchmarks.
//!
//! Delivery is at least once: a job can run more than once (worker crash,
//! partition past the lease, kill between finishing and recording). Dedupe
//! keys prevent duplicate *enqueues*, not duplicate execution — write
//! handlers to be idempotent.
pub mod bench;
pub mod bounds;
pub mod clock;
pub mod engine;
pub mod guards;
pub mod handler;
mod inflight;
pub mod job;
pub mod observer;
pub mod options;
pub mod queue;
pub mod registry;
pub mod schedule;
pub mod store;
pub mod validate;

pub use bounds::EnqueueBounds;
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{FiredTick, Maintenance, Scheduler, SchedulerHandle, Worker, WorkerHandle};
pub use guards::{ClaimGuards, PoolGuard, PoolStatus};
pub use handler::*;
pub use job::{
    AddResult, HandlerEvent, HandlerEventKind, Job, JobFilter, JobStatus, NewJob, StatusCounts,
};
pub use observer::{LifecycleEvent, LifecycleObserver, LifecycleOutcome};
pub use options::{OptionsError, QueueOptions, RetentionPolicy, WorkerOptions};
pub use queue::{Queue, QueueError, WaitError};
pub use registry::{
    HandlerEntry, HandlerSettings, PayloadValidator, PoolConfig, Registry, RegistryError,
    SchemaFailure,
};
pub use store::connect::{connect, open_store};
pub use store::{JobStore, StoreError, TxConn};
pub use validate::{EnqueueError, PayloadLimits};

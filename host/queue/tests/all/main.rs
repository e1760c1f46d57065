//! The one integration test binary of boxcar-queue.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod support;

mod admin;
mod bench_scale;
mod boundary;
mod claim_ahead;
mod conformance;
mod deployed;
mod engine;
mod fairness;
mod first_renewal;
mod many_types;
mod metrics;
mod migrate;
mod model;
mod multiprocess;
mod pg_pool;
mod pg_wakeups;
mod replay;
mod schedules;
mod single_insert;
mod sqlite_checkpoint;
mod sqlite_pool;
mod sqlite_watch;
mod succeeded_on_row;
mod trace_context;
mod traced;
mod tracing_capture;

//! The one integration test binary of boxcar-queue.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod support;

mod admin;
mod boundary;
mod conformance;
mod deployed;
mod engine;
mod fairness;
mod many_types;
mod migrate;
mod model;
mod multiprocess;
mod schedules;
mod sqlite_pool;
mod trace_context;
mod traced;

//! boxcar-queue: the durable job queue core. No wasmtime.
pub mod handler;

pub use handler::*;

//! boxcar-sandbox: runs handler components in wasmtime with hard limits.
//!
//! - [`Sandbox`] owns the process's one wasmtime `Engine` (component model,
//!   epoch interruption, optional pooling allocator and fuel), its epoch
//!   ticker, the linker, and the on-disk compile cache.
//! - [`Sandbox::load`] turns component bytes into a [`LoadedHandler`]:
//!   compiled once (cached by digest + engine settings), checked against the
//!   `boxcar:handler/handler` world, linked once into an `InstancePre`.
//! - [`LoadedHandler::run`] runs one job in a fresh store and returns an
//!   [`Outcome`]. Deadlines and cancellation are enforced with epoch
//!   interruption, memory/table/instance caps with a resource limiter (one
//!   memory cap per job, summed over all its linear memories), and
//!   log/progress/result/enqueue sizes in the host interface. WASI grants
//!   clocks and random, plus only what the handler's [`Capabilities`] name
//!   (outbound HTTP to listed origins — never to an internal address the
//!   list does not name —, preopened directories, a per-job
//!   scratch `/tmp`, environment variables); stdout/stderr go to the job's
//!   bounded log.
//! - [`Sandbox::reserve_instances`] gives each handler its share of the
//!   instance pool; a job that still finds the pool full is handed back to
//!   the queue without using an attempt.
//! - [`LoadedHandler`] implements the queue's
//!   [`Handler`](boxcar_queue::Handler) trait (version = module digest).
//!
//! Running a job never returns an error: every ending is an [`Outcome`].

mod bindings;
mod budget;
mod cache;
mod config;
mod connect;
mod egress;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod host_impl;
mod http;
mod loaded_handler;
mod module_bytes;
mod output;
mod precompile;
mod sandbox;
mod scratch;
mod shared;
mod state;
mod ticker;
mod tree;

pub use boxcar_queue::{LimitKind, Outcome};
pub use budget::InstanceReservation;
pub use config::{
    Capabilities, DirGrant, DirMode, HandlerLimits, SandboxConfig, ScratchMode, SCRATCH_GUEST_PATH,
};
pub use egress::internal_address;
pub use error::SandboxError;
pub use http::HttpOrigin;
pub use loaded_handler::{LoadReport, LoadedHandler};
pub use module_bytes::ModuleBytes;
pub use precompile::{precompile, CodegenSettings};
pub use sandbox::{Compiler, PoolResidency, Sandbox};

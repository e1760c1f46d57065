//! Per-job store data ([`HostState`]) and the resource limiter.
//!
//! Invariants: one `HostState` per job, inside a fresh `Store`, dropped with
//! it; its WASI context grants clocks and random, stdio to the job's
//! [`LogSink`], and only what the handler's `Capabilities` name (env,
//! preopened directories, scratch); `wasi:http` goes through the job's
//! [`HttpPolicy`]. Any bound a guest breaks is recorded in `violation` so the
//! run ends with that outcome rather than a generic trap.

use std::{sync::Arc, time::Instant};

use boxcar_queue::{JobServices, LimitKind, Outcome};
use tokio_util::sync::CancellationToken;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::{http::HttpPolicy, output::LogSink, HandlerLimits};

/// Store data of one job.
pub(crate) struct HostState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) log: Arc<LogSink>,
    pub(crate) services: Arc<dyn JobServices>,
    pub(crate) limits: Arc<HandlerLimits>,
    pub(crate) cancel: CancellationToken,
    pub(crate) deadline: Instant,
    pub(crate) enqueues: u32,
    pub(crate) http: WasiHttpCtx,
    pub(crate) http_policy: HttpPolicy,
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_policy,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Why the epoch callback stopped the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Interrupt {
    #[error("the job's deadline passed")]
    TimedOut,
    #[error("the job was cancelled")]
    Cancelled,
}

/// A store limit the guest hit.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0:?}")]
pub(crate) struct LimitHit(pub(crate) Outcome);

/// Memory, table and instance caps; records the first violation.
pub(crate) struct Limiter {
    pub(crate) memory: usize,
    pub(crate) table_elements: usize,
    pub(crate) tables: usize,
    pub(crate) instances: usize,
    pub(crate) violation: Option<Outcome>,
}

impl Limiter {
    pub(crate) fn new(limits: &HandlerLimits) -> Self {
        Self {
            memory: usize::try_from(limits.memory).unwrap_or(usize::MAX),
            table_elements: limits.table_elements,
            tables: limits.tables,
            instances: limits.instances,
            violation: None,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory || maximum.is_some_and(|m| desired > m) {
            self.violation.get_or_insert(Outcome::OutOfMemory);
            return Err(wasmtime::Error::new(LimitHit(Outcome::OutOfMemory)));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements || maximum.is_some_and(|m| desired > m) {
            let outcome = Outcome::LimitExceeded {
                which: LimitKind::Tables,
                detail: format!(
                    "a table grew from {current} to {desired} elements; the limit is {}",
                    self.table_elements
                ),
            };
            self.violation.get_or_insert(outcome.clone());
            return Err(wasmtime::Error::new(LimitHit(outcome)));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.instances
    }
}

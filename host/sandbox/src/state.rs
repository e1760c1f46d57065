//! Per-job store data ([`HostState`]) and the resource limiter.
//!
//! Invariants: one `HostState` per job, inside a fresh `Store`, dropped with
//! it; its WASI context grants clocks and random, stdio to the job's
//! [`LogSink`], and only what the handler's `Capabilities` name (env,
//! preopened directories, scratch); `wasi:http` goes through the job's
//! [`HttpPolicy`]. Any bound a guest breaks is recorded in `violation` so the
//! run ends with that outcome rather than a generic trap.

use std::{sync::Arc, time::Instant};

use boxcar_queue::{JobServices, LeaseClock, LimitKind, Outcome, RunRecord};
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
    /// The run's lease: guest code stops once it can no longer be proved.
    pub(crate) lease: LeaseClock,
    pub(crate) deadline: Instant,
    pub(crate) enqueues: u32,
    pub(crate) http: WasiHttpCtx,
    pub(crate) http_policy: HttpPolicy,
}

impl HostState {
    /// True once the guest must stop: cancelled, or its lease lapsed.
    pub(crate) fn must_stop(&self) -> bool {
        self.cancel.is_cancelled() || self.lease.has_lapsed()
    }
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

/// Memory, table and instance caps of one job; records the first violation.
///
/// Memory and table elements are capped per job: the sum over every
/// linear memory (and every table) the job's instances create, counted from
/// each one's initial size, so a component cannot multiply its cap by
/// holding many memories. A growth the limiter allowed but the engine then
/// failed is taken back.
pub(crate) struct Limiter {
    /// Cap on the sum of all linear memories, in bytes.
    pub(crate) memory: usize,
    /// Bytes of linear memory the job holds now.
    pub(crate) memory_used: usize,
    /// The last growth allowed, as (from, to), until the next one.
    memory_last: (usize, usize),
    /// Cap on the sum of all tables' elements.
    pub(crate) table_elements: usize,
    /// Table elements the job holds now.
    table_used: usize,
    table_last: (usize, usize),
    pub(crate) tables: usize,
    pub(crate) instances: usize,
    pub(crate) memories: usize,
    pub(crate) violation: Option<Outcome>,
    /// Where the high-water mark of `memory_used` is reported.
    record: Arc<RunRecord>,
}

impl Limiter {
    pub(crate) fn new(limits: &HandlerLimits, memories: usize, record: Arc<RunRecord>) -> Self {
        Self {
            memory: usize::try_from(limits.memory).unwrap_or(usize::MAX),
            memory_used: 0,
            memory_last: (0, 0),
            table_elements: limits.table_elements,
            table_used: 0,
            table_last: (0, 0),
            tables: limits.tables,
            instances: limits.instances,
            memories,
            violation: None,
            record,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self
            .memory_used
            .saturating_sub(current)
            .saturating_add(desired);
        if total > self.memory || maximum.is_some_and(|m| desired > m) {
            self.violation.get_or_insert(Outcome::OutOfMemory);
            return Err(wasmtime::Error::new(LimitHit(Outcome::OutOfMemory)));
        }
        self.memory_used = total;
        self.memory_last = (current, desired);
        self.record
            .note_memory(u64::try_from(total).unwrap_or(u64::MAX));
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        let (from, to) = std::mem::take(&mut self.memory_last);
        self.memory_used = self.memory_used.saturating_sub(to).saturating_add(from);
        Ok(())
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self
            .table_used
            .saturating_sub(current)
            .saturating_add(desired);
        if total > self.table_elements || maximum.is_some_and(|m| desired > m) {
            let outcome = Outcome::LimitExceeded {
                which: LimitKind::Tables,
                detail: format!(
                    "a table grew from {current} to {desired} elements, {total} in all the job's tables; the limit is {}",
                    self.table_elements
                ),
            };
            self.violation.get_or_insert(outcome.clone());
            return Err(wasmtime::Error::new(LimitHit(outcome)));
        }
        self.table_used = total;
        self.table_last = (current, desired);
        Ok(true)
    }

    fn table_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        let (from, to) = std::mem::take(&mut self.table_last);
        self.table_used = self.table_used.saturating_sub(to).saturating_add(from);
        Ok(())
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

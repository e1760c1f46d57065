//! Engine state shared by the [`Sandbox`](crate::Sandbox) and every handler
//! loaded from it: the wasmtime engine, the linker, the validated
//! configuration, the scratch root, counters, the instance-pool budget and
//! the epoch ticker.
//!
//! Invariant: the ticker lives as long as this state, so it stops only when
//! the sandbox and every loaded handler are dropped; it advances the epoch
//! only while some run holds [`Shared::ticking`].

use std::{
    path::PathBuf,
    sync::{atomic::AtomicU64, Arc},
};

use wasmtime::{component::Linker, Engine};

use crate::{
    budget::PoolBudget,
    scratch,
    state::HostState,
    ticker::{Ticker, Ticking},
    SandboxConfig,
};

/// Engine state shared by the sandbox and its loaded handlers.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) config: SandboxConfig,
    pub(crate) scratch_root: PathBuf,
    pub(crate) scratch_kind: scratch::Kind,
    pub(crate) engine_key: String,
    pub(crate) compiles: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) budget: Arc<PoolBudget>,
    pub(crate) ticker: Option<Ticker>,
}

impl Shared {
    /// The directory per-job scratch directories are created in.
    pub(crate) fn scratch_base(&self) -> PathBuf {
        self.scratch_root.clone()
    }

    /// Keeps the epoch advancing while the guard lives (`None` without
    /// epoch interruption): held by every run that may execute guest code.
    pub(crate) fn ticking(&self) -> Option<Ticking> {
        self.ticker.as_ref().map(Ticker::ticking)
    }
}

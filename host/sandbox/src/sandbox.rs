//! [`Sandbox`]: the one wasmtime `Engine` of a process, its epoch ticker, the
//! WASI + host linker (built once) and loading of handler components.
//!
//! Invariants:
//! - Configuration is validated once, in [`Sandbox::new`].
//! - The ticker lives as long as the engine state: it stops when the
//!   sandbox *and* every handler loaded from it are dropped.
//! - A handler is compiled once (or loaded from the on-disk cache), checked
//!   against the `handler` world and linked once into an `InstancePre`;
//!   running a job only instantiates.
//! - The linker holds WASI p2 and `wasi:http` for every handler; what a
//!   handler may actually reach is decided per handler by its
//!   [`Capabilities`] (validated at load), never by the linker.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Instant,
};

use wasmtime::{
    component::{Component, HasSelf, Linker},
    Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

use crate::{
    bindings::{Handler as HandlerWorld, HandlerPre},
    budget::{InstanceReservation, PoolBudget},
    cache,
    loaded_handler::{LoadReport, LoadedHandler},
    module_bytes, scratch,
    shared::Shared,
    state::HostState,
    ticker::Ticker,
    Capabilities, HandlerLimits, ModuleBytes, SandboxConfig, SandboxError, ScratchMode,
};

/// Turns component bytes into an artifact of [`precompile`](crate::precompile)
/// (see [`Sandbox::load_compiled_by`]).
pub type Compiler<'a> = dyn Fn(&[u8]) -> Result<Vec<u8>, SandboxError> + 'a;

/// Runs handler components; one per process.
///
/// ```no_run
/// # async fn demo(bytes: Vec<u8>, job: boxcar_queue::JobRun, ctx: boxcar_queue::JobContext)
/// # -> Result<(), boxcar_sandbox::SandboxError> {
/// use boxcar_sandbox::{Capabilities, HandlerLimits, Sandbox, SandboxConfig};
///
/// let sandbox = Sandbox::new(SandboxConfig {
///     cache_dir: Some("/var/cache/boxcar".into()),
///     ..SandboxConfig::default()
/// })?;
/// // CPU-heavy on a cache miss: call from spawn_blocking in async code.
/// let handler = sandbox.load(&bytes, HandlerLimits::default(), Capabilities::default())?;
/// let outcome = handler.run(job, ctx).await;
/// # let _ = outcome; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sandbox {
    shared: Arc<Shared>,
}

impl Sandbox {
    /// Validates `config`, creates the scratch root and resolves
    /// [`ScratchMode::Auto`] (by mounting a tiny tmpfs once), builds the
    /// engine and linker, starts the ticker.
    ///
    /// # Errors
    /// [`SandboxError::Config`] for an invalid field or when
    /// [`ScratchMode::Tmpfs`] cannot mount, [`SandboxError::Engine`]
    /// when wasmtime refuses the settings (e.g. the pool cannot be reserved).
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        config.validate()?;
        let (scratch_root, scratch_kind) = scratch::resolve(
            config
                .scratch_dir
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("boxcar-scratch")),
            config.scratch_mode,
        )?;
        let engine_err = |e: wasmtime::Error| SandboxError::Engine(format!("{e:#}"));
        let mut wc = crate::precompile::engine_config(&config.codegen());
        if config.pooling {
            // Every pool slot can hold one job's share, and no component may
            // hold more than that share: a job cannot take what other jobs'
            // slots were sized for.
            let n = config.pool_instances;
            let mut pool = PoolingAllocationConfig::new();
            pool.total_component_instances(n)
                .max_core_instances_per_component(config.job_instances)
                .max_memories_per_component(config.job_memories)
                .max_tables_per_component(config.job_tables)
                .total_core_instances(n.saturating_mul(config.job_instances))
                .total_memories(n.saturating_mul(config.job_memories))
                .total_tables(n.saturating_mul(config.job_tables))
                .total_stacks(n)
                .max_memory_size(usize::try_from(config.max_memory).unwrap_or(usize::MAX))
                // Reset the pages a job dirtied in place instead of
                // unmapping them: with PAGEMAP_SCAN (Linux 6.7+) only the
                // dirty pages are copied back, and the next job in the slot
                // takes no page faults on them.
                .linear_memory_keep_resident(config.memory_keep_resident)
                .table_keep_resident(64 << 10)
                .async_stack_keep_resident(128 << 10)
                .pagemap_scan(wasmtime::Enabled::Auto)
                // What a job dirtied past `keep_resident` goes back to the
                // system when the job ends, not after a batch of later
                // jobs: a guest that filled 1 GiB does not keep it resident.
                .decommit_batch_size(1)
                // Idle slots keep memory resident; bound how many stay warm
                // so that the idle total does not grow with every module
                // deployed or every slot ever used.
                .max_unused_warm_slots(config.warm_slots);
            wc.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            // A finished job's stack is zeroed up to the 128 KiB kept
            // resident and the rest given back: a deep recursion does not
            // leave its pages resident in the slot, and no job's stack
            // bytes reach the next guest that uses the slot.
            wc.async_stack_zeroing(true);
        }
        let engine = Engine::new(&wc).map_err(engine_err)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_err)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_err)?;
        HandlerWorld::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(engine_err)?;
        let ticker = if config.epoch_interruption {
            Some(
                Ticker::start(engine.clone(), config.epoch_tick).map_err(|e| {
                    SandboxError::Engine(format!("cannot start the epoch ticker thread: {e}"))
                })?,
            )
        } else {
            None
        };
        Ok(Self {
            shared: Arc::new(Shared {
                engine_key: cache::engine_key(&engine),
                budget: Arc::new(PoolBudget::new(
                    config.pooling.then_some(config.pool_instances),
                )),
                engine,
                linker,
                config,
                scratch_root,
                scratch_kind,
                compiles: AtomicU64::new(0),
                cache_hits: AtomicU64::new(0),
                ticker,
            }),
        })
    }

    /// The validated configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.shared.config
    }

    /// The directory per-job scratch directories are created in.
    pub fn scratch_root(&self) -> PathBuf {
        self.shared.scratch_base()
    }

    /// How scratch caps are enforced on this host: [`ScratchMode::Tmpfs`]
    /// or [`ScratchMode::Directory`] (`Auto` is resolved when the sandbox
    /// is built).
    pub fn scratch_mode(&self) -> ScratchMode {
        self.shared.scratch_kind.mode()
    }

    /// Components compiled from scratch since the sandbox was built.
    pub fn compiles(&self) -> u64 {
        self.shared.compiles.load(Ordering::Relaxed)
    }

    /// Loads served from the on-disk cache since the sandbox was built.
    pub fn cache_hits(&self) -> u64 {
        self.shared.cache_hits.load(Ordering::Relaxed)
    }

    /// What the pool's idle slots hold, or `None` without `pooling`.
    pub fn pool_residency(&self) -> Option<PoolResidency> {
        let metrics = self.shared.engine.pooling_allocator_metrics()?;
        Some(PoolResidency {
            warm_memories: metrics.unused_warm_memories(),
            memory_bytes: metrics.unused_memory_bytes_resident(),
            warm_tables: metrics.unused_warm_tables(),
            table_bytes: metrics.unused_table_bytes_resident(),
            warm_stacks: metrics.unused_warm_stacks(),
            stack_bytes: metrics.unused_stack_bytes_resident().unwrap_or(0),
        })
    }

    /// Reserves pool instances for the handler called `handler`: the most
    /// jobs it may run at once, `concurrency` for each of its `job_types`
    /// job types. Replaces what it reserved before. Call it before the
    /// handler takes jobs, and [`InstanceReservation::keep`] the result once
    /// it does; with pooling, all reservations together must fit in
    /// `pool_instances`.
    ///
    /// # Errors
    /// [`SandboxError::PoolFull`] (nothing changes) when the other handlers'
    /// reservations leave too few instances free.
    pub fn reserve_instances(
        &self,
        handler: &str,
        concurrency: usize,
        job_types: usize,
    ) -> Result<InstanceReservation, SandboxError> {
        let instances = u32::try_from(concurrency.saturating_mul(job_types)).unwrap_or(u32::MAX);
        let previous = self.shared.budget.reserve(handler, instances)?;
        Ok(InstanceReservation::new(
            Arc::clone(&self.shared.budget),
            handler,
            previous,
        ))
    }

    /// Frees the reservation of `handler` (when it is undeployed).
    pub fn release_instances(&self, handler: &str) {
        self.shared.budget.release(handler);
    }

    /// Pool instances reserved by all handlers.
    pub fn reserved_instances(&self) -> u64 {
        self.shared.budget.reserved()
    }

    /// Compiles (or loads from cache) and links a handler component.
    /// Blocking and CPU-heavy on a cache miss.
    ///
    /// # Errors
    /// [`SandboxError::Limits`] for invalid limits,
    /// [`SandboxError::Capabilities`] for an unusable grant (e.g. a missing
    /// directory), [`SandboxError::Compile`]
    /// when the bytes are not a component, [`SandboxError::PoolShare`] when
    /// it holds more instances, memories or tables than one job's share of
    /// the pool, [`SandboxError::World`] when it
    /// does not implement `boxcar:handler/handler` or imports something the
    /// host does not provide.
    pub fn load(
        &self,
        bytes: &[u8],
        limits: HandlerLimits,
        caps: Capabilities,
    ) -> Result<Arc<LoadedHandler>, SandboxError> {
        self.load_with_report(bytes, limits, caps).map(|(h, _)| h)
    }

    /// [`Sandbox::load`], also telling how the compile went.
    ///
    /// # Errors
    /// As [`Sandbox::load`].
    pub fn load_with_report(
        &self,
        bytes: &[u8],
        limits: HandlerLimits,
        caps: Capabilities,
    ) -> Result<(Arc<LoadedHandler>, LoadReport), SandboxError> {
        self.load_inner(bytes, &module_bytes::digest(bytes), limits, caps, None)
    }

    /// [`Sandbox::load_with_report`] of bytes already hashed, and a cache
    /// miss is compiled by `compile` — typically
    /// [`precompile`](crate::precompile) in a separate process with memory
    /// and time limits — and its artifact loaded here.
    ///
    /// Trust: loading an artifact runs native code. `compile` must return
    /// what [`precompile`](crate::precompile) made with this sandbox's
    /// [`SandboxConfig::codegen`] settings, written where only the host can
    /// write (like the compile cache). wasmtime refuses an artifact of other
    /// settings or another version.
    ///
    /// # Errors
    /// As [`Sandbox::load`], plus whatever `compile` returns, and
    /// [`SandboxError::Compile`] when the artifact does not load.
    pub fn load_compiled_by(
        &self,
        module: &ModuleBytes,
        limits: HandlerLimits,
        caps: Capabilities,
        compile: &Compiler<'_>,
    ) -> Result<(Arc<LoadedHandler>, LoadReport), SandboxError> {
        self.load_inner(module.bytes(), module.digest(), limits, caps, Some(compile))
    }

    /// Loads the handler of module `digest` (hex sha256) from the compile
    /// cache alone, for a version whose module file is gone (replaying a
    /// job run by an older deploy). `Ok(None)` when caching is off or the
    /// cache holds no entry for it under this engine's settings.
    ///
    /// # Errors
    /// As [`Sandbox::load`]; [`SandboxError::Compile`] when the entry does
    /// not load (there are no bytes to compile it again from).
    pub fn load_cached(
        &self,
        digest: &str,
        limits: HandlerLimits,
        caps: Capabilities,
    ) -> Result<Option<Arc<LoadedHandler>>, SandboxError> {
        let Some(dir) = &self.shared.config.cache_dir else {
            return Ok(None);
        };
        if !cache::entry(dir, digest, &self.shared.engine_key).is_file() {
            return Ok(None);
        }
        let unusable = |_: &[u8]| -> Result<Vec<u8>, SandboxError> {
            Err(SandboxError::Compile(format!(
                "the compile cache's entry for sha256 {digest} does not load, and without the module there is nothing to compile"
            )))
        };
        self.load_inner(&[], digest, limits, caps, Some(&unusable))
            .map(|(handler, _)| Some(handler))
    }

    fn load_inner(
        &self,
        bytes: &[u8],
        digest: &str,
        limits: HandlerLimits,
        caps: Capabilities,
        compile: Option<&Compiler<'_>>,
    ) -> Result<(Arc<LoadedHandler>, LoadReport), SandboxError> {
        let shared = &self.shared;
        limits.validate(&shared.config)?;
        caps.validate()?;
        if caps.scratch.is_some() {
            let base = shared.scratch_base();
            std::fs::create_dir_all(&base).map_err(|e| {
                SandboxError::Capabilities(format!(
                    "scratch: cannot create the scratch base directory {} ({e}); set SandboxConfig::scratch_dir to a writable directory",
                    base.display()
                ))
            })?;
        }
        let digest = digest.to_string();
        let started = Instant::now();
        let cache_path = shared
            .config
            .cache_dir
            .as_ref()
            .map(|dir| (dir.clone(), cache::entry(dir, &digest, &shared.engine_key)));
        let cached = cache_path
            .as_ref()
            .and_then(|(_, path)| cache::load(&shared.engine, path));
        let cache_hit = cached.is_some();
        let component = match cached {
            Some(c) => {
                shared.cache_hits.fetch_add(1, Ordering::Relaxed);
                c
            }
            None => {
                // A component over the pool's per-component limits is
                // refused the same way whether it was compiled here or in
                // a separate process.
                let pool_share = |e: &wasmtime::Error| {
                    let message = format!("{e:#}");
                    (shared.config.pooling && message.contains("in the pooling allocator"))
                        .then_some(SandboxError::PoolShare(message))
                };
                let c = match compile {
                    None => Component::new(&shared.engine, bytes).map_err(|e| {
                        pool_share(&e).unwrap_or_else(|| SandboxError::Compile(format!("{e:#}")))
                    })?,
                    Some(compile) => cache::from_artifact(&shared.engine, &compile(bytes)?)
                        .map_err(|e| {
                            pool_share(&e).unwrap_or_else(|| {
                                SandboxError::Compile(format!(
                                    "the separately compiled artifact does not load ({e:#}); the compile process must run the same boxcar build with the same sandbox settings"
                                ))
                            })
                        })?,
                };
                shared.compiles.fetch_add(1, Ordering::Relaxed);
                if let Some((dir, path)) = &cache_path {
                    if let Err(e) = cache::store(dir, path, &c) {
                        tracing::warn!(error = %e, "compiled component not cached");
                    }
                }
                c
            }
        };
        let compile_time = started.elapsed();
        let pre = shared
            .linker
            .instantiate_pre(&component)
            .map_err(|e| SandboxError::World(format!("{e:#}")))?;
        let pre = HandlerPre::new(pre).map_err(|e| SandboxError::World(format!("{e:#}")))?;
        let report = LoadReport {
            digest: digest.clone(),
            cache_hit,
            compile_time,
            cache_path: cache_path.map(|(_, p)| p),
        };
        let handler = LoadedHandler::new(
            Arc::clone(shared),
            pre,
            digest,
            Arc::new(limits),
            Arc::new(caps),
            report.clone(),
        );
        Ok((Arc::new(handler), report))
    }
}

/// Idle pool slots and the bytes they keep resident
/// ([`Sandbox::pool_residency`]): bounded by `SandboxConfig::warm_slots`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolResidency {
    /// Idle linear-memory slots that keep a module's mapping.
    pub warm_memories: u32,
    /// Bytes those memory slots keep resident.
    pub memory_bytes: usize,
    /// Idle table slots that keep a module's mapping.
    pub warm_tables: u32,
    /// Bytes those table slots keep resident.
    pub table_bytes: usize,
    /// Idle stack slots that have run a job.
    pub warm_stacks: u32,
    /// Bytes those stacks keep resident.
    pub stack_bytes: usize,
}

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
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};
use wasmtime::{
    component::{Component, HasSelf, Linker},
    Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

use crate::{
    bindings::{Handler as HandlerWorld, HandlerPre},
    cache,
    run::LoadedHandler,
    scratch,
    state::HostState,
    ticker::Ticker,
    Capabilities, HandlerLimits, SandboxConfig, SandboxError, ScratchMode,
};

/// Engine state shared by the sandbox and its loaded handlers.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) config: SandboxConfig,
    scratch_root: PathBuf,
    pub(crate) scratch_kind: scratch::Kind,
    engine_key: String,
    compiles: AtomicU64,
    cache_hits: AtomicU64,
    _ticker: Option<Ticker>,
}

impl Shared {
    /// The directory per-job scratch directories are created in.
    pub(crate) fn scratch_base(&self) -> PathBuf {
        self.scratch_root.clone()
    }
}

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

/// How a [`Sandbox::load`] went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    /// Hex sha256 of the component bytes (the handler's version).
    pub digest: String,
    /// True when the compiled code came from the on-disk cache.
    pub cache_hit: bool,
    /// Time spent compiling or loading the compiled code.
    pub compile_time: Duration,
    /// The cache file used, if caching is on.
    pub cache_path: Option<PathBuf>,
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
        let mut wc = wasmtime::Config::new();
        wc.wasm_component_model(true)
            .epoch_interruption(config.epoch_interruption)
            .consume_fuel(config.fuel)
            .max_wasm_stack(config.max_wasm_stack)
            .async_stack_size(config.max_wasm_stack.max(1 << 20) + (1 << 20));
        if config.pooling {
            let n = config.pool_instances;
            let mut pool = PoolingAllocationConfig::new();
            pool.total_component_instances(n)
                .total_core_instances(n.saturating_mul(8))
                .total_memories(n.saturating_mul(2))
                .total_tables(n.saturating_mul(4))
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
                .decommit_batch_size(8);
            wc.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
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
                engine,
                linker,
                config,
                scratch_root,
                scratch_kind,
                compiles: AtomicU64::new(0),
                cache_hits: AtomicU64::new(0),
                _ticker: ticker,
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

    /// Compiles (or loads from cache) and links a handler component.
    /// Blocking and CPU-heavy on a cache miss.
    ///
    /// # Errors
    /// [`SandboxError::Limits`] for invalid limits,
    /// [`SandboxError::Capabilities`] for an unusable grant (e.g. a missing
    /// directory), [`SandboxError::Compile`]
    /// when the bytes are not a component, [`SandboxError::World`] when it
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
        let digest = hex::encode(Sha256::digest(bytes));
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
                let c = Component::new(&shared.engine, bytes)
                    .map_err(|e| SandboxError::Compile(format!("{e:#}")))?;
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

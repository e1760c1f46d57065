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
    state::HostState,
    ticker::Ticker,
    Capabilities, HandlerLimits, SandboxConfig, SandboxError,
};

/// Turns component bytes into an artifact of [`precompile`](crate::precompile)
/// (see [`Sandbox::load_compiled_by`]).
pub type Compiler<'a> = dyn Fn(&[u8]) -> Result<Vec<u8>, SandboxError> + 'a;

/// Engine state shared by the sandbox and its loaded handlers.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) config: SandboxConfig,
    engine_key: String,
    compiles: AtomicU64,
    cache_hits: AtomicU64,
    _ticker: Option<Ticker>,
}

impl Shared {
    /// The directory per-job scratch directories are created in.
    pub(crate) fn scratch_base(&self) -> PathBuf {
        self.config
            .scratch_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("boxcar-scratch"))
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
    /// Validates `config`, builds the engine and linker, starts the ticker.
    ///
    /// # Errors
    /// [`SandboxError::Config`] for an invalid field, [`SandboxError::Engine`]
    /// when wasmtime refuses the settings (e.g. the pool cannot be reserved).
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        config.validate()?;
        let engine_err = |e: wasmtime::Error| SandboxError::Engine(format!("{e:#}"));
        let mut wc = crate::precompile::engine_config(&config.codegen());
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
        self.load_inner(bytes, limits, caps, None)
    }

    /// [`Sandbox::load_with_report`], but a cache miss is compiled by
    /// `compile` — typically [`precompile`](crate::precompile) in a separate
    /// process with memory and time limits — and its artifact loaded here.
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
        bytes: &[u8],
        limits: HandlerLimits,
        caps: Capabilities,
        compile: &Compiler<'_>,
    ) -> Result<(Arc<LoadedHandler>, LoadReport), SandboxError> {
        self.load_inner(bytes, limits, caps, Some(compile))
    }

    fn load_inner(
        &self,
        bytes: &[u8],
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
                let c = match compile {
                    None => Component::new(&shared.engine, bytes)
                        .map_err(|e| SandboxError::Compile(format!("{e:#}")))?,
                    Some(compile) => cache::from_artifact(&shared.engine, &compile(bytes)?)?,
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

//! `boxcar serve`: one host process. With `--handlers DIR` it deploys the
//! directory's handlers (and keeps watching it) and runs workers for them;
//! without it, it serves the API and maintenance only (a producer host).
//! A host that runs handlers also reconciles the configuration's
//! `[[schedules]]` at start and runs the scheduler service (every host may:
//! each tick is enqueued once fleet-wide), and records the types it serves
//! in the store under its worker id, refreshed by a heartbeat; every host
//! learns from the store which types some live host serves.
//! Stops gracefully on Ctrl-C or SIGTERM: no new claims, in-flight jobs get
//! `shutdown_grace`, then are aborted and their leases released.
//!
//! Invariants: the signal handlers are installed before anything else, so
//! a signal never meets its default action (which would leave claimed jobs
//! running until their leases expire): one that arrives while the host
//! prepares stops it before its first claim, one that arrives later starts
//! the graceful shutdown. Everything that can fail at start (deploys,
//! schedules, the API's listener) runs before the worker claims its first
//! job, so a failed start leaves no job claimed.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use boxcar_queue::{deployed::HEARTBEAT_INTERVAL, open_store, Queue, Registry, Scheduler, Worker};
use boxcar_sandbox::Sandbox;
use tokio_util::sync::CancellationToken;

use super::context::Context;
use crate::error::usage;
use crate::{
    api::{self, AppState, Metrics},
    cli::ServeArgs,
    config::{Config, DEFAULT_LISTEN},
    deploy::{compile::CompileBudget, Deployer},
    sandbox_glue,
};

/// A host ready to claim: everything that can fail at start is done.
struct Prepared {
    config: Config,
    queue: Queue,
    registry: Arc<Registry>,
    deployer: Option<Arc<Deployer>>,
    handlers_dir: Option<PathBuf>,
    metrics: Arc<Metrics>,
    token: Option<String>,
    /// The API's bound listener and the address asked for (`None`: `--no-api`).
    listener: Option<(tokio::net::TcpListener, SocketAddr)>,
    /// Reconciled, not yet started (a host that runs handlers).
    scheduler: Option<Scheduler>,
    /// Stops the deployer's watch, the heartbeat and the API.
    stop: CancellationToken,
}

pub async fn run(context: Context, args: ServeArgs) -> anyhow::Result<()> {
    let mut signals = ShutdownSignals::install()?;
    let prepared = tokio::select! {
        prepared = prepare(&context, args) => prepared?,
        () = signals.recv() => {
            tracing::info!("stopped while starting: no job was claimed");
            return Ok(());
        }
    };
    let Prepared {
        config,
        queue,
        registry,
        deployer,
        handlers_dir,
        metrics,
        token,
        listener,
        scheduler,
        stop,
    } = prepared;

    let worker = Worker::start(queue.clone(), registry.clone(), config.worker.clone())?;
    tracing::info!(
        worker_id = worker.worker_id(),
        db = %super::admin::redact(&context.db),
        handlers = ?handlers_dir,
        "boxcar host started"
    );
    let scheduler = scheduler.map(|s| s.start(config.worker.poll_interval));
    let api_task = listener.map(|(listener, address)| {
        let address = listener.local_addr().unwrap_or(address);
        let state = AppState {
            queue: queue.clone(),
            registry: registry.clone(),
            deployer: deployer.clone(),
            metrics,
            token,
            listen: Some(address),
        };
        tracing::info!(%address, "HTTP API listening");
        let stop_api = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, api::router(state))
                .with_graceful_shutdown(async move { stop_api.cancelled().await })
                .await
        })
    });

    signals.recv().await;
    tracing::info!("shutting down: no new claims; in-flight jobs get the shutdown grace");
    stop.cancel();
    if let Some(scheduler) = scheduler {
        scheduler.shutdown().await;
    }
    worker.shutdown().await;
    if let Some(task) = api_task {
        let _ = task.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Everything before the first claim: the store, deploys, schedules and
/// the API's listener.
async fn prepare(context: &Context, args: ServeArgs) -> anyhow::Result<Prepared> {
    let mut config = context.config.clone();
    if let Some(worker_id) = args.worker_id {
        config.worker.worker_id = worker_id;
    }
    config.validate()?;
    let handlers_dir = args.handlers.or(config.handlers.clone());
    let listen = args
        .listen
        .or(config.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    let token = args.token.or(config.token.clone());
    let address: SocketAddr = listen.parse().map_err(|e| {
        usage(format!(
            "--listen `{listen}` is not an address like 127.0.0.1:7878 ({e})"
        ))
    })?;
    if !address.ip().is_loopback() && token.is_none() && !args.no_api {
        return Err(usage(format!(
            "--listen {address} is not a loopback address: set a token (--token or BOXCAR_TOKEN) so the API is not open to the network"
        )));
    }

    let store = open_store(&context.db).await?;
    if !args.no_migrate {
        store.migrate().await?;
    }
    let queue = Queue::new(store, config.queue.clone())?;
    let metrics = Arc::new(Metrics::default());
    queue.observe(metrics.clone());

    let registry = Registry::new();
    registry.set_host_id(config.worker.worker_id.clone());
    registry.declare_elsewhere(config.handled_elsewhere.iter().cloned());
    registry.set_pools(config.pools.clone())?;
    let stop = CancellationToken::new();

    let deployer = match &handlers_dir {
        None => None,
        Some(dir) => {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "--handlers {}: not a directory; create it (mkdir -p) and drop NAME.wasm + NAME.toml pairs into it",
                    dir.display()
                )));
            }
            let sandbox = Arc::new(Sandbox::new(sandbox_glue::sandbox_config(&config.sandbox))?);
            let deployer = Deployer::new(
                dir.clone(),
                sandbox,
                registry.clone(),
                queue.clone(),
                CompileBudget::from_settings(&config.sandbox),
            );
            deployer.protect_database(&context.db);
            deployer.reconcile().await;
            tokio::spawn(deployer.clone().watch(stop.clone()));
            Some(deployer)
        }
    };
    tokio::spawn(give_back_freed_c_heap(stop.clone()));
    tokio::spawn(heartbeat(
        queue.clone(),
        registry.clone(),
        deployer.is_some(),
        stop.clone(),
    ));

    let scheduler = match &handlers_dir {
        None => None,
        Some(_) => {
            let scheduler = Scheduler::new(queue.clone());
            let report = scheduler
                .reconcile(&config.schedules_owner, &config.schedules)
                .await?;
            tracing::info!(
                created = ?report.created,
                updated = ?report.updated,
                removed = ?report.removed,
                declared = config.schedules.len(),
                "schedules reconciled"
            );
            Some(scheduler)
        }
    };

    let listener = if args.no_api {
        None
    } else {
        let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {address}: {e}; is another boxcar running there? use --listen"
            )
        })?;
        Some((listener, address))
    };
    Ok(Prepared {
        config,
        queue,
        registry,
        deployer,
        handlers_dir,
        metrics,
        token,
        listener,
        scheduler,
        stop,
    })
}

/// Every few seconds: a host that runs handlers records what it serves (its
/// heartbeat in the store's deployed types), and every host learns which
/// types some live host serves (for its enqueue checks).
async fn heartbeat(queue: Queue, registry: Arc<Registry>, serves: bool, stop: CancellationToken) {
    loop {
        if serves {
            if let Err(error) = queue.record_deployed_types(&registry).await {
                tracing::warn!(%error, "could not record the deployed job types");
            }
        }
        if let Err(error) = queue.refresh_known_types(&registry).await {
            tracing::debug!(%error, "could not refresh the known job types");
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(HEARTBEAT_INTERVAL) => {}
        }
    }
}

/// How often a host returns the C heap's free pages to the system.
const C_HEAP_TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Every [`C_HEAP_TRIM_INTERVAL`]: the pages SQLite's churn left free in
/// glibc's arenas go back to the system (see
/// [`crate::allocator::give_back_freed_c_heap`]), so a burst of jobs does
/// not leave the host's memory raised.
async fn give_back_freed_c_heap(stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(C_HEAP_TRIM_INTERVAL) => {}
        }
        match tokio::task::spawn_blocking(crate::allocator::give_back_freed_c_heap).await {
            Ok(0) => {}
            Ok(free) => tracing::trace!(free, "returned the C heap's free pages"),
            Err(error) => tracing::warn!(%error, "trimming the C heap failed"),
        }
    }
}

/// Ctrl-C (SIGINT) and SIGTERM, caught from the moment [`install`] returns:
/// a signal that arrives before [`recv`] is awaited is kept, not lost and
/// not left to its default action.
///
/// [`install`]: ShutdownSignals::install
/// [`recv`]: ShutdownSignals::recv
struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Replaces the default actions of SIGINT and SIGTERM with this
    /// listener.
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let listen = |kind: SignalKind, name: &str| {
                signal(kind).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot install the {name} handler for a graceful shutdown: {e}"
                    )
                })
            };
            Ok(Self {
                interrupt: listen(SignalKind::interrupt(), "SIGINT")?,
                terminate: listen(SignalKind::terminate(), "SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// Waits for the first shutdown signal (returns at once if one already
    /// arrived).
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => {}
                _ = self.terminate.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

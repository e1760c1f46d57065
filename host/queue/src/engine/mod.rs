//! The engine: one dispatcher per process claims jobs for the registered
//! types, runs each under its deadline with lease renewal, and writes the
//! outcome through the port; maintenance services reconcile, rescue and
//! prune.
//!
//! Invariants:
//! - Per-type concurrency counts handler runs of this process; a slot is
//!   freed only after the run's outcome has been handed to the store writer.
//! - Every write after a claim is fenced on this worker's lease; an aborted
//!   run never writes over a cancel (the cancel already made the row
//!   terminal, and the fence rejects the write).
//! - Shutdown stops claiming, waits `shutdown_grace`, aborts the rest and
//!   releases their leases (attempt given back).

mod backoff;
mod claim_ahead;
mod completer;
mod dispatch;
mod due_set;
#[doc(hidden)]
pub mod fuzzing;
mod handler_output;
mod maintenance;
mod replay;
mod run;
mod run_span;
mod scheduler;
mod services;
mod start_announcement;
mod supervise;
mod unstorable;
#[cfg(test)]
pub(crate) mod unstorable_tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use handler_output::INVALID_OUTPUT;
pub use maintenance::Maintenance;
pub use replay::{replay, DryEnqueue, Replay, ReplayRequest};
pub use run_span::TARGET as RUN_SPAN_TARGET;
pub use scheduler::{FiredTick, Scheduler, SchedulerHandle};
pub use services::guest_dedupe_key;
pub use unstorable::UNSTORABLE_OUTCOME;

use crate::inflight::AbortReason;
use crate::options::{OptionsError, WorkerOptions};
use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::{JobStore, ReleaseParams};

/// How long shutdown waits for aborted runs' release writes after
/// `abandon_grace`.
const RELEASE_WRITE_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) struct Engine {
    queue: Queue,
    store: Arc<dyn JobStore>,
    registry: Arc<Registry>,
    opts: WorkerOptions,
    running: Mutex<HashMap<String, TypeLoad>>,
    /// See [`Engine::runs_in_flight`].
    executing: AtomicU32,
    slot_freed: Notify,
    stop_claiming: CancellationToken,
    runs: TaskTracker,
    completions: mpsc::Sender<completer::Done>,
}

/// One run counted in [`Engine::runs_in_flight`]; dropped before the run
/// hands its outcome over, or when it ends.
struct Executing<'a>(&'a AtomicU32);

impl Drop for Executing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A type's runs in this process.
#[derive(Default)]
struct TypeLoad {
    /// Slots taken.
    running: u32,
    /// Average duration of its finished runs (claim-ahead sizing).
    average_run: Option<std::time::Duration>,
}

impl Engine {
    fn running_of(&self, job_type: &str) -> u32 {
        self.running.lock().get(job_type).map_or(0, |l| l.running)
    }

    fn average_run_of(&self, job_type: &str) -> Option<std::time::Duration> {
        self.running
            .lock()
            .get(job_type)
            .and_then(|l| l.average_run)
    }

    /// Runs of this process whose outcome has not been handed to the
    /// outcome writer yet.
    fn runs_in_flight(&self) -> u32 {
        self.executing.load(Ordering::SeqCst)
    }

    /// Counts a run in [`Engine::runs_in_flight`] until the guard drops.
    fn executing(&self) -> Executing<'_> {
        self.executing.fetch_add(1, Ordering::SeqCst);
        Executing(&self.executing)
    }

    fn take_slots(&self, job_type: &str, n: u32) {
        let mut load = self.running.lock();
        let load = load.entry(job_type.to_string()).or_default();
        load.running = load.running.saturating_add(n);
    }

    /// Gives a local slot back (folding the run's duration, when it ran,
    /// into the type's average) and wakes the dispatcher.
    fn free_slot(&self, job_type: &str, ran: Option<std::time::Duration>) {
        if let Some(load) = self.running.lock().get_mut(job_type) {
            load.running = load.running.saturating_sub(1);
            if let Some(ran) = ran {
                load.average_run = Some(claim_ahead::average_with(load.average_run, ran));
            }
        }
        self.slot_freed.notify_one();
    }
}

/// Starts engines.
pub struct Worker;

impl Worker {
    /// Validates `opts`, attaches `registry` to `queue` (known-type checks)
    /// and starts the dispatcher, the outcome writer and the maintenance
    /// services. Needs a tokio runtime.
    ///
    /// # Errors
    /// An option is invalid (named in the error).
    pub fn start(
        queue: Queue,
        registry: Arc<Registry>,
        opts: WorkerOptions,
    ) -> Result<WorkerHandle, OptionsError> {
        opts.validate()?;
        queue.attach_registry(registry.clone());
        for w in registry.warnings() {
            tracing::warn!("{w}");
        }
        let (tx, rx) = mpsc::channel(completer::CAPACITY);
        let engine = Arc::new(Engine {
            store: queue.store().clone(),
            queue,
            registry,
            opts,
            running: Mutex::new(HashMap::new()),
            executing: AtomicU32::new(0),
            slot_freed: Notify::new(),
            stop_claiming: CancellationToken::new(),
            runs: TaskTracker::new(),
            completions: tx,
        });
        let stop_writer = CancellationToken::new();
        let stop_maintenance = CancellationToken::new();
        let writer = tokio::spawn(completer::run(engine.clone(), rx, stop_writer.clone()));
        let dispatcher = tokio::spawn(dispatch::run(engine.clone()));
        let maintenance = Maintenance {
            engine: engine.clone(),
        };
        let maint = tokio::spawn(maintenance.clone().run(stop_maintenance.clone()));
        Ok(WorkerHandle {
            engine,
            maintenance,
            dispatcher,
            writer,
            maint,
            stop_writer,
            stop_maintenance,
        })
    }
}

/// A running engine. Call [`WorkerHandle::shutdown`] to stop it gracefully.
pub struct WorkerHandle {
    engine: Arc<Engine>,
    maintenance: Maintenance,
    dispatcher: JoinHandle<()>,
    writer: JoinHandle<()>,
    maint: JoinHandle<()>,
    stop_writer: CancellationToken,
    stop_maintenance: CancellationToken,
}

impl WorkerHandle {
    /// This worker's lease owner id.
    pub fn worker_id(&self) -> &str {
        &self.engine.opts.worker_id
    }

    /// Wakes the dispatcher (an in-process enqueue does this already).
    pub fn wake(&self) {
        self.engine.queue.wake();
    }

    /// Number of jobs this process holds a claim on: those running and
    /// those claimed ahead, waiting for a free slot.
    pub fn in_flight(&self) -> usize {
        self.engine.queue.inflight().len()
    }

    /// The maintenance services, for tests and admin tools (`run_once`).
    pub fn maintenance(&self) -> &Maintenance {
        &self.maintenance
    }

    /// Stops claiming, lets in-flight runs finish for `shutdown_grace`,
    /// aborts the rest and releases their leases, then flushes outcomes.
    pub async fn shutdown(self) {
        let e = &self.engine;
        e.stop_claiming.cancel();
        let _ = self.dispatcher.await;
        e.runs.close();
        if tokio::time::timeout(e.opts.shutdown_grace, e.runs.wait())
            .await
            .is_err()
        {
            e.queue.inflight().abort_all(AbortReason::Shutdown);
            // Runs stop waiting for their handler after abandon_grace, then
            // write their release; allow that write some time as well.
            let _ = tokio::time::timeout(
                e.opts.abandon_grace + RELEASE_WRITE_ALLOWANCE,
                e.runs.wait(),
            )
            .await;
            let stuck = e.queue.inflight().claims();
            if !stuck.is_empty() {
                tracing::warn!(
                    count = stuck.len(),
                    "runs did not stop within abandon_grace; releasing their leases"
                );
                if let Err(err) = e
                    .store
                    .release(ReleaseParams {
                        worker_id: e.opts.worker_id.clone(),
                        claims: stuck,
                    })
                    .await
                {
                    tracing::error!(error = %err, "releasing leases at shutdown failed; they will be rescued after expiry");
                }
            }
        }
        self.stop_writer.cancel();
        let _ = self.writer.await;
        self.stop_maintenance.cancel();
        let _ = self.maint.await;
    }
}

//! [`LoadedHandler`]: one linked handler version, and running one job on it.
//!
//! Invariants:
//! - Every job gets a fresh `Store` (thrown away afterwards, also after a
//!   trap) with the handler's limits, and an epoch deadline set *before*
//!   instantiation, so even a start function is interruptible.
//! - The epoch callback stops the guest within one tick of the deadline, of
//!   `ctx.cancel` or of `ctx.lease` lapsing; no guest code (start function
//!   or call) begins once cancel fired or the lease lapsed; otherwise it yields to the async runtime, so a guest
//!   that never returns cannot block a host thread.
//! - A run stuck inside a host call is dropped at the deadline or cancel;
//!   how long a caller waits for an aborted handler is the queue engine's
//!   `abandon_grace`, not the sandbox's.
//! - A guest that answers with an error after cancel (or the deadline) —
//!   typically because `cancelled()` told it to stop — ends `Cancelled`
//!   (`TimedOut`); a success that lands is kept.
//! - Every ending is an [`Outcome`]; nothing here panics on guest input.
//! - A job that finds the instance pool full was not run: it ends
//!   `Retryable` without using an attempt (back-pressure, not a failure).
//! - The WASI context holds exactly the granted env vars and directories;
//!   a granted scratch directory is created empty for the job, held to its
//!   size cap while the job runs and checked once more when the guest
//!   answers (a guest over its cap never succeeds), and removed after the
//!   store is dropped, however the job ended (see [`crate::scratch`]).

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use boxcar_queue::{Handler, JobContext, JobRun, LimitKind, Outcome};
use chrono::Utc;
use futures::future::BoxFuture;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::{FsPerms, ResourceTable, WasiCtxBuilder};
use wasmtime_wasi_http::WasiHttpCtx;

use crate::{
    bindings::{boxcar::handler::types as wit, HandlerPre},
    config::{DirMode, SCRATCH_GUEST_PATH},
    http::{HttpOrigin, HttpPolicy},
    output::{truncate, GuestOutput, LogLimitReached, LogSink},
    scratch::Scratch,
    shared::Shared,
    state::{HostState, Interrupt, LimitHit, Limiter},
    Capabilities, HandlerLimits,
};

/// Longest error message kept from a guest.
const MAX_MESSAGE: usize = 8 << 10;

/// How long a job that found the instance pool full waits (at least)
/// before the queue offers it again.
const POOL_FULL_RETRY: Duration = Duration::from_millis(100);

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

/// A compiled, linked handler version. Cheap to share; in-flight jobs keep
/// it alive after a redeploy replaces it. Cloning is cheap (shared parts).
#[derive(Clone)]
pub struct LoadedHandler {
    shared: Arc<Shared>,
    pre: HandlerPre<HostState>,
    digest: String,
    limits: Arc<HandlerLimits>,
    caps: Arc<Capabilities>,
    http_allowed: Arc<[HttpOrigin]>,
    report: LoadReport,
}

impl LoadedHandler {
    pub(crate) fn new(
        shared: Arc<Shared>,
        pre: HandlerPre<HostState>,
        digest: String,
        limits: Arc<HandlerLimits>,
        caps: Arc<Capabilities>,
        report: LoadReport,
    ) -> Self {
        let http_allowed = caps.http.iter().cloned().collect();
        Self {
            shared,
            pre,
            digest,
            limits,
            caps,
            http_allowed,
            report,
        }
    }

    /// Hex sha256 of the component bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The limits every job of this handler runs under.
    pub fn limits(&self) -> &HandlerLimits {
        &self.limits
    }

    /// The capabilities granted to this handler.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// How the load went (cache hit, compile time).
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    /// Runs one job to an outcome. Returns within about one epoch tick of
    /// `job.deadline` (`TimedOut`) or of `ctx.cancel` firing (`Cancelled`).
    /// Must be polled inside a tokio runtime with the time driver enabled.
    pub async fn run(&self, job: JobRun, ctx: JobContext) -> Outcome {
        let remaining = (job.deadline - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        if remaining.is_zero() {
            return Outcome::TimedOut;
        }
        if ctx.cancel.is_cancelled() || ctx.lease.has_lapsed() {
            return Outcome::Cancelled;
        }
        let deadline = Instant::now() + remaining;
        let cancel = ctx.cancel.clone();
        tokio::select! {
            biased;
            () = cancel.cancelled() => Outcome::Cancelled,
            () = tokio::time::sleep_until(deadline.into()) => Outcome::TimedOut,
            outcome = self.execute(job, ctx, deadline) => outcome,
        }
    }

    async fn execute(&self, job: JobRun, ctx: JobContext, deadline: Instant) -> Outcome {
        // First in, so dropped last: the epoch advances until the store
        // (and with it any guest code) is gone.
        let _ticking = self.shared.ticking();
        let log = Arc::new(
            LogSink::new(
                Arc::from(job.id.as_str()),
                Arc::from(job.job_type.as_str()),
                self.limits.max_log,
                self.limits.max_log_line,
                self.limits.max_log_lines,
            )
            .recording(Arc::clone(&ctx.record)),
        );
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(GuestOutput::stdout(Arc::clone(&log)))
            .stderr(GuestOutput::stderr(Arc::clone(&log)))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for (name, value) in &self.caps.env {
            wasi.env(name, value);
        }
        for dir in &self.caps.dirs {
            let perms = match dir.mode {
                DirMode::ReadOnly => FsPerms::ReadOnly,
                DirMode::ReadWrite => FsPerms::ReadWrite,
            };
            if let Err(e) = wasi.preopened_dir(&dir.host, &dir.guest, perms) {
                return host_error(
                    &format!("opening the granted directory {}", dir.host.display()),
                    &e,
                );
            }
        }
        // Declared before the store, so a dropped run drops the store (and
        // the guest's open files) first.
        let scratch = match self.caps.scratch {
            None => None,
            Some(cap) => match self.make_scratch(&mut wasi, cap) {
                Ok(scratch) => Some(scratch),
                Err(outcome) => return outcome,
            },
        };
        let state = HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: Limiter::new(
                &self.limits,
                self.shared.config.job_memories as usize,
                Arc::clone(&ctx.record),
            ),
            log: Arc::clone(&log),
            services: ctx.services,
            limits: Arc::clone(&self.limits),
            cancel: ctx.cancel,
            lease: ctx.lease,
            deadline,
            enqueues: 0,
            http: WasiHttpCtx::new(),
            http_policy: HttpPolicy {
                allowed: Arc::clone(&self.http_allowed),
                max_body: self.limits.max_http_body,
                deadline,
                log: Arc::clone(&log),
            },
        };
        let mut store = Store::new(&self.shared.engine, state);
        store.limiter(|s| &mut s.limiter);
        if self.shared.config.fuel {
            if let Err(e) = store.set_fuel(self.limits.fuel.unwrap_or(u64::MAX)) {
                return host_error("setting fuel", &e);
            }
        }
        if self.shared.config.epoch_interruption {
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(|ctx| {
                let state = ctx.data();
                if state.must_stop() {
                    return Err(wasmtime::Error::new(Interrupt::Cancelled));
                }
                if Instant::now() >= state.deadline {
                    return Err(wasmtime::Error::new(Interrupt::TimedOut));
                }
                Ok(UpdateDeadline::Yield(1))
            });
        }
        let Some(active) = scratch.as_ref() else {
            return self.drive(&mut store, job, &log, deadline).await;
        };
        let outcome = tokio::select! {
            biased;
            outcome = self.drive(&mut store, job, &log, deadline) => outcome,
            outcome = active.watch() => {
                log.flush();
                outcome
            }
        };
        // Measured while the guest's files are still open: a file it
        // deleted but holds counts until the store goes.
        let outcome = match outcome {
            Outcome::Succeeded { .. }
            | Outcome::Retryable { .. }
            | Outcome::Terminal { .. }
            | Outcome::Trapped { .. } => active.check().await.unwrap_or(outcome),
            other => other,
        };
        drop(store);
        if let Some(scratch) = scratch {
            scratch.teardown().await;
        }
        outcome
    }

    /// Instantiates and calls the handler in `store`.
    async fn drive(
        &self,
        store: &mut Store<HostState>,
        job: JobRun,
        log: &LogSink,
        deadline: Instant,
    ) -> Outcome {
        // Checked right before guest code first runs (a start function,
        // then the call): a run whose lease lapsed while this process was
        // paused must not take a step.
        if store.data().must_stop() {
            return Outcome::Cancelled;
        }
        let instance = match self.pre.instantiate_async(&mut *store).await {
            Ok(i) => i,
            Err(e) => {
                log.flush();
                return classify(&e, store, "instantiating the handler");
            }
        };
        let wit_job = to_wit(job);
        if store.data().must_stop() {
            return Outcome::Cancelled;
        }
        let call_started = Instant::now();
        let called = instance.call_handle(&mut *store, &wit_job).await;
        if let Some(record) = log.record() {
            record.set_guest_time(call_started.elapsed());
        }
        log.flush();
        if self.shared.config.fuel {
            if let (Ok(left), Some(record)) = (store.get_fuel(), log.record()) {
                let given = self.limits.fuel.unwrap_or(u64::MAX);
                record.set_fuel(given.saturating_sub(left));
            }
        }
        match called {
            Ok(Err(_)) if store.data().must_stop() => Outcome::Cancelled,
            Ok(Err(_)) if Instant::now() >= deadline => Outcome::TimedOut,
            Ok(answer) => self.answer(answer),
            Err(e) => classify(&e, store, "running the handler"),
        }
    }

    /// Creates the job's empty scratch directory and preopens it at `/tmp`.
    fn make_scratch(&self, wasi: &mut WasiCtxBuilder, cap: u64) -> Result<Scratch, Outcome> {
        let base = self.shared.scratch_base();
        let scratch = Scratch::create(&base, self.shared.scratch_kind, cap).map_err(|e| {
            Outcome::HostError {
                message: format!(
                    "creating the job's scratch directory in {}: {e}; check that it exists and is writable (SandboxConfig::scratch_dir)",
                    base.display()
                ),
            }
        })?;
        let Some(path) = scratch.path() else {
            return Err(Outcome::HostError {
                message: "the job's scratch directory was removed before the job started".into(),
            });
        };
        wasi.preopened_dir(path, SCRATCH_GUEST_PATH, FsPerms::ReadWrite)
            .map_err(|e| host_error("opening the job's scratch directory", &e))?;
        Ok(scratch)
    }

    /// Maps the guest's own answer, enforcing result sizes.
    fn answer(&self, answer: Result<Option<String>, wit::JobError>) -> Outcome {
        guest_answer(self.limits.max_result, answer)
    }
}

/// Maps the guest's own answer, enforcing result sizes (`max` is
/// `max_result`); messages are cut at [`MAX_MESSAGE`] and codes at 256
/// bytes, on character boundaries.
pub(crate) fn guest_answer(max: usize, answer: Result<Option<String>, wit::JobError>) -> Outcome {
    let too_big = |what: &str, len: usize| Outcome::LimitExceeded {
        which: LimitKind::ResultSize,
        detail: format!("{what} of {len} bytes exceeds max_result ({max} bytes)"),
    };
    match answer {
        Ok(Some(result)) if result.len() > max => too_big("the result", result.len()),
        Ok(result) => Outcome::Succeeded { result },
        Err(wit::JobError::Retryable(r)) => Outcome::Retryable {
            message: truncate(&r.message, MAX_MESSAGE).to_string(),
            retry_after: r.retry_after_ms.map(Duration::from_millis),
            consumes_attempt: r.consumes_attempt,
        },
        Err(wit::JobError::Terminal(t)) => match t.details {
            Some(d) if d.len() > max => too_big("the error details", d.len()),
            details => Outcome::Terminal {
                message: truncate(&t.message, MAX_MESSAGE).to_string(),
                code: t.code.map(|c| truncate(&c, 256).to_string()),
                details,
            },
        },
    }
}

/// Turns a failed instantiate or call into the outcome it stands for.
fn classify(e: &wasmtime::Error, store: &mut Store<HostState>, doing: &str) -> Outcome {
    let state = store.data_mut();
    if let Some(outcome) = state.limiter.violation.take() {
        return outcome;
    }
    if state.log.exceeded() || e.downcast_ref::<LogLimitReached>().is_some() {
        return Outcome::LimitExceeded {
            which: LimitKind::LogVolume,
            detail: format!(
                "more than max_log ({} bytes, {} per line) or max_log_lines ({}) of log output; {} bytes in {} lines were written",
                state.log.limit(),
                crate::output::LINE_OVERHEAD,
                state.log.line_limit(),
                state.log.used(),
                state.log.lines()
            ),
        };
    }
    if let Some(hit) = e.downcast_ref::<LimitHit>() {
        return hit.0.clone();
    }
    if let Some(i) = e.downcast_ref::<Interrupt>() {
        return match i {
            Interrupt::TimedOut => Outcome::TimedOut,
            Interrupt::Cancelled => Outcome::Cancelled,
        };
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        return match trap {
            Trap::OutOfFuel => Outcome::FuelExhausted,
            Trap::Interrupt => Outcome::TimedOut,
            Trap::StackOverflow => Outcome::Trapped {
                message: format!("stack overflow ({trap})"),
            },
            _ => {
                let tail = state.log.stderr_tail();
                let message = if tail.is_empty() {
                    trap.to_string()
                } else {
                    format!("{trap}; guest stderr: {tail}")
                };
                Outcome::Trapped { message }
            }
        };
    }
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return Outcome::Trapped {
            message: format!("the guest exited with status {}", exit.0),
        };
    }
    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        return Outcome::Retryable {
            message: format!(
                "{doing}: the instance pool is full; the job was not run and keeps its attempt ({e}); raise SandboxConfig::pool_instances or lower handler concurrency"
            ),
            retry_after: Some(POOL_FULL_RETRY),
            consumes_attempt: false,
        };
    }
    host_error(doing, e)
}

fn host_error(doing: &str, e: &wasmtime::Error) -> Outcome {
    Outcome::HostError {
        message: format!("{doing}: {e:#}"),
    }
}

fn to_wit(job: JobRun) -> wit::Job {
    wit::Job {
        id: job.id,
        job_type: job.job_type,
        payload: job.payload,
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        scope: job.scope.map(|s| wit::Scope {
            scope_type: s.scope_type,
            scope_id: s.scope_id,
        }),
        schedule_id: job.schedule_id,
        parent_id: job.parent_id,
        deadline_ms: u64::try_from(job.deadline.timestamp_millis()).unwrap_or(0),
    }
}

impl Handler for LoadedHandler {
    fn handle(&self, job: JobRun, ctx: JobContext) -> BoxFuture<'static, Outcome> {
        let this = self.clone();
        Box::pin(async move { this.run(job, ctx).await })
    }

    fn version(&self) -> String {
        self.digest.clone()
    }
}
